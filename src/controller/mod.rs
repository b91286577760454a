//! The controllers, run by the lease holder only.
//!
//! Data flow: [`run`] (the wiring) makes the trigger edges ([`triggers`]: which event wakes
//! which reconcile, and why), starts the watches that feed them, each with its own event
//! logic — the card-side fan-outs of the process's shared watches ([`watches`]), the signing
//! Secret and JWKS ConfigMap ([`keys::watch`]), the Ingresses and HTTPRoutes the operator
//! writes ([`routes::watch`]), the directories ([`agentdirectory::watch`]), the agents'
//! Services ([`agentcard::backends`]) — and builds the [`Context`] from what they keep. Each
//! AgentCard walks [`agentcard`]'s pipeline once (source → validate → claim → build → apply →
//! status), each AgentDirectory [`agentdirectory`]'s, reading the context by subsystem:
//! [`routes`] (who holds which host and path, the route objects, the platform's policy),
//! [`keys`] (the signing Secret, which keys sign, the JWKS publisher), [`writes`] (how objects
//! are written, and what was written but not seen yet), [`limits`] and retry [`backoff`]. The
//! lease holder also writes the directories' change feeds ([`feed_writer`]) and, for each
//! AgentDiscovery, the cards of the running agents it finds ([`discovery`]). Every task [`run`]
//! spawns is aborted when its future is dropped, so losing the lease stops all of it.

pub mod agentcard;
pub mod agentdirectory;
pub mod api_calls;
pub mod backoff;
pub mod conditions;
pub mod config;
pub mod context;
pub mod discovery;
pub mod error;
pub mod events;
pub mod feed_writer;
pub mod finalizers;
pub mod keys;
pub mod limits;
pub mod metrics;
pub mod routes;
pub mod run;
#[cfg(test)]
pub mod testing;
pub mod triggers;
pub mod watches;
pub mod writes;

pub use config::{Config, Settings};
pub use context::Context;
pub use error::Error;
pub use run::run;
pub use writes::apply_status;
