//! The watches the import controllers share: one watch per kind feeds a cache and fans every
//! change out to each controller that needs it, with managedFields stripped except our own
//! entries (which the no-op check needs).
//!
//! kube-runtime's shared stores only forward applied objects; controllers here must also see
//! deletions (a deleted Fleet object is re-created, a deleted Cluster releases its namespace's
//! shared objects), so the fan-out forwards both, including objects that vanished while the
//! watch was re-listing.

use std::sync::Arc;

use fleet_api_rs::fleet_cluster::Cluster as FleetCluster;
use fleet_api_rs::fleet_cluster_registration_token::ClusterRegistrationToken;
use fleet_api_rs::fleet_clustergroup::ClusterGroup;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::core::{PartialObjectMeta, Resource};
use kube::runtime::reflector::{Store, store::Writer};
use kube::runtime::{WatchStreamExt, metadata_watcher, reflector::ObjectRef, watcher};
use kube::{Api, Client};
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio_stream::wrappers::UnboundedReceiverStream;

use crate::api::{BundleNamespaceMapping, CapiCluster, CapiClusterClass};
use crate::cli::ManagerFlags;
use crate::model::capi::StringMap;
use crate::names;

/// A stream of changed (applied or deleted) objects of one kind.
pub type Feed<K> = UnboundedReceiverStream<Arc<K>>;

/// Field managers whose `managedFields` entries we keep in caches.
const OUR_MANAGERS: &[&str] = &[
    names::FIELD_MANAGER,
    names::NAMESPACE_FIELD_MANAGER,
    names::HEALTH_FIELD_MANAGER,
];

/// Read access to every shared cache.
#[derive(Clone)]
pub struct Stores {
    /// One flag per cache, set when its first list completed. (kube's `Store::wait_until_ready`
    /// wakes only the last of several concurrent waiters, and each Controller already waits on
    /// its own store, so our code never calls it.)
    listed: Vec<watch::Receiver<bool>>,
    pub clusters: Store<CapiCluster>,
    pub classes: Store<CapiClusterClass>,
    pub namespaces: Store<PartialObjectMeta<Namespace>>,
    pub fleet_clusters: Store<FleetCluster>,
    pub groups: Store<ClusterGroup>,
    pub mappings: Store<BundleNamespaceMapping>,
    pub tokens: Store<PartialObjectMeta<ClusterRegistrationToken>>,
}

/// Subscriptions handed to the controllers (each stream can be consumed once).
pub struct Feeds {
    pub clusters: Vec<Feed<CapiCluster>>,
    pub classes: Vec<Feed<CapiClusterClass>>,
    pub namespaces: Vec<Feed<PartialObjectMeta<Namespace>>>,
    pub fleet_clusters: Vec<Feed<FleetCluster>>,
    pub groups: Vec<Feed<ClusterGroup>>,
    pub mappings: Vec<Feed<BundleNamespaceMapping>>,
    pub tokens: Vec<Feed<PartialObjectMeta<ClusterRegistrationToken>>>,
}

/// How many subscriptions each controller takes, per kind.
pub struct Subscribers {
    pub clusters: usize,
    pub classes: usize,
    pub namespaces: usize,
    pub fleet_clusters: usize,
    pub groups: usize,
    pub mappings: usize,
    pub tokens: usize,
}

