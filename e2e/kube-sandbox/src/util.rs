//! Small helpers shared by the modules: timestamps, uids, JSON access.

use serde_json::{Map, Value};

/// The current time as an RFC 3339 timestamp with second precision, as Kubernetes writes
/// `metav1.Time`.
pub fn now_rfc3339() -> String {
    let now = jiff::Timestamp::now();
    format!("{}", now.strftime("%Y-%m-%dT%H:%M:%SZ"))
}

/// Human-readable age of an RFC 3339 timestamp, in the style of `kubectl get` ("5s", "3m", "2d").
pub fn human_age(ts: &str) -> String {
    let Ok(t) = ts.parse::<jiff::Timestamp>() else {
        return "<unknown>".to_string();
    };
    let secs = (jiff::Timestamp::now().as_second() - t.as_second()).max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 3600 * 2 => format!("{}m", s / 60),
        s if s < 3600 * 48 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

/// A random RFC 4122 version-4 UUID.
pub fn new_uid() -> String {
    let b: [u8; 16] = rand::random();
    format!(
        "{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-4{:01x}{:02x}-{:01x}{:01x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
        b[0],
        b[1],
        b[2],
        b[3],
        b[4],
        b[5],
        b[6] & 0x0f,
        b[7],
        8 | (b[8] & 0x03),
        b[8] >> 4,
        b[9],
        b[10],
        b[11],
        b[12],
        b[13],
        b[14],
        b[15]
    )
}

/// Random lowercase alphanumeric suffix for `generateName` (5 characters, like the real server).
pub fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// `obj.metadata`, created when missing. Panics only if `obj` is not a JSON object (callers
/// check that first).
pub fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    let root = obj.as_object_mut().expect("object checked by caller");
    let m = root
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !m.is_object() {
        *m = Value::Object(Map::new());
    }
    m.as_object_mut().expect("just made an object")
}

/// A string field of `obj.metadata`.
pub fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
}

/// `metadata.name`, or "" when missing.
pub fn name_of(obj: &Value) -> &str {
    meta_str(obj, "name").unwrap_or("")
}

/// `metadata.namespace`, or "" when missing.
pub fn namespace_of(obj: &Value) -> &str {
    meta_str(obj, "namespace").unwrap_or("")
}

/// `metadata.labels` as (key, value) pairs.
pub fn labels_of(obj: &Value) -> Map<String, Value> {
    obj.get("metadata")
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// `metadata.finalizers` as strings.
pub fn finalizers_of(obj: &Value) -> Vec<String> {
    obj.get("metadata")
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Follows a dotted path of object keys (`["spec", "replicas"]`).
pub fn get_path<'a>(obj: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(obj, |v, k| v.get(*k))
}

/// Whether a resource name is a valid DNS-1123 subdomain (the rule most kinds use).
pub fn valid_dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || c == b'.')
        && name
            .bytes()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .bytes()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric())
}

/// Whether a name is a valid DNS-1123 label (namespaces).
pub fn valid_dns_label(name: &str) -> bool {
    valid_dns_subdomain(name) && name.len() <= 63 && !name.contains('.')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uid_has_uuid_shape() {
        let u = new_uid();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
    }

    #[test]
    fn dns_names() {
        assert!(valid_dns_subdomain("a.b-c"));
        assert!(!valid_dns_subdomain("A"));
        assert!(!valid_dns_subdomain("-a"));
        assert!(!valid_dns_label("a.b"));
    }
}
