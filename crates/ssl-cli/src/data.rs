//! Reading CSV files into feature matrices.
//!
//! Rows are parsed in one streaming pass straight into row-major buffers (one for labeled rows,
//! one for unlabeled), which faer views without copying (`MatRef::from_row_major_slice`). Every
//! error names the file, the line and the column.

use std::io::Read;

use faer::MatRef;

use crate::error::{CliError, Result};

/// Rows of one kind (labeled or unlabeled) with the file lines they came from.
#[derive(Debug, Default, Clone)]
pub struct Rows {
    /// Row-major n × d.
    pub values: Vec<f64>,
    /// 1-based line in the source file of each row.
    pub lines: Vec<u64>,
    /// Label text of each row (empty for unlabeled rows).
    pub labels: Vec<String>,
    pub n_features: usize,
}

impl Rows {
    /// Number of rows.
    pub fn len(&self) -> usize {
        self.lines.len()
    }
    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }
    /// The rows as an n × d matrix view.
    pub fn matrix(&self) -> MatRef<'_, f64> {
        MatRef::from_row_major_slice(&self.values, self.len(), self.n_features)
    }
}

/// A parsed data file.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// File name as given (`-` is standard input), for messages.
    pub source: String,
    /// Names of the feature columns, in matrix order.
    pub features: Vec<String>,
    /// Rows with a label (all rows when no label column was asked for).
    pub labeled: Rows,
    /// Rows whose label cell is the unlabeled marker.
    pub unlabeled: Rows,
}

/// What to read from a file.
#[derive(Debug, Clone)]
pub struct ReadOptions<'a> {
    /// Label column; rows whose cell equals `unlabeled_marker` are unlabeled.
    pub label: Option<&'a str>,
    /// Feature columns to read, in this order; `None` = every column but the label.
    pub features: Option<&'a [String]>,
    /// Marker of unlabeled rows (default: the empty cell).
    pub unlabeled_marker: &'a str,
    /// Whether a missing label column is an error (fit, eval) or not (predict).
    pub require_label: bool,
}

fn open(path: &str) -> Result<Box<dyn Read>> {
    if path == "-" {
        return Ok(Box::new(std::io::stdin()));
    }
    let f = std::fs::File::open(path).map_err(|e| CliError::io(path, e))?;
    Ok(Box::new(std::io::BufReader::with_capacity(1 << 20, f)))
}

/// Parses one cell as a finite number, or explains why not.
fn parse_cell(bytes: &[u8], source: &str, line: u64, column: &str) -> Result<f64> {
    let text = std::str::from_utf8(bytes).map_err(|_| {
        CliError::Data(format!(
            "{source}:{line}: column '{column}' is not valid UTF-8"
        ))
    })?;
    let t = text.trim();
    if t.is_empty() {
        return Err(CliError::Data(format!(
            "{source}:{line}: column '{column}' is empty (missing values are not supported)"
        )));
    }
    match t.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        Ok(_) => Err(CliError::Data(format!(
            "{source}:{line}: column '{column}' has the non-finite value '{t}'"
        ))),
        Err(_) => Err(CliError::Data(format!(
            "{source}:{line}: column '{column}' has the non-numeric value '{t}'"
        ))),
    }
}

/// Reads a CSV file with a header row.
pub fn read_csv(path: &str, options: &ReadOptions<'_>) -> Result<Dataset> {
    let reader = open(path)?;
    read_csv_from(reader, path, options)
}

/// Reads CSV from any reader (`source` names it in messages).
pub fn read_csv_from(
    reader: impl Read,
    source: &str,
    options: &ReadOptions<'_>,
) -> Result<Dataset> {
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(false)
        .buffer_capacity(1 << 20)
        .from_reader(reader);
    let header = rdr
        .byte_headers()
        .map_err(|e| csv_error(source, e))?
        .clone();
    if header.is_empty() || (header.len() == 1 && header[0].is_empty()) {
        return Err(CliError::Data(format!(
            "{source}: missing header row (the first line must name the columns)"
        )));
    }
    let names: Vec<String> = header
        .iter()
        .map(|h| String::from_utf8_lossy(h).trim().to_string())
        .collect();
    for (i, n) in names.iter().enumerate() {
        if n.is_empty() {
            return Err(CliError::Data(format!(
                "{source}:1: column {} has an empty name",
                i + 1
            )));
        }
        if let Some(j) = names[..i].iter().position(|m| m == n) {
            return Err(CliError::Data(format!(
                "{source}:1: duplicate column name '{n}' (columns {} and {})",
                j + 1,
                i + 1
            )));
        }
    }
    let label_idx = match options.label {
        Some(l) => match names.iter().position(|n| n == l) {
            Some(i) => Some(i),
            None if options.require_label => {
                return Err(CliError::Data(format!(
                    "{source}: no label column '{l}' (columns: {})",
                    names.join(", ")
                )));
            }
            None => None,
        },
        None => None,
    };
    let feature_idx: Vec<usize> = match options.features {
        Some(list) => list
            .iter()
            .map(|f| {
                names.iter().position(|n| n == f).ok_or_else(|| {
                    CliError::Data(format!(
                        "{source}: feature column '{f}' is missing (columns: {})",
                        names.join(", ")
                    ))
                })
            })
            .collect::<Result<_>>()?,
        None => (0..names.len()).filter(|i| Some(*i) != label_idx).collect(),
    };
    if feature_idx.is_empty() {
        return Err(CliError::Data(format!("{source}: no feature columns")));
    }
    if let Some(l) = label_idx
        && feature_idx.contains(&l)
    {
        return Err(CliError::Data(format!(
            "{source}: column '{}' cannot be both the label and a feature",
            names[l]
        )));
    }
    let d = feature_idx.len();
    let mut labeled = Rows {
        n_features: d,
        ..Default::default()
    };
    let mut unlabeled = Rows {
        n_features: d,
        ..Default::default()
    };
    let mut record = csv::ByteRecord::new();
    loop {
        match rdr.read_byte_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => return Err(csv_error(source, e)),
        }
        let line = record.position().map_or(0, |p| p.line());
        let label = label_idx.map(|i| String::from_utf8_lossy(&record[i]).trim().to_string());
        let target = match &label {
            Some(l) if l == options.unlabeled_marker => &mut unlabeled,
            _ => &mut labeled,
        };
        for &j in &feature_idx {
            target
                .values
                .push(parse_cell(&record[j], source, line, &names[j])?);
        }
        target.lines.push(line);
        target.labels.push(label.unwrap_or_default());
    }
    Ok(Dataset {
        source: source.to_string(),
        features: feature_idx.iter().map(|i| names[*i].clone()).collect(),
        labeled,
        unlabeled,
    })
}

