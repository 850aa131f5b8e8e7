//! docs/lifecycle.md, section "Teardown before deletion": every YAML document of the section is
//! applied to the sandbox (server-side, as `kubectl apply --server-side` does), in order; then
//! the test plays Cluster API, Fleet and the workload cluster through the deletion the guide
//! describes, and checks that what the guide shows at each step (the condition's messages,
//! the labels, the Events) is what the provider writes (times aside).

use crate::common;

use caapf::api::CapiCluster;
use caapf::hooks::handlers;
use caapf::hooks::types::{Hook, Response, ResponseBody};
use caapf::names;
use common::guide::{apply, documents};
use common::{Harness, eventually, has_finalizer};
use k8s_openapi::api::core::v1::{Namespace, Secret, Service};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube_sandbox::{Sandbox, SandboxOptions};
use serde_json::{Value, json};

const NS: &str = "clusters";
const CLUSTER: &str = "prod-eu-1";
/// Fleet's namespace of Fleet Cluster clusters/prod-eu-1 (`cluster-<ns>-<name>-<KeyHash>`,
/// rancher/fleet `agentmanagement/controllers/cluster/controller.go` `clusterNamespace`).
const BD_NS: &str = "cluster-clusters-prod-eu-1-84204bfe5bc0";

/// The section of docs/lifecycle.md this test covers.
fn section() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/lifecycle.md");
    let text = std::fs::read_to_string(path).expect("docs/lifecycle.md");
    let start = text
        .find("\n## Teardown before deletion\n")
        .expect("the section");
    let rest = &text[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3);
    rest[..end].to_string()
}

/// Times as RFC 3339 are the only thing that differs between a run and the guide.
fn timeless(text: &str) -> String {
    regex::Regex::new(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")
        .expect("regex")
        .replace_all(text, "TIME")
        .into_owned()
}

fn fleet(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("fleet.cattle.io", "v1alpha1", kind),
        plural,
    )
}

/// Plays Fleet: the Bundle a HelmOp makes (its `spec.labels` copied, rancher/fleet v0.16.1
/// `helmops/reconciler/helmop_controller.go`), and for each bundle named the BundleDeployment
/// in the cluster's namespace with the Bundle's labels (`target/target.go`
/// `BundleDeploymentLabels`).
async fn deploy(h: &Harness, helmops: &[Value]) {
    let bundles: Api<DynamicObject> =
        Api::namespaced_with(h.client.clone(), NS, &fleet("Bundle", "bundles"));
    for helmop in helmops {
        let name = helmop["metadata"]["name"].as_str().expect("name");
        let mut labels = helmop["spec"]["labels"].clone();
        if labels.is_null() {
            labels = json!({});
        }
        labels["fleet.cattle.io/fleet-helm-name"] = json!(name);
        let mut spec = helmop["spec"].clone();
        if let Some(spec) = spec.as_object_mut() {
            spec.remove("labels");
        }
        let bundle: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "fleet.cattle.io/v1alpha1", "kind": "Bundle",
            "metadata": {"name": name, "namespace": NS, "labels": labels}, "spec": spec}))
        .expect("bundle");
        bundles
            .create(&PostParams::default(), &bundle)
            .await
            .expect("bundle");
    }
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": BD_NS}})).expect("namespace");
    Api::<Namespace>::all(h.client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .expect("namespace");
    let deployments: Api<DynamicObject> = Api::namespaced_with(
        h.client.clone(),
        BD_NS,
        &fleet("BundleDeployment", "bundledeployments"),
    );
    for bundle in [
        "fleet-agent-prod-eu-1",
        "ingress-nginx",
        "openstack-ccm",
        "monitoring",
    ] {
        let mut labels = match bundles.get_opt(bundle).await.expect("get") {
            Some(object) => json!(object.metadata.labels.unwrap_or_default()),
            None => json!({}),
        };
        labels["fleet.cattle.io/bundle-name"] = json!(bundle);
        labels["fleet.cattle.io/bundle-namespace"] = json!(NS);
        labels["fleet.cattle.io/cluster"] = json!(CLUSTER);
        labels["fleet.cattle.io/cluster-namespace"] = json!(NS);
        labels["fleet.cattle.io/managed"] = json!("true");
        let bd: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "fleet.cattle.io/v1alpha1", "kind": "BundleDeployment",
            "metadata": {"name": bundle, "namespace": BD_NS, "labels": labels,
                         "finalizers": ["fleet.cattle.io/bundle-deployment-finalizer"]},
            "spec": {"deploymentID": "s-1:1"}, "status": {"ready": true}}))
        .expect("bd");
        deployments
            .create(&PostParams::default(), &bd)
            .await
            .expect("bd");
    }
}

