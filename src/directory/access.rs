//! Kubernetes access mode: who is calling (a TokenReview of the bearer token) and which
//! namespaces' cards it may see (a SubjectAccessReview for `get` on `agentcards.agentcard.dev`
//! per namespace). Decisions are cached briefly, in bounded maps, so a busy client costs the
//! API server a few reviews per cache period, not one per request. Locks are never held
//! across an `.await`.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use kube::Client;

use super::ApiError;

/// How long a decision is reused.
const TTL: Duration = Duration::from_secs(10);
/// Most cached decisions of each kind; the cache is emptied when full.
const MAX_CACHED: usize = 10_000;

/// Checks callers against the API server.
pub struct Authorizer {
    client: Client,
    audiences: Vec<String>,
    users: Mutex<HashMap<String, (Instant, Option<UserInfo>)>>,
    grants: Mutex<HashMap<(String, String), (Instant, bool)>>,
}

fn user_key(u: &UserInfo) -> String {
    format!(
        "{}\u{0}{}\u{0}{:?}",
        u.username.as_deref().unwrap_or_default(),
        u.uid.as_deref().unwrap_or_default(),
        u.groups
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
        map.clear();
    }
    map.insert(key, (Instant::now(), value));
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
                let answer = Api::<TokenReview>::all(self.client.clone())
                    .create(&PostParams::default(), &review)
                    .await
                    .map_err(|e| ApiError::internal(format!("token review failed: {e}")))?;
                let user = answer
                    .status
                    .filter(|s| s.authenticated == Some(true))
                    .and_then(|s| s.user);
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
        let answer = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| ApiError::internal(format!("access review failed: {e}")))?;
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
