//! Continuous univariate families: the Gaussian and the exponential distribution.

use super::{ExponentialFamily, MleOptions, check_observation, check_weight};
use crate::stats::{ScatterKind, SufficientStats};
use crate::{DensityError, Result};

const LN_2PI: f64 = 1.837_877_066_409_345_5;

/// Univariate normal N(μ, σ²).
/// T(x) = (x, x²), η = (μ/σ², −1/(2σ²)), A = μ²/(2σ²) + ½ ln σ², ln h = −½ ln 2π.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Gaussian {
    mean: f64,
    variance: f64,
}

impl Gaussian {
    /// N(mean, variance); mean finite, variance finite and > 0.
    pub fn new(mean: f64, variance: f64) -> Result<Self> {
        if !mean.is_finite() {
            return Err(DensityError::NotFinite {
                what: "mean",
                index: 0,
                value: mean,
            });
        }
        if !variance.is_finite() || variance <= 0.0 {
            return Err(DensityError::OutOfRange {
                what: "variance",
                rule: "finite and > 0",
                value: variance,
            });
        }
        Ok(Self { mean, variance })
    }

    /// The mean μ.
    pub fn mean(&self) -> f64 {
        self.mean
    }

    /// The variance σ².
    pub fn variance(&self) -> f64 {
        self.variance
    }
}

impl ExponentialFamily for Gaussian {
    type Stats = SufficientStats;
    const NAME: &'static str = "Gaussian";

    fn dim(&self) -> usize {
        1
    }
    fn natural_params(&self) -> Vec<f64> {
        vec![self.mean / self.variance, -0.5 / self.variance]
    }
    fn sufficient_statistic(&self, x: &[f64]) -> Vec<f64> {
        vec![x[0], x[0] * x[0]]
    }
    fn log_partition(&self) -> f64 {
        self.mean * self.mean / (2.0 * self.variance) + 0.5 * self.variance.ln()
    }
    fn log_base_measure(&self, x: &[f64]) -> f64 {
        if x[0].is_finite() {
            -0.5 * LN_2PI
        } else {
            f64::NEG_INFINITY
        }
    }
    fn log_pdf(&self, x: &[f64]) -> Result<f64> {
        check_observation(Self::NAME, 1, x)?;
        let z = x[0] - self.mean;
        Ok(-0.5 * (LN_2PI + self.variance.ln() + z * z / self.variance))
    }
    fn empty_stats(&self) -> Self::Stats {
        SufficientStats::new(1, ScatterKind::Diagonal)
    }
    fn accumulate(stats: &mut Self::Stats, x: &[f64], w: f64) -> Result<()> {
        check_observation(Self::NAME, 1, x)?;
        check_weight(w)?;
        if !x[0].is_finite() {
            return Err(DensityError::NotFinite {
                what: "observation",
                index: 0,
                value: x[0],
            });
        }
        stats.push(x, w);
        Ok(())
    }
    fn mle(stats: &Self::Stats, options: &MleOptions) -> Result<Self> {
        let var = stats.variances()?[0] + options.variance_floor;
        if var <= 0.0 {
            return Err(DensityError::DegenerateEstimate {
                family: Self::NAME,
                reason: "all observations are equal (zero variance); set a variance floor".into(),
            });
        }
        Gaussian::new(stats.mean()[0], var)
    }
}

/// Exponential distribution with rate λ on x ≥ 0.
/// T(x) = x, η = −λ, A = −ln λ, h = 1.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Exponential {
    rate: f64,
}

impl Exponential {
    /// Rate finite and > 0.
    pub fn new(rate: f64) -> Result<Self> {
        if !rate.is_finite() || rate <= 0.0 {
            return Err(DensityError::OutOfRange {
                what: "rate",
                rule: "finite and > 0",
                value: rate,
            });
        }
        Ok(Self { rate })
    }

    /// The rate λ.
    pub fn rate(&self) -> f64 {
        self.rate
    }
}

impl ExponentialFamily for Exponential {
    type Stats = super::WeightedSums;
    const NAME: &'static str = "exponential";

    fn dim(&self) -> usize {
        1
    }
    fn natural_params(&self) -> Vec<f64> {
        vec![-self.rate]
    }
    fn sufficient_statistic(&self, x: &[f64]) -> Vec<f64> {
        vec![x[0]]
    }
    fn log_partition(&self) -> f64 {
        -self.rate.ln()
    }
    fn log_base_measure(&self, x: &[f64]) -> f64 {
        if x[0] >= 0.0 && x[0].is_finite() {
            0.0
        } else {
            f64::NEG_INFINITY
        }
    }
    fn log_pdf(&self, x: &[f64]) -> Result<f64> {
        check_observation(Self::NAME, 1, x)?;
        Ok(if x[0] >= 0.0 && x[0].is_finite() {
            self.rate.ln() - self.rate * x[0]
        } else {
            f64::NEG_INFINITY
        })
    }
    fn empty_stats(&self) -> Self::Stats {
        super::WeightedSums::new(1)
    }
    fn accumulate(stats: &mut Self::Stats, x: &[f64], w: f64) -> Result<()> {
        check_observation(Self::NAME, 1, x)?;
        check_weight(w)?;
        if !(x[0] >= 0.0 && x[0].is_finite()) {
            return Err(DensityError::OutsideSupport {
                family: Self::NAME,
                index: 0,
                value: x[0],
                rule: "x >= 0",
            });
        }
        stats.add(x, w);
        Ok(())
    }
    fn mle(stats: &Self::Stats, options: &MleOptions) -> Result<Self> {
        if stats.weight() <= 0.0 {
            return Err(DensityError::ZeroWeight { what: Self::NAME });
        }
        let mean = stats.sums()[0] / stats.weight();
        // Variance of an exponential is mean²: floor the mean at √floor.
        let mean = mean.max(options.variance_floor.sqrt());
        if mean <= 0.0 {
            return Err(DensityError::DegenerateEstimate {
                family: Self::NAME,
                reason: "all observations are 0; set a variance floor".into(),
            });
        }
        Exponential::new(1.0 / mean)
    }
}
