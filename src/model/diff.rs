//! Would a server-side apply change anything? We compare the object we would apply with the
//! cached live object instead of writing, so that at steady state the controllers make no
//! writes at all (CAAPF patched on every reconcile: research §13 items 12-13).
//!
//! An apply by field manager M changes the object when
//! 1. a value M applies differs from the live value, or
//! 2. a field M owns (its `managedFields` entry) is no longer applied: the server removes it.
//!
//! Lists are compared whole (atomic, the default for CRD lists) except `ownerReferences`
//! (keyed by `uid`) and `finalizers` (a set), which the API server merges per element.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
use serde_json::{Map, Value};

/// Whether applying `desired` over `live` as the manager owning `owned` (its `fieldsV1`, or
/// `None` when it owns nothing yet) would change `live`.
pub fn apply_would_change(desired: &Value, live: &Value, owned: Option<&Value>) -> bool {
    !is_subset(desired, live, "") || owned.is_some_and(|fields| drops_owned(fields, desired))
}

/// The `fieldsV1` of `manager`'s `Apply` entry on the main resource of `object`, if any. It may
/// be held as compact JSON text (see [`compact_fields`]); it is parsed back here.
pub fn owned_fields<'a>(object: &'a Value, manager: &str) -> Option<Cow<'a, Value>> {
    let fields = object
        .pointer("/metadata/managedFields")?
        .as_array()?
        .iter()
        .find(|entry| {
            entry.get("manager").and_then(Value::as_str) == Some(manager)
                && entry.get("operation").and_then(Value::as_str) == Some("Apply")
                && entry
                    .get("subresource")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
        })?
        .get("fieldsV1")?;
    match fields {
        Value::String(text) => serde_json::from_str(text).ok().map(Cow::Owned),
        tree => Some(Cow::Borrowed(tree)),
    }
}

/// Replaces a managedFields entry's `fieldsV1` tree by its compact JSON text. A cached object
/// keeps our entries for the no-op check, but as a tree of maps (one allocation of several
/// hundred bytes per nested field) they cost far more than their text: for a Fleet Cluster with
/// `templateValues`, about as much as the rest of the object. [`owned_fields`] reads either form.
pub fn compact_fields(entry: &mut ManagedFieldsEntry) {
    if let Some(FieldsV1(fields)) = entry.fields_v1.as_mut()
        && !fields.is_string()
    {
        *fields = Value::String(fields.to_string());
    }
}

/// The key of a digest that stands for a subtree (see [`digest_subtree`]).
pub const DIGEST_KEY: &str = "caapf.internal/sha256";

/// Replaces the value at `pointer` (if any) by `{DIGEST_KEY: <sha256 of its canonical JSON>}`;
/// a value that already is a digest stays as it is.
///
/// Caches keep large subtrees that are only ever compared whole (a Fleet Cluster's
/// `templateValues`, a copy of its CAPI Cluster) as such a digest; the no-op check digests the
/// desired object the same way before comparing. The canonical form sorts keys and writes an
/// integral number as an integer (as [`numbers_equal`] compares them), so `1.0` and `1` agree.
pub fn digest_subtree(object: &mut Value, pointer: &str) {
    let Some(value) = object.pointer_mut(pointer) else {
        return;
    };
    if value.is_null() || is_digest(value) {
        return;
    }
    let mut canonical = String::new();
    write_canonical(value, &mut canonical);
    let hex = sha256_hex(canonical.as_bytes());
    let mut marker = Map::new();
    marker.insert(DIGEST_KEY.to_string(), Value::String(hex));
    *value = Value::Object(marker);
}

/// The SHA-256 of `bytes`, as lower-case hex digits.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

fn is_digest(value: &Value) -> bool {
    value
        .as_object()
        .is_some_and(|map| map.len() == 1 && map.contains_key(DIGEST_KEY))
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            // serde_json's Map is ordered by key here (no `preserve_order`); sort anyway so the
            // form does not depend on a feature another crate might turn on.
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, child)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(child, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Number(number) => match number.as_f64() {
            Some(x) if x.fract() == 0.0 && x.abs() < 9_007_199_254_740_992.0 => {
                out.push_str(&format!("{}", x as i64));
            }
            _ => out.push_str(&number.to_string()),
        },
        other => out.push_str(&other.to_string()),
    }
}

