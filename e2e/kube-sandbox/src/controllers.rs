//! The few controllers of a real cluster the sandbox simulates, because clients wait on them:
//!
//! - **workloads**: Deployments, StatefulSets and DaemonSets get a ready status (all replicas
//!   updated, ready and available; Deployment `Available`/`Progressing` conditions;
//!   `observedGeneration`) after each write, and Jobs complete at once, so `helm --wait`, helm
//!   hooks and `kubectl rollout status` finish;
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
    if old.get("status") == Some(&status) {
        return;
    }
    let mut new = (*old).clone();
    new["status"] = status;
    controller_write(st, &gr, &old, new);
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
