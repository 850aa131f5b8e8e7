//! Fault injection: failing a deterministic fraction of requests, adding latency, closing
//! watches, compacting history. Configured over HTTP (`/sandbox/faults`) or in process.

use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::ApiError;
use crate::requests::Verb;

/// Which requests a rule applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub enum FaultTarget {
    /// GET, LIST, WATCH.
    Reads,
    /// POST, PUT, PATCH, APPLY, DELETE, DELETECOLLECTION.
    Writes,
    /// Everything.
    #[default]
    All,
}

/// One fault rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct FaultRule {
    /// Reads, writes or all.
    pub target: FaultTarget,
    /// Only requests for this resource (plural), when set.
    pub resource: Option<String>,
    /// Only these verbs (`GET`, `LIST`, `APPLY`, ...), when set.
    pub verbs: Option<Vec<String>>,
    /// Fraction (0..=1) of matching requests that fail. Deterministic: the n-th matching
    /// request fails when `floor(n * fraction)` increases, so 0.5 fails every second one.
    pub fraction: f64,
    /// Status code of the failure (500, 429, 409, ...); `None` adds only latency.
    pub code: Option<u16>,
    /// `Retry-After` seconds for 429 answers.
    pub retry_after_seconds: Option<u64>,
    /// Latency added to every matching request, in milliseconds.
    pub latency_ms: Option<u64>,
}

/// The fault configuration (`POST /sandbox/faults` body).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct FaultConfig {
    /// Rules; the first failing rule wins, latencies add up.
    pub rules: Vec<FaultRule>,
    /// Close every open watch stream now.
    pub close_watches_now: bool,
    /// Close every open watch stream every N seconds.
    pub close_watches_every_seconds: Option<f64>,
    /// Drop the watch history now: older resourceVersions answer 410 Gone.
    pub compact_history: bool,
    /// Events of watches started from now on reach the client this much later than they
    /// happened: a lagging watch cache, as a loaded API server or network produces.
    pub watch_delays: Vec<WatchDelay>,
}

/// A delay on the watch events of one resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct WatchDelay {
    /// API group ("" for core).
    pub group: String,
    /// Resource plural.
    pub resource: String,
    /// Milliseconds between an event and its delivery.
    pub delay_ms: u64,
}

impl FaultRule {
    /// Fails `fraction` of the matching requests with `code`.
    pub fn fail(target: FaultTarget, fraction: f64, code: u16) -> Self {
        FaultRule {
            target,
            fraction,
            code: Some(code),
            retry_after_seconds: (code == 429).then_some(1),
            ..Default::default()
        }
    }

    /// Only for one resource.
    pub fn for_resource(mut self, plural: &str) -> Self {
        self.resource = Some(plural.to_string());
        self
    }

    fn matches(&self, verb: Verb, resource: &str) -> bool {
        let t = match self.target {
            FaultTarget::Reads => verb.is_read(),
            FaultTarget::Writes => verb.is_write(),
            FaultTarget::All => true,
        };
        t && self.resource.as_deref().is_none_or(|r| r == resource)
            && self
                .verbs
                .as_ref()
                .is_none_or(|vs| vs.iter().any(|v| v.eq_ignore_ascii_case(verb.as_str())))
    }
}

/// Live fault state: rules with their counters.
#[derive(Debug, Default)]
pub struct Faults {
    inner: Mutex<Vec<(FaultRule, u64)>>,
    watch_delays: Mutex<Vec<WatchDelay>>,
}

impl Faults {
    /// Replaces the rules (counters restart).
    pub fn set(&self, rules: Vec<FaultRule>) {
        *self.inner.lock().unwrap_or_else(|e| e.into_inner()) =
            rules.into_iter().map(|r| (r, 0)).collect();
    }

    /// Replaces the watch delays (for watches started from now on).
    pub fn set_watch_delays(&self, delays: Vec<WatchDelay>) {
        *self.watch_delays.lock().unwrap_or_else(|e| e.into_inner()) = delays;
    }

    /// How late the events of a new watch on `group`/`resource` are delivered.
    pub fn watch_delay(&self, group: &str, resource: &str) -> Duration {
        self.watch_delays
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|d| d.group == group && d.resource == resource)
            .map(|d| Duration::from_millis(d.delay_ms))
            .sum()
    }

    /// The current rules.
    pub fn rules(&self) -> Vec<FaultRule> {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(r, _)| r.clone())
            .collect()
    }

    /// Decides the fate of one request: an injected error and/or latency.
    pub fn check(&self, verb: Verb, resource: &str) -> (Option<ApiError>, Duration) {
        let mut rules = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut err = None;
        let mut latency = Duration::ZERO;
        for (rule, n) in rules.iter_mut() {
            if !rule.matches(verb, resource) {
                continue;
            }
            if let Some(ms) = rule.latency_ms {
                latency += Duration::from_millis(ms);
            }
            let Some(code) = rule.code else { continue };
            let f = rule.fraction.clamp(0.0, 1.0);
            let before = (*n as f64 * f).floor();
            *n += 1;
            let after = (*n as f64 * f).floor();
            if err.is_none() && after > before {
                err = Some(injected(code, rule.retry_after_seconds));
            }
        }
        (err, latency)
    }
}

fn injected(code: u16, retry_after: Option<u64>) -> ApiError {
    let mut e = match code {
        429 => ApiError::new(
            429,
            "TooManyRequests",
            "injected fault: too many requests, please try again later",
        ),
        409 => ApiError::new(
            409,
            "Conflict",
            "injected fault: Operation cannot be fulfilled: the object has been modified; please apply your changes to the latest version and try again",
        ),
        503 => ApiError::new(
            503,
            "ServiceUnavailable",
            "injected fault: service unavailable",
        ),
        504 => ApiError::new(504, "Timeout", "injected fault: timeout"),
        404 => ApiError::new(404, "NotFound", "injected fault: not found"),
        c => ApiError::new(
            c,
            "InternalError",
            "injected fault: Internal error occurred",
        ),
    };
    if code == 429 {
        e.details.retry_after = Some(retry_after.unwrap_or(1));
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fraction_is_deterministic() {
        let f = Faults::default();
        f.set(vec![FaultRule::fail(FaultTarget::Writes, 0.5, 500)]);
        let fails: Vec<bool> = (0..6)
            .map(|_| f.check(Verb::Post, "configmaps").0.is_some())
            .collect();
        assert_eq!(fails, vec![false, true, false, true, false, true]);
        assert!(f.check(Verb::Get, "configmaps").0.is_none());
    }

    #[test]
    fn scoped_rule_and_retry_after() {
        let f = Faults::default();
        f.set(vec![
            FaultRule::fail(FaultTarget::All, 1.0, 429).for_resource("secrets"),
        ]);
        assert!(f.check(Verb::Get, "configmaps").0.is_none());
        let e = f.check(Verb::Get, "secrets").0.unwrap();
        assert_eq!((e.code, e.details.retry_after), (429, Some(1)));
    }
}