fn csv_error(source: &str, e: csv::Error) -> CliError {
    let line = e.position().map(|p| p.line());
    match e.kind() {
        csv::ErrorKind::UnequalLengths {
            expected_len, len, ..
        } => CliError::Data(format!(
            "{source}:{}: expected {expected_len} fields (as in the header), found {len}",
            line.unwrap_or(0)
        )),
        csv::ErrorKind::Io(err) => CliError::Data(format!("{source}: {err}")),
        _ => CliError::Data(format!("{source}:{}: {e}", line.unwrap_or(0))),
    }
}

/// Writes `contents` to `path` atomically: a temporary file in the same directory, then rename.
/// On failure nothing is left behind and an existing file is untouched.
pub fn write_atomic(path: &str, contents: &[u8]) -> Result<()> {
    use std::io::Write;
    let target = std::path::Path::new(path);
    let dir = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| CliError::io(path, e))?;
    tmp.write_all(contents).map_err(|e| CliError::io(path, e))?;
    tmp.as_file()
        .sync_all()
        .map_err(|e| CliError::io(path, e))?;
    // A temporary file is created private (0600); give the result the permissions an existing
    // file had, or ordinary ones (0644).
    let permissions = match std::fs::metadata(target) {
        Ok(m) => m.permissions(),
        Err(_) => default_permissions(&tmp).map_err(|e| CliError::io(path, e))?,
    };
    tmp.as_file()
        .set_permissions(permissions)
        .map_err(|e| CliError::io(path, e))?;
    tmp.persist(target)
        .map_err(|e| CliError::io(path, e.error))?;
    Ok(())
}

#[cfg(unix)]
fn default_permissions(_: &tempfile::NamedTempFile) -> std::io::Result<std::fs::Permissions> {
    use std::os::unix::fs::PermissionsExt;
    Ok(std::fs::Permissions::from_mode(0o644))
}

#[cfg(not(unix))]
fn default_permissions(tmp: &tempfile::NamedTempFile) -> std::io::Result<std::fs::Permissions> {
    Ok(tmp.as_file().metadata()?.permissions())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str, label: Option<&str>) -> Result<Dataset> {
        read_csv_from(
            text.as_bytes(),
            "t.csv",
            &ReadOptions {
                label,
                features: None,
                unlabeled_marker: "",
                require_label: true,
            },
        )
    }

    #[test]
    fn splits_labeled_and_unlabeled_rows() {
        let d = read("a,b,y\n1,2,x\n3,4,\n5,6,z\n", Some("y")).unwrap();
        assert_eq!(d.features, vec!["a", "b"]);
        assert_eq!(d.labeled.values, vec![1.0, 2.0, 5.0, 6.0]);
        assert_eq!(d.labeled.labels, vec!["x", "z"]);
        assert_eq!(d.labeled.lines, vec![2, 4]);
        assert_eq!(d.unlabeled.values, vec![3.0, 4.0]);
        assert_eq!(d.labeled.matrix()[(1, 0)], 5.0);
    }

    #[test]
    fn errors_name_file_line_and_column() {
        let e = read("a,b,y\n1,2,x\n3,oops,x\n", Some("y"))
            .unwrap_err()
            .to_string();
        assert_eq!(e, "t.csv:3: column 'b' has the non-numeric value 'oops'");
        let e = read("a,b,y\n1,NaN,x\n", Some("y")).unwrap_err().to_string();
        assert_eq!(e, "t.csv:2: column 'b' has the non-finite value 'NaN'");
        let e = read("a,b,y\n1,2,x\n1,2\n", Some("y"))
            .unwrap_err()
            .to_string();
        assert_eq!(e, "t.csv:3: expected 3 fields (as in the header), found 2");
        let e = read("a,a,y\n1,2,x\n", Some("y")).unwrap_err().to_string();
        assert!(e.contains("duplicate column name 'a'"), "{e}");
        let e = read("a,b\n1,2\n", Some("y")).unwrap_err().to_string();
        assert!(e.contains("no label column 'y'"), "{e}");
        let e = read("", Some("y")).unwrap_err().to_string();
        assert!(e.contains("missing header"), "{e}");
    }
}
