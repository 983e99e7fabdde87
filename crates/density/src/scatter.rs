//! Weighted mean and centred scatter `Σ w_i (x_i − m)(x_i − m)ᵀ` of a block of rows.
//!
//! This is the M-step of every full-covariance Gaussian, once per class and chunk. It used to be
//! one dot product per column for the mean, a buffer of `√w_i (x_i − m)` and faer's Gram product;
//! at d = 16 the dot products' single dependency chain and the product's packing of its operands
//! cost more than the arithmetic. Here the rows are copied once into a column-major block, the
//! means come from four independent accumulators per column, the block is centred in place, and
//! the lower triangle is accumulated in register tiles (4 × 4 accumulators on CPUs with 32 vector
//! registers, 4 × 2 with 16), each accumulator a vector of partial sums over rows, reduced once.
//!
//! The scatter is centred at the exact weighted mean of the block before any product, so it
//! keeps the accuracy of the two-pass formula however large the mean is. Sums run in an order
//! fixed by the block size and the SIMD width: a given machine gives the same bits for any thread
//! count (as with faer's products, the last bits may differ between instruction sets).

use crate::block::RowsAhead;
use crate::moments::{TOUCHED_COLUMNS, touch, touch_columns};
use faer::MatRef;

/// Weighted mean and scatter of the rows of `x` (n × d, any layout) with weights `w` (length n,
/// ≥ 0) summing to `total > 0`: writes `mean` (length d) and `scatter` (d × d column-major, both
/// triangles, exactly symmetric). `scratch` is reused between calls.
pub fn weighted_mean_and_scatter(
    x: MatRef<'_, f64>,
    weights: &[f64],
    total: f64,
    mean: &mut [f64],
    scatter: &mut [f64],
    scratch: &mut Vec<f64>,
) {
    debug_assert_eq!(weights.len(), x.nrows());
    mean_and_scatter(x, None, Some(weights), total, mean, scatter, scratch);
}

/// As [`weighted_mean_and_scatter`] for the rows `rows` of `x` only, read in place (no copy of
/// the subset first), with `weights` for those rows (`weights[t]` for `rows[t]`) or, when `None`,
/// weight one each (then `total` is `rows.len()`, and the products skip the weighting).
pub fn mean_and_scatter_of_rows(
    x: MatRef<'_, f64>,
    rows: &[usize],
    weights: Option<&[f64]>,
    total: f64,
    mean: &mut [f64],
    scatter: &mut [f64],
    scratch: &mut Vec<f64>,
) {
    debug_assert!(weights.is_none_or(|w| w.len() == rows.len()));
    mean_and_scatter(x, Some(rows), weights, total, mean, scatter, scratch);
}

/// The selected rows of `x` (all when `rows` is `None`) with `weights` for them (one each when
/// `None`): the one kernel behind both entry points.
pub(crate) fn mean_and_scatter(
    x: MatRef<'_, f64>,
    rows: Option<&[usize]>,
    weights: Option<&[f64]>,
    total: f64,
    mean: &mut [f64],
    scatter: &mut [f64],
    scratch: &mut Vec<f64>,
) {
    pulp::Arch::new().dispatch(Kernel {
        source: Source::Rows { x, rows, weights },
        total,
        mean,
        scatter,
        scratch,
    });
}

/// The rows of a few classes split out of a block in one pass, into the scatter kernel's own
/// format: one column-major buffer, each class a run of rows padded with zeros to a multiple
/// of 8, every column the same stride, on 64-byte boundaries. Each class's mean and scatter
/// ([`ClassBlocks::mean_and_scatter`]) are then computed in place, with no further copy.
///
/// Why: reading a class's rows of a column-major block by index costs a load of the index, a
/// load of the value and a store per value, and each class's pass reads every cache line of the
/// column again. At d = 16 and 64 with two classes that copy took about half of the scatter
/// kernel's time. With AVX-512, each column is read once, eight rows at a time, and each class's
/// values are packed out of the eight by its mask (`vcompresspd`): one load, one pack and one
/// store per class and eight values.
#[derive(Debug, Default)]
pub struct ClassBlocks {
    buf: Vec<f64>,
    /// Rows per column (the sum of the classes' padded rows).
    stride: usize,
    /// Columns (d, rounded up to whole tiles; the extra ones are zero).
    cols: usize,
    d: usize,
    /// Each class's first row in the buffer and its number of rows.
    classes: Vec<(usize, usize)>,
    /// Per class and group of 8 rows, the rows of the group in the class (bit i: row 8b + i).
    masks: Vec<u8>,
    /// Whether the last split centred each class at its mean ([`ClassBlocks::split_centred`]),
    /// and those means (class c at `means[c · d..(c + 1) · d]`).
    centred: bool,
    means: Vec<f64>,
    /// The padding columns' zeros, kept from chunk to chunk.
    zeroed: crate::block::ZeroedSpan,
}

/// Rows per class in [`ClassBlocks`] are padded to a multiple of this: whole vectors of any
/// width up to AVX-512's, and each class's rows on a 64-byte boundary.
const CLASS_ROWS_MULTIPLE: usize = 8;

impl ClassBlocks {
    /// Empty blocks, to be filled by [`ClassBlocks::split`] (and reused).
    pub fn new() -> Self {
        Self::default()
    }

    /// Splits the rows of `x` (any layout) by `labels` (one per row, each < `k`) into `k`
    /// classes, each class's rows in their order in `x`. Returns whether every value of `x` is
    /// finite: the split reads each value once, so a caller can skip a separate pass that
    /// checks them (which, on a block larger than the cache, would read it from memory twice).
    pub fn split(&mut self, x: MatRef<'_, f64>, labels: &[usize], k: usize) -> bool {
        self.split_body(x, labels, k, AfterColumn::Keep)
    }

    /// As [`ClassBlocks::split`], and each class's rows centred at its mean as each column is
    /// split, while the column is in cache; [`ClassBlocks::mean_and_scatter`] and
    /// [`ClassBlocks::means_and_pooled_scatter`] then give the same bits as after `split`,
    /// without a pass of their own over the blocks to centre them. Not for
    /// [`ClassBlocks::class_rows`], which reads the rows as they are.
    ///
    /// Why: after the split, each class's sums and centring read the whole chunk's blocks again
    /// from L2 (at d = 16 they are 512 KB), one column at a time; here they read the column
    /// just written, from L1.
    pub fn split_centred(&mut self, x: MatRef<'_, f64>, labels: &[usize], k: usize) -> bool {
        self.split_body(x, labels, k, AfterColumn::Centre)
    }

    fn split_body(
        &mut self,
        x: MatRef<'_, f64>,
        labels: &[usize],
        k: usize,
        after: AfterColumn,
    ) -> bool {
        let (n, d) = (x.nrows().min(labels.len()), x.ncols());
        let labels = &labels[..n];
        self.lay_out(
            d,
            crate::moments::group_counts(labels, k).into_iter(),
            &after,
        );
        let (stride, cols) = (self.stride, self.cols);
        let block = crate::block::aligned_prefix(&mut self.buf, cols * stride);
        let means = &mut self.means;
        let mut finite = true;
        // Each class's next free row, in the row-at-a-time path (one allocation per split).
        let mut next = Vec::with_capacity(k);
        #[cfg(target_arch = "x86_64")]
        if let Some(simd) = pulp::x86::V4::try_new() {
            let (whole, masks) = (n / 8 * 8, &mut self.masks);
            masks.clear();
            // Bit i of a mask: row 8b + i is in the class. One AVX-512 comparison per eight
            // labels (as a plain loop it was SSE2 code, eight comparisons and shifts).
            let ids: &[u64] = pulp::bytemuck::cast_slice(&labels[..whole]);
            let (ids, _) = <pulp::x86::V4 as pulp::Simd>::as_simd_u64s(ids);
            simd.vectorize(
                #[inline(always)]
                || {
                    use pulp::Simd;
                    for c in 0..k {
                        let class = simd.splat_u64s(c as u64);
                        masks.extend(ids.iter().map(|&v| simd.equal_u64s(v, class).0));
                    }
                },
            );
            let classes = &self.classes;
            // Blocks that keep their columns split four at a time, all four read together
            // (`split_columns_v4`): the split is the chunk's first read, not a pass after a
            // touch of the four, except where `packs_after_a_touch` (QDA fit at 2f59fb8,
            // PROFILE_COLD=cs, 3 alternated pairs: d = 16, K = 2 0.0147, 0.0148, 0.0157 ->
            // 0.0118, 0.0122, 0.0120 s; K = 4 0.0185, 0.0214, 0.0232 -> 0.0140, 0.0156,
            // 0.0162 s; d = 64, K = 2 0.0876, 0.0881, 0.0869 -> 0.0819, 0.0790, 0.0815 s).
            let together = k > 0;
            let touch_first = packs_after_a_touch();
            // Whether the four columns at `j` were asked for while the four before them were
            // packed.
            let mut asked = false;
            // Whether the group of four columns that `j` is in was split together.
            let mut split_together = false;
            for j in 0..d {
                if together && j % TOUCHED_COLUMNS == 0 {
                    let last = (j + TOUCHED_COLUMNS).min(d);
                    let srcs = crate::block::contiguous_columns(x, j..last);
                    split_together = srcs.is_some();
                    if let Some(srcs) = srcs {
                        if touch_first && !asked {
                            touch(&srcs, n);
                        }
                        // Where packing follows a touch, the next four columns are asked for
                        // as these are packed, and are not touched (see `packs_after_a_touch`).
                        let mut ahead: [&[f64]; TOUCHED_COLUMNS] = [&[]; TOUCHED_COLUMNS];
                        asked = false;
                        if touch_first
                            && let Some(next) = crate::block::contiguous_columns(
                                x,
                                last..(last + TOUCHED_COLUMNS).min(d),
                            )
                        {
                            for (slot, column) in ahead.iter_mut().zip(next) {
                                *slot = column;
                            }
                            asked = last < d;
                        }
                        // Where the split is the four columns' first read, it asks for their
                        // own rows further on (`profile qda-fit`, `PROFILE_COLD=cs`, medians of
                        // 21, alternated pairs on the Intel Xeon: d = 16, K = 4 10.9, 11.1 →
                        // 10.0, 9.7 ms; K = 3 10.2, 10.0, 9.9 → 9.9, 9.8, 9.6 ms; K = 2 9.78,
                        // 9.79, 9.79, 9.80, 9.60 → 10.06, 9.47, 9.61, 9.24, 9.03 ms; d = 8, K = 4
                        // 5.28 → 4.73 ms; d = 64, K = 4 70.5 → 65.6 ms, K = 2 even).
                        if !touch_first {
                            for (slot, column) in ahead.iter_mut().zip(&srcs) {
                                *slot = column.get(crate::block::LOOKAHEAD_ROWS..).unwrap_or(&[]);
                            }
                        }
                        let rooms = &mut block[j * stride..last * stride];
                        let mut rooms: Vec<&mut [f64]> = rooms.chunks_exact_mut(stride).collect();
                        finite &= simd.vectorize(
                            #[inline(always)]
                            || {
                                let to = (&masks[..], &classes[..]);
                                split_columns_v4(simd, &srcs, n, labels, to, &mut rooms, ahead)
                            },
                        );
                    }
                }
                if split_together {
                    let col = after.column(block, j, stride);
                    after.finish_column(col, classes, means, j, d);
                    continue;
                }
                // Columns that are not contiguous, one at a time: the chunk's first read is a
                // touch of four columns, four streams in flight rather than one (LDA fit at
                // d = 16, K = 2: 0.0143 -> 0.0136 s; d = 64 0.0884 -> 0.0841 s, before the
                // contiguous columns were split four together).
                if j % TOUCHED_COLUMNS == 0 {
                    touch_columns(x, j, n);
                }
                let col = after.column(block, j, stride);
                finite &= match x.col(j).try_as_col_major() {
                    Some(src) => {
                        let src = src.as_slice();
                        simd.vectorize(
                            #[inline(always)]
                            || split_column_v4(simd, src, labels, masks, classes, col),
                        )
                    }
                    None => split_column(|r| x[(r, j)], labels, classes, &mut next, col),
                };
                after.finish_column(col, classes, means, j, d);
            }
            return finite;
        }
        for j in 0..d {
            let col = after.column(block, j, stride);
            finite &= split_column(|r| x[(r, j)], labels, &self.classes, &mut next, col);
            after.finish_column(col, &self.classes, means, j, d);
        }
        finite
    }

    /// As [`ClassBlocks::split`], for any number of classes, from the rows of `x` listed class
    /// by class: class c is `order[start..start + len]` for its `(start, len)` in `ranges`.
    /// Returns whether every value of those rows is finite.
    pub fn split_by_order(
        &mut self,
        x: MatRef<'_, f64>,
        order: &[u32],
        ranges: &[(usize, usize)],
    ) -> bool {
        self.split_by_order_body(x, order, ranges, AfterColumn::Keep, (&[], &[]))
    }

    /// As [`ClassBlocks::split_by_order`], and each class's rows centred at its mean as each
    /// column is split, as [`ClassBlocks::split_centred`] does for packed classes: then
    /// [`ClassBlocks::mean_and_scatter`] and [`ClassBlocks::means_and_pooled_scatter`] give the
    /// bits they give after `split_by_order`, without a pass of their own over the blocks to
    /// take the means and centre them (at d = 64 a chunk's blocks are 2 MB, the whole L2).
    /// With AVX-512 it asks for `after_last` (the first column and the labels of the chunk split
    /// next; empty for none) into L2 while it gathers its own last column, as it asks for each
    /// next column of its own; the same values in the same places.
    pub fn split_by_order_centred(
        &mut self,
        x: MatRef<'_, f64>,
        order: &[u32],
        ranges: &[(usize, usize)],
        after_last: (&[f64], &[usize]),
    ) -> bool {
        self.split_by_order_body(x, order, ranges, AfterColumn::Centre, after_last)
    }

    fn split_by_order_body(
        &mut self,
        x: MatRef<'_, f64>,
        order: &[u32],
        ranges: &[(usize, usize)],
        after: AfterColumn,
        after_last: (&[f64], &[usize]),
    ) -> bool {
        let d = x.ncols();
        self.lay_out(d, ranges.iter().map(|&(_, len)| len), &after);
        let (stride, cols) = (self.stride, self.cols);
        let block = crate::block::aligned_prefix(&mut self.buf, cols * stride);
        let means = &mut self.means;
        let mut finite = true;
        #[cfg(not(target_arch = "x86_64"))]
        let _ = after_last;
        // AVX-512 gathers eight rows per instruction where the scalar copy takes a load of the
        // index, a load of the value and a store for each; they may read only inside the
        // column, so every listed row is checked to be in it first, once for all columns.
        #[cfg(target_arch = "x86_64")]
        let gathers = pulp::x86::V4::try_new().filter(|&simd| {
            // The gathers' offsets are signed 32-bit.
            let n = x.nrows().min(1 << 31);
            // Each class's largest row, as a vector pass (the flattened scalar check had 5% of
            // the samples of QDA's fit at d = 2, K = 10).
            simd.vectorize(
                #[inline(always)]
                || {
                    ranges.iter().all(|&(start, len)| {
                        let rows = &order[start..start + len];
                        len == 0 || (rows.iter().fold(0, |m, &r| m.max(r)) as usize) < n
                    })
                },
            )
        });
        for j in 0..d {
            let col = after.column(block, j, stride);
            let classes = &self.classes;
            let src = x.col(j).try_as_col_major().map(|c| c.as_slice());
            // With AVX-512 the gathers check the values they gather. Except on AMD's Zen 5 and
            // later, they are each column's first read, and while they gather one column they
            // ask for the next one's rows into L2, in order, so that its gathers find them
            // there. Against a first read of four columns side by side for a finiteness check,
            // then the gathers from cache (Intel Xeon, QDA fit, `PROFILE_COLD=cs`, medians of
            // 31, four alternated pairs, d = 16, K = 10: 12.61, 12.69, 12.35, 12.75 → 11.77,
            // 11.89, 12.00, 12.36 ms); without the request the gathers wait on memory and are
            // as slow as the check. While they gather the last column they ask for the first
            // column and the labels of the chunk split next (`after_last`), whose reads
            // otherwise waited on memory: QDA fit d = 16, K = 10, medians of 31, seven
            // alternated pairs: 12.42, 12.53, 12.23, 12.49, 12.86, 12.03, 11.68 → 12.42, 12.22,
            // 11.86, 12.37, 12.29, 11.59, 11.70 ms. On Zen 5, where the split by order was
            // tuned with that first read (seventy-sixth round), four columns are still read
            // side by side first.
            #[cfg(target_arch = "x86_64")]
            if let (Some(simd), Some(src)) = (gathers, src) {
                let (mut next, mut next_labels): (&[f64], &[usize]) = (&[], &[]);
                if gathers_are_fast() {
                    let last = (j + TOUCHED_COLUMNS).min(d);
                    if j % TOUCHED_COLUMNS == 0
                        && let Some(srcs) = crate::block::contiguous_columns(x, j..last)
                    {
                        finite &= simd.vectorize(
                            #[inline(always)]
                            || columns_are_finite_v4(simd, &srcs),
                        );
                    }
                } else if j + 1 < d {
                    next = x
                        .col(j + 1)
                        .try_as_col_major()
                        .map_or(&[], |c| c.as_slice());
                } else {
                    (next, next_labels) = after_last;
                }
                // Centred, each class is summed and centred as soon as it is gathered, from L1.
                let centre = match after {
                    AfterColumn::Centre => Some((&mut means[..], j, d)),
                    AfterColumn::Keep => None,
                };
                finite &= simd.vectorize(
                    #[inline(always)]
                    || {
                        // SAFETY: every row listed in `ranges` is below `x.nrows()`, `src`'s
                        // length, and 2^31 (checked above, for `gathers` to be `Some`).
                        #[allow(unsafe_code)]
                        unsafe {
                            gather_by_order_v4(
                                simd,
                                src,
                                order,
                                ranges,
                                classes,
                                col,
                                (next, next_labels),
                                centre,
                            )
                        }
                    },
                );
                continue;
            }
            // Otherwise the chunk's first read is a touch of four columns (four streams in
            // flight), then each column is checked in order, with SIMD, before its copy by
            // index, whose scattered reads then find it in cache.
            if j % TOUCHED_COLUMNS == 0 {
                touch_columns(x, j, x.nrows());
            }
            finite &= match src {
                Some(src) => {
                    let finite = pulp::Arch::new().dispatch(
                        #[inline(always)]
                        || all_finite(src),
                    );
                    place_by_order(|r| src[r], order, ranges, classes, col);
                    finite
                }
                None => {
                    place_by_order(|r| x[(r, j)], order, ranges, classes, col);
                    let listed = ranges
                        .iter()
                        .flat_map(|&(start, len)| &order[start..start + len]);
                    listed.fold(true, |a, &r| a & (x[(r as usize, j)].abs() < f64::INFINITY))
                }
            };
            after.finish_column(col, classes, means, j, d);
        }
        finite
    }

    /// Places classes of `lens` rows for `d` columns, and zeros the padding columns; when
    /// `after` centres, makes room for the classes' means.
    fn lay_out(&mut self, d: usize, lens: impl Iterator<Item = usize>, after: &AfterColumn) {
        let centre = matches!(after, AfterColumn::Centre);
        self.d = d;
        self.cols = d.div_ceil(TILE_J) * TILE_J;
        self.classes.clear();
        let (mut stride, mut rows) = (0, 0);
        for len in lens {
            self.classes.push((stride, len));
            // A gap of one vector after each class's padding: a packed store may run up to 7
            // values past the class's last row, and must not reach the next class's rows,
            // which may already be written.
            stride += len.div_ceil(CLASS_ROWS_MULTIPLE) * CLASS_ROWS_MULTIPLE + CLASS_ROWS_MULTIPLE;
            rows += len;
        }
        self.stride = stride;
        // Room for any split of as many rows into as many classes (each class's padding and gap
        // at most 2 · 8 − 1 rows), so that the next chunk's split, whose classes differ in size,
        // finds the buffer big enough where it is, with the padding this one zeros.
        let most = rows + self.classes.len() * (2 * CLASS_ROWS_MULTIPLE - 1);
        debug_assert!(stride <= most);
        let room = crate::block::aligned_prefix(&mut self.buf, self.cols * most);
        let block = &mut room[..self.cols * stride];
        self.zeroed
            .clear(block, d.min(self.cols) * stride..self.cols * stride);
        self.centred = centre;
        self.means.clear();
        if centre {
            self.means.resize(self.classes.len() * d, 0.0);
        }
    }

    /// Whether the padding columns (d to the whole tile) of the last split's layout are zero.
    #[cfg(test)]
    fn padding_is_zero(&mut self) -> bool {
        padding_columns_are_zero(&mut self.buf, self.d.min(self.cols), self.cols, self.stride)
    }

    /// Number of rows of class `c`.
    pub fn class_len(&self, c: usize) -> usize {
        self.classes.get(c).map_or(0, |&(_, n)| n)
    }

