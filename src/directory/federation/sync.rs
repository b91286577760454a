//! The sync tasks: one per directory and upstream, in step with the AgentDirectories
//! ([`spawn`]), each a [`Reader`] refreshed on the upstream's period. A refresh checks what
//! the spec lets it connect to, reads the trusted keys, then the upstream ([`super::feed`] or
//! [`super::ard`]) into its [`State`], and hands what it holds to the [`Federation`]; a
//! refresh that fails keeps the last good entries for `keepSeconds` and says why.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::ResourceExt;
use tracing::Instrument;

use super::ard::read_ard;
use super::client::{check_url, client, cut, get, net_policy, MAX_RESPONSE_BYTES};
use super::error::Error;
use super::feed::read_feed;
use super::state::{include_of, max_entries, Refresh, State};
use super::{Federation, Synced};
use crate::a2a::Jwks;
use crate::crd::agentdirectory::{Upstream, UpstreamKind};
use crate::crd::AgentDirectory;
use crate::directory::entry::Entry;
use crate::hub::{Hubs, StoredCard};
use crate::process::AbortOnDrop;

/// Start syncing every directory's upstreams; stops when the handle is dropped. `secrets`
/// reads trusted JWKS Secrets (the operator's namespace); `client` reads the API server's
/// addresses, which no upstream may make the operator connect to.
pub fn spawn<C: StoredCard>(
    hubs: Arc<Hubs<C>>,
    federation: Arc<Federation>,
    secrets: kube::Api<k8s_openapi::api::core::v1::Secret>,
    client: kube::Client,
) -> AbortOnDrop {
    let api_server = Arc::new(crate::net::ApiServer::new(client));
    AbortOnDrop(tokio::spawn(
        manage(hubs, federation, secrets, api_server).instrument(tracing::info_span!("federation")),
    ))
}

/// The identifier a directory's entries carry in other directories' `path` (its registry's
/// own identifier, as its manifest says).
pub fn registry_identifier(host: &str, name: &str) -> String {
    format!("urn:air:{host}:agentcard-operator:{name}")
}

fn own_identifier(d: &AgentDirectory) -> String {
    let host = d
        .status
        .as_ref()
        .and_then(|s| s.served.as_ref())
        .map_or_else(
            || d.spec.publish.host.to_ascii_lowercase(),
            |r| r.host.clone(),
        );
    registry_identifier(&host, &d.name_any())
}

/// One sync task per directory and upstream, in step with the AgentDirectories.
async fn manage<C: StoredCard>(
    hubs: Arc<Hubs<C>>,
    federation: Arc<Federation>,
    secrets: kube::Api<k8s_openapi::api::core::v1::Secret>,
    api_server: Arc<crate::net::ApiServer>,
) {
    let mut events = hubs.directories.subscribe();
    let store = hubs.directories.store();
    let mut running: HashMap<(String, String), (String, AbortOnDrop)> = HashMap::new();
    loop {
        let mut want: HashMap<(String, String), (String, Upstream, String)> = HashMap::new();
        let mut dirs = HashSet::new();
        for d in store.state() {
            if d.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let name = d.name_any();
            let own = own_identifier(&d);
            let names: HashSet<String> = d.spec.upstreams.iter().map(|u| u.name.clone()).collect();
            federation.retain(&name, &names);
            dirs.insert(name.clone());
            for u in &d.spec.upstreams {
                let digest = serde_json::to_string(&(u, &own)).unwrap_or_default();
                want.insert(
                    (name.clone(), u.name.clone()),
                    (digest, u.clone(), own.clone()),
                );
            }
        }
        federation.retain_directories(&dirs);
        running.retain(|k, (digest, _)| want.get(k).is_some_and(|w| &w.0 == digest));
        for (key, (digest, up, own)) in want {
            if running.contains_key(&key) {
                continue;
            }
            let reader = Reader::new(up, own)
                .with_secrets(secrets.clone())
                .refusing(api_server.clone());
            let span = tracing::info_span!("upstream", directory = %key.0, upstream = %key.1);
            let task =
                tokio::spawn(sync(federation.clone(), key.0.clone(), reader).instrument(span));
            running.insert(key, (digest, AbortOnDrop(task)));
        }
        if events.next().await.is_none() {
            return;
        }
    }
}

/// One upstream's reader: what it keeps between refreshes.
pub struct Reader {
    up: Upstream,
    own: String,
    state: State,
    secrets: Option<kube::Api<k8s_openapi::api::core::v1::Secret>>,
    api_server: Arc<crate::net::ApiServer>,
}

impl Reader {
    /// A reader of `up` for the directory whose registry identifier is `own`.
    pub fn new(up: Upstream, own: String) -> Reader {
        Reader {
            up,
            own,
            state: State::default(),
            secrets: None,
            api_server: Arc::default(),
        }
    }

    /// Never connect to the API server's addresses as `api_server` reads them.
    pub fn refusing(mut self, api_server: Arc<crate::net::ApiServer>) -> Self {
        self.api_server = api_server;
        self
    }

    /// Read `trust.jwks` Secrets with `secrets`.
    pub fn with_secrets(mut self, secrets: kube::Api<k8s_openapi::api::core::v1::Secret>) -> Self {
        self.secrets = Some(secrets);
        self
    }

