//! Governance on the real control plane, as each party acts: a directory with
//! `admission: ApprovalRequired`, a tenant publishing (and trying to approve itself or label
//! its way in), an approver approving and rejecting, the lease holder voiding an approval on a
//! breaking edit (the change feed says delete, the card stays served at its URL) and keeping
//! it on a descriptive one, the waiting list only approvers see, and every published revision
//! kept (up to `revisionHistoryLimit`, the approved one beyond it), byte-identical to what was
//! served, through the directory's `/revisions` and the CLI. The operator watches every
//! namespace.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use agentcard_operator::crd::{AgentCard, AgentCardApproval, AgentDirectory, ApprovalState};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{json, Value};
use support::cluster::*;
use support::directory::*;
use support::plane::wait_for;

/// The verdict directory `dir` holds in the card's status.
fn verdict(c: &AgentCard, dir: &str) -> Option<ApprovalState> {
    c.status
        .as_ref()?
        .approvals
        .iter()
        .find(|a| a.directory == dir)
        .map(|a| a.state)
}

/// The AgentCardApproval of `dir` for `ns/name` and content `hash`.
fn approval(
    name: &str,
    dir: &str,
    ns: &str,
    card: &str,
    hash: &str,
    reject: Option<&str>,
) -> Value {
    let mut a = json!({
        "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentCardApproval",
        "metadata": {"name": name},
        "spec": {"directory": dir, "card": {"namespace": ns, "name": card},
            "contentHash": hash, "approver": "admin", "note": "reviewed"}
    });
    if let Some(m) = reject {
        a["spec"]["decision"] = json!("Reject");
        a["spec"]["message"] = json!(m);
    }
    a
}

/// The change feed's last change of `name`, from the start (`upsert`, `delete`, or none);
/// `None` too while the feed is not recorded yet (503).
fn last_change(p: &Platform, host: &str, name: &str) -> Option<String> {
    let r = get(p, host, "/v1/changes?limit=500", &[]);
    if r.status != 200 {
        return None;
    }
    json_of(&r)["changes"]
        .as_array()?
        .iter()
        .rev()
        .find(|c| {
            c["identifier"]
                .as_str()
                .is_some_and(|i| i.ends_with(&format!(":{name}")))
        })
        .map(|c| c["type"].as_str().unwrap_or_default().to_string())
}

/// Wait until the change feed's last change of `name` is `want`.
async fn wait_change(p: &Platform, host: &str, name: &str, want: &str) {
    let ok = wait_for(Duration::from_secs(15), || {
        std::future::ready(last_change(p, host, name).as_deref() == Some(want))
    })
    .await;
    assert!(
        ok.is_ok(),
        "the feed's last change of {name} is {:?}, not {want}: {}",
        last_change(p, host, name),
        String::from_utf8_lossy(&get(p, host, "/v1/changes?limit=500", &[]).body)
    );
}

