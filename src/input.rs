//! Reading what users hand the offline commands: an `AgentCard` manifest or a bare card.
//!
//! A manifest (YAML or JSON, `kind: AgentCard`) carries the card under `spec.card`; problems
//! in it are reported with that prefix so the path points into the file the user edits. A bare
//! A2A card (JSON, or YAML for convenience) is taken as it is.

use serde_json::Value;

use crate::a2a::parse::{card_from_value, Parsed, Strictness};
use crate::a2a::report::{Problem, Problems};

/// A card read from a user's file, and where in that file it was.
#[derive(Debug)]
pub struct CardInput {
    /// The parsed card.
    pub parsed: Parsed,
    /// Path prefix of the card within the document (`spec.card`, or empty for a bare card).
    pub prefix: &'static str,
    /// `spec.publish.host` of a manifest, when present.
    pub host: Option<String>,
    /// The whole `AgentCard` resource, when the input is a complete manifest.
    pub manifest: Option<crate::crd::AgentCard>,
}

/// Parse `text` (YAML or JSON) as an `AgentCard` manifest or a bare card, strictly.
pub fn read_card(text: &str) -> Result<CardInput, Problems> {
    let doc: Value = serde_json::from_str(text).or_else(|_| {
        crate::yaml::from_str::<Value>(text).map_err(|e| {
            Problems(vec![Problem::error(
                "",
                format!("neither JSON nor YAML: {e}"),
            )])
        })
    })?;
    let is_manifest = doc.get("kind").and_then(Value::as_str) == Some("AgentCard");
    if !is_manifest {
        let parsed = card_from_value(&doc, Strictness::Strict)?;
        return Ok(CardInput {
            parsed,
            prefix: "",
            host: None,
            manifest: None,
        });
    }
    let prefix = "spec.card";
    if doc.pointer("/spec/card").is_none() && doc.pointer("/spec/source").is_some() {
        return Err(Problems(vec![Problem::error(
            "spec.source",
            "the operator imports this card from the agent; render it with --from-url <the agent's card URL>",
        )]));
    }
    let card = doc
        .pointer("/spec/card")
        .ok_or_else(|| Problems(vec![Problem::error(prefix, "required")]))?;
    let parsed = card_from_value(card, Strictness::Strict).map_err(|p| p.with_prefix(prefix))?;
    let host = doc
        .pointer("/spec/publish/host")
        .and_then(Value::as_str)
        .map(str::to_string);
    let manifest = serde_json::from_value(doc.clone()).ok();
    Ok(CardInput {
        parsed,
        prefix,
        host,
        manifest,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_problems_carry_the_spec_card_prefix() {
        let yaml = "apiVersion: agentcard.dev/v1alpha1\nkind: AgentCard\nmetadata: {name: x}\nspec:\n  publish: {host: a.example.com}\n  card:\n    name: A\n    skills:\n    - id: s\n      nmae: typo\n";
        let err = read_card(yaml).unwrap_err();
        assert_eq!(
            err.0[0].to_string(),
            "spec.card.skills[0].nmae: unknown field (not part of the A2A v1.0 Agent Card)"
        );
    }

    #[test]
    fn bare_cards_and_hosts_are_read() {
        let input = read_card(r#"{"name": "A"}"#).unwrap();
        assert_eq!(input.prefix, "");
        assert_eq!(input.parsed.card.name, "A");
        let yaml = "kind: AgentCard\nspec:\n  publish: {host: a.example.com}\n  card: {name: B}\n";
        let input = read_card(yaml).unwrap();
        assert_eq!(input.host.as_deref(), Some("a.example.com"));
        assert_eq!(input.parsed.card.name, "B");
    }

    #[test]
    fn type_errors_name_the_path() {
        let err = read_card(r#"{"skills": [{"id": "a", "tags": "x"}]}"#).unwrap_err();
        assert!(
            err.0[0]
                .to_string()
                .starts_with("skills[0].tags: invalid type"),
            "{err}"
        );
    }
}