    /// Class `c`'s rows as the split laid them out (`class_len(c)` × d, each column
    /// contiguous), for kernels other than the scatter's (an unknown class has no rows).
    pub fn class_rows(&mut self, c: usize) -> MatRef<'_, f64> {
        if self.cols == 0 {
            // No columns.
            return MatRef::from_column_major_slice(&[], 0, self.d);
        }
        let (first, n) = self.classes.get(c).copied().unwrap_or((0, 0));
        let (d, stride) = (self.d, self.stride);
        let block = crate::block::aligned_prefix(&mut self.buf, self.cols * stride);
        match d {
            0 => MatRef::from_column_major_slice(&[], n, 0),
            _ => MatRef::from_column_major_slice_with_stride(
                &block[first..(d - 1) * stride + first + n],
                n,
                d,
                stride,
            ),
        }
    }

    /// The mean and scatter (d × d column-major, both triangles) of class `c`'s rows, each of
    /// weight one: the bits [`mean_and_scatter_of_rows`] gives for the same rows. The class's
    /// rows are centred in place, so this is called once per split. `scratch` is reused
    /// between calls. An empty (or unknown) class gives zeros.
    pub fn mean_and_scatter(
        &mut self,
        c: usize,
        mean: &mut [f64],
        scatter: &mut [f64],
        scratch: &mut Vec<f64>,
    ) {
        mean.fill(0.0);
        scatter.fill(0.0);
        let kept = self.cols > 0;
        let Some(&(first, n)) = self.classes.get(c).filter(|&&(_, n)| n > 0 && kept) else {
            return;
        };
        let block = crate::block::aligned_prefix(&mut self.buf, self.cols * self.stride);
        if self.centred {
            // Centred by the split: the mean it took, and the unit-weight tiles alone.
            mean.copy_from_slice(&self.means[c * self.d..(c + 1) * self.d]);
            pulp::Arch::new().dispatch(CentredScatter {
                y: &block[first..],
                stride: self.stride,
                rows: n,
                d: self.d,
                scatter,
                scratch,
            });
            return;
        }
        pulp::Arch::new().dispatch(Kernel {
            source: Source::Block {
                y: &mut block[first..],
                stride: self.stride,
                n,
                d: self.d,
            },
            total: n as f64,
            mean,
            scatter,
            scratch,
        });
    }

    /// Each class's mean (class c at `means[c·d..(c + 1)·d]`, zeros for an empty class) and the
    /// pooled within-class scatter Σ_c Σ_{i ∈ c} (x_i − m_c)(x_i − m_c)ᵀ (d × d column-major,
    /// both triangles), every row of weight one. This is what a shared covariance (LDA) needs:
    /// each class is centred in place at its own mean, and the tiles then run once over the
    /// whole block, rather than once per class with K sets of partial passes, reductions and
    /// d × d results to merge. Like [`ClassBlocks::mean_and_scatter`], this centres the rows in
    /// place, so it is called once per split (and not with it); after a centred split
    /// ([`ClassBlocks::split_by_order_centred`]) it takes the means the split took, and runs the
    /// tiles alone.
    pub fn means_and_pooled_scatter(
        &mut self,
        means: &mut [f64],
        scatter: &mut [f64],
        scratch: &mut Vec<f64>,
    ) {
        let d = self.d;
        debug_assert_eq!(means.len(), self.classes.len() * d);
        debug_assert_eq!(scatter.len(), d * d);
        if self.cols == 0 {
            // No columns.
            means.fill(0.0);
            scatter.fill(0.0);
            return;
        }
        let block = crate::block::aligned_prefix(&mut self.buf, self.cols * self.stride);
        let centred = self.centred.then_some(&self.means[..]);
        pulp::Arch::new().dispatch(Pooled {
            y: block,
            stride: self.stride,
            d,
            classes: &self.classes,
            centred,
            means,
            scatter,
            scratch,
        });
    }
}

/// Whether columns `d..cols` of a block of `stride` rows per column laid out in `buf` are zero.
#[cfg(test)]
fn padding_columns_are_zero(buf: &mut Vec<f64>, d: usize, cols: usize, stride: usize) -> bool {
    let block = crate::block::aligned_prefix(buf, cols * stride);
    block[d * stride..].iter().all(|&v| v == 0.0)
}

/// [`ClassBlocks::means_and_pooled_scatter`]'s kernel.
struct Pooled<'a> {
    y: &'a mut [f64],
    stride: usize,
    d: usize,
    classes: &'a [(usize, usize)],
    /// The means a centred split took (the rows already centred at them).
    centred: Option<&'a [f64]>,
    means: &'a mut [f64],
    scatter: &'a mut [f64],
    scratch: &'a mut Vec<f64>,
}

impl pulp::WithSimd for Pooled<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, simd: S) {
        let Pooled {
            y,
            stride,
            d,
            classes,
            centred,
            means,
            scatter,
            scratch,
        } = self;
        // Weights of one: by their length, the rows the tiles read (every row of the block; the
        // split zeroed the padding and the gaps between classes). The means' sums are
        // `unit_sum`s (padding rows are zero, so they add nothing).
        let ones = crate::block::aligned_prefix(scratch, stride);
        ones.fill(1.0);
        if let Some(taken) = centred {
            means.copy_from_slice(taken);
        } else {
            for (c, &(first, n)) in classes.iter().enumerate() {
                let rows = n.div_ceil(S::F64_LANES) * S::F64_LANES;
                for (j, m) in means[c * d..(c + 1) * d].iter_mut().enumerate() {
                    let col = &mut y[j * stride + first..j * stride + first + rows];
                    *m = if n == 0 {
                        0.0
                    } else {
                        let (yv, _) = S::as_simd_f64s(col);
                        unit_sum(simd, yv) / n as f64
                    };
                    let centre = *m;
                    col[..n].iter_mut().for_each(|v| *v -= centre);
                }
            }
        }
        unit_tiles(simd, y, stride, d, ones, scatter);
    }
}

/// A block of rows laid out once for the weighted statistics of several weight vectors, such
/// as the classes of a soft M-step or of the dominance diagnostic. Each class used to copy the
/// block into the kernel's layout and centre it there; here the block is copied once, and each
/// class is centred at its own mean a pass of rows at a time inside the kernel (full-covariance
/// EM at d = 64, K = 10: see BENCHMARKS.md, twenty-third round).
#[derive(Debug, Default)]
pub struct RowBlock {
    buf: Vec<f64>,
    /// The padding columns' zeros, kept from chunk to chunk.
    zeroed: crate::block::ZeroedSpan,
    /// Rows per column: `n` rounded up to a multiple of 8, the rows past `n` zero.
    stride: usize,
    n: usize,
    d: usize,
    /// [`RowBlock::load_centred_by_group`]'s groups narrowed to a byte each, kept from chunk
    /// to chunk.
    narrow_groups: Vec<u8>,
}

impl RowBlock {
    /// An empty block, to be filled by [`RowBlock::load`] (and reused).
    pub fn new() -> Self {
        Self::default()
    }

    /// Lays out the rows of `x` (any layout).
    pub fn load(&mut self, x: MatRef<'_, f64>) {
        let (n, d) = (x.nrows(), x.ncols());
        let stride = crate::block::spread_row_capacity(n);
        let cols = d.div_ceil(TILE_J) * TILE_J;
        let y = crate::block::aligned_prefix(&mut self.buf, cols * stride);
        self.zeroed.clear(y, d * stride..cols * stride);
        crate::block::gather_columns(x, None, None, stride, y);
        (self.stride, self.n, self.d) = (stride, n, d);
    }

    /// Rows in the block.
    pub fn nrows(&self) -> usize {
        self.n
    }

    /// Whether the padding columns (d to the whole tile) are zero.
    #[cfg(test)]
    fn padding_is_zero(&mut self) -> bool {
        let cols = self.d.div_ceil(TILE_J) * TILE_J;
        padding_columns_are_zero(&mut self.buf, self.d, cols, self.stride)
    }

    /// Lays out the rows of `x` (any layout), each less its group's mean: row i becomes
    /// x_i − m_g for g = `groups[i]` < k (k = `sums.nrows()`; a row of any other group becomes
    /// zero), where m_g = `sums[(g, ·)]` / `counts[g]` after the group sums of
    /// [`crate::moments::grouped_sums`] (their bits, and its return: whether a value is below
    /// zero) are added to `sums` (zeros on entry, for those means). Then
    /// [`RowBlock::centred_scatter`] gives the pooled within-group scatter.
    ///
    /// Why: a labeled fit of a shared covariance (LDA) needs each class's mean and
    /// Σ_c Σ_{i ∈ c} (x_i − m_c)(x_i − m_c)ᵀ. Split into class blocks ([`ClassBlocks`]), each
    /// value is packed out by its class's mask, then summed, then centred in place: three passes
    /// over the block after its read. Here each column's sums are taken as it is read from
    /// memory, and the column is centred by its rows' groups into the block at once, while it is
    /// still in cache; rows keep their order, so any number of groups takes one pass.
    pub fn load_centred_by_group(
        &mut self,
        x: MatRef<'_, f64>,
        groups: &[usize],
        counts: &[usize],
        mut sums: faer::MatMut<'_, f64>,
    ) -> bool {
        let (n, d, k) = (x.nrows().min(groups.len()), x.ncols(), sums.nrows());
        debug_assert_eq!(counts.len(), k);
        let groups = &groups[..n];
        let (y, narrow, stride) = self.lay_out_by_group(n, d, groups, k);
        let mut means = vec![0.0; k];
        let mut centre = |j: usize, col: &[f64], sums: &[f64]| {
            for ((m, &s), &c) in means.iter_mut().zip(sums).zip(counts) {
                *m = if c == 0 { 0.0 } else { s / c as f64 };
            }
            let out = &mut y[j * stride..(j + 1) * stride];
            out[n..].fill(0.0);
            let out = &mut out[..n];
            #[cfg(target_arch = "x86_64")]
            if narrow.len() == n
                && let Some(kernel) = crate::moments::ByRows::new()
            {
                centre_by_group_with(kernel, col, groups, narrow, &means, out);
                return;
            }
            centre_by_group(col, groups, &means, out);
        };
        crate::moments::grouped_sums_each_column(
            x.subrows(0, n),
            groups,
            sums.as_mut(),
            &mut centre,
        )
    }

    /// Lays out a block of `n` rows and `d` columns to be centred by group (its padding columns
    /// zeroed) and narrows each row's group to a byte (for [`centre_by_group_with`]): each
    /// column's centring reads every row's group, and bytes are an eighth of the reads of
    /// `usize` groups (a group past the `k` means is `u8::MAX`, centred to zero; past
    /// [`PERMUTED_MAX_GROUPS`] groups, no bytes). Returns the block, the bytes and the block's
    /// stride.
    fn lay_out_by_group(
        &mut self,
        n: usize,
        d: usize,
        groups: &[usize],
        k: usize,
    ) -> (&mut [f64], &[u8], usize) {
        let stride = crate::block::spread_row_capacity(n);
        let cols = d.div_ceil(TILE_J) * TILE_J;
        (self.stride, self.n, self.d) = (stride, n, d);
        narrow_groups(groups, k, &mut self.narrow_groups);
        let y = crate::block::aligned_prefix(&mut self.buf, cols * stride);
        self.zeroed.clear(y, d * stride..cols * stride);
        (y, &self.narrow_groups, stride)
    }

    /// As [`RowBlock::load_centred_by_group`], with the group sums taken by rows
    /// ([`crate::moments::grouped_moments_by_rows`]' sums: in row order, one addition after
    /// another), for many groups: writes group g's mean of column j to `means[g · d + j]` (0 for
    /// an empty group) and lays out each row less its group's mean. Returns false, doing
    /// nothing, without AVX2, with more than 16 groups or with columns that are not
    /// contiguous.
    ///
    /// Why: the sums by mask cost K operations per value, so a labeled LDA fit of many classes
    /// split each chunk by class (a copy of every value by index) to centre it. Here eight
    /// columns' sums are taken by rows transposed in registers, at a cost per value that does
    /// not grow with K, and the eight are centred (each row's mean picked by its group,
    /// `vpermt2pd`, or `vpermps` and blends with AVX2) while they are in L2.
    pub fn load_centred_by_rows(
        &mut self,
        x: MatRef<'_, f64>,
        groups: &[usize],
        counts: &[usize],
        means: &mut [f64],
    ) -> bool {
        let (n, d, k) = (x.nrows().min(groups.len()), x.ncols(), counts.len());
        debug_assert_eq!(means.len(), k * d);
        #[cfg(target_arch = "x86_64")]
        if let Some(kernel) = crate::moments::ByRows::new()
            && k <= PERMUTED_MAX_GROUPS
            && let Some(columns) = crate::block::contiguous_columns(x, 0..d)
        {
            let groups = &groups[..n];
            let (y, narrow, stride) = self.lay_out_by_group(n, d, groups, k);
            let (mut acc, mut column_means) = (vec![0.0; k * 8], vec![0.0; k]);
            for j0 in (0..d).step_by(8) {
                let block = &columns[j0..(j0 + 8).min(d)];
                // The chunk's first read: it asks for its own rows further on (`profile
                // lda-fit`, `PROFILE_COLD=cs`, medians of 21, two alternated pairs on the Intel
                // Xeon: d = 16, K = 10 10.4, 10.7 → 9.95, 9.79 ms; d = 8 5.08, 5.21 → 4.74, 4.63
                // ms; at d = 64 even).
                let ahead = RowsAhead::further_on(block, groups);
                kernel.pass::<false>(block, groups, &mut acc, &[], ahead);
                for (c, col) in block.iter().enumerate() {
                    let j = j0 + c;
                    for (g, &count) in counts.iter().enumerate() {
                        let mean = if count == 0 {
                            0.0
                        } else {
                            acc[g * 8 + c] / count as f64
                        };
                        (column_means[g], means[g * d + j]) = (mean, mean);
                    }
                    let out = &mut y[j * stride..(j + 1) * stride];
                    out[n..].fill(0.0);
                    let out = &mut out[..n];
                    centre_by_group_with(kernel, &col[..n], groups, narrow, &column_means, out);
                }
            }
            return true;
        }
        let _ = (n, d, k, groups, means);
        false
    }

    /// The pooled within-group scatter and the group means of the rows of `x` in one pass, each
    /// row less its group's shift: the shift s_g is the mean of group g's first
    /// 8 rows (fewer if it has fewer), e_t = x_t − s_g is centred a pass of rows at
    /// a time into a buffer in L1, added to its group's sums Σe and taken by the tiles into
    /// Σ e eᵀ; then m_g = s_g + Σe / c_g and S = Σ e eᵀ − Σ_g (Σe)(Σe / c_g)ᵀ. Writes the means
    /// (k × d, row-major, zero for an empty group) and S (d × d column-major, both triangles).
    /// `counts` are the groups' rows.
    ///
    /// Returns false, with the outputs to be ignored, where the shifts cost more than about a
    /// bit and a half: for some column the correction Σ_g c_g (m_g − s_g)² passes 3 × its
    /// scatter (or either is not finite), and where the kernel is missing (no AVX-512, columns
    /// that are not contiguous, more than [`SHIFTED_MAX_GROUPS`] groups). The caller then
    /// takes the two centred passes ([`RowBlock::load_centred_by_group`] and
    /// [`RowBlock::centred_scatter`]).
    ///
    /// Why: the two passes read the chunk from memory for the sums, then centre it into a
    /// block once the means are known, then run the tiles over the block: three passes that
    /// follow each other, the first at one core's read rate with nothing else to do. Here the
    /// rows go from memory through L1 into the tiles once.
    pub fn shifted_pooled_scatter(
        &mut self,
        x: MatRef<'_, f64>,
        groups: &[usize],
        counts: &[usize],
        means: &mut [f64],
        scatter: &mut [f64],
        scratch: &mut Vec<f64>,
    ) -> bool {
        let (n, d, k) = (x.nrows().min(groups.len()), x.ncols(), counts.len());
        debug_assert_eq!(means.len(), k * d);
        debug_assert_eq!(scatter.len(), d * d);
        #[cfg(target_arch = "x86_64")]
        if let Some(simd) = pulp::x86::V4::try_new()
            && (1..=SHIFTED_MAX_GROUPS).contains(&k)
            && let Some(columns) = crate::block::contiguous_columns(x, 0..d)
        {
            let groups = &groups[..n];
            narrow_groups(groups, k, &mut self.narrow_groups);
            // Each group's shift, column-major (column j's k shifts together).
            let mut shifts = vec![0.0; d * k];
            let mut taken = [0usize; SHIFTED_MAX_GROUPS];
            let mut left = k;
            for (t, &g) in groups.iter().enumerate() {
                if g < k && taken[g] < SHIFT_ROWS {
                    for (j, col) in columns.iter().enumerate() {
                        shifts[j * k + g] += col[t];
                    }
                    taken[g] += 1;
                    if taken[g] == SHIFT_ROWS {
                        left -= 1;
                        if left == 0 {
                            break;
                        }
                    }
                }
            }
            for j in 0..d {
                for g in 0..k {
                    if taken[g] > 0 {
                        shifts[j * k + g] /= taken[g] as f64;
                    }
                }
            }
            // Σe of each group, row-major (k × d).
            let mut sums = vec![0.0; k * d];
            let args = ShiftedScatter {
                columns: &columns,
                groups,
                ids: &self.narrow_groups,
                shifts: &shifts,
                sums: &mut sums,
                scatter,
                scratch,
            };
            match k {
                1 => simd.vectorize(
                    #[inline(always)]
                    move || shifted_tiles_v4::<1>(simd, args),
                ),
                2 => simd.vectorize(
                    #[inline(always)]
                    move || shifted_tiles_v4::<2>(simd, args),
                ),
                3 => simd.vectorize(
                    #[inline(always)]
                    move || shifted_tiles_v4::<3>(simd, args),
                ),
                _ => simd.vectorize(
                    #[inline(always)]
                    move || shifted_tiles_v4::<4>(simd, args),
                ),
            }
            // S −= Σ_g (Σe_g)(Σe_g / c_g)ᵀ, and each column's correction against its scatter.
            for j in 0..d {
                for l in 0..=j {
                    let mut correction = 0.0;
                    for (g, &c) in counts.iter().enumerate() {
                        if c > 0 {
                            correction += sums[g * d + j] * (sums[g * d + l] / c as f64);
                        }
                    }
                    let s = scatter[l * d + j] - correction;
                    if l == j && !(correction.is_finite() && correction <= 3.0 * s) {
                        return false;
                    }
                    scatter[l * d + j] = s;
                    scatter[j * d + l] = s;
                }
            }
            for (g, &c) in counts.iter().enumerate() {
                for j in 0..d {
                    means[g * d + j] = match c {
                        0 => 0.0,
                        c => shifts[j * k + g] + sums[g * d + j] / c as f64,
                    };
                }
            }
            return true;
        }
        let _ = (n, d, k, groups, counts, means, scatter, scratch);
        false
    }

    /// Σ_t y_t y_tᵀ of the block's rows as laid out (d × d column-major, both triangles), each of
    /// weight one: after [`RowBlock::load_centred_by_group`], the pooled within-group scatter.
    pub fn centred_scatter(&mut self, scatter: &mut [f64], scratch: &mut Vec<f64>) {
        debug_assert_eq!(scatter.len(), self.d * self.d);
        let cols = self.d.div_ceil(TILE_J) * TILE_J;
        let y = crate::block::aligned_prefix(&mut self.buf, cols * self.stride);
        pulp::Arch::new().dispatch(CentredScatter {
            y,
            stride: self.stride,
            rows: self.stride,
            d: self.d,
            scatter,
            scratch,
        });
    }

    /// The mean and scatter of the block's rows with `weights` (one per row, ≥ 0) summing to
    /// `total > 0`: the bits [`weighted_mean_and_scatter`] gives for the same rows and weights.
    /// The block is not changed, so any number of weight vectors can follow one `load`.
    pub fn weighted_mean_and_scatter(
        &mut self,
        weights: &[f64],
        total: f64,
        mean: &mut [f64],
        scatter: &mut [f64],
        scratch: &mut Vec<f64>,
    ) {
        self.weighted_means_and_scatters(
            &mut [ClassMoments {
                weights,
                total,
                mean,
                scatter,
            }],
            scratch,
        );
    }

    /// [`RowBlock::weighted_mean_and_scatter`] for each of `classes` (weights, total, and where
    /// its mean and scatter go), each with the bits of that call alone, the block read once for
    /// a group of classes rather than once per class: their means four classes per read of a
    /// pass of rows (`class_means`), their scatters a pass of rows at a time for the whole group
    /// (`tiles_each`). The block is not changed.
    pub fn weighted_means_and_scatters(
        &mut self,
        classes: &mut [ClassMoments<'_>],
        scratch: &mut Vec<f64>,
    ) {
        let cols = self.d.div_ceil(TILE_J) * TILE_J;
        let y = crate::block::aligned_prefix(&mut self.buf, cols * self.stride);
        for group in classes.chunks_mut(CLASSES_PER_READ) {
            debug_assert!(group.iter().all(|c| c.weights.len() == self.n));
            pulp::Arch::new().dispatch(LaidEach {
                y,
                stride: self.stride,
                n: self.n,
                d: self.d,
                classes: group,
                scratch,
            });
        }
    }

    /// Each class's weighted mean (class c at `means[c·d..(c + 1)·d]`, the bits of
    /// [`RowBlock::weighted_mean_and_scatter`] with `weights[c]`; zeros when `totals[c]` is not
    /// positive) and the pooled scatter Σ_c Σ_t w_ct (y_t − m_c)(y_t − m_c)ᵀ (d × d
    /// column-major, both triangles), for `weights[c]` (one per row, ≥ 0) summing to `totals[c]`.
    ///
    /// Why: a shared covariance from soft responsibilities (LDA's EM) needs only the sum of the K
    /// class scatters, and forming each one costs d(d + 1)/2 products per row and class. With
    /// s_t = Σ_c w_ct and the row's own centre ȳ_t = Σ_c w_ct m_c / s_t, the sum is
    ///
    ///   Σ_t s_t (y_t − ȳ_t)(y_t − ȳ_t)ᵀ + Σ_{c<e} P_ce (m_c − m_e)(m_c − m_e)ᵀ,
    ///   P_ce = Σ_t w_ct w_et / s_t,
    ///
    /// (the cross terms vanish because Σ_c w_ct (ȳ_t − m_c) = 0, and Σ_c w_ct (m_c − ȳ_t)(…)ᵀ
    /// is the pairwise form of a weighted variance), one scatter instead of K. Both terms are
    /// sums of positive semi-definite pieces, each centred before any product: no difference of
    /// large sums, unlike Σ w y yᵀ − N m mᵀ (scikit-learn's tied `GaussianMixture`), so it keeps
    /// the accuracy of the per-class two-pass form. Weights below `NEGLIGIBLE_WEIGHT` of their
    /// class's total are read as zero, as by the per-class kernel. The block is not changed.
    pub fn pooled_scatter(
        &mut self,
        weights: &[&[f64]],
        totals: &[f64],
        means: &mut [f64],
        scatter: &mut [f64],
        scratch: &mut Vec<f64>,
    ) {
        let (n, d, k) = (self.n, self.d, weights.len());
        debug_assert_eq!(totals.len(), k);
        debug_assert_eq!(means.len(), k * d);
        debug_assert_eq!(scatter.len(), d * d);
        let cols = d.div_ceil(TILE_J) * TILE_J;
        let y = crate::block::aligned_prefix(&mut self.buf, cols * self.stride);
        pulp::Arch::new().dispatch(PooledSoft {
            y,
            stride: self.stride,
            n,
            d,
            weights,
            totals,
            means,
            scatter,
            scratch,
        });
    }
}

/// One weighting of a [`RowBlock`]'s rows for [`RowBlock::weighted_means_and_scatters`]:
/// `weights` (one per row, ≥ 0) summing to `total > 0`, and where its mean (length d) and
/// scatter (d × d column-major, both triangles) go.
#[derive(Debug)]
pub struct ClassMoments<'a> {
    pub weights: &'a [f64],
    pub total: f64,
    pub mean: &'a mut [f64],
    pub scatter: &'a mut [f64],
}

/// Classes whose scatters share the reads of a block ([`RowBlock::weighted_means_and_scatters`]):
/// their accumulators wait in L2 between passes (139 KB a class at d = 64).
const CLASSES_PER_READ: usize = 4;

