//! Gaussian discriminant analysis: p(x | y = k) = N(μ_k, Σ_k) with a choice of covariance
//! structure, fitted in closed form (seeds 001 and 002, Bishop §4.2.2):
//!
//! ```text
//! π_k = N_k / N,  μ_k = Σ_i r_ik x_i / N_k,  S_k = Σ_i r_ik (x_i − μ_k)(x_i − μ_k)ᵀ / N_k
//! Full (QDA):  Σ_k = S_k          Tied (LDA):  Σ = Σ_k (N_k / N) S_k
//! Diagonal (Gaussian naive Bayes): diag(S_k)   Spherical: (tr S_k / d) I
//! ```
//!
//! where N_k = Σ_i r_ik is the class's total responsibility. Regularisation: ridge `reg`·I,
//! fixed shrinkage toward a scaled identity or Ledoit–Wolf shrinkage (as scikit-learn's LDA: on
//! the standardised data, so toward the diagonal), and `var_smoothing` for the diagonal structures with scikit-learn's
//! meaning (ε = var_smoothing × the largest feature variance).
//!
//! Log-densities use the Cholesky factor of each covariance: a triangular solve whitens a block
//! of rows, and `ln|Σ| = 2 Σ ln L_ii`; no inverse or determinant is formed.

use density::linalg::{matmul, solve_lower_triangular_in_place, solve_upper_triangular_in_place};
use density::mahalanobis::gaussian_log_densities;
use std::mem::MaybeUninit;

use faer::{Accum, Mat, MatMut, MatRef, Par};

use density::moments::group_counts;
use density::regularize::{
    add_ridge, ledoit_wolf_shrinkage, shrink_toward_diagonal, shrink_toward_scaled_identity,
};
use density::scatter::{ClassBlocks, RowBlock, centring_by_group_pays, split_packs};
use density::stats::{Mergeable, ScatterKind, SufficientStats};

use crate::linear_scores::{self, Features};
use crate::model::{
    Checked, GenerativeClassifier, HyperParams, Priors, WeightedFit, WeightedRows,
    parameter_length, prior_parameters,
};
use crate::parallel::{
    Chunk, LabelGroups, Runs, check_chunk, check_sets, fold_chunks_by_label_with, map_chunks,
};
use crate::score_formula::ScoreFormula;
use crate::split::{Partial, Scratch, SplitFit};
use crate::{GenerativeError, Result};
use density::block::column;

const LN_2PI: f64 = 1.837_877_066_409_345_5;

/// The covariance structure of the class-conditional Gaussians.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CovarianceStructure {
    /// A full covariance per class: quadratic discriminant analysis (QDA).
    Full,
    /// One full covariance shared by all classes: linear discriminant analysis (LDA).
    Tied,
    /// A diagonal covariance per class: Gaussian naive Bayes.
    Diagonal,
    /// One variance per class: σ_k² I.
    Spherical,
    /// One diagonal covariance shared by all classes.
    TiedDiagonal,
}

impl CovarianceStructure {
    fn scatter_kind(self) -> ScatterKind {
        match self {
            CovarianceStructure::Full | CovarianceStructure::Tied => ScatterKind::Full,
            _ => ScatterKind::Diagonal,
        }
    }
    fn is_diagonal(self) -> bool {
        self.scatter_kind() == ScatterKind::Diagonal
    }
}

/// Covariance shrinkage of each class covariance S, with scikit-learn's LDA definitions.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Shrinkage {
    /// Σ ← (1 − α) S + α (tr S / d) I, α in [0, 1].
    Fixed(f64),
    /// Ledoit–Wolf on the standardised data, scaled back: Σ ← (1 − α) S + α diag(S) with α
    /// from the Ledoit–Wolf formula (per class).
    LedoitWolf,
}

/// Hyper-parameters of Gaussian discriminant analysis.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GaussianParams {
    /// Covariance structure (default: `Tied`, i.e. LDA).
    pub structure: CovarianceStructure,
    /// Ridge added to every covariance diagonal (default 0).
    pub reg: f64,
    /// Shrinkage for the full structures (default none).
    pub shrinkage: Option<Shrinkage>,
    /// For the diagonal structures: ε = var_smoothing × max feature variance is added to every
    /// variance (default 1e-9, scikit-learn's GaussianNB default).
    pub var_smoothing: f64,
    /// Class priors (default estimated).
    pub priors: Priors,
}

impl Default for GaussianParams {
    fn default() -> Self {
        Self {
            structure: CovarianceStructure::Tied,
            reg: 0.0,
            shrinkage: None,
            var_smoothing: 1e-9,
            priors: Priors::Estimated,
        }
    }
}

impl GaussianParams {
    /// Defaults with the given structure.
    pub fn with_structure(structure: CovarianceStructure) -> Self {
        Self {
            structure,
            ..Self::default()
        }
    }
}

impl HyperParams for GaussianParams {
    fn check_params(&self) -> Result<()> {
        if !self.reg.is_finite() || self.reg < 0.0 {
            return Err(GenerativeError::InvalidParameter {
                name: "reg",
                rule: ">= 0",
                value: self.reg.to_string(),
            });
        }
        if !self.var_smoothing.is_finite() || self.var_smoothing < 0.0 {
            return Err(GenerativeError::InvalidParameter {
                name: "var_smoothing",
                rule: ">= 0",
                value: self.var_smoothing.to_string(),
            });
        }
        if let Some(Shrinkage::Fixed(a)) = self.shrinkage
            && !(0.0..=1.0).contains(&a)
        {
            return Err(GenerativeError::InvalidParameter {
                name: "shrinkage",
                rule: "in [0, 1]",
                value: a.to_string(),
            });
        }
        if self.shrinkage.is_some() && self.structure.is_diagonal() {
            return Err(GenerativeError::InvalidParameter {
                name: "shrinkage",
                rule: "used only with the full or tied structure",
                value: format!("{:?} with {:?}", self.shrinkage, self.structure),
            });
        }
        self.priors.check()
    }
}

/// Largest block of input rows (bytes) in one product of LDA's scores.
const SCORE_BLOCK_BYTES: usize = 256 << 10;

/// A fitted Gaussian discriminant analysis model.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GaussianClassifier {
    structure: CovarianceStructure,
    n_features: usize,
    n_classes: usize,
    log_priors: Vec<f64>,
    /// Total responsibility N_k each class received in training.
    class_weights: Vec<f64>,
    /// Class means, K × d row-major.
    means: Vec<f64>,
    /// Full: K lower Cholesky factors (d × d column-major each); Tied: one;
    /// Diagonal: K × d variances; Spherical: K variances; TiedDiagonal: d variances.
    factors: Vec<f64>,
    /// Free parameters counted for BIC.
    priors_fixed: bool,
}

/// The linear discriminant of LDA: a_k(x) = w_kᵀ x + w_k0 with w_k = Σ⁻¹ μ_k and
/// w_k0 = −½ μ_kᵀ Σ⁻¹ μ_k + ln π_k; softmax(W x + w0) is the posterior.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LinearDiscriminant {
    /// K × d row-major.
    pub weights: Vec<f64>,
    /// K intercepts.
    pub intercepts: Vec<f64>,
    pub n_features: usize,
}

impl LinearDiscriminant {
    /// For two classes: p(y = 1 | x) = σ(wᵀ x + w0) with w = w_1 − w_0 and w0 = w_10 − w_00.
    pub fn binary(&self) -> Option<(Vec<f64>, f64)> {
        if self.intercepts.len() != 2 {
            return None;
        }
        let d = self.n_features;
        let w = (0..d)
            .map(|j| self.weights[d + j] - self.weights[j])
            .collect();
        Some((w, self.intercepts[1] - self.intercepts[0]))
    }

    /// The K scores W x + w0 of one point.
    pub fn scores(&self, x: &[f64]) -> Vec<f64> {
        let d = self.n_features;
        self.intercepts
            .iter()
            .enumerate()
            .map(|(k, b)| b + density::numerics::dot(&self.weights[k * d..(k + 1) * d], x))
            .collect()
    }
}

/// Up to this many classes, a labeled diagonal fit sums each class's values by mask in place;
/// with more, it sums them by rows ([`diagonal_class_stats_by_rows`]), which is slower with few
/// classes, whose rows follow each other's sums through memory (fifty-eighth round, Zen 4 EPYC,
/// `profile gnb-fit D K`, medians of 11, masks → by rows: d = 16, K = 2 0.0052, 0.0053 →
/// 0.0076, 0.0074 s; d = 2, K = 4 0.0014, 0.0012 → 0.0020, 0.0024 s; even or better from K = 4
/// at d = 16 and 64: 0.0073, 0.0072 → 0.0059, 0.0059 s and 0.028, 0.026 → 0.033, 0.024 s).
/// Before that, with more classes it split each column by class. Measured again after the masked additions
/// and byte masks (forty-ninth round, `profile gnb-fit D K`): in place is faster up to 4 classes
/// (d = 16, K = 3 0.0131 → 0.0087 s, K = 4 0.0144 → 0.0103 s; d = 64, K = 4 0.059 → 0.039 s;
/// d = 2, K = 3 0.0019 → 0.0012 s) and slower from 5, where the AVX-512 sums take a second pass
/// per column (d = 16, K = 5 0.0114 → 0.0173 s; d = 2, K = 10 0.0024 → 0.0042 s).
const IN_PLACE_MAX_CLASSES: usize = 4;

/// Up to this many classes, and this many masked products per row (K · d(d + 1)/2), a labeled
/// full-covariance fit sums each class's products of deviations by mask instead of grouping
/// the rows and copying each class's out. Measured (1e6 rows): faster at d = 2 with K = 2 and
/// 4 (QDA 4.1 → 2.5 ms at K = 2) and at d = 4, K = 2; no faster at d = 4, K = 4 (40 products),
/// and at d = 2, K = 10 nearly twice as slow (ten masks per row vector to build and apply).
const MASKED_MAX_CLASSES: usize = 4;
const MASKED_MAX_PRODUCTS: usize = 20;

/// Whether a labeled full-covariance fit of `k` classes and `d` features takes its class
/// scatters by mask ([`full_class_stats`]) rather than by rows ([`pair_by_rows`]) or from
/// class blocks.
fn by_masks(k: usize, d: usize) -> bool {
    k <= MASKED_MAX_CLASSES && k * d * (d + 1) / 2 <= MASKED_MAX_PRODUCTS && !pair_by_rows(k, d)
}

/// Up to this many classes, a labeled fit of two features takes its class moments by masks
/// (two passes, each class's sums, then its deviations); with more, by rows in one shifted pass
/// (`density::moments::grouped_pair_moments_by_rows`, `grouped_pair_variances_by_rows`), whose
/// cost per row does not grow with K. `profile` on the Zen 4 EPYC, `PROFILE_COLD=cs`, medians of
/// 21, two alternated pairs, masks → by rows: LDA fit K = 3 1.64, 1.68 → 1.26, 1.35 ms, K = 4
/// 1.72, 1.65 → 1.34, 1.43 ms; QDA K = 3 1.51, 1.80 → 1.44, 1.55 ms, K = 4 1.42, 1.86 → 1.19,
/// 1.27 ms; Gaussian NB K = 3 1.36, 1.37 → 1.16, 1.19 ms, K = 4 1.50, 1.83 → 1.26, 1.37 ms; but
/// K = 2 LDA 1.34, 1.37 → 1.59, 1.46 ms, QDA 1.34, 1.56 → 1.42, 1.60 ms, Gaussian NB 1.47, 1.33
/// → 1.48, 1.43 ms (ninety-sixth round).
const PAIR_MASKED_MAX_CLASSES: usize = 2;

/// Whether a labeled fit of `k` classes and `d` features takes its class moments by rows in one
/// shifted pass rather than by masks (see [`PAIR_MASKED_MAX_CLASSES`]).
fn pair_by_rows(k: usize, d: usize) -> bool {
    d == 2 && k > PAIR_MASKED_MAX_CLASSES
}

/// Each class's row count and mean (`labels[i] < k`, weight one each), after checking the
/// chunk's values. The check is the sums' own: a NaN or ±∞ anywhere makes its class's sum
/// non-finite, so only then is the chunk scanned, to name the first such value (or to find
/// none: finite values whose sum overflowed, which go on as before). This saves a whole pass
/// over a chunk that is usually read from memory for the first time here.
///
/// Into `counts` (k) and `means` (k × d, row by row), which the masked path keeps on the
/// stack: its chunks' allocations (counts, sums, means, products) had 114 of 3,491 samples
/// (3.3%) of 200 of LDA's fits at d = 2, K = 2 (`perf --call-graph dwarf`, the data's generation
/// included).
fn checked_class_counts_and_means(
    chunk: &Chunk<'_>,
    masks: &mut density::moments::KeptMasks<'_>,
    counts: &mut [usize],
    means: &mut [f64],
) -> Result<()> {
    let (k, d) = (counts.len(), chunk.x.ncols());
    means.fill(0.0);
    let mut sums = MatMut::from_row_major_slice_mut(means, k, d);
    density::moments::grouped_sums_and_counts_keeping(chunk.x, masks, sums.as_mut(), counts);
    check_through_sums(chunk, sums.as_ref())?;
    divide_by_counts(sums, counts);
    Ok(())
}

