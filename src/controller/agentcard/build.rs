//! Build: everything the operator writes for one AgentCard, computed without a client.
//!
//! Input: the AgentCard (its status says what is served now), the parsed signing keys, the
//! operator's settings and Ingress policy, the ConfigMap that is served now (for its
//! signatures), when the card took its claim, and the current time. Output: the ConfigMap,
//! the Ingress in the operator's namespace, the backend Ingress (with `spec.backend`), and
//! what `status` reports, including the route the card server will serve. Signatures of an
//! unchanged card are reused, so the served bytes (and the ETag) change only when the card's
//! content or the keys change.

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::networking::v1::Ingress;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::a2a::card::{AgentCard as A2aCard, AgentInterface};
use crate::a2a::jws::sign_card_reusing;
use crate::a2a::publish::{published_bytes, PublishOptions};
use crate::a2a::SigningKey;
use crate::contract::*;
use crate::controller::policy::IngressPolicy;
use crate::controller::routing::{RouteKind, Routing};
use crate::controller::seen::{MetaView, SeenConfigMap};
use crate::controller::Error;
use crate::crd::agentcard::IngressSettings;
use crate::crd::{AgentCard, ServedRoute};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::DynamicObject;

/// What the operator's own deployment looks like.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The operator's namespace (Ingresses for cards, JWKS, keys).
    pub operator_namespace: String,
    /// The Service in front of the card server.
    pub service_name: String,
    /// Its port name.
    pub service_port_name: String,
    /// What tenants' Ingress settings may do.
    pub ingress: IngressPolicy,
    /// Ingresses, HTTPRoutes or nothing.
    pub routing: Routing,
}

/// Everything one reconcile writes, and what it reports.
#[derive(Clone, Debug)]
pub struct Built {
    /// The ConfigMap with the served bytes.
    pub configmap: ConfigMap,
    /// The Ingress routing the well-known paths to the card server (Ingress routing).
    pub ingress: Option<Ingress>,
    /// The Ingress routing the agent's traffic to its Service (Ingress routing).
    pub backend_ingress: Option<Ingress>,
    /// The HTTPRoute routing the well-known paths to the card server (HTTPRoute routing).
    pub route: Option<DynamicObject>,
    /// The HTTPRoute routing the agent's traffic to its Service (HTTPRoute routing).
    pub backend_route: Option<DynamicObject>,
    /// Hash of the served bytes.
    pub content_hash: String,
    /// The newest key that signed.
    pub key_id: String,
    /// Every key that signed, newest first.
    pub key_ids: Vec<String>,
    /// The active key and when it starts signing, while it waits (filled by the reconciler).
    pub pending_key: Option<(String, jiff::Timestamp)>,
    /// Public URL of the card.
    pub url: String,
    /// The route the card server serves it on.
    pub served: ServedRoute,
}

/// `spec.publish.pathPrefix` normalised: `""` or `/a/b`.
pub fn prefix(card: &AgentCard) -> String {
    normalize_prefix(&card.spec.publish.path_prefix)
}

/// `https://<host><prefix>`.
pub fn public_base(card: &AgentCard) -> String {
    format!("https://{}{}", card.spec.publish.host, prefix(card))
}

/// The public card URL.
pub fn card_url(card: &AgentCard) -> String {
    format!("{}{PATH_CARD}", public_base(card))
}

/// The A2A card as published: `spec.card` (for an imported card, the fetched card the
/// reconciler put there, with `spec.overrides` applied and its cluster-internal interface URLs
/// moved under the backend's public path), with the backend's public interface first.
pub fn effective_card(card: &AgentCard) -> A2aCard {
    let mut a2a = card.spec.card.clone().unwrap_or_default();
    a2a.signatures.clear();
    let imported = card.spec.source.is_some();
    if imported {
        if let Some(o) = &card.spec.overrides {
            apply_overrides(&mut a2a, o);
        }
    }
    if let Some(b) = &card.spec.backend {
        let public = format!("https://{}{}", card.spec.publish.host, backend_path(card));
        if imported {
            for iface in &mut a2a.supported_interfaces {
                if crate::a2a::validate::is_internal_url(&iface.url) {
                    iface.url = public_interface_url(&public, &iface.url);
                }
            }
        }
        // An imported card's interface at the agent's root says what the agent speaks there.
        let spoken = a2a
            .supported_interfaces
            .iter()
            .find(|i| imported && i.url == public)
            .map(|i| (i.protocol_binding.clone(), i.protocol_version.clone()));
        let (binding, version) = spoken.unwrap_or_else(|| ("JSONRPC".into(), "1.0".into()));
        let iface = AgentInterface {
            url: public,
            protocol_binding: b.protocol_binding.clone().unwrap_or(binding),
            protocol_version: b.protocol_version.clone().unwrap_or(version),
            tenant: String::new(),
        };
        a2a.supported_interfaces.retain(|i| i.url != iface.url);
        a2a.supported_interfaces.insert(0, iface);
    }
    a2a
}

