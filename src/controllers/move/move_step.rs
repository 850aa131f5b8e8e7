//! One reconcile of the move controller: observe the Cluster (fresh), its Fleet Cluster, its
//! move Bundles and, when the phase needs them, its object graph and what the target (the
//! workload cluster, through the Cluster's kubeconfig Secret) shows of the move; let
//! [`crate::model::move_state::decide_move`] choose; record the new state on the Cluster
//! (folding a pause change into the same guarded patch, so the state and the pause never
//! disagree); then run the remaining actions. Every action is idempotent and re-issued until
//! its effect is seen, so a restart at any point resumes. What to write on either side is
//! decided by [`crate::model::move_target`] and [`crate::model::move_plan`].

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fleet_api_rs::fleet_cluster::Cluster as FleetCluster;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DynamicObject, ListParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};

use super::{CONFIG_WAIT, FleetBundle, MoveContext};
use crate::api::CapiCluster;
use crate::apply::{apply_if_changed, apply_json, create_or_get, delete_if_exists, merge_patch};
use crate::client::workload;
use crate::model::config::{DEFAULT_AGENT_CHECKIN_INTERVAL, EffectiveConfig};
use crate::model::fleet_health::{self, RegistrationPath};
use crate::model::move_graph::ObjectId;
use crate::model::move_plan::{
    self, MOVE_CLUSTER_LABEL, MOVE_FENCE_ANNOTATION, PlanInput, copy_of, stale_bundles,
};
use crate::model::move_state::{
    self, Action as MoveAction, BundlesStatus, MoveState, Observed, Phase, bundles_status,
    decide_move, next_check, opted_in, parse_state, state_annotation,
};
use crate::model::move_target::{self, Key, TargetView};
use crate::move_preview::{self, MoveInputs};
use crate::{Error, Result, names};

/// Annotation clusterctl sets on every object it deletes after a move, for the webhooks that
/// would otherwise refuse the deletion (cluster-api v1.12.0
/// `cmd/clusterctl/api/v1alpha3/annotations.go` `DeleteForMoveAnnotation`).
const DELETE_FOR_MOVE_ANNOTATION: &str = "clusterctl.cluster.x-k8s.io/delete-for-move";

/// The target's API server: connecting, and one response.
const TARGET_TIMEOUTS: workload::Timeouts = workload::Timeouts {
    connect: Duration::from_secs(5),
    read: Duration::from_secs(30),
};

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Phases that read the object graph and the target.
fn needs_graph(phase: Phase) -> bool {
    matches!(
        phase,
        Phase::WaitingUnblocked
            | Phase::Publishing
            | Phase::WaitingTarget
            | Phase::Linking
            | Phase::FencingSource
            | Phase::ResumingTarget
            | Phase::Stalled
    )
}

fn spec_paused(cluster: &CapiCluster) -> bool {
    cluster
        .body
        .get("spec")
        .and_then(|s| s.get("paused").and_then(Value::as_bool))
        == Some(true)
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
    let run = Run {
        ctx,
        cluster: &cluster,
        clusters: &clusters,
        bundle_api: &bundle_api,
        live: &live,
        inputs: inputs.as_ref(),
        target: target.as_ref(),
        plan: &plan,
    };
    for action in actions {
        run.act(action).await?;
    }
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
    let clusters: Api<CapiCluster> = Api::namespaced(client.clone(), namespace);
    let plan = Plan {
        namespace,
        cluster: name,
        fleet_cluster: "",
        copy: copy_of(namespace, name),
    };
    let run = Run {
        ctx,
        cluster,
        clusters: &clusters,
        bundle_api: &bundle_api,
        live: &live,
        inputs: inputs.as_ref(),
        target: None,
        plan: &plan,
    };
    for action in decision.actions {
        run.act(action).await?;
    }
    Ok(Action::requeue(move_state::RECHECK))
}

async fn list_bundles(api: &Api<FleetBundle>, cluster: &str) -> Result<Vec<FleetBundle>> {
    Ok(api
        .list(&ListParams::default().labels(&format!("{MOVE_CLUSTER_LABEL}={cluster}")))
        .await?
        .items)
}

/// Where the Bundles of one move go.
struct Plan<'a> {
    namespace: &'a str,
    cluster: &'a str,
    fleet_cluster: &'a str,
    /// The value of [`move_plan::MOVE_COPY_ANNOTATION`] on this move's copies.
    copy: String,
}

impl Plan<'_> {
    fn input<'b>(
        &'b self,
        inputs: &'b MoveInputs,
        keep: &'b BTreeSet<ObjectId>,
        target_paused: bool,
    ) -> PlanInput<'b> {
        PlanInput {
            cluster_namespace: self.namespace,
            cluster_name: self.cluster,
            fleet_cluster_name: self.fleet_cluster,
            graph: &inputs.graph,
            providers: &inputs.providers,
            target_paused,
            keep_on_target: keep,
        }
    }

    fn bundles(
        &self,
        inputs: &MoveInputs,
        keep: &BTreeSet<ObjectId>,
        target_paused: bool,
    ) -> std::result::Result<Vec<Value>, String> {
        move_plan::bundles(&self.input(inputs, keep, target_paused)).map_err(|e| e.to_string())
    }

    fn secrets(&self, inputs: &MoveInputs, keep: &BTreeSet<ObjectId>) -> Vec<Value> {
        move_plan::target_secrets(&self.input(inputs, keep, true))
    }
}

