//! Decimal numbers at the start of a CSV cell, read as `fast-float2` reads them, faster for the
//! common shape.
//!
//! Why: number parsing was about 60% of the CPU time of loading a large CSV file, 28–32 ns per
//! number with `fast-float2` on the benchmark host (17–20 ns with the path below rounding one
//! number at a time; in a later, slower phase of the host, 22.5–22.8 ns that way and 14.4–14.8
//! ns rounding a row at a time).
//! On x86-64 with AVX-512 (VBMI2), a number of the plain shape `[-]digits[.digits]` with at most
//! 19 digits is read from one 32-byte load: masks find its end and its point, the digits are
//! compressed together and turned into an integer with multiply-adds, and that integer times a
//! power of ten is rounded with Eisel and Lemire's algorithm, ported from `fast-float2` (the
//! powers of five it needs, 5^-19 to 5^0, are computed at compile time). In a CSV row the
//! rounding waits until the row's numbers are all read, then runs on eight at a time with
//! vector instructions ([`RowSlots`]): done one number at a time it took about 10 of the
//! 22.5 ns, finding and gathering the digits 12.6–12.9. Every other shape (exponents, more
//! digits, `inf`, a `+` sign, the last bytes of a buffer) goes to `fast-float2` itself, so both
//! accept the same text, consume the same bytes and give the same bits: the result is
//! correctly rounded either way.
//!
//! On x86-64 with AVX2 but not those AVX-512 instructions (AMD before Zen 4, many Intel
//! laptops), a second reader takes the same shapes from the same 32-byte load without byte
//! compression: the point is removed by a one-byte shift and a blend, the digits are moved to
//! end at byte 24 by two in-lane shuffles, and from there the integer is made as above; a row
//! is rounded four numbers at a time. On the AMD EPYC (Zen 3) host it loaded the benchmark's
//! 1,000,000 × 16 file in about 0.18 s where `fast-float2` took 0.29 s.
#![allow(unsafe_code)]

/// Reads the number at the start of a byte slice: its value and how many bytes it took, or
/// `None` when no number starts there. Every reader gives `fast_float2::parse_partial`'s answer.
pub trait NumberReader: Copy {
    fn read(self, bytes: &[u8]) -> Option<(f64, usize)>;

    /// Reads the number at the start of `bytes` into slot `j` of `slots` (a row's numbers):
    /// how many bytes it took, or `None` when no finite number starts there. The value is
    /// [`read`](Self::read)'s, but may only be final after [`finish`](Self::finish).
    #[inline(always)]
    fn read_slot(self, bytes: &[u8], slots: &mut RowSlots, j: usize) -> Option<usize> {
        let (v, n) = self.read(bytes)?;
        if !v.is_finite() {
            return None;
        }
        slots.bits[j] = v.to_bits();
        slots.tags[j] = VALUE;
        Some(n)
    }

    /// Writes the values of slots `0..out.len()` to `out`.
    #[inline(always)]
    fn finish(self, slots: &RowSlots, out: &mut [f64]) {
        for (o, &b) in out.iter_mut().zip(&slots.bits) {
            *o = f64::from_bits(b);
        }
    }
}

/// A row's numbers between [`NumberReader::read_slot`] and [`NumberReader::finish`]: each slot
/// holds a value's bits (tag [`VALUE`]) or, from the AVX-512 reader, a decimal still to be
/// rounded (its digits as an integer; tag: digits after the point, | 0x80 when negative), so
/// that a whole row is rounded at once with vector instructions.
#[derive(Debug, Clone)]
pub struct RowSlots {
    bits: Vec<u64>,
    tags: Vec<u8>,
    /// The AVX2 reader's leading zeros of each decimal's digits (AVX2 cannot count them in a
    /// vector).
    leading_zeros: Vec<u8>,
}

/// Tag of a slot that holds a value's bits.
const VALUE: u8 = 0x40;

impl RowSlots {
    /// Slots for rows of `d` numbers (rounded up to whole vectors of eight).
    pub fn new(d: usize) -> Self {
        let len = d.div_ceil(8) * 8;
        Self {
            bits: vec![0; len],
            tags: vec![VALUE; len],
            leading_zeros: vec![0; len],
        }
    }
}

/// Work that reads numbers, run by [`with_fastest_reader`] with the fastest reader this CPU has.
pub trait ReadsNumbers {
    type Output;
    fn run<N: NumberReader>(self, numbers: N) -> Self::Output;
}

/// Runs `job` with the fastest [`NumberReader`] of this CPU. With the AVX-512 reader the job is
/// compiled for those instructions as a whole, so that the reader is inlined into its loops and
/// the CPU is asked once per job rather than once per number.
pub fn with_fastest_reader<J: ReadsNumbers>(job: J) -> J::Output {
    #[cfg(target_arch = "x86_64")]
    if simd::available() {
        // SAFETY: the CPU has the features `simd::run` is compiled for (checked just above).
        return unsafe { simd::run(job) };
    }
    #[cfg(target_arch = "x86_64")]
    if simd::available_avx2() {
        // SAFETY: the CPU has the features `simd::run_avx2` is compiled for (checked just above).
        return unsafe { simd::run_avx2(job) };
    }
    job.run(Portable)
}

/// `fast-float2`'s reader: on every CPU, and for every shape the fast path leaves alone.
#[derive(Debug, Clone, Copy)]
pub struct Portable;

impl NumberReader for Portable {
    #[inline]
    fn read(self, bytes: &[u8]) -> Option<(f64, usize)> {
        fast_float2::parse_partial::<f64, _>(bytes).ok()
    }
}

#[cfg(target_arch = "x86_64")]
mod simd {
    use std::arch::x86_64::*;

    use super::{RowSlots, VALUE};

    /// Bytes read at once; shorter inputs take the portable path.
    pub const WINDOW: usize = 32;

    /// How far ahead of the number being read the input is asked for. The hardware prefetcher
    /// alone left a quarter of the reader's time waiting for the input at the start of a
    /// number; 1, 2, 4 and 8 KiB ahead gave the same times, within noise.
    const PREFETCH_AHEAD: usize = 2048;

    /// Most digits whose integer fits a `u64` whatever they are.
    const MAX_DIGITS: u32 = 19;

    /// Whether this CPU can run [`parse`] (asked once).
    pub fn available() -> bool {
        static AVAILABLE: std::sync::LazyLock<bool> = std::sync::LazyLock::new(|| {
            is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512cd")
                && is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("avx512vbmi")
                && is_x86_feature_detected!("avx512vbmi2")
                && is_x86_feature_detected!("bmi1")
                && is_x86_feature_detected!("lzcnt")
                && is_x86_feature_detected!("popcnt")
                && is_x86_feature_detected!("bmi2")
        });
        *AVAILABLE
    }

