//! The CAPI Cluster embedded in lifecycle hook requests, decoded tolerantly.
//!
//! CAPI v1.10–v1.12 send a `cluster.x-k8s.io/v1beta1` Cluster, v1.13 onward a `v1beta2` one
//! (research A.5). `apiVersion`/`kind` may be missing, so the shape is detected from the fields:
//! v1beta2 has `spec.topology.classRef` and an `apiGroup` in `spec.controlPlaneRef`; v1beta1 has
//! `spec.topology.class`/`classNamespace` and an `apiVersion` in `spec.controlPlaneRef`.

use std::collections::BTreeMap;

use serde_json::Value;

/// Which Cluster API version the object has the shape of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterShape {
    V1Beta1,
    V1Beta2,
    /// Neither shape could be told apart (e.g. no topology and no references yet); every field
    /// we read has the same name in both.
    Unknown,
}

/// The facts the handlers need about a Cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterInfo {
    pub name: String,
    pub namespace: String,
    /// Empty when absent (only in hand-written requests: CAPI always sends it).
    pub uid: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub shape: ClusterShape,
    /// The ClusterClass, when the Cluster has a managed topology.
    pub class: Option<ClassRef>,
    /// `spec.topology.version`.
    pub version: Option<String>,
    /// `spec.topology.variables` by name.
    pub variables: BTreeMap<String, Value>,
}

/// A ClusterClass reference; the namespace defaults to the Cluster's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassRef {
    pub name: String,
    pub namespace: String,
}

impl ClusterInfo {
    /// Decodes the `cluster` field of a lifecycle request. The error names the missing field.
    pub fn decode(cluster: &Value) -> Result<ClusterInfo, String> {
        if !cluster.is_object() {
            return Err("the request has no cluster object".to_string());
        }
        let metadata = &cluster["metadata"];
        let text = |value: &Value| value.as_str().filter(|s| !s.is_empty()).map(str::to_string);
        let name = text(&metadata["name"]).ok_or("cluster.metadata.name is missing")?;
        let namespace =
            text(&metadata["namespace"]).ok_or("cluster.metadata.namespace is missing")?;
        let string_map = |value: &Value| -> BTreeMap<String, String> {
            value
                .as_object()
                .map(|map| {
                    map.iter()
                        .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                        .collect()
                })
                .unwrap_or_default()
        };
        let spec = &cluster["spec"];
        let topology = &spec["topology"];
        let shape = detect_shape(spec);
        let class = if topology.is_object() {
            let (class_name, class_namespace) = match &topology["classRef"] {
                Value::Object(_) => (
                    text(&topology["classRef"]["name"]),
                    text(&topology["classRef"]["namespace"]),
                ),
                _ => (text(&topology["class"]), text(&topology["classNamespace"])),
            };
            class_name.map(|name| ClassRef {
                name,
                namespace: class_namespace.unwrap_or_else(|| namespace.clone()),
            })
        } else {
            None
        };
        let variables = topology["variables"]
            .as_array()
            .map(|variables| {
                variables
                    .iter()
                    .filter_map(|v| Some((text(&v["name"])?, v["value"].clone())))
                    .collect()
            })
            .unwrap_or_default();
        Ok(ClusterInfo {
            uid: text(&metadata["uid"]).unwrap_or_default(),
            labels: string_map(&metadata["labels"]),
            annotations: string_map(&metadata["annotations"]),
            shape,
            class,
            version: text(&topology["version"]),
            variables,
            name,
            namespace,
        })
    }

    /// `namespace/name`, for messages.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
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
        assert_eq!(info.version.as_deref(), Some("v1.33.1"));
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
