//! How many heap bytes one cached Cluster, its Fleet Cluster and its two referenced objects
//! hold: the caches hold one of each per workload cluster, so at 10,000 clusters every KiB here is 10 MiB of the
//! manager's memory (docs/performance.md).
//!
//! The objects are real-shaped and served by the sandbox after a real import: a provisioned
//! topology Cluster (`tests/fixtures/capi/`, Cluster API v1beta2 field names) with Cluster API's
//! status, our finalizer and `FleetReady` condition; its Fleet Cluster with `templateValues` and
//! Fleet's status (`tests/fixtures/fleet/`). Each is decoded from its JSON text, as a watch event
//! is, and prepared the way the caches prepare it. The bytes are counted by an allocator that
//! counts per thread, so the other threads of the test (the manager, the sandbox) do not count.

use crate::common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;

use caapf::api::CapiCluster;
use caapf::controllers::import::references::cached_reference;
use caapf::controllers::import::stores::{
    TEMPLATE_VALUES, cached_fleet_cluster, prepare_cached_cluster,
};
use caapf::model::diff::{apply_would_change, digest_subtree, owned_fields};
use common::{Harness, eventually};
use fleet_api_rs::fleet_cluster::Cluster as FleetCluster;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

struct Counting;

thread_local! {
    /// Bytes this thread allocated and has not freed (a `const` thread-local: no lazy
    /// initialisation, so it is safe to touch from the allocator).
    static LIVE: Cell<isize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.with(|live| live.set(live.get() + layout.size() as isize));
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.with(|live| live.set(live.get() - layout.size() as isize));
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.with(|live| live.set(live.get() + new_size as isize - layout.size() as isize));
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live_bytes() -> isize {
    LIVE.with(Cell::get)
}

/// Heap bytes the value `make` returns still holds once everything else it allocated is freed.
fn held<T>(make: impl FnOnce() -> T) -> (T, usize) {
    let before = live_bytes();
    let value = make();
    let after = live_bytes();
    (
        value,
        usize::try_from(after - before).expect("a value holds memory"),
    )
}

const NS: &str = "team-a";

fn fixture(path: &str) -> Value {
    let path = format!("{}/tests/fixtures/{path}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).expect("fixture");
    serde_yaml::from_str(&text).expect("fixture")
}

/// The object as the API server serves it, as JSON text.
async fn served(h: &Harness, gvk: GroupVersionKind, plural: &str, name: &str) -> String {
    let api: Api<DynamicObject> = Api::namespaced_with(
        h.client.clone(),
        NS,
        &ApiResource::from_gvk_with_plural(&gvk, plural),
    );
    serde_json::to_string(&api.get(name).await.expect("served object")).expect("JSON")
}

/// The objects of one workload cluster as served, JSON text.
struct Served {
    cluster: String,
    fleet_cluster: String,
    control_plane: String,
    infrastructure: String,
}

/// Creates a referenced object owned by the Cluster `owner_uid`; returns its name.
async fn create_referenced(h: &Harness, path: &str, plural: &str, owner_uid: &str) -> String {
    let mut object = fixture(path);
    object["metadata"]["ownerReferences"][0]["uid"] = json!(owner_uid);
    let (group, version) = object["apiVersion"]
        .as_str()
        .and_then(|v| v.split_once('/'))
        .expect("apiVersion");
    let gvk = GroupVersionKind::gvk(group, version, object["kind"].as_str().expect("kind"));
    let api: Api<DynamicObject> = Api::namespaced_with(
        h.client.clone(),
        NS,
        &ApiResource::from_gvk_with_plural(&gvk, plural),
    );
    let object: DynamicObject = serde_json::from_value(object).expect("object");
    api.create(&Default::default(), &object)
        .await
        .expect("create referenced object")
        .metadata
        .name
        .expect("name")
}

/// Imports the fixture Cluster with its referenced objects and plays Cluster API's and Fleet's
/// status writes; returns the objects as served.
async fn imported_objects() -> Served {
    let mut h = Harness::new().await;
    h.namespace(NS, json!({})).await;
    h.namespace("classes", json!({})).await;
    h.class("classes", "quick-start", json!({})).await;
    // Applied, as without a FleetAddonConfig (and in the benchmark): the Fleet Cluster then
    // carries our managedFields entry, which lists every field of templateValues.
    h.config("cluster: {patchResource: true}").await;
    let cluster = fixture("capi/cluster-provisioned-v1beta2.json");
    let name = cluster["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_string();
    let status = cluster["status"].clone();
    let created = h.cluster(NS, cluster).await;
    let uid = created.metadata.uid.expect("uid");
    let control_plane = create_referenced(
        &h,
        "capi/kubeadmcontrolplane-provisioned-v1beta2.json",
        "kubeadmcontrolplanes",
        &uid,
    )
    .await;
    let infrastructure = create_referenced(
        &h,
        "capi/dockercluster-provisioned-v1beta2.json",
        "dockerclusters",
        &uid,
    )
    .await;
    let clusters: Api<CapiCluster> = Api::namespaced(h.client.clone(), NS);
    clusters
        .patch_status(
            &name,
            &PatchParams::apply("manager").force(),
            &Patch::Apply(json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                "status": status,
            })),
        )
        .await
        .expect("Cluster API's status");
    h.start().await;
    let fleet_name = eventually("the Fleet Cluster", || async {
        h.list::<FleetCluster>(NS)
            .await
            .into_iter()
            .next()
            .map(|f| f.metadata.name.expect("name"))
    })
    .await;
    let mut fleet_status = fixture("fleet/status-bundles-not-ready.yaml");
    fleet_status["agent"]["lastSeen"] = json!(
        k8s_openapi::jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string()
    );
    let fleet_api: Api<FleetCluster> = Api::namespaced(h.client.clone(), NS);
    fleet_api
        .patch_status(
            &fleet_name,
            &PatchParams::apply("fleetcontroller").force(),
            &Patch::Apply(json!({
                "apiVersion": "fleet.cattle.io/v1alpha1", "kind": "Cluster",
                "status": fleet_status,
            })),
        )
        .await
        .expect("Fleet's status");
    eventually("the FleetReady condition naming the bundles", || async {
        let cluster: CapiCluster = h.get(NS, &name).await?;
        let text = serde_json::to_string(&cluster).ok()?;
        text.contains("calico-cni").then_some(())
    })
    .await;
    eventually("templateValues with the control plane", || async {
        let fleet = h.fleet_cluster(NS, &fleet_name).await?;
        let values = fleet.spec.template_values?;
        values.contains_key("ControlPlane").then_some(())
    })
    .await;
    let cluster = served(
        &h,
        GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Cluster"),
        "clusters",
        &name,
    )
    .await;
    let fleet = served(
        &h,
        GroupVersionKind::gvk("fleet.cattle.io", "v1alpha1", "Cluster"),
        "clusters",
        &fleet_name,
    )
    .await;
    let control_plane = served(
        &h,
        GroupVersionKind::gvk(
            "controlplane.cluster.x-k8s.io",
            "v1beta2",
            "KubeadmControlPlane",
        ),
        "kubeadmcontrolplanes",
        &control_plane,
    )
    .await;
    let infrastructure = served(
        &h,
        GroupVersionKind::gvk(
            "infrastructure.cluster.x-k8s.io",
            "v1beta2",
            "DockerCluster",
        ),
        "dockerclusters",
        &infrastructure,
    )
    .await;
    h.stop().await;
    Served {
        cluster,
        fleet_cluster: fleet,
        control_plane,
        infrastructure,
    }
}

#[tokio::test]
async fn the_cached_objects_of_one_workload_cluster_hold_a_few_kib() {
    let objects = imported_objects().await;
    let (cluster_text, fleet_text) = (&objects.cluster, &objects.fleet_cluster);

    let (_, decoded_cluster) =
        held(|| Arc::new(serde_json::from_str::<CapiCluster>(cluster_text).expect("Cluster")));
    let (cached, cached_cluster) = held(|| {
        let mut cluster: CapiCluster = serde_json::from_str(cluster_text).expect("Cluster");
        prepare_cached_cluster(&mut cluster);
        Arc::new(cluster)
    });
    let (_, decoded_fleet) =
        held(|| Arc::new(serde_json::from_str::<FleetCluster>(fleet_text).expect("Fleet")));
    let (cached_fleet_cluster, cached_fleet) = held(|| {
        let fleet: FleetCluster = serde_json::from_str(fleet_text).expect("Fleet Cluster");
        Arc::new(cached_fleet_cluster(fleet))
    });
    let mut cached_references = Vec::new();
    for text in [&objects.control_plane, &objects.infrastructure] {
        let (_, decoded) =
            held(|| Arc::new(serde_json::from_str::<DynamicObject>(text).expect("object")));
        let (_, as_tree) = held(|| {
            let mut object: DynamicObject = serde_json::from_str(text).expect("object");
            object.metadata.managed_fields = None;
            object
                .data
                .as_object_mut()
                .map(|data| data.remove("status"));
            Arc::new(object)
        });
        let (cached, bytes) = held(|| {
            let object: DynamicObject = serde_json::from_str(text).expect("object");
            Arc::new(cached_reference(object))
        });
        eprintln!(
            "referenced object: served {} B, decoded {decoded} B, \
             kept as a tree {as_tree} B, cached {bytes} B",
            text.len()
        );
        // templateValues read the spec from the cache.
        let served: Value = serde_json::from_str(text).expect("JSON");
        let kept = serde_json::to_value(&*cached).expect("JSON");
        assert_eq!(kept["spec"], served["spec"]);
        assert_eq!(kept["kind"], served["kind"]);
        assert!(kept.get("status").is_none());
        cached_references.push(bytes);
    }
    eprintln!(
        "served JSON: Cluster {} B, Fleet Cluster {} B\n\
         decoded: Cluster {decoded_cluster} B, Fleet Cluster {decoded_fleet} B\n\
         cached: Cluster {cached_cluster} B, Fleet Cluster {cached_fleet} B",
        cluster_text.len(),
        fleet_text.len(),
    );

    // What the cache keeps is still what the controllers read.
    let view = caapf::model::capi::ClusterView::of(&cached).expect("view");
    assert!(view.control_plane_initialized);
    assert_eq!(
        view.class.as_ref().map(|c| c.name.as_str()),
        Some("quick-start")
    );
    for bytes in cached_references {
        assert!(
            bytes <= 2 * 1024,
            "a cached referenced object holds {bytes} B"
        );
    }
    let fleet = cached_fleet_cluster.typed().expect("decodes");
    let served: FleetCluster = serde_json::from_str(fleet_text).expect("Fleet Cluster");
    assert_eq!(fleet.status, served.status);
    assert_eq!(fleet.spec.client_id, served.spec.client_id);
    assert_eq!(
        fleet.metadata.owner_references,
        served.metadata.owner_references
    );

    // The no-op check decides on the cached Fleet Cluster as on the one served (which lists
    // every field of templateValues in our managedFields entry; the cache keeps a digest).
    let served_json: Value = serde_json::from_str(fleet_text).expect("JSON");
    let cached_json = serde_json::to_value(&fleet).expect("JSON");
    let desired = |spec: Value| {
        json!({
            "apiVersion": "fleet.cattle.io/v1alpha1", "kind": "Cluster",
            "metadata": {
                "name": served_json["metadata"]["name"],
                "namespace": served_json["metadata"]["namespace"],
                "labels": served_json["metadata"]["labels"],
            },
            "spec": spec,
        })
    };
    let mut changed_values = served_json["spec"].clone();
    changed_values["templateValues"]["Cluster"]["spec"]["paused"] = json!(true);
    let mut without_values = served_json["spec"].clone();
    without_values
        .as_object_mut()
        .expect("spec")
        .remove("templateValues");
    for (desired, change) in [
        (desired(served_json["spec"].clone()), false),
        (desired(changed_values), true),
        (desired(without_values), true),
    ] {
        for live in [&served_json, &cached_json] {
            let (mut live, mut desired) = (live.clone(), desired.clone());
            digest_subtree(&mut live, TEMPLATE_VALUES);
            digest_subtree(&mut desired, TEMPLATE_VALUES);
            let owned = owned_fields(&live, caapf::names::FIELD_MANAGER).map(|f| f.into_owned());
            assert!(
                owned.is_some(),
                "our Apply entry is kept: {}",
                live["metadata"]["managedFields"]
            );
            assert_eq!(
                apply_would_change(&desired, &live, owned.as_ref()),
                change,
                "{desired}"
            );
        }
    }

    // About 3.6 KiB and 1.6 KiB today (the Cluster was 21.5 KiB as a tree of maps, 3.9 KiB
    // with our managedFields entries whole; the Fleet Cluster 6.8 KiB with every field of
    // templateValues listed in our managedFields entry, 3.3 KiB with its labels and that entry
    // typed).
    assert!(
        cached_cluster <= 4 * 1024,
        "a cached Cluster holds {cached_cluster} B"
    );
    assert!(
        cached_fleet <= 2 * 1024,
        "a cached Fleet Cluster holds {cached_fleet} B"
    );
}