/// The target as this reconcile read it.
struct Target {
    client: Option<kube::Client>,
    view: std::result::Result<TargetView, String>,
}

impl Target {
    /// Connects through the kubeconfig Secret and lists, per type and namespace, the objects of
    /// the graph and the Secrets the move writes.
    async fn read(
        management: &kube::Client,
        namespace: &str,
        cluster: &str,
        inputs: &MoveInputs,
        plan: &Plan<'_>,
    ) -> Self {
        let (client, server) =
            match workload::connect(management, namespace, cluster, TARGET_TIMEOUTS).await {
                Ok(found) => found,
                Err(why) => {
                    return Self {
                        client: None,
                        view: Err(why),
                    };
                }
            };
        let mut lists: BTreeSet<(String, String, Option<String>)> = BTreeSet::new();
        for node in inputs.graph.nodes() {
            lists.insert((
                node.id.api_version.clone(),
                node.id.kind.clone(),
                node.id.namespace.clone(),
            ));
        }
        for secret in plan.secrets(inputs, &BTreeSet::new()) {
            lists.insert((
                "v1".into(),
                "Secret".into(),
                secret["metadata"]["namespace"].as_str().map(str::to_string),
            ));
        }
        let mut view = TargetView::default();
        for (api_version, kind, ns) in lists {
            let Some(rule) = inputs.types.rule(&api_version, &kind) else {
                continue;
            };
            let ar = move_preview::resource(rule);
            match move_preview::list(&client, &ar, ns.as_deref()).await {
                Ok(objects) => {
                    for object in objects {
                        let key = Key {
                            group: rule.group.clone(),
                            kind: rule.kind.clone(),
                            namespace: object
                                .metadata
                                .namespace
                                .clone()
                                .filter(|_| rule.namespaced),
                            name: object.name_any(),
                        };
                        view.objects
                            .insert(key, serde_json::to_value(&object).unwrap_or(Value::Null));
                    }
                }
                Err(err) => {
                    return Self {
                        client: Some(client),
                        view: Err(unanswered(&server, &kind, &err)),
                    };
                }
            }
        }
        Self {
            client: Some(client),
            view: Ok(view),
        }
    }
}

/// Why the target did not answer, in words that stay the same for one cause.
fn unanswered(server: &str, what: &str, err: &Error) -> String {
    match err {
        Error::Kube(kube::Error::Api(status)) => format!(
            "its API server at {server} answered {} for {what}: {}",
            status.code, status.message
        ),
        _ => format!("its API server at {server} cannot be reached"),
    }
}

/// What one reconcile runs its actions with.
struct Run<'a> {
    ctx: &'a MoveContext,
    cluster: &'a CapiCluster,
    clusters: &'a Api<CapiCluster>,
    bundle_api: &'a Api<FleetBundle>,
    live: &'a [FleetBundle],
    inputs: Option<&'a MoveInputs>,
    target: Option<&'a Target>,
    plan: &'a Plan<'a>,
}

