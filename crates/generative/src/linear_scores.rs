//! Linear scores `X Wᵀ + b` for a few classes, streamed a few columns at a time: LDA's
//! discriminant, and the log joints of multinomial and Bernoulli naive Bayes, whose input is
//! checked (and binarised) in the same read.
//!
//! Why not faer's product: with two classes its kernel reads 48 rows of every column in turn,
//! so at d = 64 it draws on 64 streams far apart at once. In a scratch program on this host it
//! read the input at about 22 GB/s where a sum with independent partial sums read 27 GB/s.
//! Here a block of rows is read four columns at a time, each column a contiguous run, and each
//! class's scores for the block wait in cache between the groups (27–28 GB/s in the same
//! program). The product is then bound by one read of the input, as it must be. Naive Bayes
//! used to check a chunk in one pass and multiply in another; at d = 64 a 2 MB chunk did not
//! stay in L2 between them, so the input was read from memory twice.
//!
//! Every row's score is the same sequence of fused multiply-adds, from the intercept through
//! the columns in order, in the vector loop and in the scalar tail alike: a row's bits do not
//! depend on where it falls in a block or a chunk.

use std::mem::MaybeUninit;

use faer::{MatMut, MatRef};

/// Most classes this kernel takes (the largest K the benchmark measures); models with more use
/// faer's product, whose output then has enough columns to share each read among many classes
/// (not measured).
pub(crate) const MAX_STREAMED_CLASSES: usize = 10;

/// Rows per block: each class's scores for the block (16 KB; 160 KB at K = 10) stay in L1 or
/// L2 while the groups of columns pass over them. (4096 rows, and groups of 8 columns, were
/// within noise of these in the nineteenth round.)
const BLOCK_ROWS: usize = 2048;

/// Columns read together.
const GROUP: usize = 4;

/// Fewest classes for which each group's pass asks for the next group of columns from memory
/// as it goes (with more than [`GROUP`] columns): a line of each of its columns after each
/// vector of rows. With many classes a group's arithmetic (K fused multiply-adds per value)
/// takes long enough that a read left to the hardware's prefetchers, which start afresh at each
/// group's four columns, runs in series with it. `profile lda-predict`, `PROFILE_COLD=cs`,
/// medians of 11, 2 alternated pairs (without → with): d = 64, K = 10 21.4, 21.6 → 16.4,
/// 16.4 ms; K = 6 17.1, 16.3 → 15.9, 13.1 ms; K = 4 15.4, 15.1 → 14.6, 14.6 ms; d = 32, K = 10
/// 12.1, 12.1 → 9.7, 11.1 ms; d = 16, K = 10 7.36, 7.45 → 6.79, 7.22 ms; K = 4 4.51, 4.17 →
/// 3.85, 3.99 ms; multinomial NB d = 64, K = 10 22.1, 21.9 → 18.5, 17.7 ms. At K = 2 within
/// noise or slower (d = 64 13.9, 12.5 → 13.3, 14.0 ms; d = 16 3.62, 4.24 → 3.77, 4.57 ms),
/// as the twenty-first round found; into L2 only (`prefetcht1`) no better than into L1.
const READ_AHEAD_MIN_CLASSES: usize = 4;

/// How the kernel reads each feature value, and which values it accepts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Features {
    /// As they are, unchecked (LDA: a non-finite value already gives a non-finite score).
    AsIs,
    /// As they are; counts, 0 ≤ x < ∞ (multinomial naive Bayes).
    Counts,
    /// 1 where x > t, else 0; any finite x (Bernoulli naive Bayes with `binarize`).
    Above(f64),
    /// As they are; 0 or 1 (Bernoulli naive Bayes without `binarize`).
    Binary,
}

// `Features` as a constant of the kernel, so that each mode compiles to its own loop.
const AS_IS: u8 = 0;
const COUNTS: u8 = 1;
const ABOVE: u8 = 2;
const BINARY: u8 = 3;
/// As they are, less a centre per column (tied EM's scores; not a [`Features`] value, since
/// the centre is a slice).
const CENTRED: u8 = 4;

impl Features {
    fn mode(self) -> u8 {
        match self {
            Features::AsIs => AS_IS,
            Features::Counts => COUNTS,
            Features::Above(_) => ABOVE,
            Features::Binary => BINARY,
        }
    }

    fn threshold(self) -> f64 {
        match self {
            Features::Above(t) => t,
            _ => 0.0,
        }
    }

    /// Whether `v` is a value these features accept (the vector loop's test, one at a time).
    pub(crate) fn accepts(self, v: f64) -> bool {
        accepts_scalar(self.mode(), v)
    }
}

#[inline(always)]
fn accepts_scalar(mode: u8, v: f64) -> bool {
    match mode {
        COUNTS => (0.0..=f64::MAX).contains(&v),
        ABOVE => (-f64::MAX..=f64::MAX).contains(&v),
        BINARY => v == 0.0 || v == 1.0,
        _ => true,
    }
}

#[inline(always)]
fn read_scalar(mode: u8, t: f64, v: f64) -> f64 {
    if mode == ABOVE {
        if v > t { 1.0 } else { 0.0 }
    } else {
        v
    }
}

