//! Kubernetes Events, through kube's [`Recorder`], with its memory bounded.
//!
//! kube's `Recorder` keeps every Event it published for six minutes (to count repeats of the
//! same Event as a series instead of writing a new object), and scans that cache on every
//! publish. A bulk apply of 10,000 cards publishes 10,000 `Published` Events within minutes:
//! the cache then held all of them, about 2.4 KB each (a table of 1.4 KB entries plus their
//! strings: the largest single item of the operator's heap at 3,000 cards by heaptrack), and
//! each publish scanned all of them.
//!
//! Data flow: [`Events::publish`] takes the recorder of the current generation (a clone: an
//! `Arc` to its cache) under a lock held for no `.await`, then publishes through it. After
//! [`PER_GENERATION`] Events the next publish starts a new recorder; the old one goes with its
//! cache once its last publish returns. Repeats within one generation still become a series;
//! a repeat that falls into the next generation is written as a new Event, as a restarted
//! operator would write it.
//!
//! The controllers publish through a queue ([`Events::queued`]): a reconcile hands its Event
//! over and returns, and one background writer publishes them in order. In a bulk publish the
//! Events then take no reconcile slot and yield the API server to the writes that serve cards
//! (the status that makes a card served comes first). Past [`QUEUE`] waiting Events, new ones
//! are dropped and counted (`agentcard_events_dropped_total`), as client-go's broadcaster
//! drops past its queue: Events say what happened, the status says what is.

use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::Client;
use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc;

/// Events waiting for the background writer before new ones are dropped.
pub const QUEUE: usize = 4096;

/// Events published through one recorder before the next starts afresh: bounds its cache
/// (and the scan each publish makes of it) to this many entries.
pub const PER_GENERATION: usize = 128;

/// Publishes Events for the controllers (see the module doc).
pub struct Events {
    direct: Arc<Direct>,
    queue: Option<(mpsc::Sender<(Event, ObjectReference)>, Counter)>,
}

/// Publishes each Event when asked, through the current generation's recorder.
struct Direct {
    client: Client,
    reporter: Reporter,
    current: Mutex<Generation>,
}

struct Generation {
    recorder: Recorder,
    published: usize,
}

impl Events {
    /// Events reported as `reporter`, each published when [`Events::publish`] is awaited.
    pub fn new(client: Client, reporter: Reporter) -> Events {
        Events {
            direct: Arc::new(Direct::new(client, reporter)),
            queue: None,
        }
    }

    /// Events reported as `reporter`, handed to one background writer (see the module doc);
    /// `dropped` counts those refused by a full queue. Call within a Tokio runtime; the writer
    /// ends when these Events are dropped.
    pub fn queued(client: Client, reporter: Reporter, dropped: Counter) -> Events {
        let direct = Arc::new(Direct::new(client, reporter));
        let (tx, mut rx) = mpsc::channel::<(Event, ObjectReference)>(QUEUE);
        let writer = direct.clone();
        tokio::spawn(tracing::Instrument::instrument(
            async move {
                while let Some((event, regarding)) = rx.recv().await {
                    if let Err(e) = writer.publish(&event, &regarding).await {
                        tracing::warn!(reason = %event.reason, error = %e, "could not record an Event");
                    }
                }
            },
            tracing::info_span!("event_writer"),
        ));
        Events {
            direct,
            queue: Some((tx, dropped)),
        }
    }

    /// Publish `event` about `regarding`: at once, or (queued) handed to the writer, in which
    /// case a failure is the writer's to log and this returns at once.
    pub async fn publish(
        &self,
        event: &Event,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        match &self.queue {
            None => self.direct.publish(event, regarding).await,
            Some((tx, dropped)) => {
                if tx.try_send((copy(event), regarding.clone())).is_err() {
                    dropped.inc();
                }
                Ok(())
            }
        }
    }
}

/// Most bytes of an Event's note (longer ones are cut on a character boundary).
pub const MAX_NOTE: usize = 1000;

/// The Event the controllers write: `reason` (a bounded name, an error's
/// [`crate::controller::Error::reason`]), `note` cut to [`MAX_NOTE`], for `action`.
pub fn event(type_: EventType, reason: &str, action: &str, note: &str) -> Event {
    Event {
        type_,
        reason: reason.to_string(),
        note: Some(cut(note, MAX_NOTE)),
        action: action.to_string(),
        secondary: None,
    }
}

/// `s` cut to at most `max` bytes (on a character boundary), marked `…` when cut.
pub fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

impl Events {
    /// Record `event` about `regarding`: an Event says what happened, the status what is, so
    /// one that cannot be written is logged and the caller goes on.
    pub async fn record(&self, event: &Event, regarding: &ObjectReference) {
        if let Err(e) = self.publish(event, regarding).await {
            tracing::warn!(reason = %event.reason, error = %e, "could not record an Event");
        }
    }
}

/// A copy of `event` to queue (kube's `Event` is not `Clone`).
fn copy(event: &Event) -> Event {
    Event {
        type_: event.type_,
        reason: event.reason.clone(),
        note: event.note.clone(),
        action: event.action.clone(),
        secondary: event.secondary.clone(),
    }
}

impl Direct {
    fn new(client: Client, reporter: Reporter) -> Direct {
        let recorder = Recorder::new(client.clone(), reporter.clone());
        Direct {
            client,
            reporter,
            current: Mutex::new(Generation {
                recorder,
                published: 0,
            }),
        }
    }

    /// The recorder the next publish goes through: the current generation's, or a new one
    /// once the current has published [`PER_GENERATION`] Events. The `bool` says whether a
    /// new generation started.
    fn recorder(&self) -> (Recorder, bool) {
        let mut current = crate::locks::lock(&self.current);
        let renewed = current.published >= PER_GENERATION;
        if renewed {
            *current = Generation {
                recorder: Recorder::new(self.client.clone(), self.reporter.clone()),
                published: 0,
            };
        }
        current.published += 1;
        (current.recorder.clone(), renewed)
    }

    async fn publish(&self, event: &Event, regarding: &ObjectReference) -> Result<(), kube::Error> {
        let (recorder, _) = self.recorder();
        recorder.publish(event, regarding).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_new_recorder_starts_after_each_generation_of_events() {
        // A client that is never called: only the generations are looked at.
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = Client::try_from(config).unwrap();
        let events = Events::new(
            client,
            Reporter {
                controller: "test".into(),
                instance: None,
            },
        );
        let renewed: Vec<bool> = (0..PER_GENERATION * 2 + 1)
            .map(|_| events.direct.recorder().1)
            .collect();
        assert!(renewed[..PER_GENERATION].iter().all(|r| !r));
        assert!(renewed[PER_GENERATION]);
        assert!(renewed[PER_GENERATION + 1..2 * PER_GENERATION]
            .iter()
            .all(|r| !r));
        assert!(renewed[2 * PER_GENERATION]);
    }

    #[tokio::test]
    async fn queued_events_return_at_once_and_past_the_queue_are_dropped_and_counted() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = Client::try_from(config).unwrap();
        let dropped = Counter::default();
        let events = Events::queued(
            client,
            Reporter {
                controller: "test".into(),
                instance: None,
            },
            dropped.clone(),
        );
        let event = Event {
            type_: kube::runtime::events::EventType::Normal,
            reason: "Published".into(),
            note: None,
            action: "Publish".into(),
            secondary: None,
        };
        // A current-thread runtime: the writer takes nothing until this test yields.
        for _ in 0..QUEUE + 10 {
            events
                .publish(&event, &ObjectReference::default())
                .await
                .unwrap();
        }
        assert_eq!(dropped.get(), 10);
    }
}
