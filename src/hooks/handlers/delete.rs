//! BeforeClusterDelete: removes the bootstrap Secret and the ClusterRegistrationToken (waits
//! until they are gone) and asks for the deletion of the Fleet Cluster this hook prepared or the
//! Cluster owns, without waiting for it (Fleet's own cleanup may take a while, and the garbage
//! collector removes it with the Cluster anyway). What is deleted is decided in
//! [`crate::model::hook_plan`].

use fleet_api_rs::fleet_cluster::Cluster as FleetCluster;
use fleet_api_rs::fleet_cluster_registration_token::ClusterRegistrationToken;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;

use crate::hooks::cluster::ClusterInfo;
use crate::hooks::handlers::api::{delete_if_present, get_opt};
use crate::hooks::hook_context::HookContext;
use crate::model::fleet;
use crate::model::hook_plan::{self as plan, HookOutcome};
use crate::names;

/// BeforeClusterDelete.
pub async fn before_cluster_delete(ctx: &HookContext, cluster: &ClusterInfo) -> HookOutcome {
    match delete_steps(ctx, cluster).await {
        Ok(outcome) | Err(outcome) => outcome,
    }
}

async fn delete_steps(
    ctx: &HookContext,
    cluster: &ClusterInfo,
) -> Result<HookOutcome, HookOutcome> {
    // A Cluster moved into itself (docs/self-managed.md): its Fleet Cluster, token and bootstrap
    // Secret now serve the self-managed cluster; deleting the source copy keeps them.
    if crate::model::move_state::is_moved(&cluster.annotations) {
        return Ok(HookOutcome::ok());
    }
    let ns = cluster.namespace.as_str();
    let secrets: Api<Secret> = Api::namespaced(ctx.base.client.clone(), ns);
    let tokens: Api<ClusterRegistrationToken> = Api::namespaced(ctx.base.client.clone(), ns);
    let fleet_clusters: Api<FleetCluster> = Api::namespaced(ctx.base.client.clone(), ns);
    let secret_name = names::bootstrap_secret_name(&cluster.name);
    let token_name = fleet::registration_token_name(cluster);

    delete_if_present(&secrets, &secret_name, "Secret", ns).await?;
    delete_if_present(&tokens, &token_name, "ClusterRegistrationToken", ns).await?;
    let fleet_name = plan::fleet_cluster_of(cluster, ctx.base.config().as_deref());
    if let Some(fleet) = get_opt(&fleet_clusters, &fleet_name, "Fleet Cluster", ns).await?
        && plan::deletes_fleet_cluster(cluster, &fleet)
    {
        delete_if_present(&fleet_clusters, &fleet_name, "Fleet Cluster", ns).await?;
    }

    let mut remaining = Vec::new();
    if get_opt(&secrets, &secret_name, "Secret", ns)
        .await?
        .is_some()
    {
        remaining.push(format!("Secret {ns}/{secret_name}"));
    }
    if get_opt(&tokens, &token_name, "ClusterRegistrationToken", ns)
        .await?
        .is_some()
    {
        remaining.push(format!("ClusterRegistrationToken {ns}/{token_name}"));
    }
    Ok(plan::delete_answer(&remaining))
}
