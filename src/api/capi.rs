//! CAPI resources as we watch them: static types (so kube-runtime's shared stores work) whose
//! body stays free-form JSON, read through [`crate::model::capi`]. A typed body would make one
//! unknown enum value in one object break the whole watch.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{NamespaceResourceScope, Resource};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

macro_rules! capi_resource {
    ($(#[$doc:meta])* $name:ident, $kind:literal, $plural:literal) => {
        $(#[$doc])*
        #[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
        #[serde(rename_all = "camelCase")]
        pub struct $name {
            #[serde(default)]
            pub api_version: String,
            #[serde(default)]
            pub kind: String,
            #[serde(default)]
            pub metadata: ObjectMeta,
            /// `spec`, `status` and anything else, untouched.
            #[serde(flatten)]
            pub body: Map<String, Value>,
        }

        impl $name {
            /// The whole object as JSON (an error, never a silent `null`: `templateValues`
            /// built from `null` would empty a Fleet Cluster's values).
            pub fn to_json(&self) -> crate::Result<Value> {
                Ok(serde_json::to_value(self)?)
            }
        }

        impl Resource for $name {
            type DynamicType = ();
            type Scope = NamespaceResourceScope;

            fn kind(_: &()) -> Cow<'_, str> {
                $kind.into()
            }
            fn group(_: &()) -> Cow<'_, str> {
                "cluster.x-k8s.io".into()
            }
            fn version(_: &()) -> Cow<'_, str> {
                "v1beta2".into()
            }
            fn plural(_: &()) -> Cow<'_, str> {
                $plural.into()
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

capi_resource!(
    /// A CAPI `Cluster` (`cluster.x-k8s.io/v1beta2`).
    CapiCluster,
    "Cluster",
    "clusters"
);

capi_resource!(
    /// A CAPI `ClusterClass` (`cluster.x-k8s.io/v1beta2`).
    CapiClusterClass,
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
