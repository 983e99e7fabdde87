//! Squared Mahalanobis distances `‖L⁻¹(x_i − μ)‖²` of many rows, by forward substitution.
//!
//! This is the inner loop of every full-covariance Gaussian: QDA's and the mixture's E-step, and
//! the batched log-density. It used to be faer's triangular solve on a d × 4096 block; at the
//! small d of classification (2–64) that solve spent most of its time in blocking and dispatch,
//! not arithmetic (EM at d = 16 ran at a third of the machine's multiply rate). Here rows are
//! taken eight SIMD vectors at a time with AVX-512 (64 rows), four with AVX2 (16 rows), and
//! centring, substitution and the norm are one pass: a whole block of contiguous columns is read
//! where it is, each column centred as its substitution starts; other layouts and a last partial
//! block are copied into a centred block in L1 first. Columns are substituted in pairs so that
//! each loaded vector feeds two fused multiply-adds.
//!
//! Every multiply-add is fused and correctly rounded on every path (hardware FMA, or pulp's exact
//! software `fma` on a CPU without it), so the result does not depend on the SIMD width the CPU
//! offers; it is a deterministic function of the row alone, so neither chunking nor thread count
//! changes it. No inverse is formed: `1 / L_jj` is the only reciprocal, and it scales the
//! substitution as dividing would, to within one rounding.

use std::mem::MaybeUninit;

use faer::{MatMut, MatRef};

/// `out[i] = ‖L⁻¹(x_i − μ)‖²` for every row `x_i` of `x` (n × d, any layout), where `chol_lower`
/// is the lower Cholesky factor `L` of the covariance (only its lower triangle is read; its
/// diagonal must be non-zero, which every validated factor guarantees).
///
/// Lengths must agree (`mean.len() = d`, `out.len() = n`, `L` d × d); callers in this workspace
/// check them once at their API boundary, so here they are debug assertions.
pub fn squared_mahalanobis(
    x: MatRef<'_, f64>,
    mean: &[f64],
    chol_lower: MatRef<'_, f64>,
    out: &mut [f64],
) {
    // 1 · q + 0 is q exactly, so this is the plain distance.
    run_kernel(x, mean, chol_lower, 1.0, 0.0, out, None);
}

/// `out[i] = log_norm − ½‖L⁻¹(x_i − μ)‖²`: the log-density of N(μ, LLᵀ) when `log_norm` is
/// its log normaliser (plus, for a classifier, the class's log prior). The same arguments and
/// checks as [`squared_mahalanobis`]; the affine step is fused into the kernel's store (one
/// rounding, as `log_norm − 0.5 · q` since halving is exact), so the distances never make a
/// second pass through memory.
pub fn gaussian_log_density(
    x: MatRef<'_, f64>,
    mean: &[f64],
    chol_lower: MatRef<'_, f64>,
    log_norm: f64,
    out: &mut [f64],
) {
    run_kernel(x, mean, chol_lower, -0.5, log_norm, out, None);
}

/// `out[(i, c)] = log_norms[c] − ½‖L_c⁻¹(x_i − μ_c)‖²` for every row of `x` and every class c:
/// [`gaussian_log_density`] of each class (its bits), with `means` K × d row-major and
/// `factors` the K lower factors, d × d column-major one after another. Each block of rows is
/// read from `x` by every class (from L1 after the first) and centred at the class's mean as it
/// is substituted, and each class's results are stored straight into its column of `out`
/// (b × K, any layout).
///
/// Why: class by class, every class read the whole chunk again and copied each block's results
/// out through a call; at d = 2, K = 10, QDA's log joints into a kept output took 9.4 ms
/// against LDA's 4.9 ms, `perf` putting 36% of the samples in that copy. Up to
/// [`IN_REGISTERS_MAX_COLUMNS`] columns, when `x`'s and `out`'s columns are contiguous, rows go through registers instead of blocks
/// (`small_classes`), with the same bits.
#[allow(unsafe_code)]
pub fn gaussian_log_densities(
    x: MatRef<'_, f64>,
    means: &[f64],
    factors: &[f64],
    log_norms: &[f64],
    out: MatMut<'_, f64>,
) {
    debug_assert!(out.nrows() == x.nrows() && out.ncols() == log_norms.len());
    // SAFETY: the kernel writes only values (every one) into its output.
    unsafe {
        crate::block::write_every_column(out, |columns| {
            unwritten_gaussian_log_densities(x, means, factors, log_norms, columns)
        })
    }
}

/// [`gaussian_log_densities`] into `out`, K columns of `x.nrows()` values not yet written (a
/// fresh output, which then need not be zeroed first): every value of every column is written.
pub fn unwritten_gaussian_log_densities(
    x: MatRef<'_, f64>,
    means: &[f64],
    factors: &[f64],
    log_norms: &[f64],
    out: Vec<&mut [MaybeUninit<f64>]>,
) {
    let (d, k) = (x.ncols(), log_norms.len());
    debug_assert_eq!(means.len(), k * d);
    debug_assert_eq!(factors.len(), k * d * d);
    debug_assert!(out.len() == k && out.iter().all(|col| col.len() == x.nrows()));
    let (mut packed, mut inv_diag) = (Vec::new(), Vec::new());
    for l in factors.chunks_exact(d * d).take(k) {
        let l = MatRef::from_column_major_slice(l, d, d);
        pack_factor(l, &mut packed, &mut inv_diag);
    }
    pulp::Arch::new().dispatch(ByBlocks(ClassesKernel {
        x,
        means,
        packed: &packed,
        inv_diag: &inv_diag,
        log_norms,
        out,
    }));
}

