//! The CAPI Cluster embedded in lifecycle hook requests, decoded tolerantly.
//!
//! CAPI v1.10–v1.12 send a `cluster.x-k8s.io/v1beta1` Cluster, v1.13 onward a `v1beta2` one
//! (research A.5). `apiVersion`/`kind` may be missing, so the shape is detected from the fields:
//! v1beta2 has `spec.topology.classRef` and an `apiGroup` in `spec.controlPlaneRef`; v1beta1 has
//! `spec.topology.class`/`classNamespace` and an `apiVersion` in `spec.controlPlaneRef`.

use std::ops::Deref;

use serde_json::Value;

use crate::model::agent_bootstrap::{FLEET_AGENT_VARIABLE, FleetAgentSetting};
use crate::model::capi::ClusterView;

/// Which Cluster API version the object has the shape of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterShape {
    V1Beta1,
    V1Beta2,
    /// Neither shape could be told apart (e.g. no topology and no references yet); every field
    /// we read has the same name in both.
    Unknown,
}

/// The Cluster of a lifecycle request: the provider's tolerant view of it (the same the
/// controllers use, so hook and controllers build the same Fleet objects) and its shape.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterInfo {
    pub view: ClusterView,
    pub shape: ClusterShape,
    /// The control plane's `fleetAgent` setting (override over Cluster-level variable).
    pub fleet_agent: FleetAgentSetting,
}

impl Deref for ClusterInfo {
    type Target = ClusterView;

    fn deref(&self) -> &ClusterView {
        &self.view
    }
}

impl ClusterInfo {
    /// Decodes the `cluster` field of a lifecycle request. The error names the missing field.
    pub fn decode(cluster: &Value) -> Result<ClusterInfo, String> {
        if !cluster.is_object() {
            return Err("the request has no cluster object".to_string());
        }
        let present = |pointer: &str| {
            cluster
                .pointer(pointer)
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty())
        };
        if !present("/metadata/name") {
            return Err("cluster.metadata.name is missing".to_string());
        }
        if !present("/metadata/namespace") {
            return Err("cluster.metadata.namespace is missing".to_string());
        }
        let view = ClusterView::from_json(cluster)
            .ok_or_else(|| "cluster.metadata is not an object".to_string())?;
        let fleet_agent = FleetAgentSetting::of(
            view.variables.get(FLEET_AGENT_VARIABLE),
            control_plane_override(cluster, FLEET_AGENT_VARIABLE),
        );
        Ok(ClusterInfo {
            view,
            shape: detect_shape(&cluster["spec"]),
            fleet_agent,
        })
    }

    /// `namespace/name`, for messages.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// The value of `variable` in `spec.topology.controlPlane.variables.overrides` (the same path in
/// v1beta1 and v1beta2).
fn control_plane_override<'a>(cluster: &'a Value, variable: &str) -> Option<&'a Value> {
    cluster
        .pointer("/spec/topology/controlPlane/variables/overrides")?
        .as_array()?
        .iter()
        .find(|entry| entry["name"] == variable)
        .map(|entry| &entry["value"])
}

fn detect_shape(spec: &Value) -> ClusterShape {
    let topology = &spec["topology"];
    let refs = [&spec["controlPlaneRef"], &spec["infrastructureRef"]];
    if topology["classRef"].is_object() || refs.iter().any(|r| r["apiGroup"].is_string()) {
        ClusterShape::V1Beta2
    } else if topology["class"].is_string() || refs.iter().any(|r| r["apiVersion"].is_string()) {
        ClusterShape::V1Beta1
    } else {
        ClusterShape::Unknown
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::capi::ClassRef;
    use serde_json::json;

    #[test]
    fn decodes_both_shapes_without_api_version() {
        let v1beta1 = json!({
            "metadata": {"name": "c1", "namespace": "ns", "uid": "u1", "labels": {"env": "dev"}},
            "spec": {"topology": {"class": "quick-start", "classNamespace": "classes", "version": "v1.31.0",
                     "variables": [{"name": "fleetAgent", "value": {"enabled": false}}]}}
        });
        let info = ClusterInfo::decode(&v1beta1).expect("decodes");
        assert_eq!(info.shape, ClusterShape::V1Beta1);
        assert_eq!(
            info.class,
            Some(ClassRef {
                name: "quick-start".into(),
                namespace: "classes".into()
            })
        );
        assert_eq!(info.uid, "u1");
        assert_eq!(info.variables["fleetAgent"], json!({"enabled": false}));
        assert_eq!(info.labels["env"], "dev");

        let v1beta2 = json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "c1", "namespace": "ns"},
            "spec": {"topology": {"classRef": {"name": "quick-start"}, "version": "v1.33.1"}}
        });
        let info = ClusterInfo::decode(&v1beta2).expect("decodes");
        assert_eq!(info.shape, ClusterShape::V1Beta2);
        assert_eq!(
            info.class,
            Some(ClassRef {
                name: "quick-start".into(),
                namespace: "ns".into()
            })
        );
    }

    #[test]
    fn the_control_plane_override_wins_over_the_cluster_variable() {
        let cluster = json!({"metadata": {"name": "c1", "namespace": "ns"},
            "spec": {"topology": {"classRef": {"name": "quick-start"},
                "variables": [{"name": "fleetAgent", "value": {"enabled": false}}],
                "controlPlane": {"variables": {"overrides": [{"name": "fleetAgent", "value": {"enabled": true}}]}}}}});
        let info = ClusterInfo::decode(&cluster).expect("decodes");
        assert_eq!(info.fleet_agent, FleetAgentSetting::Enabled);
        let plain = json!({"metadata": {"name": "c1", "namespace": "ns"}, "spec": {"topology": {"classRef": {"name": "x"}}}});
        assert_eq!(
            ClusterInfo::decode(&plain).map(|c| c.fleet_agent),
            Ok(FleetAgentSetting::NotUsed)
        );
    }

    #[test]
    fn references_tell_the_shape_apart() {
        let spec = |r: Value| json!({"metadata": {"name": "c", "namespace": "n"}, "spec": {"controlPlaneRef": r}});
        let beta2 = spec(
            json!({"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": "x"}),
        );
        let beta1 = spec(
            json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta1", "kind": "KubeadmControlPlane", "name": "x"}),
        );
        assert_eq!(
            ClusterInfo::decode(&beta2).map(|c| c.shape),
            Ok(ClusterShape::V1Beta2)
        );
        assert_eq!(
            ClusterInfo::decode(&beta1).map(|c| c.shape),
            Ok(ClusterShape::V1Beta1)
        );
        let bare = json!({"metadata": {"name": "c", "namespace": "n"}});
        assert_eq!(
            ClusterInfo::decode(&bare).map(|c| c.shape),
            Ok(ClusterShape::Unknown)
        );
    }

    #[test]
    fn missing_identity_is_an_error_naming_the_field() {
        assert_eq!(
            ClusterInfo::decode(&json!({"metadata": {"namespace": "n"}})),
            Err("cluster.metadata.name is missing".to_string())
        );
        assert_eq!(
            ClusterInfo::decode(&json!({"metadata": {"name": "c"}})),
            Err("cluster.metadata.namespace is missing".to_string())
        );
        assert!(ClusterInfo::decode(&Value::Null).is_err());
    }
}
