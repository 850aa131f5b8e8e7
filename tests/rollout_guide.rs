//! docs/rollout.md: every YAML document in it is applied to the sandbox (server-side, as
//! `kubectl apply --server-side` does), in order, and 12 Clusters of its ClusterClass are made
//! from its Cluster documents, four per wave. Then the test plays Fleet for the guide's HelmOp
//! (`common::fleet_walk`: the pinned partition walk with the guide's `rolloutStrategy` over the
//! labels the manager writes, the agents, the Fleet Clusters' summaries) through four versions:
//! canary first, the soak honoured, a failing canary stopping the later waves, the halts of the
//! guide (HelmOp `spec.paused`, Fleet Cluster `spec.paused`, the manual hold) and their
//! resumption, an upgrade held in its wave, and the release annotation.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::common;

use caapf::api::{CapiCluster, RolloutConfig};
use caapf::hooks::handlers;
use caapf::hooks::types::Hook;
use caapf::model::rollout::walk::Strategy;
use caapf::model::rollout::{Rollout, rollout_strategy};
use caapf::names;
use common::fleet_walk::{self, Fleet};
use common::guide::{apply, documents};
use common::{Harness, eventually};
use fleet_api_rs::fleet_clustergroup::ClusterGroup;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::core::{GroupVersionKind, Selector, SelectorExt};
use serde_json::{Value, json};

const NS: &str = "clusters";
const WAVES: [&str; 3] = ["canary", "early", "rest"];
const SOAK: Duration = Duration::from_secs(2);

fn guide() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/rollout.md");
    std::fs::read_to_string(path).expect("docs/rollout.md")
}

/// The first ```text block after `marker`.
fn text_block_after(text: &str, marker: &str) -> String {
    let rest = &text[text.find(marker).expect("marker")..];
    let start = rest.find("```text\n").expect("a text block") + "```text\n".len();
    let end = rest[start..].find("```").expect("block end");
    rest[start..start + end].to_string()
}

/// The wave of a test Cluster, by its name.
fn wave_of(name: &str) -> &str {
    name.split('-').next().unwrap_or_default()
}

