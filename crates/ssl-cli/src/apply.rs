//! `ssl-cli predict` and `ssl-cli eval`: apply a model file to the rows of a CSV file. Feature
//! columns are matched by name, so extra columns (such as the label) are ignored.

use std::fmt::Write as _;

use faer::MatRef;
use generative::GenerativeError;

use crate::cli::{EvalArgs, PredictArgs};
use crate::data::{Dataset, ReadOptions, read_csv, write_atomic_with};
use crate::error::{CliError, Result};
use crate::model_file::ModelFile;

/// Probabilities below this are clipped in the log-loss (as scikit-learn's `log_loss`).
const LOG_LOSS_EPS: f64 = 1e-15;

/// Most posteriors `eval` takes at once (8 MB; 104,857 rows of ten classes, 524 of 2,000).
const EVAL_BATCH_VALUES: usize = 1 << 20;

/// Most rows of predictions formatted by one task (see [`predict`]).
const FORMAT_ROWS: usize = 16_384;

/// Most values (rows × (classes + 1)) formatted by one task: about 2.5 MB of text. Why: with
/// pieces of [`FORMAT_ROWS`] whatever the classes, a piece of 20,000 classes' posteriors was
/// 6.5 GB of text, and its batch's posteriors 21 GB.
const FORMAT_VALUES: usize = 1 << 17;

/// Rows per task of `predict`'s formatting, for `k` numbers a row after the class.
fn piece_rows(k: usize) -> usize {
    (FORMAT_VALUES / (k + 1)).clamp(1, FORMAT_ROWS)
}

fn read_for(model: &ModelFile, path: &str, label: Option<&str>) -> Result<Dataset> {
    read_csv(
        path,
        &ReadOptions {
            label,
            features: Some(&model.features),
            unlabeled_marker: "",
            require_label: label.is_some(),
        },
    )
}

/// Posterior probabilities of the rows `range`, with input errors mapped to file lines.
fn proba(
    model: &ModelFile,
    data: &Dataset,
    rows: &crate::data::Rows,
    range: std::ops::Range<usize>,
) -> Result<faer::Mat<f64>> {
    let x = rows.matrix().subrows(range.start, range.len());
    model
        .model
        .classifier()
        .predict_proba(x)
        .map_err(|e| input_error(model, data, rows, range.start, e))
}

/// Predicted classes alone: no n × K probabilities are kept (at K = 20,000 classes and 36,864
/// rows they were 5.9 GB).
fn classes(model: &ModelFile, data: &Dataset, rows: &crate::data::Rows) -> Result<Vec<usize>> {
    model
        .model
        .classifier()
        .predict(rows.matrix())
        .map_err(|e| input_error(model, data, rows, 0, e))
}

/// A model's error on input rows from row `first` on (a batch's), with a bad value's row
/// mapped to its file line.
fn input_error(
    model: &ModelFile,
    data: &Dataset,
    rows: &crate::data::Rows,
    first: usize,
    e: GenerativeError,
) -> CliError {
    match e {
        GenerativeError::InvalidInput {
            row,
            col,
            value,
            rule,
        } => CliError::Data(format!(
            "{}:{}: column '{}' has the value {}: {rule}",
            data.source,
            rows.lines()[first + row],
            model.features[col],
            crate::error::shown(value)
        )),
        other => CliError::Data(format!("{}: {other}", data.source)),
    }
}

fn argmax(p: MatRef<'_, f64>, i: usize) -> usize {
    (0..p.ncols()).fold(0, |b, k| if p[(i, k)] > p[(i, b)] { k } else { b })
}

