//! Leader election for `run`: which replica runs the controllers.
//!
//! kube-lease-manager holds the Lease (`agentcard-operator-leader` in the operator's namespace),
//! renews it, and tells us through a watch channel when this process gains or loses it. A
//! replica waiting for the lease is woken by the manager only when the holder's lease expires:
//! after a holder gives the lease up (a rolling update, a deleted Pod) that is up to a whole
//! lease duration later. So a waiting replica also watches the Lease itself, and when it sees it
//! released starts a fresh manager, which takes the free lease at once.

use std::time::Duration;

use anyhow::{Context as _, Result};
use futures::{Stream, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube::runtime::{watcher, WatchStreamExt};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The Lease the replicas of one installation share.
pub const LEASE_NAME: &str = "agentcard-operator-leader";

/// Who leads: the manager's channel and task, and what starts another one.
pub struct Election {
    client: kube::Client,
    namespace: String,
    identity: String,
    duration: u64,
    leader: watch::Receiver<bool>,
    task: JoinHandle<kube_lease_manager::Result<LeaseManager>>,
}

impl Election {
    /// Start competing for the lease, held for `duration` seconds and renewed a third of it
    /// before it ends.
    pub async fn start(
        client: kube::Client,
        namespace: String,
        identity: String,
        duration: u64,
    ) -> Result<Election> {
        let (leader, task) = manager(&client, &namespace, &identity, duration).await?;
        Ok(Election {
            client,
            namespace,
            identity,
            duration,
            leader,
            task,
        })
    }

    /// Whether this process holds the lease now.
    pub fn leading(&mut self) -> bool {
        *self.leader.borrow_and_update()
    }

    /// Wait until this process holds the lease.
    pub async fn acquired(&mut self) -> Result<()> {
        let mut released = std::pin::pin!(released(&self.client, &self.namespace));
        while !self.leading() {
            tokio::select! {
                changed = self.leader.changed() => changed.context("lease watch ended")?,
                Some(()) = released.next() => {
                    // Free now: a fresh manager reads it as it is instead of sleeping until the
                    // previous holder's expiry.
                    let (leader, task) =
                        manager(&self.client, &self.namespace, &self.identity, self.duration)
                            .await?;
                    let old = std::mem::replace(&mut self.task, task);
                    self.leader = leader;
                    old.abort();
                }
            }
        }
        Ok(())
    }

    /// Wait until this process no longer holds the lease.
    pub async fn lost(&mut self) -> Result<()> {
        while self.leading() {
            self.leader.changed().await.context("lease watch ended")?;
        }
        Ok(())
    }

    /// Give the lease up, if held: closing the channel makes the manager release it (bounded
    /// wait).
    pub async fn release(self) {
        drop(self.leader);
        match tokio::time::timeout(Duration::from_secs(5), self.task).await {
            Ok(Ok(Ok(_))) => tracing::info!("lease released"),
            _ => tracing::warn!("could not confirm the lease release"),
        }
    }
}

async fn manager(
    client: &kube::Client,
    namespace: &str,
    identity: &str,
    duration: u64,
) -> Result<(
    watch::Receiver<bool>,
    JoinHandle<kube_lease_manager::Result<LeaseManager>>,
)> {
    let manager = LeaseManagerBuilder::new(client.clone(), LEASE_NAME)
        .with_namespace(namespace)
        .with_identity(identity)
        .with_duration(duration)
        .with_grace((duration / 3).max(1))
        .build()
        .await
        .context("lease manager")?;
    Ok(manager.watch().await)
}

/// An item each time the Lease is seen with no holder (given up, or never taken). Watch errors
/// are retried with backoff inside the stream: this only ever speeds a takeover up, the
/// manager's own timing still applies without it.
fn released(client: &kube::Client, namespace: &str) -> impl Stream<Item = ()> {
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={LEASE_NAME}"));
    watcher(api, config)
        .default_backoff()
        .applied_objects()
        .filter_map(|lease| async move {
            let lease = lease.ok()?;
            let holder = lease
                .spec
                .and_then(|s| s.holder_identity)
                .unwrap_or_default();
            holder.is_empty().then_some(())
        })
}
