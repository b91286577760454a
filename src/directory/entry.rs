//! One listed card as the query engine sees it: the signed bytes (shared with the card index,
//! served verbatim), where it is published, and the values every filter and the text ranking
//! look at.
//!
//! [`Entry::build`] parses the card once and keeps what filters, facets and the text need as
//! written, in one string with a span (kind and end) per value, since an entry is kept for
//! every card of every replica. Namespace, reachability and lifecycle are read from the
//! [`Placement`], not copied. The text tokens are not kept: [`Entry::tokens`] derives them
//! from the kept strings when the catalog's index is built (or a reference score is asked).

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
    /// How the published card compares with the card its agent serves itself (the
    /// `Drifted` condition); `None`: not compared.
    pub drift: Option<Box<Drift>>,
    /// The number of the served revision (`status.revision`; local cards only): its earlier
    /// revisions are at `/v1/agents/{namespace}/{name}/revisions`.
    pub revision: Option<i64>,
}

/// The `Drifted` condition as a directory shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Drift {
    /// `structural`, `descriptive`, `none` (in sync) or `unknown` (not compared).
    pub state: &'static str,
    /// The condition's message: each difference with its path, or why nothing was compared.
    pub message: String,
}

impl Drift {
    /// The directory's view of a `Drifted` condition's `reason` and `message`.
    pub fn of_condition(reason: &str, message: &str) -> Drift {
        let state = match reason {
            "StructuralDrift" => "structural",
            "DescriptiveDrift" => "descriptive",
            "InSync" => "none",
            _ => "unknown",
        };
        Drift {
            state,
            message: message.to_string(),
        }
    }
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
/// values filters, facets and the text need as written, in one string.
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
    /// The card's description and version, facet values, skill names and descriptions, and
    /// examples as written, one after another (each kind without repeats).
    strings: Box<str>,
    /// Per value of `strings`, in order: its [`Kind`] in the top bits, where it ends below.
    spans: Box<[u32]>,
    /// Where it came from, for an entry of another registry (federation); `None` for the
    /// cluster's own cards.
    pub origin: Option<Box<super::federation::Origin>>,
}

/// What a value of [`Entry`]'s strings is: a facet field's value or one of the texts only the
/// ranking (or the ARD entry) reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Kind {
    Facet(Field),
    SkillName,
    SkillDescription,
    Example,
    Description,
    Version,
}

/// Bits of a span that hold where its value ends (the rest hold its kind).
const SPAN_END_BITS: u32 = 27;

impl Kind {
    /// The kind's number in a span's top bits.
    fn code(self) -> u32 {
        match self {
            Kind::Facet(f) => f as u32,
            Kind::SkillName => Field::ALL.len() as u32,
            Kind::SkillDescription => Field::ALL.len() as u32 + 1,
            Kind::Example => Field::ALL.len() as u32 + 2,
            Kind::Description => Field::ALL.len() as u32 + 3,
            Kind::Version => Field::ALL.len() as u32 + 4,
        }
    }
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

/// Collects the kept values while an entry is built, in first-seen order and without repeats
/// within a kind (hashed: a large card's values cost linear time, not quadratic).
#[derive(Default)]
struct Builder {
    strings: String,
    spans: Vec<u32>,
    seen: HashSet<(Kind, Box<str>)>,
}

impl Builder {
    fn facet(&mut self, field: Field, value: &str) {
        self.push(Kind::Facet(field), value);
    }

    fn push(&mut self, kind: Kind, value: &str) {
        if !value.is_empty() && self.seen.insert((kind, value.into())) {
            self.strings.push_str(value);
            let end = u32::try_from(self.strings.len()).unwrap_or(u32::MAX);
            self.spans.push((kind.code() << SPAN_END_BITS) | end);
        }
    }

