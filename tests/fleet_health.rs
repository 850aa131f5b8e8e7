//! The `FleetReady` condition on CAPI Clusters against the sandbox API server. The tests play
//! Cluster API (control plane initialized, its own status conditions) and Fleet (the Fleet
//! Cluster's status, from `tests/fixtures/fleet/`, as Fleet's controllers and agent write it).

use crate::common;

use std::time::Duration;

use caapf::api::CapiCluster;
use caapf::model::fleet_health::reason;
use caapf::names::FLEET_READY_CONDITION;
use common::{Harness, eventually, fleet_status, fleet_status_seen, from_manager};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

const NS: &str = "clusters";

fn cluster(name: &str, labels: Value) -> Value {
    json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"clusterNetwork": {"pods": {"cidrBlocks": ["10.1.0.0/16"]}}}
    })
}

/// Plays Fleet: replaces the Fleet Cluster's status (as Fleet's status updates do).
async fn play_fleet(h: &Harness, name: &str, status: Value) {
    h.play_fleet_status(NS, name, status).await;
}

async fn condition(h: &Harness, name: &str) -> Option<Value> {
    let cluster: CapiCluster = h.get(NS, name).await?;
    cluster
        .body
        .get("status")?
        .get("conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == FLEET_READY_CONDITION)
        .cloned()
}

/// Waits until the condition has `reason`; returns it.
async fn wait_reason(h: &Harness, name: &str, want: &str) -> Value {
    eventually(&format!("{name}: FleetReady reason {want}"), || async {
        condition(h, name).await.filter(|c| c["reason"] == want)
    })
    .await
}

async fn counts(h: &Harness) -> Option<caapf::api::ClusterCounts> {
    h.addon_config().await?.status?.clusters
}

/// Waits until the FleetAddonConfig counts `ready` ready Clusters.
async fn wait_ready_count(h: &Harness, what: &str, ready: i64) {
    eventually(what, || async {
        (counts(h).await?.ready == ready).then_some(())
    })
    .await
}

/// Waits until the Cluster has no FleetReady condition.
async fn wait_no_condition(h: &Harness, what: &str, name: &str) {
    eventually(what, || async {
        condition(h, name).await.is_none().then_some(())
    })
    .await
}

/// A condition of Cluster API's (or another controller's), as it writes them.
fn capi_condition(type_: &str, status: &str, reason: &str) -> Value {
    json!({
        "type": type_, "status": status, "reason": reason,
        "message": "", "lastTransitionTime": "2026-11-23T10:00:00Z"
    })
}

/// Another manager (`manager`) server-side applies its own condition to the Cluster's status.
async fn apply_condition(h: &Harness, name: &str, manager: &str, condition: Value, what: &str) {
    Api::<CapiCluster>::namespaced(h.client.clone(), NS)
        .patch_status(
            name,
            &PatchParams::apply(manager).force(),
            &Patch::Apply(json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                "metadata": {"name": name},
                "status": {"conditions": [condition]}
            })),
        )
        .await
        .expect(what);
}

/// The manager's writes to Cluster API objects in the request log.
fn manager_cluster_writes(h: &Harness) -> Vec<kube_sandbox::RequestRecord> {
    h.sandbox
        .requests()
        .all()
        .into_iter()
        .filter(|r| r.verb.is_write() && from_manager(r) && r.group == "cluster.x-k8s.io")
        .collect()
}

fn metrics(h: &Harness) -> String {
    h.manager.as_ref().expect("manager").ctx.metrics.render()
}

async fn events(h: &Harness, name: &str, reason: &str) -> usize {
    let api: Api<Event> = Api::namespaced(h.client.clone(), NS);
    api.list(&Default::default())
        .await
        .expect("events")
        .items
        .iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
        })
        .count()
}

