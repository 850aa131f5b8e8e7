//! Field sets in the `FieldsV1` encoding used by `metadata.managedFields`, and the
//! schema-aware walks server-side apply needs: the set of fields an object sets, merging an
//! applied configuration into a live object, and removing fields.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use crate::schema::{ListType, Node, item_key};

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Pe {
    /// `f:name`: a field of an object.
    Field(String),
    /// `k:{"name":"x"}`: an item of an associative list, by key (canonical JSON).
    Key(String),
    /// `v:"x"`: an item of a set list, by value (canonical JSON).
    Value(String),
    /// `i:0`: an item of an atomic list by index (only read, never produced).
    Index(usize),
}

/// A field path.
pub type Path = Vec<Pe>;

/// A set of field paths.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSet(pub BTreeSet<Path>);

impl Pe {
    fn encode(&self) -> String {
        match self {
            Pe::Field(f) => format!("f:{f}"),
            Pe::Key(k) => format!("k:{k}"),
            Pe::Value(v) => format!("v:{v}"),
            Pe::Index(i) => format!("i:{i}"),
        }
    }

    fn decode(s: &str) -> Option<Pe> {
        let (p, rest) = s.split_at_checked(2)?;
        Some(match p {
            "f:" => Pe::Field(rest.to_string()),
            "k:" => Pe::Key(canonical(&serde_json::from_str(rest).ok()?)),
            "v:" => Pe::Value(canonical(&serde_json::from_str(rest).ok()?)),
            "i:" => Pe::Index(rest.parse().ok()?),
            _ => return None,
        })
    }
}

/// Canonical JSON (sorted keys, no spaces), so keys compare equal however they were written.
pub fn canonical(v: &Value) -> String {
    // serde_json's Map is a BTreeMap here, so serialization is already key-sorted.
    serde_json::to_string(v).unwrap_or_default()
}

/// Human-readable path as the real server prints it in conflict messages:
/// `.spec.containers[name="nginx"].image`.
pub fn path_string(p: &[Pe]) -> String {
    let mut s = String::new();
    for pe in p {
        match pe {
            Pe::Field(f) => {
                s.push('.');
                s.push_str(f);
            }
            Pe::Key(k) => {
                let inner = serde_json::from_str::<Map<String, Value>>(k)
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| format!("{k}={}", canonical(v)))
                            .collect::<Vec<_>>()
                            .join(",")
                    })
                    .unwrap_or_default();
                s.push_str(&format!("[{inner}]"));
            }
            Pe::Value(v) => s.push_str(&format!("[={v}]")),
            Pe::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

impl FieldSet {
    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Union.
    pub fn union(&self, o: &FieldSet) -> FieldSet {
        FieldSet(self.0.union(&o.0).cloned().collect())
    }

    /// Difference.
    pub fn minus(&self, o: &FieldSet) -> FieldSet {
        FieldSet(self.0.difference(&o.0).cloned().collect())
    }

    /// Intersection.
    pub fn intersect(&self, o: &FieldSet) -> FieldSet {
        FieldSet(self.0.intersection(&o.0).cloned().collect())
    }

    /// Whether any member is `p` or lies below it.
    pub fn has_at_or_below(&self, p: &[Pe]) -> bool {
        self.0
            .range(p.to_vec()..)
            .next()
            .is_some_and(|m| m.starts_with(p))
    }

    /// Whether any member lies strictly below `p`.
    pub fn has_below(&self, p: &[Pe]) -> bool {
        self.0
            .range(p.to_vec()..)
            .find(|m| m.as_slice() != p)
            .is_some_and(|m| m.starts_with(p))
    }

    /// Encodes as `fieldsV1`.
    pub fn to_fields_v1(&self) -> Value {
        let mut root = Map::new();
        for path in &self.0 {
            let mut cur = &mut root;
            for (i, pe) in path.iter().enumerate() {
                let entry = cur
                    .entry(pe.encode())
                    .or_insert_with(|| Value::Object(Map::new()));
                let Value::Object(m) = entry else { break };
                if i == path.len() - 1 {
                    m.insert(".".into(), Value::Object(Map::new()));
                }
                cur = m;
            }
        }
        // A member with no children is written `{}`, not `{".": {}}`.
        fn tidy(m: &mut Map<String, Value>) {
            for v in m.values_mut() {
                if let Value::Object(c) = v {
                    if c.len() == 1 && c.contains_key(".") {
                        c.clear();
                    } else {
                        tidy(c);
                    }
                }
            }
        }
        tidy(&mut root);
        Value::Object(root)
    }

