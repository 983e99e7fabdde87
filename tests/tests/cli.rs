//! End-to-end tests of the `ssl-cli` binary: fit → predict → eval round trips for every model on
//! iris and wine with most labels removed, the demo, and one test per bad-input case (exit code,
//! message, and no output file left behind).

#![allow(clippy::unwrap_used)]

use std::path::Path;

use tests::{data_file, run_in, run_with_stdin_file, with_labels_removed};

fn write(dir: &Path, name: &str, text: &str) -> String {
    std::fs::write(dir.join(name), text).unwrap();
    name.to_string()
}

fn eval_json(dir: &Path, model: &str, data: &str) -> serde_json::Value {
    let r = run_in(
        dir,
        &[
            "eval", "--model", model, "--data", data, "--label", "label", "--json",
        ],
        None,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    serde_json::from_str(r.stdout.trim()).unwrap()
}

/// (dataset, model, extra flags, feature transform, minimum accuracy on all rows)
type Case = (
    &'static str,
    &'static str,
    &'static [&'static str],
    fn(f64) -> f64,
    f64,
);

#[test]
fn fit_predict_eval_round_trips_for_every_model() {
    let identity: fn(f64) -> f64 = |v| v;
    let floor: fn(f64) -> f64 = f64::floor;
    let cases: &[Case] = &[
        ("iris", "lda", &[], identity, 0.95),
        ("iris", "qda", &["--reg", "1e-3"], identity, 0.9),
        ("iris", "gaussian-nb", &[], identity, 0.9),
        (
            "iris",
            "bernoulli-nb",
            &["--binarize", "2.5"],
            identity,
            0.6,
        ),
        ("iris", "multinomial-nb", &["--em", "none"], identity, 0.85),
        ("iris", "categorical-nb", &[], floor, 0.7),
        ("wine", "lda", &["--lambda", "0.3"], identity, 0.95),
        (
            "wine",
            "qda",
            &["--reg", "1e-2", "--em", "hard"],
            identity,
            0.8,
        ),
        ("wine", "gaussian-nb", &[], identity, 0.9),
        (
            "wine",
            "bernoulli-nb",
            &["--binarize", "2.0"],
            identity,
            0.6,
        ),
        ("wine", "multinomial-nb", &["--em", "none"], identity, 0.8),
        ("wine", "categorical-nb", &["--alpha", "0.5"], floor, 0.6),
    ];
    for (data, model, flags, transform, min_acc) in cases {
        let dir = tempfile::tempdir().unwrap();
        let train = write(
            dir.path(),
            "train.csv",
            &with_labels_removed(&format!("{data}.csv"), 3, transform),
        );
        let full = write(
            dir.path(),
            "full.csv",
            &with_labels_removed(&format!("{data}.csv"), 1, transform),
        );
        let mut args = vec![
            "fit", "--model", model, "--data", &train, "--label", "label", "--out", "m.json",
            "--quiet",
        ];
        args.extend_from_slice(flags);
        let r = run_in(dir.path(), &args, None);
        assert_eq!(r.code, 0, "{data} {model}: {}", r.stderr);
        let p = run_in(
            dir.path(),
            &["predict", "--model", "m.json", "--data", &full, "--proba"],
            None,
        );
        assert_eq!(p.code, 0, "{}", p.stderr);
        let lines: Vec<&str> = p.stdout.lines().collect();
        assert_eq!(lines.len(), 1 + if *data == "iris" { 150 } else { 178 });
        assert!(lines[0].starts_with("prediction,p_"), "{}", lines[0]);
        for line in &lines[1..] {
            let cells: Vec<&str> = line.split(',').collect();
            let s: f64 = cells[1..].iter().map(|c| c.parse::<f64>().unwrap()).sum();
            assert!((s - 1.0).abs() < 1e-9, "{line}");
        }
        let ev = eval_json(dir.path(), "m.json", &full);
        let acc = ev["accuracy"].as_f64().unwrap();
        eprintln!("{data} {model}: accuracy {acc:.4}");
        assert!(acc >= *min_acc, "{data} {model}: accuracy {acc}");
        assert!(ev["log_loss"].as_f64().unwrap().is_finite());
        let conf = ev["confusion"].as_array().unwrap();
        let total: u64 = conf
            .iter()
            .flat_map(|r| r.as_array().unwrap().iter().map(|v| v.as_u64().unwrap()))
            .sum();
        assert_eq!(total as usize, lines.len() - 1);
        assert_eq!(ev["classes"].as_array().unwrap().len(), 3);
        let i = run_in(dir.path(), &["inspect", "--model", "m.json"], None);
        assert_eq!(i.code, 0);
        assert!(i.stdout.contains("classes (3)"), "{}", i.stdout);
    }
}

/// A model file less the paths it records (which name its input and output).
fn model_less_paths(dir: &Path, name: &str) -> serde_json::Value {
    let mut m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join(name)).unwrap()).unwrap();
    let training = &mut m["training"];
    training["data"] = serde_json::Value::Null;
    training["options"]["cli"]["data"] = serde_json::Value::Null;
    training["options"]["cli"]["out"] = serde_json::Value::Null;
    m
}

