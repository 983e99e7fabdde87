//! The model file: JSON with a format name and version, the model kind, class and feature names,
//! the label column, the fitted parameters and the training record. This is the only place that
//! knows the file layout; loading checks the format, the version and the parameters' shapes.

use faer::MatRef;
use generative::{
    BernoulliNaiveBayes, CategoricalNaiveBayes, GaussianClassifier, GenerativeClassifier,
    MultinomialNaiveBayes,
};
use serde::{Deserialize, Serialize};
use ssl_em::{ComponentMixture, EmReport};

use crate::error::{CliError, Result};

/// Format name written in every model file.
pub const FORMAT: &str = "ssl-cli-model";
/// Version of the layout this build writes and reads.
pub const VERSION: u32 = 1;

/// Which classifier a model is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum ModelKind {
    /// Linear discriminant analysis (shared full covariance).
    Lda,
    /// Quadratic discriminant analysis (full covariance per class).
    Qda,
    /// Gaussian naive Bayes (diagonal covariance per class).
    GaussianNb,
    /// Bernoulli naive Bayes (binary features, or `x > binarize`).
    BernoulliNb,
    /// Multinomial naive Bayes (non-negative counts).
    MultinomialNb,
    /// Categorical naive Bayes (integer categories 0, 1, 2, ...).
    CategoricalNb,
}

/// The fitted parameters, by model family.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "family", content = "parameters", rename_all = "kebab-case")]
pub enum FittedModel {
    Gaussian(ComponentMixture<GaussianClassifier>),
    Bernoulli(ComponentMixture<BernoulliNaiveBayes>),
    Multinomial(ComponentMixture<MultinomialNaiveBayes>),
    Categorical(ComponentMixture<CategoricalNaiveBayes>),
}

impl FittedModel {
    /// The model behind the common trait.
    pub fn classifier(&self) -> &dyn GenerativeClassifier {
        match self {
            FittedModel::Gaussian(m) => m,
            FittedModel::Bernoulli(m) => m,
            FittedModel::Multinomial(m) => m,
            FittedModel::Categorical(m) => m,
        }
    }

    /// Predicted class indices.
    pub fn predict(&self, x: MatRef<'_, f64>) -> generative::Result<Vec<usize>> {
        self.classifier().predict(x)
    }
}

/// How the model was trained.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Training {
    /// The data file(s) it was fitted on.
    pub data: Vec<String>,
    /// Hyper-parameters of the classifier and EM options, as given.
    pub options: serde_json::Value,
    /// The EM record; `None` for a supervised fit (`--em none`).
    pub em: Option<EmReport>,
}

/// A model file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModelFile {
    pub format: String,
    pub version: u32,
    pub kind: ModelKind,
    pub classes: Vec<String>,
    pub features: Vec<String>,
    pub label_column: String,
    pub model: FittedModel,
    pub training: Training,
}

impl ModelFile {
    /// Serialises and writes atomically.
    pub fn save(&self, path: &str) -> Result<()> {
        let json = serde_json::to_vec_pretty(self)
            .map_err(|e| CliError::Data(format!("{path}: cannot serialise the model: {e}")))?;
        crate::data::write_atomic(path, &json)
    }

    /// Reads, checks the format and version, and validates the parameters.
    pub fn load(path: &str) -> Result<Self> {
        let text = std::fs::read(path).map_err(|e| CliError::io(path, e))?;
        let value: serde_json::Value = serde_json::from_slice(&text)
            .map_err(|e| CliError::Data(format!("{path}: not a model file (invalid JSON: {e})")))?;
        match value.get("format").and_then(|f| f.as_str()) {
            Some(FORMAT) => {}
            Some(other) => {
                return Err(CliError::Data(format!(
                    "{path}: not an {FORMAT} file (format is '{other}')"
                )));
            }
            None => {
                return Err(CliError::Data(format!(
                    "{path}: not an {FORMAT} file (no \"format\" field)"
                )));
            }
        }
        match value.get("version").and_then(|v| v.as_u64()) {
            Some(v) if v == u64::from(VERSION) => {}
            Some(v) => {
                return Err(CliError::Data(format!(
                    "{path}: model file version {v} is not supported (this ssl-cli reads version {VERSION})"
                )));
            }
            None => return Err(CliError::Data(format!("{path}: model file has no version"))),
        }
        let file: ModelFile = serde_json::from_value(value)
            .map_err(|e| CliError::Data(format!("{path}: damaged model file: {e}")))?;
        let m = file.model.classifier();
        m.validate()
            .map_err(|e| CliError::Data(format!("{path}: damaged model file: {e}")))?;
        if m.n_classes() != file.classes.len() || m.n_features() != file.features.len() {
            return Err(CliError::Data(format!(
                "{path}: damaged model file: {} classes and {} features named, but the parameters have {} and {}",
                file.classes.len(),
                file.features.len(),
                m.n_classes(),
                m.n_features()
            )));
        }
        // Names are how predictions are written and columns and labels found: a name given
        // twice would make them ambiguous (fit never writes one).
        for (what, names) in [("class", &file.classes), ("feature", &file.features)] {
            let mut seen = std::collections::HashSet::new();
            if let Some(name) = names.iter().find(|n| !seen.insert(n.as_str())) {
                return Err(CliError::Data(format!(
                    "{path}: damaged model file: the {what} name '{name}' appears twice"
                )));
            }
        }
        Ok(file)
    }
}
