//! What the CPU this runs on is, read once each from `cpuid`: its vendor, its family and the
//! size of its L1 data cache. Why: a few kernels choose between two ways of doing the same work
//! that won on different CPUs (each choice, with what was measured, stays beside its kernel);
//! the readings are here, once.

/// Whether the CPU's vendor is Intel (`cpuid` leaf 0).
pub fn is_intel() -> bool {
    static INTEL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *INTEL.get_or_init(|| vendor() == Some(*b"GenuineIntel"))
}

/// The family of an AMD CPU (`cpuid` leaf 1, with the extended family: 0x19 for Zen 3 and
/// Zen 4, 0x1A for Zen 5); `None` on any other vendor.
pub fn amd_family() -> Option<u32> {
    static FAMILY: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    *FAMILY.get_or_init(|| {
        if vendor() != Some(*b"AuthenticAMD") {
            return None;
        }
        #[cfg(target_arch = "x86_64")]
        {
            // Leaf 1 exists on every x86-64 CPU.
            Some(family(std::arch::x86_64::__cpuid(1).eax))
        }
        #[cfg(not(target_arch = "x86_64"))]
        None
    })
}

/// The vendor string of `cpuid` leaf 0 (ebx, edx, ecx); `None` off x86-64.
fn vendor() -> Option<[u8; 12]> {
    #[cfg(target_arch = "x86_64")]
    {
        // Leaf 0 exists on every x86-64 CPU.
        let id = std::arch::x86_64::__cpuid(0);
        let mut name = [0; 12];
        name[..4].copy_from_slice(&id.ebx.to_le_bytes());
        name[4..8].copy_from_slice(&id.edx.to_le_bytes());
        name[8..].copy_from_slice(&id.ecx.to_le_bytes());
        Some(name)
    }
    #[cfg(not(target_arch = "x86_64"))]
    None
}

/// The family of `cpuid` leaf 1's signature (`eax`): the base family, plus the extended
/// family when the base is 0xF.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn family(eax: u32) -> u32 {
    let base = (eax >> 8) & 0xF;
    if base == 0xF {
        base + ((eax >> 20) & 0xFF)
    } else {
        base
    }
}

/// The size in bytes of the L1 data cache of the CPU this runs on, read once from `cpuid`
/// (leaf 4, which Intel fills, else AMD's leaf 0x8000_0005); `None` where neither says (and off
/// x86-64). For passes whose blocks are sized to stay in L1: 48 KB on the Intel Xeons and the
/// Zen 5 EPYC these were tuned on, 32 KB on Zen 3 and Zen 4.
pub fn l1_data_bytes() -> Option<usize> {
    static BYTES: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *BYTES.get_or_init(read_l1_data_bytes)
}

#[cfg(target_arch = "x86_64")]
fn read_l1_data_bytes() -> Option<usize> {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    // Leaf 0 exists on every x86-64 CPU and gives the largest basic leaf.
    if __cpuid(0).eax >= 4 {
        // One subleaf per cache until a type of 0 (none): type 1 is data, level in bits 5–7.
        for sub in 0..16 {
            let r = __cpuid_count(4, sub);
            let (kind, level) = (r.eax & 0x1F, (r.eax >> 5) & 0x7);
            if kind == 0 {
                break;
            }
            if kind == 1 && level == 1 {
                let ways = (r.ebx >> 22) as usize + 1;
                let partitions = ((r.ebx >> 12) & 0x3FF) as usize + 1;
                let line = (r.ebx & 0xFFF) as usize + 1;
                let sets = r.ecx as usize + 1;
                return Some(ways * partitions * line * sets);
            }
        }
    }
    // AMD: the L1 data cache's size in KB, in the top byte of leaf 0x8000_0005's ecx.
    if __cpuid(0x8000_0000).eax >= 0x8000_0005 {
        let kb = (__cpuid(0x8000_0005).ecx >> 24) as usize;
        if kb > 0 {
            return Some(kb << 10);
        }
    }
    None
}

#[cfg(not(target_arch = "x86_64"))]
fn read_l1_data_bytes() -> Option<usize> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn family_adds_the_extended_family_only_past_base_family_15() {
        // Signatures (`cpuid` leaf 1, eax) of an AMD Zen 5 EPYC (family 26, model 2, stepping
        // 1), a Zen 4 (25, model 17), a Zen 3 (25, model 1) and an Intel Xeon (6, model 167):
        // the extended family field of the last is read as zero, whatever it holds.
        assert_eq!(family(0x00B0_0F21), 0x1A);
        assert_eq!(family(0x00A1_0F11), 0x19);
        assert_eq!(family(0x00A0_0F11), 0x19);
        assert_eq!(family(0x00FA_0671), 6);
    }

    /// The L1 data cache's size as `cpuid` gives it on x86-64: a few tens of KB, whole pages
    /// (an L2's size, or a field read from the wrong bits, falls outside).
    #[test]
    fn l1_data_cache_is_a_few_tens_of_kilobytes() {
        match l1_data_bytes() {
            Some(bytes) => {
                assert!((16 << 10..=128 << 10).contains(&bytes), "{bytes} bytes");
                assert_eq!(bytes % 4096, 0, "{bytes} bytes");
            }
            // Every x86-64 CPU has leaf 4 or AMD's leaf 0x8000_0005.
            None => assert_ne!(std::env::consts::ARCH, "x86_64"),
        }
    }
}