#[test]
fn standard_input_redirected_from_a_file_reads_from_where_it_stands() {
    use std::io::{Seek, SeekFrom};
    let dir = tempfile::tempdir().unwrap();
    let text = with_labels_removed("wine.csv", 4, |v| v);
    write(dir.path(), "w.csv", &text);
    // The same rows after a line that a reader starting at byte 0 would take for the header.
    let junk = "not,the,header\n";
    write(dir.path(), "junk.csv", &format!("{junk}{text}"));
    let fit = |data: &'static str, out: &'static str| {
        [
            "fit", "--model", "qda", "--reg", "1e-2", "--data", data, "--label", "label", "--out",
            out,
        ]
    };
    let r = run_in(dir.path(), &fit("w.csv", "file.json"), None);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // From its start (read through a map), and from past the junk line (read as a stream).
    let whole = std::fs::File::open(dir.path().join("w.csv")).unwrap();
    let r = run_with_stdin_file(dir.path(), &fit("-", "start.json"), whole);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let mut past = std::fs::File::open(dir.path().join("junk.csv")).unwrap();
    past.seek(SeekFrom::Start(junk.len() as u64)).unwrap();
    let r = run_with_stdin_file(dir.path(), &fit("-", "past.json"), past);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let want = model_less_paths(dir.path(), "file.json");
    assert_eq!(want["classes"].as_array().unwrap().len(), 3);
    assert_eq!(model_less_paths(dir.path(), "start.json"), want);
    assert_eq!(model_less_paths(dir.path(), "past.json"), want);
}

#[test]
fn semi_supervised_fit_reports_lambda_and_verdict_and_uses_stdin_and_second_file() {
    let dir = tempfile::tempdir().unwrap();
    let text = with_labels_removed("iris.csv", 3, |v| v);
    let r = run_in(
        dir.path(),
        &[
            "fit", "--model", "lda", "--data", "-", "--label", "label", "--out", "m.json",
            "--lambda", "auto",
        ],
        Some(&text),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains("<- chosen") && r.stderr.contains("dominance check"),
        "{}",
        r.stderr
    );
    let model: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("m.json")).unwrap()).unwrap();
    assert_eq!(model["format"], "ssl-cli-model");
    assert_eq!(
        model["classes"],
        serde_json::json!(["setosa", "versicolor", "virginica"])
    );
    assert!(
        model["training"]["em"]["lambda_curve"]
            .as_array()
            .unwrap()
            .len()
            == 6
    );
    // Labeled rows in one file with marker '?', unlabeled rows in a second file.
    let labeled: String = text
        .lines()
        .enumerate()
        .filter(|(i, l)| *i == 0 || !l.ends_with(','))
        .map(|(_, l)| format!("{l}\n"))
        .collect();
    let unlabeled: String = text
        .lines()
        .enumerate()
        .filter(|(i, l)| *i == 0 || l.ends_with(','))
        .map(|(_, l)| format!("{}\n", l.trim_end_matches(',')))
        .collect();
    let unlabeled = unlabeled.replacen(",label", "", 1);
    write(dir.path(), "lab.csv", &labeled);
    write(dir.path(), "unl.csv", &unlabeled);
    // A Gaussian NB fit with these data options, which must see 50 labeled and 100 unlabeled
    // rows.
    let fit_gnb = |data: &[&str], out: &str| {
        let mut args = vec![
            "fit",
            "--model",
            "gaussian-nb",
            "--label",
            "label",
            "--out",
            out,
        ];
        args.extend_from_slice(data);
        let r = run_in(dir.path(), &args, None);
        assert_eq!(r.code, 0, "{}", r.stderr);
        assert!(
            r.stderr.contains("50 labeled rows, 100 unlabeled rows"),
            "{out}: {}",
            r.stderr
        );
    };
    fit_gnb(&["--data", "lab.csv", "--unlabeled", "unl.csv"], "m2.json");
    let marker = text.replace(",\n", ",?\n");
    write(dir.path(), "marker.csv", &marker);
    fit_gnb(
        &["--data", "marker.csv", "--unlabeled-marker", "?"],
        "m3.json",
    );
    // Half the unlabeled rows in the main file, the other half in a second file: they are
    // appended to the first half (where a main file without unlabeled rows takes the second
    // file's rows whole), and the three fits see the same rows in the same order.
    let mut seen = 0;
    let (mut main, mut rest) = (String::new(), String::from("x0,x1,x2,x3\n"));
    for (i, l) in text.lines().enumerate() {
        if i > 0 && l.ends_with(',') {
            seen += 1;
            if seen > 50 {
                rest.push_str(&format!("{}\n", l.trim_end_matches(',')));
                continue;
            }
        }
        main.push_str(&format!("{l}\n"));
    }
    assert_eq!(seen, 100);
    write(dir.path(), "main.csv", &main);
    write(dir.path(), "rest.csv", &rest);
    fit_gnb(
        &["--data", "main.csv", "--unlabeled", "rest.csv"],
        "m4.json",
    );
    let model = |f: &str| -> serde_json::Value {
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join(f)).unwrap()).unwrap();
        v["model"].clone()
    };
    assert!(!model("m3.json").is_null());
    assert_eq!(model("m2.json"), model("m3.json"));
    assert_eq!(model("m4.json"), model("m3.json"));
}

