//! `/metrics`, `/healthz` and `/readyz` over HTTP from running managers: the series a dashboard
//! needs are there and move, label values are bounded, readiness follows the documented rules
//! for leaders and followers, and every registered metric is documented.

use crate::common;
use crate::fleet_common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use caapf::cli::ManagerFlags;
use caapf::manager::Manager;
use common::tls::{Ca, Connection};
use common::{Harness, eventually};
use kube_sandbox::{FaultConfig, FaultRule, FaultTarget};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// A plain HTTP/1.1 GET; returns the status code and body.
async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.expect("read");
    let text = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, body.to_string())
}

fn served(flags: &ManagerFlags) -> ManagerFlags {
    ManagerFlags {
        health_probe_bind_address: "127.0.0.1:0".into(),
        metrics_bind_address: "127.0.0.1:0".into(),
        ..flags.clone()
    }
}

/// The value of the sample `series` (exact name and labels), if exposed.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
}

/// Every label value in the exposition.
fn label_values(text: &str) -> BTreeSet<String> {
    let mut values = BTreeSet::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((_, labels)) = line.split_once('{') else {
            continue;
        };
        let labels = labels.split('}').next().unwrap_or_default();
        for pair in labels.split(',') {
            if let Some((_, value)) = pair.split_once('=') {
                values.insert(value.trim_matches('"').to_string());
            }
        }
    }
    values
}

