//! The orphaned-mapping controller: BundleNamespaceMappings of ours whose namespace is
//! terminating or gone (the namespace controller, `namespaces.rs`, handles the others).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};

use crate::Result;
use crate::api::BundleNamespaceMapping;
use crate::controllers::import::import_context::ImportContext;
use crate::model::namespace::{NamespaceState, delete_mappings, is_orphaned_mapping};
use crate::model::plan::{Next, Plan};
use crate::names;

/// Controller name of the orphaned-mapping controller in metrics and logs.
pub const MAPPING_CONTROLLER: &str = "bundlenamespacemapping";

/// Deletes a BundleNamespaceMapping of ours whose namespace is terminating or gone. The namespace
/// reconcile does this for a namespace it sees terminating; this catches a namespace that went
/// while the manager was not running (a namespace that no longer exists is never reconciled).
pub async fn reconcile_mapping(
    mapping: Arc<BundleNamespaceMapping>,
    ctx: Arc<ImportContext>,
) -> Result<Action> {
    reconcile_orphan(&mapping, &ctx).await
}

async fn reconcile_orphan(mapping: &BundleNamespaceMapping, ctx: &ImportContext) -> Result<Action> {
    let name = mapping.name_any();
    let managed = mapping.labels().contains_key(names::MANAGED_LABEL);
    if !is_orphaned_mapping(managed, ctx.stores.namespace_state(&name)) {
        return Ok(Action::await_change());
    }
    // The cache may not show a namespace created a moment ago: ask the API server.
    let namespaces: Api<Namespace> = Api::all(ctx.base.controllers.clone());
    let live = namespaces.get_metadata_opt(&name).await?;
    let live_state = NamespaceState::of(
        live.as_ref()
            .map(|ns| ns.metadata.deletion_timestamp.is_some()),
    );
    let orphaned = is_orphaned_mapping(managed, live_state).then(|| mapping.namespace());
    let writes = delete_mappings(&name, &Vec::from_iter(orphaned.flatten()));
    ctx.run(Plan::of(writes, Next::AwaitChange)).await
}

/// The mappings named after a namespace (to re-check when the namespace changes or goes).
pub fn mappings_named(ctx: &ImportContext, name: &str) -> Vec<ObjectRef<BundleNamespaceMapping>> {
    ctx.stores
        .mappings
        .state()
        .iter()
        .filter(|m| m.metadata.name.as_deref() == Some(name))
        .map(|m| ObjectRef::from_obj(&**m))
        .collect()
}
