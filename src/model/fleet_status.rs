//! `FleetAddonConfig` status for the Fleet installation (pure): conditions with stable
//! transition times and the decision whether a status write is needed.
//!
//! Condition types are CAAPF's (`RepoAdd`, `RepoUpdate`, `Installed`, `FlagsUpdate`, `Ready`)
//! plus `ConfigValid`. A True condition has `reason == type`, as in CAAPF; a False one has a
//! reason naming the cause. `lastTransitionTime` changes only when `status` changes.
//!
//! One reconcile's findings are collected in a [`Report`]: the steps it ran ([`Step`]), the
//! conditions they set, the first failure; [`Report::finish`] decides `Ready` from them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::Error;
use crate::api::FleetAddonConfigStatus;
use crate::model::config::EffectiveConfig;
use crate::model::fleet_values;
use crate::model::plan::{ObjectId, Write};
use crate::names;

/// The chart repository could be fetched (http(s): its index; OCI: the registry answered).
pub const REPO_ADD: &str = "RepoAdd";
/// The target chart versions were resolved from the freshly fetched repository.
pub const REPO_UPDATE: &str = "RepoUpdate";
/// The Fleet releases are installed at the target version with the desired values.
pub const INSTALLED: &str = "Installed";
/// The feature gates reached Fleet (its release values, or the values ConfigMap).
pub const FLAGS_UPDATE: &str = "FlagsUpdate";
/// The spec has no problems.
pub const CONFIG_VALID: &str = "ConfigValid";
/// Everything this controller is asked to do is done.
pub const READY: &str = "Ready";
/// Present (True) only while `spec.cluster` has problems: Cluster selection is frozen.
pub const SELECTION_FROZEN: &str = "SelectionFrozen";

/// Every condition type this controller writes (and so owns, under server-side apply).
pub const OWNED_TYPES: [&str; 7] = [
    CONFIG_VALID,
    SELECTION_FROZEN,
    REPO_ADD,
    REPO_UPDATE,
    INSTALLED,
    FLAGS_UPDATE,
    READY,
];

/// The `SelectionFrozen` condition for the problems under `spec.cluster` (their messages):
/// True while there are any, absent otherwise. While frozen, no Cluster is imported, updated or
/// released, every Fleet Cluster is kept, deletions still complete, and `status.clusters`
/// counts what exists.
pub fn selection_frozen(cluster_problems: &[String]) -> Option<ConditionSpec> {
    (!cluster_problems.is_empty()).then(|| {
        ConditionSpec::ok(
            SELECTION_FROZEN,
            format!(
                "Cluster selection is frozen until spec.cluster is fixed ({}): no Cluster is imported, updated or released, existing Fleet Clusters are kept, deletions still complete",
                cluster_problems.join("; ")
            ),
        )
    })
}

/// A step of the Fleet reconcile that can fail; its name appears in `Ready`'s reason
/// (`<Step>Failed`) and message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    ServerConfig,
    FeatureGates,
    Helm,
    RepoAdd,
    RepoUpdate,
    Install,
    FleetControllerConfig,
}

impl Step {
    pub fn name(self) -> &'static str {
        match self {
            Step::ServerConfig => "ServerConfig",
            Step::FeatureGates => "FeatureGates",
            Step::Helm => "Helm",
            Step::RepoAdd => "RepoAdd",
            Step::RepoUpdate => "RepoUpdate",
            Step::Install => "Install",
            Step::FleetControllerConfig => "FleetControllerConfig",
        }
    }

    /// The reason of a False condition this step's failure sets.
    pub fn reason(self) -> String {
        format!("{}Failed", self.name())
    }
}

/// The conditions the installation steps report on (kept as they were when a step before them
/// stops the reconcile).
pub const INSTALL_TYPES: [&str; 4] = [REPO_ADD, REPO_UPDATE, INSTALLED, FLAGS_UPDATE];

