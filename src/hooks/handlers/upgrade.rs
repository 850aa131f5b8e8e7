//! The upgrade hooks (BeforeClusterUpgrade, BeforeControlPlaneUpgrade, AfterControlPlaneUpgrade,
//! BeforeWorkersUpgrade, AfterWorkersUpgrade, AfterClusterUpgrade): each records the step on the
//! Cluster's Fleet Cluster, so Fleet sees where the cluster is, and, with a gate on, holds the
//! step until Fleet's bundles are ready for it. What to record and when to hold is decided in
//! [`crate::model::upgrade_steps`]; `spec.runtimeExtension.beforeClusterUpgrade
//! .waitForBundlesReady` is the same gate at BeforeClusterUpgrade over the bundles as they are,
//! answered as before ([`crate::model::hook_plan::upgrade_answer`]). Before them, with
//! `spec.cluster.rollout.kubernetesUpgrades`, BeforeClusterUpgrade waits for the earlier rollout
//! waves of the Cluster's class ([`crate::model::rollout::upgrades`]).

use fleet_api_rs::fleet_cluster::Cluster as FleetCluster;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::events::EventType;
use serde_json::json;

use crate::api::CapiClusterClass;
use crate::hooks::cluster::ClusterInfo;
use crate::hooks::handlers::api::{api_retry, bundle_deployments, get_opt, namespace_labels};
use crate::hooks::hook_context::HookContext;
use crate::hooks::types::LifecycleRequest;
use crate::model::config::EffectiveConfig;
use crate::model::hook_plan::{self as plan, HookImport, HookOutcome};
use crate::model::plan::{ObjectId, Write};
use crate::model::rollout::Rollout;
use crate::model::rollout::upgrades::{self, Peer};
use crate::model::selection::WatchScope;
use crate::model::upgrade_steps::{
    GateSettings, StepRequest, UpgradeHook, UpgradeStep, gate_before_bundles, gate_bundles,
    gate_settings, next_step, of_step, retargeted,
};
use crate::names;

/// One upgrade hook.
pub async fn upgrade_step(
    ctx: &HookContext,
    cluster: &ClusterInfo,
    hook: UpgradeHook,
    request: &LifecycleRequest,
) -> HookOutcome {
    let Some(config) = ctx.base.config() else {
        return plan::config_not_read();
    };
    if hook == UpgradeHook::BeforeClusterUpgrade
        && let Some(held) = wave_wait(ctx, cluster, request, &config).await
    {
        return held;
    }
    // Create-only Fleet Clusters (CAAPF's `patchResource: false`) never show a step.
    let told = config.cluster.as_ref().is_some_and(|i| i.patch_resource);
    let settings = gate_settings(&config.runtime_extension, hook, told, &cluster.annotations);
    if !told && !settings.gated() {
        return HookOutcome::success(
            "Fleet is not told of upgrade steps: FleetAddonConfig spec.cluster.patchResource is not true, so Fleet Clusters are never updated",
        );
    }
    let gated = settings.gated();
    match step(ctx, cluster, hook, request, &config, &settings, told).await {
        Ok(outcome) | Err(outcome) if gated => outcome,
        // Without a gate our own trouble never holds an upgrade: Fleet is told at the next call.
        Ok(outcome) => outcome,
        Err(HookOutcome::Retry { message, .. }) => {
            HookOutcome::success(format!("Fleet is not told of this step: {message}"))
        }
        Err(other) => other,
    }
}

