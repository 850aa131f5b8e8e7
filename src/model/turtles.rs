//! Living beside Rancher Turtles (docs/migration.md "Beside Rancher Turtles"), pure.
//!
//! - Turtles from v0.26.1 (Rancher 2.14.x; commit d029c945 "fix: remove addon finalizer")
//!   removes our finalizer from every CAPI Cluster it imports while its `use-caapf` feature gate
//!   is false, its default (rancher/turtles v0.26.1 to v0.27.0
//!   `internal/controllers/import_controller.go` `reconcileExternalFleetManagement`, gate in
//!   `feature/feature.go`), and Rancher deploys its own agent. Put back each time, the two
//!   controllers would fight on every change: it is put back [`MAX_FINALIZER_READDS`] times,
//!   then left off and reported.
//! - Rancher deploys a Fleet agent of its own to a cluster Turtles imported unless Turtles marks
//!   it externally managed ([`rancher_deploys_fleet`]; Turtles' alpha `fleet-integration`, PR
//!   #2803, is in no release at v0.27.0, and would work with that agent): never two agents on
//!   one cluster, such a Cluster is left to Rancher ([`crate::model::import::Decision::Turtles`]).
//!
//! Both are reported by the condition [`names::FLEET_CONFLICT_CONDITION`] and a Warning Event.

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use crate::model::capi;
use crate::model::config::EffectiveConfig;
use crate::model::plan::{ObjectId, Write};
use crate::names;

/// Times our finalizer is put back after someone else removed it; the next removal is left.
pub const MAX_FINALIZER_READDS: u32 = 3;

/// Condition and Event reason: our finalizer was removed by another controller.
pub const FINALIZER_REMOVED: &str = "FinalizerRemoved";
/// Condition and Event reason: Rancher deploys a Fleet agent of its own to the cluster.
pub const RANCHER_FLEET_AGENT: &str = "RancherFleetAgent";

/// What the import remembers of our finalizer on one Cluster between reconciles (in memory: a
/// restart forgets, and allows [`MAX_FINALIZER_READDS`] more).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FinalizerMemory {
    /// The finalizer was on the Cluster when last observed.
    pub on: bool,
    /// Removals by someone else seen so far.
    pub removals: u32,
}

impl FinalizerMemory {
    /// The memory after observing the finalizer present (`has`) or not on a Cluster the import
    /// manages, and whether someone else removed it since the last observation (we remove it only
    /// when we stop managing the Cluster, which forgets it).
    pub fn observe(self, has: bool) -> (Self, bool) {
        match (self.on, has) {
            (true, false) => (
                Self {
                    on: false,
                    removals: self.removals + 1,
                },
                true,
            ),
            // Back after we gave up: someone restored it (the documented fix); start afresh.
            (false, true) if !self.may_add() => (
                Self {
                    on: true,
                    removals: 0,
                },
                false,
            ),
            (_, has) => (Self { on: has, ..self }, false),
        }
    }

    /// Whether the import may (still) add the finalizer.
    pub fn may_add(&self) -> bool {
        self.removals <= MAX_FINALIZER_READDS
    }
}

/// What the Cluster controller observed for the conflicts of one Cluster.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    /// Our finalizer, as remembered after this observation.
    pub finalizer: FinalizerMemory,
    /// Someone else removed it since the last observation.
    pub removed_now: bool,
}

/// The conflict a Cluster is in, for its condition (`None`: none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conflict {
    /// Our finalizer was removed this many times.
    FinalizerRemoved { removals: u32 },
    /// Rancher deploys a Fleet agent of its own to it ([`rancher_deploys_fleet`]).
    RancherFleetAgent,
}

impl Conflict {
    pub fn reason(&self) -> &'static str {
        match self {
            Conflict::FinalizerRemoved { .. } => FINALIZER_REMOVED,
            Conflict::RancherFleetAgent => RANCHER_FLEET_AGENT,
        }
    }

    /// What happened, the likely cause and the fix.
    pub fn message(&self) -> String {
        let fin = names::FINALIZER;
        match *self {
            Conflict::FinalizerRemoved { removals } => {
                let done = if removals <= MAX_FINALIZER_READDS {
                    format!("put back ({removals} of {MAX_FINALIZER_READDS} times)")
                } else {
                    format!(
                        "left off after {MAX_FINALIZER_READDS} re-adds: the Fleet Cluster is still kept, but deleting the Cluster no longer waits for its cleanup"
                    )
                };
                format!(
                    "Finalizer {fin} was removed by another controller, {done}. Rancher Turtles (v0.26.1 and later) removes it while its use-caapf feature gate is false, its default, and lets Rancher deploy a second Fleet agent: set the rancher-turtles chart value features.use-caapf.enabled=true, then add the finalizer back (docs/migration.md)"
                )
            }
            Conflict::RancherFleetAgent => format!(
                "Rancher Turtles imported this Cluster and Rancher deploys a Fleet agent of its own to it (its Rancher cluster has spec.fleetWorkspaceName, or lacks the annotation {EXTERNAL_FLEET_ANNOTATION}): this provider leaves it alone and released the Cluster (finalizer {fin}). One Fleet agent per cluster: set the rancher-turtles chart value features.use-caapf.enabled=true for clusters this provider should manage (docs/migration.md)"
            ),
        }
    }
}

