//! Add-ons through a Kubernetes upgrade: where a Cluster is, step by step, as Fleet sees it, and
//! when an upgrade step waits for Fleet (docs/lifecycle.md).
//!
//! Since cluster-api v1.12 a topology Cluster upgrades in chained steps (1.32 → 1.33 → 1.34 …)
//! and calls, in this order (`exp/topology/desiredstate/desired_state.go`
//! `computeControlPlaneVersion`, `lifecycle_hooks.go`; `internal/controllers/topology/cluster/
//! reconcile_state.go` `callAfterClusterUpgrade`): BeforeClusterUpgrade once (whole upgrade),
//! then per control-plane step BeforeControlPlaneUpgrade (from, to) and AfterControlPlaneUpgrade
//! (the version reached, the remaining `controlPlaneUpgrades`/`workersUpgrades`), around each
//! workers step BeforeWorkersUpgrade and AfterWorkersUpgrade, and AfterClusterUpgrade at the
//! end. v1.11 upgrades one step with BeforeClusterUpgrade, AfterControlPlaneUpgrade and
//! AfterClusterUpgrade (non-blocking there).
//!
//! Each of these hooks records the step on the Fleet Cluster ([`UpgradeStep`], the annotation
//! [`names::UPGRADE_STEP_ANNOTATION`], written by the hooks only). The import controller turns the
//! record into labels a `clusterSelector`/`targetCustomizations` can use — the control plane's
//! and the workers' minor and, before something moves, the minor it moves to — and into
//! `templateValues.KubernetesVersions` ([`versions`], [`VersionView`]). Outside an upgrade the
//! labels follow `spec.topology.version` once Cluster API has reached it
//! ([`ClusterView::topology_settled`]), so they never run ahead of the machines.
//!
//! With a gate on (`spec.runtimeExtension.upgradeSteps.waitForBundlesReady`, overridable per
//! Cluster), a hook answers "retry" until Fleet shows the step: the Fleet Cluster carries the
//! step's labels, Fleet had [`SETTLE`] to re-target its bundles after they were applied (Fleet
//! enqueues every bundle matching the old or the new labels on a Cluster change: rancher/fleet
//! v0.12–v0.16 `internal/cmd/controller/reconciler/bundle_controller.go` watches; it exposes no
//! observed generation), and every BundleDeployment of the cluster is ready for its current
//! deployment ([`gate_bundles`]). A timeout per step and a skip annotation let an operator go on.

use std::collections::BTreeMap;
use std::time::Duration;

use fleet_api_rs::fleet_cluster::Cluster as FleetCluster;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::jiff::Timestamp;
use kube::core::{Selector, SelectorExt};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::model::capi::ClusterView;
use crate::model::config::RuntimeExtensionSettings;
pub use crate::model::config::{
    DEFAULT_STEP_SETTLE as DEFAULT_SETTLE, DEFAULT_STEP_TIMEOUT as DEFAULT_TIMEOUT,
};
use crate::model::hook_plan::{HookOutcome, describe_bundles, not_ready_bundles};
use crate::model::validation::validate_label_selector;
use crate::names;

/// The `templateValues` key holding the versions (`${ .ClusterValues.KubernetesVersions… }`).
pub const TEMPLATE_VALUES_KEY: &str = "KubernetesVersions";

/// Retry interval while the Fleet Cluster does not show the step yet.
pub const RETRY_LABELS: i32 = 5;

/// Retry interval of a held step (Cluster API v1.12 does not call again before it: the hook
/// cache of `exp/topology/desiredstate/lifecycle_hooks.go`).
pub const RETRY_HOLD: i32 = 15;

/// The upgrade hooks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpgradeHook {
    BeforeClusterUpgrade,
    BeforeControlPlaneUpgrade,
    AfterControlPlaneUpgrade,
    BeforeWorkersUpgrade,
    AfterWorkersUpgrade,
    AfterClusterUpgrade,
}

impl UpgradeHook {
    pub fn name(self) -> &'static str {
        match self {
            UpgradeHook::BeforeClusterUpgrade => "BeforeClusterUpgrade",
            UpgradeHook::BeforeControlPlaneUpgrade => "BeforeControlPlaneUpgrade",
            UpgradeHook::AfterControlPlaneUpgrade => "AfterControlPlaneUpgrade",
            UpgradeHook::BeforeWorkersUpgrade => "BeforeWorkersUpgrade",
            UpgradeHook::AfterWorkersUpgrade => "AfterWorkersUpgrade",
            UpgradeHook::AfterClusterUpgrade => "AfterClusterUpgrade",
        }
    }
}

