//! Import benchmark, as separate processes (ignored by default; `make bench` builds the release
//! binaries and runs it).
//!
//! 1. Prepares the input once: a `kube-sandbox` process (validating custom resources, as a real
//!    server does) with N CAPI Clusters in M namespaces, a fifth of them using a ClusterClass from
//!    another namespace, all with initialized control planes (and, by default, real-shaped, with
//!    their referenced objects: `BENCH_SHAPE`); saved as a sandbox snapshot.
//! 2. The floor: a bare client creating the same N Fleet Clusters (8 connections) against a
//!    sandbox started from the snapshot.
//! 3. For each manager mode (its defaults, then each of `BENCH_MODES`): a sandbox from the
//!    snapshot (read-only), the `caapf` binary started against it; time until all N Fleet
//!    Clusters exist, the manager's requests per Cluster by verb (from the sandbox request log,
//!    by User-Agent), CPU seconds and peak RSS of the manager and of the sandbox; then a
//!    restart: time until every Cluster was reconciled again (the manager's own metric) and the
//!    writes it made. After the table, the reconciles of the cluster, health and namespace controllers
//!    when the import and the restart were done.
//!
//! Environment: `BENCH_CLUSTERS` (default 1000), `BENCH_NAMESPACES` (default N/20, between 10
//! and 100), `BENCH_MODES` (`;`-separated extra manager flags, default
//! `--kube-api-qps=100 --kube-api-burst=200`, Cluster API's own values; empty: defaults only),
//! `BENCH_MANAGER_WRAPPER` (a command the manager runs under, e.g. a heap profiler),
//! `BENCH_SANDBOX_WRAPPER` (the same for the sandbox of the runs, e.g. `perf record -o FILE --`),
//! `BENCH_SANDBOX_ARGS` (extra `kube-sandbox` flags for the runs, e.g. `--no-watch-list`),
//! `BENCH_SHAPE` (`provisioned`, the default: each Cluster real-shaped, with Cluster API's status
//! and the KubeadmControlPlane and DockerCluster it references; `minimal`: a bare Cluster).
//! A mode naming `waves` (e.g. `BENCH_MODES=waves`) gives every Cluster a wave (the topology
//! variable `wave`, the `rollout-wave` annotation without a topology) and, for that mode, a
//! FleetAddonConfig with `spec.cluster.rollout` and `variableLabels` ([`waves_config`]); its
//! import is done when every Fleet Cluster carries its wave label.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use futures::{StreamExt, stream};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};

use crate::bench_common;

use bench_common::{
    CONNECTIONS, Process, Usage, binary, env_usize, free_port, manager_requests, namespace_of,
    reset_requests, sandbox, wait_for, wait_until_quiet, wrapped,
};

async fn run_all<F>(n: usize, f: impl Fn(usize) -> F)
where
    F: Future<Output = ()>,
{
    stream::iter(0..n)
        .map(f)
        .buffer_unordered(CONNECTIONS)
        .collect::<Vec<()>>()
        .await;
}

/// `BENCH_SHAPE`: `provisioned` (default) stamps each workload cluster from
/// `tests/fixtures/capi/` (a provisioned Cluster with Cluster API's status, its
/// KubeadmControlPlane and DockerCluster); `minimal` is the bare Cluster earlier figures used.
fn shape_is_provisioned() -> bool {
    match std::env::var("BENCH_SHAPE").as_deref() {
        Ok("minimal") => false,
        Ok("provisioned") | Err(_) => true,
        Ok(other) => panic!("BENCH_SHAPE={other}: expected provisioned or minimal"),
    }
}

/// A Cluster with nothing but a name, a label and, for a fifth, a topology; and its status.
fn minimal_cluster(i: usize, ns: &str) -> (Value, Value) {
    let spec = if i.is_multiple_of(5) {
        json!({"topology": {"classRef": {"name": "quick-start", "namespace": "classes"}, "version": "v1.35.0", "variables": []}})
    } else {
        json!({})
    };
    let cluster = json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": format!("c-{i}"), "namespace": ns, "labels": {"bench": "yes"}},
        "spec": spec,
    });
    (
        cluster,
        json!({"initialization": {"controlPlaneInitialized": true}}),
    )
}

/// The waves of the `waves` mode, and the wave of Cluster `i`.
const WAVES: [&str; 3] = ["canary", "early", "rest"];

