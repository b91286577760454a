//! What the operator keeps of the objects it writes and watches in bulk (one ConfigMap and one
//! or two Ingresses per card: 10,000 cards put 20,000–30,000 of them in the stores): enough to
//! tell whose an object is, whether it still holds what the operator wants and what a removal
//! patch must clear, in a fraction of the typed object's memory.
//!
//! Data flow: a watch deserialises each object as its typed form ([`ConfigMap`], [`Ingress`],
//! the metadata read by [`lean_meta`]) and at once turns it into the stored form
//! (`serde(from)`), before the store holds it:
//! - the metadata keeps what identifies the object (name, namespace, uid, resourceVersion, and
//!   its creation and deletion times: what stores, keys and read-your-own-writes read, with no
//!   allocation of their own); labels, annotations, owners and which annotations the operator
//!   set move into a [`SeenMeta`]: all their strings in one allocation, with their ends and
//!   flags (typed, a map's `BTreeMap` node costs about 640 bytes however few entries it has,
//!   every string is an allocation of its own, and an `ObjectMeta` is about 350 bytes inline,
//!   most of it empty);
//! - a [`SeenConfigMap`] keeps its `data` as shared [`Bytes`], which the card server serves
//!   as they are (no copy);
//! - a [`SeenIngress`] keeps a digest of its spec and which optional spec fields are set.
//!
//! Readers look at an existing object's metadata through [`MetaView`], which a [`SeenMeta`] and
//! an HTTPRoute (kept typed) answer; what the operator builds is compared as the typed
//! `ObjectMeta` it is. An object found by a conflicting create is reduced the same way as a
//! watched one.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::networking::v1::{Ingress, IngressSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::ByteString;

use super::compact::{digest, operator_annotations, ANN_LAST_APPLIED};
use super::lean::lean_meta;
use crate::contract::{
    card_configmap_name, extended_configmap_name, CONTENT_CARD, CONTENT_EXTENDED, CONTENT_FEED,
    CONTENT_FEED_PART, CONTENT_JWKS, KEY_CARD, KEY_EXTENDED, KEY_FEED, KEY_JWKS, LABEL_CONTENT,
};

/// One owner reference, as [`MetaView::owners`] lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner<'a> {
    /// `apiVersion` of the owner.
    pub api_version: &'a str,
    /// `kind` of the owner.
    pub kind: &'a str,
    /// Name of the owner.
    pub name: &'a str,
    /// Uid of the owner.
    pub uid: &'a str,
    /// Whether the owner is the controller.
    pub controller: bool,
}

/// What the controllers and the card server read of an existing object's metadata: the
/// compact [`SeenMeta`] of a stored object, or an HTTPRoute kept typed.
pub trait MetaView {
    /// The value of label `key`.
    fn label(&self, key: &str) -> Option<&str>;
    /// The value of annotation `key`.
    fn annotation(&self, key: &str) -> Option<&str>;
    /// The owner references.
    fn owners(&self) -> Vec<Owner<'_>>;
    /// The controlling owner (the API server allows at most one).
    fn controller(&self) -> Option<Owner<'_>> {
        self.owners().into_iter().find(|o| o.controller)
    }
    /// The annotation keys the operator set (by create or apply); the others are someone
    /// else's.
    fn operator_annotations(&self) -> BTreeSet<String>;
}

/// An HTTPRoute (the one kind the controllers keep typed, as a `DynamicObject`) answers from
/// its metadata. A stored form's own `metadata` answers nothing: only its [`SeenMeta`] does,
/// so `ObjectMeta` itself is no `MetaView` (a stripped one would say "not ours" to every
/// question).
impl MetaView for kube::api::DynamicObject {
    fn label(&self, key: &str) -> Option<&str> {
        self.metadata.labels.as_ref()?.get(key).map(String::as_str)
    }

    fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata
            .annotations
            .as_ref()?
            .get(key)
            .map(String::as_str)
    }

    fn owners(&self) -> Vec<Owner<'_>> {
        self.metadata
            .owner_references
            .iter()
            .flatten()
            .map(|o| Owner {
                api_version: &o.api_version,
                kind: &o.kind,
                name: &o.name,
                uid: &o.uid,
                controller: o.controller == Some(true),
            })
            .collect()
    }

    fn operator_annotations(&self) -> BTreeSet<String> {
        operator_annotations(&self.metadata)
    }
}

/// Labels, annotations (without kubectl's last-applied copy), owners, and which annotations
/// the operator set, of a stored object: every string in one allocation (see the module doc).
///
/// The strings are, in order: the label keys and values (sorted by key), the annotation keys
/// and values (sorted by key), then each owner's apiVersion, kind, name and uid. `spans[i]`
/// says where string `i` is: its low 23 bits are where the strings held in `text` end so far
/// (string `i`'s own end when `text` holds it), its high 8 bits [`Span`]'s tag, and the bit
/// between them a flag of the string's owner or annotation ([`SPAN_FLAG`]). A string the
/// operator writes on every object (a key of its labels and annotations, a content label's
/// value, an owner's apiVersion and kind: [`KNOWN`]) is not held but named, and so is one
/// equal to an earlier string of the same object (the card's uid is a label's value and its
/// owner's uid): of the half kilobyte of strings on a card's ConfigMap, about a third is
/// held. The flag of an annotation's key says whether the operator set it (the keys in its
/// `managedFields`); the flag of an owner's apiVersion whether that owner is the controller.
/// 40 bytes inline: a `SeenConfigMap` with its `Arc` fits the allocator's 448-byte class.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SeenMeta {
    text: Box<str>,
    spans: Box<[u32]>,
    labels: u32,
    annotations: u32,
}

