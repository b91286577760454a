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

use super::card::*;
use crate::a2a::card::AgentCard as A2aCard;
use crate::a2a::jws::sign_card_reusing;
use crate::a2a::publish::{published_bytes, PublishOptions};
use crate::a2a::SigningKey;
use crate::contract::*;
use crate::controller::config::Settings;
use crate::controller::error::Error;
use crate::controller::routes::routing::{ingress_object, IngressTarget, RouteKind};
use crate::crd::{AgentCard, ServedRoute};
use crate::store::{MetaView, SeenConfigMap};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::DynamicObject;

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
    pub pending_key: Option<crate::controller::keys::signing::Pending>,
    /// The installation's revoked keys (filled by the reconciler): the Signed condition says
    /// the card is not signed with them.
    pub revoked_keys: Vec<String>,
    /// Public URL of the card.
    pub url: String,
    /// The route the card server serves it on.
    pub served: ServedRoute,
    /// What comparing it with the card served before found (filled in by
    /// [`super::compatibility::check`]).
    pub breaking: super::compatibility::Compared,
    /// What is wrong with the lifecycle's successor (`(reason, message)`), a warning.
    pub successor_problem: Option<super::lifecycle::SuccessorProblem>,
    /// When a retired card was retired (filled by the reconciler).
    pub retired_at: Option<String>,
    /// When to look at the card again whatever happens (filled by the reconciler).
    pub recheck: Option<std::time::Duration>,
    /// The revision number of the bytes (filled by [`super::revisions::record`]).
    pub revision: Option<i64>,
    /// The extended card, with `spec.extendedCard` (filled by [`super::extended::build`]).
    pub extended: Option<super::extended::BuiltExtended>,
}

impl Built {
    /// The size of the signed card served, in bytes.
    pub fn served_len(&self) -> usize {
        data_len(&self.configmap, KEY_CARD)
    }
}

/// The size in bytes of `key` in `cm`'s data (0 when absent).
pub(super) fn data_len(cm: &ConfigMap, key: &str) -> usize {
    cm.data
        .as_ref()
        .and_then(|d| d.get(key))
        .map_or(0, String::len)
}

/// The build stage: everything for `card`, which passed validation and holds its claim since
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
    let signed = signed_body(card, signers, previous)?;
    let published_at = published_at(card, previous, &signed.hash, now);
    let max_age = card
        .spec
        .publish
        .cache_max_age_seconds
        .map_or(i64::from(DEFAULT_MAX_AGE), |m| m.clamp(0, 86_400));
    let marks = Marks::of(card);
    let configmap = configmap_object(card, &marks, &signed, &published_at, max_age)?;
    let routes = routes(card, settings, &marks)?;
    let served = ServedRoute {
        host: card.spec.publish.host.to_ascii_lowercase(),
        path_prefix: prefix(card),
        legacy_path: card.spec.publish.legacy_path,
        max_age_seconds: max_age,
        published_at,
        since: since.to_string(),
        lifecycle: None,
        extended_path: super::card::extended_path(card),
    };
    Ok(Built {
        configmap,
        ingress: routes.ingress,
        backend_ingress: routes.backend_ingress,
        route: routes.route,
        backend_route: routes.backend_route,
        content_hash: signed.hash,
        key_id: signed.key_id,
        key_ids: signers.iter().map(|k| k.kid().to_string()).collect(),
        pending_key: None,
        revoked_keys: Vec::new(),
        url: card_url(card),
        served,
        breaking: super::compatibility::Compared::Unchanged,
        revision: None,
        successor_problem: None,
        retired_at: None,
        recheck: None,
        extended: None,
    })
}

/// The bytes served, and what identifies them.
pub(super) struct Signed {
    pub(super) body: String,
    pub(super) hash: String,
    pub(super) key_id: String,
}

/// The effective card signed by `signers` (the previous signatures reused where they still
/// hold, so an unchanged card keeps its bytes), in its published form.
fn signed_body(
    card: &AgentCard,
    signers: &[SigningKey],
    previous: Option<&SeenConfigMap>,
) -> Result<Signed, Error> {
    let previous = previous.and_then(|cm| cm.bytes(KEY_CARD)).map(|b| &b[..]);
    sign_published(card, &effective_card(card), signers, previous)
}

