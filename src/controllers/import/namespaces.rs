//! The namespace controller: for each namespace, the Fleet workspace annotation, the
//! cross-namespace ClusterGroups it holds and the BundleNamespaceMappings named after it, all
//! derived from the namespace's Clusters at once (see [`crate::model::namespace`]).

use std::sync::Arc;

use fleet_api_rs::fleet_clustergroup::ClusterGroup;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::api::{BundleNamespaceMapping, CapiCluster};
use crate::apply::{apply_if_changed, delete_if_exists};
use crate::controllers::import::context::ImportContext;
use crate::controllers::import::expectations::{self, Key};
use crate::controllers::import::stores::{Origin, Stores};
use crate::controllers::reconcile::retry_after;
use crate::model::capi::{ClassRef, ClassView, ClusterView, StringMap};
use crate::model::diff::owned_fields;
use crate::model::import::Decision;
use crate::model::namespace::{
    Contribution, ExistingGroup, NamespaceFacts, NamespaceState, contribution, is_orphaned_mapping,
    orphaned_mappings, plan,
};
use crate::names;
use crate::{Error, Result};

/// Controller name in metrics and logs.
pub const CONTROLLER: &str = "namespace";

type NamespaceMeta = PartialObjectMeta<Namespace>;

/// Which Cluster changes reconcile their namespace: those that change what the Cluster
/// contributes to the namespace's plan ([`contribution`]). A namespace decides all its Clusters
/// each time, so reconciling it on every Cluster change (a finalizer, a condition, a status
/// write of Cluster API) cost O(Clusters in the namespace) per change.
pub struct NamespaceTriggers {
    ctx: Arc<ImportContext>,
    last: std::sync::Mutex<Contributions>,
    in_list: std::sync::Mutex<TriggeredInList>,
}

/// The namespaces already triggered by the objects of the Clusters' latest list. After a
/// (re)start every listed Cluster is new to [`Contributions`]; triggering its namespace for each
/// reconciled every namespace about 30 times on a restart of 10,000 Clusters in 100 namespaces
/// (docs/performance.md), as each reconcile ended before the namespace's next Cluster arrived.
/// One trigger per namespace and list is enough: the listed objects are sent after the cache
/// holds the whole list, so the reconcile that trigger causes (or re-runs, if one is running)
/// starts after that and reads every Cluster of the list.
#[derive(Default)]
pub struct TriggeredInList {
    list: u64,
    namespaces: std::collections::HashSet<String>,
}

impl TriggeredInList {
    /// Whether a change found in list `list` must still trigger `namespace`: the first in each
    /// list does. Only the latest list's namespaces are kept.
    pub fn first(&mut self, list: u64, namespace: &str) -> bool {
        if self.list != list {
            self.list = list;
            self.namespaces.clear();
        }
        self.namespaces.insert(namespace.to_string())
    }
}

/// The last contribution of each cached Cluster, by (namespace, name).
#[derive(Default)]
pub struct Contributions(std::collections::HashMap<(String, String), Contribution>);