/// What one reconcile found and did. Every owned condition starts as "remove" (not applicable);
/// steps set or keep theirs.
pub struct Report {
    pub updates: BTreeMap<&'static str, ConditionUpdate>,
    pub version: VersionUpdate,
    pub failure: Option<(Step, Error)>,
    /// The spec has problems (reported in `ConfigValid`; not retried until it changes).
    pub invalid: bool,
}

impl Default for Report {
    fn default() -> Self {
        Self::new()
    }
}

impl Report {
    pub fn new() -> Self {
        Self {
            updates: OWNED_TYPES
                .iter()
                .map(|t| (*t, ConditionUpdate::Remove))
                .collect(),
            version: VersionUpdate::Remove,
            failure: None,
            invalid: false,
        }
    }

    pub fn set(&mut self, condition: ConditionSpec) {
        self.updates
            .insert(condition.type_, ConditionUpdate::Set(condition));
    }

    pub fn keep(&mut self, types: &[&'static str]) {
        for t in types {
            self.updates.insert(t, ConditionUpdate::Keep);
        }
    }

    /// Records a failed step: its condition (if it has one) and the failure for `Ready`.
    pub fn fail(&mut self, step: Step, condition: Option<&'static str>, error: Error) {
        if let Some(type_) = condition {
            self.set(ConditionSpec::failed(
                type_,
                &step.reason(),
                error.to_string(),
            ));
        }
        self.failure = Some((step, error));
    }

    /// The installation's conditions and the version stay as they were unless a later step
    /// sets them (a step before the installation failed, or the installation starts and has
    /// not got far yet).
    pub fn keep_install_state(&mut self) {
        self.keep(&INSTALL_TYPES);
        self.version = VersionUpdate::Keep;
    }

    /// `ConfigValid` and `SelectionFrozen` from the spec's problems. Returns whether the
    /// installation sections (`spec.install`, `spec.config`) have problems: then nothing may
    /// act on them and their conditions keep the last good state.
    pub fn check_spec(&mut self, config: &EffectiveConfig) -> bool {
        if config.problems.is_empty() {
            self.set(ConditionSpec::ok(CONFIG_VALID, "The spec is valid"));
        } else {
            let problems: Vec<String> = config.problems.iter().map(ToString::to_string).collect();
            self.set(ConditionSpec::failed(
                CONFIG_VALID,
                "Invalid",
                problems.join("; "),
            ));
            self.invalid = true;
        }
        let cluster_problems: Vec<String> = config
            .problems_under("spec.cluster")
            .map(ToString::to_string)
            .collect();
        if let Some(frozen) = selection_frozen(&cluster_problems) {
            self.set(frozen);
        }
        let blocked = config.problems_under("spec.install").next().is_some()
            || config.problems_under("spec.config").next().is_some();
        if blocked {
            self.keep_install_state();
        }
        blocked
    }

    /// Sets `Ready` from what the steps reported; call once, last.
    pub fn finish(&mut self, config: &EffectiveConfig) {
        let ready = if let Some((step, err)) = &self.failure {
            ConditionSpec::failed(READY, &step.reason(), format!("{}: {err}", step.name()))
        } else if self.invalid {
            ConditionSpec::failed(
                READY,
                "ConfigInvalid",
                "The spec has problems, see the ConfigValid condition",
            )
        } else if let VersionUpdate::Set(version) = &self.version {
            ConditionSpec::ok(
                READY,
                format!("Fleet {version} is installed and configured"),
            )
        } else if config.fleet.server.is_some() || config.fleet.feature_gates_config_map.is_some() {
            ConditionSpec::ok(READY, "Fleet settings are in place")
        } else {
            ConditionSpec::ok(
                READY,
                "Nothing to do: spec.install and spec.config.server are not set",
            )
        };
        self.set(ready);
    }
}

/// `namespace/name` of an object reference (empty parts when unset), for messages.
fn reference_name(reference: &ObjectReference) -> String {
    format!(
        "{}/{}",
        reference.namespace.as_deref().unwrap_or_default(),
        reference.name.as_deref().unwrap_or_default()
    )
}

/// `FlagsUpdate` after the feature gates were written to the values ConfigMap `reference`.
pub fn gates_written_to_config_map(
    reference: &ObjectReference,
    config: &EffectiveConfig,
) -> ConditionSpec {
    ConditionSpec::ok(
        FLAGS_UPDATE,
        format!(
            "Feature gates written to ConfigMap {} key {}: {}",
            reference_name(reference),
            names::FEATURE_GATES_VALUES_KEY,
            fleet_values::gate_summary(&config.fleet)
        ),
    )
}

/// `Installed` when `spec.install` is set but ignored because the feature gates go to the values
/// ConfigMap `reference` (whoever reads it manages Fleet).
pub fn install_skipped(reference: &ObjectReference) -> ConditionSpec {
    ConditionSpec::failed(
        INSTALLED,
        "Skipped",
        format!(
            "spec.install is ignored while spec.config.featureGates.configMap.ref is set ({}): Fleet is managed by whoever reads that ConfigMap",
            reference_name(reference)
        ),
    )
}

/// A condition as the controller decides it (without times and generation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConditionSpec {
    pub type_: &'static str,
    pub status: bool,
    pub reason: String,
    pub message: String,
}

