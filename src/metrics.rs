//! Prometheus metrics. Label values are bounded (controller, hook, step and reason names),
//! never object names. CAAPF's three `caapf_controller_*` names are kept so dashboards carry over.

use std::sync::atomic::AtomicI64;
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, text::encode};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Label: which controller.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: &'static str,
}

/// Labels: which controller, and a bounded error reason ([`crate::Error::metric_label`]).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub controller: &'static str,
    pub error: &'static str,
}

/// Labels: which Runtime SDK hook, and how the call ended (`Success`, `Failure`, `Retry`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HookLabels {
    pub hook: &'static str,
    pub status: &'static str,
}

/// Label: which Runtime SDK hook.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HookNameLabels {
    pub hook: &'static str,
}

/// Labels: which helm operation (`repo-add`, `install`, `upgrade`, …) and its outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HelmLabels {
    pub operation: &'static str,
    pub outcome: &'static str,
}

/// Label: a `FleetReady` condition reason (one of [`crate::model::fleet_health::reason::ALL`]).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: &'static str,
}

/// Labels: a rollout wave and a state of its clusters (`clusters`, `held`, `ready`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WaveLabels {
    pub wave: String,
    pub state: &'static str,
}

/// Every metric the provider exports.
pub struct Metrics {
    registry: Registry,
    pub reconciles: Family<ControllerLabels, Counter>,
    pub reconcile_errors: Family<ErrorLabels, Counter>,
    pub reconcile_duration: Family<ControllerLabels, Histogram>,
    pub hook_requests: Family<HookLabels, Counter>,
    pub hook_duration: Family<HookNameLabels, Histogram>,
    pub helm_operations: Family<HelmLabels, Counter>,
    pub selected_clusters: Gauge<i64, AtomicI64>,
    pub imported_clusters: Gauge<i64, AtomicI64>,
    pub fleet_ready_clusters: Family<ReasonLabels, Gauge<i64, AtomicI64>>,
    pub rollout_wave_clusters: Family<WaveLabels, Gauge<i64, AtomicI64>>,
    pub rollout_held_clusters: Family<ReasonLabels, Gauge<i64, AtomicI64>>,
    pub leader: Gauge<i64, AtomicI64>,
    /// Conflicts reported on CAPI Clusters (`crate::model::turtles` reasons).
    pub conflicts: Family<ReasonLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let reconciles = Family::<ControllerLabels, Counter>::default();
        registry.register(
            "caapf_controller_reconciliations",
            "Reconciliations, per controller",
            reconciles.clone(),
        );
        let reconcile_errors = Family::<ErrorLabels, Counter>::default();
        registry.register(
            "caapf_controller_reconciliation_errors",
            "Failed reconciliations, per controller and bounded error reason",
            reconcile_errors.clone(),
        );
        let reconcile_duration =
            Family::<ControllerLabels, Histogram>::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.5, 12))
            });
        registry.register(
            "caapf_controller_reconcile_duration_seconds",
            "Duration of reconciliations, per controller",
            reconcile_duration.clone(),
        );
        let hook_requests = Family::<HookLabels, Counter>::default();
        registry.register(
            "caapf_hook_requests",
            "Runtime SDK hook calls, per hook and response status",
            hook_requests.clone(),
        );
        let hook_duration = Family::<HookNameLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0005, 2.5, 12))
        });
        registry.register(
            "caapf_hook_duration_seconds",
            "Duration of Runtime SDK hook calls, per hook",
            hook_duration.clone(),
        );
        let helm_operations = Family::<HelmLabels, Counter>::default();
        registry.register(
            "caapf_helm_operations",
            "helm commands run, per operation and outcome",
            helm_operations.clone(),
        );
        let selected_clusters = Gauge::<i64, AtomicI64>::default();
        registry.register(
            "caapf_selected_clusters",
            "CAPI Clusters selected for import",
            selected_clusters.clone(),
        );
        let imported_clusters = Gauge::<i64, AtomicI64>::default();
        registry.register(
            "caapf_imported_clusters",
            "CAPI Clusters with a Fleet Cluster",
            imported_clusters.clone(),
        );
        let fleet_ready_clusters = Family::<ReasonLabels, Gauge<i64, AtomicI64>>::default();
        registry.register(
            "caapf_fleet_ready_clusters",
            "Imported and waiting CAPI Clusters by the reason of their FleetReady condition",
            fleet_ready_clusters.clone(),
        );
        let rollout_wave_clusters = Family::<WaveLabels, Gauge<i64, AtomicI64>>::default();
        registry.register(
            "caapf_rollout_wave_clusters",
            "Imported CAPI Clusters per rollout wave: all, held and ready",
            rollout_wave_clusters.clone(),
        );
        let rollout_held_clusters = Family::<ReasonLabels, Gauge<i64, AtomicI64>>::default();
        registry.register(
            "caapf_rollout_held_clusters",
            "Imported CAPI Clusters whose add-on rollout is held, by reason",
            rollout_held_clusters.clone(),
        );
        let leader = Gauge::<i64, AtomicI64>::default();
        registry.register(
            "caapf_leader",
            "1 while this replica holds the leader lease",
            leader.clone(),
        );
        let conflicts = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "caapf_import_conflicts",
            "Warning Events published about conflicts with another controller on CAPI Clusters, per reason (FinalizerRemoved, RancherFleetAgent); an Event whose publish failed is not counted",
            conflicts.clone(),
        );
        Self {
            conflicts,
            registry,
            reconciles,
            reconcile_errors,
            reconcile_duration,
            hook_requests,
            hook_duration,
            helm_operations,
            selected_clusters,
            imported_clusters,
            fleet_ready_clusters,
            rollout_wave_clusters,
            rollout_held_clusters,
            leader,
        }
    }

    /// Records one reconciliation of `controller`.
    pub fn reconciled(
        &self,
        controller: &'static str,
        took: Duration,
        error: Option<&crate::Error>,
    ) {
        let labels = ControllerLabels { controller };
        self.reconciles.get_or_create(&labels).inc();
        self.reconcile_duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
        if let Some(error) = error {
            self.reconcile_errors
                .get_or_create(&ErrorLabels {
                    controller,
                    error: error.metric_label(),
                })
                .inc();
        }
    }

    /// Records one hook call.
    pub fn hook_called(&self, hook: &'static str, status: &'static str, took: Duration) {
        self.hook_requests
            .get_or_create(&HookLabels { hook, status })
            .inc();
        self.hook_duration
            .get_or_create(&HookNameLabels { hook })
            .observe(took.as_secs_f64());
    }

    /// Records one helm command.
    pub fn helm_ran(&self, operation: &'static str, outcome: &'static str) {
        self.helm_operations
            .get_or_create(&HelmLabels { operation, outcome })
            .inc();
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_caapf_names_and_bounded_labels() {
        let metrics = Metrics::new();
        metrics.reconciled("cluster", Duration::from_millis(3), None);
        metrics.reconciled(
            "cluster",
            Duration::from_millis(3),
            Some(&crate::Error::InvalidConfig(
                "spec.cluster.selector: x".into(),
            )),
        );
        metrics.hook_called("BeforeClusterCreate", "Success", Duration::from_millis(1));
        metrics.helm_ran("install", "success");
        metrics.imported_clusters.set(3);
        let text = metrics.render();
        for line in [
            "caapf_controller_reconciliations_total{controller=\"cluster\"} 2",
            "caapf_controller_reconciliation_errors_total{controller=\"cluster\",error=\"invalid_config\"} 1",
            "caapf_controller_reconcile_duration_seconds_count{controller=\"cluster\"} 2",
            "caapf_hook_requests_total{hook=\"BeforeClusterCreate\",status=\"Success\"} 1",
            "caapf_helm_operations_total{operation=\"install\",outcome=\"success\"} 1",
            "caapf_imported_clusters 3",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
    }
}
