//! Several mixture components per class, seen from outside as one classifier over classes.
//!
//! The underlying model is fitted with K' = Σ_k m_k "classes" (its components); the class-level
//! joint is `ln p(x, y = k) = ln Σ_{c ∈ comps(k)} p(x, c)`. With one component per class this is
//! the identity map and the wrapper adds nothing but a column copy.

use faer::{Mat, MatMut, MatRef};

use density::numerics::log_sum_exp;
use generative::{GenerativeClassifier, GenerativeError};

/// A fitted model whose components are grouped into classes.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ComponentMixture<M> {
    model: M,
    /// Class of each component (sorted: components of class 0 first).
    component_class: Vec<usize>,
    n_classes: usize,
}

impl<M: GenerativeClassifier> ComponentMixture<M> {
    /// Groups the model's components into classes by `component_class`.
    pub fn new(
        model: M,
        component_class: Vec<usize>,
        n_classes: usize,
    ) -> generative::Result<Self> {
        let out = Self {
            model,
            component_class,
            n_classes,
        };
        out.validate()?;
        Ok(out)
    }

    /// The component-level model.
    pub fn components(&self) -> &M {
        &self.model
    }

    /// Class of each component.
    pub fn component_class(&self) -> &[usize] {
        &self.component_class
    }

    /// Number of components of each class.
    pub fn components_per_class(&self) -> Vec<usize> {
        let mut m = vec![0; self.n_classes];
        for c in &self.component_class {
            m[*c] += 1;
        }
        m
    }
}

impl<M: GenerativeClassifier> GenerativeClassifier for ComponentMixture<M> {
    fn n_classes(&self) -> usize {
        self.n_classes
    }
    fn n_features(&self) -> usize {
        self.model.n_features()
    }
    fn n_parameters(&self) -> usize {
        self.model.n_parameters()
    }
    fn validate(&self) -> generative::Result<()> {
        self.model.validate()?;
        if self.component_class.len() != self.model.n_classes() {
            return Err(GenerativeError::DimensionMismatch {
                what: "component classes vs model components",
                expected: self.model.n_classes(),
                got: self.component_class.len(),
            });
        }
        if self.n_classes < 2 {
            return Err(GenerativeError::TooFewClasses {
                n_classes: self.n_classes,
            });
        }
        for k in 0..self.n_classes {
            if !self.component_class.contains(&k) {
                return Err(GenerativeError::EmptyClass { class: k });
            }
        }
        if self.component_class.iter().any(|c| *c >= self.n_classes) {
            return Err(GenerativeError::InvalidParameter {
                name: "component_class",
                rule: "in 0..n_classes",
                value: format!("{:?}", self.component_class),
            });
        }
        Ok(())
    }
    fn check_input(&self, x: MatRef<'_, f64>) -> generative::Result<()> {
        self.model.check_input(x)
    }
    fn log_joint_chunk(&self, x: MatRef<'_, f64>, mut out: MatMut<'_, f64>) {
        let kc = self.component_class.len();
        if kc == self.n_classes {
            // One component per class, in class order.
            self.model.log_joint_chunk(x, out);
            return;
        }
        let mut comp = Mat::<f64>::zeros(x.nrows(), kc);
        self.model.log_joint_chunk(x, comp.as_mut());
        let mut buf = Vec::with_capacity(kc);
        for i in 0..x.nrows() {
            for k in 0..self.n_classes {
                buf.clear();
                buf.extend(
                    (0..kc)
                        .filter(|c| self.component_class[*c] == k)
                        .map(|c| comp[(i, c)]),
                );
                out[(i, k)] = log_sum_exp(&buf);
            }
        }
    }
    fn log_prior_penalty(&self) -> f64 {
        self.model.log_prior_penalty()
    }
}
