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
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
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
    store: Store<CompactObject>,
    resource: ApiResource,
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
        let Watched {
            store,
            resource,
            mut listed,
        } = match self.store_for(reference).await {
            Ok(found) => found,
            Err(reason) => return Lookup::Unavailable(reason),
        };
        let first_list = listed.wait_for(|listed| *listed);
        if !matches!(
            tokio::time::timeout(FIRST_LIST_WAIT, first_list).await,
            Ok(Ok(_))
        ) {
            return Lookup::Unavailable(format!(
                "{} objects are not readable yet (watch not synced)",
                reference.kind
            ));
        }
        let key = ObjectRef::new_with(&reference.name, resource).within(&reference.namespace);
        match store.get(&key).map(|object| serde_json::to_value(&*object)) {
            Some(Ok(object)) => Lookup::Found(object),
            // Never a silent `null` in templateValues.
            Some(Err(err)) => Lookup::Unavailable(format!(
                "{} {}/{} cannot be serialised: {err}",
                reference.kind, reference.namespace, reference.name
            )),
            None => Lookup::Missing,
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
        let writer = Writer::new(resource.clone());
        let store = writer.as_reader();
        let (listed_tx, listed) = tokio::sync::watch::channel(false);
        let triggers = self.triggers.clone();
        let shutdown = self.shutdown.clone();
        let kind = resource.kind.clone();
        let stream = crate::controllers::watch_list::events(
            kind.clone(),
            watcher::Config::default().page_size(500),
            move |config| watcher(api.clone(), config),
        )
        .backoff(crate::controllers::watch_backoff::WatchBackoff::default())
        .map_ok(|event| map_event(event, cached_reference))
        .reflect(writer);
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            // Last user-visible hash per object: status-only changes trigger nothing. A relist
            // builds a fresh map, so objects that vanished meanwhile leave no entry behind.
            let mut seen: HashMap<String, u64> = HashMap::new();
            let mut relisted: HashMap<String, u64> = HashMap::new();
            loop {
                let next = tokio::select! {
                    () = shutdown.cancelled() => return,
                    next = stream.next() => next,
                };
                let object = match next {
                    None => return,
                    Some(Err(err)) => {
                        tracing::warn!(%err, kind = %kind, "watching referenced objects");
                        continue;
                    }
                    Some(Ok(watcher::Event::Apply(object))) => {
                        let hash = object.user_visible_hash;
                        if seen.insert(object.uid().unwrap_or_default(), hash) == Some(hash) {
                            continue;
                        }
                        object
                    }
                    Some(Ok(watcher::Event::InitApply(object))) => {
                        let uid = object.uid().unwrap_or_default();
                        let hash = object.user_visible_hash;
                        relisted.insert(uid.clone(), hash);
                        if seen.get(&uid) == Some(&hash) {
                            continue;
                        }
                        object
                    }
                    Some(Ok(watcher::Event::Delete(object))) => {
                        seen.remove(&object.uid().unwrap_or_default());
                        object
                    }
                    Some(Ok(watcher::Event::InitDone)) => {
                        seen = std::mem::take(&mut relisted);
                        let _ = listed_tx.send(true);
                        continue;
                    }
                    Some(Ok(watcher::Event::Init)) => {
                        relisted.clear();
                        continue;
                    }
                };
                for owner in owning_clusters(&object) {
                    // The receiver only goes away when the controller stops.
                    let _ = triggers.send(owner);
                }
            }
        });
        Watched {
            store,
            resource,
            listed,
        }
    }
}

/// What the cache keeps of a referenced object: metadata without managedFields, and the rest
/// without `status` (it changes often and is never part of `templateValues`), as a
/// [`CompactObject`] (a control plane's spec as a tree of maps is tens of KiB;
/// `tests/cache_footprint.rs`).
pub fn cached_reference(mut object: DynamicObject) -> CompactObject {
    object.metadata.managed_fields = None;
    if let Some(data) = object.data.as_object_mut() {
        data.remove("status");
    }
    CompactObject::of(object)
}

/// CAPI sets an owner reference from the Cluster on its referenced objects.
fn owning_clusters(object: &impl kube::Resource) -> Vec<ObjectRef<CapiCluster>> {
    let namespace = object.namespace().unwrap_or_default();
    object
        .owner_references()
        .iter()
        .filter(|owner| {
            owner.kind == "Cluster" && owner.api_version.starts_with("cluster.x-k8s.io/")
        })
        .map(|owner| ObjectRef::new(&owner.name).within(&namespace))
        .collect()
}
