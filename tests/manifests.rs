//! The kustomize manifests and clusterctl release assets: clusterctl's rules (through
//! `hack/release-manifests.sh` and its checker, which must also reject broken input), the
//! Deployment agreeing with the binary's flags, pod security, and documented variables.

use crate::common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

use caapf::cli::{Cli, ManagerFlags};
use common::render::{documents, find, kustomize, kustomize_text, root, substitute_defaults};
use serde_json::Value;

fn run_script(args: &[&str]) -> std::process::Output {
    Command::new(root().join("hack/release-manifests.sh"))
        .args(args)
        .output()
        .expect("hack/release-manifests.sh runs")
}

fn text(output: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// `NAME=default` lines the release script prints for the variables it found.
fn printed_variables(output: &str) -> BTreeMap<String, String> {
    output
        .lines()
        .filter_map(|l| l.split_once('='))
        .filter(|(name, _)| name.starts_with("CAAPF_"))
        .map(|(name, default)| (name.to_string(), default.trim().to_string()))
        .collect()
}

#[test]
fn release_manifests_follow_the_clusterctl_contract() {
    let out = tempfile::tempdir().expect("tempdir");
    let out_dir = out.path().to_str().expect("utf-8 path");
    let output = run_script(&["--out", out_dir, "--tag", "v0.1.0"]);
    let log = text(&output);
    assert!(output.status.success(), "{log}");
    for file in [
        "addon-components.yaml",
        "fleet-installer.yaml",
        "runtime-extension.yaml",
        "runtime-extension-upgrade-steps.yaml",
        "metadata.yaml",
    ] {
        assert!(out.path().join(file).is_file(), "{file} missing");
    }
    let components =
        std::fs::read_to_string(out.path().join("addon-components.yaml")).expect("components");
    assert!(
        components
            .contains("${CAAPF_IMAGE:=ghcr.io/example/cluster-api-addon-provider-fleet:v0.1.0}"),
        "the release tag is the image default"
    );
    assert!(!components.contains(":dev}"), "no dev image in a release");

    // Every variable is documented with its default.
    let variables = printed_variables(&log);
    assert!(variables.len() >= 5, "{log}");
    let doc = std::fs::read_to_string(root().join("docs/installation.md")).expect("doc");
    for (name, default) in &variables {
        let row = doc
            .lines()
            .find(|l| l.starts_with(&format!("| `{name}`")))
            .unwrap_or_else(|| panic!("docs/installation.md has no row for `{name}`"));
        let shown = if name == "CAAPF_IMAGE" {
            "ghcr.io/example/cluster-api-addon-provider-fleet:<release>".to_string()
        } else {
            default.clone()
        };
        assert!(
            row.contains(&format!("`{shown}`")) || (shown.is_empty() && row.contains("(empty)")),
            "docs/installation.md: `{name}` default `{shown}` not in {row:?}"
        );
    }

    // A tag without a release series in metadata.yaml is refused.
    let output = run_script(&["--out", out_dir, "--tag", "v9.9.0"]);
    assert!(!output.status.success());
    assert!(
        text(&output).contains("releaseSeries has no entry for 9.9"),
        "{}",
        text(&output)
    );
}

#[test]
fn metadata_declares_the_v1beta2_contract() {
    let metadata: Value = serde_yaml::from_str(
        &std::fs::read_to_string(root().join("metadata.yaml")).expect("metadata.yaml"),
    )
    .expect("yaml");
    assert_eq!(
        metadata["apiVersion"],
        "clusterctl.cluster.x-k8s.io/v1alpha3"
    );
    assert_eq!(metadata["kind"], "Metadata");
    let first = &metadata["releaseSeries"][0];
    assert_eq!(
        (first["major"].as_u64(), first["minor"].as_u64()),
        (Some(0), Some(1))
    );
    assert_eq!(first["contract"], "v1beta2");
    // The crate version is a listed series.
    let version = semver_of(env!("CARGO_PKG_VERSION"));
    assert!(
        metadata["releaseSeries"]
            .as_array()
            .expect("series")
            .iter()
            .any(|s| s["major"].as_u64() == Some(version.0)
                && s["minor"].as_u64() == Some(version.1)),
        "metadata.yaml lacks the crate's series {version:?}"
    );
}

fn semver_of(text: &str) -> (u64, u64) {
    let mut parts = text.split('.').map(|p| p.parse::<u64>().expect("number"));
    (parts.next().expect("major"), parts.next().expect("minor"))
}

/// A minimal valid components file, and broken variants the checker must refuse.
#[test]
fn the_checker_refuses_what_clusterctl_would() {
    let valid = r#"
apiVersion: v1
kind: Namespace
metadata: {name: caapf-system, labels: {cluster.x-k8s.io/provider: addon-fleet}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: sa, namespace: caapf-system, labels: {cluster.x-k8s.io/provider: addon-fleet}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: d, namespace: caapf-system, labels: {cluster.x-k8s.io/provider: addon-fleet}}
spec:
  template:
    spec:
      containers:
      - name: manager
        image: ${CAAPF_IMAGE:=example/image:v1}
        args: ["--v=${CAAPF_LOG_LEVEL:=0}", "--price=$$5"]
"#;
    let cases: &[(&str, &str, &str)] = &[
        ("valid", "", ""),
        (
            "two namespaces",
            "---\napiVersion: v1\nkind: Namespace\nmetadata: {name: other, labels: {cluster.x-k8s.io/provider: addon-fleet}}\n",
            "exactly one Namespace",
        ),
        (
            "object in another namespace",
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: default, labels: {cluster.x-k8s.io/provider: addon-fleet}}\n",
            "must be in the provider namespace caapf-system",
        ),
        (
            "namespaced object without a namespace",
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, labels: {cluster.x-k8s.io/provider: addon-fleet}}\n",
            "needs metadata.namespace",
        ),
        (
            "missing provider label",
            "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: r}\nrules: []\n",
            "label cluster.x-k8s.io/provider must be 'addon-fleet'",
        ),
        (
            "cluster-admin binding",
            "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: b, labels: {cluster.x-k8s.io/provider: addon-fleet}}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}\n",
            "binds cluster-admin",
        ),
        (
            "container not named manager",
            "---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: e, namespace: caapf-system, labels: {cluster.x-k8s.io/provider: addon-fleet}}\nspec: {template: {spec: {containers: [{name: controller, image: x}]}}}\n",
            "needs a container named 'manager'",
        ),
        (
            "unprefixed variable",
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: caapf-system, labels: {cluster.x-k8s.io/provider: addon-fleet}}\ndata: {a: \"${IMAGE:=x}\"}\n",
            "must start with the provider prefix CAAPF_",
        ),
        (
            "bare variable",
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: caapf-system, labels: {cluster.x-k8s.io/provider: addon-fleet}}\ndata: {a: \"$HOME/x\"}\n",
            "bare $HOME",
        ),
        (
            "other default syntax",
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: caapf-system, labels: {cluster.x-k8s.io/provider: addon-fleet}}\ndata: {a: \"${CAAPF_X:-y}\"}\n",
            "use ${NAME} or ${NAME:=default}",
        ),
        (
            "two defaults for one variable",
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: caapf-system, labels: {cluster.x-k8s.io/provider: addon-fleet}}\ndata: {a: \"${CAAPF_LOG_LEVEL:=4}\"}\n",
            "has two defaults",
        ),
    ];
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, extra, expected) in cases {
        let path = dir.path().join("components.yaml");
        std::fs::write(&path, format!("{valid}{extra}")).expect("write");
        let output = Command::new("python3")
            .arg(root().join("hack/check-components.py"))
            .arg("components")
            .arg(&path)
            .output()
            .expect("python3 runs the checker");
        let log = text(&output);
        if expected.is_empty() {
            assert!(output.status.success(), "{name}: {log}");
            assert!(
                log.contains("CAAPF_IMAGE=example/image:v1"),
                "{name}: {log}"
            );
        } else {
            assert!(!output.status.success(), "{name} was accepted");
            assert!(
                log.contains(expected),
                "{name}: expected {expected:?} in {log}"
            );
        }
    }
}

