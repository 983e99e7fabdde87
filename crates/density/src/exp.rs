//! `exp(x)` for `x ≤ 0`, the exponential that turns normalised log-probabilities into
//! probabilities, on the widest SIMD the CPU has and with the same bits on every path.
//!
//! Why its own kernels: a K = 10 `predict_proba` is mostly exponentials (ten per row), and
//! the earlier branch-free formula (degree-13 series, left to LLVM's autovectoriser) ran at
//! about 1.2 ns per value on AVX-512 and on AVX2 alike, bound by its ~30 vector operations.
//! A 16-entry table of 2^(j/16) shortens the series to degree 7, and AVX-512 has the two
//! operations that make the table and the final scaling one instruction each (`vpermi2pd`, a
//! lookup in two registers, and `vscalefpd`, y · 2^⌊q⌋ with one rounding, subnormals
//! included): about 17 operations, 0.55 ns per value. LLVM does not emit either from scalar
//! code, so the kernels are written with `pulp`'s intrinsics.
//!
//! Method (the same arithmetic on every path, so the same bits): x is clamped to [−746, 0]
//! (below −746 the result is 0 in any case); t = x · 1/ln 2 + 1.5 · 2^48 rounds x · 1/ln 2 to the
//! nearest sixteenth, k/16 (ties to even), in one fused multiply-add and leaves the integer k in
//! t's low bits (t's unit in the last place is 1/16); r = x − (k/16) · ln 2 (Cody–Waite: ln 2 in
//! two parts, so (k/16) · LN2_HI is exact), |r| ≤ ln 2/32; e^r − 1 = r + r² · g(r), g of degree
//! 5; y = T[k mod 16] · (1 + (e^r − 1)) in one fused multiply-add; and the result is
//! y · 2^⌊k/16⌋ with a single rounding. AVX-512 does the last step with `vscalefpd`, which
//! takes k/16 as it is; AVX2 and the scalar path as y · 2^(⌊k/16⌋ + 60), exact, times 2^−60,
//! one rounding, which is the same value. AVX2 reads the table with a gather.
//!
//! (Until the ninety-seventh round t was x · 16/ln 2 + 1.5 · 2^52, k an integer, and AVX-512
//! multiplied k by 1/16 for `vscalefpd`: every step here is that one scaled by a power of two,
//! exactly, so the bits are the same, with one multiplication fewer per vector.)
//!
//! Accuracy: g's coefficients interpolate (e^r − 1 − r)/r² at the six Chebyshev nodes of
//! [−ln 2/32, ln 2/32], rounded to f64; in 50-digit arithmetic 1 + r + r² · g(r) is within
//! 4e-4 ulp of e^r there. The table entries are 2^(j/16) correctly rounded. The result was
//! within 1 ulp of libm's `exp` on 2^20 random arguments in [−750, 0] (tests assert 2).
//! NaN gives 0 on every path (the clamp's maximum ignores NaN), +∞ gives 1.
#![allow(
    clippy::excessive_precision,
    clippy::unreadable_literal,
    clippy::approx_constant
)]

use std::sync::OnceLock;

/// 1 / ln 2, so that x · K_SCALE counts powers of two.
const K_SCALE: f64 = std::f64::consts::LOG2_E;
/// ln 2 = LN2_HI + LN2_LO; LN2_HI has 21 trailing zero bits, so (k/16) · LN2_HI is exact for
/// the |k| ≤ 17,220 that the clamp allows (k/16 has at most 15 significant bits).
const LN2_HI: f64 = 0.693_147_180_369_123_8;
const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;
/// Adding 1.5 · 2^48 rounds to a multiple of 1/16 (the unit in the last place of numbers in
/// [2^48, 2^49)) and leaves sixteen times it, an integer, in the low mantissa bits.
const SHIFT: f64 = 422_212_465_065_984.0;
/// g(r) ≈ (e^r − 1 − r) / r², lowest degree first (see the module docs).
const G: [f64; 6] = [
    0.5,
    0.16666666666666669,
    0.041666666663595475,
    0.00833333333299209,
    0.0013889063440655327,
    0.0001984146378747018,
];
/// 2^(j/16), j = 0..16, correctly rounded.
const TABLE: [f64; 16] = [
    1.0,
    1.0442737824274138,
    1.0905077326652577,
    1.1387886347566916,
    1.189207115002721,
    1.241857812073484,
    1.2968395546510096,
    1.3542555469368927,
    1.4142135623730951,
    1.4768261459394993,
    1.5422108254079407,
    1.6104903319492543,
    1.681792830507429,
    1.7562521603732995,
    1.8340080864093424,
    1.9152065613971474,
];
/// Results are scaled by 2^(⌊k/16⌋ + UNDER), a normal number for every k the clamp allows,
/// then by 2^−UNDER.
const UNDER: u64 = 60;
const TWO_TO_MINUS_UNDER: f64 = 1.0 / (1u64 << UNDER) as f64;
/// The biased exponent of 2^UNDER, shifted into place.
const SCALE_BIAS: u64 = (1023 + UNDER) << 52;
/// The sign and exponent bits of an f64.
const EXPONENT_BITS: u64 = !((1u64 << 52) - 1);

/// `exp(x)` for `x ≤ 0` (larger x gives 1, −∞ and NaN give 0), within 1 ulp of the correctly
/// rounded value in tests, the same bits as the vector kernels. For slices, use
/// [`exp_nonpositive_in_place`] or [`exp_shifted_accumulate`], which run those kernels.
#[inline(always)]
pub fn exp_nonpositive(x: f64) -> f64 {
    // Not `clamp`, which keeps NaN: `max` turns it into −746, as the vector kernels' do.
    #[allow(clippy::manual_clamp)]
    let x = x.max(-746.0).min(0.0);
    let t = x.mul_add(K_SCALE, SHIFT);
    // k/16, exactly.
    let k = t - SHIFT;
    let r = (-k).mul_add(LN2_LO, (-k).mul_add(LN2_HI, x));
    let r2 = r * r;
    let a = G[1].mul_add(r, G[0]);
    let b = G[3].mul_add(r, G[2]);
    let c = G[5].mul_add(r, G[4]);
    let g = c.mul_add(r2, b).mul_add(r2, a);
    let expm1 = g.mul_add(r2, r);
    let bits = t.to_bits();
    let entry = TABLE[(bits & 15) as usize];
    let y = entry.mul_add(expm1, entry);
    // k = 16q + j sits in the low bits of `bits − SHIFT` (two's complement); shifted left by 48
    // and masked to the exponent field it is q, and adding the bias gives 2^(q + UNDER).
    let scale =
        ((bits.wrapping_sub(SHIFT.to_bits()) << 48) & EXPONENT_BITS).wrapping_add(SCALE_BIAS);
    y * f64::from_bits(scale) * TWO_TO_MINUS_UNDER
}

/// `values[i] = exp(values[i])` for values ≤ 0 ([`exp_nonpositive`]), on the widest kernel
/// the CPU has.
pub fn exp_nonpositive_in_place(values: &mut [f64]) {
    run(Kernel::InPlace { values })
}