/// [`RowBlock::weighted_means_and_scatters`]' kernel for one group of classes.
struct LaidEach<'a, 'c> {
    y: &'a [f64],
    stride: usize,
    n: usize,
    d: usize,
    classes: &'a mut [ClassMoments<'c>],
    scratch: &'a mut Vec<f64>,
}

impl pulp::WithSimd for LaidEach<'_, '_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, simd: S) {
        let LaidEach {
            y,
            stride,
            n,
            d,
            classes,
            scratch,
        } = self;
        // Each class's weights as the kernel reads copied rows' (`Source::Rows`): whole
        // vectors, negligible weights zero, the padding rows zero. A row block's stride is a
        // multiple of 8, so of every vector width.
        let rows = n.div_ceil(S::F64_LANES) * S::F64_LANES;
        debug_assert!(rows <= stride);
        let k = classes.len();
        let w_all = crate::block::aligned_prefix(scratch, k * rows);
        for (w, class) in w_all.chunks_exact_mut(rows).zip(classes.iter()) {
            copy_weights(&mut w[..n], class.weights, class.total);
            w[n..].fill(0.0);
        }
        let w_all = &*w_all;
        // The means, each the bits of `weighted_scatter`'s `weighted_sum`.
        let all: Vec<usize> = (0..k).collect();
        let totals: Vec<f64> = classes.iter().map(|c| c.total).collect();
        let mut means = vec![0.0; k * d];
        simd.vectorize(ClassMeans {
            y,
            stride,
            d,
            weights: (w_all, rows),
            live: &all,
            group: CLASSES_PER_READ,
            totals: &totals,
            means: &mut means,
        });
        for (class, m) in classes.iter_mut().zip(means.chunks_exact(d.max(1))) {
            class.mean[..d].copy_from_slice(m);
        }
        let cols = d.div_ceil(TILE_J) * TILE_J;
        let (mut centres, mut outs) = (Vec::with_capacity(k), Vec::with_capacity(k));
        for (c, class) in classes.iter_mut().enumerate() {
            centres.push(Centre {
                w: &w_all[c * rows..(c + 1) * rows],
                n,
                mean: &*class.mean,
                shifts: None,
            });
            outs.push(&mut *class.scatter);
        }
        if S::REGISTER_COUNT >= 32 {
            tiles_each::<S, 4, false>(simd, y, stride, d, cols, &centres, &mut outs);
        } else {
            tiles_each::<S, 2, false>(simd, y, stride, d, cols, &centres, &mut outs);
        }
    }
}

/// [`RowBlock::centred_scatter`]'s kernel, and [`ClassBlocks::mean_and_scatter`]'s after a
/// centred split: the first `rows` rows of the block (rounded up to whole vectors; those past
/// the data are zero).
struct CentredScatter<'a> {
    y: &'a [f64],
    stride: usize,
    rows: usize,
    d: usize,
    scatter: &'a mut [f64],
    scratch: &'a mut Vec<f64>,
}

impl pulp::WithSimd for CentredScatter<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, simd: S) {
        let CentredScatter {
            y,
            stride,
            rows,
            d,
            scatter,
            scratch,
        } = self;
        // The rows as `centre_and_scatter` reads them: whole vectors, the padding rows zero.
        let rows = rows.div_ceil(S::F64_LANES) * S::F64_LANES;
        debug_assert!(rows <= stride);
        let ones = crate::block::aligned_prefix(scratch, rows);
        ones.fill(1.0);
        unit_tiles(simd, y, stride, d, ones, scatter);
    }
}

/// Most groups [`RowBlock::shifted_pooled_scatter`] takes: each vector of rows is added to each
/// group's sums under a mask as it is centred, K additions a vector. `profile lda-fit 16 K`,
/// `PROFILE_COLD=cs`, p10 of 126 alternated runs on the Zen 4 EPYC, against the two centred
/// passes: K = 3 8.17 → 7.25 ms, K = 4 7.96 → 7.32 ms, K = 6 7.64 → 8.38 ms, K = 8 7.93 → 8.82
/// ms. At K = 10 the sums by rows of each pass from L1 (the two passes' first read) were
/// slower too: 7.91 → 8.47 ms.
pub const SHIFTED_MAX_GROUPS: usize = 4;

/// Rows of a group whose mean is its shift in [`RowBlock::shifted_pooled_scatter`]: the shift is
/// then within about σ / √8 of the group's mean, so the correction is about an eighth of the
/// scatter.
const SHIFT_ROWS: usize = 8;

/// [`RowBlock::shifted_pooled_scatter`]'s arguments.
#[cfg(target_arch = "x86_64")]
struct ShiftedScatter<'a> {
    columns: &'a [&'a [f64]],
    groups: &'a [usize],
    ids: &'a [u8],
    /// Column-major: column j's shifts at `j · k..`.
    shifts: &'a [f64],
    /// Row-major (k × d), zeros on entry.
    sums: &'a mut [f64],
    scatter: &'a mut [f64],
    scratch: &'a mut Vec<f64>,
}

/// [`RowBlock::shifted_pooled_scatter`]'s pass with AVX-512, for `K` groups.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn shifted_tiles_v4<const K: usize>(simd: pulp::x86::V4, args: ShiftedScatter<'_>) {
    const { assert!(K >= 1 && K <= SHIFTED_MAX_GROUPS) };
    use pulp::Simd;
    const TK: usize = 4;
    let ShiftedScatter {
        columns,
        groups,
        ids,
        shifts,
        sums,
        scatter,
        scratch,
    } = args;
    let (d, n, lanes) = (columns.len(), groups.len(), 8);
    debug_assert_eq!(sums.len(), K * d);
    let cols = d.div_ceil(TILE_J) * TILE_J;
    let zero = simd.splat_f64s(0.0);
    let tile_list: Vec<(usize, usize)> = (0..cols)
        .step_by(TILE_J)
        .flat_map(|j0| (0..j0 + TILE_J).step_by(TK).map(move |k0| (j0, k0)))
        .collect();
    let mut saved: Vec<[[pulp::f64x8; TK]; TILE_J]> = vec![[[zero; TK]; TILE_J]; tile_list.len()];
    // Each column's K vector sums, then the rows after the last whole vector one at a time.
    let mut vector_sums: Vec<[pulp::f64x8; K]> = vec![[zero; K]; d];
    let pass = SHIFTED_PASS_ROWS / lanes;
    let pass_rows = pass * lanes;
    let buffer = crate::block::aligned_prefix(scratch, cols * pass_rows);
    buffer.fill(0.0);
    let vectors = n.div_ceil(lanes);
    for v0 in (0..vectors).step_by(pass) {
        let v1 = (v0 + pass).min(vectors);
        let (r0, len) = (v0 * lanes, v1 - v0);
        let valid = n.min(v1 * lanes) - r0;
        for (j, col) in columns.iter().enumerate() {
            let out = &mut buffer[j * pass_rows..(j + 1) * pass_rows];
            let column_shifts = &shifts[j * K..(j + 1) * K];
            let whole = centre_and_sum_v4::<K>(
                simd,
                &col[r0..r0 + valid],
                &ids[r0..r0 + valid],
                column_shifts,
                &mut out[..valid],
                &mut vector_sums[j],
            );
            for t in whole..valid {
                let g = groups[r0 + t];
                let e = match column_shifts.get(g) {
                    Some(s) => col[r0 + t] - s,
                    None => 0.0,
                };
                out[t] = e;
                if g < K {
                    sums[g * d + j] += e;
                }
            }
            out[valid..len * lanes].fill(0.0);
        }
        let base = pulp::x86::V4::as_simd_f64s(&buffer[..]).0;
        // The next pass's rows, asked for into L2 a share before each tile.
        let ahead = (r0 + pass_rows).min(n)..(r0 + 2 * pass_rows).min(n);
        let parts = tile_list.len();
        for (t, (&(j0, k0), acc)) in tile_list.iter().zip(saved.iter_mut()).enumerate() {
            crate::block::prefetch_share_to_l2(columns, ahead.clone(), t, parts);
            let (a, b) = (&base[j0 * pass..], &base[k0 * pass..]);
            match k0.checked_sub(j0) {
                Some(0) => tile_products::<_, TK, 0, true>(simd, a, b, pass, len, acc),
                Some(2) => tile_products::<_, TK, 2, true>(simd, a, b, pass, len, acc),
                _ => tile_products::<_, TK, FULL_TILE, false>(simd, a, b, pass, len, acc),
            }
        }
    }
    for (j, column) in vector_sums.iter().enumerate() {
        for (g, &v) in column.iter().enumerate() {
            // The rows after the last whole vector (summed in order), then the vector lanes.
            sums[g * d + j] += simd.reduce_sum_f64s(v);
        }
    }
    for (&(j0, k0), acc) in tile_list.iter().zip(&saved) {
        for (i, row) in acc.iter().enumerate() {
            for (kk, &v) in row.iter().enumerate() {
                let (j, k) = (j0 + i, k0 + kk);
                if j < d && k <= j {
                    let s = simd.reduce_sum_f64s(v);
                    scatter[k * d + j] = s;
                    scatter[j * d + k] = s;
                }
            }
        }
    }
}

/// Each whole vector of rows of `col` less its group's shift (`ids`: each row's group as a
/// byte, `u8::MAX` past the K shifts, whose rows become zero) into `out`, and added to its
/// group's vector sums; returns how many rows it took.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn centre_and_sum_v4<const K: usize>(
    simd: pulp::x86::V4,
    col: &[f64],
    ids: &[u8],
    shifts: &[f64],
    out: &mut [f64],
    sums: &mut [pulp::f64x8; K],
) -> usize {
    use std::arch::x86_64::{__m512d, __m512i};
    let f = simd.avx512f;
    let mut table = [0.0f64; 8];
    table[..K].copy_from_slice(&shifts[..K]);
    let table: __m512d = pulp::cast(table);
    let limit: __m512i = pulp::cast([K as u64; 8]);
    let ks: [__m512i; K] = std::array::from_fn(|c| pulp::cast([c as u64; 8]));
    let mut acc: [__m512d; K] = sums.map(pulp::cast);
    let whole = out.len().min(col.len()).min(ids.len()) / 8 * 8;
    for ((o, v), g) in out[..whole]
        .chunks_exact_mut(8)
        .zip(col[..whole].chunks_exact(8))
        .zip(ids[..whole].chunks_exact(8))
    {
        let (g, v) = group_ids_and_values_v4(simd, g, v);
        let s = f._mm512_permutexvar_pd(g, table);
        let known = f._mm512_cmplt_epu64_mask(g, limit);
        let e = f._mm512_maskz_sub_pd(known, v, s);
        for c in 0..K {
            let is_c = f._mm512_cmpeq_epu64_mask(g, ks[c]);
            acc[c] = f._mm512_mask_add_pd(acc[c], is_c, acc[c], e);
        }
        let r: [f64; 8] = pulp::cast(e);
        o.copy_from_slice(&r);
    }
    *sums = acc.map(pulp::cast);
    whole
}

/// Rows per pass of [`RowBlock::shifted_pooled_scatter`]: the pass's deviations stay in L1 up
/// to d = 16 (32 KB).
const SHIFTED_PASS_ROWS: usize = 256;

/// Σ_t y_t y_tᵀ (d × d column-major, both triangles) of a centred block's rows, each of weight
/// one (column j at `y[j · stride..]`, as many rows as `ones` has, those past the data zero),
/// in the unit-weight tiles with as many accumulators per tile as the CPU has registers for.
#[inline(always)]
fn unit_tiles<S: pulp::Simd>(
    simd: S,
    y: &[f64],
    stride: usize,
    d: usize,
    ones: &[f64],
    scatter: &mut [f64],
) {
    let cols = d.div_ceil(TILE_J) * TILE_J;
    // The unit-weight tiles read the weights only for the number of rows; they neither centre
    // nor shift, so the mean and the row count are not read.
    let centre = Centre {
        w: ones,
        n: ones.len(),
        mean: &[],
        shifts: None,
    };
    if S::REGISTER_COUNT >= 32 {
        tiles::<S, 4, true>(simd, y, stride, d, cols, centre, scatter);
    } else {
        tiles::<S, 2, true>(simd, y, stride, d, cols, centre, scatter);
    }
}

/// `out[i]` = `col[i]` − `means[groups[i]]`, or 0 where the group has no mean.
#[inline(always)]
fn centre_by_group(col: &[f64], groups: &[usize], means: &[f64], out: &mut [f64]) {
    for ((o, &v), &g) in out.iter_mut().zip(col).zip(groups) {
        *o = match means.get(g) {
            Some(m) => v - m,
            None => 0.0,
        };
    }
}

/// Whether a labeled pooled scatter of `k` classes is faster laid out by
/// [`RowBlock::load_centred_by_group`] than split into [`ClassBlocks`] on this CPU: with
/// AVX-512, for up to [`CENTRED_BY_GROUP_MAX_CLASSES`] classes. Each column's group sums cost K
/// masked additions per vector, and at 8 classes and more the split (by class order) is as
/// fast. `profile lda-fit`, the fifth of 10 fits, two alternated rounds, on the model-167 Xeon
/// (split → centred by group): d = 16, K = 2 0.0120 → 0.0109 s, K = 3 0.0132 → 0.0112 s,
/// K = 4 0.0142 → 0.0113 s, K = 6 0.0135 → 0.0125 s, K = 8 0.0137 → 0.0136 s, K = 10
/// 0.0134 → 0.0144 s; d = 64, K = 2 0.0752 → 0.0715 s, K = 4 0.0817 → 0.0743 s, K = 6 even,
/// K = 10 even. Without AVX-512 the sums by rows below are taken instead (with AVX2).
/// Since the fifty-eighth round, from 3 classes the sums are taken by rows instead
/// ([`RowBlock::load_centred_by_rows`]; Zen 4 EPYC, `profile lda-fit`, `PROFILE_COLD=cs`,
/// medians of 11, two alternated pairs, by group → by rows: d = 16, K = 4 0.0139, 0.0130 →
/// 0.0112, 0.0100 s; K = 6 0.0133, 0.0133 → 0.0105, 0.0111 s; d = 64, K = 6 0.082, 0.094 →
/// 0.081, 0.081 s; d = 2, K = 6 even; at K = 2 even: d = 16 0.0118, 0.0115 → 0.0116, 0.0121 s).
pub fn centring_by_group_pays(k: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        k <= CENTRED_BY_GROUP_MAX_CLASSES && pulp::x86::V4::is_available()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = k;
        false
    }
}

/// Most classes for which [`centring_by_group_pays`].
pub const CENTRED_BY_GROUP_MAX_CLASSES: usize = 2;

/// Most groups [`centre_by_group_with`] takes: the means of a column in two AVX-512 registers
/// (four AVX2 ones).
const PERMUTED_MAX_GROUPS: usize = 16;

/// Each of `groups` as a byte, for [`centre_by_group_with`]: the group where it is below `k`, and
/// `u8::MAX` (a group past the means) where it is not; nothing when `k` is past
/// [`PERMUTED_MAX_GROUPS`].
///
/// Inside the dispatch, as a select and a narrowing of eight labels at a time (`vpmovqb` with
/// AVX-512): compiled for the baseline target it went a label at a time, and had a fifth of
/// the samples of LDA's fit at d = 2, K = 10.
fn narrow_groups(groups: &[usize], k: usize, out: &mut Vec<u8>) {
    out.clear();
    if k <= PERMUTED_MAX_GROUPS {
        pulp::Arch::new().dispatch(
            #[inline(always)]
            || {
                // k ≤ 16, so a group below k fits a byte.
                out.extend(
                    groups
                        .iter()
                        .map(|&g| if g < k { g as u8 } else { u8::MAX }),
                );
            },
        );
    }
}

/// [`centre_by_group`] with the vector kernel `kernel` picks, for up to
/// [`PERMUTED_MAX_GROUPS`] groups (`ids`: each row's group as a byte, `u8::MAX` for one past
/// the means; more groups go one row at a time): each row's mean picked from registers by its
/// group, taken off where the group is below `means.len()` and zero elsewhere, and the rows
/// after the last whole vector one at a time; the same values.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn centre_by_group_with(
    kernel: crate::moments::ByRows,
    col: &[f64],
    groups: &[usize],
    ids: &[u8],
    means: &[f64],
    out: &mut [f64],
) {
    use crate::moments::ByRows;
    let n = out.len().min(col.len()).min(groups.len()).min(ids.len());
    if means.len() > PERMUTED_MAX_GROUPS {
        return centre_by_group(col, groups, means, out);
    }
    let mut table = [0.0f64; PERMUTED_MAX_GROUPS];
    table[..means.len()].copy_from_slice(means);
    let rows = Centring {
        col: &col[..n],
        ids: &ids[..n],
        table,
        k: means.len(),
    };
    let out = &mut out[..n];
    let whole = match kernel {
        ByRows::V4(simd) => simd.vectorize(
            #[inline(always)]
            || centre_by_group_v4(simd, &rows, out),
        ),
        ByRows::V3(simd) => simd.vectorize(
            #[inline(always)]
            || match means.len().div_ceil(4) {
                0 | 1 => centre_by_group_v3::<0>(simd, &rows, out),
                2 => centre_by_group_v3::<1>(simd, &rows, out),
                _ => centre_by_group_v3::<2>(simd, &rows, out),
            },
        ),
    };
    centre_by_group(&col[whole..n], &groups[whole..n], means, &mut out[whole..]);
}

/// The rows of one column for [`centre_by_group_with`]'s kernels: the values, their groups as
/// bytes, the `k` means padded with zeros.
struct Centring<'a> {
    col: &'a [f64],
    ids: &'a [u8],
    table: [f64; PERMUTED_MAX_GROUPS],
    k: usize,
}

/// Eight rows' groups (bytes) widened to 64-bit lanes, and their eight values.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn group_ids_and_values_v4(
    simd: pulp::x86::V4,
    ids: &[u8],
    values: &[f64],
) -> (std::arch::x86_64::__m512i, std::arch::x86_64::__m512d) {
    use std::arch::x86_64::__m128i;
    let g: [u8; 8] = ids.try_into().unwrap_or_default();
    let v: [f64; 8] = values.try_into().unwrap_or_default();
    let g: __m128i = pulp::cast([u64::from_le_bytes(g), 0]);
    (simd.avx512f._mm512_cvtepu8_epi64(g), pulp::cast(v))
}

/// [`centre_by_group_with`]'s rows up to the last whole eight with AVX-512: each row's mean
/// picked from two registers by its group (`vpermt2pd`); returns how many rows it wrote.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn centre_by_group_v4(simd: pulp::x86::V4, rows: &Centring<'_>, out: &mut [f64]) -> usize {
    use std::arch::x86_64::__m512i;
    let Centring { col, ids, table, k } = *rows;
    let lo: [f64; 8] = table[..8].try_into().unwrap_or_default();
    let hi: [f64; 8] = table[8..].try_into().unwrap_or_default();
    let (lo, hi) = (pulp::cast(lo), pulp::cast(hi));
    let limit: __m512i = pulp::cast([k as u64; 8]);
    let f = simd.avx512f;
    let whole = out.len() / 8 * 8;
    for ((o, v), g) in out[..whole]
        .chunks_exact_mut(8)
        .zip(col[..whole].chunks_exact(8))
        .zip(ids[..whole].chunks_exact(8))
    {
        let (g, v) = group_ids_and_values_v4(simd, g, v);
        let m = f._mm512_permutex2var_pd(lo, g, hi);
        let known = f._mm512_cmplt_epu64_mask(g, limit);
        let r: [f64; 8] = pulp::cast(f._mm512_maskz_sub_pd(known, v, m));
        o.copy_from_slice(&r);
    }
    whole
}

/// [`centre_by_group_with`]'s rows up to the last whole four with AVX2, the means in
/// 2^`BLENDS` registers: each row's mean picked by its group from the four means of a register
/// (`vpermps` on the two halves of each mean), then between registers by the group's bits 2
/// and 3 (`vblendvpd`); returns how many rows it wrote.
///
/// Why: AVX2 has no two-register permute, and centring one row at a time was about a third of
/// a labeled LDA fit at d = 16 on the Zen 3 EPYC (`perf`, sixty-fourth round).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn centre_by_group_v3<const BLENDS: usize>(
    simd: pulp::x86::V3,
    rows: &Centring<'_>,
    out: &mut [f64],
) -> usize {
    use std::arch::x86_64::{__m128i, __m256, __m256d, __m256i};
    let Centring { col, ids, table, k } = *rows;
    let quads: [__m256; 4] = std::array::from_fn(|q| {
        let m: [f64; 4] = table[4 * q..4 * q + 4].try_into().unwrap_or_default();
        pulp::cast(m)
    });
    let (a, a2) = (simd.avx, simd.avx2);
    let limit: __m256i = pulp::cast([k as u64; 4]);
    let one: __m256i = pulp::cast([1u64; 4]);
    let whole = out.len() / 4 * 4;
    for ((o, v), g) in out[..whole]
        .chunks_exact_mut(4)
        .zip(col[..whole].chunks_exact(4))
        .zip(ids[..whole].chunks_exact(4))
    {
        let g: [u8; 4] = g.try_into().unwrap_or_default();
        let v: [f64; 4] = v.try_into().unwrap_or_default();
        let g: __m128i = pulp::cast([u32::from_le_bytes(g), 0, 0, 0]);
        let g: __m256i = a2._mm256_cvtepu8_epi64(g);
        // Each row's mean is two 32-bit halves, 2g and 2g + 1 (mod 8) in its register.
        let twice = a2._mm256_add_epi64(g, g);
        let halves = a2._mm256_or_si256(
            twice,
            a2._mm256_slli_epi64::<32>(a2._mm256_add_epi64(twice, one)),
        );
        let pick =
            |q: usize| -> __m256d { pulp::cast(a2._mm256_permutevar8x32_ps(quads[q], halves)) };
        let m = if BLENDS == 0 {
            pick(0)
        } else {
            // The sign bit of each lane: the group's bit 2 (which of two registers).
            let bit2: __m256d = pulp::cast(a2._mm256_slli_epi64::<61>(g));
            let low = a._mm256_blendv_pd(pick(0), pick(1), bit2);
            if BLENDS == 1 {
                low
            } else {
                let bit3: __m256d = pulp::cast(a2._mm256_slli_epi64::<60>(g));
                let high = a._mm256_blendv_pd(pick(2), pick(3), bit2);
                a._mm256_blendv_pd(low, high, bit3)
            }
        };
        let known: __m256d = pulp::cast(a2._mm256_cmpgt_epi64(limit, g));
        let r: [f64; 4] = pulp::cast(a._mm256_and_pd(a._mm256_sub_pd(pulp::cast(v), m), known));
        o.copy_from_slice(&r);
    }
    whole
}