fn port(flag: &str) -> u16 {
    caapf::probes::parse_bind_address(flag)
        .expect("address")
        .map(|a: SocketAddr| a.port())
        .expect("enabled")
}

fn manager_container(objects: &[Value]) -> &Value {
    let deployment = find(objects, "Deployment", "caapf-controller-manager");
    let containers = deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers");
    assert_eq!(containers.len(), 1, "exactly one container");
    assert_eq!(containers[0]["name"], "manager");
    &containers[0]
}

#[test]
fn the_deployment_runs_the_binary_as_its_flags_expect() {
    // As clusterctl renders it with no variable set.
    let objects = documents(&substitute_defaults(&kustomize_text("config/default")));
    let container = manager_container(&objects);
    let args: Vec<String> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("string arg").to_string())
        .collect();
    let (cli, dropped) =
        Cli::parse_tolerant(std::iter::once("caapf".to_string()).chain(args.clone()))
            .expect("the binary accepts the Deployment's args");
    assert!(dropped.is_empty(), "unknown flags {dropped:?}");
    let flags = cli.manager_flags();
    assert!(flags.leader_elect, "two replicas need leader election");
    assert_eq!(flags.watch_filter_label(), None, "empty filter by default");
    assert_eq!(flags.verbosity, 0);
    assert_eq!(flags.log_format, caapf::cli::LogFormat::Json);

    let defaults = ManagerFlags::default();
    let ports: BTreeMap<String, u64> = container["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .map(|p| {
            (
                p["name"].as_str().expect("name").to_string(),
                p["containerPort"].as_u64().expect("port"),
            )
        })
        .collect();
    assert_eq!(
        ports["metrics"],
        u64::from(port(&flags.metrics_bind_address))
    );
    assert_eq!(
        ports["healthz"],
        u64::from(port(&flags.health_probe_bind_address))
    );
    assert_eq!(
        port(&flags.metrics_bind_address),
        port(&defaults.metrics_bind_address)
    );
    assert_eq!(
        port(&flags.health_probe_bind_address),
        port(&defaults.health_probe_bind_address)
    );
    assert_eq!(flags.webhook_port, defaults.webhook_port);
    assert_eq!(ports["webhook-server"], u64::from(defaults.webhook_port));
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        assert_eq!(container[probe]["httpGet"]["path"], path);
        assert_eq!(container[probe]["httpGet"]["port"], "healthz");
    }

    // Downward API for leader election.
    let env: BTreeMap<String, &Value> = container["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|e| (e["name"].as_str().expect("name").to_string(), e))
        .collect();
    assert_eq!(
        env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.name"
    );
    assert_eq!(
        env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.namespace"
    );

    // Pod security: restricted profile, read-only root with helm's directories on a volume.
    let pod = &find(&objects, "Deployment", "caapf-controller-manager")["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let security = &container["securityContext"];
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["runAsNonRoot"], true);
    assert!(security["runAsUser"].as_u64().is_some_and(|uid| uid > 0));
    assert_eq!(security["capabilities"]["drop"], serde_json::json!(["ALL"]));
    let mounts: Vec<(&str, &str)> = container["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .map(|m| {
            (
                m["name"].as_str().expect("n"),
                m["mountPath"].as_str().expect("p"),
            )
        })
        .collect();
    for variable in [
        "HOME",
        "HELM_CACHE_HOME",
        "HELM_CONFIG_HOME",
        "HELM_DATA_HOME",
    ] {
        let value = env[variable]["value"].as_str().expect("value");
        let (volume, _) = mounts
            .iter()
            .find(|(_, path)| Path::new(value).starts_with(path))
            .unwrap_or_else(|| panic!("{variable}={value} is not on a mounted volume"));
        let declared = pod["volumes"]
            .as_array()
            .expect("volumes")
            .iter()
            .find(|v| v["name"] == *volume)
            .expect("volume declared");
        assert!(declared.get("emptyDir").is_some(), "{volume} is writable");
    }
    assert!(
        mounts
            .iter()
            .any(|(_, path)| *path == defaults.webhook_cert_dir),
        "the serving certificate is mounted at --webhook-cert-dir"
    );
    assert!(container["resources"]["requests"]["memory"].is_string());
    assert!(container["resources"]["limits"]["memory"].is_string());

    // The Service targets the named ports of the Deployment's pods.
    let service = find(
        &objects,
        "Service",
        "caapf-controller-manager-metrics-service",
    );
    let labels = &pod_labels(&objects);
    for (key, value) in service["spec"]["selector"].as_object().expect("selector") {
        assert_eq!(&labels[key], value, "selector {key}");
    }
    for service_port in service["spec"]["ports"].as_array().expect("ports") {
        let target = service_port["targetPort"].as_str().expect("named target");
        assert!(ports.contains_key(target), "no container port {target}");
    }
}