/// The versions an upgrade hook request carries (cluster-api v1.12
/// `api/runtime/hooks/v1alpha1/lifecyclehooks_types.go`; v1.11 has no step lists).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepRequest {
    /// `fromKubernetesVersion` (Before hooks).
    pub from: Option<String>,
    /// `toKubernetesVersion` (Before hooks).
    pub to: Option<String>,
    /// `kubernetesVersion` (After hooks).
    pub version: Option<String>,
    /// `controlPlaneUpgrades`: the control-plane steps still to come.
    pub control_plane_upgrades: Vec<String>,
    /// `workersUpgrades`: the workers steps still to come.
    pub workers_upgrades: Vec<String>,
    /// The Cluster's `spec.topology.version`.
    pub cluster_version: Option<String>,
}

/// The upgrade step the hooks last saw, as recorded on the Fleet Cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeStep {
    /// The hook that recorded it.
    pub hook: String,
    /// The version the control plane runs.
    pub control_plane: String,
    /// The lowest version the workers run.
    pub workers: String,
    /// What moves next, before it moves (`None` once nothing is left to move).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The version the whole upgrade goes to.
    pub cluster: String,
    /// When this step began (RFC 3339): its gate's timeout counts from here.
    pub since: String,
    /// How the gate of this step let go when not by Fleet's bundles: `timeout` or `skipped`
    /// (recorded once, with an Event).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub released: Option<String>,
    /// The gate's last look at Fleet's targeting: its digest ([`targeting`]) and when (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub looked: Option<(String, String)>,
}

impl UpgradeStep {
    /// From the annotation (`None`: absent or not ours to read).
    pub fn parse(annotation: Option<&str>) -> Option<Self> {
        serde_json::from_str(annotation?).ok()
    }

    /// The annotation's value.
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Whether the upgrade is still under way (AfterClusterUpgrade ends it).
    pub fn in_progress(&self) -> bool {
        self.hook != UpgradeHook::AfterClusterUpgrade.name()
    }

    /// Same versions (the same step of the same upgrade), whichever hook saw it.
    fn same_step(&self, other: &UpgradeStep) -> bool {
        (
            &self.control_plane,
            &self.workers,
            &self.target,
            &self.cluster,
        ) == (
            &other.control_plane,
            &other.workers,
            &other.target,
            &other.cluster,
        )
    }

    /// The step a one-line message names.
    pub fn describe(&self) -> String {
        match &self.target {
            Some(target) => format!(
                "{} (control plane {}, workers {}, next {target})",
                self.hook, self.control_plane, self.workers
            ),
            None => format!(
                "{} (control plane {}, workers {})",
                self.hook, self.control_plane, self.workers
            ),
        }
    }
}

