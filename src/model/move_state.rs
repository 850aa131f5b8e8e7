//! The hand-over of a Cluster to itself, as a state machine recorded on the Cluster.
//!
//! The state lives in the annotation [`MOVE_STATE_ANNOTATION`] (JSON: `phase`, `since`,
//! `message`, `pausedByMove`). [`decide_move`] is pure: from the recorded state and what the controller
//! observes it returns the state to record and the actions to take. The controller records the
//! state **before** acting, and every phase re-issues its actions until their effect is observed,
//! so a restart at any step resumes where it stopped (docs/self-managed.md, section 4).
//!
//! The sequence follows clusterctl's `objectMover.move` (cluster-api `cmd/clusterctl/client/
//! cluster/mover.go`): refuse an already paused source, pause it, wait for `block-move`
//! annotations to go, create the copies paused, then unpause the target. Unlike clusterctl the
//! source is never deleted; a failure before the target is ready unpauses the source (only if the
//! move paused it) and removes the move Bundles.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::capi::StringMap;

/// On a CAPI Cluster: the recorded move state (JSON).
pub const MOVE_STATE_ANNOTATION: &str = "fleet.addons.cluster.x-k8s.io/move-state";
/// On a CAPI Cluster, value `"true"`: move this Cluster into itself.
pub const SELF_MANAGED_LABEL: &str = "fleet.addons.cluster.x-k8s.io/self-managed";

/// Steps of the hand-over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// Opted in; waiting for the Fleet Cluster to be ready.
    Pending,
    /// Setting `spec.paused: true` on the source.
    Pausing,
    /// Waiting until no object of the graph carries `clusterctl.cluster.x-k8s.io/block-move`.
    WaitingUnblocked,
    /// Creating the Bundles, copies paused.
    Publishing,
    /// Waiting until Fleet reports every Bundle ready on the target.
    WaitingTarget,
    /// The target is ready: republishing the copies unpaused and waiting for them.
    ResumingTarget,
    /// Done: the source stays paused; this provider no longer acts on it.
    Moved,
    /// Stopped before the target was ready; the source is unpaused, the Bundles removed.
    Failed,
}

impl Phase {
    /// Before the target is ready: a failure here rolls back.
    fn can_roll_back(self) -> bool {
        matches!(
            self,
            Self::Pending
                | Self::Pausing
                | Self::WaitingUnblocked
                | Self::Publishing
                | Self::WaitingTarget
        )
    }
}

/// What is recorded on the Cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MoveState {
    pub phase: Phase,
    /// When the phase started (Unix seconds): timeouts count from here.
    pub since: i64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The move set `spec.paused`, so only the move may clear it.
    #[serde(default)]
    pub paused_by_move: bool,
}

impl MoveState {
    fn new(phase: Phase, since: i64, paused_by_move: bool, message: impl Into<String>) -> Self {
        Self {
            phase,
            since,
            message: message.into(),
            paused_by_move,
        }
    }
}

/// The recorded state, if any; an annotation that does not parse is an error naming it.
pub fn parse_state(annotations: &StringMap) -> Result<Option<MoveState>, String> {
    annotations
        .get(MOVE_STATE_ANNOTATION)
        .map(|raw| {
            serde_json::from_str(raw).map_err(|e| {
                format!(
                    "metadata.annotations[{MOVE_STATE_ANNOTATION}]: invalid move state {raw:?}: {e}"
                )
            })
        })
        .transpose()
}

/// The annotation value for a state.
pub fn state_annotation(state: &MoveState) -> String {
    serde_json::to_string(state).unwrap_or_default()
}

/// Whether a Cluster opted in: the [`SELF_MANAGED_LABEL`] is `"true"`, or `selfManagedSelector`
/// (empty means not set) matches its labels. Never by default.
pub fn opted_in(labels: &StringMap, selector: Option<&LabelSelector>) -> bool {
    if labels.get(SELF_MANAGED_LABEL).map(String::as_str) == Some("true") {
        return true;
    }
    let Some(selector) = selector else {
        return false;
    };
    let empty = selector.match_labels.as_ref().is_none_or(|m| m.is_empty())
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(|e| e.is_empty());
    if empty {
        return false;
    }
    Selector::try_from(selector.clone()).is_ok_and(|s| s.matches(labels))
}

/// What Fleet reports for the move Bundles, against the Bundles we want.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BundlesStatus {
    /// None of them exists.
    Missing,
    /// Some exist but not all, or not with the wanted content yet, or not ready: why.
    Waiting(String),
    /// All exist with the wanted content, and Fleet reports each ready on its target.
    Ready,
}

