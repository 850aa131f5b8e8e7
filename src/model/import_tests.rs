//! Table tests of the Cluster controller's decisions and plans.

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
    let paused =
        json!({"annotations": {"cluster.x-k8s.io/paused": "true"}, "labels": {"import": "yes"}});
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
    let topology = json!({"topology": {"classRef": {"name": "quick-start"}, "version": "v1.33.1"}});
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

// ---- The plans ----

const FINALIZER: &str = "fleet.addons.cluster.x-k8s.io";

/// A plan in words: one line per write, in order.
fn describe(plan: &Plan) -> Vec<String> {
    let id = |o: &ObjectId| format!("{}/{} {}", o.resource.group, o.resource.kind, o.name);
    let line = |write: &Write| match write {
        Write::Apply { object, .. } => format!("apply {}", id(object)),
        Write::ApplyStatus { object, .. } => format!("apply status {}", id(object)),
        Write::Create { object, .. } => format!("create {}", id(object)),
        Write::CreateOrGet {
            object, manager, ..
        } => format!("create or get {} as {manager}", id(object)),
        Write::MergePatch { object, patch, .. } => format!("merge patch {} {patch}", id(object)),
        Write::Modify { object, change, .. } => {
            let change = match change {
                Change::Disown { uid } => format!("disown {uid}"),
                Change::TokenValues { token_uid, .. } => format!("token values of {token_uid}"),
                Change::ConfigMapKey { key, .. } => format!("key {key}"),
            };
            format!("modify {} {change}", id(object))
        }
        Write::Finalizer { object, add, .. } => {
            let verb = if *add { "add" } else { "remove" };
            format!("{verb} finalizer {}", id(object))
        }
        Write::Delete { object, live_check } => {
            let check = if *live_check { " if it exists" } else { "" };
            format!("delete {}{check}", id(object))
        }
        Write::Event {
            regarding, reason, ..
        } => format!(
            "event {reason} on {} {}",
            regarding.kind.as_deref().unwrap_or_default(),
            regarding.name.as_deref().unwrap_or_default()
        ),
    };
    plan.writes.iter().map(line).collect()
}

