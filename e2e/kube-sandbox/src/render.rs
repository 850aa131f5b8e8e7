//! Response shapes: full objects at the requested version, `PartialObjectMetadata`, and
//! `meta.k8s.io/v1` Tables with printer columns (with the small JSONPath subset they use).

use serde_json::{Map, Value, json};

use crate::registry::{PrinterColumn, ResourceDef};
use crate::util::human_age;

/// What the client asked for in `Accept`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The objects themselves.
    Full,
    /// `PartialObjectMetadata` / `PartialObjectMetadataList`.
    Metadata,
    /// A `Table`; the flag says whether rows carry the full object (`includeObject=Object`),
    /// metadata (default), or nothing (`None`).
    Table(Include),
}

/// `includeObject` for tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Include {
    /// `includeObject=None`.
    None,
    /// `includeObject=Metadata` (default).
    Metadata,
    /// `includeObject=Object`.
    Object,
}

impl Format {
    /// From the `Accept` header and the `includeObject` query parameter.
    pub fn from_accept(accept: &str, include: Option<&str>) -> Format {
        // The first acceptable alternative wins, as content negotiation goes.
        for alt in accept.split(',') {
            let alt = alt.trim();
            if alt.contains("as=Table") {
                let inc = match include {
                    Some("None") => Include::None,
                    Some("Object") => Include::Object,
                    _ => Include::Metadata,
                };
                return Format::Table(inc);
            }
            if alt.contains("as=PartialObjectMetadata") {
                return Format::Metadata;
            }
            if alt.starts_with("application/json") || alt.starts_with("*/*") || alt.is_empty() {
                return Format::Full;
            }
        }
        Format::Full
    }
}

/// An object at the requested version.
pub fn object(obj: &Value, def: &ResourceDef, version: &str) -> Value {
    crate::ops::present(obj, def, version)
}

/// `PartialObjectMetadata` for an object.
pub fn metadata_of(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or(json!({})),
    })
}

/// One object in the requested format.
pub fn one(obj: &Value, def: &ResourceDef, version: &str, fmt: Format) -> Value {
    match fmt {
        Format::Full => object(obj, def, version),
        Format::Metadata => metadata_of(obj),
        Format::Table(inc) => table(std::slice::from_ref(obj), def, version, inc, None, true),
    }
}

/// An object serialized at another version without copying it: `apiVersion` and `kind` are
/// replaced on the fly.
pub struct AtVersion<'a> {
    /// The stored object.
    pub obj: &'a Value,
    /// The `apiVersion` to write.
    pub api_version: &'a str,
    /// The `kind` to write.
    pub kind: &'a str,
}

impl serde::Serialize for AtVersion<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let Value::Object(m) = self.obj else {
            return self.obj.serialize(s);
        };
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("apiVersion", self.api_version)?;
        map.serialize_entry("kind", self.kind)?;
        for (k, v) in m {
            if k != "apiVersion" && k != "kind" {
                map.serialize_entry(k, v)?;
            }
        }
        map.end()
    }
}

/// A full-object list serialized straight from the stored objects (no copies): the hot path
/// of large LISTs.
pub fn list_json(
    objs: &[std::sync::Arc<Value>],
    def: &ResourceDef,
    version: &str,
    meta: &Map<String, Value>,
) -> Vec<u8> {
    #[derive(serde::Serialize)]
    struct ListOut<'a> {
        kind: String,
        #[serde(rename = "apiVersion")]
        api_version: &'a str,
        metadata: &'a Map<String, Value>,
        items: Vec<AtVersion<'a>>,
    }
    let av = def.api_version(version);
    let out = ListOut {
        kind: def.list_kind(),
        api_version: &av,
        metadata: meta,
        items: objs
            .iter()
            .map(|o| AtVersion {
                obj: o,
                api_version: &av,
                kind: &def.kind,
            })
            .collect(),
    };
    serde_json::to_vec(&out).unwrap_or_default()
}

/// A list response in the requested format.
pub fn list(
    objs: &[Value],
    def: &ResourceDef,
    version: &str,
    fmt: Format,
    meta: Map<String, Value>,
) -> Value {
    match fmt {
        Format::Full => json!({
            "kind": def.list_kind(),
            "apiVersion": def.api_version(version),
            "metadata": meta,
            "items": objs.iter().map(|o| object(o, def, version)).collect::<Vec<_>>(),
        }),
        Format::Metadata => json!({
            "kind": "PartialObjectMetadataList",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": meta,
            "items": objs.iter().map(metadata_of).collect::<Vec<_>>(),
        }),
        Format::Table(inc) => table(objs, def, version, inc, Some(meta), true),
    }
}