/// Compares the live Bundles with the desired ones (by name and `spec.resources`) and reads
/// Fleet's readiness as Fleet's Bundle controller reports it (rancher/fleet
/// `internal/cmd/controller/reconciler/bundle_controller.go`, v0.12 to v0.16):
///
/// - `status.observedGeneration` = `metadata.generation`: the controller wrote the status from
///   the current spec (it sets `observedGeneration` in the same status update as the summary);
/// - `status.summary.ready` = `status.summary.desiredReady` > 0: one BundleDeployment per
///   targeted cluster (`target/status.go` `Summary`), each in state `Ready`
///   (`summary.GetDeploymentState`: applied deployment ID = spec deployment ID, resources ready,
///   not modified);
/// - every `status.partitions[].unavailable` = 0: a target counts as unavailable there until its
///   BundleDeployment has *applied the deployment ID of the current content* and is ready
///   (`target/status.go` `upToDate`, `isUnavailable`). The summary alone is not enough: before
///   Fleet v0.16 (`effectiveDeployment`, rancher/fleet#4780) the summary written for a new
///   generation still judged the BundleDeployment by its old deployment ID, so a Bundle whose
///   content had just changed (the copies being resumed) read `Ready` for the old content.
///
/// Content: we write `spec.resources` inline; Fleet copies them into a `Content` object (or OCI
/// when `contentsId` is set, which only `fleet apply` does) without changing the Bundle's spec,
/// so comparing `spec.resources` with ours is exact.
pub fn bundles_status(desired: &[Value], live: &[Value]) -> BundlesStatus {
    let name = |b: &Value| b["metadata"]["name"].as_str().unwrap_or("").to_string();
    if desired.is_empty() {
        return BundlesStatus::Ready;
    }
    let found: Vec<(&Value, Option<&Value>)> = desired
        .iter()
        .map(|d| (d, live.iter().find(|l| name(l) == name(d))))
        .collect();
    if found.iter().all(|(_, l)| l.is_none()) {
        return BundlesStatus::Missing;
    }
    for (want, got) in found {
        let bundle = name(want);
        let Some(got) = got else {
            return BundlesStatus::Waiting(format!("Bundle {bundle} does not exist yet"));
        };
        if got["spec"]["resources"] != want["spec"]["resources"] {
            return BundlesStatus::Waiting(format!("Bundle {bundle} is not updated yet"));
        }
        let status = &got["status"];
        if got["metadata"]["generation"].as_i64() != status["observedGeneration"].as_i64() {
            return BundlesStatus::Waiting(format!("Fleet has not processed Bundle {bundle} yet"));
        }
        let summary = &status["summary"];
        let ready = summary["ready"].as_i64().unwrap_or(0);
        let desired_ready = summary["desiredReady"].as_i64().unwrap_or(0);
        if desired_ready == 0 || ready < desired_ready {
            let detail = summary["nonReadyResources"]
                .as_array()
                .and_then(|r| r.first())
                .map(|r| {
                    let state = r["bundleState"].as_str().unwrap_or("NotReady");
                    match r["message"].as_str().filter(|m| !m.is_empty()) {
                        Some(m) => format!(": {state}: {m}"),
                        None => format!(": {state}"),
                    }
                })
                .unwrap_or_default();
            return BundlesStatus::Waiting(format!(
                "Bundle {bundle} ready on {ready}/{desired_ready} clusters{detail}"
            ));
        }
        let partitions = status["partitions"]
            .as_array()
            .map_or(&[][..], Vec::as_slice);
        let unavailable: i64 = partitions
            .iter()
            .map(|p| p["unavailable"].as_i64().unwrap_or(0))
            .sum();
        if partitions.is_empty() || unavailable > 0 {
            return BundlesStatus::Waiting(format!(
                "Bundle {bundle}: {unavailable} cluster(s) not up to date with the current content yet"
            ));
        }
    }
    BundlesStatus::Ready
}

/// What the controller observes before deciding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    pub opted_in: bool,
    /// The Cluster's Fleet Cluster exists and its agent is ready.
    pub fleet_cluster_ready: bool,
    /// `spec.paused` of the source Cluster.
    pub spec_paused: bool,
    /// The `cluster.x-k8s.io/paused` annotation on the source Cluster.
    pub paused_annotation: bool,
    /// The graph could not be built or rendered: why.
    pub graph_error: Option<String>,
    /// Objects of the graph carrying `clusterctl.cluster.x-k8s.io/block-move`.
    pub blocking: Vec<String>,
    /// The Bundles against their desired content for the current phase (paused copies until
    /// `ResumingTarget`, unpaused from then on).
    pub bundles: BundlesStatus,
    /// Unix seconds.
    pub now: i64,
}

/// Side effects, in the order to run them (after recording the state).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Merge-patch `spec.paused` on the source Cluster.
    SetSourcePaused(bool),
    /// Apply the Bundles with the copies paused (`true`) or not.
    ApplyBundles { target_paused: bool },
    /// Delete the move Bundles (their resources stay on the target: `keepResources`).
    DeleteBundles,
}