/// [`gaussian_log_densities`]' loop ([`ByBlocks`]).
struct ClassesKernel<'a> {
    x: MatRef<'a, f64>,
    means: &'a [f64],
    /// Each class's strict lower triangle, as [`run_kernel`] packs it, one after another.
    packed: &'a [f64],
    /// Each class's `1 / L_jj`, K × d.
    inv_diag: &'a [f64],
    log_norms: &'a [f64],
    /// The b × K results, class by class, not yet written.
    out: Vec<&'a mut [MaybeUninit<f64>]>,
}

impl BlockedKernel for ClassesKernel<'_> {
    #[inline(always)]
    fn run<S: pulp::Simd, const V: usize>(mut self, simd: S) {
        let rows = V * S::F64_LANES;
        let (n, d, k) = (self.x.nrows(), self.x.ncols(), self.log_norms.len());
        let strict = d * d.saturating_sub(1) / 2;
        // The block as read, the block centred at one class's mean, the finished substitution
        // vectors and a partial block's results, each on cache-line boundaries.
        let (mut raw, mut z, mut done, mut norms) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let raw = crate::block::aligned_prefix(&mut raw, d * rows);
        let z = crate::block::aligned_prefix(&mut z, d * rows);
        let done = crate::block::aligned_prefix(&mut done, d * rows);
        let norms = crate::block::aligned_prefix(&mut norms, rows);
        // SAFETY: `substitute` writes only values into it.
        #[allow(unsafe_code)]
        let norms = unsafe { crate::block::as_unwritten(norms) };
        let ahead = ReadAhead::new(self.x, rows);
        // Up to 8 columns read in place and written in place: every whole vector of rows in
        // registers; the rest (and any other layout) by blocks below.
        const _: () = assert!(IN_REGISTERS_MAX_COLUMNS == 8);
        let mut r0 = match d {
            1 => small_classes::<S, 1>(simd, &mut self),
            2 => small_classes::<S, 2>(simd, &mut self),
            3 => small_classes::<S, 3>(simd, &mut self),
            4 => small_classes::<S, 4>(simd, &mut self),
            5 => small_classes::<S, 5>(simd, &mut self),
            6 => small_classes::<S, 6>(simd, &mut self),
            7 => small_classes::<S, 7>(simd, &mut self),
            8 => small_classes::<S, 8>(simd, &mut self),
            _ => 0,
        };
        // Whole blocks of contiguous columns are read where they are: each class centres a
        // vector of rows as the substitution starts its column (`from_columns`). The block was
        // copied, then centred into a second buffer for every class, a load and a store per
        // value each time. `profile qda-predict`, `PROFILE_COLD=cs`, medians of 21, alternated:
        // d = 16, K = 2 5.78–5.80 → 5.25–5.29 ms (3 pairs); K = 10 21.0–21.2 → 19.0–19.4 ms;
        // d = 8, K = 2 4.6–5.2 → 2.9–3.6 ms; d = 4, K = 10 7.7–8.1 → 6.0–6.1 ms.
        let columns = crate::block::contiguous_columns(self.x, 0..d);
        // The rows left to the blocks are first written in order (zeros), each class's column
        // a stream, then overwritten block by block. Why: a block's results go to K columns,
        // 64 rows (eight lines) each, and where those lines were not in cache (an output kept
        // from an earlier call, as EM's E-step keeps one) the stores stalled the
        // substitution: `profile qda-predict-into`, `PROFILE_COLD=cs`, medians of 21, two
        // alternated pairs: d = 16, K = 2 5.66, 5.65 → 4.63, 4.74 ms; K = 10 24.3, 24.9 →
        // 18.3, 18.1 ms; d = 4, K = 10 8.9 → 5.8–6.1 ms, as fast as into a fresh output, which
        // a worker used to zero first and now this does (`ScoreFormula::FullGaussian`).
        for col in self.out.iter_mut() {
            let from = r0.min(col.len());
            col[from..].fill(MaybeUninit::new(0.0));
        }
        // Column j of the block ahead is asked for by class j mod K as it starts that column.
        let asker: Vec<usize> = (0..d).map(|j| j % k).collect();
        while r0 < n {
            let len = rows.min(n - r0);
            let in_place = columns.as_deref().filter(|_| len == rows);
            if in_place.is_none() {
                crate::block::gather_columns(self.x.subrows(r0, len), None, None, rows, raw);
            }
            for c in 0..k {
                let mean = &self.means[c * d..(c + 1) * d];
                if in_place.is_none() {
                    // x − μ_cj, as `from_columns` centres (the padding rows' values are unused).
                    for ((zj, xj), &m) in z
                        .chunks_exact_mut(rows)
                        .zip(raw.chunks_exact(rows))
                        .zip(mean)
                    {
                        let m = simd.splat_f64s(m);
                        let (zv, _) = S::as_mut_simd_f64s(zj);
                        let (xv, _) = S::as_simd_f64s(xj);
                        for (o, &v) in zv.iter_mut().zip(xv) {
                            *o = simd.sub_f64s(v, m);
                        }
                    }
                }
                // A whole block goes straight into its column; a shorter one through `norms`.
                let col = &mut self.out[c][r0..r0 + len];
                let copied = len != rows;
                let target = match copied {
                    false => col,
                    true => &mut norms[..],
                };
                let z = &*z;
                substitute::<S, V>(
                    simd,
                    #[inline(always)]
                    |j| {
                        if asker[j] == c {
                            ahead.ask_column(r0, j);
                        }
                        match in_place {
                            Some(columns) => from_columns::<S, V>(simd, columns[j], r0, mean[j]),
                            None => from_block::<S, V>(z, j, rows),
                        }
                    },
                    &self.packed[c * strict..(c + 1) * strict],
                    &self.inv_diag[c * d..(c + 1) * d],
                    (-0.5, self.log_norms[c]),
                    S::as_mut_simd_f64s(done).0,
                    target,
                );
                if copied {
                    self.out[c][r0..r0 + len].copy_from_slice(&norms[..len]);
                }
            }
            r0 += len;
        }
    }
}