fn columns(def: &ResourceDef, version: &str) -> Vec<PrinterColumn> {
    let col = |name: &str, ty: &str, format: &str, desc: &str, path: &str| PrinterColumn {
        name: name.into(),
        type_: ty.into(),
        format: format.into(),
        description: desc.into(),
        priority: 0,
        json_path: path.into(),
    };
    let name = col(
        "Name",
        "string",
        "name",
        "Name must be unique within a namespace.",
        ".metadata.name",
    );
    let age = col(
        "Age",
        "date",
        "",
        "CreationTimestamp is a timestamp representing the server time when this object was created.",
        ".metadata.creationTimestamp",
    );
    let custom = def
        .version(version)
        .map(|v| v.columns.clone())
        .unwrap_or_default();
    if !custom.is_empty() {
        let mut out = vec![name];
        out.extend(custom);
        return out;
    }
    match (def.group.as_str(), def.plural.as_str()) {
        ("", "namespaces") => vec![
            name,
            col(
                "Status",
                "string",
                "",
                "The status of the namespace",
                ".status.phase",
            ),
            age,
        ],
        ("", "configmaps") | ("", "secrets") => vec![name, age],
        ("apps", "deployments") => vec![
            name,
            col(
                "Ready",
                "string",
                "",
                "Number of the pod with ready state",
                "",
            ),
            col(
                "Up-to-date",
                "integer",
                "",
                "Total number of non-terminated pods targeted by this deployment that have the desired template spec.",
                ".status.updatedReplicas",
            ),
            col(
                "Available",
                "integer",
                "",
                "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.",
                ".status.availableReplicas",
            ),
            age,
        ],
        _ => vec![name, age],
    }
}

fn cell(obj: &Value, c: &PrinterColumn, def: &ResourceDef) -> Value {
    if def.group == "apps" && def.plural == "deployments" && c.name == "Ready" {
        let ready = obj
            .pointer("/status/readyReplicas")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let want = obj
            .pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        return json!(format!("{ready}/{want}"));
    }
    let vals = eval(obj, &c.json_path);
    let Some(v) = vals.into_iter().next() else {
        return Value::Null;
    };
    match (c.type_.as_str(), &v) {
        ("date", Value::String(s)) => json!(human_age(s)),
        ("string", Value::String(_)) => v,
        ("string", other) => json!(other.to_string()),
        _ => v,
    }
}

/// A `meta.k8s.io/v1` Table of objects.
pub fn table(
    objs: &[Value],
    def: &ResourceDef,
    version: &str,
    inc: Include,
    meta: Option<Map<String, Value>>,
    with_definitions: bool,
) -> Value {
    let cols = columns(def, version);
    let defs: Vec<Value> = cols
        .iter()
        .map(|c| {
            json!({"name": c.name, "type": c.type_, "format": c.format,
                   "description": c.description, "priority": c.priority})
        })
        .collect();
    let rows: Vec<Value> = objs
        .iter()
        .map(|o| {
            let cells: Vec<Value> = cols.iter().map(|c| cell(o, c, def)).collect();
            let mut row = json!({"cells": cells});
            match inc {
                Include::None => {}
                Include::Metadata => row["object"] = metadata_of(o),
                Include::Object => row["object"] = object(o, def, version),
            }
            row
        })
        .collect();
    let mut t = json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta.unwrap_or_default(),
        "rows": rows,
    });
    if with_definitions {
        t["columnDefinitions"] = Value::Array(defs);
    } else {
        t["columnDefinitions"] = json!([]);
    }
    t
}

#[derive(Debug, PartialEq)]
enum Step {
    Field(String),
    Index(usize),
    All,
    Filter(Vec<String>, bool, Value),
}

