//! A JWT checked offline against an issuer's published keys: pure, no I/O.
//!
//! The token's header names the key (`kid`) and algorithm (`alg`, one of the algorithms the
//! cards are signed with; never `none`, never HMAC); the signature must verify with a key of
//! the issuer's JWKS that fits that algorithm (by `kid` when the token names one). Then the
//! claims: `iss` is the issuer, `aud` (a string or a list) names one of the accepted audiences,
//! `exp` is present and not past, `nbf` (when present) is not ahead, each with [`LEEWAY`] for
//! clocks that differ; and every required claim is there with its value (a string claim equal
//! to it, or a list of strings holding it).

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};

use crate::a2a::{Algorithm, Jwks};

/// How far apart the issuer's clock and ours may be.
pub const LEEWAY_SECONDS: i64 = 30;

/// What a token must be to be accepted.
#[derive(Clone, Copy, Debug)]
pub struct Expected<'a> {
    /// The `iss` value.
    pub issuer: &'a str,
    /// `aud` must name one of these.
    pub audiences: &'a [String],
    /// Claims that must be present with these values.
    pub required_claims: &'a BTreeMap<String, String>,
}

/// Why a token is refused: said in the `WWW-Authenticate` header's `error_description`, so it
/// names the rule and never echoes the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    /// Not three base64url parts with a JSON header.
    #[error("the token is not a JWT")]
    Malformed,
    /// An algorithm outside the accepted set.
    #[error("the token's algorithm is not accepted")]
    Algorithm,
    /// No key of the issuer's JWKS fits the token's `kid` and `alg`.
    #[error("the token is not signed by a key of the issuer")]
    UnknownKey,
    /// The signature does not verify.
    #[error("the token's signature does not verify")]
    Signature,
    /// `iss` is another issuer.
    #[error("the token is from another issuer")]
    Issuer,
    /// `aud` names no accepted audience.
    #[error("the token is not for this audience")]
    Audience,
    /// `exp` is missing or past.
    #[error("the token has expired")]
    Expired,
    /// `nbf` is ahead.
    #[error("the token is not valid yet")]
    NotYetValid,
    /// A required claim is missing or has another value.
    #[error("the token lacks the required claim {0}")]
    Claim(String),
}

/// The `kid` and algorithm of `token`'s header (read before any key is chosen).
pub fn header(token: &str) -> Result<(Option<String>, Algorithm), Invalid> {
    let header = josekit::jwt::decode_header(token).map_err(|_| Invalid::Malformed)?;
    let alg = header
        .claim("alg")
        .and_then(Value::as_str)
        .ok_or(Invalid::Malformed)?;
    let alg = Algorithm::from_str(alg).map_err(|_| Invalid::Algorithm)?;
    let kid = header
        .claim("kid")
        .and_then(Value::as_str)
        .map(String::from);
    Ok((kid, alg))
}

/// The keys of `jwks` that may have signed a token with `kid` and `alg`: the key with that id
/// (when the token names one), of a type that fits the algorithm and meant for signatures.
fn candidates<'a>(
    jwks: &'a Jwks,
    kid: Option<&'a str>,
    alg: Algorithm,
) -> impl Iterator<Item = &'a Map<String, Value>> + 'a {
    jwks.keys.iter().filter(move |k| {
        let text = |name: &str| k.get(name).and_then(Value::as_str);
        kid.is_none_or(|kid| text("kid") == Some(kid))
            && text("alg").is_none_or(|a| a == alg.name())
            && text("use").is_none_or(|u| u == "sig")
            && alg.fits(text("kty").unwrap_or_default(), text("crv"))
    })
}

