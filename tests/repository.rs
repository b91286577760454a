//! The repository stands alone, as a user's clone does: the generated CRDs are what the binary
//! prints (in `crds/` and in the chart), and no file names a path outside the repository (a
//! clone has nothing beside it, so a test, script or doc that reads one fails for every user).

mod support;

use std::path::{Path, PathBuf};

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
