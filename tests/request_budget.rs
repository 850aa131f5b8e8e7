//! The API requests an import costs, counted from the sandbox request log: per Cluster one
//! finalizer patch, one Fleet Cluster apply and one `FleetReady` status apply, per namespace one
//! annotation, per class
//! namespace pair one ClusterGroup and one BundleNamespaceMapping — and nothing else, also when
//! a watch lags behind our own writes (a reconcile that ran before the cache showed our last
//! write used to write again: an apply that changed nothing, a finalizer patch rejected by its
//! resourceVersion guard and a GET), and no Event per Cluster.

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{Harness, eventually, from_manager};
use kube_sandbox::{FaultConfig, WatchDelay};
use serde_json::json;

const CLUSTERS: usize = 12;
const NAMESPACES: usize = 3;
/// How late the lagging watch delivers events: long enough that every reconcile our own
/// writes trigger on the other watches runs before it.
const DELAY: Duration = Duration::from_millis(1000);

/// `VERB group/resource` → count, of the manager's requests other than LIST and WATCH.
fn manager_requests(h: &Harness) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for r in h.sandbox.requests().all() {
        if !from_manager(&r)
            || matches!(r.verb, kube_sandbox::Verb::List | kube_sandbox::Verb::Watch)
        {
            continue;
        }
        let status = if r.code >= 400 {
            format!(" {}", r.code)
        } else {
            String::new()
        };
        *counts
            .entry(format!("{:?} {}/{}{status}", r.verb, r.group, r.resource))
            .or_default() += 1;
    }
    counts
}

