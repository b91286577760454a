//! Drift: how the card an agent serves itself differs from the card published for it (pure).
//!
//! [`differences`] reads both cards as a caller would. What a publisher rewrites on purpose is
//! set aside: signatures, and interface URLs (a published card names the public URL where the
//! agent names its in-cluster one), so interfaces are compared by binding and version. Then:
//! - structural differences: what the published card promises that the agent does not serve,
//!   by the breaking-change classifier ([`crate::breaking::findings`] from the published card
//!   to the served one: a skill, an interface, a media type, a capability, the security callers
//!   meet), and the skills and interfaces the agent serves that the published card leaves out;
//! - descriptive differences: name, description, version, provider.

use std::collections::BTreeSet;

use crate::breaking::{findings, Kind};
use crate::card::AgentCard;

/// One difference between a published card and the card its agent serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Difference {
    /// JSON path of what differs, e.g. `$.skills[1]` (of the published card, or of the served
    /// one for what only the agent serves).
    pub path: String,
    /// A bounded name for the kind: a [`Kind`] of breaking change, `SkillNotPublished`,
    /// `InterfaceNotPublished`, or `NameDiffers`, `DescriptionDiffers`, `VersionDiffers`,
    /// `ProviderDiffers`.
    pub kind: &'static str,
    /// Whether it changes what callers can do (`false`: how the agent is described).
    pub structural: bool,
    /// What differs, for people.
    pub message: String,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {} ({})", self.path, self.message, self.kind)
    }
}

/// Longest value quoted in a descriptive difference's message, in characters.
const QUOTED: usize = 80;

/// `card` as compared: no signatures (interface URLs are set aside by comparing interfaces by
/// binding and version only).
fn comparable(card: &AgentCard) -> AgentCard {
    let mut c = card.clone();
    c.signatures.clear();
    c
}

fn quoted(s: &str) -> String {
    let cut: String = s.chars().take(QUOTED).collect();
    if cut.len() < s.len() {
        format!("{cut:?}…")
    } else {
        format!("{cut:?}")
    }
}

