//! What one discovery should write, pure: from what the watches hold of the cluster
//! ([`Cluster`]: Services, Namespaces, workloads, kagent Agents, the AgentCards already there)
//! and every discovery's spec, the cards this discovery writes, the ones it wrote that are no
//! longer wanted, and the agents it leaves alone (and why).
//!
//! The rules, in order:
//! 1. found, by the discovery's sources, in a namespace it selects, never with the label
//!    `agentcard.dev/discover: "false"` on the namespace, the Service, the workload or the
//!    Agent:
//!    - `KagentAgents`: a kagent `Agent`, through the Service of its name;
//!    - `KagentiWorkloads`: a Deployment or StatefulSet labelled `kagenti.io/type: agent` and
//!      `protocol.kagenti.io/a2a`, through each Service of its namespace selecting its Pods;
//!    - `Services`: a port whose `appProtocol` is `a2a` or `kgateway.dev/a2a`, or the label
//!      `agentcard.dev/discover: "true"`.
//!
//!    An agent two sources find is one card, by the first source in that order (the one that
//!    tells most about it);
//! 2. one card per agent: when several discoveries find it, the first by name writes it;
//! 3. never twice: a Service that an AgentCard not written by discovery already imports or
//!    fronts (`spec.source`, `spec.backend`) gets nothing;
//! 4. never over a person's work: a card of the agent's name that discovery did not write is
//!    left alone (`NameTaken`); a discovered card someone claimed is theirs (counted, never
//!    written, never deleted).
//!
//! What a card imports is what the agent serves: nothing of a kagent Agent's prompt
//! (`systemMessage`) or tools is copied, only what kagent itself puts on the agent's card.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Namespace, Service};
use kube::api::DynamicObject;
use kube::ResourceExt;
use serde_json::Value;

use crate::a2a::card::{AgentProvider, AgentSkill};
use crate::crd::agentdiscovery::{AgentDiscovery, DiscoverySource, Found, Skipped};
use crate::crd::{AgentCard, Defaults};
use crate::directory::select::matches;

/// Label that opts a Service, workload, Agent or namespace in (`"true"`, Services only) or
/// out (`"false"`).
pub const LABEL_DISCOVER: &str = "agentcard.dev/discover";
pub use crate::contract::{DISCOVERY_MANAGER, LABEL_DISCOVERED_BY};
/// Label by which a tenant takes a discovered card over.
pub const LABEL_CLAIMED: &str = "agentcard.dev/claimed";
/// `appProtocol` values that mark an A2A port.
pub const A2A_PROTOCOLS: [&str; 2] = ["a2a", "kgateway.dev/a2a"];
/// The label (and its value) kagenti puts on an agent's workload.
pub const KAGENTI_TYPE: (&str, &str) = ("kagenti.io/type", "agent");
/// The label kagenti puts on a workload that speaks A2A.
pub const KAGENTI_A2A: &str = "protocol.kagenti.io/a2a";
/// kagent's Agent resource: group, stored version, kind, plural.
pub const KAGENT_AGENT: (&str, &str, &str, &str) = ("kagent.dev", "v1alpha2", "Agent", "agents");

/// A Deployment or StatefulSet, as much of it as discovery reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Workload {
    /// `Deployment` or `StatefulSet`.
    pub kind: &'static str,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its own labels.
    pub labels: BTreeMap<String, String>,
    /// Its Pod template's labels.
    pub pod_labels: BTreeMap<String, String>,
}

impl Workload {
    /// Whether kagenti labels it an A2A agent (on the workload or its Pod template).
    pub fn is_kagenti_a2a_agent(&self) -> bool {
        [&self.labels, &self.pod_labels].iter().any(|l| {
            l.get(KAGENTI_TYPE.0).map(String::as_str) == Some(KAGENTI_TYPE.1)
                && l.get(KAGENTI_A2A).is_some_and(|v| v != "false")
        })
    }
}

/// A kagent `Agent`, as much of it as discovery reads.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KagentAgent {
    /// Its namespace.
    pub namespace: String,
    /// Its name (also its Service's).
    pub name: String,
    /// Its uid (the card's owner).
    pub uid: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// What it declares about itself, for the fields its served card leaves empty.
    pub defaults: Defaults,
}

