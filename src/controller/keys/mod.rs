//! The signing keys: a Secret in the operator's namespace holding one or more private keys
//! (JWK or PKCS#8 PEM entries), one of them active (annotation `agentcard.dev/active-key`, or
//! the only key). Every public key is published as the JWKS ConfigMap that the card server
//! serves at `/.well-known/jwks.json`; the server never reads a private key.
//!
//! Parsing is pure ([`keys_from_secret`]); the controller keeps the parsed keys cached by the
//! Secret's resourceVersion, so a thousand reconciles parse the keys once.
//!
//! Staged rotation ([`rotate`], pure): a key named active starts signing only once it has been
//! in the published JWKS for one JWKS max-age, so clients holding a cached JWKS from before it
//! was added never meet a card they cannot verify. Until then the keys that signed before keep
//! signing; from then on the new key signs first and those older keys sign beside it for as long
//! as they stay in the Secret, so even a client still holding a JWKS from before the rotation
//! verifies every card until the old key is removed. Where a rotation stands (which keys sign,
//! when each key was first published) is kept in annotations of the JWKS ConfigMap, so it
//! survives restarts and lease hand-overs.

pub mod jwks;
pub mod pkcs11;
pub mod signing;
pub mod source;
pub mod vault;
pub mod watch;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::ResourceExt;

use crate::a2a::canonical::jcs;
use crate::a2a::{Algorithm, Jwks, SigningKey};
use crate::contract::*;

/// Annotation of the signing Secret naming the active key id.
pub const ANN_ACTIVE_KEY: &str = "agentcard.dev/active-key";
/// Annotation of the signing Secret listing revoked key ids (comma-separated): a revoked key
/// leaves the JWKS at once, signs nothing, and every card it signed is signed again.
pub const ANN_REVOKED_KEYS: &str = "agentcard.dev/revoked-keys";
/// Name of the JWKS ConfigMap in the operator's namespace.
pub const JWKS_CONFIGMAP: &str = "agentcard-jwks";
/// JWKS ConfigMap annotation: the key ids that sign, newest first, comma-separated.
pub const ANN_SIGNING_KEYS: &str = "agentcard.dev/signing-keys";
/// JWKS ConfigMap annotation: when each key id was first published (JSON `{kid: RFC 3339}`).
pub const ANN_KEYS_PUBLISHED: &str = "agentcard.dev/keys-published-at";

/// The parsed keys of the signing Secret.
#[derive(Debug)]
pub struct Keys {
    /// The key named active (it signs once its rotation allows, see [`rotate`]).
    pub active: SigningKey,
    /// Every key of the Secret, in entry-name order.
    pub all: Vec<SigningKey>,
    /// Public keys of every key of the Secret (active included), in entry-name order.
    pub jwks: Jwks,
    /// resourceVersion of the Secret they came from.
    pub version: String,
    /// When the certificate of a TLS Secret's key expires (seconds since the epoch): past it,
    /// the Secret is parsed again, and refused until renewed.
    pub not_after: Option<i64>,
    /// Key ids revoked (`agentcard.dev/revoked-keys`): never published, never signing.
    pub revoked: BTreeSet<String>,
}

