//! Kubernetes upgrades in the rollout waves (`spec.cluster.rollout.kubernetesUpgrades`), against
//! the manager and the sandbox: three Clusters of one ClusterClass, a canary and two of wave
//! `rest`. BeforeClusterUpgrade of a `rest` Cluster (its request as Cluster API v1.12 sends it: a
//! v1beta1 Cluster with its status blanked, `fromKubernetesVersion`/`toKubernetesVersion`:
//! cluster-api v1.11.11 `api/runtime/hooks/v1alpha1/lifecyclehooks_types.go`) is held while the
//! canary is below the version, while it upgrades, and while it soaks; then it goes, or at once
//! when its ClusterClass carries `rollout-release: "true"`. Cluster API's
//! conditions are played as its own field manager applies them; `FleetReady` is the manager's.

use crate::common;

use std::time::Duration;

use caapf::api::CapiCluster;
use caapf::hooks::handlers;
use caapf::hooks::types::{Hook, Response, ResponseBody, ResponseStatus};
use caapf::names;
use common::{Harness, eventually};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

const NS: &str = "team-a";
const SOAK: Duration = Duration::from_secs(3);

fn time(at: Timestamp) -> String {
    at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

async fn live(h: &Harness, name: &str) -> Value {
    let api: Api<CapiCluster> = Api::namespaced(h.client.clone(), NS);
    serde_json::to_value(api.get(name).await.expect("cluster")).expect("json")
}

/// Plays Cluster API's topology and health: `TopologyReconciled` (for the current generation)
/// and `Available`, True since `since`, applied by its own field manager; `upgrading` marks
/// AfterClusterUpgrade pending and `TopologyReconciled` False as an upgrade does.
async fn play_capi(h: &Harness, name: &str, since: Timestamp, upgrading: bool) {
    let generation = live(h, name).await["metadata"]["generation"].clone();
    let pending = upgrading.then_some("AfterClusterUpgrade");
    h.merge_cluster(
        NS,
        name,
        json!({"metadata": {"annotations": {names::CAPI_PENDING_HOOKS_ANNOTATION: pending}}}),
    )
    .await;
    let (status, reason) = match upgrading {
        true => ("False", "ClusterUpgrading"),
        false => ("True", "ReconcileSucceeded"),
    };
    let condition = |type_: &str, status: &str, reason: &str| {
        json!({"type": type_, "status": status, "reason": reason, "message": "",
            "observedGeneration": generation, "lastTransitionTime": time(since)})
    };
    Api::<CapiCluster>::namespaced(h.client.clone(), NS)
        .patch_status(
            name,
            &PatchParams::apply("capi-topology").force(),
            &Patch::Apply(json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                "metadata": {"name": name},
                "status": {"conditions": [condition("TopologyReconciled", status, reason),
                    condition("Available", "True", "Available")]}
            })),
        )
        .await
        .expect("Cluster API's conditions");
}

async fn set_version(h: &Harness, name: &str, version: &str) {
    let patch = json!({"spec": {"topology": {"version": version}}});
    h.merge_cluster(NS, name, patch).await;
}

/// BeforeClusterUpgrade of `name` to v1.33.1, as Cluster API v1.12 calls it.
async fn before_upgrade(h: &Harness, name: &str) -> Response {
    let cluster = live(h, name).await;
    let mut metadata = cluster["metadata"].clone();
    if let Some(meta) = metadata.as_object_mut() {
        meta.remove("managedFields");
    }
    let topology = &cluster["spec"]["topology"];
    let body = json!({
        "kind": Hook::BeforeClusterUpgrade.request_kind(),
        "apiVersion": "hooks.runtime.cluster.x-k8s.io/v1alpha1",
        "settings": {},
        "cluster": {"metadata": metadata,
            "spec": {"topology": {"class": "quick-start", "version": topology["version"],
                "variables": topology["variables"], "controlPlane": {"replicas": 1}}},
            "status": {"infrastructureReady": false, "controlPlaneReady": false}},
        "fromKubernetesVersion": "v1.32.4",
        "toKubernetesVersion": "v1.33.1",
    });
    let ctx = h.manager.as_ref().expect("manager").hooks.clone();
    handlers::handle(
        &ctx,
        Hook::BeforeClusterUpgrade,
        &serde_json::to_vec(&body).expect("json"),
    )
    .await
}

fn retry(response: &Response) -> i32 {
    assert_eq!(response.status, ResponseStatus::Success, "{response:?}");
    match response.body {
        ResponseBody::Retry {
            retry_after_seconds,
        } => retry_after_seconds,
        _ => panic!("no retryAfterSeconds: {response:?}"),
    }
}

