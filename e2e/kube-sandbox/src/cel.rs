//! `x-kubernetes-validations` rules of CRD schemas, evaluated with the `cel` crate as a real
//! API server evaluates them (k8s.io/apiextensions-apiserver `pkg/apiserver/schema/cel`):
//! `self` is the value at the rule's node, `oldSelf` the previous value on an update. A rule
//! that mentions `oldSelf` is a transition rule and is skipped when there is no previous
//! value (creates, new list items). A value an update leaves unchanged is not re-checked
//! (ratcheting, as real servers do since 1.30). The failure message is the rule's `message`,
//! else `failed rule: RULE`; the field is the node's path plus the rule's `fieldPath`.
//!
//! The rules met in this repository (the FleetAddonConfig singleton name and its exactly-one
//! choices) use only the standard CEL macros and operators; Kubernetes' extension libraries
//! (`isURL`, `quantity`, `format`, ...) are not provided: a rule calling one is reported as
//! failing to evaluate, with the CEL error in the message.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::Value;

use crate::error::Cause;

fn compiled(rule: &str) -> Result<Arc<cel::Program>, String> {
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<cel::Program>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(p) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(rule) {
        return Ok(p.clone());
    }
    let p = Arc::new(cel::Program::compile(rule).map_err(|e| e.to_string())?);
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(rule.to_string(), p.clone());
    Ok(p)
}

/// Evaluates one rule; `Ok(true)` when it holds.
pub fn evaluate(rule: &str, value: &Value, old: Option<&Value>) -> Result<bool, String> {
    let program = compiled(rule)?;
    let mut ctx = cel::Context::default();
    ctx.add_variable("self", value.clone())
        .map_err(|e| e.to_string())?;
    if let Some(o) = old {
        ctx.add_variable("oldSelf", o.clone())
            .map_err(|e| e.to_string())?;
    }
    match program.execute(&ctx).map_err(|e| e.to_string())? {
        cel::Value::Bool(b) => Ok(b),
        other => Err(format!("rule did not evaluate to a bool: {other:?}")),
    }
}

/// Checks every rule of `schema` against `new` (and `old` on updates); the causes of a 422.
pub fn validate(new: &Value, old: Option<&Value>, schema: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    walk(new, old, schema, "", &mut causes);
    causes
}

fn join(path: &str, k: &str) -> String {
    if path.is_empty() {
        k.to_string()
    } else {
        format!("{path}.{k}")
    }
}

