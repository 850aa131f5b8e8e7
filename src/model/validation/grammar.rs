//! Kubernetes' grammar of names, label keys and values, and label selectors.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::FieldError;

/// A key of a Secret's `data` (`[-._a-zA-Z0-9]+`, at most 253 characters).
pub(super) fn is_secret_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 253
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Validates a label selector as the API server does for `metav1.LabelSelector`.
pub fn validate_label_selector(selector: &LabelSelector, path: &str, errors: &mut Vec<FieldError>) {
    for (key, value) in selector.match_labels.iter().flatten() {
        let p = format!("{path}.matchLabels[{key:?}]");
        if let Some(msg) = label_key_problem(key) {
            errors.push(FieldError::new(&p, msg));
        }
        if let Some(msg) = label_value_problem(value) {
            errors.push(FieldError::new(&p, msg));
        }
    }
    for (i, req) in selector.match_expressions.iter().flatten().enumerate() {
        let p = format!("{path}.matchExpressions[{i}]");
        if let Some(msg) = label_key_problem(&req.key) {
            errors.push(FieldError::new(format!("{p}.key"), msg));
        }
        let values = req.values.as_deref().unwrap_or_default();
        match req.operator.as_str() {
            "In" | "NotIn" => {
                if values.is_empty() {
                    errors.push(FieldError::new(
                        format!("{p}.values"),
                        format!("must be non-empty when operator is {}", req.operator),
                    ));
                }
            }
            "Exists" | "DoesNotExist" => {
                if !values.is_empty() {
                    errors.push(FieldError::new(
                        format!("{p}.values"),
                        format!("must be empty when operator is {}", req.operator),
                    ));
                }
            }
            other => errors.push(FieldError::new(
                format!("{p}.operator"),
                format!("{other:?} is not a valid operator: use In, NotIn, Exists or DoesNotExist"),
            )),
        }
        for (j, value) in values.iter().enumerate() {
            if let Some(msg) = label_value_problem(value) {
                errors.push(FieldError::new(format!("{p}.values[{j}]"), msg));
            }
        }
    }
}

fn label_key_problem(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && !is_dns1123_subdomain(prefix)
    {
        return Some(format!(
            "label key {key:?}: prefix must be a DNS-1123 subdomain"
        ));
    }
    if name.is_empty() || name.len() > 63 || !is_qualified_name_part(name) {
        return Some(format!(
            "label key {key:?}: name must be 1-63 characters, alphanumeric, '-', '_' or '.', starting and ending with an alphanumeric character"
        ));
    }
    None
}

fn label_value_problem(value: &str) -> Option<String> {
    if value.is_empty() || (value.len() <= 63 && is_qualified_name_part(value)) {
        None
    } else {
        Some(format!(
            "label value {value:?}: must be at most 63 characters, alphanumeric, '-', '_' or '.', starting and ending with an alphanumeric character"
        ))
    }
}

fn is_qualified_name_part(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// DNS-1123 label: lower-case alphanumerics and '-', at most 63, alphanumeric at both ends.
pub fn is_dns1123_label(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase() || *b == b'-')
}

/// DNS-1123 subdomain: dot-separated labels, at most 253 characters.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns1123_label)
}
