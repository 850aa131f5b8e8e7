//! Caches of the objects Clusters reference (ControlPlane, InfrastructureCluster), for
//! `templateValues`. A watch per referenced kind is started on first use, at the version the API
//! server serves for that group (not the CRD storage version CAAPF guessed); changes that the
//! user makes (generation, labels, annotations) re-trigger the owning Cluster.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, ApiResource, DynamicObject};
use kube::discovery;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::Value;
use tokio::sync::{Mutex, mpsc};
use tokio_util::sync::CancellationToken;

use crate::api::CapiCluster;
use crate::api::compact::CompactObject;
use crate::controllers::import::stores::map_event;
use crate::model::capi::ProviderRef;

/// How long a reconcile waits for a new cache's first list before going on without it.
const FIRST_LIST_WAIT: Duration = Duration::from_secs(10);
/// How long a kind that could not be discovered is not retried.
const DISCOVERY_RETRY: Duration = Duration::from_secs(300);

/// Result of looking up a referenced object.
#[derive(Debug)]
pub enum Lookup {
    Found(Value),
    /// The kind is served but the object does not exist (yet).
    Missing,
    /// The kind cannot be read (not served, not allowed, cache not synced): the reason.
    Unavailable(String),
}

/// The state of one referenced kind, locked while it is being discovered.
type Slot = Arc<Mutex<Option<Entry>>>;

enum Entry {
    Watching(Watched),
    Failed { at: Instant, reason: String },
}

/// A started cache of one referenced kind.
#[derive(Clone)]
struct Watched {
    cache: Cache,
    /// True once the first list completed (many reconciles may wait on it at once, which
    /// kube's `Store::wait_until_ready` does not support).
    listed: tokio::sync::watch::Receiver<bool>,
}

/// The referenced-object caches.
pub struct References {
    client: Client,
    namespace: Option<String>,
    /// One slot per referenced (group, kind). The outer lock is held only to find the slot;
    /// discovery runs under the slot's own lock, so a slow discovery of one kind does not hold
    /// lookups of the others.
    entries: std::sync::Mutex<HashMap<(String, String), Slot>>,
    triggers: mpsc::UnboundedSender<ObjectRef<CapiCluster>>,
    shutdown: CancellationToken,
}