/// POSTs `body` to the runtime extension over TLS (HTTP/1.1); returns the status code.
async fn post_hook(addr: SocketAddr, ca: &Ca, path: &str, body: &'static str) -> u16 {
    Connection::open(addr, &ca.connector(&[b"http/1.1"]))
        .await
        .unwrap_or_else(|e| panic!("connecting: {e}"))
        .post(path, body)
        .await
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_scraped_over_http_with_the_documented_series() {
    let repo = fleet_common::ChartRepo::start(&["0.2.0"]).await;
    // A CA and a serving certificate for 127.0.0.1 (the runtime extension's TLS).
    let ca = Ca::new();
    let certs = tempfile::tempdir().expect("tempdir");
    ca.install_serving(certs.path(), "caapf extension");
    let mut h = Harness::new().await;
    h.namespace("caapf-system", json!({})).await;
    h.namespace("team-a", json!({})).await;
    h.cluster("team-a", json!({"metadata": {"name": "c1"}, "spec": {}}))
        .await;
    h.initialize("team-a", "c1").await;
    // The first Fleet Cluster apply fails, so an error is counted.
    let mut rule = FaultRule::fail(FaultTarget::Writes, 1.0, 500).for_resource("clusters");
    rule.verbs = Some(vec!["APPLY".into()]);
    h.sandbox.set_faults(FaultConfig {
        rules: vec![rule],
        ..Default::default()
    });
    let helm_dir = tempfile::tempdir().expect("tempdir");
    h.flags = ManagerFlags {
        leader_elect: true,
        leader_election_namespace: Some("caapf-system".into()),
        webhook_cert_dir: certs.path().to_string_lossy().into_owned(),
        ..served(&h.flags)
    };
    h.use_helm(&fleet_common::helm_bin(), helm_dir.path());
    h.start().await;
    let (metrics_addr, webhook_addr) = h
        .manager
        .as_ref()
        .map(|m| {
            (
                m.metrics_address.expect("metrics address"),
                m.webhook_address,
            )
        })
        .expect("manager");
    eventually("a failed reconcile is counted", || async {
        let (_, text) = http_get(metrics_addr, "/metrics").await;
        sample(
            &text,
            "caapf_controller_reconciliation_errors_total{controller=\"cluster\",error=\"server_error\"}",
        )
        .filter(|v| *v >= 1.0)
    })
    .await;
    h.sandbox.clear_faults();
    eventually("imported", || h.fleet_cluster("team-a", "c1")).await;

    // helm installs Fleet; the runtime extension answers a discovery call.
    h.config(&format!(
        "cluster: {{patchResource: true, setOwnerReferences: true}}\ninstall: {{version: 0.2.0, repository: \"{}\"}}",
        repo.url()
    ))
    .await;
    eventually("Fleet installed", || async {
        let installed = h.addon_config().await?.status?.installed_version?;
        (installed == "0.2.0").then_some(())
    })
    .await;
    let status = post_hook(
        webhook_addr,
        &ca,
        "/hooks.runtime.cluster.x-k8s.io/v1alpha1/discovery",
        r#"{"apiVersion":"hooks.runtime.cluster.x-k8s.io/v1alpha1","kind":"DiscoveryRequest"}"#,
    )
    .await;
    assert_eq!(status, 200);

    let text = eventually("the imported-cluster gauge", || async {
        let (code, text) = http_get(metrics_addr, "/metrics").await;
        assert_eq!(code, 200);
        (sample(&text, "caapf_imported_clusters") == Some(1.0)).then_some(text)
    })
    .await;
    for (series, at_least) in [
        (
            "caapf_controller_reconciliations_total{controller=\"cluster\"}",
            2.0,
        ),
        (
            "caapf_controller_reconciliations_total{controller=\"namespace\"}",
            1.0,
        ),
        (
            "caapf_controller_reconciliations_total{controller=\"fleet-config\"}",
            1.0,
        ),
        (
            "caapf_controller_reconcile_duration_seconds_count{controller=\"cluster\"}",
            2.0,
        ),
        (
            "caapf_controller_reconcile_duration_seconds_bucket{le=\"+Inf\",controller=\"cluster\"}",
            2.0,
        ),
        (
            "caapf_hook_requests_total{hook=\"Discovery\",status=\"Success\"}",
            1.0,
        ),
        ("caapf_hook_duration_seconds_count{hook=\"Discovery\"}", 1.0),
        (
            "caapf_helm_operations_total{operation=\"install\",outcome=\"success\"}",
            2.0,
        ),
        ("caapf_selected_clusters", 1.0),
        ("caapf_imported_clusters", 1.0),
        ("caapf_leader", 1.0),
    ] {
        let value = sample(&text, series).unwrap_or_else(|| panic!("no {series} in\n{text}"));
        assert!(
            value >= at_least,
            "{series} = {value}, expected >= {at_least}"
        );
    }
    // No object name or namespace is ever a label value.
    let values = label_values(&text);
    for name in [
        "c1",
        "team-a",
        "caapf-system",
        "fleet-addon-config",
        "cattle-fleet-system",
    ] {
        assert!(!values.contains(name), "{name} used as a label value");
    }
    h.stop().await;
}

#[tokio::test]
async fn readiness_of_leaders_and_followers() {
    let h = Harness::new().await;
    h.namespace("caapf-system", json!({})).await;
    h.namespace("ns", json!({})).await;
    // A serving certificate, so the runtime extension's readiness check passes too.
    let certs = tempfile::tempdir().expect("tempdir");
    Ca::new().install_serving(certs.path(), "caapf extension");
    let flags = ManagerFlags {
        leader_elect: true,
        webhook_cert_dir: certs.path().to_string_lossy().into_owned(),
        leader_election_namespace: Some("caapf-system".into()),
        leader_elect_lease_duration: Duration::from_secs(4),
        leader_elect_renew_deadline: Duration::from_secs(3),
        leader_elect_retry_period: Duration::from_millis(200),
        ..served(&h.flags)
    };
    // Slow CAPI Cluster lists (streaming or paged) keep the leader's caches unsynced for a
    // while.
    if std::env::var("NOFAULT").is_err() {
        h.sandbox.set_faults(FaultConfig {
            rules: vec![FaultRule {
                target: FaultTarget::Reads,
                resource: Some("clusters".into()),
                verbs: Some(vec!["LIST".into(), "WATCH".into()]),
                latency_ms: Some(1500),
                ..Default::default()
            }],
            ..Default::default()
        });
    }
    let leader = Manager::start(
        h.manager_client().await,
        flags.clone(),
        CancellationToken::new(),
    )
    .await
    .expect("leader starts");
    eventually("the first replica leads", || async {
        leader.is_leader().then_some(())
    })
    .await;
    let follower = Manager::start(h.manager_client().await, flags, CancellationToken::new())
        .await
        .expect("follower starts");
    let leader_health = leader.health_address.expect("health address");
    let follower_health = follower.health_address.expect("health address");

    // Liveness does not depend on anything.
    assert_eq!(http_get(leader_health, "/healthz").await.0, 200);
    assert_eq!(http_get(follower_health, "/livez").await.0, 200);
    // The leader is not ready until its caches are synced, and says why.
    let (code, body) = http_get(leader_health, "/readyz").await;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("import-caches"), "{body}");
    // The follower is ready once its own servers and the configuration cache are: it does not
    // wait for caches it does not run.
    eventually("the follower is ready", || async {
        let (code, body) = http_get(follower_health, "/readyz").await;
        assert!(!body.contains("import-caches"), "{body}");
        (code == 200).then_some(())
    })
    .await;
    assert!(!follower.is_leader());
    eventually("the leader is ready once synced", || async {
        (http_get(leader_health, "/readyz").await.0 == 200).then_some(())
    })
    .await;
    // CAAPF's readiness path answers the same.
    assert_eq!(http_get(leader_health, "/health").await.0, 200);
    h.sandbox.clear_faults();
    leader.stop().await;
    follower.stop().await;
}

