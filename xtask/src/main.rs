//! Project automation (`cargo xtask ...`), in Rust so it needs nothing but cargo:
//!
//! - `reproduce [--quick] [--bless]`: regenerate every experiment behind a claim of this project
//!   from fixed seeds, write `target/reproduce/{report.md, results.json, *.svg}`, and compare the
//!   figures with `xtask/expected.json` (exit 1 naming any figure that moved).
//! - `gen <scenario> --out DIR`: write a scenario's data as CSV for `ssl-cli`.
//! - `bench [--quick] [--compare]`: throughput and EM timings, optionally against scikit-learn.
//! - `check-inlining [BINARY..]`: no SIMD intrinsic is compiled out of line (this release
//!   executable by default); CI runs it.

mod bench;
mod chart;
mod inlining;
mod reproduce;

use std::process::ExitCode;

/// The same allocator as `ssl-cli`, so that benchmarks time what the command line does.
#[global_allocator]
static ALLOC: ssl_cli::alloc::HugePageAlloc = ssl_cli::alloc::HugePageAlloc;

fn usage() -> ExitCode {
    eprintln!(
        "usage: cargo xtask <command>\n\n  reproduce [--quick] [--bless]   rerun the experiments and check them\n  gen <scenario> --out DIR        write a scenario as CSV ({})\n  bench [--quick] [--compare] [--csv-only] [--models M,..] [--n N,..]  benchmarks (target/bench/report.md)\n  check-inlining [BINARY..]       no SIMD intrinsic compiled out of line (this executable by default)\n  profile-em [D] [K] [full|diag|tied]  EM iterations at n = 1e6 (for a profiler; full covariance by default;\n      PROFILE_ROW_MAJOR=1 lays the rows out row-major, as ssl-cli reads them;\n      PROFILE_LAMBDA=x weighs the unlabeled rows of its 3-iteration fit by x)\n  profile <model>-<fit|predict|predict-into|joint-into|labels|logproba|loglik> [D] [K]  10 fits or predictions (predict-into: into a kept buffer; joint-into: its log joints only; labels: `predict`'s classes; logproba: `predict_log_proba`; loglik: `log_likelihood`) at n = 1e6 (lda, qda, gnb, bnb, mnb);\n      PROFILE_COLD=c|s|cs first writes 64 MiB (c) and/or sleeps 20 ms (s) before each, as the benchmark's host gate does;\n      PROFILE_REPS=N times N runs instead of 10; PROFILE_N=N uses N rows instead of 1e6;\n      PROFILE_STRIDE=S lays the columns S rows apart (a caller's buffer, such as ssl-cli's piped input at 512-row multiples);
      PROFILE_STREAM=1|0 writes posteriors by non-temporal stores always|never",
        reproduce::SCENARIOS.join(", ")
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |f: &str| args.iter().any(|a| a == f);
    let result = match args.first().map(String::as_str) {
        Some("reproduce") => reproduce::run(flag("--quick"), flag("--bless")),
        Some("gen") => {
            let (Some(name), Some(out)) = (
                args.get(1),
                args.iter()
                    .position(|a| a == "--out")
                    .and_then(|i| args.get(i + 1)),
            ) else {
                return usage();
            };
            reproduce::generate(name, out)
        }
        Some("bench") => {
            let value = |f: &str| {
                args.iter()
                    .position(|a| a == f)
                    .and_then(|i| args.get(i + 1))
                    .map(String::as_str)
            };
            bench::Selection::parse(value("--models"), value("--n")).and_then(|sel| {
                bench::run(flag("--quick"), flag("--compare"), flag("--csv-only"), &sel)
            })
        }
        Some("check-inlining") => inlining::run(&args[1..]),
        Some("profile-em") => bench::profile_em(
            args.get(1).and_then(|v| v.parse().ok()).unwrap_or(16),
            args.get(2).and_then(|v| v.parse().ok()).unwrap_or(10),
            args.get(3).map_or("full", String::as_str),
        ),
        Some("profile") => match args.get(1) {
            Some(what) => bench::profile_model(
                what,
                args.get(2).and_then(|v| v.parse().ok()).unwrap_or(16),
                args.get(3).and_then(|v| v.parse().ok()).unwrap_or(10),
            ),
            None => return usage(),
        },
        _ => return usage(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Workspace root (the parent of xtask/).
pub fn root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| ".".into(), |p| p.to_path_buf())
}