/// Most columns that [`gaussian_log_densities`] takes with every vector of rows in registers
/// (`small_classes`); more go by blocks of rows. 3 until the ninety-ninth round; from 4 to 8
/// the blocks kept each finished vector of the substitution in a buffer and read it back for
/// every later column. Zen 4 EPYC, `profile qda-joint-into`, one thread, 131,072 rows in L3,
/// p10 of 42 alternated runs (blocks → registers): d = 4, K = 10 1.53 → 1.04 ms; d = 5, K = 10
/// 1.84 → 1.30 ms; d = 8, K = 10 3.20 → 2.67 ms; `qda-predict 8 2` 1.14 → 0.67 ms. Past 8,
/// not tried here: the fused posteriors' kernel with these operations was several times as
/// slow at 12 and 16 columns, its arrays no longer in registers.
pub const IN_REGISTERS_MAX_COLUMNS: usize = 8;

/// The strict lower triangle of [`IN_REGISTERS_MAX_COLUMNS`] columns.
pub const IN_REGISTERS_MAX_STRICT: usize =
    IN_REGISTERS_MAX_COLUMNS * (IN_REGISTERS_MAX_COLUMNS - 1) / 2;

/// Rows per pass of [`small_classes`] with [`ABREAST_MIN_CLASSES`] classes or more and up to 3
/// columns: two
/// vectors of rows (AVX-512), so that the K class columns are written nearly abreast rather than
/// 4 KB of one class after another. Into a fresh output that is not zeroed first (the
/// seventy-fourth round), on the Zen 5 EPYC (`profile qda-predict`, medians of 21, pairs
/// against passes of 512 rows): d = 2, K = 10 0.0044–0.0050 → 0.0041–0.0050 s; K = 5 even.
const ABREAST_PASS_ROWS: usize = 16;

/// Rows per pass of [`small_classes`] with fewer classes, or more than 3 columns: each pass's
/// columns (at most 8 × 4 KB) stay in L1 while every class reads them, and each class's
/// constants are set up once per pass. With two classes, passes of 16 rows were slower
/// (`profile qda-predict-into 2 2` 0.0011–0.0012 s against 0.0011–0.0016 s); at 8 columns and
/// 10 classes, whose constants (the means, the strict lower triangle and the inverse diagonal)
/// are 44 values a class, so were passes of 16 rows (`profile qda-joint-into 8 10`, one thread,
/// p10 of 42 alternated runs, 3.35 ms by blocks → 4.46 ms; with passes of 512 rows 2.67 ms).
const SMALL_PASS_ROWS: usize = 512;

/// Fewest classes for which [`small_classes`] takes passes of [`ABREAST_PASS_ROWS`].
const ABREAST_MIN_CLASSES: usize = 6;

/// Most columns for which [`small_classes`] takes passes of [`ABREAST_PASS_ROWS`].
const ABREAST_MAX_COLUMNS: usize = 3;

/// [`ClassesKernel`] for `D` ≤ [`IN_REGISTERS_MAX_COLUMNS`] columns, when `x`'s columns and `out`'s are contiguous: each
/// vector of rows is loaded from `x`, centred, substituted and normalised in registers and
/// stored into its class's column, class after class over a pass of rows. Returns how many rows
/// it did (every whole vector of rows, or none when the layout does not allow it); the caller
/// does the rest. Each lane's operations and their order are [`substitute`]'s (the same
/// pairing of columns, the norm from zero, the same fused multiply-adds), so the bits are the
/// block kernel's.
///
/// Why: at d = 2 the block kernel then copied each block of rows, centred it into a second
/// buffer for every class, kept the finished vectors and stored the norms through a third: about
/// as many loads and stores as arithmetic (it now reads whole blocks in place, but still keeps
/// the finished vectors). `profile qda-joint-into 2 10` (n = 1e6, 80 MB written)
/// took 0.0074–0.0089 s that way and 0.0047–0.0060 s this way; at d = 3 0.0093–0.0095 s against
/// 0.0050–0.0054 s (AMD EPYC host, 3 and 2 alternated runs).
#[inline(always)]
fn small_classes<S: pulp::Simd, const D: usize>(simd: S, kernel: &mut ClassesKernel<'_>) -> usize {
    let (n, k) = (kernel.x.nrows(), kernel.log_norms.len());
    let lanes = S::F64_LANES;
    let whole = n / lanes * lanes;
    if whole == 0 {
        return 0;
    }
    let Some(columns) = crate::block::contiguous_columns(kernel.x, 0..D) else {
        return 0;
    };
    let outs = &mut kernel.out;
    let strict = D * (D - 1) / 2;
    let scale = simd.splat_f64s(-0.5);
    let zero = simd.splat_f64s(0.0);
    let pass_rows = match k >= ABREAST_MIN_CLASSES && D <= ABREAST_MAX_COLUMNS {
        true => ABREAST_PASS_ROWS,
        false => SMALL_PASS_ROWS,
    };
    for p0 in (0..whole).step_by(pass_rows) {
        let p1 = (p0 + pass_rows).min(whole);
        let xs: [&[S::f64s]; D] = std::array::from_fn(|j| S::as_simd_f64s(&columns[j][p0..p1]).0);
        for (c, out) in outs.iter_mut().enumerate().take(k) {
            let mean: [S::f64s; D] =
                std::array::from_fn(|j| simd.splat_f64s(kernel.means[c * D + j]));
            // −L_jt for t < j, row j of the strict lower triangle at j(j − 1)/2, as packed.
            let lower: [S::f64s; IN_REGISTERS_MAX_STRICT] =
                std::array::from_fn(|t| match t < strict {
                    true => simd.splat_f64s(-kernel.packed[c * strict + t]),
                    false => zero,
                });
            let inv: [S::f64s; D] =
                std::array::from_fn(|j| simd.splat_f64s(kernel.inv_diag[c * D + j]));
            let offset = simd.splat_f64s(kernel.log_norms[c]);
            let (dst, _) = S::as_uninit_mut_simd_f64s(&mut out[p0..p1]);
            for (v, o) in dst.iter_mut().enumerate() {
                let z: [S::f64s; D] = std::array::from_fn(|j| simd.sub_f64s(xs[j][v], mean[j]));
                let norm = small_squared_norm::<S, D>(simd, z, &lower[..], &inv);
                *o = MaybeUninit::new(simd.mul_add_f64s(scale, norm, offset));
            }
        }
    }
    whole
}

