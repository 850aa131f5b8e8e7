//! Leader election with two managers in one process against one sandbox API server: exactly
//! one leads and reconciles; a graceful stop releases the Lease and the other takes over at
//! once; a leader that stops renewing is replaced only after the lease duration; a leader cut
//! off from the API server steps down within its renew deadline.

use crate::common;

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use caapf::cli::ManagerFlags;
use caapf::manager::Manager;
use caapf::metrics::ControllerLabels;
use common::{Harness, eventually, manager_client, sandbox_config};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube::client::ClientBuilder;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const LEASE_NAMESPACE: &str = "caapf-system";
const LEASE_NAME: &str = "caapf-leader-election";

fn plain_cluster(name: &str) -> Value {
    json!({"metadata": {"name": name}, "spec": {}})
}

/// Leader-election flags with durations short enough for a test.
fn elect(base: &ManagerFlags, lease: Duration, renew: Duration, retry: Duration) -> ManagerFlags {
    ManagerFlags {
        leader_elect: true,
        leader_elect_lease_duration: lease,
        leader_elect_renew_deadline: renew,
        leader_elect_retry_period: retry,
        leader_election_namespace: Some(LEASE_NAMESPACE.into()),
        ..base.clone()
    }
}

async fn start(client: Client, flags: &ManagerFlags) -> Manager {
    Manager::start(client, flags.clone(), CancellationToken::new())
        .await
        .expect("manager starts")
}

fn reconciles(manager: &Manager, controller: &'static str) -> u64 {
    manager
        .ctx
        .metrics
        .reconciles
        .get_or_create(&ControllerLabels { controller })
        .get()
}

fn total_reconciles(manager: &Manager) -> u64 {
    ["cluster", "namespace", "clusterclass", "clustergroup"]
        .into_iter()
        .map(|c| reconciles(manager, c))
        .sum()
}

async fn lease(h: &Harness) -> Option<Lease> {
    Api::<Lease>::namespaced(h.client.clone(), LEASE_NAMESPACE)
        .get_opt(LEASE_NAME)
        .await
        .expect("get lease")
}

fn holder(lease: &Lease) -> Option<String> {
    lease.spec.as_ref()?.holder_identity.clone()
}

fn transitions(lease: &Lease) -> i32 {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.lease_transitions)
        .unwrap_or(-1)
}

fn renew_time(lease: &Lease) -> k8s_openapi::jiff::Timestamp {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.renew_time.as_ref())
        .expect("renewTime")
        .0
}

/// Two managers; returns them as (leader, follower) once one leads and has imported `c1`.
async fn two_replicas(h: &Harness, flags: &ManagerFlags) -> (Manager, Manager) {
    let a = start(h.manager_client().await, flags).await;
    let b = start(h.manager_client().await, flags).await;
    eventually("one replica leads", || async {
        (a.is_leader() || b.is_leader()).then_some(())
    })
    .await;
    let (leader, follower) = if a.is_leader() { (a, b) } else { (b, a) };
    eventually("the leader imported c1", || h.fleet_cluster("fleet", "c1")).await;
    (leader, follower)
}

async fn setup() -> Harness {
    let h = Harness::new().await;
    h.namespace(LEASE_NAMESPACE, json!({})).await;
    h.namespace("fleet", json!({})).await;
    h.cluster("fleet", plain_cluster("c1")).await;
    h.initialize("fleet", "c1").await;
    h
}

