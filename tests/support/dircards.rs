//! Generated cards for the directory's differential test and benchmark: small vocabularies so
//! filters hit often, a deterministic generator so runs repeat. Shared by `tests/` and
//! `benches/` (included by path).
#![allow(dead_code)]

use serde_json::{json, Value};

/// A deterministic xorshift generator.
pub struct Rng(pub u64);

impl Rng {
    /// The next number.
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A number below `n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// One of `items`.
    pub fn pick<'a>(&mut self, items: &'a [&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

pub const SKILLS: &[&str] = &[
    "forecast",
    "translate",
    "summarize",
    "book-flight",
    "book-hotel",
    "quote",
    "trade",
    "search",
    "classify",
    "extract",
    "route",
    "schedule",
    "remind",
    "transcribe",
    "draw",
    "code-review",
    "deploy",
    "monitor",
    "alert",
    "refund",
];
pub const TAGS: &[&str] = &[
    "weather", "travel", "finance", "language", "ops", "security", "media", "legal", "health",
    "retail", "hr", "devtools", "data", "maps", "music", "sports", "news", "science", "edu",
    "food",
];
pub const PROVIDERS: &[&str] = &[
    "Acme", "Globex", "Initech", "Umbrella", "Hooli", "Stark", "Wayne", "Tyrell",
];
pub const BINDINGS: &[&str] = &["JSONRPC", "GRPC", "HTTP+JSON"];
pub const MODES: &[&str] = &[
    "text/plain",
    "application/json",
    "image/png",
    "audio/wav",
    "text/markdown",
];
pub const EXTENSIONS: &[&str] = &[
    "https://ext.example.com/tracing",
    "https://ext.example.com/payments",
    "https://ext.example.com/memory",
];
pub const WORDS: &[&str] = &[
    "fast",
    "reliable",
    "agent",
    "helps",
    "with",
    "daily",
    "tasks",
    "city",
    "planning",
    "budget",
    "reports",
    "images",
    "voice",
    "notes",
    "calendar",
    "team",
    "customer",
    "support",
    "global",
    "secure",
    "private",
    "open",
    "smart",
    "tiny",
    "large",
    "model",
    "answers",
    "questions",
];

/// `n` cards: `(namespace, name, host, card JSON)`, spread over `namespaces` namespaces.
pub fn generate(n: usize, namespaces: usize, seed: u64) -> Vec<(String, String, String, Value)> {
    let mut r = Rng(seed.max(1));
    (0..n)
        .map(|i| {
            let ns = format!("ns-{}", r.below(namespaces));
            let name = format!("agent-{i:06}");
            let host = format!("{name}.{ns}.example.com");
            let skills: Vec<Value> = (0..1 + r.below(3))
                .map(|_| {
                    let id = r.pick(SKILLS).to_string();
                    let tags: Vec<&str> = (0..1 + r.below(3)).map(|_| r.pick(TAGS)).collect();
                    let examples: Vec<String> = (0..r.below(4))
                        .map(|_| format!("{} {}", r.pick(WORDS), r.pick(WORDS)))
                        .collect();
                    let mut s = json!({"id": id, "name": format!("{id} skill"),
                        "description": format!("{} {} {}", r.pick(WORDS), r.pick(WORDS), r.pick(WORDS)),
                        "tags": tags, "examples": examples});
                    if r.below(3) == 0 {
                        s["inputModes"] = json!([r.pick(MODES)]);
                    }
                    s
                })
                .collect();
            let mut extensions = Vec::new();
            if r.below(4) == 0 {
                extensions.push(json!({"uri": r.pick(EXTENSIONS)}));
            }
            let card = json!({
                "name": format!("{} {} agent", r.pick(WORDS), r.pick(TAGS)),
                "description": (0..8).map(|_| r.pick(WORDS)).collect::<Vec<_>>().join(" "),
                "version": format!("1.{}.0", r.below(10)),
                "provider": {"organization": r.pick(PROVIDERS), "url": "https://example.com"},
                "supportedInterfaces": [{"url": format!("https://{host}/a2a"), "protocolBinding": r.pick(BINDINGS), "protocolVersion": "1.0"}],
                "capabilities": {"streaming": r.below(2) == 0, "pushNotifications": r.below(3) == 0, "extensions": extensions},
                "defaultInputModes": [r.pick(MODES)],
                "defaultOutputModes": [r.pick(MODES), r.pick(MODES)],
                "skills": skills,
                "signatures": [{"protected": "eyJhbGciOiJFUzI1NiJ9", "signature": "c2ln"}],
            });
            (ns, name, host, card)
        })
        .collect()
}

/// `agentcard-operator serve --from-dir` over `n` generated cards (`seed`) written under `dir`,
/// with a public directory of them on `host`; the process and its public address.
pub fn serve_generated(
    dir: &std::path::Path,
    n: usize,
    seed: u64,
    host: &str,
) -> (std::process::Child, std::net::SocketAddr) {
    let cards = dir.join("cards");
    std::fs::create_dir_all(&cards).expect("mkdir");
    for (_, _, card_host, json) in generate(n, 50, seed) {
        std::fs::write(cards.join(format!("{card_host}.json")), json.to_string()).expect("write");
    }
    serve_dir(&cards, host, &dir.join("server.log"))
}

/// `agentcard-operator serve --from-dir cards` with a public directory on `host`, its log in
/// `log`; the process and its public address once it listens.
pub fn serve_dir(
    cards: &std::path::Path,
    host: &str,
    log: &std::path::Path,
) -> (std::process::Child, std::net::SocketAddr) {
    // Handed to the caller, who kills it.
    #[allow(clippy::zombie_processes)]
    let server = std::process::Command::new(env!("CARGO_BIN_EXE_agentcard-operator"))
        .args(["serve", "--from-dir"])
        .arg(cards)
        .args(["--directory-host", host, "--listen", "127.0.0.1:0"])
        .args(["--admin-listen", "127.0.0.1:0"])
        .stderr(std::fs::File::create(log).expect("log"))
        .spawn()
        .expect("serve");
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(a) = text
            .split("listening public=")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
        {
            let addr = a.trim_end_matches(',').parse().expect("addr");
            return (server, addr);
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
