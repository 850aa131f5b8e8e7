//! The types `clusterctl move` considers (kubernetes-sigs/cluster-api
//! `cmd/clusterctl/client/cluster/objectgraph.go` `getDiscoveryTypes`, main after
//! v1.14.0-rc.0, commit ae7ff047): the core Secret and ConfigMap and every CRD clusterctl
//! labelled as a provider component, with the labels that make a type or an object force-move.

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;

/// Label clusterctl puts on every provider component; only CRDs carrying it are move types.
pub const CLUSTERCTL_LABEL: &str = "clusterctl.cluster.x-k8s.io";
/// On a CRD or an object: move it even when it belongs to no Cluster.
pub const MOVE_LABEL: &str = "clusterctl.cluster.x-k8s.io/move";
/// On a CRD or an object: move it and everything it owns.
pub const MOVE_HIERARCHY_LABEL: &str = "clusterctl.cluster.x-k8s.io/move-hierarchy";

pub(super) const CAPI_GROUP: &str = "cluster.x-k8s.io";
pub(super) const ADDONS_GROUP: &str = "addons.cluster.x-k8s.io";

/// A type clusterctl considers for move.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypeRule {
    pub group: String,
    /// The storage version (clusterctl lists each type in its storage version).
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub namespaced: bool,
    pub force_move: bool,
    pub force_move_hierarchy: bool,
}

impl TypeRule {
    /// `group/version`, or `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

/// The move types, by (group, kind).
#[derive(Clone, Debug, Default)]
pub struct MoveTypes {
    rules: BTreeMap<(String, String), TypeRule>,
}

impl MoveTypes {
    /// Core `v1` Secret and ConfigMap, which clusterctl always considers.
    pub fn core() -> Self {
        let mut types = Self::default();
        for (kind, plural) in [("Secret", "secrets"), ("ConfigMap", "configmaps")] {
            types.insert(TypeRule {
                group: String::new(),
                version: "v1".into(),
                kind: kind.into(),
                plural: plural.into(),
                namespaced: true,
                force_move: false,
                force_move_hierarchy: false,
            });
        }
        types
    }

    /// The core types plus every CRD labelled `clusterctl.cluster.x-k8s.io`, in its storage
    /// version (`getDiscoveryTypes`).
    pub fn from_crds(crds: &[CustomResourceDefinition]) -> Self {
        let mut types = Self::core();
        for crd in crds {
            let labels = crd.labels();
            if !labels.contains_key(CLUSTERCTL_LABEL) {
                continue;
            }
            let spec = &crd.spec;
            let Some(storage) = spec.versions.iter().find(|v| v.storage) else {
                continue;
            };
            let hierarchy = is_builtin_hierarchy(&spec.group, &spec.names.kind)
                || labels.contains_key(MOVE_HIERARCHY_LABEL);
            types.insert(TypeRule {
                group: spec.group.clone(),
                version: storage.name.clone(),
                kind: spec.names.kind.clone(),
                plural: spec.names.plural.clone(),
                namespaced: spec.scope == "Namespaced",
                force_move: hierarchy || labels.contains_key(MOVE_LABEL),
                force_move_hierarchy: hierarchy,
            });
        }
        types
    }

    /// Adds or replaces a type.
    pub fn insert(&mut self, rule: TypeRule) {
        self.rules
            .insert((rule.group.clone(), rule.kind.clone()), rule);
    }

    /// The rule for an object's `apiVersion` and `kind` (any version of the group).
    pub fn rule(&self, api_version: &str, kind: &str) -> Option<&TypeRule> {
        self.rules
            .get(&(group_of(api_version).to_string(), kind.to_string()))
    }

    /// Every type, in a stable order.
    pub fn iter(&self) -> impl Iterator<Item = &TypeRule> {
        self.rules.values()
    }
}

/// `Cluster`, `ClusterClass` and `ClusterResourceSet` root hierarchies without any label.
pub(super) fn is_builtin_hierarchy(group: &str, kind: &str) -> bool {
    (group == CAPI_GROUP && (kind == "Cluster" || kind == "ClusterClass"))
        || (group == ADDONS_GROUP && kind == "ClusterResourceSet")
}

/// The group of an `apiVersion` (empty for the core group).
pub fn group_of(api_version: &str) -> &str {
    match api_version.split_once('/') {
        Some((group, _)) => group,
        None => "",
    }
}
