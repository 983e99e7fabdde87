//! The two traits every classifier implements, and the types they share.
//!
//! [`WeightedFit`] is the validated hyper-parameters of a model; it fits from one or more sets of
//! rows, each with an n × K responsibility matrix whose row i says how much sample i counts for
//! class k. Taking *several* sets lets semi-supervised EM pass labeled rows (one-hot) and
//! unlabeled rows (λ-scaled posteriors) without copying or concatenating the data.
//!
//! [`GenerativeClassifier`] is the fitted model. Its one kernel is `log_joint_chunk`,
//! `log p(x_i, y = k)`; the provided methods derive posteriors, predictions and the marginal
//! log-likelihood from it, in parallel over fixed row chunks.

use faer::{Mat, MatMut, MatRef};
use rayon::prelude::*;

use crate::parallel::{CHUNK_ROWS, check_finite_rows};
use crate::{GenerativeError, Result};
use density::numerics::{log_normalize_in_place, log_sum_exp};

/// Class priors: estimated as the classes' shares of the total weight, or fixed by the user.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub enum Priors {
    /// π_k = N_k / N (maximum likelihood).
    #[default]
    Estimated,
    /// User-given π_k (positive, summing to 1, one per class).
    Fixed(Vec<f64>),
}

impl Priors {
    /// Validates fixed priors (positive, finite, summing to 1).
    pub fn check(&self) -> Result<()> {
        if let Priors::Fixed(p) = self {
            if p.iter().any(|v| !v.is_finite() || *v <= 0.0) {
                return Err(GenerativeError::InvalidParameter {
                    name: "priors",
                    rule: "positive and finite",
                    value: format!("{p:?}"),
                });
            }
            let sum: f64 = p.iter().sum();
            if (sum - 1.0).abs() > 1e-6 {
                return Err(GenerativeError::InvalidParameter {
                    name: "priors",
                    rule: "summing to 1",
                    value: format!("{p:?} (sum {sum})"),
                });
            }
        }
        Ok(())
    }

    /// ln π_k from the classes' total weights.
    pub fn log_priors(&self, class_weights: &[f64]) -> Result<Vec<f64>> {
        match self {
            Priors::Estimated => {
                let total: f64 = class_weights.iter().sum();
                Ok(class_weights.iter().map(|w| (w / total).ln()).collect())
            }
            Priors::Fixed(p) => {
                if p.len() != class_weights.len() {
                    return Err(GenerativeError::DimensionMismatch {
                        what: "priors vs classes",
                        expected: class_weights.len(),
                        got: p.len(),
                    });
                }
                Ok(p.iter().map(|v| v.ln()).collect())
            }
        }
    }
}

/// Free parameters of the class priors: K − 1 when estimated, none when fixed.
pub fn prior_parameters(n_classes: usize, fixed: bool) -> usize {
    if fixed {
        0
    } else {
        n_classes.saturating_sub(1)
    }
}

/// One set of rows with its responsibilities: `x` is n × d, `resp` is n × K with non-negative
/// rows summing to each sample's weight.
#[derive(Debug, Clone, Copy)]
pub struct WeightedRows<'a> {
    pub x: MatRef<'a, f64>,
    pub resp: MatRef<'a, f64>,
}

/// A one-hot responsibility matrix (n × K) for labels in `0..n_classes`.
pub fn one_hot(labels: &[usize], n_classes: usize) -> Result<Mat<f64>> {
    if let Some((row, &l)) = labels.iter().enumerate().find(|(_, l)| **l >= n_classes) {
        return Err(GenerativeError::InvalidParameter {
            name: "labels",
            rule: "in 0..n_classes",
            value: format!("{l} at row {row} (n_classes = {n_classes})"),
        });
    }
    let mut r = Mat::zeros(labels.len(), n_classes);
    for (i, &l) in labels.iter().enumerate() {
        r[(i, l)] = 1.0;
    }
    Ok(r)
}

