//! `agentcard-operator run`: the card server on every replica, the controllers on the lease
//! holder only.
//!
//! Every process watches the published ConfigMaps into its own index and serves HTTP from it.
//! Leadership comes from a Lease ([`crate::election`]): when this process acquires it, the
//! controllers start; when it loses it, they stop; when the holder dies, another process takes
//! over within the lease duration, and when it gives the lease up (SIGTERM: before its drain)
//! at once. When the controllers stop on their own (an error), the process turns `/readyz`
//! red, gives the lease up at once and exits non-zero, so another replica takes over instead
//! of a holder that reconciles nothing.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};

use crate::contract::patterns;
use crate::controller::config::Settings;
use crate::controller::routes::policy::{IngressPolicy, TlsPolicy, DEFAULT_ALLOWED_ANNOTATIONS};
use crate::controller::routes::routing::{ParentRef, RouteKind, Routing};
use crate::controller::{self, metrics::ControllerMetrics};
use crate::election::Election;
use crate::serve::{server, source_cluster, Content, Servers};

/// Flags of `run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The operator's namespace.
    #[arg(long, env = "POD_NAMESPACE")]
    namespace: String,
    /// Public address (cards, JWKS).
    #[arg(long, default_value = "0.0.0.0:8080")]
    listen: SocketAddr,
    /// Admin address (/metrics, /healthz, /readyz).
    #[arg(long, default_value = "0.0.0.0:8081")]
    admin_listen: SocketAddr,
    /// Secret with the signing keys, in the operator's namespace (`--signer secret:<name>`).
    #[arg(long, default_value = "agentcard-signing-keys")]
    signing_secret: String,
    /// Where the signing keys are: `secret:<name>` (the default, `--signing-secret`),
    /// `tls-secret:<name>` (a cert-manager Certificate's Secret: signatures carry its chain as
    /// `x5c`) or `pkcs11:token=…;object=…?pin-source=…` (an HSM; RFC 7512).
    #[arg(long, env = "AGENTCARD_SIGNER")]
    signer: Option<String>,
    /// The PKCS#11 module (`.so`) for a `pkcs11:` signer whose URI has no `module-path`.
    #[arg(long, env = "AGENTCARD_PKCS11_MODULE")]
    pkcs11_module: Option<String>,
    /// Vault's address, for a `hashivault://` signer.
    #[arg(long, env = "VAULT_ADDR")]
    vault_addr: Option<String>,
    /// A file holding the Vault token (re-read at each login); without it, `VAULT_TOKEN`, or
    /// Vault's Kubernetes auth with --vault-k8s-role.
    #[arg(long)]
    vault_token_file: Option<PathBuf>,
    /// Log in with Vault's Kubernetes auth as this role, with the ServiceAccount token.
    #[arg(long)]
    vault_k8s_role: Option<String>,
    /// The mount of Vault's Kubernetes auth method.
    #[arg(long, default_value = "kubernetes")]
    vault_k8s_mount: String,
    /// The ServiceAccount token file for Vault's Kubernetes auth.
    #[arg(
        long,
        default_value = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    )]
    vault_k8s_token_file: PathBuf,
    /// A CA bundle (PEM) Vault's certificate chains to.
    #[arg(long, env = "VAULT_CACERT")]
    vault_ca_file: Option<PathBuf>,
    /// How often the transit key's versions are read again (a rotation in Vault).
    #[arg(long, default_value_t = 30)]
    vault_refresh_seconds: u64,
    /// Do not create the signing Secret when it is absent.
    #[arg(long)]
    no_create_signing_secret: bool,
    /// Deletes each directory's change feed keeps (`GET /v1/changes`); a cursor older than
    /// the oldest kept gets 410 and re-lists.
    #[arg(long, default_value_t = 100_000)]
    feed_retention: usize,
    /// How long a retired card's URL answers 410 Gone with its successor (and the directories
    /// keep its tombstone) before it is unpublished, in seconds (default 30 days).
    #[arg(long, default_value_t = 2_592_000)]
    retired_retention_seconds: u64,
    /// Most bytes (compressed) of each ConfigMap a directory's change-feed log is kept in; a
    /// larger log is split over more.
    #[arg(long, default_value_t = crate::directory::feed::PART_BYTES)]
    feed_part_bytes: usize,
    /// The Service the Ingresses route to (in front of this server).
    #[arg(long, default_value = "agentcard-operator")]
    service_name: String,
    /// Its port name.
    #[arg(long, default_value = "http")]
    service_port_name: String,
    /// Host patterns any namespace may publish on (comma-separated: `*`, `*.example.com`,
    /// `a.example.com`). Namespaces may add their own with the agentcard.dev/allowed-hosts
    /// annotation.
    #[arg(long, default_value = "*")]
    allowed_hosts: String,
    /// Host patterns on which several namespaces may publish under disjoint path prefixes
    /// (comma-separated). On every other host one namespace holds the whole host.
    #[arg(long, default_value = "")]
    shared_hosts: String,
    /// Ingress annotation keys cards may set (comma-separated; `prefix/*` for a whole prefix;
    /// default: none). Nothing that configures the ingress controller or chooses a
    /// certificate issuer should be here: a card route shares its host (and its certificate)
    /// with other tenants' on a shared host. Set those with --ingress-annotation.
    #[arg(long, default_value = DEFAULT_ALLOWED_ANNOTATIONS)]
    ingress_allowed_annotations: String,
    /// An annotation set on every Ingress the operator writes, the platform's choice:
    /// `key=value` (e.g. `cert-manager.io/cluster-issuer=letsencrypt`; the value may hold
    /// commas); repeat the flag for more.
    #[arg(long = "ingress-annotation", value_parser = parse_annotation)]
    ingress_annotations: Vec<(String, String)>,
    /// `ingressClassName` of every Ingress the operator writes (default: the cluster default).
    #[arg(long)]
    ingress_class: Option<String>,
    /// Ingress classes a card may choose in spec.publish.ingress.className (comma-separated,
    /// `*` for any; default: none).
    #[arg(long, default_value = "")]
    ingress_allowed_classes: String,
    /// TLS of the card routes: `per-host` (Secret `agentcard-tls-<host>` in the operator's
    /// namespace, e.g. issued by cert-manager), `secret:<name>` (one Secret for every host), or
    /// `none`.
    #[arg(long, default_value = "per-host")]
    ingress_tls: TlsPolicy,
    /// What routes cards and directories: `Ingress`, `HTTPRoute` (Gateway API, attached to
    /// --gateway) or `None` (the platform routes to the Service itself).
    #[arg(long, default_value = "Ingress")]
    route_kind: RouteKind,
    /// Gateways HTTPRoutes attach to (comma-separated `namespace/name[/sectionName]`).
    #[arg(long, default_value = "")]
    gateway: String,
    /// Gateway listener names cards may pick in spec.publish.sectionName (comma-separated,
    /// `*` for any; default: none).
    #[arg(long, default_value = "")]
    gateway_allowed_sections: String,
    /// Port number of the Service (HTTPRoute backends name ports by number).
    #[arg(long, default_value_t = 80)]
    service_port: u16,
    /// Lease duration in seconds: how long a dead leader holds the lease.
    #[arg(long, default_value_t = 15)]
    lease_duration: u64,
    /// Reconcile only the AgentCards of this namespace (default: every namespace).
    #[arg(long)]
    watch_namespace: Option<String>,
    /// Objects per page of the watches' lists (cards, namespaces, directories, published
    /// ConfigMaps; at start and on a relist) when they list in pages (see --initial-list):
    /// smaller pages hold less at once, larger ones take fewer requests.
    #[arg(long, default_value_t = crate::hub::DEFAULT_LIST_PAGE_SIZE, value_parser = clap::value_parser!(u32).range(1..))]
    list_page_size: u32,
    /// How the watches get their first list: `auto` asks for a streaming list (Kubernetes
    /// WatchList: one request, no page held whole) and lists in pages where the API server
    /// refuses it; `pages` always lists in pages (needed before Kubernetes 1.27, whose API
    /// servers ignore the streaming request).
    #[arg(long, value_enum, default_value_t = crate::hub::InitialList::Auto)]
    initial_list: crate::hub::InitialList,
    /// Most AgentCard reconciles at once (0: unbounded, which holds an API connection and its
    /// buffers per reconcile in flight).
    #[arg(long, default_value_t = 32)]
    concurrency: u16,
    /// Audiences accepted in bearer tokens of Kubernetes-mode directories (comma-separated;
    /// default: the API server's own).
    #[arg(long, default_value = "")]
    token_audiences: String,
    /// Who may read cards' extended cards.
    #[command(flatten)]
    bearer: crate::bearer::BearerFlags,
    /// Seconds to keep answering after SIGTERM (`/readyz` 503, `Connection: close`) before
    /// exiting; the lease is given up first, at once.
    #[arg(long, default_value_t = 10)]
    drain_seconds: u64,
    /// `Cache-Control: max-age` of the served JWKS, in seconds. A key named active starts
    /// signing only after it has been published this long, so no client's cached JWKS misses it.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u32).range(0..=86400))]
    jwks_max_age: u32,
    /// Most AgentCards published per namespace (0: any number). The oldest (by creation time)
    /// publish; the others report `NamespaceCardLimit` until cards go or the limit is raised.
    #[arg(long, default_value_t = 1000)]
    max_cards_per_namespace: usize,
    /// Most bytes of AgentCard specs (as JSON) published per namespace (0: any number): what
    /// one namespace may make every replica hold. The oldest cards that fit publish; the
    /// others report `NamespaceByteBudget`, never another namespace's.
    #[arg(long, default_value_t = 32 * 1024 * 1024)]
    max_namespace_card_bytes: usize,
    /// Largest signed card published, in bytes; larger ones report `CardTooLarge`.
    #[arg(long, default_value_t = 256 * 1024, value_parser = clap::value_parser!(u64).range(1024..=crate::a2a::validate::MAX_CARD_BYTES as u64))]
    max_card_bytes: u64,
    /// Also import from endpoint addresses that are not a Pod of the card's namespace
    /// (selector-less Services, e.g. in front of VMs). Off by default: a tenant writes its own
    /// EndpointSlices, so this lets it make the operator send GETs to any address it can name
    /// outside the cluster's Pods, and read whether they answered. Even then never the API
    /// server's, a node's, a Service range's, the operator's own, another namespace's Pod's or
    /// a special-purpose address, nor one inside a node's Pod range that no Pod of the card's
    /// namespace holds.
    #[arg(long)]
    source_allow_unmanaged_endpoints: bool,
    /// Lease holder identity (default: $POD_NAME, else host name and process id).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// Limits on clients of the public port.
    #[command(flatten)]
    server: server::ServerFlags,
}

fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into());
    format!("{}-{}", host.trim(), std::process::id())
}

/// Run until SIGTERM.
pub fn run(args: RunArgs) -> Result<()> {
    crate::process::init_tracing();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(serve_and_lead(args))
}

/// The controllers' configuration from the flags.
/// Where Vault is and how to log in, when an address is given: Kubernetes auth when a role is
/// named, else the token file, else `VAULT_TOKEN`.
fn vault_config(args: &RunArgs) -> Option<crate::controller::keys::vault::VaultConfig> {
    use crate::controller::keys::vault::{TokenSource, VaultAuth, VaultConfig};
    let addr = args.vault_addr.clone()?;
    let auth = match (&args.vault_k8s_role, &args.vault_token_file) {
        (Some(role), _) => VaultAuth::Kubernetes {
            role: role.clone(),
            mount: args.vault_k8s_mount.clone(),
            jwt_file: args.vault_k8s_token_file.clone(),
        },
        (None, Some(file)) => VaultAuth::Token(TokenSource::File(file.clone())),
        (None, None) => VaultAuth::Token(TokenSource::Value(
            std::env::var("VAULT_TOKEN").unwrap_or_default(),
        )),
    };
    Some(VaultConfig {
        addr,
        auth,
        ca_file: args.vault_ca_file.clone(),
        refresh: std::time::Duration::from_secs(args.vault_refresh_seconds.max(1)),
    })
}

