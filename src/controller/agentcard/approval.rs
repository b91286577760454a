//! Approval: what each directory that requires approval says of the card's served content,
//! for `status.approvals` (pure; runs after the status is decided, so it judges the bytes the
//! status reports).
//!
//! Data flow: the directories with `admission: ApprovalRequired` that select the card (its
//! labels, its namespace's) → for each, the newest `AgentCardApproval` naming that directory
//! and card ([`Approvals`]) → a verdict against the served content hash and the verdict the
//! status held before ([`judge`]). An approval approves the content hash it names, and what
//! follows it while no edit breaks it: an edit the breaking-change classifier found breaking
//! ([`super::compatibility`], this pass's comparison), or any edit under
//! `reapproveOn: AnyChange`, voids it, and a void approval stays void (a new approval decides
//! again). A rejection holds while the content is the one it names. The card server lists a
//! card in such a directory only while its status says `Approved` for it
//! ([`crate::directory::select`]); tenants cannot write the status.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::runtime::reflector::Store;
use kube::ResourceExt;

use super::compatibility::Compared;
use crate::crd::agentdirectory::{Admission, ReapproveOn};
use crate::crd::{
    AgentCard, AgentCardApproval, AgentDirectory, ApprovalState, ApprovalStatus, Decision,
};
use crate::directory::select;

/// The approvals the lease holder has read, and whether the first list is in: until it is, a
/// card's verdicts stay as its status says (a restart never delists an approved card).
pub struct Approvals {
    /// Every AgentCardApproval.
    pub store: Store<AgentCardApproval>,
    /// True once the approvals were listed (or found not installed).
    pub listed: tokio::sync::watch::Receiver<bool>,
}

impl Approvals {
    /// The approvals naming the card `namespace`/`name`.
    fn of(&self, namespace: &str, name: &str) -> Vec<Arc<AgentCardApproval>> {
        self.store
            .state()
            .into_iter()
            .filter(|a| a.spec.card.namespace == namespace && a.spec.card.name == name)
            .collect()
    }
}

/// What [`verdicts`] judges by.
pub struct Judged<'a> {
    /// The card (its status holds the verdicts before this pass).
    pub card: &'a AgentCard,
    /// The content hash the next status reports (`None`: not served).
    pub hash: Option<&'a str>,
    /// What this pass's comparison found of the edit that published `hash`.
    pub edit: &'a Compared,
    /// The labels of the card's namespace.
    pub namespace_labels: &'a BTreeMap<String, String>,
    /// Now (RFC 3339), for `since`.
    pub now: &'a str,
}

/// The verdicts for `status.approvals`, by directory name; the status's own while the
/// approvals are not listed yet.
pub fn verdicts(
    judged: &Judged<'_>,
    directories: &Store<AgentDirectory>,
    approvals: &Approvals,
) -> Vec<ApprovalStatus> {
    let before = judged
        .card
        .status
        .as_ref()
        .map(|s| s.approvals.clone())
        .unwrap_or_default();
    if !*approvals.listed.borrow() {
        return before;
    }
    let Some(hash) = judged.hash else {
        return Vec::new();
    };
    let mut dirs: Vec<Arc<AgentDirectory>> = directories
        .state()
        .into_iter()
        .filter(|d| {
            d.spec.admission == Admission::ApprovalRequired
                && d.metadata.deletion_timestamp.is_none()
                && select::selected(&d.spec, judged.namespace_labels, judged.card.labels())
        })
        .collect();
    if dirs.is_empty() {
        return Vec::new();
    }
    dirs.sort_by_key(|d| d.name_any());
    let mine = approvals.of(
        &judged.card.namespace().unwrap_or_default(),
        &judged.card.name_any(),
    );
    dirs.iter()
        .map(|d| {
            let name = d.name_any();
            let newest = mine
                .iter()
                .filter(|a| a.spec.directory == name)
                .max_by_key(|a| newest_first(a));
            let prev = before.iter().find(|p| p.directory == name);
            judge(
                &name,
                d.spec.reapprove_on,
                newest.map(|a| a.as_ref()),
                prev,
                hash,
                judged.edit,
                judged.now,
            )
        })
        .collect()
}

