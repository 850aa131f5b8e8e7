//! Objects that belong to a namespace of Clusters rather than to one Cluster: the Fleet
//! workspace annotation, the cross-namespace ClusterGroups and the BundleNamespaceMappings.
//! They are derived from all Clusters of the namespace at once, so they exist exactly while at
//! least one Cluster needs them, whatever the naming or patch settings (CAAPF derived them per
//! Cluster and deleted them too early or never: research §13 items 7-12).
//!
//! A namespace that is terminating or gone has no users, whatever Clusters it still holds: its
//! BundleNamespaceMappings (which live in other namespaces and so do not go with it) are
//! deleted, so that a namespace created later with the same name is never mapped to a class
//! namespace's bundles. Its own groups and annotation go with it.

use std::collections::{BTreeMap, BTreeSet};

use fleet_api_rs::fleet_clustergroup::ClusterGroup;
use serde_json::{Value, json};

use crate::api::BundleNamespaceMapping;
use crate::model::capi::{ClassRef, ClusterView, StringMap};
use crate::model::fleet::{
    cross_namespace_group_name, desired_bundle_namespace_mapping, desired_cross_namespace_group,
};
use crate::model::import::Decision;
use crate::model::plan::{Next, ObjectId, Plan, Write};
use crate::names;

/// A ClusterGroup that exists in the namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExistingGroup {
    pub name: String,
    pub labels: StringMap,
    pub has_owner_references: bool,
}

/// What the namespace controller should do.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NamespacePlan {
    /// Whether the namespace should carry the Fleet workspace annotation.
    pub workspace_annotation: bool,
    pub apply_groups: Vec<ClusterGroup>,
    pub delete_groups: Vec<String>,
    /// Adopted groups (created by CAAPF with per-Cluster owner references) whose owner
    /// references must go, or garbage collection would delete them while still in use.
    pub clear_group_owner_references: Vec<String>,
    pub apply_mappings: Vec<BundleNamespaceMapping>,
    /// Namespaces whose BundleNamespaceMapping named after this namespace must go.
    pub delete_mappings: Vec<String>,
}

/// What the caches (or the API server) know about a namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NamespaceState {
    Active,
    /// Has a `deletionTimestamp` (phase `Terminating`).
    Terminating,
    /// Does not exist.
    Gone,
}

impl NamespaceState {
    /// The state of a namespace from its metadata, `None` when it does not exist.
    pub fn of(deletion_timestamp_set: Option<bool>) -> Self {
        match deletion_timestamp_set {
            None => NamespaceState::Gone,
            Some(true) => NamespaceState::Terminating,
            Some(false) => NamespaceState::Active,
        }
    }
}

/// Whether a BundleNamespaceMapping named after a namespace is an orphan to delete: it carries
/// our managed label and the namespace it maps is terminating or gone. (A mapping without the
/// label is someone else's, or one CAAPF left; neither is touched.)
pub fn is_orphaned_mapping(managed: bool, mapped_namespace: NamespaceState) -> bool {
    managed && mapped_namespace != NamespaceState::Active
}

/// Of the BundleNamespaceMappings named after a namespace in `state` (their namespaces, with
/// whether each carries our managed label), the namespaces of those to delete as orphans.
pub fn orphaned_mappings(mappings: &[(String, bool)], state: NamespaceState) -> Vec<String> {
    mappings
        .iter()
        .filter(|(_, managed)| is_orphaned_mapping(*managed, state))
        .map(|(namespace, _)| namespace.clone())
        .collect()
}

/// Everything the plan depends on.
pub struct NamespaceFacts<'a> {
    pub namespace: &'a str,
    /// The Clusters of the namespace with their decisions.
    pub clusters: Vec<(&'a ClusterView, &'a Decision)>,
    /// `spec.cluster.applyClassGroup` (false when import is disabled).
    pub apply_class_group: bool,
    /// Labels of a ClusterClass, when it is known.
    pub class_labels: &'a dyn Fn(&ClassRef) -> Option<StringMap>,
    /// ClusterGroups in the namespace.
    pub groups: Vec<ExistingGroup>,
    /// Namespaces holding a BundleNamespaceMapping named after this namespace, with whether it
    /// carries our managed label.
    pub mappings: Vec<(String, bool)>,
}

