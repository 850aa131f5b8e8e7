//! Fleet settings written into ConfigMaps someone else's Fleet reads: the feature gates into a
//! values ConfigMap (`spec.config.featureGates.configMap.ref`), and the API server URL and CA
//! into Fleet's own `fleet-controller` ConfigMap (when this provider does not install Fleet).
//! The new text of each key is decided in [`crate::model::fleet_values`]; the write is a guarded
//! read-modify-write of that key only ([`apply::merge_patch_guarded`]).

use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use kube::Client;
use kube::api::Api;

use crate::model::config::EffectiveConfig;
use crate::model::fleet_values::{self, ServerValues};
use crate::{Error, apply, names};

/// Changes one data key of a ConfigMap with `change` (which returns the new text, or `None` when
/// nothing changes), with a JSON merge patch of that key only, conditional on the
/// resourceVersion read (so a concurrent writer is never overwritten: [`apply::merge_patch_guarded`]
/// reads again instead).
async fn update_config_map_key(
    client: &Client,
    namespace: &str,
    name: &str,
    key: &str,
    missing_reason: &str,
    change: impl Fn(Option<&str>) -> Result<Option<String>, String>,
) -> Result<bool, Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let full = format!("{namespace}/{name}");
    let written = apply::merge_patch_guarded(&api, name, names::FIELD_MANAGER, |config_map| {
        let config_map =
            config_map.ok_or_else(|| Error::missing("ConfigMap", full.clone(), missing_reason))?;
        let current = config_map.data.as_ref().and_then(|d| d.get(key));
        let next = change(current.map(String::as_str)).map_err(|reason| {
            Error::malformed("ConfigMap", full.clone(), format!("data.{key} {reason}"))
        })?;
        Ok(next.map(|next| serde_json::json!({"data": {key: next}})))
    })
    .await?
    .is_some();
    if written {
        tracing::info!(config_map = %full, key, "updated");
    }
    Ok(written)
}

/// The feature gates into the `fleet` values key of the referenced ConfigMap.
pub async fn write_feature_gates(
    client: &Client,
    reference: &ObjectReference,
    config: &EffectiveConfig,
) -> Result<(), Error> {
    let namespace = reference.namespace.as_deref().unwrap_or_default();
    let name = reference.name.as_deref().unwrap_or_default();
    update_config_map_key(
        client,
        namespace,
        name,
        names::FEATURE_GATES_VALUES_KEY,
        "spec.config.featureGates.configMap.ref names it",
        |current| fleet_values::gates_in_values_yaml(current, &config.fleet),
    )
    .await
    .map(drop)
}

/// `apiServerURL`/`apiServerCA` into Fleet's `fleet-controller` ConfigMap.
pub async fn sync_fleet_controller(client: &Client, server: &ServerValues) -> Result<(), Error> {
    update_config_map_key(
        client,
        names::DEFAULT_FLEET_NAMESPACE,
        names::FLEET_CONTROLLER_CONFIG_MAP,
        names::FLEET_CONTROLLER_CONFIG_KEY,
        "Fleet is not installed (set spec.install to install it)",
        |current| match current {
            Some(text) => fleet_values::fleet_controller_config(text, server),
            None => Err("is missing".to_string()),
        },
    )
    .await
    .map(drop)
}