/// The step after `hook` was called with `request`, from the `previous` record. `since` is
/// kept while the versions stay those of the previous step (a call repeated, or the same step
/// seen by the next hook). `None` when the request lacks the versions the hook must carry.
pub fn next_step(
    hook: UpgradeHook,
    request: &StepRequest,
    previous: Option<&UpgradeStep>,
    now: Timestamp,
) -> Option<UpgradeStep> {
    let previous = previous.filter(|p| p.in_progress() || hook == UpgradeHook::AfterClusterUpgrade);
    let from = request.from.clone().filter(|v| !v.is_empty());
    let to = request.to.clone().filter(|v| !v.is_empty());
    let version = request.version.clone().filter(|v| !v.is_empty());
    let cluster_of = |fallback: &str| {
        request
            .cluster_version
            .clone()
            .or_else(|| previous.map(|p| p.cluster.clone()))
            .unwrap_or_else(|| fallback.to_string())
    };
    let (control_plane, workers, target, cluster) = match hook {
        UpgradeHook::BeforeClusterUpgrade => {
            let (from, to) = (from?, to?);
            let first = request.control_plane_upgrades.first().cloned();
            (from.clone(), from, Some(first.unwrap_or(to.clone())), to)
        }
        UpgradeHook::BeforeControlPlaneUpgrade => {
            let (from, to) = (from?, to?);
            let workers = previous.map_or_else(|| from.clone(), |p| p.workers.clone());
            (from, workers, Some(to.clone()), cluster_of(&to))
        }
        UpgradeHook::AfterControlPlaneUpgrade => {
            let version = version?;
            let v1_12 =
                !(request.control_plane_upgrades.is_empty() && request.workers_upgrades.is_empty());
            let workers = previous.map_or_else(
                || version.clone(),
                // Workers that caught up unseen (no workers hooks registered): the last step
                // moved them to the control plane's version, which their plan no longer lists.
                |p| match &p.target {
                    Some(t)
                        if v1_12
                            && *t == p.control_plane
                            && !request.workers_upgrades.contains(t) =>
                    {
                        t.clone()
                    }
                    _ => p.workers.clone(),
                },
            );
            // Workers that must catch up first hold the control plane (cluster-api v1.12
            // `desired_state.go` `computeControlPlaneVersion`): they move next.
            let target = request
                .workers_upgrades
                .first()
                .filter(|w| **w == version)
                .or(request.control_plane_upgrades.first())
                .or(request.workers_upgrades.first())
                .cloned()
                // v1.11 (no step lists): the workers follow the control plane.
                .or_else(|| (workers != version).then(|| version.clone()));
            (version.clone(), workers, target, cluster_of(&version))
        }
        UpgradeHook::BeforeWorkersUpgrade => {
            let (from, to) = (from?, to?);
            let control_plane = previous.map_or_else(|| to.clone(), |p| p.control_plane.clone());
            (control_plane, from, Some(to.clone()), cluster_of(&to))
        }
        UpgradeHook::AfterWorkersUpgrade => {
            let version = version?;
            let control_plane =
                previous.map_or_else(|| version.clone(), |p| p.control_plane.clone());
            let target = request
                .control_plane_upgrades
                .first()
                .or(request.workers_upgrades.first())
                .cloned();
            (control_plane, version.clone(), target, cluster_of(&version))
        }
        UpgradeHook::AfterClusterUpgrade => {
            let version = version?;
            (version.clone(), version.clone(), None, version)
        }
    };
    let mut step = UpgradeStep {
        hook: hook.name().to_string(),
        control_plane,
        workers,
        target,
        cluster,
        since: now.to_string(),
        released: None,
        looked: None,
    };
    if let Some(previous) = previous.filter(|p| p.same_step(&step)) {
        step.since = previous.since.clone();
        step.released = previous.released.clone();
        step.looked = previous.looked.clone();
    }
    Some(step)
}

/// `1.33` of `v1.33.5` (`None` for anything else).
pub fn minor(version: &str) -> Option<String> {
    let mut parts = version.trim_start_matches('v').split(['.', '-', '+']);
    let major: u64 = parts.next()?.parse().ok()?;
    let minor: u64 = parts.next()?.parse().ok()?;
    Some(format!("{major}.{minor}"))
}

/// The versions a Fleet Cluster shows, as minors for labels plus the step for `templateValues`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VersionView {
    pub control_plane: Option<String>,
    pub workers: Option<String>,
    pub target: Option<String>,
    /// The hook of the step under way.
    pub step: Option<String>,
    /// The minor the whole upgrade under way goes to (its record's `cluster`).
    pub final_target: Option<String>,
}

/// What the Fleet Cluster of `cluster` shows: `spec.topology.version` once Cluster API reached
/// it; during an upgrade the step the hooks recorded; otherwise what it shows already (a version
/// change Cluster API has not started on moves nothing).
pub fn versions(
    cluster: &ClusterView,
    step: Option<&UpgradeStep>,
    live_labels: &BTreeMap<String, String>,
) -> VersionView {
    if cluster.topology_settled
        && let Some(version) = cluster.topology_version.as_deref().and_then(minor)
    {
        return VersionView {
            control_plane: Some(version.clone()),
            workers: Some(version),
            ..VersionView::default()
        };
    }
    if let Some(step) = step {
        return of_step(step);
    }
    let live = |key: &str| live_labels.get(key).cloned();
    VersionView {
        control_plane: live(names::CONTROL_PLANE_MINOR_LABEL),
        workers: live(names::WORKERS_MINOR_LABEL),
        target: live(names::UPGRADE_TARGET_MINOR_LABEL),
        ..VersionView::default()
    }
}