/// A fitted generative classifier.
pub trait GenerativeClassifier: Send + Sync {
    /// Number of classes K.
    fn n_classes(&self) -> usize;

    /// Number of features d.
    fn n_features(&self) -> usize;

    /// Number of free parameters (for BIC).
    fn n_parameters(&self) -> usize;

    /// Checks that the model's own parameters are consistent (used after deserialising).
    fn validate(&self) -> Result<()>;

    /// Checks that `x` is in the model's domain (finite by default; naive Bayes models also check
    /// counts and categories). Errors name the row and column.
    fn check_input(&self, x: MatRef<'_, f64>) -> Result<()> {
        check_finite_rows(x, 0)
    }

    /// `out[(i, k)] = ln p(x_i, y = k)` for a chunk of already-checked rows, sequentially.
    fn log_joint_chunk(&self, x: MatRef<'_, f64>, out: MatMut<'_, f64>);

    /// A penalty added to the log-likelihood by the model's smoothing, as a log prior density
    /// (e.g. Σ α ln θ for Lidstone smoothing), so that an EM objective that includes it never
    /// decreases. Zero for unsmoothed models.
    fn log_prior_penalty(&self) -> f64 {
        0.0
    }

    /// ln p(x_i, y = k) for every row and class (n × K), in parallel over fixed chunks.
    fn log_joint(&self, x: MatRef<'_, f64>) -> Result<Mat<f64>> {
        self.log_joint_then(x, Posterior::Joint)
    }

    /// Shared body of `log_joint`, `predict_log_proba` and `predict_proba`: the joint of each
    /// fixed chunk, then (optionally) its normalisation, in the same parallel pass.
    #[doc(hidden)]
    fn log_joint_then(&self, x: MatRef<'_, f64>, what: Posterior) -> Result<Mat<f64>> {
        let mut out = Mat::zeros(x.nrows(), self.n_classes());
        self.log_joint_into(x, out.as_mut(), what)?;
        Ok(out)
    }

    /// As `log_joint` (or the posteriors, by `what`), written into `out` (n × K) so that a loop
    /// such as EM can reuse one buffer across iterations.
    fn log_joint_into(
        &self,
        x: MatRef<'_, f64>,
        out: MatMut<'_, f64>,
        what: Posterior,
    ) -> Result<()> {
        if x.ncols() != self.n_features() {
            return Err(GenerativeError::DimensionMismatch {
                what: "columns of x vs model features",
                expected: self.n_features(),
                got: x.ncols(),
            });
        }
        if out.nrows() != x.nrows() || out.ncols() != self.n_classes() {
            return Err(GenerativeError::DimensionMismatch {
                what: "output rows × classes",
                expected: x.nrows() * self.n_classes(),
                got: out.nrows() * out.ncols(),
            });
        }
        self.check_input(x)?;
        out.par_row_chunks_mut(CHUNK_ROWS)
            .enumerate()
            .for_each(|(c, mut chunk)| {
                let r0 = c * CHUNK_ROWS;
                self.log_joint_chunk(x.subrows(r0, chunk.nrows()), chunk.as_mut());
                if what != Posterior::Joint {
                    normalize_rows(chunk.as_mut());
                }
                if what == Posterior::Probability {
                    for j in 0..chunk.ncols() {
                        for i in 0..chunk.nrows() {
                            chunk[(i, j)] = chunk[(i, j)].exp();
                        }
                    }
                }
            });
        Ok(())
    }

    /// ln p(y = k | x_i) (n × K). Never NaN: a row whose joint is −∞ for every class is uniform.
    fn predict_log_proba(&self, x: MatRef<'_, f64>) -> Result<Mat<f64>> {
        self.log_joint_then(x, Posterior::LogProbability)
    }

    /// p(y = k | x_i) (n × K), rows summing to 1.
    fn predict_proba(&self, x: MatRef<'_, f64>) -> Result<Mat<f64>> {
        self.log_joint_then(x, Posterior::Probability)
    }

