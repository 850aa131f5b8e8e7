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
    LEGACY_MANIFEST_KEY, LEGACY_MANIFEST_PATH, SCRIPT_GZIP_KEY, SCRIPT_KEY, SCRIPT_PATH,
    SecretFormat, Template, boot_command, legacy_command,
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
/// last one the boot script read from the Secret, `gzip+base64` (cloud-init templates).
fn assert_script_file_added(fixture: &str, patched: &Value, files: &str, before: usize) {
    let files = list(patched, files);
    assert_eq!(files.len(), before + 1, "{fixture}");
    assert_eq!(files.last(), Some(&cloud_init_entry()), "{fixture}");
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
                entry["path"] != SCRIPT_PATH
                    && entry["path"] != LEGACY_MANIFEST_PATH
                    && [Template::KubeadmControlPlane, Template::Rke2ControlPlane]
                        .iter()
                        .all(|t| {
                            entry != &json!(boot_command(*t)) && entry != &json!(legacy_command(*t))
                        })
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

/// The `files` entry a cloud-init template gets: the boot script, `gzip+base64` (issue #29,
/// defect 4: the plain manifest added about 7.5 KB to every control-plane machine's user data).
fn cloud_init_entry() -> Value {
    json!({
        "path": SCRIPT_PATH,
        "permissions": "0600",
        "encoding": "gzip+base64",
        "contentFrom": {"secret": {"name": "c1-fleet-agent-bootstrap", "key": SCRIPT_GZIP_KEY}},
    })
}

#[test]
fn kubeadm_control_plane_templates_get_the_script_file_and_the_boot_command() {
    const FILES: &str = "/spec/template/spec/kubeadmConfigSpec/files";
    const COMMANDS: &str = "/spec/template/spec/kubeadmConfigSpec/postKubeadmCommands";
    for (fixture, files_before, commands_before) in [
        ("kubeadmcontrolplanetemplate-v1beta2.yaml", 1, 1),
        ("kubeadmcontrolplanetemplate-v1beta1.yaml", 0, 0),
    ] {
        let fixed = patch_fixture(fixture);
        let patched = &fixed.2;
        assert_script_file_added(fixture, patched, FILES, files_before);
        let commands = list(patched, COMMANDS);
        assert_eq!(commands.len(), commands_before + 1, "{fixture}");
        assert_eq!(
            commands.last(),
            Some(&json!(boot_command(Template::KubeadmControlPlane))),
            "{fixture}"
        );
        assert_rest_unchanged_and_idempotent(fixture, &fixed, &[FILES, COMMANDS]);
    }
}

#[test]
fn rke2_control_plane_templates_get_the_script_file_and_the_boot_command() {
    const FILES: &str = "/spec/template/spec/files";
    const COMMANDS: &str = "/spec/template/spec/postRKE2Commands";
    for (fixture, files_before) in [
        ("rke2controlplanetemplate-v1beta2.yaml", 1),
        ("rke2controlplanetemplate-v1beta1.yaml", 0),
    ] {
        let fixed = patch_fixture(fixture);
        let patched = &fixed.2;
        assert_script_file_added(fixture, patched, FILES, files_before);
        // Not in RKE2's auto-deploy directory: nothing re-applies the agent objects later.
        assert!(!SCRIPT_PATH.starts_with("/var/lib/rancher/rke2/server/manifests"));
        let commands = list(patched, COMMANDS);
        assert_eq!(
            commands,
            &[json!(boot_command(Template::Rke2ControlPlane))],
            "{fixture}"
        );
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

/// Ignition templates (`format: ignition`) get the plain script: their webhooks forbid `gzip` and
/// `gzip+base64` (cluster-api v1.11 `api/bootstrap/kubeadm/v1beta2/kubeadmconfig_types.go`
/// `validateIgnition`; CAPRKE2 v0.25.0 `bootstrap/api/v1beta2/rke2config_webhook.go`
/// `validateIgnition`). The patch depends on the template's format only, so it stays the same for
/// a template.
#[test]
fn ignition_templates_get_the_plain_script() {
    for (fixture, format_pointer, files) in [
        (
            "kubeadmcontrolplanetemplate-v1beta2.yaml",
            "/spec/template/spec/kubeadmConfigSpec",
            "/spec/template/spec/kubeadmConfigSpec/files",
        ),
        (
            "rke2controlplanetemplate-v1beta2.yaml",
            "/spec/template/spec/agentConfig",
            "/spec/template/spec/files",
        ),
    ] {
        let mut original = template(fixture);
        original
            .pointer_mut(format_pointer)
            .and_then(Value::as_object_mut)
            .expect("spec")
            .insert("format".into(), json!("ignition"));
        let patch = single_patch(&original);
        let patched = apply(&original, &patch);
        let entry = patched
            .pointer(files)
            .and_then(Value::as_array)
            .and_then(|files| files.last())
            .cloned()
            .expect("file");
        assert_eq!(
            entry,
            json!({
                "path": SCRIPT_PATH,
                "permissions": "0600",
                "contentFrom": {"secret": {"name": "c1-fleet-agent-bootstrap", "key": SCRIPT_KEY}},
            }),
            "{fixture}"
        );
        assert_eq!(single_patch(&original), patch, "{fixture}: deterministic");
    }
}

/// A bootstrap Secret written by an earlier release (no format annotation: the plain manifest
/// under `fleet-agent.yaml` only) keeps the earlier patch byte for byte: a patch naming the new
/// keys would leave its machines without bootstrap data, and a changed patch rolls the control
/// plane.
#[test]
fn a_secret_of_an_earlier_release_keeps_its_earlier_patch() {
    assert_eq!(
        legacy_command(Template::KubeadmControlPlane),
        "/bin/sh -c 'F=/etc/caapf/fleet-agent.yaml; K=\"kubectl --kubeconfig=/etc/kubernetes/admin.conf\"; for i in $(seq 1 60); do $K get -f \"$F\" >/dev/null 2>&1 && exit 0; $K create -f \"$F\" >/dev/null 2>&1; sleep 5; done; echo \"caapf: the Fleet agent bootstrap objects were not created\" >&2'"
    );
    let original = template("kubeadmcontrolplanetemplate-v1beta2.yaml");
    let response = topology::generate_patches_for(
        &request(vec![("u1", control_plane_holder(), original.clone())], None),
        Some(SecretFormat::Manifest),
    );
    let patched = apply(&original, &patches(&response)[0].1);
    let spec = &patched["spec"]["template"]["spec"]["kubeadmConfigSpec"];
    assert_eq!(
        spec["files"].as_array().and_then(|f| f.last()),
        Some(&json!({
            "path": LEGACY_MANIFEST_PATH,
            "owner": "root:root",
            "permissions": "0600",
            "contentFrom": {"secret": {"name": "c1-fleet-agent-bootstrap", "key": LEGACY_MANIFEST_KEY}},
        }))
    );
    assert_eq!(
        spec["postKubeadmCommands"]
            .as_array()
            .and_then(|c| c.last()),
        Some(&json!(legacy_command(Template::KubeadmControlPlane)))
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

/// A stand-in for `kubectl` on a control-plane machine: a shell script answering from the files
/// of `$STATE` as the API server would (`down`: that many calls fail as if it did not answer;
/// `registered`: Secret `fleet-agent` exists; `created`: every object of the manifest exists),
/// recording each call in `$STATE/calls` and what `create -f -` read in `$STATE/created.yaml`;
/// and a `sleep` that returns at once, so the retries take no time.
const FAKE_KUBECTL: &str = r#"#!/bin/sh
echo "$*" >> "$STATE/calls"
if [ -e "$STATE/down" ]; then
  n=$(cat "$STATE/down")
  if [ "$n" -gt 0 ]; then echo $((n-1)) > "$STATE/down"; cat >/dev/null; exit 1; fi
fi
case "$*" in
  *"get secret fleet-agent --ignore-not-found -o name") [ -e "$STATE/registered" ] && echo secret/fleet-agent; exit 0 ;;
  *"get -f -") cat >/dev/null; [ -e "$STATE/created" ]; exit ;;
  *"delete secret fleet-agent-bootstrap --ignore-not-found") rm -f "$STATE/created"; exit 0 ;;
  *"create -f -") cat > "$STATE/created.yaml"; touch "$STATE/created"; exit 0 ;;
esac
echo "unexpected call: $*" >&2
exit 2
"#;

/// How a control-plane machine got the boot script.
#[derive(Clone, Copy, Debug)]
enum Written {
    /// cloud-init: the `gzip+base64` key decoded and gunzipped; Ignition: the plain key.
    Plain,
    /// Cluster API's Docker provider: base64-decoded but not gunzipped (cluster-api
    /// `test/infrastructure/docker/internal/provisioning/cloudinit/writefiles.go` `fixContent`).
    Gzipped,
}

struct Boot {
    dir: tempfile::TempDir,
    script: String,
}

impl Boot {
    /// The bootstrap Secret's files for a small agent manifest (the boot logic does not depend
    /// on what the objects are).
    fn new() -> Boot {
        let objects = vec![
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "fleet-addon-agent"}}),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "fleet-agent-bootstrap", "namespace": "fleet-addon-agent"},
                   "data": {"token": "dG9rZW4="}}),
        ];
        let files = caapf::model::boot_script::bootstrap_files(&objects).expect("files");
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("bin")).expect("bin");
        std::fs::create_dir_all(dir.path().join("state")).expect("state");
        for (name, body) in [("kubectl", FAKE_KUBECTL), ("sleep", "#!/bin/sh\nexit 0\n")] {
            let path = dir.path().join("bin").join(name);
            std::fs::write(&path, body).expect("write");
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        let packed = base64::engine::general_purpose::STANDARD
            .decode(&files[SCRIPT_GZIP_KEY])
            .expect("base64");
        std::fs::write(dir.path().join("plain.sh"), &files[SCRIPT_KEY]).expect("plain");
        std::fs::write(dir.path().join("gzipped.sh"), packed).expect("gzipped");
        Boot {
            dir,
            script: files[SCRIPT_KEY].clone(),
        }
    }

    fn state(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join("state").join(name)
    }

    /// Runs the kubeadm boot command as the machine would (`/bin/sh -c`, `kubectl` from `PATH`),
    /// with the script at this test's path; returns the calls `kubectl` got and the stderr.
    fn run(&self, written: Written) -> (Vec<String>, String) {
        let file = match written {
            Written::Plain => "plain.sh",
            Written::Gzipped => "gzipped.sh",
        };
        let command = boot_command(Template::KubeadmControlPlane).replace(
            SCRIPT_PATH,
            self.dir.path().join(file).to_str().expect("path"),
        );
        let path = format!(
            "{}:{}",
            self.dir.path().join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let output = std::process::Command::new("/bin/sh")
            .args(["-c", &command])
            .env("PATH", path)
            .env("STATE", self.dir.path().join("state"))
            .output()
            .expect("sh");
        assert!(
            output.status.success(),
            "the boot never fails the node: {output:?}"
        );
        let calls = std::fs::read_to_string(self.state("calls")).unwrap_or_default();
        let _ = std::fs::remove_file(self.state("calls"));
        (
            calls.lines().map(str::to_string).collect(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }
}

fn creates(calls: &[String]) -> usize {
    calls.iter().filter(|c| c.ends_with("create -f -")).count()
}

/// The boot step does nothing on a cluster whose agent registered (issue #29, defect 7: every
/// later control-plane machine re-created `fleet-agent-bootstrap` and a ClusterRoleBinding),
/// creates the objects once on a fresh cluster, leaves them alone when another machine created
/// them, waits for an API server that does not answer yet, and never fails the node; with the
/// script written plain (cloud-init, Ignition) or gzipped (CAPD).
#[test]
fn the_boot_script_creates_the_agent_only_on_a_cluster_where_it_did_not_register() {
    for written in [Written::Plain, Written::Gzipped] {
        // Registered: Fleet's agent keeps its credential in Secret fleet-agent (rancher/fleet
        // internal/cmd/agent/register/register.go): one look, nothing created.
        let boot = Boot::new();
        std::fs::write(boot.state("registered"), "").expect("state");
        let (calls, _) = boot.run(written);
        assert_eq!(
            calls,
            [
                "--kubeconfig=/etc/kubernetes/admin.conf -n fleet-addon-agent get secret fleet-agent --ignore-not-found -o name"
            ],
            "{written:?}"
        );

        // A fresh cluster: created once, exactly the objects the script carries.
        let boot = Boot::new();
        let (calls, _) = boot.run(written);
        assert_eq!(creates(&calls), 1, "{written:?}: {calls:?}");
        let created = std::fs::read_to_string(boot.state("created.yaml")).expect("created");
        let carried = caapf::model::boot_script::script_objects(&boot.script).expect("objects");
        let documents: Vec<Value> = serde_yaml::Deserializer::from_str(&created)
            .map(|d| <Value as serde::Deserialize>::deserialize(d).expect("yaml"))
            .filter(|d| !d.is_null())
            .collect();
        assert_eq!(documents, carried, "{written:?}");
        assert_eq!(documents[1]["stringData"]["token"], "token");

        // Another machine created them, the agent has not registered yet: this machine's
        // registration Secret replaces theirs (deleted once, created again), so a replaced
        // token reaches the cluster (issue #38 item 6).
        let boot = Boot::new();
        std::fs::write(boot.state("created"), "").expect("state");
        let (calls, _) = boot.run(written);
        let deletes = calls
            .iter()
            .filter(|c| c.contains("delete secret fleet-agent-bootstrap"));
        assert_eq!(deletes.count(), 1, "{written:?}: {calls:?}");
        assert_eq!(creates(&calls), 1, "{written:?}: {calls:?}");
        assert!(
            calls.iter().position(|c| c.contains("delete"))
                < calls.iter().position(|c| c.ends_with("create -f -"))
        );

        // The API server does not answer at first: the script waits, then creates.
        let boot = Boot::new();
        std::fs::write(boot.state("down"), "3").expect("state");
        let (calls, _) = boot.run(written);
        assert_eq!(creates(&calls), 1, "{written:?}: {calls:?}");

        // It never answers: 60 tries, a message, exit 0 (Ignition runs post commands under
        // `set -e`).
        let boot = Boot::new();
        std::fs::write(boot.state("down"), "1000").expect("state");
        let (calls, stderr) = boot.run(written);
        assert_eq!(calls.len(), 60, "{written:?}");
        assert_eq!(creates(&calls), 0);
        assert!(stderr.contains("were not created"), "{stderr}");
    }
}

/// kubeadm with Ignition adds about 10 KB to every control-plane machine's user data: with an
/// `AWSMachineTemplate` sending it raw (`ignition.storageType: UnencryptedUserData`, CAPA v2.9)
/// the total passes EC2's 16 KB, and GeneratePatches answers Failure saying what to change
/// instead of letting machines fail to launch; the default storage (S3), cloud-init behind
/// Secrets Manager, or the fleetAgent variable disabled pass (issue #38 item 9).
#[test]
fn a_control_plane_whose_user_data_would_pass_its_provider_s_limit_is_refused() {
    let mut ignition = template("kubeadmcontrolplanetemplate-v1beta2.yaml");
    ignition["spec"]["template"]["spec"]["kubeadmConfigSpec"]["format"] = json!("ignition");
    let cloud_init = template("kubeadmcontrolplanetemplate-v1beta2.yaml");
    let aws = |spec: Value| {
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "AWSMachineTemplate",
            "metadata": {"name": "c1-control-plane", "namespace": "default"},
            "spec": {"template": {"spec": spec}}})
    };
    let machine = holder(
        "KubeadmControlPlane",
        "spec.machineTemplate.spec.infrastructureRef",
    );
    let rows = [
        (
            &ignition,
            json!({"instanceType": "m5.large", "ignition": {"version": "3.4", "storageType": "UnencryptedUserData"}}),
            None,
            true,
        ),
        (
            &ignition,
            json!({"instanceType": "m5.large", "ignition": {"version": "3.4"}}),
            None,
            false,
        ),
        (
            &cloud_init,
            json!({"instanceType": "m5.large", "cloudInit": {"insecureSkipSecretsManager": true}, "uncompressedUserData": true}),
            None,
            true,
        ),
        (
            &cloud_init,
            json!({"instanceType": "m5.large", "cloudInit": {"insecureSkipSecretsManager": true}}),
            None,
            false,
        ),
        (
            &ignition,
            json!({"instanceType": "m5.large", "ignition": {"version": "3.4", "storageType": "UnencryptedUserData"}}),
            Some(json!({"enabled": false})),
            false,
        ),
    ];
    for (control_plane, spec, fleet_agent, refused) in rows {
        let response = generate_patches(&request(
            vec![
                ("cp", control_plane_holder(), control_plane.clone()),
                ("machine", machine.clone(), aws(spec.clone())),
            ],
            fleet_agent.clone(),
        ));
        let body = serde_json::to_value(&response).expect("json");
        if refused {
            assert_eq!(body["status"], "Failure", "{spec}");
            let message = body["message"].as_str().unwrap_or_default();
            assert!(
                message.contains("AWSMachineTemplate c1-control-plane sends it uncompressed")
                    && message.contains("16384 B limit")
                    && message.contains("fleetAgent variable to {enabled: false}"),
                "{message}"
            );
        } else {
            assert_eq!(body["status"], "Success", "{spec} {fleet_agent:?}: {body}");
        }
    }
}