/// Every reason is reached by changing what Fleet reports; the transition time only moves when
/// the status does; the ready count, the metric and the Events follow.
#[tokio::test]
async fn every_reason_follows_the_played_fleet_status() {
    let mut h = Harness::new().await;
    h.namespace(NS, json!({})).await;
    h.config(
        "cluster: {patchResource: true, agentInitiatedSelector: {matchLabels: {registration: agent}}}",
    )
    .await;
    h.cluster(NS, cluster("c1", json!({}))).await;
    h.cluster(NS, cluster("c2", json!({"registration": "agent"})))
        .await;
    h.start().await;

    let waiting = wait_reason(&h, "c1", reason::WAITING_FOR_CONTROL_PLANE).await;
    assert_eq!(waiting["status"], "False");
    assert_eq!(waiting["observedGeneration"], 1);
    let token = wait_reason(&h, "c2", reason::AGENT_NOT_REGISTERED).await;
    assert!(
        token["message"]
            .as_str()
            .is_some_and(|m| m.contains("ClusterRegistrationToken clusters/c2")),
        "{token}"
    );

    h.initialize(NS, "c1").await;
    let registering = wait_reason(&h, "c1", reason::AGENT_NOT_REGISTERED).await;
    assert!(
        registering["message"]
            .as_str()
            .is_some_and(|m| m.contains("kubeconfig Secret clusters/c1-kubeconfig")),
        "{registering}"
    );
    let since = registering["lastTransitionTime"].clone();
    assert_eq!(since, waiting["lastTransitionTime"], "still False: kept");

    play_fleet(&h, "c1", fleet_status("status-kubeconfig-missing.yaml")).await;
    wait_reason(&h, "c1", reason::KUBECONFIG_SECRET_MISSING).await;
    play_fleet(&h, "c1", fleet_status("status-agent-deploy-failed.yaml")).await;
    wait_reason(&h, "c1", reason::AGENT_DEPLOYMENT_FAILED).await;
    play_fleet(
        &h,
        "c1",
        fleet_status_seen("status-bundles-not-ready.yaml", Duration::from_secs(5)),
    )
    .await;
    let bundles = wait_reason(&h, "c1", reason::BUNDLES_NOT_READY).await;
    let message = bundles["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("2 of 4 Fleet bundles not ready")
            && message.contains("calico-cni (ErrApplied: chart requires kubeVersion")
            && message.contains("monitoring-grafana (NotReady: deployment.apps monitoring/grafana"),
        "{message}"
    );
    assert_eq!(bundles["lastTransitionTime"], since);

    h.play_fleet_ready(NS, "c1", Duration::from_secs(5)).await;
    let ready = wait_reason(&h, "c1", reason::READY).await;
    assert_eq!(ready["status"], "True");
    eventually("ready count and Event", || async {
        let counts = counts(&h).await?;
        (counts.ready == 1 && counts.imported == 2 && events(&h, "c1", "FleetReady").await == 1)
            .then_some(())
    })
    .await;
    eventually("metric by reason", || async {
        let text = metrics(&h);
        (text.contains("caapf_fleet_ready_clusters{reason=\"Ready\"} 1")
            && text.contains("caapf_fleet_ready_clusters{reason=\"AgentNotRegistered\"} 1")
            && text.contains("caapf_fleet_ready_clusters{reason=\"BundlesNotReady\"} 0"))
        .then_some(())
    })
    .await;

    h.play_fleet_ready(NS, "c1", Duration::from_secs(31 * 60))
        .await;
    let silent = wait_reason(&h, "c1", reason::AGENT_NOT_SEEN).await;
    assert_eq!(silent["status"], "False");
    eventually("ready count drops, Warning event", || async {
        let counts = counts(&h).await?;
        (counts.ready == 0 && events(&h, "c1", "FleetNotReady").await >= 1).then_some(())
    })
    .await;
    h.stop().await;
}

/// An agent that stops checking in is reported without any further change to watch: the
/// controller rechecks when the check-in becomes overdue.
#[tokio::test]
async fn a_silent_agent_is_noticed_when_its_check_in_is_overdue() {
    let mut h = Harness::new().await;
    h.namespace(NS, json!({})).await;
    h.config("cluster: {patchResource: true, agentCheckinInterval: 4s}")
        .await;
    h.initialized_cluster(NS, cluster("c1", json!({}))).await;
    h.start().await;
    wait_reason(&h, "c1", reason::AGENT_NOT_REGISTERED).await;
    h.play_fleet_ready(NS, "c1", Duration::ZERO).await;
    wait_reason(&h, "c1", reason::READY).await;
    // Nothing else changes; twice the interval (8s) later the agent counts as not seen.
    wait_reason(&h, "c1", reason::AGENT_NOT_SEEN).await;
    h.stop().await;
}

