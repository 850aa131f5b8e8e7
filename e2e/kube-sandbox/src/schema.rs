//! Structural schemas: list/map types for server-side apply and strategic merge, pruning of
//! unknown fields, and the structural-schema checks a real server runs on CRDs.

use serde_json::{Map, Value};

use crate::error::Cause;

/// How a list merges.
#[derive(Debug, Clone, PartialEq)]
pub enum ListType {
    /// Replaced as a whole.
    Atomic,
    /// Set of scalars, merged by value.
    Set,
    /// Associative list, merged by these key fields.
    Map(Vec<String>),
}

/// A cursor into a schema. `None` means "no schema known here": built-in kinds and the
/// `metadata` of custom resources, for which well-known field names give the list types.
#[derive(Debug, Clone, Copy)]
pub struct Node<'a>(pub Option<&'a Value>);

impl<'a> Node<'a> {
    /// The schema of field `k` of an object node.
    pub fn prop(&self, k: &str) -> Node<'a> {
        let Some(s) = self.0 else { return Node(None) };
        if let Some(p) = s.get("properties").and_then(|p| p.get(k)) {
            return Node(Some(p));
        }
        if let Some(ap) = s.get("additionalProperties").filter(|a| a.is_object()) {
            return Node(Some(ap));
        }
        Node(None)
    }

    /// The schema of the items of an array node.
    pub fn items(&self) -> Node<'a> {
        Node(self.0.and_then(|s| s.get("items")))
    }

    /// The list type of the list held in field `field`, this node being the list's schema:
    /// the schema's `x-kubernetes-list-type` when there is a schema (atomic without one), the
    /// well-known field names of built-in kinds and metadata otherwise.
    pub fn list_type(&self, field: &str) -> ListType {
        if let Some(s) = self.0 {
            return match s.get("x-kubernetes-list-type").and_then(Value::as_str) {
                Some("set") => ListType::Set,
                Some("map") => ListType::Map(
                    s.get("x-kubernetes-list-map-keys")
                        .and_then(Value::as_array)
                        .map(|a| {
                            a.iter()
                                .filter_map(|k| k.as_str().map(str::to_string))
                                .collect()
                        })
                        .unwrap_or_default(),
                ),
                // A list the schema describes without a marker is atomic, as on a real server.
                _ => ListType::Atomic,
            };
        }
        hint_list_type(field).unwrap_or(ListType::Atomic)
    }

    /// Whether an object node is an atomic map (replaced as a whole by apply).
    pub fn atomic_map(&self) -> bool {
        self.0
            .and_then(|s| s.get("x-kubernetes-map-type"))
            .and_then(Value::as_str)
            == Some("atomic")
    }
}

/// List types of well-known built-in and metadata fields, by field name (the real server takes
/// them from its OpenAPI schema; these cover the fields controllers and charts touch).
pub fn hint_list_type(field: &str) -> Option<ListType> {
    let keys = |k: &[&str]| Some(ListType::Map(k.iter().map(|s| s.to_string()).collect()));
    match field {
        "ownerReferences" => keys(&["uid"]),
        "finalizers" => Some(ListType::Set),
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets" => keys(&["name"]),
        "volumeMounts" => keys(&["mountPath"]),
        "ports" => keys(&["containerPort", "port", "protocol"]),
        "conditions" => keys(&["type"]),
        _ => None,
    }
}

/// The key of an item of an associative list: the key fields the item has, as a JSON object.
pub fn item_key(item: &Value, keys: &[String]) -> Option<Map<String, Value>> {
    let obj = item.as_object()?;
    let mut k = Map::new();
    for key in keys {
        if let Some(v) = obj.get(key) {
            k.insert(key.clone(), v.clone());
        }
    }
    if k.is_empty() { None } else { Some(k) }
}

/// Removes fields that the structural schema does not know, as a real server does for custom
/// resources. `apiVersion`, `kind` and `metadata` are kept at the root and in embedded
/// resources.
pub fn prune(v: &mut Value, schema: &Value) {
    prune_node(v, schema, true);
}