/// The order approvals are decided in: by creation time, then (approvals created within the
/// same second) by the resourceVersion they were created at, which an immutable object keeps.
fn newest_first(a: &AgentCardApproval) -> (Option<jiff::Timestamp>, u64, String) {
    (
        a.metadata.creation_timestamp.as_ref().map(|t| t.0),
        a.metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        a.name_any(),
    )
}

/// Directory `directory`'s verdict on content `hash`, from its newest approval of the card and
/// the verdict held before (`prev`); `edit` is this pass's comparison of the edit.
pub fn judge(
    directory: &str,
    reapprove_on: ReapproveOn,
    newest: Option<&AgentCardApproval>,
    prev: Option<&ApprovalStatus>,
    hash: &str,
    edit: &Compared,
    now: &str,
) -> ApprovalStatus {
    let mut next = ApprovalStatus {
        directory: directory.to_string(),
        content_hash: Some(hash.to_string()),
        ..Default::default()
    };
    let short = |h: &str| h.chars().take(12).collect::<String>();
    match newest {
        None => {
            next.message = Some(format!(
                "waiting for an AgentCardApproval of directory {directory} naming content hash {hash}"
            ));
        }
        Some(a) => {
            next.approval = Some(a.name_any());
            next.approval_uid = a.uid();
            next.approved_hash = Some(a.spec.content_hash.clone());
            let same = prev.filter(|p| p.approval_uid.is_some() && p.approval_uid == a.uid());
            let edited = prev.and_then(|p| p.content_hash.as_deref()) != Some(hash);
            match (a.spec.decision, same.map(|p| p.state)) {
                (Decision::Reject, _) if a.spec.content_hash == hash => {
                    next.state = ApprovalState::Rejected;
                    next.message = a.spec.message.clone();
                }
                (Decision::Reject, _) => {
                    next.message = Some(format!(
                        "content {} was rejected ({}); edited since, waiting for a new decision",
                        short(&a.spec.content_hash),
                        a.spec.message.as_deref().unwrap_or_default()
                    ));
                }
                (Decision::Approve, Some(ApprovalState::Voided)) => {
                    let p = same.unwrap_or(&next).clone();
                    next.state = ApprovalState::Voided;
                    next.message = p.message;
                    next.changes = p.changes;
                }
                (Decision::Approve, Some(ApprovalState::Approved)) if !edited => {
                    next.state = ApprovalState::Approved;
                    next.message = same.and_then(|p| p.message.clone());
                }
                (Decision::Approve, Some(ApprovalState::Approved)) => match (reapprove_on, edit) {
                    // Signed again with other keys: no caller sees a change.
                    (_, Compared::Resigned) => {
                        next.state = ApprovalState::Approved;
                        next.message = same.and_then(|p| p.message.clone());
                    }
                    (ReapproveOn::BreakingChange, Compared::Changed(found)) if found.is_empty() => {
                        next.state = ApprovalState::Approved;
                        next.message = Some(format!(
                            "approved as {}; edited since without breaking changes",
                            short(&a.spec.content_hash)
                        ));
                    }
                    (ReapproveOn::BreakingChange, Compared::Changed(found)) => {
                        next.state = ApprovalState::Voided;
                        next.changes = found.iter().map(ToString::to_string).collect();
                        next.message = Some(format!(
                            "approval {} voided by a breaking edit: {}",
                            a.name_any(),
                            next.changes.join("; ")
                        ));
                    }
                    (ReapproveOn::AnyChange, _) => {
                        next.state = ApprovalState::Voided;
                        if let Compared::Changed(found) = edit {
                            next.changes = found.iter().map(ToString::to_string).collect();
                        }
                        next.message = Some(format!(
                                "approval {} voided: the content changed and the directory reapproves on any change",
                                a.name_any()
                            ));
                    }
                    (ReapproveOn::BreakingChange, _) => {
                        next.state = ApprovalState::Voided;
                        next.message = Some(format!(
                                "approval {} voided: the content changed and the edit could not be compared with the approved card",
                                a.name_any()
                            ));
                    }
                },
                (Decision::Approve, _) if a.spec.content_hash == hash => {
                    next.state = ApprovalState::Approved;
                    next.message = a.spec.note.clone();
                }
                (Decision::Approve, _) => {
                    next.message = Some(format!(
                        "approval {} names content {}, the card serves {}: waiting for an approval of what is served",
                        a.name_any(),
                        short(&a.spec.content_hash),
                        short(hash)
                    ));
                }
            }
        }
    }
    next.since = match prev {
        Some(p) if p.state == next.state && p.since.is_some() => p.since.clone(),
        _ => Some(now.to_string()),
    };
    next
}

