//! `FleetAddonConfig` `status.clusters` (selected / imported / waiting / ready) and the matching
//! gauges, recounted after Cluster reconciles at most once per [`MIN_INTERVAL`], written only
//! when the counts change. While selection is frozen (`spec.cluster` invalid) the counts
//! report what exists ([`counted_as`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::Api;
use serde_json::json;

use crate::api::{ClusterCounts, FleetAddonConfig};
use crate::controllers::import::import_context::ImportContext;
use crate::metrics::ReasonLabels;
use crate::model::config::EffectiveConfig;
use crate::model::fleet_health;
use crate::model::import::{Decision, counted_as};
use crate::names;

/// Shortest time between two recounts.
pub const MIN_INTERVAL: Duration = Duration::from_secs(2);

/// How long to wait after a recount that took `took`: [`MIN_INTERVAL`], or ten times the
/// recount, whichever is longer. A recount decides every Cluster (O(N)); with tens of thousands
/// of Clusters it must not take more than a tenth of a core from the import it reports on.
pub fn interval_after(took: Duration) -> Duration {
    MIN_INTERVAL.max(took.saturating_mul(10))
}

/// Counts the Clusters in the caches (and, through `by_reason`, their `FleetReady` reasons).
pub fn count(
    ctx: &ImportContext,
    config: &EffectiveConfig,
    by_reason: &mut BTreeMap<&'static str, i64>,
) -> ClusterCounts {
    let mut counts = ClusterCounts::default();
    let now = Timestamp::now();
    for object in ctx.stores.clusters.state() {
        let Some(decided) = ctx.decide(&object, config) else {
            continue;
        };
        let decision = counted_as(decided.decision, &decided.view, decided.live.as_deref());
        if let Some(health) = fleet_health::health_of(
            &decision,
            &decided.view,
            config,
            decided.live.as_deref(),
            now,
        ) {
            *by_reason.entry(health.reason).or_default() += 1;
            if health.ready {
                counts.ready += 1;
            }
        }
        if decision.is_selected() {
            counts.selected += 1;
        }
        if decision.is_imported() {
            counts.imported += 1;
        }
        if decision == Decision::Wait {
            counts.waiting += 1;
        }
    }
    counts
}

/// Runs until shutdown.
pub async fn run(ctx: Arc<ImportContext>) {
    // What the object's status holds, as far as we know (None: unknown, read it first).
    let mut written: Option<(Option<i64>, ClusterCounts)> = None;
    loop {
        tokio::select! {
            () = ctx.base.shutdown.cancelled() => return,
            () = ctx.counts_changed.notified() => {}
        }
        let Some(config) = ctx.base.config() else {
            continue;
        };
        let started = std::time::Instant::now();
        let mut by_reason = BTreeMap::new();
        let counts = count(&ctx, &config, &mut by_reason);
        ctx.forget_gone_reports();
        let pause = interval_after(started.elapsed());
        ctx.base.metrics.selected_clusters.set(counts.selected);
        ctx.base.metrics.imported_clusters.set(counts.imported);
        for reason in fleet_health::reason::ALL {
            ctx.base
                .metrics
                .fleet_ready_clusters
                .get_or_create(&ReasonLabels { reason })
                .set(by_reason.get(reason).copied().unwrap_or(0));
        }
        // Only an existing FleetAddonConfig has a status to write.
        if config.generation.is_some()
            && written.as_ref().is_none_or(|(generation, last)| {
                *generation != config.generation || *last != counts
            })
        {
            match write(&ctx, &counts).await {
                Ok(()) => written = Some((config.generation, counts)),
                Err(err) => {
                    tracing::warn!(%err, "writing FleetAddonConfig status.clusters");
                    written = None;
                }
            }
        }
        tokio::select! {
            () = ctx.base.shutdown.cancelled() => return,
            () = tokio::time::sleep(pause) => {}
        }
    }
}

/// Applies `status.clusters` unless the object already has these counts.
async fn write(ctx: &ImportContext, counts: &ClusterCounts) -> crate::Result<()> {
    let api: Api<FleetAddonConfig> = Api::all(ctx.base.controllers.clone());
    let Some(live) = api.get_opt(FleetAddonConfig::NAME).await? else {
        return Ok(());
    };
    if live.status.as_ref().and_then(|s| s.clusters.as_ref()) == Some(counts) {
        return Ok(());
    }
    let body = json!({
        "apiVersion": "addons.cluster.x-k8s.io/v1alpha1",
        "kind": "FleetAddonConfig",
        "metadata": {"name": FleetAddonConfig::NAME},
        "status": {"clusters": counts},
    });
    crate::apply::apply_status(
        &api,
        FleetAddonConfig::NAME,
        &body,
        names::IMPORT_STATUS_FIELD_MANAGER,
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recounts_take_at_most_a_tenth_of_the_time() {
        let ms = Duration::from_millis;
        for (took, pause) in [
            (ms(0), MIN_INTERVAL),
            (ms(50), MIN_INTERVAL),
            (ms(200), MIN_INTERVAL),
            (ms(300), ms(3000)),
            (ms(1500), ms(15000)),
        ] {
            assert_eq!(interval_after(took), pause, "{took:?}");
        }
    }
}
