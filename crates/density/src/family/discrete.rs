//! Discrete families: Bernoulli vectors, categorical, multinomial and Poisson.
//!
//! Their statistics are plain weighted sums (`WeightedSums`), which merge by exact addition.
//! Estimates optionally use Lidstone smoothing, `p = (count + α) / (total + α m)`.

use super::{ExponentialFamily, MleOptions, check_observation, check_weight};
use crate::numerics::ln_factorial;
use crate::regularize::lidstone;
use crate::stats::Mergeable;
use crate::{DensityError, Result};

/// Total weight and per-coordinate weighted sums, Σw and Σw·x_j.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct WeightedSums {
    weight: f64,
    sums: Vec<f64>,
}

impl WeightedSums {
    /// Zero statistics with `len` coordinates.
    pub fn new(len: usize) -> Self {
        Self {
            weight: 0.0,
            sums: vec![0.0; len],
        }
    }
    /// Σ w.
    pub fn weight(&self) -> f64 {
        self.weight
    }
    /// Σ w x_j for each coordinate j.
    pub fn sums(&self) -> &[f64] {
        &self.sums
    }
    /// Adds `w · x` (no validation: callers check the support).
    pub fn add(&mut self, x: &[f64], w: f64) {
        self.weight += w;
        for (s, v) in self.sums.iter_mut().zip(x) {
            *s += w * v;
        }
    }
    /// Adds weight `w` to coordinate `j` only (categorical observations).
    pub fn add_one(&mut self, j: usize, w: f64) {
        self.weight += w;
        self.sums[j] += w;
    }
}

impl Mergeable for WeightedSums {
    fn merge(&mut self, other: &Self) {
        self.weight += other.weight;
        for (a, b) in self.sums.iter_mut().zip(&other.sums) {
            *a += b;
        }
    }
}

fn check_probabilities(what: &'static str, p: &[f64], normalised: bool) -> Result<()> {
    for (index, &value) in p.iter().enumerate() {
        if !value.is_finite() {
            return Err(DensityError::NotFinite { what, index, value });
        }
        if value <= 0.0 || value >= 1.0 && !(normalised && p.len() == 1 && value == 1.0) {
            return Err(DensityError::OutOfRange {
                what,
                rule: "strictly between 0 and 1",
                value,
            });
        }
    }
    if normalised {
        let sum: f64 = p.iter().sum();
        if (sum - 1.0).abs() > 1e-9 {
            return Err(DensityError::NotNormalised { what, sum });
        }
    }
    Ok(())
}

fn degenerate(family: &'static str) -> DensityError {
    DensityError::DegenerateEstimate {
        family,
        reason: "an estimated probability is 0 or 1; use a pseudo-count (alpha) > 0".into(),
    }
}

fn is_count(v: f64) -> bool {
    v >= 0.0 && v.is_finite() && v.fract() == 0.0
}

/// Independent bits x_j ∈ {0, 1} with P(x_j = 1) = p_j.
/// T(x) = x, η_j = logit p_j, A = Σ −ln(1 − p_j), h = 1.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Bernoulli {
    probs: Vec<f64>,
}

impl Bernoulli {
    /// Each p_j strictly between 0 and 1.
    pub fn new(probs: Vec<f64>) -> Result<Self> {
        check_probabilities("Bernoulli probability", &probs, false)?;
        Ok(Self { probs })
    }
    /// P(x_j = 1).
    pub fn probs(&self) -> &[f64] {
        &self.probs
    }
}

impl ExponentialFamily for Bernoulli {
    type Stats = WeightedSums;
    const NAME: &'static str = "Bernoulli";

    fn dim(&self) -> usize {
        self.probs.len()
    }
    fn natural_params(&self) -> Vec<f64> {
        self.probs.iter().map(|p| (p / (1.0 - p)).ln()).collect()
    }
    fn sufficient_statistic(&self, x: &[f64]) -> Vec<f64> {
        x.to_vec()
    }
    fn log_partition(&self) -> f64 {
        self.probs.iter().map(|p| -(-p).ln_1p()).sum()
    }
    fn log_base_measure(&self, x: &[f64]) -> f64 {
        if x.iter().all(|v| *v == 0.0 || *v == 1.0) {
            0.0
        } else {
            f64::NEG_INFINITY
        }
    }
    fn log_pdf(&self, x: &[f64]) -> Result<f64> {
        check_observation(Self::NAME, self.dim(), x)?;
        let mut acc = 0.0;
        for (v, p) in x.iter().zip(&self.probs) {
            acc += match *v {
                1.0 => p.ln(),
                0.0 => (-p).ln_1p(),
                _ => return Ok(f64::NEG_INFINITY),
            };
        }
        Ok(acc)
    }
    fn empty_stats(&self) -> Self::Stats {
        WeightedSums::new(self.dim())
    }
    fn accumulate(stats: &mut Self::Stats, x: &[f64], w: f64) -> Result<()> {
        check_observation(Self::NAME, stats.sums.len(), x)?;
        check_weight(w)?;
        if let Some((index, &value)) = x.iter().enumerate().find(|(_, v)| **v != 0.0 && **v != 1.0)
        {
            return Err(DensityError::OutsideSupport {
                family: Self::NAME,
                index,
                value,
                rule: "x in {0, 1}",
            });
        }
        stats.add(x, w);
        Ok(())
    }
    fn mle(stats: &Self::Stats, options: &MleOptions) -> Result<Self> {
        if stats.weight <= 0.0 && options.pseudo_count <= 0.0 {
            return Err(DensityError::ZeroWeight { what: Self::NAME });
        }
        let a = options.pseudo_count;
        let probs: Vec<f64> = stats
            .sums
            .iter()
            .map(|s| (s + a) / (stats.weight + 2.0 * a))
            .collect();
        Bernoulli::new(probs).map_err(|_| degenerate(Self::NAME))
    }
}

