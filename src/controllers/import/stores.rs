//! The watches the import controllers share: one watch per kind feeds a cache and fans every
//! change out to each controller that subscribed to it, with managedFields stripped except our
//! own entries (which the no-op check needs).
//!
//! kube-runtime's shared streams (`reflect_shared`) do not forward deletions
//! (kube-rs/kube#1590; PR kube-rs/kube#1673 would fix it), but controllers here must see them (a
//! deleted Fleet object is re-created, a deleted Cluster releases its namespace's shared
//! objects), so this module fans out applied and deleted objects itself, including objects that
//! vanished while the watch was re-listing. When kube-runtime forwards deletions, this module can
//! become `reflect_shared` + `subscribe`.
//!
//! Feeds are handed out on demand by [`Hubs`] before the watches start ([`Watches::start`]
//! consumes the hubs, so no subscription can come too late or be counted wrong). Each feed is a
//! bounded channel: a controller that falls behind slows its watch down instead of buffering
//! without limit (kube-runtime's own shared streams behave the same way).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

use fleet_api_rs::fleet_cluster::Cluster as FleetCluster;
use fleet_api_rs::fleet_cluster_registration_token::ClusterRegistrationToken;
use fleet_api_rs::fleet_clustergroup::ClusterGroup;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
use kube::core::{PartialObjectMeta, Resource};
use kube::runtime::reflector::{Store, store::Writer};
use kube::runtime::{WatchStreamExt, metadata_watcher, reflector::ObjectRef, watcher};
use kube::{Api, Client, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio_stream::wrappers::ReceiverStream;

use crate::api::{BundleNamespaceMapping, CachedFleetCluster, CapiCluster, CapiClusterClass};
use crate::cli::ManagerFlags;
use crate::controllers::watch_backoff::WatchBackoff;
use crate::controllers::watch_list;
use crate::model::capi::{ClassRef, ClusterView, StringMap, keep_read_status};
use crate::model::diff::{compact_fields, digest_subtree};
use crate::names;

/// A stream of changed (applied or deleted) objects of one kind.
pub type Feed<K> = ReceiverStream<Arc<K>>;

/// A [`Feed`] that says where each object comes from ([`Hub::subscribe_marked`]).
pub type MarkedFeed<K> = ReceiverStream<(Arc<K>, Origin)>;

/// Where an object on a feed comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Origin {
    /// A change the watch reported (applied or deleted).
    Watched,
    /// The cache after its `n`th list (counted from 1): each object it holds, then each object
    /// that vanished while it listed. They are sent after the cache holds the whole list.
    Listed(u64),
}

/// How many changes a feed holds before its watch waits for the controller to take some.
const FEED_CAPACITY: usize = 1024;

/// Field managers whose `managedFields` entries we keep in caches.
const OUR_MANAGERS: &[&str] = &[
    names::FIELD_MANAGER,
    // Tells a registration stub from a completed Fleet Cluster (`is_registration_stub`).
    names::REGISTRATION_FIELD_MANAGER,
    names::RUNTIME_EXTENSION_FIELD_MANAGER,
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
    /// The cached Clusters by namespace.
    clusters_by_namespace: Index<CapiCluster>,
    /// The cached Clusters using a ClusterClass from another namespace, by that class
    /// ([`class_key`]).
    clusters_by_class: Index<CapiCluster>,
    pub classes: Store<CapiClusterClass>,
    pub namespaces: Store<PartialObjectMeta<Namespace>>,
    pub fleet_clusters: Store<CachedFleetCluster>,
    pub groups: Store<ClusterGroup>,
    pub mappings: Store<BundleNamespaceMapping>,
    pub tokens: Store<PartialObjectMeta<ClusterRegistrationToken>>,
}

/// Hands out feeds of one kind, as many as the controllers ask for, until the watches start.
pub struct Hub<K> {
    subscribers: Vec<Subscriber<K>>,
}

/// Which watched changes a feed leaves out (see [`Hub::subscribe_skipping`]).
type Skip<K> = Box<dyn Fn(&K) -> bool + Send + Sync>;

struct Subscriber<K> {
    sender: Outlet<K>,
    skip: Option<Skip<K>>,
}

enum Outlet<K> {
    Plain(mpsc::Sender<Arc<K>>),
    Marked(mpsc::Sender<(Arc<K>, Origin)>),
}

