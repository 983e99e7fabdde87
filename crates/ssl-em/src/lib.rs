//! Semi-supervised EM over any generative classifier (seeds 000 and 004; Nigam et al. 2000).
//!
//! Given a few labeled rows and many unlabeled ones, [`SemiSupervisedEm`] maximises the
//! λ-weighted log-likelihood
//!
//! ```text
//! L(θ) = Σ_labeled ln p(x_i, y_i | θ) + λ Σ_unlabeled ln Σ_k p(x_j, k | θ)
//! ```
//!
//! by alternating an E-step (posteriors of the unlabeled rows) and an M-step (one weighted
//! closed-form fit through `generative::WeightedFit`, with labeled rows at fixed one-hot
//! responsibilities and unlabeled rows at λ-scaled posteriors). Nothing here knows which model it
//! holds: LDA, QDA and every naive Bayes become semi-supervised with no model-specific code.
//!
//! Around the loop: λ chosen by stratified cross-validation on the labeled rows, several
//! mixture components per class (chosen by BIC if asked), hard or soft assignments, a per-iteration
//! trace and observer, and a diagnostic that says when unlabeled data dominates and biases the
//! model.

mod cv;
pub mod diagnostic;
mod em;
mod error;
mod init;
pub mod mixture;
pub mod params;
pub mod report;
pub mod scenarios;

pub use diagnostic::{DominanceDiagnostic, Verdict};
pub use em::{EmFit, SemiSupervisedEm};
pub use error::EmError;
pub use mixture::ComponentMixture;
pub use params::{Components, CvOptions, EmMode, EmParams, Lambda};
pub use report::{EmReport, IterationRecord, LambdaScore};

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, EmError>;

/// The README's library example, compiled and run as a doctest so it stays true.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeExample;