/// Gives `cluster` (number `i`) its wave: the topology variable `wave`, else the annotation.
fn with_wave(i: usize, cluster: &mut Value) {
    let wave = WAVES[i % WAVES.len()];
    match (cluster.pointer_mut("/spec/topology/variables")).and_then(Value::as_array_mut) {
        Some(variables) => variables.push(json!({"name": "wave", "value": wave})),
        None => {
            cluster["metadata"]["annotations"][caapf::names::ROLLOUT_WAVE_ANNOTATION] = json!(wave)
        }
    }
}

/// The FleetAddonConfig of the `waves` mode: the import of the "object absent" regime, with
/// rollout waves from the topology variable `wave` and that variable as a label.
fn waves_config() -> Value {
    json!({
        "apiVersion": "addons.cluster.x-k8s.io/v1alpha1", "kind": "FleetAddonConfig",
        "metadata": {"name": "fleet-addon-config"},
        "spec": {
            "cluster": {"applyClassGroup": true, "patchResource": true, "setOwnerReferences": true,
                "variableLabels": ["wave"],
                "rollout": {"waveVariable": "wave", "waves": WAVES, "soak": "10m", "kubernetesUpgrades": true}},
            "clusterClass": {"patchResource": true, "setOwnerReferences": true},
        },
    })
}

/// The real-shaped objects one workload cluster is stamped from.
struct Fixtures {
    cluster: Value,
    control_plane: Value,
    infrastructure: Value,
}

impl Fixtures {
    fn load() -> Self {
        let read = |name: &str| -> Value {
            let path = format!("{}/tests/fixtures/capi/{name}", env!("CARGO_MANIFEST_DIR"));
            serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("JSON")
        };
        Self {
            cluster: read("cluster-provisioned-v1beta2.json"),
            control_plane: read("kubeadmcontrolplane-provisioned-v1beta2.json"),
            infrastructure: read("dockercluster-provisioned-v1beta2.json"),
        }
    }

    /// Cluster `i` and its status: a fifth use the ClusterClass from another namespace, the
    /// rest have no topology (their references stay).
    fn cluster(&self, i: usize, ns: &str) -> (Value, Value) {
        let name = format!("c-{i}");
        let mut cluster = self.cluster.clone();
        let status = cluster
            .as_object_mut()
            .and_then(|c| c.remove("status"))
            .expect("status");
        cluster["metadata"]["name"] = json!(name);
        cluster["metadata"]["namespace"] = json!(ns);
        cluster["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"] = json!(name);
        cluster["metadata"]["labels"]["bench"] = json!("yes");
        cluster["spec"]["controlPlaneRef"]["name"] = json!(format!("{name}-cp"));
        cluster["spec"]["infrastructureRef"]["name"] = json!(format!("{name}-infra"));
        if !i.is_multiple_of(5) {
            let spec = cluster["spec"].as_object_mut().expect("spec");
            spec.remove("topology");
        }
        (cluster, status)
    }

    /// The KubeadmControlPlane and DockerCluster of Cluster `i`, owned by it.
    fn references(&self, i: usize, ns: &str, uid: &str) -> Vec<(ApiResource, Value)> {
        let cluster = format!("c-{i}");
        [
            (
                &self.control_plane,
                format!("{cluster}-cp"),
                "kubeadmcontrolplanes",
            ),
            (
                &self.infrastructure,
                format!("{cluster}-infra"),
                "dockerclusters",
            ),
        ]
        .into_iter()
        .map(|(fixture, name, plural)| {
            let mut object = fixture.clone();
            object.as_object_mut().expect("object").remove("status");
            object["metadata"]["name"] = json!(name);
            object["metadata"]["namespace"] = json!(ns);
            object["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"] = json!(cluster);
            object["metadata"]["ownerReferences"][0]["name"] = json!(cluster);
            object["metadata"]["ownerReferences"][0]["uid"] = json!(uid);
            let (group, version) = object["apiVersion"]
                .as_str()
                .and_then(|v| v.split_once('/'))
                .expect("apiVersion");
            let gvk = GroupVersionKind::gvk(group, version, object["kind"].as_str().expect("kind"));
            (ApiResource::from_gvk_with_plural(&gvk, plural), object)
        })
        .collect()
    }
}

