//! The A2A protocol core: no Kubernetes types here.
//!
//! Data flows one way: JSON → [`parse`] (typed [`card::AgentCard`], unknown fields reported)
//! → [`validate`] (errors and lints with JSON paths) → [`canonical`] (the bytes a signature
//! covers, identical to the official SDKs) → [`jws`] (detached signatures with [`keys`]) →
//! [`publish`] (the exact bytes served, optionally with [`compat`] v0.3 fields). Cards made
//! elsewhere (served by an agent, v1.0 or v0.3) enter through [`import`].
//!
//! The crate's README follows, with an example that runs as a doctest.
#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

pub mod breaking;
pub mod canonical;
pub mod card;
pub mod compat;
pub mod did;
pub mod drift;
pub mod extended;
pub mod import;
pub mod jws;
pub mod keys;
pub mod parse;
pub mod publish;
pub mod report;
pub mod validate;
pub mod x5c;

pub use card::AgentCard;
pub use keys::{Algorithm, Jwks, SigningKey};
pub use report::{Problem, Problems, Severity};
