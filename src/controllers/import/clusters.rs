//! The Cluster controller: CAPI `Cluster` → Fleet `Cluster` (+ registration token). One
//! reconcile reads top to bottom: decide from the caches
//! ([`ImportContext::decide_to_write`]), wait while the caches do not show our own last
//! writes or the namespace is terminating, then carry out the decision
//! ([`ClusterWrites::carry_out`]).

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::controller::Action;

use crate::api::CapiCluster;
use crate::apply::expectations::Key;
use crate::controllers::import::cluster_writes::ClusterWrites;
use crate::controllers::import::import_context::{Hold, ImportContext};
use crate::{Error, Result};

/// Controller name in metrics and logs.
pub const CONTROLLER: &str = "cluster";

/// Reconciles one CAPI Cluster; the status writer recounts after each.
pub async fn reconcile(cluster: Arc<CapiCluster>, ctx: Arc<ImportContext>) -> Result<Action> {
    let result = reconcile_cluster(&cluster, &ctx).await;
    ctx.counts_changed.notify_one();
    result
}

async fn reconcile_cluster(cluster: &CapiCluster, ctx: &ImportContext) -> Result<Action> {
    let Some(config) = ctx.base.config() else {
        return Ok(Action::requeue(Duration::from_secs(1)));
    };
    let (decided, keys, hold) = ctx
        .decide_to_write(cluster, &config)
        .ok_or_else(|| Error::malformed("Cluster", cluster.name_any(), "no name or namespace"))?;
    let view = &decided.view;
    tracing::debug!(cluster = %view.name, namespace = %view.namespace, decision = ?decided.decision, ?hold, "decided");
    match hold {
        Some(Hold::CachesBehind(wait)) => Ok(Action::requeue(wait)),
        Some(Hold::NamespaceTerminating) => Ok(Action::await_change()),
        None => {
            ClusterWrites::new(ctx, cluster, keys, &view.namespace)
                .carry_out(&decided, &config)
                .await
        }
    }
}

/// Whether this controller leaves out a watched change of a CAPI Cluster: the echo of its own
/// finalizer patch, or of the health controller's `FleetReady` condition, which it does not read
/// (a decision reads `status.initialization`, `templateValues` metadata and spec:
/// [`crate::model::capi::template_object`]).
pub fn skips_cluster_change(ctx: &ImportContext, cluster: &CapiCluster) -> bool {
    ctx.expectations.own_echo_of(cluster, Key::cluster)
        || ctx.expectations.is_echo_of(cluster, Key::cluster_status)
}