impl<K> Default for Hub<K> {
    fn default() -> Self {
        Self {
            subscribers: Vec::new(),
        }
    }
}

impl<K> Hub<K> {
    /// A new feed of every change from the start of the watch on.
    pub fn subscribe(&mut self) -> Feed<K> {
        self.add(None)
    }

    /// A new feed that leaves out the watched changes `skip` matches (the echoes of our own
    /// writes, [`crate::apply::expectations`]). `skip` sees each change before
    /// any controller does, after the cache holds it. Deletions and the objects of a (re)list
    /// are never left out: a relist does not show the changes between two versions, so its
    /// objects are not known echoes.
    pub fn subscribe_skipping(
        &mut self,
        skip: impl Fn(&K) -> bool + Send + Sync + 'static,
    ) -> Feed<K> {
        self.add(Some(Box::new(skip)))
    }

    /// A feed like [`Hub::subscribe_skipping`]'s whose objects carry their [`Origin`].
    pub fn subscribe_marked(
        &mut self,
        skip: impl Fn(&K) -> bool + Send + Sync + 'static,
    ) -> MarkedFeed<K> {
        let (sender, receiver) = mpsc::channel(FEED_CAPACITY);
        self.subscribers.push(Subscriber {
            sender: Outlet::Marked(sender),
            skip: Some(Box::new(skip)),
        });
        ReceiverStream::new(receiver)
    }

    fn add(&mut self, skip: Option<Skip<K>>) -> Feed<K> {
        let (sender, receiver) = mpsc::channel(FEED_CAPACITY);
        self.subscribers.push(Subscriber {
            sender: Outlet::Plain(sender),
            skip,
        });
        ReceiverStream::new(receiver)
    }
}

/// One [`Hub`] per watched kind.
#[derive(Default)]
pub struct Hubs {
    pub clusters: Hub<CapiCluster>,
    pub classes: Hub<CapiClusterClass>,
    pub namespaces: Hub<PartialObjectMeta<Namespace>>,
    pub fleet_clusters: Hub<CachedFleetCluster>,
    pub groups: Hub<ClusterGroup>,
    pub mappings: Hub<BundleNamespaceMapping>,
    pub tokens: Hub<PartialObjectMeta<ClusterRegistrationToken>>,
}

/// The watches, built but not started (see [`Watches::start`]).
pub struct Watches {
    clusters: PendingWatch<CapiCluster>,
    classes: PendingWatch<CapiClusterClass>,
    namespaces: PendingWatch<PartialObjectMeta<Namespace>>,
    fleet_clusters: PendingWatch<CachedFleetCluster>,
    groups: PendingWatch<ClusterGroup>,
    mappings: PendingWatch<BundleNamespaceMapping>,
    tokens: PendingWatch<PartialObjectMeta<ClusterRegistrationToken>>,
}

impl Watches {
    /// Starts every watch (tasks in `tasks`), feeding the subscriptions `hubs` handed out.
    pub fn start(self, hubs: Hubs, tasks: &mut JoinSet<()>) {
        self.clusters.start(hubs.clusters, tasks);
        self.classes.start(hubs.classes, tasks);
        self.namespaces.start(hubs.namespaces, tasks);
        self.fleet_clusters.start(hubs.fleet_clusters, tasks);
        self.groups.start(hubs.groups, tasks);
        self.mappings.start(hubs.mappings, tasks);
        self.tokens.start(hubs.tokens, tasks);
    }
}

