//! The import controllers against the sandbox API server: CAPI Cluster → Fleet Cluster,
//! ClusterClass → ClusterGroup, cross-namespace classes, selection changes, deletion,
//! restarts, steady state, adoption of CAAPF objects.

use crate::common;

use std::time::Duration;

use caapf::api::{BundleNamespaceMapping, CapiCluster, CapiClusterClass};
use caapf::names;
use common::{Harness, eventually, has_finalizer, has_label};
use fleet_api_rs::fleet_cluster::Cluster as FleetCluster;
use fleet_api_rs::fleet_cluster_registration_token::ClusterRegistrationToken;
use fleet_api_rs::fleet_clustergroup::ClusterGroup;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

fn plain_cluster(name: &str, labels: Value) -> Value {
    json!({
        "metadata": {
            "name": name, "labels": labels,
            "annotations": {"example.com/note": "hello", "kubectl.kubernetes.io/last-applied-configuration": "{}"}
        },
        "spec": {"clusterNetwork": {"pods": {"cidrBlocks": ["10.1.0.0/16"]}}}
    })
}

fn classy_cluster(name: &str, class: &str, class_namespace: &str) -> Value {
    json!({
        "metadata": {"name": name},
        "spec": {"topology": {
            "classRef": {"name": class, "namespace": class_namespace},
            "version": "v1.35.0",
            "variables": [{"name": "cni", "value": "calico"}]
        }}
    })
}

/// Whether the cross-namespace objects of class `classes/quick-start` for namespace `apps`
/// exist: (the ClusterGroup `apps/quick-start.classes`, the BundleNamespaceMapping
/// `classes/apps`).
async fn cross_namespace_objects(h: &Harness) -> (bool, bool) {
    let group = h.get::<ClusterGroup>("apps", "quick-start.classes").await;
    let mapping = h.get::<BundleNamespaceMapping>("classes", "apps").await;
    (group.is_some(), mapping.is_some())
}

/// Merges `labels` into the CAPI Cluster, waits until the Cluster controller has seen the
/// change, and returns the Fleet Cluster then.
async fn relabel_once_seen(
    h: &Harness,
    namespace: &str,
    name: &str,
    labels: Value,
) -> FleetCluster {
    // Counted before the change: the reconcile it causes can finish before a count taken after.
    let reconciles = h.reconciles("cluster");
    h.label_cluster(namespace, name, labels).await;
    h.wait_reconciled_since("change seen", "cluster", reconciles)
        .await;
    h.fleet_cluster(namespace, name).await.expect("fleet")
}

#[tokio::test]
async fn imports_an_initialized_cluster_with_caapf_shape() {
    let mut h = Harness::new().await;
    h.namespace("team-a", json!({})).await;
    h.cluster("team-a", plain_cluster("c1", json!({"env": "dev"})))
        .await;
    h.start().await;

    // Finalizer first; no Fleet Cluster until the control plane is initialized.
    h.wait_finalizer("finalizer on the waiting Cluster", "team-a", "c1", true)
        .await;
    assert!(h.fleet_cluster("team-a", "c1").await.is_none());

    h.initialize("team-a", "c1").await;
    let fleet = eventually("Fleet Cluster", || h.fleet_cluster("team-a", "c1")).await;
    assert_eq!(fleet.labels().get("env").map(String::as_str), Some("dev"));
    assert_eq!(
        fleet
            .annotations()
            .get("example.com/note")
            .map(String::as_str),
        Some("hello")
    );
    assert!(
        !fleet
            .annotations()
            .contains_key(names::LAST_APPLIED_ANNOTATION),
        "last-applied is never copied"
    );
    let owner = &fleet.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("Cluster", "c1")
    );
    assert_eq!(
        fleet.spec.kube_config_secret.as_deref(),
        Some("c1-kubeconfig")
    );
    assert_eq!(
        fleet.spec.agent_namespace.as_deref(),
        Some("fleet-addon-agent")
    );
    // A manager-initiated import: Fleet creates the agent namespace without Pod Security labels
    // (issue #38), so no host network by default.
    assert_eq!(fleet.spec.host_network, None);
    assert_eq!(fleet.spec.agent_tolerations.as_ref().map(Vec::len), Some(4));
    let values = fleet.spec.template_values.clone().unwrap_or_default();
    assert_eq!(
        values["Cluster"]["spec"]["clusterNetwork"]["pods"]["cidrBlocks"],
        json!(["10.1.0.0/16"])
    );
    assert!(values["Cluster"].get("status").is_none());
    assert!(
        values["Cluster"]["metadata"]
            .get("resourceVersion")
            .is_none()
    );

    let annotation = eventually("namespace annotation", || async {
        h.namespace_annotation("team-a").await
    })
    .await;
    assert_eq!(annotation, "true");
    h.stop().await;
}

#[tokio::test]
async fn steady_state_makes_no_writes_after_restart_and_on_resync() {
    let mut h = Harness::new().await;
    h.namespace("apps", json!({})).await;
    h.namespace("classes", json!({})).await;
    h.class("classes", "quick-start", json!({"team": "a"}))
        .await;
    for i in 0..5 {
        h.initialized_cluster(
            "apps",
            classy_cluster(&format!("c{i}"), "quick-start", "classes"),
        )
        .await;
    }
    h.flags.sync_period = Duration::from_millis(300);
    h.start().await;
    eventually(
        "5 Fleet Clusters, class group, cross-namespace objects",
        || async {
            let fleets = h.list::<FleetCluster>("apps").await;
            let (group, mapping) = cross_namespace_objects(&h).await;
            let class_group = h.get::<ClusterGroup>("classes", "quick-start").await;
            (fleets.len() == 5 && group && mapping && class_group.is_some()).then_some(())
        },
    )
    .await;
    h.stop().await;

    // A restart re-reads everything and writes nothing.
    h.sandbox.requests().reset();
    h.start().await;
    eventually(
        "every Cluster reconciled at least 3 times (restart + 2 resyncs)",
        || async {
            (h.reconciles("cluster") >= 15
                && h.reconciles("namespace") >= 2
                && h.reconciles("clusterclass") >= 1)
                .then_some(())
        },
    )
    .await;
    let writes = h.state_writes();
    assert!(writes.is_empty(), "steady state wrote: {writes:#?}");
    h.stop().await;
}

