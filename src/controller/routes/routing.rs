//! How published cards are routed: Ingresses (default), Gateway API HTTPRoutes attached to the
//! platform's Gateways, or nothing (the platform routes by itself).
//!
//! Pure: the operator setting ([`Routing`]), the Ingress ([`ingress_object`]) and HTTPRoute
//! objects for a card's well-known paths (operator's namespace), its backend (card's
//! namespace) and a directory's host, and the `Routed` condition read from an HTTPRoute's
//! `status.parents`. Parents come from the platform alone; a card may only pick a listener
//! `sectionName` the platform allows.

use std::str::FromStr;

use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{json, Value};

use crate::controller::error::Error;
use crate::controller::routes::policy::IngressPolicy;
use crate::crd::agentcard::IngressSettings;

/// What the operator writes to route traffic to cards and directories.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RouteKind {
    /// `networking.k8s.io/v1` Ingresses.
    #[default]
    Ingress,
    /// `gateway.networking.k8s.io/v1` HTTPRoutes.
    HttpRoute,
    /// Nothing: the platform routes to the operator's Service itself.
    None,
}

impl RouteKind {
    /// The name used in flags and status.
    pub fn as_str(self) -> &'static str {
        match self {
            RouteKind::Ingress => "Ingress",
            RouteKind::HttpRoute => "HTTPRoute",
            RouteKind::None => "None",
        }
    }
}

impl FromStr for RouteKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "Ingress" => Ok(RouteKind::Ingress),
            "HTTPRoute" => Ok(RouteKind::HttpRoute),
            "None" => Ok(RouteKind::None),
            other => Err(format!("{other:?}: expected Ingress, HTTPRoute or None")),
        }
    }
}

/// A Gateway the routes attach to: `namespace/name[/sectionName]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParentRef {
    /// The Gateway's namespace.
    pub namespace: String,
    /// The Gateway's name.
    pub name: String,
    /// A listener of it (`None`: every listener that accepts the route).
    pub section: Option<String>,
}

impl FromStr for ParentRef {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.trim().split('/').collect();
        match parts.as_slice() {
            [ns, name] if !ns.is_empty() && !name.is_empty() => Ok(ParentRef {
                namespace: ns.to_string(),
                name: name.to_string(),
                section: None,
            }),
            [ns, name, section] if !ns.is_empty() && !name.is_empty() && !section.is_empty() => {
                Ok(ParentRef {
                    namespace: ns.to_string(),
                    name: name.to_string(),
                    section: Some(section.to_string()),
                })
            }
            _ => Err(format!("{s:?}: expected namespace/name[/sectionName]")),
        }
    }
}

/// The operator's routing setting.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Routing {
    /// What is written.
    pub kind: RouteKind,
    /// The Gateways HTTPRoutes attach to.
    pub parents: Vec<ParentRef>,
    /// Listener names cards may pick (`spec.publish.sectionName`).
    pub allowed_sections: Vec<String>,
    /// Port number of the operator's Service (HTTPRoute backends name ports by number).
    pub service_port: u16,
}

/// The HTTPRoute resource.
pub fn httproute_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "gateway.networking.k8s.io",
        "v1",
        "HTTPRoute",
    ))
}

impl Routing {
    /// The parentRefs of a route, with the card's `section` (already checked) when given.
    fn parent_refs(&self, section: Option<&str>) -> Value {
        Value::Array(
            self.parents
                .iter()
                .map(|p| {
                    let mut r = json!({
                        "group": "gateway.networking.k8s.io",
                        "kind": "Gateway",
                        "namespace": p.namespace,
                        "name": p.name,
                    });
                    if let Some(s) = section.or(p.section.as_deref()) {
                        r["sectionName"] = json!(s);
                    }
                    r
                })
                .collect(),
        )
    }

    /// Whether a card may attach to listener `section`.
    pub fn section_allowed(&self, section: &str) -> bool {
        self.allowed_sections
            .iter()
            .any(|s| s == "*" || s == section)
    }

