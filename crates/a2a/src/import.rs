//! Cards someone else made: a card an agent serves (v1.0, or v0.3 from older SDKs), read into
//! a v1.0 [`AgentCard`] that the usual pipeline then validates, signs and publishes.
//!
//! Data flow: JSON value → [`detect`] the version → (v0.3 only) [`v03_to_v10`] rewrites the
//! flat v0.3 shape into the v1.0 one, as the official SDKs convert it (`url` /
//! `preferredTransport` / `protocolVersion` / `additionalInterfaces` → `supportedInterfaces`,
//! `security` → `securityRequirements`, typed schemes → single-key wrappers,
//! `supportsAuthenticatedExtendedCard` → `capabilities.extendedAgentCard`) → lenient parse (a
//! reader ignores unknown fields; each one dropped is reported) → existing signatures dropped
//! (the operator signs what it publishes).

use serde_json::{json, Map, Value};

use super::card::AgentCard;
use super::parse::{card_from_value, Strictness};
use super::report::{Problem, Problems};

/// The protocol version a card was written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CardVersion {
    /// A2A v1.0 (`supportedInterfaces`).
    V1_0,
    /// A2A v0.3 or older (flat `url`, `preferredTransport`, ...).
    V0_3,
}

impl CardVersion {
    /// As shown in status and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            CardVersion::V1_0 => "1.0",
            CardVersion::V0_3 => "0.3",
        }
    }
}

/// A card read from someone else's JSON.
#[derive(Clone, Debug)]
pub struct Imported {
    /// The v1.0 card, without signatures.
    pub card: AgentCard,
    /// The version it was written in.
    pub version: CardVersion,
    /// What was dropped or changed on the way (warnings with the source's paths).
    pub notes: Vec<Problem>,
}

/// The version `value` is written in: v1.0 when it has `supportedInterfaces` (v1.0 cards from
/// the SDKs may carry the v0.3 fields beside them), v0.3 when it has the flat `url`.
pub fn detect(value: &Value) -> CardVersion {
    match value {
        Value::Object(m) if !m.contains_key("supportedInterfaces") && m.contains_key("url") => {
            CardVersion::V0_3
        }
        _ => CardVersion::V1_0,
    }
}

/// Read the card in `value` (v1.0 or v0.3) as a v1.0 card.
pub fn import(value: &Value) -> Result<Imported, Problems> {
    let version = detect(value);
    let v10 = match version {
        CardVersion::V1_0 => value.clone(),
        CardVersion::V0_3 => v03_to_v10(value),
    };
    let parsed = card_from_value(&v10, Strictness::Lenient)?;
    let mut card = parsed.card;
    let mut notes: Vec<Problem> = parsed
        .unknown_fields
        .into_iter()
        .filter(|p| version == CardVersion::V0_3 || !is_v03_compat_field(p))
        .map(|p| Problem::warning(p, "not part of the A2A v1.0 Agent Card: dropped"))
        .collect();
    if !card.signatures.is_empty() {
        notes.push(Problem::warning(
            "signatures",
            "the agent's own signatures are replaced by the operator's",
        ));
        card.signatures.clear();
    }
    Ok(Imported {
        card,
        version,
        notes,
    })
}

/// The v0.3 fields the SDKs write beside the v1.0 ones for old clients: dropped silently.
fn is_v03_compat_field(path: &str) -> bool {
    const TOP: [&str; 6] = [
        "url",
        "preferredTransport",
        "protocolVersion",
        "additionalInterfaces",
        "security",
        "supportsAuthenticatedExtendedCard",
    ];
    let top = path.split(['.', '[']).next().unwrap_or_default();
    TOP.contains(&top)
        || (path.starts_with("skills[") && path.ends_with(".security"))
        || (path.starts_with("securitySchemes.")
            && path
                .rsplit('.')
                .next()
                .is_some_and(|last| SCHEME_FLAT.contains(&last)))
}

/// The flat v0.3 fields the SDKs write inside a v1.0 security scheme.
const SCHEME_FLAT: [&str; 9] = [
    "type",
    "in",
    "name",
    "scheme",
    "bearerFormat",
    "flows",
    "openIdConnectUrl",
    "oauth2MetadataUrl",
    "description",
];

