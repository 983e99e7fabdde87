//! Weighted first and second moments of one column (the diagonal-covariance M-step), and a
//! column's sums per group of rows (a labeled fit's class sums).
//!
//! A diagonal model's sufficient statistics are, per class and feature, Σ wᵢ xᵢ and
//! Σ wᵢ (xᵢ − m)². Each is a long sum over a cache-resident column, so its speed is set by how
//! many independent additions are in flight, not by memory. The sums here keep 32 partial sums
//! (element i goes to partial sum i mod 32), which is 4 AVX-512, 8 AVX2 or 32 scalar
//! accumulators, and combine them in one fixed tree. Every product and sum is rounded
//! separately (no fused multiply-add), so every instruction set gives the same bits, and the
//! result never depends on the thread count.

use crate::block::RowsAhead;
use faer::{MatMut, MatRef};
use pulp::Simd;

/// Each column's weighted mean Σ wᵢ xᵢ / `total` into `mean` and Σ wᵢ (xᵢ − meanⱼ)² into
/// `scatter` (`w` as in [`weighted_sum`]), with the CPU's widest SIMD.
pub fn diagonal_moments(
    x: MatRef<'_, f64>,
    w: Option<&[f64]>,
    total: f64,
    mean: &mut [f64],
    scatter: &mut [f64],
) {
    moments_of_columns(x, None, w, total, mean, scatter);
}

/// [`diagonal_moments`] of the rows `rows` of `x` (`w`: one weight per selected row), the same
/// bits as of those rows gathered into a matrix of their own, but each column's selected values
/// gathered in turn into one column of scratch. Why: the gathered matrix was rows × d values
/// per call; the dominance diagnostic's classes of mostly-zero weights took about 20 MB each at
/// d = 1,000 per worker, which was most of a wide naive Bayes fit's rise at its end.
pub fn diagonal_moments_of_rows(
    x: MatRef<'_, f64>,
    rows: &[usize],
    w: Option<&[f64]>,
    total: f64,
    mean: &mut [f64],
    scatter: &mut [f64],
) {
    moments_of_columns(x, Some(rows), w, total, mean, scatter);
}

/// [`diagonal_moments`] of all rows of `x` or of the selected `rows`, each column as a
/// contiguous slice: borrowed when it is one, else copied (or its selected rows gathered).
fn moments_of_columns(
    x: MatRef<'_, f64>,
    rows: Option<&[usize]>,
    w: Option<&[f64]>,
    total: f64,
    mean: &mut [f64],
    scatter: &mut [f64],
) {
    struct Columns<'a> {
        x: MatRef<'a, f64>,
        rows: Option<&'a [usize]>,
        w: Option<&'a [f64]>,
        total: f64,
        mean: &'a mut [f64],
        scatter: &'a mut [f64],
    }
    impl pulp::WithSimd for Columns<'_> {
        type Output = ();
        #[inline(always)]
        fn with_simd<S: Simd>(self, simd: S) {
            let mut scratch = Vec::new();
            for (j, (m, s)) in self
                .mean
                .iter_mut()
                .zip(self.scatter.iter_mut())
                .enumerate()
            {
                let col = match self.rows {
                    None => crate::block::column(self.x, j, &mut scratch),
                    Some(rows) => {
                        scratch.clear();
                        crate::block::gather_column(self.x, j, rows, &mut scratch);
                        &scratch
                    }
                };
                (*m, *s) = column_moments(simd, self.w, self.total, col);
            }
        }
    }
    pulp::Arch::new().dispatch(Columns {
        x,
        rows,
        w,
        total,
        mean,
        scatter,
    });
}

/// One column's weighted mean and weighted squared deviations from it: what every path of
/// [`diagonal_moments`] and [`diagonal_moments_each`] computes, to the bit.
#[inline(always)]
fn column_moments<S: Simd>(simd: S, w: Option<&[f64]>, total: f64, col: &[f64]) -> (f64, f64) {
    let m = weighted_sum(simd, w, col) / total;
    (m, weighted_sum_sq(simd, w, col, m))
}

/// [`diagonal_moments`] for several weight vectors over the same rows: class c's weighted mean
/// of each column into `means[c·d..(c + 1)·d]` and its weighted squared deviations into
/// `scatters[c·d..]`, with `weights[c]` summing to `totals[c] > 0`. The bits are those of
/// [`diagonal_moments`] for each class. Returns false, writing nothing, when `x`'s columns are
/// not contiguous.
///
/// Why: one class at a time reads the whole block once per class and pass; a block of 4096 rows
/// at d = 64 (2 MB) is larger than the L2 of either host, so at K = 10 the M-step of diagonal EM
/// read it 20 times from L3. Here rows are taken `MOMENTS_BLOCK_ROWS` at a time, and each
/// column's piece (in L1) serves every class before the next is read; every class and column
/// keeps its own `PARTIAL_SUMS` partial sums across the pieces, so each lane adds the same
/// terms in the same order as [`weighted_sum`] and [`weighted_sum_sq`].
pub fn diagonal_moments_each(
    x: MatRef<'_, f64>,
    weights: &[&[f64]],
    totals: &[f64],
    means: &mut [f64],
    scatters: &mut [f64],
) -> bool {
    let d = x.ncols();
    let Some(columns) = (0..d)
        .map(|j| x.col(j).try_as_col_major().map(|c| c.as_slice()))
        .collect::<Option<Vec<_>>>()
    else {
        return false;
    };
    debug_assert_eq!(weights.len(), totals.len());
    debug_assert_eq!(means.len(), weights.len() * d);
    debug_assert_eq!(scatters.len(), weights.len() * d);
    pulp::Arch::new().dispatch(EachClass {
        columns: &columns,
        weights,
        totals,
        means,
        scatters,
    });
    true
}

/// Rows per piece of [`diagonal_moments_each`] (a multiple of [`PARTIAL_SUMS`]): a column's
/// piece is 4 KB. The bits do not depend on it. On the Zen 5 EPYC, d = 64, K = 10, the M-step's
/// fit (`profile-em 64 10 diag`, three alternated pairs a series) took 0.051–0.053 s at 512 rows
/// against 0.059–0.067 s at 256, and 0.052–0.057 s against 0.057–0.070 s at 1024. Two classes
/// per load of each vector (the same bits) took 0.083–0.091 s against 0.051–0.065 s with their
/// sums copied through memory (`memmove`), and 0.056–0.075 s against 0.058–0.073 s, even,
/// with each class's sums in a local array; not kept.
const MOMENTS_BLOCK_ROWS: usize = 512;

/// [`diagonal_moments_each`]'s kernel.
struct EachClass<'a> {
    columns: &'a [&'a [f64]],
    weights: &'a [&'a [f64]],
    totals: &'a [f64],
    means: &'a mut [f64],
    scatters: &'a mut [f64],
}

impl pulp::WithSimd for EachClass<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        match S::F64_LANES {
            8 => self.run::<S, 4>(simd),
            4 => self.run::<S, 8>(simd),
            2 => self.run::<S, 16>(simd),
            _ => {
                // No vectors: one class at a time.
                let d = self.columns.len();
                for (c, (w, &total)) in self.weights.iter().zip(self.totals).enumerate() {
                    for (j, col) in self.columns.iter().enumerate() {
                        (self.means[c * d + j], self.scatters[c * d + j]) =
                            column_moments(simd, Some(w), total, col);
                    }
                }
            }
        }
    }
}

impl EachClass<'_> {
    /// `A` vectors hold each class and column's 32 partial sums, as in [`sum_with`].
    #[inline(always)]
    fn run<S: Simd, const A: usize>(self, simd: S) {
        let EachClass {
            columns,
            weights,
            totals,
            means,
            scatters,
        } = self;
        debug_assert_eq!(A * S::F64_LANES, PARTIAL_SUMS);
        let (d, k) = (columns.len(), weights.len());
        let n = columns
            .iter()
            .map(|c| c.len())
            .chain(weights.iter().map(|w| w.len()))
            .min()
            .unwrap_or(0);
        let whole = n - n % PARTIAL_SUMS;
        let zero = simd.splat_f64s(0.0);
        let mut acc = vec![zero; k * d * A];
        // Pass 1: the weighted sums, then the means; pass 2: the squared deviations from them.
        for square in [false, true] {
            acc.fill(zero);
            for r0 in (0..whole).step_by(MOMENTS_BLOCK_ROWS) {
                let r1 = (r0 + MOMENTS_BLOCK_ROWS).min(whole);
                for (j, col) in columns.iter().enumerate() {
                    let (xv, _) = S::as_simd_f64s(&col[r0..r1]);
                    // The next piece (the next column's, or the first column's in the next
                    // block) is asked for from memory, a share of its cache lines as each class
                    // starts, while the classes pass over this one: read only when the loop
                    // reached it, its read and the K classes' arithmetic ran in series. Measured
                    // on the Xeon (the M-step's weighted fit alone, `profile-em D K diag`,
                    // medians of 15, three series): d = 64, K = 10 0.119-0.123 -> 0.097-0.110 s;
                    // K = 6 0.079-0.082 -> 0.067-0.068 s; K = 4 0.063-0.065 -> 0.053-0.056 s;
                    // d = 16, K = 10 0.026-0.027 -> 0.024-0.025 s.
                    let (next_col, next_r0) = if j + 1 < d { (j + 1, r0) } else { (0, r1) };
                    let (next, next_rows) = (
                        [columns[next_col]],
                        next_r0..(next_r0 + MOMENTS_BLOCK_ROWS).min(whole),
                    );
                    for (c, w) in weights.iter().enumerate() {
                        crate::block::prefetch_share(&next, next_rows.clone(), c, k);
                        let (wv, _) = S::as_simd_f64s(&w[r0..r1]);
                        let at = (c * d + j) * A;
                        let mut sums: [S::f64s; A] = std::array::from_fn(|a| acc[at + a]);
                        if square {
                            let mv = simd.splat_f64s(means[c * d + j]);
                            for (xb, wb) in xv.chunks_exact(A).zip(wv.chunks_exact(A)) {
                                for a in 0..A {
                                    let t = simd.sub_f64s(xb[a], mv);
                                    let term = simd.mul_f64s(simd.mul_f64s(wb[a], t), t);
                                    sums[a] = simd.add_f64s(sums[a], term);
                                }
                            }
                        } else {
                            for (xb, wb) in xv.chunks_exact(A).zip(wv.chunks_exact(A)) {
                                for a in 0..A {
                                    sums[a] = simd.add_f64s(sums[a], simd.mul_f64s(wb[a], xb[a]));
                                }
                            }
                        }
                        acc[at..at + A].copy_from_slice(&sums);
                    }
                }
            }
            for (c, (w, &total)) in weights.iter().zip(totals).enumerate() {
                for (j, col) in columns.iter().enumerate() {
                    let at = (c * d + j) * A;
                    let mut partial = [0.0f64; PARTIAL_SUMS];
                    let (pv, _) = S::as_mut_simd_f64s(&mut partial);
                    pv[..A].copy_from_slice(&acc[at..at + A]);
                    let (w, col) = (&w[..n], &col[..n]);
                    if square {
                        let m = means[c * d + j];
                        scatters[c * d + j] = finish::<true>(partial, Some(w), col, m, whole, n);
                    } else {
                        let sum = finish::<false>(partial, Some(w), col, 0.0, whole, n);
                        means[c * d + j] = sum / total;
                    }
                }
            }
        }
    }
}

/// Partial sums per column sum.
const PARTIAL_SUMS: usize = 32;

/// Σ wᵢ xᵢ (Σ xᵢ when `w` is `None`). `w`, when given, has `x.len()` entries.
#[inline(always)]
pub fn weighted_sum<S: Simd>(simd: S, w: Option<&[f64]>, x: &[f64]) -> f64 {
    column_sum::<S, false>(simd, w, x, 0.0)
}

/// Σ wᵢ (xᵢ − m)² (Σ (xᵢ − m)² when `w` is `None`), as `(wᵢ (xᵢ − m)) (xᵢ − m)`.
#[inline(always)]
pub fn weighted_sum_sq<S: Simd>(simd: S, w: Option<&[f64]>, x: &[f64], m: f64) -> f64 {
    column_sum::<S, true>(simd, w, x, m)
}

#[inline(always)]
fn column_sum<S: Simd, const SQUARE: bool>(simd: S, w: Option<&[f64]>, x: &[f64], m: f64) -> f64 {
    match S::F64_LANES {
        8 => sum_with::<S, 4, SQUARE>(simd, w, x, m),
        4 => sum_with::<S, 8, SQUARE>(simd, w, x, m),
        2 => sum_with::<S, 16, SQUARE>(simd, w, x, m),
        _ => sum_scalar::<SQUARE>(w, x, m),
    }
}

/// The term of element i.
#[inline(always)]
fn term<const SQUARE: bool>(w: Option<f64>, x: f64, m: f64) -> f64 {
    match (SQUARE, w) {
        (true, Some(w)) => w * (x - m) * (x - m),
        (true, None) => (x - m) * (x - m),
        (false, Some(w)) => w * x,
        (false, None) => x,
    }
}

/// `A` vectors of `S::F64_LANES` lanes hold the 32 partial sums (vector a, lane l: partial sum
/// a · lanes + l).
#[inline(always)]
fn sum_with<S: Simd, const A: usize, const SQUARE: bool>(
    simd: S,
    w: Option<&[f64]>,
    x: &[f64],
    m: f64,
) -> f64 {
    debug_assert_eq!(A * S::F64_LANES, PARTIAL_SUMS);
    let n = w.map_or(x.len(), |w| w.len().min(x.len()));
    let whole = n - n % PARTIAL_SUMS;
    let zero = simd.splat_f64s(0.0);
    let mv = simd.splat_f64s(m);
    let mut acc = [zero; A];
    let (xv, _) = S::as_simd_f64s(&x[..whole]);
    match w {
        Some(w) => {
            let (wv, _) = S::as_simd_f64s(&w[..whole]);
            for (xb, wb) in xv.chunks_exact(A).zip(wv.chunks_exact(A)) {
                for a in 0..A {
                    let t = if SQUARE {
                        let c = simd.sub_f64s(xb[a], mv);
                        simd.mul_f64s(simd.mul_f64s(wb[a], c), c)
                    } else {
                        simd.mul_f64s(wb[a], xb[a])
                    };
                    acc[a] = simd.add_f64s(acc[a], t);
                }
            }
        }
        None => {
            for xb in xv.chunks_exact(A) {
                for a in 0..A {
                    let t = if SQUARE {
                        let c = simd.sub_f64s(xb[a], mv);
                        simd.mul_f64s(c, c)
                    } else {
                        xb[a]
                    };
                    acc[a] = simd.add_f64s(acc[a], t);
                }
            }
        }
    }
    let mut partial = [0.0f64; PARTIAL_SUMS];
    let (pv, _) = S::as_mut_simd_f64s(&mut partial);
    pv[..A].copy_from_slice(&acc);
    finish::<SQUARE>(partial, w, x, m, whole, n)
}

/// The same sums with 32 scalar accumulators (no SIMD).
#[inline(always)]
fn sum_scalar<const SQUARE: bool>(w: Option<&[f64]>, x: &[f64], m: f64) -> f64 {
    let n = w.map_or(x.len(), |w| w.len().min(x.len()));
    let whole = n - n % PARTIAL_SUMS;
    let mut partial = [0.0f64; PARTIAL_SUMS];
    for i in (0..whole).step_by(PARTIAL_SUMS) {
        for (l, p) in partial.iter_mut().enumerate() {
            *p += term::<SQUARE>(w.map(|w| w[i + l]), x[i + l], m);
        }
    }
    finish::<SQUARE>(partial, w, x, m, whole, n)
}

/// Combines the partial sums pairwise (16 + 16, then 8 + 8, ...) and adds the tail after them,
/// summed in order.
#[inline(always)]
fn finish<const SQUARE: bool>(
    mut partial: [f64; PARTIAL_SUMS],
    w: Option<&[f64]>,
    x: &[f64],
    m: f64,
    whole: usize,
    n: usize,
) -> f64 {
    let mut tail = 0.0;
    for i in whole..n {
        tail += term::<SQUARE>(w.map(|w| w[i]), x[i], m);
    }
    fold_pairwise(&mut partial) + tail
}

/// Sums `P` (a power of two) partial sums pairwise in a fixed tree: P/2 + P/2, then P/4 + P/4,
/// ... (the partial sums are overwritten).
#[inline(always)]
fn fold_pairwise<const P: usize>(partial: &mut [f64; P]) -> f64 {
    let mut half = P / 2;
    while half > 0 {
        for l in 0..half {
            partial[l] += partial[l + half];
        }
        half /= 2;
    }
    partial[0]
}

/// Groups past which [`grouped_sums_and_counts`] and [`grouped_counts_above_and_counts`] add
/// each value to its group's sum by the row's label, instead of by masks of each group's rows.
/// Why: a mask pass costs every value one operation per group (in passes of up to 20 groups),
/// so a multinomial or Bernoulli fit of 36,864 rows, 64 features and 20,000 classes took 2.4 s;
/// by label, a value costs one addition whatever K is.
const BY_INDEX_MIN_GROUPS: usize = 64;

/// Adds `term(x[(i, j)])` to `sums[(groups[i], j)]` for every row i whose group is below
/// `sums.nrows()`, rows in order within each group, column by column; returns whether `flag` holds
/// for any value read. The same arithmetic on every instruction set.
fn sums_by_index(
    x: MatRef<'_, f64>,
    groups: &[usize],
    mut sums: MatMut<'_, f64>,
    term: impl Fn(f64) -> f64,
    flag: impl Fn(f64) -> bool,
) -> bool {
    let n = x.nrows().min(groups.len());
    let k = sums.nrows();
    let mut flagged = false;
    let mut scratch = Vec::new();
    for j in 0..x.ncols().min(sums.ncols()) {
        let col = crate::block::column(x.subrows(0, n), j, &mut scratch);
        let mut out = sums.as_mut().col_mut(j);
        for (&v, &g) in col.iter().zip(groups) {
            flagged |= flag(v);
            if g < k {
                out[g] += term(v);
            }
        }
    }
    flagged
}

/// Partial sums per group and column in [`grouped_sums`].
const GROUP_PARTIAL_SUMS: usize = 16;

/// For every column j of `x` and group g < `sums.nrows()`, adds to `sums[(g, j)]` the sum of
/// the column's values over the rows i with `groups[i] == g` (rows of any other group are
/// skipped; `groups` has one entry per row of `x`), with the CPU's widest SIMD. Returns whether
/// any value of `x` is below zero (−∞ included; NaN is not, but it makes its group's sum NaN).
///
/// This is a labeled fit's one-hot weighted sum without the one-hot matrix. Each column is read
/// once per four groups (AVX-512) while it is in cache, and each group's lanes are picked by a
/// mask built once for all columns, so the additions keep pace with reading memory. Row i goes
/// to partial sum i mod 16 of its group (2 AVX-512, 4 AVX2 or 16 scalar accumulators), combined
/// in one fixed tree and followed by the rows after the last whole 16, in order: every
/// instruction set gives the same bits.
pub fn grouped_sums(x: MatRef<'_, f64>, groups: &[usize], sums: MatMut<'_, f64>) -> bool {
    pulp::Arch::new().dispatch(Grouped::sums(x, groups, sums))
}

/// [`grouped_sums`], and each group's number of rows in `groups` into `counts` (one per group,
/// every value replaced, as [`group_counts_into`]). With AVX-512 the counts are the population
/// counts of the masks the sums use, so they cost no pass of their own over the labels (the
/// tallies that counted them before took about a sixth of a multinomial fit at d = 2, K = 10).
pub fn grouped_sums_and_counts(
    x: MatRef<'_, f64>,
    groups: &[usize],
    sums: MatMut<'_, f64>,
    counts: &mut [usize],
) -> bool {
    sums_and_counts(x, groups, sums, counts, None)
}

/// [`grouped_sums_and_counts`], with masks kept from an earlier pass or for a later one.
fn sums_and_counts(
    x: MatRef<'_, f64>,
    groups: &[usize],
    sums: MatMut<'_, f64>,
    counts: &mut [usize],
    kept: Option<&mut Vec<u8>>,
) -> bool {
    if sums.nrows() > BY_INDEX_MIN_GROUPS {
        group_counts_into(groups, counts);
        return sums_by_index(x, groups, sums, |v| v, |v| v < 0.0);
    }
    pulp::Arch::new().dispatch(Grouped {
        counts: Some(counts),
        kept,
        ..Grouped::sums(x, groups, sums)
    })
}

/// The group masks of one set of labels, built by the first of several masked passes over
/// them ([`grouped_sums_and_counts_keeping`]) and read by the later ones
/// ([`grouped_cross_products_keeping`]) rather than built again. It borrows the labels, so they
/// cannot change while it is kept.
///
/// Why: a labeled full fit with few classes (d = 2, K = 2) took its masks twice, the labels
/// narrowed to bytes and compared twice per chunk: in cache, about a tenth of `profile qda-fit
/// 2 2`'s samples (`narrow_to_bytes` and the comparisons). Kept, on the Zen 4 EPYC (eighty-ninth
/// round, tenth percentiles of 31 or 101 runs, alternated pairs; the least of each side): `qda-fit
/// 2 2` from memory 1.16 → 1.03 ms (7 of 8 pairs faster), 262,144 rows in L3 0.22 → 0.20 ms (9
/// of 10); `lda-fit 2 2` from memory 1.18 → 1.02 ms (7 of 8).
#[derive(Debug)]
pub struct KeptMasks<'l> {
    groups: &'l [usize],
    k: usize,
    /// [`byte_masks`]' bytes for `groups` and `k` (of the rows a pass takes in whole vectors),
    /// empty until a pass builds them.
    bytes: Vec<u8>,
}

impl<'l> KeptMasks<'l> {
    /// No masks yet, for `k` groups of `groups`.
    pub fn new(groups: &'l [usize], k: usize) -> Self {
        Self {
            groups,
            k,
            bytes: Vec::new(),
        }
    }

    /// The bytes for a pass over `k` groups: kept only for the kept labels' `k`.
    fn for_groups(&mut self, k: usize) -> Option<&mut Vec<u8>> {
        (k == self.k).then_some(&mut self.bytes)
    }
}

/// [`grouped_sums_and_counts`] of `masks`' labels, keeping the masks it builds in `masks`.
pub fn grouped_sums_and_counts_keeping(
    x: MatRef<'_, f64>,
    masks: &mut KeptMasks<'_>,
    sums: MatMut<'_, f64>,
    counts: &mut [usize],
) -> bool {
    let groups = masks.groups;
    let kept = masks.for_groups(sums.nrows());
    sums_and_counts(x, groups, sums, counts, kept)
}

/// [`grouped_sums_and_counts`] by rows: adds to `sums[(g, j)]` group g's values of column j,
/// added one row after another in row order from zero (then to `sums`), and writes each
/// group's number of rows into `counts`. Returns whether any value of `x` is below zero, as
/// [`grouped_sums`] does. The rows of eight columns at a time are transposed in registers and
/// each row's vector added to its group's sums (`ByRows`: eight rows with AVX-512, four by
/// four with AVX2 alone); without AVX2, or with columns that are not contiguous, the same
/// additions one value at a time, so every instruction set gives the same bits (not
/// [`grouped_sums`]' bits, which come from 16 partial sums per group).
///
/// Why: by masks a value costs one operation per group, and AVX2's masks have four lanes, so a
/// multinomial fit of 10 classes at d = 16 took longer than a Gaussian one, which takes its
/// sums and squares by rows (`BENCHMARKS.md`, multinomial NB after its labeled sums by rows).
/// By rows a value costs the same whatever K is.
pub fn grouped_sums_by_rows_and_counts(
    x: MatRef<'_, f64>,
    groups: &[usize],
    mut sums: MatMut<'_, f64>,
    counts: &mut [usize],
) -> bool {
    let (n, d, k) = (
        x.nrows().min(groups.len()),
        x.ncols().min(sums.ncols()),
        sums.nrows(),
    );
    let groups = &groups[..n];
    let x = x.subrows(0, n);
    group_counts_into(groups, counts);
    #[cfg(target_arch = "x86_64")]
    if let Some(kernel) = ByRows::new()
        && let Some(columns) = crate::block::contiguous_columns(x, 0..d)
    {
        let mut acc = vec![0.0; k * 8];
        let mut negative = false;
        for j0 in (0..d).step_by(8) {
            let block = &columns[j0..(j0 + 8).min(d)];
            let next = &columns[(j0 + 8).min(d)..(j0 + 16).min(d)];
            kernel.pass::<false>(block, groups, &mut acc, &[], RowsAhead::new(next, &[]));
            // The block's values again, from L2, for the count check.
            negative |= any_below_zero(block);
            for g in 0..k {
                for (c, &sum) in acc[g * 8..][..block.len()].iter().enumerate() {
                    sums[(g, j0 + c)] += sum;
                }
            }
        }
        return negative;
    }
    // The same additions by label, from zero as the kernel's are, then added to `sums`.
    let mut from_zero = faer::Mat::zeros(k, d);
    let negative = sums_by_index(x, groups, from_zero.as_mut(), |v| v, |v| v < 0.0);
    for g in 0..k {
        for j in 0..d {
            sums[(g, j)] += from_zero[(g, j)];
        }
    }
    negative
}