/// Whether a Cluster's version labels follow its machines: no `spec.topology`, so no upgrade
/// hooks (a plain KubeadmControlPlane or RKE2ControlPlane Cluster), and a control plane.
pub fn follows_machines(cluster: &ClusterView) -> bool {
    cluster.class.is_none()
        && cluster.topology_version.is_none()
        && cluster.control_plane_ref.is_some()
}

/// What the Fleet Cluster of a Cluster that [`follows_machines`] shows, from its control plane
/// object and MachineDeployments: the control plane's minor is the lower of its `spec.version`
/// and `status.version` (the lowest its machines run: cluster-api v1.11.11 KubeadmControlPlane
/// and rancher/cluster-api-provider-rke2 v0.25.0 RKE2ControlPlane, `v1.30.2+rke2r1`), so it
/// never runs ahead of an API server during a rollout; the workers' is the lowest
/// `spec.template.spec.version` of the MachineDeployments not being deleted (the control
/// plane's when there is none, as for a topology without workers). `None` without a version.
pub fn machine_versions(control_plane: &Value, deployments: &[Value]) -> Option<VersionView> {
    let text = |object: &Value, path: &str| object.pointer(path)?.as_str().map(str::to_string);
    let own = ["/spec/version", "/status/version"].map(|path| text(control_plane, path));
    let control_plane = lowest_minor(own.into_iter().flatten())?;
    let workers = deployments
        .iter()
        .filter(|md| md.pointer("/metadata/deletionTimestamp").is_none())
        .filter_map(|md| text(md, "/spec/template/spec/version"));
    Some(VersionView {
        workers: Some(lowest_minor(workers).unwrap_or_else(|| control_plane.clone())),
        control_plane: Some(control_plane),
        ..VersionView::default()
    })
}

/// The lowest minor of `versions` (by number: 1.9 < 1.10).
fn lowest_minor(versions: impl Iterator<Item = String>) -> Option<String> {
    let number = |minor: &String| -> Vec<u64> {
        minor
            .split('.')
            .map(|n| n.parse().unwrap_or_default())
            .collect()
    };
    versions.filter_map(|v| minor(&v)).min_by_key(number)
}

/// What the Fleet Cluster shows during `step`.
pub fn of_step(step: &UpgradeStep) -> VersionView {
    VersionView {
        control_plane: minor(&step.control_plane),
        workers: minor(&step.workers),
        target: step.target.as_deref().and_then(minor),
        step: step.in_progress().then(|| step.hook.clone()),
        final_target: step.in_progress().then(|| minor(&step.cluster)).flatten(),
    }
}

