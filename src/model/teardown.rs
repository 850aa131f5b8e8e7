//! Teardown before deletion (issue #30, `docs/lifecycle.md`): before Cluster API deletes a
//! Cluster's infrastructure, the Fleet workloads on it are removed through Fleet's own
//! targeting, so the load balancers and volumes they created are released while the cloud
//! controllers still run. Pure: what BeforeClusterDelete (`crate::hooks::handlers::delete`) and
//! the import controller (`crate::controllers::import::clusters`) decide.
//!
//! # How Fleet removes a cluster's workloads (rancher/fleet v0.12.19, v0.14.10, v0.16.1)
//!
//! - A label change of a Fleet Cluster re-targets its bundles: the bundle controller maps the
//!   old and the new object to the bundles they match, and the cluster controller deletes the
//!   BundleDeployments of bundles in scope that no longer match
//!   (`internal/cmd/controller/reconciler/bundle_controller.go` `SetupWithManager` and
//!   `cleanupOrphanedBundleDeployments`; `cluster_controller.go` `Reconcile`, "Clean up old
//!   bundledeployments"). So the drain removes the labels bundles select the cluster by and
//!   adds [`names::TEARDOWN_LABEL`], which a `targetCustomizations` entry with `doNotDeploy:
//!   true` can match for bundles that target by name or by an empty selector.
//! - A deleted BundleDeployment loses its finalizer in the fleet-controller without waiting for
//!   the agent (`reconciler/bundledeployment_controller.go` `Reconcile`); the agent uninstalls
//!   the release after it sees the BundleDeployment gone (`internal/cmd/agent/controller/
//!   bundledeployment_controller.go` `Reconcile` → `helmdeployer/delete.go` `deleteByRelease`),
//!   and Kubernetes releases load balancers and volumes after that. So "no BundleDeployment
//!   left" is not "nothing left": where the workload cluster can be reached it is asked
//!   ([`leftovers`]), elsewhere a settle period ([`SETTLE_UNREACHABLE`]) follows.
//! - Fleet deletes un-targeted BundleDeployments in plain loops, with no order
//!   (`cleanupOrphanedBundleDeployments`; `dependsOn` is read only before deploying,
//!   `internal/cmd/agent/deployer/deployer.go` `checkDependency`): a cloud controller manager or
//!   CSI driver removed with the rest could not release the load balancers and volumes. Bundles
//!   labelled [`names::KEEP_DURING_TEARDOWN_LABEL`] that keep targeting the cluster (e.g. on
//!   [`names::TEARDOWN_LABEL`]) stay, and are not waited for ([`workloads`]).
//! - Bundles whose ID starts with `fleet-agent` are never uninstalled (`deleteByRelease`), and
//!   the agent's own bundle targets the cluster by `clusterName` with `fleet.cattle.io/
//!   non-managed-agent DoesNotExist` (`agentmanagement/controllers/manageagent/manageagent.go`
//!   `newAgentBundle`): label changes never remove it, and the drain never adds that label, so
//!   the agent keeps running until the workloads are gone.
//! - Deleting the Fleet Cluster instead deletes its namespace and abandons the workloads
//!   (rancher/fleet#1054): the import controller keeps it while the removal runs.
//!
//! # Who does what
//!
//! BeforeClusterDelete decides, from the request alone, whether the Cluster is torn down
//! ([`mode`]). On its first call it lists the Fleet Cluster's BundleDeployments: none but the
//! agent's, nothing is held; otherwise it marks the Fleet Cluster ([`start_patch`]). The import
//! controller keeps a deleting Cluster's Fleet Cluster and our finalizer while [`holds_cleanup`]
//! says so, and once the mark is there removes the selection labels ([`drain_patch`]). Each
//! later call reports the progress ([`verdict`]) until the workloads are gone, the deadline
//! passes or the operator skips; Cluster API then sets `runtime.cluster.x-k8s.io/ok-to-delete`
//! and the import controller cleans up as for any deleted Cluster.

use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

use fleet_api_rs::fleet_cluster::Cluster as FleetCluster;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::core::{Selector, SelectorExt};
use serde_json::{Map, Value, json};

