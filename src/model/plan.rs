//! A plan is data: the writes one observation calls for, in order, and what to do next. The
//! model builds plans (pure); `crate::apply::run`, the one runner, carries them out: it records
//! what each write left for the caches to show, publishes the Events, and stops at the first
//! error. A plan covers one observation: a write whose answer is needed
//! ([`Write::CreateOrGet`]) ends it, and the next observation continues.
//!
//! Bodies are the JSON the API server receives; an object is named by its API resource,
//! namespace and name, with the resourceVersion the observation saw of it.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::core::{ApiResource, Resource};
use kube::runtime::events::EventType;
use serde::Serialize;
use serde_json::{Value, json};

use crate::model::agent_manifest::TokenValues;
use crate::model::agent_patch::SCRIPT_KEY;
use crate::model::boot_script::with_token_values;
use crate::model::config::FleetSettings;
use crate::model::diff::{apply_would_change, digest_subtree, owned_fields};
use crate::model::fleet_values::{ServerValues, fleet_controller_config, gates_in_values_yaml};
use crate::names;
use crate::{Error, Result};

/// The object a write is about, and the resourceVersion the observation saw of it (`None`:
/// absent from the cache): what the runner records the write's expectation against.
#[derive(Clone, Debug, PartialEq)]
pub struct ObjectId {
    pub resource: ApiResource,
    /// `None` for a cluster-scoped object.
    pub namespace: Option<String>,
    pub name: String,
    pub seen: Option<String>,
}

impl ObjectId {
    /// `name` (in `namespace`) of the type `K`, seen at resourceVersion `seen`.
    pub fn of<K: Resource<DynamicType = ()>>(
        namespace: Option<&str>,
        name: &str,
        seen: Option<&str>,
    ) -> Self {
        Self {
            resource: ApiResource::erase::<K>(&()),
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
            seen: seen.map(str::to_string),
        }
    }

    /// The identity of an observed `object`.
    pub fn observed<K: Resource<DynamicType = ()>>(object: &K) -> Self {
        let meta = object.meta();
        Self::of::<K>(
            meta.namespace.as_deref(),
            meta.name.as_deref().unwrap_or_default(),
            meta.resource_version.as_deref(),
        )
    }
}

/// One write.
#[derive(Clone, Debug, PartialEq)]
pub enum Write {
    /// Server-side apply of `body` by `manager`, forced (Fleet's controllers co-own some fields
    /// of these objects). Plans hold it only when it changes the cached object
    /// ([`Write::apply_if_changed`]).
    Apply {
        object: ObjectId,
        body: Value,
        manager: &'static str,
    },
    /// Server-side apply of `body` to the status subresource: the fields `manager` owns there
    /// and nothing else. An object gone since it was observed (`object.seen`) is no error; one
    /// never observed is (its writer keeps trying until it exists).
    ApplyStatus {
        object: ObjectId,
        body: Value,
        manager: &'static str,
    },
    /// Creates `body` unless it exists (a conflict says it does, which is all this wants); never
    /// updates (CAAPF's `patchResource: false`).
    Create { object: ObjectId, body: Value },
    /// Creates `body` as `manager`; when someone else created it first, reads theirs and never
    /// overwrites it (gone by that read: an error, try again). Its answer is the next
    /// observation's: it ends a plan ([`Next::Echo`]).
    CreateOrGet {
        object: ObjectId,
        body: Value,
        manager: &'static str,
    },
    /// JSON merge patch by `manager`, unguarded: for fields only this writer sets.
    MergePatch {
        object: ObjectId,
        patch: Value,
        manager: &'static str,
    },
    /// Read-modify-write by `manager`: reads the object, computes the merge patch from it
    /// ([`Change::patch`]) and sends it guarded by the resourceVersion read, so a concurrent
    /// writer is never overwritten (on a conflict it reads again). Nothing when the object is
    /// gone or needs no change.
    Modify {
        object: ObjectId,
        change: Change,
        manager: &'static str,
    },
    /// Adds (`add`) or removes our finalizer, guarded by `object.seen`; `finalizers` as
    /// observed. When the guard fails (the observation was behind), the runner reads the object
    /// again and retries ([`finalizer_patch`]).
    Finalizer {
        object: ObjectId,
        add: bool,
        finalizers: Vec<String>,
    },
    /// Deletes the object (background propagation; already gone is fine). `live_check`: the
    /// cache did not show it, which may only mean it has not seen it yet, so the API server is
    /// asked first and only what exists is deleted.
    Delete { object: ObjectId, live_check: bool },
    /// An Event about `regarding`. Never worth failing for: a failure is logged.
    Event {
        regarding: ObjectReference,
        type_: EventType,
        reason: &'static str,
        action: &'static str,
        note: String,
    },
}

