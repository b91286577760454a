//! Faults during a bulk apply, on planes of their own: the API server killed and restarted,
//! etcd killed and restarted, the lease holder killed. In each, a load of cards is being
//! applied when the fault strikes (the applier retries what the API refused, as `kubectl` in
//! a CI job would), and at the end nothing is lost: every card Ready, every served card's bytes
//! equal its `status.contentHash`, one ConfigMap and one Ingress per card, none orphaned.
// The `SERIAL` guard is held for a whole test on purpose (one plane-heavy test at a time);
// each test has its runtime to itself.
#![allow(clippy::await_holding_lock)]

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentcard_operator::contract::{content_hash, LABEL_MANAGED_BY, MANAGER, PATH_CARD};
use agentcard_operator::crd::AgentCard;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use support::operator::Operator;
use support::plane::{client_for, install_crds, OwnPlane};

const CARDS: usize = 60;

/// One scenario at a time: each runs a plane of its own, and three at once on two cores would
/// measure the machine rather than the operator.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}
const NS: &str = "bulk";
const OPNS: &str = "agentcard-system";

fn host(i: usize) -> String {
    format!("agent-{i}.bulk.agents.test")
}

async fn prepare(plane: &OwnPlane) -> Client {
    let client = client_for(&plane.kubeconfig()).await;
    install_crds(&client).await;
    for ns in [NS, OPNS] {
        support::cluster::create_namespace(&client, ns, json!({})).await;
    }
    client
}

