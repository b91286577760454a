//! Keys with a certificate chain (`x5c`, RFC 7515 §4.1.6): signing with the key of a TLS
//! certificate (such as cert-manager writes to a `kubernetes.io/tls` Secret), and verifying a
//! card by its chain against a trust root the verifier picks, instead of by a JWKS a `jku`
//! points to.
//!
//! Loading: certificate chain PEM + private key PEM (PKCS#8, SEC1 or PKCS#1) → checks (the
//! key is the leaf's, an accepted type and size, the leaf valid now) → a [`SigningKey`] whose
//! key id is its RFC 7638 thumbprint and whose signatures carry the chain.
//!
//! Verifying: each signature's protected `x5c` → the chain verified by OpenSSL against the
//! roots (validity times included) → the signature checked with the leaf's public key → when a
//! JWKS is given too, its key for the header's `kid` must verify the same signature.

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use josekit::jws::{EdDSA, JwsVerifier, ES256, ES384, PS256, RS256};
use openssl::pkey::{Id, PKey, Public};
use openssl::stack::Stack;
use openssl::x509::store::X509StoreBuilder;
use openssl::x509::{X509StoreContext, X509};
use serde_json::{Map, Value};

use super::canonical::canonical_bytes;
use super::card::AgentCard;
use super::jws::{signing_input, verify_card, VerifyError};
use super::keys::{Algorithm, Jwks, SigningKey};

/// The smallest RSA modulus accepted for a certificate's key.
pub const MIN_RSA_BITS: u32 = 2048;