/// A namespace decides all its Clusters, so only a change of what a Cluster contributes to it
/// (imported or not, a ClusterClass from another namespace) reconciles it: Cluster API's status
/// writes do not.
#[tokio::test]
async fn cluster_status_writes_do_not_reconcile_the_namespace() {
    let mut h = Harness::new().await;
    h.namespace("apps", json!({})).await;
    h.config("cluster: {}").await;
    for i in 0..3 {
        h.initialized_cluster("apps", plain_cluster(&format!("c{i}"), json!({})))
            .await;
    }
    h.start().await;
    eventually("3 Fleet Clusters and the workspace annotation", || async {
        let fleets = h.list::<FleetCluster>("apps").await;
        let annotated = h.namespace_annotation("apps").await.is_some();
        (fleets.len() == 3 && annotated).then_some(())
    })
    .await;
    let before = h.reconciles("namespace");

    for k in 0..10 {
        let observed = h.reconciles("cluster");
        h.merge_cluster_status("apps", "c0", json!({"controlPlane": {"replicas": k}}))
            .await;
        h.wait_reconciled_since("the Cluster controller saw the write", "cluster", observed)
            .await;
    }
    // A change the namespace must see, after the status writes in the same feed: once it is
    // reconciled, the status writes were mapped too.
    h.delete_cluster("apps", "c2").await;
    h.wait_reconciled_since(
        "the namespace reconciled after the deletion",
        "namespace",
        before,
    )
    .await;
    h.wait_gone::<CapiCluster>("c2 gone", "apps", "c2").await;
    let after = h.reconciles("namespace") - before;
    assert!(
        after <= 4,
        "{after} namespace reconciles for 10 status writes and one deletion"
    );
    h.stop().await;
}

#[tokio::test]
async fn selection_changes_converge_both_ways() {
    let mut h = Harness::new().await;
    h.namespace("labelled", json!({})).await;
    h.namespace("team-x", json!({})).await;
    h.config("cluster: {selector: {matchLabels: {import: \"yes\"}}, patchResource: true, setOwnerReferences: true}")
        .await;
    h.initialized_cluster("labelled", plain_cluster("c1", json!({})))
        .await;
    h.initialized_cluster("team-x", plain_cluster("c2", json!({})))
        .await;
    h.start().await;

    // Not selected: untouched.
    eventually("manager reconciled both Clusters", || async {
        (h.reconciles("cluster") >= 2).then_some(())
    })
    .await;
    assert!(h.fleet_cluster("labelled", "c1").await.is_none());
    assert!(!has_finalizer(
        &h.get::<CapiCluster>("labelled", "c1").await.expect("c1")
    ));

    // Label added → imported.
    h.label_cluster("labelled", "c1", json!({"import": "yes"}))
        .await;
    eventually("c1 imported after labelling", || {
        h.fleet_cluster("labelled", "c1")
    })
    .await;
    // Label removed → released (finalizer gone), Fleet Cluster retained by default.
    h.label_cluster("labelled", "c1", json!({"import": null}))
        .await;
    h.wait_finalizer("c1 released", "labelled", "c1", false)
        .await;
    assert!(
        h.fleet_cluster("labelled", "c1").await.is_some(),
        "Retain keeps it"
    );

    // Namespace selector: relabelling the namespace selects c2, unlabelling releases it; with
    // deselectPolicy Delete its Fleet Cluster goes too.
    h.config("cluster: {namespaceSelector: {matchLabels: {fleet: \"on\"}}, patchResource: true, deselectPolicy: Delete}")
        .await;
    h.label_namespace("team-x", json!({"fleet": "on"})).await;
    eventually("c2 imported after labelling its namespace", || {
        h.fleet_cluster("team-x", "c2")
    })
    .await;
    h.label_namespace("team-x", json!({"fleet": null})).await;
    h.wait_gone::<FleetCluster>("c2 Fleet Cluster deleted on deselect", "team-x", "c2")
        .await;
    // The finalizer goes after the Fleet Cluster, in the same reconcile.
    h.wait_finalizer("c2 released", "team-x", "c2", false).await;

    // Regex rule: edited to match, then to not match.
    h.config(
        "cluster: {namespaceRegexes: [\"team-.*\"], patchResource: true, deselectPolicy: Delete}",
    )
    .await;
    eventually("c2 imported by regex", || h.fleet_cluster("team-x", "c2")).await;
    h.config(
        "cluster: {namespaceRegexes: [\"team\"], patchResource: true, deselectPolicy: Delete}",
    )
    .await;
    h.wait_gone::<FleetCluster>(
        "c2 released after the regex changed (regexes are anchored)",
        "team-x",
        "c2",
    )
    .await;

    // An invalid regex holds everything as it is.
    h.config("cluster: {namespaceRegexes: [\"team-.*\"], patchResource: true}")
        .await;
    eventually("c2 imported again", || h.fleet_cluster("team-x", "c2")).await;
    // Counted before the change: the reconcile it causes can finish before a count taken after.
    let before = h.reconciles("cluster");
    h.config(
        "cluster: {namespaceRegexes: [\"team-(\"], patchResource: true, deselectPolicy: Delete}",
    )
    .await;
    h.wait_reconciled_since("config change re-evaluated", "cluster", before)
        .await;
    assert!(
        h.fleet_cluster("team-x", "c2").await.is_some(),
        "invalid selection must not deselect"
    );
    assert!(has_finalizer(
        &h.get::<CapiCluster>("team-x", "c2").await.expect("c2")
    ));
    h.stop().await;
}

