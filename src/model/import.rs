//! What to do with one CAPI Cluster: the decision table of the Cluster controller.

use fleet_api_rs::fleet_cluster::Cluster as FleetCluster;

use crate::model::capi::{ClusterView, StringMap};
use crate::model::config::EffectiveConfig;
use crate::model::fleet::is_agent_initiated;
use crate::model::selection::ClusterFacts;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The decision for one Cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// `spec.paused` or the paused annotation: touch nothing. `selected` tells whether it would
    /// be selected (its namespace-level objects are kept).
    Paused { selected: bool },
    /// `spec.cluster` has problems: keep everything as it is until they are fixed.
    Hold,
    /// Being deleted while carrying our finalizer: remove what we created, then the finalizer.
    Cleanup,
    /// Being deleted while carrying our finalizer, and its Fleet workloads are removed first
    /// (`spec.runtimeExtension.beforeClusterDelete`, [`crate::model::teardown::holds_cleanup`]):
    /// keep the Fleet Cluster (drained once BeforeClusterDelete started the removal) and our
    /// finalizer until Cluster API lets the deletion proceed, the operator skips, or `deadline`.
    /// Its namespace keeps what the Cluster used (workspace annotation, cross-namespace group
    /// and mapping): a BundleNamespaceMapping deleted first would take the class namespace's
    /// bundles out of the Fleet Cluster's scope before Fleet removed their BundleDeployments
    /// (rancher/fleet v0.16.1 `bundle_controller.go` does not watch mappings).
    Teardown {
        deadline: k8s_openapi::jiff::Timestamp,
    },
    /// Being deleted without our finalizer, or not selected and never managed: nothing to do.
    Ignore,
    /// Was managed (carries our finalizer) but is no longer selected, or import was disabled:
    /// remove the finalizer, and delete the Fleet Cluster if the deselect policy says so.
    Release { delete_fleet_cluster: bool },
    /// Selected, manager-initiated, control plane not initialized yet: ensure the finalizer and
    /// wait for the status change.
    Wait,
    /// Selected: keep the Fleet objects.
    Import { agent_initiated: bool },
    /// Its definition was moved into the workload cluster itself (move state `Moved`,
    /// docs/self-managed.md): the workload cluster manages itself, this management cluster
    /// writes nothing for it. Its Fleet Cluster is **kept** (the agent keeps delivering
    /// add-ons, the move Bundles stay reported) and no longer owned by the source Cluster, so
    /// deleting the source copy leaves it alone; a deleted source only loses our finalizer.
    Moved,
}

impl Decision {
    /// Selected by the configuration (and not being deleted).
    pub fn is_selected(&self) -> bool {
        matches!(
            self,
            Decision::Paused { selected: true }
                | Decision::Wait
                | Decision::Import { .. }
                | Decision::Moved
        )
    }

    /// Has (or is about to have) a Fleet Cluster.
    pub fn is_imported(&self) -> bool {
        matches!(self, Decision::Import { .. })
    }
}

