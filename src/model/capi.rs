//! What we read from CAPI objects, extracted tolerantly from their JSON.
//!
//! We never deserialise CAPI objects into the full generated types: one unknown enum value in
//! one Cluster would break the whole watch. Instead these views pick the fields we use, from
//! both shapes a Cluster can have (`v1beta2`, CAPI ≥ 1.11 storage; `v1beta1`, what Runtime SDK
//! hooks receive from CAPI ≤ 1.12), and default what is missing.

use std::collections::BTreeMap;

use serde_json::{Map, Value};
use serde_with::skip_serializing_none;

use crate::api::{CapiCluster, CapiClusterClass};
use crate::names;

/// Labels or annotations.
pub type StringMap = BTreeMap<String, String>;

/// The Cluster API group version the controllers watch.
pub const WATCHED_API_VERSION: &str = "cluster.x-k8s.io/v1beta2";

/// The resources of [`WATCHED_API_VERSION`] the controllers watch.
pub const WATCHED_RESOURCES: [&str; 2] = ["clusters", "clusterclasses"];

/// What is wrong with the management cluster's Cluster API, from discovery: `served` holds the
/// resource names served in [`WATCHED_API_VERSION`], `None` when that group version is not
/// served at all. Cluster API v1.11.0 is the first release serving `v1beta2`
/// (kubernetes-sigs/cluster-api `config/crd/bases/cluster.x-k8s.io_clusters.yaml`: v1.10.0
/// serves only `v1beta1`, v1.11.0 serves `v1beta1` and `v1beta2`, stored as `v1beta2`).
pub fn cluster_api_problem(served: Option<&[String]>) -> Option<String> {
    const HINT: &str = "this provider needs Cluster API v1.11 or later (v1.10 and earlier serve only cluster.x-k8s.io/v1beta1): install or upgrade it with clusterctl";
    let Some(served) = served else {
        return Some(format!(
            "the API server does not serve {WATCHED_API_VERSION}: {HINT}"
        ));
    };
    let missing: Vec<&str> = WATCHED_RESOURCES
        .into_iter()
        .filter(|resource| !served.iter().any(|s| s == resource))
        .collect();
    (!missing.is_empty()).then(|| {
        format!(
            "the API server serves {WATCHED_API_VERSION} without {}: {HINT}",
            missing.join(", ")
        )
    })
}

/// A reference from a Cluster to its control plane or infrastructure object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderRef {
    /// API group (`v1beta2` `apiGroup`, or the group of `v1beta1` `apiVersion`).
    pub group: String,
    /// `v1beta1` references carry a version; `v1beta2` ones do not (the served version is used).
    pub version: Option<String>,
    pub kind: String,
    pub name: String,
    pub namespace: String,
}

/// The ClusterClass a Cluster uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassRef {
    pub name: String,
    /// The class namespace: `classRef.namespace` (or `v1beta1` `classNamespace`), defaulting to
    /// the Cluster's namespace.
    pub namespace: String,
}

/// The parts of a CAPI `Cluster` the provider acts on.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterView {
    /// `cluster.x-k8s.io/v1beta2` or `/v1beta1`: as sent, or deduced from the shape (owner
    /// references must name a version the API server serves; CAPI v1.10 has no v1beta2).
    pub api_version: String,
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub labels: StringMap,
    pub annotations: StringMap,
    pub finalizers: Vec<String>,
    pub deleting: bool,
    /// `metadata.deletionTimestamp`, when it is set and reads as a time.
    pub deleted_at: Option<k8s_openapi::jiff::Timestamp>,
    /// `spec.paused` or the `cluster.x-k8s.io/paused` annotation.
    pub paused: bool,
    /// `status.initialization.controlPlaneInitialized` (`v1beta2`).
    pub control_plane_initialized: bool,
    pub class: Option<ClassRef>,
    pub control_plane_ref: Option<ProviderRef>,
    pub infrastructure_ref: Option<ProviderRef>,
    /// `spec.topology.variables` as name → value.
    pub variables: BTreeMap<String, Value>,
    /// `spec.topology.version`: the version the Cluster is to run.
    pub topology_version: Option<String>,
    /// Whether Cluster API has reached `spec.topology.version`: its `TopologyReconciled`
    /// condition is True for the current generation and no upgrade is under way
    /// (`runtime.cluster.x-k8s.io/pending-hooks` does not list AfterClusterUpgrade, which
    /// cluster-api v1.11/v1.12 mark pending when an upgrade starts: `exp/topology/desiredstate/`,
    /// `internal/hooks/tracking.go`). While an upgrade runs the condition is False (v1.11 reasons
    /// `ControlPlaneUpgradePending`, …; v1.12 `ClusterUpgrading`).
    pub topology_settled: bool,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// Our own live conditions: [`names::FLEET_CONFLICT_CONDITION`] ([`crate::model::turtles`])
    /// and [`names::WORKLOADS_REMOVED_CONDITION`] ([`crate::model::teardown`]).
    pub conflict: Option<Value>,
    pub workloads_removed: Option<Value>,
    /// Rancher deploys a Fleet agent of its own to it, as the Cluster controller last read
    /// ([`crate::model::turtles::rancher_deploys_fleet`]; false from the object alone).
    pub rancher_fleet: bool,
}