#[test]
fn model_files_are_identical_on_one_and_two_threads() {
    let dir = tempfile::tempdir().unwrap();
    let train = write(
        dir.path(),
        "t.csv",
        &with_labels_removed("wine.csv", 4, |v| v),
    );
    for t in ["1", "2"] {
        let out = format!("m{t}.json");
        let r = run_in(
            dir.path(),
            &[
                "fit",
                "--threads",
                t,
                "--model",
                "qda",
                "--reg",
                "0.01",
                "--data",
                &train,
                "--label",
                "label",
                "--out",
                &out,
                "-q",
            ],
            None,
        );
        assert_eq!(r.code, 0, "{}", r.stderr);
    }
    let read = |name: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(dir.path().join(name)).unwrap()).unwrap()
    };
    let (a, b) = (read("m1.json"), read("m2.json"));
    // Parameters and the whole EM record agree exactly (the options record differs in --out).
    assert!(
        a["model"] == b["model"],
        "model parameters differ between 1 and 2 threads"
    );
    assert!(
        a["training"]["em"] == b["training"]["em"],
        "EM records differ between 1 and 2 threads"
    );
}

#[test]
fn demo_runs_without_files_and_writes_a_figure() {
    let dir = tempfile::tempdir().unwrap();
    let r = run_in(dir.path(), &["demo"], None);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("semi-supervised") && r.stdout.contains("accuracy on unlabeled points"),
        "{}",
        r.stdout
    );
    let svg = std::fs::read_to_string(dir.path().join("ssl-demo.svg")).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("<polyline") && svg.contains("semi-supervised EM")
    );
    // Plot a fitted model too.
    let train = write(
        dir.path(),
        "t.csv",
        &with_labels_removed("iris.csv", 3, |v| v),
    );
    assert_eq!(
        run_in(
            dir.path(),
            &[
                "fit", "--model", "lda", "--data", &train, "--label", "label", "--out", "m.json",
                "-q"
            ],
            None
        )
        .code,
        0
    );
    let r = run_in(
        dir.path(),
        &[
            "plot", "--model", "m.json", "--data", &train, "--out", "fig.svg",
        ],
        None,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        std::fs::read_to_string(dir.path().join("fig.svg"))
            .unwrap()
            .contains("LDA projection")
    );
}

/// A model of one feature is drawn against its posteriors: a projection onto two discriminant
/// directions put every row on one horizontal line, under a second axis of width zero.
#[test]
fn plot_of_one_feature_draws_posteriors_along_the_feature() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::from("x,label\n");
    for i in 0..120 {
        let class = i % 2;
        // Two overlapping groups, so posteriors take many values between 0.5 and 1.
        let x = 2.5 * class as f64 + ((i * 37) % 23) as f64 / 7.0 - 1.5;
        let label = if i < 30 {
            class.to_string()
        } else {
            String::new()
        };
        text.push_str(&format!("{x},{label}\n"));
    }
    let train = write(dir.path(), "one.csv", &text);
    let fit = run_in(
        dir.path(),
        &[
            "fit", "--model", "qda", "--data", &train, "--label", "label", "--out", "m.json", "-q",
        ],
        None,
    );
    assert_eq!(fit.code, 0, "{}", fit.stderr);
    let r = run_in(
        dir.path(),
        &[
            "plot", "--model", "m.json", "--data", &train, "--out", "fig.svg",
        ],
        None,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let svg = std::fs::read_to_string(dir.path().join("fig.svg")).unwrap();
    assert!(svg.contains("posteriors along x") && svg.contains("P(class | x)"));
    assert!(!svg.contains("projection"));
    // Rows sit at their posteriors: many heights, not one line.
    let heights: std::collections::BTreeSet<&str> = svg
        .split("<circle")
        .skip(1)
        .filter_map(|c| c.split("cy=\"").nth(1)?.split('"').next())
        .collect();
    assert!(heights.len() > 10, "{heights:?}");
    // One posterior curve per class, traced over many points.
    let curves = svg
        .split("<polyline points=\"")
        .skip(1)
        .filter(|p| p.split('"').next().unwrap().split(' ').count() > 100)
        .count();
    assert_eq!(curves, 2);
}

#[test]
fn every_command_has_help_with_examples() {
    let dir = tempfile::tempdir().unwrap();
    for cmd in ["fit", "predict", "eval", "inspect", "demo", "plot"] {
        let r = run_in(dir.path(), &[cmd, "--help"], None);
        assert_eq!(r.code, 0);
        assert!(r.stdout.contains("Example"), "{cmd}: {}", r.stdout);
        // Every option says what it is: no option line ends at its name (eval's, inspect's
        // and plot's --model, --data and --out did).
        // (clap puts the description after the name, or, in the long format, on the next line,
        // indented further.)
        let lines: Vec<&str> = r.stdout.lines().collect();
        let indent = |l: &str| l.len() - l.trim_start().len();
        for (i, line) in lines.iter().enumerate() {
            let t = line.trim();
            if t.starts_with("--") || (t.starts_with('-') && t.chars().nth(2) == Some(',')) {
                let inline = t
                    .split_once("  ")
                    .is_some_and(|(_, rest)| !rest.trim().is_empty());
                let below = lines
                    .get(i + 1)
                    .is_some_and(|next| !next.trim().is_empty() && indent(next) > indent(line));
                assert!(
                    inline || below,
                    "{cmd}: option without a description: {line}"
                );
            }
        }
    }
}

