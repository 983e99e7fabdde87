//! LDA's scores `X Wᵀ + b` for a few classes, streamed a few columns at a time.
//!
//! Why not faer's product: with two classes its kernel reads 48 rows of every column in turn,
//! so at d = 64 it draws on 64 streams far apart at once. In a scratch program on this host it
//! read the input at about 22 GB/s where a sum with independent partial sums read 27 GB/s.
//! Here a block of rows is read four columns at a time, each column a contiguous run, and each
//! class's scores for the block wait in cache between the groups (27–28 GB/s in the same
//! program). The product is then bound by one read of the input, as it must be.
//!
//! Every row's score is the same sequence of fused multiply-adds, from the intercept through
//! the columns in order, in the vector loop and in the scalar tail alike: a row's bits do not
//! depend on where it falls in a block or a chunk.

use faer::{MatMut, MatRef};

/// Most classes this kernel takes (the largest K the benchmark measures); LDA with more uses
/// faer's product, whose output then has enough columns to share each read among many classes
/// (not measured).
pub(crate) const MAX_STREAMED_CLASSES: usize = 10;

/// Rows per block: each class's scores for the block (16 KB; 160 KB at K = 10) stay in L1 or
/// L2 while the groups of columns pass over them.
const BLOCK_ROWS: usize = 2048;

/// Columns read together.
const GROUP: usize = 4;

/// Writes `out[i, c] = b_c + Σ_j x[i, j] w[c, j]` for `weights` (K × d row-major) and
/// `intercepts` (K), when K is 2 to [`MAX_STREAMED_CLASSES`] and the columns of `x` and `out`
/// are contiguous. Returns false, writing nothing, otherwise.
pub(crate) fn linear_scores(
    x: MatRef<'_, f64>,
    weights: &[f64],
    intercepts: &[f64],
    out: MatMut<'_, f64>,
) -> bool {
    let (n, d, k) = (x.nrows(), x.ncols(), intercepts.len());
    if !(2..=MAX_STREAMED_CLASSES).contains(&k)
        || weights.len() != k * d
        || out.nrows() != n
        || out.ncols() != k
    {
        return false;
    }
    let Some(columns) = (0..d)
        .map(|j| x.col(j).try_as_col_major().map(|c| c.as_slice()))
        .collect::<Option<Vec<&[f64]>>>()
    else {
        return false;
    };
    let Some(scores) = out
        .col_iter_mut()
        .map(|col| col.try_as_col_major_mut().map(|c| c.as_slice_mut()))
        .collect::<Option<Vec<&mut [f64]>>>()
    else {
        return false;
    };
    let kernel = Kernel {
        columns,
        weights,
        intercepts,
        scores,
    };
    // K is a constant inside the kernel, so that each class's accumulator stays in a register.
    let arch = pulp::Arch::new();
    match k {
        2 => arch.dispatch(Typed::<2>(kernel)),
        3 => arch.dispatch(Typed::<3>(kernel)),
        4 => arch.dispatch(Typed::<4>(kernel)),
        5 => arch.dispatch(Typed::<5>(kernel)),
        6 => arch.dispatch(Typed::<6>(kernel)),
        7 => arch.dispatch(Typed::<7>(kernel)),
        8 => arch.dispatch(Typed::<8>(kernel)),
        9 => arch.dispatch(Typed::<9>(kernel)),
        10 => arch.dispatch(Typed::<10>(kernel)),
        _ => return false,
    }
    true
}

struct Kernel<'a> {
    columns: Vec<&'a [f64]>,
    weights: &'a [f64],
    intercepts: &'a [f64],
    scores: Vec<&'a mut [f64]>,
}

struct Typed<'a, const K: usize>(Kernel<'a>);