/// Plays Fleet removing a BundleDeployment (gone at once, before the agent uninstalls).
async fn fleet_removes(h: &Harness, name: &str) {
    let api: Api<DynamicObject> = Api::namespaced_with(
        h.client.clone(),
        BD_NS,
        &fleet("BundleDeployment", "bundledeployments"),
    );
    api.delete(name, &DeleteParams::default())
        .await
        .expect("delete");
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("finalizer");
}

async fn call(h: &Harness) -> Response {
    let live: CapiCluster = h.get(NS, CLUSTER).await.expect("cluster");
    let mut cluster: Value = serde_json::from_str(include_str!(
        "fixtures/teardown/before-cluster-delete-v1beta2.json"
    ))
    .expect("fixture");
    let cluster = cluster["request"]["cluster"].take();
    let mut cluster = cluster;
    let meta = &mut cluster["metadata"];
    meta["name"] = json!(CLUSTER);
    meta["uid"] = json!(live.metadata.uid);
    meta["labels"] = json!(live.metadata.labels);
    meta["annotations"] = json!(live.metadata.annotations.clone().unwrap_or_default());
    meta["finalizers"] = json!(live.metadata.finalizers);
    meta["deletionTimestamp"] = json!(live.metadata.deletion_timestamp);
    let body = serde_json::to_vec(&json!({
        "apiVersion": "hooks.runtime.cluster.x-k8s.io/v1alpha1",
        "kind": "BeforeClusterDeleteRequest", "settings": {}, "cluster": cluster,
    }))
    .expect("json");
    let manager = h.manager.as_ref().expect("manager");
    handlers::handle(&manager.hooks, Hook::BeforeClusterDelete, &body).await
}

