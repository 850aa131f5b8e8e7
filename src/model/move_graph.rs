//! The object graph of one Cluster and the order to create it in, as `clusterctl move` defines
//! them, restricted to a single Cluster.
//!
//! Rules read from kubernetes-sigs/cluster-api `cmd/clusterctl/client/cluster/objectgraph.go` and
//! `mover.go` (main after v1.14.0-rc.0, commit ae7ff047) and summarised in docs/self-managed.md:
//! owner references matched by UID, soft ownership (cluster Secrets by name, topology Clusters by
//! their ClusterClass, ClusterResourceSetBindings by `spec.clusterName`), hierarchies rooted at
//! force-move-hierarchy objects, force-move objects, and creation groups where every object comes
//! after all its owners. Departures (one Cluster instead of a namespace; objects labelled
//! `cluster.x-k8s.io/cluster-name`) are documented there.

use std::collections::{BTreeSet, HashMap};
use std::fmt;

use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::Value;

use super::capi::class_ref;
use super::move_types::{
    ADDONS_GROUP, CAPI_GROUP, MOVE_HIERARCHY_LABEL, MOVE_LABEL, MoveTypes, is_builtin_hierarchy,
};
use crate::names;

/// On any moved object: the move waits until it is removed.
pub const BLOCK_MOVE_ANNOTATION: &str = "clusterctl.cluster.x-k8s.io/block-move";

/// Suffixes of the Secrets CAPI creates for a Cluster (`util/secret/consts.go`).
const SECRET_PURPOSES: [&str; 6] = [
    "kubeconfig",
    "ca",
    "etcd",
    "sa",
    "proxy",
    "apiserver-etcd-client",
];

/// Identity of an object in the graph.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectId {
    pub api_version: String,
    pub kind: String,
    /// `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    pub name: String,
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {}/{}", self.kind, ns, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// An owner reference to re-create on the target, pointing at an object created earlier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerLink {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    /// Where to look the owner up on the target: the dependent's namespace, or `None` when the
    /// owner is cluster-scoped.
    pub namespace: Option<String>,
    pub controller: Option<bool>,
    pub block_owner_deletion: Option<bool>,
}

/// One object to create.
#[derive(Clone, Debug)]
pub struct MoveNode {
    pub id: ObjectId,
    /// Owner references to re-link, in the order the source lists them.
    pub owners: Vec<OwnerLink>,
    /// Carries `clusterctl.cluster.x-k8s.io/block-move`: the move waits for its removal.
    pub blocking: bool,
    /// The object as read from the source.
    pub object: DynamicObject,
    /// Belongs to this Cluster alone: every Cluster above it or below it through ownership is
    /// this one (not a ClusterClass, a ClusterResourceSet or a pool other Clusters use too, not a
    /// global object). Only these are fenced on the source once the target runs.
    pub exclusive: bool,
    /// Cluster-scoped, or owned (transitively) by a cluster-scoped object: clusterctl leaves
    /// such an object alone when the target already has it (`createTargetObject`, `isGlobal` /
    /// `isGlobalHierarchy`).
    pub global: bool,
}

/// An object the Cluster depends on that will not be moved, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    pub id: ObjectId,
    pub reason: String,
}

/// The graph of one Cluster: creation groups, each after all the owners of its objects.
#[derive(Clone, Debug, Default)]
pub struct MoveGraph {
    pub groups: Vec<Vec<MoveNode>>,
    pub skipped: Vec<Skipped>,
    /// Objects the move would copy that own (by owner reference) objects of other Clusters,
    /// e.g. an in-cluster IPAM pool whose addresses serve another Cluster too: a copy would be a
    /// second allocator over the same range. The move refuses to start while there is one.
    pub shared: Vec<Skipped>,
}

impl MoveGraph {
    /// Every node, in creation order.
    pub fn nodes(&self) -> impl Iterator<Item = &MoveNode> {
        self.groups.iter().flatten()
    }
}