/// Quotes a CSV field when needed.
fn field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Runs `ssl-cli predict`.
pub fn predict(args: &PredictArgs) -> Result<()> {
    let model = ModelFile::load(&args.model)?;
    let data = read_for(&model, &args.data, None)?;
    let rows = &data.labeled;
    let mut header = String::from("prediction");
    if args.proba {
        for c in &model.classes {
            header.push(',');
            header.push_str(&field(&format!("p_{c}")));
        }
        // Every bad value is reported before any output: the posteriors below are taken batch
        // by batch as the rows are written.
        model
            .model
            .classifier()
            .check_input(rows.matrix())
            .map_err(|e| input_error(&model, &data, rows, 0, e))?;
    }
    header.push('\n');
    let names: Vec<String> = model.classes.iter().map(|c| field(c)).collect();
    // Without --proba, the classes alone (the argmax of the scores the probabilities would
    // normalise), so no n × K matrix is made.
    let predicted = if args.proba {
        Vec::new()
    } else {
        classes(&model, &data, rows)?
    };
    // The rows `rows` of the output; with --proba, `p` holds their posteriors (row 0 is the
    // range's first).
    let lines = |range: std::ops::Range<usize>, p: Option<MatRef<'_, f64>>| {
        let mut text = String::new();
        let mut number = zmij::Buffer::new();
        for i in range.clone() {
            match p {
                Some(p) => {
                    let at = i - range.start;
                    text.push_str(&names[argmax(p, at)]);
                    for k in 0..p.ncols() {
                        text.push(',');
                        push_number(&mut text, p[(at, k)], &mut number);
                    }
                }
                None => text.push_str(&names[predicted[i]]),
            }
            text.push('\n');
        }
        text
    };
    // Batches of a few pieces of rows per thread: each batch's posteriors (with --proba) taken
    // at once, then its pieces formatted in parallel and written in row order. Before, the
    // n × K posteriors and then the whole output text were made first (for 1e6 rows of ten
    // classes, 80 MB and 212 MB), and the text written at the end.
    let n = rows.len();
    let piece = piece_rows(if args.proba { model.classes.len() } else { 0 });
    let batch_rows = piece * 4 * rayon::current_num_threads().max(1);
    let write_all = |to: &mut dyn std::io::Write, name: &str| -> Result<()> {
        let io = |e| CliError::io(name, e);
        to.write_all(header.as_bytes()).map_err(io)?;
        for b0 in (0..n).step_by(batch_rows) {
            use rayon::prelude::*;
            let b1 = (b0 + batch_rows).min(n);
            let p = if args.proba {
                Some(proba(&model, &data, rows, b0..b1)?)
            } else {
                None
            };
            let pieces: Vec<std::ops::Range<usize>> = (b0..b1)
                .step_by(piece)
                .map(|r0| r0..(r0 + piece).min(b1))
                .collect();
            let texts: Vec<String> = pieces
                .par_iter()
                .map(|r| {
                    let p = p
                        .as_ref()
                        .map(|p| p.as_ref().subrows(r.start - b0, r.len()));
                    lines(r.clone(), p)
                })
                .collect();
            for t in &texts {
                to.write_all(t.as_bytes()).map_err(io)?;
            }
        }
        Ok(())
    };
    match &args.out {
        Some(path) => write_atomic_with(path, |file| write_all(file, path)),
        None => write_all(&mut std::io::stdout().lock(), "<stdout>"),
    }
}

/// Appends `v` as `{:?}` writes it (the shortest text that reads back to the same bits, the
/// nearest to `v` of those), by `zmij` where that writes the same text: values below 2 in
/// magnitude, but those in [1e-5, 1e-4), where `zmij` writes a decimal (0.000015) and `{:?}`
/// an exponent (1.5e-5), and those whose significand ends in 35 zero bits or more (0, 0.5, 1,
/// ...). Where a value's exact decimal lies halfway between two shortest texts, `zmij` rounds
/// up and `{:?}` to even (233115890514796.125: `zmij` …13, `{:?}` …12); a value below 2 with
/// a set bit among its last 35 has at least 19 significant digits exactly, one more than such a
/// halfway point has. Everything else takes `{:?}` itself.
///
/// Why: `{:?}` took 96 ns a value, `zmij` 33 (2 million values in [0, 1], one thread, Zen 4
/// EPYC, ninety-fourth round), and a million rows' posteriors are millions of values.
fn push_number(text: &mut String, v: f64, number: &mut zmij::Buffer) {
    const LOW_35_BITS: u64 = (1 << 35) - 1;
    let a = v.abs();
    if a < 2.0 && !(1e-5..1e-4).contains(&a) && v.to_bits() & LOW_35_BITS != 0 {
        text.push_str(number.format_finite(v));
    } else {
        let _ = write!(text, "{v:?}");
    }
}

/// Evaluation figures.
#[derive(Debug, serde::Serialize)]
pub struct Evaluation {
    pub n_rows: usize,
    pub accuracy: f64,
    pub log_loss: f64,
    pub classes: Vec<String>,
    /// confusion[i][j]: rows of true class i predicted as j.
    pub confusion: Vec<Vec<usize>>,
    pub precision: Vec<Option<f64>>,
    pub recall: Vec<Option<f64>>,
}