/// What one Cluster contributes to its namespace's plan: all [`plan`] reads of it. The
/// namespace controller reconciles a namespace when a Cluster's contribution changes, not on
/// every change of a Cluster (a namespace decides all its Clusters each time).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Contribution {
    /// The namespace needs the Fleet workspace annotation for this Cluster.
    pub workspace: bool,
    /// The ClusterClass from another namespace this selected Cluster uses.
    pub foreign_class: Option<ClassRef>,
}

pub fn contribution(cluster: &ClusterView, decision: &Decision) -> Contribution {
    // A Cluster whose workloads are being removed keeps what it used until it goes.
    let tearing_down = matches!(decision, Decision::Teardown { .. });
    Contribution {
        workspace: decision.is_imported()
            || tearing_down
            || matches!(
                decision,
                Decision::Paused { selected: true } | Decision::Moved
            ),
        foreign_class: (decision.is_selected() || tearing_down)
            .then(|| cluster.cross_namespace_class().cloned())
            .flatten(),
    }
}

/// Computes the plan for one namespace.
pub fn plan(facts: &NamespaceFacts<'_>) -> NamespacePlan {
    let contributions: Vec<Contribution> = facts
        .clusters
        .iter()
        .map(|(cluster, decision)| contribution(cluster, decision))
        .collect();
    let workspace_annotation = contributions.iter().any(|c| c.workspace);

    // Classes from other namespaces used by selected Clusters of this namespace.
    let classes: BTreeSet<(String, String)> = if facts.apply_class_group {
        contributions
            .iter()
            .filter_map(|c| c.foreign_class.as_ref())
            .map(|class| (class.name.clone(), class.namespace.clone()))
            .collect()
    } else {
        BTreeSet::new()
    };
    let wanted_groups: BTreeMap<String, ClassRef> = classes
        .iter()
        .map(|(name, namespace)| {
            let class = ClassRef {
                name: name.clone(),
                namespace: namespace.clone(),
            };
            (cross_namespace_group_name(&class), class)
        })
        .collect();

    let mut plan = NamespacePlan {
        workspace_annotation,
        ..Default::default()
    };
    for (name, class) in &wanted_groups {
        plan.apply_groups.push(desired_cross_namespace_group(
            facts.namespace,
            class,
            (facts.class_labels)(class).as_ref(),
        ));
        if facts
            .groups
            .iter()
            .any(|g| &g.name == name && g.has_owner_references)
        {
            plan.clear_group_owner_references.push(name.clone());
        }
    }
    for group in &facts.groups {
        if is_cross_namespace_group(group, facts.namespace)
            && !wanted_groups.contains_key(&group.name)
        {
            plan.delete_groups.push(group.name.clone());
        }
    }

    let wanted_mapping_namespaces: BTreeSet<&String> = classes.iter().map(|(_, ns)| ns).collect();
    for namespace in &wanted_mapping_namespaces {
        plan.apply_mappings
            .push(desired_bundle_namespace_mapping(facts.namespace, namespace));
    }
    for (namespace, managed) in &facts.mappings {
        if *managed && !wanted_mapping_namespaces.contains(namespace) {
            plan.delete_mappings.push(namespace.clone());
        }
    }
    plan
}

/// An object as the namespace controller's cache holds it, as JSON: `None` while the cache does
/// not show our last write of it yet, otherwise what it holds (`None`: absent).
pub type Cached = Option<Option<Value>>;

