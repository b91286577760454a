//! The repository stands alone, as a user's clone does: the generated CRDs are what the binary
//! prints (in `crds/` and in the chart), no file names a path outside the repository (a clone
//! has nothing beside it, so a test, script or doc that reads one fails for every user), and the
//! dependency tree keeps to `deny.toml` (licenses, banned and duplicate crates, sources), checked
//! offline from `cargo metadata` as `cargo deny check licenses bans sources` would.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

/// What `agentcard-operator crds` prints.
fn generated_crds() -> Vec<u8> {
    let out = support::run(
        {
            let mut c = support::bin();
            c.arg("crds");
            c
        },
        None,
    );
    assert!(out.status.success(), "agentcard-operator crds failed");
    out.stdout
}

#[test]
fn crds_and_the_charts_copy_are_what_the_binary_generates() {
    let generated = generated_crds();
    let mut files: Vec<PathBuf> = std::fs::read_dir(support::root().join("crds"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let in_crds: Vec<u8> = files
        .iter()
        .flat_map(|f| std::fs::read(f).unwrap())
        .collect();
    assert!(
        in_crds == generated,
        "crds/ differs from `agentcard-operator crds`: regenerate it with \
         `cargo run -- crds > crds/agentcard.dev.yaml`"
    );
    let chart =
        std::fs::read(support::root().join("charts/agentcard-operator/files/crds.yaml")).unwrap();
    assert!(
        chart == generated,
        "charts/agentcard-operator/files/crds.yaml differs from `agentcard-operator crds`: \
         regenerate it with `cargo run -- crds > charts/agentcard-operator/files/crds.yaml`"
    );
}

/// Every file of the repository that a user's clone has (no build output, no VCS data).
fn repository_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        let name = entry.file_name();
        if name == ".git" || name == "target" || name == ".cache" {
            continue;
        }
        if entry.file_type().unwrap().is_dir() {
            repository_files(&path, out);
        } else {
            out.push(path);
        }
    }
}

#[test]
fn nothing_in_the_repository_names_a_path_beside_it() {
    // Spelled in two parts so this file does not name it either.
    let needles = [
        format!("..{}shared", '/'),
        format!("..{}shared", '\\'),
        format!("\"..\"){}join(\"shared", '.'),
    ];
    let mut files = Vec::new();
    repository_files(&support::root(), &mut files);
    assert!(files.len() > 50, "walked too little: {files:?}");
    let mut found = Vec::new();
    for file in &files {
        let Ok(bytes) = std::fs::read(file) else {
            continue;
        };
        let text = String::from_utf8_lossy(&bytes);
        for (i, line) in text.lines().enumerate() {
            if needles.iter().any(|n| line.contains(n.as_str())) {
                let rel = file.strip_prefix(support::root()).unwrap_or(file);
                found.push(format!("{}:{}: {}", rel.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "files name a directory beside the repository, which a user's clone does not have:\n{}",
        found.join("\n")
    );
}

/// The packages the workspace resolves to for `target` (normal, build and dev dependencies, the
/// default features), from `cargo metadata`: `(name, version, license, source)`.
fn resolved(target: &str) -> Vec<(String, String, Option<String>, Option<String>)> {
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--locked",
            "--filter-platform",
            target,
        ])
        .current_dir(support::root())
        .output()
        .expect("running cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).unwrap();
    let in_resolve: BTreeSet<&str> = meta["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap())
        .collect();
    meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| in_resolve.contains(p["id"].as_str().unwrap()))
        .map(|p| {
            let s = |k: &str| p[k].as_str().map(str::to_string);
            (
                s("name").unwrap(),
                s("version").unwrap(),
                s("license"),
                s("source"),
            )
        })
        .collect()
}

#[test]
fn the_dependency_tree_keeps_to_deny_toml_licenses_bans_and_sources() {
    let deny: toml::Table =
        toml::from_str(&std::fs::read_to_string(support::root().join("deny.toml")).unwrap())
            .expect("deny.toml");
    let strings = |v: &toml::Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect()
    };
    let allowed: BTreeSet<String> = strings(&deny["licenses"]["allow"]).into_iter().collect();
    let crates_of = |key: &str| -> BTreeSet<String> {
        deny["bans"][key]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                assert!(
                    !e["reason"].as_str().unwrap_or_default().is_empty(),
                    "deny.toml bans.{key}: {e} gives no reason"
                );
                e["crate"].as_str().unwrap().to_string()
            })
            .collect()
    };
    let banned = crates_of("deny");
    let skipped = crates_of("skip");
    let registries = strings(&deny["sources"]["allow-registry"]);
    let mut problems = Vec::new();
    let mut used_skips = BTreeSet::new();
    let mut counted = 0;
    for target in strings(&deny["graph"]["targets"]) {
        let packages = resolved(&target);
        counted = counted.max(packages.len());
        let mut versions: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for (name, version, license, source) in &packages {
            let at = format!("{name}@{version}");
            // Licenses: the expression must be satisfiable with the allowed ones alone.
            match license
                .as_deref()
                .map(|l| spdx::Expression::parse_mode(l, spdx::ParseMode::LAX))
            {
                None => problems.push(format!("{at}: no license field")),
                Some(Err(e)) => problems.push(format!("{at}: license {license:?}: {e}")),
                Some(Ok(expr)) => {
                    if !expr.evaluate(|req| allowed.contains(&req.to_string())) {
                        problems.push(format!(
                            "{at}: license {} is not allowed",
                            license.as_deref().unwrap_or_default()
                        ));
                    }
                }
            }
            if banned.contains(name) {
                problems.push(format!("{at}: banned by deny.toml"));
            }
            // Sources: crates.io, or a path of this repository (no source).
            if let Some(source) = source {
                let registry = source.strip_prefix("registry+");
                if !registry.is_some_and(|r| registries.iter().any(|a| a == r)) {
                    problems.push(format!("{at}: from {source}, not an allowed registry"));
                }
            }
            if skipped.contains(&at) {
                used_skips.insert(at.clone());
                continue;
            }
            versions.entry(name).or_default().insert(version);
        }
        for (name, vs) in versions {
            if vs.len() > 1 {
                problems.push(format!(
                    "{name}: versions {vs:?} on {target} (one, or a skip in deny.toml saying who needs the other)"
                ));
            }
        }
    }
    for skip in skipped.difference(&used_skips) {
        problems.push(format!(
            "deny.toml skips {skip}, which the tree no longer holds"
        ));
    }
    assert!(
        problems.is_empty(),
        "the dependency tree breaks deny.toml:\n  {}",
        problems.join("\n  ")
    );
    assert!(
        counted > 100,
        "cargo metadata resolved only {counted} packages"
    );
    eprintln!("{counted} packages keep to deny.toml");
}
