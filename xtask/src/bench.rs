//! `cargo xtask bench`: placeholder replaced below.
pub fn run(_quick: bool, _compare: bool) -> Result<(), String> {
    Err("bench is not written yet".into())
}
