//! The CRD sets the sandbox can preload: Cluster API core, bootstrap/control-plane/infra
//! providers, Fleet, and this project's own CRDs.

use std::str::FromStr;
use std::sync::OnceLock;

use kube::CustomResourceExt;
use serde_json::{Value, json};

use crate::schema::make_structural;

include!(concat!(env!("OUT_DIR"), "/provider_crds.rs"));

/// A named group of CRDs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CrdSet {
    /// Cluster API core (`cluster.x-k8s.io/v1beta2` Cluster, ClusterClass, Machine,
    /// MachineDeployment, MachinePool; `runtime.cluster.x-k8s.io` ExtensionConfig).
    Capi,
    /// Kubeadm and RKE2 bootstrap/control plane and Docker infrastructure kinds.
    Bootstrap,
    /// Fleet (`fleet.cattle.io/v1alpha1`).
    Fleet,
    /// This project's CRDs from `config/crd/bases`.
    Provider,
}

impl CrdSet {
    /// Every set.
    pub const ALL: [CrdSet; 4] = [
        CrdSet::Capi,
        CrdSet::Bootstrap,
        CrdSet::Fleet,
        CrdSet::Provider,
    ];

    /// The CRD manifests of this set (generated once per process: schema generation is the
    /// slow part of starting a sandbox).
    pub fn crds(&self) -> Vec<Value> {
        static CACHE: [OnceLock<Vec<Value>>; 4] = [const { OnceLock::new() }; 4];
        let (i, build): (usize, fn() -> Vec<Value>) = match self {
            CrdSet::Capi => (0, capi),
            CrdSet::Bootstrap => (1, bootstrap),
            CrdSet::Fleet => (2, fleet),
            CrdSet::Provider => (3, provider),
        };
        CACHE[i].get_or_init(build).clone()
    }
}

impl FromStr for CrdSet {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "capi" => Ok(CrdSet::Capi),
            "bootstrap" => Ok(CrdSet::Bootstrap),
            "fleet" => Ok(CrdSet::Fleet),
            "provider" => Ok(CrdSet::Provider),
            other => Err(format!(
                "unknown CRD set {other:?} (expected capi, bootstrap, fleet or provider)"
            )),
        }
    }
}

/// Turns a generated CRD into what a real cluster serves: structural schemas, short names,
/// categories, printer columns and extra (permissive) versions.
fn finish(
    crd: impl serde::Serialize,
    short: &[&str],
    categories: &[&str],
    columns: Value,
    labels: Value,
) -> Value {
    let mut v = serde_json::to_value(crd).unwrap_or(Value::Null);
    if let Some(names) = v.pointer_mut("/spec/names").and_then(Value::as_object_mut) {
        if !short.is_empty() {
            names.insert("shortNames".into(), json!(short));
        }
        if !categories.is_empty() {
            names.insert("categories".into(), json!(categories));
        }
    }
    if let Some(vs) = v
        .pointer_mut("/spec/versions")
        .and_then(Value::as_array_mut)
    {
        for ver in vs {
            if let Some(s) = ver.pointer_mut("/schema/openAPIV3Schema") {
                make_structural(s);
            }
            if ver.pointer("/subresources/status").is_none()
                && ver
                    .pointer("/schema/openAPIV3Schema/properties/status")
                    .is_some()
            {
                ver["subresources"] = json!({"status": {}});
            }
            if columns.as_array().is_some_and(|c| !c.is_empty()) {
                ver["additionalPrinterColumns"] = columns.clone();
            }
        }
    }
    if labels.is_object() {
        v["metadata"]["labels"] = labels;
    }
    v
}

fn permissive_schema() -> Value {
    json!({
        "openAPIV3Schema": {
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"type": "object"},
                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
            }
        }
    })
}

