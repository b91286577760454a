//! Validation (errors that stop publication) and lints (warnings) of a typed card.
//!
//! Validation walks the card once and reports every problem with its JSON path, so a user
//! sees all of them in one pass. An error needs a basis in the A2A v1.0 text or proto
//! (`specification/a2a.proto`): a `REQUIRED` field missing or empty (the SDKs drop empty values
//! from the canonical form, so an empty REQUIRED value is a missing one), a value the proto
//! text constrains ("Valid values are …", "Must be a valid absolute HTTPS URL", "unique
//! identifier", a `oneof`), a security requirement naming an undeclared scheme (OpenAPI 3.2,
//! which the proto's schemes follow), or a card too large for a ConfigMap. Everything the
//! protocol allows but that looks wrong (an empty example, a mode that is not a media type, a
//! custom binding that is not a URI) is a warning: cards imported from running agents must
//! never be refused for what the protocol and the SDKs accept.
//!
//! Lints flag what is legal but probably a mistake in a card published to the world: cluster-
//! internal addresses, strings that look like credentials, requirements the signature does not
//! protect, and the validator's own warnings.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;
use url::Url;

use super::canonical::to_value;
use super::card::*;
use super::report::{PathBuf, Problem, Severity};

/// The largest signed card we publish, in bytes. A ConfigMap holds 1 MiB; the rest is left
/// for signatures added later, annotations and other metadata.
pub const MAX_CARD_BYTES: usize = 768 * 1024;

/// The bindings the protocol names; any other binding must be a URI.
pub const KNOWN_BINDINGS: [&str; 3] = ["JSONRPC", "GRPC", "HTTP+JSON"];

/// Every error in `card`; empty when it can be published.
pub fn validate(card: &AgentCard) -> Vec<Problem> {
    findings(card)
        .into_iter()
        .filter(|p| p.severity == Severity::Error)
        .collect()
}

/// Every finding of the validator, errors and warnings, in card order.
fn findings(card: &AgentCard) -> Vec<Problem> {
    let mut v = Validator::default();
    v.card(card);
    v.out
}

/// Lint context: what we know about where the card will be published.
#[derive(Clone, Copy, Debug, Default)]
pub struct LintOptions {
    /// The card is served to the public internet (cluster-internal URLs are then suspicious).
    pub public: bool,
}

/// Warnings about `card`: legal, but probably not what the author meant.
pub fn lint(card: &AgentCard, opts: LintOptions) -> Vec<Problem> {
    let mut out: Vec<Problem> = findings(card)
        .into_iter()
        .filter(|p| p.severity == Severity::Warning)
        .collect();
    let root = PathBuf::default();
    if opts.public {
        for (i, iface) in card.supported_interfaces.iter().enumerate() {
            if let Some(why) = internal_address(&iface.url) {
                out.push(Problem::warning(
                    root.field("supportedInterfaces")
                        .index(i)
                        .field("url")
                        .as_str(),
                    format!("{why}: clients outside the cluster cannot reach it"),
                ));
            }
        }
    }
    lint_secrets(&to_value(card), &root, &mut out);
    lint_prompt(&card.description, &root.field("description"), &mut out);
    for (i, skill) in card.skills.iter().enumerate() {
        let p = root.field("skills").index(i).field("description");
        lint_prompt(&skill.description, &p, &mut out);
    }
    lint_requirements(
        &card.security_requirements,
        &root.field("securityRequirements"),
        &mut out,
    );
    for (i, skill) in card.skills.iter().enumerate() {
        let p = root.field("skills").index(i).field("securityRequirements");
        lint_requirements(&skill.security_requirements, &p, &mut out);
    }
    out
}

fn lint_requirements(reqs: &[SecurityRequirement], path: &PathBuf, out: &mut Vec<Problem>) {
    for (i, req) in reqs.iter().enumerate() {
        for (name, scopes) in &req.schemes {
            if scopes.list.is_empty() {
                out.push(Problem::warning(
                    path.index(i).field("schemes").field(name).as_str(),
                    "no scopes: the official SDKs drop scope-less requirements from the signed \
                     form, so signatures do not protect this requirement",
                ));
            }
        }
    }
}

/// Whether `url` points inside a cluster, a private network or the local machine (or at a bare
/// name without a domain, as agents inside a cluster often name themselves): clients outside
/// cannot reach it.
pub fn is_internal_url(url: &str) -> bool {
    let bare = Url::parse(url)
        .ok()
        .and_then(|u| u.host_str().map(|h| !h.contains('.') && !h.contains(':')))
        .unwrap_or(false);
    bare || internal_address(url).is_some()
}

