//! `ssl-cli fit`: read the data, build the classifier's hyper-parameters and the EM options from
//! the flags, fit, print what happened, and write the model file.

use std::io::IsTerminal;

use faer::MatRef;
use generative::{
    BernoulliNbParams, CategoricalNbParams, CovarianceStructure, GaussianParams, GenerativeError,
    HyperParams, MultinomialNbParams, Priors, Shrinkage, WeightedFit,
};
use ssl_em::{
    ComponentMixture, Components, CvOptions, EmError, EmMode, EmParams, EmReport, Lambda,
    SemiSupervisedEm, Verdict,
};

use crate::cli::{EmChoice, FitArgs};
use crate::data::{Dataset, ReadOptions, Rows, read_csv};
use crate::error::{CliError, Result};
use crate::model_file::{FORMAT, FittedModel, ModelFile, ModelKind, Training, VERSION};

/// Names used to turn index-based library errors into messages about the user's data.
pub struct Names<'a> {
    pub classes: &'a [String],
    pub features: &'a [String],
}

impl Names<'_> {
    fn class(&self, k: usize) -> String {
        self.classes
            .get(k)
            .map_or(format!("#{k}"), |c| format!("'{c}'"))
    }
    fn feature(&self, j: usize) -> String {
        self.features
            .get(j)
            .map_or(format!("#{j}"), |f| format!("'{f}'"))
    }

    /// A library error as a message naming classes, features and options.
    pub fn model_error(&self, e: &GenerativeError) -> CliError {
        let msg = match e {
            GenerativeError::EmptyClass { class } => format!("class {} has no rows to estimate its parameters from", self.class(*class)),
            GenerativeError::SingularCovariance { class, weight, n_features, .. } => format!(
                "class {} has too few or collinear rows for its covariance ({weight:.1} rows for {n_features} features); add --reg (e.g. --reg 1e-3) or --shrinkage auto",
                self.class(*class)
            ),
            GenerativeError::SingularPooledCovariance => "the pooled covariance is singular (constant or collinear features); add --reg (e.g. --reg 1e-3) or --shrinkage auto".to_string(),
            GenerativeError::ZeroVariance { class, feature } => format!("feature {} is constant in class {}; increase --var-smoothing", self.feature(*feature), self.class(*class)),
            GenerativeError::StatisticOverflow { statistic, class, feature } => {
                let feature = feature.map_or(String::new(), |j| format!(" of feature {}", self.feature(j)));
                let class = class.map_or(String::new(), |c| format!(" in class {}", self.class(c)));
                format!("the {statistic}{feature}{class} overflows f64 (the values are too large to square or sum); rescale the feature, e.g. divide it by a power of ten")
            }
            GenerativeError::InvalidParameter { name, rule, value } => option_message(name, rule, value),
            other => other.to_string(),
        };
        CliError::Data(msg)
    }

    /// `components_are_classes`: EM's model has one component per class, so its class indices
    /// are the classes'; with more, they are components'.
    fn em_error(&self, e: EmError, components_are_classes: bool) -> CliError {
        match e {
            EmError::Model(GenerativeError::EmptyClass { class }) if !components_are_classes => {
                CliError::Data(format!(
                    "component {class} has no rows to estimate its parameters from; use fewer --components-per-class"
                ))
            }
            EmError::Model(m) => self.model_error(&m),
            EmError::ClassWithoutLabels { class } => {
                CliError::Data(format!("class {} has no labeled rows", self.class(class)))
            }
            EmError::TooFewForCrossValidation { class, count } => CliError::Data(format!(
                "--lambda auto needs at least 2 labeled rows in every class; class {} has {count}. Give a number, e.g. --lambda 0.1",
                self.class(class)
            )),
            EmError::InvalidParameter { name, rule, value } => option_error(name, rule, &value),
            other => CliError::Data(other.to_string()),
        }
    }
}

fn parse_number(flag: &str, text: &str) -> Result<f64> {
    text.trim()
        .parse::<f64>()
        .map_err(|_| CliError::Usage(format!("{flag} must be a number, got '{text}'")))
}

