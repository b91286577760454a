//! A deliberately plain HTTP/1.1 client for asserting exactly what goes over the wire, and a
//! handle on `agentcard-operator serve` processes.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A parsed response.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    /// Header names lower-cased; repeated headers joined with ", ".
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

/// Send `method path` with `headers` (Connection: close added) and read the whole response.
pub fn request(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> Resp {
    request_with_body(addr, method, path, headers, None)
}

/// [`request`] with a body (Content-Length added).
pub fn request_with_body(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Resp {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        req.push_str(&format!("Content-Length: {}\r\n", b.len()));
    }
    req.push_str("Connection: close\r\n\r\n");
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body.unwrap_or_default());
    s.write_all(&bytes).unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    parse(&raw, method == "HEAD")
}

/// Parse a raw HTTP/1.1 response (Content-Length framed, or until close).
pub fn parse(raw: &[u8], head: bool) -> Resp {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("end of headers");
    let head_text = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head_text.split("\r\n");
    let status: u16 = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let mut headers: BTreeMap<String, String> = BTreeMap::new();
    for l in lines {
        let (k, v) = l.split_once(':').unwrap();
        headers
            .entry(k.trim().to_ascii_lowercase())
            .and_modify(|e| {
                e.push_str(", ");
                e.push_str(v.trim())
            })
            .or_insert_with(|| v.trim().to_string());
    }
    let mut body = raw[split + 4..].to_vec();
    if head {
        body.clear();
    } else if headers
        .get("transfer-encoding")
        .is_some_and(|t| t.eq_ignore_ascii_case("chunked"))
    {
        body = dechunk(&body);
    } else if let Some(len) = headers
        .get("content-length")
        .and_then(|l| l.parse::<usize>().ok())
    {
        body.truncate(len);
    }
    Resp {
        status,
        headers,
        body,
    }
}

/// The payload of a `Transfer-Encoding: chunked` body.
fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = raw.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size_text = String::from_utf8_lossy(&raw[..eol]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("0").trim(), 16)
            .unwrap_or(0);
        raw = &raw[eol + 2..];
        if size == 0 || raw.len() < size {
            return out;
        }
        out.extend_from_slice(&raw[..size]);
        raw = &raw[(size + 2).min(raw.len())..];
    }
}

/// A free loopback port (bound, then released).
pub fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// A running `agentcard-operator serve`, killed on drop.
pub struct Server {
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    child: Child,
    _log: tempfile::NamedTempFile,
}

/// Wait until a process started with port 0 logs `listening public=A admin=B`; panic with its
/// log if it exits first.
pub fn wait_for_addresses(log: &Path, child: &mut Child) -> (SocketAddr, SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let found = text.lines().find_map(|l| {
            let rest = &l[l.find("listening public=")? + "listening public=".len()..];
            let (public, admin) = rest.split_once(" admin=")?;
            Some((public.trim().parse().ok()?, admin.trim().parse().ok()?))
        });
        if let Some(addrs) = found {
            return addrs;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the process exited ({status}) before listening:\n{text}");
        }
        assert!(
            Instant::now() < deadline,
            "the process never logged its addresses:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Server {
    /// The server's process id (to look at its threads in `/proc`).
    #[allow(dead_code)]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Send SIGTERM, as Kubernetes does to a stopping pod.
    pub fn terminate(&self) {
        super::terminate(&self.child);
    }

    /// Wait up to `within` for the process to exit on its own.
    pub fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        super::wait_exit(&mut self.child, within)
    }

    /// Start `serve` with `args` (source flags etc.) on ports the process picks itself, and wait
    /// until it logs them.
    pub fn start(args: &[&str], envs: &[(&str, &Path)]) -> Server {
        let log = tempfile::NamedTempFile::new().unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentcard-operator"));
        cmd.arg("serve")
            .args(args)
            .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(log.reopen().unwrap());
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn serve");
        let (addr, admin) = wait_for_addresses(log.path(), &mut child);
        Server {
            addr,
            admin,
            child,
            _log: log,
        }
    }

    /// `GET /readyz` status.
    pub fn ready_status(&self) -> u16 {
        request(self.admin, "GET", "/readyz", &[("Host", "admin")]).status
    }

    /// Wait until ready (or panic).
    pub fn wait_ready(&self, within: Duration) {
        let deadline = Instant::now() + within;
        while self.ready_status() != 200 {
            assert!(Instant::now() < deadline, "serve never became ready");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn get(&self, host: &str, path: &str, headers: &[(&str, &str)]) -> Resp {
        let mut h = vec![("Host", host)];
        h.extend_from_slice(headers);
        request(self.addr, "GET", path, &h)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Poll `f` every 10 ms until it returns Some or `within` passes.
pub fn eventually<T>(within: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
