//! The global allocator of our binaries: the system allocator, asking the kernel for transparent
//! huge pages on large blocks, and mapping the largest blocks itself so that they grow in place
//! and the last one freed serves the next.
//!
//! Why huge pages: a fresh large buffer (the n × K posteriors of a prediction, the feature
//! matrix of a CSV file) is backed page by page on first touch. With 4 KiB pages that is one
//! page fault per 4 KiB, and on a virtual machine the faults cost more than the work: filling a
//! fresh 80 MB output took longer than computing a K = 10 prediction into a reused one. With
//! Linux's transparent huge pages in their common `madvise` mode, a block must ask for 2 MiB
//! pages (`madvise(MADV_HUGEPAGE)`), which cuts the faults 512-fold. NumPy does the same for
//! every array of 4 MiB or more, so scikit-learn's outputs already get this.
//!
//! Why blocks of [`OWN_MAPPING_MIN_BYTES`] or more are mapped here: glibc maps such blocks
//! itself, and grows them with `mremap`, which moves pages instead of copying bytes. But advising
//! only the whole huge pages inside glibc's mapping splits it into several kernel mappings (the
//! advice is a property of a mapping), and `mremap` refuses a range that spans more than one
//! (`EFAULT`), so glibc fell back to allocating anew and copying: a `Vec` of rows read from a
//! pipe, growing from 109 to 219 MB, briefly needed both. A block mapped here is one mapping,
//! advised whole and aligned to a huge page, so `mremap` grows and shrinks it without a copy.
//! Below that size glibc may serve a block from memory it keeps between frees (its mapping
//! threshold rises to 32 MiB as blocks are freed), which saves clearing fresh pages; those
//! blocks stay glibc's, and only the whole huge pages inside them are advised, so nothing
//! outside a block is touched.
//!
//! Why one freed block of ours is kept: glibc keeps freed memory below its threshold for the
//! next allocation, and the kernel clears every fresh page on first touch, so a K = 2
//! prediction at n = 1e6 (16 MB) reused the pages the previous one freed while a K = 10 one
//! (80 MB, mapped here) waited each time for the kernel to clear 80 MB: on a Zen 5 EPYC, `xtask
//! profile lda-predict 2 10` took 0.008–0.013 s a call against 0.005 s into a reused output,
//! and 0.006 s with the block kept (BENCHMARKS.md, seventieth round). So the
//! last block of ours freed (up to [`KEEP_MAX_BYTES`]) is kept, and the next allocation of our
//! size range takes it (cut to length) or unmaps it: at most one freed block is resident at a
//! time, and only until that allocation. A zeroed allocation always maps fresh pages (the
//! kernel's zeroing is what it asks for). The first large allocation of a process still pays
//! the clearing.
//!
//! Why large blocks aligned past 16 bytes are aligned here: `System` hands them to glibc's
//! `posix_memalign`, which asks for the size plus the alignment, cuts the aligned block out and
//! frees the rest. Freed, the block is then a little too small for the next request of the same
//! layout, so the heap grows again, and the kernel clears fresh pages inside the call.
//! faer aligns its matrices to cache lines, so a 16 MB output (a K = 2 prediction at n = 1e6)
//! grew the heap on the second and the third call of a process (`xtask profile lda-predict 2 2`:
//! 9.6, 2.9, 7.6, then 1.6–1.9 ms a call), and on every call in some processes (`qda-predict
//! 2 2`: 3.2–3.8 ms on each of six calls) and in a thread's own arena (eight calls, eight new
//! blocks).
//! Asking `malloc` for the same padded size every time, the freed block fits the next request:
//! after the first two calls (glibc's mapping, then the heap's growth), `lda-predict 2 2` took
//! 1.2–1.8 ms, `qda-predict 2 2` 1.9–2.6 and `gnb-predict 2 2` 1.7–1.8 (BENCHMARKS.md,
//! eighty-fifth round).
//!
//! The advice changes how pages are backed, never their contents, so results are the same with
//! or without it. Elsewhere than Linux this is the system allocator unchanged.
//!
//! Binaries opt in with
//! `#[global_allocator] static ALLOC: ssl_cli::alloc::HugePageAlloc = ssl_cli::alloc::HugePageAlloc;`
//! (a library cannot choose the allocator of the program that uses it).
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};

/// The system allocator, with transparent huge pages asked for on blocks of
/// [`HUGE_PAGE_MIN_BYTES`] or more, and blocks of [`OWN_MAPPING_MIN_BYTES`] or more mapped
/// directly (Linux only).
#[derive(Debug, Default, Clone, Copy)]
pub struct HugePageAlloc;

