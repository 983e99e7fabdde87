//! Does unlabeled data dominate and bias the model? (seed 004)
//!
//! Seed 004 warns that many unlabeled rows can pull the class Gaussians away from what the labeled
//! rows support, and suggests checking whether the means move by more than about a tenth of their
//! scale or the covariance orientations change a lot. We compare the labeled-only fit θ_sup with
//! the semi-supervised fit θ_ssl, model-agnostically:
//!
//! - **Likelihood ratio on the labeled rows**: Λ = 2 [ℓ_L(θ_sup) − ℓ_L(θ_ssl)], where ℓ_L is the
//!   labeled joint log-likelihood Σ ln p(x_i, y_i | θ). If θ_ssl were the true parameter, Λ would
//!   be approximately χ² with p = (number of parameters) degrees of freedom; a tiny p-value says
//!   the labeled data contradicts the semi-supervised model.
//! - **Mean shift**: per class, the largest move of a class mean (labeled mean vs the
//!   responsibility-weighted mean of all rows), in pooled within-class standard deviations.
//! - **Orientation change**: per class, the angle between the leading eigenvectors of the labeled
//!   and the semi-supervised class covariances. When the class scatters of every unlabeled row
//!   would cost more than three times [`ORIENTATION_MULTIPLY_ADDS`], the semi-supervised
//!   covariance is estimated from blocks of rows spread evenly over the data (the verdict does
//!   not use the orientation; the likelihood ratio and mean shifts read every row).
//!
//! Verdict: `Dominated` when the p-value is below 0.001; `Suspect` when it is below 0.05 or a mean
//! moved by more than one within-class standard deviation; `Ok` otherwise.

use faer::{Mat, MatRef};

use density::scatter::RowBlock;
use density::stats::{FROM_ROWS_CHUNK, Mergeable, ScatterKind, SufficientStats};
use generative::GenerativeClassifier;

use crate::Result;
use crate::em::Data;

/// The verdict of the dominance check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Verdict {
    /// The semi-supervised fit is consistent with the labeled rows.
    Ok,
    /// Some evidence that unlabeled rows pulled the model away.
    Suspect,
    /// The labeled rows strongly contradict the semi-supervised fit.
    Dominated,
}

/// Figures behind the verdict.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DominanceDiagnostic {
    pub verdict: Verdict,
    /// ℓ_L(θ_sup): labeled joint log-likelihood under the labeled-only fit.
    pub labeled_log_lik_supervised: f64,
    /// ℓ_L(θ_ssl): the same under the semi-supervised fit.
    pub labeled_log_lik_semi_supervised: f64,
    /// Λ = 2 (ℓ_L(θ_sup) − ℓ_L(θ_ssl)).
    pub likelihood_ratio: f64,
    /// Degrees of freedom (parameters of the labeled-only model).
    pub degrees_of_freedom: usize,
    /// P(χ²_p ≥ Λ).
    pub p_value: f64,
    /// Per class: largest |Δμ_j| / pooled within-class sd_j.
    pub mean_shift: Vec<f64>,
    /// Per class: angle in degrees between leading covariance eigenvectors (None if d < 2,
    /// fewer than 3 labeled rows in the class, or the class scatters are not formed: more than
    /// [`ORIENTATION_MAX_FEATURES`] features and a model with fewer parameters than one
    /// covariance matrix, see [`forms_full_scatters`]).
    pub orientation_change_deg: Vec<Option<f64>>,
    /// How many unlabeled rows the orientation check read: all of them, or where they are more
    /// than three times [`orientation_rows`], every s-th block of [`ORIENTATION_BLOCK`] rows,
    /// weighted by s (see [`orientation_stride`]). Zero when no orientation was computed from
    /// unlabeled rows (absent from JSON written before it was added).
    #[serde(default)]
    pub orientation_unlabeled_rows: usize,
    /// What to do about it, when the verdict is not `Ok`.
    pub suggestion: Option<String>,
}

/// Up to this many features the diagnostic always forms each class's full scatter, for the
/// orientation check.
pub const ORIENTATION_MAX_FEATURES: usize = 64;

