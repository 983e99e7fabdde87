//! Weighted sufficient statistics of a Gaussian that merge exactly.
//!
//! Threads, chunks and machines each summarise their own rows; the summaries are then merged in a
//! fixed order. We keep the *centred* form (total weight, weighted mean, scatter
//! `Σ w (x - mean)(x - mean)ᵀ`) rather than raw `Σ w x xᵀ` sums, which lose every significant digit
//! when the mean is large relative to the spread. Merging uses the pairwise update of
//! Chan, Golub & LeVeque (1979), generalised to weights:
//!
//! ```text
//! W = Wa + Wb,  δ = mean_b - mean_a,  mean = mean_a + δ Wb / W,
//! M = Ma + Mb + δ δᵀ Wa Wb / W
//! ```

use faer::{Mat, MatRef};

use crate::{DensityError, Result};

/// Rows per chunk in [`SufficientStats::from_rows`]: a caller that computes the chunks'
/// statistics in parallel (each with [`SufficientStats::accumulate_rows`]) and merges them in
/// order gets the same bits.
pub const FROM_ROWS_CHUNK: usize = 8192;

/// Combine two summaries of disjoint data into the summary of their union.
pub trait Mergeable {
    /// `self ← self ∪ other`.
    fn merge(&mut self, other: &Self);
}

/// Which part of the scatter matrix is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ScatterKind {
    /// The whole d × d matrix (for full and shared covariances).
    Full,
    /// Only its diagonal (for diagonal and spherical covariances).
    Diagonal,
}

/// Weighted first and second centred moments of a set of d-dimensional rows.
#[derive(Debug, Clone, PartialEq)]
pub struct SufficientStats {
    kind: ScatterKind,
    weight: f64,
    mean: Vec<f64>,
    /// Full: d × d column-major; Diagonal: length d.
    scatter: Vec<f64>,
}

/// Fewest diagonal classes whose soft statistics [`SufficientStats::accumulate_rows_each`]
/// takes together. Measured with `profile-em D K diag` (fastest M-step of 3 iterations, two runs
/// each, AMD EPYC Zen 4): together, d = 64, K = 10 0.114 → 0.088 s, d = 16, K = 10 0.029 →
/// 0.023 s, d = 64, K = 4 0.054 → 0.050 s; no faster at K = 3 (0.043 against 0.043 and 0.050 s),
/// slower at K = 2 (0.031–0.034 → 0.038 s).
const TOGETHER_MIN_CLASSES: usize = 4;

/// Which entry of a scatter's column (its `diagonal`-th entry the feature's own) is not finite:
/// `"variance"` for that one, else `"covariance"` for any other, else none. Shared by
/// [`SufficientStats::first_overflow`] and scatters pooled over classes.
pub fn column_overflow(column: &[f64], diagonal: usize) -> Option<&'static str> {
    if !column[diagonal].is_finite() {
        Some("variance")
    } else if column.iter().any(|v| !v.is_finite()) {
        Some("covariance")
    } else {
        None
    }
}

impl SufficientStats {
    /// Empty statistics (zero weight) for rows of length `n_features`.
    pub fn new(n_features: usize, kind: ScatterKind) -> Self {
        let len = match kind {
            ScatterKind::Full => n_features * n_features,
            ScatterKind::Diagonal => n_features,
        };
        Self {
            kind,
            weight: 0.0,
            mean: vec![0.0; n_features],
            scatter: vec![0.0; len],
        }
    }

    /// Replaces `self` (diagonal statistics of as many features) by diagonal statistics from
    /// their parts: the total weight, the mean and Σ w (x − mean)² per feature (as
    /// [`crate::moments::grouped_sums_and_squares`] gives them for a class). Zero weight (an
    /// empty class) keeps a zero mean and scatter. In place, for a caller that fills one set of
    /// statistics again chunk after chunk rather than allocating it.
    pub fn set_diagonal_parts(&mut self, weight: f64, mean: &[f64], scatter: &[f64]) {
        debug_assert_eq!(self.kind, ScatterKind::Diagonal);
        if self.set_weight_and_mean(weight, mean) {
            self.scatter.copy_from_slice(scatter);
        }
    }

