//! Living beside Rancher Turtles (docs/migration.md, docs/installation.md): the FleetAddonConfig
//! Turtles embeds, as rendered from its chart (`tests/fixtures/turtles/`, rancher/turtles
//! v0.27.0), against the sandbox, and what Turtles' own code and `scripts/migrate-caapf.sh` look
//! for on the objects we write.

use crate::common;

use caapf::api::{CapiCluster, FleetAddonConfig};
use caapf::model::config::EffectiveConfig;
use caapf::names;
use common::{Harness, eventually, has_finalizer};
use fleet_api_rs::fleet_cluster::Cluster as FleetCluster;
use kube::ResourceExt;
use serde_json::{Value, json};

/// The objects of rancher/turtles v0.27.0 `charts/rancher-turtles-providers/templates/addon-fleet.yaml`
/// as the chart renders them with `providers.addonFleet.enabled: true`.
pub fn turtles_chart_objects() -> Vec<Value> {
    let text = include_str!("fixtures/turtles/addon-fleet-v0.27.0.yaml");
    serde_yaml::Deserializer::from_str(text)
        .map(|doc| serde::Deserialize::deserialize(doc).expect("YAML"))
        .filter(|doc: &Value| !doc.is_null())
        .collect()
}

/// The FleetAddonConfig Turtles embeds: the first document of the `manifests` key of the
/// ConfigMap `fleet-addon-config`, which the CAPIProvider names in `additionalManifests`.
pub fn turtles_fleet_addon_config() -> Value {
    let objects = turtles_chart_objects();
    let map = objects
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == "fleet-addon-config")
        .expect("the chart renders the ConfigMap");
    let manifests = map["data"]["manifests"].as_str().expect("manifests");
    let first = manifests.split("\n---").next().expect("a document");
    serde_yaml::from_str(first).expect("FleetAddonConfig YAML")
}

#[test]
fn turtles_embedded_config_is_valid_and_means_what_its_chart_says() {
    let object = turtles_fleet_addon_config();
    assert_eq!(object["kind"], "FleetAddonConfig");
    let config: FleetAddonConfig = serde_json::from_value(object).expect("decodes");
    let effective = EffectiveConfig::resolve(Some(&config));
    assert!(effective.problems.is_empty(), "{:?}", effective.problems);
    let reference = effective
        .fleet
        .feature_gates_config_map
        .expect("configMap.ref");
    assert_eq!(
        (reference.namespace.as_deref(), reference.name.as_deref()),
        (Some("cattle-system"), Some("rancher-config"))
    );
    let import = effective.cluster.expect("spec.cluster");
    assert!(import.apply_class_group && import.patch_resource && import.set_owner_references);
    assert_eq!(
        import.agent.agent_namespace.as_deref(),
        Some("cattle-fleet-system")
    );
    assert_eq!(import.agent.host_network, Some(true));
    let env: Vec<(String, Option<String>)> = (import.agent.agent_env_vars.iter().flatten())
        .map(|e| (e.name.clone(), e.value.clone()))
        .collect();
    assert_eq!(
        env,
        [
            (
                "FLEET_AGENT_METRICS_BIND_ADDRESS".into(),
                Some(":18080".into())
            ),
            (
                "FLEET_AGENT_PROBE_BIND_ADDRESS".into(),
                Some(":18081".into())
            ),
        ]
    );
    let classes = effective.cluster_class.expect("spec.clusterClass");
    assert!(classes.patch_resource && classes.set_owner_references);
}

/// What rancher/turtles v0.27.0 `scripts/migrate-caapf.sh` (`discover_caapf_clusters`) finds:
/// Fleet Clusters owned by a `cluster.x-k8s.io` Cluster whose CAPI Cluster carries CAAPF's
/// finalizer, as `namespace/fleet-name/capi-name`.
pub async fn migrate_script_finds(h: &Harness, namespaces: &[&str]) -> Vec<String> {
    let mut found = vec![];
    for namespace in namespaces {
        for fleet in h.list::<FleetCluster>(namespace).await {
            let owners = fleet.owner_references().iter();
            let capi = owners
                .filter(|o| o.kind == "Cluster" && o.api_version.starts_with("cluster.x-k8s.io"));
            for owner in capi {
                let cluster = h.get::<CapiCluster>(namespace, &owner.name).await;
                if cluster.as_ref().is_some_and(has_finalizer) {
                    found.push(format!("{namespace}/{}/{}", fleet.name_any(), owner.name));
                }
            }
        }
    }
    found.sort();
    found
}