fn controller_config(args: &RunArgs, identity: &str) -> Result<controller::Config> {
    if args.route_kind == RouteKind::HttpRoute && args.gateway.trim().is_empty() {
        anyhow::bail!("--route-kind HTTPRoute needs --gateway namespace/name[/sectionName]");
    }
    let parents = patterns(&args.gateway)
        .iter()
        .map(|p| p.parse::<ParentRef>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("--gateway: {e}"))?;
    Ok(controller::Config {
        settings: Settings {
            operator_namespace: args.namespace.clone(),
            service_name: args.service_name.clone(),
            service_port_name: args.service_port_name.clone(),
            ingress: IngressPolicy {
                allowed_annotations: patterns(&args.ingress_allowed_annotations),
                class_name: args.ingress_class.clone().filter(|c| !c.is_empty()),
                allowed_classes: patterns(&args.ingress_allowed_classes),
                tls: args.ingress_tls.clone(),
                annotations: args.ingress_annotations.iter().cloned().collect(),
            },
            routing: Routing {
                kind: args.route_kind,
                parents,
                allowed_sections: patterns(&args.gateway_allowed_sections),
                service_port: args.service_port,
            },
            retired_retention_seconds: args.retired_retention_seconds,
        },
        signer: crate::controller::keys::source::SignerUri::parse(
            args.signer
                .clone()
                .unwrap_or_else(|| format!("secret:{}", args.signing_secret))
                .as_str(),
        )?,
        pkcs11_module: args.pkcs11_module.clone(),
        vault: vault_config(args),
        create_signing_secret: !args.no_create_signing_secret,
        allowed_hosts: patterns(&args.allowed_hosts),
        shared_hosts: patterns(&args.shared_hosts),
        instance: identity.to_string(),
        watch_namespace: args.watch_namespace.clone(),
        concurrency: args.concurrency,
        jwks_max_age: args.jwks_max_age,
        max_cards_per_namespace: args.max_cards_per_namespace,
        max_card_bytes: usize::try_from(args.max_card_bytes).unwrap_or(usize::MAX),
        max_namespace_card_bytes: args.max_namespace_card_bytes,
        source_allow_unmanaged_endpoints: args.source_allow_unmanaged_endpoints,
    })
}

