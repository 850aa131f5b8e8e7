//! The in-memory object store: one map per resource, a global resourceVersion counter, a
//! bounded event history for watches, and a broadcast of new events.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};
use tokio::sync::{Notify, broadcast};

use crate::registry::{GroupResource, Registry, ResourceDef};
use crate::util::{meta_mut, name_of, namespace_of};

/// Watch event types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// `ADDED`.
    Added,
    /// `MODIFIED`.
    Modified,
    /// `DELETED`.
    Deleted,
}

impl EventType {
    /// The wire name.
    pub fn as_str(&self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change to one object.
#[derive(Debug)]
pub struct Event {
    /// The resourceVersion the change got.
    pub rv: u64,
    /// (group, plural) of the object.
    pub gr: GroupResource,
    /// What happened.
    pub etype: EventType,
    /// The object after the change (for DELETED: the last state, with the deletion's rv).
    pub object: Arc<Value>,
    /// The object before the change (MODIFIED and DELETED).
    pub old: Option<Arc<Value>>,
}

/// An object's address: (group, plural), namespace, name.
pub type ObjKey = (GroupResource, String, String);

/// The uids an object's ownerReferences point at.
pub fn owner_uids(obj: &Value) -> Vec<String> {
    obj.get("metadata")
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| r.get("uid").and_then(Value::as_str).map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Objects of one resource, keyed by (namespace, name); "" namespace for cluster-scoped.
pub type Objects = BTreeMap<(String, String), Arc<Value>>;

/// Everything the API server knows, behind one lock.
pub struct State {
    /// Last assigned resourceVersion.
    pub rv: u64,
    /// Registered resources.
    pub registry: Registry,
    /// Objects per resource.
    pub objects: HashMap<GroupResource, Objects>,
    /// Recent events, oldest first.
    pub history: VecDeque<Arc<Event>>,
    /// Maximum number of retained events.
    pub history_cap: usize,
    /// Watches from a resourceVersion older than this answer 410 Gone.
    pub compacted_rv: u64,
    /// uid -> (group, plural, namespace, name), for owner lookups.
    pub uids: HashMap<String, (GroupResource, String, String)>,
    events: broadcast::Sender<Arc<Event>>,
    current_rv: Arc<AtomicU64>,
    /// owner uid -> objects whose ownerReferences point at it.
    pub dependents: HashMap<String, std::collections::BTreeSet<ObjKey>>,
    /// Set when anything changed since the last snapshot.
    pub dirty: bool,
    /// Work for the simulated controllers.
    pub work: Work,
    /// Bumped whenever an RBAC object (`rbac.authorization.k8s.io`) changes: the authorizer
    /// rebuilds its policy when it moved.
    pub rbac_generation: u64,
}

/// What the simulated controllers have to look at.
#[derive(Debug, Default)]
pub struct Work {
    /// Objects whose owners the garbage collector must check: written with ownerReferences,
    /// or an owner of theirs went away.
    pub gc: std::collections::BTreeSet<ObjKey>,
    /// A namespace is terminating or lost an object.
    pub namespaces: bool,
    /// Workloads (deployments, statefulsets, daemonsets, jobs) written since their status was
    /// last set: (plural, namespace, name).
    pub workloads: std::collections::BTreeSet<(String, String, String)>,
    /// When the namespace controller starts emptying each terminating namespace (it is
    /// asynchronous on a real cluster: `kubectl delete -f` of a namespace and its objects
    /// still finds the objects).
    pub namespace_due: HashMap<String, tokio::time::Instant>,
    /// How long after its deletion a namespace starts being emptied.
    pub namespace_delay: std::time::Duration,
}

impl Work {
    /// Whether anything is pending.
    pub fn is_pending(&self) -> bool {
        !self.gc.is_empty() || self.namespaces || !self.workloads.is_empty()
    }
}

impl State {
    /// Objects of a resource (empty when none).
    pub fn bucket(&self, gr: &GroupResource) -> Option<&Objects> {
        self.objects.get(gr)
    }

    /// One object.
    pub fn get(&self, gr: &GroupResource, ns: &str, name: &str) -> Option<Arc<Value>> {
        self.objects
            .get(gr)?
            .get(&(ns.to_string(), name.to_string()))
            .cloned()
    }

    /// Ensures a resource has a bucket.
    pub fn register(&mut self, def: ResourceDef) -> Arc<ResourceDef> {
        let def = self.registry.insert(def);
        self.objects
            .entry((def.group.clone(), def.plural.clone()))
            .or_default();
        def
    }

    fn index_owners(&mut self, key: &ObjKey, old: Option<&Value>, new: Option<&Value>) {
        if let Some(o) = old {
            for uid in owner_uids(o) {
                if let Some(set) = self.dependents.get_mut(&uid) {
                    set.remove(key);
                    if set.is_empty() {
                        self.dependents.remove(&uid);
                    }
                }
            }
        }
        if let Some(n) = new {
            let uids = owner_uids(n);
            if !uids.is_empty() {
                self.work.gc.insert(key.clone());
            }
            for uid in uids {
                self.dependents.entry(uid).or_default().insert(key.clone());
            }
        }
    }

    /// Assigns the next resourceVersion.
    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    fn record(&mut self, ev: Event) {
        let ev = Arc::new(ev);
        self.history.push_back(ev.clone());
        while self.history.len() > self.history_cap {
            if let Some(old) = self.history.pop_front() {
                self.compacted_rv = self.compacted_rv.max(old.rv);
            }
        }
        // No receivers is fine. The counter moves after the broadcast, so a watcher that has
        // drained its queue has seen every event up to the counter.
        if ev.gr.0 == "rbac.authorization.k8s.io" {
            self.rbac_generation += 1;
        }
        let _ = self.events.send(ev);
        self.current_rv.store(self.rv, Ordering::SeqCst);
        self.dirty = true;
    }

    /// Stores an object (create or update), stamping a new resourceVersion, and records the
    /// event. Returns the stored object.
    pub fn put(&mut self, gr: &GroupResource, mut obj: Value) -> Arc<Value> {
        let rv = self.next_rv();
        meta_mut(&mut obj).insert("resourceVersion".into(), json!(rv.to_string()));
        let key = (namespace_of(&obj).to_string(), name_of(&obj).to_string());
        if let Some(uid) = obj
            .get("metadata")
            .and_then(|m| m.get("uid"))
            .and_then(Value::as_str)
        {
            self.uids
                .insert(uid.to_string(), (gr.clone(), key.0.clone(), key.1.clone()));
        }
        let obj = Arc::new(obj);
        let old = self
            .objects
            .entry(gr.clone())
            .or_default()
            .insert(key.clone(), obj.clone());
        let okey = (gr.clone(), key.0, key.1);
        self.index_owners(&okey, old.as_deref(), Some(&obj));
        let etype = if old.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        self.record(Event {
            rv,
            gr: gr.clone(),
            etype,
            object: obj.clone(),
            old,
        });
        obj
    }

    /// Removes an object and records a DELETED event carrying the deletion's resourceVersion.
    pub fn remove(&mut self, gr: &GroupResource, ns: &str, name: &str) -> Option<Arc<Value>> {
        let old = self
            .objects
            .get_mut(gr)?
            .remove(&(ns.to_string(), name.to_string()))?;
        let okey = (gr.clone(), ns.to_string(), name.to_string());
        self.index_owners(&okey, Some(&old), None);
        if let Some(uid) = old
            .get("metadata")
            .and_then(|m| m.get("uid"))
            .and_then(Value::as_str)
        {
            self.uids.remove(uid);
            // Its dependents must be looked at by the garbage collector, and so must its
            // owners (one may be waiting for its dependents: foreground deletion).
            if let Some(deps) = self.dependents.get(uid) {
                self.work.gc.extend(deps.iter().cloned());
            }
            for owner in owner_uids(&old) {
                if let Some((ogr, ons, oname)) = self.uids.get(&owner) {
                    self.work
                        .gc
                        .insert((ogr.clone(), ons.clone(), oname.clone()));
                }
            }
        }
        let rv = self.next_rv();
        let mut last = (*old).clone();
        meta_mut(&mut last).insert("resourceVersion".into(), json!(rv.to_string()));
        let last = Arc::new(last);
        self.record(Event {
            rv,
            gr: gr.clone(),
            etype: EventType::Deleted,
            object: last.clone(),
            old: Some(old),
        });
        Some(last)
    }

    /// Inserts an object as loaded from a snapshot: no new resourceVersion, no event.
    pub fn load_object(&mut self, gr: &GroupResource, obj: Value) {
        let key = (namespace_of(&obj).to_string(), name_of(&obj).to_string());
        if let Some(uid) = obj
            .get("metadata")
            .and_then(|m| m.get("uid"))
            .and_then(Value::as_str)
        {
            self.uids
                .insert(uid.to_string(), (gr.clone(), key.0.clone(), key.1.clone()));
        }
        let okey = (gr.clone(), key.0.clone(), key.1.clone());
        self.index_owners(&okey, None, Some(&obj));
        self.objects
            .entry(gr.clone())
            .or_default()
            .insert(key, Arc::new(obj));
    }

    /// Sets the resourceVersion counter after loading a snapshot; the history starts empty, so
    /// watches from older versions answer 410 Gone, as after a real server's compaction.
    pub fn restore_rv(&mut self, rv: u64) {
        self.rv = self.rv.max(rv);
        self.compacted_rv = self.rv;
        self.history.clear();
        self.current_rv.store(self.rv, Ordering::SeqCst);
    }

    /// Drops all retained history: every older resourceVersion now answers 410 Gone.
    pub fn compact(&mut self) {
        self.history.clear();
        self.compacted_rv = self.rv;
    }

    /// The objects of a resource as they were at `rv`, rebuilt from the history; `None` when
    /// the history does not reach back that far.
    pub fn objects_at(&self, gr: &GroupResource, rv: u64) -> Option<Objects> {
        if rv < self.compacted_rv {
            return None;
        }
        let mut objs = self.objects.get(gr).cloned().unwrap_or_default();
        for ev in self.history.iter().rev() {
            if ev.rv <= rv {
                break;
            }
            if &ev.gr != gr {
                continue;
            }
            let key = (
                namespace_of(&ev.object).to_string(),
                name_of(&ev.object).to_string(),
            );
            match (&ev.etype, &ev.old) {
                (EventType::Added, _) => {
                    objs.remove(&key);
                }
                (_, Some(old)) => {
                    objs.insert(key, old.clone());
                }
                _ => {}
            }
        }
        Some(objs)
    }
}

/// The store: state behind a lock, plus the event broadcast and a wake-up for the simulated
/// controllers.
pub struct Store {
    state: Mutex<State>,
    events: broadcast::Sender<Arc<Event>>,
    current_rv: Arc<AtomicU64>,
    /// Woken after writes, for the simulated controllers and the snapshot writer.
    pub changed: Notify,
}

impl Store {
    /// An empty store with the built-in resources registered. `watch_buffer` bounds how far a
    /// watcher may fall behind before it is closed.
    pub fn new(history_cap: usize, watch_buffer: usize) -> Self {
        let (tx, _) = broadcast::channel(watch_buffer.max(16));
        let current_rv = Arc::new(AtomicU64::new(0));
        let mut state = State {
            rv: 0,
            registry: Registry::default(),
            objects: HashMap::new(),
            history: VecDeque::new(),
            history_cap: history_cap.max(1),
            compacted_rv: 0,
            uids: HashMap::new(),
            events: tx.clone(),
            current_rv: current_rv.clone(),
            dependents: HashMap::new(),
            dirty: false,
            work: Work::default(),
            rbac_generation: 0,
        };
        for d in crate::registry::builtins() {
            state.register(d);
        }
        Store {
            state: Mutex::new(state),
            events: tx,
            current_rv,
            changed: Notify::new(),
        }
    }

    /// Locks the state. A poisoned lock (a panic while holding it) is a programmer error, and
    /// the state is still consistent enough to serve: take it anyway.
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Subscribes to new events; call with the lock held to get no gap after a snapshot.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.events.subscribe()
    }

    /// The last assigned resourceVersion, without taking the lock.
    pub fn current_rv(&self) -> u64 {
        self.current_rv.load(Ordering::SeqCst)
    }
}