/// Turtles' FleetAddonConfig selects a Cluster labelled `cluster-api.cattle.io/rancher-auto-import:
/// "true"` without `disable-fleet-auto-import`, or any Cluster in a namespace labelled so
/// (the two rules are OR-ed, as in CAAPF); each Fleet Cluster carries what Turtles' migration
/// script discovers it by.
#[tokio::test]
async fn turtles_embedded_config_selects_in_the_sandbox() {
    const AUTO: &str = "cluster-api.cattle.io/rancher-auto-import";
    const OFF: &str = "cluster-api.cattle.io/disable-fleet-auto-import";
    let mut h = Harness::new().await;
    h.namespace("plain", json!({})).await;
    h.namespace("auto", json!({AUTO: "true"})).await;
    h.namespace("auto-off", json!({AUTO: "true", OFF: "true"}))
        .await;
    // (namespace, name, labels, selected)
    let rows = [
        ("plain", "labelled", json!({AUTO: "true"}), true),
        ("plain", "unlabelled", json!({}), false),
        (
            "plain",
            "disabled",
            json!({AUTO: "true", OFF: "true"}),
            false,
        ),
        ("plain", "false", json!({AUTO: "false"}), false),
        ("auto", "any", json!({}), true),
        // The namespace rule selects it: the Cluster's own labels do not take it out (unlike
        // Turtles' Rancher import, where the Cluster's `"false"` wins: docs/migration.md).
        ("auto", "disabled", json!({OFF: "true"}), true),
        ("auto", "false", json!({AUTO: "false"}), true),
        ("auto-off", "labelled", json!({AUTO: "true"}), true),
        ("auto-off", "unlabelled", json!({}), false),
    ];
    for (namespace, name, labels, _) in &rows {
        h.initialized_cluster(namespace, json!({"metadata": {"name": name, "labels": labels},
            "spec": {"controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": "cp"}}}))
        .await;
    }
    let config = turtles_fleet_addon_config();
    h.config(&serde_yaml::to_string(&config["spec"]).expect("spec"))
        .await;
    h.start().await;

    let mut expected = vec![];
    for (namespace, name, labels, selected) in &rows {
        if !selected {
            continue;
        }
        let fleet = h
            .wait_fleet_cluster(&format!("{namespace}/{name}"), namespace, name, |_| true)
            .await;
        let owner = fleet.owner_references().first().cloned().expect("owned");
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("Cluster", *name)
        );
        assert!(owner.api_version.starts_with("cluster.x-k8s.io/"));
        for (key, value) in labels.as_object().expect("labels") {
            assert_eq!(
                fleet.labels().get(key),
                value.as_str().map(str::to_string).as_ref()
            );
        }
        assert_eq!(
            fleet.spec.agent_namespace.as_deref(),
            Some("cattle-fleet-system")
        );
        assert_eq!(fleet.spec.host_network, Some(true));
        expected.push(format!("{namespace}/{name}/{name}"));
    }
    h.wait_finalizer("last selected Cluster", "auto-off", "labelled", true)
        .await;
    for (namespace, name, _, selected) in &rows {
        let cluster = h
            .get::<CapiCluster>(namespace, name)
            .await
            .expect("cluster");
        assert_eq!(has_finalizer(&cluster), *selected, "{namespace}/{name}");
        if !selected {
            assert!(
                h.fleet_cluster(namespace, name).await.is_none(),
                "{namespace}/{name}"
            );
        }
    }
    expected.sort();
    let found = eventually("migrate-caapf.sh discovery", || async {
        let found = migrate_script_finds(&h, &["plain", "auto", "auto-off"]).await;
        (found == expected).then_some(found)
    })
    .await;
    assert_eq!(found.len(), 5);
}

const NS: &str = "capi";
const AUTO: (&str, &str) = ("cluster-api.cattle.io/rancher-auto-import", "true");