/// Checks feature values against the model's domain before fitting, naming file, line, column.
pub fn check_domain(
    kind: ModelKind,
    binarize: Option<f64>,
    rows: &Rows,
    source: &str,
    features: &[String],
) -> Result<()> {
    let problem = |v: f64| match kind {
        ModelKind::MultinomialNb if v < 0.0 => Some("counts must be >= 0 for multinomial-nb"),
        ModelKind::CategoricalNb
            if v < 0.0
                || v.fract() != 0.0
                || v >= generative::naive_bayes::MAX_CATEGORIES as f64 =>
        {
            Some("categories must be integers from 0 to 2^20 - 1 = 1048575 for categorical-nb")
        }
        ModelKind::BernoulliNb if binarize.is_none() && v != 0.0 && v != 1.0 => {
            Some("values must be 0 or 1 for bernoulli-nb with --binarize none")
        }
        _ => None,
    };
    // The first bad value in file order: the lowest row, and in it the first column. Columns
    // are searched in order, each only above the row found so far.
    let mut first: Option<(usize, usize, f64, &str)> = None;
    for j in 0..rows.n_features() {
        let rows_left = first.map_or(rows.len(), |f| f.0);
        for (r, &v) in rows.column(j)[..rows_left].iter().enumerate() {
            if let Some(p) = problem(v) {
                first = Some((r, j, v, p));
                break;
            }
        }
    }
    match first {
        Some((r, j, v, p)) => Err(CliError::Data(format!(
            "{source}:{}: column '{}' has the value {}: {p}",
            rows.lines()[r],
            features[j],
            crate::error::shown(v)
        ))),
        None => Ok(()),
    }
}

/// Reads the training data: the main file plus an optional file of unlabeled rows.
fn read_training(args: &FitArgs) -> Result<(Dataset, Vec<String>)> {
    let mut data = read_csv(
        &args.data,
        &ReadOptions {
            label: Some(&args.label),
            features: args.features.as_deref(),
            unlabeled_marker: &args.unlabeled_marker,
            require_label: true,
        },
    )?;
    if data.labeled.is_empty() {
        // A file of a header alone has no cells to blame on the marker (checked before the
        // rows of an --unlabeled file join the main file's unlabeled ones).
        let why = if data.unlabeled.is_empty() {
            "the file has no data rows".to_string()
        } else {
            format!(
                "every cell of label column '{}' is the unlabeled marker",
                args.label
            )
        };
        return Err(CliError::Data(format!(
            "{}: no labeled rows ({why})",
            data.source
        )));
    }
    let mut sources = vec![args.data.clone()];
    if let Some(extra) = &args.unlabeled {
        let more = read_csv(
            extra,
            &ReadOptions {
                label: None,
                features: Some(&data.features),
                unlabeled_marker: "",
                require_label: false,
            },
        )?;
        // The extra file has no label column: its rows are all `labeled` and carry no labels.
        // Moved rather than copied when the main file has no unlabeled rows (the usual split:
        // labeled rows in one file, the pool in another), so that they are never held twice.
        if data.unlabeled.is_empty() {
            data.unlabeled = more.labeled;
        } else {
            data.unlabeled.append(&more.labeled);
        }
        sources.push(extra.clone());
    }
    Ok((data, sources))
}

/// A fitted model and its EM record (None for a supervised fit).
type Fitted<M> = (ComponentMixture<M>, Option<EmReport>);

struct FitJob<'a> {
    x_l: MatRef<'a, f64>,
    y: &'a [usize],
    k: usize,
    x_u: MatRef<'a, f64>,
    em: Option<EmParams>,
    quiet: bool,
    names: Names<'a>,
}

impl FitJob<'_> {
    fn run<S: WeightedFit>(&self, spec: S) -> Result<Fitted<S::Model>> {
        let Some(params) = self.em.clone().filter(|_| self.x_u.nrows() > 0) else {
            let model = spec
                .fit(self.x_l, self.y, self.k)
                .map_err(|e| self.names.model_error(&e))?;
            let m = ComponentMixture::new(model, (0..self.k).collect(), self.k)
                .map_err(|e| self.names.model_error(&e))?;
            return Ok((m, None));
        };
        let components_are_classes = match &params.components {
            Components::Uniform(m) | Components::Bic { max: m } => *m == 1,
            Components::PerClass(list) => list.iter().all(|&m| m == 1),
        };
        let em_error = |e| self.names.em_error(e, components_are_classes);
        let em = SemiSupervisedEm::new(spec, params).map_err(em_error)?;
        let show = !self.quiet && std::io::stderr().is_terminal();
        let bar = show.then(|| {
            let b = indicatif::ProgressBar::new_spinner();
            b.set_style(
                indicatif::ProgressStyle::with_template("{spinner} {msg} [{elapsed}]")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
            );
            b.set_message("semi-supervised EM");
            b
        });
        let mut observer = |r: &ssl_em::IterationRecord| {
            if let Some(b) = &bar {
                b.set_message(format!(
                    "EM iteration {} objective {:.6}",
                    r.iteration, r.objective
                ));
                b.tick();
            }
        };
        let fit = em
            .fit_with_observer(self.x_l, self.y, self.k, self.x_u, &mut observer)
            .map_err(em_error)?;
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        Ok((fit.model, Some(fit.report)))
    }
}

