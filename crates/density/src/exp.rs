//! `exp(x)` for `x ≤ 0`, the exponential that turns normalised log-probabilities into
//! probabilities, on the widest SIMD the CPU has and with the same bits on every path.
//!
//! Why its own kernels: a K = 10 `predict_proba` is mostly exponentials (ten per row), and
//! the earlier branch-free formula (degree-13 series, left to LLVM's autovectoriser) ran at
//! about 1.2 ns per value on AVX-512 and on AVX2 alike, bound by its ~30 vector operations.
//! A 16-entry table of 2^(j/16) shortens the series to degree 7, and AVX-512 has the two
//! operations that make the table and the final scaling one instruction each (`vpermi2pd`, a
//! lookup in two registers, and `vscalefpd`, y · 2^⌊q⌋ with one rounding, subnormals
//! included): about 17 operations, 0.55 ns per value. LLVM does not emit either from scalar
//! code, so the kernels are written with `pulp`'s intrinsics.
//!
//! Method (the same arithmetic on every path, so the same bits): x is clamped to [−746, 0]
//! (below −746 the result is 0 in any case); t = x · 16/ln 2 + 1.5 · 2^52 rounds k = x · 16/ln 2
//! to the nearest integer (ties to even) in one fused multiply-add and leaves it in t's low bits;
//! r = x − k · ln 2/16 (Cody–Waite: ln 2 in two parts, so k · LN2_HI/16 is exact), |r| ≤
//! ln 2/32; e^r − 1 = r + r² · g(r), g of degree 5; y = T[k mod 16] · (1 + (e^r − 1)) in one
//! fused multiply-add; and the result is y · 2^⌊k/16⌋ with a single rounding. AVX-512 does the
//! last step with `vscalefpd`; AVX2 and the scalar path as y · 2^(⌊k/16⌋ + 60), exact, times
//! 2^−60, one rounding, which is the same value. AVX2 reads the table with a gather.
//!
//! Accuracy: g's coefficients interpolate (e^r − 1 − r)/r² at the six Chebyshev nodes of
//! [−ln 2/32, ln 2/32], rounded to f64; in 50-digit arithmetic 1 + r + r² · g(r) is within
//! 4e-4 ulp of e^r there. The table entries are 2^(j/16) correctly rounded. The result was
//! within 1 ulp of libm's `exp` on 2^20 random arguments in [−750, 0] (tests assert 2).
//! NaN gives 0 on every path (the clamp's maximum ignores NaN), +∞ gives 1.
#![allow(
    clippy::excessive_precision,
    clippy::unreadable_literal,
    clippy::approx_constant
)]

use std::sync::OnceLock;

/// 16 / ln 2, so that x · K_SCALE counts sixteenths of powers of two.
const K_SCALE: f64 = 16.0 * std::f64::consts::LOG2_E;
/// ln 2 / 16 = LN2_HI + LN2_LO; LN2_HI has 21 trailing zero bits, so k · LN2_HI is exact for
/// the |k| ≤ 17,220 that the clamp allows.
const LN2_HI: f64 = 0.693_147_180_369_123_8 / 16.0;
const LN2_LO: f64 = 1.908_214_929_270_587_7e-10 / 16.0;
/// Adding 1.5 · 2^52 rounds to an integer and leaves it in the low mantissa bits.
const SHIFT: f64 = 6_755_399_441_055_744.0;
/// g(r) ≈ (e^r − 1 − r) / r², lowest degree first (see the module docs).
const G: [f64; 6] = [
    0.5,
    0.16666666666666669,
    0.041666666663595475,
    0.00833333333299209,
    0.0013889063440655327,
    0.0001984146378747018,
];
/// 2^(j/16), j = 0..16, correctly rounded.
const TABLE: [f64; 16] = [
    1.0,
    1.0442737824274138,
    1.0905077326652577,
    1.1387886347566916,
    1.189207115002721,
    1.241857812073484,
    1.2968395546510096,
    1.3542555469368927,
    1.4142135623730951,
    1.4768261459394993,
    1.5422108254079407,
    1.6104903319492543,
    1.681792830507429,
    1.7562521603732995,
    1.8340080864093424,
    1.9152065613971474,
];
/// Results are scaled by 2^(⌊k/16⌋ + UNDER), a normal number for every k the clamp allows,
/// then by 2^−UNDER.
const UNDER: u64 = 60;
const TWO_TO_MINUS_UNDER: f64 = 1.0 / (1u64 << UNDER) as f64;
/// The biased exponent of 2^UNDER, shifted into place.
const SCALE_BIAS: u64 = (1023 + UNDER) << 52;
/// The sign and exponent bits of an f64.
const EXPONENT_BITS: u64 = !((1u64 << 52) - 1);

