//! The rows a CSV file holds, column-major, as the models' kernels read them.
//!
//! Why column-major: every pass of the fits and predictions reads a chunk of rows column by
//! column. Row-major rows (the order a parser meets the values in) were copied into a
//! column-major buffer per chunk and worker, on every pass: an EM iteration on 1e6 × 16 rows
//! cost 1.2–1.25× one on column-major rows (BENCHMARKS.md), and on wide data each worker's copy
//! of a 4096-row chunk was 32 MB at d = 1000, held for the process's life. Here the parser's
//! rows are staged row-major a piece at a time (`Staged`) and transposed once into the
//! columns as each piece is appended.
//!
//! Labels are kept as an index per row into a table of the distinct labels ([`LabelTable`]):
//! a `String` per row took about 56 bytes (its header and a heap block), 56 MB for a million
//! labeled rows, and `fit` cloned them all once more to find the classes.
//!
//! The columns have room for `stride` rows each (more than `len` while rows are still coming):
//! growing copies each column into a larger buffer, as a `Vec` does its values. A file's rows
//! are reserved at once from its size (`data::reserve_for_input`), so a file read through a
//! memory map usually allocates them once; the room not yet written is zero pages that take no
//! memory until written (with huge pages, those sharing a 2 MB page with written rows do).

use std::collections::HashMap;

use faer::MatRef;

/// Distinct labels, numbered in the order they were first met.
#[derive(Debug, Default, Clone)]
pub struct LabelTable {
    names: Vec<String>,
    /// Name → number, kept once there are more than [`FEW_LABELS`] (below, a scan is quicker
    /// than hashing).
    index: HashMap<String, u32>,
}

/// Labels a table scans rather than hashes.
const FEW_LABELS: usize = 16;