/// `values[i] = exp(values[i] − shift[i])` and `sums[i] += values[i]`, for
/// `values[i] ≤ shift[i]` ([`exp_nonpositive`]), on the widest kernel the CPU has. Uses the
/// common length of the three slices.
pub fn exp_shifted_accumulate(values: &mut [f64], shift: &[f64], sums: &mut [f64]) {
    run(Kernel::ShiftedAccumulate {
        values,
        shift,
        sums,
    })
}

/// [`exp_nonpositive`] on a vector of AVX-512 lanes, each ≤ 0 or NaN (no clamp at 0): the
/// exponential of [`softmax_rows`]' kernel, the same bits, for a kernel elsewhere that takes
/// its own softmax in registers (`generative`'s posteriors straight from the scores).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn exp_nonpositive_v4(
    simd: pulp::x86::V4,
    x: <pulp::x86::V4 as pulp::Simd>::f64s,
) -> <pulp::x86::V4 as pulp::Simd>::f64s {
    simd.exp_f64s::<false>(x)
}

/// Most columns [`softmax_rows`] takes.
pub const SOFTMAX_MAX_COLUMNS: usize = 32;

/// Each row's posteriors in place, from its scores across `columns` (one slice per class, each
/// at least `rows.end` long), for the rows `rows`: with m the row's largest score (`f64::max`
/// over the columns in order) and e_j = exp(v_j − m) ([`exp_nonpositive`]), each v_j becomes
/// e_j · (1 / s), where s = (…(0 + e_0) + e_1) + …; m goes to `shift[i − rows.start]` and s to
/// `sums[i − rows.start]`. The arithmetic of a maximum, then [`exp_shifted_accumulate`] column
/// by column, then a scaling, so the same bits.
///
/// Why one pass: done in three passes over a block of rows (`generative`'s normalisation), the
/// maximum and the sums were each loaded and stored again for every column, and on a Zen 5 the
/// normalisation of ten classes took 0.50–0.52 ns per value on one core (a 4096-row chunk in
/// L2) against 0.28–0.33 ns for its exponentials alone; in one pass, a vector of rows at a
/// time, 0.42 ns; two vectors interleaved 0.39 ns, four 0.36–0.44 ns (BENCHMARKS.md,
/// seventy-first round).
///
/// Takes groups of whole vectors of rows only (two vectors on AVX-512, one on AVX2), on the
/// widest kernel the CPU has, and stops before the first group with a row whose largest score
/// is not finite (all −∞, or +∞ somewhere; or NaN in the first column, which `f64::max` would
/// pass over) and before the rows after the last whole group. Two columns take one exponential
/// per row (the larger score's is exp(0) = 1 exactly: the same bits) and stop before the first
/// group with any value not finite. Returns the row it stopped at
/// (`rows.start` with no vector kernel, or more than [`SOFTMAX_MAX_COLUMNS`] columns, or none):
/// the caller's general path takes the rest. `shift` and `sums` must hold `rows.len()` values.
pub fn softmax_rows(
    columns: &mut [&mut [f64]],
    rows: std::ops::Range<usize>,
    shift: &mut [f64],
    sums: &mut [f64],
) -> usize {
    softmax_rows_in_place(columns, rows, shift, sums, Pass::Posteriors)
}

/// [`softmax_rows`], stopping also before the first group of rows with any score that is not
/// finite (NaN or ±∞ in any column, not only in a row's largest score) or whose scores' sum
/// overflows, so that every row before the returned one had finite scores only. The rows it
/// does get the bits [`softmax_rows`] gives them; the rows from the returned one on are not
/// touched.
///
/// Why: a prediction whose scores stand for the check of its input (a NaN or ±∞ input gives a
/// non-finite score) scanned every score of a chunk for one before normalising it, a pass of
/// its own over the chunk. Here the check rides on the maximum's pass, which reads every score
/// anyway (one addition per score, the scores' sum, whose finiteness is checked with the
/// maximum's): the rest of the chunk, from the first such group on, is left to the caller's
/// scan and general path. On the Zen 4 EPYC of the eighty-sixth round (BENCHMARKS.md),
/// `xtask profile qda-predict 2 10` took 7.1–7.6 ms with the scan and 6.0–6.8 ms without it,
/// `lda-predict 2 10` 7.1–7.6 and 6.6–7.5 ms.
pub fn softmax_rows_of_finite_scores(
    columns: &mut [&mut [f64]],
    rows: std::ops::Range<usize>,
    shift: &mut [f64],
    sums: &mut [f64],
) -> usize {
    softmax_rows_in_place(columns, rows, shift, sums, Pass::FiniteScores)
}

/// [`softmax_rows`]' shifts and sums alone: each row's largest score m to
/// `shift[i − rows.start]` and s = (…(0 + e_0) + e_1) + … to `sums[i − rows.start]`, the same
/// bits, with the columns left as they were (`&mut` only because the kernel is the one
/// [`softmax_rows`] runs). Stops where [`softmax_rows`] would; returns that row.
///
/// Why: log posteriors (v − m − ln s) need the scores after the sums. Taken in the general
/// path's passes over a block (the maxima, then each column copied and exponentiated, then the
/// subtraction), Gaussian NB's `predict_log_proba` at d = 2, K = 10 took half as long again as
/// its `predict_proba` (BENCHMARKS.md, ninety-fourth round).
pub fn softmax_sums(
    columns: &mut [&mut [f64]],
    rows: std::ops::Range<usize>,
    shift: &mut [f64],
    sums: &mut [f64],
) -> usize {
    softmax_rows_in_place(columns, rows, shift, sums, Pass::SumsOnly)
}

/// What a run of the softmax kernel does with the rows it takes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Pass {
    /// Their posteriors ([`softmax_rows`], [`softmax_rows_to`]).
    Posteriors,
    /// Their posteriors, stopping also before a group with any score that is not finite
    /// ([`softmax_rows_of_finite_scores`]).
    FiniteScores,
    /// Their shifts and sums only, the columns read and not written ([`softmax_sums`]).
    SumsOnly,
}

/// [`softmax_rows`], [`softmax_rows_of_finite_scores`] or [`softmax_sums`], as `pass` says.
fn softmax_rows_in_place(
    columns: &mut [&mut [f64]],
    rows: std::ops::Range<usize>,
    shift: &mut [f64],
    sums: &mut [f64],
    pass: Pass,
) -> usize {
    let mut done = rows.start;
    if softmax_arguments_fit(columns, &rows, shift, sums) {
        run(Kernel::Softmax {
            columns,
            dst: None,
            rows,
            shift,
            sums,
            done: &mut done,
            pass,
        });
    }
    done
}

/// Whether [`softmax_rows`]' kernel takes these arguments: 1 to [`SOFTMAX_MAX_COLUMNS`] columns
/// holding the rows, and room for each row's shift and sum.
fn softmax_arguments_fit(
    columns: &[&mut [f64]],
    rows: &std::ops::Range<usize>,
    shift: &[f64],
    sums: &[f64],
) -> bool {
    (1..=SOFTMAX_MAX_COLUMNS).contains(&columns.len())
        && rows.start <= rows.end
        && columns.iter().all(|c| c.len() >= rows.end)
        && shift.len() >= rows.len()
        && sums.len() >= rows.len()
}

