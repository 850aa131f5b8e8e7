//! `caapf move-preview` against the sandbox API server: the binary discovers a Cluster's objects
//! like clusterctl (CRDs labelled `clusterctl.cluster.x-k8s.io`, Secrets, the provider inventory),
//! prints the creation groups and the Bundles, and writes nothing.

mod common;

use std::process::{Command, Output};

use common::{Harness, eventually};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

/// Runs the binary off the runtime thread, so the sandbox (served by this runtime) answers it.
async fn caapf(args: &[&str], kubeconfig: &std::path::Path) -> Output {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let kubeconfig = kubeconfig.to_path_buf();
    tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_caapf"))
            .args(&args)
            .env("KUBECONFIG", &kubeconfig)
            .env_remove("RUST_LOG")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .output()
            .expect("caapf runs")
    })
    .await
    .expect("caapf task")
}

async fn create(
    client: &Client,
    api_version: &str,
    kind: &str,
    plural: &str,
    body: Value,
) -> String {
    let ar = resource(api_version, kind, plural);
    let mut object = body;
    object["apiVersion"] = json!(api_version);
    object["kind"] = json!(kind);
    let namespace = object["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default")
        .to_string();
    let object: DynamicObject = serde_json::from_value(object).expect("object");
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &ar);
    let created = api
        .create(&PostParams::default(), &object)
        .await
        .expect("create");
    created.uid().expect("uid")
}

/// A Secret in `default` from `body` (metadata and data); its UID.
async fn create_secret(client: &Client, body: Value) -> String {
    create(client, "v1", "Secret", "secrets", body).await
}

