//! A whole chained upgrade, 1.32.4 → 1.35.0 (three control-plane steps and the workers), played
//! as Cluster API v1.12 plays it — its hooks in its order with its request bodies (cluster-api
//! v1.12.11 `exp/topology/desiredstate/desired_state.go` `computeControlPlaneVersion`,
//! `lifecycle_hooks.go`; `internal/controllers/topology/cluster/reconcile_state.go`
//! `callAfterClusterUpgrade`; the `cluster` of v1.12 requests is a v1beta1 Cluster without
//! `apiVersion`/`kind` and with its status blanked) — against the manager (import controller and
//! hooks) and the sandbox, with Fleet's BundleDeployments changed the way Fleet changes them: a
//! label change re-targets the CCM bundle (its `spec.deploymentID` moves), then the agent
//! applies it (`status.appliedDeploymentID`, `ready`; rancher/fleet v0.16.1
//! `bundledeployment_types.go`). At every step: the Fleet Cluster's labels and
//! `templateValues.KubernetesVersions`, each hold and its message, each release, the timeout and
//! the skip, no write when nothing changes, and a restart of the provider in the middle of a step.
//! A second test plays Cluster API v1.11's single step.

use crate::common;

use caapf::hooks::handlers;
use caapf::hooks::types::{Hook, Response, ResponseBody, ResponseStatus};
use caapf::names;
use common::{Harness, eventually};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube_sandbox::Verb;
use serde_json::{Value, json};

const NS: &str = "team-a";
const BUNDLE_NS: &str = "cluster-team-a-c1-4d5e";

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: if group.is_empty() {
            version.into()
        } else {
            format!("{group}/{version}")
        },
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn capi_cluster() -> ApiResource {
    resource("cluster.x-k8s.io", "v1beta2", "Cluster", "clusters")
}

fn bundle_deployments() -> ApiResource {
    resource(
        "fleet.cattle.io",
        "v1alpha1",
        "BundleDeployment",
        "bundledeployments",
    )
}

struct Upgrade {
    h: Harness,
}

