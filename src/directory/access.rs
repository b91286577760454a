//! Kubernetes access mode: who is calling (a TokenReview of the bearer token) and which
//! namespaces' cards it may see (a SubjectAccessReview for `get` on `agentcards.agentcard.dev`
//! per namespace).
//!
//! What a caller costs the API server is bounded, whoever calls: each distinct token is
//! reviewed at most once per cache period (concurrent requests with one new token share one
//! review); accepted tokens are kept [`TTL`], rejected ones [`REJECTED_TTL`], in caches of
//! their own, so a flood of random tokens never pushes out the callers already known; token
//! reviews and access reviews each have their own slots ([`MAX_TOKEN_REVIEWS`],
//! [`MAX_ACCESS_REVIEWS`]) and their own [`MAX_WAITING`] places to wait for one (the others
//! get 503 at once), so requests with tokens never seen — a flood of random ones — only ever
//! wait among themselves. A known caller is never made to wait for them: once its token or
//! decision is past [`TTL`], it is answered from the cached one (for up to [`STALE_FOR`])
//! while that is asked about again in the background, on [`MAX_REFRESHES`] slots of their
//! own. Every cache is bounded. A lost API server makes requests answer 503 rather than hang.
//! Locks are never held across an `.await`.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
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
use tokio::sync::{OnceCell, Semaphore};

use super::ApiError;
use crate::locks::lock;

/// How long an accepted token and an access decision are reused.
pub const TTL: Duration = Duration::from_secs(10);
/// How long a rejected token is answered 401 without asking again.
pub const REJECTED_TTL: Duration = Duration::from_secs(2);
/// Most entries of each cache (expired ones go first when full, then the oldest).
const MAX_CACHED: usize = 10_000;
/// Most token reviews in flight at once.
pub const MAX_TOKEN_REVIEWS: usize = 16;
/// Most access reviews in flight at once.
pub const MAX_ACCESS_REVIEWS: usize = 16;
/// Most reviews in flight at once of tokens accepted before (their cache entry expired): they
/// have slots of their own, so a flood of unknown tokens never delays a known caller.
pub const MAX_REFRESHES: usize = 4;
/// Most requests waiting for a review slot; more get 503 at once.
pub const MAX_WAITING: usize = 256;
/// How long a review (waiting for a slot included) may take before the request gets 503.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(5);

/// How long past its period a cached token or decision is still answered from while it is
/// asked about again in the background: a known caller is answered at once, however busy the
/// API server is. A revoked token or grant stops working within [`TTL`] plus one review while
/// the API server answers; while it cannot be asked, the cached answer stands this long.
pub const STALE_FOR: Duration = Duration::from_secs(300);

/// A bounded map whose entries expire.
struct Cache<K, V> {
    ttl: Duration,
    entries: HashMap<K, (Instant, V)>,
}

impl<K: std::hash::Hash + Eq + Clone, V: Clone> Cache<K, V> {
    fn new(ttl: Duration) -> Self {
        Cache {
            ttl,
            entries: HashMap::new(),
        }
    }

    fn get(&self, key: &K) -> Option<V> {
        self.entries
            .get(key)
            .filter(|(at, _)| at.elapsed() < self.ttl)
            .map(|(_, v)| v.clone())
    }

    /// The value of `key` past its period but within [`STALE_FOR`] of it.
    fn get_stale(&self, key: &K) -> Option<V> {
        self.entries
            .get(key)
            .filter(|(at, _)| at.elapsed() < self.ttl + STALE_FOR)
            .map(|(_, v)| v.clone())
    }

    fn put(&mut self, key: K, value: V) {
        if self.entries.len() >= MAX_CACHED {
            let keep = self.ttl + STALE_FOR;
            self.entries.retain(|_, (at, _)| at.elapsed() < keep);
        }
        if self.entries.len() >= MAX_CACHED {
            // Every entry is fresh: the older half goes.
            let mut ages: Vec<Instant> = self.entries.values().map(|(at, _)| *at).collect();
            ages.sort_unstable();
            let cut = ages[ages.len() / 2];
            self.entries.retain(|_, (at, _)| *at > cut);
        }
        self.entries.insert(key, (Instant::now(), value));
    }

