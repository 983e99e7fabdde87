//! Reading CSV files into feature matrices.
//!
//! Rows are parsed in one streaming pass, a piece at a time into row-major buffers, and each
//! piece's rows are then transposed into column-major matrices (one for labeled rows, one for
//! unlabeled: [`Rows`], which faer views without copying). A regular file is read through a
//! memory map (no copy out of the page cache), anything else
//! (standard input, pipes) by a reader thread; either way the input goes in fixed blocks that
//! are split at newlines and parsed in parallel, the pieces appended in file order (while the
//! next block is parsed). A row is read in one pass when it has the plain shape (a number right
//! at each feature cell's start, the separator right after it) and split at commas otherwise;
//! quoted input falls back to the `csv` crate, with line numbers counted by us. Every error
//! names the file, the line and the column.

use std::borrow::Cow;
use std::io::Read;

use crate::error::{CliError, Result};
use crate::number::{NumberReader, ReadsNumbers, RowSlots};

pub use crate::rows::Rows;
use crate::rows::Staged;

/// A parsed data file.
#[derive(Debug, Clone, PartialEq)]
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

/// Parses one cell as a finite number, or explains why not.
fn parse_cell(bytes: &[u8], source: &str, line: u64, column: &str) -> Result<f64> {
    let t = bytes.trim_ascii();
    if t.is_empty() {
        return Err(CliError::Data(format!(
            "{source}:{line}: column '{column}' is empty (missing values are not supported)"
        )));
    }
    let shown = || String::from_utf8_lossy(t).to_string();
    match fast_float2::parse::<f64, _>(t) {
        Ok(v) if v.is_finite() => Ok(v),
        Ok(_) => Err(CliError::Data(format!(
            "{source}:{line}: column '{column}' has the non-finite value '{}'",
            shown()
        ))),
        Err(_) => Err(CliError::Data(format!(
            "{source}:{line}: column '{column}' has the non-numeric value '{}'",
            shown()
        ))),
    }
}

/// Reads a CSV file with a header row (`-` is standard input). A regular file is read through a
/// memory map, anything else as a stream; so is standard input redirected from a regular file
/// (`< data.csv`) and not yet read from.
pub fn read_csv(path: &str, options: &ReadOptions<'_>) -> Result<Dataset> {
    if path == "-" {
        if let Some((_file, map)) = mapped_stdin() {
            return read_csv_parts(map.bytes(), path, options, |end| map.done_before(end));
        }
        widen_pipe_buffer();
        return read_csv_from(std::io::stdin(), path, options);
    }
    let file = std::fs::File::open(path).map_err(|e| CliError::io(path, e))?;
    if let Some(map) = crate::mapped::MappedFile::open(&file) {
        return read_csv_parts(map.bytes(), path, options, |end| map.done_before(end));
    }
    read_csv_from(
        std::io::BufReader::with_capacity(1 << 20, file),
        path,
        options,
    )
}

/// Standard input mapped, when it is a regular file read from its start. Why: `--data - <
/// data.csv` then loads as fast as `--data data.csv` (a 1e6 x 16 QDA fit took 0.53-1.01 s
/// through the stream, 0.43-0.44 s from the file). Input already partly read (its offset not at
/// 0, as after `(head -n 1; ssl-cli ...) < data.csv`) is streamed from where it stands. The
/// file (a second descriptor of standard input) is kept open while the map is read.
fn mapped_stdin() -> Option<(std::fs::File, crate::mapped::MappedFile)> {
    #[cfg(unix)]
    {
        use std::io::Seek;
        use std::os::fd::AsFd;
        let fd = std::io::stdin().as_fd().try_clone_to_owned().ok()?;
        let mut file = std::fs::File::from(fd);
        if file.stream_position().ok()? != 0 {
            return None;
        }
        let map = crate::mapped::MappedFile::open(&file)?;
        Some((file, map))
    }
    #[cfg(not(unix))]
    None
}

/// Asks for a 1 MiB buffer on standard input when it is a pipe (the default is 64 KiB), so
/// that the writer and our reader thread switch 16 times less often. Failure (not a pipe, or a
/// system limit below 1 MiB) leaves the pipe as it was, which reads the same bytes.
#[allow(unsafe_code)]
fn widen_pipe_buffer() {
    #[cfg(target_os = "linux")]
    // SAFETY: `fcntl` on descriptor 0 with an integer argument touches no memory of ours.
    unsafe {
        libc::fcntl(0, libc::F_SETPIPE_SZ, 1 << 20);
    }
}

/// Reads CSV held in memory (`source` names it in messages).
pub fn read_csv_bytes(bytes: &[u8], source: &str, options: &ReadOptions<'_>) -> Result<Dataset> {
    read_csv_parts(bytes, source, options, |_| {})
}

/// [`read_csv_bytes`], calling `done(end)` as the bytes before `end` have been read.
fn read_csv_parts(
    bytes: &[u8],
    source: &str,
    options: &ReadOptions<'_>,
    mut done: impl FnMut(usize),
) -> Result<Dataset> {
    let first = &bytes[..bytes.len().min(BLOCK_BYTES)];
    read_csv_with(
        first,
        source,
        options,
        |body, line, layout, labeled, unlabeled| {
            let offset = first.len() - body.len();
            let rest = &bytes[offset..];
            read_body_bytes(rest, line, layout, labeled, unlabeled, |end| {
                done(offset + end)
            })
        },
    )
}

/// Reads CSV from any reader (`source` names it in messages).
pub fn read_csv_from(
    reader: impl Read + Send,
    source: &str,
    options: &ReadOptions<'_>,
) -> Result<Dataset> {
    let mut reader = reader;
    let mut block = Vec::with_capacity(BLOCK_BYTES);
    fill_block(&mut reader, &mut block, BLOCK_BYTES).map_err(|e| CliError::io(source, e))?;
    read_csv_with(
        &block,
        source,
        options,
        |body, line, layout, labeled, unlabeled| {
            read_body(&mut reader, body, line, layout, labeled, unlabeled)
        },
    )
}

