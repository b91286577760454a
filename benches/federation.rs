//! A federated sync: `agentcard-operator serve --from-dir` serves a directory of 10,000
//! generated cards (`FED_BENCH_CARDS`) with its change feed; an upstream reader (what each
//! replica runs per `spec.upstreams` entry) reads it all from the start, then refreshes with
//! nothing changed. Prints the time, the HTTP requests each took (counted by a proxy in
//! front, which also sets the directory's Host), and that no Kubernetes API request is made
//! (the reader has no client).
//!
//! `cargo bench --bench federation`

#[path = "../tests/support/dircards.rs"]
mod dircards;
#[allow(dead_code)]
#[path = "../tests/support/upstream.rs"]
mod upstream;

use std::io::Read;
use std::time::{Duration, Instant};

use agentcard_operator::crd::agentdirectory::Upstream;
use agentcard_operator::directory::federation::Reader;

fn main() {
    let n: usize = std::env::var("FED_BENCH_CARDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut server, addr) = dircards::serve_generated(dir.path(), n, 11, "dir.bench.test");
    let proxy = upstream::Proxy::start(addr, "dir.bench.test");
    // Wait until every card is listed (the feed then has them all).
    loop {
        let mut s = std::net::TcpStream::connect(proxy.addr).expect("connect");
        std::io::Write::write_all(&mut s, b"GET /v1/facets HTTP/1.1\r\nHost: x\r\n\r\n")
            .expect("write");
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        if out.contains(&format!("\"total\":{n}")) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let up: Upstream = serde_json::from_value(serde_json::json!({
        "name": "bench", "url": format!("http://{}", proxy.addr),
        "allowHttp": true, "allowAddresses": ["127.0.0.0/8"]
    }))
    .expect("upstream");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let mut reader = Reader::new(up, "urn:air:self.example:agentcard-operator:self".into());
    let before = proxy.requests().len();
    let t = Instant::now();
    let read = rt.block_on(reader.refresh()).expect("sync");
    let (entries, refused) = (read.entries, read.refused);
    let took = t.elapsed();
    let first = proxy.requests().len() - before;
    assert_eq!(entries.len(), n, "{refused} refused");
    let before = proxy.requests().len();
    let t = Instant::now();
    let again = rt.block_on(reader.refresh()).expect("refresh").entries;
    let idle = t.elapsed();
    let steady = proxy.requests().len() - before;
    assert_eq!(again.len(), n);
    println!(
        "federated sync of {n} entries from the start: {:.2} s, {first} HTTP requests, 0 Kubernetes API requests",
        took.as_secs_f64()
    );
    println!(
        "a refresh with nothing changed: {steady} HTTP request(s), {:.1} ms",
        idle.as_secs_f64() * 1e3
    );
    let _ = server.kill();
}
