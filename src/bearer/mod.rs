//! Who may read a card's extended card: a request's bearer token checked against the card's
//! `spec.extendedCard.auth`.
//!
//! Data flow: the card server finds the card's extended route in the index and hands the
//! request's `Authorization` header and the card's auth here ([`Bearer::check`]):
//! - `oidc`: the JWT is verified offline ([`jwt::verify`], pure) against the issuer's keys,
//!   which [`oidc::Issuers`] fetches, keeps and refreshes (bounded; a tenant's issuer only
//!   on public addresses);
//! - `serviceAccount`: the API server reviews the token (a TokenReview with the card's
//!   audiences) through the directory's [`Authorizer`] — one per distinct audience set, each
//!   with its caches and single-flight, all sharing one bounded review budget — and the caller must be a
//!   ServiceAccount (of the listed namespaces, when any are).
//!
//! No lock is held across an `.await`.

pub mod jwt;
pub mod oidc;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::crd::{ExtendedAuth, OidcAuth, ServiceAccountAuth};
use crate::directory::access::{Authorizer, Budgets};
use crate::locks::lock;

/// Most distinct audience sets with an [`Authorizer`] of their own; past it the set least
/// recently made goes (its caches with it).
const MAX_REVIEWERS: usize = 256;
/// How long a token once accepted for a card's auth is accepted again without checking it
/// (never past the token's own expiry). A changed auth is another key: it checks afresh.
pub const ACCEPTED_TTL: Duration = Duration::from_secs(10);
/// Most accepted tokens remembered (expired ones go first when full, then all).
const MAX_ACCEPTED: usize = 10_000;

/// The operator's flags for extended-card callers.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct BearerFlags {
    /// An OIDC issuer the platform trusts, `ISSUER` or `ISSUER=DISCOVERY_URL` (repeatable):
    /// its discovery document is fetched from that URL, from any address, trusting
    /// `--oidc-ca-file`. A card may name any other issuer too, fetched over https from public
    /// addresses only.
    #[arg(long = "oidc-issuer", value_name = "ISSUER[=DISCOVERY_URL]")]
    pub oidc_issuers: Vec<String>,
    /// PEM CA certificates trusted for the `--oidc-issuer` issuers (besides the system's).
    #[arg(long, value_name = "FILE")]
    pub oidc_ca_file: Option<std::path::PathBuf>,
}

/// Why a caller is not given the extended card.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Denied {
    /// No bearer token (401).
    #[error("a bearer token is required")]
    Missing,
    /// A token that is not accepted (401), and why.
    #[error("{0}")]
    Invalid(String),
    /// The issuer's keys or the API server could not be asked (503).
    #[error("{0}")]
    Unavailable(String),
}

/// Checks bearer tokens against cards' extended-card auth. Cheap to share: every listener of
/// the process holds the same one.
pub struct Bearer {
    issuers: oidc::Issuers,
    /// The API server of ServiceAccount tokens (none in `serve --from-dir`).
    client: Option<kube::Client>,
    reviewers: Mutex<HashMap<Vec<String>, Arc<Authorizer>>>,
    /// The review budget every reviewer shares: distinct audience sets (a tenant can make any
    /// number) never multiply the reviews the API server gets.
    budgets: Arc<Budgets>,
    /// Tokens accepted lately: (SHA-256 of the token, fingerprint of the auth) → until when.
    accepted: Mutex<HashMap<([u8; 32], u64), Instant>>,
}