/// Runs a failing fit and checks exit code, message and that `--out` was not created.
fn assert_fit_fails(csv: &str, extra: &[&str], code: i32, message: &str) {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "d.csv", csv);
    let mut args = vec![
        "fit", "--data", "d.csv", "--label", "y", "--out", "out.json",
    ];
    if !extra.contains(&"--model") {
        args.extend(["--model", "qda"]);
    }
    args.extend_from_slice(extra);
    let r = run_in(dir.path(), &args, None);
    assert_eq!(r.code, code, "{}", r.stderr);
    assert!(
        r.stderr.contains(message),
        "expected '{message}' in: {}",
        r.stderr
    );
    assert!(!dir.path().join("out.json").exists());
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers.len(), 1, "left behind: {leftovers:?}");
}

const GOOD: &str = "a,b,y\n1,2,p\n2,1,p\n3,3,p\n1.5,2.5,p\n7,8,q\n8,7,q\n9,9,q\n7.5,8.5,q\n4,4,\n";

#[test]
fn bad_input_missing_header() {
    assert_fit_fails("", &[], 1, "d.csv: missing header row");
}

#[test]
fn bad_input_duplicate_header() {
    assert_fit_fails(
        "a,a,y\n1,2,p\n",
        &[],
        1,
        "d.csv:1: duplicate column name 'a'",
    );
}

#[test]
fn bad_input_ragged_row() {
    assert_fit_fails(
        "a,b,y\n1,2,p\n3,p\n",
        &[],
        1,
        "d.csv:3: expected 3 fields (as in the header), found 2",
    );
}

#[test]
fn bad_input_non_numeric_cell() {
    assert_fit_fails(
        "a,b,y\n1,2,p\n3,x4,q\n",
        &[],
        1,
        "d.csv:3: column 'b' has the non-numeric value 'x4'",
    );
}

#[test]
fn bad_input_nan_and_inf_cells() {
    assert_fit_fails(
        "a,b,y\n1,nan,p\n",
        &[],
        1,
        "d.csv:2: column 'b' has the non-finite value 'nan'",
    );
    assert_fit_fails(
        "a,b,y\n1,2,p\n-inf,2,q\n",
        &[],
        1,
        "d.csv:3: column 'a' has the non-finite value '-inf'",
    );
}

#[test]
fn bad_input_unknown_label_column() {
    assert_fit_fails(
        "a,b,label\n1,2,p\n",
        &[],
        1,
        "d.csv: no label column 'y' (columns: a, b, label)",
    );
}

#[test]
fn bad_input_no_labeled_rows() {
    assert_fit_fails(
        "a,b,y\n1,2,\n3,4,\n",
        &[],
        1,
        "d.csv: no labeled rows (every cell of label column 'y' is the unlabeled marker)",
    );
    assert_fit_fails(
        "a,b,y\n",
        &[],
        1,
        "d.csv: no labeled rows (the file has no data rows)",
    );
    // The rows of an --unlabeled file do not make the main file's missing rows unlabeled.
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "d.csv", "a,b,y\n");
    write(dir.path(), "pool.csv", "a,b\n1,2\n3,4\n");
    let args = [
        "fit",
        "--model",
        "qda",
        "--data",
        "d.csv",
        "--unlabeled",
        "pool.csv",
        "--label",
        "y",
        "--out",
        "out.json",
    ];
    let r = run_in(dir.path(), &args, None);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("d.csv: no labeled rows (the file has no data rows)"),
        "{}",
        r.stderr
    );
    assert!(!dir.path().join("out.json").exists());
}

#[test]
fn bad_input_class_with_too_few_rows() {
    let csv = "a,b,y\n1,2,p\n2,1,p\n3,3,p\n1.5,2.5,p\n7,8,q\n8,7,q\n";
    assert_fit_fails(
        csv,
        &["--em", "none"],
        1,
        "class 'q' has too few or collinear rows",
    );
    assert_fit_fails(csv, &["--em", "none"], 1, "add --reg");
}

#[test]
fn bad_input_negative_counts_for_multinomial() {
    assert_fit_fails(
        "a,b,y\n1,2,p\n3,-4,q\n",
        &["--model", "multinomial-nb"],
        1,
        "d.csv:3: column 'b' has the value -4: counts must be >= 0",
    );
}

#[test]
fn bad_input_values_whose_statistics_overflow() {
    // Finite values whose squares overflow f64: the message names the feature and the class
    // (and the fix), for the models with a class covariance, a pooled one and a diagonal one.
    let csv =
        "a,b,y\n1,2,p\n2,1e200,p\n3,-1e200,p\n1.5,2.5,p\n7,8,q\n8,7,q\n9,9,q\n7.5,8.5,q\n4,4,\n";
    for (model, message) in [
        (
            "qda",
            "the variance of feature 'b' in class 'p' overflows f64",
        ),
        (
            "gaussian-nb",
            "the variance of feature 'b' in class 'p' overflows f64",
        ),
        ("lda", "the pooled variance of feature 'b' overflows f64"),
    ] {
        assert_fit_fails(csv, &["--model", model], 1, message);
        assert_fit_fails(csv, &["--model", model], 1, "rescale the feature");
    }
    assert_fit_fails(
        "a,b,y\n1,2,p\n3,1.5e308,q\n4,1.5e308,q\n",
        &["--model", "multinomial-nb"],
        1,
        "the count of feature 'b' in class 'q' overflows f64",
    );
}