/// Scans the chunk (naming its first non-finite value) only if a class sum is not finite.
fn check_through_sums(chunk: &Chunk<'_>, sums: MatRef<'_, f64>) -> Result<()> {
    if sums.is_all_finite() {
        Ok(())
    } else {
        check_chunk(chunk)
    }
}

/// Class means from class sums, in place (0 for an empty class).
fn divide_by_counts(mut sums: MatMut<'_, f64>, counts: &[usize]) {
    for (c, &n) in counts.iter().enumerate() {
        for j in 0..sums.ncols() {
            sums[(c, j)] = match n {
                0 => 0.0,
                n => sums[(c, j)] / n as f64,
            };
        }
    }
}

/// Whether a soft M-step of a shared full covariance takes one pooled scatter
/// ([`density::scatter::RowBlock::pooled_scatter`]) rather than the K class scatters summed.
/// Per row, the pooled form costs the K(K − 1)/2 pair sums, each class's share and shift of
/// every feature, and one scatter (d(d + 1)/2 products, with its centring and weighting); the
/// other form costs K scatters. With few features and many classes (d = 2, K = 10: 82 against
/// 70) the pooled form is the slower one: `profile-em 2 10 tied`, fastest M-step, medians of 3
/// alternated rounds, 0.0150 s pooled against 0.0136 s per class (d = 2, K = 2, 14 against 14:
/// 0.0031 against 0.0027 s).
fn pooled_soft_scatter_pays(k: usize, d: usize) -> bool {
    let scatter = d * (d + 1) / 2 + 2 * d;
    k * (k - 1) / 2 + k * (d + 1) + scatter < k * scatter
}

/// The full statistics of each class's rows of `x` (`labels[i] < k`, weight one each), centred
/// at the exact class means, by mask: no grouping and no copy. Pooled (as
/// [`PooledStats::from_classes`] gives them for these classes, the same bits) when `pooled`;
/// into `spare`'s vectors when they have the shape ([`ChunkStats::classes_to_fill`]).
fn full_class_stats(
    chunk: &Chunk<'_>,
    labels: &[usize],
    k: usize,
    pooled: bool,
    spare: &mut Option<ChunkStats>,
) -> Result<ChunkStats> {
    let (x, d) = (chunk.x, chunk.x.ncols());
    debug_assert!(by_masks(k, d));
    // by_masks bounds k · d(d + 1)/2, so k · d too, and k.
    let (mut counts, mut means) = ([0; MASKED_MAX_CLASSES], [0.0; MASKED_MAX_PRODUCTS]);
    let (counts, means) = (&mut counts[..k], &mut means[..k * d]);
    // The class masks the sums build, kept for the products.
    let mut masks = density::moments::KeptMasks::new(labels, k);
    checked_class_counts_and_means(chunk, &mut masks, counts, means)?;
    let means = &*means;
    // Each class's packed products, row by row as its mean (by_masks keeps them few).
    let products = d * (d + 1) / 2;
    let mut lower = [0.0; MASKED_MAX_PRODUCTS];
    let lower = &mut lower[..k * products];
    density::moments::grouped_cross_products_keeping(
        x,
        &mut masks,
        MatRef::from_row_major_slice(means, k, d),
        MatMut::from_row_major_slice_mut(lower, k, products),
        chunk.ahead,
    );
    Ok(class_stats_from_packed(
        spare, counts, means, lower, d, pooled,
    ))
}

/// Each class's full statistics from its row count, mean (`means`, k × `d` row by row) and
/// packed scatter (`lower`: k runs of d(d + 1)/2, pair (j, i ≤ j) at j(j + 1)/2 + i), into
/// `spare`'s vectors when they have the shape; pooled (as [`PooledStats::from_classes`] gives
/// them for these classes, the same bits) when `pooled`.
fn class_stats_from_packed(
    spare: &mut Option<ChunkStats>,
    counts: &[usize],
    means: &[f64],
    lower: &[f64],
    d: usize,
    pooled: bool,
) -> ChunkStats {
    let k = counts.len();
    let products = d * (d + 1) / 2;
    if pooled {
        // from_classes: each class's weight and mean (zeros for an empty class) and the sum of
        // the class scatters in class order, an empty class's zeros included.
        let mut stats = ChunkStats::pooled_to_fill(spare, k, d);
        stats.within.fill(0.0);
        for c in 0..k {
            let live = counts[c] > 0;
            stats.weights[c] = counts[c] as f64;
            for (m, &v) in stats.means[c * d..(c + 1) * d]
                .iter_mut()
                .zip(&means[c * d..])
            {
                *m = if live { v } else { 0.0 };
            }
            for j in 0..d {
                for i in 0..=j {
                    let v = if live {
                        lower[c * products + j * (j + 1) / 2 + i]
                    } else {
                        0.0
                    };
                    stats.within[i * d + j] += v;
                    if i != j {
                        stats.within[j * d + i] += v;
                    }
                }
            }
        }
        return ChunkStats::Pooled(stats);
    }
    let mut classes = ChunkStats::classes_to_fill(spare, k, d, ScatterKind::Full);
    for (c, class) in classes.iter_mut().enumerate() {
        let (mean, packed) = (
            &means[c * d..(c + 1) * d],
            &lower[c * products..][..products],
        );
        class.set_full_packed(counts[c] as f64, mean, packed);
    }
    ChunkStats::Classes(classes)
}

/// The diagonal statistics of each class's rows of `x` (`labels[i] < k`, weight one each): the
/// sums and squared deviations of each column in one sweep, checked through the sums as in
/// [`checked_class_counts_and_means`]. Into `spare`'s vectors when they have the shape.
fn diagonal_class_stats(
    chunk: &Chunk<'_>,
    labels: &[usize],
    k: usize,
    spare: &mut Option<ChunkStats>,
) -> Result<Vec<SufficientStats>> {
    let (x, d) = (chunk.x, chunk.x.ncols());
    let counts = group_counts(labels, k);
    // Class by class, row by row, so that each class's values are one slice.
    let (mut means, mut scatter) = (vec![0.0; k * d], vec![0.0; k * d]);
    let mut sums = MatMut::from_row_major_slice_mut(&mut means, k, d);
    density::moments::grouped_sums_and_squares(
        x,
        labels,
        &counts,
        sums.as_mut(),
        MatMut::from_row_major_slice_mut(&mut scatter, k, d),
        chunk.ahead,
    );
    check_through_sums(chunk, sums.as_ref())?;
    divide_by_counts(sums, &counts);
    Ok(diagonal_classes(spare, &counts, &means, &scatter))
}

/// Each class's diagonal statistics from its count, means and squared deviations (`k × d`, row
/// by row), into `spare`'s vectors when they have the shape.
fn diagonal_classes(
    spare: &mut Option<ChunkStats>,
    counts: &[usize],
    means: &[f64],
    scatters: &[f64],
) -> Vec<SufficientStats> {
    let k = counts.len();
    let d = means.len().checked_div(k).unwrap_or(0);
    let mut classes = ChunkStats::classes_to_fill(spare, k, d, ScatterKind::Diagonal);
    for (c, class) in classes.iter_mut().enumerate() {
        let range = c * d..(c + 1) * d;
        class.set_diagonal_parts(counts[c] as f64, &means[range.clone()], &scatters[range]);
    }
    classes
}

/// [`diagonal_class_stats`] by rows ([`density::moments::grouped_moments_by_rows`]), for many
/// classes: each class's sums and squared deviations in row order, where the masks cost K
/// operations per value. Measured against splitting each chunk by class (a copy of every value
/// by index, then each class's moments from its run), `profile gnb-fit D 10`, medians of 11,
/// alternated, on the Zen 4 EPYC: d = 16 0.0096, 0.0097 → 0.0065, 0.0057 s; d = 64 0.0365,
/// 0.0363 → 0.0266, 0.0252 s; d = 2 0.0019, 0.0019 → 0.0020, 0.0019 s; d = 16, K = 5 0.0096,
/// 0.0092 → 0.0059, 0.0057 s. On the Zen 3 EPYC (AVX2), one value at a time → AVX2's four by
/// four transposes, `PROFILE_COLD=cs`: d = 16 0.027, 0.029 → 0.016, 0.014 s; d = 64 0.127,
/// 0.126 → 0.072, 0.061 s; d = 16, K = 5 0.037, 0.031 → 0.018, 0.018 s.
fn diagonal_class_stats_by_rows(
    chunk: &Chunk<'_>,
    labels: &[usize],
    k: usize,
    spare: &mut Option<ChunkStats>,
) -> Result<Vec<SufficientStats>> {
    let d = chunk.x.ncols();
    let (mut means, mut scatters) = (vec![0.0; k * d], vec![0.0; k * d]);
    // Two features in one shifted pass (the ninety-sixth round's), which also counts the
    // classes: the diagonal of the full fit's scatters, to the bit.
    let counts = if d == 2 {
        let mut counts = vec![0; k];
        density::moments::grouped_pair_variances_by_rows(
            chunk.x,
            labels,
            &mut counts,
            &mut means,
            &mut scatters,
            chunk.ahead,
        );
        counts
    } else {
        let counts = group_counts(labels, k);
        density::moments::grouped_moments_by_rows(
            chunk.x,
            labels,
            &counts,
            &mut means,
            &mut scatters,
            chunk.ahead,
        );
        counts
    };
    // A non-finite value makes its class's mean non-finite (the check names it).
    check_through_sums(chunk, MatRef::from_row_major_slice(&means, k, d))?;
    Ok(diagonal_classes(spare, &counts, &means, &scatters))
}

/// One chunk's statistics: each class's, or, for a shared covariance without shrinkage, each
/// class's weight and mean with the chunk's pooled within-class scatter (the per-class scatters
/// are then never needed, and a labeled chunk's come from one pass of the scatter kernel over
/// all its classes: [`ClassBlocks::means_and_pooled_scatter`]).
enum ChunkStats {
    Classes(Vec<SufficientStats>),
    Pooled(PooledStats),
}

impl ChunkStats {
    /// `self` ← the statistics of both chunks' rows (both of the same form, as one fit makes).
    fn merge(&mut self, other: &ChunkStats) {
        match (self, other) {
            (ChunkStats::Classes(a), ChunkStats::Classes(b)) => {
                for (s, p) in a.iter_mut().zip(b) {
                    s.merge(p);
                }
            }
            (ChunkStats::Pooled(a), ChunkStats::Pooled(b)) => a.merge(b),
            _ => debug_assert!(false, "a fit's chunks all take one form"),
        }
    }

    /// `k` class statistics of `d` features of this kind, every value to be replaced: those of
    /// a part already merged (`spare`) when it has that shape, else new ones. Why: at d = 2,
    /// K = 10 a chunk's statistics are twenty small vectors, and allocating, zeroing and
    /// freeing them (with the merges' own vectors) for every chunk had 6.5% of the samples of
    /// QDA's fit.
    fn classes_to_fill(
        spare: &mut Option<ChunkStats>,
        k: usize,
        d: usize,
        kind: ScatterKind,
    ) -> Vec<SufficientStats> {
        match spare.take() {
            Some(ChunkStats::Classes(classes))
                if classes.len() == k
                    && classes
                        .iter()
                        .all(|s| s.n_features() == d && s.kind() == kind) =>
            {
                classes
            }
            _ => (0..k).map(|_| SufficientStats::new(d, kind)).collect(),
        }
    }

    /// As [`ChunkStats::classes_to_fill`], pooled statistics of `k` classes and `d` features.
    fn pooled_to_fill(spare: &mut Option<ChunkStats>, k: usize, d: usize) -> PooledStats {
        match spare.take() {
            Some(ChunkStats::Pooled(p))
                if p.weights.len() == k && p.means.len() == k * d && p.within.len() == d * d =>
            {
                p
            }
            _ => PooledStats {
                weights: vec![0.0; k],
                means: vec![0.0; k * d],
                within: vec![0.0; d * d],
            },
        }
    }
}

/// Most consecutive chunks whose statistics a worker merges before the fit merges the runs'
/// (see [`fold_chunks_by_label_with`]). profile qda-fit, d = 64, K = 10, 3 alternated runs:
/// every chunk's merged after the pass 0.110-0.119 s, runs of 4 0.096-0.101 s, of 8
/// 0.091-0.095 s.
const MERGED_RUN: usize = 8;

/// Per class, the weight and mean of a chunk's rows (class c's mean at `means[c·d..]`), and
/// Σ_c Σ_i w_ic (x_i − m_c)(x_i − m_c)ᵀ over the chunk (d × d column-major).
struct PooledStats {
    weights: Vec<f64>,
    means: Vec<f64>,
    within: Vec<f64>,
}

impl PooledStats {
    /// The pooled form of per-class statistics.
    fn from_classes(classes: &[SufficientStats]) -> Self {
        let d = classes.first().map_or(0, SufficientStats::n_features);
        let mut within = vec![0.0; d * d];
        for s in classes {
            within
                .iter_mut()
                .zip(s.scatter())
                .for_each(|(w, v)| *w += v);
        }
        Self {
            weights: classes.iter().map(SufficientStats::weight).collect(),
            means: classes
                .iter()
                .flat_map(|s| s.mean().iter().copied())
                .collect(),
            within,
        }
    }