impl Upgrade {
    async fn start(config: &str) -> Upgrade {
        let mut h = Harness::new().await;
        h.config(config).await;
        h.start().await;
        h.namespace(NS, json!({})).await;
        h.namespace(BUNDLE_NS, json!({})).await;
        let api: Api<DynamicObject> = Api::namespaced_with(h.client.clone(), NS, &capi_cluster());
        let cluster: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "c1", "namespace": NS},
            "spec": {"topology": {"classRef": {"name": "quick-start"}, "version": "v1.32.4",
                     "controlPlane": {"replicas": 1},
                     "workers": {"machineDeployments": [{"class": "default-worker", "name": "md-0", "replicas": 2}]}}},
        }))
        .expect("cluster");
        api.create(&PostParams::default(), &cluster)
            .await
            .expect("create cluster");
        h.initialize(NS, "c1").await;
        let upgrade = Upgrade { h };
        upgrade.play_topology_reconciled().await;
        upgrade
            .h
            .play_fleet_status(NS, "c1", json!({"namespace": BUNDLE_NS}))
            .await;
        upgrade
    }

    /// Plays Cluster API's topology controller: `TopologyReconciled` True for the current
    /// generation, no hook pending.
    async fn play_topology_reconciled(&self) {
        let cluster = self.cluster().await;
        let generation = cluster["metadata"]["generation"].clone();
        self.h
            .merge_cluster_status(
                NS,
                "c1",
                json!({"conditions": [{"type": "TopologyReconciled", "status": "True", "reason": "ReconcileSucceeded", "message": "",
                    "observedGeneration": generation, "lastTransitionTime": "2026-11-25T10:00:00Z"}]}),
            )
            .await;
        self.h
            .merge_cluster(
                NS,
                "c1",
                json!({"metadata": {"annotations": {names::CAPI_PENDING_HOOKS_ANNOTATION: null}}}),
            )
            .await;
    }

    /// Plays the start of an upgrade: the user sets the version; Cluster API marks
    /// AfterClusterUpgrade pending and reports the upgrade in `TopologyReconciled`.
    async fn play_upgrade_started(&self, version: &str) {
        self.h
            .merge_cluster(
                NS,
                "c1",
                json!({"spec": {"topology": {"version": version}}}),
            )
            .await;
        let generation = self.cluster().await["metadata"]["generation"].clone();
        self.h
            .merge_cluster(
                NS,
                "c1",
                json!({"metadata": {"annotations": {names::CAPI_PENDING_HOOKS_ANNOTATION: "AfterClusterUpgrade"}}}),
            )
            .await;
        self.h
            .merge_cluster_status(
                NS,
                "c1",
                json!({"conditions": [{"type": "TopologyReconciled", "status": "False", "reason": "ClusterUpgrading",
                    "message": format!("Cluster is upgrading to {version}"),
                    "observedGeneration": generation, "lastTransitionTime": "2026-11-25T10:05:00Z"}]}),
            )
            .await;
    }

    async fn cluster(&self) -> Value {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.h.client.clone(), NS, &capi_cluster());
        serde_json::to_value(api.get("c1").await.expect("cluster")).expect("json")
    }

    /// The Cluster as Cluster API v1.12 sends it to hooks: v1beta1, no `apiVersion`/`kind`,
    /// status blanked (`cleanupCluster`).
    async fn request_cluster(&self) -> Value {
        let live = self.cluster().await;
        let mut metadata = live["metadata"].clone();
        if let Some(meta) = metadata.as_object_mut() {
            meta.remove("managedFields");
        }
        json!({
            "metadata": metadata,
            "spec": {"topology": {"class": "quick-start",
                "version": live["spec"]["topology"]["version"],
                "controlPlane": {"replicas": 1},
                "workers": {"machineDeployments": [{"class": "default-worker", "name": "md-0", "replicas": 2}]}}},
            "status": {"infrastructureReady": false, "controlPlaneReady": false},
        })
    }

    /// Calls `hook` through the manager's hooks, with `versions` as Cluster API adds them.
    async fn call(&self, hook: Hook, versions: Value) -> Response {
        let mut body = json!({
            "kind": hook.request_kind(),
            "apiVersion": "hooks.runtime.cluster.x-k8s.io/v1alpha1",
            "settings": {},
            "cluster": self.request_cluster().await,
        });
        for (key, value) in versions.as_object().expect("versions") {
            body[key] = value.clone();
        }
        let ctx = self.h.manager.as_ref().expect("manager").hooks.clone();
        let bytes = serde_json::to_vec(&body).expect("json");
        handlers::handle(&ctx, hook, &bytes).await
    }

    /// Calls `hook` until it no longer answers "waiting for the Fleet Cluster" or "giving Fleet
    /// …s" (the import controller applies the labels, Fleet gets its settle time).
    async fn call_until_fleet_shows(&self, hook: Hook, versions: Value) -> Response {
        eventually(
            &format!("{hook:?} past the label and settle waits"),
            || async {
                let response = self.call(hook, versions.clone()).await;
                (!response
                    .message
                    .contains("waiting for the Fleet Cluster to show")
                    && !response.message.contains("giving Fleet")
                    // Right after a restart, before the caches have read the configuration.
                    && !response.message.contains("waiting for the FleetAddonConfig to be read"))
                .then_some(response)
            },
        )
        .await
    }

    async fn fleet_cluster(&self) -> Value {
        serde_json::to_value(self.h.fleet_cluster(NS, "c1").await.expect("Fleet Cluster"))
            .expect("json")
    }

    /// Waits until the Fleet Cluster shows these minors (`None`: the label is absent).
    async fn wait_shown(&self, control_plane: &str, workers: &str, target: Option<&str>) {
        eventually(
            &format!("Fleet Cluster shows {control_plane}/{workers}/{target:?}"),
            || async {
                let fleet = self.fleet_cluster().await;
                let labels = &fleet["metadata"]["labels"];
                let values = &fleet["spec"]["templateValues"]["KubernetesVersions"];
                (labels[names::CONTROL_PLANE_MINOR_LABEL] == control_plane
                    && labels[names::WORKERS_MINOR_LABEL] == workers
                    && labels[names::UPGRADE_TARGET_MINOR_LABEL].as_str() == target
                    && values["controlPlaneMinor"] == control_plane
                    && values["workersMinor"] == workers
                    && values["targetMinor"] == target.unwrap_or(""))
                .then_some(())
            },
        )
        .await;
    }

    /// Plays Fleet's bundle controller and agent for the CCM bundle, whose chart follows the
    /// minor the cluster moves to, else the control plane's (`targetCustomizations`, first match:
    /// rancher/fleet v0.16.1 `internal/cmd/controller/target/`): a new deployment ID when the
    /// labels call for another chart; `applied` says whether the agent has applied it.
    async fn play_ccm(&self, applied: bool) {
        let fleet = self.fleet_cluster().await;
        let labels = &fleet["metadata"]["labels"];
        let minor = labels[names::UPGRADE_TARGET_MINOR_LABEL]
            .as_str()
            .or(labels[names::CONTROL_PLANE_MINOR_LABEL].as_str())
            .expect("a version label");
        let wanted = format!("s-ccm-{minor}:options");
        self.play_bundle("ccm", &wanted, applied).await;
    }

    async fn play_bundle(&self, name: &str, deployment: &str, applied: bool) {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.h.client.clone(), BUNDLE_NS, &bundle_deployments());
        let labels = json!({"fleet.cattle.io/bundle-namespace": "fleet-default",
            "fleet.cattle.io/bundle-name": name, "fleet.cattle.io/cluster": "c1",
            "fleet.cattle.io/cluster-namespace": NS});
        let spec = json!({"deploymentID": deployment, "stagedDeploymentID": deployment});
        match api.get_opt(name).await.expect("get bd") {
            None => {
                let object: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "fleet.cattle.io/v1alpha1", "kind": "BundleDeployment",
                    "metadata": {"name": name, "labels": labels}, "spec": spec,
                }))
                .expect("bd");
                api.create(&PostParams::default(), &object)
                    .await
                    .expect("create bd");
            }
            Some(_) => {
                api.patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": spec})),
                )
                .await
                .expect("re-target bd");
            }
        }
        if applied {
            api.patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"appliedDeploymentID": deployment,
                    "ready": true, "nonModified": true}})),
            )
            .await
            .expect("agent applies");
        }
    }

    async fn step_record(&self) -> Value {
        let fleet = self.fleet_cluster().await;
        serde_json::from_str(
            fleet["metadata"]["annotations"][names::UPGRADE_STEP_ANNOTATION]
                .as_str()
                .expect("step recorded"),
        )
        .expect("record")
    }

    fn writes(&self) -> usize {
        self.h.sandbox.requests().count(|r| r.verb.is_write())
    }
}

