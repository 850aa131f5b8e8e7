//! Field ownership (`metadata.managedFields`) and server-side apply.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::error::{ApiError, Cause};
use crate::fieldset::{FieldSet, Pe, changed_paths, merge, path_string, remove_at};
use crate::schema::Node;
use crate::util::now_rfc3339;

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// `manager`.
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    /// `apiVersion` the manager used.
    pub api_version: String,
    /// `time`.
    pub time: String,
    /// `subresource` ("" for the main resource).
    pub subresource: String,
    /// The owned fields.
    pub set: FieldSet,
    /// The entry as stored, while it is unchanged: written back as it was instead of being
    /// encoded again.
    pub raw: Option<Value>,
}

impl Entry {
    /// Replaces the owned fields.
    fn set_fields(&mut self, set: FieldSet) {
        if set != self.set {
            self.set = set;
            self.raw = None;
        }
    }

    /// Removes fields in place (no copy of the fields that stay); an entry that loses none keeps
    /// its stored form.
    fn remove_fields(&mut self, gone: &FieldSet) {
        let before = self.set.0.len();
        self.set.0.retain(|p| !gone.0.contains(p));
        if self.set.0.len() != before {
            self.raw = None;
        }
    }

    /// Marks a write by this entry's manager.
    fn touch(&mut self, api_version: &str) {
        self.time = now_rfc3339();
        self.api_version = api_version.to_string();
        self.raw = None;
    }
}

/// Reads `metadata.managedFields`.
pub fn entries_of(obj: &Value) -> Vec<Entry> {
    let Some(list) = obj
        .get("metadata")
        .and_then(|m| m.get("managedFields"))
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    list.iter()
        .filter_map(|e| {
            let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            let manager = s("manager");
            if manager.is_empty() {
                return None;
            }
            Some(Entry {
                manager,
                operation: s("operation"),
                api_version: s("apiVersion"),
                time: s("time"),
                subresource: s("subresource"),
                set: FieldSet::from_fields_v1(e.get("fieldsV1").unwrap_or(&Value::Null)),
                raw: Some(e.clone()),
            })
        })
        .collect()
}

/// Writes `metadata.managedFields`, dropping entries that own nothing (an unchanged entry is
/// moved back as it was stored, not copied).
pub fn set_entries(obj: &mut Value, entries: Vec<Entry>) {
    let list: Vec<Value> = entries
        .into_iter()
        .filter(|e| !e.set.is_empty())
        .map(|e| {
            if let Some(raw) = e.raw {
                return raw;
            }
            let mut v = json!({
                "manager": e.manager,
                "operation": e.operation,
                "apiVersion": e.api_version,
                "time": e.time,
                "fieldsType": "FieldsV1",
                "fieldsV1": e.set.to_fields_v1(),
            });
            if !e.subresource.is_empty() {
                v["subresource"] = json!(e.subresource);
            }
            v
        })
        .collect();
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if list.is_empty() {
            m.remove("managedFields");
        } else {
            m.insert("managedFields".into(), Value::Array(list));
        }
    }
}

/// Writes `metadata.managedFields` again in the server's own encoding (for entries a client
/// wrote).
pub fn normalize_entries(obj: &mut Value) {
    let mut entries = entries_of(obj);
    entries.iter_mut().for_each(|e| e.raw = None);
    set_entries(obj, entries);
}