/// Whether any value of `columns` is below zero (−∞ included, NaN and −0 not), with the CPU's
/// widest SIMD.
#[cfg(target_arch = "x86_64")]
fn any_below_zero(columns: &[&[f64]]) -> bool {
    struct Below<'a>(&'a [&'a [f64]]);
    impl pulp::WithSimd for Below<'_> {
        type Output = bool;
        #[inline(always)]
        fn with_simd<S: Simd>(self, simd: S) -> bool {
            let zero = simd.splat_f64s(0.0);
            let mut negative = simd.less_than_f64s(zero, zero);
            let mut tails = false;
            for col in self.0 {
                let (head, tail) = S::as_simd_f64s(col);
                for &v in head {
                    negative = simd.or_m64s(negative, simd.less_than_f64s(v, zero));
                }
                tails |= tail.iter().any(|&v| v < 0.0);
            }
            tails || simd.first_true_m64s(negative) < S::F64_LANES
        }
    }
    pulp::Arch::new().dispatch(Below(columns))
}

/// Each group's number of rows: `counts[g]` = how many of `groups` equal g, for g < `k` (others
/// are not counted). With AVX-512 and up to 255 groups, byte comparisons of 64 labels
/// (`byte_counts`); otherwise one comparison pass per group with the CPU's widest SIMD, or
/// tallies (`group_counts_by_words`), rather than `counts[g] += 1`, whose steps wait on each
/// other's stores when neighbouring rows share a group. Why the dispatch: as a plain loop it
/// was SSE2 code, which has no 64-bit comparison (three instructions per pair of labels), about
/// an eighth of an LDA fit at d = 2, K = 2.
pub fn group_counts(groups: &[usize], k: usize) -> Vec<usize> {
    let mut counts = vec![0; k];
    group_counts_into(groups, &mut counts);
    counts
}

/// [`group_counts`] into `counts` (one per group, every value replaced), for a caller that keeps
/// them on the stack. With AVX-512 and up to 255 groups, `byte_counts`; otherwise
/// `group_counts_by_words`.
pub fn group_counts_into(groups: &[usize], counts: &mut [usize]) {
    if !byte_counts(groups, counts) {
        group_counts_by_words(groups, counts);
    }
}

/// [`group_counts_into`] on the labels as they are (64-bit words). Above
/// [`COUNT_PASSES_MAX_GROUPS`] groups (up to 16), one pass into four
/// tallies per group, rows in turn: a pass per group costs K passes, and a run of rows of one
/// group waits on one tally's stores only every fourth row. Scratch timing of 4096 random
/// labels (forty-seventh round): K = 2 0.59–0.71 µs with passes against 2.1–2.4 µs with tallies
/// (5.9–6.1 µs with `+= 1` per row); K = 4 1.2–1.4 against 1.8–2.4 µs; K = 6 1.8 against
/// 1.5–2.2 µs; K = 8 2.3 against 1.5–2.4 µs; K = 10 2.9 against 1.5–1.7 µs (2.6 µs with
/// `+= 1`).
fn group_counts_by_words(groups: &[usize], counts: &mut [usize]) {
    let k = counts.len();
    if k > TALLIED_MAX_GROUPS {
        // One step per label: a comparison pass per group cost K passes (20,000 at K =
        // 20,000, most of an LDA fit of 36,864 rows), and with this many groups neighbouring
        // rows seldom share one, so the increments seldom wait on each other's stores.
        counts.fill(0);
        for &g in groups {
            if let Some(count) = counts.get_mut(g) {
                *count += 1;
            }
        }
        return;
    }
    if k > COUNT_PASSES_MAX_GROUPS && k <= TALLIED_MAX_GROUPS {
        let mut tallies = [[0usize; 4]; TALLIED_MAX_GROUPS];
        let tallies = &mut tallies[..k];
        let quads = groups.chunks_exact(4);
        let rest = quads.remainder();
        for quad in quads {
            for (lane, &g) in quad.iter().enumerate() {
                if let Some(tally) = tallies.get_mut(g) {
                    tally[lane] += 1;
                }
            }
        }
        for &g in rest {
            if let Some(tally) = tallies.get_mut(g) {
                tally[0] += 1;
            }
        }
        for (count, tally) in counts.iter_mut().zip(tallies.iter()) {
            *count = tally.iter().sum();
        }
        return;
    }
    pulp::Arch::new().dispatch(
        #[inline(always)]
        || {
            for (g, count) in counts.iter_mut().enumerate() {
                *count = groups.iter().map(|&l| usize::from(l == g)).sum();
            }
        },
    )
}

/// Labels [`byte_counts`] and [`byte_masks`] narrow to bytes at a time, on the stack.
const BYTE_COUNT_BLOCK: usize = 4096;

/// `labels` (at most [`BYTE_COUNT_BLOCK`]) as bytes in `narrow`, padded with 255 to a whole
/// number of [`BYTE_MASK_LABELS`]; returns that part of `narrow`. A label of 255 or more
/// becomes 255, which matches no group of [`byte_mask`] when there are at most 255, nor does
/// the padding.
#[inline(always)]
fn narrow_to_bytes<'n>(labels: &[usize], narrow: &'n mut [u8; BYTE_COUNT_BLOCK]) -> &'n [u8] {
    for (t, &l) in narrow.iter_mut().zip(labels) {
        *t = l.min(usize::from(u8::MAX)) as u8;
    }
    let used = labels.len().div_ceil(BYTE_MASK_LABELS) * BYTE_MASK_LABELS;
    narrow[labels.len()..used].fill(u8::MAX);
    &narrow[..used]
}

/// Bit i set where `labels[i]` (64 of them, narrowed by [`narrow_to_bytes`]) is `g`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn byte_mask(simd: pulp::x86::V4, labels: &[u8], g: usize) -> u64 {
    let v: [u8; BYTE_MASK_LABELS] = std::array::from_fn(|i| labels[i]);
    simd.avx512bw
        ._mm512_cmpeq_epi8_mask(pulp::cast(v), simd.avx512f._mm512_set1_epi8(g as i8))
}

/// [`group_counts_into`] with AVX-512 for up to 255 groups: the labels narrowed to bytes a
/// block at a time, then per group one comparison of 64 labels and the population count of its
/// mask. Returns false, and counts nothing, without AVX-512 or with more groups.
///
/// Why: the tallies waited on their stores and the passes compared eight 64-bit labels at a
/// time; in the Bernoulli fit at d = 2, K = 10 the tallies had about a sixth of the samples.
fn byte_counts(groups: &[usize], counts: &mut [usize]) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let k = counts.len();
        let Some(simd) = pulp::x86::V4::try_new() else {
            return false;
        };
        if k > usize::from(u8::MAX) {
            return false;
        }
        counts.fill(0);
        simd.vectorize(
            #[inline(always)]
            || {
                let mut narrow = [u8::MAX; BYTE_COUNT_BLOCK];
                for block in groups.chunks(BYTE_COUNT_BLOCK) {
                    let narrow = narrow_to_bytes(block, &mut narrow);
                    for (g, count) in counts.iter_mut().enumerate() {
                        let masks = narrow.chunks_exact(BYTE_MASK_LABELS);
                        let total: u32 = masks.map(|v| byte_mask(simd, v, g).count_ones()).sum();
                        *count += total as usize;
                    }
                }
            },
        );
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (groups, counts);
        false
    }
}

/// Most groups [`group_counts_by_words`] counts in one comparison pass each.
const COUNT_PASSES_MAX_GROUPS: usize = 4;
/// Most groups [`group_counts_by_words`] counts in tallies (on the stack); more are counted one
/// label at a time.
const TALLIED_MAX_GROUPS: usize = 16;

/// What [`grouped_sums_each_column`] calls after each column: (j, the column, its group sums).
pub type AfterColumn<'a> = dyn FnMut(usize, &[f64], &[f64]) + 'a;

/// [`grouped_sums`] (the same bits, the same return), calling `after(j, column, sums)` right
/// after column j's sums are added, with the column as read (its first `groups.len()` rows,
/// contiguous) and `sums[(g, j)]` for every group g: for a pass that needs each column's group
/// means and reads the column again while it is still in L1 or L2, rather than in a second pass
/// over a chunk that no longer is (the centring copy of
/// [`crate::scatter::RowBlock::load_centred_by_group`]).
pub fn grouped_sums_each_column(
    x: MatRef<'_, f64>,
    groups: &[usize],
    sums: MatMut<'_, f64>,
    after: &mut AfterColumn<'_>,
) -> bool {
    pulp::Arch::new().dispatch(Grouped {
        after_column: Some(after),
        ..Grouped::sums(x, groups, sums)
    })
}

/// As [`grouped_sums`], of `x > threshold` (1 or 0): adds to `sums[(g, j)]` how many rows of
/// group g have column j above `threshold` (the counts of a labeled Bernoulli fit, without a
/// binarised copy). The counts are exact, so they are the bits of summing a binarised copy.
/// Returns whether a value is not finite (NaN is never above, so the counts cannot show it).
pub fn grouped_counts_above(
    x: MatRef<'_, f64>,
    groups: &[usize],
    threshold: f64,
    sums: MatMut<'_, f64>,
) -> bool {
    pulp::Arch::new().dispatch(CountsAbove {
        x,
        groups,
        threshold,
        sums,
    })
}

/// [`grouped_counts_above`] (the same counts, the same return), and each group's number of rows
/// in `groups` into `counts` (one per group, every value replaced, as [`group_counts_into`]).
/// With AVX-512, up to 255 groups and contiguous columns, `counts_above_by_bytes`; otherwise
/// [`group_counts_into`] and [`grouped_counts_above`].
pub fn grouped_counts_above_and_counts(
    x: MatRef<'_, f64>,
    groups: &[usize],
    threshold: f64,
    mut sums: MatMut<'_, f64>,
    counts: &mut [usize],
) -> bool {
    if let Some(not_finite) = counts_above_by_bytes(x, groups, threshold, sums.as_mut(), counts) {
        return not_finite;
    }
    group_counts_into(groups, counts);
    if sums.nrows() > BY_INDEX_MIN_GROUPS {
        let above = |v: f64| if v > threshold { 1.0 } else { 0.0 };
        return sums_by_index(x, groups, sums, above, |v| !v.is_finite());
    }
    grouped_counts_above(x, groups, threshold, sums)
}

/// [`grouped_counts_above_and_counts`] with AVX-512 for up to 255 groups and contiguous
/// columns: each group's masks of the rows' labels ([`byte_masks`], one bit per row), each
/// column's bits of `x > threshold` (one comparison of eight rows to a byte), and each count the
/// population count of the two ANDed, 64 rows at a time; the group's row count is its masks'
/// population count. `None`, with nothing written, otherwise.
///
/// Why: [`CountsAbove`]' packed codes are 64 bits per row and 5 groups, written once per call
/// and read again for every column; at d = 2, K = 10 making them, and the masked additions that
/// read them, had about half of a Bernoulli fit's samples. Here a group costs a bit per row, and
/// a column a byte per eight rows. The counts are exact, so they are [`CountsAbove`]'s.
fn counts_above_by_bytes(
    x: MatRef<'_, f64>,
    groups: &[usize],
    threshold: f64,
    mut sums: MatMut<'_, f64>,
    counts: &mut [usize],
) -> Option<bool> {
    #[cfg(target_arch = "x86_64")]
    {
        let simd = pulp::x86::V4::try_new()?;
        let (k, d) = (sums.nrows(), x.ncols());
        let n = x.nrows().min(groups.len());
        if counts.len() != k || sums.ncols() != d {
            return None;
        }
        let columns = crate::block::contiguous_columns(x, 0..d)?;
        let whole = n / 8 * 8;
        let vectors = whole / 8;
        let mut mask_bytes = Vec::new();
        let masks = byte_masks(&groups[..whole], k, &mut mask_bytes)?;
        let rest_groups = &groups[whole..n];
        Some(simd.vectorize(
            #[inline(always)]
            || {
                counts_from_masks(masks, vectors, rest_groups, counts);
                let mut above = vec![0u8; TOUCHED_COLUMNS * vectors];
                let mut not_finite = false;
                for j0 in (0..d).step_by(TOUCHED_COLUMNS) {
                    let cols = &columns[j0..(j0 + TOUCHED_COLUMNS).min(d)];
                    let v = |c: usize| <pulp::x86::V4 as Simd>::as_simd_f64s(&cols[c][..whole]).0;
                    // The columns' first read: up to four streams in flight, as
                    // [`touch_columns`].
                    not_finite |= match cols.len() {
                        1 => above_bytes(simd, [v(0)], threshold, &mut above),
                        2 => above_bytes(simd, [v(0), v(1)], threshold, &mut above),
                        3 => above_bytes(simd, [v(0), v(1), v(2)], threshold, &mut above),
                        _ => above_bytes(simd, [v(0), v(1), v(2), v(3)], threshold, &mut above),
                    };
                    for (c, col) in cols.iter().enumerate() {
                        let bits = &above[c * vectors..(c + 1) * vectors];
                        let rest = &col[whole..n];
                        not_finite |= rest.iter().any(|v| !v.is_finite());
                        for g in 0..k {
                            let own = &masks[g * vectors..(g + 1) * vectors];
                            let rest = rest
                                .iter()
                                .zip(rest_groups)
                                .filter(|&(&v, &l)| l == g && v > threshold)
                                .count();
                            sums[(g, j0 + c)] += (and_count_ones(own, bits) + rest) as f64;
                        }
                    }
                }
                not_finite
            },
        ))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (x, groups, threshold, sums, counts);
        None
    }
}

/// For [`counts_above_by_bytes`]: byte b of `out`'s part c (of `columns[c].len()` bytes) has bit
/// i set where row 8b + i of column c is above `threshold`. Returns whether a value is not
/// finite.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn above_bytes<const C: usize>(
    simd: pulp::x86::V4,
    columns: [&[pulp::f64x8]; C],
    threshold: f64,
    out: &mut [u8],
) -> bool {
    let vectors = columns.iter().map(|c| c.len()).min().unwrap_or(0);
    let t = simd.splat_f64s(threshold);
    // v − v is +0 (all bits clear) exactly when v is finite; its bits are OR-ed together.
    let mut bad = simd.splat_u64s(0);
    for b in 0..vectors {
        for c in 0..C {
            let v = columns[c][b];
            out[c * vectors + b] = simd.greater_than_f64s(v, t).0;
            bad = simd.or_u64s(bad, simd.transmute_u64s_f64s(simd.sub_f64s(v, v)));
        }
    }
    any_bit_set::<pulp::x86::V4>(bad)
}

/// Each group's number of rows, into `counts` (every value replaced): the bits set in its
/// masks (`masks`, [`byte_masks`]' layout of `vectors` bytes per group) and its labels among
/// `rest`, the rows after the masked ones.
#[inline(always)]
fn counts_from_masks(masks: &[u8], vectors: usize, rest: &[usize], counts: &mut [usize]) {
    for (g, count) in counts.iter_mut().enumerate() {
        let own = &masks[g * vectors..(g + 1) * vectors];
        *count = and_count_ones(own, own);
    }
    for &g in rest {
        if let Some(count) = counts.get_mut(g) {
            *count += 1;
        }
    }
}

/// The number of bits set in both `a` and `b` (of the same length), 64 at a time. Plain loops,
/// not iterator adapters: an adapter's `fold` was not inlined into the caller's dispatch, so it
/// ran without the POPCNT instruction (29% of the samples of a Bernoulli fit at d = 2, K = 10).
#[inline(always)]
fn and_count_ones(a: &[u8], b: &[u8]) -> usize {
    let len = a.len().min(b.len());
    let whole = len / 8 * 8;
    // One 8-byte load (an array made byte by byte was eight loads, shifts and ORs).
    let word = |w: &[u8], at: usize| w[at..at + 8].try_into().map_or(0, u64::from_le_bytes);
    let mut total = 0;
    let mut at = 0;
    while at < whole {
        total += (word(a, at) & word(b, at)).count_ones();
        at += 8;
    }
    while at < len {
        total += (a[at] & b[at]).count_ones();
        at += 1;
    }
    total as usize
}

/// Labels as 64-bit integers, for vector comparisons: the labels themselves where `usize` is 64
/// bits (a copy of a chunk's labels, 32 KB allocated and freed per call, was about 2% of a
/// d = 2 fit), a copy otherwise.
fn labels_as_u64(labels: &[usize]) -> std::borrow::Cow<'_, [u64]> {
    match pulp::bytemuck::try_cast_slice(labels) {
        Ok(ids) => std::borrow::Cow::Borrowed(ids),
        Err(_) => labels.iter().map(|&g| g as u64).collect(),
    }
}

/// Labels per AVX-512 byte comparison in [`byte_masks`].
const BYTE_MASK_LABELS: usize = 64;

/// With AVX-512 and at most 255 groups, each group's masks for the AVX-512 kernels of
/// [`Grouped`]: byte v · g + b of `out` (v = `labels.len()` / 8 bytes per group) has bit i set
/// where row 8b + i is in group g, which is the layout of AVX-512's eight-lane masks. `None`
/// otherwise (or if `labels.len()` is not a multiple of 8).
///
/// Why bytes: the labels narrowed to one byte each once, then one comparison of 64 labels and
/// one 8-byte store per group, where a comparison of eight 64-bit labels and a one-byte store
/// per group and vector took about a fifth of a multinomial fit at d = 2, K = 10.
fn byte_masks<'o>(labels: &[usize], k: usize, out: &'o mut Vec<u8>) -> Option<&'o [u8]> {
    #[cfg(target_arch = "x86_64")]
    {
        let simd = pulp::x86::V4::try_new()?;
        if k > usize::from(u8::MAX) || !labels.len().is_multiple_of(8) {
            return None;
        }
        let vectors = labels.len() / 8;
        out.clear();
        out.resize(k * vectors, 0);
        simd.vectorize(
            #[inline(always)]
            || {
                let mut narrow = [u8::MAX; BYTE_COUNT_BLOCK];
                for (b, block) in labels.chunks(BYTE_COUNT_BLOCK).enumerate() {
                    let narrow = narrow_to_bytes(block, &mut narrow);
                    let first = b * BYTE_COUNT_BLOCK / 8;
                    for g in 0..k {
                        for (t, v) in narrow.chunks_exact(BYTE_MASK_LABELS).enumerate() {
                            // The group's last mask bytes may be fewer than 8: copied
                            // apart, since a copy of a variable length is a call to memmove
                            // (about 5% of a Bernoulli fit at d = 2, K = 10).
                            let (at, len) = (first + 8 * t, (vectors - first - 8 * t).min(8));
                            let mask = byte_mask(simd, v, g).to_le_bytes();
                            let out = &mut out[g * vectors + at..][..len];
                            match <&mut [u8; 8]>::try_from(&mut *out) {
                                Ok(out) => *out = mask,
                                Err(_) => out.copy_from_slice(&mask[..len]),
                            }
                        }
                    }
                }
            },
        );
        Some(out)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (labels, k, out);
        None
    }
}

/// Bits per group's count in a packed counter of [`CountsAbove`].
const COUNT_BITS: usize = 12;
/// Groups per packed counter (5 fields of 12 bits in a 64-bit lane).
const COUNTS_PER_WORD: usize = 64 / COUNT_BITS;
/// Vectors of rows a packed counter takes before it is unpacked: a field grows by at most one
/// per vector, so it stays below 2^12.
const COUNT_FLUSH: usize = (1 << COUNT_BITS) - 1;
/// Packed counters per pass over a column (20 groups).
const WORDS_PER_PASS: usize = 4;

/// [`grouped_counts_above`]'s kernel. Why not [`grouped_sums`]' masked sums: those cost a
/// masked addition per group for every vector of rows (and a comparison and a finiteness test
/// per vector), so with 10 groups the labeled Bernoulli fit at d = 64 took about half as long
/// again as with 2 (`profile bnb-fit 64 K`: 0.046 against 0.031 s). Here each row's group is a
/// one in its group's 12-bit field of a 64-bit code (5 groups to a code), made once per call;
/// a vector of rows adds its codes where the value is above the threshold, one addition per 5
/// groups; the counters are unpacked every 4095 vectors and at the column's end. Counts are
/// exact, so the order of the additions does not matter.
struct CountsAbove<'a> {
    x: MatRef<'a, f64>,
    groups: &'a [usize],
    threshold: f64,
    sums: MatMut<'a, f64>,
}