impl Contributions {
    /// Records the Cluster's contribution now (`None`: gone from the cache, or not computable);
    /// whether its namespace must be reconciled.
    pub fn changed(&mut self, key: (String, String), now: Option<Contribution>) -> bool {
        match now {
            Some(now) => self.0.insert(key, now.clone()).as_ref() != Some(&now),
            None => {
                self.0.remove(&key);
                true
            }
        }
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl NamespaceTriggers {
    pub fn new(ctx: Arc<ImportContext>) -> Self {
        Self {
            ctx,
            last: std::sync::Mutex::default(),
            in_list: std::sync::Mutex::default(),
        }
    }

    /// The namespace to reconcile after `cluster` changed (or was deleted, or came with a list),
    /// if any. When the contribution cannot be computed (no configuration yet), the namespace is
    /// reconciled. Of a list's Clusters, only the first change per namespace triggers
    /// ([`TriggeredInList`]); all are recorded.
    pub fn after_change(
        &self,
        cluster: &CapiCluster,
        origin: Origin,
    ) -> Option<ObjectRef<NamespaceMeta>> {
        let namespace = cluster.namespace()?;
        let key = (namespace.clone(), cluster.name_any());
        let cached = self
            .ctx
            .stores
            .clusters
            .get(&ObjectRef::new(&key.1).within(&namespace))
            .is_some();
        let now = cached
            .then(|| self.ctx.base.config())
            .flatten()
            .and_then(|config| self.ctx.decision(cluster, &config))
            .map(|(view, decision)| contribution(&view, &decision));
        let changed = {
            let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
            last.changed(key, now)
        };
        let trigger = changed
            && match origin {
                Origin::Watched => true,
                Origin::Listed(list) => self
                    .in_list
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .first(list, &namespace),
            };
        trigger.then(|| ObjectRef::new(&namespace))
    }
}

/// What a Cluster decision reads of its namespace: the labels (which select) and whether it
/// is terminating (nothing new is created in it). A namespace change that keeps both, such as
/// our own workspace annotation, need not reconcile every Cluster in the namespace; each
/// controller that maps namespace changes to Clusters keeps one of these.
#[derive(Default)]
pub struct ClusterInputs(std::sync::Mutex<std::collections::HashMap<String, (StringMap, bool)>>);

impl ClusterInputs {
    /// Records what the Clusters of `namespace` read of it now; whether that changed (or the
    /// namespace is new to this record, or gone from the cache `namespaces`).
    pub fn changed(&self, namespaces: &Store<NamespaceMeta>, namespace: &NamespaceMeta) -> bool {
        let name = namespace.name_any();
        let mut last = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if namespaces.get(&ObjectRef::new(&name)).is_none() {
            last.remove(&name);
            return true;
        }
        let now = (
            namespace.labels().clone(),
            namespace.metadata.deletion_timestamp.is_some(),
        );
        last.insert(name, now.clone()).as_ref() != Some(&now)
    }

    /// The Clusters to reconcile after `namespace` changed: all of those cached in it, when
    /// what they read of it [`Self::changed`]; none otherwise.
    pub fn clusters_to_reconcile(
        &self,
        stores: &Stores,
        namespace: &NamespaceMeta,
    ) -> Vec<ObjectRef<CapiCluster>> {
        if !self.changed(&stores.namespaces, namespace) {
            return Vec::new();
        }
        stores
            .clusters_in(&namespace.name_any())
            .iter()
            .map(|c| ObjectRef::from_obj(&**c))
            .collect()
    }
}

/// Whether the namespace controller leaves out a watched change of a CAPI Cluster: the echo of
/// the health controller's `FleetReady` condition, which no contribution reads (a decision
/// reads `status.initialization` only).
pub fn skips_cluster_change(ctx: &ImportContext, cluster: &CapiCluster) -> bool {
    ctx.expectations.is_echo_of(cluster, Key::cluster_status)
}

/// Reconciles one namespace.
pub async fn reconcile(namespace: Arc<NamespaceMeta>, ctx: Arc<ImportContext>) -> Result<Action> {
    ctx.observed(
        CONTROLLER,
        &*namespace,
        reconcile_namespace(&namespace, &ctx),
    )
    .await
}

/// Retries with per-object exponential backoff.
pub fn error_policy(
    namespace: Arc<NamespaceMeta>,
    error: &Error,
    ctx: Arc<ImportContext>,
) -> Action {
    retry_after(CONTROLLER, &*namespace, error, &ctx.backoff)
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
    if let Some(written) = sync_annotation(namespace, plan.workspace_annotation, ctx).await? {
        ctx.expectations.wrote(
            namespace_key,
            namespace.metadata.resource_version.as_deref(),
            Some(&written),
        );
    }

    // Objects whose cache does not show our last write yet are left for the reconcile their
    // watch event triggers.
    let mut waiting = false;
    let groups: Api<ClusterGroup> = Api::namespaced(ctx.base.controllers.clone(), &name);
    for group in &plan.apply_groups {
        let group_name = group.name_any();
        let live = ctx.stores.group(&name, &group_name);
        let key = Key::new("ClusterGroup", &name, &group_name);
        let cached = live
            .as_ref()
            .and_then(|g| g.metadata.resource_version.clone());
        if !ctx.expectations.met(&key, cached.as_deref()) {
            waiting = true;
            continue;
        }
        let written =
            apply_if_changed(&groups, group, live.as_deref(), names::FIELD_MANAGER).await?;
        ctx.expectations.wrote(
            key,
            cached.as_deref(),
            written.resource_version.as_deref().or(cached.as_deref()),
        );
        log_write(written.outcome, "ClusterGroup", &name, &group_name);
    }
    for group_name in &plan.clear_group_owner_references {
        groups
            .patch(
                group_name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"ownerReferences": null}})),
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
        let key = Key::new("BundleNamespaceMapping", &class_namespace, &name);
        let cached = live
            .as_ref()
            .and_then(|m| m.metadata.resource_version.clone());
        if !ctx.expectations.met(&key, cached.as_deref()) {
            waiting = true;
            continue;
        }
        let written =
            apply_if_changed(&mappings, mapping, live.as_deref(), names::FIELD_MANAGER).await?;
        ctx.expectations.wrote(
            key,
            cached.as_deref(),
            written.resource_version.as_deref().or(cached.as_deref()),
        );
        log_write(
            written.outcome,
            "BundleNamespaceMapping",
            &class_namespace,
            &name,
        );
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
async fn delete_mappings<S: AsRef<str>>(
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

/// The state of a namespace in the cache.
pub fn state(ctx: &ImportContext, name: &str) -> NamespaceState {
    NamespaceState::of(
        ctx.stores
            .namespaces
            .get(&ObjectRef::new(name))
            .map(|ns| ns.metadata.deletion_timestamp.is_some()),
    )
}

/// Controller name of the orphaned-mapping controller in metrics and logs.
pub const MAPPING_CONTROLLER: &str = "bundlenamespacemapping";

/// Deletes a BundleNamespaceMapping of ours whose namespace is terminating or gone. The namespace
/// reconcile does this for a namespace it sees terminating; this catches a namespace that went
/// while the manager was not running (a namespace that no longer exists is never reconciled).
pub async fn reconcile_mapping(
    mapping: Arc<BundleNamespaceMapping>,
    ctx: Arc<ImportContext>,
) -> Result<Action> {
    ctx.observed(
        MAPPING_CONTROLLER,
        &*mapping,
        reconcile_orphan(&mapping, &ctx),
    )
    .await
}

/// Retries with per-object exponential backoff.
pub fn mapping_error_policy(
    mapping: Arc<BundleNamespaceMapping>,
    error: &Error,
    ctx: Arc<ImportContext>,
) -> Action {
    retry_after(MAPPING_CONTROLLER, &*mapping, error, &ctx.backoff)
}

async fn reconcile_orphan(mapping: &BundleNamespaceMapping, ctx: &ImportContext) -> Result<Action> {
    let name = mapping.name_any();
    let managed = mapping.labels().contains_key(names::MANAGED_LABEL);
    if !is_orphaned_mapping(managed, state(ctx, &name)) {
        return Ok(Action::await_change());
    }
    // The cache may not show a namespace created a moment ago: ask the API server.
    let namespaces: Api<Namespace> = Api::all(ctx.base.controllers.clone());
    let live = namespaces.get_metadata_opt(&name).await?;
    let live_state = NamespaceState::of(
        live.as_ref()
            .map(|ns| ns.metadata.deletion_timestamp.is_some()),
    );
    if is_orphaned_mapping(managed, live_state) {
        delete_mappings(&name, &[mapping.namespace().unwrap_or_default()], true, ctx).await?;
    }
    Ok(Action::await_change())
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

fn log_write(outcome: crate::apply::Outcome, kind: &str, namespace: &str, name: &str) {
    if outcome != crate::apply::Outcome::Unchanged {
        tracing::info!(%namespace, %name, ?outcome, "{kind} written");
    }
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
    let body = if wanted && !(has_ours && owned) {
        json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "annotations": {names::FLEET_WORKSPACE_ANNOTATION: "true"}}
        })
    } else if !wanted && owned {
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    } else {
        return Ok(None);
    };
    let namespaces: Api<Namespace> = Api::all(ctx.base.controllers.clone());
    let applied = namespaces
        .patch(
            &name,
            &PatchParams::apply(names::NAMESPACE_FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await?;
    tracing::info!(namespace = %name, annotated = wanted, "Fleet workspace annotation updated");
    Ok(applied.metadata.resource_version)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::capi::ClassRef;

    fn key(name: &str) -> (String, String) {
        ("ns".to_string(), name.to_string())
    }

    #[test]
    fn only_what_a_cluster_decision_reads_of_its_namespace_reconciles_its_clusters() {
        use kube::runtime::reflector::store::Writer;
        use kube::runtime::watcher::Event;
        let namespace =
            |labels: serde_json::Value, annotations: serde_json::Value, deleting: bool| {
                let mut meta: NamespaceMeta = serde_json::from_value(json!({
                    "apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": "apps", "labels": labels, "annotations": annotations},
                }))
                .expect("namespace");
                if deleting {
                    meta.metadata.deletion_timestamp =
                        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                        ));
                }
                meta
            };
        let mut writer = Writer::<NamespaceMeta>::default();
        let store = writer.as_reader();
        let inputs = ClusterInputs::default();
        // (change, the namespace after it, whether its Clusters are reconciled)
        let steps = [
            (
                "first seen",
                namespace(json!({"team": "a"}), json!({}), false),
                true,
            ),
            (
                "nothing changed (a relist)",
                namespace(json!({"team": "a"}), json!({}), false),
                false,
            ),
            (
                "our workspace annotation",
                namespace(json!({"team": "a"}), json!({"fleet": "x"}), false),
                false,
            ),
            (
                "a label",
                namespace(json!({"team": "b"}), json!({"fleet": "x"}), false),
                true,
            ),
            (
                "terminating",
                namespace(json!({"team": "b"}), json!({"fleet": "x"}), true),
                true,
            ),
        ];
        for (change, now, reconciled) in steps {
            writer.apply_watcher_event(&Event::Apply(now.clone()));
            assert_eq!(inputs.changed(&store, &now), reconciled, "{change}");
        }
        let gone = namespace(json!({"team": "b"}), json!({}), true);
        writer.apply_watcher_event(&Event::Delete(gone.clone()));
        assert!(inputs.changed(&store, &gone), "gone");
        assert!(
            inputs.0.lock().expect("lock").is_empty(),
            "forgotten when gone"
        );
    }

    #[test]
    fn only_a_changed_or_gone_contribution_reconciles_the_namespace() {
        let imported = Contribution {
            workspace: true,
            foreign_class: None,
        };
        let with_class = Contribution {
            workspace: true,
            foreign_class: Some(ClassRef {
                name: "qs".into(),
                namespace: "classes".into(),
            }),
        };
        let mut last = Contributions::default();
        let steps = [
            ("c1", Some(&imported), true, "first seen"),
            (
                "c1",
                Some(&imported),
                false,
                "same contribution: a status write",
            ),
            ("c2", Some(&imported), true, "another Cluster"),
            ("c1", Some(&with_class), true, "a foreign class now"),
            ("c1", Some(&with_class), false, "unchanged again"),
            ("c1", None, true, "gone"),
            ("c1", None, true, "still unknown"),
            ("c1", Some(&with_class), true, "back"),
        ];
        for (name, now, reconcile, what) in steps {
            assert_eq!(last.changed(key(name), now.cloned()), reconcile, "{what}");
        }
        last.changed(key("c2"), None);
        assert_eq!(last.len(), 1, "a gone Cluster leaves no entry");
    }

    #[test]
    fn a_list_triggers_each_namespace_once() {
        let mut triggered = TriggeredInList::default();
        let steps = [
            (1, "a", true, "first of namespace a in list 1"),
            (1, "a", false, "a again in list 1"),
            (1, "b", true, "first of b"),
            (1, "a", false, "a still triggered"),
            (2, "a", true, "a relist triggers again"),
            (2, "b", true, "so does b"),
            (2, "b", false, "once"),
            (1, "a", true, "a list number that changes starts afresh"),
        ];
        for (list, namespace, trigger, what) in steps {
            assert_eq!(triggered.first(list, namespace), trigger, "{what}");
        }
        assert_eq!(
            triggered.namespaces.len(),
            1,
            "only the latest list is kept"
        );
    }
}