impl ClusterView {
    /// Extracts the view from a Cluster object (either API version). `None` when the object has
    /// no name or namespace.
    pub fn from_json(object: &Value) -> Option<Self> {
        Self::from_parts(
            object.get("apiVersion").and_then(Value::as_str),
            object.get("metadata")?,
            object.get("spec").unwrap_or(&Value::Null),
            object.get("status").unwrap_or(&Value::Null),
        )
    }

    /// The view of a watched Cluster, without serialising its spec and status (this runs for
    /// every Cluster on every namespace reconcile and status recount).
    pub fn of(cluster: &CapiCluster) -> Option<Self> {
        // Only the metadata fields the view reads: serialising the whole metadata (with its
        // managedFields) for every decision was most of a decision's cost.
        let meta = &cluster.metadata;
        let metadata = serde_json::json!({
            "name": meta.name,
            "namespace": meta.namespace,
            "uid": meta.uid,
            "labels": meta.labels,
            "annotations": meta.annotations,
            "finalizers": meta.finalizers,
            "deletionTimestamp": meta.deletion_timestamp,
            "generation": meta.generation,
        });
        // Decode only the fields the view reads (serde skips the rest without building it):
        // a namespace decides all its Clusters on each reconcile, and a whole body is several
        // KiB of trees. Anything the partial form does not accept reads the whole body.
        let (spec, status) = match serde_json::from_str::<ViewedBody>(&cluster.body.text()) {
            Ok(viewed) => viewed.into_parts(),
            Err(_) => {
                let mut body = cluster.body.to_map();
                (
                    body.remove("spec").unwrap_or(Value::Null),
                    body.remove("status").unwrap_or(Value::Null),
                )
            }
        };
        Self::from_parts(
            Some(cluster.api_version.as_str()),
            &metadata,
            &spec,
            &status,
        )
    }