    /// `self` ← the statistics of both sets of rows: as [`Mergeable::merge`] for each class,
    /// each class's correction w_a w_b / (w_a + w_b) · δδᵀ (δ = m_b − m_a) added to the one
    /// shared matrix.
    fn merge(&mut self, other: &PooledStats) {
        let d = self.within.len().isqrt();
        self.within
            .iter_mut()
            .zip(&other.within)
            .for_each(|(w, v)| *w += v);
        // δ on the stack at small d.
        let mut room = density::block::SmallBuffer::default();
        let delta = room.zeros(d);
        for (c, &wb) in other.weights.iter().enumerate() {
            let wa = self.weights[c];
            if wb <= 0.0 {
                continue;
            }
            let mean = &mut self.means[c * d..(c + 1) * d];
            if wa <= 0.0 {
                mean.copy_from_slice(&other.means[c * d..(c + 1) * d]);
                self.weights[c] = wb;
                continue;
            }
            let total = wa + wb;
            let ratio = wb / total;
            delta
                .iter_mut()
                .zip(other.means[c * d..].iter().zip(mean.iter()))
                .for_each(|(dl, (b, a))| *dl = b - a);
            mean.iter_mut()
                .zip(delta.iter())
                .for_each(|(m, dl)| *m += dl * ratio);
            let scale = wa * ratio;
            for (col, dj) in self.within.chunks_exact_mut(d).zip(delta.iter()) {
                let s = scale * dj;
                col.iter_mut()
                    .zip(delta.iter())
                    .for_each(|(v, di)| *v += s * di);
            }
            self.weights[c] = total;
        }
    }

    /// The chunks' statistics together, taken in chunk order: each class's total weight and mean
    /// over all chunks, and the pooled scatter about those means,
    /// Σ_chunks [within + Σ_c w_c (m_c − μ_c)(m_c − μ_c)ᵀ] (the merge of
    /// [`Mergeable::merge`] for every class at once, each class's correction a rank-one update
    /// of one shared matrix).
    fn combine(parts: &[&PooledStats], k: usize, d: usize) -> Self {
        let mut weights = vec![0.0; k];
        let mut means = vec![0.0; k * d];
        for p in parts {
            for c in 0..k {
                let w = p.weights[c];
                weights[c] += w;
                for (m, v) in means[c * d..(c + 1) * d].iter_mut().zip(&p.means[c * d..]) {
                    *m += w * v;
                }
            }
        }
        for c in 0..k {
            if weights[c] > 0.0 {
                means[c * d..(c + 1) * d]
                    .iter_mut()
                    .for_each(|m| *m /= weights[c]);
            }
        }
        let mut within = vec![0.0; d * d];
        let mut delta = vec![0.0; d];
        for p in parts {
            within.iter_mut().zip(&p.within).for_each(|(w, v)| *w += v);
            for c in (0..k).filter(|&c| p.weights[c] > 0.0) {
                let (chunk_mean, mean) = (&p.means[c * d..(c + 1) * d], &means[c * d..]);
                delta
                    .iter_mut()
                    .zip(chunk_mean.iter().zip(mean))
                    .for_each(|(dl, (a, b))| *dl = a - b);
                for (j, col) in within.chunks_exact_mut(d).enumerate() {
                    let s = p.weights[c] * delta[j];
                    col.iter_mut().zip(&delta).for_each(|(v, dl)| *v += s * dl);
                }
            }
        }
        Self {
            weights,
            means,
            within,
        }
    }
}

impl WeightedFit for Checked<GaussianParams> {
    type Model = GaussianClassifier;

    fn fit_sets(&self, sets: &[WeightedRows<'_>]) -> Result<GaussianClassifier> {
        let (d, k) = check_sets(sets)?;
        // Pass 1: per-class weighted means and centred scatters, merged in chunk order.
        let partials = fold_chunks_by_label_with(
            sets,
            SplitFit::runs(self, d, k),
            gaussian_scratch,
            |scratch, chunk| self.chunk_stats(scratch, chunk, d, k),
            |scratch, acc, part| {
                acc.merge(&part);
                // Filled again by the worker's next chunk.
                scratch.4 = Some(part);
            },
        )?;
        self.fit_from_stats(partials, Some(sets), d, k)
    }

    fn split(&self) -> Option<&dyn SplitFit<GaussianClassifier>> {
        // Ledoit–Wolf shrinkage takes a second pass over the sets' responsibilities.
        (!matches!(self.shrinkage, Some(Shrinkage::LedoitWolf))).then_some(self)
    }
}

/// A worker's buffers for [`Checked::<GaussianParams>::chunk_stats`], reused from chunk to
/// chunk: the class blocks, the scatter kernel's buffers, and the statistics of the last chunk
/// merged, to be filled again.
type GaussianScratch = (
    ClassBlocks,
    Vec<f64>,
    RowBlock,
    LabelGroups,
    Option<ChunkStats>,
);

fn gaussian_scratch() -> GaussianScratch {
    (
        ClassBlocks::new(),
        Vec::new(),
        RowBlock::new(),
        LabelGroups::default(),
        None,
    )
}

impl SplitFit<GaussianClassifier> for Checked<GaussianParams> {
    fn runs(&self, d: usize, k: usize) -> Runs {
        // A run's statistics: each class's weight, mean and scatter (d² values, or d for the
        // diagonal structures), or, pooled, the classes' weights and means and one scatter.
        let values = if self.pooled_scatter_only() {
            k * (d + 1) + d * d
        } else {
            let scatter = match self.structure.scatter_kind() {
                ScatterKind::Full => d * d,
                ScatterKind::Diagonal => d,
            };
            k * (1 + d + scatter)
        };
        Runs {
            longest: MERGED_RUN,
            partial_bytes: values * std::mem::size_of::<f64>(),
        }
    }

    fn scratch(&self) -> Scratch {
        Scratch::new(gaussian_scratch())
    }

    fn chunk_partial(
        &self,
        scratch: &mut Scratch,
        chunk: Chunk<'_>,
        d: usize,
        k: usize,
    ) -> Result<Partial> {
        let scratch = scratch
            .get_mut::<GaussianScratch>()
            .ok_or(GenerativeError::Internal {
                what: "another model's scratch handed to a Gaussian fit",
            })?;
        self.chunk_stats(scratch, chunk, d, k).map(Partial::new)
    }

    fn merge_partials(&self, acc: &mut Partial, part: Partial) {
        if let (Some(acc), Ok(part)) = (acc.get_mut::<ChunkStats>(), part.into_inner()) {
            acc.merge(&part);
        }
    }

    fn finish(&self, runs: Vec<Partial>, d: usize, k: usize) -> Result<GaussianClassifier> {
        let partials = runs
            .into_iter()
            .map(Partial::into_inner::<ChunkStats>)
            .collect::<Result<_>>()?;
        self.fit_from_stats(partials, None, d, k)
    }
}

/// The first class statistic (per-class `stats`, or the `pooled` ones) of finite values that
/// overflowed f64, as the error that names it: left alone, an infinite scatter is reported as a
/// singular covariance and an infinite mean as a model with a non-finite parameter, neither of
/// which says which feature is at fault or why.
fn first_overflow(
    stats: &[SufficientStats],
    pooled: Option<&PooledStats>,
    d: usize,
) -> Option<GenerativeError> {
    let overflow = |statistic, class, feature| GenerativeError::StatisticOverflow {
        statistic,
        class,
        feature: Some(feature),
    };
    match pooled {
        None => stats.iter().enumerate().find_map(|(c, s)| {
            s.first_overflow()
                .map(|(statistic, j)| overflow(statistic, Some(c), j))
        }),
        Some(pooled) => {
            let mean = pooled.means.iter().position(|v| !v.is_finite());
            let within = (0..d).find_map(|j| {
                let found = density::stats::column_overflow(&pooled.within[j * d..(j + 1) * d], j);
                found.map(|statistic| match statistic {
                    "variance" => ("pooled variance", j),
                    _ => ("pooled covariance", j),
                })
            });
            match (mean, within) {
                (Some(at), _) => Some(overflow("mean", Some(at / d), at % d)),
                (None, Some((statistic, j))) => Some(overflow(statistic, None, j)),
                (None, None) => None,
            }
        }
    }
}

impl Checked<GaussianParams> {
    /// One chunk's statistics (pass 1 of the fit).
    fn chunk_stats(
        &self,
        state: &mut GaussianScratch,
        chunk: Chunk<'_>,
        d: usize,
        k: usize,
    ) -> Result<ChunkStats> {
        let kind = self.structure.scatter_kind();
        let pooled = self.pooled_scatter_only();
        let wrap = |classes: Vec<SufficientStats>| {
            if pooled {
                ChunkStats::Pooled(PooledStats::from_classes(&classes))
            } else {
                ChunkStats::Classes(classes)
            }
        };
        let (blocks, buffer, row_block, groups, spare) = state;
        // Diagonal statistics of labeled rows with few classes: each class's sums, then its
        // squared deviations, in two SIMD passes over each column (the second while it is
        // in L1), with no grouping and no copy; the sums also check the values. With more
        // classes each pass costs K masked operations per value, and the sums by rows below
        // win (see `IN_PLACE_MAX_CLASSES`); at d = 2 from three classes, one shifted pass by
        // rows (see `PAIR_MASKED_MAX_CLASSES`).
        if let Some(labels) = chunk.labels
            && kind == ScatterKind::Diagonal
            && k <= IN_PLACE_MAX_CLASSES
            && !pair_by_rows(k, d)
        {
            return diagonal_class_stats(&chunk, labels, k, spare).map(wrap);
        }
        // Full statistics of labeled rows with few features and few classes: the same two
        // passes, each class's products of deviations by mask.
        if let Some(labels) = chunk.labels
            && kind == ScatterKind::Full
            && by_masks(k, d)
        {
            return full_class_stats(&chunk, labels, k, pooled, spare);
        }
        // Full statistics of labeled rows of two features and more classes than the masks
        // take: each class's deviations from a shift near its mean, with their squares and
        // product, by rows in one pass (`density::moments::grouped_pair_moments_by_rows`; two
        // passes, sums then centred products, until the ninety-sixth round), with no grouping
        // of the rows and no copy; the means also check the values. Pooled (LDA), the class
        // scatters summed: no centred copy of the chunk and no scatter of it (`profile lda-fit
        // 2 10`, `PROFILE_COLD=cs`, medians of 21, three alternated pairs on the Intel Xeon:
        // 2.04, 2.02, 2.08 → 1.82, 1.87, 1.92 ms; K = 6 1.97, 2.11, 2.06 → 1.74, 1.79, 1.67 ms).
        if let Some(labels) = chunk.labels
            && kind == ScatterKind::Full
            && d == 2
        {
            // The class counts come from the same pass.
            let mut counts = vec![0; k];
            let (mut means, mut lower) = (vec![0.0; k * 2], vec![0.0; k * 3]);
            density::moments::grouped_pair_moments_by_rows(
                chunk.x,
                labels,
                &mut counts,
                &mut means,
                &mut lower,
                chunk.ahead,
            );
            // A non-finite value makes its class's mean non-finite (the check names it).
            check_through_sums(&chunk, MatRef::from_row_major_slice(&means, k, d))?;
            return Ok(class_stats_from_packed(
                spare, &counts, &means, &lower, d, pooled,
            ));
        }
        // The pooled scatter of labeled rows: the class sums, which also check the values,
        // then the columns less their rows' class means into one block while they are in
        // cache, and one scatter of the block. With few classes each column's sums are taken
        // by mask as it is read; with more, eight columns' by rows (`profile lda-fit`,
        // `PROFILE_COLD=cs`, medians of 11, two alternated pairs, against the split below, on
        // the Zen 4 EPYC: d = 16, K = 10 0.0175, 0.0151 → 0.0150, 0.0116 s; K = 8 0.0167,
        // 0.0236 → 0.0091, 0.0108 s; d = 64, K = 10 0.0908, 0.0916 → 0.0756, 0.0715 s; d = 2,
        // K = 10 0.0024, 0.0023 → 0.0018, 0.0022 s). With AVX2 alone the sums by rows take
        // four rows of four columns a transpose, for any K up to 16 (on the Zen 3 EPYC, against
        // the split: d = 16, K = 2 0.033, 0.037 → 0.0245, 0.0246 s; K = 10 0.028, 0.025 →
        // 0.023, 0.023 s; d = 2, K = 2 even; then, with the centring by `vpermps` of the
        // sixty-fourth round, three alternated pairs: d = 16, K = 2 0.0245–0.0271 → 0.0207–0.0229
        // s; d = 64, K = 2 0.155–0.248 → 0.141–0.147 s; K = 10 even at d = 16 and 64). Without
        // AVX2, or past 16 classes, the split below. (Two features take the class scatters by
        // rows above since the eightieth round.)
        if let Some(labels) = chunk.labels
            && pooled
            && kind == ScatterKind::Full
        {
            let counts = group_counts(labels, k);
            // The class means row by row, as `PooledStats::means` keeps them.
            let mut means = vec![0.0; k * d];
            // With up to four classes and AVX-512, one shifted pass first: the rows go from
            // memory through L1 into the tiles once, where the passes below read the chunk
            // from memory for the sums, then centre it, then run the tiles
            // (`RowBlock::shifted_pooled_scatter`; `profile lda-fit`, `PROFILE_COLD=cs`, p10 of
            // 168 alternated runs on the Zen 4 EPYC: d = 16, K = 2 8.05 → 6.42 ms). Where it
            // declines a chunk, the passes below.
            let mut within = vec![0.0; d * d];
            let shifted = k <= density::scatter::SHIFTED_MAX_GROUPS
                && row_block.shifted_pooled_scatter(
                    chunk.x,
                    labels,
                    &counts,
                    &mut means,
                    &mut within,
                    buffer,
                );
            let laid = shifted || {
                means.fill(0.0);
                if centring_by_group_pays(k) {
                    let mut sums = MatMut::from_row_major_slice_mut(&mut means, k, d);
                    row_block.load_centred_by_group(chunk.x, labels, &counts, sums.as_mut());
                    divide_by_counts(sums, &counts);
                    true
                } else {
                    row_block.load_centred_by_rows(chunk.x, labels, &counts, &mut means)
                }
            };
            if laid {
                // A non-finite sum makes its mean non-finite, and a finite one a finite mean.
                check_through_sums(&chunk, MatRef::from_row_major_slice(&means, k, d))?;
                if !shifted {
                    row_block.centred_scatter(&mut within, buffer);
                }
                return Ok(ChunkStats::Pooled(PooledStats {
                    weights: counts.iter().map(|&c| c as f64).collect(),
                    means,
                    within,
                }));
            }
        }
        // Diagonal statistics of labeled rows with more classes: each row's values added to
        // its class's sums, then its squared deviations, eight rows by eight columns
        // transposed in registers (AVX2: four by four), at a cost per value that does not
        // grow with K; the sums also check the values.
        if let Some(labels) = chunk.labels
            && kind != ScatterKind::Full
        {
            return diagonal_class_stats_by_rows(&chunk, labels, k, spare).map(wrap);
        }
        // Every other labeled chunk (full statistics): split by class once, which also tells
        // whether its values are finite, so it is read once, not a second time by the check
        // (a check, then a copy in class order, read a chunk too large for L2 from memory
        // twice). Up to 4 classes are packed out of each column with AVX-512; more, or any
        // without AVX-512, are grouped first and copied by index. The classes' blocks are
        // kept whole, each class centred at its mean as each column is split, while the
        // column is in L1, so that the per-class scatters (QDA) and the pooled one (LDA) run
        // their tiles alone, without a pass of their own over the blocks (2 MB at d = 64) to
        // take the means and centre them.
        if let Some(labels) = chunk.labels {
            let finite = if split_packs(k) {
                blocks.split_centred(chunk.x, labels, k)
            } else {
                groups.regroup(labels, k);
                let ranges: Vec<(usize, usize)> = (0..k).map(|c| groups.range(c)).collect();
                blocks.split_by_order_centred(
                    chunk.x,
                    groups.order(),
                    &ranges,
                    (chunk.next_first_column, chunk.next_labels),
                )
            };
            if !finite {
                // The check names the first non-finite value.
                check_chunk(&chunk)?;
            }
            if pooled {
                let mut stats = ChunkStats::pooled_to_fill(spare, k, d);
                blocks.means_and_pooled_scatter(&mut stats.means, &mut stats.within, buffer);
                for (c, w) in stats.weights.iter_mut().enumerate() {
                    *w = blocks.class_len(c) as f64;
                }
                return Ok(ChunkStats::Pooled(stats));
            }
            let mut classes = ChunkStats::classes_to_fill(spare, k, d, kind);
            for (c, class) in classes.iter_mut().enumerate() {
                class.accumulate_class(blocks, c, buffer);
            }
            return Ok(ChunkStats::Classes(classes));
        }
        // Soft responsibilities: every class weights the same rows, laid out once.
        check_chunk(&chunk)?;
        let mut copies = vec![Vec::new(); k];
        let weights: Vec<&[f64]> = copies
            .iter_mut()
            .enumerate()
            .map(|(c, copy)| column(chunk.resp, c, copy))
            .collect();
        // A shared full covariance needs only the pooled scatter: one scatter of the rows
        // about their own mixes of the class means, not K (`RowBlock::pooled_scatter`).
        let computed;
        let sums = match chunk.weight_totals {
            Some(t) => t,
            None => {
                computed = density::numerics::sums_and_nonzeros(&weights);
                &computed
            }
        };
        if pooled && kind == ScatterKind::Full && pooled_soft_scatter_pays(k, d) {
            let totals: Vec<f64> = sums.iter().map(|t| t.0).collect();
            let (mut means, mut within) = (vec![0.0; k * d], vec![0.0; d * d]);
            row_block.load(chunk.x);
            row_block.pooled_scatter(&weights, &totals, &mut means, &mut within, buffer);
            let weights = totals.iter().map(|&t| t.max(0.0)).collect();
            return Ok(ChunkStats::Pooled(PooledStats {
                weights,
                means,
                within,
            }));
        }
        let mut out: Vec<SufficientStats> = (0..k).map(|_| SufficientStats::new(d, kind)).collect();
        SufficientStats::accumulate_rows_each(
            &mut out,
            chunk.x,
            &weights,
            Some(sums),
            row_block,
            buffer,
        );
        Ok(wrap(out))
    }

