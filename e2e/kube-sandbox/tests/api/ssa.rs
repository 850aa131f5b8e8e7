//! Server-side apply and field ownership.

use crate::common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube_sandbox::Sandbox;
use serde_json::{Value, json};

fn entry<'a>(obj: &'a Value, manager: &str, op: &str) -> Option<&'a Value> {
    obj["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .find(|e| e["manager"] == manager && e["operation"] == op)
}

const CM: &str = "/api/v1/namespaces/default/configmaps/cm";

async fn apply(c: &kube::Client, path: &str, manager: &str, force: bool, body: Value) -> Raw {
    let q = format!(
        "{path}?fieldManager={manager}{}",
        if force { "&force=true" } else { "" }
    );
    raw(
        c,
        "PATCH",
        &q,
        &[("content-type", "application/apply-patch+yaml")],
        serde_yaml::to_string(&body).unwrap(),
    )
    .await
}

fn cm(data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": data})
}

#[tokio::test]
async fn apply_creates_and_records_ownership() {
    let s = bare().await;
    let c = s.client();
    let r = apply(&c, CM, "alice", false, cm(json!({"a": "1"}))).await;
    assert_eq!(r.code, 201);
    let v = r.json();
    let e = entry(&v, "alice", "Apply").expect("Apply entry");
    assert_eq!(e["fieldsType"], "FieldsV1");
    assert_eq!(e["apiVersion"], "v1");
    assert_eq!(e["fieldsV1"], json!({"f:data": {"f:a": {}}}));
    assert!(e["time"].is_string());
    let r = apply(&c, CM, "alice", false, cm(json!({"a": "2"}))).await;
    assert_eq!(r.code, 200);
    assert_eq!(r.json()["data"]["a"], "2");
    // fieldManager is required.
    let r = raw(
        &c,
        "PATCH",
        CM,
        &[("content-type", "application/apply-patch+yaml")],
        serde_yaml::to_string(&cm(json!({}))).unwrap(),
    )
    .await;
    assert_status(&r, 400, "BadRequest");
    // Writes other than apply are recorded as Update operations.
    let r = raw(
        &c,
        "PATCH",
        &format!("{CM}?fieldManager=editor"),
        &[("content-type", "application/merge-patch+json")],
        br#"{"data":{"b":"x"}}"#.to_vec(),
    )
    .await;
    let v = r.json();
    assert_eq!(
        entry(&v, "editor", "Update").unwrap()["fieldsV1"],
        json!({"f:data": {"f:b": {}}})
    );
    let api: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    let created: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "made", "labels": {"l": "1"}}, "data": {"k": "v"}}),
    )
    .unwrap();
    let made = api
        .create(
            &PostParams {
                field_manager: Some("maker".into()),
                ..Default::default()
            },
            &created,
        )
        .await
        .unwrap();
    let mf = made.metadata.managed_fields.unwrap();
    assert_eq!(mf[0].manager.as_deref(), Some("maker"));
    assert_eq!(mf[0].operation.as_deref(), Some("Update"));
    assert_eq!(
        serde_json::to_value(&mf[0].fields_v1).unwrap(),
        json!({"f:data": {"f:k": {}}, "f:metadata": {"f:labels": {"f:l": {}}}})
    );
}