/// Every difference between `published` and `served` (the agent's own card), structural
/// first (pure).
pub fn differences(published: &AgentCard, served: &AgentCard) -> Vec<Difference> {
    let (p, s) = (comparable(published), comparable(served));
    let mut out: Vec<Difference> = findings(&p, &s)
        .into_iter()
        .filter(|f| f.kind != Kind::InterfaceUrlChanged)
        .map(|f| Difference {
            path: f.path,
            kind: f.kind.as_str(),
            structural: true,
            message: format!("published but not served: {}", f.message),
        })
        .collect();
    let published_skills: BTreeSet<&str> = p.skills.iter().map(|k| k.id.as_str()).collect();
    for (i, skill) in s.skills.iter().enumerate() {
        if !published_skills.contains(skill.id.as_str()) {
            out.push(Difference {
                path: format!("$.skills[{i}]"),
                kind: "SkillNotPublished",
                structural: true,
                message: format!(
                    "the agent serves skill {:?}, which the published card does not list",
                    skill.id
                ),
            });
        }
    }
    let spoken = |c: &AgentCard| -> BTreeSet<(String, String)> {
        c.supported_interfaces
            .iter()
            .map(|i| {
                (
                    i.protocol_binding.to_ascii_uppercase(),
                    i.protocol_version.clone(),
                )
            })
            .collect()
    };
    let published_interfaces = spoken(&p);
    let mut told = BTreeSet::new();
    for (i, iface) in s.supported_interfaces.iter().enumerate() {
        let key = (
            iface.protocol_binding.to_ascii_uppercase(),
            iface.protocol_version.clone(),
        );
        if !published_interfaces.contains(&key) && told.insert(key.clone()) {
            out.push(Difference {
                path: format!("$.supportedInterfaces[{i}]"),
                kind: "InterfaceNotPublished",
                structural: true,
                message: format!(
                    "the agent speaks {} {}, which the published card does not list",
                    key.0, key.1
                ),
            });
        }
    }
    let mut descriptive = |path: &str, kind: &'static str, was: &str, is: &str| {
        if was != is {
            out.push(Difference {
                path: path.to_string(),
                kind,
                structural: false,
                message: format!("published {}, served {}", quoted(was), quoted(is)),
            });
        }
    };
    descriptive("$.name", "NameDiffers", &p.name, &s.name);
    descriptive(
        "$.description",
        "DescriptionDiffers",
        &p.description,
        &s.description,
    );
    descriptive("$.version", "VersionDiffers", &p.version, &s.version);
    let provider = |c: &AgentCard| {
        c.provider
            .as_ref()
            .map(|v| format!("{} <{}>", v.organization, v.url))
            .unwrap_or_default()
    };
    descriptive(
        "$.provider",
        "ProviderDiffers",
        &provider(&p),
        &provider(&s),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn card(v: serde_json::Value) -> AgentCard {
        let mut base = json!({
            "name": "Echo", "description": "Echoes.", "version": "1.0.0",
            "supportedInterfaces": [{"url": "https://echo.example.com/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
            "capabilities": {"streaming": true}, "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
            "skills": [{"id": "echo", "name": "Echo", "description": "Repeats.", "tags": ["t"]}]
        });
        for (k, val) in v.as_object().unwrap() {
            base[k] = val.clone();
        }
        serde_json::from_value(base).unwrap()
    }

    #[test]
    fn what_the_publisher_rewrites_is_no_drift() {
        let published = card(json!({"signatures": [{"protected": "x", "signature": "y"}]}));
        let served = card(json!({
            "supportedInterfaces": [{"url": "http://echo.team.svc:9999/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]
        }));
        assert_eq!(differences(&published, &served), Vec::new());
    }

    #[test]
    fn structural_and_descriptive_differences_are_told_apart_with_their_paths() {
        let published = card(json!({
            "skills": [
                {"id": "echo", "name": "Echo", "description": "Repeats.", "tags": ["t"]},
                {"id": "translate", "name": "Translate", "description": "Translates.", "tags": ["t"]}
            ]
        }));
        let served = card(json!({
            "name": "Echo Agent",
            "version": "1.1.0",
            "capabilities": {"streaming": false},
            "supportedInterfaces": [
                {"url": "http://echo:9999/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
                {"url": "http://echo:9999/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}
            ],
            "skills": [
                {"id": "echo", "name": "Echo", "description": "Repeats.", "tags": ["t"]},
                {"id": "shout", "name": "Shout", "description": "Repeats loudly.", "tags": ["t"]}
            ]
        }));
        let d = differences(&published, &served);
        let got: Vec<(&str, &str, bool)> = d
            .iter()
            .map(|d| (d.path.as_str(), d.kind, d.structural))
            .collect();
        assert_eq!(
            got,
            [
                ("$.skills[1]", "SkillRemoved", true),
                ("$.capabilities.streaming", "CapabilityRemoved", true),
                ("$.skills[1]", "SkillNotPublished", true),
                ("$.supportedInterfaces[1]", "InterfaceNotPublished", true),
                ("$.name", "NameDiffers", false),
                ("$.version", "VersionDiffers", false),
            ]
        );
        assert!(d[0].to_string().contains("translate"), "{}", d[0]);
        assert!(d[2].message.contains("\"shout\""), "{}", d[2]);
        assert_eq!(d[4].message, "published \"Echo\", served \"Echo Agent\"");
        // The other way round, what was missing is now extra, and the reverse.
        let back = differences(&served, &published);
        assert!(back
            .iter()
            .any(|x| x.kind == "SkillNotPublished" && x.message.contains("translate")));
        assert!(back
            .iter()
            .any(|x| x.kind == "SkillRemoved" && x.message.contains("shout")));
    }

    #[test]
    fn long_values_are_cut_in_messages() {
        let published = card(json!({"description": "a".repeat(500)}));
        let served = card(json!({"description": "b"}));
        let d = differences(&published, &served);
        assert_eq!(d.len(), 1);
        assert!(d[0].message.len() < 200, "{}", d[0].message);
        assert!(!d[0].structural);
    }
}