    /// A shared covariance needs only the sum of the class scatters, unless each class's is
    /// shrunk first.
    fn pooled_scatter_only(&self) -> bool {
        self.structure == CovarianceStructure::Tied && self.shrinkage.is_none()
    }

    /// The model from the chunks' statistics, folded in runs, in order (`sets`: the rows they
    /// came from, for Ledoit–Wolf shrinkage's second pass).
    fn fit_from_stats(
        &self,
        partials: Vec<ChunkStats>,
        sets: Option<&[WeightedRows<'_>]>,
        d: usize,
        k: usize,
    ) -> Result<GaussianClassifier> {
        let kind = self.structure.scatter_kind();
        let pooled = self.pooled_scatter_only();
        // Merged in chunk order: each class's statistics, or (pooled) the classes' weights and
        // means and the shared scatter.
        let mut stats: Vec<SufficientStats> = Vec::new();
        let mut shared = None;
        if pooled {
            let parts: Vec<&PooledStats> = partials
                .iter()
                .filter_map(|p| match p {
                    ChunkStats::Pooled(p) => Some(p),
                    ChunkStats::Classes(_) => None,
                })
                .collect();
            shared = Some(PooledStats::combine(&parts, k, d));
        } else {
            stats = (0..k).map(|_| SufficientStats::new(d, kind)).collect();
            for part in &partials {
                if let ChunkStats::Classes(part) = part {
                    for (s, p) in stats.iter_mut().zip(part) {
                        s.merge(p);
                    }
                }
            }
        }
        let class_weights: Vec<f64> = match &shared {
            Some(shared) => shared.weights.clone(),
            None => stats.iter().map(|s| s.weight()).collect(),
        };
        if let Some(c) = class_weights.iter().position(|w| *w <= 0.0) {
            return Err(GenerativeError::EmptyClass { class: c });
        }
        if let Some(overflow) = first_overflow(&stats, shared.as_ref(), d) {
            return Err(overflow);
        }
        let total: f64 = class_weights.iter().sum();
        let log_priors = self.priors.log_priors(&class_weights)?;
        // Diagonal structures need each class's variances alone: a d × d covariance a class
        // was 655 MB at K = 20,000, d = 64 (the same values: scatter over weight).
        let diagonal = self.structure.is_diagonal();
        let mut covs: Vec<Mat<f64>> = match diagonal {
            true => Vec::new(),
            false => stats
                .iter()
                .map(|s| s.covariance())
                .collect::<density::Result<_>>()?,
        };
        let variances: Vec<Vec<f64>> = match diagonal {
            true => stats
                .iter()
                .map(|s| s.variances())
                .collect::<density::Result<_>>()?,
            false => Vec::new(),
        };

        if let Some(shrinkage) = self.shrinkage {
            match shrinkage {
                Shrinkage::Fixed(a) => covs
                    .iter_mut()
                    .for_each(|cov| shrink_toward_scaled_identity(cov, a)),
                Shrinkage::LedoitWolf => {
                    let sets = sets.ok_or(GenerativeError::Internal {
                        what: "Ledoit–Wolf shrinkage without the rows for its second pass",
                    })?;
                    let alphas = self.ledoit_wolf_alphas(sets, &stats, &covs)?;
                    for (cov, a) in covs.iter_mut().zip(alphas) {
                        shrink_toward_diagonal(cov, a);
                    }
                }
            }
        }

        let means: Vec<f64> = match &shared {
            Some(shared) => shared.means.clone(),
            None => stats
                .iter()
                .flat_map(|s| s.mean().iter().copied())
                .collect(),
        };
        let epsilon = if self.structure.is_diagonal() {
            let mut all = stats[0].clone();
            for s in &stats[1..] {
                all.merge(s);
            }
            let max_var = all.variances()?.into_iter().fold(0.0, f64::max);
            self.var_smoothing * max_var + self.reg
        } else {
            self.reg
        };
        let factors = match self.structure {
            CovarianceStructure::Full => {
                let mut f = Vec::with_capacity(k * d * d);
                for (c, cov) in covs.iter_mut().enumerate() {
                    add_ridge(cov, epsilon);
                    let l = density::mvn::cholesky_lower(cov.as_ref()).map_err(|_| {
                        GenerativeError::SingularCovariance {
                            class: c,
                            weight: class_weights[c],
                            n_features: d,
                            hint: if class_weights[c] <= d as f64 {
                                ": a full covariance needs more points than features"
                            } else {
                                ""
                            },
                        }
                    })?;
                    f.extend(
                        (0..d)
                            .flat_map(|j| (0..d).map(move |i| (i, j)))
                            .map(|(i, j)| l[(i, j)]),
                    );
                }
                f
            }
            CovarianceStructure::Tied => {
                let mut pooled = match &shared {
                    Some(shared) => Mat::from_fn(d, d, |i, j| shared.within[j * d + i] / total),
                    None => {
                        let mut pooled = Mat::<f64>::zeros(d, d);
                        for (cov, w) in covs.iter().zip(&class_weights) {
                            pooled += cov * faer::Scale(w / total);
                        }
                        pooled
                    }
                };
                add_ridge(&mut pooled, epsilon);
                let l = density::mvn::cholesky_lower(pooled.as_ref())
                    .map_err(|_| GenerativeError::SingularPooledCovariance)?;
                (0..d)
                    .flat_map(|j| (0..d).map(move |i| (i, j)))
                    .map(|(i, j)| l[(i, j)])
                    .collect()
            }
            CovarianceStructure::Diagonal => {
                let mut f = Vec::with_capacity(k * d);
                for (c, var) in variances.iter().enumerate() {
                    for (j, var) in var.iter().enumerate() {
                        let v = var + epsilon;
                        if v <= 0.0 {
                            return Err(GenerativeError::ZeroVariance {
                                class: c,
                                feature: j,
                            });
                        }
                        f.push(v);
                    }
                }
                f
            }
            CovarianceStructure::Spherical => {
                let mut f = Vec::with_capacity(k);
                for (c, var) in variances.iter().enumerate() {
                    let v = var.iter().sum::<f64>() / d as f64 + epsilon;
                    if v <= 0.0 {
                        return Err(GenerativeError::ZeroVariance {
                            class: c,
                            feature: 0,
                        });
                    }
                    f.push(v);
                }
                f
            }
            CovarianceStructure::TiedDiagonal => {
                let mut f = Vec::with_capacity(d);
                for j in 0..d {
                    let v = variances
                        .iter()
                        .zip(&class_weights)
                        .map(|(var, w)| var[j] * w / total)
                        .sum::<f64>()
                        + epsilon;
                    if v <= 0.0 {
                        return Err(GenerativeError::ZeroVariance {
                            class: 0,
                            feature: j,
                        });
                    }
                    f.push(v);
                }
                f
            }
        };
        Ok(GaussianClassifier {
            structure: self.structure,
            n_features: d,
            n_classes: k,
            log_priors,
            class_weights,
            means,
            factors,
            priors_fixed: matches!(self.priors, Priors::Fixed(_)),
        })
    }

    /// Pass 2 for Ledoit–Wolf: per class, Σ_i r_ik ‖D_k⁻¹(x_i − μ_k)‖⁴ and Σ_i r_ik², where D_k
    /// holds the class's standard deviations (1 for a constant feature, as scikit-learn's
    /// StandardScaler). The effective sample size is Kish's (Σ r)² / Σ r², which is N_k for
    /// one-hot responsibilities.
    fn ledoit_wolf_alphas(
        &self,
        sets: &[WeightedRows<'_>],
        stats: &[SufficientStats],
        covs: &[Mat<f64>],
    ) -> Result<Vec<f64>> {
        let k = stats.len();
        let d = stats[0].n_features();
        let sds: Vec<Vec<f64>> = covs
            .iter()
            .map(|c| {
                (0..d)
                    .map(|j| {
                        let s = c[(j, j)].sqrt();
                        if s > 0.0 { s } else { 1.0 }
                    })
                    .collect()
            })
            .collect();
        let partials = map_chunks(sets, |chunk| {
            let mut out = vec![(0.0, 0.0); k];
            for (c, o) in out.iter_mut().enumerate() {
                let (m, sd) = (stats[c].mean(), &sds[c]);
                for i in 0..chunk.x.nrows() {
                    let w = chunk.resp[(i, c)];
                    if w == 0.0 {
                        continue;
                    }
                    let mut q = 0.0;
                    for j in 0..d {
                        let z = (chunk.x[(i, j)] - m[j]) / sd[j];
                        q += z * z;
                    }
                    o.0 += w * q * q;
                    o.1 += w * w;
                }
            }
            Ok(out)
        })?;
        let mut sums = vec![(0.0, 0.0); k];
        for part in &partials {
            for (s, p) in sums.iter_mut().zip(part) {
                s.0 += p.0;
                s.1 += p.1;
            }
        }
        Ok((0..k)
            .map(|c| {
                let w = stats[c].weight();
                let corr = Mat::from_fn(d, d, |i, j| covs[c][(i, j)] / (sds[c][i] * sds[c][j]));
                let n_eff = w * w / sums[c].1;
                ledoit_wolf_shrinkage(&corr, sums[c].0 / w, n_eff)
            })
            .collect())
    }
}

impl GaussianClassifier {
    /// The covariance structure.
    pub fn structure(&self) -> CovarianceStructure {
        self.structure
    }

    /// Class means as a K × d matrix.
    pub fn means(&self) -> Mat<f64> {
        let d = self.n_features;
        Mat::from_fn(self.n_classes, d, |k, j| self.means[k * d + j])
    }

    /// ln π_k.
    pub fn log_priors(&self) -> &[f64] {
        &self.log_priors
    }

    /// Total responsibility each class received in training.
    pub fn class_weights(&self) -> &[f64] {
        &self.class_weights
    }

    /// Lower Cholesky factor of class k's covariance (d × d).
    pub fn cholesky(&self, k: usize) -> Mat<f64> {
        let d = self.n_features;
        match self.structure {
            CovarianceStructure::Full => {
                MatRef::from_column_major_slice(&self.factors[k * d * d..(k + 1) * d * d], d, d)
                    .to_owned()
            }
            CovarianceStructure::Tied => {
                MatRef::from_column_major_slice(&self.factors, d, d).to_owned()
            }
            CovarianceStructure::Diagonal => Mat::from_fn(d, d, |i, j| {
                if i == j {
                    self.factors[k * d + i].sqrt()
                } else {
                    0.0
                }
            }),
            CovarianceStructure::Spherical => {
                Mat::from_fn(
                    d,
                    d,
                    |i, j| if i == j { self.factors[k].sqrt() } else { 0.0 },
                )
            }
            CovarianceStructure::TiedDiagonal => {
                Mat::from_fn(
                    d,
                    d,
                    |i, j| if i == j { self.factors[i].sqrt() } else { 0.0 },
                )
            }
        }
    }

    /// Covariance of class k (d × d), reconstructed as L Lᵀ.
    pub fn covariance(&self, k: usize) -> Mat<f64> {
        let l = self.cholesky(k);
        &l * l.transpose()
    }

    /// 1 / variance of every class and feature (K × d, row by row) of the diagonal and
    /// spherical structures, from their stored variances.
    fn inverse_variances(&self) -> Vec<f64> {
        let (d, k) = (self.n_features, self.n_classes);
        (0..k * d)
            .map(|cj| {
                let (c, j) = (cj / d, cj % d);
                1.0 / match self.structure {
                    CovarianceStructure::Diagonal => self.factors[c * d + j],
                    CovarianceStructure::TiedDiagonal => self.factors[j],
                    _ => self.factors[c],
                }
            })
            .collect()
    }

    /// The linear discriminant (only for the shared structures, where it exists).
    pub fn linear_discriminant(&self) -> Option<LinearDiscriminant> {
        if !matches!(
            self.structure,
            CovarianceStructure::Tied | CovarianceStructure::TiedDiagonal
        ) {
            return None;
        }
        let (d, k) = (self.n_features, self.n_classes);
        let l = self.cholesky(0);
        // W = Σ⁻¹ Mᵀ by two triangular solves with L.
        let mut w = Mat::from_fn(d, k, |j, c| self.means[c * d + j]);
        solve_lower_triangular_in_place(l.as_ref(), w.as_mut(), Par::Seq);
        solve_upper_triangular_in_place(l.transpose(), w.as_mut(), Par::Seq);
        let weights: Vec<f64> = (0..k)
            .flat_map(|c| (0..d).map(move |j| (c, j)))
            .map(|(c, j)| w[(j, c)])
            .collect();
        let intercepts = (0..k)
            .map(|c| {
                let mu = &self.means[c * d..(c + 1) * d];
                -0.5 * density::numerics::dot(mu, &weights[c * d..(c + 1) * d]) + self.log_priors[c]
            })
            .collect();
        Some(LinearDiscriminant {
            weights,
            intercepts,
            n_features: d,
        })
    }

    /// A tied model's centre μ̄, the mean of the class means, and the class means whitened
    /// about it, m_k = L⁻¹(μ_k − μ̄) (K × d, row-major): centring at μ̄ leaves only the
    /// differences between classes to whiten, however far the data sit from the origin.
    fn tied_centre_and_whitened_means(&self) -> (Vec<f64>, Vec<f64>) {
        let (d, k) = (self.n_features, self.n_classes);
        let l = MatRef::from_column_major_slice(&self.factors, d, d);
        let centre = self.centre_of_means();
        let mut by_columns = vec![0.0; k * d];
        density::mahalanobis::whiten_rows(
            MatRef::from_row_major_slice(&self.means, k, d),
            &centre,
            l,
            &mut by_columns,
            k,
        );
        // `whiten_rows` writes K × d column by column; the kernels read class by class.
        let whitened = (0..k * d)
            .map(|cj| by_columns[(cj % d) * k + cj / d])
            .collect();
        (centre, whitened)
    }

    /// μ̄, the mean of the class means.
    fn centre_of_means(&self) -> Vec<f64> {
        let (d, k) = (self.n_features, self.n_classes);
        (0..d)
            .map(|j| (0..k).map(|c| self.means[c * d + j]).sum::<f64>() / k as f64)
            .collect()
    }

    /// ln N(x; μ_k, Σ) + ln π_k without its quadratic term in x, for each class k.
    fn log_norms(&self) -> Vec<f64> {
        let d = self.n_features;
        (0..self.n_classes)
            .map(|c| -0.5 * (d as f64 * LN_2PI + self.log_det(c)) + self.log_priors[c])
            .collect()
    }

    fn log_det(&self, k: usize) -> f64 {
        let d = self.n_features;
        match self.structure {
            CovarianceStructure::Full => (0..d)
                .map(|i| 2.0 * self.factors[k * d * d + i * d + i].ln())
                .sum(),
            CovarianceStructure::Tied => (0..d).map(|i| 2.0 * self.factors[i * d + i].ln()).sum(),
            CovarianceStructure::Diagonal => self.factors[k * d..(k + 1) * d]
                .iter()
                .map(|v| v.ln())
                .sum(),
            CovarianceStructure::Spherical => d as f64 * self.factors[k].ln(),
            CovarianceStructure::TiedDiagonal => self.factors.iter().map(|v| v.ln()).sum(),
        }
    }
}

impl GenerativeClassifier for GaussianClassifier {
    fn n_classes(&self) -> usize {
        self.n_classes
    }

    fn n_features(&self) -> usize {
        self.n_features
    }

    fn n_parameters(&self) -> usize {
        let (d, k) = (self.n_features, self.n_classes);
        let cov = match self.structure {
            CovarianceStructure::Full => k * d * (d + 1) / 2,
            CovarianceStructure::Tied => d * (d + 1) / 2,
            CovarianceStructure::Diagonal => k * d,
            CovarianceStructure::Spherical => k,
            CovarianceStructure::TiedDiagonal => d,
        };
        k * d + cov + prior_parameters(k, self.priors_fixed)
    }

    fn validate(&self) -> Result<()> {
        let (d, k) = (self.n_features, self.n_classes);
        let factor_dims: &[usize] = match self.structure {
            CovarianceStructure::Full => &[k, d, d],
            CovarianceStructure::Tied => &[d, d],
            CovarianceStructure::Diagonal => &[k, d],
            CovarianceStructure::Spherical => &[k],
            CovarianceStructure::TiedDiagonal => &[d],
        };
        let checks = [
            ("log_priors", k, self.log_priors.len()),
            ("class_weights", k, self.class_weights.len()),
            (
                "means",
                parameter_length("means", d, &[k, d])?,
                self.means.len(),
            ),
            (
                "covariance factors",
                parameter_length("covariance factors", d, factor_dims)?,
                self.factors.len(),
            ),
        ];
        for (what, expected, got) in checks {
            if expected != got {
                return Err(GenerativeError::DimensionMismatch {
                    what,
                    expected,
                    got,
                });
            }
        }
        if k < 2 {
            return Err(GenerativeError::TooFewClasses { n_classes: k });
        }
        if self
            .means
            .iter()
            .chain(&self.factors)
            .chain(&self.log_priors)
            .any(|v| !v.is_finite())
        {
            return Err(GenerativeError::InvalidParameter {
                name: "model",
                rule: "finite",
                value: "a non-finite parameter".into(),
            });
        }
        let positive = match self.structure {
            CovarianceStructure::Full => {
                (0..k).all(|c| (0..d).all(|i| self.factors[c * d * d + i * d + i] > 0.0))
            }
            CovarianceStructure::Tied => (0..d).all(|i| self.factors[i * d + i] > 0.0),
            _ => self.factors.iter().all(|v| *v > 0.0),
        };
        if !positive {
            return Err(GenerativeError::InvalidParameter {
                name: "covariance",
                rule: "positive definite",
                value: "a non-positive pivot or variance".into(),
            });
        }
        Ok(())
    }

    fn scores_reveal_bad_input(&self) -> bool {
        true
    }

    fn ranks_far_rows_when_scaled(&self) -> bool {
        // Far out, every score is dominated by −½ of a quadratic form in the row (or, for a
        // shared covariance, by the linear discriminant).
        true
    }

    fn posterior_score_formula(&self) -> Option<ScoreFormula<'_>> {
        // Shared covariance: ln p(x, k) = xᵀ w_k + w_k0 − ½ xᵀ Σ⁻¹ x + const, and the last two
        // terms do not depend on k. (W costs d²K per chunk against the product's 2·4096·d·K.)
        if let Some(ld) = self.linear_discriminant() {
            return Some(ScoreFormula::Linear(linear_scores::LinearScores {
                weights: ld.weights.into(),
                intercepts: ld.intercepts.into(),
                features: Features::AsIs,
            }));
        }
        // The log joints of `log_joint_chunk`'s full and diagonal branches.
        match self.structure {
            CovarianceStructure::Full => Some(ScoreFormula::FullGaussian {
                means: self.means.as_slice().into(),
                factors: self.factors.as_slice().into(),
                log_norms: self.log_norms().into(),
            }),
            CovarianceStructure::Diagonal | CovarianceStructure::Spherical => {
                Some(ScoreFormula::DiagonalGaussian {
                    means: self.means.as_slice().into(),
                    inverse_variances: self.inverse_variances().into(),
                    log_norms: self.log_norms().into(),
                })
            }
            _ => None,
        }
    }

    fn posterior_scores_chunk(&self, x: MatRef<'_, f64>, mut out: MatMut<'_, f64>) {
        let Some(ScoreFormula::Linear(ld)) = self.posterior_score_formula() else {
            return self.log_joint_chunk(x, out);
        };
        if ld.write(x, out.as_mut()) {
            return;
        }
        let w = MatRef::from_row_major_slice(&ld.weights, self.n_classes, self.n_features);
        // In blocks of rows of at most SCORE_BLOCK_BYTES: the product reads its left operand
        // once per four classes, and a whole chunk at d = 64 (2 MB) did not stay in L2 between
        // those reads (K = 10: 0.060 s against 0.044 s in blocks). The blocks depend on d alone,
        // never on the thread count; on our machine they give the bits of one product (checked
        // at d = 2 to 100).
        let rows = (SCORE_BLOCK_BYTES / (8 * self.n_features.max(1))).max(8);
        let mut r0 = 0;
        while r0 < x.nrows() {
            let len = rows.min(x.nrows() - r0);
            matmul(
                out.as_mut().subrows_mut(r0, len),
                Accum::Replace,
                x.subrows(r0, len),
                w.transpose(),
                1.0,
                Par::Seq,
            );
            r0 += len;
        }
        for (c, b) in ld.intercepts.iter().enumerate() {
            match out.as_mut().col_mut(c).try_as_col_major_mut() {
                // In a dispatch, so that the loop uses the widest vectors (as a plain loop it
                // was SSE2 code, a tenth of LDA's `predict_proba` at d = 2, K = 2).
                Some(col) => pulp::Arch::new().dispatch(
                    #[inline(always)]
                    || col.as_slice_mut().iter_mut().for_each(|v| *v += b),
                ),
                None => out.as_mut().col_mut(c).iter_mut().for_each(|v| *v += b),
            }
        }
    }

    fn splits_shared_term(&self) -> bool {
        self.structure == CovarianceStructure::Tied
    }

    fn joint_less_shared_chunk(&self, x: MatRef<'_, f64>, mut out: MatMut<'_, f64>) {
        // Shared covariance: with z = L⁻¹(x − μ̄) and m_k as in the log joint below,
        // ln p(x, k) = log_norm_k − ½‖z − m_k‖² = s_k(x) + h(x), where h(x) = −½‖z‖² is the
        // same for every class and s_k(x) = log_norm_k − ½‖m_k‖² + (x − μ̄)ᵀ w_k with
        // w_k = L⁻ᵀ m_k = Σ⁻¹(μ_k − μ̄): linear scores of the centred rows, K·d multiply-adds per
        // row against the whitening's d(d + 1)/2 (EM's E-step at d = 64, K = 10).
        if self.structure != CovarianceStructure::Tied {
            return self.log_joint_chunk(x, out);
        }
        let (d, k) = (self.n_features, self.n_classes);
        let l = MatRef::from_column_major_slice(&self.factors, d, d);
        let (centre, whitened) = self.tied_centre_and_whitened_means();
        let mut w = Mat::from_fn(d, k, |j, c| whitened[c * d + j]);
        solve_upper_triangular_in_place(l.transpose(), w.as_mut(), Par::Seq);
        let log_norms = self.log_norms();
        let intercepts: Vec<f64> = (0..k)
            .map(|c| {
                let m = &whitened[c * d..(c + 1) * d];
                log_norms[c] - 0.5 * density::numerics::dot(m, m)
            })
            .collect();
        let weights: Vec<f64> = (0..k * d).map(|cj| w[(cj % d, cj / d)]).collect();
        if linear_scores::centred_linear_scores(x, &centre, &weights, &intercepts, out.as_mut()) {
            return;
        }
        // More classes than the streamed kernel takes, or rows not in columns: faer's product of
        // a centred copy.
        let centred = Mat::from_fn(x.nrows(), d, |i, j| x[(i, j)] - centre[j]);
        matmul(
            out.as_mut(),
            Accum::Replace,
            centred.as_ref(),
            w.as_ref(),
            1.0,
            Par::Seq,
        );
        for (c, b) in intercepts.iter().enumerate() {
            out.as_mut().col_mut(c).iter_mut().for_each(|v| *v += b);
        }
    }

    fn shared_term_sum(&self, moments: &SufficientStats) -> Result<f64> {
        // Σ_i −½‖L⁻¹(x_i − μ̄)‖² = −½ [tr(L⁻¹ S L⁻ᵀ) + n ‖L⁻¹(x̄ − μ̄)‖²] for rows of count n,
        // mean x̄ and centred scatter S: both terms sums of squares, no difference of large
        // sums however far the rows sit from μ̄.
        if self.structure != CovarianceStructure::Tied {
            return Ok(0.0);
        }
        let d = self.n_features;
        if moments.n_features() != d || moments.kind() != ScatterKind::Full {
            return Err(GenerativeError::DimensionMismatch {
                what: "features of the row moments vs model features (a full scatter)",
                expected: d,
                got: moments.n_features(),
            });
        }
        let n = moments.weight();
        if n <= 0.0 {
            return Ok(0.0);
        }
        let l = MatRef::from_column_major_slice(&self.factors, d, d);
        let centre = self.centre_of_means();
        let mut offset = Mat::from_fn(d, 1, |j, _| moments.mean()[j] - centre[j]);
        solve_lower_triangular_in_place(l, offset.as_mut(), Par::Seq);
        // L⁻¹ S, then L⁻¹ (L⁻¹ S)ᵀ = L⁻¹ S L⁻ᵀ (S symmetric).
        let mut half = MatRef::from_column_major_slice(moments.scatter(), d, d).to_owned();
        solve_lower_triangular_in_place(l, half.as_mut(), Par::Seq);
        let mut whole = half.transpose().to_owned();
        solve_lower_triangular_in_place(l, whole.as_mut(), Par::Seq);
        let trace: f64 = (0..d).map(|j| whole[(j, j)]).sum();
        let shift: f64 = (0..d).map(|j| offset[(j, 0)] * offset[(j, 0)]).sum();
        Ok(-0.5 * (trace + n * shift))
    }

    fn log_joint_chunk(&self, x: MatRef<'_, f64>, mut out: MatMut<'_, f64>) {
        let (d, k, b) = (self.n_features, self.n_classes, x.nrows());
        let log_norm = self.log_norms();
        match self.structure {
            CovarianceStructure::Full => {
                // log_norm_c − ½‖L_c⁻¹(x − μ_c)‖² by forward substitution, read straight from
                // x's layout, each block of rows once for every class, and written straight
                // into the classes' columns.
                // Above 4 columns the kernel asks for the rows two blocks ahead as it goes
                // (`mahalanobis`'s `RowsAhead`), in place of a read of the chunk first.
                gaussian_log_densities(x, &self.means, &self.factors, &log_norm, out.as_mut());
            }
            CovarianceStructure::Tied => {
                // Whiten once: z_i = L⁻¹(x_i − μ̄) and m_k = L⁻¹(μ_k − μ̄), μ̄ the mean of the
                // class means (so that only differences are whitened); then
                // log_norm_k − ½‖z_i − m_k‖² per class is the diagonal kernel's with unit
                // variances, vectorised over rows: d²/2 + K·d operations per row. (It was a
                // transposed copy, faer's solve and a scalar loop per class and row: at
                // d = 64, K = 10, LDA's EM spent longer in its log joints than in its M-step.)
                if b == 0 {
                    return;
                }
                let l = MatRef::from_column_major_slice(&self.factors, d, d);
                let (centre, whitened_means) = self.tied_centre_and_whitened_means();
                // Every value read is written by the whitening, so the buffer is only zeroed
                // as it grows. Its columns lie `spread_row_capacity` rows apart: a whole
                // chunk's 4096 rows put every column's same rows in one cache set (`profile
                // lda-loglik 64 10`: see `BENCHMARKS.md`, ninetieth round).
                let stride = density::block::spread_row_capacity(b);
                let mut z = WHITENED.take();
                if z.len() < stride * d {
                    z.resize(stride * d, 0.0);
                }
                density::mahalanobis::whiten_rows(x, &centre, l, &mut z[..stride * d], stride);
                let unit = vec![1.0; k * d];
                let columns: Vec<std::borrow::Cow<'_, [f64]>> = z[..stride * d]
                    .chunks_exact(stride)
                    .map(|column| std::borrow::Cow::Borrowed(&column[..b]))
                    .collect();
                diagonal_log_joints(&columns, &whitened_means, &unit, &log_norm, out.as_mut());
                drop(columns);
                WHITENED.set(z);
            }
            CovarianceStructure::Diagonal
            | CovarianceStructure::TiedDiagonal
            | CovarianceStructure::Spherical => {
                let columns: Vec<std::borrow::Cow<'_, [f64]>> = (0..d)
                    .map(|j| match x.col(j).try_as_col_major() {
                        Some(col) => std::borrow::Cow::Borrowed(col.as_slice()),
                        None => std::borrow::Cow::Owned(x.col(j).iter().copied().collect()),
                    })
                    .collect();
                let inv_var = self.inverse_variances();
                diagonal_log_joints(&columns, &self.means, &inv_var, &log_norm, out.as_mut());
            }
        }
    }
}

std::thread_local! {
    /// The whitened rows of a tied model's chunk ([`GaussianClassifier`]'s log joints), kept by
    /// each thread from chunk to chunk rather than allocated (and its pages cleared) per chunk.
    static WHITENED: std::cell::Cell<Vec<f64>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Adds `Σ_q (x_q − m_q)² iv_q` over the first `W` columns of `x`, in order, to each row's
/// running sum in `sum` (with `FIRST`, the sums start from zero instead), vector by vector and
/// then one row at a time with the same operations. Without `FIRST`, every sum it reads must
/// have been written (by the first group). With `LAST` (the last group), each sum q is stored
/// as the log joint `ln − 0.5 · q`, the operations the log joint takes after the sums.
///
/// Each term is one fused multiply-add of (x_q − m_q)² by iv_q onto the sum: three operations
/// per value and class where a multiply and an add made four. With many classes the kernel is
/// bound by its arithmetic, not its reads: before this, Gaussian NB's predictions at d = 64,
/// K = 10 on one thread took 77–112 ns a row on 2,048 rows held in L2, and 109 ns from memory
/// (n = 1e6; BENCHMARKS.md, fifty-fourth round). The rows one at a time
/// use `mul_add`, exactly rounded as the vector instruction is (libm's `fma` without hardware
/// FMA), so a row has the same bits in a vector or alone. The centring stays exact: x − m is
/// taken first, not folded into the multiply-add, which would lose digits when |m| ≫ σ.
#[allow(unsafe_code)]
#[inline(always)]
fn add_squares<S: pulp::Simd, const W: usize, const FIRST: bool, const LAST: bool>(
    simd: S,
    x: &[&[f64]; DIAGONAL_GROUP],
    m: &[f64; DIAGONAL_GROUP],
    iv: &[f64; DIAGONAL_GROUP],
    sum: &mut [MaybeUninit<f64>],
    // A column to ask for from memory, a cache line after each vector of rows (empty: none).
    ahead: &[f64],
    // With `LAST`, the class's log normaliser: each sum q becomes the log joint ln − q / 2.
    ln: f64,
) {
    let xv: [&[S::f64s]; W] = std::array::from_fn(|q| S::as_simd_f64s(x[q]).0);
    let mv: [S::f64s; W] = std::array::from_fn(|q| simd.splat_f64s(m[q]));
    let ivv: [S::f64s; W] = std::array::from_fn(|q| simd.splat_f64s(iv[q]));
    let zero = simd.splat_f64s(0.0);
    let (lnv, half) = (simd.splat_f64s(ln), simd.splat_f64s(0.5));
    let (head, tail) = S::as_uninit_mut_simd_f64s(sum);
    for (v, s) in head.iter_mut().enumerate() {
        // SAFETY (not `FIRST`): the first group wrote this sum.
        let mut acc = if FIRST {
            zero
        } else {
            unsafe { s.assume_init() }
        };
        for q in 0..W {
            let t = simd.sub_f64s(xv[q][v], mv[q]);
            acc = simd.mul_add_f64s(simd.mul_f64s(t, t), ivv[q], acc);
        }
        if LAST {
            acc = simd.sub_f64s(lnv, simd.mul_f64s(half, acc));
        }
        *s = MaybeUninit::new(acc);
        density::block::prefetch(ahead, v * S::F64_LANES);
    }
    let first_tail = head.len() * S::F64_LANES;
    for (i, s) in tail.iter_mut().enumerate() {
        // SAFETY (not `FIRST`): the first group wrote this sum.
        let mut acc = if FIRST {
            0.0
        } else {
            unsafe { s.assume_init() }
        };
        for q in 0..W {
            let t = x[q][first_tail + i] - m[q];
            acc = (t * t).mul_add(iv[q], acc);
        }
        if LAST {
            acc = ln - 0.5 * acc;
        }
        *s = MaybeUninit::new(acc);
    }
}

/// The arguments of [`add_squares_of_width`].
type SquaresArgs<'a, 'b, S> = (
    S,
    bool,
    &'a [&'b [f64]; DIAGONAL_GROUP],
    &'a [f64; DIAGONAL_GROUP],
    &'a [f64; DIAGONAL_GROUP],
    &'a mut [MaybeUninit<f64>],
    &'a [f64],
    f64,
);

/// [`add_squares`] over a whole group of [`DIAGONAL_GROUP`] columns (`whole`) or one column.
#[inline(always)]
fn add_squares_of_width<S: pulp::Simd, const FIRST: bool, const LAST: bool>(
    (simd, whole, x, m, iv, sum, asks, ln): SquaresArgs<'_, '_, S>,
) {
    const G: usize = DIAGONAL_GROUP;
    match whole {
        true => add_squares::<S, G, FIRST, LAST>(simd, x, m, iv, sum, asks, ln),
        false => add_squares::<S, 1, FIRST, LAST>(simd, x, m, iv, sum, asks, ln),
    }
}

/// The log joints of a diagonal (or spherical) Gaussian classifier for a chunk, as one `pulp`
/// kernel so that everything, the step to the output included, is compiled for the widest SIMD
/// the CPU has (the output step outside it ran as scalar SSE2 code, a tenth of Gaussian naive
/// Bayes' `predict_proba` at d = 16, K = 10). Each feature's values are contiguous, and every
/// row keeps its own running sum over features in order (the same sums as row by row,
/// vectorised across rows).
struct DiagonalLogJoint<'a> {
    /// The chunk's features, one contiguous slice per column.
    columns: &'a [std::borrow::Cow<'a, [f64]>],
    /// Class means, K × d row by row.
    means: &'a [f64],
    /// 1 / variance, K × d row by row.
    inv_var: &'a [f64],
    /// Each class's log normaliser plus log prior.
    log_norm: &'a [f64],
    /// The b × K log joints, class by class, written by the kernel before it reads them.
    out: Vec<&'a mut [MaybeUninit<f64>]>,
    /// Rows per block of [`DiagonalLogJoint::run_by_groups`] when it asks for the next group
    /// ahead ([`prefetched_block_rows`]; any multiple of 8 gives the same bits).
    prefetched_rows: usize,
}

