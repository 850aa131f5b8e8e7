//! What the move does on the target and the source besides the Bundles: objects the target keeps,
//! Secrets to write, owner references rebuilt with the target's UIDs, copies removed after a
//! failure, the source's fence, and the provisioning precondition.

use super::*;
use crate::model::move_fixtures::*;
use crate::model::move_graph::move_graph;
use crate::model::move_plan::{
    PlanInput, ProviderPlan, bundles, copy_of, strip_for_target, target_secrets,
};
use kube::api::DynamicObject;
use serde_json::json;

/// The target as the copies look after Fleet applied them (and the controller wrote the
/// Secrets): each object stripped, marked as a copy, with a UID of the target's.
fn target_with_copies(graph: &MoveGraph, except: &[&str]) -> TargetView {
    let mut view = TargetView::default();
    for node in graph.nodes() {
        if except.contains(&node.id.name.as_str()) {
            continue;
        }
        let mut value = strip_for_target(&node.object);
        value["metadata"]["uid"] = json!(format!("t-{}-{}", node.id.kind, node.id.name));
        value["metadata"]["annotations"] = json!({MOVE_COPY_ANNOTATION: "default/c1"});
        view.objects.insert(Key::of(&node.id), value);
    }
    view
}

fn graph() -> MoveGraph {
    move_graph("default", "c1", &kubeadm_objects(), &test_types()).unwrap()
}

#[test]
fn owner_references_are_rebuilt_with_the_uids_of_the_target() {
    let graph = graph();
    let view = target_with_copies(&graph, &[]);
    let links = owner_links(&graph, &view, &BTreeSet::new());
    assert!(links.waiting.is_empty(), "{:?}", links.waiting);
    let machine = links
        .patches
        .iter()
        .find(|(id, _)| id.kind == "Machine" && id.name == "c1-cp-0")
        .map(|(_, refs)| refs.clone())
        .expect("the control plane Machine is linked");
    assert_eq!(
        machine,
        json!([{"apiVersion": CP, "kind": "KubeadmControlPlane", "name": "c1-cp",
            "uid": "t-KubeadmControlPlane-c1-cp", "controller": true, "blockOwnerDeletion": true}])
    );
    // Every object with owners gets a patch; none carries a source UID.
    let with_owners = graph.nodes().filter(|n| !n.owners.is_empty()).count();
    assert_eq!(links.patches.len(), with_owners);
    let text =
        serde_json::to_string(&links.patches.iter().map(|p| &p.1).collect::<Vec<_>>()).unwrap();
    assert!(!text.contains("\"u-"), "a source UID travelled: {text}");

    // Once the target shows them, nothing is left to do.
    let mut linked = view.clone();
    for (id, refs) in &links.patches {
        linked.objects.get_mut(&Key::of(id)).unwrap()["metadata"]["ownerReferences"] = refs.clone();
    }
    assert!(owner_links(&graph, &linked, &BTreeSet::new()).done());
}

#[test]
fn owner_references_wait_for_the_copy_and_its_owners() {
    let graph = graph();
    let cases = [
        (
            "c1-cp-0",
            "Machine default/c1-cp-0 is not on the target yet",
        ),
        (
            "c1-cp",
            "owner KubeadmControlPlane c1-cp of Machine default/c1-cp-0 is not on the target yet",
        ),
    ];
    for (missing, want) in cases {
        let view = target_with_copies(&graph, &[missing]);
        let links = owner_links(&graph, &view, &BTreeSet::new());
        assert!(
            links.waiting.iter().any(|w| w == want),
            "{missing}: {:?}",
            links.waiting
        );
        assert!(!links.done());
        assert!(
            links
                .patches
                .iter()
                .all(|(id, _)| !(id.kind == "Machine" && id.name == "c1-cp-0")),
            "{missing}: a reference with a missing owner is not written"
        );
    }
}

fn identity(uid: &str, annotations: Value) -> DynamicObject {
    let mut identity = obj(
        INFRA,
        "AWSClusterControllerIdentity",
        "",
        "default",
        uid,
        &[],
        &[],
        json!({"spec": {"allowedNamespaces": {}}}),
    );
    if let Some(map) = annotations.as_object() {
        identity.metadata.annotations = Some(
            map.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                .collect(),
        );
    }
    identity
}

