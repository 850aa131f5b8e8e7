//! The backoff of every watch stream: kube-runtime's own exponential backoff
//! (`kube::runtime::watcher::ExponentialBackoff`, kube-runtime 3.1 `src/watcher.rs`, built from
//! the `backon` builder it is made of; kube-runtime's `StreamBackoff` resets it after every
//! successful event) with [`crate::model::retry`]'s delays: 0.5 s doubling to 4 s, no jitter,
//! instead of `default_backoff`'s 0.8 s toward 30 s, so the controllers follow a recovered API
//! server within seconds (`tests/faults.rs`, `tests/outage.rs`).

use kube::runtime::watcher::ExponentialBackoff;

use crate::model::retry::{WATCH_RECONNECT_CAP, WATCH_RECONNECT_FIRST};

/// A fresh backoff for one watch stream (`WatchStreamExt::backoff`).
pub fn watch_backoff() -> ExponentialBackoff {
    backon::ExponentialBuilder::default()
        .with_min_delay(WATCH_RECONNECT_FIRST)
        .with_max_delay(WATCH_RECONNECT_CAP)
        .with_factor(2.0)
        .without_max_times()
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::utils::Backoff;

    #[test]
    fn doubles_from_half_a_second_to_four_and_resets() {
        let mut backoff = watch_backoff();
        let delays: Vec<u128> = backoff.by_ref().take(7).map(|d| d.as_millis()).collect();
        assert_eq!(delays, [500, 1000, 2000, 4000, 4000, 4000, 4000]);
        assert_eq!(backoff.by_ref().take(100).last(), Some(WATCH_RECONNECT_CAP));
        backoff.reset();
        assert_eq!(backoff.next(), Some(WATCH_RECONNECT_FIRST));
    }
}
