use super::walk::{Deployment, PartitionDef, Strategy, Target, agents_apply, limit, walk};
use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::json;

fn int(i: i32) -> Option<IntOrString> {
    Some(IntOrString::Int(i))
}
fn text(s: &str) -> Option<IntOrString> {
    Some(IntOrString::String(s.into()))
}

/// rancher/fleet v0.16.1 `internal/cmd/controller/target/status.go` `limit`.
#[test]
fn limit_caps_integers_and_rounds_percentages_down_to_at_least_one() {
    for (count, value, expected) in [
        (5, int(3), 3),
        (5, int(9), 5),
        (5, int(-1), 0),
        (5, int(0), 0),
        (5, None, 5),
        (10, text("25%"), 2),
        (3, text("50%"), 1),
        (1, text("10%"), 1),
        (4, text("0%"), 1),
        (4, text("7"), 7),
        (0, int(0), 1),
    ] {
        assert_eq!(
            limit(count, &[value.as_ref()]),
            Ok(expected),
            "{count} {value:?}"
        );
    }
    assert!(limit(3, &[text("half").as_ref()]).is_err());
}

fn selector(key: &str, value: &str) -> LabelSelector {
    LabelSelector {
        match_labels: Some([(key.to_string(), value.to_string())].into()),
        ..Default::default()
    }
}

fn targets(labels: &[&str], id: &str) -> Vec<Target> {
    let deployed = |id: &str| Deployment {
        deployment: id.into(),
        staged: id.into(),
        applied: id.into(),
        ready: true,
    };
    labels
        .iter()
        .map(|p| Target {
            labels: [("p".to_string(), p.to_string())].into(),
            name: String::new(),
            paused: false,
            deployment: Some(deployed(id)),
        })
        .collect()
}

fn strategy(parts: &[(&str, Option<IntOrString>)]) -> Strategy {
    Strategy {
        partitions: parts
            .iter()
            .map(|(name, max)| PartitionDef {
                name: name.to_string(),
                selector: selector("p", name),
                max_unavailable: max.clone(),
            })
            .collect(),
        ..Default::default()
    }
}

fn promoted(targets: &[Target]) -> Vec<bool> {
    targets
        .iter()
        .map(|t| t.deployment.as_ref().is_some_and(|d| d.deployment == "v2"))
        .collect()
}

/// `partition.go` `UpdatePartitions`: the walk stops after the first unavailable partition
/// (`maxUnavailablePartitions` 0); later partitions are not even staged.
#[test]
fn the_walk_stops_at_the_first_unavailable_partition() {
    let mut ts = targets(&["a", "a", "b", "b"], "v1");
    let s = strategy(&[("a", int(1)), ("b", int(1))]);
    let status = walk(&s, &mut ts, "v2").unwrap();
    assert_eq!(promoted(&ts), [true, false, false, false]);
    assert_eq!(
        ts[2].deployment.as_ref().unwrap().staged,
        "v1",
        "b not staged"
    );
    assert_eq!((status[0].unavailable, status[0].max_unavailable), (2, 1));
    // Once no more than maxUnavailable of `a` are in flight, the walk goes on to `b`.
    agents_apply(&mut ts, |_| false);
    walk(&s, &mut ts, "v2").unwrap();
    assert_eq!(promoted(&ts), [true, true, true, false]);
}

/// `rollout.go` `manualPartition`: a cluster no partition matches is never staged (fleet #3828).
#[test]
fn a_cluster_in_no_partition_is_never_staged() {
    let mut ts = targets(&["a", "z"], "v1");
    let s = strategy(&[("a", None)]);
    for _ in 0..3 {
        walk(&s, &mut ts, "v2").unwrap();
        agents_apply(&mut ts, |_| false);
    }
    assert_eq!(promoted(&ts), [true, false]);
    assert_eq!(ts[1].deployment.as_ref().unwrap().staged, "v1");
}