#[tokio::test]
async fn cluster_classes_and_cross_namespace_groups() {
    let mut h = Harness::new().await;
    for ns in ["classes", "apps", "other"] {
        h.namespace(ns, json!({})).await;
    }
    // Create-only for Fleet Clusters must not disable the shared objects (CAAPF bug 10).
    h.config("cluster: {applyClassGroup: true, patchResource: false}\nclusterClass: {patchResource: true}").await;
    h.class("classes", "quick-start", json!({"team": "a"}))
        .await;
    for (name, class_namespace) in [("a1", "classes"), ("a2", "classes"), ("local", "apps")] {
        h.initialized_cluster("apps", classy_cluster(name, "quick-start", class_namespace))
            .await;
    }
    h.start().await;

    let group = eventually("class ClusterGroup", || {
        h.get::<ClusterGroup>("classes", "quick-start")
    })
    .await;
    assert_eq!(group.labels().get("team").map(String::as_str), Some("a"));
    assert_eq!(
        group
            .spec
            .selector
            .as_ref()
            .and_then(|s| s.match_labels.clone()),
        Some(
            [
                (
                    names::CLUSTERCLASS_NAME_LABEL.to_string(),
                    "quick-start".to_string()
                ),
                (
                    names::CLUSTERCLASS_NAMESPACE_LABEL.to_string(),
                    "classes".to_string()
                ),
            ]
            .into()
        )
    );
    let cross = eventually("cross-namespace group", || {
        h.get::<ClusterGroup>("apps", "quick-start.classes")
    })
    .await;
    assert_eq!(cross.labels().get("team").map(String::as_str), Some("a"));
    let mapping = eventually("mapping", || {
        h.get::<BundleNamespaceMapping>("classes", "apps")
    })
    .await;
    assert_eq!(
        mapping.namespace_selector.and_then(|s| s.match_labels),
        Some(
            [(
                "kubernetes.io/metadata.name".to_string(),
                "apps".to_string()
            )]
            .into()
        )
    );
    // A class in the Cluster's own namespace needs no cross-namespace objects (CAAPF bug 9).
    assert!(
        h.get::<ClusterGroup>("apps", "quick-start.apps")
            .await
            .is_none()
    );
    assert!(
        h.get::<BundleNamespaceMapping>("apps", "apps")
            .await
            .is_none()
    );
    let fleet = eventually("Fleet Cluster a1", || h.fleet_cluster("apps", "a1")).await;
    assert_eq!(
        fleet
            .labels()
            .get(names::CLUSTERCLASS_NAMESPACE_LABEL)
            .map(String::as_str),
        Some("classes")
    );
    assert_eq!(
        fleet.spec.template_values.clone().unwrap_or_default()["Variables"],
        json!({"cni": "calico"})
    );

    // Class labels are kept in sync, stale ones removed.
    let classes: Api<CapiClusterClass> = Api::namespaced(h.client.clone(), "classes");
    classes
        .patch(
            "quick-start",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": null, "tier": "gold"}}})),
        )
        .await
        .expect("relabel class");
    eventually("class labels synced to both groups", || async {
        let group = h.get::<ClusterGroup>("classes", "quick-start").await?;
        let cross = h.get::<ClusterGroup>("apps", "quick-start.classes").await?;
        let ok = |g: &ClusterGroup| {
            g.labels().get("tier").is_some_and(|v| v == "gold") && !g.labels().contains_key("team")
        };
        (ok(&group) && ok(&cross)).then_some(())
    })
    .await;

    // Deleted shared objects are recreated.
    Api::<ClusterGroup>::namespaced(h.client.clone(), "apps")
        .delete("quick-start.classes", &DeleteParams::default())
        .await
        .expect("delete cross group");
    Api::<BundleNamespaceMapping>::namespaced(h.client.clone(), "classes")
        .delete("apps", &DeleteParams::default())
        .await
        .expect("delete mapping");
    eventually("shared objects recreated", || async {
        let (group, mapping) = cross_namespace_objects(&h).await;
        (group && mapping).then_some(())
    })
    .await;

    // Deleting one user keeps them (CAAPF bug 7); deleting the last removes them.
    h.delete_cluster("apps", "a1").await;
    h.wait_gone::<CapiCluster>("a1 gone", "apps", "a1").await;
    let (group, mapping) = cross_namespace_objects(&h).await;
    assert!(group);
    assert!(mapping);
    h.delete_cluster("apps", "a2").await;
    eventually("shared objects gone with the last user", || async {
        let (group, mapping) = cross_namespace_objects(&h).await;
        (!group && !mapping).then_some(())
    })
    .await;

    // Deleting the class removes its group.
    classes
        .delete("quick-start", &DeleteParams::default())
        .await
        .expect("delete class");
    h.wait_gone::<ClusterGroup>("class group gone", "classes", "quick-start")
        .await;
    h.stop().await;
}

#[tokio::test]
async fn deletion_is_never_held() {
    let mut h = Harness::new().await;
    h.namespace("ns", json!({})).await;
    h.config("cluster: {selector: {matchLabels: {import: \"yes\"}}, patchResource: true}")
        .await;
    for name in ["selected", "later-unselected"] {
        h.initialized_cluster("ns", plain_cluster(name, json!({"import": "yes"})))
            .await;
    }
    h.cluster("ns", plain_cluster("never", json!({}))).await;
    h.start().await;
    eventually("both selected Clusters imported", || async {
        let a = h.fleet_cluster("ns", "selected").await;
        let b = h.fleet_cluster("ns", "later-unselected").await;
        (a.is_some() && b.is_some()).then_some(())
    })
    .await;

    // A selected Cluster: its Fleet Cluster is owned, so left to garbage collection.
    h.delete_cluster("ns", "selected").await;
    // Config turns invalid: deletion must still complete.
    h.config("cluster: {namespaceRegexes: [\"(\"], patchResource: true}")
        .await;
    h.delete_cluster("ns", "later-unselected").await;
    h.delete_cluster("ns", "never").await;
    eventually("all three Clusters gone", || async {
        let left = h.list::<CapiCluster>("ns").await;
        left.is_empty().then_some(())
    })
    .await;
    // Not owned here (setOwnerReferences is off): cleanup deleted them, even when its cache had
    // not yet seen them.
    eventually("Fleet Clusters deleted", || async {
        h.list::<FleetCluster>("ns").await.is_empty().then_some(())
    })
    .await;
    h.stop().await;

    // Without the manager, nothing of ours holds a deletion either once released.
    h.config("cluster: {patchResource: true}").await;
    h.cluster("ns", plain_cluster("orphan", json!({}))).await;
    h.start().await;
    h.wait_finalizer("finalizer added", "ns", "orphan", true)
        .await;
    // Import disabled: the finalizer is removed from every Cluster.
    h.config("{}").await;
    h.wait_finalizer(
        "finalizer removed when import is disabled",
        "ns",
        "orphan",
        false,
    )
    .await;
    h.stop().await;
}

#[tokio::test]
async fn restart_mid_import_converges_without_duplicates() {
    let mut h = Harness::new().await;
    h.namespace("fleet", json!({})).await;
    for i in 0..30 {
        h.initialized_cluster("fleet", plain_cluster(&format!("c{i:02}"), json!({})))
            .await;
    }
    h.start().await;
    eventually("import under way", || async {
        (!h.list::<FleetCluster>("fleet").await.is_empty()).then_some(())
    })
    .await;
    h.stop().await;
    h.start().await;
    eventually("all 30 imported", || async {
        (h.list::<FleetCluster>("fleet").await.len() == 30).then_some(())
    })
    .await;
    let names: std::collections::BTreeSet<String> = h
        .list::<FleetCluster>("fleet")
        .await
        .iter()
        .map(|c| c.name_any())
        .collect();
    assert_eq!(names.len(), 30);
    assert!(names.iter().all(|n| n.starts_with('c')));
    h.stop().await;
}

#[tokio::test]
async fn paused_clusters_and_watch_filter_are_left_alone() {
    let mut h = Harness::new().await;
    h.namespace("ns", json!({})).await;
    let mut paused = plain_cluster("paused", json!({"cluster.x-k8s.io/watch-filter": "mine"}));
    paused["spec"]["paused"] = json!(true);
    let mut annotated = plain_cluster(
        "annotated",
        json!({"cluster.x-k8s.io/watch-filter": "mine"}),
    );
    annotated["metadata"]["annotations"]["cluster.x-k8s.io/paused"] = json!("");
    let other_filter = plain_cluster(
        "other-filter",
        json!({"cluster.x-k8s.io/watch-filter": "theirs"}),
    );
    let mine = plain_cluster("mine", json!({"cluster.x-k8s.io/watch-filter": "mine"}));
    for cluster in [paused, annotated, other_filter, mine] {
        h.initialized_cluster("ns", cluster).await;
    }
    h.flags.watch_filter = Some("mine".into());
    h.start().await;
    eventually("the filtered, unpaused Cluster is imported", || {
        h.fleet_cluster("ns", "mine")
    })
    .await;
    for name in ["paused", "annotated", "other-filter"] {
        let cluster = h.get::<CapiCluster>("ns", name).await.expect("cluster");
        assert!(!has_finalizer(&cluster), "{name} must not be touched");
        assert!(
            h.fleet_cluster("ns", name).await.is_none(),
            "{name} must not be imported"
        );
    }
    // Unpausing imports it.
    h.merge_cluster("ns", "paused", json!({"spec": {"paused": false}}))
        .await;
    eventually("unpaused Cluster imported", || {
        h.fleet_cluster("ns", "paused")
    })
    .await;
    h.stop().await;
}