impl Write {
    /// Server-side apply of `desired` unless it would not change `live` (the cached object, as
    /// JSON): a value `manager` applies differs, or a field it owns is no longer applied
    /// ([`crate::model::diff`]). `digested`: a subtree the cache keeps as a digest
    /// ([`digest_subtree`]), digested on both sides before the comparison; the apply sends it
    /// whole.
    pub fn apply_if_changed(
        object: ObjectId,
        desired: &impl Serialize,
        live: Option<&impl Serialize>,
        manager: &'static str,
        digested: Option<&str>,
    ) -> Result<Option<Write>> {
        let body = serde_json::to_value(desired)?;
        if let Some(live) = live {
            let comparable = |mut value: Value| {
                if let Some(pointer) = digested {
                    digest_subtree(&mut value, pointer);
                }
                value
            };
            let live = comparable(serde_json::to_value(live)?);
            let owned = owned_fields(&live, manager);
            if !apply_would_change(&comparable(body.clone()), &live, owned.as_deref()) {
                return Ok(None);
            }
        }
        Ok(Some(Write::Apply {
            object,
            body,
            manager,
        }))
    }

    /// What the write does to which object ("creating Secret"), for the answer naming a failed
    /// write (`None`: an Event, which never fails).
    pub fn describe(&self) -> Option<(String, &ObjectId)> {
        let (verb, object) = match self {
            Write::Apply { object, .. } => ("applying", object),
            Write::ApplyStatus { object, .. } => ("writing the status of", object),
            Write::Create { object, .. } | Write::CreateOrGet { object, .. } => {
                ("creating", object)
            }
            Write::MergePatch { object, .. } | Write::Modify { object, .. } => ("patching", object),
            Write::Finalizer { object, .. } => ("updating the finalizers of", object),
            Write::Delete { object, .. } => ("deleting", object),
            Write::Event { .. } => return None,
        };
        let fleet =
            if object.resource.group == "fleet.cattle.io" && object.resource.kind == "Cluster" {
                "Fleet "
            } else {
                ""
            };
        Some((format!("{verb} {fleet}{}", object.resource.kind), object))
    }

    /// A `Normal` or `Warning` Event about `regarding`.
    pub fn event(
        regarding: &ObjectReference,
        type_: EventType,
        reason: &'static str,
        action: &'static str,
        note: String,
    ) -> Write {
        Write::Event {
            regarding: regarding.clone(),
            type_,
            reason,
            action,
            note,
        }
    }
}

/// What a [`Write::Modify`] computes from the object as read.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// Drop the owner reference with this UID, keeping the others (a moved Cluster's Fleet
    /// Cluster, so the garbage collector does not delete it with the source copy). Nothing
    /// when that UID does not own it.
    Disown { uid: String },
    /// Rewrite a bootstrap Secret's files with a new registration token's values, recording the
    /// token (its UID) it now follows ([`names::REGISTRATION_TOKEN_UID_ANNOTATION`]).
    TokenValues {
        values: Box<TokenValues>,
        token_uid: String,
    },
    /// Rewrite the data key `key` of a ConfigMap someone else's Fleet reads with `text`; the
    /// ConfigMap must exist (`missing`: why it should).
    ConfigMapKey {
        key: &'static str,
        text: KeyText,
        missing: &'static str,
    },
}

/// The new text of a ConfigMap key ([`crate::model::fleet_values`]).
#[derive(Clone, Debug, PartialEq)]
pub enum KeyText {
    /// The feature gates in a values key.
    FeatureGates(Box<FleetSettings>),
    /// The API server URL and CA in Fleet's `fleet-controller` config.
    FleetController(ServerValues),
}

impl Change {
    /// The error for an `object` that is absent (`Ok`: nothing to change).
    pub fn absent(&self, object: &ObjectId) -> Result<()> {
        match self {
            Change::ConfigMapKey { missing, .. } => {
                let namespace = object.namespace.as_deref().unwrap_or_default();
                let name = format!("{namespace}/{}", object.name);
                Err(Error::missing("ConfigMap", name, *missing))
            }
            _ => Ok(()),
        }
    }

