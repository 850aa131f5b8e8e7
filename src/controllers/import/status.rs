//! `FleetAddonConfig` `status.clusters` (selected / imported / waiting / ready) and the matching
//! gauges, recounted after Cluster reconciles at most once per [`MIN_INTERVAL`], written only
//! when the counts change. While selection is frozen (`spec.cluster` invalid) the counts
//! report what exists ([`counted_as`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::{Api, ResourceExt};

use std::collections::BTreeSet;

use kube::runtime::reflector::ObjectRef;
use tokio::sync::mpsc::UnboundedSender;

use crate::api::{CapiCluster, ClusterCounts, FleetAddonConfig, RolloutStatus};
use crate::controllers::import::import_context::ImportContext;
use crate::metrics::ReasonLabels;
use crate::metrics::WaveLabels;
use crate::model::config::EffectiveConfig;
use crate::model::import::{Decision, counted_as};
use crate::model::plan::{Next, Plan};
use crate::model::rollout::{self, Hold, Rollout, Tally};
use crate::model::{fleet_health, fleet_status};

/// Shortest time between two recounts.
pub const MIN_INTERVAL: Duration = Duration::from_secs(2);

/// How long to wait after a recount that took `took`: [`MIN_INTERVAL`], or ten times the
/// recount, whichever is longer. A recount decides every Cluster (O(N)); with tens of thousands
/// of Clusters it must not take more than a tenth of a core from the import it reports on.
pub fn interval_after(took: Duration) -> Duration {
    MIN_INTERVAL.max(took.saturating_mul(10))
}

/// Counts the Clusters in the caches (and, through `by_reason`, their `FleetReady` reasons;
/// through `tally`, their rollout waves).
pub fn count(
    ctx: &ImportContext,
    config: &EffectiveConfig,
    by_reason: &mut BTreeMap<&'static str, i64>,
    tally: &mut Tally,
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
            if let Some(live) = decided.live.as_deref() {
                tally.add(rollout::class_key(&decided.view), live);
            }
        }
        if decision == Decision::Wait {
            counts.waiting += 1;
        }
    }
    counts
}

/// Runs until shutdown.
pub async fn run(ctx: Arc<ImportContext>, clusters: UnboundedSender<ObjectRef<CapiCluster>>) {
    // What the object's status holds, as far as we know (None: unknown, read it first).
    let mut written: Option<(Option<i64>, ClusterCounts, Option<RolloutStatus>)> = None;
    let mut soaks_read = false;
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
        let mut tally = Tally::default();
        let counts = count(&ctx, &config, &mut by_reason, &mut tally);
        let rollout = config.cluster.as_ref().and_then(|c| c.rollout.as_ref());
        if !soaks_read && rollout.is_some() {
            soaks_read = read_soaks(&ctx).await;
        }
        let rollout = rollout.map(|rollout| advance_waves(&ctx, rollout, &tally, &clusters));
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
            && written
                .as_ref()
                .is_none_or(|(generation, last, last_rollout)| {
                    *generation != config.generation || *last != counts || *last_rollout != rollout
                })
        {
            match write(&ctx, &counts, rollout.as_ref()).await {
                Ok(()) => written = Some((config.generation, counts, rollout)),
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

/// The gates after this count (soaks started and ended), published for the Cluster
/// reconciles; the Clusters of every class whose gates changed are reconciled again; the
/// rollout gauges. Returns `status.rollout`.
fn advance_waves(
    ctx: &ImportContext,
    rollout: &Rollout,
    tally: &Tally,
    clusters: &UnboundedSender<ObjectRef<CapiCluster>>,
) -> RolloutStatus {
    let Ok(mut published) = ctx.rollout_gates.write() else {
        return tally.status(rollout, &Default::default());
    };
    let mut gates = rollout::advance(&published, &tally.gates, rollout.soak, Timestamp::now());
    let released = ctx.stores.classes.state().into_iter().filter_map(|class| {
        let release = class
            .annotations()
            .get(crate::names::ROLLOUT_RELEASE_ANNOTATION);
        (release.map(String::as_str) == Some("true")).then(|| {
            format!(
                "{}/{}",
                class.namespace().unwrap_or_default(),
                class.name_any()
            )
        })
    });
    rollout::release(&mut gates, &released.collect());
    let holds = |g: Option<&rollout::WaveGate>| g.map(|g| g.holds(rollout.failing_clusters));
    let differs = |key: &(String, String)| holds(published.get(key)) != holds(gates.get(key));
    let changed: BTreeSet<&String> = (published.keys().chain(gates.keys()))
        .filter(|key| differs(key))
        .map(|(class, _)| class)
        .collect();
    if !changed.is_empty() {
        for cluster in ctx.stores.clusters.state() {
            let class =
                crate::model::capi::ClusterView::of(&cluster).map(|v| rollout::class_key(&v));
            if class.is_some_and(|class| changed.contains(&class)) {
                let _ = clusters.send(ObjectRef::from_obj(&*cluster));
            }
        }
    }
    let status = tally.status(rollout, &gates);
    *published = gates;
    let metrics = &ctx.base.metrics;
    for wave in &status.waves {
        for (state, value) in [
            ("clusters", wave.clusters),
            ("held", wave.held),
            ("ready", wave.ready),
        ] {
            let labels = WaveLabels {
                wave: wave.name.clone(),
                state,
            };
            metrics
                .rollout_wave_clusters
                .get_or_create(&labels)
                .set(value);
        }
    }
    for hold in Hold::ALL {
        let reason = hold.as_str();
        let value = tally.held.get(reason).copied().unwrap_or(0);
        metrics
            .rollout_held_clusters
            .get_or_create(&ReasonLabels { reason })
            .set(value);
    }
    status
}

/// Seeds the gates with the soaks `status.rollout.soaks` recorded before a restart. Returns
/// whether it read them.
async fn read_soaks(ctx: &ImportContext) -> bool {
    let api: Api<FleetAddonConfig> = Api::all(ctx.base.controllers.clone());
    let Ok(live) = api.get_opt(FleetAddonConfig::NAME).await else {
        return false;
    };
    let recorded = live.and_then(|l| l.status).and_then(|s| s.rollout);
    if let (Some(recorded), Ok(mut gates)) = (recorded, ctx.rollout_gates.write()) {
        gates.extend(rollout::soaks(&recorded));
    }
    true
}

/// Applies `status.clusters` and `status.rollout` unless the object already has them.
async fn write(
    ctx: &ImportContext,
    counts: &ClusterCounts,
    rollout: Option<&RolloutStatus>,
) -> crate::Result<()> {
    let api: Api<FleetAddonConfig> = Api::all(ctx.base.controllers.clone());
    let Some(live) = api.get_opt(FleetAddonConfig::NAME).await? else {
        return Ok(());
    };
    let writes = fleet_status::clusters_write(&live, counts, rollout)
        .into_iter()
        .collect();
    ctx.base
        .run(Plan::of(writes, Next::AwaitChange))
        .await
        .map(drop)
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
