//! The JWKS publisher: after each trigger (the signing Secret or the JWKS ConfigMap changed,
//! or a rotation step is due) it writes the current keys' JWKS to the `agentcard-jwks`
//! ConfigMap ([`keys::publish_jwks`]), tells the reconciles which keys sign now
//! ([`crate::controller::keys::signing`]), asks for every card to be signed again when that changed, and
//! records the rotation's Events. A failed write is retried with backoff; a new trigger
//! retries at once.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender};
use futures::StreamExt;
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::Client;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::controller::backoff::backoff_delay;
use crate::controller::events::Events;
use crate::controller::keys::signing::{KeySource, PublishedKeys};
use crate::controller::keys::{self, Keys};
use crate::crd::AgentCard;
use crate::store::{NamedStore, SeenConfigMap};

/// How often (at most) the publisher looks whether a key that left the Secret is still used
/// by a served card, while it keeps one published: every JWKS max-age, at most this long.
const RETAINED_KEY_RECHECK: Duration = Duration::from_secs(30);

/// How long one JWKS publication (a read and a write) may take before it is retried.
const JWKS_WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Everything the publisher reads and tells.
pub struct Publisher {
    /// API client.
    pub client: Client,
    /// The operator's namespace (the Secret's and the JWKS ConfigMap's).
    pub namespace: String,
    /// Where the keys come from (shared with the reconciles).
    pub source: KeySource,
    /// `Cache-Control: max-age` of the JWKS, in seconds.
    pub max_age: u32,
    /// Every AgentCard (which ConfigMap each serves).
    pub cards: Store<AgentCard>,
    /// The cards' ConfigMaps (which keys signed what is served).
    pub configmaps: NamedStore<SeenConfigMap>,
    /// True once the ConfigMaps are listed.
    pub configmaps_listed: watch::Receiver<bool>,
    /// Where the reconciles learn what was published.
    pub published: watch::Sender<Option<PublishedKeys>>,
    /// Asks for every card to be signed again.
    pub resign_all: UnboundedSender<()>,
    /// Records the rotation's Events on the Secret.
    pub recorder: Arc<Events>,
    /// The rotation's stages, as metrics.
    pub gauges: crate::controller::metrics::SigningGauges,
}

impl Publisher {
    /// Publish after each of `triggers` (and when a rotation step is due) until they end.
    pub async fn run(mut self, mut triggers: UnboundedReceiver<()>) {
        // Keys that left the Secret stay published while a served card is signed with them:
        // which ones are, the card ConfigMaps say (once listed).
        let mut listed = self.configmaps_listed.clone();
        let _ = tokio::time::timeout(Duration::from_secs(30), listed.wait_for(|l| *l)).await;
        tracing::debug!("the JWKS publisher starts");
        let mut state = None;
        // When to look again by itself: a rotation step, or a retained key's recheck.
        let mut wake: Option<Instant> = None;
        loop {
            let triggered = match wake {
                Some(at) => tokio::select! {
                    more = triggers.next() => more.is_some(),
                    () = tokio::time::sleep_until(at) => true,
                },
                None => triggers.next().await.is_some(),
            };
            if !triggered {
                return;
            }
            match self.publish(&mut state, &mut triggers).await {
                Outcome::Published(next) => wake = next,
                // Until the Secret changes (which triggers again), nothing to look at.
                Outcome::NoKeys => wake = None,
                Outcome::Closed => return,
            }
        }
    }

    /// The current keys, when the backend has usable ones.
    fn current_keys(&self) -> Option<Arc<Keys>> {
        self.source.keys().ok()
    }

