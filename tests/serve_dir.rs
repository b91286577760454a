//! The card server over a directory (`serve --from-dir`): every header and status of the
//! public port, checked on the wire.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use support::http::{eventually, request, Server};

const HOST: &str = "agents.example.com";
const CARD: &str = "/.well-known/agent-card.json";

fn card_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let v = support::vectors();
    std::fs::copy(
        v.join("cards/v1-full.signed.json"),
        dir.path().join(format!("{HOST}.json")),
    )
    .unwrap();
    std::fs::copy(
        v.join("cards/v1-minimal.signed.json"),
        dir.path().join("other.example.org.json"),
    )
    .unwrap();
    std::fs::copy(v.join("keys/jwks.json"), dir.path().join("jwks.json")).unwrap();
    dir
}

fn serve(dir: &Path, extra: &[&str]) -> Server {
    let d = dir.to_str().unwrap();
    let mut args = vec!["--from-dir", d];
    args.extend_from_slice(extra);
    let s = Server::start(&args, &[]);
    s.wait_ready(Duration::from_secs(10));
    s
}

#[test]
fn get_returns_the_file_bytes_with_caching_and_cors_headers() {
    let dir = card_dir();
    let s = serve(dir.path(), &[]);
    let r = s.get(HOST, CARD, &[]);
    assert_eq!(r.status, 200);
    assert_eq!(
        r.body,
        std::fs::read(dir.path().join(format!("{HOST}.json"))).unwrap()
    );
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("cache-control"), Some("public, max-age=300"));
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    let etag = r.header("etag").unwrap();
    assert!(
        etag.starts_with('"') && etag.ends_with('"') && !etag.starts_with("W/"),
        "strong ETag: {etag}"
    );
    let mtime = std::fs::metadata(dir.path().join(format!("{HOST}.json")))
        .unwrap()
        .modified()
        .unwrap();
    assert_eq!(
        r.header("last-modified"),
        Some(httpdate::fmt_http_date(mtime).as_str())
    );
    assert_eq!(
        r.header("content-length"),
        Some(r.body.len().to_string().as_str())
    );
}

