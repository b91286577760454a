//! `agentcard-operator keys revoke <kid>` and `keys list`: the emergency stop for a signing
//! key that leaked, run with the caller's kubeconfig against the operator's signing Secret.
//!
//! Data flow: the kid → added to the Secret's `agentcard.dev/revoked-keys` annotation (a merge
//! patch: the key entries are not touched, so the revocation survives a restart and is undone
//! only by editing the annotation) → the operator's Secret watch sees it: the key leaves the
//! JWKS at once (no staged rotation), a remaining key signs (named with `--activate` when
//! several remain), every card is signed again, and the Secret gets a `KeyRevoked` Event.

use std::collections::BTreeSet;

use anyhow::{anyhow, Context as _, Result};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::controller::keys::{keys_from_secret, revoked_kids, ANN_ACTIVE_KEY, ANN_REVOKED_KEYS};

/// Arguments of `keys`.
#[derive(Debug, clap::Args)]
pub struct KeysArgs {
    #[command(subcommand)]
    command: KeysCommand,
}

#[derive(Debug, clap::Subcommand)]
enum KeysCommand {
    /// Revoke a signing key at once: it leaves the JWKS without waiting for a stage, signs
    /// nothing more, and every card it signed is signed again with a remaining key.
    Revoke(RevokeArgs),
    /// List the signing Secret's keys: active, signing, revoked.
    List(SecretArgs),
}

#[derive(Debug, clap::Args)]
struct SecretArgs {
    /// The operator's namespace (the signing Secret's).
    #[arg(short, long, default_value = "agentcard-system")]
    namespace: String,
    /// The signing Secret.
    #[arg(long, default_value = "agentcard-signing-keys")]
    secret: String,
}

#[derive(Debug, clap::Args)]
struct RevokeArgs {
    /// The key id to revoke (thumbprint key ids may start with `-`: they are taken as given).
    #[arg(allow_hyphen_values = true)]
    kid: String,
    #[command(flatten)]
    secret: SecretArgs,
    /// The key that signs from now on, when the revoked key was active and several remain.
    #[arg(long)]
    activate: Option<String>,
}

/// Run `keys` with the caller's kubeconfig.
pub fn run(args: KeysArgs) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let client = kube::Client::try_default()
            .await
            .context("connecting with the kubeconfig")?;
        match args.command {
            KeysCommand::Revoke(a) => revoke(client, a).await,
            KeysCommand::List(a) => list(client, a).await,
        }
    })
}

async fn read(client: &kube::Client, args: &SecretArgs) -> Result<(Api<Secret>, Secret)> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &args.namespace);
    let secret = api
        .get(&args.secret)
        .await
        .with_context(|| format!("reading Secret {}/{}", args.namespace, args.secret))?;
    Ok((api, secret))
}

/// The key ids of a signing Secret's entries, revoked ones included.
fn all_kids(secret: &Secret) -> Vec<String> {
    secret
        .data
        .iter()
        .flatten()
        .filter(|(name, _)| {
            name.ends_with(".json") || name.ends_with(".jwk") || name.ends_with(".pem")
        })
        .filter_map(|(_, value)| crate::a2a::SigningKey::from_bytes(&value.0, None, None).ok())
        .map(|k| k.kid().to_string())
        .collect()
}

async fn revoke(client: kube::Client, args: RevokeArgs) -> Result<()> {
    let (api, secret) = read(&client, &args.secret).await?;
    let kids = all_kids(&secret);
    if !kids.contains(&args.kid) {
        return Err(anyhow!(
            "Secret {}/{} holds no key {:?} (keys: {})",
            args.secret.namespace,
            args.secret.secret,
            args.kid,
            kids.join(", ")
        ));
    }
    let mut revoked: BTreeSet<String> = revoked_kids(&secret);
    revoked.insert(args.kid.clone());
    let list: Vec<&str> = revoked.iter().map(String::as_str).collect();
    let mut annotations = serde_json::Map::new();
    annotations.insert(ANN_REVOKED_KEYS.into(), json!(list.join(",")));
    if let Some(next) = &args.activate {
        if revoked.contains(next) || !kids.contains(next) {
            return Err(anyhow!(
                "--activate {next:?}: not a remaining key of the Secret"
            ));
        }
        annotations.insert(ANN_ACTIVE_KEY.into(), json!(next));
    }
    // Checked before it is written: a Secret the operator could not use is refused here.
    let mut after = secret.clone();
    for (k, v) in &annotations {
        after
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(k.clone(), v.as_str().unwrap_or_default().to_string());
    }
    let keys = keys_from_secret(&after).map_err(|e| anyhow!("refused: {e}"))?;
    api.patch(
        &args.secret.secret,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": annotations}})),
    )
    .await
    .with_context(|| {
        format!(
            "annotating Secret {}/{}",
            args.secret.namespace, args.secret.secret
        )
    })?;
    println!(
        "revoked key {}: it leaves the JWKS now; cards are signed again with key {}",
        args.kid,
        keys.active.kid()
    );
    Ok(())
}

async fn list(client: kube::Client, args: SecretArgs) -> Result<()> {
    let (_, secret) = read(&client, &args).await?;
    let revoked = revoked_kids(&secret);
    let active = keys_from_secret(&secret)
        .map(|k| k.active.kid().to_string())
        .ok();
    println!("{:<44} STATE", "KID");
    for kid in all_kids(&secret) {
        let state = if revoked.contains(&kid) {
            "revoked"
        } else if active.as_deref() == Some(kid.as_str()) {
            "active"
        } else {
            "published"
        };
        println!("{kid:<44} {state}");
    }
    Ok(())
}