fn resource(api_version: &str, kind: &str, plural: &str) -> ApiResource {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn owner(api_version: &str, kind: &str, name: &str, uid: &str) -> Value {
    json!([{"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": true}])
}

#[tokio::test]
async fn preview_prints_the_graph_and_the_bundles_and_writes_nothing() {
    let h = Harness::new().await;
    let client = h.client.clone();

    // Before clusterctl's labels: the preview names what is missing and how to fix it.
    let early = tempfile::tempdir().expect("tempdir");
    let early_kubeconfig = early.path().join("kubeconfig");
    h.sandbox
        .write_kubeconfig(&early_kubeconfig)
        .expect("kubeconfig");
    let out = caapf(&["move-preview", "default/c1"], &early_kubeconfig).await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("carries the label clusterctl.cluster.x-k8s.io")
            && stderr.contains("kubectl label crd"),
        "{stderr}"
    );

    // clusterctl labels every provider CRD; the inventory CRD comes with clusterctl itself.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in [
        "clusters.cluster.x-k8s.io",
        "kubeadmcontrolplanes.controlplane.cluster.x-k8s.io",
        "dockerclusters.infrastructure.cluster.x-k8s.io",
    ] {
        crds.patch(
            crd,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"clusterctl.cluster.x-k8s.io": ""}}})),
        )
        .await
        .expect("label CRD");
    }
    let mut inventory = kube_sandbox::crds::permissive_crd(
        "clusterctl.cluster.x-k8s.io",
        "Provider",
        "providers",
        &["v1alpha3"],
        "v1alpha3",
        true,
        &[],
        &[],
        false,
        json!({"clusterctl.cluster.x-k8s.io/core": "inventory"}),
    );
    // The inventory's fields are top-level (clusterctl `api/v1alpha3/provider_type.go`).
    for field in ["providerName", "type", "version"] {
        inventory["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][field] =
            json!({"type": "string"});
    }
    let inventory: CustomResourceDefinition =
        serde_json::from_value(inventory).expect("inventory CRD");
    crds.create(&PostParams::default(), &inventory)
        .await
        .expect("inventory CRD");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": "capi-system"}})).unwrap();
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace");
    eventually("the inventory type is served", || {
        let client = client.clone();
        async move {
            let ar = resource(
                "clusterctl.cluster.x-k8s.io/v1alpha3",
                "Provider",
                "providers",
            );
            let api: Api<DynamicObject> = Api::all_with(client, &ar);
            api.list(&Default::default()).await.ok().map(|_| ())
        }
    })
    .await;
    create(
        &client,
        "clusterctl.cluster.x-k8s.io/v1alpha3",
        "Provider",
        "providers",
        json!({"metadata": {"name": "cluster-api", "namespace": "capi-system"},
            "providerName": "cluster-api", "type": "CoreProvider", "version": "v1.11.0"}),
    )
    .await;

    let cluster = h
        .cluster(
            "default",
            json!({"metadata": {"name": "c1"}, "spec": {
                "controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": "c1-cp"},
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerCluster", "name": "c1"}}}),
        )
        .await;
    let c1 = cluster.uid().expect("uid");
    h.cluster("default", json!({"metadata": {"name": "c2"}, "spec": {}}))
        .await;
    let kcp = create(
        &client,
        "controlplane.cluster.x-k8s.io/v1beta2",
        "KubeadmControlPlane",
        "kubeadmcontrolplanes",
        json!({"metadata": {"name": "c1-cp", "ownerReferences": owner("cluster.x-k8s.io/v1beta2", "Cluster", "c1", &c1)},
            "spec": {"replicas": 1, "version": "v1.33.0"}}),
    )
    .await;
    create(
        &client,
        "infrastructure.cluster.x-k8s.io/v1beta2",
        "DockerCluster",
        "dockerclusters",
        json!({"metadata": {"name": "c1", "ownerReferences": owner("cluster.x-k8s.io/v1beta2", "Cluster", "c1", &c1)},
            "spec": {}}),
    )
    .await;
    create_secret(
        &client,
        json!({"metadata": {"name": "c1-kubeconfig", "ownerReferences": owner("controlplane.cluster.x-k8s.io/v1beta2", "KubeadmControlPlane", "c1-cp", &kcp)},
            "data": {"value": "a3ViZWNvbmZpZw=="}}),
    )
    .await;
    for name in ["c1-etcd", "c2-etcd"] {
        create_secret(&client, json!({"metadata": {"name": name}, "data": {}})).await;
    }

    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    h.sandbox.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let writes = h.sandbox.write_count();

    let out = caapf(&["move-preview", "default/c1"], &kubeconfig).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout,
        "Cluster default/c1: 5 objects in 3 creation groups
  group 01:
    Cluster default/c1
  group 02:
    KubeadmControlPlane default/c1-cp
    DockerCluster default/c1
    Secret default/c1-etcd
  group 03:
    Secret default/c1-kubeconfig
Providers (1 objects):
  CoreProvider capi-system/cluster-api v1.11.0
Bundles in namespace default targeting Fleet Cluster c1:
  c1-move-providers: 2 resources
  c1-move-01: 1 resources (after c1-move-providers)
  c1-move-02: 3 resources (after c1-move-01)
  c1-move-03: 1 resources (after c1-move-02)
"
    );

    let out = caapf(
        &["move-preview", "default/c1", "--output", "yaml"],
        &kubeconfig,
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bundles = common::render::documents(&String::from_utf8_lossy(&out.stdout));
    let names: Vec<&str> = bundles
        .iter()
        .map(|b| b["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "c1-move-providers",
            "c1-move-01",
            "c1-move-02",
            "c1-move-03"
        ]
    );
    let kubeconfig_secret = bundles[3]["spec"]["resources"][0]["content"]
        .as_str()
        .unwrap();
    assert!(
        kubeconfig_secret.contains(r#"(lookup "controlplane.cluster.x-k8s.io/v1beta2" "KubeadmControlPlane" "default" "c1-cp")"#),
        "{kubeconfig_secret}"
    );
    assert!(
        !kubeconfig_secret.contains(&kcp),
        "source UIDs must not travel"
    );
    let cluster_copy = bundles[1]["spec"]["resources"][0]["content"]
        .as_str()
        .unwrap();
    assert!(cluster_copy.contains("paused: true"), "{cluster_copy}");

    let out = caapf(&["move-preview", "default/nope"], &kubeconfig).await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(caapf::move_preview::EXPERIMENTAL_NOTE),
        "move-preview says the move is unproven: {stderr}"
    );
    assert!(
        stderr.contains("Cluster default/nope is not among the objects read"),
        "{stderr}"
    );

    assert_eq!(
        h.sandbox.write_count(),
        writes,
        "move-preview must not write"
    );
}

/// Renders one Bundle resource with the real `helm template` (no cluster: `lookup` finds nothing).
fn helm_template(content: &str) -> Output {
    let dir = tempfile::tempdir().expect("tempdir");
    let chart = dir.path().join("chart");
    std::fs::create_dir_all(chart.join("templates")).expect("chart dir");
    std::fs::write(
        chart.join("Chart.yaml"),
        "apiVersion: v2\nname: move\nversion: 0.0.0\n",
    )
    .expect("Chart.yaml");
    std::fs::write(chart.join("templates/000-object.yaml"), content).expect("template");
    let home = dir.path().join("home");
    Command::new(common::render::helm_bin())
        .args(["template", "move"])
        .arg(&chart)
        .env("HOME", &home)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .env_remove("KUBECONFIG")
        .output()
        .expect("helm runs")
}

fn node(
    object: Value,
    owners: Vec<caapf::model::move_graph::OwnerLink>,
) -> caapf::model::move_graph::MoveNode {
    let object: DynamicObject = serde_json::from_value(object).expect("object");
    let tm = object.types.clone().expect("types");
    caapf::model::move_graph::MoveNode {
        id: caapf::model::move_graph::ObjectId {
            api_version: tm.api_version,
            kind: tm.kind,
            namespace: object.metadata.namespace.clone(),
            name: object.name_any(),
        },
        owners,
        blocking: false,
        object,
        exclusive: true,
        global: false,
    }
}

#[test]
fn helm_renders_copies_verbatim_and_refuses_missing_owners() {
    use caapf::model::move_plan::{render_node, set_paused, strip_for_target};
    // Go templates inside the object (ClusterClass patches) come out as written.
    let class = json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "ClusterClass",
        "metadata": {"name": "cc", "namespace": "default", "uid": "u-cc", "resourceVersion": "7"},
        "spec": {"patches": [{"name": "p", "definitions": [{"jsonPatches": [{"op": "add", "path": "/spec/x",
            "valueFrom": {"template": "{{ .builtin.cluster.name }}-{{ printf \"%s\" .x }} }} {{"}}]}]}]}
    });
    let class = node(class, vec![]);
    let out = helm_template(&render_node(&class, true).expect("render"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rendered = common::render::documents(&String::from_utf8_lossy(&out.stdout));
    let mut want = strip_for_target(&class.object);
    set_paused(&mut want, true);
    assert_eq!(rendered, vec![want]);

    // An owner that is not on the target fails the install with a message naming it.
    let secret = node(
        json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "c1-kubeconfig", "namespace": "default", "uid": "u-s"}, "data": {}}),
        vec![caapf::model::move_graph::OwnerLink {
            api_version: "controlplane.cluster.x-k8s.io/v1beta2".into(),
            kind: "KubeadmControlPlane".into(),
            name: "c1-cp".into(),
            namespace: Some("default".into()),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }],
    );
    let out = helm_template(&render_node(&secret, true).expect("render"));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("owner KubeadmControlPlane default/c1-cp not found on the target"),
        "{stderr}"
    );
}