/// The v1.0 JSON of a v0.3 card. Fields it does not know are kept as they are (the parser
/// then reports what v1.0 does not have).
pub fn v03_to_v10(value: &Value) -> Value {
    let Value::Object(src) = value else {
        return value.clone();
    };
    let mut out = Map::new();
    let str_of = |k: &str| src.get(k).and_then(Value::as_str).unwrap_or_default();
    for (k, v) in src {
        match k.as_str() {
            "url"
            | "preferredTransport"
            | "protocolVersion"
            | "additionalInterfaces"
            | "security"
            | "supportsAuthenticatedExtendedCard"
            | "securitySchemes"
            | "skills"
            | "capabilities" => {}
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    let version = match str_of("protocolVersion") {
        "" => "0.3",
        v => v,
    };
    let binding = match str_of("preferredTransport") {
        "" => "JSONRPC",
        t => t,
    };
    let mut interfaces = vec![json!({
        "url": str_of("url"),
        "protocolBinding": binding,
        "protocolVersion": version,
    })];
    for extra in src
        .get("additionalInterfaces")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let url = extra.get("url").and_then(Value::as_str).unwrap_or_default();
        let transport = extra
            .get("transport")
            .and_then(Value::as_str)
            .unwrap_or_default();
        // v0.3 cards usually repeat the main interface among the additional ones.
        if url == str_of("url") && transport == binding {
            continue;
        }
        interfaces
            .push(json!({"url": url, "protocolBinding": transport, "protocolVersion": version}));
    }
    out.insert("supportedInterfaces".into(), Value::Array(interfaces));

    let mut caps = match src.get("capabilities") {
        Some(Value::Object(c)) => c.clone(),
        _ => Map::new(),
    };
    // Removed in v1.0; the lenient parser would report it, but it is a known rename-less drop.
    caps.remove("stateTransitionHistory");
    if let Some(ext) = src.get("supportsAuthenticatedExtendedCard") {
        caps.insert("extendedAgentCard".into(), ext.clone());
    }
    out.insert("capabilities".into(), Value::Object(caps));

    if let Some(Value::Object(schemes)) = src.get("securitySchemes") {
        let converted = schemes
            .iter()
            .map(|(name, s)| (name.clone(), scheme_to_v10(s)))
            .collect();
        out.insert("securitySchemes".into(), Value::Object(converted));
    }
    if let Some(reqs) = src.get("security") {
        out.insert("securityRequirements".into(), requirements_to_v10(reqs));
    }
    if let Some(Value::Array(skills)) = src.get("skills") {
        let skills = skills
            .iter()
            .map(|skill| match skill {
                Value::Object(s) => {
                    let mut s = s.clone();
                    if let Some(reqs) = s.remove("security") {
                        s.insert("securityRequirements".into(), requirements_to_v10(&reqs));
                    }
                    Value::Object(s)
                }
                other => other.clone(),
            })
            .collect();
        out.insert("skills".into(), Value::Array(skills));
    }
    Value::Object(out)
}

/// v0.3 `security` (`[{scheme: [scopes]}]`) → v1.0 `securityRequirements`.
fn requirements_to_v10(reqs: &Value) -> Value {
    let Value::Array(list) = reqs else {
        return reqs.clone();
    };
    Value::Array(
        list.iter()
            .map(|req| match req {
                Value::Object(m) => {
                    let schemes: Map<String, Value> = m
                        .iter()
                        .map(|(name, scopes)| (name.clone(), json!({ "list": scopes })))
                        .collect();
                    json!({ "schemes": schemes })
                }
                other => other.clone(),
            })
            .collect(),
    )
}

/// A v0.3 scheme (`type` discriminator, OpenAPI names) → the v1.0 single-key wrapper.
fn scheme_to_v10(scheme: &Value) -> Value {
    let Value::Object(s) = scheme else {
        return scheme.clone();
    };
    let mut body = s.clone();
    let kind = body
        .remove("type")
        .and_then(|t| t.as_str().map(str::to_string))
        .unwrap_or_default();
    let key = match kind.as_str() {
        "apiKey" => {
            if let Some(loc) = body.remove("in") {
                body.insert("location".into(), loc);
            }
            "apiKeySecurityScheme"
        }
        "http" => "httpAuthSecurityScheme",
        "oauth2" => "oauth2SecurityScheme",
        "openIdConnect" => "openIdConnectSecurityScheme",
        "mutualTLS" => "mtlsSecurityScheme",
        // Not a v0.3 scheme: left for the parser to report.
        _ => return scheme.clone(),
    };
    json!({ key: body })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v03() -> Value {
        json!({
            "protocolVersion": "0.3.0",
            "name": "Echo", "description": "Echoes", "version": "2.1.0",
            "url": "http://echo.team.svc:9999/",
            "preferredTransport": "JSONRPC",
            "additionalInterfaces": [
                {"url": "http://echo.team.svc:9999/", "transport": "JSONRPC"},
                {"url": "http://echo.team.svc:9999/rest", "transport": "HTTP+JSON"}
            ],
            "capabilities": {"streaming": true, "stateTransitionHistory": false},
            "supportsAuthenticatedExtendedCard": true,
            "defaultInputModes": ["text"], "defaultOutputModes": ["text"],
            "securitySchemes": {
                "key": {"type": "apiKey", "in": "header", "name": "X-Key"},
                "oidc": {"type": "openIdConnect", "openIdConnectUrl": "https://id.example.com/.well-known/openid-configuration"},
                "oauth": {"type": "oauth2", "flows": {"clientCredentials": {"tokenUrl": "https://id.example.com/token", "scopes": {"read": "Read"}}}}
            },
            "security": [{"oauth": ["read"]}, {"key": []}],
            "skills": [{"id": "echo", "name": "Echo", "description": "d", "tags": ["t"],
                        "examples": ["", "hi"], "security": [{"oidc": []}]}],
            "signatures": [{"protected": "e30", "signature": "AA"}]
        })
    }

    #[test]
    fn v03_cards_convert_like_the_sdks_convert_them() {
        let got = import(&v03()).unwrap();
        assert_eq!(got.version, CardVersion::V0_3);
        let v = serde_json::to_value(&got.card).unwrap();
        assert_eq!(
            v["supportedInterfaces"],
            json!([
                {"url": "http://echo.team.svc:9999/", "protocolBinding": "JSONRPC", "protocolVersion": "0.3.0"},
                {"url": "http://echo.team.svc:9999/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "0.3.0"}
            ])
        );
        assert_eq!(v["capabilities"]["extendedAgentCard"], json!(true));
        assert_eq!(v["capabilities"]["streaming"], json!(true));
        assert_eq!(
            v["securitySchemes"]["key"],
            json!({"apiKeySecurityScheme": {"location": "header", "name": "X-Key"}})
        );
        assert_eq!(
            v["securitySchemes"]["oauth"]["oauth2SecurityScheme"]["flows"]["clientCredentials"]
                ["tokenUrl"],
            json!("https://id.example.com/token")
        );
        assert_eq!(
            v["securityRequirements"][0],
            json!({"schemes": {"oauth": {"list": ["read"]}}})
        );
        assert_eq!(
            v["skills"][0]["securityRequirements"][0]["schemes"]["oidc"],
            json!({})
        );
        assert_eq!(v["skills"][0]["examples"], json!(["", "hi"]));
        assert!(got.card.signatures.is_empty());
        assert!(
            got.notes.iter().any(|n| n.path == "signatures"),
            "{:?}",
            got.notes
        );
    }

    #[test]
    fn v10_cards_with_the_sdks_v03_fields_beside_them_import_without_notes() {
        let card = json!({
            "name": "A", "description": "D", "version": "1",
            "supportedInterfaces": [{"url": "https://a.example.com/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"}],
            "url": "https://a.example.com/a2a", "preferredTransport": "JSONRPC", "protocolVersion": "0.3",
            "capabilities": {}, "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
            "skills": [{"id": "s", "name": "S", "description": "d", "tags": ["t"]}],
            "somethingElse": 1
        });
        let got = import(&card).unwrap();
        assert_eq!(got.version, CardVersion::V1_0);
        let paths: Vec<&str> = got.notes.iter().map(|n| n.path.as_str()).collect();
        assert_eq!(paths, ["somethingElse"]);
    }

    #[test]
    fn what_v10_does_not_have_is_reported_with_its_path() {
        let mut card = v03();
        card["skills"][0]["owner"] = json!("x");
        let got = import(&card).unwrap();
        assert!(
            got.notes.iter().any(|n| n.path == "skills[0].owner"),
            "{:?}",
            got.notes
        );
    }

    #[test]
    fn type_errors_name_their_path() {
        let mut card = v03();
        card["skills"][0]["tags"] = json!("not-a-list");
        let err = import(&card).unwrap_err();
        assert!(err.to_string().contains("skills[0].tags"), "{err}");
    }
}
