//! JSON patch, merge patch and strategic merge patch.

use crate::common::*;
use serde_json::json;

const D: &str = "/apis/apps/v1/namespaces/default/deployments/d";

async fn deployment(c: &kube::Client) {
    let r = post(
        c,
        "/apis/apps/v1/namespaces/default/deployments",
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "labels": {"keep": "1", "drop": "1"}},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "d"}},
                     "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [
                         {"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}]},
                         {"name": "b", "image": "b:1"}
                     ]}}}
        }),
    )
    .await;
    assert_eq!(r.code, 201);
}

#[tokio::test]
async fn merge_patch() {
    let s = bare().await;
    let c = s.client();
    deployment(&c).await;
    let v = patch(
        &c,
        D,
        "application/merge-patch+json",
        json!({"metadata": {"labels": {"drop": null, "new": "2"}}, "spec": {"replicas": 3}}),
    )
    .await
    .json();
    assert_eq!(v["metadata"]["labels"], json!({"keep": "1", "new": "2"}));
    assert_eq!(v["spec"]["replicas"], 3);
    // Lists are replaced by a merge patch.
    let v = patch(
        &c,
        D,
        "application/merge-patch+json",
        json!({"spec": {"template": {"spec": {"containers": [{"name": "only", "image": "o"}]}}}}),
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
    // A resourceVersion in the patch is a precondition.
    let r = patch(
        &c,
        D,
        "application/merge-patch+json",
        json!({"metadata": {"resourceVersion": "1"}, "spec": {"replicas": 4}}),
    )
    .await;
    assert_status(&r, 409, "Conflict");
    assert_status(
        &patch(
            &c,
            "/apis/apps/v1/namespaces/default/deployments/none",
            "application/merge-patch+json",
            json!({}),
        )
        .await,
        404,
        "NotFound",
    );
}

#[tokio::test]
async fn json_patch() {
    let s = bare().await;
    let c = s.client();
    deployment(&c).await;
    let v = patch(
        &c,
        D,
        "application/json-patch+json",
        json!([
            {"op": "replace", "path": "/spec/replicas", "value": 5},
            {"op": "add", "path": "/metadata/annotations", "value": {"a": "b"}},
            {"op": "remove", "path": "/spec/template/spec/containers/1"}
        ]),
    )
    .await
    .json();
    assert_eq!(v["spec"]["replicas"], 5);
    assert_eq!(v["metadata"]["annotations"]["a"], "b");
    assert_eq!(
        v["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let r = patch(
        &c,
        D,
        "application/json-patch+json",
        json!([{"op": "test", "path": "/spec/replicas", "value": 1}]),
    )
    .await;
    assert_status(&r, 422, "Invalid");
    let r = patch(
        &c,
        D,
        "application/json-patch+json",
        json!({"not": "a list"}),
    )
    .await;
    assert_status(&r, 400, "BadRequest");
}

#[tokio::test]
async fn strategic_merge_patch() {
    let s = bare().await;
    let c = s.client();
    deployment(&c).await;
    let v = patch(
        &c,
        D,
        "application/strategic-merge-patch+json",
        json!({
            "$setElementOrder/containers": [{"name": "a"}, {"name": "c"}],
            "spec": {"template": {"spec": {"containers": [
                {"name": "a", "image": "a:2", "env": [{"name": "Y", "value": "2"}]},
                {"name": "b", "$patch": "delete"},
                {"name": "c", "image": "c:1"}
            ]}}},
            "metadata": {"labels": {"drop": null}}
        }),
    )
    .await;
    assert_eq!(v.code, 200, "{}", String::from_utf8_lossy(&v.body));
    let v = v.json();
    let cs = v["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap();
    let names: Vec<&str> = cs.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["a", "c"]);
    assert_eq!(cs[0]["image"], "a:2");
    assert_eq!(
        cs[0]["env"],
        json!([{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}])
    );
    assert_eq!(v["metadata"]["labels"], json!({"keep": "1"}));
    let v = patch(
        &c,
        D,
        "application/strategic-merge-patch+json",
        json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}),
    )
    .await
    .json();
    assert_eq!(v["spec"]["strategy"], json!({"type": "Recreate"}));
    // Custom resources do not support strategic merge patch, as on a real server.
    install_widgets(&c).await;
    post(
        &c,
        "/apis/example.com/v1/namespaces/default/widgets",
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}),
    )
    .await;
    let r = patch(
        &c,
        "/apis/example.com/v1/namespaces/default/widgets/w",
        "application/strategic-merge-patch+json",
        json!({"spec": {}}),
    )
    .await;
    assert_status(&r, 415, "UnsupportedMediaType");
}