impl KagentAgent {
    /// Read an `agents.kagent.dev` object: what its spec says of the agent's card (never its
    /// prompt). `None` without a name, namespace or uid.
    pub fn from_object(o: &DynamicObject) -> Option<KagentAgent> {
        let spec = o.data.get("spec").cloned().unwrap_or(Value::Null);
        let text = |v: &Value| {
            v.as_str()
                .map(str::to_string)
                .filter(|s| !s.trim().is_empty())
        };
        let provider = spec.get("provider").and_then(|p| {
            let organization = text(&p["organization"])?;
            Some(AgentProvider {
                organization,
                url: text(&p["url"]).unwrap_or_default(),
            })
        });
        let skills = spec
            .pointer("/declarative/a2aConfig/skills")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|k| {
                let name = text(&k["name"])?;
                let strings = |v: &Value| -> Vec<String> {
                    v.as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(text)
                        .collect()
                };
                Some(AgentSkill {
                    id: text(&k["id"]).unwrap_or_else(|| slug(&name)),
                    description: text(&k["description"]).unwrap_or_else(|| name.clone()),
                    name,
                    tags: strings(&k["tags"]),
                    examples: strings(&k["examples"]),
                    input_modes: strings(&k["inputModes"]),
                    output_modes: strings(&k["outputModes"]),
                    security_requirements: Vec::new(),
                })
            })
            .collect();
        Some(KagentAgent {
            namespace: o.metadata.namespace.clone()?,
            name: o.metadata.name.clone()?,
            uid: o.metadata.uid.clone()?,
            labels: o.metadata.labels.clone().unwrap_or_default(),
            defaults: Defaults {
                description: text(&spec["description"]),
                version: text(&spec["version"]),
                provider,
                documentation_url: text(&spec["documentationUrl"]),
                icon_url: text(&spec["iconUrl"]),
                skills,
            },
        })
    }
}

/// A skill id from its name: lower case, runs of anything but letters and digits as one `-`.
fn slug(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_string()
}

/// What discovery reads of the cluster, borrowed from the watches.
pub struct Cluster<'a> {
    /// Every Service.
    pub services: &'a [&'a Service],
    /// Every Namespace, by name.
    pub namespaces: &'a BTreeMap<String, &'a Namespace>,
    /// Every AgentCard.
    pub cards: &'a [&'a AgentCard],
    /// Every Deployment and StatefulSet.
    pub workloads: &'a [Workload],
    /// Every kagent Agent (none while kagent's CRD is not installed).
    pub agents: &'a [KagentAgent],
}

/// The object a discovered card goes with (its owner reference).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    /// `v1`, or kagent's `kagent.dev/v1alpha2`.
    pub api_version: String,
    /// `Service` or `Agent`.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// Its uid.
    pub uid: String,
}

/// A card this discovery writes.
#[derive(Clone, Debug, PartialEq)]
pub struct Wanted {
    /// The card's namespace (the agent's).
    pub namespace: String,
    /// The card's name (the Service's, or the kagent Agent's).
    pub name: String,
    /// The source that found it.
    pub source: DiscoverySource,
    /// What the card goes with.
    pub owner: Owner,
    /// The Service the card is imported from.
    pub service: String,
    /// The port the card is imported from.
    pub port: i32,
    /// The public host, from the template.
    pub host: String,
    /// What fills the fields the served card leaves empty (kagent).
    pub defaults: Option<Defaults>,
}

/// What one discovery should do now.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    /// Agents found, per source (before the rules of who writes).
    pub found: Found,
    /// Cards to write.
    pub wanted: Vec<Wanted>,
    /// Cards it wrote earlier that no rule wants any more, unclaimed: `(namespace, name)`.
    pub stale: Vec<(String, String)>,
    /// Its cards someone claimed: `(namespace, name)`.
    pub claimed: Vec<(String, String)>,
    /// Agents found and left alone.
    pub skipped: Vec<Skipped>,
}

/// Whether someone took discovered card `card` over: the label, or an edit of the card's spec
/// or of the discovery label by a field manager other than discovery's and the operator's
/// ([`crate::store::card_editor`]; the stores keep that much of a discovered card's
/// `managedFields`).
pub fn claimed(card: &AgentCard) -> bool {
    card.labels().get(LABEL_CLAIMED).map(String::as_str) == Some("true")
        || crate::store::card_editor(&card.metadata).is_some()
}

