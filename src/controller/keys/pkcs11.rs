//! Signing with a key in an HSM through PKCS#11 (`--signer pkcs11:token=…;object=…`): the
//! private key never leaves the token; the operator only asks it to sign.
//!
//! Data flow: the RFC 7512 URI ([`Pkcs11Uri`]) names the module (`module-path`, or
//! `--pkcs11-module`), the token (by label), the key (by label and/or id) and the user PIN
//! (`pin-value`, or `pin-source` naming a file, such as a mounted Secret) → [`open`] loads the
//! module, logs in, finds the private key and its public key object, and builds a
//! [`SigningKey`] whose signing goes through [`TokenKey`] (one session behind a mutex; the
//! SHA-2 digest is computed here and the token signs it with `CKM_ECDSA` or
//! `CKM_RSA_PKCS`, the mechanisms every module has). The key id is the public key's RFC 7638
//! thumbprint, unless the URI's `object` is asked to be used (`kid=label`).

use std::sync::{Arc, Mutex};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use cryptoki::context::{CInitializeArgs, CInitializeFlags, Pkcs11};
use cryptoki::mechanism::Mechanism;
use cryptoki::object::{Attribute, AttributeType, KeyType, ObjectClass, ObjectHandle};
use cryptoki::session::{Session, UserType};
use cryptoki::types::AuthPin;
use serde_json::{Map, Value};
use sha2::Digest;

use crate::a2a::keys::{ecdsa_der_to_jose, HeldKey, KeyError};
use crate::a2a::{Algorithm, Jwks, SigningKey};

use super::Keys;

/// A PKCS#11 URI (RFC 7512) naming one key.
#[derive(Clone, PartialEq, Eq)]
pub struct Pkcs11Uri {
    /// The token's label (`token=`).
    pub token: Option<String>,
    /// The key's label (`object=`).
    pub object: Option<String>,
    /// The key's `CKA_ID` (`id=`, percent-encoded bytes).
    pub id: Option<Vec<u8>>,
    /// The user PIN (`pin-value=`).
    pub pin_value: Option<String>,
    /// A file holding the user PIN (`pin-source=`, a path or `file:` URI).
    pub pin_source: Option<String>,
    /// The module (`module-path=`).
    pub module_path: Option<String>,
    /// The text it was parsed from, with the PIN value hidden.
    shown: String,
}

impl std::fmt::Debug for Pkcs11Uri {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

impl std::fmt::Display for Pkcs11Uri {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

fn decode(value: &str) -> Vec<u8> {
    percent_encoding::percent_decode_str(value).collect()
}

fn text(name: &str, value: &str) -> Result<String, String> {
    String::from_utf8(decode(value)).map_err(|_| format!("{name} is not UTF-8"))
}

impl Pkcs11Uri {
    /// Parse `pkcs11:` path attributes (`;`-separated) and query attributes (`?`, `&`).
    pub fn parse(uri: &str) -> Result<Pkcs11Uri, String> {
        let rest = uri
            .strip_prefix("pkcs11:")
            .ok_or("a PKCS#11 URI starts with pkcs11:")?;
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let mut out = Pkcs11Uri {
            token: None,
            object: None,
            id: None,
            pin_value: None,
            pin_source: None,
            module_path: None,
            shown: String::new(),
        };
        let attrs = path
            .split(';')
            .chain(query.split('&'))
            .filter(|a| !a.is_empty());
        for attr in attrs {
            let (name, value) = attr
                .split_once('=')
                .ok_or_else(|| format!("attribute {attr:?} has no value"))?;
            match name {
                "token" => out.token = Some(text(name, value)?),
                "object" => out.object = Some(text(name, value)?),
                "id" => out.id = Some(decode(value)),
                "pin-value" => out.pin_value = Some(text(name, value)?),
                "pin-source" => out.pin_source = Some(text(name, value)?),
                "module-path" => out.module_path = Some(text(name, value)?),
                // Attributes that narrow the match further are accepted and not needed here.
                "type"
                | "manufacturer"
                | "model"
                | "serial"
                | "library-manufacturer"
                | "library-description"
                | "library-version"
                | "slot-id"
                | "slot-description"
                | "slot-manufacturer"
                | "module-name" => {}
                other => return Err(format!("unknown attribute {other:?}")),
            }
        }
        if out.object.is_none() && out.id.is_none() {
            return Err("name the key with object=<label> or id=<bytes>".into());
        }
        out.shown = uri
            .split(['?', '&', ';'])
            .filter(|a| a.starts_with("pin-value="))
            .fold(uri.to_string(), |s, pin| s.replace(pin, "pin-value=***"));
        Ok(out)
    }

