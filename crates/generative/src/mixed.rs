//! Mixed naive Bayes: each feature has its own exponential family from `density` (Gaussian,
//! Bernoulli, Poisson, exponential or categorical), features independent given the class:
//!
//! ```text
//! ln p(x, y = k) = ln π_k + Σ_j ln p_j(x_j | θ_kj)
//! ```
//!
//! Each (class, feature) cell is estimated by the family's weighted maximum likelihood
//! (`ExponentialFamily::mle`) from mergeable statistics, with the pseudo-count `alpha` for the
//! discrete families and a variance floor (as Gaussian naive Bayes' `var_smoothing`).

use faer::{MatMut, MatRef};

use density::family::{ExponentialFamily, MleOptions, WeightedSums};
use density::stats::{Mergeable, ScatterKind, SufficientStats};
use density::{Bernoulli, Categorical, Exponential, Gaussian, Poisson};

use crate::model::{
    Checked, GenerativeClassifier, HyperParams, Priors, WeightedFit, WeightedRows,
    parameter_length, prior_parameters,
};
use crate::parallel::{check_chunk, check_sets, map_chunks};
use crate::{GenerativeError, Result};

/// The family of one feature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum FeatureKind {
    Gaussian,
    Bernoulli,
    Poisson,
    Exponential,
    /// Integer categories 0, 1, …; their number is one more than the largest seen in training.
    Categorical,
}

impl FeatureKind {
    fn support_rule(self) -> &'static str {
        match self {
            FeatureKind::Gaussian => "any finite value",
            FeatureKind::Bernoulli => "0 or 1",
            FeatureKind::Poisson => "a non-negative integer count",
            FeatureKind::Exponential => "a value >= 0",
            FeatureKind::Categorical => "an integer category from 0 to 2^20 - 1",
        }
    }
    fn in_support(self, v: f64) -> bool {
        match self {
            FeatureKind::Gaussian => v.is_finite(),
            FeatureKind::Bernoulli => v == 0.0 || v == 1.0,
            FeatureKind::Poisson => v >= 0.0 && v.fract() == 0.0 && v.is_finite(),
            // Below the limit of categorical naive Bayes, for the same reason: the counts are
            // a table as long as the largest category.
            FeatureKind::Categorical => {
                v >= 0.0 && v.fract() == 0.0 && v < crate::naive_bayes::MAX_CATEGORIES as f64
            }
            FeatureKind::Exponential => v >= 0.0 && v.is_finite(),
        }
    }
}

/// Hyper-parameters of mixed naive Bayes.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MixedNbParams {
    /// One family per feature (required).
    pub features: Vec<FeatureKind>,
    /// Pseudo-count for Bernoulli and categorical features (default 1).
    pub alpha: f64,
    /// Variance floor = var_smoothing × the largest variance of any feature (default 1e-9).
    pub var_smoothing: f64,
    /// Class priors (default estimated).
    pub priors: Priors,
}

impl MixedNbParams {
    /// Defaults for the given feature families.
    pub fn new(features: Vec<FeatureKind>) -> Self {
        Self {
            features,
            alpha: 1.0,
            var_smoothing: 1e-9,
            priors: Priors::Estimated,
        }
    }
}

impl HyperParams for MixedNbParams {
    fn check_params(&self) -> Result<()> {
        if self.features.is_empty() {
            return Err(GenerativeError::InvalidParameter {
                name: "features",
                rule: "non-empty",
                value: "[]".into(),
            });
        }
        if !self.alpha.is_finite() || self.alpha < 0.0 {
            return Err(GenerativeError::InvalidParameter {
                name: "alpha",
                rule: ">= 0",
                value: self.alpha.to_string(),
            });
        }
        if !self.var_smoothing.is_finite() || self.var_smoothing < 0.0 {
            return Err(GenerativeError::InvalidParameter {
                name: "var_smoothing",
                rule: ">= 0",
                value: self.var_smoothing.to_string(),
            });
        }
        self.priors.check()
    }
}

/// A fitted per-(class, feature) density.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum FeatureDensity {
    Gaussian(Gaussian),
    Bernoulli(Bernoulli),
    Poisson(Poisson),
    Exponential(Exponential),
    Categorical(Categorical),
}

impl FeatureDensity {
    fn log_pdf(&self, v: f64) -> f64 {
        let x = [v];
        let r = match self {
            FeatureDensity::Gaussian(f) => f.log_pdf(&x),
            FeatureDensity::Bernoulli(f) => f.log_pdf(&x),
            FeatureDensity::Poisson(f) => f.log_pdf(&x),
            FeatureDensity::Exponential(f) => f.log_pdf(&x),
            FeatureDensity::Categorical(f) => f.log_pdf(&x),
        };
        r.unwrap_or(f64::NEG_INFINITY)
    }
    fn n_parameters(&self) -> usize {
        match self {
            FeatureDensity::Gaussian(_) => 2,
            FeatureDensity::Categorical(c) => c.probs().len() - 1,
            _ => 1,
        }
    }
}

