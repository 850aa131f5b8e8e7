//! JSON patch, JSON merge patch and (approximated) strategic merge patch.

use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::schema::{ListType, hint_list_type, item_key};

/// The patch flavours, by request Content-Type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// `application/json-patch+json`.
    Json,
    /// `application/merge-patch+json`.
    Merge,
    /// `application/strategic-merge-patch+json`.
    Strategic,
    /// `application/apply-patch+yaml` (server-side apply, handled in `ssa`).
    Apply,
}

impl PatchType {
    /// From a Content-Type header value (parameters ignored).
    pub fn from_content_type(ct: &str) -> Option<Self> {
        match ct.split(';').next().unwrap_or("").trim() {
            "application/json-patch+json" => Some(PatchType::Json),
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/strategic-merge-patch+json" => Some(PatchType::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => {
                Some(PatchType::Apply)
            }
            _ => None,
        }
    }
}

/// Applies a JSON, merge or strategic merge patch to `target`.
pub fn apply_patch(target: Value, kind: PatchType, body: &[u8]) -> Result<Value, ApiError> {
    match kind {
        PatchType::Json => {
            let p: json_patch::Patch = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("json patch: {e}")))?;
            let invalid = |e: String| {
                ApiError::new(
                    422,
                    "Invalid",
                    format!("the server rejected our request due to an error in our request: {e}"),
                )
            };
            let mut out = target;
            for op in p.0.iter() {
                match op {
                    // As the real server's JSON patch library does, testing for `null` passes
                    // when the field is missing (kube's finalizer helper relies on it).
                    json_patch::PatchOperation::Test(t) => {
                        let ptr = t.path.as_str();
                        match out.pointer(ptr) {
                            Some(v) if *v == t.value => {}
                            None if t.value.is_null() => {}
                            _ => return Err(invalid(format!("testing value {ptr} failed"))),
                        }
                    }
                    other => json_patch::patch(&mut out, std::slice::from_ref(other))
                        .map_err(|e| invalid(e.to_string()))?,
                }
            }
            Ok(out)
        }
        PatchType::Merge => {
            let p: Value = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("merge patch: {e}")))?;
            if !p.is_object() {
                return Err(ApiError::bad_request("merge patch must be a JSON object"));
            }
            let mut out = target;
            json_patch::merge(&mut out, &p);
            Ok(out)
        }
        PatchType::Strategic => {
            let p: Value = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("strategic merge patch: {e}")))?;
            if !p.is_object() {
                return Err(ApiError::bad_request(
                    "strategic merge patch must be a JSON object",
                ));
            }
            Ok(strategic_merge(&target, &p))
        }
        PatchType::Apply => Err(ApiError::internal(
            "apply patches are handled by server-side apply",
        )),
    }
}

/// Strategic merge patch, approximated: a JSON merge patch, except that well-known lists
/// merge by key (containers, env, volumes, ports by name/port; ownerReferences by uid;
/// conditions by type), `finalizers` merge as a set, and the `$patch`, `$retainKeys`,
/// `$setElementOrder` and `$deleteFromPrimitiveList` directives are honoured or tolerated.
pub fn strategic_merge(target: &Value, patch: &Value) -> Value {
    smp_value(Some(target), patch, "")
}

fn smp_value(target: Option<&Value>, patch: &Value, field: &str) -> Value {
    match patch {
        Value::Object(p) => {
            if p.get("$patch").and_then(Value::as_str) == Some("replace") {
                return strip_directives(patch);
            }
            let mut out = match target {
                Some(Value::Object(t)) => t.clone(),
                _ => Map::new(),
            };
            smp_object(&mut out, p);
            Value::Object(out)
        }
        Value::Array(items) => {
            let list_type = hint_list_type(field).unwrap_or(ListType::Atomic);
            let tgt = match target {
                Some(Value::Array(t)) => t.clone(),
                _ => Vec::new(),
            };
            match list_type {
                ListType::Atomic => Value::Array(
                    items
                        .iter()
                        .filter(|i| i.get("$patch").is_none())
                        .map(strip_directives)
                        .collect(),
                ),
                ListType::Set => {
                    let mut out = tgt;
                    for it in items {
                        if !out.contains(it) {
                            out.push(it.clone());
                        }
                    }
                    Value::Array(out)
                }
                ListType::Map(keys) => {
                    let mut out = tgt;
                    for it in items {
                        let key = item_key(it, &keys);
                        let pos = key.as_ref().and_then(|k| {
                            out.iter()
                                .position(|o| item_key(o, &keys).as_ref() == Some(k))
                        });
                        let delete = it.get("$patch").and_then(Value::as_str) == Some("delete");
                        match (pos, delete) {
                            (Some(i), true) => {
                                out.remove(i);
                            }
                            (None, true) => {}
                            (Some(i), false) => out[i] = smp_value(Some(&out[i]), it, ""),
                            (None, false) => out.push(strip_directives(it)),
                        }
                    }
                    Value::Array(out)
                }
            }
        }
        other => other.clone(),
    }
}

fn smp_object(out: &mut Map<String, Value>, p: &Map<String, Value>) {
    if let Some(Value::Array(keep)) = p.get("$retainKeys") {
        let keep: Vec<&str> = keep.iter().filter_map(Value::as_str).collect();
        out.retain(|k, _| keep.contains(&k.as_str()));
    }
    for (k, v) in p {
        if k.starts_with('$') {
            continue;
        }
        if let Some(list) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(t)), Value::Array(del)) = (out.get_mut(list), v) {
                t.retain(|x| !del.contains(x));
            }
            continue;
        }
        if v.is_null() {
            out.remove(k);
            continue;
        }
        if v.get("$patch").and_then(Value::as_str) == Some("delete") {
            out.remove(k);
            continue;
        }
        let merged = smp_value(out.get(k), v, k);
        out.insert(k.clone(), merged);
    }
    for (k, v) in p {
        if let Some(list) = k.strip_prefix("$deleteFromPrimitiveList/")
            && let (Some(Value::Array(t)), Value::Array(del)) = (out.get_mut(list), v)
        {
            t.retain(|x| !del.contains(x));
        }
    }
}

fn strip_directives(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip_directives(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_directives).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strategic_merges_by_key_and_honours_directives() {
        let t = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "a", "image": "1", "env": [{"name": "X", "value": "1"}]},
            {"name": "b", "image": "2"}
        ]}}}, "metadata": {"finalizers": ["f1"], "labels": {"keep": "1", "drop": "1"}}});
        let p = json!({
            "$setElementOrder/containers": [{"name": "a"}],
            "spec": {"template": {"spec": {"containers": [
                {"name": "a", "env": [{"name": "Y", "value": "2"}]},
                {"name": "b", "$patch": "delete"}
            ]}}},
            "metadata": {"finalizers": ["f2"], "labels": {"drop": null}}
        });
        let out = strategic_merge(&t, &p);
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"],
            json!([
                {"name": "a", "image": "1", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]}
            ])
        );
        assert_eq!(
            out["metadata"],
            json!({"finalizers": ["f1", "f2"], "labels": {"keep": "1"}})
        );
        let r = strategic_merge(
            &json!({"spec": {"a": 1, "b": 2}}),
            &json!({"spec": {"$retainKeys": ["a"], "a": 3}}),
        );
        assert_eq!(r, json!({"spec": {"a": 3}}));
    }

    #[test]
    fn content_types() {
        assert_eq!(
            PatchType::from_content_type("application/merge-patch+json; charset=utf-8"),
            Some(PatchType::Merge)
        );
        assert_eq!(PatchType::from_content_type("text/plain"), None);
    }
}
