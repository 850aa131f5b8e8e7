//! Snapshots of the whole store to a directory, so a restarted sandbox keeps its objects,
//! its resourceVersion counter and its CRD registrations.

use std::path::Path;

use std::sync::Arc;

use serde_json::{Value, json};

use crate::registry::GroupResource;
use crate::store::State;

const FILE: &str = "snapshot.json";

/// The store's objects at one resourceVersion, captured cheaply (shared object handles) so
/// serialization can happen outside the store lock.
pub struct Capture {
    rv: u64,
    resources: Vec<(GroupResource, Vec<Arc<Value>>)>,
}

/// Captures the store for a snapshot.
pub fn capture(st: &State) -> Capture {
    Capture {
        rv: st.rv,
        resources: st
            .objects
            .iter()
            .filter(|(_, objs)| !objs.is_empty())
            .map(|(gr, objs)| (gr.clone(), objs.values().cloned().collect()))
            .collect(),
    }
}

#[derive(serde::Serialize)]
struct Doc<'a> {
    #[serde(rename = "resourceVersion")]
    rv: u64,
    resources: Vec<Res<'a>>,
}

#[derive(serde::Serialize)]
struct Res<'a> {
    group: &'a str,
    resource: &'a str,
    objects: Vec<&'a Value>,
}

/// Writes a capture to `dir/snapshot.json` (atomically, through a temporary file).
pub fn write(c: &Capture, dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let doc = Doc {
        rv: c.rv,
        resources: c
            .resources
            .iter()
            .map(|((g, r), objs)| Res {
                group: g,
                resource: r,
                objects: objs.iter().map(|o| o.as_ref()).collect(),
            })
            .collect(),
    };
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
    let mut doc: Value = serde_json::from_slice(&std::fs::read(&path)?)?;
    // Objects move from the document into the store: a snapshot of many objects is not held
    // twice.
    let resources = match doc.get_mut("resources").map(Value::take) {
        Some(Value::Array(resources)) => resources,
        _ => Vec::new(),
    };
    let is_crd = |r: &Value| r.get("resource") == Some(&json!("customresourcedefinitions"));
    // CRDs first, so their resources exist before their objects are loaded.
    let (crds, others): (Vec<Value>, Vec<Value>) = resources.into_iter().partition(is_crd);
    for mut r in crds.into_iter().chain(others) {
        let crd = is_crd(&r);
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
        let objects = match r.get_mut("objects").map(Value::take) {
            Some(Value::Array(objects)) => objects,
            _ => Vec::new(),
        };
        for obj in objects {
            if crd {
                crate::crd::register(st, &obj);
            }
            st.load_object(&gr, obj);
        }
    }
    let rv = doc
        .get("resourceVersion")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    st.restore_rv(rv);
    Ok(true)
}
