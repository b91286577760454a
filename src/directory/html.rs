//! The directory's web page: the catalog (`/`) and one card (`/agents/{namespace}/{name}`),
//! server-rendered from the same query engine as the APIs, for browsers that ask for HTML.
//!
//! Pure: a site snapshot, the request's query and the caller's visibility give an HTML
//! document. Everything a tenant wrote is escaped ([`esc`]); links are made only of `http(s)`
//! URLs (a `javascript:` URL renders as inert text). The page works without JavaScript (the
//! filters are a GET form, paging is links); the only script, served from `/assets/` under a
//! strict Content-Security-Policy, adds a copy button. Assets are embedded in the binary.

use std::collections::BTreeMap;

use serde_json::Value;

use super::entry::{Entry, Field};
use super::native;
use super::query::Visibility;
use super::token;
use crate::a2a::card::AgentCard as A2aCard;
use crate::a2a::jws::verify_card;
use crate::a2a::Jwks;
use crate::directory::sites::site::Site;

/// The Content-Security-Policy of every page: nothing from elsewhere, no inline script.
pub const CSP: &str = "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// The stylesheet (`/assets/style.css`).
pub const STYLE: &str = include_str!("assets/style.css");
/// The progressive enhancement script (`/assets/app.js`).
pub const SCRIPT: &str = include_str!("assets/app.js");

/// Escape text for HTML element content and quoted attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A link when `url` is an http(s) URL, else `text` as plain text; nothing without text.
fn link(url: &str, text: &str) -> String {
    if text.trim().is_empty() {
        return String::new();
    }
    let lower = url.trim().to_ascii_lowercase();
    if lower.starts_with("https://") || lower.starts_with("http://") {
        format!(
            "<a href=\"{}\" rel=\"noopener noreferrer nofollow\">{}</a>",
            esc(url.trim()),
            esc(text)
        )
    } else {
        format!("<span class=\"inert\">{}</span>", esc(text))
    }
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or_default()
}

fn layout(title: &str, site: &Site, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
<title>{title}</title><link rel=\"stylesheet\" href=\"{prefix}/assets/style.css\">\
<link rel=\"ard\" href=\"/.well-known/ard.json\"><link rel=\"ai-catalog\" href=\"/.well-known/ai-catalog.json\">\
<script src=\"{prefix}/assets/app.js\" defer></script></head><body>\
<a class=\"skip\" href=\"#main\">Skip to content</a>\
<header><p class=\"brand\"><a href=\"{prefix}/\">{name}</a></p>{desc}</header>\
<main id=\"main\">{body}</main>\
<footer><p>Machine-readable: <a href=\"{prefix}/.well-known/ard.json\">ARD manifest</a> · \
<a href=\"{prefix}/v1/agents\">JSON API</a></p></footer></body></html>\n",
        title = esc(title),
        prefix = esc(&site.prefix),
        name = esc(&site.display_name),
        desc = site
            .description
            .as_deref()
            .map(|d| format!("<p class=\"lead\">{}</p>", esc(d)))
            .unwrap_or_default(),
    )
}

/// The page of an error (a card not found, a bad parameter), in the site's layout.
pub fn error(site: &Site, e: &super::ApiError) -> String {
    layout(
        &format!("{} {}", e.status, e.code),
        site,
        &format!("<h1>{}</h1><p>{}</p>", esc(e.code), esc(&e.message)),
    )
}