impl pulp::WithSimd for CountsAbove<'_> {
    type Output = bool;

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) -> bool {
        let CountsAbove {
            x,
            groups,
            threshold,
            mut sums,
        } = self;
        let n = x.nrows().min(groups.len());
        let (k, d) = (sums.nrows(), x.ncols());
        let lanes = S::F64_LANES;
        let whole = n / lanes * lanes;
        let words = k.div_ceil(COUNTS_PER_WORD);
        // Word w's codes of the rows, then word w + 1's: a row of an unknown group adds nothing.
        // Made a vector of rows at a time, one comparison per group (a scalar loop over the
        // rows, with its lookup and store per row, cost more than the counts at d = 2).
        let ids = labels_as_u64(&groups[..whole]);
        let (id_vectors, _) = S::as_simd_u64s(&ids);
        let mut codes = vec![0u64; words * whole];
        for (w, word) in codes.chunks_mut(whole.max(1)).enumerate() {
            let (code_vectors, _) = S::as_mut_simd_u64s(word);
            let fields = (k - w * COUNTS_PER_WORD).min(COUNTS_PER_WORD);
            let targets: [(S::u64s, S::u64s); COUNTS_PER_WORD] = std::array::from_fn(|f| {
                let g = (w * COUNTS_PER_WORD + f) as u64;
                (simd.splat_u64s(g), simd.splat_u64s(1 << (COUNT_BITS * f)))
            });
            // Each group's field apart, then combined by a tree of ORs (a row is in at most one
            // group, so the code is the same as a chain of selects): the chain made each
            // vector wait on five selects in turn, about a third of the samples of a
            // Bernoulli fit at d = 2, K = 10.
            const { assert!(COUNTS_PER_WORD == 5, "the tree below combines five fields") };
            let zero = simd.splat_u64s(0);
            for (code, &id) in code_vectors.iter_mut().zip(id_vectors) {
                let field: [S::u64s; COUNTS_PER_WORD] = std::array::from_fn(|f| match f < fields {
                    true => simd.select_u64s(simd.equal_u64s(id, targets[f].0), targets[f].1, zero),
                    false => zero,
                });
                let low = simd.or_u64s(field[0], field[1]);
                let high = simd.or_u64s(field[2], field[3]);
                *code = simd.or_u64s(simd.or_u64s(low, high), field[4]);
            }
        }
        let mut counts = vec![0u64; k];
        let mut scratch = Vec::new();
        let mut not_finite = false;
        // With one packed counter (up to 5 groups), four contiguous columns are counted in one
        // pass over all of them, which is the chunk's first read (as for `grouped_sums`);
        // `read_together[c]` holds column j + c's counts over the whole vectors.
        let mut read_together = [[0u64; COUNTS_PER_WORD]; TOUCHED_COLUMNS];
        let mut have_read_together = false;
        for j in 0..d {
            if words == 1 && whole > 0 && j % TOUCHED_COLUMNS == 0 {
                let last = (j + TOUCHED_COLUMNS).min(d);
                let columns = crate::block::contiguous_columns(x, j..last);
                have_read_together = columns.is_some();
                if let Some(columns) = columns {
                    read_together = [[0; COUNTS_PER_WORD]; TOUCHED_COLUMNS];
                    let v = |c: usize| S::as_simd_f64s(&columns[c][..whole]).0;
                    let codes = &codes[..whole];
                    let out = &mut read_together;
                    not_finite |= match columns.len() {
                        1 => count_pass_columns::<S, 1>(simd, [v(0)], codes, threshold, out),
                        2 => count_pass_columns::<S, 2>(simd, [v(0), v(1)], codes, threshold, out),
                        3 => count_pass_columns::<S, 3>(
                            simd,
                            [v(0), v(1), v(2)],
                            codes,
                            threshold,
                            out,
                        ),
                        _ => count_pass_columns::<S, 4>(
                            simd,
                            [v(0), v(1), v(2), v(3)],
                            codes,
                            threshold,
                            out,
                        ),
                    };
                }
            }
            // Otherwise the chunk's first read: four column streams in flight
            // ([`touch_columns`]).
            if !have_read_together && j % TOUCHED_COLUMNS == 0 {
                touch_columns(x, j, n);
            }
            let col = crate::block::column(x, j, &mut scratch);
            counts.fill(0);
            if have_read_together {
                counts.copy_from_slice(&read_together[j % TOUCHED_COLUMNS][..k]);
            }
            let passes = if have_read_together { 0 } else { words };
            for w0 in (0..passes).step_by(WORDS_PER_PASS) {
                let count = (words - w0).min(WORDS_PER_PASS);
                let codes = &codes[w0 * whole..(w0 + count) * whole];
                let counts = &mut counts[w0 * COUNTS_PER_WORD..];
                // The finiteness check rides on the first pass.
                let check = w0 == 0;
                not_finite |= match count {
                    1 => count_pass::<S, 1>(simd, &col[..whole], codes, threshold, check, counts),
                    2 => count_pass::<S, 2>(simd, &col[..whole], codes, threshold, check, counts),
                    3 => count_pass::<S, 3>(simd, &col[..whole], codes, threshold, check, counts),
                    _ => count_pass::<S, 4>(simd, &col[..whole], codes, threshold, check, counts),
                };
            }
            for (&v, &g) in col[whole..n].iter().zip(&groups[whole..n]) {
                not_finite |= !v.is_finite();
                if let Some(c) = counts.get_mut(g) {
                    *c += u64::from(v > threshold);
                }
            }
            for (g, &c) in counts.iter().enumerate() {
                sums[(g, j)] += c as f64;
            }
        }
        not_finite
    }
}

/// [`count_pass`] with one packed counter (`codes`, one per row), over `C` columns' whole
/// vectors together: each column's group counts into `out[c]`. Returns whether a value is not
/// finite.
#[inline(always)]
fn count_pass_columns<S: Simd, const C: usize>(
    simd: S,
    columns: [&[S::f64s]; C],
    codes: &[u64],
    threshold: f64,
    out: &mut [[u64; COUNTS_PER_WORD]; TOUCHED_COLUMNS],
) -> bool {
    let (code_vectors, _) = S::as_simd_u64s(codes);
    let vectors = columns.iter().map(|c| c.len()).min().unwrap_or(0);
    let vectors = vectors.min(code_vectors.len());
    let zero = simd.splat_u64s(0);
    let t = simd.splat_f64s(threshold);
    // v − v is +0 (all bits clear) exactly when v is finite; its bits are OR-ed together.
    let mut bad = zero;
    let mut start = 0;
    while start < vectors {
        let end = (start + COUNT_FLUSH).min(vectors);
        let mut acc = [zero; C];
        for b in start..end {
            let code = code_vectors[b];
            for c in 0..C {
                let v = columns[c][b];
                let above = simd.greater_than_f64s(v, t);
                acc[c] = simd.add_u64s(acc[c], simd.select_u64s(above, code, zero));
                bad = simd.or_u64s(bad, simd.transmute_u64s_f64s(simd.sub_f64s(v, v)));
            }
        }
        for (acc, out) in acc.iter().zip(out.iter_mut()) {
            add_unpacked::<S>(std::slice::from_ref(acc), out);
        }
        start = end;
    }
    any_bit_set::<S>(bad)
}

/// Adds the counts packed in `acc` (up to [`WORDS_PER_PASS`] counters of
/// [`COUNTS_PER_WORD`] fields, one vector each) to `counts`, field f of counter w to
/// `counts[w · COUNTS_PER_WORD + f]` where there is one.
#[inline(always)]
fn add_unpacked<S: Simd>(acc: &[S::u64s], counts: &mut [u64]) {
    // Room for the vectors, of up to 8 lanes (AVX-512's, the widest).
    let mut lanes = [0u64; 8 * WORDS_PER_PASS];
    let (lv, _) = S::as_mut_simd_u64s(&mut lanes);
    let words = acc.len().min(WORDS_PER_PASS);
    lv[..words].copy_from_slice(&acc[..words]);
    for (w, word) in lanes.chunks(S::U64_LANES).take(words).enumerate() {
        for &v in word {
            for f in 0..COUNTS_PER_WORD {
                if let Some(c) = counts.get_mut(w * COUNTS_PER_WORD + f) {
                    *c += (v >> (COUNT_BITS * f)) & COUNT_FLUSH as u64;
                }
            }
        }
    }
}

/// Whether any bit of any lane of `v` is set.
#[inline(always)]
fn any_bit_set<S: Simd>(v: S::u64s) -> bool {
    let mut lanes = [0u64; 8];
    let (lv, _) = S::as_mut_simd_u64s(&mut lanes);
    lv[0] = v;
    lanes.iter().any(|&b| b != 0)
}

/// One pass of [`CountsAbove`] over a column's whole vectors `col` for `W` packed counters
/// (`codes`: W runs of one code per row), adding each group's count to `counts` (5 per
/// counter, fewer in the last). With `check`, returns whether a value is not finite.
#[inline(always)]
fn count_pass<S: Simd, const W: usize>(
    simd: S,
    col: &[f64],
    codes: &[u64],
    threshold: f64,
    check: bool,
    counts: &mut [u64],
) -> bool {
    let rows = col.len();
    let (xv, _) = S::as_simd_f64s(col);
    let code_runs: [&[S::u64s]; W] =
        std::array::from_fn(|w| S::as_simd_u64s(&codes[w * rows..(w + 1) * rows]).0);
    let zero = simd.splat_u64s(0);
    let t = simd.splat_f64s(threshold);
    // v − v is +0 (all bits clear) exactly when v is finite; its bits are OR-ed together.
    let mut bad = zero;
    let mut start = 0;
    while start < xv.len() {
        let end = (start + COUNT_FLUSH).min(xv.len());
        let mut acc = [zero; W];
        for b in start..end {
            let v = xv[b];
            let above = simd.greater_than_f64s(v, t);
            for w in 0..W {
                acc[w] = simd.add_u64s(acc[w], simd.select_u64s(above, code_runs[w][b], zero));
            }
            if check {
                bad = simd.or_u64s(bad, simd.transmute_u64s_f64s(simd.sub_f64s(v, v)));
            }
        }
        add_unpacked::<S>(&acc, counts);
        start = end;
    }
    any_bit_set::<S>(bad)
}

/// Each group's means and squared deviations of every column, taken row by row: `means[g·d + j]`
/// ← the sum of group g's values of column j, added one row after another in row order from
/// zero, over `counts[g]` (0 for an empty group), and `squares[g·d + j]` ← the sum, in the same
/// order, of (x_ij − mean)·(x_ij − mean) (no fused multiply-add). Rows whose group is `k` or more
/// are skipped; `counts[g]` must be group g's number of rows. Non-finite values make their
/// group's mean non-finite (or overflow it).
///
/// Why: a labeled diagonal fit of many classes split each chunk by class, a copy of every value
/// by index, to take each class's moments from contiguous runs; by masks it costs K operations
/// per value. Here eight rows of eight columns are transposed in registers (AVX-512) and each
/// row's vector is added to its group's accumulator: a cost per value that does not grow with
/// K. Each eight-column block takes its sums, then its squares, while it is in L2. With AVX2
/// alone, four rows of four columns are transposed at a time (`ByRows`); without AVX2, or
/// with columns that are not contiguous, the same sums one value at a time: the same bits.
/// The last block's squares ask for `ahead` from memory as they go (each block before it asks
/// for the next block's columns); what is asked for never changes a result.
pub fn grouped_moments_by_rows(
    x: MatRef<'_, f64>,
    groups: &[usize],
    counts: &[usize],
    means: &mut [f64],
    squares: &mut [f64],
    ahead: RowsAhead<'_>,
) {
    let (n, d, k) = (x.nrows().min(groups.len()), x.ncols(), counts.len());
    debug_assert_eq!(means.len(), k * d);
    debug_assert_eq!(squares.len(), k * d);
    let groups = &groups[..n];
    #[cfg(target_arch = "x86_64")]
    if let Some(kernel) = ByRows::new()
        && let Some(columns) = crate::block::contiguous_columns(x, 0..d)
    {
        return moments_by_row_blocks(kernel, &columns, groups, counts, means, squares, ahead);
    }
    group_means_one_by_one(x, groups, counts, means);
    squares.fill(0.0);
    for (i, &g) in groups.iter().enumerate() {
        if g < k {
            for j in 0..d {
                let t = x[(i, j)] - means[g * d + j];
                squares[g * d + j] += t * t;
            }
        }
    }
}

/// Each group's mean and full scatter of a two-column `x` (row by row: `means[g · 2..][..2]`,
/// and the packed lower triangle `lower[g · 3..][..3]` = (S₁₁, S₁₂, S₂₂)) in one pass over the
/// rows, shifted: each group's deviations e = x − s from a shift s near its mean (the mean of
/// its first [`PAIR_SHIFT_ROWS`] rows, in row order), summed with their squares and product in
/// row order, then mean = s + Σe / c and S = Σeeᵀ − (Σe)(Σe / c)ᵀ for a group of c rows. Where
/// that could cost more than a few bits, the two-pass centred moments
/// ([`grouped_pair_moments_two_pass`]) instead: where some group's c · (mean − s)² passes
/// twice its scatter, in either feature (see `shift_is_near`). Each group's number of rows is
/// written to `counts` (one per group, every value replaced), counted by the same pass; groups
/// at or past `counts.len()` are skipped. Non-finite values make their group's mean non-finite.
/// The pass asks for `ahead` from memory as it goes.
///
/// Why: a labeled full-covariance fit of many classes at d = 2 took each class's sums, then its
/// centred products, in two passes over the rows, and both passes were bound by their
/// instructions, not by memory (BENCHMARKS.md, ninety-sixth round). One pass costs about three
/// quarters of the two.
pub fn grouped_pair_moments_by_rows(
    x: MatRef<'_, f64>,
    groups: &[usize],
    counts: &mut [usize],
    means: &mut [f64],
    lower: &mut [f64],
    ahead: RowsAhead<'_>,
) {
    let k = counts.len();
    debug_assert_eq!(x.ncols(), 2);
    debug_assert_eq!(means.len(), k * 2);
    debug_assert_eq!(lower.len(), k * 3);
    let (shifts, sums) = shifted_pair_sums(x, groups, counts, ahead);
    let counts = &*counts;
    if !shifted_pair_moments(counts, &shifts, &sums, means, lower) {
        grouped_pair_moments_two_pass(x, groups, counts, means, lower, RowsAhead::NONE);
    }
}

/// Each group's means and squared deviations of a two-column `x` (`means[g · 2..][..2]`,
/// `squares[g · 2..][..2]`), as [`grouped_moments_by_rows`] gives them, by
/// [`grouped_pair_moments_by_rows`]' one shifted pass: its means and the diagonal of its
/// scatters, to the bit. Where its shift is not near, [`grouped_moments_by_rows`]' two passes
/// (the two passes of [`grouped_pair_moments_two_pass`], whose diagonal they are), in the same
/// chunks, so the diagonal stays the full scatter's. Each group's number of rows is written to
/// `counts`, as there.
///
/// Why: the same as [`grouped_pair_moments_by_rows`]': a labeled diagonal fit of many
/// classes at d = 2 was two passes bound by their instructions.
pub fn grouped_pair_variances_by_rows(
    x: MatRef<'_, f64>,
    groups: &[usize],
    counts: &mut [usize],
    means: &mut [f64],
    squares: &mut [f64],
    ahead: RowsAhead<'_>,
) {
    let k = counts.len();
    debug_assert_eq!(x.ncols(), 2);
    debug_assert_eq!(means.len(), k * 2);
    debug_assert_eq!(squares.len(), k * 2);
    let (shifts, sums) = shifted_pair_sums(x, groups, counts, ahead);
    let counts = &*counts;
    let mut lower = vec![0.0; k * 3];
    if shifted_pair_moments(counts, &shifts, &sums, means, &mut lower) {
        for (square, scatter) in squares.chunks_exact_mut(2).zip(lower.chunks_exact(3)) {
            square.copy_from_slice(&[scatter[0], scatter[2]]);
        }
    } else {
        grouped_moments_by_rows(x, groups, counts, means, squares, RowsAhead::NONE);
    }
}

/// Each group's shift and shifted sums for [`grouped_pair_moments_by_rows`]: with the by-rows
/// kernel where the CPU has AVX2 and the columns are contiguous, one row at a time otherwise
/// (the same bits); and each group's number of rows into `counts` (`counts.len()` groups),
/// from the sums' count slot.
///
/// Why the counts from the sums: taken first, by a pass of their own over the labels, they had
/// 7% of the samples of `profile lda-fit 2 10` in L3 (ninety-seventh round).
fn shifted_pair_sums(
    x: MatRef<'_, f64>,
    groups: &[usize],
    counts: &mut [usize],
    ahead: RowsAhead<'_>,
) -> (Vec<[f64; 4]>, Vec<[f64; 8]>) {
    let groups = &groups[..x.nrows().min(groups.len())];
    let shifts = pair_shifts(x, groups, counts.len());
    let mut sums = vec![[0.0f64; 8]; counts.len()];
    let mut by_kernel = false;
    #[cfg(target_arch = "x86_64")]
    if let Some(kernel) = ByRows::new()
        && x.ncols() == 2
        && let Some(columns) = crate::block::contiguous_columns(x, 0..2)
    {
        kernel.shifted_pair_sums([columns[0], columns[1]], groups, &shifts, &mut sums, ahead);
        by_kernel = true;
    }
    if !by_kernel {
        let _ = ahead;
        shifted_pair_sums_one_by_one(x, groups, &shifts, &mut sums);
    }
    for (count, sum) in counts.iter_mut().zip(&sums) {
        // A sum of ones, exact below 2^53.
        *count = sum[PAIR_COUNT_SLOT] as usize;
    }
    (shifts, sums)
}

/// The slot of a group's shifted sums that counts its rows (one added per row, in the slot
/// after it too, as the vector kernel's addition of a pair of lanes leaves it).
const PAIR_COUNT_SLOT: usize = 6;

/// How many of a group's first rows [`grouped_pair_moments_by_rows`] averages for its shift.
/// Why eight: the shift's distance from the mean is then about σ / √8 in each feature, and
/// `shift_is_near` sends a chunk to the two passes only when some group's is past √2 σ (17
/// of the 2,000 chunks of ten classes that `profile lda-fit 2 10` fitted); a few rows more
/// scanned per chunk cost little.
pub const PAIR_SHIFT_ROWS: usize = 8;

/// Each of `k` groups' shift for [`grouped_pair_moments_by_rows`], laid out as the kernel
/// reads it, `(s₁, s₂, s₁, s₂)`: the mean of its first `min(PAIR_SHIFT_ROWS, count)` rows,
/// summed in row order (0 for an empty group). The scan stops once every group has
/// `PAIR_SHIFT_ROWS` rows; a group with fewer has it read every label.
fn pair_shifts(x: MatRef<'_, f64>, groups: &[usize], k: usize) -> Vec<[f64; 4]> {
    let mut left = k;
    // Each group's sums in its first two slots, then its mean in all four.
    let (mut shifts, mut taken) = (vec![[0.0f64; 4]; k], vec![0usize; k]);
    for (i, &g) in groups.iter().enumerate() {
        if left == 0 {
            break;
        }
        if g < k && taken[g] < PAIR_SHIFT_ROWS {
            shifts[g][0] += x[(i, 0)];
            shifts[g][1] += x[(i, 1)];
            taken[g] += 1;
            if taken[g] == PAIR_SHIFT_ROWS {
                left -= 1;
            }
        }
    }
    for (shift, &t) in shifts.iter_mut().zip(&taken) {
        if t > 0 {
            let m = [shift[0] / t as f64, shift[1] / t as f64];
            *shift = [m[0], m[1], m[0], m[1]];
        }
    }
    shifts
}

/// Each group's shifted sums in the kernel's layout, one row at a time in row order: slots
/// (Σe₁², Σe₂², Σe₁e₂, Σe₂e₁, Σe₁, Σe₂, c, c) of e = x − s (no fused multiply-add; c the
/// group's rows, one added per row), the additions [`shifted_pair_sums_v3`] makes, so the same
/// bits.
fn shifted_pair_sums_one_by_one(
    x: MatRef<'_, f64>,
    groups: &[usize],
    shifts: &[[f64; 4]],
    sums: &mut [[f64; 8]],
) {
    for (i, &g) in groups.iter().enumerate() {
        let (Some(s), Some(slots)) = (shifts.get(g), sums.get_mut(g)) else {
            continue;
        };
        add_shifted_pair(slots, s, [x[(i, 0)], x[(i, 1)]]);
    }
}

/// Adds one row's shifted terms to its group's slots (see [`shifted_pair_sums_one_by_one`]).
#[inline(always)]
fn add_shifted_pair(slots: &mut [f64; 8], s: &[f64; 4], row: [f64; 2]) {
    let e = [row[0] - s[0], row[1] - s[1]];
    let term = [
        e[0] * e[0],
        e[1] * e[1],
        e[0] * e[1],
        e[1] * e[0],
        e[0],
        e[1],
        1.0,
        1.0,
    ];
    for (slot, t) in slots.iter_mut().zip(term) {
        *slot += t;
    }
}

/// [`shifted_pair_sums_one_by_one`] with AVX2: four rows' pairs by two unpacks, each row's
/// (x, y, x, y) by one permute, its deviations by one subtraction, its products
/// (e₁², e₂², e₁e₂, e₂e₁) by one permute within lanes and one product, and (e₁, e₂, 1, 1) by
/// one blend; the rows past the last multiple of eight one at a time.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn shifted_pair_sums_v3(
    simd: pulp::x86::V3,
    [x, y]: [&[f64]; 2],
    groups: &[usize],
    shifts: &[[f64; 4]],
    sums: &mut [[f64; 8]],
    next: RowsAhead<'_>,
) {
    let n = x.len().min(y.len()).min(groups.len());
    let whole = n / 8 * 8;
    let f = simd.avx;
    let ones = f._mm256_set1_pd(1.0);
    let shifts = &shifts[..shifts.len().min(sums.len())];
    let (xs, _) = x[..whole].as_chunks::<4>();
    let (ys, _) = y[..whole].as_chunks::<4>();
    let (gs, _) = groups[..whole].as_chunks::<4>();
    for (q, ((x4, y4), g4)) in xs.iter().zip(ys).zip(gs).enumerate() {
        if q % 2 == 0 {
            next.ask(4 * q);
        }
        for (&row, &g) in doubled_rows(simd, x4, y4).iter().zip(g4) {
            let (Some(s), Some(slots)) = (shifts.get(g), sums.get_mut(g)) else {
                continue;
            };
            let dev = f._mm256_sub_pd(row, pulp::cast(*s));
            // (e₁, e₂, e₁, e₂) · (e₁, e₂, e₂, e₁).
            let term = f._mm256_mul_pd(dev, f._mm256_permute_pd::<0b0110>(dev));
            let products: [f64; 4] = [slots[0], slots[1], slots[2], slots[3]];
            let products: [f64; 4] = pulp::cast(f._mm256_add_pd(pulp::cast(products), term));
            slots[..4].copy_from_slice(&products);
            let firsts: [f64; 4] = [slots[4], slots[5], slots[6], slots[7]];
            let firsts: [f64; 4] = pulp::cast(
                f._mm256_add_pd(pulp::cast(firsts), f._mm256_blend_pd::<0b1100>(dev, ones)),
            );
            slots[4..].copy_from_slice(&firsts);
        }
    }
    for (i, &g) in groups.iter().enumerate().take(n).skip(whole) {
        let (Some(s), Some(slots)) = (shifts.get(g), sums.get_mut(g)) else {
            continue;
        };
        add_shifted_pair(slots, s, [x[i], y[i]]);
    }
}

/// Each group's mean and packed scatter from its shifted sums: Σe / c, then mean = s + Σe / c
/// and S = Σeeᵀ − (Σe)(Σe / c)ᵀ (S₁₂ from Σe₁e₂ and Σe₁ · (Σe₂ / c)); an empty group's are 0.
/// False, with `means` and `lower` unspecified, if some group's shift is not near its mean
/// ([`shift_is_near`]).
fn shifted_pair_moments(
    counts: &[usize],
    shifts: &[[f64; 4]],
    sums: &[[f64; 8]],
    means: &mut [f64],
    lower: &mut [f64],
) -> bool {
    for (g, &count) in counts.iter().enumerate() {
        let (s, sum) = (&shifts[g], &sums[g]);
        if count == 0 {
            means[g * 2..][..2].fill(0.0);
            lower[g * 3..][..3].fill(0.0);
            continue;
        }
        let c = count as f64;
        let step = [sum[4] / c, sum[5] / c];
        let scatter = [
            sum[0] - sum[4] * step[0],
            sum[2] - sum[4] * step[1],
            sum[1] - sum[5] * step[1],
        ];
        if !shift_is_near(c, step[0], scatter[0]) || !shift_is_near(c, step[1], scatter[2]) {
            return false;
        }
        means[g * 2..][..2].copy_from_slice(&[s[0] + step[0], s[1] + step[1]]);
        lower[g * 3..][..3].copy_from_slice(&scatter);
    }
    true
}

/// Whether a shift `step` = mean − s away from a feature's mean costs at most a bit and a half
/// of its scatter S over c rows: c · step² ≤ 2 · S. Why: S is Σe² − c · step² and the rounding
/// error of Σe² scales with it, S + c · step², so the shift multiplies S's relative error by
/// 1 + c · step² / S, here at most 3, against the two passes'. A non-finite step or scatter
/// passes (its mean is non-finite too, and the fit's check names it).
fn shift_is_near(c: f64, step: f64, scatter: f64) -> bool {
    // Written so that a NaN passes.
    (c * step * step).partial_cmp(&(2.0 * scatter)) != Some(std::cmp::Ordering::Greater)
}

/// [`grouped_pair_moments_by_rows`]' two-pass form: each group's sums, then each row's
/// deviations from its group's mean, their squares and their product, every sum in row
/// order; S₁₁ and S₂₂ are the bits [`grouped_moments_by_rows`] gives.
pub fn grouped_pair_moments_two_pass(
    x: MatRef<'_, f64>,
    groups: &[usize],
    counts: &[usize],
    means: &mut [f64],
    lower: &mut [f64],
    ahead: RowsAhead<'_>,
) {
    let (n, k) = (x.nrows().min(groups.len()), counts.len());
    let groups = &groups[..n];
    #[cfg(target_arch = "x86_64")]
    if let Some(kernel) = ByRows::new()
        && x.ncols() == 2
        && let Some(columns) = crate::block::contiguous_columns(x, 0..2)
    {
        return pair_moments_with(kernel, &columns, groups, counts, means, lower, ahead);
    }
    group_means_one_by_one(x, groups, counts, means);
    lower.fill(0.0);
    for (i, &g) in groups.iter().enumerate() {
        if g < k {
            let e = [x[(i, 0)] - means[g * 2], x[(i, 1)] - means[g * 2 + 1]];
            lower[g * 3] += e[0] * e[0];
            lower[g * 3 + 1] += e[0] * e[1];
            lower[g * 3 + 2] += e[1] * e[1];
        }
    }
}