/// [`RowBlock::pooled_scatter`]'s kernel.
struct PooledSoft<'a> {
    y: &'a [f64],
    stride: usize,
    n: usize,
    d: usize,
    weights: &'a [&'a [f64]],
    totals: &'a [f64],
    means: &'a mut [f64],
    scatter: &'a mut [f64],
    scratch: &'a mut Vec<f64>,
}

impl pulp::WithSimd for PooledSoft<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, simd: S) {
        let PooledSoft {
            y,
            stride,
            n,
            d,
            weights,
            totals,
            means,
            scatter,
            scratch,
        } = self;
        let k = weights.len();
        let rows = n.div_ceil(S::F64_LANES) * S::F64_LANES;
        debug_assert!(rows <= stride);
        let cols = d.div_ceil(TILE_J) * TILE_J;
        // Scratch: each class's weights as the kernel reads them (then its shares w_ct / s_t),
        // the row totals s_t, and 1 / s_t.
        let buf = crate::block::aligned_prefix(scratch, (k + 2) * rows);
        let (class_w, rest) = buf.split_at_mut(k * rows);
        let (row_total, inverse) = rest.split_at_mut(rows);
        class_w.fill(0.0);
        for (c, (w, &total)) in weights.iter().zip(totals).enumerate() {
            if total > 0.0 {
                copy_weights(&mut class_w[c * rows..c * rows + n], &w[..n], total);
            } else {
                means[c * d..(c + 1) * d].fill(0.0);
            }
        }
        // The classes' means: the sums of `weighted_scatter`, to the bit, a few classes per
        // read of each pass of rows ([`class_means`]; each column was once read once per
        // class, and at d = 64, K = 10 those reads were about 40% of this kernel's time).
        let live: Vec<usize> = (0..k).filter(|&c| totals[c] > 0.0).collect();
        let group = if S::REGISTER_COUNT >= 32 { 4 } else { 2 };
        simd.vectorize(ClassMeans {
            y,
            stride,
            d,
            weights: (class_w, rows),
            live: &live,
            group,
            totals,
            means,
        });
        row_total.fill(0.0);
        for c in 0..k {
            let w = &class_w[c * rows..(c + 1) * rows];
            row_total.iter_mut().zip(w).for_each(|(s, w)| *s += w);
        }
        for (inv, &s) in inverse.iter_mut().zip(&*row_total) {
            *inv = if s > 0.0 { 1.0 / s } else { 0.0 };
        }
        // Between the classes: P_ce = Σ_t w_ct w_et / s_t, each term ≥ 0; then Σ P_ce δ δᵀ,
        // δ = m_c − m_e, into a d × d matrix added after the scatter.
        let mut between = vec![0.0; d * d];
        let mut scaled = vec![0.0; rows];
        let mut delta = vec![0.0; d];
        for c in 0..k {
            if totals[c] <= 0.0 {
                continue;
            }
            scaled
                .iter_mut()
                .zip(&class_w[c * rows..(c + 1) * rows])
                .zip(&*inverse)
                .for_each(|((a, w), inv)| *a = w * inv);
            let (av, _) = S::as_simd_f64s(&scaled);
            for e in (c + 1..k).filter(|&e| totals[e] > 0.0) {
                let (wv, _) = S::as_simd_f64s(&class_w[e * rows..(e + 1) * rows]);
                let p = weighted_sum(simd, av, wv);
                if p <= 0.0 {
                    continue;
                }
                delta
                    .iter_mut()
                    .zip(means[c * d..(c + 1) * d].iter().zip(&means[e * d..]))
                    .for_each(|(dl, (a, b))| *dl = a - b);
                for (col, &dj) in between.chunks_exact_mut(d).zip(&delta) {
                    let s = p * dj;
                    col.iter_mut().zip(&delta).for_each(|(v, di)| *v += s * di);
                }
            }
        }
        // Each row's share of each class, w_ct / s_t, in place of the class's weights.
        for c in 0..k {
            class_w[c * rows..(c + 1) * rows]
                .iter_mut()
                .zip(&*inverse)
                .for_each(|(w, inv)| *w *= inv);
        }
        // The rows are centred at the classes' weighted grand mean g (the tiles' column means),
        // and then at Σ_c share_ct (m_c − g): small differences of means, not the means
        // themselves, so the row's centre adds no rounding of the size of g.
        let grand_total: f64 = totals.iter().filter(|&&t| t > 0.0).sum();
        let mut grand = vec![0.0; d];
        if grand_total > 0.0 {
            for (c, &t) in totals.iter().enumerate().filter(|(_, t)| **t > 0.0) {
                let r = t / grand_total;
                grand
                    .iter_mut()
                    .zip(&means[c * d..(c + 1) * d])
                    .for_each(|(g, m)| *g += r * m);
            }
        }
        let mut points = vec![0.0; k * d];
        for c in (0..k).filter(|&c| totals[c] > 0.0) {
            points[c * d..(c + 1) * d]
                .iter_mut()
                .zip(means[c * d..].iter().zip(&grand))
                .for_each(|(p, (m, g))| *p = m - g);
        }
        let centre = Centre {
            w: row_total,
            n,
            mean: &grand,
            shifts: Some(RowShifts {
                shares: class_w,
                points: &points,
                k,
                d,
            }),
        };
        if S::REGISTER_COUNT >= 32 {
            tiles::<S, 4, false>(simd, y, stride, d, cols, centre, scatter);
        } else {
            tiles::<S, 2, false>(simd, y, stride, d, cols, centre, scatter);
        }
        // The lower triangle of the sum, mirrored: the rank-one updates above are not exactly
        // symmetric (p·δ_j·δ_i is rounded as (p·δ_j)·δ_i).
        for j in 0..d {
            for i in j..d {
                let v = scatter[j * d + i] + between[j * d + i];
                scatter[j * d + i] = v;
                scatter[i * d + j] = v;
            }
        }
    }
}

/// One column of [`ClassBlocks`], one row at a time: `value(r)` for row r goes to the next
/// free row of its class; then each class's padding is zeroed. Returns whether every value
/// is finite.
#[inline(always)]
fn split_column(
    value: impl Fn(usize) -> f64,
    labels: &[usize],
    classes: &[(usize, usize)],
    next: &mut Vec<usize>,
    col: &mut [f64],
) -> bool {
    next.clear();
    next.extend(classes.iter().map(|&(first, _)| first));
    let mut finite = true;
    for (r, &l) in labels.iter().enumerate() {
        let v = value(r);
        finite &= v.abs() < f64::INFINITY;
        if let Some(p) = next.get_mut(l) {
            col[*p] = v;
            *p += 1;
        }
    }
    zero_padding(classes, col);
    finite
}

/// Whether every value of `src` is finite (no early exit: one vector pass in order).
#[inline(always)]
fn all_finite(src: &[f64]) -> bool {
    src.iter().fold(true, |a, v| a & (v.abs() < f64::INFINITY))
}

/// A running finiteness check of vectors: `check` (start at zero) plus `v · 0`, which stays zero
/// while every value seen is finite and is NaN from the first infinity or NaN on. One
/// multiply-add per vector, where comparing each vector and ANDing its mask took two
/// operations and a move of the mask to a general register.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn check_finite(simd: pulp::x86::V4, check: pulp::f64x8, v: pulp::f64x8) -> pulp::f64x8 {
    use pulp::Simd;
    simd.mul_add_f64s(v, simd.splat_f64s(0.0), check)
}

/// Whether a [`check_finite`] sum saw only finite values.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn checked_finite(simd: pulp::x86::V4, check: pulp::f64x8) -> bool {
    use pulp::Simd;
    simd.equal_f64s(check, simd.splat_f64s(0.0)).0 == u8::MAX
}

/// Whether every value of up to [`TOUCHED_COLUMNS`] columns is finite, the four read together
/// ([`check_finite`], a sum per column).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn columns_are_finite_v4(simd: pulp::x86::V4, srcs: &[&[f64]]) -> bool {
    use pulp::Simd;
    let Ok(four) = <[&[f64]; TOUCHED_COLUMNS]>::try_from(srcs) else {
        return srcs.iter().fold(true, |a, c| a & all_finite(c));
    };
    let n = four.iter().map(|c| c.len()).min().unwrap_or(0);
    let vectors = four.map(|c| <pulp::x86::V4 as Simd>::as_simd_f64s(&c[..n]).0);
    let mut checks = [simd.splat_f64s(0.0); TOUCHED_COLUMNS];
    for b in 0..n / 8 {
        for (check, v) in checks.iter_mut().zip(&vectors) {
            *check = check_finite(simd, *check, v[b]);
        }
    }
    checks.iter().zip(four).fold(true, |a, (&check, c)| {
        a & checked_finite(simd, check) & all_finite(&c[n / 8 * 8..n])
    })
}

/// One column of [`ClassBlocks::split_by_order`]: class by class, `value(r)` for its rows r,
/// then zeros to its padded length.
#[inline(always)]
fn place_by_order(
    value: impl Fn(usize) -> f64,
    order: &[u32],
    ranges: &[(usize, usize)],
    classes: &[(usize, usize)],
    col: &mut [f64],
) {
    for (&(start, len), &(first, _)) in ranges.iter().zip(classes) {
        let dst = &mut col[first..first + len];
        for (o, &r) in dst.iter_mut().zip(&order[start..start + len]) {
            *o = value(r as usize);
        }
    }
    zero_padding(classes, col);
}

/// [`place_by_order`] from a contiguous column `src` with AVX-512: eight rows of a class at a
/// time by one gather (`vgatherdpd`, 32-bit offsets), the rows after its last whole eight one
/// at a time; the same values. Returns whether every value it placed is finite. As it goes it
/// asks for `next` (the column the caller splits next) into L2, one line per gather, in order,
/// and a line of `next_labels` beside each (the next chunk's, while its last column is split).
/// With `centre` (the means, column j of d), each class is summed as it is gathered, with
/// `unit_sum`'s additions in its order, and centred at its mean right after, from L1: what
/// [`centre_classes`] does to the column afterwards, the same bits. Why: that second pass read
/// each class's run back for its sum; fused, QDA's fit at d = 16, K = 10 took 8% less time
/// (12.02, 11.97, 12.09, 11.99 → 11.00, 10.98, 11.27, 10.47 ms, medians of 31 from memory).
///
/// # Safety
/// Every row listed in `ranges` (`order[start..start + len]`) must be below `src.len()` and
/// below 2^31 (the offsets are signed): the gathers read `src` at those rows unchecked.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(unsafe_code)]
unsafe fn gather_by_order_v4(
    simd: pulp::x86::V4,
    src: &[f64],
    order: &[u32],
    ranges: &[(usize, usize)],
    classes: &[(usize, usize)],
    col: &mut [f64],
    (next, next_labels): (&[f64], &[usize]),
    mut centre: Option<(&mut [f64], usize, usize)>,
) -> bool {
    use pulp::Simd;
    // The next line of `next` to ask for, as an index of its values.
    let mut asked = 0;
    let mut check = simd.splat_f64s(0.0);
    let mut finite = true;
    for (c, (&(start, len), &(first, _))) in ranges.iter().zip(classes).enumerate() {
        let rows = &order[start..start + len];
        let dst = &mut col[first..first + len];
        let whole = len / 8 * 8;
        // The class's sums as `unit_sum` takes them, vector t into chain t mod 4: `sums[0]` is
        // the next vector's chain, the chains rotated after each (in registers), and put back in
        // order at the end.
        let mut sums = [simd.splat_f64s(0.0); 4];
        for (o, r) in dst[..whole]
            .chunks_exact_mut(8)
            .zip(rows[..whole].chunks_exact(8))
        {
            let r: [u32; 8] = std::array::from_fn(|i| r[i]);
            crate::block::prefetch_to_l2(next, asked);
            crate::block::prefetch_to_l2(next_labels, asked);
            asked += 8;
            // SAFETY: each of the eight rows is below `src.len()` and 2^31 (this function's
            // contract), so each load is inside `src`; AVX-512 is enabled (this runs inside
            // `V4`).
            let v = unsafe {
                simd.avx512f
                    ._mm512_i32gather_pd::<8>(pulp::cast(r), src.as_ptr())
            };
            check = check_finite(simd, check, pulp::cast(v));
            if centre.is_some() {
                let [s0, s1, s2, s3] = sums;
                sums = [s1, s2, s3, simd.add_f64s(s0, pulp::cast(v))];
            }
            o.copy_from_slice(&pulp::cast::<_, [f64; 8]>(v));
        }
        let mut tail = [0.0; 8];
        for ((o, t), &r) in dst[whole..].iter_mut().zip(&mut tail).zip(&rows[whole..]) {
            *o = src[r as usize];
            *t = *o;
            finite &= o.abs() < f64::INFINITY;
        }
        if let Some((means, j, d)) = centre.as_mut() {
            // The tail's vector with the zeros of the class's padding, as `unit_sum` reads it.
            let mut vectors = whole / 8;
            if whole < len {
                let [s0, s1, s2, s3] = sums;
                sums = [s1, s2, s3, simd.add_f64s(s0, pulp::cast(tail))];
                vectors += 1;
            }
            let [s0, s1, s2, s3] = sums;
            sums = match vectors % 4 {
                0 => [s0, s1, s2, s3],
                1 => [s3, s0, s1, s2],
                2 => [s2, s3, s0, s1],
                _ => [s1, s2, s3, s0],
            };
            let m = match len {
                0 => 0.0,
                _ => fold_unit_sums(simd, sums) / len as f64,
            };
            means[c * *d + *j] = m;
            dst.iter_mut().for_each(|v| *v -= m);
        }
    }
    // The lines the gathers did not reach (one fewer gather per class with a part of eight).
    while asked < next.len().max(next_labels.len()) {
        crate::block::prefetch_to_l2(next, asked);
        crate::block::prefetch_to_l2(next_labels, asked);
        asked += 8;
    }
    zero_padding(classes, col);
    finite & checked_finite(simd, check)
}

/// Centres each class's run of a [`ClassBlocks`] column (its padding zeroed) at its mean, and
/// writes the mean to `means[c · d + j]` (zero for an empty class): what `centre_and_scatter`
/// does to the column, with the same sums, so the same bits.
fn centre_classes(
    col: &mut [f64],
    classes: &[(usize, usize)],
    means: &mut [f64],
    j: usize,
    d: usize,
) {
    pulp::Arch::new().dispatch(CentreClasses {
        col,
        classes,
        means,
        j,
        d,
    })
}

/// [`centre_classes`]' kernel.
struct CentreClasses<'a> {
    col: &'a mut [f64],
    classes: &'a [(usize, usize)],
    means: &'a mut [f64],
    j: usize,
    d: usize,
}

impl pulp::WithSimd for CentreClasses<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, simd: S) {
        let CentreClasses {
            col,
            classes,
            means,
            j,
            d,
        } = self;
        // Sums of every row read, as `centre_and_scatter`'s with weights of one (`unit_sum`):
        // past the class's rows they meet its zero padding, which adds nothing.
        for (c, &(first, n)) in classes.iter().enumerate() {
            if n == 0 {
                means[c * d + j] = 0.0;
                continue;
            }
            let rows = n.div_ceil(S::F64_LANES) * S::F64_LANES;
            let run = &mut col[first..first + rows];
            let (yv, _) = S::as_simd_f64s(run);
            let m = unit_sum(simd, yv) / n as f64;
            means[c * d + j] = m;
            run[..n].iter_mut().for_each(|v| *v -= m);
        }
    }
}

/// What a split of [`ClassBlocks`] does with each column once its classes are laid out.
enum AfterColumn {
    /// Keeps it, as read.
    Keep,
    /// Keeps it, each class centred at its mean ([`centre_classes`]).
    Centre,
}

impl AfterColumn {
    /// Where column `j` is split to.
    fn column<'b>(&self, block: &'b mut [f64], j: usize, stride: usize) -> &'b mut [f64] {
        &mut block[j * stride..(j + 1) * stride]
    }

    /// Column `j` of `d`, just split into `col`.
    fn finish_column(
        &self,
        col: &mut [f64],
        classes: &[(usize, usize)],
        centre_means: &mut [f64],
        j: usize,
        d: usize,
    ) {
        match self {
            AfterColumn::Keep => {}
            AfterColumn::Centre => centre_classes(col, classes, centre_means, j, d),
        }
    }
}

/// Zeros each class's padding rows in a column of [`ClassBlocks`], and the gap of one vector
/// after them, which a packed store may have reached (or an earlier split's rows fill): the
/// pooled scatter's tiles read every row of the column.
#[inline(always)]
fn zero_padding(classes: &[(usize, usize)], col: &mut [f64]) {
    for &(first, len) in classes {
        let padded = len.div_ceil(CLASS_ROWS_MULTIPLE) * CLASS_ROWS_MULTIPLE;
        col[first + len..first + padded + CLASS_ROWS_MULTIPLE].fill(0.0);
    }
}

/// [`split_column`] with AVX-512 for a contiguous column `src`: eight rows at a time, each
/// class's values packed to the front of a vector by its mask (`masks`: per class, one per
/// group of eight rows) and stored whole at the class's next free row (the up to 7 values past
/// it land in the class's padding or the gap after it); the rows after the last whole eight one
/// at a time.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn split_column_v4(
    simd: pulp::x86::V4,
    src: &[f64],
    labels: &[usize],
    masks: &[u8],
    classes: &[(usize, usize)],
    col: &mut [f64],
) -> bool {
    let groups = src.len() / 8;
    let mut next = [0usize; MAX_PACKED_CLASSES];
    let k = classes.len().min(MAX_PACKED_CLASSES);
    for (c, &(first, _)) in classes.iter().take(k).enumerate() {
        next[c] = first;
    }
    let (vectors, _) = <pulp::x86::V4 as pulp::Simd>::as_simd_f64s(&src[..groups * 8]);
    use pulp::Simd;
    let infinity = simd.splat_f64s(f64::INFINITY);
    let zero = simd.splat_f64s(0.0);
    let mut finite = simd.less_than_or_equal_f64s(zero, zero);
    for (b, &v) in vectors.iter().enumerate() {
        finite = simd.and_m64s(finite, simd.less_than_f64s(simd.abs_f64s(v), infinity));
        for c in 0..k {
            let m = masks[c * groups + b];
            let packed: [f64; 8] =
                pulp::cast(simd.avx512f._mm512_maskz_compress_pd(m, pulp::cast(v)));
            col[next[c]..next[c] + 8].copy_from_slice(&packed);
            next[c] += m.count_ones() as usize;
        }
    }
    let tail_finite = split_tail(src, labels, groups * 8, next, classes, col);
    finite.0 == u8::MAX && tail_finite
}

/// The rows of a packed split from `from` on, one at a time, each class's from its next free
/// row in `next`; then the classes' padding zeroed. Returns whether those rows' values are
/// finite.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn split_tail(
    src: &[f64],
    labels: &[usize],
    from: usize,
    mut next: [usize; MAX_PACKED_CLASSES],
    classes: &[(usize, usize)],
    col: &mut [f64],
) -> bool {
    let k = classes.len().min(MAX_PACKED_CLASSES);
    let mut finite = true;
    for (r, &l) in labels.iter().enumerate().skip(from) {
        finite &= src[r].abs() < f64::INFINITY;
        if l < k {
            col[next[l]] = src[r];
            next[l] += 1;
        }
    }
    zero_padding(classes, col);
    finite
}

/// [`split_column_v4`] of up to [`TOUCHED_COLUMNS`] columns (`srcs`, each at least `n` long,
/// into `cols`) in one pass over all of them: each group of eight rows is packed from every
/// column before the next, so the columns stream from memory together and each class's next
/// free row advances once for all of them. The same values in the same places. For one class
/// or more. Four columns also ask for the columns of `ahead` (any of them empty: none), a
/// line of each per group of eight rows: the next four, so that they arrive while these are
/// packed, or these four further on.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn split_columns_v4(
    simd: pulp::x86::V4,
    srcs: &[&[f64]],
    n: usize,
    labels: &[usize],
    (masks, classes): (&[u8], &[(usize, usize)]),
    cols: &mut [&mut [f64]],
    ahead: [&[f64]; TOUCHED_COLUMNS],
) -> bool {
    let k = classes.len().min(MAX_PACKED_CLASSES);
    // Four columns go through a kernel unrolled for their number of classes (called directly,
    // not through a function pointer, so that it is inlined with AVX-512 enabled).
    if let (true, Ok(four), [c0, c1, c2, c3]) = (
        (1..=MAX_PACKED_CLASSES).contains(&k),
        <[&[f64]; TOUCHED_COLUMNS]>::try_from(srcs),
        &mut *cols,
    ) {
        let outs = [&mut **c0, &mut **c1, &mut **c2, &mut **c3];
        let to = (masks, classes);
        return match k {
            1 => split_four_columns_v4::<1>(simd, four, n, labels, to, outs, ahead),
            2 => split_four_columns_v4::<2>(simd, four, n, labels, to, outs, ahead),
            3 => split_four_columns_v4::<3>(simd, four, n, labels, to, outs, ahead),
            _ => split_four_columns_v4::<4>(simd, four, n, labels, to, outs, ahead),
        };
    }
    let groups = n / 8;
    let mut next = [0usize; MAX_PACKED_CLASSES];
    for (c, &(first, _)) in classes.iter().take(k).enumerate() {
        next[c] = first;
    }
    let width = srcs.len().min(cols.len()).min(TOUCHED_COLUMNS);
    let mut vectors: [&[pulp::f64x8]; TOUCHED_COLUMNS] = [&[]; TOUCHED_COLUMNS];
    for (v, src) in vectors.iter_mut().zip(srcs) {
        *v = <pulp::x86::V4 as pulp::Simd>::as_simd_f64s(&src[..groups * 8]).0;
    }
    use pulp::Simd;
    let infinity = simd.splat_f64s(f64::INFINITY);
    let zero = simd.splat_f64s(0.0);
    let mut finite = simd.less_than_or_equal_f64s(zero, zero);
    // The values are checked as the first class packs them, so there must be a class (checked
    // in a loop of their own, QDA's fit at d = 16, K = 4 took 0.0137, 0.0147, 0.0135 ->
    // 0.0159, 0.0157, 0.0160 s; and an early return for no class, whose check was a closure,
    // made it 7 times as slow).
    debug_assert!(k > 0);
    for b in 0..groups {
        for c in 0..k {
            let m = masks[c * groups + b];
            let at = next[c];
            for (v, col) in vectors[..width].iter().zip(cols.iter_mut()) {
                let v = v[b];
                if c == 0 {
                    finite = simd.and_m64s(finite, simd.less_than_f64s(simd.abs_f64s(v), infinity));
                }
                let packed: [f64; 8] =
                    pulp::cast(simd.avx512f._mm512_maskz_compress_pd(m, pulp::cast(v)));
                col[at..at + 8].copy_from_slice(&packed);
            }
            next[c] += m.count_ones() as usize;
        }
    }
    let mut tail_finite = true;
    for (src, col) in srcs[..width].iter().zip(cols.iter_mut()) {
        tail_finite &= split_tail(src, &labels[..n], groups * 8, next, classes, col);
    }
    finite.0 == u8::MAX && tail_finite
}