/// `status.go` `limit` and `partition.go` `updateDeploymentFromStaged`: `maxUnavailable: 0`
/// freezes healthy clusters, while a new one and a broken one still get the new version.
#[test]
fn max_unavailable_zero_freezes_only_healthy_clusters() {
    let mut ts = targets(&["held", "held", "held"], "v1");
    ts[1].deployment.as_mut().unwrap().ready = false;
    ts[2].deployment = None;
    let s = strategy(&[("held", int(0))]);
    walk(&s, &mut ts, "v2").unwrap();
    assert_eq!(promoted(&ts), [false, true, true]);
    let healthy = ts[0].deployment.as_ref().unwrap();
    assert!(
        healthy.out_of_sync() && !healthy.unavailable(),
        "OutOfSync: staged, not promoted"
    );
}

/// `partition.go` `updatePartitionStatus`: a partition no larger than its `maxUnavailable`
/// never holds the next one; a one-cluster canary with `maxUnavailable: 1` gates nothing.
#[test]
fn a_partition_no_larger_than_its_max_unavailable_gates_nothing() {
    let mut ts = targets(&["canary", "rest", "rest", "rest"], "v1");
    let s = strategy(&[("canary", int(1)), ("rest", text("100%"))]);
    walk(&s, &mut ts, "v2").unwrap();
    assert_eq!(promoted(&ts), [true, true, true, true]);
    // The same canary with our hold on the rest: the held partition freezes them.
    let mut ts = targets(&["canary", "held", "held", "held"], "v1");
    let s = strategy(&[("canary", int(1)), ("held", int(0))]);
    walk(&s, &mut ts, "v2").unwrap();
    assert_eq!(promoted(&ts), [true, false, false, false]);
}

/// rancher/fleet v0.16.1 `internal/cmd/controller/target/builder.go:173` sorts the targets by
/// cluster name before the partitions take them; `partition.go:21-23,40` creates at most
/// `rolloutStrategy.maxNew` BundleDeployments per walk (`target.go:30` `DefaultMaxNew` 50;
/// `NewlyCreated` starts at 0 each reconcile, `reconciler/bundle_status.go:15`), in that order.
#[test]
#[allow(clippy::type_complexity)]
fn the_walk_takes_clusters_by_name_and_creates_at_most_max_new() {
    let many: Vec<String> = (0..51).rev().map(|i| format!("n{i:02}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    type Case<'a> = (&'a str, &'a [&'a str], bool, Value, &'a [&'a str]);
    let cases: [Case; 5] = [
        (
            "the first by name goes",
            &["b", "a", "c"],
            true,
            json!({"maxUnavailable": 1}),
            &["b", "c"],
        ),
        (
            "maxNew 2: a and b",
            &["c", "b", "a"],
            false,
            json!({"maxNew": 2}),
            &["c"],
        ),
        (
            "maxNew 0: none",
            &["a"],
            false,
            json!({"maxNew": 0}),
            &["a"],
        ),
        (
            "maxNew negative: none",
            &["a"],
            false,
            json!({"maxNew": -1}),
            &["a"],
        ),
        ("50 by default", &many, false, json!({}), &["n50"]),
    ];
    for (case, names, deployed, mut strategy, behind) in cases {
        strategy["partitions"] = json!([{"name": "a", "clusterSelector": {}}]);
        let s = Strategy::from_json(&strategy).unwrap();
        let mut ts: Vec<Target> = (names.iter())
            .map(|n| Target {
                name: n.to_string(),
                deployment: deployed.then(|| targets(&["a"], "v1").remove(0).deployment.unwrap()),
                ..Target::default()
            })
            .collect();
        walk(&s, &mut ts, "v2").unwrap();
        let left: Vec<&str> = (names.iter().zip(promoted(&ts)))
            .filter(|(_, p)| !p)
            .map(|(n, _)| *n)
            .collect();
        assert_eq!(left, behind, "{case}");
    }
}

fn rollout() -> Rollout {
    Rollout {
        wave_variable: Some("wave".into()),
        waves: vec!["canary".into(), "early".into(), "late".into()],
        default_wave: 2,
        soak: Duration::from_secs(600),
        failing_clusters: 1,
        kubernetes_upgrades: false,
    }
}

fn view(annotations: &[(&str, &str)], variables: Value) -> ClusterView {
    let mut v = ClusterView::from_json(&serde_json::json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": "c", "namespace": "ns"},
        "spec": {"topology": {"classRef": {"name": "cls"}, "version": "v1.33.1", "variables": variables}},
    }))
    .unwrap();
    v.annotations = annotations
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    v
}