/// The Events a change of verdicts deserves (on transitions only): the card's owner learns
/// that a directory listed it, rejected it (with the message) or voided its approval (with
/// what broke). A card no directory requires approval of, or whose verdicts stay, gets none.
pub fn transitions(
    before: &[ApprovalStatus],
    after: &[ApprovalStatus],
) -> Vec<(kube::runtime::events::EventType, &'static str, String)> {
    use kube::runtime::events::EventType;
    after
        .iter()
        .filter(|a| {
            before
                .iter()
                .find(|b| b.directory == a.directory)
                .is_none_or(|b| b.state != a.state)
        })
        .filter_map(|a| {
            let message = a.message.clone().unwrap_or_default();
            match a.state {
                ApprovalState::Approved => Some((
                    EventType::Normal,
                    "Approved",
                    format!(
                        "listed by directory {} (approval {})",
                        a.directory,
                        a.approval.as_deref().unwrap_or_default()
                    ),
                )),
                ApprovalState::Rejected => Some((
                    EventType::Warning,
                    "ApprovalRejected",
                    format!("directory {} rejected it: {message}", a.directory),
                )),
                ApprovalState::Voided => Some((
                    EventType::Warning,
                    "ApprovalVoided",
                    format!("directory {} no longer lists it: {message}", a.directory),
                )),
                ApprovalState::Pending => None,
            }
        })
        .collect()
}