#[test]
fn a_global_object_the_target_has_is_kept_and_left_out() {
    let graph = move_graph("default", "c1", &labelled_objects(), &test_types()).unwrap();
    let ident = id(INFRA, "AWSClusterControllerIdentity", "", "default");
    assert!(graph.nodes().any(|n| n.id == ident && n.global));
    let rows = [
        ("not on the target", None, false),
        ("the target's own", Some(json!({})), true),
        (
            "a copy of another move",
            Some(json!({MOVE_COPY_ANNOTATION: "default/c9"})),
            true,
        ),
        (
            "this move's copy",
            Some(json!({MOVE_COPY_ANNOTATION: "default/c1"})),
            false,
        ),
    ];
    for (what, annotations, kept) in rows {
        let mut view = TargetView::default();
        if let Some(annotations) = annotations {
            view.objects.insert(
                Key::of(&ident),
                serde_json::to_value(identity("t-ident", annotations)).unwrap(),
            );
        }
        let keep = keep_on_target(&graph, &view, "default/c1");
        assert_eq!(keep.contains(&ident), kept, "{what}");
        // The Secret it owns goes with it (clusterctl's global hierarchy).
        let secret = id("v1", "Secret", "capa-system", "identity-secret");
        assert!(!keep.contains(&secret), "{what}: only what the target has");
        let providers = ProviderPlan::default();
        let input = PlanInput {
            cluster_namespace: "default",
            cluster_name: "c1",
            fleet_cluster_name: "c1",
            graph: &graph,
            providers: &providers,
            target_paused: true,
            keep_on_target: &keep,
        };
        let text = serde_json::to_string(&bundles(&input).unwrap()).unwrap();
        assert_eq!(
            text.contains("AWSClusterControllerIdentity"),
            !kept,
            "{what}: the Bundles carry the identity only when the target does not keep it"
        );
    }
}