/// The orientation check forms the class scatters of every unlabeled row unless they cost more
/// than three times this many multiply-adds (n·K·d(d + 1)/2, see [`ORIENTATION_MIN_STRIDE`];
/// 2^31 is n = 1e6 rows at d = 16 and K = 15, or at d = 64 and K = 1), and then of about
/// [`orientation_rows`] of them: every s-th block of [`ORIENTATION_BLOCK`] rows,
/// s = ⌈n_u / that⌉, each row weighted by s.
///
/// Why: for a diagonal model at n = 1e6, d = 64, K = 10 the end of a fit over all rows took
/// 0.75 s, six and a half of its 0.11 s EM iterations, for a figure the verdict does not use
/// (0.15–0.18 s since; the mean shifts read every row, through weighted sums). Why not fewer
/// rows everywhere: a leading eigenvector is only as well determined as the gap below its
/// eigenvalue. On the benchmark's CSV file (d = 16, K = 2, whose class covariances' two leading
/// eigenvalues are within 2%) 122,624 of its 980,000 unlabeled rows gave orientation changes of
/// 31.7° and 18.3° against 12.7° and 13.5° from every row (the same figures from numpy, so the
/// arithmetic is right and the difference is sampling); there every row costs 2.7e8
/// multiply-adds. In the test below (d = 3, well separated eigenvalues) the angles from blocks
/// were 0.02° and 0.11° from those of every row.
pub const ORIENTATION_MULTIPLY_ADDS: usize = 1 << 31;

/// Past [`ORIENTATION_MULTIPLY_ADDS`], the orientation check still reads at least this many
/// unlabeled rows.
pub const ORIENTATION_MIN_ROWS: usize = 1 << 17;

/// About how many unlabeled rows the orientation check reads at most, for `d` features and `k`
/// classes: [`ORIENTATION_MULTIPLY_ADDS`] / (K·d(d + 1)/2), and at least [`ORIENTATION_MIN_ROWS`].
pub fn orientation_rows(d: usize, k: usize) -> usize {
    let per_row = (k * d * (d + 1) / 2).max(1);
    (ORIENTATION_MULTIPLY_ADDS / per_row).max(ORIENTATION_MIN_ROWS)
}

/// The orientation check reads its rows in blocks of this many consecutive rows, every s-th
/// block: rows spread over the whole data, a block's values of a column adjacent in memory. (Every
/// s-th row alone would read every cache line of a column-major matrix at s ≤ 8.)
pub const ORIENTATION_BLOCK: usize = 256;

/// The stride s, in blocks of [`ORIENTATION_BLOCK`] rows, of the unlabeled rows the
/// orientation check reads, of `n_unlabeled` rows when it reads at most about `max_rows` (see
/// [`orientation_rows`]): ⌈n_unlabeled / max_rows⌉ when that is at least
/// [`ORIENTATION_MIN_STRIDE`], and otherwise 1 (every row).
pub fn orientation_stride(n_unlabeled: usize, max_rows: usize) -> usize {
    let s = n_unlabeled.div_ceil(max_rows.max(1));
    if s >= ORIENTATION_MIN_STRIDE { s } else { 1 }
}

/// The orientation check reads blocks of rows only when they skip at least three rows in four.
///
/// Why: reading blocks costs a pass over every row for the mean shifts' weighted sums and a copy
/// of the chosen blocks, which reading every row does not. At stride 2 (d = 64, K = 2, n = 1e6)
/// the end of a diagonal fit took 0.17–0.21 s against 0.16 s over every row.
pub const ORIENTATION_MIN_STRIDE: usize = 4;

/// How many of `n` rows every `stride`-th block of [`ORIENTATION_BLOCK`] rows holds.
fn chosen_rows(n: usize, stride: usize) -> usize {
    let span = stride * ORIENTATION_BLOCK;
    n / span * ORIENTATION_BLOCK + (n % span).min(ORIENTATION_BLOCK)
}

/// The index of the i-th of the rows every `stride`-th block of [`ORIENTATION_BLOCK`] rows holds.
fn chosen_row(i: usize, stride: usize) -> usize {
    i / ORIENTATION_BLOCK * stride * ORIENTATION_BLOCK + i % ORIENTATION_BLOCK
}

