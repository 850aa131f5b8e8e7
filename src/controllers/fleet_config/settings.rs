//! Fleet settings written into ConfigMaps someone else's Fleet reads: the feature gates into a
//! values ConfigMap (`spec.config.featureGates.configMap.ref`), and the API server URL and CA
//! into Fleet's own `fleet-controller` ConfigMap (when this provider does not install Fleet).
//! The new text of each key is decided in [`crate::model::fleet_values`]; the write is a guarded
//! read-modify-write of that key only ([`Change::ConfigMapKey`]): a concurrent writer is never
//! overwritten.

use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};

use crate::context::Context;
use crate::model::config::EffectiveConfig;
use crate::model::fleet_values::ServerValues;
use crate::model::plan::{Change, KeyText, Next, ObjectId, Plan, Write};
use crate::{Error, names};

/// Rewrites `key` of ConfigMap `namespace`/`name` with `text`.
async fn update_key(
    ctx: &Context,
    namespace: &str,
    name: &str,
    key: &'static str,
    text: KeyText,
    missing: &'static str,
) -> Result<(), Error> {
    let write = Write::Modify {
        object: ObjectId::of::<ConfigMap>(Some(namespace), name, None),
        change: Change::ConfigMapKey { key, text, missing },
        manager: names::FIELD_MANAGER,
    };
    ctx.run(Plan::of(vec![write], Next::AwaitChange))
        .await
        .map(drop)
}

/// The feature gates into the `fleet` values key of the referenced ConfigMap.
pub async fn write_feature_gates(
    ctx: &Context,
    reference: &ObjectReference,
    config: &EffectiveConfig,
) -> Result<(), Error> {
    update_key(
        ctx,
        reference.namespace.as_deref().unwrap_or_default(),
        reference.name.as_deref().unwrap_or_default(),
        names::FEATURE_GATES_VALUES_KEY,
        KeyText::FeatureGates(Box::new(config.fleet.clone())),
        "spec.config.featureGates.configMap.ref names it",
    )
    .await
}

/// `apiServerURL`/`apiServerCA` into Fleet's `fleet-controller` ConfigMap.
pub async fn sync_fleet_controller(ctx: &Context, server: &ServerValues) -> Result<(), Error> {
    update_key(
        ctx,
        names::DEFAULT_FLEET_NAMESPACE,
        names::FLEET_CONTROLLER_CONFIG_MAP,
        names::FLEET_CONTROLLER_CONFIG_KEY,
        KeyText::FleetController(server.clone()),
        "Fleet is not installed (set spec.install to install it)",
    )
    .await
}
