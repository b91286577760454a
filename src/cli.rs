//! The command line: offline commands over the A2A core (`render`, `verify`, `keygen`,
//! `jwks`). Each command reads its inputs, calls into [`crate::a2a`], and writes results to
//! stdout and findings to stderr; nothing here decides protocol questions.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};

use crate::a2a::jws::{sign_card, verify_card};
use crate::a2a::publish::{published_bytes, PublishOptions};
use crate::a2a::validate::{lint, validate, LintOptions};
use crate::a2a::{AgentCard, Algorithm, Jwks, Problem, Problems, SigningKey};
use crate::input::read_card;

/// agentcard-operator: validate, sign and publish A2A Agent Cards.
#[derive(Debug, Parser)]
#[command(name = "agentcard-operator", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

// `run`'s arguments are most of the enum's size: it is parsed once per process.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum Command {
    /// Validate and sign a card (AgentCard manifest or bare A2A card), print the signed card.
    Render(RenderArgs),
    /// Verify a signed card's signature against a JWKS: exit 0 if valid, 1 if not.
    Verify(VerifyArgs),
    /// Generate a signing key.
    Keygen(KeygenArgs),
    /// Print the JWKS (public keys) of private key files.
    Jwks(JwksArgs),
    /// Print the CustomResourceDefinitions (what `crds/` holds).
    Crds,
    /// Run the operator: controllers (lease holder only) and the card server (every replica).
    Run(crate::run::RunArgs),
    /// Run the card server alone, over files (`--from-dir`) or the cluster (`--from-cluster`).
    Serve(crate::serve::cmd::ServeArgs),
    /// List a card's published revisions, or print one (`-o yaml`: the AgentCard manifest
    /// that rolls back to it; `--document`: the exact bytes served then).
    Revisions(crate::history::RevisionsArgs),
    /// The operator's signing keys, with the caller's kubeconfig: `keys list`, and `keys
    /// revoke <kid>` to take a leaked key out of the JWKS and every card at once.
    Keys(crate::revoke::KeysArgs),
}

#[derive(Debug, clap::Args)]
struct RenderArgs {
    /// AgentCard manifest (YAML/JSON) or bare A2A card JSON; `-` reads stdin.
    #[arg(required_unless_present = "from_url", conflicts_with = "from_url")]
    file: Option<PathBuf>,
    /// Fetch the card an agent serves (v1.0, or v0.3 converted to v1.0) instead of a file, as
    /// an AgentCard with spec.source imports it; no redirects to another scheme, 1 MiB at most.
    #[arg(long, value_name = "URL")]
    from_url: Option<String>,
    /// Private key file (JWK or PKCS#8 PEM); repeat for one signature per key.
    #[arg(long = "key", required = true)]
    keys: Vec<PathBuf>,
    /// Key id for the signature (with several keys: one --kid per key, in order).
    #[arg(long = "kid")]
    kids: Vec<String>,
    /// Algorithm, overriding the keys' own (e.g. PS256 for an RSA key); must fit every key.
    #[arg(long)]
    alg: Option<String>,
    /// URL of the JWKS written into the protected header (`jku`); defaults to
    /// https://<spec.publish.host>/.well-known/jwks.json for a manifest.
    #[arg(long)]
    jku: Option<String>,
    /// Also write the v0.3 fields (url, preferredTransport, security, ...) for older clients.
    #[arg(long)]
    v03_compat: bool,
    /// Treat the card as served internally: no warnings about cluster-internal URLs.
    #[arg(long)]
    internal: bool,
}