impl References {
    /// `triggers` receives the Clusters to reconcile when a referenced object changes.
    pub fn new(
        client: Client,
        namespace: Option<String>,
        triggers: mpsc::UnboundedSender<ObjectRef<CapiCluster>>,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            client,
            namespace,
            entries: std::sync::Mutex::new(HashMap::new()),
            triggers,
            shutdown,
        }
    }

    /// Looks up a referenced object in its cache, starting the cache on first use.
    pub async fn lookup(&self, reference: &ProviderRef) -> Lookup {
        let cache = match self.synced(reference).await {
            Ok(cache) => cache,
            Err(reason) => return Lookup::Unavailable(reason),
        };
        let found = cache.get(&reference.namespace, &reference.name);
        match found.map(|object| serde_json::to_value(&*object)) {
            Some(Ok(object)) => Lookup::Found(object),
            // Never a silent `null` in templateValues.
            Some(Err(err)) => Lookup::Unavailable(format!(
                "{} {}/{} cannot be serialised: {err}",
                reference.kind, reference.namespace, reference.name
            )),
            None => Lookup::Missing,
        }
    }

    /// The objects of `reference`'s group and kind in its namespace that belong to the Cluster
    /// `reference.name`: by `spec.clusterName` (required on MachineDeployments: cluster-api
    /// v1.12.11 `api/core/v1beta2/machinedeployment_types.go`) or its owner reference (added only
    /// once the Cluster is not paused: `internal/controllers/machinedeployment/
    /// machinedeployment_controller.go` `reconcile`), from the same caches; `Err`: why they
    /// cannot be read.
    pub async fn owned_by(&self, reference: &ProviderRef) -> Result<Vec<Value>, String> {
        let cache = self.synced(reference).await?;
        let owned = cache
            .read()
            .values()
            .filter(|object| {
                object.metadata.namespace.as_deref() == Some(reference.namespace.as_str())
                    && owning_clusters(object)
                        .iter()
                        .any(|owner| owner.name == reference.name)
            })
            .map(|object| serde_json::to_value(&**object))
            .collect::<Result<Vec<_>, _>>();
        owned.map_err(|err| format!("{} cannot be serialised: {err}", reference.kind))
    }

    /// The cache of `reference`'s kind once it holds its first list.
    async fn synced(&self, reference: &ProviderRef) -> Result<Cache, String> {
        let Watched { cache, mut listed } = self.store_for(reference).await?;
        let first_list = listed.wait_for(|listed| *listed);
        match tokio::time::timeout(FIRST_LIST_WAIT, first_list).await {
            Ok(Ok(_)) => Ok(cache),
            _ => Err(format!(
                "{} objects are not readable yet (watch not synced)",
                reference.kind
            )),
        }
    }

    async fn store_for(&self, reference: &ProviderRef) -> Result<Watched, String> {
        let key = (reference.group.clone(), reference.kind.clone());
        let slot = self
            .entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key)
            .or_default()
            .clone();
        let mut entry = slot.lock().await;
        match &*entry {
            Some(Entry::Watching(watched)) => return Ok(watched.clone()),
            Some(Entry::Failed { at, reason }) if at.elapsed() < DISCOVERY_RETRY => {
                return Err(reason.clone());
            }
            _ => {}
        }
        match self.start(reference).await {
            Ok(watched) => {
                *entry = Some(Entry::Watching(watched.clone()));
                Ok(watched)
            }
            Err(reason) => {
                *entry = Some(Entry::Failed {
                    at: Instant::now(),
                    reason: reason.clone(),
                });
                Err(reason)
            }
        }
    }

    async fn start(&self, reference: &ProviderRef) -> Result<Watched, String> {
        let group = discovery::group(&self.client, &reference.group)
            .await
            .map_err(|err| format!("API group {} is not served: {err}", reference.group))?;
        let (resource, _) = group.recommended_kind(&reference.kind).ok_or_else(|| {
            format!(
                "kind {} is not served in API group {}",
                reference.kind, reference.group
            )
        })?;
        tracing::info!(group = %resource.group, version = %resource.version, kind = %resource.kind, "watching referenced kind");
        Ok(self.spawn_watch(resource))
    }

    fn spawn_watch(&self, resource: ApiResource) -> Watched {
        let api: Api<DynamicObject> = match &self.namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        };
        let cache = Cache::default();
        let (listed_tx, listed) = tokio::sync::watch::channel(false);
        let triggers = self.triggers.clone();
        let shutdown = self.shutdown.clone();
        let kind = resource.kind.clone();
        let events = crate::controllers::watch_list::events(
            kind.clone(),
            watcher::Config::default().page_size(500),
            move |config| watcher(api.clone(), config),
        )
        .backoff(crate::controllers::watch_backoff::watch_backoff())
        .map_ok(|event| map_event(event, cached_reference));
        let filled = cache.clone();
        tokio::spawn(async move {
            let mut events = std::pin::pin!(events);
            let mut filling = Filling::default();
            loop {
                let event = tokio::select! {
                    () = shutdown.cancelled() => return,
                    next = events.next() => next,
                };
                let event = match event {
                    None => return,
                    Some(Err(err)) => {
                        tracing::warn!(%err, kind = %kind, "watching referenced objects");
                        continue;
                    }
                    Some(Ok(event)) => event,
                };
                let listed_now = matches!(event, watcher::Event::InitDone);
                for owner in filling.apply(&filled, event) {
                    let _ = triggers.send(owner);
                }
                if listed_now {
                    let _ = listed_tx.send(true);
                }
            }
        });
        Watched { cache, listed }
    }
}

/// The cached objects of one referenced kind, by namespace and name. (kube's reflector store
/// keys each object by a whole `ObjectRef`, with copies of the kind's `ApiResource`, the
/// resourceVersion and the uid: about 450 bytes per object, as much as the compact object.)
#[derive(Clone, Default)]
struct Cache(Arc<std::sync::RwLock<Objects>>);

type Objects = HashMap<Box<str>, Arc<CompactObject>>;

