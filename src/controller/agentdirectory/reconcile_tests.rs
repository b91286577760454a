//! The directory reconcile's request sequences against a mock API server
//! ([`crate::controller::testing`]): a new directory, an unchanged resync, an invalid edit
//! and a lost claim.

use serde_json::json;

use super::build::ingress_name;
use super::reconcile;
use crate::controller::testing::{config, directory_path, ready, Recorded, TestContext};
use crate::controller::Context;
use crate::crd::{AgentCard, AgentDirectory};

fn directory(name: &str, host: &str) -> AgentDirectory {
    serde_json::from_value(json!({
        "apiVersion": "agentcard.dev/v1alpha1",
        "kind": "AgentDirectory",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "generation": 1,
                     "resourceVersion": "10"},
        "spec": {"publish": {"host": host}}
    }))
    .expect("an AgentDirectory")
}

fn lines(requests: &[Recorded]) -> Vec<String> {
    requests.iter().map(Recorded::line).collect()
}

const STATUS: &str = "/apis/agentcard.dev/v1alpha1/agentdirectories/all/status";

fn ingress_path() -> String {
    format!(
        "/apis/networking.k8s.io/v1/namespaces/ops/ingresses/{}",
        ingress_name("all")
    )
}

/// Reconcile `dir`, then feed what was written back into the stores.
async fn reconciled(t: &mut TestContext, dir: &AgentDirectory) -> (AgentDirectory, Vec<Recorded>) {
    let stored = t.directory(dir);
    reconcile(stored, t.ctx.clone()).await.expect("reconciled");
    let requests = t.api.take();
    t.observe(None);
    let held: AgentDirectory =
        serde_json::from_value(t.api.object(&directory_path(dir)).expect("held"))
            .expect("a directory");
    t.directory(&held);
    (held, requests)
}

#[tokio::test]
async fn a_new_directory_gets_its_route_and_a_ready_status() {
    let mut t = Context::for_tests(&config());
    let (_, requests) = reconciled(&mut t, &directory("all", "agents.example.com")).await;
    assert_eq!(
        lines(&requests),
        [
            "POST /apis/networking.k8s.io/v1/namespaces/ops/ingresses",
            STATUS.replace("/apis", "PATCH /apis").as_str(),
        ],
        "{requests:#?}"
    );
    assert_eq!(
        requests[0].body["spec"]["rules"][0]["host"],
        "agents.example.com"
    );
    let status = &requests[1].body["status"];
    assert_eq!(ready(status).0, "True", "{status:#}");
    assert_eq!(status["served"]["host"], "agents.example.com");
}

#[tokio::test]
async fn an_unchanged_directory_resync_sends_no_request() {
    let mut t = Context::for_tests(&config());
    let (held, _) = reconciled(&mut t, &directory("all", "agents.example.com")).await;
    let (_, requests) = reconciled(&mut t, &held).await;
    assert_eq!(lines(&requests), Vec::<String>::new());
}

#[tokio::test]
async fn an_invalid_directory_edit_keeps_its_route_and_names_the_field() {
    let mut t = Context::for_tests(&config());
    let (held, _) = reconciled(&mut t, &directory("all", "agents.example.com")).await;
    let route = t
        .api
        .object(&ingress_path())
        .expect("the directory's Ingress");
    let mut edited = held.clone();
    edited.metadata.generation = Some(2);
    edited.spec.publish.ingress.class_name = Some("not-allowed".into());
    let (_, requests) = reconciled(&mut t, &edited).await;
    assert_eq!(
        lines(&requests),
        [STATUS.replace("/apis", "PATCH /apis")],
        "{requests:#?}"
    );
    let status = &requests[0].body["status"];
    let (state, _, message) = ready(status);
    assert_eq!(state, "False");
    assert!(
        message.contains("spec.publish.ingress.className"),
        "{message}"
    );
    // Its route stays as it was.
    assert_eq!(t.api.object(&ingress_path()), Some(route));
}

#[tokio::test]
async fn a_directory_whose_host_a_card_holds_loses_it_and_its_route() {
    let mut t = Context::for_tests(&config());
    let (held, _) = reconciled(&mut t, &directory("all", "agents.example.com")).await;
    // A card holds team.example.com; the directory moves there.
    let card: AgentCard = serde_json::from_value(json!({
        "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentCard",
        "metadata": {"name": "c", "namespace": "team-b", "uid": "uid-c", "generation": 1},
        "spec": {"publish": {"host": "team.example.com"}, "card": {
            "name": "C", "description": "D", "version": "1",
            "supportedInterfaces": [{"url": "https://team.example.com/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
            "capabilities": {}, "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
            "skills": [{"id": "s", "name": "S", "description": "d", "tags": ["t"]}]}}
    }))
    .expect("a card");
    let stored = t.card(&card);
    crate::controller::agentcard::reconcile(stored, t.ctx.clone())
        .await
        .expect("the card reconciled");
    t.observe(Some(&card));
    t.api.take();
    let mut moved = held.clone();
    moved.metadata.generation = Some(2);
    moved.spec.publish.host = "team.example.com".into();
    let (_, requests) = reconciled(&mut t, &moved).await;
    assert_eq!(
        lines(&requests),
        [
            STATUS.replace("/apis", "PATCH /apis"),
            format!("DELETE {}", ingress_path()),
        ],
        "{requests:#?}"
    );
    let status = &requests[0].body["status"];
    let (state, reason, message) = ready(status);
    assert_eq!((state.as_str(), reason.as_str()), ("False", "HostConflict"));
    assert!(message.contains("team-b/c"), "{message}");
    assert!(status["served"].is_null(), "{status:#}");
}