/// A model's posterior scores as linear scores: `b_c + Σ_j f(x[i, j]) w[c, j]` for `weights`
/// (K × d row-major), `intercepts` (K) and `f` as `features` says
/// ([`ScoreFormula::Linear`](crate::score_formula::ScoreFormula::Linear)).
/// Data rather than a kernel, so that a prediction can have them written into its fresh output
/// by this module's kernel, which writes every value, without zeroing the output first.
#[derive(Debug, Clone)]
pub struct LinearScores<'a> {
    pub(crate) weights: std::borrow::Cow<'a, [f64]>,
    pub(crate) intercepts: std::borrow::Cow<'a, [f64]>,
    pub(crate) features: Features,
}

impl LinearScores<'_> {
    /// [`linear_scores`] of these.
    pub(crate) fn write(&self, x: MatRef<'_, f64>, out: MatMut<'_, f64>) -> bool {
        linear_scores(x, &self.weights, &self.intercepts, self.features, out)
    }

    /// [`unwritten_linear_scores`] of these.
    pub(crate) fn write_unwritten(
        &self,
        x: MatRef<'_, f64>,
        scores: Vec<&mut [MaybeUninit<f64>]>,
    ) -> Option<bool> {
        unwritten_linear_scores(x, &self.weights, &self.intercepts, self.features, scores)
    }
}

/// Writes `out[i, c] = b_c + Σ_j f(x[i, j]) w[c, j]` for `weights` (K × d row-major),
/// `intercepts` (K) and `f` as `features` says, when K is 2 to [`MAX_STREAMED_CLASSES`] and
/// the columns of `x` (d ≥ 1) and `out` are contiguous; a row holding a value that `features` does not
/// accept gets NaN scores instead. Returns false, writing nothing, otherwise.
pub(crate) fn linear_scores(
    x: MatRef<'_, f64>,
    weights: &[f64],
    intercepts: &[f64],
    features: Features,
    out: MatMut<'_, f64>,
) -> bool {
    scores_body(x, None, weights, intercepts, features, out)
}

/// As [`linear_scores`] with `Features::AsIs`, of the rows less `centre` (d):
/// `out[i, c] = b_c + Σ_j (x[i, j] − centre_j) w[c, j]`, each row the same chain of fused
/// multiply-adds on the centred values. Centring in the read costs a subtraction per value
/// of a pass that waits on memory, and keeps the products small where the rows sit far from
/// the origin (a shared covariance's scores at the mean of the class means).
pub(crate) fn centred_linear_scores(
    x: MatRef<'_, f64>,
    centre: &[f64],
    weights: &[f64],
    intercepts: &[f64],
    out: MatMut<'_, f64>,
) -> bool {
    centre.len() == x.ncols()
        && scores_body(x, Some(centre), weights, intercepts, Features::AsIs, out)
}

#[allow(unsafe_code)]
fn scores_body(
    x: MatRef<'_, f64>,
    centre: Option<&[f64]>,
    weights: &[f64],
    intercepts: &[f64],
    features: Features,
    mut out: MatMut<'_, f64>,
) -> bool {
    if out.nrows() != x.nrows() || out.ncols() != intercepts.len() {
        return false;
    }
    let Some(scores) = density::block::contiguous_columns_mut(out.as_mut()) else {
        return false;
    };
    // SAFETY: the kernel writes only values into the columns.
    let scores = unsafe { density::block::as_unwritten_columns(scores) };
    let Some(all_accepted) =
        unwritten_scores_body(x, centre, weights, intercepts, features, scores)
    else {
        return false;
    };
    if !all_accepted {
        // Rare: the prediction then reads the chunk again to name the value.
        mark_rejected_rows(x, features, out);
    }
    true
}

/// As [`linear_scores`] into columns not yet written (`scores`: K columns of `x.nrows()`
/// values): `None`, writing nothing, where `linear_scores` declines; otherwise every value of
/// every column is written, and the answer is whether `features` accepted every value of `x`.
/// Rows it did not are left for [`mark_rejected_rows`], which needs the written scores.
pub(crate) fn unwritten_linear_scores(
    x: MatRef<'_, f64>,
    weights: &[f64],
    intercepts: &[f64],
    features: Features,
    scores: Vec<&mut [MaybeUninit<f64>]>,
) -> Option<bool> {
    unwritten_scores_body(x, None, weights, intercepts, features, scores)
}

fn unwritten_scores_body(
    x: MatRef<'_, f64>,
    centre: Option<&[f64]>,
    weights: &[f64],
    intercepts: &[f64],
    features: Features,
    scores: Vec<&mut [MaybeUninit<f64>]>,
) -> Option<bool> {
    let (n, d, k) = (x.nrows(), x.ncols(), intercepts.len());
    // No features: the scores would never start from the intercepts (the first group sets them).
    if !(2..=MAX_STREAMED_CLASSES).contains(&k)
        || d == 0
        || weights.len() != k * d
        || scores.len() != k
        || scores.iter().any(|col| col.len() != n)
    {
        return None;
    }
    let columns = density::block::contiguous_columns(x, 0..d)?;
    let kernel = Kernel {
        columns,
        weights,
        intercepts,
        threshold: features.threshold(),
        centre: centre.unwrap_or(&[]),
        scores,
    };
    Some(match features.mode() {
        _ if centre.is_some() => dispatch::<CENTRED>(k, kernel),
        COUNTS => dispatch::<COUNTS>(k, kernel),
        ABOVE => dispatch::<ABOVE>(k, kernel),
        BINARY => dispatch::<BINARY>(k, kernel),
        _ => dispatch::<AS_IS>(k, kernel),
    })
}