/// [`DiagonalLogJoint`] into `out` (b × K), through a column-major copy if `out`'s columns are
/// not contiguous.
#[allow(unsafe_code)]
fn diagonal_log_joints(
    columns: &[std::borrow::Cow<'_, [f64]>],
    means: &[f64],
    inv_var: &[f64],
    log_norm: &[f64],
    out: MatMut<'_, f64>,
) {
    // SAFETY: the kernel writes only values (every one) into its output.
    unsafe {
        density::block::write_every_column(out, |out| {
            unwritten_diagonal_log_joints(columns, means, inv_var, log_norm, out)
        })
    }
}

/// [`DiagonalLogJoint`] into `out`, K columns of b values not yet written (b the length of
/// every one of `columns`, d ≥ 0 of them): every value of `out` is written.
pub(crate) fn unwritten_diagonal_log_joints(
    columns: &[std::borrow::Cow<'_, [f64]>],
    means: &[f64],
    inv_var: &[f64],
    log_norm: &[f64],
    out: Vec<&mut [MaybeUninit<f64>]>,
) {
    pulp::Arch::new().dispatch(DiagonalLogJoint {
        columns,
        means,
        inv_var,
        log_norm,
        out,
        prefetched_rows: prefetched_block_rows(),
    });
}

impl pulp::WithSimd for DiagonalLogJoint<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, simd: S) {
        // With 32 registers and few columns, blocks of 2 vectors of rows whose sums live in
        // registers. Blocks of 8 wrote each class's column 512 bytes at a time, one class
        // after another; in blocks of 2 the K columns are written more nearly abreast, and on
        // the Zen 5 EPYC (seventy-fourth round, `profile gnb-predict`, medians of 21, pairs)
        // d = 5, K = 2 took 0.0025–0.0028 s in blocks of 8 and 0.0017–0.0018 s in blocks of 2;
        // d = 8, K = 2 0.0036 → 0.0023–0.0026 s; d = 8, K = 10 0.0070 → 0.0059 s; d = 2,
        // K = 10 0.0047 → 0.0045 s; d = 2, K = 2 even. With more columns, `run` reads every column of a 64-row block, d streams
        // of 512 bytes, which the prefetchers did not keep up with: on a Zen 4, Gaussian naive
        // Bayes' log joints at d = 64, K = 10 took 32 ms per million rows from L3 and 55 ms
        // from memory; by groups of columns, 40 ms (`predict_proba` into a kept output 0.0634
        // -> 0.0439 s; d = 16, K = 10 0.0201 -> 0.0191 s). At d = 2 to 8 `run` stayed the
        // faster.
        if S::REGISTER_COUNT >= 32 && self.columns.len() <= density::moments::SHORT_RUN_MAX_COLUMNS
        {
            self.run::<S, 2>(simd);
        } else {
            self.run_by_groups(simd);
        }
    }
}