impl Stores {
    /// The caches, the hubs to subscribe from, and the watches that fill both once started.
    pub fn new(client: &Client, flags: &ManagerFlags) -> (Stores, Hubs, Watches) {
        // Streaming lists, or consistent lists in pages of 500 where the server has none
        // (`crate::controllers::watch_list`): never `any_semantic()`, whose list a real server
        // answers whole, ignoring the page size.
        let plain = watcher::Config::default().page_size(500);
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
        let clusters_by_namespace = Index::new(|c: &CapiCluster| c.metadata.namespace.clone());
        let clusters_by_class = Index::new(cross_namespace_class_key);
        let clusters = PendingWatch::new(
            events(
                api::<CapiCluster>(client, capi_ns.as_deref()),
                capi_config.clone(),
            )
            .backoff(WatchBackoff::default())
            .modify(prepare_cached_cluster)
            .boxed(),
            vec![clusters_by_namespace.clone(), clusters_by_class.clone()],
            &mut listed,
        );
        let classes = PendingWatch::full(
            api::<CapiClusterClass>(client, capi_ns.as_deref()),
            capi_config,
            Vec::new(),
            &mut listed,
        );
        let fleet_clusters = PendingWatch::new(
            events(
                api::<FleetCluster>(client, fleet_ns.as_deref()),
                plain.clone(),
            )
            .backoff(WatchBackoff::default())
            .map_ok(|event| map_event(event, cached_fleet_cluster))
            .boxed(),
            Vec::new(),
            &mut listed,
        );
        let groups = PendingWatch::full(
            api::<ClusterGroup>(client, fleet_ns.as_deref()),
            plain.clone(),
            Vec::new(),
            &mut listed,
        );
        // Mappings live in ClusterClass namespaces, which may be outside --namespace.
        let mappings = PendingWatch::full(
            api::<BundleNamespaceMapping>(client, None),
            plain.clone(),
            Vec::new(),
            &mut listed,
        );
        let namespaces = PendingWatch::metadata(
            Api::<Namespace>::all(client.clone()),
            plain.clone(),
            &mut listed,
        );
        let tokens = PendingWatch::metadata(
            api::<ClusterRegistrationToken>(client, fleet_ns.as_deref()),
            plain,
            &mut listed,
        );
        (
            Stores {
                listed,
                clusters: clusters.store(),
                clusters_by_namespace,
                clusters_by_class,
                classes: classes.store(),
                namespaces: namespaces.store(),
                fleet_clusters: fleet_clusters.store(),
                groups: groups.store(),
                mappings: mappings.store(),
                tokens: tokens.store(),
            },
            Hubs::default(),
            Watches {
                clusters,
                classes,
                namespaces,
                fleet_clusters,
                groups,
                mappings,
                tokens,
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

    /// The cached Fleet Cluster, decoded (the cache keeps it as compact text).
    pub fn fleet_cluster(&self, namespace: &str, name: &str) -> Option<Arc<FleetCluster>> {
        let cached = self
            .fleet_clusters
            .get(&ObjectRef::new(name).within(namespace))?;
        decoded(&cached)
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

    /// The Clusters of a namespace (from the index: the namespace's size, not the cache's).
    pub fn clusters_in(&self, namespace: &str) -> Vec<Arc<CapiCluster>> {
        self.clusters_by_namespace
            .members(namespace)
            .into_iter()
            .filter_map(|(_, name)| self.clusters.get(&ObjectRef::new(&name).within(namespace)))
            .collect()
    }

    /// The namespaces with Clusters that use `class` from another namespace.
    pub fn namespaces_using_class(&self, class: &ClassRef) -> Vec<String> {
        let mut namespaces: Vec<String> = self
            .clusters_by_class
            .members(&class_key(class))
            .into_iter()
            .map(|(namespace, _)| namespace)
            .collect();
        namespaces.dedup();
        namespaces
    }
}

/// The key of a ClusterClass in [`Stores::clusters_by_class`].
fn class_key(class: &ClassRef) -> String {
    format!("{}/{}", class.namespace, class.name)
}

fn cross_namespace_class_key(cluster: &CapiCluster) -> Option<String> {
    ClusterView::of(cluster)?
        .cross_namespace_class()
        .map(class_key)
}

/// The events of a watch of `api` ([`watch_list::events`]).
fn events<K>(
    api: Api<K>,
    config: watcher::Config,
) -> BoxStream<'static, watcher::Result<watcher::Event<K>>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let kind = K::kind(&()).to_string();
    watch_list::events(kind, config, move |config| watcher(api.clone(), config))
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

/// What the Cluster cache keeps of a watched Cluster: the metadata, spec and read status fields
/// (`tests/cache_footprint.rs` measures it). Of our managedFields entries only the manager and
/// the subresource: the health controller asks whether it owns status fields, and
/// nothing reads a cached Cluster's owned fields (the finalizer patch reads `finalizers`, the
/// condition's no-op check the condition itself), which were about 450 bytes in 8 allocations.
pub fn prepare_cached_cluster(cluster: &mut CapiCluster) {
    // Before `slim`, which then has no fieldsV1 left to compact.
    for entry in cluster.metadata.managed_fields.iter_mut().flatten() {
        *entry = ManagedFieldsEntry {
            manager: entry.manager.take(),
            subresource: entry.subresource.take(),
            ..ManagedFieldsEntry::default()
        };
    }
    slim(cluster);
    cluster.body.edit(keep_read_status);
}

/// What the Fleet Cluster cache keeps of a watched Fleet Cluster: our managedFields entries,
/// `templateValues` as a digest, the rest as compact text.
pub fn cached_fleet_cluster(mut fleet: FleetCluster) -> CachedFleetCluster {
    forget_owned_template_values(&mut fleet);
    slim(&mut fleet);
    digest_template_values(&mut fleet);
    CachedFleetCluster::of(fleet)
}

/// A cached Fleet Cluster, decoded.
pub fn decoded(cached: &CachedFleetCluster) -> Option<Arc<FleetCluster>> {
    let typed = cached.typed();
    if typed.is_none() {
        tracing::error!(fleet_cluster = %cached.name_any(), namespace = ?cached.namespace(), "cached Fleet Cluster does not decode");
    }
    typed.map(Arc::new)
}

/// A watch event with its object changed into another form.
pub(crate) fn map_event<K, L>(
    event: watcher::Event<K>,
    change: impl Fn(K) -> L,
) -> watcher::Event<L> {
    match event {
        watcher::Event::Apply(object) => watcher::Event::Apply(change(object)),
        watcher::Event::Delete(object) => watcher::Event::Delete(change(object)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(object) => watcher::Event::InitApply(change(object)),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// Keeps only our managedFields entries (their fieldsV1 as compact text), and drops the
/// last-applied annotation.
fn slim<K: Resource>(object: &mut K) {
    let meta = object.meta_mut();
    if let Some(entries) = meta.managed_fields.as_mut() {
        entries.retain(|entry| {
            entry
                .manager
                .as_deref()
                .is_some_and(|m| OUR_MANAGERS.contains(&m))
        });
        entries.iter_mut().for_each(compact_fields);
        if entries.is_empty() {
            meta.managed_fields = None;
        }
    }
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(names::LAST_APPLIED_ANNOTATION);
    }
}

/// Where a Fleet Cluster keeps the copy of its CAPI Cluster (and referenced objects) that the
/// cache holds as a digest ([`digest_template_values`]).
pub const TEMPLATE_VALUES: &str = "/spec/templateValues";

/// Replaces a cached Fleet Cluster's `templateValues` by their digest: a copy of the CAPI
/// Cluster's metadata and spec that is only ever compared whole (the no-op check digests the
/// desired object alike, see `clusters.rs`); as a tree of maps it was the largest part of every
/// cached Fleet Cluster. Nothing else reads them from the cache.
fn digest_template_values(fleet: &mut FleetCluster) {
    let Some(values) = fleet.spec.template_values.take() else {
        return;
    };
    let mut spec = serde_json::json!({"templateValues": values});
    digest_subtree(&mut spec, "/templateValues");
    if let Some(serde_json::Value::Object(digest)) =
        spec.get_mut("templateValues").map(serde_json::Value::take)
    {
        fleet.spec.template_values = Some(digest.into_iter().collect());
    }
}

/// Empties what our managedFields entries list below `templateValues`: one field per field of
/// the CAPI Cluster and its referenced objects, and never read, as the no-op check compares
/// `templateValues` by digest (a digest owns its whole subtree: `model::diff::drops_owned`).
/// The entry still owns `templateValues` itself, so a desired object without them still reads
/// as a change.
fn forget_owned_template_values(fleet: &mut FleetCluster) {
    for entry in fleet.metadata.managed_fields.iter_mut().flatten() {
        if let Some(FieldsV1(fields)) = entry.fields_v1.as_mut()
            && let Some(owned) = fields.pointer_mut(OWNED_TEMPLATE_VALUES)
        {
            *owned = serde_json::json!({});
        }
    }
}

/// [`TEMPLATE_VALUES`] in a `fieldsV1` tree.
const OWNED_TEMPLATE_VALUES: &str = "/f:spec/f:templateValues";

/// A watch of one kind and its cache, not started yet.
struct PendingWatch<K: Resource<DynamicType = ()> + Clone + 'static> {
    events: BoxStream<'static, watcher::Result<watcher::Event<K>>>,
    writer: Writer<K>,
    indexes: Vec<Index<K>>,
    listed: watch::Sender<bool>,
}

impl<K> PendingWatch<K>
where
    K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + Sync + 'static,
{
    fn new(
        events: BoxStream<'static, watcher::Result<watcher::Event<K>>>,
        indexes: Vec<Index<K>>,
        listed: &mut Vec<watch::Receiver<bool>>,
    ) -> Self {
        let (sender, receiver) = watch::channel(false);
        listed.push(receiver);
        Self {
            events,
            writer: Writer::default(),
            indexes,
            listed: sender,
        }
    }

    fn store(&self) -> Store<K> {
        self.writer.as_reader()
    }

    /// Drives the watch into the cache (and the indexes) and sends every applied or deleted
    /// object to each of `hub`'s subscribers.
    fn start(self, hub: Hub<K>, tasks: &mut JoinSet<()>) {
        let Self {
            events,
            mut writer,
            indexes,
            listed,
        } = self;
        let subscribers = hub.subscribers;
        let reader = writer.as_reader();
        let kind = K::kind(&()).to_string();
        tasks.spawn(async move {
            // `skippable`: an applied change the watch reported, which a subscriber may leave out.
            let send = async |object: Arc<K>, skippable: bool, origin: Origin| {
                for subscriber in &subscribers {
                    if skippable && subscriber.skip.as_ref().is_some_and(|skip| skip(&object)) {
                        continue;
                    }
                    // A closed receiver means its controller stopped: its send error is ignored.
                    match &subscriber.sender {
                        Outlet::Plain(sender) => {
                            let _ = sender.send(object.clone()).await;
                        }
                        Outlet::Marked(sender) => {
                            let _ = sender.send((object.clone(), origin)).await;
                        }
                    }
                }
            };
            let mut lists = 0;
            let mut events = events;
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
                    watcher::Event::Apply(object) => {
                        for index in &indexes {
                            index.apply(&object);
                        }
                        send(Arc::new(object), true, Origin::Watched).await;
                    }
                    watcher::Event::Delete(object) => {
                        for index in &indexes {
                            index.delete(&object);
                        }
                        send(Arc::new(object), false, Origin::Watched).await;
                    }
                    watcher::Event::InitDone => {
                        let now = reader.state();
                        for index in &indexes {
                            index.rebuild(&now);
                        }
                        let _ = listed.send(true);
                        lists += 1;
                        let origin = Origin::Listed(lists);
                        for object in &now {
                            send(object.clone(), false, origin).await;
                        }
                        for object in std::mem::take(&mut before) {
                            if reader.get(&ObjectRef::from_obj(&*object)).is_none() {
                                send(object, false, origin).await;
                            }
                        }
                    }
                    watcher::Event::Init | watcher::Event::InitApply(_) => {}
                }
            }
        });
    }
}

impl<K> PendingWatch<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    fn full(
        api: Api<K>,
        config: watcher::Config,
        indexes: Vec<Index<K>>,
        listed: &mut Vec<watch::Receiver<bool>>,
    ) -> Self {
        let events = events(api, config)
            .backoff(WatchBackoff::default())
            .modify(slim::<K>)
            .boxed();
        Self::new(events, indexes, listed)
    }
}

impl<K> PendingWatch<PartialObjectMeta<K>>
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    fn metadata(
        api: Api<K>,
        config: watcher::Config,
        listed: &mut Vec<watch::Receiver<bool>>,
    ) -> Self {
        let kind = K::kind(&()).to_string();
        let events = watch_list::events(kind, config, move |config| {
            metadata_watcher(api.clone(), config)
        })
        .backoff(WatchBackoff::default())
        .modify(slim::<PartialObjectMeta<K>>)
        .boxed();
        Self::new(events, Vec::new(), listed)
    }
}

/// The cached objects of one kind grouped by a key derived from each object (its namespace,
/// the ClusterClass it uses), kept by the reflector task from the same events that update the
/// cache, before the event reaches a controller. Finding a namespace's Clusters then costs the
/// namespace's size, not the cache's (as Linkerd's policy index keeps its maps per namespace).
pub struct Index<K> {
    key: fn(&K) -> Option<String>,
    inner: Arc<RwLock<IndexMaps>>,
}

impl<K> Clone for Index<K> {
    fn clone(&self) -> Self {
        Self {
            key: self.key,
            inner: self.inner.clone(),
        }
    }
}

/// (namespace, name) of an indexed object.
type Member = (String, String);

#[derive(Default)]
struct IndexMaps {
    members: HashMap<String, BTreeSet<Member>>,
    /// Each indexed object's key, to move it when its key changes.
    key_of: HashMap<Member, String>,
}

impl<K: Resource> Index<K> {
    fn new(key: fn(&K) -> Option<String>) -> Self {
        Self {
            key,
            inner: Arc::default(),
        }
    }

