//! `agentcard-operator revisions`: a card's published revisions, as the lease holder keeps
//! them (ControllerRevisions owned by the card; see
//! [`crate::controller::agentcard::revisions`]), read with the caller's kubeconfig.
//!
//! Data flow: the card (for its uid and current revision) → its revisions by the uid label →
//! a table, the list as YAML/JSON, one revision's AgentCard manifest (`-o yaml`: applying it
//! rolls the card back to that revision's spec), or the exact bytes served then
//! (`--document`, signatures included).

use anyhow::{anyhow, Context as _, Result};
use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::api::{Api, ListParams};
use kube::ResourceExt;
use serde_json::{json, Value};

use crate::crd::revision::{RevisionData, LABEL_CARD_UID};
use crate::crd::AgentCard;

/// How `revisions` prints.
#[derive(Debug, Clone, Copy, clap::ValueEnum, PartialEq, Eq)]
pub enum Output {
    /// A table (default).
    Table,
    /// YAML: the list, or with a revision number the AgentCard manifest of that revision.
    Yaml,
    /// JSON, as `yaml`.
    Json,
}

/// Arguments of `revisions`.
#[derive(Debug, clap::Args)]
pub struct RevisionsArgs {
    /// The card, as NAMESPACE/NAME.
    card: String,
    /// One revision (its number), instead of the list.
    revision: Option<i64>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    output: Output,
    /// With a revision: print the exact bytes served then (signatures included).
    #[arg(long, requires = "revision")]
    document: bool,
}

/// One revision as the command shows it.
struct Row {
    number: i64,
    data: RevisionData,
    created: Option<String>,
}

/// Run `revisions` with the caller's kubeconfig.
pub fn run(args: RevisionsArgs) -> Result<()> {
    let (ns, name) = args
        .card
        .split_once('/')
        .filter(|(n, m)| !n.is_empty() && !m.is_empty())
        .ok_or_else(|| anyhow!("card: expected NAMESPACE/NAME, got {:?}", args.card))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (card, rows) = rt.block_on(read(ns, name))?;
    print!("{}", render(&args, &card, &rows)?);
    Ok(())
}

async fn read(ns: &str, name: &str) -> Result<(AgentCard, Vec<Row>)> {
    let client = kube::Client::try_default()
        .await
        .context("connecting with the kubeconfig")?;
    let card = Api::<AgentCard>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .with_context(|| format!("reading AgentCard {ns}/{name}"))?;
    let uid = card.uid().unwrap_or_default();
    let revs = Api::<ControllerRevision>::namespaced(client, ns)
        .list(&ListParams::default().labels(&format!("{LABEL_CARD_UID}={uid}")))
        .await
        .with_context(|| format!("listing the revisions of {ns}/{name}"))?;
    let mut rows: Vec<Row> = revs
        .items
        .iter()
        .filter_map(|r| {
            Some(Row {
                number: r.revision,
                data: RevisionData::of(r)?,
                created: r
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map(|t| t.0.to_string()),
            })
        })
        .collect();
    rows.sort_by_key(|r| r.number);
    Ok((card, rows))
}

/// What the command prints for `args` of `card` with `rows` (pure).
fn render(args: &RevisionsArgs, card: &AgentCard, rows: &[Row]) -> Result<String> {
    let current = card.status.as_ref().and_then(|s| s.revision);
    if let Some(n) = args.revision {
        let row = rows.iter().find(|r| r.number == n).ok_or_else(|| {
            anyhow!(
                "{} has no revision {n} (kept: {})",
                args.card,
                numbers(rows)
            )
        })?;
        if args.document {
            return Ok(row.data.document.clone());
        }
        let manifest = json!({
            "apiVersion": "agentcard.dev/v1alpha1",
            "kind": "AgentCard",
            "metadata": {
                "name": card.name_any(),
                "namespace": card.namespace(),
                "annotations": {"agentcard.dev/from-revision": n.to_string()},
            },
            "spec": row.data.spec,
        });
        return match args.output {
            Output::Json => Ok(serde_json::to_string_pretty(&manifest)? + "\n"),
            _ => Ok(crate::yaml::to_string(&manifest)?),
        };
    }
    let list: Vec<Value> = rows
        .iter()
        .map(|r| {
            json!({
                "revision": r.number,
                "contentHash": r.data.content_hash,
                "publishedAt": r.data.published_at,
                "findings": r.data.findings,
                "current": Some(r.number) == current,
            })
        })
        .collect();
    match args.output {
        Output::Json => Ok(serde_json::to_string_pretty(&list)? + "\n"),
        Output::Yaml => Ok(crate::yaml::to_string(&list)?),
        Output::Table => {
            let mut out = format!(
                "{:<9} {:<33} {:<21} {:<8} {}\n",
                "REVISION", "CONTENT HASH", "PUBLISHED", "CURRENT", "BREAKING CHANGES"
            );
            for r in rows {
                out.push_str(&format!(
                    "{:<9} {:<33} {:<21} {:<8} {}\n",
                    r.number,
                    r.data.content_hash,
                    r.created.as_deref().unwrap_or(&r.data.published_at),
                    if Some(r.number) == current { "*" } else { "" },
                    if r.data.findings.is_empty() {
                        "-".to_string()
                    } else {
                        r.data.findings.join("; ")
                    }
                ));
            }
            Ok(out)
        }
    }
}

fn numbers(rows: &[Row]) -> String {
    rows.iter()
        .map(|r| r.number.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card() -> AgentCard {
        serde_json::from_value(json!({
            "apiVersion": "agentcard.dev/v1alpha1", "kind": "AgentCard",
            "metadata": {"name": "w", "namespace": "ns"},
            "spec": {"publish": {"host": "w.example"}},
            "status": {"revision": 2}
        }))
        .unwrap()
    }

    fn row(n: i64, host: &str) -> Row {
        Row {
            number: n,
            data: serde_json::from_value(json!({
                "contentHash": format!("h{n}"), "publishedAt": "2026-01-01T00:00:00Z",
                "document": format!("{{\"n\":{n}}}"), "spec": {"publish": {"host": host}},
                "findings": if n == 2 { json!(["skill s removed"]) } else { json!([]) }
            }))
            .unwrap(),
            created: None,
        }
    }

    fn args(revision: Option<i64>, output: Output, document: bool) -> RevisionsArgs {
        RevisionsArgs {
            card: "ns/w".into(),
            revision,
            output,
            document,
        }
    }

    #[test]
    fn a_revision_prints_as_the_manifest_that_rolls_back_to_it() {
        let rows = [row(1, "old.example"), row(2, "w.example")];
        let yaml = render(&args(Some(1), Output::Yaml, false), &card(), &rows).unwrap();
        let m: Value = crate::yaml::from_str(&yaml).unwrap();
        assert_eq!(m["kind"], "AgentCard");
        assert_eq!(m["metadata"]["namespace"], "ns");
        assert_eq!(m["spec"]["publish"]["host"], "old.example");
        let doc = render(&args(Some(2), Output::Table, true), &card(), &rows).unwrap();
        assert_eq!(doc, "{\"n\":2}");
        let table = render(&args(None, Output::Table, false), &card(), &rows).unwrap();
        assert!(
            table.lines().nth(2).unwrap().contains("skill s removed"),
            "{table}"
        );
        assert!(render(&args(Some(9), Output::Yaml, false), &card(), &rows).is_err());
    }
}