/// Reads the header from `first` (the input's first bytes, at most a block), then has `body`
/// read the records: it is given the bytes of `first` after the header, the line they start
/// at, the columns and the two row buffers to fill.
fn read_csv_with(
    first: &[u8],
    source: &str,
    options: &ReadOptions<'_>,
    body: impl FnOnce(&[u8], u64, &Layout<'_>, &mut Rows, &mut Rows) -> Result<()>,
) -> Result<Dataset> {
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(false)
        .from_reader(first);
    let header = rdr
        .byte_headers()
        .map_err(|e| csv_error(source, e, None))?
        .clone();
    let header_end = rdr.position().byte() as usize;
    let header_lines = rdr.position().line().saturating_sub(1);
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
    let mut labeled = Rows::new(d);
    let mut unlabeled = Rows::new(d);
    let layout = Layout {
        source,
        names: &names,
        label_idx,
        feature_idx: &feature_idx,
        marker: options.unlabeled_marker,
        columns: (0..names.len())
            .map(|i| match feature_idx.iter().position(|&f| f == i) {
                Some(j) => Column::Feature(j),
                None if Some(i) == label_idx => Column::Label,
                None => Column::Skipped,
            })
            .collect(),
    };
    body(
        &first[header_end..],
        header_lines + 1,
        &layout,
        &mut labeled,
        &mut unlabeled,
    )?;
    Ok(Dataset {
        source: source.to_string(),
        features: feature_idx.iter().map(|i| names[*i].clone()).collect(),
        labeled,
        unlabeled,
    })
}

/// Bytes read per block. Each block is split at newlines and parsed in parallel; partial results
/// are appended in order, so the rows keep the file's order. 4 MiB rather than 8: a stream
/// holds several blocks and two blocks' parsed pieces at once, and with the first block no
/// longer copied a piped 1e6 x 16 fit peaked at 156-160 MB rather than 189-197 MB. Loading
/// the file took the same time; at 2 MiB piped loads were slower.
const BLOCK_BYTES: usize = 4 << 20;

/// Where the columns are.
struct Layout<'a> {
    source: &'a str,
    names: &'a [String],
    label_idx: Option<usize>,
    feature_idx: &'a [usize],
    marker: &'a str,
    /// Every column of the file, in file order.
    columns: Vec<Column>,
}

impl Layout<'_> {
    /// Parses one record's cells into `row` (one value per feature, scratch), then stores it.
    fn take(
        &self,
        cells: &[&[u8]],
        line: u64,
        row: &mut [f64],
        labeled: &mut Staged,
        unlabeled: &mut Staged,
    ) -> Result<()> {
        if cells.len() != self.names.len() {
            return Err(CliError::Data(format!(
                "{}:{line}: expected {} fields (as in the header), found {}",
                self.source,
                self.names.len(),
                cells.len()
            )));
        }
        for (v, &j) in row.iter_mut().zip(self.feature_idx) {
            *v = parse_cell(cells[j], self.source, line, &self.names[j])?;
        }
        let label = self.label_idx.map(|i| cells[i].trim_ascii());
        self.store(label, row, line, labeled, unlabeled);
        Ok(())
    }

    /// Stores a parsed row: in `unlabeled` when its (trimmed) label cell is the marker, else in
    /// `labeled` with its label text (none without a label column).
    fn store(
        &self,
        label: Option<&[u8]>,
        row: &[f64],
        line: u64,
        labeled: &mut Staged,
        unlabeled: &mut Staged,
    ) {
        // Compare the label with the marker before allocating: most rows may be unlabeled.
        // The lengths first: with the default empty marker, slice equality called `memcmp` on
        // zero bytes for nearly every row (2.7% of a large load's CPU samples).
        let marker = self.marker.as_bytes();
        let is_unlabeled =
            label.is_some_and(|r| r.len() == marker.len() && (r.is_empty() || r == marker));
        let target = if is_unlabeled { unlabeled } else { labeled };
        target.values.extend_from_slice(row);
        target.lines.push(line);
        if let Some(r) = label.filter(|_| !is_unlabeled) {
            target.push_label(r);
        }
    }
}

/// Appends up to `want` bytes from `reader` to `block` (fewer only at the end of the input),
/// without zeroing the buffer first.
fn fill_block(reader: &mut impl Read, block: &mut Vec<u8>, want: usize) -> std::io::Result<()> {
    block.reserve(want);
    reader.take(want as u64).read_to_end(block)?;
    Ok(())
}

