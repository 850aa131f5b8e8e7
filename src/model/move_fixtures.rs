//! Real-shaped CAPI object sets for the move model tests (shapes from cluster-api v1beta2,
//! CAPD, kubeadm and RKE2 providers): owner references, labels and the fields the graph reads.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionNames, CustomResourceDefinitionSpec,
    CustomResourceDefinitionVersion,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{DynamicObject, TypeMeta};
use serde_json::{Value, json};

use super::move_graph::{BLOCK_MOVE_ANNOTATION, ObjectId};
use super::move_types::{MOVE_HIERARCHY_LABEL, MOVE_LABEL, MoveTypes, TypeRule};

pub const CAPI: &str = "cluster.x-k8s.io/v1beta2";
pub const CP: &str = "controlplane.cluster.x-k8s.io/v1beta2";
pub const BOOT: &str = "bootstrap.cluster.x-k8s.io/v1beta2";
pub const INFRA: &str = "infrastructure.cluster.x-k8s.io/v1beta2";
pub const ADDONS: &str = "addons.cluster.x-k8s.io/v1beta2";

/// An owner: (apiVersion, kind, name, uid, controller).
pub type Owner<'a> = (&'a str, &'a str, &'a str, &'a str, bool);

/// An object with a UID, owner references, labels and a body.
#[allow(clippy::too_many_arguments)]
pub fn obj(
    api_version: &str,
    kind: &str,
    namespace: &str,
    name: &str,
    uid: &str,
    owners: &[Owner],
    labels: &[(&str, &str)],
    data: Value,
) -> DynamicObject {
    DynamicObject {
        types: Some(TypeMeta {
            api_version: api_version.into(),
            kind: kind.into(),
        }),
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: (!namespace.is_empty()).then(|| namespace.into()),
            uid: (!uid.is_empty()).then(|| uid.into()),
            resource_version: Some("42".into()),
            labels: (!labels.is_empty()).then(|| {
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            }),
            owner_references: (!owners.is_empty()).then(|| {
                owners
                    .iter()
                    .map(|(api, kind, name, uid, controller)| OwnerReference {
                        api_version: api.to_string(),
                        kind: kind.to_string(),
                        name: name.to_string(),
                        uid: uid.to_string(),
                        controller: controller.then_some(true),
                        block_owner_deletion: controller.then_some(true),
                    })
                    .collect()
            }),
            ..Default::default()
        },
        data,
    }
}

pub fn id(api_version: &str, kind: &str, namespace: &str, name: &str) -> ObjectId {
    ObjectId {
        api_version: api_version.into(),
        kind: kind.into(),
        namespace: (!namespace.is_empty()).then(|| namespace.into()),
        name: name.into(),
    }
}

/// A CRD with labels, storage version `v1beta2` next to a served `v1beta1`.
pub fn crd(group: &str, kind: &str, labels: &[&str], namespaced: bool) -> CustomResourceDefinition {
    let version = |name: &str, storage| CustomResourceDefinitionVersion {
        name: name.into(),
        served: true,
        storage,
        ..Default::default()
    };
    let (v1, v2) = if group == "example.com" {
        ("v1alpha1", "v1")
    } else {
        ("v1beta1", "v1beta2")
    };
    CustomResourceDefinition {
        metadata: ObjectMeta {
            name: Some(format!("{}s.{group}", kind.to_lowercase())),
            labels: Some(
                labels
                    .iter()
                    .map(|l| (l.to_string(), String::new()))
                    .collect(),
            ),
            ..Default::default()
        },
        spec: CustomResourceDefinitionSpec {
            group: group.into(),
            names: CustomResourceDefinitionNames {
                kind: kind.into(),
                plural: format!("{}s", kind.to_lowercase()),
                ..Default::default()
            },
            scope: if namespaced { "Namespaced" } else { "Cluster" }.into(),
            versions: vec![version(v1, false), version(v2, true)],
            ..Default::default()
        },
        status: None,
    }
}