/// A sandbox with Turtles' FleetAddonConfig and one imported Cluster `capi/c1`, the manager
/// running.
async fn imported() -> Harness {
    let mut h = Harness::new().await;
    h.namespace(NS, json!({})).await;
    h.initialized_cluster(NS, json!({"metadata": {"name": "c1", "labels": {AUTO.0: AUTO.1}},
        "spec": {"controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": "cp"}}}))
    .await;
    let config = turtles_fleet_addon_config();
    h.config(&serde_yaml::to_string(&config["spec"]).expect("spec"))
        .await;
    h.start().await;
    h.wait_fleet_cluster("imported", NS, "c1", |_| true).await;
    h.wait_finalizer("our finalizer", NS, "c1", true).await;
    h
}

/// Plays Turtles v0.27.0 with `use-caapf: false`: `reconcileExternalFleetManagement` drops our
/// finalizer from the Cluster's list and the patch helper sends the list without it (a merge
/// patch of `metadata.finalizers`).
async fn strip_like_turtles(h: &Harness) {
    let cluster = h.get::<CapiCluster>(NS, "c1").await.expect("cluster");
    let kept: Vec<&String> = (cluster.finalizers().iter())
        .filter(|f| *f != names::FINALIZER)
        .collect();
    h.merge_cluster(NS, "c1", json!({"metadata": {"finalizers": kept}}))
        .await;
}

async fn conflict_condition(h: &Harness) -> Option<Value> {
    let cluster = h.get::<CapiCluster>(NS, "c1").await?;
    let conditions = cluster
        .body
        .get("status")?
        .get("conditions")?
        .as_array()?
        .clone();
    conditions
        .into_iter()
        .find(|c| c["type"] == names::FLEET_CONFLICT_CONDITION)
}

/// How many times a Warning Event with `reason` was published in the namespace.
async fn warnings(h: &Harness, reason: &str) -> usize {
    let api: kube::Api<k8s_openapi::api::events::v1::Event> =
        kube::Api::namespaced(h.client.clone(), NS);
    let events = api.list(&Default::default()).await.expect("events").items;
    let ours = |e: &&k8s_openapi::api::events::v1::Event| {
        e.reason.as_deref() == Some(reason) && e.type_.as_deref() == Some("Warning")
    };
    // kube's Recorder counts a repeated reason in the first Event's `series`.
    let times = |e: &k8s_openapi::api::events::v1::Event| e.series.as_ref().map_or(1, |s| s.count);
    events.iter().filter(ours).map(times).sum::<i32>() as usize
}

