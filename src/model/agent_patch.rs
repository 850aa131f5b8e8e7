//! GeneratePatches for control-plane templates: make every control-plane machine pick up the
//! bootstrap Secret of its Cluster.
//!
//! - `KubeadmControlPlaneTemplate` (`v1beta1`, `v1beta2`): a `files` entry with the boot script
//!   (`contentFrom.secret`) under `spec.template.spec.kubeadmConfigSpec`, and a
//!   `postKubeadmCommands` entry running it with the admin kubeconfig (kubernetes-sigs/
//!   cluster-api v1.10–v1.11 `KubeadmConfigSpec.files`, `postKubeadmCommands`, `format`).
//! - `RKE2ControlPlaneTemplate` (`v1beta1`, `v1beta2`): the same file and a `postRKE2Commands`
//!   entry under `spec.template.spec` (rancher/cluster-api-provider-rke2 v0.25.0: both template
//!   versions inline `RKE2ConfigSpec` with `files`, `postRKE2Commands` and `agentConfig.format`).
//!
//! # What the file holds, and how it is encoded
//!
//! The file is a small POSIX shell script holding the agent's objects
//! ([`crate::model::boot_script::boot_script`]): it creates them with `kubectl create`, unless
//! the agent registered already. The bootstrap Secret holds it twice:
//! - [`SCRIPT_GZIP_KEY`]: `base64(gzip(script))` as text, referenced with `encoding:
//!   gzip+base64` by cloud-init templates. Both providers copy a `contentFrom` value into the
//!   file's `content` unchanged and keep `encoding` (cluster-api v1.11
//!   `bootstrap/kubeadm/internal/controllers/kubeadmconfig_controller.go` `resolveSecretFileContent`;
//!   CAPRKE2 v0.25.0 `rke2config_controller.go` `generateFileListIncludingRegistries`), and
//!   cloud-init base64-decodes then gunzips it (canonical/cloud-init `cc_write_files.py`
//!   `extract_contents`). About a third of the plain size in user data, and out of reach of the
//!   Jinja pass cloud-init runs over `## template: jinja` user data.
//! - [`SCRIPT_KEY`]: the plain script, for Ignition templates (`format: ignition`), whose webhooks
//!   forbid `gzip` and `gzip+base64` (cluster-api v1.11 `api/bootstrap/kubeadm/v1beta2/
//!   kubeadmconfig_types.go` `validateIgnition`; CAPRKE2 v0.25.0 `bootstrap/api/v1beta2/
//!   rke2config_webhook.go` `validateIgnition`).
//!
//! The command runs the file through `gzip -cdf`, which passes plain text through unchanged: Cluster
//! API's Docker provider (CAPD) writes a `gzip+base64` file base64-decoded but not gunzipped
//! (cluster-api v1.10–v1.14 `test/infrastructure/docker/internal/provisioning/cloudinit/
//! writefiles.go` `fixContent` returns after its first step), and the boot works there too.
//!
//! Patches are computed by mutating a copy of the template and diffing it into an RFC 6902 patch
//! whose operations are `add`s of whole values (objects that are missing, lists that changed):
//! `add` on an existing member replaces it, so the patch is idempotent — applied twice, or to a
//! template that already has the entries, it changes nothing further — and a list that is absent
//! is added whole. Entries already present (by path, by command) are not added again, and the
//! same template and Secret format always give the same patch.
//!
//! The patches name the Cluster's bootstrap Secret ([`crate::names::bootstrap_secret_name`]) and
//! its keys, never its content, so they do not change when the token does (a changed patch rolls
//! the machines). A Secret written by an earlier release of this provider (without
//! [`crate::names::BOOTSTRAP_FORMAT_ANNOTATION`]) holds only the plain manifest
//! ([`LEGACY_MANIFEST_KEY`]) and keeps its earlier patch ([`SecretFormat::Manifest`]): a patch
//! naming a key the Secret does not have would leave machines without bootstrap data.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::model::json::{list_at, object_at};
use crate::names;

/// Key of the bootstrap Secret holding the boot script as plain text (Ignition templates).
pub const SCRIPT_KEY: &str = "fleet-agent.sh";

/// Key of the bootstrap Secret holding `base64(gzip(boot script))` (cloud-init templates).
pub const SCRIPT_GZIP_KEY: &str = "fleet-agent.sh.gz.b64";

