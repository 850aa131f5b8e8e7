//! The namespace controller: for each namespace, the Fleet workspace annotation, the
//! cross-namespace ClusterGroups it holds and the BundleNamespaceMappings named after it, all
//! derived from the namespace's Clusters at once (see [`crate::model::namespace`]).

use std::fmt::Debug;
use std::sync::Arc;

use fleet_api_rs::fleet_clustergroup::ClusterGroup;
use k8s_openapi::api::core::v1::Namespace;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::Result;
use crate::api::{BundleNamespaceMapping, CapiCluster};
use crate::apply::expectations::{self, Key};
use crate::apply::{apply_if_changed, apply_json, delete_if_exists, merge_patch};
use crate::controllers::import::import_context::ImportContext;
use crate::model::capi::{ClassRef, ClassView, ClusterView};
use crate::model::diff::owned_fields;
use crate::model::import::Decision;
use crate::model::namespace::{
    ExistingGroup, NamespaceFacts, NamespaceState, orphaned_mappings, plan,
    workspace_annotation_apply,
};
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
        delete_mappings(&name, &orphans, true, ctx).await?;
        return Ok(Action::await_change());
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
    let namespace_key = Key::new("Namespace", "", &name);
    if !ctx.expectations.met(
        &namespace_key,
        namespace.metadata.resource_version.as_deref(),
    ) {
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
    ctx.expectations
        .on(
            &namespace_key,
            namespace.metadata.resource_version.as_deref(),
        )
        .record(sync_annotation(namespace, plan.workspace_annotation, ctx))
        .await?;

    // Objects whose cache does not show our last write yet are left for the reconcile their
    // watch event triggers.
    let mut waiting = false;
    let groups: Api<ClusterGroup> = Api::namespaced(ctx.base.controllers.clone(), &name);
    for group in &plan.apply_groups {
        let live = ctx.stores.group(&name, &group.name_any());
        waiting |= !apply_when_seen(ctx, &groups, "ClusterGroup", group, live.as_deref()).await?;
    }
    for group_name in &plan.clear_group_owner_references {
        merge_patch(
            &groups,
            group_name,
            &json!({"metadata": {"ownerReferences": null}}),
            names::FIELD_MANAGER,
        )
        .await?;
        tracing::info!(namespace = %name, group = %group_name, "removed CAAPF owner references from adopted ClusterGroup");
    }
    for group_name in &plan.delete_groups {
        if delete_if_exists(&groups, group_name).await? {
            tracing::info!(namespace = %name, group = %group_name, "deleted ClusterGroup: no Cluster uses it");
        }
    }
    for mapping in &plan.apply_mappings {
        let class_namespace = mapping.metadata.namespace.clone().unwrap_or_default();
        let mappings: Api<BundleNamespaceMapping> =
            Api::namespaced(ctx.base.controllers.clone(), &class_namespace);
        let live = ctx.stores.mapping(&class_namespace, &name);
        waiting |= !apply_when_seen(
            ctx,
            &mappings,
            "BundleNamespaceMapping",
            mapping,
            live.as_deref(),
        )
        .await?;
    }
    delete_mappings(&name, &plan.delete_mappings, false, ctx).await?;
    Ok(if waiting {
        Action::requeue(expectations::TTL)
    } else {
        Action::await_change()
    })
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

/// Deletes the BundleNamespaceMappings named `name` in `class_namespaces`; `orphans` says why
/// (for the log line).
pub async fn delete_mappings<S: AsRef<str>>(
    name: &str,
    class_namespaces: &[S],
    orphans: bool,
    ctx: &ImportContext,
) -> Result<()> {
    for class_namespace in class_namespaces {
        let class_namespace = class_namespace.as_ref();
        let mappings: Api<BundleNamespaceMapping> =
            Api::namespaced(ctx.base.controllers.clone(), class_namespace);
        if delete_if_exists(&mappings, name).await? {
            let why = if orphans {
                "its namespace is terminating or gone"
            } else {
                "no Cluster uses it"
            };
            tracing::info!(namespace = %class_namespace, mapping = %name, "deleted BundleNamespaceMapping: {why}");
        }
    }
    Ok(())
}

/// Applies `desired` (a `kind`) unless the cache, holding `live`, does not show our last write
/// to it yet. `false`: not applied, left for the reconcile its watch event triggers.
async fn apply_when_seen<K>(
    ctx: &ImportContext,
    api: &Api<K>,
    kind: &'static str,
    desired: &K,
    live: Option<&K>,
) -> Result<bool>
where
    K: Resource + Serialize + DeserializeOwned + Clone + Debug,
{
    let namespace = desired.meta().namespace.clone().unwrap_or_default();
    let name = desired.name_any();
    let key = Key::new(kind, &namespace, &name);
    let cached = live.and_then(|object| object.meta().resource_version.as_deref());
    if !ctx.expectations.met(&key, cached) {
        return Ok(false);
    }
    let written = ctx
        .expectations
        .on(&key, cached)
        .record(apply_if_changed(api, desired, live, names::FIELD_MANAGER))
        .await?;
    if written.outcome != crate::apply::Outcome::Unchanged {
        tracing::info!(%namespace, %name, outcome = ?written.outcome, "{kind} written");
    }
    Ok(true)
}

/// Adds the annotation (server-side apply by our namespace field manager), or removes it by
/// applying without it — which only removes it when we own it, never someone else's. Returns
/// the resourceVersion the apply left, `None` when nothing needed writing.
async fn sync_annotation(
    namespace: &NamespaceMeta,
    wanted: bool,
    ctx: &ImportContext,
) -> Result<Option<String>> {
    let name = namespace.name_any();
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
    let Some(body) = workspace_annotation_apply(&name, wanted, has_ours, owned) else {
        return Ok(None);
    };
    let namespaces: Api<Namespace> = Api::all(ctx.base.controllers.clone());
    let applied = apply_json(&namespaces, &name, &body, names::NAMESPACE_FIELD_MANAGER).await?;
    tracing::info!(namespace = %name, annotated = wanted, "Fleet workspace annotation updated");
    Ok(applied.metadata.resource_version)
}
