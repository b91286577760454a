//! The watches of the signing keys: the signing Secret (or the HSM key's opener, for a
//! `pkcs11:` signer) and the JWKS ConfigMap, each by name, and the JWKS publisher
//! ([`super::jwks::Publisher`]) they trigger.
//!
//! Data flow: any change of either (or a relist) asks the publisher to publish again; a change
//! of the keys or of the active key (or the Secret coming or going) also asks for every card
//! to be signed again (`resign_all`); other label and annotation edits, and relists, leave the
//! cards alone. The reconciles read the Secret's store and the publisher's last word through
//! [`super::signing::Signing`].

use std::sync::Arc;
use std::time::Duration;

use futures::channel::mpsc::{unbounded, UnboundedSender};
use futures::{SinkExt, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, ResourceExt};
use tokio::sync::watch;

use super::jwks::Publisher;
use super::pkcs11::{self, Pkcs11Uri};
use super::signing::{HeldKeys, KeySource, PublishedKeys, Signing};
use super::source::{SecretKind, SignerUri};
use super::vault::{self, Vault, VaultError, VaultUri};
use super::{KeyCache, Keys, ANN_ACTIVE_KEY, JWKS_CONFIGMAP};
use crate::controller::backoff::backoff_delay;
use crate::controller::config::Config;
use crate::controller::error::Error;
use crate::controller::events::Events;
use crate::crd::AgentCard;
use crate::process::AbortOnDrop;
use crate::store::{NamedStore, SeenConfigMap};

/// What the publisher reads beside the keys: the stores of the cards and their ConfigMaps
/// (the keys some card's bytes are still signed with stay published).
pub struct PublisherInputs {
    /// Every card.
    pub cards: Store<AgentCard>,
    /// The cards' ConfigMaps.
    pub configmaps: NamedStore<SeenConfigMap>,
    /// True once the ConfigMaps are listed.
    pub configmaps_listed: watch::Receiver<bool>,
    /// Where "sign every card again" goes (a rotation step that changes which keys sign).
    pub resign_all: UnboundedSender<()>,
    /// The process's Event recorder.
    pub recorder: Arc<Events>,
    /// Where the rotation's stages are reported as metrics.
    pub gauges: crate::controller::metrics::SigningGauges,
}

/// Start the signer backend (the Secret watch, or the HSM key's opener), the JWKS ConfigMap
/// watch and the publisher; their tasks go to `tasks`. The returned [`Signing`] is how the
/// reconciles ask for keys.
pub fn start(
    client: &Client,
    config: &Config,
    inputs: PublisherInputs,
    tasks: &mut Vec<AbortOnDrop>,
) -> Signing {
    let opns = &config.settings.operator_namespace;
    let (publish, publish_rx) = unbounded::<()>();
    let uri = config.signer.to_string();
    let held = match &config.signer {
        SignerUri::Pkcs11(token) => {
            Some(Opener::Pkcs11(token.clone(), config.pkcs11_module.clone()))
        }
        SignerUri::Vault(key) => Some(match config.vault.clone().map(Vault::new) {
            Some(Ok(vault)) => Opener::Vault(Arc::new(vault), key.clone()),
            Some(Err(e)) => Opener::Broken(e.to_string()),
            None => Opener::Broken(VaultError::NoAddress.to_string()),
        }),
        _ => None,
    };
    let source = match (held, &config.signer) {
        (Some(opener), _) => {
            let (task, keys) = held_key(opener, &publish, &inputs.resign_all);
            tasks.push(task);
            KeySource::Held { uri, keys }
        }
        (None, other) => {
            let (name, kind) = other.secret().unwrap_or(("", SecretKind::Keys));
            let cache = Arc::new(KeyCache::new(
                kind,
                Duration::from_secs(u64::from(config.jwks_max_age)),
            ));
            let key = ObjectRef::<Secret>::new(name).within(opns);
            let (secret_task, secrets) =
                signing_secret(client, &key, &cache, &publish, &inputs.resign_all);
            tasks.push(secret_task);
            KeySource::Secret {
                uri,
                key,
                secrets,
                cache,
            }
        }
    };
    tasks.push(jwks_configmap(client, opns, publish));
    let (published_tx, published) = watch::channel(None::<PublishedKeys>);
    let publisher = Publisher {
        client: client.clone(),
        namespace: opns.clone(),
        source: source.clone(),
        max_age: config.jwks_max_age,
        cards: inputs.cards,
        configmaps: inputs.configmaps,
        configmaps_listed: inputs.configmaps_listed,
        published: published_tx,
        resign_all: inputs.resign_all,
        recorder: inputs.recorder,
        gauges: inputs.gauges,
    };
    tasks.push(AbortOnDrop::spawn(
        tracing::info_span!("jwks_publisher", configmap = JWKS_CONFIGMAP),
        publisher.run(publish_rx),
    ));
    Signing { source, published }
}