    fn from_parts(
        api_version: Option<&str>,
        metadata: &Value,
        spec: &Value,
        status: &Value,
    ) -> Option<Self> {
        let name = str_at(metadata, "name")?.to_string();
        let namespace = str_at(metadata, "namespace")?.to_string();
        let annotations = string_map(metadata.get("annotations"));
        let generation = metadata.get("generation").and_then(Value::as_i64);
        let topology = spec.get("topology").filter(|t| t.is_object());
        let class = topology.and_then(|t| class_ref(t, &namespace));
        let api_version = api_version
            .filter(|v| v.starts_with("cluster.x-k8s.io/"))
            .map(str::to_string)
            .unwrap_or_else(|| {
                let v1beta1 = topology.is_some_and(|t| t.get("class").is_some())
                    || ["controlPlaneRef", "infrastructureRef"]
                        .iter()
                        .any(|r| spec.get(*r).and_then(|r| r.get("apiVersion")).is_some());
                format!(
                    "cluster.x-k8s.io/{}",
                    if v1beta1 { "v1beta1" } else { "v1beta2" }
                )
            });
        Some(Self {
            api_version,
            uid: str_at(metadata, "uid").unwrap_or_default().to_string(),
            labels: string_map(metadata.get("labels")),
            finalizers: finalizers(metadata),
            deleting: is_deleting(metadata),
            deleted_at: metadata
                .get("deletionTimestamp")
                .and_then(Value::as_str)
                .and_then(|time| time.parse().ok()),
            paused: spec.get("paused").and_then(Value::as_bool) == Some(true)
                || annotations.contains_key(names::CAPI_PAUSED_ANNOTATION),
            control_plane_initialized: status
                .pointer("/initialization/controlPlaneInitialized")
                .and_then(Value::as_bool)
                == Some(true),
            control_plane_ref: spec
                .get("controlPlaneRef")
                .and_then(|r| object_ref(r, &namespace)),
            infrastructure_ref: spec
                .get("infrastructureRef")
                .and_then(|r| object_ref(r, &namespace)),
            topology_version: topology
                .and_then(|t| str_at(t, "version"))
                .filter(|v| !v.is_empty())
                .map(str::to_string),
            topology_settled: topology_settled(generation, status, &annotations),
            generation,
            conflict: live_condition(Some(status), names::FLEET_CONFLICT_CONDITION).cloned(),
            workloads_removed: live_condition(Some(status), names::WORKLOADS_REMOVED_CONDITION)
                .cloned(),
            rancher_fleet: false,
            variables: topology
                .and_then(|t| t.get("variables"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|v| Some((str_at(v, "name")?.to_string(), v.get("value")?.clone())))
                .collect(),
            class,
            annotations,
            name,
            namespace,
        })
    }

    /// Whether the Cluster owns the object of `meta` (an owner reference with its uid; never
    /// while its uid is unknown).
    pub fn owns(&self, meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> bool {
        let mut owners = meta.owner_references.iter().flatten();
        !self.uid.is_empty() && owners.any(|owner| owner.uid == self.uid)
    }

    /// Whether the Cluster carries our finalizer.
    pub fn has_finalizer(&self) -> bool {
        self.finalizers.iter().any(|f| f == names::FINALIZER)
    }

    /// The ClusterClass in another namespace, if the Cluster uses one (the only case that needs
    /// a cross-namespace ClusterGroup and BundleNamespaceMapping).
    pub fn cross_namespace_class(&self) -> Option<&ClassRef> {
        self.class
            .as_ref()
            .filter(|c| c.namespace != self.namespace)
    }
}

/// Cluster API's condition saying the topology is applied (`TopologyReconciled`).
pub const TOPOLOGY_RECONCILED: &str = "TopologyReconciled";

/// See [`ClusterView::topology_settled`].
fn topology_settled(generation: Option<i64>, status: &Value, annotations: &StringMap) -> bool {
    let reconciled = live_condition(Some(status), TOPOLOGY_RECONCILED).is_some_and(|c| {
        str_at(c, "status") == Some("True")
            && c.get("observedGeneration").and_then(Value::as_i64) == generation
    });
    let upgrading = annotations
        .get(names::CAPI_PENDING_HOOKS_ANNOTATION)
        .is_some_and(|hooks| hooks.split(',').any(|h| h.trim() == "AfterClusterUpgrade"));
    reconciled && !upgrading
}

/// The fields of a Cluster's body that [`ClusterView::from_parts`] reads (written back, absent
/// fields left out, as the spec and status it reads).
#[derive(serde::Deserialize)]
struct ViewedBody {
    spec: Option<ViewedSpec>,
    status: Option<ViewedStatus>,
}

#[skip_serializing_none]
#[derive(serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct ViewedSpec {
    paused: Option<Value>,
    control_plane_ref: Option<Value>,
    infrastructure_ref: Option<Value>,
    topology: Option<ViewedTopology>,
}

#[skip_serializing_none]
#[derive(serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct ViewedTopology {
    class_ref: Option<Value>,
    class: Option<Value>,
    class_namespace: Option<Value>,
    variables: Option<Value>,
    version: Option<Value>,
}

#[skip_serializing_none]
#[derive(serde::Deserialize, serde::Serialize)]
struct ViewedStatus {
    initialization: Option<Value>,
    conditions: Option<Value>,
}

impl ViewedBody {
    /// `spec` and `status` holding just the viewed fields (`null` when absent, which
    /// [`ClusterView::from_parts`] reads as empty).
    fn into_parts(self) -> (Value, Value) {
        let spec = serde_json::to_value(self.spec).unwrap_or_default();
        (spec, serde_json::to_value(self.status).unwrap_or_default())
    }
}

