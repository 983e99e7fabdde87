//! Probability densities for generative classifiers and semi-supervised EM.
//!
//! This is the lowest layer of the workspace: it knows nothing of classes, labels or files.
//! It provides exact, log-space densities (`MultivariateNormal`, univariate and discrete
//! exponential families), weighted sufficient statistics that merge across chunks and threads
//! (`SufficientStats`), and the estimation helpers (ridge, Ledoit–Wolf, Lidstone) that the
//! classifiers above need. Every fallible constructor returns a `DensityError`; nothing here
//! panics on user input and no log-density is NaN.

pub mod block;
pub mod cpu;
mod error;
pub mod exp;
pub mod family;
pub mod linalg;
pub mod ln;
pub mod mahalanobis;
pub mod moments;
pub mod mvn;
pub mod numerics;
pub mod regularize;
pub mod scatter;
pub mod stats;
#[cfg(test)]
mod test_layouts;

pub use error::DensityError;
pub use family::{
    Bernoulli, Categorical, Exponential, ExponentialFamily, Gaussian, MleOptions, Multinomial,
    Poisson,
};
pub use mvn::{CovarianceKind, MultivariateNormal};
pub use stats::{Mergeable, ScatterKind, SufficientStats};

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, DensityError>;