use crate::model::capi::{self, ClusterView, StringMap, event_note};
use crate::model::config::{ClusterImport, DEFAULT_TEARDOWN_TIMEOUT, TeardownSettings};
use crate::model::fleet::{Registration, class_labels, desired_fleet_cluster};
use crate::names;

/// Retry interval while the workloads are removed (Cluster API v1.11 calls the hook on every
/// reconcile of the Cluster anyway; v1.12 waits this long: research Q6).
pub const RETRY_TEARDOWN: i32 = 15;

/// How long a workload cluster that cannot be reached (behind NAT, no kubeconfig Secret) is
/// given after the last BundleDeployment went, for its agent to uninstall the releases and
/// Kubernetes to release what they held: the agent reacts to the deletion at once (a watch),
/// and a cloud load balancer is usually gone within a minute.
pub const SETTLE_UNREACHABLE: Duration = Duration::from_secs(120);

/// At most this many names of one kind in a message.
pub const MAX_LISTED: usize = 10;

/// At most this many bundles read per call to say why they still target the cluster.
pub const MAX_EXPLAINED: usize = 3;

/// Label prefixes Fleet and Rancher reserve for their own bookkeeping and targeting
/// (rancher/fleet v0.12.19–v0.16.1 `pkg/apis/fleet.cattle.io/v1alpha1/labels.go`
/// `FleetLabelPrefix`, `ManagementLabelPrefix`): the drain keeps them (e.g.
/// `fleet.cattle.io/non-managed-agent`, which decides whether Fleet manages the agent).
pub const FLEET_RESERVED_LABEL_PREFIXES: [&str; 2] = ["fleet.cattle.io/", "management.cattle.io/"];

/// Prefix of the bundles Fleet never uninstalls (rancher/fleet v0.12.19–v0.16.1
/// `internal/helmdeployer/delete.go` `deleteByRelease`): the agent's own
/// (`fleet-agent-<cluster>`), which must keep running while the rest goes.
pub const AGENT_BUNDLE_PREFIX: &str = "fleet-agent";

/// Namespace no workload's leftovers are looked for in (Kubernetes' own).
const SYSTEM_NAMESPACE: &str = "kube-system";

// ---- Which Clusters are torn down ----

/// Whether a deleting Cluster's Fleet workloads are removed first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Off for this Cluster (the configuration, or its annotation `"false"`).
    Off,
    /// The request's Cluster has no `metadata.deletionTimestamp`: nothing is being deleted.
    NotDeleting,
    /// The operator's skip annotation.
    Skipped,
    /// On, but the deadline passed.
    Expired { deadline: Timestamp },
    /// On until `deadline` (the Cluster's `deletionTimestamp` plus the timeout).
    On { deadline: Timestamp },
    /// The FleetAddonConfig has not been read yet and the Cluster's annotations do not decide.
    Unknown,
}

/// [`Mode`], and the problems of the Cluster's annotations (each naming the annotation; an
/// invalid value is ignored, the default applies).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModeDecision {
    pub mode: Mode,
    pub problems: Vec<String>,
}

