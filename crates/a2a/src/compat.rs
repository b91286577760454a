//! Opt-in v0.3 compatibility: the flat v0.3 fields beside the v1.0 ones.
//!
//! Many deployed clients still read v0.3 cards (`url`, `preferredTransport`, `security`,
//! schemes with a `type` discriminator). Like the Python SDK does for cards that list a `0.x`
//! interface, [`add_v03_fields`] writes those fields next to the v1.0 ones. They are unknown
//! fields to a v1.0 reader, which drops them before computing the canonical form, so the
//! signatures (over the v1.0 form) stay valid.

use serde_json::{json, Map, Value};

use super::card::{AgentCard, SecurityRequirement, SecurityScheme};

/// Why v0.3 fields could not be added.
#[derive(Debug, thiserror::Error)]
pub enum CompatError {
    /// v0.3 clients need an interface that speaks v0.3.
    #[error(
        "supportedInterfaces: no interface with a 0.x protocolVersion for v0.3 clients to use"
    )]
    NoV03Interface,
}

/// Add the v0.3 fields of `card` to `out` (the card's published JSON object).
pub fn add_v03_fields(card: &AgentCard, out: &mut Map<String, Value>) -> Result<(), CompatError> {
    let v03: Vec<_> = card
        .supported_interfaces
        .iter()
        .filter(|i| i.protocol_version.starts_with("0."))
        .collect();
    let main = v03.first().ok_or(CompatError::NoV03Interface)?;
    out.insert("url".into(), json!(main.url));
    out.insert("preferredTransport".into(), json!(main.protocol_binding));
    out.insert("protocolVersion".into(), json!(main.protocol_version));
    if v03.len() > 1 {
        let list: Vec<Value> = v03
            .iter()
            .map(|i| json!({"url": i.url, "transport": i.protocol_binding}))
            .collect();
        out.insert("additionalInterfaces".into(), Value::Array(list));
    }
    if let Some(ext) = card.capabilities.extended_agent_card {
        out.insert("supportsAuthenticatedExtendedCard".into(), json!(ext));
    }
    if !card.security_requirements.is_empty() {
        out.insert("security".into(), security(&card.security_requirements));
    }
    if let Some(Value::Object(schemes)) = out.get_mut("securitySchemes") {
        for (name, scheme) in &card.security_schemes {
            if !v03_exact(scheme) {
                // The Python SDK rebuilds a scheme from its flat v0.3 copy when one is present;
                // a copy that cannot hold everything would change what it verifies. Leave it out.
                continue;
            }
            if let Some(Value::Object(entry)) = schemes.get_mut(name) {
                entry.extend(flat_scheme(scheme));
            }
        }
    }
    if let Some(Value::Array(skills)) = out.get_mut("skills") {
        for (skill, value) in card.skills.iter().zip(skills.iter_mut()) {
            if let (false, Value::Object(v)) = (skill.security_requirements.is_empty(), value) {
                v.insert("security".into(), security(&skill.security_requirements));
            }
        }
    }
    Ok(())
}

/// Whether the v0.3 shape can carry `s` without loss (no PKCE flag, no device-code flow).
fn v03_exact(s: &SecurityScheme) -> bool {
    s.oauth2_security_scheme.as_ref().is_none_or(|o| {
        o.flows.device_code.is_none()
            && o.flows
                .authorization_code
                .as_ref()
                .is_none_or(|a| !a.pkce_required)
    })
}

/// v0.3 `security`: a list of `{scheme: [scopes]}` maps.
fn security(reqs: &[SecurityRequirement]) -> Value {
    Value::Array(
        reqs.iter()
            .map(|r| {
                Value::Object(
                    r.schemes
                        .iter()
                        .map(|(k, v)| (k.clone(), json!(v.list)))
                        .collect(),
                )
            })
            .collect(),
    )
}

/// The v0.3 flat members of a scheme (`type` discriminator and the scheme's own fields).
fn flat_scheme(s: &SecurityScheme) -> Map<String, Value> {
    let mut m = Map::new();
    let mut put = |k: &str, v: &str| {
        if !v.is_empty() {
            m.insert(k.into(), json!(v));
        }
    };
    if let Some(k) = &s.api_key_security_scheme {
        put("type", "apiKey");
        put("in", &k.location);
        put("name", &k.name);
        put("description", &k.description);
    } else if let Some(h) = &s.http_auth_security_scheme {
        put("type", "http");
        put("scheme", &h.scheme);
        put("bearerFormat", &h.bearer_format);
        put("description", &h.description);
    } else if let Some(o) = &s.open_id_connect_security_scheme {
        put("type", "openIdConnect");
        put("openIdConnectUrl", &o.open_id_connect_url);
        put("description", &o.description);
    } else if let Some(t) = &s.mtls_security_scheme {
        put("type", "mutualTLS");
        put("description", &t.description);
    } else if let Some(o) = &s.oauth2_security_scheme {
        put("type", "oauth2");
        put("description", &o.description);
        put("oauth2MetadataUrl", &o.oauth2_metadata_url);
        // v0.3 has no device-code flow and no pkceRequired.
        let mut flows = Map::new();
        let f = &o.flows;
        if let Some(x) = &f.authorization_code {
            flows.insert(
                "authorizationCode".into(),
                flow(
                    Some(&x.authorization_url),
                    Some(&x.token_url),
                    &x.refresh_url,
                    &x.scopes,
                ),
            );
        }
        if let Some(x) = &f.client_credentials {
            flows.insert(
                "clientCredentials".into(),
                flow(None, Some(&x.token_url), &x.refresh_url, &x.scopes),
            );
        }
        if let Some(x) = &f.implicit {
            flows.insert(
                "implicit".into(),
                flow(Some(&x.authorization_url), None, &x.refresh_url, &x.scopes),
            );
        }
        if let Some(x) = &f.password {
            flows.insert(
                "password".into(),
                flow(None, Some(&x.token_url), &x.refresh_url, &x.scopes),
            );
        }
        m.insert("flows".into(), Value::Object(flows));
    }
    m
}

fn flow(
    authorization_url: Option<&String>,
    token_url: Option<&String>,
    refresh_url: &str,
    scopes: &std::collections::BTreeMap<String, String>,
) -> Value {
    let mut m = Map::new();
    if let Some(u) = authorization_url {
        m.insert("authorizationUrl".into(), json!(u));
    }
    if let Some(u) = token_url {
        m.insert("tokenUrl".into(), json!(u));
    }
    if !refresh_url.is_empty() {
        m.insert("refreshUrl".into(), json!(refresh_url));
    }
    // v0.3 requires `scopes`, even when empty.
    m.insert("scopes".into(), json!(scopes));
    Value::Object(m)
}