/// `internal` (the agent's own URL, e.g. `http://echo.team.svc:9999/rest`) under `public` (the
/// backend's public base): `https://<host><backend path>/rest`; the agent's root is the base.
fn public_interface_url(public: &str, internal: &str) -> String {
    let path = url::Url::parse(internal)
        .map(|u| u.path().trim_end_matches('/').to_string())
        .unwrap_or_default();
    format!("{public}{path}")
}

/// Set the fields `spec.overrides` names over an imported card.
fn apply_overrides(a2a: &mut A2aCard, o: &crate::crd::Overrides) {
    if let Some(v) = &o.name {
        a2a.name.clone_from(v);
    }
    if let Some(v) = &o.description {
        a2a.description.clone_from(v);
    }
    if let Some(v) = &o.provider {
        a2a.provider = Some(v.clone());
    }
    if let Some(v) = &o.documentation_url {
        a2a.documentation_url = Some(v.clone());
    }
    if let Some(v) = &o.icon_url {
        a2a.icon_url = Some(v.clone());
    }
    for skill in &mut a2a.skills {
        for tag in &o.skill_tags {
            if !skill.tags.contains(tag) {
                skill.tags.push(tag.clone());
            }
        }
    }
}

/// The path of the agent's own traffic on the public host (`spec.backend.path`, default
/// `<prefix>/a2a`), with a leading slash.
pub fn backend_path(card: &AgentCard) -> String {
    let default = format!("{}/a2a", prefix(card));
    let p = card
        .spec
        .backend
        .as_ref()
        .and_then(|b| b.path.clone())
        .filter(|p| !p.trim().is_empty())
        .unwrap_or(default);
    if p.starts_with('/') {
        p
    } else {
        format!("/{p}")
    }
}

/// Name of the card's ConfigMap.
pub fn configmap_name(card: &AgentCard) -> String {
    card_configmap_name(&card.name_any())
}

/// Most characters of an Ingress name the operator writes (some ingress controllers derive
/// DNS labels from it).
pub const MAX_INGRESS_NAME: usize = 63;

/// Name of the card's Ingress (and HTTPRoute) in the operator's namespace: readable head plus
/// 16 hex digits of the hash of `namespace/name`, so `team-a`/`weather` and `team`/`a-weather`
/// never share one, and no tenant can search out a name that squats another namespace's.
pub fn ingress_name(namespace: &str, name: &str) -> String {
    hashed_name_with(
        &format!("agentcard-{namespace}-{name}"),
        &format!("{namespace}/{name}"),
        MAX_INGRESS_NAME,
        16,
    )
}

/// Name of the backend Ingress in the card's namespace.
pub fn backend_ingress_name(card: &AgentCard) -> String {
    backend_ingress_name_of(&card.name_any())
}

/// Name of the backend Ingress of the card named `name` (unique within its namespace).
pub fn backend_ingress_name_of(name: &str) -> String {
    hashed_name(&format!("agentcard-{name}-backend"), name, MAX_INGRESS_NAME)
}

/// `namespace/name` of a card, as written in [`ANN_CARD`].
pub fn card_key(card: &AgentCard) -> String {
    format!(
        "{}/{}",
        card.namespace().unwrap_or_default(),
        card.name_any()
    )
}

