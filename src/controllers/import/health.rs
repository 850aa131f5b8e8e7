//! The health controller: keeps the `FleetReady` condition on every imported CAPI Cluster's
//! status ([`crate::model::fleet_health`] decides; this module reads caches and writes).
//!
//! The condition is server-side applied to the `status` subresource with its own field manager
//! ([`names::HEALTH_FIELD_MANAGER`]), owning only the `FleetReady` item of `status.conditions`
//! (a list map keyed by `type` in Cluster API v1beta2: `api/core/v1beta2/cluster_types.go`,
//! kubernetes-sigs/cluster-api v1.14). Cluster API's patch helper (`util/patch/patch.go`,
//! `patchStatusConditions`) applies its own condition changes on top of the latest object with an
//! optimistic lock, so neither writer removes the other's conditions. Nothing is written when
//! the live condition already says the same thing ([`fleet_health::plan`]).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Config, Controller};
use kube::runtime::reflector::ObjectRef;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;

use crate::api::{CachedFleetCluster, CapiCluster};
use crate::apply::expectations::Key;
use crate::context::ConfigReceiver;
use crate::controllers::import::import_context::{Decided, ImportContext, observed, retry};
use crate::controllers::import::namespace_triggers::ClusterInputs;
use crate::controllers::import::stores::Feed;
use crate::model::fleet_health;
use crate::model::plan::ObjectId;
use crate::{Result, names};

/// Controller name in metrics and logs.
pub const CONTROLLER: &str = "health";

/// Concurrent reconciles.
const CONCURRENCY: u16 = 8;

/// The controller, ready to run: every Cluster change, Fleet Cluster change (mapped to its CAPI
/// Cluster by `owner`), change of a namespace's labels or deletion, and configuration change
/// re-evaluates the condition. `clusters` may leave out the echoes of our own condition writes
/// ([`skips_own_echo`]).
pub fn controller(
    ctx: Arc<ImportContext>,
    clusters: Feed<CapiCluster>,
    fleet_clusters: Feed<CachedFleetCluster>,
    namespaces: Feed<PartialObjectMeta<Namespace>>,
    owner: impl Fn(&CachedFleetCluster) -> Option<ObjectRef<CapiCluster>> + Send + Sync + 'static,
    config: ConfigReceiver,
) -> impl Future<Output = ()> + Send {
    let (tx, rx) = mpsc::unbounded_channel();
    let stores = ctx.stores.clone();
    let inputs = ClusterInputs::default();
    let shutdown = ctx.base.shutdown.clone();
    tokio::spawn(requeue_all_on_config_change(ctx.clone(), config, tx));
    Controller::for_shared_stream(clusters, ctx.stores.clusters.clone())
        .with_config(Config::default().concurrency(CONCURRENCY))
        .watches_shared_stream(fleet_clusters, move |fleet: Arc<CachedFleetCluster>| {
            owner(&fleet)
        })
        .watches_shared_stream(
            namespaces,
            move |namespace: Arc<PartialObjectMeta<Namespace>>| {
                inputs.clusters_to_reconcile(&stores, &namespace)
            },
        )
        .reconcile_on(UnboundedReceiverStream::new(rx))
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(observed(CONTROLLER, reconcile), retry(CONTROLLER), ctx)
        .for_each(|_| std::future::ready(()))
}

async fn requeue_all_on_config_change(
    ctx: Arc<ImportContext>,
    mut config: ConfigReceiver,
    tx: mpsc::UnboundedSender<ObjectRef<CapiCluster>>,
) {
    config.mark_unchanged();
    loop {
        tokio::select! {
            () = ctx.base.shutdown.cancelled() => return,
            changed = config.changed() => if changed.is_err() { return },
        }
        for cluster in ctx.stores.clusters.state() {
            let _ = tx.send(ObjectRef::from_obj(&*cluster));
        }
    }
}

/// Whether this controller leaves out a watched change of a CAPI Cluster: the echo of its own
/// condition write.
pub fn skips_own_echo(ctx: &ImportContext, cluster: &CapiCluster) -> bool {
    ctx.expectations.own_echo_of(cluster, Key::cluster_status)
}

