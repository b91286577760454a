//! Metrics of the card server, registered in the process-wide registry.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::http::Route;

/// Bounded route label.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum RouteLabel {
    /// A card.
    card,
    /// The JWKS.
    jwks,
    /// A host's did:web document.
    did,
    /// A card's REST `extendedAgentCard` path.
    extended,
    /// A CORS preflight.
    preflight,
    /// Nothing at that host and path.
    not_found,
    /// Other methods.
    method_not_allowed,
    /// Over the request limits.
    too_large,
    /// A directory's registry API or manifest.
    directory,
    /// A malformed request.
    bad_request,
    /// Refused while the process answers as many requests as it may.
    busy,
}

impl From<Route> for RouteLabel {
    fn from(r: Route) -> Self {
        match r {
            Route::Card => RouteLabel::card,
            Route::Jwks => RouteLabel::jwks,
            Route::Did => RouteLabel::did,
            Route::Extended => RouteLabel::extended,
            Route::Preflight => RouteLabel::preflight,
            Route::NotFound => RouteLabel::not_found,
            Route::MethodNotAllowed => RouteLabel::method_not_allowed,
            Route::TooLarge => RouteLabel::too_large,
            Route::Directory => RouteLabel::directory,
            Route::BadRequest => RouteLabel::bad_request,
            Route::Busy => RouteLabel::busy,
        }
    }
}

/// Labels of a served request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// What the request resolved to.
    pub route: RouteLabel,
    /// The HTTP status code.
    pub code: u16,
}

/// The (route, status) pairs of nearly every request, resolved to counters once so the hot
/// path does not hash label sets.
/// Refusals at the limits are among them, so their series exist (at 0) for alerts from the start.
const COMMON: [(Route, u16); 7] = [
    (Route::Card, 200),
    (Route::Card, 304),
    (Route::Jwks, 200),
    (Route::Jwks, 304),
    (Route::NotFound, 404),
    (Route::Preflight, 204),
    (Route::Busy, 503),
];

/// Counters and gauges of the public HTTP server.
pub struct HttpMetrics {
    /// Requests answered, by route and status.
    pub requests: Family<RequestLabels, Counter>,
    /// Cards currently in the index.
    pub cards: Gauge,
    /// Open client connections.
    pub connections: Gauge,
    /// Directory requests answered from the cache of rendered responses.
    pub directory_cache_hits: Counter,
    /// Cacheable directory requests that had to be rendered.
    pub directory_cache_misses: Counter,
    /// Bytes the cache of rendered directory responses holds (set when scraped).
    pub directory_cache_bytes: Gauge,
    common: Vec<((Route, u16), Counter)>,
}

impl Default for HttpMetrics {
    fn default() -> Self {
        let requests: Family<RequestLabels, Counter> = Family::default();
        let common = COMMON
            .iter()
            .map(|&(route, code)| {
                (
                    (route, code),
                    requests
                        .get_or_create(&RequestLabels {
                            route: route.into(),
                            code,
                        })
                        .clone(),
                )
            })
            .collect();
        HttpMetrics {
            requests,
            cards: Gauge::default(),
            connections: Gauge::default(),
            directory_cache_hits: Counter::default(),
            directory_cache_misses: Counter::default(),
            directory_cache_bytes: Gauge::default(),
            common,
        }
    }
}

impl HttpMetrics {
    /// Register the metrics in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "agentcard_http_requests",
            "HTTP requests answered",
            self.requests.clone(),
        );
        registry.register(
            "agentcard_served_cards",
            "Cards in the serving index",
            self.cards.clone(),
        );
        registry.register(
            "agentcard_http_connections",
            "Open client connections",
            self.connections.clone(),
        );
        registry.register(
            "agentcard_directory_cache_hits",
            "Directory requests answered from the cache of rendered responses",
            self.directory_cache_hits.clone(),
        );
        registry.register(
            "agentcard_directory_cache_misses",
            "Cacheable directory requests rendered (not found in the cache)",
            self.directory_cache_misses.clone(),
        );
        registry.register(
            "agentcard_directory_cache_bytes",
            "Bytes held by the cache of rendered directory responses",
            self.directory_cache_bytes.clone(),
        );
    }

    /// Count one answered request.
    pub fn observe(&self, route: Route, code: u16) {
        if let Some((_, c)) = self.common.iter().find(|(k, _)| *k == (route, code)) {
            c.inc();
            return;
        }
        self.requests
            .get_or_create(&RequestLabels {
                route: route.into(),
                code,
            })
            .inc();
    }
}
