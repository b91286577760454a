//! The controllers, run by the lease holder only.
//!
//! Data flow: [`run`] (the wiring) subscribes to the process's shared watches ([`crate::hub`])
//! and starts the ones only the controllers need (signing Secret, JWKS ConfigMap, the
//! Ingresses and HTTPRoutes the operator writes); [`watches`] turns each event into the
//! reconciles it triggers. Each AgentCard walks [`agentcard`]'s pipeline once (validate →
//! claim → build → apply → status), each AgentDirectory [`agentdirectory`]'s, reading the
//! shared state of a [`Context`]: who holds which route ([`ownership`] over [`claims`]), the
//! keys that sign ([`signing`], published by [`jwks`]), what was written ([`written`]), the
//! [`limits`] and retry [`backoff`]. Objects are written by [`write`]'s rules. Every task
//! [`run`] spawns is aborted when its future is dropped, so losing the lease stops all of it.

pub mod agentcard;
pub mod agentdirectory;
pub mod api_calls;
pub mod backends;
pub mod backoff;
pub mod claims;
pub mod conditions;
pub mod config;
pub mod context;
pub mod error;
pub mod events;
pub mod feedlog;
pub mod finalizers;
pub mod jwks;
pub mod keys;
pub mod limits;
pub mod metrics;
pub mod ownership;
pub mod policy;
pub mod routing;
pub mod run;
pub mod signing;
pub mod sweep;
pub mod watches;
pub mod write;
pub mod written;

pub use config::{Config, Settings};
pub use context::Context;
pub use error::Error;
pub use run::run;
pub use write::apply_status;