/// The key ids a comma-separated annotation lists, in order (none when absent).
fn kid_list(annotations: &BTreeMap<String, String>, name: &str) -> Vec<String> {
    annotations
        .get(name)
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The key ids a Secret's `agentcard.dev/revoked-keys` annotation lists.
pub fn revoked_kids(secret: &Secret) -> BTreeSet<String> {
    kid_list(secret.annotations(), ANN_REVOKED_KEYS)
        .into_iter()
        .collect()
}

/// What is wrong with a signing Secret (said in the cards' conditions, naming the entry).
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// An entry is not a key.
    #[error("key {name:?}: {source}")]
    Key {
        /// The entry.
        name: String,
        /// Why it is not one.
        source: crate::a2a::keys::KeyError,
    },
    /// Two entries hold keys of the same key id.
    #[error("key {name:?}: key id {kid:?} is used twice")]
    KidTwice {
        /// The second entry.
        name: String,
        /// The key id.
        kid: String,
    },
    /// No entry holds a key.
    #[error("the signing Secret holds no key (entries named *.json, *.jwk or *.pem)")]
    NoKey,
    /// Every key of the Secret is revoked.
    #[error("every key of the signing Secret is revoked ({ann}: {0}): add a new key", ann = ANN_REVOKED_KEYS)]
    AllRevoked(String),
    /// The active key is revoked and several keys remain.
    #[error("the active key {0:?} is revoked and {1} keys remain: name the active one in the {ann} annotation", ann = ANN_ACTIVE_KEY)]
    ActiveRevoked(String, usize),
    /// The active-key annotation names a key that is not there.
    #[error("{ann} names {0:?}, which is not among the keys", ann = ANN_ACTIVE_KEY)]
    ActiveMissing(String),
    /// Several keys and none named active.
    #[error(
        "the signing Secret holds {0} keys: name the active one in the {ann} annotation",
        ann = ANN_ACTIVE_KEY
    )]
    WhichActive(usize),
}

/// Parse the keys of a signing Secret.
pub fn keys_from_secret(secret: &Secret) -> Result<Keys, SecretError> {
    let mut entries: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for (k, v) in secret.data.iter().flatten() {
        entries.insert(k.clone(), v.0.clone());
    }
    for (k, v) in secret.string_data.iter().flatten() {
        entries.insert(k.clone(), v.clone().into_bytes());
    }
    let mut all = Vec::new();
    for (name, bytes) in &entries {
        if !(name.ends_with(".json") || name.ends_with(".jwk") || name.ends_with(".pem")) {
            continue;
        }
        let key = SigningKey::from_bytes(bytes, None, None).map_err(|source| SecretError::Key {
            name: name.clone(),
            source,
        })?;
        if all.iter().any(|k: &SigningKey| k.kid() == key.kid()) {
            return Err(SecretError::KidTwice {
                name: name.clone(),
                kid: key.kid().to_string(),
            });
        }
        all.push(key);
    }
    if all.is_empty() {
        return Err(SecretError::NoKey);
    }
    let revoked = revoked_kids(secret);
    all.retain(|k| !revoked.contains(k.kid()));
    if all.is_empty() {
        let list: Vec<&str> = revoked.iter().map(String::as_str).collect();
        return Err(SecretError::AllRevoked(list.join(", ")));
    }
    let active = match secret.annotations().get(ANN_ACTIVE_KEY) {
        // A revoked active key gives way at once to the one key left.
        Some(kid) if revoked.contains(kid) && all.len() == 1 => all[0].clone(),
        Some(kid) if revoked.contains(kid) => {
            return Err(SecretError::ActiveRevoked(kid.clone(), all.len()))
        }
        Some(kid) => all
            .iter()
            .find(|k| k.kid() == kid)
            .cloned()
            .ok_or_else(|| SecretError::ActiveMissing(kid.clone()))?,
        None if all.len() == 1 => all[0].clone(),
        None => return Err(SecretError::WhichActive(all.len())),
    };
    Ok(Keys {
        jwks: Jwks::from_signing_keys(&all),
        all,
        active,
        version: secret.resource_version().unwrap_or_default(),
        not_after: None,
        revoked,
    })
}

/// Where a key rotation stands.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rotation {
    /// The key ids that sign, newest first.
    pub signing: Vec<String>,
    /// When each key of the Secret was first published in the JWKS.
    pub published: BTreeMap<String, jiff::Timestamp>,
    /// When the active key starts signing, while it waits.
    pub activates_at: Option<jiff::Timestamp>,
}

