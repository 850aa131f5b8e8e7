//! The next step of a Cluster's hand-over to itself ([`decide_move`]), pure: from the state
//! recorded on the Cluster and what the controller observes ([`super::move_state`]), the state
//! to record, the actions to take and when to look again; and the rollback of a failed move.

use std::time::Duration;

use super::move_state::{Action, BundlesStatus, MoveState, Observed, Phase, RECHECK, Timeouts};

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
        Some(Phase::WaitingTarget | Phase::Linking) => timeouts.target,
        Some(Phase::ResumingTarget) => timeouts.resume,
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

/// Rolls back: unpause the source if the move paused it, delete the Bundles once any could
/// exist, then remove the copies that reached the target.
fn fail(current: Option<&MoveState>, obs: &Observed, reason: String) -> MoveDecision {
    let paused_by_move = current.is_some_and(|s| s.paused_by_move);
    let mut state = MoveState::new(Phase::Failed, obs.now, paused_by_move, reason);
    state.copies_on_target = current.is_some_and(|s| s.phase.published());
    let (actions, record) = roll_back(&state, obs);
    let requeue = (!actions.is_empty() || state.copies_on_target).then_some(RECHECK);
    MoveDecision {
        record: Some(record.unwrap_or(state)),
        actions,
        requeue,
    }
}

/// What a failed move still has to undo, and the state once more of it is done.
fn roll_back(state: &MoveState, obs: &Observed) -> (Vec<Action>, Option<MoveState>) {
    let mut actions = Vec::new();
    let mut next = state.clone();
    if state.paused_by_move {
        if obs.spec_paused {
            actions.push(Action::SetSourcePaused(false));
        } else {
            next.paused_by_move = false;
        }
    }
    if obs.bundles != BundlesStatus::Missing {
        actions.push(Action::DeleteBundles);
    } else if state.copies_on_target {
        // Only once Fleet no longer deploys them: a Bundle left would bring them back.
        match &obs.target_error {
            Some(why) => {
                next.message = format!(
                    "{}; paused copies may remain on the target: {why}",
                    first_sentence(&state.message)
                );
            }
            None if obs.copies_left > 0 => actions.push(Action::RemoveCopies),
            None => {
                next.copies_on_target = false;
                next.message = first_sentence(&state.message).to_string();
            }
        }
    }
    let changed = next != *state;
    (actions, changed.then_some(next))
}

/// A failure's reason without what the rollback added to it.
fn first_sentence(message: &str) -> &str {
    message
        .split_once("; paused copies may remain on the target")
        .map_or(message, |(reason, _)| reason)
}

fn elapsed(state: &MoveState, now: i64) -> Duration {
    Duration::from_secs(u64::try_from(now.saturating_sub(state.since)).unwrap_or(0))
}