fn prune_node(v: &mut Value, s: &Value, keep_type_meta: bool) {
    let preserve = s
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let embedded = s
        .get("x-kubernetes-embedded-resource")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    match v {
        Value::Object(obj) => {
            let props = s.get("properties").and_then(Value::as_object);
            let additional = s.get("additionalProperties");
            let keep_meta = keep_type_meta || embedded;
            let keys: Vec<String> = obj.keys().cloned().collect();
            for k in keys {
                if keep_meta && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    if let Some(p) = props.and_then(|p| p.get(&k))
                        && k != "metadata"
                        && let Some(child) = obj.get_mut(&k)
                    {
                        prune_node(child, p, false);
                    }
                    continue;
                }
                if let Some(p) = props.and_then(|p| p.get(&k)) {
                    if let Some(child) = obj.get_mut(&k) {
                        prune_node(child, p, false);
                    }
                } else if let Some(ap) = additional {
                    match ap {
                        Value::Bool(false) => {
                            obj.remove(&k);
                        }
                        Value::Object(_) => {
                            if let Some(child) = obj.get_mut(&k) {
                                prune_node(child, ap, false);
                            }
                        }
                        _ => {}
                    }
                } else if !preserve {
                    obj.remove(&k);
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = s.get("items") {
                for it in items {
                    prune_node(it, is, false);
                }
            }
        }
        _ => {}
    }
}

/// Validates a custom resource against its structural schema, as far as types, `required`,
/// `enum`, `nullable`, lengths, bounds, item counts, `pattern` and `format` go (CEL rules are in
/// [`crate::cel`]).
/// `metadata` is not checked here. Returns the causes of a 422.
pub fn validate_value(obj: &Value, schema: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if let (Some(o), Some(props)) = (
        obj.as_object(),
        schema.get("properties").and_then(Value::as_object),
    ) {
        for (k, v) in o {
            if matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            if let Some(s) = props.get(k) {
                check_value(v, s, k, &mut causes);
            }
        }
        check_required(o, schema, "", &mut causes);
    }
    causes
}

fn join(path: &str, k: &str) -> String {
    if path.is_empty() {
        k.to_string()
    } else {
        format!("{path}.{k}")
    }
}

fn short(v: &Value) -> String {
    match v {
        Value::String(s) => format!("\"{s}\""),
        Value::Object(_) => "\"object\"".into(),
        Value::Array(_) => "\"array\"".into(),
        other => other.to_string(),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn check_required(o: &Map<String, Value>, s: &Value, path: &str, causes: &mut Vec<Cause>) {
    for r in s
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(r) = r.as_str()
            && !o.contains_key(r)
        {
            causes.push(Cause {
                reason: "FieldValueRequired".into(),
                message: "Required value".into(),
                field: join(path, r),
            });
        }
    }
}

fn check_value(v: &Value, s: &Value, path: &str, causes: &mut Vec<Cause>) {
    let flag = |k: &str| s.get(k).and_then(Value::as_bool).unwrap_or(false);
    let invalid = |causes: &mut Vec<Cause>, msg: String| {
        causes.push(Cause {
            reason: "FieldValueInvalid".into(),
            message: format!("Invalid value: {}: {msg}", short(v)),
            field: path.to_string(),
        });
    };
    if v.is_null() {
        if !flag("nullable") && s.get("type").is_some() {
            invalid(
                causes,
                format!(
                    "{path} in body must be of type {}: \"null\"",
                    s["type"].as_str().unwrap_or("")
                ),
            );
        }
        return;
    }
    if flag("x-kubernetes-int-or-string") {
        if !matches!(type_name(v), "integer" | "string") {
            invalid(
                causes,
                format!(
                    "{path} in body must be of type integer,string: \"{}\"",
                    type_name(v)
                ),
            );
        }
        return;
    }
    if let Some(ty) = s.get("type").and_then(Value::as_str) {
        let got = type_name(v);
        let ok = got == ty || (ty == "number" && got == "integer");
        if !ok {
            invalid(
                causes,
                format!("{path} in body must be of type {ty}: \"{got}\""),
            );
            return;
        }
    }
    if let Some(e) = s.get("enum").and_then(Value::as_array)
        && !e.contains(v)
    {
        let allowed = e.iter().map(short).collect::<Vec<_>>().join(", ");
        causes.push(Cause {
            reason: "FieldValueNotSupported".into(),
            message: format!(
                "Unsupported value: {}: supported values: {allowed}",
                short(v)
            ),
            field: path.to_string(),
        });
    }
    let num = |k: &str| s.get(k).and_then(Value::as_f64);
    if let Some(x) = v.as_f64() {
        if let Some(min) = num("minimum")
            && x < min
        {
            invalid(
                causes,
                format!("{path} in body should be greater than or equal to {min}"),
            );
        }
        if let Some(max) = num("maximum")
            && x > max
        {
            invalid(
                causes,
                format!("{path} in body should be less than or equal to {max}"),
            );
        }
    }
    if let Some(st) = v.as_str() {
        if let Some(p) = s.get("pattern").and_then(Value::as_str)
            && let Some(re) = pattern_regex(p)
            && !re.is_match(st)
        {
            invalid(causes, format!("{path} in body should match '{p}'"));
        }
        if let Some(f) = s.get("format").and_then(Value::as_str)
            && !format_ok(f, st)
        {
            invalid(
                causes,
                format!("{path} in body must be of type {f}: \"{st}\""),
            );
        }
        let n = st.chars().count() as f64;
        if let Some(min) = num("minLength")
            && n < min
        {
            invalid(
                causes,
                format!("{path} in body should be at least {min} chars long"),
            );
        }
        if let Some(max) = num("maxLength")
            && n > max
        {
            causes.push(Cause {
                reason: "FieldValueTooLong".into(),
                message: format!("Too long: may not be more than {max} bytes"),
                field: path.to_string(),
            });
        }
    }
    match v {
        Value::Object(o) => {
            let props = s.get("properties").and_then(Value::as_object);
            let additional = s.get("additionalProperties").filter(|a| a.is_object());
            for (k, child) in o {
                let cs = props.and_then(|p| p.get(k)).or(additional);
                if let Some(cs) = cs {
                    check_value(child, cs, &join(path, k), causes);
                }
            }
            check_required(o, s, path, causes);
            if let Some(max) = num("maxProperties")
                && o.len() as f64 > max
            {
                causes.push(Cause {
                    reason: "FieldValueTooMany".into(),
                    message: format!("Too many: {}: must have at most {max} items", o.len()),
                    field: path.to_string(),
                });
            }
        }
        Value::Array(items) => {
            if let Some(is) = s.get("items") {
                for (i, it) in items.iter().enumerate() {
                    check_value(it, is, &format!("{path}[{i}]"), causes);
                }
            }
            if let Some(max) = num("maxItems")
                && items.len() as f64 > max
            {
                causes.push(Cause {
                    reason: "FieldValueTooMany".into(),
                    message: format!("Too many: {}: must have at most {max} items", items.len()),
                    field: path.to_string(),
                });
            }
            if let Some(min) = num("minItems")
                && (items.len() as f64) < min
            {
                invalid(
                    causes,
                    format!("{path} in body should have at least {min} items"),
                );
            }
        }
        _ => {}
    }
}

/// The compiled `pattern` of a schema (cached: schemas are checked on every write). `None`
/// when the pattern does not compile (the CRD would have been refused by a real server).
fn pattern_regex(p: &str) -> Option<std::sync::Arc<regex::Regex>> {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, OnceLock};
    static CACHE: OnceLock<Mutex<HashMap<String, Option<Arc<regex::Regex>>>>> = OnceLock::new();
    let mut cache = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    cache
        .entry(p.to_string())
        .or_insert_with(|| regex::Regex::new(p).ok().map(Arc::new))
        .clone()
}

/// Whether a string has a `format` the real server checks (k8s.io/kube-openapi
/// `pkg/validation/strfmt`, the formats CRD validation knows); other formats are not checked,
/// as there.
pub fn format_ok(format: &str, v: &str) -> bool {
    use base64::Engine;
    match format {
        "date-time" | "datetime" => v.parse::<jiff::Timestamp>().is_ok(),
        "date" => v.len() == 10 && v.parse::<jiff::civil::Date>().is_ok(),
        "byte" => base64::engine::general_purpose::STANDARD.decode(v).is_ok(),
        "ipv4" => v.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => v.parse::<std::net::Ipv6Addr>().is_ok(),
        "cidr" => v.split_once('/').is_some_and(|(ip, bits)| {
            ip.parse::<std::net::IpAddr>().is_ok_and(|a| {
                bits.parse::<u8>()
                    .is_ok_and(|b| b <= if a.is_ipv4() { 32 } else { 128 })
            })
        }),
        "uuid" => {
            let b = v.as_bytes();
            b.len() == 36
                && b.iter().enumerate().all(|(i, c)| match i {
                    8 | 13 | 18 | 23 => *c == b'-',
                    _ => c.is_ascii_hexdigit(),
                })
        }
        _ => true,
    }
}

/// Applies schema `default`s to a custom resource, as a real server does on every write
/// (k8s.io/apiextensions-apiserver `pkg/apiserver/schema/defaulting`): a missing property with a
/// `default` gets it, then defaulting continues inside. `metadata` is left alone.
pub fn apply_defaults(v: &mut Value, s: &Value) {
    match v {
        Value::Object(o) => {
            if let Some(props) = s.get("properties").and_then(Value::as_object) {
                for (k, ps) in props {
                    if o.contains_key(k) {
                        continue;
                    }
                    if let Some(d) = ps.get("default") {
                        o.insert(k.clone(), d.clone());
                    }
                }
            }
            let props = s.get("properties").and_then(Value::as_object);
            let additional = s.get("additionalProperties").filter(|a| a.is_object());
            for (k, child) in o.iter_mut() {
                if k == "metadata" {
                    continue;
                }
                if let Some(cs) = props.and_then(|p| p.get(k)).or(additional) {
                    apply_defaults(child, cs);
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = s.get("items") {
                for it in items {
                    apply_defaults(it, is);
                }
            }
        }
        _ => {}
    }
}

/// Checks that a CRD version schema is structural in the ways a real server checks most
/// visibly; returns the causes of a 422.
pub fn validate_structural(schema: &Value, field: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        causes.push(Cause {
            reason: "FieldValueInvalid".into(),
            message: "Unsupported value: must be object at the root".into(),
            field: format!("{field}.type"),
        });
    }
    check_node(schema, field, &mut causes);
    causes
}

fn check_node(s: &Value, field: &str, causes: &mut Vec<Cause>) {
    let Some(obj) = s.as_object() else {
        causes.push(Cause {
            reason: "FieldValueInvalid".into(),
            message: "Invalid value: must be an object".into(),
            field: field.to_string(),
        });
        return;
    };
    let flag = |k: &str| obj.get(k).and_then(Value::as_bool).unwrap_or(false);
    let ty = obj.get("type").and_then(Value::as_str).unwrap_or("");
    let has_props = obj.contains_key("properties");
    let has_items = obj.contains_key("items");
    let has_additional = obj
        .get("additionalProperties")
        .is_some_and(|a| a.is_object());
    if ty.is_empty()
        && !flag("x-kubernetes-int-or-string")
        && !flag("x-kubernetes-preserve-unknown-fields")
    {
        let what = if has_props || has_additional {
            "must not be empty for specified object fields"
        } else if has_items {
            "must not be empty for specified array items"
        } else {
            "must not be empty for specified fields"
        };
        causes.push(Cause {
            reason: "FieldValueRequired".into(),
            message: format!("Required value: {what}"),
            field: format!("{field}.type"),
        });
    }
    if has_props && has_additional {
        causes.push(Cause {
            reason: "FieldValueForbidden".into(),
            message: "Forbidden: additionalProperties and properties are mutual exclusive".into(),
            field: format!("{field}.additionalProperties"),
        });
    }
    if ty == "array" && !has_items {
        causes.push(Cause {
            reason: "FieldValueRequired".into(),
            message: "Required value: must be specified".into(),
            field: format!("{field}.items"),
        });
    }
    if obj.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map")
        && obj
            .get("x-kubernetes-list-map-keys")
            .and_then(Value::as_array)
            .is_none_or(|a| a.is_empty())
    {
        causes.push(Cause {
            reason: "FieldValueRequired".into(),
            message: "Required value: must not be empty if x-kubernetes-list-type is map".into(),
            field: format!("{field}.x-kubernetes-list-map-keys"),
        });
    }
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        for (k, p) in props {
            check_node(p, &format!("{field}.properties[{k}]"), causes);
        }
    }
    if let Some(items) = obj.get("items") {
        check_node(items, &format!("{field}.items"), causes);
    }
    if let Some(ap) = obj.get("additionalProperties").filter(|a| a.is_object()) {
        check_node(ap, &format!("{field}.additionalProperties"), causes);
    }
}

/// Rewrites a generated schema into a structural one: fills in `type` where the generator left
/// it out (objects with properties, arrays with items), turns untyped leaves into
/// `x-kubernetes-preserve-unknown-fields`, and drops `properties` next to
/// `additionalProperties`.
pub fn make_structural(s: &mut Value) {
    let Some(obj) = s.as_object_mut() else { return };
    // Value validations (anyOf/oneOf/allOf/not) must not carry structure of their own; drop them
    // rather than risk a non-structural schema (the sandbox does not validate values).
    for k in ["anyOf", "oneOf", "allOf", "not"] {
        obj.remove(k);
    }
    if obj.get("nullable").is_some() && obj.get("default") == Some(&Value::Null) {
        obj.remove("default");
    }
    let has_type = obj.get("type").and_then(Value::as_str).is_some();
    if !has_type {
        if obj.contains_key("properties")
            || obj
                .get("additionalProperties")
                .is_some_and(Value::is_object)
        {
            obj.insert("type".into(), Value::String("object".into()));
        } else if obj.contains_key("items") {
            obj.insert("type".into(), Value::String("array".into()));
        } else if !obj
            .get("x-kubernetes-int-or-string")
            .and_then(Value::as_bool)
            .unwrap_or(false)
        {
            obj.remove("type");
            obj.insert(
                "x-kubernetes-preserve-unknown-fields".into(),
                Value::Bool(true),
            );
        }
    }
    if obj.contains_key("properties")
        && obj
            .get("additionalProperties")
            .is_some_and(Value::is_object)
    {
        obj.remove("additionalProperties");
    }
    if obj.get("type").and_then(Value::as_str) == Some("array") && !obj.contains_key("items") {
        obj.insert(
            "items".into(),
            serde_json::json!({"x-kubernetes-preserve-unknown-fields": true}),
        );
    }
    if let Some(props) = obj.get_mut("properties").and_then(Value::as_object_mut) {
        for p in props.values_mut() {
            make_structural(p);
        }
    }
    if let Some(items) = obj.get_mut("items") {
        make_structural(items);
    }
    if let Some(ap) = obj
        .get_mut("additionalProperties")
        .filter(|a| a.is_object())
    {
        make_structural(ap);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "properties": {
                    "a": {"type": "string"},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "m": {"type": "object", "additionalProperties": {"type": "object", "properties": {"x": {"type": "string"}}}},
                    "emb": {"type": "object", "x-kubernetes-embedded-resource": true, "properties": {"spec": {"type": "object"}}},
                    "list": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}}}
                }},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
            }
        })
    }

    #[test]
    fn prunes_unknown_fields() {
        let mut o = json!({
            "apiVersion": "x/v1", "kind": "X", "metadata": {"name": "n", "weird": 1},
            "junk": 1,
            "spec": {"a": "1", "b": 2, "free": {"any": {"thing": 1}},
                     "m": {"one": {"x": "1", "y": "2"}},
                     "emb": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "spec": {}, "other": 1},
                     "list": [{"k": "1", "z": 2}]},
            "status": {"anything": true}
        });
        prune(&mut o, &schema());
        assert_eq!(
            o,
            json!({
                "apiVersion": "x/v1", "kind": "X", "metadata": {"name": "n", "weird": 1},
                "spec": {"a": "1", "free": {"any": {"thing": 1}},
                         "m": {"one": {"x": "1"}},
                         "emb": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "spec": {}},
                         "list": [{"k": "1"}]},
                "status": {"anything": true}
            })
        );
    }

    #[test]
    fn value_validation() {
        let s = json!({"type": "object", "required": ["spec"], "properties": {
            "spec": {"type": "object", "required": ["size"], "properties": {
                "size": {"type": "integer", "minimum": 1},
                "mode": {"type": "string", "enum": ["a", "b"]},
                "port": {"x-kubernetes-int-or-string": true},
                "opt": {"type": "string", "nullable": true},
                "list": {"type": "array", "maxItems": 1, "items": {"type": "string"}}
            }}
        }});
        let ok =
            json!({"spec": {"size": 2, "mode": "a", "port": "http", "opt": null, "list": ["x"]}});
        assert!(
            validate_value(&ok, &s).is_empty(),
            "{:?}",
            validate_value(&ok, &s)
        );
        let bad = json!({"spec": {"size": "2", "mode": "c", "port": true, "list": ["x", 1]}});
        let fields: Vec<String> = validate_value(&bad, &s)
            .into_iter()
            .map(|c| c.field)
            .collect();
        assert_eq!(
            fields,
            vec![
                "spec.list[1]",
                "spec.list",
                "spec.mode",
                "spec.port",
                "spec.size"
            ]
        );
        assert_eq!(validate_value(&json!({}), &s)[0].field, "spec");
        assert_eq!(
            validate_value(&json!({"spec": {"size": 0}}), &s)[0].message,
            "Invalid value: 0: spec.size in body should be greater than or equal to 1"
        );
    }

    #[test]
    fn structural_checks() {
        assert!(validate_structural(&schema(), "s").is_empty());
        let bad = json!({"type": "object", "properties": {"spec": {"properties": {"a": {"type": "string"}}}}});
        let c = validate_structural(&bad, "s");
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].field, "s.properties[spec].type");
        let bad2 = json!({"type": "object", "properties": {"l": {"type": "array"}}});
        assert_eq!(
            validate_structural(&bad2, "s")[0].field,
            "s.properties[l].items"
        );
        let bad3 = json!({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "string"}});
        assert_eq!(validate_structural(&bad3, "s").len(), 1);
    }

    #[test]
    fn make_structural_fixes_generated_schemas() {
        let mut s = json!({"type": "object", "properties": {
            "a": {"properties": {"b": {}}},
            "l": {"items": {"type": "string"}},
            "u": {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": true}
        }});
        make_structural(&mut s);
        assert!(validate_structural(&s, "s").is_empty(), "{s}");
    }
}