/// The strings of one owner reference in [`SeenMeta`]: apiVersion, kind, name, uid.
const OWNER_STRINGS: usize = 4;

/// The strings the operator writes on the objects it owns, which [`SeenMeta`] names by their
/// place here rather than holding (at most 127).
const KNOWN: &[&str] = &[
    crate::contract::LABEL_MANAGED_BY,
    crate::contract::MANAGER,
    crate::contract::LABEL_CARD_UID,
    crate::contract::LABEL_CONTENT,
    crate::contract::LABEL_DISCOVERED_BY,
    CONTENT_CARD,
    CONTENT_EXTENDED,
    CONTENT_JWKS,
    CONTENT_FEED,
    CONTENT_FEED_PART,
    crate::contract::ANN_CARD,
    crate::contract::ANN_HOST,
    crate::contract::ANN_PATH_PREFIX,
    crate::contract::ANN_LEGACY_PATH,
    crate::contract::ANN_CONTENT_HASH,
    crate::contract::ANN_MAX_AGE,
    crate::contract::ANN_KEY_ID,
    crate::contract::ANN_PUBLISHED_AT,
    crate::contract::ANN_DIRECTORY,
    crate::contract::ANN_FEED_PART,
    CARD_API_VERSION,
    "AgentCard",
    "AgentDirectory",
    "",
    "true",
    "false",
];

/// Where [`SeenMeta`] finds one string, as its `spans` entry encodes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Span {
    /// Held in `text`, up to this end.
    Held(usize),
    /// [`KNOWN`]'s string at this place.
    Known(usize),
    /// The same as the object's string at this (earlier) place.
    Same(usize),
}

/// The bits of a `spans` entry that hold the end of `text` so far (Kubernetes keeps an
/// object's metadata far below 8 MiB).
const SPAN_END: u32 = (1 << 23) - 1;
/// The bit of a `spans` entry that flags its owner (the controller) or its annotation (the
/// operator's).
const SPAN_FLAG: u32 = 1 << 23;
/// Tags 1..=127 name [`KNOWN`]'s strings; 128..=255 an earlier string of the object.
const SPAN_SAME: u32 = 128;
/// How many of an object's first strings a later one may name ([`Span::Same`]).
const SAME_MAX: usize = 127;
const _: () = assert!(KNOWN.len() < SPAN_SAME as usize);

impl Span {
    fn encode(self, end: usize, flag: bool) -> u32 {
        let end = u32::try_from(end).unwrap_or(SPAN_END).min(SPAN_END) | u32::from(flag) << 23;
        let tag = match self {
            Span::Held(_) => 0,
            Span::Known(k) => u32::try_from(k + 1).unwrap_or(0),
            Span::Same(i) => SPAN_SAME + u32::try_from(i).unwrap_or(0),
        };
        tag << 24 | end
    }

    fn decode(entry: u32) -> Span {
        match entry >> 24 {
            0 => Span::Held((entry & SPAN_END) as usize),
            tag if tag < SPAN_SAME => Span::Known(tag as usize - 1),
            tag => Span::Same((tag - SPAN_SAME) as usize),
        }
    }
}

impl SeenMeta {
    /// Move labels, annotations and owners out of `meta` (and read the operator's annotation
    /// keys from its `managedFields`), leaving in it only what identifies the object.
    pub fn take(meta: &mut ObjectMeta) -> SeenMeta {
        let ours = operator_annotations(meta);
        let labels = meta.labels.take().unwrap_or_default();
        let mut annotations = meta.annotations.take().unwrap_or_default();
        annotations.remove(ANN_LAST_APPLIED);
        let owners = meta.owner_references.take().unwrap_or_default();
        // A BTreeMap iterates in key order: the pairs come out sorted.
        let strings: Vec<&str> = labels
            .iter()
            .chain(annotations.iter())
            .flat_map(|(k, v)| [k.as_str(), v.as_str()])
            .chain(owners.iter().flat_map(|o| {
                [
                    o.api_version.as_str(),
                    o.kind.as_str(),
                    o.name.as_str(),
                    o.uid.as_str(),
                ]
            }))
            .collect();
        // Flagged, in the same order: the operator's annotation keys, the controller's
        // apiVersion.
        let flagged: Vec<bool> = labels
            .keys()
            .flat_map(|_| [false, false])
            .chain(annotations.keys().flat_map(|k| [ours.contains(k), false]))
            .chain(
                owners
                    .iter()
                    .flat_map(|o| [o.controller == Some(true), false, false, false]),
            )
            .collect();
        let mut text = String::new();
        let mut spans = Vec::with_capacity(strings.len());
        for (i, s) in strings.iter().enumerate() {
            // Only the first 127 strings can be named again: a tenant's object with
            // thousands of annotations costs a bounded search per string.
            let earlier = &strings[..i.min(SAME_MAX)];
            let span = match KNOWN.iter().position(|k| k == s) {
                Some(k) => Span::Known(k),
                None => match earlier.iter().position(|e| e == s) {
                    Some(j) => Span::Same(j),
                    None => {
                        text.push_str(s);
                        Span::Held(text.len())
                    }
                },
            };
            spans.push(span.encode(text.len(), flagged[i]));
        }
        let seen = SeenMeta {
            text: text.into_boxed_str(),
            spans: spans.into_boxed_slice(),
            labels: u32::try_from(labels.len()).unwrap_or(u32::MAX),
            annotations: u32::try_from(annotations.len()).unwrap_or(u32::MAX),
        };
        *meta = ObjectMeta {
            name: meta.name.take(),
            namespace: meta.namespace.take(),
            uid: meta.uid.take(),
            resource_version: meta.resource_version.take(),
            creation_timestamp: meta.creation_timestamp.take(),
            deletion_timestamp: meta.deletion_timestamp.take(),
            ..ObjectMeta::default()
        };
        seen
    }

