//! CustomResourceDefinitions: validation, status, and (un)registration of the resources they
//! define.

use serde_json::{Value, json};

use crate::error::{ApiError, Cause};
use crate::registry::{PrinterColumn, ResourceDef, VersionDef};
use crate::schema::validate_structural;
use crate::store::State;
use crate::util::{name_of, now_rfc3339};

const GROUP: &str = "apiextensions.k8s.io";
const KIND: &str = "CustomResourceDefinition";

fn cause(field: &str, message: String) -> Cause {
    Cause {
        reason: "FieldValueInvalid".into(),
        message,
        field: field.into(),
    }
}

/// Checks a CRD the way a real server does in the places that matter to tools: names, one
/// storage version, and structural schemas.
pub fn validate(st: &State, crd: &Value, old: Option<&Value>) -> Result<(), ApiError> {
    let name = name_of(crd).to_string();
    let mut causes = Vec::new();
    let spec = crd.get("spec").cloned().unwrap_or(Value::Null);
    let s = |p: &[&str]| {
        crate::util::get_path(&spec, p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let group = s(&["group"]);
    let plural = s(&["names", "plural"]);
    let kind = s(&["names", "kind"]);
    if group.is_empty() {
        causes.push(cause("spec.group", "Required value".into()));
    }
    if plural.is_empty() {
        causes.push(cause("spec.names.plural", "Required value".into()));
    }
    if kind.is_empty() {
        causes.push(cause("spec.names.kind", "Required value".into()));
    }
    if !plural.is_empty() && name != format!("{plural}.{group}") {
        causes.push(cause(
            "metadata.name",
            format!("Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"),
        ));
    }
    let scope = s(&["scope"]);
    if scope != "Namespaced" && scope != "Cluster" {
        causes.push(cause(
            "spec.scope",
            format!(
                "Unsupported value: \"{scope}\": supported values: \"Cluster\", \"Namespaced\""
            ),
        ));
    }
    let versions = spec
        .get("versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if versions.is_empty() {
        causes.push(cause(
            "spec.versions",
            "Invalid value: must have at least one version".into(),
        ));
    }
    let storage = versions
        .iter()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .count();
    if !versions.is_empty() && storage != 1 {
        causes.push(cause(
            "spec.versions",
            format!("Invalid value: must have exactly one version marked as storage version, found {storage}"),
        ));
    }
    for (i, v) in versions.iter().enumerate() {
        let field = format!("spec.versions[{i}].schema.openAPIV3Schema");
        match v.get("schema").and_then(|s| s.get("openAPIV3Schema")) {
            Some(schema) => causes.extend(validate_structural(schema, &field)),
            None => causes.push(Cause {
                reason: "FieldValueRequired".into(),
                message: "Required value: schemas are required".into(),
                field,
            }),
        }
    }
    if old.is_none()
        && !group.is_empty()
        && !plural.is_empty()
        && st
            .registry
            .get(&group, &plural)
            .is_some_and(|d| d.crd.is_none())
    {
        causes.push(cause(
            "spec.names.plural",
            format!("Invalid value: \"{plural}\": conflicts with a built-in resource"),
        ));
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(GROUP, KIND, &name, causes))
    }
}

/// Sets the status a real server's CRD controllers converge to: names accepted, established.
pub fn set_status(crd: &mut Value) {
    let names = crd
        .get("spec")
        .and_then(|s| s.get("names"))
        .cloned()
        .unwrap_or(json!({}));
    let mut accepted = names.clone();
    if let Some(a) = accepted.as_object_mut() {
        let kind = a
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        a.entry("singular")
            .or_insert_with(|| json!(kind.to_lowercase()));
        a.entry("listKind")
            .or_insert_with(|| json!(format!("{kind}List")));
    }
    let storage: Vec<Value> = crd
        .get("spec")
        .and_then(|s| s.get("versions"))
        .and_then(Value::as_array)
        .map(|vs| {
            vs.iter()
                .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
                .filter_map(|v| v.get("name").cloned())
                .collect()
        })
        .unwrap_or_default();
    let now = now_rfc3339();
    let old_time = |t: &str| {
        crd.get("status")
            .and_then(|s| s.get("conditions"))
            .and_then(Value::as_array)
            .and_then(|cs| cs.iter().find(|c| c.get("type") == Some(&json!(t))))
            .and_then(|c| c.get("lastTransitionTime").cloned())
            .unwrap_or(json!(now))
    };
    let mut stored_versions: Vec<Value> = crd
        .get("status")
        .and_then(|s| s.get("storedVersions"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for v in storage {
        if !stored_versions.contains(&v) {
            stored_versions.push(v);
        }
    }
    crd["status"] = json!({
        "acceptedNames": accepted,
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
             "message": "no conflicts found", "lastTransitionTime": old_time("NamesAccepted")},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
             "message": "the initial names have been accepted", "lastTransitionTime": old_time("Established")}
        ],
        "storedVersions": stored_versions
    });
}

