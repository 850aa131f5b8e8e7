//! One reconcile of the move controller: observe the Cluster (fresh), its Fleet Cluster, its
//! move Bundles and, when the phase needs it, its object graph; let
//! [`crate::model::move_state::decide_move`] choose; record the new state on the Cluster (folding a
//! pause change into the same guarded patch, so the state and the pause never disagree); then
//! run the remaining actions. Every action is idempotent and re-issued until its effect is seen,
//! so a restart at any point resumes.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fleet_api_rs::fleet_cluster::Cluster as FleetCluster;
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};

use super::{CONFIG_WAIT, FleetBundle, MoveContext};
use crate::api::CapiCluster;
use crate::apply::{apply_if_changed, delete_if_exists, merge_patch};
use crate::model::config::{DEFAULT_AGENT_CHECKIN_INTERVAL, EffectiveConfig};
use crate::model::fleet_health::{self, RegistrationPath};
use crate::model::move_plan::{self, MOVE_CLUSTER_LABEL, PlanInput};
use crate::model::move_state::{
    self, Action as MoveAction, BundlesStatus, MoveState, Observed, Phase, bundles_status,
    decide_move, next_check, opted_in, parse_state, state_annotation,
};
use crate::move_preview::{self, MoveInputs};
use crate::{Error, Result, names};

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Phases that read the object graph (block-move annotations, the Bundles to publish).
fn needs_graph(phase: Option<Phase>) -> bool {
    matches!(
        phase,
        Some(
            Phase::WaitingUnblocked
                | Phase::Publishing
                | Phase::WaitingTarget
                | Phase::ResumingTarget
        )
    )
}

pub(super) async fn reconcile(meta: &CapiCluster, ctx: &MoveContext) -> Result<Action> {
    let Some(config) = ctx.base.config() else {
        return Ok(Action::requeue(CONFIG_WAIT));
    };
    let (Some(namespace), name) = (meta.namespace(), meta.name_any()) else {
        return Ok(Action::await_change());
    };
    let selector = config
        .cluster
        .as_ref()
        .and_then(|c| c.self_managed_selector.as_ref());
    // From the cache first: most Clusters neither opted in nor carry a state (no request).
    let cached_state = parse_state(meta.annotations()).ok().flatten();
    if cached_state.is_none() && !opted_in(meta.labels(), selector) {
        return Ok(Action::await_change());
    }
    if cached_state
        .as_ref()
        .is_some_and(|s| s.phase == Phase::Moved)
        || meta.metadata.deletion_timestamp.is_some()
    {
        return Ok(Action::await_change());
    }

    let client = ctx.base.controllers.clone();
    let clusters: Api<CapiCluster> = Api::namespaced(client.clone(), &namespace);
    let Some(cluster) = clusters.get_opt(&name).await? else {
        return Ok(Action::await_change());
    };
    let current = match parse_state(cluster.annotations()) {
        Ok(state) => state,
        Err(message) => {
            // Someone edited the annotation: a user must fix or remove it.
            ctx.base
                .event(
                    &cluster.object_ref(&()),
                    EventType::Warning,
                    "MoveStateInvalid",
                    "Moving",
                    message.clone(),
                )
                .await;
            return Err(Error::Malformed {
                kind: "Cluster",
                name: format!("{namespace}/{name}"),
                reason: message,
            });
        }
    };
    let phase = current.as_ref().map(|s| s.phase);
    if phase == Some(Phase::Moved) || cluster.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let opted = opted_in(cluster.labels(), selector);
    let now = unix_now();
    let spec_paused = cluster
        .body
        .get("spec")
        .and_then(|s| s.get("paused").and_then(Value::as_bool))
        == Some(true);
    let paused_annotation = cluster
        .annotations()
        .contains_key(names::CAPI_PAUSED_ANNOTATION);
    let fleet_name = config.fleet_cluster_name(&name);

    let fleet_cluster_ready = if opted && phase == Some(Phase::Pending) {
        fleet_cluster_ready(&client, &namespace, &name, &fleet_name, &config).await?
    } else {
        false
    };
    let bundle_api: Api<FleetBundle> = Api::namespaced(client.clone(), &namespace);
    let live = if current.is_some() {
        bundle_api
            .list(&ListParams::default().labels(&format!("{MOVE_CLUSTER_LABEL}={name}")))
            .await?
            .items
    } else {
        Vec::new()
    };
    let live_json = live
        .iter()
        .map(serde_json::to_value)
        .collect::<std::result::Result<Vec<Value>, _>>()?;

    let inputs = if opted && needs_graph(phase) {
        Some(move_preview::gather(&client, &namespace, &name).await?)
    } else {
        None
    };
    let target_paused = phase != Some(Phase::ResumingTarget);
    let plan = Plan {
        namespace: &namespace,
        cluster: &name,
        fleet_cluster: &fleet_name,
    };
    let mut graph_error = None;
    let mut blocking = Vec::new();
    let mut desired = None;
    match &inputs {
        None => {}
        Some(Err(reason)) => graph_error = Some(reason.clone()),
        Some(Ok(inputs)) => {
            blocking = inputs
                .graph
                .nodes()
                .filter(|n| n.blocking)
                .map(|n| n.id.to_string())
                .collect();
            match plan.bundles(inputs, target_paused) {
                Ok(bundles) => desired = Some(bundles),
                Err(reason) => graph_error = Some(reason),
            }
        }
    }
    let bundles = match &desired {
        Some(desired) => bundles_status(desired, &live_json),
        None if live_json.is_empty() => BundlesStatus::Missing,
        None => BundlesStatus::Waiting(String::new()),
    };
    let observed = Observed {
        opted_in: opted,
        fleet_cluster_ready,
        spec_paused,
        paused_annotation,
        graph_error,
        blocking,
        bundles,
        now,
    };
    let decision = decide_move(current.as_ref(), &observed, &ctx.timeouts);
    tracing::debug!(cluster = %name, %namespace, ?phase, ?decision, "move decided");

    let mut actions = decision.actions.clone();
    if let Some(state) = &decision.record {
        // Record first, with a pause change in the same patch; guarded by the resourceVersion
        // everything above was read at, so a concurrent change means deciding again.
        let mut patch = json!({"metadata": {
            "resourceVersion": cluster.metadata.resource_version,
            "annotations": {move_state::MOVE_STATE_ANNOTATION: state_annotation(state)},
        }});
        if let Some(i) = actions
            .iter()
            .position(|a| matches!(a, MoveAction::SetSourcePaused(_)))
            && let MoveAction::SetSourcePaused(paused) = actions.remove(i)
        {
            patch["spec"] = json!({"paused": paused});
        }
        merge_patch(&clusters, &name, &patch, names::MOVE_FIELD_MANAGER).await?;
        if phase != Some(state.phase) {
            report(ctx, &cluster, state).await;
        }
    }
    for action in actions {
        match action {
            MoveAction::SetSourcePaused(paused) => {
                let patch = json!({
                    "metadata": {"resourceVersion": cluster.metadata.resource_version},
                    "spec": {"paused": paused},
                });
                merge_patch(&clusters, &name, &patch, names::MOVE_FIELD_MANAGER).await?;
                tracing::info!(cluster = %name, %namespace, paused, "source spec.paused set");
            }
            MoveAction::ApplyBundles { target_paused } => {
                let inputs = match inputs {
                    Some(Ok(ref inputs)) => inputs,
                    // The phases that publish read the graph above; nothing to publish from.
                    _ => continue,
                };
                let bundles = plan
                    .bundles(inputs, target_paused)
                    .map_err(Error::Serialization)?;
                for bundle in bundles {
                    let bundle: FleetBundle = serde_json::from_value(bundle)?;
                    let existing = live
                        .iter()
                        .find(|l| l.metadata.name == bundle.metadata.name);
                    let written =
                        apply_if_changed(&bundle_api, &bundle, existing, names::MOVE_FIELD_MANAGER)
                            .await?;
                    tracing::debug!(cluster = %name, %namespace, bundle = ?bundle.metadata.name, outcome = ?written.outcome, "move Bundle");
                }
            }
            MoveAction::DeleteBundles => {
                for bundle in &live {
                    delete_if_exists(&bundle_api, &bundle.name_any()).await?;
                }
            }
        }
    }
    let state = decision.record.as_ref().or(current.as_ref());
    Ok(
        match next_check(state, decision.requeue, &ctx.timeouts, now) {
            Some(after) => Action::requeue(after.max(Duration::from_secs(1))),
            None => Action::await_change(),
        },
    )
}