/// Reconciles the condition of one Cluster.
pub async fn reconcile(cluster: Arc<CapiCluster>, ctx: Arc<ImportContext>) -> Result<Action> {
    let result = reconcile_condition(&cluster, &ctx).await;
    ctx.counts_changed.notify_one();
    result
}

async fn reconcile_condition(cluster: &CapiCluster, ctx: &ImportContext) -> Result<Action> {
    let Some(config) = ctx.base.config() else {
        return Ok(Action::requeue(Duration::from_secs(1)));
    };
    let Some(Decided {
        view,
        live,
        decision,
        ..
    }) = ctx.decide(cluster, &config)
    else {
        return Ok(Action::await_change());
    };
    // Decide only from a cache that shows our last status write: a reconcile triggered before
    // it would apply the same condition again.
    let key = Key::cluster_status(&view.namespace, &view.name);
    let cached_version = cluster.metadata.resource_version.as_deref();
    if let Some(wait) = ctx.expectations.wait(&key, cached_version) {
        return Ok(Action::requeue(wait));
    }
    let status = cluster.body.get("status");
    let observed = fleet_health::Observed {
        decision: &decision,
        view: &view,
        fleet: live.as_deref(),
        cluster: ObjectId::observed(cluster),
        regarding: cluster.object_ref(&()),
        status: status.as_ref(),
        generation: cluster.metadata.generation,
        owns_status: owns_status_fields(cluster),
        now: Timestamp::now(),
    };
    ctx.run(fleet_health::plan(&observed, &config)).await
}

/// Whether our field manager owns anything in the Cluster's status (the cache keeps our
/// managedFields entries).
fn owns_status_fields(cluster: &CapiCluster) -> bool {
    cluster
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .any(|entry| {
            entry.manager.as_deref() == Some(names::HEALTH_FIELD_MANAGER)
                && entry.subresource.as_deref() == Some("status")
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::capi::{MAX_EVENT_NOTE_BYTES, event_note};

    #[test]
    fn event_notes_fit_the_api_limit() {
        assert_eq!(event_note("short"), "short");
        let long = "é".repeat(2000);
        let note = event_note(&long);
        assert!(note.len() <= MAX_EVENT_NOTE_BYTES, "{}", note.len());
        assert!(note.ends_with('…'));
    }

    #[test]
    fn a_cached_cluster_still_tells_whether_we_own_status_fields() {
        // managedFields as the API server serves them: another manager's, our finalizer
        // patch's and, in some rows, our status apply's.
        let entry = |manager: &str, operation: &str, subresource: Option<&str>| {
            json!({"manager": manager, "operation": operation, "subresource": subresource,
                "apiVersion": "cluster.x-k8s.io/v1beta2", "time": "2026-11-23T10:00:00Z",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:conditions": {}}}})
        };
        let capi = entry("manager", "Update", Some("status"));
        let finalizer = entry(names::FIELD_MANAGER, "Update", None);
        let ours = entry(names::HEALTH_FIELD_MANAGER, "Apply", Some("status"));
        let ours_main = entry(names::HEALTH_FIELD_MANAGER, "Apply", None);
        for (entries, owns) in [
            (vec![capi.clone(), finalizer.clone()], false),
            (vec![capi.clone(), finalizer.clone(), ours], true),
            (vec![capi, finalizer, ours_main], false),
        ] {
            let mut cluster: CapiCluster = serde_json::from_value(json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                "metadata": {"name": "c1", "namespace": "ns", "managedFields": entries},
                "spec": {}
            }))
            .expect("Cluster");
            crate::controllers::import::stores::prepare_cached_cluster(&mut cluster);
            assert_eq!(owns_status_fields(&cluster), owns, "{entries:?}");
            // The cache keeps no owned fields of a Cluster.
            let kept = cluster.metadata.managed_fields.iter().flatten();
            assert!(
                kept.clone()
                    .all(|e| e.fields_v1.is_none() && e.time.is_none())
            );
            assert!(
                kept.clone()
                    .all(|e| e.manager.as_deref() != Some("manager"))
            );
        }
    }
}