/// One draw from m categories, x ∈ {0, …, m−1}, P(x = c) = p_c.
/// Over-complete form: T(x) = one-hot(x), η_c = ln p_c, A = 0, h = 1.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Categorical {
    probs: Vec<f64>,
}

impl Categorical {
    /// p_c > 0 summing to 1.
    pub fn new(probs: Vec<f64>) -> Result<Self> {
        if probs.is_empty() {
            return Err(DensityError::DimensionMismatch {
                what: "categories",
                expected: 1,
                got: 0,
            });
        }
        check_probabilities("category probability", &probs, true)?;
        Ok(Self { probs })
    }
    /// Category probabilities.
    pub fn probs(&self) -> &[f64] {
        &self.probs
    }
    fn index(&self, x: f64) -> Option<usize> {
        (is_count(x) && (x as usize) < self.probs.len()).then_some(x as usize)
    }
}

impl ExponentialFamily for Categorical {
    type Stats = WeightedSums;
    const NAME: &'static str = "categorical";

    fn dim(&self) -> usize {
        1
    }
    fn natural_params(&self) -> Vec<f64> {
        self.probs.iter().map(|p| p.ln()).collect()
    }
    fn sufficient_statistic(&self, x: &[f64]) -> Vec<f64> {
        let mut t = vec![0.0; self.probs.len()];
        if let Some(c) = self.index(x[0]) {
            t[c] = 1.0;
        }
        t
    }
    fn log_partition(&self) -> f64 {
        0.0
    }
    fn log_base_measure(&self, x: &[f64]) -> f64 {
        if self.index(x[0]).is_some() {
            0.0
        } else {
            f64::NEG_INFINITY
        }
    }
    fn log_pdf(&self, x: &[f64]) -> Result<f64> {
        check_observation(Self::NAME, 1, x)?;
        Ok(self
            .index(x[0])
            .map_or(f64::NEG_INFINITY, |c| self.probs[c].ln()))
    }
    fn empty_stats(&self) -> Self::Stats {
        WeightedSums::new(self.probs.len())
    }
    fn accumulate(stats: &mut Self::Stats, x: &[f64], w: f64) -> Result<()> {
        check_observation(Self::NAME, 1, x)?;
        check_weight(w)?;
        let m = stats.sums.len();
        if !(is_count(x[0]) && (x[0] as usize) < m) {
            return Err(DensityError::OutsideSupport {
                family: Self::NAME,
                index: 0,
                value: x[0],
                rule: "an integer category in 0..m",
            });
        }
        stats.add_one(x[0] as usize, w);
        Ok(())
    }
    fn mle(stats: &Self::Stats, options: &MleOptions) -> Result<Self> {
        if stats.weight <= 0.0 && options.pseudo_count <= 0.0 {
            return Err(DensityError::ZeroWeight { what: Self::NAME });
        }
        let probs = lidstone(&stats.sums, options.pseudo_count);
        Categorical::new(probs).map_err(|_| degenerate(Self::NAME))
    }
}

/// Count vectors x ∈ ℕ^m with n = Σ x_j trials: ln p(x) = ln n! − Σ ln x_j! + Σ x_j ln p_j.
/// T(x) = x, η_j = ln p_j, A = 0, ln h(x) = ln n! − Σ ln x_j!.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Multinomial {
    probs: Vec<f64>,
}

impl Multinomial {
    /// p_j > 0 summing to 1.
    pub fn new(probs: Vec<f64>) -> Result<Self> {
        if probs.is_empty() {
            return Err(DensityError::DimensionMismatch {
                what: "multinomial categories",
                expected: 1,
                got: 0,
            });
        }
        check_probabilities("multinomial probability", &probs, true)?;
        Ok(Self { probs })
    }
    /// Category probabilities.
    pub fn probs(&self) -> &[f64] {
        &self.probs
    }
}

impl ExponentialFamily for Multinomial {
    type Stats = WeightedSums;
    const NAME: &'static str = "multinomial";

