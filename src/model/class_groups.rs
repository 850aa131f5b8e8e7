//! What the ClusterClass controllers write, pure: a class's ClusterGroup (created, or applied
//! when it changes, with an Event), the group of a class that is gone deleted, and the finalizer
//! older CAAPF versions put on classes and groups removed.

use fleet_api_rs::fleet_clustergroup::ClusterGroup;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use crate::Result;
use crate::api::CapiClusterClass;
use crate::model::capi::ClassView;
use crate::model::config::ClassGroups;
use crate::model::fleet::desired_class_group;
use crate::model::plan::{Next, ObjectId, Plan, Write};
use crate::names;

/// The writes for a ClusterClass (`view` of `class`), given the class groups' configuration
/// (`None`: disabled) and its cached group `live`.
pub fn class_plan(
    class: &CapiClusterClass,
    view: &ClassView,
    config: Option<&ClassGroups>,
    live: Option<&ClusterGroup>,
) -> Result<Plan> {
    let mut writes: Vec<Write> = legacy_finalizer(class).into_iter().collect();
    let Some(config) = config.filter(|_| !view.deleting) else {
        return Ok(Plan::of(writes, Next::AwaitChange));
    };
    let desired = desired_class_group(view, config);
    let seen = live.and_then(|group| group.metadata.resource_version.as_deref());
    let object = ObjectId::of::<ClusterGroup>(Some(&view.namespace), &view.name, seen);
    let write = match (config.patch_resource, live) {
        (true, _) => Write::apply_if_changed(object, &desired, live, names::FIELD_MANAGER, None)?,
        (false, None) => Some(Write::Create {
            object,
            body: serde_json::to_value(&desired)?,
        }),
        (false, Some(_)) => None,
    };
    if let Some(write) = write {
        let (ns, name) = (&view.namespace, &view.name);
        let (reason, note) = match live {
            None => (
                "Created",
                format!("Created fleet object `{name}` in `{ns}`"),
            ),
            Some(_) => (
                "Updated",
                format!(
                    "Updated `fleet.cattle.io/v1alpha1/ClusterGroup` object `{name}` in `{ns}`"
                ),
            ),
        };
        let regarding = class.object_ref(&());
        writes.push(write);
        writes.push(Write::event(
            &regarding,
            EventType::Normal,
            reason,
            "Creating",
            note,
        ));
    }
    Ok(Plan::of(writes, Next::AwaitChange))
}

/// Whether a ClusterGroup is the group of a ClusterClass (same name and namespace as the class
/// its labels name), as opposed to a cross-namespace group or a user's group.
pub fn is_class_group(group: &ClusterGroup) -> bool {
    let labels = group.labels();
    labels.get(names::CLUSTERCLASS_NAME_LABEL) == Some(&group.name_any())
        && labels.get(names::CLUSTERCLASS_NAMESPACE_LABEL) == group.namespace().as_ref()
}

/// Whether the group's ClusterClass must be looked for: the group is a class group, class groups
/// are `enabled`, and it is not being deleted.
pub fn needs_class(group: &ClusterGroup, enabled: bool) -> bool {
    enabled && is_class_group(group) && group.meta().deletion_timestamp.is_none()
}

/// The writes for a ClusterGroup: the legacy finalizer removed, and the group deleted when it
/// [`needs_class`] and `class_exists` is false.
pub fn group_plan(group: &ClusterGroup, enabled: bool, class_exists: bool) -> Plan {
    let mut writes: Vec<Write> = legacy_finalizer(group).into_iter().collect();
    if needs_class(group, enabled) && !class_exists {
        writes.push(Write::Delete {
            object: ObjectId::observed(group),
            live_check: false,
        });
    }
    Plan::of(writes, Next::AwaitChange)
}