/// How long a phase may wait before the move fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// `WaitingUnblocked` (clusterctl waits about two minutes).
    pub unblock: Duration,
    /// `WaitingTarget`: providers installed and every creation group ready.
    pub target: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            unblock: Duration::from_secs(10 * 60),
            target: Duration::from_secs(30 * 60),
        }
    }
}

/// How often to look again while waiting (watch events usually come first).
pub const RECHECK: Duration = Duration::from_secs(30);

/// Whether the recorded move state of a Cluster is [`Phase::Moved`]: its definition now lives in
/// the workload cluster, which manages itself; this management cluster must not act on it.
/// A missing or unreadable annotation is not moved.
pub fn is_moved(annotations: &StringMap) -> bool {
    matches!(parse_state(annotations), Ok(Some(state)) if state.phase == Phase::Moved)
}

/// When to look again: `requeue`, but no later than just after the current phase's timeout, so
/// a timeout is noticed when it expires and not up to [`RECHECK`] later.
pub fn next_check(
    state: Option<&MoveState>,
    requeue: Option<Duration>,
    timeouts: &Timeouts,
    now: i64,
) -> Option<Duration> {
    let requeue = requeue?;
    let limit = match state.map(|s| s.phase) {
        Some(Phase::WaitingUnblocked) => timeouts.unblock,
        Some(Phase::WaitingTarget) => timeouts.target,
        _ => return Some(requeue),
    };
    let state = state?;
    // Timeouts compare whole seconds (`since` is Unix seconds): one more second is past it.
    let left = limit
        .saturating_sub(elapsed(state, now))
        .saturating_add(Duration::from_secs(1));
    Some(requeue.min(left))
}

/// The state to record (`None`: leave the annotation as it is) and the actions that follow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MoveDecision {
    pub record: Option<MoveState>,
    pub actions: Vec<Action>,
    pub requeue: Option<Duration>,
}

impl MoveDecision {
    fn idle() -> Self {
        Self {
            record: None,
            actions: Vec::new(),
            requeue: None,
        }
    }
    fn to(state: MoveState, actions: Vec<Action>) -> Self {
        let requeue = if matches!(state.phase, Phase::Moved | Phase::Failed) {
            None
        } else {
            Some(RECHECK)
        };
        Self {
            record: Some(state),
            actions,
            requeue,
        }
    }
    /// Stay in the current phase: re-issue `actions`, update the message if it changed.
    fn stay(current: &MoveState, message: String, actions: Vec<Action>) -> Self {
        let record = (current.message != message).then(|| MoveState {
            message,
            ..current.clone()
        });
        Self {
            record,
            actions,
            requeue: Some(RECHECK),
        }
    }
}

/// Rolls back: unpause the source if the move paused it, delete the Bundles once any could exist.
fn fail(current: Option<&MoveState>, obs: &Observed, reason: String) -> MoveDecision {
    let paused_by_move = current.is_some_and(|s| s.paused_by_move);
    let mut state = MoveState::new(Phase::Failed, obs.now, paused_by_move, reason);
    let mut actions = Vec::new();
    if paused_by_move {
        if obs.spec_paused {
            actions.push(Action::SetSourcePaused(false));
        } else {
            state.paused_by_move = false;
        }
    }
    if obs.bundles != BundlesStatus::Missing {
        actions.push(Action::DeleteBundles);
    }
    let requeue = (!actions.is_empty()).then_some(RECHECK);
    MoveDecision {
        record: Some(state),
        actions,
        requeue,
    }
}

fn elapsed(state: &MoveState, now: i64) -> Duration {
    Duration::from_secs(u64::try_from(now.saturating_sub(state.since)).unwrap_or(0))
}

