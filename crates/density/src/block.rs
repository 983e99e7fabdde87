//! Copying rows of any layout into a column-major block, the input format of the SIMD kernels
//! (`mahalanobis`, `scatter`), and the column and row-subset views the other passes read and
//! write.

use faer::{MatMut, MatRef};

/// `values` as the `MaybeUninit` memory that the kernels writing a fresh output take, for the
/// same kernels writing over values already written (a fresh output's columns come as
/// `MaybeUninit` because Rust allows no `f64` slice over memory not yet written).
///
/// # Safety
/// Only values are written into the slice returned, never an unwritten `MaybeUninit`.
#[allow(unsafe_code)]
pub unsafe fn as_unwritten(values: &mut [f64]) -> &mut [std::mem::MaybeUninit<f64>] {
    // SAFETY: `MaybeUninit<f64>` has `f64`'s layout; the caller writes only values, so the
    // memory still holds `f64`s when the borrow ends.
    unsafe { &mut *(std::ptr::from_mut(values) as *mut [std::mem::MaybeUninit<f64>]) }
}

/// [`as_unwritten`] of every column.
///
/// # Safety
/// As [`as_unwritten`]: only values are written into the columns returned.
#[allow(unsafe_code)]
pub unsafe fn as_unwritten_columns(
    columns: Vec<&mut [f64]>,
) -> Vec<&mut [std::mem::MaybeUninit<f64>]> {
    columns
        .into_iter()
        // SAFETY: the caller writes only values into the columns.
        .map(|col| unsafe { as_unwritten(col) })
        .collect()
}

/// Has `write` fill `out` by writing every value of its columns, which it takes not yet
/// written (the form of a fresh output's columns): in place when `out`'s columns are
/// contiguous, else into a column-major copy that is then copied into `out`.
///
/// # Safety
/// `write` writes only values into the columns it is given (it is meant to write every one of
/// them; one it skips keeps what `out` held, or zero).
#[allow(unsafe_code)]
pub unsafe fn write_every_column(
    mut out: MatMut<'_, f64>,
    write: impl FnOnce(Vec<&mut [std::mem::MaybeUninit<f64>]>),
) {
    if let Some(columns) = contiguous_columns_mut(out.as_mut()) {
        // SAFETY: `write` writes only values into the columns.
        return write(unsafe { as_unwritten_columns(columns) });
    }
    let mut laid_out = faer::Mat::<f64>::zeros(out.nrows(), out.ncols());
    let columns = contiguous_columns_mut(laid_out.as_mut()).unwrap_or_default();
    // SAFETY: as above; a new matrix's columns are contiguous.
    write(unsafe { as_unwritten_columns(columns) });
    out.copy_from(&laid_out);
}

/// Column `j` of `x` as a slice: borrowed when contiguous (the usual column-major case), else
/// copied into `scratch`.
#[inline(always)]
pub fn column<'a>(x: MatRef<'a, f64>, j: usize, scratch: &'a mut Vec<f64>) -> &'a [f64] {
    match x.col(j).try_as_col_major() {
        Some(c) => c.as_slice(),
        None => {
            scratch.clear();
            scratch.extend((0..x.nrows()).map(|i| x[(i, j)]));
            scratch
        }
    }
}

/// Columns `cols` of `x` as slices, if every one of them is contiguous (the usual
/// column-major case); `None` otherwise, for the caller's path for other layouts.
pub fn contiguous_columns<'a>(
    x: MatRef<'a, f64>,
    cols: std::ops::Range<usize>,
) -> Option<Vec<&'a [f64]>> {
    cols.map(|j| x.col(j).try_as_col_major().map(|c| c.as_slice()))
        .collect()
}

/// Every column of `m` as a mutable slice, if each is contiguous; `None` otherwise.
pub fn contiguous_columns_mut(m: MatMut<'_, f64>) -> Option<Vec<&mut [f64]>> {
    m.col_iter_mut()
        .map(|col| col.try_as_col_major_mut().map(|c| c.as_slice_mut()))
        .collect()
}

/// The column stride, in rows, for a new column-major matrix of `nrows` rows of `f64`: `nrows`
/// rounded up to whole 64-byte lines, plus one line when that is a multiple of 16 lines.
///
/// Why: the same row of columns whose starts lie a multiple of 16 lines (1 KiB) apart falls in
/// at most 4 of an L1's 64 sets, and at a power of two in one set of L1 and L2 alike; a kernel
/// that walks K ≥ 8 columns abreast (each class's scores) then evicts its own lines. At n =
/// 2^20 rows (8 MiB columns) LDA's `predict_proba` at d = 64, K = 10 took 66 ms against 27 ms at
/// n = 10^6 (`BENCHMARKS.md`, ninetieth round). An odd number of lines puts the K columns'
/// same rows in K different sets. Sizes that are not a multiple of 16 lines keep their
/// stride (n = 10^6, 125,000 lines, spreads the columns over 8 sets).
pub fn spread_row_capacity(nrows: usize) -> usize {
    let whole_lines = nrows.next_multiple_of(8);
    if stride_shares_cache_sets(whole_lines) {
        whole_lines + 8
    } else {
        whole_lines
    }
}

/// Whether columns of `f64` lying `stride` rows apart put their same rows in at most four of
/// an L1's sets: a stride of a whole multiple of 16 lines (128 rows), which
/// [`spread_row_capacity`] never gives.
pub fn stride_shares_cache_sets(stride: usize) -> bool {
    stride > 0 && stride.is_multiple_of(128)
}

