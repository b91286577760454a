//! Breaking changes between two versions of a card: what a client that worked with the old
//! card could no longer do with the new one.
//!
//! [`findings`] compares the last published card with an edit (pure) and lists each change
//! with the JSON path where it shows (paths index the card the thing is in: a removed skill by
//! its place in the old card, a kept one's narrowed modes by its place in the new). The
//! controller turns them into the `Compatible` condition and decides, by
//! `spec.publish.compatibility`, whether the edit is published ([`major_bumped`] for
//! `RequireMajorVersion`).

use std::collections::{BTreeMap, BTreeSet};

use super::card::{AgentCard, AgentSkill, SecurityRequirement};

/// What kind of break a finding is (a bounded label for Events and tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A skill the old card offered is gone.
    SkillRemoved,
    /// An interface (protocol binding and version) is gone.
    InterfaceRemoved,
    /// An interface's URL moved.
    InterfaceUrlChanged,
    /// An input or output media type is no longer accepted.
    ModeRemoved,
    /// Callers must now present credentials they did not need before.
    SecurityTightened,
    /// A capability (streaming, push notifications, extended card, an extension) is off, or
    /// an extension became required.
    CapabilityRemoved,
}

impl Kind {
    /// The kind's name, as written in condition messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::SkillRemoved => "SkillRemoved",
            Kind::InterfaceRemoved => "InterfaceRemoved",
            Kind::InterfaceUrlChanged => "InterfaceUrlChanged",
            Kind::ModeRemoved => "ModeRemoved",
            Kind::SecurityTightened => "SecurityTightened",
            Kind::CapabilityRemoved => "CapabilityRemoved",
        }
    }
}

/// One breaking change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// What kind of break.
    pub kind: Kind,
    /// JSON path of what changed, e.g. `$.skills[2]`.
    pub path: String,
    /// What changed, for people.
    pub message: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} ({})",
            self.path,
            self.message,
            self.kind.as_str()
        )
    }
}

fn finding(kind: Kind, path: String, message: String) -> Finding {
    Finding {
        kind,
        path,
        message,
    }
}

/// Every breaking change from `old` (the last published card) to `new` (pure).
pub fn findings(old: &AgentCard, new: &AgentCard) -> Vec<Finding> {
    let mut out = Vec::new();
    skills(old, new, &mut out);
    interfaces(old, new, &mut out);
    modes(
        "$.defaultInputModes",
        &old.default_input_modes,
        &new.default_input_modes,
        &mut out,
    );
    modes(
        "$.defaultOutputModes",
        &old.default_output_modes,
        &new.default_output_modes,
        &mut out,
    );
    security(
        "$.securityRequirements",
        &old.security_requirements,
        &new.security_requirements,
        &mut out,
    );
    capabilities(old, new, &mut out);
    out
}

fn skills(old: &AgentCard, new: &AgentCard, out: &mut Vec<Finding>) {
    let position: BTreeMap<&str, usize> = new
        .skills
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    for (i, was) in old.skills.iter().enumerate() {
        let Some(&j) = position.get(was.id.as_str()) else {
            out.push(finding(
                Kind::SkillRemoved,
                format!("$.skills[{i}]"),
                format!("skill {:?} removed", was.id),
            ));
            continue;
        };
        let now = &new.skills[j];
        let path = format!("$.skills[{j}]");
        modes(
            &format!("{path}.inputModes"),
            &effective(&was.input_modes, &old.default_input_modes),
            &effective(&now.input_modes, &new.default_input_modes),
            out,
        );
        modes(
            &format!("{path}.outputModes"),
            &effective(&was.output_modes, &old.default_output_modes),
            &effective(&now.output_modes, &new.default_output_modes),
            out,
        );
        skill_security(old, was, now, &path, out);
    }
}

/// A skill's own requirements, or the card's when it has none.
fn skill_security(
    old: &AgentCard,
    was: &AgentSkill,
    now: &AgentSkill,
    path: &str,
    out: &mut Vec<Finding>,
) {
    // Only a skill with its own requirements is checked here: the card-wide ones are
    // checked once, at the card.
    if now.security_requirements.is_empty() {
        return;
    }
    let before = if was.security_requirements.is_empty() {
        &old.security_requirements
    } else {
        &was.security_requirements
    };
    security(
        &format!("{path}.securityRequirements"),
        before,
        &now.security_requirements,
        out,
    );
}