/// Where a card came from, for its status and `kubectl get agentcards`: `Declared`,
/// `Discovered` or `Claimed`.
pub fn origin(card: &AgentCard) -> &'static str {
    if !card.labels().contains_key(LABEL_DISCOVERED_BY) {
        "Declared"
    } else if claimed(card) {
        "Claimed"
    } else {
        "Discovered"
    }
}

fn opted_out(labels: &BTreeMap<String, String>) -> bool {
    labels.get(LABEL_DISCOVER).map(String::as_str) == Some("false")
}

fn is_a2a_port(p: &k8s_openapi::api::core::v1::ServicePort) -> bool {
    p.app_protocol
        .as_deref()
        .is_some_and(|a| A2A_PROTOCOLS.contains(&a))
}

/// The port a Service found by the `Services` source is imported from: the first A2A port,
/// else (a Service opted in by label) the one named `a2a`, else the only one; `None` for an
/// ExternalName Service or one that is not found.
pub fn a2a_port(service: &Service) -> Option<i32> {
    let spec = service.spec.as_ref()?;
    if spec.type_.as_deref() == Some("ExternalName") {
        return None;
    }
    let ports = spec.ports.as_deref().unwrap_or_default();
    if let Some(p) = ports.iter().find(|p| is_a2a_port(p)) {
        return Some(p.port);
    }
    if service.labels().get(LABEL_DISCOVER).map(String::as_str) != Some("true") {
        return None;
    }
    ports
        .iter()
        .find(|p| p.name.as_deref() == Some("a2a"))
        .or(if ports.len() == 1 {
            ports.first()
        } else {
            None
        })
        .map(|p| p.port)
}

/// The port of a Service fronting a known agent (kagent, kagenti): the first A2A port, else
/// the one named `a2a`, else `http`, else the only one.
pub fn agent_port(service: &Service) -> Option<i32> {
    let spec = service.spec.as_ref()?;
    if spec.type_.as_deref() == Some("ExternalName") {
        return None;
    }
    let ports = spec.ports.as_deref().unwrap_or_default();
    let named = |n: &str| ports.iter().find(|p| p.name.as_deref() == Some(n));
    ports
        .iter()
        .find(|p| is_a2a_port(p))
        .or_else(|| named("a2a"))
        .or_else(|| named("http"))
        .or(if ports.len() == 1 {
            ports.first()
        } else {
            None
        })
        .map(|p| p.port)
}

/// `template` with `{name}` and `{namespace}` filled in, when that is a DNS name.
pub fn host(template: &str, name: &str, namespace: &str) -> Option<String> {
    let host = template
        .replace("{name}", name)
        .replace("{namespace}", namespace)
        .to_ascii_lowercase();
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    (host.len() <= 253 && host.split('.').count() >= 2 && host.split('.').all(label_ok))
        .then_some(host)
}

/// Whether discovery `d` searches `namespace`.
fn searches(d: &AgentDiscovery, namespace: &Namespace) -> bool {
    !opted_out(namespace.labels())
        && matches(d.spec.namespace_selector.as_ref(), namespace.labels())
}

/// An agent one discovery finds, before the rules of who writes it.
struct Candidate {
    source: DiscoverySource,
    owner: Owner,
    /// The Service and port imported from; `None`: found, but nothing to import from.
    service: Option<(String, i32)>,
    defaults: Option<Defaults>,
}

fn service_owner(svc: &Service) -> Owner {
    Owner {
        api_version: "v1".into(),
        kind: "Service".into(),
        name: svc.name_any(),
        uid: svc.uid().unwrap_or_default(),
    }
}

/// The agents one discovery finds, by `(namespace, card name)`.
type Candidates = BTreeMap<(String, String), Candidate>;

