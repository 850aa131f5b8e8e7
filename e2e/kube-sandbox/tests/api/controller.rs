//! A kube-runtime `Controller` with a finalizer runs against the sandbox end to end, through a
//! forced watch drop and a 410 Gone, without losing an event.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use futures::StreamExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{Event, finalizer};
use kube::runtime::watcher;
use kube_sandbox::{Sandbox, SandboxOptions, Verb};
use serde_json::json;

const FINALIZER: &str = "example.com/cleanup";

struct Ctx {
    api: Api<DynamicObject>,
    cleaned: Mutex<BTreeSet<String>>,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Error(String);

async fn reconcile(
    obj: Arc<DynamicObject>,
    ctx: Arc<Ctx>,
) -> Result<Action, kube::runtime::finalizer::Error<Error>> {
    let api = ctx.api.clone();
    let ctx2 = ctx.clone();
    finalizer(&ctx.api, FINALIZER, obj, |event| async move {
        let ctx = ctx2;
        match event {
            Event::Apply(w) => {
                let name = w.metadata.name.clone().unwrap_or_default();
                let generation = w.metadata.generation.unwrap_or(0);
                if w.data["status"]["observed"].as_i64() != Some(generation) {
                    api.patch_status(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"status": {"observed": generation}})),
                    )
                    .await
                    .map_err(|e| Error(e.to_string()))?;
                }
                Ok(Action::await_change())
            }
            Event::Cleanup(w) => {
                ctx.cleaned
                    .lock()
                    .unwrap()
                    .insert(w.metadata.name.clone().unwrap_or_default());
                Ok(Action::await_change())
            }
        }
    })
    .await
}

fn error_policy(
    _: Arc<DynamicObject>,
    _: &kube::runtime::finalizer::Error<Error>,
    _: Arc<Ctx>,
) -> Action {
    Action::requeue(Duration::from_millis(50))
}

async fn converged(api: &Api<DynamicObject>, live: &[String]) {
    eventually(
        Duration::from_secs(20),
        "every widget reconciled",
        || async {
            let list = api.list(&ListParams::default()).await.ok()?;
            let names: BTreeSet<String> = list
                .items
                .iter()
                .filter_map(|w| w.metadata.name.clone())
                .collect();
            let want: BTreeSet<String> = live.iter().cloned().collect();
            let all_done = list.items.iter().all(|w| {
                w.metadata
                    .finalizers
                    .as_ref()
                    .is_some_and(|f| f.iter().any(|x| x == FINALIZER))
                    && w.data["status"]["observed"].as_i64() == w.metadata.generation
            });
            (names == want && all_done).then_some(())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_with_finalizer_survives_watch_drops_and_410() {
    // Long bookmark interval: the watcher must not learn newer resourceVersions by bookmark, so
    // the compaction below really makes its resume point too old.
    let s = Sandbox::start_with(SandboxOptions {
        crds: vec![],
        bookmark_interval: Duration::from_secs(3600),
        ..Default::default()
    })
    .await
    .unwrap();
    let c = s.client();
    install_widgets(&c).await;
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Widget"),
        "widgets",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(c.clone(), "default", &ar);
    let ctx = Arc::new(Ctx {
        api: api.clone(),
        cleaned: Mutex::new(BTreeSet::new()),
    });
    let controller = Controller::new_with(api.clone(), watcher::Config::default(), ar.clone())
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|_| async {});
    let task = tokio::spawn(controller);

    let mut live: Vec<String> = (0..10).map(|i| format!("w{i}")).collect();
    for n in &live {
        api.create(&PostParams::default(), &widget(n, json!({"size": 1})))
            .await
            .unwrap();
    }
    converged(&api, &live).await;

    // 1. A forced watch drop: the watcher resumes from its last resourceVersion.
    s.close_watches();
    for n in &live[0..3] {
        api.patch(
            n,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 2}})),
        )
        .await
        .unwrap();
    }
    api.create(&PostParams::default(), &widget("w10", json!({"size": 1})))
        .await
        .unwrap();
    live.push("w10".into());
    converged(&api, &live).await;

    // 2. A 410: history compacted past the watcher's resume point, then the watch dropped.
    let lists_before = s
        .requests()
        .count(|r| r.verb == Verb::List && r.resource == "widgets");
    create_cm(&c, "default", "moves-the-resource-version", json!({})).await;
    s.compact_history();
    s.close_watches();
    for n in &live[3..6] {
        api.patch(
            n,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 3}})),
        )
        .await
        .unwrap();
    }
    for n in ["w0", "w7"] {
        api.delete(n, &DeleteParams::default()).await.unwrap();
    }
    live.retain(|n| n != "w0" && n != "w7");
    api.create(&PostParams::default(), &widget("w11", json!({"size": 1})))
        .await
        .unwrap();
    live.push("w11".into());
    converged(&api, &live).await;
    eventually(
        Duration::from_secs(10),
        "cleanup of deleted widgets",
        || async {
            (ctx.cleaned.lock().unwrap().clone()
                == BTreeSet::from(["w0".to_string(), "w7".to_string()]))
            .then_some(())
        },
    )
    .await;
    let lists_after = s
        .requests()
        .count(|r| r.verb == Verb::List && r.resource == "widgets");
    assert!(
        lists_after > lists_before,
        "the 410 should have made the watcher relist"
    );

    // 3. More deletions while running: cleanup runs, finalizer removed, object gone.
    api.delete("w11", &DeleteParams::default()).await.unwrap();
    live.retain(|n| n != "w11");
    converged(&api, &live).await;
    eventually(Duration::from_secs(10), "w11 cleaned up", || async {
        ctx.cleaned.lock().unwrap().contains("w11").then_some(())
    })
    .await;
    assert!(api.get_opt("w11").await.unwrap().is_none());
    task.abort();
}