/// [`softmax_rows`] with the posteriors written to `dst` (one column per column of
/// `columns`, the same rows) instead of in place; `columns` are left holding the rows'
/// exponentials. Every entry of the rows `rows.start ..` the returned row is written; the
/// others are not touched. Where a column of `dst` starts on a vector boundary (64 bytes with
/// AVX-512, 32 with AVX2), its vectors are written by non-temporal stores, whose order with
/// later stores the caller makes sure of ([`store_fence`]).
///
/// Why: a store into an output line that is not in cache reads the line from memory first,
/// so writing an n × K output moved its bytes twice. On the Xeon of the seventy-ninth round,
/// 2 threads wrote 80 MB into a reused buffer in 4.4 ms with plain stores and 2.35 ms with
/// non-temporal ones; scores kept in the worker's buffer and streamed out from here took
/// `predict_proba` at d = 2, K = 10 from 7.8 to 6.6 ms (BENCHMARKS.md).
pub fn softmax_rows_to(
    columns: &mut [&mut [f64]],
    dst: &mut [&mut [std::mem::MaybeUninit<f64>]],
    rows: std::ops::Range<usize>,
    shift: &mut [f64],
    sums: &mut [f64],
) -> usize {
    let mut done = rows.start;
    let k = columns.len();
    if softmax_arguments_fit(columns, &rows, shift, sums)
        && dst.len() == k
        && dst.iter().all(|c| c.len() >= rows.end)
    {
        let mut outs = [std::ptr::null_mut::<f64>(); SOFTMAX_MAX_COLUMNS];
        for (o, col) in outs.iter_mut().zip(dst.iter_mut()) {
            // Row `rows.start` of the column: `rows.end ≤ col.len()`, checked above.
            *o = col[rows.start..].as_mut_ptr().cast::<f64>();
        }
        run(Kernel::Softmax {
            columns,
            dst: Some(&outs[..k]),
            rows,
            shift,
            sums,
            done: &mut done,
            pass: Pass::Posteriors,
        });
    }
    done
}

/// Orders the non-temporal stores of [`softmax_rows_to`] before every later store (`sfence`),
/// so that a thread that sees a later store also sees them.
#[allow(unsafe_code)]
pub fn store_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` is part of SSE, which every x86-64 CPU has.
    unsafe {
        core::arch::x86_64::_mm_sfence()
    };
}

/// What one call computes.
enum Kernel<'a, 'c> {
    InPlace {
        values: &'a mut [f64],
    },
    ShiftedAccumulate {
        values: &'a mut [f64],
        shift: &'a [f64],
        sums: &'a mut [f64],
    },
    /// [`softmax_rows`]' arguments, and where it stopped.
    Softmax {
        columns: &'a mut [&'c mut [f64]],
        /// With [`softmax_rows_to`]: each column's row `rows.start`, `rows.len()` entries
        /// writable from there.
        dst: Option<&'a [*mut f64]>,
        rows: std::ops::Range<usize>,
        shift: &'a mut [f64],
        sums: &'a mut [f64],
        done: &'a mut usize,
        /// Posteriors, posteriors of finite scores, or shifts and sums only.
        pass: Pass,
    },
}

/// The kernel this CPU runs, detected once (a check per call cost more than a short slice's
/// work).
#[derive(Clone, Copy)]
pub(crate) enum Isa {
    #[cfg(target_arch = "x86_64")]
    V4(pulp::x86::V4),
    #[cfg(target_arch = "x86_64")]
    V3(pulp::x86::V3),
    Scalar,
}

pub(crate) fn isa() -> Isa {
    static ISA: OnceLock<Isa> = OnceLock::new();
    *ISA.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            if let Some(simd) = pulp::x86::V4::try_new() {
                return Isa::V4(simd);
            }
            if let Some(simd) = pulp::x86::V3::try_new() {
                return Isa::V3(simd);
            }
        }
        Isa::Scalar
    })
}

/// Every kernel this machine can run, the scalar path first (for tests that each gives the
/// scalar path's bits).
#[cfg(test)]
pub(crate) fn kernels() -> Vec<Isa> {
    let mut isas = vec![Isa::Scalar];
    #[cfg(target_arch = "x86_64")]
    {
        isas.extend(pulp::x86::V4::try_new().map(Isa::V4));
        isas.extend(pulp::x86::V3::try_new().map(Isa::V3));
    }
    isas
}

fn run(kernel: Kernel<'_, '_>) {
    run_on(isa(), kernel)
}

fn run_on(isa: Isa, kernel: Kernel<'_, '_>) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::V4(simd) => simd.vectorize(OnLanes { simd, kernel }),
        #[cfg(target_arch = "x86_64")]
        Isa::V3(simd) => simd.vectorize(OnLanes { simd, kernel }),
        Isa::Scalar => scalar(kernel),
    }
}

/// Both kernels one value at a time.
fn scalar(kernel: Kernel<'_, '_>) {
    match kernel {
        Kernel::InPlace { values } => {
            for v in values {
                *v = exp_nonpositive(*v);
            }
        }
        Kernel::ShiftedAccumulate {
            values,
            shift,
            sums,
        } => {
            for ((v, m), s) in values.iter_mut().zip(shift).zip(sums.iter_mut()) {
                let e = exp_nonpositive(*v - m);
                *v = e;
                *s += e;
            }
        }
        // Left to the caller's general path (`done` stays at the first row).
        Kernel::Softmax { .. } => {}
    }
}

/// e^r − 1 = r + r² · g(r) on whole vectors, the scalar path's operations in its order (every
/// multiply-add fused).
#[inline(always)]
fn expm1_reduced<S: pulp::Simd>(simd: S, r: S::f64s) -> S::f64s {
    let splat = |v: f64| simd.splat_f64s(v);
    let r2 = simd.mul_f64s(r, r);
    let a = simd.mul_add_f64s(splat(G[1]), r, splat(G[0]));
    let b = simd.mul_add_f64s(splat(G[3]), r, splat(G[2]));
    let c = simd.mul_add_f64s(splat(G[5]), r, splat(G[4]));
    let g = simd.mul_add_f64s(simd.mul_add_f64s(c, r2, b), r2, a);
    simd.mul_add_f64s(g, r2, r)
}

/// A SIMD type with a whole-vector [`exp_nonpositive`].
trait VectorExp: pulp::Simd {
    /// [`exp_nonpositive`] on a vector, clamped above at 0.
    // Inlined always: a default method is compiled once, outside the caller's `#[target_feature]`
    // context, so without it every intrinsic of the exponential became a call (two-class
    // predictions took 7× as long, c09db9b → here).
    #[inline(always)]
    fn exp_nonpositive_f64s(self, x: Self::f64s) -> Self::f64s {
        self.exp_f64s::<true>(x)
    }
    /// [`exp_nonpositive`] on a vector. Without `CLAMP_ABOVE` the lanes must be ≤ 0 or NaN
    /// (which the clamp below turns into −746, as with it): then the clamp at 0 changes
    /// nothing but −0 into +0, whose result is 1 either way, and leaving it out saves one
    /// operation of about sixteen (`softmax_rows`, whose arguments are v − max, 6% faster).
    fn exp_f64s<const CLAMP_ABOVE: bool>(self, x: Self::f64s) -> Self::f64s;
    /// Whether every lane of `x` is finite.
    fn all_finite_f64s(self, x: Self::f64s) -> bool;
    /// Writes `v` at `to`, by a non-temporal store with `stream`.
    ///
    /// # Safety
    /// `to` is valid for writes of one vector, and aligned to the vector's size with `stream`.
    #[inline(always)]
    #[allow(unsafe_code)]
    unsafe fn put_f64s(self, to: *mut f64, v: Self::f64s, stream: bool) {
        // SAFETY: the caller's.
        unsafe {
            if stream {
                self.stream_f64s(to, v);
            } else {
                to.cast::<Self::f64s>().write_unaligned(v);
            }
        }
    }
    /// Writes `v` at `to` by a non-temporal store.
    ///
    /// # Safety
    /// `to` is valid for writes of one vector and aligned to the vector's size.
    #[allow(unsafe_code)]
    unsafe fn stream_f64s(self, to: *mut f64, v: Self::f64s);
}