    /// (namespace, name) of the objects under `key`.
    pub fn members(&self, key: &str) -> Vec<Member> {
        self.inner
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .members
            .get(key)
            .map(|members| members.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Every key with at least one object.
    pub fn keys(&self) -> Vec<String> {
        let maps = self.inner.read().unwrap_or_else(|p| p.into_inner());
        maps.members.keys().cloned().collect()
    }

    fn member(object: &K) -> Option<Member> {
        let meta = object.meta();
        Some((
            meta.namespace.clone().unwrap_or_default(),
            meta.name.clone()?,
        ))
    }

    fn apply(&self, object: &K) {
        let Some(member) = Self::member(object) else {
            return;
        };
        let key = (self.key)(object);
        let mut maps = self.inner.write().unwrap_or_else(|p| p.into_inner());
        if maps.key_of.get(&member) == key.as_ref() {
            return;
        }
        maps.remove(&member);
        if let Some(key) = key {
            maps.members
                .entry(key.clone())
                .or_default()
                .insert(member.clone());
            maps.key_of.insert(member, key);
        }
    }

    fn delete(&self, object: &K) {
        if let Some(member) = Self::member(object) {
            self.inner
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&member);
        }
    }

    /// Replaces the whole index after a (re)list.
    fn rebuild(&self, objects: &[Arc<K>]) {
        let mut fresh = IndexMaps::default();
        for object in objects {
            if let (Some(member), Some(key)) = (Self::member(object), (self.key)(object)) {
                fresh
                    .members
                    .entry(key.clone())
                    .or_default()
                    .insert(member.clone());
                fresh.key_of.insert(member, key);
            }
        }
        *self.inner.write().unwrap_or_else(|p| p.into_inner()) = fresh;
    }
}

impl IndexMaps {
    fn remove(&mut self, member: &Member) {
        if let Some(old) = self.key_of.remove(member)
            && let Some(members) = self.members.get_mut(&old)
        {
            members.remove(member);
            // No entry outlives the last object under its key.
            if members.is_empty() {
                self.members.remove(&old);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(namespace: &str, name: &str) -> Arc<CapiCluster> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                "metadata": {"name": name, "namespace": namespace},
            }))
            .expect("cluster"),
        )
    }