    /// argmax_k p(y = k | x_i); ties go to the lowest class index.
    fn predict(&self, x: MatRef<'_, f64>) -> Result<Vec<usize>> {
        let lj = self.log_joint(x)?;
        Ok(argmax_rows(lj.as_ref()))
    }

    /// Marginal log-likelihood Σ_i ln Σ_k p(x_i, k).
    fn log_likelihood(&self, x: MatRef<'_, f64>) -> Result<f64> {
        let lj = self.log_joint(x)?;
        Ok(row_log_sum_exp(lj.as_ref()).iter().sum())
    }
}

/// What [`GenerativeClassifier::log_joint_into`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Posterior {
    /// ln p(x, y = k)
    Joint,
    /// ln p(y = k | x)
    LogProbability,
    /// p(y = k | x)
    Probability,
}

/// Turns every row of log joints into log posteriors, in place.
pub fn normalize_rows(mut m: MatMut<'_, f64>) {
    let k = m.ncols();
    let mut row = vec![0.0; k];
    for i in 0..m.nrows() {
        for j in 0..k {
            row[j] = m[(i, j)];
        }
        log_normalize_in_place(&mut row);
        for j in 0..k {
            m[(i, j)] = row[j];
        }
    }
}

/// ln Σ_k exp(m[i, k]) for every row.
pub fn row_log_sum_exp(m: MatRef<'_, f64>) -> Vec<f64> {
    let k = m.ncols();
    let mut row = vec![0.0; k];
    (0..m.nrows())
        .map(|i| {
            for j in 0..k {
                row[j] = m[(i, j)];
            }
            log_sum_exp(&row)
        })
        .collect()
}

/// Index of the largest entry of each row (first on ties).
pub fn argmax_rows(m: MatRef<'_, f64>) -> Vec<usize> {
    (0..m.nrows())
        .map(|i| {
            let mut best = 0;
            for j in 1..m.ncols() {
                if m[(i, j)] > m[(i, best)] {
                    best = j;
                }
            }
            best
        })
        .collect()
}

/// Plain hyper-parameters with documented defaults. `check` validates them once; only the
/// resulting [`Checked`] value can fit, so a fit never meets an invalid parameter.
pub trait HyperParams: Sized {
    /// Errors name the parameter and its rule, e.g. "`reg` must be >= 0, got -0.001".
    fn check_params(&self) -> Result<()>;

    /// Validates and wraps the parameters.
    fn check(self) -> Result<Checked<Self>> {
        self.check_params()?;
        Ok(Checked(self))
    }
}

/// Hyper-parameters that passed [`HyperParams::check`].
#[derive(Debug, Clone, PartialEq)]
pub struct Checked<P>(P);

impl<P> std::ops::Deref for Checked<P> {
    type Target = P;
    fn deref(&self) -> &P {
        &self.0
    }
}

/// Validated hyper-parameters that fit a model in closed form from weighted responsibilities.
pub trait WeightedFit: Sync {
    /// The fitted model.
    type Model: GenerativeClassifier + Clone;

    /// Fits from several sets of rows, as if they were one set (no data is copied).
    fn fit_sets(&self, sets: &[WeightedRows<'_>]) -> Result<Self::Model>;

    /// Fits from one matrix of rows and its n × K responsibilities.
    fn fit_weighted(&self, x: MatRef<'_, f64>, resp: MatRef<'_, f64>) -> Result<Self::Model> {
        self.fit_sets(&[WeightedRows { x, resp }])
    }

    /// Supervised fit from labels in `0..n_classes` (the one-hot special case).
    fn fit(&self, x: MatRef<'_, f64>, labels: &[usize], n_classes: usize) -> Result<Self::Model> {
        if labels.len() != x.nrows() {
            return Err(GenerativeError::DimensionMismatch {
                what: "labels vs rows of x",
                expected: x.nrows(),
                got: labels.len(),
            });
        }
        let resp = one_hot(labels, n_classes)?;
        self.fit_weighted(x, resp.as_ref())
    }
}