fn priors(args: &FitArgs) -> Priors {
    args.priors.clone().map_or(Priors::Estimated, Priors::Fixed)
}

/// Builds EM options from the flags (None for `--em none`).
fn em_params(args: &FitArgs, n_classes: usize) -> Result<Option<EmParams>> {
    let mode = match args.em {
        EmChoice::None => return Ok(None),
        EmChoice::Soft => EmMode::Soft,
        EmChoice::Hard => EmMode::Hard,
    };
    let lambda = if args.lambda.trim() == "auto" {
        Lambda::Auto(CvOptions {
            grid: args.lambda_grid.clone(),
            folds: args.cv_folds,
        })
    } else {
        Lambda::Fixed(parse_number("--lambda", &args.lambda)?)
    };
    let c = args.components_per_class.trim();
    let components = if let Some(rest) = c.strip_prefix("bic") {
        let max = match rest.strip_prefix(':') {
            Some(m) => m.parse().map_err(|_| {
                CliError::Usage(format!(
                    "--components-per-class bic:MAX needs a whole number, got '{c}'"
                ))
            })?,
            None if rest.is_empty() => 4,
            None => {
                return Err(CliError::Usage(format!(
                    "--components-per-class: cannot read '{c}'"
                )));
            }
        };
        Components::Bic { max }
    } else {
        let list: Vec<usize> = c
            .split(',')
            .map(|v| {
                v.trim().parse::<usize>().map_err(|_| {
                    CliError::Usage(format!(
                        "--components-per-class must be a number, a list or bic[:MAX], got '{c}'"
                    ))
                })
            })
            .collect::<Result<_>>()?;
        match list.as_slice() {
            [m] => Components::Uniform(*m),
            _ if list.len() == n_classes => Components::PerClass(list),
            _ => {
                return Err(CliError::Usage(format!(
                    "--components-per-class lists {} values for {n_classes} classes",
                    list.len()
                )));
            }
        }
    };
    let params = EmParams {
        lambda,
        mode,
        max_iter: args.max_iter,
        tol: args.tol,
        components,
        seed: args.seed,
    };
    params.check().map_err(|e| match e {
        EmError::InvalidParameter { name, rule, value } => option_error(name, rule, &value),
        other => CliError::Usage(other.to_string()),
    })?;
    Ok(Some(params))
}

fn usage_from(e: GenerativeError) -> CliError {
    match e {
        GenerativeError::InvalidParameter { name, rule, value } => option_error(name, rule, &value),
        other => CliError::Usage(other.to_string()),
    }
}

/// A library option's error as the usage error of its flag. The libraries name options by
/// their fields (`var_smoothing`, `lambda grid value`); the flags that say it differently are
/// mapped here (`--folds` and `--lambda-grid-value` were named for flags that do not exist).
fn option_error(name: &str, rule: &str, value: &str) -> CliError {
    CliError::Usage(option_message(name, rule, value))
}

/// "--flag must be rule, got value" for a library's option `name`.
fn option_message(name: &str, rule: &str, value: &str) -> String {
    let flag = match name {
        "lambda grid" | "lambda grid value" => "lambda-grid".to_string(),
        "folds" => "cv-folds".to_string(),
        other => other.replace(['_', ' '], "-"),
    };
    format!("--{flag} must be {rule}, got {value}")
}