/// The page an approver sees with `?approval=`: the cards waiting (as `state` asks), each
/// with its verdict and what changed since the approved revision.
pub fn waiting(site: &Site, state: &str, items: &[&super::sites::site::Waiting]) -> String {
    let mut html = format!(
        "<h1>Waiting for approval</h1><p>{} card(s) {}.</p>",
        items.len(),
        esc(match state {
            "pending" => "wait for an approval (never approved, or voided by an edit)",
            "voided" => "had their approval voided by an edit",
            _ => "were rejected",
        })
    );
    html.push_str("<table class=\"waiting\"><thead><tr><th>Card</th><th>State</th><th>Content</th><th>Why</th><th>Changed since approved</th></tr></thead><tbody>");
    for w in items {
        let p = &w.entry.placement;
        let a = &w.approval;
        let changes: String = a
            .changes
            .iter()
            .map(|c| format!("<li>{}</li>", esc(c)))
            .collect();
        html.push_str(&format!(
            "<tr><td><a href=\"{prefix}/agents/{ns}/{name}\">{ns}/{name}</a><br>{title}</td><td>{state}</td><td><code>{hash}</code></td><td>{msg}</td><td><ul>{changes}</ul></td></tr>",
            prefix = esc(&site.prefix),
            ns = esc(&p.namespace),
            name = esc(&p.name),
            title = esc(&w.entry.display_name),
            state = esc(a.state.as_str()),
            hash = esc(&p.content_hash),
            msg = esc(a.message.as_deref().unwrap_or_default()),
        ));
    }
    html.push_str("</tbody></table>");
    layout("Waiting for approval", site, &html)
}

/// The fields the catalog filters on, with their labels.
const FILTERS: [(Field, &str); 5] = [
    (Field::Skill, "Skill"),
    (Field::Tag, "Tag"),
    (Field::Provider, "Provider"),
    (Field::Capability, "Capability"),
    (Field::Binding, "Binding"),
];

/// The catalog page for query `params` (native parameters; invalid ones answer 400 in JSON
/// before this is called).
pub fn catalog(
    site: &Site,
    params: &BTreeMap<String, Vec<String>>,
    visible: Visibility<'_>,
) -> Result<String, super::ApiError> {
    let req = native::request(params, true)?;
    let page = site
        .catalog
        .list_by_title(&req.query, visible, req.after.as_deref(), req.limit);
    let fields: Vec<Field> = FILTERS.iter().map(|(f, _)| *f).collect();
    let counts = site.catalog.facets(&req.query, visible, &fields);
    let q = req.query.text.clone().unwrap_or_default();
    let mut html = String::new();
    html.push_str(
        "<h1>Agents</h1><form class=\"search\" method=\"get\" action=\"\" role=\"search\">",
    );
    html.push_str(&format!(
        "<label for=\"q\">Search agents</label><div class=\"row\"><input id=\"q\" name=\"q\" type=\"search\" value=\"{}\" placeholder=\"What should the agent do?\"><button type=\"submit\">Search</button></div>",
        esc(&q)
    ));
    html.push_str("<div class=\"filters\">");
    for (field, label) in FILTERS {
        let selected: Vec<String> = req.query.filters.get(&field).cloned().unwrap_or_default();
        let buckets = counts.get(&field).cloned().unwrap_or_default();
        let mut shown: Vec<(String, usize)> = buckets.into_iter().take(12).collect();
        for s in &selected {
            if !shown.iter().any(|(v, _)| v.eq_ignore_ascii_case(s)) {
                shown.push((s.clone(), 0));
            }
        }
        if shown.is_empty() {
            continue;
        }
        html.push_str(&format!("<fieldset><legend>{label}</legend>"));
        for (i, (value, count)) in shown.iter().enumerate() {
            let id = format!("f-{}-{i}", field.param());
            let checked = selected.iter().any(|s| s.eq_ignore_ascii_case(value));
            html.push_str(&format!(
                "<div class=\"opt\"><input type=\"checkbox\" id=\"{id}\" name=\"{param}\" value=\"{v}\"{c}><label for=\"{id}\">{v} <span class=\"count\">{count}</span></label></div>",
                param = field.param(),
                v = esc(value),
                c = if checked { " checked" } else { "" },
            ));
        }
        html.push_str("</fieldset>");
    }
    html.push_str("</div><p><button type=\"submit\">Apply filters</button></p></form>");
    html.push_str(&format!(
        "<p class=\"summary\" aria-live=\"polite\">{} agent{} found</p><ul class=\"results\">",
        page.total,
        if page.total == 1 { "" } else { "s" }
    ));
    for e in &page.items {
        html.push_str(&result(site, e));
    }
    html.push_str("</ul>");
    let mut nav = String::new();
    if req.after.is_some() {
        let mut first = params.clone();
        first.remove("cursor");
        nav.push_str(&format!(
            "<a href=\"?{}\">First page</a> ",
            esc(&encode(&first))
        ));
    }
    if let Some(after) = &page.next_after {
        let mut next = params.clone();
        next.insert("cursor".into(), vec![token::encode_after(after)]);
        nav.push_str(&format!(
            "<a href=\"?{}\" rel=\"next\">Next page</a>",
            esc(&encode(&next))
        ));
    }
    if !nav.is_empty() {
        html.push_str(&format!(
            "<nav aria-label=\"Pagination\" class=\"pages\">{nav}</nav>"
        ));
    }
    Ok(layout(&site.display_name, site, &html))
}

