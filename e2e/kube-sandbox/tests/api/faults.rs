//! Request metrics and fault injection.

use std::time::{Duration, Instant};

use crate::common::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube_sandbox::{FaultConfig, FaultRule, FaultTarget, Verb};
use serde_json::json;

#[tokio::test]
async fn metrics_count_every_verb() {
    let s = bare().await;
    let c = s.client();
    let api: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    create_cm(&c, "default", "m", json!({})).await;
    api.get("m").await.unwrap();
    api.list(&ListParams::default()).await.unwrap();
    api.patch(
        "m",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"a": "b"}})),
    )
    .await
    .unwrap();
    api.patch(
        "m",
        &PatchParams::apply("t"),
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"c": "d"}})),
    )
    .await
    .unwrap();
    let cur = api.get("m").await.unwrap();
    api.replace("m", &Default::default(), &cur).await.unwrap();
    api.get("missing").await.unwrap_err();
    api.delete("m", &DeleteParams::default()).await.unwrap();
    api.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("none"),
    )
    .await
    .unwrap();
    let mut w = WatchStream::open(
        &c,
        "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=1",
        &[],
    )
    .await;
    while let Ok(Some(_)) = w.next_within(Duration::from_secs(5)).await {}
    let text = get(&c, "/metrics").await;
    let text = String::from_utf8(text.body).unwrap();
    for (verb, code) in [
        ("POST", 201),
        ("GET", 200),
        ("GET", 404),
        ("LIST", 200),
        ("PATCH", 200),
        ("APPLY", 200),
        ("PUT", 200),
        ("DELETE", 200),
        ("DELETECOLLECTION", 200),
        ("WATCH", 200),
    ] {
        let line = format!(
            "apiserver_request_total{{code=\"{code}\",group=\"\",resource=\"configmaps\",subresource=\"\",verb=\"{verb}\",version=\"v1\"}}"
        );
        assert!(text.contains(&line), "missing {line} in\n{text}");
    }
    assert!(text.contains("# TYPE apiserver_request_total counter"));
    assert_eq!(
        String::from_utf8(get(&c, "/sandbox/metrics").await.body)
            .unwrap()
            .lines()
            .count(),
        text.lines().count()
    );
    // The library helpers.
    assert_eq!(
        s.requests()
            .count(|r| r.verb == Verb::Apply && r.resource == "configmaps"),
        1
    );
    assert_eq!(s.write_count(), 6);
    s.requests().reset();
    assert_eq!(s.write_count(), 0);
}

#[tokio::test]
async fn failing_a_fraction_of_writes() {
    let s = bare().await;
    let c = s.client();
    s.set_faults(FaultConfig {
        rules: vec![FaultRule::fail(FaultTarget::Writes, 0.5, 500)],
        ..Default::default()
    });
    let mut codes = Vec::new();
    for i in 0..4 {
        codes.push(
            post(
                &c,
                "/api/v1/namespaces/default/configmaps",
                json!({"metadata": {"name": format!("f{i}")}}),
            )
            .await
            .code,
        );
    }
    assert_eq!(codes, vec![201, 500, 201, 500]);
    assert_eq!(
        get(&c, "/api/v1/namespaces/default/configmaps/f0")
            .await
            .code,
        200,
        "reads are not affected"
    );
    let r = post(
        &c,
        "/api/v1/namespaces/default/configmaps",
        json!({"metadata": {"name": "x"}}),
    )
    .await;
    assert_eq!(r.code, 201);
    assert_status(
        &post(
            &c,
            "/api/v1/namespaces/default/configmaps",
            json!({"metadata": {"name": "y"}}),
        )
        .await,
        500,
        "InternalError",
    );
    s.clear_faults();
    assert_eq!(
        post(
            &c,
            "/api/v1/namespaces/default/configmaps",
            json!({"metadata": {"name": "y"}})
        )
        .await
        .code,
        201
    );
}

#[tokio::test]
async fn throttling_conflicts_scoping_and_latency_over_http() {
    let s = bare().await;
    let c = s.client();
    let cfg = json!({"rules": [
        {"target": "reads", "resource": "secrets", "fraction": 1.0, "code": 429, "retryAfterSeconds": 3},
        {"target": "writes", "resource": "configmaps", "verbs": ["PATCH"], "fraction": 1.0, "code": 409},
        {"target": "all", "resource": "services", "latencyMs": 300}
    ]});
    let r = raw(
        &c,
        "POST",
        "/sandbox/faults",
        &[("content-type", "application/json")],
        serde_json::to_vec(&cfg).unwrap(),
    )
    .await;
    assert_eq!(r.code, 200);
    let r = get(&c, "/api/v1/namespaces/default/secrets").await;
    assert_status(&r, 429, "TooManyRequests");
    assert_eq!(r.header("retry-after"), "3");
    assert_eq!(
        get(&c, "/api/v1/namespaces/default/configmaps").await.code,
        200,
        "scoped to secrets"
    );
    create_cm(&c, "default", "p", json!({})).await;
    assert_status(
        &patch(
            &c,
            "/api/v1/namespaces/default/configmaps/p",
            "application/merge-patch+json",
            json!({}),
        )
        .await,
        409,
        "Conflict",
    );
    let t = Instant::now();
    assert_eq!(
        get(&c, "/api/v1/namespaces/default/services").await.code,
        200
    );
    assert!(
        t.elapsed() >= Duration::from_millis(300),
        "latency injected"
    );
    assert_eq!(
        raw(&c, "DELETE", "/sandbox/faults", &[], Vec::new())
            .await
            .code,
        200
    );
    assert_eq!(
        get(&c, "/api/v1/namespaces/default/secrets").await.code,
        200
    );
    // kube surfaces injected errors as API errors.
    s.set_faults(FaultConfig {
        rules: vec![FaultRule::fail(FaultTarget::Reads, 1.0, 500).for_resource("configmaps")],
        ..Default::default()
    });
    let err = Api::<ConfigMap>::namespaced(c.clone(), "default")
        .get("p")
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 500),
        "{err}"
    );
}

