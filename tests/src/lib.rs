//! Helpers for the workspace's end-to-end tests: locate (building once if needed) the `ssl-cli`
//! binary of the current profile, run it, and make scratch files.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

/// Path of the `ssl-cli` binary built with the same profile as the running test.
pub fn ssl_cli() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        // target/<profile>/deps/<test-exe> -> target/<profile>/ssl-cli
        let exe = std::env::current_exe().expect("test executable path");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("target/<profile>")
            .to_path_buf();
        let bin = profile_dir.join(format!("ssl-cli{}", std::env::consts::EXE_SUFFIX));
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args([
            "build",
            "--quiet",
            "--package",
            "ssl-cli",
            "--bin",
            "ssl-cli",
        ]);
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        let status = cmd
            .current_dir(workspace_root())
            .status()
            .expect("run cargo build");
        assert!(status.success(), "cargo build of ssl-cli failed");
        bin
    })
}

/// The workspace root (parent of this crate).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// A data file shipped in the repository's `data/` folder.
pub fn data_file(name: &str) -> PathBuf {
    workspace_root().join("data").join(name)
}

/// Result of one run of the binary.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Run {
    fn from(o: Output) -> Self {
        Run {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into(),
            stderr: String::from_utf8_lossy(&o.stderr).into(),
        }
    }
}

/// Runs `ssl-cli` with `args` in `dir`, with `stdin` as standard input.
pub fn run_in(dir: &Path, args: &[&str], stdin: Option<&str>) -> Run {
    let mut cmd = Command::new(ssl_cli());
    cmd.args(args)
        .current_dir(dir)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn ssl-cli");
    if let Some(text) = stdin {
        use std::io::Write;
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(text.as_bytes())
            .expect("write stdin");
    }
    child.wait_with_output().expect("wait for ssl-cli").into()
}

/// Runs the built `ssl-cli` in `dir` with `args`, standard input read from `stdin` (a file
/// redirected, as `< file` does, at the offset it stands at).
pub fn run_with_stdin_file(dir: &Path, args: &[&str], stdin: std::fs::File) -> Run {
    Command::new(ssl_cli())
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::from(stdin))
        .output()
        .expect("run ssl-cli")
        .into()
}

/// A CSV copy of a shipped dataset with the label removed from a share of rows (deterministic:
/// row i keeps its label when i % keep_every == 0), and optionally transformed features.
pub fn with_labels_removed(
    name: &str,
    keep_every: usize,
    transform: impl Fn(f64) -> f64,
) -> String {
    let text = std::fs::read_to_string(data_file(name)).unwrap();
    let mut lines = text.lines();
    let mut out = String::from(lines.next().unwrap());
    out.push('\n');
    for (i, line) in lines.enumerate() {
        let cells: Vec<&str> = line.split(',').collect();
        let (features, label) = cells.split_at(cells.len() - 1);
        let values: Vec<String> = features
            .iter()
            .map(|c| format!("{}", transform(c.parse::<f64>().unwrap())))
            .collect();
        out.push_str(&values.join(","));
        out.push(',');
        if i % keep_every == 0 {
            out.push_str(label[0]);
        }
        out.push('\n');
    }
    out
}
