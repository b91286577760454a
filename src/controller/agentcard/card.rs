//! What a card asks for, derived from its spec alone: the names of what is written for it, its
//! paths and public URLs, and the A2A card it publishes (`spec.card`, or the imported card,
//! with overrides and the backend's public interface). Pure; read by every stage of the
//! pipeline, so it sits below them all.

use kube::ResourceExt;

use crate::a2a::card::{AgentCard as A2aCard, AgentInterface};
use crate::contract::*;
use crate::controller::routes::routing::MAX_INGRESS_NAME;
use crate::crd::AgentCard;

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
        if let Some(d) = &card.spec.defaults {
            apply_defaults(&mut a2a, d);
        }
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
    if card.spec.extended_card.is_some() {
        a2a.capabilities.extended_agent_card = Some(true);
    }
    a2a
}

/// The extended card, with `spec.extendedCard`: `public` (the card's [`effective_card`]) with
/// the additions over it ([`crate::a2a::extended::extend`]); the problems name
/// `spec.extendedCard.…` paths.
pub fn extended_card(
    card: &AgentCard,
    public: &A2aCard,
) -> Option<Result<A2aCard, crate::a2a::Problems>> {
    let overlay = card.spec.extended_card.as_deref()?.overlay();
    Some(
        crate::a2a::extended::extend(public, &overlay)
            .map_err(|p| crate::a2a::Problems(p).with_prefix(EXTENDED_SPEC)),
    )
}

/// Where the extended card's additions are written in an AgentCard.
pub const EXTENDED_SPEC: &str = "spec.extendedCard";

/// `internal` (the agent's own URL, e.g. `http://echo.team.svc:9999/rest`) under `public` (the
/// backend's public base): `https://<host><backend path>/rest`; the agent's root is the base.
fn public_interface_url(public: &str, internal: &str) -> String {
    let path = url::Url::parse(internal)
        .map(|u| u.path().trim_end_matches('/').to_string())
        .unwrap_or_default();
    format!("{public}{path}")
}

/// Fill the fields an imported card leaves empty from `spec.defaults`.
fn apply_defaults(a2a: &mut A2aCard, d: &crate::crd::Defaults) {
    let fill = |field: &mut String, value: &Option<String>| {
        if field.trim().is_empty() {
            if let Some(v) = value {
                field.clone_from(v);
            }
        }
    };
    fill(&mut a2a.description, &d.description);
    fill(&mut a2a.version, &d.version);
    if a2a.provider.is_none() {
        a2a.provider.clone_from(&d.provider);
    }
    if a2a.documentation_url.is_none() {
        a2a.documentation_url.clone_from(&d.documentation_url);
    }
    if a2a.icon_url.is_none() {
        a2a.icon_url.clone_from(&d.icon_url);
    }
    if a2a.skills.is_empty() {
        a2a.skills.clone_from(&d.skills);
    }
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
    tag_skills(&mut a2a.skills, o);
}

/// Add `spec.overrides.skillTags` to `skills` (the imported card's, and the skills its imported
/// extended card adds).
pub fn tag_skills(skills: &mut [crate::a2a::card::AgentSkill], o: &crate::crd::Overrides) {
    for skill in skills {
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

/// The path on which the operator answers the REST binding's `GetExtendedAgentCard` for the
/// card (`<backend path>/extendedAgentCard`), or `None` where the agent answers it. Only a REST
/// backend (`spec.backend.protocolBinding: HTTP+JSON`) of a written (not imported) card has
/// one, and the operator takes it when it knows the answer: the extended card with
/// `spec.extendedCard.auth` (it checks who calls), or, with no extended card and a public card
/// that does not claim one, the A2A `ExtendedAgentCardNotConfiguredError`. An extended card
/// without `auth`, or a public card claiming `capabilities.extendedAgentCard` by itself, is
/// the agent's to serve.
pub fn extended_path(card: &AgentCard) -> Option<String> {
    let backend = card.spec.backend.as_deref()?;
    if backend.protocol_binding.as_deref() != Some(BINDING_REST) || card.spec.source.is_some() {
        return None;
    }
    let operator_answers = match card.spec.extended_card.as_deref() {
        Some(extended) => extended.auth.is_some(),
        None => {
            let claimed = card.spec.card.as_ref();
            claimed.and_then(|c| c.capabilities.extended_agent_card) != Some(true)
        }
    };
    operator_answers.then(|| format!("{}{PATH_EXTENDED}", backend_path(card)))
}

/// Name of the card's ConfigMap.
pub fn configmap_name(card: &AgentCard) -> String {
    card_configmap_name(&card.name_any())
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_fill_only_what_the_imported_card_leaves_empty_and_overrides_win() {
        let card: AgentCard = serde_json::from_value(json!({
            "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentCard",
            "metadata": {"namespace": "team", "name": "helper"},
            "spec": {
                "source": {"service": {"name": "helper", "port": 8080}},
                "publish": {"host": "helper.example.com"},
                "card": {"name": "Helper", "description": "", "version": "2.0.0",
                         "supportedInterfaces": [], "capabilities": {}, "skills": []},
                "defaults": {
                    "description": "What kagent says of it.", "version": "0.1.0",
                    "provider": {"organization": "Platform", "url": "https://p.example.com"},
                    "documentationUrl": "https://docs.example.com/helper",
                    "skills": [{"id": "pods", "name": "Pods", "description": "Lists pods.", "tags": ["k8s"]}]
                },
                "overrides": {"documentationUrl": "https://override.example.com"}
            }
        }))
        .unwrap();
        let a2a = effective_card(&card);
        assert_eq!(a2a.description, "What kagent says of it.");
        assert_eq!(
            a2a.version, "2.0.0",
            "the served card's own version is kept"
        );
        assert_eq!(a2a.provider.unwrap().organization, "Platform");
        assert_eq!(a2a.skills.len(), 1);
        assert_eq!(
            a2a.documentation_url.as_deref(),
            Some("https://override.example.com")
        );
        // A declared card (no source) takes no defaults.
        let mut declared = card.clone();
        declared.spec.source = None;
        assert_eq!(effective_card(&declared).description, "");
    }
}
