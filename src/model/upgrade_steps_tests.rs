//! Table tests of the upgrade steps: the records and labels of whole upgrades as Cluster API
//! calls the hooks (cluster-api v1.12.11 `exp/topology/desiredstate/desired_state.go`
//! `computeControlPlaneVersion`; v1.11.11 for the single step), and the gate.

use serde_json::json;

use super::*;

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).expect("timestamp")
}

fn request(
    from: Option<&str>,
    to: Option<&str>,
    version: Option<&str>,
    cp: &[&str],
    workers: &[&str],
) -> StepRequest {
    let owned = |v: Option<&str>| v.map(str::to_string);
    StepRequest {
        from: owned(from),
        to: owned(to),
        version: owned(version),
        control_plane_upgrades: cp.iter().map(|v| v.to_string()).collect(),
        workers_upgrades: workers.iter().map(|v| v.to_string()).collect(),
        cluster_version: Some("v1.35.0".to_string()),
    }
}

/// Labels as (control plane, workers, target) minors.
type Shown = (
    Option<&'static str>,
    Option<&'static str>,
    Option<&'static str>,
);

fn shown(view: &VersionView) -> (Option<String>, Option<String>, Option<String>) {
    (
        view.control_plane.clone(),
        view.workers.clone(),
        view.target.clone(),
    )
}

fn owned(expected: Shown) -> (Option<String>, Option<String>, Option<String>) {
    let o = |v: Option<&str>| v.map(str::to_string);
    (o(expected.0), o(expected.1), o(expected.2))
}

/// The chained upgrade 1.32.4 → 1.35.0 of a control plane and one MachineDeployment, with the
/// ClusterClass versions [v1.32.4, v1.33.5, v1.34.2, v1.35.0]: Cluster API's calls in order,
/// with its request values (research notes §2.5), and what Fleet is shown after each.
#[test]
fn a_chained_upgrade_moves_the_labels_one_step_at_a_time() {
    use UpgradeHook::*;
    let steps: [(UpgradeHook, StepRequest, Shown); 10] = [
        (
            BeforeClusterUpgrade,
            request(
                Some("v1.32.4"),
                Some("v1.35.0"),
                None,
                &["v1.33.5", "v1.34.2", "v1.35.0"],
                &["v1.35.0"],
            ),
            (Some("1.32"), Some("1.32"), Some("1.33")),
        ),
        (
            BeforeControlPlaneUpgrade,
            request(
                Some("v1.32.4"),
                Some("v1.33.5"),
                None,
                &["v1.33.5", "v1.34.2", "v1.35.0"],
                &["v1.35.0"],
            ),
            (Some("1.32"), Some("1.32"), Some("1.33")),
        ),
        (
            AfterControlPlaneUpgrade,
            request(
                None,
                None,
                Some("v1.33.5"),
                &["v1.34.2", "v1.35.0"],
                &["v1.35.0"],
            ),
            (Some("1.33"), Some("1.32"), Some("1.34")),
        ),
        (
            BeforeControlPlaneUpgrade,
            request(
                Some("v1.33.5"),
                Some("v1.34.2"),
                None,
                &["v1.34.2", "v1.35.0"],
                &["v1.35.0"],
            ),
            (Some("1.33"), Some("1.32"), Some("1.34")),
        ),
        (
            AfterControlPlaneUpgrade,
            request(None, None, Some("v1.34.2"), &["v1.35.0"], &["v1.35.0"]),
            (Some("1.34"), Some("1.32"), Some("1.35")),
        ),
        (
            BeforeControlPlaneUpgrade,
            request(
                Some("v1.34.2"),
                Some("v1.35.0"),
                None,
                &["v1.35.0"],
                &["v1.35.0"],
            ),
            (Some("1.34"), Some("1.32"), Some("1.35")),
        ),
        (
            AfterControlPlaneUpgrade,
            request(None, None, Some("v1.35.0"), &[], &["v1.35.0"]),
            (Some("1.35"), Some("1.32"), Some("1.35")),
        ),
        (
            BeforeWorkersUpgrade,
            request(Some("v1.32.4"), Some("v1.35.0"), None, &[], &["v1.35.0"]),
            (Some("1.35"), Some("1.32"), Some("1.35")),
        ),
        (
            AfterWorkersUpgrade,
            request(None, None, Some("v1.35.0"), &[], &[]),
            (Some("1.35"), Some("1.35"), None),
        ),
        (
            AfterClusterUpgrade,
            request(None, None, Some("v1.35.0"), &[], &[]),
            (Some("1.35"), Some("1.35"), None),
        ),
    ];
    let mut previous: Option<UpgradeStep> = None;
    for (i, (hook, request, expected)) in steps.into_iter().enumerate() {
        let step = next_step(hook, &request, previous.as_ref(), at(i as i64 * 100))
            .unwrap_or_else(|| panic!("step {i} {hook:?}"));
        assert_eq!(shown(&of_step(&step)), owned(expected), "step {i} {hook:?}");
        assert_eq!(step.hook, hook.name());
        assert_eq!(step.cluster, "v1.35.0", "step {i}");
        assert_eq!(step.in_progress(), hook != AfterClusterUpgrade, "step {i}");
        previous = Some(step);
    }
}

