//! Which endpoint addresses an import may connect to: a tenant writes its Service's
//! EndpointSlices, and a slice can name any address (another namespace's Pod, a node, the API
//! server, the operator itself), so an address is fetched only when the cluster, not the
//! slice, says it is the tenant's.
//!
//! Data flow per look at a source: [`super::source::target`] lists the Service's ready endpoint
//! addresses, lowest first → [`Reach::facts`] asks the cluster about one of them (the Pod its
//! `targetRef` names; the addresses that are never fetched, cached for [`RESERVED_TTL`]; with
//! unmanaged endpoints allowed, the Pods of other namespaces holding it) → [`judge`] (pure)
//! decides → the first allowed address is fetched; when none is, the source reports
//! `EndpointNotAllowed` naming the first refused address and why, and no request is sent.
//!
//! By default an address is allowed only when the endpoint's `targetRef` is a Pod of the
//! card's namespace that holds the address in `status.podIPs` and does not use the host's
//! network. `--source-allow-unmanaged-endpoints` also allows addresses outside the cluster's
//! Pods (selector-less Services in front of VMs), never the API server's, a node's, a Service
//! range's, the operator's own, another namespace's Pod's, one inside a node's Pod range that
//! no Pod of the namespace holds, or a special-purpose address.

use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod, Service};
use k8s_openapi::api::networking::v1::ServiceCIDR;
use kube::api::{Api, ListParams};
use kube::ResourceExt;

use super::source::{address_allowed, is_object_name, unmanaged_address_allowed};

/// How long the set of never-fetched addresses is reused before it is read again.
pub const RESERVED_TTL: Duration = Duration::from_secs(30);

/// One ready endpoint address of the source's Service.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// The address.
    pub ip: IpAddr,
    /// The port the Service's port maps to there.
    pub port: i32,
    /// What the slice says the address belongs to (the slice's word, checked against the Pod).
    pub target_ref: Option<ObjectReference>,
}

/// Why an address is never fetched, whoever's endpoint names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reserved {
    /// The Kubernetes API server (the `default/kubernetes` Service and its endpoints).
    ApiServer,
    /// The operator's own addresses.
    Operator,
    /// A node's address.
    Node,
    /// Inside a Service IP range (a ClusterIP leads anywhere in the cluster).
    ServiceRange,
}

/// What the cluster says about a Pod a `targetRef` names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodFacts {
    /// Its name.
    pub name: String,
    /// Its addresses (`status.podIPs`).
    pub ips: Vec<IpAddr>,
    /// It uses the host's network (its addresses are the node's).
    pub host_network: bool,
    /// Its phase is `Succeeded` or `Failed`: its address may already be another Pod's.
    pub finished: bool,
}

/// What the cluster says about one address.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Facts {
    /// Why it is never fetched, when it is reserved.
    pub reserved: Option<Reserved>,
    /// The Pod the `targetRef` names, when the reference is to a Pod of the card's namespace
    /// and it exists.
    pub pod: Option<PodFacts>,
    /// A Pod of another namespace holds the address (asked only when unmanaged endpoints are
    /// allowed).
    pub other_namespace_pod: bool,
    /// The address is inside a node's Pod range (`spec.podCIDRs`): a Pod's, or the node's own
    /// on the Pod network (asked only when unmanaged endpoints are allowed).
    pub pod_range: bool,
    /// A Service of another namespace has the address as a load balancer or external IP
    /// (asked only when unmanaged endpoints are allowed).
    pub other_namespace_service: bool,
}

