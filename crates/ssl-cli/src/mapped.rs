//! Files read through a memory map.
//!
//! Why: reading a large CSV file with `read` copies every byte out of the kernel's page cache
//! before the parser looks at it; that copy was 11% of the CPU time of loading the benchmark's
//! 307 MB file. A map lets the parser read the page cache directly. On Linux, parsed pages are
//! handed back as the parser moves on ([`MappedFile::done_before`]), so the map adds a few
//! blocks to the process's resident memory, not the whole file.
#![allow(unsafe_code)]

use std::fs::File;

/// A regular file mapped read-only.
pub struct MappedFile {
    map: memmap2::Mmap,
    /// Bytes before this offset were handed back to the kernel (a multiple of the page size).
    released: std::cell::Cell<usize>,
}

impl MappedFile {
    /// Maps `file` when it is a regular, non-empty file; `None` when it is not or the map
    /// fails (the caller then reads it as a stream).
    pub fn open(file: &File) -> Option<Self> {
        let meta = file.metadata().ok()?;
        if !meta.is_file() || meta.len() == 0 {
            return None;
        }
        // SAFETY: the map is shared and read-only, and only ever read, through the `&[u8]` of
        // `bytes`, while `file` is open. Another process writing the file meanwhile would make
        // those bytes change under the slice: the parser indexes every byte with bounds checks
        // and its SIMD loads stay inside the slice, so that could give wrong numbers but never
        // a read outside the map. Truncating the file meanwhile ends the process with SIGBUS
        // (as it does ripgrep, which maps files the same way); outputs are written to a
        // temporary file and renamed, so none is left half-written.
        let map = unsafe { memmap2::Mmap::map(file) }.ok()?;
        Some(Self {
            map,
            released: std::cell::Cell::new(0),
        })
    }

    /// The file's contents.
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// Says that the bytes before `end` will not be needed soon: the whole pages among them
    /// leave the process's resident memory (they stay in the page cache). Reading them again is
    /// still correct, only slower (they are mapped again from the file). Elsewhere than Linux
    /// this does nothing.
    pub fn done_before(&self, end: usize) {
        #[cfg(target_os = "linux")]
        {
            // SAFETY: sysconf has no preconditions.
            let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
            let Ok(page) = usize::try_from(page) else {
                return;
            };
            let (start, end) = (self.released.get(), end.min(self.map.len()) / page * page);
            if end <= start {
                return;
            }
            // SAFETY: [start, end) lies inside the map and is page-aligned (the map starts on a
            // page). For a shared file mapping MADV_DONTNEED only drops this process's page
            // table entries: a later read of these bytes maps the file's page again and sees
            // the same contents, so the `&[u8]` borrows of the map stay valid. A failure leaves
            // the pages mapped, which is harmless, so it is ignored.
            let dropped = unsafe {
                self.map.unchecked_advise_range(
                    memmap2::UncheckedAdvice::DontNeed,
                    start,
                    end - start,
                )
            };
            if dropped.is_ok() {
                self.released.set(end);
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This process's resident file-backed memory in kB (Linux).
    #[cfg(target_os = "linux")]
    fn rss_file_kb() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("RssFile:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn pages_handed_back_leave_resident_memory_and_read_the_same() {
        let mb = 96;
        let contents: Vec<u8> = (0..mb << 20).map(|i| (i * 7 % 251) as u8).collect();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big");
        std::fs::write(&path, &contents).unwrap();
        let map = MappedFile::open(&File::open(&path).unwrap()).unwrap();
        // Touch every page, then hand all of them back.
        let sum = |b: &[u8]| b.iter().step_by(4096).map(|&x| u64::from(x)).sum::<u64>();
        let expected = sum(&contents);
        assert_eq!(sum(map.bytes()), expected);
        let touched = rss_file_kb();
        map.done_before(contents.len() / 2);
        map.done_before(contents.len());
        let after = rss_file_kb();
        // Other tests may map files meanwhile (a few MB each), so ask for most of it, not all.
        assert!(
            touched.saturating_sub(after) >= (mb as u64 - 32) << 10,
            "resident file memory {touched} kB -> {after} kB"
        );
        assert_eq!(map.bytes(), &contents[..]);
    }

    #[test]
    fn empty_files_are_not_mapped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("empty");
        std::fs::write(&path, b"").unwrap();
        assert!(MappedFile::open(&File::open(&path).unwrap()).is_none());
    }
}