/// [`split_columns_v4`] for `K` classes (1 to [`MAX_PACKED_CLASSES`]) and four columns, with
/// the loops over both unrolled: the same values in the same places. Each column's values are
/// checked by a sum of its own ([`check_finite`]).
///
/// Why: [`split_columns_v4`] loops over as many classes and columns as it is given, and kept
/// the columns' slices on the stack, reloading and bounds-checking each one for every packed
/// store, and moved each comparison's mask to a general register to AND it. For QDA's fit at
/// d = 16, K = 2 with the data in cache, 37% of the samples were in it.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn split_four_columns_v4<const K: usize>(
    simd: pulp::x86::V4,
    srcs: [&[f64]; TOUCHED_COLUMNS],
    n: usize,
    labels: &[usize],
    (masks, classes): (&[u8], &[(usize, usize)]),
    mut cols: [&mut [f64]; TOUCHED_COLUMNS],
    ahead: [&[f64]; TOUCHED_COLUMNS],
) -> bool {
    use pulp::Simd;
    const { assert!(K >= 1 && K <= MAX_PACKED_CLASSES) };
    let groups = n / 8;
    let vectors = srcs.map(|src| <pulp::x86::V4 as Simd>::as_simd_f64s(&src[..groups * 8]).0);
    let class_masks: [&[u8]; K] = std::array::from_fn(|c| &masks[c * groups..(c + 1) * groups]);
    let mut at: [usize; K] = std::array::from_fn(|c| classes[c].0);
    let mut checks = [simd.splat_f64s(0.0); TOUCHED_COLUMNS];
    for b in 0..groups {
        let m: [u8; K] = std::array::from_fn(|c| class_masks[c][b]);
        for ((vectors, col), check) in vectors.iter().zip(cols.iter_mut()).zip(&mut checks) {
            let v = vectors[b];
            *check = check_finite(simd, *check, v);
            for c in 0..K {
                let packed: [f64; 8] =
                    pulp::cast(simd.avx512f._mm512_maskz_compress_pd(m[c], pulp::cast(v)));
                col[at[c]..at[c] + 8].copy_from_slice(&packed);
            }
        }
        for c in 0..K {
            at[c] += m[c].count_ones() as usize;
        }
        for a in &ahead {
            crate::block::prefetch(a, 8 * b);
        }
    }
    let mut finite = checks
        .iter()
        .fold(true, |a, &c| a & checked_finite(simd, c));
    let mut next = [0usize; MAX_PACKED_CLASSES];
    next[..K].copy_from_slice(&at);
    for (src, col) in srcs.iter().zip(cols.iter_mut()) {
        finite &= split_tail(src, &labels[..n], groups * 8, next, classes, col);
    }
    finite
}

/// Classes [`ClassBlocks`] packs with AVX-512; the caller keeps more classes out of it.
pub const MAX_PACKED_CLASSES: usize = 4;

/// Whether [`ClassBlocks::split`] is the faster way to lay out `k` classes on this CPU; if not,
/// group the rows by class and use [`ClassBlocks::split_by_order`]: up to
/// [`MAX_PACKED_CLASSES`] with AVX-512, where each class's rows are packed to the front of a
/// vector by a mask (one `vcompresspd` per class and vector of rows), and past that the gathers
/// by order copy each value once.
///
/// Zen 5 and later (family 0x1A on), whose AVX-512 gathers are fast, once took the split by
/// order past two classes, and all of them before the seventy-fifth round; now that four columns
/// are packed by a kernel unrolled for their classes (`split_four_columns_v4`, seventy-sixth
/// round), packing after a touch of each four columns (`packs_after_a_touch`) is the faster
/// there too: QDA fit (`PROFILE_COLD=cs`, medians of 21, 3 alternated pairs, by order → packed)
/// d = 16, K = 3 7.0, 7.1, 7.3 → 6.3, 6.5, 6.4 ms; K = 4 7.0, 7.3, 7.1 → 6.9, 7.2, 7.0 ms;
/// d = 64, K = 4 43.4, 43.0, 43.0 → 41.8, 42.7, 42.3 ms. The two splits give the same bits.
/// Without AVX-512, `split` places one row at a time, each class's next free row waiting on
/// the previous store, and on an AVX2 host (AMD EPYC, Zen 3) an LDA fit at d = 16, K = 2 took
/// 0.0333 s that way against 0.0178 s by order (a four-row AVX2 packing through a permutation
/// table took 0.0239 s, and was slower than by order at every K).
pub fn split_packs(k: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        k <= MAX_PACKED_CLASSES && pulp::x86::V4::is_available()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = k;
        false
    }
}

/// Whether [`ClassBlocks::split`] reads each four columns first ([`touch_columns`]) and packs
/// them from cache, rather than packing them as they come from memory: on AMD's Zen 5 and later
/// (the CPUs whose gathers are fast). There the packing as the first read was the slower
/// (seventy-fifth round, QDA fit d = 16, K = 2: 7.7–8.4 → 11.1–11.3 ms), and with the unrolled
/// kernel still is at two classes (seventy-sixth round, medians of 21, 3 alternated pairs, a
/// touch first → none: d = 16 6.0, 6.1, 6.3 → 6.5, 6.5, 6.6 ms; d = 64 38.3, 38.1, 41.4 →
/// 41.4, 41.6, 41.2 ms); at four, within noise (7.2, 7.2, 7.4 → 7.0, 7.0, 6.9 ms). Elsewhere
/// the packing as the first read was the faster (QDA fit at 2f59fb8, d = 16, K = 2 0.0147 →
/// 0.0118 s against a touch first), and on the Zen 4 EPYC of the eighty-fourth round, where the
/// gathers are slow (in L2 9.3–9.6 TSC ticks for eight values, against 7 for eight scalar
/// copies): touching first there (medians of 21, four alternated pairs) took `qda-fit 16 10`
/// 12.05, 10.11, 11.50, 21.06 → 11.77, 13.82, 22.85, 13.85 ms and `lda-fit 16 10` 9.41, 8.22,
/// 9.10, 9.65 → 8.26, 8.94, 13.53, 13.31 ms on a noisy host.
///
/// Where it touches, only a chunk's first four columns are touched: each later four are asked
/// for while the four before them are packed (seventy-seventh round, `profile qda-fit`,
/// `PROFILE_COLD=cs`, medians of 15, 3 alternated pairs, touched → asked for: d = 16, K = 2
/// 6.36, 6.15, 6.93 → 5.97, 5.97, 5.87 ms; K = 3 6.68, 7.19, 6.61 → 6.21, 6.35, 6.00 ms;
/// d = 32, K = 2 14.2, 14.1, 16.2 → 14.0, 13.9, 14.5 ms; d = 64, K = 4 43.4, 43.2, 43.9 →
/// 37.3, 38.1, 37.9 ms; d = 64, K = 2 even).
#[cfg(target_arch = "x86_64")]
fn packs_after_a_touch() -> bool {
    gathers_are_fast()
}

/// Whether this CPU's AVX-512 gathers are fast: an AMD CPU of family 0x1A or later (Zen 5 on).
#[cfg(target_arch = "x86_64")]
fn gathers_are_fast() -> bool {
    crate::cpu::amd_family().is_some_and(|family| family >= 0x1A)
}

/// Columns per tile row (the tile's "j" side); the "k" side is 4 or 2 by register count.
const TILE_J: usize = 4;

/// Where the kernel's rows come from.
enum Source<'a> {
    /// Rows of `x` (all, or `rows`), with `weights` (one each when `None`), copied into the
    /// kernel's block first.
    Rows {
        x: MatRef<'a, f64>,
        rows: Option<&'a [usize]>,
        weights: Option<&'a [f64]>,
    },
    /// A class of [`ClassBlocks`]: column j is `y[j · stride..]`, its first `n` rows the class's
    /// (weight one each), then zeros to a whole number of vectors.
    Block {
        y: &'a mut [f64],
        stride: usize,
        n: usize,
        d: usize,
    },
}

struct Kernel<'a> {
    source: Source<'a>,
    total: f64,
    mean: &'a mut [f64],
    scatter: &'a mut [f64],
    scratch: &'a mut Vec<f64>,
}

impl pulp::WithSimd for Kernel<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, simd: S) {
        let Kernel {
            source,
            total,
            mean,
            scatter,
            scratch,
        } = self;
        match source {
            Source::Rows {
                x,
                rows: selected,
                weights,
            } => {
                let (n, d) = (selected.map_or(x.nrows(), <[usize]>::len), x.ncols());
                // Rows padded to whole vectors, columns to whole tiles; padding rows have
                // weight 0 and padding columns are 0, so neither adds anything. Every element
                // of the block is written below, so the buffer is only zeroed when it grows.
                let rows = n.div_ceil(S::F64_LANES) * S::F64_LANES;
                let cols = d.div_ceil(TILE_J) * TILE_J;
                let need = (cols + 1) * rows;
                let (y, w) = crate::block::aligned_prefix(scratch, need).split_at_mut(cols * rows);
                match weights {
                    Some(weights) => copy_weights(&mut w[..n], weights, total),
                    None => w[..n].fill(1.0),
                }
                w[n..].fill(0.0);
                y[d * rows..].fill(0.0);
                crate::block::gather_columns(x, selected, None, rows, y);
                match weights {
                    Some(_) => weighted_scatter(simd, y, rows, w, n, d, total, mean, scatter),
                    None => centre_and_scatter(simd, y, rows, w, n, d, total, mean, scatter),
                }
            }
            Source::Block { y, stride, n, d } => {
                let rows = n.div_ceil(S::F64_LANES) * S::F64_LANES;
                let w = crate::block::aligned_prefix(scratch, rows);
                w[..n].fill(1.0);
                w[n..].fill(0.0);
                centre_and_scatter(simd, y, stride, w, n, d, total, mean, scatter);
            }
        }
    }
}

/// A weight below this fraction of the class's total is read as zero by the weighted kernels.
///
/// Why: the first M-step of a fit started from few labeled rows weights many rows by posteriors
/// of 1e-300 and less, and on Intel CPUs every multiply-add with a subnormal operand takes a
/// microcode assist. Full-covariance EM at d = 64, K = 10 spent 11.5 s in its first iteration
/// against 1.0 s in the next (1.15 s with the CPU's flush-to-zero mode: BENCHMARKS.md,
/// twenty-third round). What is dropped cannot show in the result: n ≤ 2^20 rows of weight below
/// 2^-128 of the total move a scatter entry by under 2^-68 of itself even where a squared
/// deviation is 2^40 times the variance, far below half an ulp (2^-53).
const NEGLIGIBLE_WEIGHT: f64 = 1.0 / (1u128 << 127) as f64 / 2.0;

/// `dst` = `src` with the weights below [`NEGLIGIBLE_WEIGHT`] × `total` set to zero.
#[inline(always)]
fn copy_weights(dst: &mut [f64], src: &[f64], total: f64) {
    let floor = total * NEGLIGIBLE_WEIGHT;
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = if s < floor { 0.0 } else { s };
    }
}

/// The mean of a block's `n` rows of weight one (column j at `y[j · stride..]`, `w.len()` rows
/// of it read, those past `n` zero with weight zero), the block centred at it in place, and the
/// scatter.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn centre_and_scatter<S: pulp::Simd>(
    simd: S,
    y: &mut [f64],
    stride: usize,
    w: &[f64],
    n: usize,
    d: usize,
    total: f64,
    mean: &mut [f64],
    scatter: &mut [f64],
) {
    debug_assert_eq!(mean.len(), d);
    debug_assert_eq!(scatter.len(), d * d);
    let rows = w.len();
    let (wv, _) = S::as_simd_f64s(w);
    for (j, m) in mean.iter_mut().enumerate() {
        let col = &mut y[j * stride..j * stride + rows];
        let (yv, _) = S::as_simd_f64s(col);
        *m = weighted_sum(simd, wv, yv) / total;
        let c = *m;
        col[..n].iter_mut().for_each(|v| *v -= c);
    }
    unit_tiles(simd, y, stride, d, w, scatter);
}

/// As [`centre_and_scatter`] with weights, the block left as it is: each pass of rows is
/// centred into the scatter's own buffers, beside its weighted copy. The block can then serve
/// several weight vectors ([`RowBlock`]); the values are those of centring in place.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn weighted_scatter<S: pulp::Simd>(
    simd: S,
    y: &[f64],
    stride: usize,
    w: &[f64],
    n: usize,
    d: usize,
    total: f64,
    mean: &mut [f64],
    scatter: &mut [f64],
) {
    debug_assert_eq!(mean.len(), d);
    debug_assert_eq!(scatter.len(), d * d);
    let rows = w.len();
    let cols = d.div_ceil(TILE_J) * TILE_J;
    let (wv, _) = S::as_simd_f64s(w);
    for (j, m) in mean.iter_mut().enumerate() {
        let (yv, _) = S::as_simd_f64s(&y[j * stride..j * stride + rows]);
        *m = weighted_sum(simd, wv, yv) / total;
    }
    let centre = Centre {
        w,
        n,
        mean,
        shifts: None,
    };
    if S::REGISTER_COUNT >= 32 {
        tiles::<S, 4, false>(simd, y, stride, d, cols, centre, scatter);
    } else {
        tiles::<S, 2, false>(simd, y, stride, d, cols, centre, scatter);
    }
}

/// What [`tiles`] needs to weight and centre a block's rows: the weights (one per row read,
/// zero past `n`), the number of rows `n`, the column means, and optionally a further shift of
/// each row ([`RowShifts`]).
#[derive(Clone, Copy)]
struct Centre<'a> {
    w: &'a [f64],
    n: usize,
    mean: &'a [f64],
    shifts: Option<RowShifts<'a>>,
}

/// A shift of each row by its own mix of K points: row t of column j is further centred by
/// Σ_c `shares[c · rows + t]` · `points[c · d + j]` (after the column mean is taken off), the
/// classes in order. [`RowBlock::pooled_scatter`] centres each row at its responsibility-weighted
/// mix of the class means this way.
#[derive(Clone, Copy)]
struct RowShifts<'a> {
    /// Class-major, `rows` (= `Centre::w.len()`) per class.
    shares: &'a [f64],
    /// Class-major, d per class.
    points: &'a [f64],
    k: usize,
    d: usize,
}

/// Vectors of rows that [`centre_and_shift`] keeps in registers while it takes off each class's
/// share of the shift.
const SHIFT_BLOCK_VECTORS: usize = 8;

/// `out[t]` = `src[t]` − `m` − Σ_c `shares[c · rows + r0 + t]` · `points[c · d + j]` for
/// column j of a pass of rows starting at `r0` (`rows` per class in `shares`): each class's
/// product taken off in class order, each operation rounded, as one row at a time would.
///
/// Why: taking each class's share off the whole pass in turn read and wrote the pass's column
/// once per class; here a block of rows stays in registers over the classes, and only the
/// shares are read.
#[inline(always)]
fn centre_and_shift<S: pulp::Simd>(
    simd: S,
    src: &[f64],
    m: f64,
    shifts: RowShifts<'_>,
    j: usize,
    (rows, r0): (usize, usize),
    out: &mut [f64],
) {
    const B: usize = SHIFT_BLOCK_VECTORS;
    let RowShifts {
        shares,
        points,
        k,
        d,
    } = shifts;
    let block = B * S::F64_LANES;
    let whole = src.len() / block * block;
    let mv = simd.splat_f64s(m);
    for b0 in (0..whole).step_by(block) {
        let (sv, _) = S::as_simd_f64s(&src[b0..b0 + block]);
        let mut acc: [S::f64s; B] = std::array::from_fn(|v| simd.sub_f64s(sv[v], mv));
        for class in 0..k {
            let p = simd.splat_f64s(points[class * d + j]);
            let at = class * rows + r0 + b0;
            let (share, _) = S::as_simd_f64s(&shares[at..at + block]);
            for v in 0..B {
                acc[v] = simd.sub_f64s(acc[v], simd.mul_f64s(share[v], p));
            }
        }
        S::as_mut_simd_f64s(&mut out[b0..b0 + block])
            .0
            .copy_from_slice(&acc);
    }
    for t in whole..src.len() {
        let mut c = src[t] - m;
        for class in 0..k {
            c -= shares[class * rows + r0 + t] * points[class * d + j];
        }
        out[t] = c;
    }
}

/// Vectors of rows per pass of [`class_means`]: a multiple of the 4 chains of
/// [`weighted_sum`], so that each vector goes to the chain it goes to there.
const MEANS_PASS_VECTORS: usize = 32;

/// [`class_means`] as an operation of its own (`Simd::vectorize`), so that it does not grow
/// its caller's body: inlined into the soft scatters' kernel, it left the tiles' accumulator
/// loads (`array::from_fn`) out of line, as calls to `memmove`, and the full-covariance M-step
/// at d = 16, K = 10 took 0.110 s against 0.066 s.
struct ClassMeans<'a> {
    y: &'a [f64],
    stride: usize,
    d: usize,
    weights: (&'a [f64], usize),
    live: &'a [usize],
    group: usize,
    totals: &'a [f64],
    means: &'a mut [f64],
}

impl pulp::WithSimd for ClassMeans<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, simd: S) {
        let ClassMeans {
            y,
            stride,
            d,
            weights,
            live,
            group,
            totals,
            means,
        } = self;
        class_means(simd, y, stride, d, weights, live, group, totals, means);
    }
}

/// The weighted means of the block's d columns (column j at `y[j · stride..]`) for the
/// classes `live` (their weights at `weights.0[c · rows..]`, `rows` a whole number of vectors),
/// into `means[c · d + j]`: each class's [`weighted_sum`], to the bit, `group` classes at a
/// time, divided by `totals[c]`.
///
/// Why: column by column, every column's run of rows (32 KB at 4096 rows) was read once per
/// group of classes, and each class's weights once per column, from L2 or (at d = 64, where
/// the block is 2 MB) from L3. Here the rows go in passes of [`MEANS_PASS_VECTORS`] vectors:
/// each column's pass is read once for every group, and the classes' weights for the pass
/// stay in L1 over all the columns. Each chain still takes its vectors in order, and its
/// partial sums wait in memory between passes.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn class_means<S: pulp::Simd>(
    simd: S,
    y: &[f64],
    stride: usize,
    d: usize,
    (weights, rows): (&[f64], usize),
    live: &[usize],
    group: usize,
    totals: &[f64],
    means: &mut [f64],
) {
    let zero = simd.splat_f64s(0.0);
    let vectors = rows / S::F64_LANES;
    let whole = vectors / 4 * 4;
    let classes = live.len();
    let w: Vec<&[S::f64s]> = live
        .iter()
        .map(|&c| &S::as_simd_f64s(&weights[c * rows..(c + 1) * rows]).0[..vectors])
        .collect();
    // Each column's chains, its live classes side by side.
    let mut acc = vec![[zero; 4]; d * classes];
    for p0 in (0..whole).step_by(MEANS_PASS_VECTORS) {
        let p1 = (p0 + MEANS_PASS_VECTORS).min(whole);
        for (j, column_acc) in acc.chunks_exact_mut(classes.max(1)).enumerate() {
            let yv = &S::as_simd_f64s(&y[j * stride..j * stride + rows]).0[p0..p1];
            for (ws, chains) in w.chunks(group).zip(column_acc.chunks_mut(group)) {
                match ws.len() {
                    4 => chain_products::<S, 4>(
                        simd,
                        [ws[0], ws[1], ws[2], ws[3]],
                        (p0, p1),
                        yv,
                        chains,
                    ),
                    3 => chain_products::<S, 3>(simd, [ws[0], ws[1], ws[2]], (p0, p1), yv, chains),
                    2 => chain_products::<S, 2>(simd, [ws[0], ws[1]], (p0, p1), yv, chains),
                    _ => chain_products::<S, 1>(simd, [ws[0]], (p0, p1), yv, chains),
                }
            }
        }
    }
    // The vectors after the last four, and each chain's reduction, as `weighted_sum` ends.
    for (j, column_acc) in acc.chunks_exact_mut(classes.max(1)).enumerate() {
        let yv = &S::as_simd_f64s(&y[j * stride..j * stride + rows]).0[..vectors];
        for ((&c, wc), a) in live.iter().zip(&w).zip(column_acc.iter_mut()) {
            for l in 0..vectors - whole {
                a[l] = simd.mul_add_f64s(wc[whole + l], yv[whole + l], a[l]);
            }
            let s = simd.add_f64s(simd.add_f64s(a[0], a[1]), simd.add_f64s(a[2], a[3]));
            means[c * d + j] = simd.reduce_sum_f64s(s) / totals[c];
        }
    }
}

/// [`weighted_sum`]'s loop over vectors `p0..p1` (a multiple of 4 long) for `G` classes,
/// their four chains each in `chains` (loaded, then stored back); `y` is the column's vectors
/// `p0..p1`, `w` every class's weights.
#[inline(always)]
fn chain_products<S: pulp::Simd, const G: usize>(
    simd: S,
    w: [&[S::f64s]; G],
    (p0, p1): (usize, usize),
    y: &[S::f64s],
    chains: &mut [[S::f64s; 4]],
) {
    let mut acc: [[S::f64s; 4]; G] = std::array::from_fn(|g| chains[g]);
    let w = w.map(|w| &w[p0..p1]);
    for v in (0..p1 - p0).step_by(4) {
        let yv: [S::f64s; 4] = std::array::from_fn(|l| y[v + l]);
        for g in 0..G {
            for l in 0..4 {
                acc[g][l] = simd.mul_add_f64s(w[g][v + l], yv[l], acc[g][l]);
            }
        }
    }
    chains[..G].copy_from_slice(&acc);
}

/// [`weighted_sum`] with every weight one: Σ_t y_t, the same additions in the same order
/// (1 · y is y exactly, so each multiply-add `1 · y + a` rounds as `y + a` does), with additions
/// rather than multiply-adds, and no weights to read.
#[inline(always)]
fn unit_sum<S: pulp::Simd>(simd: S, y: &[S::f64s]) -> f64 {
    let zero = simd.splat_f64s(0.0);
    let mut acc = [zero; 4];
    let yc = y.chunks_exact(4);
    let yr = yc.remainder();
    for b in yc {
        for l in 0..4 {
            acc[l] = simd.add_f64s(acc[l], b[l]);
        }
    }
    for (l, b) in yr.iter().enumerate() {
        acc[l] = simd.add_f64s(acc[l], *b);
    }
    fold_unit_sums(simd, acc)
}