impl NamespacePlan {
    /// The writes, in order: the workspace annotation (`annotation`, the namespace's apply:
    /// [`workspace_annotation_apply`]), the groups, the owner references cleared from adopted
    /// groups, the groups no Cluster uses, the mappings, the mappings no Cluster uses. A group or
    /// mapping whose cache (`cached`) does not show our last write of it yet is left for the
    /// reconcile its watch event triggers.
    pub fn writes(
        &self,
        namespace: ObjectId,
        annotation: Option<Value>,
        cached: impl Fn(&ObjectId) -> Cached,
    ) -> crate::Result<Plan> {
        let mut plan = Plan::default();
        plan.writes.extend(annotation.map(|body| Write::Apply {
            object: namespace.clone(),
            body,
            manager: names::NAMESPACE_FIELD_MANAGER,
        }));
        let group = |name: &str| ObjectId::of::<ClusterGroup>(Some(&namespace.name), name, None);
        let apply = |plan: &mut Plan, mut object: ObjectId, desired: Value| -> crate::Result<()> {
            let Some(live) = cached(&object) else {
                plan.then = Next::Echo;
                return Ok(());
            };
            let version = live
                .as_ref()
                .and_then(|l| l.pointer("/metadata/resourceVersion"));
            object.seen = version.and_then(Value::as_str).map(str::to_string);
            let manager = names::FIELD_MANAGER;
            let write = Write::apply_if_changed(object, &desired, live.as_ref(), manager, None)?;
            plan.writes.extend(write);
            Ok(())
        };
        for desired in &self.apply_groups {
            let name = desired.metadata.name.as_deref().unwrap_or_default();
            apply(&mut plan, group(name), serde_json::to_value(desired)?)?;
        }
        plan.writes
            .extend(
                self.clear_group_owner_references
                    .iter()
                    .map(|name| Write::MergePatch {
                        object: group(name),
                        patch: json!({"metadata": {"ownerReferences": null}}),
                        manager: names::FIELD_MANAGER,
                    }),
            );
        plan.writes
            .extend(self.delete_groups.iter().map(|name| Write::Delete {
                object: group(name),
                live_check: false,
            }));
        for desired in &self.apply_mappings {
            let class_namespace = desired.metadata.namespace.as_deref();
            let object =
                ObjectId::of::<BundleNamespaceMapping>(class_namespace, &namespace.name, None);
            apply(&mut plan, object, serde_json::to_value(desired)?)?;
        }
        plan.writes
            .extend(delete_mappings(&namespace.name, &self.delete_mappings));
        Ok(plan)
    }
}

/// Deletes the BundleNamespaceMappings named `name` (after a namespace) in `class_namespaces`.
pub fn delete_mappings<S: AsRef<str>>(name: &str, class_namespaces: &[S]) -> Vec<Write> {
    let object = |ns: &S| ObjectId::of::<BundleNamespaceMapping>(Some(ns.as_ref()), name, None);
    let delete = |ns| Write::Delete {
        object: object(ns),
        live_check: false,
    };
    class_namespaces.iter().map(delete).collect()
}

/// A cross-namespace class group, as we (or CAAPF) name and label it: `<class>.<class ns>`,
/// carrying both class labels, the class namespace differing from the group's.
pub fn is_cross_namespace_group(group: &ExistingGroup, namespace: &str) -> bool {
    let (Some(name), Some(class_namespace)) = (
        group.labels.get(names::CLUSTERCLASS_NAME_LABEL),
        group.labels.get(names::CLUSTERCLASS_NAMESPACE_LABEL),
    ) else {
        return false;
    };
    class_namespace != namespace && group.name == format!("{name}.{class_namespace}")
}