/// Blocks at least this large are advised (NumPy's threshold).
pub const HUGE_PAGE_MIN_BYTES: usize = 4 << 20;

/// Blocks at least this large (with an alignment of at most a base page) are mapped by this
/// allocator rather than glibc: glibc's largest mapping threshold (`DEFAULT_MMAP_THRESHOLD_MAX`
/// on 64-bit targets), above which glibc maps every block anyway, so blocks this large were
/// never kept between frees before either.
pub const OWN_MAPPING_MIN_BYTES: usize = 32 << 20;

/// The largest freed block kept for the next large allocation (see the module docs): the
/// output of a prediction of 32 classes at n = 1e6. It bounds the memory a freed block holds.
pub const KEEP_MAX_BYTES: usize = 256 << 20;

/// The x86-64 and aarch64 (4 KiB base page) transparent huge page size.
const HUGE_PAGE: usize = 2 << 20;

/// The base page size assumed for mappings (x86-64 and aarch64 Linux's usual one; checked
/// against the kernel's before the first mapping).
const BASE_PAGE: usize = 4 << 10;

/// The whole huge pages inside `[start, start + len)`, as (first address, length).
fn huge_pages_within(start: usize, len: usize) -> Option<(usize, usize)> {
    let first = start.checked_next_multiple_of(HUGE_PAGE)?;
    let end = start.checked_add(len)? / HUGE_PAGE * HUGE_PAGE;
    (end > first).then(|| (first, end - first))
}