#[test]
fn the_wave_comes_from_the_annotation_then_the_variable_then_the_default() {
    let r = rollout();
    let ann = names::ROLLOUT_WAVE_ANNOTATION;
    let var = serde_json::json!([{"name": "wave", "value": "canary"}]);
    assert_eq!(r.wave_of(&view(&[], var.clone())), (0, None));
    assert_eq!(r.wave_of(&view(&[(ann, "early")], var)), (1, None));
    assert_eq!(r.wave_of(&view(&[], serde_json::json!([]))), (2, None));
    let (wave, problem) = r.wave_of(&view(
        &[],
        serde_json::json!([{"name": "wave", "value": "first"}]),
    ));
    assert_eq!(wave, 2);
    assert!(
        problem
            .unwrap()
            .contains("topology variable \"wave\": wave \"first\" is not one of")
    );
}

#[test]
fn variables_become_labels_when_they_are_label_values() {
    let variables: BTreeMap<String, Value> = serde_json::from_value(serde_json::json!({
        "region": "eu-west-1", "replicas": 3, "tier": "not a label", "cfg": {"a": 1},
    }))
    .unwrap();
    let names: Vec<String> = ["region", "replicas", "tier", "cfg", "absent"]
        .map(String::from)
        .into();
    let (labels, problems) = variable_labels(&names, &variables);
    assert_eq!(
        labels,
        StringMap::from([
            (
                "variable.fleet.addons.cluster.x-k8s.io/region".into(),
                "eu-west-1".into()
            ),
            (
                "variable.fleet.addons.cluster.x-k8s.io/replicas".into(),
                "3".into()
            ),
        ])
    );
    assert_eq!(problems.len(), 2);
    assert!(problems[0].contains("\"tier\""), "{problems:?}");
}

fn at(minutes: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + minutes * 60).unwrap()
}

fn observed(entries: &[(&str, usize, usize)]) -> Gates {
    entries
        .iter()
        .map(|(wave, rolling, failing)| {
            let gate = WaveGate {
                rolling: *rolling,
                failing: *failing,
                soak_until: None,
            };
            (("ns/cls".to_string(), wave.to_string()), gate)
        })
        .collect()
}

#[test]
fn a_wave_soaks_after_it_rolled_out_and_not_when_first_seen_ready() {
    let soak = Duration::from_secs(600);
    let first = advance(&Gates::new(), &observed(&[("canary", 0, 0)]), soak, at(0));
    assert!(first.is_empty(), "ready at start: no soak");
    let rolling = advance(&first, &observed(&[("canary", 1, 0)]), soak, at(1));
    let ready = advance(&rolling, &observed(&[("canary", 0, 0)]), soak, at(3));
    let gate = &ready[&("ns/cls".to_string(), "canary".to_string())];
    assert_eq!(gate.soak_until, Some(at(13)));
    let later = advance(&ready, &observed(&[("canary", 0, 0)]), soak, at(8));
    assert_eq!(later, ready, "the soak keeps its end");
    assert!(advance(&later, &observed(&[("canary", 0, 0)]), soak, at(13)).is_empty());
}

