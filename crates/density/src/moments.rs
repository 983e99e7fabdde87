//! Weighted first and second moments of one column: the diagonal-covariance M-step.
//!
//! A diagonal model's sufficient statistics are, per class and feature, Σ wᵢ xᵢ and
//! Σ wᵢ (xᵢ − m)². Each is a long sum over a cache-resident column, so its speed is set by how
//! many independent additions are in flight, not by memory. The sums here keep 32 partial sums
//! (element i goes to partial sum i mod 32), which is 4 AVX-512, 8 AVX2 or 32 scalar
//! accumulators, and combine them in one fixed tree. Every product and sum is rounded
//! separately (no fused multiply-add), so every instruction set gives the same bits, and the
//! result never depends on the thread count.

use faer::MatRef;
use pulp::Simd;

/// Each column's weighted mean Σ wᵢ xᵢ / `total` into `mean` and Σ wᵢ (xᵢ − meanⱼ)² into
/// `scatter` (`w` as in [`weighted_sum`]), with the CPU's widest SIMD.
pub fn diagonal_moments(
    x: MatRef<'_, f64>,
    w: Option<&[f64]>,
    total: f64,
    mean: &mut [f64],
    scatter: &mut [f64],
) {
    struct Columns<'a> {
        x: MatRef<'a, f64>,
        w: Option<&'a [f64]>,
        total: f64,
        mean: &'a mut [f64],
        scatter: &'a mut [f64],
    }
    impl pulp::WithSimd for Columns<'_> {
        type Output = ();
        #[inline(always)]
        fn with_simd<S: Simd>(self, simd: S) {
            // Columns as contiguous slices (copied when x is row-major).
            let mut scratch = Vec::new();
            for (j, (m, s)) in self
                .mean
                .iter_mut()
                .zip(self.scatter.iter_mut())
                .enumerate()
            {
                let col = crate::block::column(self.x, j, &mut scratch);
                *m = weighted_sum(simd, self.w, col) / self.total;
                *s = weighted_sum_sq(simd, self.w, col, *m);
            }
        }
    }
    pulp::Arch::new().dispatch(Columns {
        x,
        w,
        total,
        mean,
        scatter,
    });
}

/// Partial sums per column sum.
const PARTIAL_SUMS: usize = 32;

/// Σ wᵢ xᵢ (Σ xᵢ when `w` is `None`). `w`, when given, has `x.len()` entries.
#[inline(always)]
pub fn weighted_sum<S: Simd>(simd: S, w: Option<&[f64]>, x: &[f64]) -> f64 {
    column_sum::<S, false>(simd, w, x, 0.0)
}

/// Σ wᵢ (xᵢ − m)² (Σ (xᵢ − m)² when `w` is `None`), as `(wᵢ (xᵢ − m)) (xᵢ − m)`.
#[inline(always)]
pub fn weighted_sum_sq<S: Simd>(simd: S, w: Option<&[f64]>, x: &[f64], m: f64) -> f64 {
    column_sum::<S, true>(simd, w, x, m)
}

#[inline(always)]
fn column_sum<S: Simd, const SQUARE: bool>(simd: S, w: Option<&[f64]>, x: &[f64], m: f64) -> f64 {
    match S::F64_LANES {
        8 => sum_with::<S, 4, SQUARE>(simd, w, x, m),
        4 => sum_with::<S, 8, SQUARE>(simd, w, x, m),
        2 => sum_with::<S, 16, SQUARE>(simd, w, x, m),
        _ => sum_scalar::<SQUARE>(w, x, m),
    }
}

/// The term of element i.
#[inline(always)]
fn term<const SQUARE: bool>(w: Option<f64>, x: f64, m: f64) -> f64 {
    match (SQUARE, w) {
        (true, Some(w)) => w * (x - m) * (x - m),
        (true, None) => (x - m) * (x - m),
        (false, Some(w)) => w * x,
        (false, None) => x,
    }
}

/// `A` vectors of `S::F64_LANES` lanes hold the 32 partial sums (vector a, lane l: partial sum
/// a · lanes + l).
#[inline(always)]
fn sum_with<S: Simd, const A: usize, const SQUARE: bool>(
    simd: S,
    w: Option<&[f64]>,
    x: &[f64],
    m: f64,
) -> f64 {
    debug_assert_eq!(A * S::F64_LANES, PARTIAL_SUMS);
    let n = w.map_or(x.len(), |w| w.len().min(x.len()));
    let whole = n - n % PARTIAL_SUMS;
    let zero = simd.splat_f64s(0.0);
    let mv = simd.splat_f64s(m);
    let mut acc = [zero; A];
    let (xv, _) = S::as_simd_f64s(&x[..whole]);
    match w {
        Some(w) => {
            let (wv, _) = S::as_simd_f64s(&w[..whole]);
            for (xb, wb) in xv.chunks_exact(A).zip(wv.chunks_exact(A)) {
                for a in 0..A {
                    let t = if SQUARE {
                        let c = simd.sub_f64s(xb[a], mv);
                        simd.mul_f64s(simd.mul_f64s(wb[a], c), c)
                    } else {
                        simd.mul_f64s(wb[a], xb[a])
                    };
                    acc[a] = simd.add_f64s(acc[a], t);
                }
            }
        }
        None => {
            for xb in xv.chunks_exact(A) {
                for a in 0..A {
                    let t = if SQUARE {
                        let c = simd.sub_f64s(xb[a], mv);
                        simd.mul_f64s(c, c)
                    } else {
                        xb[a]
                    };
                    acc[a] = simd.add_f64s(acc[a], t);
                }
            }
        }
    }
    let mut partial = [0.0f64; PARTIAL_SUMS];
    let (pv, _) = S::as_mut_simd_f64s(&mut partial);
    pv[..A].copy_from_slice(&acc);
    finish::<SQUARE>(partial, w, x, m, whole, n)
}

