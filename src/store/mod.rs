//! What the process keeps of the objects it watches in bulk: shared data, below the watches
//! that fill the stores ([`crate::hub`]), the card server that reads them
//! ([`crate::serve::source_cluster`]) and the controllers ([`crate::controller`]).
//!
//! Data flow: a watch deserialises each object → [`compact`] drops what no reader needs
//! (`managedFields` but the operator's annotation keys, kubectl's last-applied copy) or
//! [`seen`] reduces it to its stored form ([`SeenConfigMap`], [`SeenIngress`]: identity,
//! compact metadata, shared data bytes or a spec digest), or, on a serving-only replica, an
//! AgentCard is read as the [`ServedCard`] the card server needs ([`served`]) → the reflector
//! store (kube's, for the kinds a kube `Controller` reads; [`named`] for the ConfigMaps and
//! Ingresses) → readers look at metadata through [`MetaView`], at a card through [`CardFields`].

pub mod compact;
pub mod named;
pub mod seen;
pub mod served;

pub use compact::{card_editor, compact_card, compact_meta, digest, operator_annotations};
pub use named::{NamedStore, NamedWriter};
pub use seen::{MetaView, OptionalSpec, Owner, SeenConfigMap, SeenIngress, SeenMeta};
pub use served::{CardFields, ServedCard};
