//! The finalizers earlier versions put on AgentCards and AgentDirectories, and how they go.
//!
//! The operator no longer holds objects in deletion: what lives in a card's or directory's
//! namespace is owned by it (garbage collection), and what lives in the operator's namespace
//! is removed on the delete event and by a sweep at start-up and after every re-list
//! ([`crate::controller::routes::sweep`]). So a namespace with cards, or a cluster whose operator was uninstalled,
//! never leaves objects stuck in deletion.
//!
//! Objects written by an earlier version still carry its finalizer: each reconcile hands the
//! object here first, and one JSON patch removes that finalizer (and only it: a `test` of the
//! whole list guards against a concurrent change, which then retries with backoff).

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use super::error::Error;

/// The finalizer earlier versions put on each AgentCard (removing its Ingress in the operator's
/// namespace on delete).
pub const LEGACY_CARD: &str = "agentcard.dev/ingress-cleanup";
/// The finalizer earlier versions put on each AgentDirectory (releasing its host on delete).
pub const LEGACY_DIRECTORY: &str = "agentcard.dev/directory-cleanup";

/// Whether `obj` still carries `finalizer`.
pub fn carries<K: Resource>(obj: &K, finalizer: &str) -> bool {
    obj.meta()
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|x| x == finalizer))
}

/// The JSON patch removing `finalizer` from `current`, the whole list tested first (`None` when
/// it is not there).
pub fn removal(current: &[String], finalizer: &str) -> Option<serde_json::Value> {
    let kept: Vec<&String> = current.iter().filter(|f| *f != finalizer).collect();
    (kept.len() != current.len()).then(|| {
        serde_json::json!([
            {"op": "test", "path": "/metadata/finalizers", "value": current},
            {"op": "replace", "path": "/metadata/finalizers", "value": kept},
        ])
    })
}

/// Remove `finalizer` from `obj` when it carries it (one write; nothing otherwise).
pub async fn release<K>(api: &Api<K>, obj: &K, finalizer: &str) -> Result<(), Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let current = obj.meta().finalizers.clone().unwrap_or_default();
    let Some(patch) = removal(&current, finalizer) else {
        return Ok(());
    };
    let patch = serde_json::from_value(patch).map_err(|e| Error::Internal(e.to_string()))?;
    match api
        .patch(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Json::<()>(patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        // Gone meanwhile: nothing holds it any more.
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_legacy_finalizer_is_removed_and_the_list_is_tested_first() {
        let current = vec!["example.com/hold".to_string(), LEGACY_CARD.to_string()];
        let patch = removal(&current, LEGACY_CARD).unwrap();
        assert_eq!(patch[0]["op"], "test");
        assert_eq!(patch[0]["value"], serde_json::json!(current));
        assert_eq!(patch[1]["value"], serde_json::json!(["example.com/hold"]));
    }

    #[test]
    fn an_object_without_it_is_not_written() {
        assert!(removal(&["example.com/hold".to_string()], LEGACY_CARD).is_none());
        assert!(removal(&[], LEGACY_DIRECTORY).is_none());
    }
}
