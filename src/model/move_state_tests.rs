//! Every transition of the move state machine, restarts at every step of a successful and of a
//! failed move, opt-in rules and Fleet's Bundle readiness.

use super::*;
use crate::model::move_decide::*;
use serde_json::json;

const T0: i64 = 1_000_000;

fn obs() -> Observed {
    Observed {
        opted_in: true,
        fleet_cluster_ready: true,
        now: T0,
        ..Observed::default()
    }
}

/// Once paused, with the Bundles published as wanted and Fleet ready.
fn ready() -> Observed {
    Observed {
        spec_paused: true,
        bundles: BundlesStatus::Ready,
        ..obs()
    }
}

fn failed_with_copies() -> MoveState {
    MoveState {
        copies_on_target: true,
        ..MoveState::new(
            Phase::Failed,
            T0 - 10,
            false,
            "timed out waiting for the target",
        )
    }
}

fn warn() -> Action {
    Action::Warn("MoveSourceUnpaused", String::new())
}

fn state(phase: Phase, paused_by_move: bool) -> MoveState {
    MoveState::new(phase, T0 - 10, paused_by_move, "")
}

fn waiting() -> BundlesStatus {
    BundlesStatus::Waiting("Bundle c1-move-01 ready on 0/1 clusters".into())
}

const PAUSE: Action = Action::SetSourcePaused(true);
const UNPAUSE: Action = Action::SetSourcePaused(false);
const PUBLISH: Action = Action::ApplyBundles {
    target_paused: true,
};
const RESUME: Action = Action::ApplyBundles {
    target_paused: false,
};
const SECRETS: Action = Action::WriteSecrets;
const LINK: Action = Action::LinkOwners;
const FENCE: Action = Action::FenceSource;