    fn classy(namespace: &str, name: &str, class_namespace: &str) -> Arc<CapiCluster> {
        let mut cluster = (*cluster(namespace, name)).clone();
        cluster.body.insert("spec", serde_json::json!({"topology": {"classRef": {"name": "quick", "namespace": class_namespace}}}));
        Arc::new(cluster)
    }

    fn namespaces(index: &Index<CapiCluster>, key: &str) -> Vec<String> {
        index
            .members(key)
            .into_iter()
            .map(|(ns, name)| format!("{ns}/{name}"))
            .collect()
    }

    #[test]
    fn namespace_index_follows_applies_deletes_and_relists() {
        let index = Index::new(|c: &CapiCluster| c.metadata.namespace.clone());
        index.apply(&*cluster("a", "c1"));
        index.apply(&*cluster("a", "c2"));
        index.apply(&*cluster("a", "c1"));
        index.apply(&*cluster("b", "c1"));
        assert_eq!(namespaces(&index, "a"), ["a/c1", "a/c2"]);
        assert_eq!(namespaces(&index, "b"), ["b/c1"]);
        assert!(index.members("c").is_empty());

        index.delete(&*cluster("a", "c1"));
        assert_eq!(namespaces(&index, "a"), ["a/c2"]);
        // The last object under a key takes the key's entry with it.
        index.delete(&*cluster("b", "c1"));
        assert_eq!(index.keys(), ["a"]);

        // A relist replaces everything, including what vanished meanwhile.
        index.rebuild(&[cluster("c", "c9")]);
        assert!(index.members("a").is_empty());
        assert_eq!(index.keys(), ["c"]);
        assert_eq!(index.inner.read().expect("lock").key_of.len(), 1);
    }

