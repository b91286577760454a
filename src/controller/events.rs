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

use std::sync::Mutex;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, Recorder, Reporter};
use kube::Client;

/// Events published through one recorder before the next starts afresh: bounds its cache
/// (and the scan each publish makes of it) to this many entries.
pub const PER_GENERATION: usize = 128;

/// Publishes Events for the controllers (see the module doc).
pub struct Events {
    client: Client,
    reporter: Reporter,
    current: Mutex<Generation>,
}

struct Generation {
    recorder: Recorder,
    published: usize,
}

impl Events {
    /// Events reported as `reporter`.
    pub fn new(client: Client, reporter: Reporter) -> Events {
        let recorder = Recorder::new(client.clone(), reporter.clone());
        Events {
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
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
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

    /// Publish `event` about `regarding`.
    pub async fn publish(
        &self,
        event: &Event,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
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
            .map(|_| events.recorder().1)
            .collect();
        assert!(renewed[..PER_GENERATION].iter().all(|r| !r));
        assert!(renewed[PER_GENERATION]);
        assert!(renewed[PER_GENERATION + 1..2 * PER_GENERATION]
            .iter()
            .all(|r| !r));
        assert!(renewed[2 * PER_GENERATION]);
    }
}