    /// Read what changed upstream: what it lists now.
    pub async fn refresh(&mut self) -> Result<Refreshed, Error> {
        let include = match include_of(&self.up) {
            Ok(q) => q,
            // Listing nothing until the filters are mended (what it would list is not known).
            Err(why) => {
                return Ok(Refreshed {
                    entries: Vec::new(),
                    refused: 0,
                    first_refusal: Some(why.to_string()),
                })
            }
        };
        if let Some(r) = &self.up.trust.jwks {
            self.state.jwks = Some((None, Arc::new(secret_jwks(self.secrets.as_ref(), r).await?)));
        }
        let api_server = self.api_server.addresses().await;
        let read = Refresh {
            up: &self.up,
            own: &self.own,
            include: include.as_ref(),
            max: max_entries(&self.up),
        };
        refresh_once(&read, api_server, &mut self.state).await?;
        let super::state::Selected {
            entries,
            refused,
            first_refusal,
        } = self.state.held.selected();
        Ok(Refreshed {
            entries,
            refused,
            first_refusal,
        })
    }
}

/// What an upstream lists after a refresh.
#[derive(Debug)]
pub struct Refreshed {
    /// The entries to list, by identifier.
    pub entries: Vec<Arc<Entry>>,
    /// How many were refused (not a card, untrusted, read back, past `maxEntries`, ...).
    pub refused: usize,
    /// The first refusal, saying which entry and why.
    pub first_refusal: Option<String>,
}

/// Keep `dir`'s upstream `up` synced into `fed` until aborted.
async fn sync(fed: Arc<Federation>, dir: String, mut reader: Reader) {
    let up = &reader.up;
    let refresh =
        Duration::from_secs(u64::try_from(up.refresh_seconds.unwrap_or(60)).unwrap_or(60));
    let keep =
        Duration::from_secs(u64::try_from(up.keep_seconds.unwrap_or(86_400)).unwrap_or(86_400));
    let name = up.name.clone();
    let mut failures = 0u32;
    loop {
        let result = reader.refresh().await;
        let mut synced = fed.synced(&dir, &name).unwrap_or_default();
        match result {
            Ok(read) => {
                synced = Synced {
                    entries: Arc::new(read.entries),
                    refused: read.refused,
                    first_refusal: read.first_refusal,
                    last_sync: Some(jiff::Timestamp::now().to_string()),
                    last_ok: Some(Instant::now()),
                    reachable: true,
                    error: None,
                };
                failures = 0;
            }
            Err(e) => {
                let e = cut(&e.to_string()).into_owned();
                tracing::warn!(error = %e, "upstream not read");
                synced.reachable = false;
                synced.error = Some(e);
                if synced.last_ok.is_none_or(|t| t.elapsed() > keep) {
                    synced.entries = Arc::default();
                }
                failures = failures.saturating_add(1);
            }
        }
        fed.set(&dir, &name, synced);
        let wait = match failures {
            0 => refresh,
            n => refresh.min(Duration::from_secs(1u64 << n.min(5))),
        };
        tokio::time::sleep(wait).await;
    }
}

/// The JWKS of a `trust.jwks` Secret.
async fn secret_jwks(
    secrets: Option<&kube::Api<k8s_openapi::api::core::v1::Secret>>,
    r: &crate::crd::agentdirectory::SecretKeyRef,
) -> Result<Jwks, Error> {
    let api = secrets.ok_or(Error::NoSecrets)?;
    let key = r.key.as_deref().unwrap_or("jwks.json");
    let secret = api.get(&r.name).await.map_err(|source| Error::ReadSecret {
        name: r.name.clone(),
        source,
    })?;
    let bytes = secret
        .data
        .and_then(|d| d.get(key).cloned())
        .ok_or_else(|| Error::NoKey {
            name: r.name.clone(),
            key: key.to_string(),
        })?;
    Jwks::from_slice(&bytes.0).map_err(|source| Error::SecretNotJwks {
        name: r.name.clone(),
        key: key.to_string(),
        source,
    })
}

/// One refresh of `r`'s upstream into `state`, never connecting to `api_server`'s addresses.
async fn refresh_once(
    r: &Refresh<'_>,
    api_server: Arc<Vec<std::net::IpAddr>>,
    state: &mut State,
) -> Result<(), Error> {
    let up = r.up;
    let allowed = net_policy(up, api_server.clone())?;
    check_url(up, &allowed, ("url", &up.url))?;
    if let Some(jwks_url) = &up.trust.jwks_url {
        check_url(up, &allowed, ("trust.jwksUrl", jwks_url))?;
    }
    let (base, http) = match &state.http {
        // Built again when the API server's addresses changed.
        Some((base, http, refusing)) if *refusing == api_server => (base.clone(), http.clone()),
        _ => {
            let base = url::Url::parse(&up.url).map_err(|e| Error::Url {
                field: "url",
                url: cut(&up.url).into_owned(),
                problem: e.into(),
            })?;
            let http = client(&base, allowed.clone())?;
            state.http = Some((base.clone(), http.clone(), api_server));
            (base, http)
        }
    };
    if let Some(jwks_url) = &up.trust.jwks_url {
        let held = state.jwks.as_ref().and_then(|(tag, _)| tag.clone());
        let got = get(&http, jwks_url, held.as_deref(), MAX_RESPONSE_BYTES).await?;
        match got.status {
            304 if state.jwks.is_some() => {}
            200 => {
                let jwks = Jwks::from_slice(&got.body)
                    .map_err(|e| Error::malformed(jwks_url, "a JWKS", e))?;
                state.jwks = Some((got.etag, Arc::new(jwks)));
            }
            s => return Err(Error::status(jwks_url, s)),
        }
    }
    match up.kind {
        UpstreamKind::AgentDirectory => read_feed(&http, r, state).await,
        UpstreamKind::Ard => read_ard(&http, &base, r, state).await,
    }
}