/// The teardown mode of a Cluster from its annotations, its `deletionTimestamp` and
/// `spec.runtimeExtension.beforeClusterDelete` (`None`: not read yet). Needs nothing else, so
/// BeforeClusterDelete decides it from the request alone and the import controller from its
/// cache, with the same result.
pub fn mode(
    annotations: &StringMap,
    deleted_at: Option<Timestamp>,
    settings: Option<&TeardownSettings>,
    now: Timestamp,
) -> ModeDecision {
    let mut problems = Vec::new();
    let mut flag = |name: &str, default_note: &str| -> Option<bool> {
        match annotations.get(name).map(String::as_str) {
            None => None,
            Some("true") => Some(true),
            Some("false") => Some(false),
            Some(other) => {
                problems.push(format!(
                    "annotation {name}: {other:?} is neither \"true\" nor \"false\" (ignored: {default_note})"
                ));
                None
            }
        }
    };
    let requested = flag(
        names::REMOVE_WORKLOADS_ANNOTATION,
        "spec.runtimeExtension.beforeClusterDelete.removeWorkloads applies",
    );
    let skipped = flag(
        names::SKIP_WORKLOAD_REMOVAL_ANNOTATION,
        "the workloads are removed",
    ) == Some(true);
    let enabled = requested.or(settings.map(|s| s.remove_workloads));
    let mode = match enabled {
        Some(false) => Mode::Off,
        _ if skipped => Mode::Skipped,
        None => Mode::Unknown,
        Some(true) => match deleted_at {
            None => Mode::NotDeleting,
            Some(since) => {
                let timeout = settings.map_or(DEFAULT_TEARDOWN_TIMEOUT, |s| s.timeout);
                let deadline = SignedDuration::try_from(timeout)
                    .ok()
                    .and_then(|timeout| since.checked_add(timeout).ok())
                    .unwrap_or(Timestamp::MAX);
                if now >= deadline {
                    Mode::Expired { deadline }
                } else {
                    Mode::On { deadline }
                }
            }
        },
    };
    ModeDecision { mode, problems }
}

/// Whether the import controller keeps a deleting Cluster's Fleet Cluster (and our finalizer)
/// for the teardown instead of cleaning up at once; `Some(deadline)` until when. Only while
/// Cluster API waits for BeforeClusterDelete: the Cluster has a topology (kubernetes-sigs/
/// cluster-api v1.11.0 `internal/controllers/cluster/cluster_controller.go` `reconcileDelete`
/// waits only for `cluster.Spec.Topology.IsDefined() && !hooks.IsOkToDelete(cluster)`) and no
/// `ok-to-delete` annotation yet; and while there is a Fleet Cluster to keep (`live`, not
/// being deleted). Whether its agent ever registered is checked on the decoded object
/// ([`is_registered`]).
pub fn holds_cleanup(
    view: &ClusterView,
    settings: &TeardownSettings,
    live: Option<&ObjectMeta>,
    now: Timestamp,
) -> Option<Timestamp> {
    if !view.deleting
        || view.class.is_none()
        || view
            .annotations
            .contains_key(names::CAPI_OK_TO_DELETE_ANNOTATION)
        || live.is_none_or(|meta| meta.deletion_timestamp.is_some())
    {
        return None;
    }
    match mode(&view.annotations, view.deleted_at, Some(settings), now).mode {
        Mode::On { deadline } => Some(deadline),
        _ => None,
    }
}

/// Whether the Fleet Cluster's agent ever checked in (`status.agent.lastSeen`): a cluster whose
/// agent never registered has nothing Fleet deployed, and is never held.
pub fn is_registered(fleet: &FleetCluster) -> bool {
    fleet
        .status
        .as_ref()
        .and_then(|status| status.agent.as_ref())
        .and_then(|agent| agent.last_seen.as_deref())
        .is_some_and(|seen| !seen.is_empty())
}

/// Whether the removal started: BeforeClusterDelete put [`names::TEARDOWN_LABEL`] on the Fleet
/// Cluster.
pub fn started(labels: &StringMap) -> bool {
    labels.get(names::TEARDOWN_LABEL).map(String::as_str) == Some("true")
}

/// A Fleet Cluster's labels (an absent map is empty).
pub fn labels_of(fleet: &FleetCluster) -> StringMap {
    fleet.metadata.labels.clone().unwrap_or_default()
}

// ---- The drain ----