/// Build everything for `card`, which must have passed validation and holds its claim since
/// `since`. `previous` is its ConfigMap as it is now (its signatures are reused when they
/// still hold).
pub fn build(
    card: &AgentCard,
    signers: &[SigningKey],
    settings: &Settings,
    previous: Option<&SeenConfigMap>,
    since: jiff::Timestamp,
    now: jiff::Timestamp,
) -> Result<Built, Error> {
    let ns = card.namespace().unwrap_or_default();
    let name = card.name_any();
    let publish = &card.spec.publish;
    let prefix = prefix(card);
    let url = card_url(card);
    let jku = format!("{}{PATH_JWKS}", public_base(card));

    let previous_card = previous
        .and_then(|cm| cm.bytes(KEY_CARD))
        .and_then(|b| A2aCard::from_json_lenient(b).ok());
    let previous_signatures = previous_card.map(|c| c.signatures).unwrap_or_default();
    let key_id = signers
        .first()
        .map(SigningKey::kid)
        .ok_or_else(|| Error::Internal("no signing key".into()))?;
    let signed = sign_card_reusing(
        &effective_card(card),
        signers,
        Some(&jku),
        &previous_signatures,
    )?;
    let bytes = published_bytes(
        &signed,
        PublishOptions {
            v03_compat: publish.v03_compat,
        },
    )
    .map_err(|e| {
        Error::InvalidSpec(crate::a2a::Problems(vec![crate::a2a::Problem::error(
            "spec.publish.v03Compat",
            e.to_string(),
        )]))
    })?;
    let body = String::from_utf8(bytes).unwrap_or_default();
    let hash = content_hash(body.as_bytes());
    // The publication time moves only with the bytes: taken from the status (written by the
    // operator alone) when it confirms these bytes, else from the ConfigMap already holding
    // them (a status write that failed must not make every retry a new ConfigMap version).
    let status = card.status.as_ref();
    let previous_ann = |key: &str| previous.and_then(|cm| cm.seen.annotation(key));
    let published_at = match (
        status.and_then(|s| s.content_hash.as_ref()),
        status.and_then(|s| s.served.as_ref()),
    ) {
        (Some(h), Some(served)) if *h == hash => served.published_at.clone(),
        _ => match (
            previous_ann(ANN_CONTENT_HASH),
            previous_ann(ANN_PUBLISHED_AT),
        ) {
            (Some(h), Some(at)) if h == hash => at.to_string(),
            _ => now.to_string(),
        },
    };
    let max_age = publish
        .cache_max_age_seconds
        .map_or(i64::from(DEFAULT_MAX_AGE), |m| m.clamp(0, 86_400));
    let owner = card
        .controller_owner_ref(&())
        .map(|o| vec![o])
        .unwrap_or_default();
    let labels = json!({
        LABEL_MANAGED_BY: MANAGER,
        LABEL_CARD_UID: card.uid().unwrap_or_default(),
    });
    let mut cm_labels = labels.clone();
    cm_labels[LABEL_CONTENT] = json!(CONTENT_CARD);
    let card_ref = card_key(card);

    let configmap: ConfigMap = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": configmap_name(card),
            "namespace": ns,
            "labels": cm_labels,
            "annotations": {
                ANN_CARD: card_ref,
                ANN_HOST: publish.host,
                ANN_PATH_PREFIX: prefix,
                ANN_LEGACY_PATH: publish.legacy_path.to_string(),
                ANN_CONTENT_HASH: hash,
                ANN_MAX_AGE: max_age.to_string(),
                ANN_KEY_ID: key_id,
                ANN_PUBLISHED_AT: published_at,
            },
            "ownerReferences": owner,
        },
        "data": {KEY_CARD: body},
    }))
    .map_err(|e| Error::Internal(format!("ConfigMap: {e}")))?;

    let mut paths = vec![
        format!("{prefix}{PATH_CARD}"),
        format!("{prefix}{PATH_JWKS}"),
    ];
    if publish.legacy_path {
        paths.push(format!("{prefix}{PATH_LEGACY}"));
    }
    let host = publish.host.to_ascii_lowercase();
    let routing = &settings.routing;
    let section = publish.section_name.as_deref();
    let route_meta = |name: &str, namespace: &str, owner: &[OwnerReference]| {
        json!({"name": name, "namespace": namespace, "labels": labels,
               "annotations": {ANN_CARD: card_ref}, "ownerReferences": owner})
    };
    let internal = |e: serde_json::Error| Error::Internal(format!("HTTPRoute: {e}"));
    let (mut ingress, mut route, mut backend_ingress, mut backend_route) = (None, None, None, None);
    match routing.kind {
        RouteKind::Ingress => {
            let backend = json!({"service": {"name": settings.service_name, "port": {"name": settings.service_port_name}}});
            let rule_paths: Vec<_> = paths
                .iter()
                .map(|p| json!({"path": p, "pathType": "Exact", "backend": backend}))
                .collect();
            ingress = Some(ingress_object(
                IngressTarget {
                    name: &ingress_name(&ns, &name),
                    namespace: &settings.operator_namespace,
                    labels: &labels,
                    marker: (ANN_CARD, &card_ref),
                    owner: &[],
                    tls_secret: settings.ingress.tls_secret(&host),
                    host: &host,
                    settings: &publish.ingress,
                },
                &settings.ingress,
                rule_paths,
            )?);
            if let Some(b) = &card.spec.backend {
                backend_ingress = Some(ingress_object(
                    IngressTarget {
                        name: &backend_ingress_name(card),
                        namespace: &ns,
                        labels: &labels,
                        marker: (ANN_CARD, &card_ref),
                        owner: &owner,
                        tls_secret: publish.ingress.tls_secret_name.clone(),
                        host: &host,
                        settings: &publish.ingress,
                    },
                    &settings.ingress,
                    vec![json!({
                        "path": backend_path(card),
                        "pathType": "Prefix",
                        "backend": {"service": {"name": b.service_name, "port": {"number": b.port}}},
                    })],
                )?);
            }
        }
        RouteKind::HttpRoute => {
            let matches: Vec<(&str, String)> = paths.iter().map(|p| ("Exact", p.clone())).collect();
            route = Some(
                routing
                    .route(
                        route_meta(&ingress_name(&ns, &name), &settings.operator_namespace, &[]),
                        &host,
                        section,
                        &matches,
                        &settings.service_name,
                        routing.service_port,
                    )
                    .map_err(internal)?,
            );
            if let Some(b) = &card.spec.backend {
                let port = u16::try_from(b.port).unwrap_or(0);
                backend_route = Some(
                    routing
                        .route(
                            route_meta(&backend_ingress_name(card), &ns, &owner),
                            &host,
                            section,
                            &[("PathPrefix", backend_path(card))],
                            &b.service_name,
                            port,
                        )
                        .map_err(internal)?,
                );
            }
        }
        RouteKind::None => {}
    }

    let served = ServedRoute {
        host: publish.host.to_ascii_lowercase(),
        path_prefix: prefix.clone(),
        legacy_path: publish.legacy_path,
        max_age_seconds: max_age,
        published_at,
        since: since.to_string(),
    };
    Ok(Built {
        configmap,
        ingress,
        backend_ingress,
        route,
        backend_route,
        content_hash: hash,
        key_id: key_id.to_string(),
        key_ids: signers.iter().map(|k| k.kid().to_string()).collect(),
        pending_key: None,
        url,
        served,
    })
}