    /// String `i`.
    fn string(&self, i: usize) -> &str {
        let Some(&entry) = self.spans.get(i) else {
            return "";
        };
        match Span::decode(entry) {
            Span::Held(end) => {
                let start = i
                    .checked_sub(1)
                    .and_then(|p| self.spans.get(p))
                    .map_or(0, |&e| (e & SPAN_END) as usize);
                self.text.get(start..end).unwrap_or_default()
            }
            Span::Known(k) => KNOWN.get(k).copied().unwrap_or_default(),
            // Always an earlier, held or known string: no chain to follow.
            Span::Same(j) if j < i => self.string(j),
            Span::Same(_) => "",
        }
    }

    /// The value of key `key` among the `count` pairs from pair `first` on.
    fn find(&self, first: usize, count: usize, key: &str) -> Option<&str> {
        let (mut lo, mut hi) = (0, count);
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.string(2 * (first + mid)).cmp(key) {
                std::cmp::Ordering::Equal => return Some(self.string(2 * (first + mid) + 1)),
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
            }
        }
        None
    }

    /// Whether string `i` is flagged ([`SPAN_FLAG`]).
    fn flag(&self, i: usize) -> bool {
        self.spans.get(i).is_some_and(|&e| e & SPAN_FLAG != 0)
    }

    /// Where the owners' strings begin.
    fn owners_at(&self) -> usize {
        2 * (self.labels as usize + self.annotations as usize)
    }

    fn owner_count(&self) -> usize {
        self.spans.len().saturating_sub(self.owners_at()) / OWNER_STRINGS
    }

    /// Owner reference `i`.
    fn owner(&self, i: usize) -> Owner<'_> {
        let at = self.owners_at() + OWNER_STRINGS * i;
        Owner {
            api_version: self.string(at),
            kind: self.string(at + 1),
            name: self.string(at + 2),
            uid: self.string(at + 3),
            controller: self.flag(at),
        }
    }
}

impl MetaView for SeenMeta {
    fn label(&self, key: &str) -> Option<&str> {
        self.find(0, self.labels as usize, key)
    }

    fn annotation(&self, key: &str) -> Option<&str> {
        self.find(self.labels as usize, self.annotations as usize, key)
    }

    fn owners(&self) -> Vec<Owner<'_>> {
        (0..self.owner_count()).map(|i| self.owner(i)).collect()
    }

    fn controller(&self) -> Option<Owner<'_>> {
        // Read in place: asked on every reconcile and every ConfigMap event.
        (0..self.owner_count())
            .find(|&i| self.flag(self.owners_at() + OWNER_STRINGS * i))
            .map(|i| self.owner(i))
    }

    fn operator_annotations(&self) -> BTreeSet<String> {
        let first = self.labels as usize;
        (0..self.annotations as usize)
            .filter(|i| self.flag(2 * (first + i)))
            .map(|i| self.string(2 * (first + i)).to_string())
            .collect()
    }
}

/// Implements `kube::Resource` for a stored form with the API coordinates of its typed kind
/// ([`super::resource_as`]), and [`MetaView`] by its `seen` part. Its `meta()` holds what
/// identifies the object alone: `ResourceExt::labels()` and the like answer empty, so labels,
/// annotations and owners are read through `MetaView` (`cm.label(..)`, `cm.controller()`).
macro_rules! stored_as {
    ($stored:ty, $typed:ty) => {
        super::resource_as!($stored, $typed);

        impl MetaView for $stored {
            fn label(&self, key: &str) -> Option<&str> {
                self.seen.label(key)
            }

            fn annotation(&self, key: &str) -> Option<&str> {
                self.seen.annotation(key)
            }

            fn owners(&self) -> Vec<Owner<'_>> {
                self.seen.owners()
            }

            fn controller(&self) -> Option<Owner<'_>> {
                self.seen.controller()
            }

            fn operator_annotations(&self) -> BTreeSet<String> {
                self.seen.operator_annotations()
            }
        }
    };
}

/// The `apiVersion` of the AgentCards that own the ConfigMaps the operator writes.
const CARD_API_VERSION: &str = "agentcard.dev/v1alpha1";

