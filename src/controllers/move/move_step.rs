//! One reconcile of the move controller: observe the Cluster (fresh), its Fleet Cluster, its
//! move Bundles and, when the phase needs them, its object graph and what the target (the
//! workload cluster, through the Cluster's kubeconfig Secret) shows of the move; let
//! [`crate::model::move_decide::decide_move`] choose; record the new state on the Cluster
//! (folding a pause change into the same guarded patch, so the state and the pause never
//! disagree); then run the remaining actions. Every action is idempotent and re-issued until
//! its effect is seen, so a restart at any point resumes. What to write on either side is
//! decided by [`crate::model::move_target`] and [`crate::model::move_plan`].

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};

use super::observe::{
    Plan, Target, fleet_cluster_ready, list_bundles, needs_graph, spec_paused, unix_now,
};
use super::{CONFIG_WAIT, FleetBundle, MoveContext};
use crate::api::CapiCluster;
use crate::model::move_decide::{decide_move, next_check};
use crate::model::move_graph::ObjectId;
use crate::model::move_plan::{MOVE_FENCE_ANNOTATION, copy_of, stale_bundles};
use crate::model::move_state::{
    self, Action as MoveAction, BundlesStatus, MoveState, Observed, Phase, bundles_status,
    opted_in, parse_state, state_annotation,
};
use crate::model::move_target::{self, TargetView};
use crate::model::plan::{Next, ObjectId as WriteId, Plan as MovePlan, Write};
use crate::move_preview::{self, MoveInputs};
use crate::{Error, Result, names};

