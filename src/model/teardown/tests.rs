//! Table tests of the teardown decisions, on the objects of `tests/fixtures/teardown/` (as
//! Fleet, Cluster API and Kubernetes write them).

use std::collections::BTreeSet;
use std::time::Duration;

use fleet_api_rs::fleet_cluster::Cluster as FleetCluster;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::*;
use crate::api::FleetAddonConfigSpec;
use crate::model::capi::{ClusterView, StringMap};
use crate::model::config::EffectiveConfig;
use crate::model::config::{ClusterImport, TeardownSettings};
use crate::names;

fn fixture(name: &str) -> Value {
    let path = format!(
        "{}/tests/fixtures/teardown/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).expect("fixture");
    serde_yaml::from_str(&text).expect("fixture YAML")
}

fn fleet_cluster() -> FleetCluster {
    serde_json::from_value(fixture("fleet-cluster.yaml")).expect("Fleet Cluster")
}

fn at(text: &str) -> Timestamp {
    text.parse().expect("time")
}

fn annotations(pairs: &[(&str, &str)]) -> StringMap {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn settings(on: bool, minutes: u64) -> TeardownSettings {
    TeardownSettings {
        remove_workloads: on,
        timeout: Duration::from_secs(minutes * 60),
    }
}

/// The CAPI Cluster of the fixture's Fleet Cluster: its labels and class.
fn capi_cluster(extra_labels: &[(&str, &str)]) -> ClusterView {
    let mut labels = json!({"env": "prod", "ingress": "nginx"});
    for (k, v) in extra_labels {
        labels[*k] = json!(v);
    }
    ClusterView::from_json(&json!({
        "metadata": {"name": "c1", "namespace": "clusters", "uid": "5c0b5a54-2f5e-4b4b-8f0d-3c0c9d4f0a11",
            "labels": labels, "deletionTimestamp": "2026-11-23T10:20:00Z"},
        "spec": {"topology": {"classRef": {"name": "quick-start"}, "version": "v1.33.1"}}
    }))
    .expect("view")
}

fn import() -> ClusterImport {
    let spec: FleetAddonConfigSpec =
        serde_yaml::from_str("cluster: {setOwnerReferences: true}").expect("spec");
    EffectiveConfig::from_spec(&spec)
        .cluster
        .expect("import enabled")
}

#[test]
fn the_mode_follows_the_configuration_the_annotations_and_the_deadline() {
    const REMOVE: &str = names::REMOVE_WORKLOADS_ANNOTATION;
    const SKIP: &str = names::SKIP_WORKLOAD_REMOVAL_ANNOTATION;
    let deleted = Some(at("2026-11-23T10:00:00Z"));
    let now = at("2026-11-23T10:10:00Z");
    let on = settings(true, 30);
    let off = settings(false, 30);
    let short = settings(true, 5);
    let deadline = at("2026-11-23T10:30:00Z");
    struct Row {
        name: &'static str,
        annotations: StringMap,
        deleted: Option<Timestamp>,
        settings: Option<TeardownSettings>,
        mode: Mode,
        problems: usize,
    }
    let row = |name, annotations, settings: Option<&TeardownSettings>, mode, problems| Row {
        name,
        annotations,
        deleted,
        settings: settings.cloned(),
        mode,
        problems,
    };
    let rows = vec![
        row("off by default", annotations(&[]), Some(&off), Mode::Off, 0),
        row(
            "on: until deletionTimestamp + timeout",
            annotations(&[]),
            Some(&on),
            Mode::On { deadline },
            0,
        ),
        row(
            "the Cluster opts in",
            annotations(&[(REMOVE, "true")]),
            Some(&off),
            Mode::On { deadline },
            0,
        ),
        row(
            "the Cluster opts out",
            annotations(&[(REMOVE, "false")]),
            Some(&on),
            Mode::Off,
            0,
        ),
        row(
            "an invalid opt-in is reported and ignored",
            annotations(&[(REMOVE, "yes")]),
            Some(&off),
            Mode::Off,
            1,
        ),
        row(
            "skipped",
            annotations(&[(SKIP, "true")]),
            Some(&on),
            Mode::Skipped,
            0,
        ),
        row(
            "a skip of a Cluster that is not torn down is off",
            annotations(&[(SKIP, "true")]),
            Some(&off),
            Mode::Off,
            0,
        ),
        row(
            "skip false is no skip",
            annotations(&[(SKIP, "false")]),
            Some(&on),
            Mode::On { deadline },
            0,
        ),
        row(
            "an invalid skip is reported and ignored",
            annotations(&[(SKIP, "please")]),
            Some(&on),
            Mode::On { deadline },
            1,
        ),
        row(
            "past the deadline",
            annotations(&[]),
            Some(&short),
            Mode::Expired {
                deadline: at("2026-11-23T10:05:00Z"),
            },
            0,
        ),
        row(
            "configuration not read yet",
            annotations(&[]),
            None,
            Mode::Unknown,
            0,
        ),
        row(
            "configuration not read yet, the Cluster opts out",
            annotations(&[(REMOVE, "false")]),
            None,
            Mode::Off,
            0,
        ),
        row(
            "configuration not read yet, the Cluster opts in: the default timeout",
            annotations(&[(REMOVE, "true")]),
            None,
            Mode::On { deadline },
            0,
        ),
        row(
            "configuration not read yet, skipped",
            annotations(&[(SKIP, "true")]),
            None,
            Mode::Skipped,
            0,
        ),
        Row {
            deleted: None,
            ..row(
                "not being deleted",
                annotations(&[]),
                Some(&on),
                Mode::NotDeleting,
                0,
            )
        },
    ];
    for row in rows {
        let decided = mode(&row.annotations, row.deleted, row.settings.as_ref(), now);
        assert_eq!(decided.mode, row.mode, "{}", row.name);
        assert_eq!(
            decided.problems.len(),
            row.problems,
            "{}: {:?}",
            row.name,
            decided.problems
        );
        for problem in &decided.problems {
            assert!(
                problem.starts_with("annotation fleet.addons.cluster.x-k8s.io/"),
                "{problem}"
            );
        }
    }
    // The deadline is exact: on at one second before, expired at it.
    let at_deadline = mode(&annotations(&[]), deleted, Some(&on), deadline);
    assert_eq!(at_deadline.mode, Mode::Expired { deadline });
    let before = mode(
        &annotations(&[]),
        deleted,
        Some(&on),
        at("2026-11-23T10:29:59Z"),
    );
    assert_eq!(before.mode, Mode::On { deadline });
}

#[test]
fn a_registered_fleet_cluster_is_one_whose_agent_checked_in() {
    let mut fleet = fleet_cluster();
    assert!(is_registered(&fleet));
    if let Some(agent) = fleet.status.as_mut().and_then(|s| s.agent.as_mut()) {
        agent.last_seen = None;
    }
    assert!(!is_registered(&fleet));
    fleet.status = None;
    assert!(!is_registered(&fleet));
}

/// The drain removes what the import put (the Cluster's and the class labels) and what our
/// field manager owns, and keeps Fleet's and Rancher's labels and those others added.
#[test]
fn the_drain_removes_the_labels_bundles_select_the_cluster_by() {
    let live = fleet_cluster();
    let labels = labels_of(&live);
    let keys = selection_label_keys(&capi_cluster(&[]), Some(&import()), &live);
    let want: BTreeSet<String> = [
        // Turtles' class labels, written beside ours (removed only where present).
        "cluster-api.cattle.io/clusterclass-name",
        "cluster-api.cattle.io/clusterclass-namespace",
        "clusterclass-name.fleet.addons.cluster.x-k8s.io",
        "clusterclass-namespace.fleet.addons.cluster.x-k8s.io",
        "env",
        "ingress",
    ]
    .map(String::from)
    .into();
    assert_eq!(keys, want);
    assert!(!started(&labels));
    assert!(!is_drained(&keys, &labels));
    let patch = drain_patch(&keys, &labels).expect("labels to remove");
    assert_eq!(
        patch,
        json!({"metadata": {"labels": {
            "clusterclass-name.fleet.addons.cluster.x-k8s.io": null,
            "clusterclass-namespace.fleet.addons.cluster.x-k8s.io": null,
            "env": null, "ingress": null,
        }}})
    );

    // Started (the hook's label) and drained (the patch applied): nothing more to remove.
    let mut drained = labels.clone();
    drained.insert(names::TEARDOWN_LABEL.into(), "true".into());
    assert!(!is_drained(&keys, &drained), "started, not drained yet");
    drained.retain(|k, _| !keys.contains(k));
    assert!(started(&drained));
    assert!(is_drained(&keys, &drained));
    assert_eq!(drain_patch(&keys, &drained), None);
    assert_eq!(
        drained.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            names::TEARDOWN_LABEL,
            "management.cattle.io/cluster-display-name",
            "owner"
        ]
    );

    // A label the Cluster lost during its deletion is still ours (owned): removed too. A label
    // the Cluster gained is removed even before the import applied it.
    let renamed = ClusterView {
        labels: [("env".to_string(), "prod".to_string())].into(),
        ..capi_cluster(&[("tier", "gold")])
    };
    let keys = selection_label_keys(&renamed, Some(&import()), &live);
    assert!(keys.contains("ingress") && keys.contains("env"));
    // The version labels stay: they say what the cluster runs, and a bundle kept through the
    // teardown may choose its chart by them.
    let versioned = capi_cluster(&[
        (names::CONTROL_PLANE_MINOR_LABEL, "1.33"),
        (names::WORKERS_MINOR_LABEL, "1.33"),
        (names::UPGRADE_TARGET_MINOR_LABEL, "1.34"),
    ]);
    let keys = selection_label_keys(&versioned, Some(&import()), &live);
    for label in [
        names::CONTROL_PLANE_MINOR_LABEL,
        names::WORKERS_MINOR_LABEL,
        names::UPGRADE_TARGET_MINOR_LABEL,
    ] {
        assert!(!keys.contains(label), "{label}");
    }
    // Fleet's own labels are never removed, even when the Cluster carries them.
    let fleet_own = capi_cluster(&[("fleet.cattle.io/non-managed-agent", "true")]);
    let keys = selection_label_keys(&fleet_own, Some(&import()), &live);
    assert!(!keys.contains("fleet.cattle.io/non-managed-agent"));
    // Import disabled meanwhile: the Cluster's labels and its class labels.
    let mut unowned = live.clone();
    unowned.metadata.managed_fields = None;
    let keys = selection_label_keys(&capi_cluster(&[]), None, &unowned);
    assert_eq!(keys, want);
}

#[test]
fn the_removal_marks_survive_on_the_fleet_cluster() {
    let mut fleet = fleet_cluster();
    assert_eq!(bundles_at_start(&fleet), None);
    assert_eq!(bundles_gone_since(&fleet), None);
    let start = start_patch(3);
    assert_eq!(
        start,
        json!({"metadata": {
            "labels": {"fleet.addons.cluster.x-k8s.io/teardown": "true"},
            "annotations": {"fleet.addons.cluster.x-k8s.io/teardown-bundles": "3"},
        }})
    );
    let gone = at("2026-11-23T10:21:05Z");
    let recorded = bundles_gone_patch(Some(gone));
    assert_eq!(
        recorded,
        json!({"metadata": {"annotations": {
            "fleet.addons.cluster.x-k8s.io/teardown-bundles-gone": "2026-11-23T10:21:05Z"
        }}})
    );
    let annotations = fleet.metadata.annotations.get_or_insert_default();
    for patch in [&start, &recorded] {
        for (k, v) in patch["metadata"]["annotations"]
            .as_object()
            .expect("annotations")
        {
            annotations.insert(k.clone(), v.as_str().expect("string").to_string());
        }
    }
    assert_eq!(bundles_at_start(&fleet), Some(3));
    assert_eq!(bundles_gone_since(&fleet), Some(gone));
    assert_eq!(
        bundles_gone_patch(None),
        json!({"metadata": {"annotations": {"fleet.addons.cluster.x-k8s.io/teardown-bundles-gone": null}}})
    );
}

#[test]
fn the_agent_s_bundle_is_never_waited_for_and_kept_bundles_are_told_apart() {
    let deployments = fixture("bundledeployments.yaml");
    let all = deployments.as_array().expect("list");
    let found = workloads(all);
    let bundle = |name: &str| BundleRef {
        namespace: "clusters".into(),
        name: name.into(),
    };
    assert_eq!(found.left, vec![bundle("apps-ingress"), bundle("backup")]);
    assert_eq!(found.kept, vec![bundle("ccm")]);
    assert_eq!(found.left[0].to_string(), "clusters/apps-ingress");
    // Only the agent's: nothing to wait for.
    assert_eq!(workloads(&all[..1]), Workloads::default());
    // A BundleDeployment without Fleet's labels is named by itself.
    let bare = json!({"metadata": {"name": "orphan", "namespace": "cluster-x"}});
    assert_eq!(
        workloads(&[bare]).left,
        vec![BundleRef {
            namespace: String::new(),
            name: "orphan".into()
        }]
    );
}

/// Fleet copies a Bundle's labels to its BundleDeployments, except keys containing `cattle.io/`
/// (rancher/fleet v0.16.1 `target/target.go` `BundleDeploymentLabels`, rancher/wrangler v3.7.0
/// `pkg/yaml/yaml.go` `CleanAnnotationsForExport`): the keep label must not be one of those.
#[test]
fn the_keep_label_survives_fleet_s_copy_to_bundle_deployments() {
    let dropped_by_fleet =
        |key: &str| key.starts_with("kubectl.kubernetes.io/") || key.contains("cattle.io/");
    assert!(!dropped_by_fleet(names::KEEP_DURING_TEARDOWN_LABEL));
    let bundles = fixture("bundles.yaml");
    let ccm = bundles
        .as_array()
        .expect("list")
        .iter()
        .find(|b| b["metadata"]["name"] == "ccm")
        .expect("ccm");
    let deployments = fixture("bundledeployments.yaml");
    let bd = deployments
        .as_array()
        .expect("list")
        .iter()
        .find(|b| b["metadata"]["name"] == "ccm")
        .expect("ccm");
    for (key, value) in ccm["metadata"]["labels"].as_object().expect("labels") {
        if !dropped_by_fleet(key) || key.starts_with("fleet.cattle.io/") {
            assert_eq!(&bd["metadata"]["labels"][key], value, "{key}");
        }
    }
}

#[test]
fn bundles_that_still_target_the_drained_cluster_are_explained() {
    let bundles = fixture("bundles.yaml");
    let by_name = |name: &str| {
        bundles
            .as_array()
            .expect("list")
            .iter()
            .find(|b| b["metadata"]["name"] == name)
            .cloned()
            .expect("bundle")
    };
    // The Fleet Cluster's labels after the drain.
    let drained = annotations(&[
        (names::TEARDOWN_LABEL, "true"),
        ("management.cattle.io/cluster-display-name", "c1"),
        ("owner", "team-a"),
    ]);
    let rows = [
        // Its selector needed a label the drain removed: Fleet removes it.
        ("apps-ingress", "c1", None),
        // A class group (not read here) first; its teardown target keeps it on purpose.
        (
            "ccm",
            "c1",
            Some("its clusterSelector still matches the labels left"),
        ),
        (
            "backup",
            "c1",
            Some("targets this cluster by name (clusterName)"),
        ),
        ("backup", "c2", None),
        // The recommended customization comes first: Fleet removes it.
        ("monitoring", "c1", None),
        (
            "logging",
            "c1",
            Some("targets every cluster (clusterSelector: {})"),
        ),
        (
            "sandbox-tools",
            "c1",
            Some("its clusterSelector still matches the labels left"),
        ),
    ];
    for (bundle, fleet_name, want) in rows {
        assert_eq!(
            why_still_targeted(&by_name(bundle), fleet_name, &drained),
            want,
            "{bundle} on {fleet_name}"
        );
    }
    // Before the drain the label selector matched: that is why Fleet deployed it.
    let before = labels_of(&fleet_cluster());
    assert!(why_still_targeted(&by_name("apps-ingress"), "c1", &before).is_some());
}

#[test]
fn leftovers_are_load_balancers_and_volumes_outside_the_system_and_agent_namespaces() {
    let objects = fixture("workload-objects.yaml");
    let list = |key: &str| objects[key].as_array().expect("list").clone();
    let all = WorkloadObjects {
        services: list("services"),
        claims: list("claims"),
        volumes: list("volumes"),
        attachments: list("attachments"),
    };
    let fleet = fleet_cluster();
    assert_eq!(agent_namespace(&fleet), "fleet-addon-agent");
    assert_eq!(
        leftovers(&all, &agent_namespace(&fleet)),
        vec![
            "PersistentVolume pvc-0b7f (claim db/data-postgres-0, Released)".to_string(),
            "PersistentVolumeClaim db/data-postgres-0".to_string(),
            "Service ingress-nginx/ingress-nginx-controller (LoadBalancer)".to_string(),
            "VolumeAttachment csi-3f1e0c5b7a9d (PersistentVolume pvc-0b7f on node prod-eu-1-md-0-x7k2p)".to_string(),
        ]
    );
    // The claim gone, its volume is still being detached and deleted: not done yet.
    let claim_gone = WorkloadObjects {
        claims: vec![],
        ..all.clone()
    };
    assert_eq!(leftovers(&claim_gone, "fleet-addon-agent").len(), 3);
    let done = WorkloadObjects {
        services: all.services[1..].to_vec(),
        claims: all.claims[1..].to_vec(),
        volumes: all.volumes[1..].to_vec(),
        attachments: all.attachments.clone(),
    };
    assert!(leftovers(&done, "fleet-addon-agent").is_empty());
    // Another agent namespace: its Services count as leftovers then.
    let other = WorkloadObjects {
        services: all.services[4..].to_vec(),
        ..Default::default()
    };
    assert_eq!(leftovers(&other, "cattle-fleet-system").len(), 1);
    // Where the agent runs: what Fleet reports, else what it was asked, else ours.
    let mut unregistered = fleet.clone();
    unregistered.status = None;
    unregistered.spec.agent_namespace = Some("agents".into());
    assert_eq!(agent_namespace(&unregistered), "agents");
    unregistered.spec.agent_namespace = None;
    assert_eq!(
        agent_namespace(&unregistered),
        names::DEFAULT_AGENT_NAMESPACE
    );
}

#[test]
fn the_verdict_says_what_the_deletion_waits_for() {
    let deadline = at("2026-11-23T10:50:00Z");
    let now = at("2026-11-23T10:21:00Z");
    let bundle = |name: &str| BundleRef {
        namespace: "clusters".into(),
        name: name.into(),
    };
    let left = [bundle("apps-ingress"), bundle("backup")];
    let kept = [bundle("ccm")];
    let explained = [(
        bundle("backup"),
        "targets this cluster by name (clusterName)",
    )];
    let base = Progress {
        fleet_key: "clusters/c1",
        started_with: Some(3),
        left: &left,
        kept: &[],
        explained: &[],
        drained: false,
        downstream: None,
        deadline,
        now,
    };
    let until = "the deletion proceeds anyway at 2026-11-23T10:50:00Z (now with the Cluster annotation fleet.addons.cluster.x-k8s.io/skip-workload-removal: \"true\")";
    let gone = at("2026-11-23T10:20:30Z");
    let unchecked = Downstream::Unchecked {
        reason: "no kubeconfig Secret clusters/c1-kubeconfig".into(),
        bundles_gone: gone,
    };
    let checked = Downstream::Checked {
        leftovers: vec!["Service ingress-nginx/ingress-nginx-controller (LoadBalancer)".into()],
    };
    let clean = Downstream::Checked { leftovers: vec![] };
    let rows: Vec<(&str, Progress<'_>, Verdict)> = vec![
        (
            "labels not removed yet",
            base.clone(),
            Verdict::Hold(format!(
                "removing Fleet workloads: waiting for the labels bundles select Fleet Cluster clusters/c1 by to be removed (the import controller does it); 2 of 3 BundleDeployments left: clusters/apps-ingress, clusters/backup; {until}"
            )),
        ),
        (
            "drained, bundles left, one explained",
            Progress {
                drained: true,
                explained: &explained,
                ..base.clone()
            },
            Verdict::Hold(format!(
                "removing Fleet workloads: 2 of 3 BundleDeployments left: clusters/apps-ingress, clusters/backup; bundle clusters/backup targets this cluster by name (clusterName) and cannot be drained (give it a targetCustomization with doNotDeploy: true on the label fleet.addons.cluster.x-k8s.io/teardown: \"true\"); {until}"
            )),
        ),
        (
            "a kept bundle is named",
            Progress {
                drained: true,
                left: &left[..1],
                kept: &kept,
                started_with: None,
                ..base.clone()
            },
            Verdict::Hold(format!(
                "removing Fleet workloads: 1 BundleDeployment left: clusters/apps-ingress; kept until the cluster is deleted (fleet.addons.cluster.x-k8s.io/keep-during-teardown): clusters/ccm; {until}"
            )),
        ),
        (
            "none left, the workload cluster still has a load balancer",
            Progress {
                drained: true,
                left: &[],
                downstream: Some(&checked),
                ..base.clone()
            },
            Verdict::Hold(format!(
                "removing Fleet workloads: Fleet removed 3 BundleDeployments; waiting for the workload cluster to delete Service ingress-nginx/ingress-nginx-controller (LoadBalancer); {until}"
            )),
        ),
        (
            "none left, nothing left on the workload cluster",
            Progress {
                drained: true,
                left: &[],
                downstream: Some(&clean),
                ..base.clone()
            },
            Verdict::Done(
                "Fleet removed 3 BundleDeployments of Fleet Cluster clusters/c1, and the workload cluster has no LoadBalancer Service, PersistentVolumeClaim or PersistentVolume left".into(),
            ),
        ),
        (
            "none left, the workload cluster cannot be reached: the settle period",
            Progress {
                drained: true,
                left: &[],
                downstream: Some(&unchecked),
                ..base.clone()
            },
            Verdict::Hold(format!(
                "removing Fleet workloads: Fleet removed 3 BundleDeployments; the workload cluster cannot be checked (no kubeconfig Secret clusters/c1-kubeconfig): giving its agent until 2026-11-23T10:22:30Z to uninstall them; {until}"
            )),
        ),
        (
            "none left, unreachable, settled",
            Progress {
                drained: true,
                left: &[],
                downstream: Some(&unchecked),
                now: at("2026-11-23T10:22:30Z"),
                ..base.clone()
            },
            Verdict::Done(
                "Fleet removed 3 BundleDeployments of Fleet Cluster clusters/c1; the workload cluster could not be checked (no kubeconfig Secret clusters/c1-kubeconfig), so its agent was given 2m after the last BundleDeployment went".into(),
            ),
        ),
    ];
    for (name, progress, want) in rows {
        assert_eq!(verdict(&progress), want, "{name}");
    }
    // No countdown: the same state gives the same message a minute later.
    let later = Progress {
        drained: true,
        left: &[],
        downstream: Some(&unchecked),
        now: at("2026-11-23T10:22:00Z"),
        ..base.clone()
    };
    let earlier = Progress {
        now: at("2026-11-23T10:21:00Z"),
        ..later.clone()
    };
    assert_eq!(verdict(&later), verdict(&earlier));
    // A long list is capped.
    let many: Vec<BundleRef> = (0..14).map(|i| bundle(&format!("b{i:02}"))).collect();
    let Verdict::Hold(message) = verdict(&Progress {
        drained: true,
        left: &many,
        started_with: Some(14),
        ..base
    }) else {
        panic!("holds");
    };
    assert!(
        message.contains("14 of 14 BundleDeployments left: clusters/b00,")
            && message.contains("clusters/b09, and 4 more;"),
        "{message}"
    );
}

#[test]
fn the_condition_and_its_events() {
    let removing = condition(reason::REMOVING, "removing");
    assert_eq!(removing.type_, "FleetWorkloadsRemoved");
    assert!(!removing.status);
    assert!(condition(reason::REMOVED, "done").status);
    assert!(!condition(reason::SKIPPED, "skipped").status);
    assert!(!condition(reason::TIMED_OUT, "late").status);
    let live = |reason: &str| json!({"type": "FleetWorkloadsRemoved", "status": "False", "reason": reason});
    let rows = [
        (
            None,
            reason::REMOVING,
            Some(("FleetWorkloadsRemoving", false)),
        ),
        (Some(live(reason::REMOVING)), reason::REMOVING, None),
        (
            Some(live(reason::REMOVING)),
            reason::REMOVED,
            Some(("FleetWorkloadsRemoved", false)),
        ),
        (
            Some(live(reason::REMOVING)),
            reason::SKIPPED,
            Some(("FleetWorkloadsRemovalSkipped", true)),
        ),
        (
            None,
            reason::TIMED_OUT,
            Some(("FleetWorkloadsRemovalTimedOut", true)),
        ),
        (Some(live(reason::TIMED_OUT)), reason::TIMED_OUT, None),
        (
            Some(live(reason::REMOVING)),
            reason::INTERRUPTED,
            Some(("FleetWorkloadsRemovalInterrupted", true)),
        ),
        (Some(live(reason::INTERRUPTED)), reason::INTERRUPTED, None),
    ];
    for (current, reason, want) in rows {
        let got = event_for(current.as_ref(), reason, "note");
        assert_eq!(
            got.as_ref().map(|(e, w, _)| (*e, *w)),
            want,
            "{current:?} -> {reason}"
        );
    }
    let long = "x".repeat(3000);
    let (_, _, note) = event_for(None, reason::REMOVING, &long).expect("event");
    assert!(note.len() <= 1024 && note.ends_with('…'));
}

#[test]
fn early_ends_and_annotation_problems_are_said() {
    let skipped = ended_early(&Mode::Skipped, "clusters/c1").expect("message");
    assert!(
        skipped.contains("skip-workload-removal") && skipped.contains("clusters/c1"),
        "{skipped}"
    );
    let expired = ended_early(
        &Mode::Expired {
            deadline: at("2026-11-23T10:30:00Z"),
        },
        "clusters/c1",
    )
    .expect("message");
    assert!(
        expired.contains("timed out at 2026-11-23T10:30:00Z"),
        "{expired}"
    );
    // Turned off while under way (BeforeClusterDelete routes only such a Cluster here).
    let off = ended_early(&Mode::Off, "clusters/c1").expect("message");
    assert!(off.starts_with("workload removal turned off"), "{off}");
    assert_eq!(ended_early(&Mode::NotDeleting, "clusters/c1"), None);
    assert_eq!(with_problems("done", &[]), "done");
    assert_eq!(
        with_problems("done", &["annotation a: bad".into()]),
        "done; annotation a: bad"
    );
    assert_eq!(
        with_problems("", &["annotation a: bad".into()]),
        "annotation a: bad"
    );
}

/// The condition is written only when it changes, the Event only when its reason changes; a
/// Cluster without the condition gets one only when `always`.
#[test]
fn the_report_writes_only_changes() {
    use crate::model::plan::Write;
    let now = Timestamp::from_second(1_800_000_000).expect("time");
    let cluster = |conditions: Value| -> crate::api::CapiCluster {
        serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "c1", "namespace": "team-a", "uid": "u-1", "generation": 2},
            "status": {"conditions": conditions},
        }))
        .expect("cluster")
    };
    let kinds = |writes: &[Write]| -> Vec<&'static str> {
        writes
            .iter()
            .map(|write| match write {
                Write::ApplyStatus { body, manager, .. } => {
                    assert_eq!(*manager, names::TEARDOWN_FIELD_MANAGER);
                    let condition = &body["status"]["conditions"][0];
                    assert_eq!(condition["type"], names::WORKLOADS_REMOVED_CONDITION);
                    "condition"
                }
                Write::Event { reason, .. } => reason,
                other => panic!("unexpected {other:?}"),
            })
            .collect()
    };
    let none = cluster(json!([]));
    assert!(report(&none, reason::REMOVING, "m", (false, false), now).is_empty());
    let first = report(&none, reason::REMOVING, "m", (true, false), now);
    assert_eq!(kinds(&first), ["condition", "FleetWorkloadsRemoving"]);
    let Write::ApplyStatus { body, .. } = &first[0] else {
        unreachable!()
    };
    let written = cluster(body["status"]["conditions"].clone());
    assert!(report(&written, reason::REMOVING, "m", (false, false), now).is_empty());
    let reworded = report(&written, reason::REMOVING, "m2", (false, false), now);
    assert_eq!(kinds(&reworded), ["condition"]);
    let skipped = report(&written, reason::SKIPPED, "m", (false, false), now);
    assert_eq!(
        kinds(&skipped),
        ["condition", "FleetWorkloadsRemovalSkipped"]
    );
    // Only a removal under way is ended early (a Removed one stays).
    let Write::ApplyStatus { body, .. } = &skipped[0] else {
        unreachable!()
    };
    let ended = cluster(body["status"]["conditions"].clone());
    assert!(report(&ended, reason::SKIPPED, "m3", (false, true), now).is_empty());
    assert_eq!(
        kinds(&report(&written, reason::SKIPPED, "m3", (false, true), now)).len(),
        2
    );
}

