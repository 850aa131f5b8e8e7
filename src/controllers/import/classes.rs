//! The ClusterClass controllers: a Fleet ClusterGroup per ClusterClass, carrying the class
//! labels (stale ones removed by server-side apply). ClusterClasses carry no finalizer of ours:
//! a group whose class is gone is found from the group side and deleted, and the finalizer older
//! CAAPF versions put on classes and groups is removed.

use std::sync::Arc;

use fleet_api_rs::fleet_clustergroup::ClusterGroup;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};

use crate::api::CapiClusterClass;
use crate::apply::{
    Outcome, apply_if_changed, create_if_missing, delete_if_exists, remove_finalizer,
};
use crate::controllers::import::import_context::ImportContext;
use crate::model::capi::ClassView;
use crate::model::fleet::desired_class_group;
use crate::names;
use crate::{Error, Result};

/// Controller names in metrics and logs.
pub const CONTROLLER: &str = "clusterclass";
pub const GROUP_CONTROLLER: &str = "clustergroup";

/// Reconciles one ClusterClass.
pub async fn reconcile(class: Arc<CapiClusterClass>, ctx: Arc<ImportContext>) -> Result<Action> {
    reconcile_class(&class, &ctx).await
}

fn key<K: ResourceExt>(object: &K) -> String {
    format!(
        "{}/{}",
        object.namespace().unwrap_or_default(),
        object.name_any()
    )
}

async fn reconcile_class(class: &CapiClusterClass, ctx: &ImportContext) -> Result<Action> {
    let Some(config) = ctx.base.config() else {
        return Ok(Action::requeue(std::time::Duration::from_secs(1)));
    };
    let view = ClassView::of(class).ok_or_else(|| {
        Error::malformed("ClusterClass", class.name_any(), "no name or namespace")
    })?;
    if view.finalizers.iter().any(|f| f == names::FINALIZER) {
        let classes: Api<CapiClusterClass> =
            Api::namespaced(ctx.base.controllers.clone(), &view.namespace);
        remove_finalizer(&classes, class).await?;
        tracing::info!(class = %key(class), "removed the legacy CAAPF finalizer from ClusterClass");
    }
    let Some(groups_config) = config.cluster_class.as_ref() else {
        return Ok(Action::await_change());
    };
    if view.deleting {
        return Ok(Action::await_change());
    }
    let groups: Api<ClusterGroup> = Api::namespaced(ctx.base.controllers.clone(), &view.namespace);
    let desired = desired_class_group(&view, groups_config);
    let live = ctx.stores.group(&view.namespace, &view.name);
    let outcome = if groups_config.patch_resource {
        apply_if_changed(&groups, &desired, live.as_deref(), names::FIELD_MANAGER).await?
    } else {
        create_if_missing(&groups, &desired, live.as_deref()).await?
    }
    .outcome;
    if outcome != Outcome::Unchanged {
        let (reason, note) = if outcome == Outcome::Created {
            (
                "Created",
                format!(
                    "Created fleet object `{}` in `{}`",
                    view.name, view.namespace
                ),
            )
        } else {
            (
                "Updated",
                format!(
                    "Updated `fleet.cattle.io/v1alpha1/ClusterGroup` object `{}` in `{}`",
                    view.name, view.namespace
                ),
            )
        };
        ctx.base
            .event(
                &class.object_ref(&()),
                EventType::Normal,
                reason,
                "Creating",
                note,
            )
            .await;
    }
    Ok(Action::await_change())
}

/// Whether a ClusterGroup is the group of a ClusterClass (same name and namespace as the class
/// its labels name), as opposed to a cross-namespace group or a user's group.
pub fn is_class_group(group: &ClusterGroup) -> bool {
    let labels = group.labels();
    labels.get(names::CLUSTERCLASS_NAME_LABEL) == Some(&group.name_any())
        && labels.get(names::CLUSTERCLASS_NAMESPACE_LABEL) == group.namespace().as_ref()
}

/// Reconciles one class ClusterGroup: removes the legacy CAAPF finalizer, and deletes the group
/// when its ClusterClass no longer exists (checked with a GET, not just the cache, so a class
/// outside `--namespace`/`--watch-filter` is never taken for gone).
pub async fn reconcile_group(group: Arc<ClusterGroup>, ctx: Arc<ImportContext>) -> Result<Action> {
    reconcile_class_group(&group, &ctx).await
}

async fn reconcile_class_group(group: &ClusterGroup, ctx: &ImportContext) -> Result<Action> {
    let namespace = group.namespace().unwrap_or_default();
    let groups: Api<ClusterGroup> = Api::namespaced(ctx.base.controllers.clone(), &namespace);
    if group.finalizers().iter().any(|f| f == names::FINALIZER) {
        remove_finalizer(&groups, group).await?;
        tracing::info!(group = %key(group), "removed the legacy CAAPF finalizer from ClusterGroup");
    }
    let enabled = ctx.base.config().is_some_and(|c| c.cluster_class.is_some());
    if !enabled || !is_class_group(group) || group.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    if ctx.stores.class(&namespace, &group.name_any()).is_some() {
        return Ok(Action::await_change());
    }
    let classes: Api<CapiClusterClass> = Api::namespaced(ctx.base.controllers.clone(), &namespace);
    if classes.get_opt(&group.name_any()).await?.is_none()
        && delete_if_exists(&groups, &group.name_any()).await?
    {
        tracing::info!(group = %key(group), "deleted ClusterGroup: its ClusterClass is gone");
    }
    Ok(Action::await_change())
}
