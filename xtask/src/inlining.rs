//! `cargo xtask check-inlining`: no SIMD intrinsic of `core::arch` is compiled out of line in a
//! release binary.
//!
//! Why: an intrinsic is inlined only into a function compiled with its target feature. The
//! kernels run inside pulp's `#[target_feature]` functions and are `#[inline(always)]` all the
//! way down; one helper without the attribute (in c09db9b, a trait's default method) is
//! compiled once for the baseline CPU, and each intrinsic in it becomes a call. The results
//! stay the same, so no test sees it, but two-class predictions took 8× as long. A release
//! binary's symbol table names every such out-of-line intrinsic, whatever the machine, with no
//! timing: this check fails on any of them.

use object::{Object, ObjectSymbol, SymbolKind};

/// Intrinsics that may be out of line: each is called once per dispatch, outside any target
/// feature, by design (`_mm256_zeroupper` as pulp leaves an AVX function, `_xgetbv` by the CPU
/// feature detection).
const ALLOWED: [&str; 2] = ["_mm256_zeroupper", "_xgetbv"];

/// Checks `binaries` (this executable when empty); Err names each out-of-line intrinsic.
pub fn run(binaries: &[String]) -> Result<(), String> {
    let paths: Vec<std::path::PathBuf> = if binaries.is_empty() {
        vec![std::env::current_exe().map_err(|e| format!("this executable's path: {e}"))?]
    } else {
        binaries.iter().map(Into::into).collect()
    };
    if cfg!(debug_assertions) {
        return Err("check-inlining checks a release build: run it as `cargo xtask` does".into());
    }
    let mut found = Vec::new();
    for path in &paths {
        let data = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let file = object::File::parse(&*data).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut functions = 0;
        for symbol in file.symbols() {
            if symbol.kind() != SymbolKind::Text || !symbol.is_definition() {
                continue;
            }
            functions += 1;
            let Ok(name) = symbol.name() else { continue };
            if let Some(intrinsic) = out_of_line_intrinsic(name) {
                found.push(format!("{}: {intrinsic} ({name})", path.display()));
            }
        }
        if functions == 0 {
            return Err(format!(
                "{}: no function symbols (a stripped binary cannot be checked)",
                path.display()
            ));
        }
        println!("{}: {functions} functions read", path.display());
    }
    if found.is_empty() {
        println!("no SIMD intrinsic is compiled out of line");
        Ok(())
    } else {
        Err(format!(
            "{} SIMD intrinsics compiled out of line (a helper on the kernels' path lacks #[inline(always)]):\n  {}",
            found.len(),
            found.join("\n  ")
        ))
    }
}

/// The intrinsic's name when `symbol` (mangled, legacy or v0) is a `core::arch` function not in
/// [`ALLOWED`].
fn out_of_line_intrinsic(symbol: &str) -> Option<&str> {
    let at = symbol.find("core_arch")?;
    // The path's last part that names an intrinsic (`_mm…`, `_xgetbv`, …).
    let rest = &symbol[at..];
    let start = rest.find("_mm").or_else(|| rest.find("_x"))?;
    let name = &rest[start..];
    let end = name
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(name.len());
    // Legacy mangling ends the part with a hash segment (`17h…E`): cut at the length prefix.
    let name = trim_hash(&name[..end]);
    (!ALLOWED.contains(&name)).then_some(name)
}

/// `_mm512_fmadd_pd17h0123456789abcdefE` → `_mm512_fmadd_pd`: drops a legacy hash segment.
fn trim_hash(name: &str) -> &str {
    match name.rfind("17h") {
        Some(i) if name.len() - i == 3 + 16 || name.len() - i == 3 + 16 + 1 => &name[..i],
        _ => name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_out_of_line_intrinsics_and_lets_the_allowed_ones_pass() {
        let legacy = "_ZN4core9core_arch3x867avx512f15_mm512_fmadd_pd17h0123456789abcdefE";
        assert_eq!(out_of_line_intrinsic(legacy), Some("_mm512_fmadd_pd"));
        let v0 = "_RNvNtNtNtCsgEmfK2I1SDS_4core9core_arch3x867avx512f16__mm512_scalef_pd";
        assert_eq!(out_of_line_intrinsic(v0), Some("_mm512_scalef_pd"));
        let allowed = "_ZN4core9core_arch3x863avx16_mm256_zeroupper17h0123456789abcdefE";
        assert_eq!(out_of_line_intrinsic(allowed), None);
        let xgetbv = "_ZN4core9core_arch3x865xsave7_xgetbv17h0123456789abcdefE";
        assert_eq!(out_of_line_intrinsic(xgetbv), None);
        assert_eq!(
            out_of_line_intrinsic("_ZN7density3exp9exp_f64s17h0123456789abcdefE"),
            None
        );
    }
}