/// Decides for one Cluster. `namespace_labels` are the labels of its namespace (empty when
/// unknown); `live` is its Fleet Cluster's metadata, when one exists (the decision reads nothing
/// else of it, so deciding needs no decode of the cached spec and status); `now` places a
/// deleting Cluster's teardown deadline.
pub fn import_decision(
    cluster: &ClusterView,
    config: &EffectiveConfig,
    namespace_labels: &StringMap,
    live: Option<&ObjectMeta>,
    now: k8s_openapi::jiff::Timestamp,
) -> Decision {
    // Before anything else: a moved Cluster stays paused, and the decisions below (Paused,
    // Cleanup, Release) would act on what is now the workload cluster's own Fleet Cluster.
    if crate::model::move_state::is_moved(&cluster.annotations) {
        return Decision::Moved;
    }
    let import = config.cluster.as_ref();
    let selected = import.is_some_and(|import| {
        import.selection.selects(ClusterFacts {
            labels: &cluster.labels,
            namespace: &cluster.namespace,
            namespace_labels,
        })
    });
    if cluster.paused {
        return Decision::Paused {
            selected: selected && !cluster.deleting,
        };
    }
    // Deletion is never held, not even by an invalid configuration, unless the Cluster's
    // workloads are removed first (opt-in, with a deadline).
    if cluster.deleting {
        if !cluster.has_finalizer() {
            return Decision::Ignore;
        }
        return match crate::model::teardown::holds_cleanup(
            cluster,
            &config.runtime_extension.teardown,
            live,
            now,
        ) {
            Some(deadline) => Decision::Teardown { deadline },
            None => Decision::Cleanup,
        };
    }
    if config.problems_under("spec.cluster").next().is_some() {
        return Decision::Hold;
    }
    let Some(import) = import.filter(|_| selected) else {
        return if cluster.has_finalizer() {
            Decision::Release {
                delete_fleet_cluster: import.is_some_and(|i| i.delete_deselected),
            }
        } else {
            Decision::Ignore
        };
    };
    let agent_initiated = is_agent_initiated(import, cluster, live);
    if !agent_initiated && !cluster.control_plane_initialized {
        return Decision::Wait;
    }
    Decision::Import { agent_initiated }
}

/// For a [`Decision::Moved`] Cluster: the owner references its Fleet Cluster must keep, without
/// the source Cluster's (matched by UID), so the garbage collector does not delete the Fleet
/// Cluster with the source copy. `None` when the source does not own it (nothing to write).
pub fn disowned_after_move(
    owners: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference],
    cluster_uid: &str,
) -> Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>> {
    if cluster_uid.is_empty() || !owners.iter().any(|o| o.uid == cluster_uid) {
        return None;
    }
    Some(
        owners
            .iter()
            .filter(|o| o.uid != cluster_uid)
            .cloned()
            .collect(),
    )
}

/// What a Cluster counts as in `status.clusters` and the cluster gauges while selection is
/// frozen ([`Decision::Hold`]: `spec.cluster` has problems and nothing is imported or released):
/// what exists, not what a selection would say. A Cluster carrying our finalizer is managed; it
/// counts as imported when its Fleet Cluster exists, as waiting otherwise. Any other decision is
/// returned as it is.
pub fn counted_as(
    decision: Decision,
    cluster: &ClusterView,
    live: Option<&FleetCluster>,
) -> Decision {
    if decision != Decision::Hold {
        return decision;
    }
    match (cluster.has_finalizer(), live) {
        (false, _) => Decision::Ignore,
        (true, None) => Decision::Wait,
        (true, Some(live)) => Decision::Import {
            agent_initiated: live
                .spec
                .client_id
                .as_deref()
                .is_some_and(|id| !id.is_empty()),
        },
    }
}