/// The label keys the drain removes from a Fleet Cluster: every label the import gives it
/// (the Cluster's labels, the class labels and whatever else [`desired_fleet_cluster`] adds)
/// and every label our field manager applied, except Fleet's and Rancher's own
/// ([`FLEET_RESERVED_LABEL_PREFIXES`]), [`names::TEARDOWN_LABEL`] and the version labels
/// ([`crate::model::upgrade_steps`]): they say what the cluster runs, and a bundle kept through
/// the teardown (a cloud controller manager choosing its chart by the minor) must keep its
/// options until the end. Labels others put on the Fleet Cluster stay.
pub fn selection_label_keys(
    view: &ClusterView,
    import: Option<&ClusterImport>,
    live: &FleetCluster,
) -> BTreeSet<String> {
    let mut keys: BTreeSet<String> = match import {
        // Labels do not depend on the agent settings: the defaults do.
        Some(import) => desired_fleet_cluster(
            view,
            import,
            &import.agent,
            &Registration::ManagerInitiated,
            None,
        )
        .metadata
        .labels
        .unwrap_or_default()
        .into_keys()
        .collect(),
        None => {
            let mut labels = view.labels.clone();
            if let Some(class) = &view.class {
                labels.extend(class_labels(class));
            }
            labels.into_keys().collect()
        }
    };
    if let Ok(value) = serde_json::to_value(live)
        && let Some(owned) = crate::model::diff::owned_fields(&value, names::FIELD_MANAGER)
        && let Some(labels) = owned
            .pointer("/f:metadata/f:labels")
            .and_then(Value::as_object)
    {
        keys.extend(
            labels
                .keys()
                .filter_map(|key| key.strip_prefix("f:"))
                .map(str::to_string),
        );
    }
    keys.retain(|key| {
        key != names::TEARDOWN_LABEL
            && ![
                names::CONTROL_PLANE_MINOR_LABEL,
                names::WORKERS_MINOR_LABEL,
                names::UPGRADE_TARGET_MINOR_LABEL,
            ]
            .contains(&key.as_str())
            && !FLEET_RESERVED_LABEL_PREFIXES
                .iter()
                .any(|prefix| key.starts_with(prefix))
    });
    keys
}

/// The JSON merge patch removing the selection labels still on the Fleet Cluster (`None`: none
/// left). A merge patch, not an apply: it removes them whoever set them (a Fleet Cluster
/// created with `patchResource: false` has no apply of ours), and leaves everything else,
/// `templateValues` included (a bundle still rendering `.ClusterValues` must not fail for every
/// cluster it targets: rancher/fleet `target/builder.go` `preprocessHelmValues` uses
/// `missingkey=error`).
pub fn drain_patch(keys: &BTreeSet<String>, live_labels: &StringMap) -> Option<Value> {
    let removed: Map<String, Value> = keys
        .iter()
        .filter(|key| live_labels.contains_key(*key))
        .map(|key| (key.clone(), Value::Null))
        .collect();
    (!removed.is_empty()).then(|| json!({"metadata": {"labels": removed}}))
}

/// Whether the Fleet Cluster's live labels show the drain: the removal started and no
/// selection label is left.
pub fn is_drained(keys: &BTreeSet<String>, live_labels: &StringMap) -> bool {
    started(live_labels) && drain_patch(keys, live_labels).is_none()
}

/// The merge patch that starts the removal: [`names::TEARDOWN_LABEL`], and how many
/// BundleDeployments there were ([`names::TEARDOWN_BUNDLES_ANNOTATION`]).
pub fn start_patch(bundles: usize) -> Value {
    json!({"metadata": {
        "labels": {names::TEARDOWN_LABEL: "true"},
        "annotations": {names::TEARDOWN_BUNDLES_ANNOTATION: bundles.to_string()},
    }})
}

/// How many BundleDeployments the removal started with (`None`: not recorded).
pub fn bundles_at_start(fleet: &FleetCluster) -> Option<usize> {
    annotation(fleet, names::TEARDOWN_BUNDLES_ANNOTATION)?
        .parse()
        .ok()
}

/// When BeforeClusterDelete first saw no BundleDeployment left (`None`: not yet, or unreadable).
pub fn bundles_gone_since(fleet: &FleetCluster) -> Option<Timestamp> {
    annotation(fleet, names::TEARDOWN_BUNDLES_GONE_ANNOTATION)?
        .parse()
        .ok()
}

/// The merge patch recording (`Some`) or forgetting (`None`) when the last BundleDeployment
/// went.
pub fn bundles_gone_patch(since: Option<Timestamp>) -> Value {
    let value = since.map_or(Value::Null, |t| json!(rfc3339(t)));
    json!({"metadata": {"annotations": {names::TEARDOWN_BUNDLES_GONE_ANNOTATION: value}}})
}