impl Rotation {
    /// The rotation recorded on a JWKS ConfigMap (empty for one written before staged rotation).
    pub fn from_annotations(annotations: &BTreeMap<String, String>) -> Rotation {
        let signing = kid_list(annotations, ANN_SIGNING_KEYS);
        let published = annotations
            .get(ANN_KEYS_PUBLISHED)
            .and_then(|v| serde_json::from_str::<BTreeMap<String, String>>(v).ok())
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(k, t)| t.parse().ok().map(|t| (k, t)))
            .collect();
        Rotation {
            signing,
            published,
            activates_at: None,
        }
    }

    /// The annotations that record this rotation.
    pub fn annotations(&self) -> BTreeMap<String, String> {
        let published: BTreeMap<&str, String> = self
            .published
            .iter()
            .map(|(k, t)| (k.as_str(), t.to_string()))
            .collect();
        BTreeMap::from([
            (ANN_SIGNING_KEYS.to_string(), self.signing.join(",")),
            (
                ANN_KEYS_PUBLISHED.to_string(),
                serde_json::to_string(&published).unwrap_or_default(),
            ),
        ])
    }
}

/// The rotation after `previous`, for `keys` at `now`, when a key may sign `delay` after it was
/// first published (see the module doc). Pure.
pub fn rotate(
    keys: &Keys,
    previous: &Rotation,
    now: jiff::Timestamp,
    delay: std::time::Duration,
) -> Rotation {
    let in_secret: Vec<&str> = keys.all.iter().map(SigningKey::kid).collect();
    let published: BTreeMap<String, jiff::Timestamp> = in_secret
        .iter()
        .map(|kid| {
            let at = previous.published.get(*kid).copied().unwrap_or(now);
            (kid.to_string(), at)
        })
        .collect();
    let wanted = keys.active.kid().to_string();
    let older: Vec<String> = previous
        .signing
        .iter()
        .filter(|k| **k != wanted && in_secret.contains(&k.as_str()))
        .cloned()
        .collect();
    let with_wanted = || {
        std::iter::once(wanted.clone())
            .chain(older.iter().cloned())
            .collect()
    };
    let (signing, activates_at) = if older.is_empty() || previous.signing.contains(&wanted) {
        // First start, the keys that signed are gone, or the active key already signs.
        (with_wanted(), None)
    } else {
        let since = published.get(&wanted).copied().unwrap_or(now);
        let span = jiff::SignedDuration::try_from(delay).unwrap_or(jiff::SignedDuration::ZERO);
        let at = since.checked_add(span).unwrap_or(since);
        if at <= now {
            (with_wanted(), None)
        } else {
            (older.clone(), Some(at))
        }
    };
    Rotation {
        signing,
        published,
        activates_at,
    }
}

/// The Secret entry name for a key id: Secret keys allow only `[-._a-zA-Z0-9]`.
pub fn secret_entry_name(kid: &str) -> String {
    let safe: String = kid
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-._".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{safe}.jwk.json")
}

/// A signing Secret holding `key` as its active key: what the operator creates on first start
/// and what `keygen --format secret` prints.
pub fn secret_for(
    key: &SigningKey,
    name: &str,
    namespace: Option<&str>,
) -> Result<Secret, crate::a2a::keys::KeyError> {
    let mut secret = Secret {
        type_: Some("Opaque".into()),
        string_data: Some(BTreeMap::from([(
            secret_entry_name(key.kid()),
            key.private_jwk_json()?,
        )])),
        ..Default::default()
    };
    secret.metadata.name = Some(name.into());
    secret.metadata.namespace = namespace.map(str::to_string);
    secret.metadata.labels = Some(BTreeMap::from([(
        LABEL_MANAGED_BY.to_string(),
        MANAGER.to_string(),
    )]));
    secret.metadata.annotations = Some(BTreeMap::from([(
        ANN_ACTIVE_KEY.to_string(),
        key.kid().to_string(),
    )]));
    Ok(secret)
}