fn metric(h: &Harness, reason: &str) -> Option<String> {
    let text = h.manager.as_ref().expect("manager").ctx.metrics.render();
    let series = format!("caapf_import_conflicts_total{{reason=\"{reason}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series).map(str::to_string))
}

/// Turtles strips our finalizer after every re-add: it is put back three times, each removal
/// reported (Warning Event, condition naming `use-caapf`, metric), then left off while the
/// Fleet Cluster stays; restoring it by hand starts afresh.
#[tokio::test]
async fn a_finalizer_turtles_strips_is_put_back_three_times_then_left() {
    let h = imported().await;
    for round in 1..=4 {
        h.wait_finalizer(&format!("finalizer before strip {round}"), NS, "c1", true)
            .await;
        strip_like_turtles(&h).await;
        eventually(&format!("removal {round} reported"), || async {
            let message = conflict_condition(&h).await?["message"]
                .as_str()?
                .to_string();
            let expected = match round {
                4 => "left off after 3 re-adds".to_string(),
                n => format!("put back ({n} of 3 times)"),
            };
            message.contains(&expected).then_some(())
        })
        .await;
    }
    let condition = conflict_condition(&h).await.expect("condition");
    assert_eq!(condition["status"], "True");
    assert_eq!(condition["reason"], "FinalizerRemoved");
    assert!(
        condition["message"]
            .as_str()
            .is_some_and(|m| m.contains("use-caapf"))
    );
    eventually("four Warning Events", || async {
        (warnings(&h, "FinalizerRemoved").await == 4).then_some(())
    })
    .await;
    assert_eq!(metric(&h, "FinalizerRemoved").as_deref(), Some("4"));

    // Left off: another change of the Cluster is reconciled without putting it back.
    let before = h.reconciles("cluster");
    h.label_cluster(NS, "c1", json!({"env": "prod"})).await;
    h.wait_fleet_cluster("the import goes on", NS, "c1", |f| {
        f.labels().get("env").is_some_and(|v| v == "prod")
    })
    .await;
    h.wait_reconciled_since("label seen", "cluster", before)
        .await;
    let cluster = h.get::<CapiCluster>(NS, "c1").await.expect("cluster");
    assert!(!has_finalizer(&cluster), "left off");

    // The documented fix: Turtles told to leave it (use-caapf: true), the finalizer added back.
    let mut finalizers = cluster.finalizers().to_vec();
    finalizers.push(names::FINALIZER.into());
    h.merge_cluster(NS, "c1", json!({"metadata": {"finalizers": finalizers}}))
        .await;
    eventually("the condition goes", || async {
        conflict_condition(&h).await.is_none().then_some(())
    })
    .await;
}

/// A removal whose reconcile fails (the re-adding PATCH answered 503) is reported and counted
/// once, after the retry that succeeds: not counted without its Event, nor lost.
#[tokio::test]
async fn a_removal_whose_run_fails_is_reported_on_the_retry() {
    use kube_sandbox::{FaultConfig, FaultRule, FaultTarget};
    let h = imported().await;
    let mut rule = FaultRule::fail(FaultTarget::Writes, 1.0, 503).for_resource("clusters");
    rule.verbs = Some(vec!["PATCH".into()]);
    h.sandbox.set_faults(FaultConfig {
        rules: vec![rule],
        ..Default::default()
    });
    // Stripped with a PUT, which the fault leaves through.
    let api: kube::Api<CapiCluster> = kube::Api::namespaced(h.client.clone(), NS);
    let mut cluster = api.get("c1").await.expect("cluster");
    cluster.finalizers_mut().retain(|f| f != names::FINALIZER);
    api.replace("c1", &Default::default(), &cluster)
        .await
        .expect("strip");
    let failed = |r: &kube_sandbox::RequestRecord| {
        common::from_manager(r) && r.resource == "clusters" && r.verb.as_str() == "PATCH"
    };
    eventually("the re-add failed", || async {
        let count = h.sandbox.requests().count(|r| failed(r) && r.code == 503);
        (count > 0).then_some(())
    })
    .await;
    assert_eq!(metric(&h, "FinalizerRemoved"), None, "not counted yet");
    h.sandbox.set_faults(FaultConfig::default());
    h.wait_finalizer("put back on the retry", NS, "c1", true)
        .await;
    eventually("one Warning Event", || async {
        (warnings(&h, "FinalizerRemoved").await == 1).then_some(())
    })
    .await;
    assert_eq!(metric(&h, "FinalizerRemoved").as_deref(), Some("1"));
    let condition = conflict_condition(&h).await.expect("condition");
    let message = condition["message"].as_str().expect("message");
    assert!(message.contains("put back (1 of 3 times)"), "{message}");
}

/// The manager's writes of CAPI Clusters: (metadata patches, status writes).
fn cluster_writes(h: &Harness) -> (usize, usize) {
    let writes = |status: bool| {
        h.sandbox.requests().count(|r| {
            common::from_manager(r)
                && r.group == "cluster.x-k8s.io"
                && r.resource == "clusters"
                && r.verb.as_str() == "PATCH"
                && (r.subresource == "status") == status
        })
    };
    (writes(false), writes(true))
}

/// Plays a real Turtles with `use-caapf: false` (v0.27.0 `import_controller.go`
/// `reconcileExternalFleetManagement` runs on every reconcile of an imported Cluster): a
/// concurrent task strips our finalizer whenever a watch event shows it. It is put back
/// [`caapf::model::turtles::MAX_FINALIZER_READDS`] times, then reported and left: counted
/// requests, and none after the report (no add-remove loop).
#[tokio::test]
async fn turtles_stripping_on_every_event_gets_bounded_re_adds_then_nothing() {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let h = imported().await;
    let (patches, _) = cluster_writes(&h);
    let api: kube::Api<CapiCluster> = kube::Api::namespaced(h.client.clone(), NS);
    let strips = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let stripper = tokio::spawn({
        let (api, strips) = (api.clone(), strips.clone());
        async move {
            let config = watcher::Config::default().fields("metadata.name=c1");
            let mut events = watcher(api.clone(), config).applied_objects().boxed();
            while let Some(event) = events.next().await {
                let Ok(cluster) = event else { continue };
                if !has_finalizer(&cluster) {
                    continue;
                }
                let kept: Vec<&String> = (cluster.finalizers().iter())
                    .filter(|f| *f != names::FINALIZER)
                    .collect();
                let patch = json!({"metadata": {"finalizers": kept}});
                let patch = kube::api::Patch::Merge(patch);
                if api.patch("c1", &Default::default(), &patch).await.is_ok() {
                    strips.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            }
        }
    });
    let max = caapf::model::turtles::MAX_FINALIZER_READDS as usize;
    eventually("left off and reported", || async {
        let message = conflict_condition(&h).await?["message"]
            .as_str()?
            .to_string();
        message.contains("left off after 3 re-adds").then_some(())
    })
    .await;
    eventually("every removal reported", || async {
        (warnings(&h, "FinalizerRemoved").await == max + 1).then_some(())
    })
    .await;
    let reported = cluster_writes(&h);
    assert_eq!(reported.0 - patches, max, "re-adds");
    assert_eq!(strips.load(std::sync::atomic::Ordering::SeqCst), max + 1);
    assert_eq!(metric(&h, "FinalizerRemoved"), Some((max + 1).to_string()));

    // Then nothing: another change is reconciled without a write of the Cluster.
    let before = h.reconciles("cluster");
    h.label_cluster(NS, "c1", json!({"env": "prod"})).await;
    h.wait_reconciled_since("label seen", "cluster", before)
        .await;
    h.wait_fleet_cluster("the import goes on", NS, "c1", |f| {
        f.labels().get("env").is_some_and(|v| v == "prod")
    })
    .await;
    assert_eq!(cluster_writes(&h), reported, "no write after the report");
    assert_eq!(warnings(&h, "FinalizerRemoved").await, max + 1);
    stripper.abort();
}

/// A conflict whose Warning Event the API server refuses (503 on every Event write) is still
/// on the condition, but not counted: the counter counts the Events published.
#[tokio::test]
async fn a_conflict_whose_event_fails_is_not_counted() {
    use kube_sandbox::{FaultConfig, FaultRule, FaultTarget};
    let h = imported().await;
    let rule = FaultRule::fail(FaultTarget::Writes, 1.0, 503).for_resource("events");
    h.sandbox.set_faults(FaultConfig {
        rules: vec![rule],
        ..Default::default()
    });
    strip_like_turtles(&h).await;
    h.wait_finalizer("put back", NS, "c1", true).await;
    eventually("the Event refused", || async {
        let refused = h
            .sandbox
            .requests()
            .count(|r| common::from_manager(r) && r.resource == "events" && r.code == 503);
        (refused > 0).then_some(())
    })
    .await;
    // A later reconcile of the Cluster finished: the one that sent the Event did before.
    let before = h.reconciles("cluster");
    h.label_cluster(NS, "c1", json!({"env": "prod"})).await;
    h.wait_reconciled_since("label seen", "cluster", before)
        .await;
    let condition = conflict_condition(&h).await.expect("condition");
    let message = condition["message"].as_str().expect("message");
    assert!(message.contains("put back (1 of 3 times)"), "{message}");
    h.sandbox.set_faults(FaultConfig::default());
    assert_eq!(warnings(&h, "FinalizerRemoved").await, 0);
    assert_eq!(metric(&h, "FinalizerRemoved"), None, "not counted");
}

/// A sandbox serving what Rancher and Turtles add (`fixtures/turtles/crds.yaml`).
async fn under_rancher() -> Harness {
    let crds = include_str!("fixtures/turtles/crds.yaml");
    Harness::with_options(kube_sandbox::SandboxOptions {
        validate_custom_resources: true,
        extra_crds: kube_sandbox::crds_from_yaml(crds).expect("CRDs"),
        ..Default::default()
    })
    .await
}

/// Creates or replaces the Rancher cluster Turtles made for `capi/c1`
/// (`fixtures/turtles/rancher-cluster-v0.27.0.yaml`), its annotations changed by `annotations`.
async fn play_rancher_cluster(h: &Harness, annotations: Value) {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
    let gvk = GroupVersionKind::gvk("management.cattle.io", "v3", "Cluster");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "clusters");
    let api: kube::Api<DynamicObject> = kube::Api::all_with(h.client.clone(), &resource);
    let text = include_str!("fixtures/turtles/rancher-cluster-v0.27.0.yaml");
    let mut body: Value = serde_yaml::from_str(text).expect("fixture");
    for (key, value) in annotations.as_object().expect("annotations") {
        body["metadata"]["annotations"][key] = value.clone();
    }
    let params = PatchParams::apply("turtles-test").force();
    api.patch("c-m7kq2", &params, &Patch::Apply(body))
        .await
        .expect("Rancher cluster");
}

/// Turtles v0.27.0 with `use-caapf: false` imports `capi/c1` into Rancher: its Rancher cluster
/// without `provisioning.cattle.io/externally-managed` (so Rancher deploys its own Fleet agent,
/// rancher/rancher v2.15.0 `fleetcluster.go`), its finalizer on the CAPI Cluster and ours
/// stripped in the same reconcile. We leave the Cluster to Rancher at once (no re-add), report
/// it once, and no longer write the Fleet Cluster; with the gate turned on we take it back.
#[tokio::test]
async fn a_cluster_rancher_deploys_fleet_to_is_left_alone() {
    const EXTERNAL: &str = "provisioning.cattle.io/externally-managed";
    let mut h = under_rancher().await;
    h.namespace(NS, json!({})).await;
    h.initialized_cluster(NS, json!({"metadata": {"name": "c1", "labels": {AUTO.0: AUTO.1}},
        "spec": {"controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": "cp"}}}))
    .await;
    let config = turtles_fleet_addon_config();
    h.config(&serde_yaml::to_string(&config["spec"]).expect("spec"))
        .await;
    h.start().await;
    h.wait_finalizer("our finalizer", NS, "c1", true).await;
    let (patches, _) = cluster_writes(&h);

    play_rancher_cluster(&h, json!({EXTERNAL: null})).await;
    let turtles = caapf::model::turtles::TURTLES_IMPORT_FINALIZER;
    h.merge_cluster(NS, "c1", json!({"metadata": {"finalizers": [turtles]}}))
        .await;
    let condition = eventually("reported", || conflict_condition(&h)).await;
    assert_eq!(condition["reason"], "RancherFleetAgent");
    assert!(
        condition["message"]
            .as_str()
            .is_some_and(|m| m.contains("use-caapf"))
    );
    eventually("one Warning Event", || async {
        (warnings(&h, "RancherFleetAgent").await == 1).then_some(())
    })
    .await;
    assert_eq!(metric(&h, "RancherFleetAgent").as_deref(), Some("1"));

    let version = h
        .fleet_cluster(NS, "c1")
        .await
        .expect("fleet")
        .resource_version();
    let before = h.reconciles("cluster");
    h.label_cluster(NS, "c1", json!({"env": "prod"})).await;
    h.wait_reconciled_since("label seen", "cluster", before)
        .await;
    let fleet = h.fleet_cluster(NS, "c1").await.expect("kept");
    assert_eq!(fleet.resource_version(), version, "not written");
    let cluster = h.get::<CapiCluster>(NS, "c1").await.expect("cluster");
    assert!(!has_finalizer(&cluster), "never put back");
    assert_eq!(cluster_writes(&h).0, patches, "no finalizer patch");
    assert_eq!(warnings(&h, "RancherFleetAgent").await, 1, "reported once");

    // `use-caapf: true`: Turtles marks it externally managed (no workspace assigned yet); the
    // next change of the Cluster brings it back to this provider.
    play_rancher_cluster(&h, json!({EXTERNAL: "true"})).await;
    h.label_cluster(NS, "c1", json!({"env": "test"})).await;
    h.wait_finalizer("ours again", NS, "c1", true).await;
    eventually("the condition goes", || async {
        conflict_condition(&h).await.is_none().then_some(())
    })
    .await;
}