/// The kernels on whole vectors of `S`, the rest with the scalar formula.
struct OnLanes<'a, 'c, S> {
    simd: S,
    kernel: Kernel<'a, 'c>,
}

impl<S: VectorExp> pulp::NullaryFnOnce for OnLanes<'_, '_, S> {
    type Output = ();

    #[inline(always)]
    fn call(self) {
        let simd = self.simd;
        match self.kernel {
            Kernel::InPlace { values } => {
                let (head, tail) = S::as_mut_simd_f64s(values);
                for v in head {
                    *v = simd.exp_nonpositive_f64s(*v);
                }
                scalar(Kernel::InPlace { values: tail });
            }
            Kernel::ShiftedAccumulate {
                values,
                shift,
                sums,
            } => {
                let n = values.len().min(shift.len()).min(sums.len());
                let (values, shift, sums) = (&mut values[..n], &shift[..n], &mut sums[..n]);
                let (vh, vt) = S::as_mut_simd_f64s(values);
                let (mh, mt) = S::as_simd_f64s(shift);
                let (sh, st) = S::as_mut_simd_f64s(sums);
                for ((v, m), s) in vh.iter_mut().zip(mh).zip(sh.iter_mut()) {
                    let e = simd.exp_nonpositive_f64s(simd.sub_f64s(*v, *m));
                    *v = e;
                    *s = simd.add_f64s(*s, e);
                }
                scalar(Kernel::ShiftedAccumulate {
                    values: vt,
                    shift: mt,
                    sums: st,
                });
            }
            Kernel::Softmax {
                columns,
                dst,
                rows,
                shift,
                sums,
                done,
                pass,
            } => {
                // Two vectors at a time on AVX-512: with each group's scaling done during the
                // next group's exponentials, four (its choice before) were slower, 1.85 against
                // 1.76 TSC ticks a value (`softmax_rows` of ten classes, 128 rows in L1, best
                // of 20 on the Zen 4 EPYC; 2.00 before the scaling waited). One on AVX2, whose
                // 16 registers two vectors' chains and constants overflowed (stack spills and
                // constants loaded again in the loop): ten classes, 512 rows in L1, best of
                // 2000 calls, ten alternated runs on the Zen 3 EPYC of the ninety-first round,
                // 4.26–4.46 against 4.50–4.73 ticks a value (middle eight). On the model-167
                // Xeon (ninety-second round, 512 rows, four alternated runs) two stayed best:
                // 1.48–1.64 ticks a value against 1.61–2.09 for one and 1.49–1.67 for four.
                *done = if S::F64_LANES == 4 {
                    softmax_vectors::<S, 1>(simd, columns, dst, rows, shift, sums, pass)
                } else {
                    softmax_vectors::<S, 2>(simd, columns, dst, rows, shift, sums, pass)
                };
            }
        }
    }
}

/// [`softmax_rows`] on whole vectors of `S` (or [`softmax_rows_of_finite_scores`] or
/// [`softmax_sums`], as `pass` says); returns the first row not done.
#[inline(always)]
#[allow(unsafe_code)]
fn softmax_vectors<S: VectorExp, const U: usize>(
    simd: S,
    columns: &mut [&mut [f64]],
    dst: Option<&[*mut f64]>,
    rows: std::ops::Range<usize>,
    shift: &mut [f64],
    sums: &mut [f64],
    pass: Pass,
) -> usize {
    let finite_scores = pass == Pass::FiniteScores;
    let write = pass != Pass::SumsOnly;
    let k = columns.len();
    let mut heads: [&mut [S::f64s]; SOFTMAX_MAX_COLUMNS] = Default::default();
    for (head, col) in heads.iter_mut().zip(columns.iter_mut()) {
        *head = S::as_mut_simd_f64s(&mut col[rows.clone()]).0;
    }
    let heads = &mut heads[..k];
    // Where the posteriors go: each column's row `rows.start` in `dst`, or none (in place).
    let outs: &[*mut f64] = dst.map_or(&[], |d| &d[..k]);
    let stream = outs
        .iter()
        .all(|&p| (p as usize).is_multiple_of(8 * S::F64_LANES));
    let (shift, _) = S::as_mut_simd_f64s(&mut shift[..rows.len()]);
    let (sums, _) = S::as_mut_simd_f64s(&mut sums[..rows.len()]);
    if let [first, second] = heads {
        return two_class_vectors::<S, U>(
            simd,
            [first, second],
            (outs, stream, write),
            rows.start,
            shift,
            sums,
        );
    }
    if heads.is_empty() {
        return rows.start;
    }
    let vectors = heads[0].len().min(shift.len()).min(sums.len());
    let one = simd.splat_f64s(1.0);
    // U vectors of rows at a time, their operations interleaved: one vector's chain (maximum,
    // exponentials, sum, division, scaling) is longer than its arithmetic takes to issue. And
    // each group's scaling waits for the next group, whose exponentials it joins class by
    // class: a group's scaling depends on its whole sum, and as the group's own last step it
    // left the CPU little else to issue meanwhile (`softmax_rows` of ten classes, 128 rows in
    // L1, 20 alternated runs on the Zen 4 EPYC, TSC ticks a value, best and median: 2.00, 2.29
    // scaled at once; 1.76, 1.96 one group later).
    let whole = vectors / U * U;
    // The group waiting for its scaling: its first vector and 1 / its sums.
    let mut pending: Option<(usize, [S::f64s; U])> = None;
    let mut t = 0;
    while t < whole {
        // `max_f64s(v, m)` gives m where v is NaN, as `f64::max(m, v)` does.
        let mut m: [S::f64s; U] = std::array::from_fn(|u| heads[0][t + u]);
        // With `finite_scores`, each row's scores summed: NaN or ±∞ anywhere (or an overflow)
        // leaves the sum not finite, where the maximum passes over a NaN.
        let mut total: [S::f64s; U] = m;
        if finite_scores {
            for col in heads[1..].iter() {
                for u in 0..U {
                    m[u] = simd.max_f64s(col[t + u], m[u]);
                    total[u] = simd.add_f64s(total[u], col[t + u]);
                }
            }
        } else {
            for col in heads[1..].iter() {
                for u in 0..U {
                    m[u] = simd.max_f64s(col[t + u], m[u]);
                }
            }
        }
        // Nothing of the U vectors is written before they are all known to be finite. Plain
        // loops: with the check as a second instantiation of this kernel, the closures of
        // `iter().all` were compiled outside its target features (two-class predictions took
        // twice as long; BENCHMARKS.md, eighty-sixth round).
        let mut finite = true;
        for u in 0..U {
            finite &= simd.all_finite_f64s(m[u]);
            if finite_scores {
                finite &= simd.all_finite_f64s(total[u]);
            }
        }
        if !finite {
            break;
        }
        let mut s: [S::f64s; U] = std::array::from_fn(|_| simd.splat_f64s(0.0));
        for c in 0..k {
            for u in 0..U {
                // v − m ≤ 0 (m is the largest) or NaN: no clamp at 0 needed.
                let e = simd.exp_f64s::<false>(simd.sub_f64s(heads[c][t + u], m[u]));
                if write {
                    heads[c][t + u] = e;
                }
                s[u] = simd.add_f64s(s[u], e);
            }
            if let Some((at, by)) = &pending {
                scale_group::<S, U>(simd, heads, (outs, stream), (c, *at), by);
            }
        }
        if write {
            pending = Some((t, std::array::from_fn(|u| simd.div_f64s(one, s[u]))));
        }
        shift[t..t + U].copy_from_slice(&m);
        sums[t..t + U].copy_from_slice(&s);
        t += U;
    }
    if let Some((at, by)) = &pending {
        for c in 0..k {
            scale_group::<S, U>(simd, heads, (outs, stream), (c, *at), by);
        }
    }
    rows.start + t * S::F64_LANES
}