/// Annotation clusterctl sets on every object it deletes after a move, for the webhooks that
/// would otherwise refuse the deletion (cluster-api v1.12.0
/// `cmd/clusterctl/api/v1alpha3/annotations.go` `DeleteForMoveAnnotation`).
const DELETE_FOR_MOVE_ANNOTATION: &str = "clusterctl.cluster.x-k8s.io/delete-for-move";

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
    if meta.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    if let Some(state) = cached_state.filter(|s| s.phase == Phase::Moved) {
        return moved(meta, &state, &namespace, &name, ctx).await;
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
            return Err(Error::malformed(
                "Cluster",
                format!("{namespace}/{name}"),
                message,
            ));
        }
    };
    let phase = current.as_ref().map(|s| s.phase);
    if cluster.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    if let Some(state) = current.as_ref().filter(|s| s.phase == Phase::Moved) {
        return moved(&cluster, state, &namespace, &name, ctx).await;
    }
    let opted = opted_in(cluster.labels(), selector);
    let now = unix_now();
    let fleet_name = config.fleet_cluster_name(&name);

    let fleet_cluster_ready = if opted && phase == Some(Phase::Pending) {
        fleet_cluster_ready(&client, &namespace, &name, &fleet_name, &config).await?
    } else {
        false
    };
    let bundle_api: Api<FleetBundle> = Api::namespaced(client.clone(), &namespace);
    let live = if current.is_some() {
        list_bundles(&bundle_api, &name).await?
    } else {
        Vec::new()
    };
    let graph_read = match phase {
        Some(Phase::Pending) => opted && fleet_cluster_ready,
        Some(Phase::Failed) => current.as_ref().is_some_and(|s| s.copies_on_target),
        // Past the point of no return the move goes on even if the Cluster opts out.
        Some(p) => needs_graph(p) && (opted || !p.can_roll_back()),
        None => false,
    };
    let plan = Plan {
        namespace: &namespace,
        cluster: &name,
        fleet_cluster: &fleet_name,
        copy: copy_of(&namespace, &name),
    };
    let mut observed = Observed {
        opted_in: opted,
        fleet_cluster_ready,
        spec_paused: spec_paused(&cluster),
        paused_annotation: cluster
            .annotations()
            .contains_key(names::CAPI_PAUSED_ANNOTATION),
        now,
        ..Observed::default()
    };
    let inputs = if graph_read {
        match move_preview::gather(&client, &namespace, &name).await? {
            Ok(inputs) => Some(inputs),
            Err(reason) => {
                observed.graph_error = Some(reason);
                None
            }
        }
    } else {
        None
    };
    // The target, from the phases that publish on.
    let target = match (&inputs, phase) {
        (Some(inputs), Some(p)) if p != Phase::Pending => {
            Some(Target::read(&client, &namespace, &name, inputs, &plan).await)
        }
        _ => None,
    };
    let target_paused = !phase.is_some_and(Phase::target_took_over);
    let mut desired = None;
    if let Some(inputs) = &inputs {
        let graph = &inputs.graph;
        if !graph.shared.is_empty() {
            observed.graph_error = Some(
                graph
                    .shared
                    .iter()
                    .map(|s| format!("{} is shared: {}", s.id, s.reason))
                    .collect::<Vec<_>>()
                    .join("; "),
            );
        }
        observed.not_provisioned = move_target::not_provisioned(graph);
        observed.blocking = graph
            .nodes()
            .filter(|n| n.blocking)
            .map(|n| n.id.to_string())
            .collect();
        observed.unfenced = move_target::unfenced(graph).len();
        match target.as_ref().map(|t| &t.view) {
            Some(Ok(view)) => {
                let keep = move_target::keep_on_target(graph, view, &plan.copy);
                match plan.bundles(inputs, &keep, target_paused) {
                    Ok(bundles) => desired = Some(bundles),
                    Err(reason) => observed.graph_error = Some(reason),
                }
                let secrets = plan.secrets(inputs, &keep);
                observed.secrets_pending = move_target::secret_writes(&secrets, view).len();
                let links = move_target::owner_links(graph, view, &keep);
                observed.links_pending = (!links.done()).then(|| {
                    links.waiting.first().cloned().unwrap_or_else(|| {
                        format!("{} owner reference(s) to restore", links.patches.len())
                    })
                });
                observed.copies_left = move_target::copies_to_remove(graph, view, &plan.copy).len();
            }
            Some(Err(error)) => observed.target_error = Some(error.clone()),
            None => {}
        }
    }
    let live_json = live
        .iter()
        .map(serde_json::to_value)
        .collect::<std::result::Result<Vec<Value>, _>>()?;
    observed.bundles = match (&desired, &observed.target_error) {
        (Some(desired), _) => bundles_status(desired, &live_json),
        (None, _) if live_json.is_empty() => BundlesStatus::Missing,
        (None, Some(error)) => BundlesStatus::Waiting(format!("the target: {error}")),
        (None, None) => BundlesStatus::Waiting(String::new()),
    };
    let decision = decide_move(current.as_ref(), &observed, &ctx.timeouts);
    tracing::debug!(cluster = %name, %namespace, ?phase, ?decision, "move decided");

    let mut actions = decision.actions.clone();
    let run = Run {
        cluster: &cluster,
        live: &live,
        inputs: inputs.as_ref(),
        target: target.as_ref(),
        plan: &plan,
    };
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
        let record = merge(WriteId::observed(&cluster), patch);
        run.carry_out(ctx, vec![(Side::Management, record)]).await?;
        if phase != Some(state.phase) {
            report(ctx, &cluster, state).await;
        }
    }
    run.carry_out(ctx, run.writes(actions)?).await?;
    let state = decision.record.as_ref().or(current.as_ref());
    Ok(
        match next_check(state, decision.requeue, &ctx.timeouts, now) {
            Some(after) => Action::requeue(after.max(Duration::from_secs(1))),
            None => Action::await_change(),
        },
    )
}