/// A ConfigMap as the stores hold it (see the module doc).
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(from = "WireConfigMap")]
pub struct SeenConfigMap {
    /// What identifies the ConfigMap (name, namespace, uid, resourceVersion).
    pub metadata: ObjectMeta,
    /// Its labels, annotations and owners.
    pub seen: SeenMeta,
    /// `data` and `binaryData`, sorted by key; each value the bytes of its string (`data`)
    /// or the decoded bytes (`binaryData`).
    data: Box<[(Box<str>, Bytes)]>,
    /// Whether [`SeenConfigMap::keep_only_ours`] dropped data keys the operator never reads
    /// (so the object does not hold exactly what the operator wrote).
    dropped: bool,
}

impl SeenConfigMap {
    /// The bytes of `data[key]` (valid UTF-8: they were a string) or `binaryData[key]`.
    pub fn bytes(&self, key: &str) -> Option<&Bytes> {
        self.data
            .binary_search_by(|(k, _)| k.as_ref().cmp(key))
            .ok()
            .map(|i| &self.data[i].1)
    }

    /// `data[key]`.
    pub fn text(&self, key: &str) -> Option<&str> {
        self.bytes(key).and_then(|b| std::str::from_utf8(b).ok())
    }

    /// Whether `data` is exactly `want`.
    pub fn holds_data(&self, want: &Option<BTreeMap<String, String>>) -> bool {
        let want = want.as_ref();
        !self.dropped
            && self.data.len() == want.map_or(0, BTreeMap::len)
            && want
                .into_iter()
                .flatten()
                .zip(self.data.iter())
                .all(|((wk, wv), (hk, hv))| {
                    wk.as_str() == hk.as_ref() && wv.as_bytes() == hv.as_ref()
                })
    }
}

impl From<ConfigMap> for SeenConfigMap {
    fn from(cm: ConfigMap) -> SeenConfigMap {
        let mut metadata = cm.metadata;
        let seen = SeenMeta::take(&mut metadata);
        let mut data: Vec<(Box<str>, Bytes)> = cm
            .data
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.into_boxed_str(), Bytes::from(v.into_bytes())))
            .chain(
                cm.binary_data
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| (k.into_boxed_str(), Bytes::from(v.0))),
            )
            .collect();
        // `data` and `binaryData` never share a key (the API server refuses it).
        data.sort_by(|a, b| a.0.cmp(&b.0));
        let data = data.into_boxed_slice();
        SeenConfigMap {
            metadata,
            seen,
            data,
            dropped: false,
        }
    }
}

impl SeenConfigMap {
    /// Keep of a watched ConfigMap only what the operator itself wrote and reads, so what a
    /// tenant labels as the operator's costs every replica a few bytes, not its size:
    /// - a card ([`CONTENT_CARD`]) controlled by an AgentCard and named as the operator names
    ///   that card's ConfigMap ([`card_configmap_name`]): its metadata and [`KEY_CARD`];
    /// - a card's extended card ([`CONTENT_EXTENDED`]), the same way under its own name
    ///   ([`extended_configmap_name`]) and key ([`KEY_EXTENDED`]);
    /// - the JWKS and the change-feed logs, in `operator_namespace` only: their metadata and
    ///   their one key;
    /// - anything else: what identifies it (name, namespace, uid, resourceVersion) and no
    ///   labels, annotations, owners or data. Readers take it for an object that is not the
    ///   operator's, as it is.
    pub fn keep_only_ours(&mut self, operator_namespace: &str) {
        let key = match self.seen.label(LABEL_CONTENT) {
            Some(CONTENT_CARD) if self.is_a_cards_own(KEY_CARD, card_configmap_name) => {
                Some(KEY_CARD)
            }
            Some(CONTENT_EXTENDED)
                if self.is_a_cards_own(KEY_EXTENDED, extended_configmap_name) =>
            {
                Some(KEY_EXTENDED)
            }
            Some(CONTENT_JWKS) if self.in_namespace(operator_namespace) => Some(KEY_JWKS),
            Some(CONTENT_FEED | CONTENT_FEED_PART) if self.in_namespace(operator_namespace) => {
                Some(KEY_FEED)
            }
            _ => None,
        };
        let Some(key) = key else {
            self.seen = SeenMeta::default();
            self.dropped = !self.data.is_empty();
            self.data = Box::default();
            return;
        };
        if self.data.iter().any(|(k, _)| k.as_ref() != key) {
            self.dropped = true;
            let kept: Vec<(Box<str>, Bytes)> = self
                .data
                .iter()
                .filter(|(k, _)| k.as_ref() == key)
                .cloned()
                .collect();
            self.data = kept.into_boxed_slice();
        }
    }

