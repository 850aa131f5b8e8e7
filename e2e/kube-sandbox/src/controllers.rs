//! The few controllers of a real cluster the sandbox simulates, because clients wait on them:
//!
//! - **workloads**: Deployments, StatefulSets and DaemonSets get a ready status (all replicas
//!   updated, ready and available; Deployment `Available`/`Progressing` conditions;
//!   `observedGeneration`) after each write, and Jobs complete at once, so `helm --wait`, helm
//!   hooks and `kubectl rollout status` finish. A Deployment also gets its ReplicaSet (see
//!   [`replica_sets`]): helm 3's `--wait` looks for it;
//! - **garbage collector**: deletes objects whose owners (by uid) are all gone and drops
//!   dangling ownerReferences when some owners remain (background propagation);
//! - **namespace**: deletes everything in a terminating namespace, then the namespace.
//!
//! CRDs become Established synchronously when written (see `crd`).

use std::sync::Arc;

use serde_json::{Value, json};

use crate::ops::{
    self, Ctx, DeleteOpts, controller_write, owner_refs, remove_object, set_owner_refs,
};
use crate::store::{State, Store};
use crate::util::{meta_str, name_of, now_rfc3339};

/// Runs the controllers until `shutdown` flips.
pub async fn run(store: Arc<Store>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    loop {
        let next_due = {
            let mut st = store.lock();
            reconcile(&mut st);
            // Only future deadlines: past ones are handled on the next change.
            let now = tokio::time::Instant::now();
            st.work
                .namespace_due
                .values()
                .filter(|d| **d > now)
                .min()
                .copied()
        };
        tokio::select! {
            _ = store.changed.notified() => {}
            _ = async {
                match next_due {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            } => {
                store.lock().work.namespaces = true;
            }
            _ = shutdown.changed() => return,
        }
    }
}

/// Processes all pending work (bounded, in case controllers keep feeding each other).
pub fn reconcile(st: &mut State) {
    for _ in 0..64 {
        if !st.work.is_pending() {
            return;
        }
        let workloads = std::mem::take(&mut st.work.workloads);
        for (plural, ns, name) in workloads {
            workload(st, &plural, &ns, &name);
        }
        let candidates = std::mem::take(&mut st.work.gc);
        if !candidates.is_empty() {
            garbage_collect(st, candidates);
        }
        if std::mem::take(&mut st.work.namespaces) {
            namespaces(st);
        }
    }
}

/// The status a workload's real controllers converge to when everything goes well.
fn workload(st: &mut State, plural: &str, ns: &str, name: &str) {
    let group = if plural == "jobs" { "batch" } else { "apps" };
    let gr = (group.to_string(), plural.to_string());
    let Some(old) = st.get(&gr, ns, name) else {
        return;
    };
    if meta_str(&old, "deletionTimestamp").is_some() {
        return;
    }
    let int = |p: &str, default: i64| old.pointer(p).and_then(Value::as_i64).unwrap_or(default);
    let replicas = int("/spec/replicas", 1);
    let generation = int("/metadata/generation", 1);
    let now = json!(now_rfc3339());
    let cond_time = |t: &str| {
        old.pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|cs| cs.iter().find(|c| c.get("type") == Some(&json!(t))))
            .and_then(|c| c.get("lastTransitionTime").cloned())
            .unwrap_or(now.clone())
    };
    let status = match plural {
        "deployments" => json!({
            "observedGeneration": generation,
            "replicas": replicas,
            "updatedReplicas": replicas,
            "readyReplicas": replicas,
            "availableReplicas": replicas,
            "conditions": [
                {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
                 "message": "Deployment has minimum availability.",
                 "lastUpdateTime": cond_time("Available"), "lastTransitionTime": cond_time("Available")},
                {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable",
                 "message": format!("ReplicaSet \"{name}\" has successfully progressed."),
                 "lastUpdateTime": cond_time("Progressing"), "lastTransitionTime": cond_time("Progressing")}
            ]
        }),
        "statefulsets" => json!({
            "observedGeneration": generation,
            "replicas": replicas,
            "readyReplicas": replicas,
            "currentReplicas": replicas,
            "updatedReplicas": replicas,
            "availableReplicas": replicas,
            "currentRevision": format!("{name}-{generation}"),
            "updateRevision": format!("{name}-{generation}"),
            "collisionCount": 0
        }),
        // As if the cluster had one node.
        "daemonsets" => json!({
            "observedGeneration": generation,
            "currentNumberScheduled": 1,
            "desiredNumberScheduled": 1,
            "numberAvailable": 1,
            "numberReady": 1,
            "updatedNumberScheduled": 1,
            "numberMisscheduled": 0
        }),
        // Jobs succeed at once (helm hooks and `--wait` wait for completion).
        "jobs" => {
            if old.pointer("/status/completionTime").is_some() {
                return;
            }
            let completions = int("/spec/completions", 1);
            json!({
                "startTime": now,
                "completionTime": now,
                "succeeded": completions,
                "active": 0,
                "ready": 0,
                "conditions": [
                    {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached",
                     "message": "Reached expected number of succeeded pods", "lastProbeTime": now, "lastTransitionTime": now},
                    {"type": "Complete", "status": "True", "reason": "CompletionsReached",
                     "message": "Reached expected number of succeeded pods", "lastProbeTime": now, "lastTransitionTime": now}
                ]
            })
        }
        _ => return,
    };
    if plural == "deployments" {
        replica_sets(st, &old, replicas);
    }
    if old.get("status") == Some(&status) {
        return;
    }
    let mut new = (*old).clone();
    new["status"] = status;
    controller_write(st, &gr, &old, new);
}