#[test]
fn head_has_the_headers_of_get_and_no_body() {
    let dir = card_dir();
    let s = serve(dir.path(), &[]);
    let get = s.get(HOST, CARD, &[]);
    let mut raw = Vec::new();
    let mut c = TcpStream::connect(s.addr).unwrap();
    c.write_all(
        format!("HEAD {CARD} HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .unwrap();
    c.read_to_end(&mut raw).unwrap();
    let head = support::http::parse(&raw, false);
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty(), "HEAD sent a body");
    for h in [
        "etag",
        "content-length",
        "cache-control",
        "last-modified",
        "content-type",
    ] {
        assert_eq!(head.header(h), get.header(h), "{h}");
    }
}

#[test]
fn conditional_requests_answer_304_without_a_body() {
    let dir = card_dir();
    let s = serve(dir.path(), &[]);
    let first = s.get(HOST, CARD, &[]);
    let etag = first.header("etag").unwrap().to_string();
    let lm = first.header("last-modified").unwrap().to_string();
    for inm in [
        etag.clone(),
        format!("\"x\", {etag}"),
        format!("W/{etag}"),
        "*".into(),
    ] {
        let r = s.get(HOST, CARD, &[("If-None-Match", &inm)]);
        assert_eq!(r.status, 304, "If-None-Match: {inm}");
        assert!(r.body.is_empty());
        assert_eq!(r.header("etag"), Some(etag.as_str()));
        assert_eq!(r.header("cache-control"), Some("public, max-age=300"));
    }
    assert_eq!(
        s.get(HOST, CARD, &[("If-None-Match", "\"stale\"")]).status,
        200
    );
    assert_eq!(s.get(HOST, CARD, &[("If-Modified-Since", &lm)]).status, 304);
    assert_eq!(
        s.get(
            HOST,
            CARD,
            &[("If-Modified-Since", "Sat, 01 Jan 2000 00:00:00 GMT")]
        )
        .status,
        200
    );
    // If-None-Match takes precedence over If-Modified-Since.
    assert_eq!(
        s.get(
            HOST,
            CARD,
            &[("If-None-Match", "\"stale\""), ("If-Modified-Since", &lm)]
        )
        .status,
        200
    );
}

#[test]
fn gzip_when_accepted_with_its_own_etag() {
    let dir = card_dir();
    let s = serve(dir.path(), &[]);
    let plain = s.get(HOST, CARD, &[]);
    let r = s.get(HOST, CARD, &[("Accept-Encoding", "gzip, br")]);
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(&r.body[..])
        .read_to_end(&mut out)
        .unwrap();
    assert_eq!(out, plain.body);
    assert_ne!(r.header("etag"), plain.header("etag"));
    let r2 = s.get(HOST, CARD, &[("Accept-Encoding", "gzip")]);
    assert_eq!(
        r2.body, r.body,
        "compressed once per version: identical bytes"
    );
    // The gzip tag revalidates too.
    let tag = r.header("etag").unwrap();
    assert_eq!(
        s.get(
            HOST,
            CARD,
            &[("Accept-Encoding", "gzip"), ("If-None-Match", tag)]
        )
        .status,
        304
    );
    assert!(s
        .get(HOST, CARD, &[("Accept-Encoding", "gzip;q=0")])
        .header("content-encoding")
        .is_none());
}

#[test]
fn routing_by_host_and_path_with_json_404s() {
    let dir = card_dir();
    let s = serve(dir.path(), &[]);
    assert_eq!(s.get("AGENTS.example.COM:8443", CARD, &[]).status, 200);
    assert_eq!(s.get("other.example.org", CARD, &[]).status, 200);
    assert_ne!(
        s.get("other.example.org", CARD, &[]).body,
        s.get(HOST, CARD, &[]).body
    );
    for (host, path) in [
        ("unknown.example", CARD),
        (HOST, "/"),
        (HOST, "/.well-known/agent.json"),
        (HOST, "/x/.well-known/agent-card.json"),
    ] {
        let r = s.get(host, path, &[]);
        assert_eq!(r.status, 404, "{host}{path}");
        assert_eq!(r.header("content-type"), Some("application/json"));
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert!(v["error"].is_string());
    }
    let jwks = s.get(HOST, "/.well-known/jwks.json", &[]);
    assert_eq!(jwks.status, 200);
    assert_eq!(
        jwks.body,
        std::fs::read(dir.path().join("jwks.json")).unwrap()
    );
    assert_eq!(
        s.get("unknown.example", "/.well-known/jwks.json", &[])
            .status,
        404
    );
}

#[test]
fn a_fallback_host_answers_every_name_the_server_is_reached_by() {
    let dir = card_dir();
    let s = serve(dir.path(), &["--fallback-host", HOST]);
    let own = s.get(HOST, CARD, &[]);
    assert_eq!(own.status, 200);
    // An agent reached by its Pod address or Service name serves its own card there too.
    for name in ["198.51.100.7:8080", "echo.team.svc", "[2001:db8::7]:80"] {
        let r = s.get(name, CARD, &[]);
        assert_eq!(r.status, 200, "{name}");
        assert_eq!(r.body, own.body, "{name}");
    }
    // A host with a card of its own keeps it; other paths still 404.
    let other = s.get("other.example.org", CARD, &[]);
    assert_eq!(other.status, 200);
    assert_ne!(other.body, own.body);
    assert_eq!(s.get("198.51.100.7", "/a2a", &[]).status, 404);
    // Without a directory it means nothing: refused, not ignored.
    let out = support::bin()
        .args(["serve", "--from-cluster", "--fallback-host", HOST])
        .env("KUBECONFIG", "/nonexistent")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--fallback-host needs --from-dir"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_legacy_path_and_max_age_follow_the_flags() {
    let dir = card_dir();
    let s = serve(dir.path(), &["--legacy-path", "--max-age", "60"]);
    let r = s.get(HOST, "/.well-known/agent.json", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("cache-control"), Some("public, max-age=60"));
}

#[test]
fn options_preflight_and_other_methods() {
    let dir = card_dir();
    let s = serve(dir.path(), &[]);
    let r = request(
        s.addr,
        "OPTIONS",
        CARD,
        &[
            ("Host", HOST),
            ("Origin", "https://app.example"),
            ("Access-Control-Request-Method", "GET"),
            ("Access-Control-Request-Headers", "if-none-match"),
        ],
    );
    assert_eq!(r.status, 204);
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    assert!(r
        .header("access-control-allow-methods")
        .unwrap()
        .contains("GET"));
    assert_eq!(
        r.header("access-control-allow-headers"),
        Some("if-none-match")
    );
    for m in ["POST", "PUT", "DELETE", "PATCH"] {
        let r = request(s.addr, m, CARD, &[("Host", HOST), ("Content-Length", "0")]);
        assert_eq!(r.status, 405, "{m}");
        assert_eq!(r.header("allow"), Some("GET, HEAD, OPTIONS"));
    }
}

#[test]
fn two_servers_give_the_same_etag_and_last_modified() {
    let dir = card_dir();
    let a = serve(dir.path(), &[]);
    let b = serve(dir.path(), &[]);
    let (ra, rb) = (a.get(HOST, CARD, &[]), b.get(HOST, CARD, &[]));
    assert_eq!(ra.header("etag"), rb.header("etag"));
    assert_eq!(ra.header("last-modified"), rb.header("last-modified"));
    // An ETag from one replica revalidates at the other.
    assert_eq!(
        b.get(HOST, CARD, &[("If-None-Match", ra.header("etag").unwrap())])
            .status,
        304
    );
}

#[test]
fn a_mounted_configmap_is_served_and_its_updates_followed() {
    // The kubelet's layout: `<key>` -> `..data/<key>`, `..data` -> `..<timestamp>/`, swapped
    // atomically on each update.
    use std::os::unix::fs::symlink;
    let dir = tempfile::tempdir().unwrap();
    let v = support::vectors();
    let version = |name: &str, card: &str| {
        let d = dir.path().join(name);
        std::fs::create_dir(&d).unwrap();
        std::fs::copy(v.join(card), d.join(format!("{HOST}.json"))).unwrap();
        std::fs::copy(v.join("keys/jwks.json"), d.join("jwks.json")).unwrap();
    };
    version("..2026_12_02_00_00_00.1", "cards/v1-full.signed.json");
    symlink("..2026_12_02_00_00_00.1", dir.path().join("..data")).unwrap();
    for key in [format!("{HOST}.json"), "jwks.json".to_string()] {
        symlink(format!("..data/{key}"), dir.path().join(&key)).unwrap();
    }
    let s = serve(dir.path(), &[]);
    let first = s.get(HOST, CARD, &[]);
    assert_eq!(first.status, 200);
    assert_eq!(
        first.body,
        std::fs::read(v.join("cards/v1-full.signed.json")).unwrap()
    );
    assert_eq!(s.get(HOST, "/.well-known/jwks.json", &[]).status, 200);
    // An update: a new timestamped directory, `..data` swapped to it.
    version(
        "..2026_12_02_00_01_00.2",
        "cards/spec-8.5-sample.signed.json",
    );
    symlink("..2026_12_02_00_01_00.2", dir.path().join("..data_tmp")).unwrap();
    std::fs::rename(dir.path().join("..data_tmp"), dir.path().join("..data")).unwrap();
    let want = std::fs::read(v.join("cards/spec-8.5-sample.signed.json")).unwrap();
    support::http::eventually(Duration::from_secs(5), || {
        (s.get(HOST, CARD, &[]).body == want).then_some(())
    })
    .expect("the swapped ConfigMap version is served");
}

#[test]
fn file_changes_are_served_without_restart_and_broken_files_keep_the_last_version() {
    let dir = card_dir();
    let s = serve(dir.path(), &[]);
    let path = dir.path().join(format!("{HOST}.json"));
    let before = s.get(HOST, CARD, &[]);
    std::fs::copy(
        support::vectors().join("cards/spec-8.5-sample.signed.json"),
        &path,
    )
    .unwrap();
    let after = eventually(Duration::from_secs(5), || {
        let r = s.get(HOST, CARD, &[]);
        (r.header("etag") != before.header("etag")).then_some(r)
    })
    .expect("the changed file is served");
    assert_eq!(after.body, std::fs::read(&path).unwrap());
    // Half-written JSON: the last good version stays.
    std::fs::write(&path, b"{\"name\": \"trunc").unwrap();
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(s.get(HOST, CARD, &[]).body, after.body);
    // A new host appears, a removed one goes.
    std::fs::copy(
        support::vectors().join("cards/v1-minimal.signed.json"),
        dir.path().join("new.example.net.json"),
    )
    .unwrap();
    std::fs::remove_file(dir.path().join("other.example.org.json")).unwrap();
    eventually(Duration::from_secs(5), || {
        (s.get("new.example.net", CARD, &[]).status == 200).then_some(())
    })
    .expect("new host served");
    eventually(Duration::from_secs(5), || {
        (s.get("other.example.org", CARD, &[]).status == 404).then_some(())
    })
    .expect("removed host gone");
}

/// The value of the counter `name` on the server's `/metrics`.
fn counter(s: &Server, name: &str) -> f64 {
    let m =
        String::from_utf8(request(s.admin, "GET", "/metrics", &[("Host", "admin")]).body).unwrap();
    m.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in:\n{m}"))
}

#[test]
fn changes_are_learnt_from_the_file_system_without_rescanning_the_directory() {
    // A directory of many cards: scanned once at start, then only the files the file system
    // names are looked at again (inotify), however many others there are.
    let dir = card_dir();
    let minimal = support::vectors().join("cards/v1-minimal.signed.json");
    for i in 0..500 {
        std::fs::copy(
            &minimal,
            dir.path().join(format!("agent-{i}.example.com.json")),
        )
        .unwrap();
    }
    let s = serve(dir.path(), &[]);
    assert_eq!(s.get("agent-499.example.com", CARD, &[]).status, 200);
    assert_eq!(counter(&s, "agentcard_card_dir_scans_total"), 1.0);
    // Some time idle: no scan, no file looked at.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(counter(&s, "agentcard_card_dir_scans_total"), 1.0);
    assert_eq!(counter(&s, "agentcard_card_dir_file_looks_total"), 0.0);

    // A changed, a new and a removed card are each served as they are now.
    let full = std::fs::read(support::vectors().join("cards/v1-full.signed.json")).unwrap();
    std::fs::write(dir.path().join("agent-7.example.com.json"), &full).unwrap();
    std::fs::copy(&minimal, dir.path().join("agent-new.example.com.json")).unwrap();
    std::fs::remove_file(dir.path().join("agent-8.example.com.json")).unwrap();
    eventually(Duration::from_secs(10), || {
        (s.get("agent-7.example.com", CARD, &[]).body == full).then_some(())
    })
    .expect("the changed card is served");
    eventually(Duration::from_secs(10), || {
        (s.get("agent-new.example.com", CARD, &[]).status == 200).then_some(())
    })
    .expect("the new card is served");
    eventually(Duration::from_secs(10), || {
        (s.get("agent-8.example.com", CARD, &[]).status == 404).then_some(())
    })
    .expect("the removed card is gone");
    assert_eq!(
        counter(&s, "agentcard_card_dir_scans_total"),
        1.0,
        "the directory was scanned again"
    );
    let looks = counter(&s, "agentcard_card_dir_file_looks_total");
    assert!((3.0..100.0).contains(&looks), "{looks} files looked at");
}

/// How many of the server's threads answer the public port (those named `http-<i>`).
fn http_threads(s: &Server) -> usize {
    let tasks = std::fs::read_dir(format!("/proc/{}/task", s.pid())).unwrap();
    tasks
        .filter_map(|t| std::fs::read_to_string(t.unwrap().path().join("comm")).ok())
        .filter(|comm| comm.starts_with("http-"))
        .count()
}

#[test]
fn the_public_port_is_answered_by_as_many_workers_as_asked_or_one_per_core() {
    let dir = card_dir();
    let three = serve(dir.path(), &["--workers", "3"]);
    assert_eq!(http_threads(&three), 3, "--workers 3");
    // Each worker has its own listening socket: every connection is answered, whichever
    // worker's socket the kernel hands it to.
    for _ in 0..12 {
        assert_eq!(three.get(HOST, CARD, &[]).status, 200);
    }
    let default = serve(dir.path(), &[]);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(
        http_threads(&default),
        cores,
        "one worker per core by default"
    );
}

#[test]
fn oversized_requests_and_slow_clients_are_cut_off() {
    let dir = card_dir();
    let s = serve(dir.path(), &["--header-read-timeout", "1"]);
    let big = "a".repeat(64 * 1024);
    let r = request(s.addr, "GET", CARD, &[("Host", HOST), ("X-Big", &big)]);
    assert_eq!(r.status, 431, "oversized headers");
    let r = request(
        s.addr,
        "GET",
        CARD,
        &[("Host", HOST), ("Content-Length", "1000000")],
    );
    assert_eq!(r.status, 413, "declared body over the limit");
    // A client that never finishes its headers is disconnected.
    let mut c = TcpStream::connect(s.addr).unwrap();
    c.write_all(b"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: agents")
        .unwrap();
    c.set_read_timeout(Some(Duration::from_secs(8))).unwrap();
    let started = std::time::Instant::now();
    let mut buf = Vec::new();
    let _ = c.read_to_end(&mut buf);
    assert!(
        started.elapsed() < Duration::from_secs(7),
        "slow client held the connection"
    );
    // And the server still answers others.
    assert_eq!(s.get(HOST, CARD, &[]).status, 200);
}

#[test]
fn a_client_that_stops_reading_loses_its_connection_after_the_write_timeout() {
    let dir = card_dir();
    let s = serve(dir.path(), &["--write-timeout", "1"]);
    let mut c = TcpStream::connect(s.addr).unwrap();
    // Many pipelined requests, none of their responses read: the server's writes stall once
    // the socket buffers are full.
    let request = format!("GET {CARD} HTTP/1.1\r\nHost: {HOST}\r\n\r\n");
    let mut writer = c.try_clone().unwrap();
    writer
        .set_write_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let sender = std::thread::spawn(move || {
        for _ in 0..50_000 {
            if writer.write_all(request.as_bytes()).is_err() {
                break;
            }
        }
    });
    std::thread::sleep(Duration::from_secs(4));
    // Reading now: the server closed the connection (end of stream or reset) instead of
    // holding it open for a reader that might never come back.
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let ended = loop {
        match c.read(&mut buf) {
            Ok(0) => break Ok(()),
            Ok(_) => continue,
            Err(e) => break Err(e),
        }
    };
    match ended {
        Ok(()) => {}
        Err(e) => assert!(
            matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
            ),
            "the stalled connection stayed open: {e}"
        ),
    }
    let _ = sender.join();
    // Others are still served.
    assert_eq!(s.get(HOST, CARD, &[]).status, 200);
}

