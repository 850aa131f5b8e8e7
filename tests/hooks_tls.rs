//! The extension's HTTPS server: a client trusting the test CA gets answers over HTTP/1.1 and
//! HTTP/2; certificates rotated on disk are served without a restart; an invalid new pair keeps
//! the old one; missing files keep the extension not ready until they appear; plain HTTP is
//! refused; limits and deadlines answer Failure with HTTP 200. Everything on 127.0.0.1.

use crate::common;

use std::net::SocketAddr;
use std::time::Duration;

use caapf::cli::ManagerFlags;
use caapf::hooks::server::{READY_CHECK, ServerOptions};
use caapf::model::config::EffectiveConfig;
use common::free_port;
use common::tls::{Ca, DISCOVERY, Server, discovery_request, install, post};
use rustls::pki_types::ServerName;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

/// The extension with its default options and configuration; a serving certificate from `ca`
/// installed first, none without.
async fn serve(ca: Option<&Ca>) -> Server {
    Server::with_options(ca, ServerOptions::default()).await
}

/// A DiscoveryRequest over a fresh HTTP/1.1 connection.
async fn discover(addr: SocketAddr, ca: &Ca) -> common::tls::Answer {
    post(addr, ca, &[b"http/1.1"], DISCOVERY, discovery_request()).await
}

#[tokio::test]
async fn a_client_trusting_the_ca_gets_answers_over_http1_and_http2() {
    let ca = Ca::new();
    let server = serve(Some(&ca)).await;
    assert!(
        server.ctx.base.readiness.pending().is_empty(),
        "{:?}",
        server.ctx.base.readiness.pending()
    );
    for (offer, expected) in [
        (
            &[b"h2".as_slice(), b"http/1.1".as_slice()][..],
            b"h2".as_slice(),
        ),
        (&[b"http/1.1".as_slice()][..], b"http/1.1".as_slice()),
    ] {
        let answer = post(
            server.addr,
            &ca,
            offer,
            &format!("{DISCOVERY}?timeout=10s"),
            discovery_request(),
        )
        .await;
        assert_eq!(answer.alpn.as_deref(), Some(expected));
        assert_eq!(answer.status, 200);
        assert_eq!(answer.body["kind"], "DiscoveryResponse");
        assert_eq!(answer.body["status"], "Success");
        assert_eq!(answer.body["handlers"].as_array().map(Vec::len), Some(8));
    }
    let metrics = server.ctx.base.metrics.render();
    assert!(
        metrics.contains("caapf_hook_requests_total{hook=\"Discovery\",status=\"Success\"} 2"),
        "{metrics}"
    );
}

#[tokio::test]
async fn rotated_certificates_are_served_without_a_restart_and_invalid_ones_are_ignored() {
    let ca = Ca::new();
    let server = serve(Some(&ca)).await;
    let first = discover(server.addr, &ca).await;

    let second = ca.serving("serving-2");
    let second_der = second.der;
    assert_ne!(first.peer, second_der);
    install(&server.dir, &second.cert, &second.key);
    let rotated = discover(server.addr, &ca).await;
    assert_eq!(rotated.peer, second_der, "the new certificate is served");
    assert_eq!(rotated.body["status"], "Success");

    // A broken pair (a key that does not match the certificate) keeps the previous one.
    let third = ca.serving("serving-3");
    let unrelated = ca.serving("unrelated");
    install(&server.dir, &third.cert, &unrelated.key);
    let kept = discover(server.addr, &ca).await;
    assert_eq!(
        kept.peer, second_der,
        "the previous certificate is still served"
    );
    assert!(server.ctx.base.readiness.pending().is_empty());
}

#[tokio::test]
async fn missing_certificates_keep_the_extension_not_ready_until_they_appear() {
    let ca = Ca::new();
    let server = serve(None).await;
    assert_eq!(server.ctx.base.readiness.pending(), [READY_CHECK]);
    let tcp = TcpStream::connect(server.addr).await.expect("connect");
    let refused = ca
        .connector(&[b"http/1.1"])
        .connect(ServerName::try_from("localhost").expect("name"), tcp)
        .await;
    assert!(refused.is_err(), "no certificate: the handshake fails");

    let der = ca.install_serving(&server.dir, "late");
    let answer = discover(server.addr, &ca).await;
    assert_eq!(answer.peer, der);
    assert!(
        server.ctx.base.readiness.pending().is_empty(),
        "ready once the files loaded"
    );
}

#[tokio::test]
async fn plain_http_is_refused() {
    let ca = Ca::new();
    let server = serve(Some(&ca)).await;
    let mut tcp = TcpStream::connect(server.addr).await.expect("connect");
    let body = String::from_utf8(discovery_request()).expect("utf-8");
    let request = format!(
        "POST {DISCOVERY} HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    tcp.write_all(request.as_bytes()).await.expect("write");
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "the server closes the connection");
    assert!(
        !answer.starts_with(b"HTTP/"),
        "plain HTTP got an HTTP answer: {:?}",
        String::from_utf8_lossy(&answer)
    );
}