/// Asks the CPU to bring the cache line holding `values[at]` into cache, without waiting for it
/// (nothing when `at` is past the end, or off x86-64): for a pass that knows what it reads
/// next, so that reading it from memory overlaps the arithmetic on what is already in cache.
#[inline(always)]
pub fn prefetch<T>(values: &[T], at: usize) {
    #[cfg(target_arch = "x86_64")]
    prefetch_with_hint::<{ std::arch::x86_64::_MM_HINT_T0 }, T>(values, at);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (values, at);
}

/// As [`prefetch`], into L2 only (`prefetcht1`): for a pass that asks for a whole column while
/// it works on another from L1, which the requested lines would otherwise push out.
#[inline(always)]
pub fn prefetch_to_l2<T>(values: &[T], at: usize) {
    #[cfg(target_arch = "x86_64")]
    prefetch_with_hint::<{ std::arch::x86_64::_MM_HINT_T1 }, T>(values, at);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (values, at);
}

/// `prefetch` with the cache level `HINT` (`_mm_prefetch`'s strategy).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch_with_hint<const HINT: i32, T>(values: &[T], at: usize) {
    if let Some(v) = values.get(at) {
        // SAFETY: SSE, the instruction's only feature, is in every x86-64 CPU; a prefetch
        // changes nothing the program can read and cannot fault (here the address is inside
        // `values` anyway).
        #[allow(unsafe_code)]
        unsafe {
            std::arch::x86_64::_mm_prefetch::<HINT>(std::ptr::from_ref(v).cast());
        }
    }
}

/// How far ahead of its rows a chunk's first read from memory asks for the rows it reads next
/// ([`RowsAhead::further_on`]): 1 KB of each column.
///
/// Why: a pass that does much arithmetic per value read (sums by rows, a transpose and a store
/// per row; masked sums of a few groups) keeps fewer lines in flight than a plain read, and the
/// hardware prefetcher starts again at every 4 KB page of each column. Asked for 128 rows ahead,
/// the labeled fits that use it took 4–18% less time from memory on the Intel Xeon
/// (BENCHMARKS.md, eighty-first round); 64 to 512 rows were alike, 1024 slower.
pub const LOOKAHEAD_ROWS: usize = 128;

/// What a pass over rows in cache asks for from memory as it goes: `columns` (and `labels`),
/// read at the pass's pace, one cache line of each per eight rows the pass steps over
/// ([`RowsAhead::ask`]). The next block of a chunk's columns, or the chunk a worker reads next
/// with its labels ([`RowsAhead::share`] cuts it between several passes).
///
/// Why: a core reads from memory only as fast as it has lines in flight (on the Intel Xeon
/// about 15 GB/s, half the two cores' rate), and a fit's passes over a chunk in cache ask for
/// nothing, so the next chunk's first read waited for them and they for it. Asked for during
/// them, at d = 2 the labeled fits of 10 classes took a fifth less time (BENCHMARKS.md,
/// eightieth round).
#[derive(Debug, Clone, Copy, Default)]
pub struct RowsAhead<'a> {
    columns: &'a [&'a [f64]],
    labels: &'a [usize],
    /// Rows from the row a pass is at to the row it asks for.
    further: usize,
}

impl<'a> RowsAhead<'a> {
    /// Nothing to ask for.
    pub const NONE: RowsAhead<'static> = RowsAhead {
        columns: &[],
        labels: &[],
        further: 0,
    };

    /// `columns` and `labels` (row i of each at the pass's row i).
    pub fn new(columns: &'a [&'a [f64]], labels: &'a [usize]) -> Self {
        Self {
            columns,
            labels,
            further: 0,
        }
    }

    /// The `columns` and `labels` a pass is reading from memory, [`LOOKAHEAD_ROWS`] rows
    /// further on (row i + `LOOKAHEAD_ROWS` of each at the pass's row i; nothing past their
    /// ends).
    pub fn further_on(columns: &'a [&'a [f64]], labels: &'a [usize]) -> Self {
        Self {
            columns,
            labels,
            further: LOOKAHEAD_ROWS,
        }
    }

    /// Whether there is nothing to ask for.
    pub fn is_empty(&self) -> bool {
        self.columns.is_empty() && self.labels.is_empty()
    }

    /// Share `part` of `parts` (`part` < `parts`): an equal share of the columns, and the
    /// labels with the last share, for one of `parts` passes over the same rows.
    pub fn share(self, part: usize, parts: usize) -> Self {
        let d = self.columns.len();
        let parts = parts.max(1);
        let (start, end) = (part * d / parts, (part + 1) * d / parts);
        Self {
            columns: self.columns.get(start..end).unwrap_or(&[]),
            labels: if part + 1 == parts { self.labels } else { &[] },
            further: self.further,
        }
    }

    /// Asks for the line of each column and of the labels that holds row `row` (a pass calls
    /// it once per eight rows, at rows that are multiples of 8).
    #[inline(always)]
    pub fn ask(&self, row: usize) {
        let row = row + self.further;
        for column in self.columns {
            prefetch(column, row);
        }
        prefetch(self.labels, row);
    }
}