/// Every agent discovery `d` finds, by `(namespace, card name)`, each once (kagent, then
/// kagenti, then Services).
fn candidates(d: &AgentDiscovery, c: &Cluster<'_>) -> Candidates {
    let mut out = Candidates::new();
    let searched = |ns: &str| c.namespaces.get(ns).is_some_and(|n| searches(d, n));
    let by_name: BTreeMap<(String, String), &Service> = c
        .services
        .iter()
        .map(|s| ((s.namespace().unwrap_or_default(), s.name_any()), *s))
        .collect();
    let uses = |s: DiscoverySource| d.spec.sources.contains(&s);
    if uses(DiscoverySource::KagentAgents) {
        for a in c.agents {
            if !searched(&a.namespace) || opted_out(&a.labels) {
                continue;
            }
            let svc = by_name.get(&(a.namespace.clone(), a.name.clone()));
            if svc.is_some_and(|s| opted_out(s.labels())) {
                continue;
            }
            out.entry((a.namespace.clone(), a.name.clone()))
                .or_insert(Candidate {
                    source: DiscoverySource::KagentAgents,
                    owner: Owner {
                        api_version: format!("{}/{}", KAGENT_AGENT.0, KAGENT_AGENT.1),
                        kind: KAGENT_AGENT.2.into(),
                        name: a.name.clone(),
                        uid: a.uid.clone(),
                    },
                    service: svc.and_then(|s| Some((s.name_any(), agent_port(s)?))),
                    defaults: Some(a.defaults.clone()),
                });
        }
    }
    if uses(DiscoverySource::KagentiWorkloads) {
        for w in c.workloads {
            if !w.is_kagenti_a2a_agent() || !searched(&w.namespace) || opted_out(&w.labels) {
                continue;
            }
            let fronting: Vec<&&Service> = c
                .services
                .iter()
                .filter(|s| s.namespace().as_deref() == Some(w.namespace.as_str()))
                .filter(|s| {
                    let selector = s.spec.as_ref().and_then(|sp| sp.selector.as_ref());
                    selector.is_some_and(|sel| {
                        !sel.is_empty() && sel.iter().all(|(k, v)| w.pod_labels.get(k) == Some(v))
                    })
                })
                .collect();
            if fronting.is_empty() {
                out.entry((w.namespace.clone(), w.name.clone()))
                    .or_insert(Candidate {
                        source: DiscoverySource::KagentiWorkloads,
                        owner: Owner {
                            api_version: "apps/v1".into(),
                            kind: w.kind.into(),
                            name: w.name.clone(),
                            uid: String::new(),
                        },
                        service: None,
                        defaults: None,
                    });
            }
            for s in fronting {
                if opted_out(s.labels()) {
                    continue;
                }
                out.entry((w.namespace.clone(), s.name_any()))
                    .or_insert(Candidate {
                        source: DiscoverySource::KagentiWorkloads,
                        owner: service_owner(s),
                        service: agent_port(s).map(|p| (s.name_any(), p)),
                        defaults: None,
                    });
            }
        }
    }
    if uses(DiscoverySource::Services) {
        for s in c.services {
            let ns = s.namespace().unwrap_or_default();
            if !searched(&ns) || opted_out(s.labels()) {
                continue;
            }
            let Some(port) = a2a_port(s) else {
                continue;
            };
            out.entry((ns, s.name_any())).or_insert(Candidate {
                source: DiscoverySource::Services,
                owner: service_owner(s),
                service: Some((s.name_any(), port)),
                defaults: None,
            });
        }
    }
    out
}

fn count(found: &mut Found, source: DiscoverySource) {
    found.total += 1;
    match source {
        DiscoverySource::Services => found.services += 1,
        DiscoverySource::KagentAgents => found.kagent_agents += 1,
        DiscoverySource::KagentiWorkloads => found.kagenti_workloads += 1,
    }
}

fn skipped(ns: &str, name: &str, reason: &str, message: String) -> Skipped {
    Skipped {
        namespace: ns.to_string(),
        name: name.to_string(),
        reason: reason.into(),
        message,
    }
}

