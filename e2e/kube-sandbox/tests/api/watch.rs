//! Watches: resume from a resourceVersion, synthetic initial events, selectors, bookmarks,
//! streaming lists, 410 Gone, timeouts, slow watchers, and kube-runtime watchers.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::*;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube_sandbox::{Sandbox, SandboxOptions};
use serde_json::json;

const CMS: &str = "/api/v1/namespaces/default/configmaps";

fn name(ev: &serde_json::Value) -> String {
    ev["object"]["metadata"]["name"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

#[tokio::test]
async fn watch_from_resource_version_and_synthetic_added() {
    let s = bare().await;
    let c = s.client();
    create_cm(&c, "default", "before", json!({})).await;
    let rv = get(&c, CMS).await.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    // From a resourceVersion: only later events, in order, with the right types.
    let mut w = WatchStream::open(&c, &format!("{CMS}?watch=true&resourceVersion={rv}"), &[]).await;
    create_cm(&c, "default", "after", json!({})).await;
    patch(
        &c,
        &format!("{CMS}/after"),
        "application/merge-patch+json",
        json!({"data": {"k": "2"}}),
    )
    .await;
    delete(&c, &format!("{CMS}/after")).await;
    let evs: Vec<(String, String)> = {
        let mut v = Vec::new();
        for _ in 0..3 {
            let e = w.next().await.unwrap();
            v.push((e["type"].as_str().unwrap().to_string(), name(&e)));
        }
        v
    };
    assert_eq!(
        evs,
        vec![
            ("ADDED".into(), "after".into()),
            ("MODIFIED".into(), "after".into()),
            ("DELETED".into(), "after".into())
        ]
    );
    // Events already in history are replayed for a watch that starts later.
    let mut late = WatchStream::open(&c, &format!("{CMS}?watch=1&resourceVersion={rv}"), &[]).await;
    assert_eq!(late.next().await.unwrap()["type"], "ADDED");
    assert_eq!(late.next().await.unwrap()["type"], "MODIFIED");
    let del = late.next().await.unwrap();
    assert_eq!(del["type"], "DELETED");
    assert!(
        del["object"]["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > rv.parse::<u64>().unwrap()
    );
    // rv=0 and no rv: synthetic ADDED for the current state, then live events.
    for q in ["watch=true&resourceVersion=0", "watch=true"] {
        let mut w = WatchStream::open(&c, &format!("{CMS}?{q}"), &[]).await;
        let mut seen = BTreeSet::new();
        seen.insert(name(&w.next().await.unwrap()));
        seen.insert(name(&w.next().await.unwrap()));
        assert_eq!(
            seen,
            BTreeSet::from(["before".to_string(), "kube-root-ca.crt".to_string()])
        );
    }
    // The legacy /watch/ path, for one object.
    let mut w = WatchStream::open(
        &c,
        "/api/v1/watch/namespaces/default/configmaps/before",
        &[],
    )
    .await;
    let ev = w.next().await.unwrap();
    assert_eq!(
        (ev["type"].as_str().unwrap(), name(&ev).as_str()),
        ("ADDED", "before")
    );
    create_cm(&c, "default", "unrelated", json!({})).await;
    patch(
        &c,
        &format!("{CMS}/before"),
        "application/merge-patch+json",
        json!({"data": {"x": "y"}}),
    )
    .await;
    let ev = w.next().await.unwrap();
    assert_eq!(
        (ev["type"].as_str().unwrap(), name(&ev).as_str()),
        ("MODIFIED", "before")
    );
}

#[tokio::test]
async fn selectors_apply_to_events() {
    let s = bare().await;
    let c = s.client();
    create_cm(&c, "default", "x", json!({"app": "web"})).await;
    let rv = s.resource_version();
    let mut w = WatchStream::open(
        &c,
        &format!("{CMS}?watch=true&resourceVersion={rv}&labelSelector=app%3Dweb"),
        &[],
    )
    .await;
    create_cm(&c, "default", "other", json!({"app": "db"})).await;
    // Stops matching: DELETED for this watcher.
    patch(
        &c,
        &format!("{CMS}/x"),
        "application/merge-patch+json",
        json!({"metadata": {"labels": {"app": "db"}}}),
    )
    .await;
    let ev = w.next().await.unwrap();
    assert_eq!(
        (ev["type"].as_str().unwrap(), name(&ev).as_str()),
        ("DELETED", "x")
    );
    // Starts matching: ADDED.
    patch(
        &c,
        &format!("{CMS}/other"),
        "application/merge-patch+json",
        json!({"metadata": {"labels": {"app": "web"}}}),
    )
    .await;
    let ev = w.next().await.unwrap();
    assert_eq!(
        (ev["type"].as_str().unwrap(), name(&ev).as_str()),
        ("ADDED", "other")
    );
    // Field selectors and cluster-wide watches of namespaced resources.
    create_ns(&c, "ns2").await;
    let mut all = WatchStream::open(&c, &format!("/api/v1/configmaps?watch=true&resourceVersion={}&fieldSelector=metadata.namespace%3Dns2", s.resource_version()), &[]).await;
    create_cm(&c, "default", "d1", json!({})).await;
    create_cm(&c, "ns2", "n1", json!({})).await;
    let ev = all.next().await.unwrap();
    assert_eq!(name(&ev), "n1");
}

#[tokio::test]
async fn bookmarks_and_timeouts() {
    let s = bare().await; // bookmarks every 200 ms
    let c = s.client();
    let rv = s.resource_version();
    let mut w = WatchStream::open(
        &c,
        &format!("{CMS}?watch=true&resourceVersion={rv}&allowWatchBookmarks=true"),
        &[],
    )
    .await;
    let bm = w.until(|e| e["type"] == "BOOKMARK").await;
    assert_eq!(bm["object"]["kind"], "ConfigMap");
    assert_eq!(bm["object"]["apiVersion"], "v1");
    assert!(
        bm["object"]["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            >= rv
    );
    create_cm(&c, "kube-system", "elsewhere", json!({})).await;
    let now = s.resource_version();
    // A later bookmark carries the newer resourceVersion (progress without events for us).
    w.until(|e| {
        e["type"] == "BOOKMARK"
            && e["object"]["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .parse::<u64>()
                .unwrap()
                >= now
    })
    .await;
    // On request (hook), not only periodically.
    let slow = Sandbox::start_with(SandboxOptions {
        crds: vec![],
        bookmark_interval: Duration::from_secs(3600),
        ..Default::default()
    })
    .await
    .unwrap();
    let sc = slow.client();
    let mut b = WatchStream::open(
        &sc,
        &format!(
            "{CMS}?watch=true&resourceVersion={}&allowWatchBookmarks=true",
            slow.resource_version()
        ),
        &[],
    )
    .await;
    create_cm(&sc, "kube-system", "elsewhere", json!({})).await;
    let want = slow.resource_version();
    slow.send_bookmarks();
    let bm = b.next().await.unwrap();
    assert_eq!(
        (
            bm["type"].as_str().unwrap(),
            bm["object"]["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
        ),
        ("BOOKMARK", want.to_string().as_str())
    );
    assert_eq!(
        raw(&sc, "POST", "/sandbox/bookmark", &[], Vec::new())
            .await
            .code,
        200
    );
    assert_eq!(b.next().await.unwrap()["type"], "BOOKMARK");
    // Without allowWatchBookmarks there are none: the stream stays silent.
    let mut quiet =
        WatchStream::open(&c, &format!("{CMS}?watch=true&resourceVersion={now}"), &[]).await;
    assert!(quiet.next_within(Duration::from_millis(600)).await.is_err());
    // timeoutSeconds ends the stream.
    let mut t = WatchStream::open(
        &c,
        &format!("{CMS}?watch=true&resourceVersion={now}&timeoutSeconds=1"),
        &[],
    )
    .await;
    assert_eq!(t.next_within(Duration::from_secs(5)).await, Ok(None));
}

#[tokio::test]
async fn streaming_list_initial_events() {
    let s = bare().await;
    let c = s.client();
    create_cm(&c, "default", "one", json!({})).await;
    let mut w = WatchStream::open(&c, &format!("{CMS}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"), &[]).await;
    let mut added = BTreeSet::new();
    let end = loop {
        let ev = w.next().await.unwrap();
        match ev["type"].as_str().unwrap() {
            "ADDED" => {
                added.insert(name(&ev));
            }
            "BOOKMARK" => break ev,
            t => panic!("unexpected {t}"),
        }
    };
    assert_eq!(
        added,
        BTreeSet::from(["one".to_string(), "kube-root-ca.crt".to_string()])
    );
    assert_eq!(
        end["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    create_cm(&c, "default", "two", json!({})).await;
    assert_eq!(name(&w.until(|e| e["type"] == "ADDED").await), "two");
    let r = get(&c, &format!("{CMS}?watch=true&sendInitialEvents=true")).await;
    assert_status(&r, 422, "Invalid");
}

/// A server without the WatchList gate (kube-apiserver 1.33's default, or an aggregated API
/// server) refuses streaming lists with apimachinery's `validateWatchOptions` 422; plain watches
/// and lists still work.
#[tokio::test]
async fn streaming_lists_refused_without_the_watch_list_gate() {
    let s = Sandbox::start_with(SandboxOptions {
        watch_list: false,
        ..SandboxOptions::default()
    })
    .await
    .unwrap();
    let c = s.client();
    let r = get(
        &c,
        &format!("{CMS}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"),
    )
    .await;
    let status = assert_status(&r, 422, "Invalid");
    assert_eq!(
        status["message"],
        "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"
    );
    assert_eq!(
        status["details"]["causes"][0]["reason"],
        "FieldValueForbidden"
    );
    assert_eq!(status["details"]["causes"][0]["field"], "sendInitialEvents");
    assert!(status["details"].get("name").is_none());
    let cur = s.resource_version();
    let mut w =
        WatchStream::open(&c, &format!("{CMS}?watch=true&resourceVersion={cur}"), &[]).await;
    create_cm(&c, "default", "plain", json!({})).await;
    assert_eq!(name(&w.next().await.unwrap()), "plain");
}

#[tokio::test]
async fn too_old_resource_version_is_gone() {
    let s = bare().await;
    let c = s.client();
    create_cm(&c, "default", "a", json!({})).await;
    let old = s.resource_version() - 1;
    s.compact_history();
    let mut w =
        WatchStream::open(&c, &format!("{CMS}?watch=true&resourceVersion={old}"), &[]).await;
    let ev = w.next().await.unwrap();
    assert_eq!(ev["type"], "ERROR");
    assert_eq!(ev["object"]["kind"], "Status");
    assert_eq!(ev["object"]["code"], 410);
    assert_eq!(ev["object"]["reason"], "Expired");
    assert_eq!(w.next_within(Duration::from_secs(5)).await, Ok(None));
    // From the current version it works.
    let cur = s.resource_version();
    let mut w =
        WatchStream::open(&c, &format!("{CMS}?watch=true&resourceVersion={cur}"), &[]).await;
    create_cm(&c, "default", "b", json!({})).await;
    assert_eq!(name(&w.next().await.unwrap()), "b");
}

#[tokio::test]
async fn close_watches_ends_streams() {
    let s = bare().await;
    let c = s.client();
    let mut w = WatchStream::open(
        &c,
        &format!("{CMS}?watch=true&resourceVersion={}", s.resource_version()),
        &[],
    )
    .await;
    s.close_watches();
    assert_eq!(w.next_within(Duration::from_secs(5)).await, Ok(None));
}

/// A raw watch of ConfigMaps from `rv` whose client never reads, with a tiny receive buffer so
/// the server cannot park much in the kernel on its behalf.
async fn unread_watch(s: &Sandbox, rv: u64) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let mut conn = sock.connect(s.addr()).await.unwrap();
    conn.write_all(
        format!("GET {CMS}?watch=true&resourceVersion={rv} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    conn
}

/// Everything the server sent on `conn` up to the end of the chunked body (the watch closed).
async fn read_to_end_of_body(conn: &mut tokio::net::TcpStream) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    loop {
        let n = conn.read(&mut buf).await.unwrap();
        if n == 0 {
            return got;
        }
        got.extend_from_slice(&buf[..n]);
        if got.ends_with(b"\r\n0\r\n\r\n") {
            return got;
        }
    }
}

#[tokio::test]
async fn slow_watchers_do_not_block_writers() {
    let s = Sandbox::start_with(SandboxOptions {
        crds: vec![],
        watch_buffer: 16,
        ..Default::default()
    })
    .await
    .unwrap();
    let c = s.client();
    let rv = s.resource_version();
    // A watcher that never reads, with a tiny receive buffer so the server cannot park much in
    // the kernel on its behalf.
    let mut conn = unread_watch(&s, rv).await;
    let api: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    let data = "x".repeat(24 * 1024);
    let writes = async {
        for i in 0..600 {
            let cm: ConfigMap = serde_json::from_value(
                json!({"metadata": {"name": format!("slow-{i}")}, "data": {"d": data}}),
            )
            .unwrap();
            api.create(&kube::api::PostParams::default(), &cm)
                .await
                .unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(30), writes)
        .await
        .expect("writers were blocked by a slow watcher");
    // The slow watcher was closed (end of the chunked body) before it got everything.
    let got = tokio::time::timeout(Duration::from_secs(10), read_to_end_of_body(&mut conn))
        .await
        .expect("the slow watcher should have been closed");
    let text = String::from_utf8_lossy(&got);
    let events = text.matches("\"type\":\"ADDED\"").count();
    assert!(
        events > 0 && events < 600,
        "a watcher that fell behind should have been closed, got {events} events"
    );
    // A fresh watcher from the same point still gets everything from history.
    let mut w = WatchStream::open(&c, &format!("{CMS}?watch=true&resourceVersion={rv}"), &[]).await;
    for _ in 0..600 {
        assert_eq!(w.next().await.unwrap()["type"], "ADDED");
    }
}

/// A watcher that stops reading is closed once its buffer is full and an event has waited the
/// budget (100 ms by default), long before it falls 10,000 events behind, as kube-apiserver's
/// watch cache closes it (k8s.io/apiserver `pkg/storage/cacher/cache_watcher.go` `add`,
/// `time_budget.go`); the client resumes from its last resourceVersion and loses nothing.
#[tokio::test]
async fn a_watcher_that_stops_reading_is_closed_within_the_budget() {
    let s = Sandbox::start_with(SandboxOptions {
        crds: vec![],
        ..Default::default()
    })
    .await
    .unwrap();
    let c = s.client();
    let rv = s.resource_version();
    let mut conn = unread_watch(&s, rv).await;
    let api: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    let data = "x".repeat(24 * 1024);
    const COUNT: usize = 300;
    for i in 0..COUNT {
        let cm: ConfigMap = serde_json::from_value(
            json!({"metadata": {"name": format!("stalled-{i}")}, "data": {"d": data}}),
        )
        .unwrap();
        api.create(&kube::api::PostParams::default(), &cm)
            .await
            .unwrap();
    }
    let got = tokio::time::timeout(Duration::from_secs(10), read_to_end_of_body(&mut conn))
        .await
        .expect("a watcher that stopped reading is closed, far from 10,000 events behind");
    let text = String::from_utf8_lossy(&got);
    let events = text.matches("\"type\":\"ADDED\"").count();
    assert!(events < COUNT, "closed before it got everything: {events}");
    assert_eq!(s.slow_watchers_closed(), 1, "counted as a slow watcher");
    let last = text
        .lines()
        .rev()
        .find_map(|line| {
            serde_json::from_str::<serde_json::Value>(line)
                .ok()
                .and_then(|e| {
                    e["object"]["metadata"]["resourceVersion"]
                        .as_str()
                        .map(str::to_string)
                })
        })
        .unwrap_or(rv.to_string());
    // Resuming from the last resourceVersion received delivers the rest, none twice.
    let mut w =
        WatchStream::open(&c, &format!("{CMS}?watch=true&resourceVersion={last}"), &[]).await;
    for i in events..COUNT {
        let event = w.next().await.unwrap();
        assert_eq!(event["type"], "ADDED");
        assert_eq!(event["object"]["metadata"]["name"], format!("stalled-{i}"));
    }
}

#[tokio::test]
async fn kube_runtime_watchers_and_reflectors() {
    let s = bare().await;
    let c = s.client();
    for i in 0..20 {
        create_cm(&c, "default", &format!("r-{i}"), json!({"set": "r"})).await;
    }
    let api: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    for (round, (mode, cfg)) in [
        ("list+watch", watcher::Config::default().labels("set=r")),
        (
            "streaming",
            watcher::Config::default().labels("set=r").streaming_lists(),
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let (reader, writer) = reflector::store();
        let stream = reflector(writer, watcher(api.clone(), cfg))
            .applied_objects()
            .boxed();
        let task = tokio::spawn(stream.try_for_each(|_| async { Ok(()) }));
        reader.wait_until_ready().await.unwrap();
        assert_eq!(reader.len(), 20 + round, "{mode}");
        create_cm(
            &c,
            "default",
            &format!("late-{mode}").replace('+', "-"),
            json!({"set": "r"}),
        )
        .await;
        eventually(Duration::from_secs(10), mode, || {
            let r = reader.clone();
            async move { (r.len() == 21 + round).then_some(()) }
        })
        .await;
        task.abort();
    }
    // Metadata-only watcher.
    let mut md =
        kube::runtime::metadata_watcher(api.clone(), watcher::Config::default().labels("set=r"))
            .applied_objects()
            .boxed();
    // The initial state arrives as metadata only.
    let first = tokio::time::timeout(Duration::from_secs(10), md.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(first.metadata.labels.unwrap().contains_key("set"));
    create_cm(&c, "default", "md-live", json!({"set": "r"})).await;
    loop {
        let o = tokio::time::timeout(Duration::from_secs(10), md.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if o.metadata.name.as_deref() == Some("md-live") {
            break;
        }
    }
}

#[tokio::test]
async fn bounded_history() {
    let s = Sandbox::start_with(SandboxOptions {
        crds: vec![],
        history_limit: 5,
        ..Default::default()
    })
    .await
    .unwrap();
    let c = s.client();
    let start = s.resource_version();
    for i in 0..10 {
        create_cm(&c, "default", &format!("h{i}"), json!({})).await;
    }
    // Only the last 5 events are retained: older versions are gone, newer ones replay.
    let mut old = WatchStream::open(
        &c,
        &format!("{CMS}?watch=true&resourceVersion={start}"),
        &[],
    )
    .await;
    assert_eq!(old.next().await.unwrap()["object"]["code"], 410);
    let recent = s.resource_version() - 3;
    let mut w = WatchStream::open(
        &c,
        &format!("{CMS}?watch=true&resourceVersion={recent}"),
        &[],
    )
    .await;
    assert_eq!(name(&w.next().await.unwrap()), "h7");
}