/// Once the target took over: pause the source again if someone unpaused it, and complete its
/// fence; say so with a Warning.
fn keep_fenced(obs: &Observed, actions: &mut Vec<Action>) {
    if !obs.spec_paused {
        actions.push(Action::SetSourcePaused(true));
        actions.push(Action::Warn(
            "MoveSourceUnpaused",
            "spec.paused was cleared on the source of a moved Cluster; the target manages it now, so it is paused again (delete the source copy as docs/self-managed.md says, do not unpause it)".into(),
        ));
    }
    if obs.unfenced > 0 {
        actions.push(Action::FenceSource);
    }
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
        if state.phase != Phase::Pending && state.phase != Phase::Pausing && !obs.spec_paused {
            return fail(
                current,
                obs,
                "spec.paused was cleared during the move".into(),
            );
        }
    }
    let publish = |paused: bool| Action::ApplyBundles {
        target_paused: paused,
    };
    // The next phase of a move that paused the source.
    let advance = |phase: Phase, message: &str, actions: Vec<Action>| {
        MoveDecision::to(MoveState::new(phase, obs.now, true, message), actions)
    };
    let secrets_pending = || {
        format!(
            "{} Secret(s) not written to the target yet",
            obs.secrets_pending
        )
    };
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
            if !obs.not_provisioned.is_empty() {
                // clusterctl refuses (`checkProvisioningCompleted`); a Cluster still being
                // provisioned gets there, so wait, with nothing paused.
                return MoveDecision::stay(
                    state,
                    format!(
                        "waiting for provisioning to complete: {}",
                        obs.not_provisioned.join(", ")
                    ),
                    Vec::new(),
                );
            }
            advance(Phase::Pausing, "", vec![Action::SetSourcePaused(true)])
        }
        Phase::Pausing => {
            if !obs.spec_paused {
                return MoveDecision::stay(
                    state,
                    String::new(),
                    vec![Action::SetSourcePaused(true)],
                );
            }
            advance(Phase::WaitingUnblocked, "", Vec::new())
        }
        Phase::WaitingUnblocked => {
            if !obs.not_provisioned.is_empty() {
                // Paused, nothing provisions any more: what started between the check and the
                // pause would never finish.
                return fail(
                    current,
                    obs,
                    format!(
                        "not provisioned when paused: {}",
                        obs.not_provisioned.join(", ")
                    ),
                );
            }
            if obs.blocking.is_empty() {
                return advance(
                    Phase::Publishing,
                    "",
                    vec![Action::WriteSecrets, publish(true)],
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
            if obs.bundles == BundlesStatus::Missing {
                return MoveDecision::stay(
                    state,
                    String::new(),
                    vec![Action::WriteSecrets, publish(true)],
                );
            }
            advance(
                Phase::WaitingTarget,
                "",
                vec![Action::WriteSecrets, publish(true)],
            )
        }
        Phase::WaitingTarget => {
            let why = match (obs.bundles.not_ready(), &obs.target_error) {
                (Some(why), _) => why,
                (None, Some(error)) => format!("the target: {error}"),
                (None, None) if obs.secrets_pending > 0 => secrets_pending(),
                (None, None) => return advance(Phase::Linking, "", vec![Action::LinkOwners]),
            };
            if elapsed(state, obs.now) > timeouts.target {
                return fail(
                    current,
                    obs,
                    format!("timed out waiting for the target: {why}"),
                );
            }
            let mut actions = vec![publish(true)];
            if obs.target_error.is_none() && obs.secrets_pending > 0 {
                actions.insert(0, Action::WriteSecrets);
            }
            MoveDecision::stay(state, why, actions)
        }
        Phase::Linking => {
            let why = match (
                &obs.target_error,
                &obs.links_pending,
                obs.bundles.not_ready(),
            ) {
                (Some(error), _, _) => format!("the target: {error}"),
                (None, Some(why), _) => why.clone(),
                (None, None, Some(why)) => why,
                (None, None, None) if obs.secrets_pending > 0 => secrets_pending(),
                (None, None, None) => {
                    return advance(Phase::FencingSource, "", vec![Action::FenceSource]);
                }
            };
            if elapsed(state, obs.now) > timeouts.target {
                return fail(
                    current,
                    obs,
                    format!("timed out restoring owner references on the target: {why}"),
                );
            }
            let mut actions = vec![publish(true)];
            if obs.target_error.is_none() {
                actions.insert(0, Action::LinkOwners);
                if obs.secrets_pending > 0 {
                    actions.insert(0, Action::WriteSecrets);
                }
            }
            MoveDecision::stay(state, why, actions)
        }
        Phase::FencingSource => {
            // Writes to this management cluster only: retried until done, never rolled back.
            let mut actions = Vec::new();
            if !obs.spec_paused {
                actions.push(Action::SetSourcePaused(true));
            }
            if obs.unfenced > 0 {
                actions.push(Action::FenceSource);
                return MoveDecision::stay(
                    state,
                    format!("{} source object(s) to fence", obs.unfenced),
                    actions,
                );
            }
            if !actions.is_empty() {
                return MoveDecision::stay(state, String::new(), actions);
            }
            advance(Phase::ResumingTarget, "", vec![publish(false)])
        }
        Phase::ResumingTarget | Phase::Stalled => {
            // The target may already reconcile: never unpause the source from here on.
            let mut actions = Vec::new();
            keep_fenced(obs, &mut actions);
            match obs.bundles.not_ready() {
                None => {
                    actions.push(Action::DeleteBundles);
                    advance(
                        Phase::Moved,
                        "the Cluster manages itself; the source copy stays paused and fenced",
                        actions,
                    )
                }
                Some(why) => {
                    actions.push(publish(false));
                    if state.phase == Phase::ResumingTarget
                        && elapsed(state, obs.now) > timeouts.resume
                    {
                        let message = format!(
                            "the target has not reported the resumed copies ready after {}s: {why}; the source stays paused and fenced, look at the target",
                            timeouts.resume.as_secs()
                        );
                        return advance(Phase::Stalled, &message, actions);
                    }
                    let message = if state.phase == Phase::Stalled {
                        state.message.clone()
                    } else {
                        why
                    };
                    MoveDecision::stay(state, message, actions)
                }
            }
        }
        Phase::Moved => {
            let mut actions = Vec::new();
            keep_fenced(obs, &mut actions);
            if obs.bundles != BundlesStatus::Missing {
                actions.push(Action::DeleteBundles);
            }
            MoveDecision {
                record: None,
                requeue: (!actions.is_empty()).then_some(RECHECK),
                actions,
            }
        }
        Phase::Failed => {
            // Finish the rollback if a restart interrupted it.
            let (actions, record) = roll_back(state, obs);
            let requeue = (!actions.is_empty()
                || record.as_ref().unwrap_or(state).copies_on_target)
                .then_some(RECHECK);
            MoveDecision {
                record,
                actions,
                requeue,
            }
        }
    }
}
