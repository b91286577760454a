//! The card server: one HTTP server, fed by a watch on the published ConfigMaps (`run`,
//! `serve --from-cluster`) or by a directory of files (`serve --from-dir`).
//!
//! Data flow: a feed ([`source_cluster`] or [`source_dir`]) keeps the shared
//! [`crate::index::Index`] up to date; [`server::serve_public`] accepts connections (bounded,
//! with header limits and timeouts) and answers each request with [`http::respond`], a pure
//! lookup in the index; [`admin`] answers `/metrics`, `/healthz` and `/readyz` on its own port.

pub mod admin;
pub mod http;
pub mod metrics;
pub mod server;
pub mod source_cluster;
pub mod source_dir;