/// The parts of a CAPI `ClusterClass` the provider acts on.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassView {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub labels: StringMap,
    pub finalizers: Vec<String>,
    pub deleting: bool,
}

impl ClassView {
    /// The view of a watched ClusterClass (only its metadata is read).
    pub fn of(class: &CapiClusterClass) -> Option<Self> {
        Self::from_metadata(&serde_json::to_value(&class.metadata).ok()?)
    }

    fn from_metadata(metadata: &Value) -> Option<Self> {
        Some(Self {
            name: str_at(metadata, "name")?.to_string(),
            namespace: str_at(metadata, "namespace")?.to_string(),
            uid: str_at(metadata, "uid").unwrap_or_default().to_string(),
            labels: string_map(metadata.get("labels")),
            finalizers: finalizers(metadata),
            deleting: is_deleting(metadata),
        })
    }
}

/// Keeps, of a Cluster's `status`, only what the provider reads: `initialization` (see
/// [`ClusterView`]), the `FleetReady` condition
/// ([`crate::model::fleet_health::live_condition`]), `FleetAddonConflict`, `TopologyReconciled`
/// ([`ClusterView::topology_settled`]), `FleetRolloutHeld`, `FleetWorkloadsRemoved`
/// ([`crate::model::teardown::interrupted`]), and `Available` while False
/// ([`crate::model::rollout::unavailable`]). The caches hold every Cluster, and Cluster
/// API's own conditions (v1beta2 and the deprecated v1beta1 ones) are most of a live Cluster's
/// status; nothing here reads them (`templateValues` take metadata and spec only).
pub fn keep_read_status(body: &mut serde_json::Map<String, Value>) {
    let Some(Value::Object(status)) = body.get_mut("status") else {
        return;
    };
    status.retain(|key, _| key == "initialization" || key == "conditions");
    if let Some(Value::Array(conditions)) = status.get_mut("conditions") {
        conditions.retain(|c| {
            let type_ = c.get("type").and_then(Value::as_str);
            let false_ = c.get("status").and_then(Value::as_str) == Some("False");
            let kept = [
                crate::names::FLEET_READY_CONDITION,
                crate::names::FLEET_CONFLICT_CONDITION,
                crate::names::ROLLOUT_HELD_CONDITION,
                crate::names::WORKLOADS_REMOVED_CONDITION,
                TOPOLOGY_RECONCILED,
            ];
            // Rollout waves hold a Cluster Cluster API reports not available.
            type_.is_some_and(|t| kept.contains(&t)) || (type_ == Some("Available") && false_)
        });
        if conditions.is_empty() {
            status.remove("conditions");
        }
    }
}

/// Annotations that change without the user changing anything; kept out of `templateValues`
/// so that values do not churn.
const VOLATILE_ANNOTATIONS: &[&str] = &[
    names::LAST_APPLIED_ANNOTATION,
    "cluster.x-k8s.io/conversion-data",
    "runtime.cluster.x-k8s.io/pending-hooks",
    "runtime.cluster.x-k8s.io/ok-to-delete",
];

