//! CAPI resources as we watch them: static types (so kube-runtime's shared stores work) whose
//! body stays free-form JSON, read through [`crate::model::capi`]. A typed body would make one
//! unknown enum value in one object break the whole watch. The body is compact JSON text
//! ([`super::compact::Body`]): the Cluster cache holds every Cluster.

use super::compact::compact_resource;

compact_resource!(
    /// A CAPI `Cluster` (`cluster.x-k8s.io/v1beta2`). Its body stays plain text: every
    /// decision reads it (`ClusterView::of`), and inflating it each time cost more CPU than the
    /// 0.7 KiB per Cluster it saved (docs/performance.md).
    CapiCluster,
    "cluster.x-k8s.io",
    "v1beta2",
    "Cluster",
    "clusters",
    plain
);

compact_resource!(
    /// A CAPI `ClusterClass` (`cluster.x-k8s.io/v1beta2`).
    CapiClusterClass,
    "cluster.x-k8s.io",
    "v1beta2",
    "ClusterClass",
    "clusterclasses"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_unknown_fields_and_values() {
        let json = serde_json::json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {"brandNew": {"x": 1}},
            "status": {"phase": "NotYetInvented"}
        });
        let cluster: CapiCluster = serde_json::from_value(json.clone()).expect("decodes");
        assert_eq!(cluster.to_json().expect("encodes"), json);
    }
}