impl ConditionSpec {
    /// A True condition (`reason == type`, as CAAPF).
    pub fn ok(type_: &'static str, message: impl Into<String>) -> Self {
        Self {
            type_,
            status: true,
            reason: type_.to_string(),
            message: message.into(),
        }
    }

    /// A False condition with a reason.
    pub fn failed(type_: &'static str, reason: &str, message: impl Into<String>) -> Self {
        Self {
            type_,
            status: false,
            reason: reason.to_string(),
            message: message.into(),
        }
    }
}

/// What one reconcile decided about each owned condition type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConditionUpdate {
    /// Set it.
    Set(ConditionSpec),
    /// The step was not reached: keep the previous condition as it is (its
    /// `observedGeneration` then honestly says it was not evaluated for this generation).
    Keep,
    /// Not applicable any more (e.g. `spec.install` was removed): remove it.
    Remove,
}

/// The installed version as one reconcile saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VersionUpdate {
    Set(String),
    /// Not known this time (helm could not be asked): keep the previous value.
    Keep,
    Remove,
}

/// The status fields this controller owns, ready to apply.
#[derive(Clone, Debug, PartialEq)]
pub struct OwnedStatus {
    pub installed_version: Option<String>,
    /// In [`OWNED_TYPES`] order.
    pub conditions: Vec<Condition>,
}

/// Builds the owned status from the previous status and this reconcile's decisions. Types
/// missing from `updates` are removed.
pub fn next_status(
    previous: Option<&FleetAddonConfigStatus>,
    updates: &BTreeMap<&'static str, ConditionUpdate>,
    version: &VersionUpdate,
    generation: Option<i64>,
    now: &Time,
) -> OwnedStatus {
    let previous_conditions: &[Condition] = previous.map_or(&[], |s| s.conditions.as_slice());
    let find = |type_: &str| previous_conditions.iter().find(|c| c.type_ == type_);
    let mut conditions = Vec::new();
    for type_ in OWNED_TYPES {
        match updates.get(type_).unwrap_or(&ConditionUpdate::Remove) {
            ConditionUpdate::Remove => {}
            ConditionUpdate::Keep => {
                if let Some(old) = find(type_) {
                    conditions.push(old.clone());
                }
            }
            ConditionUpdate::Set(spec) => {
                let status = if spec.status { "True" } else { "False" };
                let last_transition_time = match find(type_) {
                    Some(old) if old.status == status => old.last_transition_time.clone(),
                    _ => now.clone(),
                };
                conditions.push(Condition {
                    type_: type_.to_string(),
                    status: status.to_string(),
                    reason: spec.reason.clone(),
                    message: spec.message.clone(),
                    observed_generation: generation,
                    last_transition_time,
                });
            }
        }
    }
    let installed_version = match version {
        VersionUpdate::Set(v) => Some(v.clone()),
        VersionUpdate::Keep => previous.and_then(|s| s.installed_version.clone()),
        VersionUpdate::Remove => None,
    };
    OwnedStatus {
        installed_version,
        conditions,
    }
}

