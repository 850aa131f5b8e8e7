//! GeneratePatches against real-shaped kubeadm and RKE2 templates (both API versions): the
//! returned RFC 6902 patches, applied with the `json-patch` crate as CAPI applies them, produce the
//! expected templates; they are idempotent, deterministic and one per request item; and the
//! patch follows the bootstrap Secret (no Secret, no patch). The template fixtures only use fields
//! the real CRDs define (checked below against the property names of the upstream schemas).

use std::path::Path;

use base64::Engine;
use caapf::hooks::handlers::topology;
use caapf::hooks::types::{
    GeneratePatchesRequest, GeneratePatchesRequestItem, HolderReference, PatchType, Response,
    ResponseBody, ResponseStatus, Variable,
};
use caapf::model::agent_patch::{
    MANIFEST_KEY, MANIFEST_PATH, kubeadm_create_command, rke2_create_command,
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

/// GeneratePatches with the Cluster's bootstrap Secret present.
fn generate_patches(request: &GeneratePatchesRequest) -> Response {
    topology::generate_patches(request, true)
}

/// A request for Cluster `default/c1`; `fleet_agent` `None` is the value Cluster API defaults
/// from the variable's schema (`{enabled: true}`).
fn request(
    items: Vec<(&str, HolderReference, Value)>,
    fleet_agent: Option<Value>,
) -> GeneratePatchesRequest {
    let fleet_agent = Some(fleet_agent.unwrap_or_else(|| json!({"enabled": true})));
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

/// A request with one item, the control-plane template `object`.
fn control_plane_request(object: Value, fleet_agent: Option<Value>) -> GeneratePatchesRequest {
    request(vec![("u1", control_plane_holder(), object)], fleet_agent)
}

fn single_patch(object: &Value) -> json_patch::Patch {
    let response = generate_patches(&control_plane_request(object.clone(), None));
    let mut all = patches(&response);
    assert_eq!(all.len(), 1);
    all.remove(0).1
}

/// The template fixture, its patch, and the template patched.
fn patch_fixture(fixture: &str) -> (Value, json_patch::Patch, Value) {
    let original = template(fixture);
    let patch = single_patch(&original);
    let patched = apply(&original, &patch);
    (original, patch, patched)
}

/// The list at `pointer`.
fn list<'a>(object: &'a Value, pointer: &str) -> &'a Vec<Value> {
    object
        .pointer(pointer)
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("no list at {pointer}"))
}

/// The list of files at `files` has one entry more than the `before` of the original, the
/// last one the bootstrap manifest read from the Secret.
fn assert_manifest_file_added(fixture: &str, patched: &Value, files: &str, before: usize) {
    let files = list(patched, files);
    assert_eq!(files.len(), before + 1, "{fixture}");
    assert_eq!(
        files.last(),
        Some(&json!({
            "path": MANIFEST_PATH,
            "owner": "root:root",
            "permissions": "0600",
            "contentFrom": {"secret": {"name": "c1-fleet-agent-bootstrap", "key": MANIFEST_KEY}},
        })),
        "{fixture}"
    );
}

/// Nothing but the bootstrap entries of `lists` changed, existing entries kept in order; and
/// idempotent: applying the same response again changes nothing, a second call on the patched
/// template returns an empty patch.
fn assert_rest_unchanged_and_idempotent(
    fixture: &str,
    (original, patch, patched): &(Value, json_patch::Patch, Value),
    lists: &[&str],
) {
    let rest = drop_empty_lists(without_bootstrap(patched.clone(), lists), original, lists);
    assert_eq!(&rest, original, "{fixture}");
    assert_eq!(&apply(patched, patch), patched, "{fixture}");
    assert!(single_patch(patched).0.is_empty(), "{fixture}");
}

