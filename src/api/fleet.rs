//! Fleet types that `fleet-api-rs` lacks.

use std::borrow::Cow;

use fleet_api_rs::fleet_bundle_namespace_mapping::{
    BundleNamespaceMappingBundleSelector, BundleNamespaceMappingNamespaceSelector,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{NamespaceResourceScope, Resource};
use serde::{Deserialize, Serialize};

/// Fleet `BundleNamespaceMapping` (`fleet.cattle.io/v1alpha1`): bundles in its namespace matching
/// `bundleSelector` may target clusters in the namespaces matching `namespaceSelector`. Its
/// selectors are top-level fields (there is no `spec`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BundleNamespaceMapping {
    #[serde(default = "bnm_api_version")]
    pub api_version: String,
    #[serde(default = "bnm_kind")]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundle_selector: Option<BundleNamespaceMappingBundleSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<BundleNamespaceMappingNamespaceSelector>,
}

fn bnm_api_version() -> String {
    "fleet.cattle.io/v1alpha1".to_string()
}

fn bnm_kind() -> String {
    "BundleNamespaceMapping".to_string()
}

impl BundleNamespaceMapping {
    /// An empty mapping with `apiVersion` and `kind` set.
    pub fn new(metadata: ObjectMeta) -> Self {
        Self {
            api_version: bnm_api_version(),
            kind: bnm_kind(),
            metadata,
            ..Default::default()
        }
    }
}

impl Resource for BundleNamespaceMapping {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "BundleNamespaceMapping".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "fleet.cattle.io".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1alpha1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "bundlenamespacemappings".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

super::compact::compact_resource!(
    /// A Fleet `Cluster` (`fleet.cattle.io/v1alpha1`) as the import's cache keeps it: metadata
    /// plus spec and status as compact text (a typed `fleet_api_rs` Cluster is 1.6 KiB before
    /// any field is set, and its status a tree of many small allocations). Made from a decoded
    /// Fleet Cluster by [`CachedFleetCluster::of`], so [`CachedFleetCluster::typed`] gives back
    /// the same object.
    CachedFleetCluster,
    "fleet.cattle.io",
    "v1alpha1",
    "Cluster",
    "clusters"
);

impl CachedFleetCluster {
    pub fn of(mut fleet: fleet_api_rs::fleet_cluster::Cluster) -> Self {
        let metadata = std::mem::take(&mut fleet.metadata);
        let mut body = match serde_json::to_value(&fleet) {
            Ok(serde_json::Value::Object(body)) => body,
            // A typed Fleet Cluster always serialises to an object (all its map keys are
            // strings); an empty body would read as a Fleet Cluster without spec or status.
            _ => serde_json::Map::new(),
        };
        for key in ["apiVersion", "kind", "metadata"] {
            body.remove(key);
        }
        Self {
            api_version: "fleet.cattle.io/v1alpha1".to_string(),
            kind: "Cluster".to_string(),
            metadata,
            body: super::compact::Body::from_map(body),
        }
    }

    /// The typed Fleet Cluster (`None` only if the text no longer decodes, which [`Self::of`]
    /// rules out).
    pub fn typed(&self) -> Option<fleet_api_rs::fleet_cluster::Cluster> {
        // One decode of the text, straight into the typed struct (this runs for every Cluster
        // on every status recount).
        let metadata = serde_json::to_string(&self.metadata).ok()?;
        let body = self.body.text();
        let rest = body.strip_prefix('{')?.trim_start();
        let separator = if rest.starts_with('}') { "" } else { "," };
        let text = format!(
            r#"{{"apiVersion":"fleet.cattle.io/v1alpha1","kind":"Cluster","metadata":{metadata}{separator}{rest}"#
        );
        serde_json::from_str(&text).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleet_api_rs::fleet_cluster::Cluster as FleetCluster;

    fn fleet(value: serde_json::Value) -> FleetCluster {
        serde_json::from_value(value).expect("Fleet Cluster")
    }

    #[test]
    fn the_cached_form_gives_back_the_same_fleet_cluster() {
        let rows = [
            fleet(serde_json::json!({"metadata": {"name": "c1", "namespace": "ns"}, "spec": {}})),
            fleet(serde_json::json!({
                "metadata": {"name": "c1", "namespace": "ns", "labels": {"a": "b"},
                    "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "c1", "uid": "u1"}]},
                "spec": {"clientID": "x", "agentNamespace": "fleet-addon-agent",
                    "templateValues": {"caapf.internal/sha256": "00"}},
                "status": {"agent": {"lastSeen": "2026-11-23T10:00:00Z", "namespace": "a"},
                    "display": {"readyBundles": "1/2"},
                    "summary": {"ready": 1, "desiredReady": 2,
                        "nonReadyResources": [{"name": "b", "bundleState": "NotReady", "message": "m"}]}}
            })),
        ];
        for row in rows {
            let cached = CachedFleetCluster::of(row.clone());
            assert_eq!(cached.typed(), Some(row));
        }
    }
}
