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
//!
//! - [`hub`]: the feeds a watch fans its changes out to;
//! - [`watches`]: the watches themselves (lists, relists, deletions, backoff);
//! - [`trim`]: what a cache keeps of an object (managedFields of ours, digests);
//! - [`index`]: the namespace and class indexes over the Cluster cache.

use std::sync::Arc;

use fleet_api_rs::fleet_cluster::Cluster as FleetCluster;
use fleet_api_rs::fleet_cluster_registration_token::ClusterRegistrationToken;
use fleet_api_rs::fleet_clustergroup::ClusterGroup;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Namespace;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::Store;
use kube::runtime::{WatchStreamExt, reflector::ObjectRef, watcher};
use kube::{Api, Client};
use tokio::sync::watch;

use self::watches::{PendingWatch, api, events};
use crate::api::{BundleNamespaceMapping, CachedFleetCluster, CapiCluster, CapiClusterClass};
use crate::cli::ManagerFlags;
use crate::controllers::watch_backoff::watch_backoff;
use crate::model::capi::{ClassRef, ClusterView, StringMap};
use crate::model::namespace::NamespaceState;
use crate::names;

mod hub;
mod index;
mod trim;
mod watches;

pub use crate::model::fleet::TEMPLATE_VALUES;
pub use hub::{Feed, Hub, Hubs, MarkedFeed, Origin};
pub use index::Index;
pub use trim::{cached_fleet_cluster, decoded, prepare_cached_cluster};
pub use watches::{Watches, map_event};

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
            .backoff(watch_backoff())
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
            .backoff(watch_backoff())
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

    /// Whether a namespace exists and whether it is terminating, as the cache shows it.
    pub fn namespace_state(&self, name: &str) -> NamespaceState {
        NamespaceState::of(
            self.namespaces
                .get(&ObjectRef::new(name))
                .map(|ns| ns.metadata.deletion_timestamp.is_some()),
        )
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
pub(super) fn class_key(class: &ClassRef) -> String {
    format!("{}/{}", class.namespace, class.name)
}

pub(super) fn cross_namespace_class_key(cluster: &CapiCluster) -> Option<String> {
    ClusterView::of(cluster)?
        .cross_namespace_class()
        .map(class_key)
}