    /// The weight and mean for [`SufficientStats::set_diagonal_parts`] and
    /// [`SufficientStats::set_full_packed`], and whether the scatter is still to be set:
    /// at zero weight (an empty class) everything is zeroed here.
    fn set_weight_and_mean(&mut self, weight: f64, mean: &[f64]) -> bool {
        if weight <= 0.0 {
            self.weight = 0.0;
            self.mean.fill(0.0);
            self.scatter.fill(0.0);
            return false;
        }
        self.weight = weight;
        self.mean.copy_from_slice(mean);
        true
    }

    /// Replaces `self` (full statistics of as many features) by full statistics from their
    /// parts: the total weight, the mean and the lower triangle of Σ w (x − mean)(x − mean)ᵀ
    /// packed row by row (entry (j, k), k ≤ j, at j(j + 1)/2 + k, as
    /// [`crate::moments::grouped_cross_products`] gives it for a class). Zero weight (an empty
    /// class) keeps a zero mean and scatter. In place, as [`SufficientStats::set_diagonal_parts`].
    pub fn set_full_packed(&mut self, weight: f64, mean: &[f64], lower: &[f64]) {
        debug_assert_eq!(self.kind, ScatterKind::Full);
        let d = self.mean.len();
        debug_assert_eq!(lower.len(), d * (d + 1) / 2);
        if !self.set_weight_and_mean(weight, mean) {
            return;
        }
        for j in 0..d {
            for k in 0..=j {
                let v = lower[j * (j + 1) / 2 + k];
                self.scatter[k * d + j] = v;
                self.scatter[j * d + k] = v;
            }
        }
    }

    /// Number of features d.
    pub fn n_features(&self) -> usize {
        self.mean.len()
    }

    /// Which part of the scatter is stored.
    pub fn kind(&self) -> ScatterKind {
        self.kind
    }

    /// Total weight Σ w.
    pub fn weight(&self) -> f64 {
        self.weight
    }

    /// Weighted mean (zeros when the weight is zero).
    pub fn mean(&self) -> &[f64] {
        &self.mean
    }

    /// Scatter `Σ w (x - mean)(x - mean)ᵀ`: d × d column-major for `Full`, the diagonal for
    /// `Diagonal`.
    pub fn scatter(&self) -> &[f64] {
        &self.scatter
    }

    /// Adds one row with weight `w ≥ 0` (West 1979, the weighted incremental update).
    pub fn push(&mut self, x: &[f64], w: f64) {
        debug_assert_eq!(x.len(), self.mean.len());
        if w <= 0.0 {
            return;
        }
        let d = self.mean.len();
        let new_weight = self.weight + w;
        let ratio = w / new_weight;
        let delta: Vec<f64> = x.iter().zip(&self.mean).map(|(a, m)| a - m).collect();
        for (m, dl) in self.mean.iter_mut().zip(&delta) {
            *m += dl * ratio;
        }
        // M += w * W_old / W_new * δ δᵀ
        let scale = self.weight * ratio;
        match self.kind {
            ScatterKind::Full => {
                for j in 0..d {
                    for i in 0..d {
                        self.scatter[j * d + i] += scale * delta[i] * delta[j];
                    }
                }
            }
            ScatterKind::Diagonal => {
                for (s, dl) in self.scatter.iter_mut().zip(&delta) {
                    *s += scale * dl * dl;
                }
            }
        }
        self.weight = new_weight;
    }