#[test]
fn bad_input_categories_beyond_the_limit() {
    for (value, shown) in [
        ("1e12", "1000000000000"),
        ("1e300", "1e300"),
        ("1048576", "1048576"),
    ] {
        assert_fit_fails(
            &format!("a,b,y\n1,2,p\n3,{value},q\n"),
            &["--model", "categorical-nb"],
            1,
            &format!(
                "d.csv:3: column 'b' has the value {shown}: categories must be integers from 0 to 2^20 - 1"
            ),
        );
    }
}

#[test]
fn bad_usage_exits_with_2() {
    assert_fit_fails(
        GOOD,
        &["--lambda", "1.5"],
        2,
        "--lambda must be in [0, 1], got 1.5",
    );
    assert_fit_fails(GOOD, &["--no-such-flag"], 2, "unexpected argument");
    assert_fit_fails(GOOD, &["--reg=-1"], 2, "--reg must be >= 0, got -1");
    assert_fit_fails(
        GOOD,
        &["--components-per-class", "two"],
        2,
        "--components-per-class",
    );
    // Errors name the flags as they are spelt (they said --folds and --lambda-grid-value).
    assert_fit_fails(
        GOOD,
        &["--lambda", "auto", "--cv-folds", "1"],
        2,
        "--cv-folds must be >= 2, got 1",
    );
    assert_fit_fails(
        GOOD,
        &["--lambda", "auto", "--lambda-grid", "0.5,2"],
        2,
        "--lambda-grid must be in [0, 1], got 2",
    );
    // More components than the rows can fill: a component, not a class '#5' (there are 2).
    assert_fit_fails(
        GOOD,
        &["--components-per-class", "100"],
        1,
        "component 5 has no rows to estimate its parameters from; use fewer --components-per-class",
    );
}

#[test]
fn failed_fit_leaves_an_existing_output_untouched() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "d.csv", "a,b,y\n1,x,p\n");
    write(dir.path(), "out.json", "keep me");
    let r = run_in(
        dir.path(),
        &[
            "fit", "--model", "lda", "--data", "d.csv", "--label", "y", "--out", "out.json",
        ],
        None,
    );
    assert_eq!(r.code, 1);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out.json")).unwrap(),
        "keep me"
    );
}

/// `predict` without `--proba` takes the classes alone (no n × K probabilities are made): the
/// same column as with them, for every kind of model.
#[test]
fn predictions_without_probabilities_are_the_same_classes() {
    let dir = tempfile::tempdir().unwrap();
    let train = write(
        dir.path(),
        "t.csv",
        &with_labels_removed("iris.csv", 3, |v| v),
    );
    for model in [
        "lda",
        "qda",
        "gaussian-nb",
        "multinomial-nb",
        "bernoulli-nb",
    ] {
        let fit = run_in(
            dir.path(),
            &[
                "fit", "--model", model, "--data", &train, "--label", "label", "--out", "m.json",
                "-q",
            ],
            None,
        );
        assert_eq!(fit.code, 0, "{model}: {}", fit.stderr);
        let classes = run_in(
            dir.path(),
            &["predict", "--model", "m.json", "--data", &train],
            None,
        );
        let proba = run_in(
            dir.path(),
            &["predict", "--model", "m.json", "--data", &train, "--proba"],
            None,
        );
        assert_eq!(classes.code, 0, "{model}: {}", classes.stderr);
        let first: Vec<&str> = proba
            .stdout
            .lines()
            .map(|l| l.split(',').next().unwrap())
            .collect();
        assert_eq!(classes.stdout.lines().collect::<Vec<_>>(), first, "{model}");
        assert!(first.len() > 100, "{model}");
    }
}

/// An output that is one of the command's inputs (under another spelling, or through a link)
/// is refused before any work, and the input is kept; before, `fit --out d.csv --data d.csv`
/// replaced the training data with the model. A missing output directory is named as such.
#[test]
fn outputs_never_replace_inputs() {
    let dir = tempfile::tempdir().unwrap();
    fitted(dir.path());
    std::os::unix::fs::symlink(dir.path().join("d.csv"), dir.path().join("link.csv")).unwrap();
    let model = std::fs::read_to_string(dir.path().join("m.json")).unwrap();
    let cases: [(&[&str], &str); 5] = [
        (
            &[
                "fit", "--model", "lda", "--data", "d.csv", "--label", "y", "--out", "./d.csv",
            ],
            "--out ./d.csv is the --data file (d.csv)",
        ),
        (
            &[
                "fit", "--model", "lda", "--data", "link.csv", "--label", "y", "--out", "d.csv",
            ],
            "--out d.csv is the --data file (link.csv)",
        ),
        (
            &[
                "predict", "--model", "m.json", "--data", "d.csv", "--out", "d.csv",
            ],
            "--out d.csv is the --data file",
        ),
        (
            &[
                "predict", "--model", "m.json", "--data", "d.csv", "--out", "m.json",
            ],
            "--out m.json is the --model file",
        ),
        (
            &[
                "plot", "--model", "m.json", "--data", "d.csv", "--out", "d.csv",
            ],
            "--out d.csv is the --data file",
        ),
    ];
    for (args, message) in cases {
        let r = run_in(dir.path(), args, None);
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains(message), "{args:?}: {}", r.stderr);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("d.csv")).unwrap(),
            GOOD
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("m.json")).unwrap(),
            model
        );
    }
    // Refitting over a model, or predicting over an earlier output, is fine.
    for args in [
        &[
            "fit", "--model", "lda", "--data", "d.csv", "--label", "y", "--out", "m.json", "-q",
        ][..],
        &[
            "predict", "--model", "m.json", "--data", "d.csv", "--out", "p.csv",
        ][..],
        &[
            "predict", "--model", "m.json", "--data", "d.csv", "--out", "p.csv",
        ][..],
    ] {
        let r = run_in(dir.path(), args, None);
        assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
    }
    let r = run_in(
        dir.path(),
        &[
            "predict",
            "--model",
            "m.json",
            "--data",
            "d.csv",
            "--out",
            "no/such/dir/p.csv",
        ],
        None,
    );
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains(
            "no/such/dir/p.csv: cannot write: the directory 'no/such/dir' does not exist"
        ),
        "{}",
        r.stderr
    );
}