/// The label a Deployment's controller adds to its ReplicaSets and their pod templates.
const POD_TEMPLATE_HASH: &str = "pod-template-hash";

/// The ReplicaSets of a Deployment, as the deployment controller leaves them after a finished
/// rollout: one for the current pod template (named `<deployment>-<hash>`, the template with a
/// `pod-template-hash` label added to it, its labels and its selector, controlled by the
/// Deployment, all replicas ready), and the ones of earlier templates scaled to zero.
///
/// helm 3's `--wait` needs it (`helm.sh/helm/v3` `pkg/kube/ready.go`, `IsReady` for a
/// Deployment: `deploymentutil.GetNewReplicaSet` lists ReplicaSets by the Deployment's selector,
/// keeps those it controls and picks the one whose template equals the Deployment's ignoring
/// `pod-template-hash`; then `deploymentReady` wants the ReplicaSet's `observedGeneration` equal
/// to its `generation` and `readyReplicas` at least `replicas - maxUnavailable`). Without it
/// helm 3 waits until its timeout. The hash is the FNV-1a (32 bit) of the template's JSON,
/// written with the real controller's alphabet (`k8s.io/apimachinery` `util/rand`
/// `SafeEncodeString`), not the real hash of the Go struct.
fn replica_sets(st: &mut State, deployment: &Arc<Value>, replicas: i64) {
    let rs_gr = ("apps".to_string(), "replicasets".to_string());
    let (ns, name) = (
        crate::util::namespace_of(deployment).to_string(),
        name_of(deployment).to_string(),
    );
    let Some(uid) = meta_str(deployment, "uid").map(str::to_string) else {
        return;
    };
    let template = deployment
        .pointer("/spec/template")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let hash = template_hash(&template);
    let current = format!("{name}-{hash}");
    let owned: Vec<Arc<Value>> = st
        .bucket(&rs_gr)
        .into_iter()
        .flat_map(|objects| objects.values())
        .filter(|rs| {
            crate::util::namespace_of(rs) == ns
                && owner_refs(rs)
                    .iter()
                    .any(|r| r.get("uid").and_then(Value::as_str) == Some(uid.as_str()))
        })
        .cloned()
        .collect();
    // Earlier templates: scaled to zero.
    for old in owned.iter().filter(|rs| name_of(rs) != current) {
        if old.pointer("/spec/replicas").and_then(Value::as_i64) == Some(0) {
            continue;
        }
        let mut new = (**old).clone();
        new["spec"]["replicas"] = json!(0);
        let generation = old
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(1)
            + 1;
        new["metadata"]["generation"] = json!(generation);
        new["status"] = json!({"replicas": 0, "observedGeneration": generation});
        controller_write(st, &rs_gr, old, new);
    }
    let mut labels = template
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    labels.insert(POD_TEMPLATE_HASH.into(), json!(hash));
    let mut rs_template = template.clone();
    rs_template["metadata"]["labels"] = Value::Object(labels.clone());
    let mut selector = deployment
        .pointer("/spec/selector")
        .cloned()
        .unwrap_or_else(|| json!({}));
    selector["matchLabels"][POD_TEMPLATE_HASH] = json!(hash);
    let existing = owned.iter().find(|rs| name_of(rs) == current).cloned();
    let generation = existing
        .as_ref()
        .and_then(|rs| rs.pointer("/metadata/generation"))
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let spec = json!({"replicas": replicas, "selector": selector, "template": rs_template});
    let generation = match &existing {
        Some(rs) if rs.get("spec") != Some(&spec) => generation + 1,
        _ => generation,
    };
    let status = json!({
        "replicas": replicas,
        "fullyLabeledReplicas": replicas,
        "readyReplicas": replicas,
        "availableReplicas": replicas,
        "observedGeneration": generation,
    });
    match existing {
        Some(rs) => {
            if rs.get("spec") == Some(&spec) && rs.get("status") == Some(&status) {
                return;
            }
            let mut new = (*rs).clone();
            new["spec"] = spec;
            new["status"] = status;
            new["metadata"]["generation"] = json!(generation);
            controller_write(st, &rs_gr, &rs, new);
        }
        None => {
            let revision = owned.len() + 1;
            let mut rs = json!({
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {
                    "name": current,
                    "namespace": ns,
                    "labels": labels,
                    "annotations": {
                        "deployment.kubernetes.io/desired-replicas": replicas.to_string(),
                        "deployment.kubernetes.io/revision": revision.to_string(),
                    },
                    "generation": 1,
                    "ownerReferences": [{
                        "apiVersion": "apps/v1", "kind": "Deployment", "name": name, "uid": uid,
                        "controller": true, "blockOwnerDeletion": true,
                    }],
                },
                "spec": spec,
                "status": status,
            });
            rs["status"]["observedGeneration"] = json!(1);
            ops::seed_as(st, &rs_gr, rs, ops::CONTROLLER_MANAGER);
        }
    }
}