/// The verdicts in one line for `kubectl get` (`company=approved,public=pending`).
pub fn summary(verdicts: &[ApprovalStatus]) -> Option<String> {
    (!verdicts.is_empty()).then(|| {
        verdicts
            .iter()
            .map(|v| format!("{}={}", v.directory, v.state.as_str()))
            .collect::<Vec<_>>()
            .join(",")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::a2a::breaking::Finding;
    use serde_json::json;

    const H1: &str = "11111111111111111111111111111111";
    const H2: &str = "22222222222222222222222222222222";
    const NOW: &str = "2026-12-05T00:00:00Z";

    fn approval(uid: &str, hash: &str, decision: &str) -> AgentCardApproval {
        serde_json::from_value(json!({
            "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentCardApproval",
            "metadata": {"name": format!("a-{uid}"), "uid": uid},
            "spec": {"directory": "d", "card": {"namespace": "ns", "name": "c"},
                "contentHash": hash, "decision": decision, "approver": "alice",
                "message": "no PII handling described"}
        }))
        .unwrap()
    }

    fn judge_with(
        a: Option<&AgentCardApproval>,
        prev: Option<&ApprovalStatus>,
        hash: &str,
        edit: &Compared,
        on: ReapproveOn,
    ) -> ApprovalStatus {
        judge("d", on, a, prev, hash, edit, NOW)
    }

    fn breaking() -> Compared {
        let old: crate::a2a::card::AgentCard = serde_json::from_value(json!({
            "name": "n", "description": "d", "version": "1", "supportedInterfaces": [],
            "capabilities": {}, "defaultInputModes": [], "defaultOutputModes": [],
            "skills": [{"id": "s", "name": "s", "description": "d", "tags": []}]
        }))
        .unwrap();
        let mut new = old.clone();
        new.skills.clear();
        let found: Vec<Finding> = crate::a2a::breaking::findings(&old, &new);
        assert!(!found.is_empty());
        Compared::Changed(found)
    }

    #[test]
    fn an_approval_lists_the_content_it_names_and_what_follows_it_without_breaking() {
        let bc = ReapproveOn::BreakingChange;
        let a = approval("u1", H1, "Approve");
        let pending = judge_with(None, None, H1, &Compared::Unchanged, bc);
        assert_eq!(pending.state, ApprovalState::Pending);
        let approved = judge_with(Some(&a), Some(&pending), H1, &Compared::Unchanged, bc);
        assert_eq!(approved.state, ApprovalState::Approved);
        assert_eq!(approved.since.as_deref(), Some(NOW));
        // A descriptive edit: still approved.
        let kept = judge_with(
            Some(&a),
            Some(&approved),
            H2,
            &Compared::Changed(vec![]),
            bc,
        );
        assert_eq!(kept.state, ApprovalState::Approved);
        // Looked at again with nothing new: the same.
        let again = judge_with(Some(&a), Some(&kept), H2, &Compared::Unchanged, bc);
        assert_eq!(again.state, ApprovalState::Approved);
        // Signed again with new keys: approved whatever the directory reapproves on.
        for on in [bc, ReapproveOn::AnyChange] {
            let resigned = judge_with(Some(&a), Some(&approved), H2, &Compared::Resigned, on);
            assert_eq!(resigned.state, ApprovalState::Approved);
        }
        // Under AnyChange the same edit voids it.
        let any = judge_with(
            Some(&a),
            Some(&approved),
            H2,
            &Compared::Changed(vec![]),
            ReapproveOn::AnyChange,
        );
        assert_eq!(any.state, ApprovalState::Voided);
    }

    #[test]
    fn a_breaking_edit_voids_the_approval_for_good_and_a_new_approval_decides_again() {
        let bc = ReapproveOn::BreakingChange;
        let a = approval("u1", H1, "Approve");
        let approved = judge_with(Some(&a), None, H1, &Compared::Unchanged, bc);
        let voided = judge_with(Some(&a), Some(&approved), H2, &breaking(), bc);
        assert_eq!(voided.state, ApprovalState::Voided);
        assert!(!voided.changes.is_empty(), "{voided:?}");
        // Even back on the approved content, the void approval stays void.
        let back = judge_with(Some(&a), Some(&voided), H1, &breaking(), bc);
        assert_eq!(back.state, ApprovalState::Voided);
        // An edit that could not be compared voids too.
        let unknown = judge_with(Some(&a), Some(&approved), H2, &Compared::Unknown, bc);
        assert_eq!(unknown.state, ApprovalState::Voided);
        // A new approval of what is served lists it again.
        let b = approval("u2", H2, "Approve");
        assert_eq!(
            judge_with(Some(&b), Some(&voided), H2, &Compared::Unchanged, bc).state,
            ApprovalState::Approved
        );
        // One naming other content waits.
        let stale = judge_with(
            Some(&approval("u3", H1, "Approve")),
            Some(&voided),
            H2,
            &Compared::Unchanged,
            bc,
        );
        assert_eq!(stale.state, ApprovalState::Pending);
    }

    #[test]
    fn a_rejection_shows_its_message_while_the_content_is_the_one_rejected() {
        let bc = ReapproveOn::BreakingChange;
        let r = approval("u1", H1, "Reject");
        let rejected = judge_with(Some(&r), None, H1, &Compared::Unchanged, bc);
        assert_eq!(rejected.state, ApprovalState::Rejected);
        assert_eq!(
            rejected.message.as_deref(),
            Some("no PII handling described")
        );
        let edited = judge_with(
            Some(&r),
            Some(&rejected),
            H2,
            &Compared::Changed(vec![]),
            bc,
        );
        assert_eq!(edited.state, ApprovalState::Pending);
        assert!(edited
            .message
            .unwrap()
            .contains("no PII handling described"));
    }

    #[test]
    fn events_come_on_transitions_only() {
        let v = |d: &str, state| ApprovalStatus {
            directory: d.into(),
            state,
            message: Some("why".into()),
            ..Default::default()
        };
        let pending = [v("d", ApprovalState::Pending)];
        assert!(transitions(&[], &pending).is_empty());
        let approved = [v("d", ApprovalState::Approved)];
        let got = transitions(&pending, &approved);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].1, "Approved");
        assert!(transitions(&approved, &approved).is_empty());
        let voided = [v("d", ApprovalState::Voided)];
        assert_eq!(transitions(&approved, &voided)[0].1, "ApprovalVoided");
        let rejected = [v("d", ApprovalState::Rejected)];
        let got = transitions(&pending, &rejected);
        assert_eq!(got[0].1, "ApprovalRejected");
        assert!(got[0].2.contains("why"));
    }

    #[test]
    fn the_summary_names_each_directory() {
        let v = |d: &str, state| ApprovalStatus {
            directory: d.into(),
            state,
            ..Default::default()
        };
        assert_eq!(summary(&[]), None);
        assert_eq!(
            summary(&[
                v("a", ApprovalState::Approved),
                v("b", ApprovalState::Pending)
            ])
            .as_deref(),
            Some("a=approved,b=pending")
        );
    }
}