fn retry(response: &Response) -> i32 {
    match response.body {
        ResponseBody::Retry {
            retry_after_seconds,
        } => retry_after_seconds,
        _ => panic!("no retryAfterSeconds: {response:?}"),
    }
}

fn assert_held(response: &Response, message: &str) {
    assert_eq!(response.status, ResponseStatus::Success, "{response:?}");
    assert!(retry(response) > 0, "held: {response:?}");
    assert!(
        response.message.contains(message),
        "{message}: {response:?}"
    );
}

fn assert_released(response: &Response, message: &str) {
    assert_eq!(response.status, ResponseStatus::Success, "{response:?}");
    assert_eq!(retry(response), 0, "released: {response:?}");
    assert!(
        response.message.contains(message),
        "{message}: {response:?}"
    );
}

#[tokio::test]
async fn a_chained_upgrade_is_shown_to_fleet_and_gated_step_by_step() {
    let mut up = Upgrade::start(
        "cluster: {setOwnerReferences: true, patchResource: true}\nruntimeExtension: {upgradeSteps: {waitForBundlesReady: true, settle: 1s}}",
    )
    .await;
    // Before any upgrade: the version Cluster API reached.
    up.wait_shown("1.32", "1.32", None).await;
    up.play_bundle("cni", "s-cni:options", true).await;
    up.play_ccm(true).await;

    // The user asks for v1.35.0: Cluster API has not started, nothing moves.
    let before = up.h.reconciles("cluster");
    up.play_upgrade_started("v1.35.0").await;
    up.h.wait_reconciled_since("the Cluster after the version change", "cluster", before)
        .await;
    up.wait_shown("1.32", "1.32", None).await;

    // Step 1 (BeforeClusterUpgrade, then BeforeControlPlaneUpgrade): Fleet is told the control
    // plane moves to 1.33 before it moves; held until the CCM for 1.33 is deployed and ready.
    let bcu = json!({"fromKubernetesVersion": "v1.32.4", "toKubernetesVersion": "v1.35.0",
        "controlPlaneUpgrades": [{"version": "v1.33.5"}, {"version": "v1.34.2"}, {"version": "v1.35.0"}],
        "workersUpgrades": [{"version": "v1.35.0"}]});
    let first = up.call(Hook::BeforeClusterUpgrade, bcu.clone()).await;
    assert_held(
        &first,
        "waiting for the Fleet Cluster to show BeforeClusterUpgrade",
    );
    up.wait_shown("1.32", "1.32", Some("1.33")).await;
    assert_eq!(
        up.fleet_cluster().await["spec"]["templateValues"]["KubernetesVersions"]["step"],
        "BeforeClusterUpgrade"
    );
    up.play_ccm(false).await;
    let held = up
        .call_until_fleet_shows(Hook::BeforeClusterUpgrade, bcu.clone())
        .await;
    assert_held(&held, "fleet-default/ccm (WaitApplied)");
    assert!(held.message.contains("next v1.33.5"), "{held:?}");
    // Asked again with nothing changed: the same answer, no write.
    let writes = up.writes();
    let again = up.call(Hook::BeforeClusterUpgrade, bcu.clone()).await;
    assert_eq!(again.message, held.message);
    assert_eq!(up.writes(), writes, "no write when nothing changes");
    up.play_ccm(true).await;
    assert_released(
        &up.call(Hook::BeforeClusterUpgrade, bcu).await,
        "are ready for BeforeClusterUpgrade",
    );
    let bcpu = json!({"fromKubernetesVersion": "v1.32.4", "toKubernetesVersion": "v1.33.5",
        "controlPlaneUpgrades": [{"version": "v1.33.5"}, {"version": "v1.34.2"}, {"version": "v1.35.0"}],
        "workersUpgrades": [{"version": "v1.35.0"}]});
    assert_released(
        &up.call_until_fleet_shows(Hook::BeforeControlPlaneUpgrade, bcpu)
            .await,
        "are ready for BeforeControlPlaneUpgrade",
    );

    // Step 2: the control plane reached 1.33; Fleet sees it, and 1.34 next; held for the CCM of
    // 1.34, and the provider restarts in the middle.
    let acpu = json!({"kubernetesVersion": "v1.33.5",
        "controlPlaneUpgrades": [{"version": "v1.34.2"}, {"version": "v1.35.0"}],
        "workersUpgrades": [{"version": "v1.35.0"}]});
    up.call(Hook::AfterControlPlaneUpgrade, acpu.clone()).await;
    up.wait_shown("1.33", "1.32", Some("1.34")).await;
    let values = &up.fleet_cluster().await["spec"]["templateValues"]["KubernetesVersions"];
    assert_eq!(
        values["finalTargetMinor"], "1.35",
        "the whole upgrade's target"
    );
    up.play_ccm(false).await;
    let held = up
        .call_until_fleet_shows(Hook::AfterControlPlaneUpgrade, acpu.clone())
        .await;
    assert_held(&held, "fleet-default/ccm (WaitApplied)");
    let record = up.step_record().await;
    up.h.stop().await;
    up.h.start().await;
    let after_restart = up
        .call_until_fleet_shows(Hook::AfterControlPlaneUpgrade, acpu.clone())
        .await;
    assert_eq!(
        after_restart.message, held.message,
        "the same hold after a restart"
    );
    assert_eq!(
        up.step_record().await,
        record,
        "the step survives the restart"
    );
    up.play_ccm(true).await;
    assert_released(
        &up.call(Hook::AfterControlPlaneUpgrade, acpu).await,
        "are ready for AfterControlPlaneUpgrade",
    );
    let bcpu = json!({"fromKubernetesVersion": "v1.33.5", "toKubernetesVersion": "v1.34.2",
        "controlPlaneUpgrades": [{"version": "v1.34.2"}, {"version": "v1.35.0"}],
        "workersUpgrades": [{"version": "v1.35.0"}]});
    assert_released(
        &up.call_until_fleet_shows(Hook::BeforeControlPlaneUpgrade, bcpu)
            .await,
        "ready",
    );

    // Step 3: 1.34 reached, 1.35 next; Fleet never deploys the CCM of 1.35 here, and the
    // Cluster's own timeout releases the step (a Warning Event says so).
    up.h.merge_cluster(
        NS,
        "c1",
        json!({"metadata": {"annotations": {names::UPGRADE_GATE_TIMEOUT_ANNOTATION: "1s"}}}),
    )
    .await;
    let acpu = json!({"kubernetesVersion": "v1.34.2",
        "controlPlaneUpgrades": [{"version": "v1.35.0"}],
        "workersUpgrades": [{"version": "v1.35.0"}]});
    up.call(Hook::AfterControlPlaneUpgrade, acpu.clone()).await;
    up.wait_shown("1.34", "1.32", Some("1.35")).await;
    up.play_ccm(false).await;
    let timed_out = eventually("the step times out", || async {
        let response = up.call(Hook::AfterControlPlaneUpgrade, acpu.clone()).await;
        (retry(&response) == 0).then_some(response)
    })
    .await;
    assert_released(&timed_out, "timed out after 1s");
    assert_eq!(up.step_record().await["released"], "timeout");
    let events: Api<DynamicObject> = Api::namespaced_with(
        up.h.client.clone(),
        NS,
        &resource("events.k8s.io", "v1", "Event", "events"),
    );
    eventually("a Warning Event about the timeout", || async {
        events
            .list(&Default::default())
            .await
            .expect("events")
            .items
            .iter()
            .any(|e| e.data["reason"] == "UpgradeGateReleased" && e.data["type"] == "Warning")
            .then_some(())
    })
    .await;
    up.h.merge_cluster(
        NS,
        "c1",
        json!({"metadata": {"annotations": {names::UPGRADE_GATE_TIMEOUT_ANNOTATION: null}}}),
    )
    .await;
    let bcpu = json!({"fromKubernetesVersion": "v1.34.2", "toKubernetesVersion": "v1.35.0",
        "controlPlaneUpgrades": [{"version": "v1.35.0"}], "workersUpgrades": [{"version": "v1.35.0"}]});
    assert_released(
        &up.call(Hook::BeforeControlPlaneUpgrade, bcpu).await,
        "was released (timeout)",
    );

    // Step 4: the control plane reached 1.35, the workers move next; the operator skips the
    // gate of this step.
    up.h.merge_cluster(
        NS,
        "c1",
        json!({"metadata": {"annotations": {names::SKIP_UPGRADE_GATE_ANNOTATION: "v1.35.0"}}}),
    )
    .await;
    let acpu = json!({"kubernetesVersion": "v1.35.0", "workersUpgrades": [{"version": "v1.35.0"}]});
    let skipped = up.call(Hook::AfterControlPlaneUpgrade, acpu).await;
    assert_released(&skipped, "skipped by annotation");
    up.wait_shown("1.35", "1.32", Some("1.35")).await;
    let bwu = json!({"fromKubernetesVersion": "v1.32.4", "toKubernetesVersion": "v1.35.0",
        "workersUpgrades": [{"version": "v1.35.0"}]});
    assert_released(
        &up.call(Hook::BeforeWorkersUpgrade, bwu).await,
        "was released (skipped)",
    );
    up.h.merge_cluster(
        NS,
        "c1",
        json!({"metadata": {"annotations": {names::SKIP_UPGRADE_GATE_ANNOTATION: null}}}),
    )
    .await;

    // The workers reached 1.35; then the whole upgrade is done.
    up.play_ccm(true).await;
    let awu = json!({"kubernetesVersion": "v1.35.0"});
    up.call(Hook::AfterWorkersUpgrade, awu.clone()).await;
    up.wait_shown("1.35", "1.35", None).await;
    assert_released(
        &up.call_until_fleet_shows(Hook::AfterWorkersUpgrade, awu)
            .await,
        "are ready for AfterWorkersUpgrade",
    );
    let acu = json!({"kubernetesVersion": "v1.35.0"});
    assert_released(
        &up.call_until_fleet_shows(Hook::AfterClusterUpgrade, acu)
            .await,
        // Not gated: a held AfterClusterUpgrade makes Cluster API v1.12 refuse version changes
        // (`internal/webhooks/cluster.go` `validateTopologyVersionUpdate`).
        "AfterClusterUpgrade is not gated",
    );
    // AfterClusterUpgrade's step record (no step in progress) reaches templateValues through the
    // import controller; the hook's answer does not wait for it: the labels it checks are the
    // ones AfterWorkersUpgrade left, so it may answer before the controller applied.
    eventually("no step under way in templateValues", || async {
        let fleet = up.fleet_cluster().await;
        (fleet["spec"]["templateValues"]["KubernetesVersions"]["step"] == "").then_some(())
    })
    .await;
    // Cluster API reports the topology reached: the labels stay, nothing is written.
    let before = up.h.reconciles("cluster");
    let writes = up.h.sandbox.requests().count(|r| {
        r.verb == Verb::Patch && r.resource == "clusters" && r.group == "fleet.cattle.io"
    });
    up.play_topology_reconciled().await;
    up.h.wait_reconciled_since("the Cluster after the upgrade", "cluster", before)
        .await;
    up.wait_shown("1.35", "1.35", None).await;
    assert_eq!(
        up.h.sandbox.requests().count(|r| r.verb == Verb::Patch
            && r.resource == "clusters"
            && r.group == "fleet.cattle.io"),
        writes,
        "the Fleet Cluster already shows v1.35"
    );
    up.h.stop().await;
}

