//! The one error type of the `density` crate: every variant carries the data a user needs to
//! find the problem (which parameter, which index, what value).

use thiserror::Error;

/// Invalid parameters or data for a density.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum DensityError {
    /// Two lengths or shapes that must agree do not.
    #[error("dimension mismatch in {what}: expected {expected}, got {got}")]
    DimensionMismatch {
        what: &'static str,
        expected: usize,
        got: usize,
    },
    /// A parameter or data value is NaN or infinite.
    #[error("`{what}` must be finite, got {value} at index {index}")]
    NotFinite {
        what: &'static str,
        index: usize,
        value: f64,
    },
    /// A parameter lies outside its allowed range.
    #[error("`{what}` must be {rule}, got {value}")]
    OutOfRange {
        what: &'static str,
        rule: &'static str,
        value: f64,
    },
    /// A covariance matrix is not symmetric.
    #[error("covariance is not symmetric: entry ({row}, {col}) differs from ({col}, {row})")]
    NotSymmetric { row: usize, col: usize },
    /// A covariance matrix is not positive definite (Cholesky met a non-positive pivot).
    #[error(
        "covariance is not positive definite (Cholesky pivot {pivot} is not positive); add ridge regularisation"
    )]
    NotPositiveDefinite { pivot: usize },
    /// Probabilities that must sum to one do not.
    #[error("`{what}` must sum to 1, got {sum}")]
    NotNormalised { what: &'static str, sum: f64 },
    /// An observation lies outside the support of the family.
    #[error("observation {value} at position {index} is outside the support of {family} ({rule})")]
    OutsideSupport {
        family: &'static str,
        index: usize,
        value: f64,
        rule: &'static str,
    },
    /// The maximum-likelihood estimate does not exist for these statistics.
    #[error("maximum-likelihood estimate of {family} is degenerate: {reason}")]
    DegenerateEstimate {
        family: &'static str,
        reason: String,
    },
    /// No data (or zero total weight) was given where some is needed.
    #[error("{what} has zero total weight")]
    ZeroWeight { what: &'static str },
}
