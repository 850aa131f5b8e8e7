//! The Helm chart: `helm lint`, `helm template` with the defaults rendering the objects of
//! `config/default` (same kinds, namespaces and names; same RBAC rules, container, services,
//! certificate and CRD), the optional pieces equal to their kustomize counterparts, values that
//! change what they should, and an install against the sandbox API server with the real helm.

use crate::common;

use std::collections::BTreeSet;
use std::process::Command;

use caapf::cli::Cli;
use common::render::{
    documents, find, helm, helm_bin, kustomize, kustomize_text, root, substitute_defaults,
};
use kube_sandbox::{Sandbox, SandboxOptions};
use serde_json::{Value, json};

const CHART: &str = "charts/cluster-api-addon-provider-fleet";

fn chart() -> String {
    root().join(CHART).display().to_string()
}

fn template(namespace: &str, extra: &[&str]) -> Vec<Value> {
    let chart = chart();
    let mut args = vec![
        "template",
        "caapf",
        chart.as_str(),
        "--namespace",
        namespace,
    ];
    args.extend_from_slice(extra);
    documents(&helm(&args))
}

fn identities(objects: &[Value]) -> BTreeSet<(String, String, String)> {
    objects
        .iter()
        .map(|o| {
            let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
            (
                s(&o["kind"]),
                s(&o["metadata"]["namespace"]),
                s(&o["metadata"]["name"]),
            )
        })
        .collect()
}

/// The manager flags a Deployment's container runs with.
fn flags_of(deployment: &Value) -> caapf::cli::ManagerFlags {
    let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("arg").to_string());
    let (cli, dropped) =
        Cli::parse_tolerant(std::iter::once("caapf".to_string()).chain(args)).expect("flags");
    assert!(dropped.is_empty(), "{dropped:?}");
    cli.manager_flags().clone()
}

fn without(mut value: Value, pointers: &[&str]) -> Value {
    for pointer in pointers {
        let (parent, key) = pointer.rsplit_once('/').expect("pointer");
        if let Some(object) = value.pointer_mut(parent).and_then(Value::as_object_mut) {
            object.remove(key);
        }
    }
    value
}

#[test]
fn lint_passes_with_defaults_and_every_option() {
    let chart = chart();
    helm(&["lint", "--strict", &chart]);
    helm(&[
        "lint",
        "--strict",
        &chart,
        "--set",
        "replicas=2,runtimeExtension.enabled=true,fleetInstaller.enabled=true,serviceMonitor.enabled=true,certManager.enabled=false,crds.keep=false",
        "--set-json",
        r#"fleetAddonConfig={"cluster":{"patchResource":true},"install":{"followLatest":true}}"#,
    ]);
}

#[test]
fn defaults_render_what_kustomize_renders() {
    let chart = template("caapf-system", &[]);
    let kustomized = documents(&substitute_defaults(&kustomize_text("config/default")));

    // The same objects, except the Namespace (helm install --create-namespace).
    let expected: BTreeSet<_> = identities(&kustomized)
        .into_iter()
        .filter(|(kind, _, _)| kind != "Namespace")
        .collect();
    assert_eq!(identities(&chart), expected);
    for object in &chart {
        assert_eq!(
            object["metadata"]["labels"]["cluster.x-k8s.io/provider"], "addon-fleet",
            "{}",
            object["metadata"]["name"]
        );
    }

    // RBAC rules, Services, the Certificate and Issuer, the CRD: equal.
    for (kind, name, pointer) in [
        ("ClusterRole", "caapf-manager-role", "/rules"),
        ("Role", "caapf-leader-election-role", "/rules"),
        (
            "ClusterRoleBinding",
            "caapf-manager-rolebinding",
            "/subjects",
        ),
        (
            "RoleBinding",
            "caapf-leader-election-rolebinding",
            "/subjects",
        ),
        (
            "Service",
            "caapf-controller-manager-metrics-service",
            "/spec",
        ),
        ("Service", "caapf-webhook-service", "/spec"),
        ("Certificate", "caapf-serving-cert", "/spec"),
        ("Issuer", "caapf-selfsigned-issuer", "/spec"),
        (
            "CustomResourceDefinition",
            "fleetaddonconfigs.addons.cluster.x-k8s.io",
            "/spec",
        ),
    ] {
        assert_eq!(
            find(&chart, kind, name).pointer(pointer),
            find(&kustomized, kind, name).pointer(pointer),
            "{kind} {name} {pointer}"
        );
    }
    let crd = find(
        &chart,
        "CustomResourceDefinition",
        "fleetaddonconfigs.addons.cluster.x-k8s.io",
    );
    assert_eq!(
        crd["metadata"]["annotations"]["helm.sh/resource-policy"], "keep",
        "helm uninstall keeps every FleetAddonConfig"
    );

    // The Deployment: same pod spec apart from the image and args, and args meaning the same.
    let ours = find(&chart, "Deployment", "caapf-controller-manager");
    let theirs = find(&kustomized, "Deployment", "caapf-controller-manager");
    let strip = |d: &Value| {
        without(
            d["spec"].clone(),
            &[
                "/template/spec/containers/0/image",
                "/template/spec/containers/0/args",
            ],
        )
    };
    assert_eq!(strip(ours), strip(theirs));
    let (a, b) = (flags_of(ours), flags_of(theirs));
    assert_eq!(format!("{a:?}"), format!("{b:?}"), "same manager flags");
    assert_eq!(
        ours["spec"]["template"]["spec"]["containers"][0]["image"],
        "ghcr.io/example/cluster-api-addon-provider-fleet:v0.1.0",
        "image tag defaults to the appVersion"
    );
}

