//! A card's REST `GetExtendedAgentCard` (`GET <backend path>/extendedAgentCard`) as the card
//! server answers it, when the operator routes that path to itself
//! (`status.served.extendedPath`).
//!
//! Data flow: [`super::server`] finds an [`ExtendedRoute`] in the index and calls [`answer`]:
//! - the card has no extended card: the A2A `ExtendedAgentCardNotConfiguredError` (HTTP 400,
//!   `FAILED_PRECONDITION`, reason `EXTENDED_AGENT_CARD_NOT_CONFIGURED`), to anyone;
//! - no bearer token, or one [`Bearer`] refuses: 401 with `WWW-Authenticate: Bearer` (RFC 6750
//!   §3, `error="invalid_token"` when one was sent) and the A2A REST error body;
//! - the issuer or the API server cannot be asked: 503 with `Retry-After`;
//! - accepted: the extended card's exact signed bytes with a strong ETag (304 on a match),
//!   `Cache-Control: private` and `Vary: Authorization`, so no shared cache keeps it.
//!
//! Errors carry `Cache-Control: no-store`.

use http::header::{AUTHORIZATION, RETRY_AFTER, VARY, WWW_AUTHENTICATE};
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode};
use serde_json::json;

use super::http::{document, json_answer, method_not_allowed, Body, Route};
use crate::bearer::{Bearer, Denied};
use crate::index::ExtendedRoute;

/// The A2A error's reason (`google.rpc.ErrorInfo.reason`) for a card with no extended card.
pub const NOT_CONFIGURED: &str = "EXTENDED_AGENT_CARD_NOT_CONFIGURED";

/// Answer a request for `route` on `host`, checking the caller's token with `bearer` (none:
/// nobody is accepted).
pub async fn answer(
    route: &ExtendedRoute,
    bearer: Option<&Bearer>,
    method: &Method,
    headers: &HeaderMap,
    host: Option<&str>,
) -> (Route, Response<Body>) {
    let head = *method == Method::HEAD;
    let (auth, bearer) = match (&route.auth, bearer) {
        (Some(auth), Some(bearer)) if matches!(*method, Method::GET | Method::HEAD) => {
            (auth, bearer)
        }
        _ => return answer_unchecked(route, method, host),
    };
    let authorization = headers.get(AUTHORIZATION).and_then(|v| v.to_str().ok());
    let resp = match bearer.check(auth, authorization).await {
        Err(Denied::Unavailable(why)) => {
            tracing::warn!(error = %why, "an extended card's caller could not be checked");
            unavailable("the caller's token cannot be checked now", head)
        }
        Err(denied) => unauthenticated(host, &denied, head),
        Ok(()) => match &route.content {
            None => unavailable("the extended card is not published yet", head),
            Some(doc) => {
                let mut resp = document(doc, head, headers);
                resp.headers_mut().insert(
                    VARY,
                    HeaderValue::from_static("Authorization, Accept-Encoding"),
                );
                resp
            }
        },
    };
    (Route::Extended, resp)
}

/// The answer without a token check: the error for a card with no extended card, 405 for a
/// method other than GET and HEAD, 401 otherwise.
pub fn answer_unchecked(
    route: &ExtendedRoute,
    method: &Method,
    host: Option<&str>,
) -> (Route, Response<Body>) {
    let head = *method == Method::HEAD;
    let resp = if !matches!(*method, Method::GET | Method::HEAD) {
        method_not_allowed()
    } else if route.auth.is_none() {
        a2a_error(
            StatusCode::BAD_REQUEST,
            "FAILED_PRECONDITION",
            Some(NOT_CONFIGURED),
            "this agent has no authenticated extended card",
            head,
        )
    } else {
        unauthenticated(host, &Denied::Missing, head)
    };
    (Route::Extended, resp)
}

/// An A2A REST error (`{"error": {"code", "status", "message", "details"}}`, the shape the
/// SDKs map back to their error types), not cached.
fn a2a_error(
    status: StatusCode,
    grpc_status: &str,
    reason: Option<&str>,
    message: &str,
    head: bool,
) -> Response<Body> {
    let mut error = json!({"code": status.as_u16(), "status": grpc_status, "message": message});
    if let Some(reason) = reason {
        error["details"] = json!([{
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": reason,
            "domain": "a2a-protocol.org",
            "metadata": {},
        }]);
    }
    json_answer(status, &json!({ "error": error }), head)
}