/// Whether the diagnostic forms each class's full d × d scatter of the rows (for the orientation
/// check) for a model of `n_parameters` on `d` features: up to [`ORIENTATION_MAX_FEATURES`]
/// features, and past that only for a model with at least as many parameters as a covariance
/// matrix, d(d + 1)/2, whose own fit costs as much. Otherwise only the labeled rows' means and
/// variances and each class's weighted sums of the unlabeled rows (what the mean shift needs).
///
/// Why: the full scatters cost n·K·d(d + 1)/2 multiply-adds and K·d² values per chunk of rows
/// held until they are merged, whatever the model. For naive Bayes at n = 1e6, d = 64, K = 10
/// that was about 0.5 s, eight of its EM iterations; on a document-term matrix of 5,000 words and
/// 20 classes it would be 4 GB per chunk.
pub fn forms_full_scatters(d: usize, n_parameters: usize) -> bool {
    d <= ORIENTATION_MAX_FEATURES || n_parameters >= d * (d + 1) / 2
}

pub(crate) fn diagnose<A: GenerativeClassifier, B: GenerativeClassifier>(
    data: &Data<'_>,
    lambda: f64,
    supervised: &A,
    semi: &B,
    unlabeled_posteriors: MatRef<'_, f64>,
) -> Result<DominanceDiagnostic> {
    let kind = if forms_full_scatters(data.x_l.ncols(), supervised.n_parameters()) {
        ScatterKind::Full
    } else {
        ScatterKind::Diagonal
    };
    let rows = orientation_rows(data.x_l.ncols(), data.n_classes);
    diagnose_with(
        data,
        lambda,
        supervised,
        semi,
        unlabeled_posteriors,
        kind,
        rows,
    )
}

