//! The card reconcile's request sequences against a mock API server
//! ([`crate::controller::testing`]): a new card, an unchanged resync, an invalid edit and a
//! lost claim.

use std::sync::Arc;

use serde_json::json;

use super::card::{configmap_name, ingress_name};
use super::reconcile;
use crate::a2a::jws::verify_card;
use crate::a2a::parse::{card_from_slice, Strictness};
use crate::a2a::Jwks;
use crate::controller::testing::{card_path, config, ready, Recorded, TestContext};
use crate::controller::Context;
use crate::crd::AgentCard;

fn card(ns: &str, name: &str, host: &str, created: &str) -> AgentCard {
    serde_json::from_value(json!({
        "apiVersion": "agentcard.dev/v1alpha1",
        "kind": "AgentCard",
        "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{ns}-{name}"),
                     "generation": 1, "resourceVersion": "10", "creationTimestamp": created},
        "spec": {
            "publish": {"host": host},
            "card": {
                "name": "Weather", "description": "Forecasts", "version": "1.0.0",
                "supportedInterfaces": [{"url": format!("https://{host}/a2a"), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
                "capabilities": {}, "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
                "skills": [{"id": "forecast", "name": "Forecast", "description": "d", "tags": ["weather"]}]
            }
        }
    }))
    .expect("an AgentCard")
}

/// team-a's weather card on its own host.
fn weather() -> AgentCard {
    card(
        "team-a",
        "weather",
        "weather.example.com",
        "2026-12-01T00:00:00Z",
    )
}

/// The requests that are not Events, as `METHOD path` lines.
fn writes(requests: &[Recorded]) -> Vec<String> {
    requests
        .iter()
        .filter(|r| !r.path.contains("/events"))
        .map(Recorded::line)
        .collect()
}