#[test]
fn optional_pieces_match_their_kustomizations() {
    let chart = template(
        "caapf-system",
        &[
            "--set",
            "runtimeExtension.enabled=true,runtimeExtension.upgradeSteps.enabled=true,fleetInstaller.enabled=true",
        ],
    );
    for (dir, kind, name, pointer) in [
        (
            "config/extensionconfig/upgrade-steps",
            "ExtensionConfig",
            "caapf-upgrade-steps",
            "/spec",
        ),
        (
            "config/extensionconfig/upgrade-steps",
            "ExtensionConfig",
            "caapf-upgrade-steps",
            "/metadata/annotations",
        ),
        (
            "config/fleet-installer",
            "ClusterRole",
            "caapf-fleet-installer",
            "/rules",
        ),
        (
            "config/fleet-installer",
            "ClusterRoleBinding",
            "caapf-fleet-installer-rolebinding",
            "/subjects",
        ),
        (
            "config/extensionconfig",
            "ClusterRole",
            "caapf-runtime-extension-role",
            "/rules",
        ),
        (
            "config/extensionconfig",
            "ClusterRoleBinding",
            "caapf-runtime-extension-rolebinding",
            "/subjects",
        ),
        (
            "config/extensionconfig",
            "ExtensionConfig",
            "caapf",
            "/spec",
        ),
        (
            "config/extensionconfig",
            "ExtensionConfig",
            "caapf",
            "/metadata/annotations",
        ),
    ] {
        let kustomized = kustomize(dir);
        assert_eq!(
            find(&chart, kind, name).pointer(pointer),
            find(&kustomized, kind, name).pointer(pointer),
            "{kind} {name} {pointer} differs from {dir}"
        );
    }
    // Off by default.
    let defaults = template("caapf-system", &[]);
    for kind in ["ExtensionConfig", "ServiceMonitor", "FleetAddonConfig"] {
        assert!(
            defaults.iter().all(|o| o["kind"] != kind),
            "{kind} rendered by default"
        );
    }
    assert!(
        defaults
            .iter()
            .all(|o| o["metadata"]["name"] != "caapf-fleet-installer"),
        "no installer rights by default"
    );
}

/// `runtimeExtension.beforeClusterDelete.failurePolicy: Fail` reaches the manager's flag, which
/// its discovery advertises (`hooks::handlers::discovery` `before_cluster_delete_can_fail_closed`);
/// one replica renders no PodDisruptionBudget.
#[test]
fn before_cluster_delete_can_fail_closed() {
    let objects = template(
        "fleet-addons",
        &[
            "--set",
            "runtimeExtension.enabled=true,runtimeExtension.beforeClusterDelete.failurePolicy=Fail",
        ],
    );
    let deployment = find(&objects, "Deployment", "caapf-controller-manager");
    assert_eq!(
        flags_of(deployment).before_cluster_delete_failure_policy,
        "Fail"
    );
    assert!(objects.iter().all(|o| o["kind"] != "PodDisruptionBudget"));
}

