//! Generated A2A v1.0 cards (as JSON, in the ProtoJSON shape the SDKs parse strictly) full of
//! the awkward cases canonicalisation must get right: numbers that print differently in every
//! language, keys outside the BMP, control characters, empties at every level, explicit
//! defaults, every security scheme.

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use serde_json::{json, Map, Number, Value};

/// Strings: plain, empty, non-ASCII, astral, control characters, JSON-special characters.
pub fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[a-zA-Z0-9 ._-]{1,12}",
        1 => Just(String::new()),
        2 => prop::collection::vec(
            prop_oneof![
                Just('é'), Just('日'), Just('😀'), Just('\u{10FFFF}'), Just('\u{FB00}'),
                Just('\u{1}'), Just('\u{1f}'), Just('\u{7f}'), Just('\n'), Just('\t'), Just('\u{8}'),
                Just('"'), Just('\\'), Just('/'), Just('<'), Just('&'), Just('\u{2028}'), Just('a'),
                Just('\u{FEFF}'), Just('\u{E000}'),
            ],
            1..8
        )
        .prop_map(|cs| cs.into_iter().collect()),
    ]
}

/// Non-empty strings.
pub fn word() -> impl Strategy<Value = String> {
    "[a-zA-Z][a-zA-Z0-9_.-]{0,10}"
}

/// Numbers that stress ECMAScript double formatting.
#[allow(clippy::excessive_precision)] // digits past a double's precision are what is tested
pub fn number() -> impl Strategy<Value = Value> {
    let awkward = prop::sample::select(vec![
        0.0,
        -0.0,
        1.0,
        250.0,
        0.1,
        0.5,
        -12.75,
        1e21,
        1e20,
        1e-7,
        1e-6,
        5e-324,
        1.7976931348623157e308,
        2.2250738585072014e-308,
        123456789.123456789,
        9007199254740993.0,
        1e300,
        -1e-300,
        333333333.33333333,
        4.35,
        0.000001234,
    ]);
    prop_oneof![
        2 => awkward.prop_map(|f| Value::Number(Number::from_f64(f).unwrap())),
        1 => any::<i64>().prop_map(|i| json!(i)),
        1 => any::<u64>().prop_map(|u| json!(u)),
        1 => (9007199254740990u64..9007199254741000u64).prop_map(|u| json!(u)),
        2 => any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| Value::Number(Number::from_f64(f).unwrap())),
        1 => (-1000i32..1000).prop_map(|i| json!(f64::from(i) / 8.0)),
    ]
}

