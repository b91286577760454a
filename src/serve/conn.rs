//! The connection layer under HTTP: what hyper's parser does not enforce.
//!
//! - [`HeadGuard`] wraps a client's byte stream: once the first byte of a request head
//!   arrives, the whole head (up to the blank line) must arrive within the head timeout, or
//!   the connection is closed with an error; a connection idle (before its first request, or
//!   since its last response) for the much longer keep-alive time is ended as if the client
//!   had closed it. Both run on one timer per connection, moved on about once per head
//!   timeout, where hyper's own header timer would take a timer per request. It also reads
//!   each request line as sent, before hyper drops what it does not keep: a request-target
//!   with a fragment is recorded, and the service answers that request 400.
//! - [`PerClient`] bounds the connections one client address holds at once.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// The longest request line read for checks (longer ones are judged by hyper's limits).
const MAX_LINE: usize = 8 * 1024;

/// What the connection layer found in one request head, in the order heads arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadVerdict {
    /// Nothing wrong at this layer.
    Fine,
    /// The request-target carries a fragment (`#...`).
    Fragment,
}

/// The verdicts of a connection's heads, shared between its [`HeadGuard`] and its service.
#[derive(Clone, Default)]
pub struct Verdicts(Arc<Mutex<VecDeque<HeadVerdict>>>);

impl Verdicts {
    /// The verdict of the next request the service handles (`Fine` when none was recorded,
    /// as for a head hyper read ahead while an earlier request was answered).
    pub fn next(&self) -> HeadVerdict {
        self.lock().pop_front().unwrap_or(HeadVerdict::Fine)
    }

    fn push(&self, v: HeadVerdict) {
        self.lock().push_back(v);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<HeadVerdict>> {
        crate::locks::lock(&self.0)
    }
}

enum Phase {
    /// Between requests (or before the first): the keep-alive time applies.
    Idle,
    /// A head has started: `line` follows its request line so far, `tail` holds the last
    /// bytes seen (to find the blank line across reads).
    Head { line: LineScan, tail: u32 },
    /// The head is complete: body bytes or a request read ahead, until a response is written.
    Request,
}

/// What the checks need of a request line as its bytes go by, without keeping them: the
/// request-target is the line's second field (fields split at each space).
#[derive(Clone, Copy, Default)]
struct LineScan {
    /// Spaces seen so far.
    spaces: u8,
    /// Bytes looked at (at most [`MAX_LINE`]).
    len: usize,
    /// The line has ended.
    done: bool,
    /// The request-target holds a `#`.
    fragment: bool,
}

impl LineScan {
    /// Follow the next bytes of the head: those up to the end of the request line count.
    fn feed(&mut self, bytes: &[u8]) {
        if self.done {
            return;
        }
        let line = match memchr::memchr(b'\n', bytes) {
            Some(end) => {
                self.done = true;
                &bytes[..end]
            }
            None => bytes,
        };
        let line = &line[..line.len().min(MAX_LINE - self.len)];
        self.len += line.len();
        for &b in line {
            match b {
                b' ' => self.spaces = self.spaces.saturating_add(1),
                b'#' if self.spaces == 1 => self.fragment = true,
                _ => {}
            }
        }
    }

    fn verdict(&self) -> HeadVerdict {
        if self.fragment {
            HeadVerdict::Fragment
        } else {
            HeadVerdict::Fine
        }
    }
}

/// What a connection past its deadline has failed to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Late {
    /// Finish the request head it started.
    Head,
    /// Start a request while idle.
    Idle,
}

/// A client's byte stream under the head and keep-alive timeouts and the request-line checks
/// (see the module doc).
pub struct HeadGuard<S> {
    inner: S,
    phase: Phase,
    /// How long a started head may take.
    timeout: Duration,
    /// How long the connection may stay idle.
    idle: Duration,
    /// When the connection must have made progress, and what it is waiting for (`None` while
    /// a request is being answered).
    due: Option<(Instant, Late)>,
    /// A timer at or before `due`, and never further than `timeout` ahead when set: it is
    /// moved on only when it fires early. One timer per connection, registered about once per
    /// head timeout, rather than one per request; and since a later head's deadline is never
    /// before it, it never has to be moved back.
    timer: Option<Pin<Box<Sleep>>>,
    verdicts: Verdicts,
}