fn add_version(crd: &mut Value, name: &str, storage: bool, columns: &Value) {
    if let Some(vs) = crd
        .pointer_mut("/spec/versions")
        .and_then(Value::as_array_mut)
    {
        vs.push(json!({
            "name": name,
            "served": true,
            "storage": storage,
            "schema": permissive_schema(),
            "subresources": {"status": {}},
            "additionalPrinterColumns": columns,
        }));
    }
}

/// A CRD with permissive (`x-kubernetes-preserve-unknown-fields`) schemas.
#[allow(clippy::too_many_arguments)]
pub fn permissive_crd(
    group: &str,
    kind: &str,
    plural: &str,
    versions: &[&str],
    storage: &str,
    namespaced: bool,
    short: &[&str],
    categories: &[&str],
    status: bool,
    labels: Value,
) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| {
            let mut ver = json!({
                "name": v,
                "served": true,
                "storage": *v == storage,
                "schema": permissive_schema(),
                "additionalPrinterColumns": [
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
                ],
            });
            if status {
                ver["subresources"] = json!({"status": {}});
            }
            ver
        })
        .collect();
    let mut names = json!({
        "kind": kind,
        "listKind": format!("{kind}List"),
        "plural": plural,
        "singular": kind.to_lowercase(),
    });
    if !short.is_empty() {
        names["shortNames"] = json!(short);
    }
    if !categories.is_empty() {
        names["categories"] = json!(categories);
    }
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}"), "labels": labels},
        "spec": {
            "group": group,
            "names": names,
            "scope": if namespaced { "Namespaced" } else { "Cluster" },
            "versions": vs,
        }
    })
}

fn capi_labels() -> Value {
    json!({"cluster.x-k8s.io/provider": "cluster-api", "cluster.x-k8s.io/v1beta2": "v1beta2"})
}

fn age() -> Value {
    json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"})
}

/// Restores list markers the real CAPI v1beta2 CRDs have and the generated schemas lost:
/// `conditions` anywhere (by `type`), and the named lists of `paths` (JSON pointers into the
/// version schema) by the given key.
fn capi_list_markers(crd: &mut Value, paths: &[(&str, &str)]) {
    fn conditions(s: &mut Value) {
        let Some(obj) = s.as_object_mut() else { return };
        if let Some(props) = obj.get_mut("properties").and_then(Value::as_object_mut) {
            for (k, p) in props.iter_mut() {
                if k == "conditions"
                    && p.get("type").and_then(Value::as_str) == Some("array")
                    && p.pointer("/items/properties/type").is_some()
                {
                    p["x-kubernetes-list-type"] = json!("map");
                    p["x-kubernetes-list-map-keys"] = json!(["type"]);
                }
                conditions(p);
            }
        }
        if let Some(items) = obj.get_mut("items") {
            conditions(items);
        }
    }
    let Some(vs) = crd
        .pointer_mut("/spec/versions")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for v in vs {
        let Some(schema) = v.pointer_mut("/schema/openAPIV3Schema") else {
            continue;
        };
        conditions(schema);
        for (path, key) in paths {
            if let Some(list) = schema.pointer_mut(path)
                && list.get("type").and_then(Value::as_str) == Some("array")
            {
                list["x-kubernetes-list-type"] = json!("map");
                list["x-kubernetes-list-map-keys"] = json!([key]);
            }
        }
    }
}