/// Where control-plane machines get the boot script (kubeadm and RKE2 alike).
pub const SCRIPT_PATH: &str = "/etc/caapf/fleet-agent.sh";

/// The value of [`names::BOOTSTRAP_FORMAT_ANNOTATION`] on Secrets holding the boot script.
pub const SCRIPT_FORMAT: &str = "2";

/// Key of a bootstrap Secret written by an earlier release: the agent objects as YAML.
pub const LEGACY_MANIFEST_KEY: &str = "fleet-agent.yaml";

/// Where an earlier release's patch put the agent objects.
pub const LEGACY_MANIFEST_PATH: &str = "/etc/caapf/fleet-agent.yaml";

/// What a bootstrap Secret holds, told by its [`names::BOOTSTRAP_FORMAT_ANNOTATION`]; the patch
/// names its keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecretFormat {
    /// Written by an earlier release (no annotation): [`LEGACY_MANIFEST_KEY`] only.
    Manifest,
    /// The boot script, plain and `gzip+base64` ([`SCRIPT_KEY`], [`SCRIPT_GZIP_KEY`]).
    Script,
}

impl SecretFormat {
    /// What this release writes.
    pub const CURRENT: SecretFormat = SecretFormat::Script;

    /// From a Secret's annotations.
    pub fn of(annotations: Option<&BTreeMap<String, String>>) -> SecretFormat {
        match annotations.and_then(|a| a.get(names::BOOTSTRAP_FORMAT_ANNOTATION)) {
            Some(value) if value == SCRIPT_FORMAT => SecretFormat::Script,
            _ => SecretFormat::Manifest,
        }
    }
}

/// The user data format a control-plane template asks its bootstrap provider for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UserDataFormat {
    /// `cloud-config` (the default of both providers).
    CloudConfig,
    /// `ignition`: files may not be gzip-encoded.
    Ignition,
}

/// A control plane's user data passes its infrastructure's limit with the bootstrap file added:
/// what to change, or `None`. `infra` is the control plane's machine infrastructure template.
/// Counted: about 14,000 B a kubeadm control-plane machine carries already (its CA and key files
/// and configuration) plus the file as measured in docs/runtime-extension.md (RSA-2048 CA).
/// Checked: AWS (CAPA v2.9 `AWSMachine`), whose EC2 user data is limited to 16,384 B and is sent
/// raw only with Ignition's `storageType: UnencryptedUserData`, or cloud-init with
/// `cloudInit.insecureSkipSecretsManager` and `uncompressedUserData`; the other providers'
/// limits (about 48 KB and more) are not reached.
pub fn user_data_overflow(infra: &Value, format: UserDataFormat) -> Option<String> {
    const BASE: usize = 14_000;
    const AWS_LIMIT: usize = 16_384;
    let spec = &infra["spec"]["template"]["spec"];
    let (added, raw_because) = match format {
        UserDataFormat::Ignition => (10_207, "ignition.storageType: UnencryptedUserData"),
        UserDataFormat::CloudConfig => (
            4_427,
            "cloudInit.insecureSkipSecretsManager and uncompressedUserData: true",
        ),
    };
    let raw = match format {
        UserDataFormat::Ignition => spec["ignition"]["storageType"] == "UnencryptedUserData",
        UserDataFormat::CloudConfig => {
            spec["cloudInit"]["insecureSkipSecretsManager"] == true
                && spec["uncompressedUserData"] == true
        }
    };
    (infra["kind"] == "AWSMachineTemplate" && raw && BASE + added > AWS_LIMIT).then(|| {
        format!(
            "the Fleet agent bootstrap adds about {added} B to each control-plane machine's user data, which already holds about {BASE} B, and AWSMachineTemplate {} sends it uncompressed ({raw_because}) within EC2's {AWS_LIMIT} B limit: store the user data as the provider does by default (drop that setting), or set the fleetAgent variable to {{enabled: false}} for this Cluster",
            infra["metadata"]["name"].as_str().unwrap_or_default()
        )
    })
}

/// The format `object` (a template of kind `template`) asks for: kubeadm's
/// `kubeadmConfigSpec.format`, RKE2's `agentConfig.format` (both default `cloud-config`).
pub fn user_data_format(object: &Value, template: Template) -> UserDataFormat {
    let spec = &object["spec"]["template"]["spec"];
    let format = match template {
        Template::KubeadmControlPlane => &spec["kubeadmConfigSpec"]["format"],
        Template::Rke2ControlPlane => &spec["agentConfig"]["format"],
    };
    if format == "ignition" {
        UserDataFormat::Ignition
    } else {
        UserDataFormat::CloudConfig
    }
}