#[test]
fn transitions() {
    let t = Timeouts::default();
    let late = T0 + 31 * 60;
    #[allow(clippy::type_complexity)]
    let cases: Vec<(
        &str,
        Option<MoveState>,
        Observed,
        Option<(Phase, bool)>,
        Vec<Action>,
    )> = vec![
        (
            "not opted in: nothing",
            None,
            Observed {
                opted_in: false,
                ..obs()
            },
            None,
            vec![],
        ),
        (
            "opt in starts Pending",
            None,
            obs(),
            Some((Phase::Pending, false)),
            vec![],
        ),
        (
            "Pending waits for the Fleet Cluster",
            Some(MoveState::new(
                Phase::Pending,
                T0,
                false,
                "waiting for the Fleet Cluster",
            )),
            Observed {
                fleet_cluster_ready: false,
                ..obs()
            },
            None,
            vec![],
        ),
        (
            "Pending pauses when Fleet is ready",
            Some(state(Phase::Pending, false)),
            obs(),
            Some((Phase::Pausing, true)),
            vec![PAUSE],
        ),
        (
            "Pending refuses a Cluster paused by someone else",
            Some(state(Phase::Pending, false)),
            Observed {
                spec_paused: true,
                ..obs()
            },
            Some((Phase::Failed, false)),
            vec![],
        ),
        (
            "Pending refuses the paused annotation",
            Some(state(Phase::Pending, false)),
            Observed {
                paused_annotation: true,
                ..obs()
            },
            Some((Phase::Failed, false)),
            vec![],
        ),
        (
            "Pausing re-issues the pause",
            Some(state(Phase::Pausing, true)),
            obs(),
            None,
            vec![PAUSE],
        ),
        (
            "Pausing done",
            Some(state(Phase::Pausing, true)),
            Observed {
                spec_paused: true,
                ..obs()
            },
            Some((Phase::WaitingUnblocked, true)),
            vec![],
        ),
        (
            "unblocked: publish paused copies",
            Some(state(Phase::WaitingUnblocked, true)),
            Observed {
                spec_paused: true,
                ..obs()
            },
            Some((Phase::Publishing, true)),
            vec![SECRETS, PUBLISH],
        ),
        (
            "blocked: wait",
            Some(state(Phase::WaitingUnblocked, true)),
            Observed {
                spec_paused: true,
                blocking: vec!["Machine default/m".into()],
                ..obs()
            },
            Some((Phase::WaitingUnblocked, true)),
            vec![],
        ),
        (
            "blocked too long: roll back",
            Some(state(Phase::WaitingUnblocked, true)),
            Observed {
                spec_paused: true,
                blocking: vec!["Machine default/m".into()],
                now: late,
                ..obs()
            },
            Some((Phase::Failed, true)),
            vec![UNPAUSE],
        ),
        (
            "someone unpaused the source while waiting",
            Some(state(Phase::WaitingUnblocked, true)),
            obs(),
            Some((Phase::Failed, false)),
            vec![],
        ),
        (
            "Publishing re-applies missing Bundles",
            Some(state(Phase::Publishing, true)),
            Observed {
                spec_paused: true,
                ..obs()
            },
            None,
            vec![SECRETS, PUBLISH],
        ),
        (
            "Publishing done",
            Some(state(Phase::Publishing, true)),
            Observed {
                spec_paused: true,
                bundles: waiting(),
                ..obs()
            },
            Some((Phase::WaitingTarget, true)),
            vec![SECRETS, PUBLISH],
        ),
        (
            "WaitingTarget records why it waits",
            Some(state(Phase::WaitingTarget, true)),
            Observed {
                spec_paused: true,
                bundles: waiting(),
                ..obs()
            },
            Some((Phase::WaitingTarget, true)),
            vec![PUBLISH],
        ),
        (
            "WaitingTarget recreates deleted Bundles",
            Some(state(Phase::WaitingTarget, true)),
            Observed {
                spec_paused: true,
                ..obs()
            },
            Some((Phase::WaitingTarget, true)),
            vec![PUBLISH],
        ),
        (
            "target ready: restore the owner references",
            Some(state(Phase::WaitingTarget, true)),
            ready(),
            Some((Phase::Linking, true)),
            vec![LINK],
        ),
        (
            "Bundles ready, Secrets not yet: write them",
            Some(state(Phase::WaitingTarget, true)),
            Observed {
                secrets_pending: 2,
                ..ready()
            },
            Some((Phase::WaitingTarget, true)),
            vec![SECRETS, PUBLISH],
        ),
        (
            "Bundles ready, the target unreachable: wait",
            Some(state(Phase::WaitingTarget, true)),
            Observed {
                target_error: Some("its API server cannot be reached".into()),
                secrets_pending: 2,
                ..ready()
            },
            Some((Phase::WaitingTarget, true)),
            vec![PUBLISH],
        ),
        (
            "Linking re-issues until every reference is there",
            Some(state(Phase::Linking, true)),
            Observed {
                links_pending: Some("3 owner reference(s) to restore".into()),
                ..ready()
            },
            Some((Phase::Linking, true)),
            vec![LINK, PUBLISH],
        ),
        (
            "linked: fence the source",
            Some(state(Phase::Linking, true)),
            Observed {
                unfenced: 4,
                ..ready()
            },
            Some((Phase::FencingSource, true)),
            vec![FENCE],
        ),
        (
            "Linking too long: roll back",
            Some(state(Phase::Linking, true)),
            Observed {
                links_pending: Some("owner X is not on the target yet".into()),
                now: late,
                ..ready()
            },
            Some((Phase::Failed, true)),
            vec![UNPAUSE, Action::DeleteBundles],
        ),
        (
            "FencingSource re-issues the fence",
            Some(state(Phase::FencingSource, true)),
            Observed {
                unfenced: 4,
                opted_in: false,
                ..ready()
            },
            Some((Phase::FencingSource, true)),
            vec![FENCE],
        ),
        (
            "fenced: resume the copies",
            Some(state(Phase::FencingSource, true)),
            ready(),
            Some((Phase::ResumingTarget, true)),
            vec![RESUME],
        ),
        (
            "target not ready in time: roll back",
            Some(state(Phase::WaitingTarget, true)),
            Observed {
                spec_paused: true,
                bundles: waiting(),
                now: late,
                ..obs()
            },
            Some((Phase::Failed, true)),
            vec![UNPAUSE, Action::DeleteBundles],
        ),
        (
            "opt-out before the target is ready: roll back",
            Some(state(Phase::WaitingTarget, true)),
            Observed {
                opted_in: false,
                spec_paused: true,
                bundles: waiting(),
                ..obs()
            },
            Some((Phase::Failed, true)),
            vec![UNPAUSE, Action::DeleteBundles],
        ),
        (
            "graph error before the target is ready: roll back",
            Some(state(Phase::Publishing, true)),
            Observed {
                graph_error: Some("boom".into()),
                spec_paused: true,
                ..obs()
            },
            Some((Phase::Failed, true)),
            vec![UNPAUSE],
        ),
        (
            "ResumingTarget waits, never rolls back",
            Some(state(Phase::ResumingTarget, true)),
            Observed {
                opted_in: false,
                spec_paused: true,
                bundles: waiting(),
                graph_error: Some("boom".into()),
                ..obs()
            },
            Some((Phase::ResumingTarget, true)),
            vec![RESUME],
        ),
        (
            "ResumingTarget too long: Stalled, still never rolls back",
            Some(state(Phase::ResumingTarget, true)),
            Observed {
                spec_paused: true,
                bundles: waiting(),
                now: late,
                ..obs()
            },
            Some((Phase::Stalled, true)),
            vec![RESUME],
        ),
        (
            "Stalled keeps waiting",
            Some(state(Phase::Stalled, true)),
            Observed {
                spec_paused: true,
                bundles: waiting(),
                now: late,
                ..obs()
            },
            None,
            vec![RESUME],
        ),
        (
            "someone unpauses the source while the target resumes: paused again",
            Some(state(Phase::ResumingTarget, true)),
            Observed {
                spec_paused: false,
                bundles: waiting(),
                ..obs()
            },
            Some((Phase::ResumingTarget, true)),
            vec![PAUSE, warn(), RESUME],
        ),
        (
            "resumed: Moved, the Bundles removed",
            Some(state(Phase::ResumingTarget, true)),
            ready(),
            Some((Phase::Moved, true)),
            vec![Action::DeleteBundles],
        ),
        (
            "Stalled, then ready: Moved",
            Some(state(Phase::Stalled, true)),
            ready(),
            Some((Phase::Moved, true)),
            vec![Action::DeleteBundles],
        ),
        (
            "Moved removes Bundles left by a restart",
            Some(state(Phase::Moved, true)),
            Observed {
                opted_in: false,
                spec_paused: true,
                bundles: waiting(),
                ..obs()
            },
            None,
            vec![Action::DeleteBundles],
        ),
        (
            "Moved is quiet",
            Some(state(Phase::Moved, true)),
            Observed {
                opted_in: false,
                spec_paused: true,
                ..obs()
            },
            None,
            vec![],
        ),
        (
            "a moved source unpaused and unfenced: paused and fenced again",
            Some(state(Phase::Moved, true)),
            Observed {
                spec_paused: false,
                unfenced: 2,
                ..obs()
            },
            None,
            vec![PAUSE, warn(), FENCE],
        ),
        (
            "Pending waits for provisioning, nothing paused",
            Some(state(Phase::Pending, false)),
            Observed {
                not_provisioned: vec!["Machine default/m has no nodeRef yet".into()],
                ..obs()
            },
            Some((Phase::Pending, false)),
            vec![],
        ),
        (
            "not provisioned once paused: roll back",
            Some(state(Phase::WaitingUnblocked, true)),
            Observed {
                spec_paused: true,
                not_provisioned: vec!["Machine default/m has no nodeRef yet".into()],
                ..obs()
            },
            Some((Phase::Failed, true)),
            vec![UNPAUSE],
        ),
        (
            "a shared owner refuses the move before anything is paused",
            Some(state(Phase::Pending, false)),
            Observed {
                graph_error: Some("InClusterIPPool default/pool is shared".into()),
                ..obs()
            },
            Some((Phase::Failed, false)),
            vec![],
        ),
        (
            "Failed removes the Bundles before the copies",
            Some(failed_with_copies()),
            Observed {
                bundles: waiting(),
                copies_left: 3,
                ..obs()
            },
            None,
            vec![Action::DeleteBundles],
        ),
        (
            "Failed removes the copies once the Bundles are gone",
            Some(failed_with_copies()),
            Observed {
                copies_left: 3,
                ..obs()
            },
            None,
            vec![Action::RemoveCopies],
        ),
        (
            "Failed says when the target cannot be cleaned",
            Some(failed_with_copies()),
            Observed {
                copies_left: 3,
                target_error: Some("its API server cannot be reached".into()),
                ..obs()
            },
            Some((Phase::Failed, false)),
            vec![],
        ),
        (
            "Failed is done once no copy is left",
            Some(failed_with_copies()),
            obs(),
            Some((Phase::Failed, false)),
            vec![],
        ),
        (
            "Failed finishes an interrupted rollback",
            Some(state(Phase::Failed, true)),
            Observed {
                spec_paused: true,
                bundles: waiting(),
                ..obs()
            },
            None,
            vec![UNPAUSE, Action::DeleteBundles],
        ),
        (
            "Failed forgets the pause once it is gone",
            Some(state(Phase::Failed, true)),
            obs(),
            Some((Phase::Failed, false)),
            vec![],
        ),
        (
            "Failed never unpauses a pause it did not make",
            Some(state(Phase::Failed, false)),
            Observed {
                spec_paused: true,
                ..obs()
            },
            None,
            vec![],
        ),
    ];
    for (name, current, observed, want_record, want_actions) in cases {
        let mut d = decide_move(current.as_ref(), &observed, &t);
        for action in &mut d.actions {
            if let Action::Warn(_, message) = action {
                assert!(!message.is_empty(), "{name}");
                message.clear();
            }
        }
        assert_eq!(
            d.record.as_ref().map(|s| (s.phase, s.paused_by_move)),
            want_record,
            "{name}: record {:?}",
            d.record
        );
        assert_eq!(d.actions, want_actions, "{name}");
        let terminal = d
            .record
            .as_ref()
            .or(current.as_ref())
            .is_some_and(|s| matches!(s.phase, Phase::Moved | Phase::Failed));
        let settled = d
            .record
            .as_ref()
            .or(current.as_ref())
            .is_some_and(|s| s.phase == Phase::Failed && s.copies_on_target);
        if settled {
            assert_eq!(d.requeue, Some(RECHECK), "{name}: copies left, look again");
        }
        if !terminal && (current.is_some() || observed.opted_in) {
            assert_eq!(
                d.requeue,
                Some(RECHECK),
                "{name}: waiting phases look again"
            );
        }
    }
}