/// Whether the object's status differs from `desired` in the fields this controller owns (so a
/// write is needed). Conditions of other types (other controllers') are ignored.
pub fn needs_write(current: Option<&FleetAddonConfigStatus>, desired: &OwnedStatus) -> bool {
    let current_version = current.and_then(|s| s.installed_version.clone());
    if current_version != desired.installed_version {
        return true;
    }
    let mut owned: Vec<&Condition> = current
        .map(|s| s.conditions.iter().collect())
        .unwrap_or_default();
    owned.retain(|c| OWNED_TYPES.contains(&c.type_.as_str()));
    if owned.len() != desired.conditions.len() {
        return true;
    }
    desired.conditions.iter().any(|want| !owned.contains(&want))
}

/// The `status` body of the server-side apply (only the fields this controller owns).
pub fn apply_body(name: &str, desired: &OwnedStatus) -> serde_json::Value {
    let mut status = serde_json::Map::new();
    if let Some(version) = &desired.installed_version {
        status.insert(
            "installedVersion".to_string(),
            serde_json::Value::String(version.clone()),
        );
    }
    status.insert(
        "conditions".to_string(),
        serde_json::to_value(&desired.conditions).unwrap_or_default(),
    );
    serde_json::json!({
        "apiVersion": "addons.cluster.x-k8s.io/v1alpha1",
        "kind": "FleetAddonConfig",
        "metadata": {"name": name},
        "status": status,
    })
}