/// [`diagnose`] with the class statistics of `kind` (the orientation check needs `Full`), whose
/// orientation check reads at most about `orientation_rows` unlabeled rows.
fn diagnose_with<A: GenerativeClassifier, B: GenerativeClassifier>(
    data: &Data<'_>,
    lambda: f64,
    supervised: &A,
    semi: &B,
    unlabeled_posteriors: MatRef<'_, f64>,
    kind: ScatterKind,
    orientation_rows: usize,
) -> Result<DominanceDiagnostic> {
    let Data {
        x_l,
        y_l,
        n_classes,
        x_u,
    } = *data;
    let d = x_l.ncols();
    let labeled_ll = |lj: Mat<f64>| -> f64 {
        y_l.iter()
            .enumerate()
            .map(|(i, y)| lj[(i, *y)].max(-f64::MAX))
            .sum()
    };
    let ll_sup = labeled_ll(supervised.log_joint(x_l)?);
    let ll_ssl = labeled_ll(semi.log_joint(x_l)?);
    let lr = (2.0 * (ll_sup - ll_ssl)).max(0.0);
    let dof = supervised.n_parameters().max(1);
    let p_value = chi_square_survival(lr, dof as f64);

    // Class moments: labeled only, and labeled + λ-weighted unlabeled posteriors. When the
    // orientation is wanted and reads every row (stride 1), one pass gives each class's full
    // statistics of the unlabeled rows, means and scatters. Otherwise the mean shifts take each
    // class's weighted sums of every row, and the orientation (if wanted) a full scatter of the
    // chosen blocks apart (the pooled sd is the labeled rows' alone).
    let onehot = generative::one_hot(y_l, n_classes)?;
    let with_unlabeled = x_u.nrows() > 0 && lambda > 0.0;
    let stride = if kind == ScatterKind::Full && with_unlabeled {
        orientation_stride(x_u.nrows(), orientation_rows)
    } else {
        1
    };
    let (unlabeled_stats, unlabeled_sums) = if !with_unlabeled {
        (None, None)
    } else if kind == ScatterKind::Full {
        let stats = weighted_class_stats(x_u, unlabeled_posteriors, lambda, kind, stride);
        let sums = (stride > 1).then(|| weighted_class_sums(x_u, unlabeled_posteriors, lambda));
        (Some(stats), sums)
    } else {
        let sums = weighted_class_sums(x_u, unlabeled_posteriors, lambda);
        (None, Some(sums))
    };
    let mut lab = Vec::with_capacity(n_classes);
    let mut all = Vec::with_capacity(n_classes);
    for k in 0..n_classes {
        let w_l: Vec<f64> = (0..x_l.nrows()).map(|i| onehot[(i, k)]).collect();
        let s_l = SufficientStats::from_rows(x_l, &w_l, kind)
            .map_err(generative::GenerativeError::from)?;
        let mut s_all = s_l.clone();
        if let Some(u) = &unlabeled_stats {
            s_all.merge(&u[k]);
        }
        lab.push(s_l);
        all.push(s_all);
    }
    let pooled_sd: Vec<f64> = (0..d)
        .map(|j| {
            let v = lab.iter().map(|s| variance_sum(s, j, d)).sum::<f64>() / x_l.nrows() as f64;
            if v > 0.0 { v.sqrt() } else { 1.0 }
        })
        .collect();
    // How far the unlabeled rows moved class k's mean of feature j.
    let mean_move = |k: usize, j: usize| -> f64 {
        let Some((weights, sums)) = &unlabeled_sums else {
            return all[k].mean()[j] - lab[k].mean()[j];
        };
        let (w_l, w_u) = (lab[k].weight(), weights[k]);
        if w_u <= 0.0 {
            return 0.0;
        }
        // The merged mean less the labeled one, (w_l m_l + w_u m_u) / (w_l + w_u) − m_l.
        w_u / (w_l + w_u) * (sums[(j, k)] / w_u - lab[k].mean()[j])
    };
    let mean_shift: Vec<f64> = (0..n_classes)
        .map(|k| {
            (0..d)
                .map(|j| mean_move(k, j).abs() / pooled_sd[j])
                .fold(0.0, f64::max)
        })
        .collect();
    let orientation_change_deg = (0..n_classes)
        .map(|k| {
            if d < 2 || lab[k].weight() < 3.0 || kind != ScatterKind::Full {
                return None;
            }
            let a = leading_eigenvector(lab[k].scatter(), d);
            let b = leading_eigenvector(all[k].scatter(), d);
            let cos = density::numerics::dot(&a, &b).abs().min(1.0);
            Some(cos.acos().to_degrees())
        })
        .collect();
    let max_shift = mean_shift.iter().copied().fold(0.0, f64::max);
    let verdict = if p_value < 1e-3 {
        Verdict::Dominated
    } else if p_value < 0.05 || max_shift > 1.0 {
        Verdict::Suspect
    } else {
        Verdict::Ok
    };
    let suggestion = (verdict != Verdict::Ok).then(|| {
        format!(
            "the unlabeled rows moved the model away from what the labeled rows support (likelihood ratio {lr:.1} on {dof} parameters, p = {p_value:.2e}; largest mean shift {max_shift:.2} within-class sd); lower lambda (current {lambda}), try lambda = auto, or use a richer model (more components per class)"
        )
    });
    Ok(DominanceDiagnostic {
        verdict,
        labeled_log_lik_supervised: ll_sup,
        labeled_log_lik_semi_supervised: ll_ssl,
        likelihood_ratio: lr,
        degrees_of_freedom: dof,
        p_value,
        mean_shift,
        orientation_change_deg,
        orientation_unlabeled_rows: if kind == ScatterKind::Full && with_unlabeled {
            chosen_rows(x_u.nrows(), stride)
        } else {
            0
        },
        suggestion,
    })
}