#[test]
fn a_release_ends_the_soaks_of_its_class() {
    let soak = Duration::from_secs(600);
    let rolling = observed(&[("canary", 1, 0), ("early", 1, 0)]);
    let mut gates = advance(
        &rolling,
        &observed(&[("canary", 0, 0), ("early", 1, 0)]),
        soak,
        at(0),
    );
    let other = ("ns/other".to_string(), "canary".to_string());
    let other_gate = WaveGate {
        soak_until: Some(at(10)),
        ..WaveGate::default()
    };
    gates.insert(other.clone(), other_gate.clone());
    let released = std::collections::BTreeSet::from(["ns/cls".to_string()]);
    release(&mut gates, &released);
    let key = |wave: &str| ("ns/cls".to_string(), wave.to_string());
    assert!(
        !gates.contains_key(&key("canary")),
        "the soak ended: {gates:?}"
    );
    assert_eq!(
        gates[&key("early")].rolling,
        1,
        "a wave rolling still holds"
    );
    assert_eq!(gates[&other], other_gate, "another class soaks on");
    // The annotation removed: the soak does not come back.
    let later = advance(
        &gates,
        &observed(&[("canary", 0, 0), ("early", 1, 0)]),
        soak,
        at(1),
    );
    assert!(!later.contains_key(&key("canary")), "{later:?}");
}

#[test]
fn holds_in_order_of_precedence() {
    let r = rollout();
    let none = Facts::default();
    let soaking = advance(
        &observed(&[("canary", 1, 0)]),
        &observed(&[("canary", 0, 0)]),
        r.soak,
        at(0),
    );
    let failing = observed(&[("canary", 0, 1)]);
    let rolling = observed(&[("early", 2, 0)]);
    let manual = Facts {
        manual: Some("INC-42".into()),
        upgrading: true,
        ..Facts::default()
    };
    let empty = Gates::new();
    let up = Facts {
        upgrading: true,
        ..none.clone()
    };
    let down = Facts {
        unavailable: true,
        ..none.clone()
    };
    let released = Facts {
        released: true,
        ..none.clone()
    };
    #[allow(clippy::type_complexity)]
    let cases: Vec<(usize, &Facts, &Gates, Option<(Hold, &str)>)> = vec![
        (0, &none, &failing, None),
        (
            1,
            &none,
            &failing,
            Some((
                Hold::WaveFailing,
                "wave early waits for canary: at least 1 of its clusters have failing bundles",
            )),
        ),
        (
            2,
            &none,
            &rolling,
            Some((
                Hold::Soaking,
                "wave late waits for early: it is rolling out",
            )),
        ),
        (1, &none, &rolling, None),
        (
            1,
            &none,
            &soaking,
            Some((
                Hold::Soaking,
                "wave early waits for canary: soaking until 2027-01-15T08:10:00Z",
            )),
        ),
        (
            2,
            &manual,
            &empty,
            Some((
                Hold::Manual,
                "held by annotation fleet.addons.cluster.x-k8s.io/rollout-hold: INC-42",
            )),
        ),
        (
            0,
            &up,
            &empty,
            Some((Hold::Upgrading, "a Kubernetes upgrade is under way")),
        ),
        (
            0,
            &down,
            &empty,
            Some((
                Hold::Unavailable,
                "Cluster API reports the Cluster not Available",
            )),
        ),
        (1, &released, &soaking, None),
    ];
    for (wave, facts, gates, expected) in cases {
        let got = hold(&r, "ns/cls", wave, facts, gates, at(1));
        let got = got.as_ref().map(|h| (h.hold, h.message.as_str()));
        assert_eq!(got, expected, "wave {wave} {facts:?} {gates:?}");
    }
    // Another class's waves hold nothing here.
    assert_eq!(hold(&r, "ns/other", 1, &none, &failing, at(1)), None);
}

#[test]
fn at_least_failing_clusters_fail_a_wave() {
    let r = Rollout {
        failing_clusters: 2,
        ..rollout()
    };
    let one = observed(&[("canary", 0, 1)]);
    assert_eq!(
        hold(&r, "ns/cls", 1, &Facts::default(), &one, at(0))
            .unwrap()
            .hold,
        Hold::Soaking
    );
    let two = observed(&[("canary", 0, 2)]);
    assert_eq!(
        hold(&r, "ns/cls", 1, &Facts::default(), &two, at(0))
            .unwrap()
            .hold,
        Hold::WaveFailing
    );
}

