//! The authenticated extended card (A2A v1.0 `GetExtendedAgentCard`): what callers who prove
//! who they are get beyond the public card.
//!
//! The extended card is never written whole: it is the public card with an [`Overlay`] laid
//! over it ([`extend`]), so it is a superset of the public card by construction. Data flows
//! public card + overlay → [`extend`] (collisions refused, paths relative to the overlay) →
//! [`validate`](crate::validate::validate) of the result (an error in an added part is named
//! where the overlay wrote it, [`overlay_path`]) → [`missing`] (the superset check, a safety net
//! for whatever produced the two cards) → signing, like the public card.

use std::collections::BTreeMap;

use crate::card::{AgentCard, AgentExtension, AgentInterface, AgentSkill, SecurityScheme};
use crate::report::{PathBuf, Problem};

/// What the extended card adds to the public one. Everything here is added; nothing of the
/// public card can be taken away or changed, except the description, which the extended card
/// may tell at greater length.
#[derive(Clone, Copy, Debug)]
pub struct Overlay<'a> {
    /// Replaces the public description (a longer one, for callers who may see everything).
    pub description: Option<&'a str>,
    /// Skills added after the public card's; an id the public card has is refused.
    pub skills: &'a [AgentSkill],
    /// Interfaces added after the public card's; a URL the public card lists is refused.
    pub supported_interfaces: &'a [AgentInterface],
    /// Security schemes added to the public card's; a name the public card uses is refused.
    pub security_schemes: &'a BTreeMap<String, SecurityScheme>,
    /// Extensions added to `capabilities.extensions`; a URI the public card lists is refused.
    pub extensions: &'a [AgentExtension],
}

/// No security schemes: what an overlay without any points at.
static NO_SCHEMES: BTreeMap<String, SecurityScheme> = BTreeMap::new();

impl Default for Overlay<'_> {
    fn default() -> Self {
        Overlay {
            description: None,
            skills: &[],
            supported_interfaces: &[],
            security_schemes: &NO_SCHEMES,
            extensions: &[],
        }
    }
}