impl<const K: usize> pulp::WithSimd for Typed<'_, K> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, simd: S) {
        let Kernel {
            columns,
            weights,
            intercepts,
            mut scores,
        } = self.0;
        let (d, n) = (columns.len(), scores[0].len());
        let b: [f64; K] = std::array::from_fn(|c| intercepts[c]);
        for r0 in (0..n).step_by(BLOCK_ROWS) {
            let r1 = (r0 + BLOCK_ROWS).min(n);
            let mut s: [&mut [f64]; K] = match scores
                .iter_mut()
                .map(|col| &mut col[r0..r1])
                .collect::<Vec<_>>()
                .try_into()
            {
                Ok(s) => s,
                Err(_) => return,
            };
            let mut j = 0;
            while j < d {
                let width = if d - j >= GROUP { GROUP } else { 1 };
                let x: [&[f64]; GROUP] =
                    std::array::from_fn(|q| &columns[(j + q).min(d - 1)][r0..r1]);
                let w: [[f64; GROUP]; K] = std::array::from_fn(|c| {
                    std::array::from_fn(|q| weights[c * d + (j + q).min(d - 1)])
                });
                match (j == 0, width == GROUP) {
                    (true, true) => group::<S, K, GROUP, true>(simd, &x, &w, &b, &mut s),
                    (true, false) => group::<S, K, 1, true>(simd, &x, &w, &b, &mut s),
                    (false, true) => group::<S, K, GROUP, false>(simd, &x, &w, &b, &mut s),
                    (false, false) => group::<S, K, 1, false>(simd, &x, &w, &b, &mut s),
                }
                j += width;
            }
        }
    }
}