#[test]
fn failures_say_why() {
    let d = decide_move(
        Some(&state(Phase::WaitingTarget, true)),
        &Observed {
            spec_paused: true,
            bundles: waiting(),
            now: T0 + 31 * 60,
            ..obs()
        },
        &Timeouts::default(),
    );
    assert_eq!(
        d.record.unwrap().message,
        "timed out waiting for the target: Bundle c1-move-01 ready on 0/1 clusters"
    );
}

/// A management cluster, Fleet and the target, as far as the state machine sees them.
#[derive(Clone, Debug)]
struct World {
    state: Option<MoveState>,
    spec_paused: bool,
    /// `Some(paused)`: the Bundles exist with copies paused or not.
    bundles: Option<bool>,
    /// Fleet makes applied Bundles ready (and their copies appear on the target).
    target_works: bool,
    /// Copies of the move on the target (from the Bundles or the Secrets written).
    copies: bool,
    secrets_written: bool,
    linked: bool,
    fenced: bool,
    /// The copies were published unpaused once.
    resumed: bool,
    now: i64,
}

impl World {
    fn new(target_works: bool) -> Self {
        Self {
            state: None,
            spec_paused: false,
            bundles: None,
            target_works,
            copies: false,
            secrets_written: false,
            linked: false,
            fenced: false,
            resumed: false,
            now: T0,
        }
    }

