//! Faults that leave nothing orphaned and nothing stuck (issue #16), with the manager in
//! process against the sandbox: a namespace deleted together with its Clusters, terminating
//! namespaces, an invalid selection, retried transient errors, watch reconnects after an outage,
//! a stalled manager's watches closed by the server and resumed with nothing lost.

use crate::common;

use std::time::Duration;

use caapf::api::{BundleNamespaceMapping, CapiCluster};
use caapf::names;
use common::{Harness, eventually, from_manager};
use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};

fn classy_cluster(name: &str, class: &str, class_namespace: &str) -> Value {
    json!({
        "metadata": {"name": name},
        "spec": {"topology": {"classRef": {"name": class, "namespace": class_namespace}, "version": "v1.35.0"}}
    })
}

fn plain_cluster(name: &str) -> Value {
    json!({"metadata": {"name": name}, "spec": {}})
}

async fn delete_namespace(h: &Harness, name: &str) {
    Api::<Namespace>::all(h.client.clone())
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete namespace");
}

async fn namespace_exists(h: &Harness, name: &str) -> bool {
    Api::<Namespace>::all(h.client.clone())
        .get_opt(name)
        .await
        .expect("get namespace")
        .is_some()
}

/// Two Clusters in `apps` using a class from `classes`, imported, with their mapping.
async fn mapped_namespace(h: &mut Harness) {
    for ns in ["classes", "apps"] {
        h.namespace(ns, json!({})).await;
    }
    h.config("cluster: {applyClassGroup: true}").await;
    h.class("classes", "qs", json!({})).await;
    for name in ["a1", "a2"] {
        h.cluster("apps", classy_cluster(name, "qs", "classes"))
            .await;
        h.initialize("apps", name).await;
    }
    h.start().await;
    eventually("mapping apps in classes", || {
        h.get::<BundleNamespaceMapping>("classes", "apps")
    })
    .await;
}

#[tokio::test]
async fn deleting_a_namespace_with_its_clusters_deletes_its_mapping() {
    let mut h = Harness::new().await;
    mapped_namespace(&mut h).await;

    // The ordinary clean-up: the namespace goes with its Clusters (the sandbox's namespace
    // controller deletes them; our cleanup releases their finalizers).
    delete_namespace(&h, "apps").await;
    eventually("namespace apps gone", || async {
        (!namespace_exists(&h, "apps").await).then_some(())
    })
    .await;
    eventually("mapping apps deleted", || async {
        h.get::<BundleNamespaceMapping>("classes", "apps")
            .await
            .is_none()
            .then_some(())
    })
    .await;

    // A namespace created later with the same name is not mapped to the class namespace's
    // bundles: once a plain Cluster in it is imported, there is still no mapping.
    h.namespace("apps", json!({})).await;
    h.cluster("apps", plain_cluster("p1")).await;
    h.initialize("apps", "p1").await;
    eventually("Fleet Cluster p1", || h.fleet_cluster("apps", "p1")).await;
    assert!(
        h.get::<BundleNamespaceMapping>("classes", "apps")
            .await
            .is_none(),
        "a recreated namespace must not be mapped"
    );
}