#[tokio::test]
async fn exactly_one_replica_leads_and_reconciles() {
    let h = setup().await;
    let flags = elect(
        &h.flags,
        Duration::from_secs(4),
        Duration::from_secs(3),
        Duration::from_millis(200),
    );
    let (leader, follower) = two_replicas(&h, &flags).await;

    // More work arrives; only the leader does it.
    h.cluster("fleet", plain_cluster("c2")).await;
    h.initialize("fleet", "c2").await;
    eventually("c2 imported", || h.fleet_cluster("fleet", "c2")).await;
    // Give the follower a few retry periods to (wrongly) start anything.
    let settle = Instant::now() + Duration::from_millis(1000);
    eventually("time passes", || async {
        (Instant::now() >= settle).then_some(())
    })
    .await;
    assert!(!follower.is_leader());
    assert_eq!(total_reconciles(&follower), 0, "the follower reconciled");
    assert!(reconciles(&leader, "cluster") >= 2);
    assert_eq!(leader.ctx.metrics.leader.get(), 1);
    assert_eq!(follower.ctx.metrics.leader.get(), 0);

    let lease = lease(&h).await.expect("lease");
    assert_eq!(holder(&lease), leader.identity.clone());
    assert_eq!(transitions(&lease), 0);
    let spec = lease.spec.clone().unwrap_or_default();
    assert_eq!(spec.lease_duration_seconds, Some(4));

    // One writer: the Fleet Cluster's fields are owned by one apply manager, written once.
    let fleet = h.fleet_cluster("fleet", "c1").await.expect("c1");
    let appliers: Vec<_> = fleet
        .managed_fields()
        .iter()
        .filter(|m| m.operation.as_deref() == Some("Apply"))
        .filter_map(|m| m.manager.clone())
        .collect();
    assert_eq!(appliers, [caapf::names::FIELD_MANAGER]);

    // The new leader announced itself with an Event on the Lease.
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(h.client.clone(), LEASE_NAMESPACE);
    let announced = events
        .list(&Default::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .any(|e| {
            e.reason.as_deref() == Some("LeaderElection")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(LEASE_NAME)
        });
    assert!(announced, "LeaderElection event on the Lease");
    leader.stop().await;
    follower.stop().await;
}

#[tokio::test]
async fn graceful_stop_releases_the_lease_and_the_follower_takes_over_at_once() {
    let h = setup().await;
    // A long lease: without the release, a takeover would take at least 6 s.
    let flags = elect(
        &h.flags,
        Duration::from_secs(6),
        Duration::from_secs(4),
        Duration::from_millis(200),
    );
    let (leader, follower) = two_replicas(&h, &flags).await;
    let old_identity = leader.identity.clone();
    eventually("the follower saw the Lease", || async {
        (!follower.is_leader()).then_some(())
    })
    .await;

    let stopped = Instant::now();
    leader.stop().await;
    let released = lease(&h).await.expect("lease");
    // Either still released, or already taken by the follower.
    assert_ne!(holder(&released), old_identity, "the Lease was released");

    let mut leadership = follower.leadership();
    tokio::time::timeout(Duration::from_secs(3), leadership.wait_for(|l| *l))
        .await
        .expect("the follower takes over within 3 s (lease duration 6 s)")
        .expect("leadership channel");
    let took = stopped.elapsed();
    assert!(took < Duration::from_secs(3), "takeover took {took:?}");

    let lease = lease(&h).await.expect("lease");
    assert_eq!(holder(&lease), follower.identity.clone());
    assert_eq!(transitions(&lease), 1);

    // The new leader reconciles.
    h.cluster("fleet", plain_cluster("after")).await;
    h.initialize("fleet", "after").await;
    eventually("the new leader imports", || {
        h.fleet_cluster("fleet", "after")
    })
    .await;
    assert!(reconciles(&follower, "cluster") >= 1);
    follower.stop().await;
}

#[tokio::test]
async fn a_leader_that_stops_renewing_is_replaced_after_the_lease_duration() {
    let h = setup().await;
    let lease_duration = Duration::from_secs(2);
    let flags = elect(
        &h.flags,
        lease_duration,
        Duration::from_millis(1500),
        Duration::from_millis(200),
    );
    let (leader, follower) = two_replicas(&h, &flags).await;
    let old_identity = leader.identity.clone();

    // A crash: no release.
    leader.abort().await;
    let aborted = Instant::now();
    let last = lease(&h).await.expect("lease");
    assert_eq!(holder(&last), old_identity, "the Lease was not released");
    let last_renewal = renew_time(&last);

    let mut leadership = follower.leadership();
    tokio::time::timeout(Duration::from_secs(6), leadership.wait_for(|l| *l))
        .await
        .expect("the follower takes over")
        .expect("leadership channel");
    let waited = aborted.elapsed();

    let taken = lease(&h).await.expect("lease");
    assert_eq!(holder(&taken), follower.identity.clone());
    assert_eq!(transitions(&taken), 1);
    let acquired = taken
        .spec
        .as_ref()
        .and_then(|s| s.acquire_time.as_ref())
        .expect("acquireTime")
        .0;
    // Never before renewTime + leaseDurationSeconds ...
    let earliest = last_renewal
        .checked_add(k8s_openapi::jiff::SignedDuration::try_from(lease_duration).expect("d"))
        .expect("time");
    assert!(
        acquired >= earliest,
        "taken over at {acquired}, before the lease expired at {earliest}"
    );
    // ... and not much later (a few retry periods).
    assert!(
        waited < lease_duration + Duration::from_millis(1500),
        "takeover took {waited:?}"
    );
    follower.stop().await;
}

#[tokio::test]
async fn a_leader_cut_off_from_the_api_steps_down_within_the_renew_deadline() {
    let h = setup().await;
    let lease_duration = Duration::from_secs(3);
    let renew_deadline = Duration::from_secs(2);
    let flags = elect(
        &h.flags,
        lease_duration,
        renew_deadline,
        Duration::from_millis(200),
    );
    // The first replica's requests can be cut, as by a network partition.
    let cut = Arc::new(AtomicBool::new(false));
    let cuttable = ClientBuilder::try_from(sandbox_config(&h.sandbox).await)
        .expect("client")
        .with_layer(&CutLayer(cut.clone()))
        .build();
    let a = start(cuttable, &flags).await;
    eventually("the first replica leads", || async {
        a.is_leader().then_some(())
    })
    .await;
    let b = start(manager_client(&h.sandbox, &flags).await, &flags).await;
    eventually("c1 imported", || h.fleet_cluster("fleet", "c1")).await;

    let ctx = a.ctx.clone();
    let mut a_leading = a.leadership();
    let a_identity = a.identity.clone();
    let waiting = tokio::spawn(a.wait());
    cut.store(true, Ordering::SeqCst);
    let cut_at = Instant::now();

    // The cut-off leader stops leading within its renew deadline (plus one retry period, as the
    // last successful renewal may have been just before the cut) and exits with an error.
    tokio::time::timeout(
        renew_deadline + Duration::from_millis(500),
        a_leading.wait_for(|l| !*l),
    )
    .await
    .expect("stepped down within the renew deadline")
    .expect("leadership channel");
    let stepped_down = cut_at.elapsed();
    assert!(
        stepped_down < lease_duration,
        "stepped down after {stepped_down:?}"
    );
    assert_eq!(ctx.metrics.leader.get(), 0);
    let result = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("wait() returns")
        .expect("join");
    match result {
        Err(caapf::Error::LeadershipLost(reason)) => {
            assert!(reason.contains("renew deadline"), "{reason}")
        }
        other => panic!("expected LeadershipLost, got {other:?}"),
    }

    // The other replica takes over once the lease has expired, and reconciles.
    let mut b_leading = b.leadership();
    tokio::time::timeout(Duration::from_secs(6), b_leading.wait_for(|l| *l))
        .await
        .expect("the second replica takes over")
        .expect("leadership channel");
    assert!(cut_at.elapsed() >= lease_duration.saturating_sub(Duration::from_millis(200)));
    let lease = lease(&h).await.expect("lease");
    assert_eq!(holder(&lease), b.identity.clone());
    assert_ne!(holder(&lease), a_identity);
    h.cluster("fleet", plain_cluster("c2")).await;
    h.initialize("fleet", "c2").await;
    eventually("the new leader imports c2", || {
        h.fleet_cluster("fleet", "c2")
    })
    .await;
    b.stop().await;
}

#[tokio::test]
async fn without_leader_election_the_replica_leads_at_once() {
    let mut h = setup().await;
    h.start().await;
    let manager = h.manager.as_ref().expect("manager");
    assert!(manager.identity.is_none());
    eventually("leading", || async { manager.is_leader().then_some(()) }).await;
    eventually("c1 imported", || h.fleet_cluster("fleet", "c1")).await;
    assert_eq!(manager.ctx.metrics.leader.get(), 1);
    assert!(lease(&h).await.is_none(), "no Lease without --leader-elect");
    h.stop().await;
}

#[tokio::test]
async fn invalid_timings_are_refused_at_start() {
    let h = Harness::new().await;
    let flags = elect(
        &h.flags,
        Duration::from_secs(10),
        Duration::from_secs(10),
        Duration::from_secs(2),
    );
    let err = Manager::start(h.client.clone(), flags, CancellationToken::new())
        .await
        .err()
        .expect("renew deadline = lease duration is refused");
    assert!(
        err.to_string().contains("--leader-elect-lease-duration"),
        "{err}"
    );
}

/// A tower layer whose requests fail while the switch is on.
#[derive(Clone)]
struct CutLayer(Arc<AtomicBool>);

impl<S> tower::Layer<S> for CutLayer {
    type Service = Cut<S>;
    fn layer(&self, inner: S) -> Cut<S> {
        Cut {
            inner,
            cut: self.0.clone(),
        }
    }
}

struct Cut<S> {
    inner: S,
    cut: Arc<AtomicBool>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<S, R> tower::Service<R> for Cut<S>
where
    S: tower::Service<R, Error = BoxError>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        if self.cut.load(Ordering::SeqCst) {
            Box::pin(async { Err::<S::Response, BoxError>("connection cut by the test".into()) })
        } else {
            Box::pin(self.inner.call(request))
        }
    }
}