/// A skill's modes: its own, or the card's defaults when it lists none.
fn effective(own: &[String], defaults: &[String]) -> Vec<String> {
    if own.is_empty() {
        defaults.to_vec()
    } else {
        own.to_vec()
    }
}

fn modes(path: &str, old: &[String], new: &[String], out: &mut Vec<Finding>) {
    // No modes listed accepts anything: narrowing to a list is a break only of what was listed.
    if new.is_empty() {
        return;
    }
    let kept: BTreeSet<String> = new.iter().map(|m| m.to_ascii_lowercase()).collect();
    for m in old {
        if !kept.contains(&m.to_ascii_lowercase()) {
            out.push(finding(
                Kind::ModeRemoved,
                path.to_string(),
                format!("media type {m:?} removed"),
            ));
        }
    }
}

fn interfaces(old: &AgentCard, new: &AgentCard, out: &mut Vec<Finding>) {
    for (i, was) in old.supported_interfaces.iter().enumerate() {
        let same_kind = |n: &&super::card::AgentInterface| {
            n.protocol_binding
                .eq_ignore_ascii_case(&was.protocol_binding)
                && n.protocol_version == was.protocol_version
                && n.tenant == was.tenant
        };
        let matches: Vec<_> = new.supported_interfaces.iter().filter(same_kind).collect();
        if matches.is_empty() {
            out.push(finding(
                Kind::InterfaceRemoved,
                format!("$.supportedInterfaces[{i}]"),
                format!(
                    "interface {} {} at {} removed",
                    was.protocol_binding, was.protocol_version, was.url
                ),
            ));
        } else if !matches.iter().any(|n| n.url == was.url) {
            out.push(finding(
                Kind::InterfaceUrlChanged,
                format!("$.supportedInterfaces[{i}].url"),
                format!(
                    "{} {} moved from {} to {}",
                    was.protocol_binding, was.protocol_version, was.url, matches[0].url
                ),
            ));
        }
    }
}

/// Whether a caller meeting requirement `have` also meets `need`: every scheme `need` names
/// is in `have`, with no scope `have` did not ask for.
fn satisfies(have: &SecurityRequirement, need: &SecurityRequirement) -> bool {
    need.schemes.iter().all(|(scheme, scopes)| {
        have.schemes
            .get(scheme)
            .is_some_and(|had| scopes.list.iter().all(|s| had.list.contains(s)))
    })
}

fn describe(req: &SecurityRequirement) -> String {
    let parts: Vec<String> = req
        .schemes
        .iter()
        .map(|(s, scopes)| {
            if scopes.list.is_empty() {
                s.clone()
            } else {
                format!("{s}[{}]", scopes.list.join(","))
            }
        })
        .collect();
    format!("{{{}}}", parts.join(" and "))
}

fn security(
    path: &str,
    old: &[SecurityRequirement],
    new: &[SecurityRequirement],
    out: &mut Vec<Finding>,
) {
    // Requirements are alternatives (any one); none at all means open.
    if new.is_empty() {
        return;
    }
    if old.is_empty() {
        out.push(finding(
            Kind::SecurityTightened,
            path.to_string(),
            format!(
                "security added where none was required: {}",
                new.iter().map(describe).collect::<Vec<_>>().join(" or ")
            ),
        ));
        return;
    }
    for (i, was) in old.iter().enumerate() {
        if !new.iter().any(|n| satisfies(was, n)) {
            out.push(finding(
                Kind::SecurityTightened,
                format!("{path}[{i}]"),
                format!("callers meeting {} are no longer accepted", describe(was)),
            ));
        }
    }
}