/// Parses the records after the header from a stream. A reader thread fills blocks of whole
/// lines (the partial last line of each read is carried to the start of the next block) while
/// this thread parses the previous one ([`parse_blocks`]); parsed blocks go back to the reader
/// to be refilled, so their memory is touched once. `first` is the input already read: its
/// whole lines are parsed where they lie, only its partial last line is copied.
///
/// Up to two filled blocks wait in the channel: handing each block over only as the last one
/// is parsed peaked up to 4 MB lower but made piped loads slower (medians 0.68–0.75 s
/// against 0.52–0.59 s for a 1e6 x 16 file).
fn read_body(
    reader: &mut (impl Read + Send),
    first: &[u8],
    first_line: u64,
    layout: &Layout<'_>,
    labeled: &mut Rows,
    unlabeled: &mut Rows,
) -> Result<()> {
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<std::io::Result<Vec<u8>>>(2);
        let (recycle_tx, recycle_rx) = std::sync::mpsc::channel::<Vec<u8>>();
        let whole_lines = memchr::memrchr(b'\n', first).map_or(0, |p| p + 1);
        let mut head = Some(&first[..whole_lines]).filter(|h| !h.is_empty());
        let mut carry = first[whole_lines..].to_vec();
        scope.spawn(move || {
            loop {
                let mut block = recycle_rx
                    .try_recv()
                    .unwrap_or_else(|_| Vec::with_capacity(BLOCK_BYTES + carry.len()));
                block.clear();
                block.extend_from_slice(&carry);
                carry.clear();
                let before = block.len();
                if let Err(e) = fill_block(reader, &mut block, BLOCK_BYTES) {
                    let _ = tx.send(Err(e));
                    break;
                }
                let eof = block.len() == before;
                if !eof {
                    // Whole lines only; the rest starts the next block.
                    let end =
                        memchr::memrchr(b'\n', &block[before..]).map_or(0, |p| before + p + 1);
                    carry.extend_from_slice(&block[end..]);
                    block.truncate(end);
                }
                if !block.is_empty() && tx.send(Ok(block)).is_err() {
                    break;
                }
                if eof {
                    break;
                }
            }
        });
        parse_blocks(
            || match head.take() {
                Some(h) => Some(Ok(Cow::Borrowed(h))),
                None => rx.recv().ok().map(|block| {
                    block
                        .map(Cow::Owned)
                        .map_err(|e| CliError::io(layout.source, e))
                }),
            },
            |block| {
                if let Cow::Owned(block) = block {
                    let _ = recycle_tx.send(block);
                }
            },
            |block, line, labeled, unlabeled| {
                let rest = std::io::Cursor::new(block).chain(ChannelReader {
                    rx: &rx,
                    block: Vec::new(),
                    pos: 0,
                });
                read_body_slow(rest, line, layout, labeled, unlabeled)
            },
            first_line,
            input_len_hint(layout.source),
            layout,
            labeled,
            unlabeled,
        )
    })
}

/// Parses the records after the header from memory (`data` starts at the first record), in
/// blocks of whole lines ([`parse_blocks`]), calling `done(end)` after each block with the
/// offset of its end.
fn read_body_bytes(
    data: &[u8],
    first_line: u64,
    layout: &Layout<'_>,
    labeled: &mut Rows,
    unlabeled: &mut Rows,
    mut done: impl FnMut(usize),
) -> Result<()> {
    let pos = std::cell::Cell::new(0);
    parse_blocks(
        || {
            let start = pos.get();
            (start < data.len()).then(|| {
                let end = block_end(data, start);
                pos.set(end);
                Ok(&data[start..end])
            })
        },
        |_| done(pos.get()),
        |block, line, labeled, unlabeled| {
            let rest = block.chain(&data[pos.get()..]);
            read_body_slow(rest, line, layout, labeled, unlabeled)
        },
        first_line,
        Some(data.len() as u64),
        layout,
        labeled,
        unlabeled,
    )
}

/// Where the block of `data` starting at `start` ends: after the last newline within
/// [`BLOCK_BYTES`], or after the first one past them when a line is longer than that.
fn block_end(data: &[u8], start: usize) -> usize {
    let limit = start + BLOCK_BYTES;
    if limit >= data.len() {
        return data.len();
    }
    match memchr::memrchr(b'\n', &data[start..limit]) {
        Some(p) => start + p + 1,
        None => memchr::memchr(b'\n', &data[limit..]).map_or(data.len(), |p| limit + p + 1),
    }
}

/// Parses blocks of whole lines, as `next` gives them, into `labeled` and `unlabeled` in
/// file order. Each block is split into pieces parsed in parallel ([`parse_block`]) while the
/// rows of the block before are appended; a parsed block is handed to `done`. Blocks without
/// quote characters take this fast path; from the first block with a quote, `slow` reads that
/// block and the rest of the input (given the block and its first line), so that quoted fields
/// are always read correctly. `input_len` (bytes, when known) sizes the row buffers once.
#[allow(clippy::too_many_arguments)]
fn parse_blocks<B: AsRef<[u8]> + Sync>(
    mut next: impl FnMut() -> Option<Result<B>>,
    mut done: impl FnMut(B),
    slow: impl FnOnce(B, u64, &mut Rows, &mut Rows) -> Result<()>,
    first_line: u64,
    input_len: Option<u64>,
    layout: &Layout<'_>,
    labeled: &mut Rows,
    unlabeled: &mut Rows,
) -> Result<()> {
    let mut line = first_line; // line number of the next block's first byte
    // Two sets of piece buffers: while one block is parsed into one, the rows of the block
    // before are appended from the other (a serial copy that would otherwise leave a core
    // idle).
    let (mut parsing, mut parsed) = (Vec::new(), Vec::new());
    let mut pending: Option<(Vec<u64>, usize)> = None; // piece first lines, block bytes
    let mut reserved = false;
    // Input of unknown size (a pipe) is staged whole, row-major, and laid out at the end
    // (`Rows::append_staged_whole`): columns that grow copy every row at each step.
    let mut whole: Option<(Staged, Staged)> = input_len.is_none().then(Default::default);
    let mut append = |pieces: &mut Vec<(Staged, Staged)>, pending: Option<(Vec<u64>, usize)>| {
        if let (Some((wl, wu)), Some((starts, _))) = (whole.as_mut(), pending.as_ref()) {
            for ((l, u), &start) in pieces.iter().zip(starts) {
                wl.append(l, start);
                wu.append(u, start);
            }
            return;
        }
        if let Some((starts, bytes)) = pending {
            // Before the first block's rows are appended, so that the columns are allocated
            // once rather than grown piece by piece.
            if !reserved {
                reserved = true;
                if let Some(total) = input_len {
                    let seen = pieces.iter().fold((0, 0), |(l, u), (pl, pu)| {
                        (l + pl.lines.len(), u + pu.lines.len())
                    });
                    reserve_for_input(total, bytes, seen, labeled, unlabeled);
                }
            }
            append_pieces(pieces, &starts, labeled, unlabeled);
        }
    };
    while let Some(block) = next() {
        let block = block?;
        let (result, ()) = rayon::join(
            || parse_block(block.as_ref(), line, layout, &mut parsing),
            || append(&mut parsed, pending.take()),
        );
        let Some((starts, next_line)) = result? else {
            if let Some((wl, wu)) = whole.as_mut() {
                labeled.append_staged_whole(wl);
                unlabeled.append_staged_whole(wu);
            }
            return slow(block, line, labeled, unlabeled);
        };
        line = next_line;
        pending = Some((starts, block.as_ref().len()));
        std::mem::swap(&mut parsing, &mut parsed);
        done(block);
    }
    append(&mut parsed, pending.take());
    if let Some((wl, wu)) = whole.as_mut() {
        labeled.append_staged_whole(wl);
        unlabeled.append_staged_whole(wu);
    }
    Ok(())
}

