//! Closed-form generative classifiers behind one trait.
//!
//! A generative classifier models p(x | y = k) and p(y = k) and predicts with Bayes' rule. Every
//! model here implements [`GenerativeClassifier`] (the fitted model: one kernel, the joint
//! log-likelihood `log p(x_i, y = k)` of a matrix of rows, from which every prediction is
//! derived) and its hyper-parameters implement [`WeightedFit`] (fitting in closed form from
//! weighted responsibilities). Supervised fitting is the one-hot special case; semi-supervised
//! EM (the `ssl-em` crate) drives the same two traits without knowing which model it holds.
//!
//! Work is split into fixed chunks of rows processed in parallel; partial statistics are merged
//! in chunk order, so results are bit-identical on any number of threads.

mod error;
mod fused_posteriors;
pub mod gaussian;
mod linear_scores;
pub mod mixed;
pub mod model;
pub mod naive_bayes;
pub mod parallel;
mod placement;
#[doc(hidden)]
pub mod score_formula;
pub mod split;

pub use error::GenerativeError;
pub use gaussian::{
    CovarianceStructure, GaussianClassifier, GaussianParams, LinearDiscriminant, Shrinkage,
};
pub use mixed::{FeatureKind, MixedNaiveBayes, MixedNbParams};
pub use model::{
    Checked, GenerativeClassifier, HyperParams, Priors, Responsibilities, WeightedFit,
    WeightedRows, one_hot,
};
pub use naive_bayes::{
    BernoulliNaiveBayes, BernoulliNbParams, CategoricalNaiveBayes, CategoricalNbParams,
    MultinomialNaiveBayes, MultinomialNbParams,
};

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, GenerativeError>;
