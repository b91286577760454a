//! Kubernetes access mode: who is calling (a TokenReview of the bearer token) and which
//! namespaces' cards it may see (a SubjectAccessReview for `get` on `agentcards.agentcard.dev`
//! per namespace). Decisions are cached briefly, in bounded maps, so a busy client costs the
//! API server a few reviews per cache period, not one per request. Reviews are bounded too:
//! at most [`MAX_REVIEWS`] in flight, each given [`REVIEW_TIMEOUT`]; a lost API server makes
//! requests answer 503 rather than hang. Locks are never held across an `.await`.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::authentication::v1::{
    TokenReview, TokenReviewSpec, TokenReviewStatus, UserInfo,
};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use kube::Client;

use super::ApiError;

/// How long a decision is reused.
const TTL: Duration = Duration::from_secs(10);
/// Most cached decisions of each kind (expired ones go first when full).
const MAX_CACHED: usize = 10_000;
/// Most reviews in flight at once, across callers.
const MAX_REVIEWS: usize = 32;
/// How long a review (waiting for a slot included) may take before the request gets 503.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(5);

/// Checks callers against the API server.
pub struct Authorizer {
    client: Client,
    audiences: Vec<String>,
    users: Mutex<HashMap<String, (Instant, Option<UserInfo>)>>,
    grants: Mutex<HashMap<(String, String), (Instant, bool)>>,
    reviews: tokio::sync::Semaphore,
}

/// Everything a SubjectAccessReview is asked with: two callers share a decision only when
/// they would be asked about identically (`extra` included: scoped tokens differ there).
fn user_key(u: &UserInfo) -> String {
    format!(
        "{}\u{0}{}\u{0}{:?}\u{0}{:?}",
        u.username.as_deref().unwrap_or_default(),
        u.uid.as_deref().unwrap_or_default(),
        u.groups,
        u.extra
    )
}

fn cached<K: std::hash::Hash + Eq + Clone, V: Clone>(
    map: &Mutex<HashMap<K, (Instant, V)>>,
    key: &K,
) -> Option<V> {
    let map = map.lock().unwrap_or_else(|e| e.into_inner());
    map.get(key)
        .filter(|(at, _)| at.elapsed() < TTL)
        .map(|(_, v)| v.clone())
}

fn remember<K: std::hash::Hash + Eq, V>(map: &Mutex<HashMap<K, (Instant, V)>>, key: K, value: V) {
    let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
    if map.len() >= MAX_CACHED {
        map.retain(|_, (at, _)| at.elapsed() < TTL);
    }
    if map.len() >= MAX_CACHED {
        // Every entry is fresh: more callers than the cache holds within one TTL.
        map.clear();
    }
    map.insert(key, (Instant::now(), value));
}

/// The user a TokenReview answer authenticates, if it does. An authenticator that ignores
/// audiences answers without any: with `audiences` asked for, one of them must be in the
/// answer (as the TokenReview API asks of its clients).
fn accepted(status: Option<TokenReviewStatus>, audiences: &[String]) -> Option<UserInfo> {
    status
        .filter(|s| s.authenticated == Some(true))
        .filter(|s| {
            audiences.is_empty() || s.audiences.iter().flatten().any(|a| audiences.contains(a))
        })
        .and_then(|s| s.user)
}