    /// [`SeenConfigMap::keep_only_ours`] for a serving-only replica (`serve --from-cluster`),
    /// which reads of a card's own ConfigMap (public or extended card) only its content
    /// label, its controller and its bytes: the card's status says where and what is served,
    /// so the annotations and other labels the operator writes there (about half a kilobyte a
    /// card), which only the controllers compare, go. The JWKS and feed ConfigMaps keep theirs.
    pub fn keep_only_served(&mut self, operator_namespace: &str) {
        self.keep_only_ours(operator_namespace);
        let content = match self.seen.label(LABEL_CONTENT) {
            Some(c @ (CONTENT_CARD | CONTENT_EXTENDED)) => c.to_string(),
            _ => return,
        };
        let controller = self.seen.controller().map(|o| OwnerReference {
            api_version: o.api_version.to_string(),
            kind: o.kind.to_string(),
            name: o.name.to_string(),
            uid: o.uid.to_string(),
            controller: Some(true),
            ..OwnerReference::default()
        });
        let mut kept = ObjectMeta {
            labels: Some([(LABEL_CONTENT.to_string(), content)].into()),
            owner_references: controller.map(|o| vec![o]),
            ..ObjectMeta::default()
        };
        self.seen = SeenMeta::take(&mut kept);
    }

    fn in_namespace(&self, ns: &str) -> bool {
        self.metadata.namespace.as_deref() == Some(ns)
    }

    /// Controlled by an AgentCard (of the version the operator writes, which the garbage
    /// collector resolves: a reference to an AgentCard that does not exist goes with its
    /// ConfigMap) whose ConfigMap of this content is named so (`name` of the card's name),
    /// holding no more under `key` than a published card may.
    fn is_a_cards_own(&self, key: &str, name: fn(&str) -> String) -> bool {
        let fits = self
            .bytes(key)
            .is_none_or(|b| b.len() <= crate::a2a::validate::MAX_CARD_BYTES);
        fits && self.seen.controller().is_some_and(|o| {
            o.kind == "AgentCard"
                && o.api_version == CARD_API_VERSION
                && self.metadata.name.as_deref() == Some(name(o.name).as_str())
        })
    }
}

stored_as!(SeenConfigMap, ConfigMap);

/// A ConfigMap as a watch sends it, its metadata read by [`lean_meta`] (no field trees built
/// only to be dropped by [`SeenMeta::take`]).
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireConfigMap {
    #[serde(default, deserialize_with = "lean_meta")]
    metadata: ObjectMeta,
    binary_data: Option<BTreeMap<String, ByteString>>,
    data: Option<BTreeMap<String, String>>,
    immutable: Option<bool>,
}

impl From<WireConfigMap> for SeenConfigMap {
    fn from(w: WireConfigMap) -> SeenConfigMap {
        SeenConfigMap::from(ConfigMap {
            metadata: w.metadata,
            binary_data: w.binary_data,
            data: w.data,
            immutable: w.immutable,
        })
    }
}

/// An Ingress as the controllers' store holds it (see the module doc).
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(from = "WireIngress")]
pub struct SeenIngress {
    /// What identifies the Ingress (name, namespace, uid, resourceVersion).
    pub metadata: ObjectMeta,
    /// Its labels, annotations and owners.
    pub seen: SeenMeta,
    /// [`digest`] of the whole `spec` (the operator writes all of it).
    spec_digest: u64,
    /// The optional spec fields that are set.
    pub optional: OptionalSpec,
}

/// Which optional spec fields an Ingress has: the ones a merge patch clears when the operator
/// no longer wants them (a create co-owns every field it wrote).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OptionalSpec {
    /// `spec.tls`.
    pub tls: bool,
    /// `spec.ingressClassName`.
    pub class: bool,
    /// `spec.defaultBackend`.
    pub default_backend: bool,
}

impl OptionalSpec {
    /// The optional fields `spec` sets.
    pub fn of(spec: Option<&IngressSpec>) -> OptionalSpec {
        spec.map_or_else(OptionalSpec::default, |s| OptionalSpec {
            tls: s.tls.is_some(),
            class: s.ingress_class_name.is_some(),
            default_backend: s.default_backend.is_some(),
        })
    }
}

impl SeenIngress {
    /// Whether this Ingress's spec is exactly `spec`.
    pub fn holds_spec(&self, spec: &Option<IngressSpec>) -> bool {
        self.spec_digest == digest(spec)
    }
}

impl From<Ingress> for SeenIngress {
    fn from(ing: Ingress) -> SeenIngress {
        let mut metadata = ing.metadata;
        let seen = SeenMeta::take(&mut metadata);
        SeenIngress {
            metadata,
            seen,
            spec_digest: digest(&ing.spec),
            optional: OptionalSpec::of(ing.spec.as_ref()),
        }
    }
}

stored_as!(SeenIngress, Ingress);

/// An Ingress as a watch sends it, its metadata read by [`lean_meta`]; its status, which the
/// stored form does not keep, skipped.
#[derive(serde::Deserialize)]
struct WireIngress {
    #[serde(default, deserialize_with = "lean_meta")]
    metadata: ObjectMeta,
    spec: Option<IngressSpec>,
}

