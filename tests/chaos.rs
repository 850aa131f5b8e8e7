//! Chaos: the manager binary as a separate process, killed with SIGKILL again and again while
//! the sandbox fails writes (500, 429, 409 on PATCH/APPLY, each rule drawing independently from
//! a seeded stream) and closes every watch every few seconds; Clusters and a whole namespace
//! are deleted under the same faults with more kills. Then the faults stop, one manager runs,
//! and the invariants must hold: every selected Cluster has exactly one correct Fleet Cluster,
//! nothing extra, no finalizer left on a deleted object, class groups, cross-namespace groups
//! and BundleNamespaceMappings exactly where needed, and no write in the quiet period after.
//!
//! `make test` runs it small (60 Clusters, 3 namespaces, 5 + 5 kills); `make chaos` runs it at
//! the size of issue #16 with the parameters below (environment variables):
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `CHAOS_CLUSTERS` | 60 | Clusters created |
//! | `CHAOS_NAMESPACES` | 3 | namespaces they are spread over (one is deleted) |
//! | `CHAOS_KILLS` | 5 | SIGKILLs while importing, and again while deleting |
//! | `CHAOS_ERROR_RATE` | 0.10 | fraction of writes answered 500 |
//! | `CHAOS_THROTTLE_RATE` | 0.05 | fraction of writes answered 429 |
//! | `CHAOS_CONFLICT_RATE` | 0.05 | fraction of PATCH/APPLY answered 409 |
//! | `CHAOS_WATCH_CLOSE_SECONDS` | 3 | every watch is closed this often |
//! | `CHAOS_QUIET_SECONDS` | 10 | quiet period that must see no write |
//! | `CHAOS_SEED` | 16 | seed of the fault draws |
//! | `CHAOS_KEEP_LOGS` | unset | set: keep the managers' logs and print where |

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::{Duration, Instant};

use caapf::api::{BundleNamespaceMapping, CapiCluster, FleetAddonConfig};
use caapf::names;
use common::Harness;
use common::process::{ManagerProcess, log_levels};
use fleet_api_rs::fleet_cluster::Cluster as FleetCluster;
use fleet_api_rs::fleet_clustergroup::ClusterGroup;
use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use kube_sandbox::{FaultConfig, FaultRule, FaultTarget};
use serde_json::{Value, json};

const CLASS_NAMESPACE: &str = "classes";
const CLASS: &str = "qs";

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Params {
    clusters: usize,
    namespaces: usize,
    kills: usize,
    error_rate: f64,
    throttle_rate: f64,
    conflict_rate: f64,
    watch_close_seconds: f64,
    quiet: Duration,
    seed: u64,
}

impl Params {
    fn from_env() -> Self {
        Self {
            clusters: env("CHAOS_CLUSTERS", 60),
            namespaces: env("CHAOS_NAMESPACES", 3usize).max(2),
            kills: env("CHAOS_KILLS", 5),
            error_rate: env("CHAOS_ERROR_RATE", 0.10),
            throttle_rate: env("CHAOS_THROTTLE_RATE", 0.05),
            conflict_rate: env("CHAOS_CONFLICT_RATE", 0.05),
            watch_close_seconds: env("CHAOS_WATCH_CLOSE_SECONDS", 3.0),
            quiet: Duration::from_secs(env("CHAOS_QUIET_SECONDS", 10)),
            seed: env("CHAOS_SEED", 16),
        }
    }

    fn faults(&self) -> FaultConfig {
        let mut conflict = FaultRule::fail(FaultTarget::Writes, self.conflict_rate, 409);
        conflict.verbs = Some(vec!["PATCH".into(), "APPLY".into()]);
        FaultConfig {
            rules: vec![
                FaultRule::fail(FaultTarget::Writes, self.error_rate, 500),
                FaultRule::fail(FaultTarget::Writes, self.throttle_rate, 429),
                conflict,
            ],
            seed: Some(self.seed),
            close_watches_every_seconds: Some(self.watch_close_seconds),
            ..Default::default()
        }
    }
}

fn namespace_name(i: usize) -> String {
    format!("team-{i}")
}

/// Every other Cluster uses the class from the class namespace (cross-namespace group and
/// mapping); the others are plain.
fn cluster_body(i: usize) -> Value {
    let name = format!("c{i:05}");
    if i.is_multiple_of(2) {
        json!({
            "metadata": {"name": name, "labels": {"chaos": "yes", "index": i.to_string()}},
            "spec": {"topology": {"classRef": {"name": CLASS, "namespace": CLASS_NAMESPACE}, "version": "v1.35.0"}}
        })
    } else {
        json!({"metadata": {"name": name, "labels": {"chaos": "yes", "index": i.to_string()}}, "spec": {}})
    }
}