/// The public and admin servers over `content`: `/metrics` with the controllers' metrics,
/// `/readyz` red once `failed` (the controllers stopped while leading).
async fn bind_servers(
    args: &RunArgs,
    client: &kube::Client,
    content: Content,
    metrics: &Arc<ControllerMetrics>,
    federation: &Arc<crate::directory::federation::Federation>,
    failed: &Arc<AtomicBool>,
) -> Result<Servers> {
    let mut registry = prometheus_client::registry::Registry::default();
    metrics.register(&mut registry);
    let scrape_metrics = metrics.clone();
    let federation = federation.clone();
    let refresh: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
        scrape_metrics.refresh_cards();
        scrape_metrics.refresh_upstreams(federation.reachability());
    });
    let failed = failed.clone();
    let controllers_ok: crate::serve::admin::ReadyCheck = Arc::new(move || {
        if failed.load(Ordering::Acquire) {
            Err(crate::serve::admin::NotReady::ControllersFailed)
        } else {
            Ok(())
        }
    });
    Ok(Servers::bind(
        args.listen,
        args.admin_listen,
        content,
        registry,
        vec![controllers_ok],
        vec![refresh],
        args.server.limits(),
    )
    .await?
    .with_authorizer(Arc::new(crate::directory::access::Authorizer::new(
        client.clone(),
        patterns(&args.token_audiences),
    )))
    .with_bearer(Arc::new(crate::bearer::Bearer::new(
        &args.bearer,
        Some(client.clone()),
    )?)))
}