fn annotation<'a>(fleet: &'a FleetCluster, key: &str) -> Option<&'a str> {
    fleet
        .metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

// ---- What is left upstream ----

/// A bundle (`namespace/name`), as its BundleDeployment's labels name it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct BundleRef {
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for BundleRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{}", self.name)
        } else {
            write!(f, "{}/{}", self.namespace, self.name)
        }
    }
}

/// The BundleDeployments of a Fleet Cluster by what the teardown does with them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Workloads {
    /// Waited for: every BundleDeployment but the agent's ([`AGENT_BUNDLE_PREFIX`]) and the
    /// kept ones.
    pub left: Vec<BundleRef>,
    /// Kept until the cluster is deleted ([`names::KEEP_DURING_TEARDOWN_LABEL`]).
    pub kept: Vec<BundleRef>,
}

/// The bundles whose BundleDeployments are in the Fleet Cluster's namespace, sorted, named by
/// the labels Fleet gives them (rancher/fleet v0.16.1 `internal/cmd/controller/target/
/// target.go` `BundleDeploymentLabels`: the Bundle's labels without keys containing
/// `cattle.io/`, then `fleet.cattle.io/bundle-namespace` and `fleet.cattle.io/bundle-name`),
/// else by their own name. One being deleted still counts.
pub fn workloads(deployments: &[Value]) -> Workloads {
    let mut out = Workloads::default();
    for bd in deployments {
        let name = bd["metadata"]["name"].as_str().unwrap_or_default();
        if name.starts_with(AGENT_BUNDLE_PREFIX) {
            continue;
        }
        let labels = &bd["metadata"]["labels"];
        let bundle = match (
            labels["fleet.cattle.io/bundle-namespace"].as_str(),
            labels["fleet.cattle.io/bundle-name"].as_str(),
        ) {
            (Some(namespace), Some(bundle)) => BundleRef {
                namespace: namespace.to_string(),
                name: bundle.to_string(),
            },
            _ => BundleRef {
                namespace: String::new(),
                name: name.to_string(),
            },
        };
        if labels[names::KEEP_DURING_TEARDOWN_LABEL] == "true" {
            out.kept.push(bundle);
        } else {
            out.left.push(bundle);
        }
    }
    for list in [&mut out.left, &mut out.kept] {
        list.sort();
        list.dedup();
    }
    out
}

/// Why a bundle still targets the drained cluster, from its `spec.targets` (where Fleet also
/// puts fleet.yaml's `targetCustomizations`: `internal/bundlereader/read.go`); `None` when no
/// entry explains it (Fleet may not have removed its BundleDeployment yet). The first entry
/// that certainly matches decides, as Fleet's first match does (`target/builder.go`
/// `Targets`, `target/matcher/bundlematch.go`): a `doNotDeploy` one means Fleet removes it;
/// otherwise `clusterName` equal to the Fleet Cluster's name or a `clusterSelector` that still
/// matches the labels left (`{}` matches every cluster) explains it (criteria are ANDed:
/// `target/matcher/clustermatcher.go`). Entries naming a cluster group are passed over (a
/// group's selector is not read here).
pub fn why_still_targeted(
    bundle: &Value,
    fleet_cluster: &str,
    labels: &StringMap,
) -> Option<&'static str> {
    let targets = bundle.pointer("/spec/targets")?.as_array()?;
    for target in targets {
        if !target["clusterGroup"].is_null() || !target["clusterGroupSelector"].is_null() {
            continue;
        }
        let by_name = target["clusterName"].as_str();
        let selector = target.get("clusterSelector").filter(|s| !s.is_null());
        let matches = (by_name.is_some() || selector.is_some())
            && by_name.is_none_or(|name| name == fleet_cluster)
            && selector.is_none_or(|selector| selector_matches(selector, labels));
        if !matches {
            continue;
        }
        if target["doNotDeploy"].as_bool() == Some(true) {
            return None;
        }
        return Some(match (by_name, selector) {
            (Some(_), _) => "targets this cluster by name (clusterName)",
            (None, Some(selector)) if is_empty_selector(selector) => {
                "targets every cluster (clusterSelector: {})"
            }
            _ => "its clusterSelector still matches the labels left",
        });
    }
    None
}