#[tokio::test]
async fn agent_initiated_client_id_is_stable_and_token_created() {
    let mut h = Harness::new().await;
    h.namespace("edge", json!({})).await;
    h.config("cluster: {agentInitiatedSelector: {matchLabels: {network: nat}}, patchResource: true, registrationTokenTTL: 2h}").await;
    // Agent-initiated Clusters do not wait for the control plane.
    h.cluster("edge", plain_cluster("nat", json!({"network": "nat"})))
        .await;
    h.start().await;
    let fleet = eventually("agent-initiated Fleet Cluster", || {
        h.fleet_cluster("edge", "nat")
    })
    .await;
    let client_id = fleet.spec.client_id.clone().expect("client ID");
    assert_eq!(client_id.len(), 64);
    assert!(fleet.spec.kube_config_secret.is_none());
    let token = eventually("registration token", || {
        h.get::<ClusterRegistrationToken>("edge", "nat")
    })
    .await;
    assert_eq!(token.spec.ttl.as_deref(), Some("2h"));

    // Other changes and a restart keep the client ID.
    h.label_cluster("edge", "nat", json!({"extra": "1"})).await;
    h.wait_fleet_cluster("label propagated", "edge", "nat", |c| {
        c.labels().contains_key("extra")
    })
    .await;
    h.stop().await;
    h.start().await;
    h.label_cluster("edge", "nat", json!({"extra": "2"})).await;
    let fleet = h
        .wait_fleet_cluster("label propagated after restart", "edge", "nat", |c| {
            has_label(c, "extra", "2")
        })
        .await;
    assert_eq!(fleet.spec.client_id.as_deref(), Some(client_id.as_str()));
    h.stop().await;
}

#[tokio::test]
async fn create_only_recreates_but_never_updates() {
    let mut h = Harness::new().await;
    h.namespace("ns", json!({})).await;
    h.config("cluster: {patchResource: false}").await;
    h.initialized_cluster("ns", plain_cluster("c1", json!({"v": "1"})))
        .await;
    h.start().await;
    eventually("created", || h.fleet_cluster("ns", "c1")).await;
    let fleet = relabel_once_seen(&h, "ns", "c1", json!({"v": "2"})).await;
    assert_eq!(
        fleet.labels().get("v").map(String::as_str),
        Some("1"),
        "never updated"
    );
    Api::<FleetCluster>::namespaced(h.client.clone(), "ns")
        .delete("c1", &DeleteParams::default())
        .await
        .expect("delete");
    let fleet = h
        .wait_fleet_cluster("recreated", "ns", "c1", |c| has_label(c, "v", "2"))
        .await;
    assert!(fleet.metadata.deletion_timestamp.is_none());
    h.stop().await;
}

#[tokio::test]
async fn template_values_follow_referenced_objects() {
    let mut h = Harness::new().await;
    h.namespace("ns", json!({})).await;
    let cluster = h
        .cluster(
            "ns",
            json!({
                "metadata": {"name": "c1"},
                "spec": {
                    "controlPlaneRef": {"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": "c1-cp"},
                    "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerCluster", "name": "c1-missing"}
                }
            }),
        )
        .await;
    let owner = json!([{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "c1", "uid": cluster.uid()}]);
    let kcp = kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
        "controlplane.cluster.x-k8s.io",
        "v1beta2",
        "KubeadmControlPlane",
    ));
    let kcps: Api<kube::core::DynamicObject> = Api::namespaced_with(h.client.clone(), "ns", &kcp);
    let object: kube::core::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlane",
        "metadata": {"name": "c1-cp", "namespace": "ns", "ownerReferences": owner},
        "spec": {"replicas": 1, "version": "v1.35.0"}
    }))
    .expect("kcp");
    kcps.create(&PostParams::default(), &object)
        .await
        .expect("create kcp");
    h.initialize("ns", "c1").await;
    h.start().await;

    let fleet = h
        .wait_fleet_cluster("Fleet Cluster with ControlPlane values", "ns", "c1", |c| {
            c.spec
                .template_values
                .as_ref()
                .is_some_and(|v| v.contains_key("ControlPlane"))
        })
        .await;
    let values = fleet.spec.template_values.expect("values");
    assert_eq!(values["ControlPlane"]["spec"]["replicas"], json!(1));
    assert!(
        !values.contains_key("InfrastructureCluster"),
        "missing object left out"
    );
    assert!(values.contains_key("Cluster"));

    // A spec change of the control plane is propagated; a status change is not a write.
    kcps.patch(
        "c1-cp",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 3}})),
    )
    .await
    .expect("scale kcp");
    h.wait_fleet_cluster("ControlPlane values updated", "ns", "c1", |c| {
        c.spec
            .template_values
            .as_ref()
            .is_some_and(|v| v["ControlPlane"]["spec"]["replicas"] == json!(3))
    })
    .await;
    h.sandbox.requests().reset();
    kcps.patch_status(
        "c1-cp",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"ready": true}})),
    )
    .await
    .expect("kcp status");
    // A status change of the Cluster itself reconciles it, and writes nothing either.
    let before = h.reconciles("cluster");
    h.merge_cluster_status("ns", "c1", json!({"phase": "Provisioned"}))
        .await;
    h.wait_reconciled_since("status change reconciled", "cluster", before)
        .await;
    let writes: Vec<String> = h
        .state_writes()
        .into_iter()
        .filter(|w| !w.contains("/status ") && !w.contains("kubeadmcontrolplanes"))
        .collect();
    assert!(writes.is_empty(), "values churned: {writes:?}");

    // The missing reference was reported as an Event on the CAPI Cluster.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(h.client.clone(), "ns");
    let reported = events
        .list(&Default::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .any(|e| e.reason.as_deref() == Some("TemplateValuesIncomplete"));
    assert!(reported, "missing InfrastructureCluster reported");
    h.stop().await;
}