    /// The AVX-512 reader; only [`run`] makes one, after [`available`].
    #[derive(Debug, Clone, Copy)]
    pub struct Avx512(());

    impl super::NumberReader for Avx512 {
        #[inline(always)]
        fn read(self, bytes: &[u8]) -> Option<(f64, usize)> {
            if bytes.len() >= WINDOW {
                // SAFETY: an `Avx512` exists only inside `run`, on a CPU that has the features.
                if let Some((w, fraction_digits, negative, end)) = unsafe { decode(bytes) } {
                    return Some((to_f64(w, fraction_digits, negative), end));
                }
            }
            super::Portable.read(bytes)
        }

        #[inline(always)]
        fn read_slot(self, bytes: &[u8], slots: &mut RowSlots, j: usize) -> Option<usize> {
            if bytes.len() >= WINDOW {
                // SAFETY: as in `read`.
                if let Some((w, fraction_digits, negative, end)) = unsafe { decode(bytes) } {
                    slots.bits[j] = w;
                    slots.tags[j] = fraction_digits as u8 | u8::from(negative) << 7;
                    return Some(end);
                }
            }
            super::Portable.read_slot(bytes, slots, j)
        }

        #[inline(always)]
        fn finish(self, slots: &RowSlots, out: &mut [f64]) {
            for (k, out) in out.chunks_mut(8).enumerate() {
                let at = 8 * k;
                // SAFETY: as in `read`; the slots are padded to whole vectors of eight.
                unsafe { round8(&slots.bits[at..at + 8], &slots.tags[at..at + 8], out) };
            }
        }
    }