/// Create the signing Secret with a fresh ES256 key when it does not exist.
pub async fn ensure_secret(
    api: &Api<Secret>,
    name: &str,
    namespace: &str,
) -> Result<bool, kube::Error> {
    if api.get_opt(name).await?.is_some() {
        return Ok(false);
    }
    let key =
        SigningKey::generate(Algorithm::ES256, None).map_err(|e| kube::Error::Service(e.into()))?;
    let secret =
        secret_for(&key, name, Some(namespace)).map_err(|e| kube::Error::Service(e.into()))?;
    match api.create(&PostParams::default(), &secret).await {
        Ok(_) => Ok(true),
        // Another process created it first: fine.
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// The JWKS ConfigMap for `keys`: served with `max_age`, recording `rotation`.
pub fn jwks_configmap(
    body: &str,
    namespace: &str,
    published_at: &str,
    max_age: u32,
    rotation: &Rotation,
) -> ConfigMap {
    let mut annotations = rotation.annotations();
    annotations.insert(ANN_CONTENT_HASH.into(), content_hash(body.as_bytes()));
    annotations.insert(ANN_PUBLISHED_AT.into(), published_at.into());
    annotations.insert(ANN_MAX_AGE.into(), max_age.to_string());
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": JWKS_CONFIGMAP,
            "namespace": namespace,
            "labels": {LABEL_MANAGED_BY: MANAGER, LABEL_CONTENT: CONTENT_JWKS},
            "annotations": annotations,
        },
        "data": {KEY_JWKS: body},
    }))
    .unwrap_or_default()
}

fn jwks_body(jwks: &Jwks) -> String {
    String::from_utf8(jcs(&jwks.to_value())).unwrap_or_default()
}

/// Key ids of the signatures on a card as served (the `kid` of each protected header).
pub fn signature_kids(card_json: &str) -> Vec<String> {
    use base64::Engine as _;
    let Ok(card) = serde_json::from_str::<serde_json::Value>(card_json) else {
        return Vec::new();
    };
    card.get("signatures")
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|sig| {
            let protected = sig.get("protected")?.as_str()?;
            let header = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(protected.trim_end_matches('='))
                .ok()?;
            let header: serde_json::Value = serde_json::from_slice(&header).ok()?;
            Some(header.get("kid")?.as_str()?.to_string())
        })
        .collect()
}

/// The JWKS to publish: every key of the Secret, then the keys of the JWKS published before
/// (`previous`) that left the Secret while a served card is still signed with them (`in_use`,
/// asked only when such a key exists: it reads every served card), so that card keeps
/// verifying until it is signed again. A revoked key is never kept. Pure.
pub fn published_jwks(
    keys: &Keys,
    previous: Option<&str>,
    in_use: impl FnOnce() -> HashSet<String>,
) -> Jwks {
    let mut jwks = keys.jwks.clone();
    let kid = |k: &serde_json::Map<String, serde_json::Value>| {
        k.get("kid").and_then(|v| v.as_str()).map(str::to_string)
    };
    let current: HashSet<String> = jwks.keys.iter().filter_map(kid).collect();
    let left: Vec<_> = previous
        .and_then(|p| Jwks::from_slice(p.as_bytes()).ok())
        .map(|p| p.keys)
        .unwrap_or_default()
        .into_iter()
        .filter(|k| kid(k).is_some_and(|id| !current.contains(&id) && !keys.revoked.contains(&id)))
        .collect();
    if !left.is_empty() {
        let in_use = in_use();
        jwks.keys.extend(
            left.into_iter()
                .filter(|k| kid(k).is_some_and(|id| in_use.contains(&id))),
        );
    }
    jwks
}

/// What the JWKS publisher last wrote, so a JWKS ConfigMap deleted by someone comes back with
/// the same publication time for the same bytes and the rotation where it stood.
#[derive(Clone, Debug)]
pub struct JwksState {
    body: String,
    hash: String,
    published_at: String,
    rotation: Rotation,
}

