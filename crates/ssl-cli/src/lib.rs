//! The `ssl-cli` binary's library: argument parsing, files, figures and messages. It is the only
//! crate of the workspace that touches files, CSV, JSON model files and the terminal; the
//! statistics live in `density`, `generative` and `ssl-em`.

pub mod alloc;
mod apply;
pub mod cli;
pub mod data;
mod demo;
pub mod error;
mod fit;
mod inspect;
mod mapped;
pub mod model_file;
mod number;
pub mod plot;
pub mod rows;
pub mod svg;

use std::ffi::OsString;

use clap::Parser;

use crate::cli::{Cli, Command};
use crate::error::{CliError, Result};

/// Runs the command line and returns the process exit code: 0 on success, 2 for usage errors,
/// 1 for bad data or models.
pub fn run<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => 0,
                _ => 2,
            };
        }
    };
    match dispatch(&cli) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e}");
            e.exit_code()
        }
    }
}

fn dispatch(cli: &Cli) -> Result<()> {
    if let Some(n) = cli.threads {
        if n == 0 {
            return Err(CliError::Usage("--threads must be >= 1".into()));
        }
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global()
            .map_err(|e| CliError::Usage(format!("--threads: {e}")))?;
    }
    // An output that is one of the command's inputs would replace the user's data (or model)
    // with the result: `fit --out train.csv` is one slip away from `--data train.csv`.
    let (out, inputs): (Option<&String>, Vec<(&str, &String)>) = match &cli.command {
        Command::Fit(a) => {
            let mut inputs = vec![("--data", &a.data)];
            inputs.extend(a.unlabeled.as_ref().map(|u| ("--unlabeled", u)));
            (Some(&a.out), inputs)
        }
        Command::Predict(a) => (
            a.out.as_ref(),
            vec![("--model", &a.model), ("--data", &a.data)],
        ),
        Command::Plot(a) => (
            Some(&a.out),
            vec![("--model", &a.model), ("--data", &a.data)],
        ),
        Command::Eval(_) | Command::Inspect(_) | Command::Demo(_) => (None, Vec::new()),
    };
    if let Some(out) = out {
        data::refuse_to_overwrite_inputs(out, &inputs)?;
    }
    match &cli.command {
        Command::Fit(a) => fit::fit(a, cli.quiet),
        Command::Predict(a) => apply::predict(a),
        Command::Eval(a) => apply::eval(a),
        Command::Inspect(a) => inspect::inspect(a),
        Command::Demo(a) => demo::demo(a, cli.quiet),
        Command::Plot(a) => plot::plot(a),
    }
}
