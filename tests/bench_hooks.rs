//! Hook latency benchmark, as separate processes (ignored by default; `make bench-hooks` builds
//! the release binaries and runs it).
//!
//! 1. Prepares the input once: a `kube-sandbox` process (validating custom resources) with N
//!    initialized CAPI Clusters (`v1beta2`) in M namespaces, each with its bootstrap Secret
//!    (what BeforeClusterCreate leaves behind); saved as a sandbox snapshot.
//! 2. Starts a sandbox from the snapshot (read-only) and the `caapf` release binary at its
//!    defaults, serving the extension over TLS on 127.0.0.1 with a test CA; waits until the
//!    import has created all N Fleet Clusters and the manager is quiet (the hooks are measured
//!    beside a manager at steady state, not beside an import).
//! 3. For each of GeneratePatches (the kubeadm `v1beta2` fixture) and BeforeClusterCreate (the
//!    `v1beta2` fixture with `fleetAgent` set), each request for another Cluster: an **open
//!    loop** at a fixed rate (`BENCH_HOOK_RATE`, default 200 requests/s) for
//!    `BENCH_HOOK_SECONDS` (default 15 s) over one HTTP/2 TLS connection (Go's client, which
//!    Cluster API uses, multiplexes its requests over one), each request sent at its scheduled
//!    time whether or not the earlier ones were answered; latency is measured from the
//!    scheduled time (so a stalled server is not hidden by coordinated omission). Prints p50,
//!    p99 and max per hook, the rate achieved, and the manager's API requests during the load
//!    by verb (the sandbox request log, by User-Agent).
//!
//! Environment: `BENCH_CLUSTERS` (default 1000), `BENCH_NAMESPACES` (default N/100, between 10
//! and 100), `BENCH_HOOK_RATE`, `BENCH_HOOK_SECONDS`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::{StreamExt, stream};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::bench_common;
use crate::common;

use common::tls::{Ca, Connection};

use bench_common::{
    CONNECTIONS, PHASE_TIMEOUT, Process, binary, env_usize, free_port, load_average,
    manager_requests, namespace_of, reset_requests, sandbox, wait_for, wait_until_quiet,
};

async fn prepare(dir: &Path, clusters: usize, namespaces: usize) {
    std::fs::create_dir_all(dir.join("snapshot")).expect("snapshot dir");
    let (process, client, _) = sandbox(dir, true).await;
    let ns_api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    for n in 0..namespaces {
        let ns = serde_json::from_value(json!({"metadata": {"name": format!("ns-{n}")}}))
            .expect("namespace");
        ns_api
            .create(&PostParams::default(), &ns)
            .await
            .expect("create namespace");
    }
    stream::iter(0..clusters)
        .map(|i| {
            let client = client.clone();
            async move {
                let ns = namespace_of(i, namespaces);
                let name = format!("c-{i}");
                let api: Api<caapf::api::CapiCluster> = Api::namespaced(client.clone(), &ns);
                // The hook requests carry the Cluster (fixtures); the stored one only has to be
                // imported: initialized, so the import creates its Fleet Cluster.
                let cluster = serde_json::from_value(json!({
                    "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
                    "metadata": {"name": name, "namespace": ns},
                    "spec": {},
                }))
                .expect("cluster");
                api.create(&PostParams::default(), &cluster)
                    .await
                    .expect("create cluster");
                api.patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"initialization": {"controlPlaneInitialized": true}}})),
                )
                .await
                .expect("initialize");
                // What BeforeClusterCreate writes (the content does not matter here).
                let secrets: Api<k8s_openapi::api::core::v1::Secret> =
                    Api::namespaced(client, &ns);
                let secret = serde_json::from_value(json!({
                    "metadata": {"name": caapf::names::bootstrap_secret_name(&name), "namespace": ns,
                        "labels": {caapf::names::CAPI_CLUSTER_NAME_LABEL: name},
                        "annotations": {caapf::names::BOOTSTRAP_FORMAT_ANNOTATION: caapf::model::agent_patch::SCRIPT_FORMAT}},
                    "type": "Opaque",
                    "stringData": {
                        caapf::model::agent_patch::SCRIPT_KEY: "#!/bin/sh\n",
                        caapf::model::agent_patch::SCRIPT_GZIP_KEY: "H4sIAAAAAAACA1NW1E/KzNMvzuACAB2d+wQKAAAA",
                    },
                }))
                .expect("secret");
                secrets
                    .create(&PostParams::default(), &secret)
                    .await
                    .expect("create secret");
            }
        })
        .buffer_unordered(CONNECTIONS)
        .collect::<Vec<()>>()
        .await;
    process.stop();
    assert!(
        dir.join("snapshot/snapshot.json").exists(),
        "snapshot written"
    );
}