/// The stable part of an object for `templateValues`: `apiVersion`, `kind`, `metadata.name`,
/// `metadata.namespace`, `metadata.labels`, `metadata.annotations` (minus volatile ones) and
/// `spec`. Status, managed fields, resource version, uid, generation, timestamps, owner
/// references and finalizers are left out: they change without the user changing anything.
pub fn template_object(object: &Value) -> Value {
    let mut out = Map::new();
    for key in ["apiVersion", "kind"] {
        if let Some(v) = object.get(key) {
            out.insert(key.to_string(), v.clone());
        }
    }
    let mut metadata = Map::new();
    if let Some(source) = object.get("metadata").and_then(Value::as_object) {
        for key in ["name", "namespace", "labels"] {
            if let Some(v) = source.get(key).filter(|v| !v.is_null()) {
                metadata.insert(key.to_string(), v.clone());
            }
        }
        if let Some(annotations) = source.get("annotations").and_then(Value::as_object) {
            let kept: Map<String, Value> = annotations
                .iter()
                .filter(|(k, _)| !VOLATILE_ANNOTATIONS.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            if !kept.is_empty() {
                metadata.insert("annotations".to_string(), Value::Object(kept));
            }
        }
    }
    out.insert("metadata".to_string(), Value::Object(metadata));
    if let Some(spec) = object.get("spec") {
        out.insert("spec".to_string(), spec.clone());
    }
    Value::Object(out)
}

/// The ClusterClass of a Cluster's `spec.topology`: `v1beta2` `classRef {name, namespace}`, or
/// `v1beta1` `class` and `classNamespace`; the namespace defaults to the Cluster's.
pub fn class_ref(topology: &Value, cluster_namespace: &str) -> Option<ClassRef> {
    let (name, namespace) = match topology.get("classRef") {
        Some(r) if r.is_object() => (str_at(r, "name")?, str_at(r, "namespace")),
        _ => (
            str_at(topology, "class")?,
            str_at(topology, "classNamespace"),
        ),
    };
    if name.is_empty() {
        return None;
    }
    Some(ClassRef {
        name: name.to_string(),
        namespace: namespace
            .filter(|ns| !ns.is_empty())
            .unwrap_or(cluster_namespace)
            .to_string(),
    })
}

fn object_ref(reference: &Value, cluster_namespace: &str) -> Option<ProviderRef> {
    let kind = str_at(reference, "kind")?.to_string();
    let name = str_at(reference, "name")?.to_string();
    let (group, version) = match (
        str_at(reference, "apiGroup"),
        str_at(reference, "apiVersion"),
    ) {
        (Some(group), _) => (group.to_string(), None),
        (None, Some(api_version)) => match api_version.split_once('/') {
            Some((group, version)) => (group.to_string(), Some(version.to_string())),
            None => (String::new(), Some(api_version.to_string())),
        },
        (None, None) => return None,
    };
    Some(ProviderRef {
        group,
        version,
        kind,
        name,
        namespace: str_at(reference, "namespace")
            .filter(|ns| !ns.is_empty())
            .unwrap_or(cluster_namespace)
            .to_string(),
    })
}

fn finalizers(metadata: &Value) -> Vec<String> {
    metadata
        .get("finalizers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect()
}

/// One condition of a Cluster's `status.conditions` (Cluster API v1beta2 shape:
/// `api/core/v1beta2/cluster_types.go`, a list map keyed by `type`), as this provider writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Condition<'a> {
    pub type_: &'a str,
    /// `True` (else `False`).
    pub status: bool,
    pub reason: &'a str,
    pub message: &'a str,
}

/// The condition of type `type_` in a Cluster's `status`, if any.
pub fn live_condition<'a>(status: Option<&'a Value>, type_: &str) -> Option<&'a Value> {
    status?
        .get("conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
}

/// The condition to apply, or `None` when the live one already says exactly this (same status,
/// reason, message and observedGeneration). `lastTransitionTime` is kept while the status stays
/// the same, and is `now` when it changes.
pub fn condition_to_apply(
    live: Option<&Value>,
    wanted: &Condition<'_>,
    generation: Option<i64>,
    now: k8s_openapi::jiff::Timestamp,
) -> Option<Value> {
    let status = if wanted.status { "True" } else { "False" };
    let field = |name: &str| live.and_then(|c| c.get(name));
    let live_status = field("status").and_then(Value::as_str);
    let unchanged = live_status == Some(status)
        && field("reason").and_then(Value::as_str) == Some(wanted.reason)
        && field("message").and_then(Value::as_str) == Some(wanted.message)
        && field("observedGeneration").and_then(Value::as_i64) == generation;
    if unchanged {
        return None;
    }
    let transition = match field("lastTransitionTime").and_then(Value::as_str) {
        Some(time) if live_status == Some(status) => time.to_string(),
        _ => now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
    };
    let mut condition = serde_json::json!({
        "type": wanted.type_,
        "status": status,
        "reason": wanted.reason,
        "message": wanted.message,
        "lastTransitionTime": transition,
    });
    if let Some(generation) = generation {
        condition["observedGeneration"] = serde_json::json!(generation);
    }
    Some(condition)
}

/// Whether writing a condition of status `status` changes the live one's status (an Event is
/// due): a new condition changes it only when it is True.
pub fn status_changes(live: Option<&Value>, status: bool) -> bool {
    let wanted = if status { "True" } else { "False" };
    match live.and_then(|c| c.get("status")).and_then(Value::as_str) {
        Some(live) => live != wanted,
        None => status,
    }
}

