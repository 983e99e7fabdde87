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

/// A data value as a message shows it: as written for ordinary magnitudes, in exponent form
/// from 1e15 up and below 1e-4 (1e300 written out has 301 digits).
pub fn shown(v: f64) -> String {
    if v != 0.0 && v.is_finite() && !(1e-4..1e15).contains(&v.abs()) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::shown;

    #[test]
    fn values_are_shown_short() {
        assert_eq!(shown(-6.0), "-6");
        assert_eq!(shown(-0.5), "-0.5");
        assert_eq!(shown(123456.25), "123456.25");
        assert_eq!(shown(1e12), "1000000000000");
        assert_eq!(shown(1e300), "1e300");
        assert_eq!(shown(-2.5e-7), "-2.5e-7");
        assert_eq!(shown(0.0), "0");
        assert_eq!(shown(f64::NAN), "NaN");
        assert_eq!(shown(f64::INFINITY), "inf");
    }
}
