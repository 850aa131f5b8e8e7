//! GeneratePatches for control-plane templates: make every control-plane machine pick up the
//! bootstrap Secret of its Cluster.
//!
//! - `KubeadmControlPlaneTemplate` (`v1beta1`, `v1beta2`): a `files` entry with the agent objects
//!   (`contentFrom.secret`) under `spec.template.spec.kubeadmConfigSpec`, and a
//!   `postKubeadmCommands` entry creating them with the admin kubeconfig (kubernetes-sigs/
//!   cluster-api v1.10–v1.11 `KubeadmConfigSpec.files`, `postKubeadmCommands`).
//! - `RKE2ControlPlaneTemplate` (`v1beta1`, `v1beta2`): the same file and a `postRKE2Commands`
//!   entry under `spec.template.spec` (rancher/cluster-api-provider-rke2 v0.25.0: both template
//!   versions inline `RKE2ConfigSpec` with `files` and `postRKE2Commands`).
//!
//! Patches are computed by mutating a copy of the template and diffing it into an RFC 6902 patch
//! whose operations are `add`s of whole values (objects that are missing, lists that changed):
//! `add` on an existing member replaces it, so the patch is idempotent — applied twice, or to a
//! template that already has the entries, it changes nothing further — and a list that is absent
//! is added whole. Entries already present (by path, by command) are not added again, and the
//! same template always gives the same patch.
//!
//! The patches name the Cluster's bootstrap Secret ([`crate::names::bootstrap_secret_name`]),
//! never its content, so they do not change when the token does (a changed patch rolls the
//! machines).

use serde_json::{Map, Value, json};

/// Key of the bootstrap Secret holding the agent objects.
pub const MANIFEST_KEY: &str = "fleet-agent.yaml";

/// Where control-plane machines get the agent objects (kubeadm and RKE2 alike).
pub const MANIFEST_PATH: &str = "/etc/caapf/fleet-agent.yaml";

/// The command a control-plane machine runs after its Kubernetes started: creates the agent
/// objects that do not exist yet, retrying while the API server settles (bounded: at most five
/// minutes, and it never fails the node).
///
/// `kubectl create`, not `apply`: once Fleet manages the agent (its agent bundle takes ownership
/// of these objects and may change image, tolerations or environment), a control-plane machine
/// that joins later, or a restarted one, must not put the bootstrap version back. Objects that
/// exist are left alone; the loop ends as soon as every object exists. Unlike a manifest in
/// RKE2's auto-deploy directory or a helm-controller `HelmChart`, nothing re-applies it later.
fn create_command(kubectl: &str) -> String {
    format!(
        "/bin/sh -c 'F={MANIFEST_PATH}; K=\"{kubectl}\"; for i in $(seq 1 60); do $K get -f \"$F\" >/dev/null 2>&1 && exit 0; $K create -f \"$F\" >/dev/null 2>&1; sleep 5; done; echo \"caapf: the Fleet agent bootstrap objects were not created\" >&2'"
    )
}

/// kubeadm's admin kubeconfig and the `kubectl` kubeadm nodes have on their `PATH`
/// (kubernetes-sigs/cluster-api `bootstrap/kubeadm`: `postKubeadmCommands` run after `kubeadm
/// init`/`join`, with `/etc/kubernetes/admin.conf` written by `kubeadm init` on control-plane
/// nodes).
pub fn kubeadm_create_command() -> String {
    create_command("kubectl --kubeconfig=/etc/kubernetes/admin.conf")
}

/// RKE2 extracts `kubectl` to `/var/lib/rancher/rke2/bin` and writes the admin kubeconfig to
/// `/etc/rancher/rke2/rke2.yaml` on servers (docs.rke2.io, "Cluster Access", "CLI Tools");
/// CAPRKE2 runs `postRKE2Commands` after starting `rke2-server` (rancher/cluster-api-provider-rke2
/// v0.25.0 `bootstrap/api/v1beta2/rke2config_types.go`).
pub fn rke2_create_command() -> String {
    create_command("/var/lib/rancher/rke2/bin/kubectl --kubeconfig=/etc/rancher/rke2/rke2.yaml")
}

