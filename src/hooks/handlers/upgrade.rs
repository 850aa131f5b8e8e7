//! The upgrade hooks (BeforeClusterUpgrade, BeforeControlPlaneUpgrade, AfterControlPlaneUpgrade,
//! BeforeWorkersUpgrade, AfterWorkersUpgrade, AfterClusterUpgrade): each records the step on the
//! Cluster's Fleet Cluster, so Fleet sees where the cluster is, and, with a gate on, holds the
//! step until Fleet's bundles are ready for it. What to record and when to hold is decided in
//! [`crate::model::upgrade_steps`]; `spec.runtimeExtension.beforeClusterUpgrade
//! .waitForBundlesReady` keeps its own, older gate at BeforeClusterUpgrade
//! ([`crate::model::hook_plan::upgrade_answer`]).

use fleet_api_rs::fleet_cluster::Cluster as FleetCluster;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::runtime::events::EventType;
use serde_json::json;

use crate::hooks::cluster::ClusterInfo;
use crate::hooks::handlers::api::{api_retry, bundle_deployments, get_opt};
use crate::hooks::hook_context::HookContext;
use crate::hooks::types::LifecycleRequest;
use crate::model::config::EffectiveConfig;
use crate::model::hook_plan::{self as plan, HookOutcome};
use crate::model::upgrade_steps::{
    GateSettings, StepRequest, UpgradeHook, UpgradeStep, gate_before_bundles, gate_bundles,
    gate_settings, next_step, of_step,
};
use crate::{apply, names};

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
    // Create-only Fleet Clusters (CAAPF's `patchResource: false`) never show a step.
    let told = config.cluster.as_ref().is_some_and(|i| i.patch_resource);
    let mut settings = gate_settings(
        config.runtime_extension.step_wait_for_bundles_ready,
        config.runtime_extension.step_timeout,
        config.runtime_extension.step_settle,
        &cluster.annotations,
    );
    settings.wait_for_bundles &= told;
    let old_gate = hook == UpgradeHook::BeforeClusterUpgrade
        && config.runtime_extension.wait_for_bundles_ready
        && !settings.wait_for_bundles;
    if !told && !old_gate {
        return HookOutcome::success(
            "Fleet is not told of upgrade steps: FleetAddonConfig spec.cluster.patchResource is not true, so Fleet Clusters are never updated",
        );
    }
    let gated = settings.wait_for_bundles || old_gate;
    let mode = Mode {
        settings,
        told,
        old_gate,
    };
    match step(ctx, cluster, hook, request, &config, &mode).await {
        Ok(outcome) | Err(outcome) if gated => outcome,
        // Without a gate our own trouble never holds an upgrade: Fleet is told at the next call.
        Ok(outcome) => outcome,
        Err(HookOutcome::Retry { message, .. }) => {
            HookOutcome::success(format!("Fleet is not told of this step: {message}"))
        }
        Err(other) => other,
    }
}

/// How a hook acts on this Cluster.
struct Mode {
    settings: GateSettings,
    /// The Fleet Cluster is updated (`patchResource`): Fleet can be shown the step.
    told: bool,
    /// Only `beforeClusterUpgrade.waitForBundlesReady`: BeforeClusterUpgrade waits for the
    /// bundles as they are.
    old_gate: bool,
}

async fn step(
    ctx: &HookContext,
    cluster: &ClusterInfo,
    hook: UpgradeHook,
    request: &LifecycleRequest,
    config: &EffectiveConfig,
    mode: &Mode,
) -> Result<HookOutcome, HookOutcome> {
    let Mode {
        settings,
        told,
        old_gate,
    } = mode;
    let ns = cluster.namespace.as_str();
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
    let shown = of_step(&step).shown_by(&labels);
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
    if *told && previous.as_ref() != Some(&step) {
        record(ctx, ns, &fleet_name, &step).await?;
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
    if *old_gate {
        let bundle_ns = plan::bundle_namespace(cluster, Some(&fleet))?;
        let deployments = bundle_deployments(&ctx.base.client, &bundle_ns).await?;
        return Ok(plan::upgrade_answer(
            cluster,
            &fleet_name,
            &deployments,
            request.to_kubernetes_version.as_deref(),
        ));
    }
    if let Err(answer) = gate {
        return Ok(answer.outcome);
    }
    let bundle_ns = plan::bundle_namespace(cluster, Some(&fleet))?;
    let deployments = bundle_deployments(&ctx.base.client, &bundle_ns).await?;
    Ok(gate_bundles(
        &step,
        &format!("{ns}/{fleet_name}"),
        &deployments,
    ))
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

/// Writes the step on the Fleet Cluster (its own field manager; the import controller reads it).
async fn record(
    ctx: &HookContext,
    ns: &str,
    name: &str,
    step: &UpgradeStep,
) -> Result<(), HookOutcome> {
    let api: Api<FleetCluster> = Api::namespaced(ctx.base.client.clone(), ns);
    let patch = json!({"metadata": {"annotations": {
        names::UPGRADE_STEP_ANNOTATION: step.to_annotation(),
    }}});
    apply::merge_patch(&api, name, &patch, names::UPGRADE_STEP_FIELD_MANAGER)
        .await
        .map(drop)
        .map_err(|err| {
            api_retry(
                "recording the upgrade step on Fleet Cluster",
                ns,
                name,
                &err,
            )
        })
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
