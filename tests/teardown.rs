//! Teardown before deletion (issue #30, docs/lifecycle.md) against the sandbox API server, with
//! the manager running (the import controller drains, the hooks answer). The tests play Cluster
//! API (the Cluster's deletion, its BeforeClusterDelete requests as v1.11/v1.12 and v1.13 send
//! them, `ok-to-delete`), Fleet (the Fleet Cluster's registration, BundleDeployments created
//! and removed in the order Fleet removes them: a label change, then the BundleDeployment gone
//! at once, the agent's uninstall later) and a workload cluster (a second sandbox, reached
//! through the Cluster's kubeconfig Secret). Objects come from `tests/fixtures/teardown/`.

use crate::common;

use caapf::api::CapiCluster;
use caapf::hooks::handlers;
use caapf::hooks::types::{Hook, Response, ResponseBody, ResponseStatus};
use caapf::names;
use common::{Harness, eventually, has_finalizer};
use k8s_openapi::api::core::v1::{
    Namespace, PersistentVolume, PersistentVolumeClaim, Secret, Service,
};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube_sandbox::{FaultConfig, FaultRule, FaultTarget, Sandbox, SandboxOptions};
use serde_json::{Value, json};

const NS: &str = "clusters";
/// Fleet's namespace of Fleet Cluster clusters/c1 (`cluster-<ns>-<name>-<KeyHash>`).
const BD_NS: &str = "cluster-clusters-c1-5b8cae8a3004";
/// Cluster API's own finalizer on every Cluster (`cluster.cluster.x-k8s.io`).
const CAPI_FINALIZER: &str = "cluster.cluster.x-k8s.io";

fn fixture(name: &str) -> Value {
    let path = format!(
        "{}/tests/fixtures/teardown/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).expect("fixture");
    serde_yaml::from_str(&text).expect("fixture")
}

fn resource(group: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1alpha1", kind), plural)
}

fn deployments(h: &Harness) -> Api<DynamicObject> {
    Api::namespaced_with(
        h.client.clone(),
        BD_NS,
        &resource("fleet.cattle.io", "BundleDeployment", "bundledeployments"),
    )
}

fn fleet_clusters(h: &Harness) -> Api<DynamicObject> {
    Api::namespaced_with(
        h.client.clone(),
        NS,
        &resource("fleet.cattle.io", "Cluster", "clusters"),
    )
}

/// An object of a fixture, ready to be created (server-set fields dropped).
fn creatable(mut object: Value) -> Value {
    if let Some(meta) = object["metadata"].as_object_mut() {
        for key in [
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "managedFields",
        ] {
            meta.remove(key);
        }
    }
    object
}

fn rfc3339(time: Timestamp) -> String {
    time.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A manager on a sandbox with `config`, namespace [`NS`], and CAPI Cluster `c1` with a
/// topology, the labels of the fixture's Fleet Cluster, `annotations`, Cluster API's finalizer
/// and an initialized control plane; returns once its Fleet Cluster carries its labels.
async fn imported(config: &str, annotations: Value) -> Harness {
    let mut h = Harness::new().await;
    h.namespace(NS, json!({})).await;
    h.config(config).await;
    h.cluster(
        NS,
        json!({"metadata": {"name": "c1", "labels": {"env": "prod", "ingress": "nginx"},
                "annotations": annotations, "finalizers": [CAPI_FINALIZER]},
               "spec": {
                "controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": "c1-q8k2m"},
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerCluster", "name": "c1-4xw9t"},
                "topology": {"classRef": {"name": "quick-start"}, "version": "v1.33.1",
                             "controlPlane": {"replicas": 1}}}}),
    )
    .await;
    h.initialize(NS, "c1").await;
    h.start().await;
    eventually("the Fleet Cluster carries the Cluster's labels", || async {
        let fleet = h.fleet_cluster(NS, "c1").await?;
        let labels = fleet.metadata.labels?;
        (labels.get("ingress").map(String::as_str) == Some("nginx")
            && labels.contains_key("clusterclass-name.fleet.addons.cluster.x-k8s.io"))
        .then_some(())
    })
    .await;
    // Someone labels the Fleet Cluster by hand: not ours, the drain keeps it.
    fleet_clusters(&h)
        .patch(
            "c1",
            &PatchParams::apply("kubectl-label"),
            &Patch::Apply(
                json!({"apiVersion": "fleet.cattle.io/v1alpha1", "kind": "Cluster",
                "metadata": {"name": "c1", "labels": {"owner": "team-a"}}}),
            ),
        )
        .await
        .expect("label by hand");
    h
}

/// Plays Fleet: the Fleet Cluster registered (its namespace, the agent checking in).
async fn register(h: &Harness) {
    let status = json!({"status": {"namespace": BD_NS, "agent": {
        "lastSeen": rfc3339(Timestamp::now()), "namespace": "fleet-addon-agent"}}});
    fleet_clusters(h)
        .patch_status("c1", &PatchParams::default(), &Patch::Merge(status))
        .await
        .expect("registered");
}

/// Plays Fleet: the Bundles of the fixture and the BundleDeployments named `names` (of the
/// fixture) in the Fleet Cluster's namespace.
async fn deploy(h: &Harness, names: &[&str]) {
    let api: Api<Namespace> = Api::all(h.client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": BD_NS,
        "labels": {"fleet.cattle.io/managed": "true"}}}))
    .expect("namespace");
    let _ = api.create(&PostParams::default(), &ns).await;
    let bundles: Api<DynamicObject> = Api::namespaced_with(
        h.client.clone(),
        NS,
        &resource("fleet.cattle.io", "Bundle", "bundles"),
    );
    for bundle in fixture("bundles.yaml").as_array().expect("list") {
        let object: DynamicObject =
            serde_json::from_value(creatable(bundle.clone())).expect("bundle");
        let _ = bundles.create(&PostParams::default(), &object).await;
    }
    for bd in fixture("bundledeployments.yaml").as_array().expect("list") {
        if !names.contains(&bd["metadata"]["name"].as_str().unwrap_or_default()) {
            continue;
        }
        let object: DynamicObject = serde_json::from_value(creatable(bd.clone())).expect("bd");
        deployments(h)
            .create(&PostParams::default(), &object)
            .await
            .expect("create BundleDeployment");
    }
}