    fn remove(&mut self, key: &K) {
        self.entries.remove(key);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// One token review, shared by every request that asks about the same token meanwhile.
type Review = Arc<OnceCell<Result<Option<UserInfo>, ApiError>>>;

/// Checks callers against the API server (see the module doc). Cheap to share: every
/// listener of the process holds the same one.
pub struct Authorizer {
    state: Arc<State>,
}

/// What an [`Authorizer`] keeps, shared with the reviews it runs in the background.
struct State {
    client: Client,
    audiences: Vec<String>,
    users: Mutex<Cache<String, UserInfo>>,
    rejected: Mutex<Cache<String, ()>>,
    reviewing: Mutex<HashMap<String, Review>>,
    grants: Mutex<Cache<(String, String), bool>>,
    /// Tokens and decisions being asked about again in the background (one at a time each).
    refreshing: Mutex<HashSet<String>>,
    /// The review slots and waiting places (shared by authorizers that share a budget).
    budgets: Arc<Budgets>,
}

/// The API server reviews a process may have in flight and waiting, by kind. Authorizers that
/// share one ([`Authorizer::sharing`]: one per audience set, for extended cards) share these
/// bounds, so however many of them a tenant makes, the API server sees no more reviews.
pub struct Budgets {
    token_slots: Semaphore,
    /// Requests waiting for a review of a token never seen (a flood of random tokens waits
    /// here alone).
    waiting: AtomicUsize,
    access_slots: Semaphore,
    /// Requests of authenticated callers waiting for an access review.
    access_waiting: AtomicUsize,
    /// Slots and waiting places for reviews of tokens and decisions known before.
    refresh_slots: Semaphore,
    refresh_waiting: AtomicUsize,
}

impl Default for Budgets {
    fn default() -> Self {
        Budgets {
            token_slots: Semaphore::new(MAX_TOKEN_REVIEWS),
            waiting: AtomicUsize::new(0),
            access_slots: Semaphore::new(MAX_ACCESS_REVIEWS),
            access_waiting: AtomicUsize::new(0),
            refresh_slots: Semaphore::new(MAX_REFRESHES),
            refresh_waiting: AtomicUsize::new(0),
        }
    }
}

/// A caller the API server authenticated (from its bearer token).
#[derive(Clone, Debug)]
pub struct Caller(UserInfo);

impl Caller {
    /// The caller's user name (`system:serviceaccount:<namespace>:<name>` for a
    /// ServiceAccount).
    pub fn username(&self) -> &str {
        self.0.username.as_deref().unwrap_or_default()
    }

    /// What identifies the caller across its tokens: its user name and uid (a service
    /// account's new token is the same caller; another user is not).
    pub fn identity(&self) -> String {
        format!(
            "{}\u{0}{}",
            self.0.username.as_deref().unwrap_or_default(),
            self.0.uid.as_deref().unwrap_or_default()
        )
    }
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

/// Ask the API server `call` with a slot of `slots` and within [`REVIEW_TIMEOUT`]; at most
/// [`MAX_WAITING`] requests wait for a slot (`waiting` counts them). `what` names the review in
/// errors.
async fn review<T>(
    slots: &Semaphore,
    waiting: &AtomicUsize,
    what: &str,
    call: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, ApiError> {
    let waiter = Waiter::enter(waiting).ok_or_else(|| {
        ApiError::unavailable(format!(
            "{what}: too many requests waiting for a review; try again"
        ))
    })?;
    let asked = async move {
        let slot = slots.acquire().await;
        drop(waiter);
        let _slot = slot.map_err(|_| ApiError::unavailable(format!("{what}: closed")))?;
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

/// A place among the requests waiting for a review slot, given back when dropped (the slot
/// taken, or the request given up).
struct Waiter<'a>(&'a AtomicUsize);

impl<'a> Waiter<'a> {
    fn enter(waiting: &'a AtomicUsize) -> Option<Waiter<'a>> {
        if waiting.fetch_add(1, Ordering::AcqRel) >= MAX_WAITING {
            waiting.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Waiter(waiting))
    }
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Which budget a review is asked on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Budget {
    /// A token never seen, or a decision never made.
    New,
    /// A token or decision known before, asked about again.
    Refresh,
}

impl Authorizer {
    /// An authorizer asking the API server of `client`; `audiences` restrict the tokens
    /// accepted (empty: the API server's own).
    pub fn new(client: Client, audiences: Vec<String>) -> Self {
        Self::sharing(client, audiences, Arc::default())
    }

    /// The same, its reviews counted against `budgets` (shared with other authorizers).
    pub fn sharing(client: Client, audiences: Vec<String>, budgets: Arc<Budgets>) -> Self {
        Authorizer {
            state: Arc::new(State {
                client,
                audiences,
                users: Mutex::new(Cache::new(TTL)),
                rejected: Mutex::new(Cache::new(REJECTED_TTL)),
                reviewing: Mutex::new(HashMap::new()),
                grants: Mutex::new(Cache::new(TTL)),
                refreshing: Mutex::new(HashSet::new()),
                budgets,
            }),
        }
    }

    /// The namespaces among `namespaces` whose cards the holder of `authorization` (the
    /// request's `Authorization` header) may see; 401 without a bearer token or with one the
    /// API server rejects.
    pub async fn visible(
        &self,
        authorization: Option<&str>,
        namespaces: &BTreeSet<String>,
    ) -> Result<HashSet<String>, ApiError> {
        let caller = self.caller(authorization).await?;
        self.visible_to(&caller, namespaces).await
    }

    /// Who holds `authorization` (the request's `Authorization` header); 401 without a bearer
    /// token or with one the API server rejects.
    pub async fn caller(&self, authorization: Option<&str>) -> Result<Caller, ApiError> {
        let token = crate::bearer::bearer_token(authorization)
            .ok_or_else(|| ApiError::unauthenticated("a bearer token is required"))?;
        self.caller_of(token).await
    }

    /// Who holds `token`; 401 when the API server rejects it.
    pub async fn caller_of(&self, token: &str) -> Result<Caller, ApiError> {
        Ok(Caller(State::user(&self.state, token).await?))
    }

    /// The review budget this authorizer counts against.
    pub fn budgets(&self) -> &Arc<Budgets> {
        &self.state.budgets
    }

    /// The client the reviews are asked with (the server's own identity), for what the
    /// directory reads on demand (a card's revisions).
    pub fn client(&self) -> &Client {
        &self.state.client
    }

    /// Whether `caller` may approve cards: `create` on `agentcardapprovals.agentcard.dev`
    /// (the chart's `agentcard-approver` ClusterRole). Asked once per caller and period.
    pub async fn may_approve(&self, caller: &Caller) -> Result<bool, ApiError> {
        let key = (user_key(&caller.0), "\u{0}approve".to_string());
        if let Some(allowed) = lock(&self.state.grants).get(&key) {
            return Ok(allowed);
        }
        let asked = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: caller.0.username.clone(),
                uid: caller.0.uid.clone(),
                groups: caller.0.groups.clone(),
                extra: caller.0.extra.clone(),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some("create".into()),
                    group: Some("agentcard.dev".into()),
                    resource: Some("agentcardapprovals".into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let api = Api::<SubjectAccessReview>::all(self.state.client.clone());
        let answer = review(
            &self.state.budgets.access_slots,
            &self.state.budgets.access_waiting,
            "access review",
            api.create(&PostParams::default(), &asked),
        )
        .await?;
        let allowed = answer.status.is_some_and(|s| s.allowed);
        lock(&self.state.grants).put(key, allowed);
        Ok(allowed)
    }

    /// The namespaces among `namespaces` whose cards `caller` may see.
    pub async fn visible_to(
        &self,
        caller: &Caller,
        namespaces: &BTreeSet<String>,
    ) -> Result<HashSet<String>, ApiError> {
        let user = &caller.0;
        // Cached answers are immediate; the others are asked at most 8 at a time.
        let asks: Vec<_> = namespaces
            .iter()
            .cloned()
            .map(|ns| {
                let user = user.clone();
                async move {
                    State::may_get(&self.state, &user, &ns)
                        .await
                        .map(|ok| (ns, ok))
                }
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

impl State {
    /// Run `refresh` in the background unless one for `key` already runs.
    fn refresh_in_background<F>(self: &Arc<Self>, key: String, refresh: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        if !lock(&self.refreshing).insert(key.clone()) {
            return;
        }
        let state = self.clone();
        let span = tracing::debug_span!("access refresh");
        tokio::spawn(tracing::Instrument::instrument(
            async move {
                refresh.await;
                lock(&state.refreshing).remove(&key);
            },
            span,
        ));
    }

    /// The user `token` authenticates as: a fresh cached answer, a known caller's stale one
    /// (asked about again in the background, on the refresh budget), or a review.
    async fn user(self: &Arc<Self>, token: &str) -> Result<UserInfo, ApiError> {
        let rejected = || ApiError::unauthenticated("the bearer token was not accepted");
        let key = crate::contract::content_hash(token.as_bytes());
        if let Some(user) = lock(&self.users).get(&key) {
            return Ok(user);
        }
        if lock(&self.rejected).get(&key).is_some() {
            return Err(rejected());
        }
        let stale = lock(&self.users).get_stale(&key);
        if let Some(user) = stale {
            let (state, token, k) = (self.clone(), token.to_string(), key.clone());
            self.refresh_in_background(format!("token/{key}"), async move {
                if let Err(e) = state.review_token(&token, &k, Budget::Refresh).await {
                    tracing::debug!(error = %e.message, "a known token was not asked about again");
                }
            });
            return Ok(user);
        }
        // One review per token at a time: later requests wait for the first one's answer.
        let shared = lock(&self.reviewing)
            .entry(key.clone())
            .or_insert_with(|| Arc::new(OnceCell::new()))
            .clone();
        let answer = shared
            .get_or_init(|| self.review_token(token, &key, Budget::New))
            .await
            .clone();
        {
            let mut reviewing = lock(&self.reviewing);
            if reviewing.get(&key).is_some_and(|r| Arc::ptr_eq(r, &shared)) {
                reviewing.remove(&key);
            }
        }
        answer?.ok_or_else(rejected)
    }

    /// Ask the API server about `token` (its hash `key`) on `budget` and remember the answer.
    async fn review_token(
        &self,
        token: &str,
        key: &str,
        budget: Budget,
    ) -> Result<Option<UserInfo>, ApiError> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: (!self.audiences.is_empty()).then(|| self.audiences.clone()),
            },
            ..Default::default()
        };
        let api = Api::<TokenReview>::all(self.client.clone());
        let (slots, waiting) = match budget {
            Budget::New => (&self.budgets.token_slots, &self.budgets.waiting),
            Budget::Refresh => (&self.budgets.refresh_slots, &self.budgets.refresh_waiting),
        };
        let answer = self::review(
            slots,
            waiting,
            "token review",
            api.create(&PostParams::default(), &review),
        )
        .await?;
        let user = accepted(answer.status, &self.audiences);
        match &user {
            Some(u) => lock(&self.users).put(key.to_string(), u.clone()),
            None => {
                lock(&self.users).remove(&key.to_string());
                lock(&self.rejected).put(key.to_string(), ());
            }
        }
        Ok(user)
    }

    /// Whether `user` may read the cards of `namespace`: a fresh cached decision, a stale one
    /// (asked about again in the background), or an access review on the authenticated
    /// callers' own budget.
    async fn may_get(self: &Arc<Self>, user: &UserInfo, namespace: &str) -> Result<bool, ApiError> {
        let key = (user_key(user), namespace.to_string());
        if let Some(allowed) = lock(&self.grants).get(&key) {
            return Ok(allowed);
        }
        let stale = lock(&self.grants).get_stale(&key);
        if let Some(allowed) = stale {
            let (state, user, ns) = (self.clone(), user.clone(), namespace.to_string());
            let id = crate::contract::content_hash(format!("{}\u{0}{}", key.0, key.1).as_bytes());
            self.refresh_in_background(format!("grant/{id}"), async move {
                if let Err(e) = state.access_review(&user, &ns, Budget::Refresh).await {
                    tracing::debug!(error = %e.message, "a known decision was not asked about again");
                }
            });
            return Ok(allowed);
        }
        self.access_review(user, namespace, Budget::New).await
    }

    /// Ask the API server whether `user` may get AgentCards in `namespace`, on `budget`, and
    /// remember the answer.
    async fn access_review(
        &self,
        user: &UserInfo,
        namespace: &str,
        budget: Budget,
    ) -> Result<bool, ApiError> {
        let key = (user_key(user), namespace.to_string());
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
        let (slots, waiting) = match budget {
            Budget::New => (&self.budgets.access_slots, &self.budgets.access_waiting),
            Budget::Refresh => (&self.budgets.refresh_slots, &self.budgets.refresh_waiting),
        };
        let answer = self::review(
            slots,
            waiting,
            "access review",
            api.create(&PostParams::default(), &review),
        )
        .await?;
        let allowed = answer.status.is_some_and(|s| s.allowed);
        lock(&self.grants).put(key, allowed);
        Ok(allowed)
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
    fn a_full_cache_drops_its_oldest_half_and_expired_entries_first() {
        let mut c: Cache<usize, ()> = Cache::new(Duration::from_secs(60));
        for i in 0..MAX_CACHED {
            c.put(i, ());
        }
        assert_eq!(c.len(), MAX_CACHED);
        c.put(MAX_CACHED, ());
        assert!(c.len() <= MAX_CACHED / 2 + 1, "{}", c.len());
        assert!(c.get(&MAX_CACHED).is_some(), "the newest is kept");
        assert!(c.get(&0).is_none(), "the oldest went");
        let mut short: Cache<usize, ()> = Cache::new(Duration::ZERO);
        short.put(1, ());
        assert!(short.get(&1).is_none(), "expired");
    }

    #[test]
    fn an_entry_past_its_period_is_still_there_to_answer_a_known_caller_until_removed() {
        let mut c: Cache<usize, u8> = Cache::new(Duration::ZERO);
        c.put(1, 7);
        assert!(c.get(&1).is_none(), "past its period");
        assert_eq!(c.get_stale(&1), Some(7), "answered while asked about again");
        c.remove(&1);
        assert!(
            c.get_stale(&1).is_none(),
            "a rejected token is no longer answered"
        );
        let fresh: Cache<usize, u8> = Cache::new(Duration::from_secs(60));
        assert!(fresh.get_stale(&2).is_none());
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