    /// The user PIN: `pin-value`, else the content of `pin-source` (trailing newline dropped).
    fn pin(&self) -> Result<Option<String>, OpenError> {
        if let Some(p) = &self.pin_value {
            return Ok(Some(p.clone()));
        }
        let Some(source) = &self.pin_source else {
            return Ok(None);
        };
        let path = source.strip_prefix("file:").unwrap_or(source);
        let pin = std::fs::read_to_string(path).map_err(|e| OpenError::Pin {
            path: path.to_string(),
            reason: e.to_string(),
        })?;
        Ok(Some(pin.trim_end_matches(['\n', '\r']).to_string()))
    }
}

/// Why a token key cannot be used (said in the cards' `Signed` condition).
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// No module to load.
    #[error("no PKCS#11 module: give module-path= in the URI or --pkcs11-module")]
    NoModule,
    /// The module would not load or initialise.
    #[error("module {path}: {reason}")]
    Module {
        /// Its path.
        path: String,
        /// What failed.
        reason: String,
    },
    /// No token with that label.
    #[error("no token labelled {0:?}")]
    NoToken(String),
    /// The PIN file is unreadable.
    #[error("pin-source {path}: {reason}")]
    Pin {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The token refused the login (a wrong PIN, a locked token).
    #[error("token {token:?}: login refused: {reason}")]
    Login {
        /// The token.
        token: String,
        /// What it said.
        reason: String,
    },
    /// No private key matches.
    #[error("token {token:?}: no private key with {what}")]
    NoKey {
        /// The token.
        token: String,
        /// The label and id looked for.
        what: String,
    },
    /// The key is not one cards can be signed with.
    #[error("token {token:?}: {reason}")]
    Unusable {
        /// The token.
        token: String,
        /// Why.
        reason: String,
    },
}

/// A module's error as PKCS#11 names it (`C_Login: CKR_PIN_INCORRECT`): cryptoki's own text
/// is a paragraph of the standard.
fn rv(e: cryptoki::error::Error) -> String {
    match e {
        cryptoki::error::Error::Pkcs11(code, function) => {
            let mut name = String::from("CKR");
            for c in format!("{code:?}").chars() {
                if c.is_ascii_uppercase() {
                    name.push('_');
                }
                name.push(c.to_ascii_uppercase());
            }
            format!("C_{function:?}: {name}")
        }
        other => other.to_string(),
    }
}

/// A private key in a token: signs through its session.
pub struct TokenKey {
    /// Keeps the module loaded and initialised while the key is used.
    _context: Pkcs11,
    session: Mutex<Session>,
    handle: ObjectHandle,
    alg: Algorithm,
    label: String,
}

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TokenKey({}, {})", self.label, self.alg)
    }
}

impl HeldKey for TokenKey {
    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, KeyError> {
        let backend = |reason: String| KeyError::Backend {
            backend: "pkcs11",
            reason,
        };
        let session = crate::locks::lock(&self.session);
        let (mechanism, data, width) = match self.alg {
            Algorithm::ES256 => (Mechanism::Ecdsa, sha2::Sha256::digest(message).to_vec(), 32),
            Algorithm::ES384 => (Mechanism::Ecdsa, sha2::Sha384::digest(message).to_vec(), 48),
            Algorithm::RS256 => (Mechanism::Sha256RsaPkcs, message.to_vec(), 0),
            other => {
                return Err(backend(format!(
                    "{other} is not signed through PKCS#11 here"
                )))
            }
        };
        let signature = session
            .sign(&mechanism, self.handle, &data)
            .map_err(|e| backend(format!("{}: sign: {}", self.label, rv(e))))?;
        // PKCS#11 defines ECDSA signatures as `r || s`; a module answering in DER is converted.
        if width > 0 && signature.len() != 2 * width {
            return ecdsa_der_to_jose(self.alg, &signature);
        }
        Ok(signature)
    }
}

/// The OID of P-256 and P-384 in `CKA_EC_PARAMS` (DER).
const P256_OID: &[u8] = &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
const P384_OID: &[u8] = &[0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22];