/// Publish the JWKS of `keys` (server-side apply) with the rotation it allows now, unless the
/// ConfigMap already holds exactly that. Its publication time (the served `Last-Modified`)
/// moves only with its bytes. Returns the rotation: which keys sign, and when the active key
/// will, while it waits, and how many keys that left the Secret it kept. `served_kids` (the
/// keys the served cards are signed with) is asked only when the JWKS published before holds a
/// key the Secret no longer has.
pub async fn publish_jwks(
    client: &kube::Client,
    keys: &Keys,
    namespace: &str,
    max_age: u32,
    last: &mut Option<JwksState>,
    served_kids: impl FnOnce() -> HashSet<String>,
) -> Result<(Rotation, usize), kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let existing = api.get_opt(JWKS_CONFIGMAP).await?;
    let previous_body = existing
        .as_ref()
        .and_then(|cm| cm.data.as_ref())
        .and_then(|d| d.get(KEY_JWKS))
        .cloned()
        .or_else(|| last.as_ref().map(|l| l.body.clone()));
    let jwks = published_jwks(keys, previous_body.as_deref(), served_kids);
    let retained = jwks.keys.len().saturating_sub(keys.jwks.keys.len());
    let body = jwks_body(&jwks);
    let recorded = existing
        .as_ref()
        .map(|cm| Rotation::from_annotations(cm.annotations()))
        .filter(|r| !r.signing.is_empty());
    let previous = recorded
        .or_else(|| last.as_ref().map(|l| l.rotation.clone()))
        .unwrap_or_default();
    let delay = std::time::Duration::from_secs(u64::from(max_age));
    let rotation = rotate(keys, &previous, jiff::Timestamp::now(), delay);
    let same_bytes = existing
        .as_ref()
        .and_then(|cm| cm.data.as_ref())
        .and_then(|d| d.get(KEY_JWKS))
        .is_some_and(|b| *b == body);
    let previous_time = existing
        .as_ref()
        .and_then(|cm| cm.annotations().get(ANN_PUBLISHED_AT).cloned())
        .filter(|_| same_bytes);
    let hash = content_hash(body.as_bytes());
    let remembered = last
        .as_ref()
        .filter(|l| l.hash == hash)
        .map(|l| l.published_at.clone());
    let published_at = previous_time
        .clone()
        .or(remembered)
        .unwrap_or_else(|| jiff::Timestamp::now().to_string());
    *last = Some(JwksState {
        body: body.clone(),
        hash,
        published_at: published_at.clone(),
        rotation: rotation.clone(),
    });
    let want = jwks_configmap(&body, namespace, &published_at, max_age, &rotation);
    let current = existing.as_ref().is_some_and(|cm| {
        same_bytes
            && previous_time.is_some()
            && want
                .annotations()
                .iter()
                .all(|(k, v)| cm.annotations().get(k) == Some(v))
            && cm.labels().get(LABEL_CONTENT).map(String::as_str) == Some(CONTENT_JWKS)
            && cm.labels().get(LABEL_MANAGED_BY).map(String::as_str) == Some(MANAGER)
    });
    if !current {
        api.patch(
            JWKS_CONFIGMAP,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&want),
        )
        .await?;
    }
    Ok((rotation, retained))
}

/// Cache of parsed keys, keyed by the Secret's resourceVersion.
///
/// A TLS Secret holds one key: when cert-manager renews the Certificate with a new key, the old
/// one is gone from the Secret. So that the renewal still goes through the staged rotation, the
/// cache carries the previous key (while its certificate is valid) beside the new one for one
/// JWKS max-age: the old key keeps signing while the new one is published, then the new one
/// signs alone. A restart in the middle of that stage loses the carried key (the new key then
/// signs at once).
#[derive(Default)]
pub struct KeyCache {
    kind: source::SecretKind,
    /// How long a renewed TLS Secret's previous key is carried.
    carry_for: std::time::Duration,
    cached: std::sync::Mutex<Cached>,
}

/// What the cache holds: the last parsed keys, the key carried over a renewal, and the view
/// handed out (the parsed keys with the carried key), valid until the carry ends.
#[derive(Default)]
struct Cached {
    parsed: Option<Arc<Keys>>,
    carried: Option<(SigningKey, i64)>,
    view: Option<Arc<Keys>>,
}

impl KeyCache {
    /// A cache for Secrets of `kind`; a renewed TLS Secret's previous key is carried for
    /// `carry_for` (the JWKS max-age).
    pub fn new(kind: source::SecretKind, carry_for: std::time::Duration) -> KeyCache {
        KeyCache {
            kind,
            carry_for,
            cached: std::sync::Mutex::default(),
        }
    }