fn summary(value: Value) -> ClusterStatus {
    serde_json::from_value(serde_json::json!({"summary": value})).unwrap()
}

#[test]
fn progress_and_update_pending_from_fleet_summary() {
    let ready = summary(serde_json::json!({"desiredReady": 2, "ready": 2}));
    let pending = summary(
        serde_json::json!({"desiredReady": 2, "ready": 1, "outOfSync": 1,
        "nonReadyResources": [{"name": "cni", "bundleState": "OutOfSync"}]}),
    );
    let waiting = summary(
        serde_json::json!({"desiredReady": 2, "ready": 1, "waitApplied": 1,
        "nonReadyResources": [{"name": "cni", "bundleState": "WaitApplied"}]}),
    );
    let failing = summary(
        serde_json::json!({"desiredReady": 2, "ready": 1, "errApplied": 1,
        "nonReadyResources": [{"name": "cni", "bundleState": "ErrApplied"}]}),
    );
    let drifted = summary(
        serde_json::json!({"desiredReady": 2, "ready": 1, "modified": 1,
        "nonReadyResources": [{"name": "cni", "bundleState": "Modified"}]}),
    );
    let cases = [
        (&ready, Progress::Ready, false),
        (&drifted, Progress::Ready, false),
        (&pending, Progress::Rolling, true),
        (&waiting, Progress::Rolling, false),
        (&failing, Progress::Failing, false),
    ];
    for (status, expected, update_pending) in cases {
        assert_eq!(progress(Some(status)), expected, "{status:?}");
        assert_eq!(
            only_update_pending(Some(status)),
            update_pending,
            "{status:?}"
        );
    }
}

#[test]
fn unavailable_for_reasons_other_than_fleet_ready() {
    let status = |message: &str| serde_json::json!({"conditions": [{"type": "Available", "status": "False", "reason": "NotAvailable", "message": message}]});
    let only_ours = status("* FleetReady: 1 of 3 Fleet bundles not ready");
    let theirs = status(
        "* FleetReady: 1 of 3 Fleet bundles not ready\n* WorkersAvailable:\n  * MachineDeployment md-0: 0 available replicas",
    );
    let v1beta1 = serde_json::json!({"v1beta2": status("* ControlPlaneAvailable: not yet")});
    assert!(!unavailable(Some(&only_ours)));
    assert!(unavailable(Some(&theirs)));
    assert!(unavailable(Some(&v1beta1)));
    assert!(!unavailable(None));
}

/// The printed strategy, played through Fleet's walk: the held partition freezes the later
/// waves while the canary wave rolls out.
#[test]
fn the_printed_strategy_parses_and_holds_the_held() {
    let text = rollout_strategy(&rollout());
    let yaml: Value = serde_yaml::from_str(&text).unwrap();
    let parts = yaml["rolloutStrategy"]["partitions"].as_array().unwrap();
    let names: Vec<&str> = parts.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["canary", "early", "late", "other", "held"]);
    let s = Strategy {
        partitions: parts
            .iter()
            .map(|p| PartitionDef {
                name: p["name"].as_str().unwrap().into(),
                selector: serde_json::from_value(p["clusterSelector"].clone()).unwrap(),
                max_unavailable: serde_json::from_value(p["maxUnavailable"].clone()).ok(),
            })
            .collect(),
        ..Default::default()
    };
    let label = |wave: &str, held: bool| {
        let mut labels =
            BTreeMap::from([(names::ROLLOUT_WAVE_LABEL.to_string(), wave.to_string())]);
        if held {
            labels.insert(names::ROLLOUT_HOLD_LABEL.into(), "Soaking".into());
        }
        labels
    };
    let mut ts: Vec<Target> = [
        label("canary", false),
        label("early", true),
        label("late", true),
        BTreeMap::new(),
    ]
    .into_iter()
    .map(|labels| Target {
        labels,
        name: String::new(),
        paused: false,
        deployment: Some(Deployment {
            deployment: "v1".into(),
            staged: "v1".into(),
            applied: "v1".into(),
            ready: true,
        }),
    })
    .collect();
    walk(&s, &mut ts, "v2").unwrap();
    assert_eq!(
        promoted(&ts),
        [true, false, false, true],
        "the catch-all takes the unlabelled"
    );
}

