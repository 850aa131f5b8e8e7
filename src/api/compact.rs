//! Objects kept as typed metadata plus compact JSON text for everything else, deflated (but
//! for a Cluster's, read on every decision): the form the caches hold of the objects there is
//! one of per workload cluster.
//!
//! As a tree of `serde_json` maps every nested object is a B-tree node of about 640 bytes
//! however few keys it has, so a provisioned topology Cluster's spec took about 20 KiB as a tree
//! against under 2 KiB as text, and text deflates to a third to a half of that
//! (`tests/cache_footprint.rs`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use miniz_oxide::deflate::core::{
    CompressorOxide, TDEFLFlush, TDEFLStatus, compress, create_comp_flags_from_zip_params,
};
use miniz_oxide::inflate::TINFLStatus;
use miniz_oxide::inflate::core::{DecompressorOxide, decompress, inflate_flags};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt;

/// Deflate level of the cached text: the fastest, as every watch event of a cached kind
/// compresses once, and the higher levels gain little on texts of a few KiB.
const DEFLATE_LEVEL: u8 = 1;

thread_local! {
    // One compressor and one decompressor per thread, reset between uses: a compressor's
    // state is a few hundred KiB (its dictionary and hash tables), and allocating it for each
    // text of a few KiB cost more than the compression (a fresh mapping, zeroed, per watch
    // event).
    static COMPRESSOR: RefCell<Option<Box<CompressorOxide>>> = const { RefCell::new(None) };
    static DECOMPRESSOR: RefCell<Option<Box<DecompressorOxide>>> = const { RefCell::new(None) };
}

/// Raw deflate (no zlib wrapper) of `input`.
fn deflate(text: &[u8]) -> Vec<u8> {
    let mut input = text;
    COMPRESSOR.with_borrow_mut(|compressor| {
        let compressor = compressor.get_or_insert_with(|| {
            Box::new(CompressorOxide::new(create_comp_flags_from_zip_params(
                DEFLATE_LEVEL.into(),
                0,
                0,
            )))
        });
        compressor.reset();
        let mut output = vec![0; (input.len() / 2).max(64)];
        let mut written = 0;
        loop {
            let (status, read, wrote) = compress(
                compressor,
                input,
                &mut output[written..],
                TDEFLFlush::Finish,
            );
            written += wrote;
            match status {
                TDEFLStatus::Done => {
                    output.truncate(written);
                    return output;
                }
                TDEFLStatus::Okay if read <= input.len() => {
                    input = &input[read..];
                    if output.len() - written < 64 {
                        output.resize(output.len() * 2, 0);
                    }
                }
                // Compressing into a growing buffer does not fail; if the reused state ever
                // did, the one-shot compressor (a fresh state) writes the same format.
                _ => return miniz_oxide::deflate::compress_to_vec(text, DEFLATE_LEVEL),
            }
        }
    })
}

/// Inflates what [`deflate`] wrote (`None` if it does not inflate).
fn inflate(input: &[u8]) -> Option<Vec<u8>> {
    DECOMPRESSOR.with_borrow_mut(|decompressor| {
        let decompressor = decompressor.get_or_insert_with(Box::default);
        decompressor.init();
        let flags = inflate_flags::TINFL_FLAG_USING_NON_WRAPPING_OUTPUT_BUF;
        let mut output = vec![0; input.len().saturating_mul(4).max(64)];
        let mut input = input;
        let mut written = 0;
        loop {
            let (status, read, wrote) =
                decompress(decompressor, input, &mut output, written, flags);
            written += wrote;
            match status {
                TINFLStatus::Done => {
                    output.truncate(written);
                    return Some(output);
                }
                TINFLStatus::HasMoreOutput if read <= input.len() => {
                    input = &input[read..];
                    output.resize(output.len() * 2, 0);
                }
                _ => return None,
            }
        }
    })
}

/// An object's top-level fields besides `apiVersion`, `kind` and `metadata` (`spec`, `status`
/// and anything else, untouched), as the compact text of one JSON object, deflated
/// ([`Body::from_map`]) or plain ([`Body::plain`]). Read it with [`Body::get`], [`Body::to_map`]
/// or [`Body::text`], which inflate (and decode) it; change it with [`Body::edit`].
#[derive(Clone, PartialEq, Eq)]
pub struct Body {
    bytes: Box<[u8]>,
    deflated: bool,
}

impl Body {
    /// The fields as deflated text.
    pub fn from_map(map: Map<String, Value>) -> Self {
        // Serialising a map of JSON values cannot fail (its keys are strings).
        let text = Value::Object(map).to_string();
        Self {
            bytes: deflate(text.as_bytes()).into_boxed_slice(),
            deflated: true,
        }
    }

