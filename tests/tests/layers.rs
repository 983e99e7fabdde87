//! The layer rule of ARCHITECTURE.md, checked from the manifests: density ← generative ← ssl-em ←
//! ssl-cli, nothing depends upward or sideways.

#![allow(clippy::unwrap_used)]

fn workspace_deps(krate: &str) -> Vec<String> {
    let path = tests::workspace_root()
        .join("crates")
        .join(krate)
        .join("Cargo.toml");
    let text = std::fs::read_to_string(path).unwrap();
    let mut in_deps = false;
    let mut out = Vec::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            in_deps =
                t == "[dependencies]" || t == "[dev-dependencies]" || t == "[build-dependencies]";
            continue;
        }
        if in_deps
            && let Some(name) = t.split(['.', '=', ' ']).next()
            && ["density", "generative", "ssl-em", "ssl-cli"].contains(&name)
        {
            out.push(name.to_string());
        }
    }
    out
}

#[test]
fn crates_depend_only_on_lower_layers() {
    let layers = ["density", "generative", "ssl-em", "ssl-cli"];
    for (i, krate) in layers.iter().enumerate() {
        for dep in workspace_deps(krate) {
            let j = layers.iter().position(|l| *l == dep).unwrap();
            assert!(j < i, "{krate} depends on {dep}, which is not below it");
        }
    }
    assert!(workspace_deps("density").is_empty());
    assert_eq!(workspace_deps("generative"), vec!["density"]);
}