    /// Statistics of the rows of `x` (n × d) with per-row weights: per fixed chunk of rows, the
    /// weighted mean, then the scatter of the rows centred at it
    /// ([`crate::scatter::weighted_mean_and_scatter`]); chunks are merged in order.
    ///
    /// Uses `Par::Seq`: callers parallelise over fixed chunks and merge in order, which keeps
    /// results bit-identical across thread counts.
    pub fn from_rows(x: MatRef<'_, f64>, weights: &[f64], kind: ScatterKind) -> Result<Self> {
        let (n, d) = (x.nrows(), x.ncols());
        if weights.len() != n {
            return Err(DensityError::DimensionMismatch {
                what: "weights vs rows",
                expected: n,
                got: weights.len(),
            });
        }
        // Fixed chunks merged in order: the scratch buffer stays chunk × d whatever n is.
        let mut buffer = Vec::new();
        let mut out = Self::new(d, kind);
        let mut part = Self::new(d, kind);
        for start in (0..n).step_by(FROM_ROWS_CHUNK) {
            let len = FROM_ROWS_CHUNK.min(n - start);
            part.accumulate_rows(
                x.subrows(start, len),
                &weights[start..start + len],
                &mut buffer,
            );
            out.merge(&part);
        }
        Ok(out)
    }

    /// Replaces `self` by the statistics of `x` with `weights` (lengths must already agree),
    /// reusing `buffer` as scratch so a hot loop does not allocate.
    ///
    /// The sums run with the CPU's widest SIMD (each kernel dispatches on it at run time:
    /// [`crate::scatter`] for full scatters, [`crate::moments`] for diagonal ones).
    pub fn accumulate_rows(&mut self, x: MatRef<'_, f64>, weights: &[f64], buffer: &mut Vec<f64>) {
        self.accumulate_body(x, None, Some(weights), buffer);
    }

    /// As [`accumulate_rows`](Self::accumulate_rows) on each of `stats` with its own weights
    /// (`weights[c]` for `stats[c]`, each as long as `x` has rows), the same bits, with the
    /// rows of `x` laid out once in `block` for every full scatter rather than once each (the
    /// classes of a soft M-step share their rows). `block` and `buffer` are scratch. `totals`:
    /// each weighting's [`crate::numerics::sums_and_nonzeros`], if the caller has them (they are
    /// computed otherwise).
    pub fn accumulate_rows_each(
        stats: &mut [SufficientStats],
        x: MatRef<'_, f64>,
        weights: &[&[f64]],
        totals: Option<&[(f64, usize)]>,
        block: &mut crate::scatter::RowBlock,
        buffer: &mut Vec<f64>,
    ) {
        let computed;
        let sums = match totals {
            Some(t) => t,
            None => {
                computed = crate::numerics::sums_and_nonzeros(weights);
                &computed
            }
        };
        debug_assert_eq!(sums.len(), weights.len());
        // Diagonal statistics with weights mostly non-zero: all such classes together, each
        // piece of rows read once for all of them (`diagonal_moments_each`), when there are
        // at least [`TOGETHER_MIN_CLASSES`]. Full ones with weights mostly non-zero: laid out
        // once in `block`, their means and scatters sharing its reads.
        let (mut together, mut totals) = (Vec::new(), Vec::new());
        let mut laid = Vec::new();
        for (c, (st, &w)) in stats.iter_mut().zip(weights).enumerate() {
            debug_assert_eq!(w.len(), x.nrows());
            let (total, nonzero) = sums[c];
            let mostly_zero = nonzero_few(nonzero, w.len());
            if st.kind == ScatterKind::Diagonal && total > 0.0 && !mostly_zero {
                together.push(c);
                totals.push(total);
                continue;
            }
            // Mostly-zero weights and empty classes as one at a time.
            if st.kind != ScatterKind::Full || total <= 0.0 || mostly_zero {
                st.accumulate_rows(x, w, buffer);
                continue;
            }
            st.weight = total;
            laid.push(crate::scatter::ClassMoments {
                weights: w,
                total,
                mean: &mut st.mean,
                scatter: &mut st.scatter,
            });
        }
        if !laid.is_empty() {
            block.load(x);
            block.weighted_means_and_scatters(&mut laid, buffer);
        }
        // With few classes, one at a time takes each column's squares while its sums left it in
        // L1, and reads the block no more often than the two passes over it together do.
        let d = x.ncols();
        let chosen: Vec<&[f64]> = together.iter().map(|&c| weights[c]).collect();
        let (mut means, mut scatters) = (vec![0.0; chosen.len() * d], vec![0.0; chosen.len() * d]);
        let done = together.len() >= TOGETHER_MIN_CLASSES
            && crate::moments::diagonal_moments_each(
                x,
                &chosen,
                &totals,
                &mut means,
                &mut scatters,
            );
        for (i, &c) in together.iter().enumerate() {
            let st = &mut stats[c];
            if done {
                st.weight = totals[i];
                st.mean.copy_from_slice(&means[i * d..(i + 1) * d]);
                st.scatter.copy_from_slice(&scatters[i * d..(i + 1) * d]);
            } else {
                st.accumulate_rows(x, weights[c], buffer);
            }
        }
    }