/// Runs `ssl-cli fit`.
pub fn fit(args: &FitArgs, quiet: bool) -> Result<()> {
    let (data, sources) = read_training(args)?;
    let mut classes: Vec<String> = data.labeled.label_names().to_vec();
    classes.sort();
    if classes.len() < 2 {
        return Err(CliError::Data(format!(
            "{}: only one class ('{}') among the labeled rows; a classifier needs at least 2",
            data.source, classes[0]
        )));
    }
    let k = classes.len();
    // Each distinct label's class, then each row's.
    let class_of: Vec<usize> = data
        .labeled
        .label_names()
        .iter()
        .map(|l| classes.binary_search(l).unwrap_or(0))
        .collect();
    let y: Vec<usize> = data
        .labeled
        .label_ids()
        .iter()
        .map(|&id| class_of[id as usize])
        .collect();
    let binarize = match args.binarize.trim() {
        "none" => None,
        t => Some(parse_number("--binarize", t)?),
    };
    check_domain(
        args.model,
        binarize,
        &data.labeled,
        &data.source,
        &data.features,
    )?;
    check_domain(
        args.model,
        binarize,
        &data.unlabeled,
        sources.last().map_or(&data.source, |s| s),
        &data.features,
    )?;
    let em = em_params(args, k)?;
    let shrinkage = match args.shrinkage.as_deref().map(str::trim) {
        None => None,
        Some("auto") => Some(Shrinkage::LedoitWolf),
        Some(t) => Some(Shrinkage::Fixed(parse_number("--shrinkage", t)?)),
    };
    let job = FitJob {
        x_l: data.labeled.matrix(),
        y: &y,
        k,
        x_u: data.unlabeled.matrix(),
        em: em.clone(),
        quiet,
        names: Names {
            classes: &classes,
            features: &data.features,
        },
    };
    let gaussian = |structure| GaussianParams {
        structure,
        reg: args.reg,
        shrinkage,
        var_smoothing: args.var_smoothing,
        priors: priors(args),
    };
    let (model, report, options) = match args.model {
        ModelKind::Lda | ModelKind::Qda | ModelKind::GaussianNb => {
            let structure = match args.model {
                ModelKind::Lda => CovarianceStructure::Tied,
                ModelKind::Qda => CovarianceStructure::Full,
                _ => CovarianceStructure::Diagonal,
            };
            let p = gaussian(structure);
            let opts = serde_json::to_value(&p).unwrap_or_default();
            let (m, r) = job.run(p.check().map_err(usage_from)?)?;
            (FittedModel::Gaussian(m), r, opts)
        }
        ModelKind::BernoulliNb => {
            let p = BernoulliNbParams {
                alpha: args.alpha,
                binarize,
                priors: priors(args),
            };
            let opts = serde_json::to_value(&p).unwrap_or_default();
            let (m, r) = job.run(p.check().map_err(usage_from)?)?;
            (FittedModel::Bernoulli(m), r, opts)
        }
        ModelKind::MultinomialNb => {
            let p = MultinomialNbParams {
                alpha: args.alpha,
                priors: priors(args),
            };
            let opts = serde_json::to_value(&p).unwrap_or_default();
            let (m, r) = job.run(p.check().map_err(usage_from)?)?;
            (FittedModel::Multinomial(m), r, opts)
        }
        ModelKind::CategoricalNb => {
            // Categories seen anywhere (labeled or unlabeled) exist from the first fit on.
            let d = data.features.len();
            let mut min_categories = vec![1usize; d];
            for rows in [&data.labeled, &data.unlabeled] {
                for (j, m) in min_categories.iter_mut().enumerate() {
                    for v in rows.column(j) {
                        *m = (*m).max(*v as usize + 1);
                    }
                }
            }
            let p = CategoricalNbParams {
                alpha: args.alpha,
                priors: priors(args),
                min_categories: Some(min_categories),
            };
            let opts = serde_json::to_value(&p).unwrap_or_default();
            let (m, r) = job.run(p.check().map_err(usage_from)?)?;
            (FittedModel::Categorical(m), r, opts)
        }
    };
    if !quiet {
        summarise(&data, &classes, args, report.as_ref());
    }
    let file = ModelFile {
        format: FORMAT.to_string(),
        version: VERSION,
        kind: args.model,
        classes,
        features: data.features.clone(),
        label_column: args.label.clone(),
        model,
        training: Training {
            data: sources,
            options: serde_json::json!({ "model": options, "em": em, "cli": args }),
            em: report,
        },
    };
    file.save(&args.out)?;
    if !quiet {
        eprintln!("wrote {}", args.out);
    }
    Ok(())
}