/// Cluster API v1.11: one step, BeforeClusterUpgrade, AfterControlPlaneUpgrade and
/// AfterClusterUpgrade without step lists (cluster-api v1.11.11), and no gate: Fleet is told,
/// nothing is held.
#[tokio::test]
async fn a_single_step_of_cluster_api_v1_11_is_shown_without_a_gate() {
    let mut up = Upgrade::start("cluster: {setOwnerReferences: true, patchResource: true}").await;
    up.wait_shown("1.32", "1.32", None).await;
    up.play_ccm(false).await;
    up.play_upgrade_started("v1.33.1").await;
    let bcu = json!({"fromKubernetesVersion": "v1.32.4", "toKubernetesVersion": "v1.33.1"});
    assert_released(
        &up.call(Hook::BeforeClusterUpgrade, bcu).await,
        "not waiting for its bundles",
    );
    up.wait_shown("1.32", "1.32", Some("1.33")).await;
    let acpu = json!({"kubernetesVersion": "v1.33.1"});
    assert_released(
        &up.call(Hook::AfterControlPlaneUpgrade, acpu).await,
        "not waiting",
    );
    up.wait_shown("1.33", "1.32", Some("1.33")).await;
    let acu = json!({"kubernetesVersion": "v1.33.1"});
    assert_released(
        &up.call(Hook::AfterClusterUpgrade, acu).await,
        "not waiting",
    );
    up.wait_shown("1.33", "1.33", None).await;
    up.h.stop().await;
}