/// Why a graph cannot be built.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GraphError {
    #[error("Cluster {namespace}/{name} is not among the objects read")]
    ClusterNotFound { namespace: String, name: String },
    /// The Cluster type is not among the types read: its CRD lacks the label clusterctl puts on
    /// every provider component (cluster-api `cmd/clusterctl/client/cluster/objectgraph.go`
    /// `getDiscoveryTypes` reads only labelled CRDs).
    #[error(
        "Cluster {namespace}/{name} was not read: no CustomResourceDefinition of cluster.x-k8s.io Cluster carries the label clusterctl.cluster.x-k8s.io, which clusterctl puts on every provider component it installs and `clusterctl move` reads types by. Install Cluster API with clusterctl (or the Cluster API Operator), or label its CRDs (kubectl label crd -l cluster.x-k8s.io/provider=cluster-api clusterctl.cluster.x-k8s.io=)"
    )]
    ClusterTypeNotLabelled { namespace: String, name: String },
    #[error("{0}: metadata.uid is empty; owner references cannot be resolved without it")]
    MissingUid(ObjectId),
}

struct Node {
    id: ObjectId,
    group: String,
    object: DynamicObject,
    /// Owner references: the owner's index when it was read, its reference otherwise.
    owners: Vec<(Option<usize>, OwnerLink)>,
    soft_owners: BTreeSet<usize>,
    force_move: bool,
    force_move_hierarchy: bool,
}

impl Node {
    fn is(&self, group: &str, kind: &str) -> bool {
        self.group == group && self.id.kind == kind
    }
    fn is_capi_cluster(&self) -> bool {
        self.is(CAPI_GROUP, "Cluster")
    }
    fn label(&self, key: &str) -> Option<&String> {
        self.object.labels().get(key)
    }
    fn has_owner_references(&self) -> bool {
        !self.owners.is_empty()
    }
    fn all_owners(&self) -> impl Iterator<Item = usize> + '_ {
        self.owners
            .iter()
            .filter_map(|(idx, _)| *idx)
            .chain(self.soft_owners.iter().copied())
    }
}

/// The graph of Cluster `namespace/name` among `objects` (everything listed for the move types:
/// the Cluster's namespace, its ClusterClass's namespace, cluster-scoped move types).
///
/// Objects whose type is not in `types` are ignored, as clusterctl never lists them; an owner
/// among them makes its dependents unmovable (reported in [`MoveGraph::skipped`]).
pub fn move_graph(
    namespace: &str,
    name: &str,
    objects: &[DynamicObject],
    types: &MoveTypes,
) -> Result<MoveGraph, GraphError> {
    let mut nodes = Vec::new();
    let mut by_uid = HashMap::new();
    for object in objects {
        let Some(tm) = &object.types else { continue };
        let Some(rule) = types.rule(&tm.api_version, &tm.kind) else {
            continue;
        };
        let id = ObjectId {
            api_version: tm.api_version.clone(),
            kind: tm.kind.clone(),
            namespace: object
                .metadata
                .namespace
                .clone()
                .filter(|_| rule.namespaced),
            name: object.metadata.name.clone().unwrap_or_default(),
        };
        let uid = object.metadata.uid.clone().unwrap_or_default();
        if uid.is_empty() {
            return Err(GraphError::MissingUid(id));
        }
        let labels = object.labels();
        by_uid.insert(uid, nodes.len());
        nodes.push(Node {
            id,
            group: rule.group.clone(),
            object: object.clone(),
            owners: Vec::new(),
            soft_owners: BTreeSet::new(),
            force_move: rule.force_move || labels.contains_key(MOVE_LABEL),
            force_move_hierarchy: rule.force_move_hierarchy
                || labels.contains_key(MOVE_HIERARCHY_LABEL),
        });
    }
    let Some(cluster) = nodes.iter().position(|n| {
        n.is_capi_cluster() && n.id.namespace.as_deref() == Some(namespace) && n.id.name == name
    }) else {
        let listed = types
            .iter()
            .any(|rule| rule.group == CAPI_GROUP && rule.kind == "Cluster");
        return Err(if listed {
            GraphError::ClusterNotFound {
                namespace: namespace.into(),
                name: name.into(),
            }
        } else {
            GraphError::ClusterTypeNotLabelled {
                namespace: namespace.into(),
                name: name.into(),
            }
        });
    };

    link_owners(&mut nodes, &by_uid);
    link_soft_owners(&mut nodes);

    let above = clusters_above(&nodes);
    let included = select(&nodes, cluster, namespace, &above);
    let users = users(&nodes, &above);
    let mut graph = order(&nodes, &included, cluster, &users);
    graph.shared = shared_owners(&nodes, &included, cluster, &users);
    Ok(graph)
}