/// [`unit_sum`]'s four chains reduced to their sum, in its fixed order.
#[inline(always)]
fn fold_unit_sums<S: pulp::Simd>(simd: S, acc: [S::f64s; 4]) -> f64 {
    let s = simd.add_f64s(simd.add_f64s(acc[0], acc[1]), simd.add_f64s(acc[2], acc[3]));
    simd.reduce_sum_f64s(s)
}

/// Σ_t w_t y_t with four accumulator vectors (independent chains), reduced in a fixed order.
#[inline(always)]
fn weighted_sum<S: pulp::Simd>(simd: S, w: &[S::f64s], y: &[S::f64s]) -> f64 {
    let zero = simd.splat_f64s(0.0);
    let mut acc = [zero; 4];
    let (wc, yc) = (w.chunks_exact(4), y.chunks_exact(4));
    let (wr, yr) = (wc.remainder(), yc.remainder());
    for (a, b) in wc.zip(yc) {
        for l in 0..4 {
            acc[l] = simd.mul_add_f64s(a[l], b[l], acc[l]);
        }
    }
    for (l, (a, b)) in wr.iter().zip(yr).enumerate() {
        acc[l] = simd.mul_add_f64s(*a, *b, acc[l]);
    }
    let s = simd.add_f64s(simd.add_f64s(acc[0], acc[1]), simd.add_f64s(acc[2], acc[3]));
    simd.reduce_sum_f64s(s)
}

/// Rows per pass over all tiles of unit-weight rows: the tiles re-read the block's columns, so a
/// pass covers only as many rows as stay in L2 (512 rows × 64 columns = 256 KB), and each tile's
/// accumulators wait in memory between passes. Every lane still sums its rows in order, so the pass
/// length does not change the result. Why not fewer: a pass of 128 rows (64 KB) was meant to stay
/// in L1, but at d = 64 it does not (48 KB here), and each tile then reads 16-line runs of columns
/// from L2, too short for the prefetcher. On the Xeon, the tiles alone on a 4096 × 64 block in L2
/// (one thread) ran at 48–51 GFLOP/s with 128 rows, 58–60 with 256, 62–64 with 512 and 1024, and
/// 44–52 with 4096; at d = 16 the same within noise from 128 to 512 rows.
const PASS_ROWS: usize = 512;

/// Rows per pass of the weighted tiles, whose pass is first copied into two buffers (centred and
/// weighted) that the tiles then read: kept at 128, where the buffers stay in L1 up to d = 16.
/// With 512, full-covariance EM's M-step at d = 16, K = 10 took 0.0768 s against 0.0705 s
/// (medians of 4 `profile-em` runs), and at d = 64 the same within noise.
const WEIGHTED_PASS_ROWS: usize = 128;

/// The lower triangle of Σ_t w_t y_t y_tᵀ in TILE_J × TK register tiles, mirrored into `out`
/// (column j of y at `y[j · stride..]`, as many rows as `centre.w` has).
/// `UNIT`: y is centred and every weight is one (or zero on padding rows, where y is zero), so
/// w is not read. Otherwise y is as loaded: each pass centres its rows at `centre.mean` (rows
/// from `centre.n` on are zero, as padding) into a buffer, and forms the weighted copy w ⊙ y
/// beside it once per pass rather than once per tile that reads the column (a tile has
/// TILE_J × TK multiply-adds per row vector, and with TK = 2 the TILE_J products took a third of
/// the floating-point operations). Each value is the one centring in place and weighting in the
/// tile gave, so the sums keep their bits.
#[inline(always)]
fn tiles<S: pulp::Simd, const TK: usize, const UNIT: bool>(
    simd: S,
    y: &[f64],
    stride: usize,
    d: usize,
    cols: usize,
    centre: Centre<'_>,
    out: &mut [f64],
) {
    tiles_each::<S, TK, UNIT>(simd, y, stride, d, cols, &[centre], &mut [out]);
}