    /// The keys of `secret`, parsed once per resourceVersion.
    pub fn get(&self, secret: &Secret) -> Result<Arc<Keys>, source::KeySourceError> {
        let version = secret.resource_version().unwrap_or_default();
        let now = jiff::Timestamp::now().as_second();
        let mut guard = crate::locks::lock(&self.cached);
        // A view's version is the Secret's, or the Secret's `+` the carried key's id.
        let fresh = |k: &Arc<Keys>| {
            let of_this = k.version == version
                || k.version
                    .strip_prefix(version.as_str())
                    .is_some_and(|rest| rest.starts_with('+'));
            of_this && !version.is_empty() && k.not_after.is_none_or(|t| now < t)
        };
        if let Some(view) = guard.view.as_ref().filter(|k| fresh(k)) {
            return Ok(view.clone());
        }
        let reuse = guard
            .parsed
            .as_ref()
            .filter(|k| k.version == version && fresh(k))
            .cloned();
        let parsed = match reuse {
            Some(k) => k,
            None => {
                let keys = Arc::new(source::keys_from(self.kind, secret)?);
                let before = guard.parsed.replace(keys.clone());
                if self.kind == source::SecretKind::Tls {
                    if let Some(old) = before.filter(|b| {
                        b.active.kid() != keys.active.kid()
                            && b.not_after.is_some_and(|t| now < t)
                            && !keys.revoked.contains(b.active.kid())
                    }) {
                        let until = now.saturating_add(
                            i64::try_from(self.carry_for.as_secs()).unwrap_or(i64::MAX),
                        );
                        guard.carried = Some((old.active.clone(), until));
                    }
                }
                keys
            }
        };
        let carried = guard
            .carried
            .as_ref()
            .filter(|(key, until)| now < *until && !parsed.revoked.contains(key.kid()))
            .cloned();
        let view = match carried {
            Some((old, until)) => {
                let mut all = parsed.all.clone();
                all.push(old.clone());
                Arc::new(Keys {
                    jwks: Jwks::from_signing_keys(&all),
                    all,
                    active: parsed.active.clone(),
                    // Another version for the publisher and the reconciles: the view changes
                    // when the carry ends.
                    version: format!("{}+{}", parsed.version, old.kid()),
                    not_after: Some(parsed.not_after.map_or(until, |t| t.min(until))),
                    revoked: parsed.revoked.clone(),
                })
            }
            None => {
                guard.carried = None;
                parsed
            }
        };
        guard.view = Some(view.clone());
        Ok(view)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys_with(active: &str, kids: &[&str]) -> Keys {
        let all: Vec<SigningKey> = kids
            .iter()
            .map(|k| SigningKey::generate(Algorithm::ES256, Some(k)).unwrap())
            .collect();
        Keys {
            jwks: Jwks::from_signing_keys(&all),
            active: all.iter().find(|k| k.kid() == active).unwrap().clone(),
            all,
            version: "1".into(),
            not_after: None,
            revoked: BTreeSet::new(),
        }
    }

    fn t(s: &str) -> jiff::Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn a_new_active_key_signs_one_max_age_after_it_was_published_beside_the_old_one() {
        let delay = std::time::Duration::from_secs(300);
        // First start: the active key signs at once.
        let r0 = rotate(
            &keys_with("a", &["a"]),
            &Rotation::default(),
            t("2026-01-01T00:00:00Z"),
            delay,
        );
        assert_eq!(r0.signing, ["a"]);
        assert_eq!(r0.activates_at, None);
        // b added and named active: published now, a keeps signing for 300 s.
        let two = keys_with("b", &["a", "b"]);
        let r1 = rotate(&two, &r0, t("2026-01-01T01:00:00Z"), delay);
        assert_eq!(r1.signing, ["a"]);
        assert_eq!(r1.published["a"], t("2026-01-01T00:00:00Z"));
        assert_eq!(r1.published["b"], t("2026-01-01T01:00:00Z"));
        assert_eq!(r1.activates_at, Some(t("2026-01-01T01:05:00Z")));
        let r2 = rotate(&two, &r1, t("2026-01-01T01:04:59Z"), delay);
        assert_eq!(
            (r2.signing.clone(), r2.activates_at),
            (vec!["a".to_string()], r1.activates_at)
        );
        // Then b signs first, a beside it while it stays in the Secret.
        let r3 = rotate(&two, &r2, t("2026-01-01T01:05:00Z"), delay);
        assert_eq!(r3.signing, ["b", "a"]);
        assert_eq!(r3.activates_at, None);
        // a removed: b alone.
        let r4 = rotate(
            &keys_with("b", &["b"]),
            &r3,
            t("2026-01-01T02:00:00Z"),
            delay,
        );
        assert_eq!(r4.signing, ["b"]);
        assert!(!r4.published.contains_key("a"));
        // Back to a (still published long ago) is immediate.
        let r5 = rotate(
            &keys_with("a", &["a", "b"]),
            &r3,
            t("2026-01-01T02:00:00Z"),
            delay,
        );
        assert_eq!(r5.signing, ["a", "b"]);
        // The record survives a round trip through the ConfigMap's annotations.
        let back = Rotation::from_annotations(&r1.annotations());
        assert_eq!((back.signing, back.published), (r1.signing, r1.published));
    }

    #[test]
    fn when_the_keys_that_signed_are_gone_the_active_key_signs_at_once() {
        let delay = std::time::Duration::from_secs(300);
        let before = Rotation {
            signing: vec!["gone".into()],
            ..Default::default()
        };
        let r = rotate(
            &keys_with("b", &["b"]),
            &before,
            t("2026-01-01T00:00:00Z"),
            delay,
        );
        assert_eq!(r.signing, ["b"]);
    }
    use k8s_openapi::ByteString;

    fn secret(entries: &[(&str, String)], active: Option<&str>) -> Secret {
        let data: BTreeMap<String, ByteString> = entries
            .iter()
            .map(|(k, v)| (k.to_string(), ByteString(v.clone().into_bytes())))
            .collect();
        let mut s = Secret {
            data: Some(data),
            ..Default::default()
        };
        if let Some(a) = active {
            s.metadata.annotations = Some(BTreeMap::from([(
                ANN_ACTIVE_KEY.to_string(),
                a.to_string(),
            )]));
        }
        s
    }

    #[test]
    fn one_key_is_active_without_annotation_and_pem_keys_load() {
        let k = SigningKey::generate(Algorithm::EdDSA, None).unwrap();
        let keys = keys_from_secret(&secret(&[("a.pem", k.private_pem().unwrap())], None)).unwrap();
        assert_eq!(keys.active.kid(), k.kid());
        assert_eq!(keys.jwks.keys.len(), 1);
    }

    #[test]
    fn several_keys_need_the_annotation_and_all_are_published() {
        let a = SigningKey::generate(Algorithm::ES256, Some("old")).unwrap();
        let b = SigningKey::generate(Algorithm::ES256, Some("new")).unwrap();
        let entries = [
            ("old.jwk.json", a.private_jwk_json().unwrap()),
            ("new.jwk.json", b.private_jwk_json().unwrap()),
        ];
        let err = keys_from_secret(&secret(&entries, None))
            .unwrap_err()
            .to_string();
        assert!(err.contains(ANN_ACTIVE_KEY), "{err}");
        let keys = keys_from_secret(&secret(&entries, Some("new"))).unwrap();
        assert_eq!(keys.active.kid(), "new");
        let kids: Vec<&str> = keys
            .jwks
            .keys
            .iter()
            .map(|k| k["kid"].as_str().unwrap())
            .collect();
        assert_eq!(kids, ["new", "old"]);
        assert!(keys_from_secret(&secret(&entries, Some("gone"))).is_err());
    }

    #[test]
    fn a_revoked_key_is_dropped_its_stand_in_signs_at_once_and_it_is_never_kept_published() {
        let a = SigningKey::generate(Algorithm::ES256, Some("leaked")).unwrap();
        let b = SigningKey::generate(Algorithm::ES256, Some("spare")).unwrap();
        let entries = [
            ("leaked.jwk.json", a.private_jwk_json().unwrap()),
            ("spare.jwk.json", b.private_jwk_json().unwrap()),
        ];
        let before = keys_from_secret(&secret(&entries, Some("leaked"))).unwrap();
        let mut revoked = secret(&entries, Some("leaked"));
        revoked
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(ANN_REVOKED_KEYS.into(), "leaked".into());
        let after = keys_from_secret(&revoked).unwrap();
        assert_eq!(after.active.kid(), "spare");
        assert_eq!(after.all.len(), 1);
        assert!(after.jwks.find("leaked").is_none());
        // The spare key signs at once, although the leaked one signed before.
        let delay = std::time::Duration::from_secs(300);
        let r0 = rotate(
            &before,
            &Rotation::default(),
            t("2026-01-01T00:00:00Z"),
            delay,
        );
        assert_eq!(r0.signing, ["leaked"]);
        let r1 = rotate(&after, &r0, t("2026-01-01T00:00:01Z"), delay);
        assert_eq!(
            (r1.signing.clone(), r1.activates_at),
            (vec!["spare".to_string()], None)
        );
        // Served cards still signed with it do not keep it in the JWKS.
        let published = jwks_body(&before.jwks);
        let kept = published_jwks(&after, Some(&published), || {
            HashSet::from(["leaked".to_string()])
        });
        assert!(kept.find("leaked").is_none());
        // Everything revoked: refused, naming the annotation.
        revoked
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(ANN_REVOKED_KEYS.into(), "leaked, spare".into());
        let err = keys_from_secret(&revoked).unwrap_err().to_string();
        assert!(err.contains(ANN_REVOKED_KEYS), "{err}");
    }

    #[test]
    fn broken_keys_are_reported_by_entry() {
        let err = keys_from_secret(&secret(
            &[("bad.pem", "-----BEGIN PRIVATE KEY-----\nxx\n".into())],
            None,
        ))
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("key \"bad.pem\""), "{err}");
        assert!(keys_from_secret(&secret(&[], None)).is_err());
    }