#[derive(Debug, clap::Args)]
struct VerifyArgs {
    /// Signed card: a file, `-` for stdin, or an http(s) URL.
    card: String,
    /// JWKS: a file or an https URL (http only with --allow-http-jwks). With --trust-root,
    /// optional: when given, the key its `kid` names must verify the same signature.
    #[arg(long, required_unless_present = "trust_root")]
    jwks: Option<String>,
    /// Verify by the certificate chain the signatures carry (`x5c`) against these trust roots
    /// (a PEM file of CA certificates): expired, untrusted or mismatched chains are refused.
    #[arg(long)]
    trust_root: Option<PathBuf>,
    /// Accept a JWKS fetched over plain http (anyone on the path could swap the keys).
    #[arg(long)]
    allow_http_jwks: bool,
    /// Seconds each fetch may take, connection included.
    #[arg(long, default_value_t = 10)]
    timeout: u64,
    /// Largest document fetched, in bytes.
    #[arg(long, default_value_t = 1024 * 1024)]
    max_bytes: usize,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum KeyFormat {
    /// Private JWK (JSON).
    Jwk,
    /// PKCS#8 PEM.
    Pem,
    /// A Kubernetes Secret manifest holding the private JWK, for the operator.
    Secret,
}

#[derive(Debug, clap::Args)]
struct KeygenArgs {
    /// ES256 (default), ES384, EdDSA, RS256 or PS256.
    #[arg(long, default_value = "ES256")]
    alg: String,
    /// Key id (default: the RFC 7638 thumbprint).
    #[arg(long)]
    kid: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value = "jwk")]
    format: KeyFormat,
    /// Secret name (with --format secret).
    #[arg(long, default_value = "agentcard-signing-keys")]
    secret_name: String,
    /// Secret namespace (with --format secret).
    #[arg(long)]
    namespace: Option<String>,
}

#[derive(Debug, clap::Args)]
struct JwksArgs {
    /// Private key files (JWK or PKCS#8 PEM).
    #[arg(required = true)]
    keys: Vec<PathBuf>,
}

/// Parse the command line and run the command; the process exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Render(a) => render(a),
        Command::Verify(a) => verify(a),
        Command::Keygen(a) => keygen(a).map(|()| ExitCode::SUCCESS),
        Command::Jwks(a) => jwks(a).map(|()| ExitCode::SUCCESS),
        Command::Serve(a) => crate::serve::cmd::serve(a).map(|()| ExitCode::SUCCESS),
        Command::Run(a) => crate::run::run(a).map(|()| ExitCode::SUCCESS),
        Command::Revisions(a) => crate::history::run(a).map(|()| ExitCode::SUCCESS),
        Command::Keys(a) => crate::revoke::run(a).map(|()| ExitCode::SUCCESS),
        Command::Crds => crate::crd::crds_yaml()
            .map(|y| print!("{y}"))
            .map(|()| ExitCode::SUCCESS)
            .map_err(Into::into),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn read_input(path: &Path) -> Result<String> {
    if path == Path::new("-") {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)?;
        Ok(s)
    } else {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
    }
}

fn load_keys(paths: &[PathBuf], kids: &[String], alg: Option<&str>) -> Result<Vec<SigningKey>> {
    if !kids.is_empty() && kids.len() != paths.len() {
        bail!(
            "give one --kid per --key ({} keys, {} kids)",
            paths.len(),
            kids.len()
        );
    }
    let alg: Option<Algorithm> = alg.map(str::parse).transpose()?;
    paths
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let bytes = std::fs::read(p).with_context(|| format!("reading key {}", p.display()))?;
            let key = SigningKey::from_bytes(&bytes, kids.get(i).map(String::as_str), alg)
                .with_context(|| format!("key {}", p.display()))?;
            Ok(key)
        })
        .collect()
}

fn print_problems(problems: &[Problem], prefix: &str) {
    for p in problems {
        let path = crate::a2a::report::join_path(prefix, &p.path);
        let level = match p.severity {
            crate::a2a::Severity::Error => "error",
            crate::a2a::Severity::Warning => "warning",
        };
        if path.is_empty() {
            eprintln!("{level}: {}", p.message);
        } else {
            eprintln!("{level}: {path}: {}", p.message);
        }
    }
}

