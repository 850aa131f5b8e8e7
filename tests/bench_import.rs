//! Import benchmark (ignored by default; `make bench` runs it): N Clusters in M namespaces,
//! a fifth of them using a ClusterClass from another namespace. Reports the time to import all
//! of them, API calls per Cluster by verb, and what a restart costs (time to settle, writes).
//!
//! `BENCH_CLUSTERS` (default 1000) and `BENCH_NAMESPACES` (default 50) size it. The sandbox API
//! server and the manager share one process and runtime, as in the other tests.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{Harness, eventually};
use kube::api::{Api, ListParams};
use serde_json::json;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn by_verb(h: &Harness) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    // The manager's requests only, not the benchmark's own polling.
    for r in h.sandbox.requests().all() {
        if !common::from_manager(&r) {
            continue;
        }
        *counts.entry(format!("{:?}", r.verb)).or_default() += 1;
    }
    counts
}

async fn fleet_clusters(h: &Harness) -> usize {
    let api: Api<fleet_api_rs::fleet_cluster::Cluster> = Api::all(h.client.clone());
    api.list_metadata(&ListParams::default())
        .await
        .map(|l| l.items.len())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run with `make bench`"]
async fn import_benchmark() {
    let clusters = env_usize("BENCH_CLUSTERS", 1000);
    let namespaces = env_usize("BENCH_NAMESPACES", 50);
    if std::env::var("BENCH_LOG").is_ok() {
        caapf::telemetry::init(caapf::cli::LogFormat::Text, 4);
    }
    let mut h = Harness::new().await;
    h.namespace("classes", json!({})).await;
    h.class("classes", "quick-start", json!({"tier": "bench"}))
        .await;
    for n in 0..namespaces {
        h.namespace(&format!("ns-{n}"), json!({})).await;
    }
    let setup = Instant::now();
    for i in 0..clusters {
        let ns = format!("ns-{}", i % namespaces);
        let name = format!("c-{i}");
        let body = if i % 5 == 0 {
            json!({"metadata": {"name": name, "labels": {"bench": "yes"}},
                   "spec": {"topology": {"classRef": {"name": "quick-start", "namespace": "classes"}, "version": "v1.35.0"}}})
        } else {
            json!({"metadata": {"name": name, "labels": {"bench": "yes"}}, "spec": {}})
        };
        h.cluster(&ns, body).await;
        h.initialize(&ns, &name).await;
    }
    println!(
        "setup: {clusters} Clusters in {namespaces} namespaces created in {:.1?}",
        setup.elapsed()
    );

    h.flags.sync_period = Duration::from_secs(3600);
    h.sandbox.requests().reset();
    let started = Instant::now();
    h.start().await;
    eventually("all Clusters imported", || async {
        (fleet_clusters(&h).await == clusters).then_some(())
    })
    .await;
    let import_time = started.elapsed();
    // Let the namespace-level objects settle too.
    eventually("namespace annotations", || async {
        h.namespace_annotation(&format!("ns-{}", namespaces - 1))
            .await
            .map(|_| ())
    })
    .await;
    // And the FleetReady condition on every Cluster (its writes are part of the import's cost).
    eventually("FleetReady on every Cluster", || async {
        let api: Api<caapf::api::CapiCluster> = Api::all(h.client.clone());
        let listed = api.list(&Default::default()).await.ok()?;
        listed
            .items
            .iter()
            .all(|c| {
                c.body["status"]["conditions"]
                    .as_array()
                    .is_some_and(|l| l.iter().any(|c| c["type"] == "FleetReady"))
            })
            .then_some(())
    })
    .await;
    let verbs = by_verb(&h);
    let total: usize = verbs.values().sum();
    println!(
        "import: {clusters} Fleet Clusters in {import_time:.2?} ({:.0} Clusters/s)",
        clusters as f64 / import_time.as_secs_f64()
    );
    println!(
        "import: {total} API requests ({:.2} per Cluster): {verbs:?}",
        total as f64 / clusters as f64
    );
    h.stop().await;

    h.sandbox.requests().reset();
    let restarted = Instant::now();
    h.start().await;
    eventually("every Cluster reconciled after the restart", || async {
        (h.reconciles("cluster") >= clusters as u64).then_some(())
    })
    .await;
    let settle = restarted.elapsed();
    let writes = h.state_writes();
    println!(
        "restart: {clusters} Clusters re-reconciled in {settle:.2?}, {} writes, requests {:?}",
        writes.len(),
        by_verb(&h)
    );
    assert!(
        writes.is_empty(),
        "restart wrote: {:?}",
        &writes[..writes.len().min(10)]
    );
    h.stop().await;
}