fn capabilities(old: &AgentCard, new: &AgentCard, out: &mut Vec<Finding>) {
    let (was, now) = (&old.capabilities, &new.capabilities);
    for (name, before, after) in [
        ("streaming", was.streaming, now.streaming),
        (
            "pushNotifications",
            was.push_notifications,
            now.push_notifications,
        ),
        (
            "extendedAgentCard",
            was.extended_agent_card,
            now.extended_agent_card,
        ),
    ] {
        if before == Some(true) && after != Some(true) {
            out.push(finding(
                Kind::CapabilityRemoved,
                format!("$.capabilities.{name}"),
                format!("{name} turned off"),
            ));
        }
    }
    for (i, ext) in was.extensions.iter().enumerate() {
        match now.extensions.iter().position(|e| e.uri == ext.uri) {
            None => out.push(finding(
                Kind::CapabilityRemoved,
                format!("$.capabilities.extensions[{i}]"),
                format!("extension {} removed", ext.uri),
            )),
            Some(j) if now.extensions[j].required && !ext.required => out.push(finding(
                Kind::CapabilityRemoved,
                format!("$.capabilities.extensions[{j}].required"),
                format!("extension {} is now required", ext.uri),
            )),
            Some(_) => {}
        }
    }
}

/// The semver major of a card `version` (`2`, `v2.1.0`, `2.0.0-rc.1`), when it has one.
pub fn major(version: &str) -> Option<u64> {
    let v = version.trim();
    let v = v.strip_prefix(['v', 'V']).unwrap_or(v);
    v.split(['.', '-', '+']).next()?.parse().ok()
}