/// One group of `W` columns (the first `W` of `x` and of each class's `w`) added into every
/// class's scores `s`; with `FIRST`, the scores start from the intercepts `b` instead.
#[inline(always)]
fn group<S: pulp::Simd, const K: usize, const W: usize, const FIRST: bool>(
    simd: S,
    x: &[&[f64]; GROUP],
    w: &[[f64; GROUP]; K],
    b: &[f64; K],
    s: &mut [&mut [f64]; K],
) {
    let xv: [&[S::f64s]; W] = std::array::from_fn(|q| S::as_simd_f64s(x[q]).0);
    let wv: [[S::f64s; W]; K] =
        std::array::from_fn(|c| std::array::from_fn(|q| simd.splat_f64s(w[c][q])));
    let bv: [S::f64s; K] = std::array::from_fn(|c| simd.splat_f64s(b[c]));
    let vectors = xv[0].len();
    let sv: [&mut [S::f64s]; K] = s.each_mut().map(|c| S::as_mut_simd_f64s(c).0);
    for v in 0..vectors {
        let xs: [S::f64s; W] = std::array::from_fn(|q| xv[q][v]);
        for c in 0..K {
            let mut acc = if FIRST { bv[c] } else { sv[c][v] };
            for q in 0..W {
                acc = simd.mul_add_f64s(xs[q], wv[c][q], acc);
            }
            sv[c][v] = acc;
        }
    }
    // The rows after the last whole vector, with the same operations one at a time.
    let tail = vectors * S::F64_LANES;
    for c in 0..K {
        for (i, out) in s[c].iter_mut().enumerate().skip(tail) {
            let mut acc = if FIRST { b[c] } else { *out };
            for q in 0..W {
                acc = x[q][i].mul_add(w[c][q], acc);
            }
            *out = acc;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use faer::Mat;

    /// Inputs whose sums cancel (signs mixed, magnitudes 1e-3 to 1e3), so a wrong term or a
    /// wrong order shows in the bits.
    fn problem(n: usize, d: usize, k: usize) -> (Mat<f64>, Vec<f64>, Vec<f64>) {
        let v = |i: usize, j: usize, salt: usize| {
            let h = (i * 7919 + j * 104_729 + salt * 1_299_709) % 10_007;
            (h as f64 / 10_007.0 - 0.5) * 10f64.powi((h % 7) as i32 - 3)
        };
        let x = Mat::from_fn(n, d, |i, j| v(i, j, 1));
        let w = (0..k * d).map(|t| v(t / d, t % d, 2)).collect();
        let b = (0..k).map(|c| v(c, 0, 3) * 100.0).collect();
        (x, w, b)
    }

    /// The kernel's contract, row by row: the intercept, then one fused multiply-add per column
    /// in order.
    fn fma_chain(x: &Mat<f64>, w: &[f64], b: &[f64], i: usize, c: usize) -> f64 {
        let d = x.ncols();
        (0..d).fold(b[c], |acc, j| x[(i, j)].mul_add(w[c * d + j], acc))
    }

    #[test]
    fn every_row_is_the_fma_chain_and_close_to_a_plain_sum() {
        // n crosses the 2048-row block and leaves tails of every length under a vector; d
        // leaves every remainder of the four-column groups.
        for (n, d) in [
            (1, 1),
            (7, 2),
            (9, 3),
            (2049, 4),
            (4100, 5),
            (33, 7),
            (63, 9),
            (300, 17),
            (2100, 64),
        ] {
            for k in 2..=MAX_STREAMED_CLASSES {
                let (x, w, b) = problem(n, d, k);
                let mut out = Mat::<f64>::from_fn(n, k, |_, _| f64::NAN);
                assert!(
                    linear_scores(x.as_ref(), &w, &b, out.as_mut()),
                    "n {n} d {d} k {k}"
                );
                for i in 0..n {
                    for c in 0..k {
                        let got = out[(i, c)];
                        let want = fma_chain(&x, &w, &b, i, c);
                        assert_eq!(
                            got.to_bits(),
                            want.to_bits(),
                            "n {n} d {d} k {k} ({i}, {c})"
                        );
                        // An independent reference: products rounded, summed last column first.
                        let plain =
                            (0..d).rev().map(|j| x[(i, j)] * w[c * d + j]).sum::<f64>() + b[c];
                        let scale = b[c].abs()
                            + (0..d)
                                .map(|j| (x[(i, j)] * w[c * d + j]).abs())
                                .sum::<f64>();
                        assert!(
                            (got - plain).abs() <= 4.0 * (d + 1) as f64 * f64::EPSILON * scale,
                            "n {n} d {d} k {k} ({i}, {c}): {got} vs {plain}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_row_has_the_same_bits_wherever_it_falls() {
        let (x, w, b) = problem(2500, 6, 3);
        let mut all = Mat::<f64>::zeros(2500, 3);
        assert!(linear_scores(x.as_ref(), &w, &b, all.as_mut()));
        for (r0, len) in [(0, 1), (5, 1), (2047, 3), (1000, 1500), (2499, 1)] {
            let mut part = Mat::<f64>::zeros(len, 3);
            assert!(linear_scores(
                x.as_ref().subrows(r0, len),
                &w,
                &b,
                part.as_mut()
            ));
            for i in 0..len {
                for c in 0..3 {
                    assert_eq!(
                        part[(i, c)].to_bits(),
                        all[(r0 + i, c)].to_bits(),
                        "row {}",
                        r0 + i
                    );
                }
            }
        }
    }

    #[test]
    fn declines_what_it_does_not_stream_and_writes_nothing() {
        let (x, w, b) = problem(40, 3, 2);
        let x_rows = x.transpose().to_owned();
        let mut out = Mat::<f64>::zeros(40, 2);
        // Row-major input.
        assert!(!linear_scores(x_rows.transpose(), &w, &b, out.as_mut()));
        // Row-major output.
        let mut out_rows = Mat::<f64>::zeros(2, 40);
        assert!(!linear_scores(
            x.as_ref(),
            &w,
            &b,
            out_rows.as_mut().transpose_mut()
        ));
        // One class, and more than the kernel takes.
        let (x1, w1, b1) = problem(40, 3, 1);
        let mut out1 = Mat::<f64>::zeros(40, 1);
        assert!(!linear_scores(x1.as_ref(), &w1, &b1, out1.as_mut()));
        let (x11, w11, b11) = problem(40, 3, MAX_STREAMED_CLASSES + 1);
        let mut out11 = Mat::<f64>::zeros(40, MAX_STREAMED_CLASSES + 1);
        assert!(!linear_scores(x11.as_ref(), &w11, &b11, out11.as_mut()));
        // Weights of the wrong length.
        assert!(!linear_scores(x.as_ref(), &w[..5], &b, out.as_mut()));
        for m in [&out, &out1, &out11] {
            assert!(m.col_iter().all(|col| col.iter().all(|v| *v == 0.0)));
        }
        assert!(out_rows.col_iter().all(|col| col.iter().all(|v| *v == 0.0)));
    }
}