/// Each group's mean of the rows of `x` (`means[g · d..][..d]`), summed one value at a time in
/// row order: the by-rows kernels' sums without them. Groups at or past `counts.len()` are
/// skipped.
fn group_means_one_by_one(
    x: MatRef<'_, f64>,
    groups: &[usize],
    counts: &[usize],
    means: &mut [f64],
) {
    let (d, k) = (x.ncols(), counts.len());
    means.fill(0.0);
    for (i, &g) in groups.iter().enumerate() {
        if g < k {
            for j in 0..d {
                means[g * d + j] += x[(i, j)];
            }
        }
    }
    for (g, &count) in counts.iter().enumerate() {
        for m in &mut means[g * d..(g + 1) * d] {
            *m = group_mean(*m, count);
        }
    }
}

/// A group's mean from its sum and row count (0 for an empty group).
fn group_mean(sum: f64, count: usize) -> f64 {
    if count == 0 { 0.0 } else { sum / count as f64 }
}

/// The first pass of the by-rows moments over a `block` of up to eight columns: each group's
/// sums into `acc` (the kernel's layout, `g · 8 + c`), then their means (0 for an empty group)
/// into `centre`, in the same layout, for the second pass, and to `mean(g, c, value)`.
#[cfg(target_arch = "x86_64")]
fn block_means(
    kernel: ByRows,
    block: &[&[f64]],
    groups: &[usize],
    counts: &[usize],
    acc: &mut [f64],
    centre: &mut [f64],
    mut mean: impl FnMut(usize, usize, f64),
    ahead: RowsAhead<'_>,
) {
    kernel.pass::<false>(block, groups, acc, &[], ahead);
    for (g, &count) in counts.iter().enumerate() {
        for (c, &sum) in acc[g * 8..][..block.len()].iter().enumerate() {
            let value = group_mean(sum, count);
            centre[g * 8 + c] = value;
            mean(g, c, value);
        }
    }
}

/// [`grouped_pair_moments_by_rows`] of two contiguous `columns` with `kernel`.
#[cfg(target_arch = "x86_64")]
fn pair_moments_with(
    kernel: ByRows,
    columns: &[&[f64]],
    groups: &[usize],
    counts: &[usize],
    means: &mut [f64],
    lower: &mut [f64],
    ahead: RowsAhead<'_>,
) {
    let k = counts.len();
    let (mut acc, mut centre) = (vec![0.0; k * 8], vec![0.0; k * 8]);
    block_means(
        kernel,
        columns,
        groups,
        counts,
        &mut acc,
        &mut centre,
        |g, c, mean| {
            means[g * 2 + c] = mean;
        },
        RowsAhead::NONE,
    );
    kernel.pair_products(columns, groups, &mut acc, &centre, ahead);
    for g in 0..k {
        let slots = &acc[g * 8..][..3];
        lower[g * 3..][..3].copy_from_slice(&[slots[0], slots[2], slots[1]]);
    }
}

/// [`grouped_moments_by_rows`] of contiguous `columns` with `kernel`, eight columns at a time.
#[cfg(target_arch = "x86_64")]
fn moments_by_row_blocks(
    kernel: ByRows,
    columns: &[&[f64]],
    groups: &[usize],
    counts: &[usize],
    means: &mut [f64],
    squares: &mut [f64],
    ahead: RowsAhead<'_>,
) {
    let (d, k) = (columns.len(), counts.len());
    let (mut acc, mut centre) = (vec![0.0; k * 8], vec![0.0; k * 8]);
    for j0 in (0..d).step_by(8) {
        let block = &columns[j0..(j0 + 8).min(d)];
        // The squares' pass (from L2) asks for the next block from memory: `profile gnb-fit
        // 64 10`, medians of 15, five alternated pairs, without → with: 0.0297, 0.0308,
        // 0.0327, 0.0293, 0.0305 → 0.0279, 0.0344, 0.0275, 0.0263, 0.0244 s.
        let next = match &columns[(j0 + 8).min(d)..(j0 + 16).min(d)] {
            [] => ahead,
            next => RowsAhead::new(next, &[]),
        };
        // The first block's sums are the chunk's first read, unless the last chunk's squares
        // asked for it (they do when they ask for this one's next: `ahead`); then they ask for
        // their own rows further on (`profile gnb-fit 16 10`, `PROFILE_COLD=cs`, medians of 21,
        // two alternated pairs on the Intel Xeon: 6.71, 7.28 → 6.45, 6.73 ms; at d = 8, where
        // the chunk was asked for, 3.77, 3.73 → 3.95, 3.83 ms when they asked too).
        let first_read = match j0 == 0 && ahead.is_empty() {
            true => RowsAhead::further_on(block, groups),
            false => RowsAhead::NONE,
        };
        block_means(
            kernel,
            block,
            groups,
            counts,
            &mut acc,
            &mut centre,
            |g, c, mean| {
                means[g * d + j0 + c] = mean;
            },
            first_read,
        );
        kernel.pass::<true>(block, groups, &mut acc, &centre, next);
        for g in 0..k {
            squares[g * d + j0..][..block.len()].copy_from_slice(&acc[g * 8..][..block.len()]);
        }
    }
}

/// The kernel that takes eight columns' group sums by rows on this CPU: AVX-512's
/// ([`by_rows_v4`], eight rows of eight columns a transpose) or AVX2's ([`by_rows_v3`], four rows
/// of four columns a transpose, two transposes for eight columns; on AVX-512 CPUs too for a
/// block of three or four columns, while one or two go by pairs, `by_rows_pairs`). Each adds
/// each row to its group's sums in row order, one addition after another, so they give the
/// same bits.
///
/// Why: without AVX-512 the sums by rows were one value at a time, each read through the
/// column-major chunk's index, and the labeled fits of many classes on AVX2 hosts paid for it
/// (see `BENCHMARKS.md`, sixty-first round).
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy, Debug)]
pub(crate) enum ByRows {
    V4(pulp::x86::V4),
    V3(pulp::x86::V3),
}

#[cfg(target_arch = "x86_64")]
impl ByRows {
    /// The widest kernel this CPU has, if it has AVX2.
    pub(crate) fn new() -> Option<Self> {
        match pulp::x86::V4::try_new() {
            Some(simd) => Some(Self::V4(simd)),
            None => pulp::x86::V3::try_new().map(Self::V3),
        }
    }

    /// Every kernel this CPU has, widest first (for tests that compare them).
    #[cfg(test)]
    pub(crate) fn available() -> Vec<Self> {
        let v4 = pulp::x86::V4::try_new().map(Self::V4);
        v4.into_iter()
            .chain(pulp::x86::V3::try_new().map(Self::V3))
            .collect()
    }

    /// [`by_rows_pairs`]' pass with `CROSS` over two columns with this kernel: each group's
    /// (e₁², e₂², e₁e₂, e₂e₁) sums into its first four slots of `acc`, asking for `next` as it
    /// goes.
    #[inline]
    pub(crate) fn pair_products(
        self,
        columns: &[&[f64]],
        groups: &[usize],
        acc: &mut [f64],
        centre: &[f64],
        next: RowsAhead<'_>,
    ) {
        debug_assert_eq!(columns.len(), 2);
        let simd = match self {
            Self::V4(simd) => *simd,
            Self::V3(simd) => simd,
        };
        simd.vectorize(
            #[inline(always)]
            || by_rows_pairs::<true, true>(simd, columns, groups, acc, centre, next),
        );
    }

    /// [`shifted_pair_sums_v3`] with this kernel (AVX2's instructions on AVX-512 CPUs too).
    #[inline]
    pub(crate) fn shifted_pair_sums(
        self,
        columns: [&[f64]; 2],
        groups: &[usize],
        shifts: &[[f64; 4]],
        sums: &mut [[f64; 8]],
        next: RowsAhead<'_>,
    ) {
        let simd = match self {
            Self::V4(simd) => *simd,
            Self::V3(simd) => simd,
        };
        // The closure moves `sums` out, so it is only `FnOnce`: pulp calls its body then,
        // not a `call_once` shim over `call_mut` that LLVM left out of line (and the kernel's
        // intrinsics with it) for a body this size.
        simd.vectorize(
            #[inline(always)]
            move || {
                let sums = sums;
                shifted_pair_sums_v3(simd, columns, groups, shifts, sums, next)
            },
        );
    }

    /// [`by_rows_v4`]'s pass with this kernel.
    #[inline]
    pub(crate) fn pass<const SQUARE: bool>(
        self,
        columns: &[&[f64]],
        groups: &[usize],
        acc: &mut [f64],
        centre: &[f64],
        next: RowsAhead<'_>,
    ) {
        match self {
            // One or two columns (d ≤ 2, or a last block of d mod 8 ≤ 2): the rows' pairs by two
            // unpacks per four rows, no transpose. `profile gnb-fit 2 10` on a Zen 5 EPYC,
            // medians of 21, alternated with the 4 × 4 kernel: 0.0016–0.0017 → 0.0013–0.0014 s
            // (BENCHMARKS.md, seventieth round). AVX2-only CPUs keep the 4 × 4 kernel (not timed
            // there).
            Self::V4(simd) if columns.len() <= 2 => simd.vectorize(
                #[inline(always)]
                || by_rows_pairs::<SQUARE, false>(*simd, columns, groups, acc, centre, next),
            ),
            // Three or four columns: AVX2's kernel (four rows of four columns a transpose, 8
            // shuffles for four rows), not eight rows of eight columns mostly zeros (24 for
            // eight). The same additions, so the same bits. When d = 2 went this way too,
            // `profile gnb-fit 2 10` on a Zen 5 EPYC, medians of 21, alternated pairs: 0.0023 →
            // 0.0016–0.0017 s against the 8 × 8 kernel (a slower spell: 0.0023 → 0.0019–0.0021 s).
            Self::V4(simd) if columns.len() <= 4 => simd.vectorize(
                #[inline(always)]
                || by_rows_v3::<SQUARE>(*simd, columns, groups, acc, centre, next),
            ),
            Self::V4(simd) => simd.vectorize(
                #[inline(always)]
                || by_rows_v4::<SQUARE>(simd, columns, groups, acc, centre, next),
            ),
            Self::V3(simd) => simd.vectorize(
                #[inline(always)]
                || by_rows_v3::<SQUARE>(simd, columns, groups, acc, centre, next),
            ),
        }
    }
}

/// [`by_rows_v4`] with AVX2: four rows of up to eight columns at a time, each half of four
/// columns transposed in registers ([`crate::block::transpose4_v3`]) and each row's half added
/// to its group's sums (`acc[g · 8 + 4h..][..4]`). The same additions in the same order per
/// group and column, so the same bits.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn by_rows_v3<const SQUARE: bool>(
    simd: pulp::x86::V3,
    columns: &[&[f64]],
    groups: &[usize],
    acc: &mut [f64],
    centre: &[f64],
    next: RowsAhead<'_>,
) {
    use std::arch::x86_64::__m256d;
    let (n, k) = (groups.len(), acc.len() / 8);
    acc.fill(0.0);
    let f = simd.avx;
    let (accs, _) = pulp::x86::V3::as_mut_simd_f64s(acc);
    let centres = pulp::x86::V3::as_simd_f64s(centre).0;
    // A block of four columns or fewer (d = 2, or the last of d = 4 mod 8) takes one half.
    let halves = columns.len().div_ceil(4).min(2);
    let whole = n / 8 * 8;
    for i0 in (0..whole).step_by(8) {
        next.ask(i0);
        for r0 in [i0, i0 + 4] {
            for h in 0..halves {
                let cols: [__m256d; 4] =
                    std::array::from_fn(|c| four_rows_or_zeros(columns, 4 * h + c, r0));
                let rows = crate::block::transpose4_v3(simd, cols);
                for (t, &row) in rows.iter().enumerate() {
                    let g = groups[r0 + t];
                    if g < k {
                        let at = 2 * g + h;
                        let term = if SQUARE {
                            let dev = f._mm256_sub_pd(row, pulp::cast(centres[at]));
                            f._mm256_mul_pd(dev, dev)
                        } else {
                            row
                        };
                        let a: __m256d = pulp::cast(accs[at]);
                        accs[at] = pulp::cast(f._mm256_add_pd(a, term));
                    }
                }
            }
        }
    }
    by_rows_tail::<SQUARE>(columns, groups, whole, acc, centre);
}

/// Rows `r0 .. r0 + 4` of column `c` of a by-rows block, or zeros past the block's columns.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn four_rows_or_zeros(columns: &[&[f64]], c: usize, r0: usize) -> std::arch::x86_64::__m256d {
    let v: [f64; 4] = columns
        .get(c)
        .map(|col| col[r0..r0 + 4].try_into().unwrap_or_default())
        .unwrap_or_default();
    pulp::cast(v)
}

/// [`by_rows_v3`] for a block of one or two columns: each four rows' pairs are interleaved by
/// two unpacks (no transpose of a block that is mostly zeros), and each row's pair is added to
/// its group's first two sums (`acc[g · 8..][..2]`). The same additions per group and column in
/// the same order, so the same bits. A one-column block is taken as the column twice: its
/// second sum holds no meaningful value (as the lanes past a block's columns in the other
/// kernels); no caller reads it.
///
/// With `CROSS` (and `SQUARE`, two columns), each row's deviations (e₁, e₂) from its group's
/// centre add (e₁², e₂², e₁e₂, e₂e₁) to the group's first four sums: the squares are the bits
/// `SQUARE` alone gives, and the third sum is the cross product's, a full 2 × 2 scatter in the
/// one pass ([`grouped_pair_moments_by_rows`]).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn by_rows_pairs<const SQUARE: bool, const CROSS: bool>(
    simd: pulp::x86::V3,
    columns: &[&[f64]],
    groups: &[usize],
    acc: &mut [f64],
    centre: &[f64],
    next: RowsAhead<'_>,
) {
    debug_assert!(columns.len() <= 2);
    debug_assert!(!CROSS || columns.len() == 2);
    debug_assert!(!SQUARE || centre.len() >= acc.len());
    let (x, y) = match *columns {
        [x, y] => (x, y),
        [x] => (x, x),
        _ => {
            acc.fill(0.0);
            return;
        }
    };
    let whole = by_rows_two::<SQUARE, CROSS>(simd, [x, y], groups, acc, centre, next);
    by_rows_rest::<SQUARE, CROSS>(columns, groups, whole, acc, centre);
}

/// [`by_rows_pairs`] over the rows of two columns `x` and `y` up to the last multiple of 8 that
/// all of them and `groups` reach, which it returns: the same additions in the same order, so
/// the same bits, from fixed-size chunks of the columns and labels (no check of a block's
/// columns per four rows).
/// With `CROSS`, each row's (x, y, x, y) is taken by one permute of the four rows' unpacked
/// pairs, its deviations (e₁, e₂, e₁, e₂) from the group's centre (read as two lanes
/// broadcast) by one subtraction, and the term (e₁², e₂², e₁e₂, e₂e₁) by one permute within
/// lanes and one product.
///
/// Why: the kernel before it took about 12 instructions a row, of which the block's checks and
/// the two inserts that built each row's vectors were a third, and the d = 2 fits of many
/// classes looked bound by these passes' instructions (eighty-seventh round). In cache the pair
/// moments went from 1.13–1.16× a hand-written copy's time to 1.01–1.04× (`BENCHMARKS.md`,
/// eighty-eighth round).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn by_rows_two<const SQUARE: bool, const CROSS: bool>(
    simd: pulp::x86::V3,
    [x, y]: [&[f64]; 2],
    groups: &[usize],
    acc: &mut [f64],
    centre: &[f64],
    next: RowsAhead<'_>,
) -> usize {
    use std::arch::x86_64::{__m128d, __m256d};
    let whole = x.len().min(y.len()).min(groups.len()) / 8 * 8;
    acc.fill(0.0);
    let (f, f2) = (simd.avx, simd.sse2);
    // Each group's eight slots as one array, and as many centres as groups (a group past the
    // centres is skipped, as one past the sums): a row then costs one check of its group,
    // where the flat slices cost five (the group, then both slots of the sums and of the
    // centre), which were most of the loop's instructions at d = 2 (`profile gnb-fit 2 10` on
    // the Zen 5 EPYC, medians of 21, three alternated pairs: 0.00123–0.00125 → 0.00108–0.00109
    // s; the same additions, so the same bits).
    let (sums, _) = acc.as_chunks_mut::<8>();
    let (centres, _) = centre.as_chunks::<8>();
    let centres = &centres[..centres.len().min(sums.len())];
    let (xs, _) = x[..whole].as_chunks::<4>();
    let (ys, _) = y[..whole].as_chunks::<4>();
    let (gs, _) = groups[..whole].as_chunks::<4>();
    for (q, ((x4, y4), g4)) in xs.iter().zip(ys).zip(gs).enumerate() {
        if q % 2 == 0 {
            next.ask(4 * q);
        }
        if CROSS {
            for (&row, &g) in doubled_rows(simd, x4, y4).iter().zip(g4) {
                let (Some(c), Some(slots)) = (centres.get(g), sums.get_mut(g)) else {
                    continue;
                };
                let c: [f64; 2] = [c[0], c[1]];
                let dev = f._mm256_sub_pd(row, f._mm256_broadcast_pd(&pulp::cast(c)));
                // (e₁, e₂, e₁, e₂) · (e₁, e₂, e₂, e₁).
                let term = f._mm256_mul_pd(dev, f._mm256_permute_pd::<0b0110>(dev));
                let sum: [f64; 4] = [slots[0], slots[1], slots[2], slots[3]];
                let sum: [f64; 4] = pulp::cast(f._mm256_add_pd(pulp::cast(sum), term));
                slots[..4].copy_from_slice(&sum);
            }
            continue;
        }
        let (a, b): (__m256d, __m256d) = (pulp::cast(*x4), pulp::cast(*y4));
        // Rows 0 and 2 in `even`'s halves, 1 and 3 in `odd`'s.
        let (even, odd) = (f._mm256_unpacklo_pd(a, b), f._mm256_unpackhi_pd(a, b));
        let rows: [__m128d; 4] = [
            f._mm256_castpd256_pd128(even),
            f._mm256_castpd256_pd128(odd),
            f._mm256_extractf128_pd::<1>(even),
            f._mm256_extractf128_pd::<1>(odd),
        ];
        for (&row, &g) in rows.iter().zip(g4) {
            let term = if SQUARE {
                let Some(c) = centres.get(g) else { continue };
                let dev = f2._mm_sub_pd(row, pulp::cast([c[0], c[1]]));
                f2._mm_mul_pd(dev, dev)
            } else {
                row
            };
            let Some(slots) = sums.get_mut(g) else {
                continue;
            };
            let sum: __m128d = pulp::cast([slots[0], slots[1]]);
            let sum: [f64; 2] = pulp::cast(f2._mm_add_pd(sum, term));
            slots[..2].copy_from_slice(&sum);
        }
    }
    whole
}

/// Four rows of two columns, each as (x, y, x, y): two unpacks put rows 0 and 2 in one
/// vector's halves and 1 and 3 in the other's, and one permute doubles each row.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn doubled_rows(
    simd: pulp::x86::V3,
    x4: &[f64; 4],
    y4: &[f64; 4],
) -> [std::arch::x86_64::__m256d; 4] {
    use std::arch::x86_64::__m256d;
    let f = simd.avx;
    let (a, b): (__m256d, __m256d) = (pulp::cast(*x4), pulp::cast(*y4));
    let (even, odd) = (f._mm256_unpacklo_pd(a, b), f._mm256_unpackhi_pd(a, b));
    [
        simd.avx2._mm256_permute4x64_pd::<0b01_00_01_00>(even),
        simd.avx2._mm256_permute4x64_pd::<0b01_00_01_00>(odd),
        simd.avx2._mm256_permute4x64_pd::<0b11_10_11_10>(even),
        simd.avx2._mm256_permute4x64_pd::<0b11_10_11_10>(odd),
    ]
}

/// The rows of a [`by_rows_pairs`] pass from `whole` on, one at a time (the same additions).
#[inline(always)]
fn by_rows_rest<const SQUARE: bool, const CROSS: bool>(
    columns: &[&[f64]],
    groups: &[usize],
    whole: usize,
    acc: &mut [f64],
    centre: &[f64],
) {
    if CROSS {
        let (sums, _) = acc.as_chunks_mut::<8>();
        let (centres, _) = centre.as_chunks::<8>();
        for (i, &g) in groups.iter().enumerate().skip(whole) {
            let (Some(c), Some(slots)) = (centres.get(g), sums.get_mut(g)) else {
                continue;
            };
            let e = [columns[0][i] - c[0], columns[1][i] - c[1]];
            let term = [e[0] * e[0], e[1] * e[1], e[0] * e[1], e[1] * e[0]];
            for (s, t) in slots.iter_mut().zip(term) {
                *s += t;
            }
        }
        return;
    }
    by_rows_tail::<SQUARE>(columns, groups, whole, acc, centre);
}

/// The rows of a by-rows pass from `whole` on, one value at a time (the same additions).
#[inline(always)]
fn by_rows_tail<const SQUARE: bool>(
    columns: &[&[f64]],
    groups: &[usize],
    whole: usize,
    acc: &mut [f64],
    centre: &[f64],
) {
    let k = acc.len() / 8;
    for (i, &g) in groups.iter().enumerate().skip(whole) {
        if g < k {
            for (c, col) in columns.iter().enumerate() {
                let term = if SQUARE {
                    let dev = col[i] - centre[g * 8 + c];
                    dev * dev
                } else {
                    col[i]
                };
                acc[g * 8 + c] += term;
            }
        }
    }
}

/// One pass of [`grouped_moments_by_rows`] over up to eight `columns` (each at least as long
/// as `groups`): group g's sums of each column (`SQUARE`: of its squared deviations from
/// `centre[g · 8 + c]`) into `acc[g · 8 + c]`, overwritten. The lines of `next` (the next
/// block's columns, or the next chunk's with its labels) are asked for from memory as the same
/// rows pass, one per column per eight rows, so that their read overlaps this pass's
/// arithmetic.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn by_rows_v4<const SQUARE: bool>(
    simd: pulp::x86::V4,
    columns: &[&[f64]],
    groups: &[usize],
    acc: &mut [f64],
    centre: &[f64],
    next: RowsAhead<'_>,
) {
    use std::arch::x86_64::__m512d;
    let (n, k) = (groups.len(), acc.len() / 8);
    acc.fill(0.0);
    let f = simd.avx512f;
    let zero = f._mm512_setzero_pd();
    let (accs, _) = pulp::x86::V4::as_mut_simd_f64s(acc);
    let centres = pulp::x86::V4::as_simd_f64s(centre).0;
    let whole = n / 8 * 8;
    for i0 in (0..whole).step_by(8) {
        next.ask(i0);
        let cols: [__m512d; 8] = std::array::from_fn(|c| match columns.get(c) {
            Some(col) => {
                let v: [f64; 8] = col[i0..i0 + 8].try_into().unwrap_or_default();
                pulp::cast(v)
            }
            None => zero,
        });
        let rows = crate::block::transpose8_v4(simd, cols);
        for (t, &row) in rows.iter().enumerate() {
            let g = groups[i0 + t];
            if g < k {
                let term = if SQUARE {
                    let dev = f._mm512_sub_pd(row, pulp::cast(centres[g]));
                    f._mm512_mul_pd(dev, dev)
                } else {
                    row
                };
                // In two halves of four sums: see `add_in_halves`.
                add_in_halves(simd, &mut accs[g], term);
            }
        }
    }
    by_rows_tail::<SQUARE>(columns, groups, whole, acc, centre);
}