fn encode(params: &BTreeMap<String, Vec<String>>) -> String {
    let mut s = url::form_urlencoded::Serializer::new(String::new());
    for (k, vs) in params {
        for v in vs {
            s.append_pair(k, v);
        }
    }
    s.finish()
}

fn result(site: &Site, e: &Entry) -> String {
    let provider = e.facet_values(Field::Provider).next().unwrap_or_default();
    let skills: String = e
        .skill_ids()
        .iter()
        .map(|s| format!("<li class=\"chip\">{}</li>", esc(s)))
        .collect();
    format!(
        "<li class=\"result\"><h2><a href=\"{prefix}/agents/{ns}/{name}\">{title}</a></h2>\
<p class=\"meta\">{badges}{provider}<span class=\"host\">{host}</span>{origin}</p><p class=\"desc\">{desc}</p>\
<ul class=\"chips\" aria-label=\"Skills\">{skills}</ul></li>",
        prefix = esc(&site.prefix),
        ns = esc(&url_segment(&e.placement.namespace)),
        name = esc(&url_segment(&e.placement.name)),
        title = esc(e.title()),
        provider = if provider.is_empty() {
            String::new()
        } else {
            format!("{} · ", esc(provider))
        },
        host = esc(&e.placement.host),
        origin = e.origin.as_ref().map_or_else(String::new, |o| format!(
            " · <span class=\"origin\" data-origin=\"{u}\">from {u}{v}</span>",
            u = esc(&o.upstream),
            v = if o.verified { " (verified)" } else { " (unverified)" }
        )),
        desc = esc(e.description()),
        badges = badges(e),
    )
}

/// The reachability, drift and lifecycle badges of an entry (the native API's `reachable`,
/// `drift.state` and `lifecycle.state`, as words people read).
fn badges(e: &Entry) -> String {
    let p = &e.placement;
    let (word, title) = match p.reachable {
        Some(true) => ("reachable", "its Service has a ready endpoint"),
        Some(false) => (
            "unreachable",
            "registered, but its Service has no ready endpoint",
        ),
        None => ("reachability unknown", "no backend Service to check"),
    };
    let mut html = format!(
        "<span class=\"badge reach\" data-reachable=\"{}\" title=\"{title}\">{word}</span> ",
        p.reachable_str()
    );
    if let Some(d) = p.drift.as_deref().filter(|d| d.state != "none") {
        let word = match d.state {
            "structural" => "drifted",
            "descriptive" => "description drifted",
            _ => "drift unknown",
        };
        html.push_str(&format!(
            "<span class=\"badge drift\" data-drift=\"{}\" title=\"{}\">{word}</span> ",
            d.state,
            esc(&d.message)
        ));
    }
    if let Some(l) = &p.lifecycle {
        let state = l.state.as_str();
        let successor = l
            .successor_url
            .as_ref()
            .or(l.successor.as_ref())
            .map_or_else(String::new, |s| format!(" → {}", link(s, s)));
        html.push_str(&format!(
            "<span class=\"badge lifecycle\" data-lifecycle=\"{state}\" title=\"{msg}\">{word}{successor}</span> ",
            word = state.to_lowercase(),
            msg = esc(l.message.as_deref().unwrap_or_default()),
        ));
    }
    html
}