/// A moved Cluster, from the cache: its Bundles removed, and its source kept paused and fenced
/// (read fully only when the cache shows it unpaused or without its fence).
async fn moved(
    cluster: &CapiCluster,
    state: &MoveState,
    namespace: &str,
    name: &str,
    ctx: &MoveContext,
) -> Result<Action> {
    let client = ctx.base.controllers.clone();
    let bundle_api: Api<FleetBundle> = Api::namespaced(client.clone(), namespace);
    let live = list_bundles(&bundle_api, name).await?;
    let paused = spec_paused(cluster);
    let annotated = cluster
        .annotations()
        .contains_key(names::CAPI_PAUSED_ANNOTATION);
    let inputs = if paused && annotated {
        None
    } else {
        move_preview::gather(&client, namespace, name).await?.ok()
    };
    let observed = Observed {
        opted_in: true,
        spec_paused: paused,
        paused_annotation: annotated,
        bundles: if live.is_empty() {
            BundlesStatus::Missing
        } else {
            BundlesStatus::Waiting(String::new())
        },
        unfenced: inputs
            .as_ref()
            .map_or(0, |i| move_target::unfenced(&i.graph).len()),
        now: unix_now(),
        ..Observed::default()
    };
    let decision = decide_move(Some(state), &observed, &ctx.timeouts);
    if decision.actions.is_empty() {
        return Ok(Action::await_change());
    }
    let plan = Plan {
        namespace,
        cluster: name,
        fleet_cluster: "",
        copy: copy_of(namespace, name),
    };
    let run = Run {
        cluster,
        live: &live,
        inputs: inputs.as_ref(),
        target: None,
        plan: &plan,
    };
    run.carry_out(ctx, run.writes(decision.actions)?).await?;
    Ok(Action::requeue(move_state::RECHECK))
}

/// Which cluster a write goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Management,
    Target,
}

/// A merge patch by the move controller.
fn merge(object: WriteId, patch: Value) -> Write {
    Write::MergePatch {
        object,
        patch,
        manager: names::MOVE_FIELD_MANAGER,
    }
}

/// What one reconcile turns its actions into writes with.
struct Run<'a> {
    cluster: &'a CapiCluster,
    live: &'a [FleetBundle],
    inputs: Option<&'a MoveInputs>,
    target: Option<&'a Target>,
    plan: &'a Plan<'a>,
}