fn summarise(data: &Dataset, classes: &[String], args: &FitArgs, report: Option<&EmReport>) {
    eprintln!(
        "{} labeled rows, {} unlabeled rows, {} features, classes: {}",
        data.labeled.len(),
        data.unlabeled.len(),
        data.features.len(),
        classes.join(", ")
    );
    let Some(r) = report else {
        if args.em == EmChoice::None && !data.unlabeled.is_empty() {
            eprintln!(
                "supervised fit (--em none): {} unlabeled rows ignored",
                data.unlabeled.len()
            );
        } else {
            eprintln!("supervised fit (no unlabeled rows)");
        }
        return;
    };
    if let Some(curve) = &r.lambda_curve {
        eprintln!("lambda chosen by cross-validation (held-out log-loss):");
        for s in curve {
            let loss = s
                .log_loss
                .map_or("failed".to_string(), |l| format!("{l:.4}"));
            eprintln!(
                "  lambda {:<6} log-loss {loss}{}",
                s.lambda,
                if s.lambda == r.lambda {
                    "  <- chosen"
                } else {
                    ""
                }
            );
        }
    }
    if let Some(b) = &r.bic {
        let list: Vec<String> = b.iter().map(|(m, s)| format!("m={m}: {s:.1}")).collect();
        eprintln!(
            "components per class by BIC: {} -> {:?}",
            list.join(", "),
            r.components_per_class
        );
    }
    eprintln!(
        "{:?} EM, lambda {}: {} iterations, {}, objective {:.6}",
        r.mode,
        r.lambda,
        r.iterations,
        if r.converged {
            "converged"
        } else {
            "NOT converged (max-iter reached)"
        },
        r.objective
    );
    for w in &r.warnings {
        eprintln!("warning: {w}");
    }
    if let Some(d) = &r.diagnostic {
        let verdict = match d.verdict {
            Verdict::Ok => "ok: the labeled rows support the semi-supervised model",
            Verdict::Suspect => "SUSPECT: unlabeled rows may be biasing the model",
            Verdict::Dominated => "DOMINATED: unlabeled rows are biasing the model",
        };
        eprintln!(
            "dominance check: {verdict} (likelihood ratio {:.2} on {} parameters, p = {:.3e}; largest mean shift {:.2} sd)",
            d.likelihood_ratio,
            d.degrees_of_freedom,
            d.p_value,
            d.mean_shift.iter().copied().fold(0.0, f64::max)
        );
        if let Some(s) = &d.suggestion {
            eprintln!("suggestion: {s}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::read_csv_bytes;

    fn rows_of(csv: &str) -> (Dataset, Vec<String>) {
        let data = read_csv_bytes(
            csv.as_bytes(),
            "d.csv",
            &ReadOptions {
                label: Some("y"),
                features: None,
                unlabeled_marker: "",
                require_label: true,
            },
        )
        .expect("parses");
        let features = data.features.clone();
        (data, features)
    }

    /// The value named is the first bad one in file order (its row first, then its column),
    /// although the columns are searched one after another.
    #[test]
    fn the_first_bad_value_in_file_order_is_named() {
        let cases = [
            // A later column's bad value in an earlier row wins over an earlier column's.
            (
                "a,b,c,y\n1,2,3,p\n4,5,-6,q\n-7,8,9,p\n",
                "d.csv:3: column 'c' has the value -6",
            ),
            // In one row, the first column.
            (
                "a,b,c,y\n1,2,3,p\n4,-5,-6,q\n",
                "d.csv:3: column 'b' has the value -5",
            ),
            // The first column's bad value, when its row comes first.
            (
                "a,b,c,y\n-1,2,3,p\n4,-5,-6,q\n",
                "d.csv:2: column 'a' has the value -1",
            ),
            (
                "a,b,c,y\n1,2,3,p\n4,5,6,q\n1,2,-0.5,p\n",
                "d.csv:4: column 'c' has the value -0.5",
            ),
        ];
        for (csv, want) in cases {
            let (data, features) = rows_of(csv);
            let err = check_domain(
                ModelKind::MultinomialNb,
                None,
                &data.labeled,
                "d.csv",
                &features,
            )
            .expect_err("a negative count");
            assert!(err.to_string().contains(want), "{err} (want {want})");
        }
        let (data, features) = rows_of("a,b,y\n1,2,p\n0,5,q\n");
        assert!(
            check_domain(
                ModelKind::MultinomialNb,
                None,
                &data.labeled,
                "d.csv",
                &features
            )
            .is_ok()
        );
    }
}
