//! The guides in `docs/guides/` run as written: every `sh` block of every guide its index
//! lists, in the index's order, in one bash per guide (`set -euo pipefail`), against the local
//! plane with an operator running (allowed hosts `*.example.com`), `agentcard-operator` on
//! `PATH`, `SERVER` pointing at the operator's card server, `NS` at a namespace of this run
//! and `OPERATOR_NS` at the operator's. A guide whose commands stop working fails here; a
//! guide the index does not list, or one with no shell block, fails too.

mod support;

use std::path::Path;
use std::process::Command;

use serde_json::json;
use support::cluster::{create_namespace, kubeconfig, rand_tag, tail, SERIAL};
use support::operator::Operator;
use support::plane::{client_for, install_crds};

/// The `sh` blocks of a Markdown document, in order.
fn shell_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match (&mut current, line.trim_start()) {
            (None, l) if l == "```sh" || l == "```bash" => current = Some(String::new()),
            (Some(_), "```") => blocks.extend(current.take()),
            (Some(block), _) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}

/// The guides the index lists, in its order (`[title](file.md)` links).
fn listed(index: &str) -> Vec<String> {
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

#[test]
fn blocks_and_the_index_are_read_as_written() {
    let md =
        "text\n```sh\necho one\n```\n```yaml\nkind: X\n```\n```sh\necho two\necho three\n```\n";
    assert_eq!(shell_blocks(md), ["echo one\n", "echo two\necho three\n"]);
    assert_eq!(
        listed("1. [A](a.md)\n2. [B](b.md) and [ext](https://x/y.md)\n"),
        ["a.md", "b.md"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_guide_runs_on_the_local_plane() {
    let _serial = SERIAL.lock().await;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join("docs/guides");
    let index = std::fs::read_to_string(dir.join("README.md")).unwrap();
    let guides = listed(&index);
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".md") && n != "README.md")
        .collect();
    on_disk.sort();
    let mut indexed = guides.clone();
    indexed.sort();
    assert_eq!(
        indexed, on_disk,
        "docs/guides/README.md lists other guides than there are"
    );

    let admin = client_for(kubeconfig()).await;
    install_crds(&admin).await;
    let t = rand_tag();
    let opns = format!("ops-{t}");
    create_namespace(&admin, &opns, json!({})).await;
    let op = Operator::start_on(
        kubeconfig(),
        &opns,
        None,
        &["--allowed-hosts", "*.example.com"],
    );
    let bin = Path::new(env!("CARGO_BIN_EXE_agentcard-operator"))
        .parent()
        .unwrap()
        .to_path_buf();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let work = tempfile::tempdir().unwrap();
    let ns = format!("guide-{t}");
    for guide in &guides {
        let text = std::fs::read_to_string(dir.join(guide)).unwrap();
        let blocks = shell_blocks(&text);
        assert!(!blocks.is_empty(), "{guide} has no shell block to run");
        let script = format!("set -euo pipefail\n{}", blocks.concat());
        let out = Command::new("bash")
            .args(["-c", &script])
            .current_dir(work.path())
            .env("KUBECONFIG", kubeconfig())
            .env("PATH", &path)
            .env("NS", &ns)
            .env("OPERATOR_NS", &opns)
            .env("SERVER", format!("http://{}", op.server.addr))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{guide} failed:\n--- stdout\n{}\n--- stderr\n{}\n--- operator\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            tail(&op.logs())
        );
    }
}