    #[test]
    fn class_index_moves_a_cluster_whose_class_changes() {
        let index = Index::new(cross_namespace_class_key);
        index.apply(&*classy("a", "c1", "classes"));
        index.apply(&*classy("b", "c2", "classes"));
        // Same-namespace classes need no cross-namespace objects: not indexed.
        index.apply(&*classy("classes", "c3", "classes"));
        index.apply(&*cluster("d", "plain"));
        assert_eq!(namespaces(&index, "classes/quick"), ["a/c1", "b/c2"]);

        index.apply(&*classy("a", "c1", "other"));
        assert_eq!(namespaces(&index, "classes/quick"), ["b/c2"]);
        assert_eq!(namespaces(&index, "other/quick"), ["a/c1"]);
        index.apply(&*cluster("b", "c2"));
        assert_eq!(index.keys(), ["other/quick"]);
        assert_eq!(index.inner.read().expect("lock").key_of.len(), 1);
    }

    fn named(name: &str) -> CapiCluster {
        (*cluster("a", name)).clone()
    }

    /// Starts a watch that plays `events`, with the feeds `subscribe` takes from its hub; the
    /// watch runs as long as the returned tasks are kept.
    fn play<T>(
        events: Vec<watcher::Event<CapiCluster>>,
        subscribe: impl FnOnce(&mut Hub<CapiCluster>) -> T,
    ) -> (T, JoinSet<()>) {
        let events = futures::stream::iter(events.into_iter().map(Ok)).boxed();
        let watch = PendingWatch::new(events, Vec::new(), &mut Vec::new());
        let mut hub = Hub::default();
        let feeds = subscribe(&mut hub);
        let mut tasks = JoinSet::new();
        watch.start(hub, &mut tasks);
        (feeds, tasks)
    }

