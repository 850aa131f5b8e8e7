//! The move controller: hands the Cluster API definition of a self-managed Cluster over to the
//! workload cluster itself through Fleet Bundles (docs/self-managed.md). A thin adapter over
//! [`crate::model::move_decide::decide_move`]: [`reconcile`] observes, the model decides, the state is
//! recorded on the Cluster, then the actions run.
//!
//! Watches (none of its own over every Cluster):
//! - CAPI Clusters, the import's shared watch and cache (labels and annotations tell whether a
//!   Cluster opted in or is being moved; every change of a Cluster, status included, reaches the
//!   feed, so the health controller's `FleetReady` write wakes a Cluster waiting for its Fleet
//!   Cluster);
//! - move Bundles (labelled [`MOVE_CLUSTER_LABEL`]), metadata only: Fleet's status writes wake
//!   the Cluster the Bundle moves;
//! - the configuration: a change (e.g. `selfManagedSelector`) re-evaluates every Cluster.
//!
//! A Cluster being moved is read fresh (GET) at each reconcile, with its Bundles (LIST by label)
//! and, from `WaitingUnblocked` on, the object graph (the LISTs `caapf move-preview` makes):
//! decisions never come from a stale cache, and every write of the Cluster is guarded by the
//! resourceVersion it was decided from.

mod move_step;
mod observe;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Config, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, metadata_watcher, watcher};
use kube::{Api, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::api::CapiCluster;
use crate::context::Context;
use crate::controllers::backoff::Backoff;
use crate::controllers::import::stores::Feed;
use crate::controllers::reconcile::retry_after;
use crate::controllers::watch_backoff::watch_backoff;
use crate::controllers::watch_list;
use crate::model::move_plan::MOVE_CLUSTER_LABEL;
use crate::model::move_state::Timeouts;
use crate::{Error, Result};

/// Controller name in metrics and logs.
pub const CONTROLLER: &str = "move";

/// Concurrent reconciles: moves are rare and each reads a whole object graph.
const CONCURRENCY: u16 = 2;

/// A Fleet `Bundle` (`fleet.cattle.io/v1alpha1`; fleet-api-rs has no Bundle type), its body as
/// free-form JSON: the controller compares `spec.resources` and reads `status` as JSON.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct FleetBundle {
    pub api_version: String,
    pub kind: String,
    pub metadata: ObjectMeta,
    /// `spec`, `status`, untouched.
    #[serde(flatten)]
    pub body: Map<String, Value>,
}

crate::api::namespaced_resource!(
    FleetBundle,
    "fleet.cattle.io",
    "v1alpha1",
    "Bundle",
    "bundles"
);

/// What every reconcile of this controller shares.
pub struct MoveContext {
    pub base: Arc<Context>,
    pub backoff: Backoff,
    pub timeouts: Timeouts,
}

/// The move controller, ready to run (leader only: it writes): fed by the import's shared
/// Cluster watch and cache (a second watch of every Cluster would cost a second cache of
/// 10,000 objects), its own watch of the move Bundles, and configuration changes.
pub fn controller(
    base: Arc<Context>,
    clusters: Feed<CapiCluster>,
    store: Store<CapiCluster>,
) -> impl Future<Output = ()> + Send {
    let labelled = watcher::Config::default().labels(MOVE_CLUSTER_LABEL);
    let bundle_events = bundle_events(&base, labelled).touched_objects();
    let ctx = Arc::new(MoveContext {
        timeouts: Timeouts {
            unblock: base.flags.move_unblock_timeout,
            target: base.flags.move_target_timeout,
            resume: base.flags.move_resume_timeout,
        },
        backoff: Backoff::default(),
        base: base.clone(),
    });
    Controller::for_shared_stream(clusters, store)
        .with_config(Config::default().concurrency(CONCURRENCY))
        .watches_stream(bundle_events, |bundle: PartialObjectMeta<FleetBundle>| {
            let cluster = bundle.labels().get(MOVE_CLUSTER_LABEL)?.clone();
            Some(ObjectRef::<CapiCluster>::new(&cluster).within(&bundle.namespace()?))
        })
        .reconcile_all_on(base.config_changes())
        .graceful_shutdown_on(base.shutdown.clone().cancelled_owned())
        .run(reconcile, error_policy, ctx)
        .for_each(|_| std::future::ready(()))
}

/// The metadata watch of the Fleet Bundles `config` selects (in `--namespace` when set), with
/// the shared watch backoff: the move and rollout lint controllers' feed.
pub fn bundle_events(
    base: &Context,
    config: watcher::Config,
) -> impl futures::Stream<Item = watcher::Result<watcher::Event<PartialObjectMeta<FleetBundle>>>>
+ Send
+ 'static {
    let client = base.controllers.clone();
    let bundles: Api<FleetBundle> = match base.flags.watch_namespace() {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    };
    let watch = move |config| metadata_watcher(bundles.clone(), config);
    watch_list::events("Bundle".to_string(), config, watch).backoff(watch_backoff())
}

/// Reconciles one Cluster through the one reconcile wrapper (metrics, backoff).
pub async fn reconcile(cluster: Arc<CapiCluster>, ctx: Arc<MoveContext>) -> Result<Action> {
    crate::controllers::reconcile::observed(
        CONTROLLER,
        &*cluster,
        &ctx.base.metrics,
        &ctx.backoff,
        move_step::reconcile(&cluster, &ctx),
    )
    .await
}

/// Retries a failed Cluster with the shared per-object backoff.
pub fn error_policy(cluster: Arc<CapiCluster>, error: &Error, ctx: Arc<MoveContext>) -> Action {
    retry_after(CONTROLLER, &*cluster, error, &ctx.backoff)
}

/// How long to wait before reading the configuration again when it has not been read yet.
const CONFIG_WAIT: Duration = Duration::from_secs(1);
