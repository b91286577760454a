//! Which addresses the operator connects to when a tenant's or an upstream's data names
//! them: an import's endpoint addresses ([`crate::controller::agentcard::reach`]) and a
//! federated registry's resolved addresses ([`Guard`], the resolver of the federation's HTTP
//! clients). The rules are pure; [`Guard`] applies them to every address a name resolves to,
//! at each connection, so a name re-pointed between two requests is checked again.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// Cloud metadata services outside the link-local range: Alibaba Cloud's (`100.100.100.200`)
/// and AWS's IPv6 one (`fd00:ec2::254`).
const METADATA: [IpAddr; 2] = [
    IpAddr::V4(std::net::Ipv4Addr::new(100, 100, 100, 200)),
    IpAddr::V6(std::net::Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)),
];

/// Whether the operator may connect to `ip`: never the loopback, link-local (cloud metadata),
/// unspecified, multicast or broadcast addresses, a cloud metadata address, or an IPv6
/// address that stands for an IPv4 one (IPv4-mapped, IPv4-translated, IPv4-compatible, NAT64's
/// `64:ff9b::/96` and `64:ff9b:1::/48`), whatever an EndpointSlice says. (No Pod has one of
/// these addresses.)
pub fn address_allowed(ip: IpAddr) -> bool {
    if METADATA.contains(&ip) {
        return false;
    }
    match ip {
        IpAddr::V4(v4) => {
            !(v4.is_loopback()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_multicast()
                || v4.is_broadcast())
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            let embeds_v4 = v6.to_ipv4_mapped().is_some()
                || (s[..6] == [0; 6] && !v6.is_loopback() && !v6.is_unspecified())
                || s[..6] == [0x64, 0xff9b, 0, 0, 0, 0]
                || s[..6] == [0, 0, 0, 0, 0xffff, 0]
                || s[..3] == [0x64, 0xff9b, 1];
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || v6.is_unicast_link_local()
                || embeds_v4)
        }
    }
}

/// Special-purpose ranges a Pod may be given in some clusters (CGNAT's `100.64.0.0/10` as a
/// Pod range) but that an endpoint outside the cluster's Pods is never let through to: shared
/// address space, IETF protocol assignments, benchmarking, reserved and "this network" IPv4
/// ranges, 6to4 and Teredo (both carry an IPv4 address), and unique local IPv6 addresses'
/// well-known metadata prefix are refused for unmanaged endpoints
/// (`--source-allow-unmanaged-endpoints`).
pub fn unmanaged_address_allowed(ip: IpAddr) -> bool {
    const V4: [(u32, u32); 5] = [
        (0x6440_0000, 10), // 100.64.0.0/10
        (0xc000_0000, 24), // 192.0.0.0/24
        (0xc612_0000, 15), // 198.18.0.0/15
        (0xf000_0000, 4),  // 240.0.0.0/4
        (0x0000_0000, 8),  // 0.0.0.0/8
    ];
    if !address_allowed(ip) {
        return false;
    }
    match ip {
        IpAddr::V4(v4) => {
            let a = u32::from(v4);
            !V4.iter()
                .any(|&(net, len)| a >> (32 - len) == net >> (32 - len))
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            !(s[0] == 0x2002 || (s[0] == 0x2001 && s[1] == 0))
        }
    }
}

/// Whether `ip` is an address on the public internet: none of [`address_allowed`]'s or
/// [`unmanaged_address_allowed`]'s exceptions, and not private (`10.0.0.0/8`,
/// `172.16.0.0/12`, `192.168.0.0/16`, unique local `fc00::/7`, site-local `fec0::/10`), where a
/// cluster's Pods, Services, nodes and API server live.
pub fn is_public(ip: IpAddr) -> bool {
    if !unmanaged_address_allowed(ip) {
        return false;
    }
    match ip {
        IpAddr::V4(v4) => !v4.is_private(),
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            !((first & 0xfe00) == 0xfc00 || (first & 0xffc0) == 0xfec0)
        }
    }
}

/// The addresses a federation client may connect to: public ones, and those in the ranges a
/// directory's spec names (`upstreams[].allowAddresses`: an in-cluster registry, a test server
/// on loopback) — but never the Kubernetes API server's own addresses (`api_server`, public
/// or private, inside a named range or not) unless a range names that one address alone
/// (`/32`, `/128`).
#[derive(Clone, Debug, Default)]
pub struct Allowed {
    /// The ranges the spec names.
    pub ranges: Vec<ipnet::IpNet>,
    /// The API server's addresses ([`ApiServer::addresses`]).
    pub api_server: Arc<Vec<IpAddr>>,
}