impl Run<'_> {
    /// The target's client and view, when this reconcile could read it.
    fn target(&self) -> Option<(&kube::Client, &TargetView)> {
        let target = self.target?;
        Some((target.client.as_ref()?, target.view.as_ref().ok()?))
    }

    fn keep(&self) -> BTreeSet<ObjectId> {
        match (self.inputs, self.target()) {
            (Some(inputs), Some((_, view))) => {
                move_target::keep_on_target(&inputs.graph, view, &self.plan.copy)
            }
            _ => BTreeSet::new(),
        }
    }

    /// The writes of `actions`, in order, each on its side. Every action is idempotent: what
    /// the reads show done is not written again.
    fn writes(&self, actions: Vec<MoveAction>) -> Result<Vec<(Side, Write)>> {
        let mut writes = Vec::new();
        for action in actions {
            self.action_writes(action, &mut writes)?;
        }
        Ok(writes)
    }

    fn action_writes(&self, action: MoveAction, writes: &mut Vec<(Side, Write)>) -> Result<()> {
        use Side::{Management, Target};
        let namespace = self.plan.namespace;
        let target = self.inputs.zip(self.target());
        match action {
            MoveAction::SetSourcePaused(paused) => {
                let patch = json!({
                    "metadata": {"resourceVersion": self.cluster.metadata.resource_version},
                    "spec": {"paused": paused},
                });
                writes.push((Management, merge(WriteId::observed(self.cluster), patch)));
            }
            // Published only with what the target shows (the objects it keeps).
            MoveAction::ApplyBundles { target_paused } => {
                let Some((inputs, _)) = target else {
                    return Ok(());
                };
                let bundles = (self.plan)
                    .bundles(inputs, &self.keep(), target_paused)
                    .map_err(Error::Serialization)?;
                for bundle in &bundles {
                    let bundle: FleetBundle = serde_json::from_value(bundle.clone())?;
                    let name = bundle.metadata.name.as_deref();
                    let existing = self
                        .live
                        .iter()
                        .find(|l| l.metadata.name.as_deref() == name);
                    let seen = existing.and_then(|l| l.metadata.resource_version.as_deref());
                    let object =
                        WriteId::of::<FleetBundle>(Some(namespace), name.unwrap_or_default(), seen);
                    let write = Write::apply_if_changed(
                        object,
                        &bundle,
                        existing,
                        names::MOVE_FIELD_MANAGER,
                        None,
                    )?;
                    writes.extend(write.map(|write| (Management, write)));
                }
                let live: Vec<String> = self.live.iter().map(ResourceExt::name_any).collect();
                for stale in stale_bundles(&bundles, &live) {
                    let object = WriteId::of::<FleetBundle>(Some(namespace), &stale, None);
                    let live_check = false;
                    writes.push((Management, Write::Delete { object, live_check }));
                }
            }
            // Fleet creates a Bundle's namespaces only when it deploys it; the Secrets may come
            // first.
            MoveAction::WriteSecrets => {
                let Some((inputs, (_, view))) = target else {
                    return Ok(());
                };
                let secrets = self.plan.secrets(inputs, &self.keep());
                let mut namespaces = BTreeSet::new();
                for secret in move_target::secret_writes(&secrets, view) {
                    let ns = secret["metadata"]["namespace"]
                        .as_str()
                        .unwrap_or(namespace);
                    if namespaces.insert(ns.to_string()) {
                        writes.push((Target, Write::CreateOrGet {
                            object: WriteId::of::<Namespace>(None, ns, None),
                            body: json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
                            manager: names::MOVE_FIELD_MANAGER,
                        }));
                    }
                    let name = secret["metadata"]["name"].as_str().unwrap_or_default();
                    writes.push((
                        Target,
                        Write::Apply {
                            object: WriteId::of::<Secret>(Some(ns), name, None),
                            body: secret.clone(),
                            manager: names::MOVE_FIELD_MANAGER,
                        },
                    ));
                }
            }
            MoveAction::LinkOwners => {
                let Some((inputs, (_, view))) = target else {
                    return Ok(());
                };
                let links = move_target::owner_links(&inputs.graph, view, &self.keep());
                for (id, refs) in links.patches {
                    let patch = json!({"metadata": {"ownerReferences": refs}});
                    writes.push((Target, merge(object_id(inputs, &id)?, patch)));
                }
            }
            MoveAction::FenceSource => {
                let Some(inputs) = self.inputs else {
                    return Ok(());
                };
                for node in move_target::unfenced(&inputs.graph) {
                    let patch = json!({"metadata": {"annotations": {
                        names::CAPI_PAUSED_ANNOTATION: "",
                        MOVE_FENCE_ANNOTATION: self.plan.copy,
                    }}});
                    writes.push((Management, merge(object_id(inputs, &node.id)?, patch)));
                }
            }
            MoveAction::DeleteBundles => {
                writes.extend(self.live.iter().map(|bundle| {
                    let object = WriteId::observed(bundle);
                    (
                        Management,
                        Write::Delete {
                            object,
                            live_check: false,
                        },
                    )
                }));
            }
            // Finalizers first, as clusterctl deletes the source: nothing on the target may act
            // on the deletion of a paused copy (a KCP would otherwise start over).
            MoveAction::RemoveCopies => {
                let Some((inputs, (_, view))) = target else {
                    return Ok(());
                };
                let copies = move_target::copies_to_remove(&inputs.graph, view, &self.plan.copy);
                let ids = copies
                    .iter()
                    .map(|id| object_id(inputs, id))
                    .collect::<Result<Vec<_>>>()?;
                for object in &ids {
                    let patch = json!({"metadata": {
                        "annotations": {DELETE_FOR_MOVE_ANNOTATION: ""},
                        "finalizers": null,
                    }});
                    writes.push((Target, merge(object.clone(), patch)));
                }
                writes.extend(ids.into_iter().map(|object| {
                    (
                        Target,
                        Write::Delete {
                            object,
                            live_check: false,
                        },
                    )
                }));
            }
            MoveAction::Warn(reason, message) => {
                tracing::warn!(cluster = %self.cluster.name_any(), %namespace, reason, %message, "move");
                let regarding = self.cluster.object_ref(&());
                let event = Write::event(&regarding, EventType::Warning, reason, "Moving", message);
                writes.push((Management, event));
            }
        }
        Ok(())
    }

    /// Carries out `writes` in order through the one runner, on the management cluster or the
    /// target; stops at the first error.
    async fn carry_out(&self, ctx: &MoveContext, writes: Vec<(Side, Write)>) -> Result<()> {
        let recorder = &ctx.base.recorder;
        for (side, write) in writes {
            let client = match side {
                Side::Management => &ctx.base.controllers,
                Side::Target => self.target().map(|(client, _)| client).ok_or_else(|| {
                    Error::Serialization("a write to a target that was not read".into())
                })?,
            };
            let target = crate::apply::Target {
                client,
                recorder,
                expectations: None,
            };
            target
                .run(MovePlan::of(vec![write], Next::AwaitChange))
                .await?;
        }
        Ok(())
    }
}