/// `f` with something to read ahead for a pass over `n` rows: two columns and labels of other
/// lengths than `n` (past their ends, [`RowsAhead::ask`] asks for nothing), asked for at the
/// pass's rows for even `n` and [`LOOKAHEAD_ROWS`] further on for odd `n`, for tests that a
/// pass's results do not depend on what it reads ahead.
#[cfg(test)]
pub(crate) fn with_some_ahead<R>(n: usize, f: impl FnOnce(RowsAhead<'_>) -> R) -> R {
    let (a, b) = (vec![1.5; n + 9], vec![-2.0; n / 2]);
    let labels = vec![3usize; n.saturating_sub(1)];
    let columns = [&a[..], &b[..]];
    f(match n % 2 {
        0 => RowsAhead::new(&columns, &labels),
        _ => RowsAhead::further_on(&columns, &labels),
    })
}

/// Asks for share `part` of `parts` of the cache lines (one per 8 values) of `rows` of each of
/// `columns`, column after column: for a pass whose `parts` steps over what is in cache each
/// ask for an equal share of what it reads next, so that the next piece's read overlaps their
/// arithmetic instead of following it.
#[inline(always)]
pub fn prefetch_share<C: AsRef<[f64]>>(
    columns: &[C],
    rows: std::ops::Range<usize>,
    part: usize,
    parts: usize,
) {
    prefetch_share_with::<false, C>(columns, rows, (part, parts));
}

/// As [`prefetch_share`], into L2 only ([`prefetch_to_l2`]): for a pass that works from L1
/// meanwhile.
#[inline(always)]
pub fn prefetch_share_to_l2<C: AsRef<[f64]>>(
    columns: &[C],
    rows: std::ops::Range<usize>,
    part: usize,
    parts: usize,
) {
    prefetch_share_with::<true, C>(columns, rows, (part, parts));
}

/// [`prefetch_share`], into L2 only with `TO_L2`.
#[inline(always)]
fn prefetch_share_with<const TO_L2: bool, C: AsRef<[f64]>>(
    columns: &[C],
    rows: std::ops::Range<usize>,
    (part, parts): (usize, usize),
) {
    let per_column = rows.len().div_ceil(8);
    if per_column == 0 || parts == 0 {
        return;
    }
    let lines = columns.len() * per_column;
    let (start, end) = (part * lines / parts, (part + 1) * lines / parts);
    // Column q, line t of it; stepped rather than divided out for each line.
    let (mut q, mut t) = (start / per_column, start % per_column);
    for _ in start..end {
        if TO_L2 {
            prefetch_to_l2(columns[q].as_ref(), rows.start + 8 * t);
        } else {
            prefetch(columns[q].as_ref(), rows.start + 8 * t);
        }
        t += 1;
        if t == per_column {
            (q, t) = (q + 1, 0);
        }
    }
}

/// Runs `f` on column `j` of `m` as a mutable slice: in place when contiguous, else copied out
/// and back.
#[inline(always)]
pub fn with_column_mut<R>(mut m: MatMut<'_, f64>, j: usize, f: impl FnOnce(&mut [f64]) -> R) -> R {
    if let Some(col) = m.as_mut().col_mut(j).try_as_col_major_mut() {
        return f(col.as_slice_mut());
    }
    let mut tmp: Vec<f64> = m.as_ref().col(j).iter().copied().collect();
    let out = f(&mut tmp);
    for (dst, v) in m.col_mut(j).iter_mut().zip(&tmp) {
        *dst = *v;
    }
    out
}

/// Runs `f` on the rows of `x` laid out column-major: on `x` itself when its columns are
/// contiguous (the layout of a faer `Mat`), else on a copy in a buffer the thread keeps from call
/// to call (the columns 64-byte aligned, each a multiple of 8 rows apart, `spread_row_capacity`).
///
/// Why: the kernels read columns as slices and take a scalar path, one element at a time, for
/// any other layout. Row-major rows are what a CSV reader produces, and on them (1e6 × 16, two
/// classes, full covariance) an EM iteration took 0.106 s against 0.039 s column-major. A chunk of
/// rows is meant here (a few MB at most): the copy is read from memory once and then from cache.
/// The kernels give the same bits on every layout, so neither do the results depend on it.
pub fn with_column_major<R>(x: MatRef<'_, f64>, f: impl FnOnce(MatRef<'_, f64>) -> R) -> R {
    let (n, d) = (x.nrows(), x.ncols());
    if n <= 1 || d == 0 || x.row_stride() == 1 {
        return f(x);
    }
    let stride = spread_row_capacity(n);
    let mut buf = LAID_OUT.take();
    let out = {
        let y = aligned_prefix(&mut buf, stride * d);
        gather_columns(x, None, None, stride, y);
        f(MatRef::from_column_major_slice_with_stride(
            &y[..],
            n,
            d,
            stride,
        ))
    };
    LAID_OUT.set(buf);
    out
}