    /// Decodes `fieldsV1`; unknown path elements are skipped.
    pub fn from_fields_v1(v: &Value) -> FieldSet {
        fn walk(m: &Map<String, Value>, prefix: &mut Path, out: &mut BTreeSet<Path>) {
            for (k, v) in m {
                if k == "." {
                    if !prefix.is_empty() {
                        out.insert(prefix.clone());
                    }
                    continue;
                }
                let Some(pe) = Pe::decode(k) else { continue };
                prefix.push(pe);
                match v.as_object() {
                    Some(c) if !c.is_empty() => walk(c, prefix, out),
                    _ => {
                        out.insert(prefix.clone());
                    }
                }
                prefix.pop();
            }
        }
        let mut out = BTreeSet::new();
        if let Some(m) = v.as_object() {
            walk(m, &mut Vec::new(), &mut out);
        }
        FieldSet(out)
    }

    /// The fields an object sets, by the schema's list and map types.
    pub fn of(v: &Value, schema: Node<'_>) -> FieldSet {
        let mut out = BTreeSet::new();
        collect(v, schema, &mut Vec::new(), &mut out);
        FieldSet(out)
    }
}

impl FieldSet {
    /// The members of [`FieldSet::of`] under the given top-level fields.
    pub fn of_fields(v: &Value, schema: Node<'_>, fields: &BTreeSet<&str>) -> FieldSet {
        let Value::Object(m) = v else {
            return FieldSet::of(v, schema);
        };
        if m.is_empty() || schema.atomic_map() {
            return FieldSet::of(v, schema);
        }
        let mut out = BTreeSet::new();
        let mut prefix = Vec::new();
        for (k, child) in m.iter().filter(|(k, _)| fields.contains(k.as_str())) {
            prefix.push(Pe::Field(k.clone()));
            collect_field(child, schema.prop(k), k, &mut prefix, &mut out);
            prefix.pop();
        }
        FieldSet(out)
    }
}

fn collect(v: &Value, s: Node<'_>, prefix: &mut Path, out: &mut BTreeSet<Path>) {
    match v {
        Value::Object(m) if !m.is_empty() && !s.atomic_map() => {
            for (k, child) in m {
                prefix.push(Pe::Field(k.clone()));
                collect_field(child, s.prop(k), k, prefix, out);
                prefix.pop();
            }
        }
        _ => {
            if !prefix.is_empty() {
                out.insert(prefix.clone());
            }
        }
    }
}

fn collect_field(v: &Value, s: Node<'_>, field: &str, prefix: &mut Path, out: &mut BTreeSet<Path>) {
    let Value::Array(items) = v else {
        collect(v, s, prefix, out);
        return;
    };
    if items.is_empty() {
        out.insert(prefix.clone());
        return;
    }
    match s.list_type(field) {
        ListType::Atomic => {
            out.insert(prefix.clone());
        }
        ListType::Set => {
            for it in items {
                prefix.push(Pe::Value(canonical(it)));
                out.insert(prefix.clone());
                prefix.pop();
            }
        }
        ListType::Map(keys) => {
            for it in items {
                let Some(k) = item_key(it, &keys) else {
                    // An item without its key cannot be addressed: own the list atomically.
                    out.insert(prefix.clone());
                    continue;
                };
                prefix.push(Pe::Key(canonical(&Value::Object(k))));
                out.insert(prefix.clone());
                collect(it, s.items(), prefix, out);
                prefix.pop();
            }
        }
    }
}

/// Finds the list item addressed by a `k:` or `v:` path element.
fn find_item(items: &[Value], pe: &Pe) -> Option<usize> {
    match pe {
        Pe::Key(k) => {
            let want: Map<String, Value> = serde_json::from_str(k).ok()?;
            items.iter().position(|it| {
                it.as_object()
                    .is_some_and(|o| want.iter().all(|(wk, wv)| o.get(wk) == Some(wv)))
            })
        }
        Pe::Value(v) => items.iter().position(|it| &canonical(it) == v),
        Pe::Index(i) => (*i < items.len()).then_some(*i),
        Pe::Field(_) => None,
    }
}

