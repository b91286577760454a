//! One directory as every replica serves it: where (host, prefix, as the lease holder decided),
//! to whom (access mode), and its catalog snapshot. Rebuilt whole when anything it lists
//! changes; requests read a snapshot behind an `Arc` and never wait for a rebuild. Each
//! snapshot has a [`Site::generation`] of its own, which keys what is cached from it
//! ([`crate::directory::cache`]): a rebuilt site starts with nothing cached.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::crd::AccessMode;
use crate::directory::ard::RegistryInfo;
use crate::directory::query::Catalog;

/// A served directory.
#[derive(Debug)]
pub struct Site {
    /// Name of the AgentDirectory.
    pub name: String,
    /// Its uid (the owner of its change-feed log).
    pub uid: String,
    /// Host it holds.
    pub host: String,
    /// Path prefix of the registry API (`""` or `/a/b`).
    pub prefix: String,
    /// Name shown to clients.
    pub display_name: String,
    /// Description shown to clients.
    pub description: Option<String>,
    /// Who may read it.
    pub mode: AccessMode,
    /// The listed cards.
    pub catalog: Catalog,
    /// Namespaces with listed cards (the ones access checks ask about).
    pub namespaces: BTreeSet<String>,
    /// Cards it selects that wait for an approval (or were rejected), with their verdicts:
    /// shown to approvers only (`/v1/agents?approval=`, the web page).
    pub waiting: Vec<Waiting>,
    /// This snapshot's number, unique in the process (never reused, unlike an address): what is
    /// rendered from one snapshot is cached under it and never answers for another.
    pub generation: u64,
}

/// A selected card a directory requiring approval does not list, and why.
#[derive(Debug, Clone)]
pub struct Waiting {
    /// Its entry (as it would be listed).
    pub entry: Arc<crate::directory::entry::Entry>,
    /// The verdict its status holds for the directory.
    pub approval: crate::crd::ApprovalStatus,
}

/// The next [`Site::generation`].
static GENERATIONS: AtomicU64 = AtomicU64::new(1);

impl Site {
    /// Index the listed cards of a directory.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        name: String,
        uid: String,
        host: String,
        prefix: String,
        display_name: Option<String>,
        description: Option<String>,
        mode: AccessMode,
        entries: Vec<Arc<crate::directory::entry::Entry>>,
    ) -> Site {
        let namespaces = entries
            .iter()
            .map(|e| e.placement.namespace.clone())
            .collect();
        Site {
            display_name: display_name.unwrap_or_else(|| name.clone()),
            name,
            uid,
            host,
            prefix,
            description,
            mode,
            catalog: Catalog::build(entries),
            namespaces,
            waiting: Vec::new(),
            generation: GENERATIONS.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// The same site with the cards that wait for an approval (sorted by namespace and name).
    pub fn with_waiting(mut self, mut waiting: Vec<Waiting>) -> Site {
        waiting.sort_by(|a, b| {
            let key = |w: &Waiting| {
                (
                    w.entry.placement.namespace.clone(),
                    w.entry.placement.name.clone(),
                )
            };
            key(a).cmp(&key(b))
        });
        self.waiting = waiting;
        self
    }

    /// The registry's own entry in the manifest.
    pub fn info(&self) -> RegistryInfo<'_> {
        RegistryInfo {
            identifier: format!("urn:air:{}:agentcard-operator:{}", self.host, self.name),
            display_name: &self.display_name,
            description: self.description.as_deref(),
            base_url: format!("https://{}{}", self.host, self.prefix),
        }
    }
}