/// One vector of a column's values as `MODE` reads them (binarised for `ABOVE`, as they are
/// otherwise; [`group`] centres `CENTRED`'s itself) and, for the checked modes, the lanes the
/// mode accepts (`t` the threshold, `max` the largest finite value, both in every lane).
#[inline(always)]
fn read_lanes<S: pulp::Simd, const MODE: u8>(
    simd: S,
    raw: S::f64s,
    t: S::f64s,
    max: S::f64s,
) -> (S::f64s, Option<S::m64s>) {
    let (zero, one) = (simd.splat_f64s(0.0), simd.splat_f64s(1.0));
    let ok = match MODE {
        COUNTS => Some(simd.and_m64s(
            simd.greater_than_or_equal_f64s(raw, zero),
            simd.less_than_or_equal_f64s(raw, max),
        )),
        ABOVE => Some(simd.less_than_or_equal_f64s(simd.abs_f64s(raw), max)),
        BINARY => Some(simd.or_m64s(simd.equal_f64s(raw, zero), simd.equal_f64s(raw, one))),
        _ => None,
    };
    let value = if MODE == ABOVE {
        simd.select_f64s(simd.greater_than_f64s(raw, t), one, zero)
    } else {
        raw
    };
    (value, ok)
}

/// [`crate::fused_posteriors::unwritten_posteriors`] for linear scores: rows of at most
/// [`FUSED_MAX_FEATURES`] features, 2 to [`MAX_STREAMED_CLASSES`] classes (the caller checks
/// the classes and the output's shape). Each vector of rows is read as `linear`'s features say
/// (a value they do not accept stops the kernel there) and its scores formed by the fused
/// multiply-adds of [`linear_scores`], in its order. `None` where the kernel does not take the
/// shape.
#[cfg(target_arch = "x86_64")]
pub(crate) fn fused_linear_posteriors(
    simd: pulp::x86::V4,
    x: MatRef<'_, f64>,
    linear: &LinearScores<'_>,
    out: &mut [&mut [MaybeUninit<f64>]],
) -> Option<usize> {
    use crate::fused_posteriors::{lane_columns, posteriors_in_registers, with_classes};
    let (d, k) = (x.ncols(), out.len());
    if !(1..=FUSED_MAX_FEATURES).contains(&d)
        || linear.weights.len() != k * d
        || linear.intercepts.len() != k
    {
        return None;
    }
    let columns = lane_columns(x)?;
    let (weights, intercepts) = (&linear.weights, &linear.intercepts);
    let threshold = linear.features.threshold();
    Some(with_classes!(k, K, {
        let rows = LinearRows::<K, AS_IS> {
            columns: &columns,
            // Column q's weight for each class.
            weights: (0..d)
                .map(|q| std::array::from_fn(|c| weights[c * d + q]))
                .collect(),
            intercepts: std::array::from_fn(|c| intercepts[c]),
            threshold,
        };
        match linear.features.mode() {
            COUNTS => posteriors_in_registers::<K, _>(simd, rows.read_as::<COUNTS>(), out),
            ABOVE => posteriors_in_registers::<K, _>(simd, rows.read_as::<ABOVE>(), out),
            BINARY => posteriors_in_registers::<K, _>(simd, rows.read_as::<BINARY>(), out),
            _ => posteriors_in_registers::<K, _>(simd, rows, out),
        }
    }))
}

/// Most features [`fused_linear_posteriors`] takes, each vector of rows read from that many
/// columns at once. Against the scores by groups of columns then the softmax (Zen 4 EPYC,
/// `profile`, p10 of alternated runs): `lda-predict 16 10` at n = 1e6 on two threads from
/// memory (`PROFILE_COLD=cs`, 66 runs) 9.38 → 8.92 ms, `mnb-predict 16 10` 9.36 → 9.35 ms;
/// one thread, 131,072 rows in L3 (168 runs), `lda-predict 8 5` 0.767 → 0.636 ms,
/// `lda-predict 16 10` 2.06 → 1.94 ms. As for the diagonal formula, wider rows were not tried.
pub(crate) const FUSED_MAX_FEATURES: usize = 16;

/// Linear scores of K classes read by `MODE`, a vector of rows at a time, for
/// [`crate::fused_posteriors`]: column by column, each class's score in a register of its own.
#[cfg(target_arch = "x86_64")]
struct LinearRows<'a, const K: usize, const MODE: u8> {
    columns: &'a [&'a [crate::fused_posteriors::Lanes]],
    /// Column q's weight for each class.
    weights: Vec<[f64; K]>,
    intercepts: [f64; K],
    threshold: f64,
}

#[cfg(target_arch = "x86_64")]
impl<'a, const K: usize, const MODE: u8> LinearRows<'a, K, MODE> {
    /// The same scores, read by `M`.
    fn read_as<const M: u8>(self) -> LinearRows<'a, K, M> {
        let LinearRows {
            columns,
            weights,
            intercepts,
            threshold,
        } = self;
        LinearRows {
            columns,
            weights,
            intercepts,
            threshold,
        }
    }
}