/// Cluster API core CRDs.
pub fn capi() -> Vec<Value> {
    use cluster_api_rs::{
        capi_cluster::Cluster, capi_clusterclass::ClusterClass,
        capi_extensionconfig::ExtensionConfig, capi_machine::Machine,
        capi_machinedeployment::MachineDeployment, capi_machinepool::MachinePool,
    };
    let cluster_cols = json!([
        {"name": "ClusterClass", "type": "string", "jsonPath": ".spec.topology.classRef.name"},
        {"name": "Available", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Available\")].status"},
        {"name": "CP Desired", "type": "integer", "jsonPath": ".status.controlPlane.desiredReplicas"},
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        age(),
        {"name": "Version", "type": "string", "jsonPath": ".spec.topology.version"}
    ]);
    let mut cluster = finish(
        Cluster::crd(),
        &["cl"],
        &["cluster-api"],
        cluster_cols.clone(),
        capi_labels(),
    );
    add_version(&mut cluster, "v1beta1", false, &cluster_cols);
    let cc_cols = json!([
        {"name": "Variables Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"VariablesReady\")].status"},
        age()
    ]);
    let mut cc = finish(
        ClusterClass::crd(),
        &["cc"],
        &["cluster-api"],
        cc_cols.clone(),
        capi_labels(),
    );
    add_version(&mut cc, "v1beta1", false, &cc_cols);
    let machine_cols = json!([
        {"name": "Cluster", "type": "string", "jsonPath": ".spec.clusterName"},
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        age(),
        {"name": "Version", "type": "string", "jsonPath": ".spec.version"}
    ]);
    capi_list_markers(
        &mut cluster,
        &[
            (
                "/properties/spec/properties/topology/properties/variables",
                "name",
            ),
            (
                "/properties/spec/properties/topology/properties/workers/properties/machineDeployments",
                "name",
            ),
            (
                "/properties/spec/properties/topology/properties/workers/properties/machinePools",
                "name",
            ),
        ],
    );
    capi_list_markers(
        &mut cc,
        &[
            ("/properties/spec/properties/variables", "name"),
            ("/properties/spec/properties/patches", "name"),
            (
                "/properties/spec/properties/workers/properties/machineDeployments",
                "class",
            ),
            (
                "/properties/spec/properties/workers/properties/machinePools",
                "class",
            ),
        ],
    );
    let mut rest = vec![
        finish(
            Machine::crd(),
            &["ma"],
            &["cluster-api"],
            machine_cols,
            capi_labels(),
        ),
        finish(
            MachineDeployment::crd(),
            &["md"],
            &["cluster-api"],
            json!([
                {"name": "Cluster", "type": "string", "jsonPath": ".spec.clusterName"},
                {"name": "Desired", "type": "integer", "jsonPath": ".spec.replicas"},
                {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                age()
            ]),
            capi_labels(),
        ),
        finish(
            MachinePool::crd(),
            &["mp"],
            &["cluster-api"],
            json!([
                {"name": "Cluster", "type": "string", "jsonPath": ".spec.clusterName"},
                {"name": "Desired", "type": "integer", "jsonPath": ".spec.replicas"},
                age()
            ]),
            capi_labels(),
        ),
        {
            // CAPI v1.11+ also serves the deprecated v1alpha1 (what providers ship for v1.10).
            let mut extension = finish(
                ExtensionConfig::crd(),
                &["ext"],
                &["cluster-api"],
                json!([age()]),
                capi_labels(),
            );
            add_version(&mut extension, "v1alpha1", false, &json!([age()]));
            extension
        },
    ];
    for crd in rest.iter_mut() {
        capi_list_markers(crd, &[]);
    }
    let mut out = vec![cluster, cc];
    out.append(&mut rest);
    out
}

/// Kubeadm/RKE2 bootstrap and control-plane CRDs and Docker infrastructure CRDs, with
/// permissive schemas.
pub fn bootstrap() -> Vec<Value> {
    let mut out = Vec::new();
    let table: &[(&str, &str, &str, &[&str], &str)] = &[
        (
            "controlplane.cluster.x-k8s.io",
            "KubeadmControlPlane",
            "kubeadmcontrolplanes",
            &["kcp"],
            "kubeadm",
        ),
        (
            "controlplane.cluster.x-k8s.io",
            "KubeadmControlPlaneTemplate",
            "kubeadmcontrolplanetemplates",
            &[],
            "kubeadm",
        ),
        (
            "controlplane.cluster.x-k8s.io",
            "RKE2ControlPlane",
            "rke2controlplanes",
            &["rcp"],
            "rke2",
        ),
        (
            "controlplane.cluster.x-k8s.io",
            "RKE2ControlPlaneTemplate",
            "rke2controlplanetemplates",
            &[],
            "rke2",
        ),
        (
            "bootstrap.cluster.x-k8s.io",
            "KubeadmConfig",
            "kubeadmconfigs",
            &[],
            "kubeadm",
        ),
        (
            "bootstrap.cluster.x-k8s.io",
            "KubeadmConfigTemplate",
            "kubeadmconfigtemplates",
            &[],
            "kubeadm",
        ),
        (
            "bootstrap.cluster.x-k8s.io",
            "RKE2Config",
            "rke2configs",
            &[],
            "rke2",
        ),
        (
            "bootstrap.cluster.x-k8s.io",
            "RKE2ConfigTemplate",
            "rke2configtemplates",
            &[],
            "rke2",
        ),
        (
            "infrastructure.cluster.x-k8s.io",
            "DockerCluster",
            "dockerclusters",
            &[],
            "docker",
        ),
        (
            "infrastructure.cluster.x-k8s.io",
            "DockerClusterTemplate",
            "dockerclustertemplates",
            &[],
            "docker",
        ),
        (
            "infrastructure.cluster.x-k8s.io",
            "DockerMachine",
            "dockermachines",
            &[],
            "docker",
        ),
        (
            "infrastructure.cluster.x-k8s.io",
            "DockerMachineTemplate",
            "dockermachinetemplates",
            &[],
            "docker",
        ),
    ];
    for (group, kind, plural, short, provider) in table {
        let provider_label = match *group {
            "controlplane.cluster.x-k8s.io" => format!("control-plane-{provider}"),
            "bootstrap.cluster.x-k8s.io" => format!("bootstrap-{provider}"),
            _ => format!("infrastructure-{provider}"),
        };
        out.push(permissive_crd(
            group,
            kind,
            plural,
            &["v1beta1", "v1beta2"],
            "v1beta2",
            true,
            short,
            &["cluster-api"],
            true,
            json!({"cluster.x-k8s.io/provider": provider_label, "cluster.x-k8s.io/v1beta2": "v1beta2", "cluster.x-k8s.io/v1beta1": "v1beta1"}),
        ));
    }
    out
}

fn label_selector_schema() -> Value {
    json!({
        "type": "object",
        "x-kubernetes-map-type": "atomic",
        "properties": {
            "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
            "matchExpressions": {"type": "array", "items": {
                "type": "object",
                "required": ["key", "operator"],
                "properties": {
                    "key": {"type": "string"},
                    "operator": {"type": "string"},
                    "values": {"type": "array", "items": {"type": "string"}}
                }
            }}
        }
    })
}

/// Fleet CRDs: Cluster, ClusterGroup, ClusterRegistrationToken from `fleet-api-rs`;
/// BundleNamespaceMapping (top-level selectors, no spec); Bundle, GitRepo, HelmOp,
/// BundleDeployment, ClusterRegistration with permissive schemas.
pub fn fleet() -> Vec<Value> {
    use fleet_api_rs::{
        fleet_cluster::Cluster, fleet_cluster_registration_token::ClusterRegistrationToken,
        fleet_clustergroup::ClusterGroup,
    };
    let g = "fleet.cattle.io";
    let mut out = vec![
        finish(
            Cluster::crd(),
            &[],
            &[],
            json!([
                {"name": "Bundles-Ready", "type": "string", "jsonPath": ".status.display.readyBundles"},
                {"name": "Last-Seen", "type": "string", "jsonPath": ".status.agent.lastSeen"},
                {"name": "Status", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].message"},
                age()
            ]),
            Value::Null,
        ),
        finish(
            ClusterGroup::crd(),
            &[],
            &[],
            json!([
                {"name": "Clusters-Ready", "type": "string", "jsonPath": ".status.display.readyClusters"},
                {"name": "Bundles-Ready", "type": "string", "jsonPath": ".status.display.readyBundles"},
                {"name": "Status", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].message"},
                age()
            ]),
            Value::Null,
        ),
        finish(
            ClusterRegistrationToken::crd(),
            &[],
            &[],
            json!([
                {"name": "Secret-Name", "type": "string", "jsonPath": ".status.secretName"},
                age()
            ]),
            Value::Null,
        ),
    ];
    out.push(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "bundlenamespacemappings.fleet.cattle.io"},
        "spec": {
            "group": g,
            "names": {"kind": "BundleNamespaceMapping", "listKind": "BundleNamespaceMappingList",
                      "plural": "bundlenamespacemappings", "singular": "bundlenamespacemapping"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1alpha1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "bundleSelector": label_selector_schema(),
                        "namespaceSelector": label_selector_schema()
                    }
                }},
                "additionalPrinterColumns": [age()]
            }]
        }
    }));
    for (kind, plural) in [
        ("Bundle", "bundles"),
        ("GitRepo", "gitrepos"),
        ("HelmOp", "helmops"),
        ("BundleDeployment", "bundledeployments"),
        ("ClusterRegistration", "clusterregistrations"),
    ] {
        out.push(permissive_crd(
            g,
            kind,
            plural,
            &["v1alpha1"],
            "v1alpha1",
            true,
            &[],
            &[],
            true,
            Value::Null,
        ));
    }
    out
}

