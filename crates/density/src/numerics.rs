//! Log-space numerics that stay finite for extreme inputs.
//!
//! Probabilities in this project are carried as logarithms; these helpers turn rows of log
//! weights into normalised probabilities without overflow, underflow to NaN, or `-inf - -inf`.

/// `ln Σ exp(v_i)`. Returns `-inf` for an empty slice or when every entry is `-inf`,
/// `+inf` if any entry is `+inf`; finite otherwise (including entries of ±1e300).
pub fn log_sum_exp(values: &[f64]) -> f64 {
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if max.is_infinite() {
        return max;
    }
    let sum: f64 = values.iter().map(|&v| (v - max).exp()).sum();
    max + sum.ln()
}

/// Turns a row of log weights into log probabilities in place and returns the row's
/// log normaliser (`log_sum_exp` of the input).
///
/// A row that is all `-inf` becomes the uniform distribution rather than NaN: when nothing
/// distinguishes the classes, every class is equally likely.
pub fn log_normalize_in_place(row: &mut [f64]) -> f64 {
    let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if max.is_finite() {
        // Shift by the max first, then by ln Σ exp(shifted): subtracting the full normaliser
        // from values of magnitude 1e300 would absorb the ln Σ term entirely.
        for v in row.iter_mut() {
            *v -= max;
        }
        let log_sum = row.iter().map(|v| v.exp()).sum::<f64>().ln();
        for v in row.iter_mut() {
            *v -= log_sum;
        }
        max + log_sum
    } else if max == f64::INFINITY {
        // Entries equal to +inf share all the mass; the rest get none.
        let n_inf = row.iter().filter(|v| **v == f64::INFINITY).count() as f64;
        for v in row.iter_mut() {
            *v = if *v == f64::INFINITY {
                -n_inf.ln()
            } else {
                f64::NEG_INFINITY
            };
        }
        f64::INFINITY
    } else {
        let uniform = -(row.len() as f64).ln();
        row.iter_mut().for_each(|v| *v = uniform);
        f64::NEG_INFINITY
    }
}

/// Softmax of a row of logits, in place. Never NaN; an all `-inf` row becomes uniform.
pub fn softmax_in_place(row: &mut [f64]) {
    log_normalize_in_place(row);
    for v in row.iter_mut() {
        *v = v.exp();
    }
}

/// `ln σ(x) = -ln(1 + e^{-x})`, finite for every finite `x` (about `x` for very negative `x`).
pub fn log_sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        -(-x).exp().ln_1p()
    } else {
        x - x.exp().ln_1p()
    }
}

/// The logistic function `σ(x) = 1 / (1 + e^{-x})` without overflow.
pub fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// `ln Γ(x)` for `x > 0` by the Lanczos approximation (g = 7, 9 terms; relative error about
/// 1e-15), with the reflection formula below 0.5. Used for log base measures (`ln x!`).
pub fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const COEF: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Γ(x) Γ(1 - x) = π / sin(πx)
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).abs().ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = COEF[0];
    let t = x + G + 0.5;
    for (i, c) in COEF.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// `ln n!` for a non-negative integer-valued `n`: exact summation for small `n`, `ln Γ(n + 1)`
/// beyond.
pub fn ln_factorial(n: f64) -> f64 {
    if n < 32.0 {
        let mut acc = 0.0;
        let mut k = 2.0;
        while k <= n {
            acc += f64::ln(k);
            k += 1.0;
        }
        acc
    } else {
        ln_gamma(n + 1.0)
    }
}