#[tokio::test]
async fn conflicts_force_and_shared_ownership() {
    let s = bare().await;
    let c = s.client();
    apply(&c, CM, "alice", false, cm(json!({"a": "1", "b": "1"}))).await;
    // Same value: shared, no conflict.
    assert_eq!(
        apply(&c, CM, "bob", false, cm(json!({"a": "1"})))
            .await
            .code,
        200
    );
    // Different value: 409 naming the manager and the field.
    let r = apply(&c, CM, "bob", false, cm(json!({"a": "1", "b": "2"}))).await;
    let v = assert_status(&r, 409, "Conflict");
    assert_eq!(
        v["message"],
        "Apply failed with 1 conflict: conflict with \"alice\" using v1: .data.b"
    );
    assert_eq!(
        v["details"]["causes"],
        json!([{"reason": "FieldManagerConflict", "message": "conflict with \"alice\" using v1", "field": ".data.b"}])
    );
    // Through kube: the same error.
    let api: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    let err = api
        .patch(
            "cm",
            &PatchParams::apply("bob"),
            &Patch::Apply(cm(json!({"a": "1", "b": "2"}))),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409),
        "{err}"
    );
    // Forced: bob takes b; alice keeps a (shared).
    let v = api
        .patch(
            "cm",
            &PatchParams::apply("bob").force(),
            &Patch::Apply(cm(json!({"a": "1", "b": "2"}))),
        )
        .await
        .unwrap();
    let v = serde_json::to_value(v).unwrap();
    assert_eq!(v["data"], json!({"a": "1", "b": "2"}));
    assert_eq!(
        entry(&v, "alice", "Apply").unwrap()["fieldsV1"],
        json!({"f:data": {"f:a": {}}})
    );
    assert_eq!(
        entry(&v, "bob", "Apply").unwrap()["fieldsV1"],
        json!({"f:data": {"f:a": {}, "f:b": {}}})
    );
    // Alice stops applying a: bob still owns it, so it stays.
    let v = apply(&c, CM, "alice", false, cm(json!({}))).await.json();
    assert_eq!(v["data"]["a"], "1");
    assert!(entry(&v, "alice", "Apply").is_none_or(|e| {
        e["fieldsV1"]
            .get("f:data")
            .and_then(|d| d.get("f:a"))
            .is_none()
    }));
    // Bob stops applying b: nobody else owns it, so it is removed.
    let v = apply(&c, CM, "bob", false, cm(json!({"a": "1"})))
        .await
        .json();
    assert_eq!(v["data"], json!({"a": "1"}));
    // An Update manager's field conflicts with an apply too.
    raw(
        &c,
        "PATCH",
        &format!("{CM}?fieldManager=kubectl-edit"),
        &[("content-type", "application/merge-patch+json")],
        br#"{"data":{"e":"x"}}"#.to_vec(),
    )
    .await;
    let r = apply(&c, CM, "bob", false, cm(json!({"a": "1", "e": "y"}))).await;
    let v = assert_status(&r, 409, "Conflict");
    assert!(v["message"].as_str().unwrap().contains("\"kubectl-edit\""));
}

#[tokio::test]
async fn associative_lists_merge_by_key() {
    let s = bare().await;
    let c = s.client();
    let dep = |containers: Value| {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"selector": {"matchLabels": {"app": "d"}}, "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": containers}}}
        })
    };
    let path = "/apis/apps/v1/namespaces/default/deployments/d";
    apply(
        &c,
        path,
        "app",
        false,
        dep(json!([{"name": "main", "image": "nginx"}])),
    )
    .await;
    let v = apply(
        &c,
        path,
        "sidecar-injector",
        false,
        dep(json!([{"name": "proxy", "image": "envoy"}])),
    )
    .await
    .json();
    let names: Vec<&str> = v["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["main", "proxy"]);
    let fs = &entry(&v, "sidecar-injector", "Apply").unwrap()["fieldsV1"]["f:spec"]["f:template"]["f:spec"]
        ["f:containers"];
    assert_eq!(
        fs,
        &json!({"k:{\"name\":\"proxy\"}": {".": {}, "f:image": {}, "f:name": {}}})
    );
    // The typed client sees it too.
    let d: Deployment = Api::namespaced(c.clone(), "default")
        .get("d")
        .await
        .unwrap();
    assert_eq!(d.spec.unwrap().template.spec.unwrap().containers.len(), 2);
    // The sidecar goes away when its manager stops applying it.
    let v = apply(
        &c,
        path,
        "sidecar-injector",
        false,
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}}),
    )
    .await
    .json();
    assert_eq!(
        v["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // ownerReferences by uid and finalizers as a set (the owners exist, or the garbage collector
    // would delete the dependent).
    let u1 = create_cm(&c, "default", "u1", json!({}))
        .await
        .metadata
        .uid
        .unwrap();
    let u2 = create_cm(&c, "default", "u2", json!({}))
        .await
        .metadata
        .uid
        .unwrap();
    let meta = |refs: Value, fins: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "ownerReferences": refs, "finalizers": fins}});
    let owner =
        |uid: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "name": uid, "uid": uid});
    apply(
        &c,
        CM,
        "a",
        false,
        meta(json!([owner(&u1)]), json!(["a.example.com/f"])),
    )
    .await;
    let v = apply(
        &c,
        CM,
        "b",
        false,
        meta(json!([owner(&u2)]), json!(["b.example.com/f"])),
    )
    .await
    .json();
    assert_eq!(
        v["metadata"]["finalizers"],
        json!(["a.example.com/f", "b.example.com/f"])
    );
    assert_eq!(
        v["metadata"]["ownerReferences"].as_array().unwrap().len(),
        2
    );
    assert_eq!(
        entry(&v, "b", "Apply").unwrap()["fieldsV1"]["f:metadata"]["f:finalizers"],
        json!({"v:\"b.example.com/f\"": {}})
    );

    // A CRD list with x-kubernetes-list-type: map; a plain list is atomic.
    install_widgets(&c).await;
    let wp = "/apis/example.com/v1/namespaces/default/widgets/w";
    let w = |spec: Value| json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec});
    apply(
        &c,
        wp,
        "a",
        false,
        w(json!({"ports": [{"name": "http", "port": 80}], "tags": ["x"], "args": ["1"]})),
    )
    .await;
    let v = apply(
        &c,
        wp,
        "b",
        false,
        w(json!({"ports": [{"name": "https", "port": 443}], "tags": ["y"]})),
    )
    .await
    .json();
    assert_eq!(v["spec"]["ports"].as_array().unwrap().len(), 2);
    assert_eq!(v["spec"]["tags"], json!(["x", "y"]));
    let r = apply(&c, wp, "b", false, w(json!({"args": ["2"]}))).await;
    let e = assert_status(&r, 409, "Conflict");
    assert!(e["message"].as_str().unwrap().contains(".spec.args"), "{e}");
    // b dropped its port and tag in that (failed) attempt only; now it really stops applying.
    let v = apply(&c, wp, "b", false, w(json!({}))).await.json();
    assert_eq!(v["spec"]["ports"], json!([{"name": "http", "port": 80}]));
    assert_eq!(v["spec"]["tags"], json!(["x"]));
}