/// Where the Bundles of one move go.
struct Plan<'a> {
    namespace: &'a str,
    cluster: &'a str,
    fleet_cluster: &'a str,
}

impl Plan<'_> {
    fn bundles(
        &self,
        inputs: &MoveInputs,
        target_paused: bool,
    ) -> std::result::Result<Vec<Value>, String> {
        move_plan::bundles(&PlanInput {
            cluster_namespace: self.namespace,
            cluster_name: self.cluster,
            fleet_cluster_name: self.fleet_cluster,
            graph: &inputs.graph,
            providers: &inputs.providers,
            target_paused,
        })
        .map_err(|e| e.to_string())
    }
}

/// Whether the Cluster's Fleet Cluster is ready, as the `FleetReady` condition says it
/// ([`fleet_health::evaluate`]: the agent checks in and every bundle targeting it is ready).
async fn fleet_cluster_ready(
    client: &kube::Client,
    namespace: &str,
    cluster: &str,
    fleet_name: &str,
    config: &EffectiveConfig,
) -> Result<bool> {
    let api: Api<FleetCluster> = Api::namespaced(client.clone(), namespace);
    let Some(fleet) = api.get_opt(fleet_name).await? else {
        return Ok(false);
    };
    let interval = config
        .cluster
        .as_ref()
        .map_or(DEFAULT_AGENT_CHECKIN_INTERVAL, |c| c.agent_checkin_interval);
    // The registration only shapes messages, which are not used here.
    let registration = RegistrationPath::ManagerInitiated {
        kubeconfig_secret: format!("{namespace}/{}", names::kubeconfig_secret_name(cluster)),
    };
    Ok(fleet_health::evaluate(
        &registration,
        fleet.status.as_ref(),
        interval,
        Timestamp::now(),
    )
    .ready)
}

/// An Event and a log line when the phase changes (reason `Move<Phase>`).
async fn report(ctx: &MoveContext, cluster: &CapiCluster, state: &MoveState) {
    let phase = format!("{:?}", state.phase);
    let warning = state.phase == Phase::Failed;
    let note = if state.message.is_empty() {
        format!("move: {phase}")
    } else {
        format!("move: {phase}: {}", state.message)
    };
    if warning {
        tracing::warn!(cluster = %cluster.name_any(), namespace = ?cluster.namespace(), %phase, message = %state.message, "move failed");
    } else {
        tracing::info!(cluster = %cluster.name_any(), namespace = ?cluster.namespace(), %phase, "move");
    }
    ctx.base
        .event(
            &cluster.object_ref(&()),
            if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            &format!("Move{phase}"),
            "Moving",
            note,
        )
        .await;
}
