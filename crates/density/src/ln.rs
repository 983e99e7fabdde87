//! `ln(x)`, the natural logarithm, on the widest SIMD the CPU has and with the same bits on
//! every path.
//!
//! Why its own kernels: a log-likelihood takes one logarithm per row (max + ln Σ_c e_c), and
//! the standard library's is scalar: Gaussian NB's `log_likelihood` at n = 1e6, d = 2, K = 2
//! took 11.6–13.2 ms against 3.1 ms for its `predict_proba`, a third of the samples in
//! `__ieee754_log_fma` (BENCHMARKS.md, ninety-first round). With these kernels it took 6.0–6.2
//! ms against 9.8–10.5 (ninety-third round, before its terms stopped being kept), and
//! `predict_log_proba` 3.5 against 6.9 ms. The vector kernels must give the scalar path's bits,
//! since which rows take which path depends on the block's shape.
//!
//! Method (glibc's `log` with a smaller table, the same arithmetic on every path): x = 2^k · z
//! with z in [0.6875, 1.375), read from the bits of x − 0.6875's; the four bits after z's
//! leading one pick one of 16 intervals (1/32 wide below 1, 1/16 above), each with a centre c
//! whose 1/c is `INVERSE[i]` (1 exactly for the two intervals beside 1, so that ln x near 1 is
//! not the difference of two larger numbers); r = z · (1/c) − 1 in one fused multiply-add,
//! |r| ≤ 1/16; and ln x = k · ln 2 + ln c + r + r² · P(r), ln 2 and ln c each in two parts
//! (k · LN2_HI is exact), the first sums added as glibc adds them so that their rounding error
//! is carried. Vector kernels read the table with `vpermi2pd` (AVX-512) or a gather (AVX2).
//!
//! Accuracy: P (degree 9) interpolates (ln(1 + r) − r)/r² at the ten Chebyshev nodes of
//! [−1/32, 1/16], rounded to f64; in 60-digit arithmetic r + r² · P(r) is then within 0.008
//! units in the last place of ln(1 + r) there. The table's ln c are −ln(1/c) of the rounded
//! 1/c, to 106 bits. The results were within 1 ulp of libm's `ln` in the tests (which assert
//! it): on 2 million arguments spread over [1, 10], 79% had libm's bits and the rest were 1 ulp
//! from them. Zero, negative, subnormal and non-finite arguments take libm's `ln` on every path.
#![allow(clippy::excessive_precision, clippy::unreadable_literal)]

use crate::exp::{Isa, isa};

/// 0.6875: x's bits less these give k in the top 12 bits and z's interval in the next 4.
const OFFSET: u64 = 0x3fe6_0000_0000_0000;
/// ln 2 = LN2_HI + LN2_LO; LN2_HI has 11 trailing zero bits, so k · LN2_HI is exact for every
/// |k| ≤ 1075.
const LN2_HI: f64 = 0.6931471805598903;
const LN2_LO: f64 = 5.497923018708371e-14;
/// 1/c for each interval's centre c, rounded (1 for the two intervals beside 1).
const INVERSE: [f64; 16] = [
    1.4222222222222223,
    1.3617021276595744,
    1.3061224489795917,
    1.2549019607843137,
    1.2075471698113207,
    1.1636363636363636,
    1.1228070175438596,
    1.0847457627118644,
    1.0491803278688525,
    1.0,
    1.0,
    0.9142857142857143,
    0.8648648648648649,
    0.8205128205128205,
    0.7804878048780488,
    0.7441860465116279,
];
/// −ln(`INVERSE[i]`) = LOG_C_HI[i] + LOG_C_LO[i].
const LOG_C_HI: [f64; 16] = [
    -0.35222059358935215,
    -0.30873548164961323,
    -0.26706278524904514,
    -0.22705745063534608,
    -0.18859116980754997,
    -0.15154989812720088,
    -0.11583181552512165,
    -0.0813456394539524,
    -0.04800921918636066,
    0.0,
    0.0,
    0.08961215868968717,
    0.14518200984449783,
    0.19782574332991992,
    0.2478361639045812,
    0.2954642128938359,
];
const LOG_C_LO: [f64; 16] = [
    1.1623903064849822e-17,
    -1.5025836482434425e-17,
    -2.3896107240262357e-17,
    4.326372045075968e-18,
    -9.915070540571144e-18,
    -1.2105853272368787e-17,
    -4.3384843698080944e-18,
    -1.6076294039775555e-18,
    2.030356617224395e-18,
    0.0,
    0.0,
    -1.9573659817110993e-18,
    8.242418783022477e-18,
    -7.995487338741543e-18,
    8.384472133019162e-18,
    -7.768320796245443e-18,
];
/// P(r) ≈ (ln(1 + r) − r) / r², lowest degree first (see the module docs).
const P: [f64; 10] = [
    -0.5,
    0.33333333333333376,
    -0.25000000000018174,
    0.1999999999980953,
    -0.16666666590130597,
    0.14285713842652514,
    -0.12500104591721953,
    0.11112868129847008,
    -0.09961767832849687,
    0.07922051730045795,
];
/// 2^52: k + 2048 (0 to 4095) in the low bits of its mantissa make the double 2^52 + k + 2048,
/// and less [`K_MAGIC`] that is k, exactly.
const TWO_52: f64 = 4_503_599_627_370_496.0;
/// 2^52 + 2048.
const K_MAGIC: f64 = 4_503_599_627_372_544.0;