#[test]
fn secrets_are_written_until_the_target_shows_them() {
    let graph = graph();
    let providers = ProviderPlan::default();
    let keep = BTreeSet::new();
    let input = PlanInput {
        cluster_namespace: "default",
        cluster_name: "c1",
        fleet_cluster_name: "c1",
        graph: &graph,
        providers: &providers,
        target_paused: true,
        keep_on_target: &keep,
    };
    let secrets = target_secrets(&input);
    let names: Vec<&str> = secrets
        .iter()
        .map(|s| s["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "c1-cloud",
            "c1-etcd",
            "c1-ca",
            "c1-kubeconfig",
            "c1-cp-0-bootstrap"
        ]
    );
    let boot = &secrets[4];
    assert_eq!(boot["type"], "cluster.x-k8s.io/secret");
    assert_eq!(boot["data"]["value"], "Ym9vdA==");
    assert_eq!(
        boot["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"],
        "c1"
    );
    assert_eq!(
        boot["metadata"]["annotations"][MOVE_COPY_ANNOTATION],
        copy_of("default", "c1")
    );
    assert!(boot["metadata"].get("ownerReferences").is_none());

    let empty = TargetView::default();
    assert_eq!(secret_writes(&secrets, &empty).len(), 5, "none there yet");
    let mut view = TargetView::default();
    for s in &secrets {
        let mut live = s.clone();
        live["metadata"]["uid"] = json!("t");
        live["metadata"]["ownerReferences"] = json!([{"kind": "KubeadmConfig"}]);
        live["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied"] = json!("x");
        let key = Key {
            group: String::new(),
            kind: "Secret".into(),
            namespace: Some("default".into()),
            name: s["metadata"]["name"].as_str().unwrap().into(),
        };
        view.objects.insert(key, live);
    }
    assert!(
        secret_writes(&secrets, &view).is_empty(),
        "owner references and extra annotations are not a difference"
    );
    let key = |name: &str| Key {
        group: String::new(),
        kind: "Secret".into(),
        namespace: Some("default".into()),
        name: name.into(),
    };
    let mut changed = view.clone();
    changed.objects.get_mut(&key("c1-cp-0-bootstrap")).unwrap()["data"]["value"] = json!("b2xk");
    changed.objects.get_mut(&key("c1-ca")).unwrap()["metadata"]["labels"] = json!({});
    let writes: Vec<&str> = secret_writes(&secrets, &changed)
        .iter()
        .map(|s| s["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(writes, ["c1-ca", "c1-cp-0-bootstrap"]);
}

#[test]
fn only_this_moves_copies_are_removed_dependents_first() {
    let graph = graph();
    let mut view = target_with_copies(&graph, &[]);
    // The target had this one before the move.
    view.objects
        .get_mut(&Key::of(&id(CAPI, "MachineDeployment", "default", "c1-md")))
        .unwrap()["metadata"]["annotations"] = json!({});
    let removed = copies_to_remove(&graph, &view, "default/c1");
    let position = |kind: &str, name: &str| {
        removed
            .iter()
            .position(|i| i.kind == kind && i.name == name)
            .unwrap_or_else(|| panic!("{kind}/{name} not removed: {removed:?}"))
    };
    assert!(position("Machine", "c1-cp-0") < position("KubeadmControlPlane", "c1-cp"));
    assert!(position("KubeadmControlPlane", "c1-cp") < position("Cluster", "c1"));
    assert!(position("Secret", "c1-cp-0-bootstrap") < position("KubeadmConfig", "c1-cp-0"));
    assert!(
        !removed
            .iter()
            .any(|i| i.name == "c1-md" && i.kind == "MachineDeployment")
    );
    assert!(copies_to_remove(&graph, &view, "default/c2").is_empty());
    assert!(copies_to_remove(&graph, &TargetView::default(), "default/c1").is_empty());
}

#[test]
fn the_fence_covers_what_belongs_to_the_cluster_alone() {
    let graph = graph();
    let fenced: BTreeSet<String> = unfenced(&graph)
        .iter()
        .map(|n| format!("{}/{}", n.id.kind, n.id.name))
        .collect();
    for present in [
        "Cluster/c1",
        "KubeadmControlPlane/c1-cp",
        "Machine/c1-cp-0",
        "MachineDeployment/c1-md",
        "DockerMachine/c1-cp-0",
        "ClusterResourceSetBinding/c1",
    ] {
        assert!(fenced.contains(present), "{present} not fenced: {fenced:?}");
    }
    for absent in [
        // Bound to c2 as well.
        "ClusterResourceSet/crs",
        // Nothing reconciles them.
        "Secret/c1-kubeconfig",
        "ConfigMap/crs-cni",
        // Belongs to no Cluster.
        "ConfigMap/moved",
    ] {
        assert!(!fenced.contains(absent), "{absent} fenced: {fenced:?}");
    }
    // Once annotated (by the fence or by someone before), nothing is left to fence.
    let mut objects = kubeadm_objects();
    for object in &mut objects {
        object.metadata.annotations =
            Some([(names::CAPI_PAUSED_ANNOTATION.to_string(), String::new())].into());
    }
    let graph = move_graph("default", "c1", &objects, &test_types()).unwrap();
    assert!(unfenced(&graph).is_empty());
}

#[test]
fn a_class_other_clusters_use_is_not_fenced() {
    let graph = move_graph("fleet", "r1", &rke2_topology_objects(), &test_types()).unwrap();
    let fenced: Vec<String> = unfenced(&graph)
        .iter()
        .map(|n| format!("{}/{}", n.id.kind, n.id.name))
        .collect();
    assert!(fenced.contains(&"Cluster/r1".to_string()), "{fenced:?}");
    assert!(
        !fenced.iter().any(|f| f.starts_with("ClusterClass/")),
        "the class serves r2 too: {fenced:?}"
    );
}

#[test]
fn a_pool_of_its_own_is_fenced_with_the_cluster() {
    let own = move_graph("default", "c1", &ipam_objects(false), &test_types()).unwrap();
    assert!(
        unfenced(&own)
            .iter()
            .any(|n| n.id.kind == "InClusterIPPool")
    );
}

fn with_status(kind: &str, name: &str, status: Value, spec: Option<Value>) -> MoveGraph {
    let mut objects = kubeadm_objects();
    for object in &mut objects {
        let t = object.types.as_ref().unwrap();
        if t.api_version == CAPI && t.kind == kind && object.metadata.name.as_deref() == Some(name)
        {
            object.data["status"] = status.clone();
            if let Some(spec) = &spec {
                object.data["spec"] = spec.clone();
            }
        }
    }
    move_graph("default", "c1", &objects, &test_types()).unwrap()
}

/// Every Machine of the kubeadm fixture with a node.
fn provisioned_machines(graph: MoveGraph) -> MoveGraph {
    let mut graph = graph;
    for group in &mut graph.groups {
        for node in group {
            if node.id.kind == "Machine" && node.object.data["status"].is_null() {
                node.object.data["status"] = json!({"nodeRef": {"name": node.id.name}});
            }
        }
    }
    graph
}

#[test]
fn provisioning_must_be_complete_as_clusterctl_requires() {
    let initialized = json!([{"type": "ControlPlaneInitialized", "status": "True",
        "reason": "Initialized", "lastTransitionTime": "2025-01-01T00:00:00Z"}]);
    let ready_v1beta2 = json!({"initialization": {"infrastructureProvisioned": true,
        "controlPlaneInitialized": true}, "conditions": initialized});
    let ready_v1beta1 =
        json!({"infrastructureReady": true, "controlPlaneReady": true, "conditions": initialized});
    let rows: Vec<(&str, Value, Vec<&str>)> = vec![
        ("v1beta2, complete", ready_v1beta2.clone(), vec![]),
        ("v1beta1, complete", ready_v1beta1, vec![]),
        (
            "infrastructure not provisioned",
            json!({"initialization": {"controlPlaneInitialized": true}, "conditions": initialized}),
            vec!["Cluster default/c1 is still provisioning its infrastructure"],
        ),
        (
            "no ControlPlaneInitialized condition",
            json!({"initialization": {"infrastructureProvisioned": true, "controlPlaneInitialized": true}}),
            vec!["the control plane of Cluster default/c1 is not initialized yet"],
        ),
        (
            "control plane not initialized",
            json!({"initialization": {"infrastructureProvisioned": true}, "conditions": initialized}),
            vec!["the control plane of Cluster default/c1 is not initialized yet"],
        ),
    ];
    for (what, status, want) in rows {
        let graph = provisioned_machines(with_status("Cluster", "c1", status, None));
        assert_eq!(not_provisioned(&graph), want, "{what}");
    }
    // A Machine without a node.
    let graph = with_status("Cluster", "c1", ready_v1beta2, None);
    let graph = {
        let mut g = provisioned_machines(graph);
        for group in &mut g.groups {
            for node in group {
                if node.id.name == "c1-md-x-0" && node.id.kind == "Machine" {
                    node.object.data["status"] = json!({"phase": "Provisioning"});
                }
            }
        }
        g
    };
    assert_eq!(
        not_provisioned(&graph),
        ["Machine default/c1-md-x-0 has no nodeRef yet"]
    );
}