/// The value at a path, if present.
pub fn get_at<'a>(v: &'a Value, p: &[Pe]) -> Option<&'a Value> {
    let mut cur = v;
    for pe in p {
        cur = match (pe, cur) {
            (Pe::Field(f), Value::Object(m)) => m.get(f)?,
            (_, Value::Array(items)) => &items[find_item(items, pe)?],
            _ => return None,
        };
    }
    Some(cur)
}

/// Removes the value at a path; missing paths are ignored.
pub fn remove_at(v: &mut Value, p: &[Pe]) {
    let Some((last, parent)) = p.split_last() else {
        return;
    };
    let mut cur = v;
    for pe in parent {
        let next = match (pe, cur) {
            (Pe::Field(f), Value::Object(m)) => m.get_mut(f),
            (_, Value::Array(items)) => match find_item(items, pe) {
                Some(i) => items.get_mut(i),
                None => None,
            },
            _ => None,
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    match (last, cur) {
        (Pe::Field(f), Value::Object(m)) => {
            m.remove(f);
        }
        (_, Value::Array(items)) => {
            if let Some(i) = find_item(items, last) {
                items.remove(i);
            }
        }
        _ => {}
    }
}

/// Merges an applied configuration into a live object by the schema's list and map types:
/// granular maps merge per key, associative lists per item key, sets by value, everything else
/// is replaced. `null` in the configuration removes the field.
pub fn merge(live: Option<&Value>, cfg: &Value, s: Node<'_>, field: &str) -> Value {
    match (live, cfg) {
        (Some(Value::Object(l)), Value::Object(c)) if !s.atomic_map() => {
            let mut out = l.clone();
            for (k, cv) in c {
                if cv.is_null() {
                    out.remove(k);
                    continue;
                }
                let merged = merge(l.get(k), cv, s.prop(k), k);
                out.insert(k.clone(), merged);
            }
            Value::Object(out)
        }
        (Some(Value::Array(l)), Value::Array(c)) => match s.list_type(field) {
            ListType::Atomic => cfg.clone(),
            ListType::Set => {
                let mut out = l.clone();
                for it in c {
                    if !out.contains(it) {
                        out.push(it.clone());
                    }
                }
                Value::Array(out)
            }
            ListType::Map(keys) => {
                let mut out = l.clone();
                for it in c {
                    let pos = item_key(it, &keys).and_then(|k| {
                        out.iter()
                            .position(|o| item_key(o, &keys).as_ref() == Some(&k))
                    });
                    match pos {
                        Some(i) => out[i] = merge(Some(&out[i]), it, s.items(), ""),
                        None => out.push(it.clone()),
                    }
                }
                Value::Array(out)
            }
        },
        _ => strip_nulls(cfg.clone()),
    }
}

fn strip_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, strip_nulls(v)))
                .collect(),
        ),
        other => other,
    }
}

/// The paths whose values differ between two objects: members of either object's field set
/// whose value (or, for members with children, whose presence) changed.
///
/// Equal members hold no differing path, so only the members that differ are walked: a write
/// that changes one field of a large object does not pay for the rest of it.
pub fn changed_paths(old: &Value, new: &Value, s: Node<'_>) -> FieldSet {
    let mut out = BTreeSet::new();
    let roots = (old, new);
    changed_in(
        roots,
        Some(old),
        Some(new),
        s,
        None,
        &mut Vec::new(),
        &mut out,
    );
    FieldSet(out)
}