/// `exp(x)` for `x ≤ 0` (larger x gives 1, −∞ and NaN give 0), within 1 ulp of the correctly
/// rounded value in tests, the same bits as the vector kernels. For slices, use
/// [`exp_nonpositive_in_place`] or [`exp_shifted_accumulate`], which run those kernels.
#[inline(always)]
pub fn exp_nonpositive(x: f64) -> f64 {
    // Not `clamp`, which keeps NaN: `max` turns it into −746, as the vector kernels' do.
    #[allow(clippy::manual_clamp)]
    let x = x.max(-746.0).min(0.0);
    let t = x.mul_add(K_SCALE, SHIFT);
    let k = t - SHIFT;
    let r = (-k).mul_add(LN2_LO, (-k).mul_add(LN2_HI, x));
    let r2 = r * r;
    let a = G[1].mul_add(r, G[0]);
    let b = G[3].mul_add(r, G[2]);
    let c = G[5].mul_add(r, G[4]);
    let g = c.mul_add(r2, b).mul_add(r2, a);
    let expm1 = g.mul_add(r2, r);
    let bits = t.to_bits();
    let entry = TABLE[(bits & 15) as usize];
    let y = entry.mul_add(expm1, entry);
    // k = 16q + j sits in the low bits of `bits − SHIFT` (two's complement); shifted left by 48
    // and masked to the exponent field it is q, and adding the bias gives 2^(q + UNDER).
    let scale =
        ((bits.wrapping_sub(SHIFT.to_bits()) << 48) & EXPONENT_BITS).wrapping_add(SCALE_BIAS);
    y * f64::from_bits(scale) * TWO_TO_MINUS_UNDER
}

/// `values[i] = exp(values[i])` for values ≤ 0 ([`exp_nonpositive`]), on the widest kernel
/// the CPU has.
pub fn exp_nonpositive_in_place(values: &mut [f64]) {
    run(Kernel::InPlace { values })
}

/// `values[i] = exp(values[i] − shift[i])` and `sums[i] += values[i]`, for
/// `values[i] ≤ shift[i]` ([`exp_nonpositive`]), on the widest kernel the CPU has. Uses the
/// common length of the three slices.
pub fn exp_shifted_accumulate(values: &mut [f64], shift: &[f64], sums: &mut [f64]) {
    run(Kernel::ShiftedAccumulate {
        values,
        shift,
        sums,
    })
}

/// What one call computes.
enum Kernel<'a> {
    InPlace {
        values: &'a mut [f64],
    },
    ShiftedAccumulate {
        values: &'a mut [f64],
        shift: &'a [f64],
        sums: &'a mut [f64],
    },
}

/// The kernel this CPU runs, detected once (a check per call cost more than a short slice's
/// work).
#[derive(Clone, Copy)]
enum Isa {
    #[cfg(target_arch = "x86_64")]
    V4(pulp::x86::V4),
    #[cfg(target_arch = "x86_64")]
    V3(pulp::x86::V3),
    Scalar,
}

fn isa() -> Isa {
    static ISA: OnceLock<Isa> = OnceLock::new();
    *ISA.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            if let Some(simd) = pulp::x86::V4::try_new() {
                return Isa::V4(simd);
            }
            if let Some(simd) = pulp::x86::V3::try_new() {
                return Isa::V3(simd);
            }
        }
        Isa::Scalar
    })
}

fn run(kernel: Kernel<'_>) {
    run_on(isa(), kernel)
}

fn run_on(isa: Isa, kernel: Kernel<'_>) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::V4(simd) => simd.vectorize(OnLanes { simd, kernel }),
        #[cfg(target_arch = "x86_64")]
        Isa::V3(simd) => simd.vectorize(OnLanes { simd, kernel }),
        Isa::Scalar => scalar(kernel),
    }
}

