//! Command-line definitions (clap). Every option of the library is reachable here.

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::model_file::ModelKind;

/// Generative classifiers and semi-supervised EM for CSV files.
#[derive(Debug, Parser)]
#[command(name = "ssl-cli", version, about, long_about = None, after_help = "Examples:\n  ssl-cli demo\n  ssl-cli fit --model qda --data train.csv --label class --out model.json\n  ssl-cli predict --model model.json --data new.csv --proba --out predictions.csv\n  ssl-cli eval --model model.json --data test.csv --label class --json")]
pub struct Cli {
    /// Worker threads (default: all cores). Results do not depend on it.
    #[arg(long, global = true, value_name = "N")]
    pub threads: Option<usize>,
    /// No progress or summaries on standard error.
    #[arg(long, short, global = true)]
    pub quiet: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Fit a classifier; with unlabeled rows, by semi-supervised EM.
    Fit(Box<FitArgs>),
    /// Predict classes (and probabilities) for the rows of a CSV file.
    Predict(PredictArgs),
    /// Accuracy, log-loss, per-class precision/recall and confusion matrix on labeled rows.
    Eval(EvalArgs),
    /// Show a model's kind, classes, features, parameters and training record.
    Inspect(InspectArgs),
    /// The built-in demonstration: seed 000's two Gaussians, labeled-only vs semi-supervised.
    Demo(DemoArgs),
    /// Draw the data, the class Gaussians and the decision regions of a model as SVG.
    Plot(PlotArgs),
}

/// Soft, hard or no EM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EmChoice {
    /// Responsibility-weighted updates.
    Soft,
    /// Each unlabeled row assigned to its most probable class.
    Hard,
    /// Supervised fit on the labeled rows only.
    None,
}