impl LabelTable {
    /// The distinct labels, in the order met.
    pub fn names(&self) -> &[String] {
        &self.names
    }
    /// The number of `label`, added if new.
    pub fn id_of(&mut self, label: &str) -> u32 {
        let found = if self.names.len() <= FEW_LABELS {
            self.names.iter().position(|n| n == label).map(|p| p as u32)
        } else {
            self.index.get(label).copied()
        };
        if let Some(id) = found {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(label.to_string());
        if self.names.len() > FEW_LABELS {
            if self.index.is_empty() {
                let all = self.names.iter().enumerate();
                self.index = all.map(|(i, n)| (n.clone(), i as u32)).collect();
            } else {
                self.index.insert(label.to_string(), id);
            }
        }
        id
    }
    /// Appends `ids` (numbers in `other`) to `out` as numbers of this table, adding `other`'s
    /// labels where new.
    fn renumber_into(&mut self, other: &LabelTable, ids: &[u32], out: &mut Vec<u32>) {
        let map: Vec<u32> = other.names.iter().map(|n| self.id_of(n)).collect();
        out.extend(ids.iter().map(|&i| map[i as usize]));
    }
    /// Empties it, keeping its memory.
    fn clear(&mut self) {
        self.names.clear();
        self.index.clear();
    }
}

/// Rows of one kind (labeled or unlabeled) with the file lines they came from.
#[derive(Debug, Default, Clone)]
pub struct Rows {
    /// Column-major: feature j of row i at `columns[j · stride + i]`, `stride · n_features`
    /// values.
    columns: Vec<f64>,
    /// Rows each column has room for (≥ the number of rows).
    stride: usize,
    /// 1-based line in the source file of each row (their number is the number of rows).
    lines: Vec<u64>,
    /// Each row's label, a number in `label_table`, for labeled rows read with a label column
    /// (empty otherwise).
    labels: Vec<u32>,
    label_table: LabelTable,
    n_features: usize,
}

impl PartialEq for Rows {
    /// The same rows, lines and labels, whatever room each has.
    fn eq(&self, other: &Self) -> bool {
        self.n_features == other.n_features
            && self.lines == other.lines
            && self.labels().eq(other.labels())
            && (0..self.n_features).all(|j| self.column(j) == other.column(j))
    }
}

impl Rows {
    /// No rows of `n_features` features.
    pub fn new(n_features: usize) -> Self {
        Rows {
            n_features,
            ..Default::default()
        }
    }
    /// Number of features (columns).
    pub fn n_features(&self) -> usize {
        self.n_features
    }
    /// The 1-based line in the source file of each row.
    pub fn lines(&self) -> &[u64] {
        &self.lines
    }
    /// The label of each row, for labeled rows read with a label column (none otherwise:
    /// unlabeled rows carry no label).
    pub fn labels(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.labels
            .iter()
            .map(|&id| self.label_table.names[id as usize].as_str())
    }
    /// Row `i`'s label, if it has one.
    pub fn label(&self, i: usize) -> Option<&str> {
        let id = *self.labels.get(i)?;
        Some(self.label_table.names[id as usize].as_str())
    }
    /// Each row's label as a number in [`Rows::label_names`] (empty without labels).
    pub fn label_ids(&self) -> &[u32] {
        &self.labels
    }
    /// The distinct labels of the rows, in the order first met.
    pub fn label_names(&self) -> &[String] {
        self.label_table.names()
    }
    /// Number of rows.
    pub fn len(&self) -> usize {
        self.lines.len()
    }
    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }
    /// The rows as an n × d column-major matrix view (columns `stride` values apart).
    pub fn matrix(&self) -> MatRef<'_, f64> {
        if self.is_empty() || self.n_features == 0 {
            return MatRef::from_column_major_slice(&[], self.len(), self.n_features);
        }
        MatRef::from_column_major_slice_with_stride(
            &self.columns,
            self.len(),
            self.n_features,
            self.stride,
        )
    }
    /// Feature `j` of every row.
    pub fn column(&self, j: usize) -> &[f64] {
        if self.stride == 0 {
            return &[];
        }
        &self.columns[j * self.stride..][..self.len()]
    }
    /// The rows row-major (n · d values), a copy.
    pub fn to_row_major(&self) -> Vec<f64> {
        let x = self.matrix();
        let mut out = Vec::with_capacity(self.len() * self.n_features);
        for i in 0..x.nrows() {
            out.extend(x.row(i).iter().copied());
        }
        out
    }
    /// Room for `more` rows after the last, in one allocation.
    pub fn reserve(&mut self, more: usize) {
        let want = self.len() + more;
        if want > self.stride {
            self.grow_to(want);
        }
    }
    /// Moves the columns into a buffer with room for `stride` rows each.
    fn grow_to(&mut self, stride: usize) {
        let d = self.n_features;
        // Zeroed memory from the allocator: the room not yet written is never touched.
        let mut columns = vec![0.0; stride * d];
        for j in 0..d {
            columns[j * stride..][..self.len()].copy_from_slice(self.column(j));
        }
        self.columns = columns;
        self.stride = stride;
    }
    /// Room for `more` rows, growing by half again at least (amortised appends).
    fn make_room(&mut self, more: usize) {
        let want = self.len() + more;
        if want > self.stride {
            self.grow_to(want.max(self.stride + self.stride / 2));
        }
    }
    /// Appends `staged`'s rows (row-major), numbering their lines from `first_line` on (the
    /// staged lines are counted from 0 within their piece), and moves its labels.
    pub(crate) fn append_staged(&mut self, staged: &mut Staged, first_line: u64) {
        let x = MatRef::from_row_major_slice(&staged.values, staged.lines.len(), self.n_features);
        self.append_values(x);
        self.append_lines_and_labels(staged, first_line);
    }
    /// The rows of `x` (any layout, `n_features` columns or fewer) after the last row's, in
    /// the columns only (their lines and labels are the caller's).
    fn append_values(&mut self, x: MatRef<'_, f64>) {
        if x.nrows() > 0 && self.n_features > 0 {
            self.make_room(x.nrows());
            let len = self.len();
            density::block::copy_rows_to_columns(x, &mut self.columns[len..], self.stride);
        }
    }
    /// Appends all of `staged`'s rows (row-major, their lines absolute) without holding them
    /// twice, leaving `staged` empty. For input of unknown size (a pipe): its rows are staged
    /// whole (a growing `Vec` is moved by remapping its pages, not copied) and laid out once at
    /// the end, where growing columns copy every row at each step.
    ///
    /// Into empty rows (a pipe's, always) the staged values become the columns, laid out in
    /// place (`density::block::rows_to_columns_in_place`). Otherwise they are transposed a run
    /// at a time from the last back, `staged`'s values cut and shrunk after each run; with huge
    /// pages each run's first write to a column backs a whole 2 MB page of it, so that way
    /// held up to d × 2 MB more than the rows (the whole matrix again on wide data).
    pub(crate) fn append_staged_whole(&mut self, staged: &mut Staged) {
        let (m, d) = (staged.lines.len(), self.n_features);
        if self.is_empty() && self.label_table.names().is_empty() {
            if m > 0 && d > 0 {
                let mut values = std::mem::take(&mut staged.values);
                values.resize(density::block::in_place_stride(m, d) * d, 0.0);
                values.shrink_to_fit();
                self.stride = density::block::rows_to_columns_in_place(&mut values, m, d);
                self.columns = values;
            }
            self.lines = std::mem::take(&mut staged.lines);
            self.labels = std::mem::take(&mut staged.labels);
            self.label_table = std::mem::take(&mut staged.label_table);
            staged.clear();
            return;
        }
        if m > 0 && d > 0 {
            self.reserve(m);
            let len = self.len();
            let run = m.div_ceil(WHOLE_RUNS).max(4096);
            let mut end = m;
            while end > 0 {
                let start = end.saturating_sub(run);
                let x = MatRef::from_row_major_slice(
                    &staged.values[start * d..end * d],
                    end - start,
                    d,
                );
                density::block::copy_rows_to_columns(
                    x,
                    &mut self.columns[len + start..],
                    self.stride,
                );
                staged.values.truncate(start * d);
                staged.values.shrink_to_fit();
                end = start;
            }
        }
        self.append_lines_and_labels(staged, 0);
        staged.clear();
    }
    /// `staged`'s lines (shifted by `first_line`) and labels (renumbered) after the last row's.
    fn append_lines_and_labels(&mut self, staged: &Staged, first_line: u64) {
        self.lines
            .extend(staged.lines.iter().map(|r| r + first_line));
        self.label_table
            .renumber_into(&staged.label_table, &staged.labels, &mut self.labels);
    }
    /// Appends the rows of `other`, with their lines and labels. Panics when `other` has more
    /// features (its columns would not fit).
    pub fn append(&mut self, other: &Rows) {
        self.append_values(other.matrix());
        self.lines.extend_from_slice(&other.lines);
        self.label_table
            .renumber_into(&other.label_table, &other.labels, &mut self.labels);
    }
}

