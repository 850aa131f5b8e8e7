//! The Fleet objects of an agent-initiated Cluster, as BeforeClusterCreate creates them: the
//! provider's model ([`crate::model::fleet`]) builds them, so the hook and the import controller
//! agree on every field. The hook only ever creates these objects (never updates them), with its
//! own field manager, so the client ID generated here is the one kept forever; it marks the Fleet
//! Cluster with [`names::REGISTRATION_ANNOTATION`] so the import controller keeps it
//! agent-initiated even when FleetAddonConfig alone would not.

use fleet_api_rs::fleet_cluster::Cluster as FleetCluster;
use fleet_api_rs::fleet_cluster_registration_token::ClusterRegistrationToken;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use crate::hooks::cluster::{ClusterInfo, ClusterShape};
use crate::model::config::ClusterImport;
use crate::model::fleet;
use crate::names;

/// The Fleet Cluster the hook creates for an agent-initiated Cluster without one.
pub fn desired_fleet_cluster(
    cluster: &ClusterInfo,
    import: &ClusterImport,
    client_id: &str,
) -> FleetCluster {
    // Only the name, the client ID and our mark: the import controller applies the rest, and a
    // field written here would stay co-owned by this field manager, so the import controller
    // could never remove it (e.g. a label removed from the CAPI Cluster).
    let mut fleet_cluster = fleet::registration_stub(cluster, import, client_id);
    fleet_cluster
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(
            names::REGISTRATION_ANNOTATION.to_string(),
            names::REGISTRATION_RUNTIME_EXTENSION.to_string(),
        );
    fleet_cluster
}

/// A new random client ID.
pub fn new_client_id() -> String {
    fleet::random_client_id()
}

/// Name of the ClusterRegistrationToken of a CAPI Cluster (CAAPF's: the CAPI Cluster name).
pub fn token_name(cluster: &ClusterInfo) -> String {
    cluster.name.clone()
}

/// The ClusterRegistrationToken of an agent-initiated CAPI Cluster.
pub fn desired_token(cluster: &ClusterInfo, import: &ClusterImport) -> ClusterRegistrationToken {
    fleet::desired_registration_token(cluster, import)
}

/// Owner reference to the CAPI Cluster for the bootstrap Secret, in the API version the request
/// used (`v1beta1` on CAPI v1.10, where `v1beta2` is not served). `None` without a uid.
pub fn cluster_owner(cluster: &ClusterInfo) -> Option<OwnerReference> {
    if cluster.uid.is_empty() {
        return None;
    }
    let version = match cluster.shape {
        ClusterShape::V1Beta1 => "v1beta1",
        ClusterShape::V1Beta2 | ClusterShape::Unknown => "v1beta2",
    };
    Some(OwnerReference {
        api_version: format!("cluster.x-k8s.io/{version}"),
        kind: "Cluster".to_string(),
        name: cluster.name.clone(),
        uid: cluster.uid.clone(),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::config::EffectiveConfig;
    use serde_json::json;

    fn cluster() -> ClusterInfo {
        ClusterInfo::decode(&json!({
            "metadata": {"name": "c1", "namespace": "ns", "uid": "u-1",
                "labels": {"env": "dev"},
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "team": "a"}},
            "spec": {"topology": {"class": "quick-start", "classNamespace": "classes"}}
        }))
        .expect("cluster")
    }

    #[test]
    fn fleet_cluster_is_the_minimal_registration_stub_marked_as_prepared() {
        let config = EffectiveConfig::default();
        let import = config.cluster.as_ref().expect("import");
        let fleet_cluster = desired_fleet_cluster(&cluster(), import, "id-1");
        let value = serde_json::to_value(&fleet_cluster).expect("json");
        assert_eq!(value["metadata"]["name"], "c1");
        assert!(
            value["metadata"].get("labels").is_none(),
            "the import controller owns labels"
        );
        assert_eq!(
            value["metadata"]["annotations"],
            json!({"fleet.addons.cluster.x-k8s.io/registration": "runtime-extension"})
        );
        assert_eq!(value["spec"]["clientID"], "id-1");
        assert!(value["spec"]["kubeConfigSecret"].is_null());
        assert!(fleet::prepared_by_runtime_extension(Some(&fleet_cluster)));
        assert!(fleet::is_agent_initiated(
            import,
            &cluster(),
            Some(&fleet_cluster)
        ));
    }

    #[test]
    fn bootstrap_secret_owner_follows_the_request_version() {
        assert_eq!(
            cluster_owner(&cluster()).map(|o| o.api_version),
            Some("cluster.x-k8s.io/v1beta1".to_string())
        );
    }
}