/// The same sums with 32 scalar accumulators (no SIMD).
#[inline(always)]
fn sum_scalar<const SQUARE: bool>(w: Option<&[f64]>, x: &[f64], m: f64) -> f64 {
    let n = w.map_or(x.len(), |w| w.len().min(x.len()));
    let whole = n - n % PARTIAL_SUMS;
    let mut partial = [0.0f64; PARTIAL_SUMS];
    for i in (0..whole).step_by(PARTIAL_SUMS) {
        for (l, p) in partial.iter_mut().enumerate() {
            *p += term::<SQUARE>(w.map(|w| w[i + l]), x[i + l], m);
        }
    }
    finish::<SQUARE>(partial, w, x, m, whole, n)
}

/// Combines the partial sums pairwise (16 + 16, then 8 + 8, ...) and adds the tail after them,
/// summed in order.
#[inline(always)]
fn finish<const SQUARE: bool>(
    mut partial: [f64; PARTIAL_SUMS],
    w: Option<&[f64]>,
    x: &[f64],
    m: f64,
    whole: usize,
    n: usize,
) -> f64 {
    let mut half = PARTIAL_SUMS / 2;
    while half > 0 {
        for l in 0..half {
            partial[l] += partial[l + half];
        }
        half /= 2;
    }
    let mut tail = 0.0;
    for i in whole..n {
        tail += term::<SQUARE>(w.map(|w| w[i]), x[i], m);
    }
    partial[0] + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An independent reference in extended precision: exact products and sums of the rounded
    /// terms via Kahan–Babuška (Neumaier) summation.
    fn reference(w: Option<&[f64]>, x: &[f64], m: f64, square: bool) -> f64 {
        let (mut s, mut c) = (0.0f64, 0.0f64);
        for (i, &xi) in x.iter().enumerate() {
            let wi = w.map_or(1.0, |w| w[i]);
            let t = if square {
                wi * (xi - m) * (xi - m)
            } else {
                wi * xi
            };
            let u = s + t;
            c += if s.abs() >= t.abs() {
                (s - u) + t
            } else {
                (t - u) + s
            };
            s = u;
        }
        s + c
    }

    fn data(n: usize) -> (Vec<f64>, Vec<f64>) {
        let x = (0..n)
            .map(|i| ((i * 7919 % 1009) as f64 - 500.0) * 0.013 + 3.0)
            .collect();
        let w = (0..n).map(|i| ((i * 31 % 97) as f64) / 97.0).collect();
        (x, w)
    }

    #[test]
    fn sums_match_a_compensated_reference_at_every_length() {
        for n in [0, 1, 5, 31, 32, 33, 64, 100, 1000, 4099] {
            let (x, w) = data(n);
            let m = 2.9;
            for wo in [None, Some(w.as_slice())] {
                let got_sum = weighted_sum(pulp::Scalar::new(), wo, &x);
                let got_sq = weighted_sum_sq(pulp::Scalar::new(), wo, &x, m);
                for (got, want) in [
                    (got_sum, reference(wo, &x, 0.0, false)),
                    (got_sq, reference(wo, &x, m, true)),
                ] {
                    let tol = 1e-13 * (1.0 + want.abs());
                    assert!((got - want).abs() <= tol, "n = {n}: {got} vs {want}");
                }
            }
        }
    }

    /// The widest instruction set this machine has, and AVX2 where present, give the scalar
    /// path's bits.
    #[test]
    fn every_instruction_set_gives_the_same_bits() {
        struct Sums<'a>(Option<&'a [f64]>, &'a [f64]);
        impl pulp::WithSimd for Sums<'_> {
            type Output = (f64, f64);
            #[inline(always)]
            fn with_simd<S: Simd>(self, simd: S) -> (f64, f64) {
                (
                    weighted_sum(simd, self.0, self.1),
                    weighted_sum_sq(simd, self.0, self.1, 1.25),
                )
            }
        }
        for n in [3, 32, 77, 4096, 4133] {
            let (x, w) = data(n);
            for wo in [None, Some(w.as_slice())] {
                let scalar = pulp::WithSimd::with_simd(Sums(wo, &x), pulp::Scalar::new());
                let mut paths = vec![("widest", pulp::Arch::new().dispatch(Sums(wo, &x)))];
                // AVX2 (four lanes, eight vector accumulators) where the CPU has it.
                #[cfg(target_arch = "x86_64")]
                if let Some(v3) = pulp::x86::V3::try_new() {
                    paths.push((
                        "avx2",
                        v3.vectorize(|| pulp::WithSimd::with_simd(Sums(wo, &x), v3)),
                    ));
                }
                for (path, got) in paths {
                    assert_eq!(got.0.to_bits(), scalar.0.to_bits(), "{path} sum, n = {n}");
                    assert_eq!(
                        got.1.to_bits(),
                        scalar.1.to_bits(),
                        "{path} squares, n = {n}"
                    );
                }
            }
        }
    }
}
