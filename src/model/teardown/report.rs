//! The hold's verdict and messages, the `FleetWorkloadsRemoved` condition and its Events.

use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Resource;
use kube::runtime::events::EventType;
use serde_json::{Value, json};

use crate::api::CapiCluster;
use crate::model::capi::{self, event_note};
use crate::model::config::TeardownSettings;
use crate::model::plan::{ObjectId, Write};
use crate::model::teardown::leftovers::{BundleRef, Downstream};
use crate::model::teardown::mode::{Mode, mode};
use crate::names;

/// How long a workload cluster that cannot be reached (behind NAT, no kubeconfig Secret) is
/// given after the last BundleDeployment went, for its agent to uninstall the releases and
/// Kubernetes to release what they held: the agent reacts to the deletion at once (a watch),
/// and a cloud load balancer is usually gone within a minute.
pub const SETTLE_UNREACHABLE: Duration = Duration::from_secs(120);

/// At most this many names of one kind in a message.
pub const MAX_LISTED: usize = 10;

// ---- The answer ----

/// What BeforeClusterDelete found during a teardown.
#[derive(Clone, Debug)]
pub struct Progress<'a> {
    /// `namespace/name` of the Fleet Cluster.
    pub fleet_key: &'a str,
    /// How many BundleDeployments there were at the start ([`bundles_at_start`]).
    pub started_with: Option<usize>,
    /// The bundles whose BundleDeployments are left ([`Workloads::left`]).
    pub left: &'a [BundleRef],
    /// The bundles kept until the cluster is deleted ([`Workloads::kept`]).
    pub kept: &'a [BundleRef],
    /// Why some of them still target the cluster ([`why_still_targeted`]).
    pub explained: &'a [(BundleRef, &'static str)],
    /// Whether the Fleet Cluster's labels show the drain ([`is_drained`]).
    pub drained: bool,
    /// The workload cluster, once no BundleDeployment is left.
    pub downstream: Option<&'a Downstream>,
    pub deadline: Timestamp,
    pub now: Timestamp,
}

/// BeforeClusterDelete's verdict during a teardown. Messages change only when the state does
/// (no countdown): the `FleetWorkloadsRemoved` condition carries them, and Cluster API v1.11
/// calls the hook again on every change of the Cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Wait ("retry"), saying what for.
    Hold(String),
    /// The workloads are gone: let the deletion proceed.
    Done(String),
}

/// The verdict from what was found.
pub fn verdict(progress: &Progress<'_>) -> Verdict {
    let mut until = deadline_note(progress.deadline);
    if !progress.kept.is_empty() {
        let kept: Vec<String> = progress.kept.iter().map(ToString::to_string).collect();
        until = format!(
            "kept until the cluster is deleted ({}): {}; {until}",
            names::KEEP_DURING_TEARDOWN_LABEL,
            listed(&kept)
        );
    }
    let fleet_key = progress.fleet_key;
    if !progress.drained {
        let mut message = format!(
            "removing Fleet workloads: waiting for the labels bundles select Fleet Cluster {fleet_key} by to be removed (the import controller does it)"
        );
        if !progress.left.is_empty() {
            message.push_str(&format!("; {}", bundles_left(progress)));
        }
        return Verdict::Hold(format!("{message}; {until}"));
    }
    if !progress.left.is_empty() {
        let mut message = format!("removing Fleet workloads: {}", bundles_left(progress));
        for (bundle, why) in progress.explained {
            message.push_str(&format!(
                "; bundle {bundle} {why} and cannot be drained (give it a targetCustomization with doNotDeploy: true on the label {}: \"true\")",
                names::TEARDOWN_LABEL
            ));
        }
        return Verdict::Hold(format!("{message}; {until}"));
    }
    let removed = progress.started_with.map_or_else(
        || "every BundleDeployment".to_string(),
        |n| format!("{n} BundleDeployment{}", plural(n)),
    );
    match progress.downstream {
        None => Verdict::Hold(format!(
            "removing Fleet workloads: Fleet removed {removed}; checking the workload cluster; {until}"
        )),
        Some(Downstream::Checked { leftovers }) if leftovers.is_empty() => Verdict::Done(format!(
            "Fleet removed {removed} of Fleet Cluster {fleet_key}, and the workload cluster has no LoadBalancer Service, PersistentVolumeClaim or PersistentVolume left"
        )),
        Some(Downstream::Checked { leftovers }) => Verdict::Hold(format!(
            "removing Fleet workloads: Fleet removed {removed}; waiting for the workload cluster to delete {}; {until}",
            listed(leftovers)
        )),
        Some(Downstream::Unchecked {
            reason,
            bundles_gone,
        }) => {
            let settled = bundles_gone
                .checked_add(SignedDuration::try_from(SETTLE_UNREACHABLE).unwrap_or_default())
                .unwrap_or(Timestamp::MAX);
            if progress.now >= settled {
                Verdict::Done(format!(
                    "Fleet removed {removed} of Fleet Cluster {fleet_key}; the workload cluster could not be checked ({reason}), so its agent was given {} after the last BundleDeployment went",
                    short(SETTLE_UNREACHABLE)
                ))
            } else {
                Verdict::Hold(format!(
                    "removing Fleet workloads: Fleet removed {removed}; the workload cluster cannot be checked ({reason}): giving its agent until {} to uninstall them; {until}",
                    rfc3339(settled)
                ))
            }
        }
    }
}