#[test]
fn metrics_count_requests_by_bounded_route() {
    let dir = card_dir();
    let s = serve(dir.path(), &[]);
    s.get(HOST, CARD, &[]);
    s.get("nope.example", CARD, &[]);
    let m =
        String::from_utf8(request(s.admin, "GET", "/metrics", &[("Host", "admin")]).body).unwrap();
    assert!(
        m.contains("agentcard_http_requests_total{route=\"card\",code=\"200\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("agentcard_http_requests_total{route=\"not_found\",code=\"404\"} 1"),
        "{m}"
    );
    assert!(m.contains("agentcard_served_cards 2"), "{m}");
    assert_eq!(
        request(s.admin, "GET", "/healthz", &[("Host", "admin")]).status,
        200
    );
}

#[test]
fn the_python_sdk_card_resolver_fetches_and_verifies_served_cards() {
    let dir = tempfile::tempdir().unwrap();
    let v = support::vectors();
    // Cards signed by our own `render`, plain and with v0.3 fields, and a tampered vector.
    for (host, extra) in [
        ("plain.example.com", None),
        ("compat.example.com", Some("--v03-compat")),
    ] {
        let mut cmd = support::bin();
        cmd.arg("render")
            .arg(v.join("cards/v1-full.card.json"))
            .arg("--key")
            .arg(v.join("keys/test-es256-1.private.jwk.json"));
        if let Some(flag) = extra {
            cmd.arg(flag);
        }
        let out = support::run(cmd, None);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::write(dir.path().join(format!("{host}.json")), &out.stdout).unwrap();
    }
    std::fs::copy(
        v.join("cards/v1-full.tampered.json"),
        dir.path().join("tampered.example.com.json"),
    )
    .unwrap();
    std::fs::copy(v.join("keys/jwks.json"), dir.path().join("jwks.json")).unwrap();
    let s = serve(dir.path(), &[]);
    let base = format!("http://{}", s.addr);
    let jwks = v.join("keys/jwks.json");
    for host in ["plain.example.com", "compat.example.com"] {
        let (valid, verdict) = support::sdk_resolve(&base, host, &jwks);
        assert!(valid, "{host}: {verdict}");
        assert_eq!(verdict["kid"], "test-es256-1");
    }
    let (valid, verdict) = support::sdk_resolve(&base, "tampered.example.com", &jwks);
    assert!(!valid, "the resolver accepted a tampered card: {verdict}");
    let (valid, _) = support::sdk_resolve(&base, "unknown.example.com", &jwks);
    assert!(!valid);
}

#[test]
fn verify_fetches_the_card_and_the_jwks_by_url() {
    let dir = tempfile::tempdir().unwrap();
    let v = support::vectors();
    // A URL's host is the Host header: serve the card for 127.0.0.1.
    std::fs::copy(
        v.join("cards/v1-full.signed.json"),
        dir.path().join("127.0.0.1.json"),
    )
    .unwrap();
    std::fs::copy(v.join("keys/jwks.json"), dir.path().join("jwks.json")).unwrap();
    let s = serve(dir.path(), &[]);
    let base = format!("http://{}", s.addr);
    let mut cmd = support::bin();
    cmd.arg("verify")
        .arg(format!("{base}{CARD}"))
        .arg("--jwks")
        .arg(format!("{base}/.well-known/jwks.json"))
        .arg("--allow-http-jwks");
    let out = support::run(cmd, None);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    std::fs::copy(
        v.join("cards/v1-full.tampered.json"),
        dir.path().join("127.0.0.1.json"),
    )
    .unwrap();
    let changed = eventually(Duration::from_secs(5), || {
        let mut cmd = support::bin();
        cmd.arg("verify")
            .arg(format!("{base}{CARD}"))
            .arg("--jwks")
            .arg(format!("{base}/.well-known/jwks.json"))
            .arg("--allow-http-jwks");
        let out = support::run(cmd, None);
        (out.status.code() == Some(1)).then_some(out)
    });
    assert!(
        changed.is_some(),
        "a tampered card fetched by URL must not verify"
    );
    let mut cmd = support::bin();
    cmd.arg("verify")
        .arg(format!("{base}/nope"))
        .arg("--jwks")
        .arg(format!("{base}/.well-known/jwks.json"))
        .arg("--allow-http-jwks");
    let out = support::run(cmd, None);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("HTTP 404"));

    // A plain-http JWKS needs the explicit flag; documents are size-bounded.
    let verify = |extra: &[&str]| {
        let mut cmd = support::bin();
        cmd.arg("verify")
            .arg(format!("{base}{CARD}"))
            .arg("--jwks")
            .arg(format!("{base}/.well-known/jwks.json"))
            .args(extra);
        let out = support::run(cmd, None);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, text) = verify(&[]);
    assert_eq!(code, Some(1));
    assert!(text.contains("plain http"), "{text}");
    let (code, text) = verify(&["--allow-http-jwks", "--max-bytes", "100"]);
    assert_eq!(code, Some(1));
    assert!(text.contains("larger than 100 bytes"), "{text}");
}