/// The public JWK of an EC key from its `CKA_EC_PARAMS` and `CKA_EC_POINT`.
fn ec_public(params: &[u8], point: &[u8]) -> Result<(Algorithm, Map<String, Value>), String> {
    let (alg, crv, width) = if params == P256_OID {
        (Algorithm::ES256, "P-256", 32)
    } else if params == P384_OID {
        (Algorithm::ES384, "P-384", 48)
    } else {
        return Err("an EC key on a curve other than P-256 or P-384".into());
    };
    // CKA_EC_POINT is a DER OCTET STRING around the uncompressed point; some modules give the
    // bare point.
    let bare = 1 + 2 * width;
    let point = match point {
        [0x04, len, rest @ ..] if usize::from(*len) == bare && rest.len() == bare => rest,
        p if p.len() == bare => p,
        _ => return Err("an EC point that is not an uncompressed point".into()),
    };
    if point[0] != 0x04 {
        return Err("a compressed EC point".into());
    }
    let mut jwk = Map::new();
    jwk.insert("kty".into(), "EC".into());
    jwk.insert("crv".into(), crv.into());
    jwk.insert("x".into(), URL_SAFE_NO_PAD.encode(&point[1..=width]).into());
    jwk.insert(
        "y".into(),
        URL_SAFE_NO_PAD.encode(&point[1 + width..]).into(),
    );
    Ok((alg, jwk))
}

fn rsa_public(modulus: &[u8], exponent: &[u8]) -> Result<(Algorithm, Map<String, Value>), String> {
    if modulus.len() * 8 < 2048 {
        return Err(format!(
            "an RSA key of {} bits is too weak to sign cards (at least 2048)",
            modulus.len() * 8
        ));
    }
    let mut jwk = Map::new();
    jwk.insert("kty".into(), "RSA".into());
    jwk.insert("n".into(), URL_SAFE_NO_PAD.encode(modulus).into());
    jwk.insert("e".into(), URL_SAFE_NO_PAD.encode(exponent).into());
    Ok((Algorithm::RS256, jwk))
}