/// The identity of an object of the graph, on either side.
fn object_id(inputs: &MoveInputs, id: &ObjectId) -> Result<WriteId> {
    let rule = inputs
        .types
        .rule(&id.api_version, &id.kind)
        .ok_or_else(|| Error::Serialization(format!("{id}: not a move type")))?;
    Ok(WriteId {
        resource: move_preview::resource(rule),
        namespace: id.namespace.clone(),
        name: id.name.clone(),
        seen: None,
    })
}

/// An Event and a log line when the phase changes (reason `Move<Phase>`).
async fn report(ctx: &MoveContext, cluster: &CapiCluster, state: &MoveState) {
    let phase = format!("{:?}", state.phase);
    let warning = matches!(state.phase, Phase::Failed | Phase::Stalled);
    let note = if state.message.is_empty() {
        format!("move: {phase}")
    } else {
        format!("move: {phase}: {}", state.message)
    };
    if warning {
        tracing::warn!(cluster = %cluster.name_any(), namespace = ?cluster.namespace(), %phase, message = %state.message, "move did not complete");
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Without the graph or the target nothing is published, written there or fenced; the
    /// source's pause is guarded by the resourceVersion read; the Bundles are deleted as listed.
    #[test]
    fn actions_become_writes_on_their_side() {
        let cluster: CapiCluster = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "c1", "namespace": "team-a", "uid": "u1", "resourceVersion": "7"},
            "spec": {},
        }))
        .expect("cluster");
        let bundle: FleetBundle = serde_json::from_value(json!({
            "apiVersion": "fleet.cattle.io/v1alpha1", "kind": "Bundle",
            "metadata": {"name": "move-c1-a", "namespace": "team-a"}, "spec": {},
        }))
        .expect("bundle");
        let plan = Plan {
            namespace: "team-a",
            cluster: "c1",
            fleet_cluster: "c1",
            copy: copy_of("team-a", "c1"),
        };
        let run = Run {
            cluster: &cluster,
            live: std::slice::from_ref(&bundle),
            inputs: None,
            target: None,
            plan: &plan,
        };
        let writes = run
            .writes(vec![
                MoveAction::ApplyBundles {
                    target_paused: true,
                },
                MoveAction::WriteSecrets,
                MoveAction::FenceSource,
                MoveAction::SetSourcePaused(true),
                MoveAction::DeleteBundles,
                MoveAction::Warn("MoveStalled", "stuck".into()),
            ])
            .expect("writes");
        let shapes: Vec<String> = writes
            .iter()
            .map(|(side, write)| match write {
                Write::MergePatch {
                    object,
                    patch,
                    manager,
                } => {
                    assert_eq!(*manager, names::MOVE_FIELD_MANAGER);
                    format!("{side:?} patch {} {patch}", object.name)
                }
                Write::Delete { object, .. } => format!("{side:?} delete {}", object.name),
                Write::Event { reason, .. } => format!("{side:?} event {reason}"),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(
            shapes,
            [
                r#"Management patch c1 {"metadata":{"resourceVersion":"7"},"spec":{"paused":true}}"#,
                "Management delete move-c1-a",
                "Management event MoveStalled",
            ]
        );
    }
}