/// This project's CRDs, embedded from `config/crd/bases/*.yaml` at build time.
pub fn provider() -> Vec<Value> {
    let mut out = Vec::new();
    for (_, yaml) in PROVIDER_CRDS {
        for doc in serde_yaml::Deserializer::from_str(yaml) {
            if let Ok(v) = <Value as serde::Deserialize>::deserialize(doc)
                && v.get("kind") == Some(&json!("CustomResourceDefinition"))
            {
                out.push(v);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::validate_structural;

    #[test]
    fn every_set_is_structural() {
        for set in CrdSet::ALL {
            for crd in set.crds() {
                let name = crd["metadata"]["name"].as_str().unwrap_or("?").to_string();
                for v in crd["spec"]["versions"].as_array().unwrap() {
                    let causes = validate_structural(&v["schema"]["openAPIV3Schema"], "s");
                    assert!(causes.is_empty(), "{name} {}: {causes:?}", v["name"]);
                }
            }
        }
    }

    #[test]
    fn capi_schemas_have_the_real_list_markers() {
        let cluster = capi()
            .into_iter()
            .find(|c| c["spec"]["names"]["kind"] == "Cluster")
            .unwrap();
        let v = cluster["spec"]["versions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == "v1beta2")
            .unwrap();
        let s = &v["schema"]["openAPIV3Schema"]["properties"];
        assert_eq!(
            s["status"]["properties"]["conditions"]["x-kubernetes-list-map-keys"],
            json!(["type"])
        );
        assert_eq!(
            s["spec"]["properties"]["topology"]["properties"]["variables"]["x-kubernetes-list-type"],
            "map"
        );
        let cc = capi()
            .into_iter()
            .find(|c| c["spec"]["names"]["kind"] == "ClusterClass")
            .unwrap();
        let s = &cc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
        assert_eq!(
            s["workers"]["properties"]["machineDeployments"]["x-kubernetes-list-map-keys"],
            json!(["class"])
        );
    }

    #[test]
    fn bundle_namespace_mapping_has_top_level_selectors() {
        let bnm = fleet()
            .into_iter()
            .find(|c| c["spec"]["names"]["kind"] == "BundleNamespaceMapping")
            .unwrap();
        let props = &bnm["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"];
        assert!(props.get("bundleSelector").is_some());
        assert!(props.get("namespaceSelector").is_some());
        assert!(props.get("spec").is_none());
    }
}