/// Plays Fleet removing a BundleDeployment whose bundle no longer targets the cluster: the
/// delete, then the fleet-controller removing its finalizer without waiting for the agent
/// (rancher/fleet v0.16.1 `reconciler/bundledeployment_controller.go`): it is gone at once.
async fn fleet_removes(h: &Harness, name: &str) {
    let api = deployments(h);
    api.delete(name, &DeleteParams::default())
        .await
        .expect("delete BundleDeployment");
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("finalizer removed");
    eventually(&format!("BundleDeployment {name} gone"), || async {
        api.get_opt(name)
            .await
            .expect("get")
            .is_none()
            .then_some(())
    })
    .await;
}

/// A workload cluster with what Fleet's releases created there, and the Cluster's kubeconfig
/// Secret (as Cluster API writes it) pointing at it.
async fn workload_cluster(h: &Harness) -> Sandbox {
    let workload = Sandbox::start_with(SandboxOptions {
        crds: Vec::new(),
        ..SandboxOptions::default()
    })
    .await
    .expect("workload sandbox");
    let client = workload.client();
    for ns in ["ingress-nginx", "db", "fleet-addon-agent"] {
        let namespace: Namespace =
            serde_json::from_value(json!({"metadata": {"name": ns}})).expect("namespace");
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .expect("namespace");
    }
    let objects = fixture("workload-objects.yaml");
    for service in objects["services"].as_array().expect("services") {
        let service: Service = serde_json::from_value(creatable(service.clone())).expect("svc");
        let ns = service.metadata.namespace.clone().unwrap_or_default();
        match Api::<Service>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &service)
            .await
        {
            // default/kubernetes exists from the start, as in a cluster.
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(err) => panic!("service: {err}"),
        }
    }
    for claim in objects["claims"].as_array().expect("claims") {
        let claim: PersistentVolumeClaim =
            serde_json::from_value(creatable(claim.clone())).expect("pvc");
        let ns = claim.metadata.namespace.clone().unwrap_or_default();
        Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &claim)
            .await
            .expect("pvc");
    }
    for volume in objects["volumes"].as_array().expect("volumes") {
        let volume: PersistentVolume =
            serde_json::from_value(creatable(volume.clone())).expect("pv");
        let api = Api::<PersistentVolume>::all(client.clone());
        api.create(&PostParams::default(), &volume)
            .await
            .expect("pv");
        // The volume controller's phase.
        let status = json!({"status": volume.status});
        api.patch_status(
            volume.metadata.name.as_deref().unwrap_or_default(),
            &PatchParams::default(),
            &Patch::Merge(status),
        )
        .await
        .expect("pv status");
    }
    for attachment in objects["attachments"].as_array().expect("attachments") {
        let attachment: VolumeAttachment =
            serde_json::from_value(creatable(attachment.clone())).expect("va");
        Api::<VolumeAttachment>::all(client.clone())
            .create(&PostParams::default(), &attachment)
            .await
            .expect("va");
    }
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "c1-kubeconfig", "namespace": NS,
                     "labels": {"cluster.x-k8s.io/cluster-name": "c1"}},
        "type": "cluster.x-k8s.io/secret",
        "stringData": {"value": kube_sandbox::kubeconfig_yaml(&workload.url())},
    }))
    .expect("secret");
    Api::<Secret>::namespaced(h.client.clone(), NS)
        .create(&PostParams::default(), &secret)
        .await
        .expect("kubeconfig Secret");
    workload
}