#[test]
fn every_metric_is_documented() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/metrics.md")).expect("docs/metrics.md");
    // Every `registry.register("name", ...)` in the source, so a new metric cannot be missed.
    let source = std::fs::read_to_string(root.join("src/metrics.rs")).expect("src/metrics.rs");
    let names: Vec<&str> = source
        .split("registry.register(")
        .skip(1)
        .filter_map(|rest| rest.split('"').nth(1))
        .collect();
    assert!(names.len() >= 9, "{names:?}");
    for name in names {
        // Counters are exposed as `<name>_total`: the doc lists exposed names.
        assert!(
            doc.contains(&format!("`{name}`")) || doc.contains(&format!("`{name}_total`")),
            "docs/metrics.md does not document `{name}`"
        );
    }
}

#[tokio::test]
async fn the_manager_client_is_identified_and_rate_limited() {
    use k8s_openapi::api::core::v1::Namespace;
    let h = Harness::new().await;
    let limited = ManagerFlags {
        kube_api_qps: 4.0,
        kube_api_burst: 1,
        ..h.flags.clone()
    };
    let client = common::manager_client(&h.sandbox, &limited).await;
    let api: kube::Api<Namespace> = kube::Api::all(client);
    let started = std::time::Instant::now();
    let requests = (0..5).map(|_| {
        let api = api.clone();
        async move { api.get("default").await.expect("get") }
    });
    futures::future::join_all(requests).await;
    // One at once, then one every 250 ms.
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(950),
        "5 requests at 4 qps took {took:?}"
    );
    let recorded = h
        .sandbox
        .requests()
        .count(|r| r.resource == "namespaces" && common::from_manager(r));
    assert_eq!(
        recorded, 5,
        "every request carries the manager's User-Agent"
    );

    // 0 disables the limit.
    let unlimited = common::manager_client(&h.sandbox, &h.flags).await;
    let api: kube::Api<Namespace> = kube::Api::all(unlimited);
    let started = std::time::Instant::now();
    futures::future::join_all((0..20).map(|_| {
        let api = api.clone();
        async move { api.get("default").await.expect("get") }
    }))
    .await;
    assert!(started.elapsed() < Duration::from_secs(2));
}