/// Errors setting up a [`Bearer`].
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// `--oidc-issuer` is malformed.
    #[error("{0}")]
    Flag(String),
    /// `--oidc-ca-file` cannot be read.
    #[error("--oidc-ca-file {path}: {source}")]
    CaFile {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The HTTP clients cannot be built (a CA that is not PEM).
    #[error("the OIDC HTTP client: {0}")]
    Client(#[from] reqwest::Error),
}

impl Bearer {
    /// A checker with the platform's `flags`, asking `client`'s API server about
    /// ServiceAccount tokens (none: every ServiceAccount token is refused as unavailable).
    pub fn new(flags: &BearerFlags, client: Option<kube::Client>) -> Result<Self, SetupError> {
        let configured = oidc::configured(&flags.oidc_issuers).map_err(SetupError::Flag)?;
        let ca = match &flags.oidc_ca_file {
            Some(path) => Some(std::fs::read(path).map_err(|source| SetupError::CaFile {
                path: path.display().to_string(),
                source,
            })?),
            None => None,
        };
        Ok(Bearer {
            issuers: oidc::Issuers::new(configured, ca.as_deref())?,
            client,
            reviewers: Mutex::default(),
            budgets: Arc::default(),
            accepted: Mutex::default(),
        })
    }

    /// Whether the holder of `authorization` (the request's `Authorization` header) is a
    /// caller `auth` accepts. A token accepted for this `auth` within [`ACCEPTED_TTL`] (and
    /// before it expires) is accepted again without being checked: a caller repeating its
    /// request costs a hash.
    pub async fn check(
        &self,
        auth: &ExtendedAuth,
        authorization: Option<&str>,
    ) -> Result<(), Denied> {
        let token = bearer_token(authorization).ok_or(Denied::Missing)?;
        let key = accepted_key(auth, token);
        let known = lock(&self.accepted).get(&key).copied();
        if known.is_some_and(|until| Instant::now() < until) {
            return Ok(());
        }
        let valid_for = match (&auth.oidc, &auth.service_account) {
            (Some(oidc), _) => self.check_oidc(oidc, token).await?,
            (None, Some(sa)) => self.check_service_account(sa, token).await?,
            (None, None) => return Err(Denied::Invalid("no caller is accepted".into())),
        };
        let now = Instant::now();
        let mut accepted = lock(&self.accepted);
        if accepted.len() >= MAX_ACCEPTED {
            accepted.retain(|_, until| *until > now);
            if accepted.len() >= MAX_ACCEPTED {
                accepted.clear();
            }
        }
        accepted.insert(key, now + valid_for.min(ACCEPTED_TTL));
        Ok(())
    }

    /// How much longer the accepted token is valid (until its `exp`).
    async fn check_oidc(&self, oidc: &OidcAuth, token: &str) -> Result<Duration, Denied> {
        let expected = jwt::Expected {
            issuer: &oidc.issuer,
            audiences: &oidc.audiences,
            required_claims: &oidc.required_claims,
        };
        // The header first: a malformed token or a refused algorithm costs no fetch.
        jwt::header(token).map_err(|e| Denied::Invalid(e.to_string()))?;
        let unavailable = |e: oidc::Unavailable| Denied::Unavailable(e.to_string());
        let keys = self
            .issuers
            .keys(&oidc.issuer, oidc.discovery_url.as_deref(), false)
            .await
            .map_err(unavailable)?;
        let claims = match jwt::verify(token, &keys, &expected, SystemTime::now()) {
            // The issuer may have rotated its keys since they were fetched.
            Err(jwt::Invalid::UnknownKey) => {
                let keys = self
                    .issuers
                    .keys(&oidc.issuer, oidc.discovery_url.as_deref(), true)
                    .await
                    .map_err(unavailable)?;
                jwt::verify(token, &keys, &expected, SystemTime::now())
            }
            other => other,
        }
        .map_err(|e| Denied::Invalid(e.to_string()))?;
        let exp = claims
            .get("exp")
            .and_then(serde_json::Value::as_f64)
            .unwrap_or(0.0);
        let now = SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        Ok(Duration::from_secs_f64((exp - now).clamp(0.0, 86_400.0)))
    }

    async fn check_service_account(
        &self,
        sa: &ServiceAccountAuth,
        token: &str,
    ) -> Result<Duration, Denied> {
        let reviewer = self.reviewer(&sa.audiences)?;
        let caller = reviewer
            .caller_of(token)
            .await
            .map_err(|e| match e.status {
                401 => Denied::Invalid("the token is not accepted for this audience".into()),
                _ => Denied::Unavailable(e.message),
            })?;
        let namespace = caller
            .username()
            .strip_prefix("system:serviceaccount:")
            .and_then(|rest| rest.split_once(':'))
            .map(|(ns, _)| ns)
            .ok_or_else(|| Denied::Invalid("the caller is not a ServiceAccount".into()))?;
        if !sa.namespaces.is_empty() && !sa.namespaces.iter().any(|n| n == namespace) {
            return Err(Denied::Invalid(
                "the caller is a ServiceAccount of a namespace not accepted".into(),
            ));
        }
        // The review's own cache decides how long it stands; this adds at most its period.
        Ok(ACCEPTED_TTL)
    }

    /// The reviewer of tokens for `audiences`.
    fn reviewer(&self, audiences: &[String]) -> Result<Arc<Authorizer>, Denied> {
        let client = self
            .client
            .clone()
            .ok_or_else(|| Denied::Unavailable("no API server to review the token".into()))?;
        let mut key = audiences.to_vec();
        key.sort();
        key.dedup();
        let mut reviewers = lock(&self.reviewers);
        if let Some(r) = reviewers.get(&key) {
            return Ok(r.clone());
        }
        if reviewers.len() >= MAX_REVIEWERS {
            if let Some(k) = reviewers.keys().next().cloned() {
                reviewers.remove(&k);
            }
        }
        let reviewer = Arc::new(Authorizer::sharing(
            client,
            key.clone(),
            self.budgets.clone(),
        ));
        reviewers.insert(key, reviewer.clone());
        Ok(reviewer)
    }
}

/// The key an accepted `token` is remembered under for `auth`: its SHA-256 (the token itself
/// is never kept) and a fingerprint of the auth.
fn accepted_key(auth: &ExtendedAuth, token: &str) -> ([u8; 32], u64) {
    use sha2::Digest;
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    auth.hash(&mut h);
    (sha2::Sha256::digest(token.as_bytes()).into(), h.finish())
}

/// The token of a `Bearer` `Authorization` header (scheme case-insensitive, RFC 6750 §2.1).
pub fn bearer_token(authorization: Option<&str>) -> Option<&str> {
    let (scheme, rest) = authorization?.split_once(' ')?;
    let token = rest.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bearer_headers_carry_a_token() {
        assert_eq!(bearer_token(Some("Bearer abc")), Some("abc"));
        assert_eq!(bearer_token(Some("bearer  abc ")), Some("abc"));
        assert_eq!(bearer_token(Some("Basic abc")), None);
        assert_eq!(bearer_token(Some("Bearer ")), None);
        assert_eq!(bearer_token(None), None);
    }

    #[tokio::test]
    async fn a_remembered_acceptance_holds_only_for_the_same_auth_and_until_it_ends() {
        let bearer = Bearer::new(&BearerFlags::default(), None).unwrap();
        // An issuer that is never fetched (a private address): only the memory can accept.
        let auth = |audience: &str| ExtendedAuth {
            oidc: Some(OidcAuth {
                issuer: "https://10.0.0.1".into(),
                audiences: vec![audience.into()],
                ..Default::default()
            }),
            ..Default::default()
        };
        let (a, b) = (auth("https://a.example"), auth("https://b.example"));
        lock(&bearer.accepted).insert(
            accepted_key(&a, "t"),
            Instant::now() + Duration::from_secs(60),
        );
        assert!(bearer.check(&a, Some("Bearer t")).await.is_ok());
        // Another auth (another audience) checks afresh, as does another token.
        assert!(bearer.check(&b, Some("Bearer t")).await.is_err());
        assert!(bearer.check(&a, Some("Bearer u")).await.is_err());
        // Past its time, the acceptance is gone.
        lock(&bearer.accepted).insert(accepted_key(&a, "t"), Instant::now());
        assert!(bearer.check(&a, Some("Bearer t")).await.is_err());
    }

    #[tokio::test]
    async fn every_audience_set_has_its_reviewer_and_all_share_one_review_budget() {
        use kube::client::Body;
        let (service, _handle) =
            tower_test::mock::pair::<http::Request<Body>, http::Response<Body>>();
        let client = kube::Client::new(service, "default");
        let bearer = Bearer::new(&BearerFlags::default(), Some(client)).unwrap();
        let a = bearer
            .reviewer(&["https://a".into(), "https://b".into()])
            .unwrap();
        let same = bearer
            .reviewer(&["https://b".into(), "https://a".into()])
            .unwrap();
        let other = bearer.reviewer(&["https://c".into()]).unwrap();
        assert!(
            Arc::ptr_eq(&a, &same),
            "one reviewer per audience set, in any order"
        );
        assert!(!Arc::ptr_eq(&a, &other));
        assert!(Arc::ptr_eq(a.budgets(), other.budgets()));
        assert!(Arc::ptr_eq(a.budgets(), &bearer.budgets));
    }

    #[tokio::test]
    async fn without_an_api_server_service_account_tokens_are_unavailable_not_accepted() {
        let bearer = Bearer::new(&BearerFlags::default(), None).unwrap();
        let auth = ExtendedAuth {
            service_account: Some(ServiceAccountAuth {
                audiences: vec!["agents".into()],
                namespaces: vec![],
            }),
            ..Default::default()
        };
        assert!(matches!(
            bearer.check(&auth, None).await,
            Err(Denied::Missing)
        ));
        assert!(matches!(
            bearer.check(&auth, Some("Bearer t")).await,
            Err(Denied::Unavailable(_))
        ));
    }
}