/// Runs `ssl-cli eval`.
pub fn eval(args: &EvalArgs) -> Result<()> {
    let model = ModelFile::load(&args.model)?;
    let data = read_for(&model, &args.data, Some(&args.label))?;
    let rows = &data.labeled;
    if rows.is_empty() {
        return Err(CliError::Data(format!(
            "{}: no labeled rows to evaluate in column '{}'",
            data.source, args.label
        )));
    }
    let k = model.classes.len();
    // Each distinct label's class, looked up once rather than once per row.
    let class_of: Vec<Option<usize>> = rows
        .label_names()
        .iter()
        .map(|l| model.classes.iter().position(|c| c == l))
        .collect();
    let truth: Vec<usize> = rows
        .label_ids()
        .iter()
        .zip(rows.lines())
        .map(|(&id, line)| {
            class_of[id as usize].ok_or_else(|| {
                CliError::Data(format!(
                    "{}:{line}: label '{}' is not a class of the model (classes: {})",
                    data.source,
                    rows.label_names()[id as usize],
                    model.classes.join(", ")
                ))
            })
        })
        .collect::<Result<_>>()?;
    // The posteriors a batch of rows at a time (no n × K matrix), each row's terms taken in
    // row order, so the same sums as over all rows at once.
    let mut confusion = vec![vec![0usize; k]; k];
    let mut loss = 0.0;
    let batch_rows = (EVAL_BATCH_VALUES / k).max(1);
    for b0 in (0..truth.len()).step_by(batch_rows) {
        let b1 = (b0 + batch_rows).min(truth.len());
        let p = proba(&model, &data, rows, b0..b1)?;
        for (i, &t) in truth[b0..b1].iter().enumerate() {
            confusion[t][argmax(p.as_ref(), i)] += 1;
            loss -= p[(i, t)].max(LOG_LOSS_EPS).ln();
        }
    }
    let n = truth.len();
    let correct: usize = (0..k).map(|c| confusion[c][c]).sum();
    let precision: Vec<Option<f64>> = (0..k)
        .map(|c| {
            let col: usize = (0..k).map(|t| confusion[t][c]).sum();
            (col > 0).then(|| confusion[c][c] as f64 / col as f64)
        })
        .collect();
    let recall: Vec<Option<f64>> = (0..k)
        .map(|c| {
            let row: usize = confusion[c].iter().sum();
            (row > 0).then(|| confusion[c][c] as f64 / row as f64)
        })
        .collect();
    let ev = Evaluation {
        n_rows: n,
        accuracy: correct as f64 / n as f64,
        log_loss: loss / n as f64,
        classes: model.classes.clone(),
        confusion,
        precision,
        recall,
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&ev).map_err(|e| CliError::Data(e.to_string()))?
        );
        return Ok(());
    }
    let fmt = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.4}"));
    println!(
        "rows: {}\naccuracy: {:.4}\nlog-loss: {:.4}\n",
        ev.n_rows, ev.accuracy, ev.log_loss
    );
    let w = ev.classes.iter().map(String::len).max().unwrap_or(5).max(5);
    println!("{:<w$}  precision  recall", "class");
    for c in 0..k {
        println!(
            "{:<w$}  {:>9}  {:>6}",
            ev.classes[c],
            fmt(ev.precision[c]),
            fmt(ev.recall[c])
        );
    }
    println!("\nconfusion (rows: true, columns: predicted)");
    print!("{:<w$}", "");
    for c in &ev.classes {
        print!("  {c:>w$}");
    }
    println!();
    for (c, row) in ev.confusion.iter().enumerate() {
        print!("{:<w$}", ev.classes[c]);
        for v in row {
            print!("  {v:>w$}");
        }
        println!();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `push_number` writes `{:?}`'s text for every value: the edges of the ranges where `zmij`
    /// and `{:?}` differ, zeros, subnormals, extremes, non-finite values, a halfway value, and
    /// 4 million values from an xorshift generator (any bits, any value in [0, 1], values from
    /// 1e-5 to 1e-4, near 1 and 1e16, and short dyadic fractions k / 2^e).
    #[test]
    fn numbers_are_written_as_debug_writes_them() {
        let mut number = zmij::Buffer::new();
        let mut check = |v: f64| {
            let mut text = String::new();
            push_number(&mut text, v, &mut number);
            assert_eq!(text, format!("{v:?}"), "{:#x}", v.to_bits());
        };
        for edge in [1e-5f64, 1e-4, 1e16, 2.0, 1.0, 0.5] {
            for v in [edge, edge.next_down(), edge.next_up()] {
                check(v);
                check(-v);
            }
        }
        for v in [
            0.0,
            -0.0,
            f64::MIN_POSITIVE,
            5e-324,
            f64::MAX,
            f64::MIN,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            1e15,
            123456.0,
            0.1 + 0.2,
            f64::from_bits(0x42ea_8090_bb0f_6d84),
            26215.0 / 262_144.0,
        ] {
            check(v);
        }
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for i in 0..4_000_000u64 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let unit = (state >> 11) as f64 / (1u64 << 53) as f64;
            check(match i % 5 {
                0 => f64::from_bits(state),
                1 => unit,
                2 => 1e-5 + unit * 1e-4,
                3 => ((state >> 40) | 1) as f64 / (1u64 << (18 + (state & 31))) as f64,
                _ => [1.0 - unit * 1e-3, 1e16 * (0.5 + unit)][(state & 1) as usize],
            });
        }
    }
}