fn is_subset(desired: &Value, live: &Value, path: &str) -> bool {
    match (desired, live) {
        (Value::Object(want), Value::Object(have)) => want.iter().all(|(key, value)| {
            let child = format!("{path}/{key}");
            match have.get(key) {
                Some(live_value) => is_subset(value, live_value, &child),
                None => is_empty(value),
            }
        }),
        (Value::Array(want), Value::Array(have)) if path == "/metadata/ownerReferences" => {
            want.iter().all(|reference| {
                have.iter().any(|live_ref| {
                    live_ref.get("uid") == reference.get("uid")
                        && is_subset(reference, live_ref, path)
                })
            })
        }
        (Value::Array(want), Value::Array(have)) if path == "/metadata/finalizers" => {
            want.iter().all(|f| have.contains(f))
        }
        (Value::Array(want), Value::Array(have)) => {
            // Atomic lists: the same elements in the same order, each a subset (the server may
            // add defaulted fields inside elements).
            want.len() == have.len()
                && want
                    .iter()
                    .zip(have)
                    .all(|(w, h)| is_subset(w, h, &format!("{path}[]")))
        }
        (want, have) => numbers_equal(want, have) || want == have,
    }
}

/// An empty map applied over an absent field changes nothing visible.
fn is_empty(value: &Value) -> bool {
    match value {
        Value::Object(map) => map.values().all(is_empty),
        Value::Null => true,
        _ => false,
    }
}

fn numbers_equal(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => a.is_number() && b.is_number() && x == y,
        _ => false,
    }
}

/// Whether `owned` (fieldsV1) names a field that `desired` no longer sets.
fn drops_owned(owned: &Value, desired: &Value) -> bool {
    // A digest stands for a whole subtree that [`is_subset`] compares exactly: equal digests
    // mean nothing under it is dropped.
    if is_digest(desired) {
        return false;
    }
    let Some(owned) = owned.as_object() else {
        return false;
    };
    owned.iter().any(|(key, children)| {
        if key == "." {
            return false;
        }
        if let Some(field) = key.strip_prefix("f:") {
            return match desired.get(field) {
                None => true,
                Some(value) => drops_owned(children, value),
            };
        }
        if let Some(keys) = key.strip_prefix("k:") {
            // An element of an associative list, identified by its key fields.
            let Ok(Value::Object(keys)) = serde_json::from_str::<Value>(keys) else {
                return false;
            };
            return match desired
                .as_array()
                .and_then(|items| find_keyed(items, &keys))
            {
                None => true,
                Some(item) => drops_owned(children, item),
            };
        }
        if let Some(value) = key.strip_prefix("v:") {
            // An element of a set.
            let Ok(value) = serde_json::from_str::<Value>(value) else {
                return false;
            };
            return !desired
                .as_array()
                .is_some_and(|items| items.contains(&value));
        }
        false
    })
}

