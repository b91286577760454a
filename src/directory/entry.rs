//! One listed card as the query engine sees it: the signed bytes (shared with the card index,
//! served verbatim), where it is published, and the values every filter and the text ranking
//! look at, lower-cased once when the entry is built.

use std::collections::{HashMap, HashSet};

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
    /// `true`, `false` or `unknown` (the agent's Service has a ready endpoint).
    Reachable,
    /// `Active`, `Deprecated` or `Retired`.
    Lifecycle,
}

impl Field {
    /// Every field, in the order facets are listed.
    pub const ALL: [Field; 10] = [
        Field::Skill,
        Field::Tag,
        Field::Provider,
        Field::Capability,
        Field::InputMode,
        Field::OutputMode,
        Field::Binding,
        Field::Namespace,
        Field::Reachable,
        Field::Lifecycle,
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
            Field::Reachable => "reachable",
            Field::Lifecycle => "lifecycle",
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
    /// Whether the agent's Service has a ready endpoint (`BackendReady`); `None`: not known
    /// (no backend or source, or another registry's entry).
    pub reachable: Option<bool>,
    /// Deprecated or retired, as the operator resolved it; `None` while active.
    pub lifecycle: Option<Box<crate::crd::ServedLifecycle>>,
}

impl Placement {
    /// `true`, `false` or `unknown`: the `reachable` filter's and facet's value.
    pub fn reachable_str(&self) -> &'static str {
        match self.reachable {
            Some(true) => "true",
            Some(false) => "false",
            None => "unknown",
        }
    }

    /// `Active`, `Deprecated` or `Retired`.
    pub fn lifecycle_str(&self) -> &'static str {
        self.lifecycle
            .as_ref()
            .map_or("Active", |l| l.state.as_str())
    }

    /// Whether the entry is a retired card's tombstone.
    pub fn retired(&self) -> bool {
        self.lifecycle
            .as_ref()
            .is_some_and(|l| l.state == crate::crd::LifecycleState::Retired)
    }

    /// Whether the entry is deprecated (ranked after active ones).
    pub fn deprecated(&self) -> bool {
        self.lifecycle
            .as_ref()
            .is_some_and(|l| l.state == crate::crd::LifecycleState::Deprecated)
    }
}

/// One listed card, stored compactly (it is kept for every card of every replica): the
/// values filters and facets need as written, one flat list; the text tokens as one string
/// with a weight per token.
#[derive(Debug)]
pub struct Entry {
    /// `urn:air:<card host>:<namespace>:<name>`.
    pub identifier: String,
    /// Where it is published.
    pub placement: Placement,
    /// The signed card, exactly as served.
    pub body: Bytes,
    /// The card's `name`.
    pub display_name: Box<str>,
    /// The card's `description`.
    pub description: Box<str>,
    /// The card's `version`.
    pub version: Box<str>,
    /// Skill examples, as written.
    pub examples: Box<[Box<str>]>,
    /// Facet values as written, by field, without repeats within a field.
    facets: Box<[(Field, Box<str>)]>,
    /// Skill names (a skill filter matches an id or a name; facets count ids).
    skill_names: Box<[Box<str>]>,
    /// Text tokens (lower case), each followed by `\0`.
    token_text: Box<str>,
    /// Weight of each token (name 5, skill names and tags 3, description 2, the rest 1).
    token_weights: Box<[u8]>,
    /// Where it came from, for an entry of another registry (federation); `None` for the
    /// cluster's own cards.
    pub origin: Option<Box<super::federation::Origin>>,
}

fn strings(v: &Value) -> impl Iterator<Item = &str> {
    v.as_array().into_iter().flatten().filter_map(Value::as_str)
}

/// Lower-case words of `text` (letters and digits).
pub fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

/// Most distinct words of a text query that count (bounding the work one request causes).
pub const MAX_QUERY_WORDS: usize = 16;

/// The words a text query is matched and scored by: its first [`MAX_QUERY_WORDS`] distinct
/// words (a repeated word adds nothing to a score).
pub fn query_words(text: &str) -> Vec<String> {
    let mut out = Distinct::default();
    for w in words(text) {
        if out.list.len() == MAX_QUERY_WORDS {
            break;
        }
        out.push(&w);
    }
    out.list
}

/// Collects facet values and weighted tokens while an entry is built, in first-seen order
/// and without repeats (hashed: a large card's words cost linear time, not quadratic).
#[derive(Default)]
struct Builder {
    facets: Vec<(Field, Box<str>)>,
    seen_facets: HashSet<(Field, Box<str>)>,
    tokens: Vec<(String, u8)>,
    token_at: HashMap<String, usize>,
}

impl Builder {
    fn facet(&mut self, field: Field, value: &str) {
        if !value.is_empty() && self.seen_facets.insert((field, value.into())) {
            self.facets.push((field, value.into()));
        }
    }

    fn text(&mut self, text: &str, weight: u8) {
        for w in words(text) {
            match self.token_at.get(&w) {
                Some(&i) => self.tokens[i].1 = self.tokens[i].1.max(weight),
                None => {
                    self.token_at.insert(w.clone(), self.tokens.len());
                    self.tokens.push((w, weight));
                }
            }
        }
    }
}

/// Strings without repeats, in first-seen order.
#[derive(Default)]
struct Distinct {
    list: Vec<String>,
    seen: HashSet<String>,
}