impl Run<'_> {
    fn name(&self) -> String {
        self.cluster.name_any()
    }

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

    async fn act(&self, action: MoveAction) -> Result<()> {
        let name = self.name();
        let namespace = self.plan.namespace;
        match action {
            MoveAction::SetSourcePaused(paused) => {
                let patch = json!({
                    "metadata": {"resourceVersion": self.cluster.metadata.resource_version},
                    "spec": {"paused": paused},
                });
                merge_patch(self.clusters, &name, &patch, names::MOVE_FIELD_MANAGER).await?;
                tracing::info!(cluster = %name, %namespace, paused, "source spec.paused set");
            }
            MoveAction::ApplyBundles { target_paused } => {
                // Published only with what the target shows (the objects it keeps).
                let (Some(inputs), Some(_)) = (self.inputs, self.target()) else {
                    return Ok(());
                };
                let keep = self.keep();
                let bundles = self
                    .plan
                    .bundles(inputs, &keep, target_paused)
                    .map_err(Error::Serialization)?;
                for bundle in &bundles {
                    let bundle: FleetBundle = serde_json::from_value(bundle.clone())?;
                    let existing = self
                        .live
                        .iter()
                        .find(|l| l.metadata.name == bundle.metadata.name);
                    let written = apply_if_changed(
                        self.bundle_api,
                        &bundle,
                        existing,
                        names::MOVE_FIELD_MANAGER,
                    )
                    .await?;
                    tracing::debug!(cluster = %name, %namespace, bundle = ?bundle.metadata.name, outcome = ?written.outcome, "move Bundle");
                }
                let live: Vec<String> = self.live.iter().map(ResourceExt::name_any).collect();
                for stale in stale_bundles(&bundles, &live) {
                    delete_if_exists(self.bundle_api, &stale).await?;
                    tracing::info!(cluster = %name, %namespace, bundle = %stale, "stale move Bundle removed");
                }
            }
            MoveAction::WriteSecrets => {
                let (Some(inputs), Some((client, view))) = (self.inputs, self.target()) else {
                    return Ok(());
                };
                let secrets = self.plan.secrets(inputs, &self.keep());
                let writes = move_target::secret_writes(&secrets, view);
                let mut namespaces = BTreeSet::new();
                for secret in writes {
                    let ns = secret["metadata"]["namespace"]
                        .as_str()
                        .unwrap_or(namespace);
                    if namespaces.insert(ns.to_string()) {
                        ensure_namespace(client, ns).await?;
                    }
                    let secret_name = secret["metadata"]["name"].as_str().unwrap_or_default();
                    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
                    apply_json(&api, secret_name, secret, names::MOVE_FIELD_MANAGER).await?;
                    tracing::info!(cluster = %name, %namespace, secret = %format!("{ns}/{secret_name}"), "Secret written to the target");
                }
            }
            MoveAction::LinkOwners => {
                let (Some(inputs), Some((client, view))) = (self.inputs, self.target()) else {
                    return Ok(());
                };
                let links = move_target::owner_links(&inputs.graph, view, &self.keep());
                for (id, refs) in links.patches {
                    let api = dynamic_api(client, inputs, &id)?;
                    let patch = json!({"metadata": {"ownerReferences": refs}});
                    merge_patch(&api, &id.name, &patch, names::MOVE_FIELD_MANAGER).await?;
                }
            }
            MoveAction::FenceSource => {
                let Some(inputs) = self.inputs else {
                    return Ok(());
                };
                let management = self.ctx.base.controllers.clone();
                for node in move_target::unfenced(&inputs.graph) {
                    let api = dynamic_api(&management, inputs, &node.id)?;
                    let patch = json!({"metadata": {"annotations": {
                        names::CAPI_PAUSED_ANNOTATION: "",
                        MOVE_FENCE_ANNOTATION: self.plan.copy,
                    }}});
                    merge_patch(&api, &node.id.name, &patch, names::MOVE_FIELD_MANAGER).await?;
                    tracing::info!(cluster = %name, %namespace, object = %node.id, "source object fenced");
                }
            }
            MoveAction::DeleteBundles => {
                for bundle in self.live {
                    delete_if_exists(self.bundle_api, &bundle.name_any()).await?;
                }
            }
            MoveAction::RemoveCopies => {
                let (Some(inputs), Some((client, view))) = (self.inputs, self.target()) else {
                    return Ok(());
                };
                let copies = move_target::copies_to_remove(&inputs.graph, view, &self.plan.copy);
                // Finalizers first, as clusterctl deletes the source: nothing on the target may
                // act on the deletion of a paused copy (a KCP would otherwise start over).
                for id in &copies {
                    let api = dynamic_api(client, inputs, id)?;
                    let patch = json!({"metadata": {
                        "annotations": {DELETE_FOR_MOVE_ANNOTATION: ""},
                        "finalizers": null,
                    }});
                    merge_patch(&api, &id.name, &patch, names::MOVE_FIELD_MANAGER).await?;
                }
                for id in &copies {
                    let api = dynamic_api(client, inputs, id)?;
                    delete_if_exists(&api, &id.name).await?;
                    tracing::info!(cluster = %name, %namespace, object = %id, "copy removed from the target");
                }
            }
            MoveAction::Warn(reason, message) => {
                tracing::warn!(cluster = %name, %namespace, reason, %message, "move");
                self.ctx
                    .base
                    .event(
                        &self.cluster.object_ref(&()),
                        EventType::Warning,
                        reason,
                        "Moving",
                        message,
                    )
                    .await;
            }
        }
        Ok(())
    }
}

/// The dynamic API of an object of the graph, on either side.
fn dynamic_api(
    client: &kube::Client,
    inputs: &MoveInputs,
    id: &ObjectId,
) -> Result<Api<DynamicObject>> {
    let rule = inputs
        .types
        .rule(&id.api_version, &id.kind)
        .ok_or_else(|| Error::Serialization(format!("{id}: not a move type")))?;
    let ar = move_preview::resource(rule);
    Ok(match &id.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    })
}

/// Creates `namespace` on the target when it is missing (Fleet creates a Bundle's namespaces
/// only when it deploys it; the Secrets may come first).
async fn ensure_namespace(client: &kube::Client, namespace: &str) -> Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    let object: Namespace = serde_json::from_value(json!({"metadata": {"name": namespace}}))?;
    create_or_get(&api, &object, names::MOVE_FIELD_MANAGER).await?;
    Ok(())
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
