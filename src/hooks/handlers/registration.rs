//! The Fleet objects of an agent-initiated Cluster, as BeforeClusterCreate creates them.
//!
//! Interim: the import controller's model of the desired Fleet Cluster replaces
//! [`desired_fleet_cluster`] when it lands, so the hook and the controller agree on every field.
//! The hook only ever creates (never updates) these objects, with its own field manager, so the
//! client ID generated here is the one kept forever.

use std::collections::BTreeMap;

use fleet_api_rs::fleet_cluster::{Cluster as FleetCluster, ClusterSpec as FleetClusterSpec};
use fleet_api_rs::fleet_cluster_registration_token::{
    ClusterRegistrationToken, ClusterRegistrationTokenSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use rand::Rng;
use rand::distr::Alphanumeric;

use crate::hooks::cluster::{ClusterInfo, ClusterShape};
use crate::model::config::ClusterImport;
use crate::names;

/// Time to live of the ClusterRegistrationToken: long enough for slow infrastructure to boot the
/// first control-plane machine (the token is only used once, at first registration).
pub const REGISTRATION_TOKEN_TTL: &str = "24h";

/// Length of generated client IDs (as CAAPF).
pub const CLIENT_ID_LENGTH: usize = 64;

/// A new random client ID (alphanumeric).
pub fn new_client_id() -> String {
    rand::rng()
        .sample_iter(&Alphanumeric)
        .take(CLIENT_ID_LENGTH)
        .map(char::from)
        .collect()
}

/// Owner reference to the CAPI Cluster, in the API version the request used (v1beta1 on CAPI
/// v1.10, where v1beta2 is not served). `None` without a uid.
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

/// The Fleet Cluster of an agent-initiated CAPI Cluster (same rules as the import controller:
/// name from the naming settings, the Cluster's labels plus the ClusterClass labels, its
/// annotations, the agent settings, an owner reference when configured, a client ID and no
/// kubeconfig Secret).
pub fn desired_fleet_cluster(
    cluster: &ClusterInfo,
    import: &ClusterImport,
    client_id: &str,
) -> FleetCluster {
    let mut labels = cluster.labels.clone();
    if let Some(class) = &cluster.class {
        labels.insert(
            names::CLUSTERCLASS_NAME_LABEL.to_string(),
            class.name.clone(),
        );
        labels.insert(
            names::CLUSTERCLASS_NAMESPACE_LABEL.to_string(),
            class.namespace.clone(),
        );
    }
    let annotations: BTreeMap<String, String> = cluster
        .annotations
        .iter()
        .filter(|(key, _)| key.as_str() != names::LAST_APPLIED_ANNOTATION)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    FleetCluster {
        metadata: ObjectMeta {
            name: Some(import.fleet_cluster_name(&cluster.name)),
            namespace: Some(cluster.namespace.clone()),
            labels: (!labels.is_empty()).then_some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            owner_references: import
                .set_owner_references
                .then(|| cluster_owner(cluster))
                .flatten()
                .map(|owner| vec![owner]),
            ..Default::default()
        },
        spec: FleetClusterSpec {
            client_id: Some(client_id.to_string()),
            agent_namespace: Some(import.agent_namespace.clone()),
            agent_tolerations: Some(import.agent_tolerations.clone()),
            host_network: import.host_network,
            agent_env_vars: import.agent_env_vars.clone(),
            ..Default::default()
        },
        status: None,
    }
}

/// Name of the ClusterRegistrationToken of a CAPI Cluster (CAAPF's: the CAPI Cluster name).
pub fn token_name(cluster: &ClusterInfo) -> String {
    cluster.name.clone()
}

/// The ClusterRegistrationToken of an agent-initiated CAPI Cluster, owned by it (so it goes with
/// the Cluster even when BeforeClusterDelete is not called).
pub fn desired_token(cluster: &ClusterInfo) -> ClusterRegistrationToken {
    ClusterRegistrationToken {
        metadata: ObjectMeta {
            name: Some(token_name(cluster)),
            namespace: Some(cluster.namespace.clone()),
            owner_references: cluster_owner(cluster).map(|owner| vec![owner]),
            ..Default::default()
        },
        spec: ClusterRegistrationTokenSpec {
            ttl: Some(REGISTRATION_TOKEN_TTL.to_string()),
        },
        status: None,
    }
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
            "spec": {"topology": {"classRef": {"name": "quick-start", "namespace": "classes"}}}
        }))
        .expect("cluster")
    }

    #[test]
    fn fleet_cluster_follows_the_import_rules() {
        let config = EffectiveConfig::default();
        let import = config.cluster.as_ref().expect("import");
        let fleet = desired_fleet_cluster(&cluster(), import, "id-1");
        let value = serde_json::to_value(&fleet).expect("json");
        assert_eq!(value["metadata"]["name"], "c1");
        assert_eq!(value["metadata"]["namespace"], "ns");
        assert_eq!(
            value["metadata"]["labels"],
            json!({"env": "dev",
                "clusterclass-name.fleet.addons.cluster.x-k8s.io": "quick-start",
                "clusterclass-namespace.fleet.addons.cluster.x-k8s.io": "classes"})
        );
        assert_eq!(value["metadata"]["annotations"], json!({"team": "a"}));
        assert_eq!(
            value["metadata"]["ownerReferences"],
            json!([{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "c1", "uid": "u-1"}])
        );
        assert_eq!(value["spec"]["clientID"], "id-1");
        assert_eq!(value["spec"]["agentNamespace"], "fleet-addon-agent");
        assert_eq!(value["spec"]["hostNetwork"], true);
        assert!(value["spec"]["kubeConfigSecret"].is_null());
    }

    #[test]
    fn client_ids_are_long_random_alphanumerics() {
        let a = new_client_id();
        assert_eq!(a.len(), 64);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(a, new_client_id());
    }

    #[test]
    fn token_is_named_after_the_cluster_and_owned_by_it() {
        let token = serde_json::to_value(desired_token(&cluster())).expect("json");
        assert_eq!(token["metadata"]["name"], "c1");
        assert_eq!(token["spec"]["ttl"], REGISTRATION_TOKEN_TTL);
        assert_eq!(token["metadata"]["ownerReferences"][0]["uid"], "u-1");
    }
}