/// Why a certificate and key cannot sign.
#[derive(Debug, thiserror::Error)]
pub enum CertKeyError {
    /// The certificate PEM holds no certificate, or an unreadable one.
    #[error("the certificate is not PEM X.509: {0}")]
    Certificate(String),
    /// The private key is unreadable.
    #[error("the private key is not a PEM private key: {0}")]
    PrivateKey(String),
    /// The private key is not the leaf certificate's.
    #[error("the private key does not belong to the certificate")]
    KeyMismatch,
    /// The key's type or size is not accepted.
    #[error("{0}")]
    Weak(String),
    /// The leaf certificate is not valid now.
    #[error("the certificate is {0}")]
    Validity(String),
    /// The crypto library refused something else.
    #[error("{0}")]
    Key(#[from] super::keys::KeyError),
}

fn ssl(e: openssl::error::ErrorStack) -> String {
    e.errors()
        .first()
        .and_then(|e| e.reason().map(str::to_string))
        .unwrap_or_else(|| e.to_string())
}

/// The algorithm a certificate's public key signs with, or why it does not.
fn algorithm_of(key: &PKey<Public>) -> Result<Algorithm, CertKeyError> {
    match key.id() {
        Id::EC => {
            let ec = key.ec_key().map_err(|e| CertKeyError::Weak(ssl(e)))?;
            match ec.group().curve_name() {
                Some(openssl::nid::Nid::X9_62_PRIME256V1) => Ok(Algorithm::ES256),
                Some(openssl::nid::Nid::SECP384R1) => Ok(Algorithm::ES384),
                other => Err(CertKeyError::Weak(format!(
                    "an EC key on curve {} cannot sign cards (P-256 or P-384)",
                    other.and_then(|n| n.short_name().ok()).unwrap_or("unknown")
                ))),
            }
        }
        Id::ED25519 => Ok(Algorithm::EdDSA),
        Id::RSA if key.bits() >= MIN_RSA_BITS => Ok(Algorithm::RS256),
        Id::RSA => Err(CertKeyError::Weak(format!(
            "an RSA key of {} bits is too weak to sign cards (at least {MIN_RSA_BITS})",
            key.bits()
        ))),
        _ => Err(CertKeyError::Weak(
            "the key type cannot sign cards (ECDSA P-256/P-384, Ed25519 or RSA)".into(),
        )),
    }
}

/// Whether `cert` is valid at `now` (seconds since the epoch); the reason when not.
fn validity(cert: &X509, now: i64) -> Result<(), CertKeyError> {
    let at = openssl::asn1::Asn1Time::from_unix(now).map_err(|e| CertKeyError::Validity(ssl(e)))?;
    if cert.not_after() < at {
        return Err(CertKeyError::Validity(format!(
            "expired (not after {})",
            cert.not_after()
        )));
    }
    if cert.not_before() > at {
        return Err(CertKeyError::Validity(format!(
            "not yet valid (not before {})",
            cert.not_before()
        )));
    }
    Ok(())
}

/// The certificates of a PEM bundle, in order.
pub fn certificates(pem: &[u8]) -> Result<Vec<X509>, CertKeyError> {
    let chain = X509::stack_from_pem(pem).map_err(|e| CertKeyError::Certificate(ssl(e)))?;
    if chain.is_empty() {
        return Err(CertKeyError::Certificate("no CERTIFICATE block".into()));
    }
    Ok(chain)
}

/// The `x5c` value of a chain: each certificate's DER in standard base64, leaf first.
pub fn x5c_of(chain: &[X509]) -> Result<Vec<String>, CertKeyError> {
    chain
        .iter()
        .map(|c| {
            c.to_der()
                .map(|d| STANDARD.encode(d))
                .map_err(|e| CertKeyError::Certificate(ssl(e)))
        })
        .collect()
}

/// The signing key of a TLS certificate: `cert_pem` is the chain (leaf first, as
/// `tls.crt`), `key_pem` the leaf's private key (as `tls.key`), checked at `now`.
pub fn key_from_certificate(
    cert_pem: &[u8],
    key_pem: &[u8],
    now: i64,
) -> Result<SigningKey, CertKeyError> {
    let chain = certificates(cert_pem)?;
    let leaf = &chain[0];
    let private =
        PKey::private_key_from_pem(key_pem).map_err(|e| CertKeyError::PrivateKey(ssl(e)))?;
    let public = leaf
        .public_key()
        .map_err(|e| CertKeyError::Certificate(ssl(e)))?;
    if !public.public_eq(&private) {
        return Err(CertKeyError::KeyMismatch);
    }
    let alg = algorithm_of(&public)?;
    validity(leaf, now)?;
    let pkcs8 = private
        .private_key_to_pem_pkcs8()
        .map_err(|e| CertKeyError::PrivateKey(ssl(e)))?;
    let key = SigningKey::from_pem(&pkcs8, None, Some(alg))?;
    Ok(key.with_x5c(x5c_of(&chain)?))
}

/// The leaf certificate's notAfter of a chain PEM, in seconds since the epoch.
pub fn not_after(cert_pem: &[u8]) -> Result<i64, CertKeyError> {
    let chain = certificates(cert_pem)?;
    let epoch =
        openssl::asn1::Asn1Time::from_unix(0).map_err(|e| CertKeyError::Validity(ssl(e)))?;
    let diff = epoch
        .diff(chain[0].not_after())
        .map_err(|e| CertKeyError::Validity(ssl(e)))?;
    Ok(i64::from(diff.days) * 86_400 + i64::from(diff.secs))
}

/// What verifying by the chain found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainVerified {
    /// Index of the signature that verified.
    pub index: usize,
    /// Its key id.
    pub kid: String,
    /// The leaf certificate's subject.
    pub subject: String,
}

fn verifier_for(alg: Algorithm, der: &[u8]) -> Result<Box<dyn JwsVerifier>, String> {
    let v: Box<dyn JwsVerifier> = match alg {
        Algorithm::ES256 => Box::new(ES256.verifier_from_der(der).map_err(|e| e.to_string())?),
        Algorithm::ES384 => Box::new(ES384.verifier_from_der(der).map_err(|e| e.to_string())?),
        Algorithm::EdDSA => Box::new(EdDSA.verifier_from_der(der).map_err(|e| e.to_string())?),
        Algorithm::RS256 => Box::new(RS256.verifier_from_der(der).map_err(|e| e.to_string())?),
        Algorithm::PS256 => Box::new(PS256.verifier_from_der(der).map_err(|e| e.to_string())?),
    };
    Ok(v)
}