fn render(args: RenderArgs) -> Result<ExitCode> {
    let read = match (&args.from_url, &args.file) {
        (Some(url), _) => import_url(url),
        (None, Some(file)) => Ok(read_card(&read_input(file)?)),
        (None, None) => bail!("give a file or --from-url"),
    };
    let input = match read? {
        Ok(input) => input,
        Err(Problems(problems)) => {
            print_problems(&problems, "");
            return Ok(ExitCode::from(1));
        }
    };
    let mut card: AgentCard = input.parsed.card;
    let mut warnings = Vec::new();
    if !card.signatures.is_empty() {
        warnings.push(Problem::warning(
            "signatures",
            "existing signatures are replaced",
        ));
        card.signatures.clear();
    }
    // A complete manifest renders exactly as `run` publishes it: backend interface, JWKS URL
    // under the path prefix, v0.3 fields when the manifest asks for them.
    let mut jku = args.jku.clone();
    let mut v03_compat = args.v03_compat;
    if let Some(m) = &input.manifest {
        card = crate::controller::agentcard::card::effective_card(m);
        jku = jku.or_else(|| {
            Some(format!(
                "{}{}",
                crate::controller::agentcard::card::public_base(m),
                crate::contract::PATH_JWKS
            ))
        });
        v03_compat |= m.spec.publish.v03_compat;
    }
    let errors = validate(&card);
    if !errors.is_empty() {
        print_problems(&errors, input.prefix);
        return Ok(ExitCode::from(1));
    }
    warnings.extend(lint(
        &card,
        LintOptions {
            public: !args.internal,
        },
    ));
    print_problems(&warnings, input.prefix);

    let keys = load_keys(&args.keys, &args.kids, args.alg.as_deref())?;
    let jku = jku.or_else(|| {
        input
            .host
            .map(|h| format!("https://{h}{}", crate::contract::PATH_JWKS))
    });
    let signed = sign_card(&card, &keys, jku.as_deref())?;
    let bytes = published_bytes(&signed, PublishOptions { v03_compat })?;
    let mut out = std::io::stdout().lock();
    out.write_all(&bytes)?;
    out.write_all(b"\n")?;
    Ok(ExitCode::SUCCESS)
}

/// The card served at `url`, read as the operator imports it (v0.3 converted to v1.0, unknown
/// fields dropped and reported as warnings, its own signatures replaced).
fn import_url(url: &str) -> Result<std::result::Result<crate::input::CardInput, Problems>> {
    if !(url.starts_with("https://") || url.starts_with("http://")) {
        bail!("--from-url needs an http(s) URL, got {url:?}");
    }
    let limits = FetchLimits {
        timeout: std::time::Duration::from_secs(10),
        max_bytes: 1024 * 1024,
    };
    let body = fetch(url, &limits)?;
    let value: serde_json::Value =
        serde_json::from_slice(&body).with_context(|| format!("{url}: not JSON"))?;
    Ok(crate::a2a::import::import(&value).map(|imported| {
        if imported.version == crate::a2a::import::CardVersion::V0_3 {
            eprintln!("note: {url} serves a v0.3 card; converted to v1.0");
        }
        print_problems(&imported.notes, "");
        crate::input::CardInput {
            parsed: crate::a2a::parse::Parsed {
                card: imported.card,
                unknown_fields: Vec::new(),
            },
            prefix: "",
            host: None,
            manifest: None,
        }
    }))
}

/// How `verify` fetches URLs.
struct FetchLimits {
    timeout: std::time::Duration,
    max_bytes: usize,
}

