//! One handler per hook family, each a function from request to response. Side effects only in
//! BeforeClusterCreate and BeforeClusterDelete.

mod api;
pub mod create;
pub mod delete;
pub mod discovery;
pub mod topology;
pub mod upgrade;

use serde_json::Value;

use crate::context::Context;
use crate::hooks::cluster::ClusterInfo;
use crate::hooks::types::{
    API_VERSION, GeneratePatchesRequest, Hook, LifecycleRequest, RequestMeta, Response,
};
use crate::model::hook_plan::HookOutcome;

/// Decodes `body` as the request of `hook` and answers it. Every problem with the request is a
/// Failure answer naming it.
pub async fn handle(ctx: &Context, hook: Hook, body: &[u8]) -> Response {
    let value: Value = match serde_json::from_slice(body) {
        Ok(value) => value,
        Err(err) => {
            return Response::failure(
                Some(hook),
                format!("the request body is not valid JSON: {err}"),
            );
        }
    };
    if !value.is_object() {
        return Response::failure(Some(hook), "the request body is not a JSON object");
    }
    let meta: RequestMeta = serde_json::from_value(value.clone()).unwrap_or_default();
    if let Some(kind) = meta.kind.as_deref().filter(|k| !k.is_empty())
        && kind != hook.request_kind()
    {
        return Response::failure(
            Some(hook),
            format!("expected kind {}, got {kind}", hook.request_kind()),
        );
    }
    if let Some(api_version) = meta.api_version.as_deref().filter(|v| !v.is_empty())
        && api_version != API_VERSION
    {
        return Response::failure(
            Some(hook),
            format!("expected apiVersion {API_VERSION}, got {api_version}"),
        );
    }
    match hook {
        Hook::Discovery => discovery::handle(),
        Hook::DiscoverVariables => topology::discover_variables(),
        Hook::GeneratePatches => match serde_json::from_value::<GeneratePatchesRequest>(value) {
            Ok(request) => topology::serve_generate_patches(ctx, &request).await,
            Err(err) => Response::failure(
                Some(hook),
                format!("malformed GeneratePatchesRequest: {err}"),
            ),
        },
        Hook::BeforeClusterCreate
        | Hook::BeforeClusterDelete
        | Hook::BeforeClusterUpgrade
        | Hook::AfterControlPlaneInitialized => {
            let request = match serde_json::from_value::<LifecycleRequest>(value) {
                Ok(request) => request,
                Err(err) => {
                    return Response::failure(
                        Some(hook),
                        format!("malformed {}: {err}", hook.request_kind()),
                    );
                }
            };
            let cluster = match ClusterInfo::decode(&request.cluster) {
                Ok(cluster) => cluster,
                Err(message) => return Response::failure(Some(hook), message),
            };
            let outcome = lifecycle_outcome(ctx, hook, &cluster, &request).await;
            log_outcome(hook, &cluster, &outcome);
            Response::lifecycle(hook, outcome)
        }
    }
}

async fn lifecycle_outcome(
    ctx: &Context,
    hook: Hook,
    cluster: &ClusterInfo,
    request: &LifecycleRequest,
) -> HookOutcome {
    match hook {
        Hook::BeforeClusterCreate => create::before_cluster_create(ctx, cluster).await,
        Hook::BeforeClusterDelete => delete::before_cluster_delete(ctx, cluster).await,
        Hook::BeforeClusterUpgrade => {
            upgrade::before_cluster_upgrade(ctx, cluster, request.to_kubernetes_version.as_deref())
                .await
        }
        // Nothing to do: the import controller watches Clusters itself.
        Hook::AfterControlPlaneInitialized => HookOutcome::ok(),
        Hook::Discovery | Hook::GeneratePatches | Hook::DiscoverVariables => {
            HookOutcome::failure(format!("{} is not a lifecycle hook", hook.name()))
        }
    }
}

fn log_outcome(hook: Hook, cluster: &ClusterInfo, outcome: &HookOutcome) {
    let (status, message) = match outcome {
        HookOutcome::Success { message } => ("Success", message),
        HookOutcome::Retry { message, .. } => ("Retry", message),
        HookOutcome::Failure { message } => ("Failure", message),
    };
    if matches!(outcome, HookOutcome::Failure { .. }) {
        tracing::warn!(hook = hook.name(), cluster = %cluster.name, namespace = %cluster.namespace, status, %message, "hook answered");
    } else {
        tracing::debug!(hook = hook.name(), cluster = %cluster.name, namespace = %cluster.namespace, status, %message, "hook answered");
    }
}