    /// Runs `job` with the AVX-512 reader, compiled for those instructions.
    ///
    /// # Safety
    /// The CPU must have the enabled features ([`available`]).
    #[target_feature(
        enable = "avx512f,avx512bw,avx512vl,avx512cd,avx512vbmi,avx512vbmi2,bmi1,bmi2,lzcnt,popcnt"
    )]
    pub unsafe fn run<J: super::ReadsNumbers>(job: J) -> J::Output {
        job.run(Avx512(()))
    }

    /// Whether this CPU can run [`decode_avx2`] (asked once).
    pub fn available_avx2() -> bool {
        static AVAILABLE: std::sync::LazyLock<bool> = std::sync::LazyLock::new(|| {
            is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("bmi1")
                && is_x86_feature_detected!("lzcnt")
                && is_x86_feature_detected!("popcnt")
        });
        *AVAILABLE
    }

    /// The AVX2 reader (x86-64 CPUs without the AVX-512 reader's instructions, such as AMD's
    /// before Zen 4); only [`run_avx2`] makes one, after [`available_avx2`].
    #[derive(Debug, Clone, Copy)]
    pub struct Avx2(());

    impl super::NumberReader for Avx2 {
        #[inline(always)]
        fn read(self, bytes: &[u8]) -> Option<(f64, usize)> {
            if bytes.len() >= WINDOW {
                // SAFETY: an `Avx2` exists only inside `run_avx2`, on a CPU with the features.
                if let Some((w, fraction_digits, negative, end)) = unsafe { decode_avx2(bytes) } {
                    return Some((to_f64(w, fraction_digits, negative), end));
                }
            }
            super::Portable.read(bytes)
        }

        #[inline(always)]
        fn read_slot(self, bytes: &[u8], slots: &mut RowSlots, j: usize) -> Option<usize> {
            if bytes.len() >= WINDOW {
                // SAFETY: as in `read`.
                if let Some((w, fraction_digits, negative, end)) = unsafe { decode_avx2(bytes) } {
                    slots.bits[j] = w;
                    slots.tags[j] = fraction_digits as u8 | u8::from(negative) << 7;
                    slots.leading_zeros[j] = w.leading_zeros() as u8;
                    return Some(end);
                }
            }
            super::Portable.read_slot(bytes, slots, j)
        }

        #[inline(always)]
        fn finish(self, slots: &RowSlots, out: &mut [f64]) {
            for (k, out) in out.chunks_mut(4).enumerate() {
                let at = 4 * k;
                let slots = (
                    &slots.bits[at..at + 4],
                    &slots.tags[at..at + 4],
                    &slots.leading_zeros[at..at + 4],
                );
                // SAFETY: as in `read`; the slots are padded to whole vectors of eight.
                unsafe { round4(slots, out) };
            }
        }
    }

    /// Runs `job` with the AVX2 reader, compiled for those instructions.
    ///
    /// # Safety
    /// The CPU must have the enabled features ([`available_avx2`]).
    #[target_feature(enable = "avx2,bmi1,lzcnt,popcnt")]
    pub unsafe fn run_avx2<J: super::ReadsNumbers>(job: J) -> J::Output {
        job.run(Avx2(()))
    }

    /// `table[index]` in each lane (indices below 24), for AVX2.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn lookup4(table: &[u64; 24], index: __m256i) -> __m256i {
        // SAFETY: every index is below 24 (the callers' fraction digits are at most 19).
        unsafe { _mm256_i64gather_epi64::<8>(table.as_ptr().cast(), index) }
    }

    /// [`round8`] on four slots with AVX2, into the first `out.len()` (at most 4) of them:
    /// `slots` are their bits, tags and leading zeros. AVX2 has no 64-bit unsigned comparison,
    /// so each is a test of high bits that the operands' ranges make equivalent.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(super) fn round4(slots: (&[u64], &[u8], &[u8]), out: &mut [f64]) {
        let (bits, tags, leading_zeros) = slots;
        assert!(bits.len() >= 4 && tags.len() >= 4 && leading_zeros.len() >= 4);
        assert!(out.len() <= 4);
        // SAFETY: four u64 and four bytes of each, inside the slices (checked above).
        let (w, tag, lz) = unsafe {
            (
                _mm256_loadu_si256(bits.as_ptr().cast()),
                _mm256_cvtepu8_epi64(_mm_cvtsi32_si128(i32::from_le_bytes(
                    tags[..4].try_into().unwrap_or_default(),
                ))),
                _mm256_cvtepu8_epi64(_mm_cvtsi32_si128(i32::from_le_bytes(
                    leading_zeros[..4].try_into().unwrap_or_default(),
                ))),
            )
        };
        let zero = _mm256_setzero_si256();
        let one = _mm256_set1_epi64x(1);
        let is_value = _mm256_cmpeq_epi64(
            _mm256_and_si256(tag, _mm256_set1_epi64x(i64::from(VALUE))),
            _mm256_set1_epi64x(i64::from(VALUE)),
        );
        let digits = _mm256_and_si256(tag, _mm256_set1_epi64x(0x1F));
        let sign = _mm256_slli_epi64::<63>(_mm256_srli_epi64::<7>(tag));
        let is_zero = _mm256_cmpeq_epi64(w, zero);
        let w = _mm256_sllv_epi64(w, lz);
        // The 128-bit product of w and the power's high word, from four 32 × 32-bit products.
        let five = lookup4(&HIGH_BY_FRACTION_DIGITS, digits);
        let low32 = _mm256_set1_epi64x(0xFFFF_FFFF);
        let (w_hi, five_hi) = (_mm256_srli_epi64::<32>(w), _mm256_srli_epi64::<32>(five));
        let ll = _mm256_mul_epu32(w, five);
        let lh = _mm256_mul_epu32(w, five_hi);
        let hl = _mm256_mul_epu32(w_hi, five);
        let hh = _mm256_mul_epu32(w_hi, five_hi);
        let mid = _mm256_add_epi64(
            _mm256_srli_epi64::<32>(ll),
            _mm256_add_epi64(_mm256_and_si256(lh, low32), _mm256_and_si256(hl, low32)),
        );
        let lo = _mm256_or_si256(_mm256_and_si256(ll, low32), _mm256_slli_epi64::<32>(mid));
        let hi = _mm256_add_epi64(
            _mm256_add_epi64(hh, _mm256_srli_epi64::<32>(lh)),
            _mm256_add_epi64(_mm256_srli_epi64::<32>(hl), _mm256_srli_epi64::<32>(mid)),
        );
        let precision = _mm256_set1_epi64x(0x1FF);
        let ambiguous = _mm256_cmpeq_epi64(_mm256_and_si256(hi, precision), precision);
        let upper = _mm256_srli_epi64::<63>(hi);
        let shift = _mm256_add_epi64(upper, _mm256_set1_epi64x(9));
        let mut mantissa = _mm256_srlv_epi64(hi, shift);
        let mut power2 = _mm256_sub_epi64(
            _mm256_add_epi64(lookup4(&EXPONENT_BY_FRACTION_DIGITS, digits), upper),
            lz,
        );
        // An exact halfway case rounds to even (only possible with at most 4 fraction digits):
        // lo ≤ 1 is lo >> 1 = 0; digits ≤ 4 a signed comparison (digits < 32).
        let halfway = _mm256_and_si256(
            _mm256_and_si256(
                _mm256_cmpeq_epi64(_mm256_srli_epi64::<1>(lo), zero),
                _mm256_cmpgt_epi64(_mm256_set1_epi64x(5), digits),
            ),
            _mm256_and_si256(
                _mm256_cmpeq_epi64(_mm256_and_si256(mantissa, _mm256_set1_epi64x(3)), one),
                _mm256_cmpeq_epi64(_mm256_sllv_epi64(mantissa, shift), hi),
            ),
        );
        mantissa = _mm256_andnot_si256(_mm256_and_si256(halfway, one), mantissa);
        mantissa = _mm256_add_epi64(mantissa, _mm256_and_si256(mantissa, one));
        mantissa = _mm256_srli_epi64::<1>(mantissa);
        // mantissa ≥ 2^53 (it is below 2^54) is its bit 53.
        let carried = _mm256_cmpeq_epi64(_mm256_srli_epi64::<53>(mantissa), one);
        mantissa = _mm256_blendv_epi8(mantissa, _mm256_set1_epi64x(1 << 52), carried);
        power2 = _mm256_sub_epi64(power2, carried);
        mantissa = _mm256_andnot_si256(_mm256_set1_epi64x(1 << 52), mantissa);
        let mut result = _mm256_or_si256(
            _mm256_or_si256(sign, _mm256_slli_epi64::<52>(power2)),
            mantissa,
        );
        result = _mm256_blendv_epi8(result, sign, is_zero);
        // SAFETY: reloading the slots' own bits (the `VALUE` lanes), inside `bits`.
        let values = unsafe { _mm256_loadu_si256(bits.as_ptr().cast()) };
        result = _mm256_blendv_epi8(result, values, is_value);
        let mut lanes = [0.0; 4];
        // SAFETY: four f64 into a four-element array.
        unsafe { _mm256_storeu_pd(lanes.as_mut_ptr(), _mm256_castsi256_pd(result)) };
        out.copy_from_slice(&lanes[..out.len()]);
        let redo = _mm256_andnot_si256(_mm256_or_si256(is_value, is_zero), ambiguous);
        let mut redo =
            _mm256_movemask_pd(_mm256_castsi256_pd(redo)) as u32 & ((1 << out.len()) - 1);
        while redo != 0 {
            let i = redo.trailing_zeros() as usize;
            let t = tags[i];
            out[i] = to_f64(bits[i], u32::from(t & 0x1F), t & 0x80 != 0);
            redo &= redo - 1;
        }
    }

    /// For [`decode_avx2`], moving a vector's bytes up by `k` (row k): byte i takes byte i − k,
    /// or zero when i < k. AVX2's byte shuffle works within each 16-byte lane, so it is two
    /// shuffles: of the vector itself (`.0`, sources in the same lane) and of the vector with
    /// its low lane moved to the high one and zeros below (`.1`, sources in the lane below).
    /// A control byte with its high bit set gives zero.
    static SHIFT_UP: [([u8; 32], [u8; 32]); 32] = {
        let mut table = [([0x80u8; 32], [0x80u8; 32]); 32];
        let mut k = 0;
        while k < 32 {
            let mut i = 0;
            while i < 32 {
                if i >= k {
                    let source = i - k;
                    if source / 16 == i / 16 {
                        table[k].0[i] = (source % 16) as u8;
                    } else {
                        table[k].1[i] = (source % 16) as u8;
                    }
                }
                i += 1;
            }
            k += 1;
        }
        table
    };

    /// 32 bytes of ones, then 32 of zeros: [`first_bytes`] reads its masks from here.
    static ONES_THEN_ZEROS: [u8; 64] = {
        let mut table = [0u8; 64];
        let mut i = 0;
        while i < 32 {
            table[i] = 0xFF;
            i += 1;
        }
        table
    };

    /// A mask of the first `k` bytes (k ≤ 32) of a vector, as one load.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn first_bytes(k: u32) -> __m256i {
        let k = (k as usize).min(32);
        // SAFETY: bytes 32 − k .. 64 − k lie inside the 64-byte table.
        unsafe { _mm256_loadu_si256(ONES_THEN_ZEROS.as_ptr().add(32 - k).cast()) }
    }

    /// [`decode`]'s answer with AVX2 alone, which has no byte compression or cross-lane byte
    /// permutation: the point is taken out by moving the digits before it one byte up (a
    /// one-byte shift across the two lanes and a blend), and the digits are moved up to end at
    /// byte 24 by two in-lane shuffles ([`SHIFT_UP`]); from there on as in `decode`.
    ///
    /// # Safety
    /// The CPU must have the enabled features ([`available_avx2`]).
    #[target_feature(enable = "avx2,bmi1,lzcnt,popcnt")]
    #[inline]
    pub unsafe fn decode_avx2(bytes: &[u8]) -> Option<(u64, u32, bool, usize)> {
        debug_assert!(bytes.len() >= WINDOW);
        // SAFETY: `bytes` has at least WINDOW = 32 readable bytes (checked by the caller).
        let v = unsafe { _mm256_loadu_si256(bytes.as_ptr().cast()) };
        // Never faults, whatever the address.
        _mm_prefetch::<_MM_HINT_T0>(bytes.as_ptr().cast::<i8>().wrapping_add(PREFETCH_AHEAD));
        let digits = _mm256_sub_epi8(v, _mm256_set1_epi8(b'0' as i8));
        // A byte is a digit when, less b'0' (unsigned), it is at most 9.
        let nine = _mm256_set1_epi8(9);
        let is_digit =
            _mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_min_epu8(digits, nine), digits)) as u32;
        let is_dot =
            _mm256_movemask_epi8(_mm256_cmpeq_epi8(v, _mm256_set1_epi8(b'.' as i8))) as u32;
        // The shape checks of `decode`, on the same masks.
        let negative = bytes[0] == b'-';
        let start = u32::from(negative);
        let end = (!((is_digit | is_dot) >> start)).trailing_zeros() + start;
        if end as usize >= WINDOW {
            return None;
        }
        let body = (1u32 << end) - (1u32 << start);
        let dot = is_dot & body;
        let n = (is_digit & body).count_ones();
        let plain_point =
            dot == 0 || (dot & (dot - 1) == 0 && dot & (1 << start | 1 << (end - 1)) == 0);
        let after = bytes[end as usize] | 0x20;
        if !plain_point || n == 0 || n > MAX_DIGITS || after == b'e' {
            return None;
        }
        let (fraction_digits, moved) = if dot == 0 {
            (0, 0)
        } else {
            let at = dot.trailing_zeros();
            (end - 1 - at, at + 1)
        };
        // Bytes 0..moved (the integer part and the point) take the byte below them; the digits
        // are then the `n` bytes before `end`.
        let below = _mm256_permute2x128_si256::<0x08>(digits, digits);
        let shifted = _mm256_alignr_epi8::<15>(digits, below);
        let joined = _mm256_blendv_epi8(digits, shifted, first_bytes(moved));
        // Moved up by 24 − end bytes (at most 21 bytes are taken, so end ≤ 21), they end at
        // byte 24, and the bytes before them are cleared, so that bytes 0..8, 8..16 and 16..24
        // are three eight-digit groups.
        let up = 24 - end as usize;
        debug_assert!(up < 32);
        let (same_lane, from_below) = &SHIFT_UP[up & 31];
        let joined_below = _mm256_permute2x128_si256::<0x08>(joined, joined);
        // SAFETY: two 32-byte rows of the table.
        let (same_lane, from_below) = unsafe {
            (
                _mm256_loadu_si256(same_lane.as_ptr().cast()),
                _mm256_loadu_si256(from_below.as_ptr().cast()),
            )
        };
        let aligned = _mm256_or_si256(
            _mm256_shuffle_epi8(joined, same_lane),
            _mm256_shuffle_epi8(joined_below, from_below),
        );
        let aligned = _mm256_andnot_si256(first_bytes(24 - n), aligned);
        // Pairs (10·a + b), then groups of four (100·ab + cd), then of eight (10000·abcd + efgh).
        let pairs = _mm256_maddubs_epi16(aligned, _mm256_set1_epi16(0x010A));
        let fours = _mm256_madd_epi16(pairs, _mm256_set1_epi32(0x0001_0064));
        let fours16 = _mm256_packus_epi32(fours, fours);
        let eights = _mm256_madd_epi16(fours16, _mm256_set1_epi32(0x0001_2710));
        let first_two = _mm_cvtsi128_si64(_mm256_castsi256_si128(eights)) as u64;
        let third = _mm_cvtsi128_si32(_mm256_extracti128_si256::<1>(eights)) as u32;
        let w = (first_two & 0xFFFF_FFFF) * 10_000_000_000_000_000
            + (first_two >> 32) * 100_000_000
            + u64::from(third);
        Some((w, fraction_digits, negative, end as usize))
    }

    /// The fast path of [`Avx512`]: a number of the plain shape at the start of `bytes` (which
    /// holds at least [`WINDOW`] bytes) as (its digits as an integer w, digits after the point,
    /// negative, bytes taken); its value is w · 10^−(digits after the point), negated when
    /// negative ([`to_f64`], [`round8`]). `None` for any other start.
    ///
    /// # Safety
    /// The CPU must have the enabled features ([`available`]).
    #[target_feature(
        enable = "avx512f,avx512bw,avx512vl,avx512cd,avx512vbmi,avx512vbmi2,bmi1,bmi2,lzcnt,popcnt"
    )]
    #[inline]
    pub unsafe fn decode(bytes: &[u8]) -> Option<(u64, u32, bool, usize)> {
        debug_assert!(bytes.len() >= WINDOW);
        // SAFETY: `bytes` has at least WINDOW = 32 readable bytes (checked by the caller).
        let v = unsafe { _mm256_loadu_si256(bytes.as_ptr().cast()) };
        // Never faults, whatever the address.
        _mm_prefetch::<_MM_HINT_T0>(bytes.as_ptr().cast::<i8>().wrapping_add(PREFETCH_AHEAD));
        let digits = _mm256_sub_epi8(v, _mm256_set1_epi8(b'0' as i8));
        let is_digit = _mm256_cmple_epu8_mask(digits, _mm256_set1_epi8(9));
        let is_dot = _mm256_cmpeq_epi8_mask(v, _mm256_set1_epi8(b'.' as i8));
        let negative = bytes[0] == b'-';
        let start = u32::from(negative);
        // The body is the run of digits and points after the sign; it ends at the first other
        // byte, which must lie inside the window.
        let end = (!((is_digit | is_dot) >> start)).trailing_zeros() + start;
        if end as usize >= WINDOW {
            return None;
        }
        let body = (1u32 << end) - (1u32 << start);
        let dot = is_dot & body;
        let digit_bits = is_digit & body;
        let n = digit_bits.count_ones();
        // One point at most, with a digit on each side; 1 to 19 digits; no exponent after.
        let plain_point =
            dot == 0 || (dot & (dot - 1) == 0 && dot & (1 << start | 1 << (end - 1)) == 0);
        let after = bytes[end as usize] | 0x20;
        if !plain_point || n == 0 || n > MAX_DIGITS || after == b'e' {
            return None;
        }
        let fraction_digits = if dot == 0 {
            0
        } else {
            end - 1 - dot.trailing_zeros()
        };
        // The digits side by side, then right-aligned at byte 24 (zeros before them), so that
        // bytes 0..8, 8..16 and 16..24 are three eight-digit groups.
        let packed = _mm256_maskz_compress_epi8(digit_bits, digits);
        let index = _mm256_add_epi8(
            _mm256_setr_epi8(
                0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22,
                23, 24, 25, 26, 27, 28, 29, 30, 31,
            ),
            _mm256_set1_epi8(n as i8 - 24),
        );
        let keep = ((1u32 << 24) - 1) & !((1u32 << (24 - n)) - 1);
        let aligned = _mm256_maskz_permutexvar_epi8(keep, index, packed);
        // Pairs (10·a + b), then groups of four (100·ab + cd), then of eight (10000·abcd + efgh).
        let pairs = _mm256_maddubs_epi16(aligned, _mm256_set1_epi16(0x010A));
        let fours = _mm256_madd_epi16(pairs, _mm256_set1_epi32(0x0001_0064));
        let fours16 = _mm256_packus_epi32(fours, fours);
        let eights = _mm256_madd_epi16(fours16, _mm256_set1_epi32(0x0001_2710));
        let first_two = _mm_cvtsi128_si64(_mm256_castsi256_si128(eights)) as u64;
        let third = _mm_cvtsi128_si32(_mm256_extracti128_si256::<1>(eights)) as u32;
        let w = (first_two & 0xFFFF_FFFF) * 10_000_000_000_000_000
            + (first_two >> 32) * 100_000_000
            + u64::from(third);
        Some((w, fraction_digits, negative, end as usize))
    }

    /// The high words of [`POWERS_OF_FIVE`] by digits after the point (5^−k at index k),
    /// padded to three vectors.
    const HIGH_BY_FRACTION_DIGITS: [u64; 24] = {
        let mut table = [0u64; 24];
        let mut k = 0;
        while k < 20 {
            table[k] = POWERS_OF_FIVE[19 - k].0;
            k += 1;
        }
        table
    };

    /// The part of [`to_f64`]'s biased binary exponent that depends only on the digits after
    /// the point k (q = −k): floor(q · 217706 / 2^16) + 63 + 1023.
    const EXPONENT_BY_FRACTION_DIGITS: [u64; 24] = {
        let mut table = [0u64; 24];
        let mut k = 0;
        while k < 20 {
            let q = -(k as i32);
            table[k] = ((q.wrapping_mul(152_170 + 65_536) >> 16) + 63 + 1023) as u64;
            k += 1;
        }
        table
    };

    /// `table[index]` in each lane (indices below 24).
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn lookup(table: &[u64; 24], index: __m512i) -> __m512i {
        // SAFETY: three loads of eight u64 inside the 24-entry table.
        let (t0, t1, t2) = unsafe {
            (
                _mm512_loadu_si512(table.as_ptr().cast()),
                _mm512_loadu_si512(table.as_ptr().add(8).cast()),
                _mm512_loadu_si512(table.as_ptr().add(16).cast()),
            )
        };
        let low = _mm512_permutex2var_epi64(t0, index, t1);
        let high = _mm512_permutexvar_epi64(index, t2);
        let is_high = _mm512_cmpge_epu64_mask(index, _mm512_set1_epi64(16));
        _mm512_mask_blend_epi64(is_high, low, high)
    }

    /// [`to_f64`] on eight slots at once (slots tagged [`VALUE`] are copied as they are), into
    /// the first `out.len()` (at most 8) of them. The same steps as `to_f64`, lane by lane; a
    /// lane whose first product is ambiguous (its low nine bits all ones, about 1 in 512)
    /// needs the second product and is redone by `to_f64` itself.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512cd")]
    #[inline]
    pub(super) fn round8(bits: &[u64], tags: &[u8], out: &mut [f64]) {
        assert!(bits.len() >= 8 && tags.len() >= 8 && out.len() <= 8);
        let keep = ((1u16 << out.len()) - 1) as __mmask8;
        // SAFETY: eight u64 and eight bytes, inside the slices (checked above).
        let (w, tag) = unsafe {
            (
                _mm512_loadu_si512(bits.as_ptr().cast()),
                _mm512_cvtepu8_epi64(_mm_loadl_epi64(tags.as_ptr().cast())),
            )
        };
        let one = _mm512_set1_epi64(1);
        let is_value = _mm512_test_epi64_mask(tag, _mm512_set1_epi64(i64::from(VALUE)));
        let digits = _mm512_and_si512(tag, _mm512_set1_epi64(0x1F));
        let sign = _mm512_slli_epi64::<63>(_mm512_srli_epi64::<7>(tag));
        let is_zero = _mm512_cmpeq_epu64_mask(w, _mm512_setzero_si512());
        let lz = _mm512_lzcnt_epi64(w);
        let w = _mm512_sllv_epi64(w, lz);
        // The 128-bit product of w and the power's high word, from four 32 × 32-bit products.
        let five = lookup(&HIGH_BY_FRACTION_DIGITS, digits);
        let low32 = _mm512_set1_epi64(0xFFFF_FFFF);
        let (w_hi, five_hi) = (_mm512_srli_epi64::<32>(w), _mm512_srli_epi64::<32>(five));
        let ll = _mm512_mul_epu32(w, five);
        let lh = _mm512_mul_epu32(w, five_hi);
        let hl = _mm512_mul_epu32(w_hi, five);
        let hh = _mm512_mul_epu32(w_hi, five_hi);
        let mid = _mm512_add_epi64(
            _mm512_srli_epi64::<32>(ll),
            _mm512_add_epi64(_mm512_and_si512(lh, low32), _mm512_and_si512(hl, low32)),
        );
        let lo = _mm512_or_si512(_mm512_and_si512(ll, low32), _mm512_slli_epi64::<32>(mid));
        let hi = _mm512_add_epi64(
            _mm512_add_epi64(hh, _mm512_srli_epi64::<32>(lh)),
            _mm512_add_epi64(_mm512_srli_epi64::<32>(hl), _mm512_srli_epi64::<32>(mid)),
        );
        let precision = _mm512_set1_epi64(0x1FF);
        let ambiguous = _mm512_cmpeq_epu64_mask(_mm512_and_si512(hi, precision), precision);
        let upper = _mm512_srli_epi64::<63>(hi);
        let shift = _mm512_add_epi64(upper, _mm512_set1_epi64(9));
        let mut mantissa = _mm512_srlv_epi64(hi, shift);
        let mut power2 = _mm512_sub_epi64(
            _mm512_add_epi64(lookup(&EXPONENT_BY_FRACTION_DIGITS, digits), upper),
            lz,
        );
        // An exact halfway case rounds to even (only possible with at most 4 fraction digits).
        let halfway = _mm512_cmple_epu64_mask(lo, one)
            & _mm512_cmple_epu64_mask(digits, _mm512_set1_epi64(4))
            & _mm512_cmpeq_epu64_mask(_mm512_and_si512(mantissa, _mm512_set1_epi64(3)), one)
            & _mm512_cmpeq_epu64_mask(_mm512_sllv_epi64(mantissa, shift), hi);
        mantissa = _mm512_mask_andnot_epi64(mantissa, halfway, one, mantissa);
        mantissa = _mm512_add_epi64(mantissa, _mm512_and_si512(mantissa, one));
        mantissa = _mm512_srli_epi64::<1>(mantissa);
        let carried = _mm512_cmpge_epu64_mask(mantissa, _mm512_set1_epi64(2 << 52));
        mantissa = _mm512_mask_mov_epi64(mantissa, carried, _mm512_set1_epi64(1 << 52));
        power2 = _mm512_mask_add_epi64(power2, carried, power2, one);
        mantissa = _mm512_andnot_si512(_mm512_set1_epi64(1 << 52), mantissa);
        let mut result = _mm512_or_si512(
            _mm512_or_si512(sign, _mm512_slli_epi64::<52>(power2)),
            mantissa,
        );
        result = _mm512_mask_mov_epi64(result, is_zero, sign);
        // SAFETY: reloading the slots' own bits (the `VALUE` lanes), inside `bits`.
        let values = unsafe { _mm512_loadu_si512(bits.as_ptr().cast()) };
        result = _mm512_mask_mov_epi64(result, is_value, values);
        // SAFETY: a masked store of out.len() f64 into `out`.
        unsafe { _mm512_mask_storeu_pd(out.as_mut_ptr(), keep, _mm512_castsi512_pd(result)) };
        let mut redo = ambiguous & !is_value & !is_zero & keep;
        while redo != 0 {
            let i = redo.trailing_zeros() as usize;
            let t = tags[i];
            out[i] = to_f64(bits[i], u32::from(t & 0x1F), t & 0x80 != 0);
            redo &= redo - 1;
        }
    }

    /// The 128-bit truncated powers 5^q for q = −19..=0 (index q + 19), as `fast-float2`'s
    /// table defines them: for q < 0, floor(2^b / 5^−q) + 1 with b = 127 + ceil(log2 5^−q);
    /// 5^0 = 2^127. Each as (high, low) 64-bit words.
    pub(super) const POWERS_OF_FIVE: [(u64, u64); 20] = {
        let mut table = [(0u64, 0u64); 20];
        let mut i = 0;
        while i < 20 {
            table[i] = power_of_five(19 - i as u32);
            i += 1;
        }
        table
    };

    /// Entry for 5^−k (k ≤ 19, so 5^k < 2^45 and every step fits a `u128`).
    const fn power_of_five(k: u32) -> (u64, u64) {
        if k == 0 {
            return (1 << 63, 0);
        }
        let p = 5u128.pow(k);
        let mut z = 0;
        while (1u128 << z) < p {
            z += 1;
        }
        // floor(2^(z + 127) / p) by long division over the numerator's bits, high to low.
        let top = z + 127;
        let (mut quotient, mut rest) = (0u128, 0u128);
        let mut bit = top;
        while bit >= 0 {
            rest = (rest << 1) | (bit == top) as u128;
            quotient <<= 1;
            if rest >= p {
                rest -= p;
                quotient |= 1;
            }
            bit -= 1;
        }
        let c = quotient + 1;
        assert!(c >> 127 == 1, "normalised to [2^127, 2^128)");
        ((c >> 64) as u64, c as u64)
    }

    /// The double nearest to w · 10^−fraction_digits (ties to even), negated when asked:
    /// `fast-float2`'s `compute_float` for binary64, for the exponents −19..=0 only (where the
    /// product is never ambiguous and the result is never subnormal or infinite).
    #[inline]
    pub(super) fn to_f64(w: u64, fraction_digits: u32, negative: bool) -> f64 {
        let sign = u64::from(negative) << 63;
        if w == 0 {
            return f64::from_bits(sign);
        }
        let q = -(fraction_digits as i32);
        let lz = w.leading_zeros();
        let w = w << lz;
        let (hi5, lo5) = POWERS_OF_FIVE[19 - fraction_digits as usize];
        let first = u128::from(w) * u128::from(hi5);
        let (mut lo, mut hi) = (first as u64, (first >> 64) as u64);
        const PRECISION_MASK: u64 = u64::MAX >> 55;
        if hi & PRECISION_MASK == PRECISION_MASK {
            let second = ((u128::from(w) * u128::from(lo5)) >> 64) as u64;
            lo = lo.wrapping_add(second);
            if second > lo {
                hi += 1;
            }
        }
        let upper = (hi >> 63) as i32;
        let mut mantissa = hi >> (upper + 9);
        let mut power2 = ((q.wrapping_mul(152_170 + 65_536)) >> 16) + 63 + upper - lz as i32 + 1023;
        // An exact halfway case rounds to even (only possible for q >= -4).
        if lo <= 1 && q >= -4 && mantissa & 3 == 1 && (mantissa << (upper + 9)) == hi {
            mantissa &= !1;
        }
        mantissa += mantissa & 1;
        mantissa >>= 1;
        if mantissa >= 2 << 52 {
            mantissa = 1 << 52;
            power2 += 1;
        }
        mantissa &= !(1 << 52);
        f64::from_bits(sign | (power2 as u64) << 52 | mantissa)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `job` run with every reader this CPU has, the portable one first: each must give the
    /// portable reader's answer, whichever one `with_fastest_reader` picks on a given machine.
    fn with_each_reader<J: ReadsNumbers + Clone>(job: J) -> Vec<J::Output> {
        let mut outputs = vec![job.clone().run(Portable)];
        #[cfg(target_arch = "x86_64")]
        {
            if simd::available_avx2() {
                // SAFETY: the CPU has the features (checked just above).
                outputs.push(unsafe { simd::run_avx2(job.clone()) });
            }
            if simd::available() {
                // SAFETY: as above.
                outputs.push(unsafe { simd::run(job.clone()) });
            }
        }
        outputs.push(with_fastest_reader(job));
        outputs
    }

    /// Our reading of `text` (padded to a full window) against `fast-float2`'s, bit for bit.
    fn agrees(text: &str) -> bool {
        let bytes = padded(text);
        #[derive(Clone)]
        struct Read<'a>(&'a [u8]);
        impl ReadsNumbers for Read<'_> {
            type Output = Option<(f64, usize)>;
            fn run<N: NumberReader>(self, numbers: N) -> Self::Output {
                numbers.read(self.0)
            }
        }
        let theirs = Portable.read(&bytes).map(|(v, n)| (v.to_bits(), n));
        with_each_reader(Read(&bytes))
            .into_iter()
            .all(|ours| ours.map(|(v, n)| (v.to_bits(), n)) == theirs)
    }

    /// A row of `texts` read slot by slot and finished together, against `fast-float2`'s
    /// reading of each text, bit for bit (only rows of finite numbers read in one pass).
    fn row_agrees(texts: &[String]) -> bool {
        let mut line = texts.join(",").into_bytes();
        line.push(b'\n');
        line.resize(line.len() + 40, b'7');
        #[derive(Clone)]
        struct Row<'a>(&'a [u8], usize);
        impl ReadsNumbers for Row<'_> {
            type Output = Option<Vec<f64>>;
            fn run<N: NumberReader>(self, numbers: N) -> Self::Output {
                let (bytes, d) = (self.0, self.1);
                let mut slots = RowSlots::new(d);
                let mut p = 0;
                for j in 0..d {
                    p += numbers.read_slot(&bytes[p..], &mut slots, j)? + 1;
                }
                let mut row = vec![0.0; d];
                numbers.finish(&slots, &mut row);
                Some(row)
            }
        }
        let theirs: Option<Vec<u64>> = texts
            .iter()
            .map(|t| {
                Portable
                    .read(&padded(t))
                    .filter(|(v, _)| v.is_finite())
                    .map(|(v, _)| v.to_bits())
            })
            .collect();
        with_each_reader(Row(&line, texts.len()))
            .into_iter()
            .all(|ours| {
                ours.map(|row| row.iter().map(|v| v.to_bits()).collect::<Vec<_>>()) == theirs
            })
    }

    /// `text` followed by a separator, padded to a full window.
    fn padded(text: &str) -> Vec<u8> {
        let mut bytes = text.as_bytes().to_vec();
        bytes.push(b',');
        bytes.resize(bytes.len().max(40), b'7');
        bytes
    }

    /// Whether the fast paths read `text` themselves: (AVX2, AVX-512), each false on a CPU
    /// without it. Both must take the same shapes.
    #[cfg(target_arch = "x86_64")]
    fn fast_paths_read(text: &str) -> (bool, bool) {
        let bytes = padded(text);
        // SAFETY: each decoder is called only after its features were found.
        let avx2 = simd::available_avx2() && unsafe { simd::decode_avx2(&bytes) }.is_some();
        let avx512 = simd::available() && unsafe { simd::decode(&bytes) }.is_some();
        (avx2, avx512)
    }

    #[test]
    fn random_numbers_read_as_fast_float2_reads_them() {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let digits = |rng: &mut rand_chacha::ChaCha8Rng, n: usize| -> String {
            (0..n)
                .map(|_| char::from(b'0' + rng.random_range(0..10u8)))
                .collect()
        };
        let (mut fast, mut fast_avx2) = (0, 0);
        let total = 400_000;
        let mut row = Vec::new();
        for i in 0..total {
            let sign = if rng.random::<bool>() { "-" } else { "" };
            let text = match i % 4 {
                // Shortest round-trip text of doubles of every size, as most CSV writers print.
                0 => {
                    let v: f64 = rng.random::<f64>() * 10f64.powi(rng.random_range(-12..20));
                    format!("{sign}{v}")
                }
                // Up to 19 digits with the point anywhere.
                1 => {
                    let n = rng.random_range(1..=19);
                    let text = digits(&mut rng, n);
                    let point = rng.random_range(1..=n);
                    format!("{sign}{}.{}", &text[..point], &text[point..])
                }
                // Exact halfway points between two doubles above 2^54 (and their neighbours),
                // with one or two zero decimals: the round-to-even case.
                2 => {
                    let e = rng.random_range(54..=55);
                    let k: u64 = rng.random_range(1u64 << 52..1u64 << 53);
                    let m = (k << (e - 52)) + (1 << (e - 53)) + rng.random_range(0..3) - 1;
                    let zeros = &"00"[..rng.random_range(1..=2)];
                    format!("{sign}{m}.{zeros}")
                }
                // Longer digit strings and exponents: the portable path's shapes.
                _ => {
                    let n = rng.random_range(1..=26);
                    let text = digits(&mut rng, n);
                    let point = rng.random_range(0..=n);
                    let exp = if rng.random::<bool>() {
                        format!("e{}", rng.random_range(-30..30))
                    } else {
                        String::new()
                    };
                    format!("{sign}{}.{}{exp}", &text[..point], &text[point..])
                }
            };
            assert!(agrees(&text), "{text:?}");
            // Rows of 13 (a whole vector of eight and part of one), mixing every kind.
            row.push(text.clone());
            if row.len() == 13 {
                assert!(row_agrees(&row), "{row:?}");
                row.clear();
            }
            #[cfg(target_arch = "x86_64")]
            {
                let (avx2, avx512) = fast_paths_read(&text);
                if simd::available_avx2() && simd::available() {
                    assert_eq!(avx2, avx512, "{text:?}");
                }
                fast_avx2 += usize::from(avx2);
                fast += usize::from(avx512);
            }
        }
        // On a CPU with a fast path, it must have read the plain shapes (most of kinds 0-2).
        #[cfg(target_arch = "x86_64")]
        {
            if simd::available() {
                assert!(fast > total / 2, "AVX-512 path read only {fast} of {total}");
            }
            if simd::available_avx2() {
                assert!(
                    fast_avx2 > total / 2,
                    "AVX2 path read only {fast_avx2} of {total}"
                );
            }
        }
        let _ = (fast, fast_avx2);
    }

    /// The vector roundings (eight lanes with AVX-512, four with AVX2, each where the CPU has
    /// it) against the scalar one, lane by lane, on integers of every size with 0 to 19
    /// fraction digits, including exact halfway cases, products ambiguous in their first 64
    /// bits (which take the scalar path), and slots that already hold a value.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn vector_lanes_round_as_one_does() {
        use rand::{RngExt, SeedableRng};
        if !simd::available() && !simd::available_avx2() {
            return;
        }
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(12);
        let (mut ambiguous, mut halfway) = (0, 0);
        for _ in 0..100_000 {
            let mut bits = [0u64; 8];
            let mut tags = [0u8; 8];
            for (w, tag) in bits.iter_mut().zip(&mut tags) {
                let digits = rng.random_range(0..20u32);
                *w = match rng.random_range(0..4) {
                    0 => {
                        let n = rng.random_range(1..=19);
                        rng.random_range(0..10u64.pow(n))
                    }
                    // Few significant bits: exact products, halfway cases among them.
                    1 => rng.random_range(0..1u64 << 12) << rng.random_range(0..50),
                    // Just above 2^53 times a power of ten (m.0, m.00): round to even.
                    2 => {
                        let m = (rng.random_range(1u64 << 52..1u64 << 53) << 1) | 1;
                        m * 10u64.pow(digits.min(2))
                    }
                    _ => [0, 1, 10u64.pow(19) - 1, u64::from(u32::MAX)][rng.random_range(0..4)],
                };
                *tag = digits as u8 | u8::from(rng.random::<bool>()) << 7;
                if *w != 0 {
                    let (high, _) = simd::POWERS_OF_FIVE[19 - digits as usize];
                    let product = u128::from(*w << w.leading_zeros()) * u128::from(high);
                    ambiguous += usize::from((product >> 64) as u64 & 0x1FF == 0x1FF);
                    halfway += usize::from(product as u64 <= 1 && digits <= 4);
                }
            }
            // One slot in eight holds a value's bits instead.
            let value_lane = rng.random_range(0..8);
            bits[value_lane] = rng.random::<f64>().to_bits();
            tags[value_lane] = VALUE;
            let want: Vec<u64> = (0..8)
                .map(|i| match tags[i] {
                    VALUE => bits[i],
                    t => simd::to_f64(bits[i], u32::from(t & 0x1F), t & 0x80 != 0).to_bits(),
                })
                .collect();
            if simd::available() {
                let mut ours = [0.0; 8];
                // SAFETY: the CPU has the features (checked just above).
                unsafe { simd::round8(&bits, &tags, &mut ours) };
                for i in 0..8 {
                    assert_eq!(ours[i].to_bits(), want[i], "{} {}", bits[i], tags[i]);
                }
            }
            if simd::available_avx2() {
                let lz: Vec<u8> = bits.iter().map(|w| w.leading_zeros() as u8).collect();
                // Every length of the last, partial group of a row.
                let len = rng.random_range(1..=4);
                for at in [0, 4] {
                    let mut ours = [0.0; 4];
                    let slots = (&bits[at..at + 4], &tags[at..at + 4], &lz[at..at + 4]);
                    // SAFETY: the CPU has the features (checked just above).
                    unsafe { simd::round4(slots, &mut ours[..len]) };
                    for i in 0..len {
                        let j = at + i;
                        assert_eq!(ours[i].to_bits(), want[j], "{} {}", bits[j], tags[j]);
                    }
                }
            }
        }
        assert!(ambiguous > 100 && halfway > 100, "{ambiguous} {halfway}");
    }

    /// Each power of five is checked against its definition with exact integer arithmetic (a
    /// second method beside the table's long division): c − 1 = floor(2^(z + 127) / 5^k).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn powers_of_five_match_their_definition() {
        assert_eq!(simd::POWERS_OF_FIVE[19], (1 << 63, 0));
        for k in 1..=19u32 {
            let p = 5u64.pow(k);
            let z = 64 - (p - 1).leading_zeros(); // smallest z with 2^z >= p
            let (hi, lo) = simd::POWERS_OF_FIVE[19 - k as usize];
            let c_minus_1 = ((u128::from(hi) << 64) | u128::from(lo)) - 1;
            // (c − 1) · p as high · 2^64 + low.
            let low_product = (c_minus_1 as u64 as u128) * u128::from(p);
            let low = low_product as u64;
            let high = ((c_minus_1 >> 64) * u128::from(p)) + (low_product >> 64);
            // 2^(z + 127) − (c − 1) · p must lie in [0, p).
            let top = 1u128 << (z + 63);
            assert!(high <= top, "5^-{k}: entry too large");
            let diff_high = top - high;
            assert!(diff_high <= 1, "5^-{k}: entry too small");
            let rest = (diff_high << 64) - u128::from(low);
            assert!(rest < u128::from(p), "5^-{k}: remainder {rest} >= {p}");
        }
    }

    #[test]
    fn hand_picked_numbers_read_as_fast_float2_reads_them() {
        for t in [
            "0",
            "-0",
            "0.0",
            "-0.0",
            "1",
            "-1",
            "1.5",
            "-1.5",
            "0.1",
            "0.2",
            "0.3",
            "-0.5110170436164355",
            "0.24875452561677008",
            "2.0573182055465398",
            "9007199254740993",
            "9007199254740993.0",
            "18014398509481986.0",
            "18014398509481990.0",
            "1234567890123456789",
            "12345678901234567890",
            "0.0000000000000000001",
            "9999999999999999999",
            "999999999999999999.9",
            "1.7976931348623157",
            "5e-324",
            "1e5",
            "1.5E+3",
            "1.",
            ".5",
            "-.5",
            "1..2",
            "1.2.3",
            "--1",
            "+1",
            "-",
            ".",
            "inf",
            "NaN",
            "abc",
            "",
            "0.30000000000000004",
            "4.9406564584124654",
            "2.2250738585072014",
            "00000000000000000000001.5",
            "7.2057594037927933",
            "1.00000000000000011102230246",
        ] {
            assert!(agrees(t), "{t:?}");
        }
    }
}