fn fitted(dir: &Path) {
    write(dir, "d.csv", GOOD);
    let r = run_in(
        dir,
        &[
            "fit", "--model", "lda", "--data", "d.csv", "--label", "y", "--out", "m.json", "-q",
        ],
        None,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// A reader that closes the pipe before the output is written (`ssl-cli inspect | head`) ends
/// the program quietly, as `cat` or `grep` end: by SIGPIPE on Linux, without a panic. Before,
/// `println!` panicked ("failed printing to stdout: Broken pipe") with a backtrace and exit
/// code 101. (If the output reaches the pipe before it closes, the run simply succeeds.)
#[test]
fn output_to_a_closed_pipe_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    fitted(dir.path());
    for args in [
        &["inspect", "--model", "m.json"][..],
        &["predict", "--model", "m.json", "--data", "d.csv", "--proba"][..],
    ] {
        let mut child = std::process::Command::new(tests::ssl_cli())
            .args(args)
            .current_dir(dir.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::process::ExitStatusExt;
            let piped = out.status.signal() == Some(13);
            assert!(out.status.success() || piped, "{args:?}: {:?}", out.status);
        }
    }
}

#[test]
fn bad_input_features_missing_at_predict() {
    let dir = tempfile::tempdir().unwrap();
    fitted(dir.path());
    write(dir.path(), "new.csv", "a,c\n1,2\n");
    let r = run_in(
        dir.path(),
        &[
            "predict", "--model", "m.json", "--data", "new.csv", "--out", "p.csv",
        ],
        None,
    );
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains("new.csv: feature column 'b' is missing"),
        "{}",
        r.stderr
    );
    assert!(!dir.path().join("p.csv").exists());
    // Extra columns (like the label) are ignored, and columns are matched by name.
    write(dir.path(), "new2.csv", "y,b,a,extra\nz,2,1,0\n");
    let r = run_in(
        dir.path(),
        &[
            "predict", "--model", "m.json", "--data", "new2.csv", "--out", "p.csv",
        ],
        None,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("p.csv")).unwrap(),
        "prediction\np\n"
    );
}

#[test]
fn bad_input_unreadable_or_foreign_model_file() {
    let dir = tempfile::tempdir().unwrap();
    fitted(dir.path());
    let check = |model: &str, message: &str| {
        let r = run_in(
            dir.path(),
            &[
                "predict", "--model", model, "--data", "d.csv", "--out", "p.csv",
            ],
            None,
        );
        assert_eq!(r.code, 1, "{}", r.stderr);
        assert!(
            r.stderr.contains(message),
            "expected '{message}' in {}",
            r.stderr
        );
        assert!(!dir.path().join("p.csv").exists());
    };
    check("missing.json", "missing.json: No such file");
    write(dir.path(), "garbage.json", "{not json");
    check("garbage.json", "garbage.json: not a model file");
    write(
        dir.path(),
        "foreign.json",
        r#"{"format": "sklearn-pickle", "version": 1}"#,
    );
    check(
        "foreign.json",
        "not an ssl-cli-model file (format is 'sklearn-pickle')",
    );
    let good = std::fs::read_to_string(dir.path().join("m.json")).unwrap();
    write(
        dir.path(),
        "v9.json",
        &good.replacen("\"version\": 1", "\"version\": 9", 1),
    );
    check("v9.json", "model file version 9 is not supported");
    let mut v: serde_json::Value = serde_json::from_str(&good).unwrap();
    v["model"]["parameters"]["model"]["means"]
        .as_array_mut()
        .unwrap()
        .pop();
    write(dir.path(), "damaged.json", &v.to_string());
    check("damaged.json", "damaged model file");
    // Dimensions whose product wraps to the parameters' lengths (2 classes × 2^63 features
    // is 0 means): a damaged file, not a panic at the first prediction.
    let mut v: serde_json::Value = serde_json::from_str(&good).unwrap();
    let model = &mut v["model"]["parameters"]["model"];
    model["n_features"] = serde_json::json!(1u64 << 63);
    model["means"] = serde_json::json!([]);
    model["factors"] = serde_json::json!([]);
    write(dir.path(), "wrapped.json", &v.to_string());
    check("wrapped.json", "damaged model file");
    check("wrapped.json", "of dimensions whose product fits in memory");
    for (field, names, message) in [
        ("classes", ["p", "p"], "the class name 'p' appears twice"),
        ("features", ["b", "b"], "the feature name 'b' appears twice"),
    ] {
        let mut v: serde_json::Value = serde_json::from_str(&good).unwrap();
        v[field] = serde_json::json!(names);
        write(dir.path(), "twice.json", &v.to_string());
        check("twice.json", message);
    }
}

