//! Table tests of the upgrade steps: the records and labels of whole upgrades as Cluster API
//! calls the hooks (cluster-api v1.12.11 `exp/topology/desiredstate/desired_state.go`
//! `computeControlPlaneVersion`; v1.11.11 for the single step), and the gate.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
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
        let final_target = of_step(&step).template_value()["finalTargetMinor"].clone();
        let expected = if step.in_progress() { "1.35" } else { "" };
        assert_eq!(final_target, expected, "step {i}: the final target");
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

/// Plays an upgrade as cluster-api v1.12.11 calls the hooks (`exp/topology/desiredstate/
/// desired_state.go` `computeControlPlaneVersion`: AfterControlPlaneUpgrade, then the workers
/// when their plan's first version is the control plane's, AfterWorkersUpgrade before the next
/// BeforeControlPlaneUpgrade), with only the root discovery (`steps: false`: no
/// Before/AfterWorkersUpgrade, no BeforeControlPlaneUpgrade) or both. Returns, per call, the
/// hook, what Fleet was shown and the (control plane, workers) minors the machines ran.
fn play(
    from: &str,
    control_plane_plan: &[&str],
    workers_plan: &[&str],
    steps: bool,
) -> Vec<(UpgradeHook, VersionView, (String, String))> {
    use UpgradeHook::*;
    let to = *control_plane_plan.last().expect("plan");
    let (mut cp, mut workers) = (from.to_string(), from.to_string());
    let mut cp_plan: Vec<&str> = control_plane_plan.to_vec();
    let mut w_plan: Vec<&str> = workers_plan.to_vec();
    let mut calls = Vec::new();
    let mut previous: Option<UpgradeStep> = None;
    let mut call = |hook,
                    from: Option<&str>,
                    to_v: Option<&str>,
                    version: Option<&str>,
                    cp_plan: &[&str],
                    w_plan: &[&str],
                    actual: (&str, &str)| {
        let mut req = request(from, to_v, version, cp_plan, w_plan);
        req.cluster_version = Some(to.to_string());
        let step = next_step(hook, &req, previous.as_ref(), at(calls.len() as i64)).expect("step");
        let actual = (
            minor(actual.0).expect("minor"),
            minor(actual.1).expect("minor"),
        );
        calls.push((hook, of_step(&step), actual));
        previous = Some(step);
    };
    call(
        BeforeClusterUpgrade,
        Some(from),
        Some(to),
        None,
        &cp_plan,
        &w_plan,
        (&cp, &workers),
    );
    while !cp_plan.is_empty() || !w_plan.is_empty() {
        if w_plan.first() == Some(&cp.as_str()) {
            if steps {
                call(
                    BeforeWorkersUpgrade,
                    Some(&workers),
                    Some(&cp),
                    None,
                    &cp_plan,
                    &w_plan,
                    (&cp, &workers),
                );
            }
            workers = w_plan.remove(0).to_string();
            if steps {
                call(
                    AfterWorkersUpgrade,
                    None,
                    None,
                    Some(&cp),
                    &cp_plan,
                    &w_plan,
                    (&cp, &workers),
                );
            }
        } else {
            let next = cp_plan[0];
            if steps {
                call(
                    BeforeControlPlaneUpgrade,
                    Some(&cp),
                    Some(next),
                    None,
                    &cp_plan,
                    &w_plan,
                    (&cp, &workers),
                );
            }
            cp = cp_plan.remove(0).to_string();
            call(
                AfterControlPlaneUpgrade,
                None,
                None,
                Some(&cp),
                &cp_plan,
                &w_plan,
                (&cp, &workers),
            );
        }
    }
    call(
        AfterClusterUpgrade,
        None,
        None,
        Some(to),
        &[],
        &[],
        (&cp, &workers),
    );
    calls
}

