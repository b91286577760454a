//! Where the signing keys live, as `run --signer` names them, in the URI conventions users
//! know from cosign and RFC 7512:
//!
//! - `secret:<name>`: a Secret of the operator's namespace holding private keys (JWK or PKCS#8
//!   PEM entries), one of them active: the default, `secret:agentcard-signing-keys`;
//! - `tls-secret:<name>`: a `kubernetes.io/tls` Secret such as cert-manager writes for a
//!   Certificate: its key signs, and every signature carries the certificate chain as `x5c`;
//! - `pkcs11:token=…;object=…` (RFC 7512): a key in an HSM, reached through the PKCS#11 module
//!   `--pkcs11-module` names (see [`super::pkcs11`]); the private key never leaves the token;
//! - `hashivault://<key>`: a key of Vault's transit engine (see [`super::vault`]); Vault signs.
//!
//! Data flow: the URI is parsed once at start ([`SignerUri::parse`]); the Secret kinds are
//! watched by name and parsed per resourceVersion ([`keys_from`]) into the same [`Keys`] the
//! HSM backend builds, so rotation, JWKS publication and signing are one path for every
//! backend.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;

use super::{keys_from_secret, Keys, SecretError};
use crate::a2a::x5c::{key_from_certificate, CertKeyError};
use crate::a2a::Jwks;

/// The entry of a TLS Secret holding the certificate chain (leaf first).
pub const TLS_CRT: &str = "tls.crt";
/// The entry of a TLS Secret holding the leaf's private key.
pub const TLS_KEY: &str = "tls.key";

/// Where the signing keys are (`run --signer`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SignerUri {
    /// A Secret of signing keys in the operator's namespace.
    Secret(String),
    /// A TLS Secret (certificate chain and key) in the operator's namespace.
    TlsSecret(String),
    /// A key in a PKCS#11 token.
    Pkcs11(super::pkcs11::Pkcs11Uri),
    /// A key of Vault's transit engine.
    Vault(super::vault::VaultUri),
}

/// Why a `--signer` URI names no key.
#[derive(Debug, thiserror::Error)]
pub enum SignerUriError {
    /// The scheme is not one of ours.
    #[error("--signer {0:?}: unknown scheme (secret:<name>, tls-secret:<name>, pkcs11:token=…;object=… or hashivault://<key>)")]
    Scheme(String),
    /// A Secret scheme without a valid Secret name.
    #[error("--signer {0:?}: name the Secret (secret:<name>, tls-secret:<name>)")]
    SecretName(String),
    /// A Vault URI that names no key.
    #[error("--signer {uri:?}: {reason}")]
    Vault {
        /// The URI.
        uri: String,
        /// What is missing or wrong.
        reason: String,
    },
    /// A PKCS#11 URI that names no key.
    #[error("--signer {uri:?}: {reason}")]
    Pkcs11 {
        /// The URI.
        uri: String,
        /// What is missing or wrong.
        reason: String,
    },
}

/// The Secret a `secret:` or `tls-secret:` URI names. Only an empty name is refused here: the
/// API server is the judge of object names, and a name it refuses fails the start with its
/// words (after the lease is taken, so a failing start gives the lease up).
fn secret_name(uri: &str, name: &str) -> Result<String, SignerUriError> {
    (!name.is_empty())
        .then(|| name.to_string())
        .ok_or_else(|| SignerUriError::SecretName(uri.to_string()))
}

impl SignerUri {
    /// Parse a `--signer` URI.
    pub fn parse(uri: &str) -> Result<SignerUri, SignerUriError> {
        if let Some(name) = uri.strip_prefix("tls-secret:") {
            return Ok(SignerUri::TlsSecret(secret_name(uri, name)?));
        }
        if let Some(name) = uri.strip_prefix("secret:") {
            return Ok(SignerUri::Secret(secret_name(uri, name)?));
        }
        if uri.starts_with("hashivault://") {
            return super::vault::VaultUri::parse(uri)
                .map(SignerUri::Vault)
                .map_err(|reason| SignerUriError::Vault {
                    uri: uri.to_string(),
                    reason,
                });
        }
        if uri.starts_with("pkcs11:") {
            return super::pkcs11::Pkcs11Uri::parse(uri)
                .map(SignerUri::Pkcs11)
                .map_err(|reason| SignerUriError::Pkcs11 {
                    uri: uri.to_string(),
                    reason,
                });
        }
        Err(SignerUriError::Scheme(uri.to_string()))
    }

    /// The Secret the keys are read from, for the Secret kinds.
    pub fn secret(&self) -> Option<(&str, SecretKind)> {
        match self {
            SignerUri::Secret(n) => Some((n, SecretKind::Keys)),
            SignerUri::TlsSecret(n) => Some((n, SecretKind::Tls)),
            SignerUri::Pkcs11(_) | SignerUri::Vault(_) => None,
        }
    }