impl Cache {
    fn get(&self, namespace: &str, name: &str) -> Option<Arc<CompactObject>> {
        self.read().get(key(namespace, name).as_ref()).cloned()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Objects> {
        self.0.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Objects> {
        self.0.write().unwrap_or_else(|p| p.into_inner())
    }
}

fn key(namespace: &str, name: &str) -> Box<str> {
    format!("{namespace}/{name}").into_boxed_str()
}

fn key_of(object: &CompactObject) -> Box<str> {
    key(
        object.metadata.namespace.as_deref().unwrap_or_default(),
        object.metadata.name.as_deref().unwrap_or_default(),
    )
}

/// What a (re)list has brought so far: it replaces the cache when it completes.
#[derive(Default)]
struct Filling {
    relist: Option<(Objects, Vec<ObjectRef<CapiCluster>>)>,
}

impl Filling {
    /// Applies one watch event to `cache`; returns the Clusters to reconcile: the owners of an
    /// object whose user-visible part changed (generation, labels, annotations), appeared or
    /// went, including objects that went while the watch was re-listing. The owners of listed
    /// objects are returned once the list is complete and in the cache, so their reconciles
    /// read the new objects.
    fn apply(
        &mut self,
        cache: &Cache,
        event: watcher::Event<CompactObject>,
    ) -> Vec<ObjectRef<CapiCluster>> {
        match event {
            watcher::Event::Apply(object) => {
                let object = Arc::new(object);
                let before = cache.write().insert(key_of(&object), object.clone());
                if changed(before.as_deref(), &object) {
                    owning_clusters(&object)
                } else {
                    Vec::new()
                }
            }
            watcher::Event::Delete(object) => {
                cache.write().remove(&key_of(&object));
                owning_clusters(&object)
            }
            watcher::Event::Init => {
                self.relist = Some(Default::default());
                Vec::new()
            }
            watcher::Event::InitApply(object) => {
                let (objects, owners) = self.relist.get_or_insert_with(Default::default);
                let key = key_of(&object);
                if changed(cache.read().get(&key).map(|o| &**o), &object) {
                    owners.extend(owning_clusters(&object));
                }
                objects.insert(key, Arc::new(object));
                Vec::new()
            }
            watcher::Event::InitDone => {
                let (objects, mut owners) = self.relist.take().unwrap_or_default();
                let before = std::mem::replace(&mut *cache.write(), objects);
                let now = cache.read();
                for (key, gone) in before {
                    if !now.contains_key(&key) {
                        owners.extend(owning_clusters(&gone));
                    }
                }
                owners
            }
        }
    }
}

/// Whether a referenced object's change is one its owners must see: another object under the
/// same name, or a change of what users edit (generation, labels, annotations).
fn changed(before: Option<&CompactObject>, now: &CompactObject) -> bool {
    before.is_none_or(|b| {
        b.user_visible_hash != now.user_visible_hash || b.metadata.uid != now.metadata.uid
    })
}

/// What the cache keeps of a referenced object: all but managedFields and the status, except
/// `status.version` (a control plane's lowest machine version: cluster-api v1.11.11
/// `api/controlplane/kubeadm/v1beta2` and rancher/cluster-api-provider-rke2 v0.25.0
/// `controlplane/api/v1beta2` `status.version`), whose change re-triggers its owners too: the
/// version labels of a Cluster without a topology follow it.
pub fn cached_reference(mut object: DynamicObject) -> CompactObject {
    use std::hash::{Hash, Hasher};
    object.metadata.managed_fields = None;
    let mut version = None;
    if let Some(data) = object.data.as_object_mut() {
        version = data
            .remove("status")
            .and_then(|mut s| s.get_mut("version").map(Value::take));
        if let Some(version) = version.clone() {
            data.insert("status".into(), serde_json::json!({"version": version}));
        }
    }
    let mut compact = CompactObject::of(object);
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (
        compact.user_visible_hash,
        version.as_ref().and_then(Value::as_str),
    )
        .hash(&mut hasher);
    compact.user_visible_hash = hasher.finish();
    compact
}

/// The Clusters an object belongs to: CAPI's owner reference from the Cluster on its referenced
/// objects, and a MachineDeployment's `spec.clusterName` (before that owner reference exists).
fn owning_clusters(object: &CompactObject) -> Vec<ObjectRef<CapiCluster>> {
    let namespace = object.namespace().unwrap_or_default();
    let named = object
        .body
        .get("spec")
        .and_then(|spec| spec["clusterName"].as_str().map(String::from));
    let owners = object.owner_references().iter().filter(|owner| {
        owner.kind == "Cluster" && owner.api_version.starts_with("cluster.x-k8s.io/")
    });
    let mut names: Vec<String> = owners
        .map(|owner| owner.name.clone())
        .chain(named)
        .collect();
    names.dedup();
    names
        .iter()
        .map(|name| ObjectRef::new(name).within(&namespace))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A KubeadmControlPlane owned by the Cluster `owner`.
    fn object(name: &str, uid: &str, generation: i64, owner: &str) -> CompactObject {
        cached_reference(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2",
                "kind": "KubeadmControlPlane",
                "metadata": {
                    "name": name, "namespace": "ns", "uid": uid, "generation": generation,
                    "resourceVersion": format!("{uid}-{generation}"),
                    "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2",
                        "kind": "Cluster", "name": owner, "uid": format!("{owner}-uid")}],
                },
                "spec": {"replicas": generation},
                "status": {"ready": true},
            }))
            .expect("object"),
        )
    }

    #[test]
    fn the_cache_follows_the_watch_and_triggers_the_owners_of_visible_changes() {
        use watcher::Event::{Apply, Delete, Init, InitApply, InitDone};
        let cache = Cache::default();
        let mut filling = Filling::default();
        // (what happens, the event, the Clusters triggered, the cached generations by name)
        type Step<'a> = (
            &'a str,
            watcher::Event<CompactObject>,
            &'a [&'a str],
            &'a [(&'a str, i64)],
        );
        let steps: Vec<Step> = vec![
            ("first list starts", Init, &[], &[]),
            ("listed", InitApply(object("a", "u1", 1, "ca")), &[], &[]),
            ("listed", InitApply(object("b", "u2", 1, "cb")), &[], &[]),
            (
                "listed: owners once in the cache",
                InitDone,
                &["ca", "cb"],
                &[("a", 1), ("b", 1)],
            ),
            (
                "status only: same user-visible hash",
                Apply(object("a", "u1", 1, "ca")),
                &[],
                &[("a", 1), ("b", 1)],
            ),
            (
                "spec edited",
                Apply(object("a", "u1", 2, "ca")),
                &["ca"],
                &[("a", 2), ("b", 1)],
            ),
            (
                "deleted",
                Delete(object("b", "u2", 1, "cb")),
                &["cb"],
                &[("a", 2)],
            ),
            (
                "re-created",
                Apply(object("b", "u3", 1, "cb")),
                &["cb"],
                &[("a", 2), ("b", 1)],
            ),
            ("relist starts", Init, &[], &[("a", 2), ("b", 1)]),
            (
                "unchanged",
                InitApply(object("a", "u1", 2, "ca")),
                &[],
                &[("a", 2), ("b", 1)],
            ),
            (
                "new while the watch was down",
                InitApply(object("c", "u4", 1, "cc")),
                &[],
                &[("a", 2), ("b", 1)],
            ),
            (
                "relisted: b went meanwhile",
                InitDone,
                &["cc", "cb"],
                &[("a", 2), ("c", 1)],
            ),
        ];
        for (what, event, triggered, cached) in steps {
            let owners: Vec<String> = filling
                .apply(&cache, event)
                .iter()
                .map(|owner| owner.name.clone())
                .collect();
            assert_eq!(owners, triggered, "{what}: triggered");
            let mut now: Vec<(String, i64)> = cache
                .read()
                .values()
                .map(|o| {
                    (
                        o.metadata.name.clone().unwrap_or_default(),
                        o.metadata.generation.unwrap_or_default(),
                    )
                })
                .collect();
            now.sort();
            let cached: Vec<(String, i64)> =
                cached.iter().map(|(n, g)| (n.to_string(), *g)).collect();
            assert_eq!(now, cached, "{what}: cached");
        }
        assert!(cache.get("ns", "a").is_some());
        assert!(cache.get("other", "a").is_none());
        assert!(
            cache
                .get("ns", "a")
                .and_then(|a| serde_json::to_value(&*a).ok())
                .is_some_and(|a| a.get("status").is_none()),
            "status is not cached"
        );
    }

    /// Of the status only `version` is kept (a control plane's lowest machine version), and its
    /// change is one the owners see.
    #[test]
    fn the_status_version_is_kept_and_seen() {
        let kcp = |status: serde_json::Value| {
            cached_reference(
                serde_json::from_value(serde_json::json!({
                    "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2",
                    "kind": "KubeadmControlPlane",
                    "metadata": {"name": "cp", "namespace": "ns", "uid": "u", "generation": 2},
                    "spec": {"version": "v1.33.5"}, "status": status,
                }))
                .expect("object"),
            )
        };
        let rolling = kcp(serde_json::json!({"version": "v1.32.4", "replicas": 3}));
        let json = serde_json::to_value(&rolling).expect("json");
        assert_eq!(json["status"], serde_json::json!({"version": "v1.32.4"}));
        let more = kcp(serde_json::json!({"version": "v1.32.4", "replicas": 4}));
        assert!(!changed(Some(&rolling), &more), "another status field");
        let reached = kcp(serde_json::json!({"version": "v1.33.5", "replicas": 3}));
        assert!(changed(Some(&rolling), &reached), "status.version moved");
    }
}