/// The next step of the hand-over.
pub fn decide_move(
    current: Option<&MoveState>,
    obs: &Observed,
    timeouts: &Timeouts,
) -> MoveDecision {
    let Some(state) = current else {
        if !obs.opted_in {
            return MoveDecision::idle();
        }
        return MoveDecision::to(
            MoveState::new(
                Phase::Pending,
                obs.now,
                false,
                "waiting for the Fleet Cluster",
            ),
            Vec::new(),
        );
    };
    if state.phase.can_roll_back() {
        if !obs.opted_in {
            return fail(
                current,
                obs,
                "the Cluster no longer opts in to self-management".into(),
            );
        }
        if let Some(error) = &obs.graph_error {
            return fail(current, obs, format!("object graph: {error}"));
        }
    }
    let paused_by_move = true;
    match state.phase {
        Phase::Pending => {
            if !obs.fleet_cluster_ready {
                return MoveDecision::stay(
                    state,
                    "waiting for the Fleet Cluster".into(),
                    Vec::new(),
                );
            }
            if obs.spec_paused || obs.paused_annotation {
                // clusterctl refuses to move a paused Cluster (`checkClustersNotPaused`): someone
                // else paused it and only they may resume it.
                return fail(
                    current,
                    obs,
                    "the Cluster is already paused (spec.paused or cluster.x-k8s.io/paused); unpause it and remove the move-state annotation to retry".into(),
                );
            }
            MoveDecision::to(
                MoveState::new(Phase::Pausing, obs.now, paused_by_move, ""),
                vec![Action::SetSourcePaused(true)],
            )
        }
        Phase::Pausing => {
            if !obs.spec_paused {
                return MoveDecision::stay(
                    state,
                    String::new(),
                    vec![Action::SetSourcePaused(true)],
                );
            }
            MoveDecision::to(
                MoveState::new(Phase::WaitingUnblocked, obs.now, paused_by_move, ""),
                Vec::new(),
            )
        }
        Phase::WaitingUnblocked => {
            if !obs.spec_paused {
                return fail(
                    current,
                    obs,
                    "spec.paused was cleared during the move".into(),
                );
            }
            if obs.blocking.is_empty() {
                return MoveDecision::to(
                    MoveState::new(Phase::Publishing, obs.now, paused_by_move, ""),
                    vec![Action::ApplyBundles {
                        target_paused: true,
                    }],
                );
            }
            let message = format!(
                "waiting for clusterctl.cluster.x-k8s.io/block-move to be removed from {}",
                obs.blocking.join(", ")
            );
            if elapsed(state, obs.now) > timeouts.unblock {
                return fail(current, obs, format!("timed out {message}"));
            }
            MoveDecision::stay(state, message, Vec::new())
        }
        Phase::Publishing => {
            if !obs.spec_paused {
                return fail(
                    current,
                    obs,
                    "spec.paused was cleared during the move".into(),
                );
            }
            if obs.bundles == BundlesStatus::Missing {
                return MoveDecision::stay(
                    state,
                    String::new(),
                    vec![Action::ApplyBundles {
                        target_paused: true,
                    }],
                );
            }
            MoveDecision::to(
                MoveState::new(Phase::WaitingTarget, obs.now, paused_by_move, ""),
                vec![Action::ApplyBundles {
                    target_paused: true,
                }],
            )
        }
        Phase::WaitingTarget => {
            if !obs.spec_paused {
                return fail(
                    current,
                    obs,
                    "spec.paused was cleared during the move".into(),
                );
            }
            match &obs.bundles {
                BundlesStatus::Ready => MoveDecision::to(
                    MoveState::new(Phase::ResumingTarget, obs.now, paused_by_move, ""),
                    vec![Action::ApplyBundles {
                        target_paused: false,
                    }],
                ),
                BundlesStatus::Missing => MoveDecision::stay(
                    state,
                    "the move Bundles are missing; creating them again".into(),
                    vec![Action::ApplyBundles {
                        target_paused: true,
                    }],
                ),
                BundlesStatus::Waiting(why) => {
                    if elapsed(state, obs.now) > timeouts.target {
                        return fail(
                            current,
                            obs,
                            format!("timed out waiting for the target: {why}"),
                        );
                    }
                    MoveDecision::stay(
                        state,
                        why.clone(),
                        vec![Action::ApplyBundles {
                            target_paused: true,
                        }],
                    )
                }
            }
        }
        Phase::ResumingTarget => {
            // The target may already reconcile: never unpause the source from here on.
            let resume = vec![Action::ApplyBundles {
                target_paused: false,
            }];
            match &obs.bundles {
                BundlesStatus::Ready => MoveDecision::to(
                    MoveState::new(
                        Phase::Moved,
                        obs.now,
                        paused_by_move,
                        "the Cluster manages itself; the source copy stays paused",
                    ),
                    Vec::new(),
                ),
                BundlesStatus::Missing => MoveDecision::stay(
                    state,
                    "the move Bundles are missing; creating them again".into(),
                    resume,
                ),
                BundlesStatus::Waiting(why) => MoveDecision::stay(state, why.clone(), resume),
            }
        }
        Phase::Moved => MoveDecision::idle(),
        Phase::Failed => {
            // Finish the rollback if a restart interrupted it.
            let mut actions = Vec::new();
            if state.paused_by_move && obs.spec_paused {
                actions.push(Action::SetSourcePaused(false));
            }
            if obs.bundles != BundlesStatus::Missing {
                actions.push(Action::DeleteBundles);
            }
            let record = (state.paused_by_move && !obs.spec_paused).then(|| MoveState {
                paused_by_move: false,
                ..state.clone()
            });
            let requeue = (!actions.is_empty()).then_some(RECHECK);
            MoveDecision {
                record,
                actions,
                requeue,
            }
        }
    }
}

#[cfg(test)]
#[path = "move_state_tests.rs"]
mod tests;
