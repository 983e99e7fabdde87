//! Posteriors straight from scores formed in registers: each vector of rows has its K scores
//! formed by the model's own formula ([`ScoreFormula`]) and their softmax taken there, with the
//! bits of the scores then [`density::exp::softmax_rows_of_finite_scores`].
//!
//! Why: the scores written out and read back by the softmax, its exponentials stored and read
//! back for the scaling, cost more than the scores' arithmetic where rows have few features.
//! In a scratch program (512 rows of two features in L1, ten classes, best of 4,000, TSC ticks
//! a row) LDA's scores then `softmax_rows` took 28.1–28.6, the scores alone 9.5–9.7, and the
//! two in registers 16.8–17.8, with the same bits.
//!
//! Each formula supplies a [`VectorScores`]: the K scores of one vector of 8 rows, in the
//! operations and order of its own scores kernel (`linear_scores`, Gaussian naive Bayes'
//! diagonal log joints, `density::mahalanobis`' in-register substitution for QDA), so that a
//! row's posteriors are the same bits whichever path takes it.

use std::mem::MaybeUninit;

use faer::MatRef;

use crate::linear_scores::MAX_STREAMED_CLASSES;
use crate::score_formula::ScoreFormula;

/// Fewest classes [`unwritten_posteriors`] takes. Two take the two-class softmax's own
/// arithmetic (one exponential per row); they went to the scores then a softmax pass over them
/// until the ninety-ninth round, on the view that the pass was cheap beside moving the rows and
/// the output (Zen 4 EPYC, `profile`, n = 1e6, two threads, `PROFILE_COLD=cs`, p10 of 33
/// alternated runs, scores then softmax → in registers): `qda-predict 2 2` 1.75 → 1.14 ms,
/// `lda-predict 2 2` 1.68 → 1.03 ms, `gnb-predict 16 2` 6.08 → 4.57 ms, `lda-predict 16 2`
/// 4.63 → 4.61 ms; 22 runs: `gnb-predict 2 2` 1.80 → 1.25 ms, `bnb-predict 16 2` 5.17 → 3.59
/// ms, `mnb-predict 2 2` 1.51 → 1.04 ms.
pub(crate) const FUSED_MIN_CLASSES: usize = 2;

/// Most classes [`unwritten_posteriors`] takes: the linear scores' streamed kernel's.
pub(crate) const FUSED_MAX_CLASSES: usize = MAX_STREAMED_CLASSES;

/// Most features of the diagonal formula (Gaussian naive Bayes) [`unwritten_posteriors`]
/// takes, each vector of rows read from that many columns at once. Against the log joints by
/// groups of columns then the softmax (Zen 4 EPYC, `profile gnb-predict`, p10 of alternated
/// runs): d = 16, K = 10, n = 1e6 on two threads from memory (`PROFILE_COLD=cs`, 66 runs) 12.6
/// → 11.4 ms; one thread, 131,072 rows in L3 (168 runs), d = 8, K = 10 1.95 → 1.67 ms, d = 16,
/// K = 3 1.17 → 0.94 ms. Wider rows were not tried: the log joints go by groups of columns
/// at all because d = 64 streams read at once outran the prefetchers.
pub(crate) const FUSED_DIAGONAL_MAX_FEATURES: usize = 16;

/// Most features of the full formula (QDA) [`unwritten_posteriors`] takes: those whose
/// substitution `density::mahalanobis` does in registers (`small_squared_norm`). 3 until the
/// ninety-ninth round; against the log joints then the softmax (Zen 4 EPYC, `profile
/// qda-predict`, p10 of alternated runs): one thread, 131,072 rows in L3 (84 runs), d = 4,
/// K = 10 2.14 → 1.64 ms, d = 8, K = 10 3.68 → 3.16 ms, d = 6, K = 3 0.90 → 0.80 ms; n = 1e6
/// on two threads from memory (`PROFILE_COLD=cs`, 33 runs), d = 4, K = 10 10.4 → 7.2 ms, d = 8,
/// K = 10 15.1 → 12.7 ms. At 12 and 16 features the kernel was 7 times as slow (its arrays
/// spilled from the registers).
pub(crate) const FUSED_FULL_MAX_FEATURES: usize = density::mahalanobis::IN_REGISTERS_MAX_COLUMNS;