    /// Publish the current keys' JWKS, retrying with backoff until it is written.
    async fn publish(
        &mut self,
        state: &mut Option<keys::JwksState>,
        triggers: &mut UnboundedReceiver<()>,
    ) -> Outcome {
        let mut failures = 0u32;
        loop {
            let Some(keys) = self.current_keys() else {
                tracing::debug!("no usable signing key yet: the JWKS waits for it");
                return Outcome::NoKeys;
            };
            let (cards, configmaps) = (&self.cards, &self.configmaps);
            // Bounded: a request the API server never answers is a failure, retried.
            let written = tokio::time::timeout(
                JWKS_WRITE_TIMEOUT,
                keys::publish_jwks(
                    &self.client,
                    &keys,
                    &self.namespace,
                    self.max_age,
                    state,
                    || served_kids(cards, configmaps),
                ),
            )
            .await
            .unwrap_or_else(|_| {
                Err(kube::Error::Service(
                    format!("no answer within {JWKS_WRITE_TIMEOUT:?}").into(),
                ))
            });
            match written {
                Ok((rotation, retained)) => {
                    return Outcome::Published(self.published(&keys, rotation, retained).await)
                }
                Err(e) => {
                    failures = failures.saturating_add(1);
                    let delay = backoff_delay(failures, 0.5);
                    tracing::warn!(error = %e, retry_in = ?delay, "could not publish the JWKS");
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        more = triggers.next() => if more.is_none() { return Outcome::Closed },
                    }
                }
            }
        }
    }

    /// Tell what was published: the reconciles (which keys sign), every card when those
    /// changed, and an Event on a rotation step. When to look again by itself.
    async fn published(
        &self,
        keys: &Keys,
        rotation: keys::Rotation,
        retained: usize,
    ) -> Option<Instant> {
        tracing::debug!(signing = ?rotation.signing, retained, "JWKS published");
        let (before, revoked_before) = match self.published.borrow().as_ref() {
            Some(p) => (Some(p.rotation.clone()), Some(p.revoked.clone())),
            None => (None, None),
        };
        let note = rotation_note(before.as_ref(), &rotation, keys.active.kid());
        let newly_revoked: Vec<&str> = keys
            .revoked
            .iter()
            .filter(|k| revoked_before.as_ref().is_some_and(|b| !b.contains(*k)))
            .map(String::as_str)
            .collect();
        let wake = self.next_look(&rotation, retained);
        self.gauges.set(
            rotation.signing.len(),
            keys.all.len() + retained,
            rotation.activates_at.map(jiff::Timestamp::as_second),
        );
        self.published.send_replace(Some(PublishedKeys {
            version: keys.version.clone(),
            rotation: rotation.clone(),
            revoked: keys.revoked.clone(),
        }));
        if before
            .as_ref()
            .is_some_and(|b| b.signing != rotation.signing)
        {
            // Other keys sign now: every card is signed again.
            let _ = self.resign_all.unbounded_send(());
        }
        if !newly_revoked.is_empty() {
            let note = format!(
                "key {} revoked: removed from the JWKS at once; every card signed with it is signed again with key {}",
                newly_revoked.join(", "),
                rotation.signing.join(", ")
            );
            self.record_as(EventType::Warning, "KeyRevoked", note).await;
        }
        if let Some((reason, note)) = note {
            self.record(reason, note).await;
        }
        wake
    }

    /// When the active key may start signing, or a retained key should be looked at again.
    fn next_look(&self, rotation: &keys::Rotation, retained: usize) -> Option<Instant> {
        let mut wake = rotation.activates_at.map(|at| {
            let wait = jiff::Timestamp::now().duration_until(at);
            let wait = Duration::try_from(wait).unwrap_or(Duration::ZERO);
            Instant::now() + wait + Duration::from_millis(50)
        });
        if retained > 0 {
            // A retained key goes once no served card uses it: look again.
            let every = Duration::from_secs(u64::from(self.max_age))
                .clamp(Duration::from_secs(1), RETAINED_KEY_RECHECK);
            let soon = Instant::now() + every;
            wake = Some(wake.map_or(soon, |w| w.min(soon)));
        }
        wake
    }

    /// A rotation step's Event on the signing Secret (on the JWKS ConfigMap for a key held
    /// by an HSM).
    async fn record(&self, reason: &'static str, note: String) {
        self.record_as(EventType::Normal, reason, note).await;
    }

    /// An Event of `kind` on the signing Secret (see [`Self::record`]).
    async fn record_as(&self, kind: EventType, reason: &'static str, note: String) {
        tracing::info!(reason, "{note}");
        let event = crate::controller::events::event(kind, reason, "RotateKeys", &note);
        let regarding = match self.source.secret() {
            Some(secret) => kube::Resource::object_ref(secret.as_ref(), &()),
            None => k8s_openapi::api::core::v1::ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("ConfigMap".into()),
                name: Some(keys::JWKS_CONFIGMAP.into()),
                namespace: Some(self.namespace.clone()),
                ..Default::default()
            },
        };
        self.recorder.record(&event, &regarding).await;
    }
}

/// How one publication ended.
enum Outcome {
    /// Written; when to look again by itself.
    Published(Option<Instant>),
    /// No usable Secret: nothing to publish until it changes.
    NoKeys,
    /// The triggers ended (the controllers stop).
    Closed,
}

/// The keys the served cards are signed with: each card's ConfigMap as its status confirms it
/// (the one `status.configMap` names, holding `status.contentHash`), as the card server serves
/// it. Only the operator writes status, so a ConfigMap a tenant made with the operator's labels
/// cannot keep a key that left the Secret in the JWKS.
fn served_kids(
    cards: &Store<AgentCard>,
    configmaps: &NamedStore<SeenConfigMap>,
) -> HashSet<String> {
    cards
        .state()
        .iter()
        .filter_map(|card| {
            let status = card.status.as_ref()?;
            let cm = configmaps.get(
                &ObjectRef::new(status.config_map.as_deref()?)
                    .within(card.metadata.namespace.as_deref()?),
            )?;
            let body = cm.text(crate::contract::KEY_CARD)?;
            (status.content_hash.as_deref()
                == Some(crate::contract::content_hash(body.as_bytes()).as_str()))
            .then(|| keys::signature_kids(body))
        })
        .flatten()
        .collect()
}

/// The Event a rotation step deserves: `(reason, note)` when the keys that sign changed or the
/// active key's activation was just scheduled.
fn rotation_note(
    before: Option<&keys::Rotation>,
    now: &keys::Rotation,
    active: &str,
) -> Option<(&'static str, String)> {
    if let Some(at) = now.activates_at {
        if before.and_then(|b| b.activates_at) != Some(at) {
            return Some((
                "KeyActivationScheduled",
                format!(
                    "key {active} is published in the JWKS and signs from {at} (one JWKS max-age later); keys {} sign until then",
                    now.signing.join(", ")
                ),
            ));
        }
    }
    let before = before?;
    (before.signing != now.signing).then(|| {
        (
            "KeysActivated",
            format!("cards are now signed with keys {}", now.signing.join(", ")),
        )
    })
}