#[test]
fn values_change_what_they_should() {
    let objects = template(
        "fleet-addons",
        &[
            "--set",
            "replicas=2,image.tag=v9.9.9,logLevel=4,watchFilter=team-a,kubeApi.qps=50,serviceMonitor.enabled=true,certManager.enabled=false,crds.enabled=false",
            "--set-json",
            r#"extraArgs=["--namespace=capi"]"#,
            "--set-json",
            r#"tolerations=[{"key":"node-role.kubernetes.io/control-plane","operator":"Exists","effect":"NoSchedule"}]"#,
            "--set-json",
            r#"fleetAddonConfig={"cluster":{"patchResource":true,"namespaceSelector":{"matchLabels":{"fleet":"on"}}}}"#,
        ],
    );
    let deployment = find(&objects, "Deployment", "caapf-controller-manager");
    assert_eq!(deployment["metadata"]["namespace"], "fleet-addons");
    assert_eq!(deployment["spec"]["replicas"], 2);
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(
        pod["containers"][0]["image"],
        "ghcr.io/example/cluster-api-addon-provider-fleet:v9.9.9"
    );
    assert_eq!(
        pod["tolerations"][0]["key"],
        "node-role.kubernetes.io/control-plane"
    );
    let flags = flags_of(deployment);
    assert!(flags.leader_elect);
    assert_eq!(flags.before_cluster_delete_failure_policy, "Ignore");
    // Two replicas: a PodDisruptionBudget keeps one serving the hooks.
    let budget = find(&objects, "PodDisruptionBudget", "caapf-controller-manager");
    assert_eq!(budget["spec"]["minAvailable"], 1);
    assert_eq!(
        budget["spec"]["selector"]["matchLabels"],
        deployment["spec"]["selector"]["matchLabels"]
    );
    assert_eq!(flags.verbosity, 4);
    assert_eq!(flags.watch_filter_label(), Some("team-a"));
    assert_eq!(flags.kube_api_qps, 50.0);
    assert_eq!(flags.watch_namespace(), Some("capi"));

    let monitor = find(&objects, "ServiceMonitor", "caapf-controller-manager");
    let service = find(
        &objects,
        "Service",
        "caapf-controller-manager-metrics-service",
    );
    for (key, value) in monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("selector")
    {
        assert_eq!(&service["metadata"]["labels"][key], value, "{key}");
    }
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "metrics");

    let config = find(&objects, "FleetAddonConfig", "fleet-addon-config");
    assert_eq!(
        config["spec"],
        json!({"cluster": {"patchResource": true, "namespaceSelector": {"matchLabels": {"fleet": "on"}}}})
    );
    for kind in ["Certificate", "Issuer", "CustomResourceDefinition"] {
        assert!(objects.iter().all(|o| o["kind"] != kind), "{kind} rendered");
    }

    // In another namespace, everything that names the namespace follows it.
    let objects = template("fleet-addons", &["--set", "runtimeExtension.enabled=true"]);
    let certificate = find(&objects, "Certificate", "caapf-serving-cert");
    assert_eq!(
        certificate["spec"]["dnsNames"][0],
        "caapf-webhook-service.fleet-addons.svc"
    );
    let extension = find(&objects, "ExtensionConfig", "caapf");
    assert_eq!(
        extension["spec"]["clientConfig"]["service"]["namespace"],
        "fleet-addons"
    );
    assert_eq!(
        extension["metadata"]["annotations"]["runtime.cluster.x-k8s.io/inject-ca-from-secret"],
        "fleet-addons/caapf-webhook-service-cert"
    );

    // Two replicas without leader election are refused.
    let output = Command::new(helm_bin())
        .args([
            "template",
            "caapf",
            &chart(),
            "--set",
            "replicas=2,leaderElection.enabled=false",
        ])
        .env("HOME", std::env::temp_dir())
        .output()
        .expect("helm runs");
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("needs leaderElection.enabled"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn the_chart_crd_is_the_generated_one() {
    let generated = std::fs::read_to_string(
        root().join("config/crd/bases/addons.cluster.x-k8s.io_fleetaddonconfigs.yaml"),
    )
    .expect("generated CRD");
    let copied = std::fs::read_to_string(root().join(CHART).join("files/fleetaddonconfigs.yaml"))
        .expect("chart CRD");
    assert!(
        generated == copied,
        "charts/.../files/fleetaddonconfigs.yaml differs from config/crd/bases: run `make generate`"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_installs_the_chart_against_an_api_server() {
    // Cluster API and Fleet kinds but not our CRD (the chart installs it); cert-manager's and
    // the Prometheus Operator's kinds as permissive CRDs, as those operators would register them.
    let mut options = SandboxOptions {
        crds: vec![
            kube_sandbox::CrdSet::Capi,
            kube_sandbox::CrdSet::Bootstrap,
            kube_sandbox::CrdSet::Fleet,
        ],
        ..SandboxOptions::default()
    };
    for (group, kind, plural) in [
        ("cert-manager.io", "Issuer", "issuers"),
        ("cert-manager.io", "Certificate", "certificates"),
        ("monitoring.coreos.com", "ServiceMonitor", "servicemonitors"),
    ] {
        options.extra_crds.push(kube_sandbox::crds::permissive_crd(
            group,
            kind,
            plural,
            &["v1"],
            "v1",
            true,
            &[],
            &[],
            true,
            Value::Null,
        ));
    }
    let sandbox = Sandbox::start_with(options).await.expect("sandbox");
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    sandbox.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let kubeconfig = kubeconfig.display().to_string();
    let chart = chart();
    let install = tokio::task::spawn_blocking(move || {
        helm(&[
            "install",
            "caapf",
            &chart,
            "--kubeconfig",
            &kubeconfig,
            "--namespace",
            "caapf-system",
            "--create-namespace",
            "--set",
            "serviceMonitor.enabled=true,replicas=2,runtimeExtension.enabled=true,fleetInstaller.enabled=true",
            "--wait",
            "--timeout",
            "60s",
        ])
    })
    .await
    .expect("helm install");
    assert!(install.contains("STATUS: deployed"), "{install}");
    let deployments: kube::Api<k8s_openapi::api::apps::v1::Deployment> =
        kube::Api::namespaced(sandbox.client(), "caapf-system");
    let deployment = deployments
        .get("caapf-controller-manager")
        .await
        .expect("deployment");
    assert_eq!(deployment.spec.and_then(|s| s.replicas), Some(2));
    let crds: kube::Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        kube::Api::all(sandbox.client());
    crds.get("fleetaddonconfigs.addons.cluster.x-k8s.io")
        .await
        .expect("CRD installed");
}