impl VersionView {
    /// The labels, by key (`None`: the label is absent).
    pub fn labels(&self) -> [(&'static str, Option<&String>); 3] {
        [
            (
                names::CONTROL_PLANE_MINOR_LABEL,
                self.control_plane.as_ref(),
            ),
            (names::WORKERS_MINOR_LABEL, self.workers.as_ref()),
            (names::UPGRADE_TARGET_MINOR_LABEL, self.target.as_ref()),
        ]
    }

    /// Whether `labels` (a live Fleet Cluster's) show these versions.
    pub fn shown_by(&self, labels: &BTreeMap<String, String>) -> bool {
        self.labels()
            .iter()
            .all(|(key, value)| labels.get(*key) == *value)
    }

    /// Sets these labels in `labels` (and removes those that are absent here).
    pub fn put_labels(&self, labels: &mut BTreeMap<String, String>) {
        for (key, value) in self.labels() {
            match value {
                Some(value) => labels.insert(key.to_string(), value.clone()),
                None => labels.remove(key),
            };
        }
    }

    /// `templateValues.KubernetesVersions`: every key always present (`""` when unknown), since a
    /// template naming a missing key fails the bundle for every cluster (rancher/fleet v0.16.1
    /// `internal/cmd/controller/target/` renders with `missingkey=error`).
    pub fn template_value(&self) -> Value {
        let text = |value: &Option<String>| value.clone().unwrap_or_default();
        json!({
            "controlPlaneMinor": text(&self.control_plane),
            "workersMinor": text(&self.workers),
            "targetMinor": text(&self.target),
            "step": text(&self.step),
            "finalTargetMinor": text(&self.final_target),
        })
    }
}

/// Puts what the Fleet Cluster of `cluster` shows (see [`versions`], or `machines`:
/// [`machine_versions`]) on the `desired` Fleet Cluster: the version labels and
/// `templateValues.KubernetesVersions` (when it has `templateValues`). `live` is the Fleet
/// Cluster as it is: its step record and its labels.
pub fn show(
    desired: &mut FleetCluster,
    cluster: &ClusterView,
    live: Option<&FleetCluster>,
    machines: Option<&VersionView>,
) {
    let live_meta = live.map(|fleet| &fleet.metadata);
    let step = UpgradeStep::parse(
        live_meta
            .and_then(|meta| meta.annotations.as_ref())
            .and_then(|annotations| annotations.get(names::UPGRADE_STEP_ANNOTATION))
            .map(String::as_str),
    );
    let empty = BTreeMap::new();
    let live_labels = live_meta
        .and_then(|meta| meta.labels.as_ref())
        .unwrap_or(&empty);
    let view = machines
        .cloned()
        .unwrap_or_else(|| versions(cluster, step.as_ref(), live_labels));
    let mut labels = desired.metadata.labels.take().unwrap_or_default();
    view.put_labels(&mut labels);
    desired.metadata.labels = Some(labels).filter(|labels| !labels.is_empty());
    if let Some(values) = desired.spec.template_values.as_mut() {
        values.insert(TEMPLATE_VALUES_KEY.to_string(), view.template_value());
    }
}

/// How one Cluster's steps are gated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GateSettings {
    pub wait_for_bundles: bool,
    /// Only `beforeClusterUpgrade.waitForBundlesReady`: BeforeClusterUpgrade waits for the
    /// bundles as they are (no step shown first), with the same timeout and skip.
    pub as_they_are: bool,
    pub timeout: Duration,
    pub settle: Duration,
    /// The bundles waited for (`None`: every bundle of the Cluster).
    pub bundles: Option<Selector>,
    /// Problems with the Cluster's annotations (ignored; the defaults apply), for messages.
    pub problems: Vec<String>,
}

impl GateSettings {
    /// Whether `hook` waits for anything.
    pub fn gated(&self) -> bool {
        self.wait_for_bundles || self.as_they_are
    }

    /// The BundleDeployments the gate waits for (Fleet copies a Bundle's labels to them).
    pub fn select(&self, deployments: Vec<Value>) -> Vec<Value> {
        let Some(selector) = &self.bundles else {
            return deployments;
        };
        let empty = serde_json::Map::new();
        deployments
            .into_iter()
            .filter(|bd| {
                let labels = bd["metadata"]["labels"].as_object().unwrap_or(&empty);
                let labels: BTreeMap<String, String> = labels
                    .iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect();
                selector.matches(&labels)
            })
            .collect()
    }
}

/// The gate of a Cluster at `hook`: the configuration's, overridden by the Cluster's
/// annotations (`wait-for-bundles: "false"` turns off both gates, `"true"` the step gate).
/// `told`: Fleet Clusters are updated (`patchResource`), so a step can be shown.
pub fn gate_settings(
    config: &RuntimeExtensionSettings,
    hook: UpgradeHook,
    told: bool,
    annotations: &BTreeMap<String, String>,
) -> GateSettings {
    let mut settings = GateSettings {
        wait_for_bundles: config.step_wait_for_bundles_ready,
        as_they_are: hook == UpgradeHook::BeforeClusterUpgrade && config.wait_for_bundles_ready,
        timeout: config.step_timeout,
        settle: config.step_settle,
        bundles: None,
        problems: Vec::new(),
    };
    if let Some(value) = annotations.get(names::WAIT_FOR_BUNDLES_ANNOTATION) {
        match value.as_str() {
            "true" => settings.wait_for_bundles = true,
            "false" => (settings.wait_for_bundles, settings.as_they_are) = (false, false),
            other => settings.problems.push(format!(
                "annotation {}: {other:?} is not true or false",
                names::WAIT_FOR_BUNDLES_ANNOTATION
            )),
        }
    }
    settings.wait_for_bundles &= told;
    settings.as_they_are &= !settings.wait_for_bundles;
    if let Some(value) = annotations.get(names::UPGRADE_GATE_TIMEOUT_ANNOTATION) {
        match crate::api::duration::parse_duration(value) {
            Ok(timeout) => settings.timeout = timeout,
            Err(err) => settings.problems.push(format!(
                "annotation {}: {err}",
                names::UPGRADE_GATE_TIMEOUT_ANNOTATION
            )),
        }
    }
    let key = names::UPGRADE_GATE_BUNDLES_ANNOTATION;
    let selector = match annotations.get(key) {
        Some(value) => match_labels(value)
            .map_err(|err| settings.problems.push(format!("annotation {key}: {err}"))),
        None => Ok(config.step_bundle_selector.clone()),
    };
    // An invalid selector waits for every bundle rather than none.
    settings.bundles = selector
        .ok()
        .flatten()
        .and_then(|selector| Selector::try_from(selector).ok())
        .filter(|selector| !selector.selects_all());
    settings
}

