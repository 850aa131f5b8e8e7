//! Helpers shared by the API conformance tests: raw HTTP, streaming watches, waiting.

use std::future::Future;
use std::time::Duration;

use axum::http::{Method, Request};
use http_body_util::BodyExt;
use kube::Client;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube_sandbox::{Sandbox, SandboxOptions};
use serde_json::{Value, json};

/// A raw HTTP response.
pub struct Raw {
    pub code: u16,
    pub headers: axum::http::HeaderMap,
    pub body: Vec<u8>,
}

impl Raw {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "response is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn header(&self, k: &str) -> String {
        self.headers
            .get(k)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    }
}

/// Sends one raw request through the kube client (real HTTP to the sandbox).
pub async fn raw(
    client: &Client,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: impl Into<Vec<u8>>,
) -> Raw {
    let mut b = Request::builder()
        .method(Method::from_bytes(method.as_bytes()).unwrap())
        .uri(path);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let req = b.body(kube::client::Body::from(body.into())).unwrap();
    let resp = client.send(req).await.expect("sending the request");
    let code = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp
        .into_body()
        .collect_bytes()
        .await
        .expect("reading the body")
        .to_vec();
    Raw {
        code,
        headers,
        body,
    }
}

pub async fn get(client: &Client, path: &str) -> Raw {
    raw(client, "GET", path, &[], Vec::new()).await
}

pub async fn post(client: &Client, path: &str, body: Value) -> Raw {
    raw(
        client,
        "POST",
        path,
        &[("content-type", "application/json")],
        serde_json::to_vec(&body).unwrap(),
    )
    .await
}

pub async fn put(client: &Client, path: &str, body: Value) -> Raw {
    raw(
        client,
        "PUT",
        path,
        &[("content-type", "application/json")],
        serde_json::to_vec(&body).unwrap(),
    )
    .await
}

pub async fn patch(client: &Client, path: &str, ct: &str, body: Value) -> Raw {
    raw(
        client,
        "PATCH",
        path,
        &[("content-type", ct)],
        serde_json::to_vec(&body).unwrap(),
    )
    .await
}

pub async fn delete(client: &Client, path: &str) -> Raw {
    raw(client, "DELETE", path, &[], Vec::new()).await
}

/// Asserts a `metav1.Status` failure body with a code and reason.
pub fn assert_status(r: &Raw, code: u16, reason: &str) -> Value {
    let v = r.json();
    assert_eq!(r.code, code, "unexpected code, body: {v}");
    assert_eq!(v["kind"], "Status", "{v}");
    assert_eq!(v["apiVersion"], "v1", "{v}");
    assert_eq!(v["status"], "Failure", "{v}");
    assert_eq!(v["code"], code, "{v}");
    assert_eq!(v["reason"], reason, "{v}");
    assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    v
}

/// A streaming watch read line by line.
pub struct WatchStream {
    body: kube::client::Body,
    buf: Vec<u8>,
}

impl WatchStream {
    pub async fn open(client: &Client, path: &str, headers: &[(&str, &str)]) -> WatchStream {
        let mut b = Request::builder().method(Method::GET).uri(path);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let resp = client
            .send(b.body(kube::client::Body::from(Vec::new())).unwrap())
            .await
            .expect("opening the watch");
        assert_eq!(resp.status().as_u16(), 200, "watch {path}");
        WatchStream {
            body: resp.into_body(),
            buf: Vec::new(),
        }
    }

    /// The next event, or `None` when the server closed the stream. Panics after 10 s.
    pub async fn next(&mut self) -> Option<Value> {
        self.next_within(Duration::from_secs(10))
            .await
            .expect("no watch event within 10s")
    }

