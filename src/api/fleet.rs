//! Fleet types that `fleet-api-rs` lacks.

use fleet_api_rs::fleet_bundle_namespace_mapping::{
    BundleNamespaceMappingBundleSelector, BundleNamespaceMappingNamespaceSelector,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
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

super::namespaced_resource!(
    BundleNamespaceMapping,
    "fleet.cattle.io",
    "v1alpha1",
    "BundleNamespaceMapping",
    "bundlenamespacemappings"
);

/// A Fleet `Cluster` (`fleet.cattle.io/v1alpha1`) as the import's cache keeps it, one per
/// workload cluster. Typed: only the metadata read without decoding (name, namespace, uid,
/// resourceVersion, generation, ownerReferences, annotations, deletionTimestamp; see
/// [`CachedFleetCluster::of`]). Everything else, the rest of the metadata included (labels and our
/// managedFields entry: about 1.4 KiB in 20 allocations as typed maps and structs), is compact
/// text, deflated, with that rest of the metadata as its first field. A typed `fleet_api_rs`
/// Cluster is 1.6 KiB before any field is set, and its status a tree of many small allocations.
/// Made from a decoded Fleet Cluster by [`CachedFleetCluster::of`], so
/// [`CachedFleetCluster::typed`] gives back the same object.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CachedFleetCluster {
    pub metadata: ObjectMeta,
    /// `{"metadata": {the rest of the metadata}, "spec": ..., "status": ...}`.
    body: super::compact::Body,
}

/// How the body's text starts when it holds metadata ([`CachedFleetCluster::of`] writes it so).
const BODY_METADATA_PREFIX: &str = r#"{"metadata":{"#;

impl CachedFleetCluster {
    pub fn of(mut fleet: fleet_api_rs::fleet_cluster::Cluster) -> Self {
        let mut rest = std::mem::take(&mut fleet.metadata);
        // What the import reads of every cached Fleet Cluster without decoding it: the owner a
        // change maps to, the resourceVersion that tells our own write's echo, the
        // registration annotation and the finalizers.
        let typed = ObjectMeta {
            name: rest.name.take(),
            namespace: rest.namespace.take(),
            uid: rest.uid.take(),
            resource_version: rest.resource_version.take(),
            generation: rest.generation.take(),
            owner_references: rest.owner_references.take(),
            annotations: rest.annotations.take(),
            deletion_timestamp: rest.deletion_timestamp.take(),
            finalizers: rest.finalizers.take(),
            ..ObjectMeta::default()
        };
        let mut body = match serde_json::to_value(&fleet) {
            Ok(serde_json::Value::Object(body)) => body,
            // A typed Fleet Cluster always serialises to an object (all its map keys are
            // strings); an empty body would read as a Fleet Cluster without spec or status.
            _ => serde_json::Map::new(),
        };
        for key in ["apiVersion", "kind", "metadata"] {
            body.remove(key);
        }
        // The first key of the map's text ("metadata" sorts before "spec" and "status"), which
        // `typed` splices without decoding.
        if rest != ObjectMeta::default()
            && let Ok(rest) = serde_json::to_value(rest)
        {
            body.insert("metadata".to_string(), rest);
        }
        Self {
            metadata: typed,
            body: super::compact::Body::from_map(body),
        }
    }

    /// The typed Fleet Cluster (`None` only if the text no longer decodes, which [`Self::of`]
    /// rules out).
    pub fn typed(&self) -> Option<fleet_api_rs::fleet_cluster::Cluster> {
        // One decode of the text, straight into the typed struct (this runs for every Cluster
        // on every status recount): the typed metadata's text and the body's are spliced.
        let typed = serde_json::to_string(&self.metadata).ok()?;
        let typed = typed.strip_suffix('}')?;
        let body = self.body.text();
        let text = if let Some(rest) = body.strip_prefix(BODY_METADATA_PREFIX) {
            // `rest` goes on with the members of the body's metadata, its closing brace and
            // the other fields.
            let separator = if typed == "{" || rest.starts_with('}') {
                ""
            } else {
                ","
            };
            format!(
                r#"{{"apiVersion":"fleet.cattle.io/v1alpha1","kind":"Cluster","metadata":{typed}{separator}{rest}"#
            )
        } else {
            // No metadata in the body (or, were `serde_json` ever to keep another key first, a
            // body this splice does not handle: merged as JSON values instead).
            if body.contains(r#""metadata""#) {
                let map = self.body.to_map();
                if map.contains_key("metadata") {
                    return self.merged(map);
                }
            }
            let rest = body.strip_prefix('{')?.trim_start();
            let separator = if rest.starts_with('}') { "" } else { "," };
            format!(
                r#"{{"apiVersion":"fleet.cattle.io/v1alpha1","kind":"Cluster","metadata":{typed}}}{separator}{rest}"#
            )
        };
        serde_json::from_str(&text).ok()
    }