/// Whether a decision waits because the Cluster's namespace is terminating: nothing new is
/// created in a namespace being deleted (a real API server answers 403 "because it is being
/// terminated", and the namespace controller deletes the Cluster next, which brings
/// [`Decision::Cleanup`]). Releases and cleanups only remove things, so they go on.
pub fn waits_for_terminating_namespace(decision: &Decision, namespace_terminating: bool) -> bool {
    namespace_terminating && matches!(decision, Decision::Import { .. } | Decision::Wait)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::api::FleetAddonConfigSpec;

    fn config(spec: &str) -> EffectiveConfig {
        let spec: FleetAddonConfigSpec = serde_yaml::from_str(spec).expect("spec");
        EffectiveConfig::from_spec(&spec)
    }

    fn now() -> k8s_openapi::jiff::Timestamp {
        "2026-01-01T00:10:00Z".parse().expect("time")
    }

    fn cluster(metadata: Value, spec: Value, initialized: bool) -> ClusterView {
        let mut metadata = metadata;
        metadata["namespace"] = json!("ns");
        metadata["name"] = json!("c1");
        ClusterView::from_json(&json!({
            "metadata": metadata,
            "spec": spec,
            "status": {"initialization": {"controlPlaneInitialized": initialized}}
        }))
        .expect("view")
    }

    #[test]
    fn decision_table() {
        let fin = json!({"finalizers": ["fleet.addons.cluster.x-k8s.io"]});
        let labelled = json!({"labels": {"import": "yes"}});
        let labelled_fin =
            json!({"labels": {"import": "yes"}, "finalizers": ["fleet.addons.cluster.x-k8s.io"]});
        let deleting = json!({"deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["fleet.addons.cluster.x-k8s.io"]});
        let deleting_no_fin = json!({"deletionTimestamp": "2026-01-01T00:00:00Z"});
        let paused = json!({"annotations": {"cluster.x-k8s.io/paused": "true"}, "labels": {"import": "yes"}});
        let moved = |extra: Value| {
            let mut metadata = json!({"annotations": {
                "fleet.addons.cluster.x-k8s.io/move-state": r#"{"phase":"Moved","since":1,"pausedByMove":true}"#,
            }, "finalizers": ["fleet.addons.cluster.x-k8s.io"]});
            if let Some(extra) = extra.as_object() {
                for (k, v) in extra {
                    metadata[k] = v.clone();
                }
            }
            metadata
        };
        let moving = json!({"annotations": {
            "fleet.addons.cluster.x-k8s.io/move-state": r#"{"phase":"WaitingTarget","since":1,"pausedByMove":true}"#,
        }, "finalizers": ["fleet.addons.cluster.x-k8s.io"]});
        let by_label = "cluster: {selector: {matchLabels: {import: \"yes\"}}}";
        let by_label_delete =
            "cluster: {selector: {matchLabels: {import: \"yes\"}}, deselectPolicy: Delete}";
        struct Row {
            name: &'static str,
            config: EffectiveConfig,
            cluster: ClusterView,
            want: Decision,
        }
        let rows = vec![
            Row {
                name: "defaults import an initialized cluster",
                config: EffectiveConfig::default(),
                cluster: cluster(json!({}), json!({}), true),
                want: Decision::Import {
                    agent_initiated: false,
                },
            },
            Row {
                name: "manager-initiated waits for the control plane",
                config: EffectiveConfig::default(),
                cluster: cluster(json!({}), json!({}), false),
                want: Decision::Wait,
            },
            Row {
                name: "agent-initiated does not wait",
                config: config("cluster: {agentInitiated: true}"),
                cluster: cluster(json!({}), json!({}), false),
                want: Decision::Import {
                    agent_initiated: true,
                },
            },
            Row {
                name: "selected by label",
                config: config(by_label),
                cluster: cluster(labelled.clone(), json!({}), true),
                want: Decision::Import {
                    agent_initiated: false,
                },
            },
            Row {
                name: "not selected, never managed",
                config: config(by_label),
                cluster: cluster(json!({}), json!({}), true),
                want: Decision::Ignore,
            },
            Row {
                name: "deselected keeps the Fleet Cluster by default",
                config: config(by_label),
                cluster: cluster(fin.clone(), json!({}), true),
                want: Decision::Release {
                    delete_fleet_cluster: false,
                },
            },
            Row {
                name: "deselected with Delete policy",
                config: config(by_label_delete),
                cluster: cluster(fin.clone(), json!({}), true),
                want: Decision::Release {
                    delete_fleet_cluster: true,
                },
            },
            Row {
                name: "import disabled releases managed clusters",
                config: config("{}"),
                cluster: cluster(fin.clone(), json!({}), true),
                want: Decision::Release {
                    delete_fleet_cluster: false,
                },
            },
            Row {
                name: "import disabled ignores others",
                config: config("{}"),
                cluster: cluster(json!({}), json!({}), true),
                want: Decision::Ignore,
            },
            Row {
                name: "deleting with finalizer cleans up",
                config: EffectiveConfig::default(),
                cluster: cluster(deleting.clone(), json!({}), true),
                want: Decision::Cleanup,
            },
            Row {
                name: "deleting unselected with finalizer still cleans up (never held)",
                config: config(by_label),
                cluster: cluster(deleting, json!({}), true),
                want: Decision::Cleanup,
            },
            Row {
                name: "deleting without finalizer",
                config: EffectiveConfig::default(),
                cluster: cluster(deleting_no_fin, json!({}), true),
                want: Decision::Ignore,
            },
            Row {
                name: "paused by annotation",
                config: config(by_label),
                cluster: cluster(paused, json!({}), true),
                want: Decision::Paused { selected: true },
            },
            Row {
                name: "paused by spec",
                config: config(by_label),
                cluster: cluster(json!({}), json!({"paused": true}), true),
                want: Decision::Paused { selected: false },
            },
            Row {
                name: "moved: left alone although paused",
                config: EffectiveConfig::default(),
                cluster: cluster(moved(json!({})), json!({"paused": true}), true),
                want: Decision::Moved,
            },
            Row {
                name: "moved and unpaused by someone: still not managed here",
                config: EffectiveConfig::default(),
                cluster: cluster(moved(json!({})), json!({}), true),
                want: Decision::Moved,
            },
            Row {
                name: "moved and deselected: the Fleet Cluster is not released",
                config: config(by_label_delete),
                cluster: cluster(moved(json!({})), json!({"paused": true}), true),
                want: Decision::Moved,
            },
            Row {
                name: "moved source deleted: no cleanup of the Fleet Cluster",
                config: EffectiveConfig::default(),
                cluster: cluster(
                    moved(json!({"deletionTimestamp": "2026-01-01T00:00:00Z"})),
                    json!({"paused": true}),
                    true,
                ),
                want: Decision::Moved,
            },
            Row {
                name: "a move in progress is an ordinary paused Cluster",
                config: EffectiveConfig::default(),
                cluster: cluster(moving, json!({"paused": true}), true),
                want: Decision::Paused { selected: true },
            },
            Row {
                name: "invalid selection holds",
                config: config("cluster: {namespaceRegexes: [\"(\"]}"),
                cluster: cluster(labelled_fin, json!({}), true),
                want: Decision::Hold,
            },
            Row {
                name: "invalid selection does not hold deletion",
                config: config("cluster: {namespaceRegexes: [\"(\"]}"),
                cluster: cluster(
                    json!({"deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["fleet.addons.cluster.x-k8s.io"]}),
                    json!({}),
                    true,
                ),
                want: Decision::Cleanup,
            },
        ];
        for row in rows {
            assert_eq!(
                import_decision(&row.cluster, &row.config, &StringMap::new(), None, now()),
                row.want,
                "{}",
                row.name
            );
        }
    }

    /// A deleting Cluster whose workloads are removed first keeps its Fleet Cluster and our
    /// finalizer until Cluster API lets its deletion proceed (`ok-to-delete`), the operator
    /// skips, or the deadline; everything else cleans up at once as before.
    #[test]
    fn deleting_clusters_wait_for_their_teardown() {
        let on =
            config("runtimeExtension: {beforeClusterDelete: {removeWorkloads: true}}\ncluster: {}");
        let off = config("cluster: {}");
        let live = ObjectMeta {
            name: Some("c1".into()),
            namespace: Some("ns".into()),
            ..Default::default()
        };
        let live_deleting = ObjectMeta {
            deletion_timestamp: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now())),
            ..live.clone()
        };
        let topology =
            json!({"topology": {"classRef": {"name": "quick-start"}, "version": "v1.33.1"}});
        // Deleted at 00:00; now is 00:10; the default timeout is 30m.
        let deleting = |annotations: Value| {
            json!({"deletionTimestamp": "2026-01-01T00:00:00Z",
                   "finalizers": ["fleet.addons.cluster.x-k8s.io"], "annotations": annotations})
        };
        let deadline: k8s_openapi::jiff::Timestamp = "2026-01-01T00:30:00Z".parse().expect("time");
        let teardown = Decision::Teardown { deadline };
        type Row<'a> = (
            &'a str,
            &'a EffectiveConfig,
            Value,
            Value,
            Option<&'a ObjectMeta>,
            Decision,
        );
        let rows: Vec<Row<'_>> = vec![
            (
                "on: held until the deadline",
                &on,
                deleting(json!({})),
                topology.clone(),
                Some(&live),
                teardown.clone(),
            ),
            (
                "off: cleaned up at once",
                &off,
                deleting(json!({})),
                topology.clone(),
                Some(&live),
                Decision::Cleanup,
            ),
            (
                "off, the Cluster asks for it",
                &off,
                deleting(
                    json!({"fleet.addons.cluster.x-k8s.io/remove-workloads-before-delete": "true"}),
                ),
                topology.clone(),
                Some(&live),
                teardown.clone(),
            ),
            (
                "on, the Cluster opts out",
                &on,
                deleting(
                    json!({"fleet.addons.cluster.x-k8s.io/remove-workloads-before-delete": "false"}),
                ),
                topology.clone(),
                Some(&live),
                Decision::Cleanup,
            ),
            (
                "an invalid annotation is ignored",
                &on,
                deleting(
                    json!({"fleet.addons.cluster.x-k8s.io/remove-workloads-before-delete": "yes"}),
                ),
                topology.clone(),
                Some(&live),
                teardown.clone(),
            ),
            (
                "skipped by the operator",
                &on,
                deleting(json!({"fleet.addons.cluster.x-k8s.io/skip-workload-removal": "true"})),
                topology.clone(),
                Some(&live),
                Decision::Cleanup,
            ),
            (
                "Cluster API was told to proceed",
                &on,
                deleting(json!({"runtime.cluster.x-k8s.io/ok-to-delete": ""})),
                topology.clone(),
                Some(&live),
                Decision::Cleanup,
            ),
            (
                "no topology: Cluster API never calls BeforeClusterDelete",
                &on,
                deleting(json!({})),
                json!({}),
                Some(&live),
                Decision::Cleanup,
            ),
            (
                "no Fleet Cluster to keep",
                &on,
                deleting(json!({})),
                topology.clone(),
                None,
                Decision::Cleanup,
            ),
            (
                "the Fleet Cluster is being deleted already",
                &on,
                deleting(json!({})),
                topology.clone(),
                Some(&live_deleting),
                Decision::Cleanup,
            ),
            (
                "without our finalizer",
                &on,
                json!({"deletionTimestamp": "2026-01-01T00:00:00Z"}),
                topology.clone(),
                Some(&live),
                Decision::Ignore,
            ),
        ];
        for (name, config, metadata, spec, live, want) in rows {
            let view = cluster(metadata, spec, true);
            assert_eq!(
                import_decision(&view, config, &StringMap::new(), live, now()),
                want,
                "{name}"
            );
        }
        // Past the deadline: cleaned up.
        let view = cluster(deleting(json!({})), topology, true);
        let later = "2026-01-01T00:30:00Z".parse().expect("time");
        assert_eq!(
            import_decision(&view, &on, &StringMap::new(), Some(&live), later),
            Decision::Cleanup
        );
        assert!(!teardown.is_selected() && !teardown.is_imported());
    }

    #[test]
    fn moved_fleet_cluster_is_disowned() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
        let owner = |uid: &str| OwnerReference {
            api_version: "cluster.x-k8s.io/v1beta2".into(),
            kind: "Cluster".into(),
            name: "c1".into(),
            uid: uid.into(),
            ..Default::default()
        };
        let cases = [
            ("no owners", vec![], "u1", None),
            ("owned by the source", vec![owner("u1")], "u1", Some(vec![])),
            (
                "other owners stay",
                vec![owner("u0"), owner("u1")],
                "u1",
                Some(vec![owner("u0")]),
            ),
            ("owned by someone else", vec![owner("u0")], "u1", None),
            ("unknown source UID", vec![owner("")], "", None),
        ];
        for (name, owners, uid, want) in cases {
            assert_eq!(disowned_after_move(&owners, uid), want, "{name}");
        }
    }

    #[test]
    fn namespace_labels_select() {
        let config = config("cluster: {namespaceSelector: {matchLabels: {fleet: \"on\"}}}");
        let view = cluster(json!({}), json!({}), true);
        let on = StringMap::from([("fleet".to_string(), "on".to_string())]);
        assert!(import_decision(&view, &config, &on, None, now()).is_imported());
        assert_eq!(
            import_decision(&view, &config, &StringMap::new(), None, now()),
            Decision::Ignore
        );
    }

    #[test]
    fn counts() {
        assert!(Decision::Wait.is_selected() && !Decision::Wait.is_imported());
        let import = Decision::Import {
            agent_initiated: false,
        };
        assert!(import.is_selected() && import.is_imported());
        assert!(Decision::Paused { selected: true }.is_selected());
        assert!(!Decision::Cleanup.is_selected());
    }

    #[test]
    fn terminating_namespaces_get_nothing_new() {
        let rows = [
            (
                Decision::Import {
                    agent_initiated: false,
                },
                true,
                true,
            ),
            (
                Decision::Import {
                    agent_initiated: true,
                },
                true,
                true,
            ),
            (Decision::Wait, true, true),
            (Decision::Cleanup, true, false),
            (
                Decision::Release {
                    delete_fleet_cluster: true,
                },
                true,
                false,
            ),
            (Decision::Ignore, true, false),
            (Decision::Hold, true, false),
            (
                Decision::Import {
                    agent_initiated: false,
                },
                false,
                false,
            ),
            (Decision::Wait, false, false),
        ];
        for (decision, terminating, want) in rows {
            assert_eq!(
                waits_for_terminating_namespace(&decision, terminating),
                want,
                "{decision:?} terminating={terminating}"
            );
        }
    }

    #[test]
    fn frozen_selection_counts_what_exists() {
        let managed = cluster(
            json!({"finalizers": ["fleet.addons.cluster.x-k8s.io"]}),
            json!({}),
            true,
        );
        let unmanaged = cluster(json!({}), json!({}), true);
        let fleet: FleetCluster = serde_json::from_value(json!({
            "metadata": {"name": "c1", "namespace": "ns"}, "spec": {}
        }))
        .expect("fleet cluster");
        let agent: FleetCluster = serde_json::from_value(json!({
            "metadata": {"name": "c1", "namespace": "ns"}, "spec": {"clientID": "abc"}
        }))
        .expect("fleet cluster");
        let import = Decision::Import {
            agent_initiated: false,
        };
        let rows = [
            (Decision::Hold, &managed, Some(&fleet), import.clone()),
            (
                Decision::Hold,
                &managed,
                Some(&agent),
                Decision::Import {
                    agent_initiated: true,
                },
            ),
            (Decision::Hold, &managed, None, Decision::Wait),
            (Decision::Hold, &unmanaged, Some(&fleet), Decision::Ignore),
            (Decision::Hold, &unmanaged, None, Decision::Ignore),
            // Not frozen: the decision stands.
            (Decision::Ignore, &managed, Some(&fleet), Decision::Ignore),
            (Decision::Cleanup, &managed, None, Decision::Cleanup),
            (import.clone(), &unmanaged, None, import.clone()),
        ];
        for (decision, view, live, want) in rows {
            assert_eq!(
                counted_as(decision.clone(), view, live),
                want,
                "{decision:?} finalizer={} live={}",
                view.has_finalizer(),
                live.is_some()
            );
        }
    }
}