#[cfg(target_arch = "x86_64")]
impl<const K: usize, const MODE: u8> crate::fused_posteriors::VectorScores<K>
    for LinearRows<'_, K, MODE>
{
    #[inline(always)]
    fn columns(&self) -> &[&[crate::fused_posteriors::Lanes]] {
        self.columns
    }

    /// Each column's read of the vector's values and their checks ([`read_lanes`]), and its
    /// multiply-add into every class's score, from the intercepts through the columns in
    /// order, as [`group`]'s.
    #[inline(always)]
    fn scores(&self, simd: pulp::x86::V4, v: usize) -> ([crate::fused_posteriors::Lanes; K], bool) {
        use pulp::Simd;
        let (max, t) = (simd.splat_f64s(f64::MAX), simd.splat_f64s(self.threshold));
        let mut accepted = true;
        let mut scores = [simd.splat_f64s(0.0); K];
        for c in 0..K {
            scores[c] = simd.splat_f64s(self.intercepts[c]);
        }
        for (column, weights) in self.columns.iter().zip(&self.weights) {
            let (value, ok) = read_lanes::<_, MODE>(simd, column[v], t, max);
            if let Some(ok) = ok {
                accepted &= ok.0 == u8::MAX;
            }
            for c in 0..K {
                scores[c] = simd.mul_add_f64s(value, simd.splat_f64s(weights[c]), scores[c]);
            }
        }
        (scores, accepted)
    }
}

/// Gives NaN scores to every row of `x` that holds a value `features` does not accept, so that
/// a prediction that checks scores rather than input sees it.
pub(crate) fn mark_rejected_rows(x: MatRef<'_, f64>, features: Features, mut out: MatMut<'_, f64>) {
    // Column by column first (contiguous in the usual layout); rows only when one is rejected.
    let rejected = |v: &f64| !features.accepts(*v);
    if features == Features::AsIs || !(0..x.ncols()).any(|j| x.col(j).iter().any(rejected)) {
        return;
    }
    for i in 0..x.nrows() {
        if (0..x.ncols()).any(|j| !features.accepts(x[(i, j)])) {
            out.as_mut().row_mut(i).fill(f64::NAN);
        }
    }
}

/// Runs the kernel with K as a constant, so that each class's accumulator stays in a register;
/// returns whether every value was accepted.
fn dispatch<const MODE: u8>(k: usize, kernel: Kernel<'_>) -> bool {
    let arch = pulp::Arch::new();
    match k {
        2 => arch.dispatch(Typed::<2, MODE>(kernel)),
        3 => arch.dispatch(Typed::<3, MODE>(kernel)),
        4 => arch.dispatch(Typed::<4, MODE>(kernel)),
        5 => arch.dispatch(Typed::<5, MODE>(kernel)),
        6 => arch.dispatch(Typed::<6, MODE>(kernel)),
        7 => arch.dispatch(Typed::<7, MODE>(kernel)),
        8 => arch.dispatch(Typed::<8, MODE>(kernel)),
        9 => arch.dispatch(Typed::<9, MODE>(kernel)),
        _ => arch.dispatch(Typed::<10, MODE>(kernel)),
    }
}

struct Kernel<'a> {
    columns: Vec<&'a [f64]>,
    weights: &'a [f64],
    intercepts: &'a [f64],
    threshold: f64,
    /// The centre of `CENTRED` (d values), empty otherwise.
    centre: &'a [f64],
    /// The class columns, written by the kernel before it reads them.
    scores: Vec<&'a mut [MaybeUninit<f64>]>,
}

struct Typed<'a, const K: usize, const MODE: u8>(Kernel<'a>);

impl<const K: usize, const MODE: u8> pulp::WithSimd for Typed<'_, K, MODE> {
    type Output = bool;

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, simd: S) -> bool {
        let Kernel {
            columns,
            weights,
            intercepts,
            threshold,
            centre,
            scores,
        } = self.0;
        // The class columns as an array once, so that each block slices them without allocating.
        let Ok(mut scores): Result<[&mut [MaybeUninit<f64>]; K], _> = scores.try_into() else {
            return false;
        };
        let (d, n) = (columns.len(), scores[0].len());
        let b: [f64; K] = std::array::from_fn(|c| intercepts[c]);
        let mut all_accepted = true;
        for r0 in (0..n).step_by(BLOCK_ROWS) {
            let r1 = (r0 + BLOCK_ROWS).min(n);
            let mut s: [&mut [MaybeUninit<f64>]; K] = scores.each_mut().map(|col| &mut col[r0..r1]);
            // The first group (`FIRST`) writes every score of the block, from the intercepts;
            // the later ones read and add to them.
            let mut j = 0;
            while j < d {
                // The last group takes the 1–3 columns left together, so that d = 2 (or 6, ...)
                // is not one pass over the scores per leftover column.
                let width = (d - j).min(GROUP);
                let x: [&[f64]; GROUP] =
                    std::array::from_fn(|q| &columns[(j + q).min(d - 1)][r0..r1]);
                let w: [[f64; GROUP]; K] = std::array::from_fn(|c| {
                    std::array::from_fn(|q| weights[c * d + (j + q).min(d - 1)])
                });
                let at = Read {
                    threshold,
                    centre: std::array::from_fn(|q| {
                        centre.get((j + q).min(d - 1)).copied().unwrap_or(0.0)
                    }),
                };
                // The group after this one (the next block's first after the last), which the
                // group's loop asks for from memory as it goes ([`READ_AHEAD_MIN_CLASSES`]).
                let ahead: [&[f64]; GROUP] = if K < READ_AHEAD_MIN_CLASSES || d <= GROUP {
                    [&[]; GROUP]
                } else if j + width < d {
                    std::array::from_fn(|q| {
                        columns.get(j + width + q).map_or(&[][..], |c| &c[r0..r1])
                    })
                } else if r1 < n {
                    let r2 = (r1 + BLOCK_ROWS).min(n);
                    std::array::from_fn(|q| columns.get(q).map_or(&[][..], |c| &c[r1..r2]))
                } else {
                    [&[]; GROUP]
                };
                all_accepted &= if j == 0 {
                    group_of::<S, K, true, MODE>(simd, width, &x, &w, &b, &at, &mut s, &ahead)
                } else {
                    group_of::<S, K, false, MODE>(simd, width, &x, &w, &b, &at, &mut s, &ahead)
                };
                j += width;
            }
        }
        all_accepted
    }
}

