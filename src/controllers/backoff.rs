//! Per-object exponential backoff for reconcile errors: a failing object is retried at 5 s,
//! 10 s, 20 s, … up to 5 minutes, and starts over after a success. Never a hot loop, and one
//! broken object does not slow the others.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// First retry delay.
pub const BASE: Duration = Duration::from_secs(5);
/// Longest retry delay.
pub const CAP: Duration = Duration::from_secs(300);

/// Failure counts per object key.
#[derive(Default)]
pub struct Backoff {
    failures: Mutex<HashMap<String, u32>>,
}

impl Backoff {
    /// Records a failure of `key`; returns how long to wait before retrying.
    pub fn failed(&self, key: &str) -> Duration {
        let mut failures = self.lock();
        let count = failures.entry(key.to_string()).or_insert(0);
        let delay = delay_after(*count);
        *count = count.saturating_add(1);
        delay
    }

    /// Records a success of `key`.
    pub fn succeeded(&self, key: &str) {
        self.lock().remove(key);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        self.failures
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The delay after `previous` failures: BASE·2^previous, capped.
pub fn delay_after(previous: u32) -> Duration {
    let factor = 2u32.saturating_pow(previous.min(16));
    BASE.saturating_mul(factor).min(CAP)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_and_resets() {
        let backoff = Backoff::default();
        let delays: Vec<u64> = (0..9).map(|_| backoff.failed("a").as_secs()).collect();
        assert_eq!(delays, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(backoff.failed("b").as_secs(), 5, "per object");
        backoff.succeeded("a");
        assert_eq!(backoff.failed("a").as_secs(), 5);
        assert_eq!(delay_after(u32::MAX), CAP);
    }
}