#[tokio::test]
async fn status_ownership_is_separate() {
    let s = bare().await;
    let c = s.client();
    install_widgets(&c).await;
    let wp = "/apis/example.com/v1/namespaces/default/widgets/st";
    let body = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "st"}, "spec": {"size": 1}, "status": {"phase": "ignored"}});
    let v = apply(&c, wp, "ctl", false, body).await.json();
    assert!(v.get("status").is_none());
    assert!(
        entry(&v, "ctl", "Apply").unwrap()["fieldsV1"]
            .get("f:status")
            .is_none()
    );
    let v = apply(&c, &format!("{wp}/status"), "ctl-status", false,
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "st"}, "status": {"phase": "Ready"}, "spec": {"size": 7}})).await.json();
    assert_eq!(v["status"]["phase"], "Ready");
    assert_eq!(v["spec"]["size"], 1);
    let e = entry(&v, "ctl-status", "Apply").unwrap();
    assert_eq!(e["subresource"], "status");
    assert_eq!(e["fieldsV1"], json!({"f:status": {"f:phase": {}}}));
    // kube's patch_status with apply.
    let api = widgets(&c, "default");
    api.patch_status(
        "st",
        &PatchParams::apply("ctl-status"),
        &Patch::Apply(
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "status": {"observed": 1}}),
        ),
    )
    .await
    .unwrap();
    let v = get(&c, wp).await.json();
    assert_eq!(
        v["status"],
        json!({"observed": 1}),
        "phase no longer applied by the only owner"
    );
    // A status apply on a missing object is a 404.
    assert_status(&apply(&c, "/apis/example.com/v1/namespaces/default/widgets/none/status", "x", false,
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "none"}, "status": {}})).await, 404, "NotFound");
    // fieldValidation is accepted.
    let r = raw(&c, "PATCH", &format!("{wp}?fieldManager=ctl&fieldValidation=Strict"), &[("content-type", "application/apply-patch+yaml")],
        serde_yaml::to_string(&json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "st"}, "spec": {"size": 2}})).unwrap()).await;
    assert_eq!(r.code, 200);
}