/// Rows per block of [`DiagonalLogJoint::run_by_groups`]: a group's columns (16 KB) stay in L1
/// while every class passes over them, and the classes' sums (4 KB each) in L1 or L2.
const DIAGONAL_BLOCK_ROWS: usize = 512;

/// Rows per block of [`DiagonalLogJoint::run_by_groups`] with at least
/// [`PREFETCHED_MIN_CLASSES`] classes, whose next group of columns is asked for from memory
/// while the classes pass over the present one: the present group (8 KB), the next (8 KB) and
/// ten classes' sums (20 KB) fit in L1 (48 KB here) together.
const PREFETCHED_BLOCK_ROWS: usize = 256;

/// [`PREFETCHED_BLOCK_ROWS`], halved where the L1 data cache is under 48 KB
/// ([`density::cpu::l1_data_bytes`]): there the 36 KB of a block of 256 rows at K = 10 did not
/// fit. On the Zen 4 EPYC (32 KB; eighty-fourth round, `profile gnb-predict-into`,
/// `PROFILE_COLD=cs`, medians of 21, six alternated pairs, 256 → 128 rows): d = 16, K = 10
/// 15.9, 15.7, 14.5, 14.4, 17.5, 17.8 → 13.8, 13.9, 13.9, 15.4, 16.8, 16.9 ms; d = 64, K = 10
/// 41.6, 40.9, 37.6, 41.2, 41.6, 46.5 → 37.8, 35.8, 37.4, 61.9, 39.0, 36.1 ms. Where the cache
/// is 48 KB (the Intel Xeons, Zen 5) 256 rows were measured, and kept.
fn prefetched_block_rows() -> usize {
    match density::cpu::l1_data_bytes() {
        Some(bytes) if bytes < 48 << 10 => PREFETCHED_BLOCK_ROWS / 2,
        _ => PREFETCHED_BLOCK_ROWS,
    }
}