/// Whether `new` bumps the semver major of `old`.
pub fn major_bumped(old: &str, new: &str) -> bool {
    match (major(old), major(new)) {
        (Some(a), Some(b)) => b > a,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn card(v: serde_json::Value) -> AgentCard {
        let mut base = json!({
            "name": "a", "description": "d", "version": "1.0.0",
            "supportedInterfaces": [
                {"url": "https://a.example/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
                {"url": "https://a.example/grpc", "protocolBinding": "GRPC", "protocolVersion": "1.0"}
            ],
            "capabilities": {"streaming": true, "pushNotifications": true,
                "extensions": [{"uri": "https://ext.example/x", "required": false}]},
            "defaultInputModes": ["text/plain", "application/json"],
            "defaultOutputModes": ["text/plain"],
            "securitySchemes": {"oauth": {"oauth2SecurityScheme": {"flows": {}}}, "key": {"apiKeySecurityScheme": {"location": "header", "name": "k"}}},
            "securityRequirements": [{"schemes": {"oauth": {"list": ["read"]}}}],
            "skills": [
                {"id": "s1", "name": "S1", "description": "d", "tags": ["t"]},
                {"id": "s2", "name": "S2", "description": "d", "tags": ["t"], "inputModes": ["image/png", "text/plain"]}
            ]
        });
        if let (Some(b), Some(o)) = (base.as_object_mut(), v.as_object()) {
            for (k, val) in o {
                b.insert(k.clone(), val.clone());
            }
        }
        serde_json::from_value(base).unwrap()
    }

    fn kinds(old: &AgentCard, new: &AgentCard) -> Vec<(Kind, String)> {
        findings(old, new)
            .into_iter()
            .map(|f| (f.kind, f.path))
            .collect()
    }

    #[test]
    fn the_same_card_or_an_additive_edit_breaks_nothing() {
        let old = card(json!({}));
        assert!(findings(&old, &old).is_empty());
        let added = card(json!({
            "skills": [
                {"id": "s1", "name": "S1", "description": "d", "tags": ["t"]},
                {"id": "s2", "name": "S2", "description": "d", "tags": ["t"], "inputModes": ["image/png", "text/plain", "image/jpeg"]},
                {"id": "s3", "name": "S3", "description": "d", "tags": ["t"]}
            ],
            "defaultInputModes": ["text/plain", "application/json", "audio/wav"],
            "securityRequirements": [{"schemes": {"oauth": {"list": ["read"]}}}, {"schemes": {"key": {"list": []}}}],
            "description": "new words",
        }));
        assert_eq!(findings(&old, &added), vec![]);
    }

    #[test]
    fn a_removed_skill_is_named_by_its_old_place() {
        let old = card(json!({}));
        let new = card(
            json!({"skills": [{"id": "s2", "name": "S2", "description": "d", "tags": ["t"], "inputModes": ["image/png", "text/plain"]}]}),
        );
        assert_eq!(
            kinds(&old, &new),
            vec![(Kind::SkillRemoved, "$.skills[0]".into())]
        );
        assert!(findings(&old, &new)[0].message.contains("\"s1\""));
    }

    #[test]
    fn removed_interfaces_and_moved_urls_are_found() {
        let old = card(json!({}));
        let new = card(json!({"supportedInterfaces": [
            {"url": "https://b.example/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        ]}));
        assert_eq!(
            kinds(&old, &new),
            vec![
                (
                    Kind::InterfaceUrlChanged,
                    "$.supportedInterfaces[0].url".into()
                ),
                (Kind::InterfaceRemoved, "$.supportedInterfaces[1]".into()),
            ]
        );
    }

    #[test]
    fn removed_modes_at_the_card_and_at_a_kept_skill_are_found() {
        let old = card(json!({}));
        let new = card(json!({
            "defaultInputModes": ["text/plain"],
            "skills": [
                {"id": "s1", "name": "S1", "description": "d", "tags": ["t"]},
                {"id": "s2", "name": "S2", "description": "d", "tags": ["t"], "inputModes": ["image/png"]}
            ],
            "defaultOutputModes": ["application/json"]
        }));
        assert_eq!(
            kinds(&old, &new),
            vec![
                (Kind::ModeRemoved, "$.skills[0].inputModes".into()),
                (Kind::ModeRemoved, "$.skills[0].outputModes".into()),
                (Kind::ModeRemoved, "$.skills[1].inputModes".into()),
                (Kind::ModeRemoved, "$.skills[1].outputModes".into()),
                (Kind::ModeRemoved, "$.defaultInputModes".into()),
                (Kind::ModeRemoved, "$.defaultOutputModes".into()),
            ]
        );
    }

    #[test]
    fn added_or_tightened_security_is_found_and_loosened_is_not() {
        let open = card(json!({"securityRequirements": []}));
        let old = card(json!({}));
        assert_eq!(
            kinds(&open, &old),
            vec![(Kind::SecurityTightened, "$.securityRequirements".into())]
        );
        let more_scopes = card(
            json!({"securityRequirements": [{"schemes": {"oauth": {"list": ["read", "write"]}}}]}),
        );
        assert_eq!(
            kinds(&old, &more_scopes),
            vec![(Kind::SecurityTightened, "$.securityRequirements[0]".into())]
        );
        let two_schemes = card(
            json!({"securityRequirements": [{"schemes": {"oauth": {"list": ["read"]}, "key": {"list": []}}}]}),
        );
        assert_eq!(kinds(&old, &two_schemes).len(), 1);
        assert!(
            findings(&old, &open).is_empty(),
            "opening up breaks nothing"
        );
        let skill_only = card(json!({"skills": [
            {"id": "s1", "name": "S1", "description": "d", "tags": ["t"], "securityRequirements": [{"schemes": {"key": {"list": []}}}]},
            {"id": "s2", "name": "S2", "description": "d", "tags": ["t"], "inputModes": ["image/png", "text/plain"]}
        ]}));
        assert_eq!(
            kinds(&old, &skill_only),
            vec![(
                Kind::SecurityTightened,
                "$.skills[0].securityRequirements[0]".into()
            )]
        );
    }

    #[test]
    fn capabilities_turned_off_and_extensions_removed_or_required_are_found() {
        let old = card(json!({}));
        let new = card(json!({"capabilities": {"streaming": false}}));
        assert_eq!(
            kinds(&old, &new),
            vec![
                (Kind::CapabilityRemoved, "$.capabilities.streaming".into()),
                (
                    Kind::CapabilityRemoved,
                    "$.capabilities.pushNotifications".into()
                ),
                (
                    Kind::CapabilityRemoved,
                    "$.capabilities.extensions[0]".into()
                ),
            ]
        );
        let required = card(
            json!({"capabilities": {"streaming": true, "pushNotifications": true,
            "extensions": [{"uri": "https://ext.example/x", "required": true}]}}),
        );
        assert_eq!(
            kinds(&old, &required),
            vec![(
                Kind::CapabilityRemoved,
                "$.capabilities.extensions[0].required".into()
            )]
        );
    }

    #[test]
    fn semver_majors_are_read_leniently() {
        assert_eq!(major("2.1.0"), Some(2));
        assert_eq!(major("v3"), Some(3));
        assert_eq!(major("10.0.0-rc.1"), Some(10));
        assert_eq!(major("latest"), None);
        assert!(major_bumped("1.4.2", "2.0.0"));
        assert!(!major_bumped("1.4.2", "1.5.0"));
        assert!(!major_bumped("2.0.0", "1.0.0"));
        assert!(!major_bumped("dev", "2.0.0"));
    }
}