    /// Replaces `self` by the statistics of the rows of `x`, each of weight one (a class's rows
    /// in a supervised fit): the products skip the weighting.
    pub fn accumulate_unweighted(&mut self, x: MatRef<'_, f64>, buffer: &mut Vec<f64>) {
        self.accumulate_body(x, None, None, buffer);
    }

    /// Replaces `self` (full statistics) by the statistics of class `c`'s rows of `blocks`, each
    /// of weight one: the bits [`crate::scatter::mean_and_scatter_of_rows`] gives for the same
    /// rows.
    pub fn accumulate_class(
        &mut self,
        blocks: &mut crate::scatter::ClassBlocks,
        c: usize,
        buffer: &mut Vec<f64>,
    ) {
        debug_assert_eq!(self.kind, ScatterKind::Full);
        self.weight = blocks.class_len(c) as f64;
        blocks.mean_and_scatter(c, &mut self.mean, &mut self.scatter, buffer);
    }

    /// The statistics of the selected rows of `x` (all when `rows` is `None`) with `weights`
    /// for them (one each when `None`).
    #[inline(always)]
    fn accumulate_body(
        &mut self,
        x: MatRef<'_, f64>,
        rows: Option<&[usize]>,
        weights: Option<&[f64]>,
        buffer: &mut Vec<f64>,
    ) {
        let n = rows.map_or(x.nrows(), <[usize]>::len);
        debug_assert!(weights.is_none_or(|w| w.len() == n));
        let total: f64 = weights.map_or(n as f64, crate::numerics::sum);
        self.weight = total;
        self.mean.iter_mut().for_each(|m| *m = 0.0);
        self.scatter.iter_mut().for_each(|s| *s = 0.0);
        if total <= 0.0 {
            self.weight = 0.0;
            return;
        }
        // Rows of weight zero add nothing: when most are, only the others are read.
        if let (None, Some(w)) = (rows, weights)
            && mostly_zero(w)
        {
            let kept: Vec<usize> = (0..n).filter(|&i| w[i] != 0.0).collect();
            let kept_w: Vec<f64> = kept.iter().map(|&i| w[i]).collect();
            return self.accumulate_body(x, Some(&kept), Some(&kept_w), buffer);
        }
        match self.kind {
            ScatterKind::Full => crate::scatter::mean_and_scatter(
                x,
                rows,
                weights,
                total,
                &mut self.mean,
                &mut self.scatter,
                buffer,
            ),
            // Columns as contiguous slices (a subset of rows gathered a column at a time, and
            // a row-major x's columns copied), so the sums vectorise.
            ScatterKind::Diagonal => match rows {
                Some(rows) => crate::moments::diagonal_moments_of_rows(
                    x,
                    rows,
                    weights,
                    total,
                    &mut self.mean,
                    &mut self.scatter,
                ),
                None => crate::moments::diagonal_moments(
                    x,
                    weights,
                    total,
                    &mut self.mean,
                    &mut self.scatter,
                ),
            },
        }
    }