/// A short, stable name suffix for a pod template: FNV-1a of its JSON, as decimal digits mapped
/// to the alphabet of `k8s.io/apimachinery` `util/rand.SafeEncodeString` (no vowels, no
/// look-alike characters), as the real `pod-template-hash` is written.
fn template_hash(template: &Value) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut hash: u32 = 0x811c_9dc5;
    for byte in template.to_string().bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash.to_string()
        .bytes()
        .map(|b| ALPHABET[usize::from(b) % ALPHABET.len()] as char)
        .collect()
}

fn delete_object(st: &mut State, gr: &(String, String), ns: &str, name: &str) {
    let Some(def) = st.registry.get(&gr.0, &gr.1).cloned() else {
        return;
    };
    let ctx = Ctx {
        version: def.storage_version().to_string(),
        def,
        namespace: ns.to_string(),
        name: name.to_string(),
        subresource: String::new(),
        manager: ops::CONTROLLER_MANAGER.to_string(),
        dry_run: false,
        validate: false,
        escalation: None,
    };
    let _ = ops::delete(st, &ctx, &DeleteOpts::default());
}

fn garbage_collect(st: &mut State, candidates: std::collections::BTreeSet<crate::store::ObjKey>) {
    for (gr, ns, name) in candidates {
        let Some(obj) = st.get(&gr, &ns, &name) else {
            continue;
        };
        if meta_str(&obj, "deletionTimestamp").is_some()
            && crate::util::finalizers_of(&obj)
                .iter()
                .any(|f| f == ops::FOREGROUND)
        {
            foreground(st, &gr, &obj);
            continue;
        }
        let refs = owner_refs(&obj);
        if refs.is_empty() {
            continue;
        }
        let alive: Vec<Value> = refs
            .iter()
            .filter(|r| {
                r.get("uid")
                    .and_then(Value::as_str)
                    .is_some_and(|u| st.uids.contains_key(u))
            })
            .cloned()
            .collect();
        if alive.is_empty() {
            if meta_str(&obj, "deletionTimestamp").is_none() {
                delete_object(st, &gr, &ns, &name);
            }
        } else if alive.len() < refs.len() {
            let mut new = (*obj).clone();
            set_owner_refs(&mut new, alive);
            controller_write(st, &gr, &obj, new);
        }
    }
}