/// `a2a` (a card `card` publishes) signed by `signers`, reusing the signatures of `previous`
/// (the bytes published before) where they still hold, in its published form.
pub(super) fn sign_published(
    card: &AgentCard,
    a2a: &A2aCard,
    signers: &[SigningKey],
    previous: Option<&[u8]>,
) -> Result<Signed, Error> {
    let jku = format!("{}{PATH_JWKS}", public_base(card));
    let previous_signatures = previous
        .and_then(|b| A2aCard::from_json_lenient(b).ok())
        .map(|c| c.signatures)
        .unwrap_or_default();
    let key_id = signers
        .first()
        .map(SigningKey::kid)
        .ok_or_else(|| Error::Internal("no signing key".into()))?;
    let signed = sign_card_reusing(a2a, signers, Some(&jku), &previous_signatures)?;
    let bytes = published_bytes(
        &signed,
        PublishOptions {
            v03_compat: card.spec.publish.v03_compat,
        },
    )
    .map_err(|e| {
        Error::InvalidSpec(crate::a2a::Problems(vec![crate::a2a::Problem::error(
            "spec.publish.v03Compat",
            e.to_string(),
        )]))
    })?;
    let body = String::from_utf8(bytes).unwrap_or_default();
    Ok(Signed {
        hash: content_hash(body.as_bytes()),
        body,
        key_id: key_id.to_string(),
    })
}

/// When the bytes hashing to `hash` were first published: the publication time moves only
/// with the bytes. Taken from the status (written by the operator alone) when it confirms
/// these bytes, else from the ConfigMap already holding them (a status write that failed must
/// not make every retry a new ConfigMap version), else `now`.
fn published_at(
    card: &AgentCard,
    previous: Option<&SeenConfigMap>,
    hash: &str,
    now: jiff::Timestamp,
) -> String {
    let status = card.status.as_ref();
    if let (Some(h), Some(served)) = (
        status.and_then(|s| s.content_hash.as_ref()),
        status.and_then(|s| s.served.as_ref()),
    ) {
        if h == hash {
            return served.published_at.clone();
        }
    }
    let previous_ann = |key: &str| previous.and_then(|cm| cm.seen.annotation(key));
    match (
        previous_ann(ANN_CONTENT_HASH),
        previous_ann(ANN_PUBLISHED_AT),
    ) {
        (Some(h), Some(at)) if h == hash => at.to_string(),
        _ => now.to_string(),
    }
}

/// What marks an object as written for the card: labels, the card annotation, its owner.
pub(super) struct Marks {
    pub(super) labels: serde_json::Value,
    pub(super) card_ref: String,
    pub(super) owner: Vec<OwnerReference>,
}

impl Marks {
    pub(super) fn of(card: &AgentCard) -> Marks {
        Marks {
            labels: json!({
                LABEL_MANAGED_BY: MANAGER,
                LABEL_CARD_UID: card.uid().unwrap_or_default(),
            }),
            card_ref: card_key(card),
            owner: card
                .controller_owner_ref(&())
                .map(|o| vec![o])
                .unwrap_or_default(),
        }
    }
}

/// The ConfigMap holding the served bytes, owned by the card, with the informational
/// annotations.
fn configmap_object(
    card: &AgentCard,
    marks: &Marks,
    signed: &Signed,
    published_at: &str,
    max_age: i64,
) -> Result<ConfigMap, Error> {
    let publish = &card.spec.publish;
    let mut labels = marks.labels.clone();
    labels[LABEL_CONTENT] = json!(CONTENT_CARD);
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": configmap_name(card),
            "namespace": card.namespace().unwrap_or_default(),
            "labels": labels,
            "annotations": {
                ANN_CARD: marks.card_ref,
                ANN_HOST: publish.host,
                ANN_PATH_PREFIX: prefix(card),
                ANN_LEGACY_PATH: publish.legacy_path.to_string(),
                ANN_CONTENT_HASH: signed.hash,
                ANN_MAX_AGE: max_age.to_string(),
                ANN_KEY_ID: signed.key_id,
                ANN_PUBLISHED_AT: published_at,
            },
            "ownerReferences": marks.owner,
        },
        "data": {KEY_CARD: signed.body},
    }))
    .map_err(|e| Error::Internal(format!("ConfigMap: {e}")))
}