/// Where an Ingress goes, for which host and tenant settings, and what marks it as whose
/// (cards and directories write their Ingresses through [`ingress_object`]).
pub(crate) struct IngressTarget<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    pub labels: &'a serde_json::Value,
    /// The annotation naming the card or directory the Ingress is written for.
    pub marker: (&'a str, &'a str),
    pub owner: &'a [k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference],
    pub tls_secret: Option<String>,
    /// The lower-cased host.
    pub host: &'a str,
    /// The tenant's Ingress settings (class, annotations), filtered by the operator's policy.
    pub settings: &'a IngressSettings,
}

/// An Ingress for `target` routing `paths`, under the operator's Ingress `policy`.
pub(crate) fn ingress_object(
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
    // Only allow-listed tenant annotations (validation refused the others), plus ours.
    let mut annotations: serde_json::Map<String, serde_json::Value> = settings
        .annotations
        .iter()
        .filter(|(k, _)| policy.annotation_allowed(k))
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
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
    use crate::a2a::Algorithm;

    fn keys() -> Vec<SigningKey> {
        vec![SigningKey::generate(Algorithm::EdDSA, Some("k1")).unwrap()]
    }

    fn settings() -> Settings {
        Settings {
            operator_namespace: "ops".into(),
            service_name: "agentcard-operator".into(),
            service_port_name: "http".into(),
            ingress: IngressPolicy {
                allowed_classes: vec!["nginx".into()],
                ..Default::default()
            },
            routing: Routing::default(),
        }
    }

    fn card(extra: serde_json::Value) -> AgentCard {
        let mut v = json!({
            "apiVersion": "agentcard.dev/v1alpha1",
            "kind": "AgentCard",
            "metadata": {"name": "weather", "namespace": "agents", "uid": "u-1", "generation": 1},
            "spec": {
                "publish": {"host": "weather.example.com"},
                "card": {
                    "name": "W", "description": "D", "version": "1",
                    "supportedInterfaces": [{"url": "https://weather.example.com/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
                    "capabilities": {}, "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
                    "skills": [{"id": "f", "name": "F", "description": "d", "tags": ["t"]}]
                }
            }
        });
        merge(&mut v, extra);
        serde_json::from_value(v).unwrap()
    }

    fn merge(a: &mut serde_json::Value, b: serde_json::Value) {
        match (a, b) {
            (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (a, b) => *a = b,
        }
    }

    fn now() -> jiff::Timestamp {
        "2026-01-01T00:00:00Z".parse().unwrap()
    }

    #[test]
    fn configmap_carries_bytes_owner_labels_and_annotations() {
        let b = build(&card(json!({})), &keys(), &settings(), None, now(), now()).unwrap();
        let cm = &b.configmap;
        assert_eq!(cm.metadata.name.as_deref(), Some("agentcard-weather"));
        assert_eq!(cm.metadata.namespace.as_deref(), Some("agents"));
        let ann = cm.metadata.annotations.clone().unwrap();
        assert_eq!(ann[ANN_HOST], "weather.example.com");
        assert_eq!(ann[ANN_MAX_AGE], "300");
        assert_eq!(ann[ANN_KEY_ID], "k1");
        assert_eq!(ann[ANN_LEGACY_PATH], "false");
        assert_eq!(ann[ANN_PUBLISHED_AT], "2026-01-01T00:00:00Z");
        let body = &cm.data.as_ref().unwrap()[KEY_CARD];
        assert_eq!(ann[ANN_CONTENT_HASH], content_hash(body.as_bytes()));
        assert_eq!(b.content_hash, content_hash(body.as_bytes()));
        let owner = &cm.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
            ("AgentCard", "u-1", Some(true))
        );
        let signed = A2aCard::from_json_lenient(body.as_bytes()).unwrap();
        assert_eq!(signed.signatures.len(), 1);
        let protected = String::from_utf8(
            base64::Engine::decode(
                &base64::engine::general_purpose::URL_SAFE_NO_PAD,
                &signed.signatures[0].protected,
            )
            .unwrap(),
        )
        .unwrap();
        assert!(
            protected.contains("\"jku\":\"https://weather.example.com/.well-known/jwks.json\""),
            "{protected}"
        );
    }

    #[test]
    fn ingress_routes_exact_well_known_paths_with_prefix_and_legacy() {
        let c = card(
            json!({"spec": {"publish": {"pathPrefix": "/team/", "legacyPath": true,
            "ingress": {"className": "nginx", "tlsSecretName": "tls", "annotations": {"cert-manager.io/issuer": "b"}}}}}),
        );
        let b = build(&c, &keys(), &settings(), None, now(), now()).unwrap();
        let ing = serde_json::to_value(b.ingress.as_ref().unwrap()).unwrap();
        assert_eq!(ing["metadata"]["name"], ingress_name("agents", "weather"));
        assert!(ing["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with("agentcard-agents-weather-"));
        assert_eq!(ing["metadata"]["namespace"], "ops");
        assert_eq!(
            ing["metadata"]["annotations"]["cert-manager.io/issuer"],
            "b"
        );
        assert_eq!(ing["metadata"]["annotations"][ANN_CARD], "agents/weather");
        assert_eq!(ing["spec"]["ingressClassName"], "nginx");
        // The card route's TLS Secret is named by the operator, per host.
        assert_eq!(
            ing["spec"]["tls"][0]["secretName"],
            "agentcard-tls-weather.example.com"
        );
        let paths: Vec<(String, String)> = ing["spec"]["rules"][0]["http"]["paths"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["path"].as_str().unwrap().to_string(),
                    p["pathType"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        assert_eq!(
            paths,
            [
                (
                    "/team/.well-known/agent-card.json".to_string(),
                    "Exact".to_string()
                ),
                (
                    "/team/.well-known/jwks.json".to_string(),
                    "Exact".to_string()
                ),
                (
                    "/team/.well-known/agent.json".to_string(),
                    "Exact".to_string()
                ),
            ]
        );
        assert_eq!(
            ing["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["name"],
            "agentcard-operator"
        );
        assert!(
            ing["metadata"]
                .get("ownerReferences")
                .is_none_or(|o| o.as_array().is_some_and(|a| a.is_empty())),
            "cross-namespace: no owner"
        );
        assert_eq!(
            b.url,
            "https://weather.example.com/team/.well-known/agent-card.json"
        );
        assert_eq!(
            b.configmap.metadata.annotations.as_ref().unwrap()[ANN_PATH_PREFIX],
            "/team"
        );
    }

    #[test]
    fn backend_adds_the_public_interface_first_and_its_own_ingress() {
        let c = card(json!({"spec": {"backend": {"serviceName": "agent", "port": 9000}}}));
        let b = build(&c, &keys(), &settings(), None, now(), now()).unwrap();
        let body = &b.configmap.data.as_ref().unwrap()[KEY_CARD];
        let published: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(
            published["supportedInterfaces"][0]["url"],
            "https://weather.example.com/a2a"
        );
        assert_eq!(
            published["supportedInterfaces"].as_array().unwrap().len(),
            1,
            "the same URL is not listed twice"
        );
        let ing = serde_json::to_value(b.backend_ingress.unwrap()).unwrap();
        assert_eq!(ing["metadata"]["namespace"], "agents");
        assert_eq!(
            ing["spec"]["rules"][0]["http"]["paths"][0]["pathType"],
            "Prefix"
        );
        assert_eq!(
            ing["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["port"]["number"],
            9000
        );
    }

    #[test]
    fn ingress_names_are_collision_free_and_fit_63_characters() {
        assert_ne!(
            ingress_name("team-a", "weather"),
            ingress_name("team", "a-weather")
        );
        let long = "x".repeat(253);
        let n = ingress_name(&"n".repeat(63), &long);
        assert!(n.len() <= MAX_INGRESS_NAME, "{n}");
        // 64 bits of hash: a tenant cannot search out a name squatting another namespace's.
        assert_eq!(n.rsplit('-').next().map(str::len), Some(16), "{n}");
        assert_ne!(
            n,
            ingress_name(&"n".repeat(63), &format!("{}y", "x".repeat(252)))
        );
        let c = card(json!({"metadata": {"name": long}}));
        assert!(backend_ingress_name(&c).len() <= MAX_INGRESS_NAME);
        assert!(configmap_name(&c).len() <= 253);
        let b = build(&c, &keys(), &settings(), None, now(), now()).unwrap();
        assert_eq!(
            b.configmap.metadata.annotations.as_ref().unwrap()[ANN_CARD],
            format!("agents/{long}")
        );
    }

    #[test]
    fn an_unchanged_card_rebuilds_to_identical_bytes_and_keeps_its_publication_time() {
        let keys = keys();
        let es = SigningKey::generate(Algorithm::ES256, Some("es")).unwrap();
        let keys_es = vec![es];
        for k in [&keys, &keys_es] {
            let first = build(&card(json!({})), k, &settings(), None, now(), now()).unwrap();
            let later: jiff::Timestamp = "2026-06-01T00:00:00Z".parse().unwrap();
            let mut published = card(json!({}));
            published.status = Some(crate::crd::AgentCardStatus {
                content_hash: Some(first.content_hash.clone()),
                served: Some(first.served.clone()),
                ..Default::default()
            });
            let again = build(
                &published,
                k,
                &settings(),
                Some(&SeenConfigMap::from(first.configmap.clone())),
                now(),
                later,
            )
            .unwrap();
            assert_eq!(
                again.configmap.data, first.configmap.data,
                "randomised signatures are reused"
            );
            assert_eq!(
                again.configmap.metadata.annotations.as_ref().unwrap()[ANN_PUBLISHED_AT],
                "2026-01-01T00:00:00Z"
            );
            assert_eq!(again.served.published_at, "2026-01-01T00:00:00Z");
            // A content change re-signs and moves the publication time.
            let mut edited = card(json!({"spec": {"card": {"description": "New"}}}));
            edited.status = published.status.clone();
            let changed = build(
                &edited,
                k,
                &settings(),
                Some(&SeenConfigMap::from(first.configmap.clone())),
                now(),
                later,
            )
            .unwrap();
            assert_ne!(changed.content_hash, first.content_hash);
            assert_eq!(
                changed.configmap.metadata.annotations.as_ref().unwrap()[ANN_PUBLISHED_AT],
                "2026-06-01T00:00:00Z"
            );
        }
        // A key change re-signs.
        let other = build(&card(json!({})), &keys_es, &settings(), None, now(), now()).unwrap();
        let base = build(&card(json!({})), &keys, &settings(), None, now(), now()).unwrap();
        assert_ne!(other.content_hash, base.content_hash);
    }
}