impl Distinct {
    fn push(&mut self, v: &str) {
        if !v.is_empty() && self.seen.insert(v.to_string()) {
            self.list.push(v.to_string());
        }
    }
}

fn boxed(list: Vec<String>) -> Box<[Box<str>]> {
    list.into_iter().map(String::into_boxed_str).collect()
}

impl Entry {
    /// Build the entry of a signed card (`body`) published at `placement`; `None` when the
    /// bytes are not a JSON object.
    pub fn build(placement: Placement, body: Bytes) -> Option<Entry> {
        let card: Value = serde_json::from_slice(&body).ok()?;
        card.as_object()?;
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let mut b = Builder::default();
        b.text(card["name"].as_str().unwrap_or_default(), 5);
        b.text(card["description"].as_str().unwrap_or_default(), 2);
        let (mut examples, mut skill_names) = (Distinct::default(), Distinct::default());
        for skill in card["skills"].as_array().into_iter().flatten() {
            let (id, name) = (text(&skill["id"]), text(&skill["name"]));
            b.facet(Field::Skill, &id);
            skill_names.push(&name);
            b.text(&name, 3);
            b.text(skill["description"].as_str().unwrap_or_default(), 1);
            for tag in strings(&skill["tags"]) {
                b.facet(Field::Tag, tag);
                b.text(tag, 3);
            }
            for example in strings(&skill["examples"]) {
                examples.push(example);
                b.text(example, 1);
            }
            for m in strings(&skill["inputModes"]) {
                b.facet(Field::InputMode, m);
            }
            for m in strings(&skill["outputModes"]) {
                b.facet(Field::OutputMode, m);
            }
        }
        b.facet(
            Field::Provider,
            card["provider"]["organization"]
                .as_str()
                .unwrap_or_default(),
        );
        let caps = &card["capabilities"];
        for flag in ["streaming", "pushNotifications", "extendedAgentCard"] {
            if caps[flag].as_bool() == Some(true) {
                b.facet(Field::Capability, flag);
            }
        }
        for ext in caps["extensions"].as_array().into_iter().flatten() {
            b.facet(Field::Capability, ext["uri"].as_str().unwrap_or_default());
        }
        for m in strings(&card["defaultInputModes"]) {
            b.facet(Field::InputMode, m);
        }
        for m in strings(&card["defaultOutputModes"]) {
            b.facet(Field::OutputMode, m);
        }
        for iface in card["supportedInterfaces"].as_array().into_iter().flatten() {
            b.facet(
                Field::Binding,
                iface["protocolBinding"].as_str().unwrap_or_default(),
            );
        }
        b.facet(Field::Namespace, &placement.namespace);
        b.facet(Field::Reachable, placement.reachable_str());
        b.facet(Field::Lifecycle, placement.lifecycle_str());
        let mut token_text = String::new();
        let mut weights = Vec::with_capacity(b.tokens.len());
        for (t, w) in b.tokens {
            token_text.push_str(&t);
            token_text.push('\0');
            weights.push(w);
        }
        Some(Entry {
            identifier: format!(
                "urn:air:{}:{}:{}",
                placement.host, placement.namespace, placement.name
            ),
            display_name: text(&card["name"]).into(),
            description: text(&card["description"]).into(),
            version: text(&card["version"]).into(),
            placement,
            body,
            examples: boxed(examples.list),
            facets: b.facets.into_boxed_slice(),
            skill_names: boxed(skill_names.list),
            token_text: token_text.into_boxed_str(),
            token_weights: weights.into_boxed_slice(),
            origin: None,
        })
    }

    /// The same entry, read from another registry: `origin` says where.
    pub fn with_origin(mut self, origin: super::federation::Origin) -> Entry {
        self.origin = Some(Box::new(origin));
        self
    }

    /// The same entry under the identifier its registry gave it.
    pub fn with_identifier(mut self, identifier: String) -> Entry {
        self.identifier = identifier;
        self
    }

    /// The values of `field` this entry matches (lower-cased, without repeats).
    pub fn values(&self, field: Field) -> Vec<String> {
        let mut out = Distinct::default();
        let names = self.skill_names.iter().filter(|_| field == Field::Skill);
        for v in self.facet_values(field).chain(names.map(|n| &**n)) {
            out.push(&v.to_lowercase());
        }
        out.list
    }

    /// The values of `field` counted in facets, as written.
    pub fn facet_values(&self, field: Field) -> impl Iterator<Item = &str> {
        self.facets
            .iter()
            .filter(move |(f, _)| *f == field)
            .map(|(_, v)| &**v)
    }

    /// Skill tags, as written, without repeats.
    pub fn tags(&self) -> Vec<&str> {
        self.facet_values(Field::Tag).collect()
    }

    /// Skill ids, as written, without repeats.
    pub fn skill_ids(&self) -> Vec<&str> {
        self.facet_values(Field::Skill).collect()
    }

    /// The text tokens with their weights.
    pub fn tokens(&self) -> impl Iterator<Item = (&str, u8)> {
        self.token_text
            .split_terminator('\0')
            .zip(self.token_weights.iter().copied())
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
            for (t, w) in self.tokens() {
                if t == q {
                    best = best.max(u32::from(w) * 2);
                } else if t.starts_with(q.as_str()) {
                    best = best.max(u32::from(w));
                }
            }
            total += best;
        }
        let max = 10 * u32::try_from(query.len()).unwrap_or(u32::MAX);
        u8::try_from((total * 100).div_ceil(max).min(100)).unwrap_or(100)
    }
}