/// Turtles v0.27.0 `internal/controllers/helpers.go` `removeFleetNamespace` deletes
/// `fleet-addon-agent` on the workload cluster, not here: the provider cannot see it, so it
/// warns at start-up, from its configuration, while Turtles' CRDs are served. The `caapf`
/// binary runs as a process, its log read.
#[tokio::test]
async fn the_agent_namespace_turtles_deletes_is_warned_about_at_start_up() {
    use common::process::ManagerProcess;
    const WARNING: &str =
        "Rancher Turtles is installed and Fleet agents go to namespace fleet-addon-agent";
    const CHANGED: &str = "effective configuration changed";
    for (turtles, agent_namespace, warned) in [
        (true, None, true),
        (true, Some("cattle-fleet-system"), false),
        (false, None, false),
    ] {
        let h = if turtles {
            under_rancher().await
        } else {
            Harness::new().await
        };
        h.namespace("caapf-system", json!({})).await;
        let spec = match agent_namespace {
            Some(ns) => format!("cluster: {{agentNamespace: {ns}}}"),
            None => "cluster: {}".to_string(),
        };
        h.config(&spec).await;
        let dir = tempfile::tempdir().expect("tempdir");
        let kubeconfig = dir.path().join("kubeconfig");
        h.sandbox.write_kubeconfig(&kubeconfig).expect("kubeconfig");
        let manager = ManagerProcess::start(&kubeconfig, dir.path(), "caapf-turtles", 0, &[]);
        // The warning comes before the line that says the configuration was read.
        let log = eventually("configuration read", || async {
            let log = std::fs::read_to_string(&manager.log).unwrap_or_default();
            log.contains(CHANGED).then_some(log)
        })
        .await;
        assert_eq!(
            log.contains(WARNING),
            warned,
            "{turtles} {agent_namespace:?}: {log}"
        );
        manager.kill().await;
    }
}

