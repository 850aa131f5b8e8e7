//! The few controllers of a real cluster the sandbox simulates, because clients wait on them:
//!
//! - **deployment**: sets a ready status (all replicas updated, ready and available,
//!   `Available` and `Progressing` conditions, `observedGeneration`) after each write, so
//!   `helm --wait` and `kubectl rollout status` finish;
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
use crate::util::{meta_str, name_of, namespace_of, now_rfc3339};

/// Runs the controllers until `shutdown` flips.
pub async fn run(store: Arc<Store>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    loop {
        {
            let mut st = store.lock();
            reconcile(&mut st);
        }
        tokio::select! {
            _ = store.changed.notified() => {}
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
        let deployments = std::mem::take(&mut st.work.deployments);
        for (ns, name) in deployments {
            deployment(st, &ns, &name);
        }
        if std::mem::take(&mut st.work.gc) {
            garbage_collect(st);
        }
        if std::mem::take(&mut st.work.namespaces) {
            namespaces(st);
        }
    }
}

fn deployment(st: &mut State, ns: &str, name: &str) {
    let gr = ("apps".to_string(), "deployments".to_string());
    let Some(old) = st.get(&gr, ns, name) else {
        return;
    };
    if meta_str(&old, "deletionTimestamp").is_some() {
        return;
    }
    let replicas = old
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let generation = old
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let cond_time = |t: &str| {
        old.pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|cs| cs.iter().find(|c| c.get("type") == Some(&json!(t))))
            .and_then(|c| c.get("lastTransitionTime").cloned())
            .unwrap_or(json!(now_rfc3339()))
    };
    let status = json!({
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
    });
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
    };
    let _ = ops::delete(st, &ctx, &DeleteOpts::default());
}

fn garbage_collect(st: &mut State) {
    let mut deletes = Vec::new();
    let mut updates = Vec::new();
    for (gr, objs) in &st.objects {
        for obj in objs.values() {
            let refs = owner_refs(obj);
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
                if meta_str(obj, "deletionTimestamp").is_none() {
                    deletes.push((
                        gr.clone(),
                        namespace_of(obj).to_string(),
                        name_of(obj).to_string(),
                    ));
                }
            } else if alive.len() < refs.len() {
                let mut new = (**obj).clone();
                set_owner_refs(&mut new, alive);
                updates.push((gr.clone(), obj.clone(), new));
            }
        }
    }
    for (gr, old, new) in updates {
        controller_write(st, &gr, &old, new);
    }
    for (gr, ns, name) in deletes {
        delete_object(st, &gr, &ns, &name);
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
    for ns in terminating {
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
        }
    }
}