fn pod_labels(objects: &[Value]) -> Value {
    find(objects, "Deployment", "caapf-controller-manager")["spec"]["template"]["metadata"]
        ["labels"]
        .clone()
}

#[test]
fn default_renders_one_namespace_with_prefixed_labelled_objects() {
    let objects = kustomize("config/default");
    let namespaces: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == "Namespace")
        .collect();
    assert_eq!(namespaces.len(), 1);
    assert_eq!(namespaces[0]["metadata"]["name"], "caapf-system");
    for object in &objects {
        let name = object["metadata"]["name"].as_str().expect("name");
        assert_eq!(
            object["metadata"]["labels"]["cluster.x-k8s.io/provider"], "addon-fleet",
            "{name}"
        );
        let kind = object["kind"].as_str().expect("kind");
        if !["Namespace", "CustomResourceDefinition"].contains(&kind) {
            assert!(name.starts_with("caapf-"), "{kind} {name} is not prefixed");
        }
    }
    // The CRD is the generated one.
    let crd = find(
        &objects,
        "CustomResourceDefinition",
        "fleetaddonconfigs.addons.cluster.x-k8s.io",
    );
    let generated = documents(
        &std::fs::read_to_string(
            root().join("config/crd/bases/addons.cluster.x-k8s.io_fleetaddonconfigs.yaml"),
        )
        .expect("crd"),
    );
    assert_eq!(crd["spec"], generated[0]["spec"]);
}
