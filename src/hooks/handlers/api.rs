//! The lifecycle handlers' reads and writes, and the one place where an error of ours becomes
//! their answer: a retry naming what failed ([`api_retry`]), never a Failure (an outage or a
//! missing RBAC rule of ours must not fail a Cluster's lifecycle). Writes go through
//! [`crate::apply`] with the hooks' field manager.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Namespace;
use kube::Resource;
use kube::api::{Api, ListParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::Value;

use crate::model::hook_plan::{HookOutcome, RETRY_API};
use crate::{Error, apply, names};

/// A retry naming what failed; API errors by their message (deterministic, no secrets).
pub fn api_retry(what: &str, ns: &str, name: &str, err: &Error) -> HookOutcome {
    let cause = match err {
        Error::Kube(kube::Error::Api(status)) => format!("{} ({})", status.message, status.code),
        other => other.to_string(),
    };
    HookOutcome::retry(
        RETRY_API,
        format!("{what} {}: {cause}", object_key(ns, name)),
    )
}

fn object_key(ns: &str, name: &str) -> String {
    match (ns.is_empty(), name.is_empty()) {
        (true, _) => name.to_string(),
        (false, true) => ns.to_string(),
        (false, false) => format!("{ns}/{name}"),
    }
}

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

/// [`apply::create_or_get`] as the hooks' field manager: another replica's or the import
/// controller's copy wins.
pub async fn create_or_get<K>(
    api: &Api<K>,
    object: &K,
    kind: &str,
    ns: &str,
) -> Result<K, HookOutcome>
where
    K: Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let name = object.meta().name.clone().unwrap_or_default();
    apply::create_or_get(api, object, names::RUNTIME_EXTENSION_FIELD_MANAGER)
        .await
        .map_err(|err| api_retry(&format!("creating {kind}"), ns, &name, &err))?
        .into_object()
        .ok_or_else(|| {
            HookOutcome::retry(
                RETRY_API,
                format!(
                    "{kind} {} was deleted while we created it",
                    object_key(ns, &name)
                ),
            )
        })
}

/// Merge-patches `patch` into `name` as the hooks' field manager.
pub async fn merge_patch<K>(
    api: &Api<K>,
    name: &str,
    patch: &serde_json::Value,
    what: &str,
    ns: &str,
) -> Result<(), HookOutcome>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    apply::merge_patch(api, name, patch, names::RUNTIME_EXTENSION_FIELD_MANAGER)
        .await
        .map(drop)
        .map_err(|err| api_retry(what, ns, name, &err))
}

/// Deletes `name` (background propagation); absent is fine.
pub async fn delete_if_present<K>(
    api: &Api<K>,
    name: &str,
    kind: &str,
    ns: &str,
) -> Result<(), HookOutcome>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    apply::delete_if_exists(api, name)
        .await
        .map(drop)
        .map_err(|err| api_retry(&format!("deleting {kind}"), ns, name, &err))
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
