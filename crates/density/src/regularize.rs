//! Estimation helpers that keep covariance and probability estimates usable when data is
//! scarce: ridge and shrinkage for covariances (a class with few points has a singular sample
//! covariance), Ledoit–Wolf's data-driven shrinkage intensity, and Lidstone smoothing for counts
//! (an unseen word must not get probability zero).

use faer::Mat;

/// Σ ← Σ + reg·I (ridge). `reg ≥ 0`.
pub fn add_ridge(cov: &mut Mat<f64>, reg: f64) {
    for i in 0..cov.nrows() {
        cov[(i, i)] += reg;
    }
}

/// Σ ← (1 − α) Σ + α diag(Σ): shrink correlations toward zero, keeping every variance.
///
/// This is scikit-learn's LDA shrinkage: it shrinks the *standardised* covariance toward the
/// identity and scales back, which is the same as this.
pub fn shrink_toward_diagonal(cov: &mut Mat<f64>, alpha: f64) {
    let d = cov.nrows();
    for j in 0..d {
        for i in 0..d {
            if i != j {
                cov[(i, j)] *= 1.0 - alpha;
            }
        }
    }
}

/// Σ ← (1 − α) Σ + α (tr Σ / d) I: shrink toward a scaled identity.
pub fn shrink_toward_scaled_identity(cov: &mut Mat<f64>, alpha: f64) {
    let d = cov.nrows();
    if d == 0 {
        return;
    }
    let mu = (0..d).map(|i| cov[(i, i)]).sum::<f64>() / d as f64;
    for j in 0..d {
        for i in 0..d {
            cov[(i, j)] *= 1.0 - alpha;
        }
        cov[(j, j)] += alpha * mu;
    }
}

/// Ledoit & Wolf (2004) shrinkage intensity toward `(tr S / d) I`, from summaries of centred
/// data: `cov` = S = Σ w x xᵀ / W, `mean_fourth` = Σ w ‖x‖⁴ / W, and `n` the (effective) sample
/// size. With unit weights this is exactly scikit-learn's `ledoit_wolf_shrinkage`:
///
/// ```text
/// μ = tr S / d,  δ = (‖S‖²_F − d μ²) / d,  β = (mean_fourth − ‖S‖²_F) / (d n),
/// α = min(β, δ) / δ   (0 when β = 0)
/// ```
pub fn ledoit_wolf_shrinkage(cov: &Mat<f64>, mean_fourth: f64, n: f64) -> f64 {
    let d = cov.nrows();
    if d == 0 || n <= 0.0 {
        return 0.0;
    }
    let df = d as f64;
    let trace: f64 = (0..d).map(|i| cov[(i, i)]).sum();
    let mu = trace / df;
    let frob2: f64 = (0..d)
        .flat_map(|j| (0..d).map(move |i| (i, j)))
        .map(|(i, j)| cov[(i, j)] * cov[(i, j)])
        .sum();
    let delta = (frob2 - df * mu * mu) / df;
    let beta = ((mean_fourth - frob2) / (df * n)).min(delta);
    if beta == 0.0 || delta <= 0.0 {
        0.0
    } else {
        (beta / delta).clamp(0.0, 1.0)
    }
}