/// The part of an object whose fields are tracked: without type and system metadata, and
/// without status on the main resource of a kind with a status subresource (or only status
/// on the status subresource).
pub fn tracked(obj: &Value, has_status: bool, subresource: &str) -> Value {
    let Some(root) = obj.as_object() else {
        return Value::Object(Map::new());
    };
    let mut out = Map::new();
    if subresource == "status" {
        if let Some(s) = root.get("status") {
            out.insert("status".into(), s.clone());
        }
        return Value::Object(out);
    }
    // Only what is kept is copied: `managedFields` alone can be the larger part of an object.
    for (k, v) in root {
        match k.as_str() {
            "apiVersion" | "kind" => {}
            "status" if has_status => {}
            "metadata" => {
                let Value::Object(m) = v else {
                    out.insert(k.clone(), v.clone());
                    continue;
                };
                let kept: Map<String, Value> = m
                    .iter()
                    .filter(|(k, _)| !SYSTEM_METADATA.contains(&k.as_str()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                if !kept.is_empty() {
                    out.insert(k.clone(), Value::Object(kept));
                }
            }
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    Value::Object(out)
}

/// Metadata the server sets, whose fields no manager owns.
const SYSTEM_METADATA: [&str; 10] = [
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

/// Records a non-apply write (`operation: Update`): the manager takes the fields the write
/// changed; other managers lose them.
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    api_version: &str,
    subresource: &str,
    schema: Node<'_>,
    has_status: bool,
) {
    let new_t = tracked(new, has_status, subresource);
    let (mut entries, changed) = match old {
        Some(o) => {
            let old_t = tracked(o, has_status, subresource);
            (entries_of(o), changed_paths(&old_t, &new_t, schema))
        }
        None => (Vec::new(), FieldSet::of(&new_t, schema)),
    };
    if changed.is_empty() {
        set_entries(new, entries);
        return;
    }
    // The changed fields the new object still sets: only the top-level fields a change is
    // under need walking.
    let tops: BTreeSet<&str> = changed
        .0
        .iter()
        .filter_map(|p| match p.first() {
            Some(Pe::Field(f)) => Some(f.as_str()),
            _ => None,
        })
        .collect();
    let now_set = changed.intersect(&FieldSet::of_fields(&new_t, schema, &tops));
    let mut found = false;
    for e in entries.iter_mut() {
        if e.manager == manager && e.operation == "Update" && e.subresource == subresource {
            e.remove_fields(&changed);
            e.set.0.extend(now_set.0.iter().cloned());
            e.touch(api_version);
            found = true;
        } else {
            e.remove_fields(&changed);
        }
    }
    if !found {
        entries.push(Entry {
            manager: manager.to_string(),
            operation: "Update".into(),
            api_version: api_version.to_string(),
            time: now_rfc3339(),
            subresource: subresource.to_string(),
            set: now_set,
            raw: None,
        });
    }
    set_entries(new, entries);
}

/// Inputs of one server-side apply.
pub struct ApplyRequest<'a> {
    /// The live object (`None` when apply creates it).
    pub live: Option<&'a Value>,
    /// The applied configuration.
    pub applied: &'a Value,
    /// `fieldManager`.
    pub manager: &'a str,
    /// `force`.
    pub force: bool,
    /// The apiVersion of the request.
    pub api_version: &'a str,
    /// "" or "status".
    pub subresource: &'a str,
    /// Whether the kind has a status subresource.
    pub has_status: bool,
    /// The version's schema.
    pub schema: Node<'a>,
    /// For error messages.
    pub group: &'a str,
    /// For error messages.
    pub plural: &'a str,
    /// For error messages.
    pub name: &'a str,
}

/// Server-side apply: merges the configuration into the live object, checks conflicts with
/// other managers, removes fields this manager stopped applying, and updates
/// `managedFields`. Returns the new object (system metadata is the caller's job).
pub fn apply(req: &ApplyRequest<'_>) -> Result<Value, ApiError> {
    let empty = Value::Object(Map::new());
    let live = req.live.unwrap_or(&empty);
    let cfg_t = tracked(req.applied, req.has_status, req.subresource);
    let applied_set = FieldSet::of(&cfg_t, req.schema);
    let live_t = tracked(live, req.has_status, req.subresource);

    let mut entries = entries_of(live);
    let is_me = |e: &Entry| {
        e.manager == req.manager && e.operation == "Apply" && e.subresource == req.subresource
    };
    // The fields this apply changes matter only for what other entries own (conflicts, and
    // what a forced apply takes over); a manager alone on its object skips the diff.
    let changed = if entries.iter().any(|e| !is_me(e)) {
        let merged_t = merge(Some(&live_t), &cfg_t, req.schema, "");
        changed_paths(&live_t, &merged_t, req.schema)
    } else {
        FieldSet::default()
    };
    let mut conflicts: Vec<(String, String, Vec<String>)> = Vec::new();
    let mut conflicting = FieldSet::default();
    for e in entries
        .iter()
        .filter(|e| !is_me(e) && e.manager != req.manager)
    {
        let c = e.set.intersect(&changed);
        conflicting = conflicting.union(&c);
        if !c.is_empty() {
            conflicts.push((
                e.manager.clone(),
                e.api_version.clone(),
                c.0.iter().map(|p| path_string(p)).collect(),
            ));
        }
    }
    let mut force = req.force;
    // As the real server does for `kubectl apply --server-side` after client-side applies:
    // conflicts on fields the last-applied annotation set, still at those values, are taken
    // over without `--force-conflicts`.
    if !conflicts.is_empty()
        && !force
        && req.manager == KUBECTL
        && let Some(allowed) = last_applied_fields(live, req)
        && conflicting.minus(&allowed).is_empty()
    {
        force = true;
    }
    if !conflicts.is_empty() && !force {
        return Err(conflict_error(req, &conflicts));
    }
    if force {
        for e in entries.iter_mut().filter(|e| !is_me(e)) {
            e.remove_fields(&changed);
        }
    }

    // Build the new full object: the configuration merged into the live object, limited to the
    // part this endpoint may change.
    let mut cfg_eff = req.applied.clone();
    if let Some(root) = cfg_eff.as_object_mut() {
        if let Some(Value::Object(m)) = root.get_mut("metadata") {
            for k in [
                "managedFields",
                "resourceVersion",
                "uid",
                "creationTimestamp",
                "generation",
            ] {
                m.remove(k);
            }
        }
        if req.subresource == "status" {
            root.retain(|k, _| k == "status");
        } else if req.has_status {
            root.remove("status");
        }
    }
    let mut new = merge(Some(live), &cfg_eff, req.schema, "");
    if req.subresource.is_empty() && req.live.is_none() {
        // Create: a missing `metadata` in the configuration still needs one on the object.
        crate::util::meta_mut(&mut new);
    }

    // Fields this manager applied before and no longer applies are removed unless someone else
    // owns them (or something below them).
    let prev = entries
        .iter()
        .find(|e| is_me(e))
        .map(|e| e.set.clone())
        .unwrap_or_default();
    let dropped = prev.minus(&applied_set);
    let mut removed = FieldSet::default();
    // Parents first: once an item is gone its children need no removal (and could no longer
    // be found by key).
    for p in dropped.0.iter() {
        let others_own = entries
            .iter()
            .any(|e| !is_me(e) && e.set.has_at_or_below(p));
        if !others_own {
            // The tracked view has the object's layout, so its paths address the object.
            remove_at(&mut new, p);
            removed.0.insert(p.clone());
            // A map emptied by this removal goes too, as structured-merge-diff stores it as null
            // (kubernetes-sigs/structured-merge-diff#184, #331); top-level fields stay.
            prune_emptied_parents(&mut new, p);
        }
    }

    let now = now_rfc3339();
    match entries.iter_mut().find(|e| is_me(e)) {
        Some(e) => {
            e.set_fields(applied_set);
            e.touch(req.api_version);
        }
        None => entries.push(Entry {
            manager: req.manager.to_string(),
            operation: "Apply".into(),
            api_version: req.api_version.to_string(),
            time: now,
            subresource: req.subresource.to_string(),
            set: applied_set,
            raw: None,
        }),
    }
    if !removed.is_empty() {
        for e in entries.iter_mut().filter(|e| e.operation != "Apply") {
            e.remove_fields(&removed);
        }
    }
    set_entries(&mut new, entries);
    if req.manager == KUBECTL {
        update_last_applied(&mut new, req.applied);
    }
    Ok(new)
}

/// The field manager `kubectl apply --server-side` uses.
const KUBECTL: &str = "kubectl";

/// Client-side apply's annotation.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

fn last_applied_of(obj: &Value) -> Option<&str> {
    obj.get("metadata")?
        .get("annotations")?
        .get(LAST_APPLIED)?
        .as_str()
}

/// Fields set by the last-applied annotation whose live values still equal it.
fn last_applied_fields(live: &Value, req: &ApplyRequest<'_>) -> Option<FieldSet> {
    let last: Value = serde_json::from_str(last_applied_of(live)?).ok()?;
    let last_t = tracked(&last, req.has_status, req.subresource);
    let live_t = tracked(live, req.has_status, req.subresource);
    let set = FieldSet::of(&last_t, req.schema);
    Some(FieldSet(
        set.0
            .into_iter()
            .filter(|p| crate::fieldset::get_at(&last_t, p) == crate::fieldset::get_at(&live_t, p))
            .collect(),
    ))
}

/// Keeps the last-applied annotation in step with server-side applies by kubectl, so a later
/// client-side apply still works (the real server's last-applied updater).
fn update_last_applied(new: &mut Value, applied: &Value) {
    if last_applied_of(new).is_none() {
        return;
    }
    let mut cfg = applied.clone();
    if let Some(ann) = cfg
        .get_mut("metadata")
        .and_then(|m| m.get_mut("annotations"))
        .and_then(Value::as_object_mut)
    {
        ann.remove(LAST_APPLIED);
        if ann.is_empty()
            && let Some(m) = cfg.get_mut("metadata").and_then(Value::as_object_mut)
        {
            m.remove("annotations");
        }
    }
    let text = serde_json::to_string(&cfg).unwrap_or_default();
    if let Some(ann) = new
        .get_mut("metadata")
        .and_then(|m| m.get_mut("annotations"))
        .and_then(Value::as_object_mut)
    {
        ann.insert(LAST_APPLIED.into(), Value::String(text));
    }
}

fn conflict_error(req: &ApplyRequest<'_>, conflicts: &[(String, String, Vec<String>)]) -> ApiError {
    let total: usize = conflicts.iter().map(|c| c.2.len()).sum();
    let mut causes = Vec::new();
    let mut parts = Vec::new();
    for (mgr, av, fields) in conflicts {
        let who = format!("conflict with \"{mgr}\" using {av}");
        for f in fields {
            causes.push(Cause {
                reason: "FieldManagerConflict".into(),
                message: who.clone(),
                field: f.clone(),
            });
        }
        if fields.len() == 1 && total == 1 {
            parts.push(format!("{who}: {}", fields[0]));
        } else {
            let list = fields
                .iter()
                .map(|f| format!("- {f}"))
                .collect::<Vec<_>>()
                .join("\n");
            parts.push(format!("conflicts with \"{mgr}\" using {av}:\n{list}"));
        }
    }
    let plural = if total == 1 { "conflict" } else { "conflicts" };
    let mut e = ApiError::new(
        409,
        "Conflict",
        format!("Apply failed with {total} {plural}: {}", parts.join("\n")),
    )
    .with_details(req.group, req.plural, req.name);
    e.details.causes = causes;
    e
}

/// Removes the ancestors of `removed` (below the top level) that are now empty maps.
fn prune_emptied_parents(object: &mut Value, removed: &[crate::fieldset::Pe]) {
    for depth in (2..removed.len()).rev() {
        let parent = &removed[..depth];
        let empty = crate::fieldset::get_at(object, parent)
            .is_some_and(|v| v.as_object().is_some_and(serde_json::Map::is_empty));
        if !empty || !matches!(parent.last(), Some(crate::fieldset::Pe::Field(_))) {
            return;
        }
        remove_at(object, parent);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req<'a>(
        live: Option<&'a Value>,
        applied: &'a Value,
        manager: &'a str,
        force: bool,
    ) -> ApplyRequest<'a> {
        ApplyRequest {
            live,
            applied,
            manager,
            force,
            api_version: "v1",
            subresource: "",
            has_status: false,
            schema: Node(None),
            group: "",
            plural: "configmaps",
            name: "c",
        }
    }

    #[test]
    fn apply_conflict_force_and_removal() {
        let a1 = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"x": "1", "y": "1"}});
        let o1 = apply(&req(None, &a1, "a", false)).unwrap();
        assert_eq!(o1["data"], json!({"x": "1", "y": "1"}));
        // Same value from another manager: shared, no conflict.
        let b1 = json!({"metadata": {"name": "c"}, "data": {"x": "1"}});
        let o2 = apply(&req(Some(&o1), &b1, "b", false)).unwrap();
        // Different value: conflict naming the manager and the field.
        let b2 = json!({"metadata": {"name": "c"}, "data": {"y": "2"}});
        let err = apply(&req(Some(&o2), &b2, "b", false)).unwrap_err();
        assert_eq!(err.code, 409);
        assert_eq!(
            err.message,
            "Apply failed with 1 conflict: conflict with \"a\" using v1: .data.y"
        );
        assert_eq!(err.details.causes[0].reason, "FieldManagerConflict");
        let b2 = json!({"metadata": {"name": "c"}, "data": {"x": "1", "y": "2"}});
        let o3 = apply(&req(Some(&o2), &b2, "b", true)).unwrap();
        assert_eq!(o3["data"], json!({"x": "1", "y": "2"}));
        // a stops applying x and y: b owns both (x shared, y taken by force), so both stay.
        let a2 = json!({"metadata": {"name": "c"}, "data": {}});
        let o4 = apply(&req(Some(&o3), &a2, "a", false)).unwrap();
        assert_eq!(o4["data"], json!({"x": "1", "y": "2"}));
        // b stops applying everything: x and y go.
        let b3 = json!({"metadata": {"name": "c"}});
        let o5 = apply(&req(Some(&o4), &b3, "b", false)).unwrap();
        assert_eq!(o5["data"], json!({}));
    }

    #[test]
    fn update_takes_ownership() {
        let mut o = json!({"metadata": {"name": "c"}, "data": {"x": "1"}});
        record_update(None, &mut o, "kubectl-create", "v1", "", Node(None), false);
        let mut n = o.clone();
        n["data"]["x"] = json!("2");
        n["data"]["z"] = json!("3");
        record_update(Some(&o), &mut n, "editor", "v1", "", Node(None), false);
        let e = entries_of(&n);
        assert_eq!(e.len(), 1, "{n}");
        assert_eq!(e[0].manager, "editor");
    }
}
