//! The keys cards are signed with, as the reconciles ask for them: the keys of the signer
//! backend ([`KeySource`]: a signing Secret parsed once per version, or a key held by an HSM),
//! and which of them sign now, once the JWKS publisher
//! ([`crate::controller::keys::jwks`]) has published them. A card is never signed with a key
//! clients cannot fetch yet.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::watch;

use crate::controller::error::Error;
use crate::controller::keys::{self, KeyCache, Keys};

/// The JWKS publisher's last publication.
#[derive(Clone, Debug)]
pub struct PublishedKeys {
    /// resourceVersion of the Secret whose keys the JWKS holds.
    pub version: String,
    /// Which keys sign, and when the active key will.
    pub rotation: keys::Rotation,
    /// The key ids revoked.
    pub revoked: std::collections::BTreeSet<String>,
}

/// The keys a card is signed with now.
#[derive(Clone, Debug)]
pub struct Signers {
    /// Newest first (the first one is reported as the card's `keyId`).
    pub keys: Vec<crate::a2a::SigningKey>,
    /// The active key and when it starts signing, while it waits to be in every cached JWKS.
    pub pending: Option<Pending>,
}

/// An active key that does not sign yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    /// Its key id.
    pub kid: String,
    /// When it starts signing.
    pub at: jiff::Timestamp,
}

/// What a held key's opener last said: the keys, or why they could not be opened (`None`
/// before the first try).
pub type HeldKeys = watch::Receiver<Option<Result<Arc<Keys>, String>>>;

/// Where the keys come from: one backend per installation (`--signer`).
#[derive(Clone)]
pub enum KeySource {
    /// A signing Secret or TLS Secret of the operator's namespace, watched by name.
    Secret {
        /// The `--signer` URI (`secret:<name>`, `tls-secret:<name>`).
        uri: String,
        /// The Secret.
        key: ObjectRef<Secret>,
        /// The Secret, watched by name.
        secrets: Store<Secret>,
        /// The parsed keys of each Secret version.
        cache: Arc<KeyCache>,
    },
    /// A key held by a backend that only signs (an HSM): opened in the background, retried
    /// with backoff until it opens.
    Held {
        /// The `--signer` URI (PIN hidden).
        uri: String,
        /// The opened keys, or why they could not be opened.
        keys: HeldKeys,
    },
}

impl KeySource {
    /// The keys, or why there are none now (naming the backend).
    pub fn keys(&self) -> Result<Arc<Keys>, Error> {
        match self {
            KeySource::Secret {
                uri,
                key,
                secrets,
                cache,
            } => {
                let secret = secrets.get(key).ok_or_else(|| {
                    Error::KeyUnavailable(format!("{uri}: Secret {key} not found"))
                })?;
                cache
                    .get(&secret)
                    .map_err(|e| Error::KeyUnavailable(format!("{uri}: Secret {key}: {e}")))
            }
            KeySource::Held { uri, keys } => match keys.borrow().as_ref() {
                Some(Ok(k)) => Ok(k.clone()),
                Some(Err(e)) => Err(Error::KeyUnavailable(format!("{uri}: {e}"))),
                None => Err(Error::KeyUnavailable(format!("{uri}: not opened yet"))),
            },
        }
    }

    /// The signing Secret as stored, for the Secret kinds (rotation Events go on it).
    pub fn secret(&self) -> Option<Arc<Secret>> {
        match self {
            KeySource::Secret { key, secrets, .. } => secrets.get(key),
            KeySource::Held { .. } => None,
        }
    }
}

/// The signer backend's keys, and the JWKS publisher's word on which keys sign.
pub struct Signing {
    /// Where the keys come from.
    pub source: KeySource,
    /// What the JWKS publisher last published.
    pub published: watch::Receiver<Option<PublishedKeys>>,
}

impl Signing {
    /// The signing keys (a Secret's parsed once per version).
    pub fn keys(&self) -> Result<Arc<Keys>, Error> {
        self.source.keys()
    }

    /// The keys that sign now (see [`keys::rotate`]), once the JWKS of `keys` is published:
    /// waits (at most 10 s) for the publisher, so that a card signed with them never reaches
    /// clients before the keys that verify it (at start-up, and after a key is added).
    pub async fn signers(&self, keys: &Keys) -> Result<Signers, Error> {
        let mut published = self.published.clone();
        let wait = published.wait_for(|p| p.as_ref().is_some_and(|p| p.version == keys.version));
        let outcome = tokio::time::timeout(Duration::from_secs(10), wait)
            .await
            .map(|r| r.map(|p| p.clone()));
        let published = match outcome {
            Ok(Ok(Some(p))) => p,
            Ok(Ok(None) | Err(_)) => {
                return Err(Error::JwksPending("the JWKS publisher stopped".into()))
            }
            Err(_) => {
                return Err(Error::JwksPending(format!(
                    "ConfigMap {} does not hold the current keys after 10 s",
                    keys::JWKS_CONFIGMAP
                )))
            }
        };
        let signing: Vec<crate::a2a::SigningKey> = published
            .rotation
            .signing
            .iter()
            .filter_map(|kid| keys.all.iter().find(|k| k.kid() == kid).cloned())
            .collect();
        if signing.is_empty() {
            return Err(Error::JwksPending("no key of the Secret signs yet".into()));
        }
        Ok(Signers {
            keys: signing,
            pending: published.rotation.activates_at.map(|at| Pending {
                kid: keys.active.kid().to_string(),
                at,
            }),
        })
    }

    /// The keys that sign now, as last published (empty before the first publication).
    pub fn signing_kids(&self) -> Vec<String> {
        self.published
            .borrow()
            .as_ref()
            .map(|p| p.rotation.signing.clone())
            .unwrap_or_default()
    }
}
