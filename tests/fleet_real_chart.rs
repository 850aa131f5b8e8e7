//! Fleet installed by the provider from charts with the structure of Fleet's real ones
//! (`rancher/fleet` `charts/fleet-crd` and `charts/fleet`: several CRDs in `fleet-crd`;
//! ServiceAccounts, ClusterRoles and bindings, the `fleet-controller` and `gitjob` Deployments
//! and the `fleet-controller` ConfigMap with a JSON `config` in `fleet`), into a sandbox started
//! without the Fleet CRDs, then a Cluster imported against the CRDs the chart installed.
//! The charts are small doubles written here, not Fleet's.

mod common;
#[path = "fleet_common/mod.rs"]
mod fleet_common;

use std::path::Path;

use common::{Harness, eventually};
use kube::api::Api;
use kube_sandbox::{CrdSet, SandboxOptions};
use serde_json::json;

const VERSION: &str = "0.13.4";

fn write(dir: &Path, rel: &str, text: &str) {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, text).expect("write");
}

/// `fleet-crd`: the Fleet CRDs (the sandbox's copies of Fleet's schemas), one file per CRD as
/// in Fleet's chart.
fn fleet_crd_chart(root: &Path) -> std::path::PathBuf {
    let chart = root.join("src/fleet-crd");
    write(
        &chart,
        "Chart.yaml",
        &format!(
            "apiVersion: v2\nname: fleet-crd\nversion: {VERSION}\nappVersion: \"{VERSION}\"\n"
        ),
    );
    write(&chart, "values.yaml", "");
    let crds = CrdSet::Fleet.crds();
    assert!(crds.len() > 3, "several CRDs");
    for crd in crds {
        let name = crd["metadata"]["name"].as_str().expect("name").to_string();
        write(
            &chart,
            &format!("templates/{name}.yaml"),
            &serde_yaml::to_string(&crd).expect("yaml"),
        );
    }
    fleet_common::package_chart(&chart, &root.join("packages"))
}

/// `fleet`: the controller and gitjob Deployments with their ServiceAccounts and RBAC, and the
/// `fleet-controller` ConfigMap whose `config` key holds JSON, as Fleet's chart renders them.
fn fleet_chart(root: &Path) -> std::path::PathBuf {
    let chart = root.join("src/fleet");
    write(
        &chart,
        "Chart.yaml",
        &format!("apiVersion: v2\nname: fleet\nversion: {VERSION}\nappVersion: \"{VERSION}\"\n"),
    );
    write(
        &chart,
        "values.yaml",
        "apiServerURL: \"\"\napiServerCA: \"\"\nbootstrap:\n  enabled: true\nextraEnv: []\nreplicas: 1\n",
    );
    write(
        &chart,
        "templates/configmap.yaml",
        r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: fleet-controller
data:
  config: |
    {
      "apiServerURL": {{ .Values.apiServerURL | quote }},
      "apiServerCA": {{ b64enc .Values.apiServerCA | quote }},
      "agentCheckinInterval": "15m",
      "bootstrap": {"namespace": "fleet-local", "agentNamespace": "cattle-fleet-local-system"}
    }
"#,
    );
    for (name, image) in [
        ("fleet-controller", "rancher/fleet"),
        ("gitjob", "rancher/fleet"),
    ] {
        write(
            &chart,
            &format!("templates/{name}.yaml"),
            &format!(
                r#"apiVersion: v1
kind: ServiceAccount
metadata:
  name: {name}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {name}
rules:
- apiGroups: ["fleet.cattle.io"]
  resources: ["*"]
  verbs: ["*"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {name}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {name}
subjects:
- kind: ServiceAccount
  name: {name}
  namespace: {{{{ .Release.Namespace }}}}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
spec:
  replicas: {{{{ .Values.replicas }}}}
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      serviceAccountName: {name}
      containers:
      - name: {name}
        image: {image}:v{{{{ .Chart.AppVersion }}}}
        env:
        {{{{- range .Values.extraEnv }}}}
        - name: {{{{ .name }}}}
          value: {{{{ .value | quote }}}}
        {{{{- end }}}}
"#
            ),
        );
    }
    fleet_common::package_chart(&chart, &root.join("packages"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_from_a_chart_with_the_real_structure_then_a_cluster_is_imported() {
    let charts = tempfile::tempdir().expect("tempdir");
    let repo = fleet_common::ChartRepo::start(&[]).await;
    repo.add_package(&fleet_crd_chart(charts.path()));
    repo.add_package(&fleet_chart(charts.path()));

    let mut h = Harness::with_options(SandboxOptions {
        crds: vec![CrdSet::Capi, CrdSet::Bootstrap, CrdSet::Provider],
        ..Default::default()
    })
    .await;
    let fleet_clusters = "/apis/fleet.cattle.io/v1alpha1/clusters";
    let served = |client: kube::Client| async move {
        client
            .request_text(
                http::Request::get(fleet_clusters)
                    .body(Vec::new())
                    .expect("request"),
            )
            .await
            .is_ok()
    };
    assert!(!served(h.client.clone()).await, "Fleet CRDs preloaded");
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    h.sandbox.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    h.flags.helm_binary = fleet_common::helm_bin().display().to_string();
    h.flags.helm_kubeconfig = Some(kubeconfig);
    h.flags.helm_home = Some(dir.path().join("helm-home"));
    h.namespace("team-a", json!({})).await;
    h.start().await;
    h.config(&format!(
        "cluster: {{}}\ninstall: {{version: {VERSION}, repository: \"{}\"}}\nconfig: {{server: {{custom: {{apiServerUrl: \"https://fleet.example.com\"}}}}}}",
        repo.url()
    ))
    .await;
    let client = h.client.clone();
    eventually("Fleet installed from the chart", || {
        let client = client.clone();
        async move {
            let config: caapf::api::FleetAddonConfig = Api::all(client)
                .get_opt("fleet-addon-config")
                .await
                .expect("config")?;
            let ready = fleet_common::condition(&config, "Ready")?;
            (ready.status == "True").then_some(())
        }
    })
    .await;
    assert!(
        served(h.client.clone()).await,
        "the chart installed the CRDs"
    );
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(h.client.clone(), "cattle-fleet-system");
    for name in ["fleet-controller", "gitjob"] {
        deployments
            .get(name)
            .await
            .expect("Deployment from the chart");
    }

    h.cluster(
        "team-a",
        json!({"metadata": {"name": "c1"}, "spec": {
            "controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": "c1-cp"},
            "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerCluster", "name": "c1-infra"}
        }}),
    )
    .await;
    h.initialize("team-a", "c1").await;
    eventually("the Cluster imported against the chart's CRDs", || async {
        h.fleet_cluster("team-a", "c1").await.map(|_| ())
    })
    .await;
    h.stop().await;
}