/// The types a management cluster with core CAPI, kubeadm, RKE2 and CAPD lists.
pub fn test_types() -> MoveTypes {
    let mut types = MoveTypes::core();
    let capi = [
        ("cluster.x-k8s.io", "Cluster", true),
        ("cluster.x-k8s.io", "ClusterClass", true),
        ("cluster.x-k8s.io", "MachineDeployment", false),
        ("cluster.x-k8s.io", "MachineSet", false),
        ("cluster.x-k8s.io", "Machine", false),
        ("cluster.x-k8s.io", "MachinePool", false),
        ("addons.cluster.x-k8s.io", "ClusterResourceSet", true),
        (
            "addons.cluster.x-k8s.io",
            "ClusterResourceSetBinding",
            false,
        ),
        (
            "controlplane.cluster.x-k8s.io",
            "KubeadmControlPlane",
            false,
        ),
        ("controlplane.cluster.x-k8s.io", "RKE2ControlPlane", false),
        (
            "controlplane.cluster.x-k8s.io",
            "RKE2ControlPlaneTemplate",
            false,
        ),
        ("bootstrap.cluster.x-k8s.io", "KubeadmConfig", false),
        ("bootstrap.cluster.x-k8s.io", "KubeadmConfigTemplate", false),
        ("bootstrap.cluster.x-k8s.io", "RKE2Config", false),
        ("bootstrap.cluster.x-k8s.io", "RKE2ConfigTemplate", false),
        ("infrastructure.cluster.x-k8s.io", "DockerCluster", false),
        (
            "infrastructure.cluster.x-k8s.io",
            "DockerClusterTemplate",
            false,
        ),
        ("infrastructure.cluster.x-k8s.io", "DockerMachine", false),
        (
            "infrastructure.cluster.x-k8s.io",
            "DockerMachineTemplate",
            false,
        ),
        (
            "infrastructure.cluster.x-k8s.io",
            "DockerMachinePool",
            false,
        ),
        (
            "infrastructure.cluster.x-k8s.io",
            "DockerMachinePoolTemplate",
            false,
        ),
    ];
    for (group, kind, hierarchy) in capi {
        types.insert(TypeRule {
            group: group.into(),
            version: "v1beta2".into(),
            kind: kind.into(),
            plural: format!("{}s", kind.to_lowercase()),
            namespaced: true,
            force_move: hierarchy,
            force_move_hierarchy: hierarchy,
        });
    }
    for kind in ["InClusterIPPool", "IPAddressClaim", "IPAddress"] {
        types.insert(TypeRule {
            group: "ipam.cluster.x-k8s.io".into(),
            version: "v1beta2".into(),
            kind: kind.into(),
            plural: format!("{}es", kind.to_lowercase()),
            namespaced: true,
            force_move: false,
            force_move_hierarchy: false,
        });
    }
    types.insert(TypeRule {
        group: "infrastructure.cluster.x-k8s.io".into(),
        version: "v1beta2".into(),
        kind: "AWSClusterControllerIdentity".into(),
        plural: "awsclustercontrolleridentities".into(),
        namespaced: false,
        force_move: true,
        force_move_hierarchy: true,
    });
    types
}