#[test]
fn bad_input_unknown_label_at_eval() {
    let dir = tempfile::tempdir().unwrap();
    fitted(dir.path());
    write(dir.path(), "t.csv", "a,b,y\n1,2,p\n3,3,r\n");
    let r = run_in(
        dir.path(),
        &[
            "eval", "--model", "m.json", "--data", "t.csv", "--label", "y",
        ],
        None,
    );
    assert_eq!(r.code, 1);
    assert!(
        r.stderr
            .contains("t.csv:3: label 'r' is not a class of the model"),
        "{}",
        r.stderr
    );
}

#[test]
fn data_file_helper_points_at_shipped_data() {
    assert!(data_file("iris.csv").exists() && data_file("wine.csv").exists());
}

/// `predict --proba` of m.json in `dir` over `n` rows (`row(i)` each, columns a and b): the
/// output, checked to be the same on 1 and 2 threads and to be the two halves' outputs one
/// after the other.
fn output_whole_and_halves(dir: &Path, n: usize, row: &dyn Fn(usize) -> String) -> String {
    let file = |name: &str, rows: std::ops::Range<usize>| {
        let text: String = std::iter::once("a,b\n".to_string())
            .chain(rows.map(row))
            .collect();
        write(dir, name, &text)
    };
    let (all, first, second) = (
        file("all.csv", 0..n),
        file("first.csv", 0..n / 2),
        file("second.csv", n / 2..n),
    );
    let predict = |data: &str, threads: &str| {
        let r = run_in(
            dir,
            &[
                "predict",
                "--model",
                "m.json",
                "--data",
                data,
                "--proba",
                "--threads",
                threads,
            ],
            None,
        );
        assert_eq!(r.code, 0, "{}", r.stderr);
        r.stdout
    };
    let whole = predict(&all, "2");
    assert!(whole == predict(&all, "1"), "1 and 2 threads differ");
    let halves = predict(&first, "2") + predict(&second, "2").split_once('\n').unwrap().1;
    assert!(whole == halves, "the rows' predictions moved");
    whole
}

/// `predict --proba` takes its posteriors in batches of 65,536 rows a thread and formats
/// pieces of 16,384 rows in parallel: over 140,000 rows (three batches on one thread, two on
/// two, nine pieces) its output is the two halves' outputs one after the other (batches and
/// pieces cut elsewhere), the same on 1 and 2 threads, and every line names the class of its
/// largest probability.
#[test]
fn predictions_of_many_rows_keep_their_order() {
    let dir = tempfile::tempdir().unwrap();
    fitted(dir.path());
    let row = |i: usize| {
        let t = (i * 7919 % 10_007) as f64 / 10_007.0;
        format!(
            "{},{}\n",
            10.0 * t - 0.5,
            10.0 * t - 0.5 + (i % 3) as f64 * 0.1
        )
    };
    let whole = output_whole_and_halves(dir.path(), 140_000, &row);
    let lines: Vec<&str> = whole.lines().collect();
    assert_eq!(lines.len(), 140_001);
    assert_eq!(lines[0], "prediction,p_p,p_q");
    let mut seen = [0usize; 2];
    for line in &lines[1..] {
        let f: Vec<&str> = line.split(',').collect();
        let (p, q): (f64, f64) = (f[1].parse().unwrap(), f[2].parse().unwrap());
        let want = if q > p { "q" } else { "p" };
        assert_eq!(f[0], want, "{line}");
        seen[usize::from(want == "q")] += 1;
    }
    assert!(seen[0] > 1000 && seen[1] > 1000, "{seen:?}");
}

/// Row `i` of a file of `k` classes named c0, c1, … (row i of class i mod k), with its label
/// or without the column.
fn many_class_row(i: usize, k: usize, label: bool) -> String {
    let c = i % k;
    let t = (i * 7919 % 10_007) as f64 / 10_007.0;
    let l = if label {
        format!(",c{c}")
    } else {
        String::new()
    };
    format!("{},{}{l}\n", c as f64 + t - 0.5, (c % 17) as f64 - t)
}