fn find_keyed<'a>(items: &'a [Value], keys: &Map<String, Value>) -> Option<&'a Value> {
    items
        .iter()
        .find(|item| keys.iter().all(|(k, v)| item.get(k) == Some(v)))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn live() -> Value {
        json!({
            "apiVersion": "fleet.cattle.io/v1alpha1", "kind": "Cluster",
            "metadata": {
                "name": "c1", "namespace": "ns", "resourceVersion": "5",
                "labels": {"env": "dev", "fleet.cattle.io/added-by-fleet": "x"},
                "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "c1", "uid": "u1", "blockOwnerDeletion": true}],
                "finalizers": ["fleet.cattle.io/cluster-finalizer"],
                "managedFields": [
                    {"manager": "addon-provider-fleet", "operation": "Apply", "fieldsV1": {
                        "f:metadata": {"f:labels": {"f:env": {}}, "f:ownerReferences": {"k:{\"uid\":\"u1\"}": {".": {}}}},
                        "f:spec": {"f:agentNamespace": {}, "f:agentTolerations": {}, "f:templateValues": {"f:Cluster": {}}}
                    }},
                    {"manager": "addon-provider-fleet", "operation": "Apply", "subresource": "status", "fieldsV1": {"f:status": {}}},
                    {"manager": "fleetcontroller", "operation": "Update", "fieldsV1": {"f:metadata": {"f:finalizers": {"v:\"fleet.cattle.io/cluster-finalizer\"": {}}}}}
                ]
            },
            "spec": {
                "agentNamespace": "fleet-addon-agent",
                "agentTolerations": [{"key": "a", "operator": "Exists", "effect": "NoSchedule"}],
                "templateValues": {"Cluster": {"spec": {"replicas": 1}}},
                "redeployAgentGeneration": 2
            },
            "status": {"agent": {"lastSeen": "now"}}
        })
    }

    fn desired() -> Value {
        json!({
            "apiVersion": "fleet.cattle.io/v1alpha1", "kind": "Cluster",
            "metadata": {
                "name": "c1", "namespace": "ns",
                "labels": {"env": "dev"},
                "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "c1", "uid": "u1"}]
            },
            "spec": {
                "agentNamespace": "fleet-addon-agent",
                "agentTolerations": [{"key": "a", "operator": "Exists", "effect": "NoSchedule"}],
                "templateValues": {"Cluster": {"spec": {"replicas": 1}}}
            }
        })
    }

    /// `live` as the API server sends it, and as the caches keep it (fieldsV1 as text).
    fn both_forms() -> [Value; 2] {
        let live = live();
        let mut object: fleet_api_rs::fleet_cluster::Cluster =
            serde_json::from_value(live.clone()).expect("typed");
        for entry in object.metadata.managed_fields.iter_mut().flatten() {
            compact_fields(entry);
        }
        let compact = serde_json::to_value(&object).expect("json");
        assert!(
            compact
                .pointer("/metadata/managedFields/0/fieldsV1")
                .is_some_and(Value::is_string)
        );
        [live, compact]
    }

    #[test]
    fn steady_state_is_a_no_op() {
        for live in both_forms() {
            let owned = owned_fields(&live, "addon-provider-fleet");
            assert!(owned.is_some());
            assert!(!apply_would_change(&desired(), &live, owned.as_deref()));
        }
    }

    #[test]
    fn changes_that_need_an_apply() {
        fn remove(value: &mut Value, pointer: &str, key: &str) {
            if let Some(map) = value.pointer_mut(pointer).and_then(Value::as_object_mut) {
                map.remove(key);
            }
        }
        type Change = fn(&mut Value);
        let rows: [(&str, Change); 9] = [
            ("new label", |d| d["metadata"]["labels"]["new"] = json!("x")),
            ("changed label", |d| {
                d["metadata"]["labels"]["env"] = json!("prod")
            }),
            ("dropped label we own", |d| {
                remove(d, "/metadata/labels", "env")
            }),
            ("dropped template value we own", |d| {
                remove(d, "/spec/templateValues", "Cluster")
            }),
            ("changed nested template value", |d| {
                d["spec"]["templateValues"]["Cluster"]["spec"]["replicas"] = json!(3)
            }),
            ("extra toleration", |d| {
                if let Some(list) = d["spec"]["agentTolerations"].as_array_mut() {
                    list.push(json!({"key": "b"}));
                }
            }),
            ("new spec field", |d| d["spec"]["hostNetwork"] = json!(true)),
            ("dropped owner reference we own", |d| {
                remove(d, "/metadata", "ownerReferences")
            }),
            ("other owner reference", |d| {
                d["metadata"]["ownerReferences"][0]["uid"] = json!("u2")
            }),
        ];
        for live in both_forms() {
            let owned = owned_fields(&live, "addon-provider-fleet");
            for (name, change) in rows {
                let mut desired = desired();
                change(&mut desired);
                assert!(
                    apply_would_change(&desired, &live, owned.as_deref()),
                    "{name}"
                );
            }
        }
    }

    #[test]
    fn fields_of_others_and_server_defaults_are_ignored() {
        let mut live = live();
        // Fleet's own label and finalizer, a spec field Fleet sets, status: not ours.
        live["spec"]["agentTolerations"][0]["tolerationSeconds"] = json!(null);
        let owned = owned_fields(&live, "addon-provider-fleet").map(Cow::into_owned);
        assert!(!apply_would_change(&desired(), &live, owned.as_ref()));
        // Without a managedFields entry (e.g. created by CAAPF's get-or-create), only values count.
        assert!(!apply_would_change(&desired(), &live, None));
    }

    #[test]
    fn sets_and_numbers() {
        let desired = json!({"metadata": {"finalizers": ["b"]}, "spec": {"n": 1}});
        let live = json!({"metadata": {"finalizers": ["a", "b"]}, "spec": {"n": 1.0}});
        assert!(!apply_would_change(&desired, &live, None));
        let owned = json!({"f:metadata": {"f:finalizers": {"v:\"c\"": {}}}});
        assert!(apply_would_change(&desired, &live, Some(&owned)));
        let empty = json!({"metadata": {"annotations": {}}});
        assert!(!apply_would_change(&empty, &json!({"metadata": {}}), None));
    }

    #[test]
    fn digested_subtrees_compare_whole() {
        // As the caches keep a Fleet Cluster (fieldsV1 as text, templateValues as a digest), and
        // as the no-op check digests the desired object.
        let cached = |live: Value| {
            let mut live = live;
            digest_subtree(&mut live, "/spec/templateValues");
            live
        };
        let digested = |desired: Value| {
            let mut desired = desired;
            digest_subtree(&mut desired, "/spec/templateValues");
            desired
        };
        for live in both_forms() {
            let live = cached(live);
            let owned = owned_fields(&live, "addon-provider-fleet").map(Cow::into_owned);
            assert!(
                !apply_would_change(&digested(desired()), &live, owned.as_ref()),
                "same values: no change"
            );
            let mut changed = desired();
            changed["spec"]["templateValues"]["Cluster"]["spec"]["replicas"] = json!(3);
            assert!(apply_would_change(
                &digested(changed),
                &live,
                owned.as_ref()
            ));
            let mut dropped = desired();
            dropped["spec"]["templateValues"]["Cluster"] = json!({});
            assert!(apply_would_change(
                &digested(dropped),
                &live,
                owned.as_ref()
            ));
            // Other fields are still compared one by one.
            let mut label = desired();
            label["metadata"]["labels"]["env"] = json!("prod");
            assert!(apply_would_change(&digested(label), &live, owned.as_ref()));
        }
    }

    #[test]
    fn digests_are_canonical_and_idempotent() {
        let digest = |value: Value| {
            let mut object = json!({"v": value});
            digest_subtree(&mut object, "/v");
            object["v"].clone()
        };
        assert_eq!(
            digest(json!({"a": 1, "b": [1.0, "x"]})),
            digest(json!({"b": [1, "x"], "a": 1.0}))
        );
        assert_ne!(digest(json!({"a": 1})), digest(json!({"a": 2})));
        assert_ne!(digest(json!({"a": [1, 2]})), digest(json!({"a": [2, 1]})));
        assert_ne!(digest(json!({"a": 1.5})), digest(json!({"a": 1})));
        let once = digest(json!({"a": 1}));
        let mut twice = json!({"v": once.clone()});
        digest_subtree(&mut twice, "/v");
        assert_eq!(twice["v"], once);
        // Absent or null: nothing to digest.
        let mut object = json!({"v": null});
        digest_subtree(&mut object, "/v");
        digest_subtree(&mut object, "/missing");
        assert_eq!(object, json!({"v": null}));
    }
}
