//! How loudly a failed reconcile is logged. A transient error (a 5xx, a throttle, a conflict,
//! a dropped connection) that a retry absorbs is a WARN: the next attempt usually succeeds and
//! nobody needs to act. ERROR is kept for errors a user must act on (permissions, an object the
//! API server refuses, a malformed object, a missing reference) and for transient errors that
//! kept failing until the retry delay reached its cap: at that point retrying has in effect
//! given up on recovering by itself.
//!
//! Also the delays before a watch reconnects after an error ([`WATCH_RECONNECT_FIRST`] doubling
//! to [`WATCH_RECONNECT_CAP`]).

use std::time::Duration;

use tracing::Level;

/// First delay before a failed watch (or its re-list) is retried; it doubles up to
/// [`WATCH_RECONNECT_CAP`] (`crate::controllers::watch_backoff`).
pub const WATCH_RECONNECT_FIRST: Duration = Duration::from_millis(500);
/// Longest delay between two watch reconnection attempts. kube-runtime's
/// `watcher::DefaultBackoff` (kube-runtime 3.1 `src/watcher.rs`, client-go's reflector
/// parameters) grows from 0.8 s toward 30 s, so after an API outage of 45 s the watches came back
/// up to another 30 s later; with a 4 s cap the controllers follow the API server within seconds.
/// A 4 s period per watch is still gentle on a recovering API server (one list per kind and
/// manager).
pub const WATCH_RECONNECT_CAP: Duration = Duration::from_secs(4);

/// Whether retrying can fix an error by itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorClass {
    /// The API server or the network had a moment: retrying fixes it.
    Transient,
    /// Retrying gives the same answer until someone changes something.
    NeedsAction,
}

/// The class of an error from its metric label ([`crate::Error::metric_label`]).
pub fn classify(metric_label: &str) -> ErrorClass {
    match metric_label {
        // 5xx, 429, 409 (someone wrote in between), 404 (a cache a moment behind), client-side
        // connection errors and timeouts, local I/O.
        "server_error" | "throttled" | "conflict" | "not_found" | "kube_client" | "timeout"
        | "io" | "leadership_lost" => ErrorClass::Transient,
        _ => ErrorClass::NeedsAction,
    }
}

/// The level of the log line of a failed reconcile that is retried; `at_cap` says whether the
/// retry delay has reached its longest value (the object kept failing for minutes).
pub fn retry_level(class: ErrorClass, at_cap: bool) -> Level {
    match (class, at_cap) {
        (ErrorClass::Transient, false) => Level::WARN,
        (ErrorClass::Transient, true) | (ErrorClass::NeedsAction, _) => Level::ERROR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_errors_warn_until_the_backoff_is_at_its_cap() {
        let rows = [
            ("server_error", false, Level::WARN),
            ("throttled", false, Level::WARN),
            ("conflict", false, Level::WARN),
            ("not_found", false, Level::WARN),
            ("kube_client", false, Level::WARN),
            ("timeout", false, Level::WARN),
            ("server_error", true, Level::ERROR),
            ("conflict", true, Level::ERROR),
            ("forbidden", false, Level::ERROR),
            ("unauthorized", false, Level::ERROR),
            ("invalid", false, Level::ERROR),
            ("malformed_object", false, Level::ERROR),
            ("missing_object", false, Level::ERROR),
            ("serialization", false, Level::ERROR),
            ("api_error", false, Level::ERROR),
        ];
        for (label, at_cap, want) in rows {
            assert_eq!(
                retry_level(classify(label), at_cap),
                want,
                "{label} at_cap={at_cap}"
            );
        }
    }
}