/// Retries a request of the test itself while the sandbox injects faults.
async fn retrying<T, F, Fut>(what: &str, mut call: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    for _ in 0..200 {
        match call().await {
            Ok(value) => return value,
            Err(kube::Error::Api(status)) if [409, 429, 500].contains(&status.code) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(err) => panic!("{what}: {err}"),
        }
    }
    panic!("{what}: still failing after 200 attempts")
}

/// Deletes an object, done when it is gone or going.
async fn delete<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    retrying("delete", || async {
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(err) => Err(err),
        }
    })
    .await
}

/// What must exist after convergence, given the Clusters that remain.
struct Expected {
    /// namespace → names of the Clusters (and so of their Fleet Clusters).
    clusters: BTreeMap<String, BTreeSet<String>>,
    /// Namespaces with a Cluster using the class from the class namespace.
    classy_namespaces: BTreeSet<String>,
    /// Namespaces that must be gone.
    gone_namespaces: BTreeSet<String>,
    /// Clusters deleted: must be gone (no finalizer left holding them).
    deleted: BTreeSet<(String, String)>,
}

/// Every violated invariant, empty when all hold.
async fn violations(h: &Harness, expected: &Expected) -> Vec<String> {
    let mut problems = Vec::new();
    let client = h.client.clone();
    let all_clusters: Vec<CapiCluster> = Api::<CapiCluster>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let fleet: Vec<FleetCluster> = Api::<FleetCluster>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let groups: Vec<ClusterGroup> = Api::<ClusterGroup>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let mappings: Vec<BundleNamespaceMapping> = Api::<BundleNamespaceMapping>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let namespaces: BTreeSet<String> = Api::<Namespace>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items.iter().map(|n| n.name_any()).collect())
        .unwrap_or_default();

    // Deleted objects are gone: nothing holds them.
    for (ns, name) in &expected.deleted {
        if let Some(c) = all_clusters
            .iter()
            .find(|c| c.namespace().as_deref() == Some(ns) && &c.name_any() == name)
        {
            problems.push(format!(
                "deleted Cluster {ns}/{name} still exists, finalizers {:?}",
                c.finalizers()
            ));
        }
    }
    for ns in &expected.gone_namespaces {
        if namespaces.contains(ns) {
            problems.push(format!("deleted namespace {ns} still exists"));
        }
    }

    // Exactly one correct Fleet Cluster per Cluster, nothing extra.
    let mut fleet_by_ns: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &fleet {
        fleet_by_ns
            .entry(f.namespace().unwrap_or_default())
            .or_default()
            .insert(f.name_any());
    }
    let mut want_fleet = expected.clusters.clone();
    want_fleet.retain(|_, names| !names.is_empty());
    if fleet_by_ns != want_fleet {
        problems.push(format!(
            "Fleet Clusters differ: {} present, {} wanted",
            fleet.len(),
            want_fleet.values().map(BTreeSet::len).sum::<usize>()
        ));
    }
    for c in &all_clusters {
        let ns = c.namespace().unwrap_or_default();
        if !c.finalizers().iter().any(|f| f == names::FINALIZER) {
            problems.push(format!("Cluster {ns}/{} lacks our finalizer", c.name_any()));
        }
        let Some(f) = fleet
            .iter()
            .find(|f| f.namespace().as_deref() == Some(&ns) && f.name_any() == c.name_any())
        else {
            continue;
        };
        let secret = format!("{}-kubeconfig", c.name_any());
        let labels_ok = c.labels().iter().all(|(k, v)| f.labels().get(k) == Some(v));
        let owned = f
            .owner_references()
            .iter()
            .any(|o| o.kind == "Cluster" && o.name == c.name_any());
        if f.spec.kube_config_secret.as_deref() != Some(secret.as_str()) || !labels_ok || !owned {
            problems.push(format!(
                "Fleet Cluster {ns}/{} is not correct",
                c.name_any()
            ));
        }
    }

    // Per Cluster the FleetReady condition; per namespace the workspace annotation; the
    // FleetAddonConfig counts what remains.
    for c in &all_clusters {
        let has_condition = c
            .body
            .get("status")
            .and_then(|s| s.get("conditions").and_then(Value::as_array).cloned())
            .is_some_and(|conditions| conditions.iter().any(|k| k["type"] == "FleetReady"));
        if !has_condition {
            problems.push(format!(
                "Cluster {}/{} has no FleetReady condition",
                c.namespace().unwrap_or_default(),
                c.name_any()
            ));
        }
    }
    let namespace_objects: Vec<Namespace> = Api::<Namespace>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    for ns in &namespace_objects {
        let annotated = ns
            .annotations()
            .get(names::FLEET_WORKSPACE_ANNOTATION)
            .is_some_and(|v| v == "true");
        let wanted = expected
            .clusters
            .get(&ns.name_any())
            .is_some_and(|names| !names.is_empty());
        if annotated != wanted {
            problems.push(format!(
                "namespace {} workspace annotation {annotated}, wanted {wanted}",
                ns.name_any()
            ));
        }
    }
    let remaining = expected.clusters.values().map(BTreeSet::len).sum::<usize>() as i64;
    let counts = Api::<FleetAddonConfig>::all(client.clone())
        .get_opt(FleetAddonConfig::NAME)
        .await
        .ok()
        .flatten()
        .and_then(|c| c.status?.clusters);
    if counts
        .as_ref()
        .is_none_or(|c| (c.selected, c.imported) != (remaining, remaining))
    {
        problems.push(format!(
            "status.clusters {counts:?}, wanted {remaining} selected and imported"
        ));
    }

    // Groups: the class group, and one cross-namespace group per namespace using the class.
    let group_set: BTreeSet<(String, String)> = groups
        .iter()
        .map(|g| (g.namespace().unwrap_or_default(), g.name_any()))
        .collect();
    let mut want_groups: BTreeSet<(String, String)> = expected
        .classy_namespaces
        .iter()
        .map(|ns| (ns.clone(), format!("{CLASS}.{CLASS_NAMESPACE}")))
        .collect();
    want_groups.insert((CLASS_NAMESPACE.to_string(), CLASS.to_string()));
    if group_set != want_groups {
        problems.push(format!(
            "ClusterGroups {group_set:?}, wanted {want_groups:?}"
        ));
    }
    // Mappings: exactly one per namespace using the class, in the class namespace.
    let mapping_set: BTreeSet<(String, String)> = mappings
        .iter()
        .map(|m| (m.namespace().unwrap_or_default(), m.name_any()))
        .collect();
    let want_mappings: BTreeSet<(String, String)> = expected
        .classy_namespaces
        .iter()
        .map(|ns| (CLASS_NAMESPACE.to_string(), ns.clone()))
        .collect();
    if mapping_set != want_mappings {
        problems.push(format!(
            "BundleNamespaceMappings {mapping_set:?}, wanted {want_mappings:?}"
        ));
    }
    problems
}