#[tokio::test]
async fn a_mapping_whose_namespace_went_while_stopped_is_deleted_at_start() {
    let mut h = Harness::new().await;
    mapped_namespace(&mut h).await;
    h.stop().await;

    // While no manager runs, someone removes the finalizers and deletes the namespace.
    let clusters: Api<CapiCluster> = Api::namespaced(h.client.clone(), "apps");
    for name in ["a1", "a2"] {
        clusters
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await
            .expect("remove finalizer");
    }
    delete_namespace(&h, "apps").await;
    eventually("namespace apps gone", || async {
        (!namespace_exists(&h, "apps").await).then_some(())
    })
    .await;
    assert!(
        h.get::<BundleNamespaceMapping>("classes", "apps")
            .await
            .is_some()
    );

    h.start().await;
    eventually("orphaned mapping deleted", || async {
        h.get::<BundleNamespaceMapping>("classes", "apps")
            .await
            .is_none()
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn nothing_is_created_in_a_terminating_namespace() {
    // The namespace stays terminating for the whole test.
    let mut h = Harness::with_options(kube_sandbox::SandboxOptions {
        validate_custom_resources: true,
        namespace_cleanup_delay: Duration::from_secs(3600),
        ..Default::default()
    })
    .await;
    for ns in ["going", "staying"] {
        h.namespace(ns, json!({})).await;
    }
    h.cluster("going", plain_cluster("g1")).await;
    h.initialize("going", "g1").await;
    delete_namespace(&h, "going").await;
    h.cluster("staying", plain_cluster("s1")).await;
    h.initialize("staying", "s1").await;
    h.start().await;

    eventually("Fleet Cluster s1", || h.fleet_cluster("staying", "s1")).await;
    // Both Clusters were reconciled at least once (the counter moves when a reconcile ends).
    eventually("both Clusters reconciled", || async {
        (h.reconciles("cluster") >= 2).then_some(())
    })
    .await;
    let into_going: Vec<String> = h
        .sandbox
        .requests()
        .all()
        .into_iter()
        .filter(|r| from_manager(r) && r.verb.is_write() && r.namespace == "going")
        .filter(|r| r.resource != "events")
        .map(|r| format!("{:?} {}/{} -> {}", r.verb, r.resource, r.name, r.code))
        .collect();
    assert!(
        into_going.is_empty(),
        "no write into a terminating namespace: {into_going:?}"
    );
    assert!(h.fleet_cluster("going", "g1").await.is_none());
    let g1 = h
        .get::<CapiCluster>("going", "g1")
        .await
        .expect("g1 exists");
    assert!(!g1.finalizers().iter().any(|f| f == names::FINALIZER));
}

#[tokio::test]
async fn frozen_selection_reports_what_exists() {
    use caapf::api::FleetAddonConfig;
    let mut h = Harness::new().await;
    h.namespace("team-a", json!({})).await;
    h.config("cluster: {namespaceRegexes: [\"team-.*\"]}").await;
    for name in ["c1", "c2"] {
        h.cluster("team-a", plain_cluster(name)).await;
        h.initialize("team-a", name).await;
    }
    h.start().await;
    let configs: Api<FleetAddonConfig> = Api::all(h.client.clone());
    let counts = || async {
        configs
            .get("fleet-addon-config")
            .await
            .expect("config")
            .status
            .and_then(|s| s.clusters)
            .map(|c| (c.selected, c.imported))
    };
    eventually("two imported", || async {
        (counts().await == Some((2, 2))).then_some(())
    })
    .await;

    // Selection turns invalid: frozen, and said so.
    h.config("cluster: {namespaceRegexes: [\"team-(\"]}").await;
    let frozen = eventually("SelectionFrozen condition", || async {
        configs
            .get("fleet-addon-config")
            .await
            .expect("config")
            .status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "SelectionFrozen" && c.status == "True")
    })
    .await;
    assert!(
        frozen.message.contains("spec.cluster.namespaceRegexes[0]"),
        "{}",
        frozen.message
    );

    // A deletion still completes, and the counts follow what exists (not 0).
    h.delete_cluster("team-a", "c2").await;
    eventually("counts of what exists", || async {
        (counts().await == Some((1, 1))).then_some(())
    })
    .await;
    let metrics = &h.manager.as_ref().expect("manager").ctx.metrics;
    eventually("gauges of what exists", || async {
        (metrics.selected_clusters.get() == 1 && metrics.imported_clusters.get() == 1).then_some(())
    })
    .await;

    // Fixed: the condition goes.
    h.config("cluster: {namespaceRegexes: [\"team-.*\"]}").await;
    eventually("SelectionFrozen removed", || async {
        let status = configs
            .get("fleet-addon-config")
            .await
            .expect("config")
            .status?;
        (!status
            .conditions
            .iter()
            .any(|c| c.type_ == "SelectionFrozen"))
        .then_some(())
    })
    .await;
}

/// The API server answers nothing but 503 for `outage` (every watch closed at its start), then
/// recovers; returns how long after the recovery a new Cluster was imported.
async fn import_delay_after_outage(h: &Harness, outage: Duration, name: &str) -> Duration {
    use kube_sandbox::{FaultConfig, FaultRule, FaultTarget};
    h.sandbox.set_faults(FaultConfig {
        rules: vec![FaultRule::fail(FaultTarget::All, 1.0, 503)],
        close_watches_now: true,
        ..Default::default()
    });
    tokio::time::sleep(outage).await; // the outage itself, not a synchronisation
    h.sandbox.set_faults(FaultConfig::default());
    let recovered = tokio::time::Instant::now();
    h.cluster("team-a", plain_cluster(name)).await;
    h.initialize("team-a", name).await;
    eventually("Fleet Cluster after the outage", || {
        h.fleet_cluster("team-a", name)
    })
    .await;
    recovered.elapsed()
}

#[tokio::test]
async fn watches_follow_the_api_server_within_seconds_after_an_outage() {
    let mut h = Harness::new().await;
    h.namespace("team-a", json!({})).await;
    h.cluster("team-a", plain_cluster("before")).await;
    h.initialize("team-a", "before").await;
    h.start().await;
    eventually("Fleet Cluster before", || {
        h.fleet_cluster("team-a", "before")
    })
    .await;

    // 25 s of outage: kube-runtime's default watch backoff (0.8 s doubling toward 30 s, with
    // jitter) would next retry about 25 s after the recovery; ours at most 4 s after.
    let took = import_delay_after_outage(&h, Duration::from_secs(25), "after").await;
    eprintln!("import after a 25 s outage took {took:?} after the recovery");
    assert!(
        took < Duration::from_secs(8),
        "a change after the outage waited {took:?}"
    );
}

/// A manager that stops reading its watches (the process stopped with SIGSTOP, as a stalled
/// consumer would) is closed by the API server once the watch's buffers are full and an event
/// has waited the server's budget, as kube-apiserver's watch cache closes it (k8s.io/apiserver
/// `pkg/storage/cacher/cache_watcher.go` `add`, `time_budget.go`; the sandbox counts the
/// closes); continued, the manager watches again and imports every Cluster created while it
/// stood still: nothing lost. The `caapf` binary runs as its own process so that it can be
/// stopped without stopping the sandbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manager_that_stopped_reading_is_closed_and_catches_up_with_nothing_lost() {
    use common::process::ManagerProcess;
    use kube_sandbox::Verb;

    let h = Harness::new().await;
    h.namespace("caapf-system", json!({})).await;
    h.namespace("team-a", json!({})).await;
    h.cluster("team-a", plain_cluster("before")).await;
    h.initialize("team-a", "before").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    h.sandbox.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let manager = ManagerProcess::start(&kubeconfig, dir.path(), "caapf-stalled", 0, &[]);
    eventually("Fleet Cluster before", || {
        h.fleet_cluster("team-a", "before")
    })
    .await;
    let cluster_watches = || {
        h.sandbox.requests().count(|r| {
            r.verb == Verb::Watch
                && r.group == "cluster.x-k8s.io"
                && r.resource == "clusters"
                && from_manager(r)
        })
    };
    let watches_before = cluster_watches();
    assert!(watches_before >= 1, "the manager watches Clusters");

    // Stopped, the manager reads nothing: the Cluster events (each about 40 KB, 300 created and
    // initialized, about 24 MB) fill the watch's socket buffers, then the server's.
    manager.signal("STOP");
    let padding = "x".repeat(40 * 1024);
    let names: Vec<String> = (0..300).map(|i| format!("stalled-{i}")).collect();
    for name in &names {
        h.cluster(
            "team-a",
            json!({"metadata": {"name": name, "annotations": {"example.com/padding": padding}}, "spec": {}}),
        )
        .await;
        h.initialize("team-a", name).await;
    }
    eventually(
        "the stalled manager's watch closed by the server",
        || async { (h.sandbox.slow_watchers_closed() >= 1).then_some(()) },
    )
    .await;

    manager.signal("CONT");
    for name in &names {
        eventually(
            "every Cluster created while the manager stood still imported",
            || h.fleet_cluster("team-a", name),
        )
        .await;
    }
    assert!(
        cluster_watches() > watches_before,
        "the manager watched Clusters again after the server closed its watch"
    );
}