/// The plan of discovery `me` (one of `all`, every discovery) over `cluster`.
pub fn plan(me: &AgentDiscovery, all: &[&AgentDiscovery], cluster: &Cluster<'_>) -> Plan {
    let my_name = me.name_any();
    let card_at: BTreeMap<(String, String), &AgentCard> = cluster
        .cards
        .iter()
        .map(|c| ((c.namespace().unwrap_or_default(), c.name_any()), *c))
        .collect();
    // Services someone else's card already imports or fronts.
    let mut published: BTreeSet<(String, String)> = BTreeSet::new();
    for c in cluster.cards {
        if c.labels().contains_key(LABEL_DISCOVERED_BY) && !claimed(c) {
            continue;
        }
        let ns = c.namespace().unwrap_or_default();
        if let Some(s) = &c.spec.source {
            published.insert((ns.clone(), s.service.name.clone()));
        }
        if let Some(b) = &c.spec.backend {
            published.insert((ns.clone(), b.service_name.clone()));
        }
    }
    // What every other discovery finds: the first by name that finds an agent writes it.
    let others: Vec<(String, Candidates)> = all
        .iter()
        .filter(|d| d.name_any() != my_name)
        .map(|d| (d.name_any(), candidates(d, cluster)))
        .collect();
    let mut out = Plan::default();
    let mut mine_wanted = BTreeSet::new();
    for ((ns, name), found) in candidates(me, cluster) {
        count(&mut out.found, found.source);
        let key = (ns.clone(), name.clone());
        if others
            .iter()
            .any(|(other, theirs)| *other < my_name && theirs.contains_key(&key))
        {
            continue;
        }
        let Some((service, port)) = found.service else {
            out.skipped.push(skipped(
                &ns,
                &name,
                "NoService",
                format!(
                    "{} {ns}/{name} has no Service with a port to import its card from",
                    found.owner.kind
                ),
            ));
            continue;
        };
        let service_key = (ns.clone(), service.clone());
        if let Some(card) = card_at.get(&key) {
            if !card.labels().contains_key(LABEL_DISCOVERED_BY) {
                if !published.contains(&service_key) {
                    out.skipped.push(skipped(
                        &ns,
                        &name,
                        "NameTaken",
                        format!(
                            "an AgentCard {ns}/{name} that discovery did not write exists; it is left alone"
                        ),
                    ));
                }
                continue;
            }
            if claimed(card) {
                continue;
            }
        }
        if published.contains(&service_key) {
            continue;
        }
        let Some(host) = host(&me.spec.host_template, &name, &ns) else {
            out.skipped.push(skipped(
                &ns,
                &name,
                "InvalidHost",
                format!(
                    "hostTemplate {:?} gives no DNS name for {ns}/{name}",
                    me.spec.host_template
                ),
            ));
            continue;
        };
        mine_wanted.insert(key);
        out.wanted.push(Wanted {
            namespace: ns,
            name,
            source: found.source,
            owner: found.owner,
            service,
            port,
            host,
            defaults: found.defaults,
        });
    }
    for c in cluster.cards {
        if c.labels().get(LABEL_DISCOVERED_BY) != Some(&my_name) {
            continue;
        }
        let key = (c.namespace().unwrap_or_default(), c.name_any());
        if claimed(c) {
            out.claimed.push(key);
        } else if !mine_wanted.contains(&key) {
            out.stale.push(key);
        }
    }
    out.skipped
        .sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn service(
        ns: &str,
        name: &str,
        labels: serde_json::Value,
        ports: serde_json::Value,
    ) -> Service {
        serde_json::from_value(json!({
            "metadata": {"namespace": ns, "name": name, "uid": format!("uid-{ns}-{name}"), "labels": labels},
            "spec": {"ports": ports, "selector": {"app": name}}
        }))
        .unwrap()
    }

    fn namespace(name: &str, labels: serde_json::Value) -> Namespace {
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap()
    }

    fn discovery(name: &str, selector: serde_json::Value) -> AgentDiscovery {
        with_sources(name, selector, json!(["Services"]))
    }

    fn with_sources(
        name: &str,
        selector: serde_json::Value,
        sources: serde_json::Value,
    ) -> AgentDiscovery {
        serde_json::from_value(json!({
            "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentDiscovery",
            "metadata": {"name": name},
            "spec": {"hostTemplate": "{name}.{namespace}.agents.test", "namespaceSelector": selector, "sources": sources}
        }))
        .unwrap()
    }

    fn card(ns: &str, name: &str, labels: serde_json::Value, spec: serde_json::Value) -> AgentCard {
        serde_json::from_value(json!({
            "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentCard",
            "metadata": {"namespace": ns, "name": name, "labels": labels},
            "spec": spec
        }))
        .unwrap()
    }

    fn a2a() -> serde_json::Value {
        json!([{"name": "http", "port": 8080, "appProtocol": "a2a"}])
    }

    fn namespaces(list: &[Namespace]) -> BTreeMap<String, &Namespace> {
        list.iter().map(|n| (n.name_any(), n)).collect()
    }

    /// The plan of `me` among `all` over the given objects.
    fn plan_over(
        me: &AgentDiscovery,
        all: &[&AgentDiscovery],
        services: &[Service],
        ns: &[Namespace],
        cards: &[AgentCard],
        workloads: &[Workload],
        agents: &[KagentAgent],
    ) -> Plan {
        let services: Vec<&Service> = services.iter().collect();
        let cards: Vec<&AgentCard> = cards.iter().collect();
        let ns = namespaces(ns);
        plan(
            me,
            all,
            &Cluster {
                services: &services,
                namespaces: &ns,
                cards: &cards,
                workloads,
                agents,
            },
        )
    }

    #[test]
    fn services_are_found_by_app_protocol_or_label_and_opted_out_by_label() {
        let services = [
            service("team", "marked", json!({}), a2a()),
            service(
                "team",
                "gateway",
                json!({}),
                json!([{"port": 80}, {"port": 9000, "appProtocol": "kgateway.dev/a2a"}]),
            ),
            service(
                "team",
                "labelled",
                json!({LABEL_DISCOVER: "true"}),
                json!([{"port": 81}]),
            ),
            service("team", "plain", json!({}), json!([{"port": 80}])),
            service("team", "out", json!({LABEL_DISCOVER: "false"}), a2a()),
            service("quiet", "marked", json!({}), a2a()),
            service("other", "marked", json!({}), a2a()),
        ];
        let ns = [
            namespace("team", json!({"env": "prod"})),
            namespace("quiet", json!({"env": "prod", LABEL_DISCOVER: "false"})),
            namespace("other", json!({"env": "dev"})),
        ];
        let d = discovery("all", json!({"matchLabels": {"env": "prod"}}));
        let p = plan_over(&d, &[&d], &services, &ns, &[], &[], &[]);
        let got: Vec<(&str, i32, &str)> = p
            .wanted
            .iter()
            .map(|w| (w.name.as_str(), w.port, w.host.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("gateway", 9000, "gateway.team.agents.test"),
                ("labelled", 81, "labelled.team.agents.test"),
                ("marked", 8080, "marked.team.agents.test"),
            ]
        );
        assert_eq!((p.found.total, p.found.services), (3, 3));
        assert_eq!(p.wanted[2].owner.uid, "uid-team-marked");
        assert_eq!(p.wanted[2].owner.kind, "Service");
        assert_eq!(p.wanted[2].service, "marked");
    }

    #[test]
    fn never_twice_never_over_a_persons_card_and_one_discovery_per_service() {
        let services = [
            service("team", "declared", json!({}), a2a()),
            service("team", "taken", json!({}), a2a()),
            service("team", "mine", json!({}), a2a()),
            service("team", "theirs", json!({}), a2a()),
        ];
        let ns = [namespace("team", json!({}))];
        let spec = |svc: &str| json!({"publish": {"host": "x.test"}, "source": {"service": {"name": svc, "port": 8080}}});
        let cards = [
            // A person's card importing "declared" under another name.
            card("team", "curated", json!({}), spec("declared")),
            // A person's card named like a Service, importing something else.
            card("team", "taken", json!({}), spec("elsewhere")),
            // Ours, and one we wrote for a Service that is gone.
            card(
                "team",
                "mine",
                json!({LABEL_DISCOVERED_BY: "b"}),
                spec("mine"),
            ),
            card(
                "team",
                "gone",
                json!({LABEL_DISCOVERED_BY: "b"}),
                spec("gone"),
            ),
            // Ours, claimed by label: never written again, never deleted.
            card(
                "team",
                "theirs",
                json!({LABEL_DISCOVERED_BY: "b", LABEL_CLAIMED: "true"}),
                spec("theirs"),
            ),
        ];
        let b = discovery("b", json!(null));
        let a = discovery("a", json!({"matchLabels": {"absent": "x"}}));
        let p = plan_over(&b, &[&a, &b], &services, &ns, &cards, &[], &[]);
        let names: Vec<&str> = p.wanted.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(names, ["mine"]);
        assert_eq!(p.stale, [("team".to_string(), "gone".to_string())]);
        assert_eq!(p.claimed, [("team".to_string(), "theirs".to_string())]);
        assert_eq!(p.skipped.len(), 1);
        assert_eq!(
            (p.skipped[0].name.as_str(), p.skipped[0].reason.as_str()),
            ("taken", "NameTaken")
        );
        // A second discovery that also finds them: "a" sorts first, so it writes them and "b"
        // writes nothing (its own card "mine" goes stale, to be deleted, and "a" writes it).
        let a_all = discovery("a", json!(null));
        let p = plan_over(&b, &[&a_all, &b], &services, &ns, &cards, &[], &[]);
        assert!(p.wanted.is_empty());
        let p = plan_over(&a_all, &[&a_all, &b], &services, &ns, &cards, &[], &[]);
        let names: Vec<&str> = p.wanted.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(names, ["mine"]);
        // A discovery that sorts first but searches another source finds nothing of these.
        let a_kagent = with_sources("a", json!(null), json!(["KagentAgents"]));
        let p = plan_over(&b, &[&a_kagent, &b], &services, &ns, &cards, &[], &[]);
        let names: Vec<&str> = p.wanted.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(names, ["mine"]);
    }

    fn workload(name: &str, labels: serde_json::Value, pod: serde_json::Value) -> Workload {
        Workload {
            kind: "Deployment",
            namespace: "team".into(),
            name: name.into(),
            labels: serde_json::from_value(labels).unwrap(),
            pod_labels: serde_json::from_value(pod).unwrap(),
        }
    }

    #[test]
    fn kagenti_workloads_are_found_through_the_service_selecting_their_pods() {
        let kagenti = json!({"kagenti.io/type": "agent", "protocol.kagenti.io/a2a": ""});
        let workloads = [
            // Labelled on the workload, its Pods selected by "planner".
            workload(
                "planner-v2",
                kagenti.clone(),
                json!({"app": "planner", "v": "2"}),
            ),
            // Labelled on the Pod template.
            workload("coder", json!({}), {
                let mut l = kagenti.clone();
                l["app"] = json!("coder");
                l
            }),
            // Not an A2A agent, or opted out, or with no Service.
            workload(
                "web",
                json!({"kagenti.io/type": "agent"}),
                json!({"app": "web"}),
            ),
            workload(
                "hidden",
                {
                    let mut l = kagenti.clone();
                    l[LABEL_DISCOVER] = json!("false");
                    l
                },
                json!({"app": "hidden"}),
            ),
            workload("lonely", kagenti.clone(), json!({"app": "lonely"})),
        ];
        let services = [
            service(
                "team",
                "planner",
                json!({}),
                json!([{"name": "metrics", "port": 9090}, {"name": "http", "port": 8000}]),
            ),
            service("team", "coder", json!({}), json!([{"port": 7000}])),
            service("team", "web", json!({}), json!([{"port": 80}])),
            service("team", "hidden", json!({}), json!([{"port": 80}])),
        ];
        let ns = [namespace("team", json!({}))];
        let d = with_sources("k", json!(null), json!(["KagentiWorkloads"]));
        let p = plan_over(&d, &[&d], &services, &ns, &[], &workloads, &[]);
        let got: Vec<(&str, &str, i32)> = p
            .wanted
            .iter()
            .map(|w| (w.name.as_str(), w.service.as_str(), w.port))
            .collect();
        assert_eq!(
            got,
            [("coder", "coder", 7000), ("planner", "planner", 8000)]
        );
        assert!(p.wanted.iter().all(|w| w.owner.kind == "Service"));
        assert_eq!((p.found.total, p.found.kagenti_workloads), (3, 3));
        assert_eq!(p.skipped.len(), 1);
        assert_eq!(
            (p.skipped[0].name.as_str(), p.skipped[0].reason.as_str()),
            ("lonely", "NoService")
        );
        // The Services source alone finds none of them (no A2A port, no label).
        let only_services = discovery("s", json!(null));
        let p = plan_over(
            &only_services,
            &[&only_services],
            &services,
            &ns,
            &[],
            &workloads,
            &[],
        );
        assert!(p.wanted.is_empty());
    }

    fn agent(name: &str, spec: serde_json::Value) -> KagentAgent {
        let o: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "kagent.dev/v1alpha2", "kind": "Agent",
            "metadata": {"namespace": "team", "name": name, "uid": format!("agent-{name}")},
            "spec": spec
        }))
        .unwrap();
        KagentAgent::from_object(&o).unwrap()
    }

    #[test]
    fn kagent_agents_are_found_with_what_they_declare_and_never_their_prompt() {
        let helper = agent(
            "k8s-helper",
            json!({
                "type": "Declarative",
                "description": "Answers questions about the cluster.",
                "version": "0.3.1",
                "provider": {"organization": "Platform team", "url": "https://platform.example.com"},
                "declarative": {
                    "systemMessage": "You are a helpful Kubernetes agent. Always obey.",
                    "a2aConfig": {"skills": [
                        {"id": "get-pods", "name": "Get pods", "description": "Lists pods.", "tags": ["k8s"]},
                        {"name": "Describe Things!"}
                    ]}
                }
            }),
        );
        assert_eq!(helper.defaults.version.as_deref(), Some("0.3.1"));
        assert_eq!(helper.defaults.skills.len(), 2);
        assert_eq!(helper.defaults.skills[1].id, "describe-things");
        assert_eq!(
            helper
                .defaults
                .provider
                .as_ref()
                .map(|p| p.organization.as_str()),
            Some("Platform team")
        );
        let defaults = serde_json::to_string(&helper.defaults).unwrap();
        assert!(!defaults.contains("Always obey"), "{defaults}");
        let agents = [helper, agent("no-service", json!({"type": "BYO"}))];
        // kagent's Service for the Agent, marked as A2A too: one card, by kagent.
        let services = [service(
            "team",
            "k8s-helper",
            json!({}),
            json!([{"name": "http", "port": 8080, "appProtocol": "a2a"}]),
        )];
        let ns = [namespace("team", json!({}))];
        let d = with_sources("k", json!(null), json!(["Services", "KagentAgents"]));
        let p = plan_over(&d, &[&d], &services, &ns, &[], &[], &agents);
        assert_eq!(p.wanted.len(), 1);
        let w = &p.wanted[0];
        assert_eq!(
            (w.name.as_str(), w.service.as_str(), w.port),
            ("k8s-helper", "k8s-helper", 8080)
        );
        assert_eq!(w.source, DiscoverySource::KagentAgents);
        assert_eq!(
            (
                w.owner.api_version.as_str(),
                w.owner.kind.as_str(),
                w.owner.uid.as_str()
            ),
            ("kagent.dev/v1alpha2", "Agent", "agent-k8s-helper")
        );
        assert_eq!(
            w.defaults.as_ref().unwrap().description.as_deref(),
            Some("Answers questions about the cluster.")
        );
        assert_eq!(
            (p.found.total, p.found.kagent_agents, p.found.services),
            (2, 2, 0)
        );
        assert_eq!(p.skipped[0].reason, "NoService");
    }

    #[test]
    fn an_edit_by_another_field_manager_claims_a_card() {
        let mut c = card(
            "team",
            "x",
            json!({LABEL_DISCOVERED_BY: "d"}),
            json!({"publish": {"host": "x.test"}}),
        );
        assert!(!claimed(&c));
        c.metadata.managed_fields = Some(vec![
            serde_json::from_value(json!({"manager": DISCOVERY_MANAGER, "operation": "Apply", "fieldsV1": {"f:spec": {}}})).unwrap(),
            serde_json::from_value(json!({"manager": crate::contract::MANAGER, "operation": "Apply", "subresource": "status", "fieldsV1": {"f:status": {}}})).unwrap(),
        ]);
        assert!(!claimed(&c));
        c.metadata.managed_fields.as_mut().unwrap().push(
            serde_json::from_value(json!({"manager": "kubectl-edit", "operation": "Update", "fieldsV1": {"f:spec": {"f:publish": {"f:host": {}}}}})).unwrap(),
        );
        assert!(claimed(&c));
        // The stores keep that much of it.
        crate::store::compact_card(&mut c);
        assert_eq!(c.metadata.managed_fields.as_ref().map(Vec::len), Some(1));
        assert!(claimed(&c));
        crate::store::compact_card(&mut c);
        assert!(claimed(&c), "compaction is idempotent");
        // A declared card keeps none.
        let mut declared = card(
            "team",
            "y",
            json!({}),
            json!({"publish": {"host": "y.test"}}),
        );
        declared.metadata.managed_fields = c.metadata.managed_fields.clone();
        crate::store::compact_card(&mut declared);
        assert!(declared.metadata.managed_fields.is_none());
    }

    #[test]
    fn hosts_come_from_the_template_or_not_at_all() {
        assert_eq!(
            host("{name}.{namespace}.a.test", "Svc", "ns").as_deref(),
            Some("svc.ns.a.test")
        );
        assert_eq!(host("{name}", "svc", "ns"), None);
        assert_eq!(host("{name}-.a.test", "svc", "ns"), None);
        assert_eq!(
            host(&format!("{{name}}{}.a.test", "x".repeat(61)), "svc", "ns"),
            None
        );
    }
}