async fn step(
    ctx: &HookContext,
    cluster: &ClusterInfo,
    hook: UpgradeHook,
    request: &LifecycleRequest,
    config: &EffectiveConfig,
    settings: &GateSettings,
    told: bool,
) -> Result<HookOutcome, HookOutcome> {
    let ns = cluster.namespace.as_str();
    if settings.gated() {
        // A Cluster we do not import gets no labels: nothing to wait for.
        let labels = namespace_labels(&ctx.base.client, ns).await?;
        let flags = &ctx.base.flags;
        let scope = WatchScope::new(flags.watch_namespace(), flags.watch_filter_label());
        if let Ok(HookImport::NotImported(reason)) =
            plan::hook_import(config, &scope, cluster, &labels)
        {
            return Ok(HookOutcome::success(format!(
                "not waiting for Fleet: {reason}"
            )));
        }
    }
    // One GET of the Fleet Cluster the import controller keeps for this Cluster: live, since a
    // gate must not follow a stale copy.
    let fleet_clusters: Api<FleetCluster> = Api::namespaced(ctx.base.client.clone(), ns);
    let fleet_name = plan::fleet_cluster_of(cluster, Some(config));
    let Some(fleet) = get_opt(&fleet_clusters, &fleet_name, "Fleet Cluster", ns).await? else {
        return Ok(HookOutcome::success(format!(
            "Cluster {ns}/{} has no Fleet Cluster: nothing to tell Fleet",
            cluster.name
        )));
    };
    let now = Timestamp::now();
    let annotations = fleet.metadata.annotations.clone().unwrap_or_default();
    let previous = UpgradeStep::parse(
        annotations
            .get(names::UPGRADE_STEP_ANNOTATION)
            .map(String::as_str),
    );
    let Some(mut step) = next_step(
        hook,
        &step_request(request, cluster),
        previous.as_ref(),
        now,
    ) else {
        return Ok(HookOutcome::success(format!(
            "the {} request carries no Kubernetes versions: nothing to tell Fleet",
            hook.name()
        )));
    };
    let labels = fleet.metadata.labels.clone().unwrap_or_default();
    // The older gate looks at the bundles as they are: nothing to show first.
    let shown = settings.as_they_are || of_step(&step).shown_by(&labels);
    let gate = gate_before_bundles(
        &step,
        settings,
        cluster
            .annotations
            .get(names::SKIP_UPGRADE_GATE_ANNOTATION)
            .map(String::as_str),
        shown,
        import_applied_at(&fleet),
        now,
    );
    let released = gate.as_ref().err().and_then(|answer| answer.released);
    if let Some(how) = released {
        step.released = Some(how.to_string());
    }
    let mut answer = gate.err().map(|answer| answer.outcome);
    let mut deployments = Vec::new();
    if answer.is_none() {
        match bundles(ctx, cluster, &fleet, settings).await {
            Ok(found) => deployments = found,
            Err(outcome) => answer = Some(outcome),
        }
    }
    if answer.is_none() && settings.wait_for_bundles {
        let applied_at = import_applied_at(&fleet);
        answer = retargeted(&mut step, &deployments, settings.settle, applied_at, now).err();
    }
    // The older gate records its step too, for its timeout.
    if (told || settings.as_they_are) && previous.as_ref() != Some(&step) {
        ctx.write(vec![record(&fleet, &step)]).await?;
        if let Some(how) = released {
            ctx.base
                .event(
                    &cluster_reference(cluster),
                    EventType::Warning,
                    "UpgradeGateReleased",
                    "Upgrading",
                    format!("The Fleet gate of {} was released ({how})", step.describe()),
                )
                .await;
        }
    }
    if let Some(answer) = answer {
        return Ok(answer);
    }
    let fleet_key = format!("{ns}/{fleet_name}");
    Ok(if settings.as_they_are {
        plan::upgrade_answer(
            cluster,
            &fleet_name,
            &deployments,
            request.to_kubernetes_version.as_deref(),
        )
    } else {
        gate_bundles(&step, &fleet_key, &deployments)
    })
}

