//! The one error type of the controllers, with bounded categories for metrics and reasons for
//! conditions and Events (never built from error text).

use crate::a2a::Problems;

/// Why a reconcile did not publish.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The card or its publishing settings are invalid; waits for the next edit.
    #[error("{0}")]
    InvalidSpec(Problems),
    /// The namespace may not publish on this host.
    #[error("spec.publish.host: {host} is not allowed in namespace {namespace} (allowed: operator list {operator:?}, namespace annotation agentcard.dev/allowed-hosts {namespace_list:?})")]
    HostNotAllowed {
        /// The host claimed.
        host: String,
        /// The claiming namespace.
        namespace: String,
        /// The operator-wide allow list.
        operator: Vec<String>,
        /// The namespace's own allow list.
        namespace_list: Vec<String>,
    },
    /// Another card holds a claim that overlaps this card's route subtree.
    #[error("spec.publish: {host}{prefix} overlaps {held}, held by {owner}{why}")]
    HostConflict {
        /// The host.
        host: String,
        /// The path prefix.
        prefix: String,
        /// The conflicting claim (`host` + prefix + `/…`).
        held: String,
        /// Who holds it: `AgentCard namespace/name` or `AgentDirectory name`.
        owner: String,
        /// Why the claims conflict, for the message.
        why: &'static str,
    },
    /// An object the operator would write exists and is not the operator's for this card.
    #[error("{kind} {namespace}/{name} exists and was not created by agentcard-operator for this card; rename or remove it")]
    NameInUse {
        /// Its kind.
        kind: String,
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// The card's namespace holds more bytes of card specs than the operator publishes per
    /// namespace, and this card is not among the oldest that fit.
    #[error("namespace {namespace} has {bytes} bytes of AgentCard specs; this operator publishes at most {limit} per namespace (--max-namespace-card-bytes) and this card ({size} bytes) does not fit after the older ones: shrink or delete cards, or raise the limit")]
    NamespaceByteBudget {
        /// The namespace.
        namespace: String,
        /// Bytes of its cards' specs.
        bytes: usize,
        /// This card's spec.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The card's namespace has more cards than the operator publishes per namespace, and
    /// this card is not among the oldest that fit.
    #[error("namespace {namespace} has {count} AgentCards; this operator publishes at most {limit} per namespace (--max-cards-per-namespace) and this card is number {position} by creation time: delete cards or raise the limit")]
    NamespaceCardLimit {
        /// The namespace.
        namespace: String,
        /// Its cards.
        count: usize,
        /// The limit.
        limit: usize,
        /// This card's place among them, oldest first (1-based).
        position: usize,
    },
    /// The signed card is larger than the operator publishes.
    #[error("spec.card: the signed card is {bytes} bytes; this operator publishes cards of at most {limit} bytes (--max-card-bytes)")]
    CardTooLarge {
        /// Its size.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// The signing keys cannot be used.
    #[error("signing key unavailable: {0}")]
    KeyUnavailable(String),
    /// The JWKS with the signing keys is not published yet; a card signed with them would not
    /// verify for clients, so it is not written until it is.
    #[error("the JWKS with the signing keys is not published yet: {0}")]
    JwksPending(String),
    /// A card with `spec.source` has no card yet: the first fetch failed or gave an invalid
    /// card (later failures keep the last good card served and only set `SourceReachable`).
    #[error("{0}")]
    SourceUnavailable(String),
    /// Signing failed with a loaded key.
    #[error("signing failed: {0}")]
    Signing(#[from] crate::a2a::keys::KeyError),
    /// An object could not be assembled (a bug, not a user error).
    #[error("internal: {0}")]
    Internal(String),
    /// Another operator installation reconciles the card too (see
    /// [`crate::controller::agentcard::contest`]).
    #[error("the card is reconciled by more than one agentcard-operator installation (namespaces {}), each signing with its own keys; none writes it while more than one runs, and it stays as last published{}. Uninstall all but one, or give each its own namespaces (--watch-namespace)", installations.join(", "), if publisher.is_empty() { String::new() } else { format!(" by {publisher}") })]
    OperatorConflict {
        /// The installations (operator namespaces) running and reconciling it, sorted.
        installations: Vec<String>,
        /// The one that last published it (`status.operator`).
        publisher: String,
    },
    /// The edit breaks callers of the published card and `spec.publish.compatibility` refuses
    /// it; the last good card stays served.
    #[error("spec.card: the edit breaks callers of the published card and spec.publish.compatibility is {policy}{hint}: {}", findings.join("; "))]
    Incompatible {
        /// `Block` or `RequireMajorVersion`.
        policy: &'static str,
        /// What to do about it.
        hint: &'static str,
        /// Each breaking change, with its JSON path.
        findings: Vec<String>,
    },
    /// The card is retired and its retention period is over: it is unpublished.
    #[error("spec.lifecycle.state: Retired since {since}; its URL answered 410 Gone until {until} and the card is now unpublished")]
    Retired {
        /// When it was retired.
        since: String,
        /// When its 410 period ended.
        until: String,
    },
    /// A call to the API server failed.
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

impl Error {
    /// Bounded metric label.
    pub fn category(&self) -> &'static str {
        match self {
            Error::InvalidSpec(_) => "invalid_spec",
            Error::HostNotAllowed { .. } => "host_not_allowed",
            Error::HostConflict { .. } => "host_conflict",
            Error::NameInUse { .. } => "name_in_use",
            Error::NamespaceCardLimit { .. } => "namespace_card_limit",
            Error::NamespaceByteBudget { .. } => "namespace_byte_budget",
            Error::CardTooLarge { .. } => "card_too_large",
            Error::KeyUnavailable(_) => "key_unavailable",
            Error::JwksPending(_) => "jwks_pending",
            Error::SourceUnavailable(_) => "source_unavailable",
            Error::Signing(_) => "signing",
            Error::Internal(_) => "internal",
            Error::OperatorConflict { .. } => "operator_conflict",
            Error::Incompatible { .. } => "incompatible",
            Error::Retired { .. } => "retired",
            Error::Kube(_) => "kube_api",
        }
    }

    /// Condition and Event reason (CamelCase, bounded).
    pub fn reason(&self) -> &'static str {
        match self {
            Error::InvalidSpec(_) => "InvalidSpec",
            Error::HostNotAllowed { .. } => "HostNotAllowed",
            Error::HostConflict { .. } => "HostConflict",
            Error::NameInUse { .. } => "NameInUse",
            Error::NamespaceCardLimit { .. } => "NamespaceCardLimit",
            Error::NamespaceByteBudget { .. } => "NamespaceByteBudget",
            Error::CardTooLarge { .. } => "CardTooLarge",
            Error::KeyUnavailable(_) => "KeyUnavailable",
            Error::JwksPending(_) => "JwksPending",
            Error::SourceUnavailable(_) => "SourceUnavailable",
            Error::Signing(_) => "SigningFailed",
            Error::Internal(_) => "InternalError",
            Error::OperatorConflict { .. } => "Conflict",
            Error::Incompatible { .. } => "BreakingChange",
            Error::Retired { .. } => "Retired",
            Error::Kube(_) => "WriteFailed",
        }
    }

    /// Whether retrying without a change cannot help (the object waits for its next edit).
    pub fn waits_for_change(&self) -> bool {
        matches!(
            self,
            Error::InvalidSpec(_)
                | Error::HostNotAllowed { .. }
                | Error::NamespaceCardLimit { .. }
                | Error::NamespaceByteBudget { .. }
                | Error::CardTooLarge { .. }
                | Error::Incompatible { .. }
                | Error::Retired { .. }
        )
    }

    /// Whether the card may not hold its route at all, so whatever it published goes.
    pub fn loses_claim(&self) -> bool {
        matches!(
            self,
            Error::HostNotAllowed { .. } | Error::HostConflict { .. } | Error::Retired { .. }
        )
    }
}