/// A real API server drops empty `finalizers`, `labels`, `annotations` and `ownerReferences`
/// (Go's `omitempty`): after the last finalizer is removed, kube-runtime's `finalizer()` helper
/// (a JSON patch testing `/metadata/finalizers` against null, then adding) must work again.
#[tokio::test]
async fn empty_metadata_lists_and_maps_are_dropped_as_a_real_server_does() {
    let s = Sandbox::start().await;
    let c = s.client();
    install_widgets(&c).await;
    let api = widgets(&c, "default");
    let mut body = widget("w", json!({"size": 1}));
    body.metadata.finalizers = Some(vec![]);
    body.metadata.labels = Some(Default::default());
    body.metadata.annotations = Some(Default::default());
    body.metadata.owner_references = Some(vec![]);
    let created = api.create(&PostParams::default(), &body).await.unwrap();
    assert!(created.metadata.finalizers.is_none());
    assert!(created.metadata.labels.is_none());
    assert!(created.metadata.annotations.is_none());
    assert!(created.metadata.owner_references.is_none());

    let json_patch = |ops: serde_json::Value| {
        Patch::<()>::Json(serde_json::from_value(ops).expect("json patch"))
    };
    api.patch(
        "w",
        &PatchParams::default(),
        &json_patch(json!([{"op": "add", "path": "/metadata/finalizers", "value": ["other/x"]}])),
    )
    .await
    .unwrap();
    let out = api
        .patch(
            "w",
            &PatchParams::default(),
            &json_patch(json!([{"op": "remove", "path": "/metadata/finalizers/0"}])),
        )
        .await
        .unwrap();
    assert!(out.metadata.finalizers.is_none(), "{:?}", out.metadata);
    // kube-runtime's first-finalizer patch.
    api.patch(
        "w",
        &PatchParams::default(),
        &json_patch(json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]}
        ])),
    )
    .await
    .unwrap();
    let got = api.get("w").await.unwrap();
    assert_eq!(got.metadata.finalizers, Some(vec![FINALIZER.to_string()]));
    // Emptied by a merge patch too.
    let out = api
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": [], "labels": {}}})),
        )
        .await
        .unwrap();
    assert!(out.metadata.finalizers.is_none() && out.metadata.labels.is_none());
}

/// An unmodified kube-runtime controller using `finalizer()` runs many objects through create,
/// finalize and delete, where another controller's finalizer came and went first (so each
/// object had its finalizer list emptied before ours is added).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kube_runtime_finalizer_helper_converges_on_many_objects() {
    let s = Sandbox::start().await;
    let c = s.client();
    install_widgets(&c).await;
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Widget"),
        "widgets",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(c.clone(), "default", &ar);
    let names: Vec<String> = (0..40).map(|i| format!("m{i}")).collect();
    for n in &names {
        let mut body = widget(n, json!({"size": 1}));
        body.metadata.finalizers = Some(vec!["other/x".to_string()]);
        api.create(&PostParams::default(), &body).await.unwrap();
        api.patch(
            n,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": []}})),
        )
        .await
        .unwrap();
    }
    let ctx = Arc::new(Ctx {
        api: api.clone(),
        cleaned: Mutex::new(BTreeSet::new()),
    });
    let controller = Controller::new_with(api.clone(), watcher::Config::default(), ar.clone())
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|_| async {});
    let task = tokio::spawn(controller);
    converged(&api, &names).await;
    for n in &names {
        api.delete(n, &DeleteParams::default()).await.unwrap();
    }
    converged(&api, &[]).await;
    let want: BTreeSet<String> = names.iter().cloned().collect();
    eventually(
        Duration::from_secs(20),
        "every widget cleaned up",
        || async { (ctx.cleaned.lock().unwrap().clone() == want).then_some(()) },
    )
    .await;
    task.abort();
}