/// Column c's posteriors of the U vectors of rows from vector t, e · (1 / s) with `by` the
/// 1 / s: in place, or into `outs` (by non-temporal stores with `stream`).
#[inline(always)]
#[allow(unsafe_code)]
fn scale_group<S: VectorExp, const U: usize>(
    simd: S,
    heads: &mut [&mut [S::f64s]],
    (outs, stream): (&[*mut f64], bool),
    (c, t): (usize, usize),
    by: &[S::f64s; U],
) {
    for u in 0..U {
        let p = simd.mul_f64s(heads[c][t + u], by[u]);
        match outs.get(c) {
            // SAFETY: vector t + u of the rows is inside the `rows.len()` entries of each
            // `dst` column (t + u < vectors ≤ rows.len() / lanes).
            Some(&out) => unsafe { simd.put_f64s(out.add((t + u) * S::F64_LANES), p, stream) },
            None => heads[c][t + u] = p,
        }
    }
}

/// [`softmax_vectors`] of two columns, with one exponential per row: the larger score's is
/// exp(0) = 1 exactly, so with e = exp(smaller − larger) the sum is 1 + e (in either order), the
/// larger posterior 1 · (1 / (1 + e)) and the smaller e · (1 / (1 + e)): the same bits as the
/// general formula. Stops before the first group with a value that is not finite (NaN, ±∞),
/// which the general path takes; returns that row, counted from `start` (the first row's).
#[inline(always)]
#[allow(clippy::too_many_arguments, unsafe_code)]
fn two_class_vectors<S: VectorExp, const U: usize>(
    simd: S,
    [first, second]: [&mut [S::f64s]; 2],
    (outs, stream, write): (&[*mut f64], bool, bool),
    start: usize,
    shift: &mut [S::f64s],
    sums: &mut [S::f64s],
) -> usize {
    let vectors = first
        .len()
        .min(second.len())
        .min(shift.len())
        .min(sums.len());
    let one = simd.splat_f64s(1.0);
    let whole = vectors / U * U;
    let mut t = 0;
    while t < whole {
        let a: [S::f64s; U] = std::array::from_fn(|u| first[t + u]);
        let b: [S::f64s; U] = std::array::from_fn(|u| second[t + u]);
        if !(0..U).all(|u| simd.all_finite_f64s(a[u]) && simd.all_finite_f64s(b[u])) {
            return start + t * S::F64_LANES;
        }
        for u in 0..U {
            let (m, e) = two_class_exp(simd, a[u], b[u]);
            shift[t + u] = m;
            sums[t + u] = simd.add_f64s(one, e);
            if !write {
                continue;
            }
            let [p, q] = two_class_split(simd, a[u], b[u], e);
            if let &[o0, o1] = outs {
                let at = (t + u) * S::F64_LANES;
                // SAFETY: vector t + u of the rows is inside each `dst` column's `rows.len()`
                // entries (t + u < vectors).
                unsafe {
                    simd.put_f64s(o0.add(at), p, stream);
                    simd.put_f64s(o1.add(at), q, stream);
                }
            } else {
                first[t + u] = p;
                second[t + u] = q;
            }
        }
        t += U;
    }
    start + whole * S::F64_LANES
}

/// The first step of the two-class softmax on a vector of rows with finite scores a and b:
/// m, the larger, and e = exp(smaller − m). Finite values: the maximum and minimum are exact in
/// either order.
#[inline(always)]
fn two_class_exp<S: VectorExp>(simd: S, a: S::f64s, b: S::f64s) -> (S::f64s, S::f64s) {
    let m = simd.max_f64s(a, b);
    (
        m,
        simd.exp_f64s::<false>(simd.sub_f64s(simd.min_f64s(a, b), m)),
    )
}

/// The second step: with f = 1 / (1 + e), the larger score's posterior is f and the smaller's
/// e · f; returned in a's and b's order.
#[inline(always)]
fn two_class_split<S: VectorExp>(simd: S, a: S::f64s, b: S::f64s, e: S::f64s) -> [S::f64s; 2] {
    let one = simd.splat_f64s(1.0);
    let f = simd.div_f64s(one, simd.add_f64s(one, e));
    let small = simd.mul_f64s(e, f);
    let below = simd.less_than_f64s(a, b);
    [
        simd.select_f64s(below, small, f),
        simd.select_f64s(below, f, small),
    ]
}

/// [`softmax_rows`]' two-class posteriors of one vector of AVX-512 lanes, each row's two scores
/// finite (the caller checks): the same arithmetic, so the same bits, for a kernel elsewhere
/// that takes its own softmax in registers (`generative`'s posteriors straight from the scores).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn two_class_posteriors_v4(
    simd: pulp::x86::V4,
    a: <pulp::x86::V4 as pulp::Simd>::f64s,
    b: <pulp::x86::V4 as pulp::Simd>::f64s,
) -> [<pulp::x86::V4 as pulp::Simd>::f64s; 2] {
    let (_, e) = two_class_exp(simd, a, b);
    two_class_split(simd, a, b, e)
}