/// The strict lower triangle of [`FUSED_FULL_MAX_FEATURES`] columns.
#[cfg(target_arch = "x86_64")]
const FUSED_FULL_MAX_STRICT: usize = density::mahalanobis::IN_REGISTERS_MAX_STRICT;

/// One vector of f64 lanes of AVX-512.
#[cfg(target_arch = "x86_64")]
pub(crate) type Lanes = <pulp::x86::V4 as pulp::Simd>::f64s;

/// The K scores of each vector of 8 rows, formed in registers.
#[cfg(target_arch = "x86_64")]
pub(crate) trait VectorScores<const K: usize> {
    /// The columns it reads, as vectors of rows.
    fn columns(&self) -> &[&[Lanes]];
    /// The scores of vector `v` (< [`vectors`](Self::vectors)), and whether the formula
    /// accepts every value of its rows.
    fn scores(&self, simd: pulp::x86::V4, v: usize) -> ([Lanes; K], bool);

    /// Whole vectors of rows it holds.
    #[inline(always)]
    fn vectors(&self) -> usize {
        self.columns().iter().map(|c| c.len()).min().unwrap_or(0)
    }

    /// Asks for vector `v` of every column from memory (nothing past the end).
    #[inline(always)]
    fn ask(&self, v: usize) {
        for column in self.columns() {
            density::block::prefetch(column, v);
        }
    }
}

/// How many vectors of rows ahead of the one it scores [`posteriors_in_registers`] asks for
/// from memory: each vector of a column is one cache line. Why: with 16 columns read at once
/// the hardware's prefetchers fell behind. `profile`, n = 1e6, two threads, `PROFILE_COLD=cs`,
/// p10 of alternated runs (without → 8 ahead): `lda-predict 16 10` 10.19 → 8.01 ms,
/// `gnb-predict 16 10` 11.90 → 10.73 ms (66 runs each), `mnb-predict 16 10` 11.61 → 10.60 ms;
/// at d = 2 even (`gnb-predict 2 10` 4.51 → 4.50 ms, `lda-predict 2 10` 4.48 → 4.55 ms; 55
/// runs). 16 ahead: `lda-predict 16 10` 8.51 (8) → 8.85 ms.
const VECTORS_AHEAD: usize = 8;

/// Runs `$body` with `$K` a constant equal to `$k` (2 to [`FUSED_MAX_CLASSES`]; larger values
/// take 10, so the caller checks the range first).
macro_rules! with_classes {
    ($k:expr, $K:ident, $body:expr) => {
        match $k {
            2 => {
                const $K: usize = 2;
                $body
            }
            3 => {
                const $K: usize = 3;
                $body
            }
            4 => {
                const $K: usize = 4;
                $body
            }
            5 => {
                const $K: usize = 5;
                $body
            }
            6 => {
                const $K: usize = 6;
                $body
            }
            7 => {
                const $K: usize = 7;
                $body
            }
            8 => {
                const $K: usize = 8;
                $body
            }
            9 => {
                const $K: usize = 9;
                $body
            }
            _ => {
                const $K: usize = 10;
                $body
            }
        }
    };
}
pub(crate) use with_classes;

/// Runs `$body` with `$W` a constant equal to `$w` (1 to [`FUSED_FULL_MAX_FEATURES`]; larger
/// values take the largest, so the caller checks the range first).
macro_rules! with_width {
    ($w:expr, $W:ident, $body:expr) => {
        match $w {
            1 => {
                const $W: usize = 1;
                $body
            }
            2 => {
                const $W: usize = 2;
                $body
            }
            3 => {
                const $W: usize = 3;
                $body
            }
            4 => {
                const $W: usize = 4;
                $body
            }
            5 => {
                const $W: usize = 5;
                $body
            }
            6 => {
                const $W: usize = 6;
                $body
            }
            7 => {
                const $W: usize = 7;
                $body
            }
            _ => {
                const $W: usize = FUSED_FULL_MAX_FEATURES;
                $body
            }
        }
    };
}

