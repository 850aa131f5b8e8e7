//! Which watched changes reconcile what, between Clusters and their namespaces: a Cluster change
//! reconciles its namespace only when what it contributes to the namespace's plan changed
//! ([`NamespaceTriggers`]); a namespace change reconciles its Clusters only when what their
//! decisions read of it changed ([`ClusterInputs`]); a ClusterClass change reconciles the Clusters
//! of the class only when its `agent-settings` annotation changed ([`ClassAgentSettings`]).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::api::{CapiCluster, CapiClusterClass};
use crate::controllers::import::import_context::ImportContext;
use crate::controllers::import::stores::{Origin, Stores};
use crate::model::capi::{ClassRef, ClusterView, StringMap};
use crate::model::namespace::{Contributions, TriggeredInList, contribution};

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

/// What a Cluster reconcile reads of its ClusterClass: the annotations [`CLASS_ANNOTATIONS`].
/// Cluster API writes a class's status on every change of the class; only a change of one of
/// them reconciles the Clusters of the class.
#[derive(Default)]
pub struct ClassAnnotations(std::sync::Mutex<std::collections::HashMap<(String, String), Values>>);

/// The values of [`CLASS_ANNOTATIONS`] on a class, in order.
type Values = Vec<Option<String>>;

/// The ClusterClass annotations a Cluster reconcile reads: agent settings
/// ([`crate::model::agent_settings`]), the manual rollout hold and the soak release
/// ([`crate::model::rollout::facts`]).
pub const CLASS_ANNOTATIONS: [&str; 3] = [
    crate::names::AGENT_SETTINGS_ANNOTATION,
    crate::names::ROLLOUT_HOLD_ANNOTATION,
    crate::names::ROLLOUT_RELEASE_ANNOTATION,
];

impl ClassAnnotations {
    /// Records the class's annotations; whether they changed. A class seen for the first time
    /// changed only when it has one (every Cluster reconciles at start anyway, and a class
    /// created after its Clusters must reach them).
    pub fn changed(&self, class: &CapiClusterClass) -> bool {
        let key = (class.namespace().unwrap_or_default(), class.name_any());
        let annotations = class.annotations();
        let now: Values = CLASS_ANNOTATIONS
            .iter()
            .map(|k| annotations.get(*k).cloned())
            .collect();
        let mut last = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let had = now.iter().any(Option::is_some);
        match last.insert(key, now.clone()) {
            None => had,
            Some(before) => before != now,
        }
    }

    /// The Clusters to reconcile after `class` changed: those using it (from its namespace and
    /// from the namespaces using it across namespaces), when its annotations [`Self::changed`].
    pub fn clusters_to_reconcile(
        &self,
        stores: &Stores,
        class: &CapiClusterClass,
    ) -> Vec<ObjectRef<CapiCluster>> {
        if !self.changed(class) {
            return Vec::new();
        }
        let class = ClassRef {
            name: class.name_any(),
            namespace: class.namespace().unwrap_or_default(),
        };
        let mut namespaces = stores.namespaces_using_class(&class);
        namespaces.push(class.namespace.clone());
        namespaces.sort();
        namespaces.dedup();
        namespaces
            .iter()
            .flat_map(|namespace| stores.clusters_in(namespace))
            .filter(|cluster| {
                ClusterView::of(cluster).is_some_and(|view| view.class.as_ref() == Some(&class))
            })
            .map(|cluster| ObjectRef::from_obj(&*cluster))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

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
    fn only_a_change_of_an_annotation_clusters_read_of_a_class_reconciles_its_clusters() {
        use crate::names::ROLLOUT_RELEASE_ANNOTATION as RELEASE;
        use crate::names::{AGENT_SETTINGS_ANNOTATION, ROLLOUT_HOLD_ANNOTATION as HOLD};
        let class = |annotations: serde_json::Value, generation: i64| -> CapiClusterClass {
            serde_json::from_value(json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "ClusterClass",
                "metadata": {"name": "quick-start", "namespace": "classes", "generation": generation,
                    "annotations": annotations},
                "status": {"observedGeneration": generation},
            }))
            .expect("class")
        };
        let settings = |text: &str| json!({AGENT_SETTINGS_ANNOTATION: text});
        let seen = ClassAnnotations::default();
        // (what happened, the class now, reconciles its Clusters)
        let steps = [
            (
                "first seen without the annotations",
                class(json!({}), 1),
                false,
            ),
            ("status written", class(json!({}), 2), false),
            (
                "an annotation nobody reads",
                class(json!({"team": "a"}), 2),
                false,
            ),
            (
                "agent settings added",
                class(settings("hostNetwork: false"), 2),
                true,
            ),
            (
                "status written again",
                class(settings("hostNetwork: false"), 3),
                false,
            ),
            (
                "agent settings changed",
                class(settings("hostNetwork: true"), 3),
                true,
            ),
            ("agent settings removed", class(json!({}), 3), true),
            (
                "a manual rollout hold",
                class(json!({HOLD: "change window"}), 3),
                true,
            ),
            ("the hold removed", class(json!({}), 3), true),
            ("a soak released", class(json!({RELEASE: "true"}), 3), true),
            ("the release removed", class(json!({}), 3), true),
        ];
        for (what, class, reconciles) in steps {
            assert_eq!(seen.changed(&class), reconciles, "{what}");
        }
        let other = ClassAnnotations::default();
        assert!(
            other.changed(&class(settings("hostNetwork: false"), 1)),
            "first seen with an annotation: its Clusters may predate it"
        );
    }
}