    /// An HTTPRoute for `host` sending `matches` (`(type, path)`) to Service `service:port`.
    #[allow(clippy::too_many_arguments)]
    pub fn route(
        &self,
        meta: Value,
        host: &str,
        section: Option<&str>,
        matches: &[(&str, String)],
        service: &str,
        port: u16,
    ) -> Result<DynamicObject, serde_json::Error> {
        let matches: Vec<Value> = matches
            .iter()
            .map(|(t, p)| json!({"path": {"type": t, "value": p}}))
            .collect();
        serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "HTTPRoute",
            "metadata": meta,
            "spec": {
                "parentRefs": self.parent_refs(section),
                "hostnames": [host],
                "rules": [{"matches": matches, "backendRefs": [{"name": service, "port": port}]}],
            },
        }))
    }
}

/// The `Routed` condition a set of routes earns: what the Gateways said of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// The condition's reason (`Accepted`, `Pending`, or the Gateway's own).
    pub reason: String,
    /// What a user reads.
    pub message: String,
}

impl Verdict {
    fn new(status: &str, reason: impl Into<String>, message: impl Into<String>) -> Verdict {
        Verdict {
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// Whether every Gateway accepted the routes.
    pub fn accepted(&self) -> bool {
        self.status == "True"
    }
}

/// The `Routed` condition of routes, from their `status.parents` for the platform's parents.
/// True when every parent Accepted the route and ResolvedRefs;
/// otherwise the first refusal the Gateway reported; Unknown (`Pending`) before it reported,
/// or while no route is seen yet (so an Ingress being replaced stays until routes carry).
pub fn routed(routes: &[&DynamicObject], parents: &[ParentRef]) -> Verdict {
    if routes.is_empty() {
        return Verdict::new("Unknown", "Pending", "the HTTPRoutes are not written yet");
    }
    for route in routes {
        let name = route.metadata.name.clone().unwrap_or_default();
        let ns = route.metadata.namespace.clone().unwrap_or_default();
        let statuses = route.data["status"]["parents"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for parent in parents {
            let entry = statuses.iter().find(|s| {
                s["parentRef"]["name"] == parent.name.as_str()
                    && s["parentRef"]["namespace"].as_str().unwrap_or(ns.as_str())
                        == parent.namespace
            });
            let Some(entry) = entry else {
                return Verdict::new(
                    "Unknown",
                    "Pending",
                    format!(
                        "HTTPRoute {ns}/{name}: Gateway {}/{} has not reported on it yet",
                        parent.namespace, parent.name
                    ),
                );
            };
            let conditions: Vec<Condition> =
                serde_json::from_value(entry["conditions"].clone()).unwrap_or_default();
            for wanted in ["Accepted", "ResolvedRefs"] {
                match conditions.iter().find(|c| c.type_ == wanted) {
                    Some(c) if c.status == "True" => {}
                    Some(c) => {
                        return Verdict::new(
                            "False",
                            c.reason.clone(),
                            format!(
                                "HTTPRoute {ns}/{name} on Gateway {}/{}: {wanted}={}: {}",
                                parent.namespace, parent.name, c.status, c.message
                            ),
                        )
                    }
                    None => {
                        return Verdict::new(
                            "Unknown",
                            "Pending",
                            format!(
                            "HTTPRoute {ns}/{name}: Gateway {}/{} reported no {wanted} condition",
                            parent.namespace, parent.name
                        ),
                        )
                    }
                }
            }
        }
    }
    Verdict::new("True", "Accepted", "every Gateway accepted the routes")
}

/// Most characters of an Ingress name the operator writes (some ingress controllers derive
/// DNS labels from it).
pub const MAX_INGRESS_NAME: usize = 63;

/// Where an Ingress goes, for which host and tenant settings, and what marks it as whose
/// (cards and directories write their Ingresses through [`ingress_object`]).
pub struct IngressTarget<'a> {
    /// The Ingress's name.
    pub name: &'a str,
    /// Its namespace.
    pub namespace: &'a str,
    /// Its labels.
    pub labels: &'a serde_json::Value,
    /// The annotation naming the card or directory the Ingress is written for.
    pub marker: (&'a str, &'a str),
    /// Its owner references (the card's, for an Ingress in the card's namespace).
    pub owner: &'a [OwnerReference],
    /// The TLS Secret, if any.
    pub tls_secret: Option<String>,
    /// The lower-cased host.
    pub host: &'a str,
    /// The tenant's Ingress settings (class, annotations), filtered by the operator's policy.
    pub settings: &'a IngressSettings,
}

/// An Ingress for `target` routing `paths`, under the operator's Ingress `policy`.
pub fn ingress_object(
    target: IngressTarget<'_>,
    policy: &IngressPolicy,
    paths: Vec<serde_json::Value>,
) -> Result<Ingress, Error> {
    let settings = target.settings;
    let host = target.host;
    let mut spec = json!({"rules": [{"host": host, "http": {"paths": paths}}]});
    if let Some(class) = policy.class_for(settings) {
        spec["ingressClassName"] = json!(class);
    }
    if let Some(tls) = target.tls_secret {
        spec["tls"] = json!([{"hosts": [host], "secretName": tls}]);
    }
    // Only allow-listed tenant annotations (validation refused the others), then the
    // platform's, then ours.
    let mut annotations: serde_json::Map<String, serde_json::Value> = settings
        .annotations
        .iter()
        .filter(|(k, _)| policy.annotation_allowed(k))
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    for (k, v) in &policy.annotations {
        annotations.insert(k.clone(), json!(v));
    }
    annotations.insert(target.marker.0.into(), json!(target.marker.1));
    serde_json::from_value(json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {
            "name": target.name,
            "namespace": target.namespace,
            "labels": target.labels,
            "annotations": annotations,
            "ownerReferences": target.owner,
        },
        "spec": spec,
    }))
    .map_err(|e| Error::Internal(format!("Ingress: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route_with(parents: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": "r", "namespace": "team"},
            "spec": {},
            "status": {"parents": parents}
        }))
        .unwrap()
    }

    fn cond(t: &str, s: &str, reason: &str) -> Value {
        json!({"type": t, "status": s, "reason": reason, "message": format!("{t} {s}"),
               "lastTransitionTime": "2026-01-01T00:00:00Z"})
    }

    #[test]
    fn parents_parse_and_sections_are_the_platforms() {
        let p: ParentRef = "infra/public/https".parse().unwrap();
        assert_eq!(p.section.as_deref(), Some("https"));
        assert!("public".parse::<ParentRef>().is_err());
        let r = Routing {
            kind: RouteKind::HttpRoute,
            parents: vec!["infra/public".parse().unwrap()],
            allowed_sections: vec!["web".into()],
            service_port: 80,
        };
        assert!(r.section_allowed("web") && !r.section_allowed("admin"));
        let route = r
            .route(
                json!({"name": "x", "namespace": "ops"}),
                "h.example",
                Some("web"),
                &[("Exact", "/.well-known/agent-card.json".into())],
                "svc",
                80,
            )
            .unwrap();
        assert_eq!(route.data["spec"]["parentRefs"][0]["sectionName"], "web");
        assert_eq!(route.data["spec"]["rules"][0]["backendRefs"][0]["port"], 80);
        assert_eq!("HTTPRoute".parse::<RouteKind>(), Ok(RouteKind::HttpRoute));
    }

    #[test]
    fn routed_reads_the_gateways_verdict() {
        let parents = vec![ParentRef {
            namespace: "infra".into(),
            name: "public".into(),
            section: None,
        }];
        let ok = route_with(
            json!([{"parentRef": {"name": "public", "namespace": "infra"}, "controllerName": "x",
            "conditions": [cond("Accepted", "True", "Accepted"), cond("ResolvedRefs", "True", "ResolvedRefs")]}]),
        );
        assert!(routed(&[&ok], &parents).accepted());
        let refused = route_with(
            json!([{"parentRef": {"name": "public", "namespace": "infra"}, "controllerName": "x",
            "conditions": [cond("Accepted", "False", "NotAllowedByListeners"), cond("ResolvedRefs", "True", "ResolvedRefs")]}]),
        );
        let Verdict {
            status: s,
            reason,
            message,
        } = routed(&[&ok, &refused], &parents);
        assert_eq!(
            (s.as_str(), reason.as_str()),
            ("False", "NotAllowedByListeners")
        );
        assert!(message.contains("team/r"), "{message}");
        let pending = route_with(json!([]));
        assert_eq!(routed(&[&pending], &parents).reason, "Pending");
        assert_eq!(routed(&[], &parents).reason, "Pending");
    }
}
