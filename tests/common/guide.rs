//! The YAML of the guides in docs/: every document of their ```yaml blocks, applied to the
//! sandbox as `kubectl apply --server-side` does.

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{Scope, pinned_kind};
use serde_json::Value;

use super::Harness;

/// The YAML documents of the guide's ```yaml blocks, in order.
pub fn documents(text: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut block: Option<String> = None;
    for line in text.lines() {
        match (&mut block, line.trim_end()) {
            (None, "```yaml") => block = Some(String::new()),
            (Some(body), "```") => {
                for doc in serde_yaml::Deserializer::from_str(body) {
                    let value = <Value as serde::Deserialize>::deserialize(doc).expect("YAML");
                    if !value.is_null() {
                        out.push(value);
                    }
                }
                block = None;
            }
            (Some(body), line) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, _) => {}
        }
    }
    out
}

pub async fn apply(h: &Harness, object: &Value) {
    let (group, version) = object["apiVersion"]
        .as_str()
        .and_then(|v| v.rsplit_once('/').or(Some(("", v))))
        .expect("apiVersion");
    let kind = object["kind"].as_str().expect("kind");
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (resource, caps) = pinned_kind(&h.client, &gvk)
        .await
        .unwrap_or_else(|err| panic!("{kind} is served: {err}"));
    let name = object["metadata"]["name"].as_str().expect("name");
    let api: Api<DynamicObject> = match caps.scope {
        Scope::Namespaced => Api::namespaced_with(
            h.client.clone(),
            object["metadata"]["namespace"].as_str().expect("namespace"),
            &resource,
        ),
        Scope::Cluster => Api::all_with(h.client.clone(), &resource),
    };
    api.patch(name, &PatchParams::apply("kubectl"), &Patch::Apply(object))
        .await
        .unwrap_or_else(|err| panic!("apply {kind} {name}: {err}"));
}
