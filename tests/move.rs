//! Self-managed Clusters: the move controller against the sandbox API server, through every
//! state (docs/self-managed.md). The manager runs as its ServiceAccount with the RBAC of
//! `config/default`, so a rule the move needs and the role lacks fails the test with a 403.
//!
//! The tests play Cluster API (the control plane initialized, CRDs labelled by clusterctl as
//! `clusterctl init` labels every component) and Fleet: the Fleet Cluster's status as Fleet's
//! agent and controller write it, and each move Bundle's status as Fleet's Bundle controller
//! writes it (rancher/fleet `internal/cmd/controller/reconciler/bundle_controller.go`:
//! `observedGeneration`, `summary` from the BundleDeployments, `partitions[].unavailable`).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use caapf::api::CapiCluster;
use caapf::controllers::r#move::FleetBundle;
use caapf::model::move_plan::MOVE_CLUSTER_LABEL;
use caapf::model::move_state::{MOVE_STATE_ANNOTATION, MoveState, Phase, SELF_MANAGED_LABEL};
use common::render::kustomize;
use common::{Harness, eventually, from_manager};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube_sandbox::Verb;
use serde_json::json;

const NS: &str = "clusters";
/// The manager's namespace and ServiceAccount in `config/`.
const SYSTEM: &str = "caapf-system";
const SERVICE_ACCOUNT: &str = "caapf-controller-manager";

/// A sandbox with initialized Clusters (and their kubeconfig Secrets), opted in when marked so,
/// the CAPI Cluster CRD labelled as clusterctl installs it, and the manager's RBAC; no manager
/// yet.
async fn setup(clusters: &[(&str, bool)]) -> Harness {
    let mut h = Harness::new().await;
    // The move controller is experimental: off unless its feature gate is on.
    h.flags.feature_gates = Some(caapf::cli::SELF_MANAGED_MOVE.to_string() + "=true");
    h.run_as_service_account(&kustomize("config/default"), SYSTEM, SERVICE_ACCOUNT)
        .await;
    let crds: Api<CustomResourceDefinition> = Api::all(h.client.clone());
    crds.patch(
        "clusters.cluster.x-k8s.io",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"clusterctl.cluster.x-k8s.io": ""}}})),
    )
    .await
    .expect("label the Cluster CRD as clusterctl does");
    h.namespace(NS, json!({})).await;
    h.config("cluster: {patchResource: true, setOwnerReferences: true}")
        .await;
    for (name, opted_in) in clusters {
        let labels = if *opted_in {
            json!({SELF_MANAGED_LABEL: "true"})
        } else {
            json!({})
        };
        h.cluster(
            NS,
            json!({"metadata": {"name": name, "labels": labels}, "spec": {}}),
        )
        .await;
        h.initialize(NS, name).await;
        let secrets: Api<Secret> = Api::namespaced(h.client.clone(), NS);
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": format!("{name}-kubeconfig"),
                "labels": {"cluster.x-k8s.io/cluster-name": name}},
            "data": {"value": "a3ViZWNvbmZpZw=="},
        }))
        .expect("secret");
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .expect("create kubeconfig Secret");
    }
    h
}

/// Plays Fleet's agent: the Fleet Cluster checks in and is ready.
async fn fleet_cluster_ready(h: &Harness, name: &str) {
    h.play_fleet_ready(NS, name, Duration::ZERO).await;
}

async fn state(h: &Harness, name: &str) -> Option<MoveState> {
    let cluster: CapiCluster = h.get(NS, name).await?;
    serde_json::from_str(cluster.annotations().get(MOVE_STATE_ANNOTATION)?).ok()
}

/// Waits until the recorded phase is `phase`; returns the state.
async fn wait_phase(h: &Harness, name: &str, phase: Phase) -> MoveState {
    eventually(&format!("{name}: move phase {phase:?}"), || async {
        state(h, name).await.filter(|s| s.phase == phase)
    })
    .await
}

async fn spec_paused(h: &Harness, name: &str) -> bool {
    let cluster: CapiCluster = h.get(NS, name).await.expect("cluster");
    cluster.body.to_map()["spec"]["paused"] == json!(true)
}

async fn bundles(h: &Harness, name: &str) -> Vec<FleetBundle> {
    let api: Api<FleetBundle> = Api::namespaced(h.client.clone(), NS);
    let mut items = api
        .list(&ListParams::default().labels(&format!("{MOVE_CLUSTER_LABEL}={name}")))
        .await
        .expect("list Bundles")
        .items;
    items.sort_by_key(|b| b.name_any());
    items
}