    fn observe(&self) -> Observed {
        let want_paused = !self
            .state
            .as_ref()
            .is_some_and(|s| s.phase.target_took_over());
        let bundles = match self.bundles {
            None => BundlesStatus::Missing,
            Some(p) if p != want_paused => BundlesStatus::Waiting("not updated".into()),
            Some(_) if self.target_works => BundlesStatus::Ready,
            Some(_) => {
                BundlesStatus::Waiting("ErrApplied: no matches for kind CoreProvider".into())
            }
        };
        Observed {
            spec_paused: self.spec_paused,
            bundles,
            secrets_pending: usize::from(!self.secrets_written) * 3,
            links_pending: (!self.linked).then(|| "5 owner reference(s) to restore".into()),
            unfenced: usize::from(!self.fenced) * 7,
            copies_left: usize::from(self.copies) * 9,
            now: self.now,
            ..obs()
        }
    }

    /// One reconcile; with `crash`, the provider stops after recording the state.
    fn step(&mut self, crash: bool) {
        let d = decide_move(self.state.as_ref(), &self.observe(), &Timeouts::default());
        if let Some(record) = d.record {
            self.state = Some(record);
        }
        self.now += 60;
        if crash {
            return;
        }
        for action in d.actions {
            match action {
                Action::SetSourcePaused(p) => self.spec_paused = p,
                Action::ApplyBundles { target_paused } => {
                    self.bundles = Some(target_paused);
                    self.resumed |= !target_paused;
                    self.copies |= self.target_works;
                }
                Action::WriteSecrets => {
                    self.secrets_written = true;
                    self.copies = true;
                }
                Action::LinkOwners => self.linked = true,
                Action::FenceSource => self.fenced = true,
                Action::DeleteBundles => self.bundles = None,
                Action::RemoveCopies => {
                    self.copies = false;
                    self.secrets_written = false;
                }
                Action::Warn(..) => {}
            }
        }
    }