/// API group of both control-plane templates.
pub const CONTROL_PLANE_GROUP: &str = "controlplane.cluster.x-k8s.io";

/// API versions of the templates we know how to patch.
pub const SUPPORTED_VERSIONS: [&str; 2] = ["v1beta1", "v1beta2"];

/// A template this extension patches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Template {
    KubeadmControlPlane,
    Rke2ControlPlane,
}

/// Which template `object` is: `Ok(None)` for templates that need nothing (infrastructure,
/// worker bootstrap, other control planes); an error for a known kind in an unknown version
/// (so a future API version fails loudly instead of silently booting without the agent).
pub fn classify_template(object: &Value) -> Result<Option<Template>, String> {
    let kind = object["kind"].as_str().unwrap_or_default();
    let template = match kind {
        "KubeadmControlPlaneTemplate" => Template::KubeadmControlPlane,
        "RKE2ControlPlaneTemplate" => Template::Rke2ControlPlane,
        _ => return Ok(None),
    };
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    match api_version.split_once('/') {
        Some((CONTROL_PLANE_GROUP, version)) if SUPPORTED_VERSIONS.contains(&version) => {
            Ok(Some(template))
        }
        Some((CONTROL_PLANE_GROUP, _)) => Err(format!(
            "{kind} {api_version} is not supported (supported versions: {})",
            SUPPORTED_VERSIONS.join(", ")
        )),
        // Same kind name in another group: not ours.
        _ => Ok(None),
    }
}

/// The template with the bootstrap added (unchanged if it is already there).
pub fn patched(object: &Value, template: Template, secret_name: &str) -> Value {
    let mut copy = object.clone();
    let (path, commands_key, command): (&[&str], _, _) = match template {
        Template::KubeadmControlPlane => (
            &["spec", "template", "spec", "kubeadmConfigSpec"],
            "postKubeadmCommands",
            kubeadm_create_command(),
        ),
        Template::Rke2ControlPlane => (
            &["spec", "template", "spec"],
            "postRKE2Commands",
            rke2_create_command(),
        ),
    };
    let config = object_at(&mut copy, path);
    push_file(
        config,
        json!({
            "path": MANIFEST_PATH,
            "owner": "root:root",
            "permissions": "0600",
            "contentFrom": {"secret": {"name": secret_name, "key": MANIFEST_KEY}},
        }),
    );
    push_unique(config, commands_key, json!(command));
    copy
}

/// The RFC 6902 patch from `object` to [`patched`] (empty when nothing is missing). An error only
/// if a key cannot be written as a JSON pointer (never silently an `add` at the root, which
/// would replace the whole template).
pub fn bootstrap_patch(
    object: &Value,
    template: Template,
    secret_name: &str,
) -> Result<json_patch::Patch, String> {
    let mut operations = Vec::new();
    additions(
        object,
        &patched(object, template, secret_name),
        "",
        &mut operations,
    )?;
    Ok(json_patch::Patch(operations))
}

/// `add` operations turning `from` into `to`, where `to` only adds to `from`: objects are
/// descended into, any other changed or new value is added whole.
fn additions(
    from: &Value,
    to: &Value,
    pointer: &str,
    out: &mut Vec<json_patch::PatchOperation>,
) -> Result<(), String> {
    match (from, to) {
        (Value::Object(from), Value::Object(to)) => {
            for (key, value) in to {
                let child = format!("{pointer}/{}", key.replace('~', "~0").replace('/', "~1"));
                match from.get(key) {
                    Some(existing) => additions(existing, value, &child, out)?,
                    None => out.push(add(&child, value)?),
                }
            }
        }
        (from, to) if from != to => out.push(add(pointer, to)?),
        _ => {}
    }
    Ok(())
}

fn add(pointer: &str, value: &Value) -> Result<json_patch::PatchOperation, String> {
    let path = pointer
        .parse()
        .map_err(|err| format!("{pointer:?} is not a JSON pointer: {err}"))?;
    Ok(json_patch::PatchOperation::Add(json_patch::AddOperation {
        path,
        value: value.clone(),
    }))
}

