//! The move controller: hands the Cluster API definition of a self-managed Cluster over to the
//! workload cluster itself through Fleet Bundles (docs/self-managed.md). A thin adapter over
//! [`crate::model::move_state::decide`]: [`reconcile`] observes, the model decides, the state is
//! recorded on the Cluster, then the actions run.
//!
//! Watches (all cheap, none keeps a Cluster's body in memory):
//! - CAPI Clusters, metadata only (labels and annotations tell whether a Cluster opted in or is
//!   being moved; every change of a Cluster, status included, moves its resourceVersion, so the
//!   health controller's `FleetReady` write wakes a Cluster waiting for its Fleet Cluster);
//! - move Bundles (labelled [`MOVE_CLUSTER_LABEL`]), metadata only: Fleet's status writes wake
//!   the Cluster the Bundle moves;
//! - the configuration: a change (e.g. `selfManagedSelector`) re-evaluates every Cluster.
//!
//! A Cluster being moved is read fresh (GET) at each reconcile, with its Bundles (LIST by label)
//! and, from `WaitingUnblocked` on, the object graph (the LISTs `caapf move-preview` makes):
//! decisions never come from a stale cache, and every write of the Cluster is guarded by the
//! resourceVersion it was decided from.

mod reconcile;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{NamespaceResourceScope, PartialObjectMeta, Resource};
use kube::runtime::controller::{Action, Config, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, metadata_watcher, watcher};
use kube::{Api, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::api::CapiCluster;
use crate::context::Context;
use crate::controllers::backoff::Backoff;
use crate::controllers::reconcile::retry_after;
use crate::controllers::watch_backoff::WatchBackoff;
use crate::model::move_plan::MOVE_CLUSTER_LABEL;
use crate::model::move_state::Timeouts;
use crate::{Error, Result, names};

/// Controller name in metrics and logs.
pub const CONTROLLER: &str = "move";

/// Concurrent reconciles: moves are rare and each reads a whole object graph.
const CONCURRENCY: u16 = 2;

/// A Fleet `Bundle` (`fleet.cattle.io/v1alpha1`; fleet-api-rs has no Bundle type), its body as
/// free-form JSON: the controller compares `spec.resources` and reads `status` as JSON.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FleetBundle {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// `spec`, `status`, untouched.
    #[serde(flatten)]
    pub body: Map<String, Value>,
}

impl Resource for FleetBundle {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "Bundle".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "fleet.cattle.io".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1alpha1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "bundles".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// What every reconcile of this controller shares.
pub struct MoveContext {
    pub base: Arc<Context>,
    pub backoff: Backoff,
    pub timeouts: Timeouts,
}

type ClusterMeta = PartialObjectMeta<CapiCluster>;

/// Runs the move controller until shutdown (leader only: it writes).
pub async fn run(base: Arc<Context>) {
    let mut config = base.config.clone();
    if crate::context::wait_for_config(&mut config).await.is_none() {
        return;
    }
    let client = base.controllers.clone();
    let (clusters, bundles): (Api<CapiCluster>, Api<FleetBundle>) =
        match base.flags.watch_namespace() {
            Some(ns) => (
                Api::namespaced(client.clone(), ns),
                Api::namespaced(client, ns),
            ),
            None => (Api::all(client.clone()), Api::all(client)),
        };
    let mut cluster_config = watcher::Config::default().any_semantic();
    if let Some(filter) = base.flags.watch_filter_label() {
        cluster_config =
            cluster_config.labels(&format!("{}={filter}", names::CAPI_WATCH_FILTER_LABEL));
    }
    let bundle_config = watcher::Config::default()
        .any_semantic()
        .labels(MOVE_CLUSTER_LABEL);

    let (reader, writer) = reflector::store::<ClusterMeta>();
    let cluster_events = metadata_watcher(clusters, cluster_config)
        .backoff(WatchBackoff::default())
        .modify(|meta: &mut ClusterMeta| meta.metadata.managed_fields = None)
        .reflect(writer)
        .touched_objects();
    let bundle_events = metadata_watcher(bundles, bundle_config)
        .backoff(WatchBackoff::default())
        .touched_objects();
    let mut changes = base.config.clone();
    changes.mark_unchanged();
    let config_changes = futures::stream::unfold(changes, |mut changes| async move {
        changes.changed().await.ok()?;
        Some(((), changes))
    });

    let ctx = Arc::new(MoveContext {
        timeouts: Timeouts {
            unblock: base.flags.move_unblock_timeout,
            target: base.flags.move_target_timeout,
        },
        backoff: Backoff::default(),
        base: base.clone(),
    });
    let shutdown = base.shutdown.clone();
    // A stop before the Cluster watch's first list completes: kube's applier holds reconciles
    // until the store is ready and would wait for that list forever (the stopped trigger stream
    // is no longer polled), so end here; no reconcile can be running yet.
    let (ready, stop) = (reader.clone(), shutdown.clone());
    let stopped_before_ready = async move {
        stop.cancelled().await;
        if ready.wait_until_ready().now_or_never().is_none() {
            return;
        }
        std::future::pending::<()>().await;
    };
    let controller = Controller::for_stream(cluster_events, reader)
        .with_config(Config::default().concurrency(CONCURRENCY))
        .watches_stream(bundle_events, |bundle: PartialObjectMeta<FleetBundle>| {
            let cluster = bundle.labels().get(MOVE_CLUSTER_LABEL)?.clone();
            Some(ObjectRef::<ClusterMeta>::new(&cluster).within(&bundle.namespace()?))
        })
        .reconcile_all_on(config_changes)
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(reconcile, error_policy, ctx)
        .for_each(|_| std::future::ready(()));
    tokio::select! {
        () = controller => {}
        () = stopped_before_ready => {}
    }
}

/// Reconciles one Cluster through the one reconcile wrapper (metrics, backoff).
pub async fn reconcile(cluster: Arc<ClusterMeta>, ctx: Arc<MoveContext>) -> Result<Action> {
    crate::controllers::reconcile::observed(
        CONTROLLER,
        &*cluster,
        &ctx.base.metrics,
        &ctx.backoff,
        reconcile::reconcile(&cluster, &ctx),
    )
    .await
}

/// Retries a failed Cluster with the shared per-object backoff.
pub fn error_policy(cluster: Arc<ClusterMeta>, error: &Error, ctx: Arc<MoveContext>) -> Action {
    retry_after(CONTROLLER, &*cluster, error, &ctx.backoff)
}

/// How long to wait before reading the configuration again when it has not been read yet.
const CONFIG_WAIT: Duration = Duration::from_secs(1);
