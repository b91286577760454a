//! How this deployment of the operator is set up, from `run`'s flags: what every controller
//! reads and never changes.

use crate::controller::routes::policy::IngressPolicy;
use crate::controller::routes::routing::Routing;

/// What the operator's own deployment looks like.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The operator's namespace (Ingresses for cards, JWKS, keys).
    pub operator_namespace: String,
    /// The Service in front of the card server.
    pub service_name: String,
    /// Its port name.
    pub service_port_name: String,
    /// What tenants' Ingress settings may do.
    pub ingress: IngressPolicy,
    /// Ingresses, HTTPRoutes or nothing.
    pub routing: Routing,
    /// How long a retired card's URL answers 410 Gone (and the directories keep its
    /// tombstone) before it is unpublished, in seconds.
    pub retired_retention_seconds: u64,
}

/// Everything `run` needs to know about the deployment.
#[derive(Clone, Debug)]
pub struct Config {
    /// The operator's namespace, Service and port name.
    pub settings: Settings,
    /// Where the signing keys are (`--signer`).
    pub signer: crate::controller::keys::source::SignerUri,
    /// The PKCS#11 module for a `pkcs11:` signer whose URI names none.
    pub pkcs11_module: Option<String>,
    /// Where Vault is and how to log in, for a `hashivault://` signer.
    pub vault: Option<crate::controller::keys::vault::VaultConfig>,
    /// Create the signing Secret (`secret:` signers) with a fresh ES256 key when it is absent.
    pub create_signing_secret: bool,
    /// Host patterns every namespace may publish on.
    pub allowed_hosts: Vec<String>,
    /// Host patterns on which namespaces may hold disjoint path prefixes (elsewhere one
    /// namespace holds a whole host).
    pub shared_hosts: Vec<String>,
    /// Reporter instance (pod name) for Events.
    pub instance: String,
    /// Reconcile only the AgentCards of this namespace (all namespaces when `None`).
    pub watch_namespace: Option<String>,
    /// Most reconciles at once (0: unbounded).
    pub concurrency: u16,
    /// `Cache-Control: max-age` of the served JWKS, in seconds; also how long a new key is
    /// published before it signs.
    pub jwks_max_age: u32,
    /// Most cards published per namespace (0: any number); the oldest publish.
    pub max_cards_per_namespace: usize,
    /// Largest signed card published, in bytes.
    pub max_card_bytes: usize,
    /// Most bytes of card specs published per namespace (`--max-namespace-card-bytes`; 0: any).
    pub max_namespace_card_bytes: usize,
    /// Import also from endpoint addresses that are not a Pod of the card's namespace.
    pub source_allow_unmanaged_endpoints: bool,
}

impl Config {
    /// What this process watches, as the watches filter it (see [`crate::hub::Scope`]).
    pub fn hub_scope(&self) -> crate::hub::Scope {
        crate::hub::Scope {
            namespace: self.watch_namespace.clone(),
            operator_namespace: self.settings.operator_namespace.clone(),
            ..Default::default()
        }
    }
}
