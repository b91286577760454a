//! What an upstream's reader keeps between refreshes ([`State`]) and what it made of the
//! upstream's entries ([`Held`]: listed, refused, bounded by `maxEntries`), with the rules an
//! entry meets before it is read (its identifier) and after (the `include` filters). Pure:
//! the feed and ARD readers fill it, the sync hands [`Held::selected`] to the federation.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::Bytes;

use super::client::cut;
use super::error::Error;
use crate::a2a::Jwks;
use crate::crd::agentdirectory::Upstream;
use crate::directory::entry::Entry;
use crate::directory::native;
use crate::directory::query::{Catalog, Query};

/// Most bytes of an identifier taken from an upstream.
pub const MAX_IDENTIFIER: usize = 512;

/// Whether `id` is an ARD identifier ([`crate::directory::ard::is_identifier`], the
/// `urn:ai:` alias taken for `urn:air:`) of at most [`MAX_IDENTIFIER`] bytes: what else an
/// upstream sends is neither kept nor logged whole.
pub fn valid_identifier(id: &str) -> bool {
    use crate::directory::ard::{canonical_identifier, is_identifier};
    id.len() <= MAX_IDENTIFIER && is_identifier(&canonical_identifier(id))
}

/// One entry read from an upstream, or why it is refused.
#[derive(Clone)]
pub(super) enum Read {
    Entry(Arc<Entry>),
    Refused(String),
}

/// What a sync task keeps between refreshes.
#[derive(Default)]
pub(super) struct State {
    /// What the last read made of the upstream's entries.
    pub(super) held: Held,
    /// Feed cursor (`kind: AgentDirectory`).
    pub(super) cursor: Option<String>,
    /// ETag of the first ARD page, and of each listed card's URL with its bytes.
    pub(super) first_page: Option<String>,
    pub(super) cards: HashMap<String, (String, Bytes)>,
    /// The trusted keys and their ETag.
    pub(super) jwks: Option<(Option<String>, Arc<Jwks>)>,
    /// The upstream's base URL and the client for it, built at the first refresh (its
    /// connections are reused by the next ones), and the cluster addresses it was built to
    /// refuse.
    pub(super) http: Option<(url::Url, reqwest::Client, Arc<Vec<std::net::IpAddr>>)>,
}

/// One upstream's entries as read, bounded by `maxEntries` (`max`): at most `max` listed (only
/// those the `include` filters select, so entries it leaves out take no room), and at most
/// `max` refusals remembered with why (cut); refusals past that are only counted. An entry
/// `include` leaves out is neither listed nor counted.
#[derive(Clone, Debug, Default)]
pub(super) struct Held {
    listed: BTreeMap<String, Arc<Entry>>,
    refused: BTreeMap<String, String>,
    /// Refusals not remembered (past `max` of them), and why the first was.
    overflow: usize,
    first_overflow: Option<String>,
}

impl Held {
    /// Whether an entry of identifier `id` is worth reading: a valid identifier, and room
    /// (one already listed is always read again). Refuses it, saying why, when not.
    pub(super) fn admits(&mut self, id: &str, max: usize) -> bool {
        let why = if !valid_identifier(id) {
            format!(
                "{}: not an ARD identifier (urn:air:..., at most {MAX_IDENTIFIER} bytes)",
                cut(id)
            )
        } else if self.listed.len() >= max && !self.listed.contains_key(id) {
            format!("{id}: past maxEntries ({max}): not kept")
        } else {
            return true;
        };
        self.refuse(id, &why, max);
        false
    }

