//! The HTTP side of federation: what an upstream's spec lets its client connect to
//! (`allowAddresses`, `allowHttp`, never the API server), the client itself (timeouts, no
//! proxy, redirects within the origin, every resolved address checked by [`crate::net`]), and
//! one bounded GET. Everything an upstream says that is kept in text is cut here ([`cut`]).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::error::{Error, Problem, UrlProblem};
use crate::crd::agentdirectory::Upstream;

/// Most bytes of one response (a feed page, an ARD page, a JWKS).
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;
/// Most bytes of one card.
pub const MAX_CARD_BYTES: usize = 256 * 1024;
/// Time for one request.
const TIMEOUT: Duration = Duration::from_secs(10);
/// Most pages read in one refresh.
pub const MAX_PAGES: usize = 1000;

/// What an upstream's spec lets its clients connect to: its address ranges (`allowAddresses`)
/// and whether plain HTTP is accepted (`allowHttp`). Wrong ranges are an error naming them.
pub fn net_policy(
    up: &Upstream,
    api_server: Arc<Vec<std::net::IpAddr>>,
) -> Result<crate::net::Allowed, Error> {
    up.allow_addresses
        .iter()
        .enumerate()
        .map(|(index, c)| {
            c.trim().parse::<ipnet::IpNet>().map_err(|_| Error::Range {
                index,
                value: c.clone(),
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(|ranges| crate::net::Allowed { ranges, api_server })
}

/// Whether `url` may be read for `up`: `https://` (or `http://` with `allowHttp`), and a host
/// that is a name (checked as it resolves, by the client's resolver) or an address `allowed`
/// permits (an address is connected to without resolving).
pub fn check_url(
    up: &Upstream,
    allowed: &crate::net::Allowed,
    (field, url): (&'static str, &str),
) -> Result<(), Error> {
    let refused = |problem| Error::Url {
        field,
        url: cut(url).into_owned(),
        problem,
    };
    let parsed = url::Url::parse(url).map_err(|e| refused(UrlProblem::Parse(e)))?;
    match parsed.scheme() {
        "https" => {}
        "http" if up.allow_http => {}
        "http" => return Err(refused(UrlProblem::PlainHttp)),
        other => return Err(refused(UrlProblem::Scheme(other.to_string()))),
    }
    let ip = match parsed.host() {
        Some(url::Host::Ipv4(a)) => Some(std::net::IpAddr::V4(a)),
        Some(url::Host::Ipv6(a)) => Some(std::net::IpAddr::V6(a)),
        Some(url::Host::Domain(_)) => None,
        None => return Err(refused(UrlProblem::NoHost)),
    };
    match ip.filter(|ip| !allowed.permits(*ip)) {
        Some(ip) if allowed.is_api_server(ip) => Err(refused(UrlProblem::ApiServer(ip))),
        Some(ip) => Err(refused(UrlProblem::Address(ip))),
        None => Ok(()),
    }
}

/// Most bytes of an upstream's text (an error, a URL, an identifier) kept in status and logs.
pub const MAX_TEXT: usize = 1024;

/// `text` cut to [`MAX_TEXT`] bytes (on a character boundary), marked when cut.
pub fn cut(text: &str) -> std::borrow::Cow<'_, str> {
    if text.len() <= MAX_TEXT {
        return text.into();
    }
    let mut end = MAX_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end]).into()
}

/// An HTTP client for `base`: timeouts, no proxy, redirects only within its origin, and a
/// resolver that connects only to the addresses `allowed` permits.
pub fn client(base: &url::Url, allowed: crate::net::Allowed) -> Result<reqwest::Client, Error> {
    let origin = base.origin();
    let policy = reqwest::redirect::Policy::custom(move |attempt| {
        if attempt.previous().len() > 5 {
            attempt.error("more than 5 redirects")
        } else if attempt.url().origin() != origin {
            let to = attempt.url().to_string();
            attempt.error(format!(
                "a redirect to another origin ({to}) is not followed"
            ))
        } else {
            attempt.follow()
        }
    });
    reqwest::Client::builder()
        .dns_resolver(crate::net::guard(allowed))
        .redirect(policy)
        .timeout(TIMEOUT)
        .connect_timeout(Duration::from_secs(5))
        .no_proxy()
        .build()
        .map_err(Error::Client)
}

/// An error and its causes, one line (reqwest's own text leaves the cause out).
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

/// An answer read within its bound.
pub struct Got {
    /// The status code.
    pub status: u16,
    /// Its `ETag`.
    pub etag: Option<String>,
    /// The body, whole.
    pub body: Bytes,
}

/// GET `url` (`If-None-Match: etag` when given), its body read up to `max` bytes.
pub async fn get(
    http: &reqwest::Client,
    url: &str,
    etag: Option<&str>,
    max: usize,
) -> Result<Got, Error> {
    let failed = |problem| Error::Request {
        url: url.to_string(),
        problem,
    };
    let mut req = http
        .get(url)
        .header(http::header::ACCEPT, "application/json");
    if let Some(tag) = etag {
        req = req.header(http::header::IF_NONE_MATCH, tag);
    }
    let mut resp = req
        .send()
        .await
        .map_err(|e| failed(Problem::Failed(chain(&e))))?;
    let status = resp.status().as_u16();
    let tag = resp
        .headers()
        .get(http::header::ETAG)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    if resp.content_length().is_some_and(|n| n > max as u64) {
        return Err(failed(Problem::TooLarge(max)));
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| failed(Problem::Failed(chain(&e))))?
    {
        body.extend_from_slice(&chunk);
        if body.len() > max {
            return Err(failed(Problem::TooLarge(max)));
        }
    }
    Ok(Got {
        status,
        etag: tag,
        body: Bytes::from(body),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_server_is_refused_inside_a_named_range_and_taken_when_named_alone() {
        let api: Arc<Vec<std::net::IpAddr>> = Arc::new(vec!["10.96.0.1".parse().unwrap()]);
        let up = |ranges: &[&str]| Upstream {
            allow_addresses: ranges.iter().map(|r| r.to_string()).collect(),
            ..Upstream::default()
        };
        let check = |ranges: &[&str], url: &str| {
            let up = up(ranges);
            check_url(&up, &net_policy(&up, api.clone()).unwrap(), ("url", url))
        };
        let e = check(&["10.0.0.0/8"], "https://10.96.0.1/")
            .unwrap_err()
            .to_string();
        assert!(e.contains("the Kubernetes API server's address"), "{e}");
        assert!(check(&["10.0.0.0/8"], "https://10.96.0.2/").is_ok());
        assert!(check(&["10.96.0.1/32"], "https://10.96.0.1/").is_ok());
        let e = check(&[], "https://10.96.0.2/").unwrap_err().to_string();
        assert!(
            e.starts_with("url: https://10.96.0.2/: 10.96.0.2 is not an address"),
            "{e}"
        );
    }
}
