//! The watches that fill the caches and fan their changes out to the feeds: applied and deleted
//! objects, and objects that vanished while a watch re-listed.

use std::sync::Arc;

use fleet_api_rs::fleet_cluster_registration_token::ClusterRegistrationToken;
use fleet_api_rs::fleet_clustergroup::ClusterGroup;
use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::Namespace;
use kube::core::{PartialObjectMeta, Resource};
use kube::runtime::reflector::{Store, store::Writer};
use kube::runtime::{WatchStreamExt, metadata_watcher, reflector::ObjectRef, watcher};
use kube::{Api, Client};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::hub::{Hub, Hubs, Origin, Outlet};
use super::index::Index;
use super::trim::*;
use crate::api::{BundleNamespaceMapping, CachedFleetCluster, CapiCluster, CapiClusterClass};
use crate::controllers::watch_backoff::watch_backoff;
use crate::controllers::watch_list;

/// The watches, built but not started (see [`Watches::start`]).
pub struct Watches {
    pub(super) clusters: PendingWatch<CapiCluster>,
    pub(super) classes: PendingWatch<CapiClusterClass>,
    pub(super) namespaces: PendingWatch<PartialObjectMeta<Namespace>>,
    pub(super) fleet_clusters: PendingWatch<CachedFleetCluster>,
    pub(super) groups: PendingWatch<ClusterGroup>,
    pub(super) mappings: PendingWatch<BundleNamespaceMapping>,
    pub(super) tokens: PendingWatch<PartialObjectMeta<ClusterRegistrationToken>>,
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

/// The events of a watch of `api` ([`watch_list::events`]).
pub(super) fn events<K>(
    api: Api<K>,
    config: watcher::Config,
) -> BoxStream<'static, watcher::Result<watcher::Event<K>>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let kind = K::kind(&()).to_string();
    watch_list::events(kind, config, move |config| watcher(api.clone(), config))
}

pub(super) fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// A watch of one kind and its cache, not started yet.
/// A kind the caches watch: decoded, logged and shared between tasks.
pub(super) trait Watched:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static
{
}

impl<K> Watched for K where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static
{
}

pub(super) struct PendingWatch<K: Resource<DynamicType = ()> + Clone + 'static> {
    events: BoxStream<'static, watcher::Result<watcher::Event<K>>>,
    writer: Writer<K>,
    indexes: Vec<Index<K>>,
    listed: watch::Sender<bool>,
}

impl<K> PendingWatch<K>
where
    K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + Sync + 'static,
{
    pub(super) fn new(
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

    pub(super) fn store(&self) -> Store<K> {
        self.writer.as_reader()
    }

    /// Drives the watch into the cache (and the indexes) and sends every applied or deleted
    /// object to each of `hub`'s subscribers.
    pub(super) fn start(self, hub: Hub<K>, tasks: &mut JoinSet<()>) {
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

impl<K: Watched> PendingWatch<K> {
    pub(super) fn full(
        api: Api<K>,
        config: watcher::Config,
        indexes: Vec<Index<K>>,
        listed: &mut Vec<watch::Receiver<bool>>,
    ) -> Self {
        let events = events(api, config)
            .backoff(watch_backoff())
            .modify(slim::<K>)
            .boxed();
        Self::new(events, indexes, listed)
    }
}

impl<K: Watched> PendingWatch<PartialObjectMeta<K>> {
    pub(super) fn metadata(
        api: Api<K>,
        config: watcher::Config,
        listed: &mut Vec<watch::Receiver<bool>>,
    ) -> Self {
        let kind = K::kind(&()).to_string();
        let events = watch_list::events(kind, config, move |config| {
            metadata_watcher(api.clone(), config)
        })
        .backoff(watch_backoff())
        .modify(slim::<PartialObjectMeta<K>>)
        .boxed();
        Self::new(events, Vec::new(), listed)
    }
}

/// A watch event with its object changed into another form.
pub fn map_event<K, L>(event: watcher::Event<K>, change: impl Fn(K) -> L) -> watcher::Event<L> {
    match event {
        watcher::Event::Apply(object) => watcher::Event::Apply(change(object)),
        watcher::Event::Delete(object) => watcher::Event::Delete(change(object)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(object) => watcher::Event::InitApply(change(object)),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::import::stores::Feed;
    use kube::ResourceExt;

    fn named(name: &str) -> CapiCluster {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": name, "namespace": "a"},
        }))
        .expect("cluster")
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