/// Reads the blocks still coming from the reader thread (for the `csv` fallback).
struct ChannelReader<'a> {
    rx: &'a std::sync::mpsc::Receiver<std::io::Result<Vec<u8>>>,
    block: Vec<u8>,
    pos: usize,
}

impl Read for ChannelReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.pos == self.block.len() {
            match self.rx.recv() {
                Ok(block) => {
                    self.block = block?;
                    self.pos = 0;
                }
                Err(_) => return Ok(0),
            }
        }
        let k = buf.len().min(self.block.len() - self.pos);
        buf[..k].copy_from_slice(&self.block[self.pos..self.pos + k]);
        self.pos += k;
        Ok(k)
    }
}

/// Reserves the row buffers for the whole file once, from the bytes per row of the first block
/// (`bytes_seen` bytes held `seen` labeled and unlabeled rows), so that they do not grow (and
/// transiently need the data two and a half times) while filling.
fn reserve_for_input(
    total: u64,
    bytes_seen: usize,
    seen: (usize, usize),
    labeled: &mut Rows,
    unlabeled: &mut Rows,
) {
    let rows_seen = (seen.0 + seen.1).max(1) as f64;
    let est_rows = (total as f64 / bytes_seen.max(1) as f64 * rows_seen * 1.02) as usize;
    let est_l = (est_rows as f64 * seen.0 as f64 / rows_seen) as usize;
    labeled.reserve(est_l.saturating_sub(labeled.len()));
    unlabeled.reserve(
        est_rows
            .saturating_sub(est_l)
            .saturating_sub(unlabeled.len()),
    );
}

/// File size for capacity estimates (None for standard input).
fn input_len_hint(source: &str) -> Option<u64> {
    (source != "-")
        .then(|| std::fs::metadata(source).ok().map(|m| m.len()))
        .flatten()
}

/// What a column of the file is to the reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Column {
    /// A feature, stored at this position of the row.
    Feature(usize),
    /// The label column.
    Label,
    /// Neither: read past.
    Skipped,
}

/// Outcome of parsing one piece of whole lines.
enum Piece {
    /// Its rows were stored; it held this many lines.
    Parsed(u64),
    /// It contains a quote character: the whole block must go to the `csv` crate.
    Quoted,
}

/// Parses a block of complete lines in parallel pieces, into `scratch`: one (labeled,
/// unlabeled) pair of buffers per piece, kept from block to block so that their memory is
/// faulted in once per file rather than once per block. Returns the first line of each piece
/// and the line after the block, or `None` when the block contains a quote character and
/// needs the `csv` crate.
fn parse_block(
    data: &[u8],
    first_line: u64,
    layout: &Layout<'_>,
    scratch: &mut Vec<(Staged, Staged)>,
) -> Result<Option<(Vec<u64>, u64)>> {
    use rayon::prelude::*;
    // Split into pieces at newlines.
    let pieces_wanted = rayon::current_num_threads() * 4;
    let target = data.len().div_ceil(pieces_wanted).max(1 << 16);
    let mut pieces: Vec<&[u8]> = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        let cut = if rest.len() <= target {
            rest.len()
        } else {
            memchr::memchr(b'\n', &rest[target..]).map_or(rest.len(), |p| target + p + 1)
        };
        let (piece, after) = rest.split_at(cut);
        pieces.push(piece);
        rest = after;
    }
    // Each piece counts its own lines from 0 (a piece does not know how many lines come before
    // it); the line numbers are shifted when the pieces are appended in order.
    scratch.truncate(pieces.len());
    scratch.resize_with(pieces.len(), Default::default);
    let parts: Vec<Result<Piece>> = pieces
        .par_iter()
        .zip(scratch.par_iter_mut())
        .map(|(piece, (l, u))| parse_piece(piece, 0, layout, l, u))
        .collect();
    let mut line = first_line;
    let mut starts = Vec::with_capacity(parts.len());
    for (i, part) in parts.into_iter().enumerate() {
        match part {
            Ok(Piece::Parsed(lines)) => {
                starts.push(line);
                line += lines;
            }
            Ok(Piece::Quoted) => return Ok(None),
            // The first piece in error: parse it again knowing its first line, so that the
            // message names the line in the whole file.
            Err(_) => {
                let (l, u) = &mut scratch[i];
                return match parse_piece(pieces[i], line, layout, l, u)? {
                    Piece::Quoted => Ok(None),
                    Piece::Parsed(..) => Err(CliError::Data(format!(
                        "{}: internal error: a block parsed differently twice",
                        layout.source
                    ))),
                };
            }
        }
    }
    Ok(Some((starts, line)))
}

/// Appends the rows of the pieces in order (transposed into the columns), numbering their lines
/// from each piece's first line.
fn append_pieces(
    pieces: &mut [(Staged, Staged)],
    starts: &[u64],
    labeled: &mut Rows,
    unlabeled: &mut Rows,
) {
    for ((l, u), &start) in pieces.iter_mut().zip(starts) {
        labeled.append_staged(l, start);
        unlabeled.append_staged(u, start);
    }
}