async fn condition(h: &Harness) -> Value {
    let cluster: CapiCluster = h.get(NS, CLUSTER).await.expect("cluster");
    cluster
        .body
        .get("status")
        .and_then(|s| {
            s["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == names::WORKLOADS_REMOVED_CONDITION)
                .cloned()
        })
        .expect("the condition")
}

/// The guide shows `line` (times aside).
#[track_caller]
fn shown(guide: &str, line: &str) {
    assert!(
        timeless(guide).contains(&timeless(line)),
        "docs/lifecycle.md does not show:\n{line}"
    );
}

/// Asserts that the guide shows the condition's message as `kubectl describe` prints it.
#[track_caller]
fn shown_message(guide: &str, condition: &Value) {
    let message = condition["message"].as_str().expect("message");
    shown(guide, &format!("Message:               {message}\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_teardown_guide_is_what_happens() {
    play(false).await;
}

/// Both guides of docs/lifecycle.md at once: the upgrade guide's CCM Bundle selects the cluster
/// by the version labels the teardown keeps, and is labelled `keep-during-teardown`, so the
/// deletion completes without waiting for its timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_guides_together_delete_without_waiting_for_the_timeout() {
    play(true).await;
}

/// The upgrade guide's documents (its FleetAddonConfig and its Bundle).
fn upgrade_section() -> Vec<Value> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/lifecycle.md");
    let text = std::fs::read_to_string(path).expect("docs/lifecycle.md");
    let section = text
        .split("\n## Add-ons through an upgrade")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("the upgrade section");
    documents(section)
}

/// `patch` merged into `base` (objects by key, anything else replaced).
fn merged(base: &mut Value, patch: &Value) {
    match (base.as_object_mut(), patch.as_object()) {
        (Some(base), Some(patch)) => {
            for (key, value) in patch {
                merged(base.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
        _ => *base = patch.clone(),
    }
}

async fn play(with_upgrade_guide: bool) {
    let guide = section();
    let mut docs = documents(&guide);
    let upgrade = if with_upgrade_guide {
        upgrade_section()
    } else {
        Vec::new()
    };
    let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        [
            "FleetAddonConfig",
            "Namespace",
            "HelmOp",
            "HelmOp",
            "Bundle",
            "Cluster"
        ]
    );
    let mut h = Harness::new().await;
    for doc in &upgrade {
        match doc["kind"].as_str() {
            // One FleetAddonConfig with both guides' settings.
            Some("FleetAddonConfig") => merged(&mut docs[0], doc),
            _ => h.namespace("fleet-default", json!({})).await,
        }
    }
    for doc in &docs {
        apply(&h, doc).await;
    }
    let ccm = upgrade.iter().find(|d| d["kind"] == "Bundle");
    if let Some(ccm) = ccm {
        apply(&h, ccm).await;
    }
    h.class(NS, "quick-start", json!({})).await;
    // Cluster API: its own finalizer, an initialized control plane.
    h.merge_cluster(
        NS,
        CLUSTER,
        json!({"metadata": {"finalizers": ["cluster.cluster.x-k8s.io"]}}),
    )
    .await;
    h.initialize(NS, CLUSTER).await;
    if with_upgrade_guide {
        // Cluster API reached the topology version: the Fleet Cluster shows it.
        let cluster: CapiCluster = h.get(NS, CLUSTER).await.expect("cluster");
        h.merge_cluster_status(
            NS,
            CLUSTER,
            json!({"conditions": [{"type": "TopologyReconciled", "status": "True", "reason": "ReconcileSucceeded",
                "message": "", "observedGeneration": cluster.metadata.generation,
                "lastTransitionTime": "2026-11-23T10:00:00Z"}]}),
        )
        .await;
    }
    h.start().await;
    let version_labels = if with_upgrade_guide {
        vec![
            format!("{}=1.33", names::CONTROL_PLANE_MINOR_LABEL),
            format!("{}=1.33", names::WORKERS_MINOR_LABEL),
        ]
    } else {
        Vec::new()
    };
    let fleet_clusters: Api<DynamicObject> =
        Api::namespaced_with(h.client.clone(), NS, &fleet("Cluster", "clusters"));
    eventually(
        "the Fleet Cluster carries the Cluster's and the class labels",
        || async {
            let labels = fleet_clusters
                .get_opt(CLUSTER)
                .await
                .ok()??
                .metadata
                .labels?;
            (labels.get("ingress").map(String::as_str) == Some("nginx")
                && labels.contains_key(names::CLUSTERCLASS_NAME_LABEL)
                && (!with_upgrade_guide
                    || labels
                        .get(names::CONTROL_PLANE_MINOR_LABEL)
                        .map(String::as_str)
                        == Some("1.33")))
            .then_some(())
        },
    )
    .await;
    // Fleet: registered, the bundles deployed.
    fleet_clusters
        .patch_status(
            CLUSTER,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"namespace": BD_NS, "agent": {
                "lastSeen": "2026-11-23T10:19:45Z", "namespace": "fleet-addon-agent"}}})),
        )
        .await
        .expect("registered");
    let helmops: Vec<Value> = docs
        .iter()
        .filter(|d| d["kind"] == "HelmOp")
        .cloned()
        .collect();
    deploy(&h, &helmops).await;
    if let Some(ccm) = ccm {
        // Fleet targets the upgrade guide's CCM by control-plane-minor 1.33; its
        // BundleDeployment carries the Bundle's labels (`target/target.go`).
        let mut labels = ccm["metadata"]["labels"].clone();
        for (key, value) in [
            ("fleet.cattle.io/bundle-name", "cloud-controller-manager"),
            ("fleet.cattle.io/bundle-namespace", "fleet-default"),
            ("fleet.cattle.io/cluster", CLUSTER),
            ("fleet.cattle.io/cluster-namespace", NS),
        ] {
            labels[key] = json!(value);
        }
        let bd: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "fleet.cattle.io/v1alpha1", "kind": "BundleDeployment",
            "metadata": {"name": "cloud-controller-manager", "namespace": BD_NS, "labels": labels},
            "spec": {"deploymentID": "s-ccm:1"}}))
        .expect("bd");
        Api::<DynamicObject>::namespaced_with(
            h.client.clone(),
            BD_NS,
            &fleet("BundleDeployment", "bundledeployments"),
        )
        .create(&PostParams::default(), &bd)
        .await
        .expect("ccm bd");
    }
    // The workload cluster, with the ingress controller's load balancer, and its kubeconfig.
    let workload = Sandbox::start_with(SandboxOptions {
        crds: Vec::new(),
        ..SandboxOptions::default()
    })
    .await
    .expect("workload");
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": "ingress-nginx"}})).expect("ns");
    Api::<Namespace>::all(workload.client())
        .create(&PostParams::default(), &namespace)
        .await
        .expect("namespace");
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": "ingress-nginx-controller", "namespace": "ingress-nginx",
                     "finalizers": ["service.kubernetes.io/load-balancer-cleanup"]},
        "spec": {"type": "LoadBalancer", "ports": [{"name": "http", "port": 80}]}}))
    .expect("service");
    let services: Api<Service> = Api::namespaced(workload.client(), "ingress-nginx");
    services
        .create(&PostParams::default(), &service)
        .await
        .expect("service");
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": format!("{CLUSTER}-kubeconfig"), "namespace": NS},
        "stringData": {"value": kube_sandbox::kubeconfig_yaml(&workload.url())}}))
    .expect("secret");
    Api::<Secret>::namespaced(h.client.clone(), NS)
        .create(&PostParams::default(), &secret)
        .await
        .expect("kubeconfig");

    // kubectl delete cluster prod-eu-1 -n clusters --wait=false
    h.delete_cluster(NS, CLUSTER).await;
    let first = call(&h).await;
    assert!(
        matches!(first.body, ResponseBody::Retry { retry_after_seconds } if retry_after_seconds >= 10)
    );
    eventually("the selection labels are taken off", || async {
        let labels = fleet_clusters
            .get_opt(CLUSTER)
            .await
            .ok()??
            .metadata
            .labels?;
        let shown: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let mut want = version_labels.clone();
        want.push(format!("{}=true", names::TEARDOWN_LABEL));
        want.sort();
        (shown == want).then_some(())
    })
    .await;
    shown(&guide, &format!("   {}=true\n", names::TEARDOWN_LABEL));

    // While Fleet removes the BundleDeployments.
    call(&h).await;
    let removing = condition(&h).await;
    assert_eq!(
        (removing["status"].as_str(), removing["reason"].as_str()),
        (Some("False"), Some("Removing"))
    );
    if with_upgrade_guide {
        let message = removing["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("fleet-default/cloud-controller-manager"),
            "the upgrade guide's CCM is kept: {message}"
        );
    } else {
        shown_message(&guide, &removing);
    }
    fleet_removes(&h, "monitoring").await;
    fleet_removes(&h, "ingress-nginx").await;

    // Waiting for the load balancer.
    call(&h).await;
    let waiting = condition(&h).await;
    if !with_upgrade_guide {
        shown_message(&guide, &waiting);
    }

    // The load balancer is released: the hook lets Cluster API go on.
    services
        .delete("ingress-nginx-controller", &DeleteParams::default())
        .await
        .expect("uninstalled");
    services
        .patch(
            "ingress-nginx-controller",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("released");
    let done = call(&h).await;
    assert!(
        matches!(
            done.body,
            ResponseBody::Retry {
                retry_after_seconds: 0
            }
        ),
        "{done:?}"
    );
    let removed = condition(&h).await;
    assert_eq!(
        (removed["status"].as_str(), removed["reason"].as_str()),
        (Some("True"), Some("Removed"))
    );
    if !with_upgrade_guide {
        shown_message(&guide, &removed);
    }
    let events: Vec<Event> = Api::<Event>::namespaced(h.client.clone(), NS)
        .list(&Default::default())
        .await
        .expect("events")
        .items;
    for reason in ["FleetWorkloadsRemoving", "FleetWorkloadsRemoved"] {
        let event = events
            .iter()
            .find(|e| e.reason.as_deref() == Some(reason))
            .unwrap_or_else(|| panic!("Event {reason}"));
        assert_eq!(
            event.reporting_controller.as_deref(),
            Some("caapf-controller")
        );
        shown(&guide, &format!("Normal  {reason:<22}"));
    }
    // The Warnings, the condition's reasons, the annotations and the field manager the guide
    // names are the provider's.
    for name in [
        "FleetWorkloadsRemovalTimedOut",
        "FleetWorkloadsRemovalSkipped",
        names::TEARDOWN_FIELD_MANAGER,
        names::SKIP_WORKLOAD_REMOVAL_ANNOTATION,
        names::REMOVE_WORKLOADS_ANNOTATION,
        names::KEEP_DURING_TEARDOWN_LABEL,
        names::TEARDOWN_BUNDLES_GONE_ANNOTATION,
    ] {
        shown(&guide, name);
    }
    // Cluster API proceeds: ok-to-delete, then the provider lets go.
    h.merge_cluster(
        NS,
        CLUSTER,
        json!({"metadata": {"annotations": {(names::CAPI_OK_TO_DELETE_ANNOTATION): ""}}}),
    )
    .await;
    eventually("our finalizer is removed", || async {
        let cluster: CapiCluster = h.get(NS, CLUSTER).await?;
        (!has_finalizer(&cluster)).then_some(())
    })
    .await;
    h.stop().await;
    workload.shutdown().await;
}