/// The hold of the rollout waves (`spec.cluster.rollout.kubernetesUpgrades`), before the bundle
/// gates: one LIST of the Clusters that may share the class, only for a Cluster of a later wave
/// ([`upgrades::wait`]): the namespace the provider watches, else the Cluster's own when its
/// class is there, else all (a class of another namespace is shared across namespaces). Live: the
/// Cluster caches are the leader's while every replica serves the hooks, and Cluster API labels no
/// Cluster with its class (docs/rollout.md).
async fn wave_wait(
    ctx: &HookContext,
    cluster: &ClusterInfo,
    request: &LifecycleRequest,
    config: &EffectiveConfig,
) -> Option<HookOutcome> {
    let rollout = config.cluster.as_ref().and_then(|c| c.rollout.as_ref());
    let later = |r: &&Rollout| r.kubernetes_upgrades && r.wave_of(cluster).0 > 0;
    rollout.filter(later)?;
    let target = request.to_kubernetes_version.as_deref()?;
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta2", "Cluster"),
        "clusters",
    );
    let class = cluster.class.as_ref()?;
    let own = class.namespace == cluster.namespace;
    let scope = ctx.base.flags.watch_namespace();
    let scope = scope.or(own.then_some(cluster.namespace.as_str()));
    let client = ctx.base.client.clone();
    let api: Api<DynamicObject> = match scope {
        Some(ns) => Api::namespaced_with(client, ns, &resource),
        None => Api::all_with(client, &resource),
    };
    let listed = match api.list(&ListParams::default()).await {
        Ok(listed) => listed,
        Err(err) => {
            let ns = scope.unwrap_or_default();
            return Some(api_retry("listing Clusters in", ns, "", &err.into()));
        }
    };
    let peers: Vec<Peer> = listed
        .items
        .into_iter()
        .filter_map(|c| Peer::from_json(serde_json::to_value(c).ok()?))
        .collect();
    // One GET: the class's release annotation ends the soaks, as it ends the add-on soaks.
    let classes: Api<CapiClusterClass> = Api::namespaced(ctx.base.client.clone(), &class.namespace);
    let found = match get_opt(&classes, &class.name, "ClusterClass", &class.namespace).await {
        Ok(found) => found.and_then(|c| c.metadata.annotations),
        Err(outcome) => return Some(outcome),
    };
    let released = found.is_some_and(|a| {
        a.get(names::ROLLOUT_RELEASE_ANNOTATION)
            .is_some_and(|v| v == "true")
    });
    upgrades::wait(rollout, cluster, target, &peers, released, Timestamp::now())
}

/// The live BundleDeployments of the Fleet Cluster the gate waits for.
async fn bundles(
    ctx: &HookContext,
    cluster: &ClusterInfo,
    fleet: &FleetCluster,
    settings: &GateSettings,
) -> Result<Vec<serde_json::Value>, HookOutcome> {
    let bundle_ns = plan::bundle_namespace(cluster, Some(fleet))?;
    let deployments = bundle_deployments(&ctx.base.client, &bundle_ns).await?;
    Ok(settings.select(deployments))
}

/// The versions of `request`, with the Cluster's target version.
fn step_request(request: &LifecycleRequest, cluster: &ClusterInfo) -> StepRequest {
    let versions = |steps: &[crate::hooks::types::UpgradeStepInfo]| {
        steps
            .iter()
            .map(|s| s.version.clone())
            .filter(|v| !v.is_empty())
            .collect()
    };
    StepRequest {
        from: request.from_kubernetes_version.clone(),
        to: request.to_kubernetes_version.clone(),
        version: request.kubernetes_version.clone(),
        control_plane_upgrades: versions(&request.control_plane_upgrades),
        workers_upgrades: versions(&request.workers_upgrades),
        cluster_version: cluster.topology_version.clone(),
    }
}

/// When the import controller last applied the Fleet Cluster: the time of its `managedFields`
/// entry (the API server sets it on every apply that changed something).
fn import_applied_at(fleet: &FleetCluster) -> Option<Timestamp> {
    fleet
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|entry| entry.manager.as_deref() == Some(names::FIELD_MANAGER))
        .filter_map(|entry| entry.time.as_ref().map(|time| time.0))
        .max()
}

/// The write of the step on the Fleet Cluster `fleet` (its own field manager; the import
/// controller reads it).
fn record(fleet: &FleetCluster, step: &UpgradeStep) -> Write {
    let patch = json!({"metadata": {"annotations": {
        names::UPGRADE_STEP_ANNOTATION: step.to_annotation(),
    }}});
    Write::MergePatch {
        object: ObjectId::observed(fleet),
        patch,
        manager: names::UPGRADE_STEP_FIELD_MANAGER,
    }
}

/// The CAPI Cluster, for Events.
fn cluster_reference(cluster: &ClusterInfo) -> k8s_openapi::api::core::v1::ObjectReference {
    k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(cluster.api_version.clone()),
        kind: Some("Cluster".to_string()),
        name: Some(cluster.name.clone()),
        namespace: Some(cluster.namespace.clone()),
        uid: Some(cluster.uid.clone()).filter(|uid| !uid.is_empty()),
        ..Default::default()
    }
}