/// Waits until every cluster's hold label is `want(name)`.
async fn wait_holds(
    h: &Harness,
    what: &str,
    names: &[String],
    want: impl Fn(&str) -> Option<&'static str>,
) {
    let deadline = Instant::now() + common::TIMEOUT;
    loop {
        let mut seen = Vec::new();
        for name in names {
            let live = h.fleet_cluster(NS, name).await.expect("Fleet Cluster");
            let labels = live.metadata.labels.unwrap_or_default();
            seen.push(labels.get(names::ROLLOUT_HOLD_LABEL).cloned());
        }
        let wanted: Vec<Option<String>> =
            names.iter().map(|n| want(n).map(str::to_string)).collect();
        if seen == wanted {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for: {what}: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Waits until the `FleetRolloutHeld` condition of `name` has `reason` and a message
/// containing `message` (`""`: no message); returns the message.
async fn wait_held(h: &Harness, name: &str, reason: &str, message: &str) -> String {
    wait_condition(h, name, names::ROLLOUT_HELD_CONDITION, reason, message).await
}

async fn wait_condition(
    h: &Harness,
    name: &str,
    type_: &str,
    reason: &str,
    message: &str,
) -> String {
    eventually(&format!("{name}: {type_} {reason} {message:?}"), || async {
        let cluster: CapiCluster = h.get(NS, name).await?;
        let conditions = cluster.body.to_map()["status"]["conditions"].clone();
        let found = conditions
            .as_array()?
            .iter()
            .find(|c| c["type"] == type_)?
            .clone();
        let text = found["message"].as_str().unwrap_or_default().to_string();
        let matches = if message.is_empty() {
            text.is_empty()
        } else {
            text.contains(message)
        };
        (found["reason"] == reason && matches).then_some(text)
    })
    .await
}

async fn merge(h: &Harness, resource: &ApiResource, name: &str, patch: Value) {
    let api: Api<DynamicObject> = if resource.kind == "FleetAddonConfig" {
        Api::all_with(h.client.clone(), resource)
    } else {
        Api::namespaced_with(h.client.clone(), NS, resource)
    };
    api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap_or_else(|e| panic!("patch {} {name}: {e}", resource.kind));
}

fn resource(kind: &str) -> ApiResource {
    let (group, version, kind, plural) = match kind {
        "FleetCluster" => ("fleet.cattle.io", "v1alpha1", "Cluster", "clusters"),
        "FleetAddonConfig" => (
            "addons.cluster.x-k8s.io",
            "v1alpha1",
            kind,
            "fleetaddonconfigs",
        ),
        "ClusterClass" => ("cluster.x-k8s.io", "v1beta2", kind, "clusterclasses"),
        _ => ("cluster.x-k8s.io", "v1beta2", kind, "clusters"),
    };
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// Waits until `status.rollout` counts every wave ready, none held: the waves settled.
async fn wait_settled(h: &Harness) {
    eventually("status.rollout: every wave ready, none held", || async {
        let rollout = h.addon_config().await?.status?.rollout?;
        let waves = rollout.waves.iter();
        let counts: Vec<_> = waves
            .map(|w| (w.name.as_str(), w.clusters, w.held, w.ready))
            .collect();
        (counts == WAVES.map(|w| (w, 4, 0, 4))).then_some(())
    })
    .await;
}

/// Calls an upgrade hook for `name` through the manager's hooks, as Cluster API v1.12 sends it
/// (a v1beta1 Cluster without status).
async fn upgrade_hook(h: &Harness, name: &str, hook: Hook, versions: Value) {
    let live: CapiCluster = h.get(NS, name).await.expect("cluster");
    let mut metadata = serde_json::to_value(&live.metadata).expect("metadata");
    if let Some(meta) = metadata.as_object_mut() {
        meta.remove("managedFields");
    }
    let mut body = json!({
        "kind": hook.request_kind(),
        "apiVersion": "hooks.runtime.cluster.x-k8s.io/v1alpha1",
        "settings": {},
        "cluster": {"metadata": metadata, "spec": {"topology": {"class": "quick-start",
            "version": live.body.to_map()["spec"]["topology"]["version"]}}, "status": {}},
    });
    for (key, value) in versions.as_object().expect("versions") {
        body[key] = value.clone();
    }
    let ctx = h.manager.as_ref().expect("manager").hooks.clone();
    let bytes = serde_json::to_vec(&body).expect("json");
    let response = handlers::handle(&ctx, hook, &bytes).await;
    assert!(response.message.contains("not waiting"), "{response:?}");
}

#[tokio::test]
async fn the_guide_rolls_a_helmop_out_in_three_waves() {
    let text = guide();
    let documents = documents(&text);
    let kinds: Vec<&str> = documents
        .iter()
        .filter_map(|d| d["kind"].as_str())
        .collect();
    let cluster = "Cluster";
    let applied = [
        "FleetAddonConfig",
        "Namespace",
        "ClusterClass",
        "HelmOp",
        cluster,
        cluster,
    ];
    assert_eq!(kinds, applied);

    // The printed strategy is the one `caapf rollout-strategy` prints for the guide's
    // FleetAddonConfig, and the HelmOp carries it.
    let config = &documents[0]["spec"]["cluster"]["rollout"];
    let config: RolloutConfig = serde_json::from_value(config.clone()).expect("rollout");
    let printed = rollout_strategy(&Rollout::compile(&config).expect("waves"));
    assert_eq!(
        text_block_after(&text, "caapf rollout-strategy` reads"),
        printed
    );
    let printed: Value = serde_yaml::from_str(&printed).expect("printed YAML");
    let strategy = &documents[3]["spec"]["rolloutStrategy"];
    assert_eq!(strategy, &printed["rolloutStrategy"]);
    let strategy = Strategy::from_json(strategy).expect("rolloutStrategy");

    let mut h = Harness::new().await;
    h.start().await;
    // Cluster API's defaulting webhook: a Cluster naming no wave gets the class's default.
    let variable = &documents[2]["spec"]["variables"][0];
    let default = &variable["schema"]["openAPIV3Schema"]["default"];
    let named = |wave: &Value| json!([{"name": variable["name"], "value": wave}]);
    let mut names = Vec::new();
    for document in &documents {
        if document["kind"] != cluster {
            apply(&h, document).await;
            continue;
        }
        // canary-1 makes canary-1…4; rest-1 makes early-1…4 (naming early) and rest-1…4.
        let first = document["metadata"]["name"].as_str().expect("name");
        let waves = if first == "canary-1" {
            &WAVES[..1]
        } else {
            &WAVES[1..]
        };
        for (wave, i) in waves.iter().flat_map(|w| (1..=4).map(move |i| (*w, i))) {
            let mut cluster = document.clone();
            let variables = &mut cluster["spec"]["topology"]["variables"];
            if wave == "early" {
                *variables = named(&json!("early"));
            } else if variables.is_null() {
                *variables = named(default);
            }
            let name = format!("{wave}-{i}");
            cluster["metadata"]["name"] = json!(name);
            apply(&h, &cluster).await;
            h.initialize(NS, &name).await;
            names.push(name);
        }
    }
    // The test's soak is short; the guide's comes back for the last rollout.
    let soak = |soak: &str| json!({"spec": {"cluster": {"rollout": {"soak": soak}}}});
    merge(
        &h,
        &resource("FleetAddonConfig"),
        "fleet-addon-config",
        soak("2s"),
    )
    .await;

    // Each Fleet Cluster carries its wave, nothing is held, and the class's group selects all.
    let group: ClusterGroup = eventually("the class's ClusterGroup", || async {
        h.get(NS, "quick-start").await
    })
    .await;
    let selector = serde_json::to_value(&group.spec.selector).expect("json");
    let selector: LabelSelector = serde_json::from_value(selector).expect("selector");
    let selector = Selector::try_from(selector).expect("selector");
    eventually("12 Fleet Clusters in their waves, in the group", || async {
        for name in &names {
            let labels = h.fleet_cluster(NS, name).await?.metadata.labels?;
            let wave = labels.get(names::ROLLOUT_WAVE_LABEL).map(String::as_str);
            (wave == Some(wave_of(name)) && selector.matches(&labels)).then_some(())?;
        }
        Some(())
    })
    .await;
    let helmop = documents[3]["metadata"]["name"].as_str().expect("name");
    let mut fleet = Fleet::new(&h, (NS, helmop), strategy, names.clone(), "3.12.1").await;
    wait_holds(&h, "nothing held", &names, |_| None).await;
    let later = |n: &str| (wave_of(n) != "canary").then_some("Soaking");

    // 3.12.2: the canaries first, one at a time; the later waves are held while they roll.
    fleet.id = "3.12.2".into();
    fleet.pass(&h).await;
    assert_eq!(fleet.promoted(), BTreeSet::from(["canary-1".to_string()]));
    wait_holds(
        &h,
        "later waves held while the canaries roll",
        &names,
        later,
    )
    .await;
    for (name, reason, message) in [
        (
            "early-1",
            "Soaking",
            "wave early waits for canary: it is rolling out",
        ),
        (
            "rest-1",
            "Soaking",
            "wave rest waits for canary: it is rolling out",
        ),
        ("canary-1", "NotHeld", ""),
    ] {
        wait_held(&h, name, reason, message).await;
    }
    let canaries = |f: &Fleet| f.waves_updated(&["canary"]);
    fleet
        .play_until(&h, "canaries updated", &["canary"], canaries)
        .await;
    // The soak (its message is checked with the guide's soak, below): early waits for it,
    // then goes; rest waits for early, then for its soak.
    let ready = Instant::now();
    let released = |wave: &'static str| {
        move |f: &Fleet| {
            f.names
                .iter()
                .filter(|n| wave_of(n) == wave)
                .all(|n| f.hold(n).is_none())
        }
    };
    let early = ["canary", "early"];
    fleet
        .play_until(&h, "early released", &early, released("early"))
        .await;
    assert!(
        ready.elapsed() >= SOAK,
        "released after {:?}",
        ready.elapsed()
    );
    wait_held(&h, "rest-1", "Soaking", "wave rest waits for early").await;
    let first_two = |f: &Fleet| f.waves_updated(&early);
    fleet
        .play_until(&h, "early updated", &early, first_two)
        .await;
    let ready = Instant::now();
    fleet
        .play_until(&h, "rest released", &WAVES, released("rest"))
        .await;
    assert!(
        ready.elapsed() >= SOAK,
        "released after {:?}",
        ready.elapsed()
    );
    let all = |f: &Fleet| f.waves_updated(&WAVES) && f.names.iter().all(|n| f.hold(n).is_none());
    fleet
        .play_until(&h, "everything updated", &WAVES, all)
        .await;

    // 3.12.3 fails on canary-2: the later waves are held, Fleet stops in the canary partition.
    fleet.id = "3.12.3".into();
    fleet.fails.insert("canary-2".into());
    fleet.pass(&h).await;
    wait_holds(
        &h,
        "later waves held while the canaries roll",
        &names,
        later,
    )
    .await;
    let failed = |f: &Fleet| {
        let d = f.deployment("canary-2");
        d.applied == f.id && !d.ready
    };
    fleet
        .play_until(&h, "canary-2 fails", &["canary"], failed)
        .await;
    let failing = |n: &str| (wave_of(n) != "canary").then_some("WaveFailing");
    wait_holds(
        &h,
        "a failing canary holds the later waves",
        &names,
        failing,
    )
    .await;
    let why = "wave rest waits for canary: at least 1 of its clusters have failing bundles";
    wait_held(&h, "rest-4", "WaveFailing", why).await;
    fleet.stays(&h, "Fleet stops at the failing canary").await;

    // Halt: the HelmOp paused, early-2 held by hand, rest-1's Fleet Cluster paused.
    let (helmops, capi) = (fleet_walk::helmops(), resource("Cluster"));
    let paused = |paused: bool| json!({"spec": {"paused": paused}});
    merge(&h, &helmops, helmop, paused(true)).await;
    fleet.fails.clear();
    fleet
        .stays(&h, "nothing moves while the HelmOp is paused")
        .await;
    let hold =
        |why: Value| json!({"metadata": {"annotations": {names::ROLLOUT_HOLD_ANNOTATION: why}}});
    merge(&h, &capi, "early-2", hold(json!("change window closed"))).await;
    let why = "held by annotation fleet.addons.cluster.x-k8s.io/rollout-hold: change window closed";
    wait_held(&h, "early-2", "Manual", why).await;
    let fleet_clusters = resource("FleetCluster");
    merge(&h, &fleet_clusters, "rest-1", paused(true)).await;
    merge(&h, &helmops, helmop, paused(false)).await;
    fleet
        .play_until(&h, "canaries updated", &["canary"], canaries)
        .await;
    let others = |f: &Fleet| {
        ["early-1", "early-3", "early-4"]
            .iter()
            .all(|n| f.updated(n))
    };
    fleet
        .play_until(&h, "early updated but early-2", &early, others)
        .await;
    assert_eq!(fleet.hold("early-2"), Some("Manual"));
    wait_held(
        &h,
        "rest-2",
        "Soaking",
        "wave rest waits for early: it is rolling out",
    )
    .await;
    fleet.stays(&h, "early-2 and rest wait").await;
    assert_eq!(fleet.deployment("early-2").applied, "3.12.2");
    merge(&h, &capi, "early-2", hold(Value::Null)).await;
    let but_rest_1 = |f: &Fleet| {
        let mut others = f.names.iter().filter(|n| *n != "rest-1");
        others.all(|n| f.updated(n)) && f.names.iter().all(|n| f.hold(n).is_none())
    };
    fleet
        .play_until(&h, "all updated but the paused rest-1", &WAVES, but_rest_1)
        .await;
    fleet.stays(&h, "rest-1 stays paused").await;
    assert_eq!(fleet.deployment("rest-1").applied, "3.12.2");
    let live = h.fleet_cluster(NS, "rest-1").await.expect("rest-1");
    assert_eq!(
        live.spec.paused,
        Some(true),
        "the provider leaves spec.paused alone"
    );
    merge(&h, &fleet_clusters, "rest-1", paused(false)).await;
    fleet
        .play_until(&h, "everything updated", &WAVES, all)
        .await;

    // 3.12.4 with the guide's soak, while early-3 upgrades Kubernetes: the soak is ended by the
    // release annotation; early-3 waits for its upgrade.
    let guide_soak = config.soak.as_deref().expect("the guide's soak");
    merge(
        &h,
        &resource("FleetAddonConfig"),
        "fleet-addon-config",
        soak(guide_soak),
    )
    .await;
    let version = json!({"spec": {"topology": {"version": "v1.35.0"}}});
    merge(&h, &capi, "early-3", version).await;
    let bcu = json!({"fromKubernetesVersion": "v1.34.1", "toKubernetesVersion": "v1.35.0"});
    upgrade_hook(&h, "early-3", Hook::BeforeClusterUpgrade, bcu).await;
    wait_held(
        &h,
        "early-3",
        "Upgrading",
        "a Kubernetes upgrade is under way",
    )
    .await;
    fleet.id = "3.12.4".into();
    fleet.pass(&h).await;
    let holds = |n: &str| {
        if n == "early-3" {
            Some("Upgrading")
        } else {
            later(n)
        }
    };
    wait_holds(&h, "later waves held, early-3 upgrading", &names, holds).await;
    fleet
        .play_until(&h, "canaries updated", &["canary"], canaries)
        .await;
    let why = "wave early waits for canary: soaking until";
    let message = wait_held(&h, "early-1", "Soaking", why).await;
    let until: Timestamp = message
        .rsplit(' ')
        .next()
        .and_then(|t| t.parse().ok())
        .expect("a time");
    let left = until.duration_since(Timestamp::now());
    assert!(left.as_secs() > 29 * 60, "soak {guide_soak}: {message}");
    fleet.stays(&h, "early soaks").await;
    // Staged, not promoted: Fleet's OutOfSync does not make the Cluster unready.
    assert_eq!(fleet.deployment("early-1").staged, fleet.id);
    wait_condition(&h, "early-1", "FleetReady", "UpdatePending", "").await;
    let class = resource("ClusterClass");
    let release =
        |v: Value| json!({"metadata": {"annotations": {names::ROLLOUT_RELEASE_ANNOTATION: v}}});
    merge(&h, &class, "quick-start", release(json!("true"))).await;
    let others = |f: &Fleet| {
        ["early-1", "early-2", "early-4"]
            .iter()
            .all(|n| f.updated(n))
    };
    fleet
        .play_until(
            &h,
            "early updated but the upgrading early-3",
            &early,
            others,
        )
        .await;
    assert_eq!(fleet.hold("early-3"), Some("Upgrading"));
    assert_eq!(fleet.deployment("early-3").applied, "3.12.3");
    let acu = json!({"kubernetesVersion": "v1.35.0"});
    upgrade_hook(&h, "early-3", Hook::AfterClusterUpgrade, acu).await;
    fleet
        .play_until(&h, "everything updated", &WAVES, all)
        .await;
    // A manual hold on the ClusterClass holds all its Clusters; removing it resumes. (Once the
    // waves settled: their last change reconciles every Cluster of the class anyway.)
    wait_settled(&h).await;
    merge(&h, &class, "quick-start", hold(json!("freeze"))).await;
    wait_holds(&h, "the class held by hand", &names, |_| Some("Manual")).await;
    fleet.id = "3.12.5".into();
    fleet.stays(&h, "nothing moves in a held class").await;
    assert!(fleet.promoted().is_empty());
    merge(&h, &class, "quick-start", hold(Value::Null)).await;
    fleet
        .play_until(&h, "everything updated", &WAVES, all)
        .await;
    merge(&h, &class, "quick-start", release(Value::Null)).await;
    wait_held(&h, "early-3", "NotHeld", "").await;

    // status.rollout counts the waves, none held after the release was removed.
    wait_settled(&h).await;
    // Holds and releases are Events on the Cluster, the hold their action: kube-runtime's
    // Recorder makes one Event per reason, action and Cluster, its first note, counting the
    // repeats as a series; each hold early-3 went through shows its own note.
    let held = ["Soaking", "WaveFailing", "Upgrading", "Manual"];
    eventually("an Event per hold and release on early-3", || async {
        let events: Vec<Event> = h.list(NS).await;
        let on_early_3 =
            |e: &&Event| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("early-3");
        let notes: BTreeSet<(String, String)> = (events.iter().filter(on_early_3))
            .filter_map(|e| {
                let (action, note) = (e.action.clone()?, e.note.as_deref()?);
                match e.reason.as_deref()? {
                    "RolloutHeld" => note.starts_with(&format!("{action}: ")),
                    "RolloutReleased" => note.starts_with(&format!("the {action} hold ended")),
                    _ => false,
                }
                .then(|| (e.reason.clone().unwrap_or_default(), action))
            })
            .collect();
        let has = |reason: &str, action: &str| notes.contains(&(reason.into(), action.into()));
        (held.iter().all(|a| has("RolloutHeld", a))
            && ["Upgrading", "Manual"]
                .iter()
                .all(|a| has("RolloutReleased", a)))
        .then_some(())
    })
    .await;
    h.stop().await;
}
