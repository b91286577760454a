//! OpenID Connect issuers' signing keys, fetched and kept: the discovery document
//! (`<issuer>/.well-known/openid-configuration`, or the URL the platform configured) names the
//! JWKS, which is fetched and kept [`KEYS_TTL`]; a token signed by a key not in it makes the
//! JWKS be fetched again, at most once per [`MIN_REFETCH`] (so a flood of tokens with made-up
//! key ids costs the issuer nothing more). Concurrent requests for one issuer share one fetch.
//! A fetch that fails keeps the last keys for [`STALE_FOR`]. Everything is bounded: issuers
//! kept ([`MAX_ISSUERS`]), document sizes ([`MAX_DOCUMENT`]), time per fetch.
//!
//! Who decides where the operator connects: a tenant names an issuer in its card, so an issuer
//! the platform did not configure is fetched over `https` from public addresses only (no
//! cluster-internal address, no loopback, no cloud metadata; [`crate::net`]), with no redirect.
//! The platform's own issuers (`--oidc-issuer`, e.g. the cluster's ServiceAccount issuer or an
//! in-cluster Dex) are fetched from the discovery URL it gives, trusting its CA
//! (`--oidc-ca-file`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::a2a::Jwks;
use crate::locks::lock;
use crate::net::LazyClient;

/// How long fetched keys are used before they are fetched again.
pub const KEYS_TTL: Duration = Duration::from_secs(300);
/// The least time between two fetches of one issuer's keys.
pub const MIN_REFETCH: Duration = Duration::from_secs(10);
/// How long the last keys stay in use while fetching them again fails.
pub const STALE_FOR: Duration = Duration::from_secs(3600);
/// Most issuers whose keys are kept (the least recently fetched go first).
pub const MAX_ISSUERS: usize = 256;
/// Largest discovery document or JWKS read.
pub const MAX_DOCUMENT: usize = 256 * 1024;
/// Longest a fetch (connect, send, read) may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// Why an issuer's keys are not at hand.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the keys of {issuer} could not be fetched: {why}")]
pub struct Unavailable {
    /// The issuer.
    pub issuer: String,
    /// What failed.
    pub why: String,
}

/// An issuer the platform configured: where its discovery document is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Configured {
    /// The issuer (`iss`).
    pub issuer: String,
    /// Its discovery document's URL.
    pub discovery: url::Url,
}

/// Parse `--oidc-issuer` values: `ISSUER` or `ISSUER=DISCOVERY_URL`.
pub fn configured(values: &[String]) -> Result<Vec<Configured>, String> {
    values
        .iter()
        .map(|v| {
            let (issuer, discovery) = match v.split_once('=') {
                Some((i, d)) => (i.trim(), d.trim().to_string()),
                None => (v.trim(), discovery_url(v.trim())),
            };
            let discovery = url::Url::parse(&discovery)
                .map_err(|e| format!("--oidc-issuer {v:?}: the discovery URL: {e}"))?;
            Ok(Configured {
                issuer: issuer.to_string(),
                discovery,
            })
        })
        .collect()
}

/// The discovery document's URL of `issuer` (OpenID Connect Discovery 1.0 §4).
pub fn discovery_url(issuer: &str) -> String {
    format!(
        "{}/.well-known/openid-configuration",
        issuer.trim_end_matches('/')
    )
}

/// One issuer's keys as last fetched.
#[derive(Default)]
struct Held {
    keys: Option<(Instant, Arc<Jwks>)>,
    last_try: Option<Instant>,
}

/// One issuer's entry: its keys, and the lock one fetch at a time holds.
#[derive(Default)]
struct Entry {
    held: Mutex<Held>,
    fetching: tokio::sync::Mutex<()>,
}

/// The issuers' keys (see the module doc). Cheap to share.
pub struct Issuers {
    configured: HashMap<String, url::Url>,
    /// For the platform's issuers: its CA trusted, any address.
    platform: LazyClient,
    /// For the others: public addresses only.
    public: LazyClient,
    entries: Mutex<HashMap<String, Arc<Entry>>>,
}