/// What routes the card: by the operator's routing setting, Ingresses or HTTPRoutes (or none).
#[derive(Default)]
struct Routes {
    ingress: Option<Ingress>,
    backend_ingress: Option<Ingress>,
    route: Option<DynamicObject>,
    backend_route: Option<DynamicObject>,
}

/// The card's well-known paths: the card, the JWKS, the host's did:web document (at the
/// host's root: one DID per host, the same document whichever card routes it), when asked
/// the legacy card path, and the REST `extendedAgentCard` path when the operator answers it.
fn well_known_paths(card: &AgentCard) -> Vec<String> {
    let prefix = prefix(card);
    let mut paths = vec![
        format!("{prefix}{PATH_CARD}"),
        format!("{prefix}{PATH_JWKS}"),
        PATH_DID.to_string(),
    ];
    if card.spec.publish.legacy_path {
        paths.push(format!("{prefix}{PATH_LEGACY}"));
    }
    // More specific than the backend's prefix route, so it wins over it on the same host.
    paths.extend(super::card::extended_path(card));
    paths
}

fn routes(card: &AgentCard, settings: &Settings, marks: &Marks) -> Result<Routes, Error> {
    match settings.routing.kind {
        RouteKind::Ingress => ingress_routes(card, settings, marks),
        RouteKind::HttpRoute => http_routes(card, settings, marks),
        RouteKind::None => Ok(Routes::default()),
    }
}