/// How a key held by a backend is opened.
enum Opener {
    /// A key in a PKCS#11 token, through the module.
    Pkcs11(Pkcs11Uri, Option<String>),
    /// A transit key of Vault.
    Vault(Arc<Vault>, VaultUri),
    /// A backend that cannot be set up (said on every card).
    Broken(String),
}

impl Opener {
    async fn open(&self) -> Result<Keys, String> {
        match self {
            Opener::Pkcs11(uri, module) => {
                let (u, m) = (uri.clone(), module.clone());
                // Module calls block: on the blocking pool.
                tokio::task::spawn_blocking(move || pkcs11::open(&u, m.as_deref()))
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| e.to_string())
            }
            Opener::Vault(vault, uri) => vault::open(vault, uri).await.map_err(|e| e.to_string()),
            Opener::Broken(e) => Err(e.clone()),
        }
    }

    /// When to read the keys again once open (`None`: they do not change underneath).
    fn refresh(&self) -> Option<Duration> {
        match self {
            // A rotation in Vault is a new key version: published first, signing one JWKS
            // max-age later.
            Opener::Vault(vault, _) => Some(vault.refresh()),
            _ => None,
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Opener::Pkcs11(..) => "pkcs11",
            Opener::Vault(..) | Opener::Broken(_) => "hashivault",
        }
    }
}

/// Open the held key in the background, retrying with backoff until it opens (and, for Vault,
/// reading its versions again every `--vault-refresh-seconds`); each new outcome goes to the returned
/// receiver, and new keys ask for the JWKS to be published and every card to be signed. Once
/// open, a failed refresh keeps the keys it had (signing then says what Vault answers).
fn held_key(
    opener: Opener,
    publish: &UnboundedSender<()>,
    resign_all: &UnboundedSender<()>,
) -> (AbortOnDrop, HeldKeys) {
    let (tx, rx) = watch::channel(None);
    let (publish, mut resign_all) = (publish.clone(), resign_all.clone());
    let span = tracing::info_span!("held_key", backend = opener.name());
    let task = AbortOnDrop::spawn(span, async move {
        let mut failures = 0u32;
        let mut said = String::new();
        let mut opened: Option<String> = None;
        loop {
            match opener.open().await {
                Ok(keys) => {
                    failures = 0;
                    if opened.as_deref() != Some(keys.version.as_str()) {
                        tracing::info!(active = keys.active.kid(), version = %keys.version, "the held key is open");
                        opened = Some(keys.version.clone());
                        said.clear();
                        tx.send_replace(Some(Ok(Arc::new(keys))));
                        let _ = publish.unbounded_send(());
                        let _ = resign_all.send(()).await;
                    }
                    match opener.refresh() {
                        Some(every) => tokio::time::sleep(every).await,
                        None => return,
                    }
                }
                Err(e) => {
                    failures = failures.saturating_add(1);
                    let delay = backoff_delay(failures, 0.5);
                    tracing::warn!(error = %e, retry_in = ?delay, "could not open the held key");
                    if opened.is_none() && e != said {
                        said.clone_from(&e);
                        tx.send_replace(Some(Err(e)));
                        // The cards say why they are not signed (once per reason).
                        let _ = resign_all.send(()).await;
                    }
                    tokio::time::sleep(delay).await;
                }
            }
        }
    });
    (task, rx)
}

