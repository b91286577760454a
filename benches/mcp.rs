//! The directory's MCP tools over HTTP: `agentcard-operator serve --from-dir` serves a
//! directory of 10,000 generated cards (`MCP_BENCH_CARDS`); a client on one keep-alive
//! connection calls `search_agents` (JSON-RPC `tools/call`, the streamable HTTP transport as an
//! MCP SDK client sends it) with text, with a filter, and with both, and the same queries on the
//! native API for comparison. Prints p50/p90/p99 and requests per second of each.
//!
//! `cargo bench --bench mcp`

#[path = "../tests/support/dircards.rs"]
mod dircards;

use std::time::{Duration, Instant};

use serde_json::{json, Value};

const HOST: &str = "dir.bench.test";

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e3
}

fn report(what: &str, mut took: Vec<Duration>, total: Duration) {
    took.sort();
    println!(
        "{what:<44} p50 {:>6.2} ms  p90 {:>6.2} ms  p99 {:>6.2} ms  {:>6.0} req/s",
        percentile(&took, 0.5),
        percentile(&took, 0.9),
        percentile(&took, 0.99),
        took.len() as f64 / total.as_secs_f64()
    );
}

fn main() {
    let n: usize = std::env::var("MCP_BENCH_CARDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let rounds: usize = std::env::var("MCP_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut server, addr) = dircards::serve_generated(dir.path(), n, 7, HOST);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let client = reqwest::Client::new();
        let base = format!("http://{addr}");
        // Every card listed first.
        loop {
            let r = client
                .get(format!("{base}/v1/facets"))
                .header("Host", HOST)
                .send()
                .await;
            if let Ok(r) = r {
                if r.text()
                    .await
                    .unwrap_or_default()
                    .contains(&format!("\"total\":{n}"))
                {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let mut rng = dircards::Rng(3);
        for what in ["text", "skill filter", "text + tag filter"] {
            let mut mcp = Vec::new();
            let mut native = Vec::new();
            let (mut mcp_total, mut native_total) = (Duration::ZERO, Duration::ZERO);
            for i in 0..rounds {
                let word = rng.pick(dircards::WORDS).to_string();
                let skill = rng.pick(dircards::SKILLS).to_string();
                let tag = rng.pick(dircards::TAGS).to_string();
                let (args, query) = match what {
                    "text" => (json!({"q": word}), format!("q={word}")),
                    "skill filter" => (json!({"skill": skill}), format!("skill={skill}")),
                    _ => (
                        json!({"q": word, "tag": tag}),
                        format!("q={word}&tag={tag}"),
                    ),
                };
                let body = json!({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                    "params": {"name": "search_agents", "arguments": args}});
                let t = Instant::now();
                let r = client
                    .post(format!("{base}/mcp"))
                    .header("Host", HOST)
                    .header("Content-Type", "application/json")
                    .header("Accept", "application/json, text/event-stream")
                    .header("MCP-Protocol-Version", "2025-11-25")
                    .body(body.to_string())
                    .send()
                    .await
                    .expect("mcp");
                let v: Value = serde_json::from_slice(&r.bytes().await.expect("body"))
                    .expect("JSON-RPC answer");
                let took = t.elapsed();
                assert!(
                    v["result"]["structuredContent"]["agents"].is_array(),
                    "not a result: {v}"
                );
                mcp.push(took);
                mcp_total += took;
                let t = Instant::now();
                let r = client
                    .get(format!("{base}/v1/agents?{query}"))
                    .header("Host", HOST)
                    .send()
                    .await
                    .expect("native");
                let _ = r.bytes().await.expect("body");
                let took = t.elapsed();
                native.push(took);
                native_total += took;
            }
            report(
                &format!("MCP search_agents ({what}), {n} cards"),
                mcp,
                mcp_total,
            );
            report(
                &format!("native GET /v1/agents ({what})"),
                native,
                native_total,
            );
        }
    });
    let _ = server.kill();
}
