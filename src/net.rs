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
/// on loopback).
#[derive(Clone, Debug, Default)]
pub struct Allowed(pub Vec<ipnet::IpNet>);

impl Allowed {
    /// Whether a connection to `ip` is allowed.
    pub fn permits(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.0.iter().any(|n| n.contains(&ip)) || is_public(ip)
    }
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
                let seen: Vec<String> = found.iter().map(|a| a.ip().to_string()).collect();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_public_addresses_pass_unless_a_range_is_named() {
        let none = Allowed::default();
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
        let lo = Allowed(vec!["127.0.0.0/8".parse().unwrap()]);
        assert!(lo.permits("127.0.0.1".parse().unwrap()));
        assert!(lo.permits("::ffff:127.0.0.1".parse().unwrap()));
        assert!(!lo.permits("10.0.0.1".parse().unwrap()));
    }
}