async fn prepare(dir: &Path, clusters: usize, namespaces: usize, waves: bool) -> Duration {
    std::fs::create_dir_all(dir.join("snapshot")).expect("snapshot dir");
    let (process, client, _) = sandbox(dir, true).await;
    let started = Instant::now();
    let ns_api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    for name in
        std::iter::once("classes".to_string()).chain((0..namespaces).map(|n| format!("ns-{n}")))
    {
        let ns = serde_json::from_value(json!({"metadata": {"name": name}})).expect("namespace");
        ns_api
            .create(&PostParams::default(), &ns)
            .await
            .expect("create namespace");
    }
    let classes: Api<caapf::api::CapiClusterClass> = Api::namespaced(client.clone(), "classes");
    let class = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "ClusterClass",
        "metadata": {"name": "quick-start", "namespace": "classes", "labels": {"tier": "bench"}},
        "spec": {
            "controlPlane": {"templateRef": {"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlaneTemplate", "name": "cp"}},
            "infrastructure": {"templateRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "DockerClusterTemplate", "name": "infra"}}
        }
    }))
    .expect("class");
    classes
        .create(&PostParams::default(), &class)
        .await
        .expect("create class");
    let provisioned = shape_is_provisioned();
    let fixtures = Fixtures::load();
    run_all(clusters, |i| {
        let client = client.clone();
        let fixtures = &fixtures;
        async move {
            let ns = namespace_of(i, namespaces);
            let name = format!("c-{i}");
            let api: Api<caapf::api::CapiCluster> = Api::namespaced(client.clone(), &ns);
            let (mut cluster, status) = if provisioned {
                fixtures.cluster(i, &ns)
            } else {
                minimal_cluster(i, &ns)
            };
            if waves {
                with_wave(i, &mut cluster);
            }
            let cluster = serde_json::from_value(cluster).expect("cluster");
            let created = api
                .create(&PostParams::default(), &cluster)
                .await
                .expect("create cluster");
            api.patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await
            .expect("status");
            if provisioned {
                let uid = created.metadata.uid.expect("uid");
                for (resource, object) in fixtures.references(i, &ns, &uid) {
                    let api: Api<DynamicObject> =
                        Api::namespaced_with(client.clone(), &ns, &resource);
                    let object: DynamicObject = serde_json::from_value(object).expect("object");
                    api.create(&PostParams::default(), &object)
                        .await
                        .expect("create referenced object");
                }
            }
        }
    })
    .await;
    let took = started.elapsed();
    process.stop();
    assert!(
        dir.join("snapshot/snapshot.json").exists(),
        "snapshot written"
    );
    took
}

/// A bare client creating the N Fleet Clusters the import creates.
async fn floor(dir: &Path, clusters: usize, namespaces: usize) -> (Duration, Usage) {
    let (process, client, _) = sandbox(dir, false).await;
    let started = Instant::now();
    run_all(clusters, |i| {
        let client = client.clone();
        async move {
            let ns = namespace_of(i, namespaces);
            let api: Api<fleet_api_rs::fleet_cluster::Cluster> = Api::namespaced(client, &ns);
            let fleet = serde_json::from_value(json!({
                "apiVersion": "fleet.cattle.io/v1alpha1", "kind": "Cluster",
                "metadata": {"name": format!("c-{i}"), "namespace": ns, "labels": {"bench": "yes"}},
                "spec": {"kubeConfigSecret": format!("c-{i}-kubeconfig")},
            }))
            .expect("fleet cluster");
            api.create(&PostParams::default(), &fleet)
                .await
                .expect("create fleet cluster");
        }
    })
    .await;
    let took = started.elapsed();
    (took, process.stop())
}

fn start_manager(kubeconfig: &Path, metrics_port: u16, extra: &[String]) -> Process {
    // `BENCH_MANAGER_WRAPPER="heaptrack -o /tmp/caapf"` runs the manager under a profiler (the
    // CPU and RSS figures are then the wrapper's).
    let mut command = wrapped("BENCH_MANAGER_WRAPPER", &binary("caapf"));
    let child = command
        .env("KUBECONFIG", kubeconfig)
        .arg("--health-probe-bind-address=0")
        .arg(format!("--metrics-bind-address=127.0.0.1:{metrics_port}"))
        .arg("--webhook-host=127.0.0.1")
        .arg(format!("--webhook-port={}", free_port()))
        .arg("--sync-period=1h")
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start caapf");
    Process::new(child, "caapf")
}