/// Runs [`Rows::append_staged_whole`] lays out rows in: each shrinks the staged rows by about
/// this share.
const WHOLE_RUNS: usize = 16;

/// Rows as a parser produces them, row-major, before they are appended to [`Rows`]: one
/// piece of a block, or a run of rows read by the `csv` crate.
#[derive(Debug, Default, Clone)]
pub(crate) struct Staged {
    /// Row-major, `n_features` values per row.
    pub values: Vec<f64>,
    /// Line of each row, from the piece's first (0) or absolute (the `csv` path).
    pub lines: Vec<u64>,
    /// Each labeled row's label (read with a label column), a number in `label_table`.
    labels: Vec<u32>,
    label_table: LabelTable,
}

impl Staged {
    /// Empties it, keeping its memory.
    pub fn clear(&mut self) {
        self.values.clear();
        self.lines.clear();
        self.labels.clear();
        self.label_table.clear();
    }
    /// Appends `other`'s rows, their lines shifted by `first_line`, their labels renumbered.
    pub fn append(&mut self, other: &Staged, first_line: u64) {
        self.values.extend_from_slice(&other.values);
        self.lines
            .extend(other.lines.iter().map(|r| r + first_line));
        self.label_table
            .renumber_into(&other.label_table, &other.labels, &mut self.labels);
    }
    /// Gives the last row the label `text` (invalid UTF-8 replaced).
    pub fn push_label(&mut self, text: &[u8]) {
        let id = self.label_table.id_of(&String::from_utf8_lossy(text));
        self.labels.push(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn staged(rows: &[&[f64]], first: u64) -> Staged {
        Staged {
            values: rows.iter().flat_map(|r| r.iter().copied()).collect(),
            lines: (first..first + rows.len() as u64).collect(),
            ..Default::default()
        }
    }

    /// Appends, in pieces of every size (each making the columns grow or not, some of more
    /// than eight rows for the vector transpose), give the rows in order, row by row as
    /// staged, with their lines shifted; `append` of those rows gives them again.
    #[test]
    fn appended_pieces_are_the_rows_in_order() {
        for d in [1usize, 3, 8, 11] {
            let mut rows = Rows::new(d);
            let mut expected: Vec<f64> = Vec::new();
            let mut lines = Vec::new();
            let mut next = 0.0;
            for (p, m) in [0usize, 1, 9, 2, 17, 64, 5, 100].into_iter().enumerate() {
                if p == 3 {
                    rows.reserve(200);
                }
                let values: Vec<Vec<f64>> = (0..m)
                    .map(|_| {
                        (0..d)
                            .map(|_| {
                                next += 1.0;
                                next
                            })
                            .collect()
                    })
                    .collect();
                let refs: Vec<&[f64]> = values.iter().map(Vec::as_slice).collect();
                let mut s = staged(&refs, 0);
                rows.append_staged(&mut s, 1000 * p as u64);
                expected.extend(values.iter().flatten());
                lines.extend((0..m as u64).map(|i| 1000 * p as u64 + i));
            }
            assert_eq!(rows.to_row_major(), expected, "d = {d}");
            assert_eq!(rows.lines, lines);
            let x = rows.matrix();
            assert_eq!((x.nrows(), x.ncols()), (lines.len(), d));
            assert_eq!(x.row_stride(), 1);
            for j in 0..d {
                let col: Vec<f64> = (0..x.nrows()).map(|i| expected[i * d + j]).collect();
                assert_eq!(rows.column(j), &col[..]);
            }
            let mut twice = rows.clone();
            twice.append(&rows);
            let mut both = expected.clone();
            both.extend_from_slice(&expected);
            assert_eq!(twice.to_row_major(), both);
            assert_eq!(twice.len(), 2 * rows.len());
            assert_eq!(twice, {
                let mut again = Rows::new(d);
                again.append(&rows);
                again.append(&rows);
                again
            });
        }
    }

    /// A label keeps its number past the switch from scanning to hashing (every count of
    /// labels around `FEW_LABELS`), and new labels get the next number.
    #[test]
    fn labels_keep_their_numbers_in_order_met() {
        let mut table = LabelTable::default();
        for n in 0..3 * FEW_LABELS {
            assert_eq!(table.id_of(&format!("c{n}")), n as u32);
            for m in (0..=n).rev() {
                assert_eq!(table.id_of(&format!("c{m}")), m as u32, "{m} of {n}");
            }
            assert_eq!(table.names().len(), n + 1);
        }
        table.clear();
        assert_eq!(table.id_of("c5"), 0);
        assert_eq!(table.id_of("c0"), 1);
    }

    /// Pieces meet labels in their own orders; appended, each row keeps its label, and the
    /// rows' table lists each label once, in the order the rows met them.
    #[test]
    fn appended_pieces_keep_each_rows_label() {
        let names: Vec<String> = (0..40).map(|i| format!("k{}", (i * 7) % 23)).collect();
        let mut rows = Rows::new(1);
        let mut want = Vec::new();
        for (p, chunk) in names.chunks(9).enumerate() {
            let mut s = Staged::default();
            // Each piece in reverse, so that its numbering differs from the rows'.
            for (i, name) in chunk.iter().rev().enumerate() {
                s.values.push((p * 100 + i) as f64);
                s.lines.push(i as u64);
                s.push_label(name.as_bytes());
                want.push(name.as_str());
            }
            rows.append_staged(&mut s, 0);
        }
        s_eq(&rows, &want);
        let mut twice = rows.clone();
        twice.append(&rows);
        let both: Vec<&str> = want.iter().chain(&want).copied().collect();
        s_eq(&twice, &both);
        let mut distinct: Vec<&str> = Vec::new();
        for w in &want {
            if !distinct.contains(w) {
                distinct.push(w);
            }
        }
        assert_eq!(rows.label_names(), &distinct[..]);
        assert_eq!(rows.label(want.len()), None);
        let mut invalid = Staged::default();
        invalid.values.push(0.0);
        invalid.lines.push(0);
        invalid.push_label(b"a\xffb");
        rows.append_staged(&mut invalid, 0);
        assert_eq!(rows.label(want.len()), Some("a\u{fffd}b"));
    }

    fn s_eq(rows: &Rows, want: &[&str]) {
        assert_eq!(rows.labels().collect::<Vec<_>>(), want);
        assert_eq!(rows.label_ids().len(), want.len());
        for (i, w) in want.iter().enumerate() {
            assert_eq!(rows.label(i), Some(*w));
            assert_eq!(rows.label_names()[rows.label_ids()[i] as usize], *w);
        }
    }

    /// Rows staged whole are the rows appended piece by piece: values, lines and labels; the
    /// staged rows are left empty. After rows already there, they are laid out from the back in
    /// runs (one run, several, a last short one); into empty rows, in place, where more rows
    /// can then be appended.
    #[test]
    fn rows_staged_whole_are_the_rows_appended_in_pieces() {
        for (m, d) in [(0usize, 2usize), (5, 3), (4096, 1), (70_001, 3), (9000, 17)] {
            for head in [true, false] {
                let mut pieces = Rows::new(d);
                let mut whole_rows = pieces.clone();
                let mut first = Staged {
                    values: vec![-1.0; 2 * d],
                    lines: vec![1, 2],
                    ..Default::default()
                };
                first.push_label(b"head");
                first.push_label(b"k1");
                if head {
                    pieces.append_staged(&mut first.clone(), 0);
                    whole_rows.append_staged(&mut first.clone(), 0);
                }
                let mut whole = Staged::default();
                for p in 0..m.div_ceil(1000) {
                    let mut s = Staged::default();
                    for i in p * 1000..(p * 1000 + 1000).min(m) {
                        s.values.extend((0..d).map(|j| (i * 100 + j) as f64));
                        s.lines.push((i - p * 1000) as u64);
                        s.push_label(format!("k{}", i % 3).as_bytes());
                    }
                    whole.append(&s, 10 + p as u64 * 1000);
                    pieces.append_staged(&mut s, 10 + p as u64 * 1000);
                }
                whole_rows.append_staged_whole(&mut whole);
                assert_eq!(whole_rows, pieces, "{m} x {d}, head {head}");
                assert_eq!(whole_rows.to_row_major(), pieces.to_row_major());
                assert!(whole.values.is_empty() && whole.lines.is_empty());
                assert_eq!(whole_rows.len(), m + 2 * usize::from(head));
                // Rows appended after them land after them.
                pieces.append_staged(&mut first.clone(), 0);
                whole_rows.append_staged(&mut first.clone(), 0);
                assert_eq!(whole_rows, pieces, "{m} x {d}, head {head}, then more");
            }
        }
    }

    /// Equality sees the rows, not the room the columns have.
    #[test]
    fn equal_rows_with_different_room_are_equal() {
        let mut a = Rows::new(2);
        let mut b = Rows::new(2);
        b.reserve(50);
        for r in [&mut a, &mut b] {
            r.append_staged(&mut staged(&[&[1.0, 2.0], &[3.0, 4.0]], 0), 7);
        }
        assert_eq!(a, b);
        b.append_staged(&mut staged(&[&[5.0, 6.0]], 0), 9);
        assert_ne!(a, b);
        let empty = Rows::new(2);
        assert_eq!(empty.matrix().nrows(), 0);
        assert_eq!(empty.matrix().ncols(), 2);
        assert!(empty.column(1).is_empty());
    }
}
