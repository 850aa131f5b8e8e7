//! GeneratePatches against real-shaped kubeadm and RKE2 templates (both API versions): the
//! returned RFC 6902 patches, applied with the `json-patch` crate as CAPI applies them, produce the
//! expected templates; they are idempotent, deterministic and one per request item.

use std::path::Path;

use base64::Engine;
use caapf::bootstrap::{
    HELM_CHART_KEY, KUBEADM_APPLY_COMMAND, KUBEADM_MANIFEST_PATH, MANIFEST_KEY, RKE2_MANIFEST_PATH,
};
use caapf::hooks::handlers::topology::generate_patches;
use caapf::hooks::types::{
    GeneratePatchesRequest, GeneratePatchesRequestItem, HolderReference, PatchType, Response,
    ResponseBody, ResponseStatus, Variable,
};
use serde_json::{Value, json};

fn template(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/templates")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn holder(kind: &str, field_path: &str) -> HolderReference {
    HolderReference {
        api_version: "cluster.x-k8s.io/v1beta2".into(),
        kind: kind.into(),
        namespace: "default".into(),
        name: "c1".into(),
        field_path: field_path.into(),
    }
}

fn control_plane_holder() -> HolderReference {
    holder("Cluster", "spec.controlPlaneRef")
}

fn request(
    items: Vec<(&str, HolderReference, Value)>,
    fleet_agent: Option<Value>,
) -> GeneratePatchesRequest {
    let mut variables = vec![Variable {
        name: "builtin".into(),
        value: json!({"cluster": {"name": "c1", "namespace": "default", "uid": "6f1c",
            "topology": {"version": "v1.33.1", "classRef": {"name": "quick-start", "namespace": "default"}, "class": "quick-start"}}}),
    }];
    if let Some(value) = fleet_agent {
        variables.push(Variable {
            name: "fleetAgent".into(),
            value,
        });
    }
    GeneratePatchesRequest {
        settings: Default::default(),
        variables,
        items: items
            .into_iter()
            .map(|(uid, holder_reference, object)| GeneratePatchesRequestItem {
                uid: uid.into(),
                holder_reference,
                object,
                variables: vec![Variable {
                    name: "builtin".into(),
                    value: json!({"controlPlane": {"version": "v1.33.1", "name": "c1-x7k2p", "replicas": 3}}),
                }],
            })
            .collect(),
    }
}

/// The (uid, patch) pairs of a successful response.
fn patches(response: &Response) -> Vec<(String, json_patch::Patch)> {
    assert_eq!(response.status, ResponseStatus::Success, "{response:?}");
    let ResponseBody::Patches { items } = &response.body else {
        panic!("not a GeneratePatches response: {response:?}");
    };
    items
        .iter()
        .map(|item| {
            assert_eq!(item.patch_type, PatchType::JsonPatch);
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(&item.patch)
                .unwrap_or_else(|e| panic!("patch is not standard padded base64: {e}"));
            let patch: json_patch::Patch = serde_json::from_slice(&bytes)
                .unwrap_or_else(|e| panic!("patch is not an RFC 6902 document: {e}"));
            (item.uid.clone(), patch)
        })
        .collect()
}

fn apply(object: &Value, patch: &json_patch::Patch) -> Value {
    let mut copy = object.clone();
    json_patch::patch(&mut copy, patch).unwrap_or_else(|e| panic!("patch does not apply: {e}"));
    copy
}

fn single_patch(object: &Value) -> json_patch::Patch {
    let response = generate_patches(&request(
        vec![("u1", control_plane_holder(), object.clone())],
        None,
    ));
    let mut all = patches(&response);
    assert_eq!(all.len(), 1);
    all.remove(0).1
}

/// Removes what the patch adds, so the rest can be compared with the original.
fn without_bootstrap(mut object: Value, list_pointers: &[&str]) -> Value {
    for pointer in list_pointers {
        if let Some(Value::Array(list)) = object.pointer_mut(pointer) {
            list.retain(|entry| {
                entry["path"] != KUBEADM_MANIFEST_PATH
                    && entry["path"] != RKE2_MANIFEST_PATH
                    && entry != &json!(KUBEADM_APPLY_COMMAND)
            });
        }
    }
    object
}

/// Lists that exist only because the patch created them are dropped for the comparison.
fn drop_empty_lists(mut object: Value, original: &Value, list_pointers: &[&str]) -> Value {
    for pointer in list_pointers {
        if original.pointer(pointer).is_none()
            && let Some((parent, key)) = pointer.rsplit_once('/')
            && let Some(Value::Object(map)) = object.pointer_mut(parent)
        {
            map.remove(key);
        }
    }
    object
}