    #[test]
    fn a_key_that_left_the_secret_stays_published_while_a_served_card_uses_it() {
        let before = keys_with("old", &["old", "new"]);
        let published = jwks_body(&before.jwks);
        let after = keys_with("new", &["new"]);
        let after_body = jwks_body(&after.jwks);
        // The served card is still signed by the removed key: it stays in the JWKS.
        let card = crate::a2a::AgentCard::from_json_lenient(br#"{"name":"a"}"#).unwrap();
        let old_key = before
            .all
            .iter()
            .find(|k| k.kid() == "old")
            .unwrap()
            .clone();
        let signed = crate::a2a::jws::sign_card(&card, &[old_key], None).unwrap();
        let body = String::from_utf8(serde_json::to_vec(&signed).unwrap()).unwrap();
        let in_use: HashSet<String> = signature_kids(&body).into_iter().collect();
        assert_eq!(in_use, HashSet::from(["old".to_string()]));
        let kids = |j: &Jwks| -> Vec<String> {
            j.keys
                .iter()
                .map(|k| k["kid"].as_str().unwrap().to_string())
                .collect()
        };
        let kept = published_jwks(&after, Some(&published), || in_use.clone());
        assert_eq!(kids(&kept), ["new", "old"]);
        assert_eq!(kept.find("old"), before.jwks.find("old"));
        // Once no served card uses it, it goes; keys never published are not invented.
        assert_eq!(
            kids(&published_jwks(&after, Some(&published), HashSet::new)),
            ["new"]
        );
        // Nothing left the Secret: the served cards are not read at all.
        assert_eq!(
            kids(&published_jwks(&after, None, || unreachable!("read"))),
            ["new"]
        );
        assert_eq!(
            kids(&published_jwks(&after, Some(&after_body), || unreachable!(
                "read"
            ))),
            ["new"]
        );
        assert!(signature_kids("not json").is_empty());
    }
}
