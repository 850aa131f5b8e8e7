//! API outages with two replicas, as a Deployment runs them: two `caapf` processes with leader
//! election (the flag defaults: lease 15 s, renew deadline 10 s, retry 2 s), a supervisor that
//! restarts a process that exits (as the kubelet restarts the container), and the sandbox
//! answering 503 to everything for 20 s (in `make test`) or 60 s (`make chaos`, ignored here).
//! The leader cannot renew, so it exits ("leadership lost"); after the outage a leader is
//! elected again and changes made after the recovery are handled. Throughout, no two replicas
//! ever write in the same second (the request log tells them apart by User-Agent, which carries
//! the pod name).

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::process::ManagerProcess;
use common::{Harness, is_manager_agent};
use kube_sandbox::{FaultConfig, FaultRule, FaultTarget};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const PODS: [&str; 2] = ["caapf-replica-a", "caapf-replica-b"];

/// Restarts each pod's process whenever it exits, until cancelled; counts the restarts.
async fn supervise(
    kubeconfig: std::path::PathBuf,
    logs: std::path::PathBuf,
    stop: CancellationToken,
    restarts: Arc<Mutex<usize>>,
) {
    let args = vec!["--leader-elect".to_string()];
    let mut runs = 0;
    let mut pods: Vec<ManagerProcess> = PODS
        .iter()
        .map(|pod| {
            runs += 1;
            ManagerProcess::start(&kubeconfig, &logs, pod, runs, &args)
        })
        .collect();
    while !stop.is_cancelled() {
        for (i, pod) in pods.iter_mut().enumerate() {
            if pod.exited().is_some() {
                runs += 1;
                *pod = ManagerProcess::start(&kubeconfig, &logs, PODS[i], runs, &args);
                *restarts.lock().unwrap_or_else(|p| p.into_inner()) += 1;
            }
        }
        tokio::select! {
            () = stop.cancelled() => {}
            () = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
    for pod in pods {
        pod.kill().await;
    }
}

/// Watches the request log: for every second (of observation, polled every 100 ms), the
/// User-Agents of the managers that wrote (Events and Lease updates excluded: only the leader's
/// controllers change state).
async fn writers_per_second(
    h: Arc<Harness>,
    stop: CancellationToken,
    seen: Arc<Mutex<BTreeMap<u64, BTreeSet<String>>>>,
) {
    let start = Instant::now();
    let mut read = 0;
    while !stop.is_cancelled() {
        let all = h.sandbox.requests().all();
        let second = start.elapsed().as_secs();
        for r in all.iter().skip(read) {
            if r.verb.is_write()
                && is_manager_agent(&r.user_agent)
                && r.resource != "events"
                && r.resource != "leases"
                && r.code < 400
            {
                seen.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .entry(second)
                    .or_default()
                    .insert(r.user_agent.clone());
            }
        }
        read = all.len();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn converges_after_an_outage(outage: Duration) {
    let h = Harness::new().await;
    h.namespace("caapf-system", json!({})).await;
    h.namespace("team-a", json!({})).await;
    for i in 0..6 {
        let name = format!("c{i}");
        h.cluster("team-a", json!({"metadata": {"name": name}, "spec": {}}))
            .await;
        h.initialize("team-a", &name).await;
    }
    let h = Arc::new(h);
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    h.sandbox.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let stop = CancellationToken::new();
    let restarts = Arc::new(Mutex::new(0));
    let seen = Arc::new(Mutex::new(BTreeMap::new()));
    let supervisor = tokio::spawn(supervise(
        kubeconfig.clone(),
        dir.path().to_path_buf(),
        stop.clone(),
        restarts.clone(),
    ));
    let watcher = tokio::spawn(writers_per_second(h.clone(), stop.clone(), seen.clone()));

    let imported = |names: Vec<String>| {
        let h = h.clone();
        async move {
            for name in &names {
                h.fleet_cluster("team-a", name).await?;
            }
            Some(())
        }
    };
    let all: Vec<String> = (0..6).map(|i| format!("c{i}")).collect();
    wait_for("initial import", Duration::from_secs(60), || {
        imported(all.clone())
    })
    .await;

    // The outage: every request answered 503, every watch closed.
    h.sandbox.set_faults(FaultConfig {
        rules: vec![FaultRule::fail(FaultTarget::All, 1.0, 503)],
        close_watches_now: true,
        ..Default::default()
    });
    tokio::time::sleep(outage).await; // the outage itself, not a synchronisation
    h.sandbox.clear_faults();
    let recovered = Instant::now();
    let restarted_during_outage = *restarts.lock().unwrap_or_else(|p| p.into_inner());

    // Changes after the recovery are handled.
    h.cluster("team-a", json!({"metadata": {"name": "after"}, "spec": {}}))
        .await;
    h.initialize("team-a", "after").await;
    h.delete_cluster("team-a", "c0").await;
    wait_for("changes after the outage", Duration::from_secs(90), || {
        let h = h.clone();
        async move {
            h.fleet_cluster("team-a", "after").await?;
            let gone = h
                .get::<caapf::api::CapiCluster>("team-a", "c0")
                .await
                .is_none();
            gone.then_some(())
        }
    })
    .await;
    let took = recovered.elapsed();
    stop.cancel();
    let _ = supervisor.await;
    let _ = watcher.await;

    let logs: String = std::fs::read_dir(dir.path())
        .expect("logs")
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect();
    eprintln!(
        "outage {outage:?}: {restarted_during_outage} process restarts during it; changes after the recovery handled in {took:?}"
    );
    assert!(
        logs.contains("leadership lost"),
        "the leader must exit when it cannot renew"
    );
    assert!(restarted_during_outage >= 1, "the leader process exited");
    let seen = seen.lock().unwrap_or_else(|p| p.into_inner());
    let overlapping: Vec<_> = seen.iter().filter(|(_, agents)| agents.len() > 1).collect();
    assert!(
        overlapping.is_empty(),
        "two replicas wrote in the same second: {overlapping:?}"
    );
    let writers: BTreeSet<&String> = seen.values().flatten().collect();
    assert!(!writers.is_empty(), "the request log saw no manager write");
    assert!(
        writers.iter().all(|w| PODS.iter().any(|p| w.contains(p))),
        "every writer names its pod: {writers:?}"
    );
}

async fn wait_for<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<()>>,
{
    let deadline = Instant::now() + timeout;
    while check().await.is_none() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_converge_after_a_20s_outage() {
    converges_after_an_outage(Duration::from_secs(20)).await;
}

/// Run by `make chaos` (about 100 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow: make chaos"]
async fn two_replicas_converge_after_a_60s_outage() {
    converges_after_an_outage(Duration::from_secs(60)).await;
}