impl Issuers {
    /// The issuers `configured` by the platform (trusting `ca_pem` besides the system's CAs);
    /// any other issuer over `https` from public addresses.
    pub fn new(configured: Vec<Configured>, ca_pem: Option<&[u8]>) -> Result<Self, reqwest::Error> {
        let builder = || {
            reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .timeout(FETCH_TIMEOUT)
                .connect_timeout(FETCH_TIMEOUT)
                .no_proxy()
        };
        // The platform's CAs are read now (a bad bundle fails the start); the clients are
        // built on first use.
        let roots = match ca_pem {
            Some(pem) => reqwest::Certificate::from_pem_bundle(pem)?,
            None => Vec::new(),
        };
        let platform = LazyClient::new(move || {
            roots
                .iter()
                .fold(builder(), |b, cert| b.add_root_certificate(cert.clone()))
                .build()
        });
        let public = LazyClient::new(move || {
            builder()
                .https_only(true)
                .dns_resolver(crate::net::guard(crate::net::Allowed::default()))
                .build()
        });
        Ok(Issuers {
            configured: configured
                .into_iter()
                .map(|c| (c.issuer, c.discovery))
                .collect(),
            platform,
            public,
            entries: Mutex::default(),
        })
    }

    /// Whether the platform configured `issuer`.
    pub fn is_configured(&self, issuer: &str) -> bool {
        self.configured.contains_key(issuer)
    }

    fn entry(&self, issuer: &str) -> Arc<Entry> {
        let mut entries = lock(&self.entries);
        if let Some(e) = entries.get(issuer) {
            return e.clone();
        }
        if entries.len() >= MAX_ISSUERS {
            let oldest = entries
                .iter()
                .min_by_key(|(_, e)| lock(&e.held).last_try)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                entries.remove(&k);
            }
        }
        entries.entry(issuer.to_string()).or_default().clone()
    }

    /// The keys of `issuer` (its discovery document at `discovery`, when the card names one
    /// and the platform did not configure the issuer): the kept ones while fresh, unless
    /// `refetch` (a token named a key they lack) and the last fetch is [`MIN_REFETCH`] old.
    pub async fn keys(
        &self,
        issuer: &str,
        discovery: Option<&str>,
        refetch: bool,
    ) -> Result<Arc<Jwks>, Unavailable> {
        let discovery = discovery.filter(|_| !self.is_configured(issuer));
        let entry = self.entry(&format!("{issuer}\n{}", discovery.unwrap_or_default()));
        let usable = |held: &Held| {
            let (at, keys) = held.keys.as_ref()?;
            let recent = held.last_try.is_some_and(|t| t.elapsed() < MIN_REFETCH);
            (at.elapsed() < KEYS_TTL && (!refetch || recent)).then(|| keys.clone())
        };
        if let Some(keys) = usable(&lock(&entry.held)) {
            return Ok(keys);
        }
        let _one = entry.fetching.lock().await;
        {
            let held = lock(&entry.held);
            // Fetched by another request meanwhile, or tried too recently to try again.
            if let Some(keys) = usable(&held) {
                return Ok(keys);
            }
            if held.last_try.is_some_and(|t| t.elapsed() < MIN_REFETCH) {
                return stale(issuer, &held, "fetched moments ago without success");
            }
        }
        lock(&entry.held).last_try = Some(Instant::now());
        let fetched = self.fetch(issuer, discovery).await;
        let mut held = lock(&entry.held);
        match fetched {
            Ok(keys) => {
                let keys = Arc::new(keys);
                held.keys = Some((Instant::now(), keys.clone()));
                Ok(keys)
            }
            Err(why) => {
                tracing::warn!(issuer, error = %why, "an OIDC issuer's keys could not be fetched");
                stale(issuer, &held, &why)
            }
        }
    }

    /// The discovery document, then the JWKS it names.
    async fn fetch(&self, issuer: &str, discovery: Option<&str>) -> Result<Jwks, String> {
        let (client, discovery, platform) = match self.configured.get(issuer) {
            Some(url) => (&self.platform, url.clone(), true),
            None => {
                let named = discovery.map_or_else(|| discovery_url(issuer), str::to_string);
                let url = url::Url::parse(&named).map_err(|e| e.to_string())?;
                (&self.public, url, false)
            }
        };
        let client = client.get().map_err(|e| format!("the HTTP client: {e}"))?;
        let doc: serde_json::Value =
            serde_json::from_slice(&get(&client, &discovery, platform).await?)
                .map_err(|e| format!("the discovery document: {e}"))?;
        // OpenID Connect Discovery §4.3: the document names the issuer it was asked for.
        if doc.get("issuer").and_then(|v| v.as_str()) != Some(issuer) {
            return Err("the discovery document names another issuer".into());
        }
        let jwks_uri = doc
            .get("jwks_uri")
            .and_then(|v| v.as_str())
            .ok_or("the discovery document has no jwks_uri")?;
        let jwks_uri = url::Url::parse(jwks_uri).map_err(|e| format!("jwks_uri: {e}"))?;
        let body = get(&client, &jwks_uri, platform).await?;
        Jwks::from_slice(&body).map_err(|e| e.to_string())
    }
}