/// One HTTP/2 connection over TLS trusting `ca` (as Go's client, which Cluster API uses,
/// multiplexes its requests over one), `None` while the server does not answer.
async fn connect(port: u16, ca: &Ca) -> Option<Connection> {
    Connection::open(
        SocketAddr::from(([127, 0, 0, 1], port)),
        &ca.connector(&[b"h2"]),
    )
    .await
    .ok()
    .filter(|connection| connection.alpn.as_deref() == Some(b"h2".as_slice()))
}

/// POSTs `body` to `path`; the answer's `status` field (`Success`/`Failure`) and body.
async fn post(connection: &Connection, path: &str, body: Bytes) -> Result<Value, String> {
    connection.post(path, body).await?.json()
}

fn fixture(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/hooks")
        .join(name);
    serde_json::from_slice(&std::fs::read(path).expect("fixture")).expect("fixture JSON")
}

/// The requests of one hook, one per Cluster, and the path to post them to.
struct Workload {
    hook: &'static str,
    path: String,
    bodies: Vec<Bytes>,
    /// Whether an answer is the one expected (a patch; a Success without retry).
    check: fn(&Value) -> bool,
}

fn generate_patches(clusters: usize, namespaces: usize) -> Workload {
    let fixture = fixture("generate-patches-kubeadm-v1beta2.json");
    let bodies = (0..clusters)
        .map(|i| {
            let mut request = fixture["request"].clone();
            for variable in request["variables"].as_array_mut().expect("variables") {
                if variable["name"] == "builtin" {
                    variable["value"]["cluster"]["name"] = json!(format!("c-{i}"));
                    variable["value"]["cluster"]["namespace"] = json!(namespace_of(i, namespaces));
                }
            }
            Bytes::from(serde_json::to_vec(&request).expect("json"))
        })
        .collect();
    Workload {
        hook: "GeneratePatches",
        path: fixture["path"].as_str().expect("path").to_string(),
        bodies,
        // The control-plane template (the second item) gets the bootstrap.
        check: |answer| {
            answer["status"] == "Success"
                && answer["items"][1]["patch"]
                    .as_str()
                    .is_some_and(|p| p.len() > 8)
        },
    }
}

fn before_cluster_create(clusters: usize, namespaces: usize) -> Workload {
    let fixture = fixture("before-cluster-create-v1beta2-no-fleet-agent-variable.json");
    let bodies = (0..clusters)
        .map(|i| {
            let mut request = fixture["request"].clone();
            let cluster = &mut request["cluster"];
            cluster["metadata"]["name"] = json!(format!("c-{i}"));
            cluster["metadata"]["namespace"] = json!(namespace_of(i, namespaces));
            cluster["spec"]["topology"]["variables"] =
                json!([{"name": "fleetAgent", "value": {"enabled": true}}]);
            Bytes::from(serde_json::to_vec(&request).expect("json"))
        })
        .collect();
    let path = fixture["path"].as_str().expect("path");
    Workload {
        hook: "BeforeClusterCreate",
        path: path.strip_prefix("/prefix").unwrap_or(path).to_string(),
        bodies,
        check: |answer| {
            answer["status"] == "Success" && answer["retryAfterSeconds"].as_i64().unwrap_or(0) == 0
        },
    }
}