/// Runs the manager for a while under faults and kills it `kills` times; each run lasts until
/// the manager made `writes_per_run` writes or 4 s passed.
async fn kill_repeatedly(
    h: &Harness,
    kubeconfig: &std::path::Path,
    logs: &std::path::Path,
    runs: &mut usize,
    kills: usize,
    writes_per_run: usize,
) {
    for _ in 0..kills {
        let before = manager_writes(h);
        let mut process = ManagerProcess::start(kubeconfig, logs, "caapf-chaos", *runs, &[]);
        *runs += 1;
        let deadline = Instant::now() + Duration::from_secs(4);
        while Instant::now() < deadline && manager_writes(h) < before + writes_per_run {
            assert!(process.exited().is_none(), "the manager exited on its own");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        process.kill().await;
    }
}

/// State-changing writes of the managers so far (Events and Leases excluded).
fn manager_writes(h: &Harness) -> usize {
    h.sandbox.requests().count(|r| {
        r.verb.is_write()
            && r.user_agent.starts_with("caapf/")
            && r.resource != "events"
            && r.resource != "leases"
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn converges_after_kills_under_faults() {
    let p = Params::from_env();
    let started = Instant::now();
    let h = Harness::new().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    h.sandbox.write_kubeconfig(&kubeconfig).expect("kubeconfig");

    // The world, before any fault.
    h.namespace("caapf-system", json!({})).await;
    h.namespace(CLASS_NAMESPACE, json!({})).await;
    h.class(CLASS_NAMESPACE, CLASS, json!({"team": "chaos"}))
        .await;
    h.config(
        "cluster: {applyClassGroup: true, patchResource: true, setOwnerReferences: true}\nclusterClass: {patchResource: true, setOwnerReferences: true}",
    )
        .await;
    let mut expected = Expected {
        clusters: BTreeMap::new(),
        classy_namespaces: BTreeSet::new(),
        gone_namespaces: BTreeSet::new(),
        deleted: BTreeSet::new(),
    };
    for n in 0..p.namespaces {
        h.namespace(&namespace_name(n), json!({})).await;
        expected.clusters.insert(namespace_name(n), BTreeSet::new());
    }
    for i in 0..p.clusters {
        let ns = namespace_name(i % p.namespaces);
        let body = cluster_body(i);
        let name = body["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        h.cluster(&ns, body).await;
        h.initialize(&ns, &name).await;
        if i.is_multiple_of(2) {
            expected.classy_namespaces.insert(ns.clone());
        }
        expected.clusters.entry(ns).or_default().insert(name);
    }

    // Import under faults, with kills.
    h.sandbox.set_faults(p.faults());
    let mut runs = 0;
    let per_run = (p.clusters * 2 / (p.kills + 1)).max(4);
    kill_repeatedly(&h, &kubeconfig, dir.path(), &mut runs, p.kills, per_run).await;

    // Delete every third Cluster of the kept namespaces and the whole last namespace (with its
    // Clusters), still under faults, with more kills in between.
    let doomed = namespace_name(p.namespaces - 1);
    for (ns, names) in expected.clusters.iter_mut() {
        if *ns == doomed {
            continue;
        }
        let api: Api<CapiCluster> = Api::namespaced(h.client.clone(), ns);
        let victims: Vec<String> = names.iter().step_by(3).cloned().collect();
        for name in victims {
            delete(&api, &name).await;
            names.remove(&name);
            expected.deleted.insert((ns.clone(), name));
        }
    }
    delete(&Api::<Namespace>::all(h.client.clone()), &doomed).await;
    for name in expected.clusters.remove(&doomed).unwrap_or_default() {
        expected.deleted.insert((doomed.clone(), name));
    }
    expected.classy_namespaces.remove(&doomed);
    expected.gone_namespaces.insert(doomed.clone());
    expected.classy_namespaces = expected
        .clusters
        .iter()
        .filter(|(_, names)| {
            names.iter().any(|n| {
                n.trim_start_matches('c')
                    .parse::<usize>()
                    .is_ok_and(|i| i.is_multiple_of(2))
            })
        })
        .map(|(ns, _)| ns.clone())
        .collect();
    kill_repeatedly(&h, &kubeconfig, dir.path(), &mut runs, p.kills, per_run).await;

    // Faults off, one manager: everything converges.
    h.sandbox.clear_faults();
    let _survivor = ManagerProcess::start(&kubeconfig, dir.path(), "caapf-chaos", runs, &[]);
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut last = Vec::new();
    while Instant::now() < deadline {
        last = violations(&h, &expected).await;
        if last.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(last.is_empty(), "not converged: {last:#?}");
    let converged = started.elapsed();

    // Quiet: no write at all (the periodic resync included).
    let before = manager_writes(&h);
    let quiet_end = Instant::now() + p.quiet;
    while Instant::now() < quiet_end {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let quiet_writes = manager_writes(&h) - before;
    let quiet_detail: Vec<String> = h
        .sandbox
        .requests()
        .all()
        .into_iter()
        .filter(|r| {
            r.verb.is_write()
                && r.user_agent.starts_with("caapf/")
                && r.resource != "events"
                && r.resource != "leases"
        })
        .skip(before)
        .map(|r| {
            format!(
                "{:?} {}/{} {}/{} -> {}",
                r.verb, r.resource, r.subresource, r.namespace, r.name, r.code
            )
        })
        .collect();
    let still = violations(&h, &expected).await;
    assert!(
        still.is_empty(),
        "invariants broke in the quiet period: {still:#?}"
    );
    let (warn, error) = log_levels(dir.path());
    let injected: BTreeMap<u16, usize> = [409u16, 429, 500]
        .into_iter()
        .map(|code| {
            (
                code,
                h.sandbox
                    .requests()
                    .count(|r| r.user_agent.starts_with("caapf/") && r.code == code),
            )
        })
        .collect();
    eprintln!(
        "chaos: {} Clusters, {} namespaces, {} kills, converged after {converged:?}; manager writes {}, answered with injected faults {injected:?}; {warn} WARN and {error} ERROR log lines; {quiet_writes} writes in the {:?} quiet period",
        p.clusters,
        p.namespaces,
        2 * p.kills,
        manager_writes(&h),
        p.quiet
    );
    if std::env::var_os("CHAOS_KEEP_LOGS").is_some() {
        eprintln!("manager logs kept in {}", dir.keep().display());
    }
    assert_eq!(
        quiet_writes, 0,
        "writes in the quiet period: {quiet_detail:?}"
    );
}