/// Plays the agent's uninstall and the cloud controller: the LoadBalancer Service deleted (its
/// cloud finalizer holds it), then released; the StatefulSet's claim deleted by the operator.
async fn release_downstream(workload: &Sandbox) {
    let client = workload.client();
    let services: Api<Service> = Api::namespaced(client.clone(), "ingress-nginx");
    services
        .delete("ingress-nginx-controller", &DeleteParams::default())
        .await
        .expect("uninstall");
    services
        .patch(
            "ingress-nginx-controller",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("load balancer released");
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client, "db");
    claims
        .delete("data-postgres-0", &DeleteParams::default())
        .await
        .expect("claim");
    claims
        .patch(
            "data-postgres-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("claim released");
}

/// Plays the CSI attacher and provisioner: the volume detached, then the cloud disk deleted
/// and the PersistentVolume with it (its finalizers removed).
async fn release_volume(workload: &Sandbox) {
    let client = workload.client();
    let attachments: Api<VolumeAttachment> = Api::all(client.clone());
    attachments
        .delete("csi-3f1e0c5b7a9d", &DeleteParams::default())
        .await
        .expect("detach");
    attachments
        .patch(
            "csi-3f1e0c5b7a9d",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("detached");
    let volumes: Api<PersistentVolume> = Api::all(client);
    volumes
        .delete("pvc-0b7f", &DeleteParams::default())
        .await
        .expect("volume");
    volumes
        .patch(
            "pvc-0b7f",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("cloud disk deleted");
}

/// Plays Cluster API: `kubectl delete cluster c1` (Cluster API's finalizer holds it).
async fn delete(h: &Harness) -> Timestamp {
    h.delete_cluster(NS, "c1").await;
    let cluster: CapiCluster = h.get(NS, "c1").await.expect("still there");
    cluster
        .metadata
        .deletion_timestamp
        .map(|t| t.0)
        .expect("deleting")
}

/// The BeforeClusterDeleteRequest Cluster API sends for the live Cluster `c1`, in the shape of
/// `before-cluster-delete-<shape>.json`; `deleted_at` overrides its deletionTimestamp.
async fn request(h: &Harness, shape: &str, deleted_at: Option<Timestamp>) -> Value {
    let mut body = fixture(&format!("before-cluster-delete-{shape}.json"))["request"].clone();
    let live: CapiCluster = h.get(NS, "c1").await.expect("cluster");
    let meta = &mut body["cluster"]["metadata"];
    meta["uid"] = json!(live.metadata.uid);
    meta["resourceVersion"] = json!(live.metadata.resource_version);
    meta["generation"] = json!(live.metadata.generation);
    meta["finalizers"] = json!(live.metadata.finalizers);
    meta["labels"] = json!(live.metadata.labels);
    meta["annotations"] = json!(live.metadata.annotations.clone().unwrap_or_default());
    let deleted = deleted_at.or(live.metadata.deletion_timestamp.map(|t| t.0));
    meta["deletionTimestamp"] = deleted.map_or(Value::Null, |t| json!(rfc3339(t)));
    body
}

async fn call(h: &Harness, body: &Value) -> Response {
    let manager = h.manager.as_ref().expect("manager");
    let bytes = serde_json::to_vec(body).expect("json");
    handlers::handle(&manager.hooks, Hook::BeforeClusterDelete, &bytes).await
}

fn retry_after(response: &Response) -> i32 {
    match response.body {
        ResponseBody::Retry {
            retry_after_seconds,
        } => retry_after_seconds,
        _ => 0,
    }
}

#[track_caller]
fn assert_hold(response: &Response, message: &str) {
    assert_eq!(response.status, ResponseStatus::Success, "{response:?}");
    assert!(retry_after(response) >= 10, "no hot loop: {response:?}");
    assert!(
        response.message.contains(message),
        "{:?}\ndoes not say {message:?}",
        response.message
    );
}

#[track_caller]
fn assert_proceed(response: &Response, message: &str) {
    assert_eq!(response.status, ResponseStatus::Success, "{response:?}");
    assert_eq!(retry_after(response), 0, "{response:?}");
    assert!(
        response.message.contains(message),
        "{:?}\ndoes not say {message:?}",
        response.message
    );
}

async fn condition(h: &Harness) -> Option<Value> {
    let cluster: CapiCluster = h.get(NS, "c1").await?;
    cluster
        .body
        .get("status")?
        .get("conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == names::WORKLOADS_REMOVED_CONDITION)
        .cloned()
}

async fn events(h: &Harness, reason: &str) -> Vec<Event> {
    Api::<Event>::namespaced(h.client.clone(), NS)
        .list(&Default::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect()
}

async fn fleet_labels(h: &Harness) -> std::collections::BTreeMap<String, String> {
    h.fleet_cluster(NS, "c1")
        .await
        .and_then(|f| f.metadata.labels)
        .unwrap_or_default()
}

async fn wait_drained(h: &Harness) {
    eventually("the import controller drains the Fleet Cluster", || async {
        let labels = fleet_labels(h).await;
        (labels.get(names::TEARDOWN_LABEL).map(String::as_str) == Some("true")
            && !labels.contains_key("ingress")
            && !labels.contains_key("env")
            && !labels.contains_key("clusterclass-name.fleet.addons.cluster.x-k8s.io"))
        .then_some(labels)
    })
    .await;
}

/// The whole removal with Cluster API v1.13's requests: the hold while BundleDeployments and
/// then load balancers and volumes exist (messages checked at each step), the provider
/// restarted in the middle, the release, and the cleanup that follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workloads_are_removed_before_the_infrastructure_and_the_deletion_waits_for_them() {
    let mut h = imported(
        "cluster: {setOwnerReferences: true}\nruntimeExtension: {beforeClusterDelete: {removeWorkloads: true}}",
        json!({}),
    )
    .await;
    register(&h).await;
    deploy(&h, &["fleet-agent-c1", "apps-ingress", "ccm", "backup"]).await;
    let workload = workload_cluster(&h).await;
    delete(&h).await;

    // First call: the removal starts; the Fleet Cluster is marked, nothing is removed by the
    // hook itself.
    let body = request(&h, "v1beta2", None).await;
    let first = call(&h, &body).await;
    assert_hold(
        &first,
        "waiting for the labels bundles select Fleet Cluster clusters/c1 by to be removed (the import controller does it); 2 of 2 BundleDeployments left: clusters/apps-ingress, clusters/backup",
    );
    assert_hold(
        &first,
        "kept until the cluster is deleted (fleet.addons.cluster.x-k8s.io/keep-during-teardown): clusters/ccm",
    );
    let removing = condition(&h).await.expect("FleetWorkloadsRemoved");
    assert_eq!(removing["status"], "False");
    assert_eq!(removing["reason"], "Removing");
    assert_eq!(events(&h, "FleetWorkloadsRemoving").await.len(), 1);

    // The import controller keeps the Fleet Cluster and our finalizer, and drains: the labels
    // bundles select the cluster by go, Fleet's and hand-made ones stay, the agent's bundle
    // keeps matching (no fleet.cattle.io/non-managed-agent).
    wait_drained(&h).await;
    let labels = fleet_labels(&h).await;
    assert_eq!(labels.get("owner").map(String::as_str), Some("team-a"));
    assert!(!labels.contains_key("fleet.cattle.io/non-managed-agent"));
    let cluster: CapiCluster = h.get(NS, "c1").await.expect("cluster");
    assert!(has_finalizer(&cluster), "deletion is held by our finalizer");

    // Fleet has not removed anything yet: the bundle targeting the cluster by name is named.
    let drained = call(&h, &request(&h, "v1beta2", None).await).await;
    assert_hold(
        &drained,
        "removing Fleet workloads: 2 of 2 BundleDeployments left: clusters/apps-ingress, clusters/backup; bundle clusters/backup targets this cluster by name (clusterName) and cannot be drained",
    );

    // Fleet removes the un-targeted BundleDeployment (the agent's and the kept one stay).
    fleet_removes(&h, "apps-ingress").await;
    assert_hold(
        &call(&h, &request(&h, "v1beta2", None).await).await,
        "1 of 2 BundleDeployments left: clusters/backup",
    );
    // The bundle's author adds the teardown customization: Fleet removes it too.
    fleet_removes(&h, "backup").await;

    // No BundleDeployment left but the agent's and the kept one: the workload cluster is asked.
    let downstream = call(&h, &request(&h, "v1beta2", None).await).await;
    assert_hold(
        &downstream,
        "Fleet removed 2 BundleDeployments; waiting for the workload cluster to delete PersistentVolume pvc-0b7f (claim db/data-postgres-0, Released), PersistentVolumeClaim db/data-postgres-0, Service ingress-nginx/ingress-nginx-controller (LoadBalancer), VolumeAttachment csi-3f1e0c5b7a9d (PersistentVolume pvc-0b7f on node prod-eu-1-md-0-x7k2p)",
    );
    let fleet = h.fleet_cluster(NS, "c1").await.expect("Fleet Cluster kept");
    assert!(
        fleet
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key(names::TEARDOWN_BUNDLES_GONE_ANNOTATION)
    );

    // The provider restarts in the middle: the same answer, and nothing written again.
    h.stop().await;
    h.start().await;
    let cluster: CapiCluster = h.get(NS, "c1").await.expect("cluster");
    assert!(has_finalizer(&cluster), "still held after the restart");
    // Right after a restart the hooks answer "waiting for the FleetAddonConfig to be read" until
    // the manager has read it; the requests counted are those of the call that answered.
    let again = eventually("the answer after the restart", || async {
        h.sandbox.requests().reset();
        let answer = call(&h, &request(&h, "v1beta2", None).await).await;
        (!answer.message.contains("FleetAddonConfig to be read")).then_some(answer)
    })
    .await;
    assert_eq!(again.message, downstream.message);
    let hook_writes: Vec<String> = h
        .sandbox
        .requests()
        .all()
        .into_iter()
        .filter(|r| r.verb.is_write() && (r.resource == "clusters" || r.resource == "events"))
        .map(|r| format!("{:?} {}/{} {}", r.verb, r.resource, r.subresource, r.name))
        .collect();
    assert!(
        hook_writes.is_empty(),
        "nothing changed, nothing written: {hook_writes:?}"
    );

    // The agent uninstalls the release; the cloud releases the load balancer; the claim goes
    // but its volume is still being detached and deleted: the deletion still waits.
    release_downstream(&workload).await;
    assert_hold(
        &call(&h, &request(&h, "v1beta2", None).await).await,
        "waiting for the workload cluster to delete PersistentVolume pvc-0b7f (claim db/data-postgres-0, Released), VolumeAttachment csi-3f1e0c5b7a9d",
    );
    release_volume(&workload).await;
    let done = call(&h, &request(&h, "v1beta2", None).await).await;
    assert_proceed(
        &done,
        "Fleet removed 2 BundleDeployments of Fleet Cluster clusters/c1, and the workload cluster has no LoadBalancer Service, PersistentVolumeClaim or PersistentVolume left",
    );
    let removed = condition(&h).await.expect("condition");
    assert_eq!(removed["status"], "True");
    assert_eq!(removed["reason"], "Removed");
    assert_eq!(events(&h, "FleetWorkloadsRemoved").await.len(), 1);
    assert!(
        h.fleet_cluster(NS, "c1").await.is_some(),
        "the Fleet Cluster the Cluster owns goes with the Cluster (garbage collection)"
    );

    // Cluster API marks the Cluster and deletes it: our finalizer goes, then Cluster API's,
    // and the Fleet Cluster with the Cluster.
    h.merge_cluster(
        NS,
        "c1",
        json!({"metadata": {"annotations": {names::CAPI_OK_TO_DELETE_ANNOTATION: ""}}}),
    )
    .await;
    eventually("our finalizer is removed", || async {
        let cluster: CapiCluster = h.get(NS, "c1").await?;
        (!has_finalizer(&cluster)).then_some(())
    })
    .await;
    // A removal that ended with Removed was not interrupted.
    assert_eq!(condition(&h).await.expect("condition")["reason"], "Removed");
    assert!(
        events(&h, "FleetWorkloadsRemovalInterrupted")
            .await
            .is_empty()
    );
    h.merge_cluster(NS, "c1", json!({"metadata": {"finalizers": null}}))
        .await;
    eventually("the Fleet Cluster is garbage-collected", || async {
        h.fleet_cluster(NS, "c1").await.is_none().then_some(())
    })
    .await;
    h.stop().await;
    workload.shutdown().await;
}

/// Cluster API v1.11/v1.12's requests, a workload cluster that cannot be reached (no kubeconfig
/// Secret, as behind NAT): the settle period runs from when the hook first saw no
/// BundleDeployment left, recorded on the Fleet Cluster. The Cluster opts in by annotation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_workload_cluster_gets_a_settle_period_after_the_last_bundle() {
    let mut h = imported(
        "cluster: {}",
        json!({(names::REMOVE_WORKLOADS_ANNOTATION): "true"}),
    )
    .await;
    register(&h).await;
    deploy(&h, &["fleet-agent-c1", "apps-ingress"]).await;
    delete(&h).await;
    assert_hold(
        &call(&h, &request(&h, "v1beta1", None).await).await,
        "1 of 1 BundleDeployments left: clusters/apps-ingress",
    );
    wait_drained(&h).await;
    fleet_removes(&h, "apps-ingress").await;
    let settling = call(&h, &request(&h, "v1beta1", None).await).await;
    assert_hold(
        &settling,
        "Fleet removed 1 BundleDeployment; the workload cluster cannot be checked (no kubeconfig Secret clusters/c1-kubeconfig): giving its agent until",
    );
    // Calls meanwhile change nothing.
    h.sandbox.requests().reset();
    let same = call(&h, &request(&h, "v1beta1", None).await).await;
    assert_eq!(same.message, settling.message);
    assert_eq!(
        h.sandbox
            .requests()
            .count(|r| r.verb.is_write() && r.resource != "leases" && r.name == "c1"),
        0
    );
    // The provider restarts; time passes (the recorded moment moved 3 minutes back).
    h.stop().await;
    let three_minutes_ago = Timestamp::now() - SignedDuration::from_secs(180);
    fleet_clusters(&h)
        .patch(
            "c1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                (names::TEARDOWN_BUNDLES_GONE_ANNOTATION): rfc3339(three_minutes_ago)}}})),
        )
        .await
        .expect("time passes");
    h.start().await;
    let done = call(&h, &request(&h, "v1beta1", None).await).await;
    assert_proceed(
        &done,
        "the workload cluster could not be checked (no kubeconfig Secret clusters/c1-kubeconfig), so its agent was given 2m after the last BundleDeployment went",
    );
    assert_eq!(condition(&h).await.expect("condition")["status"], "True");
    h.stop().await;
}

/// A reachable workload cluster whose API server answers each list in 1.5 s (a large or distant
/// cluster) is still checked: the four lists of the check run side by side within its 5 s, so
/// the deletion waits for its load balancer and volumes instead of taking the cluster for
/// unreachable (whose settle period lets the deletion go while they exist).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_workload_cluster_is_still_checked() {
    let mut h = imported(
        "cluster: {setOwnerReferences: true}\nruntimeExtension: {beforeClusterDelete: {removeWorkloads: true}}",
        json!({}),
    )
    .await;
    register(&h).await;
    deploy(&h, &["fleet-agent-c1", "apps-ingress"]).await;
    let workload = workload_cluster(&h).await;
    delete(&h).await;
    call(&h, &request(&h, "v1beta2", None).await).await;
    wait_drained(&h).await;
    fleet_removes(&h, "apps-ingress").await;
    workload.set_faults(FaultConfig {
        rules: vec![FaultRule {
            target: FaultTarget::Reads,
            verbs: Some(vec!["LIST".into()]),
            latency_ms: Some(1500),
            ..Default::default()
        }],
        ..Default::default()
    });
    assert_hold(
        &call(&h, &request(&h, "v1beta2", None).await).await,
        "waiting for the workload cluster to delete PersistentVolume pvc-0b7f",
    );
    h.stop().await;
}

/// The operator's skip annotation and the deadline let the deletion proceed with a Warning
/// Event; the import controller then cleans up as for any deleted Cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_skip_annotation_and_the_deadline_let_the_deletion_proceed() {
    let mut h = imported(
        "cluster: {}\nruntimeExtension: {beforeClusterDelete: {removeWorkloads: true}}",
        json!({}),
    )
    .await;
    register(&h).await;
    deploy(&h, &["fleet-agent-c1", "apps-ingress", "backup"]).await;
    delete(&h).await;
    assert_hold(
        &call(&h, &request(&h, "v1beta2", None).await).await,
        "2 of 2",
    );
    wait_drained(&h).await;

    // Cluster API v1.13 called with a deletionTimestamp 31 minutes ago: past the 30m timeout.
    let long_ago = Timestamp::now() - SignedDuration::from_secs(31 * 60);
    let late = call(&h, &request(&h, "v1beta2", Some(long_ago)).await).await;
    assert_proceed(&late, "workload removal timed out at");
    assert_eq!(
        condition(&h).await.expect("condition")["reason"],
        "TimedOut"
    );
    let warnings = events(&h, "FleetWorkloadsRemovalTimedOut").await;
    assert_eq!(warnings.len(), 1);
    // kube-runtime's Recorder folds repeats into one Event with a series: none here.
    assert!(warnings[0].series.is_none(), "{warnings:?}");
    assert_eq!(warnings[0].type_.as_deref(), Some("Warning"));

    // The operator skips instead: at the next call, the deletion proceeds.
    h.merge_cluster(
        NS,
        "c1",
        json!({"metadata": {"annotations": {(names::SKIP_WORKLOAD_REMOVAL_ANNOTATION): "true"}}}),
    )
    .await;
    let skipped = call(&h, &request(&h, "v1beta2", None).await).await;
    assert_proceed(
        &skipped,
        "workload removal skipped (Cluster annotation fleet.addons.cluster.x-k8s.io/skip-workload-removal: \"true\")",
    );
    assert_eq!(condition(&h).await.expect("condition")["reason"], "Skipped");
    assert_eq!(events(&h, "FleetWorkloadsRemovalSkipped").await.len(), 1);
    // The import controller lets go at once: the Fleet Cluster it does not own is deleted and
    // our finalizer removed, without waiting for Cluster API's ok-to-delete.
    eventually("cleaned up after the skip", || async {
        let cluster: CapiCluster = h.get(NS, "c1").await?;
        (!has_finalizer(&cluster) && h.fleet_cluster(NS, "c1").await.is_none()).then_some(())
    })
    .await;
    h.stop().await;
}

/// The import controller's own deadline: with a short timeout it lets go on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_import_controller_lets_go_at_the_deadline() {
    let mut h = imported(
        "cluster: {}\nruntimeExtension: {beforeClusterDelete: {removeWorkloads: true, timeout: 3s}}",
        json!({}),
    )
    .await;
    register(&h).await;
    deploy(&h, &["fleet-agent-c1", "apps-ingress"]).await;
    delete(&h).await;
    eventually("cleaned up at the deadline", || async {
        let cluster: CapiCluster = h.get(NS, "c1").await?;
        (!has_finalizer(&cluster)).then_some(())
    })
    .await;
    let late = call(&h, &request(&h, "v1beta2", None).await).await;
    assert_proceed(&late, "timed out at");
    h.stop().await;
}