/// Apply `CARDS` cards, 6 at a time, each retried until the API accepts it; `done` counts them.
async fn bulk_apply(client: Client, done: Arc<AtomicUsize>) {
    let api: Api<AgentCard> = Api::namespaced(client, NS);
    futures::stream::iter(0..CARDS)
        .for_each_concurrent(6, |i| {
            let (api, done) = (api.clone(), done.clone());
            async move {
                let mut m = support::cluster::card(&format!("agent-{i}"), &host(i), "");
                m["spec"]["card"]["skills"][0]["id"] = json!(format!("skill-{i}"));
                let deadline = Instant::now() + Duration::from_secs(120);
                while let Err(e) = api
                    .patch(
                        &format!("agent-{i}"),
                        &PatchParams::apply("ci-job").force(),
                        &Patch::Apply(&m),
                    )
                    .await
                {
                    assert!(Instant::now() < deadline, "agent-{i} never applied: {e}");
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                done.fetch_add(1, Ordering::SeqCst);
            }
        })
        .await;
}

/// Run the bulk apply, calling `fault` once `CARDS / 3` cards are in.
async fn with_fault(client: &Client, fault: impl FnOnce()) {
    let done = Arc::new(AtomicUsize::new(0));
    let load = tokio::spawn(bulk_apply(client.clone(), done.clone()));
    while done.load(Ordering::SeqCst) < CARDS / 3 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let started = Instant::now();
    tokio::task::block_in_place(fault);
    eprintln!(
        "fault after {} cards applied ({:?} down)",
        CARDS / 3,
        started.elapsed()
    );
    load.await.unwrap();
}

/// Every card Ready and served as its status says; one ConfigMap and one Ingress per card.
async fn nothing_lost(client: &Client, op: &Operator) {
    let cards: Api<AgentCard> = Api::namespaced(client.clone(), NS);
    let started = Instant::now();
    loop {
        let list = cards.list(&ListParams::default()).await;
        let ready = list
            .as_ref()
            .map_or(0, |l| l.items.iter().filter(|c| support::ready(c)).count());
        if ready == CARDS {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "{ready} of {CARDS} cards Ready after 120 s\nlease and JWKS lines:\n{}\nlog end:\n{}",
            op.logs()
                .lines()
                .filter(|l| l.contains("lease") || l.contains("JWKS") || l.contains("synced"))
                .collect::<Vec<_>>()
                .join("\n"),
            support::cluster::tail(&op.logs())
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!(
        "all {CARDS} Ready {:?} after the load ended",
        started.elapsed()
    );
    let list = cards.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(list.len(), CARDS);
    for c in &list {
        let status = c.status.clone().unwrap();
        let h = &c.spec.publish.host;
        let hash = status.content_hash.clone().unwrap();
        let served = support::http::eventually(Duration::from_secs(20), || {
            let r = op.get(h, PATH_CARD);
            (r.status == 200 && content_hash(&r.body) == hash).then_some(())
        });
        assert!(served.is_some(), "{h}: not served as its status says");
    }
    let uids: std::collections::BTreeSet<String> = list.iter().filter_map(|c| c.uid()).collect();
    let cms: Vec<ConfigMap> = Api::<ConfigMap>::namespaced(client.clone(), NS)
        .list(&ListParams::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGER}")))
        .await
        .unwrap()
        .items;
    assert_eq!(cms.len(), CARDS, "one ConfigMap per card");
    for cm in &cms {
        let owner = cm.owner_references().first().map(|o| o.uid.clone());
        assert!(
            owner.is_some_and(|u| uids.contains(&u)),
            "orphaned ConfigMap {}",
            cm.name_any()
        );
    }
    let ingresses = Api::<Ingress>::namespaced(client.clone(), OPNS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(ingresses.len(), CARDS, "one Ingress per card");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_killed_and_restarted_during_a_bulk_apply_loses_nothing() {
    let _serial = serial();
    let plane = OwnPlane::start();
    let client = prepare(&plane).await;
    let op = Operator::start_on(&plane.kubeconfig(), OPNS, Some(NS), &[]);
    with_fault(&client, || {
        plane.restart("kube-apiserver", Duration::from_secs(3))
    })
    .await;
    nothing_lost(&client, &op).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_killed_and_restarted_during_a_bulk_apply_loses_nothing() {
    let _serial = serial();
    let plane = OwnPlane::start();
    let client = prepare(&plane).await;
    let op = Operator::start_on(&plane.kubeconfig(), OPNS, Some(NS), &[]);
    with_fault(&client, || plane.restart("etcd", Duration::from_secs(3))).await;
    nothing_lost(&client, &op).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_holder_killed_during_a_bulk_apply_the_other_finishes() {
    let _serial = serial();
    let plane = OwnPlane::start();
    let client = prepare(&plane).await;
    let kubeconfig = plane.kubeconfig();
    let mut a = Operator::start_on(
        &kubeconfig,
        OPNS,
        Some(NS),
        &["--lease-duration", "6", "--identity", "op-a"],
    );
    let b = Operator::start_on(
        &kubeconfig,
        OPNS,
        Some(NS),
        &["--lease-duration", "6", "--identity", "op-b"],
    );
    // Whoever holds the lease now is killed; the other must finish.
    let holder = support::operator::lease_holder(&client, OPNS).await;
    if holder == "op-a" {
        with_fault(&client, || a.kill()).await;
        nothing_lost(&client, &b).await;
    } else {
        let mut b = b;
        with_fault(&client, || b.kill()).await;
        nothing_lost(&client, &a).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_cannot_renew_stops_leading_before_its_lease_ends_then_leads_again() {
    let _serial = serial();
    let plane = OwnPlane::start();
    let client = prepare(&plane).await;
    let op = Operator::start_on(
        &plane.kubeconfig(),
        OPNS,
        Some(NS),
        &["--lease-duration", "6", "--identity", "op-a"],
    );
    assert_eq!(support::operator::lease_holder(&client, OPNS).await, "op-a");
    // The Lease names op-a as soon as its manager wrote it; the process leads once it has
    // seen that (a kill in between would test a process that never led).
    let leading = support::plane::wait_for(Duration::from_secs(10), || {
        std::future::ready(op.logs().contains("acquired the lease"))
    })
    .await;
    assert!(leading.is_ok(), "never led:\n{}", op.logs());
    // The API server is gone for twice the lease duration: another replica could take the
    // lease after 6 s, so this one must have stopped its controllers by then.
    let started = Instant::now();
    let killed = plane.kill("kube-apiserver");
    let stepped_down = support::plane::wait_for(Duration::from_secs(10), || {
        std::future::ready(op.logs().contains("no longer leading"))
    })
    .await;
    assert!(
        stepped_down.is_ok(),
        "still leading without renewing:\n{}",
        op.logs()
    );
    eprintln!(
        "stepped down {:?} after the API server went",
        started.elapsed()
    );
    tokio::time::sleep(Duration::from_secs(12).saturating_sub(started.elapsed())).await;
    plane.revive(killed);
    // Back: it reads the Lease again, leads, and publishes.
    let client = client_for(&plane.kubeconfig()).await;
    let cards: Api<AgentCard> = Api::namespaced(client.clone(), NS);
    let card = support::cluster::card("after", &host(0), "");
    let applied = support::plane::wait_for(Duration::from_secs(60), || async {
        cards
            .patch(
                "after",
                &PatchParams::apply("test").force(),
                &Patch::Apply(&card),
            )
            .await
            .is_ok()
    })
    .await;
    assert!(applied.is_ok(), "the API server did not come back");
    support::operator::wait_card(
        &cards,
        "after",
        &op,
        "Ready after the outage",
        support::ready,
    )
    .await;
    assert!(
        op.logs().matches("acquired the lease").count() >= 2,
        "{}",
        op.logs()
    );
}