/// `caapf_controller_reconciliations_total{controller="<controller>"}` of a running manager.
fn reconciles(port: u16, controller: &str) -> u64 {
    let label = format!("controller=\"{controller}\"");
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return 0;
    };
    let _ = stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n");
    let mut body = String::new();
    let _ = stream.read_to_string(&mut body);
    body.lines()
        .find(|l| l.starts_with("caapf_controller_reconciliations_total") && l.contains(&label))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .unwrap_or(0)
}

fn by_verb(requests: &[Value]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for r in requests {
        *counts
            .entry(r["verb"].as_str().unwrap_or("?").to_string())
            .or_default() += 1;
    }
    counts
}

fn is_state_write(r: &Value) -> bool {
    !matches!(r["verb"].as_str(), Some("GET" | "LIST" | "WATCH"))
        && r["resource"] != "events"
        && r["resource"] != "leases"
}

/// One manager mode's figures.
struct Run {
    mode: String,
    import: Duration,
    requests: BTreeMap<String, usize>,
    manager: Usage,
    sandbox_cpu_s: f64,
    sandbox_peak_rss_mib: f64,
    restart: Duration,
    restart_writes: usize,
    restart_requests: BTreeMap<String, usize>,
    restart_manager: Usage,
    /// Reconciles per [`COUNTED`] controller when the import was done, and when the restart was.
    reconciles: ([u64; 3], [u64; 3]),
}

async fn run_mode(dir: &Path, clusters: usize, namespaces: usize, mode: &[String]) -> Run {
    let (sandbox, client, kubeconfig) = sandbox(dir, false).await;
    let waves = mode.iter().any(|m| m == "waves");
    let extra: Vec<String> = mode.iter().filter(|m| *m != "waves").cloned().collect();
    if waves {
        let resource = ApiResource::erase::<caapf::api::FleetAddonConfig>(&());
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let config = serde_json::from_value(waves_config()).expect("FleetAddonConfig");
        api.create(&PostParams::default(), &config)
            .await
            .expect("create FleetAddonConfig");
    }
    let sandbox_before = sandbox.usage();
    let fleet: Api<fleet_api_rs::fleet_cluster::Cluster> = Api::all(client.clone());
    // A one-item page says how many there are (remainingItemCount) without the sandbox
    // serialising all of them ten times a second, which would compete with the manager.
    let done = match waves {
        true => ListParams::default().labels(caapf::names::ROLLOUT_WAVE_LABEL),
        false => ListParams::default(),
    };
    let count = || async {
        fleet
            .list_metadata(&done.clone().limit(1))
            .await
            .map(|l| l.items.len() + l.metadata.remaining_item_count.unwrap_or(0) as usize)
            .unwrap_or(0)
    };
    let port = free_port();
    let started = Instant::now();
    let manager = start_manager(&kubeconfig, port, &extra);
    wait_for("all Fleet Clusters", || async { count().await == clusters }).await;
    let import = started.elapsed();
    let sandbox_import = sandbox.usage();
    // The namespace-level objects follow; then the manager goes quiet.
    let ns_api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    wait_for("every namespace annotated", || async {
        ns_api
            .list_metadata(&ListParams::default())
            .await
            .map(|l| {
                l.items
                    .iter()
                    .filter(|n| {
                        n.metadata.annotations.as_ref().is_some_and(|a| {
                            a.contains_key(caapf::names::FLEET_WORKSPACE_ANNOTATION)
                        })
                    })
                    .count()
                    == namespaces
            })
            .unwrap_or(false)
    })
    .await;
    wait_until_quiet(&client).await;
    let requests = by_verb(&manager_requests(&client).await);
    let import_reconciles = counted_reconciles(port);
    let manager_usage = manager.stop();

    reset_requests(&client).await;
    let restarted = Instant::now();
    let manager = start_manager(&kubeconfig, port, &extra);
    wait_for("every Cluster reconciled after the restart", || async {
        reconciles(port, "cluster") >= clusters as u64
    })
    .await;
    let restart = restarted.elapsed();
    let logged = manager_requests(&client).await;
    let restart_writes = logged.iter().filter(|r| is_state_write(r)).count();
    let restart_reconciles = counted_reconciles(port);
    let restart_manager = manager.stop();
    let sandbox_end = sandbox.stop();
    Run {
        mode: if mode.is_empty() {
            "defaults".into()
        } else {
            mode.join(" ")
        },
        import,
        requests,
        manager: manager_usage,
        sandbox_cpu_s: sandbox_import.cpu_s - sandbox_before.cpu_s,
        sandbox_peak_rss_mib: sandbox_end.peak_rss_mib,
        restart,
        restart_writes,
        restart_requests: by_verb(&logged),
        restart_manager,
        reconciles: (import_reconciles, restart_reconciles),
    }
}