/// The claims of `token` when it is signed by a key of `jwks` and meets `expected` at `now`.
pub fn verify(
    token: &str,
    jwks: &Jwks,
    expected: &Expected<'_>,
    now: SystemTime,
) -> Result<Map<String, Value>, Invalid> {
    let (kid, alg) = header(token)?;
    let mut found_key = false;
    let mut payload = None;
    for key in candidates(jwks, kid.as_deref(), alg) {
        let Ok(jwk) = josekit::jwk::Jwk::from_map(key.clone()) else {
            continue;
        };
        let Ok(verifier) = alg.verifier(&jwk) else {
            continue;
        };
        found_key = true;
        if let Ok((p, _)) = josekit::jwt::decode_with_verifier(token, &*verifier) {
            payload = Some(p);
            break;
        }
    }
    let claims = match payload {
        Some(p) => p.claims_set().clone(),
        None if found_key => return Err(Invalid::Signature),
        None => return Err(Invalid::UnknownKey),
    };
    check_claims(&claims, expected, now)?;
    Ok(claims)
}

/// Seconds since the epoch of `now`.
fn seconds(now: SystemTime) -> i64 {
    now.duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The registered and required claims of a verified token.
fn check_claims(
    claims: &Map<String, Value>,
    expected: &Expected<'_>,
    now: SystemTime,
) -> Result<(), Invalid> {
    if claims.get("iss").and_then(Value::as_str) != Some(expected.issuer) {
        return Err(Invalid::Issuer);
    }
    let for_us = |a: &Value| {
        a.as_str()
            .is_some_and(|a| expected.audiences.iter().any(|e| e == a))
    };
    let audience_ok = match claims.get("aud") {
        Some(Value::Array(list)) => list.iter().any(for_us),
        Some(one) => for_us(one),
        None => false,
    };
    if !audience_ok {
        return Err(Invalid::Audience);
    }
    let now = seconds(now);
    let time = |name: &str| claims.get(name).and_then(Value::as_f64);
    match time("exp") {
        // Compared as floats: a fractional NumericDate is allowed (RFC 7519 §2).
        Some(exp) if exp + (LEEWAY_SECONDS as f64) > now as f64 => {}
        _ => return Err(Invalid::Expired),
    }
    if time("nbf").is_some_and(|nbf| nbf - (LEEWAY_SECONDS as f64) > now as f64) {
        return Err(Invalid::NotYetValid);
    }
    for (name, want) in expected.required_claims {
        let holds = match claims.get(name) {
            Some(Value::String(s)) => s == want,
            Some(Value::Array(list)) => list.iter().any(|v| v.as_str() == Some(want)),
            _ => false,
        };
        if !holds {
            return Err(Invalid::Claim(name.clone()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::a2a::SigningKey;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine;
    use serde_json::json;
    use std::time::Duration;

    const ISSUER: &str = "https://issuer.example";

    /// A token signed by `key` with `claims` (and the key's `kid`).
    fn token(key: &SigningKey, claims: Value) -> String {
        let header = json!({"alg": key.alg().name(), "kid": key.kid(), "typ": "JWT"});
        let b64 = |v: &Value| URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).unwrap());
        let input = format!("{}.{}", b64(&header), b64(&claims));
        let sig = key.sign(input.as_bytes()).unwrap();
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig))
    }

    fn now() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }

    fn claims(extra: Value) -> Value {
        let mut c = json!({"iss": ISSUER, "aud": ["agents", "other"], "sub": "alice",
            "exp": 1_800_000_600, "iat": 1_800_000_000, "groups": ["staff", "ops"], "tenant": "t1"});
        for (k, v) in extra.as_object().unwrap() {
            match v {
                Value::Null => c.as_object_mut().unwrap().remove(k),
                v => c.as_object_mut().unwrap().insert(k.clone(), v.clone()),
            };
        }
        c
    }

    fn check(token: &str, jwks: &Jwks, required: &[(&str, &str)]) -> Result<(), Invalid> {
        let audiences = vec!["agents".to_string()];
        let required: BTreeMap<String, String> = required
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let expected = Expected {
            issuer: ISSUER,
            audiences: &audiences,
            required_claims: &required,
        };
        verify(token, jwks, &expected, now()).map(|_| ())
    }

    #[test]
    fn a_token_of_the_issuer_for_the_audience_is_accepted_with_every_algorithm() {
        for alg in [
            Algorithm::ES256,
            Algorithm::RS256,
            Algorithm::EdDSA,
            Algorithm::PS256,
        ] {
            let key = SigningKey::generate(alg, Some("k1")).unwrap();
            let jwks = Jwks::from_signing_keys([&key]);
            let t = token(&key, claims(json!({})));
            assert_eq!(
                check(&t, &jwks, &[("groups", "ops"), ("tenant", "t1")]),
                Ok(()),
                "{alg:?}"
            );
        }
    }

    #[test]
    fn each_rule_refuses_what_breaks_it() {
        let key = SigningKey::generate(Algorithm::ES256, Some("k1")).unwrap();
        let other = SigningKey::generate(Algorithm::ES256, Some("k1")).unwrap();
        let jwks = Jwks::from_signing_keys([&key]);
        let ok = |c: Value| token(&key, claims(c));
        assert_eq!(
            check(&ok(json!({"iss": "https://evil.example"})), &jwks, &[]),
            Err(Invalid::Issuer)
        );
        assert_eq!(
            check(&ok(json!({"aud": "someone-else"})), &jwks, &[]),
            Err(Invalid::Audience)
        );
        assert_eq!(
            check(&ok(json!({"aud": null})), &jwks, &[]),
            Err(Invalid::Audience)
        );
        assert_eq!(check(&ok(json!({"aud": "agents"})), &jwks, &[]), Ok(()));
        assert_eq!(
            check(&ok(json!({"exp": 1_799_999_000})), &jwks, &[]),
            Err(Invalid::Expired)
        );
        assert_eq!(
            check(&ok(json!({"exp": null})), &jwks, &[]),
            Err(Invalid::Expired)
        );
        // Within the leeway, either way.
        assert_eq!(
            check(&ok(json!({"exp": 1_799_999_990})), &jwks, &[]),
            Ok(())
        );
        assert_eq!(
            check(&ok(json!({"nbf": 1_800_000_020})), &jwks, &[]),
            Ok(())
        );
        assert_eq!(
            check(&ok(json!({"nbf": 1_800_000_100})), &jwks, &[]),
            Err(Invalid::NotYetValid)
        );
        assert_eq!(
            check(&ok(json!({})), &jwks, &[("groups", "admins")]),
            Err(Invalid::Claim("groups".into()))
        );
        assert_eq!(
            check(&ok(json!({"tenant": ["t2"]})), &jwks, &[("tenant", "t1")]),
            Err(Invalid::Claim("tenant".into()))
        );
        // Another key under the same kid: the signature does not verify.
        let forged = token(&other, claims(json!({})));
        assert_eq!(check(&forged, &jwks, &[]), Err(Invalid::Signature));
        // A kid the issuer does not publish.
        let stranger = SigningKey::generate(Algorithm::ES256, Some("k9")).unwrap();
        assert_eq!(
            check(&token(&stranger, claims(json!({}))), &jwks, &[]),
            Err(Invalid::UnknownKey)
        );
        // A payload changed after signing.
        let good = ok(json!({}));
        let parts: Vec<&str> = good.split('.').collect();
        let changed =
            URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims(json!({"sub": "mallory"}))).unwrap());
        let tampered = format!("{}.{changed}.{}", parts[0], parts[2]);
        assert_eq!(check(&tampered, &jwks, &[]), Err(Invalid::Signature));
        assert_eq!(check("not a token", &jwks, &[]), Err(Invalid::Malformed));
    }

    #[test]
    fn unsigned_and_hmac_tokens_are_refused_before_any_key_is_tried() {
        let key = SigningKey::generate(Algorithm::ES256, Some("k1")).unwrap();
        let jwks = Jwks::from_signing_keys([&key]);
        let b64 = |v: &Value| URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).unwrap());
        for alg in ["none", "HS256"] {
            let t = format!(
                "{}.{}.",
                b64(&json!({"alg": alg, "kid": "k1"})),
                b64(&claims(json!({})))
            );
            assert_eq!(check(&t, &jwks, &[]), Err(Invalid::Algorithm), "{alg}");
        }
        // A key of another type than the algorithm names is never used.
        let rsa = SigningKey::generate(Algorithm::RS256, Some("k1")).unwrap();
        let t = token(&rsa, claims(json!({})));
        assert_eq!(check(&t, &jwks, &[]), Err(Invalid::UnknownKey));
    }
}