/// The object at `path`, creating (or replacing non-objects by) empty objects on the way.
fn object_at<'a>(value: &'a mut Value, path: &[&str]) -> &'a mut Map<String, Value> {
    let mut current = value;
    for key in path {
        if !current.is_object() {
            *current = Value::Object(Map::new());
        }
        let Value::Object(map) = current else {
            unreachable!("made an object above")
        };
        current = map
            .entry((*key).to_string())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    if !current.is_object() {
        *current = Value::Object(Map::new());
    }
    match current {
        Value::Object(map) => map,
        _ => unreachable!("made an object above"),
    }
}

/// Appends a file unless one with the same `path` exists.
fn push_file(spec: &mut Map<String, Value>, file: Value) {
    let list = list_at(spec, "files");
    if !list.iter().any(|existing| existing["path"] == file["path"]) {
        list.push(file);
    }
}

/// Appends `item` unless it is already in the list.
fn push_unique(spec: &mut Map<String, Value>, key: &str, item: Value) {
    let list = list_at(spec, key);
    if !list.contains(&item) {
        list.push(item);
    }
}

fn list_at<'a>(spec: &'a mut Map<String, Value>, key: &str) -> &'a mut Vec<Value> {
    let slot = spec
        .entry(key.to_string())
        .or_insert_with(|| Value::Array(Vec::new()));
    if !slot.is_array() {
        *slot = Value::Array(Vec::new());
    }
    match slot {
        Value::Array(list) => list,
        _ => unreachable!("made an array above"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_commands_use_each_distribution_s_kubectl_and_admin_kubeconfig() {
        let kubeadm = kubeadm_create_command();
        assert!(kubeadm.contains("K=\"kubectl --kubeconfig=/etc/kubernetes/admin.conf\""));
        let rke2 = rke2_create_command();
        assert!(rke2.contains(
            "K=\"/var/lib/rancher/rke2/bin/kubectl --kubeconfig=/etc/rancher/rke2/rke2.yaml\""
        ));
        for command in [kubeadm, rke2] {
            assert!(command.contains("F=/etc/caapf/fleet-agent.yaml"));
            assert!(command.contains("$K create -f"));
            assert!(!command.contains("apply"));
        }
    }

    #[test]
    fn classify_templates() {
        let t = |api_version: &str, kind: &str| {
            classify_template(&json!({"apiVersion": api_version, "kind": kind}))
        };
        assert_eq!(
            t(
                "controlplane.cluster.x-k8s.io/v1beta1",
                "KubeadmControlPlaneTemplate"
            ),
            Ok(Some(Template::KubeadmControlPlane))
        );
        assert_eq!(
            t(
                "controlplane.cluster.x-k8s.io/v1beta2",
                "RKE2ControlPlaneTemplate"
            ),
            Ok(Some(Template::Rke2ControlPlane))
        );
        assert_eq!(
            t(
                "bootstrap.cluster.x-k8s.io/v1beta2",
                "KubeadmConfigTemplate"
            ),
            Ok(None)
        );
        assert_eq!(
            t(
                "infrastructure.cluster.x-k8s.io/v1beta1",
                "DockerClusterTemplate"
            ),
            Ok(None)
        );
        assert_eq!(t("example.com/v1", "KubeadmControlPlaneTemplate"), Ok(None));
        let err = t(
            "controlplane.cluster.x-k8s.io/v1beta3",
            "KubeadmControlPlaneTemplate",
        )
        .expect_err("unknown version");
        assert!(
            err.contains("v1beta3") && err.contains("v1beta1, v1beta2"),
            "{err}"
        );
    }

    #[test]
    fn missing_lists_are_added_whole() {
        let template = json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlaneTemplate",
            "spec": {"template": {"spec": {"kubeadmConfigSpec": {}}}}});
        let patch = serde_json::to_value(
            bootstrap_patch(
                &template,
                Template::KubeadmControlPlane,
                "c1-fleet-agent-bootstrap",
            )
            .expect("patch"),
        )
        .expect("patch");
        let paths: Vec<&str> = patch
            .as_array()
            .expect("array")
            .iter()
            .filter_map(|op| op["path"].as_str())
            .collect();
        assert_eq!(
            paths,
            [
                "/spec/template/spec/kubeadmConfigSpec/files",
                "/spec/template/spec/kubeadmConfigSpec/postKubeadmCommands"
            ]
        );
    }
}