/// [`changed_paths`] below `prefix`, the path of `old` and `new` in `roots` (`field` is its last
/// field name, `None` at the root).
fn changed_in(
    roots: (&Value, &Value),
    old: Option<&Value>,
    new: Option<&Value>,
    s: Node<'_>,
    field: Option<&str>,
    prefix: &mut Path,
    out: &mut BTreeSet<Path>,
) {
    match (old, new) {
        // Two granular maps with members: their own path is in neither field set, and a member's
        // paths depend only on that member.
        (Some(Value::Object(a)), Some(Value::Object(b)))
            if !a.is_empty() && !b.is_empty() && !s.atomic_map() =>
        {
            for k in a.keys().chain(b.keys().filter(|k| !a.contains_key(*k))) {
                let (x, y) = (a.get(k), b.get(k));
                if x == y {
                    continue;
                }
                prefix.push(Pe::Field(k.clone()));
                changed_in(roots, x, y, s.prop(k), Some(k), prefix, out);
                prefix.pop();
            }
        }
        // A member on one side only: every path of it differs (the other side has none).
        (None, Some(v)) | (Some(v), None) => match field {
            Some(f) => collect_field(v, s, f, prefix, out),
            None => collect(v, s, prefix, out),
        },
        _ => {
            let mut members = BTreeSet::new();
            for v in [old, new].into_iter().flatten() {
                match field {
                    Some(f) => collect_field(v, s, f, prefix, &mut members),
                    None => collect(v, s, prefix, &mut members),
                }
            }
            let all = FieldSet(members);
            for p in &all.0 {
                let (x, y) = (get_at(roots.0, p), get_at(roots.1, p));
                let differs = if all.has_below(p) {
                    x.is_some() != y.is_some()
                } else {
                    x != y
                };
                if differs {
                    out.insert(p.clone());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_v1_round_trip_and_encoding() {
        let obj = json!({
            "metadata": {"labels": {"app": "x"}, "finalizers": ["a"], "ownerReferences": [{"uid": "u1", "name": "o"}]},
            "spec": {"containers": [{"name": "c", "image": "i"}], "replicas": 2, "empty": {}}
        });
        let fs = FieldSet::of(&obj, Node(None));
        let enc = fs.to_fields_v1();
        assert_eq!(
            enc,
            json!({
                "f:metadata": {
                    "f:labels": {"f:app": {}},
                    "f:finalizers": {"v:\"a\"": {}},
                    "f:ownerReferences": {"k:{\"uid\":\"u1\"}": {".": {}, "f:name": {}, "f:uid": {}}}
                },
                "f:spec": {
                    "f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {}}},
                    "f:replicas": {},
                    "f:empty": {}
                }
            })
        );
        assert_eq!(FieldSet::from_fields_v1(&enc), fs);
    }

    #[test]
    fn merge_by_list_types() {
        let live = json!({"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "2"}], "args": ["x"]},
                          "metadata": {"finalizers": ["f1"]}});
        let cfg = json!({"spec": {"containers": [{"name": "b", "image": "3"}], "args": ["y"]},
                         "metadata": {"finalizers": ["f2"]}});
        let m = merge(Some(&live), &cfg, Node(None), "");
        assert_eq!(
            m,
            json!({"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "3"}], "args": ["y"]},
                   "metadata": {"finalizers": ["f1", "f2"]}})
        );
    }

    /// The whole-object walk `changed_paths` short-cuts: the field sets of both objects, then
    /// every member compared.
    fn changed_paths_whole(old: &Value, new: &Value, s: Node<'_>) -> FieldSet {
        let all = FieldSet::of(old, s).union(&FieldSet::of(new, s));
        let differs = |p: &Path| {
            let (x, y) = (get_at(old, p), get_at(new, p));
            if all.has_below(p) {
                x.is_some() != y.is_some()
            } else {
                x != y
            }
        };
        FieldSet(all.0.iter().filter(|p| differs(p)).cloned().collect())
    }

    #[test]
    fn changed_paths_walks_only_differing_members_with_the_same_result() {
        let schema = json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "properties": {
                    "selector": {"type": "object", "x-kubernetes-map-type": "atomic"},
                    "ports": {"type": "array", "x-kubernetes-list-type": "map",
                              "x-kubernetes-list-map-keys": ["port"],
                              "items": {"type": "object"}},
                    "tags": {"type": "array", "x-kubernetes-list-type": "set"},
                    "args": {"type": "array"}
                }}
            }
        });
        let base = json!({
            "metadata": {"labels": {"a": "1", "b": "2"}, "finalizers": ["f1"],
                         "ownerReferences": [{"uid": "u1", "name": "o"}]},
            "spec": {"selector": {"x": "1"}, "ports": [{"port": 80, "name": "http"}],
                     "tags": ["t1"], "args": ["a"], "nested": {"deep": {"v": 1}, "empty": {}}},
            "data": {"k": "v"}
        });
        let edits: Vec<(&str, Value)> = vec![
            ("/metadata/labels/a", json!("9")),
            ("/metadata/labels/c", json!("3")),
            ("/metadata/labels", json!({})),
            ("/metadata/finalizers", json!(["f1", "f2"])),
            ("/metadata/finalizers", json!([])),
            ("/metadata/ownerReferences/0/name", json!("p")),
            (
                "/metadata/ownerReferences",
                json!([{"uid": "u2", "name": "o"}]),
            ),
            ("/spec/selector/x", json!("2")),
            ("/spec/selector", json!({})),
            ("/spec/ports/0/name", json!("web")),
            (
                "/spec/ports",
                json!([{"port": 80, "name": "http"}, {"port": 443}]),
            ),
            ("/spec/ports", json!([{"name": "keyless"}])),
            ("/spec/tags", json!(["t2", "t1"])),
            ("/spec/args", json!(["b"])),
            ("/spec/nested/deep", json!({})),
            ("/spec/nested/deep/v", json!({"w": 2})),
            ("/spec/nested/empty", json!({"now": true})),
            ("/spec/nested", json!("scalar")),
            ("/spec", json!({})),
            ("/data", json!(null)),
            ("/extra", json!({"new": [1, 2]})),
        ];
        let set = |v: &mut Value, ptr: &str, x: Value| {
            let (parent, key) = ptr.rsplit_once('/').unwrap();
            let target = if parent.is_empty() {
                &mut *v
            } else {
                v.pointer_mut(parent).unwrap()
            };
            match target {
                Value::Object(m) => {
                    m.insert(key.to_string(), x);
                }
                Value::Array(items) => items[key.parse::<usize>().unwrap()] = x,
                _ => unreachable!("{ptr}"),
            }
        };
        for schema in [Node(None), Node(Some(&schema))] {
            let mut compared = 0;
            // Single edits, and every pair of edits, in both directions.
            for (i, (p1, v1)) in edits.iter().enumerate() {
                for second in std::iter::once(None).chain(edits[i + 1..].iter().map(Some)) {
                    let mut changed = base.clone();
                    set(&mut changed, p1, v1.clone());
                    if let Some((p2, v2)) = second
                        && changed
                            .pointer(p2.rsplit_once('/').unwrap().0)
                            .is_some_and(|t| t.is_object() || t.is_array())
                    {
                        set(&mut changed, p2, v2.clone());
                    }
                    for (a, b) in [(&base, &changed), (&changed, &base)] {
                        assert_eq!(
                            changed_paths(a, b, schema),
                            changed_paths_whole(a, b, schema),
                            "{a} -> {b}"
                        );
                        compared += 1;
                    }
                }
            }
            assert_eq!(compared, 2 * (21 + 21 * 20 / 2));
            assert!(changed_paths(&base, &base, schema).is_empty());
            assert_eq!(
                changed_paths(&json!({}), &base, schema),
                FieldSet::of(&base, schema)
            );
            // Members present on one side only (the short cut that skips comparing them),
            // including values whose paths are awkward to look up again.
            let one_sided = [
                json!({"ports": [{"name": "keyless"}, {"port": 1}]}),
                json!({"ports": [{"port": 1}, {"port": 1}]}),
                json!({"tags": ["t", "t"], "args": [null, {}]}),
                json!({"nested": {"deep": null, "empty": {}}}),
                json!({"selector": {"x": {"y": 1}}}),
            ];
            for extra in one_sided {
                let without = json!({"metadata": {}, "spec": {"keep": 1}});
                let mut with = without.clone();
                for (k, v) in extra.as_object().unwrap() {
                    with["spec"][k] = v.clone();
                }
                for (a, b) in [(&without, &with), (&with, &without)] {
                    assert_eq!(
                        changed_paths(a, b, schema),
                        changed_paths_whole(a, b, schema),
                        "{a} -> {b}"
                    );
                }
            }
        }
    }

    #[test]
    fn changed_paths_and_removal() {
        let old = json!({"data": {"a": "1", "b": "2"}});
        let new = json!({"data": {"a": "1", "b": "3", "c": "4"}});
        let ch = changed_paths(&old, &new, Node(None));
        let strs: Vec<String> = ch.0.iter().map(|p| path_string(p)).collect();
        assert_eq!(strs, vec![".data.b", ".data.c"]);
        let mut v = new.clone();
        remove_at(&mut v, &[Pe::Field("data".into()), Pe::Field("c".into())]);
        assert_eq!(v, json!({"data": {"a": "1", "b": "3"}}));
        assert_eq!(
            path_string(&[
                Pe::Field("spec".into()),
                Pe::Key("{\"name\":\"c\"}".into()),
                Pe::Field("image".into())
            ]),
            ".spec[name=\"c\"].image"
        );
    }
}
