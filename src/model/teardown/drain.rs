//! The drain: the mark that starts the removal, the selection labels taken off the Fleet
//! Cluster, and what the removal records on it.

use std::collections::BTreeSet;

use fleet_api_rs::fleet_cluster::Cluster as FleetCluster;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Map, Value, json};

use crate::model::capi::{ClusterView, StringMap};
use crate::model::config::ClusterImport;
use crate::model::fleet::{Registration, desired_fleet_cluster, fleet_cluster_class_labels};
use crate::model::teardown::report::rfc3339;
use crate::names;

/// Label prefixes Fleet and Rancher reserve for their own bookkeeping and targeting
/// (rancher/fleet v0.12.19–v0.16.1 `pkg/apis/fleet.cattle.io/v1alpha1/labels.go`
/// `FleetLabelPrefix`, `ManagementLabelPrefix`): the drain keeps them (e.g.
/// `fleet.cattle.io/non-managed-agent`, which decides whether Fleet manages the agent).
pub const FLEET_RESERVED_LABEL_PREFIXES: [&str; 2] = ["fleet.cattle.io/", "management.cattle.io/"];

/// Whether the removal started: BeforeClusterDelete put [`names::TEARDOWN_LABEL`] on the Fleet
/// Cluster.
pub fn started(labels: &StringMap) -> bool {
    labels.get(names::TEARDOWN_LABEL).map(String::as_str) == Some("true")
}

/// A Fleet Cluster's labels (an absent map is empty).
pub fn labels_of(fleet: &FleetCluster) -> StringMap {
    fleet.metadata.labels.clone().unwrap_or_default()
}

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
                labels.extend(fleet_cluster_class_labels(class));
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