/// Fewest classes for which [`DiagonalLogJoint::run_by_groups`] asks for the next group of
/// columns ahead. Why: with many classes each group's arithmetic takes longer than its read,
/// and reading it only when the classes reach it left the two in series. Measured on the Xeon
/// (`profile gnb-predict-into`, n = 1e6, medians of 20, two series each): d = 64, K = 10
/// 0.0553-0.0592 → 0.0498-0.0519 s; K = 8 0.0442-0.0484 → 0.0408-0.0432 s; d = 16, K = 10
/// 0.0181-0.0193 → 0.0160-0.0163 s; d = 64, K = 6 0.0375-0.0388 → 0.0369-0.0377 s (even).
/// Below it the read is the larger part, the hardware's prefetchers keep up with longer runs,
/// and the asking costs: d = 64, K = 2 0.0242-0.0244 → 0.0274-0.0281 s, K = 4 0.0311 →
/// 0.0325 s.
///
/// The asking is spread over the passes: class c < 4 asks for column c of the next group, one
/// line after each vector of rows it sums (with at least 6 classes, every column of a group of
/// 4 has a class). Each class asked for an equal share of the group's lines in one burst before
/// its pass: `profile gnb-predict` (Zen 5 EPYC, `PROFILE_COLD=cs`, medians of 11, 3 alternated
/// pairs), d = 16, K = 10 8.47–8.53 → 7.61–7.68 ms; d = 64, K = 10 23.8–24.9 → 18.3–19.6 ms.
const PREFETCHED_MIN_CLASSES: usize = 6;

/// Columns read together by [`DiagonalLogJoint::run_by_groups`].
const DIAGONAL_GROUP: usize = 4;