    /// Take what was read of `id`: listed when `include` selects it and there is room,
    /// forgotten when `include` leaves it out, refused otherwise. `true` when listed.
    pub(super) fn take(
        &mut self,
        id: &str,
        read: Read,
        include: Option<&Query>,
        max: usize,
    ) -> bool {
        match read {
            Read::Refused(why) => self.refuse(id, &why, max),
            Read::Entry(e) if include.is_some_and(|q| !selects(q, &e)) => self.remove(id),
            Read::Entry(e) if self.listed.len() < max || self.listed.contains_key(id) => {
                self.refused.remove(id);
                self.listed.insert(id.to_string(), e);
                return true;
            }
            Read::Entry(_) => {
                self.refuse(id, &format!("{id}: past maxEntries ({max}): not kept"), max)
            }
        }
        false
    }

    fn refuse(&mut self, id: &str, why: &str, max: usize) {
        self.listed.remove(id);
        let key = cut(id).into_owned();
        if self.refused.len() < max || self.refused.contains_key(&key) {
            self.refused.insert(key, cut(why).into_owned());
        } else {
            self.overflow += 1;
            self.first_overflow
                .get_or_insert_with(|| cut(why).into_owned());
        }
    }

    /// A delete: `id` is gone upstream.
    pub(super) fn remove(&mut self, id: &str) {
        self.listed.remove(id);
        self.refused.remove(id);
    }

    /// The entries to list (by identifier), how many are refused, and the first refusal.
    pub(super) fn selected(&self) -> Selected {
        Selected {
            entries: self.listed.values().cloned().collect(),
            refused: self.refused.len() + self.overflow,
            first_refusal: self
                .refused
                .values()
                .next()
                .cloned()
                .or_else(|| self.first_overflow.clone()),
        }
    }
}

/// What an upstream's held entries give its directory.
pub(super) struct Selected {
    /// The entries to list.
    pub(super) entries: Vec<Arc<Entry>>,
    /// How many were refused (or did not fit `maxEntries`).
    pub(super) refused: usize,
    /// Why the first was refused.
    pub(super) first_refusal: Option<String>,
}

/// Whether `include` selects `e`, asked of the entry alone (as the directory's own query
/// engine would answer it over a catalog of one).
pub(super) fn selects(include: &Query, e: &Arc<Entry>) -> bool {
    Catalog::build(vec![e.clone()])
        .list(include, None, None, 1)
        .total
        == 1
}

/// The `include` filters of `up` as a query (`None`: everything), or why they are wrong.
pub(super) fn include_of(up: &Upstream) -> Result<Option<Query>, Error> {
    if up.include.is_empty() {
        return Ok(None);
    }
    native::request(&up.include, false)
        .map(|r| Some(r.query))
        .map_err(|e| Error::Include(e.message))
}

/// The most entries kept of `up` (`maxEntries`, default 10,000).
pub(super) fn max_entries(up: &Upstream) -> usize {
    usize::try_from(up.max_entries.unwrap_or(10_000)).unwrap_or(10_000)
}

