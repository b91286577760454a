//! What one namespace can make the operator hold and serve: how many cards publish per
//! namespace (the oldest that fit), and how large a signed card may be.

use std::sync::Mutex;

use kube::runtime::reflector::{ObjectRef, Store};
use kube::ResourceExt;

use super::error::Error;
use super::watches::CardsByHost;
use crate::crd::AgentCard;

/// The operator's limits (`--max-cards-per-namespace`, `--max-card-bytes`).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Most cards published per namespace (0: any number).
    pub max_cards_per_namespace: usize,
    /// Largest signed card published, in bytes.
    pub max_card_bytes: usize,
    /// Most bytes of card specs published per namespace (0: any number).
    pub max_namespace_card_bytes: usize,
}

impl Limits {
    /// Refuse `card` when its namespace has more cards than are published per namespace and
    /// it is not among the oldest that fit (creation time, then name), by the controller's
    /// `index` of cards and the card `store`. O(1) while the namespace is under the limit.
    pub fn check_namespace(
        &self,
        card: &AgentCard,
        index: &Mutex<CardsByHost>,
        store: &Store<AgentCard>,
    ) -> Result<(), Error> {
        let limit = self.max_cards_per_namespace;
        let ns = card.namespace().unwrap_or_default();
        let peers = {
            let index = crate::locks::lock(index);
            if limit == 0 || index.count_in(&ns) <= limit {
                return Ok(());
            }
            index.in_namespace(&ns)
        };
        let key = |c: &AgentCard| {
            (
                c.metadata.creation_timestamp.clone().map(|t| t.0),
                c.name_any(),
            )
        };
        let mine = key(card);
        let older = peers
            .iter()
            .filter_map(|r| store.get(r))
            .filter(|c| key(c) < mine)
            .count();
        if older < limit {
            return Ok(());
        }
        Err(Error::NamespaceCardLimit {
            namespace: ns,
            count: peers.len(),
            limit,
            position: older + 1,
        })
    }

    /// Refuse `card` when its namespace's card specs take more bytes than are published per
    /// namespace and it does not fit after the older ones (creation time, then name; a card
    /// that does not fit leaves room for younger, smaller ones). O(1) while the namespace is
    /// under the budget. Only the namespace's own cards count: another namespace's size never
    /// refuses this one.
    pub fn check_namespace_bytes(
        &self,
        card: &AgentCard,
        index: &Mutex<CardsByHost>,
        store: &Store<AgentCard>,
    ) -> Result<(), Error> {
        let limit = self.max_namespace_card_bytes;
        let ns = card.namespace().unwrap_or_default();
        let (total, sized) = {
            let index = crate::locks::lock(index);
            let total = index.bytes_in(&ns);
            if limit == 0 || total <= limit {
                return Ok(());
            }
            let sized: Vec<(ObjectRef<AgentCard>, usize)> = index
                .in_namespace(&ns)
                .into_iter()
                .map(|r| {
                    let size = index.size_of(&r);
                    (r, size)
                })
                .collect();
            (total, sized)
        };
        let key = |c: &AgentCard| {
            (
                c.metadata.creation_timestamp.clone().map(|t| t.0),
                c.name_any(),
            )
        };
        let mut peers: Vec<(_, usize, bool)> = sized
            .iter()
            .filter_map(|(r, size)| {
                let c = store.get(r)?;
                Some((key(&c), *size, c.name_any() == card.name_any()))
            })
            .collect();
        peers.sort_by(|a, b| a.0.cmp(&b.0));
        let mut used = 0usize;
        for (_, size, mine) in peers {
            let fits = used.saturating_add(size) <= limit;
            if fits {
                used += size;
            }
            if mine {
                return if fits {
                    Ok(())
                } else {
                    Err(Error::NamespaceByteBudget {
                        namespace: ns,
                        bytes: total,
                        size,
                        limit,
                    })
                };
            }
        }
        Ok(())
    }

