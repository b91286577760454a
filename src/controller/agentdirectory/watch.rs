//! What the directory controller makes of the shared AgentDirectory watch
//! ([`crate::hub`]): each change wakes that directory's reconcile (a relist's at its end,
//! once the store holds them) and asks the counting task to count again; a deleted directory
//! is forgotten (its routes, its host claim), with backoff when that fails.

use std::sync::Arc;
use std::time::Duration;

use futures::channel::mpsc::{unbounded, UnboundedReceiver, UnboundedSender};
use futures::StreamExt;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use tokio::sync::watch;

use super::count::Recount;
use crate::controller::backoff::again_after;
use crate::controller::context::Context;
use crate::controller::triggers::ToDirectories;
use crate::crd::AgentDirectory;
use crate::hub::Hubs;
use crate::process::AbortOnDrop;

/// What the directory watch's fan-out gives the wiring.
pub struct DirectoryWatch {
    /// The fan-out's task.
    pub task: AbortOnDrop,
    /// True once the first list is in.
    pub listed: watch::Receiver<bool>,
    /// Directories deleted.
    pub gone: UnboundedReceiver<Arc<AgentDirectory>>,
}

/// Fan the shared AgentDirectory watch out: to the directory's reconcile (`directory_changed`)
/// and to the counting task (`recount`).
pub fn start(hubs: &Hubs, to: &ToDirectories, recount: UnboundedSender<Recount>) -> DirectoryWatch {
    let (listed_tx, listed) = watch::channel(false);
    let refs = to.directory_changed.clone();
    let (gone_tx, gone) = unbounded::<Arc<AgentDirectory>>();
    let mut feed = hubs.directories.subscribe();
    let task = AbortOnDrop::spawn(tracing::info_span!("directory_watch"), async move {
        let mut relisted = Vec::new();
        while let Some(event) = feed.next().await {
            match event {
                watcher::Event::InitDone => {
                    let _ = listed_tx.send(true);
                    let _ = recount.unbounded_send(Recount::All);
                    for key in relisted.drain(..) {
                        let _ = refs.unbounded_send(key);
                    }
                }
                watcher::Event::InitApply(d) => relisted.push(ObjectRef::from_obj(d.as_ref())),
                watcher::Event::Apply(d) => {
                    let _ = recount.unbounded_send(Recount::Directory(d.clone()));
                    let _ = refs.unbounded_send(ObjectRef::from_obj(d.as_ref()));
                }
                watcher::Event::Init => relisted.clear(),
                watcher::Event::Delete(d) => {
                    let _ = recount.unbounded_send(Recount::DirectoryGone(d.clone()));
                    let _ = gone_tx.unbounded_send(d);
                }
            }
        }
    });
    DirectoryWatch { task, listed, gone }
}

/// Directories that are gone: each delete event forgets its directory (its routes now, its
/// host claim), again with backoff when that fails.
pub fn forget_deleted(
    ctx: &Arc<Context>,
    gone: UnboundedReceiver<Arc<AgentDirectory>>,
) -> AbortOnDrop {
    let ctx = ctx.clone();
    let (retry, retries) = unbounded::<Arc<AgentDirectory>>();
    AbortOnDrop::spawn(
        tracing::info_span!("forget_deleted_directories"),
        async move {
            let mut gone = futures::stream::select(gone, retries);
            while let Some(dir) = gone.next().await {
                if let Err(e) = super::forget(&dir, &ctx).await {
                    let delay = ctx.backoff.next(&super::backoff_key(&dir));
                    tracing::warn!(directory = %dir.name_any(), category = e.category(), error = %e, retry_in = ?delay, "could not clean up after a deleted directory");
                    again_after(&retry, dir, delay);
                }
            }
        },
    )
}

/// How long loading the claims waits for the directories: unbounded when the AgentDirectory
/// CRD is installed, none when it is not, bounded when that could not be told.
pub async fn directories_wait(client: &Client) -> Option<Duration> {
    match Api::<AgentDirectory>::all(client.clone())
        .list_metadata(&kube::api::ListParams::default().limit(1))
        .await
    {
        Ok(_) => None,
        Err(kube::Error::Api(s)) if s.code == 404 => Some(Duration::ZERO),
        Err(e) => {
            tracing::warn!(error = %e, "could not tell whether AgentDirectories are installed");
            Some(Duration::from_secs(10))
        }
    }
}