std::thread_local! {
    /// [`with_column_major`]'s copies, per thread.
    static LAID_OUT: std::cell::Cell<Vec<f64>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Column j of `x` (n × d, any layout) into `out[j · stride..][..n]`, nothing else of `out`
/// written: rows appended to a column-major matrix with room for `stride` rows (`out` starting
/// at its first free row, so its last column may be shorter than `stride`). Row-major rows take
/// `transpose_rows`. Panics when `out` is too short (shorter than `(d − 1) · stride + n`).
pub fn copy_rows_to_columns(x: MatRef<'_, f64>, out: &mut [f64], stride: usize) {
    let (n, d) = (x.nrows(), x.ncols());
    if n == 0 || d == 0 {
        return;
    }
    assert!(
        stride >= n && out.len() >= (d - 1) * stride + n,
        "copy_rows_to_columns: {n} rows of {d} columns do not fit {} values at stride {stride}",
        out.len()
    );
    if x.col_stride() == 1 && x.row_stride() != 1 {
        return transpose_rows(x, out, stride);
    }
    for (j, col) in out.chunks_mut(stride).take(d).enumerate() {
        for (o, v) in col[..n].iter_mut().zip(x.col(j).iter()) {
            *o = *v;
        }
    }
}

/// Rows per segment of [`rows_to_columns_in_place`] for `d` features: a power of two up to
/// 512 (4 KB segments), fewer when `d` is large, so that a block of rows (its scratch copy)
/// stays at or under 1 MiB.
pub fn in_place_block_rows(d: usize) -> usize {
    let fit = (1usize << 17) / d.max(1);
    if fit == 0 {
        1
    } else {
        (1usize << fit.ilog2()).min(512)
    }
}

/// The column stride [`rows_to_columns_in_place`] leaves `n` rows of `d` features at: `n`
/// rounded up to whole blocks of [`in_place_block_rows`]. The buffer must hold `stride · d`
/// values.
pub fn in_place_stride(n: usize, d: usize) -> usize {
    n.next_multiple_of(in_place_block_rows(d))
}

/// Lays out the `n` rows of `d` values at the start of `values` (row-major) as columns in the
/// same buffer, column j at `values[j · stride..][..n]`, where `stride` is
/// [`in_place_stride`]`(n, d)`, which it returns; the values after each column's `n` rows are
/// left unspecified. Needs `stride · d` values (panics with fewer) and scratch of one block of
/// rows, not a second copy of the rows: so that rows staged row-major (a pipe's, whose number
/// is known only at its end) become columns without being held twice.
///
/// How: with `b` rows per block, the rows are `q = stride / b` blocks of `b × d` values. Each
/// block is first transposed where it lies (through the scratch), into `d` segments of `b`
/// values: its rows' values of each feature. Segment `c` of block `k` (at `k · d + c`, counted
/// in segments) belongs at `c · q + k`: a transpose of a `q × d` matrix whose entries are
/// segments, done in place by following its cycles with one segment of scratch.
pub fn rows_to_columns_in_place(values: &mut [f64], n: usize, d: usize) -> usize {
    let b = in_place_block_rows(d);
    let stride = in_place_stride(n, d);
    assert!(
        values.len() >= stride * d,
        "rows_to_columns_in_place: {n} rows of {d} features need {} values, given {}",
        stride * d,
        values.len()
    );
    if n == 0 || d == 0 {
        return stride;
    }
    let values = &mut values[..stride * d];
    let mut scratch = vec![0.0; b * d];
    for block in values.chunks_exact_mut(b * d) {
        scratch.copy_from_slice(block);
        copy_rows_to_columns(MatRef::from_row_major_slice(&scratch, b, d), block, b);
    }
    let q = stride / b;
    // Where segment `k`'s contents come from: the inverse of `k · d + c ↦ c · q + k`.
    let source = |at: usize| (at % q) * d + at / q;
    // A bit per segment, set once it holds its own contents.
    let mut moved = vec![0u64; (q * d).div_ceil(64)];
    let is_moved = |moved: &[u64], at: usize| moved[at / 64] >> (at % 64) & 1 == 1;
    let segment = &mut scratch[..b];
    for start in 0..q * d {
        if is_moved(&moved, start) || source(start) == start {
            continue;
        }
        segment.copy_from_slice(&values[start * b..][..b]);
        let mut at = start;
        loop {
            moved[at / 64] |= 1 << (at % 64);
            let from = source(at);
            if from == start {
                values[at * b..][..b].copy_from_slice(segment);
                break;
            }
            values.copy_within(from * b..(from + 1) * b, at * b);
            at = from;
        }
    }
    stride
}

/// Column j of the row-major `x` into `y[j · stride..][..n]` ([`gather_columns`] of all rows,
/// unshifted; `y`'s last column may be shorter than `stride`): eight rows at a time, each column's eight values one cache line written at once
/// (with AVX-512, an 8 × 8 transpose in registers).
fn transpose_rows(x: MatRef<'_, f64>, y: &mut [f64], stride: usize) {
    #[cfg(target_arch = "x86_64")]
    if let Some(simd) = pulp::x86::V4::try_new() {
        let done = transpose_rows_v4(simd, x, y, stride);
        return transpose_rows_from(x, y, stride, done);
    }
    transpose_rows_from(x, y, stride, 0);
}

/// Row `i` of a row-major `x` as a slice (empty for any other layout).
#[inline(always)]
fn row_slice(x: MatRef<'_, f64>, i: usize) -> &[f64] {
    match x.row(i).try_as_row_major() {
        Some(r) => r.as_slice(),
        None => &[],
    }
}

/// [`transpose_rows`] of a row-major `x` from row `i0` on, without SIMD.
fn transpose_rows_from(x: MatRef<'_, f64>, y: &mut [f64], stride: usize, i0: usize) {
    let (n, d) = (x.nrows(), x.ncols());
    let mut i0 = i0;
    while i0 + 8 <= n {
        let rows: [&[f64]; 8] = std::array::from_fn(|t| row_slice(x, i0 + t));
        for (j, col) in y.chunks_mut(stride).take(d).enumerate() {
            for (o, r) in col[i0..i0 + 8].iter_mut().zip(&rows) {
                *o = r[j];
            }
        }
        i0 += 8;
    }
    for i in i0..n {
        let r = row_slice(x, i);
        for (col, v) in y.chunks_mut(stride).zip(r) {
            col[i] = *v;
        }
    }
}

/// [`transpose_rows`] of a row-major `x` in whole groups of eight rows, with AVX-512; returns
/// the first row not done.
#[cfg(target_arch = "x86_64")]
fn transpose_rows_v4(
    simd: pulp::x86::V4,
    x: MatRef<'_, f64>,
    y: &mut [f64],
    stride: usize,
) -> usize {
    use std::arch::x86_64::__m512d;
    let (n, d) = (x.nrows(), x.ncols());
    let whole = d / 8 * 8;
    let mut i0 = 0;
    while i0 + 8 <= n {
        let rows: [&[f64]; 8] = std::array::from_fn(|t| row_slice(x, i0 + t));
        if rows.iter().any(|r| r.len() < d) {
            return i0;
        }
        simd.vectorize(
            #[inline(always)]
            || {
                for j0 in (0..whole).step_by(8) {
                    let r: [__m512d; 8] = std::array::from_fn(|t| {
                        let v: [f64; 8] = rows[t][j0..j0 + 8].try_into().unwrap_or_default();
                        pulp::cast(v)
                    });
                    let cols = transpose8_v4(simd, r);
                    for (c, v) in cols.iter().enumerate() {
                        let v: [f64; 8] = pulp::cast(*v);
                        y[(j0 + c) * stride + i0..][..8].copy_from_slice(&v);
                    }
                }
                // The last d mod 8 columns (all of them below d = 8), each row's padded with
                // zeros to eight (pulp's partial load is a call per row).
                if whole < d {
                    let r: [__m512d; 8] = std::array::from_fn(|t| {
                        let tail = &rows[t][whole..];
                        let v: [f64; 8] =
                            std::array::from_fn(|c| tail.get(c).copied().unwrap_or(0.0));
                        pulp::cast(v)
                    });
                    let cols = transpose8_v4(simd, r);
                    for (c, v) in cols.iter().take(d - whole).enumerate() {
                        let v: [f64; 8] = pulp::cast(*v);
                        y[(whole + c) * stride + i0..][..8].copy_from_slice(&v);
                    }
                }
            },
        );
        i0 += 8;
    }
    i0
}

/// The 4 × 4 transpose of four rows of four values, one AVX register each: pairs of rows
/// interleaved within each 128-bit lane, then the lanes' halves exchanged.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn transpose4_v3(
    simd: pulp::x86::V3,
    r: [std::arch::x86_64::__m256d; 4],
) -> [std::arch::x86_64::__m256d; 4] {
    let f = simd.avx;
    // t0 = (r0[0], r1[0], r0[2], r1[2]), t1 = (r0[1], r1[1], r0[3], r1[3]); t2, t3 of r2, r3.
    let (t0, t1) = (
        f._mm256_unpacklo_pd(r[0], r[1]),
        f._mm256_unpackhi_pd(r[0], r[1]),
    );
    let (t2, t3) = (
        f._mm256_unpacklo_pd(r[2], r[3]),
        f._mm256_unpackhi_pd(r[2], r[3]),
    );
    [
        f._mm256_permute2f128_pd::<0x20>(t0, t2),
        f._mm256_permute2f128_pd::<0x20>(t1, t3),
        f._mm256_permute2f128_pd::<0x31>(t0, t2),
        f._mm256_permute2f128_pd::<0x31>(t1, t3),
    ]
}

