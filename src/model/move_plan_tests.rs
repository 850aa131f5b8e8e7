//! Table tests of the move Bundles: stripped fields, pause, owner re-linking templates, escaping,
//! Bundle shape and chaining, provider objects from the inventory or the operator.

use super::*;
use crate::model::move_fixtures::*;
use crate::model::move_graph::{MoveNode, ObjectId, OwnerLink, move_graph};
use serde_json::json;
use std::collections::BTreeSet;

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
        (
            json!({"apiVersion": ADDONS, "kind": "ClusterResourceSet", "metadata": {"name": "crs"}}),
            true,
            json!({"apiVersion": ADDONS, "kind": "ClusterResourceSet",
                "metadata": {"name": "crs", "annotations": {"cluster.x-k8s.io/paused": ""}}}),
        ),
    ];
    for (mut input, paused, want) in cases {
        set_paused(&mut input, paused);
        assert_eq!(input, want);
    }
}

#[test]
fn copies_carry_no_owner_references_and_no_template_action() {
    let machine = node(
        obj(
            CAPI,
            "Machine",
            "default",
            "c1-cp-0",
            "u-m0",
            &[(CP, "KubeadmControlPlane", "c1-cp", "u-kcp", true)],
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
    let text = render_node(&machine, "default/c1", true).unwrap();
    assert!(!text.contains("ownerReferences"), "{text}");
    assert!(!text.contains("u-m0") && !text.contains("u-kcp"), "{text}");
    assert!(!text.contains("resourceVersion"));
    // Nothing for Fleet's agent to run: no template action at all.
    assert!(!text.contains("{{"), "{text}");
    assert!(
        text.contains(&format!("{MOVE_COPY_ANNOTATION}: default/c1")),
        "{text}"
    );
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
    let text = render_node(&node(class, vec![]), "default/c1", false).unwrap();
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
fn the_fence_of_the_source_does_not_travel() {
    let mut fenced = obj(
        CAPI,
        "MachineDeployment",
        "default",
        "md",
        "u-md",
        &[],
        &[],
        json!({"spec": {}}),
    );
    fenced.metadata.annotations = Some(
        [
            (
                crate::names::CAPI_PAUSED_ANNOTATION.to_string(),
                String::new(),
            ),
            (MOVE_FENCE_ANNOTATION.to_string(), "default/c1".to_string()),
            ("keep".to_string(), "me".to_string()),
        ]
        .into(),
    );
    assert_eq!(
        strip_for_target(&fenced)["metadata"]["annotations"],
        json!({"keep": "me"})
    );
    // Paused by someone before the move: the copy is paused as its source.
    let mut paused = fenced.clone();
    paused.metadata.annotations = Some(
        [(
            crate::names::CAPI_PAUSED_ANNOTATION.to_string(),
            String::new(),
        )]
        .into(),
    );
    assert_eq!(
        strip_for_target(&paused)["metadata"]["annotations"],
        json!({"cluster.x-k8s.io/paused": ""})
    );
}

#[test]
fn cluster_copies_are_paused_while_publishing_and_resumed_after() {
    let graph = move_graph("default", "c1", &kubeadm_objects(), &test_types()).unwrap();
    let cluster = graph.nodes().find(|n| n.id.kind == "Cluster").unwrap();
    assert!(
        render_node(cluster, "default/c1", true)
            .unwrap()
            .contains("paused: true")
    );
    assert!(
        render_node(cluster, "default/c1", false)
            .unwrap()
            .contains("paused: false")
    );
    // A ClusterResourceSet's controller looks at its own annotation only.
    let crs = graph
        .nodes()
        .find(|n| n.id.kind == "ClusterResourceSet")
        .unwrap();
    assert_eq!(
        target_object(crs, "default/c1", true)["metadata"]["annotations"]
            [crate::names::CAPI_PAUSED_ANNOTATION],
        ""
    );
    assert!(
        target_object(crs, "default/c1", false)["metadata"]["annotations"]
            .get(crate::names::CAPI_PAUSED_ANNOTATION)
            .is_none()
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
        keep_on_target: &Default::default(),
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
        ],
        "creation group 5 holds only a Secret: no Bundle"
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
fn secrets_never_enter_a_bundle() {
    let graph = move_graph("default", "c1", &kubeadm_objects(), &test_types()).unwrap();
    let secret = obj(
        "v1",
        "Secret",
        "capa-system",
        "aws-variables",
        "u-sec",
        &[],
        &[],
        json!({"data": {"AWS_B64ENCODED_CREDENTIALS": "c2VjcmV0LWtleQ=="}}),
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
    let providers = provider_plan(&[], &[aws], &[secret]);
    let bundles = plan(&graph, &providers, "default", "c1");
    let text = serde_json::to_string(&bundles).unwrap();
    for leak in [
        "kind: Secret",
        "Ym9vdA==",
        "c2VjcmV0LWtleQ==",
        "c1-kubeconfig",
        "c1-etcd",
    ] {
        assert!(!text.contains(leak), "{leak} in a Bundle");
    }
    // The provider still names its configSecret; the controller writes the Secret itself.
    assert!(text.contains("configSecret"), "{text}");
}

#[test]
fn a_large_creation_group_is_split_under_the_release_limit() {
    // 300 worker Machines with their KubeadmConfigs (~4 KiB each, as kubeadm writes them with
    // files and commands) and DockerMachines.
    let mut objects = vec![obj(
        CAPI,
        "Cluster",
        "default",
        "c1",
        "u-c1",
        &[],
        &[],
        json!({"spec": {}}),
    )];
    let files: Vec<Value> = (0..8)
        .map(|i| json!({"path": format!("/etc/kubernetes/file-{i}"), "content": "x".repeat(400)}))
        .collect();
    for i in 0..300 {
        let m = format!("c1-md-{i}");
        let uid = format!("u-m{i}");
        objects.push(obj(
            CAPI,
            "Machine",
            "default",
            &m,
            &uid,
            &[(CAPI, "Cluster", "c1", "u-c1", true)],
            &[("cluster.x-k8s.io/cluster-name", "c1")],
            json!({"spec": {"clusterName": "c1", "version": "v1.33.0"}}),
        ));
        objects.push(obj(
            BOOT,
            "KubeadmConfig",
            "default",
            &m,
            &format!("u-kc{i}"),
            &[(CAPI, "Machine", &m, &uid, true)],
            &[],
            json!({"spec": {"files": files, "preKubeadmCommands": ["echo hi"]}}),
        ));
        objects.push(obj(
            INFRA,
            "DockerMachine",
            "default",
            &m,
            &format!("u-dm{i}"),
            &[(CAPI, "Machine", &m, &uid, true)],
            &[],
            json!({"spec": {}}),
        ));
    }
    let graph = move_graph("default", "c1", &objects, &test_types()).unwrap();
    assert_eq!(graph.groups.len(), 3);
    let bundles = plan(&graph, &ProviderPlan::default(), "default", "c1");
    let names: Vec<&str> = bundles
        .iter()
        .map(|b| b["metadata"]["name"].as_str().unwrap())
        .collect();
    assert!(names.len() > 3, "{names:?}");
    assert_eq!(&names[..3], ["c1-move-01", "c1-move-02", "c1-move-03"]);
    assert!(
        names[3..].iter().all(|n| n.starts_with("c1-move-03-")),
        "{names:?}"
    );
    let mut carried = 0;
    for (i, bundle) in bundles.iter().enumerate() {
        let resources = bundle["spec"]["resources"].as_array().unwrap();
        carried += resources.len();
        let bytes: usize = resources
            .iter()
            .map(|r| r["content"].as_str().unwrap().len())
            .sum();
        assert!(bytes <= MAX_BUNDLE_BYTES, "{}: {bytes}", names[i]);
        if i > 0 {
            assert_eq!(bundle["spec"]["dependsOn"], json!([{"name": names[i - 1]}]));
        }
        // Resource names stay unique within a Bundle.
        let unique: BTreeSet<&str> = resources
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert_eq!(unique.len(), resources.len());
    }
    assert_eq!(carried, 901, "every object carried once");
}

#[test]
fn stale_bundles_are_the_live_ones_not_wanted() {
    let graph = move_graph("default", "c1", &kubeadm_objects(), &test_types()).unwrap();
    let bundles = plan(&graph, &ProviderPlan::default(), "default", "c1");
    let live: Vec<String> = ["c1-move-01", "c1-move-05", "c1-move-02-2"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(
        stale_bundles(&bundles, &live),
        ["c1-move-05", "c1-move-02-2"]
    );
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
            "InfrastructureProvider capx-system/custom: the credentials clusterctl init took from its environment are not in the inventory and are not carried; create a Secret with those variables on the target and set spec.configSecret on this provider there before its Bundle is ready".to_string(),
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
            "InfrastructureProvider/aws",
            "InfrastructureProvider/azure"
        ]
    );
    assert_eq!(plan.secrets.len(), 1);
    assert_eq!(plan.secrets[0]["metadata"]["name"], "aws-variables");
    assert!(plan.secrets[0]["metadata"].get("uid").is_none());
    assert!(plan.objects[0].get("status").is_none());
    assert!(plan.objects[0]["metadata"].get("uid").is_none());
    assert_eq!(
        plan.warnings,
        vec!["InfrastructureProvider capz-system/azure: spec.configSecret secrets/azure-variables not found; create it on the target".to_string()]
    );
}