/// The extended card: `public` with `overlay` over it and `capabilities.extendedAgentCard` set
/// (a caller holding the extended card sees the same capabilities). Problems name the overlay's
/// own paths (`skills[0].id`); the caller adds where the overlay lives.
pub fn extend(public: &AgentCard, overlay: &Overlay<'_>) -> Result<AgentCard, Vec<Problem>> {
    let root = PathBuf::default();
    let mut problems = Vec::new();
    for (i, skill) in overlay.skills.iter().enumerate() {
        if public.skills.iter().any(|s| s.id == skill.id) {
            problems.push(Problem::error(
                root.field("skills").index(i).field("id").as_str(),
                format!("{:?} is a skill of the public card already", skill.id),
            ));
        }
    }
    for (i, iface) in overlay.supported_interfaces.iter().enumerate() {
        if public
            .supported_interfaces
            .iter()
            .any(|p| p.url == iface.url)
        {
            problems.push(Problem::error(
                root.field("supportedInterfaces")
                    .index(i)
                    .field("url")
                    .as_str(),
                format!("{:?} is an interface of the public card already", iface.url),
            ));
        }
    }
    for name in overlay.security_schemes.keys() {
        if public.security_schemes.contains_key(name) {
            problems.push(Problem::error(
                root.field("securitySchemes").field(name).as_str(),
                "a security scheme of the public card already has this name",
            ));
        }
    }
    for (i, ext) in overlay.extensions.iter().enumerate() {
        if public
            .capabilities
            .extensions
            .iter()
            .any(|e| e.uri == ext.uri)
        {
            problems.push(Problem::error(
                root.field("extensions").index(i).field("uri").as_str(),
                format!("{:?} is an extension of the public card already", ext.uri),
            ));
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let mut card = public.clone();
    card.signatures.clear();
    if let Some(d) = overlay.description.filter(|d| !d.trim().is_empty()) {
        card.description = d.to_string();
    }
    card.skills.extend(overlay.skills.iter().cloned());
    card.supported_interfaces
        .extend(overlay.supported_interfaces.iter().cloned());
    card.security_schemes.extend(
        overlay
            .security_schemes
            .iter()
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    card.capabilities
        .extensions
        .extend(overlay.extensions.iter().cloned());
    card.capabilities.extended_agent_card = Some(true);
    Ok(card)
}

/// Where a problem the validator found in the extended card (a path in the whole card) lies in
/// the overlay, when it is in a part the overlay added: `skills[4].name` of a card whose public
/// part has 3 skills is the overlay's `skills[1].name`. `None` when the problem is in the public
/// part (the public card's own validation reports it).
pub fn overlay_path(public: &AgentCard, overlay: &Overlay<'_>, path: &str) -> Option<String> {
    let indexed = |field: &str, public_len: usize| -> Option<Option<String>> {
        let rest = path.strip_prefix(field)?.strip_prefix('[')?;
        let (index, tail) = rest.split_once(']')?;
        let i: usize = index.parse().ok()?;
        Some(
            i.checked_sub(public_len)
                .map(|j| format!("{field}[{j}]{tail}")),
        )
    };
    if let Some(found) = indexed("skills", public.skills.len()) {
        return found;
    }
    if let Some(found) = indexed("supportedInterfaces", public.supported_interfaces.len()) {
        return found;
    }
    if let Some(found) = indexed(
        "capabilities.extensions",
        public.capabilities.extensions.len(),
    ) {
        return found.map(|p| p.trim_start_matches("capabilities.").to_string());
    }
    if path == "description" && overlay.description.is_some() {
        return Some(path.to_string());
    }
    overlay
        .security_schemes
        .keys()
        .map(|name| PathBuf::default().field("securitySchemes").field(name))
        .find(|scheme| {
            path.strip_prefix(scheme.as_str())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
        })
        .map(|_| path.to_string())
}

/// What of `public` the `extended` card lacks or changes: every skill (by id), interface,
/// security scheme (by name), security requirement and extension of the public card must be in
/// the extended card unchanged, with its name, version, provider, modes and capabilities.
/// Empty when `extended` is a superset.
pub fn missing(public: &AgentCard, extended: &AgentCard) -> Vec<Problem> {
    let root = PathBuf::default();
    let mut out = Vec::new();
    let mut differs = |path: PathBuf, what: &str| {
        out.push(Problem::error(
            path.as_str(),
            format!("the extended card must carry the public card's {what} unchanged"),
        ));
    };
    if public.name != extended.name {
        differs(root.field("name"), "name");
    }
    if public.version != extended.version {
        differs(root.field("version"), "version");
    }
    if public.provider != extended.provider {
        differs(root.field("provider"), "provider");
    }
    if public.default_input_modes != extended.default_input_modes {
        differs(root.field("defaultInputModes"), "default input modes");
    }
    if public.default_output_modes != extended.default_output_modes {
        differs(root.field("defaultOutputModes"), "default output modes");
    }
    if public.security_requirements != extended.security_requirements {
        differs(root.field("securityRequirements"), "security requirements");
    }
    for (i, skill) in public.skills.iter().enumerate() {
        if !extended.skills.iter().any(|s| s == skill) {
            differs(root.field("skills").index(i), "skill");
        }
    }
    for (i, iface) in public.supported_interfaces.iter().enumerate() {
        if !extended.supported_interfaces.contains(iface) {
            differs(root.field("supportedInterfaces").index(i), "interface");
        }
    }
    for (name, scheme) in &public.security_schemes {
        if extended.security_schemes.get(name) != Some(scheme) {
            differs(root.field("securitySchemes").field(name), "security scheme");
        }
    }
    let (was, now) = (&public.capabilities, &extended.capabilities);
    for (i, ext) in was.extensions.iter().enumerate() {
        if !now.extensions.contains(ext) {
            differs(
                root.field("capabilities").field("extensions").index(i),
                "extension",
            );
        }
    }
    if was.streaming != now.streaming || was.push_notifications != now.push_notifications {
        differs(root.field("capabilities"), "capabilities");
    }
    out
}

/// What an extended card a source serves adds to its public card: the [`Overlay`] that,
/// laid over the public card, gives it back. Used to import an agent's extended card.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Additions {
    /// The extended card's description, when it differs.
    pub description: Option<String>,
    /// Skills whose ids the public card does not have.
    pub skills: Vec<AgentSkill>,
    /// Interfaces the public card does not list.
    pub supported_interfaces: Vec<AgentInterface>,
    /// Security schemes under names the public card does not use.
    pub security_schemes: BTreeMap<String, SecurityScheme>,
    /// Extensions the public card does not list.
    pub extensions: Vec<AgentExtension>,
}

impl Additions {
    /// The additions as an overlay.
    pub fn overlay(&self) -> Overlay<'_> {
        Overlay {
            description: self.description.as_deref(),
            skills: &self.skills,
            supported_interfaces: &self.supported_interfaces,
            security_schemes: &self.security_schemes,
            extensions: &self.extensions,
        }
    }
}

/// What `extended` adds to `public`; the [`missing`] problems when it is not a superset of it.
pub fn additions(public: &AgentCard, extended: &AgentCard) -> Result<Additions, Vec<Problem>> {
    let lacks = missing(public, extended);
    if !lacks.is_empty() {
        return Err(lacks);
    }
    Ok(Additions {
        description: (extended.description != public.description)
            .then(|| extended.description.clone()),
        skills: extended
            .skills
            .iter()
            .filter(|s| !public.skills.iter().any(|p| p.id == s.id))
            .cloned()
            .collect(),
        supported_interfaces: extended
            .supported_interfaces
            .iter()
            .filter(|i| !public.supported_interfaces.contains(i))
            .cloned()
            .collect(),
        security_schemes: extended
            .security_schemes
            .iter()
            .filter(|(name, _)| !public.security_schemes.contains_key(*name))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        extensions: extended
            .capabilities
            .extensions
            .iter()
            .filter(|e| !public.capabilities.extensions.contains(e))
            .cloned()
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::validate;
    use serde_json::json;

    fn public() -> AgentCard {
        serde_json::from_value(json!({
            "name": "Weather", "description": "Forecasts.", "version": "1.0.0",
            "supportedInterfaces": [{"url": "https://w.example.com/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
            "capabilities": {"streaming": true, "extensions": [{"uri": "https://example.com/ext/a"}]},
            "securitySchemes": {"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}},
            "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
            "skills": [{"id": "forecast", "name": "Forecast", "description": "d", "tags": ["weather"]}]
        }))
        .unwrap()
    }

    fn skill(id: &str) -> AgentSkill {
        serde_json::from_value(json!({"id": id, "name": "N", "description": "d", "tags": ["t"]}))
            .unwrap()
    }

    #[test]
    fn the_overlay_adds_and_sets_the_capability_and_the_result_is_a_superset() {
        let p = public();
        let skills = [skill("history")];
        let ifaces: Vec<AgentInterface> = serde_json::from_value(json!([
            {"url": "https://w.example.com/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}
        ]))
        .unwrap();
        let schemes: BTreeMap<String, SecurityScheme> = serde_json::from_value(
            json!({"mtls": {"mtlsSecurityScheme": {"description": "internal callers"}}}),
        )
        .unwrap();
        let exts: Vec<AgentExtension> =
            serde_json::from_value(json!([{"uri": "https://example.com/ext/b", "required": true}]))
                .unwrap();
        let o = Overlay {
            description: Some("Forecasts, and the archive."),
            skills: &skills,
            supported_interfaces: &ifaces,
            security_schemes: &schemes,
            extensions: &exts,
        };
        let e = extend(&p, &o).unwrap();
        assert_eq!(e.description, "Forecasts, and the archive.");
        let ids: Vec<&str> = e.skills.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["forecast", "history"]);
        assert_eq!(e.supported_interfaces.len(), 2);
        assert_eq!(
            e.supported_interfaces[0], p.supported_interfaces[0],
            "the preferred stays first"
        );
        assert!(
            e.security_schemes.contains_key("bearer") && e.security_schemes.contains_key("mtls")
        );
        assert_eq!(e.capabilities.extensions.len(), 2);
        assert_eq!(e.capabilities.extended_agent_card, Some(true));
        assert!(missing(&p, &e).is_empty());
        assert!(validate(&e).is_empty(), "{:?}", validate(&e));
    }

    #[test]
    fn collisions_with_the_public_card_are_refused_at_the_overlays_paths() {
        let p = public();
        let skills = [skill("other"), skill("forecast")];
        let ifaces = p.supported_interfaces.clone();
        let schemes = p.security_schemes.clone();
        let exts = p.capabilities.extensions.clone();
        let o = Overlay {
            description: None,
            skills: &skills,
            supported_interfaces: &ifaces,
            security_schemes: &schemes,
            extensions: &exts,
        };
        let paths: Vec<String> = extend(&p, &o)
            .unwrap_err()
            .into_iter()
            .map(|e| e.path)
            .collect();
        assert_eq!(
            paths,
            [
                "skills[1].id",
                "supportedInterfaces[0].url",
                "securitySchemes.bearer",
                "extensions[0].uri"
            ]
        );
    }

    #[test]
    fn anything_public_the_extended_card_lacks_or_changes_is_named() {
        let p = public();
        let mut e = extend(&p, &Overlay::default()).unwrap();
        assert!(missing(&p, &e).is_empty());
        e.skills[0].description = "changed".into();
        e.supported_interfaces.clear();
        e.security_schemes.clear();
        e.capabilities.streaming = None;
        e.version = "2".into();
        let paths: Vec<String> = missing(&p, &e).into_iter().map(|m| m.path).collect();
        assert_eq!(
            paths,
            [
                "version",
                "skills[0]",
                "supportedInterfaces[0]",
                "securitySchemes.bearer",
                "capabilities"
            ]
        );
    }

    #[test]
    fn problems_of_added_parts_are_named_where_the_overlay_wrote_them() {
        let p = public();
        let mut bad = skill("history");
        bad.name = String::new();
        let skills = [skill("a"), bad];
        let schemes: BTreeMap<String, SecurityScheme> = serde_json::from_value(
            json!({"internal key": {"apiKeySecurityScheme": {"location": "body", "name": "k"}}}),
        )
        .unwrap();
        let o = Overlay {
            skills: &skills,
            security_schemes: &schemes,
            ..Default::default()
        };
        let e = extend(&p, &o).unwrap();
        let found: Vec<Option<String>> = validate(&e)
            .iter()
            .map(|pr| overlay_path(&p, &o, &pr.path))
            .collect();
        assert!(
            found.contains(&Some("skills[1].name".to_string())),
            "{found:?}"
        );
        assert!(
            found.contains(&Some(
                "securitySchemes[\"internal key\"].apiKeySecurityScheme.location".to_string()
            )),
            "{found:?}"
        );
        assert_eq!(
            overlay_path(&p, &o, "skills[0].name"),
            None,
            "a public skill"
        );
        assert_eq!(overlay_path(&p, &o, "name"), None);
    }

    #[test]
    fn the_additions_of_an_extended_card_give_it_back_over_the_public_card() {
        let public = public();
        let mut served: AgentCard = serde_json::from_value(json!({
            "name": "Weather", "description": "Forecasts and the archive.", "version": "1.0.0",
            "supportedInterfaces": [
                {"url": "https://w.example.com/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
                {"url": "https://w.example.com/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}],
            "capabilities": {"streaming": true, "extendedAgentCard": true, "extensions": [
                {"uri": "https://example.com/ext/a"}, {"uri": "https://example.com/ext/b"}]},
            "securitySchemes": {"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}},
                                "mtls": {"mtlsSecurityScheme": {}}},
            "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
            "skills": [{"id": "forecast", "name": "Forecast", "description": "d", "tags": ["weather"]},
                       {"id": "archive", "name": "Archive", "description": "d", "tags": ["weather"]}]
        }))
        .unwrap();
        let a = additions(&public, &served).unwrap();
        assert_eq!(a.description.as_deref(), Some("Forecasts and the archive."));
        assert_eq!(a.skills.len(), 1);
        assert_eq!(a.supported_interfaces.len(), 1);
        assert_eq!(a.security_schemes.keys().collect::<Vec<_>>(), ["mtls"]);
        assert_eq!(a.extensions.len(), 1);
        let rebuilt = extend(&public, &a.overlay()).unwrap();
        assert_eq!(rebuilt, served);
        // An extended card that changes a public skill is not a superset: refused, named.
        served.skills[0].description = "changed".into();
        let problems = additions(&public, &served).unwrap_err();
        assert_eq!(problems[0].path, "skills[0]");
    }
}
