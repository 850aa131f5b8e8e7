//! Table tests of the move Bundles: stripped fields, pause, owner re-linking templates, escaping,
//! Bundle shape and chaining, provider objects from the inventory or the operator.

use super::*;
use crate::model::move_fixtures::*;
use crate::model::move_graph::{MoveNode, ObjectId, move_graph};
use serde_json::json;

fn node(object: DynamicObject, owners: Vec<OwnerLink>) -> MoveNode {
    let tm = object.types.clone().unwrap();
    MoveNode {
        id: ObjectId {
            api_version: tm.api_version,
            kind: tm.kind,
            namespace: object.metadata.namespace.clone(),
            name: object.metadata.name.clone().unwrap_or_default(),
        },
        owners,
        blocking: false,
        object,
        exclusive: true,
        global: false,
    }
}

#[test]
fn strip_for_target_removes_server_fields_and_status() {
    let mut object = obj(
        CAPI,
        "Machine",
        "default",
        "m",
        "u-m",
        &[(CAPI, "MachineSet", "ms", "u-ms", true)],
        &[("cluster.x-k8s.io/cluster-name", "c1")],
        json!({"spec": {"clusterName": "c1"}, "status": {"phase": "Running"}}),
    );
    object.metadata.generate_name = Some("m-".into());
    object.metadata.generation = Some(3);
    object.metadata.annotations = Some([("keep".to_string(), "me".to_string())].into());
    object.metadata.managed_fields = Some(vec![Default::default()]);
    let got = strip_for_target(&object);
    assert_eq!(
        got,
        json!({
            "apiVersion": CAPI, "kind": "Machine",
            "metadata": {"name": "m", "namespace": "default",
                "labels": {"cluster.x-k8s.io/cluster-name": "c1"}, "annotations": {"keep": "me"}},
            "spec": {"clusterName": "c1"},
        })
    );
}

#[test]
fn strip_for_target_removes_the_marks_of_the_move() {
    let mut object = obj(
        CAPI,
        "Cluster",
        "default",
        "c1",
        "u-c1",
        &[],
        &[
            (crate::model::move_state::SELF_MANAGED_LABEL, "true"),
            ("team", "a"),
        ],
        json!({"spec": {"paused": true}}),
    );
    object.metadata.annotations = Some(
        [(
            crate::model::move_state::MOVE_STATE_ANNOTATION.to_string(),
            r#"{"phase":"Publishing","since":1}"#.to_string(),
        )]
        .into(),
    );
    object.metadata.finalizers = Some(vec![
        crate::names::FINALIZER.to_string(),
        "cluster.cluster.x-k8s.io".to_string(),
    ]);
    let got = strip_for_target(&object);
    assert_eq!(
        got["metadata"],
        json!({"name": "c1", "namespace": "default", "labels": {"team": "a"},
            "finalizers": ["cluster.cluster.x-k8s.io"]})
    );
    object.metadata.finalizers = Some(vec![crate::names::FINALIZER.to_string()]);
    object.metadata.labels = None;
    let got = strip_for_target(&object);
    assert_eq!(
        got["metadata"],
        json!({"name": "c1", "namespace": "default"})
    );
}

#[test]
fn set_paused_on_clusters_and_classes_only() {
    let cases = [
        (
            json!({"apiVersion": CAPI, "kind": "Cluster", "spec": {}}),
            true,
            json!({"apiVersion": CAPI, "kind": "Cluster", "spec": {"paused": true}}),
        ),
        (
            json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "spec": {"paused": true}}),
            false,
            json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "spec": {"paused": false}}),
        ),
        (
            json!({"apiVersion": CAPI, "kind": "ClusterClass", "metadata": {"name": "cc"}}),
            true,
            json!({"apiVersion": CAPI, "kind": "ClusterClass",
                "metadata": {"name": "cc", "annotations": {"cluster.x-k8s.io/paused": ""}}}),
        ),
        (
            json!({"apiVersion": CAPI, "kind": "ClusterClass",
                "metadata": {"name": "cc", "annotations": {"cluster.x-k8s.io/paused": ""}}}),
            false,
            json!({"apiVersion": CAPI, "kind": "ClusterClass", "metadata": {"name": "cc"}}),
        ),
        (
            json!({"apiVersion": INFRA, "kind": "Cluster", "spec": {}}),
            true,
            json!({"apiVersion": INFRA, "kind": "Cluster", "spec": {}}),
        ),
    ];
    for (mut input, paused, want) in cases {
        set_paused(&mut input, paused);
        assert_eq!(input, want);
    }
}

