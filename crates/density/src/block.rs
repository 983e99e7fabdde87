//! Copying rows of any layout into a column-major block, the input format of the SIMD kernels
//! (`mahalanobis`, `scatter`), and the column and row-subset views the other passes read.

use faer::MatRef;

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

/// `out[j·stride + t] = x[t, j] − shift_j` for the rows of `x` (no shift: a plain copy), and 0
/// for `t` from `x.nrows()` to `stride` (padding rows). Reads contiguous columns or rows where
/// the layout has them.
#[inline(always)]
pub(crate) fn gather_columns(
    x: MatRef<'_, f64>,
    shift: Option<&[f64]>,
    stride: usize,
    out: &mut [f64],
) {
    let (n, d) = (x.nrows(), x.ncols());
    let m = |j: usize| shift.map_or(0.0, |s| s[j]);
    for col in out.chunks_exact_mut(stride).take(d) {
        col[n..].fill(0.0);
    }
    if x.row_stride() == 1 {
        for (j, col) in out.chunks_exact_mut(stride).take(d).enumerate() {
            if let Some(src) = x.col(j).try_as_col_major() {
                let mj = m(j);
                for (o, v) in col.iter_mut().zip(src.as_slice()) {
                    *o = v - mj;
                }
            }
        }
    } else if x.col_stride() == 1 {
        for t in 0..n {
            if let Some(row) = x.row(t).try_as_row_major() {
                for (j, (col, v)) in out.chunks_exact_mut(stride).zip(row.as_slice()).enumerate() {
                    col[t] = v - m(j);
                }
            }
        }
    } else {
        for (j, col) in out.chunks_exact_mut(stride).take(d).enumerate() {
            for t in 0..n {
                col[t] = x[(t, j)] - m(j);
            }
        }
    }
}