/// The recipe of docs/installation.md "Under Rancher Turtles" against the release assets
/// `hack/release-manifests.sh` builds and Turtles' chart: self-contained (every object it names
/// is in it, none of them one the chart renders, and so deletes with `addonFleet.enabled:
/// false`), Turtles' FleetAddonConfig inside; the CAPIProvider fetches our components under a
/// name Rancher Prime's `addon-rancher-fleet` image override does not match and pins our image;
/// the release's ExtensionConfig names the recipe's namespace.
#[test]
fn the_turtles_recipe_matches_the_release_manifests() {
    use common::render::{documents, root};
    let out = tempfile::tempdir().expect("tempdir");
    let script = std::process::Command::new(root().join("hack/release-manifests.sh"))
        .args([
            "--out",
            out.path().to_str().expect("path"),
            "--tag",
            "v0.1.0",
        ])
        .output()
        .expect("release script runs");
    assert!(
        script.status.success(),
        "{}",
        String::from_utf8_lossy(&script.stderr)
    );
    let read = |file: &str| std::fs::read_to_string(out.path().join(file)).expect(file);
    let components = read("addon-components.yaml");

    let doc = std::fs::read_to_string(root().join("docs/installation.md")).expect("doc");
    let section = doc
        .split("## Under Rancher Turtles")
        .nth(1)
        .expect("section");
    let recipe = common::guide::documents(section);
    let find = |kind: &str, namespace: Option<&str>, name: &str| {
        recipe.iter().find(|o| {
            o["kind"] == kind
                && o["metadata"]["namespace"].as_str() == namespace
                && o["metadata"]["name"] == name
        })
    };
    let provider = (recipe.iter())
        .find(|o| o["kind"] == "CAPIProvider")
        .expect("the recipe's CAPIProvider");
    let spec = &provider["spec"];
    let namespace = provider["metadata"]["namespace"]
        .as_str()
        .expect("namespace");

    // Self-contained: each namespace, and the ConfigMap of `additionalManifests`, is in the recipe.
    for object in &recipe {
        if let Some(ns) = object["metadata"]["namespace"].as_str() {
            assert!(find("Namespace", None, ns).is_some(), "Namespace {ns}");
        }
    }
    let manifests = &spec["additionalManifests"];
    let map_name = manifests["name"]
        .as_str()
        .expect("additionalManifests.name");
    let map_namespace = manifests["namespace"].as_str().or(Some(namespace));
    let map = find("ConfigMap", map_namespace, map_name).expect("the recipe's ConfigMap");
    let text = map["data"]["manifests"].as_str().expect("manifests");
    let inside: Vec<Value> = serde_yaml::Deserializer::from_str(text)
        .map(|d| serde::Deserialize::deserialize(d).expect("YAML"))
        .collect();
    assert_eq!(
        inside,
        [turtles_fleet_addon_config()],
        "Turtles' FleetAddonConfig"
    );
    // None of them is an object Turtles' chart renders (and helm deletes), or in its namespace.
    let key = |o: &Value| {
        (
            o["kind"].clone(),
            o["metadata"]["namespace"].clone(),
            o["metadata"]["name"].clone(),
        )
    };
    for chart in turtles_chart_objects() {
        assert!(!recipe.iter().any(|o| key(o) == key(&chart)), "{chart}");
        if chart["kind"] == "Namespace" {
            let ns = &chart["metadata"]["name"];
            assert!(
                !recipe.iter().any(|o| &o["metadata"]["namespace"] == ns),
                "in {ns}"
            );
        }
    }

    assert_eq!(spec["type"], "addon");
    let name = spec["name"].as_str().expect("spec.name");
    assert_ne!(
        name, "rancher-fleet",
        "Prime's addon-rancher-fleet image override"
    );
    let label = format!("cluster.x-k8s.io/provider: addon-{name}");
    assert!(components.contains(&label), "the components carry {label}");
    // Prime's image overrides (keyed by manifest label, or `all`) miss ours: CAAPF_IMAGE would
    // not survive one, clusterctl substitutes variables before it applies the overrides.
    let images: serde_json::Map<String, Value> = serde_yaml::from_str(include_str!(
        "fixtures/turtles/config-prime-images-v0.27.0.yaml"
    ))
    .expect("images");
    assert!(images.contains_key("addon-rancher-fleet"), "the fixture");
    for key in [format!("addon-{name}"), "all".into()] {
        assert!(!images.contains_key(&key), "Prime overrides {key}");
    }
    // clusterctl's GitHub form (cluster-api v1.13.3 repository_github.go NewGitHubRepository):
    // https://github.com/<owner>/<repo>/releases/<version or latest>/<file>.
    let version = spec["version"].as_str().expect("version");
    let url = spec["fetchConfig"]["url"]
        .as_str()
        .expect("fetchConfig.url");
    let path = url.strip_prefix("https://github.com/").unwrap_or_default();
    let segments: Vec<&str> = path.split('/').collect();
    assert!(
        matches!(segments[..], [_, _, "releases", v, "addon-components.yaml"] if v == version || v == "latest"),
        "{url}"
    );
    for (variable, value) in spec["variables"].as_object().expect("variables") {
        let default = format!("${{{variable}:={}}}", value.as_str().expect("string"));
        assert!(
            components.contains(&default),
            "{default} in addon-components.yaml"
        );
    }

    // The release's ExtensionConfig, unchanged, points at the recipe's namespace.
    let objects = documents(&read("runtime-extension.yaml"));
    let config = objects
        .iter()
        .find(|o| o["kind"] == "ExtensionConfig")
        .expect("ExtensionConfig");
    let service = &config["spec"]["clientConfig"]["service"];
    assert_eq!(service["namespace"], namespace);
    let service_name = service["name"].as_str().expect("service name");
    assert!(
        components.contains(&format!("name: {service_name}")),
        "{service_name} is ours"
    );
    let inject =
        config["metadata"]["annotations"]["runtime.cluster.x-k8s.io/inject-ca-from-secret"]
            .as_str()
            .expect("CA injection");
    assert!(inject.starts_with(&format!("{namespace}/")), "{inject}");
    let binding = objects
        .iter()
        .find(|o| o["kind"] == "ClusterRoleBinding")
        .expect("binding");
    assert_eq!(binding["subjects"][0]["namespace"], namespace);
}