fn cluster_label(cluster: &str) -> [(&'static str, &str); 1] {
    [("cluster.x-k8s.io/cluster-name", cluster)]
}

/// Two kubeadm Clusters without topology in `default`, a ClusterResourceSet bound to both, cluster
/// Secrets (owned, named, labelled), a move-labelled ConfigMap and an unrelated Secret.
pub fn kubeadm_objects() -> Vec<DynamicObject> {
    let c1: Owner = (CAPI, "Cluster", "c1", "u-c1", false);
    let c1c: Owner = (CAPI, "Cluster", "c1", "u-c1", true);
    let kcp: Owner = (CP, "KubeadmControlPlane", "c1-cp", "u-kcp", true);
    let m0: Owner = (CAPI, "Machine", "c1-cp-0", "u-m0", true);
    let crs: Owner = (ADDONS, "ClusterResourceSet", "crs", "u-crs", false);
    let l1 = cluster_label("c1");
    let l2 = cluster_label("c2");
    vec![
        obj(
            CAPI,
            "Cluster",
            "default",
            "c1",
            "u-c1",
            &[],
            &[("cni", "calico")],
            json!({"spec": {
                "controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": "c1-cp"},
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerCluster", "name": "c1"}},
                "status": {"initialization": {"infrastructureProvisioned": true, "controlPlaneInitialized": true}}}),
        ),
        obj(
            INFRA,
            "DockerCluster",
            "default",
            "c1",
            "u-dc1",
            &[c1c],
            &l1,
            json!({"spec": {}}),
        ),
        obj(
            CP,
            "KubeadmControlPlane",
            "default",
            "c1-cp",
            "u-kcp",
            &[c1c],
            &l1,
            json!({"spec": {"replicas": 1, "version": "v1.33.0",
                "machineTemplate": {"spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachineTemplate", "name": "c1-cp"}}}}}),
        ),
        obj(
            INFRA,
            "DockerMachineTemplate",
            "default",
            "c1-cp",
            "u-dmt-cp",
            &[c1],
            &[],
            json!({"spec": {"template": {"spec": {}}}}),
        ),
        obj(
            CAPI,
            "Machine",
            "default",
            "c1-cp-0",
            "u-m0",
            &[kcp],
            &l1,
            json!({"spec": {"clusterName": "c1"}}),
        ),
        obj(
            BOOT,
            "KubeadmConfig",
            "default",
            "c1-cp-0",
            "u-kc0",
            &[m0],
            &l1,
            json!({"spec": {}}),
        ),
        obj(
            INFRA,
            "DockerMachine",
            "default",
            "c1-cp-0",
            "u-dm0",
            &[m0],
            &l1,
            json!({"spec": {}}),
        ),
        obj(
            "v1",
            "Secret",
            "default",
            "c1-cp-0-bootstrap",
            "u-s-boot",
            &[(BOOT, "KubeadmConfig", "c1-cp-0", "u-kc0", true)],
            &l1,
            json!({"type": "cluster.x-k8s.io/secret", "data": {"value": "Ym9vdA=="}}),
        ),
        obj(
            CAPI,
            "MachineDeployment",
            "default",
            "c1-md",
            "u-md",
            &[c1],
            &l1,
            json!({"spec": {"clusterName": "c1", "replicas": 1}}),
        ),
        obj(
            CAPI,
            "MachineSet",
            "default",
            "c1-md-x",
            "u-ms",
            &[(CAPI, "MachineDeployment", "c1-md", "u-md", true)],
            &l1,
            json!({"spec": {"clusterName": "c1"}}),
        ),
        obj(
            CAPI,
            "Machine",
            "default",
            "c1-md-x-0",
            "u-m1",
            &[(CAPI, "MachineSet", "c1-md-x", "u-ms", true)],
            &l1,
            json!({"spec": {"clusterName": "c1"}}),
        ),
        obj(
            BOOT,
            "KubeadmConfigTemplate",
            "default",
            "c1-md",
            "u-kct",
            &[c1],
            &[],
            json!({"spec": {"template": {"spec": {}}}}),
        ),
        obj(
            INFRA,
            "DockerMachineTemplate",
            "default",
            "c1-md",
            "u-dmt-md",
            &[c1],
            &[],
            json!({"spec": {"template": {"spec": {}}}}),
        ),
        obj(
            "v1",
            "Secret",
            "default",
            "c1-kubeconfig",
            "u-s-kc",
            &[kcp],
            &l1,
            json!({"type": "cluster.x-k8s.io/secret"}),
        ),
        obj(
            "v1",
            "Secret",
            "default",
            "c1-ca",
            "u-s-ca",
            &[kcp],
            &l1,
            json!({"type": "kubernetes.io/tls"}),
        ),
        obj(
            "v1",
            "Secret",
            "default",
            "c1-etcd",
            "u-s-etcd",
            &[],
            &[],
            json!({"type": "kubernetes.io/tls"}),
        ),
        obj(
            "v1",
            "Secret",
            "default",
            "c1-cloud",
            "u-s-cloud",
            &[],
            &l1,
            json!({"data": {}}),
        ),
        obj(
            ADDONS,
            "ClusterResourceSet",
            "default",
            "crs",
            "u-crs",
            &[],
            &[],
            json!({"spec": {"clusterSelector": {"matchLabels": {"cni": "calico"}},
                "resources": [{"kind": "ConfigMap", "name": "crs-cni"}]}}),
        ),
        obj(
            "v1",
            "ConfigMap",
            "default",
            "crs-cni",
            "u-cm-cni",
            &[crs],
            &[],
            json!({"data": {"cni.yaml": "kind: List"}}),
        ),
        obj(
            ADDONS,
            "ClusterResourceSetBinding",
            "default",
            "c1",
            "u-crsb1",
            &[crs],
            &[],
            json!({"spec": {"clusterName": "c1", "bindings": [{"clusterResourceSetName": "crs"}]}}),
        ),
        obj(
            "v1",
            "ConfigMap",
            "default",
            "moved",
            "u-cm-moved",
            &[],
            &[(MOVE_LABEL, "")],
            json!({"data": {}}),
        ),
        obj(
            "v1",
            "Secret",
            "default",
            "unrelated",
            "u-s-unrel",
            &[],
            &[],
            json!({"data": {}}),
        ),
        obj(
            CAPI,
            "Cluster",
            "default",
            "c2",
            "u-c2",
            &[],
            &[("cni", "calico")],
            json!({"spec": {}}),
        ),
        obj(
            INFRA,
            "DockerCluster",
            "default",
            "c2",
            "u-dc2",
            &[(CAPI, "Cluster", "c2", "u-c2", true)],
            &l2,
            json!({"spec": {}}),
        ),
        obj(
            "v1",
            "Secret",
            "default",
            "c2-kubeconfig",
            "u-s-kc2",
            &[(CAPI, "Cluster", "c2", "u-c2", false)],
            &l2,
            json!({}),
        ),
        obj(
            ADDONS,
            "ClusterResourceSetBinding",
            "default",
            "c2",
            "u-crsb2",
            &[crs],
            &[],
            json!({"spec": {"clusterName": "c2"}}),
        ),
    ]
}