/// A one-shot HTTP server answering every connection with `response`; its address.
fn canned(response: &'static str) -> std::net::SocketAddr {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(4) {
            let Ok(mut stream) = stream else { continue };
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            if !response.is_empty() {
                let _ = stream.write_all(response.as_bytes());
            } else {
                // Never answer: hold the connection until the client gives up.
                std::thread::sleep(Duration::from_secs(30));
            }
        }
    });
    addr
}

#[test]
fn verify_by_url_refuses_scheme_changing_redirects_and_gives_up_on_silent_servers() {
    let dir = tempfile::tempdir().unwrap();
    let jwks = dir.path().join("jwks.json");
    std::fs::copy(support::vectors().join("keys/jwks.json"), &jwks).unwrap();
    let redirect = canned("HTTP/1.1 302 Found\r\nLocation: https://127.0.0.1:9/card.json\r\nContent-Length: 0\r\n\r\n");
    let mut cmd = support::bin();
    cmd.arg("verify")
        .arg(format!("http://{redirect}/card.json"))
        .arg("--jwks")
        .arg(&jwks);
    let out = support::run(cmd, None);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1));
    assert!(text.contains("another scheme"), "{text}");
    let silent = canned("");
    let mut cmd = support::bin();
    cmd.arg("verify")
        .arg(format!("http://{silent}/card.json"))
        .args(["--timeout", "1"])
        .arg("--jwks")
        .arg(&jwks);
    let out = support::run(cmd, None);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1));
    assert!(text.contains("fetching"), "{text}");
}