/// The 8 × 8 transpose of eight rows of eight values, one register each: three rounds of eight
/// shuffles (pairs of rows, then quadruples in two-lane groups, then the two halves), in place of
/// 64 single loads and stores.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn transpose8_v4(
    simd: pulp::x86::V4,
    r: [std::arch::x86_64::__m512d; 8],
) -> [std::arch::x86_64::__m512d; 8] {
    use std::arch::x86_64::{__m512d, __m512i};
    let f = simd.avx512f;
    // t[2p] holds the even columns of rows 2p and 2p + 1 interleaved, t[2p + 1] the odd ones.
    let t: [__m512d; 8] = std::array::from_fn(|i| {
        let (a, b) = (r[i / 2 * 2], r[i / 2 * 2 + 1]);
        if i % 2 == 0 {
            f._mm512_unpacklo_pd(a, b)
        } else {
            f._mm512_unpackhi_pd(a, b)
        }
    });
    let idx = |v: [u64; 8]| -> __m512i { pulp::cast(v) };
    let (first, second) = (
        idx([0, 1, 8, 9, 4, 5, 12, 13]),
        idx([2, 3, 10, 11, 6, 7, 14, 15]),
    );
    // u[4h + c]: rows 4h..4h + 4 of column c (low half) and of column c + 4 (high half).
    let u: [__m512d; 8] = std::array::from_fn(|i| {
        let (h, c) = (i / 4, i % 4);
        let (a, b) = (t[4 * h + c % 2], t[4 * h + 2 + c % 2]);
        f._mm512_permutex2var_pd(a, if c < 2 { first } else { second }, b)
    });
    let (low, high) = (
        idx([0, 1, 2, 3, 8, 9, 10, 11]),
        idx([4, 5, 6, 7, 12, 13, 14, 15]),
    );
    // Column j: from u[c] and u[4 + c] with c = j mod 4, their low halves for j < 4.
    std::array::from_fn(|j| {
        let c = j % 4;
        f._mm512_permutex2var_pd(u[c], if j < 4 { low } else { high }, u[4 + c])
    })
}