/// `acc += term` as two 256-bit halves, each loaded, added and stored alone (the same
/// additions, so the same bits). Why: a group's sums are loaded again a few rows after they
/// were stored, and on the Zen 5 EPYC the 512-bit load of a 512-bit store still in flight
/// waited: `perf` put most of `by_rows_v4`'s samples on the accumulators' stores. In cache
/// (`PROFILE_N=65536`, medians of 61, three alternated pairs): Gaussian NB fit d = 16, K = 10
/// 0.292–0.300 → 0.239–0.255 ms, d = 64, K = 10 1.07–1.13 → 0.85–0.90 ms; LDA fit d = 16,
/// K = 10 0.342–0.350 → 0.300–0.312 ms; multinomial NB 0.169–0.194 → 0.154–0.176 ms. From
/// memory (n = 10⁶) within this host's noise.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn add_in_halves(simd: pulp::x86::V4, acc: &mut pulp::f64x8, term: std::arch::x86_64::__m512d) {
    use std::arch::x86_64::__m256d;
    let [lo, hi]: [__m256d; 2] = pulp::cast(term);
    let sums: &mut [[f64; 4]; 2] = pulp::bytemuck::cast_mut(acc);
    let add = |sum: &mut [f64; 4], t: __m256d| {
        *sum = pulp::cast(simd.avx._mm256_add_pd(pulp::cast(*sum), t));
    };
    add(&mut sums[0], lo);
    add(&mut sums[1], hi);
}

/// As [`grouped_sums`], of the squared deviations from each group's centre: adds to
/// `sums[(g, j)]` the sum of (x_ij − `centers[(g, j)]`)² over the rows of group g, each square
/// taken as (x − c) · (x − c) (no fused multiply-add): the diagonal scatter of a labeled fit.
pub fn grouped_sums_sq(
    x: MatRef<'_, f64>,
    groups: &[usize],
    centers: MatRef<'_, f64>,
    sums: MatMut<'_, f64>,
) {
    debug_assert_eq!(centers.nrows(), sums.nrows());
    debug_assert_eq!(centers.ncols(), x.ncols());
    pulp::Arch::new().dispatch(Grouped {
        centers: Some(centers),
        ..Grouped::sums(x, groups, sums)
    });
}

/// [`grouped_sums`] and [`grouped_sums_sq`] at the group means in one sweep: writes to
/// `sums[(g, j)]` group g's sum of column j and to `squares[(g, j)]` the sum of its squared
/// deviations from the mean `sums[(g, j)] / counts[g]` (0 for an empty group). Each column's
/// squares are taken right after its sums, while the column is still in L1, rather than in a
/// second pass over the whole block from L2. The bits are those of `grouped_sums` into a zeroed
/// `sums`, then `grouped_sums_sq` at those means. `counts[g]` must be group g's number of rows.
/// The squares' passes ask for `ahead` from memory, a share each ([`RowsAhead::share`]).
/// Returns whether any value is below zero, as [`grouped_sums`].
pub fn grouped_sums_and_squares(
    x: MatRef<'_, f64>,
    groups: &[usize],
    counts: &[usize],
    sums: MatMut<'_, f64>,
    squares: MatMut<'_, f64>,
    ahead: RowsAhead<'_>,
) -> bool {
    debug_assert_eq!(counts.len(), sums.nrows());
    debug_assert_eq!(squares.nrows(), sums.nrows());
    debug_assert_eq!(squares.ncols(), x.ncols());
    pulp::Arch::new().dispatch(Grouped {
        squares: Some((counts, squares)),
        ahead,
        ..Grouped::sums(x, groups, sums)
    })
}

/// As [`grouped_sums_sq`], of the products of deviations of every pair of columns: adds to
/// `sums[(g, p)]` the sum of (x_ij − c_gj) · (x_ik − c_gk) over the rows of group g, where
/// c = `centers` and p = j(j + 1)/2 + k numbers the pairs k ≤ j (the lower triangle, row by
/// row; `sums` has d(d + 1)/2 columns). The diagonal pairs are [`grouped_sums_sq`]'s values,
/// to the bit: a labeled fit's full scatter per class, centred at exact class means, without
/// copying any class's rows out. It costs K · d(d + 1)/2 masked products per row, so it is for
/// few features and few classes. Its passes (over columns already read) ask for `ahead` from
/// memory, a share each.
pub fn grouped_cross_products(
    x: MatRef<'_, f64>,
    groups: &[usize],
    centers: MatRef<'_, f64>,
    sums: MatMut<'_, f64>,
    ahead: RowsAhead<'_>,
) {
    cross_products(x, groups, centers, sums, ahead, None);
}

/// [`grouped_cross_products`] of `masks`' labels, with the masks kept there (built here if no
/// pass has built them yet); the same bits.
pub fn grouped_cross_products_keeping(
    x: MatRef<'_, f64>,
    masks: &mut KeptMasks<'_>,
    centers: MatRef<'_, f64>,
    sums: MatMut<'_, f64>,
    ahead: RowsAhead<'_>,
) {
    let groups = masks.groups;
    let kept = masks.for_groups(sums.nrows());
    cross_products(x, groups, centers, sums, ahead, kept);
}

/// [`grouped_cross_products`], with masks kept from an earlier pass or for a later one.
fn cross_products(
    x: MatRef<'_, f64>,
    groups: &[usize],
    centers: MatRef<'_, f64>,
    sums: MatMut<'_, f64>,
    ahead: RowsAhead<'_>,
    kept: Option<&mut Vec<u8>>,
) {
    debug_assert_eq!(centers.nrows(), sums.nrows());
    debug_assert_eq!(centers.ncols(), x.ncols());
    debug_assert_eq!(sums.ncols(), x.ncols() * (x.ncols() + 1) / 2);
    pulp::Arch::new().dispatch(Grouped {
        centers: Some(centers),
        cross: true,
        ahead,
        kept,
        ..Grouped::sums(x, groups, sums)
    });
}

/// What one output column of [`grouped_with`] sums over a group's rows.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Term {
    /// x
    Value,
    /// (x − c)²
    Square,
    /// (x − c)(y − e), for two columns
    Product,
}

/// The arguments of [`grouped_sums`] (no centres), [`grouped_sums_sq`],
/// [`grouped_cross_products`] (`cross`) and [`grouped_sums_and_squares`] (`squares`).
struct Grouped<'a> {
    x: MatRef<'a, f64>,
    groups: &'a [usize],
    centers: Option<MatRef<'a, f64>>,
    cross: bool,
    sums: MatMut<'a, f64>,
    /// With sums only: each group's row count and the output for each column's squared
    /// deviations from its group means, taken right after the column's sums
    /// ([`grouped_sums_and_squares`]).
    squares: Option<(&'a [usize], MatMut<'a, f64>)>,
    /// With sums only: called after each column j's sums are added, with j, the column (as
    /// read, contiguous) and the column's sums so far (one per group), while it is in cache
    /// ([`grouped_sums_each_column`]).
    after_column: Option<&'a mut AfterColumn<'a>>,
    /// Each group's number of rows, written (every value replaced) from the masks the sums
    /// use where it can be ([`grouped_sums_and_counts`]).
    counts: Option<&'a mut [usize]>,
    /// What the passes over columns already read (squares, products) ask for from memory, a
    /// share each ([`RowsAhead::share`]).
    ahead: RowsAhead<'a>,
    /// Byte masks of `groups` kept from an earlier pass (used if they are of this pass's size),
    /// or where this pass keeps those it builds ([`KeptMasks`]).
    kept: Option<&'a mut Vec<u8>>,
}

impl<'a> Grouped<'a> {
    /// The arguments of plain sums ([`grouped_sums`]); each other kernel sets its own fields.
    fn sums(x: MatRef<'a, f64>, groups: &'a [usize], sums: MatMut<'a, f64>) -> Self {
        Grouped {
            x,
            groups,
            centers: None,
            cross: false,
            sums,
            squares: None,
            after_column: None,
            counts: None,
            ahead: RowsAhead::NONE,
            kept: None,
        }
    }
}

impl pulp::WithSimd for Grouped<'_> {
    type Output = bool;
    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) -> bool {
        match S::F64_LANES {
            8 => grouped_with::<S, 2>(simd, self),
            4 => grouped_with::<S, 4>(simd, self),
            2 => grouped_with::<S, 8>(simd, self),
            _ => grouped_with::<pulp::Scalar, 16>(pulp::Scalar::new(), self),
        }
    }
}

/// [`grouped_sums`] and the other kernels of [`Grouped`] with `A` vectors of
/// `S::F64_LANES` lanes per group holding its 16 partial sums (vector a, lane l: partial sum
/// a · lanes + l).
#[inline(always)]
fn grouped_with<S: Simd, const A: usize>(simd: S, args: Grouped<'_>) -> bool {
    let Grouped {
        x,
        groups,
        centers,
        cross,
        mut sums,
        mut squares,
        mut after_column,
        counts,
        ahead: read_next,
        kept,
    } = args;
    debug_assert_eq!(A * S::F64_LANES, GROUP_PARTIAL_SUMS);
    debug_assert_eq!(groups.len(), x.nrows());
    let n = x.nrows().min(groups.len());
    let k = sums.nrows();
    let d = x.ncols();
    let whole = n - n % GROUP_PARTIAL_SUMS;
    let term = match (centers.is_some(), cross) {
        (false, _) => Term::Value,
        (true, false) => Term::Square,
        (true, true) => Term::Product,
    };
    // One mask per group and vector of rows, group-major: the lanes of that vector in the group.
    let vectors = whole / S::F64_LANES;
    let mut mask_bytes = Vec::new();
    let mut masks_built = Vec::new();
    // Masks kept from a pass over the same labels and groups are of this pass's size exactly
    // when they cover the same rows.
    let store = kept.unwrap_or(&mut mask_bytes);
    let bytes = match S::F64_LANES {
        8 if !store.is_empty() && store.len() == k * vectors => Some(&store[..]),
        8 => byte_masks(&groups[..whole], k, store),
        _ => None,
    };
    let masks: &[S::m64s] =
        match bytes.and_then(|bytes| pulp::bytemuck::checked::try_cast_slice(bytes).ok()) {
            Some(masks) => masks,
            None => {
                let ids = labels_as_u64(&groups[..whole]);
                let (id_vectors, _) = S::as_simd_u64s(&ids);
                masks_built.reserve(k * vectors);
                for g in 0..k {
                    let gv = simd.splat_u64s(g as u64);
                    masks_built.extend(id_vectors.iter().map(|&v| simd.equal_u64s(v, gv)));
                }
                &masks_built
            }
        };
    if let Some(counts) = counts {
        match bytes {
            Some(bytes) if counts.len() == k => {
                counts_from_masks(bytes, vectors, &groups[whole..n], counts);
            }
            _ => group_counts_into(&groups[..n], counts),
        }
    }
    // Groups per pass over a column: with 32 AVX-512 registers, up to 20 vector accumulators
    // live at once for sums and counts (whose term is the same for every group), 16 for
    // squares (which also hold a centre per group), 8 for products (two centres per group);
    // with 16 registers, half as many, but for sums: 5 groups (20 accumulators, some of them
    // spilled) took a multinomial NB fit at d = 64, K = 10 from 0.0544 to 0.0473 s on an AVX2
    // host (AMD EPYC, Zen 3), where 3 gave 0.0512 s and 10 0.0703 s. Each group's sum runs in
    // the same order whatever pass it is in, so the grouping never changes a result.
    let per_pass = match (A == 2, term) {
        (true, Term::Value) => MAX_GROUPS_PER_PASS,
        (true, Term::Square) => 8,
        (true, Term::Product) => 4,
        (false, Term::Value) => 5,
        (false, Term::Product) => (4 / A).max(1),
        (false, _) => (8 / A).max(1),
    };
    // The output columns: (j, k) with its pair number, one per column j, or one per pair k ≤ j.
    let outputs = (0..d).flat_map(|j| {
        let first = if term == Term::Product { 0 } else { j };
        (first..=j).map(move |c| (j, c))
    });
    let passes = if term == Term::Product {
        d * (d + 1) / 2
    } else {
        d
    };
    let mut scratch = Vec::new();
    let mut scratch_y = Vec::new();
    let mut current = Vec::new();
    let shape = Shape {
        groups: &groups[..n],
        whole,
        masks,
        vectors,
        per_pass,
    };
    // Each group's totals, the rows after the whole runs, and the centres in the two columns:
    // on the stack for up to 16 groups (an allocation each per call showed in a fit at d = 2,
    // which calls this twice per chunk).
    let mut room = crate::block::SmallBuffer::default();
    let small = room.zeros(4 * k);
    let (totals, small) = small.split_at_mut(k);
    let (rest, small) = small.split_at_mut(k);
    let (centers_x, centers_y) = small.split_at_mut(k);
    let mut negative = false;
    // Two columns' products: the three outputs in one pass over both ([`pair_products`]).
    if let Some(centers) = centers
        && term == Term::Product
        && d == 2
        && A == 2
        && S::REGISTER_COUNT >= 32
    {
        let x0 = crate::block::column(x, 0, &mut scratch);
        let x1 = crate::block::column(x, 1, &mut scratch_y);
        pair_product_totals::<S, A>(simd, (x0, x1), read_next, &shape, centers, sums);
        return negative;
    }
    // Sums and counts are a chunk's first read. Their columns are read from memory four at a
    // time before they are summed ([`touch_columns`]); with many groups, where a column's sums
    // take about as long as its read, only the first four are, and each later column is asked
    // for while the one four before it is summed ([`READ_AHEAD_MIN_GROUPS`]).
    let first_read = term == Term::Value;
    let read_ahead = first_read && k >= READ_AHEAD_MIN_GROUPS;
    // With up to 3 groups (AVX-512), the first read of four columns is their sums, all four
    // read together ([`group_pass_columns`]) instead of touched first and then summed one by
    // one from L2; `read_together[c]` holds column j + c's totals over the whole runs.
    let together = first_read
        && S::REGISTER_COUNT >= 32
        && A == 2
        && whole > 0
        && k <= READ_TOGETHER_MAX_GROUPS;
    let mut read_together = [[0.0; MAX_GROUPS_PER_PASS]; TOUCHED_COLUMNS];
    let mut have_read_together = false;
    for (p, (j, jy)) in outputs.enumerate() {
        if together && j % TOUCHED_COLUMNS == 0 {
            let last = (j + TOUCHED_COLUMNS).min(d);
            let columns = crate::block::contiguous_columns(x, j..last);
            have_read_together = columns.is_some();
            if let Some(columns) = columns {
                // The chunk's first read asks for its own rows further on, unless the last
                // chunk's passes asked for this chunk (they do when this one's ask for the
                // next: `read_next`).
                let ahead = match read_next.is_empty() {
                    true => RowsAhead::further_on(&columns, &[]),
                    false => RowsAhead::NONE,
                };
                negative |= sums_read_together_for::<S, A>(
                    simd,
                    k,
                    (&columns, ahead),
                    &shape,
                    &mut read_together,
                );
            }
        }
        let summed = have_read_together.then(|| &read_together[j % TOUCHED_COLUMNS][..k]);
        if first_read && summed.is_none() && j % TOUCHED_COLUMNS == 0 && (j == 0 || !read_ahead) {
            touch_columns(x, j, n);
        }
        // A first read asks for the column four on (with many groups); a pass over columns
        // already read, for its share of what is read next (after this block).
        let column_ahead = match read_ahead && j + TOUCHED_COLUMNS < d {
            true => x.col(j + TOUCHED_COLUMNS).try_as_col_major(),
            false => None,
        }
        .map(|c| [&c.as_slice()[..n]]);
        let ahead = match &column_ahead {
            Some(column) => RowsAhead::new(column, &[]),
            None if first_read => RowsAhead::NONE,
            None => read_next.share(p, passes),
        };
        let col = crate::block::column(x, j, &mut scratch);
        let col_y = if term == Term::Product {
            crate::block::column(x, jy, &mut scratch_y)
        } else {
            col
        };
        if let Some(c) = centers {
            for g in 0..k {
                centers_x[g] = c[(g, j)];
                centers_y[g] = c[(g, jy)];
            }
        }
        negative |= column_totals::<S, A>(
            simd,
            term,
            (col, col_y),
            ahead,
            &shape,
            (&*centers_x, &*centers_y),
            summed,
            (&mut *totals, &mut *rest),
        );
        match &mut squares {
            None => {
                for g in 0..k {
                    sums[(g, p)] += totals[g];
                }
            }
            Some((counts, squares)) => {
                // `0.0 +` gives the bits of adding to a zeroed output (a sum of -0.0 becomes
                // 0.0), so the means are those of `grouped_sums` into zeros.
                for g in 0..k {
                    let sum = 0.0 + totals[g];
                    sums[(g, p)] = sum;
                    centers_x[g] = match counts[g] {
                        0 => 0.0,
                        c => sum / c as f64,
                    };
                }
                column_totals::<S, A>(
                    simd,
                    Term::Square,
                    (col, col),
                    read_next.share(p, passes),
                    &shape,
                    (&*centers_x, &*centers_y),
                    None,
                    (&mut *totals, &mut *rest),
                );
                for g in 0..k {
                    squares[(g, p)] = 0.0 + totals[g];
                }
            }
        }
        if let Some(after) = after_column.as_mut() {
            current.clear();
            current.extend((0..k).map(|g| sums[(g, p)]));
            after(j, &col[..n], &current);
        }
    }
    negative
}

/// What [`column_totals`] needs of a block besides its column: each row's group (the rows it
/// sums), the rows in whole runs of 16, the group masks (group-major, `vectors` per group) and
/// how many groups one pass over the column takes.
struct Shape<'a, M> {
    groups: &'a [usize],
    whole: usize,
    masks: &'a [M],
    vectors: usize,
    per_pass: usize,
}

/// Each group's total of `term` over one column (two for a product), into `totals`: the
/// 16 partial sums of its whole runs of 16 rows combined in a fixed tree (or `whole_runs`, those
/// totals already taken, by [`group_pass_columns`]), then the rows after the last whole 16, in
/// order (summed in `rest`, k long). Returns whether a value is below zero (sums) or not finite
/// (counts above); with `whole_runs`, of the rows after the whole runs only.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn column_totals<S: Simd, const A: usize>(
    simd: S,
    term: Term,
    (col, col_y): (&[f64], &[f64]),
    ahead: RowsAhead<'_>,
    shape: &Shape<'_, S::m64s>,
    (centers_x, centers_y): (&[f64], &[f64]),
    whole_runs: Option<&[f64]>,
    (totals, rest): (&mut [f64], &mut [f64]),
) -> bool {
    let k = totals.len();
    let (whole, n, vectors) = (shape.whole, shape.groups.len(), shape.vectors);
    let (xv, _) = S::as_simd_f64s(&col[..whole]);
    let (yv, _) = S::as_simd_f64s(&col_y[..whole]);
    let mut negative = false;
    let mut first = match whole_runs {
        Some(t) => {
            totals.copy_from_slice(t);
            k
        }
        None => 0,
    };
    while first < k {
        let count = (k - first).min(shape.per_pass);
        let masks = &shape.masks[first * vectors..(first + count) * vectors];
        let mut c = [[0.0; MAX_GROUPS_PER_PASS]; 2];
        c[0][..count].copy_from_slice(&centers_x[first..first + count]);
        c[1][..count].copy_from_slice(&centers_y[first..first + count]);
        let mut out = [0.0; MAX_GROUPS_PER_PASS];
        // What is ahead is asked for during the first pass only.
        let columns = (xv, yv, if first == 0 { ahead } else { RowsAhead::NONE });
        negative |= match term {
            Term::Value => group_pass_for::<S, A, 0>(simd, count, columns, masks, &c, &mut out),
            Term::Square => group_pass_for::<S, A, 1>(simd, count, columns, masks, &c, &mut out),
            Term::Product => group_pass_for::<S, A, 2>(simd, count, columns, masks, &c, &mut out),
        };
        totals[first..first + count].copy_from_slice(&out[..count]);
        first += count;
    }
    // The rows after the last whole 16, in order, after the tree.
    rest.fill(0.0);
    for ((&v, &w), &g) in col[whole..n]
        .iter()
        .zip(&col_y[whole..n])
        .zip(&shape.groups[whole..n])
    {
        negative |= match term {
            Term::Value => v < 0.0,
            _ => false,
        };
        if let Some(r) = rest.get_mut(g) {
            *r += match term {
                Term::Value => v,
                Term::Square => (v - centers_x[g]) * (v - centers_x[g]),
                Term::Product => (v - centers_x[g]) * (w - centers_y[g]),
            };
        }
    }
    for (t, r) in totals.iter_mut().zip(rest.iter()) {
        *t += r;
    }
    negative
}

/// Groups from which a sum's column is read (software prefetch, a cache line per vector summed)
/// while the column [`TOUCHED_COLUMNS`] before it is summed, rather than read before its sums.
/// With many groups a column's masked sums take about as long as its read, and the two then
/// overlap: at K = 10, multinomial NB fit d = 16 0.0107 → 0.0094 s, d = 64 0.0389 → 0.0333 s;
/// Bernoulli d = 16 0.0137 → 0.0116 s, d = 64 0.0518 → 0.0412 s; multinomial at K = 4 and 6,
/// 6% and 9% faster. With few groups the sums wait on the read either way, and four columns
/// read together keep more of memory busy: K = 2 was 3–7% slower read ahead, K = 3 even.
/// (Reading ahead in the copy by class order of LDA and QDA fits at K = 10 made them 8–9%
/// slower: that copy is about as quick as the read, and the scatter comes after it.)
const READ_AHEAD_MIN_GROUPS: usize = 4;

/// Columns whose rows [`touch_columns`] reads together.
pub(crate) const TOUCHED_COLUMNS: usize = 4;

/// Most columns that a kernel reading a short block of rows of every column (64 rows, 512 bytes
/// each) may take from memory as it goes: up to this many, the hardware prefetchers kept up on a
/// Zen 4, and a separate read first was a pass too many; above it, Gaussian naive Bayes' log
/// joints read by groups of columns instead, and full-covariance ones (`mahalanobis`) ask for
/// their blocks ahead.
pub const SHORT_RUN_MAX_COLUMNS: usize = 8;

/// Reads one value per cache line of rows `..n` of columns `j .. j + TOUCHED_COLUMNS` of a
/// column-major `x`, the columns side by side, so that the passes over them that follow find
/// them in cache. Why: a pass reads one column run of a chunk (32 KB at 4096 rows), so a core
/// has one stream from memory in flight and the prefetcher starts again at every column; the
/// labeled multinomial fit at d = 64, K = 10 read its input at about 9 GB/s, stalled on the
/// column's loads. With four streams in flight: 0.0572 → 0.0416 s (nineteenth round). For sums
/// and counts, which are a chunk's first read in every labeled fit that uses them (since the
/// twentieth round the Gaussian ones check the values through their sums, with no scan before):
/// at K = 2 it then helps too (Gaussian NB fit at d = 64 0.0431 → 0.0352 s, multinomial 0.0269
/// → 0.0249 s). Not before the squares' pass, which reads a chunk already in cache (0.0435 →
/// 0.0497 s). With many groups, sums read only their first columns this way
/// ([`READ_AHEAD_MIN_GROUPS`]). The value read is discarded; `black_box` keeps the loads.
pub(crate) fn touch_columns(x: MatRef<'_, f64>, j: usize, n: usize) {
    let last = (j + TOUCHED_COLUMNS).min(x.ncols());
    if let Some(columns) = crate::block::contiguous_columns(x, j..last) {
        touch(&columns, n);
    }
}

/// [`touch_columns`] on up to [`TOUCHED_COLUMNS`] columns already taken as slices (any past
/// that are left alone), rows `..n` of each.
pub(crate) fn touch(columns: &[&[f64]], n: usize) {
    match *columns {
        [] => {}
        [a] => touch_together([a], n),
        [a, b] => touch_together([a, b], n),
        [a, b, c] => touch_together([a, b, c], n),
        [a, b, c, d, ..] => touch_together([a, b, c, d], n),
    }
}