/// Plays Fleet's Bundle controller for every move Bundle of `name` at its current generation:
/// `ready` as Fleet reports a deployed, ready BundleDeployment; otherwise an error on the
/// target with `message`.
async fn fleet_reports(h: &Harness, name: &str, ready: bool, message: &str) {
    let api: Api<FleetBundle> = Api::namespaced(h.client.clone(), NS);
    for bundle in bundles(h, name).await {
        let status = if ready {
            json!({"observedGeneration": bundle.metadata.generation,
                "summary": {"ready": 1, "desiredReady": 1},
                "partitions": [{"name": "All", "count": 1, "maxUnavailable": 1}]})
        } else {
            json!({"observedGeneration": bundle.metadata.generation,
                "summary": {"ready": 0, "desiredReady": 1, "errApplied": 1,
                    "nonReadyResources": [{"name": format!("{NS}/{name}"), "bundleState": "ErrApplied", "message": message}]},
                "partitions": [{"name": "All", "count": 1, "maxUnavailable": 1, "unavailable": 1}]})
        };
        api.patch_status(
            &bundle.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await
        .expect("write Bundle status");
    }
}

/// The rendered Cluster copy in the Bundles of `name`.
async fn cluster_copy(h: &Harness, name: &str) -> String {
    bundles(h, name)
        .await
        .iter()
        .flat_map(|b| {
            b.body["spec"]["resources"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .find(|r| r["name"].as_str().is_some_and(|n| n.contains("-cluster-")))
        .and_then(|r| r["content"].as_str().map(str::to_string))
        .expect("a Cluster copy in the Bundles")
}

/// Server-side applies of each move Bundle by the manager, by Bundle name.
fn bundle_applies(h: &Harness) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for r in h.sandbox.requests().all() {
        if from_manager(&r) && r.resource == "bundles" && r.verb == Verb::Apply {
            *counts.entry(r.name.clone()).or_default() += 1;
        }
    }
    counts
}

async fn event_reasons(h: &Harness, name: &str) -> Vec<String> {
    let api: Api<Event> = Api::namespaced(h.client.clone(), NS);
    let mut events: Vec<Event> = api
        .list(&Default::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .collect();
    events.sort_by_key(|e| e.metadata.creation_timestamp.clone());
    events
        .into_iter()
        .filter_map(|e| e.reason)
        .filter(|r| r.starts_with("Move"))
        .collect()
}

/// The manager's writes of the CAPI Cluster `name` (not its status) and of any Bundle.
fn move_writes(h: &Harness, name: &str) -> usize {
    h.sandbox
        .requests()
        .all()
        .into_iter()
        .filter(|r| from_manager(r) && r.verb.is_write())
        .filter(|r| {
            r.resource == "bundles"
                || (r.group == "cluster.x-k8s.io"
                    && r.resource == "clusters"
                    && r.subresource.is_empty()
                    && r.name == name)
        })
        .count()
}

fn no_forbidden_requests(h: &Harness) {
    let forbidden: Vec<String> = h
        .sandbox
        .requests()
        .all()
        .into_iter()
        .filter(|r| from_manager(r) && r.code == 403)
        .map(|r| format!("{:?} {}/{} {}", r.verb, r.group, r.resource, r.namespace))
        .collect();
    assert!(forbidden.is_empty(), "RBAC refused: {forbidden:#?}");
}

/// The whole hand-over, with the provider restarted while it waits at every step that waits
/// (a graceful stop, and a crash): Pending, WaitingUnblocked, WaitingTarget, ResumingTarget and
/// Moved. It ends moved, each Bundle written once per content (published paused, the Cluster's
/// resumed), and the moved Cluster is no longer managed by the import.
/// The move is experimental (issue #31): without its feature gate an opted-in Cluster is imported
/// as any other and never moved (the move controller does not run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_feature_gate_nothing_is_moved() {
    let mut h = setup(&[("c1", true)]).await;
    h.flags.feature_gates = None;
    h.start().await;
    fleet_cluster_ready(&h, "c1").await;
    let before = h.reconciles("cluster");
    h.wait_reconciled_since("c1 after its Fleet Cluster is ready", "cluster", before)
        .await;
    assert_eq!(h.reconciles("move"), 0, "the move controller does not run");
    assert!(state(&h, "c1").await.is_none(), "no move state");
    assert!(bundles(&h, "c1").await.is_empty(), "no move Bundle");
    assert!(!spec_paused(&h, "c1").await);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moves_through_every_state_across_restarts() {
    let mut h = setup(&[("c1", true)]).await;
    // Holds the move in WaitingUnblocked until the test removes it.
    let secrets: Api<Secret> = Api::namespaced(h.client.clone(), NS);
    secrets
        .patch(
            "c1-kubeconfig",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"clusterctl.cluster.x-k8s.io/block-move": "true"}}})),
        )
        .await
        .expect("block the move");
    h.start().await;

    // Pending: the Fleet Cluster is not ready yet.
    let pending = wait_phase(&h, "c1", Phase::Pending).await;
    assert!(!pending.paused_by_move);
    assert!(!spec_paused(&h, "c1").await);
    h.stop().await;
    h.start().await;

    fleet_cluster_ready(&h, "c1").await;
    // Pausing is recorded together with spec.paused; then the block-move annotation holds it.
    let waiting = wait_phase(&h, "c1", Phase::WaitingUnblocked).await;
    assert!(waiting.paused_by_move);
    assert!(spec_paused(&h, "c1").await);
    let blocked = eventually("the block-move message", || async {
        state(&h, "c1")
            .await
            .filter(|s| s.message.contains("block-move"))
    })
    .await;
    assert!(
        blocked.message.contains("Secret clusters/c1-kubeconfig"),
        "{blocked:?}"
    );
    assert!(
        bundles(&h, "c1").await.is_empty(),
        "nothing published while blocked"
    );
    // A crash (no graceful stop) while blocked.
    h.manager.take().expect("manager").abort().await;
    h.start().await;
    secrets
        .patch(
            "c1-kubeconfig",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"clusterctl.cluster.x-k8s.io/block-move": null}}})),
        )
        .await
        .expect("unblock the move");

    // Publishing, then WaitingTarget: the copies are published paused.
    wait_phase(&h, "c1", Phase::WaitingTarget).await;
    let published = bundles(&h, "c1").await;
    assert_eq!(
        published.iter().map(|b| b.name_any()).collect::<Vec<_>>(),
        ["c1-move-01", "c1-move-02"]
    );
    for b in &published {
        assert_eq!(b.body["spec"]["targets"], json!([{"clusterName": "c1"}]));
        assert_eq!(b.body["spec"]["keepResources"], json!(true));
    }
    let copy = cluster_copy(&h, "c1").await;
    assert!(copy.contains("paused: true"), "{copy}");
    assert!(!copy.contains(MOVE_STATE_ANNOTATION), "{copy}");
    assert!(!copy.contains(SELF_MANAGED_LABEL), "{copy}");
    h.stop().await;
    h.start().await;
    // Fleet reports the content ready: the target copies are resumed.
    fleet_reports(&h, "c1", true, "").await;
    wait_phase(&h, "c1", Phase::ResumingTarget).await;
    eventually("the resumed copy", || async {
        cluster_copy(&h, "c1")
            .await
            .contains("paused: false")
            .then_some(())
    })
    .await;
    // Fleet has not processed the new content yet: the old Ready does not count.
    h.stop().await;
    h.start().await;
    let resuming = state(&h, "c1").await.expect("state");
    assert_eq!(resuming.phase, Phase::ResumingTarget);
    fleet_reports(&h, "c1", true, "").await;
    let moved = wait_phase(&h, "c1", Phase::Moved).await;
    assert!(moved.paused_by_move);
    assert!(spec_paused(&h, "c1").await, "the source stays paused");
    h.stop().await;
    h.start().await;

    // Across six managers, each Bundle was applied once when published, and the Cluster's
    // once more to resume it; the Secret's content does not change, so it is not written again.
    let applies = bundle_applies(&h);
    assert_eq!(
        applies,
        BTreeMap::from([("c1-move-01".to_string(), 2), ("c1-move-02".to_string(), 1)]),
    );
    let reasons: BTreeSet<String> = event_reasons(&h, "c1").await.into_iter().collect();
    let every_phase: BTreeSet<String> = [
        "MovePending",
        "MovePausing",
        "MoveWaitingUnblocked",
        "MovePublishing",
        "MoveWaitingTarget",
        "MoveResumingTarget",
        "MoveMoved",
    ]
    .into_iter()
    .map(str::to_string)
    .collect();
    assert_eq!(reasons, every_phase);

    // No longer managed by the import: its Fleet Cluster is kept, disowned from the source,
    // and a change of the source (even unpaused by hand) is not carried to it.
    let fleet = eventually("the Fleet Cluster disowned", || async {
        h.fleet_cluster(NS, "c1")
            .await
            .filter(|f| f.owner_references().is_empty())
    })
    .await;
    assert!(!fleet.labels().contains_key("team"));
    let before = h.reconciles("cluster");
    h.merge_cluster(
        NS,
        "c1",
        json!({"metadata": {"labels": {"team": "a"}}, "spec": {"paused": false}}),
    )
    .await;
    eventually("the import saw the change", || async {
        (h.reconciles("cluster") > before).then_some(())
    })
    .await;
    let fleet = h.fleet_cluster(NS, "c1").await.expect("Fleet Cluster kept");
    assert!(!fleet.labels().contains_key("team"), "{:?}", fleet.labels());
    assert_eq!(state(&h, "c1").await.expect("state").phase, Phase::Moved);
    assert_eq!(bundle_applies(&h), applies, "nothing published after Moved");
    no_forbidden_requests(&h);
    h.stop().await;
}