/// Each class's statistics of the rows of `x` in every `stride`-th block of
/// [`ORIENTATION_BLOCK`] rows (blocks 0, s, 2s, ...), weighted by `lambda` × `stride` × its
/// column of `posteriors`. With stride 1 (every row): what
/// `SufficientStats::from_rows` gives for each class, bit for bit (the same chunks, merged in
/// the same order), with the chunks shared among the pool's threads and every chunk laid out
/// once for every class ([`RowBlock`]). Class by class on one thread, they made a one-iteration
/// diagonal fit at n = 1e6, d = 64, K = 10 take 2.69 s against 1.51 s in parallel (AMD EPYC, 2
/// threads). With a larger stride, each chunk of the chosen rows (8,192 of them, the same
/// chunking) is gathered column-major first.
fn weighted_class_stats(
    x: MatRef<'_, f64>,
    posteriors: MatRef<'_, f64>,
    lambda: f64,
    kind: ScatterKind,
    stride: usize,
) -> Vec<SufficientStats> {
    let (d, k) = (x.ncols(), posteriors.ncols());
    let n = chosen_rows(x.nrows(), stride);
    let scale = lambda * stride as f64;
    let starts: Vec<usize> = (0..n).step_by(FROM_ROWS_CHUNK).collect();
    let parts = generative::parallel::run_indexed_with(
        starts,
        || (Vec::new(), RowBlock::new(), Vec::new(), Vec::new()),
        |(buffer, block, gathered, rows): &mut (Vec<f64>, RowBlock, Vec<f64>, Vec<usize>),
         _,
         start| {
            let len = FROM_ROWS_CHUNK.min(n - start);
            rows.clear();
            rows.extend((start..start + len).map(|i| chosen_row(i, stride)));
            let weights: Vec<Vec<f64>> = (0..k)
                .map(|c| rows.iter().map(|&r| scale * posteriors[(r, c)]).collect())
                .collect();
            let weights: Vec<&[f64]> = weights.iter().map(Vec::as_slice).collect();
            let mut part = vec![SufficientStats::new(d, kind); k];
            if stride == 1 {
                // Row-major rows (as read from a CSV file) are copied column-major first.
                density::block::with_column_major(x.subrows(start, len), |x| {
                    SufficientStats::accumulate_rows_each(
                        &mut part, x, &weights, None, block, buffer,
                    );
                });
            } else {
                let x = density::block::gather_rows(x, rows, gathered);
                SufficientStats::accumulate_rows_each(&mut part, x, &weights, None, block, buffer);
            }
            part
        },
    );
    (0..k)
        .map(|c| {
            let mut total = SufficientStats::new(d, kind);
            for part in &parts {
                total.merge(&part[c]);
            }
            total
        })
        .collect()
}

/// Each class's total weight and weighted sums of the rows of `x` (d × K), the weights `lambda` ×
/// the class's column of `posteriors`: a product `xᵀ P` per chunk of [`FROM_ROWS_CHUNK`] rows on
/// the pool's threads, the chunks' sums added in order (the same bits on any number of threads).
/// What the mean shifts need of rows whose scatters are not formed: one multiply-add per row,
/// feature and class, against the diagonal statistics' centred squares.
fn weighted_class_sums(
    x: MatRef<'_, f64>,
    posteriors: MatRef<'_, f64>,
    lambda: f64,
) -> (Vec<f64>, Mat<f64>) {
    let (n, d, k) = (x.nrows(), x.ncols(), posteriors.ncols());
    let starts: Vec<usize> = (0..n).step_by(FROM_ROWS_CHUNK).collect();
    let parts = generative::parallel::run_indexed(starts, |_, start| {
        let len = FROM_ROWS_CHUNK.min(n - start);
        let p = posteriors.subrows(start, len);
        let mut sums = Mat::zeros(d, k);
        faer::linalg::matmul::matmul(
            &mut sums,
            faer::Accum::Replace,
            x.subrows(start, len).transpose(),
            p,
            lambda,
            faer::Par::Seq,
        );
        let mut scratch = Vec::new();
        let weights: Vec<f64> = (0..k)
            .map(|c| lambda * density::numerics::sum(density::block::column(p, c, &mut scratch)))
            .collect();
        (weights, sums)
    });
    let mut weights = vec![0.0; k];
    let mut sums = Mat::zeros(d, k);
    for (w, s) in &parts {
        weights.iter_mut().zip(w).for_each(|(a, b)| *a += b);
        sums += s;
    }
    (weights, sums)
}

/// Feature j's entry of the diagonal of `s`'s scatter (d features), full or diagonal.
fn variance_sum(s: &SufficientStats, j: usize, d: usize) -> f64 {
    match s.kind() {
        ScatterKind::Full => s.scatter()[j * d + j],
        ScatterKind::Diagonal => s.scatter()[j],
    }
}

/// Leading eigenvector of a symmetric d × d matrix (column-major) by power iteration.
fn leading_eigenvector(m: &[f64], d: usize) -> Vec<f64> {
    let mut v: Vec<f64> = (0..d).map(|i| 1.0 + i as f64 * 1e-3).collect();
    for _ in 0..500 {
        let mut w = vec![0.0; d];
        for j in 0..d {
            for i in 0..d {
                w[i] += m[j * d + i] * v[j];
            }
        }
        let norm = w.iter().map(|x| x * x).sum::<f64>().sqrt();
        if norm == 0.0 {
            break;
        }
        w.iter_mut().for_each(|x| *x /= norm);
        let delta: f64 = w.iter().zip(&v).map(|(a, b)| (a - b).abs()).sum();
        v = w;
        if delta < 1e-12 {
            break;
        }
    }
    v
}

