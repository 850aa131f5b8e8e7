//! What the move controller does on the target (the workload cluster, reached through the
//! Cluster's kubeconfig Secret) and on the source besides publishing Bundles, decided from what
//! it reads there: which objects the target already has and keeps, which Secrets to write, which
//! owner references to restore, which copies to remove after a failure, which source objects to
//! fence, and whether the source is provisioned enough to move.
//!
//! Owner references follow clusterctl's `buildOwnerChain` (cluster-api v1.12.0
//! `cmd/clusterctl/client/cluster/mover.go`): the source's references with the UIDs the target's
//! API server gave the owners' copies. clusterctl writes them at create time because it creates
//! owners first with a client; our copies come through Fleet, whose agent cannot learn those
//! UIDs at render time on every supported version (see [`super::move_plan`]), so they are
//! patched on once Fleet reports the copies there, while every copy is still paused. Fleet's
//! agent does not count the added references as drift: it diffs the live object against the
//! rendered one with the rendered one as the last applied state, so fields only the live object
//! has are not a change (rancher/fleet v0.16.1 `internal/cmd/agent/deployer/desiredset/diff.go`
//! `Diff`, `internal/cmd/agent/deployer/internal/diff/diff.go` `TwoWayDiff`).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::move_graph::{MoveGraph, MoveNode, ObjectId};
use super::move_plan::MOVE_COPY_ANNOTATION;
use super::move_types::group_of;
use crate::names;

/// An object on either side, by API group (not version: the target may list another version of
/// the same type), kind, namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub group: String,
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
}

impl Key {
    pub fn of(id: &ObjectId) -> Self {
        Self {
            group: group_of(&id.api_version).to_string(),
            kind: id.kind.clone(),
            namespace: id.namespace.clone(),
            name: id.name.clone(),
        }
    }
}

/// The move's objects as the target shows them (listed per type and namespace), by [`Key`].
#[derive(Clone, Debug, Default)]
pub struct TargetView {
    pub objects: BTreeMap<Key, Value>,
}

impl TargetView {
    pub fn get(&self, id: &ObjectId) -> Option<&Value> {
        self.objects.get(&Key::of(id))
    }

    fn is_copy(&self, id: &ObjectId, copy_of: &str) -> bool {
        self.get(id)
            .is_some_and(|o| o["metadata"]["annotations"][MOVE_COPY_ANNOTATION] == copy_of)
    }
}

/// Global objects (and what they own) that the target already has, not as a copy of this move:
/// they are left out of the move and left as they are, as clusterctl leaves an existing global
/// object (`createTargetObject`: `isGlobal || isGlobalHierarchy` on AlreadyExists).
pub fn keep_on_target(graph: &MoveGraph, view: &TargetView, copy_of: &str) -> BTreeSet<ObjectId> {
    graph
        .nodes()
        .filter(|n| n.global && view.get(&n.id).is_some() && !view.is_copy(&n.id, copy_of))
        .map(|n| n.id.clone())
        .collect()
}

/// The Secrets among `desired` (from [`super::move_plan::target_secrets`]) the target does not
/// show as desired yet: missing, or with other data, type, labels or annotations. Owner
/// references are not compared (they are restored with the others).
pub fn secret_writes<'a>(desired: &'a [Value], view: &TargetView) -> Vec<&'a Value> {
    desired
        .iter()
        .filter(|want| {
            let key = Key {
                group: String::new(),
                kind: "Secret".into(),
                namespace: want["metadata"]["namespace"].as_str().map(str::to_string),
                name: want["metadata"]["name"].as_str().unwrap_or("").to_string(),
            };
            let Some(live) = view.objects.get(&key) else {
                return true;
            };
            let contains = |field: &str| match want["metadata"][field].as_object() {
                None => true,
                Some(map) => map
                    .iter()
                    .all(|(k, v)| live["metadata"][field].get(k) == Some(v)),
            };
            let data = |v: &Value| v.get("data").cloned().unwrap_or(json!({}));
            data(want) != data(live)
                || want
                    .get("type")
                    .is_some_and(|t| live.get("type") != Some(t))
                || !contains("labels")
                || !contains("annotations")
        })
        .collect()
}

/// Owner references to restore on the target.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Links {
    /// Objects whose `metadata.ownerReferences` must become this list.
    pub patches: Vec<(ObjectId, Value)>,
    /// Why some cannot be restored yet (a copy or an owner not on the target).
    pub waiting: Vec<String>,
}

impl Links {
    /// Every reference is in place.
    pub fn done(&self) -> bool {
        self.patches.is_empty() && self.waiting.is_empty()
    }
}