/// What one refresh reads with: the upstream, this directory's registry identifier, the
/// `include` filters and `maxEntries`.
pub(super) struct Refresh<'a> {
    pub(super) up: &'a Upstream,
    pub(super) own: &'a str,
    pub(super) include: Option<&'a Query>,
    pub(super) max: usize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::directory::entry::Placement;

    fn read(name: &str, tag: &str) -> Read {
        let body = format!(
            r#"{{"name":"{name}","description":"d","skills":[{{"id":"s","name":"S","tags":["{tag}"]}}]}}"#
        );
        let placement = Placement {
            namespace: "t".into(),
            name: name.into(),
            host: format!("{name}.example"),
            ..Placement::default()
        };
        Read::Entry(Arc::new(
            Entry::build(placement, Bytes::from(body)).unwrap(),
        ))
    }

    fn upstream(include: &[(&str, &str)], max: Option<i64>) -> Upstream {
        Upstream {
            name: "u".into(),
            url: "http://u.example".into(),
            include: crate::directory::tests::params(include),
            max_entries: max,
            ..Upstream::default()
        }
    }

    /// What `reads` (identifier, what was read) make of a fresh set under `up`.
    fn held_of(up: &Upstream, reads: &[(&str, Read)]) -> (Vec<String>, usize, Option<String>) {
        let include = include_of(up).unwrap();
        let max = max_entries(up);
        let mut held = Held::default();
        for (id, read) in reads {
            if held.admits(id, max) {
                held.take(id, read.clone(), include.as_ref(), max);
            }
        }
        let Selected {
            entries,
            refused,
            first_refusal: first,
        } = held.selected();
        let names = entries.iter().map(|e| e.placement.name.clone()).collect();
        (names, refused, first)
    }

    #[test]
    fn include_filters_then_max_entries_then_refusals_are_counted() {
        // Arrival order: refused and left-out entries take no room under maxEntries.
        let reads = [
            (
                "urn:air:x.example:t:x",
                Read::Refused("x: not an Agent Card".into()),
            ),
            ("urn:air:b.example:t:b", read("b", "internal")),
            ("urn:air:e.example:t:e", read("e", "internal")),
            ("urn:air:a.example:t:a", read("a", "public")),
            ("urn:air:c.example:t:c", read("c", "public")),
            ("urn:air:d.example:t:d", read("d", "public")),
        ];
        let (all, refused, first) = held_of(&upstream(&[], None), &reads);
        assert_eq!(all, ["a", "b", "c", "d", "e"]);
        assert_eq!(
            (refused, first.as_deref()),
            (1, Some("x: not an Agent Card"))
        );
        let (public, refused, _) = held_of(&upstream(&[("tag", "public")], None), &reads);
        assert_eq!(
            (public, refused),
            (vec!["a".to_string(), "c".into(), "d".into()], 1)
        );
        let (two, refused, _) = held_of(&upstream(&[("tag", "public")], Some(2)), &reads);
        assert_eq!(
            two,
            ["a", "c"],
            "the two first the filters select, past two left out"
        );
        assert_eq!(refused, 2, "the refused card and one past maxEntries");
        let mut bad = upstream(&[("colour", "red")], None);
        assert!(include_of(&bad)
            .unwrap_err()
            .to_string()
            .starts_with("include: colour"));
        bad.include.clear();
        assert!(include_of(&bad).unwrap().is_none());
    }

    #[test]
    fn a_feed_keeps_counts_of_what_it_holds_now_and_remembers_a_bounded_number_of_refusals() {
        let max = 2;
        let mut held = Held::default();
        // Refused, then listed when it becomes a card, then gone.
        held.take(
            "urn:air:a.example:t:a",
            Read::Refused("a: bad".into()),
            None,
            max,
        );
        assert_eq!(held.selected().refused, 1);
        held.take("urn:air:a.example:t:a", read("a", "x"), None, max);
        assert_eq!(
            (held.selected().entries.len(), held.selected().refused),
            (1, 0)
        );
        held.remove("urn:air:a.example:t:a");
        assert_eq!(
            (held.selected().entries.len(), held.selected().refused),
            (0, 0)
        );
        // A refusal deleted upstream is no longer counted (nothing grows until a re-read).
        held.take(
            "urn:air:b.example:t:b",
            Read::Refused("b: bad".into()),
            None,
            max,
        );
        held.remove("urn:air:b.example:t:b");
        assert_eq!(held.selected().refused, 0);
        // Refusals past maxEntries of them are counted, not remembered; a huge identifier is
        // kept cut.
        let huge = format!("urn:air:x:{}", "a".repeat(100_000));
        assert!(!held.admits(&huge, max));
        for i in 0..5 {
            held.take(
                &format!("urn:air:r.example:t:r{i}"),
                Read::Refused(format!("r{i}: bad")),
                None,
                max,
            );
        }
        assert_eq!(held.refused.len(), max);
        assert_eq!(held.selected().refused, 6);
        assert!(held
            .refused
            .keys()
            .all(|k| k.len() <= super::super::client::MAX_TEXT + 4));
        assert!(held
            .refused
            .values()
            .all(|v| v.len() <= super::super::client::MAX_TEXT + 4));
    }
}