#[test]
fn the_lease_name_is_the_flag_default() {
    assert_eq!(ManagerFlags::default().leader_election_id, LEASE_NAME);
}

/// The binary as Kubernetes runs it: SIGTERM makes the leader release its Lease and exit 0.
#[tokio::test]
async fn sigterm_releases_the_lease_and_exits_cleanly() {
    let h = setup().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    h.sandbox.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_caapf"))
        .args([
            "--leader-elect",
            "--leader-elect-lease-duration=30s",
            "--leader-elect-renew-deadline=20s",
            "--leader-elect-retry-period=1s",
            "--metrics-bind-address=0",
            "--health-probe-bind-address=0",
            "--webhook-host=127.0.0.1",
            "--webhook-port=0",
        ])
        .env("KUBECONFIG", &kubeconfig)
        .env("POD_NAME", "caapf-controller-manager-abc")
        .env("POD_NAMESPACE", LEASE_NAMESPACE)
        .env_remove("RUST_LOG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .kill_on_drop(true)
        .spawn()
        .expect("caapf starts");
    let held = eventually("the binary holds the Lease", || async {
        lease(&h)
            .await
            .and_then(|l| holder(&l))
            .filter(|holder| holder.starts_with("caapf-controller-manager-abc_"))
    })
    .await;
    eventually("and reconciles", || h.fleet_cluster("fleet", "c1")).await;

    let pid = child.id().expect("pid").to_string();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill runs");
    assert!(status.success());
    let exit = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .expect("exits after SIGTERM")
        .expect("wait");
    assert!(exit.success(), "{exit:?}");
    let released = lease(&h).await.expect("lease");
    assert_eq!(holder(&released), None, "{held} released the Lease");
    assert_eq!(
        released
            .spec
            .as_ref()
            .and_then(|s| s.lease_duration_seconds),
        Some(1)
    );
}

/// The stop signal ends the leader tasks and the leadership task at the same moment; that is a
/// clean stop, never reported as a failed task (with and without leader election).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_is_never_reported_as_a_failure() {
    let h = setup().await;
    for leader_elect in [false, true] {
        let flags = if leader_elect {
            elect(
                &h.flags,
                Duration::from_secs(4),
                Duration::from_secs(3),
                Duration::from_millis(200),
            )
        } else {
            h.flags.clone()
        };
        for _ in 0..5 {
            let shutdown = CancellationToken::new();
            let manager = Manager::start(h.manager_client().await, flags.clone(), shutdown.clone())
                .await
                .expect("manager starts");
            let mut leading = manager.leadership();
            tokio::time::timeout(Duration::from_secs(10), leading.wait_for(|l| *l))
                .await
                .expect("leads")
                .expect("channel");
            shutdown.cancel();
            let result = tokio::time::timeout(Duration::from_secs(10), manager.wait())
                .await
                .expect("stops");
            assert!(result.is_ok(), "leader_elect={leader_elect}: {result:?}");
        }
    }
}