/// The Events' reasons, in order.
fn events(requests: &[Recorded]) -> Vec<String> {
    requests
        .iter()
        .filter(|r| r.path.contains("/events") && r.method == "POST")
        .map(|r| r.body["reason"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// A new card and what the first reconcile writes, fed back into the stores.
async fn published(t: &mut TestContext, c: &AgentCard) -> Arc<AgentCard> {
    let stored = t.card(c);
    reconcile(stored, t.ctx.clone()).await.expect("reconciled");
    t.observe(Some(c)).expect("the card with its status")
}

#[tokio::test]
async fn a_new_card_is_written_signed_routed_and_reported_ready_once() {
    let mut t = Context::for_tests(&config());
    let c = weather();
    let stored = t.card(&c);
    reconcile(stored, t.ctx.clone()).await.expect("reconciled");
    let requests = t.api.take();
    assert_eq!(
        writes(&requests),
        [
            "POST /api/v1/namespaces/team-a/configmaps",
            "POST /apis/networking.k8s.io/v1/namespaces/ops/ingresses",
            "POST /apis/apps/v1/namespaces/team-a/controllerrevisions",
            "PATCH /apis/agentcard.dev/v1alpha1/namespaces/team-a/agentcards/weather/status",
        ],
        "{requests:#?}"
    );
    assert_eq!(events(&requests), ["Published"]);
    // The bytes served are kept as revision 1, owned by the card, and the status says so.
    let revision = &requests[2].body;
    assert_eq!(revision["revision"], 1);
    assert_eq!(
        revision["metadata"]["ownerReferences"][0]["kind"],
        "AgentCard"
    );
    assert_eq!(
        revision["data"]["document"], requests[0].body["data"]["agent-card.json"],
        "the revision holds the exact bytes served"
    );
    assert_eq!(requests[3].body["status"]["revision"], 1);

    // The ConfigMap holds the card, signed with the published key over its canonical form.
    let cm = &requests[0].body;
    let served = cm["data"]["agent-card.json"]
        .as_str()
        .expect("the card's bytes");
    let parsed = card_from_slice(served.as_bytes(), Strictness::Lenient).expect("a card");
    let verified = verify_card(&parsed.card, &Jwks::from_signing_keys([&t.key])).expect("signed");
    assert_eq!(verified.kid, t.key.kid());
    // The Ingress routes the card's host to the card server.
    let ingress = &requests[1].body;
    assert_eq!(ingress["spec"]["rules"][0]["host"], "weather.example.com");
    // The status says Ready and what is served, for the generation it saw.
    let status = &requests[3].body["status"];
    assert_eq!(ready(status).0, "True", "{status:#}");
    assert_eq!(status["served"]["host"], "weather.example.com");
    assert_eq!(status["observedGeneration"], 1);
}

#[tokio::test]
async fn an_unchanged_resync_sends_no_request() {
    let mut t = Context::for_tests(&config());
    let c = weather();
    let seen = published(&mut t, &c).await;
    t.api.take();
    reconcile(seen.clone(), t.ctx.clone())
        .await
        .expect("reconciled");
    assert_eq!(
        t.api.take().iter().map(Recorded::line).collect::<Vec<_>>(),
        Vec::<String>::new()
    );
    // Again, as the hourly resync would: still nothing.
    reconcile(seen, t.ctx.clone()).await.expect("reconciled");
    assert!(t.api.take().is_empty());
}

#[tokio::test]
async fn an_invalid_edit_keeps_the_last_good_card_and_says_which_field() {
    let mut t = Context::for_tests(&config());
    let c = weather();
    let seen = published(&mut t, &c).await;
    let cm_path = format!(
        "/api/v1/namespaces/team-a/configmaps/{}",
        configmap_name(&c)
    );
    let good = t.api.object(&cm_path).expect("the published ConfigMap");
    t.api.take();
    let mut edited = (*seen).clone();
    edited.metadata.generation = Some(2);
    edited.metadata.resource_version = Some("20".into());
    if let Some(card) = edited.spec.card.as_mut() {
        card.skills[0].id = String::new();
    }
    let stored = t.card(&edited);
    reconcile(stored, t.ctx.clone()).await.expect("reconciled");
    let requests = t.api.take();
    // Only the status: no ConfigMap or Ingress is written or deleted.
    assert_eq!(
        writes(&requests),
        ["PATCH /apis/agentcard.dev/v1alpha1/namespaces/team-a/agentcards/weather/status"],
        "{requests:#?}"
    );
    assert_eq!(
        events(&requests).len(),
        1,
        "one Warning Event on the transition"
    );
    let status = &requests
        .iter()
        .find(|r| r.path.ends_with("/status"))
        .expect("a status write")
        .body["status"];
    let (state, _, message) = ready(status);
    assert_eq!(state, "False");
    assert!(message.contains("skills[0].id"), "{message}");
    assert_eq!(status["observedGeneration"], 2);
    // The last good card is still what the server holds, and what the status says is served.
    assert_eq!(
        status["served"]["host"], "weather.example.com",
        "{status:#}"
    );
    let kept = t.api.object(&cm_path).expect("the ConfigMap is kept");
    assert_eq!(kept["data"], good["data"]);
    assert!(kept["data"]["agent-card.json"]
        .as_str()
        .is_some_and(|b| b.contains("\"forecast\"")));
}

#[tokio::test]
async fn a_card_that_moves_onto_a_held_host_loses_its_route_and_is_taken_off_the_air() {
    let mut t = Context::for_tests(&config());
    // team-b publishes shared.example.com first; team-a publishes its own host.
    let holder = card(
        "team-b",
        "holder",
        "shared.example.com",
        "2026-11-01T00:00:00Z",
    );
    published(&mut t, &holder).await;
    let c = weather();
    let seen = published(&mut t, &c).await;
    t.api.take();
    // team-a moves its card onto team-b's host.
    let mut moved = (*seen).clone();
    moved.metadata.generation = Some(2);
    moved.spec.publish.host = "shared.example.com".into();
    let stored = t.card(&moved);
    reconcile(stored, t.ctx.clone()).await.expect("reconciled");
    let requests = t.api.take();
    // The status first (the card server routes by status alone), then the routes it held.
    assert_eq!(
        writes(&requests),
        [
            "PATCH /apis/agentcard.dev/v1alpha1/namespaces/team-a/agentcards/weather/status"
                .to_string(),
            format!(
                "DELETE /api/v1/namespaces/team-a/configmaps/{}",
                configmap_name(&c)
            ),
            format!(
                "DELETE /apis/networking.k8s.io/v1/namespaces/ops/ingresses/{}",
                ingress_name("team-a", "weather")
            ),
        ],
        "{requests:#?}"
    );
    let status = &requests[0].body["status"];
    let (state, reason, message) = ready(status);
    assert_eq!((state.as_str(), reason.as_str()), ("False", "HostConflict"));
    assert!(message.contains("team-b/holder"), "{message}");
    assert!(status["served"].is_null(), "{status:#}");
    // team-b's card and routes are untouched.
    assert!(t.api.object(&card_path(&holder)).is_some());
    assert!(!requests.iter().any(|r| r.path.contains("team-b")));
}