fn is_empty_selector(selector: &Value) -> bool {
    let labels = selector
        .get("matchLabels")
        .is_none_or(|v| v.is_null() || v.as_object().is_some_and(Map::is_empty));
    let expressions = selector
        .get("matchExpressions")
        .is_none_or(|v| v.is_null() || v.as_array().is_some_and(Vec::is_empty));
    labels && expressions
}

fn selector_matches(selector: &Value, labels: &StringMap) -> bool {
    let Ok(parsed) = serde_json::from_value::<
        k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    >(selector.clone()) else {
        return false;
    };
    Selector::try_from(parsed).is_ok_and(|selector| selector.matches(labels))
}

// ---- What is left downstream ----

/// The namespace the cluster's Fleet agent runs in: where Fleet says it runs
/// (`status.agent.namespace`), else where it was asked to (`spec.agentNamespace`), else ours.
pub fn agent_namespace(fleet: &FleetCluster) -> String {
    fleet
        .status
        .as_ref()
        .and_then(|status| status.agent.as_ref())
        .and_then(|agent| agent.namespace.clone())
        .or_else(|| fleet.spec.agent_namespace.clone())
        .filter(|ns| !ns.is_empty())
        .unwrap_or_else(|| names::DEFAULT_AGENT_NAMESPACE.to_string())
}

/// What still holds cloud resources on the workload cluster, sorted: Services of type
/// `LoadBalancer` (the object stays until the cloud controller released the load balancer,
/// finalizer `service.kubernetes.io/load-balancer-cleanup`) and PersistentVolumeClaims (their
/// volumes), outside `kube-system` and the agent's namespace.
pub fn leftovers(services: &[Value], claims: &[Value], agent_namespace: &str) -> Vec<String> {
    let outside = |object: &Value| {
        let ns = object["metadata"]["namespace"].as_str().unwrap_or_default();
        ns != SYSTEM_NAMESPACE && ns != agent_namespace
    };
    let key = |object: &Value| {
        format!(
            "{}/{}",
            object["metadata"]["namespace"].as_str().unwrap_or_default(),
            object["metadata"]["name"].as_str().unwrap_or_default()
        )
    };
    let mut out: Vec<String> = services
        .iter()
        .filter(|svc| outside(svc) && svc["spec"]["type"] == "LoadBalancer")
        .map(|svc| format!("Service {} (LoadBalancer)", key(svc)))
        .chain(
            claims
                .iter()
                .filter(|pvc| outside(pvc))
                .map(|pvc| format!("PersistentVolumeClaim {}", key(pvc))),
        )
        .collect();
    out.sort();
    out
}

/// What BeforeClusterDelete learned from the workload cluster, once Fleet removed every
/// BundleDeployment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Downstream {
    /// Its API server answered: what is left ([`leftovers`]).
    Checked { leftovers: Vec<String> },
    /// It cannot be checked (`reason`, stable for one cause); the last BundleDeployment went
    /// at `bundles_gone`.
    Unchecked {
        reason: String,
        bundles_gone: Timestamp,
    },
}

// ---- The answer ----

/// What BeforeClusterDelete found during a teardown.
#[derive(Clone, Debug)]
pub struct Progress<'a> {
    /// `namespace/name` of the Fleet Cluster.
    pub fleet_key: &'a str,
    /// How many BundleDeployments there were at the start ([`bundles_at_start`]).
    pub started_with: Option<usize>,
    /// The bundles whose BundleDeployments are left ([`Workloads::left`]).
    pub left: &'a [BundleRef],
    /// The bundles kept until the cluster is deleted ([`Workloads::kept`]).
    pub kept: &'a [BundleRef],
    /// Why some of them still target the cluster ([`why_still_targeted`]).
    pub explained: &'a [(BundleRef, &'static str)],
    /// Whether the Fleet Cluster's labels show the drain ([`is_drained`]).
    pub drained: bool,
    /// The workload cluster, once no BundleDeployment is left.
    pub downstream: Option<&'a Downstream>,
    pub deadline: Timestamp,
    pub now: Timestamp,
}