/// Ask the API server `call` with a slot of `slots` and within [`REVIEW_TIMEOUT`]; `what`
/// names the review in errors.
async fn review<T>(
    slots: &tokio::sync::Semaphore,
    what: &str,
    call: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, ApiError> {
    let asked = async {
        let _slot = slots
            .acquire()
            .await
            .map_err(|_| ApiError::unavailable(format!("{what}: closed")))?;
        call.await
            .map_err(|e| ApiError::unavailable(format!("{what} failed: {e}")))
    };
    tokio::time::timeout(REVIEW_TIMEOUT, asked)
        .await
        .unwrap_or_else(|_| {
            Err(ApiError::unavailable(format!(
                "{what}: the API server did not answer within {REVIEW_TIMEOUT:?}"
            )))
        })
}

impl Authorizer {
    /// An authorizer asking the API server of `client`; `audiences` restrict the tokens
    /// accepted (empty: the API server's own).
    pub fn new(client: Client, audiences: Vec<String>) -> Self {
        Authorizer {
            client,
            audiences,
            users: Mutex::new(HashMap::new()),
            grants: Mutex::new(HashMap::new()),
            reviews: tokio::sync::Semaphore::new(MAX_REVIEWS),
        }
    }

    async fn user(&self, token: &str) -> Result<UserInfo, ApiError> {
        let key = crate::contract::content_hash(token.as_bytes());
        let known = match cached(&self.users, &key) {
            Some(known) => known,
            None => {
                let review = TokenReview {
                    spec: TokenReviewSpec {
                        token: Some(token.to_string()),
                        audiences: (!self.audiences.is_empty()).then(|| self.audiences.clone()),
                    },
                    ..Default::default()
                };
                let api = Api::<TokenReview>::all(self.client.clone());
                let answer = self::review(
                    &self.reviews,
                    "token review",
                    api.create(&PostParams::default(), &review),
                )
                .await?;
                let user = accepted(answer.status, &self.audiences);
                remember(&self.users, key, user.clone());
                user
            }
        };
        known.ok_or_else(|| ApiError::unauthenticated("the bearer token was not accepted"))
    }

    async fn may_get(&self, user: &UserInfo, namespace: &str) -> Result<bool, ApiError> {
        let key = (user_key(user), namespace.to_string());
        if let Some(allowed) = cached(&self.grants, &key) {
            return Ok(allowed);
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username.clone(),
                uid: user.uid.clone(),
                groups: user.groups.clone(),
                extra: user.extra.clone(),
                resource_attributes: Some(ResourceAttributes {
                    namespace: Some(namespace.to_string()),
                    verb: Some("get".into()),
                    group: Some("agentcard.dev".into()),
                    resource: Some("agentcards".into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let api = Api::<SubjectAccessReview>::all(self.client.clone());
        let answer = self::review(
            &self.reviews,
            "access review",
            api.create(&PostParams::default(), &review),
        )
        .await?;
        let allowed = answer.status.is_some_and(|s| s.allowed);
        remember(&self.grants, key, allowed);
        Ok(allowed)
    }

    /// The namespaces among `namespaces` whose cards the holder of `authorization` (the
    /// request's `Authorization` header) may see; 401 without a bearer token or with one the
    /// API server rejects.
    pub async fn visible(
        &self,
        authorization: Option<&str>,
        namespaces: &BTreeSet<String>,
    ) -> Result<HashSet<String>, ApiError> {
        let token = authorization
            .and_then(|h| {
                let (scheme, rest) = h.split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
            })
            .filter(|t| !t.is_empty())
            .ok_or_else(|| ApiError::unauthenticated("a bearer token is required"))?;
        let user = self.user(token).await?;
        // Cached answers are immediate; the others are asked at most 8 at a time.
        let asks: Vec<_> = namespaces
            .iter()
            .cloned()
            .map(|ns| {
                let user = user.clone();
                async move { self.may_get(&user, &ns).await.map(|ok| (ns, ok)) }
            })
            .collect();
        let answers: Vec<Result<(String, bool), ApiError>> = futures::stream::iter(asks)
            .buffer_unordered(8)
            .collect()
            .await;
        let mut visible = HashSet::new();
        for answer in answers {
            let (ns, ok) = answer?;
            if ok {
                visible.insert(ns);
            }
        }
        Ok(visible)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(authenticated: bool, audiences: Option<Vec<&str>>) -> Option<TokenReviewStatus> {
        Some(TokenReviewStatus {
            authenticated: Some(authenticated),
            audiences: audiences.map(|a| a.into_iter().map(String::from).collect()),
            user: Some(UserInfo {
                username: Some("alice".into()),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    #[test]
    fn tokens_need_an_asked_audience_in_the_answer() {
        let ours = vec!["agentcard-directory".to_string()];
        assert!(accepted(status(true, Some(vec!["agentcard-directory"])), &ours).is_some());
        // An audience-unaware authenticator (no audiences in its answer), or another audience.
        assert!(accepted(status(true, None), &ours).is_none());
        assert!(accepted(status(true, Some(vec!["other"])), &ours).is_none());
        assert!(accepted(status(false, Some(vec!["agentcard-directory"])), &ours).is_none());
        // Without audiences asked for, the API server's own judgement stands.
        assert!(accepted(status(true, None), &[]).is_some());
    }

    #[test]
    fn decisions_are_shared_only_by_identical_users() {
        let user = |extra: &[(&str, &str)]| UserInfo {
            username: Some("alice".into()),
            extra: Some(
                extra
                    .iter()
                    .map(|(k, v)| (k.to_string(), vec![v.to_string()]))
                    .collect(),
            ),
            ..Default::default()
        };
        assert_ne!(
            user_key(&user(&[("scopes", "read")])),
            user_key(&user(&[("scopes", "admin")]))
        );
        assert_eq!(user_key(&user(&[])), user_key(&user(&[])));
    }
}