/// Sum of a slice with eight fixed partial sums (combined in a fixed order), so the loop
/// vectorises; the result does not depend on threads, alignment or the SIMD width, and equals
/// `dot(a, ones)` bit for bit.
#[inline(always)]
pub fn sum(a: &[f64]) -> f64 {
    let mut acc = [0.0f64; 8];
    let chunks = a.chunks_exact(8);
    let rest = chunks.remainder();
    for x in chunks {
        for l in 0..8 {
            acc[l] += x[l];
        }
    }
    let mut tail = 0.0;
    for x in rest {
        tail += x;
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail
}

/// Each column's [`sum`], the same bits, and its count of non-zero entries, columns taken four
/// at a time.
///
/// Why: each of a sum's eight partial sums is a chain of dependent additions, so one column's
/// sum runs at the adder's latency, not its throughput. Four columns' chains overlap, and the
/// count rides along (a soft M-step wants both of every class's weights: its total, and whether
/// enough rows weigh anything to read them all). Compiled for the machine's widest vectors.
pub fn sums_and_nonzeros(cols: &[&[f64]]) -> Vec<(f64, usize)> {
    struct Columns<'a>(&'a [&'a [f64]]);
    impl pulp::WithSimd for Columns<'_> {
        type Output = Vec<(f64, usize)>;
        #[inline(always)]
        fn with_simd<S: pulp::Simd>(self, simd: S) -> Self::Output {
            match S::F64_LANES {
                8 => columns_with::<S, 1>(simd, self.0),
                4 => columns_with::<S, 2>(simd, self.0),
                2 => columns_with::<S, 4>(simd, self.0),
                _ => self.0.iter().map(|c| (sum(c), nonzeros(c))).collect(),
            }
        }
    }
    pulp::Arch::new().dispatch(Columns(cols))
}

/// Non-zero entries of `c`.
fn nonzeros(c: &[f64]) -> usize {
    c.iter().filter(|v| **v != 0.0).count()
}

/// [`sums_and_nonzeros`] with `A` vectors of `S::F64_LANES` lanes for each column's eight
/// partial sums (vector a, lane l: partial sum a · lanes + l, as [`sum`]'s), and as many for
/// its counts.
#[inline(always)]
fn columns_with<S: pulp::Simd, const A: usize>(simd: S, cols: &[&[f64]]) -> Vec<(f64, usize)> {
    let mut out = Vec::with_capacity(cols.len());
    for group in cols.chunks(4) {
        match group {
            [a, b, c, d] if [b.len(), c.len(), d.len()] == [a.len(); 3] => {
                out.extend(group_with::<S, A, 4>(simd, [a, b, c, d]))
            }
            _ => {
                for c in group {
                    out.push(group_with::<S, A, 1>(simd, [c])[0]);
                }
            }
        }
    }
    out
}

/// `G` columns of one length in one loop, their chains of additions overlapping.
#[inline(always)]
fn group_with<S: pulp::Simd, const A: usize, const G: usize>(
    simd: S,
    cols: [&[f64]; G],
) -> [(f64, usize); G] {
    let whole = cols[0].len() / 8 * 8;
    let (zero, one) = (simd.splat_f64s(0.0), simd.splat_f64s(1.0));
    let mut acc = [[zero; A]; G];
    // Counted as floats (exact below 2^53), selected by the comparison's mask.
    let mut count = [[zero; A]; G];
    let mut vectors: [&[S::f64s]; G] = [&[]; G];
    for g in 0..G {
        vectors[g] = S::as_simd_f64s(&cols[g][..whole]).0;
    }
    for block in 0..whole / 8 {
        for g in 0..G {
            let xs = &vectors[g][block * A..block * A + A];
            for a in 0..A {
                let x = xs[a];
                acc[g][a] = simd.add_f64s(acc[g][a], x);
                let nonzero = simd.select_f64s(simd.equal_f64s(x, zero), zero, one);
                count[g][a] = simd.add_f64s(count[g][a], nonzero);
            }
        }
    }
    let mut out = [(0.0, 0); G];
    for g in 0..G {
        let (mut p, mut c) = ([0.0f64; 8], [0.0f64; 8]);
        S::as_mut_simd_f64s(&mut p).0[..A].copy_from_slice(&acc[g]);
        S::as_mut_simd_f64s(&mut c).0[..A].copy_from_slice(&count[g]);
        let rest = &cols[g][whole..];
        let mut tail = 0.0;
        for x in rest {
            tail += x;
        }
        let sum = ((p[0] + p[4]) + (p[1] + p[5])) + ((p[2] + p[6]) + (p[3] + p[7])) + tail;
        out[g] = (sum, c.iter().sum::<f64>() as usize + nonzeros(rest));
    }
    out
}

/// Dot product of two equal-length slices, with eight fixed partial sums (combined in a fixed
/// order) so the loop vectorises; the result does not depend on threads or alignment.
#[inline(always)]
pub fn dot(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f64; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    let mut tail = 0.0;
    for (x, y) in ra.iter().zip(rb) {
        tail += x * y;
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail
}

/// Complementary error function (Numerical Recipes' Chebyshev fit, relative error < 1.2e-7).
pub fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87
                                        + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    if x >= 0.0 { r } else { 2.0 - r }
}

/// Standard normal CDF Φ(x) = ½ erfc(−x/√2).
pub fn normal_cdf(x: f64) -> f64 {
    0.5 * erfc(-x / std::f64::consts::SQRT_2)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each column's sum has the bits of [`sum`], and its count is the count of entries that
    /// are not ±0, for every length around the 8-wide blocks, in groups of four columns of
    /// one length and in the columns left over or of other lengths.
    #[test]
    fn sums_and_nonzeros_have_the_bits_of_sum_and_count_the_non_zeros() {
        let value = |i: usize, c: usize| {
            let h = (i * 7919 + c * 104_729 + 13) % 10_007;
            match h % 7 {
                0 => 0.0,
                1 => -0.0,
                _ => (h as f64 / 10_007.0 - 0.3) * 10f64.powi((h % 9) as i32 - 4),
            }
        };
        for n in (0..40).chain([4095, 4096, 4097]) {
            for k in [1, 3, 4, 5, 9, 10] {
                let cols: Vec<Vec<f64>> = (0..k)
                    .map(|c| {
                        // Column 5 is shorter: its group of four is not of one length.
                        let len = if c == 5 { n / 2 } else { n };
                        (0..len).map(|i| value(i, c)).collect()
                    })
                    .collect();
                let refs: Vec<&[f64]> = cols.iter().map(Vec::as_slice).collect();
                let got = sums_and_nonzeros(&refs);
                assert_eq!(got.len(), k);
                for (c, (col, (s, count))) in cols.iter().zip(got).enumerate() {
                    assert_eq!(
                        s.to_bits(),
                        sum(col).to_bits(),
                        "n = {n}, k = {k}, column {c}"
                    );
                    let want = col.iter().filter(|v| **v != 0.0).count();
                    assert_eq!(count, want, "n = {n}, k = {k}, column {c}");
                }
            }
        }
    }

    #[test]
    fn log_sum_exp_matches_direct_sum_for_moderate_values() {
        let v = [0.5, -1.25, 2.0, 0.0];
        let direct = v.iter().map(|x: &f64| x.exp()).sum::<f64>().ln();
        assert!((log_sum_exp(&v) - direct).abs() < 1e-14);
    }

    #[test]
    fn log_sum_exp_handles_extremes() {
        assert_eq!(log_sum_exp(&[]), f64::NEG_INFINITY);
        assert_eq!(
            log_sum_exp(&[f64::NEG_INFINITY, f64::NEG_INFINITY]),
            f64::NEG_INFINITY
        );
        assert_eq!(log_sum_exp(&[1e300, 1e300]), 1e300 + 2f64.ln());
        assert_eq!(log_sum_exp(&[-1e300, -1e300]), -1e300);
        assert!((log_sum_exp(&[1e300, -1e300]) - 1e300).abs() <= 1e284);
        assert_eq!(log_sum_exp(&[f64::NEG_INFINITY, 3.0]), 3.0);
    }

    #[test]
    fn softmax_is_finite_and_normalised_for_extremes() {
        for row in [
            vec![1e300, -1e300, 0.0],
            vec![f64::NEG_INFINITY; 3],
            vec![-1e300, -1e300, -1e300],
            vec![f64::NEG_INFINITY, 0.0, f64::NEG_INFINITY],
            vec![f64::INFINITY, 0.0, f64::INFINITY],
        ] {
            let mut r = row.clone();
            softmax_in_place(&mut r);
            assert!(
                r.iter().all(|p| p.is_finite() && *p >= 0.0),
                "{row:?} -> {r:?}"
            );
            assert!(
                (r.iter().sum::<f64>() - 1.0).abs() < 1e-15,
                "{row:?} -> {r:?}"
            );
        }
        let mut r = vec![f64::NEG_INFINITY; 4];
        softmax_in_place(&mut r);
        assert!(r.iter().all(|p| (*p - 0.25).abs() < 1e-15));
    }

    #[test]
    fn log_sigmoid_is_finite_and_accurate() {
        for x in [-1e300, -750.0, -30.0, -1.0, 0.0, 1.0, 30.0, 750.0, 1e300] {
            let v = log_sigmoid(x);
            assert!(v.is_finite() && v <= 0.0, "log_sigmoid({x}) = {v}");
        }
        assert!((log_sigmoid(0.0) + 2f64.ln()).abs() < 1e-15);
        assert!((log_sigmoid(-1e300) + 1e300).abs() < 1e285);
        assert!((log_sigmoid(2.0) - (1.0 / (1.0 + (-2f64).exp())).ln()).abs() < 1e-15);
        assert!((sigmoid(-800.0)) >= 0.0 && sigmoid(800.0) == 1.0);
    }

    #[test]
    fn dot_and_sum_match_naive_sums() {
        for n in [0, 1, 7, 8, 9, 100, 1001] {
            let a: Vec<f64> = (0..n).map(|i| (i as f64 * 0.37).sin()).collect();
            let b: Vec<f64> = (0..n).map(|i| (i as f64 * 0.11).cos() + 2.0).collect();
            let naive: f64 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            assert!((dot(&a, &b) - naive).abs() < 1e-12 * (1.0 + naive.abs()));
            let naive: f64 = b.iter().sum();
            assert!((sum(&b) - naive).abs() < 1e-12 * (1.0 + naive.abs()));
        }
    }

    #[test]
    fn ln_gamma_matches_factorials_and_half_integers() {
        let mut fact = 0.0;
        for n in 1..60 {
            fact += (n as f64).ln();
            let rel = (ln_gamma(n as f64 + 1.0) - fact).abs() / fact.max(1.0);
            assert!(rel < 1e-13, "n = {n}");
            assert!((ln_factorial(n as f64) - fact).abs() / fact.max(1.0) < 1e-13);
        }
        // Γ(1/2) = √π
        assert!((ln_gamma(0.5) - std::f64::consts::PI.sqrt().ln()).abs() < 1e-14);
        assert!((ln_gamma(0.1) - 2.252_712_651_734_206).abs() < 1e-13);
    }
    #[test]
    fn erfc_matches_reference_values() {
        assert!((erfc(0.0) - 1.0).abs() < 1e-7);
        assert!((erfc(1.0) - 0.157_299_207).abs() < 1e-7);
        assert!((erfc(-1.0) - 1.842_700_793).abs() < 1e-7);
    }

    #[test]
    fn normal_cdf_matches_tables() {
        assert!((normal_cdf(0.0) - 0.5).abs() < 1e-7);
        assert!((normal_cdf(-1.0) - 0.158_655_254).abs() < 1e-7);
        assert!((normal_cdf(1.96) - 0.975_002_105).abs() < 1e-7);
    }
}