/// Read the signing Secret, or create it with a fresh ES256 key when asked to. An API server
/// that fails now (restarting, etcd away) is waited for with backoff: failing here would end
/// the controllers and the process with them. A refusal (invalid name, no rights) does not
/// pass by waiting: it fails.
pub async fn ensure_signing_secret(client: &Client, config: &Config) -> Result<(), Error> {
    let SignerUri::Secret(name) = &config.signer else {
        // A TLS Secret is cert-manager's to write; an HSM key is made in the HSM.
        return Ok(());
    };
    if !config.create_signing_secret {
        return Ok(());
    }
    let opns = &config.settings.operator_namespace;
    let api: Api<Secret> = Api::namespaced(client.clone(), opns);
    let mut failures = 0u32;
    loop {
        match super::ensure_secret(&api, name, opns).await {
            Ok(created) => {
                if created {
                    tracing::info!(secret = %name, "created the signing Secret with a fresh ES256 key");
                }
                return Ok(());
            }
            Err(kube::Error::Api(s)) if s.code < 500 && s.code != 429 => {
                return Err(Error::Kube(kube::Error::Api(s)));
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                let delay = backoff_delay(failures, 0.5);
                tracing::warn!(error = %e, retry_in = ?delay, "could not read or create the signing Secret");
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// The signing Secret, watched by name: the JWKS is published again after every change, and
/// every card signed again only when the keys or the active key change (or the Secret comes or
/// goes). Acted on once the store holds the change: a relist's objects reach the store only
/// at its end, so a trigger at `InitApply` would find the Secret missing there.
fn signing_secret(
    client: &Client,
    key: &ObjectRef<Secret>,
    cache: &Arc<KeyCache>,
    publish: &UnboundedSender<()>,
    resign_all: &UnboundedSender<()>,
) -> (AbortOnDrop, Store<Secret>) {
    let (store, writer) = reflector::store();
    let feed = watcher(
        Api::<Secret>::namespaced(client.clone(), key.namespace.as_deref().unwrap_or_default()),
        watcher::Config::default().fields(&format!("metadata.name={}", key.name)),
    )
    .default_backoff()
    .reflect(writer);
    let key = key.clone();
    let (keys_store, cache, publish, mut resign_all) = (
        store.clone(),
        cache.clone(),
        publish.clone(),
        resign_all.clone(),
    );
    let span = tracing::info_span!("signing_secret", secret = %key);
    let task = AbortOnDrop::spawn(span, async move {
        futures::pin_mut!(feed);
        let mut last_keys = None;
        while let Some(ev) = feed.next().await {
            if !matches!(
                ev,
                Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone)
            ) {
                continue;
            }
            let secret = keys_store.get(&key);
            if let Some(Err(e)) = secret.as_ref().map(|s| cache.get(s)) {
                tracing::warn!(error = %e, "the signing Secret is unusable; cards keep their last signatures");
            }
            let _ = publish.unbounded_send(());
            let keys = Some(secret.map(|s| {
                let active = s.annotations().get(ANN_ACTIVE_KEY).cloned();
                (s.data.clone(), active, super::revoked_kids(&s))
            }));
            if keys != last_keys {
                last_keys = keys;
                let _ = resign_all.send(()).await;
            }
        }
    });
    (task, store)
}

/// The JWKS ConfigMap, watched by name: deleted or edited by anyone, it is written again.
fn jwks_configmap(client: &Client, opns: &str, publish: UnboundedSender<()>) -> AbortOnDrop {
    let feed = watcher(
        Api::<ConfigMap>::namespaced(client.clone(), opns),
        watcher::Config::default().fields(&format!("metadata.name={JWKS_CONFIGMAP}")),
    )
    .default_backoff();
    AbortOnDrop::spawn(
        tracing::info_span!("jwks_configmap", configmap = JWKS_CONFIGMAP),
        async move {
            futures::pin_mut!(feed);
            while let Some(ev) = feed.next().await {
                if matches!(
                    ev,
                    Ok(watcher::Event::Apply(_)
                        | watcher::Event::Delete(_)
                        | watcher::Event::InitDone)
                ) {
                    let _ = publish.unbounded_send(());
                }
            }
        },
    )
}