/// A failure on the target: Fleet reports an error until the target timeout; the move fails,
/// unpauses the source it paused, removes its Bundles and says why. A Cluster that someone else
/// paused is refused and stays paused. Across a restart the failure is not repeated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_on_the_target_unpauses_only_what_the_move_paused() {
    let mut h = setup(&[("c1", true), ("c2", false)]).await;
    h.flags.move_target_timeout = Duration::from_secs(3);
    h.start().await;
    fleet_cluster_ready(&h, "c1").await;
    fleet_cluster_ready(&h, "c2").await;
    // Someone pauses c2, then it opts in.
    h.merge_cluster(NS, "c2", json!({"spec": {"paused": true}}))
        .await;
    h.merge_cluster(
        NS,
        "c2",
        json!({"metadata": {"labels": {SELF_MANAGED_LABEL: "true"}}}),
    )
    .await;

    // c2 was paused by someone else: refused, left paused, nothing published.
    let refused = wait_phase(&h, "c2", Phase::Failed).await;
    assert!(!refused.paused_by_move);
    assert!(refused.message.contains("already paused"), "{refused:?}");
    assert!(spec_paused(&h, "c2").await);
    assert!(bundles(&h, "c2").await.is_empty());

    // c1: published, then Fleet cannot apply the content on the target.
    wait_phase(&h, "c1", Phase::WaitingTarget).await;
    assert!(spec_paused(&h, "c1").await);
    fleet_reports(&h, "c1", false, "no matches for kind \"Cluster\"").await;
    let why = eventually("Fleet's reason in the state", || async {
        state(&h, "c1")
            .await
            .filter(|s| s.message.contains("ErrApplied"))
    })
    .await;
    assert_eq!(why.phase, Phase::WaitingTarget);
    // Timed out: rolled back.
    let failed = wait_phase(&h, "c1", Phase::Failed).await;
    assert!(
        failed
            .message
            .starts_with("timed out waiting for the target")
            && failed.message.contains("no matches for kind"),
        "{failed:?}"
    );
    eventually("the source unpaused", || async {
        (!spec_paused(&h, "c1").await).then_some(())
    })
    .await;
    eventually("the Bundles removed", || async {
        bundles(&h, "c1").await.is_empty().then_some(())
    })
    .await;
    let failed = eventually("the rollback recorded", || async {
        state(&h, "c1").await.filter(|s| !s.paused_by_move)
    })
    .await;
    assert_eq!(failed.phase, Phase::Failed);

    // A restart does not start the move again nor touch the source.
    let writes_before = move_writes(&h, "c1");
    h.stop().await;
    h.start().await;
    let before = h.reconciles("move");
    h.merge_cluster(NS, "c1", json!({"metadata": {"labels": {"poke": "1"}}}))
        .await;
    eventually("the move controller saw the change", || async {
        (h.reconciles("move") > before).then_some(())
    })
    .await;
    assert_eq!(state(&h, "c1").await.expect("state").phase, Phase::Failed);
    assert!(!spec_paused(&h, "c1").await);
    assert!(bundles(&h, "c1").await.is_empty());
    assert_eq!(
        move_writes(&h, "c1"),
        writes_before,
        "no write after the rollback"
    );
    assert!(
        event_reasons(&h, "c1")
            .await
            .contains(&"MoveFailed".to_string())
    );
    no_forbidden_requests(&h);
    h.stop().await;
}