#[test]
fn kubeadm_control_plane_templates_get_the_manifest_file_and_the_create_command() {
    const FILES: &str = "/spec/template/spec/kubeadmConfigSpec/files";
    const COMMANDS: &str = "/spec/template/spec/kubeadmConfigSpec/postKubeadmCommands";
    for (fixture, files_before, commands_before) in [
        ("kubeadmcontrolplanetemplate-v1beta2.yaml", 1, 1),
        ("kubeadmcontrolplanetemplate-v1beta1.yaml", 0, 0),
    ] {
        let original = template(fixture);
        let patch = single_patch(&original);
        let patched = apply(&original, &patch);

        let files = patched
            .pointer(FILES)
            .and_then(Value::as_array)
            .expect("files");
        assert_eq!(files.len(), files_before + 1, "{fixture}");
        assert_eq!(
            files.last(),
            Some(&json!({
                "path": KUBEADM_MANIFEST_PATH,
                "owner": "root:root",
                "permissions": "0600",
                "contentFrom": {"secret": {"name": "c1-fleet-agent-bootstrap", "key": MANIFEST_KEY}},
            })),
            "{fixture}"
        );
        let commands = patched
            .pointer(COMMANDS)
            .and_then(Value::as_array)
            .expect("commands");
        assert_eq!(commands.len(), commands_before + 1, "{fixture}");
        assert_eq!(
            commands.last(),
            Some(&json!(KUBEADM_APPLY_COMMAND)),
            "{fixture}"
        );
        assert!(
            KUBEADM_APPLY_COMMAND.contains("/etc/kubernetes/admin.conf")
                && KUBEADM_APPLY_COMMAND.contains(KUBEADM_MANIFEST_PATH)
                && KUBEADM_APPLY_COMMAND.contains("create -f")
        );

        // Nothing else changed, existing entries kept in order.
        let rest = drop_empty_lists(
            without_bootstrap(patched.clone(), &[FILES, COMMANDS]),
            &original,
            &[FILES, COMMANDS],
        );
        assert_eq!(rest, original, "{fixture}");

        // Idempotent: applying the same response again changes nothing; a second call on the
        // patched template returns an empty patch.
        assert_eq!(apply(&patched, &patch), patched, "{fixture}");
        assert!(single_patch(&patched).0.is_empty(), "{fixture}");
    }
}

#[test]
fn rke2_control_plane_templates_get_the_helm_chart_in_the_manifests_directory() {
    const FILES: &str = "/spec/template/spec/files";
    for (fixture, files_before) in [
        ("rke2controlplanetemplate-v1beta2.yaml", 1),
        ("rke2controlplanetemplate-v1beta1.yaml", 0),
    ] {
        let original = template(fixture);
        let patch = single_patch(&original);
        let patched = apply(&original, &patch);
        let files = patched
            .pointer(FILES)
            .and_then(Value::as_array)
            .expect("files");
        assert_eq!(files.len(), files_before + 1, "{fixture}");
        assert_eq!(
            files.last(),
            Some(&json!({
                "path": RKE2_MANIFEST_PATH,
                "owner": "root:root",
                "permissions": "0600",
                "contentFrom": {"secret": {"name": "c1-fleet-agent-bootstrap", "key": HELM_CHART_KEY}},
            })),
            "{fixture}"
        );
        assert!(RKE2_MANIFEST_PATH.starts_with("/var/lib/rancher/rke2/server/manifests/"));
        let rest = drop_empty_lists(
            without_bootstrap(patched.clone(), &[FILES]),
            &original,
            &[FILES],
        );
        assert_eq!(rest, original, "{fixture}");
        assert_eq!(apply(&patched, &patch), patched, "{fixture}");
        assert!(single_patch(&patched).0.is_empty(), "{fixture}");
    }
}