/// BeforeClusterDelete's verdict during a teardown. Messages change only when the state does
/// (no countdown): the `FleetWorkloadsRemoved` condition carries them, and Cluster API v1.11
/// calls the hook again on every change of the Cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Wait ("retry"), saying what for.
    Hold(String),
    /// The workloads are gone: let the deletion proceed.
    Done(String),
}

/// The verdict from what was found.
pub fn verdict(progress: &Progress<'_>) -> Verdict {
    let mut until = deadline_note(progress.deadline);
    if !progress.kept.is_empty() {
        let kept: Vec<String> = progress.kept.iter().map(ToString::to_string).collect();
        until = format!(
            "kept until the cluster is deleted ({}): {}; {until}",
            names::KEEP_DURING_TEARDOWN_LABEL,
            listed(&kept)
        );
    }
    let fleet_key = progress.fleet_key;
    if !progress.drained {
        let mut message = format!(
            "removing Fleet workloads: waiting for the labels bundles select Fleet Cluster {fleet_key} by to be removed (the import controller does it)"
        );
        if !progress.left.is_empty() {
            message.push_str(&format!("; {}", bundles_left(progress)));
        }
        return Verdict::Hold(format!("{message}; {until}"));
    }
    if !progress.left.is_empty() {
        let mut message = format!("removing Fleet workloads: {}", bundles_left(progress));
        for (bundle, why) in progress.explained {
            message.push_str(&format!(
                "; bundle {bundle} {why} and cannot be drained (give it a targetCustomization with doNotDeploy: true on the label {}: \"true\")",
                names::TEARDOWN_LABEL
            ));
        }
        return Verdict::Hold(format!("{message}; {until}"));
    }
    let removed = progress.started_with.map_or_else(
        || "every BundleDeployment".to_string(),
        |n| format!("{n} BundleDeployment{}", plural(n)),
    );
    match progress.downstream {
        None => Verdict::Hold(format!(
            "removing Fleet workloads: Fleet removed {removed}; checking the workload cluster; {until}"
        )),
        Some(Downstream::Checked { leftovers }) if leftovers.is_empty() => Verdict::Done(format!(
            "Fleet removed {removed} of Fleet Cluster {fleet_key}, and the workload cluster has no LoadBalancer Service or PersistentVolumeClaim left"
        )),
        Some(Downstream::Checked { leftovers }) => Verdict::Hold(format!(
            "removing Fleet workloads: Fleet removed {removed}; waiting for the workload cluster to delete {}; {until}",
            listed(leftovers)
        )),
        Some(Downstream::Unchecked {
            reason,
            bundles_gone,
        }) => {
            let settled = bundles_gone
                .checked_add(SignedDuration::try_from(SETTLE_UNREACHABLE).unwrap_or_default())
                .unwrap_or(Timestamp::MAX);
            if progress.now >= settled {
                Verdict::Done(format!(
                    "Fleet removed {removed} of Fleet Cluster {fleet_key}; the workload cluster could not be checked ({reason}), so its agent was given {} after the last BundleDeployment went",
                    short(SETTLE_UNREACHABLE)
                ))
            } else {
                Verdict::Hold(format!(
                    "removing Fleet workloads: Fleet removed {removed}; the workload cluster cannot be checked ({reason}): giving its agent until {} to uninstall them; {until}",
                    rfc3339(settled)
                ))
            }
        }
    }
}

fn bundles_left(progress: &Progress<'_>) -> String {
    let names: Vec<String> = progress.left.iter().map(ToString::to_string).collect();
    let count = progress.left.len();
    match progress.started_with {
        Some(total) if total >= count => format!(
            "{count} of {total} BundleDeployments left: {}",
            listed(&names)
        ),
        _ => format!(
            "{count} BundleDeployment{} left: {}",
            plural(count),
            listed(&names)
        ),
    }
}

