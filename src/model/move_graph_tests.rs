//! Table tests of the move graph on real-shaped CAPI object sets: kubeadm without topology,
//! RKE2 with a ClusterClass and a MachinePool, a class in another namespace, ClusterResourceSets,
//! cluster Secrets, move-labelled objects, unmovable objects and blocking annotations.

use super::*;
use crate::model::move_fixtures::*;
use crate::model::move_types::CLUSTERCTL_LABEL;

impl MoveGraph {
    /// Nodes that hold the move.
    fn blocking(&self) -> Vec<&ObjectId> {
        self.nodes().filter(|n| n.blocking).map(|n| &n.id).collect()
    }
}

/// `Kind/name` of every object per group.
fn groups(graph: &MoveGraph) -> Vec<Vec<String>> {
    graph
        .groups
        .iter()
        .map(|g| {
            let mut names: Vec<String> = g
                .iter()
                .map(|n| format!("{}/{}", n.id.kind, n.id.name))
                .collect();
            names.sort();
            names
        })
        .collect()
}

fn sorted(items: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = items.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

#[test]
fn kubeadm_cluster_without_topology() {
    let graph = move_graph("default", "c1", &kubeadm_objects(), &test_types()).unwrap();
    assert_eq!(
        groups(&graph),
        vec![
            sorted(&["Cluster/c1", "ClusterResourceSet/crs", "ConfigMap/moved"]),
            sorted(&[
                "ClusterResourceSetBinding/c1",
                "ConfigMap/crs-cni",
                "DockerCluster/c1",
                "DockerMachineTemplate/c1-cp",
                "DockerMachineTemplate/c1-md",
                "KubeadmConfigTemplate/c1-md",
                "KubeadmControlPlane/c1-cp",
                "MachineDeployment/c1-md",
                "Secret/c1-cloud",
                "Secret/c1-etcd",
            ]),
            sorted(&[
                "Machine/c1-cp-0",
                "MachineSet/c1-md-x",
                "Secret/c1-ca",
                "Secret/c1-kubeconfig",
            ]),
            sorted(&[
                "DockerMachine/c1-cp-0",
                "KubeadmConfig/c1-cp-0",
                "Machine/c1-md-x-0",
            ]),
            sorted(&["Secret/c1-cp-0-bootstrap"]),
        ]
    );
    assert!(graph.skipped.is_empty(), "{:?}", graph.skipped);
}

#[test]
fn other_clusters_of_the_namespace_stay() {
    let graph = move_graph("default", "c1", &kubeadm_objects(), &test_types()).unwrap();
    let all: Vec<String> = groups(&graph).concat();
    for absent in [
        "Cluster/c2",
        "DockerCluster/c2",
        "ClusterResourceSetBinding/c2",
        "Secret/c2-kubeconfig",
        "Secret/unrelated",
    ] {
        assert!(
            !all.contains(&absent.to_string()),
            "{absent} moved: {all:?}"
        );
    }
}

#[test]
fn the_other_cluster_gets_its_own_graph() {
    let graph = move_graph("default", "c2", &kubeadm_objects(), &test_types()).unwrap();
    assert_eq!(
        groups(&graph),
        vec![
            sorted(&["Cluster/c2", "ClusterResourceSet/crs", "ConfigMap/moved"]),
            sorted(&[
                "ClusterResourceSetBinding/c2",
                "ConfigMap/crs-cni",
                "DockerCluster/c2",
                "Secret/c2-kubeconfig",
            ]),
        ]
    );
}

#[test]
fn owner_references_keep_their_attributes_and_resolve_in_the_namespace() {
    let graph = move_graph("default", "c1", &kubeadm_objects(), &test_types()).unwrap();
    let machine = graph
        .nodes()
        .find(|n| n.id.name == "c1-cp-0" && n.id.kind == "Machine")
        .unwrap();
    assert_eq!(
        machine.owners,
        vec![OwnerLink {
            api_version: "controlplane.cluster.x-k8s.io/v1beta2".into(),
            kind: "KubeadmControlPlane".into(),
            name: "c1-cp".into(),
            namespace: Some("default".into()),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]
    );
}

#[test]
fn rke2_topology_cluster_with_machine_pool() {
    let graph = move_graph("fleet", "r1", &rke2_topology_objects(), &test_types()).unwrap();
    assert_eq!(
        groups(&graph),
        vec![
            sorted(&["ClusterClass/rke2-class"]),
            sorted(&[
                "Cluster/r1",
                "DockerClusterTemplate/rke2-class",
                "DockerMachinePoolTemplate/rke2-class-pool",
                "DockerMachineTemplate/rke2-class-cp",
                "RKE2ConfigTemplate/rke2-class-pool",
                "RKE2ControlPlaneTemplate/rke2-class",
            ]),
            sorted(&[
                "DockerCluster/r1-abcde",
                "MachinePool/r1-pool-xyz",
                "RKE2ControlPlane/r1-cp",
                "Secret/r1-kubeconfig",
            ]),
            sorted(&["DockerMachinePool/r1-pool-xyz", "RKE2Config/r1-pool-xyz"]),
        ]
    );
    let all: Vec<String> = groups(&graph).concat();
    assert!(!all.contains(&"Cluster/r2".to_string()));
}

#[test]
fn v1beta1_class_in_another_namespace() {
    let graph = move_graph("tenant", "t1", &external_class_objects(), &test_types()).unwrap();
    assert_eq!(
        groups(&graph),
        vec![
            sorted(&["ClusterClass/shared"]),
            sorted(&["Cluster/t1", "DockerClusterTemplate/shared"]),
        ]
    );
    let class = &graph.groups[0][0];
    assert_eq!(class.id.namespace.as_deref(), Some("classes"));
}

#[test]
fn objects_with_an_owner_outside_the_move_are_reported_not_moved() {
    let graph = move_graph("default", "c1", &unmovable_objects(), &test_types()).unwrap();
    assert_eq!(
        graph.skipped,
        vec![
            Skipped {
                id: id("v1", "Secret", "default", "c1-orphan"),
                reason: "owner Deployment some-app is not a move type or was not found".into(),
            },
            Skipped {
                id: id("v1", "Secret", "default", "c1-orphan-child"),
                reason: "owner Secret default/c1-orphan is not moved".into(),
            },
        ]
    );
}

#[test]
fn move_hierarchy_label_moves_the_object_and_what_it_owns() {
    let graph = move_graph("default", "c1", &labelled_objects(), &test_types()).unwrap();
    let all: Vec<String> = groups(&graph).concat();
    for present in [
        "ConfigMap/hierarchy-root",
        "Secret/hierarchy-child",
        "ConfigMap/only-me",
        "AWSClusterControllerIdentity/default",
        "Secret/identity-secret",
    ] {
        assert!(
            all.contains(&present.to_string()),
            "{present} missing: {all:?}"
        );
    }
    for absent in ["Secret/not-me", "ConfigMap/elsewhere"] {
        assert!(
            !all.contains(&absent.to_string()),
            "{absent} moved: {all:?}"
        );
    }
}

#[test]
fn block_move_annotation_is_reported() {
    let graph = move_graph("default", "c1", &labelled_objects(), &test_types()).unwrap();
    assert_eq!(
        graph.blocking(),
        vec![&id("cluster.x-k8s.io/v1beta2", "Cluster", "default", "c1")]
    );
}

/// A Cluster type that was not read (its CRD lacks clusterctl's label) is named as such, with the
/// fix, not as a missing Cluster.
#[test]
fn an_unlabelled_cluster_crd_is_named() {
    let err = move_graph("default", "c1", &kubeadm_objects(), &MoveTypes::core()).unwrap_err();
    assert_eq!(
        err,
        GraphError::ClusterTypeNotLabelled {
            namespace: "default".into(),
            name: "c1".into(),
        }
    );
    assert!(err.to_string().contains("kubectl label crd"), "{err}");
}

#[test]
fn errors() {
    let cases: Vec<(&str, Vec<DynamicObject>, GraphError)> = vec![
        (
            "missing cluster",
            kubeadm_objects(),
            GraphError::ClusterNotFound {
                namespace: "default".into(),
                name: "nope".into(),
            },
        ),
        (
            "object without uid",
            vec![obj(
                "v1",
                "Secret",
                "default",
                "nouid",
                "",
                &[],
                &[],
                Value::Null,
            )],
            GraphError::MissingUid(id("v1", "Secret", "default", "nouid")),
        ),
    ];
    for (name, objects, want) in cases {
        let cluster = if name == "missing cluster" {
            "nope"
        } else {
            "c1"
        };
        let got = move_graph("default", cluster, &objects, &test_types()).unwrap_err();
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn secret_names_follow_parse_secret_name() {
    let cases = [
        ("c1-kubeconfig", Some("c1")),
        ("my-cluster-ca", Some("my-cluster")),
        ("c1-etcd", Some("c1")),
        ("c1-sa", Some("c1")),
        ("c1-proxy", Some("c1")),
        // Split at the last dash: the purpose is "client", which is not one (same as CAPI).
        ("c1-apiserver-etcd-client", None),
        ("c1-cloud", None),
        ("kubeconfig", None),
    ];
    for (name, want) in cases {
        assert_eq!(secret_cluster_name(name), want, "{name}");
    }
}

#[test]
fn types_from_crds_follow_clusterctl_labels() {
    let crds = vec![
        crd("cluster.x-k8s.io", "Cluster", &[CLUSTERCTL_LABEL], true),
        crd(
            "infrastructure.cluster.x-k8s.io",
            "DockerCluster",
            &[CLUSTERCTL_LABEL],
            true,
        ),
        crd(
            "infrastructure.cluster.x-k8s.io",
            "AWSClusterControllerIdentity",
            &[CLUSTERCTL_LABEL, MOVE_HIERARCHY_LABEL],
            false,
        ),
        crd(
            "example.com",
            "Moved",
            &[CLUSTERCTL_LABEL, MOVE_LABEL],
            true,
        ),
        crd("example.com", "NotClusterctl", &[], true),
    ];
    let types = MoveTypes::from_crds(&crds);
    let get = |api, kind| types.rule(api, kind).cloned();
    let cluster = get("cluster.x-k8s.io/v1beta1", "Cluster").unwrap();
    assert!(cluster.force_move && cluster.force_move_hierarchy);
    assert_eq!(cluster.version, "v1beta2", "the storage version is listed");
    let docker = get("infrastructure.cluster.x-k8s.io/v1beta2", "DockerCluster").unwrap();
    assert!(!docker.force_move && !docker.force_move_hierarchy);
    let identity = get(
        "infrastructure.cluster.x-k8s.io/v1beta2",
        "AWSClusterControllerIdentity",
    )
    .unwrap();
    assert!(identity.force_move_hierarchy && !identity.namespaced);
    let moved = get("example.com/v1", "Moved").unwrap();
    assert!(moved.force_move && !moved.force_move_hierarchy);
    assert!(get("example.com/v1", "NotClusterctl").is_none());
    assert!(get("v1", "Secret").is_some() && get("v1", "ConfigMap").is_some());
}

#[test]
fn topology_class_shapes() {
    let cases = [
        (
            serde_json::json!({"spec": {"topology": {"classRef": {"name": "cc"}}}}),
            Some(("ns".to_string(), "cc".to_string())),
        ),
        (
            serde_json::json!({"spec": {"topology": {"classRef": {"name": "cc", "namespace": "other"}}}}),
            Some(("other".to_string(), "cc".to_string())),
        ),
        (
            serde_json::json!({"spec": {"topology": {"class": "cc", "classNamespace": "o"}}}),
            Some(("o".to_string(), "cc".to_string())),
        ),
        (serde_json::json!({"spec": {}}), None),
    ];
    for (data, want) in cases {
        assert_eq!(topology_class(&data, "ns"), want, "{data}");
    }
}

#[test]
fn a_pool_serving_another_cluster_is_a_shared_owner() {
    let shared = move_graph("default", "c1", &ipam_objects(true), &test_types()).unwrap();
    assert_eq!(
        shared
            .shared
            .iter()
            .map(|s| s.id.to_string())
            .collect::<Vec<_>>(),
        ["InClusterIPPool default/pool"]
    );
    assert!(
        shared.shared[0].reason.contains("Cluster default/c2"),
        "{:?}",
        shared.shared
    );
    // Nothing of c2 comes along, not even through the pool.
    assert!(
        shared.nodes().all(|n| !n.id.name.starts_with("c2")),
        "{:?}",
        shared.nodes().map(|n| n.id.to_string()).collect::<Vec<_>>()
    );
    assert!(shared.skipped.is_empty(), "{:?}", shared.skipped);
    // A pool of its own moves with the Cluster and belongs to it alone.
    let own = move_graph("default", "c1", &ipam_objects(false), &test_types()).unwrap();
    assert!(own.shared.is_empty());
    let pool = own
        .nodes()
        .find(|n| n.id.kind == "InClusterIPPool")
        .expect("the pool moves");
    assert!(pool.exclusive && !pool.global);
}

#[test]
fn what_belongs_to_the_cluster_alone_and_what_is_global() {
    let graph = move_graph("default", "c1", &kubeadm_objects(), &test_types()).unwrap();
    let exclusive = |kind: &str, name: &str| {
        graph
            .nodes()
            .find(|n| n.id.kind == kind && n.id.name == name)
            .unwrap_or_else(|| panic!("{kind}/{name}"))
            .exclusive
    };
    assert!(exclusive("Cluster", "c1"));
    assert!(exclusive("Machine", "c1-md-x-0"));
    assert!(exclusive("ClusterResourceSetBinding", "c1"));
    assert!(
        !exclusive("ClusterResourceSet", "crs"),
        "bound to c2 as well"
    );
    assert!(!exclusive("ConfigMap", "moved"), "belongs to no Cluster");
    let graph = move_graph("default", "c1", &labelled_objects(), &test_types()).unwrap();
    let identity = graph
        .nodes()
        .find(|n| n.id.kind == "AWSClusterControllerIdentity")
        .unwrap();
    assert!(identity.global && !identity.exclusive);
    let owned = graph
        .nodes()
        .find(|n| n.id.name == "identity-secret")
        .unwrap();
    assert!(owned.global, "owned by a global object");
}