/// Why an address is not fetched: the text of `EndpointNotAllowed`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Loopback, link-local, unspecified, multicast or broadcast.
    Special,
    /// See [`Reserved`].
    Reserved(Reserved),
    /// The endpoint names no Pod (a selector-less Service's slice).
    NoPod,
    /// The `targetRef` is not a Pod of the card's namespace (kind/namespace as written).
    Elsewhere(String),
    /// The Pod named does not exist.
    PodMissing(String),
    /// The Pod named uses the host's network.
    HostNetwork(String),
    /// The Pod named does not hold the address.
    NotPodAddress(String),
    /// The Pod named has finished (its address may be another Pod's now).
    PodFinished(String),
    /// A Pod of another namespace holds it.
    OtherNamespacePod,
    /// Inside a node's Pod range, and no Pod of this namespace holds it.
    PodRange,
    /// A load balancer or external IP of a Service of another namespace.
    OtherNamespaceService,
    /// The `targetRef` names a Pod by a name no Pod can have.
    BadName,
    /// The cluster could not be asked (the address is refused until it can).
    Unchecked(String),
}

/// A question the cluster could not answer while an address was checked (the address is
/// refused until it can be).
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
pub struct Unanswered {
    /// What was asked ("reading Pod t/agent").
    what: String,
    /// The API server's answer.
    source: kube::Error,
}

impl Unanswered {
    fn new(what: String, source: kube::Error) -> Unanswered {
        Unanswered { what, source }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Special => {
                f.write_str("a loopback, link-local or other special-purpose address")
            }
            Refusal::Reserved(Reserved::ApiServer) => {
                f.write_str("the Kubernetes API server's address")
            }
            Refusal::Reserved(Reserved::Operator) => f.write_str("the operator's own address"),
            Refusal::Reserved(Reserved::Node) => f.write_str("a node's address"),
            Refusal::Reserved(Reserved::ServiceRange) => f.write_str("inside a Service IP range"),
            Refusal::NoPod => f.write_str("the endpoint names no Pod (targetRef)"),
            Refusal::Elsewhere(what) => {
                write!(f, "its targetRef is {what}, not a Pod of this namespace")
            }
            Refusal::PodMissing(name) => {
                write!(f, "its targetRef names Pod {name}, which does not exist")
            }
            Refusal::HostNetwork(name) => write!(f, "Pod {name} uses the host's network"),
            Refusal::NotPodAddress(name) => {
                write!(f, "not an address of Pod {name} (status.podIPs)")
            }
            Refusal::PodFinished(name) => write!(
                f,
                "Pod {name} has finished (Succeeded or Failed): its address may be another Pod's"
            ),
            Refusal::OtherNamespacePod => f.write_str("the address of a Pod of another namespace"),
            Refusal::PodRange => {
                f.write_str("inside a node's Pod range, and no Pod of this namespace holds it")
            }
            Refusal::OtherNamespaceService => {
                f.write_str("a load balancer or external IP of a Service of another namespace")
            }
            Refusal::BadName => f.write_str("its targetRef names no valid Pod name"),
            Refusal::Unchecked(why) => write!(f, "it could not be checked ({why})"),
        }
    }
}

impl Refusal {
    /// Whether `--source-allow-unmanaged-endpoints` would have allowed the address.
    fn unmanaged(&self) -> bool {
        matches!(
            self,
            Refusal::NoPod
                | Refusal::Elsewhere(_)
                | Refusal::PodMissing(_)
                | Refusal::NotPodAddress(_)
                | Refusal::PodFinished(_)
        )
    }
}

/// Whether the operator may fetch from `c`, an endpoint of a Service of namespace `ns`, given
/// what the cluster says about it (pure; see the module doc for the rules).
pub fn judge(ns: &str, c: &Candidate, facts: &Facts, allow_unmanaged: bool) -> Result<(), Refusal> {
    if !address_allowed(c.ip) {
        return Err(Refusal::Special);
    }
    if let Some(r) = facts.reserved {
        return Err(Refusal::Reserved(r));
    }
    let owned = pod_holds(ns, c, facts.pod.as_ref());
    match owned {
        Ok(()) => Ok(()),
        Err(e) if !allow_unmanaged || !e.unmanaged() => Err(e),
        Err(_) if !unmanaged_address_allowed(c.ip) => Err(Refusal::Special),
        Err(_) if facts.other_namespace_pod => Err(Refusal::OtherNamespacePod),
        Err(_) if facts.other_namespace_service => Err(Refusal::OtherNamespaceService),
        Err(_) if facts.pod_range => Err(Refusal::PodRange),
        Err(_) => Ok(()),
    }
}