impl Stores {
    /// Starts the reflectors (tasks in `tasks`) and returns the caches and the subscriptions.
    pub fn start(
        client: &Client,
        flags: &ManagerFlags,
        subscribers: &Subscribers,
        tasks: &mut JoinSet<()>,
    ) -> (Stores, Feeds) {
        let plain = watcher::Config::default().any_semantic().page_size(500);
        // `--watch-filter` applies to CAPI objects; `--namespace` to everything namespaced
        // except BundleNamespaceMappings and Namespaces.
        let capi_config = match flags.watch_filter_label() {
            Some(filter) => plain
                .clone()
                .labels(&format!("{}={filter}", names::CAPI_WATCH_FILTER_LABEL)),
            None => plain.clone(),
        };
        let capi_ns = flags.watch_namespace().map(str::to_string);
        let fleet_ns = capi_ns.clone();

        let mut listed = Vec::new();
        let (clusters, cluster_feeds) = spawn_full(
            api::<CapiCluster>(client, capi_ns.as_deref()),
            capi_config.clone(),
            subscribers.clusters,
            tasks,
            &mut listed,
        );
        let (classes, class_feeds) = spawn_full(
            api::<CapiClusterClass>(client, capi_ns.as_deref()),
            capi_config,
            subscribers.classes,
            tasks,
            &mut listed,
        );
        let (fleet_clusters, fleet_feeds) = spawn_full(
            api::<FleetCluster>(client, fleet_ns.as_deref()),
            plain.clone(),
            subscribers.fleet_clusters,
            tasks,
            &mut listed,
        );
        let (groups, group_feeds) = spawn_full(
            api::<ClusterGroup>(client, fleet_ns.as_deref()),
            plain.clone(),
            subscribers.groups,
            tasks,
            &mut listed,
        );
        // Mappings live in ClusterClass namespaces, which may be outside --namespace.
        let (mappings, mapping_feeds) = spawn_full(
            api::<BundleNamespaceMapping>(client, None),
            plain.clone(),
            subscribers.mappings,
            tasks,
            &mut listed,
        );
        let (namespaces, namespace_feeds) = spawn_metadata(
            Api::<Namespace>::all(client.clone()),
            plain.clone(),
            subscribers.namespaces,
            tasks,
            &mut listed,
        );
        let (tokens, token_feeds) = spawn_metadata(
            api::<ClusterRegistrationToken>(client, fleet_ns.as_deref()),
            plain,
            subscribers.tokens,
            tasks,
            &mut listed,
        );
        (
            Stores {
                listed,
                clusters,
                classes,
                namespaces,
                fleet_clusters,
                groups,
                mappings,
                tokens,
            },
            Feeds {
                clusters: cluster_feeds,
                classes: class_feeds,
                namespaces: namespace_feeds,
                fleet_clusters: fleet_feeds,
                groups: group_feeds,
                mappings: mapping_feeds,
                tokens: token_feeds,
            },
        )
    }

    /// Waits until every cache holds its first full list (any number of waiters).
    pub async fn wait_until_ready(&self) -> bool {
        for listed in &self.listed {
            if listed.clone().wait_for(|listed| *listed).await.is_err() {
                return false;
            }
        }
        true
    }

    /// Labels of a namespace (empty when unknown).
    pub fn namespace_labels(&self, namespace: &str) -> StringMap {
        self.namespaces
            .get(&ObjectRef::new(namespace))
            .and_then(|ns| ns.metadata.labels.clone())
            .unwrap_or_default()
    }

    pub fn fleet_cluster(&self, namespace: &str, name: &str) -> Option<Arc<FleetCluster>> {
        self.fleet_clusters
            .get(&ObjectRef::new(name).within(namespace))
    }

    pub fn class(&self, namespace: &str, name: &str) -> Option<Arc<CapiClusterClass>> {
        self.classes.get(&ObjectRef::new(name).within(namespace))
    }

    pub fn group(&self, namespace: &str, name: &str) -> Option<Arc<ClusterGroup>> {
        self.groups.get(&ObjectRef::new(name).within(namespace))
    }

    pub fn mapping(&self, namespace: &str, name: &str) -> Option<Arc<BundleNamespaceMapping>> {
        self.mappings.get(&ObjectRef::new(name).within(namespace))
    }

