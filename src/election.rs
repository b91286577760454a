//! Leader election for `run`: which replica runs the controllers.
//!
//! kube-lease-manager holds the Lease (`agentcard-operator-leader` in the operator's namespace),
//! renews it, and tells us through a watch channel when this process gains or loses it. A
//! replica waiting for the lease is woken by the manager only when the holder's lease expires:
//! after a holder gives the lease up (a rolling update, a deleted Pod) that is up to a whole
//! lease duration later. So a waiting replica also watches the Lease itself, and when it sees it
//! released starts a fresh manager, which takes the free lease at once.
//!
//! The manager's channel only changes after a call to the API server succeeds: a holder whose
//! renewals fail or hang (the API server lost) would go on believing it leads while another
//! replica takes the expired lease. So the holder also watches its Lease and counts as lost
//! when it has not seen its own renewal for a lease duration less a margin, before any other
//! replica may take it over; it then waits for a fresh manager that has read the Lease again.

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
    /// The manager may believe it leads without the Lease saying so (its renewals were not
    /// seen in time): it does not count until a fresh one has read the Lease.
    stale: bool,
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
            stale: false,
        })
    }

    /// Whether this process holds the lease now.
    pub fn leading(&mut self) -> bool {
        !self.stale && *self.leader.borrow_and_update()
    }

    /// Wait until this process holds the lease.
    pub async fn acquired(&mut self) -> Result<()> {
        let mut holders = std::pin::pin!(holders(&self.client, &self.namespace));
        let mut retry = Duration::from_secs(1);
        while !self.leading() {
            if self.stale {
                // The API server may be unreachable: keep trying, never fail the replica.
                if self.renew_manager().await {
                    retry = Duration::from_secs(1);
                } else {
                    tokio::time::sleep(retry).await;
                    retry = (retry * 2).min(Duration::from_secs(30));
                }
                continue;
            }
            tokio::select! {
                changed = self.leader.changed() => changed.context("lease watch ended")?,
                Some(holder) = holders.next() => {
                    // Free now: a fresh manager reads it as it is instead of sleeping until the
                    // previous holder's expiry. A failure only leaves the old one waiting.
                    if holder.is_empty() {
                        self.renew_manager().await;
                    }
                }
            }
        }
        Ok(())
    }

    /// Wait until this process no longer holds the lease: the manager says so, or its own
    /// renewal has not been seen for the lease duration less a margin (see the module doc).
    pub async fn lost(&mut self) -> Result<()> {
        let margin = Duration::from_secs((self.duration / 6).max(1));
        let window = Duration::from_secs(self.duration).saturating_sub(margin);
        let mut deadline = tokio::time::Instant::now() + window;
        let mut holders = std::pin::pin!(holders(&self.client, &self.namespace));
        while self.leading() {
            tokio::select! {
                changed = self.leader.changed() => changed.context("lease watch ended")?,
                Some(holder) = holders.next() => {
                    if holder == self.identity {
                        deadline = tokio::time::Instant::now() + window;
                    }
                }
                () = tokio::time::sleep_until(deadline) => {
                    tracing::warn!(window = ?window, "the lease was not seen renewed in time: no longer leading");
                    self.stale = true;
                }
            }
        }
        Ok(())
    }

    /// Replace the manager by a fresh one that reads the Lease as it is; false (the old one
    /// kept) when it cannot be built.
    async fn renew_manager(&mut self) -> bool {
        match manager(&self.client, &self.namespace, &self.identity, self.duration).await {
            Ok((leader, task)) => {
                let old = std::mem::replace(&mut self.task, task);
                self.leader = leader;
                self.stale = false;
                old.abort();
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not start a lease manager; retrying");
                false
            }
        }
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

/// The Lease's holder (empty when given up or never taken) each time it is seen changed: a
/// renewal is a change. Watch errors are retried with backoff inside the stream.
fn holders(client: &kube::Client, namespace: &str) -> impl Stream<Item = String> {
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={LEASE_NAME}"));
    watcher(api, config)
        .default_backoff()
        .applied_objects()
        .filter_map(
            |lease| async move { Some(lease.ok()?.spec?.holder_identity.unwrap_or_default()) },
        )
}