/// Whether `c`'s `targetRef` names a Pod of `ns` that holds the address.
fn pod_holds(ns: &str, c: &Candidate, pod: Option<&PodFacts>) -> Result<(), Refusal> {
    let Some(r) = &c.target_ref else {
        return Err(Refusal::NoPod);
    };
    let kind = r.kind.as_deref().unwrap_or_default();
    let ref_ns = r.namespace.as_deref().unwrap_or(ns);
    if kind != "Pod" || ref_ns != ns {
        return Err(Refusal::Elsewhere(format!(
            "{} {}/{}",
            if kind.is_empty() { "(no kind)" } else { kind },
            ref_ns,
            r.name.as_deref().unwrap_or_default()
        )));
    }
    let name = r.name.clone().unwrap_or_default();
    if !is_object_name(&name) {
        return Err(Refusal::BadName);
    }
    let Some(pod) = pod else {
        return Err(Refusal::PodMissing(name));
    };
    if pod.host_network {
        return Err(Refusal::HostNetwork(name));
    }
    if pod.finished {
        return Err(Refusal::PodFinished(name));
    }
    if !pod.ips.contains(&c.ip) {
        return Err(Refusal::NotPodAddress(name));
    }
    Ok(())
}

/// The addresses never fetched, as read from the cluster at one time.
#[derive(Clone, Debug, Default)]
pub struct ReservedSet {
    api_server: BTreeSet<IpAddr>,
    nodes: BTreeSet<IpAddr>,
    service_ranges: Vec<ipnet::IpNet>,
    pod_ranges: Vec<ipnet::IpNet>,
    /// Load balancer and external IPs of Services, with their namespaces.
    service_ips: std::collections::BTreeMap<IpAddr, BTreeSet<String>>,
}

impl ReservedSet {
    /// Why `ip` is reserved (the operator's own addresses are read each time: they are local).
    fn of(&self, ip: IpAddr, own: &BTreeSet<IpAddr>) -> Option<Reserved> {
        if own.contains(&ip) {
            Some(Reserved::Operator)
        } else if self.api_server.contains(&ip) {
            Some(Reserved::ApiServer)
        } else if self.nodes.contains(&ip) {
            Some(Reserved::Node)
        } else if self.service_ranges.iter().any(|n| n.contains(&ip)) {
            Some(Reserved::ServiceRange)
        } else {
            None
        }
    }

    /// Whether `ip` is inside a node's Pod range.
    fn in_pod_range(&self, ip: IpAddr) -> bool {
        self.pod_ranges.iter().any(|n| n.contains(&ip))
    }

    /// Whether `ip` is a load balancer or external IP of a Service of a namespace other than
    /// `ns`.
    fn service_ip_elsewhere(&self, ip: IpAddr, ns: &str) -> bool {
        self.service_ips
            .get(&ip)
            .is_some_and(|owners| owners.iter().any(|o| o != ns))
    }
}

/// The addresses of this process's network interfaces (in a Pod: its Pod IPs).
fn own_addresses() -> BTreeSet<IpAddr> {
    if_addrs::get_if_addrs()
        .map(|ifs| ifs.into_iter().map(|i| i.ip()).collect())
        .unwrap_or_default()
}

/// Asks the cluster about endpoint addresses (see the module doc).
pub struct Reach {
    client: kube::Client,
    allow_unmanaged: bool,
    reserved: Mutex<Option<(Instant, Arc<ReservedSet>)>>,
}

impl Reach {
    /// Checking addresses with `client`; `allow_unmanaged` from
    /// `--source-allow-unmanaged-endpoints`.
    pub fn new(client: kube::Client, allow_unmanaged: bool) -> Reach {
        Reach {
            client,
            allow_unmanaged,
            reserved: Mutex::new(None),
        }
    }