#[tokio::test]
async fn status_counts_selected_imported_waiting() {
    let mut h = Harness::new().await;
    h.namespace("ns", json!({})).await;
    h.config("cluster: {selector: {matchLabels: {import: \"yes\"}}, patchResource: true}")
        .await;
    h.initialized_cluster("ns", plain_cluster("a", json!({"import": "yes"})))
        .await;
    h.cluster("ns", plain_cluster("b", json!({"import": "yes"})))
        .await;
    h.cluster("ns", plain_cluster("c", json!({}))).await;
    h.start().await;
    eventually("status.clusters", || async {
        let counts = h.addon_config().await?.status?.clusters?;
        (counts.selected == 2 && counts.imported == 1 && counts.waiting == 1).then_some(())
    })
    .await;
    h.stop().await;
}

/// Server-side applies `body` (its own kind, namespace and name) as field manager `manager`.
async fn apply_as<K>(h: &Harness, manager: &str, body: &Value) -> K
where
    K: common::Namespaced,
{
    let metadata = &body["metadata"];
    let name = metadata["name"].as_str().expect("name");
    Api::<K>::namespaced(
        h.client.clone(),
        metadata["namespace"].as_str().expect("namespace"),
    )
    .patch(name, &PatchParams::apply(manager), &Patch::Apply(body))
    .await
    .unwrap_or_else(|e| panic!("applying CAAPF's {} {name}: {e}", body["kind"]))
}

/// Objects CAAPF created (same names, its field managers, its quirks) are adopted in place.
#[tokio::test]
async fn caapf_objects_are_adopted_in_place() {
    let mut h = Harness::new().await;
    for ns in ["apps", "classes"] {
        h.namespace(ns, json!({})).await;
    }
    let class = h.class("classes", "quick-start", json!({})).await;
    h.set_class_finalizers("classes", "quick-start", &[names::FINALIZER])
        .await;
    let cluster = h
        .cluster("apps", classy_cluster("c1", "quick-start", "classes"))
        .await;
    h.initialize("apps", "c1").await;
    h.merge_cluster(
        "apps",
        "c1",
        json!({"metadata": {"finalizers": [names::FINALIZER]}}),
    )
    .await;

    // What CAAPF left: a Fleet Cluster applied (unforced) by its manager with a random client ID
    // and the last-applied annotation, a class group with its legacy finalizer, a cross-namespace
    // group owned by the Cluster, and an unlabelled mapping.
    let owner = json!([{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "c1", "uid": cluster.uid()}]);
    let class_labels = json!({names::CLUSTERCLASS_NAME_LABEL: "quick-start", names::CLUSTERCLASS_NAMESPACE_LABEL: "classes"});
    let fleet_body = json!({
        "apiVersion": "fleet.cattle.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "c1", "namespace": "apps", "ownerReferences": owner,
                     "annotations": {names::LAST_APPLIED_ANNOTATION: "{}"}},
        "spec": {"kubeConfigSecret": "c1-kubeconfig", "agentNamespace": "fleet-addon-agent",
                 "templateValues": {"Cluster": {"metadata": {"uid": "stale", "generation": 7}}}}
    });
    let caapf_fleet: FleetCluster = apply_as(&h, names::FIELD_MANAGER, &fleet_body).await;
    let group_body = json!({
        "apiVersion": "fleet.cattle.io/v1alpha1", "kind": "ClusterGroup",
        "metadata": {"name": "quick-start", "namespace": "classes", "finalizers": [names::FINALIZER],
                     "labels": class_labels,
                     "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "ClusterClass", "name": "quick-start", "uid": class.uid()}]},
        "spec": {"selector": {"matchLabels": class_labels}}
    });
    let _: ClusterGroup = apply_as(&h, names::FIELD_MANAGER, &group_body).await;
    let cross_body = json!({
        "apiVersion": "fleet.cattle.io/v1alpha1", "kind": "ClusterGroup",
        "metadata": {"name": "quick-start.classes", "namespace": "apps", "ownerReferences": owner,
                     "labels": class_labels},
        "spec": {"selector": {"matchLabels": class_labels}}
    });
    let caapf_cross: ClusterGroup =
        apply_as(&h, "cluster-c1-addon-provider-fleet", &cross_body).await;
    let mapping_body = json!({
        "apiVersion": "fleet.cattle.io/v1alpha1", "kind": "BundleNamespaceMapping",
        "metadata": {"name": "apps", "namespace": "classes"},
        "bundleSelector": {}, "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "apps"}}
    });
    let caapf_mapping: BundleNamespaceMapping =
        apply_as(&h, "cluster-c1-addon-provider-fleet", &mapping_body).await;

    h.start().await;
    let fleet = h
        .wait_fleet_cluster(
            "Fleet Cluster adopted and brought to the desired state",
            "apps",
            "c1",
            |c| {
                !c.annotations().contains_key(names::LAST_APPLIED_ANNOTATION)
                    && c.spec
                        .template_values
                        .as_ref()
                        .is_some_and(|v| v["Cluster"]["metadata"].get("uid").is_none())
                    && c.labels().contains_key(names::CLUSTERCLASS_NAME_LABEL)
            },
        )
        .await;
    assert_eq!(fleet.uid(), caapf_fleet.uid(), "adopted, not re-created");
    eventually("legacy finalizers removed from class and group", || async {
        let class = h.get::<CapiClusterClass>("classes", "quick-start").await?;
        let group = h.get::<ClusterGroup>("classes", "quick-start").await?;
        (!has_finalizer(&class) && !has_finalizer(&group)).then_some(())
    })
    .await;
    let cross = eventually(
        "cross-namespace group adopted without owner references",
        || async {
            h.get::<ClusterGroup>("apps", "quick-start.classes")
                .await
                .filter(|g| g.owner_references().is_empty())
        },
    )
    .await;
    assert_eq!(cross.uid(), caapf_cross.uid());
    let mapping = eventually("mapping adopted (labelled ours)", || async {
        h.get::<BundleNamespaceMapping>("classes", "apps")
            .await
            .filter(|m| m.labels().contains_key(names::MANAGED_LABEL))
    })
    .await;
    assert_eq!(mapping.metadata.uid, caapf_mapping.metadata.uid);
    h.stop().await;
}

/// CAAPF's default agent tolerations (research caapf-spec.md §2.4): `not-ready` with
/// `NoSchedule`, and no control-plane toleration.
fn caapf_tolerations() -> Value {
    json!([
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "node.cluster.x-k8s.io/uninitialized", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "node.cloudprovider.kubernetes.io/uninitialized", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
    ])
}