/// The last keys of `issuer` while they are at most [`STALE_FOR`] old.
fn stale(issuer: &str, held: &Held, why: &str) -> Result<Arc<Jwks>, Unavailable> {
    match &held.keys {
        Some((at, keys)) if at.elapsed() < STALE_FOR => Ok(keys.clone()),
        _ => Err(Unavailable {
            issuer: issuer.to_string(),
            why: why.to_string(),
        }),
    }
}

/// GET `url` (at most [`MAX_DOCUMENT`] bytes). A URL of a tenant's issuer (not `platform`)
/// naming an address literally must name a public one: the resolver that checks names never
/// sees it.
async fn get(client: &reqwest::Client, url: &url::Url, platform: bool) -> Result<Vec<u8>, String> {
    if !platform {
        let literal = match url.host() {
            Some(url::Host::Ipv4(ip)) => Some(std::net::IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => Some(std::net::IpAddr::V6(ip)),
            _ => None,
        };
        if literal.is_some_and(|ip| !crate::net::Allowed::default().permits(ip)) {
            return Err(format!("{url}: not a public address"));
        }
    }
    let chain = |e: reqwest::Error| {
        let mut out = format!("{url}: {e}");
        let mut cause = std::error::Error::source(&e);
        while let Some(c) = cause {
            out.push_str(&format!(": {c}"));
            cause = c.source();
        }
        out
    };
    let mut resp = client.get(url.clone()).send().await.map_err(chain)?;
    if !resp.status().is_success() {
        return Err(format!("{url}: HTTP {}", resp.status()));
    }
    if resp
        .content_length()
        .is_some_and(|n| n > MAX_DOCUMENT as u64)
    {
        return Err(format!("{url}: larger than {MAX_DOCUMENT} bytes"));
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(chain)? {
        if body.len() + chunk.len() > MAX_DOCUMENT {
            return Err(format!("{url}: larger than {MAX_DOCUMENT} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issuers_are_configured_with_or_without_a_discovery_url() {
        let c = configured(&[
            "https://kubernetes.default.svc=https://127.0.0.1:6443/.well-known/openid-configuration"
                .into(),
            "https://dex.example/".into(),
        ])
        .unwrap();
        assert_eq!(c[0].issuer, "https://kubernetes.default.svc");
        assert_eq!(
            c[0].discovery.as_str(),
            "https://127.0.0.1:6443/.well-known/openid-configuration"
        );
        assert_eq!(c[1].issuer, "https://dex.example/");
        assert_eq!(
            c[1].discovery.as_str(),
            "https://dex.example/.well-known/openid-configuration"
        );
        assert!(configured(&["https://x=not a url".into()]).is_err());
    }

    #[tokio::test]
    async fn a_tenants_issuer_on_a_private_address_is_never_fetched() {
        let issuers = Issuers::new(vec![], None).unwrap();
        for issuer in [
            "https://127.0.0.1:6443",
            "https://169.254.169.254",
            "https://[::1]",
        ] {
            let e = issuers.keys(issuer, None, false).await.unwrap_err();
            assert!(e.why.contains("not a public address"), "{issuer}: {e}");
        }
        // Tried moments ago: not fetched again, however often asked.
        let e = issuers
            .keys("https://127.0.0.1:6443", None, true)
            .await
            .unwrap_err();
        assert!(e.why.contains("moments ago"), "{e}");
        // A discovery URL a card names on a private address: refused the same way.
        let private = "https://10.0.0.1/.well-known/openid-configuration";
        let e = issuers
            .keys("https://issuer.example", Some(private), false)
            .await
            .unwrap_err();
        assert!(e.why.contains("not a public address"), "{e}");
    }
}