#[derive(Debug, Clone)]
enum CellStats {
    Moments(SufficientStats),
    Sums(WeightedSums),
}

impl CellStats {
    fn new(kind: FeatureKind, n_categories: usize) -> Self {
        match kind {
            FeatureKind::Gaussian => {
                CellStats::Moments(SufficientStats::new(1, ScatterKind::Diagonal))
            }
            FeatureKind::Categorical => CellStats::Sums(WeightedSums::new(n_categories)),
            _ => CellStats::Sums(WeightedSums::new(1)),
        }
    }
    fn add(&mut self, kind: FeatureKind, v: f64, w: f64) -> density::Result<()> {
        let x = [v];
        match (self, kind) {
            (CellStats::Moments(s), _) => Gaussian::accumulate(s, &x, w),
            (CellStats::Sums(s), FeatureKind::Bernoulli) => Bernoulli::accumulate(s, &x, w),
            (CellStats::Sums(s), FeatureKind::Poisson) => Poisson::accumulate(s, &x, w),
            (CellStats::Sums(s), FeatureKind::Exponential) => Exponential::accumulate(s, &x, w),
            (CellStats::Sums(s), _) => Categorical::accumulate(s, &x, w),
        }
    }
    fn merge(&mut self, other: &Self) {
        match (self, other) {
            (CellStats::Moments(a), CellStats::Moments(b)) => a.merge(b),
            (CellStats::Sums(a), CellStats::Sums(b)) => a.merge(b),
            _ => {}
        }
    }
}

/// Fitted mixed naive Bayes.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MixedNaiveBayes {
    features: Vec<FeatureKind>,
    n_classes: usize,
    log_priors: Vec<f64>,
    class_weights: Vec<f64>,
    /// K × d row-major.
    cells: Vec<FeatureDensity>,
    priors_fixed: bool,
}

