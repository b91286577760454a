//! `AgentCardApproval` (agentcard.dev/v1alpha1, cluster-scoped): an approver's verdict on one
//! card for one directory whose `spec.admission` is `ApprovalRequired`.
//!
//! Only holders of the chart's `agentcard-approver` ClusterRole write it (tenants' aggregated
//! roles give no verb on it, so a publisher never approves itself), and the chart's
//! ValidatingAdmissionPolicy requires `spec.approver` to be the user who creates it: the
//! object records who decided. It is immutable: deciding again is a new approval.
//!
//! The lease holder reads approvals when it reconciles the card they name
//! ([`crate::controller::agentcard::approval`]) and writes what they mean — pending,
//! approved, rejected or voided, per directory — into the card's status, which is what every
//! replica's directory lists by. An approval names the content hash (and so the revision) it
//! approves; an edit the breaking-change classifier finds breaking (any edit under
//! `reapproveOn: AnyChange`) voids it.

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// An approver's decision that a card may (or may not) be listed by a directory.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "agentcard.dev",
    version = "v1alpha1",
    kind = "AgentCardApproval",
    doc = "An approver's decision on one AgentCard for one AgentDirectory whose spec.admission is ApprovalRequired: Approve the content hash (revision) it names, or Reject it with a message the card's owner sees in the card's status. Immutable; the newest approval of a directory and card decides. An edit the breaking-change classifier finds breaking (any edit under reapproveOn: AnyChange) voids an approval, and the card leaves the directory until approved again. Written by holders of the agentcard-approver ClusterRole; spec.approver must be the user who creates it.",
    shortname = "acapproval",
    category = "agentcard-operator",
    printcolumn = r#"{"name":"Directory","type":"string","jsonPath":".spec.directory"}"#,
    printcolumn = r#"{"name":"Namespace","type":"string","jsonPath":".spec.card.namespace"}"#,
    printcolumn = r#"{"name":"Card","type":"string","jsonPath":".spec.card.name"}"#,
    printcolumn = r#"{"name":"Decision","type":"string","jsonPath":".spec.decision"}"#,
    printcolumn = r#"{"name":"Hash","type":"string","jsonPath":".spec.contentHash","priority":1}"#,
    printcolumn = r#"{"name":"Approver","type":"string","jsonPath":".spec.approver"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[x_kube(validation = Rule::new("self.decision != 'Reject' || has(self.message)").message("spec.message: required to reject (the card's owner reads it)"))]
#[x_kube(validation = Rule::new("self == oldSelf").message("an approval is immutable: create a new one to decide again"))]
#[serde(rename_all = "camelCase")]
pub struct AgentCardApprovalSpec {
    /// The AgentDirectory the decision is for.
    #[schemars(length(min = 1, max = 253))]
    pub directory: String,
    /// The card decided on.
    pub card: CardRef,
    /// The content hash decided on: the card's `status.contentHash` (the ETag of the served
    /// bytes), as `agentcard-operator revisions` and `kubectl get agentcards -o wide` show it.
    #[x_kube(validation = Rule::new("self.matches('^[0-9a-f]{32}$')").message("must be a content hash: 32 lower-case hex digits, as status.contentHash shows it"))]
    pub content_hash: String,
    /// `Approve` (default) or `Reject`.
    #[serde(default)]
    pub decision: Decision,
    /// Who decided: the Kubernetes user creating the approval (the chart's admission policy
    /// refuses any other name).
    #[schemars(length(min = 1, max = 253))]
    pub approver: String,
    /// Why it was approved (optional, for the record).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub note: Option<String>,
    /// Why it was rejected: shown to the card's owner in the card's status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub message: Option<String>,
}

/// The card an approval is about.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
pub struct CardRef {
    /// Its namespace.
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
    /// Its name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// What an approver decided.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum Decision {
    /// The content hash may be listed (and what follows it while no edit breaks it).
    #[default]
    Approve,
    /// The content hash may not be listed; `message` says why.
    Reject,
}