    /// The merge patch for the object read as `current` (`None`: nothing to change).
    pub fn patch(&self, current: &Value) -> Result<Option<Value>> {
        match self {
            Change::Disown { uid } => {
                let owners = current
                    .pointer("/metadata/ownerReferences")
                    .and_then(Value::as_array)
                    .map(Vec::as_slice)
                    .unwrap_or_default();
                let owned = |o: &&Value| o.get("uid").and_then(Value::as_str) == Some(uid);
                if uid.is_empty() || !owners.iter().any(|o| owned(&o)) {
                    return Ok(None);
                }
                let kept: Vec<&Value> = owners.iter().filter(|o| !owned(o)).collect();
                Ok(Some(json!({"metadata": {"ownerReferences": kept}})))
            }
            Change::TokenValues { values, token_uid } => {
                let script = current
                    .pointer(&format!("/data/{SCRIPT_KEY}"))
                    .and_then(Value::as_str)
                    .and_then(|text| base64::engine::general_purpose::STANDARD.decode(text).ok())
                    .and_then(|bytes| String::from_utf8(bytes).ok())
                    .unwrap_or_default();
                let name = current.pointer("/metadata/name").and_then(Value::as_str);
                let files = with_token_values(&script, values).map_err(|reason| {
                    Error::malformed("Secret", name.unwrap_or_default(), reason)
                })?;
                Ok(Some(token_values_patch(files, token_uid)))
            }
            Change::ConfigMapKey { key, text, .. } => {
                let value = current
                    .pointer(&format!("/data/{key}"))
                    .and_then(Value::as_str);
                let next = match (text, value) {
                    (KeyText::FeatureGates(fleet), _) => gates_in_values_yaml(value, fleet),
                    (KeyText::FleetController(server), Some(value)) => {
                        fleet_controller_config(value, server)
                    }
                    (KeyText::FleetController(_), None) => Err("is missing".to_string()),
                };
                let meta = |field: &str| current.pointer(field).and_then(Value::as_str);
                let full = format!(
                    "{}/{}",
                    meta("/metadata/namespace").unwrap_or_default(),
                    meta("/metadata/name").unwrap_or_default()
                );
                let next = next.map_err(|reason| {
                    Error::malformed("ConfigMap", full, format!("data.{key} {reason}"))
                })?;
                Ok(next.map(|next| json!({"data": {*key: next}})))
            }
        }
    }
}

/// The merge patch rewriting a bootstrap Secret's files, with the token it now follows.
fn token_values_patch(files: BTreeMap<String, String>, token_uid: &str) -> Value {
    let data: serde_json::Map<String, Value> = files
        .into_iter()
        .map(|(key, text)| {
            let encoded = base64::engine::general_purpose::STANDARD.encode(text);
            (key, Value::String(encoded))
        })
        .collect();
    json!({
        "metadata": {"annotations": {names::REGISTRATION_TOKEN_UID_ANNOTATION: token_uid}},
        "data": data,
    })
}

/// The JSON patch that adds (`add`) or removes our finalizer from an object holding
/// `finalizers` at `resource_version`, guarded by a `test` of that resourceVersion (`None`:
/// nothing to change).
pub fn finalizer_patch(
    finalizers: &[String],
    resource_version: &str,
    add: bool,
) -> Option<Vec<Value>> {
    let at = finalizers.iter().position(|f| f == names::FINALIZER);
    let change = match (add, at) {
        (true, Some(_)) | (false, None) => return None,
        (true, None) if finalizers.is_empty() => {
            json!({"op": "add", "path": "/metadata/finalizers", "value": [names::FINALIZER]})
        }
        (true, None) => {
            json!({"op": "add", "path": "/metadata/finalizers/-", "value": names::FINALIZER})
        }
        (false, Some(index)) => {
            json!({"op": "remove", "path": format!("/metadata/finalizers/{index}")})
        }
    };
    let test =
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": resource_version});
    Some(vec![test, change])
}

/// What to do after a plan's writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Next {
    /// Nothing until a watched change.
    #[default]
    AwaitChange,
    /// Look again after this long (a deadline, a renewal, the periodic resync).
    After(Duration),
    /// Look again when the watch event of our write comes (at most the expectations' TTL): the
    /// plan ended at a write whose answer the next observation reads (its event is not left
    /// out as our own echo), or left a write for when the caches show an earlier one.
    Echo,
}

/// The writes for one observation, in order, and what to do next.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub writes: Vec<Write>,
    pub then: Next,
}