fn url_segment(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// What a signature check against the served JWKS found, for the card page.
fn signature(e: &Entry, jwks: Option<&[u8]>) -> String {
    let card = match A2aCard::from_json_lenient(&e.body) {
        Ok(c) => c,
        Err(err) => {
            return format!(
                "<p class=\"bad\">The card cannot be read: {}</p>",
                esc(&err.to_string())
            )
        }
    };
    let Some(jwks) = jwks.and_then(|b| Jwks::from_slice(b).ok()) else {
        return "<p class=\"bad\" data-verified=\"false\">✗ Not verified: no JWKS is published.</p>".into();
    };
    match verify_card(&card, &jwks) {
        Ok(v) => format!(
            "<p class=\"good\" data-verified=\"true\">✓ Signature verified against the served JWKS: key <code>{}</code>, algorithm <code>{}</code>.</p>",
            esc(&v.kid),
            esc(v.alg.name())
        ),
        Err(err) => format!(
            "<p class=\"bad\" data-verified=\"false\">✗ Does not verify against the served JWKS: {}</p>",
            esc(&err.to_string())
        ),
    }
}

fn list_section(title: &str, items: Vec<String>) -> String {
    if items.is_empty() {
        return String::new();
    }
    format!(
        "<section><h2>{}</h2><ul>{}</ul></section>",
        esc(title),
        items
            .into_iter()
            .map(|i| format!("<li>{i}</li>"))
            .collect::<String>()
    )
}

/// One card's page, with its signature checked against `jwks` (the JWKS served on its host).
pub fn card(site: &Site, e: &Entry, jwks: Option<&[u8]>) -> String {
    let v: Value = serde_json::from_slice(&e.body).unwrap_or(Value::Null);
    let title = e.title();
    let mut html = format!(
        "<nav aria-label=\"Breadcrumb\"><a href=\"{}/\">All agents</a></nav><h1>{}</h1><p class=\"desc\">{}</p>",
        esc(&site.prefix),
        esc(title),
        esc(e.description())
    );
    html.push_str(&facts(e, &v));
    html.push_str(&format!(
        "<section><h2>Signature</h2>{}</section>",
        signature(e, jwks)
    ));
    html.push_str(&list_section("Skills", skills(&v)));
    html.push_str(&list_section("Interfaces", interfaces(&v)));
    html.push_str(&list_section("Security schemes", security_schemes(&v)));
    let requirements: Vec<String> = v["securityRequirements"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| esc(&r["schemes"].to_string()))
        .collect();
    html.push_str(&list_section("Security requirements", requirements));
    html.push_str(&list_section("Capabilities", capabilities(&v)));
    html.push_str(&check_it_yourself(e, &v));
    layout(title, site, &html)
}

/// The card's facts: version, provider, namespace, URLs.
fn facts(e: &Entry, v: &Value) -> String {
    let provider = &v["provider"];
    let mut html = String::from("<dl class=\"facts\">");
    for (k, val) in [
        ("Version", esc(e.version())),
        (
            "Provider",
            if provider.is_object() {
                link(str_of(provider, "url"), str_of(provider, "organization"))
            } else {
                String::new()
            },
        ),
        ("Namespace", esc(&e.placement.namespace)),
        ("Status", badges(e)),
        ("Card URL", link(&e.placement.url, &e.placement.url)),
        (
            "From",
            e.origin.as_ref().map_or_else(String::new, |o| {
                format!(
                    "<span class=\"origin\" data-origin=\"{u}\">upstream {u}, read {t}, {v}</span>",
                    u = esc(&o.upstream),
                    t = esc(&o.fetched_at),
                    v = if o.verified {
                        "signature verified with its trusted keys"
                    } else {
                        "not verified (no trusted keys)"
                    }
                )
            }),
        ),
        (
            "Documentation",
            link(str_of(v, "documentationUrl"), str_of(v, "documentationUrl")),
        ),
    ] {
        if !val.is_empty() {
            html.push_str(&format!("<dt>{k}</dt><dd>{val}</dd>"));
        }
    }
    html.push_str("</dl>");
    html
}

/// Each skill: name, id, description, tag chips and examples.
fn skills(v: &Value) -> Vec<String> {
    v["skills"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            let tags: String = s["tags"].as_array().into_iter().flatten().filter_map(Value::as_str)
                .map(|t| format!("<li class=\"chip\">{}</li>", esc(t))).collect();
            let examples: String = s["examples"].as_array().into_iter().flatten().filter_map(Value::as_str)
                .map(|x| format!("<li>{}</li>", esc(x))).collect();
            format!(
                "<h3>{} <code>{}</code></h3><p>{}</p><ul class=\"chips\" aria-label=\"Tags\">{tags}</ul>{}",
                esc(str_of(s, "name")),
                esc(str_of(s, "id")),
                esc(str_of(s, "description")),
                if examples.is_empty() { String::new() } else { format!("<p>Examples:</p><ul class=\"examples\">{examples}</ul>") }
            )
        })
        .collect()
}

