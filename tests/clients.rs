//! The manager's two clients: the controllers' one is rate-limited by `--kube-api-qps` and
//! `--kube-api-burst`; the Lease and the Runtime SDK hooks use another, which never waits
//! behind it. And requests the API server turns away with `429` and `Retry-After` (API
//! Priority and Fairness) are retried, as client-go does.

use crate::common;

use std::time::Duration;

use caapf::cli::ManagerFlags;
use common::{Harness, eventually};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube_sandbox::{FaultConfig, FaultRule, FaultTarget};
use serde_json::json;

const LEASE_NAMESPACE: &str = "caapf-system";
const LEASE_NAME: &str = "caapf-leader-election";

/// A controllers' budget so small (one request, then one every 100 s) that the controllers
/// cannot even list their caches while the test runs.
fn starved(base: &ManagerFlags) -> ManagerFlags {
    ManagerFlags {
        kube_api_qps: 0.01,
        kube_api_burst: 1,
        leader_elect: true,
        leader_elect_lease_duration: Duration::from_secs(3),
        leader_elect_renew_deadline: Duration::from_secs(2),
        leader_elect_retry_period: Duration::from_millis(300),
        leader_election_namespace: Some(LEASE_NAMESPACE.into()),
        ..base.clone()
    }
}

async fn renew_time(h: &Harness) -> Option<String> {
    Api::<Lease>::namespaced(h.client.clone(), LEASE_NAMESPACE)
        .get_opt(LEASE_NAME)
        .await
        .expect("get lease")
        .and_then(|l| l.spec?.renew_time)
        .map(|t| format!("{:?}", t.0))
}

#[tokio::test]
async fn the_lease_and_the_hooks_client_do_not_wait_behind_the_controllers() {
    let mut h = Harness::new().await;
    h.namespace(LEASE_NAMESPACE, json!({})).await;
    h.namespace("ns", json!({})).await;
    for i in 0..3 {
        let name = format!("c-{i}");
        h.cluster("ns", json!({"metadata": {"name": name}, "spec": {}}))
            .await;
        h.initialize("ns", &name).await;
    }
    h.flags = starved(&h.flags);
    h.start().await;
    let manager = h.manager.as_ref().expect("manager");

    // The Lease is acquired and renewed again and again...
    eventually("leading", || async { manager.is_leader().then_some(()) }).await;
    let first = eventually("a renewal", || async { renew_time(&h).await }).await;
    for _ in 0..3 {
        let previous = renew_time(&h).await;
        eventually("another renewal", || async {
            let now = renew_time(&h).await;
            (now != previous).then_some(())
        })
        .await;
    }
    assert_ne!(renew_time(&h).await, Some(first));
    // ...and the client the hooks use answers at once, 20 requests in a row...
    let hooks: Api<Namespace> = Api::all(manager.ctx.client.clone());
    let started = std::time::Instant::now();
    for _ in 0..20 {
        hooks.get("ns").await.expect("get with the hooks' client");
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "20 requests took {:?}",
        started.elapsed()
    );
    // ...while the controllers are still waiting for tokens: nothing imported yet.
    let fleet: Vec<fleet_api_rs::fleet_cluster::Cluster> = h.list("ns").await;
    assert!(fleet.is_empty(), "the controllers were not throttled");
    if let Some(manager) = h.manager.take() {
        manager.abort().await;
    }
}

#[tokio::test]
async fn requests_turned_away_with_retry_after_are_retried() {
    let h = Harness::new().await;
    // Every second GET of a namespace answers 429 with `Retry-After: 1`, as API Priority and
    // Fairness does when the request's priority level is full.
    h.sandbox.set_faults(FaultConfig {
        rules: vec![FaultRule::fail(FaultTarget::Reads, 0.5, 429).for_resource("namespaces")],
        ..Default::default()
    });
    let clients = h.manager_clients().await;
    for client in [clients.controllers, clients.priority] {
        let api: Api<Namespace> = Api::all(client);
        for _ in 0..2 {
            api.get("default")
                .await
                .expect("a throttled request is retried");
        }
    }
    let (ok, throttled) = h
        .sandbox
        .requests()
        .all()
        .iter()
        .fold((0, 0), |(ok, t), r| match (r.resource.as_str(), r.code) {
            ("namespaces", 200) => (ok + 1, t),
            ("namespaces", 429) => (ok, t + 1),
            _ => (ok, t),
        });
    // Answers alternate 200, 429: each GET after the first was turned away once, then retried.
    assert_eq!((ok, throttled), (4, 3));
}