/// `key=value[,key=value]` as a label selector (`None`: empty, every bundle).
fn match_labels(value: &str) -> Result<Option<LabelSelector>, String> {
    let mut labels = BTreeMap::new();
    for pair in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(format!("{pair:?} is not key=value"));
        };
        labels.insert(key.trim().to_string(), value.trim().to_string());
    }
    let selector = LabelSelector {
        match_labels: Some(labels),
        ..Default::default()
    };
    let mut errors = Vec::new();
    validate_label_selector(&selector, "", &mut errors);
    match errors.first() {
        Some(error) => Err(error.message.clone()),
        None => {
            Ok(Some(selector).filter(|s| s.match_labels.as_ref().is_some_and(|l| !l.is_empty())))
        }
    }
}

/// A gate's answer, and how it let go when not by Fleet (to record once, with an Event).
#[derive(Clone, Debug, PartialEq)]
pub struct GateAnswer {
    pub outcome: HookOutcome,
    pub released: Option<&'static str>,
}

impl GateAnswer {
    fn plain(outcome: HookOutcome) -> Self {
        GateAnswer {
            outcome,
            released: None,
        }
    }
}

/// The gate before Fleet's bundles are looked at: `Err` is the answer (proceed, or hold until
/// the Fleet Cluster shows the step and Fleet had time to re-target); `Ok` means the bundles
/// decide ([`gate_bundles`]). `applied_at` is when the import controller last applied the Fleet
/// Cluster (its `managedFields` entry).
pub fn gate_before_bundles(
    step: &UpgradeStep,
    settings: &GateSettings,
    skip: Option<&str>,
    shown: bool,
    applied_at: Option<Timestamp>,
    now: Timestamp,
) -> Result<(), GateAnswer> {
    let what = step.describe();
    let notes = if settings.problems.is_empty() {
        String::new()
    } else {
        format!(" ({})", settings.problems.join("; "))
    };
    if !settings.gated() {
        return Err(GateAnswer::plain(HookOutcome::success(format!(
            "Fleet is told of {what}; not waiting for its bundles{notes}"
        ))));
    }
    // Its step is AfterWorkersUpgrade's, and while it holds Cluster API v1.12 refuses any
    // version change (`internal/webhooks/cluster.go` `validateTopologyVersionUpdate`).
    if !step.in_progress() {
        return Err(GateAnswer::plain(HookOutcome::success(format!(
            "Fleet is told the upgrade ended at {}; AfterClusterUpgrade is not gated",
            step.control_plane
        ))));
    }
    if let Some(how) = &step.released {
        return Err(GateAnswer::plain(HookOutcome::success(format!(
            "the gate of {what} was released ({how})"
        ))));
    }
    let step_version = step.target.as_deref().unwrap_or(&step.control_plane);
    if let Some(skip) = skip.map(str::trim)
        && (skip == "all" || skip == step_version)
    {
        return Err(GateAnswer {
            outcome: HookOutcome::success(format!(
                "the gate of {what} is skipped by annotation {}",
                names::SKIP_UPGRADE_GATE_ANNOTATION
            )),
            released: Some("skipped"),
        });
    }
    let since = step.since.parse::<Timestamp>().unwrap_or(now);
    // A start further ahead than the timeout is no clock skew but a broken record: waiting for
    // it would hold the step for ever.
    if elapsed(since, now) >= settings.timeout || elapsed(now, since) > settings.timeout {
        return Err(GateAnswer {
            outcome: HookOutcome::success(format!(
                "the gate of {what} timed out after {:?}; going on without Fleet's bundles",
                settings.timeout
            )),
            released: Some("timeout"),
        });
    }
    if !shown {
        return Err(GateAnswer::plain(HookOutcome::retry(
            RETRY_LABELS,
            format!("waiting for the Fleet Cluster to show {what}{notes}"),
        )));
    }
    if settings.as_they_are {
        return Ok(());
    }
    let settled_at = applied_at.unwrap_or(since).max(since);
    let waited = elapsed(settled_at, now);
    if waited < settings.settle {
        let left = (settings.settle - waited).as_secs().max(1);
        return Err(GateAnswer::plain(HookOutcome::retry(
            i32::try_from(left).unwrap_or(RETRY_LABELS),
            format!("giving Fleet {left}s to re-target its bundles for {what}"),
        )));
    }
    Ok(())
}