/// [`group`] of the first `width` (1 to [`GROUP`]) columns of `x`, `W` as a constant.
#[inline(always)]
fn group_of<S: pulp::Simd, const K: usize, const FIRST: bool, const MODE: u8>(
    simd: S,
    width: usize,
    x: &[&[f64]; GROUP],
    w: &[[f64; GROUP]; K],
    b: &[f64; K],
    at: &Read,
    s: &mut [&mut [MaybeUninit<f64>]; K],
    ahead: &[&[f64]; GROUP],
) -> bool {
    match width {
        GROUP => group::<S, K, GROUP, FIRST, MODE>(simd, x, w, b, at, s, ahead),
        3 => group::<S, K, 3, FIRST, MODE>(simd, x, w, b, at, s, ahead),
        2 => group::<S, K, 2, FIRST, MODE>(simd, x, w, b, at, s, ahead),
        _ => group::<S, K, 1, FIRST, MODE>(simd, x, w, b, at, s, ahead),
    }
}

/// What a group's read needs besides the mode: `Above`'s threshold, `CENTRED`'s centre of the
/// group's columns.
struct Read {
    threshold: f64,
    centre: [f64; GROUP],
}

/// One group of `W` columns (the first `W` of `x` and of each class's `w`) added into every
/// class's scores `s`; with `FIRST`, the scores start from the intercepts `b` instead. Returns
/// whether `MODE` accepts every value the group read. Without `FIRST`, every score it reads
/// must have been written (by the block's first group).
#[allow(unsafe_code)]
#[inline(always)]
fn group<S: pulp::Simd, const K: usize, const W: usize, const FIRST: bool, const MODE: u8>(
    simd: S,
    x: &[&[f64]; GROUP],
    w: &[[f64; GROUP]; K],
    b: &[f64; K],
    at: &Read,
    s: &mut [&mut [MaybeUninit<f64>]; K],
    ahead: &[&[f64]; GROUP],
) -> bool {
    let threshold = at.threshold;
    let cv: [S::f64s; W] = std::array::from_fn(|q| simd.splat_f64s(at.centre[q]));
    let xv: [&[S::f64s]; W] = std::array::from_fn(|q| S::as_simd_f64s(x[q]).0);
    let wv: [[S::f64s; W]; K] =
        std::array::from_fn(|c| std::array::from_fn(|q| simd.splat_f64s(w[c][q])));
    let bv: [S::f64s; K] = std::array::from_fn(|c| simd.splat_f64s(b[c]));
    let (zero, one) = (simd.splat_f64s(0.0), simd.splat_f64s(1.0));
    let (max, t) = (simd.splat_f64s(f64::MAX), simd.splat_f64s(threshold));
    // 1 in every lane while every value read was accepted (a select per vector read; the loop
    // waits on memory, not on these).
    let mut accepted = one;
    // Every column and score slice cut to one length: the loop's index is then in bounds of
    // all of them, so it carries no bounds check per class (there were K compares with a
    // branch each, in every iteration, at d = 2, K = 10).
    let vectors = xv
        .iter()
        .map(|c| c.len())
        .chain(s.iter().map(|c| c.len() / S::F64_LANES))
        .min()
        .unwrap_or(0);
    let xv: [&[S::f64s]; W] = xv.map(|c| &c[..vectors]);
    let sv: [&mut [MaybeUninit<S::f64s>]; K] = s
        .each_mut()
        .map(|c| &mut S::as_uninit_mut_simd_f64s(c).0[..vectors]);
    for v in 0..vectors {
        // A plain loop, not `array::from_fn`: its closure was not inlined once it held the
        // checks, and outside the dispatch's target features every comparison and blend became
        // a call (Bernoulli NB's prediction at d = 64, K = 2 took 0.228 s against 0.059 s).
        let mut xs = [zero; W];
        for q in 0..W {
            let raw = xv[q][v];
            let (value, ok) = read_lanes::<S, MODE>(simd, raw, t, max);
            if let Some(ok) = ok {
                accepted = simd.select_f64s(ok, accepted, zero);
            }
            xs[q] = if MODE == CENTRED {
                simd.sub_f64s(raw, cv[q])
            } else {
                value
            };
        }
        for c in 0..K {
            // SAFETY (not `FIRST`): the block's first group wrote this vector.
            let mut acc = if FIRST {
                bv[c]
            } else {
                unsafe { sv[c][v].assume_init() }
            };
            for q in 0..W {
                acc = simd.mul_add_f64s(xs[q], wv[c][q], acc);
            }
            sv[c][v] = MaybeUninit::new(acc);
        }
        if K >= READ_AHEAD_MIN_CLASSES {
            // A line of each column of the next group per vector of rows: the group's pass
            // over the rows is as long as the next one's, so the asking keeps pace.
            for column in ahead {
                density::block::prefetch(column, v * S::F64_LANES);
            }
        }
    }
    let mut all_accepted =
        MODE == AS_IS || MODE == CENTRED || simd.reduce_min_f64s(accepted) == 1.0;
    // The rows after the last whole vector, with the same operations one at a time.
    let tail = vectors * S::F64_LANES;
    for c in 0..K {
        for (i, out) in s[c].iter_mut().enumerate().skip(tail) {
            // SAFETY (not `FIRST`): the block's first group wrote this score.
            let mut acc = if FIRST {
                b[c]
            } else {
                unsafe { out.assume_init() }
            };
            for q in 0..W {
                let raw = x[q][i];
                if c == 0 {
                    all_accepted &= accepts_scalar(MODE, raw);
                }
                let v = if MODE == CENTRED {
                    raw - at.centre[q]
                } else {
                    read_scalar(MODE, threshold, raw)
                };
                acc = v.mul_add(w[c][q], acc);
            }
            *out = MaybeUninit::new(acc);
        }
    }
    all_accepted
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
                    linear_scores(x.as_ref(), &w, &b, Features::AsIs, out.as_mut()),
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

    /// The centred kernel: every row is the chain of its centred values, `x − c` rounded once
    /// per value, in the vector part and the tail alike; a non-finite value gives non-finite
    /// scores (what `scores_reveal_bad_input` relies on); a centre of the wrong length is refused.
    #[test]
    fn centred_rows_are_the_fma_chain_of_the_centred_values() {
        for (n, d) in [(1, 1), (9, 3), (2049, 4), (300, 17), (2100, 64)] {
            for k in [2, 3, 7, MAX_STREAMED_CLASSES] {
                let (raw, w, b) = problem(n, d, k);
                // Far from the origin, as the rows EM scores may be.
                let x = Mat::from_fn(n, d, |i, j| raw[(i, j)] + 1e4 * (j as f64 + 1.0));
                let centre: Vec<f64> = (0..d).map(|j| 1e4 * (j as f64 + 1.0) + 0.25).collect();
                let mut out = Mat::<f64>::from_fn(n, k, |_, _| f64::NAN);
                assert!(centred_linear_scores(
                    x.as_ref(),
                    &centre,
                    &w,
                    &b,
                    out.as_mut()
                ));
                let centred = Mat::from_fn(n, d, |i, j| x[(i, j)] - centre[j]);
                for i in 0..n {
                    for c in 0..k {
                        let want = fma_chain(&centred, &w, &b, i, c);
                        assert_eq!(
                            out[(i, c)].to_bits(),
                            want.to_bits(),
                            "n {n} d {d} k {k} ({i}, {c})"
                        );
                    }
                }
            }
        }
        let (n, d, k) = (2100, 6, 3);
        let (x, w, b) = problem(n, d, k);
        let centre = vec![0.5; d];
        for (row, col, v) in [
            (5, 0, f64::NAN),
            (2099, 5, f64::INFINITY),
            (2048, 2, f64::NEG_INFINITY),
        ] {
            let mut xb = x.clone();
            xb[(row, col)] = v;
            let mut out = Mat::<f64>::zeros(n, k);
            assert!(centred_linear_scores(
                xb.as_ref(),
                &centre,
                &w,
                &b,
                out.as_mut()
            ));
            assert!(
                (0..k).all(|c| !out[(row, c)].is_finite()),
                "{v} at ({row}, {col})"
            );
            assert!((0..k).all(|c| out[(row + 1 - 2 * (row % 2), c)].is_finite()));
        }
        let mut out = Mat::<f64>::zeros(n, k);
        assert!(!centred_linear_scores(
            x.as_ref(),
            &centre[1..],
            &w,
            &b,
            out.as_mut()
        ));
    }

    /// Posteriors straight from the scores (`ScoreFormula::write_unwritten_posteriors`): every
    /// mode, one to sixteen columns, two to ten classes, with and without a bad value (rejected by
    /// the mode, or ±∞/NaN) in the first vector, a later one or the tail, and scores far apart
    /// (exponentials that underflow) or tied. The rows before the returned one have the bits of
    /// the scores then `normalize_chunk`; the returned one is the first row of the first vector
    /// with a bad value (else the end of the whole vectors), or there is no AVX-512; the rows
    /// from it on have the scores' bits, and the mode's answer for them.
    #[test]
    fn posteriors_straight_from_the_scores_have_the_scores_then_softmaxs_bits() {
        use crate::fused_posteriors::tests::posteriors_straight_from;
        use crate::score_formula::ScoreFormula;
        let whole_vectors = cfg!(target_arch = "x86_64") && pulp::x86::V4::try_new().is_some();
        let modes = [
            Features::AsIs,
            Features::Counts,
            Features::Above(0.25),
            Features::Binary,
        ];
        for features in modes {
            for d in 1..=FUSED_MAX_FEATURES {
                for k in [2, 3, 4, 7, MAX_STREAMED_CLASSES] {
                    for (n, bad) in [
                        (0, None),
                        (5, None),
                        (61, None),
                        (300, None),
                        (300, Some(3)),
                        (300, Some(131)),
                        (61, Some(58)),
                    ] {
                        // Scores a few units apart, so that every posterior has bits to
                        // lose; the last class's first weight large, so that some rows' other
                        // exponentials underflow.
                        let v = |i: usize, j: usize, salt: usize| {
                            let h = (i * 7919 + j * 104_729 + salt * 1_299_709) % 10_007;
                            (h as f64 / 10_007.0 - 0.5) * 4.0
                        };
                        let raw = Mat::from_fn(n, d, |i, j| v(i, j, 1));
                        let mut w: Vec<f64> = (0..k * d).map(|t| v(t / d, t % d, 2)).collect();
                        let b: Vec<f64> = (0..k).map(|c| v(c, 0, 3)).collect();
                        w[(k - 1) * d] *= 300.0;
                        let mut x = Mat::from_fn(n, d, |i, j| match features {
                            Features::Counts => (raw[(i, j)].abs() * 7.0).floor(),
                            Features::Binary => ((i + j) % 3 == 0) as u8 as f64,
                            _ => raw[(i, j)],
                        });
                        if let Some(row) = bad {
                            x[(row, d - 1)] = match features {
                                Features::Counts => -1.0,
                                Features::Binary => 0.5,
                                Features::Above(_) => f64::INFINITY,
                                Features::AsIs => f64::NAN,
                            };
                        }
                        let case = format!("{features:?} n {n} d {d} k {k} bad {bad:?}");
                        let mut scores = Mat::<f64>::zeros(n, k);
                        assert!(linear_scores(x.as_ref(), &w, &b, features, scores.as_mut()));
                        let mut want = scores.clone();
                        crate::model::normalize_chunk(want.as_mut(), true, None);
                        let formula = ScoreFormula::Linear(LinearScores {
                            weights: w.clone().into(),
                            intercepts: b.clone().into(),
                            features,
                        });
                        let (mut got, answer) = posteriors_straight_from(&formula, x.as_ref(), k);
                        let Some((first, accepted)) = answer else {
                            assert!(!whole_vectors, "{case}: declined");
                            continue;
                        };
                        let stop = bad
                            .filter(|&r| r < n / 8 * 8)
                            .map_or(n / 8 * 8, |r| r / 8 * 8);
                        assert_eq!(first, stop, "{case}");
                        assert_eq!(
                            accepted,
                            bad.is_none() || features == Features::AsIs,
                            "{case}"
                        );
                        let mut rest = got.as_mut().subrows_mut(first, n - first);
                        if !accepted {
                            mark_rejected_rows(
                                x.as_ref().subrows(first, n - first),
                                features,
                                rest.as_mut(),
                            );
                        }
                        for i in 0..n {
                            for c in 0..k {
                                let expected = if i < first {
                                    want[(i, c)]
                                } else {
                                    scores[(i, c)]
                                };
                                assert_eq!(
                                    got[(i, c)].to_bits(),
                                    expected.to_bits(),
                                    "{case} ({i}, {c})"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// Each checked mode: the rows it accepts are the chain of its read values (binarised for
    /// `Above`), and exactly the rows holding a rejected value, in the vector part or the tail,
    /// in the first column or the last, get NaN scores.
    #[test]
    fn checked_modes_read_their_values_and_mark_exactly_the_rejected_rows() {
        let (n, d, k) = (2100, 6, 3);
        let (raw, w, b) = problem(n, d, k);
        let cases: [(Features, Vec<f64>, Vec<f64>); 3] = [
            // Counts: 0, -0 and the largest finite value are counts.
            (
                Features::Counts,
                vec![0.0, -0.0, f64::MAX, 3.0],
                vec![-1e-300, -2.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY],
            ),
            (
                Features::Above(0.001),
                vec![0.001, -f64::MAX, f64::MAX, -0.0],
                vec![f64::NAN, f64::INFINITY, f64::NEG_INFINITY],
            ),
            (
                Features::Binary,
                vec![0.0, 1.0, -0.0],
                vec![0.5, 2.0, -1.0, f64::NAN, f64::INFINITY],
            ),
        ];
        for (features, good, bad) in cases {
            let mut x = Mat::from_fn(n, d, |i, j| match features {
                Features::Counts => (raw[(i, j)].abs() * 1e3).round(),
                Features::Binary => f64::from(raw[(i, j)] > 0.0),
                _ => raw[(i, j)],
            });
            // Accepted edge values in the vector part and in the tail.
            for (t, v) in good.iter().enumerate() {
                x[(10 + t, t % d)] = *v;
                x[(n - 1 - t, (t + 1) % d)] = *v;
            }
            // One bad value per input, so that each place must be seen by the kernel itself
            // (any one seen value has every row checked).
            let places = [(100, 0), (n - 2, d - 1), (2047, 3), (2048, 5), (n - 20, 2)];
            for (t, v) in bad.iter().enumerate() {
                let (row, col) = places[t];
                let mut xb = x.clone();
                xb[(row, col)] = *v;
                let mut out = Mat::<f64>::zeros(n, k);
                assert!(linear_scores(xb.as_ref(), &w, &b, features, out.as_mut()));
                let read = Mat::from_fn(n, d, |i, j| {
                    read_scalar(features.mode(), features.threshold(), xb[(i, j)])
                });
                for i in 0..n {
                    for c in 0..k {
                        if i == row {
                            assert!(out[(i, c)].is_nan(), "{features:?}: {v} at ({row}, {col})");
                        } else {
                            let want = fma_chain(&read, &w, &b, i, c);
                            let at = format!("{features:?}, {v} at ({row}, {col}): ({i}, {c})");
                            assert_eq!(out[(i, c)].to_bits(), want.to_bits(), "{at}");
                        }
                    }
                }
            }
        }
    }

    /// On valid input the kernel itself reports every value accepted, so the marking pass (a
    /// second, row-by-row read) does not run.
    #[test]
    fn the_kernel_accepts_valid_input_without_the_marking_pass() {
        let (raw, w, b) = problem(2100, 6, 3);
        let counts = Mat::from_fn(2100, 6, |i, j| (raw[(i, j)].abs() * 1e3).round());
        let binary = Mat::from_fn(2100, 6, |i, j| f64::from(raw[(i, j)] > 0.0));
        for (features, x) in [
            (Features::Counts, &counts),
            (Features::Above(0.0), &counts),
            (Features::Above(0.25), &raw),
            (Features::Binary, &binary),
        ] {
            let kernel = || Kernel {
                columns: (0..6).map(|j| x.col_as_slice(j)).collect(),
                weights: &w,
                intercepts: &b,
                threshold: features.threshold(),
                centre: &[],
                scores: Vec::new(),
            };
            let mut out = Mat::<f64>::zeros(2100, 3);
            let mut k = kernel();
            let columns: Vec<&mut [f64]> = out
                .col_iter_mut()
                .map(|c| c.try_as_col_major_mut().unwrap().as_slice_mut())
                .collect();
            // SAFETY: the kernel writes only values into the columns.
            #[allow(unsafe_code)]
            let columns = unsafe { density::block::as_unwritten_columns(columns) };
            k.scores = columns;
            let accepted = match features.mode() {
                COUNTS => dispatch::<COUNTS>(3, k),
                ABOVE => dispatch::<ABOVE>(3, k),
                _ => dispatch::<BINARY>(3, k),
            };
            assert!(accepted, "{features:?}");
        }
    }

    #[test]
    fn a_row_has_the_same_bits_wherever_it_falls() {
        let (x, w, b) = problem(2500, 6, 3);
        let mut all = Mat::<f64>::zeros(2500, 3);
        assert!(linear_scores(
            x.as_ref(),
            &w,
            &b,
            Features::AsIs,
            all.as_mut()
        ));
        for (r0, len) in [(0, 1), (5, 1), (2047, 3), (1000, 1500), (2499, 1)] {
            let mut part = Mat::<f64>::zeros(len, 3);
            assert!(linear_scores(
                x.as_ref().subrows(r0, len),
                &w,
                &b,
                Features::AsIs,
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
        assert!(!linear_scores(
            x_rows.transpose(),
            &w,
            &b,
            Features::AsIs,
            out.as_mut()
        ));
        // Row-major output.
        let mut out_rows = Mat::<f64>::zeros(2, 40);
        assert!(!linear_scores(
            x.as_ref(),
            &w,
            &b,
            Features::AsIs,
            out_rows.as_mut().transpose_mut()
        ));
        // One class, and more than the kernel takes.
        let (x1, w1, b1) = problem(40, 3, 1);
        let mut out1 = Mat::<f64>::zeros(40, 1);
        assert!(!linear_scores(
            x1.as_ref(),
            &w1,
            &b1,
            Features::AsIs,
            out1.as_mut()
        ));
        let (x11, w11, b11) = problem(40, 3, MAX_STREAMED_CLASSES + 1);
        let mut out11 = Mat::<f64>::zeros(40, MAX_STREAMED_CLASSES + 1);
        assert!(!linear_scores(
            x11.as_ref(),
            &w11,
            &b11,
            Features::AsIs,
            out11.as_mut()
        ));
        // No features.
        let (x0, w0, b0) = problem(40, 0, 2);
        assert!(!linear_scores(
            x0.as_ref(),
            &w0,
            &b0,
            Features::AsIs,
            out.as_mut()
        ));
        // Weights of the wrong length.
        assert!(!linear_scores(
            x.as_ref(),
            &w[..5],
            &b,
            Features::AsIs,
            out.as_mut()
        ));
        for m in [&out, &out1, &out11] {
            assert!(m.col_iter().all(|col| col.iter().all(|v| *v == 0.0)));
        }
        assert!(out_rows.col_iter().all(|col| col.iter().all(|v| *v == 0.0)));
    }
}