/// Imports [`CLUSTERS`] Clusters (two of them using a ClusterClass from another namespace, in
/// two namespaces) with the watch of `lagging` (group, plural) delayed, and checks the requests.
async fn import_with_lagging_watch(lagging: Option<(&str, &str)>) {
    let mut h = Harness::new().await;
    h.namespace("classes", json!({})).await;
    h.class("classes", "quick-start", json!({})).await;
    for n in 0..NAMESPACES {
        h.namespace(&format!("ns-{n}"), json!({})).await;
    }
    for i in 0..CLUSTERS {
        let ns = format!("ns-{}", i % NAMESPACES);
        let name = format!("c-{i}");
        let spec = if i < 2 {
            json!({"topology": {"classRef": {"name": "quick-start", "namespace": "classes"}, "version": "v1.35.0"}})
        } else {
            json!({})
        };
        h.cluster(&ns, json!({"metadata": {"name": name}, "spec": spec}))
            .await;
        h.initialize(&ns, &name).await;
    }
    if let Some((group, resource)) = lagging {
        h.sandbox.set_faults(FaultConfig {
            watch_delays: vec![WatchDelay {
                group: group.into(),
                resource: resource.into(),
                delay_ms: DELAY.as_millis() as u64,
            }],
            ..Default::default()
        });
    }
    h.sandbox.requests().reset();
    h.start().await;

    let expected: BTreeMap<String, usize> = [
        // One finalizer per Cluster.
        ("Patch cluster.x-k8s.io/clusters", CLUSTERS),
        // One Fleet Cluster per Cluster.
        ("Apply fleet.cattle.io/clusters", CLUSTERS),
        // The FleetReady condition (status subresource), once per Cluster: written after the
        // finalizer and the Fleet Cluster, so it neither conflicts with the finalizer patch nor
        // is written twice.
        ("Apply cluster.x-k8s.io/clusters", CLUSTERS),
        // The workspace annotation, once per namespace with Clusters.
        ("Apply /namespaces", NAMESPACES),
        // The class group, and a group in each namespace using the class from `classes`.
        ("Apply fleet.cattle.io/clustergroups", 1 + 2),
        ("Apply fleet.cattle.io/bundlenamespacemappings", 2),
        // `Created` for the class group (one per ClusterClass, not per Cluster).
        ("Post events.k8s.io/events", 1),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    // Wait until the expected writes were made, then until the manager has been quiet for
    // longer than the lag: every reconcile that the delayed events trigger has run by then.
    let quiet = DELAY + Duration::from_millis(500);
    let mut last: (BTreeMap<String, usize>, Instant) = (BTreeMap::new(), Instant::now());
    let seen = eventually("the import writes, then a quiet period", || {
        let now = manager_requests(&h);
        if now != last.0 {
            last = (now.clone(), Instant::now());
        }
        let settled = now.len() >= expected.len() && last.1.elapsed() > quiet;
        async move { settled.then_some(now) }
    })
    .await;
    assert_eq!(
        seen, expected,
        "requests of the import with the {lagging:?} watch lagging {DELAY:?}"
    );
    if lagging.is_none() {
        // The watch events of our own writes do not reconcile again what decided them: each
        // Cluster once for the cluster controller (it does not read the condition the health
        // controller writes); three times for the health controller (it waits for the
        // finalizer and the Fleet Cluster). The namespace writes do not change what a Cluster
        // decision reads of its namespace. Before the echoes were left out: 45 and 58.
        let (cluster, health) = (h.reconciles("cluster"), h.reconciles("health"));
        assert!(
            cluster <= CLUSTERS as u64 + 2 && health <= 3 * CLUSTERS as u64 + 2,
            "reconciles for {CLUSTERS} Clusters: cluster controller {cluster}, health {health}"
        );
    }
    h.stop().await;
}

#[tokio::test]
async fn import_requests_without_lag() {
    import_with_lagging_watch(None).await;
}

/// The Fleet Cluster cache lags: the reconcile the finalizer's watch event triggers must not
/// apply the Fleet Cluster again.
#[tokio::test]
async fn import_requests_with_fleet_clusters_lagging() {
    import_with_lagging_watch(Some(("fleet.cattle.io", "clusters"))).await;
}

/// The CAPI Cluster cache lags: the reconcile the Fleet Cluster's watch event triggers must not
/// patch the finalizer again (a 422 from the resourceVersion guard, then a GET).
#[tokio::test]
async fn import_requests_with_capi_clusters_lagging() {
    import_with_lagging_watch(Some(("cluster.x-k8s.io", "clusters"))).await;
}

/// The Namespace cache lags: the namespace reconciles every Cluster event triggers must not
/// apply the workspace annotation again.
#[tokio::test]
async fn import_requests_with_namespaces_lagging() {
    import_with_lagging_watch(Some(("", "namespaces"))).await;
}

/// Group and mapping caches lag: the namespace reconciles must not apply them again.
#[tokio::test]
async fn import_requests_with_groups_and_mappings_lagging() {
    import_with_lagging_watch(Some(("fleet.cattle.io", "clustergroups"))).await;
    import_with_lagging_watch(Some(("fleet.cattle.io", "bundlenamespacemappings"))).await;
}

/// A reconcile that finds the cache behind our own write waits for that write's watch event,
/// so that event is not left out as an echo. Here the namespace is unlabelled (deselecting its
/// Cluster) while the Cluster watch still lags behind our finalizer patch: the deselection
/// completes when that event comes, not when the wait for it expires
/// (`expectations::TTL`, 30 s).
#[tokio::test]
async fn a_reconcile_waiting_for_our_write_is_woken_by_its_echo() {
    let mut h = Harness::new().await;
    h.namespace("team-x", json!({"fleet": "on"})).await;
    h.config("cluster: {namespaceSelector: {matchLabels: {fleet: \"on\"}}, patchResource: true, deselectPolicy: Delete}")
        .await;
    h.cluster("team-x", json!({"metadata": {"name": "c"}, "spec": {}}))
        .await;
    h.initialize("team-x", "c").await;
    h.sandbox.set_faults(FaultConfig {
        watch_delays: vec![WatchDelay {
            group: "cluster.x-k8s.io".into(),
            resource: "clusters".into(),
            delay_ms: 2 * DELAY.as_millis() as u64,
        }],
        ..Default::default()
    });
    h.start().await;
    eventually("the Fleet Cluster", || h.fleet_cluster("team-x", "c")).await;
    // The finalizer patch came before the Fleet Cluster; its watch event is still delayed.
    let unlabelled = Instant::now();
    h.label_namespace("team-x", json!({"fleet": null})).await;
    eventually("the Fleet Cluster deleted on deselect", || async {
        h.fleet_cluster("team-x", "c").await.is_none().then_some(())
    })
    .await;
    let took = unlabelled.elapsed();
    assert!(
        took < Duration::from_secs(15),
        "the deselection took {took:?}: the reconcile waited for an event that was left out"
    );
    h.stop().await;
}

/// A list of the Clusters reconciles each namespace once, not once per Cluster. Here the
/// namespaces are cached first (the Cluster watch lags) and every listed Cluster is new to the
/// namespace triggers, as on every start of the manager; on a restart with 10,000 Clusters in
/// 100 namespaces that was about 30 reconciles per namespace (docs/performance.md). More
/// Clusters than a feed holds (1,024), so that the list's dispatch waits for the controllers
/// and namespace reconciles run in between.
#[tokio::test]
async fn a_cluster_list_reconciles_each_namespace_once() {
    const PER_NAMESPACE: usize = 500;
    let total = NAMESPACES * PER_NAMESPACE;
    let mut h = Harness::new().await;
    for n in 0..NAMESPACES {
        h.namespace(&format!("ns-{n}"), json!({})).await;
    }
    for i in 0..total {
        let (ns, name) = (format!("ns-{}", i % NAMESPACES), format!("c-{i}"));
        h.cluster(&ns, json!({"metadata": {"name": name}, "spec": {}}))
            .await;
        h.initialize(&ns, &name).await;
    }
    h.sandbox.set_faults(FaultConfig {
        watch_delays: vec![WatchDelay {
            group: "cluster.x-k8s.io".into(),
            resource: "clusters".into(),
            delay_ms: DELAY.as_millis() as u64,
        }],
        ..Default::default()
    });
    h.start().await;
    // Every listed Cluster has reached the cluster controller once its finalizer is patched;
    // the namespace feed had each of them before (the hub sends to its feeds in turn).
    let finalizers = "Patch cluster.x-k8s.io/clusters".to_string();
    let deadline = Instant::now() + Duration::from_secs(180);
    while manager_requests(&h).get(&finalizers) != Some(&total) {
        assert!(Instant::now() < deadline, "{total} finalizers within 180 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A few per namespace (12 in all here, 2026-11-25; 125 when each listed Cluster triggered
    // its namespace).
    let namespace = h.reconciles("namespace");
    assert!(
        namespace <= 6 * NAMESPACES as u64,
        "{namespace} namespace reconciles for {NAMESPACES} namespaces of {PER_NAMESPACE} listed Clusters"
    );
    h.stop().await;
}