/// Longest Event note the API server accepts (`events.k8s.io/v1` `note`: 1 kB).
pub const MAX_EVENT_NOTE_BYTES: usize = 1024;

/// `note` cut on a character boundary to fit an Event (the
/// Cluster's `FleetReady` and teardown Events).
pub fn event_note(note: &str) -> String {
    if note.len() <= MAX_EVENT_NOTE_BYTES {
        return note.to_string();
    }
    let mut end = MAX_EVENT_NOTE_BYTES - '…'.len_utf8();
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &note[..end])
}

fn is_deleting(metadata: &Value) -> bool {
    metadata
        .get("deletionTimestamp")
        .is_some_and(|t| !t.is_null())
}

fn str_at<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

fn string_map(value: Option<&Value>) -> StringMap {
    value
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect()
}

#[cfg(test)]
mod cluster_api_tests {
    use super::*;

    #[test]
    fn the_watched_cluster_api_must_be_served() {
        let both = ["clusters".to_string(), "clusterclasses".to_string()];
        let no_classes = ["clusters".to_string()];
        let rows: [(Option<&[String]>, Option<&str>); 4] = [
            (Some(&both), None),
            // Cluster API v1.10: no v1beta2 at all.
            (None, Some("does not serve cluster.x-k8s.io/v1beta2")),
            (Some(&no_classes), Some("without clusterclasses")),
            (Some(&[]), Some("without clusters, clusterclasses")),
        ];
        for (served, expected) in rows {
            let problem = cluster_api_problem(served);
            match expected {
                None => assert_eq!(problem, None),
                Some(part) => {
                    let problem = problem.expect("a problem");
                    assert!(problem.contains(part), "{problem}");
                    assert!(problem.contains("v1.11 or later"), "{problem}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    impl ClassView {
        pub fn from_json(object: &Value) -> Option<Self> {
            Self::from_metadata(object.get("metadata")?)
        }
    }

    fn v1beta2_cluster() -> Value {
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "Cluster",
            "metadata": {
                "name": "capi-quickstart", "namespace": "default", "uid": "u-1",
                "resourceVersion": "42", "generation": 3,
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"cni": "kindnet"},
                "annotations": {
                    "example.com/a": "b",
                    "kubectl.kubernetes.io/last-applied-configuration": "{}",
                    "runtime.cluster.x-k8s.io/pending-hooks": "AfterControlPlaneInitialized"
                },
                "finalizers": ["cluster.cluster.x-k8s.io", "fleet.addons.cluster.x-k8s.io"],
                "managedFields": [{"manager": "kubectl"}],
                "ownerReferences": [{"kind": "X", "name": "y", "uid": "z", "apiVersion": "v1"}]
            },
            "spec": {
                "controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": "cp"},
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerCluster", "name": "infra"},
                "topology": {
                    "classRef": {"name": "quick-start", "namespace": "clusterclass"},
                    "version": "v1.35.0",
                    "variables": [{"name": "imageRepository", "value": "registry.k8s.io"}, {"name": "cfg", "value": {"a": 1}}]
                }
            },
            "status": {"initialization": {"controlPlaneInitialized": true}, "phase": "SomethingNew"}
        })
    }

    #[test]
    fn reads_v1beta2_cluster() {
        let view = ClusterView::from_json(&v1beta2_cluster()).expect("view");
        assert_eq!(view.api_version, "cluster.x-k8s.io/v1beta2");
        assert_eq!(view.name, "capi-quickstart");
        assert_eq!(view.namespace, "default");
        assert_eq!(view.uid, "u-1");
        assert!(view.has_finalizer());
        assert!(!view.deleting && !view.paused);
        assert!(view.control_plane_initialized);
        assert_eq!(
            view.class,
            Some(ClassRef {
                name: "quick-start".into(),
                namespace: "clusterclass".into()
            })
        );
        assert_eq!(
            view.cross_namespace_class().map(|c| c.name.as_str()),
            Some("quick-start")
        );
        let cp = view.control_plane_ref.expect("cp ref");
        assert_eq!(
            (
                cp.group.as_str(),
                cp.version,
                cp.kind.as_str(),
                cp.name.as_str(),
                cp.namespace.as_str()
            ),
            (
                "controlplane.cluster.x-k8s.io",
                None,
                "KubeadmControlPlane",
                "cp",
                "default"
            )
        );
        assert_eq!(view.variables["imageRepository"], json!("registry.k8s.io"));
        assert_eq!(view.variables["cfg"], json!({"a": 1}));
    }