/// Serve on every replica, lead when elected, until SIGTERM: then the lease goes first (the
/// controllers stop, another replica leads within a second), then the drain (serving needs no
/// lease, and a takeover should not wait for this replica's last requests).
async fn serve_and_lead(args: RunArgs) -> Result<()> {
    let metrics = Arc::new(ControllerMetrics::default());
    let kube_config = kube::Config::infer()
        .await
        .context("reading the cluster configuration")?;
    let client =
        crate::controller::api_calls::counted_client(kube_config, metrics.api_calls.clone())
            .context("connecting to the cluster")?;
    let identity = args.identity.clone().unwrap_or_else(default_identity);
    let content = Content::default();
    // One watch per kind for the card server and the controllers.
    let hubs = crate::hub::Hubs::<crate::crd::AgentCard>::start(
        &client,
        &crate::hub::Scope {
            namespace: args.watch_namespace.clone(),
            operator_namespace: args.namespace.clone(),
            list_page_size: args.list_page_size,
            initial_list: args.initial_list,
        },
    );
    let federation = Arc::new(crate::directory::federation::Federation::default());
    let feed = tokio::spawn(tracing::Instrument::instrument(
        source_cluster::watch_cluster(
            hubs.clone(),
            args.namespace.clone(),
            content.clone(),
            federation.clone(),
        ),
        tracing::info_span!("card_feed"),
    ));
    let _upstreams = crate::directory::federation::spawn(
        hubs.clone(),
        federation.clone(),
        kube::Api::namespaced(client.clone(), &args.namespace),
        client.clone(),
    );
    let failed = Arc::new(AtomicBool::new(false));
    let servers = bind_servers(
        &args,
        &client,
        content.clone(),
        &metrics,
        &federation,
        &failed,
    )
    .await?;
    let config = controller_config(&args, &identity)?;
    tracing::info!(%identity, namespace = %args.namespace, "agentcard-operator running");
    servers.log_addresses();
    let shutdown = servers.shutdown();
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let run = servers.run();
    let leading = Leader {
        client,
        hubs,
        config,
        metrics,
        failed,
        content,
        feed_retention: args.feed_retention,
        feed_part_bytes: args.feed_part_bytes,
        federation,
    }
    .lead(identity, args.namespace.clone(), args.lease_duration, stop);
    tokio::pin!(run, leading);
    tokio::select! {
        r = &mut run => r?,
        r = feed => r.context("card feed stopped")?,
        r = &mut leading => r?,
        _ = crate::process::shutdown_signal() => {
            let _ = stop_tx.send(true);
            let _ = tokio::time::timeout(Duration::from_secs(5), &mut leading).await;
            crate::serve::server::drain(&shutdown, args.drain_seconds, &mut run).await?;
        }
    }
    Ok(())
}

/// How long a new leader waits for its card server's first sync before it starts the
/// controllers anyway.
const SERVE_FIRST: Duration = Duration::from_secs(120);

/// What the controllers run with while this process leads.
struct Leader {
    client: kube::Client,
    hubs: Arc<crate::hub::Hubs>,
    config: controller::Config,
    metrics: Arc<ControllerMetrics>,
    /// Set when the controllers end on their own while leading (`/readyz` then says so).
    failed: Arc<AtomicBool>,
    /// What this replica serves (the directories whose change feeds the holder records).
    content: Content,
    /// Tombstones each change feed keeps.
    feed_retention: usize,
    /// Most bytes of each ConfigMap of a change-feed log.
    feed_part_bytes: usize,
    /// The directories' upstreams as this process syncs them.
    federation: Arc<crate::directory::federation::Federation>,
}

