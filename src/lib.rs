//! agentcard-operator: publishes A2A Agent Cards from Kubernetes resources.
//!
//! [`a2a`] is the protocol core (card model, validation, canonical form, JWS) and knows
//! nothing of Kubernetes; [`cli`] holds the offline commands built on it.

pub mod a2a;
pub mod cli;
pub mod input;