impl<S> HeadGuard<S> {
    /// Guard `inner`: a started head has `timeout` to arrive, an idle connection is ended
    /// after `idle`; verdicts go to `verdicts`.
    pub fn new(inner: S, timeout: Duration, idle: Duration, verdicts: Verdicts) -> Self {
        HeadGuard {
            inner,
            phase: Phase::Idle,
            timeout,
            idle,
            due: Some((Instant::now() + idle, Late::Idle)),
            timer: None,
            verdicts,
        }
    }

    /// What the connection is late for, if it is past its deadline (the timer is polled, so
    /// the task is woken when it is).
    fn late(&mut self, cx: &mut Context<'_>) -> Option<Late> {
        let (due, what) = self.due?;
        let step = self.timeout;
        let next = move || due.min(Instant::now() + step);
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(next())));
        while timer.as_mut().poll(cx).is_ready() {
            if timer.deadline() >= due {
                return Some(what);
            }
            // Set for an earlier deadline, or a step towards this one: on towards it.
            timer.as_mut().reset(next());
        }
        None
    }

    /// A response starts with `data`: the connection is idle, and the next bytes from the
    /// client start a new head — unless it is an interim `1xx` (`100 Continue` asks for the
    /// body, which is no head).
    fn responded(&mut self, data: &[u8]) {
        let interim = data.len() > 9 && data.starts_with(b"HTTP/1.") && data[9] == b'1';
        match self.phase {
            Phase::Request if !interim => {
                self.phase = Phase::Idle;
                self.due = Some((Instant::now() + self.idle, Late::Idle));
            }
            // More of a response still being written (a change feed's events and heartbeats,
            // a large body read slowly): the connection is in use, its keep-alive time starts
            // again. (Counted from the response's first bytes alone, every event stream was
            // cut after the keep-alive time, however often it sent.)
            Phase::Idle if !data.is_empty() => {
                self.due = Some((Instant::now() + self.idle, Late::Idle));
            }
            _ => {}
        }
    }

    /// Follow the bytes just read through the head state machine.
    fn saw(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            match &mut self.phase {
                Phase::Request => return,
                Phase::Idle => {
                    // A head has its own time, and is no excuse to stay past the keep-alive
                    // time either (as hyper's header timer, counted from the idle start).
                    let head = Instant::now() + self.timeout;
                    let idle = self.due.map_or(head, |(due, _)| due);
                    self.due = Some((head.min(idle), Late::Head));
                    self.phase = Phase::Head {
                        line: LineScan::default(),
                        tail: 0,
                    };
                }
                Phase::Head { line, tail } => {
                    // The blank line ending the head: CRLF CRLF (or a bare LF LF, which hyper
                    // accepts), looked for at each LF only.
                    let ended = memchr::memchr_iter(b'\n', bytes)
                        .find(|&i| {
                            let last4 = shift_in(*tail, &bytes[i.saturating_sub(3)..=i]);
                            last4 == 0x0d0a_0d0a || last4 & 0xffff == 0x0a0a
                        })
                        .map(|i| i + 1);
                    let seen = &bytes[..ended.unwrap_or(bytes.len())];
                    line.feed(seen);
                    *tail = shift_in(*tail, &seen[seen.len().saturating_sub(4)..]);
                    let Some(n) = ended else {
                        return;
                    };
                    let verdict = line.verdict();
                    self.verdicts.push(verdict);
                    self.phase = Phase::Request;
                    self.due = None;
                    bytes = &bytes[n..];
                }
            }
        }
    }
}

/// `tail` (the last bytes seen, the latest lowest) with `bytes` shifted in after it.
fn shift_in(tail: u32, bytes: &[u8]) -> u32 {
    bytes.iter().fold(tail, |t, &b| (t << 8) | u32::from(b))
}

/// What the request line `line` (without its line end) says at this layer.
#[cfg(test)]
fn verdict_of(line: &[u8]) -> HeadVerdict {
    let mut scan = LineScan::default();
    scan.feed(line);
    scan.verdict()
}