/// The resource a CRD defines.
pub fn def_from_crd(crd: &Value) -> Option<ResourceDef> {
    let spec = crd.get("spec")?;
    let names = spec.get("names")?;
    let st = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let list = |v: &Value, k: &str| -> Vec<String> {
        v.get(k)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let kind = st(names, "kind");
    let mut versions: Vec<(bool, VersionDef)> = Vec::new();
    let mut has_status = false;
    for v in spec.get("versions")?.as_array()? {
        if v.get("served").and_then(Value::as_bool) == Some(false) {
            continue;
        }
        if v.get("subresources")
            .and_then(|s| s.get("status"))
            .is_some()
        {
            has_status = true;
        }
        let columns = v
            .get("additionalPrinterColumns")
            .and_then(Value::as_array)
            .map(|cs| {
                cs.iter()
                    .map(|c| PrinterColumn {
                        name: st(c, "name"),
                        type_: st(c, "type"),
                        format: st(c, "format"),
                        description: st(c, "description"),
                        priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                        json_path: st(c, "jsonPath"),
                    })
                    .collect()
            })
            .unwrap_or_default();
        versions.push((
            v.get("storage").and_then(Value::as_bool) == Some(true),
            VersionDef {
                name: st(v, "name"),
                schema: v
                    .get("schema")
                    .and_then(|s| s.get("openAPIV3Schema"))
                    .cloned(),
                columns,
            },
        ));
    }
    versions.sort_by_key(|(storage, _)| !*storage);
    if versions.is_empty() {
        return None;
    }
    let singular = match st(names, "singular") {
        s if s.is_empty() => kind.to_lowercase(),
        s => s,
    };
    Some(ResourceDef {
        group: st(spec, "group"),
        versions: versions.into_iter().map(|(_, v)| v).collect(),
        kind,
        plural: st(names, "plural"),
        singular,
        namespaced: st(spec, "scope") == "Namespaced",
        short_names: list(names, "shortNames"),
        categories: list(names, "categories"),
        has_status,
        crd: Some(name_of(crd).to_string()),
    })
}

/// Serves the resource a stored CRD defines (after create or update).
pub fn register(st: &mut State, crd: &Value) {
    if let Some(def) = def_from_crd(crd) {
        st.register(def);
    }
}

/// Stops serving a deleted CRD's resource and deletes its objects (with DELETED events).
pub fn unregister(st: &mut State, crd: &Value) {
    let Some(def) = def_from_crd(crd) else { return };
    let gr = (def.group.clone(), def.plural.clone());
    let keys: Vec<(String, String)> = st
        .bucket(&gr)
        .map(|b| b.keys().cloned().collect())
        .unwrap_or_default();
    for (ns, name) in keys {
        st.remove(&gr, &ns, &name);
    }
    st.registry.remove(&gr.0, &gr.1);
    st.objects.remove(&gr);
}