/// Two RKE2 Clusters of one ClusterClass (`v1beta2` `classRef`) in `fleet`, one with a
/// MachinePool.
pub fn rke2_topology_objects() -> Vec<DynamicObject> {
    let cc: Owner = (CAPI, "ClusterClass", "rke2-class", "u-cc", false);
    let r1: Owner = (CAPI, "Cluster", "r1", "u-r1", true);
    let mp: Owner = (CAPI, "MachinePool", "r1-pool-xyz", "u-mp", true);
    let l1 = cluster_label("r1");
    let topology = |name: &str| {
        json!({"spec": {"topology": {"classRef": {"name": "rke2-class"}, "version": "v1.33.1+rke2r1",
            "workers": {"machinePools": [{"class": "pool", "name": format!("{name}-pool")}]}}}})
    };
    vec![
        obj(
            CAPI,
            "ClusterClass",
            "fleet",
            "rke2-class",
            "u-cc",
            &[],
            &[],
            json!({"spec": {
                "infrastructure": {"templateRef": {"apiVersion": INFRA, "kind": "DockerClusterTemplate", "name": "rke2-class"}},
                "controlPlane": {"templateRef": {"apiVersion": CP, "kind": "RKE2ControlPlaneTemplate", "name": "rke2-class"},
                    "machineInfrastructure": {"templateRef": {"apiVersion": INFRA, "kind": "DockerMachineTemplate", "name": "rke2-class-cp"}}},
                "workers": {"machinePools": [{"class": "pool",
                    "bootstrap": {"templateRef": {"apiVersion": BOOT, "kind": "RKE2ConfigTemplate", "name": "rke2-class-pool"}},
                    "infrastructure": {"templateRef": {"apiVersion": INFRA, "kind": "DockerMachinePoolTemplate", "name": "rke2-class-pool"}}}]},
                "patches": [{"name": "p", "definitions": [{"jsonPatches": [{"op": "add", "path": "/spec/x", "valueFrom": {"template": "{{ .builtin.cluster.name }}"}}]}]}]}}),
        ),
        obj(
            INFRA,
            "DockerClusterTemplate",
            "fleet",
            "rke2-class",
            "u-dct",
            &[cc],
            &[],
            json!({"spec": {"template": {}}}),
        ),
        obj(
            CP,
            "RKE2ControlPlaneTemplate",
            "fleet",
            "rke2-class",
            "u-rcpt",
            &[cc],
            &[],
            json!({"spec": {"template": {}}}),
        ),
        obj(
            INFRA,
            "DockerMachineTemplate",
            "fleet",
            "rke2-class-cp",
            "u-dmt",
            &[cc],
            &[],
            json!({"spec": {"template": {}}}),
        ),
        obj(
            BOOT,
            "RKE2ConfigTemplate",
            "fleet",
            "rke2-class-pool",
            "u-rct",
            &[cc],
            &[],
            json!({"spec": {"template": {}}}),
        ),
        obj(
            INFRA,
            "DockerMachinePoolTemplate",
            "fleet",
            "rke2-class-pool",
            "u-dmpt",
            &[cc],
            &[],
            json!({"spec": {"template": {}}}),
        ),
        obj(
            CAPI,
            "Cluster",
            "fleet",
            "r1",
            "u-r1",
            &[],
            &[],
            topology("r1"),
        ),
        obj(
            INFRA,
            "DockerCluster",
            "fleet",
            "r1-abcde",
            "u-dc",
            &[r1],
            &l1,
            json!({"spec": {}}),
        ),
        obj(
            CP,
            "RKE2ControlPlane",
            "fleet",
            "r1-cp",
            "u-rcp",
            &[r1],
            &l1,
            json!({"spec": {"replicas": 1}}),
        ),
        obj(
            CAPI,
            "MachinePool",
            "fleet",
            "r1-pool-xyz",
            "u-mp",
            &[r1],
            &l1,
            json!({"spec": {"clusterName": "r1"}}),
        ),
        obj(
            INFRA,
            "DockerMachinePool",
            "fleet",
            "r1-pool-xyz",
            "u-dmp",
            &[mp],
            &l1,
            json!({"spec": {}}),
        ),
        obj(
            BOOT,
            "RKE2Config",
            "fleet",
            "r1-pool-xyz",
            "u-rc",
            &[mp],
            &l1,
            json!({"spec": {}}),
        ),
        obj(
            "v1",
            "Secret",
            "fleet",
            "r1-kubeconfig",
            "u-s-kc",
            &[r1],
            &l1,
            json!({}),
        ),
        obj(
            CAPI,
            "Cluster",
            "fleet",
            "r2",
            "u-r2",
            &[],
            &[],
            topology("r2"),
        ),
        obj(
            INFRA,
            "DockerCluster",
            "fleet",
            "r2-fghij",
            "u-dc2",
            &[(CAPI, "Cluster", "r2", "u-r2", true)],
            &cluster_label("r2"),
            json!({"spec": {}}),
        ),
    ]
}

