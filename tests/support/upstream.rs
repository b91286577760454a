//! What federation tests put between a directory and its upstreams: a proxy that reaches a
//! directory host of the operator (as its Ingress would: it sets the Host header) and logs
//! each request line, and a server answering canned responses (a hostile upstream).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Read a request head (up to the blank line) and what followed it in the same reads.
fn read_head(s: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            return Some((head, buf[end + 4..].to_vec()));
        }
        let n = s.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// A proxy to `target` that sends every request with `Host: host` and `Connection: close`
/// (one request per connection, so each is logged), until stopped.
pub struct Proxy {
    pub addr: SocketAddr,
    /// Request lines seen (`GET /v1/changes?... HTTP/1.1`).
    pub log: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    target: SocketAddr,
    host: String,
}

impl Proxy {
    pub fn start(target: SocketAddr, host: &str) -> Proxy {
        Self::start_on("127.0.0.1:0".parse().unwrap(), target, host, Arc::default())
    }

    fn start_on(
        bind: SocketAddr,
        target: SocketAddr,
        host: &str,
        log: Arc<Mutex<Vec<String>>>,
    ) -> Proxy {
        let listener = TcpListener::bind(bind).unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (stop2, log2, host2) = (stop.clone(), log.clone(), host.to_string());
        std::thread::spawn(move || {
            while !stop2.load(Ordering::Acquire) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let (log, host) = (log2.clone(), host2.clone());
                        std::thread::spawn(move || relay(client, target, &host, &log));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Proxy {
            addr,
            log,
            stop,
            target,
            host: host.to_string(),
        }
    }

    /// Stop answering (connections to its port are refused).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        std::thread::sleep(Duration::from_millis(50));
    }

    /// Answer again on the same port, with the same log.
    pub fn restart(&self) -> Proxy {
        Self::start_on(self.addr, self.target, &self.host, self.log.clone())
    }

    /// The request lines seen so far.
    pub fn requests(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

fn relay(mut client: TcpStream, target: SocketAddr, host: &str, log: &Mutex<Vec<String>>) {
    client.set_nonblocking(false).unwrap();
    let Some((head, rest)) = read_head(&mut client) else {
        return;
    };
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default().to_string();
    log.lock().unwrap().push(request_line.clone());
    let mut out = format!("{request_line}\r\nHost: {host}\r\nConnection: close\r\n");
    for l in lines {
        let lower = l.to_ascii_lowercase();
        if !(lower.starts_with("host:") || lower.starts_with("connection:")) {
            out.push_str(l);
            out.push_str("\r\n");
        }
    }
    out.push_str("\r\n");
    let Ok(mut server) = TcpStream::connect(target) else {
        return;
    };
    let _ = server.write_all(out.as_bytes());
    let _ = server.write_all(&rest);
    let mut back = server.try_clone().unwrap();
    let mut c2 = client.try_clone().unwrap();
    let up = std::thread::spawn(move || {
        let _ = std::io::copy(&mut c2, &mut server);
    });
    let _ = std::io::copy(&mut back, &mut client);
    let _ = client.shutdown(std::net::Shutdown::Both);
    drop(up);
}

/// A server answering each request with what `answer` gives for its request line (the raw
/// response bytes, written as given), until dropped.
pub struct Canned {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl Canned {
    pub fn start(answer: impl Fn(&str) -> Vec<u8> + Send + Sync + 'static) -> Canned {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let answer = Arc::new(answer);
        std::thread::spawn(move || {
            while !stop2.load(Ordering::Acquire) {
                match listener.accept() {
                    Ok((mut s, _)) => {
                        let answer = answer.clone();
                        std::thread::spawn(move || {
                            s.set_nonblocking(false).unwrap();
                            if let Some((head, _)) = read_head(&mut s) {
                                let line = head.split("\r\n").next().unwrap_or_default();
                                let _ = s.write_all(&answer(line));
                            }
                            let _ = s.shutdown(std::net::Shutdown::Both);
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Canned { addr, stop }
    }
}

impl Drop for Canned {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// A `200 OK` JSON response.
pub fn json_response(body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}
