//! The backoff of every watch stream: [`crate::model::retry::watch_reconnect_delay`] (0.5 s
//! doubling to 4 s) instead of kube-runtime's `default_backoff` (0.8 s toward 30 s), so the
//! controllers follow a recovered API server within seconds. kube-runtime's `StreamBackoff`
//! resets it after every successful event.

use std::time::Duration;

use kube::runtime::utils::Backoff;

use crate::model::retry::watch_reconnect_delay;

/// Failed attempts in a row, and the delays [`watch_reconnect_delay`] gives.
#[derive(Debug, Default)]
pub struct WatchBackoff {
    failures: u32,
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let delay = watch_reconnect_delay(self.failures);
        self.failures = self.failures.saturating_add(1);
        Some(delay)
    }
}

impl Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_to_the_cap_and_resets() {
        let mut backoff = WatchBackoff::default();
        let delays: Vec<Duration> = backoff.by_ref().take(5).collect();
        assert_eq!(delays[0], Duration::from_millis(500));
        assert_eq!(delays[4], Duration::from_secs(4));
        backoff.reset();
        assert_eq!(backoff.next(), Some(Duration::from_millis(500)));
    }
}