/// 401 with the challenge of RFC 6750 §3: the realm is the host; a token that was sent and
/// refused adds `error="invalid_token"` and why.
fn unauthenticated(host: Option<&str>, denied: &Denied, head: bool) -> Response<Body> {
    let mut resp = a2a_error(
        StatusCode::UNAUTHORIZED,
        "UNAUTHENTICATED",
        None,
        &denied.to_string(),
        head,
    );
    let realm = quotable(host.unwrap_or("agent"));
    let challenge = match denied {
        Denied::Missing => format!("Bearer realm=\"{realm}\""),
        _ => format!(
            "Bearer realm=\"{realm}\", error=\"invalid_token\", error_description=\"{}\"",
            quotable(&denied.to_string())
        ),
    };
    if let Ok(v) = HeaderValue::from_str(&challenge) {
        resp.headers_mut().insert(WWW_AUTHENTICATE, v);
    }
    resp
}

/// 503: try again shortly.
fn unavailable(message: &str, head: bool) -> Response<Body> {
    let mut resp = a2a_error(
        StatusCode::SERVICE_UNAVAILABLE,
        "UNAVAILABLE",
        None,
        message,
        head,
    );
    resp.headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from_static("5"));
    resp
}

/// `text` as a quoted-string's content: visible ASCII and spaces, without `"` and `\`.
fn quotable(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '"' | '\\' => '\'',
            c if c == ' ' || c.is_ascii_graphic() => c,
            _ => '?',
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{ExtendedAuth, ServiceAccountAuth};
    use crate::index::Published;
    use http::header::CACHE_CONTROL;
    use http_body_util::BodyExt;
    use std::sync::Arc;
    use std::time::UNIX_EPOCH;

    fn route(auth: bool) -> ExtendedRoute {
        ExtendedRoute {
            path: "/a2a/extendedAgentCard".into(),
            auth: auth.then(|| {
                Arc::new(ExtendedAuth {
                    service_account: Some(ServiceAccountAuth {
                        audiences: vec!["agents".into()],
                        namespaces: vec![],
                    }),
                    ..Default::default()
                })
            }),
            content: Some(Arc::new(
                Published::new("{\"name\":\"x\"}", UNIX_EPOCH, 60).private(60),
            )),
        }
    }

    async fn body(resp: Response<Body>) -> serde_json::Value {
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test]
    async fn no_extended_card_is_the_a2a_error_to_anyone() {
        let bearer = Bearer::new(&Default::default(), None).unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, HeaderValue::from_static("Bearer whatever"));
        let (route_label, resp) = answer(
            &route(false),
            Some(&bearer),
            &Method::GET,
            &headers,
            Some("h"),
        )
        .await;
        assert_eq!(route_label, Route::Extended);
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
        assert_eq!(resp.headers()[CACHE_CONTROL], "no-store");
        let v = body(resp).await;
        assert_eq!(v["error"]["status"], "FAILED_PRECONDITION");
        assert_eq!(v["error"]["details"][0]["reason"], NOT_CONFIGURED);
        assert_eq!(v["error"]["details"][0]["domain"], "a2a-protocol.org");
    }

    #[tokio::test]
    async fn without_a_token_it_is_a_bearer_challenge_and_nothing_of_the_card() {
        let bearer = Bearer::new(&Default::default(), None).unwrap();
        let (_, resp) = answer(
            &route(true),
            Some(&bearer),
            &Method::GET,
            &HeaderMap::new(),
            Some("agent.example.com"),
        )
        .await;
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(
            resp.headers()[WWW_AUTHENTICATE],
            "Bearer realm=\"agent.example.com\""
        );
        let v = body(resp).await;
        assert_eq!(v["error"]["status"], "UNAUTHENTICATED");
        assert!(!v.to_string().contains("\"name\""));
        // No checker at all: nobody is let in.
        let (_, resp) = answer(&route(true), None, &Method::GET, &HeaderMap::new(), None).await;
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
        let (_, resp) = answer(&route(true), None, &Method::POST, &HeaderMap::new(), None).await;
        assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
    }

    #[test]
    fn a_challenge_never_carries_a_quote_or_a_control_character() {
        assert_eq!(quotable("claim \"a\\b\"\n"), "claim 'a'b'?");
    }
}