/// Parses one piece of whole lines into `l` and `u` (emptied first), numbering them from
/// `first_line`.
///
/// Each row is first read in one pass: a number is parsed where each feature cell starts, and
/// the byte after it must be the separator. Any row that does not fit that shape (spaces around
/// a number, an empty or non-numeric cell, a blank line, a wrong number of fields) is read again
/// by splitting it at commas, which accepts what it can and names the line and column of what
/// it cannot. Every byte is looked at by one of the two, so a quote anywhere is found on the way.
fn parse_piece(
    piece: &[u8],
    first_line: u64,
    layout: &Layout<'_>,
    l: &mut Staged,
    u: &mut Staged,
) -> Result<Piece> {
    struct Job<'j, 'p> {
        piece: &'p [u8],
        first_line: u64,
        layout: &'j Layout<'j>,
        sides: (&'j mut Staged, &'j mut Staged),
    }
    impl ReadsNumbers for Job<'_, '_> {
        type Output = Result<Piece>;
        #[inline(always)]
        fn run<N: NumberReader>(self, numbers: N) -> Result<Piece> {
            let (l, u) = self.sides;
            parse_piece_with(numbers, self.piece, self.first_line, self.layout, l, u)
        }
    }
    crate::number::with_fastest_reader(Job {
        piece,
        first_line,
        layout,
        sides: (l, u),
    })
}

/// [`parse_piece`] with a given number reader (inlined into the reader's dispatch, so that it is
/// compiled for the reader's instructions).
#[inline(always)]
fn parse_piece_with<N: NumberReader>(
    numbers: N,
    piece: &[u8],
    first_line: u64,
    layout: &Layout<'_>,
    l: &mut Staged,
    u: &mut Staged,
) -> Result<Piece> {
    let d = layout.feature_idx.len();
    // No room is reserved up front: the buffers keep their capacity from block to block, and
    // reserving a whole piece's rows on both sides raised the peak memory of a load by 15 MB.
    l.clear();
    u.clear();
    let mut row = vec![0.0; d];
    let mut slots = RowSlots::new(d);
    let mut cells: Vec<&[u8]> = Vec::with_capacity(layout.columns.len());
    let mut line = first_line;
    let mut pos = 0;
    while pos < piece.len() {
        let start = pos;
        match read_row(numbers, piece, &mut pos, layout, &mut slots, &mut row) {
            Some(Ok(label)) => layout.store(label, &row, line, l, u),
            Some(Err(())) => return Ok(Piece::Quoted),
            None => {
                let end = memchr::memchr(b'\n', &piece[start..]).map_or(piece.len(), |p| start + p);
                let text = &piece[start..end];
                if memchr::memchr(b'"', text).is_some() {
                    return Ok(Piece::Quoted);
                }
                cells.clear();
                cells.extend(text.split(|&b| b == b','));
                if let Some(last) = cells.last_mut() {
                    *last = last.strip_suffix(b"\r").unwrap_or(last);
                }
                let blank = cells.len() == 1 && cells[0].is_empty();
                if !blank {
                    layout.take(&cells, line, &mut row, l, u)?;
                }
                pos = end + 1;
            }
        }
        line += 1;
    }
    Ok(Piece::Parsed(line - first_line))
}

/// Reads the row starting at `*pos` in one pass, if it has the plain shape (numbers right at the
/// cell starts, separators right after them): the features go into `row` (through `slots`, so
/// that the reader finishes the row's numbers together), `*pos` moves past the line's end, and
/// the label cell (trimmed) is returned. `None`: read the row the general way (`*pos` is then
/// meaningless). `Some(Err(()))`: a quote character was met.
#[inline(always)]
fn read_row<'p, N: NumberReader>(
    numbers: N,
    piece: &'p [u8],
    pos: &mut usize,
    layout: &Layout<'_>,
    slots: &mut RowSlots,
    row: &mut [f64],
) -> Option<std::result::Result<Option<&'p [u8]>, ()>> {
    let mut p = *pos;
    let mut label = None;
    let last = layout.columns.len() - 1;
    for (c, column) in layout.columns.iter().enumerate() {
        match *column {
            Column::Feature(j) => p += numbers.read_slot(&piece[p..], slots, j)?,
            Column::Label | Column::Skipped => {
                let s = p;
                while let Some(&b) = piece.get(p) {
                    match b {
                        b',' | b'\n' => break,
                        b'"' => return Some(Err(())),
                        _ => p += 1,
                    }
                }
                if *column == Column::Label {
                    let cell = &piece[s..p];
                    let cell = if c == last {
                        cell.strip_suffix(b"\r").unwrap_or(cell)
                    } else {
                        cell
                    };
                    label = Some(cell.trim_ascii());
                }
            }
        }
        if c < last {
            if piece.get(p) != Some(&b',') {
                return None;
            }
            p += 1;
        } else {
            match piece.get(p) {
                None => {}
                Some(b'\n') => p += 1,
                Some(b'\r') if piece.get(p + 1) == Some(&b'\n') => p += 2,
                Some(_) => return None,
            }
        }
    }
    numbers.finish(slots, row);
    *pos = p;
    Some(Ok(label))
}

/// The `csv` crate's parser for input with quotes, starting at `first_line`.
fn read_body_slow(
    input: impl Read,
    first_line: u64,
    layout: &Layout<'_>,
    labeled: &mut Rows,
    unlabeled: &mut Rows,
) -> Result<()> {
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(LineTracker::new(input, first_line));
    let mut record = csv::ByteRecord::new();
    let mut row = vec![0.0; layout.feature_idx.len()];
    // Rows are staged (their lines absolute) and appended to the columns a run at a time.
    let (mut l, mut u) = (Staged::default(), Staged::default());
    loop {
        match rdr.read_byte_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => {
                let line = e.position().map(|p| rdr.get_mut().line_at(p.byte()));
                return Err(csv_error(layout.source, e, line));
            }
        }
        let start = record.position().map_or(0, |p| p.byte());
        let line = rdr.get_mut().line_at(start);
        let cells: Vec<&[u8]> = record.iter().collect();
        layout.take(&cells, line, &mut row, &mut l, &mut u)?;
        if l.lines.len() + u.lines.len() >= SLOW_RUN_ROWS {
            labeled.append_staged(&mut l, 0);
            unlabeled.append_staged(&mut u, 0);
            l.clear();
            u.clear();
        }
    }
    labeled.append_staged(&mut l, 0);
    unlabeled.append_staged(&mut u, 0);
    Ok(())
}