/// Asks for huge pages inside a block of `len` bytes at `ptr` that glibc returned.
#[inline]
fn advise(ptr: *mut u8, len: usize) {
    #[cfg(target_os = "linux")]
    if len >= HUGE_PAGE_MIN_BYTES
        && !ptr.is_null()
        && let Some((first, n)) = huge_pages_within(ptr as usize, len)
    {
        // SAFETY: [first, first + n) lies inside the live block [ptr, ptr + len), which this
        // process owns; MADV_HUGEPAGE neither reads, writes nor frees memory, it only sets how
        // the kernel backs those pages. A failure (e.g. THP compiled out) leaves them as they
        // were, so its result is ignored.
        unsafe {
            libc::madvise(first as *mut libc::c_void, n, libc::MADV_HUGEPAGE);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (ptr, len);
}

/// The alignment of every block glibc's `malloc` returns (x86-64 and aarch64).
const MALLOC_ALIGN: usize = 16;

/// Large blocks from glibc with an alignment past [`MALLOC_ALIGN`], aligned here (see the
/// module docs): `malloc` is asked for the size plus the alignment plus a word, the block is
/// the first aligned address at least a word in, and that word holds `malloc`'s address.
mod aligned {
    use super::{BASE_PAGE, HUGE_PAGE_MIN_BYTES, Layout, MALLOC_ALIGN};
    use std::alloc::{GlobalAlloc, System};

    /// The word before the block that holds `malloc`'s address.
    const HEADER: usize = std::mem::size_of::<usize>();

    /// Whether a block of `size` bytes aligned to `align` is aligned here (on Linux, where
    /// `System` is glibc's `malloc`).
    #[inline]
    pub(super) fn applies(size: usize, align: usize) -> bool {
        cfg!(target_os = "linux")
            && size >= HUGE_PAGE_MIN_BYTES
            && align > MALLOC_ALIGN
            && align <= BASE_PAGE
    }

    /// The layout asked of `malloc` for a block of `size` bytes aligned to `align`.
    fn padded(size: usize, align: usize) -> Option<Layout> {
        let total = size.checked_add(align)?.checked_add(HEADER)?;
        Layout::from_size_align(total, MALLOC_ALIGN).ok()
    }

    /// A block of `size` bytes aligned to `align` (zeroed with `zeroed`), or null.
    ///
    /// # Safety
    /// `applies(size, align)` must hold, and `align` must be a power of two.
    pub(super) unsafe fn alloc(size: usize, align: usize, zeroed: bool) -> *mut u8 {
        let Some(layout) = padded(size, align) else {
            return std::ptr::null_mut();
        };
        // SAFETY: the layout is non-zero (at least `HUGE_PAGE_MIN_BYTES`).
        let raw = unsafe {
            if zeroed {
                System.alloc_zeroed(layout)
            } else {
                System.alloc(layout)
            }
        };
        if raw.is_null() {
            return raw;
        }
        // At least a word in, at most `HEADER + align − 1`: the block ends inside `raw`'s.
        let offset = (raw as usize + HEADER).next_multiple_of(align) - raw as usize;
        // SAFETY: `offset + size ≤ layout.size()`, so the block and the word before it lie inside
        // `raw`'s block; that word is aligned (`align` and `raw` are multiples of a word).
        unsafe {
            let block = raw.add(offset);
            block.cast::<usize>().sub(1).write(raw as usize);
            block
        }
    }

    /// Frees a block of `alloc`.
    ///
    /// # Safety
    /// `block` must come from `alloc(size, align, _)` and not be used afterwards.
    pub(super) unsafe fn dealloc(block: *mut u8, size: usize, align: usize) {
        // SAFETY: `alloc` wrote `malloc`'s address in the word before the block, and asked for
        // `padded(size, align)`, which was `Some` for it to succeed.
        unsafe {
            let raw = block.cast::<usize>().sub(1).read();
            let offset = block as usize - raw;
            if let Some(layout) = padded(size, align) {
                System.dealloc(block.sub(offset), layout);
            }
        }
    }
}

/// A block for `layout` from glibc's side (not mapped here): aligned here where
/// [`aligned::applies`], else from `System`; its whole huge pages advised.
///
/// # Safety
/// `layout` must be non-zero, and not one that `own::owns`.
unsafe fn from_glibc(layout: Layout, zeroed: bool) -> *mut u8 {
    let (size, align) = (layout.size(), layout.align());
    // SAFETY: the caller's guarantees; `Layout` aligns are powers of two.
    let ptr = unsafe {
        match (aligned::applies(size, align), zeroed) {
            (true, _) => aligned::alloc(size, align, zeroed),
            (false, true) => System.alloc_zeroed(layout),
            (false, false) => System.alloc(layout),
        }
    };
    advise(ptr, size);
    ptr
}

/// Frees a block of [`from_glibc`].
///
/// # Safety
/// `ptr` must come from `from_glibc(layout, _)` and not be used afterwards.
unsafe fn to_glibc(ptr: *mut u8, layout: Layout) {
    // SAFETY: the caller's guarantee; the block was obtained the way `applies` says.
    unsafe {
        if aligned::applies(layout.size(), layout.align()) {
            aligned::dealloc(ptr, layout.size(), layout.align());
        } else {
            System.dealloc(ptr, layout);
        }
    }
}

/// Blocks this allocator maps itself (see [`OWN_MAPPING_MIN_BYTES`]). `alloc`, `realloc` and
/// `dealloc` decide by the layout alone, so a block is always returned the way it was obtained.
#[cfg(target_os = "linux")]
mod own {
    use super::{BASE_PAGE, HUGE_PAGE, KEEP_MAX_BYTES, OWN_MAPPING_MIN_BYTES};

    /// Whether a block of `size` bytes aligned to `align` is mapped here.
    #[inline]
    pub(super) fn owns(size: usize, align: usize) -> bool {
        // SAFETY: sysconf only reads a value the C library already holds.
        size >= OWN_MAPPING_MIN_BYTES
            && align <= BASE_PAGE
            && unsafe { libc::sysconf(libc::_SC_PAGESIZE) } == BASE_PAGE as libc::c_long
    }

    /// The mapping's length for a block of `size` bytes.
    fn mapped_len(size: usize) -> Option<usize> {
        size.checked_next_multiple_of(BASE_PAGE)
    }

    /// Maps a fresh (zeroed) block of `size` bytes starting on a huge page, advised whole.
    /// Null on failure.
    fn map(size: usize) -> *mut u8 {
        let Some(len) = mapped_len(size) else {
            return std::ptr::null_mut();
        };
        let Some(span) = len.checked_add(HUGE_PAGE) else {
            return std::ptr::null_mut();
        };
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing touches
        // no existing memory. The head and tail unmapped below lie inside this new mapping,
        // outside [start, start + len), and nothing else refers to them.
        unsafe {
            let base = libc::mmap(
                std::ptr::null_mut(),
                span,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if base == libc::MAP_FAILED {
                return std::ptr::null_mut();
            }
            let base = base as usize;
            let start = base.next_multiple_of(HUGE_PAGE);
            if start > base {
                libc::munmap(base as *mut libc::c_void, start - base);
            }
            let tail = base + span - (start + len);
            if tail > 0 {
                libc::munmap((start + len) as *mut libc::c_void, tail);
            }
            // As in `advise`, a failure leaves the pages as they were.
            libc::madvise(start as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
            start as *mut u8
        }
    }

    /// Unmaps a whole mapping of ours.
    ///
    /// # Safety
    /// `[start, start + len)` must be exactly one block's mapping, not used afterwards.
    unsafe fn unmap_len(start: usize, len: usize) {
        // SAFETY: the caller's guarantee.
        unsafe {
            libc::munmap(start as *mut libc::c_void, len);
        }
    }

    /// A freed block kept for the next allocation of our size range, as (start, mapped
    /// length): at most one, and only until the next such allocation, which takes it or
    /// unmaps it. A `Mutex` does not allocate (a futex on Linux), so it may be used here.
    pub(super) struct Kept(std::sync::Mutex<Option<(usize, usize)>>);

    impl Drop for Kept {
        fn drop(&mut self) {
            if let Some((start, len)) = self.swap(None) {
                // SAFETY: a kept block is a whole mapping of ours that nothing uses.
                unsafe { unmap_len(start, len) };
            }
        }
    }

    /// The global allocator's [`Kept`] (a static: never dropped).
    pub(super) static KEPT: Kept = Kept::new();

    impl Kept {
        pub(super) const fn new() -> Self {
            Kept(std::sync::Mutex::new(None))
        }

        /// Puts `block` in the slot and returns what it held (a poisoned lock still holds a
        /// valid slot: nothing done under it can panic).
        fn swap(&self, block: Option<(usize, usize)>) -> Option<(usize, usize)> {
            let mut slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
            std::mem::replace(&mut *slot, block)
        }

        /// A block of `size` bytes whose contents may be anything: the kept block, cut to
        /// length when it is at least as long, else a fresh mapping ([`map`]; the kept block
        /// is then unmapped). Null on failure.
        pub(super) fn obtain(&self, size: usize) -> *mut u8 {
            let Some(len) = mapped_len(size) else {
                return std::ptr::null_mut();
            };
            if let Some((start, kept_len)) = self.swap(None) {
                if kept_len >= len {
                    if kept_len > len {
                        // SAFETY: the tail lies inside the kept mapping, which nothing uses.
                        unsafe { unmap_len(start + len, kept_len - len) };
                    }
                    return start as *mut u8;
                }
                // SAFETY: the kept block is a whole mapping of ours that nothing uses.
                unsafe { unmap_len(start, kept_len) };
            }
            map(size)
        }

        /// A zeroed block of `size` bytes: always a fresh mapping, which the kernel zeroes
        /// (the kept block is unmapped, as [`Kept::obtain`] takes or unmaps it).
        pub(super) fn obtain_zeroed(&self, size: usize) -> *mut u8 {
            if let Some((start, kept_len)) = self.swap(None) {
                // SAFETY: as in `obtain`.
                unsafe { unmap_len(start, kept_len) };
            }
            map(size)
        }

        /// Frees a block of `size` bytes that [`Kept::obtain`], [`Kept::obtain_zeroed`] or
        /// [`remap`] returned: kept for the next allocation when it is at most
        /// [`KEEP_MAX_BYTES`] and starts on a huge page (the block kept before is unmapped),
        /// else unmapped.
        ///
        /// # Safety
        /// `ptr` must be such a block, with its current `size`, not used afterwards.
        pub(super) unsafe fn release(&self, ptr: *mut u8, size: usize) {
            let Some(len) = mapped_len(size) else {
                return;
            };
            // A block that `mremap` moved may not start on a huge page; kept, it would hand
            // that start to an allocation that expects one.
            let older = if len > KEEP_MAX_BYTES || !(ptr as usize).is_multiple_of(HUGE_PAGE) {
                Some((ptr as usize, len))
            } else {
                self.swap(Some((ptr as usize, len)))
            };
            if let Some((start, old_len)) = older {
                // SAFETY: the caller's guarantee, or the block kept before, a whole mapping of
                // ours that nothing used.
                unsafe { unmap_len(start, old_len) };
            }
        }
    }

    /// Resizes a block that [`Kept::obtain`], [`Kept::obtain_zeroed`] or [`remap`] returned,
    /// moving its pages rather than its bytes; null on failure, when the old block is left as it was.
    ///
    /// # Safety
    /// `ptr` must be such a block of `old` bytes; on success it must not be used afterwards.
    pub(super) unsafe fn remap(ptr: *mut u8, old: usize, new: usize) -> *mut u8 {
        let (Some(old_len), Some(new_len)) = (mapped_len(old), mapped_len(new)) else {
            return std::ptr::null_mut();
        };
        if old_len == new_len {
            return ptr;
        }
        // SAFETY: [ptr, ptr + old_len) is one whole mapping of ours (one kernel mapping: it was
        // advised whole, and `mremap` keeps that advice on the pages it moves or adds).
        let moved = unsafe { libc::mremap(ptr.cast(), old_len, new_len, libc::MREMAP_MAYMOVE) };
        if moved == libc::MAP_FAILED {
            std::ptr::null_mut()
        } else {
            moved.cast()
        }
    }
}

/// Copies a block into a new one of `new_size` bytes obtained by `alloc`, then frees the old
/// one by `free`; null (the old block intact) when the allocation fails.
///
/// # Safety
/// `ptr` must be valid for reads of `old_size` bytes, and `free` must free it.
unsafe fn move_block(
    ptr: *mut u8,
    old_size: usize,
    new_size: usize,
    alloc: impl FnOnce() -> *mut u8,
    free: impl FnOnce(),
) -> *mut u8 {
    let new = alloc();
    if !new.is_null() {
        // SAFETY: both blocks hold at least min(old_size, new_size) bytes and are distinct.
        unsafe { std::ptr::copy_nonoverlapping(ptr, new, old_size.min(new_size)) };
        free();
    }
    new
}

// SAFETY: every block is obtained and returned the same way, decided by its layout (`own::owns`):
// mapped here, or from `System` with the caller's layout unchanged; `advise` only adds a hint on
// memory inside a block.
unsafe impl GlobalAlloc for HugePageAlloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        #[cfg(target_os = "linux")]
        if own::owns(layout.size(), layout.align()) {
            return own::KEPT.obtain(layout.size());
        }
        // SAFETY: forwarded with the caller's guarantees (non-zero size); not ours to map.
        unsafe { from_glibc(layout, false) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // A fresh mapping is zeroed by the kernel.
        #[cfg(target_os = "linux")]
        if own::owns(layout.size(), layout.align()) {
            return own::KEPT.obtain_zeroed(layout.size());
        }
        // SAFETY: as in `alloc`. A large zeroed block comes fresh from the kernel untouched
        // (calloc skips the memset), so the advice still applies before its first fault.
        unsafe { from_glibc(layout, true) }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        #[cfg(target_os = "linux")]
        if own::owns(layout.size(), layout.align()) {
            // SAFETY: a block of this layout came from `own::KEPT` or `own::remap`.
            unsafe { own::KEPT.release(ptr, layout.size()) };
            return;
        }
        // SAFETY: `ptr` came from `from_glibc` (through this allocator) with `layout`.
        unsafe { to_glibc(ptr, layout) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        #[cfg(target_os = "linux")]
        {
            let (old_size, align) = (layout.size(), layout.align());
            match (own::owns(old_size, align), own::owns(new_size, align)) {
                // SAFETY: the block was mapped here with its current size `old_size`.
                (true, true) => return unsafe { own::remap(ptr, old_size, new_size) },
                (false, true) => {
                    // SAFETY: `ptr` holds `old_size` bytes from `from_glibc`, freed with its
                    // layout.
                    return unsafe {
                        move_block(
                            ptr,
                            old_size,
                            new_size,
                            || own::KEPT.obtain(new_size),
                            || to_glibc(ptr, layout),
                        )
                    };
                }
                (true, false) => {
                    let Ok(new_layout) = Layout::from_size_align(new_size, align) else {
                        return std::ptr::null_mut();
                    };
                    // SAFETY: `ptr` is our mapping of `old_size` bytes, unmapped once copied.
                    return unsafe {
                        move_block(
                            ptr,
                            old_size,
                            new_size,
                            || from_glibc(new_layout, false),
                            || own::KEPT.release(ptr, old_size),
                        )
                    };
                }
                (false, false) => {}
            }
        }
        // A block aligned here, before or after, moves: `System` would realloc from the
        // address it did not return, or give glibc's alignment.
        let align = layout.align();
        if aligned::applies(layout.size(), align) || aligned::applies(new_size, align) {
            let Ok(new_layout) = Layout::from_size_align(new_size, align) else {
                return std::ptr::null_mut();
            };
            // SAFETY: `ptr` holds `layout.size()` bytes from `from_glibc(layout)` (not ours to
            // map, or the match above returned), freed by `to_glibc` once copied.
            return unsafe {
                move_block(
                    ptr,
                    layout.size(),
                    new_size,
                    || from_glibc(new_layout, false),
                    || to_glibc(ptr, layout),
                )
            };
        }
        // SAFETY: forwarded with the caller's guarantees; the block came from `System`.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if new_size > layout.size() {
            advise(new, new_size);
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_whole_huge_pages_inside_the_block_are_advised() {
        let mb = 1 << 20;
        // Starts mid-page: the first whole page starts at 2 MiB, the last ends at 8 MiB.
        assert_eq!(huge_pages_within(mb + 16, 8 * mb), Some((2 * mb, 6 * mb)));
        // Already aligned at both ends: the whole block.
        assert_eq!(huge_pages_within(4 * mb, 6 * mb), Some((4 * mb, 6 * mb)));
        // No whole page inside.
        assert_eq!(huge_pages_within(mb, 2 * mb), None);
        assert_eq!(huge_pages_within(usize::MAX - 10, 100), None);
    }

    /// Fills `n` words at `p` with a pattern of their index.
    ///
    /// # Safety
    /// `p` must be valid for writes of `n` words.
    unsafe fn fill(p: *mut u64, n: usize) {
        // SAFETY: the caller's guarantee.
        let s = unsafe { std::slice::from_raw_parts_mut(p, n) };
        for (i, v) in s.iter_mut().enumerate() {
            *v = i as u64 * 7 + 1;
        }
    }

    /// Whether the first `n` words at `p` hold `fill`'s pattern.
    ///
    /// # Safety
    /// `p` must be valid for reads of `n` words.
    unsafe fn filled(p: *const u64, n: usize) -> bool {
        // SAFETY: the caller's guarantee.
        let s = unsafe { std::slice::from_raw_parts(p, n) };
        s.iter().enumerate().all(|(i, &v)| v == i as u64 * 7 + 1)
    }

    /// Whether the `len` bytes at `p` are all zero.
    ///
    /// # Safety
    /// `p` must be valid for reads of `len` bytes.
    unsafe fn zero(p: *const u8, len: usize) -> bool {
        // SAFETY: the caller's guarantee.
        unsafe { std::slice::from_raw_parts(p, len) }
            .iter()
            .all(|&b| b == 0)
    }

    #[test]
    fn large_blocks_keep_their_contents_through_growth_and_zeroing() {
        let a = HugePageAlloc;
        let n = 3 * HUGE_PAGE_MIN_BYTES / 8 + 5;
        let layout = Layout::array::<u64>(n).expect("layout");
        // SAFETY: non-zero layout; every access below stays inside the block, which is
        // freed once with the layout it has at that point.
        unsafe {
            let p = a.alloc_zeroed(layout).cast::<u64>();
            assert!(!p.is_null());
            let s = std::slice::from_raw_parts_mut(p, n);
            assert!(s.iter().all(|&v| v == 0));
            fill(p, n);
            let grown = Layout::array::<u64>(2 * n).expect("layout");
            let q = a.realloc(p.cast(), layout, grown.size()).cast::<u64>();
            assert!(!q.is_null());
            assert!(filled(q, n));
            a.dealloc(q.cast(), grown);
        }
    }

    #[test]
    fn blocks_keep_their_contents_across_the_mapping_threshold_both_ways() {
        let a = HugePageAlloc;
        let word = std::mem::size_of::<u64>();
        // From glibc's side to a mapping of ours, grown and shrunk there (not a multiple of a
        // page: the mapping's length is rounded), then back to glibc's side.
        let sizes = [
            1 << 20,
            OWN_MAPPING_MIN_BYTES + 8 * 1000 + 8,
            3 * OWN_MAPPING_MIN_BYTES,
            OWN_MAPPING_MIN_BYTES + 8,
            OWN_MAPPING_MIN_BYTES - 8,
            1 << 16,
        ];
        // SAFETY: every access stays inside the live block, whose layout is tracked in `layout`
        // and used to free it once.
        unsafe {
            let mut layout = Layout::from_size_align(sizes[0], 8).expect("layout");
            let mut p = a.alloc(layout).cast::<u64>();
            assert!(!p.is_null());
            fill(p, sizes[0] / word);
            let mut kept = sizes[0] / word;
            for &size in &sizes[1..] {
                p = a.realloc(p.cast(), layout, size).cast::<u64>();
                assert!(!p.is_null(), "realloc to {size} bytes failed");
                layout = Layout::from_size_align(size, 8).expect("layout");
                kept = kept.min(size / word);
                assert!(filled(p, kept), "contents lost at {size} bytes");
                // Write the whole block, so that a mapping shorter than the block would fault.
                fill(p, size / word);
                kept = size / word;
            }
            a.dealloc(p.cast(), layout);
            // Zeroed blocks of ours are zero throughout.
            let big = Layout::from_size_align(OWN_MAPPING_MIN_BYTES + 4096 * 3 + 8, 8).expect("l");
            let z = a.alloc_zeroed(big);
            assert!(!z.is_null());
            assert!(zero(z, big.size()));
            a.dealloc(z, big);
        }
    }

    #[test]
    fn large_blocks_aligned_past_malloc_keep_alignment_and_contents_through_realloc() {
        let a = HugePageAlloc;
        for align in [32, 64, 128, BASE_PAGE] {
            // From glibc's side (aligned here), grown across the mapping threshold and back,
            // then below the huge page threshold, where `System` aligns it.
            let sizes = [
                HUGE_PAGE_MIN_BYTES + 8,
                3 * HUGE_PAGE_MIN_BYTES,
                OWN_MAPPING_MIN_BYTES + 8 * 1000,
                2 * HUGE_PAGE_MIN_BYTES - 8,
                1 << 16,
            ];
            // SAFETY: every access stays inside the live block, whose layout is tracked in
            // `layout` and used to free it once.
            unsafe {
                let mut layout = Layout::from_size_align(sizes[0], align).expect("layout");
                let mut p = a.alloc(layout).cast::<u64>();
                assert!(!p.is_null());
                assert_eq!(p as usize % align, 0, "{} bytes at {align}", sizes[0]);
                fill(p, sizes[0] / 8);
                let mut kept = sizes[0] / 8;
                for &size in &sizes[1..] {
                    p = a.realloc(p.cast(), layout, size).cast::<u64>();
                    assert!(!p.is_null(), "realloc to {size} bytes failed");
                    assert_eq!(p as usize % align, 0, "{size} bytes at {align}");
                    layout = Layout::from_size_align(size, align).expect("layout");
                    kept = kept.min(size / 8);
                    assert!(filled(p, kept), "contents lost at {size} bytes, {align}");
                    fill(p, size / 8);
                    kept = size / 8;
                }
                a.dealloc(p.cast(), layout);
                let zeroed = Layout::from_size_align(HUGE_PAGE_MIN_BYTES + 24, align).expect("l");
                let z = a.alloc_zeroed(zeroed);
                assert!(!z.is_null());
                assert_eq!(z as usize % align, 0);
                assert!(zero(z, zeroed.size()));
                a.dealloc(z, zeroed);
            }
        }
    }

    #[test]
    fn a_freed_large_block_aligned_past_malloc_serves_the_next_of_its_layout() {
        // glibc's `posix_memalign` left each freed block too small for the next request of
        // its layout, so every allocation took new memory (see the module docs). Allocated and
        // freed in turn, the same layout now gets the same block back; in a thread of its own
        // (its own arena, unless glibc has run out of them), and at least once in seven, so
        // that another thread's allocation in between cannot fail it.
        let addresses = std::thread::spawn(|| {
            let a = HugePageAlloc;
            let layout = Layout::from_size_align(2 * HUGE_PAGE_MIN_BYTES, 64).expect("layout");
            (0..8)
                .map(|_| {
                    // SAFETY: a non-zero layout; one byte written inside the block, which is
                    // freed once with its layout.
                    unsafe {
                        let p = a.alloc(layout);
                        assert!(!p.is_null());
                        p.write(1);
                        a.dealloc(p, layout);
                        p as usize
                    }
                })
                .collect::<Vec<_>>()
        })
        .join()
        .expect("the allocating thread");
        let reused = addresses.windows(2).filter(|w| w[0] == w[1]).count();
        assert!(reused >= 1, "no block reused: {addresses:x?}");
    }

    /// The kernel mapping of this process (from `/proc/self/smaps`) that holds all of
    /// `[start, end)`, as its range and `VmFlags`; `None` when no single mapping does.
    #[cfg(target_os = "linux")]
    fn mapping_holding(start: usize, end: usize) -> Option<((usize, usize), String)> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("read /proc/self/smaps");
        let mut found = None;
        for line in smaps.lines() {
            let head = line.split_whitespace().next().unwrap_or("");
            if let Some((lo, hi)) = head.split_once('-')
                && let (Ok(lo), Ok(hi)) =
                    (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
            {
                found = (lo <= start && end <= hi).then_some((lo, hi));
            } else if let (Some(range), Some(flags)) = (found, line.strip_prefix("VmFlags:")) {
                return Some((range, flags.to_string()));
            }
        }
        None
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_largest_blocks_are_one_mapping_advised_whole_through_growth() {
        // One mapping is what lets `mremap` move a growing block's pages instead of copying
        // its bytes (it refuses a range spread over several mappings).
        // SAFETY: sysconf only reads a value the C library already holds.
        if unsafe { libc::sysconf(libc::_SC_PAGESIZE) } != BASE_PAGE as libc::c_long {
            return; // not mapped here on such a system
        }
        let a = HugePageAlloc;
        let size = OWN_MAPPING_MIN_BYTES + 100;
        let layout = Layout::from_size_align(size, 16).expect("layout");
        // SAFETY: the block is written inside its bounds, and freed once with its layout.
        unsafe {
            let p = a.alloc(layout);
            assert!(!p.is_null());
            assert_eq!(p as usize % HUGE_PAGE, 0, "the block starts on a huge page");
            p.write_bytes(1, size);
            let (_, flags) = mapping_holding(p as usize, p as usize + size)
                .expect("the block lies inside one mapping");
            assert!(
                flags.split_whitespace().any(|f| f == "hg"),
                "not advised: {flags}"
            );
            let grown = 3 * size;
            let q = a.realloc(p, layout, grown);
            assert!(!q.is_null());
            assert!(std::slice::from_raw_parts(q, size).iter().all(|&b| b == 1));
            let (_, flags) = mapping_holding(q as usize, q as usize + grown)
                .expect("the grown block lies inside one mapping");
            assert!(
                flags.split_whitespace().any(|f| f == "hg"),
                "not advised: {flags}"
            );
            a.dealloc(q, Layout::from_size_align(grown, 16).expect("layout"));
        }
    }

    /// Whether `[p, p + len)` lies inside one mapping of this process.
    #[cfg(target_os = "linux")]
    fn mapped(p: *const u8, len: usize) -> bool {
        mapping_holding(p as usize, p as usize + len).is_some()
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_freed_block_serves_the_next_allocation_and_only_it() {
        // SAFETY: sysconf only reads a value the C library already holds.
        if unsafe { libc::sysconf(libc::_SC_PAGESIZE) } != BASE_PAGE as libc::c_long {
            return;
        }
        // A keeper of its own, so that other tests' blocks do not pass through it.
        let kept = own::Kept::new();
        let size = OWN_MAPPING_MIN_BYTES + 8 * 1000;
        let words = size / 8;
        // SAFETY: every block is written and read inside its bounds while live, and released
        // or unmapped once with its size.
        unsafe {
            let p = kept.obtain(size).cast::<u64>();
            assert!(!p.is_null());
            fill(p, words);
            kept.release(p.cast(), size);
            // Kept, not unmapped: the next allocation gets the same pages, contents and all
            // (a fresh mapping would read zero).
            let q = kept.obtain(size).cast::<u64>();
            assert_eq!(q, p);
            assert!(filled(q, words));
            // Taken: the slot is empty, so the next allocation is a fresh, zeroed mapping.
            let r = kept.obtain(size);
            assert!(!r.is_null() && r != q.cast());
            assert!(zero(r, size));
            kept.release(r, size);
            // A shorter block takes the kept one cut to length: its tail is unmapped.
            kept.release(q.cast(), size);
            let short = OWN_MAPPING_MIN_BYTES;
            let s = kept.obtain(short);
            assert_eq!(s, q.cast());
            assert!(filled(s.cast(), short / 8));
            assert!(mapped(s, short));
            assert!(
                !mapped(s, short + BASE_PAGE),
                "the cut tail is still mapped"
            );
            // A zeroed block never takes the kept one, whose contents are the pattern.
            kept.release(s, short);
            let z = kept.obtain_zeroed(short);
            assert!(zero(z, short));
            // Nor does a longer one: it is zeroed, fresh.
            kept.release(z, short);
            let long = kept.obtain(size);
            assert!(zero(long, size));
            kept.release(long, size);
            // A block past the limit is unmapped when freed, not kept (only one page is
            // touched: the rest is never backed).
            let huge = KEEP_MAX_BYTES + BASE_PAGE;
            let h = kept.obtain(huge);
            assert!(!h.is_null());
            h.write_bytes(7, BASE_PAGE);
            kept.release(h, huge);
            let again = kept.obtain(huge);
            assert!(zero(again, BASE_PAGE));
            kept.release(again, huge);
        }
    }
}