    /// The first feature (in order) whose mean, variance or covariance with another feature is
    /// not finite, as (`"mean"`, `"variance"` or `"covariance"`, feature). Only statistics of
    /// finite values that overflowed f64 give one: squares of values beyond about 1.3e154, or
    /// sums of values near `f64::MAX`. Why: a fit would otherwise report the infinite scatter as
    /// a singular covariance, or build a model with infinite parameters, and name neither the
    /// feature nor the cause.
    pub fn first_overflow(&self) -> Option<(&'static str, usize)> {
        let d = self.n_features();
        (0..d).find_map(|j| {
            let (column, diagonal) = match self.kind {
                ScatterKind::Full => (&self.scatter[j * d..(j + 1) * d], j),
                ScatterKind::Diagonal => (&self.scatter[j..=j], 0),
            };
            match self.mean[j].is_finite() {
                false => Some("mean"),
                true => column_overflow(column, diagonal),
            }
            .map(|statistic| (statistic, j))
        })
    }

    /// Maximum-likelihood covariance `scatter / weight` as a d × d matrix (a diagonal one for
    /// `Diagonal`).
    pub fn covariance(&self) -> Result<Mat<f64>> {
        if self.weight <= 0.0 {
            return Err(DensityError::ZeroWeight {
                what: "sufficient statistics",
            });
        }
        let d = self.n_features();
        Ok(match self.kind {
            ScatterKind::Full => Mat::from_fn(d, d, |i, j| self.scatter[j * d + i] / self.weight),
            ScatterKind::Diagonal => Mat::from_fn(d, d, |i, j| {
                if i == j {
                    self.scatter[i] / self.weight
                } else {
                    0.0
                }
            }),
        })
    }

    /// Maximum-likelihood variances (the diagonal of the covariance).
    pub fn variances(&self) -> Result<Vec<f64>> {
        if self.weight <= 0.0 {
            return Err(DensityError::ZeroWeight {
                what: "sufficient statistics",
            });
        }
        let d = self.n_features();
        Ok((0..d)
            .map(|i| match self.kind {
                ScatterKind::Full => self.scatter[i * d + i] / self.weight,
                ScatterKind::Diagonal => self.scatter[i] / self.weight,
            })
            .collect())
    }
}

/// Whether fewer than 7 in 8 of the weights are non-zero: then only the rows of the others are
/// read (with one-hot responsibilities, the labeled rows of EM and hard EM, most rows of each
/// class's pass have weight zero, and the pass costs O(rows of the class), not O(n)).
fn mostly_zero(w: &[f64]) -> bool {
    let nonzero = w.iter().filter(|v| **v != 0.0).count();
    nonzero_few(nonzero, w.len())
}

/// `nonzero` of `n` weights are too few to read every row ([`mostly_zero`]).
fn nonzero_few(nonzero: usize, n: usize) -> bool {
    nonzero * 8 < n * 7
}

