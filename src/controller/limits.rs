//! What one namespace can make the operator hold and serve: how many cards publish per
//! namespace (the oldest that fit), and how large a signed card may be.

use std::sync::Mutex;

use kube::runtime::reflector::Store;
use kube::ResourceExt;

use super::error::Error;
use super::watches::CardIndex;
use crate::crd::AgentCard;

/// The operator's limits (`--max-cards-per-namespace`, `--max-card-bytes`).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Most cards published per namespace (0: any number).
    pub max_cards_per_namespace: usize,
    /// Largest signed card published, in bytes.
    pub max_card_bytes: usize,
}

impl Limits {
    /// Refuse `card` when its namespace has more cards than are published per namespace and
    /// it is not among the oldest that fit (creation time, then name), by the controller's
    /// `index` of cards and the card `store`. O(1) while the namespace is under the limit.
    pub fn check_namespace(
        &self,
        card: &AgentCard,
        index: &Mutex<CardIndex>,
        store: &Store<AgentCard>,
    ) -> Result<(), Error> {
        let limit = self.max_cards_per_namespace;
        let ns = card.namespace().unwrap_or_default();
        let peers = {
            let index = index.lock().unwrap_or_else(|e| e.into_inner());
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
    fn the_oldest_cards_of_a_namespace_fit_the_rest_are_told_their_place() {
        let (store, mut writer) = reflector::store::<AgentCard>();
        let mut index = CardIndex::default();
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