impl Leader {
    /// Hold or wait for the lease; run the controllers while holding it. Returns when `stop`
    /// fires (the lease given up), or fails when the controllers end on their own while
    /// leading.
    async fn lead(
        self,
        identity: String,
        namespace: String,
        lease_duration: u64,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) -> Result<()> {
        let mut election =
            Election::start(self.client.clone(), namespace, identity, lease_duration).await?;
        loop {
            tokio::select! {
                acquired = election.acquired() => acquired?,
                _ = stop.changed() => {
                    election.release().await;
                    return Ok(());
                }
            }
            // Serve first: a leader that (re)starts with every card already published has its
            // card server's first sync done before the controllers reconcile them all (which
            // writes nothing when nothing changed, but takes the same CPU): at 100,000 cards
            // on 2 cores the two together doubled the time until every card was served again.
            // Bounded, so a feed that cannot sync does not stop the controllers.
            // SIGTERM while waiting gives the lease up at once, as it does below.
            tokio::select! {
                synced = tokio::time::timeout(SERVE_FIRST, self.content.cards.wait_ready()) => {
                    if synced.is_err() {
                        tracing::warn!(
                            waited = ?SERVE_FIRST,
                            "the card server has not synced yet: starting the controllers anyway"
                        );
                    }
                }
                _ = stop.changed() => {
                    election.release().await;
                    return Ok(());
                }
            }
            tracing::info!("acquired the lease: starting the controllers");
            self.metrics.set_leading(true);
            let feeds = crate::controller::feed_writer::run(
                self.client.clone(),
                self.content.cards.clone(),
                self.content.directories.clone(),
                self.config.settings.operator_namespace.clone(),
                self.feed_retention,
                self.feed_part_bytes.max(256),
            );
            let reconcile = controller::run(
                self.client.clone(),
                self.hubs.clone(),
                self.config.clone(),
                self.metrics.clone(),
                self.federation.clone(),
            );
            // The change-feed writer never ends on its own: the controllers' end is the end.
            let mut controllers = tokio::spawn(tracing::Instrument::instrument(
                async move {
                    tokio::select! {
                        r = reconcile => r,
                        () = feeds => Ok(()),
                    }
                },
                tracing::info_span!("controllers"),
            ));
            let result = tokio::select! {
                lost = election.lost() => {
                    lost?;
                    tracing::warn!("lost the lease: stopping the controllers");
                    stop_controllers(controllers).await;
                    self.metrics.set_leading(false);
                    continue;
                }
                result = &mut controllers => result,
                _ = stop.changed() => {
                    stop_controllers(controllers).await;
                    self.metrics.set_leading(false);
                    election.release().await;
                    return Ok(());
                }
            };
            self.metrics.set_leading(false);
            // The controllers ended while this process leads: nothing would reconcile. Say so
            // on /readyz, hand the lease over and fail, so the process restarts and another
            // replica leads meanwhile.
            self.failed.store(true, Ordering::Release);
            let why = match result {
                Ok(Ok(())) => "the controllers stopped".to_string(),
                Ok(Err(e)) => format!("the controllers failed: {e}"),
                Err(e) => format!("the controllers panicked: {e}"),
            };
            tracing::error!(reason = %why, "giving up the lease");
            election.release().await;
            anyhow::bail!(why);
        }
    }
}

/// Abort the controllers and wait (bounded) for their tasks to end.
async fn stop_controllers(mut controllers: tokio::task::JoinHandle<Result<(), controller::Error>>) {
    controllers.abort();
    let _ = tokio::time::timeout(Duration::from_secs(5), &mut controllers).await;
}

/// `--ingress-annotation`: one `key=value` (the value as it is, commas included).
fn parse_annotation(text: &str) -> std::result::Result<(String, String), NotKeyValue> {
    match text.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(NotKeyValue(text.to_string())),
    }
}

/// A `--ingress-annotation` that is not `key=value`.
#[derive(Debug, thiserror::Error)]
#[error("{0:?}: expected key=value")]
pub struct NotKeyValue(String);
