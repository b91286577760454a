//! The guides of `docs/guides/`, read as the tests run them: the index's order, where each
//! guide runs (the local plane, or a real node for guides that need Pods: `<!-- runs on: a
//! real node -->` in the guide), and every `sh` block of a guide in one bash
//! (`set -euo pipefail`), so a guide whose commands stop working fails its test.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The marker a guide carries when its commands need Pods (a real node) to run.
pub const ON_A_NODE: &str = "<!-- runs on: a real node -->";

/// Where a guide's commands run in the tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// The local control plane with an operator process (`tests/guides.rs`).
    Plane,
    /// A real node with the chart's Pods (`tests/guides_node.rs`).
    Node,
}

/// One guide the index lists.
#[derive(Clone, Debug)]
pub struct Guide {
    /// Its file name in `docs/guides/`.
    pub file: String,
    /// Its text.
    pub text: String,
    /// Where it runs.
    pub place: Place,
}

impl Guide {
    /// Its `sh` blocks as one script, failing at the first failing command.
    pub fn script(&self) -> String {
        let blocks = shell_blocks(&self.text);
        assert!(
            !blocks.is_empty(),
            "{} has no shell block to run",
            self.file
        );
        format!("set -euo pipefail\n{}", blocks.concat())
    }

    /// Run its script in `cwd` with `env` set (and nothing else changed); its output.
    pub fn run(&self, cwd: &Path, env: &[(&str, String)]) -> Output {
        let mut cmd = Command::new("bash");
        cmd.args(["-c", &self.script()]).current_dir(cwd);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().expect("running bash")
    }
}

/// The directory of the guides.
pub fn dir() -> PathBuf {
    super::root().join("docs/guides")
}

/// The guides the index lists, in its order, after checking the index lists exactly the
/// guides there are.
pub fn all() -> Vec<Guide> {
    let dir = dir();
    let index = std::fs::read_to_string(dir.join("README.md")).unwrap();
    let files = listed(&index);
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".md") && n != "README.md")
        .collect();
    on_disk.sort();
    let mut indexed = files.clone();
    indexed.sort();
    assert_eq!(
        indexed, on_disk,
        "docs/guides/README.md lists other guides than there are"
    );
    files
        .into_iter()
        .map(|file| {
            let text = std::fs::read_to_string(dir.join(&file)).unwrap();
            let place = if text.contains(ON_A_NODE) {
                Place::Node
            } else {
                Place::Plane
            };
            Guide { file, text, place }
        })
        .collect()
}

/// The guides that run at `place`, in the index's order.
pub fn at(place: Place) -> Vec<Guide> {
    all().into_iter().filter(|g| g.place == place).collect()
}

/// `PATH` with the directories of `bins` first.
pub fn path_with(bins: &[&Path]) -> String {
    let mut dirs: Vec<String> = bins
        .iter()
        .map(|b| b.parent().unwrap().display().to_string())
        .collect();
    dirs.push(std::env::var("PATH").unwrap_or_default());
    dirs.join(":")
}

/// A guide's failure, with what it printed and the `context` (an operator's log).
pub fn failure(guide: &Guide, out: &Output, context: &str) -> String {
    format!(
        "{} failed:\n--- stdout\n{}\n--- stderr\n{}\n--- {context}",
        guide.file,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    )
}

/// The `sh` blocks of a Markdown document, in order.
pub fn shell_blocks(markdown: &str) -> Vec<String> {
    fenced(markdown, &["sh", "bash"])
}

/// The fenced blocks of a Markdown document whose info string is one of `langs`, in order.
pub fn fenced(markdown: &str, langs: &[&str]) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        let l = line.trim_start();
        match &mut current {
            None => {
                if l.strip_prefix("```")
                    .is_some_and(|lang| langs.contains(&lang))
                {
                    current = Some(String::new());
                }
            }
            Some(_) if l == "```" => blocks.extend(current.take()),
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
        }
    }
    blocks
}

/// The chart values files the guides show: `yaml` blocks whose first line is
/// `# <file>.yaml: chart values`, as `(guide, file, text)`.
pub fn chart_values() -> Vec<(String, String, String)> {
    all()
        .into_iter()
        .flat_map(|g| {
            fenced(&g.text, &["yaml"])
                .into_iter()
                .filter_map(|b| {
                    let first = b.lines().next()?;
                    let file = first.strip_prefix("# ")?.strip_suffix(": chart values")?;
                    Some((g.file.clone(), file.to_string(), b.clone()))
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The guides an index lists, in its order (`[title](file.md)` links).
pub fn listed(index: &str) -> Vec<String> {
    index
        .lines()
        .filter_map(|l| {
            let start = l.find("](")? + 2;
            let end = l[start..].find(')')? + start;
            let target = &l[start..end];
            (target.ends_with(".md") && !target.contains('/')).then(|| target.to_string())
        })
        .collect()
}