/// Fleet reads fleet.yaml and HelmOps through YAML 1.1 (sigs.k8s.io/yaml): a wave named `1` or
/// `no` (valid label values) printed bare is a number or a boolean, which a partition's `name`
/// and `matchLabels` (strings: rancher/fleet v0.16.1 `bundle_types.go` `Partition`) refuse.
#[test]
fn the_printed_strategy_quotes_wave_names() {
    let r = Rollout {
        waves: vec!["1".into(), "2".into(), "no".into()],
        ..rollout()
    };
    let text = rollout_strategy(&r);
    let yaml: Value = serde_yaml::from_str(&text).unwrap();
    for p in yaml["rolloutStrategy"]["partitions"].as_array().unwrap() {
        assert!(p["name"].is_string(), "{p}");
        let _: LabelSelector = serde_json::from_value(p["clusterSelector"].clone()).unwrap();
    }
    assert!(
        text.contains(&format!("{}: \"no\"", names::ROLLOUT_WAVE_LABEL)),
        "{text}"
    );
    assert!(text.contains("values: [\"1\", \"2\", \"no\"]"), "{text}");
}

/// The printed strategy on the first walk after a change, before caapf has seen anything and
/// held a wave (`partition.go` `UpdatePartitions`): a one-cluster canary does not stop the walk,
/// so the first cluster of the next wave updates with it; a two-cluster canary stops it.
#[test]
fn a_one_cluster_canary_lets_the_next_wave_start_in_the_same_walk() {
    let yaml: Value = serde_yaml::from_str(&rollout_strategy(&rollout())).unwrap();
    let parts = yaml["rolloutStrategy"]["partitions"].as_array().unwrap();
    let s = Strategy {
        partitions: (parts.iter())
            .map(|p| PartitionDef {
                name: p["name"].as_str().unwrap().into(),
                selector: serde_json::from_value(p["clusterSelector"].clone()).unwrap(),
                max_unavailable: serde_json::from_value(p["maxUnavailable"].clone()).ok(),
            })
            .collect(),
        ..Default::default()
    };
    let fleet = |waves: &[&str]| -> Vec<Target> {
        (waves.iter())
            .map(|w| Target {
                labels: [(names::ROLLOUT_WAVE_LABEL.to_string(), w.to_string())].into(),
                name: String::new(),
                paused: false,
                deployment: Some(Deployment {
                    deployment: "v1".into(),
                    staged: "v1".into(),
                    applied: "v1".into(),
                    ready: true,
                }),
            })
            .collect()
    };
    let mut ts = fleet(&["canary", "early", "early", "early", "late"]);
    walk(&s, &mut ts, "v2").unwrap();
    assert_eq!(promoted(&ts), [true, true, false, false, false]);
    let mut ts = fleet(&["canary", "canary", "early", "early", "late"]);
    walk(&s, &mut ts, "v2").unwrap();
    assert_eq!(promoted(&ts), [true, false, false, false, false]);
}

/// A variable whose name makes no label key name (63 characters at most) gets no label: one
/// invalid label would make the API server refuse the whole Fleet Cluster write.
#[test]
fn a_variable_name_that_makes_no_label_key_gets_no_label() {
    let long = "v".repeat(64);
    let variables: BTreeMap<String, Value> = [
        (long.clone(), Value::from("x")),
        ("a b".into(), Value::from("y")),
    ]
    .into();
    let (labels, problems) = variable_labels(&[long, "a b".into()], &variables);
    assert!(labels.is_empty(), "{labels:?}");
    assert_eq!(problems.len(), 2, "{problems:?}");
}