/// Clusters with nothing to remove are never held: an agent that never registered, or a Fleet
/// Cluster with no BundleDeployment but the agent's (no mark, no condition).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusters_with_nothing_to_remove_are_never_held() {
    let mut h = imported(
        "cluster: {}\nruntimeExtension: {beforeClusterDelete: {removeWorkloads: true}}",
        json!({}),
    )
    .await;
    // Only the agent's BundleDeployment.
    register(&h).await;
    deploy(&h, &["fleet-agent-c1"]).await;
    delete(&h).await;
    let answer = call(&h, &request(&h, "v1beta2", None).await).await;
    assert_proceed(
        &answer,
        "not held: nothing to remove, Fleet Cluster clusters/c1 has no BundleDeployment but the agent's",
    );
    assert!(!fleet_labels(&h).await.contains_key(names::TEARDOWN_LABEL));
    assert!(condition(&h).await.is_none());
    h.stop().await;

    // Never registered: the import controller does not even hold its finalizer.
    let mut h = imported(
        "cluster: {}\nruntimeExtension: {beforeClusterDelete: {removeWorkloads: true}}",
        json!({}),
    )
    .await;
    delete(&h).await;
    eventually("cleaned up at once", || async {
        let cluster: CapiCluster = h.get(NS, "c1").await?;
        (!has_finalizer(&cluster)).then_some(())
    })
    .await;
    // Two reads, nothing written: the hooks prepared nothing for this
    // Cluster (its class does not use the bootstrap). The hook is called with the test's own
    // client, so its requests are told from the running manager's (which may still write the
    // deleted Cluster's status in the same window).
    let body = request(&h, "v1beta1", None).await;
    let spec: caapf::api::FleetAddonConfigSpec = serde_yaml::from_str(
        "cluster: {}\nruntimeExtension: {beforeClusterDelete: {removeWorkloads: true}}",
    )
    .expect("spec");
    let (hooks, _config) = common::hook_context(
        h.client.clone(),
        caapf::model::config::EffectiveConfig::from_spec(&spec),
    );
    h.sandbox.requests().reset();
    let answer = handlers::handle(
        &hooks,
        Hook::BeforeClusterDelete,
        &serde_json::to_vec(&body).expect("json"),
    )
    .await;
    assert_proceed(&answer, "not held: there is no Fleet Cluster clusters/c1");
    let requests: Vec<String> = h
        .sandbox
        .requests()
        .all()
        .into_iter()
        .filter(|r| {
            !matches!(r.verb, kube_sandbox::Verb::Watch)
                && r.resource != "leases"
                && !common::from_manager(r)
        })
        .map(|r| format!("{:?} {} {}/{}", r.verb, r.resource, r.namespace, r.name))
        .collect();
    // The Fleet Cluster, then the Cluster (a removal that was under way would end as Skipped).
    assert_eq!(
        requests,
        ["Get clusters clusters/c1", "Get clusters clusters/c1"],
        "{requests:?}"
    );
    assert!(condition(&h).await.is_none());
    h.stop().await;
}

