//! The guides in `docs/guides/` run as written: every `sh` block of every guide its index
//! lists for the local plane, in the index's order, in one bash per guide (`set -euo
//! pipefail`), against the local plane with an operator running (allowed hosts
//! `*.example.com`), `agentcard-operator` on `PATH`, `SERVER` pointing at the operator's card
//! server, `NS` at a namespace of this run and `OPERATOR_NS` at the operator's. The federation
//! guide's two clusters are the one plane under both context names, and its `eu` directory is
//! reached as another cluster's would be, through a proxy of its own (`EU_URL`, loopback:
//! `EU_RANGE`). A guide whose commands stop working fails here; a guide the index does not
//! list, or one with no shell block, fails too. Guides that need Pods run on a real node
//! (`tests/guides_node.rs`).

mod support;

use std::path::Path;

use serde_json::json;
use support::cluster::{create_namespace, kubeconfig, rand_tag, tail, SERIAL};
use support::guides::{self, Place};
use support::operator::Operator;
use support::plane::{client_for, install_crds};

#[test]
fn blocks_and_the_index_are_read_as_written() {
    let md =
        "text\n```sh\necho one\n```\n```yaml\nkind: X\n```\n```sh\necho two\necho three\n```\n";
    assert_eq!(
        guides::shell_blocks(md),
        ["echo one\n", "echo two\necho three\n"]
    );
    assert_eq!(
        guides::listed("1. [A](a.md)\n2. [B](b.md) and [ext](https://x/y.md)\n"),
        ["a.md", "b.md"]
    );
    // Every guide has a place, and each place has guides to run.
    let all = guides::all();
    assert!(all.iter().any(|g| g.place == Place::Plane));
    assert!(all.iter().any(|g| g.place == Place::Node));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_guide_runs_on_the_local_plane() {
    let _serial = SERIAL.lock().await;
    let plane_guides = guides::at(Place::Plane);
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
    let path = guides::path_with(&[Path::new(env!("CARGO_BIN_EXE_agentcard-operator"))]);
    let work = tempfile::tempdir().unwrap();
    let context = support::kubectl(kubeconfig(), &["config", "current-context"]);
    let eu = support::upstream::Proxy::start(op.server.addr, "agents.eu.example.com");
    let env = [
        ("KUBECONFIG", kubeconfig().display().to_string()),
        ("PATH", path),
        ("NS", format!("guide-{t}")),
        ("OPERATOR_NS", opns.clone()),
        ("SERVER", format!("http://{}", op.server.addr)),
        ("HQ_CONTEXT", context.trim().to_string()),
        ("EU_CONTEXT", context.trim().to_string()),
        ("EU_URL", format!("http://{}", eu.addr)),
        ("EU_RANGE", "127.0.0.0/8".to_string()),
    ];
    for guide in &plane_guides {
        let out = guide.run(work.path(), &env);
        assert!(
            out.status.success(),
            "{}",
            guides::failure(guide, &out, &format!("operator\n{}", tail(&op.logs())))
        );
    }
}
