//! The lifecycle handlers' reads; an error of ours is their answer, a retry naming what failed
//! ([`api_retry`]). Their writes are plans the one runner carries out
//! ([`crate::hooks::hook_context::HookContext::write`]).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::Value;

pub use crate::model::hook_plan::api_retry;
use crate::model::hook_plan::{HookOutcome, RETRY_API};

/// Reads `name` (`None`: absent).
pub async fn get_opt<K>(
    api: &Api<K>,
    name: &str,
    kind: &str,
    ns: &str,
) -> Result<Option<K>, HookOutcome>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name)
        .await
        .map_err(|err| api_retry(&format!("reading {kind}"), ns, name, &err.into()))
}

/// The labels of a namespace (empty when it is absent).
pub async fn namespace_labels(
    client: &kube::Client,
    namespace: &str,
) -> Result<BTreeMap<String, String>, HookOutcome> {
    let api: Api<Namespace> = Api::all(client.clone());
    let found = get_opt(&api, namespace, "Namespace", "").await?;
    Ok(found.and_then(|ns| ns.metadata.labels).unwrap_or_default())
}

/// The live BundleDeployments of a Fleet Cluster's namespace `bundle_ns`. A LIST, on purpose: an
/// upgrade gate must follow the live states of all of them (a stale "ready" lets a step
/// through), and a teardown must not let the deletion through on a cached "none left". One LIST
/// per call, scoped to the Fleet Cluster's own namespace, only with a gate on or during a
/// teardown.
pub async fn bundle_deployments(
    client: &kube::Client,
    bundle_ns: &str,
) -> Result<Vec<Value>, HookOutcome> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("fleet.cattle.io", "v1alpha1", "BundleDeployment"),
        "bundledeployments",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), bundle_ns, &resource);
    let listed = api
        .list(&ListParams::default())
        .await
        .map_err(|err| api_retry("listing BundleDeployments in", bundle_ns, "", &err.into()))?;
    listed
        .items
        .iter()
        .map(serde_json::to_value)
        .collect::<Result<_, _>>()
        .map_err(|err| {
            HookOutcome::retry(
                RETRY_API,
                format!("reading the BundleDeployments in {bundle_ns}: {err}"),
            )
        })
}