/// The removal of our finalizer, when `object` holds it.
fn legacy_finalizer<K: Resource<DynamicType = ()>>(object: &K) -> Option<Write> {
    let finalizers = object.meta().finalizers.clone().unwrap_or_default();
    finalizers
        .iter()
        .any(|f| f == names::FINALIZER)
        .then(|| Write::Finalizer {
            object: ObjectId::observed(object),
            add: false,
            finalizers,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn class(metadata: Value) -> CapiClusterClass {
        serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "ClusterClass",
            "metadata": metadata, "spec": {},
        }))
        .expect("class")
    }

    fn group(metadata: Value) -> ClusterGroup {
        serde_json::from_value(json!({
            "apiVersion": "fleet.cattle.io/v1alpha1", "kind": "ClusterGroup",
            "metadata": metadata, "spec": {},
        }))
        .expect("group")
    }

    fn shape(plan: &Plan) -> Vec<String> {
        plan.writes
            .iter()
            .map(|write| match write {
                Write::Apply { object, .. } => format!("apply {}", object.name),
                Write::Create { object, .. } => format!("create {}", object.name),
                Write::Finalizer { object, add, .. } => format!("finalizer {add} {}", object.name),
                Write::Delete { object, live_check } => {
                    format!("delete {} {live_check}", object.name)
                }
                Write::Event { reason, .. } => format!("event {reason}"),
                other => panic!("unexpected {other:?}"),
            })
            .collect()
    }

    #[test]
    fn a_class_gets_its_group_and_loses_the_legacy_finalizer() {
        let metadata = json!({"name": "quick-start", "namespace": "team-a", "uid": "u-1"});
        let plain = class(metadata.clone());
        let mut legacy = metadata.clone();
        legacy["finalizers"] = json!([names::FINALIZER]);
        let legacy = class(legacy);
        let mut deleting = metadata;
        deleting["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        let deleting = class(deleting);
        let apply = ClassGroups {
            patch_resource: true,
            set_owner_references: true,
        };
        let create_only = ClassGroups {
            patch_resource: false,
            ..apply
        };
        let view = |class: &CapiClusterClass| ClassView::of(class).expect("view");
        let current = desired_class_group(&view(&plain), &apply);
        let mut stale = current.clone();
        stale.metadata.labels = Some(Default::default());
        type Row<'a> = (
            &'a CapiClusterClass,
            Option<&'a ClassGroups>,
            Option<&'a ClusterGroup>,
            &'a [&'a str],
        );
        let rows: [Row; 8] = [
            (&plain, None, None, &[]),
            (&legacy, None, None, &["finalizer false quick-start"]),
            (
                &plain,
                Some(&apply),
                None,
                &["apply quick-start", "event Created"],
            ),
            (
                &plain,
                Some(&apply),
                Some(&stale),
                &["apply quick-start", "event Updated"],
            ),
            (&plain, Some(&apply), Some(&current), &[]),
            (
                &plain,
                Some(&create_only),
                None,
                &["create quick-start", "event Created"],
            ),
            (&plain, Some(&create_only), Some(&stale), &[]),
            (&deleting, Some(&apply), None, &[]),
        ];
        for (class, config, live, want) in rows {
            let plan = class_plan(class, &view(class), config, live).expect("plan");
            assert_eq!(shape(&plan), want, "{config:?} {live:?}");
        }
    }

    #[test]
    fn a_class_group_goes_with_its_class() {
        let labels = json!({
            (names::CLUSTERCLASS_NAME_LABEL): "quick-start",
            (names::CLUSTERCLASS_NAMESPACE_LABEL): "team-a",
        });
        let ours = group(json!({"name": "quick-start", "namespace": "team-a", "labels": labels}));
        let users = group(json!({"name": "mine", "namespace": "team-a", "labels": labels}));
        let legacy =
            group(json!({"name": "mine", "namespace": "team-a", "finalizers": [names::FINALIZER]}));
        let rows: [(&ClusterGroup, bool, bool, &[&str]); 5] = [
            (&ours, true, true, &[]),
            (&ours, true, false, &["delete quick-start false"]),
            (&ours, false, false, &[]),
            (&users, true, false, &[]),
            (&legacy, true, false, &["finalizer false mine"]),
        ];
        for (group, enabled, exists, want) in rows {
            let plan = group_plan(group, enabled, exists);
            assert_eq!(
                shape(&plan),
                want,
                "{:?} {enabled} {exists}",
                group.metadata.name
            );
        }
    }
}