impl<S: AsyncRead + Unpin> AsyncRead for HeadGuard<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match this.late(cx) {
            Some(Late::Head) => {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the request head did not arrive in time",
                )))
            }
            // The end of the stream: hyper closes an idle connection quietly.
            Some(Late::Idle) => return Poll::Ready(Ok(())),
            None => {}
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &polled {
            this.saw(&buf.filled()[before..]);
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for HeadGuard<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.responded(data);
        Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let first = bufs
            .iter()
            .find(|b| !b.is_empty())
            .map_or(&[][..], |b| &b[..]);
        self.responded(first);
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

pub use crate::web::{KeySlot, PerKey};

/// Connections held per client address.
pub type PerClient = PerKey<IpAddr>;

/// One connection of a client address.
pub type ClientSlot = KeySlot<IpAddr>;

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// The head timeout of these tests.
    const TEN: Duration = Duration::from_secs(10);
    /// The keep-alive time of these tests.
    const IDLE: Duration = Duration::from_secs(75);

    #[tokio::test(start_paused = true)]
    async fn a_response_still_being_written_keeps_its_connection_past_the_keep_alive_time() {
        let (client, server) = tokio::io::duplex(1 << 16);
        let mut guard = HeadGuard::new(server, TEN, IDLE, Verdicts::default());
        let (mut rd, mut wr) = tokio::io::split(client);
        let mut buf = [0u8; 128];
        wr.write_all(b"GET /v1/changes HTTP/1.1\r\nHost: h\r\n\r\n")
            .await
            .unwrap();
        assert!(guard.read(&mut buf).await.unwrap() > 0);
        guard
            .write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
            .await
            .unwrap();
        // An event stream: a heartbeat every 15 s for 300 s, the client sending nothing.
        for _ in 0..20 {
            let read = tokio::time::timeout(Duration::from_secs(15), guard.read(&mut buf)).await;
            assert!(
                read.is_err(),
                "the stream's connection ended while it was written: {read:?}"
            );
            guard.write_all(b"3\r\n:\n\n\r\n").await.unwrap();
            let _ = rd.read(&mut [0u8; 256]).await.unwrap();
        }
        // Once nothing more is written, the keep-alive time runs from the last bytes.
        let n = tokio::time::timeout(IDLE + Duration::from_secs(1), guard.read(&mut buf))
            .await
            .expect("kept past its keep-alive time after the last write")
            .unwrap();
        assert_eq!(n, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_ends_after_the_keep_alive_time_counted_from_its_last_response() {
        let (client, server) = tokio::io::duplex(1024);
        let mut guard = HeadGuard::new(server, TEN, IDLE, Verdicts::default());
        let (mut rd, mut wr) = tokio::io::split(client);
        let mut buf = [0u8; 128];
        // Requests every 50 s for 200 s: longer than the keep-alive time in all, never idle
        // for as long.
        for _ in 0..4 {
            tokio::time::advance(Duration::from_secs(50)).await;
            wr.write_all(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
                .await
                .unwrap();
            let n = guard.read(&mut buf).await.unwrap();
            assert!(n > 0, "the connection ended while in use");
            guard.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.unwrap();
            let _ = rd.read(&mut [0u8; 64]).await.unwrap();
        }
        // Then idle: the stream ends (no error) once the keep-alive time has passed, not
        // before.
        let early = tokio::time::timeout(IDLE - Duration::from_secs(1), guard.read(&mut buf)).await;
        assert!(early.is_err(), "ended early: {early:?}");
        let n = tokio::time::timeout(Duration::from_secs(2), guard.read(&mut buf))
            .await
            .expect("the idle connection was kept past its keep-alive time")
            .unwrap();
        assert_eq!(n, 0);
    }

    #[test]
    fn a_head_ends_at_its_blank_line_however_its_bytes_are_split() {
        let heads: [(&[u8], HeadVerdict); 3] = [
            (
                b"GET /a#b HTTP/1.1\r\nHost: x\r\n\r\n",
                HeadVerdict::Fragment,
            ),
            (b"GET /a HTTP/1.1\nHost: x\n\n", HeadVerdict::Fine),
            // A CR LF CR that is no blank line yet.
            (b"GET /a HTTP/1.1\r\nX: \r\r\n\r\n", HeadVerdict::Fine),
        ];
        // The next request's line, read in the same bytes, is not this head's.
        let next = b"GET /c#d HTTP/1.1\r\n";
        for (head, verdict) in heads {
            let whole = [head, &next[..]].concat();
            for a in 0..=whole.len() {
                for b in a..=whole.len() {
                    let verdicts = Verdicts::default();
                    let second = Duration::from_secs(1);
                    let mut guard = HeadGuard::new((), second, second, verdicts.clone());
                    for (from, to) in [(0, a), (a, b), (b, whole.len())] {
                        let done = matches!(guard.phase, Phase::Request);
                        assert_eq!(done, from >= head.len(), "{head:?} cut at {a}, {b}");
                        guard.saw(&whole[from..to]);
                    }
                    assert!(matches!(guard.phase, Phase::Request));
                    assert_eq!(verdicts.lock().len(), 1, "one head, one verdict");
                    assert_eq!(verdicts.next(), verdict, "{head:?} cut at {a}, {b}");
                }
            }
        }
    }

    #[test]
    fn fragments_are_found_in_the_request_line() {
        assert_eq!(verdict_of(b"GET /a#b HTTP/1.1\r"), HeadVerdict::Fragment);
        assert_eq!(verdict_of(b"GET /a?x=#y HTTP/1.1\r"), HeadVerdict::Fragment);
        assert_eq!(verdict_of(b"GET /a HTTP/1.1\r"), HeadVerdict::Fine);
    }

    #[test]
    fn a_client_holds_at_most_its_share_of_connections() {
        let limiter = PerClient::new(2);
        let a: IpAddr = "198.51.100.1".parse().unwrap();
        let b: IpAddr = "198.51.100.2".parse().unwrap();
        let one = limiter.take(a).unwrap();
        let _two = limiter.take(a).unwrap();
        assert!(limiter.take(a).is_none());
        assert!(limiter.take(b).is_some(), "another client is not held back");
        drop(one);
        assert!(
            limiter.take(a).is_some(),
            "a slot comes back with its connection"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_started_head_must_arrive_in_time_but_idle_time_is_not_counted() {
        let (client, server) = tokio::io::duplex(1024);
        let verdicts = Verdicts::default();
        let mut guard = HeadGuard::new(server, TEN, IDLE, verdicts.clone());
        let (mut rd, mut wr) = tokio::io::split(client);
        // Idle for a minute: nothing started, nothing times out.
        tokio::time::advance(Duration::from_secs(60)).await;
        wr.write_all(b"GET /a#x HTTP/1.1\r\nHost: h\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 128];
        let n = guard.read(&mut buf).await.unwrap();
        assert!(n > 0);
        assert_eq!(verdicts.next(), HeadVerdict::Fragment);
        // The response, then a head that starts and never ends.
        guard
            .write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            .await
            .unwrap();
        let mut resp = [0u8; 64];
        let _ = rd.read(&mut resp).await.unwrap();
        wr.write_all(b"GET / HTTP/1.1\r\nHo").await.unwrap();
        let _ = guard.read(&mut buf).await.unwrap();
        let late = tokio::time::timeout(Duration::from_secs(11), guard.read(&mut buf)).await;
        match late {
            Ok(Err(e)) => assert_eq!(e.kind(), io::ErrorKind::TimedOut),
            other => panic!("the unfinished head was not cut off: {other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_sent_after_100_continue_is_no_head() {
        let (client, server) = tokio::io::duplex(1024);
        let verdicts = Verdicts::default();
        let mut guard = HeadGuard::new(server, TEN, IDLE, verdicts.clone());
        let (mut rd, mut wr) = tokio::io::split(client);
        wr.write_all(b"POST /search HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 11\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 256];
        let _ = guard.read(&mut buf).await.unwrap();
        guard
            .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            .await
            .unwrap();
        let _ = rd.read(&mut [0u8; 64]).await.unwrap();
        // A body that looks like a head with a fragment, ending in a blank line.
        wr.write_all(b"x #frag\n\nab").await.unwrap();
        let _ = guard.read(&mut buf).await.unwrap();
        assert_eq!(verdicts.next(), HeadVerdict::Fine, "the real head");
        guard.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.unwrap();
        let _ = rd.read(&mut [0u8; 64]).await.unwrap();
        // Nothing was taken for a second head, and no head timer runs on the idle connection.
        assert!(verdicts.lock().is_empty());
        let idle = tokio::time::timeout(Duration::from_secs(30), guard.read(&mut buf)).await;
        assert!(idle.is_err(), "the idle connection stays open: {idle:?}");
    }
}