#[tokio::test]
async fn watch_faults_over_http() {
    let s = bare().await;
    let c = s.client();
    let cms = "/api/v1/namespaces/default/configmaps";
    let mut w = WatchStream::open(
        &c,
        &format!("{cms}?watch=true&resourceVersion={}", s.resource_version()),
        &[],
    )
    .await;
    raw(
        &c,
        "POST",
        "/sandbox/faults",
        &[],
        serde_json::to_vec(&json!({"closeWatchesNow": true})).unwrap(),
    )
    .await;
    assert_eq!(w.next_within(Duration::from_secs(5)).await, Ok(None));
    // Periodic closing.
    raw(
        &c,
        "POST",
        "/sandbox/faults",
        &[],
        serde_json::to_vec(&json!({"closeWatchesEverySeconds": 0.3})).unwrap(),
    )
    .await;
    for _ in 0..2 {
        let mut w = WatchStream::open(
            &c,
            &format!("{cms}?watch=true&resourceVersion={}", s.resource_version()),
            &[],
        )
        .await;
        assert_eq!(w.next_within(Duration::from_secs(5)).await, Ok(None));
    }
    raw(&c, "DELETE", "/sandbox/faults", &[], Vec::new()).await;
    let mut w = WatchStream::open(
        &c,
        &format!("{cms}?watch=true&resourceVersion={}", s.resource_version()),
        &[],
    )
    .await;
    assert!(
        w.next_within(Duration::from_millis(800)).await.is_err(),
        "no more periodic closing"
    );
    // Compaction over HTTP.
    create_cm(&c, "default", "a", json!({})).await;
    let old = s.resource_version() - 1;
    raw(
        &c,
        "POST",
        "/sandbox/faults",
        &[],
        serde_json::to_vec(&json!({"compactHistory": true})).unwrap(),
    )
    .await;
    let mut w =
        WatchStream::open(&c, &format!("{cms}?watch=true&resourceVersion={old}"), &[]).await;
    assert_eq!(w.next().await.unwrap()["object"]["code"], 410);
    assert_eq!(
        raw(&c, "POST", "/sandbox/compact", &[], Vec::new())
            .await
            .code,
        200
    );
    assert_eq!(
        raw(&c, "POST", "/sandbox/close-watches", &[], Vec::new())
            .await
            .code,
        200
    );
    let reqs = get(&c, "/sandbox/requests").await.json();
    assert!(
        reqs.as_array()
            .unwrap()
            .iter()
            .any(|r| r["verb"] == "WATCH")
    );
}

#[tokio::test]
async fn the_request_log_records_the_user_agent() {
    let s = bare().await;
    let c = s.client();
    get(&c, "/api/v1/namespaces/default/configmaps").await;
    raw(
        &c,
        "GET",
        "/api/v1/namespaces/default/configmaps/kube-root-ca.crt",
        &[("user-agent", "caapf/0.1.0")],
        Vec::new(),
    )
    .await;
    let agents: Vec<(String, String)> = s
        .requests()
        .all()
        .into_iter()
        .filter(|r| r.resource == "configmaps")
        .map(|r| (r.name, r.user_agent))
        .collect();
    assert_eq!(
        agents,
        [
            (String::new(), String::new()),
            ("kube-root-ca.crt".to_string(), "caapf/0.1.0".to_string())
        ]
    );
    let logged = get(&c, "/sandbox/requests").await.json();
    assert!(
        logged
            .as_array()
            .is_some_and(|l| l.iter().any(|r| r["userAgent"] == "caapf/0.1.0")),
        "{logged}"
    );
}

#[tokio::test]
async fn delayed_watch_events_of_one_resource() {
    let s = bare().await;
    let c = s.client();
    let cms = "/api/v1/namespaces/default/configmaps";
    let secrets = "/api/v1/namespaces/default/secrets";
    raw(
        &c,
        "POST",
        "/sandbox/faults",
        &[],
        serde_json::to_vec(
            &json!({"watchDelays": [{"group": "", "resource": "configmaps", "delayMs": 400}]}),
        )
        .unwrap(),
    )
    .await;
    let from = s.resource_version();
    let mut delayed =
        WatchStream::open(&c, &format!("{cms}?watch=true&resourceVersion={from}"), &[]).await;
    let mut other = WatchStream::open(
        &c,
        &format!("{secrets}?watch=true&resourceVersion={from}"),
        &[],
    )
    .await;
    let written = Instant::now();
    create_cm(&c, "default", "late", json!({})).await;
    raw(
        &c,
        "POST",
        secrets,
        &[],
        serde_json::to_vec(&json!({"metadata": {"name": "prompt"}})).unwrap(),
    )
    .await;
    // Other resources are not delayed; the delayed event arrives, but not before its delay.
    let event = other.next_within(Duration::from_secs(5)).await;
    assert_eq!(
        event.unwrap().unwrap()["object"]["metadata"]["name"],
        "prompt"
    );
    let event = delayed.next_within(Duration::from_secs(5)).await;
    assert_eq!(
        event.unwrap().unwrap()["object"]["metadata"]["name"],
        "late"
    );
    assert!(written.elapsed() >= Duration::from_millis(400));
}
