//! The signing keys: a Secret in the operator's namespace holding one or more private keys
//! (JWK or PKCS#8 PEM entries), one of them active (annotation `agentcard.dev/active-key`, or
//! the only key). Every public key is published as the JWKS ConfigMap that the card server
//! serves at `/.well-known/jwks.json`; the server never reads a private key.
//!
//! Parsing is pure ([`keys_from_secret`]); the controller keeps the parsed keys cached by the
//! Secret's resourceVersion, so a thousand reconciles parse the keys once.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::ResourceExt;

use crate::a2a::canonical::jcs;
use crate::a2a::{Algorithm, Jwks, SigningKey};
use crate::contract::*;

/// Annotation of the signing Secret naming the active key id.
pub const ANN_ACTIVE_KEY: &str = "agentcard.dev/active-key";
/// Name of the JWKS ConfigMap in the operator's namespace.
pub const JWKS_CONFIGMAP: &str = "agentcard-jwks";

/// The parsed keys of the signing Secret.
#[derive(Debug)]
pub struct Keys {
    /// The key that signs.
    pub active: SigningKey,
    /// Public keys of every key of the Secret (active included), in entry-name order.
    pub jwks: Jwks,
    /// resourceVersion of the Secret they came from.
    pub version: String,
}

/// Parse the keys of a signing Secret.
pub fn keys_from_secret(secret: &Secret) -> Result<Keys, String> {
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
        let key =
            SigningKey::from_bytes(bytes, None, None).map_err(|e| format!("key {name:?}: {e}"))?;
        if all.iter().any(|k: &SigningKey| k.kid() == key.kid()) {
            return Err(format!(
                "key {name:?}: key id {:?} is used twice",
                key.kid()
            ));
        }
        all.push(key);
    }
    if all.is_empty() {
        return Err(
            "the signing Secret holds no key (entries named *.json, *.jwk or *.pem)".into(),
        );
    }
    let active = match secret.annotations().get(ANN_ACTIVE_KEY) {
        Some(kid) => all
            .iter()
            .find(|k| k.kid() == kid)
            .cloned()
            .ok_or_else(|| format!("{ANN_ACTIVE_KEY} names {kid:?}, which is not among the keys"))?,
        None if all.len() == 1 => all[0].clone(),
        None => {
            return Err(format!(
                "the signing Secret holds {} keys: name the active one in the {ANN_ACTIVE_KEY} annotation",
                all.len()
            ))
        }
    };
    Ok(Keys {
        jwks: Jwks::from_signing_keys(&all),
        active,
        version: secret.resource_version().unwrap_or_default(),
    })
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
pub fn secret_for(key: &SigningKey, name: &str, namespace: Option<&str>) -> Secret {
    let mut secret = Secret {
        type_: Some("Opaque".into()),
        string_data: Some(BTreeMap::from([(
            secret_entry_name(key.kid()),
            key.private_jwk_json(),
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
    secret
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
    let secret = secret_for(&key, name, Some(namespace));
    match api.create(&PostParams::default(), &secret).await {
        Ok(_) => Ok(true),
        // Another process created it first: fine.
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// The JWKS ConfigMap for `keys`.
pub fn jwks_configmap(keys: &Keys, namespace: &str, published_at: &str) -> ConfigMap {
    let body = jwks_body(keys);
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": JWKS_CONFIGMAP,
            "namespace": namespace,
            "labels": {LABEL_MANAGED_BY: MANAGER, LABEL_CONTENT: CONTENT_JWKS},
            "annotations": {
                ANN_CONTENT_HASH: content_hash(body.as_bytes()),
                ANN_PUBLISHED_AT: published_at,
            },
        },
        "data": {KEY_JWKS: body},
    }))
    .unwrap_or_default()
}

/// The content hash of the JWKS `keys` publish: cards signed with `keys` are written only once
/// the JWKS ConfigMap holds this, so no client fetches a card whose key it cannot find.
pub fn jwks_hash(keys: &Keys) -> String {
    content_hash(jwks_body(keys).as_bytes())
}

fn jwks_body(keys: &Keys) -> String {
    String::from_utf8(jcs(&keys.jwks.to_value())).unwrap_or_default()
}

/// Publish the JWKS of `keys` (server-side apply), unless the ConfigMap already holds exactly
/// it. Its publication time (the served `Last-Modified`) moves only with its bytes.
///
/// `last` remembers the publisher's own last publication (`(hash, time)`), so a JWKS ConfigMap
/// deleted by someone comes back with the same time for the same bytes.
pub async fn publish_jwks(
    client: &kube::Client,
    keys: &Keys,
    namespace: &str,
    last: &mut Option<(String, String)>,
) -> Result<(), kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let body = jwks_body(keys);
    let existing = api.get_opt(JWKS_CONFIGMAP).await?;
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
        .filter(|(h, _)| *h == hash)
        .map(|(_, at)| at.clone());
    let published_at = previous_time
        .clone()
        .or(remembered)
        .unwrap_or_else(|| jiff::Timestamp::now().to_string());
    *last = Some((hash, published_at.clone()));
    let want = jwks_configmap(keys, namespace, &published_at);
    let current = existing.as_ref().is_some_and(|cm| {
        same_bytes
            && previous_time.is_some()
            && cm.annotations().get(ANN_CONTENT_HASH) == want.annotations().get(ANN_CONTENT_HASH)
            && cm.labels().get(LABEL_CONTENT).map(String::as_str) == Some(CONTENT_JWKS)
            && cm.labels().get(LABEL_MANAGED_BY).map(String::as_str) == Some(MANAGER)
    });
    if current {
        return Ok(());
    }
    api.patch(
        JWKS_CONFIGMAP,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&want),
    )
    .await
    .map(|_| ())
}

/// Cache of parsed keys, keyed by the Secret's resourceVersion.
#[derive(Default)]
pub struct KeyCache {
    cached: std::sync::Mutex<Option<Arc<Keys>>>,
}

impl KeyCache {
    /// The keys of `secret`, parsed once per resourceVersion.
    pub fn get(&self, secret: &Secret) -> Result<Arc<Keys>, String> {
        let version = secret.resource_version().unwrap_or_default();
        let mut guard = self.cached.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = guard
            .as_ref()
            .filter(|k| k.version == version && !version.is_empty())
        {
            return Ok(k.clone());
        }
        let keys = Arc::new(keys_from_secret(secret)?);
        *guard = Some(keys.clone());
        Ok(keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
            ("old.jwk.json", a.private_jwk_json()),
            ("new.jwk.json", b.private_jwk_json()),
        ];
        let err = keys_from_secret(&secret(&entries, None)).unwrap_err();
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
    fn broken_keys_are_reported_by_entry() {
        let err = keys_from_secret(&secret(
            &[("bad.pem", "-----BEGIN PRIVATE KEY-----\nxx\n".into())],
            None,
        ))
        .unwrap_err();
        assert!(err.starts_with("key \"bad.pem\""), "{err}");
        assert!(keys_from_secret(&secret(&[], None)).is_err());
    }
}