/// For each node, the Clusters reached by following its owners (hard and soft) upwards; a
/// Cluster reaches itself.
fn clusters_above(nodes: &[Node]) -> Vec<BTreeSet<usize>> {
    closure(
        nodes.len(),
        &|i| BTreeSet::from_iter(nodes[i].is_capi_cluster().then_some(i)),
        &|i| nodes[i].all_owners().collect(),
    )
}

/// For each node, the Clusters it serves: those above it and those above anything below it
/// (hard and soft ownership).
fn users(nodes: &[Node], above: &[BTreeSet<usize>]) -> Vec<BTreeSet<usize>> {
    let children = children(nodes);
    closure(nodes.len(), &|i| above[i].clone(), &|i| children[i].clone())
}

/// For each node, the nodes it owns (hard and soft).
fn children(nodes: &[Node]) -> Vec<Vec<usize>> {
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (i, node) in nodes.iter().enumerate() {
        for owner in node.all_owners() {
            children[owner].push(i);
        }
    }
    children
}

/// For each of `len` nodes, its own set (`own`) joined with the sets of the nodes `next` leads
/// to, transitively (memoized; an ownership cycle stops at the node already being visited).
fn closure(
    len: usize,
    own: &dyn Fn(usize) -> BTreeSet<usize>,
    next: &dyn Fn(usize) -> Vec<usize>,
) -> Vec<BTreeSet<usize>> {
    fn visit(
        i: usize,
        own: &dyn Fn(usize) -> BTreeSet<usize>,
        next: &dyn Fn(usize) -> Vec<usize>,
        memo: &mut [Option<BTreeSet<usize>>],
        on_path: &mut BTreeSet<usize>,
    ) -> BTreeSet<usize> {
        if let Some(done) = &memo[i] {
            return done.clone();
        }
        let mut found = own(i);
        if on_path.insert(i) {
            for j in next(i) {
                found.extend(visit(j, own, next, memo, on_path));
            }
            on_path.remove(&i);
        }
        memo[i] = Some(found.clone());
        found
    }
    let mut memo = vec![None; len];
    (0..len)
        .map(|i| visit(i, own, next, &mut memo, &mut BTreeSet::new()))
        .collect()
}

/// Copied objects that own (by owner reference) an object serving another Cluster. A
/// ClusterResourceSet is not one: it owns the bindings of every Cluster it selects, and its
/// copy on the target only selects the Clusters there.
fn shared_owners(
    nodes: &[Node],
    included: &BTreeSet<usize>,
    cluster: usize,
    users: &[BTreeSet<usize>],
) -> Vec<Skipped> {
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (i, node) in nodes.iter().enumerate() {
        for owner in node.owners.iter().filter_map(|(o, _)| *o) {
            dependents[owner].push(i);
        }
    }
    let mut shared = Vec::new();
    for &i in included {
        let node = &nodes[i];
        if node.is_capi_cluster() || node.is(ADDONS_GROUP, "ClusterResourceSet") {
            continue;
        }
        let mut others: BTreeSet<String> = BTreeSet::new();
        for &dependent in &dependents[i] {
            for &user in &users[dependent] {
                if user != cluster {
                    others.insert(nodes[user].id.to_string());
                }
            }
        }
        if !others.is_empty() {
            shared.push(Skipped {
                id: node.id.clone(),
                reason: format!(
                    "it also owns objects of {}; a copy would serve this Cluster from a second place (for an IPAM pool: two allocators over one range). Give this Cluster objects of its own, or move the whole namespace with clusterctl",
                    others.into_iter().collect::<Vec<_>>().join(", ")
                ),
            });
        }
    }
    shared.sort_by(|a, b| a.id.cmp(&b.id));
    shared
}

