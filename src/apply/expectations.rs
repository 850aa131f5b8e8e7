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
//! The same record tells the watch event of our own write (its *echo*) from other changes. A
//! controller decided the state its write left, so the echo alone need not reconcile it again:
//! [`Expectations::own_echo`] lets the feeds drop it (unless a reconcile waits for it), and
//! [`Expectations::is_echo`] lets a controller that does not read what another one wrote drop
//! that echo too. Every other change of the object has a watch event of its own, and list
//! replays are never dropped (`stores.rs`).
//!
//! resourceVersions are compared for equality only: they are opaque, and the object a write
//! returns and the watch event of that change carry the same `metadata.resourceVersion`, the
//! one of the object's last change (Kubernetes API Concepts, "Resource versions",
//! kubernetes.io/docs/reference/using-api/api-concepts; KEP-5504 adds ordering only from v1.35,
//! which this does not need). A write that changed
//! nothing on the server returns the base resourceVersion and records nothing (no watch event
//! will come). An expectation also expires after [`TTL`] (a missed event must not stall an
//! object forever; controller-runtime's `ExpectationsTimeout` plays that role), and entries are
//! dropped once met, [`ECHO_GRACE`] after their echo was dropped, or expired, so the map holds
//! at most the writes of the last [`TTL`]. The runner records every write
//! ([`crate::apply::runner`]).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use fleet_api_rs::fleet_cluster::Cluster as FleetCluster;
use fleet_api_rs::fleet_cluster_registration_token::ClusterRegistrationToken;
use kube::Resource;

use crate::api::CapiCluster;
use crate::model::plan::ObjectId;

/// How long a reconcile waits at most for the cache to show our write.
pub const TTL: Duration = Duration::from_secs(30);

/// How long an expectation outlives its dropped echo: a reconcile that read the object just
/// before the echo reached the cache still finds it, and retries ([`RETRY_STALE`]) instead of
/// deciding from the state before our write.
pub const ECHO_GRACE: Duration = Duration::from_secs(5);

/// When a reconcile that read the object before the cache showed our write runs again, once
/// that write's echo was dropped (the cache shows it already; no event will come).
pub const RETRY_STALE: Duration = Duration::from_millis(10);

/// Which object: its kind and API group (and whether its status subresource), namespace (""
/// for cluster-scoped), name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    kind: String,
    namespace: String,
    name: String,
}