/// What a CAAPF user's Fleet Clusters go through when this provider takes over (docs/migration.md
/// "What changes on adopted Fleet Clusters"): with CAAPF's FleetAddonConfig as it was, the agent
/// tolerations change (the new defaults; `hostNetwork` stays unset, issue #38), which Fleet answers with one
/// agent redeploy (rancher/fleet v0.16.1 `manageagent.go` `updateClusterStatus` hashes them);
/// with the settings the migration guide pins, they stay what Fleet hashed (an absent
/// `hostNetwork` and `false` are one value to Fleet: `cmp.Or(spec.HostNetwork, false)`).
#[tokio::test]
async fn adopted_agent_settings_change_once_unless_pinned() {
    let pinned = format!(
        "cluster: {{patchResource: true, hostNetwork: false, agentTolerations: {}}}",
        caapf_tolerations()
    );
    let new_defaults = json!([
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists"},
        {"effect": "NoSchedule", "key": "node.cluster.x-k8s.io/uninitialized", "operator": "Exists"},
        {"effect": "NoSchedule", "key": "node.cloudprovider.kubernetes.io/uninitialized", "operator": "Equal", "value": "true"},
        {"effect": "NoSchedule", "key": "node-role.kubernetes.io/control-plane", "operator": "Exists"},
    ]);
    // (FleetAddonConfig spec, tolerations after the takeover, effective hostNetwork after it)
    let cases = [
        (
            "cluster: {patchResource: true}".to_string(),
            new_defaults,
            false,
        ),
        (pinned, caapf_tolerations(), false),
    ];
    for (config, tolerations, host_network) in cases {
        let mut h = Harness::new().await;
        h.namespace("apps", json!({})).await;
        h.config(&config).await;
        h.importable_cluster("apps", "c1").await;
        // What CAAPF wrote with a FleetAddonConfig without hostNetwork and agentTolerations.
        let caapf_fleet: FleetCluster = apply_as(
            &h,
            names::FIELD_MANAGER,
            &json!({
                "apiVersion": "fleet.cattle.io/v1alpha1", "kind": "Cluster",
                "metadata": {"name": "c1", "namespace": "apps"},
                "spec": {"kubeConfigSecret": "c1-kubeconfig", "agentNamespace": "fleet-addon-agent",
                         "agentTolerations": caapf_tolerations(),
                         "templateValues": {"Cluster": {"metadata": {"uid": "stale"}}}}
            }),
        )
        .await;
        h.start().await;
        let fleet = h
            .wait_fleet_cluster("taken over", "apps", "c1", |c| {
                c.spec
                    .template_values
                    .as_ref()
                    .is_some_and(|v| v["Cluster"]["metadata"].get("uid").is_none())
            })
            .await;
        assert_eq!(fleet.uid(), caapf_fleet.uid(), "{config}");
        let spec = serde_json::to_value(&fleet.spec).expect("json");
        assert_eq!(spec["agentTolerations"], tolerations, "{config}");
        assert_eq!(
            spec["hostNetwork"].as_bool().unwrap_or(false),
            host_network,
            "{config}"
        );
        assert_eq!(spec["agentNamespace"], "fleet-addon-agent", "{config}");
        assert!(spec.get("agentEnvVars").is_none(), "{config}");
        h.stop().await;
    }
}

/// `caapf cleanup` removes every finalizer of ours, so uninstalling never leaves a hang.
#[tokio::test]
async fn cleanup_subcommand_removes_every_finalizer() {
    let mut h = Harness::new().await;
    h.namespace("a", json!({})).await;
    h.namespace("b", json!({})).await;
    h.class("a", "cc", json!({})).await;
    h.set_class_finalizers("a", "cc", &[names::FINALIZER, "other/keep"])
        .await;
    for (ns, name) in [("a", "c1"), ("b", "c2")] {
        h.initialized_cluster(ns, plain_cluster(name, json!({})))
            .await;
    }
    h.start().await;
    eventually("finalizers on both Clusters", || async {
        let c1 = h.get::<CapiCluster>("a", "c1").await?;
        let c2 = h.get::<CapiCluster>("b", "c2").await?;
        (has_finalizer(&c1) && has_finalizer(&c2)).then_some(())
    })
    .await;
    h.stop().await;
    // Re-add the class finalizer the manager removed, as an old CAAPF would have left it.
    h.set_class_finalizers("a", "cc", &[names::FINALIZER, "other/keep"])
        .await;

    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    h.sandbox.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_caapf"))
        .arg("cleanup")
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .await
        .expect("caapf cleanup runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains(
            "removed the finalizer from 2 Cluster(s), 1 ClusterClass(es), 0 ClusterGroup(s)"
        ),
        "{stdout}"
    );
    for (ns, name) in [("a", "c1"), ("b", "c2")] {
        assert!(!has_finalizer(
            &h.get::<CapiCluster>(ns, name).await.expect("cluster")
        ));
    }
    let class = h.get::<CapiClusterClass>("a", "cc").await.expect("class");
    assert_eq!(class.finalizers(), ["other/keep"], "other finalizers stay");
    // And deleting now completes without the manager.
    h.delete_cluster("a", "c1").await;
    h.wait_gone::<CapiCluster>("deleted", "a", "c1").await;
}

/// A failing write is retried with backoff (a handful of attempts, not a hot loop) and the
/// Cluster converges once the API server recovers.
#[tokio::test]
async fn failing_writes_back_off_and_recover() {
    let mut h = Harness::new().await;
    h.namespace("ns", json!({})).await;
    h.initialized_cluster("ns", plain_cluster("c1", json!({})))
        .await;
    let mut rule = kube_sandbox::FaultRule::fail(kube_sandbox::FaultTarget::Writes, 1.0, 500)
        .for_resource("clusters");
    rule.verbs = Some(vec!["APPLY".into()]);
    h.sandbox.set_faults(kube_sandbox::FaultConfig {
        rules: vec![rule],
        ..Default::default()
    });
    h.start().await;
    let errors = || {
        h.manager.as_ref().map_or(0, |m| {
            m.ctx
                .metrics
                .reconcile_errors
                .get_or_create(&caapf::metrics::ErrorLabels {
                    controller: "cluster",
                    error: "server_error",
                })
                .get()
        })
    };
    eventually("a failed Fleet Cluster apply", || async {
        (errors() >= 1).then_some(())
    })
    .await;
    h.sandbox.clear_faults();
    eventually("converged after the API server recovered", || {
        h.fleet_cluster("ns", "c1")
    })
    .await;
    let applies = h.sandbox.requests().count(|r| {
        r.verb == kube_sandbox::Verb::Apply
            && r.resource == "clusters"
            && r.group == "fleet.cattle.io"
    });
    assert!(
        applies <= 4,
        "{applies} apply attempts: retries must back off"
    );
    h.stop().await;
}