/// Latency figures of one hook.
struct Figures {
    sent: usize,
    unexpected: usize,
    achieved_rate: f64,
    p50: Duration,
    p99: Duration,
    max: Duration,
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((sorted.len() as f64) * q).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Open loop: request `k` is sent at `start + k / rate` whatever happened to the earlier ones;
/// its latency counts from that scheduled time.
async fn open_loop(
    connection: &Connection,
    workload: &Workload,
    rate: usize,
    seconds: usize,
) -> Figures {
    let total = rate * seconds;
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    let start = tokio::time::Instant::now() + Duration::from_millis(50);
    let mut tasks = tokio::task::JoinSet::new();
    for k in 0..total {
        let scheduled = start + interval * k as u32;
        tokio::time::sleep_until(scheduled).await;
        let connection = connection.clone();
        let body = workload.bodies[k % workload.bodies.len()].clone();
        let (path, check) = (workload.path.clone(), workload.check);
        tasks.spawn(async move {
            let answer = post(&connection, &path, body).await;
            let latency = scheduled.elapsed();
            let expected = answer.as_ref().is_ok_and(check);
            if !expected && k < 3 {
                eprintln!("unexpected answer: {answer:?}");
            }
            (latency, expected)
        });
    }
    let mut latencies = Vec::with_capacity(total);
    let mut unexpected = 0;
    while let Some(done) = tasks.join_next().await {
        let (latency, expected) = done.expect("request task");
        latencies.push(latency);
        unexpected += usize::from(!expected);
    }
    let elapsed = start.elapsed().as_secs_f64();
    latencies.sort();
    Figures {
        sent: total,
        unexpected,
        achieved_rate: total as f64 / elapsed,
        p50: quantile(&latencies, 0.50),
        p99: quantile(&latencies, 0.99),
        max: latencies.last().copied().unwrap_or_default(),
    }
}

fn by_verb(requests: &[Value]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for r in requests {
        let key = format!(
            "{} {}",
            r["verb"].as_str().unwrap_or("?"),
            r["resource"].as_str().unwrap_or("?")
        );
        *counts.entry(key).or_default() += 1;
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run with `make bench-hooks`"]
async fn hook_latency_benchmark() {
    let clusters = env_usize("BENCH_CLUSTERS", 1000);
    let namespaces = env_usize("BENCH_NAMESPACES", (clusters / 100).clamp(10, 100));
    let rate = env_usize("BENCH_HOOK_RATE", 200);
    let seconds = env_usize("BENCH_HOOK_SECONDS", 15);
    let dir = tempfile::tempdir().expect("temp dir");
    eprintln!("load average at start: {}", load_average());
    let prepared = Instant::now();
    prepare(dir.path(), clusters, namespaces).await;
    eprintln!(
        "prepared {clusters} Clusters and bootstrap Secrets in {namespaces} namespaces in {:.1} s",
        prepared.elapsed().as_secs_f64()
    );

    let (sandbox, client, kubeconfig) = sandbox(dir.path(), false).await;
    let ca = Ca::new();
    ca.install_serving(&dir.path().join("certs"), "caapf extension");
    let webhook_port = free_port();
    let manager = Process::new(
        Command::new(binary("caapf"))
            .env("KUBECONFIG", &kubeconfig)
            .arg("--health-probe-bind-address=0")
            .arg("--metrics-bind-address=0")
            .arg("--webhook-host=127.0.0.1")
            .arg(format!("--webhook-port={webhook_port}"))
            .arg(format!(
                "--webhook-cert-dir={}",
                dir.path().join("certs").display()
            ))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start caapf"),
        "caapf",
    );
    // Steady state: the import done and the manager quiet.
    let fleet: Api<fleet_api_rs::fleet_cluster::Cluster> = Api::all(client.clone());
    wait_for("all Fleet Clusters", || async {
        fleet
            .list_metadata(&ListParams::default().limit(1))
            .await
            .map(|l| l.items.len() + l.metadata.remaining_item_count.unwrap_or(0) as usize)
            .unwrap_or(0)
            == clusters
    })
    .await;
    wait_until_quiet(&client).await;
    let deadline = Instant::now() + PHASE_TIMEOUT;
    let connection = loop {
        if let Some(connection) = connect(webhook_port, &ca).await {
            break connection;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for the extension over TLS"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

    println!(
        "\n| hook ({clusters} Clusters / {namespaces} namespaces, {rate} req/s for {seconds} s, open loop, TLS) | requests | achieved rate | p50 | p99 | max | unexpected answers | manager API requests during the load |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for workload in [
        generate_patches(clusters, namespaces),
        before_cluster_create(clusters, namespaces),
    ] {
        // A short warm-up (connection windows, the manager's caches), not measured.
        let _ = open_loop(&connection, &workload, rate, 1).await;
        reset_requests(&client).await;
        let figures = open_loop(&connection, &workload, rate, seconds).await;
        let requests = by_verb(&manager_requests(&client).await);
        let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1000.0);
        println!(
            "| {} | {} | {:.1}/s | {} | {} | {} | {} | {} |",
            workload.hook,
            figures.sent,
            figures.achieved_rate,
            ms(figures.p50),
            ms(figures.p99),
            ms(figures.max),
            figures.unexpected,
            if requests.is_empty() {
                "none".to_string()
            } else {
                requests
                    .iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        );
        assert_eq!(
            figures.unexpected, 0,
            "{}: unexpected answers",
            workload.hook
        );
        assert!(
            !requests.keys().any(|k| k.starts_with("LIST")),
            "{}: no LIST per request: {requests:?}",
            workload.hook
        );
    }
    eprintln!("load average at end: {}", load_average());
    manager.stop();
    sandbox.stop();
}