#[test]
fn absent_lists_are_added_whole() {
    let original = template("kubeadmcontrolplanetemplate-v1beta1.yaml");
    let patch = serde_json::to_value(single_patch(&original)).expect("json");
    let ops: Vec<(&str, &str)> = patch
        .as_array()
        .expect("array")
        .iter()
        .map(|op| {
            (
                op["op"].as_str().unwrap_or_default(),
                op["path"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        ops,
        [
            ("add", "/spec/template/spec/kubeadmConfigSpec/files"),
            (
                "add",
                "/spec/template/spec/kubeadmConfigSpec/postKubeadmCommands"
            ),
        ]
    );
    // A template without kubeadmConfigSpec at all still patches.
    let bare = json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlaneTemplate",
        "metadata": {"name": "bare"}, "spec": {"template": {"spec": {}}}});
    let patched = apply(&bare, &single_patch(&bare));
    assert!(
        patched
            .pointer("/spec/template/spec/kubeadmConfigSpec/files/0/contentFrom")
            .is_some()
    );
}

#[test]
fn other_templates_get_an_empty_patch_and_every_uid_an_item() {
    let items = vec![
        (
            "infra",
            holder("Cluster", "spec.infrastructureRef"),
            template("dockerclustertemplate-v1beta2.yaml"),
        ),
        (
            "cp",
            control_plane_holder(),
            template("kubeadmcontrolplanetemplate-v1beta2.yaml"),
        ),
        (
            "workers",
            holder(
                "MachineDeployment",
                "spec.template.spec.bootstrap.configRef",
            ),
            template("kubeadmconfigtemplate-v1beta2.yaml"),
        ),
    ];
    let response = generate_patches(&request(items, None));
    let ResponseBody::Patches { items: raw } = &response.body else {
        panic!("{response:?}");
    };
    assert_eq!(raw[0].patch, "W10=", "an empty JSON patch, base64");
    let all = patches(&response);
    let uids: Vec<&str> = all.iter().map(|(uid, _)| uid.as_str()).collect();
    assert_eq!(uids, ["infra", "cp", "workers"]);
    assert!(all[0].1.0.is_empty());
    assert!(!all[1].1.0.is_empty());
    assert!(all[2].1.0.is_empty());
}

#[test]
fn fleet_agent_disabled_means_no_patch() {
    for fixture in [
        "kubeadmcontrolplanetemplate-v1beta2.yaml",
        "rke2controlplanetemplate-v1beta1.yaml",
    ] {
        let response = generate_patches(&request(
            vec![("u1", control_plane_holder(), template(fixture))],
            Some(json!({"enabled": false})),
        ));
        assert!(patches(&response)[0].1.0.is_empty(), "{fixture}");
        // Explicitly enabled, or the variable object without `enabled`: patched.
        for value in [json!({"enabled": true}), json!({})] {
            let response = generate_patches(&request(
                vec![("u1", control_plane_holder(), template(fixture))],
                Some(value),
            ));
            assert!(!patches(&response)[0].1.0.is_empty(), "{fixture}");
        }
    }
}

#[test]
fn item_variables_override_the_global_fleet_agent_variable() {
    let mut req = request(
        vec![(
            "u1",
            control_plane_holder(),
            template("kubeadmcontrolplanetemplate-v1beta2.yaml"),
        )],
        Some(json!({"enabled": true})),
    );
    req.items[0].variables.push(Variable {
        name: "fleetAgent".into(),
        value: json!({"enabled": false}),
    });
    assert!(patches(&generate_patches(&req))[0].1.0.is_empty());
}

#[test]
fn patches_do_not_depend_on_uids_or_calls() {
    let object = template("kubeadmcontrolplanetemplate-v1beta2.yaml");
    let a = generate_patches(&request(
        vec![("7091de79-aaaa", control_plane_holder(), object.clone())],
        None,
    ));
    let b = generate_patches(&request(
        vec![("0c1e5b2a-bbbb", control_plane_holder(), object)],
        None,
    ));
    let (ResponseBody::Patches { items: a }, ResponseBody::Patches { items: b }) =
        (&a.body, &b.body)
    else {
        panic!("not patch responses");
    };
    assert_eq!(a[0].patch, b[0].patch);
    assert_ne!(a[0].uid, b[0].uid);
    // No token or timestamp inline: the patch only names the Secret.
    let decoded = String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(&a[0].patch)
            .expect("base64"),
    )
    .expect("utf-8");
    assert!(decoded.contains("c1-fleet-agent-bootstrap"));
    assert!(!decoded.contains("token"));
}

#[test]
fn bad_inputs_are_failures_with_a_message() {
    let mut unknown_version = template("kubeadmcontrolplanetemplate-v1beta2.yaml");
    unknown_version["apiVersion"] = json!("controlplane.cluster.x-k8s.io/v1beta3");
    let response = generate_patches(&request(
        vec![("u1", control_plane_holder(), unknown_version)],
        None,
    ));
    assert_eq!(response.status, ResponseStatus::Failure);
    assert!(response.message.contains("v1beta3"), "{}", response.message);

    let mut no_builtin = request(
        vec![(
            "u1",
            control_plane_holder(),
            template("kubeadmcontrolplanetemplate-v1beta2.yaml"),
        )],
        None,
    );
    no_builtin.variables.clear();
    let response = generate_patches(&no_builtin);
    assert_eq!(response.status, ResponseStatus::Failure);
    assert!(response.message.contains("builtin"), "{}", response.message);
}