/// [`touch`] for `W` columns. One running sum per column and row of a line in 4, so that the
/// additions do not chain: with one sum, each line's addition waited for the last (4 cycles),
/// which bound the touch when the chunk was already in cache (12% of an LDA fit at d = 2,
/// K = 2). The width is fixed and four lines go at a time, so the sums stay in registers:
/// chosen by a rotating index (`r % 4`) over a run-time number of columns, they lived on the
/// stack, each addition a load and a store, and the columns' slices were reloaded and
/// bounds-checked for every line (QDA fit at d = 16, K = 2, medians of 21, 3 alternated pairs:
/// 6.5, 6.3, 6.4 → 6.0, 6.1, 6.0 ms).
#[inline(always)]
fn touch_together<const W: usize>(columns: [&[f64]; W], n: usize) {
    let n = columns.iter().fold(n, |n, c| n.min(c.len()));
    let columns = columns.map(|c| &c[..n]);
    let mut touched = [[0.0; W]; 4];
    let mut i = 0;
    while i + 24 < n {
        for (u, sums) in touched.iter_mut().enumerate() {
            for (t, c) in sums.iter_mut().zip(columns) {
                *t += c[i + 8 * u];
            }
        }
        i += 32;
    }
    for i in (i..n).step_by(8) {
        for (t, c) in touched[0].iter_mut().zip(columns) {
            *t += c[i];
        }
    }
    std::hint::black_box(touched);
}

/// Most groups one pass over a column sums ([`group_pass_for`]).
const MAX_GROUPS_PER_PASS: usize = 10;

/// Most groups whose sums make a chunk's first read ([`group_pass_columns`]): four columns of 3
/// groups keep 24 accumulators in registers. Against the touch and then one column at a time
/// (`profile <model>-fit`, `PROFILE_COLD=cs`, medians of 9, 3 alternated pairs): LDA d = 16,
/// K = 3 0.0139, 0.0136, 0.0131 → 0.0113, 0.0111, 0.0137 s; two columns at a time at K = 4–6
/// bought little or nothing (LDA d = 16, K = 4 0.0134, 0.0125, 0.0130 → 0.0127, 0.0118,
/// 0.0126 s; K = 6 even; multinomial NB d = 16, K = 4 0.0072, 0.0077, 0.0076 → 0.0079, 0.0077,
/// 0.0077 s), and was left out.
const READ_TOGETHER_MAX_GROUPS: usize = 3;