/// kubeadm's `kubectl` with the admin kubeconfig (kubernetes-sigs/cluster-api
/// `bootstrap/kubeadm`: `postKubeadmCommands` run after `kubeadm init`/`join`, with
/// `/etc/kubernetes/admin.conf` written on control-plane nodes).
pub const KUBEADM_KUBECTL: &str = "kubectl --kubeconfig=/etc/kubernetes/admin.conf";

/// RKE2's `kubectl` in `/var/lib/rancher/rke2/bin` with the admin kubeconfig
/// `/etc/rancher/rke2/rke2.yaml` on servers (docs.rke2.io, "Cluster Access", "CLI Tools");
/// CAPRKE2 runs `postRKE2Commands` after starting `rke2-server` (v0.25.0
/// `bootstrap/internal/cloudinit/controlplane_init.go`).
pub const RKE2_KUBECTL: &str =
    "/var/lib/rancher/rke2/bin/kubectl --kubeconfig=/etc/rancher/rke2/rke2.yaml";

/// The command a control-plane machine runs after its Kubernetes started: the boot script with
/// the distribution's `kubectl` as its arguments. It never fails the node (`|| true`: Ignition
/// runs post commands under `set -e`).
pub fn boot_command(template: Template) -> String {
    let kubectl = match template {
        Template::KubeadmControlPlane => KUBEADM_KUBECTL,
        Template::Rke2ControlPlane => RKE2_KUBECTL,
    };
    format!("gzip -cdf {SCRIPT_PATH} | sh -s {kubectl} || true")
}

/// The command an earlier release's patch runs (kept byte for byte for Secrets of
/// [`SecretFormat::Manifest`], so their patch does not change): creates the objects of
/// [`LEGACY_MANIFEST_PATH`] that do not exist yet, retrying for at most five minutes.
pub fn legacy_command(template: Template) -> String {
    let kubectl = match template {
        Template::KubeadmControlPlane => KUBEADM_KUBECTL,
        Template::Rke2ControlPlane => RKE2_KUBECTL,
    };
    format!(
        "/bin/sh -c 'F={LEGACY_MANIFEST_PATH}; K=\"{kubectl}\"; for i in $(seq 1 60); do $K get -f \"$F\" >/dev/null 2>&1 && exit 0; $K create -f \"$F\" >/dev/null 2>&1; sleep 5; done; echo \"caapf: the Fleet agent bootstrap objects were not created\" >&2'"
    )
}

