//! Our own writes that the caches have not shown yet (controller-runtime's "expectations").
//!
//! A write changes an object on the API server at once, but our cache sees it only when the
//! watch event arrives. A reconcile that runs in between (another watch event for the same
//! Cluster, a namespace event) decides from the old state and writes again: an apply that
//! changes nothing, a finalizer patch whose resourceVersion guard fails and is re-read. So each
//! write records the resourceVersion the cache held when we wrote (`base`); until the cache
//! holds a different one, a reconcile that reads that object waits: the watch event that moves
//! the cache triggers it again.
//!
//! resourceVersions are compared for equality only (they are opaque). A write that changed
//! nothing on the server returns the base resourceVersion and records nothing (no watch event
//! will come). An expectation also expires after [`TTL`] (a missed event must not stall an
//! object forever; controller-runtime's `ExpectationsTimeout` plays that role), and entries are
//! dropped once met, expired or when their object is deleted, so the map holds at most the
//! writes of the last [`TTL`].

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a reconcile waits at most for the cache to show our write.
pub const TTL: Duration = Duration::from_secs(30);

/// Which object: kind, namespace ("" for cluster-scoped), name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    kind: &'static str,
    namespace: String,
    name: String,
}

impl Key {
    pub fn new(kind: &'static str, namespace: &str, name: &str) -> Self {
        Self {
            kind,
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }
}

#[derive(Debug)]
struct Pending {
    /// The resourceVersion the cache held when we wrote (`None`: absent).
    base: Option<String>,
    /// What our earlier writes left, when we wrote again before the cache showed them (an
    /// agent-initiated Fleet Cluster is created as a stub, then applied): the cache must move
    /// past these too.
    superseded: Vec<String>,
    /// What our last write left.
    written: Option<String>,
    since: Instant,
}

/// Pending expectations, shared by the import controllers.
#[derive(Debug, Default)]
pub struct Expectations {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    pending: HashMap<Key, Pending>,
    /// When expired entries were last dropped.
    swept: Option<Instant>,
}

impl Expectations {
    /// Records a write of `key` made when the cache held `base` and that left the object at
    /// `written` (`None`: deleted). Nothing is recorded when the write changed nothing.
    pub fn wrote(&self, key: Key, base: Option<&str>, written: Option<&str>) {
        self.wrote_at(key, base, written, Instant::now());
    }

    fn wrote_at(&self, key: Key, base: Option<&str>, written: Option<&str>, now: Instant) {
        if base == written {
            return;
        }
        let mut inner = self.lock();
        // Keep the map bounded by the writes of the last TTL, whatever happens to the objects
        // (one sweep per TTL at most, so a write stays O(1) on average).
        let swept = *inner.swept.get_or_insert(now);
        if now.saturating_duration_since(swept) >= TTL {
            inner
                .pending
                .retain(|_, p| now.saturating_duration_since(p.since) < TTL);
            inner.swept = Some(now);
        }
        // A second write before the cache showed the first: the cache is still at the first
        // base, and must move past both.
        let written = written.map(str::to_string);
        inner
            .pending
            .entry(key)
            .and_modify(|p| {
                p.superseded.extend(p.written.take());
                p.written = written.clone();
                p.since = now;
            })
            .or_insert(Pending {
                base: base.map(str::to_string),
                superseded: Vec::new(),
                written,
                since: now,
            });
    }

    /// Whether the cache, now holding `cached` (its resourceVersion, `None`: absent), shows our
    /// last write of `key` (or we wrote none, or it expired). Forgets the expectation once met.
    pub fn met(&self, key: &Key, cached: Option<&str>) -> bool {
        self.met_at(key, cached, Instant::now())
    }

    fn met_at(&self, key: &Key, cached: Option<&str>, now: Instant) -> bool {
        let mut inner = self.lock();
        let Some(p) = inner.pending.get(key) else {
            return true;
        };
        let stale = p.base.as_deref() == cached
            || cached.is_some_and(|rv| p.superseded.iter().any(|s| s == rv));
        if !stale || now.saturating_duration_since(p.since) >= TTL {
            inner.pending.remove(key);
            return true;
        }
        false
    }

    /// Forgets what was expected of `key` (the object is gone and nothing will read it again).
    pub fn forget(&self, key: &Key) {
        self.lock().pending.remove(key);
    }

    /// How many expectations are pending.
    pub fn len(&self) -> usize {
        self.lock().pending.len()
    }

    /// Whether no expectation is pending.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> Key {
        Key::new("Cluster", "ns", name)
    }

    #[test]
    fn expectations_follow_the_cache() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(1);
        // (what the cache held when we wrote, what the write returned, what the cache holds at
        // the next reconcile, whether that reconcile may decide)
        type Case<'a> = (
            &'a str,
            Option<&'a str>,
            Option<&'a str>,
            Option<&'a str>,
            bool,
        );
        let cases: &[Case] = &[
            (
                "update not seen yet",
                Some("5"),
                Some("7"),
                Some("5"),
                false,
            ),
            ("update seen", Some("5"), Some("7"), Some("7"), true),
            ("a later write seen", Some("5"), Some("7"), Some("9"), true),
            ("create not seen yet", None, Some("7"), None, false),
            ("create seen", None, Some("7"), Some("7"), true),
            ("delete not seen yet", Some("5"), None, Some("5"), false),
            ("delete seen", Some("5"), None, None, true),
            (
                "no-op write: nothing to wait for",
                Some("5"),
                Some("5"),
                Some("5"),
                true,
            ),
        ];
        for (name, base, written, cached, met) in cases {
            let e = Expectations::default();
            e.wrote_at(key("c"), *base, *written, t0);
            assert_eq!(e.met_at(&key("c"), *cached, later), *met, "{name}");
            assert_eq!(e.is_empty(), *met, "{name}: forgotten once met");
            assert!(
                e.met_at(&key("other"), *cached, later),
                "{name}: other keys"
            );
        }
    }

    #[test]
    fn expectations_expire() {
        let t0 = Instant::now();
        let e = Expectations::default();
        e.wrote_at(key("c"), Some("5"), Some("7"), t0);
        assert!(!e.met_at(&key("c"), Some("5"), t0 + TTL - Duration::from_millis(1)));
        assert!(e.met_at(&key("c"), Some("5"), t0 + TTL));
        assert!(e.is_empty());
    }

    #[test]
    fn two_writes_before_the_cache_showed_either() {
        let t0 = Instant::now();
        let e = Expectations::default();
        // Created (stub), then applied, in one reconcile.
        e.wrote_at(key("c"), None, Some("7"), t0);
        e.wrote_at(key("c"), Some("7"), Some("8"), t0);
        assert!(!e.met_at(&key("c"), None, t0), "nothing seen");
        assert!(
            !e.met_at(&key("c"), Some("7"), t0),
            "only the first write seen"
        );
        assert!(e.met_at(&key("c"), Some("8"), t0), "the last write seen");
    }

    #[test]
    fn map_stays_bounded_by_recent_writes() {
        let t0 = Instant::now();
        let e = Expectations::default();
        for i in 0..100 {
            e.wrote_at(key(&format!("old-{i}")), None, Some("1"), t0);
        }
        assert_eq!(e.len(), 100);
        e.wrote_at(key("new"), None, Some("1"), t0 + TTL);
        assert_eq!(e.len(), 1, "expired entries are swept on the next write");
        e.forget(&key("new"));
        assert!(e.is_empty());
    }
}