    /// Refuse a signed card of `bytes` bytes larger than the limit.
    pub fn check_size(&self, bytes: usize) -> Result<(), Error> {
        if bytes > self.max_card_bytes {
            return Err(Error::CardTooLarge {
                bytes,
                limit: self.max_card_bytes,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;
    use serde_json::json;

    fn card(name: &str, created: &str) -> AgentCard {
        serde_json::from_value(json!({
            "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentCard",
            "metadata": {"name": name, "namespace": "team", "uid": name,
                         "creationTimestamp": created},
            "spec": {"publish": {"host": format!("{name}.example.com")}, "card": {"name": "n"}}
        }))
        .unwrap()
    }

    #[test]
    fn the_oldest_cards_that_fit_a_namespaces_byte_budget_publish_and_others_are_unaffected() {
        let (store, mut writer) = reflector::store::<AgentCard>();
        let mut index = CardsByHost::default();
        let sized = |name: &str, ns: &str, created: &str, pad: usize| {
            let mut c = card(name, created);
            c.metadata.namespace = Some(ns.into());
            c.spec.card.get_or_insert_default().description = "x".repeat(pad);
            c
        };
        let cards = [
            sized("a", "team", "2026-01-01T00:00:00Z", 1000),
            sized("big", "team", "2026-01-02T00:00:00Z", 5000),
            sized("c", "team", "2026-01-03T00:00:00Z", 1000),
            sized("other", "elsewhere", "2026-01-04T00:00:00Z", 10_000),
        ];
        for c in &cards {
            writer.apply_watcher_event(&Event::Apply(c.clone()));
            index.apply(c);
        }
        let each = crate::controller::watches::spec_bytes(&cards[0]);
        let index = Mutex::new(index);
        let limits = Limits {
            max_cards_per_namespace: 0,
            max_card_bytes: 1 << 20,
            max_namespace_card_bytes: 2 * each + 100,
        };
        let check = |c: &AgentCard| limits.check_namespace_bytes(c, &index, &store);
        assert!(check(&cards[0]).is_ok());
        // Too big to fit after the first: refused, leaving room for the younger, small one.
        match check(&cards[1]) {
            Err(Error::NamespaceByteBudget {
                namespace, size, ..
            }) => {
                assert_eq!(namespace, "team");
                assert!(size > 5000);
            }
            other => panic!("{other:?}"),
        }
        assert!(check(&cards[2]).is_ok());
        // Another namespace's size is its own: its one card is over the budget alone.
        assert!(check(&cards[3]).is_err());
        // Edits resize: the big card shrunk fits once the namespace is under budget.
        let mut small = cards[1].clone();
        small.spec.card.get_or_insert_default().description = "x".into();
        index.lock().unwrap().apply(&small);
        writer.apply_watcher_event(&Event::Apply(small.clone()));
        assert!(check(&small).is_ok());
        assert!(index.lock().unwrap().bytes_in("team") < 3 * each);
        index
            .lock()
            .unwrap()
            .remove(&ObjectRef::from_obj(&cards[0]));
        assert!(index.lock().unwrap().bytes_in("team") < 2 * each);
    }

    #[test]
    fn the_oldest_cards_of_a_namespace_fit_the_rest_are_told_their_place() {
        let (store, mut writer) = reflector::store::<AgentCard>();
        let mut index = CardsByHost::default();
        let cards = [
            card("c", "2026-01-03T00:00:00Z"),
            card("a", "2026-01-01T00:00:00Z"),
            card("b", "2026-01-02T00:00:00Z"),
        ];
        for c in &cards {
            writer.apply_watcher_event(&Event::Apply(c.clone()));
            index.apply(c);
        }
        let index = Mutex::new(index);
        let limits = Limits {
            max_cards_per_namespace: 2,
            max_card_bytes: 100,
            max_namespace_card_bytes: 0,
        };
        assert!(limits.check_namespace(&cards[1], &index, &store).is_ok());
        assert!(limits.check_namespace(&cards[2], &index, &store).is_ok());
        match limits.check_namespace(&cards[0], &index, &store) {
            Err(Error::NamespaceCardLimit {
                count, position, ..
            }) => assert_eq!((count, position), (3, 3)),
            other => panic!("{other:?}"),
        }
        let any = Limits {
            max_cards_per_namespace: 0,
            ..limits
        };
        assert!(any.check_namespace(&cards[0], &index, &store).is_ok());
        assert!(limits.check_size(100).is_ok());
        assert!(matches!(
            limits.check_size(101),
            Err(Error::CardTooLarge {
                bytes: 101,
                limit: 100
            })
        ));
    }
}