#[cfg(target_arch = "x86_64")]
impl VectorExp for pulp::x86::V4 {
    #[inline(always)]
    fn exp_f64s<const CLAMP_ABOVE: bool>(self, x: Self::f64s) -> Self::f64s {
        use core::arch::x86_64::__m512d;
        let f = self.avx512f;
        let splat = |v: f64| f._mm512_set1_pd(v);
        let fma = |a: __m512d, b: __m512d, c: __m512d| f._mm512_fmadd_pd(a, b, c);
        // `max` returns its second operand when either is NaN: NaN becomes −746, as in the
        // scalar `f64::max`.
        let x = f._mm512_max_pd(pulp::cast(x), splat(-746.0));
        let x = if CLAMP_ABOVE {
            f._mm512_min_pd(x, splat(0.0))
        } else {
            x
        };
        let t = fma(x, splat(K_SCALE), splat(SHIFT));
        let k = f._mm512_sub_pd(t, splat(SHIFT));
        let r = f._mm512_fnmadd_pd(k, splat(LN2_HI), x);
        let r = f._mm512_fnmadd_pd(k, splat(LN2_LO), r);
        let expm1: __m512d = pulp::cast(expm1_reduced(self, pulp::cast(r)));
        // The index's low four bits pick one of the 16 entries in the two registers.
        let low: __m512d = pulp::cast(pulp::f64x8(
            TABLE[0], TABLE[1], TABLE[2], TABLE[3], TABLE[4], TABLE[5], TABLE[6], TABLE[7],
        ));
        let high: __m512d = pulp::cast(pulp::f64x8(
            TABLE[8], TABLE[9], TABLE[10], TABLE[11], TABLE[12], TABLE[13], TABLE[14], TABLE[15],
        ));
        let entry = f._mm512_permutex2var_pd(low, f._mm512_castpd_si512(t), high);
        let y = fma(entry, expm1, entry);
        // `k` is k/16; `vscalefpd` multiplies by 2^⌊k/16⌋ with one rounding.
        pulp::cast(f._mm512_scalef_pd(y, k))
    }

    #[inline(always)]
    fn all_finite_f64s(self, x: Self::f64s) -> bool {
        use pulp::Simd;
        let finite = self.less_than_f64s(self.abs_f64s(x), self.splat_f64s(f64::INFINITY));
        finite.0 == u8::MAX
    }

    #[inline(always)]
    #[allow(unsafe_code)]
    unsafe fn stream_f64s(self, to: *mut f64, v: Self::f64s) {
        // SAFETY: the caller's (`to` 64-byte aligned); AVX-512F is enabled in this kernel's
        // context (`self` exists only where the CPU has it).
        unsafe { core::arch::x86_64::_mm512_stream_pd(to, pulp::cast(v)) };
    }
}

#[cfg(target_arch = "x86_64")]
impl VectorExp for pulp::x86::V3 {
    #[inline(always)]
    #[allow(unsafe_code)]
    fn exp_f64s<const CLAMP_ABOVE: bool>(self, x: Self::f64s) -> Self::f64s {
        use core::arch::x86_64::__m256d;
        let (f, i) = (self.avx, self.avx2);
        let splat = |v: f64| f._mm256_set1_pd(v);
        let fma = |a: __m256d, b: __m256d, c: __m256d| self.fma._mm256_fmadd_pd(a, b, c);
        let x = f._mm256_max_pd(pulp::cast(x), splat(-746.0));
        let x = if CLAMP_ABOVE {
            f._mm256_min_pd(x, splat(0.0))
        } else {
            x
        };
        let t = fma(x, splat(K_SCALE), splat(SHIFT));
        let k = f._mm256_sub_pd(t, splat(SHIFT));
        let r = self.fma._mm256_fnmadd_pd(k, splat(LN2_HI), x);
        let r = self.fma._mm256_fnmadd_pd(k, splat(LN2_LO), r);
        let expm1: __m256d = pulp::cast(expm1_reduced(self, pulp::cast(r)));
        let bits = f._mm256_castpd_si256(t);
        let index = i._mm256_and_si256(bits, f._mm256_set1_epi64x(15));
        // SAFETY: every index is in 0..16 (masked just above) and `TABLE` has 16 entries, so
        // each of the four loads is inside it; AVX2 is enabled (this runs inside `V3`).
        let entry = unsafe { i._mm256_i64gather_pd::<8>(TABLE.as_ptr(), index) };
        let y = fma(entry, expm1, entry);
        let q = i._mm256_and_si256(
            i._mm256_slli_epi64::<48>(
                i._mm256_sub_epi64(bits, f._mm256_set1_epi64x(SHIFT.to_bits() as i64)),
            ),
            f._mm256_set1_epi64x(EXPONENT_BITS as i64),
        );
        let scale = i._mm256_add_epi64(q, f._mm256_set1_epi64x(SCALE_BIAS as i64));
        let y = f._mm256_mul_pd(y, f._mm256_castsi256_pd(scale));
        pulp::cast(f._mm256_mul_pd(y, splat(TWO_TO_MINUS_UNDER)))
    }

    #[inline(always)]
    fn all_finite_f64s(self, x: Self::f64s) -> bool {
        use pulp::Simd;
        let finite = self.less_than_f64s(self.abs_f64s(x), self.splat_f64s(f64::INFINITY));
        self.avx._mm256_movemask_pd(pulp::cast(finite)) == 0b1111
    }

    #[inline(always)]
    #[allow(unsafe_code)]
    unsafe fn stream_f64s(self, to: *mut f64, v: Self::f64s) {
        // SAFETY: the caller's (`to` 32-byte aligned); AVX is enabled in this kernel's context
        // (`self` exists only where the CPU has it).
        unsafe { core::arch::x86_64::_mm256_stream_pd(to, pulp::cast(v)) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Arguments that cover the whole range: dense near 0 (most normalised log-probabilities),
    /// the subnormal results below about −708, the clamp's edges, the special values, and a
    /// pseudo-random spread.
    fn arguments() -> Vec<f64> {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut random = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        let spread: Vec<f64> = (0..200_000)
            .map(|i| if i % 2 == 0 { -750.0 } else { -5.0 } * random())
            .collect();
        (0..200_000)
            .map(|i| -(i as f64) * 1e-4)
            .chain((0..200_000).map(|i| -(i as f64) * 0.003_727))
            .chain(spread)
            .chain([
                -708.0,
                -708.4,
                -709.0,
                -720.5,
                -744.0,
                -745.1,
                -745.2,
                -746.0,
                -746.5,
                -800.0,
                -1e300,
                -f64::MIN_POSITIVE,
                -1e-300,
                -0.0,
                0.0,
                1e-300,
                3.0,
                f64::INFINITY,
                f64::NEG_INFINITY,
                f64::NAN,
            ])
            .collect()
    }

    #[test]
    fn exp_nonpositive_is_within_two_ulp_of_libm_and_exact_at_the_edges() {
        let ulp = |a: f64, b: f64| (a.to_bits() as i64 - b.to_bits() as i64).abs();
        let mut worst = 0;
        for x in arguments()
            .into_iter()
            .filter(|x| (-746.0..=0.0).contains(x))
        {
            let (got, want) = (exp_nonpositive(x), x.exp());
            assert!(got.is_finite() && got >= 0.0, "exp({x}) = {got}");
            worst = worst.max(ulp(got, want));
        }
        assert!(worst <= 2, "worst error {worst} ulp");
        for (x, want) in [
            (f64::NEG_INFINITY, 0.0),
            (-800.0, 0.0),
            (0.0, 1.0),
            (-0.0, 1.0),
            (2.0, 1.0),
            (f64::INFINITY, 1.0),
            (f64::NAN, 0.0),
        ] {
            assert_eq!(exp_nonpositive(x), want, "exp({x})");
        }
        // The smallest subnormal: e^−744.44 is about 4.94e-324 = 2^−1074.
        assert_eq!(exp_nonpositive(-744.44).to_bits(), 1);
    }

    /// Every kernel this machine can run, and the scalar one everywhere.
    /// A row's softmax by the scalar formula: its largest score (`f64::max` in order), the
    /// exponentials of the scores less it, and their sum in order.
    fn softmax_formula(row: &[f64]) -> (f64, Vec<f64>, f64) {
        let m = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v));
        let e: Vec<f64> = row.iter().map(|&v| exp_nonpositive(v - m)).collect();
        let s = e.iter().fold(0.0, |s, &e| s + e);
        (m, e, s)
    }