/// Rows the `csv` path stages before appending them to the columns.
const SLOW_RUN_ROWS: usize = 4096;

/// Counts lines under the `csv` crate, whose own record positions point at the line ending
/// or blank lines before a record rather than at the record: after `"1,2\r\n3,4"` it places
/// `3,4` on line 1, and after a blank line it is one line short.
#[derive(Debug)]
struct LineTracker<R> {
    inner: R,
    /// Bytes read so far.
    offset: u64,
    /// Offsets and bytes of the `\r` and `\n` read but not yet passed.
    endings: std::collections::VecDeque<(u64, u8)>,
    /// Line of the first byte not yet passed.
    line: u64,
}

impl<R: Read> LineTracker<R> {
    fn new(inner: R, first_line: u64) -> Self {
        Self {
            inner,
            offset: 0,
            endings: Default::default(),
            line: first_line,
        }
    }

    /// The line of the record that the `csv` crate places at byte `at` (offsets only grow):
    /// line endings before `at`, and those right at `at` (skipped before the record), are
    /// counted.
    fn line_at(&mut self, mut at: u64) -> u64 {
        while let Some(&(offset, byte)) = self.endings.front() {
            if offset > at {
                break;
            }
            if offset == at {
                at += 1;
            }
            self.line += u64::from(byte == b'\n');
            self.endings.pop_front();
        }
        self.line
    }
}

impl<R: Read> Read for LineTracker<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        for i in memchr::memchr2_iter(b'\r', b'\n', &buf[..n]) {
            self.endings.push_back((self.offset + i as u64, buf[i]));
        }
        self.offset += n as u64;
        Ok(n)
    }
}