/// Both kernels one value at a time.
fn scalar(kernel: Kernel<'_>) {
    match kernel {
        Kernel::InPlace { values } => {
            for v in values {
                *v = exp_nonpositive(*v);
            }
        }
        Kernel::ShiftedAccumulate {
            values,
            shift,
            sums,
        } => {
            for ((v, m), s) in values.iter_mut().zip(shift).zip(sums.iter_mut()) {
                let e = exp_nonpositive(*v - m);
                *v = e;
                *s += e;
            }
        }
    }
}

/// e^r − 1 = r + r² · g(r) on whole vectors, the scalar path's operations in its order (every
/// multiply-add fused).
#[inline(always)]
fn expm1_reduced<S: pulp::Simd>(simd: S, r: S::f64s) -> S::f64s {
    let splat = |v: f64| simd.splat_f64s(v);
    let r2 = simd.mul_f64s(r, r);
    let a = simd.mul_add_f64s(splat(G[1]), r, splat(G[0]));
    let b = simd.mul_add_f64s(splat(G[3]), r, splat(G[2]));
    let c = simd.mul_add_f64s(splat(G[5]), r, splat(G[4]));
    let g = simd.mul_add_f64s(simd.mul_add_f64s(c, r2, b), r2, a);
    simd.mul_add_f64s(g, r2, r)
}

/// A SIMD type with a whole-vector [`exp_nonpositive`].
trait VectorExp: pulp::Simd {
    fn exp_nonpositive_f64s(self, x: Self::f64s) -> Self::f64s;
}

/// The kernels on whole vectors of `S`, the rest with the scalar formula.
struct OnLanes<'a, S> {
    simd: S,
    kernel: Kernel<'a>,
}

