//! The global allocator of our binaries: the system allocator, asking the kernel for transparent
//! huge pages on large blocks.
//!
//! Why: a fresh large buffer (the n × K posteriors of a prediction, the feature matrix of a CSV
//! file) is backed page by page on first touch. With 4 KiB pages that is one page fault per
//! 4 KiB, and on a virtual machine the faults cost more than the work: filling a fresh 80 MB
//! output took longer than computing a K = 10 prediction into a reused one. With Linux's
//! transparent huge pages in their common `madvise` mode, a block must ask for 2 MiB pages
//! (`madvise(MADV_HUGEPAGE)`), which cuts the faults 512-fold. NumPy does the same for every
//! array of 4 MiB or more, so scikit-learn's outputs already get this.
//!
//! Only the whole 2 MiB pages inside a block are advised, so nothing outside the block is
//! touched; the advice changes how pages are backed, never their contents, so results are the
//! same with or without it. Elsewhere than Linux this is the system allocator unchanged.
//!
//! Binaries opt in with
//! `#[global_allocator] static ALLOC: ssl_cli::alloc::HugePageAlloc = ssl_cli::alloc::HugePageAlloc;`
//! (a library cannot choose the allocator of the program that uses it).
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};

/// The system allocator, with transparent huge pages asked for on blocks of
/// [`HUGE_PAGE_MIN_BYTES`] or more.
#[derive(Debug, Default, Clone, Copy)]
pub struct HugePageAlloc;

/// Blocks at least this large are advised (NumPy's threshold).
pub const HUGE_PAGE_MIN_BYTES: usize = 4 << 20;

/// The x86-64 and aarch64 (4 KiB base page) transparent huge page size.
const HUGE_PAGE: usize = 2 << 20;

/// The whole huge pages inside `[start, start + len)`, as (first address, length).
fn huge_pages_within(start: usize, len: usize) -> Option<(usize, usize)> {
    let first = start.checked_next_multiple_of(HUGE_PAGE)?;
    let end = start.checked_add(len)? / HUGE_PAGE * HUGE_PAGE;
    (end > first).then(|| (first, end - first))
}

/// Asks for huge pages inside a block of `len` bytes at `ptr` that this allocator returned.
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

// SAFETY: every block comes from and goes back to `System` with the caller's layout unchanged;
// `advise` only adds a hint on memory inside the block.
unsafe impl GlobalAlloc for HugePageAlloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees (non-zero size).
        let ptr = unsafe { System.alloc(layout) };
        advise(ptr, layout.size());
        ptr
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`. A large zeroed block comes fresh from the kernel untouched
        // (calloc skips the memset), so the advice still applies before its first fault.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        advise(ptr, layout.size());
        ptr
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` (through this allocator) with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
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
            for (i, v) in s.iter_mut().enumerate() {
                *v = i as u64 * 7;
            }
            let grown = Layout::array::<u64>(2 * n).expect("layout");
            let q = a.realloc(p.cast(), layout, grown.size()).cast::<u64>();
            assert!(!q.is_null());
            let s = std::slice::from_raw_parts(q, n);
            assert!(s.iter().enumerate().all(|(i, &v)| v == i as u64 * 7));
            a.dealloc(q.cast(), grown);
        }
    }
}
