//! `agentcard-operator serve`: the card server alone, fed by a directory of files or by the
//! cluster's published ConfigMaps, for benchmarks and for use without the controllers.

use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::contract::DEFAULT_MAX_AGE;

/// Flags of `serve`: exactly one source, the listen addresses, and limits.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["from_dir", "from_cluster"])))]
pub struct ServeArgs {
    /// Serve `DIR/<host>.json` for `<host>` and `DIR/jwks.json` on every host.
    #[arg(long, value_name = "DIR")]
    from_dir: Option<PathBuf>,
    /// Serve the cards the controller publishes (ConfigMaps; KUBECONFIG or in-cluster).
    #[arg(long)]
    from_cluster: bool,
    /// The operator's namespace (the JWKS is read from there only).
    #[arg(long, env = "POD_NAMESPACE", default_value = "agentcard-system")]
    namespace: String,
    /// Public address.
    #[arg(long, default_value = "0.0.0.0:8080")]
    listen: std::net::SocketAddr,
    /// Admin address (/metrics, /healthz, /readyz).
    #[arg(long, default_value = "0.0.0.0:8081")]
    admin_listen: std::net::SocketAddr,
    /// Cache-Control max-age of files (with --from-dir).
    #[arg(long, default_value_t = DEFAULT_MAX_AGE)]
    max_age: u32,
    /// Also serve files at the legacy /.well-known/agent.json (with --from-dir).
    #[arg(long)]
    legacy_path: bool,
    /// Limits on clients.
    #[command(flatten)]
    server: crate::serve::server::ServerFlags,
    /// Seconds to keep answering after SIGTERM (`/readyz` 503, `Connection: close`) before
    /// exiting, so load balancers stop sending first.
    #[arg(long, default_value_t = 10)]
    drain_seconds: u64,
    /// With --from-dir: also serve every card in a public directory (manifest, ARD and native
    /// APIs) on this host.
    #[arg(long, value_name = "HOST")]
    directory_host: Option<String>,
    /// With --from-dir: answer requests for a host that has no card of its own with the card
    /// of this host (an agent serving its own card, reached by address or Service name).
    #[arg(long, value_name = "HOST")]
    fallback_host: Option<String>,
    /// Audiences accepted in bearer tokens of Kubernetes-mode directories (comma-separated;
    /// default: the API server's own).
    #[arg(long, default_value = "")]
    token_audiences: String,
    /// Who may read cards' extended cards.
    #[command(flatten)]
    bearer: crate::bearer::BearerFlags,
    /// With --from-cluster: objects per page of the watches' lists (at start and on a relist)
    /// when they list in pages (see --initial-list).
    #[arg(long, default_value_t = crate::hub::DEFAULT_LIST_PAGE_SIZE, value_parser = clap::value_parser!(u32).range(1..))]
    list_page_size: u32,
    /// With --from-cluster: how the watches get their first list (`auto`: streaming where the
    /// API server allows it, else pages; `pages`, needed before Kubernetes 1.27).
    #[arg(long, value_enum, default_value_t = crate::hub::InitialList::Auto)]
    initial_list: crate::hub::InitialList,
}

/// Run the card server alone until SIGTERM.
pub fn serve(args: ServeArgs) -> Result<()> {
    use std::sync::Arc;

    use crate::index::Index;
    use crate::serve::{source_cluster, source_dir, Content, Servers};

    crate::process::init_tracing();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let content = Content::cards(Arc::new(match (&args.from_dir, &args.fallback_host) {
            (Some(_), Some(host)) => Index::with_fallback_host(host),
            (None, Some(_)) => anyhow::bail!("--fallback-host needs --from-dir"),
            _ => Index::new(),
        }));
        let mut authorizer = None;
        let mut api_client = None;
        let mut registry = prometheus_client::registry::Registry::default();
        let feed = match &args.from_dir {
            Some(dir) => {
                let dir_metrics = source_dir::DirMetrics::default();
                dir_metrics.register(&mut registry);
                let opts = source_dir::DirOptions {
                    max_age: args.max_age,
                    legacy: args.legacy_path,
                    interval: std::time::Duration::from_millis(200),
                };
                tokio::spawn(tracing::Instrument::instrument(
                    source_dir::watch_dir(
                        dir.clone(),
                        content.clone(),
                        opts,
                        args.directory_host.clone(),
                        dir_metrics,
                    ),
                    tracing::info_span!("card_dir", dir = %dir.display()),
                ))
            }
            None => {
                let client = kube::Client::try_default()
                    .await
                    .context("connecting to the cluster")?;
                api_client = Some(client.clone());
                authorizer = Some(Arc::new(crate::directory::access::Authorizer::new(
                    client.clone(),
                    crate::contract::patterns(&args.token_audiences),
                )));
                // Every namespace's cards; the JWKS and feed logs from the operator's only.
                let scope = crate::hub::Scope {
                    namespace: None,
                    operator_namespace: args.namespace.clone(),
                    list_page_size: args.list_page_size,
                    initial_list: args.initial_list,
                };
                let hubs = crate::hub::Hubs::<crate::store::ServedCard>::start(&client, &scope);
                let federation = Arc::new(crate::directory::federation::Federation::default());
                let upstreams = crate::directory::federation::spawn(
                    hubs.clone(),
                    federation.clone(),
                    kube::Api::namespaced(client.clone(), &args.namespace),
                    client.clone(),
                );
                let (args_namespace, content_c) = (args.namespace.clone(), content.clone());
                tokio::spawn(async move {
                    let _upstreams = upstreams;
                    source_cluster::watch_cluster(hubs, args_namespace, content_c, federation).await
                })
            }
        };
        let limits = args.server.limits();
        let mut servers = Servers::bind(
            args.listen,
            args.admin_listen,
            content,
            registry,
            vec![],
            vec![],
            limits,
        )
        .await?;
        if let Some(a) = authorizer {
            servers = servers.with_authorizer(a);
        }
        servers = servers.with_bearer(Arc::new(crate::bearer::Bearer::new(
            &args.bearer,
            api_client,
        )?));
        servers.log_addresses();
        let shutdown = servers.shutdown();
        let run = servers.run();
        tokio::pin!(run);
        tokio::select! {
            r = &mut run => r?,
            r = feed => r.context("card feed stopped")?,
            _ = crate::process::shutdown_signal() => {
                crate::serve::server::drain(&shutdown, args.drain_seconds, &mut run).await?;
            }
        }
        Ok(())
    })
}