/// Lidstone-smoothed probabilities `(c_j + α) / (Σ c + α m)`; α = 1 is Laplace smoothing.
/// With α = 0 and all counts zero the result is uniform rather than NaN.
pub fn lidstone(counts: &[f64], alpha: f64) -> Vec<f64> {
    let m = counts.len() as f64;
    let total: f64 = counts.iter().sum::<f64>() + alpha * m;
    if total <= 0.0 {
        return vec![1.0 / m; counts.len()];
    }
    counts.iter().map(|c| (c + alpha) / total).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// scikit-learn's ledoit_wolf_shrinkage written out literally on a data matrix.
    fn sklearn_reference(x: &[Vec<f64>]) -> f64 {
        let n = x.len();
        let p = x[0].len();
        let mean: Vec<f64> = (0..p)
            .map(|j| x.iter().map(|r| r[j]).sum::<f64>() / n as f64)
            .collect();
        let xc: Vec<Vec<f64>> = x
            .iter()
            .map(|r| r.iter().zip(&mean).map(|(a, m)| a - m).collect())
            .collect();
        let emp_cov_trace: Vec<f64> = (0..p)
            .map(|j| xc.iter().map(|r| r[j] * r[j]).sum::<f64>() / n as f64)
            .collect();
        let mu = emp_cov_trace.iter().sum::<f64>() / p as f64;
        let mut delta_ = 0.0;
        for a in 0..p {
            for b in 0..p {
                let g: f64 = xc.iter().map(|r| r[a] * r[b]).sum();
                delta_ += g * g;
            }
        }
        let mut beta_ = 0.0;
        for a in 0..p {
            for b in 0..p {
                beta_ += xc.iter().map(|r| r[a] * r[a] * r[b] * r[b]).sum::<f64>();
            }
        }
        delta_ /= (n * n) as f64;
        let beta = 1.0 / (p * n) as f64 * (beta_ / n as f64 - delta_);
        let delta =
            (delta_ - 2.0 * mu * emp_cov_trace.iter().sum::<f64>() + p as f64 * mu * mu) / p as f64;
        let beta = beta.min(delta);
        if beta == 0.0 { 0.0 } else { beta / delta }
    }

    #[test]
    fn ledoit_wolf_matches_scikit_learn_formula() {
        let x: Vec<Vec<f64>> = (0..40)
            .map(|i| {
                let t = i as f64;
                vec![
                    (t * 0.9).sin() * 2.0 + 1.0,
                    (t * 0.37).cos() + 0.3 * (t * 0.9).sin(),
                    (t * 1.7).sin() * 0.5,
                ]
            })
            .collect();
        let n = x.len() as f64;
        let w = vec![1.0; x.len()];
        let m = faer::Mat::from_fn(x.len(), 3, |i, j| x[i][j]);
        let st =
            crate::SufficientStats::from_rows(m.as_ref(), &w, crate::ScatterKind::Full).unwrap();
        let cov = st.covariance().unwrap();
        let mean_fourth: f64 = x
            .iter()
            .map(|r| {
                r.iter()
                    .zip(st.mean())
                    .map(|(a, b)| (a - b) * (a - b))
                    .sum::<f64>()
                    .powi(2)
            })
            .sum::<f64>()
            / n;
        let ours = ledoit_wolf_shrinkage(&cov, mean_fourth, n);
        let want = sklearn_reference(&x);
        assert!(want > 0.0 && want < 1.0);
        assert!((ours - want).abs() < 1e-12, "{ours} vs {want}");
    }

    #[test]
    fn shrinkage_keeps_trace_and_ridge_adds_diagonal() {
        let mut a = faer::mat![[2.0, 1.0], [1.0, 4.0]];
        shrink_toward_scaled_identity(&mut a, 0.5);
        assert!((a[(0, 0)] - 2.5).abs() < 1e-15 && (a[(1, 1)] - 3.5).abs() < 1e-15);
        assert!((a[(0, 1)] - 0.5).abs() < 1e-15);
        let mut b = faer::mat![[2.0, 1.0], [1.0, 4.0]];
        shrink_toward_diagonal(&mut b, 0.25);
        assert_eq!((b[(0, 0)], b[(1, 0)], b[(1, 1)]), (2.0, 0.75, 4.0));
        add_ridge(&mut b, 0.5);
        assert_eq!((b[(0, 0)], b[(1, 1)]), (2.5, 4.5));
    }

    #[test]
    fn lidstone_smooths_and_never_divides_by_zero() {
        assert_eq!(
            lidstone(&[3.0, 0.0, 1.0], 1.0),
            vec![4.0 / 7.0, 1.0 / 7.0, 2.0 / 7.0]
        );
        assert_eq!(lidstone(&[0.0, 0.0], 0.0), vec![0.5, 0.5]);
    }
}