fn csv_error(source: &str, e: csv::Error, line: Option<u64>) -> CliError {
    let line = line.or_else(|| e.position().map(|p| p.line()));
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

/// An error when `out` names the same existing file as one of `inputs` (flag, path): through
/// another spelling of its path, a symbolic link or (on Unix) a hard link. `-` (standard input)
/// is never a file here.
pub fn refuse_to_overwrite_inputs(out: &str, inputs: &[(&str, &String)]) -> Result<()> {
    let Ok(out_meta) = std::fs::metadata(out) else {
        // Nothing there yet, so nothing to lose.
        return Ok(());
    };
    for (flag, input) in inputs {
        if input.as_str() == "-" {
            continue;
        }
        let Ok(in_meta) = std::fs::metadata(input) else {
            continue;
        };
        if same_file(out, &out_meta, input, &in_meta) {
            return Err(CliError::Usage(format!(
                "--out {out} is the {flag} file ({input}); writing there would replace it. \
                 Choose another output path"
            )));
        }
    }
    Ok(())
}

#[cfg(unix)]
fn same_file(_: &str, a: &std::fs::Metadata, _: &str, b: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    (a.dev(), a.ino()) == (b.dev(), b.ino())
}

#[cfg(not(unix))]
fn same_file(a: &str, _: &std::fs::Metadata, b: &str, _: &std::fs::Metadata) -> bool {
    matches!(
        (std::fs::canonicalize(a), std::fs::canonicalize(b)),
        (Ok(a), Ok(b)) if a == b
    )
}

/// Writes `contents` to `path` atomically: a temporary file in the same directory, then rename.
/// On failure nothing is left behind and an existing file is untouched.
pub fn write_atomic(path: &str, contents: &[u8]) -> Result<()> {
    write_atomic_with(path, |file| {
        use std::io::Write;
        file.write_all(contents).map_err(|e| CliError::io(path, e))
    })
}

/// [`write_atomic`] of what `write` writes, piece by piece, to the temporary file (so that a
/// large output need not be held whole in memory first). An error from `write` (its own, or
/// writing) leaves nothing behind, as any other.
pub fn write_atomic_with(
    path: &str,
    write: impl FnOnce(&mut std::fs::File) -> Result<()>,
) -> Result<()> {
    let target = std::path::Path::new(path);
    let dir = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    if !dir.is_dir() {
        // Said plainly: the temporary file's error would name a random file in that directory.
        return Err(CliError::Data(format!(
            "{path}: cannot write: the directory '{}' does not exist",
            dir.display()
        )));
    }
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| CliError::io(path, e))?;
    write(tmp.as_file_mut())?;
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

    /// Reads `text` both as a stream and from memory (as a mapped file is read), and requires
    /// the same rows or the same error from both.
    fn read_both(text: &str, options: &ReadOptions<'_>) -> Result<Dataset> {
        let streamed = read_csv_from(text.as_bytes(), "t.csv", options);
        let in_memory = read_csv_bytes(text.as_bytes(), "t.csv", options);
        assert_same(&streamed, &in_memory);
        streamed
    }

    /// Two reads of one input gave the same rows, or the same error.
    fn assert_same(a: &Result<Dataset>, b: &Result<Dataset>) {
        match (a, b) {
            (Ok(x), Ok(y)) => assert!(x == y, "the two reads differ"),
            (Err(x), Err(y)) => assert_eq!(x.to_string(), y.to_string()),
            _ => panic!("one read: {a:?}\nthe other: {b:?}"),
        }
    }

    fn read(text: &str, label: Option<&str>) -> Result<Dataset> {
        read_both(
            text,
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
        assert_eq!(d.labeled.to_row_major(), vec![1.0, 2.0, 5.0, 6.0]);
        assert_eq!(d.labeled.labels().collect::<Vec<_>>(), vec!["x", "z"]);
        assert_eq!(d.labeled.lines(), vec![2, 4]);
        assert_eq!(d.unlabeled.to_row_major(), vec![3.0, 4.0]);
        assert_eq!(d.labeled.matrix()[(1, 0)], 5.0);
    }

    /// A file of several blocks: n rows "i,i/2,label" with every third row unlabeled.
    fn big(n: usize) -> String {
        let mut t = String::from("a,b,y\n");
        for i in 0..n {
            let label = if i % 3 == 0 { "" } else { "k" };
            t.push_str(&format!("{i},{}.5,{label}\r\n", i / 2));
        }
        t
    }

    #[test]
    fn files_larger_than_a_block_keep_every_row_in_order() {
        let n = 900_000; // about 15 MB, four blocks
        let text = big(n);
        assert!(text.len() > BLOCK_BYTES);
        let d = read(&text, Some("y")).unwrap();
        assert_eq!(d.labeled.len() + d.unlabeled.len(), n);
        assert_eq!(d.unlabeled.len(), n.div_ceil(3));
        let (u, l) = (d.unlabeled.matrix(), d.labeled.matrix());
        for (r, i) in (0..n).filter(|i| i % 3 == 0).enumerate() {
            assert_eq!(u[(r, 0)], i as f64);
            assert_eq!(d.unlabeled.lines()[r], i as u64 + 2);
        }
        let last = (0..n).rev().find(|i| i % 3 != 0).unwrap();
        assert_eq!(l[(l.nrows() - 1, 0)], last as f64);
        assert_eq!(l[(l.nrows() - 1, 1)], (last / 2) as f64 + 0.5);
        assert_eq!(*d.labeled.lines().last().unwrap(), last as u64 + 2);
    }

    /// Gives at most `step` bytes per read, as a pipe may.
    struct Trickle<'a> {
        rest: &'a [u8],
        step: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let k = buf.len().min(self.step).min(self.rest.len());
            buf[..k].copy_from_slice(&self.rest[..k]);
            self.rest = &self.rest[k..];
            Ok(k)
        }
    }

    #[test]
    fn lines_longer_than_a_block_are_read_whole() {
        let options = ReadOptions {
            label: Some("y"),
            features: None,
            unlabeled_marker: "",
            require_label: true,
        };
        let long = "k".repeat(BLOCK_BYTES + BLOCK_BYTES / 2);
        // The first record longer than the first block (whose body then holds no whole line),
        // one across a later block's end, and a last line without its newline.
        let mut text = format!("a,b,y\n1,2,{long}\n");
        text.push_str(&big(300_000)[6..]);
        text.push_str(&format!("3,4,{long}\n5,6,x\n7,8,{long}"));
        let d = read_both(&text, &options).unwrap();
        let trickled = read_csv_from(
            Trickle {
                rest: text.as_bytes(),
                step: 65_537,
            },
            "t.csv",
            &options,
        );
        assert_same(&Ok(d.clone()), &trickled);
        let n = d.labeled.len();
        assert_eq!(d.labeled.len() + d.unlabeled.len(), 300_004);
        assert_eq!(d.labeled.label(0), Some(long.as_str()));
        assert_eq!(d.labeled.label(n - 3), Some(long.as_str()));
        assert_eq!(d.labeled.label(n - 2), Some("x"));
        assert_eq!(d.labeled.label(n - 1), Some(long.as_str()));
        assert_eq!(d.labeled.lines()[n - 1], 300_005);
        let l = d.labeled.matrix();
        assert_eq!((l[(n - 3, 1)], l[(n - 1, 0)]), (4.0, 7.0));
    }

    #[test]
    fn errors_past_the_first_block_name_the_right_line() {
        let mut text = big(900_000);
        text.push_str("1,oops,k\n");
        let e = read(&text, Some("y")).unwrap_err().to_string();
        assert_eq!(
            e,
            "t.csv:900002: column 'b' has the non-numeric value 'oops'"
        );
    }

    #[test]
    fn quoted_fields_after_the_first_block_use_the_csv_parser() {
        let mut text = big(600_000);
        text.push_str("\"7\",\"8.25\",\"a, quoted label\"\n9,10,k\n");
        let d = read(&text, Some("y")).unwrap();
        let l = d.labeled.matrix();
        let n = l.nrows();
        assert_eq!((l[(n - 2, 0)], l[(n - 2, 1)]), (7.0, 8.25));
        assert_eq!(d.labeled.label(n - 2), Some("a, quoted label"));
        assert_eq!(d.labeled.lines()[n - 1], 600_003);
    }

    /// Rows of many shapes: plain, spaces around numbers, signs, exponents, CRLF, blank lines,
    /// unlabeled rows, a padded label; the label is not the last column and one column is read
    /// past. `quote_first` quotes the first cell, which sends the whole file to the `csv` crate.
    fn mixed(n: usize, quote_first: bool) -> String {
        let mut t = String::from("a,y,b,skip,c\n");
        for i in 0..n {
            let row = match i % 8 {
                0 => format!("{i},k{},{}.25,x,-{i}e-3\n", i % 3, i / 2),
                1 => format!(" {i} ,k1, {}.5,x,+{i}\r\n", i / 3),
                2 => "\n".to_string(),
                3 => format!("{i},,1,x,2\n"),
                4 => format!("{i}, k2 ,1,,2.5E1\n"),
                5 => format!("{i}.,k0,.5,x,1e2\r\n"),
                6 => format!("-0.{i},k1,1,x x,0.1\n"),
                _ => format!("{i},,{}.75 ,x,3\n", i % 5),
            };
            if i == 0 && quote_first {
                t.push_str(&format!("\"{}", &row[..1]));
                t.push('"');
                t.push_str(&row[1..]);
            } else {
                t.push_str(&row);
            }
        }
        t
    }

    fn read_features(text: &str, features: &[String]) -> Result<Dataset> {
        read_both(
            text,
            &ReadOptions {
                label: Some("y"),
                features: Some(features),
                unlabeled_marker: "",
                require_label: true,
            },
        )
    }

    #[test]
    fn rows_of_every_shape_read_as_the_csv_crate_reads_them() {
        // About 250 kB: several parallel pieces, each mixing one-pass and general rows.
        let n = 12_000;
        let features = ["c".to_string(), "a".to_string(), "b".to_string()];
        let fast = read_features(&mixed(n, false), &features).unwrap();
        let reference = read_features(&mixed(n, true), &features).unwrap();
        assert_eq!(fast.features, vec!["c", "a", "b"]);
        for (f, r) in [
            (&fast.labeled, &reference.labeled),
            (&fast.unlabeled, &reference.unlabeled),
        ] {
            assert_eq!(f.to_row_major(), r.to_row_major());
            assert_eq!(f.lines(), r.lines());
            assert!(f.labels().eq(r.labels()));
        }
        // Blank lines are skipped, the rest split by their label cell.
        assert_eq!(fast.labeled.len() + fast.unlabeled.len(), n - n / 8);
        assert_eq!(fast.unlabeled.len(), 2 * n / 8);
        // Spot checks against the text: row 9 (line 11) is " 9 ,k1, 3.5,x,+9".
        let at = fast.labeled.lines().iter().position(|&l| l == 11).unwrap();
        assert_eq!(
            &fast.labeled.to_row_major()[3 * at..3 * at + 3],
            &[9.0, 9.0, 3.5]
        );
        assert_eq!(fast.labeled.label(at), Some("k1"));
        let at = fast.labeled.lines().iter().position(|&l| l == 14).unwrap();
        assert_eq!(fast.labeled.label(at), Some("k2"));
        assert_eq!(
            &fast.labeled.to_row_major()[3 * at..3 * at + 3],
            &[25.0, 12.0, 1.0]
        );
    }

    #[test]
    fn errors_and_quotes_in_a_later_piece_are_found() {
        let features = ["c".to_string(), "a".to_string(), "b".to_string()];
        let n = 12_000;
        let text = mixed(n, false);
        let cut = text.len() - 1000;
        let cut = cut + text[cut..].find('\n').unwrap() + 1;
        let line = text[..cut].matches('\n').count() + 1;
        for (bad, message) in [
            (
                "1,k1,2,x,oops\n",
                "column 'c' has the non-numeric value 'oops'",
            ),
            (
                "1,k1,inf,x,2\n",
                "column 'b' has the non-finite value 'inf'",
            ),
            (
                "1,k1,2,x\n",
                "expected 5 fields (as in the header), found 4",
            ),
            ("1,k1,,x,2\n", "column 'b' is empty"),
        ] {
            let mut t = text.clone();
            t.insert_str(cut, bad);
            let e = read_features(&t, &features).unwrap_err().to_string();
            assert!(e.starts_with(&format!("t.csv:{line}: {message}")), "{e}");
        }
        // A quoted label late in the block: the `csv` crate reads the whole block, and takes
        // the quotes off, also where no comma needs them.
        for (quoted, label) in [("1,\"k,1\",3,x,2\n", "k,1"), ("1,\"k2\",3,x,2\n", "k2")] {
            let mut text = text.clone();
            text.insert_str(cut, quoted);
            let d = read_features(&text, &features).unwrap();
            let at = d
                .labeled
                .lines()
                .iter()
                .position(|&l| l == line as u64)
                .unwrap();
            assert_eq!(d.labeled.label(at), Some(label));
            assert_eq!(
                &d.labeled.to_row_major()[3 * at..3 * at + 3],
                &[2.0, 1.0, 3.0]
            );
        }
    }

    #[test]
    fn quoted_input_names_the_lines_of_the_file() {
        // CRLF endings, a blank line and a quoted cell over two lines: the `csv` crate's own
        // positions would put `3,4` on line 2 and `7,8` on line 5.
        let text = "a,b,y\n\"1\",2,x\r\n3,4,x\r\n\r\n5,6,\"two\nlines\"\n7,8,x\n";
        let d = read(text, Some("y")).unwrap();
        assert_eq!(d.labeled.lines(), vec![2, 3, 5, 7]);
        assert_eq!(d.labeled.label(2), Some("two\nlines"));
        assert_eq!(
            d.labeled.to_row_major(),
            vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
        );
        let e = read(&format!("{text}9,oops,x\n"), Some("y"))
            .unwrap_err()
            .to_string();
        assert_eq!(e, "t.csv:8: column 'b' has the non-numeric value 'oops'");
        let e = read(&format!("{text}\r\n9\n"), Some("y"))
            .unwrap_err()
            .to_string();
        assert_eq!(e, "t.csv:9: expected 3 fields (as in the header), found 1");
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

    #[test]
    fn files_are_read_through_a_map_as_streams_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let options = ReadOptions {
            label: Some("y"),
            features: None,
            unlabeled_marker: "",
            require_label: true,
        };
        // Several blocks, a file without a final newline, and an empty file (which is not
        // mapped: it is read as a stream and has no header).
        let mut two_blocks = big(900_000);
        two_blocks.pop();
        for text in [two_blocks.as_str(), "a,b,y\n1,2,x\n3,4,", ""] {
            let path = dir.path().join("t.csv");
            std::fs::write(&path, text).unwrap();
            let path = path.to_str().unwrap();
            let from_file = read_csv(path, &options);
            assert_same(&from_file, &read_csv_from(text.as_bytes(), path, &options));
        }
        let small = read_csv(dir.path().join("t.csv").to_str().unwrap(), &options);
        assert!(small.unwrap_err().to_string().contains("missing header"));
    }
}