/// A Fleet Cluster first created by the runtime extension (a minimal POST with its client ID
/// and mark) keeps that client ID, gets everything else from the import controller, and the
/// controller can still remove a label later: the first creator co-owns nothing else.
#[tokio::test]
async fn runtime_extension_stub_is_completed_and_never_pins_fields() {
    // Not agent-initiated by configuration: the mark alone makes it so (and it does not wait for
    // the control plane).
    let mut h = Harness::new().await;
    let fleet = start_on_hook_stub(&mut h, None, "stub completed by the import controller").await;
    assert_eq!(fleet.spec.client_id.as_deref(), Some("from-the-hook"));
    assert!(fleet.spec.kube_config_secret.is_none());
    assert_eq!(
        fleet.spec.agent_namespace.as_deref(),
        Some("fleet-addon-agent")
    );
    h.label_cluster("edge", "c1", json!({"team": null})).await;
    let fleet = h
        .wait_fleet_cluster(
            "label removal reaches the Fleet Cluster",
            "edge",
            "c1",
            |c| !c.labels().contains_key("team"),
        )
        .await;
    assert_eq!(fleet.spec.client_id.as_deref(), Some("from-the-hook"));
    assert_eq!(
        fleet
            .annotations()
            .get(names::REGISTRATION_ANNOTATION)
            .map(String::as_str),
        Some(names::REGISTRATION_RUNTIME_EXTENSION)
    );
    h.stop().await;
}

/// Create-only (`patchResource: false`) completes a registration stub (here BeforeClusterCreate's)
/// once, and never updates the completed Fleet Cluster afterwards.
#[tokio::test]
async fn create_only_completes_a_registration_stub_once() {
    let mut h = Harness::new().await;
    let fleet = start_on_hook_stub(
        &mut h,
        Some("cluster: {patchResource: false}"),
        "stub completed although create-only",
    )
    .await;
    assert_eq!(fleet.spec.client_id.as_deref(), Some("from-the-hook"));
    assert_eq!(
        fleet.spec.agent_namespace.as_deref(),
        Some("fleet-addon-agent")
    );
    assert!(fleet.spec.template_values.is_some(), "templateValues set");

    // Completed once: from now on create-only holds.
    let fleet = relabel_once_seen(&h, "edge", "c1", json!({"team": "b"})).await;
    assert_eq!(
        fleet.labels().get("team").map(String::as_str),
        Some("a"),
        "never updated after completion"
    );
    h.stop().await;
}

/// Namespace `edge`, the FleetAddonConfig `config` (if any), a CAPI Cluster `edge/c1` labelled
/// `team: a` (its control plane not initialized) and its registration stub; starts the manager
/// and waits (`what`) until the stub carries the label.
async fn start_on_hook_stub(h: &mut Harness, config: Option<&str>, what: &str) -> FleetCluster {
    h.namespace("edge", json!({})).await;
    if let Some(config) = config {
        h.config(config).await;
    }
    h.cluster("edge", plain_cluster("c1", json!({"team": "a"})))
        .await;
    create_hook_stub(h, "edge", "c1").await;
    h.start().await;
    h.wait_fleet_cluster(what, "edge", "c1", |c| has_label(c, "team", "a"))
        .await
}

/// The registration stub BeforeClusterCreate creates (client ID `from-the-hook`, its field manager).
async fn create_hook_stub(h: &Harness, namespace: &str, name: &str) {
    let stub: FleetCluster = serde_json::from_value(json!({
        "apiVersion": "fleet.cattle.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": name, "namespace": namespace,
                     "annotations": {names::REGISTRATION_ANNOTATION: names::REGISTRATION_RUNTIME_EXTENSION}},
        "spec": {"clientID": "from-the-hook"}
    }))
    .expect("stub");
    Api::<FleetCluster>::namespaced(h.client.clone(), namespace)
        .create(
            &PostParams {
                field_manager: Some(names::RUNTIME_EXTENSION_FIELD_MANAGER.into()),
                ..Default::default()
            },
            &stub,
        )
        .await
        .expect("stub created");
}

/// Plays Fleet issuing the registration token `name` (as its clusterregistrationtoken handler
/// does: the values Secret, then `status.secretName`) with `token` as its value.
async fn issue_token(h: &Harness, namespace: &str, name: &str, token: &str) {
    let secrets: Api<Secret> = Api::namespaced(h.client.clone(), namespace);
    let _ = secrets.delete(name, &DeleteParams::default()).await;
    let values = format!(
        "clusterNamespace: {namespace}\napiServerURL: https://fleet.example.com:6443\napiServerCA: |\n  -----BEGIN CERTIFICATE-----\n  MIIB\n  -----END CERTIFICATE-----\ntoken: {token}\nsystemRegistrationNamespace: cattle-fleet-clusters-system\ntokenName: {name}\n"
    );
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace},
        "type": "fleet.cattle.io/cluster-registration-values",
        "stringData": {"values": values},
    }))
    .expect("values secret");
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("values secret");
    Api::<ClusterRegistrationToken>::namespaced(h.client.clone(), namespace)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"secretName": name}})),
        )
        .await
        .expect("token status");
}

/// The token of an agent-initiated Cluster that has not registered is extended before it
/// expires, so a Cluster whose first control-plane machine boots after the TTL still registers
/// (issue #29, defect 3: the token was created once and Fleet deleted it at expiry). The time is
/// the fixture's: the token is made to expire a minute after its creation (`spec.ttl: 1m` and
/// its expiry record, as a token created with a one-minute TTL has them), with 24 h configured.
/// Once the Cluster registered (`status.agent.lastSeen`), the token is left to expire.
#[tokio::test]
async fn the_token_is_extended_until_the_cluster_registered() {
    let mut h = Harness::new().await;
    h.namespace("edge", json!({})).await;
    h.config("cluster: {agentInitiated: true, registrationTokenTTL: 24h}")
        .await;
    h.cluster("edge", plain_cluster("c1", json!({}))).await;
    h.start().await;
    let tokens: Api<ClusterRegistrationToken> = Api::namespaced(h.client.clone(), "edge");
    let created = eventually("the token", || {
        h.get::<ClusterRegistrationToken>("edge", "c1")
    })
    .await;
    let creation = created
        .metadata
        .creation_timestamp
        .clone()
        .expect("creationTimestamp")
        .0;
    let expires = |token: &ClusterRegistrationToken| -> Option<k8s_openapi::jiff::Timestamp> {
        token
            .annotations()
            .get(names::REGISTRATION_TOKEN_EXPIRES_ANNOTATION)?
            .parse()
            .ok()
    };
    // Created with the configured TTL and when it expires.
    assert_eq!(created.spec.ttl.as_deref(), Some("24h"));
    let recorded = expires(&created).expect("expiry recorded");
    assert!(
        (recorded - creation).get_seconds().abs() <= 24 * 3600 + 5,
        "{recorded} {creation}"
    );

    let about_to_expire = || async {
        let in_a_minute = creation
            .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(60))
            .expect("time");
        tokens
            .patch(
                "c1",
                &PatchParams::default(),
                &Patch::Merge(json!({
                    "metadata": {"annotations": {names::REGISTRATION_TOKEN_EXPIRES_ANNOTATION: in_a_minute.to_string()}},
                    "spec": {"ttl": "1m"}
                })),
            )
            .await
            .expect("token")
    };
    about_to_expire().await;
    let extended = eventually("the token extended", || async {
        let token = h.get::<ClusterRegistrationToken>("edge", "c1").await?;
        let ttl = caapf::api::duration::parse_duration(token.spec.ttl.as_deref()?).ok()?;
        (ttl >= Duration::from_secs(24 * 3600)).then_some((token, ttl))
    })
    .await;
    let (token, ttl) = extended;
    // The same token (its value is unchanged), its expiry recorded from its creation, as Fleet
    // counts (handler.go deleteExpired: creationTimestamp + spec.ttl).
    assert_eq!(token.uid(), created.uid());
    let expected = creation
        .checked_add(k8s_openapi::jiff::SignedDuration::try_from(ttl).expect("ttl"))
        .expect("time");
    assert_eq!(expires(&token), Some(expected));

    // Registered: the token is left alone.
    Api::<FleetCluster>::namespaced(h.client.clone(), "edge")
        .patch_status(
            "c1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"agent": {"lastSeen": "2026-11-25T10:00:00Z"}}})),
        )
        .await
        .expect("lastSeen");
    eventually("the registration seen", || async {
        h.fleet_cluster("edge", "c1").await.filter(|c| {
            c.status
                .as_ref()
                .and_then(|s| s.agent.as_ref())
                .is_some_and(|a| a.last_seen.is_some())
        })
    })
    .await;
    let reconciles = h.reconciles("cluster");
    about_to_expire().await;
    eventually("the change reconciled", || async {
        (h.reconciles("cluster") > reconciles).then_some(())
    })
    .await;
    let token = h
        .get::<ClusterRegistrationToken>("edge", "c1")
        .await
        .expect("token");
    assert_eq!(
        token.spec.ttl.as_deref(),
        Some("1m"),
        "not extended once registered"
    );
    h.stop().await;
}