/// P(χ²_k ≥ x) by the Wilson–Hilferty cube-root normal approximation (accurate to about 1e-3
/// in the p-value for k ≥ 3, ample for a verdict threshold).
pub fn chi_square_survival(x: f64, k: f64) -> f64 {
    if x <= 0.0 {
        return 1.0;
    }
    let s = 2.0 / (9.0 * k);
    let z = ((x / k).cbrt() - (1.0 - s)) / s.sqrt();
    0.5 * density::numerics::erfc(z / std::f64::consts::SQRT_2)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `f` on a pool of `threads` workers.
    fn on_threads<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> R {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(f)
    }

    /// The chunks computed in parallel and merged in order are `from_rows`, bit for bit, over
    /// several chunks and a short last one, on one thread and on two.
    #[test]
    fn parallel_class_stats_equal_from_rows() {
        let n = 2 * FROM_ROWS_CHUNK + 77;
        let v = |i: usize, j: usize| {
            let h = (i * 7919 + j * 104_729) % 10_007;
            (h as f64 / 10_007.0 - 0.5) * 10f64.powi((h % 5) as i32 - 2)
        };
        let x = Mat::from_fn(n, 3, v);
        // Some zero weights, so that the sparse path of `accumulate_rows` is taken too.
        let post = Mat::from_fn(n, 2, |i, c| {
            if c == 0 && i % 3 == 0 {
                0.0
            } else {
                (v(i, 5 + c) + 6.0) / 12.0
            }
        });
        let lambda = 0.37;
        for threads in [1, 2] {
            for kind in [ScatterKind::Full, ScatterKind::Diagonal] {
                let got = on_threads(threads, || {
                    weighted_class_stats(x.as_ref(), post.as_ref(), lambda, kind, 1)
                });
                for (c, got) in got.iter().enumerate() {
                    let w: Vec<f64> = (0..n).map(|i| lambda * post[(i, c)]).collect();
                    let want = SufficientStats::from_rows(x.as_ref(), &w, kind).unwrap();
                    assert_eq!(got, &want, "class {c} on {threads} threads, {kind:?}");
                }
            }
        }
    }

    /// With only each class's means and variances, the diagnostic gives what the full scatters
    /// give, but no orientation; it takes them past 64 features for models with fewer
    /// parameters than a covariance matrix (naive Bayes on many features), never below.
    #[test]
    fn diagonal_class_statistics_give_the_same_verdict_without_orientations() {
        use generative::{GaussianParams, HyperParams, WeightedFit};
        let v = |i: usize, j: usize| {
            let h = (i * 7919 + j * 104_729) % 10_007;
            h as f64 / 10_007.0 - 0.5
        };
        let y_l: Vec<usize> = (0..30).map(|i| i % 3).collect();
        let x_l = Mat::from_fn(30, 3, |i, j| v(i, j) + y_l[i] as f64 * (j as f64 - 1.0));
        let x_u = Mat::from_fn(5000, 3, |i, j| {
            v(i + 30, j) + (i % 3) as f64 * (j as f64 - 0.5)
        });
        let post = Mat::from_fn(5000, 3, |i, c| if i % 3 == c { 0.8 } else { 0.1 });
        let data = Data {
            x_l: x_l.as_ref(),
            y_l: &y_l,
            n_classes: 3,
            x_u: x_u.as_ref(),
        };
        let spec = GaussianParams::default().check().unwrap();
        let sup = spec.fit(x_l.as_ref(), &y_l, 3).unwrap();
        let semi = spec.fit(
            x_u.as_ref(),
            &(0..5000).map(|i| i % 3).collect::<Vec<_>>(),
            3,
        );
        let semi = semi.unwrap();
        let full = diagnose_with(
            &data,
            0.5,
            &sup,
            &semi,
            post.as_ref(),
            ScatterKind::Full,
            5000,
        )
        .unwrap();
        let diag = diagnose_with(
            &data,
            0.5,
            &sup,
            &semi,
            post.as_ref(),
            ScatterKind::Diagonal,
            5000,
        )
        .unwrap();
        assert!(full.orientation_change_deg.iter().all(Option::is_some));
        assert!(diag.orientation_change_deg.iter().all(Option::is_none));
        assert!(
            full.mean_shift.iter().any(|&m| m > 0.1),
            "{:?}",
            full.mean_shift
        );
        for (a, b) in full.mean_shift.iter().zip(&diag.mean_shift) {
            assert!((a - b).abs() <= 1e-12 * a.abs(), "{a} vs {b}");
        }
        assert_eq!(full.likelihood_ratio, diag.likelihood_ratio);
        assert_eq!(full.verdict, diag.verdict);
        assert_eq!(
            diagnose(&data, 0.5, &sup, &semi, post.as_ref()).unwrap(),
            full,
            "3 features: full scatters"
        );
        // Naive Bayes' K·(d + 1) parameters against d(d + 1)/2 = 2145 at d = 65.
        assert!(forms_full_scatters(64, 10 * 65));
        assert!(!forms_full_scatters(65, 10 * 66));
        assert!(forms_full_scatters(65, 2145));
        assert!(!forms_full_scatters(65, 2144));
    }

    #[test]
    fn chosen_rows_are_every_strideth_block() {
        for stride in 1..5 {
            for n in [0, 1, 255, 256, 257, 1000, 4 * 256 * stride + 3, 10_000] {
                let want: Vec<usize> = (0..n)
                    .filter(|i| (i / ORIENTATION_BLOCK).is_multiple_of(stride))
                    .collect();
                let m = chosen_rows(n, stride);
                let got: Vec<usize> = (0..m).map(|i| chosen_row(i, stride)).collect();
                assert_eq!(got, want, "n = {n}, stride {stride}");
            }
        }
        let cap = ORIENTATION_MIN_ROWS;
        assert_eq!(orientation_stride(cap, cap), 1);
        assert_eq!(orientation_stride(3 * cap, cap), 1);
        assert_eq!(orientation_stride(3 * cap + 1, cap), 4);
        assert_eq!(orientation_stride(1_000_000, cap), 8);
        assert!(chosen_rows(1_000_000, 8) <= cap);
        // Every row of the benchmark's 1e6 × 16 two-class file, and at d = 64, K = 2; blocks at
        // d = 64, K = 10.
        assert_eq!(orientation_stride(1_000_000, orientation_rows(16, 2)), 1);
        assert_eq!(orientation_stride(1_000_000, orientation_rows(16, 10)), 1);
        assert_eq!(orientation_stride(1_000_000, orientation_rows(64, 2)), 1);
        assert_eq!(orientation_stride(1_000_000, orientation_rows(64, 3)), 1);
        assert_eq!(orientation_stride(1_000_000, orientation_rows(64, 4)), 4);
        assert_eq!(orientation_rows(64, 10), cap);
        assert_eq!(orientation_rows(64, 2), (1 << 31) / 4160);
    }

    /// Past the cap, the mean shifts and the verdict are those of every row (to rounding: sums
    /// against centred moments) and the orientation is within a small fraction of a degree of the
    /// one every row gives, from blocks of the rows (the same bits on one thread and on two);
    /// up to the cap nothing changed: every row, one pass of full statistics.
    #[test]
    fn past_the_cap_the_orientation_reads_blocks_of_rows_and_the_mean_shifts_every_row() {
        use generative::{GaussianParams, HyperParams, WeightedFit};
        use rand::SeedableRng;
        use rand_distr::{Distribution, StandardNormal};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let mut z = || -> f64 { StandardNormal.sample(&mut rng) };
        // Class c: sd (3, 1, 0.5) along axes turned by `turn` in the first plane, mean (2c, 0, c).
        let mut draw = |n: usize, turn: f64| -> (Mat<f64>, Vec<usize>) {
            let (sin, cos) = turn.to_radians().sin_cos();
            let mut x = Mat::zeros(n, 3);
            let y: Vec<usize> = (0..n).map(|i| i % 2).collect();
            for i in 0..n {
                let (a, b, c) = (3.0 * z(), z(), 0.5 * z());
                let m = y[i] as f64;
                x[(i, 0)] = cos * a - sin * b + 2.0 * m;
                x[(i, 1)] = sin * a + cos * b;
                x[(i, 2)] = c + m;
            }
            (x, y)
        };
        let (x_l, y_l) = draw(60, 0.0);
        let cap = ORIENTATION_MIN_ROWS;
        let n_u = 3 * cap + 1000;
        let (x_u, y_u) = draw(n_u, 20.0);
        let post = Mat::from_fn(n_u, 2, |i, c| if y_u[i] == c { 0.9 } else { 0.1 });
        let data = Data {
            x_l: x_l.as_ref(),
            y_l: &y_l,
            n_classes: 2,
            x_u: x_u.as_ref(),
        };
        let spec = GaussianParams::default().check().unwrap();
        let sup = spec.fit(x_l.as_ref(), &y_l, 2).unwrap();
        let semi = spec.fit(x_u.as_ref(), &y_u, 2).unwrap();
        let lambda = 0.3;
        let run = |threads: usize| {
            on_threads(threads, || {
                diagnose_with(
                    &data,
                    lambda,
                    &sup,
                    &semi,
                    post.as_ref(),
                    ScatterKind::Full,
                    cap,
                )
            })
            .unwrap()
        };
        let got = run(2);
        assert_eq!(run(1), got, "one thread against two");
        assert_eq!(orientation_stride(n_u, cap), 4);
        assert_eq!(got.orientation_unlabeled_rows, chosen_rows(n_u, 4));
        assert!(got.orientation_unlabeled_rows <= cap);

        // What every row gives: full statistics of all of them.
        let every = weighted_class_stats(x_u.as_ref(), post.as_ref(), lambda, ScatterKind::Full, 1);
        let onehot = generative::one_hot(&y_l, 2).unwrap();
        let lab: Vec<SufficientStats> = (0..2)
            .map(|k| {
                let w: Vec<f64> = (0..60).map(|i| onehot[(i, k)]).collect();
                SufficientStats::from_rows(x_l.as_ref(), &w, ScatterKind::Full).unwrap()
            })
            .collect();
        for k in 0..2 {
            let mut all = lab[k].clone();
            all.merge(&every[k]);
            let sd: Vec<f64> = (0..3)
                .map(|j| ((lab[0].scatter()[4 * j] + lab[1].scatter()[4 * j]) / 60.0).sqrt())
                .collect();
            let shift = (0..3)
                .map(|j| (all.mean()[j] - lab[k].mean()[j]).abs() / sd[j])
                .fold(0.0, f64::max);
            assert!(shift > 0.05, "class {k}: shift {shift}");
            assert!(
                (got.mean_shift[k] - shift).abs() <= 1e-10 * shift,
                "class {k}: {} against {shift}",
                got.mean_shift[k]
            );
            let a = leading_eigenvector(lab[k].scatter(), 3);
            let b = leading_eigenvector(all.scatter(), 3);
            let angle = density::numerics::dot(&a, &b)
                .abs()
                .min(1.0)
                .acos()
                .to_degrees();
            let sampled = got.orientation_change_deg[k].unwrap();
            assert!(
                angle > 5.0,
                "class {k}: the rows turned the axis by {angle}°"
            );
            assert!(
                (sampled - angle).abs() < 0.25,
                "class {k}: {sampled}° from blocks against {angle}° from every row"
            );
        }

        // Up to the cap: every row read once, as before.
        let few = cap;
        let data = Data {
            x_u: x_u.as_ref().subrows(0, few),
            ..data
        };
        let got = diagnose_with(
            &data,
            lambda,
            &sup,
            &semi,
            post.as_ref().subrows(0, few),
            ScatterKind::Full,
            cap,
        )
        .unwrap();
        assert_eq!(got.orientation_unlabeled_rows, few);
    }

    #[test]
    fn chi_square_survival_matches_published_quantiles() {
        // Upper 5% and 0.1% points of χ² (standard tables).
        for (x, k, p) in [
            (18.307, 10.0, 0.05),
            (29.588, 10.0, 0.001),
            (11.070, 5.0, 0.05),
            (43.773, 30.0, 0.05),
        ] {
            let got = chi_square_survival(x, k);
            assert!((got - p).abs() < 0.1 * p, "χ²({k}) at {x}: {got} vs {p}");
        }
        assert_eq!(chi_square_survival(0.0, 3.0), 1.0);
    }

    #[test]
    fn power_iteration_finds_the_leading_axis() {
        let m = [3.0, 1.0, 1.0, 3.0];
        let v = leading_eigenvector(&m, 2);
        assert!(
            (v[0].abs() - std::f64::consts::FRAC_1_SQRT_2).abs() < 1e-9
                && (v[0] - v[1]).abs() < 1e-9
        );
    }
}