/// ‖L⁻¹z‖² of a vector of rows' centred values `z` (D columns) by forward substitution, as
/// `small_classes` and `substitute` take it for each lane: `lower` the strict lower triangle
/// negated and packed row by row (−L_jt at j(j − 1)/2 + t for t < j; at least D(D − 1)/2
/// values), `inv` each 1 / L_jj; w_j = (z_j − L_j0 w_0 − … − L_j,j−1 w_j−1) · (1 / L_jj), each
/// subtraction one fused multiply-add in order of t, and the norm Σ w_j² from zero in order of
/// j. Public so that a kernel elsewhere (`generative`'s posteriors straight from the scores)
/// takes the same operations, and so the same bits.
#[inline(always)]
pub fn small_squared_norm<S: pulp::Simd, const D: usize>(
    simd: S,
    z: [S::f64s; D],
    lower: &[S::f64s],
    inv: &[S::f64s; D],
) -> S::f64s {
    let zero = simd.splat_f64s(0.0);
    let mut w = [zero; D];
    let mut norm = zero;
    for j in 0..D {
        let row = j * j.saturating_sub(1) / 2;
        let mut a = z[j];
        for t in 0..j {
            a = simd.mul_add_f64s(lower[row + t], w[t], a);
        }
        w[j] = simd.mul_f64s(a, inv[j]);
        norm = simd.mul_add_f64s(w[j], w[j], norm);
    }
    norm
}

/// The whitened rows w_i = L⁻¹(x_i − μ) of `x` (n × d, any layout), into `out` as n × d
/// column-major, column j at `out[j · stride..][..n]` (`stride` ≥ n; the values between the
/// columns are left as they were): the substitution of [`squared_mahalanobis`], its values
/// kept instead of only their squared norm. A shared covariance (LDA's log joints) whitens each
/// row once and then needs only ‖w_i − L⁻¹(μ_k − μ)‖² per class, K · d operations per row
/// rather than K substitutions of d²/2.
///
/// # Panics
/// If `stride` < n or `out` is shorter than the last column's end.
pub fn whiten_rows(
    x: MatRef<'_, f64>,
    mean: &[f64],
    chol_lower: MatRef<'_, f64>,
    out: &mut [f64],
    stride: usize,
) {
    let (n, d) = (x.nrows(), x.ncols());
    assert!(stride >= n && out.len() >= d.saturating_sub(1) * stride + n);
    let mut norms = vec![0.0; n];
    run_kernel(
        x,
        mean,
        chol_lower,
        1.0,
        0.0,
        &mut norms,
        Some((out, stride)),
    );
}

/// `out[i] = scale · ‖L⁻¹(x_i − μ)‖² + offset`, one fused multiply-add per row; with
/// `whitened`, the whitened rows too (see [`whiten_rows`]).
fn run_kernel(
    x: MatRef<'_, f64>,
    mean: &[f64],
    chol_lower: MatRef<'_, f64>,
    scale: f64,
    offset: f64,
    out: &mut [f64],
    whitened: Option<(&mut [f64], usize)>,
) {
    let d = x.ncols();
    debug_assert_eq!(mean.len(), d);
    debug_assert_eq!(out.len(), x.nrows());
    debug_assert!(chol_lower.nrows() == d && chol_lower.ncols() == d);
    let (mut packed, mut inv_diag) = (Vec::new(), Vec::new());
    pack_factor(chol_lower, &mut packed, &mut inv_diag);
    pulp::Arch::new().dispatch(ByBlocks(Kernel {
        x,
        mean,
        packed: &packed,
        inv_diag: &inv_diag,
        scale,
        offset,
        out,
        whitened,
    }));
}

/// Appends the strict lower triangle of `L` to `packed`, row j after row j − 1 (the
/// substitution for column j reads L_j0 … L_j,j−1 in order), and each `1 / L_jj` to `inv_diag`.
fn pack_factor(l: MatRef<'_, f64>, packed: &mut Vec<f64>, inv_diag: &mut Vec<f64>) {
    let d = l.nrows();
    for j in 0..d {
        packed.extend((0..j).map(|t| l[(j, t)]));
    }
    inv_diag.extend((0..d).map(|j| 1.0 / l[(j, j)]));
}

/// Fewest columns for which [`gaussian_log_densities`] asks for its blocks itself: every width
/// its blocks take whole (fewer go through registers, `small_classes`; from 4 to 8 columns the
/// blocks asked for themselves until the ninety-ninth round, measured below). Asked for in shares, blocks
/// of 8 columns or fewer gained nothing; asked for by columns, `profile qda-predict`,
/// `PROFILE_COLD=cs`, medians of 21, 3 alternated pairs (from 9 columns → from 4): d = 4, K = 2
/// 2.05–2.33 → 1.92–2.05 ms; d = 6, K = 2 2.22–2.76 → 2.13–2.19 ms; d = 8, K = 2 2.66–2.82 →
/// 2.45–2.51 ms; d = 6, K = 10 even (6.8–7.1 ms).
const OWN_PREFETCH_MIN_COLUMNS: usize = IN_REGISTERS_MAX_COLUMNS + 1;

/// How many blocks ahead of the one being substituted the kernel asks for rows from memory.
const BLOCKS_AHEAD: usize = 2;