/// 1.32 → 1.36: the workers catch up at 1.35 (cluster-api v1.12.11 `exp/topology/
/// desiredstate/upgrade_plan.go` `DefaultAndValidateUpgradePlans`: a workers step every third
/// minor), so after the control plane reached 1.35 the next move is the workers', not 1.36.
#[test]
fn a_long_jump_never_flips_the_target() {
    use UpgradeHook::*;
    let cp_plan = ["v1.33.5", "v1.34.2", "v1.35.0", "v1.36.1"];
    let expected: [(UpgradeHook, Shown); 14] = [
        (
            BeforeClusterUpgrade,
            (Some("1.32"), Some("1.32"), Some("1.33")),
        ),
        (
            BeforeControlPlaneUpgrade,
            (Some("1.32"), Some("1.32"), Some("1.33")),
        ),
        (
            AfterControlPlaneUpgrade,
            (Some("1.33"), Some("1.32"), Some("1.34")),
        ),
        (
            BeforeControlPlaneUpgrade,
            (Some("1.33"), Some("1.32"), Some("1.34")),
        ),
        (
            AfterControlPlaneUpgrade,
            (Some("1.34"), Some("1.32"), Some("1.35")),
        ),
        (
            BeforeControlPlaneUpgrade,
            (Some("1.34"), Some("1.32"), Some("1.35")),
        ),
        (
            AfterControlPlaneUpgrade,
            (Some("1.35"), Some("1.32"), Some("1.35")),
        ),
        (
            BeforeWorkersUpgrade,
            (Some("1.35"), Some("1.32"), Some("1.35")),
        ),
        (
            AfterWorkersUpgrade,
            (Some("1.35"), Some("1.35"), Some("1.36")),
        ),
        (
            BeforeControlPlaneUpgrade,
            (Some("1.35"), Some("1.35"), Some("1.36")),
        ),
        (
            AfterControlPlaneUpgrade,
            (Some("1.36"), Some("1.35"), Some("1.36")),
        ),
        (
            BeforeWorkersUpgrade,
            (Some("1.36"), Some("1.35"), Some("1.36")),
        ),
        (AfterWorkersUpgrade, (Some("1.36"), Some("1.36"), None)),
        (AfterClusterUpgrade, (Some("1.36"), Some("1.36"), None)),
    ];
    let calls = play("v1.32.4", &cp_plan, &["v1.35.0", "v1.36.1"], true);
    assert_eq!(calls.len(), expected.len());
    for (i, ((hook, view, _), (want_hook, want))) in calls.iter().zip(expected).enumerate() {
        assert_eq!(*hook, want_hook, "call {i}");
        assert_eq!(shown(view), owned(want), "call {i} {hook:?}");
    }
    // Only the root discovery: AfterControlPlaneUpgrade at 1.36 sees the workers at 1.35.
    let root = play("v1.32.4", &cp_plan, &["v1.35.0", "v1.36.1"], false);
    let shown_root: Vec<_> = root.iter().map(|(_, view, _)| shown(view)).collect();
    let expected_root: Vec<_> = [
        (Some("1.32"), Some("1.32"), Some("1.33")),
        (Some("1.33"), Some("1.32"), Some("1.34")),
        (Some("1.34"), Some("1.32"), Some("1.35")),
        (Some("1.35"), Some("1.32"), Some("1.35")),
        (Some("1.36"), Some("1.35"), Some("1.36")),
        (Some("1.36"), Some("1.36"), None),
    ]
    .into_iter()
    .map(owned)
    .collect();
    assert_eq!(shown_root, expected_root);
}