/// Read `source` (a file, `-`, or an http(s) URL fetched within `limits`: timeouts, a size
/// limit, at most 5 redirects and none to another scheme).
fn fetch(source: &str, limits: &FetchLimits) -> Result<Vec<u8>> {
    if source.starts_with("https://") || source.starts_with("http://") {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async {
            let policy = reqwest::redirect::Policy::custom(|attempt| {
                let from = attempt.previous().last().map(|u| u.scheme().to_string());
                if attempt.previous().len() > 5 {
                    attempt.error("more than 5 redirects")
                } else if from.as_deref() != Some(attempt.url().scheme()) {
                    let to = attempt.url().to_string();
                    attempt.error(format!("redirect to another scheme ({to}) refused"))
                } else {
                    attempt.follow()
                }
            });
            let client = reqwest::Client::builder()
                .timeout(limits.timeout)
                .connect_timeout(limits.timeout)
                .redirect(policy)
                .build()?;
            let mut resp = client
                .get(source)
                .send()
                .await
                .with_context(|| format!("fetching {source}"))?;
            let status = resp.status();
            if !status.is_success() {
                return Err(anyhow!("fetching {source}: HTTP {status}"));
            }
            let too_large = || anyhow!("fetching {source}: larger than {} bytes", limits.max_bytes);
            if resp
                .content_length()
                .is_some_and(|n| n > limits.max_bytes as u64)
            {
                return Err(too_large());
            }
            let mut body = Vec::new();
            while let Some(chunk) = resp
                .chunk()
                .await
                .with_context(|| format!("reading {source}"))?
            {
                body.extend_from_slice(&chunk);
                if body.len() > limits.max_bytes {
                    return Err(too_large());
                }
            }
            Ok(body)
        })
    } else if source == "-" {
        Ok(read_input(Path::new("-"))?.into_bytes())
    } else {
        std::fs::read(source).with_context(|| format!("reading {source}"))
    }
}

fn verify(args: VerifyArgs) -> Result<ExitCode> {
    let outcome = (|| -> Result<String> {
        if let Some(url) = args.jwks.as_deref().filter(|j| j.starts_with("http://")) {
            if !args.allow_http_jwks {
                return Err(anyhow!(
                    "the JWKS URL {url} is plain http: anyone on the path could swap the keys (use https, or --allow-http-jwks)"
                ));
            }
        }
        let limits = FetchLimits {
            timeout: std::time::Duration::from_secs(args.timeout.max(1)),
            max_bytes: args.max_bytes,
        };
        let jwks = match &args.jwks {
            Some(source) => Some(Jwks::from_slice(&fetch(source, &limits)?)?),
            None => None,
        };
        let card = AgentCard::from_json_lenient(&fetch(&args.card, &limits)?)
            .map_err(|p| anyhow!("not an Agent Card: {p}"))?;
        if let Some(path) = &args.trust_root {
            let pem = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            let roots = crate::a2a::x5c::certificates(&pem)
                .with_context(|| format!("--trust-root {}", path.display()))?;
            let v = crate::a2a::x5c::verify_card_with_roots(&card, &roots, jwks.as_ref())?;
            return Ok(format!(
                "valid: signatures[{}] (key {:?}) verifies by its certificate chain to {}: {}",
                v.index,
                v.kid,
                path.display(),
                v.subject
            ));
        }
        let jwks = jwks.ok_or_else(|| anyhow!("--jwks or --trust-root is required"))?;
        let v = verify_card(&card, &jwks)?;
        Ok(format!(
            "valid: signatures[{}] verifies with key {:?} ({})",
            v.index, v.kid, v.alg
        ))
    })();
    match outcome {
        Ok(msg) => {
            println!("{msg}");
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            println!("invalid: {e:#}");
            Ok(ExitCode::from(1))
        }
    }
}

fn keygen(args: KeygenArgs) -> Result<()> {
    let alg: Algorithm = args.alg.parse()?;
    let key = SigningKey::generate(alg, args.kid.as_deref())?;
    match args.format {
        KeyFormat::Jwk => println!("{}", key.private_jwk_json()?),
        KeyFormat::Pem => print!("{}", key.private_pem()?),
        KeyFormat::Secret => {
            let secret = crate::controller::keys::secret_for(
                &key,
                &args.secret_name,
                args.namespace.as_deref(),
            )?;
            let mut value = serde_json::to_value(&secret)?;
            value["apiVersion"] = "v1".into();
            value["kind"] = "Secret".into();
            print!("{}", crate::yaml::to_string(&value)?);
        }
    }
    Ok(())
}

fn jwks(args: JwksArgs) -> Result<()> {
    let keys = load_keys(&args.keys, &[], None)?;
    println!(
        "{}",
        serde_json::to_string_pretty(&Jwks::from_signing_keys(&keys).to_value())?
    );
    Ok(())
}
