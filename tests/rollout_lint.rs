//! The rollout lint against the sandbox: no Bundle watch until waves are configured; then a
//! Bundle whose rolloutStrategy does not work with them gets Warning Events naming each finding,
//! the strategy `caapf rollout-strategy` prints gets none, and Fleet's Bundle status writes cost
//! no reconcile, read or Event.

use crate::common;

use caapf::controllers::import::rollout_lint::CONTROLLER;
use common::{Harness, eventually, is_manager_agent};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const WAVE: &str = "rollout-wave.fleet.addons.cluster.x-k8s.io";

fn api(h: &Harness, kind: &str, plural: &str) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: "fleet.cattle.io".into(),
        version: "v1alpha1".into(),
        api_version: "fleet.cattle.io/v1alpha1".into(),
        kind: kind.into(),
        plural: plural.into(),
    };
    Api::namespaced_with(h.client.clone(), "default", &ar)
}

async fn create(h: &Harness, kind: &str, plural: &str, body: Value) {
    let api = api(h, kind, plural);
    let mut body = body;
    body["apiVersion"] = json!("fleet.cattle.io/v1alpha1");
    body["kind"] = json!(kind);
    let object: DynamicObject = serde_json::from_value(body).expect("object");
    api.create(&PostParams::default(), &object)
        .await
        .expect("create");
}

async fn lint_events(h: &Harness, bundle: &str) -> Vec<String> {
    let events: Api<Event> = Api::all(h.client.clone());
    let list = events.list(&ListParams::default()).await.expect("events");
    (list.items.into_iter())
        .filter(|e| {
            e.reason.as_deref() == Some("RolloutStrategyLint")
                && e.type_.as_deref() == Some("Warning")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(bundle)
                && e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("Bundle")
        })
        .filter_map(|e| e.note)
        .collect()
}

#[tokio::test]
async fn a_bundle_whose_strategy_defeats_the_waves_gets_warning_events() {
    let mut h = Harness::new().await;
    h.config("cluster: {}").await;
    h.start().await;
    // Without waves no Bundle watch: not a request on Bundles by the time a Cluster of another
    // namespace is imported.
    h.namespace("team-a", json!({})).await;
    h.importable_cluster("team-a", "c1").await;
    h.wait_fleet_cluster("c1 imported", "team-a", "c1", |_| true)
        .await;
    let requests = |verb: Option<kube_sandbox::Verb>, resource: &str, name: &str| {
        (h.sandbox.requests()).count(|r| {
            verb.is_none_or(|v| r.verb == v)
                && r.resource == resource
                && (name.is_empty() || r.name == name)
                && is_manager_agent(&r.user_agent)
        })
    };
    assert_eq!(requests(None, "bundles", ""), 0, "no Bundle watch");
    h.config("cluster: {rollout: {waves: [canary, rest]}}")
        .await;
    // Fleet Clusters as the import labels them: two canaries, three of wave rest, one of a
    // wave no longer configured.
    for (name, wave) in [
        ("c0", "canary"),
        ("c1", "canary"),
        ("r0", "rest"),
        ("r1", "rest"),
        ("r2", "rest"),
        ("x0", "old"),
    ] {
        let body = json!({"metadata": {"name": name, "namespace": "default", "labels": {WAVE: wave}}, "spec": {}});
        create(&h, "Cluster", "clusters", body).await;
    }
    let config: caapf::api::FleetAddonConfig = serde_yaml::from_str(
        "{apiVersion: addons.cluster.x-k8s.io/v1alpha1, kind: FleetAddonConfig, metadata: {name: c}, spec: {cluster: {rollout: {waves: [canary, rest]}}}}",
    )
    .unwrap();
    let printed = caapf::model::rollout::strategy::for_config(Some(&config)).unwrap();
    let printed: Value = serde_yaml::from_str(&printed).unwrap();
    let bundle = |name: &str, strategy: &Value| {
        json!({"metadata": {"name": name, "namespace": "default"},
               "spec": {"targets": [{"clusterSelector": {}}], "rolloutStrategy": strategy, "resources": []}})
    };
    create(
        &h,
        "Bundle",
        "bundles",
        bundle("good", &printed["rolloutStrategy"]),
    )
    .await;
    eventually("the manager reads the good Bundle", || async {
        (h.sandbox.requests().count(|r| {
            r.resource == "bundles" && r.name == "good" && is_manager_agent(&r.user_agent)
        }) > 0)
            .then_some(())
    })
    .await;
    let bad = json!({"partitions": [
        {"name": "canary", "maxUnavailable": 2, "clusterSelector": {"matchLabels": {WAVE: "canary"}}},
        {"name": "rest", "maxUnavailable": 1, "clusterSelector": {"matchLabels": {WAVE: "rest"}}},
        {"name": "frozen", "maxUnavailable": 0, "clusterSelector": {"matchLabels": {WAVE: "never"}}}]});
    create(&h, "Bundle", "bundles", bundle("bad", &bad)).await;
    let notes = eventually("three Warning Events on the bad Bundle", || async {
        let notes = lint_events(&h, "bad").await;
        (notes.len() == 3).then_some(notes)
    })
    .await;
    let has = |text: &str| notes.iter().any(|n| n.contains(text));
    assert!(
        has(
            "partition \"canary\" cannot gate: its 2 cluster(s) are no more than its maxUnavailable (2)"
        ),
        "{notes:?}"
    );
    assert!(
        has("partition \"frozen\" has maxUnavailable: 0 but does not select on rollout-hold"),
        "{notes:?}"
    );
    assert!(
        has(
            "1 Fleet Cluster(s) with rollout waves match no partition and are never updated (fleet #3828): x0"
        ),
        "{notes:?}"
    );
    assert_eq!(lint_events(&h, "good").await, Vec::<String>::new());

    // Fleet writes the bad Bundle's status: no reconcile, no read, no Event; the good Bundle's
    // next generation (later on the same watch) is linted again.
    let get = Some(kube_sandbox::Verb::Get);
    let before = (h.reconciles(CONTROLLER), requests(get, "bundles", "good"));
    let read_bad = requests(get, "bundles", "bad");
    let events = requests(None, "events", "");
    let bundles = api(&h, "Bundle", "bundles");
    for ready in 0..3 {
        let status = json!({"status": {"summary": {"desiredReady": 6, "ready": ready}}});
        let patch = Patch::Merge(&status);
        (bundles
            .patch_status("bad", &PatchParams::default(), &patch)
            .await)
            .expect("status");
    }
    let spec = json!({"spec": {"resources": [{"name": "a.yaml", "content": "a"}]}});
    (bundles
        .patch("good", &PatchParams::default(), &Patch::Merge(&spec))
        .await)
        .expect("spec");
    eventually("the good Bundle linted again", || async {
        (h.reconciles(CONTROLLER) > before.0 && requests(get, "bundles", "good") > before.1)
            .then_some(())
    })
    .await;
    assert_eq!(h.reconciles(CONTROLLER), before.0 + 1, "one reconcile");
    assert_eq!(requests(get, "bundles", "bad"), read_bad, "no read");
    assert_eq!(requests(None, "events", ""), events, "no Event");
    h.stop().await;
}