    /// Whether the operator may fetch from `c`, an endpoint of a Service of `ns`.
    pub async fn check(&self, ns: &str, c: &Candidate) -> Result<(), Refusal> {
        if !address_allowed(c.ip) {
            return Err(Refusal::Special);
        }
        let facts = self
            .facts(ns, c)
            .await
            .map_err(|e| Refusal::Unchecked(e.to_string()))?;
        judge(ns, c, &facts, self.allow_unmanaged)
    }

    /// The hint added when addresses were refused that the opt-in would allow.
    pub fn hint(&self, refusal: &Refusal) -> &'static str {
        if !self.allow_unmanaged && refusal.unmanaged() {
            "; only addresses of this namespace's Pods are fetched (the operator's \
             --source-allow-unmanaged-endpoints allows selector-less Services)"
        } else {
            ""
        }
    }

    /// What the cluster says about `c`.
    async fn facts(&self, ns: &str, c: &Candidate) -> Result<Facts, Unanswered> {
        let reserved = self.reserved_set().await?;
        let mut facts = Facts {
            reserved: reserved.of(c.ip, &own_addresses()),
            ..Facts::default()
        };
        if facts.reserved.is_some() {
            return Ok(facts);
        }
        facts.pod = self.named_pod(ns, c).await?;
        if self.allow_unmanaged && pod_holds(ns, c, facts.pod.as_ref()).is_err() {
            facts.other_namespace_pod = self.held_elsewhere(ns, c.ip).await?;
            facts.pod_range = reserved.in_pod_range(c.ip) && !self.held_here(ns, c.ip).await?;
            facts.other_namespace_service = reserved.service_ip_elsewhere(c.ip, ns);
        }
        Ok(facts)
    }

    /// The Pod of `ns` that `c`'s `targetRef` names, when it names one there.
    async fn named_pod(&self, ns: &str, c: &Candidate) -> Result<Option<PodFacts>, Unanswered> {
        let Some(r) = &c.target_ref else {
            return Ok(None);
        };
        let name = r.name.clone().unwrap_or_default();
        let here = r.namespace.as_deref().is_none_or(|n| n == ns);
        // A name no Pod can have never goes into the API path.
        if r.kind.as_deref() != Some("Pod") || !here || !is_object_name(&name) {
            return Ok(None);
        }
        let pod = Api::<Pod>::namespaced(self.client.clone(), ns)
            .get_opt(&name)
            .await
            .map_err(|e| Unanswered::new(format!("reading Pod {ns}/{name}"), e))?;
        Ok(pod.map(|p| pod_facts(&p)))
    }

    /// Whether a Pod of a namespace other than `ns` holds `ip`.
    async fn held_elsewhere(&self, ns: &str, ip: IpAddr) -> Result<bool, Unanswered> {
        let pods = Api::<Pod>::all(self.client.clone())
            .list_metadata(&ListParams::default().fields(&format!("status.podIP={ip}")))
            .await
            .map_err(|e| Unanswered::new(format!("listing the Pods holding {ip}"), e))?;
        Ok(pods
            .items
            .iter()
            .any(|p| p.metadata.namespace.as_deref() != Some(ns)))
    }

    /// Whether a Pod of `ns` holds `ip`.
    async fn held_here(&self, ns: &str, ip: IpAddr) -> Result<bool, Unanswered> {
        let pods = Api::<Pod>::namespaced(self.client.clone(), ns)
            .list_metadata(&ListParams::default().fields(&format!("status.podIP={ip}")))
            .await
            .map_err(|e| Unanswered::new(format!("listing the Pods of {ns} holding {ip}"), e))?;
        Ok(!pods.items.is_empty())
    }

    /// The reserved addresses, read again after [`RESERVED_TTL`].
    async fn reserved_set(&self) -> Result<Arc<ReservedSet>, Unanswered> {
        if let Some((at, set)) = crate::locks::lock(&self.reserved).as_ref() {
            if at.elapsed() < RESERVED_TTL {
                return Ok(set.clone());
            }
        }
        let set = Arc::new(self.read_reserved().await?);
        *crate::locks::lock(&self.reserved) = Some((Instant::now(), set.clone()));
        Ok(set)
    }

    /// Read the API server's addresses; with unmanaged endpoints allowed, also the nodes' and
    /// the Service ranges (a Pod address is never in either, so only the opt-in needs them).
    async fn read_reserved(&self) -> Result<ReservedSet, Unanswered> {
        let mut set = ReservedSet::default();
        set.api_server.extend(
            crate::net::api_server_addresses(&self.client)
                .await
                .map_err(|e| Unanswered::new("reading the API server's addresses".into(), e))?,
        );
        if !self.allow_unmanaged {
            return Ok(set);
        }
        let nodes = Api::<Node>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .map_err(|e| Unanswered::new("listing the nodes".into(), e))?;
        set.nodes.extend(
            nodes
                .items
                .iter()
                .filter_map(|n| n.status.as_ref()?.addresses.as_ref())
                .flatten()
                .filter_map(|a| a.address.parse::<IpAddr>().ok().map(|ip| ip.to_canonical())),
        );
        set.pod_ranges.extend(
            nodes
                .items
                .iter()
                .filter_map(|n| n.spec.as_ref())
                .flat_map(|s| s.pod_cidrs.iter().flatten().chain(&s.pod_cidr))
                .filter_map(|c| c.parse::<ipnet::IpNet>().ok()),
        );
        let services = Api::<Service>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .map_err(|e| Unanswered::new("listing the Services".into(), e))?;
        for svc in &services.items {
            let ns = svc.namespace().unwrap_or_default();
            let external = svc
                .spec
                .as_ref()
                .and_then(|s| s.external_ips.as_ref())
                .into_iter()
                .flatten();
            let balanced = svc
                .status
                .as_ref()
                .and_then(|s| s.load_balancer.as_ref()?.ingress.as_ref())
                .into_iter()
                .flatten()
                .filter_map(|i| i.ip.as_ref());
            for ip in external.chain(balanced) {
                if let Ok(ip) = ip.parse::<IpAddr>() {
                    set.service_ips
                        .entry(ip.to_canonical())
                        .or_default()
                        .insert(ns.clone());
                }
            }
        }
        let ranges = Api::<ServiceCIDR>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .map_err(|e| {
                Unanswered::new(
                    "listing the ServiceCIDRs (networking.k8s.io/v1, Kubernetes 1.33+)".into(),
                    e,
                )
            })?;
        set.service_ranges.extend(
            ranges
                .items
                .iter()
                .filter_map(|r| r.spec.as_ref()?.cidrs.as_ref())
                .flatten()
                .filter_map(|c| c.parse::<ipnet::IpNet>().ok()),
        );
        Ok(set)
    }
}