/// Whatever the plan (Cluster API's default, or a GenerateUpgradePlan extension's with the
/// workers at every step) and whichever discoveries are registered: the labels show the minors
/// the machines run, and the target never goes back (a bundle keyed on it is never downgraded).
#[test]
fn every_plan_shows_the_machines_and_a_target_that_only_moves_forward() {
    let plans: [(&str, &[&str], &[&str]); 4] = [
        ("v1.32.4", &["v1.33.5", "v1.34.2", "v1.35.0"], &["v1.35.0"]),
        (
            "v1.32.4",
            &["v1.33.5", "v1.34.2", "v1.35.0", "v1.36.1"],
            &["v1.35.0", "v1.36.1"],
        ),
        (
            "v1.30.2",
            &[
                "v1.31.1", "v1.32.4", "v1.33.5", "v1.34.2", "v1.35.0", "v1.36.1", "v1.37.0",
            ],
            &["v1.33.5", "v1.36.1", "v1.37.0"],
        ),
        (
            "v1.32.4",
            &["v1.33.5", "v1.34.2", "v1.35.0"],
            &["v1.33.5", "v1.34.2", "v1.35.0"],
        ),
    ];
    for (from, cp_plan, w_plan) in plans {
        for steps in [true, false] {
            let what = format!("{from} {cp_plan:?} {w_plan:?} steps={steps}");
            let mut last_target = String::new();
            for (hook, view, (cp, workers)) in play(from, cp_plan, w_plan, steps) {
                assert_eq!(view.control_plane.as_ref(), Some(&cp), "{what} {hook:?}");
                assert_eq!(view.workers.as_ref(), Some(&workers), "{what} {hook:?}");
                if let Some(target) = view.target {
                    let key =
                        |m: &str| m.split('.').map(|p| format!("{p:0>4}")).collect::<String>();
                    assert!(
                        key(&target) >= key(&last_target),
                        "{what} {hook:?}: {last_target} -> {target}"
                    );
                    assert!(
                        key(&target) >= key(&cp),
                        "{what} {hook:?}: target {target} behind {cp}"
                    );
                    last_target = target;
                }
            }
        }
    }
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
        json!({"controlPlaneMinor": "", "workersMinor": "", "targetMinor": "", "step": "", "finalTargetMinor": ""}),
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
    const BCPU: UpgradeHook = UpgradeHook::BeforeControlPlaneUpgrade;
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
        let settings = gate_settings(&config(configured, false), BCPU, true, &annotations);
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

/// The runtime extension's upgrade settings: the step gate and the older BeforeClusterUpgrade
/// gate.
fn config(steps: bool, before_upgrade: bool) -> RuntimeExtensionSettings {
    RuntimeExtensionSettings {
        step_wait_for_bundles_ready: steps,
        wait_for_bundles_ready: before_upgrade,
        ..Default::default()
    }
}

/// `beforeClusterUpgrade.waitForBundlesReady` is the gate at BeforeClusterUpgrade only, turned
/// off (never on) by `wait-for-bundles: "false"`, with the step gate's timeout and skip, and
/// without waiting for a step to be shown (it works without `patchResource`).
#[test]
fn the_older_gate_follows_the_same_rules() {
    use UpgradeHook::*;
    let older = config(false, true);
    let none = BTreeMap::new();
    let off = BTreeMap::from([(
        names::WAIT_FOR_BUNDLES_ANNOTATION.to_string(),
        "false".to_string(),
    )]);
    let settings = gate_settings(&older, BeforeClusterUpgrade, false, &none);
    assert!(settings.as_they_are && !settings.wait_for_bundles && settings.gated());
    assert!(
        !gate_settings(&older, BeforeClusterUpgrade, true, &off).gated(),
        "off by annotation"
    );
    assert!(!gate_settings(&older, AfterControlPlaneUpgrade, true, &none).gated());
    // With the step gate on too, the step gate decides.
    let both = gate_settings(&config(true, true), BeforeClusterUpgrade, true, &none);
    assert!(both.wait_for_bundles && !both.as_they_are);
    let step = next_step(
        BeforeClusterUpgrade,
        &request(Some("v1.33.5"), Some("v1.34.2"), None, &[], &[]),
        None,
        at(0),
    )
    .expect("step");
    // Not shown, right away: the bundles decide at once.
    assert_eq!(
        gate_before_bundles(&step, &settings, None, true, None, at(1)),
        Ok(())
    );
    let timed_out =
        gate_before_bundles(&step, &settings, None, true, None, at(1800)).expect_err("released");
    assert_eq!(timed_out.released, Some("timeout"));
    let skipped =
        gate_before_bundles(&step, &settings, Some("all"), true, None, at(1)).expect_err("skipped");
    assert_eq!(skipped.released, Some("skipped"));
}

/// AfterClusterUpgrade is never held: its step is AfterWorkersUpgrade's, and a held one makes
/// Cluster API v1.12 refuse version changes (`internal/webhooks/cluster.go`
/// `validateTopologyVersionUpdate`).
#[test]
fn after_cluster_upgrade_is_not_gated() {
    let on = gate_settings(
        &config(true, false),
        UpgradeHook::AfterClusterUpgrade,
        true,
        &BTreeMap::new(),
    );
    let step = next_step(
        UpgradeHook::AfterClusterUpgrade,
        &request(None, None, Some("v1.35.0"), &[], &[]),
        Some(&gate_step()),
        at(5),
    )
    .expect("step");
    let answer = gate_before_bundles(&step, &on, None, false, None, at(6)).expect_err("answered");
    assert!(
        matches!(answer.outcome, HookOutcome::Success { ref message } if message.contains("not gated")),
        "{answer:?}"
    );
}

/// The gate waits for the bundles chosen by the configuration's selector, which a Cluster's
/// annotation overrides (`key=value,…`; empty: every bundle); a bad annotation is reported and
/// waits for every bundle.
#[test]
fn the_gate_waits_for_chosen_bundles() {
    let bd = |name: &str, labels: Value| json!({"metadata": {"name": name, "labels": labels}});
    let deployments = vec![
        bd("ccm", json!({"upgrade-gate": "true", "tier": "platform"})),
        bd("cni", json!({"tier": "platform"})),
        bd("demo-app", json!({"team": "web"})),
    ];
    let names_of = |settings: &GateSettings| -> Vec<String> {
        settings
            .select(deployments.clone())
            .iter()
            .map(|bd| {
                bd["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    };
    let mut configured = config(true, false);
    configured.step_bundle_selector = Some(LabelSelector {
        match_labels: Some(BTreeMap::from([(
            "upgrade-gate".to_string(),
            "true".to_string(),
        )])),
        ..Default::default()
    });
    let hook = UpgradeHook::AfterControlPlaneUpgrade;
    let annotated = |value: &str| {
        BTreeMap::from([(
            names::UPGRADE_GATE_BUNDLES_ANNOTATION.to_string(),
            value.to_string(),
        )])
    };
    #[allow(clippy::type_complexity)]
    let rows: [(
        &str,
        &RuntimeExtensionSettings,
        BTreeMap<String, String>,
        &[&str],
        usize,
    ); 5] = [
        (
            "default: every bundle",
            &config(true, false),
            BTreeMap::new(),
            &["ccm", "cni", "demo-app"],
            0,
        ),
        (
            "the configuration's selector",
            &configured,
            BTreeMap::new(),
            &["ccm"],
            0,
        ),
        (
            "a Cluster's annotation",
            &configured,
            annotated("tier=platform"),
            &["ccm", "cni"],
            0,
        ),
        (
            "an empty annotation: every bundle",
            &configured,
            annotated(""),
            &["ccm", "cni", "demo-app"],
            0,
        ),
        (
            "a bad annotation: every bundle, reported",
            &configured,
            annotated("tier"),
            &["ccm", "cni", "demo-app"],
            1,
        ),
    ];
    for (what, config, annotations, want, problems) in rows {
        let settings = gate_settings(config, hook, true, &annotations);
        assert_eq!(names_of(&settings), want, "{what}");
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
    let ten_minutes = |steps: bool| RuntimeExtensionSettings {
        step_timeout: Duration::from_secs(600),
        ..config(steps, false)
    };
    let bcpu = UpgradeHook::BeforeControlPlaneUpgrade;
    let on = gate_settings(&ten_minutes(true), bcpu, true, &BTreeMap::new());
    let off = gate_settings(&ten_minutes(false), bcpu, true, &BTreeMap::new());
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
    let rows: [Row; 12] = [
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
            "labels applied in the future (a clock ahead): the whole settle",
            gate_step(),
            &on,
            None,
            true,
            Some(30),
            10,
            Some(10),
            None,
        ),
        (
            "a step begun in the future (a clock ahead) has not timed out",
            gate_step(),
            &on,
            None,
            false,
            None,
            -500,
            Some(RETRY_LABELS),
            None,
        ),
        (
            "a step begun further ahead than the timeout does not hold for ever",
            gate_step(),
            &on,
            None,
            false,
            None,
            -700,
            Some(0),
            Some("timeout"),
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

/// Fleet re-targeted when its BundleDeployments and their staged deployments stay the same over
/// `settle`, the first look after the Fleet Cluster was applied; any change looks again.
#[test]
fn re_targeting_needs_two_equal_looks_settle_apart() {
    let bd = |name: &str, staged: &str| json!({"metadata": {"name": name}, "spec": {"deploymentID": "s-old:1", "stagedDeploymentID": staged}});
    let settle = Duration::from_secs(10);
    let before = [bd("ccm", "s-ccm-1.33:1"), bd("cni", "s-cni:1")];
    let retargeted_ccm = [bd("ccm", "s-ccm-1.34:1"), bd("cni", "s-cni:1")];
    let added = [
        bd("ccm", "s-ccm-1.34:1"),
        bd("cni", "s-cni:1"),
        bd("csi", "s-csi:1"),
    ];
    let mut step = gate_step();
    // (what, deployments, applied at, now, retry after (None: proceed))
    #[allow(clippy::type_complexity)]
    let rows: [(&str, &[Value], Option<i64>, i64, Option<i32>); 7] = [
        ("first look", &before, Some(0), 20, Some(10)),
        ("the same, too soon", &before, Some(0), 25, Some(5)),
        (
            "Fleet re-targets a bundle",
            &retargeted_ccm,
            Some(0),
            29,
            Some(10),
        ),
        ("a bundle appears", &added, Some(0), 38, Some(10)),
        ("unchanged over settle", &added, Some(0), 48, None),
        (
            "the Fleet Cluster applied again after the look",
            &added,
            Some(50),
            60,
            Some(10),
        ),
        ("unchanged since", &added, Some(50), 70, None),
    ];
    for (what, deployments, applied, now, retry) in rows {
        let answer = retargeted(&mut step, deployments, settle, applied.map(at), at(now));
        match (answer, retry) {
            (Ok(()), None) => {}
            (
                Err(HookOutcome::Retry {
                    after_seconds,
                    message,
                }),
                Some(retry),
            ) => {
                assert_eq!(after_seconds, retry, "{what}: {message}");
                assert!(message.starts_with("giving Fleet"), "{what}: {message}");
            }
            (got, _) => panic!("{what}: {got:?}"),
        }
    }
    // A look recorded in the future (a replica whose clock is ahead) is no time waited.
    let mut ahead = gate_step();
    assert!(retargeted(&mut ahead, &added, settle, None, at(100)).is_err());
    let early = retargeted(&mut ahead, &added, settle, None, at(80));
    assert!(
        matches!(
            early,
            Err(HookOutcome::Retry {
                after_seconds: 10,
                ..
            })
        ),
        "{early:?}"
    );
    // The look is part of the record, kept by the next hook of the same step.
    let record = UpgradeStep::parse(Some(&step.to_annotation())).expect("record");
    assert_eq!(record.looked, step.looked);
    assert_ne!(targeting(&before), targeting(&retargeted_ccm));
}

/// A Cluster without a topology shows its machines' versions: the control plane's from a
/// KubeadmControlPlane (cluster-api v1.11.11 `api/controlplane/kubeadm/v1beta2`) or an
/// RKE2ControlPlane (rancher/cluster-api-provider-rke2 v0.25.0 `controlplane/api/v1beta2`,
/// versions like `v1.30.2+rke2r1`), the lower of `spec.version` and `status.version`; the
/// workers' the lowest MachineDeployment `spec.template.spec.version`.
#[test]
fn a_cluster_without_topology_shows_its_machines() {
    let kcp = |spec: &str, status: Option<&str>| {
        let mut kcp = json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2",
            "kind": "KubeadmControlPlane", "metadata": {"name": "c1-cp", "namespace": "ns"},
            "spec": {"replicas": 3, "version": spec,
                "machineTemplate": {"spec": {"infrastructureRef": {"apiGroup":
                    "infrastructure.cluster.x-k8s.io", "kind": "DockerMachineTemplate", "name": "c1-cp"}}}}});
        if let Some(status) = status {
            kcp["status"] = json!({"version": status});
        }
        kcp
    };
    let rke2 = json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "RKE2ControlPlane",
        "metadata": {"name": "c1-cp", "namespace": "ns"},
        "spec": {"replicas": 3, "version": "v1.30.2+rke2r1", "rolloutStrategy": {"type": "RollingUpdate"}},
        "status": {"version": "v1.30.2+rke2r1"}});
    let md = |version: &str, deleting: bool| {
        let mut md = json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
            "metadata": {"name": "c1-md", "namespace": "ns",
                "labels": {"cluster.x-k8s.io/cluster-name": "c1"}},
            "spec": {"clusterName": "c1", "replicas": 2,
                "template": {"spec": {"clusterName": "c1", "version": version,
                    "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io",
                        "kind": "KubeadmConfigTemplate", "name": "c1-md"}}}}}});
        if deleting {
            md["metadata"]["deletionTimestamp"] = json!("2026-11-28T10:00:00Z");
        }
        md
    };
    // (what, control plane, MachineDeployments, control plane minor, workers minor)
    #[allow(clippy::type_complexity)]
    let rows: [(&str, Value, Vec<Value>, Option<&str>, Option<&str>); 7] = [
        (
            "settled",
            kcp("v1.33.5", Some("v1.33.5")),
            vec![md("v1.33.5", false)],
            Some("1.33"),
            Some("1.33"),
        ),
        (
            "control plane rolling out: its lowest machines",
            kcp("v1.34.2", Some("v1.33.5")),
            vec![md("v1.33.5", false)],
            Some("1.33"),
            Some("1.33"),
        ),
        (
            "workers: the lowest minor, by number",
            kcp("v1.10.1", None),
            vec![md("v1.10.1", false), md("v1.9.11", false)],
            Some("1.10"),
            Some("1.9"),
        ),
        (
            "a MachineDeployment being deleted does not count",
            kcp("v1.34.2", Some("v1.34.2")),
            vec![md("v1.34.2", false), md("v1.33.5", true)],
            Some("1.34"),
            Some("1.34"),
        ),
        (
            "no MachineDeployment: the control plane's",
            kcp("v1.34.2", Some("v1.34.2")),
            vec![],
            Some("1.34"),
            Some("1.34"),
        ),
        (
            "RKE2",
            rke2.clone(),
            vec![md("v1.30.2+rke2r1", false)],
            Some("1.30"),
            Some("1.30"),
        ),
        (
            "no version yet",
            json!({"spec": {"replicas": 1}}),
            vec![md("v1.33.5", false)],
            None,
            None,
        ),
    ];
    for (what, control_plane, deployments, cp, workers) in rows {
        let view = machine_versions(&control_plane, &deployments);
        assert_eq!(
            view.as_ref()
                .map(|v| (v.control_plane.as_deref(), v.workers.as_deref())),
            cp.map(|cp| (Some(cp), workers)),
            "{what}"
        );
        if let Some(view) = view {
            assert_eq!(view.target, None, "{what}: nothing announced without hooks");
        }
    }
    let plain = ClusterView::from_json(&json!({"metadata": {"name": "c1", "namespace": "ns"},
        "spec": {"controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io",
            "kind": "RKE2ControlPlane", "name": "c1-cp"}}}))
    .expect("view");
    assert!(follows_machines(&plain));
    assert!(!follows_machines(&cluster("v1.33.5", true)), "a topology");
    let mut no_control_plane = plain.clone();
    no_control_plane.control_plane_ref = None;
    assert!(!follows_machines(&no_control_plane));
}