/// docs/lifecycle.md, "Add-ons through an upgrade": its YAML applies, and its Bundle gives the
/// chart the guide says at every step of the chained upgrade, never a CCM newer than the API
/// server (Kubernetes' version skew policy, kubernetes/website
/// `content/en/releases/version-skew-policy.md`), with the labels the provider shows
/// (`caapf::model::upgrade_steps`) and Fleet's rule: the first target whose selector matches
/// (rancher/fleet v0.12–v0.16 `internal/cmd/controller/target/matcher/bundlematch.go`).
#[tokio::test]
async fn the_upgrade_guide_applies_and_its_bundle_follows_the_minor() {
    use caapf::model::upgrade_steps::{StepRequest, UpgradeHook, next_step, of_step};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use kube::core::{Selector, SelectorExt};
    use std::collections::BTreeMap;

    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/lifecycle.md"))
        .expect("docs/lifecycle.md");
    let section = text
        .split("\n## Add-ons through an upgrade")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("the upgrade section");
    let documents = common::guide::documents(section);
    assert_eq!(documents.len(), 2, "the FleetAddonConfig and the Bundle");
    let h = Harness::new().await;
    h.namespace("fleet-default", json!({})).await;
    for document in &documents {
        common::guide::apply(&h, document).await;
    }
    let config = h.addon_config().await.expect("FleetAddonConfig");
    assert!(
        caapf::model::config::EffectiveConfig::from_spec(&config.spec)
            .problems
            .is_empty()
    );

    let bundle = documents
        .iter()
        .find(|d| d["kind"] == "Bundle")
        .expect("the Bundle");
    assert!(
        text.contains("targetCustomizationMode: FirstMatch"),
        "the guide states the mode it assumes"
    );
    let matching = |labels: &BTreeMap<String, String>| -> Vec<String> {
        bundle["spec"]["targets"]
            .as_array()
            .expect("targets")
            .iter()
            .filter(|target| {
                let selector: LabelSelector =
                    serde_json::from_value(target["clusterSelector"].clone()).expect("selector");
                Selector::try_from(selector)
                    .expect("selector")
                    .matches(labels)
            })
            .filter_map(|target| target["helm"]["version"].as_str().map(str::to_string))
            .collect()
    };
    let default = bundle["spec"]["helm"]["version"].as_str().expect("version");
    // FirstMatch (Fleet's default) takes the first matching entry; Fleet 0.16's AllMatches
    // merges every match in order, so the last wins (rancher/fleet v0.16.1
    // `internal/cmd/controller/target/builder.go`): the guide's entries give the same chart.
    let chart_for = |labels: &BTreeMap<String, String>| -> String {
        let found = matching(labels);
        let first = found.first().map_or(default, String::as_str).to_string();
        assert_eq!(
            found.last().map_or(default, String::as_str),
            first,
            "AllMatches: {labels:?}"
        );
        first
    };
    let steps =
        |from: Option<&str>, to: Option<&str>, version: Option<&str>, cp: &[&str], w: &[&str]| {
            StepRequest {
                from: from.map(str::to_string),
                to: to.map(str::to_string),
                version: version.map(str::to_string),
                control_plane_upgrades: cp.iter().map(|v| v.to_string()).collect(),
                workers_upgrades: w.iter().map(|v| v.to_string()).collect(),
                cluster_version: Some("v1.35.0".into()),
            }
        };
    use UpgradeHook::*;
    let sequence = [
        (
            BeforeClusterUpgrade,
            steps(
                Some("v1.32.4"),
                Some("v1.35.0"),
                None,
                &["v1.33.5", "v1.34.2", "v1.35.0"],
                &["v1.35.0"],
            ),
            "1.32.3",
        ),
        (
            BeforeControlPlaneUpgrade,
            steps(
                Some("v1.32.4"),
                Some("v1.33.5"),
                None,
                &["v1.33.5", "v1.34.2", "v1.35.0"],
                &["v1.35.0"],
            ),
            "1.32.3",
        ),
        (
            AfterControlPlaneUpgrade,
            steps(
                None,
                None,
                Some("v1.33.5"),
                &["v1.34.2", "v1.35.0"],
                &["v1.35.0"],
            ),
            "1.33.1",
        ),
        (
            BeforeControlPlaneUpgrade,
            steps(
                Some("v1.33.5"),
                Some("v1.34.2"),
                None,
                &["v1.34.2", "v1.35.0"],
                &["v1.35.0"],
            ),
            "1.33.1",
        ),
        (
            AfterControlPlaneUpgrade,
            steps(None, None, Some("v1.34.2"), &["v1.35.0"], &["v1.35.0"]),
            "1.34.0",
        ),
        (
            BeforeControlPlaneUpgrade,
            steps(
                Some("v1.34.2"),
                Some("v1.35.0"),
                None,
                &["v1.35.0"],
                &["v1.35.0"],
            ),
            "1.34.0",
        ),
        (
            AfterControlPlaneUpgrade,
            steps(None, None, Some("v1.35.0"), &[], &["v1.35.0"]),
            "1.35.2",
        ),
        (
            BeforeWorkersUpgrade,
            steps(Some("v1.32.4"), Some("v1.35.0"), None, &[], &["v1.35.0"]),
            "1.35.2",
        ),
        (
            AfterWorkersUpgrade,
            steps(None, None, Some("v1.35.0"), &[], &[]),
            "1.35.2",
        ),
        (
            AfterClusterUpgrade,
            steps(None, None, Some("v1.35.0"), &[], &[]),
            "1.35.2",
        ),
    ];
    let mut labels = BTreeMap::from([
        (
            names::CONTROL_PLANE_MINOR_LABEL.to_string(),
            "1.32".to_string(),
        ),
        (names::WORKERS_MINOR_LABEL.to_string(), "1.32".to_string()),
    ]);
    assert_eq!(chart_for(&labels), "1.32.3", "before the upgrade");
    let mut previous = None;
    for (hook, request, chart) in sequence {
        let step = next_step(
            hook,
            &request,
            previous.as_ref(),
            k8s_openapi::jiff::Timestamp::now(),
        )
        .expect("step");
        of_step(&step).put_labels(&mut labels);
        assert_eq!(chart_for(&labels), chart, "{hook:?} {labels:?}");
        // Kubernetes' skew policy: the CCM never runs a minor newer than the API server.
        let control_plane = &labels[names::CONTROL_PLANE_MINOR_LABEL];
        assert!(
            chart.starts_with(&format!("{control_plane}.")),
            "{hook:?}: CCM {chart} on a {control_plane} control plane"
        );
        previous = Some(step);
    }
}

