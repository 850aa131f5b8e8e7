//! The feeds of one watched kind: each controller subscribes before the watches start; every
//! change is sent to each feed (bounded: a slow controller slows its watch down).
//!
//! Not kube-runtime's shared reflector (kube-runtime 3.1 `reflector::store_shared`,
//! `Writer::subscribe`, `src/reflector/dispatcher.rs`), which broadcasts only the references of
//! applied objects and of the store after a list, each read back from the store when taken: it
//! sends no deletions (the controllers must see a deleted Fleet Cluster, namespace or class),
//! nothing for objects that vanished while a watch re-listed, no origin of an object (the
//! marked feeds' [`Origin`]), and the object a subscriber takes is the store's latest, not the
//! watched change its echo check must judge (`watches.rs` tests
//! `a_skipping_feed_leaves_out_only_watched_changes`,
//! `a_marked_feed_tells_each_list_from_watched_changes`).

use std::sync::Arc;

use fleet_api_rs::fleet_cluster_registration_token::ClusterRegistrationToken;
use fleet_api_rs::fleet_clustergroup::ClusterGroup;
use k8s_openapi::api::core::v1::Namespace;
use kube::core::PartialObjectMeta;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::api::{BundleNamespaceMapping, CachedFleetCluster, CapiCluster, CapiClusterClass};

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
pub(super) const FEED_CAPACITY: usize = 1024;

/// Hands out feeds of one kind, as many as the controllers ask for, until the watches start.
pub struct Hub<K> {
    pub(super) subscribers: Vec<Subscriber<K>>,
}

/// Which watched changes a feed leaves out (see [`Hub::subscribe_skipping`]).
pub(super) type Skip<K> = Box<dyn Fn(&K) -> bool + Send + Sync>;

pub(super) struct Subscriber<K> {
    pub(super) sender: Outlet<K>,
    pub(super) skip: Option<Skip<K>>,
}

pub(super) enum Outlet<K> {
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