    /// The next event within `t`: `Err` on timeout, `Ok(None)` at end of stream.
    pub async fn next_within(&mut self, t: Duration) -> Result<Option<Value>, ()> {
        tokio::time::timeout(t, async {
            loop {
                if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = self.buf.drain(..=pos).collect();
                    return Some(serde_json::from_slice(&line).expect("watch line is JSON"));
                }
                match self.body.frame().await {
                    Some(Ok(f)) => {
                        if let Ok(d) = f.into_data() {
                            self.buf.extend_from_slice(&d);
                        }
                    }
                    _ => return None,
                }
            }
        })
        .await
        .map_err(|_| ())
    }

    /// Events until one matches `pred` (returned), panicking after 10 s or at end of stream.
    pub async fn until(&mut self, pred: impl Fn(&Value) -> bool) -> Value {
        loop {
            let ev = self
                .next()
                .await
                .expect("watch ended before the expected event");
            if pred(&ev) {
                return ev;
            }
        }
    }
}

/// Waits until `f` yields `Some`, polling; panics after `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A sandbox with no preloaded CRD sets (fast start) and short bookmarks.
pub async fn bare() -> Sandbox {
    Sandbox::start_with(SandboxOptions {
        crds: vec![],
        bookmark_interval: Duration::from_millis(200),
        ..Default::default()
    })
    .await
    .expect("starting the sandbox")
}

/// The `Widget` CRD used across tests: status subresource, printer columns, a list-map, a
/// preserve-unknown-fields subtree and an embedded resource.
pub fn widget_crd() -> Value {
    let schema = json!({
        "type": "object",
        "properties": {
            "spec": {"type": "object", "properties": {
                "size": {"type": "integer"},
                "color": {"type": "string"},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                          "items": {"type": "object", "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}}},
                "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                "args": {"type": "array", "items": {"type": "string"}},
                "template": {"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true},
                "labelsMap": {"type": "object", "additionalProperties": {"type": "string"}}
            }},
            "status": {"type": "object", "properties": {
                "phase": {"type": "string"},
                "observed": {"type": "integer"},
                "conditions": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
                               "items": {"type": "object", "properties": {"type": {"type": "string"}, "status": {"type": "string"}}}}
            }}
        }
    });
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList",
                      "shortNames": ["wd"], "categories": ["all", "examples"]},
            "scope": "Namespaced",
            "versions": [
                {"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": schema},
                 "subresources": {"status": {}},
                 "additionalPrinterColumns": [
                     {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                     {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
                     {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
                 ]},
                {"name": "v1beta1", "served": true, "storage": false, "schema": {"openAPIV3Schema": schema},
                 "subresources": {"status": {}}}
            ]
        }
    })
}

/// Creates the Widget CRD and waits until it is served.
pub async fn install_widgets(client: &Client) {
    let r = post(
        client,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        widget_crd(),
    )
    .await;
    assert_eq!(r.code, 201, "{}", String::from_utf8_lossy(&r.body));
    eventually(Duration::from_secs(5), "widgets served", || async {
        (get(client, "/apis/example.com/v1/namespaces/default/widgets")
            .await
            .code
            == 200)
            .then_some(())
    })
    .await;
}

/// A dynamic API for widgets.
pub fn widgets(client: &Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Widget"),
        "widgets",
    );
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// A widget object.
pub fn widget(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": name}, "spec": spec
    }))
    .unwrap()
}

/// Creates a namespace through the API.
pub async fn create_ns(client: &Client, name: &str) {
    let r = post(
        client,
        "/api/v1/namespaces",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
    )
    .await;
    assert_eq!(r.code, 201, "{}", String::from_utf8_lossy(&r.body));
}

/// Creates a ConfigMap through the typed API.
pub async fn create_cm(
    client: &Client,
    ns: &str,
    name: &str,
    labels: Value,
) -> k8s_openapi::api::core::v1::ConfigMap {
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), ns);
    let cm = serde_json::from_value(
        json!({"metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}),
    )
    .unwrap();
    api.create(&PostParams::default(), &cm)
        .await
        .expect("creating a ConfigMap")
}
