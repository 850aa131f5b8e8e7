//! The ClusterClass controllers: a Fleet ClusterGroup per ClusterClass, carrying the class
//! labels (stale ones removed by server-side apply). ClusterClasses carry no finalizer of ours:
//! a group whose class is gone is found from the group side and deleted, and the finalizer older
//! CAAPF versions put on classes and groups is removed ([`crate::model::class_groups`]).

use std::sync::Arc;

use fleet_api_rs::fleet_clustergroup::ClusterGroup;
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};

use crate::api::CapiClusterClass;
use crate::controllers::import::import_context::ImportContext;
use crate::model::capi::ClassView;
pub use crate::model::class_groups::is_class_group;
use crate::model::class_groups::{class_plan, group_plan, needs_class};
use crate::{Error, Result};

/// Controller names in metrics and logs.
pub const CONTROLLER: &str = "clusterclass";
pub const GROUP_CONTROLLER: &str = "clustergroup";

/// Reconciles one ClusterClass.
pub async fn reconcile(class: Arc<CapiClusterClass>, ctx: Arc<ImportContext>) -> Result<Action> {
    let Some(config) = ctx.base.config() else {
        return Ok(Action::requeue(std::time::Duration::from_secs(1)));
    };
    let view = ClassView::of(&class).ok_or_else(|| {
        Error::malformed("ClusterClass", class.name_any(), "no name or namespace")
    })?;
    let live = ctx.stores.group(&view.namespace, &view.name);
    let groups = config.cluster_class.as_ref();
    ctx.run(class_plan(&class, &view, groups, live.as_deref())?)
        .await
}

/// Reconciles one class ClusterGroup: removes the legacy CAAPF finalizer, and deletes the group
/// when its ClusterClass no longer exists (checked with a GET, not just the cache, so a class
/// outside `--namespace`/`--watch-filter` is never taken for gone).
pub async fn reconcile_group(group: Arc<ClusterGroup>, ctx: Arc<ImportContext>) -> Result<Action> {
    let enabled = ctx.base.config().is_some_and(|c| c.cluster_class.is_some());
    let (namespace, name) = (group.namespace().unwrap_or_default(), group.name_any());
    let class_exists = !needs_class(&group, enabled)
        || ctx.stores.class(&namespace, &name).is_some()
        || Api::<CapiClusterClass>::namespaced(ctx.base.controllers.clone(), &namespace)
            .get_opt(&name)
            .await?
            .is_some();
    ctx.run(group_plan(&group, enabled, class_exists)).await
}
