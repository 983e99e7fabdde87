//! CLI errors: every message names the file, line, column or option at fault. Usage errors exit
//! with 2, bad data or models with 1.

use thiserror::Error;

/// An error the binary reports to the user.
#[derive(Debug, Error)]
pub enum CliError {
    /// The command line is wrong (exit code 2).
    #[error("{0}")]
    Usage(String),
    /// Bad data, model file or fit (exit code 1).
    #[error("{0}")]
    Data(String),
    /// An I/O failure on a named file (exit code 1).
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

impl CliError {
    /// Process exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Usage(_) => 2,
            _ => 1,
        }
    }

    pub(crate) fn io(path: &str, source: std::io::Error) -> Self {
        CliError::Io {
            path: path.to_string(),
            source,
        }
    }
}

/// Result alias for the CLI.
pub type Result<T> = std::result::Result<T, CliError>;