/// Cluster API's own status writes (an Update of the whole list, as its patch helper sends, and
/// a server-side apply by another manager) leave our condition alone; at steady state and after
/// a restart nothing is written.
#[tokio::test]
async fn survives_capi_status_writes_and_steady_state_writes_nothing() {
    let mut h = Harness::new().await;
    h.namespace(NS, json!({})).await;
    h.config("cluster: {patchResource: true}").await;
    h.initialized_cluster(NS, cluster("c1", json!({}))).await;
    h.flags.sync_period = Duration::from_millis(300);
    h.start().await;
    wait_reason(&h, "c1", reason::AGENT_NOT_REGISTERED).await;
    h.play_fleet_ready(NS, "c1", Duration::ZERO).await;
    let ours = wait_reason(&h, "c1", reason::READY).await;

    // CAPI's patch helper: the latest conditions plus its own, merge-patched as a whole list.
    h.sandbox.requests().reset();
    let before = h.reconciles("health");
    let api: Api<CapiCluster> = Api::namespaced(h.client.clone(), NS);
    let live = api.get("c1").await.expect("cluster");
    let mut list = live.body.to_map()["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut available = capi_condition("Available", "False", "NotAvailable");
    available["observedGeneration"] = json!(1);
    list.push(available);
    api.patch_status(
        "c1",
        &PatchParams {
            field_manager: Some("manager".into()),
            ..Default::default()
        },
        &Patch::Merge(json!({"status": {"conditions": list}})),
    )
    .await
    .expect("CAPI status update");
    // Another manager applying its own condition.
    apply_condition(
        &h,
        "c1",
        "capi-topology",
        capi_condition("TopologyReconciled", "True", "ReconcileSucceeded"),
        "another manager's apply",
    )
    .await;
    h.wait_reconciled_since("the health controller saw the writes", "health", before)
        .await;
    assert_eq!(condition(&h, "c1").await, Some(ours.clone()), "unchanged");
    let rewritten = manager_cluster_writes(&h);
    assert!(rewritten.is_empty(), "{rewritten:#?}");
    let types: Vec<String> =
        api.get("c1").await.expect("cluster").body.to_map()["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["type"].as_str().map(str::to_string))
            .collect();
    for t in ["Available", "TopologyReconciled", FLEET_READY_CONDITION] {
        assert!(types.iter().any(|x| x == t), "{t} missing in {types:?}");
    }
    wait_ready_count(&h, "ready count written", 1).await;
    h.stop().await;

    h.sandbox.requests().reset();
    h.start().await;
    eventually("restart: Cluster reconciled, resynced twice", || async {
        (h.reconciles("health") >= 1 && h.reconciles("cluster") >= 3).then_some(())
    })
    .await;
    // The status writer recounts after reconciles; let it run once with the same counts.
    wait_ready_count(&h, "ready count", 1).await;
    let writes = h.state_writes();
    assert!(writes.is_empty(), "steady state wrote: {writes:#?}");
    assert_eq!(condition(&h, "c1").await, Some(ours));
    h.stop().await;
}

/// The condition goes when the Cluster stops being imported or the site opts out, and other
/// conditions stay.
#[tokio::test]
async fn removed_on_deselect_and_on_opt_out() {
    let mut h = Harness::new().await;
    h.namespace(NS, json!({})).await;
    let selected = "cluster: {patchResource: true, selector: {matchLabels: {fleet: \"yes\"}}}";
    h.config(selected).await;
    h.initialized_cluster(NS, cluster("c1", json!({"fleet": "yes"})))
        .await;
    h.start().await;
    wait_reason(&h, "c1", reason::AGENT_NOT_REGISTERED).await;
    apply_condition(
        &h,
        "c1",
        "manager",
        capi_condition("Available", "False", "NotAvailable"),
        "CAPI condition",
    )
    .await;

    h.label_cluster(NS, "c1", json!({"fleet": "no"})).await;
    wait_no_condition(&h, "condition removed on deselect", "c1").await;
    let kept: CapiCluster = h.get(NS, "c1").await.expect("cluster");
    assert_eq!(
        kept.body.to_map()["status"]["conditions"][0]["type"],
        "Available"
    );

    h.label_cluster(NS, "c1", json!({"fleet": "yes"})).await;
    wait_reason(&h, "c1", reason::AGENT_NOT_REGISTERED).await;

    h.config("cluster: {patchResource: true, selector: {matchLabels: {fleet: \"yes\"}}, setFleetReadyCondition: false}")
        .await;
    wait_no_condition(&h, "condition removed on opt-out", "c1").await;
    // Opted out, nothing is written on later changes.
    h.sandbox.requests().reset();
    h.play_fleet_ready(NS, "c1", Duration::ZERO).await;
    wait_ready_count(&h, "ready still counted", 1).await;
    let cluster_writes = manager_cluster_writes(&h);
    assert!(cluster_writes.is_empty(), "{cluster_writes:#?}");
    h.stop().await;
}