/// Open the key `uri` names through `module` (when the URI names none): log in and build the
/// one-key [`Keys`] the JWKS publisher and the reconciles use. Blocking (module calls).
pub fn open(uri: &Pkcs11Uri, module: Option<&str>) -> Result<Keys, OpenError> {
    let path = uri
        .module_path
        .as_deref()
        .or(module)
        .ok_or(OpenError::NoModule)?;
    let module_error = |reason: String| OpenError::Module {
        path: path.to_string(),
        reason,
    };
    let context = Pkcs11::new(path).map_err(|e| module_error(rv(e)))?;
    context
        .initialize(CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK))
        .map_err(|e| module_error(rv(e)))?;
    let label = uri.token.clone().unwrap_or_default();
    let slot = context
        .get_slots_with_token()
        .map_err(|e| module_error(rv(e)))?
        .into_iter()
        .find(|s| {
            context
                .get_token_info(*s)
                .is_ok_and(|i| uri.token.is_none() || i.label().trim_end() == label)
        })
        .ok_or_else(|| OpenError::NoToken(label.clone()))?;
    let session = context
        .open_ro_session(slot)
        .map_err(|e| module_error(rv(e)))?;
    let pin = uri.pin()?.map(AuthPin::from);
    session
        .login(UserType::User, pin.as_ref())
        .map_err(|e| OpenError::Login {
            token: label.clone(),
            reason: rv(e),
        })?;
    let unusable = |reason: String| OpenError::Unusable {
        token: label.clone(),
        reason,
    };
    let mut template = Vec::new();
    if let Some(o) = &uri.object {
        template.push(Attribute::Label(o.clone().into_bytes()));
    }
    if let Some(id) = &uri.id {
        template.push(Attribute::Id(id.clone()));
    }
    let find = |class: ObjectClass| {
        let mut t = template.clone();
        t.push(Attribute::Class(class));
        session.find_objects(&t).map_err(|e| unusable(rv(e)))
    };
    let what = || {
        let mut parts = Vec::new();
        if let Some(o) = &uri.object {
            parts.push(format!("label {o:?}"));
        }
        if let Some(id) = &uri.id {
            parts.push(format!("id {}", hex(id)));
        }
        parts.join(" and ")
    };
    let private = match find(ObjectClass::PRIVATE_KEY)?.as_slice() {
        [one] => *one,
        [] => {
            return Err(OpenError::NoKey {
                token: label.clone(),
                what: what(),
            })
        }
        more => {
            return Err(unusable(format!(
                "{} private keys match {}: name one by id=",
                more.len(),
                what()
            )))
        }
    };
    let public = find(ObjectClass::PUBLIC_KEY)?
        .first()
        .copied()
        .ok_or_else(|| unusable(format!("no public key object with {}", what())))?;
    let kind = session
        .get_attributes(private, &[AttributeType::KeyType])
        .map_err(|e| unusable(rv(e)))?;
    let key_type = kind.iter().find_map(|a| match a {
        Attribute::KeyType(t) => Some(*t),
        _ => None,
    });
    let (alg, jwk) = match key_type {
        Some(KeyType::EC) => {
            let attrs = session
                .get_attributes(public, &[AttributeType::EcParams, AttributeType::EcPoint])
                .map_err(|e| unusable(rv(e)))?;
            let (mut params, mut point) = (None, None);
            for a in attrs {
                match a {
                    Attribute::EcParams(p) => params = Some(p),
                    Attribute::EcPoint(p) => point = Some(p),
                    _ => {}
                }
            }
            ec_public(&params.unwrap_or_default(), &point.unwrap_or_default()).map_err(unusable)?
        }
        Some(KeyType::RSA) => {
            let attrs = session
                .get_attributes(
                    public,
                    &[AttributeType::Modulus, AttributeType::PublicExponent],
                )
                .map_err(|e| unusable(rv(e)))?;
            let (mut n, mut e) = (None, None);
            for a in attrs {
                match a {
                    Attribute::Modulus(m) => n = Some(m),
                    Attribute::PublicExponent(x) => e = Some(x),
                    _ => {}
                }
            }
            rsa_public(&n.unwrap_or_default(), &e.unwrap_or_default()).map_err(unusable)?
        }
        other => {
            return Err(unusable(format!(
                "a key of type {other:?} cannot sign cards (EC P-256/P-384 or RSA)"
            )))
        }
    };
    let held = Arc::new(TokenKey {
        _context: context,
        session: Mutex::new(session),
        handle: private,
        alg,
        label: uri.object.clone().unwrap_or_else(what),
    });
    let key = SigningKey::held(alg, None, &jwk, held).map_err(|e| unusable(e.to_string()))?;
    // Prove the token signs with the key it published before publishing it.
    let probe = key
        .sign(b"agentcard-operator")
        .map_err(|e| unusable(e.to_string()))?;
    if !key.verifies(b"agentcard-operator", &probe) {
        return Err(unusable(
            "the token's signature does not verify with its public key object".into(),
        ));
    }
    Ok(Keys {
        jwks: Jwks::from_signing_keys([&key]),
        version: format!("pkcs11:{}", key.kid()),
        all: vec![key.clone()],
        active: key,
        not_after: None,
        revoked: std::collections::BTreeSet::new(),
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc7512_uris_name_the_token_the_key_and_the_pin_which_is_never_shown() {
        let u = Pkcs11Uri::parse(
            "pkcs11:token=Card%20Signing;object=cards;id=%01%02?pin-value=1234&module-path=/usr/lib/softhsm/libsofthsm2.so",
        )
        .unwrap();
        assert_eq!(u.token.as_deref(), Some("Card Signing"));
        assert_eq!(u.object.as_deref(), Some("cards"));
        assert_eq!(u.id.as_deref(), Some(&[1u8, 2][..]));
        assert_eq!(u.pin().unwrap().as_deref(), Some("1234"));
        assert_eq!(
            u.module_path.as_deref(),
            Some("/usr/lib/softhsm/libsofthsm2.so")
        );
        assert!(!u.to_string().contains("1234"), "{u}");
        assert!(!format!("{u:?}").contains("1234"));
        let err = Pkcs11Uri::parse("pkcs11:token=t").unwrap_err();
        assert!(err.contains("object="), "{err}");
        assert!(Pkcs11Uri::parse("pkcs11:token=t;object=o;bogus=1").is_err());
        let f = Pkcs11Uri::parse("pkcs11:object=o?pin-source=/nonexistent/pin").unwrap();
        assert!(f
            .pin()
            .unwrap_err()
            .to_string()
            .contains("/nonexistent/pin"));
    }

    #[test]
    fn ec_points_become_jwks_from_der_or_bare_form() {
        let x = [7u8; 32];
        let y = [9u8; 32];
        let mut bare = vec![0x04];
        bare.extend_from_slice(&x);
        bare.extend_from_slice(&y);
        let mut der = vec![0x04, 65];
        der.extend_from_slice(&bare);
        for p in [&bare, &der] {
            let (alg, jwk) = ec_public(P256_OID, p).unwrap();
            assert_eq!(alg, Algorithm::ES256);
            assert_eq!(jwk["x"], URL_SAFE_NO_PAD.encode(x));
            assert_eq!(jwk["y"], URL_SAFE_NO_PAD.encode(y));
        }
        assert!(ec_public(&[0x06, 0x01, 0x00], &bare).is_err());
        assert!(rsa_public(&[1; 128], &[1, 0, 1])
            .unwrap_err()
            .contains("1024 bits"));
    }
}
