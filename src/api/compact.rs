//! Objects kept as typed metadata plus compact JSON text for everything else: the form the
//! caches hold of the objects there is one of per workload cluster.
//!
//! As a tree of `serde_json` maps every nested object is a B-tree node of about 640 bytes
//! however few keys it has, so a provisioned topology Cluster's spec took about 20 KiB as a tree
//! against under 2 KiB as text (`tests/cache_footprint.rs`).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::fmt;

/// An object's top-level fields besides `apiVersion`, `kind` and `metadata` (`spec`, `status`
/// and anything else, untouched), as the compact text of one JSON object. Read it with
/// [`Body::get`] or [`Body::to_map`], which decode it; change it with [`Body::edit`].
#[derive(Clone, PartialEq, Eq)]
pub struct Body(Box<str>);

impl Body {
    pub fn from_map(map: Map<String, Value>) -> Self {
        // Serialising a map of JSON values cannot fail (its keys are strings).
        Self(Value::Object(map).to_string().into_boxed_str())
    }

    /// The fields, decoded (the text is always a JSON object written by [`Body::from_map`]).
    pub fn to_map(&self) -> Map<String, Value> {
        serde_json::from_str(&self.0).unwrap_or_default()
    }

    /// One top-level field (`spec`, `status`), decoded.
    pub fn get(&self, key: &str) -> Option<Value> {
        self.to_map().remove(key)
    }

    /// Changes the fields.
    pub fn edit(&mut self, change: impl FnOnce(&mut Map<String, Value>)) {
        let mut map = self.to_map();
        change(&mut map);
        *self = Self::from_map(map);
    }

    /// Sets one top-level field.
    pub fn insert(&mut self, key: &str, value: Value) {
        self.edit(|map| {
            map.insert(key.to_string(), value);
        });
    }

    /// The compact JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for Body {
    fn default() -> Self {
        Self("{}".into())
    }
}

impl fmt::Debug for Body {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The wire form of a compact resource, for (de)serialisation.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Wire<S, M> {
    #[serde(default)]
    pub api_version: S,
    #[serde(default)]
    pub kind: S,
    #[serde(default)]
    pub metadata: M,
    #[serde(flatten)]
    pub body: Map<String, Value>,
}

/// Declares a namespaced resource of `group`/`version` kept as metadata plus a [`Body`].
macro_rules! compact_resource {
    ($(#[$doc:meta])* $name:ident, $group:literal, $version:literal, $kind:literal, $plural:literal) => {
        $(#[$doc])*
        #[derive(Clone, Debug, Default, PartialEq)]
        pub struct $name {
            pub api_version: String,
            pub kind: String,
            pub metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
            /// `spec`, `status` and anything else, untouched.
            pub body: $crate::api::compact::Body,
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let wire = $crate::api::compact::Wire {
                    api_version: self.api_version.as_str(),
                    kind: self.kind.as_str(),
                    metadata: &self.metadata,
                    body: self.body.to_map(),
                };
                serde::Serialize::serialize(&wire, serializer)
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let wire: $crate::api::compact::Wire<String, k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta> =
                    serde::Deserialize::deserialize(deserializer)?;
                Ok(Self {
                    api_version: wire.api_version,
                    kind: wire.kind,
                    metadata: wire.metadata,
                    body: $crate::api::compact::Body::from_map(wire.body),
                })
            }
        }

        impl $name {
            /// The whole object as JSON (an error, never a silent `null`: `templateValues`
            /// built from `null` would empty a Fleet Cluster's values).
            pub fn to_json(&self) -> $crate::Result<serde_json::Value> {
                Ok(serde_json::to_value(self)?)
            }
        }

        impl kube::core::Resource for $name {
            type DynamicType = ();
            type Scope = kube::core::NamespaceResourceScope;

            fn kind(_: &()) -> std::borrow::Cow<'_, str> {
                $kind.into()
            }
            fn group(_: &()) -> std::borrow::Cow<'_, str> {
                $group.into()
            }
            fn version(_: &()) -> std::borrow::Cow<'_, str> {
                $version.into()
            }
            fn plural(_: &()) -> std::borrow::Cow<'_, str> {
                $plural.into()
            }
            fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

pub(crate) use compact_resource;

/// A [`kube::api::DynamicObject`] kept as metadata plus a [`Body`]: what the caches of
/// referenced objects (ControlPlane, InfrastructureCluster) hold, one per workload cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct CompactObject {
    pub types: Option<kube::core::TypeMeta>,
    pub metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    pub body: Body,
}

impl CompactObject {
    pub fn of(object: kube::api::DynamicObject) -> Self {
        let body = match object.data {
            Value::Object(map) => Body::from_map(map),
            _ => Body::default(),
        };
        Self {
            types: object.types,
            metadata: object.metadata,
            body,
        }
    }
}

impl Serialize for CompactObject {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let (api_version, kind) = self
            .types
            .as_ref()
            .map(|t| (t.api_version.as_str(), t.kind.as_str()))
            .unwrap_or_default();
        let wire = Wire {
            api_version,
            kind,
            metadata: &self.metadata,
            body: self.body.to_map(),
        };
        wire.serialize(serializer)
    }
}

impl kube::core::Resource for CompactObject {
    type DynamicType = kube::core::ApiResource;
    type Scope = kube::core::DynamicResourceScope;

    fn kind(resource: &kube::core::ApiResource) -> std::borrow::Cow<'_, str> {
        resource.kind.as_str().into()
    }
    fn group(resource: &kube::core::ApiResource) -> std::borrow::Cow<'_, str> {
        resource.group.as_str().into()
    }
    fn version(resource: &kube::core::ApiResource) -> std::borrow::Cow<'_, str> {
        resource.version.as_str().into()
    }
    fn api_version(resource: &kube::core::ApiResource) -> std::borrow::Cow<'_, str> {
        resource.api_version.as_str().into()
    }
    fn plural(resource: &kube::core::ApiResource) -> std::borrow::Cow<'_, str> {
        resource.plural.as_str().into()
    }
    fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_body_reads_and_edits_like_the_map_it_holds() {
        let map = json!({"spec": {"b": [1, 2.5, "x"], "a": null}, "status": {"phase": "Up"}});
        let map = map.as_object().expect("object").clone();
        let mut body = Body::from_map(map.clone());
        assert_eq!(body.to_map(), map);
        assert_eq!(body.get("status"), Some(json!({"phase": "Up"})));
        assert_eq!(body.get("missing"), None);
        body.edit(|m| {
            m.remove("status");
        });
        body.insert("extra", json!(true));
        assert_eq!(
            body.as_str(),
            r#"{"extra":true,"spec":{"a":null,"b":[1,2.5,"x"]}}"#
        );
        assert_eq!(Body::default().to_map(), Map::new());
    }

    #[test]
    fn a_compact_object_serialises_as_the_dynamic_object_it_came_from() {
        let served = json!({
            "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane",
            "metadata": {"name": "cp", "namespace": "ns", "labels": {"a": "b"}},
            "spec": {"replicas": 3, "version": "v1.34.1"}
        });
        let object: kube::api::DynamicObject =
            serde_json::from_value(served.clone()).expect("object");
        let compact = CompactObject::of(object);
        assert_eq!(serde_json::to_value(&compact).expect("JSON"), served);
    }
}
