//! What the process keeps of the objects it watches in bulk: shared data, below the watches
//! that fill the stores ([`crate::hub`]), the card server that reads them
//! ([`crate::serve::source_cluster`]) and the controllers ([`crate::controller`]).
//!
//! Data flow: a watch deserialises each object, its metadata by [`lean`] (the field trees of
//! `managedFields` pruned as they are read) → [`compact`] drops what no reader needs
//! (`managedFields` but the operator's annotation keys, kubectl's last-applied copy) or
//! [`seen`] reduces it to its stored form ([`SeenConfigMap`], [`SeenIngress`]: identity,
//! compact metadata, shared data bytes or a spec digest), or, on a serving-only replica, an
//! AgentCard is read as the [`ServedCard`] the card server needs ([`served`]) → the reflector
//! store (kube's, for the kinds a kube `Controller` reads; [`named`] for the ConfigMaps and
//! Ingresses) → readers look at metadata through [`MetaView`], at a card through [`CardFields`].

/// Implements `kube::Resource` for a form a watch reads or a store keeps, with the API
/// coordinates (kind, group, version, plural; namespaced) of the typed kind it stands for, and
/// its `metadata` field as its metadata.
macro_rules! resource_as {
    ($form:ty, $typed:ty) => {
        impl kube::Resource for $form {
            type DynamicType = ();
            type Scope = k8s_openapi::NamespaceResourceScope;

            fn kind(dt: &()) -> std::borrow::Cow<'_, str> {
                <$typed as kube::Resource>::kind(dt)
            }

            fn group(dt: &()) -> std::borrow::Cow<'_, str> {
                <$typed as kube::Resource>::group(dt)
            }

            fn version(dt: &()) -> std::borrow::Cow<'_, str> {
                <$typed as kube::Resource>::version(dt)
            }

            fn plural(dt: &()) -> std::borrow::Cow<'_, str> {
                <$typed as kube::Resource>::plural(dt)
            }

            fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata
            }

            fn meta_mut(
                &mut self,
            ) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata
            }
        }
    };
}
use resource_as;

pub mod compact;
pub mod lean;
pub mod named;
pub mod seen;
pub mod served;

pub use compact::{card_editor, compact_card, compact_meta, digest, operator_annotations};
pub use lean::{lean_meta, WireCard};
pub use named::{NamedStore, NamedWriter};
pub use seen::{MetaView, OptionalSpec, Owner, SeenConfigMap, SeenIngress, SeenMeta};
pub use served::{CardFields, ServedCard};