    /// The backend's name, as conditions and metrics say it.
    pub fn backend(&self) -> &'static str {
        match self {
            SignerUri::Secret(_) => "secret",
            SignerUri::TlsSecret(_) => "tls-secret",
            SignerUri::Pkcs11(_) => "pkcs11",
            SignerUri::Vault(_) => "hashivault",
        }
    }
}

impl std::fmt::Display for SignerUri {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SignerUri::Secret(n) => write!(f, "secret:{n}"),
            SignerUri::TlsSecret(n) => write!(f, "tls-secret:{n}"),
            SignerUri::Pkcs11(u) => write!(f, "{u}"),
            SignerUri::Vault(u) => write!(f, "{u}"),
        }
    }
}

/// How a signing Secret holds its keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SecretKind {
    /// Private key entries, one named active.
    #[default]
    Keys,
    /// `tls.crt` and `tls.key`, as cert-manager writes them.
    Tls,
}

/// What is wrong with a TLS Secret (said in the cards' conditions, naming the entry).
#[derive(Debug, thiserror::Error)]
pub enum TlsSecretError {
    /// The certificate's key is revoked: the Certificate must be renewed with a new key.
    #[error("tls.key: key {0:?} is revoked ({ann}): renew the Certificate with a new private key", ann = super::ANN_REVOKED_KEYS)]
    Revoked(String),
    /// An entry is missing.
    #[error("{0}: missing")]
    Missing(&'static str),
    /// The certificate or key is unusable; the entry it is about.
    #[error("{entry}: {source}")]
    Unusable {
        /// `tls.crt` or `tls.key`.
        entry: &'static str,
        /// Why.
        source: CertKeyError,
    },
}

fn entries(secret: &Secret) -> BTreeMap<String, Vec<u8>> {
    let mut out: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for (k, v) in secret.data.iter().flatten() {
        out.insert(k.clone(), v.0.clone());
    }
    for (k, v) in secret.string_data.iter().flatten() {
        out.insert(k.clone(), v.clone().into_bytes());
    }
    out
}

/// The signing key of a TLS Secret, checked at `now` (seconds since the epoch): its key
/// signs, its chain goes into each signature as `x5c`, its key id is the key's thumbprint (a
/// renewal with a new key is a new key id, which the staged rotation publishes first).
pub fn keys_from_tls_secret(secret: &Secret, now: i64) -> Result<Keys, TlsSecretError> {
    let entries = entries(secret);
    let crt = entries
        .get(TLS_CRT)
        .ok_or(TlsSecretError::Missing(TLS_CRT))?;
    let key = entries
        .get(TLS_KEY)
        .ok_or(TlsSecretError::Missing(TLS_KEY))?;
    let not_after = crate::a2a::x5c::not_after(crt).ok();
    let signing = key_from_certificate(crt, key, now).map_err(|source| {
        let entry = match source {
            CertKeyError::PrivateKey(_) | CertKeyError::Weak(_) | CertKeyError::Key(_) => TLS_KEY,
            _ => TLS_CRT,
        };
        TlsSecretError::Unusable { entry, source }
    })?;
    let revoked = super::revoked_kids(secret);
    if revoked.contains(signing.kid()) {
        return Err(TlsSecretError::Revoked(signing.kid().to_string()));
    }
    Ok(Keys {
        revoked,
        jwks: Jwks::from_signing_keys([&signing]),
        all: vec![signing.clone()],
        active: signing,
        version: secret.resource_version().unwrap_or_default(),
        not_after,
    })
}

/// What is wrong with a signing Secret of either kind.
#[derive(Debug, thiserror::Error)]
pub enum KeySourceError {
    /// A Secret of keys.
    #[error(transparent)]
    Keys(#[from] SecretError),
    /// A TLS Secret.
    #[error(transparent)]
    Tls(#[from] TlsSecretError),
}

/// The keys of a signing Secret of `kind`.
pub fn keys_from(kind: SecretKind, secret: &Secret) -> Result<Keys, KeySourceError> {
    match kind {
        SecretKind::Keys => Ok(keys_from_secret(secret)?),
        SecretKind::Tls => Ok(keys_from_tls_secret(
            secret,
            jiff::Timestamp::now().as_second(),
        )?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signer_uris_name_a_secret_a_tls_secret_or_a_token_key() {
        assert_eq!(
            SignerUri::parse("secret:agentcard-signing-keys").unwrap(),
            SignerUri::Secret("agentcard-signing-keys".into())
        );
        let tls = SignerUri::parse("tls-secret:card-signer").unwrap();
        assert_eq!(tls.secret(), Some(("card-signer", SecretKind::Tls)));
        assert_eq!(tls.to_string(), "tls-secret:card-signer");
        for bad in [
            "secret:",
            "tls-secret:",
            "vault:x",
            "agentcard",
            "hashivault://",
        ] {
            let err = SignerUri::parse(bad).unwrap_err().to_string();
            assert!(err.contains(bad), "{err}");
        }
    }
}