impl Allowed {
    /// Whether a connection to `ip` is allowed.
    pub fn permits(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        if self.api_server.contains(&ip) {
            return self
                .ranges
                .iter()
                .any(|n| n.prefix_len() == n.max_prefix_len() && n.addr() == ip);
        }
        self.ranges.iter().any(|n| n.contains(&ip)) || is_public(ip)
    }

    /// Whether `ip` is the API server's (said so when a connection to it is refused).
    pub fn is_api_server(&self, ip: IpAddr) -> bool {
        self.api_server.contains(&ip.to_canonical())
    }
}

/// How long the API server's addresses are kept before they are read again.
const API_SERVER_TTL: std::time::Duration = std::time::Duration::from_secs(300);
/// How long after a failed read it is tried again.
const API_SERVER_RETRY: std::time::Duration = std::time::Duration::from_secs(30);

/// The Kubernetes API server's own addresses, read from the cluster and kept for a while: the
/// `default/kubernetes` Service's cluster IPs and the addresses of its EndpointSlices (where
/// the API server really listens, public in many managed clusters). A read that fails keeps
/// what was last read (and says so in the log); without a client (tests), none.
#[derive(Default)]
pub struct ApiServer {
    client: Option<kube::Client>,
    cached: std::sync::Mutex<Option<(std::time::Instant, Arc<Vec<IpAddr>>)>>,
}

impl ApiServer {
    /// Addresses read with `client`.
    pub fn new(client: kube::Client) -> ApiServer {
        ApiServer {
            client: Some(client),
            cached: std::sync::Mutex::default(),
        }
    }

    /// The addresses, read again when older than five minutes.
    pub async fn addresses(&self) -> Arc<Vec<IpAddr>> {
        let held = crate::locks::lock(&self.cached).clone();
        if let Some((at, set)) = &held {
            if at.elapsed() < API_SERVER_TTL {
                return set.clone();
            }
        }
        let Some(client) = &self.client else {
            return Arc::default();
        };
        let last = held.map(|h| h.1).unwrap_or_default();
        let (set, at) = match api_server_addresses(client).await {
            Ok(found) => (Arc::new(found), std::time::Instant::now()),
            Err(e) => {
                tracing::warn!(error = %e, "the API server's addresses not read; keeping the last read");
                // Kept as if read API_SERVER_TTL - API_SERVER_RETRY ago: tried again soon.
                let at = std::time::Instant::now()
                    .checked_sub(API_SERVER_TTL - API_SERVER_RETRY)
                    .unwrap_or_else(std::time::Instant::now);
                (last, at)
            }
        };
        *crate::locks::lock(&self.cached) = Some((at, set.clone()));
        set
    }
}

/// The API server's addresses as the cluster says: the `default/kubernetes` Service's cluster
/// IPs and its EndpointSlices' endpoint addresses, canonical.
pub async fn api_server_addresses(client: &kube::Client) -> Result<Vec<IpAddr>, kube::Error> {
    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    let parse = |a: &String| a.parse::<IpAddr>().ok().map(|ip| ip.to_canonical());
    let mut out = Vec::new();
    let service = kube::Api::<Service>::namespaced(client.clone(), "default")
        .get_opt("kubernetes")
        .await?;
    let spec = service.and_then(|s| s.spec).unwrap_or_default();
    out.extend(
        spec.cluster_ips
            .iter()
            .flatten()
            .chain(&spec.cluster_ip)
            .filter_map(parse),
    );
    let slices = kube::Api::<EndpointSlice>::namespaced(client.clone(), "default")
        .list(&kube::api::ListParams::default().labels("kubernetes.io/service-name=kubernetes"))
        .await?;
    out.extend(
        slices
            .items
            .iter()
            .flat_map(|s| &s.endpoints)
            .flat_map(|e| &e.addresses)
            .filter_map(parse),
    );
    out.sort();
    out.dedup();
    Ok(out)
}

/// A DNS resolver for reqwest that resolves with the system's resolver and keeps only the
/// addresses [`Allowed`] permits; a name resolving to none of them fails to connect, naming
/// what it resolved to.
pub struct Guard(pub Allowed);

