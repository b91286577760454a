//! Counting the operator's own calls to the API server, by verb and resource: the cost of a
//! card in API calls, read from `/metrics` (`agentcard_api_requests_total`) beside the
//! reconcile count.
//!
//! Data flow: every request of the operator's [`kube::Client`] passes a `tower` map layer
//! ([`counted_client`]) that classifies its method and path ([`classify`], pure: namespaces,
//! names and query values are dropped, so labels stay bounded) and increments the counter.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

/// Labels of one counted request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete` or `other`.
    pub verb: &'static str,
    /// The resource, with its subresource (`agentcards/status`), or `other`.
    pub resource: String,
}

/// Requests sent to the API server, by verb and resource.
pub type ApiCalls = Family<CallLabels, Counter>;

/// The verb and resource of a request to the Kubernetes API (`None` for paths that are not
/// resource paths, such as `/version`).
pub fn classify(method: &http::Method, uri: &http::Uri) -> Option<CallLabels> {
    let segments: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
    // /api/v1/... or /apis/<group>/<version>/...
    let rest = match segments.first() {
        Some(&"api") => segments.get(2..)?,
        Some(&"apis") => segments.get(3..)?,
        _ => return None,
    };
    let rest = match rest {
        ["namespaces", _, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    let (resource, named) = match rest {
        [resource] => ((*resource).to_string(), false),
        [resource, _name] => ((*resource).to_string(), true),
        [resource, _name, sub, ..] => (format!("{resource}/{sub}"), true),
        [] => return None,
    };
    let watch = uri
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
    let verb = match *method {
        http::Method::GET if watch => "watch",
        http::Method::GET if named => "get",
        http::Method::GET => "list",
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE => "delete",
        _ => "other",
    };
    Some(CallLabels { verb, resource })
}

/// A client for `config` whose every request is counted in `calls`.
pub fn counted_client(config: kube::Config, calls: ApiCalls) -> Result<kube::Client, kube::Error> {
    let layer = tower::util::MapRequestLayer::new(move |req: http::Request<kube::client::Body>| {
        if let Some(labels) = classify(req.method(), req.uri()) {
            calls.get_or_create(&labels).inc();
        }
        req
    });
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&layer)
        .build())
}

/// The request counts of a `/metrics` scrape, by `(verb, resource)`: how tests and the load
/// benchmark read what the operator asked of the API server.
pub fn read_counts(scrape: &str) -> std::collections::BTreeMap<(String, String), f64> {
    let mut out = std::collections::BTreeMap::new();
    for line in scrape.lines() {
        let Some((labels, value)) = line
            .strip_prefix("agentcard_api_requests_total{")
            .and_then(|rest| rest.split_once("} "))
        else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix("=\""))
                .map(|v| v.trim_end_matches('"').to_string())
                .unwrap_or_default()
        };
        let value: f64 = value.trim().parse().unwrap_or(0.0);
        out.insert((label("verb"), label("resource")), value);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_read_back_from_what_metrics_serves() {
        // The operator's own metrics, as `/metrics` encodes them.
        let metrics = super::super::metrics::ControllerMetrics::default();
        let calls = &metrics.api_calls;
        for (method, uri) in [
            ("PATCH", "/api/v1/namespaces/a/configmaps/x"),
            ("PATCH", "/api/v1/namespaces/b/configmaps/y"),
            ("GET", "/api/v1/configmaps?watch=true"),
        ] {
            let labels = classify(&method.parse().unwrap(), &uri.parse().unwrap()).unwrap();
            calls.get_or_create(&labels).inc();
        }
        let mut registry = prometheus_client::registry::Registry::default();
        metrics.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let counts = read_counts(&text);
        let at = |v: &str, r: &str| counts.get(&(v.to_string(), r.to_string())).copied();
        assert_eq!(at("patch", "configmaps"), Some(2.0), "{text}");
        assert_eq!(at("watch", "configmaps"), Some(1.0), "{text}");
        assert_eq!(counts.len(), 2, "{text}");
    }

    fn c(method: &str, uri: &str) -> Option<(&'static str, String)> {
        let m: http::Method = method.parse().unwrap();
        classify(&m, &uri.parse().unwrap()).map(|l| (l.verb, l.resource))
    }

    #[test]
    fn verbs_and_resources_without_names_or_namespaces() {
        let s = |v: &'static str, r: &str| Some((v, r.to_string()));
        assert_eq!(
            c("GET", "/api/v1/namespaces/team/configmaps/agentcard-x"),
            s("get", "configmaps")
        );
        assert_eq!(
            c("GET", "/api/v1/configmaps?labelSelector=a%3Db"),
            s("list", "configmaps")
        );
        assert_eq!(
            c(
                "GET",
                "/api/v1/namespaces/team/configmaps?watch=true&resourceVersion=5"
            ),
            s("watch", "configmaps")
        );
        assert_eq!(
            c("PATCH", "/apis/agentcard.dev/v1alpha1/namespaces/team/agentcards/weather/status?fieldManager=x"),
            s("patch", "agentcards/status")
        );
        assert_eq!(
            c(
                "POST",
                "/apis/networking.k8s.io/v1/namespaces/ops/ingresses"
            ),
            s("create", "ingresses")
        );
        assert_eq!(
            c(
                "DELETE",
                "/apis/networking.k8s.io/v1/namespaces/ops/ingresses/a"
            ),
            s("delete", "ingresses")
        );
        assert_eq!(c("GET", "/api/v1/namespaces"), s("list", "namespaces"));
        assert_eq!(c("GET", "/api/v1/namespaces/team"), s("get", "namespaces"));
        assert_eq!(c("GET", "/version"), None);
    }
}