/// The `files` entry of a template: the boot script from the Secret, `gzip+base64` for
/// cloud-init, plain for Ignition; an earlier release's Secret keeps its plain manifest entry.
pub fn files_entry(secret_name: &str, secret: SecretFormat, user_data: UserDataFormat) -> Value {
    match (secret, user_data) {
        (SecretFormat::Manifest, _) => json!({
            "path": LEGACY_MANIFEST_PATH,
            "owner": "root:root",
            "permissions": "0600",
            "contentFrom": {"secret": {"name": secret_name, "key": LEGACY_MANIFEST_KEY}},
        }),
        (SecretFormat::Script, UserDataFormat::CloudConfig) => json!({
            "path": SCRIPT_PATH,
            "permissions": "0600",
            "encoding": "gzip+base64",
            "contentFrom": {"secret": {"name": secret_name, "key": SCRIPT_GZIP_KEY}},
        }),
        (SecretFormat::Script, UserDataFormat::Ignition) => json!({
            "path": SCRIPT_PATH,
            "permissions": "0600",
            "contentFrom": {"secret": {"name": secret_name, "key": SCRIPT_KEY}},
        }),
    }
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

/// The template with the bootstrap added (unchanged if it is already there), for a bootstrap
/// Secret of format `secret`.
pub fn patched(
    object: &Value,
    template: Template,
    secret_name: &str,
    secret: SecretFormat,
) -> Value {
    let mut copy = object.clone();
    let (path, commands_key): (&[&str], _) = match template {
        Template::KubeadmControlPlane => (
            &["spec", "template", "spec", "kubeadmConfigSpec"],
            "postKubeadmCommands",
        ),
        Template::Rke2ControlPlane => (&["spec", "template", "spec"], "postRKE2Commands"),
    };
    let file = files_entry(secret_name, secret, user_data_format(object, template));
    let command = match secret {
        SecretFormat::Manifest => legacy_command(template),
        SecretFormat::Script => boot_command(template),
    };
    let config = object_at(&mut copy, path);
    push_file(config, file);
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
    secret: SecretFormat,
) -> Result<json_patch::Patch, String> {
    let mut operations = Vec::new();
    additions(
        object,
        &patched(object, template, secret_name, secret),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_use_each_distribution_s_kubectl_and_admin_kubeconfig() {
        assert_eq!(
            boot_command(Template::KubeadmControlPlane),
            "gzip -cdf /etc/caapf/fleet-agent.sh | sh -s kubectl --kubeconfig=/etc/kubernetes/admin.conf || true"
        );
        assert_eq!(
            boot_command(Template::Rke2ControlPlane),
            "gzip -cdf /etc/caapf/fleet-agent.sh | sh -s /var/lib/rancher/rke2/bin/kubectl --kubeconfig=/etc/rancher/rke2/rke2.yaml || true"
        );
        // An earlier release's command, byte for byte (its Secrets keep their patch).
        assert_eq!(
            legacy_command(Template::KubeadmControlPlane),
            "/bin/sh -c 'F=/etc/caapf/fleet-agent.yaml; K=\"kubectl --kubeconfig=/etc/kubernetes/admin.conf\"; for i in $(seq 1 60); do $K get -f \"$F\" >/dev/null 2>&1 && exit 0; $K create -f \"$F\" >/dev/null 2>&1; sleep 5; done; echo \"caapf: the Fleet agent bootstrap objects were not created\" >&2'"
        );
        assert!(legacy_command(Template::Rke2ControlPlane).contains(
            "K=\"/var/lib/rancher/rke2/bin/kubectl --kubeconfig=/etc/rancher/rke2/rke2.yaml\""
        ));
    }

    #[test]
    fn the_file_entry_follows_the_secret_and_the_user_data_format() {
        let kubeadm = |format: Option<&str>| {
            let mut t = json!({"spec": {"template": {"spec": {"kubeadmConfigSpec": {}}}}});
            if let Some(format) = format {
                t["spec"]["template"]["spec"]["kubeadmConfigSpec"]["format"] = json!(format);
            }
            user_data_format(&t, Template::KubeadmControlPlane)
        };
        assert_eq!(kubeadm(None), UserDataFormat::CloudConfig);
        assert_eq!(kubeadm(Some("cloud-config")), UserDataFormat::CloudConfig);
        assert_eq!(kubeadm(Some("ignition")), UserDataFormat::Ignition);
        let rke2 = json!({"spec": {"template": {"spec": {"agentConfig": {"format": "ignition"}}}}});
        assert_eq!(
            user_data_format(&rke2, Template::Rke2ControlPlane),
            UserDataFormat::Ignition
        );
        let cloud = files_entry("s", SecretFormat::Script, UserDataFormat::CloudConfig);
        assert_eq!(cloud["encoding"], "gzip+base64");
        assert_eq!(cloud["contentFrom"]["secret"]["key"], SCRIPT_GZIP_KEY);
        let ignition = files_entry("s", SecretFormat::Script, UserDataFormat::Ignition);
        assert!(
            ignition.get("encoding").is_none(),
            "gzip is forbidden with Ignition"
        );
        assert_eq!(ignition["contentFrom"]["secret"]["key"], SCRIPT_KEY);
        let legacy = files_entry("s", SecretFormat::Manifest, UserDataFormat::CloudConfig);
        assert_eq!(legacy["contentFrom"]["secret"]["key"], LEGACY_MANIFEST_KEY);
        assert_eq!(legacy["path"], LEGACY_MANIFEST_PATH);
        let annotated = BTreeMap::from([(
            names::BOOTSTRAP_FORMAT_ANNOTATION.to_string(),
            SCRIPT_FORMAT.to_string(),
        )]);
        assert_eq!(SecretFormat::of(Some(&annotated)), SecretFormat::Script);
        assert_eq!(SecretFormat::of(None), SecretFormat::Manifest);
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
                SecretFormat::CURRENT,
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
