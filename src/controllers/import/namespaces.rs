//! The namespace controller: for each namespace, the Fleet workspace annotation, the
//! cross-namespace ClusterGroups it holds and the BundleNamespaceMappings named after it, all
//! derived from the namespace's Clusters at once (see [`crate::model::namespace`]).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;

use crate::Result;
use crate::api::CapiCluster;
use crate::apply::expectations::{self, Key};
use crate::controllers::import::import_context::ImportContext;
use crate::model::capi::{ClassRef, ClassView, ClusterView};
use crate::model::diff::owned_fields;
use crate::model::import::Decision;
use crate::model::namespace::{
    ExistingGroup, NamespaceFacts, NamespaceState, delete_mappings, orphaned_mappings, plan,
    workspace_annotation_apply,
};
use crate::model::plan::{Next, ObjectId, Plan};
use crate::names;

/// Controller name in metrics and logs.
pub const CONTROLLER: &str = "namespace";

type NamespaceMeta = PartialObjectMeta<Namespace>;

/// Whether the namespace controller leaves out a watched change of a CAPI Cluster: the echo of
/// the health controller's `FleetReady` condition, which no contribution reads (a decision
/// reads `status.initialization` only).
pub fn skips_cluster_change(ctx: &ImportContext, cluster: &CapiCluster) -> bool {
    ctx.expectations.is_echo_of(cluster, Key::cluster_status)
}

/// Reconciles one namespace.
pub async fn reconcile(namespace: Arc<NamespaceMeta>, ctx: Arc<ImportContext>) -> Result<Action> {
    reconcile_namespace(&namespace, &ctx).await
}

async fn reconcile_namespace(namespace: &NamespaceMeta, ctx: &ImportContext) -> Result<Action> {
    let name = namespace.name_any();
    // A terminating namespace has no users, whatever the configuration: its mappings in other
    // namespaces go (its own objects go with it).
    if namespace.metadata.deletion_timestamp.is_some() {
        let orphans = orphaned_mappings(&mappings_of(ctx, &name), NamespaceState::Terminating);
        return ctx
            .run(Plan::of(
                delete_mappings(&name, &orphans),
                Next::AwaitChange,
            ))
            .await;
    }
    let Some(config) = ctx.base.config() else {
        return Ok(Action::requeue(std::time::Duration::from_secs(1)));
    };
    // Hold everything while the selection is invalid.
    if config.problems_under("spec.cluster").next().is_some() {
        return Ok(Action::await_change());
    }
    // The annotation is decided from the cached namespace: wait until it shows our last write
    // (its watch event triggers this namespace again).
    let seen = namespace.metadata.resource_version.as_deref();
    if !ctx
        .expectations
        .met(&Key::typed::<Namespace>("", &name), seen)
    {
        return Ok(Action::requeue(expectations::TTL));
    }
    let views: Vec<(ClusterView, Decision)> = ctx
        .stores
        .clusters_in(&name)
        .iter()
        .filter_map(|object| ctx.decision(object, &config))
        .collect();
    let class_labels = |class: &ClassRef| {
        ctx.stores
            .class(&class.namespace, &class.name)
            .and_then(|c| ClassView::of(&c))
            .map(|c| c.labels)
    };
    let groups = ctx
        .stores
        .groups
        .state()
        .into_iter()
        .filter(|g| g.metadata.namespace.as_deref() == Some(name.as_str()))
        .map(|g| ExistingGroup {
            name: g.name_any(),
            labels: g.labels().clone(),
            has_owner_references: !g.owner_references().is_empty(),
        })
        .collect();
    let mappings = mappings_of(ctx, &name);
    let plan = plan(&NamespaceFacts {
        namespace: &name,
        clusters: views.iter().map(|(v, d)| (v, d)).collect(),
        apply_class_group: config.cluster.as_ref().is_some_and(|i| i.apply_class_group),
        class_labels: &class_labels,
        groups,
        mappings,
    });
    tracing::debug!(namespace = %name, clusters = views.len(), annotate = plan.workspace_annotation,
        groups = plan.apply_groups.len(), mappings = plan.apply_mappings.len(), "namespace plan");
    // Objects whose cache does not show our last write yet are left for the reconcile their
    // watch event triggers.
    let cached = |object: &ObjectId| {
        let (namespace, name) = (
            object.namespace.as_deref().unwrap_or_default(),
            &object.name,
        );
        let live = match object.resource.kind.as_str() {
            "ClusterGroup" => ctx.stores.group(namespace, name).map(serialized),
            _ => ctx.stores.mapping(namespace, name).map(serialized),
        };
        let version = live
            .as_ref()
            .and_then(|l| l.pointer("/metadata/resourceVersion"));
        let key = Key::of(object, false);
        ctx.expectations
            .met(&key, version.and_then(|v| v.as_str()))
            .then_some(live)
    };
    let annotation = workspace_annotation(namespace, plan.workspace_annotation)?;
    ctx.run(plan.writes(ObjectId::observed(namespace), annotation, cached)?)
        .await
}

/// A cached object as JSON (`Null` in the unlikely case it does not serialize: then it is
/// written again).
fn serialized<K: serde::Serialize>(object: Arc<K>) -> serde_json::Value {
    serde_json::to_value(&*object).unwrap_or_default()
}

/// Namespaces holding a BundleNamespaceMapping named after `name`, with whether it is ours.
fn mappings_of(ctx: &ImportContext, name: &str) -> Vec<(String, bool)> {
    ctx.stores
        .mappings
        .state()
        .into_iter()
        .filter(|m| m.metadata.name.as_deref() == Some(name))
        .map(|m| {
            (
                m.metadata.namespace.clone().unwrap_or_default(),
                m.labels().contains_key(names::MANAGED_LABEL),
            )
        })
        .collect()
}

/// The apply that brings the workspace annotation where it should be (`wanted`): adding it (by
/// our namespace field manager), or applying without it, which only removes it when we own it,
/// never someone else's (`None`: nothing to write).
fn workspace_annotation(
    namespace: &NamespaceMeta,
    wanted: bool,
) -> Result<Option<serde_json::Value>> {
    let has_ours = namespace
        .annotations()
        .get(names::FLEET_WORKSPACE_ANNOTATION)
        .is_some_and(|v| v == "true");
    let namespace_json = serde_json::to_value(namespace)?;
    let owned = owned_fields(&namespace_json, names::NAMESPACE_FIELD_MANAGER).is_some_and(|f| {
        f.pointer("/f:metadata/f:annotations")
            .and_then(|a| a.as_object())
            .is_some_and(|a| a.contains_key(&format!("f:{}", names::FLEET_WORKSPACE_ANNOTATION)))
    });
    let name = namespace.name_any();
    Ok(workspace_annotation_apply(&name, wanted, has_ours, owned))
}
