//! Copying rows of any layout into a column-major block, the input format of the SIMD kernels
//! (`mahalanobis`, `scatter`), and the column and row-subset views the other passes read and
//! write.

use faer::{MatMut, MatRef};

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

/// Asks the CPU to bring the cache line holding `values[at]` into cache, without waiting for it
/// (nothing when `at` is past the end, or off x86-64): for a pass that knows what it reads
/// next, so that reading it from memory overlaps the arithmetic on what is already in cache.
#[inline(always)]
pub(crate) fn prefetch(values: &[f64], at: usize) {
    #[cfg(target_arch = "x86_64")]
    if let Some(v) = values.get(at) {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: SSE, the instruction's only feature, is in every x86-64 CPU; a prefetch
        // changes nothing the program can read and cannot fault (here the address is inside
        // `values` anyway).
        #[allow(unsafe_code)]
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(v).cast());
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (values, at);
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
        match x.col(j).try_as_col_major() {
            Some(col) => {
                let col = col.as_slice();
                out.extend(rows.iter().map(|&i| col[i]));
            }
            None => out.extend(rows.iter().map(|&i| x[(i, j)])),
        }
    }
    MatRef::from_column_major_slice(&out[..], m, d)
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
