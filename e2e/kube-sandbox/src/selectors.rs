//! Label and field selectors, parsed from their query-string form.

use serde_json::Value;

use crate::error::ApiError;

/// One label requirement.
#[derive(Debug, Clone, PartialEq)]
pub enum LabelReq {
    /// `key=value` / `key==value`.
    Eq(String, String),
    /// `key!=value` (also matches when the key is absent).
    NotEq(String, String),
    /// `key in (a,b)`.
    In(String, Vec<String>),
    /// `key notin (a,b)` (also matches when the key is absent).
    NotIn(String, Vec<String>),
    /// `key`.
    Exists(String),
    /// `!key`.
    NotExists(String),
}

/// A parsed label selector: all requirements must hold.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LabelSelector(pub Vec<LabelReq>);

/// Splits on commas that are not inside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn parse_set(s: &str) -> Result<Vec<String>, ApiError> {
    let s = s.trim();
    let inner = s
        .strip_prefix('(')
        .and_then(|x| x.strip_suffix(')'))
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "unable to parse requirement: found '{s}', expected: '('"
            ))
        })?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

impl LabelSelector {
    /// Parses `labelSelector` query syntax.
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        for part in split_top(s) {
            let p = part.trim();
            if p.is_empty() {
                continue;
            }
            let bad = || {
                ApiError::bad_request(format!(
                    "unable to parse requirement: invalid label selector {p:?}"
                ))
            };
            let req = if let Some(k) = p.strip_prefix('!') {
                LabelReq::NotExists(k.trim().to_string())
            } else if let Some((k, v)) = p.split_once("!=") {
                LabelReq::NotEq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = p.split_once("==") {
                LabelReq::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = p.split_once('=') {
                LabelReq::Eq(k.trim().into(), v.trim().into())
            } else if let Some(idx) = p.find(" notin ") {
                LabelReq::NotIn(p[..idx].trim().into(), parse_set(&p[idx + 7..])?)
            } else if let Some(idx) = p.find(" in ") {
                LabelReq::In(p[..idx].trim().into(), parse_set(&p[idx + 4..])?)
            } else if p.contains('(') || p.contains(' ') {
                return Err(bad());
            } else {
                LabelReq::Exists(p.to_string())
            };
            let key = match &req {
                LabelReq::Eq(k, _)
                | LabelReq::NotEq(k, _)
                | LabelReq::In(k, _)
                | LabelReq::NotIn(k, _)
                | LabelReq::Exists(k)
                | LabelReq::NotExists(k) => k,
            };
            if !valid_key(key) {
                return Err(bad());
            }
            reqs.push(req);
        }
        Ok(LabelSelector(reqs))
    }

    /// Whether an object's labels satisfy the selector.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.get("metadata").and_then(|m| m.get("labels"));
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            LabelReq::Eq(k, v) => get(k) == Some(v.as_str()),
            LabelReq::NotEq(k, v) => get(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelReq::NotIn(k, vs) => !get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
        })
    }

    /// Whether the selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A parsed field selector: `path=value` / `path==value` / `path!=value` requirements.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FieldSelector(pub Vec<(String, bool, String)>);

/// The fields a kind supports in field selectors, beyond `metadata.name`/`metadata.namespace`.
fn supported_field(kind: &str, field: &str) -> bool {
    matches!(field, "metadata.name" | "metadata.namespace")
        || (kind == "Secret" && field == "type")
        || (kind == "Event"
            && (field.starts_with("involvedObject.")
                || field.starts_with("regarding.")
                || matches!(field, "reason" | "type" | "source" | "reportingController")))
        || (kind == "Namespace" && field == "status.phase")
}

impl FieldSelector {
    /// Parses `fieldSelector` query syntax for a kind; unsupported fields are a 400 like on a
    /// real server.
    pub fn parse(s: &str, kind: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        for part in s.split(',') {
            let p = part.trim();
            if p.is_empty() {
                continue;
            }
            let (k, neg, v) = if let Some((k, v)) = p.split_once("!=") {
                (k, true, v)
            } else if let Some((k, v)) = p.split_once("==") {
                (k, false, v)
            } else if let Some((k, v)) = p.split_once('=') {
                (k, false, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{p}'; can't understand '{p}'"
                )));
            };
            let k = k.trim();
            if !supported_field(kind, k) {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {k}"
                )));
            }
            reqs.push((k.to_string(), neg, v.trim().to_string()));
        }
        Ok(FieldSelector(reqs))
    }

    /// Whether an object satisfies the selector.
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(path, neg, want)| {
            let mut cur = Some(obj);
            for seg in path.split('.') {
                cur = cur.and_then(|c| c.get(seg));
            }
            let got = match cur {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(v) => v.to_string(),
            };
            (got == *want) != *neg
        })
    }

    /// Whether the selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The `metadata.name=X` value, when the selector pins one name (used by single-object
    /// watches).
    pub fn pinned_name(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, neg, _)| k == "metadata.name" && !neg)
            .map(|(_, _, v)| v.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "labels": labels}, "type": "Opaque"})
    }

    #[test]
    fn label_selector_table() {
        let o = obj(json!({"app": "web", "tier": "front"}));
        let cases = [
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app!=db", true),
            ("missing!=x", true),
            ("app in (web, db)", true),
            ("app notin (web)", false),
            ("missing notin (web)", true),
            ("app", true),
            ("!app", false),
            ("!missing", true),
            ("app=web,tier in (front)", true),
            ("app=web,tier=back", false),
            ("", true),
        ];
        for (sel, want) in cases {
            assert_eq!(
                LabelSelector::parse(sel).unwrap().matches(&o),
                want,
                "{sel}"
            );
        }
        assert!(LabelSelector::parse("app in web").is_err());
        assert!(LabelSelector::parse("a b").is_err());
    }

    #[test]
    fn field_selector_table() {
        let o = obj(json!({}));
        let sel = |s| FieldSelector::parse(s, "Secret").unwrap();
        assert!(sel("metadata.name=a").matches(&o));
        assert!(sel("metadata.name==a,metadata.namespace=ns").matches(&o));
        assert!(!sel("metadata.name!=a").matches(&o));
        assert!(sel("type=Opaque").matches(&o));
        assert!(FieldSelector::parse("spec.x=1", "ConfigMap").is_err());
    }
}