#[test]
fn a_second_server_on_the_same_port_is_refused() {
    let dir = card_dir();
    let first = serve(dir.path(), &[]);
    let out = support::run(
        {
            let mut cmd = support::bin();
            cmd.args(["serve", "--from-dir"]).arg(dir.path()).args([
                "--listen",
                &first.addr.to_string(),
                "--admin-listen",
                &support::http::free_port().to_string(),
            ]);
            cmd
        },
        None,
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("listening on"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn on_sigterm_it_turns_unready_keeps_answering_with_connection_close_then_exits() {
    let dir = card_dir();
    let mut s = serve(dir.path(), &["--drain-seconds", "3"]);
    assert_eq!(s.ready_status(), 200);
    s.terminate();
    let unready = eventually(Duration::from_secs(2), || {
        (s.ready_status() == 503).then_some(())
    });
    assert!(unready.is_some(), "/readyz did not turn 503 on SIGTERM");
    let r = s.get(HOST, CARD, &[]);
    assert_eq!(r.status, 200, "still answering while draining");
    assert_eq!(r.header("connection"), Some("close"));
    let status = s
        .wait_exit(Duration::from_secs(15))
        .expect("exits after the drain period");
    assert!(status.success(), "{status}");
}

#[test]
fn idle_keep_alive_connections_outlive_a_pause_shorter_than_the_idle_timeout() {
    use std::io::{Read, Write};
    let dir = card_dir();
    let s = serve(dir.path(), &["--header-read-timeout", "4"]);
    let mut conn = std::net::TcpStream::connect(s.addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let request = format!("HEAD {CARD} HTTP/1.1\r\nHost: {HOST}\r\n\r\n");
    let read_head = |conn: &mut std::net::TcpStream| -> String {
        let mut buf = Vec::new();
        let mut byte = [0u8; 1];
        while !buf.ends_with(b"\r\n\r\n") {
            match conn.read(&mut byte) {
                Ok(1) => buf.push(byte[0]),
                _ => break,
            }
        }
        String::from_utf8_lossy(&buf).into_owned()
    };
    conn.write_all(request.as_bytes()).unwrap();
    assert!(read_head(&mut conn).starts_with("HTTP/1.1 200"));
    // Idle for half the idle timeout: the same connection still answers.
    std::thread::sleep(Duration::from_secs(2));
    conn.write_all(request.as_bytes()).unwrap();
    assert!(
        read_head(&mut conn).starts_with("HTTP/1.1 200"),
        "the idle connection was closed"
    );
    // Idle past it: closed.
    std::thread::sleep(Duration::from_secs(5));
    let _ = conn.write_all(request.as_bytes());
    assert_eq!(
        read_head(&mut conn),
        "",
        "an idle connection outlived the timeout"
    );
}

/// One request of a client that keeps requesting through a SIGTERM (the payloads are read
/// through `Debug`, in the failure message).
#[derive(Debug)]
#[allow(dead_code)]
enum Outcome {
    /// A complete response with this status.
    Answered(u16),
    /// No connection could be made, or it was closed before a byte of the response: the server
    /// no longer accepted it.
    NotAccepted(String),
    /// The response was cut after it had started.
    Cut(String),
}

/// Read one complete response (status line, headers, `Content-Length` body) from `conn`:
/// its status and whether the server closes the connection after it.
fn read_response(conn: &mut TcpStream) -> Result<(u16, bool), (usize, String)> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match conn.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            Ok(_) => return Err((head.len(), "closed".into())),
            Err(e) => return Err((head.len(), e.to_string())),
        }
    }
    let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let length: usize = text
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    conn.read_exact(&mut body)
        .map_err(|e| (head.len(), format!("body cut: {e}")))?;
    Ok((status, text.contains("connection: close")))
}

/// The issue's drain test: clients keep requesting while the server gets SIGTERM. Nothing fails
/// before readiness turns false; every request sent before the drain period ends is answered
/// completely (the server finishes what it accepted before it exits); afterwards connections
/// are refused.
#[test]
fn a_client_requesting_through_sigterm_is_answered_until_the_drain_ends_and_never_cut() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Instant;
    let dir = card_dir();
    let drain = Duration::from_secs(2);
    let mut s = serve(dir.path(), &["--drain-seconds", "2"]);
    let (addr, admin) = (s.addr, s.admin);
    let stop = Arc::new(AtomicBool::new(false));
    let log: Arc<Mutex<Vec<(Instant, bool, Outcome)>>> = Arc::default();
    let mut clients = Vec::new();
    for _ in 0..2 {
        let (stop, log) = (stop.clone(), log.clone());
        clients.push(std::thread::spawn(move || {
            let mut kept: Option<TcpStream> = None;
            while !stop.load(Ordering::SeqCst) {
                let started = Instant::now();
                let (mut conn, reused) = match kept.take() {
                    Some(c) => (c, true),
                    None => match TcpStream::connect(addr) {
                        Ok(c) => (c, false),
                        Err(e) => {
                            let o = Outcome::NotAccepted(e.to_string());
                            log.lock().unwrap().push((started, false, o));
                            std::thread::sleep(Duration::from_millis(5));
                            continue;
                        }
                    },
                };
                conn.set_read_timeout(Some(Duration::from_secs(20)))
                    .unwrap();
                let req = format!("GET {CARD} HTTP/1.1\r\nHost: {HOST}\r\n\r\n");
                let outcome = match conn
                    .write_all(req.as_bytes())
                    .map_err(|e| (0, e.to_string()))
                    .and_then(|()| read_response(&mut conn))
                {
                    Ok((status, close)) => {
                        if !close {
                            kept = Some(conn);
                        }
                        Outcome::Answered(status)
                    }
                    Err((0, e)) => Outcome::NotAccepted(e),
                    Err((_, e)) => Outcome::Cut(e),
                };
                log.lock().unwrap().push((started, reused, outcome));
            }
        }));
    }
    std::thread::sleep(Duration::from_millis(500));
    // Taken before the signal is sent: the server's drain period cannot end before this + drain.
    let signalled = Instant::now();
    s.terminate();
    let unready = eventually(Duration::from_secs(2), || {
        (request(admin, "GET", "/readyz", &[("Host", "admin")]).status != 200).then(Instant::now)
    })
    .expect("/readyz did not turn 503");
    // A slow client: connected before the drain ends, its request trickles in past the end.
    let slow = std::thread::spawn(move || {
        std::thread::sleep(
            (signalled + drain - Duration::from_millis(300))
                .saturating_duration_since(Instant::now()),
        );
        let mut conn = TcpStream::connect(addr).map_err(|e| (0, e.to_string()))?;
        conn.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let req = format!("GET {CARD} HTTP/1.1\r\nHost: {HOST}\r\n\r\n");
        for b in req.as_bytes() {
            conn.write_all(&[*b]).map_err(|e| (0, e.to_string()))?;
            std::thread::sleep(Duration::from_millis(15));
        }
        read_response(&mut conn)
    });
    let status = s.wait_exit(Duration::from_secs(20)).expect("exits");
    assert!(status.success(), "{status}");
    let slow = slow.join().unwrap();
    assert!(
        matches!(slow, Ok((200, true))),
        "a request that was being received when the drain ended was not answered: {slow:?}"
    );
    stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.join().unwrap();
    }
    // The drain period ends `drain` after the signal reached the server, so after `drained`.
    let drained = signalled + drain;
    let log = log.lock().unwrap();
    let (mut before, mut draining, mut after) = (0, 0, 0);
    for (at, reused, outcome) in log.iter() {
        let when = at.saturating_duration_since(signalled);
        match outcome {
            Outcome::Answered(200) if *at < unready => before += 1,
            Outcome::Answered(200) => draining += 1,
            // A fresh connection the server no longer accepted, once the drain period is over.
            Outcome::NotAccepted(_) if !reused && *at >= drained => after += 1,
            other => panic!(
                "{other:?} for a request started {when:?} after SIGTERM (reused connection: \
                 {reused}; unready after {:?}, drain {drain:?})",
                unready.saturating_duration_since(signalled)
            ),
        }
    }
    eprintln!(
        "{before} answered before unready, {draining} while draining, {after} not accepted after the drain; unready {:?} after SIGTERM",
        unready.saturating_duration_since(signalled)
    );
    assert!(
        before > 0 && draining > 0,
        "the clients did not run through the drain"
    );
}