fn bundles_left(progress: &Progress<'_>) -> String {
    let names: Vec<String> = progress.left.iter().map(ToString::to_string).collect();
    let count = progress.left.len();
    match progress.started_with {
        Some(total) if total >= count => format!(
            "{count} of {total} BundleDeployments left: {}",
            listed(&names)
        ),
        _ => format!(
            "{count} BundleDeployment{} left: {}",
            plural(count),
            listed(&names)
        ),
    }
}

fn deadline_note(deadline: Timestamp) -> String {
    format!(
        "the deletion proceeds anyway at {} (now with the Cluster annotation {}: \"true\")",
        rfc3339(deadline),
        names::SKIP_WORKLOAD_REMOVAL_ANNOTATION
    )
}

/// At most [`MAX_LISTED`] of `items`, then how many more.
fn listed(items: &[String]) -> String {
    let mut parts: Vec<String> = items.iter().take(MAX_LISTED).cloned().collect();
    if items.len() > MAX_LISTED {
        parts.push(format!("and {} more", items.len() - MAX_LISTED));
    }
    parts.join(", ")
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// The answer when the removal ends without the workloads being gone.
pub fn ended_early(mode: &Mode, fleet_key: &str) -> Option<String> {
    match mode {
        Mode::Skipped => Some(format!(
            "workload removal skipped (Cluster annotation {}: \"true\"): what Fleet deployed through Fleet Cluster {fleet_key} is left on the cluster while its infrastructure is deleted",
            names::SKIP_WORKLOAD_REMOVAL_ANNOTATION
        )),
        Mode::Off => Some(format!(
            "workload removal turned off (spec.runtimeExtension.beforeClusterDelete.removeWorkloads or Cluster annotation {}: \"false\") while it was under way: the deletion proceeds, and what Fleet deployed through Fleet Cluster {fleet_key} may be left behind",
            names::REMOVE_WORKLOADS_ANNOTATION
        )),
        Mode::Expired { deadline } => Some(format!(
            "workload removal timed out at {} (spec.runtimeExtension.beforeClusterDelete.timeout after the deletion started): the deletion proceeds, and what Fleet deployed through Fleet Cluster {fleet_key} may be left behind",
            rfc3339(*deadline)
        )),
        _ => None,
    }
}

/// `text` with the annotation problems appended (they are ignored, so the answer stands).
pub fn with_problems(text: &str, problems: &[String]) -> String {
    if problems.is_empty() {
        text.to_string()
    } else if text.is_empty() {
        problems.join("; ")
    } else {
        format!("{text}; {}", problems.join("; "))
    }
}

// ---- The condition and the Events ----

/// Reasons of the [`names::WORKLOADS_REMOVED_CONDITION`] condition, and of the Events that go
/// with a change to each.
pub mod reason {
    /// False: the workloads are being removed.
    pub const REMOVING: &str = "Removing";
    /// True: they are gone.
    pub const REMOVED: &str = "Removed";
    /// False: the operator skipped the removal.
    pub const SKIPPED: &str = "Skipped";
    /// False: the deadline passed first.
    pub const TIMED_OUT: &str = "TimedOut";
    /// False: Cluster API let the deletion proceed while the removal was under way
    /// ([`super::interrupted`]). Also the reason of its Warning Event.
    pub const INTERRUPTED: &str = "FleetWorkloadsRemovalInterrupted";
}

/// The message when Cluster API marked the Cluster `ok-to-delete` while the removal was still
/// under way (`live`, its condition, still says [`reason::REMOVING`]; `None` otherwise). Cluster
/// API marks it after BeforeClusterDelete answered without a retry
/// (kubernetes-sigs/cluster-api v1.11.11 and v1.12.11 `internal/controllers/topology/cluster/
/// cluster_controller.go` `reconcileDelete` → `internal/hooks/tracking.go` `MarkAsOkToDelete`),
/// and also when the call failed under `failurePolicy: Ignore` (`internal/runtime/client/
/// client.go` `CallExtension` turns the error into success) or when no extension is called
/// (none registers the hook any more, or its `namespaceSelector` does not match: v1.11.11
/// `CallAllExtensions` then succeeds). Our answers write the condition before they let a deletion
/// proceed, so a condition still saying `Removing` means none of them did. Once: the condition
/// then says [`reason::INTERRUPTED`].
pub fn interrupted(annotations: &capi::StringMap, live: Option<&Value>) -> Option<String> {
    let live = live.filter(|_| annotations.contains_key(names::CAPI_OK_TO_DELETE_ANNOTATION))?;
    (live.get("reason").and_then(Value::as_str) == Some(reason::REMOVING)).then(|| {
        let last = live.get("message").and_then(Value::as_str).unwrap_or_default();
        format!(
            "Cluster API let the deletion proceed ({}) while the Fleet workloads were still being removed (a failed BeforeClusterDelete call under failurePolicy: Ignore, or the extension unregistered or no longer selecting the namespace): what Fleet deployed may be left behind; last progress: {last}",
            names::CAPI_OK_TO_DELETE_ANNOTATION
        )
    })
}

/// The writes of [`interrupted`] for the deleting Cluster `view` (its condition, `cluster`, and
/// the Warning Event), whatever the import decided (our finalizer may be gone already). A removal
/// turned off meanwhile (`removeWorkloads`, whose BeforeClusterDelete answers without a read)
/// says so instead, as skipped.
pub fn interrupted_report(
    view: &capi::ClusterView,
    settings: &TeardownSettings,
    (cluster, regarding, fleet_key): (ObjectId, &ObjectReference, &str),
    now: Timestamp,
) -> Vec<Write> {
    let removal = view.workloads_removed.as_ref();
    let Some(mut message) = interrupted(&view.annotations, removal).filter(|_| view.deleting)
    else {
        return vec![];
    };
    let mode = mode(&view.annotations, view.deleted_at, Some(settings), now).mode;
    let mut reason = reason::INTERRUPTED;
    if mode == Mode::Off
        && let Some(off) = ended_early(&mode, fleet_key)
    {
        (reason, message) = (reason::SKIPPED, off);
    }
    let live = (removal, view.generation);
    report_on(cluster, regarding, live, reason, &message, now)
}

/// The condition for `reason` with `message`.
pub fn condition<'a>(reason: &'a str, message: &'a str) -> capi::Condition<'a> {
    capi::Condition {
        type_: names::WORKLOADS_REMOVED_CONDITION,
        status: reason == reason::REMOVED,
        reason,
        message,
    }
}

/// The Event due when the condition's reason becomes `reason` (`None`: it already was): its
/// reason, whether it is a Warning, and its note.
pub fn event_for(
    live: Option<&Value>,
    reason: &str,
    message: &str,
) -> Option<(&'static str, bool, String)> {
    let live_reason = live.and_then(|c| c.get("reason")).and_then(Value::as_str);
    if live_reason == Some(reason) {
        return None;
    }
    let (event, warning) = match reason {
        reason::REMOVING => ("FleetWorkloadsRemoving", false),
        reason::REMOVED => ("FleetWorkloadsRemoved", false),
        reason::SKIPPED => ("FleetWorkloadsRemovalSkipped", true),
        reason::TIMED_OUT => ("FleetWorkloadsRemovalTimedOut", true),
        reason::INTERRUPTED => (reason::INTERRUPTED, true),
        _ => return None,
    };
    Some((event, warning, event_note(message)))
}

/// The writes reporting `reason` and `message` on the Cluster `live` ([`report_on`]); none when
/// the condition is absent and `always` is false, or (`removing_only`) does not say
/// [`reason::REMOVING`] (a removal under way).
pub fn report(
    live: &CapiCluster,
    reason: &str,
    message: &str,
    (always, removing_only): (bool, bool),
    now: Timestamp,
) -> Vec<Write> {
    let status = live.body.get("status");
    let current = capi::live_condition(status.as_ref(), names::WORKLOADS_REMOVED_CONDITION);
    let under_way = current
        .and_then(|c| c.get("reason"))
        .and_then(Value::as_str);
    if (current.is_none() && !always) || (removing_only && under_way != Some(reason::REMOVING)) {
        return Vec::new();
    }
    let (object, regarding) = (ObjectId::observed(live), live.object_ref(&()));
    let generation = live.metadata.generation;
    report_on(
        object,
        &regarding,
        (current, generation),
        reason,
        message,
        now,
    )
}

/// The writes reporting `reason` and `message` on the Cluster `object` whose condition is
/// `current` (and generation `generation`): the `FleetWorkloadsRemoved` condition, applied only
/// when it changes by its own field manager owning only that condition, and the Event of a
/// change of its reason.
pub fn report_on(
    object: ObjectId,
    regarding: &ObjectReference,
    (current, generation): (Option<&Value>, Option<i64>),
    reason: &str,
    message: &str,
    now: Timestamp,
) -> Vec<Write> {
    let wanted = condition(reason, message);
    let applied = capi::condition_to_apply(current, &wanted, generation, now).map(|condition| {
        Write::ApplyStatus {
            body: json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2",
                "kind": "Cluster",
                "metadata": {"name": object.name},
                "status": {"conditions": [condition]},
            }),
            object,
            manager: names::TEARDOWN_FIELD_MANAGER,
        }
    });
    let event = event_for(current, reason, message).map(|(event, warning, note)| {
        let type_ = if warning {
            EventType::Warning
        } else {
            EventType::Normal
        };
        Write::event(regarding, type_, event, "Deleting", note)
    });
    applied.into_iter().chain(event).collect()
}

/// A time as Kubernetes writes it (RFC 3339, seconds, UTC).
pub fn rfc3339(time: Timestamp) -> String {
    time.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn short(duration: Duration) -> String {
    let secs = duration.as_secs();
    if secs.is_multiple_of(60) && secs > 0 {
        format!("{}m", secs / 60)
    } else {
        format!("{secs}s")
    }
}