fn parse(path: &str) -> Option<Vec<Step>> {
    let p = path.trim();
    let p = p
        .strip_prefix('{')
        .and_then(|x| x.strip_suffix('}'))
        .unwrap_or(p);
    let p = p.strip_prefix('$').unwrap_or(p);
    let chars: Vec<char> = p.chars().collect();
    let mut i = 0;
    let mut steps = Vec::new();
    while i < chars.len() {
        match chars[i] {
            '.' => {
                i += 1;
                let start = i;
                while i < chars.len() && chars[i] != '.' && chars[i] != '[' {
                    if chars[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
                let name: String = chars[start..i.min(chars.len())]
                    .iter()
                    .collect::<String>()
                    .replace('\\', "");
                if name == "*" {
                    steps.push(Step::All);
                } else if !name.is_empty() {
                    steps.push(Step::Field(name));
                }
            }
            '[' => {
                let close =
                    (i..chars.len()).find(|&j| chars[j] == ']' && !inside_quotes(&chars[i..j]))?;
                let inner: String = chars[i + 1..close].iter().collect();
                i = close + 1;
                let inner = inner.trim();
                if inner == "*" {
                    steps.push(Step::All);
                } else if let Some(f) = inner.strip_prefix("?(").and_then(|x| x.strip_suffix(')')) {
                    let (lhs, neg, rhs) = if let Some((l, r)) = f.split_once("!=") {
                        (l, true, r)
                    } else {
                        let (l, r) = f.split_once("==")?;
                        (l, false, r)
                    };
                    let lhs = lhs.trim().strip_prefix("@.")?;
                    let rhs = rhs.trim();
                    let val =
                        if let Some(s) = rhs.strip_prefix('"').and_then(|x| x.strip_suffix('"')) {
                            json!(s)
                        } else if let Some(s) =
                            rhs.strip_prefix('\'').and_then(|x| x.strip_suffix('\''))
                        {
                            json!(s)
                        } else {
                            serde_json::from_str(rhs).ok()?
                        };
                    steps.push(Step::Filter(
                        lhs.split('.').map(str::to_string).collect(),
                        neg,
                        val,
                    ));
                } else if let Some(s) = inner
                    .strip_prefix('\'')
                    .and_then(|x| x.strip_suffix('\''))
                    .or_else(|| inner.strip_prefix('"').and_then(|x| x.strip_suffix('"')))
                {
                    steps.push(Step::Field(s.to_string()));
                } else {
                    steps.push(Step::Index(inner.parse().ok()?));
                }
            }
            _ => {
                // A path without a leading dot ("status.phase").
                let start = i;
                while i < chars.len() && chars[i] != '.' && chars[i] != '[' {
                    i += 1;
                }
                steps.push(Step::Field(chars[start..i].iter().collect()));
            }
        }
    }
    Some(steps)
}

fn inside_quotes(s: &[char]) -> bool {
    s.iter().filter(|c| **c == '"' || **c == '\'').count() % 2 == 1
}

/// Evaluates a printer-column JSONPath (`.a.b`, `[0]`, `[*]`, `['k']`,
/// `[?(@.type=="Ready")]`) and returns the matches.
pub fn eval(obj: &Value, path: &str) -> Vec<Value> {
    let Some(steps) = parse(path) else {
        return Vec::new();
    };
    let mut cur = vec![obj.clone()];
    for s in &steps {
        let mut next = Vec::new();
        for v in &cur {
            match s {
                Step::Field(f) => {
                    if let Some(x) = v.get(f.as_str()) {
                        next.push(x.clone());
                    }
                }
                Step::Index(i) => {
                    if let Some(x) = v.get(*i) {
                        next.push(x.clone());
                    }
                }
                Step::All => match v {
                    Value::Array(a) => next.extend(a.iter().cloned()),
                    Value::Object(m) => next.extend(m.values().cloned()),
                    _ => {}
                },
                Step::Filter(p, neg, want) => {
                    if let Value::Array(a) = v {
                        for it in a {
                            let got = p.iter().try_fold(it, |acc, k| acc.get(k.as_str()));
                            if (got == Some(want)) != *neg {
                                next.push(it.clone());
                            }
                        }
                    }
                }
            }
        }
        cur = next;
    }
    cur
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonpath_subset() {
        let o = json!({"status": {"conditions": [{"type": "A", "status": "False"}, {"type": "Ready", "status": "True"}],
                                  "n": 3},
                       "metadata": {"labels": {"a.b/c": "x"}}});
        assert_eq!(
            eval(&o, ".status.conditions[?(@.type==\"Ready\")].status"),
            vec![json!("True")]
        );
        assert_eq!(eval(&o, ".status.conditions[0].type"), vec![json!("A")]);
        assert_eq!(
            eval(&o, ".status.conditions[*].type"),
            vec![json!("A"), json!("Ready")]
        );
        assert_eq!(eval(&o, ".metadata.labels['a.b/c']"), vec![json!("x")]);
        assert_eq!(eval(&o, ".metadata.labels.a\\.b/c"), vec![json!("x")]);
        assert_eq!(eval(&o, "{.status.n}"), vec![json!(3)]);
        assert!(eval(&o, ".status.missing").is_empty());
    }

    #[test]
    fn accept_negotiation() {
        assert_eq!(
            Format::from_accept(
                "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
                None
            ),
            Format::Table(Include::Metadata)
        );
        assert_eq!(
            Format::from_accept(
                "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
                None
            ),
            Format::Metadata
        );
        assert_eq!(Format::from_accept("", None), Format::Full);
    }
}
