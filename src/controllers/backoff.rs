//! Per-object exponential backoff for reconcile errors, the one every controller uses: a failing
//! object is retried at 5 s, 10 s, 20 s, … up to 5 minutes, and starts over after a success or
//! when its spec changes (a new generation is a new situation). Never a hot loop, and one broken
//! object does not slow the others.
//!
//! Counts are keyed by controller and object ([`BackoffKey`]), so a Cluster `namespace/foo` and
//! a Namespace `foo` never share one; and an entry is forgotten once its object has not failed
//! for longer than the longest delay, so objects deleted while failing do not stay forever.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::Resource;

/// First retry delay.
pub const BASE: Duration = Duration::from_secs(5);
/// Longest retry delay.
pub const CAP: Duration = Duration::from_secs(300);

/// Which controller failed on which object.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BackoffKey {
    controller: &'static str,
    namespace: Option<String>,
    name: String,
}

impl BackoffKey {
    pub fn new(controller: &'static str, object: &impl Resource) -> Self {
        let meta = object.meta();
        Self {
            controller,
            namespace: meta.namespace.clone(),
            name: meta.name.clone().unwrap_or_default(),
        }
    }

    /// The object's `metadata.generation`, which [`Backoff`] uses to start over after a spec
    /// change.
    pub fn generation_of(object: &impl Resource) -> Option<i64> {
        object.meta().generation
    }
}

impl std::fmt::Display for BackoffKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(namespace) => write!(f, "{namespace}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Failures {
    count: u32,
    generation: Option<i64>,
    retry_at: Instant,
}

/// Failure counts per object.
pub struct Backoff {
    state: Mutex<State>,
}

struct State {
    failures: HashMap<BackoffKey, Failures>,
    last_sweep: Instant,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            state: Mutex::new(State {
                failures: HashMap::new(),
                last_sweep: Instant::now(),
            }),
        }
    }
}

impl Backoff {
    /// Records a failure of `key` at `generation`; returns how long to wait before retrying.
    pub fn failed(&self, key: &BackoffKey, generation: Option<i64>) -> Duration {
        self.failed_at(key, generation, Instant::now())
    }

    fn failed_at(&self, key: &BackoffKey, generation: Option<i64>, now: Instant) -> Duration {
        let mut state = self.lock();
        state.sweep(now);
        let previous = state
            .failures
            .get(key)
            .filter(|f| f.generation == generation)
            .map_or(0, |f| f.count);
        let delay = delay_after(previous);
        state.failures.insert(
            key.clone(),
            Failures {
                count: previous.saturating_add(1),
                generation,
                retry_at: now + delay,
            },
        );
        delay
    }

    /// Records a success of `key`.
    pub fn succeeded(&self, key: &BackoffKey) {
        self.lock().failures.remove(key);
    }

    /// How long `key` still waits after its last failure, unless its spec changed since
    /// (for controllers that are woken by events other than their own requeue).
    pub fn remaining(&self, key: &BackoffKey, generation: Option<i64>) -> Option<Duration> {
        let now = Instant::now();
        let state = self.lock();
        let failures = state.failures.get(key)?;
        (failures.generation == generation && failures.retry_at > now)
            .then(|| failures.retry_at - now)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl State {
    /// Forgets entries whose retry is more than [`CAP`] past: their object succeeded since
    /// without us hearing (a reconcile that ended otherwise) or is gone. At most once per
    /// [`BASE`], so a failure storm does not turn every failure into a full scan.
    fn sweep(&mut self, now: Instant) {
        if now.duration_since(self.last_sweep) < BASE {
            return;
        }
        self.last_sweep = now;
        self.failures
            .retain(|_, f| now.saturating_duration_since(f.retry_at) <= CAP);
    }
}

/// The delay after `previous` failures: BASE·2^previous, capped.
pub fn delay_after(previous: u32) -> Duration {
    let factor = 2u32.saturating_pow(previous.min(16));
    BASE.saturating_mul(factor).min(CAP)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    use kube::api::ObjectMeta;

    use super::*;

    impl Backoff {
        /// How many objects are in backoff (entries not forgotten yet).
        pub fn len(&self) -> usize {
            self.lock().failures.len()
        }

        /// Whether no object is in backoff.
        pub fn is_empty(&self) -> bool {
            self.len() == 0
        }
    }

    fn object(namespace: Option<&str>, name: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                namespace: namespace.map(str::to_string),
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn key(namespace: Option<&str>, name: &str) -> BackoffKey {
        BackoffKey::new("test", &object(namespace, name))
    }

    #[test]
    fn doubles_up_to_the_cap_and_resets() {
        let backoff = Backoff::default();
        let a = key(Some("ns"), "a");
        let delays: Vec<u64> = (0..9).map(|_| backoff.failed(&a, None).as_secs()).collect();
        assert_eq!(delays, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(
            backoff.failed(&key(Some("ns"), "b"), None).as_secs(),
            5,
            "per object"
        );
        backoff.succeeded(&a);
        assert_eq!(backoff.failed(&a, None).as_secs(), 5);
        assert_eq!(delay_after(u32::MAX), CAP);
    }

    #[test]
    fn keys_tell_kinds_and_scopes_apart() {
        // Once both were "namespace/foo".
        let backoff = Backoff::default();
        let cluster = key(Some("namespace"), "foo");
        let namespace = BackoffKey::new(
            "namespace",
            &Namespace {
                metadata: ObjectMeta {
                    name: Some("namespace/foo".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        );
        assert_ne!(cluster, namespace);
        backoff.failed(&cluster, None);
        assert_eq!(backoff.failed(&namespace, None), BASE);
        // The same object in another controller has a count of its own.
        assert_eq!(
            backoff.failed(
                &BackoffKey::new("other", &object(Some("namespace"), "foo")),
                None
            ),
            BASE
        );
    }

    #[test]
    fn a_new_generation_starts_over_and_is_not_held() {
        let backoff = Backoff::default();
        let a = key(None, "config");
        backoff.failed(&a, Some(1));
        assert_eq!(backoff.failed(&a, Some(1)), BASE * 2);
        assert!(backoff.remaining(&a, Some(1)).is_some());
        assert_eq!(
            backoff.remaining(&a, Some(2)),
            None,
            "a new spec is tried at once"
        );
        assert_eq!(backoff.failed(&a, Some(2)), BASE);
    }

    #[test]
    fn forgets_objects_that_stopped_failing_long_ago() {
        let backoff = Backoff::default();
        let start = Instant::now();
        for i in 0..100 {
            backoff.failed_at(&key(Some("ns"), &format!("gone-{i}")), None, start);
        }
        assert_eq!(backoff.len(), 100);
        // Within the longest delay nothing is forgotten…
        backoff.failed_at(&key(Some("ns"), "x"), None, start + CAP);
        assert_eq!(backoff.len(), 101);
        // …after it, only the recent failure stays.
        backoff.failed_at(&key(Some("ns"), "y"), None, start + BASE + CAP * 2);
        assert_eq!(backoff.len(), 2);
    }
}