    /// The whole object as JSON values: the typed metadata merged with the body's.
    fn merged(
        &self,
        mut body: serde_json::Map<String, serde_json::Value>,
    ) -> Option<fleet_api_rs::fleet_cluster::Cluster> {
        let serde_json::Value::Object(mut metadata) = serde_json::to_value(&self.metadata).ok()?
        else {
            return None;
        };
        if let Some(serde_json::Value::Object(rest)) = body.remove("metadata") {
            metadata.extend(rest);
        }
        body.insert("metadata".into(), metadata.into());
        body.insert("apiVersion".into(), "fleet.cattle.io/v1alpha1".into());
        body.insert("kind".into(), "Cluster".into());
        serde_json::from_value(serde_json::Value::Object(body)).ok()
    }
}

impl Serialize for CachedFleetCluster {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::Error;
        self.typed()
            .ok_or_else(|| S::Error::custom("cached Fleet Cluster does not decode"))?
            .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for CachedFleetCluster {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        fleet_api_rs::fleet_cluster::Cluster::deserialize(deserializer).map(Self::of)
    }
}

super::namespaced_resource!(
    CachedFleetCluster,
    "fleet.cattle.io",
    "v1alpha1",
    "Cluster",
    "clusters"
);

#[cfg(test)]
mod tests {
    use super::*;
    use fleet_api_rs::fleet_cluster::Cluster as FleetCluster;

    fn fleet(value: serde_json::Value) -> FleetCluster {
        serde_json::from_value(value).expect("Fleet Cluster")
    }

    /// A served Fleet Cluster's metadata: what a watch event carries.
    fn served_metadata() -> serde_json::Value {
        serde_json::json!({
            "name": "c1", "namespace": "ns", "uid": "u2", "resourceVersion": "7", "generation": 2,
            "creationTimestamp": "2026-11-23T10:00:00Z",
            "labels": {"a": "b", "cluster.x-k8s.io/cluster-name": "c1"},
            "annotations": {"fleet.addons.cluster.x-k8s.io/registration": "runtime-extension"},
            "finalizers": ["fleet.cattle.io/cluster-finalizer"],
            "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                "name": "c1", "uid": "u1", "blockOwnerDeletion": true, "controller": true}],
            "managedFields": [{"manager": "addon-provider-fleet", "operation": "Apply",
                "apiVersion": "fleet.cattle.io/v1alpha1", "time": "2026-11-23T10:00:00Z",
                "fieldsType": "FieldsV1", "fieldsV1": "{\"f:spec\":{\"f:templateValues\":{}}}"}]
        })
    }

    #[test]
    fn the_cached_form_gives_back_the_same_fleet_cluster() {
        let rows = [
            fleet(serde_json::json!({"metadata": {}, "spec": {}})),
            fleet(serde_json::json!({"metadata": {"name": "c1", "namespace": "ns"}, "spec": {}})),
            fleet(serde_json::json!({
                "metadata": {"labels": {"a": "b"}}, "spec": {}
            })),
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
            fleet(serde_json::json!({
                "metadata": served_metadata(),
                "spec": {"kubeConfigSecret": "c1-kubeconfig", "templateValues": {"caapf.internal/sha256": "00"}},
                "status": {"display": {"readyBundles": "1/1"}}
            })),
        ];
        for row in rows {
            let cached = CachedFleetCluster::of(row.clone());
            assert_eq!(cached.typed(), Some(row.clone()));
            // (De)serialised, it is the Fleet Cluster it was made from.
            assert_eq!(
                serde_json::to_value(&cached).expect("serialises"),
                serde_json::to_value(&row).expect("serialises")
            );
            let back: CachedFleetCluster =
                serde_json::from_value(serde_json::to_value(&row).expect("serialises"))
                    .expect("deserialises");
            assert_eq!(back, cached);
        }
    }

    #[test]
    fn only_the_metadata_read_undecoded_stays_typed() {
        let cached = CachedFleetCluster::of(fleet(serde_json::json!({
            "metadata": served_metadata(), "spec": {}
        })));
        let typed = serde_json::to_value(&cached.metadata).expect("serialises");
        let mut kept: Vec<&str> = typed
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        kept.sort_unstable();
        assert_eq!(
            kept,
            [
                "annotations",
                "finalizers",
                "generation",
                "name",
                "namespace",
                "ownerReferences",
                "resourceVersion",
                "uid"
            ]
        );
        // The rest leads the body's text, where `typed` splices it without decoding the body.
        assert!(cached.body.text().starts_with(BODY_METADATA_PREFIX));
    }

    #[test]
    fn a_body_whose_metadata_is_not_first_is_merged() {
        let row = fleet(serde_json::json!({"metadata": served_metadata(), "spec": {}}));
        let cached = CachedFleetCluster::of(row.clone());
        let mut body = cached.body.to_map();
        // A key sorting before "metadata" (never written by `of`; the typed decode ignores it).
        body.insert("aaa".into(), serde_json::json!(1));
        let reordered = CachedFleetCluster {
            metadata: cached.metadata.clone(),
            body: super::super::compact::Body::from_map(body),
        };
        assert!(!reordered.body.text().starts_with(BODY_METADATA_PREFIX));
        assert_eq!(reordered.typed(), Some(row));
    }
}