fn deadline_note(deadline: Timestamp) -> String {
    format!(
        "the deletion proceeds anyway at {} (now with the Cluster annotation {}: \"true\")",
        rfc3339(deadline),
        names::SKIP_WORKLOAD_REMOVAL_ANNOTATION
    )
}

/// At most [`MAX_LISTED`] of `items`, then how many more.
fn listed(items: &[String]) -> String {
    let mut parts: Vec<String> = items.iter().take(MAX_LISTED).cloned().collect();
    if items.len() > MAX_LISTED {
        parts.push(format!("and {} more", items.len() - MAX_LISTED));
    }
    parts.join(", ")
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// The answer when the removal ends without the workloads being gone.
pub fn ended_early(mode: &Mode, fleet_key: &str) -> Option<String> {
    match mode {
        Mode::Skipped => Some(format!(
            "workload removal skipped (Cluster annotation {}: \"true\"): what Fleet deployed through Fleet Cluster {fleet_key} is left on the cluster while its infrastructure is deleted",
            names::SKIP_WORKLOAD_REMOVAL_ANNOTATION
        )),
        Mode::Expired { deadline } => Some(format!(
            "workload removal timed out at {} (spec.runtimeExtension.beforeClusterDelete.timeout after the deletion started): the deletion proceeds, and what Fleet deployed through Fleet Cluster {fleet_key} may be left behind",
            rfc3339(*deadline)
        )),
        _ => None,
    }
}

/// `text` with the annotation problems appended (they are ignored, so the answer stands).
pub fn with_problems(text: &str, problems: &[String]) -> String {
    if problems.is_empty() {
        text.to_string()
    } else if text.is_empty() {
        problems.join("; ")
    } else {
        format!("{text}; {}", problems.join("; "))
    }
}

// ---- The condition and the Events ----

/// Reasons of the [`names::WORKLOADS_REMOVED_CONDITION`] condition, and of the Events that go
/// with a change to each.
pub mod reason {
    /// False: the workloads are being removed.
    pub const REMOVING: &str = "Removing";
    /// True: they are gone.
    pub const REMOVED: &str = "Removed";
    /// False: the operator skipped the removal.
    pub const SKIPPED: &str = "Skipped";
    /// False: the deadline passed first.
    pub const TIMED_OUT: &str = "TimedOut";
}

/// The condition for `reason` with `message`.
pub fn condition<'a>(reason: &'a str, message: &'a str) -> capi::Condition<'a> {
    capi::Condition {
        type_: names::WORKLOADS_REMOVED_CONDITION,
        status: reason == reason::REMOVED,
        reason,
        message,
    }
}

/// The Event due when the condition's reason becomes `reason` (`None`: it already was): its
/// reason, whether it is a Warning, and its note.
pub fn event_for(
    live: Option<&Value>,
    reason: &str,
    message: &str,
) -> Option<(&'static str, bool, String)> {
    let live_reason = live.and_then(|c| c.get("reason")).and_then(Value::as_str);
    if live_reason == Some(reason) {
        return None;
    }
    let (event, warning) = match reason {
        reason::REMOVING => ("FleetWorkloadsRemoving", false),
        reason::REMOVED => ("FleetWorkloadsRemoved", false),
        reason::SKIPPED => ("FleetWorkloadsRemovalSkipped", true),
        reason::TIMED_OUT => ("FleetWorkloadsRemovalTimedOut", true),
        _ => return None,
    };
    Some((event, warning, event_note(message)))
}

/// A time as Kubernetes writes it (RFC 3339, seconds, UTC).
pub fn rfc3339(time: Timestamp) -> String {
    time.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn short(duration: Duration) -> String {
    let secs = duration.as_secs();
    if secs.is_multiple_of(60) && secs > 0 {
        format!("{}m", secs / 60)
    } else {
        format!("{secs}s")
    }
}

#[cfg(test)]
#[path = "teardown_tests.rs"]
mod tests;