fn fleet_cluster(value: Value) -> Arc<FleetCluster> {
    let mut object = json!({"apiVersion": "fleet.cattle.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "c1", "namespace": "ns", "resourceVersion": "9"}, "spec": {}});
    if let (Some(object), Some(extra)) = (object.as_object_mut(), value.as_object()) {
        for (key, value) in extra {
            object.insert(key.clone(), value.clone());
        }
    }
    Arc::new(serde_json::from_value(object).expect("Fleet Cluster"))
}

fn inputs() -> ImportInputs {
    ImportInputs {
        agent: Ok(AgentSettings::default()),
        template_values: BTreeMap::new(),
        unreadable: vec![],
        machines: None,
        bootstrap: Bootstrap::Current,
        rollout: Default::default(),
        gates: Default::default(),
    }
}

/// Longer than any token check, so the rows show those.
const RESYNC: Duration = Duration::from_secs(100 * 3600);

/// An observation of Cluster `ns/c1` (uid `u1`, resourceVersion 5) as the Cluster controller
/// makes it; `metadata` adds to the Cluster's.
fn observed(
    config: &EffectiveConfig,
    metadata: Value,
    fleet: Option<Arc<FleetCluster>>,
    token: Option<ObjectMeta>,
) -> Observed {
    observed_with_spec(config, metadata, json!({}), fleet, token)
}

fn observed_with_spec(
    config: &EffectiveConfig,
    metadata: Value,
    spec: Value,
    fleet: Option<Arc<FleetCluster>>,
    token: Option<ObjectMeta>,
) -> Observed {
    let mut metadata = metadata;
    metadata["uid"] = json!("u1");
    let view = cluster(metadata, spec, true);
    let decision = import_decision(
        &view,
        config,
        &StringMap::new(),
        fleet.as_deref().map(|f| &f.metadata),
        now(),
    );
    let import = matches!(decision, Decision::Import { .. }).then(inputs);
    Observed {
        cluster_version: Some("5".into()),
        regarding: ObjectReference {
            kind: Some("Cluster".into()),
            name: Some("c1".into()),
            namespace: Some("ns".into()),
            ..Default::default()
        },
        fleet_name: "c1".into(),
        view,
        decision,
        fleet,
        token,
        import,
        now: now(),
        resync: RESYNC,
        conflicts: Default::default(),
    }
}

/// The plan of each decision, write by write, in order (what the Cluster reconcile writes).
#[test]
fn plans_by_decision() {
    let defaults = EffectiveConfig::default();
    let deselect = config("cluster: {selector: {matchLabels: {a: b}}}");
    let deselect_delete =
        config("cluster: {selector: {matchLabels: {a: b}}, deselectPolicy: Delete}");
    let fin = json!({"finalizers": [FINALIZER]});
    let deleting = json!({"deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": [FINALIZER]});
    let owned = json!({"metadata": {"name": "c1", "namespace": "ns", "resourceVersion": "9",
        "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "c1", "uid": "u1"}]}});
    let moved = json!({"annotations": {
        "fleet.addons.cluster.x-k8s.io/move-state": r#"{"phase":"Moved","since":1,"pausedByMove":true}"#,
    }, "finalizers": [FINALIZER]});
    let mut moved_deleting = moved.clone();
    moved_deleting["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    let token = ObjectMeta {
        name: Some("c1".into()),
        resource_version: Some("3".into()),
        ..Default::default()
    };
    let (fleet, capi) = ("fleet.cattle.io/Cluster c1", "cluster.x-k8s.io/Cluster c1");
    let token_id = "fleet.cattle.io/ClusterRegistrationToken c1";
    let mut waiting = observed(&defaults, json!({}), None, None);
    (waiting.decision, waiting.import) = (Decision::Wait, None);
    type Row<'a> = (&'a str, &'a EffectiveConfig, Observed, Vec<String>, Next);
    let rows: Vec<Row> = vec![
        (
            "import: our finalizer before the Fleet Cluster",
            &defaults,
            observed(&defaults, json!({}), None, None),
            vec![format!("add finalizer {capi}"), format!("apply {fleet}")],
            Next::After(RESYNC),
        ),
        (
            "import with our finalizer",
            &defaults,
            observed(&defaults, fin.clone(), None, None),
            vec![format!("apply {fleet}")],
            Next::After(RESYNC),
        ),
        (
            "waiting for the control plane: our finalizer only",
            &defaults,
            waiting,
            vec![format!("add finalizer {capi}")],
            Next::AwaitChange,
        ),
        (
            "deselected: let go, keep the Fleet Cluster",
            &deselect,
            observed(&deselect, fin.clone(), Some(fleet_cluster(json!({}))), None),
            vec![format!("remove finalizer {capi}")],
            Next::AwaitChange,
        ),
        (
            "deselected with deletion: the Fleet Cluster, its token, an Event, then let go",
            &deselect_delete,
            observed(
                &deselect_delete,
                fin.clone(),
                Some(fleet_cluster(json!({}))),
                None,
            ),
            vec![
                format!("delete {fleet}"),
                format!("delete {token_id} if it exists"),
                "event Deselected on Cluster c1".into(),
                format!("remove finalizer {capi}"),
            ],
            Next::AwaitChange,
        ),
        (
            "deselected with deletion, no Fleet Cluster (confirmed): let go",
            &deselect_delete,
            observed(&deselect_delete, fin.clone(), None, None),
            vec![format!("remove finalizer {capi}")],
            Next::AwaitChange,
        ),
        (
            "deleted: the Fleet Cluster we do not own, the token, our finalizer",
            &defaults,
            observed(
                &defaults,
                deleting.clone(),
                Some(fleet_cluster(json!({}))),
                Some(token),
            ),
            vec![
                format!("delete {fleet}"),
                format!("delete {token_id}"),
                format!("remove finalizer {capi}"),
            ],
            Next::AwaitChange,
        ),
        (
            "deleted: a Fleet Cluster the Cluster owns is left to the garbage collector",
            &defaults,
            observed(
                &defaults,
                deleting,
                Some(fleet_cluster(owned.clone())),
                None,
            ),
            vec![
                format!("delete {token_id} if it exists"),
                format!("remove finalizer {capi}"),
            ],
            Next::AwaitChange,
        ),
        (
            "paused: nothing",
            &defaults,
            observed(
                &defaults,
                json!({"annotations": {"cluster.x-k8s.io/paused": "true"}}),
                None,
                None,
            ),
            vec![],
            Next::AwaitChange,
        ),
        (
            "moved: the Fleet Cluster disowned, kept",
            &defaults,
            observed(
                &defaults,
                moved.clone(),
                Some(fleet_cluster(owned.clone())),
                None,
            ),
            vec![format!("modify {fleet} disown u1")],
            Next::AwaitChange,
        ),
        (
            "moved source deleted: disowned, then our finalizer removed",
            &defaults,
            observed(&defaults, moved_deleting, Some(fleet_cluster(owned)), None),
            vec![
                format!("modify {fleet} disown u1"),
                format!("remove finalizer {capi}"),
            ],
            Next::AwaitChange,
        ),
        (
            "moved, not owned: nothing",
            &defaults,
            observed(&defaults, moved, Some(fleet_cluster(json!({}))), None),
            vec![],
            Next::AwaitChange,
        ),
    ];
    for (name, config, observed, writes, then) in rows {
        let plan = plan(&observed, config).expect("plan");
        assert_eq!(describe(&plan), writes, "{name}");
        assert_eq!(plan.then, then, "{name}");
    }
}

/// What an import writes for what it observed: nothing at steady state, an Event for an update,
/// create-only, the agent-initiated stub ending the plan, the token kept, invalid settings and
/// unreadable references reported.
#[test]
fn import_plans() {
    let defaults = EffectiveConfig::default();
    let agent = config("cluster: {agentInitiated: true}");
    let create_only = config("cluster: {patchResource: false}");
    let fin = json!({"finalizers": [FINALIZER]});
    let fleet = "fleet.cattle.io/Cluster c1";
    let token_id = "fleet.cattle.io/ClusterRegistrationToken c1";
    // The Fleet Cluster as the first import applies it, then as the cache shows it.
    let first = plan(&observed(&defaults, fin.clone(), None, None), &defaults).expect("plan");
    let Some(Write::Apply { body, .. }) = first.writes.first() else {
        panic!("{first:?}");
    };
    let applied = fleet_cluster(body.clone());
    let mut changed = body.clone();
    changed["spec"]["kubeConfigSecret"] = json!("another-kubeconfig");
    let stub = |manager: &str| {
        fleet_cluster(
            json!({"metadata": {"name": "c1", "namespace": "ns", "resourceVersion": "9",
            "managedFields": [{"manager": manager, "operation": "Update"}]},
            "spec": {"clientID": "abc"}}),
        )
    };
    let mut registered = body.clone();
    registered["status"] = json!({"agent": {"lastSeen": "2026-01-01T00:05:00Z"}});
    registered["spec"]["clientID"] = json!("abc");
    let token = |annotations: Value| {
        serde_json::from_value::<ObjectMeta>(json!({"name": "c1", "uid": "t2",
            "resourceVersion": "3", "creationTimestamp": "2026-01-01T00:00:00Z",
            "annotations": annotations}))
        .expect("token")
    };
    // Created now with the configured TTL: renewed after half of it.
    let import = defaults.cluster.as_ref().expect("import");
    let ttl = crate::api::duration::parse_duration(&import.registration_token_ttl).expect("ttl");
    let expires = crate::model::registration_token::expires_annotation(now(), ttl);
    let fresh = token(json!({names::REGISTRATION_TOKEN_EXPIRES_ANNOTATION: expires}));
    // Created at 00:00 without the annotation: extended at once.
    let created = "2026-01-01T00:00:00Z".parse().expect("time");
    let Renewal::Extend {
        ttl: extended,
        expires,
        recheck,
    } = renewal(created, None, ttl, now())
    else {
        panic!("extended at once");
    };
    let extension = extension_patch(&extended, expires);
    let with = |mut o: Observed, change: &dyn Fn(&mut ImportInputs)| {
        if let Some(inputs) = o.import.as_mut() {
            change(inputs);
        }
        o
    };
    let values =
        TokenValues::parse("apiServerURL: https://fleet\ntoken: t\nclusterNamespace: ns\n")
            .expect("values");
    let held = Held {
        problems: vec![LayerProblem {
            carrier: Carrier::ClusterClass {
                namespace: "classes".into(),
                name: "k".into(),
            },
            error: crate::model::validation::FieldError::new("tolerations", "bad"),
        }],
        classes: vec![ObjectReference {
            kind: Some("ClusterClass".into()),
            namespace: Some("classes".into()),
            name: Some("k".into()),
            ..Default::default()
        }],
    };
    let renew = ttl / 2;
    type Row<'a> = (&'a str, &'a EffectiveConfig, Observed, Vec<String>, Next);
    let rows: Vec<Row> = vec![
        (
            "steady state: nothing",
            &defaults,
            observed(&defaults, fin.clone(), Some(applied.clone()), None),
            vec![],
            Next::After(RESYNC),
        ),
        (
            "an update is applied and reported",
            &defaults,
            observed(&defaults, fin.clone(), Some(fleet_cluster(changed)), None),
            vec![
                format!("apply {fleet}"),
                "event Updated on Cluster c1".into(),
            ],
            Next::After(RESYNC),
        ),
        (
            "create-only creates a missing Fleet Cluster",
            &create_only,
            observed(&create_only, fin.clone(), None, None),
            vec![format!("create {fleet}")],
            Next::After(RESYNC),
        ),
        (
            "create-only never updates",
            &create_only,
            observed(
                &create_only,
                fin.clone(),
                Some(fleet_cluster(json!({}))),
                None,
            ),
            vec![],
            Next::After(RESYNC),
        ),
        (
            "agent-initiated: the stub ends the plan, its answer is the next observation's",
            &agent,
            observed(&agent, json!({}), None, None),
            vec![
                "add finalizer cluster.x-k8s.io/Cluster c1".into(),
                format!(
                    "create or get {fleet} as {}",
                    names::REGISTRATION_FIELD_MANAGER
                ),
            ],
            Next::Echo,
        ),
        (
            "agent-initiated: our stub completed (no Event), the token created",
            &agent,
            observed(
                &agent,
                fin.clone(),
                Some(stub(names::REGISTRATION_FIELD_MANAGER)),
                None,
            ),
            vec![format!("apply {fleet}"), format!("create {token_id}")],
            Next::After(RESYNC),
        ),
        (
            "agent-initiated: the runtime extension's stub updated (an Event)",
            &agent,
            observed(
                &agent,
                fin.clone(),
                Some(stub(names::RUNTIME_EXTENSION_FIELD_MANAGER)),
                None,
            ),
            vec![
                format!("apply {fleet}"),
                "event Updated on Cluster c1".into(),
                format!("create {token_id}"),
            ],
            Next::After(RESYNC),
        ),
        (
            "agent-initiated: a token without its expiry is extended at once",
            &agent,
            observed(
                &agent,
                fin.clone(),
                Some(stub(names::REGISTRATION_FIELD_MANAGER)),
                Some(token(json!({}))),
            ),
            vec![
                format!("apply {fleet}"),
                format!("merge patch {token_id} {extension}"),
            ],
            Next::After(recheck),
        ),
        (
            "agent-initiated: a valid token is looked at when its renewal is due",
            &agent,
            observed(
                &agent,
                fin.clone(),
                Some(stub(names::REGISTRATION_FIELD_MANAGER)),
                Some(fresh.clone()),
            ),
            vec![format!("apply {fleet}")],
            Next::After(renew),
        ),
        (
            "agent-initiated: the bootstrap Secret follows a replaced token",
            &agent,
            with(
                observed(
                    &agent,
                    fin.clone(),
                    Some(stub(names::REGISTRATION_FIELD_MANAGER)),
                    Some(fresh.clone()),
                ),
                &|inputs| {
                    inputs.bootstrap = Bootstrap::Replace {
                        values: Box::new(values.clone()),
                        token_uid: "t2".into(),
                    }
                },
            ),
            vec![
                format!("apply {fleet}"),
                "modify /Secret c1-fleet-agent-bootstrap token values of t2".into(),
                "event BootstrapTokenReplaced on Cluster c1".into(),
            ],
            Next::After(renew),
        ),
        (
            "agent-initiated: a token Fleet has not issued yet is looked at soon",
            &agent,
            with(
                observed(
                    &agent,
                    fin.clone(),
                    Some(stub(names::REGISTRATION_FIELD_MANAGER)),
                    Some(fresh.clone()),
                ),
                &|inputs| inputs.bootstrap = Bootstrap::NotIssued,
            ),
            vec![format!("apply {fleet}")],
            Next::After(TOKEN_ISSUE_RETRY),
        ),
        (
            "agent-initiated and registered: no token is kept",
            &agent,
            observed(&agent, fin.clone(), Some(fleet_cluster(registered)), None),
            vec![],
            Next::After(RESYNC),
        ),
        (
            "invalid agent settings hold the Cluster, with a Warning on each carrier",
            &defaults,
            with(observed(&defaults, json!({}), None, None), &|inputs| {
                inputs.agent = Err(Held {
                    problems: held.problems.clone(),
                    classes: held.classes.clone(),
                })
            }),
            vec![
                "add finalizer cluster.x-k8s.io/Cluster c1".into(),
                format!("event {INVALID_REASON} on Cluster c1"),
                format!("event {INVALID_REASON} on ClusterClass k"),
            ],
            Next::After(RESYNC),
        ),
        (
            "an unreadable reference is reported before the Fleet Cluster is written",
            &defaults,
            with(observed(&defaults, fin.clone(), None, None), &|inputs| {
                inputs.unreadable = vec!["ControlPlane KubeadmControlPlane ns/c1 not found".into()]
            }),
            vec![
                "event TemplateValuesIncomplete on Cluster c1".into(),
                format!("apply {fleet}"),
            ],
            Next::After(RESYNC),
        ),
    ];
    for (name, config, observed, writes, then) in rows {
        let plan = plan(&observed, config).expect("plan");
        assert_eq!(describe(&plan), writes, "{name}");
        assert_eq!(plan.then, then, "{name}");
    }
}

/// A deleted Cluster whose workloads are removed first: nothing until its Fleet Cluster is
/// known, cleaned up at once when its agent never registered, drained once BeforeClusterDelete
/// started the removal, looked at again at the deadline.
#[test]
fn teardown_plans() {
    let on =
        config("runtimeExtension: {beforeClusterDelete: {removeWorkloads: true}}\ncluster: {}");
    let deleting = json!({"deletionTimestamp": "2026-01-01T00:00:00Z",
        "finalizers": [FINALIZER], "labels": {"env": "prod"}});
    let topology = json!({"topology": {"classRef": {"name": "quick-start"}, "version": "v1.33.1"}});
    let registered = |labels: Value| {
        fleet_cluster(
            json!({"metadata": {"name": "c1", "namespace": "ns", "resourceVersion": "9",
            "labels": labels}, "status": {"agent": {"lastSeen": "2026-01-01T00:05:00Z"}}}),
        )
    };
    let started = json!({names::TEARDOWN_LABEL: "true", "env": "prod"});
    let until_deadline = Next::After(Duration::from_secs(20 * 60));
    let capi = "cluster.x-k8s.io/Cluster c1";
    let fleet = "fleet.cattle.io/Cluster c1";
    type Row<'a> = (&'a str, Option<Arc<FleetCluster>>, Vec<String>, Next);
    let rows: Vec<Row> = vec![
        (
            "registered, removal not started: wait for the deadline",
            Some(registered(json!({"env": "prod"}))),
            vec![],
            until_deadline,
        ),
        (
            "removal started: the selection labels drained",
            Some(registered(started)),
            vec![format!(
                r#"merge patch {fleet} {{"metadata":{{"labels":{{"env":null}}}}}}"#
            )],
            until_deadline,
        ),
        (
            "never registered: cleaned up at once",
            Some(fleet_cluster(json!({}))),
            vec![
                format!("delete {fleet}"),
                "delete fleet.cattle.io/ClusterRegistrationToken c1 if it exists".into(),
                format!("remove finalizer {capi}"),
            ],
            Next::AwaitChange,
        ),
    ];
    for (name, live, writes, then) in rows {
        let observed = observed_with_spec(&on, deleting.clone(), topology.clone(), live, None);
        assert!(
            matches!(observed.decision, Decision::Teardown { .. }),
            "{name}"
        );
        let plan = plan(&observed, &on).expect("plan");
        assert_eq!(describe(&plan), writes, "{name}");
        assert_eq!(plan.then, then, "{name}");
    }
}

/// Rollout waves on the Fleet Cluster: variable labels, the wave, the hold and its message; the
/// hold's Events when it starts and ends; the soak's end as the next look; no write (and no Event)
/// when nothing changed.
#[test]
fn rollout_labels_holds_and_their_events() {
    let config = config(
        "cluster: {patchResource: true, variableLabels: [region], rollout: {waveVariable: wave, waves: [canary, rest], soak: 10m}}",
    );
    let fin = json!({"finalizers": [FINALIZER]});
    let spec = json!({"topology": {"classRef": {"name": "cls"}, "version": "v1.33.1", "variables": [
        {"name": "wave", "value": "rest"}, {"name": "region", "value": "eu west"}]}});
    let soak_until = now() + Duration::from_secs(300);
    let gates: crate::model::rollout::Gates = [(
        ("ns/cls".to_string(), "canary".to_string()),
        crate::model::rollout::WaveGate {
            soak_until: Some(soak_until),
            ..Default::default()
        },
    )]
    .into();
    let plan_with = |fleet: Option<Arc<FleetCluster>>, gates: &crate::model::rollout::Gates| {
        let mut o = observed_with_spec(&config, fin.clone(), spec.clone(), fleet, None);
        if let Some(inputs) = o.import.as_mut() {
            inputs.gates = gates.clone();
        }
        plan(&o, &config).expect("plan")
    };
    let held = plan_with(None, &gates);
    let Some(Write::Apply { body, .. }) = held
        .writes
        .iter()
        .find(|w| matches!(w, Write::Apply { .. }))
    else {
        panic!("{held:?}");
    };
    let labels = &body["metadata"]["labels"];
    assert_eq!(labels[names::ROLLOUT_WAVE_LABEL], "rest");
    assert_eq!(labels[names::ROLLOUT_HOLD_LABEL], "Soaking");
    assert!(
        labels
            .get("variable.fleet.addons.cluster.x-k8s.io/region")
            .is_none(),
        "not a label value"
    );
    assert_eq!(
        body["metadata"]["annotations"][names::ROLLOUT_HOLD_MESSAGE_ANNOTATION],
        "wave rest waits for canary: soaking until 2026-01-01T00:15:00Z"
    );
    assert_eq!(
        describe(&held),
        [
            "event RolloutLabelInvalid on Cluster c1",
            "event RolloutHeld on Cluster c1",
            "apply fleet.cattle.io/Cluster c1"
        ]
    );
    assert_eq!(
        held.then,
        Next::After(Duration::from_secs(301)),
        "looks again when the soak ends"
    );
    // As the cache shows it: nothing to write while the hold stays.
    let mut live = body.clone();
    live["metadata"]["managedFields"] = json!([{"manager": names::FIELD_MANAGER, "operation": "Apply",
        "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {
            "f:labels": {format!("f:{}", names::ROLLOUT_HOLD_LABEL): {}},
            "f:annotations": {format!("f:{}", names::ROLLOUT_HOLD_MESSAGE_ANNOTATION): {}}}}}]);
    let live = fleet_cluster(live);
    assert!(plan_with(Some(live.clone()), &gates).writes.is_empty());
    // The soak over: the hold label and message go, with an Event.
    let released = plan_with(Some(live), &Default::default());
    assert_eq!(
        describe(&released),
        [
            "event RolloutLabelInvalid on Cluster c1",
            "event RolloutReleased on Cluster c1",
            "apply fleet.cattle.io/Cluster c1",
            "event Updated on Cluster c1"
        ]
    );
    let Some(Write::Apply { body, .. }) = released.writes.get(2) else {
        panic!("{released:?}");
    };
    assert!(
        body["metadata"]["labels"]
            .get(names::ROLLOUT_HOLD_LABEL)
            .is_none()
    );
    assert_eq!(
        body["metadata"]["labels"][names::ROLLOUT_WAVE_LABEL],
        "rest"
    );
}

/// `hostNetwork` defaults to `true` only for a Cluster whose agent boots through the runtime
/// extension (agent-initiated, with the extension's mark or its class's `fleetAgent` variable);
/// a manager-initiated import, an adopted CAAPF Cluster or another agent-initiated one keeps
/// CAAPF's unset, as Fleet's agent namespace has no Pod Security label (issue #38 item 1).
#[test]
fn host_network_defaults_only_for_a_first_boot_through_the_extension() {
    let mark = json!({"metadata": {"name": "c1", "namespace": "ns", "resourceVersion": "9",
        "annotations": {(names::REGISTRATION_ANNOTATION): names::REGISTRATION_RUNTIME_EXTENSION}},
        "spec": {"clientID": "abc"}});
    let plain = json!({"metadata": {"name": "c1", "namespace": "ns", "resourceVersion": "9"},
        "spec": {"clientID": "abc"}});
    let variable = json!({"topology": {"classRef": {"name": "qs"}, "version": "v1.33.0",
        "variables": [{"name": crate::model::agent_bootstrap::FLEET_AGENT_VARIABLE, "value": {"enabled": true}}]}});
    let fin = json!({"finalizers": [FINALIZER]});
    let rows = [
        (
            "manager-initiated",
            "cluster: {patchResource: true}",
            json!({}),
            None,
            None,
        ),
        ("no FleetAddonConfig", "", json!({}), None, None),
        (
            "agent-initiated, no extension",
            "cluster: {agentInitiated: true, patchResource: true}",
            json!({}),
            Some(plain),
            None,
        ),
        (
            "prepared by BeforeClusterCreate",
            "cluster: {patchResource: true}",
            json!({}),
            Some(mark.clone()),
            Some(true),
        ),
        (
            "class with the fleetAgent variable",
            "cluster: {agentInitiated: true, patchResource: true}",
            variable,
            Some(
                json!({"metadata": {"name": "c1", "namespace": "ns", "resourceVersion": "9"}, "spec": {"clientID": "abc"}}),
            ),
            Some(true),
        ),
        (
            "set false by the user",
            "cluster: {hostNetwork: false, patchResource: true}",
            json!({}),
            Some(mark),
            Some(false),
        ),
    ];
    for (name, spec, cluster_spec, live, want) in rows {
        let config = match spec {
            "" => EffectiveConfig::default(),
            spec => config(spec),
        };
        let observed = observed_with_spec(
            &config,
            fin.clone(),
            cluster_spec,
            live.map(fleet_cluster),
            None,
        );
        let mut observed = observed;
        if name == "set false by the user"
            && let Some(inputs) = observed.import.as_mut()
        {
            inputs.agent = Ok(AgentSettings {
                host_network: Some(false),
                ..AgentSettings::default()
            });
        }
        let plan = plan(&observed, &config).expect("plan");
        let body = plan
            .writes
            .iter()
            .find_map(|w| match w {
                Write::Apply { body, .. } | Write::Create { body, .. }
                    if body["kind"] == "Cluster" =>
                {
                    Some(body.clone())
                }
                _ => None,
            })
            .unwrap_or_else(|| panic!("{name}: no Fleet Cluster apply in {:?}", describe(&plan)));
        assert_eq!(
            body["spec"].get("hostNetwork").and_then(Value::as_bool),
            want,
            "{name}"
        );
    }
}

/// A registered agent-initiated Cluster keeps its agent namespace, and gets no priorityClass it
/// had not at registration, with a Warning Event naming the field and the way out; before
/// registration, and for a manager-initiated Cluster, the change is written (issue #38 item 2).
#[test]
fn stranding_agent_changes_are_held_on_a_registered_agent_initiated_cluster() {
    let live = |registered: bool| {
        let mut value = json!({"metadata": {"name": "c1", "namespace": "ns", "resourceVersion": "9"},
            "spec": {"clientID": "abc", "agentNamespace": "old-agent"}});
        if registered {
            value["status"] = json!({"agent": {"lastSeen": "2026-01-01T00:05:00Z"}});
        }
        fleet_cluster(value)
    };
    let fin = json!({"finalizers": [FINALIZER]});
    let rows = [
        (
            "cluster: {agentInitiated: true, patchResource: true}",
            true,
            "old-agent",
            true,
        ),
        (
            "cluster: {agentInitiated: true, patchResource: true}",
            false,
            "new-agent",
            false,
        ),
        ("cluster: {patchResource: true}", true, "new-agent", false),
    ];
    for (spec, registered, namespace, held) in rows {
        let config = config(spec);
        let mut observed = observed(&config, fin.clone(), Some(live(registered)), None);
        if let Some(inputs) = observed.import.as_mut() {
            inputs.agent = Ok(serde_json::from_value(json!({"agentNamespace": "new-agent",
                "agentSchedulingCustomization": {"priorityClass": {"value": 1000}}}))
            .expect("settings"));
        }
        let plan = plan(&observed, &config).expect("plan");
        let body = plan
            .writes
            .iter()
            .find_map(|w| match w {
                Write::Apply { body, .. } if body["kind"] == "Cluster" => Some(body.clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("{spec} {registered}: {:?}", describe(&plan)));
        assert_eq!(
            body["spec"]["agentNamespace"], namespace,
            "{spec} {registered}"
        );
        assert_eq!(
            body["spec"]["agentSchedulingCustomization"]
                .get("priorityClass")
                .is_none(),
            held,
            "{spec} {registered}"
        );
        let notes: Vec<&str> = plan
            .writes
            .iter()
            .filter_map(|w| match w {
                Write::Event { reason, note, .. } if *reason == "AgentSettingHeld" => {
                    Some(note.as_str())
                }
                _ => None,
            })
            .collect();
        // The FleetReady condition shows it (fleet_health: reason AgentSettingsHeld).
        let mark = &body["metadata"]["annotations"][names::HELD_AGENT_SETTINGS_ANNOTATION];
        assert_eq!(
            mark.as_str() == Some(&notes.join("; ")),
            held,
            "{spec} {registered}: {mark}"
        );
        if held {
            assert_eq!(notes.len(), 2, "{notes:?}");
            assert!(
                notes[0].starts_with("agentNamespace \"new-agent\" is held at \"old-agent\"")
                    && notes[0].contains("keep agentNamespace \"old-agent\""),
                "{notes:?}"
            );
            assert!(
                notes[1].starts_with("agentSchedulingCustomization.priorityClass is held")
                    && notes[1].contains("fleet-agent-priority-class"),
                "{notes:?}"
            );
        } else {
            assert!(notes.is_empty(), "{notes:?}");
        }
    }
}

/// Beside Rancher Turtles (`model::turtles`): a Cluster Rancher deploys a Fleet agent of its own
/// to is left to it (our finalizer released, even while deleting, its Fleet Cluster neither
/// written nor deleted);
/// our finalizer removed by someone else is put back a bounded number of times, each removal
/// reported, then left off while the import goes on.
#[test]
fn turtles_conflicts() {
    use crate::model::turtles::{FinalizerMemory, Seen};
    let defaults = EffectiveConfig::default();
    let fin = json!({"finalizers": [FINALIZER]});
    let deleting = json!({"deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": [FINALIZER]});
    // Rancher's own agent (`ClusterView::rancher_fleet`, read by the Cluster controller).
    let rancher = |metadata: Value| {
        let live = json!({"metadata": {"name": "c1", "namespace": "ns", "resourceVersion": "9"}});
        let mut o = observed(&defaults, metadata, Some(fleet_cluster(live)), None);
        o.view.rancher_fleet = true;
        let live = o.fleet.as_deref().map(|f| &f.metadata);
        o.decision = import_decision(&o.view, &defaults, &StringMap::new(), live, now());
        o
    };
    let (fleet, capi) = ("fleet.cattle.io/Cluster c1", "cluster.x-k8s.io/Cluster c1");
    let removed = |removals, removed_now| Seen {
        finalizer: FinalizerMemory {
            on: false,
            removals,
        },
        removed_now,
    };
    let with = |mut o: Observed, seen: Seen| {
        o.conflicts = seen;
        o
    };
    let conflicting = |mut o: Observed, live: Value| {
        o.view.conflict = Some(live);
        o
    };
    let live_turtles = json!({"type": "FleetAddonConflict", "status": "True",
        "reason": "RancherFleetAgent", "observedGeneration": null});
    let rows: Vec<(&str, Observed, Vec<String>)> = vec![
        (
            "Rancher's own agent: released and reported",
            rancher(fin.clone()),
            vec![
                format!("remove finalizer {capi}"),
                format!("apply status {capi}"),
                "event RancherFleetAgent on Cluster c1".into(),
            ],
        ),
        (
            "Rancher's own agent, deleting: released, not deleted",
            rancher(deleting),
            vec![
                format!("remove finalizer {capi}"),
                format!("apply status {capi}"),
                "event RancherFleetAgent on Cluster c1".into(),
            ],
        ),
        (
            "Rancher's own agent, already reported: the condition is refreshed, no new Event",
            conflicting(rancher(json!({})), live_turtles),
            vec![format!("apply status {capi}")],
        ),
        (
            "first removal: put back, reported last (a failed write before it sends it on the retry)",
            observed(&defaults, json!({}), None, None),
            vec![
                format!("add finalizer {capi}"),
                format!("apply status {capi}"),
                format!("apply {fleet}"),
                "event FinalizerRemoved on Cluster c1".into(),
            ],
        ),
        (
            "fourth removal: left off, reported, the import goes on",
            observed(&defaults, json!({}), None, None),
            vec![
                format!("apply status {capi}"),
                format!("apply {fleet}"),
                "event FinalizerRemoved on Cluster c1".into(),
            ],
        ),
        (
            "given up: no new Event, no finalizer",
            observed(&defaults, json!({}), None, None),
            vec![format!("apply status {capi}"), format!("apply {fleet}")],
        ),
        (
            "no conflict (anymore): the condition goes",
            conflicting(
                observed(&defaults, fin.clone(), None, None),
                json!({"type": "FleetAddonConflict", "reason": "FinalizerRemoved"}),
            ),
            vec![format!("apply status {capi}"), format!("apply {fleet}")],
        ),
    ];
    let seen = [
        None,
        None,
        None,
        Some((1, true)),
        Some((4, true)),
        Some((4, false)),
        None,
    ];
    for ((name, o, want), seen) in rows.into_iter().zip(seen) {
        let o = match seen {
            Some((removals, now)) => with(o, removed(removals, now)),
            None => o,
        };
        let plan = plan(&o, &defaults).expect("plan");
        assert_eq!(describe(&plan), want, "{name}");
        if matches!(o.decision, Decision::Turtles) {
            assert!(
                !plan
                    .writes
                    .iter()
                    .any(|w| matches!(w, Write::Delete { .. } | Write::Apply { .. })),
                "{name}"
            );
        }
    }
}
