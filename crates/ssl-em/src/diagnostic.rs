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
//!   and the semi-supervised class covariances.
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
    /// What to do about it, when the verdict is not `Ok`.
    pub suggestion: Option<String>,
}

/// Up to this many features the diagnostic always forms each class's full scatter, for the
/// orientation check.
pub const ORIENTATION_MAX_FEATURES: usize = 64;

/// Whether the diagnostic forms each class's full d × d scatter of the rows (for the orientation
/// check) for a model of `n_parameters` on `d` features: up to [`ORIENTATION_MAX_FEATURES`]
/// features, and past that only for a model with at least as many parameters as a covariance
/// matrix, d(d + 1)/2, whose own fit costs as much. Otherwise only each class's means and
/// variances (what the mean shift needs).
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
    diagnose_with(data, lambda, supervised, semi, unlabeled_posteriors, kind)
}

/// [`diagnose`] with the class statistics of `kind` (the orientation check needs `Full`).
fn diagnose_with<A: GenerativeClassifier, B: GenerativeClassifier>(
    data: &Data<'_>,
    lambda: f64,
    supervised: &A,
    semi: &B,
    unlabeled_posteriors: MatRef<'_, f64>,
    kind: ScatterKind,
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

    // Class moments: labeled only, and labeled + λ-weighted unlabeled posteriors.
    let onehot = generative::one_hot(y_l, n_classes)?;
    let unlabeled = if x_u.nrows() > 0 && lambda > 0.0 {
        Some(weighted_class_stats(
            x_u,
            unlabeled_posteriors,
            lambda,
            kind,
        ))
    } else {
        None
    };
    let mut lab = Vec::with_capacity(n_classes);
    let mut all = Vec::with_capacity(n_classes);
    for k in 0..n_classes {
        let w_l: Vec<f64> = (0..x_l.nrows()).map(|i| onehot[(i, k)]).collect();
        let s_l = SufficientStats::from_rows(x_l, &w_l, kind)
            .map_err(generative::GenerativeError::from)?;
        let mut s_all = s_l.clone();
        if let Some(u) = &unlabeled {
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
    let mean_shift: Vec<f64> = (0..n_classes)
        .map(|k| {
            (0..d)
                .map(|j| (all[k].mean()[j] - lab[k].mean()[j]).abs() / pooled_sd[j])
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
        suggestion,
    })
}

/// Each class's full statistics of the rows of `x` weighted by `lambda` × its column of
/// `posteriors`: what `SufficientStats::from_rows` gives for each class, bit for bit (the same
/// chunks, merged in the same order), with the chunks shared among the pool's threads and every
/// chunk laid out once for every class ([`RowBlock`]). Class by class on one thread, they made a
/// one-iteration diagonal fit at n = 1e6, d = 64, K = 10 take 2.69 s against 1.51 s in parallel
/// (AMD EPYC, 2 threads).
fn weighted_class_stats(
    x: MatRef<'_, f64>,
    posteriors: MatRef<'_, f64>,
    lambda: f64,
    kind: ScatterKind,
) -> Vec<SufficientStats> {
    let (n, d, k) = (x.nrows(), x.ncols(), posteriors.ncols());
    let starts: Vec<usize> = (0..n).step_by(FROM_ROWS_CHUNK).collect();
    let parts = generative::parallel::run_indexed_with(
        starts,
        || (Vec::new(), RowBlock::new()),
        |(buffer, block): &mut (Vec<f64>, RowBlock), _, start| {
            let len = FROM_ROWS_CHUNK.min(n - start);
            let weights: Vec<Vec<f64>> = (0..k)
                .map(|c| {
                    (start..start + len)
                        .map(|i| lambda * posteriors[(i, c)])
                        .collect()
                })
                .collect();
            let weights: Vec<&[f64]> = weights.iter().map(Vec::as_slice).collect();
            let mut part = vec![SufficientStats::new(d, kind); k];
            // Row-major rows (as read from a CSV file) are copied column-major first.
            density::block::with_column_major(x.subrows(start, len), |x| {
                SufficientStats::accumulate_rows_each(&mut part, x, &weights, None, block, buffer);
            });
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
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            for kind in [ScatterKind::Full, ScatterKind::Diagonal] {
                let got =
                    pool.install(|| weighted_class_stats(x.as_ref(), post.as_ref(), lambda, kind));
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
        let full =
            diagnose_with(&data, 0.5, &sup, &semi, post.as_ref(), ScatterKind::Full).unwrap();
        let diag = diagnose_with(
            &data,
            0.5,
            &sup,
            &semi,
            post.as_ref(),
            ScatterKind::Diagonal,
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