/// Why `url` points inside a cluster or a private network, if it does.
fn internal_address(url: &str) -> Option<String> {
    let host = match Url::parse(url) {
        Ok(u) if u.host_str().is_some() => u.host_str().unwrap_or_default().to_string(),
        // gRPC `host:port`
        _ => url
            .rsplit_once(':')
            .map(|(h, _)| h)
            .unwrap_or(url)
            .to_string(),
    };
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    if host == "localhost" || host.ends_with(".localhost") {
        return Some(format!("{host} is the local machine"));
    }
    if host.ends_with(".svc") || host.ends_with(".cluster.local") || host.contains(".svc.") {
        return Some(format!("{host} is a cluster-internal service name"));
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        let internal = match ip {
            IpAddr::V4(v4) => {
                v4.is_private() || v4.is_loopback() || v4.is_link_local() || v4.is_unspecified()
            }
            IpAddr::V6(v6) => {
                v6.is_loopback()
                    || v6.is_unspecified()
                    || v6.is_unique_local()
                    || v6.is_unicast_link_local()
            }
        };
        if internal {
            return Some(format!(
                "{host} is a private, loopback or unspecified address"
            ));
        }
    }
    None
}

static SECRET_PATTERNS: LazyLock<Vec<(&'static str, Regex)>> = LazyLock::new(|| {
    [
        ("a PEM private key", r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
        (
            "a JSON Web Token",
            r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*",
        ),
        ("a bearer token", r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{20,}"),
        ("an AWS access key id", r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"),
        ("a Google API key", r"\bAIza[0-9A-Za-z_-]{35}\b"),
        (
            "a GitHub token",
            r"\b(ghp|gho|ghu|ghs|ghr|github_pat)_[A-Za-z0-9_]{30,}",
        ),
        ("a Slack token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
        ("an API secret key", r"\bsk-[A-Za-z0-9_-]{20,}"),
    ]
    .into_iter()
    .filter_map(|(what, re)| Regex::new(re).ok().map(|r| (what, r)))
    .collect()
});

/// Openings of a text written to a model rather than about an agent.
const PROMPT_OPENINGS: [&str; 6] = [
    "you are ",
    "you're ",
    "your role ",
    "your task ",
    "act as ",
    "as an ai",
];
/// Phrases of a prompt's rules, wherever they stand.
const PROMPT_PHRASES: [&str; 8] = [
    "ignore previous",
    "ignore all previous",
    "system prompt",
    "never reveal",
    "do not reveal",
    "don't reveal",
    "you must ",
    "you should ",
];
/// Openings of a sentence that orders rather than describes.
const IMPERATIVES: [&str; 5] = ["always ", "never ", "do not ", "don't ", "make sure "];

/// Warn on a description that reads like instructions to a model: agents built on an LLM
/// framework (kagent among them) may put the system prompt where the card's description goes,
/// and a card is public. Flagged: a prompt's opening or its rules' phrases, or a long text
/// (over 500 characters) of which three sentences or more open with an order.
fn lint_prompt(text: &str, path: &PathBuf, out: &mut Vec<Problem>) {
    let lower = text.to_lowercase();
    let opening = PROMPT_OPENINGS
        .iter()
        .find(|o| lower.trim_start().starts_with(*o));
    let phrase = PROMPT_PHRASES.iter().find(|p| lower.contains(*p));
    let orders = lower
        .split(['.', '!', '\n', ';'])
        .filter(|s| IMPERATIVES.iter().any(|i| s.trim_start().starts_with(i)))
        .count();
    let why = match (opening, phrase) {
        (Some(o), _) => format!("it opens with {:?}", o.trim_end()),
        (None, Some(p)) => format!("it says {:?}", p.trim_end()),
        (None, None) if text.chars().count() > 500 && orders >= 3 => {
            format!("{orders} of its sentences give orders")
        }
        _ => return,
    };
    out.push(Problem::warning(
        path.as_str(),
        format!(
            "reads like instructions to a model ({why}): a card is public; say what the agent \
             does for its callers, not how it is prompted"
        ),
    ));
}

fn lint_secrets(value: &Value, path: &PathBuf, out: &mut Vec<Problem>) {
    match value {
        Value::String(s) => {
            if let Some((what, _)) = SECRET_PATTERNS.iter().find(|(_, re)| re.is_match(s)) {
                out.push(Problem::warning(
                    path.as_str(),
                    format!(
                        "looks like {what}: cards are public and must not carry static secrets"
                    ),
                ));
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                lint_secrets(v, &path.index(i), out);
            }
        }
        Value::Object(map) => {
            for (k, v) in map {
                lint_secrets(v, &path.field(k), out);
            }
        }
        _ => {}
    }
}

#[derive(Default)]
struct Validator {
    out: Vec<Problem>,
}

impl Validator {
    fn err(&mut self, path: &PathBuf, message: impl Into<String>) {
        self.out.push(Problem::error(path.as_str(), message));
    }

    fn warn(&mut self, path: &PathBuf, message: impl Into<String>) {
        self.out.push(Problem::warning(path.as_str(), message));
    }

    /// A REQUIRED string: empty is an error; blank (only white space) is allowed by the proto
    /// but shows as nothing, so it is a warning.
    fn required(&mut self, path: &PathBuf, value: &str) -> bool {
        if value.is_empty() {
            self.err(path, "required");
            false
        } else {
            if value.trim().is_empty() {
                self.warn(path, "blank: only white space");
            }
            true
        }
    }

    fn required_list<T>(&mut self, path: &PathBuf, items: &[T]) {
        if items.is_empty() {
            self.err(path, "required: at least one entry");
        }
    }

    /// Entries of a list of strings: the proto allows empty ones (the SDKs drop them from
    /// the signed form), so they are warnings.
    fn strings(&mut self, path: &PathBuf, items: &[String]) {
        for (i, s) in items.iter().enumerate() {
            if s.trim().is_empty() {
                self.warn(&path.index(i), "empty: clients show nothing here");
            }
        }
    }

    fn card(&mut self, card: &AgentCard) {
        let root = PathBuf::default();
        self.required(&root.field("name"), &card.name);
        self.required(&root.field("description"), &card.description);
        self.required(&root.field("version"), &card.version);

        let p = root.field("supportedInterfaces");
        self.required_list(&p, &card.supported_interfaces);
        for (i, iface) in card.supported_interfaces.iter().enumerate() {
            self.interface(&p.index(i), iface);
        }
        if let Some(provider) = &card.provider {
            let p = root.field("provider");
            self.required(&p.field("organization"), &provider.organization);
            if self.required(&p.field("url"), &provider.url) {
                self.web_url(&p.field("url"), &provider.url);
            }
        }
        for (name, url) in [
            ("documentationUrl", &card.documentation_url),
            ("iconUrl", &card.icon_url),
        ] {
            if let Some(url) = url.as_deref().filter(|u| !u.is_empty()) {
                self.web_url(&root.field(name), url);
            }
        }
        self.capabilities(&root.field("capabilities"), &card.capabilities);

        let p = root.field("securitySchemes");
        for (name, scheme) in &card.security_schemes {
            self.scheme(&p.field(name), scheme);
        }
        self.requirements(
            &root.field("securityRequirements"),
            &card.security_requirements,
            &card.security_schemes,
        );

        for (field, modes) in [
            ("defaultInputModes", &card.default_input_modes),
            ("defaultOutputModes", &card.default_output_modes),
        ] {
            self.required_list(&root.field(field), modes);
            self.media_types(&root.field(field), modes);
        }

        let p = root.field("skills");
        self.required_list(&p, &card.skills);
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (i, skill) in card.skills.iter().enumerate() {
            let sp = p.index(i);
            self.skill(&sp, skill, &card.security_schemes);
            if !skill.id.trim().is_empty() {
                if let Some(first) = seen.insert(&skill.id, i) {
                    self.err(
                        &sp.field("id"),
                        format!("duplicate of skills[{first}].id ({:?})", skill.id),
                    );
                    seen.insert(&skill.id, first);
                }
            }
        }
        let size = serde_json::to_vec(card).map(|b| b.len()).unwrap_or(0);
        if size > MAX_CARD_BYTES {
            self.err(
                &root,
                format!("the card is {size} bytes; at most {MAX_CARD_BYTES} fit in a ConfigMap with its metadata"),
            );
        }
    }

    fn interface(&mut self, p: &PathBuf, iface: &AgentInterface) {
        let binding_ok = self.required(&p.field("protocolBinding"), &iface.protocol_binding);
        if binding_ok && !KNOWN_BINDINGS.contains(&iface.protocol_binding.as_str()) {
            let is_uri = Url::parse(&iface.protocol_binding).is_ok();
            if !is_uri {
                self.warn(
                    &p.field("protocolBinding"),
                    format!(
                        "{:?} is not a core binding (JSONRPC, GRPC, HTTP+JSON); a custom binding is best named by a URI",
                        iface.protocol_binding
                    ),
                );
            }
        }
        if self.required(&p.field("protocolVersion"), &iface.protocol_version) {
            let v = &iface.protocol_version;
            let ok = v.split('.').count() >= 2
                && v.split('.')
                    .all(|part| !part.is_empty() && part.chars().all(|c| c.is_ascii_digit()));
            if !ok {
                self.warn(
                    &p.field("protocolVersion"),
                    format!("{v:?} is not a protocol version like \"1.0\""),
                );
            }
        }
        if !self.required(&p.field("url"), &iface.url) {
            return;
        }
        // gRPC targets are `host:port`; the spec's own sample also gives gRPC an https URL,
        // which gRPC clients accept, so both forms pass. Custom bindings may use either too.
        let http_only = iface.protocol_binding != "GRPC"
            && KNOWN_BINDINGS.contains(&iface.protocol_binding.as_str());
        if http_only || iface.url.contains("://") {
            self.endpoint_url(&p.field("url"), &iface.url);
        } else {
            self.host_port(&p.field("url"), &iface.url);
        }
    }

    /// An endpoint URL: absolute https, or plain http on the local machine only.
    fn endpoint_url(&mut self, p: &PathBuf, url: &str) {
        match Url::parse(url) {
            Ok(u) if u.scheme() == "https" && u.host_str().is_some() => {}
            Ok(u) if u.scheme() == "http" && is_local_host(u.host_str().unwrap_or_default()) => {}
            Ok(u) if u.scheme() == "http" => self.err(
                p,
                format!("{url:?} must use https (plain http is allowed for localhost only)"),
            ),
            Ok(u) => self.err(p, format!("{url:?}: scheme {:?} is not https", u.scheme())),
            Err(e) => self.err(p, format!("{url:?} is not an absolute URL ({e})")),
        }
    }

    /// A link for humans or clients (provider, docs, icon, OAuth endpoints): absolute http(s).
    fn web_url(&mut self, p: &PathBuf, url: &str) {
        match Url::parse(url) {
            Ok(u) if matches!(u.scheme(), "https" | "http") && u.host_str().is_some() => {}
            Ok(_) => self.err(p, format!("{url:?} must be an absolute http(s) URL")),
            Err(e) => self.err(p, format!("{url:?} is not an absolute URL ({e})")),
        }
    }

    fn host_port(&mut self, p: &PathBuf, url: &str) {
        let ok = match url.rsplit_once(':') {
            Some((host, port)) => {
                let host = host.trim_start_matches('[').trim_end_matches(']');
                !host.is_empty() && !host.contains('/') && port.parse::<u16>().is_ok_and(|p| p > 0)
            }
            None => false,
        };
        if !ok {
            self.err(p, format!("{url:?} must be host:port for gRPC"));
        }
    }

    fn capabilities(&mut self, p: &PathBuf, caps: &AgentCapabilities) {
        let p = p.field("extensions");
        let mut seen = HashMap::new();
        for (i, ext) in caps.extensions.iter().enumerate() {
            let ep = p.index(i);
            // `uri` is not REQUIRED in the proto; "the unique URI identifying the extension"
            // makes a malformed one an error, a missing or repeated one a warning.
            if ext.uri.is_empty() {
                self.warn(
                    &ep.field("uri"),
                    "empty: clients cannot tell which extension this is",
                );
                continue;
            }
            if Url::parse(&ext.uri).is_err() {
                self.err(&ep.field("uri"), format!("{:?} is not a URI", ext.uri));
            }
            if let Some(first) = seen.insert(ext.uri.as_str(), i) {
                self.warn(
                    &ep.field("uri"),
                    format!("duplicate of extensions[{first}].uri"),
                );
            }
        }
    }

    fn skill(
        &mut self,
        p: &PathBuf,
        skill: &AgentSkill,
        schemes: &BTreeMap<String, SecurityScheme>,
    ) {
        self.required(&p.field("id"), &skill.id);
        self.required(&p.field("name"), &skill.name);
        self.required(&p.field("description"), &skill.description);
        self.required_list(&p.field("tags"), &skill.tags);
        self.strings(&p.field("tags"), &skill.tags);
        self.strings(&p.field("examples"), &skill.examples);
        self.media_types(&p.field("inputModes"), &skill.input_modes);
        self.media_types(&p.field("outputModes"), &skill.output_modes);
        self.requirements(
            &p.field("securityRequirements"),
            &skill.security_requirements,
            schemes,
        );
    }

    fn media_types(&mut self, p: &PathBuf, modes: &[String]) {
        for (i, m) in modes.iter().enumerate() {
            if m.trim().is_empty() {
                self.warn(&p.index(i), "empty: clients show nothing here");
            } else if !is_media_type(m) {
                self.warn(
                    &p.index(i),
                    format!("{m:?} is not a media type like \"text/plain\""),
                );
            }
        }
    }

    fn requirements(
        &mut self,
        p: &PathBuf,
        reqs: &[SecurityRequirement],
        schemes: &BTreeMap<String, SecurityScheme>,
    ) {
        for (i, req) in reqs.iter().enumerate() {
            let rp = p.index(i).field("schemes");
            if req.schemes.is_empty() {
                self.warn(
                    &rp,
                    "empty: a requirement naming no scheme asks for nothing",
                );
            }
            for (name, scopes) in &req.schemes {
                if !schemes.contains_key(name) {
                    self.err(&rp.field(name), "not declared in securitySchemes");
                }
                self.strings(&rp.field(name).field("list"), &scopes.list);
            }
        }
    }

    fn scheme(&mut self, p: &PathBuf, s: &SecurityScheme) {
        let set = [
            s.api_key_security_scheme.is_some(),
            s.http_auth_security_scheme.is_some(),
            s.oauth2_security_scheme.is_some(),
            s.open_id_connect_security_scheme.is_some(),
            s.mtls_security_scheme.is_some(),
        ]
        .into_iter()
        .filter(|b| *b)
        .count();
        let message = format!(
            "exactly one of apiKeySecurityScheme, httpAuthSecurityScheme, oauth2SecurityScheme, \
             openIdConnectSecurityScheme, mtlsSecurityScheme must be set (found {set})"
        );
        match set {
            1 => {}
            // An empty oneof is a valid message, though it says nothing.
            0 => self.warn(p, message),
            _ => self.err(p, message),
        }
        if let Some(k) = &s.api_key_security_scheme {
            let kp = p.field("apiKeySecurityScheme");
            if self.required(&kp.field("location"), &k.location)
                && !matches!(k.location.as_str(), "header" | "query" | "cookie")
            {
                self.err(
                    &kp.field("location"),
                    format!("{:?} must be header, query or cookie", k.location),
                );
            }
            self.required(&kp.field("name"), &k.name);
        }
        if let Some(h) = &s.http_auth_security_scheme {
            self.required(
                &p.field("httpAuthSecurityScheme").field("scheme"),
                &h.scheme,
            );
        }
        if let Some(o) = &s.open_id_connect_security_scheme {
            let f = p
                .field("openIdConnectSecurityScheme")
                .field("openIdConnectUrl");
            if self.required(&f, &o.open_id_connect_url) {
                self.web_url(&f, &o.open_id_connect_url);
            }
        }
        if let Some(o) = &s.oauth2_security_scheme {
            let op = p.field("oauth2SecurityScheme");
            if !o.oauth2_metadata_url.is_empty() {
                self.web_url(&op.field("oauth2MetadataUrl"), &o.oauth2_metadata_url);
            }
            self.flows(&op.field("flows"), &o.flows);
        }
    }

    fn flows(&mut self, p: &PathBuf, f: &OAuthFlows) {
        let mut set = 0;
        if let Some(x) = &f.authorization_code {
            set += 1;
            let fp = p.field("authorizationCode");
            self.flow_url(&fp, "authorizationUrl", &x.authorization_url, true);
            self.flow_url(&fp, "tokenUrl", &x.token_url, true);
            self.flow_url(&fp, "refreshUrl", &x.refresh_url, false);
            self.required_scopes(&fp, &x.scopes);
        }
        if let Some(x) = &f.client_credentials {
            set += 1;
            let fp = p.field("clientCredentials");
            self.flow_url(&fp, "tokenUrl", &x.token_url, true);
            self.flow_url(&fp, "refreshUrl", &x.refresh_url, false);
            self.required_scopes(&fp, &x.scopes);
        }
        if let Some(x) = &f.implicit {
            set += 1;
            let fp = p.field("implicit");
            self.flow_url(&fp, "authorizationUrl", &x.authorization_url, false);
            self.flow_url(&fp, "refreshUrl", &x.refresh_url, false);
        }
        if let Some(x) = &f.password {
            set += 1;
            let fp = p.field("password");
            self.flow_url(&fp, "tokenUrl", &x.token_url, false);
            self.flow_url(&fp, "refreshUrl", &x.refresh_url, false);
        }
        if let Some(x) = &f.device_code {
            set += 1;
            let fp = p.field("deviceCode");
            self.flow_url(
                &fp,
                "deviceAuthorizationUrl",
                &x.device_authorization_url,
                true,
            );
            self.flow_url(&fp, "tokenUrl", &x.token_url, true);
            self.flow_url(&fp, "refreshUrl", &x.refresh_url, false);
            self.required_scopes(&fp, &x.scopes);
        }
        if set != 1 {
            self.err(
                p,
                format!(
                    "exactly one of authorizationCode, clientCredentials, deviceCode, implicit, password \
                     must be set (found {set})"
                ),
            );
        }
    }

    /// `scopes` is REQUIRED in the authorization-code, client-credentials and device-code
    /// flows (the implicit and password flows say "The map MAY be empty").
    fn required_scopes(&mut self, p: &PathBuf, scopes: &BTreeMap<String, String>) {
        if scopes.is_empty() {
            self.err(&p.field("scopes"), "required: at least one scope");
        }
    }

    fn flow_url(&mut self, p: &PathBuf, name: &str, url: &str, required: bool) {
        let f = p.field(name);
        if url.is_empty() {
            if required {
                self.err(&f, "required");
            }
            return;
        }
        self.web_url(&f, url);
    }
}

fn is_local_host(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost"
        || host.ends_with(".localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// RFC 6838 `type/subtype` with optional `; name=value` parameters.
fn is_media_type(m: &str) -> bool {
    fn token(s: &str) -> bool {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "!#$&-^_.+*".contains(c))
    }
    let mut parts = m.split(';');
    let essence = parts.next().unwrap_or_default().trim();
    let ok = match essence.split_once('/') {
        Some((t, s)) => token(t) && token(s),
        None => false,
    };
    ok && parts.all(|param| {
        param
            .split_once('=')
            .is_some_and(|(k, v)| token(k.trim()) && !v.trim().is_empty())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minimal() -> AgentCard {
        serde_json::from_value(serde_json::json!({
            "name": "A", "description": "D", "version": "1",
            "supportedInterfaces": [{"url": "https://a.example.com/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
            "capabilities": {}, "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
            "skills": [{"id": "s", "name": "S", "description": "d", "tags": ["t"]}]
        }))
        .unwrap()
    }

    fn paths(card: &AgentCard) -> Vec<String> {
        validate(card).into_iter().map(|p| p.to_string()).collect()
    }

    #[test]
    fn minimal_card_is_valid() {
        assert_eq!(paths(&minimal()), Vec::<String>::new());
    }

    #[test]
    fn missing_required_fields_are_named() {
        let mut c = minimal();
        c.name.clear();
        c.skills.push(AgentSkill {
            name: "x".into(),
            ..Default::default()
        });
        c.default_output_modes.clear();
        let p = paths(&c);
        assert!(p.contains(&"name: required".to_string()), "{p:?}");
        assert!(p.contains(&"skills[1].id: required".to_string()), "{p:?}");
        assert!(
            p.contains(&"skills[1].description: required".to_string()),
            "{p:?}"
        );
        assert!(
            p.contains(&"skills[1].tags: required: at least one entry".to_string()),
            "{p:?}"
        );
        assert!(
            p.contains(&"defaultOutputModes: required: at least one entry".to_string()),
            "{p:?}"
        );
    }

    #[test]
    fn duplicate_skill_ids_are_errors() {
        let mut c = minimal();
        c.skills.push(c.skills[0].clone());
        assert!(paths(&c)
            .iter()
            .any(|p| p.starts_with("skills[1].id: duplicate of skills[0].id")));
    }

    #[test]
    fn urls_must_be_https_except_localhost_and_grpc_is_host_port() {
        let mut c = minimal();
        c.supported_interfaces[0].url = "http://a.example.com/a2a".into();
        let grpc = AgentInterface {
            url: "g.example.com".into(),
            protocol_binding: "GRPC".into(),
            protocol_version: "1.0".into(),
            tenant: String::new(),
        };
        c.supported_interfaces.push(grpc);
        let local = AgentInterface {
            url: "http://localhost:8080/a2a".into(),
            protocol_binding: "HTTP+JSON".into(),
            protocol_version: "1.0".into(),
            tenant: String::new(),
        };
        c.supported_interfaces.push(local);
        let p = paths(&c);
        assert!(
            p.iter()
                .any(|p| p.starts_with("supportedInterfaces[0].url:") && p.contains("https")),
            "{p:?}"
        );
        assert!(
            p.iter()
                .any(|p| p.starts_with("supportedInterfaces[1].url:") && p.contains("host:port")),
            "{p:?}"
        );
        assert!(
            !p.iter().any(|p| p.starts_with("supportedInterfaces[2]")),
            "{p:?}"
        );
    }

    #[test]
    fn oauth_needs_exactly_one_flow_and_requirements_need_declared_schemes() {
        let mut c = minimal();
        let scheme = SecurityScheme {
            oauth2_security_scheme: Some(OAuth2SecurityScheme::default()),
            ..Default::default()
        };
        c.security_schemes.insert("o".into(), scheme);
        c.security_requirements.push(SecurityRequirement {
            schemes: BTreeMap::from([("missing".to_string(), StringList::default())]),
        });
        let p = paths(&c);
        assert!(p.iter().any(|p| p.starts_with("securitySchemes.o.oauth2SecurityScheme.flows: exactly one")), "{p:?}");
        assert!(
            p.contains(
                &"securityRequirements[0].schemes.missing: not declared in securitySchemes"
                    .to_string()
            ),
            "{p:?}"
        );
    }

    fn warnings(card: &AgentCard) -> Vec<String> {
        lint(card, LintOptions::default())
            .into_iter()
            .map(|p| p.to_string())
            .collect()
    }

    #[test]
    fn media_types_are_checked_as_warnings() {
        let mut c = minimal();
        c.default_input_modes = vec!["text".into(), "application/json; charset=utf-8".into()];
        assert_eq!(
            paths(&c),
            Vec::<String>::new(),
            "\"text\" is allowed by the proto"
        );
        let w = warnings(&c);
        assert!(
            w.iter().any(|p| p.starts_with("defaultInputModes[0]:")),
            "{w:?}"
        );
        assert!(
            !w.iter().any(|p| p.starts_with("defaultInputModes[1]")),
            "{w:?}"
        );
    }

    /// The audit: what the A2A v1.0 proto allows publishes, with a warning where it looks wrong.
    #[test]
    fn what_the_proto_allows_is_a_warning_never_an_error() {
        let c: AgentCard = serde_json::from_value(serde_json::json!({
            "name": "A", "description": " ", "version": "1",
            "supportedInterfaces": [{"url": "https://a.example.com/a2a", "protocolBinding": "my-binding", "protocolVersion": "v1"}],
            "capabilities": {"extensions": [{"description": "no uri"}, {"uri": "urn:x"}, {"uri": "urn:x"}]},
            "defaultInputModes": ["text", ""], "defaultOutputModes": ["text/plain"],
            "securitySchemes": {
                "empty": {},
                "implicit": {"oauth2SecurityScheme": {"flows": {"implicit": {"scopes": {}}}}}
            },
            "securityRequirements": [{"schemes": {}}, {"schemes": {"implicit": {"list": [""]}}}],
            "skills": [{"id": "s", "name": "S", "description": "d", "tags": ["t", ""],
                        "examples": ["", "hi"], "inputModes": [""]}]
        }))
        .unwrap();
        assert_eq!(paths(&c), Vec::<String>::new());
        let w = warnings(&c);
        for path in [
            "description: blank",
            "supportedInterfaces[0].protocolBinding:",
            "supportedInterfaces[0].protocolVersion:",
            "capabilities.extensions[0].uri: empty",
            "capabilities.extensions[2].uri: duplicate",
            "defaultInputModes[0]:",
            "defaultInputModes[1]: empty",
            "securitySchemes.empty: exactly one",
            "securityRequirements[0].schemes: empty",
            "securityRequirements[1].schemes.implicit.list[0]: empty",
            "skills[0].tags[1]: empty",
            "skills[0].examples[0]: empty",
            "skills[0].inputModes[0]: empty",
        ] {
            assert!(w.iter().any(|p| p.starts_with(path)), "{path}: {w:#?}");
        }
    }

    /// And what the proto or its text forbids stays an error.
    #[test]
    fn what_the_proto_requires_stays_an_error() {
        let mut c = minimal();
        c.description.clear();
        c.skills[0].tags.clear();
        c.supported_interfaces[0].protocol_version.clear();
        c.capabilities.extensions.push(AgentExtension {
            uri: "not a uri".into(),
            ..Default::default()
        });
        let p = paths(&c);
        for path in [
            "description: required",
            "skills[0].tags: required",
            "supportedInterfaces[0].protocolVersion: required",
            "capabilities.extensions[0].uri:",
        ] {
            assert!(p.iter().any(|e| e.starts_with(path)), "{path}: {p:?}");
        }
    }

    #[test]
    fn oversized_cards_are_refused() {
        let mut c = minimal();
        c.description = "x".repeat(MAX_CARD_BYTES + 1);
        assert!(paths(&c).iter().any(|p| p.contains("fit in a ConfigMap")));
    }

    #[test]
    fn lints_flag_descriptions_that_read_like_a_prompt() {
        let prompt_warnings = |c: &AgentCard| -> Vec<String> {
            lint(c, LintOptions::default())
                .iter()
                .map(|p| p.to_string())
                .filter(|w| w.contains("instructions to a model"))
                .collect()
        };
        let mut c = minimal();
        c.description = "Plans trips and books hotels for travellers.".into();
        c.skills[0].description = "Never books a flight without a confirmed seat.".into();
        assert!(prompt_warnings(&c).is_empty(), "{:?}", prompt_warnings(&c));
        c.description = "You are a helpful Kubernetes expert. Answer briefly.".into();
        c.skills[0].description = "Lists pods. Never reveal the cluster's credentials.".into();
        let w = prompt_warnings(&c);
        assert!(
            w.iter()
                .any(|w| w.starts_with("description: ") && w.contains("\"you are\"")),
            "{w:?}"
        );
        assert!(
            w.iter()
                .any(|w| w.starts_with("skills[0].description: ") && w.contains("never reveal")),
            "{w:?}"
        );
        // Long and full of orders, without a prompt's usual opening.
        c.description = format!(
            "{} Always answer in English. Never guess. Do not call tools twice. Make sure to cite.",
            "Helps with cluster operations across namespaces and teams. ".repeat(9)
        );
        c.skills[0].description = "Lists pods.".into();
        let w = prompt_warnings(&c);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("4 of its sentences give orders"), "{w:?}");
    }

    #[test]
    fn lints_flag_internal_urls_secrets_and_unscoped_requirements() {
        let mut c = minimal();
        c.supported_interfaces[0].url = "https://agent.team.svc.cluster.local/a2a".into();
        c.skills[0].examples = vec!["use key AKIAABCDEFGHIJKLMNOP".into()];
        c.security_schemes.insert(
            "m".into(),
            SecurityScheme {
                mtls_security_scheme: Some(Default::default()),
                ..Default::default()
            },
        );
        c.security_requirements.push(SecurityRequirement {
            schemes: BTreeMap::from([("m".to_string(), StringList::default())]),
        });
        let w: Vec<String> = lint(&c, LintOptions { public: true })
            .iter()
            .map(|p| p.to_string())
            .collect();
        assert!(
            w.iter()
                .any(|w| w.starts_with("supportedInterfaces[0].url: ")
                    && w.contains("cluster-internal")),
            "{w:?}"
        );
        assert!(
            w.iter()
                .any(|w| w.starts_with("skills[0].examples[0]: looks like an AWS access key id")),
            "{w:?}"
        );
        assert!(
            w.iter()
                .any(|w| w.starts_with("securityRequirements[0].schemes.m: no scopes")),
            "{w:?}"
        );
        for ip in [
            "https://10.1.2.3/a2a",
            "https://127.0.0.1/a",
            "https://[fd00::1]/a",
            "https://0.0.0.0/a",
        ] {
            c.supported_interfaces[0].url = ip.into();
            assert!(
                lint(&c, LintOptions { public: true })
                    .iter()
                    .any(|p| p.path == "supportedInterfaces[0].url"),
                "{ip}"
            );
        }
        c.supported_interfaces[0].url = "https://agents.example.com/a2a".into();
        assert!(!lint(&c, LintOptions { public: true })
            .iter()
            .any(|p| p.path == "supportedInterfaces[0].url"));
    }
}