    fn dim(&self) -> usize {
        self.probs.len()
    }
    fn natural_params(&self) -> Vec<f64> {
        self.probs.iter().map(|p| p.ln()).collect()
    }
    fn sufficient_statistic(&self, x: &[f64]) -> Vec<f64> {
        x.to_vec()
    }
    fn log_partition(&self) -> f64 {
        0.0
    }
    fn log_base_measure(&self, x: &[f64]) -> f64 {
        if !x.iter().all(|v| is_count(*v)) {
            return f64::NEG_INFINITY;
        }
        let n: f64 = x.iter().sum();
        ln_factorial(n) - x.iter().map(|v| ln_factorial(*v)).sum::<f64>()
    }
    fn log_pdf(&self, x: &[f64]) -> Result<f64> {
        check_observation(Self::NAME, self.dim(), x)?;
        if !x.iter().all(|v| is_count(*v)) {
            return Ok(f64::NEG_INFINITY);
        }
        let n: f64 = x.iter().sum();
        let mut acc = ln_factorial(n);
        for (v, p) in x.iter().zip(&self.probs) {
            acc += v * p.ln() - ln_factorial(*v);
        }
        Ok(acc)
    }
    fn empty_stats(&self) -> Self::Stats {
        WeightedSums::new(self.dim())
    }
    fn accumulate(stats: &mut Self::Stats, x: &[f64], w: f64) -> Result<()> {
        check_observation(Self::NAME, stats.sums.len(), x)?;
        check_weight(w)?;
        if let Some((index, &value)) = x.iter().enumerate().find(|(_, v)| !is_count(**v)) {
            return Err(DensityError::OutsideSupport {
                family: Self::NAME,
                index,
                value,
                rule: "a non-negative integer count",
            });
        }
        stats.add(x, w);
        Ok(())
    }
    fn mle(stats: &Self::Stats, options: &MleOptions) -> Result<Self> {
        let total: f64 = stats.sums.iter().sum();
        if total <= 0.0 && options.pseudo_count <= 0.0 {
            return Err(DensityError::ZeroWeight { what: Self::NAME });
        }
        let probs = lidstone(&stats.sums, options.pseudo_count);
        Multinomial::new(probs).map_err(|_| degenerate(Self::NAME))
    }
}

/// Poisson counts with mean λ: ln p(x) = x ln λ − λ − ln x!.
/// T(x) = x, η = ln λ, A = e^η, ln h = −ln x!.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Poisson {
    rate: f64,
}

impl Poisson {
    /// λ finite and > 0.
    pub fn new(rate: f64) -> Result<Self> {
        if !rate.is_finite() || rate <= 0.0 {
            return Err(DensityError::OutOfRange {
                what: "Poisson rate",
                rule: "finite and > 0",
                value: rate,
            });
        }
        Ok(Self { rate })
    }
    /// The mean λ.
    pub fn rate(&self) -> f64 {
        self.rate
    }
}

impl ExponentialFamily for Poisson {
    type Stats = WeightedSums;
    const NAME: &'static str = "Poisson";

    fn dim(&self) -> usize {
        1
    }
    fn natural_params(&self) -> Vec<f64> {
        vec![self.rate.ln()]
    }
    fn sufficient_statistic(&self, x: &[f64]) -> Vec<f64> {
        vec![x[0]]
    }
    fn log_partition(&self) -> f64 {
        self.rate
    }
    fn log_base_measure(&self, x: &[f64]) -> f64 {
        if is_count(x[0]) {
            -ln_factorial(x[0])
        } else {
            f64::NEG_INFINITY
        }
    }
    fn log_pdf(&self, x: &[f64]) -> Result<f64> {
        check_observation(Self::NAME, 1, x)?;
        Ok(if is_count(x[0]) {
            x[0] * self.rate.ln() - self.rate - ln_factorial(x[0])
        } else {
            f64::NEG_INFINITY
        })
    }
    fn empty_stats(&self) -> Self::Stats {
        WeightedSums::new(1)
    }
    fn accumulate(stats: &mut Self::Stats, x: &[f64], w: f64) -> Result<()> {
        check_observation(Self::NAME, 1, x)?;
        check_weight(w)?;
        if !is_count(x[0]) {
            return Err(DensityError::OutsideSupport {
                family: Self::NAME,
                index: 0,
                value: x[0],
                rule: "a non-negative integer count",
            });
        }
        stats.add(x, w);
        Ok(())
    }
    fn mle(stats: &Self::Stats, options: &MleOptions) -> Result<Self> {
        if stats.weight <= 0.0 {
            return Err(DensityError::ZeroWeight { what: Self::NAME });
        }
        let rate = (stats.sums[0] / stats.weight).max(options.variance_floor);
        if rate <= 0.0 {
            return Err(DensityError::DegenerateEstimate {
                family: Self::NAME,
                reason: "all counts are 0; set a variance floor".into(),
            });
        }
        Poisson::new(rate)
    }
}
