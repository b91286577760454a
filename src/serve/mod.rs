//! The card server: one HTTP server, fed by a watch on the published ConfigMaps (`run`,
//! `serve --from-cluster`) or by a directory of files (`serve --from-dir`).
//!
//! Data flow: a feed ([`source_cluster`] or [`source_dir`]) keeps the shared
//! [`crate::index::Index`] up to date; [`server::serve_public`] accepts connections (bounded,
//! with header limits and timeouts) and answers each request with [`http::respond`], a pure
//! lookup in the index; [`admin`] answers `/metrics`, `/healthz` and `/readyz` on its own port.

pub mod admin;
pub mod cmd;
pub mod conn;
pub mod extended;
pub mod http;
pub mod metrics;
pub mod server;
pub mod source_cluster;
pub mod source_dir;
pub mod target;

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

use crate::directory::sites::hosted::Hosted;
use crate::index::Index;

/// What the public port serves: the cards (below both servers) and the directories' sites
/// and change-feed logs. Both are filled by the same feed (the cluster watch or a directory
/// of files); a request for a directory's host reads the second, any other the first.
#[derive(Clone, Default)]
pub struct Content {
    /// The published cards and the JWKS.
    pub cards: Arc<Index>,
    /// The directories' sites and change-feed logs.
    pub directories: Arc<Hosted>,
}

impl Content {
    /// `cards` with no directory.
    pub fn cards(cards: Arc<Index>) -> Self {
        Content {
            cards,
            directories: Arc::default(),
        }
    }
}

/// The public and admin listeners of one process, bound and ready to run.
pub struct Servers {
    public: Vec<std::net::TcpListener>,
    admin_listener: TcpListener,
    content: Content,
    metrics: Arc<metrics::HttpMetrics>,
    admin: Arc<admin::Admin>,
    limits: server::Limits,
    callers: server::Callers,
    shutdown: Arc<server::Shutdown>,
    cache: Arc<crate::directory::cache::ResponseCache>,
}

impl Servers {
    /// Bind both ports. `/readyz` requires the index's first sync plus `ready`; the HTTP metrics
    /// are registered in `registry` beside whatever the caller registered.
    pub async fn bind(
        listen: SocketAddr,
        admin_listen: SocketAddr,
        content: Content,
        mut registry: Registry,
        mut ready: Vec<admin::ReadyCheck>,
        mut on_scrape: Vec<Arc<dyn Fn() + Send + Sync>>,
        limits: server::Limits,
    ) -> anyhow::Result<Servers> {
        let metrics = Arc::new(metrics::HttpMetrics::default());
        metrics.register(&mut registry);
        let shutdown = Arc::new(server::Shutdown::default());
        let ready_shutdown = shutdown.clone();
        ready.push(Arc::new(move || {
            if ready_shutdown.is_draining() {
                Err(admin::NotReady::Draining)
            } else {
                Ok(())
            }
        }));
        let ready_index = content.cards.clone();
        ready.insert(
            0,
            Arc::new(move || {
                if ready_index.is_ready() {
                    Ok(())
                } else {
                    Err(admin::NotReady::NotSynced)
                }
            }),
        );
        let (gauge_index, cards) = (content.cards.clone(), metrics.cards.clone());
        on_scrape.push(Arc::new(move || {
            cards.set(i64::try_from(gauge_index.len()).unwrap_or(i64::MAX));
        }));
        let cache = Arc::new(crate::directory::cache::ResponseCache::new(
            limits.directory_cache_bytes,
            metrics.directory_cache_hits.clone(),
            metrics.directory_cache_misses.clone(),
        ));
        let (gauge_cache, held) = (cache.clone(), metrics.directory_cache_bytes.clone());
        on_scrape.push(Arc::new(move || {
            held.set(i64::try_from(gauge_cache.bytes()).unwrap_or(i64::MAX));
        }));
        let workers = match limits.workers {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        let public = server::bind_reuseport(listen, workers)
            .with_context(|| format!("listening on {listen}"))?;
        let admin_listener = TcpListener::bind(admin_listen)
            .await
            .with_context(|| format!("listening on {admin_listen}"))?;
        Ok(Servers {
            public,
            admin_listener,
            content,
            metrics,
            admin: Arc::new(admin::Admin {
                registry,
                ready,
                on_scrape,
            }),
            limits,
            callers: server::Callers::default(),
            shutdown,
            cache,
        })
    }

    /// The public port's shutdown: once draining (on SIGTERM, by [`crate::process`]),
    /// `/readyz` answers 503 and every response asks the client to close its connection, while
    /// requests keep being answered; once closed, what was accepted is finished and
    /// [`Servers::run`] returns.
    pub fn shutdown(&self) -> Arc<server::Shutdown> {
        self.shutdown.clone()
    }

    /// Check callers of Kubernetes-mode directories with `authorizer`.
    pub fn with_authorizer(
        mut self,
        authorizer: Arc<crate::directory::access::Authorizer>,
    ) -> Self {
        self.callers.authorizer = Some(authorizer);
        self
    }

    /// Check the callers of cards' extended cards with `bearer`.
    pub fn with_bearer(mut self, bearer: Arc<crate::bearer::Bearer>) -> Self {
        self.callers.bearer = Some(bearer);
        self
    }

    /// The bound public and admin addresses (the real ports when asked for port 0), logged
    /// once so that supervisors and tests can find them.
    pub fn log_addresses(&self) {
        let public = self.public.first().and_then(|l| l.local_addr().ok());
        let admin = self.admin_listener.local_addr().ok();
        if let (Some(public), Some(admin)) = (public, admin) {
            tracing::info!("listening public={public} admin={admin}");
        }
    }

    /// Serve both ports until one fails.
    pub async fn run(self) -> anyhow::Result<()> {
        tokio::select! {
            r = server::serve_public_per_core(self.public, self.content, self.metrics, self.limits, self.callers, self.shutdown, self.cache) => r.context("public server"),
            r = admin::serve_admin(self.admin_listener, self.admin) => r.context("admin server"),
        }
    }
}