/// Copies the rows `rows` of `x` (any layout, in the given order) into `out` and returns them
/// as a column-major rows.len() × d matrix.
pub fn gather_rows<'a>(
    x: MatRef<'_, f64>,
    rows: &[usize],
    out: &'a mut Vec<f64>,
) -> MatRef<'a, f64> {
    let (m, d) = (rows.len(), x.ncols());
    out.clear();
    out.reserve(m * d);
    for j in 0..d {
        gather_column(x, j, rows, out);
    }
    MatRef::from_column_major_slice(&out[..], m, d)
}

/// Appends the values of column `j` of `x` at `rows` to `out`, in the order of `rows`.
#[inline(always)]
pub fn gather_column(x: MatRef<'_, f64>, j: usize, rows: &[usize], out: &mut Vec<f64>) {
    match x.col(j).try_as_col_major() {
        Some(col) => {
            let col = col.as_slice();
            out.extend(rows.iter().map(|&i| col[i]));
        }
        None => out.extend(rows.iter().map(|&i| x[(i, j)])),
    }
}

/// Most values a [`SmallBuffer`] keeps on the stack.
const SMALL_BUFFER: usize = 64;

/// Room for a few values: on the stack up to 64 of them, else in a vector. For the short
/// vectors of a merge of statistics and of the grouped kernels, where an allocation per call
/// showed at small d (a fit at d = 2, K = 10 merges ten classes per chunk). A value rather
/// than a closure: a closure inside a SIMD dispatch is compiled outside its target features
/// (the grouped kernels' fits at d = 2 took 18 times as long that way).
#[derive(Debug)]
pub struct SmallBuffer {
    stack: [f64; SMALL_BUFFER],
    heap: Vec<f64>,
}

impl Default for SmallBuffer {
    fn default() -> Self {
        Self {
            stack: [0.0; SMALL_BUFFER],
            heap: Vec::new(),
        }
    }
}

impl SmallBuffer {
    /// `len` zeros, on the stack when they fit.
    #[inline(always)]
    pub fn zeros(&mut self, len: usize) -> &mut [f64] {
        if len <= SMALL_BUFFER {
            let room = &mut self.stack[..len];
            room.fill(0.0);
            room
        } else {
            self.heap.clear();
            self.heap.resize(len, 0.0);
            &mut self.heap
        }
    }
}

/// The span of a reused block known to hold zeros since it was last cleared: the padding
/// columns a block laid out for one chunk zeroed, which the next chunk's layout need not clear
/// again where its padding falls on them.
///
/// Why: at d = 2 the tiles' padding columns are as many values as the chunk's own, and clearing
/// them for every chunk (a `memset` of 64 KB) had 9% of the samples of QDA's fit at K = 10.
///
/// The holder's promise: between two calls of [`ZeroedSpan::clear`] on a block, nothing but
/// zeros is written to the span the first call cleared. The span is tied to the block's address,
/// so a block that moved (its buffer reallocated) is cleared whole.
#[derive(Debug, Default)]
pub(crate) struct ZeroedSpan {
    /// The block's first element's address when the span was cleared.
    base: usize,
    span: std::ops::Range<usize>,
}

impl ZeroedSpan {
    /// Zeros `block[span]`, skipping what the last call left zero, and records `span` as the
    /// block's zeros.
    pub(crate) fn clear(&mut self, block: &mut [f64], span: std::ops::Range<usize>) {
        let base = block.as_ptr() as usize;
        let known = if self.base == base {
            self.span.clone()
        } else {
            0..0
        };
        let (start, end) = (span.start, span.end.max(span.start));
        // The parts of the span before and after the known zeros (the whole span when the
        // two do not overlap, or nothing is known).
        block[start..end.min(known.start).max(start)].fill(0.0);
        block[known.end.clamp(start, end)..end].fill(0.0);
        *self = Self {
            base,
            span: start..end,
        };
    }
}

/// The first `len` elements of `buf` that start on a 64-byte boundary, growing `buf` (with
/// zeros) as needed. A `Vec<f64>` is only 16-byte aligned, so every AVX-512 vector of an
/// unaligned block straddles two cache lines and each load of it costs two. In the squared
/// Mahalanobis kernel at d = 2, two stores just after loads of such a block had two thirds of
/// its `perf` samples (the loads waiting on the block's recent stores, most likely); with the
/// block aligned, no instruction had more than 9%.
#[inline(always)]
pub(crate) fn aligned_prefix(buf: &mut Vec<f64>, len: usize) -> &mut [f64] {
    const SLACK: usize = 64 / std::mem::size_of::<f64>() - 1;
    if buf.len() < len + SLACK {
        buf.resize(len + SLACK, 0.0);
    }
    // `align_offset` may decline (usize::MAX); the block is then merely unaligned.
    let offset = buf.as_ptr().align_offset(64).min(SLACK);
    &mut buf[offset..offset + len]
}