    #[tokio::test]
    async fn a_skipping_feed_leaves_out_only_watched_changes() {
        let events = vec![
            watcher::Event::Init,
            watcher::Event::InitApply(named("listed")),
            watcher::Event::InitDone,
            watcher::Event::Apply(named("changed")),
            watcher::Event::Delete(named("changed")),
        ];
        let ((all, skipping), _tasks) = play(events, |hub| {
            (
                hub.subscribe(),
                hub.subscribe_skipping(|_: &CapiCluster| true),
            )
        });
        let names = |feed: Feed<CapiCluster>| async move {
            feed.map(|c| c.name_any()).collect::<Vec<_>>().await
        };
        assert_eq!(names(all).await, ["listed", "changed", "changed"]);
        assert_eq!(
            names(skipping).await,
            ["listed", "changed"],
            "the listed object and the deletion are kept"
        );
    }

    #[tokio::test]
    async fn a_marked_feed_tells_each_list_from_watched_changes() {
        let events = vec![
            watcher::Event::Init,
            watcher::Event::InitApply(named("listed")),
            watcher::Event::InitDone,
            watcher::Event::Apply(named("changed")),
            watcher::Event::Apply(named("skipped")),
            watcher::Event::Delete(named("skipped")),
            // A relist (after a 410 Gone): `listed` vanished meanwhile.
            watcher::Event::Init,
            watcher::Event::InitApply(named("changed")),
            watcher::Event::InitApply(named("skipped")),
            watcher::Event::InitDone,
        ];
        let (marked, _tasks) = play(events, |hub| {
            hub.subscribe_marked(|c: &CapiCluster| c.name_any() == "skipped")
        });
        let mut got: Vec<(String, Origin)> = marked
            .map(|(c, origin)| (c.name_any(), origin))
            .collect()
            .await;
        // The cache's objects come in its (hash) order, before the vanished one.
        if let Some(relisted) = got.get_mut(3..5) {
            relisted.sort();
        }
        let want = [
            ("listed", Origin::Listed(1)),
            ("changed", Origin::Watched),
            ("skipped", Origin::Watched),
            ("changed", Origin::Listed(2)),
            ("skipped", Origin::Listed(2)),
            ("listed", Origin::Listed(2)),
        ];
        assert_eq!(
            got,
            want.map(|(n, o)| (n.to_string(), o)),
            "the skipped Apply is left out; its deletion and the lists are kept"
        );
    }
}
