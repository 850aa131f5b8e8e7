//! Snapshots of the whole store to a directory, so a restarted sandbox keeps its objects,
//! its resourceVersion counter and its CRD registrations.

use std::path::Path;

use serde_json::{Value, json};

use crate::store::State;

const FILE: &str = "snapshot.json";

/// Writes the store to `dir/snapshot.json` (atomically, through a temporary file).
pub fn save(st: &State, dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut resources = Vec::new();
    for ((group, plural), objs) in &st.objects {
        if objs.is_empty() {
            continue;
        }
        let items: Vec<&Value> = objs.values().map(|o| o.as_ref()).collect();
        resources.push(json!({"group": group, "resource": plural, "objects": items}));
    }
    let doc = json!({"resourceVersion": st.rv, "resources": resources});
    let tmp = dir.join(format!("{FILE}.tmp"));
    std::fs::write(&tmp, serde_json::to_vec(&doc)?)?;
    std::fs::rename(&tmp, dir.join(FILE))
}

/// Loads `dir/snapshot.json` into an empty store; returns whether a snapshot was found.
pub fn load(st: &mut State, dir: &Path) -> std::io::Result<bool> {
    let path = dir.join(FILE);
    if !path.exists() {
        return Ok(false);
    }
    let doc: Value = serde_json::from_slice(&std::fs::read(&path)?)?;
    let resources = doc
        .get("resources")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    // CRDs first, so their resources exist before their objects are loaded.
    let is_crd = |r: &Value| r.get("resource") == Some(&json!("customresourcedefinitions"));
    let mut ordered: Vec<&Value> = resources.iter().filter(|r| is_crd(r)).collect();
    ordered.extend(resources.iter().filter(|r| !is_crd(r)));
    for r in ordered {
        let group = r
            .get("group")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let plural = r
            .get("resource")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let gr = (group, plural);
        for obj in r
            .get("objects")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            st.load_object(&gr, obj.clone());
            if is_crd(r) {
                crate::crd::register(st, obj);
            }
        }
    }
    let rv = doc
        .get("resourceVersion")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    st.restore_rv(rv);
    Ok(true)
}
