//! What a request names, read strictly (RFC 9110, 9112, 3986): the host it is for and its
//! path, normalised, or why the request is malformed (a 400). Pure; every route of the public
//! port (cards, JWKS, directories) goes through it, so no two readings of one request differ.
//!
//! - Host (RFC 9112 §3.2): exactly one `Host` header with a valid value; an HTTP/1.1 request
//!   without one is refused. An absolute-form request-target's authority is the host
//!   (§3.2.2), and a `Host` header that names another host is refused.
//! - Path (RFC 3986 §6.2.2): percent-encoded unreserved characters are decoded (`%2D` is
//!   `-`), the other escapes kept with upper-case hex, `.` and `..` segments removed
//!   (§5.2.4). A character a path may not hold raw, or a malformed escape, is refused. A
//!   fragment (which clients never send) is refused by the connection layer, which still
//!   sees the raw request line ([`super::conn`]).

use http::header::HOST;
use http::uri::Authority;
use http::{HeaderMap, Uri, Version};

/// The host and path a request is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// Lower case, no port, no trailing dot; `None` for an HTTP/1.0 request naming no host.
    pub host: Option<String>,
    /// Normalised: unreserved escapes decoded, dot segments removed.
    pub path: String,
}

/// Why a request is refused with 400: a short reason, sent in the error body.
pub type Malformed = &'static str;

/// Read the target of a request with `version`, `uri` and `headers`.
pub fn of(version: Version, uri: &Uri, headers: &HeaderMap) -> Result<Target, Malformed> {
    let mut hosts = headers.get_all(HOST).iter();
    let header = hosts.next();
    if hosts.next().is_some() {
        return Err("more than one Host header");
    }
    let header = header
        .map(|h| {
            h.to_str()
                .ok()
                .and_then(|s| s.parse::<Authority>().ok())
                .filter(|a| !a.as_str().contains('@'))
                .ok_or("the Host header is not a valid host")
        })
        .transpose()?;
    let host = match (uri.authority(), header) {
        (Some(target), Some(header)) if !same_authority(target, &header) => {
            return Err("the Host header names another host than the request-target")
        }
        (Some(target), _) => Some(target.clone()),
        (None, Some(header)) => Some(header),
        (None, None) if version == Version::HTTP_11 => {
            return Err("an HTTP/1.1 request needs a Host header")
        }
        (None, None) => None,
    };
    let host = host
        .map(|a| a.host().trim_end_matches('.').to_ascii_lowercase())
        .filter(|h| !h.is_empty());
    Ok(Target {
        host,
        path: normalize_path(uri.path())?,
    })
}

/// Whether two authorities name the same host and port (host case-insensitively, a missing
/// port matching a missing one only).
fn same_authority(a: &Authority, b: &Authority) -> bool {
    let host = |x: &Authority| x.host().trim_end_matches('.').to_ascii_lowercase();
    host(a) == host(b) && a.port_u16() == b.port_u16()
}

/// RFC 3986 §2.3: characters that mean the same escaped or not.
fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// Characters a path segment holds raw besides unreserved ones: sub-delims, `:`, `@`, `/`.
fn path_char(b: u8) -> bool {
    unreserved(b)
        || matches!(
            b,
            b'!' | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'@'
                | b'/'
        )
}

/// `path` with unreserved escapes decoded and dot segments removed (see the module doc).
pub fn normalize_path(path: &str) -> Result<String, Malformed> {
    let bytes = path.as_bytes();
    // Most paths are normal already (no escape, no dot segment): taken as they are.
    let plain = bytes.iter().all(|&b| b != b'%' && path_char(b));
    if plain && bytes.first() == Some(&b'/') && !has_dot_segment(path) {
        return Ok(path.to_owned());
    }
    let mut out = String::with_capacity(path.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or("a malformed percent-escape in the path")?;
            if unreserved(hex) {
                out.push(char::from(hex));
            } else {
                out.push_str(&format!("%{hex:02X}"));
            }
            i += 3;
        } else if path_char(b) {
            out.push(char::from(b));
            i += 1;
        } else {
            return Err("a character the path may not hold unescaped");
        }
    }
    Ok(remove_dot_segments(&out))
}

/// Whether `path` holds a `.` or `..` segment.
fn has_dot_segment(path: &str) -> bool {
    path.split('/').any(|seg| seg == "." || seg == "..")
}