/// When the token is gone before the Cluster registered (expired while the provider was down, or
/// deleted), the import controller creates a new one, and once Fleet issued it, the bootstrap
/// Secret BeforeClusterCreate wrote gets the new token's values (the script's
/// `fleet-agent-bootstrap` Secret, both encodings) and the new token's UID: machines created from
/// then on register (issue #29, defect 3). The patch, which names the Secret, does not change.
#[tokio::test]
async fn a_replaced_token_s_values_reach_the_bootstrap_secret() {
    use caapf::model::agent_patch::{SCRIPT_GZIP_KEY, SCRIPT_KEY};
    use caapf::model::boot_script::{bootstrap_files, script_objects};

    // Prepared by BeforeClusterCreate (its mark on the Fleet Cluster), or agent-initiated by the
    // configuration with a class using the extension (the `fleetAgent` variable).
    for marked in [true, false] {
        let mut h = Harness::new().await;
        h.namespace("edge", json!({})).await;
        h.config("cluster: {agentInitiated: true}").await;
        let mut body = plain_cluster("c1", json!({}));
        if !marked {
            body["spec"]["topology"] = json!({"classRef": {"name": "quick-start"}, "version": "v1.35.0",
            "variables": [{"name": "fleetAgent", "value": {"enabled": true}}]});
        }
        let cluster = h.cluster("edge", body).await;
        if marked {
            create_hook_stub(&h, "edge", "c1").await;
        }
        h.start().await;
        let first = eventually("the token", || {
            h.get::<ClusterRegistrationToken>("edge", "c1")
        })
        .await;
        issue_token(&h, "edge", "c1", "first-token").await;

        // The bootstrap Secret as BeforeClusterCreate writes it, rendered from the first token.
        let objects = vec![
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "fleet-addon-agent"}}),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "fleet-agent-bootstrap", "namespace": "fleet-addon-agent"},
               "stringData": {"token": "first-token", "tokenName": "c1", "apiServerURL": "https://fleet.example.com:6443",
                              "clusterNamespace": "edge", "systemRegistrationNamespace": "cattle-fleet-clusters-system"}}),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "fleet-agent", "namespace": "fleet-addon-agent"}}),
        ];
        let view = caapf::model::capi::ClusterView::from_json(
            &serde_json::to_value(&cluster).expect("json"),
        )
        .expect("view");
        let secret = caapf::model::hook_plan::desired_bootstrap_secret(
            &view,
            bootstrap_files(&objects).expect("files"),
            &first.uid().expect("uid"),
        );
        let secrets: Api<Secret> = Api::namespaced(h.client.clone(), "edge");
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .expect("bootstrap secret");

        // Fleet deletes the expired token (and wrangler its values Secret).
        Api::<ClusterRegistrationToken>::namespaced(h.client.clone(), "edge")
            .delete("c1", &DeleteParams::default())
            .await
            .expect("delete token");
        secrets
            .delete("c1", &DeleteParams::default())
            .await
            .expect("delete values");
        let second = eventually("a new token", || async {
            h.get::<ClusterRegistrationToken>("edge", "c1")
                .await
                .filter(|t| t.uid() != first.uid())
        })
        .await;
        issue_token(&h, "edge", "c1", "second-token").await;

        let refreshed = eventually("the bootstrap Secret follows the new token", || async {
            let secret = secrets.get_opt("c1-fleet-agent-bootstrap").await.ok()??;
            (secret
                .annotations()
                .get(names::REGISTRATION_TOKEN_UID_ANNOTATION)
                == second.uid().as_ref())
            .then_some(secret)
        })
        .await;
        let data = refreshed.data.clone().expect("data");
        let script = String::from_utf8(data[SCRIPT_KEY].0.clone()).expect("utf-8");
        let carried = script_objects(&script).expect("objects");
        assert_eq!(carried[1]["stringData"]["token"], "second-token");
        assert_eq!(carried[0], objects[0]);
        assert_eq!(carried[2], objects[2]);
        let packed = base64::Engine::decode(
            &base64::engine::general_purpose::STANDARD,
            &data[SCRIPT_GZIP_KEY].0,
        )
        .expect("base64");
        let mut unpacked = String::new();
        std::io::Read::read_to_string(
            &mut std::process::Command::new("gzip")
                .args(["-dc"])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .map(|mut child| {
                    use std::io::Write;
                    child
                        .stdin
                        .take()
                        .expect("stdin")
                        .write_all(&packed)
                        .expect("write");
                    child.stdout.take().expect("stdout")
                })
                .expect("gzip"),
            &mut unpacked,
        )
        .expect("gunzip");
        assert_eq!(unpacked, script, "both encodings hold the same script");
        // Still what the patch names: labels, owner and format are kept.
        assert_eq!(
            refreshed
                .annotations()
                .get(names::BOOTSTRAP_FORMAT_ANNOTATION)
                .map(String::as_str),
            Some("2")
        );
        assert_eq!(
            refreshed
                .labels()
                .get(names::CAPI_CLUSTER_NAME_LABEL)
                .map(String::as_str),
            Some("c1")
        );
        h.stop().await;
    }
}