/// The same step seen twice keeps its start (0 writes when nothing changes); the next hook of
/// the same step too; a new step starts afresh.
#[test]
fn a_step_keeps_its_start_until_its_versions_change() {
    use UpgradeHook::*;
    let bcu = request(
        Some("v1.32.4"),
        Some("v1.35.0"),
        None,
        &["v1.33.5", "v1.34.2", "v1.35.0"],
        &["v1.35.0"],
    );
    let first = next_step(BeforeClusterUpgrade, &bcu, None, at(0)).expect("step");
    let again = next_step(BeforeClusterUpgrade, &bcu, Some(&first), at(50)).expect("step");
    assert_eq!(again, first, "a repeated call changes nothing");
    let bcpu = request(
        Some("v1.32.4"),
        Some("v1.33.5"),
        None,
        &["v1.33.5", "v1.34.2", "v1.35.0"],
        &["v1.35.0"],
    );
    let same = next_step(BeforeControlPlaneUpgrade, &bcpu, Some(&first), at(60)).expect("step");
    assert_eq!(same.since, first.since, "the next hook of the same step");
    let acpu = request(
        None,
        None,
        Some("v1.33.5"),
        &["v1.34.2", "v1.35.0"],
        &["v1.35.0"],
    );
    let next = next_step(AfterControlPlaneUpgrade, &acpu, Some(&same), at(900)).expect("step");
    assert_eq!(next.since, at(900).to_string(), "a new step");
}

/// Cluster API v1.11: one step, BeforeClusterUpgrade, AfterControlPlaneUpgrade (no step
/// lists), AfterClusterUpgrade (v1.11.11 `computeControlPlaneVersion`, `callAfterClusterUpgrade`).
#[test]
fn a_single_step_upgrade_of_cluster_api_v1_11() {
    use UpgradeHook::*;
    let v111 = |from: Option<&str>, to: Option<&str>, version: Option<&str>| StepRequest {
        cluster_version: Some("v1.34.0".into()),
        ..request(from, to, version, &[], &[])
    };
    let bcu = next_step(
        BeforeClusterUpgrade,
        &v111(Some("v1.33.1"), Some("v1.34.0"), None),
        None,
        at(0),
    )
    .expect("step");
    assert_eq!(
        shown(&of_step(&bcu)),
        owned((Some("1.33"), Some("1.33"), Some("1.34")))
    );
    let acpu = next_step(
        AfterControlPlaneUpgrade,
        &v111(None, None, Some("v1.34.0")),
        Some(&bcu),
        at(10),
    )
    .expect("step");
    assert_eq!(
        shown(&of_step(&acpu)),
        owned((Some("1.34"), Some("1.33"), Some("1.34"))),
        "the workers follow next"
    );
    let acu = next_step(
        AfterClusterUpgrade,
        &v111(None, None, Some("v1.34.0")),
        Some(&acpu),
        at(20),
    )
    .expect("step");
    assert_eq!(
        shown(&of_step(&acu)),
        owned((Some("1.34"), Some("1.34"), None))
    );
    assert!(next_step(BeforeClusterUpgrade, &v111(None, None, None), None, at(0)).is_none());
}

#[test]
fn minors() {
    let rows = [
        ("v1.33.5", Some("1.33")),
        ("1.34.0", Some("1.34")),
        ("v1.35.0-rc.1", Some("1.35")),
        ("v1.35", Some("1.35")),
        ("", None),
        ("latest", None),
    ];
    for (version, expected) in rows {
        assert_eq!(minor(version).as_deref(), expected, "{version}");
    }
}

fn cluster(version: &str, settled: bool) -> ClusterView {
    let mut view = ClusterView::from_json(&json!({
        "metadata": {"name": "c1", "namespace": "ns", "generation": 3},
        "spec": {"topology": {"version": version}},
    }))
    .expect("view");
    view.topology_settled = settled;
    view
}

