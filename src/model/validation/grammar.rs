//! Kubernetes' grammar of names, label keys and label selectors, where the CRD schema cannot
//! say it: label keys, and the agent settings of annotations, which no schema checks.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::FieldError;

/// Checks what the CRD schema cannot say of a label selector (the operators and values are
/// the schema's: `label_selector_grammar` in `crate::api`): the label keys, as the API server
/// checks them for `metav1.LabelSelector` (a structural schema cannot constrain a map's keys),
/// and which operators need values (a CEL rule per list item would be multiplied by the list's
/// unbounded length in the API server's cost estimate of the CRD).
pub fn validate_label_selector(selector: &LabelSelector, path: &str, errors: &mut Vec<FieldError>) {
    for key in selector.match_labels.iter().flatten().map(|(key, _)| key) {
        if let Some(msg) = label_key_problem(key) {
            errors.push(FieldError::new(format!("{path}.matchLabels[{key:?}]"), msg));
        }
    }
    for (i, req) in selector.match_expressions.iter().flatten().enumerate() {
        let p = format!("{path}.matchExpressions[{i}]");
        if let Some(msg) = label_key_problem(&req.key) {
            errors.push(FieldError::new(format!("{p}.key"), msg));
        }
        let empty = req.values.as_deref().unwrap_or_default().is_empty();
        let problem = match req.operator.as_str() {
            "In" | "NotIn" if empty => "must be non-empty",
            "Exists" | "DoesNotExist" if !empty => "must be empty",
            _ => continue,
        };
        errors.push(FieldError::new(
            format!("{p}.values"),
            format!("{problem} when operator is {}", req.operator),
        ));
    }
}

pub(super) fn label_key_problem(key: &str) -> Option<String> {
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
pub(super) fn is_dns1123_label(s: &str) -> bool {
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
fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns1123_label)
}