fn walk(v: &Value, old: Option<&Value>, s: &Value, path: &str, causes: &mut Vec<Cause>) {
    if v.is_null() {
        return;
    }
    // Ratcheting: an unchanged value keeps whatever it was accepted with.
    if old == Some(v) {
        return;
    }
    for rule in s
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(text) = rule.get("rule").and_then(Value::as_str) else {
            continue;
        };
        let transition = text.contains("oldSelf");
        if transition && old.is_none() {
            continue;
        }
        let field = match rule.get("fieldPath").and_then(Value::as_str) {
            Some(fp) => format!("{path}{fp}").trim_start_matches('.').to_string(),
            // A rule on the root has no path: the real server prints a nil `field.Path`.
            None if path.is_empty() => "<nil>".to_string(),
            None => path.to_string(),
        };
        let (reason, message) = match evaluate(text, v, old) {
            Ok(true) => continue,
            Ok(false) => (
                rule.get("reason")
                    .and_then(Value::as_str)
                    .unwrap_or("FieldValueInvalid")
                    .to_string(),
                rule.get("message")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("failed rule: {text}")),
            ),
            Err(e) => (
                "FieldValueInvalid".to_string(),
                format!("rule evaluation error: {e}"),
            ),
        };
        let shown = match v {
            Value::Object(_) => "\"object\"".to_string(),
            Value::Array(_) => "\"array\"".to_string(),
            other => other.to_string(),
        };
        let message = match reason.as_str() {
            "FieldValueForbidden" => format!("Forbidden: {message}"),
            "FieldValueRequired" => format!("Required value: {message}"),
            "FieldValueDuplicate" => format!("Duplicate value: {shown}: {message}"),
            _ => format!("Invalid value: {shown}: {message}"),
        };
        causes.push(Cause {
            reason,
            message,
            field,
        });
    }
    match v {
        Value::Object(o) => {
            let props = s.get("properties").and_then(Value::as_object);
            let additional = s.get("additionalProperties").filter(|a| a.is_object());
            for (k, child) in o {
                if path.is_empty() && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                if let Some(cs) = props.and_then(|p| p.get(k)).or(additional) {
                    let old_child = old.and_then(|o| o.get(k));
                    walk(child, old_child, cs, &join(path, k), causes);
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = s.get("items") {
                // Items are matched to their previous versions by position only for
                // transition rules' purposes (a real server matches list-map items by key).
                let old_items = old.and_then(Value::as_array);
                for (i, it) in items.iter().enumerate() {
                    let old_item = old_items.and_then(|a| a.get(i));
                    walk(it, old_item, is, &format!("{path}[{i}]"), causes);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rules() {
        let schema = json!({"type": "object",
        "x-kubernetes-validations": [{"rule": "self.metadata.name == 'fleet-addon-config'", "message": "name must be fleet-addon-config"}],
        "properties": {"spec": {"type": "object", "properties": {
            "install": {"type": "object",
                "x-kubernetes-validations": [{"rule": "has(self.followLatest) != has(self.version)", "message": "exactly one of followLatest or version"}],
                "properties": {"followLatest": {"type": "boolean"}, "version": {"type": "string"}}},
            "immutable": {"type": "string",
                "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "is immutable", "reason": "FieldValueForbidden"}]}
        }}}});
        let obj = |name: &str, spec: Value| json!({"metadata": {"name": name}, "spec": spec});
        /// (what, new object, old object, expected (field, message) causes)
        type Case<'a> = (&'a str, Value, Option<Value>, Vec<(&'a str, &'a str)>);
        let cases: Vec<Case> = vec![
            (
                "valid",
                obj("fleet-addon-config", json!({"install": {"version": "1"}})),
                None,
                vec![],
            ),
            (
                "other name",
                obj("other-config", json!({})),
                None,
                vec![(
                    "<nil>",
                    "Invalid value: \"object\": name must be fleet-addon-config",
                )],
            ),
            (
                "both choices",
                obj(
                    "fleet-addon-config",
                    json!({"install": {"version": "1", "followLatest": true}}),
                ),
                None,
                vec![(
                    "spec.install",
                    "Invalid value: \"object\": exactly one of followLatest or version",
                )],
            ),
            (
                "neither choice",
                obj("fleet-addon-config", json!({"install": {}})),
                None,
                vec![(
                    "spec.install",
                    "Invalid value: \"object\": exactly one of followLatest or version",
                )],
            ),
            (
                "transition rule skipped on create",
                obj("fleet-addon-config", json!({"immutable": "a"})),
                None,
                vec![],
            ),
            (
                "transition rule on update",
                obj("fleet-addon-config", json!({"immutable": "b"})),
                Some(obj("fleet-addon-config", json!({"immutable": "a"}))),
                vec![("spec.immutable", "Forbidden: is immutable")],
            ),
            (
                "unchanged values ratchet",
                obj(
                    "fleet-addon-config",
                    json!({"install": {}, "immutable": "a"}),
                ),
                Some(obj(
                    "fleet-addon-config",
                    json!({"install": {}, "immutable": "a"}),
                )),
                vec![],
            ),
        ];
        for (what, new, old, want) in cases {
            let got: Vec<(String, String)> = validate(&new, old.as_ref(), &schema)
                .into_iter()
                .map(|c| (c.field, c.message))
                .collect();
            let want: Vec<(String, String)> = want
                .into_iter()
                .map(|(f, m)| (f.to_string(), m.to_string()))
                .collect();
            assert_eq!(got, want, "{what}");
        }
    }

    #[test]
    fn errors_are_reported() {
        assert!(evaluate("self.", &json!({}), None).is_err());
        assert!(evaluate("self.x", &json!({"x": 1}), None).is_err());
    }
}