/// The time from `since` to `now`, zero when `since` is in the future (a clock ahead of ours: the
/// API server's for `managedFields`, another replica's for a record): skew never ends a wait early.
fn elapsed(since: Timestamp, now: Timestamp) -> Duration {
    Duration::try_from(now.duration_since(since)).unwrap_or_default()
}

/// What Fleet targets on the Cluster: a digest of its BundleDeployments and their staged
/// deployments (Fleet stages a new deployment ID whenever a re-targeting changes a bundle's
/// options: rancher/fleet v0.12–v0.16 `internal/cmd/controller/target/`).
pub fn targeting(deployments: &[Value]) -> String {
    let mut pairs: Vec<String> = deployments
        .iter()
        .map(|bd| {
            let spec = &bd["spec"];
            let staged = spec["stagedDeploymentID"].as_str();
            let id = staged.or(spec["deploymentID"].as_str()).unwrap_or_default();
            format!(
                "{}={id}",
                bd["metadata"]["name"].as_str().unwrap_or_default()
            )
        })
        .collect();
    pairs.sort();
    crate::model::diff::sha256_hex(pairs.join("\n").as_bytes())[..16].to_string()
}

/// Positive evidence that Fleet re-targeted for the step (it reports no observed generation):
/// the same [`targeting`] at two looks `settle` apart, the first after the Fleet Cluster was
/// applied. Records the look in `step.looked`; `Err` holds until the next look.
pub fn retargeted(
    step: &mut UpgradeStep,
    deployments: &[Value],
    settle: Duration,
    applied_at: Option<Timestamp>,
    now: Timestamp,
) -> Result<(), HookOutcome> {
    let digest = targeting(deployments);
    let looked_at = step
        .looked
        .as_ref()
        .filter(|(seen, _)| *seen == digest)
        .and_then(|(_, at)| at.parse::<Timestamp>().ok())
        .filter(|at| applied_at.is_none_or(|applied| *at >= applied));
    let Some(looked_at) = looked_at else {
        step.looked = Some((digest, now.to_string()));
        return Err(HookOutcome::retry(
            i32::try_from(settle.as_secs().max(1)).unwrap_or(RETRY_LABELS),
            format!(
                "giving Fleet {}s to finish re-targeting its bundles for {} (looking again: its {} BundleDeployments changed since the last look)",
                settle.as_secs().max(1),
                step.describe(),
                deployments.len()
            ),
        ));
    };
    let waited = elapsed(looked_at, now);
    if waited < settle {
        let left = (settle - waited).as_secs().max(1);
        return Err(HookOutcome::retry(
            i32::try_from(left).unwrap_or(RETRY_LABELS),
            format!(
                "giving Fleet {left}s to re-target its bundles for {}",
                step.describe()
            ),
        ));
    }
    Ok(())
}

/// The gate from the live BundleDeployments of the Cluster: proceed when every one is ready for
/// its current deployment (Fleet's rule, [`crate::model::hook_plan::bundle_state`]), otherwise
/// hold naming those that are not.
pub fn gate_bundles(step: &UpgradeStep, fleet_cluster: &str, deployments: &[Value]) -> HookOutcome {
    let not_ready = not_ready_bundles(deployments);
    let what = step.describe();
    if not_ready.is_empty() {
        return HookOutcome::success(format!(
            "all {} Fleet bundles of Fleet Cluster {fleet_cluster} are ready for {what}",
            deployments.len()
        ));
    }
    HookOutcome::retry(
        RETRY_HOLD,
        format!(
            "holding {what} until the Fleet bundles of Fleet Cluster {fleet_cluster} are ready: {}",
            describe_bundles(&not_ready)
        ),
    )
}

#[cfg(test)]
#[path = "upgrade_steps_tests.rs"]
mod tests;