/// `beforeClusterUpgrade.waitForBundlesReady` (the older gate, BeforeClusterUpgrade only, the
/// bundles as they are) follows the step gates' rules: `wait-for-bundles: "false"` turns it off
/// (it used to turn it on), and the timeout releases it with a Warning Event.
#[tokio::test]
async fn the_older_gate_can_be_turned_off_and_times_out() {
    let mut up = Upgrade::start(
        "cluster: {setOwnerReferences: true, patchResource: true}\nruntimeExtension: {beforeClusterUpgrade: {waitForBundlesReady: true}}",
    )
    .await;
    up.play_bundle("cni", "s-cni:options", false).await;
    up.play_upgrade_started("v1.33.1").await;
    let bcu = json!({"fromKubernetesVersion": "v1.32.4", "toKubernetesVersion": "v1.33.1"});
    assert_held(
        &up.call(Hook::BeforeClusterUpgrade, bcu.clone()).await,
        "holding the upgrade to v1.33.1 until the Fleet bundles of Fleet Cluster team-a/c1 are ready: fleet-default/cni (WaitApplied)",
    );
    let annotate =
        |key: &'static str, value: Value| json!({"metadata": {"annotations": {key: value}}});
    up.h.merge_cluster(
        NS,
        "c1",
        annotate(names::WAIT_FOR_BUNDLES_ANNOTATION, json!("false")),
    )
    .await;
    assert_released(
        &up.call(Hook::BeforeClusterUpgrade, bcu.clone()).await,
        "not waiting for its bundles",
    );
    up.h.merge_cluster(
        NS,
        "c1",
        annotate(names::WAIT_FOR_BUNDLES_ANNOTATION, Value::Null),
    )
    .await;
    assert_held(
        &up.call(Hook::BeforeClusterUpgrade, bcu.clone()).await,
        "fleet-default/cni (WaitApplied)",
    );
    up.h.merge_cluster(
        NS,
        "c1",
        annotate(names::UPGRADE_GATE_TIMEOUT_ANNOTATION, json!("1s")),
    )
    .await;
    let released = eventually("the older gate times out", || async {
        let response = up.call(Hook::BeforeClusterUpgrade, bcu.clone()).await;
        response.message.contains("timed out").then_some(response)
    })
    .await;
    assert_released(&released, "timed out after 1s");
    eventually("a Warning Event says so", || async {
        let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(up.h.client.clone());
        events
            .list(&Default::default())
            .await
            .ok()?
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("UpgradeGateReleased"))
            .then_some(())
    })
    .await;
    up.h.stop().await;
}