impl WeightedFit for Checked<MixedNbParams> {
    type Model = MixedNaiveBayes;
    fn fit_sets(&self, sets: &[WeightedRows<'_>]) -> Result<MixedNaiveBayes> {
        let (d, k) = check_sets(sets)?;
        if d != self.features.len() {
            return Err(GenerativeError::DimensionMismatch {
                what: "feature families vs columns of x",
                expected: self.features.len(),
                got: d,
            });
        }
        let kinds = &self.features;
        let maxima = map_chunks(sets, |chunk| {
            check_chunk(&chunk)?;
            check_support(kinds, chunk.x, chunk.first_row)?;
            // The largest category of each categorical feature (checked below 2^20 above);
            // the other families keep one sum.
            Ok((0..d)
                .map(|j| match kinds[j] {
                    FeatureKind::Categorical => (0..chunk.x.nrows())
                        .map(|i| chunk.x[(i, j)])
                        .fold(0.0, f64::max),
                    _ => 0.0,
                })
                .collect::<Vec<f64>>())
        })?;
        let n_cat: Vec<usize> = (0..d)
            .map(|j| maxima.iter().map(|m| m[j]).fold(0.0, f64::max) as usize + 1)
            .collect();
        let empty = || -> Vec<CellStats> {
            (0..k)
                .flat_map(|_| (0..d).map(|j| CellStats::new(kinds[j], n_cat[j])))
                .collect()
        };
        let parts = map_chunks(sets, |chunk| {
            let mut cells = empty();
            let mut weights = vec![0.0; k];
            for i in 0..chunk.x.nrows() {
                for c in 0..k {
                    let w = chunk.resp[(i, c)];
                    weights[c] += w;
                    for j in 0..d {
                        cells[c * d + j].add(kinds[j], chunk.x[(i, j)], w)?;
                    }
                }
            }
            Ok((weights, cells))
        })?;
        let mut cells = empty();
        let mut class_weights = vec![0.0; k];
        for (w, c) in &parts {
            class_weights.iter_mut().zip(w).for_each(|(a, b)| *a += b);
            cells.iter_mut().zip(c).for_each(|(a, b)| a.merge(b));
        }
        if let Some(c) = class_weights.iter().position(|w| *w <= 0.0) {
            return Err(GenerativeError::EmptyClass { class: c });
        }
        // Sums or squares of finite values that overflowed f64, named by class and feature
        // (an infinite variance would otherwise raise the floor below to infinity for every
        // cell, and an infinite sum fail its family's range check without either name).
        let overflow = cells.iter().enumerate().find_map(|(idx, cell)| {
            let found = match cell {
                CellStats::Moments(s) => s.first_overflow().map(|(statistic, _)| statistic),
                CellStats::Sums(s) => s.sums().iter().any(|v| !v.is_finite()).then_some("sum"),
            };
            found.map(|statistic| GenerativeError::StatisticOverflow {
                statistic,
                class: Some(idx / d),
                feature: Some(idx % d),
            })
        });
        if let Some(overflow) = overflow {
            return Err(overflow);
        }
        // Variance floor from the largest per-class Gaussian variance, as GaussianNB does over X.
        let max_var = cells
            .iter()
            .filter_map(|c| match c {
                CellStats::Moments(s) => s.variances().ok().map(|v| v[0]),
                CellStats::Sums(_) => None,
            })
            .fold(0.0, f64::max);
        let options = MleOptions {
            pseudo_count: self.alpha,
            variance_floor: self.var_smoothing * max_var.max(1.0),
        };
        let mut fitted = Vec::with_capacity(k * d);
        for (idx, cell) in cells.iter().enumerate() {
            let (c, j) = (idx / d, idx % d);
            let f = match (cell, kinds[j]) {
                (CellStats::Moments(s), _) => {
                    Gaussian::mle(s, &options).map(FeatureDensity::Gaussian)
                }
                (CellStats::Sums(s), FeatureKind::Bernoulli) => {
                    Bernoulli::mle(s, &options).map(FeatureDensity::Bernoulli)
                }
                (CellStats::Sums(s), FeatureKind::Poisson) => {
                    Poisson::mle(s, &options).map(FeatureDensity::Poisson)
                }
                (CellStats::Sums(s), FeatureKind::Exponential) => {
                    Exponential::mle(s, &options).map(FeatureDensity::Exponential)
                }
                (CellStats::Sums(s), _) => {
                    Categorical::mle(s, &options).map(FeatureDensity::Categorical)
                }
            };
            fitted.push(f.map_err(|e| match e {
                density::DensityError::DegenerateEstimate { .. }
                    if kinds[j] == FeatureKind::Gaussian =>
                {
                    GenerativeError::ZeroVariance {
                        class: c,
                        feature: j,
                    }
                }
                other => GenerativeError::Density(other),
            })?);
        }
        Ok(MixedNaiveBayes {
            features: kinds.clone(),
            n_classes: k,
            log_priors: self.priors.log_priors(&class_weights)?,
            class_weights,
            cells: fitted,
            priors_fixed: matches!(self.priors, Priors::Fixed(_)),
        })
    }
}

fn check_support(kinds: &[FeatureKind], x: MatRef<'_, f64>, first_row: usize) -> Result<()> {
    crate::parallel::check_finite_rows(x, first_row)?;
    for i in 0..x.nrows() {
        for (j, kind) in kinds.iter().enumerate() {
            if !kind.in_support(x[(i, j)]) {
                return Err(GenerativeError::InvalidInput {
                    row: first_row + i,
                    col: j,
                    value: x[(i, j)],
                    rule: kind.support_rule(),
                });
            }
        }
    }
    Ok(())
}

impl MixedNaiveBayes {
    /// The fitted density of feature j in class k.
    pub fn cell(&self, class: usize, feature: usize) -> &FeatureDensity {
        &self.cells[class * self.features.len() + feature]
    }
}

impl GenerativeClassifier for MixedNaiveBayes {
    fn n_classes(&self) -> usize {
        self.n_classes
    }
    fn n_features(&self) -> usize {
        self.features.len()
    }
    fn n_parameters(&self) -> usize {
        self.cells
            .iter()
            .map(FeatureDensity::n_parameters)
            .sum::<usize>()
            + prior_parameters(self.n_classes, self.priors_fixed)
    }
    fn validate(&self) -> Result<()> {
        let d = self.features.len();
        let cells = parameter_length("feature densities", d, &[self.n_classes, d])?;
        if self.cells.len() != cells {
            return Err(GenerativeError::DimensionMismatch {
                what: "feature densities",
                expected: cells,
                got: self.cells.len(),
            });
        }
        if self.log_priors.len() != self.n_classes {
            return Err(GenerativeError::DimensionMismatch {
                what: "log_priors",
                expected: self.n_classes,
                got: self.log_priors.len(),
            });
        }
        if self.n_classes < 2 {
            return Err(GenerativeError::TooFewClasses {
                n_classes: self.n_classes,
            });
        }
        Ok(())
    }
    fn check_input(&self, x: MatRef<'_, f64>) -> Result<()> {
        check_support(&self.features, x, 0)
    }
    fn log_joint_chunk(&self, x: MatRef<'_, f64>, mut out: MatMut<'_, f64>) {
        let d = self.features.len();
        for c in 0..self.n_classes {
            for i in 0..x.nrows() {
                let mut acc = self.log_priors[c];
                for j in 0..d {
                    acc += self.cells[c * d + j].log_pdf(x[(i, j)]);
                }
                // A category never seen in training has probability 0 in every class smoothed
                // with α = 0; keep the joint finite so posteriors stay defined.
                out[(i, c)] = acc.max(-f64::MAX);
            }
        }
    }
}