    #[test]
    fn caches_keep_only_the_status_we_read() {
        let mut cluster = v1beta2_cluster();
        cluster["status"] = json!({
            "initialization": {"controlPlaneInitialized": true, "infrastructureProvisioned": true},
            "phase": "Provisioned",
            "conditions": [
                {"type": "Available", "status": "True"},
                {"type": "FleetReady", "status": "False", "reason": "AgentNotCheckedIn"},
                {"type": "RemoteConnectionProbe", "status": "True"},
                {"type": "FleetWorkloadsRemoved", "status": "False", "reason": "Removing"}
            ],
            "deprecated": {"v1beta1": {"conditions": [{"type": "Ready", "status": "True"}]}},
            "controlPlane": {"replicas": 3}
        });
        let before = ClusterView::from_json(&cluster).expect("view");
        let mut body = cluster.as_object().expect("object").clone();
        keep_read_status(&mut body);
        assert_eq!(
            body["status"],
            json!({
                "initialization": {"controlPlaneInitialized": true, "infrastructureProvisioned": true},
                "conditions": [{"type": "FleetReady", "status": "False", "reason": "AgentNotCheckedIn"},
                    {"type": "FleetWorkloadsRemoved", "status": "False", "reason": "Removing"}]
            })
        );
        let pruned = Value::Object(body.clone());
        assert_eq!(ClusterView::from_json(&pruned), Some(before));
        assert!(crate::model::fleet_health::live_condition(pruned.get("status")).is_some());

        // No condition of ours: no empty list left behind; no status: nothing to do.
        body["status"]["conditions"] = json!([{"type": "Available", "status": "True"}]);
        keep_read_status(&mut body);
        assert_eq!(
            body["status"],
            json!({"initialization": {"controlPlaneInitialized": true, "infrastructureProvisioned": true}})
        );
        let unavailable = json!({"type": "Available", "status": "False", "message": "* WorkersAvailable: 0 of 3"});
        body["status"]["conditions"] = json!([unavailable]);
        keep_read_status(&mut body);
        assert_eq!(body["status"]["conditions"], json!([unavailable]));
        body.remove("status");
        keep_read_status(&mut body);
        assert!(!body.contains_key("status"));
    }

