//! One listed card as the query engine sees it: the signed bytes (shared with the card index,
//! served verbatim), where it is published, and the values every filter and the text ranking
//! look at, lower-cased once when the entry is built.

use bytes::Bytes;
use serde_json::Value;

/// The filterable keys of the native API (and their ARD dot paths, see [`Field::from_ard`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Field {
    /// Skill id or name.
    Skill,
    /// Skill tag.
    Tag,
    /// Provider organization.
    Provider,
    /// `streaming`, `pushNotifications`, `extendedAgentCard`, or an extension URI.
    Capability,
    /// Input media type (card default or any skill's).
    InputMode,
    /// Output media type (card default or any skill's).
    OutputMode,
    /// Protocol binding of an interface (`JSONRPC`, `GRPC`, `HTTP+JSON`).
    Binding,
    /// Kubernetes namespace of the AgentCard.
    Namespace,
}

impl Field {
    /// Every field, in the order facets are listed.
    pub const ALL: [Field; 8] = [
        Field::Skill,
        Field::Tag,
        Field::Provider,
        Field::Capability,
        Field::InputMode,
        Field::OutputMode,
        Field::Binding,
        Field::Namespace,
    ];

    /// The native query parameter of this field.
    pub fn param(self) -> &'static str {
        match self {
            Field::Skill => "skill",
            Field::Tag => "tag",
            Field::Provider => "provider",
            Field::Capability => "capability",
            Field::InputMode => "inputMode",
            Field::OutputMode => "outputMode",
            Field::Binding => "binding",
            Field::Namespace => "namespace",
        }
    }

    /// The field of native query parameter `name`.
    pub fn from_param(name: &str) -> Option<Field> {
        Field::ALL.into_iter().find(|f| f.param() == name)
    }

    /// The field of an ARD filter path (catalog entry properties: `tags`, `capabilities` —
    /// skills — and `metadata.<param>`).
    pub fn from_ard(path: &str) -> Option<Field> {
        match path {
            "tags" => Some(Field::Tag),
            "capabilities" => Some(Field::Skill),
            other => other.strip_prefix("metadata.").and_then(Field::from_param),
        }
    }

    fn slot(self) -> usize {
        self as usize
    }
}

/// Where a listed card is published, as its AgentCard's status says.
#[derive(Clone, Debug, Default)]
pub struct Placement {
    /// Namespace of the AgentCard.
    pub namespace: String,
    /// Name of the AgentCard.
    pub name: String,
    /// Host the card is served on.
    pub host: String,
    /// Public URL of the card.
    pub url: String,
    /// Hash of the served bytes.
    pub content_hash: String,
    /// Key that signed it.
    pub key_id: String,
    /// When the served bytes last changed (RFC 3339).
    pub updated_at: String,
}

/// One listed card.
#[derive(Debug)]
pub struct Entry {
    /// `urn:air:<card host>:<namespace>:<name>`.
    pub identifier: String,
    /// Where it is published.
    pub placement: Placement,
    /// The signed card, exactly as served.
    pub body: Bytes,
    /// The card's `name`.
    pub display_name: String,
    /// The card's `description`.
    pub description: String,
    /// The card's `version`.
    pub version: String,
    /// Skill tags, as written, without repeats.
    pub tags: Vec<String>,
    /// Skill ids, as written.
    pub skill_ids: Vec<String>,
    /// Skill examples, as written.
    pub examples: Vec<String>,
    /// Per [`Field`]: the values it matches (lower-cased, without repeats).
    values: [Vec<String>; 8],
    /// Per [`Field`]: the values counted in facets, as written.
    facet_values: [Vec<String>; 8],
    /// Text tokens with weights (name 5, skill names and tags 3, description 2, the rest 1).
    tokens: Vec<(String, u8)>,
}

fn strings(v: &Value) -> impl Iterator<Item = &str> {
    v.as_array().into_iter().flatten().filter_map(Value::as_str)
}

fn push_unique(list: &mut Vec<String>, value: &str) {
    if !value.is_empty() && !list.iter().any(|v| v == value) {
        list.push(value.to_string());
    }
}

/// Lower-case words of `text` (letters and digits).
pub fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