/// RFC 3986 §5.2.4 on an absolute path.
fn remove_dot_segments(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    let last = segments.len().saturating_sub(1);
    for (i, segment) in segments.iter().enumerate() {
        match *segment {
            "." => {
                if i == last {
                    out.push("");
                }
            }
            ".." => {
                out.pop();
                if i == last {
                    out.push("");
                }
            }
            s => out.push(s),
        }
    }
    format!("/{}", out.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(version: Version, uri: &str, hosts: &[&str]) -> Result<Target, Malformed> {
        let mut headers = HeaderMap::new();
        for h in hosts {
            headers.append(HOST, h.parse().unwrap());
        }
        of(version, &uri.parse().unwrap(), &headers)
    }

    fn ok(host: &str, path: &str) -> Result<Target, Malformed> {
        Ok(Target {
            host: Some(host.into()),
            path: path.into(),
        })
    }

    #[test]
    fn the_host_is_read_as_rfc_9112_says() {
        let v11 = Version::HTTP_11;
        let card = "/.well-known/agent-card.json";
        assert_eq!(
            target(v11, card, &["A.Example.com:8443"]),
            ok("a.example.com", card)
        );
        assert_eq!(
            target(v11, card, &["a.example.com."]),
            ok("a.example.com", card)
        );
        assert_eq!(
            target(v11, card, &["[2001:db8::1]:80"]),
            ok("[2001:db8::1]", card)
        );
        assert!(target(v11, card, &["a.example.com", "b.example.com"]).is_err());
        assert!(target(v11, card, &["a.example.com", "a.example.com"]).is_err());
        assert!(target(v11, card, &[]).is_err(), "HTTP/1.1 without Host");
        assert!(target(v11, card, &["a b"]).is_err());
        assert!(target(v11, card, &["a.example.com/x"]).is_err());
        assert!(target(v11, card, &["user@a.example.com"]).is_err());
        assert_eq!(
            target(Version::HTTP_10, card, &[]),
            Ok(Target {
                host: None,
                path: card.into()
            })
        );
        // Absolute form: its authority is the host; a Host header naming another is refused.
        let abs = "http://B.example.com/.well-known/agent-card.json";
        assert_eq!(target(v11, abs, &[]), ok("b.example.com", card));
        assert_eq!(
            target(v11, abs, &["b.example.com"]),
            ok("b.example.com", card)
        );
        assert!(target(v11, abs, &["a.example.com"]).is_err());
        assert!(target(v11, "http://b.example.com:81/", &["b.example.com"]).is_err());
    }

    #[test]
    fn paths_are_normalised_as_rfc_3986_says() {
        let n = |p: &str| normalize_path(p);
        assert_eq!(
            n("/.well%2Dknown/agent%2dcard.json"),
            Ok("/.well-known/agent-card.json".into())
        );
        assert_eq!(n("/%7Euser/%41"), Ok("/~user/A".into()));
        assert_eq!(
            n("/a%2fb"),
            Ok("/a%2Fb".into()),
            "a reserved escape stays escaped"
        );
        assert_eq!(n("/a/./b/../c"), Ok("/a/c".into()));
        assert_eq!(
            n("/x/%2E%2E/.well-known/jwks.json"),
            Ok("/.well-known/jwks.json".into())
        );
        assert_eq!(n("/../../a"), Ok("/a".into()));
        assert_eq!(n("/a/.."), Ok("/".into()));
        assert_eq!(n("/a/b/."), Ok("/a/b/".into()));
        assert_eq!(n("/"), Ok("/".into()));
        // Paths taken as they are read the same as through the dot-segment removal.
        for plain in [
            "/",
            "/a//b/",
            "/.well-known/agent-card.json",
            "/..a/b../.c/c.",
            "/a/",
            "//",
            "/v1/agents",
            "/~x/a+b;c=d",
        ] {
            assert_eq!(n(plain), Ok(plain.into()));
            assert_eq!(remove_dot_segments(plain), plain);
        }
        for bad in [
            "/%zz", "/%2", "/a%", "/a\\b", "/a^b", "/a|b", "/a{b}", "/ä", "/a\"b",
        ] {
            assert!(n(bad).is_err(), "{bad}");
        }
    }
}