#[tokio::test]
async fn bad_requests_are_http_200_failures() {
    let ca = Ca::new();
    let options = ServerOptions {
        max_body_bytes: 1024,
        ..ServerOptions::default()
    };
    let server = Server::with_options(Some(&ca), options).await;
    let prefix = "/hooks.runtime.cluster.x-k8s.io/v1alpha1";
    let cases: Vec<(String, Vec<u8>, &str)> = vec![
        (
            format!("{prefix}/generatepatches/fleet-agent-bootstrap"),
            vec![b'{'; 2048],
            "at most 1024 bytes",
        ),
        (
            format!("{prefix}/generatepatches/fleet-agent-bootstrap"),
            b"{not json".to_vec(),
            "not valid JSON",
        ),
        (
            format!("{prefix}/generateupgradeplan/x"),
            b"{}".to_vec(),
            "unknown hook",
        ),
        (
            format!("{prefix}/beforeclustercreate/nope"),
            b"{}".to_vec(),
            "unknown handler",
        ),
        (
            format!("{prefix}/discovervariables/fleet-agent-variables"),
            br#"{"kind":"GeneratePatchesRequest"}"#.to_vec(),
            "expected kind DiscoverVariablesRequest",
        ),
        (
            "/metrics".to_string(),
            b"{}".to_vec(),
            "not a Runtime SDK hook path",
        ),
    ];
    for (path, body, message) in cases {
        let answer = post(server.addr, &ca, &[b"h2", b"http/1.1"], &path, body).await;
        assert_eq!(answer.status, 200, "{path}");
        assert_eq!(answer.body["status"], "Failure", "{path}: {}", answer.body);
        assert!(
            answer.body["message"]
                .as_str()
                .unwrap_or_default()
                .contains(message),
            "{path}: {}",
            answer.body
        );
    }
}

/// A handler that cannot finish (the API server never answers) is cut at the deadline derived
/// from the `timeout` parameter, not left to CAPI's client timeout; a lifecycle hook is answered
/// "retry" (an API outage must not fail a Cluster's lifecycle).
#[tokio::test]
async fn the_timeout_parameter_bounds_handling() {
    let ca = Ca::new();
    // An "API server" that accepts connections and never answers.
    let blackhole = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", blackhole.local_addr().expect("addr"));
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = blackhole.accept().await {
            held.push(stream);
        }
    });
    let config = EffectiveConfig::from_spec(
        &serde_yaml::from_str("cluster: {agentInitiated: true}").expect("spec"),
    );
    let server = Server::start(Some(&ca), ServerOptions::default(), &url, config).await;
    let body = serde_json::to_vec(&json!({
        "apiVersion": "hooks.runtime.cluster.x-k8s.io/v1alpha1", "kind": "BeforeClusterCreateRequest",
        "cluster": {"metadata": {"name": "c1", "namespace": "ns", "uid": "u"},
                    "spec": {"topology": {"variables": [{"name": "fleetAgent", "value": {"enabled": true}}]}}},
    }))
    .expect("json");
    let started = std::time::Instant::now();
    let answer = post(
        server.addr,
        &ca,
        &[b"http/1.1"],
        "/hooks.runtime.cluster.x-k8s.io/v1alpha1/beforeclustercreate/before-cluster-create?timeout=1s",
        body,
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(answer.status, 200);
    assert_eq!(answer.body["status"], "Success");
    assert!(
        answer.body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("did not finish within"),
        "{}",
        answer.body
    );
    assert_eq!(answer.body["retryAfterSeconds"], 10);
}

async fn readyz(port: u16) -> Option<String> {
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    tcp.write_all(b"GET /readyz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .ok()?;
    let mut answer = Vec::new();
    tcp.read_to_end(&mut answer).await.ok()?;
    Some(String::from_utf8_lossy(&answer).into_owned())
}

/// Polls `/readyz` until `done` holds (bounded): the manager's readiness is only observable
/// from outside.
async fn wait_readyz(port: u16, done: impl Fn(&str) -> bool) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(body) = readyz(port).await
            && done(&body)
        {
            return body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "/readyz never satisfied the condition"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The manager starts the extension (on every replica: no leader election involved), keeps it
/// not ready while the certificate is missing, and serves it once the files appear.
#[tokio::test]
async fn the_manager_serves_the_extension() {
    let sandbox = kube_sandbox::Sandbox::start().await;
    let ca = Ca::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let health = free_port();
    let webhook = free_port();
    let flags = ManagerFlags {
        health_probe_bind_address: format!("127.0.0.1:{health}"),
        metrics_bind_address: "0".to_string(),
        webhook_host: "127.0.0.1".to_string(),
        webhook_port: webhook,
        webhook_cert_dir: dir.path().to_string_lossy().into_owned(),
        ..ManagerFlags::default()
    };
    let shutdown = CancellationToken::new();
    let manager = tokio::spawn(caapf::manager::run_with_client(
        sandbox.client(),
        flags,
        shutdown.clone(),
    ));
    let body = wait_readyz(health, |b| b.contains("503")).await;
    assert!(body.contains(READY_CHECK), "{body}");

    let der = ca.install_serving(dir.path(), "manager");
    let addr = SocketAddr::from(([127, 0, 0, 1], webhook));
    let answer = post(
        addr,
        &ca,
        &[b"h2", b"http/1.1"],
        DISCOVERY,
        discovery_request(),
    )
    .await;
    assert_eq!(answer.peer, der);
    assert_eq!(answer.body["status"], "Success");
    // Other checks (controllers) may still be pending; the extension's is not.
    wait_readyz(health, |b| b.contains("200 OK") || !b.contains(READY_CHECK)).await;

    shutdown.cancel();
    let ended = tokio::time::timeout(Duration::from_secs(10), manager)
        .await
        .expect("the manager stops");
    assert!(matches!(ended, Ok(Ok(()))), "{ended:?}");
}