#[derive(Debug, Args, serde::Serialize)]
#[command(
    after_help = "Examples:\n  ssl-cli fit --model qda --data train.csv --label class --out model.json\n  ssl-cli fit --model lda --data train.csv --label y --unlabeled more.csv --lambda auto --out m.json\n  ssl-cli fit --model multinomial-nb --data docs.csv --label topic --unlabeled-marker '?' --alpha 0.5 --out nb.json\n  cat train.csv | ssl-cli fit --model gaussian-nb --data - --label y --em none --out m.json"
)]
pub struct FitArgs {
    /// The classifier.
    #[arg(long, value_enum)]
    pub model: ModelKind,
    /// CSV file with a header row (`-` for standard input).
    #[arg(long, value_name = "FILE")]
    pub data: String,
    /// Label column; rows whose label cell is empty (or the marker) are unlabeled.
    #[arg(long, value_name = "COLUMN")]
    pub label: String,
    /// Where to write the model (JSON).
    #[arg(long, value_name = "MODEL.json")]
    pub out: String,
    /// A second CSV file of unlabeled rows with the same feature columns.
    #[arg(long, value_name = "FILE")]
    pub unlabeled: Option<String>,
    /// Label cell that marks an unlabeled row (default: empty), e.g. -1 or ?.
    #[arg(long, default_value = "", value_name = "TEXT")]
    pub unlabeled_marker: String,
    /// Feature columns (default: every column but the label).
    #[arg(long, value_delimiter = ',', value_name = "a,b,c")]
    pub features: Option<Vec<String>>,
    /// Weight λ of unlabeled rows in [0, 1], or `auto` for cross-validation.
    #[arg(long, default_value = "1", value_name = "x|auto")]
    pub lambda: String,
    /// λ values tried by `--lambda auto`.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "0,0.01,0.03,0.1,0.3,1",
        value_name = "LIST"
    )]
    pub lambda_grid: Vec<f64>,
    /// Folds for `--lambda auto`.
    #[arg(long, default_value_t = 5, value_name = "K")]
    pub cv_folds: usize,
    /// EM mode.
    #[arg(long, value_enum, default_value = "soft")]
    pub em: EmChoice,
    /// Mixture components per class: a number, a list per class (in sorted class order), or
    /// `bic` / `bic:MAX` to choose by BIC.
    #[arg(long, default_value = "1", value_name = "M|m1,m2,..|bic[:MAX]")]
    pub components_per_class: String,
    /// Maximum EM iterations.
    #[arg(long, default_value_t = 200, value_name = "N")]
    pub max_iter: usize,
    /// EM stops when the objective changes by less than this, relatively (0: run --max-iter
    /// iterations).
    #[arg(long, default_value_t = 1e-6, value_name = "TOL")]
    pub tol: f64,
    /// Ridge added to covariance diagonals (LDA, QDA, Gaussian NB).
    #[arg(long, default_value_t = 0.0, value_name = "X")]
    pub reg: f64,
    /// Covariance shrinkage for LDA/QDA: a number in [0, 1] or `auto` (Ledoit–Wolf).
    #[arg(long, value_name = "x|auto")]
    pub shrinkage: Option<String>,
    /// Gaussian NB: share of the largest feature variance added to every variance.
    #[arg(long, default_value_t = 1e-9, value_name = "X")]
    pub var_smoothing: f64,
    /// Naive Bayes pseudo-count (Lidstone smoothing).
    #[arg(long, default_value_t = 1.0, value_name = "A")]
    pub alpha: f64,
    /// Bernoulli NB threshold (x > t is 1), or `none` for features already 0/1.
    #[arg(long, default_value = "0", value_name = "t|none")]
    pub binarize: String,
    /// Fixed class priors in sorted class order (default: estimated).
    #[arg(long, value_delimiter = ',', value_name = "p1,p2,..")]
    pub priors: Option<Vec<f64>>,
    /// Seed for everything random (initialisation, folds).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  ssl-cli predict --model model.json --data new.csv\n  ssl-cli predict --model model.json --data new.csv --proba --out predictions.csv"
)]
pub struct PredictArgs {
    /// A model written by `ssl-cli fit`.
    #[arg(long, value_name = "MODEL.json")]
    pub model: String,
    /// CSV file with the model's feature columns (others are ignored; `-` for standard input).
    #[arg(long, value_name = "FILE")]
    pub data: String,
    /// Add one `p_<class>` column per class.
    #[arg(long)]
    pub proba: bool,
    /// Output CSV (default: standard output).
    #[arg(long, value_name = "FILE")]
    pub out: Option<String>,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  ssl-cli eval --model model.json --data test.csv --label class\n  ssl-cli eval --model model.json --data test.csv --label class --json"
)]
pub struct EvalArgs {
    /// A model written by `ssl-cli fit`.
    #[arg(long, value_name = "MODEL.json")]
    pub model: String,
    /// CSV file with the model's feature columns and the label column (`-` for standard input).
    #[arg(long, value_name = "FILE")]
    pub data: String,
    /// Label column (rows with an empty label are skipped).
    #[arg(long, value_name = "COLUMN")]
    pub label: String,
    /// Print one JSON object (keys accuracy, log_loss, classes, confusion, ...).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
#[command(after_help = "Example:\n  ssl-cli inspect --model model.json")]
pub struct InspectArgs {
    /// A model written by `ssl-cli fit`.
    #[arg(long, value_name = "MODEL.json")]
    pub model: String,
}

#[derive(Debug, Args)]
#[command(after_help = "Example:\n  ssl-cli demo --out demo.svg --seed 3")]
pub struct DemoArgs {
    /// Where to write the figure.
    #[arg(long, default_value = "ssl-demo.svg", value_name = "FIG.svg")]
    pub out: String,
    /// Seed of the generated data.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Labeled points per class (of 1000 per class).
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub labeled_per_class: usize,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Example:\n  ssl-cli plot --model model.json --data train.csv --out fig.svg"
)]
pub struct PlotArgs {
    /// A model written by `ssl-cli fit`. With one feature the figure is each class's posterior
    /// P(class | x) along it, the rows at their predicted class's posterior and the decision
    /// regions as bands; with two, the data's plane, with decision regions and (Gaussian models)
    /// 1σ and 2σ ellipses; with more, the data projected on its first two linear discriminant
    /// directions under the predicted classes.
    #[arg(long, value_name = "MODEL.json")]
    pub model: String,
    /// CSV file with the model's feature columns (`-` for standard input); rows with a value in
    /// the model's label column are drawn large.
    #[arg(long, value_name = "FILE")]
    pub data: String,
    /// Where to write the SVG figure.
    #[arg(long, value_name = "FIG.svg")]
    pub out: String,
}