/// Send `raw` as it is on a fresh connection and read until the server closes or 5 s pass;
/// the status of the first response (0 when none came).
fn raw_status(addr: std::net::SocketAddr, raw: &[u8]) -> u16 {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(raw).unwrap();
    let mut buf = Vec::new();
    let _ = c.read_to_end(&mut buf);
    if buf.is_empty() {
        return 0;
    }
    support::http::parse(&buf, false).status
}

#[test]
fn requests_are_read_as_rfc_9110_and_9112_say_on_card_and_directory_hosts() {
    let dir = card_dir();
    let s = serve(dir.path(), &["--directory-host", "registry.example.org"]);
    let close = "Connection: close\r\n\r\n";
    // `n` more headers: with Host and Connection, a head of n + 2.
    let extra = |n: usize| (0..n).map(|i| format!("X-H{i}: v\r\n")).collect::<String>();
    let cases: &[(&str, String, u16)] = &[
        ("a plain request", format!("GET {CARD} HTTP/1.1\r\nHost: {HOST}\r\n{close}"), 200),
        ("100 headers", format!("GET {CARD} HTTP/1.1\r\nHost: {HOST}\r\n{}{close}", extra(98)), 200),
        ("101 headers", format!("GET {CARD} HTTP/1.1\r\nHost: {HOST}\r\n{}{close}", extra(99)), 431),
        ("two Host headers", format!("GET {CARD} HTTP/1.1\r\nHost: {HOST}\r\nHost: {HOST}\r\n{close}"), 400),
        ("two different Host headers", format!("GET {CARD} HTTP/1.1\r\nHost: {HOST}\r\nHost: other.example.org\r\n{close}"), 400),
        ("HTTP/1.1 without Host", format!("GET {CARD} HTTP/1.1\r\n{close}"), 400),
        ("HTTP/1.0 without Host", format!("GET {CARD} HTTP/1.0\r\n\r\n"), 404),
        ("absolute form, no Host", format!("GET http://{HOST}{CARD} HTTP/1.1\r\n{close}"), 200),
        ("absolute form, the same Host", format!("GET http://{HOST}{CARD} HTTP/1.1\r\nHost: {HOST}\r\n{close}"), 200),
        ("absolute form names the host", format!("GET http://{HOST}{CARD} HTTP/1.1\r\nHost: other.example.org\r\n{close}"), 400),
        ("absolute form, a host with no card", format!("GET http://unknown.example.org{CARD} HTTP/1.1\r\n{close}"), 404),
        ("an escaped unreserved character", format!("GET /.well%2Dknown/agent%2dcard.json HTTP/1.1\r\nHost: {HOST}\r\n{close}"), 200),
        ("dot segments", format!("GET /x/y/../../.well-known/./agent-card.json HTTP/1.1\r\nHost: {HOST}\r\n{close}"), 200),
        ("an escaped slash stays a character", format!("GET /.well-known%2Fagent-card.json HTTP/1.1\r\nHost: {HOST}\r\n{close}"), 404),
        ("a fragment", format!("GET {CARD}#x HTTP/1.1\r\nHost: {HOST}\r\n{close}"), 400),
        ("a malformed escape", format!("GET /.well-known/agent%zzcard.json HTTP/1.1\r\nHost: {HOST}\r\n{close}"), 400),
        ("an invalid character", format!("GET /.well-known/agent<card>.json HTTP/1.1\r\nHost: {HOST}\r\n{close}"), 400),
        ("a bare CR in the request line", format!("GET {CARD}\r HTTP/1.1\r\nHost: {HOST}\r\n{close}"), 400),
        ("an invalid Host", format!("GET {CARD} HTTP/1.1\r\nHost: a b\r\n{close}"), 400),
        ("the directory, escaped", "GET /v1/%61gents HTTP/1.1\r\nHost: registry.example.org\r\nConnection: close\r\n\r\n".into(), 200),
        ("the directory, dot segments", "GET /x/../.well-known/ard.json HTTP/1.1\r\nHost: registry.example.org\r\nConnection: close\r\n\r\n".into(), 200),
        ("the directory, two Host headers", "GET /v1/agents HTTP/1.1\r\nHost: registry.example.org\r\nHost: registry.example.org\r\nConnection: close\r\n\r\n".into(), 400),
        ("the directory, absolute form", "GET http://registry.example.org/v1/agents HTTP/1.1\r\nConnection: close\r\n\r\n".into(), 200),
        ("the directory, a fragment", "GET /v1/agents#x HTTP/1.1\r\nHost: registry.example.org\r\nConnection: close\r\n\r\n".into(), 400),
    ];
    let mut wrong = Vec::new();
    for (what, raw, want) in cases {
        let got = raw_status(s.addr, raw.as_bytes());
        if got != *want {
            wrong.push(format!("{what}: {got}, want {want}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn a_started_head_has_its_own_timeout_and_idle_connections_keep_theirs() {
    let dir = card_dir();
    let s = serve(dir.path(), &["--head-timeout", "2"]);
    // A client sending its head a header at a time is cut off once the head timeout passes.
    let mut slow = TcpStream::connect(s.addr).unwrap();
    slow.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    slow.write_all(format!("GET {CARD} HTTP/1.1\r\nHost: {HOST}\r\n").as_bytes())
        .unwrap();
    // An idle connection (nothing sent yet) is kept.
    let mut idle = TcpStream::connect(s.addr).unwrap();
    let mut closed_at = None;
    let started = std::time::Instant::now();
    for i in 0..20 {
        std::thread::sleep(Duration::from_millis(300));
        let mut buf = [0u8; 64];
        match slow.read(&mut buf) {
            Ok(0) => {
                closed_at = Some(started.elapsed());
                break;
            }
            Ok(_) => panic!("the slow client got an answer"),
            Err(_) => {}
        }
        if slow
            .write_all(format!("X-Slow-{i}: 1\r\n").as_bytes())
            .is_err()
        {
            closed_at = Some(started.elapsed());
            break;
        }
    }
    let closed_at = closed_at.expect("the slow head was never cut off");
    assert!(closed_at < Duration::from_secs(6), "{closed_at:?}");
    // The idle connection, older than the head timeout, still serves a request.
    idle.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    idle.write_all(
        format!("GET {CARD} HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let mut buf = Vec::new();
    let _ = idle.read_to_end(&mut buf);
    assert_eq!(support::http::parse(&buf, false).status, 200);
}

#[test]
fn a_client_holds_a_bounded_number_of_connections() {
    let dir = card_dir();
    let s = serve(dir.path(), &["--max-connections-per-client", "3"]);
    let held: Vec<TcpStream> = (0..3)
        .map(|_| TcpStream::connect(s.addr).unwrap())
        .collect();
    // Accepted in order: the fourth connection of this address is closed at once.
    std::thread::sleep(Duration::from_millis(300));
    let mut fourth = TcpStream::connect(s.addr).unwrap();
    fourth
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let _ = fourth.write_all(format!("GET {CARD} HTTP/1.1\r\nHost: {HOST}\r\n\r\n").as_bytes());
    let mut buf = [0u8; 64];
    assert!(
        matches!(fourth.read(&mut buf), Ok(0) | Err(_)),
        "a fourth connection was served"
    );
    drop(held);
    let plain = format!("GET {CARD} HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n");
    let ok = eventually(Duration::from_secs(5), || {
        (raw_status(s.addr, plain.as_bytes()) == 200).then_some(())
    });
    assert!(ok.is_some(), "connections given back are usable again");
}

const REGISTRY: &str = "registry.example.org";

/// A `POST /search` whose head and first bytes are sent, the rest of its body held back.
fn trickle_search(addr: std::net::SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(
        format!(
            "POST /search HTTP/1.1\r\nHost: {REGISTRY}\r\nContent-Type: application/json\r\n\
             Content-Length: 22\r\n\r\n{{\"query\":"
        )
        .as_bytes(),
    )
    .unwrap();
    s
}

/// The status of the response `s` reads within `within`, if one comes.
fn status_within(s: &mut TcpStream, within: Duration) -> Option<u16> {
    s.set_read_timeout(Some(within)).unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    (!raw.is_empty()).then(|| support::http::parse(&raw, false).status)
}

#[test]
fn clients_trickling_bodies_hold_no_request_slot_and_are_cut_at_the_body_timeout() {
    let dir = card_dir();
    let s = serve(
        dir.path(),
        &[
            "--directory-host",
            REGISTRY,
            "--max-concurrent-requests",
            "8",
            "--body-timeout",
            "3",
        ],
    );
    // Eight anonymous clients start a search each and send the rest of its body never.
    let mut held: Vec<TcpStream> = (0..8).map(|_| trickle_search(s.addr)).collect();
    std::thread::sleep(Duration::from_millis(500));
    // Requests without a body are answered all the while, on the card and directory hosts.
    for _ in 0..20 {
        assert_eq!(request(s.addr, "GET", CARD, &[("Host", HOST)]).status, 200);
    }
    let list = request(s.addr, "GET", "/v1/agents", &[("Host", REGISTRY)]);
    assert_eq!(list.status, 200, "{}", String::from_utf8_lossy(&list.body));
    // A ninth body finds the bodies' own bound full: 503, told when to come back.
    let ninth = support::http::request_with_body(
        s.addr,
        "POST",
        "/search",
        &[("Host", REGISTRY), ("Content-Type", "application/json")],
        Some(br#"{"query":{"text":"x"}}"#),
    );
    assert_eq!(ninth.status, 503);
    assert_eq!(ninth.header("retry-after"), Some("1"));
    // At the body timeout each trickler gets 408 and its connection is closed.
    for h in &mut held {
        assert_eq!(status_within(h, Duration::from_secs(10)), Some(408));
    }
    let after = support::http::request_with_body(
        s.addr,
        "POST",
        "/search",
        &[("Host", REGISTRY), ("Content-Type", "application/json")],
        Some(br#"{"query":{"text":"x"}}"#),
    );
    assert_eq!(
        after.status,
        200,
        "{}",
        String::from_utf8_lossy(&after.body)
    );
}

#[test]
fn a_body_that_arrives_in_pieces_within_the_timeout_is_answered_and_one_past_the_limit_is_not() {
    let dir = card_dir();
    let s = serve(dir.path(), &["--directory-host", REGISTRY]);
    // A search of nearly the 16 KiB limit, sent in 1 KiB pieces over about a second.
    let body = format!(
        r#"{{"query":{{"text":"weather"}},"pad":"{}"}}"#,
        "x".repeat(15_000)
    );
    let mut c = TcpStream::connect(s.addr).unwrap();
    let head = format!(
        "POST /search HTTP/1.1\r\nHost: {REGISTRY}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    c.write_all(head.as_bytes()).unwrap();
    for piece in body.as_bytes().chunks(1024) {
        c.write_all(piece).unwrap();
        std::thread::sleep(Duration::from_millis(60));
    }
    let status = status_within(&mut c, Duration::from_secs(10));
    assert!(
        matches!(status, Some(200) | Some(400)),
        "a large body sent steadily is read and answered: {status:?}"
    );
    // Chunked past the limit (no Content-Length to refuse it by): 413, on the API and on MCP.
    for path in ["/search", "/mcp"] {
        let mut c = TcpStream::connect(s.addr).unwrap();
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {REGISTRY}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nTransfer-Encoding: chunked\r\n\
             Connection: close\r\n\r\n"
        );
        c.write_all(head.as_bytes()).unwrap();
        let chunk = format!("2000\r\n{}\r\n", " ".repeat(0x2000));
        for _ in 0..3 {
            if c.write_all(chunk.as_bytes()).is_err() {
                break;
            }
        }
        let _ = c.write_all(b"0\r\n\r\n");
        assert_eq!(
            status_within(&mut c, Duration::from_secs(10)),
            Some(413),
            "{path}"
        );
    }
}

#[test]
fn mcp_refuses_a_json_rpc_batch_before_parsing_it() {
    let dir = card_dir();
    let s = serve(dir.path(), &["--directory-host", REGISTRY]);
    let headers = [
        ("Host", REGISTRY),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    let one = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#;
    let batch = format!("  [{one},{one}]");
    let r =
        support::http::request_with_body(s.addr, "POST", "/mcp", &headers, Some(batch.as_bytes()));
    assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["error"]["code"], -32600);
    assert!(v["error"]["message"].as_str().unwrap().contains("batch"));
    // One request alone is answered.
    let r =
        support::http::request_with_body(s.addr, "POST", "/mcp", &headers, Some(one.as_bytes()));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert!(String::from_utf8_lossy(&r.body).contains("search_agents"));
}

#[test]
fn past_its_bound_the_manifest_lists_the_first_entries_and_the_registry_api_lists_every_one() {
    let dir = tempfile::tempdir().unwrap();
    let card: serde_json::Value = serde_json::from_slice(
        &std::fs::read(support::vectors().join("cards/v1-minimal.signed.json")).unwrap(),
    )
    .unwrap();
    let total = agentcard_operator::directory::ard::MANIFEST_MAX_ENTRIES + 3;
    for i in 0..total {
        let mut c = card.clone();
        c["name"] = serde_json::json!(format!("Agent {i}"));
        std::fs::write(
            dir.path().join(format!("agent-{i:05}.example.org.json")),
            c.to_string(),
        )
        .unwrap();
    }
    let s = serve(dir.path(), &["--directory-host", REGISTRY]);
    let json = |r: support::http::Resp| -> serde_json::Value {
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        serde_json::from_slice(&r.body).unwrap()
    };
    // Every file is listed before the manifest is read.
    let listed = support::http::eventually(Duration::from_secs(30), || {
        let v = json(s.get(REGISTRY, "/agents?pageSize=1", &[]));
        (v["total"] == total).then_some(())
    });
    assert!(listed.is_some(), "not every card is listed");
    let manifest = json(s.get(REGISTRY, "/.well-known/ard.json", &[]));
    let entries = manifest["entries"].as_array().unwrap();
    let max = agentcard_operator::directory::ard::MANIFEST_MAX_ENTRIES;
    assert_eq!(entries.len(), max + 1, "the bound and the registry entry");
    let registry = entries.last().unwrap();
    assert_eq!(registry["type"], "application/ai-registry+json");
    assert_eq!(
        registry["metadata"],
        serde_json::json!({"complete": false, "listedEntries": max, "totalEntries": total})
    );
    // Valid for both ARD versions' conformance schemas.
    support::directory::assert_schema("manifest", &manifest);
    support::directory::assert_schema_v091("manifest", &manifest);
    // What a client then does: page the registry API the registry entry names, and find all.
    let base = registry["url"]
        .as_str()
        .unwrap()
        .strip_suffix("/search")
        .unwrap()
        .to_string();
    assert!(base.ends_with(REGISTRY), "{base}");
    let mut seen = std::collections::BTreeSet::new();
    let mut token: Option<String> = None;
    loop {
        let path = match &token {
            None => "/agents?pageSize=100".to_string(),
            Some(t) => format!("/agents?pageSize=100&pageToken={t}"),
        };
        let page = json(s.get(REGISTRY, &path, &[]));
        for item in page["items"].as_array().unwrap() {
            seen.insert(item["identifier"].as_str().unwrap().to_string());
        }
        match page["pageToken"].as_str() {
            Some(t) => token = Some(t.to_string()),
            None => break,
        }
    }
    assert_eq!(seen.len(), total);
    for e in &entries[..max] {
        assert!(seen.contains(e["identifier"].as_str().unwrap()));
    }
}