#[test]
fn owners_are_looked_up_on_the_target() {
    let machine = node(
        obj(
            CAPI,
            "Machine",
            "default",
            "c1-cp-0",
            "u-m0",
            &[],
            &[],
            json!({"spec": {}}),
        ),
        vec![OwnerLink {
            api_version: CP.into(),
            kind: "KubeadmControlPlane".into(),
            name: "c1-cp".into(),
            namespace: Some("default".into()),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }],
    );
    let text = render_node(&machine, true).unwrap();
    let lookup = r#"{{ required "owner KubeadmControlPlane default/c1-cp not found on the target" (dig "metadata" "uid" "" (lookup "controlplane.cluster.x-k8s.io/v1beta2" "KubeadmControlPlane" "default" "c1-cp")) | quote }}"#;
    assert!(
        text.contains(&format!("uid: {lookup}")),
        "no lookup in:\n{text}"
    );
    assert!(text.contains("controller: true") && text.contains("blockOwnerDeletion: true"));
    assert!(
        !text.contains("u-m0"),
        "the source UID must not travel:\n{text}"
    );
    assert!(!text.contains("resourceVersion"));
}

#[test]
fn template_text_is_escaped() {
    let class = obj(
        CAPI,
        "ClusterClass",
        "default",
        "cc",
        "u-cc",
        &[],
        &[],
        json!({"spec": {"patches": [{"template": "{{ .builtin.cluster.name }}"}]}}),
    );
    let text = render_node(&node(class, vec![]), false).unwrap();
    assert!(
        text.contains("'{{`{{`}} .builtin.cluster.name }}'"),
        "unescaped:\n{text}"
    );
    assert_eq!(
        escape_template("a {{ b }} {{c"),
        "a {{`{{`}} b }} {{`{{`}}c"
    );
}

#[test]
fn reserved_text_is_refused() {
    let secret = obj(
        "v1",
        "Secret",
        "default",
        "s",
        "u-s",
        &[],
        &[],
        json!({"stringData": {"x": "__caapf_move_owner_uid_0"}}),
    );
    assert_eq!(
        render_node(&node(secret, vec![]), true),
        Err(PlanError::ReservedText("Secret default/s".into()))
    );
}

#[test]
fn cluster_copies_are_paused_while_publishing_and_resumed_after() {
    let graph = move_graph("default", "c1", &kubeadm_objects(), &test_types()).unwrap();
    let cluster = graph.nodes().find(|n| n.id.kind == "Cluster").unwrap();
    assert!(render_node(cluster, true).unwrap().contains("paused: true"));
    assert!(
        render_node(cluster, false)
            .unwrap()
            .contains("paused: false")
    );
}

fn plan(graph: &MoveGraph, providers: &ProviderPlan, namespace: &str, cluster: &str) -> Vec<Value> {
    bundles(&PlanInput {
        cluster_namespace: namespace,
        cluster_name: cluster,
        fleet_cluster_name: "fleet-c1",
        graph,
        providers,
        target_paused: true,
    })
    .unwrap()
}