impl Mergeable for SufficientStats {
    fn merge(&mut self, other: &Self) {
        debug_assert_eq!(self.kind, other.kind);
        debug_assert_eq!(self.mean.len(), other.mean.len());
        if other.weight <= 0.0 {
            return;
        }
        if self.weight <= 0.0 {
            self.clone_from(other);
            return;
        }
        let d = self.mean.len();
        let total = self.weight + other.weight;
        // δ and its scaled copy on the stack at small d.
        let mut room = crate::block::SmallBuffer::default();
        let (delta, scaled) = room.zeros(2 * d).split_at_mut(d);
        delta
            .iter_mut()
            .zip(other.mean.iter().zip(&self.mean))
            .for_each(|(dl, (b, a))| *dl = b - a);
        let ratio = other.weight / total;
        for (m, dl) in self.mean.iter_mut().zip(delta.iter()) {
            *m += dl * ratio;
        }
        let scale = self.weight * ratio;
        match self.kind {
            ScatterKind::Full => {
                // Column by column over slices, so the loop vectorises (indexing kept it scalar:
                // a QDA fit at d = 64, K = 10 spent 16 ms in its 2,450 merges); each entry is
                // still (scale · δ_i) · δ_j, the same bits.
                scaled
                    .iter_mut()
                    .zip(delta.iter())
                    .for_each(|(s, dl)| *s = scale * dl);
                let scaled = &*scaled;
                let columns = self
                    .scatter
                    .chunks_exact_mut(d)
                    .zip(other.scatter.chunks_exact(d));
                for ((s, o), dj) in columns.zip(delta.iter()) {
                    for ((s, o), sd) in s.iter_mut().zip(o).zip(scaled) {
                        *s += o + sd * dj;
                    }
                }
            }
            ScatterKind::Diagonal => {
                for i in 0..d {
                    self.scatter[i] += other.scatter[i] + scale * delta[i] * delta[i];
                }
            }
        }
        self.weight = total;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn naive(rows: &[Vec<f64>], w: &[f64]) -> (f64, Vec<f64>, Vec<f64>) {
        let d = rows[0].len();
        let total: f64 = w.iter().sum();
        let mean: Vec<f64> = (0..d)
            .map(|j| rows.iter().zip(w).map(|(r, w)| w * r[j]).sum::<f64>() / total)
            .collect();
        let mut s = vec![0.0; d * d];
        for (r, w) in rows.iter().zip(w) {
            for j in 0..d {
                for i in 0..d {
                    s[j * d + i] += w * (r[i] - mean[i]) * (r[j] - mean[j]);
                }
            }
        }
        (total, mean, s)
    }

    fn to_mat(rows: &[Vec<f64>]) -> Mat<f64> {
        Mat::from_fn(rows.len(), rows[0].len(), |i, j| rows[i][j])
    }

    fn close(a: &[f64], b: &[f64], tol: f64) -> bool {
        a.iter()
            .zip(b)
            .all(|(x, y)| (x - y).abs() <= tol * (1.0 + x.abs().max(y.abs())))
    }

    #[test]
    fn overflowed_statistics_name_their_first_feature() {
        // Finite rows whose squared deviations overflow f64 in column 1 (from column 2 on
        // nothing is checked once column 1 is named).
        let rows = [
            vec![1.0, 2.0, 1e300],
            vec![2.0, 1e200, -1e300],
            vec![4.0, -1e200, 1.0],
        ];
        let w = [1.0; 3];
        for kind in [ScatterKind::Full, ScatterKind::Diagonal] {
            let all = SufficientStats::from_rows(to_mat(&rows).as_ref(), &w, kind).unwrap();
            assert_eq!(all.first_overflow(), Some(("variance", 1)), "{kind:?}");
            let fine: Vec<Vec<f64>> = rows.iter().map(|r| vec![r[0], r[0] * 1e150]).collect();
            let fine = SufficientStats::from_rows(to_mat(&fine).as_ref(), &w, kind).unwrap();
            assert_eq!(fine.first_overflow(), None, "{kind:?}");
        }
        // A mean that overflowed (sums of values near f64::MAX) is named before a variance.
        let mut diagonal = SufficientStats::new(3, ScatterKind::Diagonal);
        diagonal.set_diagonal_parts(2.0, &[0.0, 1.0, f64::INFINITY], &[1.0, f64::INFINITY, 1.0]);
        assert_eq!(diagonal.first_overflow(), Some(("variance", 1)));
        diagonal.set_diagonal_parts(2.0, &[0.0, f64::INFINITY, 1.0], &[1.0, f64::INFINITY, 1.0]);
        assert_eq!(diagonal.first_overflow(), Some(("mean", 1)));
        // A covariance can overflow where both variances stay finite.
        let mut full = SufficientStats::new(2, ScatterKind::Full);
        full.set_full_packed(2.0, &[0.0, 0.0], &[1.0, f64::INFINITY, 1.0]);
        assert_eq!(full.first_overflow(), Some(("covariance", 0)));
        full.set_full_packed(2.0, &[0.0, 0.0], &[1.0, 0.5, 1.0]);
        assert_eq!(full.first_overflow(), None);
    }

    #[test]
    fn from_rows_push_and_naive_agree() {
        let rows: Vec<Vec<f64>> = (0..50)
            .map(|i| {
                let t = i as f64;
                vec![1e6 + (t * 0.37).sin(), (t * 1.3).cos() * 2.0, t * 0.01]
            })
            .collect();
        let w: Vec<f64> = (0..50).map(|i| 0.1 + (i % 7) as f64 * 0.3).collect();
        let (tw, mean, s) = naive(&rows, &w);
        let batch =
            SufficientStats::from_rows(to_mat(&rows).as_ref(), &w, ScatterKind::Full).unwrap();
        let mut inc = SufficientStats::new(3, ScatterKind::Full);
        for (r, wi) in rows.iter().zip(&w) {
            inc.push(r, *wi);
        }
        for st in [&batch, &inc] {
            assert!((st.weight() - tw).abs() < 1e-12);
            assert!(close(st.mean(), &mean, 1e-12));
            assert!(
                close(st.scatter(), &s, 1e-9),
                "{:?} vs {:?}",
                st.scatter(),
                s
            );
        }
        let diag =
            SufficientStats::from_rows(to_mat(&rows).as_ref(), &w, ScatterKind::Diagonal).unwrap();
        let want: Vec<f64> = (0..3).map(|i| s[i * 3 + i]).collect();
        assert!(close(diag.scatter(), &want, 1e-9));
    }

    #[test]
    fn stays_accurate_with_a_large_offset() {
        // Raw Σx² sums lose all digits here; the centred form must not.
        let rows: Vec<Vec<f64>> = (0..1000).map(|i| vec![1e9 + (i % 2) as f64]).collect();
        let w = vec![1.0; 1000];
        let st = SufficientStats::from_rows(to_mat(&rows).as_ref(), &w, ScatterKind::Full).unwrap();
        assert!((st.covariance().unwrap()[(0, 0)] - 0.25).abs() < 1e-9);
    }

    #[test]
    fn weight_mismatch_is_an_error() {
        let x = Mat::<f64>::zeros(3, 2);
        assert!(matches!(
            SufficientStats::from_rows(x.as_ref(), &[1.0], ScatterKind::Full),
            Err(DensityError::DimensionMismatch { .. })
        ));
        assert!(matches!(
            SufficientStats::new(2, ScatterKind::Full).covariance(),
            Err(DensityError::ZeroWeight { .. })
        ));
    }

    /// One layout shared by several weight vectors gives each the bits of `accumulate_rows`
    /// alone: rows over several passes of the kernel and a partial last vector, padding
    /// columns, every layout, a reused block (larger first, then the same shape again with other
    /// values), and weights dense, sparse (the
    /// compaction path), all zero, or with some zeros.
    #[test]
    fn accumulate_rows_each_equals_one_class_at_a_time() {
        let v = |i: usize, j: usize| {
            let h = (i * 7919 + j * 104_729 + 13) % 10_007;
            3.0 + j as f64 + (h as f64 / 10_007.0 - 0.5) * 10f64.powi((h % 4) as i32 - 1)
        };
        let mut block = crate::scatter::RowBlock::new();
        let mut buffer = Vec::new();
        // Each shape twice, with other values the second time, through the same block.
        let shapes = [(301, 17), (300, 5), (7, 3), (1, 1), (130, 2), (64, 16)];
        for ((n, d), shift) in shapes
            .into_iter()
            .flat_map(|shape| [(shape, 0), (shape, 1)])
        {
            let x = Mat::from_fn(n, d, |i, j| v(i + shift, j));
            let weights: Vec<Vec<f64>> = vec![
                (0..n).map(|i| 0.1 + v(i, 40) / 20.0).collect(),
                (0..n)
                    .map(|i| if i % 5 == 2 { 0.0 } else { v(i, 41) / 7.0 })
                    .collect(),
                (0..n).map(|i| if i % 9 == 0 { 1.0 } else { 0.0 }).collect(),
                vec![0.0; n],
                (0..n).map(|i| v(i, 42) * 1e-3).collect(),
            ];
            let refs: Vec<&[f64]> = weights.iter().map(Vec::as_slice).collect();
            let layouts = crate::test_layouts::Layouts::new(x.as_ref());
            for kind in [ScatterKind::Full, ScatterKind::Diagonal] {
                for view in layouts.views(x.as_ref()) {
                    let mut each: Vec<SufficientStats> =
                        refs.iter().map(|_| SufficientStats::new(d, kind)).collect();
                    SufficientStats::accumulate_rows_each(
                        &mut each,
                        view,
                        &refs,
                        None,
                        &mut block,
                        &mut buffer,
                    );
                    for (c, (got, w)) in each.iter().zip(&refs).enumerate() {
                        let mut want = SufficientStats::new(d, kind);
                        want.accumulate_rows(view, w, &mut Vec::new());
                        assert_eq!(got, &want, "n={n} d={d} {kind:?} weights {c}");
                    }
                    // A non-trivial check, not two empty results.
                    assert!(each[0].weight() > 0.0 && (n == 1 || each[0].scatter()[0] > 0.0));
                }
            }
        }
    }

    proptest! {
        #[test]
        fn merging_random_splits_matches_the_whole(
            data in prop::collection::vec((prop::collection::vec(-100.0f64..100.0, 3), 0.0f64..3.0), 2..60),
            cut_frac in 0.0f64..1.0,
            diag in any::<bool>(),
        ) {
            let kind = if diag { ScatterKind::Diagonal } else { ScatterKind::Full };
            let rows: Vec<Vec<f64>> = data.iter().map(|(r, _)| r.clone()).collect();
            let w: Vec<f64> = data.iter().map(|(_, w)| *w).collect();
            let cut = ((rows.len() as f64) * cut_frac) as usize;
            let whole = SufficientStats::from_rows(to_mat(&rows).as_ref(), &w, kind).unwrap();
            let part = |r: &[Vec<f64>], w: &[f64]| {
                if r.is_empty() { SufficientStats::new(3, kind) }
                else { SufficientStats::from_rows(to_mat(r).as_ref(), w, kind).unwrap() }
            };
            let mut a = part(&rows[..cut], &w[..cut]);
            let b = part(&rows[cut..], &w[cut..]);
            a.merge(&b);
            prop_assert!((a.weight() - whole.weight()).abs() < 1e-10);
            if whole.weight() > 0.0 {
                prop_assert!(close(a.mean(), whole.mean(), 1e-10));
                let scale = whole.scatter().iter().fold(1.0f64, |m, v| m.max(v.abs()));
                for (x, y) in a.scatter().iter().zip(whole.scatter()) {
                    prop_assert!((x - y).abs() <= 1e-10 * scale);
                }
            }
        }

        #[test]
        fn rows_of_weight_zero_are_the_same_as_no_rows(
            data in prop::collection::vec((prop::collection::vec(-100.0f64..100.0, 3), 0.1f64..3.0, any::<bool>()), 2..80),
            diag in any::<bool>(),
        ) {
            // The compaction path (most weights zero, as with one-hot responsibilities) against
            // the statistics of the kept rows alone.
            let kind = if diag { ScatterKind::Diagonal } else { ScatterKind::Full };
            let rows: Vec<Vec<f64>> = data.iter().map(|(r, _, _)| r.clone()).collect();
            let w: Vec<f64> = data.iter().map(|(_, w, keep)| if *keep { *w } else { 0.0 }).collect();
            let kept: Vec<usize> = (0..rows.len()).filter(|&i| w[i] > 0.0).collect();
            prop_assume!(!kept.is_empty());
            let with_zeros = SufficientStats::from_rows(to_mat(&rows).as_ref(), &w, kind).unwrap();
            let kept_rows: Vec<Vec<f64>> = kept.iter().map(|&i| rows[i].clone()).collect();
            let kept_w: Vec<f64> = kept.iter().map(|&i| w[i]).collect();
            let (total, mean, scatter) = naive(&kept_rows, &kept_w);
            prop_assert!((with_zeros.weight() - total).abs() < 1e-10);
            prop_assert!(close(with_zeros.mean(), &mean, 1e-10));
            let scale = scatter.iter().fold(1.0f64, |m, v| m.max(v.abs()));
            for (i, x) in with_zeros.scatter().iter().enumerate() {
                let want = if diag { scatter[i * 3 + i] } else { scatter[i] };
                prop_assert!((x - want).abs() <= 1e-10 * scale);
            }
        }
    }
}