    fn phase(&self) -> Option<Phase> {
        self.state.as_ref().map(|s| s.phase)
    }
}

/// Runs to a final phase with a crash at reconcile `crash_at` (and none when out of range).
fn run(target_works: bool, crash_at: usize) -> (World, Vec<Phase>) {
    let mut world = World::new(target_works);
    let mut phases = Vec::new();
    for i in 0..200 {
        world.step(i == crash_at);
        if let Some(p) = world.phase()
            && phases.last() != Some(&p)
        {
            phases.push(p);
        }
        let settled = world.observe();
        let idle = decide_move(world.state.as_ref(), &settled, &Timeouts::default());
        if matches!(world.phase(), Some(Phase::Moved | Phase::Failed))
            && idle.actions.is_empty()
            && idle.record.is_none()
        {
            return (world, phases);
        }
    }
    panic!("no final phase: {world:?}");
}

#[test]
fn a_move_goes_through_every_phase_and_survives_a_restart_at_each_step() {
    let (_, phases) = run(true, usize::MAX);
    assert_eq!(
        phases,
        [
            Phase::Pending,
            Phase::Pausing,
            Phase::WaitingUnblocked,
            Phase::Publishing,
            Phase::WaitingTarget,
            Phase::Linking,
            Phase::FencingSource,
            Phase::ResumingTarget,
            Phase::Moved
        ]
    );
    for crash_at in 0..16 {
        let (world, phases) = run(true, crash_at);
        assert_eq!(
            world.phase(),
            Some(Phase::Moved),
            "crash at {crash_at}: {phases:?}"
        );
        assert!(
            world.spec_paused && world.fenced,
            "crash at {crash_at}: the source stays paused and fenced"
        );
        assert!(world.linked, "crash at {crash_at}: owners restored");
        assert!(world.resumed, "crash at {crash_at}: copies resumed");
        assert_eq!(world.bundles, None, "crash at {crash_at}: Bundles removed");
        assert!(world.copies, "crash at {crash_at}: the copies stay");
    }
}

#[test]
fn a_failed_target_never_leaves_the_source_paused_nor_copies_even_with_a_restart() {
    for crash_at in [usize::MAX, 0, 1, 2, 3, 4, 5, 6, 34, 35, 36, 37, 38] {
        let (world, phases) = run(false, crash_at);
        assert_eq!(
            world.phase(),
            Some(Phase::Failed),
            "crash at {crash_at}: {phases:?}"
        );
        assert!(
            !world.spec_paused,
            "crash at {crash_at}: source left paused"
        );
        assert_eq!(world.bundles, None, "crash at {crash_at}: Bundles left");
        assert!(
            !world.copies,
            "crash at {crash_at}: copies left on the target"
        );
        let state = world.state.unwrap();
        assert!(!state.paused_by_move);
        assert!(!state.copies_on_target);
        assert!(
            state
                .message
                .starts_with("timed out waiting for the target"),
            "{}",
            state.message
        );
    }
}