impl DiagonalLogJoint<'_> {
    /// For CPUs with 16 vector registers (AVX2), and for more than 8 columns on any: with 4
    /// vectors of 4 rows per block, `run` read 64 columns at d = 64 two cache lines at a time,
    /// and the prediction drew its input at about 11 GB/s (with 8 vectors of 8 rows on
    /// AVX-512, eight lines at a time: still short runs). Here a block of
    /// [`DIAGONAL_BLOCK_ROWS`] rows ([`PREFETCHED_BLOCK_ROWS`] with many classes, the next
    /// group asked for ahead) is read a few columns at a time, each a contiguous run, and each
    /// class's running sums wait in its output column between the groups, as in
    /// `linear_scores`. Every row still takes the same operations in
    /// the same order (the sums are stored and loaded exactly), so its bits are those of `run`
    /// and of the rows after the last whole vector, which take them one at a time.
    #[inline(always)]
    fn run_by_groups<S: pulp::Simd>(self, simd: S) {
        let d = self.columns.len();
        // Not without columns (nothing would start the sums).
        if d == 0 {
            return self.run::<S, 4>(simd);
        }
        let DiagonalLogJoint {
            columns,
            means,
            inv_var,
            log_norm,
            out: mut sums,
            prefetched_rows,
        } = self;
        let (b, k) = (columns[0].len(), sums.len());
        let ahead = k >= PREFETCHED_MIN_CLASSES;
        let block_rows = if ahead {
            prefetched_rows
        } else {
            DIAGONAL_BLOCK_ROWS
        };
        // Columns in the group that starts at column j.
        let width_at = |j: usize| {
            if d - j >= DIAGONAL_GROUP {
                DIAGONAL_GROUP
            } else {
                1
            }
        };
        for r0 in (0..b).step_by(block_rows) {
            let r1 = (r0 + block_rows).min(b);
            let mut j = 0;
            while j < d {
                let width = width_at(j);
                let x: [&[f64]; DIAGONAL_GROUP] =
                    std::array::from_fn(|q| &columns[(j + q).min(d - 1)][r0..r1]);
                // The next group (its first row and column), the next block's first when this
                // is the block's last, none after the chunk's last.
                let next = if !ahead {
                    None
                } else if j + width < d {
                    Some((r0, j + width))
                } else if r1 < b {
                    Some((r1, 0))
                } else {
                    None
                };
                for (c, sum) in sums.iter_mut().enumerate() {
                    // Class c < 4 asks for column c of the next group, a line after each vector
                    // of its pass (see `PREFETCHED_MIN_CLASSES`).
                    let asks = match next {
                        Some((nr0, nj)) if c < width_at(nj) => {
                            &columns[nj + c][nr0..(nr0 + block_rows).min(b)]
                        }
                        _ => &[][..],
                    };
                    let at = |v: &[f64]| -> [f64; DIAGONAL_GROUP] {
                        std::array::from_fn(|q| v[c * d + (j + q).min(d - 1)])
                    };
                    let (m, iv) = (at(means), at(inv_var));
                    let sum = &mut sum[r0..r1];
                    const G: usize = DIAGONAL_GROUP;
                    let ln = log_norm[c];
                    // The last group turns each sum into its log joint as it stores it, rather
                    // than a pass of its own over the block's sums (a load and a store more per
                    // class and vector of rows; 3.4% of `gnb-predict 16 10`'s samples).
                    let (x, m, iv) = (&x, &m, &iv);
                    let args = (simd, width == G, x, m, iv, sum, asks, ln);
                    match (j == 0, j + width == d) {
                        (true, true) => add_squares_of_width::<S, true, true>(args),
                        (true, false) => add_squares_of_width::<S, true, false>(args),
                        (false, true) => add_squares_of_width::<S, false, true>(args),
                        (false, false) => add_squares_of_width::<S, false, false>(args),
                    }
                }
                j += width;
            }
        }
    }

    /// Blocks of V vectors of rows; for each block and class, the sums over features stay in
    /// registers, so each value costs one load and three operations (the sums used to be loaded
    /// and stored again for every feature). The rows after the last whole block take the same
    /// operations one at a time, so every row gets the same bits wherever it falls.
    #[inline(always)]
    fn run<S: pulp::Simd, const V: usize>(self, simd: S) {
        let DiagonalLogJoint {
            columns,
            means,
            inv_var,
            log_norm,
            mut out,
            ..
        } = self;
        let (b, k, d) = (
            out.first().map_or(0, |col| col.len()),
            out.len(),
            columns.len(),
        );
        let rows = V * S::F64_LANES;
        let whole = b - b % rows;
        let zero = simd.splat_f64s(0.0);
        let half = simd.splat_f64s(0.5);
        for r0 in (0..whole).step_by(rows) {
            for c in 0..k {
                let mu = &means[c * d..(c + 1) * d];
                let iv = &inv_var[c * d..(c + 1) * d];
                let mut acc = [zero; V];
                for ((col, &m), &iv) in columns.iter().zip(mu).zip(iv) {
                    let (x, _) = S::as_simd_f64s(&col[r0..r0 + rows]);
                    let (m, iv) = (simd.splat_f64s(m), simd.splat_f64s(iv));
                    for v in 0..V {
                        let t = simd.sub_f64s(x[v], m);
                        acc[v] = simd.mul_add_f64s(simd.mul_f64s(t, t), iv, acc[v]);
                    }
                }
                let ln = simd.splat_f64s(log_norm[c]);
                for v in 0..V {
                    acc[v] = simd.sub_f64s(ln, simd.mul_f64s(half, acc[v]));
                }
                let dst = S::as_uninit_mut_simd_f64s(&mut out[c][r0..r0 + rows]).0;
                for (dst, acc) in dst.iter_mut().zip(acc) {
                    *dst = MaybeUninit::new(acc);
                }
            }
        }
        for i in whole..b {
            for c in 0..k {
                let mut q = 0.0;
                for (j, col) in columns.iter().enumerate() {
                    let t = col[i] - means[c * d + j];
                    q = (t * t).mul_add(inv_var[c * d + j], q);
                }
                out[c][i] = MaybeUninit::new(log_norm[c] - 0.5 * q);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A labeled chunk of the rows `x`, with no responsibilities (`empty` has no columns).
    fn labeled<'a>(x: MatRef<'a, f64>, labels: &'a [usize], empty: MatRef<'a, f64>) -> Chunk<'a> {
        Chunk {
            set: 0,
            first_row: 0,
            x,
            resp: empty.subrows(0, x.nrows()),
            labels: Some(labels),
            prechecked: false,
            weight_totals: None,
            ahead: density::block::RowsAhead::NONE,
            next_first_column: &[],
            next_labels: &[],
        }
    }

    fn bits(v: &[f64]) -> Vec<u64> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    /// Diagonal log joints by groups of columns, asking ahead (K ≥ `PREFETCHED_MIN_CLASSES`),
    /// have the bits of the formula row by row (Σ_q ((x_q − m_q)² · iv_q + acc), fused, then
    /// ln − ½ · sum) at any block size, rows after the last whole vector included, whether the
    /// last group (which turns the sums into log joints) is a whole group or a single column.
    #[test]
    fn diagonal_log_joints_by_groups_have_the_same_bits_at_every_block_size() {
        for d in [11, 12] {
            diagonal_log_joints_by_groups_have_the_bits_of_the_formula(d);
        }
    }

    fn diagonal_log_joints_by_groups_have_the_bits_of_the_formula(d: usize) {
        assert!(
            d > density::moments::SHORT_RUN_MAX_COLUMNS,
            "d = {d} takes `run`"
        );
        let (b, k) = (1003, PREFETCHED_MIN_CLASSES + 1);
        let data: Vec<Vec<f64>> = (0..d)
            .map(|j| {
                (0..b)
                    .map(|i| ((i * 37 + j * 11) % 101) as f64 * 0.37 - 12.0)
                    .collect()
            })
            .collect();
        let columns: Vec<std::borrow::Cow<'_, [f64]>> = data
            .iter()
            .map(|c| std::borrow::Cow::Borrowed(&c[..]))
            .collect();
        let means: Vec<f64> = (0..k * d).map(|i| (i % 7) as f64 - 3.1).collect();
        let inv_var: Vec<f64> = (0..k * d).map(|i| 0.25 + (i % 5) as f64 * 0.3).collect();
        let log_norm: Vec<f64> = (0..k).map(|c| -1.5 - c as f64).collect();
        let expected: Vec<Vec<f64>> = (0..k)
            .map(|c| {
                (0..b)
                    .map(|i| {
                        let mut acc = 0.0f64;
                        for j in 0..d {
                            let t = data[j][i] - means[c * d + j];
                            acc = (t * t).mul_add(inv_var[c * d + j], acc);
                        }
                        log_norm[c] - 0.5 * acc
                    })
                    .collect()
            })
            .collect();
        for rows in [
            PREFETCHED_BLOCK_ROWS,
            PREFETCHED_BLOCK_ROWS / 2,
            64,
            prefetched_block_rows(),
        ] {
            let mut out = vec![vec![0.0; b]; k];
            // SAFETY: only values are written.
            #[allow(unsafe_code)]
            let unwritten = out
                .iter_mut()
                .map(|c| unsafe { density::block::as_unwritten(c) })
                .collect();
            pulp::Arch::new().dispatch(DiagonalLogJoint {
                columns: &columns,
                means: &means,
                inv_var: &inv_var,
                log_norm: &log_norm,
                out: unwritten,
                prefetched_rows: rows,
            });
            for c in 0..k {
                for i in 0..b {
                    assert_eq!(
                        out[c][i].to_bits(),
                        expected[c][i].to_bits(),
                        "d = {d}, class {c}, row {i}, blocks of {rows} rows"
                    );
                }
            }
        }
    }

    /// Labeled full statistics of two features and more classes than the masks take (by rows,
    /// `grouped_pair_moments_by_rows`): each class's weight, mean and scatter are those of its
    /// rows gathered, by the two-pass formula, and the same when refilled into another chunk's
    /// statistics or when the chunk reads another ahead. Pooled (LDA), the bits
    /// `PooledStats::from_classes` gives for those classes, refilled or not. Values far from
    /// zero, a class of one row and an empty class.
    #[test]
    fn labeled_full_statistics_of_two_features_by_rows_are_each_class_s_own() {
        let qda = GaussianParams::with_structure(CovarianceStructure::Full)
            .check()
            .unwrap_or_else(|e| panic!("{e}"));
        let lda = GaussianParams::with_structure(CovarianceStructure::Tied)
            .check()
            .unwrap_or_else(|e| panic!("{e}"));
        let (n, d) = (1037, 2);
        for k in [PAIR_MASKED_MAX_CLASSES + 1, MASKED_MAX_CLASSES + 1, 10, 16] {
            assert!(!by_masks(k, d));
            // Class 0 has one row, class k - 1 none.
            let label = |i: usize| {
                if i == 0 {
                    0
                } else {
                    1 + (i * 7 + i / 5) % (k - 2)
                }
            };
            let labels: Vec<usize> = (0..n).map(label).collect();
            let x = Mat::from_fn(n, d, |i, j| {
                1e4 * (j + 1) as f64
                    + ((i * 37 + j * 11) % 101) as f64 / 7.0
                    + (i % 3) as f64 * j as f64
            });
            let empty = Mat::<f64>::zeros(n, 0);
            let mut state = gaussian_scratch();
            let chunk = labeled(x.as_ref(), &labels, empty.as_ref());
            let Ok(ChunkStats::Classes(classes)) = qda.chunk_stats(&mut state, chunk, d, k) else {
                panic!("K = {k}: no class statistics");
            };
            for (c, class) in classes.iter().enumerate() {
                let rows: Vec<usize> = (0..n).filter(|&i| labels[i] == c).collect();
                assert_eq!(class.weight(), rows.len() as f64, "K = {k}, class {c}");
                let mean: Vec<f64> = (0..d)
                    .map(|j| {
                        rows.iter().map(|&i| x[(i, j)]).sum::<f64>() / rows.len().max(1) as f64
                    })
                    .collect();
                for j in 0..d {
                    let near = (class.mean()[j] - mean[j]).abs() <= 1e-12 * mean[j].abs();
                    assert!(near, "K = {k}, class {c}, mean {j}");
                    for l in 0..d {
                        let want: f64 = rows
                            .iter()
                            .map(|&i| (x[(i, j)] - mean[j]) * (x[(i, l)] - mean[l]))
                            .sum();
                        let got = class.scatter()[j * d + l];
                        assert!(
                            (got - want).abs() <= 1e-9 * (1.0 + want.abs()),
                            "K = {k}, class {c}, scatter ({j}, {l}): {got} against {want}"
                        );
                    }
                }
            }
            // Into the vectors of another chunk's statistics: the same bits.
            let other: Vec<usize> = (0..n).map(|i| (i * 5) % k).collect();
            let Ok(previous) = qda.chunk_stats(
                &mut state,
                labeled(x.as_ref(), &other, empty.as_ref()),
                d,
                k,
            ) else {
                panic!("K = {k}: the other chunk");
            };
            state.4 = Some(previous);
            let chunk = labeled(x.as_ref(), &labels, empty.as_ref());
            let Ok(ChunkStats::Classes(again)) = qda.chunk_stats(&mut state, chunk, d, k) else {
                panic!("K = {k}: no refilled statistics");
            };
            for (c, (got, want)) in again.iter().zip(&classes).enumerate() {
                assert_eq!(bits(got.mean()), bits(want.mean()), "K = {k}, class {c}");
                assert_eq!(
                    bits(got.scatter()),
                    bits(want.scatter()),
                    "K = {k}, class {c}"
                );
            }
            // Reading another chunk ahead (here the same rows, and labels one shorter).
            let columns: Vec<&[f64]> = (0..d)
                .map(|j| {
                    x.col(j)
                        .try_as_col_major()
                        .map_or(&[][..], |c| c.as_slice())
                })
                .collect();
            let ahead_chunk = Chunk {
                ahead: density::block::RowsAhead::new(&columns, &other[1..]),
                ..labeled(x.as_ref(), &labels, empty.as_ref())
            };
            let Ok(ChunkStats::Classes(ahead)) = qda.chunk_stats(&mut state, ahead_chunk, d, k)
            else {
                panic!("K = {k}: no statistics with a chunk ahead");
            };
            for (c, (got, want)) in ahead.iter().zip(&classes).enumerate() {
                assert_eq!(bits(got.mean()), bits(want.mean()), "K = {k}, class {c}");
                assert_eq!(bits(got.scatter()), bits(want.scatter()), "K = {k}, {c}");
            }
            // Pooled: fresh, then into the vectors of another chunk's pooled statistics.
            let want = PooledStats::from_classes(&classes);
            let mut state = gaussian_scratch();
            for spare in [None, Some(&other)] {
                if let Some(other) = spare {
                    let previous = labeled(x.as_ref(), other, empty.as_ref());
                    let Ok(previous) = lda.chunk_stats(&mut state, previous, d, k) else {
                        panic!("K = {k}: the other chunk, pooled");
                    };
                    state.4 = Some(previous);
                }
                let chunk = labeled(x.as_ref(), &labels, empty.as_ref());
                let Ok(ChunkStats::Pooled(got)) = lda.chunk_stats(&mut state, chunk, d, k) else {
                    panic!("K = {k}: no pooled statistics");
                };
                assert_eq!(bits(&got.weights), bits(&want.weights), "K = {k}");
                assert_eq!(bits(&got.means), bits(&want.means), "K = {k}");
                assert_eq!(bits(&got.within), bits(&want.within), "K = {k}");
            }
        }
    }

    /// The masked statistics of a labeled chunk: pooled, the bits `PooledStats::from_classes`
    /// gives for its classes' statistics; filled into the vectors of another chunk's statistics
    /// (as a fit's next chunk fills the last one's), the bits of new ones. With an empty class,
    /// a class of one row and values far from zero, for every shape the masks take.
    #[test]
    fn masked_statistics_pool_and_refill_with_the_bits_of_new_ones() {
        let (n, other_n) = (203, 77);
        for (d, k) in (1..=5).flat_map(|d| (1..=MASKED_MAX_CLASSES).map(move |k| (d, k))) {
            if !by_masks(k, d) {
                continue;
            }
            let value = |i: usize, j: usize, seed: usize| {
                1e3 * (j + 1) as f64 + ((i * 37 + j * 11 + seed) % 101) as f64 / 7.0
            };
            // Class 0 has one row, the last class (when k > 2) none.
            let label = |i: usize, seed: usize| match (k, i) {
                (1, _) => 0,
                (_, 0) => 0,
                _ => 1 + (i * 3 + seed) % (if k > 2 { k - 2 } else { 1 }),
            };
            let x = Mat::from_fn(n, d, |i, j| value(i, j, 0));
            let labels: Vec<usize> = (0..n).map(|i| label(i, 0)).collect();
            let y = Mat::from_fn(other_n, d, |i, j| value(i, j, 5));
            let other: Vec<usize> = (0..other_n).map(|i| label(i, 1)).collect();
            let empty = Mat::<f64>::zeros(n.max(other_n), 0);
            let chunk = |x, labels| labeled(x, labels, empty.as_ref());
            let case = format!("d = {d}, K = {k}");
            let Ok(ChunkStats::Classes(classes)) =
                full_class_stats(&chunk(x.as_ref(), &labels), &labels, k, false, &mut None)
            else {
                panic!("{case}: no class statistics");
            };
            let want = PooledStats::from_classes(&classes);
            for mut spare in [None, Some(ChunkStats::Classes(Vec::new()))] {
                // Another chunk's pooled statistics first, so that the spare holds its values.
                if spare.is_some() {
                    let Ok(got) =
                        full_class_stats(&chunk(y.as_ref(), &other), &other, k, true, &mut None)
                    else {
                        panic!("{case}: the other chunk");
                    };
                    spare = Some(got);
                }
                let Ok(ChunkStats::Pooled(got)) =
                    full_class_stats(&chunk(x.as_ref(), &labels), &labels, k, true, &mut spare)
                else {
                    panic!("{case}: no pooled statistics");
                };
                assert_eq!(bits(&got.weights), bits(&want.weights), "{case}");
                assert_eq!(bits(&got.means), bits(&want.means), "{case}");
                assert_eq!(bits(&got.within), bits(&want.within), "{case}");
            }
            // Per class, into the vectors of the other chunk's statistics.
            let Ok(previous) =
                full_class_stats(&chunk(y.as_ref(), &other), &other, k, false, &mut None)
            else {
                panic!("{case}: the other chunk's classes");
            };
            let Ok(ChunkStats::Classes(refilled)) = full_class_stats(
                &chunk(x.as_ref(), &labels),
                &labels,
                k,
                false,
                &mut Some(previous),
            ) else {
                panic!("{case}: no refilled statistics");
            };
            for (c, (got, want)) in refilled.iter().zip(&classes).enumerate() {
                assert_eq!(
                    got.weight().to_bits(),
                    want.weight().to_bits(),
                    "{case}, {c}"
                );
                assert_eq!(bits(got.mean()), bits(want.mean()), "{case}, class {c}");
                assert_eq!(
                    bits(got.scatter()),
                    bits(want.scatter()),
                    "{case}, class {c}"
                );
            }
        }
    }
}