/// The owner references of every copy, rebuilt with the owners' UIDs on the target, where the
/// target does not show them yet. Objects the target keeps are not touched.
pub fn owner_links(graph: &MoveGraph, view: &TargetView, keep: &BTreeSet<ObjectId>) -> Links {
    let mut links = Links::default();
    for node in graph.nodes().filter(|n| !keep.contains(&n.id)) {
        if node.owners.is_empty() {
            continue;
        }
        let Some(live) = view.get(&node.id) else {
            links
                .waiting
                .push(format!("{} is not on the target yet", node.id));
            continue;
        };
        let mut refs = Vec::new();
        for owner in &node.owners {
            let key = Key {
                group: group_of(&owner.api_version).to_string(),
                kind: owner.kind.clone(),
                namespace: owner.namespace.clone(),
                name: owner.name.clone(),
            };
            let Some(uid) = view
                .objects
                .get(&key)
                .and_then(|o| o["metadata"]["uid"].as_str())
            else {
                links.waiting.push(format!(
                    "owner {} {} of {} is not on the target yet",
                    owner.kind, owner.name, node.id
                ));
                continue;
            };
            let mut r = json!({
                "apiVersion": owner.api_version,
                "kind": owner.kind,
                "name": owner.name,
                "uid": uid,
            });
            if let Some(c) = owner.controller {
                r["controller"] = json!(c);
            }
            if let Some(b) = owner.block_owner_deletion {
                r["blockOwnerDeletion"] = json!(b);
            }
            refs.push(r);
        }
        if refs.len() != node.owners.len() {
            continue;
        }
        let want = Value::Array(refs);
        let have = live["metadata"]
            .get("ownerReferences")
            .cloned()
            .unwrap_or(json!([]));
        if have != want {
            links.patches.push((node.id.clone(), want));
        }
    }
    links
}

/// The move's copies on the target to remove after a failed move, dependents first (reverse
/// creation order, as clusterctl deletes the source): only objects marked as copies of this move,
/// never what the target had.
pub fn copies_to_remove(graph: &MoveGraph, view: &TargetView, copy_of: &str) -> Vec<ObjectId> {
    graph
        .groups
        .iter()
        .rev()
        .flat_map(|g| g.iter().rev())
        .filter(|n| view.is_copy(&n.id, copy_of))
        .map(|n| n.id.clone())
        .collect()
}

/// The source objects still to fence before the target resumes: every object that belongs to
/// this Cluster alone (Secrets and ConfigMaps aside: nothing reconciles them) without the
/// `cluster.x-k8s.io/paused` annotation. The fence adds it with
/// [`super::move_plan::MOVE_FENCE_ANNOTATION`] (so
/// the copies do not inherit it: [`super::move_plan::strip_for_target`]); an object someone
/// paused before is left as it is, and its copy paused as its source. Cluster API's controllers skip an object carrying it
/// whatever its Cluster's `spec.paused` says (cluster-api v1.12.0 `util/annotations/helpers.go`
/// `IsPaused`, `util/paused/paused.go`), so unpausing the source Cluster alone no longer
/// resumes anything. Shared objects (a ClusterClass, a ClusterResourceSet, a global identity)
/// are left alone: other Clusters of this management cluster use them.
pub fn unfenced(graph: &MoveGraph) -> Vec<&MoveNode> {
    graph
        .nodes()
        .filter(|n| n.exclusive)
        .filter(|n| {
            !(n.id.api_version == "v1" && (n.id.kind == "ConfigMap" || n.id.kind == "Secret"))
        })
        .filter(|n| {
            !n.object
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(names::CAPI_PAUSED_ANNOTATION))
        })
        .collect()
}

/// What keeps the Cluster from being moved: clusterctl refuses to start unless the
/// infrastructure is provisioned, the control plane initialized and every Machine has a
/// `nodeRef` (cluster-api v1.12.0 `cmd/clusterctl/client/cluster/mover.go`
/// `checkProvisioningCompleted`; `status.infrastructureReady` and `status.controlPlaneReady` in
/// v1beta1, v1.10.0). Work a provider tracks only in status would otherwise be repeated on the
/// target, whose copies have no status: a second machine for a Machine still provisioning, or
/// an orphaned one.
pub fn not_provisioned(graph: &MoveGraph) -> Vec<String> {
    let mut out = Vec::new();
    for node in graph.nodes() {
        if group_of(&node.id.api_version) != "cluster.x-k8s.io" {
            continue;
        }
        let status = &node.object.data["status"];
        match node.id.kind.as_str() {
            "Cluster" => {
                let infrastructure = status["initialization"]["infrastructureProvisioned"]
                    == json!(true)
                    || status["infrastructureReady"] == json!(true);
                if !infrastructure {
                    out.push(format!(
                        "{} is still provisioning its infrastructure",
                        node.id
                    ));
                    continue;
                }
                let initialized = status["conditions"].as_array().is_some_and(|conditions| {
                    conditions
                        .iter()
                        .any(|c| c["type"] == "ControlPlaneInitialized" && c["status"] == "True")
                });
                let has_control_plane = node.object.data["spec"]["controlPlaneRef"]
                    .as_object()
                    .is_some_and(|r| !r.is_empty());
                let control_plane = status["initialization"]["controlPlaneInitialized"]
                    == json!(true)
                    || status["controlPlaneReady"] == json!(true);
                if !initialized || (has_control_plane && !control_plane) {
                    out.push(format!(
                        "the control plane of {} is not initialized yet",
                        node.id
                    ));
                }
            }
            "Machine" => {
                let has_node = status["nodeRef"]["name"]
                    .as_str()
                    .is_some_and(|n| !n.is_empty());
                if !has_node {
                    out.push(format!("{} has no nodeRef yet", node.id));
                }
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
#[path = "move_target_tests.rs"]
mod tests;