impl From<WireIngress> for SeenIngress {
    fn from(w: WireIngress) -> SeenIngress {
        SeenIngress::from(Ingress {
            metadata: w.metadata,
            spec: w.spec,
            status: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ingress(host: &str, class: Option<&str>) -> serde_json::Value {
        let mut spec = json!({"rules": [{"host": host, "http": {"paths": [{"path": "/x",
            "pathType": "Exact", "backend": {"service": {"name": "s", "port": {"name": "http"}}}}]}}]});
        if let Some(c) = class {
            spec["ingressClassName"] = json!(c);
        }
        json!({"metadata": {"name": "i", "namespace": "ops", "resourceVersion": "7",
            "managedFields": [{"manager": "agentcard-operator", "operation": "Apply",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:annotations": {"f:a": {}}}}}],
            "annotations": {"a": "1"}},
            "spec": spec,
            "status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}]}}})
    }

    fn configmap(
        ns: &str,
        name: &str,
        content: &str,
        owner: Option<(&str, &str)>,
    ) -> SeenConfigMap {
        let owners: Vec<serde_json::Value> = owner
            .map(|(kind, name)| {
                json!({"apiVersion": "agentcard.dev/v1alpha1", "kind": kind,
                "name": name, "uid": "u1", "controller": true})
            })
            .into_iter()
            .collect();
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": ns, "uid": "cm1",
            "labels": {crate::contract::LABEL_MANAGED_BY: "agentcard-operator", LABEL_CONTENT: content},
            "annotations": {"big": "y".repeat(4096)},
            "ownerReferences": owners},
            "data": {KEY_CARD: "{}", KEY_EXTENDED: "{}", KEY_JWKS: "{}", KEY_FEED: "x", "extra": "z".repeat(100_000)}}))
        .unwrap()
    }

    fn held_bytes(cm: &SeenConfigMap) -> usize {
        cm.data
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum::<usize>()
            + cm.seen.text.len()
    }

    #[test]
    fn a_serving_replica_keeps_of_a_cards_configmap_what_the_card_server_reads() {
        for (name, content, key) in [
            ("agentcard-a", CONTENT_CARD, KEY_CARD),
            ("extended-agentcard-a", CONTENT_EXTENDED, KEY_EXTENDED),
        ] {
            let mut full = configmap("team", name, content, Some(("AgentCard", "a")));
            full.keep_only_ours("ops");
            let mut served = configmap("team", name, content, Some(("AgentCard", "a")));
            served.keep_only_served("ops");
            assert_eq!(served.bytes(key), full.bytes(key));
            assert_eq!(served.seen.label(LABEL_CONTENT), Some(content));
            assert_eq!(served.seen.controller(), full.seen.controller());
            assert!(served.seen.controller().is_some());
            assert_eq!(served.seen.annotation("big"), None);
            assert!(
                held_bytes(&served) + 4096 <= held_bytes(&full),
                "{} of {}",
                held_bytes(&served),
                held_bytes(&full)
            );
            assert_eq!(served.metadata.name, full.metadata.name);
        }
        // The operator's own ConfigMaps keep the annotations the card server reads there.
        let mut jwks = configmap("ops", "jwks", CONTENT_JWKS, None);
        jwks.keep_only_served("ops");
        assert_eq!(jwks.seen.annotation("big").map(str::len), Some(4096));
        assert_eq!(jwks.text(KEY_JWKS), Some("{}"));
    }

    #[test]
    fn only_what_the_operator_wrote_is_kept_of_a_configmap_labelled_as_its() {
        // A card's own ConfigMap: its one key (and a mark that others were there).
        let mut own = configmap(
            "team",
            "agentcard-a",
            CONTENT_CARD,
            Some(("AgentCard", "a")),
        );
        own.keep_only_ours("ops");
        assert_eq!(own.text(KEY_CARD), Some("{}"));
        assert!(own.bytes("extra").is_none() && own.bytes(KEY_JWKS).is_none());
        assert!(own.seen.controller().is_some());
        let want = Some([(KEY_CARD.to_string(), "{}".to_string())].into());
        assert!(
            !own.holds_data(&want),
            "keys were dropped: not what the operator wrote"
        );
        // A card's extended card: its one key, under its own name.
        let mut extended = configmap(
            "team",
            "extended-agentcard-a",
            CONTENT_EXTENDED,
            Some(("AgentCard", "a")),
        );
        extended.keep_only_ours("ops");
        assert_eq!(extended.text(KEY_EXTENDED), Some("{}"));
        assert!(extended.bytes(KEY_CARD).is_none() && extended.bytes("extra").is_none());
        // Forged: another name than its card's, another kind of owner, no owner, the
        // operator's own kinds outside its namespace, an unknown content: a few bytes each.
        for (ns, name, content, owner) in [
            ("team", "copy", CONTENT_CARD, Some(("AgentCard", "a"))),
            (
                "team",
                "agentcard-a",
                CONTENT_CARD,
                Some(("Deployment", "a")),
            ),
            ("team", "agentcard-a", CONTENT_CARD, None),
            // The public card's name with the extended card's content, and the reverse.
            (
                "team",
                "agentcard-a",
                CONTENT_EXTENDED,
                Some(("AgentCard", "a")),
            ),
            (
                "team",
                "extended-agentcard-a",
                CONTENT_CARD,
                Some(("AgentCard", "a")),
            ),
            ("team", "agentcard-jwks", CONTENT_JWKS, None),
            (
                "team",
                "agentcard-feed-d",
                CONTENT_FEED,
                Some(("AgentDirectory", "d")),
            ),
            ("team", "agentcard-feed-d-1", CONTENT_FEED_PART, None),
            ("team", "x", "other", None),
        ] {
            let mut cm = configmap(ns, name, content, owner);
            assert!(held_bytes(&cm) > 100_000);
            cm.keep_only_ours("ops");
            assert_eq!(held_bytes(&cm), 0, "{ns}/{name} ({content})");
            assert!(cm.seen.label(LABEL_CONTENT).is_none() && cm.seen.controller().is_none());
            assert_eq!(cm.metadata.name.as_deref(), Some(name));
        }
        // The operator's own kinds in its namespace: their one key.
        for (content, key) in [
            (CONTENT_JWKS, KEY_JWKS),
            (CONTENT_FEED, KEY_FEED),
            (CONTENT_FEED_PART, KEY_FEED),
        ] {
            let mut cm = configmap("ops", "n", content, None);
            cm.keep_only_ours("ops");
            assert!(
                cm.bytes(key).is_some() && cm.bytes("extra").is_none(),
                "{content}"
            );
            assert_eq!(cm.seen.label(LABEL_CONTENT), Some(content));
        }
    }

    #[test]
    fn a_seen_ingress_holds_exactly_the_spec_it_was_read_with() {
        let seen: SeenIngress =
            serde_json::from_value(ingress("a.example", Some("nginx"))).unwrap();
        let same: Ingress = serde_json::from_value(ingress("a.example", Some("nginx"))).unwrap();
        let other_host: Ingress =
            serde_json::from_value(ingress("b.example", Some("nginx"))).unwrap();
        let no_class: Ingress = serde_json::from_value(ingress("a.example", None)).unwrap();
        assert!(seen.holds_spec(&same.spec));
        assert!(!seen.holds_spec(&other_host.spec));
        assert!(!seen.holds_spec(&no_class.spec));
        assert!(!seen.holds_spec(&None));
        assert_eq!(
            seen.optional,
            OptionalSpec {
                tls: false,
                class: true,
                default_backend: false
            }
        );
        // What identifies it stays in the metadata; the rest is compact.
        assert_eq!(seen.metadata.resource_version.as_deref(), Some("7"));
        assert!(seen.metadata.annotations.is_none() && seen.metadata.managed_fields.is_none());
        assert_eq!(seen.seen.annotation("a"), Some("1"));
        assert_eq!(seen.seen.operator_annotations(), ["a".to_string()].into());
    }

    #[test]
    fn without_labels_owners_and_operator_annotations_still_sit_where_they_belong() {
        // Annotations (one the operator set) and owners, no labels: the offsets start at zero.
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "team",
                "annotations": {"mine": "1", "theirs": "2"},
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Other", "name": "o", "uid": "o-1"},
                    {"apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentCard", "name": "w",
                     "uid": "card-1", "controller": true}],
                "managedFields": [{"manager": "agentcard-operator", "operation": "Update",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:annotations": {"f:mine": {}}}}}]},
        }))
        .unwrap();
        let typed = kube::api::DynamicObject {
            types: None,
            metadata: cm.metadata.clone(),
            data: json!({}),
        };
        let seen = SeenConfigMap::from(cm);
        // The stored form answers as a MetaView itself, the same as its seen part.
        let view: &dyn MetaView = &seen;
        assert_eq!(view.label("mine"), None);
        assert_eq!(view.annotation("mine"), Some("1"));
        assert_eq!(view.annotation("theirs"), Some("2"));
        assert_eq!(view.owners(), typed.owners());
        assert_eq!(view.controller().map(|o| o.uid), Some("card-1"));
        assert_eq!(view.controller(), typed.controller());
        assert_eq!(view.operator_annotations(), ["mine".to_string()].into());
        assert_eq!(view.operator_annotations(), typed.operator_annotations());
    }

    /// The stores keep one `Arc<SeenConfigMap>` per card (two counters before it): past
    /// jemalloc's 448-byte size class it takes the 512-byte one, 6 MiB more at 100,000 cards.
    #[test]
    fn a_stored_configmap_and_ingress_fit_the_448_byte_size_class() {
        let arc = 2 * std::mem::size_of::<usize>();
        assert!(arc + std::mem::size_of::<SeenConfigMap>() <= 448);
        assert!(arc + std::mem::size_of::<SeenIngress>() <= 448);
    }

    #[test]
    fn the_operators_own_strings_and_repeats_are_named_not_held() {
        use crate::contract::{
            ANN_CARD, ANN_CONTENT_HASH, ANN_HOST, ANN_LEGACY_PATH, LABEL_CARD_UID,
            LABEL_MANAGED_BY, MANAGER,
        };
        let uid = "0f8e5b1c-2d3a-4b5c-8d9e-0a1b2c3d4e5f";
        let hash = format!("sha256:{}", "ab".repeat(32));
        let many: serde_json::Map<String, serde_json::Value> = (0..70)
            .map(|i| (format!("t{i:02}"), json!(format!("v{i}"))))
            .collect();
        let mut meta: ObjectMeta = serde_json::from_value(json!({
            "name": "card-w", "namespace": "team",
            "labels": {LABEL_MANAGED_BY: MANAGER, LABEL_CARD_UID: uid, LABEL_CONTENT: CONTENT_CARD},
            "annotations": {ANN_CARD: "team/w", ANN_HOST: "w.example.com", ANN_LEGACY_PATH: "false",
                            ANN_CONTENT_HASH: hash, "example.com/x": "w.example.com"},
            "ownerReferences": [{"apiVersion": CARD_API_VERSION, "kind": "AgentCard", "name": "w",
                                 "uid": uid, "controller": true}]
        }))
        .unwrap();
        let seen = SeenMeta::take(&mut meta);
        // Held: the uid once, "team/w", the host once, the hash, a tenant's key, "w".
        let held = [uid, "team/w", "w.example.com", &hash, "example.com/x", "w"];
        assert_eq!(seen.text.len(), held.iter().map(|h| h.len()).sum::<usize>());
        assert_eq!(seen.label(LABEL_MANAGED_BY), Some(MANAGER));
        assert_eq!(seen.label(LABEL_CARD_UID), Some(uid));
        assert_eq!(seen.label(LABEL_CONTENT), Some(CONTENT_CARD));
        assert_eq!(seen.annotation(ANN_CARD), Some("team/w"));
        assert_eq!(seen.annotation(ANN_HOST), Some("w.example.com"));
        assert_eq!(seen.annotation("example.com/x"), Some("w.example.com"));
        assert_eq!(seen.annotation(ANN_LEGACY_PATH), Some("false"));
        assert_eq!(seen.annotation(ANN_CONTENT_HASH), Some(hash.as_str()));
        let owner = seen.controller().expect("its controller");
        assert_eq!(
            (owner.api_version, owner.kind, owner.name, owner.uid),
            (CARD_API_VERSION, "AgentCard", "w", uid)
        );

        // A repeat of one of the first 127 strings is named; of a later one, held again.
        let mut meta: ObjectMeta = serde_json::from_value(json!({
            "labels": many,
            "annotations": {"u1": "v0", "u2": "v65"},
        }))
        .unwrap();
        let seen = SeenMeta::take(&mut meta);
        for i in 0..70 {
            assert_eq!(
                seen.label(&format!("t{i:02}")),
                Some(format!("v{i}").as_str())
            );
        }
        assert_eq!(seen.annotation("u1"), Some("v0"));
        assert_eq!(seen.annotation("u2"), Some("v65"));
        // "v0" (string 1) is named; "v65" (string 131, past the first 127) is held again.
        let labels: usize = (0..70).map(|i| format!("t{i:02}v{i}").len()).sum();
        assert_eq!(seen.text.len(), labels + "u1u2v65".len());
    }

    #[test]
    fn a_seen_configmap_answers_as_the_configmap_it_was_read_from() {
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "team", "uid": "u-1", "resourceVersion": "9",
                "generation": 3, "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"z": "1", "a": "2", "m": "3"},
                "annotations": {"k": "v", ANN_LAST_APPLIED: "{}", "b": ""},
                "ownerReferences": [
                    {"apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentCard", "name": "w",
                     "uid": "card-1", "controller": true},
                    {"apiVersion": "v1", "kind": "Other", "name": "o", "uid": "o-1"}],
                "managedFields": [{"manager": "agentcard-operator", "operation": "Update",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:annotations": {"f:k": {}}}}}]},
            "data": {"two": "2", "one": "{\"x\":1}"}
        }))
        .unwrap();
        let seen = SeenConfigMap::from(cm.clone());
        for (k, v) in [("z", "1"), ("a", "2"), ("m", "3")] {
            assert_eq!(seen.seen.label(k), Some(v), "label {k}");
        }
        assert_eq!(seen.seen.label("missing"), None);
        assert_eq!(seen.seen.annotation("k"), Some("v"));
        assert_eq!(seen.seen.annotation("b"), Some(""));
        assert_eq!(seen.seen.annotation(ANN_LAST_APPLIED), None);
        let typed = kube::api::DynamicObject {
            types: None,
            metadata: cm.metadata.clone(),
            data: json!({}),
        };
        assert_eq!(seen.seen.owners(), typed.owners());
        assert_eq!(seen.seen.owners().len(), 2);
        assert!(seen.seen.owners()[0].controller && !seen.seen.owners()[1].controller);
        assert_eq!(seen.seen.controller(), typed.controller());
        assert_eq!(seen.seen.controller().map(|o| o.uid), Some("card-1"));
        assert_eq!(
            seen.seen.operator_annotations(),
            typed.operator_annotations()
        );
        assert_eq!(seen.seen.operator_annotations(), ["k".to_string()].into());
        assert_eq!(seen.text("one"), Some("{\"x\":1}"));
        assert_eq!(seen.text("none"), None);
        assert!(seen.holds_data(&cm.data));
        let mut other = cm.data.clone().unwrap();
        other.insert("two".into(), "3".into());
        assert!(!seen.holds_data(&Some(other.clone())));
        other.remove("two");
        assert!(!seen.holds_data(&Some(other)));
        assert!(!seen.holds_data(&None));
        // Identity stays; nothing else of the typed metadata is kept.
        assert_eq!(seen.metadata.uid.as_deref(), Some("u-1"));
        assert_eq!(seen.metadata.resource_version.as_deref(), Some("9"));
        assert_eq!(
            seen.metadata,
            ObjectMeta {
                name: Some("c".into()),
                namespace: Some("team".into()),
                uid: Some("u-1".into()),
                resource_version: Some("9".into()),
                creation_timestamp: cm.metadata.creation_timestamp.clone(),
                ..ObjectMeta::default()
            }
        );
    }
}
