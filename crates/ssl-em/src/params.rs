//! EM options: plain data with documented defaults, validated once by [`EmParams::check`].

use crate::{EmError, Result};

/// How much an unlabeled row counts relative to a labeled one.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Lambda {
    /// A fixed λ in [0, 1]; 1 is plain EM, 0 the supervised fit.
    Fixed(f64),
    /// λ chosen by stratified k-fold cross-validation on the labeled rows.
    Auto(CvOptions),
}

/// Cross-validation options for automatic λ.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CvOptions {
    /// Candidate λ values (default 0, 0.01, 0.03, 0.1, 0.3, 1).
    pub grid: Vec<f64>,
    /// Number of folds (default 5; lowered to the smallest class's labeled count).
    pub folds: usize,
}

impl Default for CvOptions {
    fn default() -> Self {
        Self {
            grid: vec![0.0, 0.01, 0.03, 0.1, 0.3, 1.0],
            folds: 5,
        }
    }
}

/// Soft EM (responsibilities) or hard EM (each unlabeled row assigned to its most probable
/// class, the "classification EM" of seed 000).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum EmMode {
    #[default]
    Soft,
    Hard,
}

/// Mixture components per class (class k is itself a mixture of m_k components).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Components {
    /// The same m for every class (default 1).
    Uniform(usize),
    /// m_k given per class.
    PerClass(Vec<usize>),
    /// The same m for every class, chosen in 1..=max by the lowest BIC.
    Bic { max: usize },
}

/// Options of semi-supervised EM.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EmParams {
    /// Weight of unlabeled rows (default fixed 1, as in the seeds).
    pub lambda: Lambda,
    /// Soft or hard assignments (default soft).
    pub mode: EmMode,
    /// Upper bound on M-steps (default 200). Reaching it is reported, not an error.
    pub max_iter: usize,
    /// Stop when |L_t − L_{t−1}| < tol · |L_t| (default 1e-6); 0 runs exactly `max_iter`
    /// iterations.
    pub tol: f64,
    /// Components per class (default 1).
    pub components: Components,
    /// Seed for everything random: initialisation of several components, CV folds (default 0).
    pub seed: u64,
}

impl Default for EmParams {
    fn default() -> Self {
        Self {
            lambda: Lambda::Fixed(1.0),
            mode: EmMode::Soft,
            max_iter: 200,
            tol: 1e-6,
            components: Components::Uniform(1),
            seed: 0,
        }
    }
}

fn check_lambda(name: &'static str, l: f64) -> Result<()> {
    if !(0.0..=1.0).contains(&l) {
        return Err(EmError::InvalidParameter {
            name,
            rule: "in [0, 1]",
            value: l.to_string(),
        });
    }
    Ok(())
}

impl EmParams {
    /// Validates every option; errors name the option and its rule.
    pub fn check(&self) -> Result<()> {
        match &self.lambda {
            Lambda::Fixed(l) => check_lambda("lambda", *l)?,
            Lambda::Auto(cv) => {
                if cv.grid.is_empty() {
                    return Err(EmError::InvalidParameter {
                        name: "lambda grid",
                        rule: "non-empty",
                        value: "[]".into(),
                    });
                }
                for l in &cv.grid {
                    check_lambda("lambda grid value", *l)?;
                }
                if cv.folds < 2 {
                    return Err(EmError::InvalidParameter {
                        name: "folds",
                        rule: ">= 2",
                        value: cv.folds.to_string(),
                    });
                }
            }
        }
        if self.max_iter == 0 {
            return Err(EmError::InvalidParameter {
                name: "max_iter",
                rule: ">= 1",
                value: "0".into(),
            });
        }
        if !self.tol.is_finite() || self.tol < 0.0 {
            return Err(EmError::InvalidParameter {
                name: "tol",
                rule: ">= 0",
                value: self.tol.to_string(),
            });
        }
        match &self.components {
            Components::Uniform(0) | Components::Bic { max: 0 } => {
                return Err(EmError::InvalidParameter {
                    name: "components_per_class",
                    rule: ">= 1",
                    value: "0".into(),
                });
            }
            Components::PerClass(v) if v.contains(&0) || v.is_empty() => {
                return Err(EmError::InvalidParameter {
                    name: "components_per_class",
                    rule: "all >= 1",
                    value: format!("{v:?}"),
                });
            }
            _ => {}
        }
        Ok(())
    }
}