    /// The fields as plain text: for a body read on every decision (a Cluster's), where
    /// inflating each time cost more than the memory it saved.
    pub fn plain(map: Map<String, Value>) -> Self {
        Self {
            bytes: Value::Object(map)
                .to_string()
                .into_bytes()
                .into_boxed_slice(),
            deflated: false,
        }
    }

    /// The compact JSON text (always a JSON object written by [`Body::from_map`] or
    /// [`Body::plain`]; `{}` if it no longer inflated, which only a corrupted heap could cause).
    pub fn text(&self) -> Cow<'_, str> {
        let text = if self.deflated {
            inflate(&self.bytes)
                .and_then(|bytes| String::from_utf8(bytes).ok())
                .map(Cow::Owned)
        } else {
            std::str::from_utf8(&self.bytes).ok().map(Cow::Borrowed)
        };
        text.unwrap_or(Cow::Borrowed("{}"))
    }

    /// The fields, decoded.
    pub fn to_map(&self) -> Map<String, Value> {
        serde_json::from_str(&self.text()).unwrap_or_default()
    }

    /// One top-level field (`spec`, `status`), decoded.
    pub fn get(&self, key: &str) -> Option<Value> {
        self.to_map().remove(key)
    }

    /// Changes the fields (the text stays plain or deflated).
    pub fn edit(&mut self, change: impl FnOnce(&mut Map<String, Value>)) {
        let mut map = self.to_map();
        change(&mut map);
        *self = if self.deflated {
            Self::from_map(map)
        } else {
            Self::plain(map)
        };
    }
}

impl Default for Body {
    fn default() -> Self {
        Self::from_map(Map::new())
    }
}