/// Posteriors straight from the scores of `formula`, for 2 to [`FUSED_MAX_CLASSES`] classes
/// and few features (linear: up to [`crate::linear_scores::FUSED_MAX_FEATURES`]; diagonal: up to [`FUSED_DIAGONAL_MAX_FEATURES`]; full:
/// up to [`FUSED_FULL_MAX_FEATURES`]), with AVX-512. Writes the posteriors of rows `0..first`
/// into `out` (K columns of `x.nrows()` values, not yet written) and returns `first`: the first
/// row of the first vector holding a value the formula does not accept, or whose largest score
/// or sum of scores is not finite, else the first row after the last whole vector. The rows
/// from `first` on are left unwritten, for the caller's scores and general path. `None`,
/// writing nothing, where no kernel takes the shape, `x`'s columns are not contiguous, or the
/// CPU has no AVX-512.
pub(crate) fn unwritten_posteriors(
    x: MatRef<'_, f64>,
    formula: &ScoreFormula<'_>,
    out: &mut [&mut [MaybeUninit<f64>]],
) -> Option<usize> {
    let (n, d, k) = (x.nrows(), x.ncols(), out.len());
    if !(FUSED_MIN_CLASSES..=FUSED_MAX_CLASSES).contains(&k)
        || d == 0
        || out.iter().any(|col| col.len() != n)
    {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    {
        let simd = pulp::x86::V4::try_new()?;
        match formula {
            ScoreFormula::Linear(linear) => {
                crate::linear_scores::fused_linear_posteriors(simd, x, linear, out)
            }
            ScoreFormula::DiagonalGaussian {
                means,
                inverse_variances,
                log_norms,
            } => {
                if d > FUSED_DIAGONAL_MAX_FEATURES
                    || means.len() != k * d
                    || inverse_variances.len() != k * d
                    || log_norms.len() != k
                {
                    return None;
                }
                let columns = lane_columns(x)?;
                Some(with_classes!(k, K, {
                    let rows = DiagonalRows::<K> {
                        columns: &columns,
                        // Column q's (μ_cq, 1/σ²_cq) for every class c.
                        parameters: (0..d)
                            .map(|q| {
                                std::array::from_fn(|c| {
                                    [means[c * d + q], inverse_variances[c * d + q]]
                                })
                            })
                            .collect(),
                        log_norms: std::array::from_fn(|c| log_norms[c]),
                    };
                    posteriors_in_registers::<K, _>(simd, rows, out)
                }))
            }
            ScoreFormula::FullGaussian {
                means,
                factors,
                log_norms,
            } => {
                if d > FUSED_FULL_MAX_FEATURES
                    || means.len() != k * d
                    || factors.len() != k * d * d
                    || log_norms.len() != k
                {
                    return None;
                }
                let columns = density::block::contiguous_columns(x, 0..d)?;
                Some(with_classes!(
                    k,
                    K,
                    with_width!(d, D, {
                        // Factor c's L_jt at c·d² + t·d + j (column-major).
                        let l = |c: usize, j: usize, t: usize| factors[c * d * d + t * d + j];
                        let rows = FullRows::<K, D> {
                            columns: std::array::from_fn(|q| {
                                <pulp::x86::V4 as pulp::Simd>::as_simd_f64s(columns[q]).0
                            }),
                            means: std::array::from_fn(|c| {
                                std::array::from_fn(|q| means[c * d + q])
                            }),
                            // −L_jt for t < j: the strict lower triangle row by row, as
                            // `density::mahalanobis` packs it, negated as its kernel takes it.
                            lower: std::array::from_fn(|c| {
                                let mut lower = [0.0; FUSED_FULL_MAX_STRICT];
                                for j in 0..D {
                                    for t in 0..j {
                                        lower[j * (j - 1) / 2 + t] = -l(c, j, t);
                                    }
                                }
                                lower
                            }),
                            inverse_diagonal: std::array::from_fn(|c| {
                                std::array::from_fn(|j| 1.0 / l(c, j, j))
                            }),
                            log_norms: std::array::from_fn(|c| log_norms[c]),
                        };
                        posteriors_in_registers::<K, _>(simd, rows, out)
                    })
                ))
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (formula, out);
        None
    }
}

/// `x`'s columns as whole vectors of rows (the rows after the last whole vector left out), or
/// `None` where they are not contiguous.
#[cfg(target_arch = "x86_64")]
pub(crate) fn lane_columns(x: MatRef<'_, f64>) -> Option<Vec<&[Lanes]>> {
    let columns = density::block::contiguous_columns(x, 0..x.ncols())?;
    Some(
        columns
            .iter()
            .map(|c| <pulp::x86::V4 as pulp::Simd>::as_simd_f64s(c).0)
            .collect(),
    )
}

/// The softmax of each vector of `rows`' scores, in registers (the operations of
/// `density::exp::softmax_rows`: the maximum over the classes in order, exp(v − m), their sum
/// from zero in class order, each times 1 / sum), into `out`'s K columns; returns the first row
/// it did not write (see [`unwritten_posteriors`]).
#[cfg(target_arch = "x86_64")]
pub(crate) fn posteriors_in_registers<const K: usize, R: VectorScores<K>>(
    simd: pulp::x86::V4,
    rows: R,
    out: &mut [&mut [MaybeUninit<f64>]],
) -> usize {
    // The closure moves its arguments in, so it is only `FnOnce` (see
    // `density::moments::ByRows::shifted_pair_sums`: a `call_once` shim over `call_mut` can be
    // left out of line, and the kernel's intrinsics with it).
    simd.vectorize(
        #[inline(always)]
        move || {
            let (rows, out) = (rows, out);
            softmax_body::<K, R>(simd, &rows, out)
        },
    )
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn softmax_body<const K: usize, R: VectorScores<K>>(
    simd: pulp::x86::V4,
    rows: &R,
    out: &mut [&mut [MaybeUninit<f64>]],
) -> usize {
    use pulp::Simd;
    let Ok(out): Result<&mut [&mut [MaybeUninit<f64>]; K], _> = out.try_into() else {
        return 0;
    };
    let vectors = out
        .iter()
        .map(|c| c.len() / 8)
        .chain([rows.vectors()])
        .min()
        .unwrap_or(0);
    let mut dst: [&mut [MaybeUninit<Lanes>]; K] = out
        .each_mut()
        .map(|c| &mut <pulp::x86::V4 as pulp::Simd>::as_uninit_mut_simd_f64s(c).0[..vectors]);
    let (zero, one) = (simd.splat_f64s(0.0), simd.splat_f64s(1.0));
    let infinity = simd.splat_f64s(f64::INFINITY);
    for v in 0..vectors {
        rows.ask(v + VECTORS_AHEAD);
        let (mut scores, accepted) = rows.scores(simd, v);
        if K == 2 {
            // The two-class softmax's own arithmetic, which wants both scores finite.
            let (a, b) = (scores[0], scores[1]);
            let finite_a = simd.less_than_f64s(simd.abs_f64s(a), infinity).0 == u8::MAX;
            let finite_b = simd.less_than_f64s(simd.abs_f64s(b), infinity).0 == u8::MAX;
            if !(accepted && finite_a && finite_b) {
                return v * 8;
            }
            let [p, q] = density::exp::two_class_posteriors_v4(simd, a, b);
            dst[0][v] = MaybeUninit::new(p);
            dst[K - 1][v] = MaybeUninit::new(q);
            continue;
        }
        // `softmax_vectors`' check of the finite scores: the maximum (which passes over a NaN)
        // and the scores' sum (which does not).
        let mut m = scores[0];
        let mut total = scores[0];
        for score in &scores[1..] {
            m = simd.max_f64s(*score, m);
            total = simd.add_f64s(total, *score);
        }
        // Plain expressions, not a closure: a closure's body may be compiled outside the
        // kernel's target features (`xtask check-inlining` found `vbroadcastsd` as a call).
        let finite_m = simd.less_than_f64s(simd.abs_f64s(m), infinity).0 == u8::MAX;
        let finite_total = simd.less_than_f64s(simd.abs_f64s(total), infinity).0 == u8::MAX;
        if !(accepted && finite_m && finite_total) {
            return v * 8;
        }
        let mut sum = zero;
        for score in scores.iter_mut() {
            // v − m ≤ 0 (m is the largest), as the softmax's.
            *score = density::exp::exp_nonpositive_v4(simd, simd.sub_f64s(*score, m));
            sum = simd.add_f64s(sum, *score);
        }
        let by = simd.div_f64s(one, sum);
        for (col, e) in dst.iter_mut().zip(scores) {
            col[v] = MaybeUninit::new(simd.mul_f64s(e, by));
        }
    }
    vectors * 8
}

/// Gaussian naive Bayes' log joints (`ScoreFormula::DiagonalGaussian`): as
/// `gaussian::unwritten_diagonal_log_joints` forms them, Σ_q fma((x_q − μ_q)², 1/σ²_q, acc)
/// from zero in column order, then log_norm − ½ · sum. Column by column, each class's sum in a
/// register of its own.
#[cfg(target_arch = "x86_64")]
struct DiagonalRows<'a, const K: usize> {
    columns: &'a [&'a [Lanes]],
    /// Column q's (μ_cq, 1/σ²_cq) for each class c.
    parameters: Vec<[[f64; 2]; K]>,
    log_norms: [f64; K],
}

#[cfg(target_arch = "x86_64")]
impl<const K: usize> VectorScores<K> for DiagonalRows<'_, K> {
    #[inline(always)]
    fn columns(&self) -> &[&[Lanes]] {
        self.columns
    }

    #[inline(always)]
    fn scores(&self, simd: pulp::x86::V4, v: usize) -> ([Lanes; K], bool) {
        use pulp::Simd;
        let (zero, half) = (simd.splat_f64s(0.0), simd.splat_f64s(0.5));
        let mut acc = [zero; K];
        for (column, parameters) in self.columns.iter().zip(&self.parameters) {
            let x = column[v];
            for c in 0..K {
                let [mean, iv] = parameters[c];
                let t = simd.sub_f64s(x, simd.splat_f64s(mean));
                acc[c] = simd.mul_add_f64s(simd.mul_f64s(t, t), simd.splat_f64s(iv), acc[c]);
            }
        }
        for c in 0..K {
            let ln = simd.splat_f64s(self.log_norms[c]);
            acc[c] = simd.sub_f64s(ln, simd.mul_f64s(half, acc[c]));
        }
        (acc, true)
    }
}

/// QDA's log densities (`ScoreFormula::FullGaussian`), D ≤ [`FUSED_FULL_MAX_FEATURES`]
/// columns: as `density::mahalanobis`' kernels form them (its own
/// `density::mahalanobis::small_squared_norm`), w = L⁻¹(x − μ) by forward substitution
/// (w_j = (z_j − L_j0 w_0 − … − L_j,j−1 w_j−1) / L_jj, each subtraction a fused multiply-add
/// and each division a multiplication by 1 / L_jj), ‖w‖² from zero, then
/// fma(−½, ‖w‖², log_norm).
#[cfg(target_arch = "x86_64")]
struct FullRows<'a, const K: usize, const D: usize> {
    columns: [&'a [Lanes]; D],
    means: [[f64; D]; K],
    /// −L_jt for t < j at j(j − 1)/2 + t (zero past D).
    lower: [[f64; FUSED_FULL_MAX_STRICT]; K],
    inverse_diagonal: [[f64; D]; K],
    log_norms: [f64; K],
}

#[cfg(target_arch = "x86_64")]
impl<const K: usize, const D: usize> VectorScores<K> for FullRows<'_, K, D> {
    #[inline(always)]
    fn columns(&self) -> &[&[Lanes]] {
        &self.columns[..]
    }

    #[inline(always)]
    fn scores(&self, simd: pulp::x86::V4, v: usize) -> ([Lanes; K], bool) {
        use pulp::Simd;
        let (zero, scale) = (simd.splat_f64s(0.0), simd.splat_f64s(-0.5));
        let mut x = [zero; D];
        for j in 0..D {
            x[j] = self.columns[j][v];
        }
        let mut scores = [zero; K];
        for c in 0..K {
            let mut z = [zero; D];
            for j in 0..D {
                z[j] = simd.sub_f64s(x[j], simd.splat_f64s(self.means[c][j]));
            }
            let mut inv = [zero; D];
            for j in 0..D {
                inv[j] = simd.splat_f64s(self.inverse_diagonal[c][j]);
            }
            let mut lower = [zero; FUSED_FULL_MAX_STRICT];
            for t in 0..D * D.saturating_sub(1) / 2 {
                lower[t] = simd.splat_f64s(self.lower[c][t]);
            }
            let norm = density::mahalanobis::small_squared_norm::<_, D>(simd, z, &lower, &inv);
            scores[c] = simd.mul_add_f64s(scale, norm, simd.splat_f64s(self.log_norms[c]));
        }
        (scores, true)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use faer::Mat;
    use std::borrow::Cow;

    /// A value in (−scale/2, scale/2) from a hash of its indices.
    fn spread(i: usize, j: usize, salt: usize, scale: f64) -> f64 {
        let h = (i * 7919 + j * 104_729 + salt * 1_299_709) % 10_007;
        (h as f64 / 10_007.0 - 0.5) * scale
    }

    /// Gaussian naive Bayes' and QDA's formulas with posteriors straight from their scores have
    /// the bits of the scores ([`ScoreFormula::write_unwritten`]) then `normalize_chunk`, up to
    /// the first vector of rows with a value whose scores are not finite (NaN, ±∞, or a finite
    /// value so far out that its scores overflow), and the scores from there on; every shape
    /// the kernels take, with rows after the last whole vector.
    #[test]
    fn gaussian_posteriors_from_registers_have_the_scores_then_softmaxs_bits() {
        let whole_vectors = cfg!(target_arch = "x86_64") && pulp::x86::V4::try_new().is_some();
        let mut taken = 0;
        for full in [false, true] {
            let max_d = match full {
                true => FUSED_FULL_MAX_FEATURES,
                false => FUSED_DIAGONAL_MAX_FEATURES,
            };
            for d in 1..=max_d {
                for k in [2, 3, 4, 7, FUSED_MAX_CLASSES] {
                    let means: Vec<f64> =
                        (0..k * d).map(|t| spread(t / d, t % d, 1, 4.0)).collect();
                    let log_norms: Vec<f64> = (0..k).map(|c| spread(c, 0, 2, 3.0)).collect();
                    // Each class's lower factor: a diagonal in [1, 2], below it in (−½, ½);
                    // its inverse variances the squares of the diagonal's inverses.
                    let mut factors = vec![0.0; k * d * d];
                    let mut inverse_variances = vec![0.0; k * d];
                    for c in 0..k {
                        for j in 0..d {
                            let l_jj = 1.5 + spread(c, j, 3, 1.0);
                            factors[c * d * d + j * d + j] = l_jj;
                            inverse_variances[c * d + j] = 1.0 / (l_jj * l_jj);
                            for t in 0..j {
                                factors[c * d * d + t * d + j] = spread(c, j * d + t, 4, 1.0);
                            }
                        }
                    }
                    let formula = match full {
                        true => ScoreFormula::FullGaussian {
                            means: Cow::Owned(means),
                            factors: Cow::Owned(factors),
                            log_norms: Cow::Owned(log_norms),
                        },
                        false => ScoreFormula::DiagonalGaussian {
                            means: Cow::Owned(means),
                            inverse_variances: Cow::Owned(inverse_variances),
                            log_norms: Cow::Owned(log_norms),
                        },
                    };
                    for (n, bad) in [
                        (0, None),
                        (5, None),
                        (61, None),
                        (300, None),
                        (300, Some((3, f64::NAN))),
                        (300, Some((131, f64::INFINITY))),
                        (300, Some((200, 1e200))),
                        (61, Some((58, f64::NEG_INFINITY))),
                    ] {
                        let case = format!("full {full} n {n} d {d} k {k} bad {bad:?}");
                        let mut x = Mat::from_fn(n, d, |i, j| spread(i, j, 5, 5.0));
                        if let Some((row, value)) = bad {
                            x[(row, d - 1)] = value;
                        }
                        let mut scores = Mat::<f64>::zeros(n, k);
                        write_scores(&formula, x.as_ref(), &mut scores);
                        let mut want = scores.clone();
                        crate::model::normalize_chunk(want.as_mut(), true, None);
                        let (got, answer) = posteriors_straight_from(&formula, x.as_ref(), k);
                        let Some((first, accepted)) = answer else {
                            assert!(!whole_vectors, "{case}: declined");
                            continue;
                        };
                        taken += 1;
                        assert!(accepted, "{case}");
                        let stop = bad
                            .map(|(r, _)| r)
                            .filter(|&r| r < n / 8 * 8)
                            .map_or(n / 8 * 8, |r| r / 8 * 8);
                        assert_eq!(first, stop, "{case}");
                        for i in 0..n {
                            for c in 0..k {
                                let expected = match i < first {
                                    true => want[(i, c)],
                                    false => scores[(i, c)],
                                };
                                assert_eq!(
                                    got[(i, c)].to_bits(),
                                    expected.to_bits(),
                                    "{case} ({i}, {c})"
                                );
                            }
                        }
                        // Some posteriors are neither 0 nor 1, so that the test has bits to
                        // compare.
                        if n == 300 && bad.is_none() {
                            let mid = (0..first).filter(|&i| (0..k).all(|c| got[(i, c)] < 0.99));
                            assert!(mid.count() > first / 4, "{case}");
                        }
                    }
                }
            }
        }
        assert!(!whole_vectors || taken > 0);
    }

    /// [`ScoreFormula::write_unwritten_posteriors`] of the rows `x` into a fresh n × K matrix
    /// (every value −7.5 before), and its answer.
    pub(crate) fn posteriors_straight_from(
        formula: &ScoreFormula<'_>,
        x: MatRef<'_, f64>,
        k: usize,
    ) -> (Mat<f64>, Option<(usize, bool)>) {
        let mut got = Mat::<f64>::from_fn(x.nrows(), k, |_, _| -7.5);
        let columns = density::block::contiguous_columns_mut(got.as_mut()).unwrap_or_default();
        // SAFETY: only values are written into the columns.
        #[allow(unsafe_code)]
        let columns = unsafe { density::block::as_unwritten_columns(columns) };
        let answer = formula.write_unwritten_posteriors(x, columns);
        (got, answer)
    }

    /// The formula's scores of `x` into `out`, by its own kernel.
    fn write_scores(formula: &ScoreFormula<'_>, x: MatRef<'_, f64>, out: &mut Mat<f64>) {
        let columns = density::block::contiguous_columns_mut(out.as_mut()).unwrap_or_default();
        // SAFETY: only values are written into the columns.
        #[allow(unsafe_code)]
        let columns = unsafe { density::block::as_unwritten_columns(columns) };
        assert_eq!(formula.write_unwritten(x, columns), Some(true));
    }
}