    /// One run of the softmax kernel of `isa` over the rows `rows` of a copy of `original` (one
    /// vector per column), in place or into `dst`: the columns after it, the rows' shifts and
    /// sums (from 7.0 each), and the row it returned.
    #[allow(clippy::type_complexity)]
    fn run_softmax(
        isa: Isa,
        original: &[Vec<f64>],
        rows: std::ops::Range<usize>,
        dst: Option<&[*mut f64]>,
        pass: Pass,
    ) -> (Vec<Vec<f64>>, Vec<f64>, Vec<f64>, usize) {
        let mut columns = original.to_vec();
        let mut slices: Vec<&mut [f64]> = columns.iter_mut().map(|c| c.as_mut_slice()).collect();
        let (mut shift, mut sums) = (vec![7.0; rows.len()], vec![7.0; rows.len()]);
        let mut done = rows.start;
        run_on(
            isa,
            Kernel::Softmax {
                columns: &mut slices,
                dst,
                rows,
                shift: &mut shift,
                sums: &mut sums,
                done: &mut done,
                pass,
            },
        );
        (columns, shift, sums, done)
    }

    /// Every kernel this machine can run (and the scalar one everywhere) against the scalar
    /// formula, bit for bit, on lengths that leave every tail length.
    #[test]
    fn every_kernel_gives_the_scalar_formulas_bits() {
        let isas = kernels();
        let args = arguments();
        let want: Vec<u64> = args.iter().map(|&x| exp_nonpositive(x).to_bits()).collect();
        for isa in isas {
            for len in [args.len(), 1, 7, 8, 9, 15, 17] {
                let mut got = args[..len].to_vec();
                run_on(isa, Kernel::InPlace { values: &mut got });
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(g.to_bits(), *w, "exp({}) on {len} values", args[i]);
                }
                // Shifted: values = x + s and shift = s with s exactly representable, so that
                // values − shift gives x back exactly (for finite x well inside the range).
                let shift: Vec<f64> = (0..len).map(|i| (i % 5) as f64 * 0.25).collect();
                let finite: Vec<f64> = args[..len]
                    .iter()
                    .map(|x| {
                        if x.is_finite() {
                            x.clamp(-700.0, 0.0)
                        } else {
                            -1.0
                        }
                    })
                    .collect();
                let mut values: Vec<f64> = finite.iter().zip(&shift).map(|(x, s)| x + s).collect();
                let mut sums = vec![0.5; len];
                let expected: Vec<f64> = values
                    .iter()
                    .zip(&shift)
                    .map(|(v, s)| exp_nonpositive(v - s))
                    .collect();
                run_on(
                    isa,
                    Kernel::ShiftedAccumulate {
                        values: &mut values,
                        shift: &shift,
                        sums: &mut sums,
                    },
                );
                for i in 0..len {
                    assert_eq!(
                        values[i].to_bits(),
                        expected[i].to_bits(),
                        "value {i} of {len}"
                    );
                    assert_eq!(
                        sums[i].to_bits(),
                        (0.5 + expected[i]).to_bits(),
                        "sum {i} of {len}"
                    );
                }
            }
        }
    }

    /// [`softmax_rows_of_finite_scores`]' kernels stop within the group of rows holding a NaN,
    /// +∞ or −∞ in any column, or (three columns or more) finite scores whose sum overflows,
    /// where [`softmax_rows`] stops only for a non-finite maximum (or, with two columns, any
    /// non-finite value); the formula's bits for every row before, nothing touched from there
    /// on.
    #[test]
    fn finite_score_kernels_stop_at_any_non_finite_score() {
        const MOST_AT_ONCE: usize = 32;
        let (first, end) = (3, 200);
        let args = arguments();
        for isa in kernels() {
            for k in [2, 3, 10] {
                // Where both stop without a bad row (the first case): after the last whole group.
                let mut full = end;
                for (bad_row, bad_value) in [
                    (None, 0.0),
                    (Some(first), f64::NAN),
                    (Some(77), f64::NAN),
                    (Some(77), f64::NEG_INFINITY),
                    (Some(150), f64::INFINITY),
                    (Some(end - 1), f64::NAN),
                    (Some(120), f64::MAX),
                ] {
                    // In column 1 a NaN or −∞ is one the maximum passes over (a NaN in column 0
                    // would start it); f64::MAX goes in every column (finite, the sum
                    // overflows).
                    let value = |i: usize, j: usize| match bad_row {
                        Some(b) if i == b && (j == 1 || bad_value == f64::MAX) => bad_value,
                        _ => args[(i * 7919 + j * 104_729) % 400_000] * 50.0 + 3.0 * j as f64,
                    };
                    let original: Vec<Vec<f64>> = (0..k)
                        .map(|j| (0..end).map(|i| value(i, j)).collect())
                        .collect();
                    let case = format!("K = {k}, row {bad_row:?} = {bad_value}");
                    let mut dones = [0; 2];
                    for (strict, done_out) in [false, true].into_iter().zip(dones.iter_mut()) {
                        let pass = if strict {
                            Pass::FiniteScores
                        } else {
                            Pass::Posteriors
                        };
                        let (columns, _, _, done) =
                            run_softmax(isa, &original, first..end, None, pass);
                        *done_out = done;
                        for i in first..end {
                            let row: Vec<f64> = (0..k).map(|j| original[j][i]).collect();
                            let (_, e, s) = softmax_formula(&row);
                            for j in 0..k {
                                let want = if i < done { e[j] * (1.0 / s) } else { row[j] };
                                let got = columns[j][i];
                                assert_eq!(
                                    got.to_bits(),
                                    want.to_bits(),
                                    "{case}, strict {strict}: row {i} col {j}"
                                );
                            }
                        }
                    }
                    let [loose, strict] = dones;
                    if matches!(isa, Isa::Scalar) {
                        assert_eq!((loose, strict), (first, first), "{case}");
                        continue;
                    }
                    match bad_row {
                        None => {
                            assert_eq!(strict, loose, "{case}");
                            full = loose;
                        }
                        // Two columns check their values, which are finite, not their sum.
                        Some(_) if k == 2 && bad_value == f64::MAX => {
                            assert_eq!(strict, loose, "{case}")
                        }
                        Some(b) => {
                            assert!(strict <= b && strict + MOST_AT_ONCE > b, "{case}: {strict}");
                            // Without the check, more than two columns pass over a NaN or −∞
                            // in a column that is not the largest (two stop at any).
                            if k > 2 && b < full && !(bad_value.is_infinite() && bad_value > 0.0) {
                                assert!(loose > b, "{case}: {loose}");
                            }
                        }
                    }
                }
            }
        }
    }

    /// [`softmax_rows`]' kernels: the scalar formula's bits for every row they do, nothing
    /// touched from the row they return on, which is at most a few vectors before the first row
    /// of a non-finite maximum (or before the end); the scalar kernel and more than
    /// [`SOFTMAX_MAX_COLUMNS`] columns do nothing. Rows start off a vector boundary.
    #[test]
    fn softmax_kernels_give_the_formulas_bits_up_to_where_they_stop() {
        let isas = kernels();
        // At most 4 vectors of 8 rows at a time.
        const MOST_AT_ONCE: usize = 32;
        let (first, end) = (5, 230);
        let args = arguments();
        for isa in isas {
            for k in [1, 2, 3, 10, SOFTMAX_MAX_COLUMNS, SOFTMAX_MAX_COLUMNS + 1] {
                for bad in [None, Some(first), Some(100), Some(end - 1)] {
                    let value = |i: usize, j: usize| match bad {
                        Some(b) if i == b => f64::NEG_INFINITY,
                        _ => args[(i * 7919 + j * 104_729) % 400_000] * 50.0 + j as f64,
                    };
                    let original: Vec<Vec<f64>> = (0..k)
                        .map(|j| (0..end).map(|i| value(i, j)).collect())
                        .collect();
                    let (columns, shift, sums, done) = if k <= SOFTMAX_MAX_COLUMNS {
                        run_softmax(isa, &original, first..end, None, Pass::Posteriors)
                    } else {
                        let mut columns = original.clone();
                        let mut slices: Vec<&mut [f64]> =
                            columns.iter_mut().map(|c| c.as_mut_slice()).collect();
                        let (mut shift, mut sums) =
                            (vec![7.0; end - first], vec![7.0; end - first]);
                        let done = softmax_rows(&mut slices, first..end, &mut shift, &mut sums);
                        (columns, shift, sums, done)
                    };
                    let case = format!("K = {k}, bad row {bad:?}");
                    let stop = bad.unwrap_or(end);
                    assert!(done <= stop, "{case}: done {done}");
                    match isa {
                        Isa::Scalar => assert_eq!(done, first, "{case}"),
                        _ if k > SOFTMAX_MAX_COLUMNS => assert_eq!(done, first, "{case}"),
                        _ => assert!(done + MOST_AT_ONCE > stop, "{case}: done {done}"),
                    }
                    for i in first..end {
                        let row: Vec<f64> = (0..k).map(|j| original[j][i]).collect();
                        let (m, e, s) = softmax_formula(&row);
                        for j in 0..k {
                            let want = if i < done { e[j] * (1.0 / s) } else { row[j] };
                            let got = columns[j][i];
                            assert_eq!(got.to_bits(), want.to_bits(), "{case}: row {i} col {j}");
                        }
                        if i < done {
                            assert_eq!(shift[i - first].to_bits(), m.to_bits(), "{case}: {i}");
                            assert_eq!(sums[i - first].to_bits(), s.to_bits(), "{case}: {i}");
                        }
                    }
                    // The rows it did are most of them.
                    if !matches!(isa, Isa::Scalar) && k <= SOFTMAX_MAX_COLUMNS && bad.is_none() {
                        assert!(done > first + 150, "{case}: done {done}");
                    }
                    if k > SOFTMAX_MAX_COLUMNS {
                        continue;
                    }
                    // Shifts and sums only (`softmax_sums`): the same rows done, the same
                    // shifts and sums, and the columns left as they were.
                    let (kept, shift3, sums3, done3) =
                        run_softmax(isa, &original, first..end, None, Pass::SumsOnly);
                    assert_eq!(done3, done, "{case}, sums only");
                    assert_eq!(kept, original, "{case}, sums only: the columns");
                    for i in first..done {
                        let at = i - first;
                        assert_eq!(shift3[at].to_bits(), shift[at].to_bits(), "{case}: {i}");
                        assert_eq!(sums3[at].to_bits(), sums[at].to_bits(), "{case}: {i}");
                    }
                    // Written to other columns (`softmax_rows_to`), on a 64-byte boundary
                    // (streamed) and one value past it (plain stores): the same rows done, the
                    // same posteriors, nothing else written.
                    let sentinel = 777.25;
                    for offset in [0usize, 1] {
                        let stride = end + 11;
                        let mut storage =
                            vec![std::mem::MaybeUninit::new(sentinel); k * stride + 16];
                        let skew = storage.as_ptr().align_offset(64) + offset;
                        let mut outs = [std::ptr::null_mut::<f64>(); SOFTMAX_MAX_COLUMNS];
                        for (j, o) in outs[..k].iter_mut().enumerate() {
                            *o = storage[skew + j * stride + first..]
                                .as_mut_ptr()
                                .cast::<f64>();
                        }
                        let (_, _, _, done2) = run_softmax(
                            isa,
                            &original,
                            first..end,
                            Some(&outs[..k]),
                            Pass::Posteriors,
                        );
                        store_fence();
                        let case = format!("{case}, to other columns at offset {offset}");
                        assert_eq!(done2, done, "{case}");
                        for j in 0..k {
                            let col = &storage[skew + j * stride..skew + (j + 1) * stride];
                            for (i, v) in col.iter().enumerate() {
                                // SAFETY: every slot started as the sentinel (initialised).
                                #[allow(unsafe_code)]
                                let got = unsafe { v.assume_init() };
                                let want = if (first..done).contains(&i) {
                                    columns[j][i]
                                } else {
                                    sentinel
                                };
                                assert_eq!(
                                    got.to_bits(),
                                    want.to_bits(),
                                    "{case}: row {i} col {j}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn the_table_and_polynomial_match_independent_values() {
        // 2^(j/16) against libm's `exp2` (within its 1 ulp).
        for (j, entry) in TABLE.iter().enumerate() {
            let libm = (j as f64 / 16.0).exp2();
            assert!(
                (entry.to_bits() as i64 - libm.to_bits() as i64).abs() <= 1,
                "entry {j}"
            );
        }
        // The reduced-range approximation against libm's `exp_m1` at the interval's ends and
        // inside it (relative to e^r, within a quarter of an ulp).
        let edge = std::f64::consts::LN_2 / 32.0;
        for i in -64..=64 {
            let r = edge * i as f64 / 64.0;
            let g = G[5]
                .mul_add(r, G[4])
                .mul_add(r * r, G[3].mul_add(r, G[2]))
                .mul_add(r * r, G[1].mul_add(r, G[0]));
            let ours = g.mul_add(r * r, r);
            assert!(
                (ours - r.exp_m1()).abs() <= 0.25 * f64::EPSILON * r.exp(),
                "r = {r}"
            );
        }
    }
}