/// A Cluster the provider does not import (here outside `spec.cluster.selector`) is answered at
/// once even with both gates on: its Fleet Cluster (another importer's) never gets the labels.
#[tokio::test]
async fn clusters_not_imported_are_not_gated() {
    let mut h = Harness::new().await;
    h.config("cluster: {patchResource: true, selector: {matchLabels: {fleet: enabled}}}\nruntimeExtension: {beforeClusterUpgrade: {waitForBundlesReady: true}, upgradeSteps: {waitForBundlesReady: true}}").await;
    h.start().await;
    h.namespace(NS, json!({})).await;
    let api: Api<DynamicObject> = Api::namespaced_with(h.client.clone(), NS, &capi_cluster());
    let cluster: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": "c1", "namespace": NS},
        "spec": {"topology": {"classRef": {"name": "quick-start"}, "version": "v1.33.1",
                 "controlPlane": {"replicas": 1}}},
    }))
    .expect("cluster");
    api.create(&PostParams::default(), &cluster)
        .await
        .expect("create cluster");
    let fleet: fleet_api_rs::fleet_cluster::Cluster = serde_json::from_value(json!({
        "apiVersion": "fleet.cattle.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "c1", "namespace": NS}, "spec": {"kubeConfigSecret": "c1-kubeconfig"},
    }))
    .expect("Fleet Cluster");
    Api::namespaced(h.client.clone(), NS)
        .create(&PostParams::default(), &fleet)
        .await
        .expect("another importer's Fleet Cluster");
    let up = Upgrade { h };
    let bcu = json!({"fromKubernetesVersion": "v1.33.1", "toKubernetesVersion": "v1.34.0"});
    assert_released(
        &up.call(Hook::BeforeClusterUpgrade, bcu).await,
        "not waiting for Fleet",
    );
    let acpu = json!({"kubernetesVersion": "v1.34.0"});
    assert_released(
        &up.call(Hook::AfterControlPlaneUpgrade, acpu).await,
        "not waiting for Fleet",
    );
    let mut h = up.h;
    h.stop().await;
}