/// The status apply that keeps the conflict condition of `cluster` (True with the conflict, or
/// removed when there is none and one is `live`); `None` when it says so already.
pub fn condition_write(
    cluster: ObjectId,
    conflict: Option<Conflict>,
    live: Option<&Value>,
    generation: Option<i64>,
    now: Timestamp,
) -> Option<Write> {
    let condition = match conflict {
        None if live.is_none() => return None,
        None => None,
        Some(conflict) => {
            let message = conflict.message();
            let wanted = capi::Condition {
                type_: names::FLEET_CONFLICT_CONDITION,
                status: true,
                reason: conflict.reason(),
                message: &message,
            };
            Some(capi::condition_to_apply(live, &wanted, generation, now)?)
        }
    };
    let mut body = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": cluster.name}});
    if let Some(condition) = condition {
        body["status"] = json!({"conditions": [condition]});
    }
    Some(Write::ApplyStatus {
        object: cluster,
        body,
        manager: names::CONFLICT_FIELD_MANAGER,
    })
}

/// Turtles' finalizer on the CAPI Clusters it imports into Rancher (rancher/turtles v0.27.0
/// `api/rancher/management/v3/cluster.go` `CapiClusterFinalizer`): only those have a Rancher
/// cluster to read.
pub const TURTLES_IMPORT_FINALIZER: &str = "capicluster.turtles.cattle.io";
/// Turtles' labels naming the CAPI Cluster on the Rancher (`management.cattle.io/v3`) cluster it
/// creates for it (rancher/turtles v0.27.0 `internal/controllers/helpers.go`).
pub const RANCHER_OWNER_LABELS: [&str; 2] = [
    "cluster-api.cattle.io/capi-cluster-owner",
    "cluster-api.cattle.io/capi-cluster-owner-ns",
];
/// What Turtles sets on that Rancher cluster while its `use-caapf` gate is on, and removes while
/// it is off (v0.27.0 `import_controller.go` `reconcileExternalFleetManagement`).
pub const EXTERNAL_FLEET_ANNOTATION: &str = "provisioning.cattle.io/externally-managed";

/// Whether Rancher deploys a Fleet agent of its own to the cluster of `rancher_cluster` (a
/// `management.cattle.io/v3` Cluster, as JSON). rancher/rancher v2.11.0 to v2.15.0
/// `pkg/controllers/provisioningv2/fleetcluster/fleetcluster.go`: `assignWorkspace` sets
/// `spec.fleetWorkspaceName` unless the annotation is set to anything but `""` or `false`, and
/// `createCluster` makes a Fleet Cluster (and so an agent) wherever it is set, annotation or not.
pub fn rancher_deploys_fleet(rancher_cluster: &Value) -> bool {
    let workspace = rancher_cluster["spec"]["fleetWorkspaceName"].as_str();
    let external = rancher_cluster["metadata"]["annotations"][EXTERNAL_FLEET_ANNOTATION].as_str();
    let external = external.is_some_and(|a| !a.is_empty() && !a.eq_ignore_ascii_case("false"));
    workspace.is_some_and(|w| !w.is_empty()) || !external
}

/// The API group of Turtles' CRDs (`CAPIProvider`, `ClusterctlConfig`): Turtles is installed.
pub const TURTLES_API_GROUP: &str = "turtles-capi.cattle.io";

