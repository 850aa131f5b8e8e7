//! BeforeClusterUpgrade: with `spec.runtimeExtension.beforeClusterUpgrade.waitForBundlesReady`,
//! holds the upgrade until every BundleDeployment of the Cluster's Fleet Cluster is ready. Reads
//! the Fleet Cluster and its BundleDeployments; when to hold is decided in
//! [`crate::model::hook_plan`].

use fleet_api_rs::fleet_cluster::Cluster as FleetCluster;
use kube::api::{Api, ListParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::Value;

use crate::hooks::cluster::ClusterInfo;
use crate::hooks::handlers::api::{api_retry, get_opt};
use crate::hooks::hook_context::HookContext;
use crate::model::hook_plan::{self as plan, HookOutcome, RETRY_API};

/// BeforeClusterUpgrade.
pub async fn before_cluster_upgrade(
    ctx: &HookContext,
    cluster: &ClusterInfo,
    to_version: Option<&str>,
) -> HookOutcome {
    match upgrade_steps(ctx, cluster, to_version).await {
        Ok(outcome) | Err(outcome) => outcome,
    }
}

async fn upgrade_steps(
    ctx: &HookContext,
    cluster: &ClusterInfo,
    to_version: Option<&str>,
) -> Result<HookOutcome, HookOutcome> {
    let config = ctx.base.config();
    if let Some(answer) = plan::upgrade_gate(config.as_deref()) {
        return Ok(answer);
    }
    let ns = cluster.namespace.as_str();
    // One GET of the Fleet Cluster the import controller keeps for this Cluster (the name the
    // configuration gives, as BeforeClusterDelete finds it), not a LIST of the namespace per
    // request. Not a cache: a Fleet Cluster seen before it registered would hold the upgrade
    // a watch latency longer, and the bundle states below must be live anyway.
    let fleet_clusters: Api<FleetCluster> = Api::namespaced(ctx.base.client.clone(), ns);
    let fleet_name = plan::fleet_cluster_of(cluster, config.as_deref());
    let fleet = get_opt(&fleet_clusters, &fleet_name, "Fleet Cluster", ns).await?;
    let bundle_ns = plan::bundle_namespace(cluster, fleet.as_ref())?;
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("fleet.cattle.io", "v1alpha1", "BundleDeployment"),
        "bundledeployments",
    );
    // A LIST, on purpose: the hold must follow the live states of all the Cluster's
    // BundleDeployments (a stale "ready" lets an upgrade through), it is scoped to the Fleet
    // Cluster's own namespace, and only with `waitForBundlesReady`, which is off by default.
    let deployments: Api<DynamicObject> =
        Api::namespaced_with(ctx.base.client.clone(), &bundle_ns, &resource);
    let listed = deployments
        .list(&ListParams::default())
        .await
        .map_err(|err| api_retry("listing BundleDeployments in", &bundle_ns, "", &err.into()))?;
    let objects: Vec<Value> = listed
        .items
        .iter()
        .map(serde_json::to_value)
        .collect::<Result<_, _>>()
        .map_err(|err| {
            HookOutcome::retry(
                RETRY_API,
                format!("reading the BundleDeployments in {bundle_ns}: {err}"),
            )
        })?;
    Ok(plan::upgrade_answer(
        cluster,
        &fleet_name,
        &objects,
        to_version,
    ))
}
