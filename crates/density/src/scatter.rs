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
        x,
        rows,
        weights,
        total,
        mean,
        scatter,
        scratch,
    });
}

/// Columns per tile row (the tile's "j" side); the "k" side is 4 or 2 by register count.
const TILE_J: usize = 4;

struct Kernel<'a> {
    x: MatRef<'a, f64>,
    /// Selected rows (all when `None`).
    rows: Option<&'a [usize]>,
    /// Weights of the selected rows (one each when `None`).
    weights: Option<&'a [f64]>,
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
            x,
            rows: selected,
            weights,
            total,
            mean,
            scatter,
            scratch,
        } = self;
        let (n, d) = (selected.map_or(x.nrows(), <[usize]>::len), x.ncols());
        debug_assert_eq!(mean.len(), d);
        debug_assert_eq!(scatter.len(), d * d);
        // Rows padded to whole vectors, columns to whole tiles; padding rows have weight 0 and
        // padding columns are 0, so neither adds anything. Every element of the block is written
        // below, so the buffer is only zeroed when it grows.
        let rows = n.div_ceil(S::F64_LANES) * S::F64_LANES;
        let cols = d.div_ceil(TILE_J) * TILE_J;
        let need = (cols + 1) * rows;
        let (y, w) = crate::block::aligned_prefix(scratch, need).split_at_mut(cols * rows);
        match weights {
            Some(weights) => w[..n].copy_from_slice(weights),
            None => w[..n].fill(1.0),
        }
        w[n..].fill(0.0);
        y[d * rows..].fill(0.0);
        crate::block::gather_columns(x, selected, None, rows, y);
        let (wv, _) = S::as_simd_f64s(w);
        for (j, m) in mean.iter_mut().enumerate() {
            let col = &mut y[j * rows..(j + 1) * rows];
            let (yv, _) = S::as_simd_f64s(col);
            *m = weighted_sum(simd, wv, yv) / total;
            let c = *m;
            col[..n].iter_mut().for_each(|v| *v -= c);
        }
        match (S::REGISTER_COUNT >= 32, weights.is_none()) {
            (true, false) => tiles::<S, 4, false>(simd, y, wv, rows, d, cols, scatter),
            (true, true) => tiles::<S, 4, true>(simd, y, wv, rows, d, cols, scatter),
            (false, false) => tiles::<S, 2, false>(simd, y, wv, rows, d, cols, scatter),
            (false, true) => tiles::<S, 2, true>(simd, y, wv, rows, d, cols, scatter),
        }
    }
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

/// Rows per pass over all tiles: the tiles re-read the block's columns, so a pass covers only as
/// many rows as stay in cache (128 rows × 64 columns = 64 KB), and each tile's accumulators wait
/// in memory between passes. Every lane still sums its rows in order, so the pass length does not
/// change the result.
const PASS_ROWS: usize = 128;

/// The lower triangle of Σ_t w_t y_t y_tᵀ in TILE_J × TK register tiles, mirrored into `out`.
/// `UNIT`: every weight is one (or zero on padding rows, where y is zero), so w is not read.
#[inline(always)]
fn tiles<S: pulp::Simd, const TK: usize, const UNIT: bool>(
    simd: S,
    y: &[f64],
    w: &[S::f64s],
    rows: usize,
    d: usize,
    cols: usize,
    out: &mut [f64],
) {
    let column = |j: usize| S::as_simd_f64s(&y[j * rows..(j + 1) * rows]).0;
    let zero = simd.splat_f64s(0.0);
    // The tiles of the lower triangle, in a fixed order, with their accumulators.
    let tile_list: Vec<(usize, usize)> = (0..cols)
        .step_by(TILE_J)
        .flat_map(|j0| (0..j0 + TILE_J).step_by(TK).map(move |k0| (j0, k0)))
        .collect();
    let mut saved = vec![[[zero; TK]; TILE_J]; tile_list.len()];
    let pass = (PASS_ROWS / S::F64_LANES).max(1);
    for v0 in (0..w.len()).step_by(pass) {
        let v1 = (v0 + pass).min(w.len());
        for (&(j0, k0), acc) in tile_list.iter().zip(saved.iter_mut()) {
            let yj: [&[S::f64s]; TILE_J] = std::array::from_fn(|i| &column(j0 + i)[v0..v1]);
            let yk: [&[S::f64s]; TK] = std::array::from_fn(|i| &column(k0 + i)[v0..v1]);
            let mut a_acc = *acc;
            for (v, &wt) in w[v0..v1].iter().enumerate() {
                let a: [S::f64s; TILE_J] = std::array::from_fn(|i| {
                    if UNIT {
                        yj[i][v]
                    } else {
                        simd.mul_f64s(wt, yj[i][v])
                    }
                });
                for kk in 0..TK {
                    let b = yk[kk][v];
                    for i in 0..TILE_J {
                        a_acc[i][kk] = simd.mul_add_f64s(a[i], b, a_acc[i][kk]);
                    }
                }
            }
            *acc = a_acc;
        }
    }
    for (&(j0, k0), acc) in tile_list.iter().zip(&saved) {
        for (i, row) in acc.iter().enumerate() {
            for (kk, a) in row.iter().enumerate() {
                let (j, k) = (j0 + i, k0 + kk);
                if j < d && k <= j {
                    let s = simd.reduce_sum_f64s(*a);
                    out[k * d + j] = s;
                    out[j * d + k] = s;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use faer::Mat;
    use rand::SeedableRng;
    use rand_distr::{Distribution, StandardNormal};

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
}