/// Verify one signature by its `x5c` chain against `roots`; the leaf's subject when it holds.
fn verify_by_chain(
    header: &Map<String, Value>,
    input: &[u8],
    signature: &str,
    roots: &[X509],
) -> Result<String, String> {
    let x5c = header
        .get("x5c")
        .and_then(Value::as_array)
        .filter(|a| !a.is_empty())
        .ok_or("no x5c certificate chain in the protected header")?;
    let mut chain = Vec::with_capacity(x5c.len());
    for (i, c) in x5c.iter().enumerate() {
        let der = c
            .as_str()
            .and_then(|s| STANDARD.decode(s).ok())
            .ok_or(format!("x5c[{i}] is not base64"))?;
        chain.push(X509::from_der(&der).map_err(|e| format!("x5c[{i}]: {}", ssl(e)))?);
    }
    let mut store = X509StoreBuilder::new().map_err(ssl)?;
    for root in roots {
        store.add_cert(root.clone()).map_err(ssl)?;
    }
    let store = store.build();
    let mut intermediates = Stack::new().map_err(ssl)?;
    for c in &chain[1..] {
        intermediates.push(c.clone()).map_err(ssl)?;
    }
    let mut ctx = X509StoreContext::new().map_err(ssl)?;
    let leaf = &chain[0];
    let checked = ctx
        .init(&store, leaf, &intermediates, |c| {
            Ok(c.verify_cert()?.then_some(()).ok_or_else(|| c.error()))
        })
        .map_err(ssl)?;
    checked.map_err(|e| {
        format!(
            "the certificate chain does not verify: {}",
            e.error_string()
        )
    })?;
    let alg_name = header
        .get("alg")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let alg: Algorithm = alg_name
        .parse()
        .map_err(|_| format!("algorithm {alg_name:?} is not accepted"))?;
    let public = leaf.public_key().map_err(ssl)?;
    let fits = algorithm_of(&public).map_err(|e| e.to_string())?;
    if fits != alg && !(fits == Algorithm::RS256 && alg == Algorithm::PS256) {
        return Err(format!("the certificate's key does not sign {alg}"));
    }
    let der = public.public_key_to_der().map_err(ssl)?;
    let sig = URL_SAFE_NO_PAD
        .decode(signature.trim_end_matches('='))
        .map_err(|_| "signature is not base64url".to_string())?;
    verifier_for(alg, &der)?
        .verify(input, &sig)
        .map_err(|_| "signature does not match the card and the certificate's key".to_string())?;
    let subject = leaf
        .subject_name()
        .entries()
        .filter_map(|e| {
            Some(format!(
                "{}={}",
                e.object().nid().short_name().ok()?,
                e.data().to_string().ok()?
            ))
        })
        .collect::<Vec<_>>()
        .join(",");
    Ok(subject)
}

/// Verify `card` by the certificate chain its signatures carry, against the trust `roots`
/// (PEM). With `jwks`, the key its `kid` names there must verify the same signature (so the
/// chain and the published keys agree). Ok with the first signature that holds.
pub fn verify_card_with_roots(
    card: &AgentCard,
    roots: &[X509],
    jwks: Option<&Jwks>,
) -> Result<ChainVerified, VerifyError> {
    if card.signatures.is_empty() {
        return Err(VerifyError::Unsigned);
    }
    let payload_b64 = URL_SAFE_NO_PAD.encode(canonical_bytes(card));
    let mut reasons = Vec::new();
    for (index, sig) in card.signatures.iter().enumerate() {
        let header: Option<Map<String, Value>> = URL_SAFE_NO_PAD
            .decode(sig.protected.trim_end_matches('='))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        let Some(header) = header else {
            reasons.push(format!(
                "signatures[{index}]: protected header is not base64url JSON"
            ));
            continue;
        };
        let kid = header
            .get("kid")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let input = signing_input(&sig.protected, &payload_b64);
        let outcome =
            verify_by_chain(&header, &input, &sig.signature, roots).and_then(
                |subject| match jwks {
                    None => Ok(subject),
                    Some(jwks) => {
                        let mut one = card.clone();
                        one.signatures = vec![sig.clone()];
                        verify_card(&one, jwks).map(|_| subject).map_err(|e| {
                            format!("the chain holds but the JWKS does not agree: {e}")
                        })
                    }
                },
            );
        match outcome {
            Ok(subject) => {
                return Ok(ChainVerified {
                    index,
                    kid,
                    subject,
                })
            }
            Err(reason) => reasons.push(format!("signatures[{index}]: {reason}")),
        }
    }
    Err(VerifyError::NoValidSignature(reasons))
}