/// The server-side apply that brings the Fleet workspace annotation where it should be (`wanted`),
/// given whether the namespace carries it (`has_ours`) and whether our field manager owns it
/// (`owned`): adding it, or applying without it, which removes it only when we own it, never
/// someone else's. `None`: nothing to write.
pub fn workspace_annotation_apply(
    name: &str,
    wanted: bool,
    has_ours: bool,
    owned: bool,
) -> Option<Value> {
    if wanted && !(has_ours && owned) {
        Some(json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "annotations": {names::FLEET_WORKSPACE_ANNOTATION: "true"}}
        }))
    } else if !wanted && owned {
        Some(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}))
    } else {
        None
    }
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
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    impl Contributions {
        pub fn len(&self) -> usize {
            self.0.len()
        }

        pub fn is_empty(&self) -> bool {
            self.0.is_empty()
        }
    }

    fn key(name: &str) -> (String, String) {
        ("ns".to_string(), name.to_string())
    }

    #[test]
    fn the_workspace_annotation_is_added_or_removed_only_where_it_must() {
        // (wanted, has ours, owned, what is applied)
        let rows = [
            (true, false, false, Some(true)),
            (true, true, false, Some(true)),
            (true, true, true, None),
            (false, true, true, Some(false)),
            (false, true, false, None),
            (false, false, false, None),
        ];
        for (wanted, has_ours, owned, applied) in rows {
            let got = workspace_annotation_apply("apps", wanted, has_ours, owned).map(|body| {
                body["metadata"]["annotations"][names::FLEET_WORKSPACE_ANNOTATION] == "true"
            });
            assert_eq!(
                got, applied,
                "wanted {wanted}, has ours {has_ours}, owned {owned}"
            );
        }
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

    fn view(name: &str, class: Option<(&str, &str)>) -> ClusterView {
        let mut object = json!({"metadata": {"name": name, "namespace": "default"}, "spec": {}});
        if let Some((class, ns)) = class {
            object["spec"]["topology"] =
                json!({"classRef": {"name": class, "namespace": ns}, "version": "v1"});
        }
        ClusterView::from_json(&object).expect("view")
    }

    fn group(name: &str, class: &str, class_ns: &str, owners: bool) -> ExistingGroup {
        ExistingGroup {
            name: name.to_string(),
            labels: StringMap::from([
                (
                    names::CLUSTERCLASS_NAME_LABEL.to_string(),
                    class.to_string(),
                ),
                (
                    names::CLUSTERCLASS_NAMESPACE_LABEL.to_string(),
                    class_ns.to_string(),
                ),
            ]),
            has_owner_references: owners,
        }
    }

    const IMPORT: Decision = Decision::Import {
        agent_initiated: false,
    };

    fn labels_of(class: &ClassRef) -> Option<StringMap> {
        (class.name == "qs").then(|| StringMap::from([("team".to_string(), "a".to_string())]))
    }

    fn facts<'a>(
        clusters: Vec<(&'a ClusterView, &'a Decision)>,
        groups: Vec<ExistingGroup>,
        mappings: Vec<(String, bool)>,
    ) -> NamespaceFacts<'a> {
        NamespaceFacts {
            namespace: "default",
            clusters,
            apply_class_group: true,
            class_labels: &labels_of,
            groups,
            mappings,
        }
    }

    fn names_of(groups: &[ClusterGroup]) -> Vec<String> {
        groups
            .iter()
            .filter_map(|g| g.metadata.name.clone())
            .collect()
    }

    #[test]
    fn a_cluster_contributes_the_workspace_and_its_foreign_class() {
        let foreign = view("a", Some(("qs", "classes")));
        let local = view("b", Some(("qs", "default")));
        let bare = view("c", None);
        let qs = ClassRef {
            name: "qs".into(),
            namespace: "classes".into(),
        };
        let teardown = Decision::Teardown {
            deadline: "2026-01-01T00:30:00Z".parse().expect("time"),
        };
        let rows: [(&ClusterView, Decision, bool, Option<&ClassRef>); 12] = [
            (&foreign, IMPORT, true, Some(&qs)),
            // Keeps its workspace, group and mapping while its workloads are removed.
            (&foreign, teardown.clone(), true, Some(&qs)),
            (&local, teardown, true, None),
            (&foreign, Decision::Wait, false, Some(&qs)),
            (
                &foreign,
                Decision::Paused { selected: true },
                true,
                Some(&qs),
            ),
            (&foreign, Decision::Paused { selected: false }, false, None),
            (&foreign, Decision::Moved, true, Some(&qs)),
            (&foreign, Decision::Cleanup, false, None),
            (&foreign, Decision::Ignore, false, None),
            (&foreign, Decision::Hold, false, None),
            (&local, IMPORT, true, None),
            (&bare, IMPORT, true, None),
        ];
        for (cluster, decision, workspace, foreign_class) in rows {
            assert_eq!(
                contribution(cluster, &decision),
                Contribution {
                    workspace,
                    foreign_class: foreign_class.cloned(),
                },
                "{} {decision:?}",
                cluster.name
            );
        }
    }

    #[test]
    fn one_group_and_mapping_per_foreign_class_shared_by_clusters() {
        let a = view("a", Some(("qs", "classes")));
        let b = view("b", Some(("qs", "classes")));
        let c = view("c", Some(("other", "classes")));
        let local = view("d", Some(("qs", "default")));
        let plan = plan(&facts(
            vec![
                (&a, &IMPORT),
                (&b, &Decision::Wait),
                (&c, &IMPORT),
                (&local, &IMPORT),
            ],
            vec![],
            vec![],
        ));
        assert!(plan.workspace_annotation);
        assert_eq!(
            names_of(&plan.apply_groups),
            ["other.classes", "qs.classes"]
        );
        let labels = plan.apply_groups[1]
            .metadata
            .labels
            .clone()
            .unwrap_or_default();
        assert_eq!(labels.get("team").map(String::as_str), Some("a"));
        assert_eq!(
            plan.apply_mappings.len(),
            1,
            "one mapping per class namespace"
        );
        assert_eq!(
            plan.apply_mappings[0].metadata.namespace.as_deref(),
            Some("classes")
        );
        assert_eq!(
            plan.apply_mappings[0].metadata.name.as_deref(),
            Some("default")
        );
        assert!(plan.delete_groups.is_empty() && plan.delete_mappings.is_empty());
    }

    #[test]
    fn last_user_gone_deletes_group_and_managed_mapping() {
        let other = view("x", None);
        let plan = plan(&facts(
            vec![(&other, &IMPORT)],
            vec![
                group("qs.classes", "qs", "classes", false),
                group("qs", "qs", "default", false), // the class's own group: not ours here
                group("unrelated", "qs", "classes", false),
            ],
            vec![
                ("classes".to_string(), true),
                ("foreign".to_string(), false),
            ],
        ));
        assert!(plan.workspace_annotation);
        assert!(plan.apply_groups.is_empty());
        assert_eq!(plan.delete_groups, ["qs.classes"]);
        assert_eq!(
            plan.delete_mappings,
            ["classes"],
            "unlabelled mappings are not ours"
        );
    }

    #[test]
    fn deleting_or_unselected_clusters_do_not_count() {
        let a = view("a", Some(("qs", "classes")));
        for decision in [
            Decision::Cleanup,
            Decision::Ignore,
            Decision::Release {
                delete_fleet_cluster: false,
            },
        ] {
            let plan = plan(&facts(
                vec![(&a, &decision)],
                vec![group("qs.classes", "qs", "classes", false)],
                vec![("classes".to_string(), true)],
            ));
            assert!(!plan.workspace_annotation, "{decision:?}");
            assert_eq!(plan.delete_groups, ["qs.classes"], "{decision:?}");
            assert_eq!(plan.delete_mappings, ["classes"], "{decision:?}");
        }
    }

    #[test]
    fn waiting_clusters_keep_groups_but_not_the_annotation() {
        let a = view("a", Some(("qs", "classes")));
        let plan = plan(&facts(vec![(&a, &Decision::Wait)], vec![], vec![]));
        assert!(!plan.workspace_annotation);
        assert_eq!(names_of(&plan.apply_groups), ["qs.classes"]);
    }

    #[test]
    fn apply_class_group_off_means_no_groups() {
        let a = view("a", Some(("qs", "classes")));
        let mut f = facts(
            vec![(&a, &IMPORT)],
            vec![group("qs.classes", "qs", "classes", false)],
            vec![("classes".to_string(), true)],
        );
        f.apply_class_group = false;
        let plan = plan(&f);
        assert!(plan.apply_groups.is_empty() && plan.apply_mappings.is_empty());
        assert_eq!(plan.delete_groups, ["qs.classes"]);
        assert_eq!(plan.delete_mappings, ["classes"]);
    }

    #[test]
    fn adopted_groups_lose_caapf_owner_references() {
        let a = view("a", Some(("qs", "classes")));
        let plan = plan(&facts(
            vec![(&a, &IMPORT)],
            vec![group("qs.classes", "qs", "classes", true)],
            vec![],
        ));
        assert_eq!(plan.clear_group_owner_references, ["qs.classes"]);
    }

    #[test]
    fn orphaned_mappings_table() {
        use NamespaceState::*;
        let rows = [
            (true, Active, false),
            (true, Terminating, true),
            (true, Gone, true),
            (false, Terminating, false),
            (false, Gone, false),
            (false, Active, false),
        ];
        for (managed, state, want) in rows {
            assert_eq!(
                is_orphaned_mapping(managed, state),
                want,
                "managed={managed} {state:?}"
            );
        }
        let mappings = [
            ("classes".to_string(), true),
            ("foreign".to_string(), false),
        ];
        assert_eq!(orphaned_mappings(&mappings, Terminating), ["classes"]);
        assert_eq!(orphaned_mappings(&mappings, Gone), ["classes"]);
        assert!(orphaned_mappings(&mappings, Active).is_empty());
        assert_eq!(NamespaceState::of(None), Gone);
        assert_eq!(NamespaceState::of(Some(true)), Terminating);
        assert_eq!(NamespaceState::of(Some(false)), Active);
    }
}