/// Cluster API marks the Cluster `ok-to-delete` while the removal is under way (a call that
/// failed under `failurePolicy: Ignore`, cluster-api v1.11.11 `internal/runtime/client/
/// client.go` `CallExtension`): the import controller lets go, and says so once, with the
/// condition's reason and a Warning Event that more reconciles do not repeat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ok_to_delete_during_the_removal_is_reported_once() {
    let mut h = imported(
        "cluster: {}\nruntimeExtension: {beforeClusterDelete: {removeWorkloads: true}}",
        json!({}),
    )
    .await;
    register(&h).await;
    deploy(&h, &["fleet-agent-c1", "apps-ingress"]).await;
    delete(&h).await;
    assert_hold(
        &call(&h, &request(&h, "v1beta2", None).await).await,
        "1 of 1 BundleDeployments left: clusters/apps-ingress",
    );
    wait_drained(&h).await;
    // The next call fails on the way (the provider restarting): Cluster API counts it as success.
    h.merge_cluster(
        NS,
        "c1",
        json!({"metadata": {"annotations": {names::CAPI_OK_TO_DELETE_ANNOTATION: ""}}}),
    )
    .await;
    let interrupted = eventually("the interruption is reported", || async {
        let condition = condition(&h).await?;
        (condition["reason"] == "FleetWorkloadsRemovalInterrupted").then_some(condition)
    })
    .await;
    assert_eq!(interrupted["status"], "False");
    let message = interrupted["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("last progress: removing Fleet workloads"),
        "{message}"
    );
    eventually("our finalizer is removed", || async {
        let cluster: CapiCluster = h.get(NS, "c1").await?;
        (!has_finalizer(&cluster)).then_some(())
    })
    .await;
    // More changes of the Cluster (each one a reconcile): no second Event.
    for n in 0..3 {
        let before = h.reconciles("cluster");
        h.merge_cluster(
            NS,
            "c1",
            json!({"metadata": {"labels": {"touched": n.to_string()}}}),
        )
        .await;
        h.wait_reconciled_since("the change is seen", "cluster", before)
            .await;
    }
    h.stop().await;
    let warnings = events(&h, "FleetWorkloadsRemovalInterrupted").await;
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    // kube-runtime's Recorder folds repeats into one Event with a series: said once, not folded.
    assert!(warnings[0].series.is_none(), "{warnings:?}");
    assert_eq!(warnings[0].type_.as_deref(), Some("Warning"));
    assert_eq!(events(&h, "FleetWorkloadsRemoved").await.len(), 0);
}