/// `out[j·stride + t] = x[r_t, j] − shift_j` for the selected rows `r_t` of `x` (`rows`, or
/// every row when `None`; no shift: a plain copy), and 0 for `t` from the number of selected
/// rows to `stride` (padding rows). Reads contiguous columns or rows where the layout has them.
#[inline(always)]
pub(crate) fn gather_columns(
    x: MatRef<'_, f64>,
    rows: Option<&[usize]>,
    shift: Option<&[f64]>,
    stride: usize,
    out: &mut [f64],
) {
    let (n, d) = (rows.map_or(x.nrows(), <[usize]>::len), x.ncols());
    let m = |j: usize| shift.map_or(0.0, |s| s[j]);
    for col in out.chunks_exact_mut(stride).take(d) {
        col[n..].fill(0.0);
    }
    if x.row_stride() == 1 {
        for (j, col) in out.chunks_exact_mut(stride).take(d).enumerate() {
            if let Some(src) = x.col(j).try_as_col_major() {
                let (src, mj) = (src.as_slice(), m(j));
                match rows {
                    None => {
                        for (o, v) in col.iter_mut().zip(src) {
                            *o = v - mj;
                        }
                    }
                    Some(rows) => {
                        for (o, &r) in col.iter_mut().zip(rows) {
                            *o = src[r] - mj;
                        }
                    }
                }
            }
        }
    } else if x.col_stride() == 1 && rows.is_none() && shift.is_none() {
        transpose_rows(x, out, stride);
    } else if x.col_stride() == 1 {
        for t in 0..n {
            let r = rows.map_or(t, |rows| rows[t]);
            if let Some(row) = x.row(r).try_as_row_major() {
                for (j, (col, v)) in out.chunks_exact_mut(stride).zip(row.as_slice()).enumerate() {
                    col[t] = v - m(j);
                }
            }
        }
    } else {
        for (j, col) in out.chunks_exact_mut(stride).take(d).enumerate() {
            for t in 0..n {
                let r = rows.map_or(t, |rows| rows[t]);
                col[t] = x[(r, j)] - m(j);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use faer::Mat;

    fn value(i: usize, j: usize) -> f64 {
        (i * 1000 + j) as f64 + 0.25
    }

    /// `m` has the values of [`value`], entry by entry, in contiguous columns.
    fn assert_laid_out(m: MatRef<'_, f64>, n: usize, d: usize) {
        assert_eq!((m.nrows(), m.ncols()), (n, d));
        for j in 0..d {
            assert!(
                n <= 1 || m.col(j).try_as_col_major().is_some(),
                "column {j} not contiguous"
            );
            for i in 0..n {
                assert_eq!(
                    m[(i, j)].to_bits(),
                    value(i, j).to_bits(),
                    "({i}, {j}) of {n} x {d}"
                );
            }
        }
    }

    /// The cache sets (of 64, one line each) that row 0 of columns `0..k` falls in, with
    /// columns `stride` rows apart.
    fn sets_of_columns(stride: usize, k: usize) -> std::collections::BTreeSet<usize> {
        (0..k).map(|c| c * stride / 8 % 64).collect()
    }

    #[test]
    fn spread_strides_put_each_column_in_its_own_set_and_keep_other_sizes() {
        for n in [128, 4096, 4095, 1 << 20, 3 << 12, 999_424, 12_800] {
            let stride = spread_row_capacity(n);
            assert!(
                stride >= n && stride.is_multiple_of(8) && stride < n + 16,
                "n = {n}"
            );
            // A multiple of 16 lines: one line more, an odd number, and 16 columns in 16 sets.
            assert_eq!(stride / 8 % 2, 1, "n = {n}");
            assert_eq!(sets_of_columns(stride, 16).len(), 16, "n = {n}");
            // The stride it replaced put them all in at most 4.
            assert!(sets_of_columns(n.div_ceil(8) * 8, 16).len() <= 4, "n = {n}");
        }
        // Not a multiple of 16 lines: whole lines only, as before.
        for n in [0, 1, 7, 8, 100, 1000, 100_000, 1_000_000, 4097, 4088] {
            assert_eq!(spread_row_capacity(n), n.div_ceil(8) * 8, "n = {n}");
        }
    }

    #[test]
    fn rows_of_every_layout_are_laid_out_column_major_with_their_values() {
        for n in [0, 1, 2, 7, 8, 9, 16, 17, 100] {
            for d in [1, 3, 7, 8, 9, 16, 17, 24] {
                let col_major = Mat::from_fn(n, d, value);
                let row_major = Mat::from_fn(d, n, |j, i| value(i, j));
                // Rows in reverse order in memory (row stride -1): neither layout.
                let reversed = Mat::from_fn(n, d, |i, j| value(n - 1 - i, j));
                let strided = reversed.as_ref().reverse_rows();
                // The column-major rows are read in place.
                with_column_major(col_major.as_ref(), |m| {
                    assert_eq!(m.as_ptr(), col_major.as_ptr());
                    assert_laid_out(m, n, d);
                });
                for x in [row_major.as_ref().transpose(), strided] {
                    with_column_major(x, |m| {
                        assert_laid_out(m, n, d);
                        // A nested call while the thread's buffer is in use gets its own.
                        with_column_major(x, |inner| assert_laid_out(inner, n, d));
                        assert_laid_out(m, n, d);
                    });
                }
                // The path without SIMD, for the rows SIMD leaves and for other CPUs.
                if n > 1 {
                    let stride = n.next_multiple_of(8);
                    let mut y = vec![f64::NAN; stride * d];
                    transpose_rows_from(row_major.as_ref().transpose(), &mut y, stride, 0);
                    let m = MatRef::from_column_major_slice_with_stride(&y[..], n, d, stride);
                    assert_laid_out(m, n, d);
                }
            }
        }
    }

    /// Rows laid out in place are the columns `copy_rows_to_columns` writes, bit for bit, for
    /// row counts inside one block, at and past block boundaries, and segments of one row.
    #[test]
    fn rows_laid_out_in_place_are_their_columns() {
        for d in [1usize, 2, 3, 16, 17, 300, (1 << 17) + 1] {
            // Distinct for every entry whatever `d` (`value` repeats past 1000 columns).
            let value = |i: usize, j: usize| (i * d + j) as f64 + 0.25;
            let b = in_place_block_rows(d);
            assert!(b.is_power_of_two() && b <= 512 && (b == 1 || b * d <= 1 << 17));
            for n in [0usize, 1, 2, 7, b - 1, b, b + 1, 3 * b + 5, 9 * b] {
                if n == 0 && b == 1 || d * n > 1 << 20 {
                    continue;
                }
                let stride = in_place_stride(n, d);
                assert!(stride >= n && stride.is_multiple_of(b) && stride < n + b);
                let mut values: Vec<f64> = (0..n)
                    .flat_map(|i| (0..d).map(move |j| value(i, j)))
                    .collect();
                values.resize(stride * d, -7.5);
                assert_eq!(rows_to_columns_in_place(&mut values, n, d), stride);
                for j in 0..d {
                    for i in 0..n {
                        assert_eq!(
                            values[j * stride + i].to_bits(),
                            value(i, j).to_bits(),
                            "{n} x {d}: ({i}, {j})"
                        );
                    }
                }
            }
        }
    }

    /// Rows of every layout, appended at any row of a column-major buffer (the last column cut
    /// short after them), land in their columns with their bits, and nothing else is written:
    /// the rows before and the room after keep their sentinel, with and without SIMD.
    #[test]
    fn rows_copied_to_columns_fill_their_rows_and_nothing_else() {
        const SENTINEL: f64 = -7.5;
        for n in [1, 2, 7, 8, 9, 17, 100] {
            for d in [1, 3, 8, 9, 17] {
                let row_major = Mat::from_fn(d, n, |j, i| value(i, j));
                let col_major = Mat::from_fn(n, d, value);
                let reversed = Mat::from_fn(n, d, |i, j| value(n - 1 - i, j));
                for (at, room) in [(0, 0), (5, 3), (13, 8)] {
                    let stride = at + n + room;
                    let xs = [
                        row_major.as_ref().transpose(),
                        col_major.as_ref(),
                        reversed.as_ref().reverse_rows(),
                    ];
                    for (k, x) in xs.into_iter().enumerate() {
                        for simd in [true, false] {
                            if !simd && k > 0 {
                                continue;
                            }
                            let mut buf = vec![SENTINEL; stride * d];
                            let out = &mut buf[at..(d - 1) * stride + at + n];
                            if simd {
                                copy_rows_to_columns(x, out, stride);
                            } else {
                                transpose_rows_from(x, out, stride, 0);
                            }
                            for j in 0..d {
                                for i in 0..stride {
                                    let got = buf[j * stride + i];
                                    let want = if (at..at + n).contains(&i) {
                                        value(i - at, j)
                                    } else {
                                        SENTINEL
                                    };
                                    assert_eq!(
                                        got.to_bits(),
                                        want.to_bits(),
                                        "layout {k}, simd {simd}, {n} x {d} at {at}: ({i}, {j})"
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// Each clear leaves its span zero and nothing outside it changed, whatever spans came
    /// before (overlapping from either side, inside, around, apart, empty), with the holder
    /// writing non-zeros everywhere outside the last span in between, as a chunk's data does.
    #[test]
    fn a_zeroed_span_clears_its_span_and_nothing_else() {
        let len = 40;
        let mut block = vec![0.0; len];
        let mut zeroed = ZeroedSpan::default();
        let mut last = 0..0;
        let spans = [
            10..20,
            10..20,
            5..15,
            12..25,
            14..18,
            0..40,
            30..35,
            3..8,
            8..8,
            6..9,
            20..40,
            0..21,
        ];
        for (t, span) in spans.into_iter().enumerate() {
            // The holder's writes: anything but zero outside the span it was promised.
            for (i, v) in block.iter_mut().enumerate() {
                if !last.contains(&i) {
                    *v = (t * 100 + i) as f64 + 0.5;
                }
            }
            let before = block.clone();
            zeroed.clear(&mut block, span.clone());
            for (i, (&v, &was)) in block.iter().zip(&before).enumerate() {
                if span.contains(&i) {
                    assert_eq!(v, 0.0, "span {span:?} after {last:?}: element {i}");
                } else {
                    assert_eq!(v, was, "span {span:?} after {last:?}: element {i} outside");
                }
            }
            last = span;
        }
        // A block elsewhere (a buffer that moved) is cleared whole, though the span is the last
        // one's.
        let mut other = vec![1.0; len];
        zeroed.clear(&mut other, last.clone());
        assert!(other[last.clone()].iter().all(|&v| v == 0.0));
        assert!(other[..last.start].iter().all(|&v| v == 1.0));
    }
}
