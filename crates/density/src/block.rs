//! Copying rows of any layout into a column-major block, the input format of the SIMD kernels
//! (`mahalanobis`, `scatter`).

use faer::MatRef;

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