impl reqwest::dns::Resolve for Guard {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allowed = self.0.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let kept: Vec<SocketAddr> = found
                .iter()
                .copied()
                .filter(|a| allowed.permits(a.ip()))
                .collect();
            if kept.is_empty() {
                let seen: Vec<String> = found
                    .iter()
                    .map(|a| match allowed.is_api_server(a.ip()) {
                        true => format!("{}: the Kubernetes API server's", a.ip()),
                        false => a.ip().to_string(),
                    })
                    .collect();
                return Err(Box::new(NotAllowed {
                    host,
                    addresses: seen,
                })
                    as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(kept.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// A name that resolves only to addresses the directory does not allow.
#[derive(Debug, thiserror::Error)]
#[error("{host} resolves to no address this directory may connect to ({}); name the range in allowAddresses to reach it", addresses.join(", "))]
pub struct NotAllowed {
    host: String,
    addresses: Vec<String>,
}

/// The resolver of a client allowing `allowed`.
pub fn guard(allowed: Allowed) -> Arc<Guard> {
    Arc::new(Guard(allowed))
}

/// An HTTP client built on its first use. Building one loads the system's CA certificates
/// (about a megabyte of heap each): an operator whose cards import nothing and whose
/// directories verify no OIDC token never needs those clients.
pub struct LazyClient {
    build: Box<dyn Fn() -> Result<reqwest::Client, reqwest::Error> + Send + Sync>,
    client: std::sync::OnceLock<reqwest::Client>,
}

impl LazyClient {
    /// A client `build` makes when first asked for.
    pub fn new(
        build: impl Fn() -> Result<reqwest::Client, reqwest::Error> + Send + Sync + 'static,
    ) -> Self {
        LazyClient {
            build: Box::new(build),
            client: std::sync::OnceLock::new(),
        }
    }

    /// The client (a clone shares its connections), built now if it is the first ask; a build
    /// that fails is tried again on the next.
    pub fn get(&self) -> Result<reqwest::Client, reqwest::Error> {
        if let Some(client) = self.client.get() {
            return Ok(client.clone());
        }
        let built = (self.build)()?;
        Ok(self.client.get_or_init(|| built).clone())
    }

    /// Whether the client was built.
    pub fn is_built(&self) -> bool {
        self.client.get().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_public_addresses_pass_unless_a_range_is_named() {
        let none = Allowed::default();
        let named = |r: &[&str], api: &[&str]| Allowed {
            ranges: r.iter().map(|c| c.parse().unwrap()).collect(),
            api_server: Arc::new(api.iter().map(|a| a.parse().unwrap()).collect()),
        };
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.100.100.200",
            "100.64.0.1",
            "fd00:ec2::254",
            "fc00::1",
            "::1",
            "::ffff:10.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "::ffff:0:a9fe:a9fe",
            "0.0.0.0",
        ] {
            assert!(!none.permits(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["203.0.113.5", "8.8.8.8", "2001:db8::1", "2606:4700::1111"] {
            assert!(none.permits(ip.parse().unwrap()), "{ip}");
        }
        let lo = named(&["127.0.0.0/8"], &[]);
        assert!(lo.permits("127.0.0.1".parse().unwrap()));
        assert!(lo.permits("::ffff:127.0.0.1".parse().unwrap()));
        assert!(!lo.permits("10.0.0.1".parse().unwrap()));
        // The API server's addresses: refused public, refused inside a named range, taken
        // only when named alone.
        let api = ["203.0.113.9", "10.96.0.1"];
        assert!(!named(&[], &api).permits("203.0.113.9".parse().unwrap()));
        assert!(named(&[], &api).permits("203.0.113.10".parse().unwrap()));
        assert!(!named(&["10.0.0.0/8"], &api).permits("10.96.0.1".parse().unwrap()));
        assert!(!named(&["10.0.0.0/8"], &api).permits("::ffff:10.96.0.1".parse().unwrap()));
        assert!(named(&["10.0.0.0/8"], &api).permits("10.96.0.2".parse().unwrap()));
        assert!(named(&["10.96.0.1/32"], &api).permits("10.96.0.1".parse().unwrap()));
    }

    #[test]
    fn a_lazy_client_is_built_on_its_first_use_once() {
        let builds = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = builds.clone();
        let lazy = LazyClient::new(move || {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            reqwest::Client::builder().build()
        });
        assert!(!lazy.is_built());
        assert_eq!(builds.load(std::sync::atomic::Ordering::SeqCst), 0);
        assert!(lazy.get().is_ok() && lazy.get().is_ok());
        assert!(lazy.is_built());
        assert_eq!(builds.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