/// Outside an upgrade the labels follow `spec.topology.version` once Cluster API reached it;
/// a version change it has not started on moves nothing; a step under way wins.
#[test]
fn what_the_fleet_cluster_shows() {
    let live: BTreeMap<String, String> = [
        (names::CONTROL_PLANE_MINOR_LABEL, "1.32"),
        (names::WORKERS_MINOR_LABEL, "1.32"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let step = next_step(
        UpgradeHook::BeforeClusterUpgrade,
        &request(Some("v1.32.4"), Some("v1.33.5"), None, &[], &[]),
        None,
        at(0),
    )
    .expect("step");
    let rows: [(&str, ClusterView, Option<&UpgradeStep>, Shown); 5] = [
        (
            "settled: the topology version",
            cluster("v1.32.4", true),
            None,
            (Some("1.32"), Some("1.32"), None),
        ),
        (
            "settled wins over an old record",
            cluster("v1.33.5", true),
            Some(&step),
            (Some("1.33"), Some("1.33"), None),
        ),
        (
            "new version not started on: what is shown stays",
            cluster("v1.33.5", false),
            None,
            (Some("1.32"), Some("1.32"), None),
        ),
        (
            "a step under way",
            cluster("v1.33.5", false),
            Some(&step),
            (Some("1.32"), Some("1.32"), Some("1.33")),
        ),
        (
            "no version",
            cluster("", true),
            None,
            (Some("1.32"), Some("1.32"), None),
        ),
    ];
    for (what, view, step, expected) in rows {
        assert_eq!(
            shown(&versions(&view, step, &live)),
            owned(expected),
            "{what}"
        );
    }
    let nothing = versions(&cluster("", false), None, &BTreeMap::new());
    assert_eq!(
        nothing.template_value(),
        json!({"controlPlaneMinor": "", "workersMinor": "", "targetMinor": "", "step": ""}),
        "every key is present"
    );
}

#[test]
fn labels_are_put_and_removed() {
    let view = of_step(
        &next_step(
            UpgradeHook::AfterClusterUpgrade,
            &request(None, None, Some("v1.35.0"), &[], &[]),
            None,
            at(0),
        )
        .expect("step"),
    );
    let mut labels: BTreeMap<String, String> = [
        ("team".to_string(), "a".to_string()),
        (
            names::UPGRADE_TARGET_MINOR_LABEL.to_string(),
            "1.35".to_string(),
        ),
    ]
    .into();
    assert!(!view.shown_by(&labels));
    view.put_labels(&mut labels);
    assert!(view.shown_by(&labels));
    assert_eq!(labels.get("team").map(String::as_str), Some("a"));
    assert!(!labels.contains_key(names::UPGRADE_TARGET_MINOR_LABEL));
    assert_eq!(
        labels
            .get(names::CONTROL_PLANE_MINOR_LABEL)
            .map(String::as_str),
        Some("1.35")
    );
}

#[test]
fn per_cluster_gate_settings() {
    let annotations = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    /// (what, configured, annotations, waits, timeout, problems)
    type Row = (
        &'static str,
        bool,
        BTreeMap<String, String>,
        bool,
        Duration,
        usize,
    );
    let rows: [Row; 5] = [
        (
            "defaults",
            false,
            annotations(&[]),
            false,
            DEFAULT_TIMEOUT,
            0,
        ),
        (
            "on by annotation",
            false,
            annotations(&[(names::WAIT_FOR_BUNDLES_ANNOTATION, "true")]),
            true,
            DEFAULT_TIMEOUT,
            0,
        ),
        (
            "off by annotation",
            true,
            annotations(&[(names::WAIT_FOR_BUNDLES_ANNOTATION, "false")]),
            false,
            DEFAULT_TIMEOUT,
            0,
        ),
        (
            "timeout by annotation",
            true,
            annotations(&[(names::UPGRADE_GATE_TIMEOUT_ANNOTATION, "45m")]),
            true,
            Duration::from_secs(45 * 60),
            0,
        ),
        (
            "invalid values keep the defaults and are reported",
            true,
            annotations(&[
                (names::WAIT_FOR_BUNDLES_ANNOTATION, "yes"),
                (names::UPGRADE_GATE_TIMEOUT_ANNOTATION, "soon"),
            ]),
            true,
            DEFAULT_TIMEOUT,
            2,
        ),
    ];
    for (what, configured, annotations, wait, timeout, problems) in rows {
        let settings = gate_settings(configured, DEFAULT_TIMEOUT, DEFAULT_SETTLE, &annotations);
        assert_eq!(settings.wait_for_bundles, wait, "{what}");
        assert_eq!(settings.timeout, timeout, "{what}");
        assert_eq!(
            settings.problems.len(),
            problems,
            "{what}: {:?}",
            settings.problems
        );
    }
}

fn gate_step() -> UpgradeStep {
    next_step(
        UpgradeHook::BeforeControlPlaneUpgrade,
        &request(Some("v1.33.5"), Some("v1.34.2"), None, &[], &[]),
        None,
        at(0),
    )
    .expect("step")
}

/// The gate before the bundles: off, released before, skipped, timed out, labels not shown,
/// settling, then the bundles decide.
#[test]
fn the_gate_before_the_bundles() {
    let on = gate_settings(
        true,
        Duration::from_secs(600),
        DEFAULT_SETTLE,
        &BTreeMap::new(),
    );
    let off = gate_settings(
        false,
        Duration::from_secs(600),
        DEFAULT_SETTLE,
        &BTreeMap::new(),
    );
    let mut released = gate_step();
    released.released = Some("timeout".into());
    /// (what, step, settings, skip, shown, applied at, now, retry after (0: proceed), released)
    type Row<'a> = (
        &'static str,
        UpgradeStep,
        &'a GateSettings,
        Option<&'static str>,
        bool,
        Option<i64>,
        i64,
        Option<i32>,
        Option<&'static str>,
    );
    let rows: [Row; 9] = [
        (
            "gate off",
            gate_step(),
            &off,
            None,
            false,
            None,
            1,
            Some(0),
            None,
        ),
        (
            "released before",
            released,
            &on,
            None,
            false,
            None,
            1,
            Some(0),
            None,
        ),
        (
            "skipped for this step",
            gate_step(),
            &on,
            Some("v1.34.2"),
            false,
            None,
            1,
            Some(0),
            Some("skipped"),
        ),
        (
            "skipped for all",
            gate_step(),
            &on,
            Some("all"),
            false,
            None,
            1,
            Some(0),
            Some("skipped"),
        ),
        (
            "a skip for another step",
            gate_step(),
            &on,
            Some("v1.33.5"),
            false,
            None,
            1,
            Some(RETRY_LABELS),
            None,
        ),
        (
            "timed out",
            gate_step(),
            &on,
            None,
            false,
            None,
            600,
            Some(0),
            Some("timeout"),
        ),
        (
            "labels applied a moment ago",
            gate_step(),
            &on,
            None,
            true,
            Some(4),
            6,
            Some(8),
            None,
        ),
        (
            "labels applied before the step began count from its start",
            gate_step(),
            &on,
            None,
            true,
            Some(-100),
            3,
            Some(7),
            None,
        ),
        (
            "settled: the bundles decide",
            gate_step(),
            &on,
            None,
            true,
            Some(4),
            20,
            None,
            None,
        ),
    ];
    for (what, step, settings, skip, shown, applied, now, retry, released) in rows {
        let answer = gate_before_bundles(&step, settings, skip, shown, applied.map(at), at(now));
        match (answer, retry) {
            (Ok(()), None) => {}
            (Err(answer), Some(retry)) => {
                let got = match &answer.outcome {
                    HookOutcome::Success { .. } => 0,
                    HookOutcome::Retry { after_seconds, .. } => *after_seconds,
                    HookOutcome::Failure { message } => panic!("{what}: failure {message}"),
                };
                assert_eq!(got, retry, "{what}: {:?}", answer.outcome);
                assert_eq!(answer.released, released, "{what}");
            }
            (got, _) => panic!("{what}: {got:?}"),
        }
    }
}

/// Fleet's bundle states decide (the BundleDeployment shapes of rancher/fleet v0.16.1
/// `pkg/apis/fleet.cattle.io/v1alpha1/bundledeployment_types.go`).
#[test]
fn the_bundles_decide_and_are_named() {
    let bd = |name: &str, wanted: &str, applied: &str, ready: bool| {
        json!({
            "metadata": {"name": name, "labels": {
                "fleet.cattle.io/bundle-namespace": "fleet-default",
                "fleet.cattle.io/bundle-name": name}},
            "spec": {"deploymentID": wanted, "stagedDeploymentID": wanted},
            "status": {"appliedDeploymentID": applied, "ready": ready, "nonModified": true},
        })
    };
    let step = gate_step();
    let ready = [
        bd("ccm-1-34", "a:1", "a:1", true),
        bd("cni", "b:1", "b:1", true),
    ];
    assert!(matches!(
        gate_bundles(&step, "ns/c1", &ready),
        HookOutcome::Success { .. }
    ));
    let waiting = [
        bd("ccm-1-34", "a:2", "a:1", true),
        bd("cni", "b:1", "b:1", false),
    ];
    match gate_bundles(&step, "ns/c1", &waiting) {
        HookOutcome::Retry {
            after_seconds,
            message,
        } => {
            assert_eq!(after_seconds, RETRY_HOLD);
            assert!(
                message.contains("fleet-default/ccm-1-34 (WaitApplied)"),
                "{message}"
            );
            assert!(
                message.contains("fleet-default/cni (NotReady)"),
                "{message}"
            );
            assert!(message.contains("next v1.34.2"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}