/// The warning due when Turtles is installed (`turtles`) and `config` puts Fleet agents into the
/// namespace Turtles deletes, [`names::DEFAULT_AGENT_NAMESPACE`] (rancher/turtles v0.18.0 to
/// v0.27.0 `internal/controllers/helpers.go` `removeFleetNamespace`): only on clusters whose
/// Rancher cluster lacks `cluster-api.cattle.io/fleet-namespace-migrated`, which Turtles sets on
/// every Rancher cluster it creates since v0.18.0, so those it created before and never migrated.
pub fn agent_namespace_warning(turtles: bool, config: &EffectiveConfig) -> Option<String> {
    let import = config.cluster.as_ref().filter(|_| turtles)?;
    let namespace = import.agent.agent_namespace.as_deref();
    (namespace == Some(names::DEFAULT_AGENT_NAMESPACE)).then(|| {
        format!(
            "Rancher Turtles is installed and Fleet agents go to namespace {}, which Turtles deletes on imported clusters it created before v0.18.0 and never migrated: set spec.cluster.agentNamespace: cattle-fleet-system (docs/migration.md)",
            names::DEFAULT_AGENT_NAMESPACE
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::CapiCluster;

    /// Turtles removes the finalizer after each re-add: put back three times, the fourth
    /// removal is left, and restoring it by hand starts afresh.
    #[test]
    fn finalizer_removals_are_bounded() {
        let start = FinalizerMemory::default();
        // (finalizer present?, removed by someone else?, may add?, removals)
        let rows = [
            (true, false, true, 0),
            (false, true, true, 1),
            (false, false, true, 1),
            (true, false, true, 1),
            (false, true, true, 2),
            (true, false, true, 2),
            (false, true, true, 3),
            (true, false, true, 3),
            (false, true, false, 4),
            (false, false, false, 4),
            (true, false, true, 0),
            (false, true, true, 1),
        ];
        let mut memory = start;
        for (i, (has, removed, may_add, removals)) in rows.into_iter().enumerate() {
            let (next, seen) = memory.observe(has);
            memory = next;
            assert_eq!(
                (seen, memory.may_add(), memory.removals),
                (removed, may_add, removals),
                "row {i}"
            );
        }
        let never_on = start.observe(false);
        assert_eq!(never_on, (start, false), "a missing finalizer we never saw");
    }

    /// The Rancher cluster Turtles makes with `use-caapf` on, then as the gate, the user and
    /// Rancher change it: a Fleet agent of Rancher's own wherever a workspace is assigned or due.
    #[test]
    fn rancher_deploys_fleet_unless_externally_managed_and_unassigned() {
        let text = include_str!("../../tests/fixtures/turtles/rancher-cluster-v0.27.0.yaml");
        let turtles: Value = serde_yaml::from_str(text).expect("fixture");
        let external = format!(
            "/metadata/annotations/{}",
            EXTERNAL_FLEET_ANNOTATION.replace('/', "~1")
        );
        // (annotation, spec.fleetWorkspaceName, Rancher deploys Fleet)
        let rows = [
            (Some("true"), None, false),
            (Some("TRUE"), Some(""), false),
            (None, None, true),
            (Some("false"), None, true),
            (Some(""), None, true),
            (Some("true"), Some("fleet-default"), true),
            (None, Some("fleet-default"), true),
        ];
        for (i, (annotation, workspace, deploys)) in rows.into_iter().enumerate() {
            let mut cluster = turtles.clone();
            match annotation {
                Some(value) => *cluster.pointer_mut(&external).expect("annotation") = json!(value),
                None => {
                    let annotations = cluster["metadata"]["annotations"].as_object_mut();
                    annotations
                        .expect("annotations")
                        .remove(EXTERNAL_FLEET_ANNOTATION);
                }
            }
            if let Some(workspace) = workspace {
                cluster["spec"]["fleetWorkspaceName"] = json!(workspace);
            }
            assert_eq!(rancher_deploys_fleet(&cluster), deploys, "row {i}");
        }
        let labels = &turtles["metadata"]["labels"];
        assert!(RANCHER_OWNER_LABELS.iter().all(|l| labels[l].is_string()));
        assert_eq!(
            turtles["metadata"]["finalizers"][0],
            TURTLES_IMPORT_FINALIZER
        );
    }

    #[test]
    fn the_namespace_turtles_deletes_is_warned_about_only_under_turtles() {
        let config = |yaml: &str| {
            let spec: crate::api::FleetAddonConfigSpec = serde_yaml::from_str(yaml).expect("spec");
            EffectiveConfig::from_spec(&spec)
        };
        let defaults = EffectiveConfig::default();
        let turtles_setup = config("cluster: {agentNamespace: cattle-fleet-system}");
        let explicit = config("cluster: {agentNamespace: fleet-addon-agent}");
        let no_import = config("config: {}");
        let rows = [
            (true, &defaults, true),
            (false, &defaults, false),
            (true, &explicit, true),
            (true, &turtles_setup, false),
            (true, &no_import, false),
        ];
        for (i, (turtles, config, warned)) in rows.into_iter().enumerate() {
            let warning = agent_namespace_warning(turtles, config);
            assert_eq!(warning.is_some(), warned, "row {i}");
            assert!(warning.is_none_or(|w| w.contains("cattle-fleet-system")));
        }
    }

    #[test]
    fn condition_names_the_cause_and_the_fix() {
        let id = ObjectId::of::<CapiCluster>(Some("ns"), "c1", Some("4"));
        let now = Timestamp::UNIX_EPOCH;
        let conflict = Conflict::FinalizerRemoved { removals: 4 };
        let Some(Write::ApplyStatus { body, manager, .. }) =
            condition_write(id.clone(), Some(conflict), None, Some(2), now)
        else {
            panic!("a condition")
        };
        assert_eq!(manager, names::CONFLICT_FIELD_MANAGER);
        let condition = &body["status"]["conditions"][0];
        assert_eq!(condition["type"], names::FLEET_CONFLICT_CONDITION);
        assert_eq!(condition["reason"], FINALIZER_REMOVED);
        let message = condition["message"].as_str().expect("message");
        for part in ["use-caapf", "enabled=true", "left off after 3"] {
            assert!(message.contains(part), "{part}: {message}");
        }
        let live = condition.clone();
        let same = condition_write(id.clone(), Some(conflict), Some(&live), Some(2), now);
        assert_eq!(same, None, "unchanged");
        let Some(Write::ApplyStatus { body, .. }) =
            condition_write(id.clone(), None, Some(&live), Some(2), now)
        else {
            panic!("removed")
        };
        assert!(body.get("status").is_none(), "applied without it");
        assert_eq!(condition_write(id, None, None, Some(2), now), None);
    }
}