impl fmt::Debug for Body {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text())
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
        $crate::api::compact::compact_resource!($(#[$doc])* $name, $group, $version, $kind, $plural, from_map);
    };
    ($(#[$doc:meta])* $name:ident, $group:literal, $version:literal, $kind:literal, $plural:literal, $body:ident) => {
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
                    body: $crate::api::compact::Body::$body(wire.body),
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

        $crate::api::namespaced_resource!($name, $group, $version, $kind, $plural);
    };
}

pub(crate) use compact_resource;

/// A [`kube::api::DynamicObject`] as the caches of referenced objects (ControlPlane,
/// InfrastructureCluster) hold it, one per workload cluster: typed, only the metadata their
/// readers look up (name, namespace, uid, resourceVersion, generation, ownerReferences); the
/// rest of the metadata (labels and annotations: a B-tree node of about 540 bytes each as
/// typed maps) and everything else in the [`Body`], under `metadata`.
#[derive(Clone, Debug, PartialEq)]
pub struct CompactObject {
    pub types: Option<kube::core::TypeMeta>,
    pub metadata: ObjectMeta,
    /// A hash of what a user changes, taken before labels and annotations went into the body:
    /// generation (the spec), labels and annotations.
    pub user_visible_hash: u64,
    pub body: Body,
}

/// The metadata a [`CompactObject`] keeps typed.
const TYPED_METADATA: [&str; 6] = [
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "ownerReferences",
];

impl CompactObject {
    pub fn of(object: kube::api::DynamicObject) -> Self {
        let kube::api::DynamicObject {
            types,
            metadata,
            data,
        } = object;
        let user_visible_hash = {
            use std::hash::{Hash, Hasher};
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            metadata.generation.hash(&mut hasher);
            metadata.labels.hash(&mut hasher);
            metadata.annotations.hash(&mut hasher);
            hasher.finish()
        };
        let mut body = match data {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        let typed = ObjectMeta {
            name: metadata.name.clone(),
            namespace: metadata.namespace.clone(),
            uid: metadata.uid.clone(),
            resource_version: metadata.resource_version.clone(),
            generation: metadata.generation,
            owner_references: metadata.owner_references.clone(),
            ..ObjectMeta::default()
        };
        // ObjectMeta always serialises to an object.
        if let Ok(Value::Object(mut rest)) = serde_json::to_value(metadata) {
            rest.retain(|key, _| !TYPED_METADATA.contains(&key.as_str()));
            if !rest.is_empty() {
                body.insert("metadata".to_string(), Value::Object(rest));
            }
        }
        Self {
            types,
            metadata: typed,
            user_visible_hash,
            body: Body::from_map(body),
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
        let mut body = self.body.to_map();
        let mut metadata = match serde_json::to_value(&self.metadata) {
            Ok(Value::Object(metadata)) => metadata,
            _ => Map::new(),
        };
        if let Some(Value::Object(rest)) = body.remove("metadata") {
            metadata.extend(rest);
        }
        let wire = Wire {
            api_version,
            kind,
            metadata,
            body,
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
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    impl Body {
        /// Sets one top-level field.
        pub(crate) fn insert(&mut self, key: &str, value: Value) {
            self.edit(|map| {
                map.insert(key.to_string(), value);
            });
        }
    }

    #[test]
    fn a_body_reads_and_edits_like_the_map_it_holds() {
        let map = json!({"spec": {"b": [1, 2.5, "x"], "a": null}, "status": {"phase": "Up"}});
        let map = map.as_object().expect("object").clone();
        for (mut body, deflated) in [
            (Body::from_map(map.clone()), true),
            (Body::plain(map.clone()), false),
        ] {
            assert_eq!(body.to_map(), map);
            assert_eq!(body.get("status"), Some(json!({"phase": "Up"})));
            assert_eq!(body.get("missing"), None);
            body.edit(|m| {
                m.remove("status");
            });
            body.insert("extra", json!(true));
            let text = r#"{"extra":true,"spec":{"a":null,"b":[1,2.5,"x"]}}"#;
            assert_eq!(body.text(), text);
            // An edit keeps the form: plain text is held as it reads.
            assert_eq!(body.deflated, deflated);
            assert_eq!(&*body.bytes == text.as_bytes(), !deflated);
        }
        assert_eq!(Body::default().to_map(), Map::new());
    }

    #[test]
    fn deflate_and_inflate_round_trip_with_the_reused_state() {
        // Texts of every size class, one after another on the same thread's compressor and
        // decompressor, including a text larger than the first output buffer of both.
        let large: String = (0..2_000)
            .map(|i| {
                format!(
                    r#"{{"name":"md-{i}","class":"default-worker","replicas":{}}}"#,
                    i % 5
                )
            })
            .collect();
        let texts = [
            String::new(),
            "{}".to_string(),
            r#"{"spec":{"a":1}}"#.to_string(),
            large,
            "{}".to_string(),
        ];
        let deflated: Vec<Vec<u8>> = texts.iter().map(|t| deflate(t.as_bytes())).collect();
        for (text, bytes) in texts.iter().zip(&deflated) {
            assert_eq!(inflate(bytes).as_deref(), Some(text.as_bytes()));
        }
        assert!(
            deflated[3].len() < texts[3].len() / 3,
            "{}",
            deflated[3].len()
        );
        // The same text deflates to the same bytes (the caches compare bodies by bytes).
        assert_eq!(deflate(texts[3].as_bytes()), deflated[3]);
        assert_eq!(inflate(&[0xff, 0x00, 0x12]), None);
    }

    #[test]
    fn a_compact_object_serialises_as_the_dynamic_object_it_came_from() {
        let served = json!({
            "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane",
            "metadata": {
                "name": "cp", "namespace": "ns", "uid": "u-1", "resourceVersion": "7",
                "generation": 2, "labels": {"a": "b"}, "annotations": {"c": "d"},
                "finalizers": ["kubeadm.controlplane.cluster.x-k8s.io"],
                "creationTimestamp": "2026-11-23T10:00:00Z",
                "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                                     "name": "c", "uid": "u-0"}]
            },
            "spec": {"replicas": 3, "version": "v1.34.1"}
        });
        let object: kube::api::DynamicObject =
            serde_json::from_value(served.clone()).expect("object");
        let compact = CompactObject::of(object.clone());
        assert_eq!(serde_json::to_value(&compact).expect("JSON"), served);
        // Typed: what the cache's readers look up; labels and annotations only in the text.
        let meta = &compact.metadata;
        assert_eq!(meta.name.as_deref(), Some("cp"));
        assert_eq!(meta.namespace.as_deref(), Some("ns"));
        assert_eq!(meta.uid.as_deref(), Some("u-1"));
        assert_eq!(meta.resource_version.as_deref(), Some("7"));
        assert_eq!(meta.generation, Some(2));
        assert_eq!(meta.owner_references.as_ref().map(Vec::len), Some(1));
        assert_eq!((&meta.labels, &meta.annotations), (&None, &None));

        // The hash follows generation, labels and annotations, and nothing else.
        let hash_of = |change: fn(&mut kube::api::DynamicObject)| {
            let mut changed = object.clone();
            change(&mut changed);
            CompactObject::of(changed).user_visible_hash
        };
        assert_eq!(hash_of(|_| {}), compact.user_visible_hash);
        assert_eq!(
            hash_of(|o| o.metadata.resource_version = Some("8".into())),
            compact.user_visible_hash
        );
        assert_eq!(
            hash_of(|o| o.data["status"] = json!({"ready": true})),
            compact.user_visible_hash
        );
        for change in [
            (|o: &mut kube::api::DynamicObject| o.metadata.generation = Some(3)) as fn(&mut _),
            |o| o.metadata.labels = None,
            |o| o.metadata.annotations = Some([("c".to_string(), "e".to_string())].into()),
        ] {
            assert_ne!(hash_of(change), compact.user_visible_hash);
        }
    }
}