impl Plan {
    /// `writes`, then `then`.
    pub fn of(writes: Vec<Write>, then: Next) -> Self {
        Self { writes, then }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::CapiCluster;

    fn id() -> ObjectId {
        ObjectId::of::<CapiCluster>(Some("ns"), "c1", Some("5"))
    }

    #[test]
    fn an_object_is_named_by_its_api_resource() {
        let id = id();
        assert_eq!(id.resource.api_version, "cluster.x-k8s.io/v1beta2");
        assert_eq!(id.resource.plural, "clusters");
        assert_eq!(id.seen.as_deref(), Some("5"));
    }

    #[test]
    fn apply_only_what_changes_the_cached_object() {
        let live = json!({"metadata": {"name": "c1", "labels": {"a": "1"}},
            "spec": {"templateValues": {"x": 1}}});
        let mut digested = live.clone();
        digest_subtree(&mut digested, "/spec/templateValues");
        let same = live.clone();
        let changed = json!({"metadata": {"name": "c1", "labels": {"a": "2"}}});
        let apply = |desired: &Value, live: Option<&Value>, digest: Option<&str>| {
            Write::apply_if_changed(id(), desired, live, "m", digest)
                .expect("serializable")
                .is_some()
        };
        assert!(!apply(&same, Some(&live), None), "no change");
        assert!(apply(&changed, Some(&live), None), "a label changes");
        assert!(apply(&same, None, None), "nothing cached: created");
        assert!(
            !apply(&same, Some(&digested), Some("/spec/templateValues")),
            "the cache's digest stands for the same values"
        );
        assert!(
            apply(&same, Some(&digested), None),
            "undigested, the values differ from the digest"
        );
    }

    #[test]
    fn finalizer_patches_are_guarded_by_the_resource_version() {
        let ours = names::FINALIZER.to_string();
        let other = "other.io/f".to_string();
        let test = json!({"op": "test", "path": "/metadata/resourceVersion", "value": "7"});
        let rows: [(&[String], bool, Option<Value>); 5] = [
            (
                &[],
                true,
                Some(json!({"op": "add", "path": "/metadata/finalizers", "value": [ours]})),
            ),
            (
                std::slice::from_ref(&other),
                true,
                Some(json!({"op": "add", "path": "/metadata/finalizers/-", "value": ours})),
            ),
            (std::slice::from_ref(&ours), true, None),
            (
                &[other.clone(), ours.clone()],
                false,
                Some(json!({"op": "remove", "path": "/metadata/finalizers/1"})),
            ),
            (std::slice::from_ref(&other), false, None),
        ];
        for (finalizers, add, change) in rows {
            let want = change.map(|change| vec![test.clone(), change]);
            assert_eq!(
                finalizer_patch(finalizers, "7", add),
                want,
                "{finalizers:?} add={add}"
            );
        }
    }

    /// A moved Cluster's Fleet Cluster loses the source's owner reference (matched by UID) and
    /// keeps the others; nothing is written when the source does not own it.
    #[test]
    fn moved_fleet_cluster_is_disowned() {
        let owner = |uid: &str| json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "c1", "uid": uid});
        let with = |owners: Vec<Value>| json!({"metadata": {"ownerReferences": owners}});
        let cases = [
            ("no owners", json!({"metadata": {}}), "u1", None),
            (
                "owned by the source",
                with(vec![owner("u1")]),
                "u1",
                Some(vec![]),
            ),
            (
                "other owners stay",
                with(vec![owner("u0"), owner("u1")]),
                "u1",
                Some(vec![owner("u0")]),
            ),
            ("owned by someone else", with(vec![owner("u0")]), "u1", None),
            ("unknown source UID", with(vec![owner("")]), "", None),
        ];
        for (name, current, uid, kept) in cases {
            let change = Change::Disown { uid: uid.into() };
            let want = kept.map(|kept| json!({"metadata": {"ownerReferences": kept}}));
            assert_eq!(change.patch(&current).expect("patch"), want, "{name}");
        }
    }

    /// A ConfigMap key is rewritten only when its text changes; a ConfigMap that is absent, or
    /// whose `fleet-controller` config is missing, is an error naming it.
    #[test]
    fn config_map_keys_are_rewritten_when_they_change() {
        let server = ServerValues {
            url: Some("https://10.0.0.1:6443".into()),
            ..ServerValues::default()
        };
        let change = Change::ConfigMapKey {
            key: "config",
            text: KeyText::FleetController(server),
            missing: "Fleet is not installed",
        };
        let config_map = |data: Value| {
            json!({"metadata": {"name": "fleet-controller", "namespace": "cattle-fleet-system"},
                "data": data})
        };
        let patch = change
            .patch(&config_map(json!({"config": "{}"})))
            .expect("patch")
            .expect("a change");
        let text = patch["data"]["config"].as_str().expect("text");
        assert!(text.contains("https://10.0.0.1:6443"), "{text}");
        let again = config_map(json!({"config": text}));
        assert_eq!(change.patch(&again).expect("patch"), None);
        let err = change
            .patch(&config_map(json!({})))
            .expect_err("missing key");
        assert!(
            err.to_string()
                .contains("ConfigMap cattle-fleet-system/fleet-controller: data.config is missing"),
            "{err}"
        );
        let id = ObjectId::of::<k8s_openapi::api::core::v1::ConfigMap>(
            Some("cattle-fleet-system"),
            "fleet-controller",
            None,
        );
        let err = change.absent(&id).expect_err("absent");
        assert!(
            err.to_string()
                .contains("cattle-fleet-system/fleet-controller not found: Fleet is not installed"),
            "{err}"
        );
        let disown = Change::Disown { uid: "u".into() };
        assert!(
            disown.absent(&id).is_ok(),
            "nothing to disown in what is gone"
        );
    }
}