/// A `v1beta1` topology Cluster in `tenant` using a ClusterClass in `classes`.
pub fn external_class_objects() -> Vec<DynamicObject> {
    vec![
        obj(
            "cluster.x-k8s.io/v1beta1",
            "ClusterClass",
            "classes",
            "shared",
            "u-cc",
            &[],
            &[],
            json!({"spec": {}}),
        ),
        obj(
            INFRA,
            "DockerClusterTemplate",
            "classes",
            "shared",
            "u-dct",
            &[(
                "cluster.x-k8s.io/v1beta1",
                "ClusterClass",
                "shared",
                "u-cc",
                false,
            )],
            &[],
            json!({"spec": {}}),
        ),
        obj(
            "cluster.x-k8s.io/v1beta1",
            "Cluster",
            "tenant",
            "t1",
            "u-t1",
            &[],
            &[],
            json!({"spec": {"topology": {"class": "shared", "classNamespace": "classes", "version": "v1.33.0"}}}),
        ),
    ]
}

/// A Cluster with an owned Secret whose second owner is not a move type.
pub fn unmovable_objects() -> Vec<DynamicObject> {
    vec![
        obj(
            CAPI,
            "Cluster",
            "default",
            "c1",
            "u-c1",
            &[],
            &[],
            json!({"spec": {}}),
        ),
        obj(
            "v1",
            "Secret",
            "default",
            "c1-orphan",
            "u-orphan",
            &[
                (CAPI, "Cluster", "c1", "u-c1", false),
                ("apps/v1", "Deployment", "some-app", "u-deploy", false),
            ],
            &[],
            json!({}),
        ),
        obj(
            "v1",
            "Secret",
            "default",
            "c1-orphan-child",
            "u-orphan-child",
            &[("v1", "Secret", "c1-orphan", "u-orphan", false)],
            &[],
            json!({}),
        ),
    ]
}