/// The controllers whose reconciles a run reports.
const COUNTED: [&str; 3] = ["cluster", "health", "namespace"];

fn counted_reconciles(port: u16) -> [u64; 3] {
    COUNTED.map(|controller| reconciles(port, controller))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run with `make bench`"]
async fn import_benchmark() {
    let clusters = env_usize("BENCH_CLUSTERS", 1000);
    let namespaces = env_usize("BENCH_NAMESPACES", (clusters / 20).clamp(10, 100));
    let modes: Vec<Vec<String>> = std::iter::once(Vec::new())
        .chain(
            std::env::var("BENCH_MODES")
                .unwrap_or_else(|_| "--kube-api-qps=100 --kube-api-burst=200".into())
                .split(';')
                .map(|m| m.split_whitespace().map(str::to_string).collect::<Vec<_>>())
                .filter(|m| !m.is_empty()),
        )
        .collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let loadavg = || std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average at start: {}", loadavg().trim());

    let waves = modes.iter().flatten().any(|m| m == "waves");
    let setup = prepare(dir.path(), clusters, namespaces, waves).await;
    println!(
        "input: {clusters} {} Clusters in {namespaces} namespaces (a fifth using a ClusterClass from another namespace), prepared in {setup:.1?}",
        if shape_is_provisioned() {
            "provisioned (with KubeadmControlPlane and DockerCluster)"
        } else {
            "minimal"
        }
    );
    let (floor_time, floor_sandbox) = floor(dir.path(), clusters, namespaces).await;
    let mut runs = Vec::new();
    for extra in &modes {
        runs.push(run_mode(dir.path(), clusters, namespaces, extra).await);
    }

    let per_cluster = |n: usize| n as f64 / clusters as f64;
    println!();
    println!(
        "| {clusters} Clusters / {namespaces} namespaces | time to all Fleet Clusters | requests per Cluster (by verb) | manager CPU s / peak RSS | sandbox CPU s / peak RSS | restart: all reconciled after | restart: writes / requests | restarted manager CPU s / peak RSS |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    println!(
        "| floor: bare client, {CONNECTIONS} connections, POST only | {:.2} s | 1.00 (POST {clusters}) | — | {:.1} s / {:.0} MiB | — | — | — |",
        floor_time.as_secs_f64(),
        floor_sandbox.cpu_s,
        floor_sandbox.peak_rss_mib
    );
    for run in &runs {
        let total: usize = run.requests.values().sum();
        let verbs: Vec<String> = run
            .requests
            .iter()
            .map(|(verb, n)| format!("{verb} {:.2}", per_cluster(*n)))
            .collect();
        let restart_verbs: Vec<String> = run
            .restart_requests
            .iter()
            .map(|(verb, n)| format!("{verb} {n}"))
            .collect();
        println!(
            "| caapf, {} | {:.2} s | {:.2} ({}) | {:.1} s / {:.0} MiB | {:.1} s / {:.0} MiB | {:.2} s | {} / {} | {:.1} s / {:.0} MiB |",
            run.mode,
            run.import.as_secs_f64(),
            per_cluster(total),
            verbs.join(", "),
            run.manager.cpu_s,
            run.manager.peak_rss_mib,
            run.sandbox_cpu_s,
            run.sandbox_peak_rss_mib,
            run.restart.as_secs_f64(),
            run.restart_writes,
            restart_verbs.join(", "),
            run.restart_manager.cpu_s,
            run.restart_manager.peak_rss_mib,
        );
    }
    println!();
    for run in &runs {
        let (import, restart) = run.reconciles;
        let counts: Vec<String> = COUNTED
            .iter()
            .enumerate()
            .map(|(i, controller)| format!("{controller} {} / {}", import[i], restart[i]))
            .collect();
        println!(
            "{}: reconciles (import / restart): {}",
            run.mode,
            counts.join(", ")
        );
    }
    println!("load average at end: {}", loadavg().trim());
    for run in &runs {
        assert_eq!(run.restart_writes, 0, "{}: a restart wrote", run.mode);
    }
}