/// Free-form JSON for extension params: nested, with empties and nulls.
pub fn free_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(text(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// An object for `params`.
pub fn params() -> impl Strategy<Value = Value> {
    prop::collection::btree_map(text(), free_json(), 0..5)
        .prop_map(|m| Value::Object(m.into_iter().collect()))
}

fn put(m: &mut Map<String, Value>, k: &str, v: Option<Value>) {
    if let Some(v) = v {
        m.insert(k.to_string(), v);
    }
}

fn strings(range: std::ops::Range<usize>) -> impl Strategy<Value = Value> {
    prop::collection::vec(text(), range).prop_map(|v| json!(v))
}

fn interface() -> impl Strategy<Value = Value> {
    (
        text(),
        prop::sample::select(vec!["JSONRPC", "GRPC", "HTTP+JSON", "urn:example:binding"]),
        prop::sample::select(vec!["1.0", "0.3", ""]),
        proptest::option::of(text()),
    )
        .prop_map(|(url, binding, version, tenant)| {
            let mut m = Map::new();
            m.insert("url".into(), json!(url));
            m.insert("protocolBinding".into(), json!(binding));
            m.insert("protocolVersion".into(), json!(version));
            put(&mut m, "tenant", tenant.map(|t| json!(t)));
            Value::Object(m)
        })
}

fn extension() -> impl Strategy<Value = Value> {
    (
        text(),
        proptest::option::of(text()),
        proptest::option::of(any::<bool>()),
        proptest::option::of(params()),
    )
        .prop_map(|(uri, description, required, params)| {
            let mut m = Map::new();
            m.insert("uri".into(), json!(uri));
            put(&mut m, "description", description.map(|d| json!(d)));
            put(&mut m, "required", required.map(|r| json!(r)));
            put(&mut m, "params", params);
            Value::Object(m)
        })
}

fn scopes() -> impl Strategy<Value = Value> {
    prop::collection::btree_map(word(), text(), 0..3).prop_map(|m| json!(m))
}

fn scheme() -> impl Strategy<Value = Value> {
    let desc = || proptest::option::of(text());
    prop_oneof![
        (desc(), prop::sample::select(vec!["header", "query", "cookie"]), text()).prop_map(|(d, l, n)| {
            let mut m = Map::new();
            put(&mut m, "description", d.map(|d| json!(d)));
            m.insert("location".into(), json!(l));
            m.insert("name".into(), json!(n));
            json!({"apiKeySecurityScheme": m})
        }),
        (desc(), text(), proptest::option::of(text())).prop_map(|(d, s, b)| {
            let mut m = Map::new();
            put(&mut m, "description", d.map(|d| json!(d)));
            m.insert("scheme".into(), json!(s));
            put(&mut m, "bearerFormat", b.map(|b| json!(b)));
            json!({"httpAuthSecurityScheme": m})
        }),
        (desc(), 0..5usize, text(), text(), scopes(), proptest::option::of(any::<bool>()), proptest::option::of(text()))
            .prop_map(|(d, flow, u1, u2, scopes, pkce, meta)| {
                let f = match flow {
                    0 => {
                        let mut f = json!({"authorizationUrl": u1, "tokenUrl": u2, "scopes": scopes});
                        if let Some(p) = pkce {
                            f["pkceRequired"] = json!(p);
                        }
                        json!({"authorizationCode": f})
                    }
                    1 => json!({"clientCredentials": {"tokenUrl": u1, "refreshUrl": u2, "scopes": scopes}}),
                    2 => json!({"implicit": {"authorizationUrl": u1, "scopes": scopes}}),
                    3 => json!({"password": {"tokenUrl": u1, "scopes": scopes}}),
                    _ => json!({"deviceCode": {"deviceAuthorizationUrl": u1, "tokenUrl": u2, "scopes": scopes}}),
                };
                let mut m = Map::new();
                put(&mut m, "description", d.map(|d| json!(d)));
                m.insert("flows".into(), f);
                put(&mut m, "oauth2MetadataUrl", meta.map(|u| json!(u)));
                json!({"oauth2SecurityScheme": m})
            }),
        (desc(), text()).prop_map(|(d, u)| {
            let mut m = Map::new();
            put(&mut m, "description", d.map(|d| json!(d)));
            m.insert("openIdConnectUrl".into(), json!(u));
            json!({"openIdConnectSecurityScheme": m})
        }),
        desc().prop_map(|d| {
            let mut m = Map::new();
            put(&mut m, "description", d.map(|d| json!(d)));
            json!({"mtlsSecurityScheme": m})
        }),
    ]
}

fn requirements() -> impl Strategy<Value = Value> {
    prop::collection::vec(
        prop::collection::btree_map(word(), prop::collection::vec(text(), 0..3), 0..3).prop_map(
            |m| {
                let schemes: Map<String, Value> = m
                    .into_iter()
                    .map(|(k, v)| (k, json!({"list": v})))
                    .collect();
                json!({"schemes": schemes})
            },
        ),
        0..3,
    )
    .prop_map(Value::Array)
}

fn skill() -> impl Strategy<Value = Value> {
    (
        text(),
        text(),
        text(),
        strings(0..3),
        proptest::option::of(strings(0..3)),
        proptest::option::of(strings(0..2)),
        proptest::option::of(strings(0..2)),
        proptest::option::of(requirements()),
    )
        .prop_map(
            |(id, name, description, tags, examples, input, output, reqs)| {
                let mut m = Map::new();
                m.insert("id".into(), json!(id));
                m.insert("name".into(), json!(name));
                m.insert("description".into(), json!(description));
                m.insert("tags".into(), tags);
                put(&mut m, "examples", examples);
                put(&mut m, "inputModes", input);
                put(&mut m, "outputModes", output);
                put(&mut m, "securityRequirements", reqs);
                Value::Object(m)
            },
        )
}

/// A whole card in ProtoJSON shape (not necessarily one that passes validation).
pub fn card() -> impl Strategy<Value = Value> {
    let head = (
        text(),
        text(),
        text(),
        prop::collection::vec(interface(), 0..3),
        proptest::option::of((text(), text())),
        proptest::option::of(text()),
        proptest::option::of(text()),
    );
    let caps = (
        proptest::option::of(any::<bool>()),
        proptest::option::of(any::<bool>()),
        proptest::option::of(any::<bool>()),
        proptest::option::of(prop::collection::vec(extension(), 0..3)),
    );
    let rest = (
        proptest::option::of(prop::collection::btree_map(word(), scheme(), 0..4)),
        proptest::option::of(requirements()),
        strings(0..3),
        strings(0..3),
        prop::collection::vec(skill(), 0..3),
    );
    (head, caps, rest).prop_map(|(head, caps, rest)| {
        let (name, description, version, ifaces, provider, doc, icon) = head;
        let (streaming, push, extended, extensions) = caps;
        let (schemes, reqs, inputs, outputs, skills) = rest;
        let mut m = Map::new();
        m.insert("name".into(), json!(name));
        m.insert("description".into(), json!(description));
        m.insert("version".into(), json!(version));
        m.insert("supportedInterfaces".into(), json!(ifaces));
        put(
            &mut m,
            "provider",
            provider.map(|(o, u)| json!({"organization": o, "url": u})),
        );
        put(&mut m, "documentationUrl", doc.map(|d| json!(d)));
        put(&mut m, "iconUrl", icon.map(|d| json!(d)));
        let mut c = Map::new();
        put(&mut c, "streaming", streaming.map(|b| json!(b)));
        put(&mut c, "pushNotifications", push.map(|b| json!(b)));
        put(&mut c, "extendedAgentCard", extended.map(|b| json!(b)));
        put(&mut c, "extensions", extensions.map(|e| json!(e)));
        m.insert("capabilities".into(), Value::Object(c));
        put(&mut m, "securitySchemes", schemes.map(|s| json!(s)));
        put(&mut m, "securityRequirements", reqs);
        m.insert("defaultInputModes".into(), inputs);
        m.insert("defaultOutputModes".into(), outputs);
        m.insert("skills".into(), json!(skills));
        Value::Object(m)
    })
}

/// `n` cards from a fixed seed, so a failure names a reproducible case.
pub fn sample(n: usize) -> Vec<Value> {
    let mut runner = TestRunner::deterministic();
    let strategy = card();
    (0..n)
        .map(|_| strategy.new_tree(&mut runner).expect("generate").current())
        .collect()
}