/// Objects labelled for move and move-hierarchy, a cluster-scoped identity, a blocked Cluster.
pub fn labelled_objects() -> Vec<DynamicObject> {
    let mut cluster = obj(
        CAPI,
        "Cluster",
        "default",
        "c1",
        "u-c1",
        &[],
        &[],
        json!({"spec": {}}),
    );
    cluster.metadata.annotations =
        Some([(BLOCK_MOVE_ANNOTATION.to_string(), String::new())].into());
    vec![
        cluster,
        obj(
            "v1",
            "ConfigMap",
            "default",
            "hierarchy-root",
            "u-root",
            &[],
            &[(MOVE_HIERARCHY_LABEL, "")],
            json!({}),
        ),
        obj(
            "v1",
            "Secret",
            "default",
            "hierarchy-child",
            "u-child",
            &[("v1", "ConfigMap", "hierarchy-root", "u-root", false)],
            &[],
            json!({}),
        ),
        obj(
            "v1",
            "ConfigMap",
            "default",
            "only-me",
            "u-only",
            &[],
            &[(MOVE_LABEL, "")],
            json!({}),
        ),
        obj(
            "v1",
            "Secret",
            "default",
            "not-me",
            "u-notme",
            &[("v1", "ConfigMap", "only-me", "u-only", false)],
            &[],
            json!({}),
        ),
        obj(
            "v1",
            "ConfigMap",
            "other",
            "elsewhere",
            "u-else",
            &[],
            &[(MOVE_LABEL, "")],
            json!({}),
        ),
        obj(
            INFRA,
            "AWSClusterControllerIdentity",
            "",
            "default",
            "u-id",
            &[],
            &[],
            json!({"spec": {}}),
        ),
        obj(
            "v1",
            "Secret",
            "capa-system",
            "identity-secret",
            "u-id-secret",
            &[(
                INFRA,
                "AWSClusterControllerIdentity",
                "default",
                "u-id",
                false,
            )],
            &[],
            json!({}),
        ),
    ]
}

pub const IPAM: &str = "ipam.cluster.x-k8s.io/v1beta2";

/// Clusters `c1` and (when `shared`) `c2` in `default` whose Machines take addresses from one
/// in-cluster pool, shaped as the in-cluster IPAM provider writes them (kubernetes-sigs/
/// cluster-api-ipam-provider-in-cluster: an `IPAddressClaim` owned by the machine, an
/// `IPAddress` owned by its claim (controller) and by the pool).
pub fn ipam_objects(shared: bool) -> Vec<DynamicObject> {
    let mut objects = Vec::new();
    let pool: Owner = (IPAM, "InClusterIPPool", "pool", "u-pool", false);
    let clusters: &[&str] = if shared { &["c1", "c2"] } else { &["c1"] };
    objects.push(obj(
        IPAM,
        "InClusterIPPool",
        "default",
        "pool",
        "u-pool",
        &[],
        &[],
        json!({"spec": {"addresses": ["10.0.0.10-10.0.0.99"], "prefix": 24, "gateway": "10.0.0.1"}}),
    ));
    for cluster in clusters {
        let uid = format!("u-{cluster}");
        let machine_uid = format!("u-{cluster}-m");
        let claim_uid = format!("u-{cluster}-claim");
        objects.push(obj(
            CAPI,
            "Cluster",
            "default",
            cluster,
            &uid,
            &[],
            &[],
            json!({"spec": {}}),
        ));
        objects.push(obj(
            CAPI,
            "Machine",
            "default",
            &format!("{cluster}-m"),
            &machine_uid,
            &[(CAPI, "Cluster", cluster, &uid, true)],
            &cluster_label(cluster),
            json!({"spec": {"clusterName": cluster}}),
        ));
        objects.push(obj(
            IPAM,
            "IPAddressClaim",
            "default",
            &format!("{cluster}-claim"),
            &claim_uid,
            &[(CAPI, "Machine", &format!("{cluster}-m"), &machine_uid, true)],
            &cluster_label(cluster),
            json!({"spec": {"poolRef": {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "pool"}}}),
        ));
        objects.push(obj(
            IPAM,
            "IPAddress",
            "default",
            &format!("{cluster}-claim"),
            &format!("u-{cluster}-addr"),
            &[
                (
                    IPAM,
                    "IPAddressClaim",
                    &format!("{cluster}-claim"),
                    &claim_uid,
                    true,
                ),
                pool,
            ],
            &[],
            json!({"spec": {"address": "10.0.0.10", "prefix": 24}}),
        ));
    }
    objects
}