    /// Whether every value ends where a span can say.
    fn fits(&self) -> bool {
        self.strings.len() < 1 << SPAN_END_BITS
    }
}

/// Collects weighted tokens: each once, with its best weight.
#[derive(Default)]
struct Tokens {
    list: Vec<(String, u8)>,
    at: HashMap<String, usize>,
}

impl Tokens {
    fn text(&mut self, text: &str, weight: u8) {
        for w in words(text) {
            match self.at.get(&w) {
                Some(&i) => self.list[i].1 = self.list[i].1.max(weight),
                None => {
                    self.at.insert(w.clone(), self.list.len());
                    self.list.push((w, weight));
                }
            }
        }
    }
}

/// The card-level facet values: provider, capabilities, default modes, bindings.
fn card_facets(card: &Value, b: &mut Builder) {
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

impl Entry {
    /// Build the entry of a signed card (`body`) published at `placement`; `None` when the
    /// bytes are not a JSON object.
    pub fn build(placement: Placement, body: Bytes) -> Option<Entry> {
        let card: Value = serde_json::from_slice(&body).ok()?;
        card.as_object()?;
        let mut b = Builder::default();
        b.push(
            Kind::Description,
            card["description"].as_str().unwrap_or_default(),
        );
        b.push(Kind::Version, card["version"].as_str().unwrap_or_default());
        for skill in card["skills"].as_array().into_iter().flatten() {
            b.facet(Field::Skill, skill["id"].as_str().unwrap_or_default());
            b.push(Kind::SkillName, skill["name"].as_str().unwrap_or_default());
            let description = skill["description"].as_str().unwrap_or_default();
            b.push(Kind::SkillDescription, description);
            for tag in strings(&skill["tags"]) {
                b.facet(Field::Tag, tag);
            }
            for example in strings(&skill["examples"]) {
                b.push(Kind::Example, example);
            }
            for m in strings(&skill["inputModes"]) {
                b.facet(Field::InputMode, m);
            }
            for m in strings(&skill["outputModes"]) {
                b.facet(Field::OutputMode, m);
            }
        }
        card_facets(&card, &mut b);
        b.fits().then_some(())?;
        Some(Entry {
            identifier: format!(
                "urn:air:{}:{}:{}",
                placement.host, placement.namespace, placement.name
            ),
            display_name: card["name"].as_str().unwrap_or_default().into(),
            placement,
            body,
            strings: b.strings.into_boxed_str(),
            spans: b.spans.into_boxed_slice(),
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
        let names = self.of(Kind::SkillName).filter(|_| field == Field::Skill);
        for v in self.facet_values(field).chain(names) {
            out.push(&v.to_lowercase());
        }
        out.list
    }

    /// The values of `field` counted in facets, as written.
    pub fn facet_values(&self, field: Field) -> impl Iterator<Item = &str> {
        let placed = match field {
            Field::Namespace => Some(self.placement.namespace.as_str()),
            Field::Reachable => Some(self.placement.reachable_str()),
            Field::Lifecycle => Some(self.placement.lifecycle_str()),
            _ => None,
        };
        placed
            .filter(|v| !v.is_empty())
            .into_iter()
            .chain(self.of(Kind::Facet(field)))
    }

    /// The kept values of `kind`, in order.
    fn of(&self, kind: Kind) -> impl Iterator<Item = &str> {
        let mut start = 0;
        self.spans.iter().filter_map(move |&span| {
            let end = (span & ((1 << SPAN_END_BITS) - 1)) as usize;
            let value = self.strings.get(start..end);
            start = end;
            value.filter(|_| span >> SPAN_END_BITS == kind.code())
        })
    }

    /// Skill tags, as written, without repeats.
    pub fn tags(&self) -> Vec<&str> {
        self.facet_values(Field::Tag).collect()
    }

    /// Skill ids, as written, without repeats.
    pub fn skill_ids(&self) -> Vec<&str> {
        self.facet_values(Field::Skill).collect()
    }

    /// What people call the agent: its card's `name`, or the AgentCard's name when the card
    /// has none (the web page's headings and its order of names).
    pub fn title(&self) -> &str {
        if self.display_name.is_empty() {
            &self.placement.name
        } else {
            &self.display_name
        }
    }

    /// The card's `description` (empty when it has none).
    pub fn description(&self) -> &str {
        self.of(Kind::Description).next().unwrap_or_default()
    }

    /// The card's `version` (empty when it has none).
    pub fn version(&self) -> &str {
        self.of(Kind::Version).next().unwrap_or_default()
    }

    /// Skill examples, as written, without repeats.
    pub fn examples(&self) -> impl Iterator<Item = &str> {
        self.of(Kind::Example)
    }

    /// The text tokens (lower case, each once) with their weights: name 5, skill names and
    /// tags 3, description 2, the rest (skill descriptions, examples) 1. Derived from the
    /// kept strings on each call (the catalog's index keeps them, the entry does not).
    pub fn tokens(&self) -> Vec<(String, u8)> {
        let mut t = Tokens::default();
        t.text(&self.display_name, 5);
        t.text(self.description(), 2);
        for (kind, weight) in [
            (Kind::SkillName, 3),
            (Kind::Facet(Field::Tag), 3),
            (Kind::SkillDescription, 1),
            (Kind::Example, 1),
        ] {
            for v in self.of(kind) {
                t.text(v, weight);
            }
        }
        t.list
    }

    /// Text relevance of this entry for `query` words, 0–100: each word found scores its
    /// best weight (a word that only starts a card word scores half), over the best possible.
    pub fn score(&self, query: &[String]) -> u8 {
        if query.is_empty() {
            return 0;
        }
        let tokens = self.tokens();
        let mut total = 0u32;
        for q in query {
            let mut best = 0u32;
            for (t, w) in &tokens {
                let (t, w) = (t.as_str(), *w);
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