impl Key {
    pub fn new(kind: impl Into<String>, namespace: &str, name: &str) -> Self {
        Self {
            kind: kind.into(),
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }

    /// The key of a write of `object` (`status`: of its status subresource).
    pub fn of(object: &ObjectId, status: bool) -> Self {
        let resource = &object.resource;
        let namespace = object.namespace.as_deref().unwrap_or_default();
        Self::new(
            kind(&resource.kind, &resource.group, status),
            namespace,
            &object.name,
        )
    }

    /// The key of `name` in `namespace` of the type `K`.
    pub fn typed<K: Resource<DynamicType = ()>>(namespace: &str, name: &str) -> Self {
        Self::new(kind(&K::kind(&()), &K::group(&()), false), namespace, name)
    }

    /// A CAPI Cluster's metadata and spec (the finalizer patch of the cluster controller).
    pub fn cluster(namespace: &str, name: &str) -> Self {
        Self::typed::<CapiCluster>(namespace, name)
    }

    /// A CAPI Cluster's status: its `FleetReady` condition (the health controller's writes).
    pub fn cluster_status(namespace: &str, name: &str) -> Self {
        let status = kind(&CapiCluster::kind(&()), &CapiCluster::group(&()), true);
        Self::new(status, namespace, name)
    }

    /// A Fleet Cluster.
    pub fn fleet_cluster(namespace: &str, name: &str) -> Self {
        Self::typed::<FleetCluster>(namespace, name)
    }

    /// A ClusterRegistrationToken.
    pub fn token(namespace: &str, name: &str) -> Self {
        Self::typed::<ClusterRegistrationToken>(namespace, name)
    }
}

/// A key's kind: `Kind.group`, with `/status` for the status subresource.
fn kind(kind: &str, group: &str, status: bool) -> String {
    let status = if status { "/status" } else { "" };
    format!("{kind}.{group}{status}")
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
    /// A reconcile found the cache behind and waits for the echo: it must not be dropped.
    awaited: bool,
    /// The echo of `written` was dropped from the writer's feed.
    echo_dropped: bool,
    /// Tells this write from a later write of the same object (in `Inner::dropped`).
    seq: u64,
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
    /// Entries whose echo was dropped, oldest first, to forget [`ECHO_GRACE`] later.
    dropped: VecDeque<(Instant, Key, u64)>,
    next_seq: u64,
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
        inner.forget_dropped_echoes(now);
        // Keep the map bounded by the writes of the last TTL, whatever happens to the objects
        // (one sweep per TTL at most, so a write stays O(1) on average).
        let swept = *inner.swept.get_or_insert(now);
        if now.saturating_duration_since(swept) >= TTL {
            inner
                .pending
                .retain(|_, p| now.saturating_duration_since(p.since) < TTL);
            inner.swept = Some(now);
        }
        inner.next_seq += 1;
        let seq = inner.next_seq;
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
                p.echo_dropped = false;
                p.seq = seq;
            })
            .or_insert(Pending {
                base: base.map(str::to_string),
                superseded: Vec::new(),
                written,
                since: now,
                awaited: false,
                echo_dropped: false,
                seq,
            });
    }

    /// The watch event of our last write of `key` is awaited (its answer is the next
    /// observation's): it is not left out as our own echo.
    pub fn await_echo(&self, key: &Key) {
        if let Some(pending) = self.lock().pending.get_mut(key) {
            pending.awaited = true;
        }
    }

    /// Whether the cache, now holding `cached` (its resourceVersion, `None`: absent), shows our
    /// last write of `key` (or we wrote none, or it expired). Forgets the expectation once met.
    pub fn met(&self, key: &Key, cached: Option<&str>) -> bool {
        self.wait(key, cached).is_none()
    }

    #[cfg(test)]
    fn met_at(&self, key: &Key, cached: Option<&str>, now: Instant) -> bool {
        self.wait_at(key, cached, now).is_none()
    }

    /// How long a reconcile that read `key` at `cached` must wait before deciding: `None` when
    /// the cache shows our last write of it (see [`Self::met`]); [`TTL`] while the echo has not
    /// come (the reconcile then relies on it, so the echo is no longer dropped); [`RETRY_STALE`]
    /// when the echo came and was dropped after this reconcile read the object.
    pub fn wait(&self, key: &Key, cached: Option<&str>) -> Option<Duration> {
        self.wait_at(key, cached, Instant::now())
    }

    fn wait_at(&self, key: &Key, cached: Option<&str>, now: Instant) -> Option<Duration> {
        let mut inner = self.lock();
        let p = inner.pending.get_mut(key)?;
        let stale = p.base.as_deref() == cached
            || cached.is_some_and(|rv| p.superseded.iter().any(|s| s == rv));
        if !stale || now.saturating_duration_since(p.since) >= TTL {
            inner.pending.remove(key);
            return None;
        }
        if p.echo_dropped {
            return Some(RETRY_STALE);
        }
        p.awaited = true;
        Some(TTL)
    }

    /// Whether a watched change of `key` at `resource_version` is the echo of our last write
    /// and its writer need not reconcile it: no reconcile waits for it. The expectation is
    /// forgotten [`ECHO_GRACE`] later.
    pub fn own_echo(&self, key: &Key, resource_version: Option<&str>) -> bool {
        self.own_echo_at(key, resource_version, Instant::now())
    }

    fn own_echo_at(&self, key: &Key, resource_version: Option<&str>, now: Instant) -> bool {
        let mut inner = self.lock();
        inner.forget_dropped_echoes(now);
        let Some(p) = inner.pending.get_mut(key) else {
            return false;
        };
        if resource_version.is_none() || p.written.as_deref() != resource_version || p.awaited {
            return false;
        }
        if !p.echo_dropped {
            p.echo_dropped = true;
            let seq = p.seq;
            inner.dropped.push_back((now, key.clone(), seq));
        }
        true
    }

    /// Whether a watched change of `key` at `resource_version` is the echo of our last write
    /// (for a controller that does not read what that write changed).
    pub fn is_echo(&self, key: &Key, resource_version: Option<&str>) -> bool {
        resource_version.is_some()
            && self
                .lock()
                .pending
                .get(key)
                .is_some_and(|p| p.written.as_deref() == resource_version)
    }

    /// [`Self::own_echo`] for a watched object, its key made by `key` from namespace and name.
    pub fn own_echo_of<K: kube::Resource>(&self, object: &K, key: fn(&str, &str) -> Key) -> bool {
        key_of(object, key).is_some_and(|(key, version)| self.own_echo(&key, version))
    }

    /// [`Self::is_echo`] for a watched object, its key made by `key` from namespace and name.
    pub fn is_echo_of<K: kube::Resource>(&self, object: &K, key: fn(&str, &str) -> Key) -> bool {
        key_of(object, key).is_some_and(|(key, version)| self.is_echo(&key, version))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The key of a watched object (made by `key` from its namespace and name) and its
/// resourceVersion.
fn key_of<K: kube::Resource>(
    object: &K,
    key: fn(&str, &str) -> Key,
) -> Option<(Key, Option<&str>)> {
    let meta = object.meta();
    Some((
        key(meta.namespace.as_deref()?, meta.name.as_deref()?),
        meta.resource_version.as_deref(),
    ))
}

impl Inner {
    /// Forgets the expectations whose echo was dropped [`ECHO_GRACE`] ago (unless written
    /// again since).
    fn forget_dropped_echoes(&mut self, now: Instant) {
        while let Some((at, _, _)) = self.dropped.front() {
            if now.saturating_duration_since(*at) < ECHO_GRACE {
                break;
            }
            let Some((_, key, seq)) = self.dropped.pop_front() else {
                break;
            };
            if self
                .pending
                .get(&key)
                .is_some_and(|p| p.seq == seq && p.echo_dropped)
            {
                self.pending.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Expectations {
        /// How many expectations are pending.
        fn len(&self) -> usize {
            self.lock().pending.len()
        }

        fn is_empty(&self) -> bool {
            self.len() == 0
        }

        fn forget(&self, key: &Key) {
            self.lock().pending.remove(key);
        }
    }

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

    #[test]
    fn echoes_of_our_own_writes() {
        let t0 = Instant::now();
        let soon = t0 + Duration::from_millis(1);
        // (case, the write's base and result, whether a reconcile waited for it before the
        // event, the event's resourceVersion, whether the writer's feed drops the event)
        type Case<'a> = (
            &'a str,
            (Option<&'a str>, Option<&'a str>),
            bool,
            &'a str,
            bool,
        );
        let cases: &[Case] = &[
            ("the echo", (Some("5"), Some("7")), false, "7", true),
            ("the echo of a create", (None, Some("7")), false, "7", true),
            (
                "the echo a reconcile waits for",
                (Some("5"), Some("7")),
                true,
                "7",
                false,
            ),
            (
                "someone else's change",
                (Some("5"), Some("7")),
                false,
                "6",
                false,
            ),
            ("a later change", (Some("5"), Some("7")), false, "9", false),
        ];
        for (name, (base, written), waited, event, dropped) in cases {
            let e = Expectations::default();
            e.wrote_at(key("c"), *base, *written, t0);
            if *waited {
                assert_eq!(e.wait_at(&key("c"), *base, soon), Some(TTL), "{name}");
            }
            assert!(e.is_echo(&key("c"), *written), "{name}: peeking");
            assert_eq!(
                e.own_echo_at(&key("c"), Some(event), soon),
                *dropped,
                "{name}"
            );
            assert!(
                !e.own_echo_at(&key("other"), Some(event), soon),
                "{name}: other keys"
            );
        }
        let e = Expectations::default();
        assert!(!e.own_echo_at(&key("c"), Some("7"), t0), "nothing written");
        assert!(!e.is_echo(&key("c"), Some("7")), "nothing written");
    }

    #[test]
    fn a_reconcile_that_read_the_object_before_a_dropped_echo_retries_soon() {
        let t0 = Instant::now();
        let e = Expectations::default();
        e.wrote_at(key("c"), Some("5"), Some("7"), t0);
        assert!(e.own_echo_at(&key("c"), Some("7"), t0));
        assert!(
            e.own_echo_at(&key("c"), Some("7"), t0),
            "dropped again: same answer"
        );
        // It read the object at "5" before the cache moved: no event will wake it up.
        assert_eq!(e.wait_at(&key("c"), Some("5"), t0), Some(RETRY_STALE));
        assert_eq!(e.wait_at(&key("c"), Some("7"), t0), None, "it retried");
        assert!(e.is_empty(), "forgotten once met");
    }

    #[test]
    fn dropped_echoes_are_forgotten_after_the_grace() {
        let t0 = Instant::now();
        let e = Expectations::default();
        e.wrote_at(key("a"), Some("5"), Some("7"), t0);
        e.wrote_at(key("b"), Some("5"), Some("7"), t0);
        assert!(e.own_echo_at(&key("a"), Some("7"), t0));
        assert!(e.own_echo_at(&key("b"), Some("7"), t0));
        // `b` is written again before the grace ends: its new write stays expected.
        e.wrote_at(key("b"), Some("7"), Some("8"), t0 + ECHO_GRACE / 2);
        assert_eq!(e.len(), 2);
        assert!(!e.own_echo_at(&key("c"), Some("1"), t0 + ECHO_GRACE));
        assert_eq!(e.len(), 1, "`a` forgotten, `b` kept");
        assert_eq!(
            e.wait_at(&key("b"), Some("7"), t0 + ECHO_GRACE),
            Some(TTL),
            "`b`'s second write not seen yet"
        );
    }
}
