//! Building JSON objects in place.

use serde_json::{Map, Value};

/// The object at `path`, creating (or replacing non-objects by) empty objects on the way.
pub fn object_at<'a>(value: &'a mut Value, path: &[&str]) -> &'a mut Map<String, Value> {
    if !value.is_object() {
        *value = Value::Object(Map::new());
    }
    let Value::Object(map) = value else {
        unreachable!("made an object above")
    };
    match path.split_first() {
        None => map,
        Some((key, rest)) => object_at(map.entry((*key).to_string()).or_insert(Value::Null), rest),
    }
}

/// The list at `key` of `spec`, created (or replacing a non-list) when it is not one.
pub fn list_at<'a>(spec: &'a mut Map<String, Value>, key: &str) -> &'a mut Vec<Value> {
    let slot = spec
        .entry(key.to_string())
        .or_insert_with(|| Value::Array(Vec::new()));
    if !slot.is_array() {
        *slot = Value::Array(Vec::new());
    }
    match slot {
        Value::Array(list) => list,
        _ => unreachable!("made an array above"),
    }
}