/// The card route Ingress in the operator's namespace (Exact well-known paths to the card
/// server), and with `spec.backend` the backend Ingress in the card's namespace.
fn ingress_routes(card: &AgentCard, settings: &Settings, marks: &Marks) -> Result<Routes, Error> {
    let (ns, name) = (card.namespace().unwrap_or_default(), card.name_any());
    let publish = &card.spec.publish;
    let host = publish.host.to_ascii_lowercase();
    let backend = json!({"service": {"name": settings.service_name, "port": {"name": settings.service_port_name}}});
    let rule_paths: Vec<_> = well_known_paths(card)
        .iter()
        .map(|p| json!({"path": p, "pathType": "Exact", "backend": backend}))
        .collect();
    let card_route = ingress_object(
        IngressTarget {
            name: &ingress_name(&ns, &name),
            namespace: &settings.operator_namespace,
            labels: &marks.labels,
            marker: (ANN_CARD, &marks.card_ref),
            owner: &[],
            tls_secret: settings.ingress.tls_secret(&host),
            host: &host,
            settings: &publish.ingress,
        },
        &settings.ingress,
        rule_paths,
    )?;
    let backend_ingress = match &card.spec.backend {
        Some(b) => Some(ingress_object(
            IngressTarget {
                name: &backend_ingress_name(card),
                namespace: &ns,
                labels: &marks.labels,
                marker: (ANN_CARD, &marks.card_ref),
                owner: &marks.owner,
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
        )?),
        None => None,
    };
    Ok(Routes {
        ingress: Some(card_route),
        backend_ingress,
        ..Routes::default()
    })
}

/// The card route HTTPRoute in the operator's namespace (Exact well-known paths to the card
/// server's Service), and with `spec.backend` the backend HTTPRoute in the card's namespace.
fn http_routes(card: &AgentCard, settings: &Settings, marks: &Marks) -> Result<Routes, Error> {
    let (ns, name) = (card.namespace().unwrap_or_default(), card.name_any());
    let routing = &settings.routing;
    let host = card.spec.publish.host.to_ascii_lowercase();
    let section = card.spec.publish.section_name.as_deref();
    let meta = |name: &str, namespace: &str, owner: &[OwnerReference]| {
        json!({"name": name, "namespace": namespace, "labels": marks.labels,
               "annotations": {ANN_CARD: marks.card_ref}, "ownerReferences": owner})
    };
    let internal = |e: serde_json::Error| Error::Internal(format!("HTTPRoute: {e}"));
    let matches: Vec<(&str, String)> = well_known_paths(card)
        .into_iter()
        .map(|p| ("Exact", p))
        .collect();
    let route = routing
        .route(
            meta(&ingress_name(&ns, &name), &settings.operator_namespace, &[]),
            &host,
            section,
            &matches,
            &settings.service_name,
            routing.service_port,
        )
        .map_err(internal)?;
    let backend_route = match &card.spec.backend {
        Some(b) => Some(
            routing
                .route(
                    meta(&backend_ingress_name(card), &ns, &marks.owner),
                    &host,
                    section,
                    &[("PathPrefix", backend_path(card))],
                    &b.service_name,
                    u16::try_from(b.port).unwrap_or(0),
                )
                .map_err(internal)?,
        ),
        None => None,
    };
    Ok(Routes {
        route: Some(route),
        backend_route,
        ..Routes::default()
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::a2a::Algorithm;
    use crate::controller::routes::policy::IngressPolicy;
    use crate::controller::routes::routing::{Routing, MAX_INGRESS_NAME};

    fn keys() -> Vec<SigningKey> {
        vec![SigningKey::generate(Algorithm::EdDSA, Some("k1")).unwrap()]
    }

    /// The settings of an operator in namespace `ops` with the nginx class allowed.
    pub(crate) fn settings() -> Settings {
        Settings {
            operator_namespace: "ops".into(),
            service_name: "agentcard-operator".into(),
            service_port_name: "http".into(),
            ingress: IngressPolicy {
                allowed_classes: vec!["nginx".into()],
                allowed_annotations: vec!["cert-manager.io/*".into()],
                annotations: [("example.com/platform".to_string(), "yes".to_string())].into(),
                ..Default::default()
            },
            routing: Routing::default(),
            retired_retention_seconds: 60,
        }
    }

    /// A card `weather` of namespace `agents` with `extra` merged over it.
    pub(crate) fn card(extra: serde_json::Value) -> AgentCard {
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

    /// The time every build of these tests runs at.
    pub(crate) fn now() -> jiff::Timestamp {
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
    fn the_operator_takes_the_rest_extended_path_only_where_it_knows_the_answer() {
        let rest = json!({"serviceName": "w", "port": 8080, "protocolBinding": "HTTP+JSON"});
        let auth = json!({"serviceAccount": {"audiences": ["agents"]}});
        let cases = [
            // No backend, or a JSON-RPC one: no REST path to take.
            (json!({}), None),
            (json!({"backend": {"serviceName": "w", "port": 8080}}), None),
            // A REST backend with no extended card: the operator answers the A2A error.
            (
                json!({"backend": rest}),
                Some("/team/a2a/extendedAgentCard"),
            ),
            // With an extended card and auth: the operator answers it.
            (
                json!({"backend": rest, "extendedCard": {"description": "more", "auth": auth}}),
                Some("/team/a2a/extendedAgentCard"),
            ),
            // An extended card without auth, or a public card claiming one by itself: the
            // agent's to answer.
            (
                json!({"backend": rest, "extendedCard": {"description": "more"}}),
                None,
            ),
            (
                json!({"backend": rest, "card": {"capabilities": {"extendedAgentCard": true}}}),
                None,
            ),
        ];
        for (spec, want) in cases {
            let mut spec = spec;
            spec["publish"] = json!({"pathPrefix": "/team"});
            let c = card(json!({ "spec": spec }));
            let b = build(&c, &keys(), &settings(), None, now(), now()).unwrap();
            assert_eq!(b.served.extended_path.as_deref(), want, "{spec}");
            let ing = serde_json::to_value(b.ingress.as_ref().unwrap()).unwrap();
            let exact: Vec<&str> = ing["spec"]["rules"][0]["http"]["paths"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|p| p["pathType"] == "Exact")
                .map(|p| p["path"].as_str().unwrap())
                .collect();
            assert_eq!(
                exact.contains(&"/team/a2a/extendedAgentCard"),
                want.is_some(),
                "{spec}: {exact:?}"
            );
        }
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
        // The platform's annotations are on every route it writes.
        assert_eq!(
            ing["metadata"]["annotations"]["example.com/platform"],
            "yes"
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
                ("/.well-known/did.json".to_string(), "Exact".to_string()),
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