/// Hard edges from owner references, matched by UID (`processOwnerReferences`).
fn link_owners(nodes: &mut [Node], by_uid: &HashMap<String, usize>) {
    for i in 0..nodes.len() {
        let owners = nodes[i]
            .object
            .owner_references()
            .iter()
            .cloned()
            .map(|r| {
                let idx = by_uid.get(&r.uid).copied();
                let namespace = nodes[idx.unwrap_or(i)].id.namespace.clone();
                let link = OwnerLink {
                    api_version: r.api_version,
                    kind: r.kind,
                    name: r.name,
                    namespace,
                    controller: r.controller,
                    block_owner_deletion: r.block_owner_deletion,
                };
                (idx, link)
            })
            .collect();
        nodes[i].owners = owners;
    }
}

/// Soft edges (`setSoftOwnership`), plus objects labelled with the Cluster's name.
fn link_soft_owners(nodes: &mut [Node]) {
    // The nodes of one kind by (namespace, name).
    let index = |kind: &str| -> HashMap<(String, String), usize> {
        nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.is(CAPI_GROUP, kind))
            .map(|(i, n)| {
                let ns = n.id.namespace.clone().unwrap_or_default();
                ((ns, n.id.name.clone()), i)
            })
            .collect()
    };
    let (clusters, classes) = (index("Cluster"), index("ClusterClass"));
    let mut soft_edges: Vec<(usize, usize)> = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        let ns = node.id.namespace.clone().unwrap_or_default();
        let cluster = |name: &str| clusters.get(&(ns.clone(), name.to_string())).copied();
        if node.is("", "Secret")
            && !node.has_owner_references()
            && let Some(owner) = secret_cluster_name(&node.id.name).and_then(cluster)
        {
            soft_edges.push((i, owner));
        }
        if !node.has_owner_references()
            && !node.is_capi_cluster()
            && let Some(owner) = node
                .label(names::CAPI_CLUSTER_NAME_LABEL)
                .and_then(|name| cluster(name))
        {
            soft_edges.push((i, owner));
        }
        if node.is_capi_cluster()
            && let Some(owner) =
                topology_class(&node.object.data, &ns).and_then(|c| classes.get(&c).copied())
        {
            soft_edges.push((i, owner));
        }
        if node.is(ADDONS_GROUP, "ClusterResourceSetBinding")
            && let Some(owner) = node.object.data["spec"]["clusterName"]
                .as_str()
                .and_then(cluster)
        {
            soft_edges.push((i, owner));
        }
    }
    for (i, owner) in soft_edges {
        nodes[i].soft_owners.insert(owner);
    }
}

/// The Cluster a Secret belongs to by name, split at the last dash (`secret.ParseSecretName`).
fn secret_cluster_name(secret: &str) -> Option<&str> {
    let (cluster, purpose) = secret.rsplit_once('-')?;
    SECRET_PURPOSES.contains(&purpose).then_some(cluster)
}

/// `(namespace, name)` of a topology Cluster's class ([`class_ref`] of `spec.topology`).
pub fn topology_class(data: &Value, cluster_namespace: &str) -> Option<(String, String)> {
    class_ref(&data["spec"]["topology"], cluster_namespace).map(|c| (c.namespace, c.name))
}

/// The objects moved with Cluster `cluster`: its hierarchy, the force-move objects of its
/// namespace and of the cluster scope, and (until nothing changes) the hierarchy of every owner
/// of an object already chosen. Walks never enter another Cluster or what another Cluster owns.
fn select(
    nodes: &[Node],
    cluster: usize,
    namespace: &str,
    above: &[BTreeSet<usize>],
) -> BTreeSet<usize> {
    let children = children(nodes);
    // Anything another Cluster reaches through its owners belongs to that Cluster, however far
    // down (a Machine of another Cluster's MachineSet, the address its claim got from a shared
    // pool).
    let foreign = |i: usize| above[i].iter().any(|&c| c != cluster);
    let mut included = BTreeSet::new();
    let walk = |root: usize, included: &mut BTreeSet<usize>| {
        let mut stack = vec![root];
        while let Some(i) = stack.pop() {
            if (i != root && foreign(i)) || !included.insert(i) {
                continue;
            }
            stack.extend(children[i].iter().copied());
        }
    };
    walk(cluster, &mut included);
    for (i, node) in nodes.iter().enumerate() {
        let in_scope = match &node.id.namespace {
            Some(ns) => ns == namespace,
            None => true,
        };
        // Clusters, ClusterClasses and ClusterResourceSets come with the Cluster that uses them,
        // not because their type is force-move.
        let builtin = is_builtin_hierarchy(&node.group, &node.id.kind);
        if !in_scope || foreign(i) || (builtin && node.label(MOVE_LABEL).is_none()) {
            continue;
        }
        if node.label(MOVE_HIERARCHY_LABEL).is_some() || (node.force_move_hierarchy && !builtin) {
            walk(i, &mut included);
        } else if node.force_move {
            included.insert(i);
        }
    }
    loop {
        let missing: Vec<usize> = included
            .iter()
            .flat_map(|&i| nodes[i].all_owners())
            .filter(|o| !included.contains(o) && !foreign(*o))
            .collect();
        if missing.is_empty() {
            return included;
        }
        for owner in missing {
            walk(owner, &mut included);
        }
    }
}