/// A Cluster without a topology (a plain RKE2ControlPlane, no lifecycle hooks) gets the same
/// version labels from its machines: the control plane's lowest version (`status.version`
/// while a rollout runs) and its MachineDeployments' lowest, followed through the caches (no
/// read per reconcile).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_without_topology_shows_its_machines_versions() {
    use kube::ResourceExt;
    let mut h = Harness::new().await;
    h.config("cluster: {patchResource: true}").await;
    h.namespace(NS, json!({})).await;
    let cluster = h
        .cluster(
            NS,
            json!({"metadata": {"name": "c1"}, "spec": {
                "controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "RKE2ControlPlane", "name": "c1-cp"}}}),
        )
        .await;
    let owner = json!([{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "c1", "uid": cluster.uid()}]);
    let control_planes: Api<DynamicObject> = Api::namespaced_with(
        h.client.clone(),
        NS,
        &resource(
            "controlplane.cluster.x-k8s.io",
            "v1beta2",
            "RKE2ControlPlane",
            "rke2controlplanes",
        ),
    );
    let deployments: Api<DynamicObject> = Api::namespaced_with(
        h.client.clone(),
        NS,
        &resource(
            "cluster.x-k8s.io",
            "v1beta2",
            "MachineDeployment",
            "machinedeployments",
        ),
    );
    let create = |api: &Api<DynamicObject>, body: Value| {
        let api = api.clone();
        async move {
            let object: DynamicObject = serde_json::from_value(body).expect("object");
            api.create(&PostParams::default(), &object)
                .await
                .expect("create");
        }
    };
    create(
        &control_planes,
        json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "RKE2ControlPlane",
        "metadata": {"name": "c1-cp", "ownerReferences": owner},
        "spec": {"replicas": 3, "version": "v1.33.5+rke2r1"}}),
    )
    .await;
    // MachineDeployments as Cluster API v1.11 keeps them (owned by their Cluster, labelled).
    let md = |name: &str, cluster: &str, owner: &Value, version: &str| {
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
            "metadata": {"name": name, "ownerReferences": owner,
                "labels": {"cluster.x-k8s.io/cluster-name": cluster}},
            "spec": {"clusterName": cluster, "replicas": 1,
                "selector": {"matchLabels": {"cluster.x-k8s.io/cluster-name": cluster}},
                "template": {"metadata": {"labels": {"cluster.x-k8s.io/cluster-name": cluster}},
                    "spec": {"clusterName": cluster, "version": version,
                    "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io",
                        "kind": "RKE2ConfigTemplate", "name": name}},
                    "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io",
                        "kind": "DockerMachineTemplate", "name": name}}}}})
    };
    create(&deployments, md("c1-md-0", "c1", &owner, "v1.33.5+rke2r1")).await;
    // One without the Cluster's owner reference yet (Cluster API adds it only once the Cluster
    // is not paused: v1.12.11 machinedeployment_controller.go): found by spec.clusterName.
    create(
        &deployments,
        md("c1-md-1", "c1", &Value::Null, "v1.32.9+rke2r1"),
    )
    .await;
    // Another Cluster's MachineDeployment does not count.
    let other = json!([{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "other", "uid": "u-other"}]);
    create(
        &deployments,
        md("other-md", "other", &other, "v1.31.0+rke2r1"),
    )
    .await;
    h.initialize(NS, "c1").await;
    h.start().await;
    let shown = |control_plane: &'static str, workers: &'static str| {
        move |fleet: &fleet_api_rs::fleet_cluster::Cluster| {
            let labels = fleet.metadata.labels.clone().unwrap_or_default();
            let values = fleet.spec.template_values.clone().unwrap_or_default();
            labels
                .get(names::CONTROL_PLANE_MINOR_LABEL)
                .map(String::as_str)
                == Some(control_plane)
                && labels.get(names::WORKERS_MINOR_LABEL).map(String::as_str) == Some(workers)
                && !labels.contains_key(names::UPGRADE_TARGET_MINOR_LABEL)
                && values.get("KubernetesVersions").is_some_and(|v| {
                    v["controlPlaneMinor"] == control_plane && v["workersMinor"] == workers
                })
        }
    };
    h.wait_fleet_cluster("1.33 / 1.32", NS, "c1", shown("1.33", "1.32"))
        .await;

    // The lagging MachineDeployment is upgraded: the workers' minor follows.
    deployments
        .patch(
            "c1-md-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"spec": {"version": "v1.33.5+rke2r1"}}}})),
        )
        .await
        .expect("upgrade md-1");
    h.wait_fleet_cluster("1.33 / 1.33", NS, "c1", shown("1.33", "1.33"))
        .await;

    // The control plane upgrade starts: its machines still run 1.33 (status.version), so the
    // label stays until the last one moved.
    control_planes
        .patch_status(
            "c1-cp",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"version": "v1.33.5+rke2r1"}})),
        )
        .await
        .expect("status");
    control_planes
        .patch(
            "c1-cp",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"version": "v1.34.2+rke2r1"}})),
        )
        .await
        .expect("upgrade the control plane");
    let fleet = h
        .wait_fleet_cluster("the edit is seen", NS, "c1", |fleet| {
            let values = fleet.spec.template_values.clone().unwrap_or_default();
            values
                .get("ControlPlane")
                .is_some_and(|cp| cp["spec"]["version"] == "v1.34.2+rke2r1")
        })
        .await;
    assert!(shown("1.33", "1.33")(&fleet), "{:?}", fleet.metadata.labels);
    control_planes
        .patch_status(
            "c1-cp",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"version": "v1.34.2+rke2r1"}})),
        )
        .await
        .expect("rolled out");
    h.wait_fleet_cluster("1.34 / 1.33", NS, "c1", shown("1.34", "1.33"))
        .await;
    let reads = h.sandbox.requests().count(|r| {
        common::from_manager(r)
            && matches!(r.verb, Verb::Get)
            && (r.resource == "machinedeployments" || r.resource == "rke2controlplanes")
    });
    assert_eq!(reads, 0, "read from the caches");
    h.stop().await;
}