fn assert_held(response: &Response, waits_for: &str) {
    assert!(retry(response) > 0, "held: {response:?}");
    let message = format!(
        "holding the upgrade to v1.33.1: wave rest waits for canary: Cluster {NS}/canary-1 {waits_for}"
    );
    assert!(
        response.message.starts_with(&message),
        "{message}: {response:?}"
    );
}

#[tokio::test]
async fn a_later_wave_upgrades_after_the_canary_reached_the_version_and_soaked() {
    let mut h = Harness::new().await;
    h.config(&format!(
        "cluster: {{patchResource: true, rollout: {{waveVariable: wave, waves: [canary, rest], soak: {}s, kubernetesUpgrades: true}}}}",
        SOAK.as_secs()
    ))
    .await;
    h.start().await;
    h.namespace(NS, json!({})).await;
    let start = Timestamp::now() - SignedDuration::from_hours(1);
    for (name, wave) in [
        ("canary-1", "canary"),
        ("rest-1", "rest"),
        ("rest-2", "rest"),
    ] {
        h.cluster(
            NS,
            json!({"metadata": {"name": name}, "spec": {"topology": {
                "classRef": {"name": "quick-start"}, "version": "v1.32.4",
                "controlPlane": {"replicas": 1},
                "variables": [{"name": "wave", "value": wave}]}}}),
        )
        .await;
        h.initialize(NS, name).await;
        play_capi(&h, name, start, false).await;
        h.play_fleet_ready(NS, name, Duration::ZERO).await;
    }
    eventually("the canary is FleetReady", || async {
        let cluster = live(&h, "canary-1").await;
        let conditions = cluster["status"]["conditions"].as_array()?.clone();
        conditions
            .iter()
            .any(|c| c["type"] == names::FLEET_READY_CONDITION && c["status"] == "True")
            .then_some(())
    })
    .await;

    // The user moves rest-1 first: the canary is still at v1.32.4.
    set_version(&h, "rest-1", "v1.33.1").await;
    let first = eventually("the configuration is read", || async {
        let response = before_upgrade(&h, "rest-1").await;
        (!response.message.contains("FleetAddonConfig to be read")).then_some(response)
    })
    .await;
    assert_held(&first, "is at v1.32.4, below v1.33.1");
    assert_eq!(retry(&first), 30);

    // The canary upgrades (wave 0 never waits); rest-2 of the same wave, still at v1.32.4,
    // holds nothing.
    set_version(&h, "canary-1", "v1.33.1").await;
    let canary = before_upgrade(&h, "canary-1").await;
    assert_eq!(retry(&canary), 0, "{canary:?}");
    play_capi(&h, "canary-1", Timestamp::now(), true).await;
    assert_held(
        &before_upgrade(&h, "rest-1").await,
        "is upgrading to v1.33.1",
    );

    // It reaches the version: rest-1 waits for the soak, then goes.
    let reached = Timestamp::now();
    play_capi(&h, "canary-1", reached, false).await;
    let soaking = before_upgrade(&h, "rest-1").await;
    assert_held(&soaking, "is soaking: soak ");
    assert!(retry(&soaking) <= SOAK.as_secs() as i32, "{soaking:?}");
    let released = eventually("the soak ends", || async {
        let response = before_upgrade(&h, "rest-1").await;
        (!response.message.contains("holding the upgrade")).then_some(response)
    })
    .await;
    assert_eq!(retry(&released), 0, "{released:?}");
    // Condition times have whole seconds: the soak counts from the second it reached.
    let soaked = Timestamp::now().duration_since(reached) + SignedDuration::from_secs(1);
    assert!(
        soaked >= SignedDuration::try_from(SOAK).expect("soak"),
        "released after {soaked:?}"
    );

    // A soak of an hour holds rest-2 until the ClusterClass's release ends it, as it ends the
    // add-on soaks.
    h.config("cluster: {patchResource: true, rollout: {waveVariable: wave, waves: [canary, rest], soak: 1h, kubernetesUpgrades: true}}").await;
    set_version(&h, "rest-2", "v1.33.1").await;
    let hour = eventually("the hour's soak is read", || async {
        let response = before_upgrade(&h, "rest-2").await;
        response.message.contains("m left").then_some(response)
    })
    .await;
    assert_held(&hour, "is soaking: soak 60m left");
    let class = h.class(NS, "quick-start", json!({})).await;
    assert_held(&before_upgrade(&h, "rest-2").await, "is soaking");
    let release = json!({"metadata": {"annotations": {names::ROLLOUT_RELEASE_ANNOTATION: "true"}}});
    Api::<caapf::api::CapiClusterClass>::namespaced(h.client.clone(), NS)
        .patch(
            &class.metadata.name.expect("name"),
            &PatchParams::default(),
            &Patch::Merge(release),
        )
        .await
        .expect("release");
    let released = before_upgrade(&h, "rest-2").await;
    assert_eq!(retry(&released), 0, "{released:?}");
    h.stop().await;
}