#[test]
fn bundles_chain_providers_then_groups_on_one_fleet_cluster() {
    let graph = move_graph("default", "c1", &kubeadm_objects(), &test_types()).unwrap();
    let providers = provider_plan(&inventory(), &[], &[]);
    let bundles = plan(&graph, &providers, "default", "c1");
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
            "c1-move-03",
            "c1-move-04",
            "c1-move-05"
        ]
    );
    for (i, bundle) in bundles.iter().enumerate() {
        assert_eq!(bundle["apiVersion"], "fleet.cattle.io/v1alpha1");
        assert_eq!(bundle["metadata"]["namespace"], "default");
        assert_eq!(bundle["metadata"]["labels"][MOVE_CLUSTER_LABEL], "c1");
        assert_eq!(
            bundle["spec"]["targets"],
            json!([{"clusterName": "fleet-c1"}])
        );
        assert_eq!(bundle["spec"]["keepResources"], true);
        assert_eq!(bundle["spec"]["defaultNamespace"], "default");
        if i == 0 {
            assert!(bundle["spec"].get("dependsOn").is_none());
            assert_eq!(bundle["metadata"]["labels"][MOVE_STEP_LABEL], "providers");
        } else {
            assert_eq!(bundle["spec"]["dependsOn"], json!([{"name": names[i - 1]}]));
            assert_eq!(
                bundle["metadata"]["labels"][MOVE_STEP_LABEL],
                format!("{i:02}")
            );
        }
    }
    let group1: Vec<&str> = bundles[1]["spec"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        group1,
        [
            "templates/000-clusterresourceset-crs.yaml",
            "templates/001-cluster-c1.yaml",
            "templates/002-configmap-moved.yaml"
        ]
    );
    // The providers live in their own namespaces: created (or adopted) by the Bundle.
    let provider_resources = bundles[0]["spec"]["resources"].as_array().unwrap();
    assert!(
        provider_resources
            .iter()
            .any(|r| r["name"] == "templates/namespace-capi-system.yaml")
    );
    assert_eq!(bundles[0]["spec"]["helm"]["takeOwnership"], true);
    assert!(bundles[1]["spec"].get("helm").is_none());
}

#[test]
fn no_providers_bundle_when_there_are_no_providers() {
    let graph = move_graph("fleet", "r1", &rke2_topology_objects(), &test_types()).unwrap();
    let bundles = plan(&graph, &ProviderPlan::default(), "fleet", "r1");
    assert_eq!(bundles[0]["metadata"]["name"], "r1-move-01");
    assert!(bundles[0]["spec"].get("dependsOn").is_none());
}

#[test]
fn class_in_another_namespace_brings_its_namespace() {
    let graph = move_graph("tenant", "t1", &external_class_objects(), &test_types()).unwrap();
    let bundles = plan(&graph, &ProviderPlan::default(), "tenant", "t1");
    let resources = bundles[0]["spec"]["resources"].as_array().unwrap();
    assert!(resources.iter().any(|r| {
        r["name"] == "templates/namespace-classes.yaml"
            && r["content"]
                .as_str()
                .unwrap()
                .contains("helm.sh/resource-policy: keep")
    }));
}

#[test]
fn long_names_are_bounded_and_stable() {
    let long = "a".repeat(60);
    let name = group_bundle_name(&long, 0);
    assert!(name.len() <= 53, "{name}");
    assert_eq!(name, group_bundle_name(&long, 0));
    assert_ne!(name, group_bundle_name(&long, 1));
    assert_eq!(providers_bundle_name("c1"), "c1-move-providers");
}

fn inventory() -> Vec<DynamicObject> {
    let entry = |ns: &str, name: &str, provider: &str, kind: &str, version: &str| {
        obj(
            INVENTORY_API_VERSION,
            "Provider",
            ns,
            name,
            &format!("u-{name}"),
            &[],
            &[],
            json!({"providerName": provider, "type": kind, "version": version}),
        )
    };
    vec![
        entry(
            "capd-system",
            "infrastructure-docker",
            "docker",
            "InfrastructureProvider",
            "v1.11.0",
        ),
        entry(
            "capi-system",
            "cluster-api",
            "cluster-api",
            "CoreProvider",
            "v1.11.0",
        ),
        entry(
            "capi-kubeadm-bootstrap-system",
            "bootstrap-kubeadm",
            "kubeadm",
            "BootstrapProvider",
            "v1.11.0",
        ),
        entry(
            "caapf-system",
            "addon-fleet",
            "fleet",
            "AddonProvider",
            "v0.12.0",
        ),
        entry(
            "capx-system",
            "infrastructure-custom",
            "custom",
            "InfrastructureProvider",
            "v0.1.0",
        ),
        entry("odd-system", "odd", "odd", "SomethingElse", "v1"),
    ]
}

