//! Posterior scores as formulas: what a model's scores kernel computes, described as data.
//!
//! Why: a prediction into a fresh output used to zero it before the scores kernel wrote over
//! it, and at n = 1e6, d = 2, K = 10 that zeroing was about a sixth of LDA's `predict_proba`
//! (0.0047 s against 0.0040 s without; seventy-third round). Rust allows no slice of `f64` over
//! memory not yet written, so a kernel that writes a fresh output must write it through
//! `MaybeUninit`, and the prediction must know that every value was written. A model that
//! describes its scores by one of these formulas has them written by this crate's own kernels,
//! which write every value; a formula is data rather than a method, so no implementation of
//! the trait outside the crate can vouch for a write it did not make.

use std::borrow::Cow;
use std::mem::MaybeUninit;

use faer::{MatMut, MatRef};

use crate::fused_posteriors::unwritten_posteriors;
use crate::linear_scores::{LinearScores, mark_rejected_rows};

/// The posterior scores of a chunk of rows, as
/// [`GenerativeClassifier::posterior_score_formula`](crate::GenerativeClassifier::posterior_score_formula)
/// describes them.
#[derive(Debug, Clone)]
pub enum ScoreFormula<'a> {
    /// `b_c + Σ_j f(x_ij) w_cj` (LDA's discriminant, Bernoulli and multinomial naive Bayes).
    Linear(LinearScores<'a>),
    /// `log_norm_c − ½ Σ_j (x_ij − μ_cj)² / σ²_cj`, in that order of operations (Gaussian
    /// naive Bayes, and the spherical structure): `means` and `inverse_variances` K × d row by
    /// row, `log_norms` K (each class's log normaliser plus log prior).
    DiagonalGaussian {
        means: Cow<'a, [f64]>,
        inverse_variances: Cow<'a, [f64]>,
        log_norms: Cow<'a, [f64]>,
    },
    /// `log_norm_c − ½‖L_c⁻¹(x_i − μ_c)‖²` by forward substitution (QDA), as
    /// [`density::mahalanobis::gaussian_log_densities`] computes it: `means` K × d row by row,
    /// `factors` the K lower Cholesky factors, d × d column-major one after another.
    FullGaussian {
        means: Cow<'a, [f64]>,
        factors: Cow<'a, [f64]>,
        log_norms: Cow<'a, [f64]>,
    },
}

impl ScoreFormula<'_> {
    /// Writes the scores of the rows `x` into `out`, K columns of `x.nrows()` values not yet
    /// written: `None`, writing nothing, where the formula's kernel does not take them (shapes
    /// that do not agree; for the linear and diagonal formulas, columns of `x` that are not
    /// contiguous; more classes than the streamed linear kernel takes); otherwise every value of every column is written, and the
    /// answer is whether every value of `x` was one the formula accepts (the rest are left for
    /// [`mark_rejected_rows`](Self::mark_rejected_rows)).
    pub(crate) fn write_unwritten(
        &self,
        x: MatRef<'_, f64>,
        out: Vec<&mut [MaybeUninit<f64>]>,
    ) -> Option<bool> {
        match self {
            ScoreFormula::Linear(linear) => linear.write_unwritten(x, out),
            ScoreFormula::DiagonalGaussian {
                means,
                inverse_variances,
                log_norms,
            } => {
                let (n, d, k) = (x.nrows(), x.ncols(), log_norms.len());
                if means.len() != k * d
                    || inverse_variances.len() != k * d
                    || out.len() != k
                    || out.iter().any(|col| col.len() != n)
                {
                    return None;
                }
                let columns: Vec<Cow<'_, [f64]>> = density::block::contiguous_columns(x, 0..d)?
                    .into_iter()
                    .map(Cow::Borrowed)
                    .collect();
                crate::gaussian::unwritten_diagonal_log_joints(
                    &columns,
                    means,
                    inverse_variances,
                    log_norms,
                    out,
                );
                Some(true)
            }
            ScoreFormula::FullGaussian {
                means,
                factors,
                log_norms,
            } => {
                let (n, d, k) = (x.nrows(), x.ncols(), log_norms.len());
                if means.len() != k * d
                    || factors.len() != k * d * d
                    || out.len() != k
                    || out.iter().any(|col| col.len() != n)
                {
                    return None;
                }
                density::mahalanobis::unwritten_gaussian_log_densities(
                    x, means, factors, log_norms, out,
                );
                Some(true)
            }
        }
    }

    /// Posteriors of the first rows of `x` straight from the scores, and the scores of the
    /// rest, into `out` (K columns of `x.nrows()` values not yet written): where
    /// [`unwritten_posteriors`] takes the formula and shape, `Some((first, accepted))`
    /// with rows `0..first` holding their posteriors (the bits of the scores then
    /// [`density::exp::softmax_rows_of_finite_scores`], which would have taken at least those
    /// rows), the rows from `first` on their scores as
    /// [`write_unwritten`](Self::write_unwritten) writes them, and `accepted` whether the
    /// formula accepted every value of those rows. Every value of every column is then written.
    /// `None`, writing nothing, otherwise.
    pub(crate) fn write_unwritten_posteriors(
        &self,
        x: MatRef<'_, f64>,
        mut out: Vec<&mut [MaybeUninit<f64>]>,
    ) -> Option<(usize, bool)> {
        let first = unwritten_posteriors(x, self, &mut out)?;
        let n = x.nrows();
        if first == n {
            return Some((n, true));
        }
        let rest: Vec<&mut [MaybeUninit<f64>]> =
            out.into_iter().map(|col| &mut col[first..]).collect();
        // The kernel took the shape, so the scores kernel takes its rows (the same checks).
        let accepted = self.write_unwritten(x.subrows(first, n - first), rest)?;
        Some((first, accepted))
    }

    /// Gives NaN scores to every row of `x` holding a value the formula does not accept.
    pub(crate) fn mark_rejected_rows(&self, x: MatRef<'_, f64>, out: MatMut<'_, f64>) {
        if let ScoreFormula::Linear(linear) = self {
            mark_rejected_rows(x, linear.features, out);
        }
    }
}