/// Creation groups (`getMoveSequence`): each group holds the objects whose owners are all in
/// earlier groups. Objects that can never be placed (an owner is not moved) are reported.
fn order(
    nodes: &[Node],
    included: &BTreeSet<usize>,
    cluster: usize,
    users: &[BTreeSet<usize>],
) -> MoveGraph {
    let global = global_hierarchy(nodes);
    let mut placed = BTreeSet::new();
    let mut graph = MoveGraph::default();
    loop {
        let mut group: Vec<usize> = included
            .iter()
            .copied()
            .filter(|i| !placed.contains(i))
            .filter(|&i| {
                let node = &nodes[i];
                node.owners
                    .iter()
                    .all(|(o, _)| o.is_some_and(|o| placed.contains(&o)))
                    && node.soft_owners.iter().all(|o| placed.contains(o))
            })
            .collect();
        if group.is_empty() {
            break;
        }
        group.sort_by(|a, b| nodes[*a].id.cmp(&nodes[*b].id));
        placed.extend(group.iter().copied());
        graph.groups.push(
            group
                .into_iter()
                .map(|i| {
                    let node = &nodes[i];
                    MoveNode {
                        id: node.id.clone(),
                        owners: node.owners.iter().map(|(_, l)| l.clone()).collect(),
                        blocking: node
                            .object
                            .annotations()
                            .contains_key(BLOCK_MOVE_ANNOTATION),
                        object: node.object.clone(),
                        exclusive: !global[i] && users[i].len() == 1 && users[i].contains(&cluster),
                        global: global[i],
                    }
                })
                .collect(),
        );
    }
    for &i in included.iter().filter(|i| !placed.contains(i)) {
        let node = &nodes[i];
        let reason = node
            .owners
            .iter()
            .find_map(|(o, link)| match o {
                None => Some(format!(
                    "owner {} {} is not a move type or was not found",
                    link.kind, link.name
                )),
                Some(o) if !placed.contains(o) => {
                    Some(format!("owner {} is not moved", nodes[*o].id))
                }
                Some(_) => None,
            })
            .or_else(|| {
                node.soft_owners
                    .iter()
                    .find(|o| !placed.contains(o))
                    .map(|o| format!("owner {} is not moved", nodes[*o].id))
            })
            .unwrap_or_else(|| "ownership cycle".into());
        graph.skipped.push(Skipped {
            id: node.id.clone(),
            reason,
        });
    }
    graph.skipped.sort_by(|a, b| a.id.cmp(&b.id));
    graph
}

/// Cluster-scoped nodes and everything they own, transitively (hard owners only).
fn global_hierarchy(nodes: &[Node]) -> Vec<bool> {
    fn visit(
        i: usize,
        nodes: &[Node],
        memo: &mut [Option<bool>],
        on_path: &mut BTreeSet<usize>,
    ) -> bool {
        if let Some(done) = memo[i] {
            return done;
        }
        let mut global = nodes[i].id.namespace.is_none();
        if !global && on_path.insert(i) {
            global = nodes[i]
                .owners
                .iter()
                .filter_map(|(o, _)| *o)
                .any(|o| visit(o, nodes, memo, on_path));
            on_path.remove(&i);
        }
        memo[i] = Some(global);
        global
    }
    let mut memo = vec![None; nodes.len()];
    (0..nodes.len())
        .map(|i| visit(i, nodes, &mut memo, &mut BTreeSet::new()))
        .collect()
}

#[cfg(test)]
#[path = "move_graph_tests.rs"]
mod tests;