impl<S: VectorExp> pulp::NullaryFnOnce for OnLanes<'_, S> {
    type Output = ();

    #[inline(always)]
    fn call(self) {
        let simd = self.simd;
        match self.kernel {
            Kernel::InPlace { values } => {
                let (head, tail) = S::as_mut_simd_f64s(values);
                for v in head {
                    *v = simd.exp_nonpositive_f64s(*v);
                }
                scalar(Kernel::InPlace { values: tail });
            }
            Kernel::ShiftedAccumulate {
                values,
                shift,
                sums,
            } => {
                let n = values.len().min(shift.len()).min(sums.len());
                let (values, shift, sums) = (&mut values[..n], &shift[..n], &mut sums[..n]);
                let (vh, vt) = S::as_mut_simd_f64s(values);
                let (mh, mt) = S::as_simd_f64s(shift);
                let (sh, st) = S::as_mut_simd_f64s(sums);
                for ((v, m), s) in vh.iter_mut().zip(mh).zip(sh.iter_mut()) {
                    let e = simd.exp_nonpositive_f64s(simd.sub_f64s(*v, *m));
                    *v = e;
                    *s = simd.add_f64s(*s, e);
                }
                scalar(Kernel::ShiftedAccumulate {
                    values: vt,
                    shift: mt,
                    sums: st,
                });
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
impl VectorExp for pulp::x86::V4 {
    #[inline(always)]
    fn exp_nonpositive_f64s(self, x: Self::f64s) -> Self::f64s {
        use core::arch::x86_64::__m512d;
        let f = self.avx512f;
        let splat = |v: f64| f._mm512_set1_pd(v);
        let fma = |a: __m512d, b: __m512d, c: __m512d| f._mm512_fmadd_pd(a, b, c);
        // `max` returns its second operand when either is NaN: NaN becomes −746, as in the
        // scalar `f64::max`.
        let x = f._mm512_min_pd(f._mm512_max_pd(pulp::cast(x), splat(-746.0)), splat(0.0));
        let t = fma(x, splat(K_SCALE), splat(SHIFT));
        let k = f._mm512_sub_pd(t, splat(SHIFT));
        let r = f._mm512_fnmadd_pd(k, splat(LN2_HI), x);
        let r = f._mm512_fnmadd_pd(k, splat(LN2_LO), r);
        let expm1: __m512d = pulp::cast(expm1_reduced(self, pulp::cast(r)));
        // The index's low four bits pick one of the 16 entries in the two registers.
        let low: __m512d = pulp::cast(pulp::f64x8(
            TABLE[0], TABLE[1], TABLE[2], TABLE[3], TABLE[4], TABLE[5], TABLE[6], TABLE[7],
        ));
        let high: __m512d = pulp::cast(pulp::f64x8(
            TABLE[8], TABLE[9], TABLE[10], TABLE[11], TABLE[12], TABLE[13], TABLE[14], TABLE[15],
        ));
        let entry = f._mm512_permutex2var_pd(low, f._mm512_castpd_si512(t), high);
        let y = fma(entry, expm1, entry);
        // k/16 is exact; `vscalefpd` multiplies by 2^⌊k/16⌋ with one rounding.
        pulp::cast(f._mm512_scalef_pd(y, f._mm512_mul_pd(k, splat(1.0 / 16.0))))
    }
}

#[cfg(target_arch = "x86_64")]
impl VectorExp for pulp::x86::V3 {
    #[inline(always)]
    #[allow(unsafe_code)]
    fn exp_nonpositive_f64s(self, x: Self::f64s) -> Self::f64s {
        use core::arch::x86_64::__m256d;
        let (f, i) = (self.avx, self.avx2);
        let splat = |v: f64| f._mm256_set1_pd(v);
        let fma = |a: __m256d, b: __m256d, c: __m256d| self.fma._mm256_fmadd_pd(a, b, c);
        let x = f._mm256_min_pd(f._mm256_max_pd(pulp::cast(x), splat(-746.0)), splat(0.0));
        let t = fma(x, splat(K_SCALE), splat(SHIFT));
        let k = f._mm256_sub_pd(t, splat(SHIFT));
        let r = self.fma._mm256_fnmadd_pd(k, splat(LN2_HI), x);
        let r = self.fma._mm256_fnmadd_pd(k, splat(LN2_LO), r);
        let expm1: __m256d = pulp::cast(expm1_reduced(self, pulp::cast(r)));
        let bits = f._mm256_castpd_si256(t);
        let index = i._mm256_and_si256(bits, f._mm256_set1_epi64x(15));
        // SAFETY: every index is in 0..16 (masked just above) and `TABLE` has 16 entries, so
        // each of the four loads is inside it; AVX2 is enabled (this runs inside `V3`).
        let entry = unsafe { i._mm256_i64gather_pd::<8>(TABLE.as_ptr(), index) };
        let y = fma(entry, expm1, entry);
        let q = i._mm256_and_si256(
            i._mm256_slli_epi64::<48>(
                i._mm256_sub_epi64(bits, f._mm256_set1_epi64x(SHIFT.to_bits() as i64)),
            ),
            f._mm256_set1_epi64x(EXPONENT_BITS as i64),
        );
        let scale = i._mm256_add_epi64(q, f._mm256_set1_epi64x(SCALE_BIAS as i64));
        let y = f._mm256_mul_pd(y, f._mm256_castsi256_pd(scale));
        pulp::cast(f._mm256_mul_pd(y, splat(TWO_TO_MINUS_UNDER)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Arguments that cover the whole range: dense near 0 (most normalised log-probabilities),
    /// the subnormal results below about −708, the clamp's edges, the special values, and a
    /// pseudo-random spread.
    fn arguments() -> Vec<f64> {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut random = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        let spread: Vec<f64> = (0..200_000)
            .map(|i| if i % 2 == 0 { -750.0 } else { -5.0 } * random())
            .collect();
        (0..200_000)
            .map(|i| -(i as f64) * 1e-4)
            .chain((0..200_000).map(|i| -(i as f64) * 0.003_727))
            .chain(spread)
            .chain([
                -708.0,
                -708.4,
                -709.0,
                -720.5,
                -744.0,
                -745.1,
                -745.2,
                -746.0,
                -746.5,
                -800.0,
                -1e300,
                -f64::MIN_POSITIVE,
                -1e-300,
                -0.0,
                0.0,
                1e-300,
                3.0,
                f64::INFINITY,
                f64::NEG_INFINITY,
                f64::NAN,
            ])
            .collect()
    }

    #[test]
    fn exp_nonpositive_is_within_two_ulp_of_libm_and_exact_at_the_edges() {
        let ulp = |a: f64, b: f64| (a.to_bits() as i64 - b.to_bits() as i64).abs();
        let mut worst = 0;
        for x in arguments()
            .into_iter()
            .filter(|x| (-746.0..=0.0).contains(x))
        {
            let (got, want) = (exp_nonpositive(x), x.exp());
            assert!(got.is_finite() && got >= 0.0, "exp({x}) = {got}");
            worst = worst.max(ulp(got, want));
        }
        assert!(worst <= 2, "worst error {worst} ulp");
        for (x, want) in [
            (f64::NEG_INFINITY, 0.0),
            (-800.0, 0.0),
            (0.0, 1.0),
            (-0.0, 1.0),
            (2.0, 1.0),
            (f64::INFINITY, 1.0),
            (f64::NAN, 0.0),
        ] {
            assert_eq!(exp_nonpositive(x), want, "exp({x})");
        }
        // The smallest subnormal: e^−744.44 is about 4.94e-324 = 2^−1074.
        assert_eq!(exp_nonpositive(-744.44).to_bits(), 1);
    }

    /// Every kernel this machine can run (and the scalar one everywhere) against the scalar
    /// formula, bit for bit, on lengths that leave every tail length.
    #[test]
    fn every_kernel_gives_the_scalar_formulas_bits() {
        let mut isas = vec![Isa::Scalar];
        #[cfg(target_arch = "x86_64")]
        {
            isas.extend(pulp::x86::V4::try_new().map(Isa::V4));
            isas.extend(pulp::x86::V3::try_new().map(Isa::V3));
        }
        let args = arguments();
        let want: Vec<u64> = args.iter().map(|&x| exp_nonpositive(x).to_bits()).collect();
        for isa in isas {
            for len in [args.len(), 1, 7, 8, 9, 15, 17] {
                let mut got = args[..len].to_vec();
                run_on(isa, Kernel::InPlace { values: &mut got });
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(g.to_bits(), *w, "exp({}) on {len} values", args[i]);
                }
                // Shifted: values = x + s and shift = s with s exactly representable, so that
                // values − shift gives x back exactly (for finite x well inside the range).
                let shift: Vec<f64> = (0..len).map(|i| (i % 5) as f64 * 0.25).collect();
                let finite: Vec<f64> = args[..len]
                    .iter()
                    .map(|x| {
                        if x.is_finite() {
                            x.clamp(-700.0, 0.0)
                        } else {
                            -1.0
                        }
                    })
                    .collect();
                let mut values: Vec<f64> = finite.iter().zip(&shift).map(|(x, s)| x + s).collect();
                let mut sums = vec![0.5; len];
                let expected: Vec<f64> = values
                    .iter()
                    .zip(&shift)
                    .map(|(v, s)| exp_nonpositive(v - s))
                    .collect();
                run_on(
                    isa,
                    Kernel::ShiftedAccumulate {
                        values: &mut values,
                        shift: &shift,
                        sums: &mut sums,
                    },
                );
                for i in 0..len {
                    assert_eq!(
                        values[i].to_bits(),
                        expected[i].to_bits(),
                        "value {i} of {len}"
                    );
                    assert_eq!(
                        sums[i].to_bits(),
                        (0.5 + expected[i]).to_bits(),
                        "sum {i} of {len}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_table_and_polynomial_match_independent_values() {
        // 2^(j/16) against libm's `exp2` (within its 1 ulp).
        for (j, entry) in TABLE.iter().enumerate() {
            let libm = (j as f64 / 16.0).exp2();
            assert!(
                (entry.to_bits() as i64 - libm.to_bits() as i64).abs() <= 1,
                "entry {j}"
            );
        }
        // The reduced-range approximation against libm's `exp_m1` at the interval's ends and
        // inside it (relative to e^r, within a quarter of an ulp).
        let edge = std::f64::consts::LN_2 / 32.0;
        for i in -64..=64 {
            let r = edge * i as f64 / 64.0;
            let g = G[5]
                .mul_add(r, G[4])
                .mul_add(r * r, G[3].mul_add(r, G[2]))
                .mul_add(r * r, G[1].mul_add(r, G[0]));
            let ours = g.mul_add(r * r, r);
            assert!(
                (ours - r.exp_m1()).abs() <= 0.25 * f64::EPSILON * r.exp(),
                "r = {r}"
            );
        }
    }
}