#[test]
fn state_annotation_round_trips_and_errors_name_the_field() {
    let s = MoveState::new(Phase::WaitingTarget, 42, true, "why");
    let raw = state_annotation(&s);
    assert_eq!(
        raw,
        r#"{"phase":"WaitingTarget","since":42,"message":"why","pausedByMove":true}"#
    );
    let annotations: StringMap = [(MOVE_STATE_ANNOTATION.to_string(), raw)].into();
    assert_eq!(parse_state(&annotations), Ok(Some(s)));
    assert_eq!(parse_state(&StringMap::new()), Ok(None));
    let bad: StringMap = [(MOVE_STATE_ANNOTATION.to_string(), "{".to_string())].into();
    let err = parse_state(&bad).unwrap_err();
    assert!(
        err.starts_with("metadata.annotations[fleet.addons.cluster.x-k8s.io/move-state]: invalid move state \"{\""),
        "{err}"
    );
}

#[test]
fn opt_in_by_label_or_selector_never_by_default() {
    let labels = |pairs: &[(&str, &str)]| -> StringMap {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let selector = |k: &str, v: &str| LabelSelector {
        match_labels: Some([(k.to_string(), v.to_string())].into()),
        match_expressions: None,
    };
    let empty = LabelSelector::default();
    let cases = [
        ("nothing", labels(&[]), None, false),
        (
            "label true",
            labels(&[(SELF_MANAGED_LABEL, "true")]),
            None,
            true,
        ),
        (
            "label false",
            labels(&[(SELF_MANAGED_LABEL, "false")]),
            None,
            false,
        ),
        (
            "selector matches",
            labels(&[("env", "prod")]),
            Some(selector("env", "prod")),
            true,
        ),
        (
            "selector does not match",
            labels(&[("env", "dev")]),
            Some(selector("env", "prod")),
            false,
        ),
        (
            "empty selector is not set",
            labels(&[("env", "prod")]),
            Some(empty),
            false,
        ),
    ];
    for (name, l, s, want) in cases {
        assert_eq!(opted_in(&l, s.as_ref()), want, "{name}");
    }
}

fn bundle(name: &str, resources: Value, generation: i64, status: Value) -> Value {
    json!({"metadata": {"name": name, "generation": generation},
        "spec": {"resources": resources}, "status": status})
}

#[test]
fn bundle_readiness_from_fleet_status() {
    let res = json!([{"name": "templates/a.yaml", "content": "x"}]);
    let desired = vec![
        bundle("b1", res.clone(), 0, json!({})),
        bundle("b2", res.clone(), 0, json!({})),
    ];
    let ready = json!({"observedGeneration": 2, "summary": {"ready": 1, "desiredReady": 1},
        "partitions": [{"name": "All", "count": 1, "maxUnavailable": 1}]});
    let cases = [
        ("none", vec![], BundlesStatus::Missing),
        (
            "one missing",
            vec![bundle("b1", res.clone(), 2, ready.clone())],
            BundlesStatus::Waiting("Bundle b2 does not exist yet".into()),
        ),
        (
            "stale content",
            vec![
                bundle("b1", json!([]), 2, ready.clone()),
                bundle("b2", res.clone(), 2, ready.clone()),
            ],
            BundlesStatus::Waiting("Bundle b1 is not updated yet".into()),
        ),
        (
            "not observed",
            vec![
                bundle("b1", res.clone(), 3, ready.clone()),
                bundle("b2", res.clone(), 2, ready.clone()),
            ],
            BundlesStatus::Waiting("Fleet has not processed Bundle b1 yet".into()),
        ),
        (
            "not ready, with Fleet's reason",
            vec![
                bundle("b1", res.clone(), 2, ready.clone()),
                bundle(
                    "b2",
                    res.clone(),
                    2,
                    json!({"observedGeneration": 2, "summary": {"ready": 0, "desiredReady": 1,
                        "nonReadyResources": [{"name": "fleet-c1", "bundleState": "ErrApplied", "message": "no matches for kind"}]}}),
                ),
            ],
            BundlesStatus::Waiting(
                "Bundle b2 ready on 0/1 clusters: ErrApplied: no matches for kind".into(),
            ),
        ),
        (
            "no target yet",
            vec![
                bundle(
                    "b1",
                    res.clone(),
                    2,
                    json!({"observedGeneration": 2, "summary": {"ready": 0, "desiredReady": 0}}),
                ),
                bundle("b2", res.clone(), 2, ready.clone()),
            ],
            BundlesStatus::Waiting("Bundle b1 ready on 0/0 clusters".into()),
        ),
        (
            // Fleet before v0.16: the summary of a new generation still judges the
            // BundleDeployment by its old deployment ID; the partition counts it unavailable.
            "summary ready for the old content, partition not up to date",
            vec![
                bundle("b1", res.clone(), 2, ready.clone()),
                bundle(
                    "b2",
                    res.clone(),
                    2,
                    json!({"observedGeneration": 2, "summary": {"ready": 1, "desiredReady": 1},
                        "partitions": [{"name": "All", "count": 1, "maxUnavailable": 1, "unavailable": 1}]}),
                ),
            ],
            BundlesStatus::Waiting(
                "Bundle b2: 1 cluster(s) not up to date with the current content yet".into(),
            ),
        ),
        (
            "no partition status",
            vec![
                bundle("b1", res.clone(), 2, ready.clone()),
                bundle(
                    "b2",
                    res.clone(),
                    2,
                    json!({"observedGeneration": 2, "summary": {"ready": 1, "desiredReady": 1}}),
                ),
            ],
            BundlesStatus::Waiting(
                "Bundle b2: 0 cluster(s) not up to date with the current content yet".into(),
            ),
        ),
        (
            "all ready",
            vec![
                bundle("b1", res.clone(), 2, ready.clone()),
                bundle("b2", res.clone(), 2, ready.clone()),
            ],
            BundlesStatus::Ready,
        ),
    ];
    for (name, live, want) in cases {
        assert_eq!(bundles_status(&desired, &live), want, "{name}");
    }
}

#[test]
fn moved_only_when_recorded_as_moved() {
    let with = |value: &str| -> StringMap {
        [(MOVE_STATE_ANNOTATION.to_string(), value.to_string())]
            .into_iter()
            .collect()
    };
    let cases = [
        ("no annotation", StringMap::new(), false),
        ("moved", with(r#"{"phase":"Moved","since":1}"#), true),
        (
            "waiting",
            with(r#"{"phase":"WaitingTarget","since":1}"#),
            false,
        ),
        ("failed", with(r#"{"phase":"Failed","since":1}"#), false),
        ("unreadable", with("Moved"), false),
    ];
    for (name, annotations, want) in cases {
        assert_eq!(is_moved(&annotations), want, "{name}");
    }
}

#[test]
fn checks_again_when_a_timeout_expires() {
    let timeouts = Timeouts {
        unblock: Duration::from_secs(60),
        target: Duration::from_secs(100),
        resume: Duration::from_secs(300),
    };
    let at = |phase| MoveState {
        phase,
        since: 1000,
        message: String::new(),
        paused_by_move: true,
        copies_on_target: false,
    };
    let cases = [
        (
            "no requeue",
            Some(at(Phase::WaitingTarget)),
            None,
            1000,
            None,
        ),
        (
            "far from the timeout",
            Some(at(Phase::WaitingTarget)),
            Some(RECHECK),
            1000,
            Some(RECHECK),
        ),
        (
            "target timeout close",
            Some(at(Phase::WaitingTarget)),
            Some(RECHECK),
            1090,
            Some(Duration::from_secs(11)),
        ),
        (
            "unblock timeout close",
            Some(at(Phase::WaitingUnblocked)),
            Some(RECHECK),
            1055,
            Some(Duration::from_secs(6)),
        ),
        (
            "past the timeout",
            Some(at(Phase::WaitingTarget)),
            Some(RECHECK),
            1200,
            Some(Duration::from_secs(1)),
        ),
        (
            "linking counts against the target timeout",
            Some(at(Phase::Linking)),
            Some(RECHECK),
            1090,
            Some(Duration::from_secs(11)),
        ),
        (
            "resume timeout close",
            Some(at(Phase::ResumingTarget)),
            Some(RECHECK),
            1290,
            Some(Duration::from_secs(11)),
        ),
        (
            "no timeout in this phase",
            Some(at(Phase::Stalled)),
            Some(RECHECK),
            1200,
            Some(RECHECK),
        ),
        ("no state", None, Some(RECHECK), 1200, Some(RECHECK)),
    ];
    for (name, state, requeue, now, want) in cases {
        assert_eq!(
            next_check(state.as_ref(), requeue, &timeouts, now),
            want,
            "{name}"
        );
    }
}