/// Whether x takes the kernels' formula: positive, normal and finite (else libm's `ln`).
#[inline(always)]
fn in_range(x: f64) -> bool {
    (f64::MIN_POSITIVE..=f64::MAX).contains(&x)
}

/// The natural logarithm of x, within 1 ulp of libm's in tests, the same bits as
/// [`ln_in_place`]'s vector kernels; zero, negative, subnormal, infinite and NaN arguments give
/// libm's `ln`.
#[inline(always)]
pub fn ln(x: f64) -> f64 {
    if !in_range(x) {
        return x.ln();
    }
    let bits = x.to_bits();
    let tmp = bits.wrapping_sub(OFFSET);
    let i = ((tmp >> 48) & 15) as usize;
    // k in twelve-bit two's complement, made a double exactly (as the vector kernels do).
    let k = f64::from_bits(TWO_52.to_bits() | ((tmp >> 52) ^ 0x800)) - K_MAGIC;
    let z = f64::from_bits(bits.wrapping_sub(tmp & (0xfff << 52)));
    let r = z.mul_add(INVERSE[i], -1.0);
    let w = k.mul_add(LN2_HI, LOG_C_HI[i]);
    let hi = w + r;
    let lo = ((w - hi) + r) + k.mul_add(LN2_LO, LOG_C_LO[i]);
    let mut p = P[9];
    for &c in P[..9].iter().rev() {
        p = p.mul_add(r, c);
    }
    (r * r).mul_add(p, lo) + hi
}

/// `values[i] = ln(values[i])` ([`ln`]), on the widest kernel the CPU has.
pub fn ln_in_place(values: &mut [f64]) {
    ln_in_place_on(isa(), values)
}

/// [`ln_in_place`] on the kernel `isa`.
fn ln_in_place_on(isa: Isa, values: &mut [f64]) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::V4(simd) => simd.vectorize(InPlace { simd, values }),
        #[cfg(target_arch = "x86_64")]
        Isa::V3(simd) => simd.vectorize(InPlace { simd, values }),
        Isa::Scalar => values.iter_mut().for_each(|v| *v = ln(*v)),
    }
}

/// [`ln`] on whole vectors of `S`, the rest one by one.
struct InPlace<'a, S> {
    simd: S,
    values: &'a mut [f64],
}

impl<S: VectorLn> pulp::NullaryFnOnce for InPlace<'_, S> {
    type Output = ();

    #[inline(always)]
    fn call(self) {
        let (head, tail) = S::as_mut_simd_f64s(self.values);
        for v in head {
            *v = self.simd.ln_f64s(*v);
        }
        tail.iter_mut().for_each(|v| *v = ln(*v));
    }
}

/// A SIMD type with a whole-vector [`ln`].
trait VectorLn: pulp::Simd {
    /// [`ln`] on every lane.
    fn ln_f64s(self, x: Self::f64s) -> Self::f64s;
}

/// r + r² · P(r) + lo (r2 = r · r), Horner's rule in the scalar path's order.
#[inline(always)]
fn series<S: pulp::Simd>(simd: S, r: S::f64s, r2: S::f64s, lo: S::f64s) -> S::f64s {
    let mut p = simd.splat_f64s(P[9]);
    for &c in P[..9].iter().rev() {
        p = simd.mul_add_f64s(p, r, simd.splat_f64s(c));
    }
    simd.mul_add_f64s(r2, p, lo)
}

/// The lanes of `y` whose `x` is out of [`in_range`] replaced by libm's `ln` (called only for a
/// vector with such a lane).
#[inline(always)]
fn patch<const L: usize>(x: [f64; L], mut y: [f64; L]) -> [f64; L] {
    for (y, x) in y.iter_mut().zip(x) {
        if !in_range(x) {
            *y = x.ln();
        }
    }
    y
}