/// The Fleet Cluster deleted during the removal (`kubectl delete namespace` takes it with the
/// Cluster): the hook lets the deletion go on and says why in the condition first, so Cluster
/// API's `ok-to-delete` that follows is not taken for an interruption.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_cluster_deleted_during_the_removal_is_no_interruption() {
    let mut h = imported(
        "cluster: {}\nruntimeExtension: {beforeClusterDelete: {removeWorkloads: true}}",
        json!({}),
    )
    .await;
    register(&h).await;
    deploy(&h, &["fleet-agent-c1", "apps-ingress"]).await;
    delete(&h).await;
    assert_hold(
        &call(&h, &request(&h, "v1beta1", None).await).await,
        "1 of 1 BundleDeployments left",
    );
    wait_drained(&h).await;
    // Fleet's own cleanup holds the Fleet Cluster while it is deleted.
    fleet_clusters(&h)
        .patch(
            "c1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/fleet-cleanup"]}})),
        )
        .await
        .expect("finalizer");
    fleet_clusters(&h)
        .delete("c1", &DeleteParams::default())
        .await
        .expect("delete the Fleet Cluster");
    let answer = call(&h, &request(&h, "v1beta1", None).await).await;
    assert_proceed(
        &answer,
        "Fleet Cluster clusters/c1 is being deleted already",
    );
    let ended = condition(&h).await.expect("condition");
    assert_eq!(ended["reason"], "Skipped", "{ended}");
    assert_eq!(events(&h, "FleetWorkloadsRemovalSkipped").await.len(), 1);

    // Cluster API marks the Cluster; the import controller sees it (and a later change).
    h.merge_cluster(
        NS,
        "c1",
        json!({"metadata": {"annotations": {names::CAPI_OK_TO_DELETE_ANNOTATION: ""}}}),
    )
    .await;
    for n in 0..2 {
        let before = h.reconciles("cluster");
        h.merge_cluster(
            NS,
            "c1",
            json!({"metadata": {"labels": {"touched": n.to_string()}}}),
        )
        .await;
        h.wait_reconciled_since("the change is seen", "cluster", before)
            .await;
    }
    h.stop().await;
    assert_eq!(condition(&h).await.expect("condition")["reason"], "Skipped");
    assert!(
        events(&h, "FleetWorkloadsRemovalInterrupted")
            .await
            .is_empty()
    );
}