#[cfg(test)]
mod tests {
    use super::*;
    use openssl::asn1::Asn1Time;
    use openssl::bn::BigNum;
    use openssl::ec::{EcGroup, EcKey};
    use openssl::hash::MessageDigest;
    use openssl::nid::Nid;
    use openssl::pkey::Private;
    use openssl::x509::extension::BasicConstraints;
    use openssl::x509::X509NameBuilder;

    fn ec_key() -> PKey<Private> {
        let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap();
        PKey::from_ec_key(EcKey::generate(&group).unwrap()).unwrap()
    }

    /// A certificate for `key`, issued by `issuer` (self-signed when None), valid from
    /// `from` to `to` days from now.
    fn cert(
        cn: &str,
        key: &PKey<Private>,
        issuer: Option<(&X509, &PKey<Private>)>,
        ca: bool,
        from: i64,
        to: i64,
    ) -> X509 {
        let mut name = X509NameBuilder::new().unwrap();
        name.append_entry_by_text("CN", cn).unwrap();
        let name = name.build();
        let mut b = X509::builder().unwrap();
        b.set_version(2).unwrap();
        b.set_serial_number(&BigNum::from_u32(7).unwrap().to_asn1_integer().unwrap())
            .unwrap();
        b.set_subject_name(&name).unwrap();
        b.set_pubkey(key).unwrap();
        let t = |days: i64| Asn1Time::from_unix(now() + days * 86_400).unwrap();
        b.set_not_before(&t(from)).unwrap();
        b.set_not_after(&t(to)).unwrap();
        if ca {
            b.append_extension(BasicConstraints::new().critical().ca().build().unwrap())
                .unwrap();
        }
        match issuer {
            Some((ic, ik)) => {
                b.set_issuer_name(ic.subject_name()).unwrap();
                b.sign(ik, MessageDigest::sha256()).unwrap();
            }
            None => {
                b.set_issuer_name(&name).unwrap();
                b.sign(key, MessageDigest::sha256()).unwrap();
            }
        }
        b.build()
    }

    fn card() -> AgentCard {
        AgentCard::from_json_lenient(br#"{"name":"A","description":"d","version":"1"}"#).unwrap()
    }

    fn now() -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
    }

    #[test]
    fn a_card_signed_with_a_certificates_key_verifies_by_its_chain_and_only_against_its_root() {
        let (ca_key, leaf_key) = (ec_key(), ec_key());
        let ca = cert("Root", &ca_key, None, true, -1, 365);
        let leaf = cert(
            "agents.example",
            &leaf_key,
            Some((&ca, &ca_key)),
            false,
            -1,
            90,
        );
        let chain = [leaf.to_pem().unwrap(), ca.to_pem().unwrap()].concat();
        // cert-manager writes SEC1 (`EC PRIVATE KEY`) by default.
        let sec1 = leaf_key.ec_key().unwrap().private_key_to_pem().unwrap();
        let key = key_from_certificate(&chain, &sec1, now()).unwrap();
        assert_eq!(key.alg(), Algorithm::ES256);
        assert_eq!(key.x5c().len(), 2);
        assert!(key.public_jwk().contains_key("x5c"));
        let signed = crate::jws::sign_card(&card(), std::slice::from_ref(&key), None).unwrap();
        let v = verify_card_with_roots(&signed, std::slice::from_ref(&ca), None).unwrap();
        assert_eq!((v.index, v.kid.as_str()), (0, key.kid()));
        assert!(v.subject.contains("agents.example"), "{}", v.subject);
        // With the JWKS it was published in, too; with another JWKS, refused.
        let jwks = Jwks::from_signing_keys([&key]);
        assert!(verify_card_with_roots(&signed, std::slice::from_ref(&ca), Some(&jwks)).is_ok());
        let other = SigningKey::generate(Algorithm::ES256, Some(key.kid())).unwrap();
        let err = verify_card_with_roots(
            &signed,
            std::slice::from_ref(&ca),
            Some(&Jwks::from_signing_keys([&other])),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("JWKS does not agree"), "{err}");
        // Another root: untrusted.
        let stranger = cert("Other", &ec_key(), None, true, -1, 365);
        let err = verify_card_with_roots(&signed, &[stranger], None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("does not verify"), "{err}");
        // A tampered card: the chain holds, the signature does not.
        let mut tampered = signed.clone();
        tampered.name = "B".into();
        let err = verify_card_with_roots(&tampered, &[ca], None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("does not match"), "{err}");
        // A card signed without a chain cannot be verified by one.
        let bare = crate::jws::sign_card(
            &card(),
            &[SigningKey::generate(Algorithm::ES256, None).unwrap()],
            None,
        )
        .unwrap();
        let err = verify_card_with_roots(&bare, &[], None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("no x5c"), "{err}");
    }