#[cfg(target_arch = "x86_64")]
impl VectorLn for pulp::x86::V4 {
    #[inline(always)]
    fn ln_f64s(self, x: Self::f64s) -> Self::f64s {
        use core::arch::x86_64::{__m512d, __m512i, _CMP_GE_OQ, _CMP_LE_OQ};
        let f = self.avx512f;
        let splat = |v: f64| f._mm512_set1_pd(v);
        let splat_int = |v: u64| f._mm512_set1_epi64(v as i64);
        let fma = |a: __m512d, b: __m512d, c: __m512d| f._mm512_fmadd_pd(a, b, c);
        let xv: __m512d = pulp::cast(x);
        let bits = f._mm512_castpd_si512(xv);
        let tmp = f._mm512_sub_epi64(bits, splat_int(OFFSET));
        let table = |t: &[f64; 16]| {
            let low: __m512d =
                pulp::cast(pulp::f64x8(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]));
            let high: __m512d = pulp::cast(pulp::f64x8(
                t[8], t[9], t[10], t[11], t[12], t[13], t[14], t[15],
            ));
            // The index's low four bits pick one of the 16 entries in the two registers.
            let index: __m512i = f._mm512_srli_epi64::<48>(tmp);
            f._mm512_permutex2var_pd(low, index, high)
        };
        let magic = f._mm512_or_si512(
            f._mm512_xor_si512(f._mm512_srli_epi64::<52>(tmp), splat_int(0x800)),
            splat_int(TWO_52.to_bits()),
        );
        let k = f._mm512_sub_pd(f._mm512_castsi512_pd(magic), splat(K_MAGIC));
        let z = f._mm512_castsi512_pd(
            f._mm512_sub_epi64(bits, f._mm512_and_si512(tmp, splat_int(0xfff << 52))),
        );
        let r = f._mm512_fmsub_pd(z, table(&INVERSE), splat(1.0));
        let w = fma(k, splat(LN2_HI), table(&LOG_C_HI));
        let hi = f._mm512_add_pd(w, r);
        let lo = f._mm512_add_pd(
            f._mm512_add_pd(f._mm512_sub_pd(w, hi), r),
            fma(k, splat(LN2_LO), table(&LOG_C_LO)),
        );
        let r2 = f._mm512_mul_pd(r, r);
        let sum: __m512d = pulp::cast(series(self, pulp::cast(r), pulp::cast(r2), pulp::cast(lo)));
        let y = f._mm512_add_pd(sum, hi);
        let ok = f._mm512_cmp_pd_mask::<_CMP_GE_OQ>(xv, splat(f64::MIN_POSITIVE))
            & f._mm512_cmp_pd_mask::<_CMP_LE_OQ>(xv, splat(f64::MAX));
        if ok == u8::MAX {
            return pulp::cast(y);
        }
        let (xs, ys): ([f64; 8], [f64; 8]) = (pulp::cast(xv), pulp::cast(y));
        pulp::cast(patch(xs, ys))
    }
}