/// A ServiceAccount token of `ns/name`, allowed to approve when `approver`.
async fn token(p: &Platform, ns: &str, name: &str, approver: bool) -> String {
    let token = service_account_token(p, ns, name, &[]).await;
    if approver {
        let role: ClusterRole = serde_json::from_value(json!({
            "metadata": {"name": format!("approve-{ns}-{name}")},
            "rules": [{"apiGroups": ["agentcard.dev"], "resources": ["agentcardapprovals"], "verbs": ["create"]}]
        }))
        .unwrap();
        Api::<ClusterRole>::all(p.admin.clone())
            .create(&PostParams::default(), &role)
            .await
            .unwrap();
        let binding: ClusterRoleBinding = serde_json::from_value(json!({
            "metadata": {"name": format!("approve-{ns}-{name}")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": format!("approve-{ns}-{name}")},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]
        }))
        .unwrap();
        Api::<ClusterRoleBinding>::all(p.admin.clone())
            .create(&PostParams::default(), &binding)
            .await
            .unwrap();
    }
    token
}

/// Sampled ten times over 3 s: card `ns/weather` stays `Approved` for `dir` and listed on
/// `dhost` (`when`: what just happened).
async fn still_approved(p: &Platform, ns: &str, dir: &str, dhost: &str, when: &str) {
    for _ in 0..10 {
        let c = wait_card(p, ns, "weather", "read", |_| true).await;
        assert_eq!(
            verdict(&c, dir),
            Some(ApprovalState::Approved),
            "after {when}"
        );
        assert_eq!(
            names(&json_of(&get(p, dhost, "/v1/agents", &[]))),
            ["weather"],
            "delisted after {when}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_directory_lists_only_approved_cards_and_every_revision_is_kept() {
    // A short JWKS max-age: a key rotation (at the end) signs with the new key in seconds.
    let mut p = Platform::start(&["--jwks-max-age", "4"]).await;
    let t = rand_tag();
    let a = Tenant::new(&p, &format!("gov-a-{t}")).await;
    let key = format!("gov-{t}");
    Api::<Namespace>::all(p.admin.clone())
        .patch(
            &a.ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {&key: "yes"}}})),
        )
        .await
        .unwrap();
    let dir = format!("gated-{t}");
    let dhost = format!("{dir}.dir.test");
    apply_directory(
        &p,
        &directory(
            &dir,
            &dhost,
            json!({"admission": "ApprovalRequired",
                   "namespaceSelector": {"matchLabels": {&key: "yes"}}}),
        ),
    )
    .await;
    wait_directory(&p, &dir, "served", |d| {
        d.status.as_ref().is_some_and(|s| s.served.is_some())
    })
    .await;

    // The tenant publishes; the card is served at its URL but waits for an approval.
    let host = format!("weather-{t}.open.test");
    let mut manifest = rich_card("weather", &host, "forecast", &["weather"], "Acme");
    manifest["spec"]["publish"]["revisionHistoryLimit"] = json!(3);
    a.apply(&manifest).await.unwrap();
    let c = wait_card(
        &p,
        &a.ns,
        "weather",
        "pending for the gated directory",
        |c| verdict(c, &dir) == Some(ApprovalState::Pending),
    )
    .await;
    let status = c.status.clone().unwrap();
    assert_eq!(
        status.approval.as_deref(),
        Some(format!("{dir}=pending").as_str())
    );
    assert_eq!(status.revision, Some(1));
    let h1 = status.content_hash.clone().unwrap();
    wait_served(&p, &host, "/.well-known/agent-card.json", Some(&h1)).await;
    let mut served: BTreeMap<i64, Vec<u8>> = BTreeMap::new();
    served.insert(1, p.get(&host, "/.well-known/agent-card.json").body);
    wait_directory(&p, &dir, "one pending", |d| {
        d.status
            .as_ref()
            .and_then(|s| s.approvals.as_ref())
            .is_some_and(|a| a.pending == 1 && a.approved == 0)
    })
    .await;
    assert!(names(&json_of(&get(&p, &dhost, "/v1/agents", &[]))).is_empty());

    // The tenant cannot approve itself, nor label its way into the listing.
    let own: AgentCardApproval = serde_json::from_value(approval(
        &format!("self-{t}"),
        &dir,
        &a.ns,
        "weather",
        &h1,
        None,
    ))
    .unwrap();
    let refused = Api::<AgentCardApproval>::all(a.client.clone())
        .create(&PostParams::default(), &own)
        .await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(e)) if e.code == 403),
        "a tenant created an approval: {refused:?}"
    );
    let mut labelled = manifest.clone();
    labelled["metadata"]["labels"] =
        json!({"agentcard.dev/listed": "true", "agentcard.dev/approved": "true"});
    a.apply(&labelled).await.unwrap();
    // Its status is what lists it, and the tenant cannot write it.
    let forged = Api::<AgentCard>::namespaced(a.client.clone(), &a.ns)
        .patch_status(
            "weather",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"approvals": [{"directory": dir, "state": "Approved"}]}}),
            ),
        )
        .await;
    assert!(forged.is_err(), "a tenant wrote its card's status");

    // The waiting list is for approvers only.
    let plain = token(&p, &a.ns, "reader", false).await;
    let approver = token(&p, &a.ns, "approver", true).await;
    let waiting = |auth: Option<&str>| {
        let bearer = auth.map(|t| format!("Bearer {t}"));
        let headers: Vec<(&str, &str)> = bearer
            .iter()
            .map(|b| ("Authorization", b.as_str()))
            .collect();
        get(&p, &dhost, "/v1/agents?approval=pending", &headers)
    };
    assert_eq!(waiting(None).status, 401);
    assert_eq!(waiting(Some(&plain)).status, 403);
    let w = json_of(&waiting(Some(&approver)));
    assert_eq!(names(&w), ["weather"], "{w}");
    assert_eq!(
        w["agents"][0]["_meta"]["agentcard.dev/directory"]["approval"]["state"],
        "pending"
    );

    // The approver approves what is served: listed, and the feed carries it.
    let approvals: Api<AgentCardApproval> = Api::all(p.admin.clone());
    let first: AgentCardApproval = serde_json::from_value(approval(
        &format!("ok1-{t}"),
        &dir,
        &a.ns,
        "weather",
        &h1,
        None,
    ))
    .unwrap();
    approvals
        .create(&PostParams::default(), &first)
        .await
        .unwrap();
    wait_listed(&p, &dhost, &["weather"]).await;
    wait_change(&p, &dhost, "weather", "upsert").await;

    // A descriptive edit stays listed.
    let mut descriptive = labelled.clone();
    descriptive["spec"]["card"]["description"] = json!("Forecasts, now with more detail.");
    a.apply(&descriptive).await.unwrap();
    let c = wait_card(&p, &a.ns, "weather", "revision 2 approved", |c| {
        c.status.as_ref().and_then(|s| s.revision) == Some(2)
            && verdict(c, &dir) == Some(ApprovalState::Approved)
    })
    .await;
    let h2 = hash_of(&c).unwrap();
    wait_served(&p, &host, "/.well-known/agent-card.json", Some(&h2)).await;
    served.insert(2, p.get(&host, "/.well-known/agent-card.json").body);
    wait_listed(&p, &dhost, &["weather"]).await;
    wait_change(&p, &dhost, "weather", "upsert").await;
    // Its revisions, through the directory, are the bytes served then.
    let lists = |p: &Platform| {
        agentcard_operator::controller::api_calls::read_counts(&p.op.metrics())
            .get(&("list".to_string(), "controllerrevisions".to_string()))
            .copied()
            .unwrap_or(0.0)
    };
    let first_read = lists(&p);
    let list = json_of(&get(
        &p,
        &dhost,
        &format!("/v1/agents/{}/weather/revisions", a.ns),
        &[],
    ));
    assert_eq!(list["total"], 2, "{list}");
    // The listing points at them: native `_meta` and ARD metadata (scalars).
    let one = json_of(&get(
        &p,
        &dhost,
        &format!("/v1/agents/{}/weather", a.ns),
        &[],
    ));
    let meta = &one["_meta"]["agentcard.dev/directory"];
    assert_eq!(meta["revision"], 2, "{one}");
    assert_eq!(
        meta["revisions"],
        format!("/v1/agents/{}/weather/revisions", a.ns)
    );
    let ard = json_of(&get(&p, &dhost, "/agents", &[]));
    assert_eq!(ard["items"][0]["metadata"]["revision"], 2, "{ard}");
    assert_eq!(list["revisions"][0]["revision"], 2);
    for (n, bytes) in &served {
        let r = get(
            &p,
            &dhost,
            &format!("/v1/agents/{}/weather/revisions/{n}", a.ns),
            &[],
        );
        assert_eq!(r.status, 200);
        assert_eq!(&r.body, bytes, "revision {n} differs from what was served");
    }
    // The server read them from the API server (the operator's own request counts)...
    assert!(
        lists(&p) - first_read >= 1.0,
        "no LIST counted for the revisions"
    );
    // ...and, asked again and again, does not again (per directory snapshot).
    let before = lists(&p);
    for _ in 0..20 {
        let path = format!("/v1/agents/{}/weather/revisions/1", a.ns);
        assert_eq!(get(&p, &dhost, &path, &[]).status, 200);
    }
    let asked = lists(&p) - before;
    assert!(asked <= 1.0, "{asked} LISTs for 20 requests");

    // A breaking edit (the skill is gone) delists at once; the card stays served.
    let mut breaking = descriptive.clone();
    breaking["spec"]["card"]["skills"][0]["id"] = json!("forecast-v2");
    a.apply(&breaking).await.unwrap();
    let c = wait_card(&p, &a.ns, "weather", "the approval voided", |c| {
        verdict(c, &dir) == Some(ApprovalState::Voided)
    })
    .await;
    let voided = c
        .status
        .as_ref()
        .unwrap()
        .approvals
        .iter()
        .find(|a| a.directory == dir)
        .unwrap()
        .clone();
    assert!(
        voided.changes.iter().any(|f| f.contains("forecast")),
        "the findings name the removed skill: {voided:?}"
    );
    let h3 = hash_of(&c).unwrap();
    wait_listed(&p, &dhost, &[]).await;
    wait_served(&p, &host, "/.well-known/agent-card.json", Some(&h3)).await;
    served.insert(3, p.get(&host, "/.well-known/agent-card.json").body);
    wait_change(&p, &dhost, "weather", "delete").await;
    let w = json_of(&waiting(Some(&approver)));
    assert_eq!(
        w["agents"][0]["_meta"]["agentcard.dev/directory"]["approval"]["state"],
        "voided"
    );

    // Two more edits: revisions past the limit go, except the one the approval named.
    for (n, text) in [(4, "Fourth."), (5, "Fifth.")] {
        let mut e = breaking.clone();
        e["spec"]["card"]["description"] = json!(text);
        a.apply(&e).await.unwrap();
        let c = wait_card(&p, &a.ns, "weather", &format!("revision {n}"), |c| {
            c.status.as_ref().and_then(|s| s.revision) == Some(n)
        })
        .await;
        // A void approval stays void whatever comes after.
        assert_eq!(verdict(&c, &dir), Some(ApprovalState::Voided));
        wait_served(
            &p,
            &host,
            "/.well-known/agent-card.json",
            hash_of(&c).as_deref(),
        )
        .await;
        served.insert(n, p.get(&host, "/.well-known/agent-card.json").body);
    }
    let revs: Api<ControllerRevision> = Api::namespaced(p.admin.clone(), &a.ns);
    let kept = wait_for(Duration::from_secs(10), || async {
        let mut n: Vec<i64> = revs
            .list(&ListParams::default())
            .await
            .map(|l| l.items.iter().map(|r| r.revision).collect())
            .unwrap_or_default();
        n.sort();
        n == [1, 3, 4, 5]
    })
    .await;
    assert!(
        kept.is_ok(),
        "kept revisions: {:?}",
        revs.list(&ListParams::default()).await.map(|l| l
            .items
            .iter()
            .map(|r| r.revision)
            .collect::<Vec<_>>())
    );

    // A new approval of what is served lists it again; its revisions are still byte-identical.
    let h5 = wait_card(&p, &a.ns, "weather", "revision 5", |c| {
        c.status.as_ref().and_then(|s| s.revision) == Some(5)
    })
    .await;
    let h5 = hash_of(&h5).unwrap();
    let second: AgentCardApproval = serde_json::from_value(approval(
        &format!("ok2-{t}"),
        &dir,
        &a.ns,
        "weather",
        &h5,
        None,
    ))
    .unwrap();
    approvals
        .create(&PostParams::default(), &second)
        .await
        .unwrap();
    wait_listed(&p, &dhost, &["weather"]).await;
    // A restart never delists it: the new lead keeps the verdicts until the approvals are
    // listed, then judges them the same.
    p.op.kill();
    let flags: Vec<&str> = [OPERATOR_FLAGS, &["--jwks-max-age", "4"]].concat();
    p.op = support::operator::Operator::start_on(kubeconfig(), &p.opns, None, &flags);
    wait_listed(&p, &dhost, &["weather"]).await;
    // Sampled while the new process waits for the lease (the old one was killed holding it),
    // and after it leads and has judged the card again.
    let leads = wait_for(Duration::from_secs(40), || {
        std::future::ready(p.op.logs().contains("acquired the lease"))
    });
    still_approved(&p, &a.ns, &dir, &dhost, "a restart").await;
    assert!(leads.await.is_ok(), "the restarted operator never led");
    still_approved(&p, &a.ns, &dir, &dhost, "the restarted operator led").await;
    wait_change(&p, &dhost, "weather", "upsert").await;
    for n in [1, 3, 4, 5] {
        let r = get(
            &p,
            &dhost,
            &format!("/v1/agents/{}/weather/revisions/{n}", a.ns),
            &[],
        );
        assert_eq!(r.status, 200, "revision {n}");
        assert_eq!(
            r.body, served[&n],
            "revision {n} differs from what was served"
        );
    }
    assert_eq!(
        get(
            &p,
            &dhost,
            &format!("/v1/agents/{}/weather/revisions/2", a.ns),
            &[]
        )
        .status,
        404
    );
    // The CLI prints the manifest that rolls back to revision 1.
    let out = support::run(
        {
            let mut cmd = support::bin();
            cmd.env("KUBECONFIG", kubeconfig()).args([
                "revisions",
                &format!("{}/weather", a.ns),
                "1",
                "-o",
                "yaml",
            ]);
            cmd
        },
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let m: Value =
        agentcard_operator::yaml::from_str(&String::from_utf8_lossy(&out.stdout)).unwrap();
    assert_eq!(m["spec"]["card"]["skills"][0]["id"], "forecast");
    assert_eq!(
        m["spec"]["card"]["description"],
        manifest["spec"]["card"]["description"]
    );

    // A rejection of what is served: delisted, and its message is in the card's status.
    let no: AgentCardApproval = serde_json::from_value(approval(
        &format!("no-{t}"),
        &dir,
        &a.ns,
        "weather",
        &h5,
        Some("describe how forecasts are sourced"),
    ))
    .unwrap();
    approvals.create(&PostParams::default(), &no).await.unwrap();
    let c = wait_card(&p, &a.ns, "weather", "rejected", |c| {
        verdict(c, &dir) == Some(ApprovalState::Rejected)
    })
    .await;
    assert_eq!(
        c.status
            .as_ref()
            .unwrap()
            .approvals
            .iter()
            .find(|a| a.directory == dir)
            .and_then(|a| a.message.as_deref()),
        Some("describe how forecasts are sourced")
    );
    wait_listed(&p, &dhost, &[]).await;
    let d = wait_directory(&p, &dir, "one rejected", |d: &AgentDirectory| {
        d.status
            .as_ref()
            .and_then(|s| s.approvals.as_ref())
            .is_some_and(|a| a.rejected == 1)
    })
    .await;
    assert_eq!(d.status.unwrap().cards, 0);
    // The owner was told each time, with the message: Events on the card.
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(p.admin.clone(), &a.ns);
    for (reason, says) in [
        ("Approved", format!("directory {dir}")),
        ("ApprovalVoided", "forecast".to_string()),
        (
            "ApprovalRejected",
            "describe how forecasts are sourced".to_string(),
        ),
    ] {
        let found = wait_for(Duration::from_secs(10), || async {
            events.list(&ListParams::default()).await.is_ok_and(|l| {
                l.items.iter().any(|e| {
                    e.reason.as_deref() == Some(reason)
                        && e.message.as_deref().is_some_and(|m| m.contains(&says))
                })
            })
        })
        .await;
        assert!(found.is_ok(), "no {reason} Event saying {says:?}");
    }

    // A directory that reapproves on any change: a key rotation (the same card signed with
    // another key) keeps its approval; a descriptive edit voids it.
    let any = format!("any-{t}");
    apply_directory(
        &p,
        &directory(
            &any,
            &format!("{any}.dir.test"),
            json!({"admission": "ApprovalRequired", "reapproveOn": "AnyChange",
                   "namespaceSelector": {"matchLabels": {&key: "yes"}}}),
        ),
    )
    .await;
    let c = wait_card(
        &p,
        &a.ns,
        "weather",
        "pending for the AnyChange directory",
        |c| verdict(c, &any) == Some(ApprovalState::Pending),
    )
    .await;
    let served_hash = hash_of(&c).unwrap();
    let ok: AgentCardApproval = serde_json::from_value(approval(
        &format!("any-{t}"),
        &any,
        &a.ns,
        "weather",
        &served_hash,
        None,
    ))
    .unwrap();
    approvals.create(&PostParams::default(), &ok).await.unwrap();
    wait_card(&p, &a.ns, "weather", "approved for AnyChange", |c| {
        verdict(c, &any) == Some(ApprovalState::Approved)
    })
    .await;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(p.admin.clone(), &p.opns);
    let kid = format!("rotated-{t}");
    let key = agentcard_operator::a2a::SigningKey::generate(
        agentcard_operator::a2a::Algorithm::EdDSA,
        Some(&kid),
    )
    .unwrap();
    secrets
        .patch(
            "agentcard-signing-keys",
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"annotations": {"agentcard.dev/active-key": kid}},
                "stringData": {format!("{kid}.jwk.json"): key.private_jwk_json().unwrap()},
            })),
        )
        .await
        .unwrap();
    let c = wait_card(&p, &a.ns, "weather", "signed with the rotated key", |c| {
        c.status.as_ref().and_then(|s| s.key_id.as_deref()) == Some(kid.as_str())
    })
    .await;
    assert_ne!(
        hash_of(&c).as_deref(),
        Some(served_hash.as_str()),
        "not signed again"
    );
    assert_eq!(
        verdict(&c, &any),
        Some(ApprovalState::Approved),
        "a re-sign voided the approval"
    );
    let mut reworded = descriptive.clone();
    reworded["spec"]["card"]["skills"][0]["id"] = json!("forecast-v2");
    reworded["spec"]["card"]["description"] = json!("Fifth, reworded.");
    a.apply(&reworded).await.unwrap();
    wait_card(
        &p,
        &a.ns,
        "weather",
        "AnyChange voids on a descriptive edit",
        |c| verdict(c, &any) == Some(ApprovalState::Voided),
    )
    .await;
}