/// [`group_pass_columns`] for `k` (1 to [`READ_TOGETHER_MAX_GROUPS`]) groups and 1 to
/// [`TOUCHED_COLUMNS`] columns, each column's totals over the whole runs into `out[c][..k]`.
/// Returns whether a value is below zero.
#[inline(always)]
fn sums_read_together_for<S: Simd, const A: usize>(
    simd: S,
    k: usize,
    (columns, ahead): (&[&[f64]], RowsAhead<'_>),
    shape: &Shape<'_, S::m64s>,
    out: &mut [[f64; MAX_GROUPS_PER_PASS]; TOUCHED_COLUMNS],
) -> bool {
    let whole = shape.whole;
    let masks = &shape.masks[..k * shape.vectors];
    let mut v: [&[S::f64s]; TOUCHED_COLUMNS] = [&[]; TOUCHED_COLUMNS];
    for (v, c) in v.iter_mut().zip(columns) {
        *v = S::as_simd_f64s(&c[..whole]).0;
    }
    let v = &v[..columns.len().min(TOUCHED_COLUMNS)];
    match k {
        1 => group_pass_columns_for::<S, A, 1>(simd, (v, ahead), masks, out),
        2 => group_pass_columns_for::<S, A, 2>(simd, (v, ahead), masks, out),
        _ => group_pass_columns_for::<S, A, 3>(simd, (v, ahead), masks, out),
    }
}

/// [`group_pass_columns`] for `G` groups and 1 to 4 columns.
#[inline(always)]
fn group_pass_columns_for<S: Simd, const A: usize, const G: usize>(
    simd: S,
    (v, ahead): (&[&[S::f64s]], RowsAhead<'_>),
    masks: &[S::m64s],
    out: &mut [[f64; MAX_GROUPS_PER_PASS]; TOUCHED_COLUMNS],
) -> bool {
    match v.len() {
        1 => group_pass_columns::<S, A, G, 1>(simd, ([v[0]], ahead), masks, out),
        2 => group_pass_columns::<S, A, G, 2>(simd, ([v[0], v[1]], ahead), masks, out),
        3 => group_pass_columns::<S, A, G, 3>(simd, ([v[0], v[1], v[2]], ahead), masks, out),
        _ => group_pass_columns::<S, A, G, 4>(simd, ([v[0], v[1], v[2], v[3]], ahead), masks, out),
    }
}

/// [`group_pass`]'s sums (`TERM` 0) of `C` columns in one pass over all of them: a chunk's
/// first read, with `C` streams from memory in flight, as [`touch_columns`] has, and the
/// sums taken as the lines arrive rather than from L2 afterwards. Each column's group sums
/// run in [`group_pass`]'s order (vector a of each run of `A` into accumulator a, the same
/// tree), so they have its bits. `C · G · A` accumulators stay in registers (24 at most).
/// The lines of `ahead` are asked for as the rows pass, one per eight rows (the columns' own
/// rows further on, [`RowsAhead::further_on`]: `profile gnb-fit`, `PROFILE_COLD=cs`, medians of 21,
/// two alternated pairs on the Intel Xeon: d = 16, K = 2 7.12, 7.05 → 6.57, 6.63 ms; d = 64,
/// K = 2 26.3, 26.5 → 24.2, 24.2 ms; `lda-fit 16 2` 9.63, 9.61 → 8.94, 9.21 ms).
#[inline(always)]
fn group_pass_columns<S: Simd, const A: usize, const G: usize, const C: usize>(
    simd: S,
    (columns, ahead): ([&[S::f64s]; C], RowsAhead<'_>),
    masks: &[S::m64s],
    out: &mut [[f64; MAX_GROUPS_PER_PASS]; TOUCHED_COLUMNS],
) -> bool {
    let zero = simd.splat_f64s(0.0);
    let vectors = columns[0].len();
    let by_group: [&[S::m64s]; G] = std::array::from_fn(|g| &masks[g * vectors..][..vectors]);
    let mut runs: [_; C] = std::array::from_fn(|c| columns[c][..vectors].chunks_exact(A));
    let mut acc = [[[zero; A]; G]; C];
    let mut negative = simd.less_than_f64s(zero, zero);
    let run_rows = A * S::F64_LANES;
    for b in 0..vectors / A {
        for row in (b * run_rows..(b + 1) * run_rows).step_by(8) {
            ahead.ask(row);
        }
        let mb: [&[S::m64s]; G] = std::array::from_fn(|g| &by_group[g][b * A..][..A]);
        for (c, run) in runs.iter_mut().enumerate() {
            let Some(xb) = run.next() else {
                break;
            };
            for a in 0..A {
                let v = xb[a];
                negative = simd.or_m64s(negative, simd.less_than_f64s(v, zero));
                for g in 0..G {
                    // A masked addition, as in `group_pass`.
                    let sum = simd.add_f64s(acc[c][g][a], v);
                    acc[c][g][a] = simd.select_f64s(mb[g][a], sum, acc[c][g][a]);
                }
            }
        }
    }
    for c in 0..C {
        for g in 0..G {
            out[c][g] = fold_accumulators::<S, A>(&acc[c][g]);
        }
    }
    simd.first_true_m64s(negative) < S::F64_LANES
}

/// The three products of two columns' deviations from each group's centre (`centers`, k × 2),
/// pairs (0, 0), (1, 0) and (1, 1), added to `sums` (k × 3) as [`column_totals`] adds each
/// pair's: the whole runs by [`pair_products`], asking for `ahead` during the first pass only,
/// then the rows after them, in order, after the tree.
#[inline(always)]
fn pair_product_totals<S: Simd, const A: usize>(
    simd: S,
    (x0, x1): (&[f64], &[f64]),
    ahead: RowsAhead<'_>,
    shape: &Shape<'_, S::m64s>,
    centers: MatRef<'_, f64>,
    mut sums: MatMut<'_, f64>,
) {
    let (k, whole, n, vectors) = (sums.nrows(), shape.whole, shape.groups.len(), shape.vectors);
    let (xv, _) = S::as_simd_f64s(&x0[..whole]);
    let (yv, _) = S::as_simd_f64s(&x1[..whole]);
    let mut first = 0;
    while first < k {
        let count = (k - first).min(PAIR_PRODUCTS_GROUPS_PER_PASS);
        let mut c = [[0.0; PAIR_PRODUCTS_GROUPS_PER_PASS]; 2];
        for (g, group) in (first..first + count).enumerate() {
            c[0][g] = centers[(group, 0)];
            c[1][g] = centers[(group, 1)];
        }
        let ahead = if first == 0 { ahead } else { RowsAhead::NONE };
        let masks = &shape.masks[first * vectors..(first + count) * vectors];
        let mut out = [[0.0; 3]; PAIR_PRODUCTS_GROUPS_PER_PASS];
        pair_products_for::<S, A>(simd, count, (xv, yv, ahead), masks, &c, &mut out);
        for (g, group) in (first..first + count).enumerate() {
            let (cx, cy) = (c[0][g], c[1][g]);
            let mut rest = [0.0; 3];
            let tail = x0[whole..n]
                .iter()
                .zip(&x1[whole..n])
                .zip(&shape.groups[whole..n]);
            for ((&v, &w), _) in tail.filter(|(_, l)| **l == group) {
                let (dx, dy) = (v - cx, w - cy);
                rest[0] += dx * dx;
                rest[1] += dy * dx;
                rest[2] += dy * dy;
            }
            for p in 0..3 {
                sums[(group, p)] += out[g][p] + rest[p];
            }
        }
        first += count;
    }
}

/// A group's `A` accumulators (vector a, lane l: partial sum a · lanes + l) combined in the
/// fixed tree of [`fold_pairwise`].
#[inline(always)]
fn fold_accumulators<S: Simd, const A: usize>(acc: &[S::f64s; A]) -> f64 {
    let mut partial = [0.0f64; GROUP_PARTIAL_SUMS];
    let (pv, _) = S::as_mut_simd_f64s(&mut partial);
    pv[..A].copy_from_slice(acc);
    fold_pairwise(&mut partial)
}

/// Groups per pass of [`pair_products`]: 2 · 3 · 2 = 12 accumulators and 4 centres in
/// registers.
const PAIR_PRODUCTS_GROUPS_PER_PASS: usize = 2;

/// [`pair_products`] for `count` (1 or 2) groups.
#[inline(always)]
fn pair_products_for<S: Simd, const A: usize>(
    simd: S,
    count: usize,
    columns: (&[S::f64s], &[S::f64s], RowsAhead<'_>),
    masks: &[S::m64s],
    centers: &[[f64; PAIR_PRODUCTS_GROUPS_PER_PASS]; 2],
    out: &mut [[f64; 3]; PAIR_PRODUCTS_GROUPS_PER_PASS],
) {
    match count {
        1 => pair_products::<S, A, 1>(simd, columns, masks, centers, out),
        _ => pair_products::<S, A, 2>(simd, columns, masks, centers, out),
    }
}

/// The three products of two columns' deviations, (x − c)², (y − e)(x − c) and (y − e)², of
/// `G` groups in one pass over both columns (the pairs (0, 0), (1, 0) and (1, 1) of
/// [`grouped_cross_products`] at d = 2), into `out[g]`. Each product is summed as
/// [`group_pass`] sums it (the same terms, accumulators and tree), so it has the bits of a pass
/// of its own; the deviations are taken once for all three, and both columns are read once,
/// not four times in three passes. Why: those passes were most of a labeled fit's time at
/// d = 2, K = 2 (`profile lda-fit 2 2` from memory 1.70 ms, 1.15 ms without them).
#[inline(always)]
fn pair_products<S: Simd, const A: usize, const G: usize>(
    simd: S,
    (xv, yv, ahead): (&[S::f64s], &[S::f64s], RowsAhead<'_>),
    masks: &[S::m64s],
    centers: &[[f64; PAIR_PRODUCTS_GROUPS_PER_PASS]; 2],
    out: &mut [[f64; 3]; PAIR_PRODUCTS_GROUPS_PER_PASS],
) {
    let zero = simd.splat_f64s(0.0);
    let vectors = xv.len().min(yv.len());
    let by_group: [&[S::m64s]; G] = std::array::from_fn(|g| &masks[g * vectors..][..vectors]);
    let cv: [S::f64s; G] = std::array::from_fn(|g| simd.splat_f64s(centers[0][g]));
    let ev: [S::f64s; G] = std::array::from_fn(|g| simd.splat_f64s(centers[1][g]));
    let mut acc = [[[zero; A]; 3]; G];
    for (b, (xb, yb)) in xv.chunks_exact(A).zip(yv.chunks_exact(A)).enumerate() {
        let mb: [&[S::m64s]; G] = std::array::from_fn(|g| &by_group[g][b * A..][..A]);
        for a in 0..A {
            ahead.ask((b * A + a) * S::F64_LANES);
        }
        for a in 0..A {
            for g in 0..G {
                let dx = simd.sub_f64s(xb[a], cv[g]);
                let dy = simd.sub_f64s(yb[a], ev[g]);
                let terms = [
                    simd.mul_f64s(dx, dx),
                    simd.mul_f64s(dy, dx),
                    simd.mul_f64s(dy, dy),
                ];
                for (acc, t) in acc[g].iter_mut().zip(terms) {
                    acc[a] = simd.select_f64s(mb[g][a], simd.add_f64s(acc[a], t), acc[a]);
                }
            }
        }
    }
    for g in 0..G {
        for p in 0..3 {
            out[g][p] = fold_accumulators::<S, A>(&acc[g][p]);
        }
    }
}

/// [`group_pass`] for `count` (1 to [`MAX_GROUPS_PER_PASS`]) groups.
#[inline(always)]
fn group_pass_for<S: Simd, const A: usize, const TERM: u8>(
    simd: S,
    count: usize,
    columns: (&[S::f64s], &[S::f64s], RowsAhead<'_>),
    masks: &[S::m64s],
    centers: &[[f64; MAX_GROUPS_PER_PASS]; 2],
    out: &mut [f64; MAX_GROUPS_PER_PASS],
) -> bool {
    match count {
        1 => group_pass::<S, A, 1, TERM>(simd, columns, masks, centers, out),
        2 => group_pass::<S, A, 2, TERM>(simd, columns, masks, centers, out),
        3 => group_pass::<S, A, 3, TERM>(simd, columns, masks, centers, out),
        4 => group_pass::<S, A, 4, TERM>(simd, columns, masks, centers, out),
        5 => group_pass::<S, A, 5, TERM>(simd, columns, masks, centers, out),
        6 => group_pass::<S, A, 6, TERM>(simd, columns, masks, centers, out),
        7 => group_pass::<S, A, 7, TERM>(simd, columns, masks, centers, out),
        8 => group_pass::<S, A, 8, TERM>(simd, columns, masks, centers, out),
        9 => group_pass::<S, A, 9, TERM>(simd, columns, masks, centers, out),
        _ => group_pass::<S, A, 10, TERM>(simd, columns, masks, centers, out),
    }
}

/// One pass over a column's whole vectors (two columns' for a product) for `G` groups
/// (`masks`: G runs of one mask per vector; `centers[0][..G]`, `centers[1][..G]`: their
/// centres in the two columns): each group's tree-combined sum of `TERM` (0: x, 1: (x − c)²,
/// 2: (x − c)(y − e)) into `out[..G]`. Returns whether a value is below 0 (sums).
#[inline(always)]
fn group_pass<S: Simd, const A: usize, const G: usize, const TERM: u8>(
    simd: S,
    (xv, yv, ahead): (&[S::f64s], &[S::f64s], RowsAhead<'_>),
    masks: &[S::m64s],
    centers: &[[f64; MAX_GROUPS_PER_PASS]; 2],
    out: &mut [f64; MAX_GROUPS_PER_PASS],
) -> bool {
    let zero = simd.splat_f64s(0.0);
    let vectors = xv.len();
    let by_group: [&[S::m64s]; G] = std::array::from_fn(|g| &masks[g * vectors..][..vectors]);
    let cv: [S::f64s; G] = std::array::from_fn(|g| simd.splat_f64s(centers[0][g]));
    let ev: [S::f64s; G] = std::array::from_fn(|g| simd.splat_f64s(centers[1][g]));
    let mut acc = [[zero; A]; G];
    let mut negative = simd.less_than_f64s(zero, zero);
    for (b, (xb, yb)) in xv.chunks_exact(A).zip(yv.chunks_exact(A)).enumerate() {
        let mb: [&[S::m64s]; G] = std::array::from_fn(|g| &by_group[g][b * A..][..A]);
        for a in 0..A {
            ahead.ask((b * A + a) * S::F64_LANES);
        }
        for a in 0..A {
            let v = xb[a];
            if TERM == 0 {
                negative = simd.or_m64s(negative, simd.less_than_f64s(v, zero));
            }
            for g in 0..G {
                let t = match TERM {
                    0 => v,
                    1 => {
                        let delta = simd.sub_f64s(v, cv[g]);
                        simd.mul_f64s(delta, delta)
                    }
                    _ => simd.mul_f64s(simd.sub_f64s(v, cv[g]), simd.sub_f64s(yb[a], ev[g])),
                };
                // A masked addition (one instruction with AVX-512), where adding a select of
                // t or zero was two: a multinomial fit at d = 16, K = 10 took 0.0094, 0.0160,
                // 0.0093 -> 0.0077, 0.0077, 0.0083 s. The same bits: a sum that starts at +0
                // never becomes −0, and adding +0 changes no other value.
                acc[g][a] = simd.select_f64s(mb[g][a], simd.add_f64s(acc[g][a], t), acc[g][a]);
            }
        }
    }
    for g in 0..G {
        out[g] = fold_accumulators::<S, A>(&acc[g]);
    }
    simd.first_true_m64s(negative) < S::F64_LANES
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An independent reference in extended precision: exact products and sums of the rounded
    /// terms via Kahan–Babuška (Neumaier) summation.
    fn reference(w: Option<&[f64]>, x: &[f64], m: f64, square: bool) -> f64 {
        let (mut s, mut c) = (0.0f64, 0.0f64);
        for (i, &xi) in x.iter().enumerate() {
            let wi = w.map_or(1.0, |w| w[i]);
            let t = if square {
                wi * (xi - m) * (xi - m)
            } else {
                wi * xi
            };
            let u = s + t;
            c += if s.abs() >= t.abs() {
                (s - u) + t
            } else {
                (t - u) + s
            };
            s = u;
        }
        s + c
    }

    fn data(n: usize) -> (Vec<f64>, Vec<f64>) {
        let x = (0..n)
            .map(|i| ((i * 7919 % 1009) as f64 - 500.0) * 0.013 + 3.0)
            .collect();
        let w = (0..n).map(|i| ((i * 31 % 97) as f64) / 97.0).collect();
        (x, w)
    }

    #[test]
    fn sums_match_a_compensated_reference_at_every_length() {
        for n in [0, 1, 5, 31, 32, 33, 64, 100, 1000, 4099] {
            let (x, w) = data(n);
            let m = 2.9;
            for wo in [None, Some(w.as_slice())] {
                let got_sum = weighted_sum(pulp::Scalar::new(), wo, &x);
                let got_sq = weighted_sum_sq(pulp::Scalar::new(), wo, &x, m);
                for (got, want) in [
                    (got_sum, reference(wo, &x, 0.0, false)),
                    (got_sq, reference(wo, &x, m, true)),
                ] {
                    let tol = 1e-13 * (1.0 + want.abs());
                    assert!((got - want).abs() <= tol, "n = {n}: {got} vs {want}");
                }
            }
        }
    }

    #[test]
    fn moments_of_selected_rows_are_the_bits_of_those_rows_gathered() {
        for (n, d) in [(1, 1), (40, 3), (700, 5), (4099, 2)] {
            let x = faer::Mat::from_fn(n, d, |i, j| ((i * 37 + j * 11) % 101) as f64 * 0.7 - 9.0);
            let row_major = faer::Mat::from_fn(d, n, |j, i| x[(i, j)]);
            // Every third row but the first two, and the last (unordered).
            let mut rows: Vec<usize> = (2..n).step_by(3).collect();
            rows.insert(0, n - 1);
            let w: Vec<f64> = rows.iter().map(|&i| 0.25 + (i % 7) as f64).collect();
            for weights in [None, Some(w.as_slice())] {
                let total = weights.map_or(rows.len() as f64, |w| w.iter().sum());
                let mut buf = Vec::new();
                let gathered = crate::block::gather_rows(x.as_ref(), &rows, &mut buf);
                let (mut m0, mut s0) = (vec![0.0; d], vec![0.0; d]);
                diagonal_moments(gathered, weights, total, &mut m0, &mut s0);
                for source in [x.as_ref(), row_major.transpose()] {
                    let (mut m1, mut s1) = (vec![7.0; d], vec![7.0; d]);
                    diagonal_moments_of_rows(source, &rows, weights, total, &mut m1, &mut s1);
                    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&m1), bits(&m0), "means, n = {n}, d = {d}");
                    assert_eq!(bits(&s1), bits(&s0), "scatters, n = {n}, d = {d}");
                }
            }
        }
    }

    #[test]
    fn moments_of_every_class_together_are_the_bits_of_one_class_at_a_time() {
        for (n, d, k) in [
            (1, 1, 1),
            (31, 2, 3),
            (32, 3, 2),
            (33, 1, 4),
            (600, 3, 3),
            (1100, 5, 10),
        ] {
            let x = faer::Mat::from_fn(n, d, |i, j| {
                ((i * 7919 + j * 31) % 1009) as f64 * 0.01 - 3.0
            });
            let w: Vec<Vec<f64>> = (0..k)
                .map(|c| {
                    (0..n)
                        .map(|i| ((i * 31 + c * 17) % 97) as f64 / 97.0 + 0.001)
                        .collect()
                })
                .collect();
            let ws: Vec<&[f64]> = w.iter().map(Vec::as_slice).collect();
            let totals: Vec<f64> = ws.iter().map(|w| crate::numerics::sum(w)).collect();
            let (mut means, mut scatters) = (vec![f64::NAN; k * d], vec![f64::NAN; k * d]);
            assert!(diagonal_moments_each(
                x.as_ref(),
                &ws,
                &totals,
                &mut means,
                &mut scatters
            ));
            for c in 0..k {
                let (mut m, mut s) = (vec![0.0; d], vec![0.0; d]);
                diagonal_moments(x.as_ref(), Some(ws[c]), totals[c], &mut m, &mut s);
                for j in 0..d {
                    assert_eq!(
                        means[c * d + j].to_bits(),
                        m[j].to_bits(),
                        "n {n} c {c} j {j}"
                    );
                    assert_eq!(
                        scatters[c * d + j].to_bits(),
                        s[j].to_bits(),
                        "n {n} c {c} j {j}"
                    );
                }
            }
            // Columns that are not contiguous: nothing written, and false.
            let t = x.transpose().to_owned();
            let (mut m2, mut s2) = (vec![7.0; k * d], vec![7.0; k * d]);
            if d > 1 {
                assert!(!diagonal_moments_each(
                    t.transpose(),
                    &ws,
                    &totals,
                    &mut m2,
                    &mut s2
                ));
                assert!(m2.iter().chain(&s2).all(|&v| v == 7.0));
            }
        }
    }

    /// Groups of `n` rows for the by-rows tests: group k - 1 stays empty, and every eleventh
    /// row is outside the groups (k to k + 2).
    fn spread_groups(n: usize, k: usize) -> Vec<usize> {
        (0..n)
            .map(|i| {
                if i % 11 == 5 {
                    k + i % 3
                } else {
                    (i * 13 + i / 7) % (k - 1)
                }
            })
            .collect()
    }

    #[test]
    fn two_pass_pair_moments_are_sums_in_row_order() {
        // Every remainder of eight rows, groups past k skipped, an empty group, and a large
        // offset (the scatter is centred before any product).
        for (n, k) in [(0, 2), (7, 5), (8, 3), (29, 6), (300, 10), (1031, 7)] {
            let x = faer::Mat::from_fn(n, 2, |i, j| {
                ((i * 7919 + j * 31) % 1009) as f64 * 0.37 - 150.0 + 1e6 * (j + 1) as f64
            });
            let groups = spread_groups(n, k);
            let counts = group_counts(&groups, k);
            // The definition, in row order.
            let mut means = vec![0.0f64; k * 2];
            for (i, &g) in groups.iter().enumerate() {
                if g < k {
                    for j in 0..2 {
                        means[g * 2 + j] += x[(i, j)];
                    }
                }
            }
            for (at, m) in means.iter_mut().enumerate() {
                *m = group_mean(*m, counts[at / 2]);
            }
            let mut lower = vec![0.0f64; k * 3];
            for (i, &g) in groups.iter().enumerate() {
                if g < k {
                    let e = [x[(i, 0)] - means[g * 2], x[(i, 1)] - means[g * 2 + 1]];
                    lower[g * 3] += e[0] * e[0];
                    lower[g * 3 + 1] += e[0] * e[1];
                    lower[g * 3 + 2] += e[1] * e[1];
                }
            }
            let bits = |v: &[f64]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            // The squares are the diagonal moments' bits.
            let (mut dm, mut ds) = (vec![0.0; k * 2], vec![0.0; k * 2]);
            let none = RowsAhead::NONE;
            grouped_moments_by_rows(x.as_ref(), &groups, &counts, &mut dm, &mut ds, none);
            let diagonal: Vec<f64> = (0..k)
                .flat_map(|g| [lower[g * 3], lower[g * 3 + 2]])
                .collect();
            assert_eq!(bits(&ds), bits(&diagonal), "squares n {n} k {k}");
            let rows = x.transpose().to_owned();
            for view in [x.as_ref(), rows.transpose()] {
                let (mut m, mut l) = (vec![f64::NAN; k * 2], vec![f64::NAN; k * 3]);
                crate::block::with_some_ahead(n, |ahead| {
                    grouped_pair_moments_two_pass(view, &groups, &counts, &mut m, &mut l, ahead)
                });
                assert_eq!(bits(&m), bits(&means), "means n {n} k {k}");
                assert_eq!(bits(&l), bits(&lower), "scatter n {n} k {k}");
            }
            #[cfg(target_arch = "x86_64")]
            for kernel in ByRows::available() {
                let columns =
                    crate::block::contiguous_columns(x.as_ref(), 0..2).unwrap_or_default();
                let (mut m, mut l) = (vec![f64::NAN; k * 2], vec![f64::NAN; k * 3]);
                crate::block::with_some_ahead(n, |ahead| {
                    let (m, l) = (&mut m, &mut l);
                    pair_moments_with(kernel, &columns, &groups, &counts, m, l, ahead)
                });
                assert_eq!(bits(&m), bits(&means), "{kernel:?} means n {n} k {k}");
                assert_eq!(bits(&l), bits(&lower), "{kernel:?} scatter n {n} k {k}");
            }
            // Against the gathered rows' two-pass covariance.
            for g in 0..k - 1 {
                let members: Vec<usize> = (0..n).filter(|&i| groups[i] == g).collect();
                let mean = |j: usize| {
                    members.iter().map(|&i| x[(i, j)]).sum::<f64>() / members.len().max(1) as f64
                };
                let (m0, m1) = (mean(0), mean(1));
                let s01: f64 = members
                    .iter()
                    .map(|&i| (x[(i, 0)] - m0) * (x[(i, 1)] - m1))
                    .sum();
                assert!((lower[g * 3 + 1] - s01).abs() <= 1e-9 * (1.0 + s01.abs()));
            }
        }
    }

    /// [`grouped_pair_moments_by_rows`]' shifted definition, one row at a time in row order:
    /// the means and packed scatters, or `None` where some group's shift is far from its mean.
    fn shifted_pair_definition(
        x: MatRef<'_, f64>,
        groups: &[usize],
        counts: &[usize],
    ) -> Option<(Vec<f64>, Vec<f64>)> {
        let k = counts.len();
        let (mut shift, mut taken) = (vec![[0.0f64; 2]; k], vec![0usize; k]);
        for (i, &g) in groups.iter().enumerate() {
            if g < k && taken[g] < counts[g].min(PAIR_SHIFT_ROWS) {
                shift[g][0] += x[(i, 0)];
                shift[g][1] += x[(i, 1)];
                taken[g] += 1;
            }
        }
        for g in 0..k {
            if taken[g] > 0 {
                shift[g] = [shift[g][0] / taken[g] as f64, shift[g][1] / taken[g] as f64];
            }
        }
        // Σe₁², Σe₂², Σe₁e₂, Σe₁, Σe₂.
        let mut sums = vec![[0.0f64; 5]; k];
        for (i, &g) in groups.iter().enumerate() {
            if g < k {
                let e = [x[(i, 0)] - shift[g][0], x[(i, 1)] - shift[g][1]];
                let s = &mut sums[g];
                s[0] += e[0] * e[0];
                s[1] += e[1] * e[1];
                s[2] += e[0] * e[1];
                s[3] += e[0];
                s[4] += e[1];
            }
        }
        let (mut means, mut lower) = (vec![0.0; k * 2], vec![0.0; k * 3]);
        for g in (0..k).filter(|&g| counts[g] > 0) {
            let (c, s) = (counts[g] as f64, &sums[g]);
            let step = [s[3] / c, s[4] / c];
            let scatter = [
                s[0] - s[3] * step[0],
                s[2] - s[3] * step[1],
                s[1] - s[4] * step[1],
            ];
            if c * step[0] * step[0] > 2.0 * scatter[0] || c * step[1] * step[1] > 2.0 * scatter[2]
            {
                return None;
            }
            means[g * 2..][..2].copy_from_slice(&[shift[g][0] + step[0], shift[g][1] + step[1]]);
            lower[g * 3..][..3].copy_from_slice(&scatter);
        }
        Some((means, lower))
    }

    #[test]
    fn pair_moments_by_rows_are_the_shifted_sums_in_row_order_or_the_two_passes() {
        // Every remainder of eight rows, groups past k skipped, an empty group, groups of
        // fewer rows than the shift takes, a large offset; and (`far`) a group whose first
        // rows are far from its others, so that its shift is not near its mean.
        let bits = |v: &[f64]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        let (mut shifted, mut two_passes) = (0, 0);
        for far in [false, true] {
            for (n, k) in [(0, 2), (7, 5), (8, 3), (29, 6), (300, 10), (1031, 7)] {
                let groups = spread_groups(n, k);
                let counts = group_counts(&groups, k);
                let firsts: Vec<usize> = (0..n)
                    .filter(|&i| groups[i] == 1 && far)
                    .take(PAIR_SHIFT_ROWS)
                    .collect();
                let x = faer::Mat::from_fn(n, 2, |i, j| {
                    let away = if firsts.contains(&i) { 5e4 } else { 0.0 };
                    ((i * 7919 + j * 31) % 1009) as f64 * 0.37 - 150.0 + 1e6 * (j + 1) as f64 + away
                });
                let expected = shifted_pair_definition(x.as_ref(), &groups, &counts);
                let (means, lower) = match &expected {
                    Some(both) => {
                        shifted += 1;
                        both.clone()
                    }
                    None => {
                        two_passes += 1;
                        let (mut m, mut l) = (vec![0.0; k * 2], vec![0.0; k * 3]);
                        let none = RowsAhead::NONE;
                        grouped_pair_moments_two_pass(
                            x.as_ref(),
                            &groups,
                            &counts,
                            &mut m,
                            &mut l,
                            none,
                        );
                        (m, l)
                    }
                };
                let rows = x.transpose().to_owned();
                for view in [x.as_ref(), rows.transpose()] {
                    let (mut m, mut l) = (vec![f64::NAN; k * 2], vec![f64::NAN; k * 3]);
                    let mut c = vec![usize::MAX; k];
                    crate::block::with_some_ahead(n, |ahead| {
                        grouped_pair_moments_by_rows(view, &groups, &mut c, &mut m, &mut l, ahead)
                    });
                    assert_eq!(c, counts, "counts n {n} k {k} far {far}");
                    assert_eq!(bits(&m), bits(&means), "means n {n} k {k} far {far}");
                    assert_eq!(bits(&l), bits(&lower), "scatter n {n} k {k} far {far}");
                    // The diagonal fit's: the same means, and the scatters' diagonal.
                    let (mut m, mut sq) = (vec![f64::NAN; k * 2], vec![f64::NAN; k * 2]);
                    let mut c = vec![usize::MAX; k];
                    crate::block::with_some_ahead(n, |ahead| {
                        grouped_pair_variances_by_rows(
                            view, &groups, &mut c, &mut m, &mut sq, ahead,
                        )
                    });
                    assert_eq!(c, counts, "variances' counts n {n} k {k} far {far}");
                    let diagonal: Vec<f64> =
                        lower.chunks_exact(3).flat_map(|l| [l[0], l[2]]).collect();
                    assert_eq!(
                        bits(&m),
                        bits(&means),
                        "variances' means n {n} k {k} far {far}"
                    );
                    assert_eq!(
                        bits(&sq),
                        bits(&diagonal),
                        "variances n {n} k {k} far {far}"
                    );
                }
                // Every kernel's sums are those taken one row at a time.
                let shifts = pair_shifts(x.as_ref(), &groups, k);
                let mut one_by_one = vec![[0.0f64; 8]; k];
                shifted_pair_sums_one_by_one(x.as_ref(), &groups, &shifts, &mut one_by_one);
                #[cfg(target_arch = "x86_64")]
                for kernel in ByRows::available() {
                    let columns =
                        crate::block::contiguous_columns(x.as_ref(), 0..2).unwrap_or_default();
                    let Ok(columns) = <[&[f64]; 2]>::try_from(columns) else {
                        panic!("two columns");
                    };
                    let mut sums = vec![[f64::NAN; 8]; k];
                    sums.iter_mut().for_each(|s| *s = [0.0; 8]);
                    crate::block::with_some_ahead(n, |ahead| {
                        kernel.shifted_pair_sums(columns, &groups, &shifts, &mut sums, ahead)
                    });
                    let flat = |v: &[[f64; 8]]| bits(v.as_flattened());
                    assert_eq!(
                        flat(&sums),
                        flat(&one_by_one),
                        "{kernel:?} n {n} k {k} far {far}"
                    );
                }
                // Against the gathered rows' two-pass moments.
                for g in (0..k - 1).filter(|&g| counts[g] > 0) {
                    let members: Vec<usize> = (0..n).filter(|&i| groups[i] == g).collect();
                    let mean = |j: usize| {
                        members.iter().map(|&i| x[(i, j)]).sum::<f64>() / members.len() as f64
                    };
                    let m = [mean(0), mean(1)];
                    let product = |a: usize, b: usize| -> f64 {
                        members
                            .iter()
                            .map(|&i| (x[(i, a)] - m[a]) * (x[(i, b)] - m[b]))
                            .sum()
                    };
                    let want = [product(0, 0), product(0, 1), product(1, 1)];
                    let scale = (want[0] * want[2]).sqrt();
                    for (t, w) in want.iter().enumerate() {
                        let got = lower[g * 3 + t];
                        assert!(
                            (got - w).abs() <= 1e-12 * scale,
                            "n {n} k {k} g {g} {t}: {got} {w}"
                        );
                    }
                    for j in 0..2 {
                        assert!((means[g * 2 + j] - m[j]).abs() <= 1e-15 * m[j].abs());
                    }
                }
            }
        }
        // Both ways were taken.
        assert!(
            shifted > 0 && two_passes > 0,
            "{shifted} shifted, {two_passes} two passes"
        );
    }

    #[test]
    fn moments_by_rows_are_sums_in_row_order() {
        // Rows 0..n in every remainder of eight, columns across several eight-column blocks
        // with a partial last one, groups past k skipped, and an empty group.
        for (n, d, k) in [
            (0, 3, 2),
            (7, 1, 5),
            (8, 8, 3),
            (29, 9, 6),
            (300, 17, 10),
            (1031, 2, 7),
        ] {
            let x = faer::Mat::from_fn(n, d, |i, j| {
                ((i * 7919 + j * 31) % 1009) as f64 * 0.37 - 150.0 + (j * 1000) as f64
            });
            let groups = spread_groups(n, k);
            let counts = group_counts(&groups, k);
            // The definition, one value at a time in row order.
            let (mut sums, mut sq) = (vec![0.0f64; k * d], vec![0.0f64; k * d]);
            for (i, &g) in groups.iter().enumerate() {
                if g < k {
                    for j in 0..d {
                        sums[g * d + j] += x[(i, j)];
                    }
                }
            }
            let means: Vec<f64> = (0..k * d)
                .map(|at| match counts[at / d] {
                    0 => 0.0,
                    c => sums[at] / c as f64,
                })
                .collect();
            for (i, &g) in groups.iter().enumerate() {
                if g < k {
                    for j in 0..d {
                        let t = x[(i, j)] - means[g * d + j];
                        sq[g * d + j] += t * t;
                    }
                }
            }
            let bits = |v: &[f64]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            // Contiguous columns (the widest kernel there is) and a row-major copy
            // (one value at a time).
            let rows = x.transpose().to_owned();
            for view in [x.as_ref(), rows.transpose()] {
                let (mut m, mut s) = (vec![f64::NAN; k * d], vec![f64::NAN; k * d]);
                crate::block::with_some_ahead(n, |ahead| {
                    grouped_moments_by_rows(view, &groups, &counts, &mut m, &mut s, ahead)
                });
                assert_eq!(bits(&m), bits(&means), "means n {n} d {d} k {k}");
                assert_eq!(bits(&s), bits(&sq), "squares n {n} d {d} k {k}");
            }
            // Each kernel the CPU has (AVX-512's and AVX2's), whichever the dispatch picks.
            #[cfg(target_arch = "x86_64")]
            for kernel in ByRows::available() {
                let columns =
                    crate::block::contiguous_columns(x.as_ref(), 0..d).unwrap_or_default();
                let (mut m, mut s) = (vec![f64::NAN; k * d], vec![f64::NAN; k * d]);
                let none = RowsAhead::NONE;
                moments_by_row_blocks(kernel, &columns, &groups, &counts, &mut m, &mut s, none);
                assert_eq!(bits(&m), bits(&means), "{kernel:?} means n {n} d {d} k {k}");
                assert_eq!(bits(&s), bits(&sq), "{kernel:?} squares n {n} d {d} k {k}");
            }
            // Against the two-pass moments of each group's rows gathered.
            for g in 0..k {
                let members: Vec<usize> = (0..n).filter(|&i| groups[i] == g).collect();
                for j in 0..d {
                    let vals: Vec<f64> = members.iter().map(|&i| x[(i, j)]).collect();
                    let mean = vals.iter().sum::<f64>() / vals.len().max(1) as f64;
                    let ss: f64 = vals.iter().map(|v| (v - mean) * (v - mean)).sum();
                    assert!((means[g * d + j] - mean).abs() <= 1e-9 * (1.0 + mean.abs()));
                    assert!((sq[g * d + j] - ss).abs() <= 1e-9 * (1.0 + ss));
                }
            }
        }
    }

    #[test]
    fn group_counts_count_each_group_and_skip_the_rest() {
        for n in [0usize, 1, 7, 8, 9, 100, 4099] {
            // Groups up to 17, so that every k below leaves some rows out, and a few past
            // 255 (one past a multiple of 256 among them); k covers the passes (up to 4), the
            // tallies (5 to 16) and the counts one label at a time past them, and with AVX-512
            // the bytes (up to 255 groups) and the counts by label past them.
            let groups: Vec<usize> = (0..n)
                .map(|i| match i % 29 {
                    3 => 256 + i % 3,
                    11 => usize::MAX,
                    _ => (i * 7 + i / 3) % 18,
                })
                .collect();
            for k in [1usize, 2, 4, 5, 6, 10, 16, 17, 255, 256, 258, 20_000] {
                let got = group_counts(&groups, k);
                let mut want = vec![0; k];
                for &g in &groups {
                    if g < k {
                        want[g] += 1;
                    }
                }
                assert_eq!(got, want, "n = {n}, k = {k}");
                // The passes and tallies, which AVX-512 leaves to more than 255 groups.
                let mut by_words = vec![usize::MAX; k];
                group_counts_by_words(&groups, &mut by_words);
                assert_eq!(by_words, want, "by words, n = {n}, k = {k}");
            }
        }
    }

    /// The sums by rows are each group's values added in row order from zero, bit for bit, on
    /// every layout (contiguous columns take the SIMD kernel, a row-major view the scalar
    /// path); the counts are `group_counts`', and the flag sees any value below zero.
    #[test]
    fn grouped_sums_by_rows_are_sums_in_row_order() {
        for n in [0usize, 3, 7, 8, 77, 4096, 4133] {
            for d in [1usize, 3, 8, 9, 16, 19] {
                let (a, b) = data(n * d);
                let x = faer::Mat::from_fn(n, d, |i, j| a[i * d + j] * b[i * d + j]);
                let row_major = x.transpose().to_owned();
                for k in [5usize, 10, 17, 64] {
                    let groups = labels_with_strays(n, k);
                    let mut want = faer::Mat::<f64>::zeros(k, d);
                    let mut tally = vec![0.0; k * d];
                    for (i, &g) in groups.iter().enumerate() {
                        if g < k {
                            (0..d).for_each(|j| tally[g * d + j] += x[(i, j)]);
                        }
                    }
                    (0..k).for_each(|g| (0..d).for_each(|j| want[(g, j)] = tally[g * d + j]));
                    let want_negative = (0..n).any(|i| (0..d).any(|j| x[(i, j)] < 0.0));
                    for view in [x.as_ref(), row_major.as_ref().transpose()] {
                        let mut sums = faer::Mat::zeros(k, d);
                        let mut counts = vec![99; k];
                        let negative = grouped_sums_by_rows_and_counts(
                            view,
                            &groups,
                            sums.as_mut(),
                            &mut counts,
                        );
                        assert_eq!(
                            counts,
                            group_counts(&groups, k),
                            "n = {n}, d = {d}, k = {k}"
                        );
                        assert_eq!(negative, want_negative, "n = {n}, d = {d}, k = {k}");
                        for g in 0..k {
                            for j in 0..d {
                                assert_eq!(
                                    sums[(g, j)].to_bits(),
                                    want[(g, j)].to_bits(),
                                    "n = {n}, d = {d}, k = {k}, group {g}, column {j}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// Sums and counts together are `grouped_sums`' bits and `group_counts`' counts, whatever
    /// the masks are made of: bytes up to 255 groups (labels of 255 and more, one past a
    /// multiple of 256 included, belong to no group), 64-bit comparisons above.
    #[test]
    fn grouped_sums_and_counts_are_the_sums_and_the_counts() {
        for n in [0usize, 3, 15, 16, 77, 4096, 4133] {
            let (x, w) = data(n);
            let x = faer::Mat::from_fn(n, 2, |i, j| if j == 0 { x[i] } else { w[i] });
            for k in [1usize, 2, 3, 10, 17, 64, 65, 255, 256, 20_000] {
                let groups = labels_with_strays(n, k);
                let mut want_sums = faer::Mat::zeros(k, 2);
                let want_negative = if k > BY_INDEX_MIN_GROUPS {
                    // By label: each group's rows added in order, one at a time.
                    for (i, &g) in groups.iter().enumerate() {
                        if g < k {
                            (0..2).for_each(|j| want_sums[(g, j)] += x[(i, j)]);
                        }
                    }
                    (0..n).any(|i| x[(i, 0)] < 0.0 || x[(i, 1)] < 0.0)
                } else {
                    grouped_sums(x.as_ref(), &groups, want_sums.as_mut())
                };
                let mut sums = faer::Mat::zeros(k, 2);
                let mut counts = vec![99; k];
                let negative =
                    grouped_sums_and_counts(x.as_ref(), &groups, sums.as_mut(), &mut counts);
                assert_eq!(counts, group_counts(&groups, k), "n = {n}, k = {k}");
                assert_eq!(negative, want_negative, "n = {n}, k = {k}");
                for g in 0..k {
                    for j in 0..2 {
                        assert_eq!(
                            sums[(g, j)].to_bits(),
                            want_sums[(g, j)].to_bits(),
                            "n = {n}, k = {k}, group {g}, column {j}"
                        );
                    }
                }
            }
        }
    }

    /// The counts above a threshold with the row counts are the scalar path's counts and a
    /// direct count of the rows, with the same flag, for 1 to 4 and 7 columns (one or two groups of
    /// four read together), column- and row-major, up to 256 groups (above 255, the fallback),
    /// with labels of no group among the rows, and values at the threshold, NaN or ±∞ in the
    /// whole vectors and in the tail. On an AVX-512 CPU, the byte path is the one taken for up
    /// to 255 groups in column-major order.
    #[test]
    fn grouped_counts_above_and_counts_are_the_counts_and_the_row_counts() {
        for n in [0usize, 3, 15, 16, 77, 4096, 4133] {
            let (x, w) = data(n);
            for d in [1usize, 2, 3, 4, 7] {
                let col_major = faer::Mat::from_fn(n, d, |i, j| match (i % 13, j) {
                    (5 | 11, _) => 0.25,
                    (8, 1) => f64::NAN,
                    _ => x[i] * (j as f64 + 1.0) + w[i],
                });
                let row_major = col_major.transpose().to_owned();
                for k in [1usize, 2, 3, 10, 17, 64, 65, 255, 256, 20_000] {
                    let groups = labels_with_strays(n, k);
                    let mut want = faer::Mat::from_fn(k, d, |g, j| (g + 2 * j) as f64);
                    let want_flag = pulp::WithSimd::with_simd(
                        CountsAbove {
                            x: col_major.as_ref(),
                            groups: &groups,
                            threshold: 0.25,
                            sums: want.as_mut(),
                        },
                        pulp::Scalar::new(),
                    );
                    assert_eq!(want_flag, d > 1 && n > 8, "n = {n}, d = {d}: the NaN");
                    for (layout, x) in [("col", col_major.as_ref()), ("row", row_major.transpose())]
                    {
                        let at = format!("n = {n}, d = {d}, k = {k}, {layout}-major");
                        let mut sums = faer::Mat::from_fn(k, d, |g, j| (g + 2 * j) as f64);
                        let mut counts = vec![99; k];
                        let flag = grouped_counts_above_and_counts(
                            x,
                            &groups,
                            0.25,
                            sums.as_mut(),
                            &mut counts,
                        );
                        assert_eq!(flag, want_flag, "{at}");
                        let direct: Vec<usize> = (0..k)
                            .map(|g| groups.iter().filter(|&&l| l == g).count())
                            .collect();
                        assert_eq!(counts, direct, "{at}");
                        for g in 0..k {
                            for j in 0..d {
                                assert_eq!(sums[(g, j)], want[(g, j)], "{at}, group {g}, col {j}");
                            }
                        }
                    }
                    #[cfg(target_arch = "x86_64")]
                    if pulp::x86::V4::try_new().is_some() {
                        let mut sums = faer::Mat::zeros(k, d);
                        let mut counts = vec![0; k];
                        let by_bytes = counts_above_by_bytes(
                            col_major.as_ref(),
                            &groups,
                            0.25,
                            sums.as_mut(),
                            &mut counts,
                        );
                        let want = (k <= 255).then_some(want_flag);
                        assert_eq!(by_bytes, want, "n = {n}, d = {d}, k = {k}: the byte path");
                    }
                }
            }
        }
        // A value that is not finite only in the tail (after the last whole eight rows), or
        // only in the whole vectors, of the last of five columns.
        for (row, bad) in [(100, f64::INFINITY), (99, f64::NAN), (3, f64::NEG_INFINITY)] {
            let x = faer::Mat::from_fn(101, 5, |i, j| match (i, j) {
                (i, 4) if i == row => bad,
                _ => i as f64,
            });
            let groups = group_ids(101, 3);
            let mut sums = faer::Mat::zeros(3, 5);
            let mut counts = vec![0; 3];
            let flag = grouped_counts_above_and_counts(
                x.as_ref(),
                &groups,
                0.5,
                sums.as_mut(),
                &mut counts,
            );
            assert!(flag, "{bad} at row {row}");
        }
    }

    /// The widest instruction set this machine has, and AVX2 where present, give the scalar
    /// path's bits.
    #[test]
    fn every_instruction_set_gives_the_same_bits() {
        struct Sums<'a>(Option<&'a [f64]>, &'a [f64]);
        impl pulp::WithSimd for Sums<'_> {
            type Output = (f64, f64);
            #[inline(always)]
            fn with_simd<S: Simd>(self, simd: S) -> (f64, f64) {
                (
                    weighted_sum(simd, self.0, self.1),
                    weighted_sum_sq(simd, self.0, self.1, 1.25),
                )
            }
        }
        for n in [3, 32, 77, 4096, 4133] {
            let (x, w) = data(n);
            for wo in [None, Some(w.as_slice())] {
                let scalar = pulp::WithSimd::with_simd(Sums(wo, &x), pulp::Scalar::new());
                let mut paths = vec![("widest", pulp::Arch::new().dispatch(Sums(wo, &x)))];
                // AVX2 (four lanes, eight vector accumulators) where the CPU has it.
                #[cfg(target_arch = "x86_64")]
                if let Some(v3) = pulp::x86::V3::try_new() {
                    paths.push((
                        "avx2",
                        v3.vectorize(|| pulp::WithSimd::with_simd(Sums(wo, &x), v3)),
                    ));
                }
                for (path, got) in paths {
                    assert_eq!(got.0.to_bits(), scalar.0.to_bits(), "{path} sum, n = {n}");
                    assert_eq!(
                        got.1.to_bits(),
                        scalar.1.to_bits(),
                        "{path} squares, n = {n}"
                    );
                }
            }
        }
    }

    /// Labels of `k` groups for `n` rows, with labels of no group among them: 256 to 258 (past
    /// a byte), `usize::MAX` and `k`.
    fn labels_with_strays(n: usize, k: usize) -> Vec<usize> {
        (0..n)
            .map(|i| match i % 11 {
                4 => 256 + i % 3,
                7 => usize::MAX,
                9 => k,
                _ => (i * 7 + i / 3) % k,
            })
            .collect()
    }

    /// Groups for `n` rows among `k` (plus every 13th row in group `k`, which is skipped).
    fn group_ids(n: usize, k: usize) -> Vec<usize> {
        (0..n)
            .map(|i| if i % 13 == 5 { k } else { (i * 7 + i / 3) % k })
            .collect()
    }

    #[test]
    fn grouped_sums_match_a_compensated_reference_per_group() {
        for n in [0, 1, 5, 15, 16, 17, 33, 100, 4099] {
            let (x, w) = data(n);
            // Two columns: the values and the weights (a different pattern).
            let m = faer::Mat::from_fn(n, 2, |i, j| if j == 0 { x[i] } else { w[i] });
            // Above 16 groups the kernel's per-group vectors are on the heap, not the stack.
            for k in [1, 2, 3, 5, 8, 9, 10, 16, 17, 23] {
                let groups = group_ids(n, k);
                let mut sums = faer::Mat::from_fn(k, 2, |g, j| (g + 3 * j) as f64);
                let negative = grouped_sums(m.as_ref(), &groups, sums.as_mut());
                assert_eq!(negative, x.iter().any(|v| *v < 0.0), "n = {n}, k = {k}");
                let centers = faer::Mat::from_fn(k, 2, |g, j| 0.5 * g as f64 + j as f64 - 1.0);
                let mut squares = faer::Mat::from_fn(k, 2, |g, j| (g + 3 * j) as f64);
                grouped_sums_sq(m.as_ref(), &groups, centers.as_ref(), squares.as_mut());
                for j in 0..2 {
                    for g in 0..k {
                        let picked: Vec<f64> = (0..n)
                            .filter(|&i| groups[i] == g)
                            .map(|i| m[(i, j)])
                            .collect();
                        let base = (g + 3 * j) as f64;
                        let c = centers[(g, j)];
                        for (what, got, want) in [
                            (
                                "sum",
                                sums[(g, j)],
                                reference(None, &picked, 0.0, false) + base,
                            ),
                            (
                                "squares",
                                squares[(g, j)],
                                reference(None, &picked, c, true) + base,
                            ),
                        ] {
                            let tol = 1e-13 * (1.0 + want.abs());
                            assert!(
                                (got - want).abs() <= tol,
                                "{what}, n = {n}, k = {k}, group {g}, column {j}: {got} vs {want}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn grouped_sums_flag_negatives_and_carry_nan_and_infinity() {
        // Rows 0..16 are a whole vector block, rows 16.. the tail.
        for row in [3, 18] {
            for (bad, negative) in [
                (-0.0, false),
                (-1e-300, true),
                (f64::NEG_INFINITY, true),
                (f64::NAN, false),
                (f64::INFINITY, false),
            ] {
                let mut m = faer::Mat::from_fn(20, 1, |i, _| i as f64);
                m[(row, 0)] = bad;
                let groups: Vec<usize> = (0..20).map(|i| i % 2).collect();
                let mut sums = faer::Mat::zeros(2, 1);
                let got = grouped_sums(m.as_ref(), &groups, sums.as_mut());
                assert_eq!(got, negative, "{bad} at row {row}");
                let own = sums[(row % 2, 0)];
                if bad.is_finite() {
                    assert!(own.is_finite(), "{bad} at row {row}: {own}");
                } else {
                    assert!(!own.is_finite(), "{bad} at row {row}: {own}");
                }
                // The other group never sees the bad value.
                assert!(sums[(1 - row % 2, 0)].is_finite(), "{bad} at row {row}");
            }
        }
    }

    /// The flag sees a negative value in any column of those read together, and in the column
    /// after them, in the whole runs and in the tail.
    #[test]
    fn grouped_sums_flag_a_negative_in_any_column() {
        for k in [1, 2, 3] {
            for column in 0..5 {
                for row in [3, 18, 33] {
                    let mut m = faer::Mat::from_fn(34, 5, |i, j| (i + j) as f64);
                    m[(row, column)] = -1.0;
                    let groups: Vec<usize> = (0..34).map(|i| i % k).collect();
                    let mut sums = faer::Mat::zeros(k, 5);
                    let got = grouped_sums(m.as_ref(), &groups, sums.as_mut());
                    assert!(got, "k = {k}, -1 in column {column}, row {row}");
                    let want = (0..34)
                        .filter(|&i| i % k == row % k)
                        .map(|i| m[(i, column)]);
                    assert_eq!(sums[(row % k, column)], want.sum::<f64>(), "k = {k}");
                }
            }
        }
    }

    /// Counts above a threshold are a direct count per group (values at the threshold and
    /// below it count 0, rows of an unknown group nothing), and the flag is exactly whether a
    /// value is not finite, in the vector part or in the tail.
    #[test]
    fn grouped_counts_above_match_a_direct_count_and_flag_non_finite_values() {
        // 50,000 rows: a packed counter's field would pass 4095 in column 2 were the counter
        // not unpacked in between.
        for n in [0, 1, 15, 16, 17, 100, 4099, 50_000] {
            let (x, w) = data(n);
            // Values exactly at the threshold, 3.0, are not above it. Five columns: up to 5
            // groups count four columns together, then the fifth.
            let m = faer::Mat::from_fn(n, 5, |i, j| {
                if j == 0 {
                    x[i]
                } else if i % 5 == 0 {
                    3.0
                } else {
                    match j {
                        1 => w[i] + 2.5,
                        2 => 4.0,
                        3 => x[i] + 1.0,
                        _ => 2.0 * w[i] + 2.0,
                    }
                }
            });
            // 5 groups fill a packed counter, 21 need a second pass over the column.
            for k in [1, 2, 3, 5, 6, 8, 9, 10, 21, 26] {
                let groups = group_ids(n, k);
                let mut counts = faer::Mat::from_fn(k, 5, |g, j| (g + 3 * j) as f64);
                let flagged = grouped_counts_above(m.as_ref(), &groups, 3.0, counts.as_mut());
                assert!(!flagged, "n = {n}, k = {k}");
                for j in 0..5 {
                    for g in 0..k {
                        let want = (0..n)
                            .filter(|&i| groups[i] == g && m[(i, j)] > 3.0)
                            .count();
                        assert_eq!(
                            counts[(g, j)],
                            (want + g + 3 * j) as f64,
                            "n = {n}, k = {k}, group {g}, column {j}"
                        );
                    }
                }
            }
        }
        let n = 100;
        for column in [1, 3, 4] {
            for (row, bad) in [
                (3, f64::NAN),
                (50, f64::INFINITY),
                (98, f64::NEG_INFINITY),
                (97, f64::NAN),
            ] {
                let m = faer::Mat::from_fn(n, 5, |i, j| {
                    if (i, j) == (row, column) {
                        bad
                    } else {
                        i as f64
                    }
                });
                let groups = group_ids(n, 3);
                let mut counts = faer::Mat::zeros(3, 5);
                assert!(
                    grouped_counts_above(m.as_ref(), &groups, 0.5, counts.as_mut()),
                    "{bad} at row {row}, column {column}"
                );
            }
        }
    }

    /// The widest instruction set, AVX2 where present and the scalar path count the same
    /// values above the threshold and flag the same columns, in either layout.
    #[test]
    fn grouped_counts_above_agree_on_every_instruction_set() {
        for n in [3, 77, 4133] {
            let (x, w) = data(n);
            let col_major = faer::Mat::from_fn(n, 3, |i, j| match j {
                0 => x[i],
                1 => w[i],
                _ if i == n / 2 => f64::NAN,
                _ => x[i] * w[i],
            });
            let row_major = col_major.transpose().to_owned();
            for k in [2, 7, 12] {
                let groups = group_ids(n, k);
                let on = |x: faer::MatRef<'_, f64>, run: &dyn Fn(CountsAbove<'_>) -> bool| {
                    let mut counts = faer::Mat::zeros(k, 3);
                    let flagged = run(CountsAbove {
                        x,
                        groups: &groups,
                        threshold: 0.2,
                        sums: counts.as_mut(),
                    });
                    (counts, flagged)
                };
                let scalar = on(col_major.as_ref(), &|a| {
                    pulp::WithSimd::with_simd(a, pulp::Scalar::new())
                });
                assert!(scalar.1, "n = {n}, k = {k}: the NaN is flagged");
                let mut paths = vec![
                    (
                        "widest",
                        on(col_major.as_ref(), &|a| pulp::Arch::new().dispatch(a)),
                    ),
                    (
                        "widest, row-major",
                        on(row_major.transpose(), &|a| pulp::Arch::new().dispatch(a)),
                    ),
                ];
                #[cfg(target_arch = "x86_64")]
                if let Some(v3) = pulp::x86::V3::try_new() {
                    paths.push((
                        "avx2",
                        on(col_major.as_ref(), &|a| {
                            v3.vectorize(|| pulp::WithSimd::with_simd(a, v3))
                        }),
                    ));
                }
                for (path, got) in paths {
                    assert_eq!(got, scalar, "{path}, n = {n}, k = {k}");
                }
            }
        }
    }

    /// `grouped_sums_and_squares` writes the bits of `grouped_sums` into zeros followed by
    /// `grouped_sums_sq` at the means they give, in either layout, with empty groups, rows of no
    /// group, a large offset and a column of negative zeros, and flags negative values alike.
    #[test]
    fn sums_and_squares_in_one_sweep_give_the_bits_of_two_passes() {
        use faer::Mat;
        for n in [0, 3, 16, 77, 4133] {
            let (x, w) = data(n);
            let col_major = Mat::from_fn(n, 5, |i, j| match j {
                0 => x[i],
                1 => w[i] - 0.5,
                2 => -0.0,
                3 => x[i] * 1e3 + 1e9,
                _ => x[i] * w[i],
            });
            let row_major = col_major.transpose().to_owned();
            for k in [1, 2, 3, 9, 10, 17] {
                let groups = group_ids(n, k);
                let counts: Vec<usize> = (0..k)
                    .map(|g| groups.iter().filter(|&&h| h == g).count())
                    .collect();
                let mut sums = Mat::zeros(k, 5);
                let negative = grouped_sums(col_major.as_ref(), &groups, sums.as_mut());
                let means = Mat::from_fn(k, 5, |g, j| match counts[g] {
                    0 => 0.0,
                    c => sums[(g, j)] / c as f64,
                });
                let mut squares = Mat::zeros(k, 5);
                grouped_sums_sq(
                    col_major.as_ref(),
                    &groups,
                    means.as_ref(),
                    squares.as_mut(),
                );
                for (layout, view) in [
                    ("column-major", col_major.as_ref()),
                    ("row-major", row_major.transpose()),
                ] {
                    let mut got_sums = Mat::from_fn(k, 5, |_, _| f64::NAN);
                    let mut got_squares = Mat::from_fn(k, 5, |_, _| f64::NAN);
                    let got_negative = crate::block::with_some_ahead(n, |ahead| {
                        grouped_sums_and_squares(
                            view,
                            &groups,
                            &counts,
                            got_sums.as_mut(),
                            got_squares.as_mut(),
                            ahead,
                        )
                    });
                    assert_eq!(got_negative, negative, "{layout}, n = {n}, k = {k}");
                    for g in 0..k {
                        for j in 0..5 {
                            let at = format!("{layout}, n = {n}, k = {k}, ({g}, {j})");
                            assert_eq!(got_sums[(g, j)].to_bits(), sums[(g, j)].to_bits(), "{at}");
                            assert_eq!(
                                got_squares[(g, j)].to_bits(),
                                squares[(g, j)].to_bits(),
                                "{at}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// The widest instruction set, AVX2 where present and the scalar path give the same bits,
    /// for column-major and row-major blocks: sums, squares and cross products.
    #[test]
    fn grouped_sums_give_the_same_bits_on_every_instruction_set() {
        /// Sums (or, with centres, squares or cross products) on one path, for `k` groups.
        fn on<F>(
            x: faer::MatRef<'_, f64>,
            groups: &[usize],
            centers: Option<faer::MatRef<'_, f64>>,
            cross: bool,
            k: usize,
            run: F,
        ) -> (faer::Mat<f64>, bool)
        where
            F: FnOnce(Grouped<'_>) -> bool,
        {
            let d = x.ncols();
            let mut sums = faer::Mat::zeros(k, if cross { d * (d + 1) / 2 } else { d });
            let negative = run(Grouped {
                centers,
                cross,
                ..Grouped::sums(x, groups, sums.as_mut())
            });
            (sums, negative)
        }
        for n in [3, 77, 4096, 4133] {
            let (x, w) = data(n);
            // Five columns: with one or two groups, sums read four columns together and then
            // the fifth alone (`group_pass_columns`).
            let col_major = faer::Mat::from_fn(n, 5, |i, j| match j {
                0 => x[i],
                1 => w[i],
                2 => x[i] * w[i],
                3 => w[i] - 0.5,
                _ => -x[i],
            });
            let row_major = col_major.transpose().to_owned();
            for k in [1, 2, 3, 10, 300] {
                let groups = group_ids(n, k);
                let centers = faer::Mat::from_fn(k, 5, |g, j| 0.1 * g as f64 - 0.3 * j as f64);
                for (c, cross) in [
                    (None, false),
                    (Some(centers.as_ref()), false),
                    (Some(centers.as_ref()), true),
                ] {
                    let scalar = on(col_major.as_ref(), &groups, c, cross, k, |a| {
                        pulp::WithSimd::with_simd(a, pulp::Scalar::new())
                    });
                    let mut paths = vec![
                        (
                            "widest",
                            on(col_major.as_ref(), &groups, c, cross, k, |a| {
                                pulp::Arch::new().dispatch(a)
                            }),
                        ),
                        (
                            "widest, row-major",
                            on(row_major.transpose(), &groups, c, cross, k, |a| {
                                pulp::Arch::new().dispatch(a)
                            }),
                        ),
                    ];
                    #[cfg(target_arch = "x86_64")]
                    if let Some(v3) = pulp::x86::V3::try_new() {
                        paths.push((
                            "avx2",
                            on(col_major.as_ref(), &groups, c, cross, k, |a| {
                                v3.vectorize(|| pulp::WithSimd::with_simd(a, v3))
                            }),
                        ));
                    }
                    for (path, got) in paths {
                        let what = format!(
                            "{path}, n = {n}, k = {k}, centres {}, cross {cross}",
                            c.is_some()
                        );
                        assert_eq!(got.1, scalar.1, "{what}");
                        for j in 0..scalar.0.ncols() {
                            for g in 0..k {
                                assert_eq!(
                                    got.0[(g, j)].to_bits(),
                                    scalar.0[(g, j)].to_bits(),
                                    "{what}, group {g}, column {j}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// Sums, counts and cross products through kept masks have the bits of the passes that
    /// build their own, whichever pass builds them, and a pass over another number of groups
    /// does not read masks kept for one.
    #[test]
    fn kept_masks_give_the_bits_of_masks_built_per_pass() {
        for n in [0, 1, 15, 16, 17, 100, 4099] {
            let (x, w) = data(n);
            let d = 2;
            let m = faer::Mat::from_fn(n, d, |i, j| match j {
                0 => x[i] + 1e3,
                _ => w[i] * 40.0 - 7.0,
            });
            for k in [1, 2, 3, 4] {
                let groups = group_ids(n, k);
                let centers = faer::Mat::from_fn(k, d, |g, j| 0.2 * g as f64 + [1e3, -7.0][j]);
                let fresh = || (faer::Mat::zeros(k, d), vec![0; k], faer::Mat::zeros(k, 3));
                let (mut sums, mut counts, mut cross) = fresh();
                grouped_sums_and_counts(m.as_ref(), &groups, sums.as_mut(), &mut counts);
                let ahead = RowsAhead::NONE;
                grouped_cross_products(
                    m.as_ref(),
                    &groups,
                    centers.as_ref(),
                    cross.as_mut(),
                    ahead,
                );
                let bits = |a: &faer::Mat<f64>| -> Vec<u64> {
                    (0..a.nrows())
                        .flat_map(|i| (0..a.ncols()).map(move |j| (i, j)))
                        .map(|(i, j)| a[(i, j)].to_bits())
                        .collect()
                };
                // The sums build the masks, the products read them.
                let mut masks = KeptMasks::new(&groups, k);
                let (mut kept_sums, mut kept_counts, mut kept_cross) = fresh();
                let sums_view = kept_sums.as_mut();
                grouped_sums_and_counts_keeping(
                    m.as_ref(),
                    &mut masks,
                    sums_view,
                    &mut kept_counts,
                );
                #[cfg(target_arch = "x86_64")]
                if pulp::x86::V4::is_available() && n >= 16 {
                    assert!(!masks.bytes.is_empty(), "n = {n}, k = {k}: masks kept");
                }
                let (c, out) = (centers.as_ref(), kept_cross.as_mut());
                grouped_cross_products_keeping(m.as_ref(), &mut masks, c, out, ahead);
                let what = format!("n = {n}, k = {k}");
                assert_eq!(bits(&kept_sums), bits(&sums), "sums, {what}");
                assert_eq!(kept_counts, counts, "counts, {what}");
                assert_eq!(bits(&kept_cross), bits(&cross), "products, {what}");
                // The products build them; masks kept for k groups are not read for k + 1.
                let mut masks = KeptMasks::new(&groups, k);
                let mut again = faer::Mat::zeros(k, 3);
                grouped_cross_products_keeping(m.as_ref(), &mut masks, c, again.as_mut(), ahead);
                assert_eq!(bits(&again), bits(&cross), "products first, {what}");
                let wider = faer::Mat::from_fn(k + 1, d, |g, j| 0.2 * g as f64 + [1e3, -7.0][j]);
                let (mut one_more, mut want) =
                    (faer::Mat::zeros(k + 1, 3), faer::Mat::zeros(k + 1, 3));
                let (wc, om) = (wider.as_ref(), one_more.as_mut());
                grouped_cross_products_keeping(m.as_ref(), &mut masks, wc, om, ahead);
                grouped_cross_products(m.as_ref(), &groups, wc, want.as_mut(), ahead);
                assert_eq!(bits(&one_more), bits(&want), "k + 1 groups, {what}");
            }
        }
    }

    /// Each group's cross products match a compensated reference for every pair of columns,
    /// and the diagonal pairs are `grouped_sums_sq`'s bits.
    #[test]
    fn grouped_cross_products_match_a_reference_and_the_squares() {
        for n in [0, 1, 15, 16, 17, 100, 4099] {
            let (x, w) = data(n);
            let d = 3;
            let m = faer::Mat::from_fn(n, d, |i, j| match j {
                0 => x[i],
                1 => w[i] * 40.0 - 7.0,
                _ => x[i] * w[i] + 1e3,
            });
            for k in [1, 2, 3, 4, 5, 9] {
                let groups = group_ids(n, k);
                let centers = faer::Mat::from_fn(k, d, |g, j| 0.2 * g as f64 + [2.9, 13.0, 1e3][j]);
                let pairs = d * (d + 1) / 2;
                let mut cross = faer::Mat::from_fn(k, pairs, |g, p| (g + p) as f64);
                crate::block::with_some_ahead(n, |ahead| {
                    grouped_cross_products(
                        m.as_ref(),
                        &groups,
                        centers.as_ref(),
                        cross.as_mut(),
                        ahead,
                    )
                });
                // Two columns take their three products in one pass (`pair_products`, with
                // AVX-512): the bits of the passes of their own that the third column's
                // products still take.
                let mut two = faer::Mat::from_fn(k, 3, |g, p| (g + p) as f64);
                crate::block::with_some_ahead(n, |ahead| {
                    grouped_cross_products(
                        m.subcols(0, 2),
                        &groups,
                        centers.subcols(0, 2),
                        two.as_mut(),
                        ahead,
                    )
                });
                for g in 0..k {
                    for p in 0..3 {
                        assert_eq!(
                            two[(g, p)].to_bits(),
                            cross[(g, p)].to_bits(),
                            "n = {n}, k = {k}, group {g}, pair {p} of two columns"
                        );
                    }
                }
                let mut squares = faer::Mat::from_fn(k, d, |g, j| (g + j * (j + 3) / 2) as f64);
                grouped_sums_sq(m.as_ref(), &groups, centers.as_ref(), squares.as_mut());
                for g in 0..k {
                    let rows: Vec<usize> = (0..n).filter(|&i| groups[i] == g).collect();
                    for j in 0..d {
                        for c in 0..=j {
                            let p = j * (j + 1) / 2 + c;
                            let terms: Vec<f64> = rows
                                .iter()
                                .map(|&i| {
                                    (m[(i, j)] - centers[(g, j)]) * (m[(i, c)] - centers[(g, c)])
                                })
                                .collect();
                            let want = reference(None, &terms, 0.0, false) + (g + p) as f64;
                            let got = cross[(g, p)];
                            let tol = 1e-12 * (1.0 + want.abs());
                            assert!(
                                (got - want).abs() <= tol,
                                "n = {n}, k = {k}, group {g}, pair ({j}, {c}): {got} vs {want}"
                            );
                        }
                        let p = j * (j + 1) / 2 + j;
                        assert_eq!(
                            cross[(g, p)].to_bits(),
                            squares[(g, j)].to_bits(),
                            "n = {n}, k = {k}, group {g}, column {j}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn sums_each_column_see_every_column_once_in_order_with_its_sums() {
        let (n, d, k) = (37, 6, 3);
        let x = faer::Mat::from_fn(n, d, |i, j| ((i * 13 + j * 7) % 23) as f64 - 4.0);
        let groups: Vec<usize> = (0..n).map(|i| (i * 5) % (k + 1)).collect();
        let mut want = faer::Mat::zeros(k, d);
        let want_negative = grouped_sums(x.as_ref(), &groups, want.as_mut());
        let layouts = crate::test_layouts::Layouts::new(x.as_ref());
        for (which, view) in layouts.views(x.as_ref()).into_iter().enumerate() {
            let mut got = faer::Mat::zeros(k, d);
            let mut seen = Vec::new();
            let mut after = |j: usize, col: &[f64], sums: &[f64]| {
                let expect: Vec<f64> = (0..n).map(|i| x[(i, j)]).collect();
                assert_eq!(col, &expect[..], "layout {which} column {j}");
                for g in 0..k {
                    assert_eq!(sums[g].to_bits(), want[(g, j)].to_bits(), "layout {which}");
                }
                seen.push(j);
            };
            let negative = grouped_sums_each_column(view, &groups, got.as_mut(), &mut after);
            assert_eq!(negative, want_negative);
            assert!(want_negative);
            assert_eq!(seen, (0..d).collect::<Vec<_>>(), "layout {which}");
            assert_eq!(got, want, "layout {which}");
        }
    }
}
