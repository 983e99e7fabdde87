//! What a semi-supervised fit reports: the trace, the λ curve, the components and the verdict.
//! These types are serialisable: the CLI stores them in the model file as the training record.

use crate::diagnostic::DominanceDiagnostic;
use crate::params::EmMode;

/// One EM iteration: the objective at the parameters *before* the iteration's M-step.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct IterationRecord {
    /// 0 for the initial (labeled-only) parameters.
    pub iteration: usize,
    /// L(θ) = labeled + λ · unlabeled (+ the model's smoothing prior, if any).
    pub objective: f64,
    /// Σ_labeled ln p(x_i, y_i | θ).
    pub labeled: f64,
    /// Σ_unlabeled ln Σ_k p(x_j, k | θ) (unweighted by λ).
    pub unlabeled: f64,
    /// Each class's share of the total responsibility after the E-step.
    pub class_weights: Vec<f64>,
}

/// Held-out log-loss of one λ in cross-validation.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LambdaScore {
    pub lambda: f64,
    /// Mean held-out log-loss over folds; `None` if a fold failed to fit.
    pub log_loss: Option<f64>,
    /// Held-out accuracy (mean over folds).
    pub accuracy: Option<f64>,
}

/// The record of a semi-supervised fit.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EmReport {
    /// λ used for the final fit.
    pub lambda: f64,
    pub mode: EmMode,
    /// Number of M-steps after initialisation.
    pub iterations: usize,
    /// Whether the objective's relative change fell below `tol` before `max_iter`.
    pub converged: bool,
    /// True when there were no unlabeled rows: the result is the supervised fit.
    pub supervised_only: bool,
    pub n_labeled: usize,
    pub n_unlabeled: usize,
    /// Final objective.
    pub objective: f64,
    pub trace: Vec<IterationRecord>,
    /// The cross-validation curve, when λ was automatic.
    pub lambda_curve: Option<Vec<LambdaScore>>,
    /// Components per class used.
    pub components_per_class: Vec<usize>,
    /// (m, BIC) for each m tried, when components were chosen by BIC.
    pub bic: Option<Vec<(usize, f64)>>,
    /// Labeled-only vs semi-supervised comparison; `None` without unlabeled rows.
    pub diagnostic: Option<DominanceDiagnostic>,
    /// Non-fatal problems (e.g. a component collapsed and EM stopped early).
    pub warnings: Vec<String>,
}