#[cfg(target_arch = "x86_64")]
impl VectorLn for pulp::x86::V3 {
    #[inline(always)]
    #[allow(unsafe_code)]
    fn ln_f64s(self, x: Self::f64s) -> Self::f64s {
        use core::arch::x86_64::{__m256d, _CMP_GE_OQ, _CMP_LE_OQ};
        let (f, i) = (self.avx, self.avx2);
        let splat = |v: f64| f._mm256_set1_pd(v);
        let splat_int = |v: u64| f._mm256_set1_epi64x(v as i64);
        let fma = |a: __m256d, b: __m256d, c: __m256d| self.fma._mm256_fmadd_pd(a, b, c);
        let xv: __m256d = pulp::cast(x);
        let bits = f._mm256_castpd_si256(xv);
        let tmp = i._mm256_sub_epi64(bits, splat_int(OFFSET));
        let index = i._mm256_and_si256(i._mm256_srli_epi64::<48>(tmp), splat_int(15));
        // SAFETY: every index is in 0..16 (masked just above) and each table has 16 entries,
        // so each of the four loads is inside it; AVX2 is enabled (this runs inside `V3`).
        let table = |t: &[f64; 16]| unsafe { i._mm256_i64gather_pd::<8>(t.as_ptr(), index) };
        let magic = i._mm256_or_si256(
            i._mm256_xor_si256(i._mm256_srli_epi64::<52>(tmp), splat_int(0x800)),
            splat_int(TWO_52.to_bits()),
        );
        let k = f._mm256_sub_pd(f._mm256_castsi256_pd(magic), splat(K_MAGIC));
        let z = f._mm256_castsi256_pd(
            i._mm256_sub_epi64(bits, i._mm256_and_si256(tmp, splat_int(0xfff << 52))),
        );
        let r = self.fma._mm256_fmsub_pd(z, table(&INVERSE), splat(1.0));
        let w = fma(k, splat(LN2_HI), table(&LOG_C_HI));
        let hi = f._mm256_add_pd(w, r);
        let lo = f._mm256_add_pd(
            f._mm256_add_pd(f._mm256_sub_pd(w, hi), r),
            fma(k, splat(LN2_LO), table(&LOG_C_LO)),
        );
        let r2 = f._mm256_mul_pd(r, r);
        let sum: __m256d = pulp::cast(series(self, pulp::cast(r), pulp::cast(r2), pulp::cast(lo)));
        let y = f._mm256_add_pd(sum, hi);
        let ok = f._mm256_and_pd(
            f._mm256_cmp_pd::<_CMP_GE_OQ>(xv, splat(f64::MIN_POSITIVE)),
            f._mm256_cmp_pd::<_CMP_LE_OQ>(xv, splat(f64::MAX)),
        );
        if f._mm256_movemask_pd(ok) == 0b1111 {
            return pulp::cast(y);
        }
        let (xs, ys): ([f64; 4], [f64; 4]) = (pulp::cast(xv), pulp::cast(y));
        pulp::cast(patch(xs, ys))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Arguments over the whole range: dense in [1, 64] (a row's Σ_c e_c of up to 64 classes),
    /// beside 1 on either side, beside every interval's edges and powers of two, subnormals,
    /// the special values, and a pseudo-random spread of exponents.
    fn arguments() -> Vec<f64> {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut random = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut xs = Vec::new();
        for _ in 0..200_000 {
            let u = (random() >> 11) as f64 / (1u64 << 53) as f64;
            xs.push(1.0 + 63.0 * u);
        }
        for _ in 0..100_000 {
            // Any positive normal or subnormal double, by its bits.
            xs.push(f64::from_bits(random() >> 1));
        }
        for e in -1074..=1023 {
            let p = 2f64.powi(e);
            xs.extend([p, p * (1.0 + f64::EPSILON), p * (1.0 - f64::EPSILON / 2.0)]);
        }
        for t in 1..2000u64 {
            xs.push(1.0 + t as f64 * f64::EPSILON);
            xs.push(1.0 - t as f64 * f64::EPSILON / 2.0);
        }
        // The intervals' edges: z = 0.6875 + j/32 below 1 and 1 + j/16 above, and beside them.
        for j in 0..=22 {
            let edge = if j <= 10 {
                0.6875 + j as f64 / 32.0
            } else {
                1.0 + (j - 10) as f64 / 16.0
            };
            for s in [edge, edge * 2.0, edge / 2.0, edge * 1024.0] {
                xs.extend([
                    s,
                    f64::from_bits(s.to_bits() - 1),
                    f64::from_bits(s.to_bits() + 1),
                ]);
            }
        }
        xs.extend([
            0.0,
            -0.0,
            -1.0,
            f64::MIN_POSITIVE,
            f64::MAX,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            -f64::NAN,
            f64::MIN_POSITIVE / 3.0,
        ]);
        xs
    }

    fn ulps(a: f64, b: f64) -> u64 {
        (a.to_bits() as i64).abs_diff(b.to_bits() as i64)
    }

    #[test]
    fn ln_is_within_one_ulp_of_libm_and_libms_out_of_range() {
        let mut worst = (0, 0.0);
        for x in arguments() {
            let (ours, libm) = (ln(x), x.ln());
            if !in_range(x) {
                assert!(
                    ours.to_bits() == libm.to_bits() || (ours.is_nan() && libm.is_nan()),
                    "ln({x:e}) = {ours:e}, libm {libm:e}"
                );
                continue;
            }
            // ln x and libm's have the same sign (both 0 at 1), so their bits compare.
            let u = ulps(ours, libm);
            if u > worst.0 {
                worst = (u, x);
            }
        }
        assert!(worst.0 <= 1, "{} ulp at x = {:e}", worst.0, worst.1);
        assert_eq!(ln(1.0).to_bits(), 0.0f64.to_bits());
        assert_eq!(ln(2.0), std::f64::consts::LN_2);
    }

    #[test]
    fn every_kernel_gives_the_scalar_bits() {
        let xs = arguments();
        let expected: Vec<u64> = xs.iter().map(|&x| ln(x).to_bits()).collect();
        for isa in crate::exp::kernels() {
            // Every offset, so that each argument sits in every lane and in the tail.
            for start in 0..9 {
                let mut values = xs[start..].to_vec();
                ln_in_place_on(isa, &mut values);
                for (t, v) in values.iter().enumerate() {
                    let (want, x) = (expected[start + t], xs[start + t]);
                    assert!(
                        v.to_bits() == want || (v.is_nan() && f64::from_bits(want).is_nan()),
                        "ln({x:e}): {v:e} against the scalar {:e}",
                        f64::from_bits(want)
                    );
                }
            }
        }
        let mut values = xs.clone();
        ln_in_place(&mut values);
        for ((v, &want), x) in values.iter().zip(&expected).zip(&xs) {
            assert!(
                v.to_bits() == want || v.is_nan(),
                "ln_in_place({x:e}) = {v:e}"
            );
        }
    }
}