    pub fn token(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<Arc<PartialObjectMeta<ClusterRegistrationToken>>> {
        self.tokens.get(&ObjectRef::new(name).within(namespace))
    }

    /// The Clusters of a namespace.
    pub fn clusters_in(&self, namespace: &str) -> Vec<Arc<CapiCluster>> {
        self.clusters
            .state()
            .into_iter()
            .filter(|c| c.metadata.namespace.as_deref() == Some(namespace))
            .collect()
    }
}

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Keeps only our managedFields entries, and drops the last-applied annotation.
fn slim<K: Resource>(object: &mut K) {
    let meta = object.meta_mut();
    if let Some(entries) = meta.managed_fields.as_mut() {
        entries.retain(|entry| {
            entry
                .manager
                .as_deref()
                .is_some_and(|m| OUR_MANAGERS.contains(&m))
        });
        if entries.is_empty() {
            meta.managed_fields = None;
        }
    }
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(names::LAST_APPLIED_ANNOTATION);
    }
}

fn spawn_full<K>(
    api: Api<K>,
    config: watcher::Config,
    subscribers: usize,
    tasks: &mut JoinSet<()>,
    listed: &mut Vec<watch::Receiver<bool>>,
) -> (Store<K>, Vec<Feed<K>>)
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    fan_out(
        watcher(api, config)
            .backoff(crate::controllers::watch_backoff::WatchBackoff::default())
            .modify(slim::<K>),
        subscribers,
        tasks,
        listed,
    )
}

fn spawn_metadata<K>(
    api: Api<K>,
    config: watcher::Config,
    subscribers: usize,
    tasks: &mut JoinSet<()>,
    listed: &mut Vec<watch::Receiver<bool>>,
) -> (Store<PartialObjectMeta<K>>, Vec<Feed<PartialObjectMeta<K>>>)
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    fan_out(
        metadata_watcher(api, config)
            .backoff(crate::controllers::watch_backoff::WatchBackoff::default())
            .modify(slim::<PartialObjectMeta<K>>),
        subscribers,
        tasks,
        listed,
    )
}

/// Drives `events` into a cache and sends every applied or deleted object to each subscriber.
fn fan_out<K, S>(
    events: S,
    subscribers: usize,
    tasks: &mut JoinSet<()>,
    listed: &mut Vec<watch::Receiver<bool>>,
) -> (Store<K>, Vec<Feed<K>>)
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
    S: futures::Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
{
    let mut writer: Writer<K> = Writer::default();
    let store = writer.as_reader();
    let (senders, feeds): (Vec<_>, Vec<_>) = (0..subscribers)
        .map(|_| {
            let (tx, rx) = mpsc::unbounded_channel::<Arc<K>>();
            (tx, UnboundedReceiverStream::new(rx))
        })
        .unzip();
    let reader = store.clone();
    let kind = K::kind(&()).to_string();
    let (listed_tx, listed_rx) = watch::channel(false);
    listed.push(listed_rx);
    tasks.spawn(async move {
        let send = |object: Arc<K>| {
            for sender in &senders {
                // A closed receiver means its controller stopped.
                let _ = sender.send(object.clone());
            }
        };
        let mut events = std::pin::pin!(events);
        // The cache content when a (re)list started, to find what vanished meanwhile.
        let mut before: Vec<Arc<K>> = Vec::new();
        while let Some(event) = events.next().await {
            let event = match event {
                Ok(event) => event,
                Err(err) => {
                    tracing::warn!(%err, kind = %kind, "watch error");
                    continue;
                }
            };
            if matches!(event, watcher::Event::Init) {
                before = reader.state();
            }
            writer.apply_watcher_event(&event);
            match event {
                watcher::Event::Apply(object) | watcher::Event::Delete(object) => {
                    send(Arc::new(object));
                }
                watcher::Event::InitDone => {
                    let _ = listed_tx.send(true);
                    let now = reader.state();
                    for object in &now {
                        send(object.clone());
                    }
                    for object in before.drain(..) {
                        if reader.get(&ObjectRef::from_obj(&*object)).is_none() {
                            send(object);
                        }
                    }
                }
                watcher::Event::Init | watcher::Event::InitApply(_) => {}
            }
        }
    });
    (store, feeds)
}
