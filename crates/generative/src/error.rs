//! The error type of the `generative` crate. Variants carry the class, row, column or parameter
//! at fault, so the CLI can turn them into messages that point at the user's data.

use thiserror::Error;

/// Invalid hyper-parameters, data or responsibilities for a generative classifier.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum GenerativeError {
    /// A hyper-parameter breaks its rule.
    #[error("`{name}` must be {rule}, got {value}")]
    InvalidParameter {
        name: &'static str,
        rule: &'static str,
        value: String,
    },
    /// No rows to fit or predict.
    #[error("no rows: {what} is empty")]
    Empty { what: &'static str },
    /// Shapes that must agree do not.
    #[error("dimension mismatch in {what}: expected {expected}, got {got}")]
    DimensionMismatch {
        what: &'static str,
        expected: usize,
        got: usize,
    },
    /// A NaN or infinite feature value.
    #[error("x has a non-finite value {value} at row {row}, column {col}")]
    NonFiniteInput { row: usize, col: usize, value: f64 },
    /// A feature value outside the model's support (negative count, non-integer category, ...).
    #[error("x has an invalid value {value} at row {row}, column {col}: {rule}")]
    InvalidInput {
        row: usize,
        col: usize,
        value: f64,
        rule: &'static str,
    },
    /// A responsibility that is negative or not finite.
    #[error("responsibility at row {row}, class {class} must be finite and >= 0, got {value}")]
    InvalidResponsibility {
        row: usize,
        class: usize,
        value: f64,
    },
    /// Fewer than two classes.
    #[error("a classifier needs at least 2 classes, got {n_classes}")]
    TooFewClasses { n_classes: usize },
    /// A class received zero total weight, so its parameters cannot be estimated.
    #[error("class {class} has no (weighted) rows; every class needs data")]
    EmptyClass { class: usize },
    /// A class covariance is singular (too few or collinear points).
    #[error(
        "covariance of class {class} is singular (weight {weight:.3} for {n_features} features{hint}); increase `reg` (ridge) or use shrinkage"
    )]
    SingularCovariance {
        class: usize,
        weight: f64,
        n_features: usize,
        hint: &'static str,
    },
    /// The covariance pooled over all classes is singular.
    #[error(
        "pooled covariance is singular (collinear or constant features); increase `reg` (ridge) or use shrinkage"
    )]
    SingularPooledCovariance,
    /// A feature has zero variance in a class and no smoothing is set.
    #[error("feature {feature} has zero variance in class {class}; increase `var_smoothing`")]
    ZeroVariance { class: usize, feature: usize },
    /// A statistic of finite feature values that overflows f64: squares of values beyond
    /// about 1.3e154, or sums of values near `f64::MAX`. `class` is `None` for a statistic
    /// pooled over the classes, `feature` `None` for one over all features.
    #[error("the {statistic}{} overflows f64: its values are too large to square or sum; rescale the features", overflow_place(*.class, *.feature))]
    StatisticOverflow {
        statistic: &'static str,
        class: Option<usize>,
        feature: Option<usize>,
    },
    /// A lower-level density error.
    #[error(transparent)]
    Density(#[from] density::DensityError),
    /// A broken invariant inside the library (a bug, not bad input).
    #[error("internal error: {what}")]
    Internal { what: &'static str },
}

/// " of feature j in class c", as much of it as is known.
fn overflow_place(class: Option<usize>, feature: Option<usize>) -> String {
    let feature = feature.map_or(String::new(), |j| format!(" of feature {j}"));
    let class = class.map_or(String::new(), |c| format!(" in class {c}"));
    feature + &class
}

impl GenerativeError {
    /// The same error with row numbers moved by `by` (a chunk's rows reported as rows of the
    /// whole input).
    pub(crate) fn shifted_rows(self, by: usize) -> Self {
        match self {
            Self::NonFiniteInput { row, col, value } => Self::NonFiniteInput {
                row: row + by,
                col,
                value,
            },
            Self::InvalidInput {
                row,
                col,
                value,
                rule,
            } => Self::InvalidInput {
                row: row + by,
                col,
                value,
                rule,
            },
            other => other,
        }
    }
}