/// `ok-to-delete` (as Cluster API v1.11.11/v1.12.11 `MarkAsOkToDelete` writes it: an empty
/// value) on a Cluster whose condition still says `Removing`: the removal was interrupted. Any
/// other reason was written by our own answer before the deletion could proceed, and an
/// interrupted one is said once.
#[test]
fn ok_to_delete_during_the_removal_is_an_interruption() {
    let ok = annotations(&[(names::CAPI_OK_TO_DELETE_ANNOTATION, "")]);
    let none = annotations(&[]);
    let live = |reason: &str| {
        json!({"type": "FleetWorkloadsRemoved", "status": "False", "reason": reason,
               "message": "removing Fleet workloads: 1 of 2 BundleDeployments left: clusters/backup"})
    };
    let rows: [(&StringMap, Option<Value>, bool); 7] = [
        (&ok, Some(live(reason::REMOVING)), true),
        (&none, Some(live(reason::REMOVING)), false),
        (&ok, Some(live(reason::REMOVED)), false),
        (&ok, Some(live(reason::SKIPPED)), false),
        (&ok, Some(live(reason::TIMED_OUT)), false),
        (&ok, Some(live(reason::INTERRUPTED)), false),
        (&ok, None, false),
    ];
    for (annotations, condition, want) in rows {
        let got = interrupted(annotations, condition.as_ref());
        assert_eq!(got.is_some(), want, "{annotations:?} {condition:?}");
        if let Some(message) = got {
            assert!(
                message.contains("runtime.cluster.x-k8s.io/ok-to-delete")
                    && message.ends_with("last progress: removing Fleet workloads: 1 of 2 BundleDeployments left: clusters/backup"),
                "{message}"
            );
        }
    }
}