    #[test]
    fn typed_cluster_reads_like_its_json() {
        let json = v1beta2_cluster();
        let cluster: CapiCluster = serde_json::from_value(json.clone()).expect("cluster");
        assert_eq!(ClusterView::of(&cluster), ClusterView::from_json(&json));

        // Every metadata field the view reads, and one it must not (managedFields).
        let mut deleting = json;
        deleting["metadata"]["uid"] = json!("u-1");
        deleting["metadata"]["finalizers"] = json!([names::FINALIZER, "other"]);
        deleting["metadata"]["deletionTimestamp"] = json!("2026-11-23T10:00:00Z");
        deleting["metadata"]["annotations"] = json!({names::CAPI_PAUSED_ANNOTATION: ""});
        deleting["metadata"]["managedFields"] = json!([{"manager": "m", "operation": "Apply",
            "apiVersion": "cluster.x-k8s.io/v1beta2", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]);
        let cluster: CapiCluster = serde_json::from_value(deleting.clone()).expect("cluster");
        let view = ClusterView::of(&cluster).expect("view");
        assert_eq!(Some(&view), ClusterView::from_json(&deleting).as_ref());
        assert!(view.deleting && view.paused && view.has_finalizer());
        assert_eq!(view.uid, "u-1");
    }

    /// The partial decode of [`ClusterView::of`] reads what the whole body reads, for the
    /// real-shaped fixture and for shapes it does not accept (then it reads the whole body).
    #[test]
    fn the_partial_body_decode_reads_like_the_whole_body() {
        let fixture: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/capi/cluster-provisioned-v1beta2.json"
        ))
        .expect("fixture");
        let mut rows = vec![fixture.clone(), v1beta2_cluster()];
        let odd = [
            json!({"topology": null}),
            json!({"topology": "not an object"}),
            json!({"topology": {"class": "old", "classNamespace": "c", "variables": [{"name": "v", "value": {"a": [1]}}]}}),
            json!({"paused": "yes", "controlPlaneRef": 3}),
            json!(null),
        ];
        for spec in odd {
            let mut cluster = fixture.clone();
            cluster["spec"] = spec;
            rows.push(cluster);
        }
        let mut no_status = fixture.clone();
        no_status.as_object_mut().expect("object").remove("status");
        rows.push(no_status);
        let mut odd_status = fixture;
        odd_status["status"] = json!({"initialization": "done"});
        rows.push(odd_status);
        for json in rows {
            let cluster: CapiCluster = serde_json::from_value(json.clone()).expect("cluster");
            assert_eq!(
                ClusterView::of(&cluster),
                ClusterView::from_json(&json),
                "{}",
                json["spec"]
            );
        }
    }

    #[test]
    fn reads_v1beta1_cluster() {
        let cluster = json!({
            "metadata": {"name": "c1", "namespace": "ns"},
            "spec": {
                "paused": true,
                "controlPlaneRef": {"apiVersion": "controlplane.cluster.x-k8s.io/v1beta1", "kind": "RKE2ControlPlane", "name": "cp", "namespace": "ns"},
                "topology": {"class": "rke2", "classNamespace": "classes", "version": "v1.33.0"}
            }
        });
        let view = ClusterView::from_json(&cluster).expect("view");
        assert_eq!(
            view.api_version, "cluster.x-k8s.io/v1beta1",
            "deduced from the shape"
        );
        assert!(view.paused);
        assert!(!view.control_plane_initialized);
        assert_eq!(
            view.class.as_ref().map(|c| c.namespace.as_str()),
            Some("classes")
        );
        let cp = view.control_plane_ref.expect("cp ref");
        assert_eq!(cp.group, "controlplane.cluster.x-k8s.io");
        assert_eq!(cp.version.as_deref(), Some("v1beta1"));
    }

    #[test]
    fn class_in_own_namespace_is_not_cross_namespace() {
        for topology in [
            json!({"classRef": {"name": "c"}, "version": "v1"}),
            json!({"classRef": {"name": "c", "namespace": "ns"}, "version": "v1"}),
            json!({"class": "c", "version": "v1"}),
        ] {
            let cluster = json!({"metadata": {"name": "x", "namespace": "ns"}, "spec": {"topology": topology}});
            let view = ClusterView::from_json(&cluster).expect("view");
            assert_eq!(
                view.class.as_ref().map(|c| c.namespace.as_str()),
                Some("ns")
            );
            assert!(view.cross_namespace_class().is_none());
        }
    }

    #[test]
    fn paused_by_annotation_and_deleting() {
        let cluster = json!({"metadata": {
            "name": "x", "namespace": "ns",
            "annotations": {"cluster.x-k8s.io/paused": ""},
            "deletionTimestamp": "2026-01-01T00:00:00Z"
        }});
        let view = ClusterView::from_json(&cluster).expect("view");
        assert!(view.paused && view.deleting);
        assert_eq!(
            view.deleted_at.map(|t| t.to_string()),
            Some("2026-01-01T00:00:00Z".to_string())
        );
        assert!(view.class.is_none() && view.control_plane_ref.is_none());
        assert!(ClusterView::from_json(&json!({"metadata": {"name": "x"}})).is_none());
    }

    #[test]
    fn template_object_keeps_only_stable_fields() {
        let stable = template_object(&v1beta2_cluster());
        assert_eq!(
            stable,
            json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2",
                "kind": "Cluster",
                "metadata": {
                    "name": "capi-quickstart", "namespace": "default",
                    "labels": {"cni": "kindnet"},
                    "annotations": {"example.com/a": "b"}
                },
                "spec": v1beta2_cluster()["spec"].clone()
            })
        );
        // What changes without the user changing anything does not change the result.
        let mut churned = v1beta2_cluster();
        churned["metadata"]["resourceVersion"] = json!("43");
        churned["metadata"]["generation"] = json!(4);
        churned["metadata"]["finalizers"] = json!([]);
        churned["status"] = json!({"phase": "Provisioned"});
        churned["metadata"]["annotations"]["runtime.cluster.x-k8s.io/pending-hooks"] = json!("");
        assert_eq!(template_object(&churned), stable);
    }
}