/// `removeWorkloads` turned off during the removal (BeforeClusterDelete then answers without a
/// read): when Cluster API goes on, the import controller says the removal was skipped, not
/// interrupted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removal_turned_off_midway_is_skipped_not_interrupted() {
    let mut h = imported(
        "cluster: {}\nruntimeExtension: {beforeClusterDelete: {removeWorkloads: true}}",
        json!({}),
    )
    .await;
    register(&h).await;
    deploy(&h, &["fleet-agent-c1", "apps-ingress"]).await;
    delete(&h).await;
    call(&h, &request(&h, "v1beta2", None).await).await;
    h.merge_cluster(
        NS,
        "c1",
        json!({"metadata": {"annotations": {(names::REMOVE_WORKLOADS_ANNOTATION): "false"}}}),
    )
    .await;
    assert_proceed(
        &call(&h, &request(&h, "v1beta2", None).await).await,
        "nothing to clean up",
    );
    h.merge_cluster(
        NS,
        "c1",
        json!({"metadata": {"annotations": {names::CAPI_OK_TO_DELETE_ANNOTATION: ""}}}),
    )
    .await;
    let skipped = eventually("the end is reported", || async {
        let condition = condition(&h).await?;
        (condition["reason"] != "Removing").then_some(condition)
    })
    .await;
    assert_eq!(skipped["reason"], "Skipped", "{skipped}");
    assert!(
        skipped["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("workload removal turned off")),
        "{skipped}"
    );
    h.stop().await;
    assert!(
        events(&h, "FleetWorkloadsRemovalInterrupted")
            .await
            .is_empty()
    );
    assert_eq!(events(&h, "FleetWorkloadsRemovalSkipped").await.len(), 1);
}
