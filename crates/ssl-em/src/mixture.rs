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

    /// `score` of the components (n × K'), combined into classes by log-sum-exp over each
    /// class's components; with one component per class, `score` writes `out` directly.
    fn by_class(
        &self,
        x: MatRef<'_, f64>,
        mut out: MatMut<'_, f64>,
        score: impl Fn(&M, MatRef<'_, f64>, MatMut<'_, f64>),
    ) {
        let kc = self.component_class.len();
        if kc == self.n_classes {
            // One component per class, in class order (`validate` keeps them sorted).
            score(&self.model, x, out);
            return;
        }
        let mut comp = Mat::<f64>::zeros(x.nrows(), kc);
        score(&self.model, x, comp.as_mut());
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
        // The first class without a component, in one pass (a search of the components per
        // class was K · K' steps: 4e8 at 20,000 classes). With K' components, one of the first
        // K' + 1 classes has none whenever any has none.
        let classes = self.n_classes.min(self.component_class.len() + 1);
        let mut has_component = vec![false; classes];
        for &c in &self.component_class {
            if let Some(seen) = has_component.get_mut(c) {
                *seen = true;
            }
        }
        if let Some(k) = has_component.iter().position(|seen| !seen) {
            return Err(GenerativeError::EmptyClass { class: k });
        }
        // Sorted, as `new`'s callers build it: predictions with one component per class take
        // the components as the classes in order.
        if self.component_class.iter().any(|c| *c >= self.n_classes)
            || !self.component_class.is_sorted()
        {
            return Err(GenerativeError::InvalidParameter {
                name: "component_class",
                rule: "in 0..n_classes, in increasing order",
                value: format!("{:?}", self.component_class),
            });
        }
        Ok(())
    }
    fn check_input(&self, x: MatRef<'_, f64>) -> generative::Result<()> {
        self.model.check_input(x)
    }
    fn scores_reveal_bad_input(&self) -> bool {
        // A class's log-sum-exp over several components can hide a NaN component (when every
        // other one is −∞), so only the identity map keeps the model's guarantee.
        self.component_class.len() == self.n_classes && self.model.scores_reveal_bad_input()
    }
    fn ranks_far_rows_when_scaled(&self) -> bool {
        // A class's log-sum-exp is ranked by its largest component's score.
        self.model.ranks_far_rows_when_scaled()
    }
    fn log_joint_chunk(&self, x: MatRef<'_, f64>, out: MatMut<'_, f64>) {
        self.by_class(x, out, |m, x, o| m.log_joint_chunk(x, o));
    }
    fn posterior_scores_chunk(&self, x: MatRef<'_, f64>, out: MatMut<'_, f64>) {
        // The model's scores differ from its joints by a constant per row that is the same for
        // every component, so their log-sum-exp over a class's components differs from the
        // class's joint by that constant too. Forwarding them keeps the model's own scores
        // (LDA's linear discriminant: one product, and finite where the quadratic form of a row
        // far from the data overflows to −∞ for every class).
        self.by_class(x, out, |m, x, o| m.posterior_scores_chunk(x, o));
    }
    fn log_prior_penalty(&self) -> f64 {
        self.model.log_prior_penalty()
    }
}
