//! What the card controller makes of the AgentCardApproval watch and of the directories'
//! admission: each approval applied or deleted wakes the card it names; a (re-)list wakes every
//! card while a directory requires approval (their verdicts were kept as their status said
//! until then); a directory
//! that begins or stops requiring approval, or changes which cards or edits that covers,
//! wakes every card, each judged again ([`crate::controller::agentcard::approval`]).

use std::collections::HashMap;

use futures::channel::mpsc::UnboundedSender;
use futures::{Stream, StreamExt};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::Event;
use kube::ResourceExt;

use crate::crd::agentdirectory::{Admission, ReapproveOn};
use crate::crd::{AgentCard, AgentCardApproval, AgentDirectory};
use crate::hub::Shared;

/// The card an approval names.
fn named(a: &AgentCardApproval) -> ObjectRef<AgentCard> {
    ObjectRef::new(&a.spec.card.name).within(&a.spec.card.namespace)
}

/// Send the card each approval event names to `to` until `feed` ends. When the approvals
/// are (re-)listed and some directory requires approval, every card is judged again: a card
/// reconciled before the list was in kept the verdicts its status held (or none, if it was
/// new), and an approval deleted meanwhile sent no event.
pub async fn fan_out(
    feed: impl Stream<Item = Shared<AgentCardApproval>>,
    directories: Store<AgentDirectory>,
    cards: Store<AgentCard>,
    to: UnboundedSender<ObjectRef<AgentCard>>,
) {
    futures::pin_mut!(feed);
    while let Some(event) = feed.next().await {
        match event {
            Event::Apply(a) | Event::Delete(a) => {
                let _ = to.unbounded_send(named(&a));
            }
            Event::InitDone => {
                let gated = directories
                    .state()
                    .iter()
                    .any(|d| d.spec.admission == Admission::ApprovalRequired);
                if gated {
                    wake_all(&cards, &to);
                }
            }
            Event::Init | Event::InitApply(_) => {}
        }
    }
}

/// What of a directory decides which cards need verdicts, and how they are judged.
#[derive(PartialEq)]
struct Admits {
    admission: Admission,
    reapprove_on: ReapproveOn,
    selectors: String,
}

impl Admits {
    fn of(d: &AgentDirectory) -> Admits {
        Admits {
            admission: d.spec.admission,
            reapprove_on: d.spec.reapprove_on,
            selectors: serde_json::to_string(&(&d.spec.namespace_selector, &d.spec.card_selector))
                .unwrap_or_default(),
        }
    }
}

/// Wake every card in `cards` when a directory's admission (or what it covers) changes while
/// approval is required before or after, until `feed` ends. A directory's own status writes
/// change none of it and wake nothing.
pub async fn on_admission(
    feed: impl Stream<Item = Shared<AgentDirectory>>,
    cards: Store<AgentCard>,
    to: UnboundedSender<ObjectRef<AgentCard>>,
) {
    futures::pin_mut!(feed);
    let mut seen: HashMap<String, Admits> = HashMap::new();
    while let Some(event) = feed.next().await {
        let changed = match event {
            // A (re-)list: every card is reconciled after one anyway.
            Event::InitApply(d) => {
                seen.insert(d.name_any(), Admits::of(&d));
                false
            }
            Event::Apply(d) => {
                let now = Admits::of(&d);
                let required = now.admission == Admission::ApprovalRequired;
                let before = seen.insert(d.name_any(), now);
                let was = before
                    .as_ref()
                    .is_some_and(|b| b.admission == Admission::ApprovalRequired);
                (required || was) && before.as_ref() != seen.get(&d.name_any())
            }
            Event::Delete(d) => seen
                .remove(&d.name_any())
                .is_some_and(|b| b.admission == Admission::ApprovalRequired),
            Event::Init | Event::InitDone => false,
        };
        if changed {
            wake_all(&cards, &to);
        }
    }
}

fn wake_all(cards: &Store<AgentCard>, to: &UnboundedSender<ObjectRef<AgentCard>>) {
    for c in cards.state() {
        let _ = to.unbounded_send(ObjectRef::from_obj(c.as_ref()));
    }
}
