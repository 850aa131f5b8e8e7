//! The hand-over of a Cluster to itself, as a state machine recorded on the Cluster.
//!
//! The state lives in the annotation [`MOVE_STATE_ANNOTATION`] (JSON: `phase`, `since`,
//! `message`, `pausedByMove`). [`super::move_decide::decide_move`] is pure: from the recorded
//! state and what the controller observes it returns the state to record and the actions to take. The controller records the
//! state **before** acting, and every phase re-issues its actions until their effect is observed,
//! so a restart at any step resumes where it stopped (docs/self-managed.md, section 4).
//!
//! The sequence follows clusterctl's `objectMover.move` (cluster-api v1.12.0 `cmd/clusterctl/
//! client/cluster/mover.go`): refuse a source that is not provisioned (`checkProvisioningCompleted`)
//! or already paused, pause it, wait for `block-move` annotations to go, create the copies paused
//! (Bundles for the objects, the controller for the Secrets), rebuild the owner references with
//! the target's UIDs (`buildOwnerChain`), take the source out of play, then unpause the target.
//! clusterctl takes the source out of play by deleting it (`deleteSourceObject`, before
//! `setClusterPause(false)` on the target); this provider keeps it as a paused copy and fences it
//! instead: every object of the Cluster alone gets `cluster.x-k8s.io/paused`, and the Cluster
//! is paused again whenever someone unpauses it after the target took over. A failure before
//! the target resumes unpauses the source (only if the move paused it), removes the move Bundles
//! and the paused copies that reached the target.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::capi::StringMap;
use super::selection::is_empty_selector;

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
    /// Waiting until Fleet reports every Bundle ready on the target (and writing the Secrets).
    WaitingTarget,
    /// The copies are on the target: restoring their owner references with the target's UIDs.
    Linking,
    /// Annotating every source object of the Cluster alone with `cluster.x-k8s.io/paused`.
    FencingSource,
    /// The target is ready: republishing the copies unpaused and waiting for them.
    ResumingTarget,
    /// `ResumingTarget` past its timeout: still waiting, the source stays fenced; a human should
    /// look at the target.
    Stalled,
    /// Done: the source stays paused and fenced; the move Bundles are removed.
    Moved,
    /// Stopped before the target resumed; the source is unpaused, the Bundles and the copies on
    /// the target removed.
    Failed,
}

impl Phase {
    /// Before the target is ready: a failure here rolls back.
    pub fn can_roll_back(self) -> bool {
        matches!(
            self,
            Self::Pending
                | Self::Pausing
                | Self::WaitingUnblocked
                | Self::Publishing
                | Self::WaitingTarget
                | Self::Linking
        )
    }

    /// Copies may be on the target.
    pub(super) fn published(self) -> bool {
        matches!(
            self,
            Self::Publishing
                | Self::WaitingTarget
                | Self::Linking
                | Self::FencingSource
                | Self::ResumingTarget
                | Self::Stalled
                | Self::Moved
        )
    }

    /// The target may reconcile: the source must stay out of play whatever happens.
    pub fn target_took_over(self) -> bool {
        matches!(self, Self::ResumingTarget | Self::Stalled | Self::Moved)
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
    /// `Failed` only: paused copies of this move may still be on the target.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub copies_on_target: bool,
}

impl MoveState {
    pub(super) fn new(
        phase: Phase,
        since: i64,
        paused_by_move: bool,
        message: impl Into<String>,
    ) -> Self {
        Self {
            phase,
            since,
            message: message.into(),
            paused_by_move,
            copies_on_target: false,
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
    selector.is_some_and(|selector| {
        !is_empty_selector(selector)
            && Selector::try_from(selector.clone()).is_ok_and(|s| s.matches(labels))
    })
}

/// What Fleet reports for the move Bundles, against the Bundles we want.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum BundlesStatus {
    /// None of them exists.
    #[default]
    Missing,
    /// Some exist but not all, or not with the wanted content yet, or not ready: why.
    Waiting(String),
    /// All exist with the wanted content, and Fleet reports each ready on its target.
    Ready,
}

impl BundlesStatus {
    /// Why the Bundles are not ready yet (`None`: they are).
    pub(super) fn not_ready(&self) -> Option<String> {
        match self {
            Self::Missing => Some("the move Bundles are missing; creating them again".into()),
            Self::Waiting(why) => Some(why.clone()),
            Self::Ready => None,
        }
    }
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
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    pub opted_in: bool,
    /// The Cluster's Fleet Cluster exists and its agent is ready.
    pub fleet_cluster_ready: bool,
    /// `spec.paused` of the source Cluster.
    pub spec_paused: bool,
    /// The `cluster.x-k8s.io/paused` annotation on the source Cluster.
    pub paused_annotation: bool,
    /// The graph could not be built or rendered, or it copies a shared owner: why.
    pub graph_error: Option<String>,
    /// What is not provisioned yet ([`super::move_target::not_provisioned`]; read with the graph).
    pub not_provisioned: Vec<String>,
    /// Objects of the graph carrying `clusterctl.cluster.x-k8s.io/block-move`.
    pub blocking: Vec<String>,
    /// The Bundles against their desired content for the current phase (paused copies until
    /// `ResumingTarget`, unpaused from then on).
    pub bundles: BundlesStatus,
    /// The target could not be read or written: why (its API server through the kubeconfig
    /// Secret).
    pub target_error: Option<String>,
    /// Secrets the target does not show as desired yet.
    pub secrets_pending: usize,
    /// Owner references the target does not show yet, and why some cannot be restored yet.
    pub links_pending: Option<String>,
    /// Source objects of the Cluster alone not fenced yet.
    pub unfenced: usize,
    /// Copies of this move still on the target (read in `Failed`).
    pub copies_left: usize,
    /// Unix seconds.
    pub now: i64,
}

/// Side effects, in the order to run them (after recording the state).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Merge-patch `spec.paused` on the source Cluster.
    SetSourcePaused(bool),
    /// Apply the Bundles with the copies paused (`true`) or not; remove stale move Bundles.
    ApplyBundles { target_paused: bool },
    /// Write the Secrets to the target (create or update; never through a Bundle).
    WriteSecrets,
    /// Restore the owner references of the copies on the target.
    LinkOwners,
    /// Annotate the source objects of the Cluster alone with `cluster.x-k8s.io/paused`.
    FenceSource,
    /// Delete the move Bundles (their resources stay on the target: `keepResources`).
    DeleteBundles,
    /// Remove the paused copies of this move from the target (finalizers first).
    RemoveCopies,
    /// A Warning Event on the source Cluster with this reason and message.
    Warn(&'static str, String),
}

/// How long a phase may wait before the move fails (or, once the target took over, stalls).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// `WaitingUnblocked` (clusterctl waits about two minutes).
    pub unblock: Duration,
    /// `WaitingTarget` (providers installed and every creation group ready) and `Linking`.
    pub target: Duration,
    /// `ResumingTarget` until the move is marked `Stalled`.
    pub resume: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            unblock: Duration::from_secs(10 * 60),
            target: Duration::from_secs(30 * 60),
            resume: Duration::from_secs(30 * 60),
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

#[cfg(test)]
#[path = "move_state_tests.rs"]
mod tests;