#[tokio::test]
async fn clients_can_rewrite_managed_fields() {
    let s = bare().await;
    let c = s.client();
    apply(&c, CM, "alice", false, cm(json!({"a": "1"}))).await;
    // Sending back what was read keeps ownership as recorded.
    let cur = get(&c, CM).await.json();
    let v = put(&c, CM, cur).await.json();
    assert!(entry(&v, "alice", "Apply").is_some());
    // `[{}]` resets it: alice no longer owns data.a, so another manager may change it freely.
    let v = patch(
        &c,
        CM,
        "application/merge-patch+json",
        json!({"metadata": {"managedFields": [{}]}}),
    )
    .await
    .json();
    assert!(v["metadata"].get("managedFields").is_none(), "{v}");
    assert_eq!(
        apply(&c, CM, "bob", false, cm(json!({"a": "2"})))
            .await
            .code,
        200
    );
}

#[tokio::test]
async fn list_markers_decide_merging_for_custom_resources() {
    let s = kube_sandbox::Sandbox::start_with(kube_sandbox::SandboxOptions {
        crds: vec![kube_sandbox::CrdSet::Capi],
        ..Default::default()
    })
    .await
    .unwrap();
    let c = s.client();
    let path = "/apis/cluster.x-k8s.io/v1beta2/namespaces/default/clusters/c";
    let cl = |status: Value| json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": "c"}, "status": status});
    post(&c, "/apis/cluster.x-k8s.io/v1beta2/namespaces/default/clusters", json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": "c"}, "spec": {}})).await;
    let cond = |t: &str| json!({"type": t, "status": "True", "reason": "R", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"});
    // Two controllers own one condition each: CAPI conditions merge by type.
    apply(
        &c,
        &format!("{path}/status"),
        "cp-controller",
        false,
        cl(json!({"conditions": [cond("ControlPlaneAvailable")]})),
    )
    .await;
    let v = apply(
        &c,
        &format!("{path}/status"),
        "infra-controller",
        false,
        cl(json!({"conditions": [cond("InfrastructureReady")]})),
    )
    .await
    .json();
    assert_eq!(
        v["status"]["conditions"].as_array().unwrap().len(),
        2,
        "{v}"
    );
    // A described list without a marker is atomic: the widget's `args`.
    install_widgets(&c).await;
    let wp = "/apis/example.com/v1/namespaces/default/widgets/w";
    let w = |spec: Value| json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec});
    apply(&c, wp, "a", false, w(json!({"args": ["1"]}))).await;
    let v = apply(&c, wp, "b", true, w(json!({"args": ["2"]})))
        .await
        .json();
    assert_eq!(v["spec"]["args"], json!(["2"]));
}

/// A manager that stops applying every field of a nested object loses the object too (the API
/// server stores the emptied map as null), unless another manager owns something in it; the
/// top-level field stays.
#[tokio::test]
async fn emptied_nested_objects_are_removed() {
    let s = Sandbox::start().await;
    let c = s.client();
    let path = "/apis/addons.cluster.x-k8s.io/v1alpha1/fleetaddonconfigs/fleet-addon-config";
    let body = |spec: Value| {
        json!({"apiVersion": "addons.cluster.x-k8s.io/v1alpha1", "kind": "FleetAddonConfig",
               "metadata": {"name": "fleet-addon-config"}, "spec": spec})
    };
    let r = apply(&c, path, "a", true, body(json!({"cluster": {"patchResource": true, "naming": {"prefix": "p-"}}, "install": {"followLatest": true}}))).await;
    assert_eq!(r.code, 201, "created: {}", String::from_utf8_lossy(&r.body));
    // Dropping all of `cluster` removes it; a nested map emptied the same way goes too.
    let r = apply(
        &c,
        path,
        "a",
        true,
        body(json!({"install": {"followLatest": true}})),
    )
    .await;
    assert_eq!(r.json()["spec"], json!({"install": {"followLatest": true}}));
    // Another manager's field keeps its parent.
    apply(
        &c,
        path,
        "a",
        true,
        body(json!({"cluster": {"patchResource": true}, "install": {"followLatest": true}})),
    )
    .await;
    apply(
        &c,
        path,
        "b",
        true,
        body(json!({"cluster": {"hostNetwork": true}})),
    )
    .await;
    let r = apply(
        &c,
        path,
        "a",
        true,
        body(json!({"install": {"followLatest": true}})),
    )
    .await;
    assert_eq!(r.json()["spec"]["cluster"], json!({"hostNetwork": true}));
    // Dropping everything leaves the top-level field.
    let r = apply(&c, path, "a", true, body(json!({}))).await;
    assert_eq!(r.json()["spec"], json!({"cluster": {"hostNetwork": true}}));
    s.shutdown().await;
}