/// Gaussian NB of `k` classes fitted to three rows of each, as m.json in `dir`.
fn fitted_many_classes(dir: &Path, k: usize) {
    let train: String = std::iter::once("a,b,y\n".to_string())
        .chain((0..3 * k).map(|i| many_class_row(i, k, true)))
        .collect();
    write(dir, "d.csv", &train);
    let r = run_in(
        dir,
        &[
            "fit",
            "--model",
            "gaussian-nb",
            "--data",
            "d.csv",
            "--label",
            "y",
            "--em",
            "none",
            "--out",
            "m.json",
            "-q",
        ],
        None,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// With many classes, `predict --proba` formats fewer rows a piece (2^17 values: 435 rows of
/// 300 classes, so a batch is 1,740 rows a thread): over 4,000 rows its output is its halves'
/// outputs one after the other, the same on 1 and 2 threads, each line names the class of its
/// largest probability, and its 300 probabilities sum to 1.
#[test]
fn predictions_of_many_classes_keep_their_order() {
    let dir = tempfile::tempdir().unwrap();
    let k = 300;
    fitted_many_classes(dir.path(), k);
    let whole = output_whole_and_halves(dir.path(), 4_000, &|i| many_class_row(i, k, false));
    let lines: Vec<&str> = whole.lines().collect();
    assert_eq!(lines.len(), 4_001);
    let mut hits = 0;
    for (i, line) in lines[1..].iter().enumerate() {
        let f: Vec<&str> = line.split(',').collect();
        assert_eq!(f.len(), k + 1, "row {i}");
        let p: Vec<f64> = f[1..].iter().map(|v| v.parse().unwrap()).collect();
        let best = (0..k).fold(0, |b, c| if p[c] > p[b] { c } else { b });
        let header: Vec<&str> = lines[0].split(',').collect();
        assert_eq!(format!("p_{}", f[0]), header[1 + best], "row {i}");
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-9, "row {i}");
        hits += usize::from(f[0] == format!("c{}", i % k));
    }
    assert!(hits > 2_000, "{hits} of 4000 rows given their own class");
}

/// `eval` takes at most 2^20 posteriors at once (3,495 rows of 300 classes): over 8,000 labeled
/// rows (three batches) its accuracy, log-loss and confusion are those recomputed from
/// `predict --proba`'s output (whose numbers read back to the posteriors' bits), the log-loss
/// bit for bit when its terms are summed in row order as `eval` sums them.
#[test]
fn eval_over_batches_agrees_with_the_printed_posteriors() {
    let dir = tempfile::tempdir().unwrap();
    let k = 300;
    fitted_many_classes(dir.path(), k);
    let n = 8_000;
    let text: String = std::iter::once("a,b,label\n".to_string())
        .chain((0..n).map(|i| many_class_row(i, k, true)))
        .collect();
    let data = write(dir.path(), "e.csv", &text);
    let ev = eval_json(dir.path(), "m.json", &data);
    let p = run_in(
        dir.path(),
        &["predict", "--model", "m.json", "--data", &data, "--proba"],
        None,
    );
    assert_eq!(p.code, 0, "{}", p.stderr);
    let lines: Vec<&str> = p.stdout.lines().collect();
    // The classes in the model's order (the header's p_<class> columns).
    let classes: Vec<&str> = lines[0].split(',').skip(1).map(|h| &h[2..]).collect();
    let index = |name: &str| classes.iter().position(|c| *c == name).unwrap();
    let (mut loss, mut correct) = (0.0f64, 0usize);
    let mut confusion = vec![vec![0u64; k]; k];
    for (i, line) in lines[1..].iter().enumerate() {
        let f: Vec<&str> = line.split(',').collect();
        let probs: Vec<f64> = f[1..].iter().map(|v| v.parse().unwrap()).collect();
        let (t, predicted) = (index(&format!("c{}", i % k)), index(f[0]));
        confusion[t][predicted] += 1;
        correct += usize::from(predicted == t);
        loss -= probs[t].max(1e-15).ln();
    }
    assert_eq!(ev["n_rows"].as_u64(), Some(n as u64));
    let rows = n as f64;
    assert_eq!(
        ev["log_loss"].as_f64().unwrap().to_bits(),
        (loss / rows).to_bits()
    );
    assert_eq!(ev["accuracy"].as_f64().unwrap(), correct as f64 / rows);
    let got: Vec<Vec<u64>> = ev["confusion"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r.as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap())
                .collect()
        })
        .collect();
    assert_eq!(got, confusion);
    assert!(
        correct > 4_000,
        "{correct} of {n} rows given their own class"
    );
}

/// A value the model rejects in a late batch of `predict --proba` (a negative count for
/// multinomial NB at row 100,000 of 140,000, in the second batch of 65,536 rows on one thread)
/// is named by its line, nothing is printed, and an existing output file is kept: the input is
/// checked before the first batch's rows are written.
#[test]
fn a_late_bad_value_stops_predict_before_any_output() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "d.csv", "a,b,y\n1,2,p\n3,4,q\n2,0,p\n0,3,q\n");
    let r = run_in(
        dir.path(),
        &[
            "fit",
            "--model",
            "multinomial-nb",
            "--data",
            "d.csv",
            "--label",
            "y",
            "--out",
            "m.json",
            "-q",
        ],
        None,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let text: String = std::iter::once("a,b\n".to_string())
        .chain((0..140_000).map(|i| {
            if i == 100_000 {
                "1.5,-2\n".to_string()
            } else {
                format!("{},{}\n", i % 97, i % 89)
            }
        }))
        .collect();
    let data = write(dir.path(), "late.csv", &text);
    write(dir.path(), "out.csv", "kept\n");
    for out in [None, Some("out.csv")] {
        let mut args = vec![
            "predict",
            "--model",
            "m.json",
            "--data",
            &data,
            "--proba",
            "--threads",
            "1",
        ];
        args.extend(out.iter().flat_map(|o| ["--out", *o]));
        let r = run_in(dir.path(), &args, None);
        assert_eq!(r.code, 1, "{}", r.stderr);
        assert!(
            r.stderr
                .contains("late.csv:100002: column 'b' has the value -2: counts must be >= 0"),
            "{}",
            r.stderr
        );
        assert!(
            r.stdout.is_empty(),
            "{out:?}: {} bytes printed",
            r.stdout.len()
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("out.csv")).unwrap(),
            "kept\n"
        );
    }
}
