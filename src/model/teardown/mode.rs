//! Which Clusters are torn down, until when, and whether the import controller keeps their
//! Fleet Cluster meanwhile.

use fleet_api_rs::fleet_cluster::Cluster as FleetCluster;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::model::capi::{ClusterView, StringMap};
use crate::model::config::{DEFAULT_TEARDOWN_TIMEOUT, TeardownSettings};
use crate::names;

/// Retry interval while the workloads are removed (Cluster API v1.11 calls the hook on every
/// reconcile of the Cluster anyway; v1.12 waits this long: research Q6).
pub const RETRY_TEARDOWN: i32 = 15;

/// Whether a deleting Cluster's Fleet workloads are removed first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Off for this Cluster (the configuration, or its annotation `"false"`).
    Off,
    /// The request's Cluster has no `metadata.deletionTimestamp`: nothing is being deleted.
    NotDeleting,
    /// The operator's skip annotation.
    Skipped,
    /// On, but the deadline passed.
    Expired { deadline: Timestamp },
    /// On until `deadline` (the Cluster's `deletionTimestamp` plus the timeout).
    On { deadline: Timestamp },
    /// The FleetAddonConfig has not been read yet and the Cluster's annotations do not decide.
    Unknown,
}

/// [`Mode`], and the problems of the Cluster's annotations (each naming the annotation; an
/// invalid value is ignored, the default applies).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModeDecision {
    pub mode: Mode,
    pub problems: Vec<String>,
}

/// The teardown mode of a Cluster from its annotations, its `deletionTimestamp` and
/// `spec.runtimeExtension.beforeClusterDelete` (`None`: not read yet). Needs nothing else, so
/// BeforeClusterDelete decides it from the request alone and the import controller from its
/// cache, with the same result.
pub fn mode(
    annotations: &StringMap,
    deleted_at: Option<Timestamp>,
    settings: Option<&TeardownSettings>,
    now: Timestamp,
) -> ModeDecision {
    let mut problems = Vec::new();
    let mut flag = |name: &str, default_note: &str| -> Option<bool> {
        match annotations.get(name).map(String::as_str) {
            None => None,
            Some("true") => Some(true),
            Some("false") => Some(false),
            Some(other) => {
                problems.push(format!(
                    "annotation {name}: {other:?} is neither \"true\" nor \"false\" (ignored: {default_note})"
                ));
                None
            }
        }
    };
    let requested = flag(
        names::REMOVE_WORKLOADS_ANNOTATION,
        "spec.runtimeExtension.beforeClusterDelete.removeWorkloads applies",
    );
    let skipped = flag(
        names::SKIP_WORKLOAD_REMOVAL_ANNOTATION,
        "the workloads are removed",
    ) == Some(true);
    let enabled = requested.or(settings.map(|s| s.remove_workloads));
    let mode = match enabled {
        Some(false) => Mode::Off,
        _ if skipped => Mode::Skipped,
        None => Mode::Unknown,
        Some(true) => match deleted_at {
            None => Mode::NotDeleting,
            Some(since) => {
                let timeout = settings.map_or(DEFAULT_TEARDOWN_TIMEOUT, |s| s.timeout);
                let deadline = SignedDuration::try_from(timeout)
                    .ok()
                    .and_then(|timeout| since.checked_add(timeout).ok())
                    .unwrap_or(Timestamp::MAX);
                if now >= deadline {
                    Mode::Expired { deadline }
                } else {
                    Mode::On { deadline }
                }
            }
        },
    };
    ModeDecision { mode, problems }
}

/// Whether the import controller keeps a deleting Cluster's Fleet Cluster (and our finalizer)
/// for the teardown instead of cleaning up at once; `Some(deadline)` until when. Only while
/// Cluster API waits for BeforeClusterDelete: the Cluster has a topology (kubernetes-sigs/
/// cluster-api v1.11.0 `internal/controllers/cluster/cluster_controller.go` `reconcileDelete`
/// waits only for `cluster.Spec.Topology.IsDefined() && !hooks.IsOkToDelete(cluster)`) and no
/// `ok-to-delete` annotation yet; and while there is a Fleet Cluster to keep (`live`, not
/// being deleted). Whether its agent ever registered is checked on the decoded object
/// ([`is_registered`]).
pub fn holds_cleanup(
    view: &ClusterView,
    settings: &TeardownSettings,
    live: Option<&ObjectMeta>,
    now: Timestamp,
) -> Option<Timestamp> {
    if !view.deleting
        || view.class.is_none()
        || view
            .annotations
            .contains_key(names::CAPI_OK_TO_DELETE_ANNOTATION)
        || live.is_none_or(|meta| meta.deletion_timestamp.is_some())
    {
        return None;
    }
    match mode(&view.annotations, view.deleted_at, Some(settings), now).mode {
        Mode::On { deadline } => Some(deadline),
        _ => None,
    }
}

/// Whether the Fleet Cluster's agent ever checked in (`status.agent.lastSeen`): a cluster whose
/// agent never registered has nothing Fleet deployed, and is never held.
pub fn is_registered(fleet: &FleetCluster) -> bool {
    fleet
        .status
        .as_ref()
        .and_then(|status| status.agent.as_ref())
        .and_then(|agent| agent.last_seen.as_deref())
        .is_some_and(|seen| !seen.is_empty())
}