/// [`gaussian_log_densities`]' software prefetch. A block of rows reads a short run (64 rows,
/// 512 bytes) of every column: d runs from memory, which the hardware's prefetchers, starting
/// afresh at each, did not keep up with above 8 columns. So each block asks for the block
/// [`BLOCKS_AHEAD`] on while its substitution runs from L1, one column at a time as the
/// substitutions start their columns (column j by class j mod K). It asked for a share of the
/// block per class, each share's lines in one burst before the class's substitution: with the
/// input in cache those asks had 18% of the samples of `profile qda-predict 16 2`, and from
/// memory they were slower (`PROFILE_COLD=cs`, medians of 11, 2 alternated pairs, shares →
/// columns: d = 16, K = 2 5.87, 5.59 → 5.13, 5.29 ms; K = 10 20.7, 21.0 → 20.0, 18.4 ms; d = 32,
/// K = 2 16.3, 14.5 → 13.1, 12.2 ms; d = 64 even). Asking for the shares' lines in a tighter
/// loop was slower still from memory (d = 16, K = 2 about 5.9 ms; into L2 only, 7.0–7.3 ms).
///
/// The shares had replaced a read of the whole chunk first (four columns side by side), after
/// which the substitution ran alone. `profile qda-predict-into`, medians of 9, 3 alternated
/// pairs (read first → asked ahead): d = 16, K = 2 0.0114, 0.0114, 0.0115 → 0.0090, 0.0112, 0.0091 s; K = 10 0.0389,
/// 0.0384, 0.0391 → 0.0366, 0.0361, 0.0363 s; d = 32, K = 2 0.0409, 0.0345, 0.0345 → 0.0317,
/// 0.0321, 0.0316 s; d = 64, K = 2 0.0991, 0.1084, 0.1072 → 0.0936, 0.0926, 0.0917 s. At d = 8
/// (which had no read first) asking for shares bought nothing (0.0042, 0.0043, 0.0047 → 0.0043,
/// 0.0051, 0.0045 s), nor in the one-class kernel's whitening (tied EM's E-step).
struct ReadAhead<'a> {
    /// Every column, when `x` is column-major and wide enough to ask for.
    columns: Option<Vec<&'a [f64]>>,
    /// Rows per block.
    rows: usize,
}

impl<'a> ReadAhead<'a> {
    fn new(x: MatRef<'a, f64>, rows: usize) -> Self {
        let columns = match x.ncols() >= OWN_PREFETCH_MIN_COLUMNS {
            true => crate::block::contiguous_columns(x, 0..x.ncols()),
            false => None,
        };
        ReadAhead { columns, rows }
    }

    /// For the block starting at row `r0`, column `j` of the block ahead (what of it is in the
    /// column).
    #[inline(always)]
    fn ask_column(&self, r0: usize, j: usize) {
        if let Some(&column) = self.columns.as_ref().and_then(|c| c.get(j)) {
            let at = r0 + BLOCKS_AHEAD * self.rows;
            let end = (at + self.rows).min(column.len());
            let mut t = at;
            while t < end {
                crate::block::prefetch(column, t);
                t += 8;
            }
        }
    }
}

/// A kernel over blocks of `V` SIMD vectors of rows.
trait BlockedKernel {
    fn run<S: pulp::Simd, const V: usize>(self, simd: S);
}

/// Runs a [`BlockedKernel`] as one [`pulp::WithSimd`] operation, compiled inside pulp's
/// target-feature function for each instruction set (a closure this large was not inlined there
/// and ran as baseline SSE2; plain arrays were split by the vectoriser into three vectors and
/// four scalars), with 8 vectors of rows per block where there are 32 registers, else 4: 2·V
/// accumulator chains must fit in the registers.
struct ByBlocks<K>(K);

impl<K: BlockedKernel> pulp::WithSimd for ByBlocks<K> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, simd: S) {
        if S::REGISTER_COUNT >= 32 {
            self.0.run::<S, 8>(simd);
        } else {
            self.0.run::<S, 4>(simd);
        }
    }
}

/// [`run_kernel`]'s loop ([`ByBlocks`]).
struct Kernel<'a> {
    x: MatRef<'a, f64>,
    mean: &'a [f64],
    packed: &'a [f64],
    inv_diag: &'a [f64],
    scale: f64,
    offset: f64,
    out: &'a mut [f64],
    /// Where the whitened rows go, n × d column-major with its column stride, when they are
    /// wanted.
    whitened: Option<(&'a mut [f64], usize)>,
}

impl BlockedKernel for Kernel<'_> {
    #[inline(always)]
    fn run<S: pulp::Simd, const V: usize>(mut self, simd: S) {
        let rows = V * S::F64_LANES;
        let d = self.mean.len();
        // Three blocks on cache-line boundaries: the centred rows, the finished substitution
        // vectors, and the results.
        let (mut z, mut done, mut norms) = (Vec::new(), Vec::new(), Vec::new());
        let z = crate::block::aligned_prefix(&mut z, d * rows);
        let done = crate::block::aligned_prefix(&mut done, d * rows);
        let norms = crate::block::aligned_prefix(&mut norms, rows);
        // Whole blocks of contiguous columns are read in place, as in [`ClassesKernel`].
        let columns = crate::block::contiguous_columns(self.x, 0..d);
        for (block, out_block) in self.out.chunks_mut(rows).enumerate() {
            let (r0, len) = (block * rows, out_block.len());
            let in_place = columns.as_deref().filter(|_| len == rows);
            if in_place.is_none() {
                let x = self.x.subrows(r0, len);
                crate::block::gather_columns(x, None, Some(self.mean), rows, z);
            }
            let (z, mean) = (&*z, self.mean);
            substitute::<S, V>(
                simd,
                #[inline(always)]
                |j| match in_place {
                    Some(columns) => from_columns::<S, V>(simd, columns[j], r0, mean[j]),
                    None => from_block::<S, V>(z, j, rows),
                },
                self.packed,
                self.inv_diag,
                (self.scale, self.offset),
                S::as_mut_simd_f64s(done).0,
                // SAFETY: `substitute` writes only values into it.
                #[allow(unsafe_code)]
                unsafe {
                    crate::block::as_unwritten(norms)
                },
            );
            out_block.copy_from_slice(&norms[..out_block.len()]);
            if let Some((w, stride)) = self.whitened.as_mut() {
                let len = out_block.len();
                for j in 0..d {
                    w[j * *stride + block * rows..][..len]
                        .copy_from_slice(&done[j * rows..][..len]);
                }
            }
        }
    }
}