/// The status apply of `status.clusters` and `status.rollout` by the import controller's field
/// manager (`None`: `live` has them already).
pub fn clusters_write(
    live: &crate::api::FleetAddonConfig,
    counts: &crate::api::ClusterCounts,
    rollout: Option<&crate::api::RolloutStatus>,
) -> Option<Write> {
    let status = live.status.as_ref();
    if status.and_then(|s| s.clusters.as_ref()) == Some(counts)
        && status.and_then(|s| s.rollout.as_ref()) == rollout
    {
        return None;
    }
    let mut body = serde_json::json!({
        "apiVersion": "addons.cluster.x-k8s.io/v1alpha1",
        "kind": "FleetAddonConfig",
        "metadata": {"name": live.metadata.name},
        "status": {"clusters": counts},
    });
    if let Some(rollout) = rollout {
        body["status"]["rollout"] = serde_json::to_value(rollout).unwrap_or_default();
    }
    Some(Write::ApplyStatus {
        object: ObjectId::observed(live),
        body,
        manager: names::IMPORT_STATUS_FIELD_MANAGER,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn selection_frozen_only_with_cluster_problems() {
        assert_eq!(selection_frozen(&[]), None);
        let frozen = selection_frozen(&["spec.cluster.namespaceRegexes[0]: bad".to_string()])
            .expect("frozen");
        assert!(frozen.status);
        assert_eq!(frozen.reason, SELECTION_FROZEN);
        assert!(
            frozen
                .message
                .contains("spec.cluster.namespaceRegexes[0]: bad"),
            "{}",
            frozen.message
        );
    }

    use super::*;

    fn time(s: &str) -> Time {
        Time(s.parse().expect("test timestamp"))
    }

    fn updates(
        items: &[(&'static str, ConditionUpdate)],
    ) -> BTreeMap<&'static str, ConditionUpdate> {
        items.iter().cloned().collect()
    }

    #[test]
    fn transition_time_changes_only_with_status() {
        let t0 = time("2026-01-01T00:00:00Z");
        let t1 = time("2026-01-01T01:00:00Z");
        let first = next_status(
            None,
            &updates(&[(READY, ConditionUpdate::Set(ConditionSpec::ok(READY, "a")))]),
            &VersionUpdate::Set("0.1.0".into()),
            Some(1),
            &t0,
        );
        assert_eq!(first.conditions[0].last_transition_time, t0);
        let previous = FleetAddonConfigStatus {
            installed_version: first.installed_version.clone(),
            conditions: first.conditions.clone(),
            clusters: None,
            rollout: None,
        };
        // Same status, new message and generation: time kept.
        let second = next_status(
            Some(&previous),
            &updates(&[(READY, ConditionUpdate::Set(ConditionSpec::ok(READY, "b")))]),
            &VersionUpdate::Keep,
            Some(2),
            &t1,
        );
        assert_eq!(second.conditions[0].last_transition_time, t0);
        assert_eq!(second.conditions[0].message, "b");
        assert_eq!(second.conditions[0].observed_generation, Some(2));
        assert_eq!(second.installed_version.as_deref(), Some("0.1.0"));
        // Status flips: time moves.
        let third = next_status(
            Some(&previous),
            &updates(&[(
                READY,
                ConditionUpdate::Set(ConditionSpec::failed(READY, "HelmFailed", "x")),
            )]),
            &VersionUpdate::Remove,
            Some(2),
            &t1,
        );
        assert_eq!(third.conditions[0].last_transition_time, t1);
        assert_eq!(third.conditions[0].status, "False");
        assert_eq!(third.conditions[0].reason, "HelmFailed");
        assert_eq!(third.installed_version, None);
    }

    #[test]
    fn keep_remove_and_order() {
        let t0 = time("2026-01-01T00:00:00Z");
        let old = |type_: &str| Condition {
            type_: type_.to_string(),
            status: "True".into(),
            reason: type_.to_string(),
            message: "old".into(),
            observed_generation: Some(1),
            last_transition_time: t0.clone(),
        };
        let previous = FleetAddonConfigStatus {
            installed_version: Some("0.1.0".into()),
            conditions: vec![old(INSTALLED), old(REPO_ADD), old("ClustersImported")],
            clusters: None,
            rollout: None,
        };
        let out = next_status(
            Some(&previous),
            &updates(&[
                (READY, ConditionUpdate::Set(ConditionSpec::ok(READY, "r"))),
                (INSTALLED, ConditionUpdate::Keep),
                (REPO_ADD, ConditionUpdate::Remove),
                (
                    CONFIG_VALID,
                    ConditionUpdate::Set(ConditionSpec::ok(CONFIG_VALID, "ok")),
                ),
                // Keep of a condition that never existed: nothing.
                (FLAGS_UPDATE, ConditionUpdate::Keep),
            ]),
            &VersionUpdate::Keep,
            Some(3),
            &t0,
        );
        let types: Vec<&str> = out.conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, [CONFIG_VALID, INSTALLED, READY]);
        assert_eq!(out.conditions[1], old(INSTALLED), "kept verbatim");
    }

    #[test]
    fn writes_only_when_owned_fields_differ() {
        let t0 = time("2026-01-01T00:00:00Z");
        let desired = next_status(
            None,
            &updates(&[(READY, ConditionUpdate::Set(ConditionSpec::ok(READY, "r")))]),
            &VersionUpdate::Set("0.1.0".into()),
            Some(1),
            &t0,
        );
        assert!(needs_write(None, &desired));
        let mut current = FleetAddonConfigStatus {
            installed_version: Some("0.1.0".into()),
            conditions: desired.conditions.clone(),
            clusters: None,
            rollout: None,
        };
        assert!(!needs_write(Some(&current), &desired));
        // Another controller's condition and counts do not matter.
        current.conditions.push(Condition {
            type_: "ClustersImported".into(),
            status: "True".into(),
            reason: "x".into(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: t0.clone(),
        });
        current.clusters = Some(Default::default());
        assert!(!needs_write(Some(&current), &desired));
        // A stale owned condition must be removed: write.
        let mut stale = current.clone();
        stale.conditions.push(Condition {
            type_: REPO_ADD.into(),
            ..current.conditions[0].clone()
        });
        assert!(needs_write(Some(&stale), &desired));
        // A different version: write.
        let mut other = current.clone();
        other.installed_version = None;
        assert!(needs_write(Some(&other), &desired));
    }

    #[test]
    fn apply_body_has_only_owned_fields() {
        let t0 = time("2026-01-01T00:00:00Z");
        let desired = next_status(
            None,
            &updates(&[(READY, ConditionUpdate::Set(ConditionSpec::ok(READY, "r")))]),
            &VersionUpdate::Remove,
            Some(4),
            &t0,
        );
        let body = apply_body("fleet-addon-config", &desired);
        assert_eq!(
            body,
            serde_json::json!({
                "apiVersion": "addons.cluster.x-k8s.io/v1alpha1",
                "kind": "FleetAddonConfig",
                "metadata": {"name": "fleet-addon-config"},
                "status": {"conditions": [{
                    "type": "Ready", "status": "True", "reason": "Ready", "message": "r",
                    "observedGeneration": 4, "lastTransitionTime": "2026-01-01T00:00:00Z",
                }]},
            })
        );
    }

    fn with_problems(paths: &[&str]) -> EffectiveConfig {
        let mut config = EffectiveConfig::resolve(None);
        config.problems = paths
            .iter()
            .map(|p| crate::model::validation::FieldError::new(*p, "bad"))
            .collect();
        config
    }

    fn set(report: &Report, type_: &str) -> Option<ConditionSpec> {
        match report.updates.get(type_) {
            Some(ConditionUpdate::Set(spec)) => Some(spec.clone()),
            _ => None,
        }
    }

    #[test]
    fn spec_problems_decide_config_valid_selection_frozen_and_blocking() {
        // (problem paths, ConfigValid status, frozen, blocked)
        for (paths, valid, frozen, blocked) in [
            (&[][..], true, false, false),
            (
                &["spec.cluster.namespaceRegexes[0]"][..],
                false,
                true,
                false,
            ),
            (&["spec.install.version"][..], false, false, true),
            (&["spec.config.server"][..], false, false, true),
            (
                &["spec.cluster.selector", "spec.install.version"][..],
                false,
                true,
                true,
            ),
        ] {
            let mut report = Report::new();
            assert_eq!(
                report.check_spec(&with_problems(paths)),
                blocked,
                "{paths:?}"
            );
            let config_valid = set(&report, CONFIG_VALID).expect("ConfigValid set");
            assert_eq!(config_valid.status, valid, "{paths:?}");
            assert_eq!(report.invalid, !valid, "{paths:?}");
            if !valid {
                assert_eq!(config_valid.reason, "Invalid");
                assert!(config_valid.message.contains(paths[0]), "{config_valid:?}");
            }
            assert_eq!(
                set(&report, SELECTION_FROZEN).is_some(),
                frozen,
                "{paths:?}"
            );
            for type_ in INSTALL_TYPES {
                let kept = report.updates.get(type_) == Some(&ConditionUpdate::Keep);
                assert_eq!(kept, blocked, "{paths:?} {type_}");
            }
            assert_eq!(report.version == VersionUpdate::Keep, blocked, "{paths:?}");
        }
    }

    #[test]
    fn ready_follows_the_first_failure_then_validity_then_what_was_done() {
        let plain = EffectiveConfig::resolve(None);
        let mut with_server = EffectiveConfig::resolve(None);
        with_server.fleet.server = Some(crate::model::config::ServerSource::InferLocal);
        let failure = || Some((Step::Install, Error::InvalidConfig("x".into())));
        // (failure, invalid, version, config, status, reason, message)
        for (failure, invalid, version, config, status, reason, message) in [
            (
                failure(),
                true,
                VersionUpdate::Keep,
                &plain,
                false,
                "InstallFailed",
                "Install: invalid FleetAddonConfig: x",
            ),
            (
                None,
                true,
                VersionUpdate::Set("1.0.0".into()),
                &plain,
                false,
                "ConfigInvalid",
                "The spec has problems, see the ConfigValid condition",
            ),
            (
                None,
                false,
                VersionUpdate::Set("1.0.0".into()),
                &plain,
                true,
                READY,
                "Fleet 1.0.0 is installed and configured",
            ),
            (
                None,
                false,
                VersionUpdate::Keep,
                &with_server,
                true,
                READY,
                "Fleet settings are in place",
            ),
            (
                None,
                false,
                VersionUpdate::Remove,
                &plain,
                true,
                READY,
                "Nothing to do: spec.install and spec.config.server are not set",
            ),
        ] {
            let mut report = Report::new();
            report.failure = failure;
            report.invalid = invalid;
            report.version = version;
            report.finish(config);
            let ready = set(&report, READY).expect("Ready set");
            assert_eq!(
                (ready.status, ready.reason.as_str(), ready.message.as_str()),
                (status, reason, message)
            );
        }
    }

    #[test]
    fn a_failed_step_sets_its_condition_and_keeps_the_rest() {
        let mut report = Report::new();
        report.keep_install_state();
        report.fail(
            Step::FeatureGates,
            Some(FLAGS_UPDATE),
            Error::InvalidConfig("x".into()),
        );
        let flags = set(&report, FLAGS_UPDATE).expect("FlagsUpdate set");
        assert!(!flags.status);
        assert_eq!(flags.reason, "FeatureGatesFailed");
        for type_ in [REPO_ADD, REPO_UPDATE, INSTALLED] {
            assert_eq!(report.updates.get(type_), Some(&ConditionUpdate::Keep));
        }
        // Conditions no step touched are removed.
        assert_eq!(report.updates.get(READY), Some(&ConditionUpdate::Remove));
        assert_eq!(
            report.failure.as_ref().map(|f| f.0),
            Some(Step::FeatureGates)
        );
    }

    #[test]
    fn config_map_messages_name_the_reference() {
        let reference = ObjectReference {
            namespace: Some("fleet-values".into()),
            name: Some("gates".into()),
            ..Default::default()
        };
        let config = EffectiveConfig::resolve(None);
        let written = gates_written_to_config_map(&reference, &config);
        assert_eq!(written.type_, FLAGS_UPDATE);
        assert!(
            written.message.starts_with(&format!(
                "Feature gates written to ConfigMap fleet-values/gates key {}: ",
                names::FEATURE_GATES_VALUES_KEY
            )),
            "{}",
            written.message
        );
        let skipped = install_skipped(&reference);
        assert_eq!((skipped.type_, skipped.status), (INSTALLED, false));
        assert_eq!(skipped.reason, "Skipped");
        assert!(
            skipped.message.contains("(fleet-values/gates)"),
            "{}",
            skipped.message
        );
    }

    /// `status.clusters` is applied only when the counts differ from the live ones.
    #[test]
    fn cluster_counts_are_written_when_they_change() {
        let config = |status: serde_json::Value| -> crate::api::FleetAddonConfig {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "addons.cluster.x-k8s.io/v1alpha1", "kind": "FleetAddonConfig",
                "metadata": {"name": "fleet-addon-config"}, "spec": {}, "status": status,
            }))
            .expect("config")
        };
        let counts: crate::api::ClusterCounts =
            serde_json::from_value(serde_json::json!({"selected": 2, "imported": 1, "waiting": 0}))
                .expect("counts");
        let Some(Write::ApplyStatus { body, manager, .. }) =
            clusters_write(&config(serde_json::json!({})), &counts, None)
        else {
            panic!("a write")
        };
        assert_eq!(manager, names::IMPORT_STATUS_FIELD_MANAGER);
        assert_eq!(
            body["status"]["clusters"],
            serde_json::to_value(&counts).expect("json")
        );
        let same = config(serde_json::json!({"clusters": counts}));
        assert_eq!(clusters_write(&same, &counts, None), None);
    }
}