/// [`tiles`] for several weightings of the same block (`centres[c]` into `outs[c]`, every
/// `centres[c].w` as long), each pass of rows read from the block for all of them in turn
/// while it is in cache. Each class's multiply-adds are those [`tiles`] does for it alone, in
/// the same order, so each result has the bits of a call for that class alone.
///
/// Why: a soft M-step's classes, and the dominance diagnostic's, are K weightings of one block
/// (4096 rows × 64 columns is 2 MB, the whole L2 here). Class after class, each one read the
/// block again from L3; pass after pass, a pass of 128 rows (64 KB at d = 64) is read once.
#[inline(always)]
fn tiles_each<S: pulp::Simd, const TK: usize, const UNIT: bool>(
    simd: S,
    y: &[f64],
    stride: usize,
    d: usize,
    cols: usize,
    centres: &[Centre<'_>],
    outs: &mut [&mut [f64]],
) {
    debug_assert_eq!(centres.len(), outs.len());
    let Some(first) = centres.first() else {
        return;
    };
    debug_assert!(centres.iter().all(|c| c.w.len() == first.w.len()));
    if centres.iter().all(|c| c.shifts.is_none()) {
        match d {
            1 => return small_triangles_each::<S, 1, UNIT>(simd, y, stride, centres, outs),
            2 => return small_triangles_each::<S, 2, UNIT>(simd, y, stride, centres, outs),
            3 => return small_triangles_each::<S, 3, UNIT>(simd, y, stride, centres, outs),
            _ => {}
        }
    }
    register_tiles_each::<S, TK, UNIT>(simd, y, stride, d, cols, centres, outs);
}

/// [`tiles_each`] in TILE_J × TK register tiles, for any number of columns.
#[inline(always)]
fn register_tiles_each<S: pulp::Simd, const TK: usize, const UNIT: bool>(
    simd: S,
    y: &[f64],
    stride: usize,
    d: usize,
    cols: usize,
    centres: &[Centre<'_>],
    outs: &mut [&mut [f64]],
) {
    let Some(first) = centres.first() else {
        return;
    };
    let (lanes, rows) = (S::F64_LANES, first.w.len());
    let zero = simd.splat_f64s(0.0);
    // The tiles of the lower triangle, in a fixed order, with their accumulators.
    let tile_list: Vec<(usize, usize)> = (0..cols)
        .step_by(TILE_J)
        .flat_map(|j0| (0..j0 + TILE_J).step_by(TK).map(move |k0| (j0, k0)))
        .collect();
    // The accumulators between passes, in memory kept by the thread from call to call (a
    // class's call at d = 64 has 136 tiles, 139 KB of them; allocating and zeroing that for
    // each class of each chunk was a fixed cost per call). The first pass starts from zero
    // rather than reading them. The buffer is taken out of the thread-local and put back, not
    // used inside a closure: one there was compiled without the dispatch's target features
    // (LDA fit at d = 64, K = 10 took 17 times as long).
    let mut store = SAVED.take();
    let per_class = tile_list.len() * TK * TILE_J * lanes;
    let need = per_class * centres.len();
    if store.len() < need {
        store.resize(need, 0.0);
    }
    let (saved_v, _) = S::as_mut_simd_f64s(&mut store[..need]);
    let per_class = per_class / lanes;
    let pass = (if UNIT { PASS_ROWS } else { WEIGHTED_PASS_ROWS } / lanes).max(1);
    let pass_rows = pass * lanes;
    // The pass's centred columns, then their weighted copies (256 KB each at d = 64), in a
    // buffer kept by the thread as the accumulators are, rather than allocated and zeroed per call.
    let mut buffer = if UNIT { Vec::new() } else { PASS_BUFFER.take() };
    let (centred, weighted) = if UNIT {
        (&mut [][..], &mut [][..])
    } else {
        crate::block::aligned_prefix(&mut buffer, 2 * cols * pass_rows)
            .split_at_mut(cols * pass_rows)
    };
    for v0 in (0..rows / lanes).step_by(pass) {
        let v1 = (v0 + pass).min(rows / lanes);
        let len = v1 - v0;
        let (r0, r1) = (v0 * lanes, v1 * lanes);
        for (centre, saved) in centres.iter().zip(saved_v.chunks_exact_mut(per_class)) {
            let Centre { w, n, mean, shifts } = *centre;
            if !UNIT {
                let valid = n.clamp(r0, r1) - r0;
                for j in 0..cols {
                    // Padding columns (j ≥ d) are zero and stay so.
                    let m = mean.get(j).copied().unwrap_or(0.0);
                    let src = &y[j * stride + r0..j * stride + r1];
                    let c = &mut centred[j * pass_rows..j * pass_rows + (r1 - r0)];
                    match shifts {
                        Some(shifts) if j < shifts.d => {
                            centre_and_shift(
                                simd,
                                &src[..valid],
                                m,
                                shifts,
                                j,
                                (rows, r0),
                                &mut c[..valid],
                            );
                        }
                        _ => {
                            for (c, v) in c[..valid].iter_mut().zip(src) {
                                *c = v - m;
                            }
                        }
                    }
                    c[valid..].fill(0.0);
                    let wc = &mut weighted[j * pass_rows..j * pass_rows + (r1 - r0)];
                    for ((o, c), wt) in wc.iter_mut().zip(&*c).zip(&w[r0..r1]) {
                        *o = wt * c;
                    }
                }
            }
            // Column j of the pass starts `j · step` vectors after `base`: the block's own
            // columns for unit weights, else the pass buffers (`weighted` for the tile's first
            // factor, `centred` for its second).
            let (a_base, b_base, step) = if UNIT {
                debug_assert_eq!(stride % lanes, 0);
                let col0 = S::as_simd_f64s(y).0;
                (&col0[v0..], &col0[v0..], stride / lanes)
            } else {
                (
                    S::as_simd_f64s(&weighted[..]).0,
                    S::as_simd_f64s(&centred[..]).0,
                    pass,
                )
            };
            for (&(j0, k0), acc) in tile_list.iter().zip(saved.chunks_exact_mut(TK * TILE_J)) {
                let mut a_acc: [[S::f64s; TK]; TILE_J] = if v0 == 0 {
                    [[zero; TK]; TILE_J]
                } else {
                    std::array::from_fn(|i| std::array::from_fn(|kk| acc[i * TK + kk]))
                };
                let (a, b) = (&a_base[j0 * step..], &b_base[k0 * step..]);
                // A tile across the diagonal (k0 ≥ j0) computes only its products of the lower
                // triangle, k ≤ j (the others are never read): at d = 16, 4 of 10 tiles, where
                // 24 of their 64 multiply-adds per row vector were thrown away. With unit
                // weights its second factor's columns are among its first's, read once.
                match k0.checked_sub(j0) {
                    Some(0) if UNIT => {
                        tile_products::<S, TK, 0, true>(simd, a, b, step, len, &mut a_acc)
                    }
                    Some(0) => tile_products::<S, TK, 0, false>(simd, a, b, step, len, &mut a_acc),
                    Some(2) if UNIT => {
                        tile_products::<S, TK, 2, true>(simd, a, b, step, len, &mut a_acc)
                    }
                    Some(2) => tile_products::<S, TK, 2, false>(simd, a, b, step, len, &mut a_acc),
                    _ => {
                        tile_products::<S, TK, FULL_TILE, false>(simd, a, b, step, len, &mut a_acc)
                    }
                }
                for i in 0..TILE_J {
                    for kk in 0..TK {
                        acc[i * TK + kk] = a_acc[i][kk];
                    }
                }
            }
        }
    }
    if rows / lanes == 0 {
        saved_v.fill(zero);
    }
    for (out, saved) in outs.iter_mut().zip(saved_v.chunks_exact(per_class)) {
        for (&(j0, k0), acc) in tile_list.iter().zip(saved.chunks_exact(TK * TILE_J)) {
            for i in 0..TILE_J {
                for kk in 0..TK {
                    let (j, k) = (j0 + i, k0 + kk);
                    if j < d && k <= j {
                        let s = simd.reduce_sum_f64s(acc[i * TK + kk]);
                        out[k * d + j] = s;
                        out[j * d + k] = s;
                    }
                }
            }
        }
    }
    SAVED.set(store);
    if !UNIT {
        PASS_BUFFER.set(buffer);
    }
}

/// [`tiles_each`] for `D` ≤ 3 columns without row shifts: the D(D + 1)/2 sums of the lower
/// triangle held in registers over every row, each row vector centred and weighted in
/// registers. Each sum is the chain of multiply-adds that [`tiles_each`]' tile gives it (the
/// weighted deviation of column j times the deviation of column k, k ≤ j, one vector of rows
/// after another; rows from `n` on centred to zero), reduced the same way, so the bits are the
/// same.
///
/// Why: [`tiles_each`] pads the columns to a whole tile (4 × 4 accumulators) and copies each pass
/// of rows, centred and weighted, into buffers first. At d = 2 three of its sixteen multiply-adds
/// are used, and the copies of four columns (two of them padding) cost as much again: the weighted
/// scatters of 4096 rows for 10 classes ran at 3.6 GFLOP/s on one thread (EM's M-step at
/// d = 2, K = 10 was half of an iteration).
#[inline(always)]
fn small_triangles_each<S: pulp::Simd, const D: usize, const UNIT: bool>(
    simd: S,
    y: &[f64],
    stride: usize,
    centres: &[Centre<'_>],
    outs: &mut [&mut [f64]],
) {
    let lanes = S::F64_LANES;
    let zero = simd.splat_f64s(0.0);
    for (centre, out) in centres.iter().zip(outs.iter_mut()) {
        let vectors = centre.w.len() / lanes;
        let rows = vectors * lanes;
        let columns: [&[S::f64s]; D] =
            std::array::from_fn(|j| S::as_simd_f64s(&y[j * stride..j * stride + rows]).0);
        let w = S::as_simd_f64s(&centre.w[..rows]).0;
        let mean: [S::f64s; D] =
            std::array::from_fn(|j| simd.splat_f64s(if UNIT { 0.0 } else { centre.mean[j] }));
        let mut acc = [[zero; D]; D];
        let mut add = |c: [S::f64s; D], wv: S::f64s| {
            let a: [S::f64s; D] = if UNIT {
                c
            } else {
                std::array::from_fn(|j| simd.mul_f64s(wv, c[j]))
            };
            for j in 0..D {
                for k in 0..=j {
                    acc[j][k] = simd.mul_add_f64s(a[j], c[k], acc[j][k]);
                }
            }
        };
        // Unit weights read the block as it is (centred, zero past the data); weighted rows
        // are centred here, in whole vectors while every row is data.
        let whole = if UNIT {
            vectors
        } else {
            (centre.n / lanes).min(vectors)
        };
        for v in 0..whole {
            let c: [S::f64s; D] = if UNIT {
                std::array::from_fn(|j| columns[j][v])
            } else {
                std::array::from_fn(|j| simd.sub_f64s(columns[j][v], mean[j]))
            };
            add(c, w[v]);
        }
        for v in whole..vectors {
            // The vector holding row `n`, and those past it: rows from `n` on are zero.
            let mut lanes_of = [[0.0f64; 16]; D];
            for (j, lane) in lanes_of.iter_mut().enumerate() {
                for (l, value) in lane[..lanes].iter_mut().enumerate() {
                    let row = v * lanes + l;
                    if row < centre.n {
                        *value = y[j * stride + row] - centre.mean[j];
                    }
                }
            }
            let c: [S::f64s; D] =
                std::array::from_fn(|j| S::as_simd_f64s(&lanes_of[j][..lanes]).0[0]);
            add(c, w[v]);
        }
        let d = D;
        for j in 0..D {
            for k in 0..=j {
                let s = simd.reduce_sum_f64s(acc[j][k]);
                out[k * d + j] = s;
                out[j * d + k] = s;
            }
        }
    }
}

/// [`tile_products`]' `OFFSET` for a tile wholly below the diagonal: every product.
const FULL_TILE: isize = -(TILE_J as isize);

/// `acc[i][kk]` += Σ_{v < len} `a[i · step + v]` · `b[kk · step + v]`, each accumulator's
/// multiply-adds in the order of v: one tile of [`tiles`] over one pass of rows.
///
/// Only where `OFFSET + kk ≤ i`: a tile whose second factor starts `OFFSET` ≥ 0 columns after
/// its first (across the diagonal) takes only the products of the lower triangle, and leaves
/// the other accumulators as they were; [`FULL_TILE`] takes every product. `SAME`: `b` is `a`
/// (unit weights, OFFSET ≥ 0), so column kk of `b` is column `OFFSET + kk` of `a`, already
/// loaded. Each accumulator it adds to gets the multiply-adds of a full tile, so the same bits.
///
/// Why raw reads: with a slice per column (eight of them at TK = 4), the loop kept their
/// pointers on the stack and recomputed each one every step (about twenty scalar instructions
/// beside sixteen multiply-adds); one base per factor and a fixed step need three registers.
#[inline(always)]
fn tile_products<S: pulp::Simd, const TK: usize, const OFFSET: isize, const SAME: bool>(
    simd: S,
    a: &[S::f64s],
    b: &[S::f64s],
    step: usize,
    len: usize,
    acc: &mut [[S::f64s; TK]; TILE_J],
) {
    const { assert!(TILE_J == 4) };
    if len == 0 {
        return;
    }
    // Every read below is inside the slices: the last is a[(TILE_J − 1) · step + len − 1] and
    // b[(TK − 1) · step + len − 1].
    assert!((TILE_J - 1) * step + len <= a.len() && (TK - 1) * step + len <= b.len());
    let (a, b) = (a.as_ptr(), b.as_ptr());
    let mut r = *acc;
    for v in 0..len {
        // SAFETY: v < len, so each offset is below the bound asserted above for its slice.
        #[allow(unsafe_code)]
        let av: [S::f64s; TILE_J] = unsafe {
            [
                *a.add(v),
                *a.add(step + v),
                *a.add(2 * step + v),
                *a.add(3 * step + v),
            ]
        };
        for kk in 0..TK {
            let bv = if SAME && OFFSET >= 0 {
                av[(OFFSET as usize + kk).min(TILE_J - 1)]
            } else {
                // SAFETY: as above, kk < TK and v < len.
                #[allow(unsafe_code)]
                unsafe {
                    *b.add(kk * step + v)
                }
            };
            for i in 0..TILE_J {
                if OFFSET + kk as isize <= i as isize {
                    r[i][kk] = simd.mul_add_f64s(av[i], bv, r[i][kk]);
                }
            }
        }
    }
    *acc = r;
}

std::thread_local! {
    /// [`tiles`]' accumulators between passes, per thread (see there).
    static SAVED: std::cell::Cell<Vec<f64>> = const { std::cell::Cell::new(Vec::new()) };
    /// [`tiles`]' centred and weighted copies of a pass's rows, per thread.
    static PASS_BUFFER: std::cell::Cell<Vec<f64>> = const { std::cell::Cell::new(Vec::new()) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use faer::Mat;
    use rand::SeedableRng;
    use rand_distr::{Distribution, StandardNormal};

    /// The rows of `labels` listed class by class (each class's rows in order) and each
    /// class's `(start, len)` in that list: the `order` and `ranges` of a split by order.
    fn listed_by_class(labels: &[usize], k: usize) -> (Vec<u32>, Vec<(usize, usize)>) {
        let (mut order, mut ranges) = (Vec::new(), Vec::new());
        for c in 0..k {
            let start = order.len();
            order.extend((0..labels.len() as u32).filter(|&i| labels[i as usize] == c));
            ranges.push((start, order.len() - start));
        }
        (order, ranges)
    }

    /// A mean and scatter with the bits of `want`, entry by entry.
    fn assert_same_bits(got: &(Vec<f64>, Vec<f64>), want: &(Vec<f64>, Vec<f64>), what: &str) {
        for (a, b) in got.0.iter().chain(&got.1).zip(want.0.iter().chain(&want.1)) {
            assert_eq!(a.to_bits(), b.to_bits(), "{what}");
        }
    }

    /// A d × d scatter (column-major) exactly symmetric and within 1e-12 of `want`, relative to
    /// its largest diagonal entry (or 1).
    fn assert_symmetric_close(got: &[f64], want: &[f64], d: usize, what: &str) {
        let scale = (0..d).map(|j| want[j * d + j]).fold(1.0, f64::max);
        for j in 0..d {
            for i in 0..d {
                let (a, b) = (got[j * d + i], want[j * d + i]);
                assert_eq!(a.to_bits(), got[i * d + j].to_bits(), "symmetry: {what}");
                assert!(
                    (a - b).abs() <= 1e-12 * scale,
                    "({i}, {j}): {a} vs {b}, {what}"
                );
            }
        }
    }

    /// Textbook two-pass formulas, one row at a time.
    fn reference(x: MatRef<'_, f64>, w: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let (n, d) = (x.nrows(), x.ncols());
        let total: f64 = w.iter().sum();
        let mean: Vec<f64> = (0..d)
            .map(|j| (0..n).map(|t| w[t] * x[(t, j)]).sum::<f64>() / total)
            .collect();
        let mut s = vec![0.0; d * d];
        for t in 0..n {
            for j in 0..d {
                for k in 0..d {
                    s[k * d + j] += w[t] * (x[(t, j)] - mean[j]) * (x[(t, k)] - mean[k]);
                }
            }
        }
        (mean, s)
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn split_packs_up_to_its_classes_where_avx_512_is() {
        // Packing is never chosen past its classes, on any CPU.
        assert!(!split_packs(MAX_PACKED_CLASSES + 1));
        // And up to it wherever AVX-512 is.
        assert_eq!(
            split_packs(MAX_PACKED_CLASSES),
            pulp::x86::V4::is_available()
        );
    }

    /// `unit_sum` (additions) gives the bits of `weighted_sum` with weights of one
    /// (multiply-adds) for every length (whole runs of four vectors and the vectors after
    /// them), values of every magnitude and sign, −0, and infinities.
    #[test]
    fn unit_sums_have_the_bits_of_sums_weighted_by_ones() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(31);
        let simd = pulp::Scalar::new();
        for vectors in [0usize, 1, 3, 4, 5, 8, 11] {
            for special in [
                None,
                Some(-0.0),
                Some(f64::INFINITY),
                Some(f64::NEG_INFINITY),
            ] {
                let mut y: Vec<f64> = (0..vectors)
                    .map(|i| {
                        let g: f64 = StandardNormal.sample(&mut rng);
                        g * 10f64.powi((i % 7) as i32 * 40 - 120)
                    })
                    .collect();
                if let (Some(v), Some(first)) = (special, y.first_mut()) {
                    *first = v;
                }
                let ones = vec![1.0; vectors];
                let (yv, _) = <pulp::Scalar as pulp::Simd>::as_simd_f64s(&y);
                let (wv, _) = <pulp::Scalar as pulp::Simd>::as_simd_f64s(&ones);
                let (got, want) = (unit_sum(simd, yv), weighted_sum(simd, wv, yv));
                assert_eq!(
                    got.to_bits(),
                    want.to_bits(),
                    "{vectors} vectors, {special:?}"
                );
            }
        }
        // The same with AVX-512's eight lanes where the CPU has them.
        #[cfg(target_arch = "x86_64")]
        if let Some(simd) = pulp::x86::V4::try_new() {
            for n in [8usize, 24, 32, 40, 96, 4104] {
                let y: Vec<f64> = (0..n)
                    .map(|i| {
                        let g: f64 = StandardNormal.sample(&mut rng);
                        g * 10f64.powi((i % 5) as i32 * 50 - 100)
                    })
                    .collect();
                let ones = vec![1.0; n];
                let (yv, _) = <pulp::x86::V4 as pulp::Simd>::as_simd_f64s(&y);
                let (wv, _) = <pulp::x86::V4 as pulp::Simd>::as_simd_f64s(&ones);
                let (got, want) = simd.vectorize(
                    #[inline(always)]
                    || (unit_sum(simd, yv), weighted_sum(simd, wv, yv)),
                );
                assert_eq!(got.to_bits(), want.to_bits(), "{n} rows");
            }
        }
    }

    /// A block of a whole chunk (4096 rows, 512 lines per column) lays its columns out one line
    /// more apart, so that the scatter's tiles do not read eight columns' same rows from one
    /// cache set; the rows past n, which the tiles read, are zero.
    #[test]
    fn blocks_of_whole_chunks_are_spread_with_zero_rows_after_theirs() {
        let mut block = RowBlock::new();
        for n in [4096, 4095, 1000] {
            let x = Mat::from_fn(n, 9, |i, j| (i * 9 + j) as f64 + 0.5);
            block.load(x.as_ref());
            let stride = block.stride;
            assert_eq!(stride, crate::block::spread_row_capacity(n), "n = {n}");
            let cols = 9usize.div_ceil(TILE_J) * TILE_J;
            let y = crate::block::aligned_prefix(&mut block.buf, cols * stride);
            for j in 0..9 {
                assert!(
                    y[j * stride + n..(j + 1) * stride]
                        .iter()
                        .all(|&v| v == 0.0)
                );
                assert_eq!(y[j * stride + n - 1], x[(n - 1, j)], "n = {n}, column {j}");
            }
        }
        assert_eq!(crate::block::spread_row_capacity(4096), 4104);
    }

    /// The block's class means run in passes of rows ([`class_means`]); each must keep the
    /// bits of the one-class kernel's sums over the whole column, across pass boundaries and
    /// the vectors after the last four.
    #[test]
    fn block_means_in_passes_have_the_bits_of_the_one_class_kernel() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(23);
        let mut block = RowBlock::new();
        let pass = MEANS_PASS_VECTORS * 8;
        for n in [1, pass - 1, pass, pass + 1, 2 * pass + 37, 4097] {
            for d in [1usize, 4, 7] {
                let mut g = || -> f64 { StandardNormal.sample(&mut rng) };
                let x = Mat::from_fn(n, d, |_, j| 1e3 * (j + 1) as f64 + g());
                let w: Vec<f64> = (0..n).map(|_| g().abs() + 0.01).collect();
                let total: f64 = w.iter().sum();
                let (mut want, mut unused) = (vec![0.0; d], vec![0.0; d * d]);
                weighted_mean_and_scatter(
                    x.as_ref(),
                    &w,
                    total,
                    &mut want,
                    &mut unused,
                    &mut Vec::new(),
                );
                block.load(x.as_ref());
                let (mut got, mut unused) = (vec![f64::NAN; d], vec![0.0; d * d]);
                block.weighted_mean_and_scatter(&w, total, &mut got, &mut unused, &mut Vec::new());
                assert_eq!(
                    got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "n = {n}, d = {d}"
                );
                // The soft pooled scatter's means, with a second class, too.
                let other: Vec<f64> = w.iter().map(|v| 1.0 / (1.0 + v)).collect();
                let other_total: f64 = other.iter().sum();
                let (mut means, mut pooled) = (vec![f64::NAN; 2 * d], vec![0.0; d * d]);
                block.pooled_scatter(
                    &[&w, &other],
                    &[total, other_total],
                    &mut means,
                    &mut pooled,
                    &mut Vec::new(),
                );
                assert_eq!(
                    means[..d].iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "pooled, n = {n}, d = {d}"
                );
            }
        }
    }

    /// Several classes through one block give each class the bits of its own call, over groups
    /// of [`CLASSES_PER_READ`] and a remainder, with weights that are zero, negligible or
    /// uneven, and they are the two-pass formula's values.
    #[test]
    fn classes_sharing_a_block_get_the_bits_of_one_class_at_a_time() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let mut block = RowBlock::new();
        let mut scratch = Vec::new();
        for (n, d) in [(1usize, 1usize), (9, 3), (130, 17), (301, 5), (64, 64)] {
            let mut g = || -> f64 { StandardNormal.sample(&mut rng) };
            let x = Mat::from_fn(n, d, |_, j| 50.0 * j as f64 + g());
            for k in [1usize, 4, 6, 9] {
                let weights: Vec<Vec<f64>> = (0..k)
                    .map(|c| {
                        (0..n)
                            .map(|i| match (i + c) % 7 {
                                0 => 0.0,
                                1 => 1e-300,
                                _ => (((i * 31 + c * 17) % 97) as f64 + 0.5) / (c + 1) as f64,
                            })
                            .collect()
                    })
                    .collect();
                let totals: Vec<f64> = weights.iter().map(|w| w.iter().sum()).collect();
                if totals.iter().any(|&t| t <= 0.0) {
                    continue;
                }
                block.load(x.as_ref());
                let mut means = vec![vec![f64::NAN; d]; k];
                let mut scatters = vec![vec![f64::NAN; d * d]; k];
                let mut classes: Vec<ClassMoments<'_>> = means
                    .iter_mut()
                    .zip(scatters.iter_mut())
                    .enumerate()
                    .map(|(c, (mean, scatter))| ClassMoments {
                        weights: &weights[c],
                        total: totals[c],
                        mean,
                        scatter,
                    })
                    .collect();
                block.weighted_means_and_scatters(&mut classes, &mut scratch);
                for c in 0..k {
                    let mut want = (vec![0.0; d], vec![0.0; d * d]);
                    block.weighted_mean_and_scatter(
                        &weights[c],
                        totals[c],
                        &mut want.0,
                        &mut want.1,
                        &mut scratch,
                    );
                    let got = (means[c].clone(), scatters[c].clone());
                    let what = format!("n = {n}, d = {d}, class {c} of {k}");
                    assert_same_bits(&got, &want, &what);
                    let exact = reference(x.as_ref(), &weights[c]);
                    for j in 0..d {
                        assert!((got.0[j] - exact.0[j]).abs() <= 1e-9 * (1.0 + exact.0[j].abs()));
                    }
                    assert_symmetric_close(&got.1, &exact.1, d, &what);
                }
            }
        }
    }

    /// Runs [`tiles_each`] (which takes `small_triangles_each` for d ≤ 3) and
    /// [`register_tiles_each`] on the same block and weightings.
    struct BothTiles<'a> {
        y: &'a [f64],
        stride: usize,
        d: usize,
        centres: &'a [Centre<'a>],
        unit: bool,
    }

    impl pulp::WithSimd for BothTiles<'_> {
        type Output = (Vec<Vec<f64>>, Vec<Vec<f64>>);

        fn with_simd<S: pulp::Simd>(self, simd: S) -> Self::Output {
            let BothTiles {
                y,
                stride,
                d,
                centres,
                unit,
            } = self;
            let cols = d.div_ceil(TILE_J) * TILE_J;
            let run = |small: bool| {
                let mut outs = vec![vec![f64::NAN; d * d]; centres.len()];
                let mut refs: Vec<&mut [f64]> = outs.iter_mut().map(|o| &mut o[..]).collect();
                match (small, unit) {
                    (true, true) => {
                        tiles_each::<S, 2, true>(simd, y, stride, d, cols, centres, &mut refs)
                    }
                    (true, false) => {
                        tiles_each::<S, 2, false>(simd, y, stride, d, cols, centres, &mut refs)
                    }
                    (false, true) => register_tiles_each::<S, 2, true>(
                        simd, y, stride, d, cols, centres, &mut refs,
                    ),
                    (false, false) => register_tiles_each::<S, 2, false>(
                        simd, y, stride, d, cols, centres, &mut refs,
                    ),
                }
                outs
            };
            (run(true), run(false))
        }
    }

    #[test]
    fn small_triangles_have_the_bits_of_the_register_tiles() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        for d in 1..=3usize {
            for n in [1usize, 7, 8, 9, 130, 301, 1031] {
                // Columns padded to whole tiles and rows to a multiple of 8, as a block is; the
                // padding rows hold NaN, which the weighted path must not read as data.
                let stride = n.div_ceil(8) * 8;
                let cols = d.div_ceil(TILE_J) * TILE_J;
                let mut g = || -> f64 { StandardNormal.sample(&mut rng) };
                let mut y = vec![0.0; cols * stride];
                for j in 0..d {
                    for i in 0..stride {
                        y[j * stride + i] = if i < n {
                            1e3 * j as f64 + g()
                        } else {
                            f64::NAN
                        };
                    }
                }
                let weights: Vec<Vec<f64>> = (0..3)
                    .map(|c| {
                        (0..stride)
                            .map(|i| match (i + c) % 5 {
                                _ if i >= n => 0.0,
                                0 => 0.0,
                                _ => (((i * 31 + c * 17) % 97) as f64 + 0.5) / (c + 1) as f64,
                            })
                            .collect()
                    })
                    .collect();
                let means: Vec<Vec<f64>> = (0..3)
                    .map(|c| (0..d).map(|j| 1e3 * j as f64 + 0.1 * c as f64).collect())
                    .collect();
                let centres: Vec<Centre<'_>> = (0..3)
                    .map(|c| Centre {
                        w: &weights[c],
                        n,
                        mean: &means[c],
                        shifts: None,
                    })
                    .collect();
                let (small, tiled) = pulp::Arch::new().dispatch(BothTiles {
                    y: &y,
                    stride,
                    d,
                    centres: &centres,
                    unit: false,
                });
                for (c, (a, b)) in small.iter().zip(&tiled).enumerate() {
                    for (e, (a, b)) in a.iter().zip(b).enumerate() {
                        assert!(a.is_finite(), "d = {d}, n = {n}, class {c}, entry {e}: {a}");
                        assert_eq!(
                            a.to_bits(),
                            b.to_bits(),
                            "d = {d}, n = {n}, class {c}, entry {e}"
                        );
                    }
                }
                // Unit weights: the block centred, zero past the data.
                let mut centred = y.clone();
                for j in 0..d {
                    for i in 0..stride {
                        centred[j * stride + i] = if i < n {
                            y[j * stride + i] - means[0][j]
                        } else {
                            0.0
                        };
                    }
                }
                let ones: Vec<f64> = (0..stride).map(|i| if i < n { 1.0 } else { 0.0 }).collect();
                let unit = [Centre {
                    w: &ones,
                    n: stride,
                    mean: &[],
                    shifts: None,
                }];
                let (small, tiled) = pulp::Arch::new().dispatch(BothTiles {
                    y: &centred,
                    stride,
                    d,
                    centres: &unit,
                    unit: true,
                });
                for (e, (a, b)) in small[0].iter().zip(&tiled[0]).enumerate() {
                    assert!(a.is_finite(), "unit, d = {d}, n = {n}, entry {e}: {a}");
                    assert_eq!(
                        a.to_bits(),
                        b.to_bits(),
                        "unit, d = {d}, n = {n}, entry {e}"
                    );
                }
            }
        }
    }

    #[test]
    fn matches_the_two_pass_formula_for_every_shape_and_layout() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let mut scratch = Vec::new();
        for d in [1usize, 2, 3, 4, 5, 9, 16, 17, 33] {
            for n in [1usize, 2, 7, 8, 9, 31, 100] {
                let mut g = || -> f64 { StandardNormal.sample(&mut rng) };
                // A large common offset: the centred form must not lose digits to it.
                let x = Mat::from_fn(n, d, |_, j| 1e6 + j as f64 + g());
                let w: Vec<f64> = (0..n)
                    .map(|t| if t % 5 == 3 { 0.0 } else { g().abs() + 0.1 })
                    .collect();
                let total: f64 = w.iter().sum();
                let (want_mean, want) = reference(x.as_ref(), &w);
                let layouts = crate::test_layouts::Layouts::new(x.as_ref());
                let views = layouts.views(x.as_ref());
                let mut first: Option<(Vec<f64>, Vec<f64>)> = None;
                for (which, view) in views.into_iter().enumerate() {
                    let mut mean = vec![f64::NAN; d];
                    let mut s = vec![f64::NAN; d * d];
                    weighted_mean_and_scatter(view, &w, total, &mut mean, &mut s, &mut scratch);
                    for j in 0..d {
                        let tol = 1e-12 * want_mean[j].abs();
                        assert!(
                            (mean[j] - want_mean[j]).abs() <= tol,
                            "d={d} n={n} mean {j}"
                        );
                        for k in 0..d {
                            let (g, r) = (s[k * d + j], want[k * d + j]);
                            assert!(
                                (g - r).abs() <= 1e-9 * (1.0 + r.abs()),
                                "d={d} n={n} layout={which} ({j},{k}): {g} vs {r}"
                            );
                            assert_eq!(g.to_bits(), s[j * d + k].to_bits(), "symmetric");
                        }
                    }
                    // Layout changes how rows are read, never the arithmetic.
                    match &first {
                        None => first = Some((mean, s)),
                        Some(f) => assert_eq!(f, &(mean, s), "d={d} n={n} layout={which}"),
                    }
                }
            }
        }
    }

    #[test]
    fn one_hot_weights_give_the_subset_statistics() {
        // Zero weights remove rows exactly: the statistics of the kept rows alone.
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let mut g = || -> f64 { StandardNormal.sample(&mut rng) };
        let (n, d) = (57, 6);
        let x = Mat::from_fn(n, d, |_, _| g());
        let keep: Vec<usize> = (0..n).filter(|t| t % 3 != 0).collect();
        let w: Vec<f64> = (0..n).map(|t| if t % 3 != 0 { 1.0 } else { 0.0 }).collect();
        let sub = Mat::from_fn(keep.len(), d, |t, j| x[(keep[t], j)]);
        let (want_mean, want) = reference(sub.as_ref(), &vec![1.0; keep.len()]);
        let mut mean = vec![0.0; d];
        let mut s = vec![0.0; d * d];
        let total = keep.len() as f64;
        let check = |mean: &[f64], s: &[f64], what: &str| {
            for j in 0..d {
                assert!((mean[j] - want_mean[j]).abs() < 1e-13, "{what} mean {j}");
                for k in 0..d {
                    assert!(
                        (s[k * d + j] - want[k * d + j]).abs() < 1e-11,
                        "{what} ({j},{k})"
                    );
                }
            }
        };
        weighted_mean_and_scatter(x.as_ref(), &w, total, &mut mean, &mut s, &mut Vec::new());
        check(&mean, &s, "zero weights");
        // The kept rows read in place, with unit weights implied or given, in every layout;
        // the scratch buffer is reused (already larger) between calls.
        let ones = vec![1.0; keep.len()];
        let layouts = crate::test_layouts::Layouts::new(x.as_ref());
        let mut scratch = vec![f64::NAN; 10_000];
        for (which, view) in layouts.views(x.as_ref()).into_iter().enumerate() {
            for weights in [None, Some(&ones[..])] {
                mean.fill(f64::NAN);
                s.fill(f64::NAN);
                mean_and_scatter_of_rows(
                    view,
                    &keep,
                    weights,
                    total,
                    &mut mean,
                    &mut s,
                    &mut scratch,
                );
                check(&mean, &s, &format!("rows, layout {which}, {weights:?}"));
            }
        }
    }

    /// Weights negligible against the class's total are read as zero (they would cost a
    /// microcode assist per subnormal operand, and change nothing); the floor is relative, so a
    /// class whose weights are all tiny keeps every row.
    #[test]
    fn negligible_weights_are_read_as_zero_relative_to_the_total() {
        let src = [1.0, 1e-310, 1e-40, 2e-38, 0.0, 0.5];
        let mut dst = [f64::NAN; 6];
        copy_weights(&mut dst, &src, 1.5);
        assert_eq!(dst, [1.0, 0.0, 0.0, 2e-38, 0.0, 0.5]);
        // Scaled by 1e-250, every value stays representable and the floor (about 4.4e-289)
        // falls between 1e-290 and 2e-288: the same rows are kept as at scale one.
        let tiny: Vec<f64> = src.iter().map(|w| w * 1e-250).collect();
        assert!(tiny[2] > 0.0 && tiny[3] > 0.0, "test premise: no underflow");
        copy_weights(&mut dst, &tiny, 1.5e-250);
        assert_eq!(dst[..], [tiny[0], 0.0, 0.0, tiny[3], 0.0, tiny[5]][..]);
    }

    /// Rows with weights far below the total's floor (subnormal ones among them) give the bits
    /// of the same rows with weight zero, through both weighted sources (rows as given, and a
    /// laid-out `RowBlock`); every weight scaled by 1e-300 gives the statistics of scale one.
    #[test]
    fn negligible_weights_change_nothing_and_tiny_classes_are_kept() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let mut g = || -> f64 { StandardNormal.sample(&mut rng) };
        let (n, d) = (203, 9);
        let x = Mat::from_fn(n, d, |_, j| 3.0 * j as f64 + g());
        let w: Vec<f64> = (0..n).map(|_| g().abs() + 0.1).collect();
        let negligible: Vec<f64> = (0..n)
            .map(|t| match t % 4 {
                0 => 1e-310,
                1 => 1e-200 * w[t],
                _ => w[t],
            })
            .collect();
        let zeroed: Vec<f64> = (0..n).map(|t| if t % 4 < 2 { 0.0 } else { w[t] }).collect();
        let mut block = RowBlock::new();
        block.load(x.as_ref());
        let stats = |w: &[f64], block: &mut RowBlock| {
            let total: f64 = w.iter().sum();
            let (mut m1, mut s1) = (vec![0.0; d], vec![0.0; d * d]);
            weighted_mean_and_scatter(x.as_ref(), w, total, &mut m1, &mut s1, &mut Vec::new());
            let (mut m2, mut s2) = (vec![0.0; d], vec![0.0; d * d]);
            block.weighted_mean_and_scatter(w, total, &mut m2, &mut s2, &mut Vec::new());
            assert_eq!((&m1, &s1), (&m2, &s2), "the two sources agree");
            (m1, s1)
        };
        // The totals differ in their last bits only through the negligible weights' sum,
        // which does not reach the total's ulp.
        assert_eq!(
            negligible.iter().sum::<f64>(),
            zeroed.iter().sum::<f64>(),
            "test premise"
        );
        assert_eq!(stats(&negligible, &mut block), stats(&zeroed, &mut block));
        let (want_mean, want) = reference(x.as_ref(), &w);
        let scaled: Vec<f64> = w.iter().map(|v| v * 1e-300).collect();
        let (mean, s) = stats(&scaled, &mut block);
        for j in 0..d {
            assert!((mean[j] - want_mean[j]).abs() <= 1e-12 * (1.0 + want_mean[j].abs()));
            for k in 0..d {
                let (got, r) = (s[k * d + j] * 1e300, want[k * d + j]);
                assert!(
                    (got - r).abs() <= 1e-9 * (1.0 + r.abs()),
                    "({j},{k}) {got} vs {r}"
                );
            }
        }
    }

    /// The pooled scatter of soft classes equals the sum of the classes' own two-pass scatters
    /// (the textbook formula, row by row), and each class's mean is the bits of the per-class
    /// kernel's, for every width (tile padding included), row count (partial passes and
    /// vectors), class count, and weights that are soft, nearly hard, one-hot, zero for some
    /// rows and for a whole class, and scaled by λ on some rows. The data sit at 1e6 with
    /// classes 1e3 standard deviations apart: the difference-of-sums form would keep no digit
    /// of the within-class part there.
    #[test]
    fn soft_pooled_scatter_is_the_sum_of_the_class_scatters() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(17);
        let mut block = RowBlock::new();
        let mut scratch = Vec::new();
        for d in [1usize, 2, 3, 5, 9, 16, 17] {
            for n in [1usize, 7, 9, 19, 130, 301] {
                // Live classes (the last is empty above 2) in groups of every size the means
                // take together.
                for k in [1usize, 2, 3, 4, 5, 10] {
                    let mut g = || -> f64 { StandardNormal.sample(&mut rng) };
                    let class_of = |t: usize| (t * 7 + t / 3) % k;
                    let x = Mat::from_fn(n, d, |t, j| {
                        1e6 + 1e3 * (class_of(t) * (j + 1)) as f64 + g()
                    });
                    // Row t's responsibilities: by pattern soft, nearly hard, one-hot or zero;
                    // every third row scaled by λ = 0.3. The last class is empty when k > 2.
                    let mut w = vec![vec![0.0; n]; k];
                    for t in 0..n {
                        let used = if k > 2 { k - 1 } else { k };
                        let raw: Vec<f64> = (0..used)
                            .map(|c| match t % 4 {
                                0 => g().abs() + 0.05,
                                1 if c == class_of(t) % used => 1.0,
                                1 => 1e-9,
                                2 if c == class_of(t) % used => 1.0,
                                _ => 0.0,
                            })
                            .collect();
                        let sum: f64 = raw.iter().sum();
                        let scale = if t % 3 == 0 { 0.3 } else { 1.0 };
                        for (c, r) in raw.iter().enumerate() {
                            if sum > 0.0 {
                                w[c][t] = scale * r / sum;
                            }
                        }
                    }
                    let refs: Vec<&[f64]> = w.iter().map(Vec::as_slice).collect();
                    let totals: Vec<f64> = w.iter().map(|w| w.iter().sum()).collect();
                    let mut want = vec![0.0; d * d];
                    let mut want_means = vec![0.0; k * d];
                    block.load(x.as_ref());
                    // The padding columns are zero, though a narrower or longer block was
                    // loaded before.
                    assert!(block.padding_is_zero(), "d={d} n={n} k={k}");
                    for c in (0..k).filter(|&c| totals[c] > 0.0) {
                        let (_, s) = reference(x.as_ref(), refs[c]);
                        want.iter_mut().zip(&s).for_each(|(a, b)| *a += b);
                        let (mut m, mut unused) = (vec![0.0; d], vec![0.0; d * d]);
                        block.weighted_mean_and_scatter(
                            refs[c],
                            totals[c],
                            &mut m,
                            &mut unused,
                            &mut scratch,
                        );
                        want_means[c * d..(c + 1) * d].copy_from_slice(&m);
                    }
                    let (mut means, mut got) = (vec![f64::NAN; k * d], vec![f64::NAN; d * d]);
                    block.pooled_scatter(&refs, &totals, &mut means, &mut got, &mut scratch);
                    assert_eq!(means, want_means, "d = {d}, n = {n}, k = {k}: means");
                    for j in 0..d {
                        for i in 0..d {
                            let (a, b) = (got[i * d + j], want[i * d + j]);
                            // Relative to the entry's scale, plus the squares of the
                            // deviations' own roundings (about 1e-10 at 1e6) where the
                            // scatter is zero, as for a single row.
                            let size = (want[j * d + j] * want[i * d + i]).sqrt();
                            let rounding = 1e-18 * totals.iter().sum::<f64>();
                            assert!(
                                (a - b).abs() <= 1e-9 * size + rounding,
                                "d = {d}, n = {n}, k = {k}, ({j}, {i}): {a} vs {b}"
                            );
                            assert_eq!(a.to_bits(), got[j * d + i].to_bits(), "symmetric");
                        }
                    }
                }
            }
        }
    }

    /// Each class of `ClassBlocks` gives the bits of `mean_and_scatter_of_rows` on the same
    /// rows, for every layout, chunk length (whole groups of 8 rows and a tail), class count
    /// (an empty class included) and width; `split` says whether every value is finite.
    #[test]
    fn class_blocks_give_the_bits_of_the_rows_read_by_index() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let mut scratch = Vec::new();
        let mut blocks = ClassBlocks::new();
        for d in [1usize, 3, 4, 9, 16] {
            for n in [1usize, 7, 8, 9, 100, 1029] {
                let mut g = || -> f64 { StandardNormal.sample(&mut rng) };
                // The last column's magnitudes range over twelve orders, so that sums taken in
                // another order or association than the reference's differ in their bits.
                let x = Mat::from_fn(n, d, |i, j| match j + 1 == d && d > 1 {
                    true => g() * 10f64.powi(3 * (i % 5) as i32),
                    false => 1e3 + j as f64 + g(),
                });
                for (k, by_order) in (1..=MAX_PACKED_CLASSES)
                    .flat_map(|k| [(k, false), (k, true)])
                    .chain([(7, true)])
                {
                    // Class k − 1 is empty when k > 1; the others in an uneven pattern.
                    let labels: Vec<usize> = (0..n)
                        .map(|i| if k == 1 { 0 } else { (i * 7 + i / 5) % (k - 1) })
                        .collect();
                    let (order, ranges) = listed_by_class(&labels, k);
                    let layouts = crate::test_layouts::Layouts::new(x.as_ref());
                    for (which, view) in layouts.views(x.as_ref()).into_iter().enumerate() {
                        if by_order {
                            assert!(blocks.split_by_order(view, &order, &ranges));
                        } else {
                            assert!(blocks.split(view, &labels, k));
                        }
                        // The padding columns are zero, though the last layout (of another
                        // width, length or class count) put rows where they are now.
                        assert!(blocks.padding_is_zero(), "d={d} n={n} k={k} layout={which}");
                        // An unknown class has no rows.
                        assert_eq!(blocks.class_rows(k).nrows(), 0);
                        let mut wants = Vec::new();
                        for c in 0..k {
                            let rows: Vec<usize> = (0..n).filter(|&i| labels[i] == c).collect();
                            assert_eq!(blocks.class_len(c), rows.len());
                            // The class's rows as laid out, in their order in x.
                            let laid = blocks.class_rows(c);
                            assert_eq!((laid.nrows(), laid.ncols()), (rows.len(), d));
                            for (t, &r) in rows.iter().enumerate() {
                                for j in 0..d {
                                    assert_eq!(laid[(t, j)].to_bits(), x[(r, j)].to_bits());
                                }
                            }
                            let mut want = (vec![0.0; d], vec![0.0; d * d]);
                            if !rows.is_empty() {
                                let total = rows.len() as f64;
                                let (m, sc) = (&mut want.0, &mut want.1);
                                mean_and_scatter_of_rows(
                                    view,
                                    &rows,
                                    None,
                                    total,
                                    m,
                                    sc,
                                    &mut scratch,
                                );
                            }
                            let mut got = (vec![f64::NAN; d], vec![f64::NAN; d * d]);
                            blocks.mean_and_scatter(c, &mut got.0, &mut got.1, &mut scratch);
                            let what = format!(
                                "d={d} n={n} k={k} by order {by_order} layout={which} class {c}"
                            );
                            assert_same_bits(&got, &want, &what);
                            wants.push(want);
                        }
                        // Centred as it is split: the same bits, the empty class included,
                        // whatever it asks for after its last column (here slices of other
                        // lengths than the chunk's, for odd n).
                        let (after, after_labels) = (vec![1.5; n + 9], vec![3usize; n / 2]);
                        assert!(if by_order && n % 2 == 1 {
                            blocks.split_by_order_centred(
                                view,
                                &order,
                                &ranges,
                                (&after, &after_labels),
                            )
                        } else if by_order {
                            blocks.split_by_order_centred(view, &order, &ranges, (&[], &[]))
                        } else {
                            blocks.split_centred(view, &labels, k)
                        });
                        assert!(blocks.padding_is_zero(), "centred: d={d} n={n} k={k}");
                        for (c, want) in wants.iter().enumerate() {
                            let mut got = (vec![f64::NAN; d], vec![f64::NAN; d * d]);
                            blocks.mean_and_scatter(c, &mut got.0, &mut got.1, &mut scratch);
                            let what = format!(
                                "centred: d={d} n={n} k={k} by order {by_order} layout={which} \
                                 class {c}"
                            );
                            assert_same_bits(&got, want, &what);
                        }
                        // A plain split after a centred one reads the rows as they are.
                        assert!(blocks.split(view, &labels, k));
                        let rows: Vec<usize> = (0..n).filter(|&i| labels[i] == 0).collect();
                        let laid = blocks.class_rows(0);
                        for (t, &r) in rows.iter().enumerate() {
                            assert_eq!(laid[(t, d - 1)].to_bits(), x[(r, d - 1)].to_bits());
                        }
                    }
                }
                // A non-finite value anywhere, in the whole groups of 8 or the tail, in the
                // first or the last column, is seen, for every number of packed classes.
                for ((row, v), (col, k)) in [
                    (0, f64::NAN),
                    (n - 1, f64::INFINITY),
                    (n / 2, f64::NEG_INFINITY),
                ]
                .into_iter()
                .flat_map(|bad| [(d - 1, 2), (0, 1), (0, 3), (d - 1, 4)].map(|at| (bad, at)))
                {
                    let mut bad = x.clone();
                    bad[(row, col)] = v;
                    let labels: Vec<usize> = (0..n).map(|i| i % k).collect();
                    let layouts = crate::test_layouts::Layouts::new(bad.as_ref());
                    let order: Vec<u32> = (0..n as u32).collect();
                    // The rows listed class by class, so that the bad row is in a class's
                    // whole groups of 8 or in its tail, depending on n and k.
                    let (by_class, ranges) = listed_by_class(&labels, k);
                    for view in layouts.views(bad.as_ref()) {
                        let what = format!("d={d} n={n} k={k} row {row} column {col}: {v}");
                        assert!(!blocks.split(view, &labels, k), "{what}");
                        assert!(!blocks.split_centred(view, &labels, k), "centred: {what}");
                        let by_order = blocks.split_by_order(view, &order, &[(0, n)]);
                        assert!(!by_order, "by order: d={d} n={n} row {row}: {v}");
                        let by_class =
                            blocks.split_by_order_centred(view, &by_class, &ranges, (&[], &[]));
                        assert!(!by_class, "by order, class by class: {what}");
                    }
                }
            }
        }
    }

    #[test]
    #[should_panic(expected = "index out of bounds")]
    fn a_listed_row_outside_the_chunk_is_never_gathered() {
        // Row 40 of a 40-row column-major chunk: a gather would read past the column (into the
        // next one, inside the matrix) without a sound; the check sends the split to the copy
        // by index, which stops at the slice's bound.
        let (n, d) = (40, 2);
        let x = Mat::from_fn(n, d, |i, j| (i + j) as f64);
        let mut order: Vec<u32> = (0..n as u32).collect();
        order[n - 9] = n as u32;
        ClassBlocks::new().split_by_order(x.as_ref(), &order, &[(0, 16), (16, n - 16)]);
    }

    #[test]
    fn pooled_scatter_is_the_sum_of_the_class_scatters() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(8);
        let (mut scratch, mut blocks) = (Vec::new(), ClassBlocks::new());
        // One set of blocks throughout, so that each split's gaps hold the previous one's rows.
        for d in [1usize, 3, 4, 9, 16, 33] {
            for n in [1usize, 9, 100, 1029, 150] {
                let mut g = || -> f64 { StandardNormal.sample(&mut rng) };
                let x = Mat::from_fn(n, d, |i, j| 1e4 * (i % 3) as f64 + j as f64 + g());
                for (k, by_order) in [(1, false), (2, false), (3, false), (4, true), (7, true)] {
                    // Class k − 1 is empty when k > 1.
                    let labels: Vec<usize> = (0..n)
                        .map(|i| if k == 1 { 0 } else { (i * 5 + i / 3) % (k - 1) })
                        .collect();
                    let members: Vec<Vec<usize>> = (0..k)
                        .map(|c| (0..n).filter(|&i| labels[i] == c).collect())
                        .collect();
                    let (order, ranges) = listed_by_class(&labels, k);
                    let split = |blocks: &mut ClassBlocks| {
                        if by_order {
                            blocks.split_by_order(x.as_ref(), &order, &ranges)
                        } else {
                            blocks.split(x.as_ref(), &labels, k)
                        }
                    };
                    // Each class's mean and scatter by the per-class kernel, and the textbook
                    // sum of the class scatters.
                    let mut want_means = vec![0.0; k * d];
                    let mut want = vec![0.0; d * d];
                    assert!(split(&mut blocks));
                    for c in 0..k {
                        let mut sc = vec![0.0; d * d];
                        let m = &mut want_means[c * d..(c + 1) * d];
                        blocks.mean_and_scatter(c, m, &mut sc, &mut scratch);
                        if !members[c].is_empty() {
                            let rows =
                                Mat::from_fn(members[c].len(), d, |t, j| x[(members[c][t], j)]);
                            let (_, s) = reference(rows.as_ref(), &vec![1.0; members[c].len()]);
                            want.iter_mut().zip(&s).for_each(|(w, s)| *w += s);
                        }
                    }
                    assert!(split(&mut blocks));
                    let (mut means, mut got) = (vec![f64::NAN; k * d], vec![f64::NAN; d * d]);
                    blocks.means_and_pooled_scatter(&mut means, &mut got, &mut scratch);
                    let what = format!("d={d} n={n} k={k} by order {by_order}");
                    for (a, b) in means.iter().zip(&want_means) {
                        assert_eq!(a.to_bits(), b.to_bits(), "means: {what}");
                    }
                    assert_symmetric_close(&got, &want, d, &what);
                    // Centred as it is split: the same bits (the blocks serve every case, so the
                    // gaps between classes may hold an earlier case's rows).
                    assert!(split(&mut blocks));
                    assert!(if by_order {
                        blocks.split_by_order_centred(x.as_ref(), &order, &ranges, (&[], &[]))
                    } else {
                        blocks.split_centred(x.as_ref(), &labels, k)
                    });
                    let (mut centred_means, mut centred) =
                        (vec![f64::NAN; k * d], vec![f64::NAN; d * d]);
                    blocks.means_and_pooled_scatter(&mut centred_means, &mut centred, &mut scratch);
                    let what = format!("centred: {what}");
                    assert_same_bits(&(centred_means, centred), &(means, got), &what);
                }
            }
        }
    }

    #[test]
    fn rows_centred_by_group_give_the_pooled_scatter() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
        let (mut scratch, mut block) = (Vec::new(), RowBlock::new());
        // One block throughout, so that each load reuses (and must overwrite) a larger one.
        for d in [33usize, 1, 3, 4, 9, 16] {
            for n in [1029usize, 1, 9, 100, 150] {
                let mut g = || -> f64 { StandardNormal.sample(&mut rng) };
                // Classes 1e4 apart: centring at the class means must not lose digits to them.
                let x = Mat::from_fn(n, d, |i, j| 1e4 * (i % 3) as f64 + j as f64 + g());
                // k = 17 is past the AVX-512 path's 16 groups (one row at a time there).
                for k in [1usize, 2, 3, 6, 16, 17] {
                    // Class k − 1 is empty when k > 1, and a row in 13 has a label past k − 1,
                    // which no class counts.
                    let labels: Vec<usize> = (0..n)
                        .map(|i| match (k, i % 13) {
                            (1, 12) => 1,
                            (1, _) => 0,
                            (_, 12) => k + i % 5,
                            _ => (i * 5 + i / 3) % (k - 1),
                        })
                        .collect();
                    let counts = crate::moments::group_counts(&labels, k);
                    let mut want_sums = Mat::zeros(k, d);
                    crate::moments::grouped_sums(x.as_ref(), &labels, want_sums.as_mut());
                    let mut want = vec![0.0; d * d];
                    for c in 0..k {
                        let members: Vec<usize> = (0..n).filter(|&i| labels[i] == c).collect();
                        if !members.is_empty() {
                            let rows = Mat::from_fn(members.len(), d, |t, j| x[(members[t], j)]);
                            let (_, s) = reference(rows.as_ref(), &vec![1.0; members.len()]);
                            want.iter_mut().zip(&s).for_each(|(w, s)| *w += s);
                        }
                    }
                    let layouts = crate::test_layouts::Layouts::new(x.as_ref());
                    for (which, view) in layouts.views(x.as_ref()).into_iter().enumerate() {
                        let what = format!("d={d} n={n} k={k} layout={which}");
                        let mut sums = Mat::zeros(k, d);
                        block.load_centred_by_group(view, &labels, &counts, sums.as_mut());
                        assert_eq!(block.nrows(), n, "{what}");
                        assert!(block.padding_is_zero(), "{what}");
                        // The sums are grouped_sums' bits, so the means are too.
                        for c in 0..k {
                            for j in 0..d {
                                let (a, b) = (sums[(c, j)], want_sums[(c, j)]);
                                assert_eq!(a.to_bits(), b.to_bits(), "sums ({c}, {j}): {what}");
                            }
                        }
                        let mut got = vec![f64::NAN; d * d];
                        block.centred_scatter(&mut got, &mut scratch);
                        assert_symmetric_close(&got, &want, d, &what);
                        // By rows: the means of `grouped_moments_by_rows`, to the bit, and the
                        // same pooled scatter, wherever the path runs.
                        let mut means = vec![f64::NAN; k * d];
                        let ran = block.load_centred_by_rows(view, &labels, &counts, &mut means);
                        #[cfg(target_arch = "x86_64")]
                        let runs = crate::moments::ByRows::new().is_some()
                            && k <= 16
                            && crate::block::contiguous_columns(view, 0..d).is_some();
                        #[cfg(not(target_arch = "x86_64"))]
                        let runs = false;
                        assert_eq!(ran, runs, "by rows: {what}");
                        if ran {
                            assert_eq!(block.nrows(), n, "by rows: {what}");
                            assert!(block.padding_is_zero(), "by rows: {what}");
                            let (mut want_means, mut squares) =
                                (vec![0.0; k * d], vec![0.0; k * d]);
                            crate::moments::grouped_moments_by_rows(
                                x.as_ref(),
                                &labels,
                                &counts,
                                &mut want_means,
                                &mut squares,
                                RowsAhead::NONE,
                            );
                            for (at, (a, b)) in means.iter().zip(&want_means).enumerate() {
                                assert_eq!(a.to_bits(), b.to_bits(), "by rows mean {at}: {what}");
                            }
                            let mut got = vec![f64::NAN; d * d];
                            block.centred_scatter(&mut got, &mut scratch);
                            assert_symmetric_close(&got, &want, d, &format!("by rows: {what}"));
                        }
                        // In one shifted pass: the same means and scatter, to rounding,
                        // wherever the path runs.
                        let what = format!("shifted: {what}");
                        let (mut means, mut got) = (vec![f64::NAN; k * d], vec![f64::NAN; d * d]);
                        let ran = block.shifted_pooled_scatter(
                            view,
                            &labels,
                            &counts,
                            &mut means,
                            &mut got,
                            &mut scratch,
                        );
                        #[cfg(target_arch = "x86_64")]
                        let runs = pulp::x86::V4::is_available()
                            && k <= SHIFTED_MAX_GROUPS
                            && crate::block::contiguous_columns(view, 0..d).is_some();
                        #[cfg(not(target_arch = "x86_64"))]
                        let runs = false;
                        assert_eq!(ran, runs, "{what}");
                        if ran {
                            assert_symmetric_close(&got, &want, d, &what);
                            for c in 0..k {
                                for j in 0..d {
                                    let want = match counts[c] {
                                        0 => 0.0,
                                        m => want_sums[(c, j)] / m as f64,
                                    };
                                    let got = means[c * d + j];
                                    assert!(
                                        (got - want).abs() <= 1e-13 * want.abs().max(1.0),
                                        "mean ({c}, {j}): {got} vs {want}, {what}"
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// The shifted pass declines a chunk whose shift is far from its class's mean against the
    /// class's spread (a class's first rows far from the rest), and one with a value that is
    /// not finite, leaving them to the two centred passes; it takes a shift near the mean.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_shifted_pass_declines_far_shifts_and_values_not_finite() {
        if !pulp::x86::V4::is_available() {
            return;
        }
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(31);
        let (n, d, k) = (1000, 5, 2);
        let labels: Vec<usize> = (0..n).map(|i| i % k).collect();
        let counts = crate::moments::group_counts(&labels, k);
        let mut scratch = Vec::new();
        let mut block = RowBlock::new();
        let mut run = |x: &Mat<f64>| {
            let (mut means, mut s) = (vec![0.0; k * d], vec![0.0; d * d]);
            block.shifted_pooled_scatter(
                x.as_ref(),
                &labels,
                &counts,
                &mut means,
                &mut s,
                &mut scratch,
            )
        };
        let mut x = Mat::from_fn(n, d, |_, _| -> f64 { StandardNormal.sample(&mut rng) });
        assert!(run(&x), "near shifts");
        // Class 1's first eight rows (rows 1, 3, …, 15) 30 σ off in column 2: its shift is
        // then about 30 from its mean, c (m − s)² ≈ 500 · 900 against a pooled scatter of
        // about 1000 + 8 · 900.
        for i in 0..8 {
            x[(2 * i + 1, 2)] += 30.0;
        }
        assert!(!run(&x), "a far shift");
        for i in 0..8 {
            x[(2 * i + 1, 2)] -= 30.0;
        }
        assert!(run(&x), "near shifts again");
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let mut xn = x.clone();
            xn[(700, 4)] = bad;
            assert!(!run(&xn), "{bad}");
        }
    }

    /// Checks a vector centring kernel (`kernel(col, groups, ids, means, out)`) against
    /// `centre_by_group`, and that one against its definition, bit for bit, on `n` rows, for
    /// every class count in `ks`.
    #[cfg(target_arch = "x86_64")]
    fn check_centring(
        n: usize,
        ks: &[usize],
        kernel: impl Fn(&[f64], &[usize], &[u8], &[f64], &mut [f64]),
    ) {
        let col: Vec<f64> = (0..n).map(|i| (i as f64 * 0.37).sin() * 1e3).collect();
        for &k in ks {
            let means: Vec<f64> = (0..k).map(|c| c as f64 * 11.5 - 3.0).collect();
            // Every group below k, and some past it (rows that become zero), among them
            // groups whose low byte is a group below k.
            let groups: Vec<usize> = (0..n)
                .map(|i| match i % 11 {
                    10 => 256 + i % k,
                    _ => (i * 7 + i / 4) % (k + 3),
                })
                .collect();
            let (mut want, mut got) = (vec![f64::NAN; n], vec![f64::NAN; n]);
            centre_by_group(&col, &groups, &means, &mut want);
            let mut ids = Vec::new();
            narrow_groups(&groups, k, &mut ids);
            kernel(&col, &groups, &ids, &means, &mut got);
            for i in 0..n {
                assert_eq!(got[i].to_bits(), want[i].to_bits(), "k {k} row {i}");
                let expect = means.get(groups[i]).map_or(0.0, |m| col[i] - m);
                assert_eq!(want[i].to_bits(), expect.to_bits(), "k {k} row {i}");
            }
        }
    }

    #[test]
    fn narrowed_groups_are_each_group_below_k_or_the_byte_past_the_means() {
        for n in [0usize, 1, 7, 8, 9, 64, 4099] {
            let groups: Vec<usize> = (0..n)
                .map(|i| match i % 13 {
                    12 => usize::MAX - i,
                    5 => 256 + i % 4,
                    _ => (i * 5 + i / 3) % 19,
                })
                .collect();
            for k in [1usize, 2, 3, 10, 16, 17] {
                let mut got = vec![7u8; 3];
                narrow_groups(&groups, k, &mut got);
                let want: Vec<u8> = if k <= PERMUTED_MAX_GROUPS {
                    let byte = |g: usize| if g < k { g as u8 } else { u8::MAX };
                    groups.iter().map(|&g| byte(g)).collect()
                } else {
                    Vec::new()
                };
                assert_eq!(got, want, "n = {n}, k = {k}");
            }
        }
    }

    #[test]
    fn centring_by_group_with_avx512_gives_the_values_of_one_row_at_a_time() {
        #[cfg(target_arch = "x86_64")]
        if let Some(simd) = pulp::x86::V4::try_new() {
            check_centring(
                8 * 9 + 5,
                &[1, 2, 7, 8, 9, 16],
                |col, groups, ids, means, out| {
                    let kernel = crate::moments::ByRows::V4(simd);
                    centre_by_group_with(kernel, col, groups, ids, means, out);
                },
            );
        }
    }

    #[test]
    fn centring_by_group_with_avx2_gives_the_values_of_one_row_at_a_time() {
        #[cfg(target_arch = "x86_64")]
        if let Some(simd) = pulp::x86::V3::try_new() {
            // Every register count (1 to 4 registers of means) and its edges.
            let ks = [1, 2, 4, 5, 7, 8, 9, 12, 13, 16];
            check_centring(4 * 23 + 3, &ks, |col, groups, ids, means, out| {
                let kernel = crate::moments::ByRows::V3(simd);
                centre_by_group_with(kernel, col, groups, ids, means, out);
            });
        }
    }
}