/// Removes what the patch adds, so the rest can be compared with the original.
fn without_bootstrap(mut object: Value, list_pointers: &[&str]) -> Value {
    for pointer in list_pointers {
        if let Some(Value::Array(list)) = object.pointer_mut(pointer) {
            list.retain(|entry| {
                entry["path"] != MANIFEST_PATH
                    && entry != &json!(kubeadm_create_command())
                    && entry != &json!(rke2_create_command())
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
        let fixed = patch_fixture(fixture);
        let patched = &fixed.2;
        assert_manifest_file_added(fixture, patched, FILES, files_before);
        let commands = list(patched, COMMANDS);
        assert_eq!(commands.len(), commands_before + 1, "{fixture}");
        assert_eq!(
            commands.last(),
            Some(&json!(kubeadm_create_command())),
            "{fixture}"
        );
        assert_rest_unchanged_and_idempotent(fixture, &fixed, &[FILES, COMMANDS]);
    }
}

#[test]
fn rke2_control_plane_templates_get_the_manifest_file_and_the_create_command() {
    const FILES: &str = "/spec/template/spec/files";
    const COMMANDS: &str = "/spec/template/spec/postRKE2Commands";
    for (fixture, files_before) in [
        ("rke2controlplanetemplate-v1beta2.yaml", 1),
        ("rke2controlplanetemplate-v1beta1.yaml", 0),
    ] {
        let fixed = patch_fixture(fixture);
        let patched = &fixed.2;
        assert_manifest_file_added(fixture, patched, FILES, files_before);
        // Not in RKE2's auto-deploy directory: nothing re-applies the agent objects later.
        assert!(!MANIFEST_PATH.starts_with("/var/lib/rancher/rke2/server/manifests"));
        let commands = list(patched, COMMANDS);
        assert_eq!(commands, &[json!(rke2_create_command())], "{fixture}");
        assert_rest_unchanged_and_idempotent(fixture, &fixed, &[FILES, COMMANDS]);
    }
}

#[test]
fn no_bootstrap_secret_or_no_fleet_agent_variable_means_no_patch() {
    for fixture in [
        "kubeadmcontrolplanetemplate-v1beta2.yaml",
        "rke2controlplanetemplate-v1beta2.yaml",
    ] {
        let req = control_plane_request(template(fixture), None);
        // The Secret does not exist (yet): a patch naming it would roll machines onto bootstrap
        // data that cannot be generated.
        let response = topology::generate_patches(&req, false);
        assert!(patches(&response)[0].1.0.is_empty(), "{fixture}");
        // The class does not use this extension's variables.
        let mut without = req.clone();
        without.variables.retain(|v| v.name != "fleetAgent");
        assert!(
            patches(&generate_patches(&without))[0].1.0.is_empty(),
            "{fixture}"
        );
    }
}

/// The kubeadm command is the one earlier releases wrote: upgrading the provider must not change
/// the patch of existing kubeadm Clusters (a changed patch rolls their control planes).
#[test]
fn the_kubeadm_command_is_unchanged_since_the_first_release() {
    assert_eq!(
        kubeadm_create_command(),
        "/bin/sh -c 'F=/etc/caapf/fleet-agent.yaml; K=\"kubectl --kubeconfig=/etc/kubernetes/admin.conf\"; for i in $(seq 1 60); do $K get -f \"$F\" >/dev/null 2>&1 && exit 0; $K create -f \"$F\" >/dev/null 2>&1; sleep 5; done; echo \"caapf: the Fleet agent bootstrap objects were not created\" >&2'"
    );
}

/// Property names of the upstream schemas at the paths our fixtures and patches use
/// (rancher/cluster-api-provider-rke2 v0.25.0 `controlplane/config/crd/bases/
/// controlplane.cluster.x-k8s.io_rke2controlplanetemplates.yaml`; kubernetes-sigs/cluster-api
/// (the same schema for both template versions at these paths).
#[test]
fn template_fixtures_only_use_fields_of_the_real_schemas() {
    const RKE2_SPEC_V1BETA1: &[&str] = &[
        "agentConfig",
        "files",
        "gzipUserData",
        "infrastructureRef",
        "machineTemplate",
        "manifestsConfigMapReference",
        "nodeDrainTimeout",
        "postRKE2Commands",
        "preRKE2Commands",
        "privateRegistriesConfig",
        "registrationAddress",
        "registrationMethod",
        "remediationStrategy",
        "replicas",
        "rolloutStrategy",
        "serverConfig",
        "version",
    ];
    const RKE2_SPEC_V1BETA2: &[&str] = &[
        "agentConfig",
        "files",
        "gzipUserData",
        "machineTemplate",
        "manifestsConfigMapReference",
        "postRKE2Commands",
        "preRKE2Commands",
        "privateRegistriesConfig",
        "registrationAddress",
        "registrationMethod",
        "remediationStrategy",
        "rolloutStrategy",
        "serverConfig",
    ];
    const RKE2_AGENT_CONFIG: &[&str] = &[
        "additionalUserData",
        "airGapped",
        "airGappedChecksum",
        "cisProfile",
        "containerRuntimeEndpoint",
        "dataDir",
        "enableContainerdSElinux",
        "format",
        "imageCredentialProviderConfigMap",
        "kubeProxy",
        "kubelet",
        "kubeletPath",
        "loadBalancerPort",
        "nodeAnnotations",
        "nodeLabels",
        "nodeName",
        "nodeTaints",
        "ntp",
        "podSecurityAdmissionConfigFile",
        "protectKernelDefaults",
        "resolvConf",
        "runtimeImage",
        "snapshotter",
        "systemDefaultRegistry",
    ];
    const FILE: &[&str] = &[
        "content",
        "contentFrom",
        "encoding",
        "owner",
        "path",
        "permissions",
    ];
    let keys = |object: &Value, pointer: &str| -> Vec<String> {
        object
            .pointer(pointer)
            .and_then(Value::as_object)
            .map(|map| map.keys().cloned().collect())
            .unwrap_or_default()
    };
    for (fixture, spec_fields) in [
        ("rke2controlplanetemplate-v1beta1.yaml", RKE2_SPEC_V1BETA1),
        ("rke2controlplanetemplate-v1beta2.yaml", RKE2_SPEC_V1BETA2),
    ] {
        let object = template(fixture);
        let patched = apply(&object, &single_patch(&object));
        for (pointer, allowed) in [
            ("/spec/template/spec", spec_fields),
            ("/spec/template/spec/agentConfig", RKE2_AGENT_CONFIG),
            ("/spec/template/spec/files/0", FILE),
        ] {
            for key in keys(&patched, pointer) {
                assert!(
                    allowed.contains(&key.as_str()),
                    "{fixture}: {pointer}/{key} is not a field of the real schema"
                );
            }
        }
        assert!(
            patched
                .pointer("/spec/template/spec/rolloutStrategy")
                .is_some(),
            "{fixture}: rolloutStrategy is required"
        );
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
        let response = generate_patches(&control_plane_request(
            template(fixture),
            Some(json!({"enabled": false})),
        ));
        assert!(patches(&response)[0].1.0.is_empty(), "{fixture}");
        // Explicitly enabled, or the variable object without `enabled`: patched.
        for value in [json!({"enabled": true}), json!({})] {
            let response = generate_patches(&control_plane_request(template(fixture), Some(value)));
            assert!(!patches(&response)[0].1.0.is_empty(), "{fixture}");
        }
    }
}

#[test]
fn item_variables_override_the_global_fleet_agent_variable() {
    let mut req = control_plane_request(
        template("kubeadmcontrolplanetemplate-v1beta2.yaml"),
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
    let response = generate_patches(&control_plane_request(unknown_version, None));
    assert_eq!(response.status, ResponseStatus::Failure);
    assert!(response.message.contains("v1beta3"), "{}", response.message);

    let mut no_builtin =
        control_plane_request(template("kubeadmcontrolplanetemplate-v1beta2.yaml"), None);
    no_builtin.variables.retain(|v| v.name != "builtin");
    let response = generate_patches(&no_builtin);
    assert_eq!(response.status, ResponseStatus::Failure);
    assert!(response.message.contains("builtin"), "{}", response.message);
}
