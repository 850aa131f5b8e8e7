//! Scale: creating, listing and watching many objects. The 1,000-object test runs by default;
//! the 10,000-object one is `#[ignore]`d (run it with
//! `cargo test -p kube-sandbox --test api -- --ignored scale_10k --nocapture`).

use std::time::{Duration, Instant};

use crate::common::*;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube_sandbox::{Sandbox, SandboxOptions};
use serde_json::json;

async fn run(n: usize, clients: usize, streaming: bool) {
    let s = Sandbox::start_with(SandboxOptions {
        crds: vec![],
        ..Default::default()
    })
    .await
    .unwrap();
    let c = s.client();
    let api: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    let t = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            async move {
                let cm: ConfigMap = serde_json::from_value(json!({
                    "metadata": {"name": format!("cm-{i:05}"), "labels": {"scale": "yes", "shard": (i % 10).to_string()}},
                    "data": {"key": "value", "index": i.to_string()}
                }))
                .unwrap();
                api.create(&PostParams::default(), &cm).await.unwrap();
            }
        })
        .buffer_unordered(clients)
        .collect::<Vec<_>>()
        .await;
    let create = t.elapsed();
    let t = Instant::now();
    let list = api
        .list(&ListParams::default().labels("scale=yes"))
        .await
        .unwrap();
    let list_time = t.elapsed();
    assert_eq!(list.items.len(), n);
    let t = Instant::now();
    let mut paged = 0;
    let mut lp = ListParams::default().labels("scale=yes").limit(500);
    loop {
        let page = api.list(&lp).await.unwrap();
        paged += page.items.len();
        match page.metadata.continue_ {
            Some(token) => lp = lp.continue_token(&token),
            None => break,
        }
    }
    let paged_time = t.elapsed();
    assert_eq!(paged, n);
    let t = Instant::now();
    let (reader, writer) = reflector::store();
    let cfg = if streaming {
        watcher::Config::default().streaming_lists()
    } else {
        watcher::Config::default()
    };
    let task = tokio::spawn(
        reflector(writer, watcher(api.clone(), cfg.labels("scale=yes")))
            .applied_objects()
            .try_for_each(|_| async { Ok(()) }),
    );
    reader.wait_until_ready().await.unwrap();
    let sync = t.elapsed();
    assert_eq!(reader.len(), n);
    // Live events for a burst of updates all arrive.
    let t = Instant::now();
    futures::stream::iter(0..n.min(1000))
        .map(|i| {
            let api = api.clone();
            async move {
                api.patch(
                    &format!("cm-{i:05}"),
                    &Default::default(),
                    &kube::api::Patch::Merge(json!({"data": {"touched": "yes"}})),
                )
                .await
                .unwrap();
            }
        })
        .buffer_unordered(clients)
        .collect::<Vec<_>>()
        .await;
    eventually(Duration::from_secs(60), "watch caught up", || {
        let r = reader.clone();
        async move {
            (r.state()
                .iter()
                .filter(|cm| cm.data.as_ref().is_some_and(|d| d.contains_key("touched")))
                .count()
                == n.min(1000))
            .then_some(())
        }
    })
    .await;
    let watch_time = t.elapsed();
    task.abort();
    println!(
        "scale n={n} clients={clients} streaming={streaming}: create {create:?} ({:.0}/s), list {list_time:?}, paged list (500) {paged_time:?}, reflector sync {sync:?}, {} updates seen by watch in {watch_time:?}",
        n as f64 / create.as_secs_f64(),
        n.min(1000)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_1k() {
    run(1_000, 8, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "takes longer than the default test budget; see README for figures"]
async fn scale_10k() {
    run(10_000, 16, false).await;
    run(10_000, 16, true).await;
}
