//! agentcard-operator: publishes A2A Agent Cards from Kubernetes resources.
//!
//! [`a2a`] is the protocol core (card model, validation, canonical form, JWS) and knows
//! nothing of Kubernetes. [`index`] holds the published cards in memory; [`serve`] answers
//! HTTP from it, fed by the cluster or a directory. [`contract`] names what the controller
//! writes and the server reads. [`directory`] is the AgentDirectory registry: a query engine
//! over the same index, with its ARD and native HTTP views. [`hub`] holds the one set of
//! watches a process shares between its card server and its controllers, which keep what
//! [`store`] says of each object; [`controller`] reconciles on the replica [`election`] picks.
//! [`cli`] is the command line over all of it.

// The library holds no unsafe code (the binary sets the allocator's configuration only).
#![forbid(unsafe_code)]

/// The protocol core, its own crate ([`agentcard_a2a`], `crates/a2a`): it knows no Kubernetes
/// by construction. Re-exported under its old path so the operator reads `crate::a2a::…`.
pub use agentcard_a2a as a2a;
pub mod bearer;
pub mod cli;
pub mod contract;
pub mod controller;
pub mod crd;
pub mod directory;
pub mod election;
pub mod history;
pub mod hub;
pub mod index;
pub mod input;
pub mod locks;
pub mod net;
pub mod process;
pub mod revoke;
pub mod run;
pub mod serve;
pub mod store;
pub mod web;
pub mod yaml;