/// Each interface: URL, binding, protocol version.
fn interfaces(v: &Value) -> Vec<String> {
    v["supportedInterfaces"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| {
            format!(
                "{} <code>{}</code> {}",
                link(str_of(i, "url"), str_of(i, "url")),
                esc(str_of(i, "protocolBinding")),
                esc(str_of(i, "protocolVersion"))
            )
        })
        .collect()
}

/// Each security scheme: its name and kind.
fn security_schemes(v: &Value) -> Vec<String> {
    v["securitySchemes"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, scheme)| {
            let kind = scheme
                .as_object()
                .and_then(|o| o.keys().next().cloned())
                .unwrap_or_default();
            format!("<code>{}</code> ({})", esc(name), esc(&kind))
        })
        .collect()
}

/// The capabilities, yes or no, then the extensions.
fn capabilities(v: &Value) -> Vec<String> {
    let caps = &v["capabilities"];
    let mut out: Vec<String> = ["streaming", "pushNotifications", "extendedAgentCard"]
        .iter()
        .map(|f| {
            let yes = caps[*f].as_bool() == Some(true);
            format!("{f}: {}", if yes { "yes" } else { "no" })
        })
        .collect();
    for ext in caps["extensions"].as_array().into_iter().flatten() {
        let required = if ext["required"].as_bool() == Some(true) {
            " (required)"
        } else {
            ""
        };
        out.push(format!(
            "extension {}{required}",
            link(str_of(ext, "uri"), str_of(ext, "uri"))
        ));
    }
    out
}

/// The commands to fetch and verify the card, and its JSON with a copy button.
fn check_it_yourself(e: &Entry, v: &Value) -> String {
    let pretty = serde_json::to_string_pretty(v).unwrap_or_default();
    let jwks_url = e
        .placement
        .url
        .replace("/.well-known/agent-card.json", "/.well-known/jwks.json");
    format!(
        "<section><h2>Check it yourself</h2><pre class=\"cmd\"><code>curl {url}\nagentcard-operator verify {url} --jwks {jwks}</code></pre></section><section><h2>Card JSON</h2><button type=\"button\" class=\"copy\" data-copy=\"card-json\" hidden>Copy JSON</button><pre id=\"card-json\" class=\"json\" tabindex=\"0\"><code>{json}</code></pre></section>",
        url = esc(&e.placement.url),
        jwks = esc(&jwks_url),
        json = esc(&pretty)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenant_text_is_escaped_and_only_web_urls_become_links() {
        assert_eq!(esc("<script>\"'&"), "&lt;script&gt;&quot;&#39;&amp;");
        assert!(link("https://example.com/x?a=1&b=2", "docs")
            .starts_with("<a href=\"https://example.com/x?a=1&amp;b=2\""));
        let inert = link("javascript:alert(1)", "javascript:alert(1)");
        assert!(!inert.contains("href"), "{inert}");
        assert!(!link(" JavaScript:alert(1)", "x").contains("href"));
    }
}
