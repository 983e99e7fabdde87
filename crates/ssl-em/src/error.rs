//! The error type of `ssl-em`: invalid EM options or data, or a model error from below.

use thiserror::Error;

/// Errors of semi-supervised EM.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum EmError {
    /// An EM option breaks its rule.
    #[error("`{name}` must be {rule}, got {value}")]
    InvalidParameter {
        name: &'static str,
        rule: &'static str,
        value: String,
    },
    /// There are no labeled rows.
    #[error("no labeled rows: semi-supervised EM needs at least one labeled row per class")]
    NoLabeledRows,
    /// A class has no labeled row, so EM cannot tell which cluster it is.
    #[error("class {class} has no labeled rows; every class needs at least one")]
    ClassWithoutLabels { class: usize },
    /// Labeled and unlabeled rows have different numbers of features, or labels and rows differ.
    #[error("dimension mismatch in {what}: expected {expected}, got {got}")]
    DimensionMismatch {
        what: &'static str,
        expected: usize,
        got: usize,
    },
    /// Automatic λ needs at least two labeled rows per class.
    #[error(
        "automatic lambda needs at least 2 labeled rows in every class (class {class} has {count}); give a fixed lambda"
    )]
    TooFewForCrossValidation { class: usize, count: usize },
    /// Every λ in the cross-validation grid failed to fit.
    #[error("cross-validation failed for every lambda: {reason}")]
    CrossValidationFailed { reason: String },
    /// An error from the model layer.
    #[error(transparent)]
    Model(#[from] generative::GenerativeError),
}