impl Entry {
    /// Build the entry of a signed card (`body`) published at `placement`; `None` when the
    /// bytes are not a JSON object.
    pub fn build(placement: Placement, body: Bytes) -> Option<Entry> {
        let card: Value = serde_json::from_slice(&body).ok()?;
        card.as_object()?;
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let mut facet_values: [Vec<String>; 8] = Default::default();
        let mut tokens: Vec<(String, u8)> = Vec::new();
        let mut add_text = |s: &str, weight: u8| {
            for w in words(s) {
                match tokens.iter_mut().find(|(t, _)| *t == w) {
                    Some((_, existing)) => *existing = (*existing).max(weight),
                    None => tokens.push((w, weight)),
                }
            }
        };
        add_text(card["name"].as_str().unwrap_or_default(), 5);
        add_text(card["description"].as_str().unwrap_or_default(), 2);
        let (mut tags, mut skill_ids, mut examples) = (Vec::new(), Vec::new(), Vec::new());
        let mut skill_values = Vec::new();
        for skill in card["skills"].as_array().into_iter().flatten() {
            let (id, name) = (text(&skill["id"]), text(&skill["name"]));
            push_unique(&mut skill_ids, &id);
            push_unique(&mut facet_values[Field::Skill.slot()], &id);
            push_unique(&mut skill_values, &id.to_lowercase());
            push_unique(&mut skill_values, &name.to_lowercase());
            add_text(&name, 3);
            add_text(skill["description"].as_str().unwrap_or_default(), 1);
            for tag in strings(&skill["tags"]) {
                push_unique(&mut tags, tag);
                add_text(tag, 3);
            }
            for example in strings(&skill["examples"]) {
                push_unique(&mut examples, example);
                add_text(example, 1);
            }
            for m in strings(&skill["inputModes"]) {
                push_unique(&mut facet_values[Field::InputMode.slot()], m);
            }
            for m in strings(&skill["outputModes"]) {
                push_unique(&mut facet_values[Field::OutputMode.slot()], m);
            }
        }
        facet_values[Field::Tag.slot()] = tags.clone();
        let provider = text(&card["provider"]["organization"]);
        push_unique(&mut facet_values[Field::Provider.slot()], &provider);
        let caps = &card["capabilities"];
        for flag in ["streaming", "pushNotifications", "extendedAgentCard"] {
            if caps[flag].as_bool() == Some(true) {
                push_unique(&mut facet_values[Field::Capability.slot()], flag);
            }
        }
        for ext in caps["extensions"].as_array().into_iter().flatten() {
            push_unique(
                &mut facet_values[Field::Capability.slot()],
                ext["uri"].as_str().unwrap_or_default(),
            );
        }
        for m in strings(&card["defaultInputModes"]) {
            push_unique(&mut facet_values[Field::InputMode.slot()], m);
        }
        for m in strings(&card["defaultOutputModes"]) {
            push_unique(&mut facet_values[Field::OutputMode.slot()], m);
        }
        for iface in card["supportedInterfaces"].as_array().into_iter().flatten() {
            push_unique(
                &mut facet_values[Field::Binding.slot()],
                iface["protocolBinding"].as_str().unwrap_or_default(),
            );
        }
        push_unique(
            &mut facet_values[Field::Namespace.slot()],
            &placement.namespace,
        );
        let mut values: [Vec<String>; 8] = Default::default();
        for field in Field::ALL {
            let slot = field.slot();
            if field == Field::Skill {
                values[slot] = skill_values.clone();
            } else {
                for v in &facet_values[slot] {
                    push_unique(&mut values[slot], &v.to_lowercase());
                }
            }
        }
        Some(Entry {
            identifier: format!(
                "urn:air:{}:{}:{}",
                placement.host, placement.namespace, placement.name
            ),
            display_name: text(&card["name"]),
            description: text(&card["description"]),
            version: text(&card["version"]),
            placement,
            body,
            tags,
            skill_ids,
            examples,
            values,
            facet_values,
            tokens,
        })
    }

    /// The values of `field` this entry matches (lower-cased).
    pub fn values(&self, field: Field) -> &[String] {
        &self.values[field.slot()]
    }

    /// The values of `field` counted in facets, as written.
    pub fn facet_values(&self, field: Field) -> &[String] {
        &self.facet_values[field.slot()]
    }

    /// The text tokens with their weights.
    pub fn tokens(&self) -> &[(String, u8)] {
        &self.tokens
    }

    /// Text relevance of this entry for `query` words, 0–100: each word found scores its
    /// best weight (a word that only starts a card word scores half), over the best possible.
    pub fn score(&self, query: &[String]) -> u8 {
        if query.is_empty() {
            return 0;
        }
        let mut total = 0u32;
        for q in query {
            let mut best = 0u32;
            for (t, w) in &self.tokens {
                if t == q {
                    best = best.max(u32::from(*w) * 2);
                } else if t.starts_with(q.as_str()) {
                    best = best.max(u32::from(*w));
                }
            }
            total += best;
        }
        let max = 10 * u32::try_from(query.len()).unwrap_or(u32::MAX);
        u8::try_from((total * 100).div_ceil(max).min(100)).unwrap_or(100)
    }
}