/// Row `j` of a centred block `z` (d rows of `rows` values), as [`substitute`] starts it.
#[inline(always)]
fn from_block<S: pulp::Simd, const V: usize>(z: &[f64], j: usize, rows: usize) -> [S::f64s; V] {
    let (z, _) = S::as_simd_f64s(&z[j * rows..(j + 1) * rows]);
    std::array::from_fn(|v| z[v])
}

/// The `V` vectors of rows from `r0` of a contiguous column less its centre `m`: the values a
/// centred block holds (the same subtraction), read in place.
#[inline(always)]
fn from_columns<S: pulp::Simd, const V: usize>(
    simd: S,
    column: &[f64],
    r0: usize,
    m: f64,
) -> [S::f64s; V] {
    let m = simd.splat_f64s(m);
    let (x, _) = S::as_simd_f64s(&column[r0..r0 + V * S::F64_LANES]);
    let mut a = [m; V];
    for (a, &x) in a.iter_mut().zip(x) {
        *a = simd.sub_f64s(x, m);
    }
    a
}

/// Forward substitution `L w = z` on a d × `rows` block (rows = `V` vectors; `start(j)` gives
/// row j of z, feature j of the block's rows centred), writing the squared norm q of each of
/// the block's columns (one per data row) to `norms` as `scale · q + offset`
/// (`affine`, one rounding). `done` (d · V vectors) holds the finished columns of `w`. Columns
/// are substituted two at a time, so each finished vector loaded from `done` feeds two fused
/// multiply-adds (the loop is otherwise bound by loads), with 2·V independent accumulator
/// chains. Each lane's operations and their order are those of plain forward substitution, so
/// pairing changes no bit.
#[inline(always)]
fn substitute<S: pulp::Simd, const V: usize>(
    simd: S,
    start: impl Fn(usize) -> [S::f64s; V],
    packed: &[f64],
    inv_diag: &[f64],
    affine: (f64, f64),
    done: &mut [S::f64s],
    norms: &mut [MaybeUninit<f64>],
) {
    let d = inv_diag.len();
    let zero = simd.splat_f64s(0.0);
    let mut n = [zero; V];
    // Row j of the strict lower triangle starts at j(j − 1)/2 in `packed`.
    let lower_row = |j: usize| &packed[j * j.saturating_sub(1) / 2..][..j];
    let mut j = 0;
    while j < d {
        let mut a = start(j);
        let lj = lower_row(j);
        if j + 1 < d {
            let mut b = start(j + 1);
            let lj1 = lower_row(j + 1);
            for ((wk, &l), &l1) in done[..j * V].chunks_exact(V).zip(lj).zip(lj1) {
                // a − l·w_k and b − l′·w_k, each rounded once.
                let (m, m1) = (simd.splat_f64s(-l), simd.splat_f64s(-l1));
                for v in 0..V {
                    a[v] = simd.mul_add_f64s(m, wk[v], a[v]);
                    b[v] = simd.mul_add_f64s(m1, wk[v], b[v]);
                }
            }
            let s = simd.splat_f64s(inv_diag[j]);
            let m = simd.splat_f64s(-lj1[j]);
            let s1 = simd.splat_f64s(inv_diag[j + 1]);
            for v in 0..V {
                a[v] = simd.mul_f64s(a[v], s);
                n[v] = simd.mul_add_f64s(a[v], a[v], n[v]);
                b[v] = simd.mul_f64s(simd.mul_add_f64s(m, a[v], b[v]), s1);
                n[v] = simd.mul_add_f64s(b[v], b[v], n[v]);
            }
            done[j * V..(j + 1) * V].copy_from_slice(&a);
            done[(j + 1) * V..(j + 2) * V].copy_from_slice(&b);
            j += 2;
        } else {
            for (wk, &l) in done[..j * V].chunks_exact(V).zip(lj) {
                let m = simd.splat_f64s(-l);
                for v in 0..V {
                    a[v] = simd.mul_add_f64s(m, wk[v], a[v]);
                }
            }
            let s = simd.splat_f64s(inv_diag[j]);
            for v in 0..V {
                a[v] = simd.mul_f64s(a[v], s);
                n[v] = simd.mul_add_f64s(a[v], a[v], n[v]);
            }
            // Kept for the whitened rows ([`whiten_rows`]); the norms do not read it again.
            done[j * V..(j + 1) * V].copy_from_slice(&a);
            j += 1;
        }
    }
    let (scale, offset) = (simd.splat_f64s(affine.0), simd.splat_f64s(affine.1));
    let (out, _) = S::as_uninit_mut_simd_f64s(norms);
    for v in 0..V {
        out[v] = MaybeUninit::new(simd.mul_add_f64s(scale, n[v], offset));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use faer::{Mat, Par};
    use rand::SeedableRng;
    use rand_distr::{Distribution, StandardNormal};

    /// An independent reference: faer's triangular solve on the centred rows, then norms.
    fn reference(x: MatRef<'_, f64>, mean: &[f64], l: MatRef<'_, f64>) -> Vec<f64> {
        let (n, d) = (x.nrows(), x.ncols());
        let mut z = Mat::from_fn(d, n, |j, i| x[(i, j)] - mean[j]);
        crate::linalg::solve_lower_triangular_in_place(l, z.as_mut(), Par::Seq);
        (0..n).map(|i| z.col(i).squared_norm_l2()).collect()
    }

    fn random_problem(n: usize, d: usize, seed: u64) -> (Mat<f64>, Vec<f64>, Mat<f64>) {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut g = || -> f64 { StandardNormal.sample(&mut rng) };
        let x = Mat::from_fn(n, d, |_, _| 3.0 * g() + 1.0);
        let mean: Vec<f64> = (0..d).map(|_| g()).collect();
        // A well-conditioned lower factor with positive diagonal and junk above it (ignored).
        let l = Mat::from_fn(d, d, |i, j| match i.cmp(&j) {
            std::cmp::Ordering::Equal => 0.5 + g().abs(),
            std::cmp::Ordering::Greater => 0.3 * g(),
            std::cmp::Ordering::Less => 99.0,
        });
        (x, mean, l)
    }

    #[test]
    fn read_ahead_asks_for_wide_column_major_blocks_only() {
        let wide = Mat::from_fn(100, OWN_PREFETCH_MIN_COLUMNS, |i, j| (i + j) as f64);
        let ahead = ReadAhead::new(wide.as_ref(), 64);
        let columns = ahead
            .columns
            .as_ref()
            .expect("column-major and wide enough");
        assert_eq!(columns.len(), OWN_PREFETCH_MIN_COLUMNS);
        assert!(columns.iter().all(|c| c.len() == 100));
        // Every block's ask, the last ones' past the end included, stays inside the columns.
        for r0 in (0..100).step_by(64) {
            for j in 0..OWN_PREFETCH_MIN_COLUMNS {
                ahead.ask_column(r0, j);
            }
        }
        let narrow = Mat::from_fn(100, OWN_PREFETCH_MIN_COLUMNS - 1, |i, j| (i + j) as f64);
        assert!(ReadAhead::new(narrow.as_ref(), 64).columns.is_none());
        let row_major = Mat::from_fn(OWN_PREFETCH_MIN_COLUMNS, 100, |j, i| (i + j) as f64);
        assert!(ReadAhead::new(row_major.transpose(), 64).columns.is_none());
    }

    #[test]
    fn matches_a_triangular_solve_for_every_shape_and_layout() {
        for (seed, &d) in [1usize, 2, 3, 7, 16, 17, 33, 64].iter().enumerate() {
            for &n in &[0usize, 1, 15, 16, 17, 100] {
                let (x, mean, l) = random_problem(n, d, seed as u64 * 100 + n as u64);
                let lower = Mat::from_fn(d, d, |i, j| if i >= j { l[(i, j)] } else { 0.0 });
                let want = reference(x.as_ref(), &mean, lower.as_ref());
                let layouts = crate::test_layouts::Layouts::new(x.as_ref());
                let layouts = layouts.views(x.as_ref());
                let mut first: Option<Vec<f64>> = None;
                for (which, view) in layouts.into_iter().enumerate() {
                    let mut got = vec![f64::NAN; n];
                    squared_mahalanobis(view, &mean, l.as_ref(), &mut got);
                    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                        assert!(
                            (g - w).abs() <= 1e-12 * (1.0 + w.abs()),
                            "d={d} n={n} layout={which} row {i}: {g} vs {w}"
                        );
                    }
                    // Layout changes only how rows are read, never the arithmetic.
                    match &first {
                        None => first = Some(got),
                        Some(f) => assert_eq!(f, &got, "d={d} n={n} layout={which}"),
                    }
                }
            }
        }
    }

    /// The whitened rows are faer's triangular solve on the centred rows, for every width (odd
    /// ones end on a column substituted alone), row count (whole blocks and a partial last one)
    /// and layout, and their squared norms are the bits of the distances.
    #[test]
    fn whitened_rows_match_a_triangular_solve_and_give_the_distances() {
        for (seed, &d) in [1usize, 2, 3, 7, 16, 17, 64].iter().enumerate() {
            for &n in &[0usize, 1, 15, 16, 17, 100] {
                let (x, mean, l) = random_problem(n, d, 7 + seed as u64 * 100 + n as u64);
                let lower = Mat::from_fn(d, d, |i, j| if i >= j { l[(i, j)] } else { 0.0 });
                let mut want = Mat::from_fn(d, n, |j, i| x[(i, j)] - mean[j]);
                crate::linalg::solve_lower_triangular_in_place(
                    lower.as_ref(),
                    want.as_mut(),
                    Par::Seq,
                );
                let mut distances = vec![0.0; n];
                squared_mahalanobis(x.as_ref(), &mean, l.as_ref(), &mut distances);
                let layouts = crate::test_layouts::Layouts::new(x.as_ref());
                for (which, view) in layouts.views(x.as_ref()).into_iter().enumerate() {
                    // Columns n rows apart, and 8 rows more (the gaps left as they were).
                    let stride = n + 8 * (which % 2);
                    let mut got = vec![f64::NAN; stride * d];
                    whiten_rows(view, &mean, l.as_ref(), &mut got, stride);
                    for j in 0..d {
                        let gap = &got[j * stride + n..(j + 1) * stride];
                        assert!(gap.iter().all(|v| v.is_nan()), "d={d} n={n} column {j}");
                    }
                    for i in 0..n {
                        let mut q = 0.0f64;
                        for j in 0..d {
                            let (g, w) = (got[j * stride + i], want[(j, i)]);
                            assert!(
                                (g - w).abs() <= 1e-12 * (1.0 + w.abs()),
                                "d={d} n={n} layout={which} ({i}, {j}): {g} vs {w}"
                            );
                            q = g.mul_add(g, q);
                        }
                        assert_eq!(q.to_bits(), distances[i].to_bits(), "d={d} n={n} row {i}");
                    }
                }
            }
        }
    }

    #[test]
    fn each_row_is_independent_of_its_block() {
        // Row i's distance is the same whether it is evaluated alone (a partial block, copied)
        // or inside any block: whole ones are read in place (64 rows on AVX-512, 32 on AVX2).
        let (x, mean, l) = random_problem(150, 9, 11);
        let mut all = vec![0.0; 150];
        squared_mahalanobis(x.as_ref(), &mean, l.as_ref(), &mut all);
        for i in [0, 7, 15, 16, 31, 52, 63, 64, 100, 127, 128, 149] {
            let mut one = [0.0];
            squared_mahalanobis(x.as_ref().subrows(i, 1), &mean, l.as_ref(), &mut one);
            assert_eq!(one[0].to_bits(), all[i].to_bits(), "row {i}");
        }
    }

    #[test]
    fn log_density_is_the_distance_halved_and_offset_in_one_rounding() {
        // The fused store gives the bits of `log_norm − 0.5 · q` from the plain distance.
        for (seed, &d) in [1usize, 2, 5, 16].iter().enumerate() {
            let (x, mean, l) = random_problem(77, d, 40 + seed as u64);
            let mut q = vec![0.0; 77];
            squared_mahalanobis(x.as_ref(), &mean, l.as_ref(), &mut q);
            for log_norm in [0.0, -3.7, 12.25] {
                let mut got = vec![f64::NAN; 77];
                gaussian_log_density(x.as_ref(), &mean, l.as_ref(), log_norm, &mut got);
                for (i, (g, q)) in got.iter().zip(&q).enumerate() {
                    let want = log_norm - 0.5 * q;
                    assert_eq!(g.to_bits(), want.to_bits(), "d={d} row {i}: {g} vs {want}");
                }
            }
        }
    }

    /// Every class's column of the several-class kernel has the bits of the one-class kernel,
    /// for widths with odd and paired columns, row counts with whole and partial blocks, every
    /// layout of the rows, and outputs whose columns are contiguous, row-major or reversed.
    #[test]
    fn several_classes_have_the_bits_of_each_class_alone() {
        for (seed, &d) in [1usize, 2, 3, 4, 5, 8, 9, 16, 17].iter().enumerate() {
            for &n in &[0usize, 1, 15, 64, 65, 130] {
                for k in [1usize, 3, 6] {
                    let mut means = Vec::new();
                    let mut factors = Vec::new();
                    let mut log_norms = Vec::new();
                    let mut x = Mat::zeros(n, d);
                    for c in 0..k {
                        let (xc, mean, l) = random_problem(n, d, 900 + seed as u64 * 50 + c as u64);
                        if c == 0 {
                            x = xc;
                        }
                        means.extend(mean);
                        factors.extend((0..d * d).map(|t| l[(t % d, t / d)]));
                        log_norms.push(-1.5 * c as f64 + 0.25);
                    }
                    let want: Vec<Vec<f64>> = (0..k)
                        .map(|c| {
                            let l = MatRef::from_column_major_slice(
                                &factors[c * d * d..(c + 1) * d * d],
                                d,
                                d,
                            );
                            let mut col = vec![f64::NAN; n];
                            let mean = &means[c * d..(c + 1) * d];
                            gaussian_log_density(x.as_ref(), mean, l, log_norms[c], &mut col);
                            col
                        })
                        .collect();
                    let layouts = crate::test_layouts::Layouts::new(x.as_ref());
                    for (which, view) in layouts.views(x.as_ref()).into_iter().enumerate() {
                        let mut out = Mat::from_fn(n, k, |_, _| f64::NAN);
                        let mut out_rows = vec![f64::NAN; n * k];
                        let mut reversed = Mat::from_fn(n, k, |_, _| f64::NAN);
                        gaussian_log_densities(view, &means, &factors, &log_norms, out.as_mut());
                        gaussian_log_densities(
                            view,
                            &means,
                            &factors,
                            &log_norms,
                            MatMut::from_row_major_slice_mut(&mut out_rows, n, k),
                        );
                        gaussian_log_densities(
                            view,
                            &means,
                            &factors,
                            &log_norms,
                            reversed.as_mut().reverse_rows_mut(),
                        );
                        for (c, want) in want.iter().enumerate() {
                            for (i, w) in want.iter().enumerate() {
                                let at = format!("d={d} n={n} K={k} layout={which} ({i}, {c})");
                                assert_eq!(out[(i, c)].to_bits(), w.to_bits(), "{at}");
                                assert_eq!(out_rows[i * k + c].to_bits(), w.to_bits(), "{at}");
                                let r = reversed[(n - 1 - i, c)];
                                assert_eq!(r.to_bits(), w.to_bits(), "{at} reversed");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn two_dimensional_closed_form() {
        // Σ = [[4, 2], [2, 3]], L = [[2, 0], [1, √2]]; (x − μ)ᵀ Σ⁻¹ (x − μ) with Σ⁻¹ = [[3, −2],
        // [−2, 4]] / 8 written out by hand.
        let l = faer::mat![[2.0, 0.0], [1.0, 2f64.sqrt()]];
        let pts = [[1.0, 2.0], [-3.0, 0.5], [0.0, 0.0], [1e3, -1e3]];
        let mean = [0.5, -0.25];
        let rows: Vec<f64> = pts.iter().flatten().copied().collect();
        let x = MatRef::from_row_major_slice(&rows, pts.len(), 2);
        let mut got = vec![0.0; pts.len()];
        squared_mahalanobis(x, &mean, l.as_ref(), &mut got);
        for (p, g) in pts.iter().zip(&got) {
            let (a, b) = (p[0] - mean[0], p[1] - mean[1]);
            let want = (3.0 * a * a - 4.0 * a * b + 4.0 * b * b) / 8.0;
            assert!(
                (g - want).abs() <= 1e-12 * want.abs().max(1.0),
                "{g} vs {want}"
            );
        }
    }
}