#[test]
fn providers_from_the_inventory() {
    let plan = provider_plan(&inventory(), &[], &[]);
    let got: Vec<(String, String, String, String)> = plan
        .objects
        .iter()
        .map(|o| {
            (
                o["kind"].as_str().unwrap().to_string(),
                o["metadata"]["namespace"].as_str().unwrap().to_string(),
                o["metadata"]["name"].as_str().unwrap().to_string(),
                o["spec"]["version"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want = [
        ("CoreProvider", "capi-system", "cluster-api", "v1.11.0"),
        (
            "BootstrapProvider",
            "capi-kubeadm-bootstrap-system",
            "kubeadm",
            "v1.11.0",
        ),
        ("InfrastructureProvider", "capd-system", "docker", "v1.11.0"),
        ("InfrastructureProvider", "capx-system", "custom", "v0.1.0"),
        ("AddonProvider", "caapf-system", "fleet", "v0.12.0"),
    ];
    let want: Vec<(String, String, String, String)> = want
        .iter()
        .map(|(a, b, c, d)| (a.to_string(), b.to_string(), c.to_string(), d.to_string()))
        .collect();
    assert_eq!(got, want);
    assert!(
        plan.objects
            .iter()
            .all(|o| o["apiVersion"] == OPERATOR_API_VERSION)
    );
    assert_eq!(
        plan.warnings,
        vec![
            "InfrastructureProvider capx-system/custom: set spec.fetchConfig on the target if the operator does not know this provider".to_string(),
            "inventory entry odd-system/odd: unknown provider type \"SomethingElse\", skipped".to_string(),
        ]
    );
}

#[test]
fn operator_objects_win_over_the_inventory_and_bring_their_config_secret() {
    let core = obj(
        OPERATOR_API_VERSION,
        "CoreProvider",
        "capi-system",
        "cluster-api",
        "u-core",
        &[],
        &[],
        json!({"spec": {"version": "v1.11.0"}, "status": {"installedVersion": "v1.11.0"}}),
    );
    let aws = obj(
        OPERATOR_API_VERSION,
        "InfrastructureProvider",
        "capa-system",
        "aws",
        "u-aws",
        &[],
        &[],
        json!({"spec": {"version": "v2.8.0", "configSecret": {"name": "aws-variables"}}}),
    );
    let azure = obj(
        OPERATOR_API_VERSION,
        "InfrastructureProvider",
        "capz-system",
        "azure",
        "u-azure",
        &[],
        &[],
        json!({"spec": {"configSecret": {"name": "azure-variables", "namespace": "secrets"}}}),
    );
    let secret = obj(
        "v1",
        "Secret",
        "capa-system",
        "aws-variables",
        "u-sec",
        &[],
        &[],
        json!({"data": {"AWS_B64ENCODED_CREDENTIALS": "eA=="}}),
    );
    let plan = provider_plan(&inventory(), &[aws, core, azure], &[secret]);
    let got: Vec<String> = plan
        .objects
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap(),
                o["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            "CoreProvider/cluster-api",
            "Secret/aws-variables",
            "InfrastructureProvider/aws",
            "InfrastructureProvider/azure"
        ]
    );
    assert!(plan.objects[0].get("status").is_none());
    assert!(plan.objects[0]["metadata"].get("uid").is_none());
    assert_eq!(
        plan.warnings,
        vec!["InfrastructureProvider capz-system/azure: spec.configSecret secrets/azure-variables not found; create it on the target".to_string()]
    );
}
