//! Retry delays of failing objects: each object's consecutive failures, counted until it
//! succeeds or goes, give an exponential delay with jitter (so failing cards do not retry in
//! lockstep).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// Consecutive failures per object key (`namespace/name` of a card, `directory/<name>`).
#[derive(Default)]
pub struct Backoff {
    failures: Mutex<HashMap<String, u32>>,
}

impl Backoff {
    /// Count one more failure of `key`; the delay before its retry (see [`backoff_delay`]).
    pub fn next(&self, key: &str) -> Duration {
        let mut failures = crate::locks::lock(&self.failures);
        let n = failures.entry(key.to_string()).or_insert(0);
        *n = n.saturating_add(1);
        // Jitter from the clock's nanoseconds: enough to spread retries, no RNG needed.
        let jitter =
            f64::from(jiff::Timestamp::now().subsec_nanosecond().unsigned_abs() % 1000) / 1000.0;
        backoff_delay(*n, jitter)
    }

    /// Forget the failures of `key` (after a success, or when it is gone).
    pub fn reset(&self, key: &str) {
        crate::locks::lock(&self.failures).remove(key);
    }
}

/// Retry delay after the `failures`-th consecutive failure: 1 s doubling to at most 5 min,
/// scaled by 0.8–1.2 with `jitter` in [0, 1) so failing cards do not retry in lockstep.
pub fn backoff_delay(failures: u32, jitter: f64) -> Duration {
    let base = Duration::from_secs(1)
        .saturating_mul(1u32 << failures.saturating_sub(1).min(9))
        .min(Duration::from_secs(300));
    base.mul_f64(0.8 + 0.4 * jitter.clamp(0.0, 1.0))
}

/// Send `item` to `tx` after `delay`: what failed on an event that will not come again is
/// tried again, with backoff (the API server may be away).
pub fn again_after<T: Send + 'static>(
    tx: &futures::channel::mpsc::UnboundedSender<T>,
    item: T,
    delay: Duration,
) {
    let tx = tx.clone();
    // In the caller's span: the retry belongs to what failed.
    tokio::spawn(tracing::Instrument::in_current_span(async move {
        tokio::time::sleep(delay).await;
        let _ = tx.unbounded_send(item);
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_per_failure_up_to_five_minutes_with_jitter() {
        let secs = |n| backoff_delay(n, 0.5).as_secs_f64();
        assert_eq!([secs(1), secs(2), secs(3), secs(4)], [1.0, 2.0, 4.0, 8.0]);
        assert_eq!(secs(9), 256.0);
        assert_eq!(secs(10), 300.0);
        assert_eq!(secs(1000), 300.0);
        assert!((backoff_delay(1, 0.0).as_secs_f64() - 0.8).abs() < 1e-9);
        assert!((backoff_delay(1, 0.999).as_secs_f64() - 1.2).abs() < 1e-3);
    }

    #[test]
    fn failures_count_per_object_until_reset() {
        let b = Backoff::default();
        let first = b.next("a/x");
        let second = b.next("a/x");
        assert!(second > first, "{first:?} then {second:?}");
        assert!(b.next("a/y") < second, "another object starts over");
        b.reset("a/x");
        assert!(b.next("a/x") < Duration::from_millis(1300));
    }
}