    #[test]
    fn expired_weak_and_mismatched_certificates_are_refused_with_the_reason() {
        let (ca_key, leaf_key) = (ec_key(), ec_key());
        let ca = cert("Root", &ca_key, None, true, -10, 365);
        let pkcs8 = leaf_key.private_key_to_pem_pkcs8().unwrap();
        let expired = cert("old", &leaf_key, Some((&ca, &ca_key)), false, -10, -1);
        let err = key_from_certificate(&expired.to_pem().unwrap(), &pkcs8, now()).unwrap_err();
        assert!(err.to_string().contains("expired"), "{err}");
        let other = cert("x", &ec_key(), Some((&ca, &ca_key)), false, -1, 9);
        let err = key_from_certificate(&other.to_pem().unwrap(), &pkcs8, now()).unwrap_err();
        assert!(matches!(err, CertKeyError::KeyMismatch), "{err}");
        let rsa = PKey::from_rsa(openssl::rsa::Rsa::generate(1024).unwrap()).unwrap();
        let weak = cert("weak", &rsa, None, false, -1, 9);
        let err = key_from_certificate(
            &weak.to_pem().unwrap(),
            &rsa.private_key_to_pem_pkcs8().unwrap(),
            now(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("1024 bits"), "{err}");
        // Verification by the chain refuses an expired leaf too.
        let key = SigningKey::from_pem(&pkcs8, None, None)
            .unwrap()
            .with_x5c(x5c_of(&[expired, ca.clone()]).unwrap());
        let signed = crate::jws::sign_card(&card(), &[key], None).unwrap();
        let err = verify_card_with_roots(&signed, &[ca], None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("expired"), "{err}");
        assert!(key_from_certificate(b"nope", &pkcs8, now()).is_err());
    }

    #[test]
    fn der_ecdsa_signatures_become_jose_signatures_that_verify() {
        let key = ec_key();
        let pkcs8 = key.private_key_to_pem_pkcs8().unwrap();
        let signing = SigningKey::from_pem(&pkcs8, Some("k"), None).unwrap();
        let message = b"header.payload";
        for _ in 0..20 {
            // OpenSSL signs in DER, as PKCS#11 modules and KMSs answer; r or s are often
            // shorter than 32 bytes, which the conversion pads.
            let mut signer = openssl::sign::Signer::new(MessageDigest::sha256(), &key).unwrap();
            signer.update(message).unwrap();
            let der = signer.sign_to_vec().unwrap();
            let jose = crate::keys::ecdsa_der_to_jose(Algorithm::ES256, &der).unwrap();
            assert_eq!(jose.len(), 64);
            assert!(signing.verifies(message, &jose));
        }
        assert!(crate::keys::ecdsa_der_to_jose(Algorithm::ES256, b"junk").is_err());
    }
}
