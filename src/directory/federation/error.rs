//! Why an upstream could not be read: said in its `status.upstreams[].message` and in the log
//! (cut to [`super::client::MAX_TEXT`]), and the reason its last good entries stay listed.

use std::net::IpAddr;

use super::client::MAX_PAGES;

/// Why one refresh of an upstream failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An `allowAddresses` entry is no CIDR range.
    #[error("allowAddresses[{index}]: {value:?} is not a CIDR range")]
    Range {
        /// Its position in the list.
        index: usize,
        /// What it says.
        value: String,
    },
    /// `url` or `trust.jwksUrl` may not be read.
    #[error("{field}: {url}: {problem}")]
    Url {
        /// The spec field (`url`, `trust.jwksUrl`).
        field: &'static str,
        /// The URL (cut).
        url: String,
        /// What is wrong with it.
        problem: UrlProblem,
    },
    /// The `include` filters are wrong.
    #[error("include: {0}")]
    Include(String),
    /// A request failed, or what it answered is refused.
    #[error("{url}: {problem}")]
    Request {
        /// What was asked.
        url: String,
        /// What went wrong.
        problem: Problem,
    },
    /// The HTTP client could not be built.
    #[error("building the HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    /// A refresh that does not end.
    #[error("{0}: more than {max} pages in one refresh", max = MAX_PAGES)]
    TooManyPages(String),
    /// `trust.jwks` names a Secret this process cannot read.
    #[error("trust.jwks: this process cannot read Secrets")]
    NoSecrets,
    /// Reading the `trust.jwks` Secret failed.
    #[error("trust.jwks: reading Secret {name}: {source}")]
    ReadSecret {
        /// The Secret.
        name: String,
        /// The API server's answer.
        source: kube::Error,
    },
    /// The `trust.jwks` Secret lacks the key.
    #[error("trust.jwks: Secret {name} has no key {key}")]
    NoKey {
        /// The Secret.
        name: String,
        /// The key asked for.
        key: String,
    },
    /// The `trust.jwks` Secret's key holds no JWKS.
    #[error("trust.jwks: Secret {name}/{key}: not a JWKS: {source}")]
    SecretNotJwks {
        /// The Secret.
        name: String,
        /// Its key.
        key: String,
        /// Why it is not one.
        source: crate::a2a::keys::KeyError,
    },
}

impl Error {
    /// `url` answered `status`, not the one expected.
    pub(super) fn status(url: &str, status: u16) -> Error {
        Error::Request {
            url: url.to_string(),
            problem: Problem::Status(status),
        }
    }

    /// What `url` answered is not `what` ("a JWKS", ...).
    pub(super) fn malformed(
        url: &str,
        what: &'static str,
        why: impl std::error::Error + Send + Sync + 'static,
    ) -> Error {
        Error::Request {
            url: url.to_string(),
            problem: Problem::Malformed {
                what,
                why: Box::new(why),
            },
        }
    }
}

/// What is wrong with a URL a directory's spec names.
#[derive(Debug, thiserror::Error)]
pub enum UrlProblem {
    /// Not a URL.
    #[error("{0}")]
    Parse(#[from] url::ParseError),
    /// `http://` without `allowHttp: true`.
    #[error("http:// is accepted only with allowHttp: true")]
    PlainHttp,
    /// Neither `https` nor `http`.
    #[error("scheme {0} is not http(s)")]
    Scheme(String),
    /// No host to connect to.
    #[error("no host")]
    NoHost,
    /// The Kubernetes API server's own address.
    #[error(
        "{0} is the Kubernetes API server's address; only an allowAddresses entry naming it \
         alone ({0}/32 or /128) lets a directory connect to it"
    )]
    ApiServer(IpAddr),
    /// An address the directory may not connect to.
    #[error(
        "{0} is not an address this directory may connect to; name its range in \
         allowAddresses to reach it"
    )]
    Address(IpAddr),
}

/// What went wrong with one request.
#[derive(Debug, thiserror::Error)]
pub enum Problem {
    /// No answer: the error and its causes, one line.
    #[error("{0}")]
    Failed(String),
    /// The answer is larger than what is read.
    #[error("the answer is larger than {0} bytes")]
    TooLarge(usize),
    /// An answer other than the one expected.
    #[error("HTTP {0}")]
    Status(u16),
    /// An answer that is not what was asked for (a change feed page, an ARD list, a JWKS).
    #[error("not {what}: {why}")]
    Malformed {
        /// What it should have been.
        what: &'static str,
        /// Why it is not.
        why: Box<dyn std::error::Error + Send + Sync>,
    },
}