/// An owner deleted in the foreground: delete its dependents, and release it (drop the
/// `foregroundDeletion` finalizer) once none is left.
fn foreground(st: &mut State, gr: &(String, String), owner: &Arc<Value>) {
    let uid = meta_str(owner, "uid").unwrap_or("").to_string();
    let deps: Vec<crate::store::ObjKey> = st
        .dependents
        .get(&uid)
        .map(|d| d.iter().cloned().collect())
        .unwrap_or_default();
    if deps.is_empty() {
        let mut new = (**owner).clone();
        let kept: Vec<Value> = crate::util::finalizers_of(owner)
            .into_iter()
            .filter(|f| f != ops::FOREGROUND)
            .map(Value::String)
            .collect();
        let m = crate::util::meta_mut(&mut new);
        if kept.is_empty() {
            m.remove("finalizers");
        } else {
            m.insert("finalizers".into(), Value::Array(kept));
        }
        controller_write(st, gr, owner, new);
        return;
    }
    for (dgr, dns, dname) in deps {
        if st
            .get(&dgr, &dns, &dname)
            .is_some_and(|d| meta_str(&d, "deletionTimestamp").is_none())
        {
            delete_object(st, &dgr, &dns, &dname);
        }
    }
}

fn namespaces(st: &mut State) {
    let ns_gr = (String::new(), "namespaces".to_string());
    let terminating: Vec<String> = st
        .bucket(&ns_gr)
        .map(|b| {
            b.values()
                .filter(|n| meta_str(n, "deletionTimestamp").is_some())
                .map(|n| name_of(n).to_string())
                .collect()
        })
        .unwrap_or_default();
    let now = tokio::time::Instant::now();
    for ns in terminating {
        if st.work.namespace_due.get(&ns).is_some_and(|due| *due > now) {
            continue;
        }
        let mut remaining = 0;
        let mut to_delete = Vec::new();
        for (gr, objs) in &st.objects {
            for ((ons, name), obj) in objs.iter() {
                if ons == &ns {
                    remaining += 1;
                    if meta_str(obj, "deletionTimestamp").is_none() {
                        to_delete.push((gr.clone(), name.clone()));
                    }
                }
            }
        }
        for (gr, name) in to_delete {
            delete_object(st, &gr, &ns, &name);
        }
        let still: usize = st
            .objects
            .values()
            .map(|objs| objs.keys().filter(|(o, _)| o == &ns).count())
            .sum();
        if (remaining == 0 || still == 0)
            && let Some(n) = st.get(&ns_gr, "", &ns)
            && crate::util::finalizers_of(&n).is_empty()
        {
            remove_object(st, &ns_gr, "", &ns);
            st.work.namespace_due.remove(&ns);
        }
    }
}
