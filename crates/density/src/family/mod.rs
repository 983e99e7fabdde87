//! Exponential families: one trait that every density in this crate implements,
//!
//! ```text
//! ln p(x | η) = ηᵀ T(x) − A(η) + ln h(x)
//! ```
//!
//! with sufficient statistic T, natural parameters η, log-partition A and base measure h, and an
//! estimator from weighted, mergeable statistics. The trait lets the mixed naive Bayes model
//! (in `generative`) hold a different family per feature, and lets tests check each family's
//! direct formula against its exponential-family form.
//!
//! Observations are slices: univariate families take slices of length 1, the Bernoulli vector,
//! the multinomial and the multivariate normal take their natural length.

mod continuous;
mod discrete;

pub use continuous::{Exponential, Gaussian};
pub use discrete::{Bernoulli, Categorical, Multinomial, Poisson, WeightedSums};

use crate::stats::Mergeable;
use crate::{DensityError, Result};

/// Options for maximum-likelihood estimation.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct MleOptions {
    /// Lidstone pseudo-count α added to every discrete count (α = 1 is Laplace smoothing);
    /// ignored by continuous families.
    pub pseudo_count: f64,
    /// Added to every estimated variance (Gaussian) or used as a lower bound on the variance
    /// (Poisson λ, exponential 1/rate²); 0 means none.
    pub variance_floor: f64,
}

/// A family of densities in exponential-family form, with weighted maximum likelihood.
pub trait ExponentialFamily: Sized {
    /// Weighted summary of observations from which the estimate is computed.
    type Stats: Mergeable + Clone;

    /// A short name for messages.
    const NAME: &'static str;

    /// Length of one observation.
    fn dim(&self) -> usize;

    /// Natural parameters η.
    fn natural_params(&self) -> Vec<f64>;

    /// Sufficient statistic T(x) (same length as η). `x` must be in the support.
    fn sufficient_statistic(&self, x: &[f64]) -> Vec<f64>;

    /// Log-partition A(η).
    fn log_partition(&self) -> f64;

    /// ln h(x); `-inf` outside the support.
    fn log_base_measure(&self, x: &[f64]) -> f64;

    /// ln p(x) by the family's direct textbook formula; `-inf` outside the support, an error for
    /// an observation of the wrong length or a NaN.
    fn log_pdf(&self, x: &[f64]) -> Result<f64>;

    /// ln p(x) through the exponential-family form `ηᵀ T(x) − A(η) + ln h(x)`.
    fn log_pdf_natural(&self, x: &[f64]) -> Result<f64> {
        check_observation(Self::NAME, self.dim(), x)?;
        let lh = self.log_base_measure(x);
        if lh == f64::NEG_INFINITY {
            return Ok(lh);
        }
        let t = self.sufficient_statistic(x);
        Ok(crate::numerics::dot(&self.natural_params(), &t) - self.log_partition() + lh)
    }

    /// Empty statistics shaped for this family's observations.
    fn empty_stats(&self) -> Self::Stats;

    /// Adds observation `x` with weight `w ≥ 0`; an observation outside the support is an
    /// error.
    fn accumulate(stats: &mut Self::Stats, x: &[f64], w: f64) -> Result<()>;

    /// Maximum-likelihood (or, with a pseudo-count, smoothed) estimate from statistics.
    fn mle(stats: &Self::Stats, options: &MleOptions) -> Result<Self>;
}

/// Checks length and NaN of an observation.
pub(crate) fn check_observation(family: &'static str, dim: usize, x: &[f64]) -> Result<()> {
    if x.len() != dim {
        return Err(DensityError::DimensionMismatch {
            what: family,
            expected: dim,
            got: x.len(),
        });
    }
    if let Some((index, &value)) = x.iter().enumerate().find(|(_, v)| v.is_nan()) {
        return Err(DensityError::NotFinite {
            what: "observation",
            index,
            value,
        });
    }
    Ok(())
}

pub(crate) fn check_weight(w: f64) -> Result<()> {
    if !w.is_finite() || w < 0.0 {
        return Err(DensityError::OutOfRange {
            what: "weight",
            rule: "finite and >= 0",
            value: w,
        });
    }
    Ok(())
}

/// The multivariate normal in exponential-family form:
/// T(x) = (x, vec(x xᵀ)), η = (Σ⁻¹μ, −½ vec(Σ⁻¹)), A = ½ μᵀΣ⁻¹μ + ½ ln|Σ|, ln h = −(d/2) ln 2π.
/// The natural parameters need Σ⁻¹ itself; it is obtained by Cholesky solves and used only here.
impl ExponentialFamily for crate::MultivariateNormal {
    type Stats = crate::SufficientStats;
    const NAME: &'static str = "multivariate normal";

    fn dim(&self) -> usize {
        crate::MultivariateNormal::dim(self)
    }

    fn natural_params(&self) -> Vec<f64> {
        let d = self.dim();
        let l = self.cholesky();
        let mut precision = faer::Mat::<f64>::identity(d, d);
        crate::linalg::solve_lower_triangular_in_place(
            l.as_ref(),
            precision.as_mut(),
            faer::Par::Seq,
        );
        crate::linalg::solve_upper_triangular_in_place(
            l.transpose(),
            precision.as_mut(),
            faer::Par::Seq,
        );
        let mut eta: Vec<f64> = (0..d)
            .map(|i| (0..d).map(|j| precision[(i, j)] * self.mean()[j]).sum())
            .collect();
        for j in 0..d {
            for i in 0..d {
                eta.push(-0.5 * precision[(i, j)]);
            }
        }
        eta
    }

    fn sufficient_statistic(&self, x: &[f64]) -> Vec<f64> {
        let d = x.len();
        let mut t = x.to_vec();
        for j in 0..d {
            for i in 0..d {
                t.push(x[i] * x[j]);
            }
        }
        t
    }

    fn log_partition(&self) -> f64 {
        let d = self.dim();
        let eta = self.natural_params();
        let quad: f64 = crate::numerics::dot(&eta[..d], self.mean());
        0.5 * quad + 0.5 * self.log_det_covariance()
    }

    fn log_base_measure(&self, x: &[f64]) -> f64 {
        -0.5 * x.len() as f64 * (2.0 * std::f64::consts::PI).ln()
    }

    fn log_pdf(&self, x: &[f64]) -> Result<f64> {
        check_observation(Self::NAME, self.dim(), x)?;
        crate::MultivariateNormal::log_pdf(self, x)
    }

    fn empty_stats(&self) -> Self::Stats {
        crate::SufficientStats::new(self.dim(), crate::ScatterKind::Full)
    }

    fn accumulate(stats: &mut Self::Stats, x: &[f64], w: f64) -> Result<()> {
        check_observation(Self::NAME, stats.n_features(), x)?;
        check_weight(w)?;
        if let Some((index, &value)) = x.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            return Err(DensityError::NotFinite {
                what: "observation",
                index,
                value,
            });
        }
        stats.push(x, w);
        Ok(())
    }

    fn mle(stats: &Self::Stats, options: &MleOptions) -> Result<Self> {
        let mut cov = stats.covariance()?;
        for i in 0..stats.n_features() {
            cov[(i, i)] += options.variance_floor;
        }
        crate::MultivariateNormal::full(stats.mean().to_vec(), cov.as_ref())
    }
}

#[cfg(test)]
mod tests;