/// The facts of `pod` an address check needs.
fn pod_facts(pod: &Pod) -> PodFacts {
    PodFacts {
        name: pod.name_any(),
        ips: pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ips.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|p| p.ip.parse::<IpAddr>().ok().map(|ip| ip.to_canonical()))
            .collect(),
        finished: matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        ),
        host_network: pod
            .spec
            .as_ref()
            .and_then(|s| s.host_network)
            .unwrap_or(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(ip: &str, target: Option<(&str, Option<&str>, &str)>) -> Candidate {
        Candidate {
            ip: ip.parse().unwrap(),
            port: 8080,
            target_ref: target.map(|(kind, ns, name)| ObjectReference {
                kind: Some(kind.into()),
                namespace: ns.map(str::to_string),
                name: Some(name.into()),
                ..ObjectReference::default()
            }),
        }
    }

    fn pod(name: &str, ips: &[&str], host_network: bool) -> Option<PodFacts> {
        Some(PodFacts {
            name: name.into(),
            ips: ips.iter().map(|i| i.parse().unwrap()).collect(),
            host_network,
            finished: false,
        })
    }

    #[test]
    fn only_the_addresses_of_the_namespaces_own_pods_pass_by_default() {
        let agent = Some(("Pod", Some("team"), "agent"));
        let facts = |pod: Option<PodFacts>| Facts {
            pod,
            ..Facts::default()
        };
        let cases: Vec<(Candidate, Facts, Result<(), Refusal>)> = vec![
            (
                candidate("10.1.0.5", agent),
                facts(pod("agent", &["10.1.0.5"], false)),
                Ok(()),
            ),
            // The namespace may be left out of a targetRef.
            (
                candidate("10.1.0.5", Some(("Pod", None, "agent"))),
                facts(pod("agent", &["10.1.0.5"], false)),
                Ok(()),
            ),
            (
                candidate("10.1.0.9", agent),
                facts(pod("agent", &["10.1.0.5"], false)),
                Err(Refusal::NotPodAddress("agent".into())),
            ),
            (
                candidate("10.1.0.5", agent),
                facts(None),
                Err(Refusal::PodMissing("agent".into())),
            ),
            (
                candidate("10.0.0.1", agent),
                facts(pod("agent", &["10.0.0.1"], true)),
                Err(Refusal::HostNetwork("agent".into())),
            ),
            (
                candidate("10.1.0.5", None),
                facts(None),
                Err(Refusal::NoPod),
            ),
            // A finished Pod's address may have been handed to another Pod already.
            (
                candidate("10.1.0.5", agent),
                facts(pod("agent", &["10.1.0.5"], false).map(|p| PodFacts {
                    finished: true,
                    ..p
                })),
                Err(Refusal::PodFinished("agent".into())),
            ),
            (
                candidate("10.1.0.7", Some(("Pod", Some("other"), "victim"))),
                facts(None),
                Err(Refusal::Elsewhere("Pod other/victim".into())),
            ),
            (
                candidate("10.1.0.7", Some(("Node", None, "n1"))),
                facts(None),
                Err(Refusal::Elsewhere("Node team/n1".into())),
            ),
            (
                candidate("127.0.0.1", agent),
                facts(pod("agent", &["127.0.0.1"], false)),
                Err(Refusal::Special),
            ),
            (
                candidate("169.254.169.254", None),
                facts(None),
                Err(Refusal::Special),
            ),
            // A Pod of the namespace holding a reserved address (the operator's own Pod, when
            // the card is in the operator's namespace) is still refused.
            (
                candidate("10.1.0.5", agent),
                Facts {
                    reserved: Some(Reserved::Operator),
                    ..facts(pod("agent", &["10.1.0.5"], false))
                },
                Err(Refusal::Reserved(Reserved::Operator)),
            ),
        ];
        for (c, f, want) in cases {
            assert_eq!(judge("team", &c, &f, false), want, "{c:?} {f:?}");
        }
    }

    #[test]
    fn the_opt_in_allows_addresses_outside_the_clusters_pods_and_nothing_reserved() {
        let none = Facts::default();
        assert_eq!(
            judge("team", &candidate("192.0.2.20", None), &none, true),
            Ok(())
        );
        let elsewhere = Facts {
            other_namespace_pod: true,
            ..Facts::default()
        };
        assert_eq!(
            judge(
                "team",
                &candidate("10.1.0.7", Some(("Pod", Some("other"), "victim"))),
                &elsewhere,
                true
            ),
            Err(Refusal::OtherNamespacePod)
        );
        assert_eq!(
            judge("team", &candidate("10.1.0.7", None), &elsewhere, true),
            Err(Refusal::OtherNamespacePod)
        );
        for r in [
            Reserved::ApiServer,
            Reserved::Operator,
            Reserved::Node,
            Reserved::ServiceRange,
        ] {
            let f = Facts {
                reserved: Some(r),
                ..Facts::default()
            };
            assert_eq!(
                judge("team", &candidate("10.96.0.1", None), &f, true),
                Err(Refusal::Reserved(r))
            );
        }
        // Never a host-network Pod (the node's address), opt-in or not.
        let host = Facts {
            pod: pod("agent", &["10.0.0.1"], true),
            ..Facts::default()
        };
        assert_eq!(
            judge(
                "team",
                &candidate("10.0.0.1", Some(("Pod", None, "agent"))),
                &host,
                true
            ),
            Err(Refusal::HostNetwork("agent".into()))
        );
        assert_eq!(
            judge("team", &candidate("::1", None), &none, true),
            Err(Refusal::Special)
        );
        // Inside the Pod network but no Pod of the namespace (the node's bridge, a Pod gone).
        let range = Facts {
            pod_range: true,
            ..Facts::default()
        };
        assert_eq!(
            judge("team", &candidate("10.244.0.1", None), &range, true),
            Err(Refusal::PodRange)
        );
        // Metadata and special ranges, and addresses that stand for IPv4 ones: never, with the
        // opt-in as without.
        for ip in [
            "100.100.100.200",
            "fd00:ec2::254",
            "100.64.0.1",
            "100.127.255.254",
            "192.0.0.170",
            "198.18.0.1",
            "240.0.0.1",
            "0.1.2.3",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b:1::a00:1",
            "::a9fe:a9fe",
            "::ffff:169.254.169.254",
            "::ffff:10.0.0.1",
            "2002:a9fe:a9fe::1",
            "2001:0:4136:e378::1",
        ] {
            assert_eq!(
                judge("team", &candidate(ip, None), &none, true),
                Err(Refusal::Special),
                "{ip}"
            );
        }
        // Another namespace's load balancer or external IP.
        let lb = Facts {
            other_namespace_service: true,
            ..Facts::default()
        };
        assert_eq!(
            judge("team", &candidate("203.0.113.9", None), &lb, true),
            Err(Refusal::OtherNamespaceService)
        );
    }

    #[test]
    fn a_target_ref_name_no_pod_can_have_is_refused_and_never_asked_about() {
        let f = Facts {
            pod: pod("agent", &["10.0.0.5"], false),
            ..Facts::default()
        };
        for name in [
            "../../secrets/x",
            "a/b",
            "a?watch=1",
            "A",
            "-a",
            "a..b",
            "",
            "%2e%2e",
        ] {
            for allow in [false, true] {
                assert_eq!(
                    judge(
                        "team",
                        &candidate("10.0.0.5", Some(("Pod", None, name))),
                        &f,
                        allow
                    ),
                    Err(Refusal::BadName),
                    "{name:?}"
                );
            }
        }
        assert!(super::is_object_name("agent-0.web"));
    }

    #[test]
    fn a_services_load_balancer_ip_is_another_namespaces_only_when_it_is() {
        let mut set = ReservedSet::default();
        set.service_ips
            .entry("203.0.113.9".parse().unwrap())
            .or_default()
            .insert("shop".to_string());
        let ip: IpAddr = "203.0.113.9".parse().unwrap();
        assert!(set.service_ip_elsewhere(ip, "team"));
        assert!(!set.service_ip_elsewhere(ip, "shop"));
        assert!(!set.service_ip_elsewhere("203.0.113.10".parse().unwrap(), "team"));
    }

    #[test]
    fn reserved_sets_name_what_an_address_is() {
        let set = ReservedSet {
            api_server: ["10.96.0.1".parse().unwrap(), "172.18.0.2".parse().unwrap()].into(),
            nodes: ["172.18.0.3".parse().unwrap()].into(),
            service_ranges: vec!["10.96.0.0/16".parse().unwrap()],
            pod_ranges: vec!["10.244.0.0/24".parse().unwrap()],
            ..ReservedSet::default()
        };
        assert!(set.in_pod_range("10.244.0.1".parse().unwrap()));
        assert!(!set.in_pod_range("10.245.0.1".parse().unwrap()));
        let own: BTreeSet<IpAddr> = ["10.1.0.9".parse().unwrap()].into();
        let of = |ip: &str| set.of(ip.parse().unwrap(), &own);
        assert_eq!(of("172.18.0.2"), Some(Reserved::ApiServer));
        assert_eq!(of("10.96.0.1"), Some(Reserved::ApiServer));
        assert_eq!(of("10.96.4.4"), Some(Reserved::ServiceRange));
        assert_eq!(of("172.18.0.3"), Some(Reserved::Node));
        assert_eq!(of("10.1.0.9"), Some(Reserved::Operator));
        assert_eq!(of("10.1.0.10"), None);
    }
}
