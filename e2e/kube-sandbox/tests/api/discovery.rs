//! Discovery, version, health and OpenAPI.

use crate::common::*;
use kube_sandbox::Sandbox;
use serde_json::Value;

const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

#[tokio::test]
async fn version_and_health() {
    let s = bare().await;
    let c = s.client();
    let v = get(&c, "/version").await.json();
    assert!(
        v["gitVersion"].as_str().unwrap().starts_with("v1.34."),
        "{v}"
    );
    assert_eq!(v["major"], "1");
    assert_eq!(v["minor"], "34");
    let info = c.apiserver_version().await.unwrap();
    assert_eq!(info.major, "1");
    for p in ["/healthz", "/readyz", "/livez"] {
        let r = get(&c, p).await;
        assert_eq!((r.code, r.body.as_slice()), (200, b"ok".as_slice()), "{p}");
    }
}

fn find<'a>(list: &'a Value, name: &str) -> &'a Value {
    list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("{name} not in {list}"))
}

#[tokio::test]
async fn legacy_discovery() {
    let s = Sandbox::start().await;
    let c = s.client();
    assert_eq!(
        get(&c, "/api").await.json()["versions"],
        serde_json::json!(["v1"])
    );
    let core = get(&c, "/api/v1").await.json();
    assert_eq!(core["kind"], "APIResourceList");
    assert_eq!(core["groupVersion"], "v1");
    let cm = find(&core, "configmaps");
    assert_eq!(cm["singularName"], "configmap");
    assert_eq!(cm["kind"], "ConfigMap");
    assert_eq!(cm["namespaced"], true);
    assert_eq!(cm["shortNames"], serde_json::json!(["cm"]));
    assert!(cm["verbs"].as_array().unwrap().iter().any(|v| v == "watch"));
    assert_eq!(find(&core, "namespaces")["namespaced"], false);
    assert_eq!(find(&core, "namespaces/status")["kind"], "Namespace");

    let apps = get(&c, "/apis/apps/v1").await.json();
    assert_eq!(
        find(&apps, "deployments")["categories"],
        serde_json::json!(["all"])
    );
    assert!(
        find(&apps, "deployments/status")["verbs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v == "patch")
    );

    let groups = get(&c, "/apis").await.json();
    let capi = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "cluster.x-k8s.io")
        .unwrap();
    assert_eq!(capi["preferredVersion"]["version"], "v1beta2");
    let versions: Vec<&str> = capi["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_str().unwrap())
        .collect();
    assert_eq!(versions, vec!["v1beta2", "v1beta1"]);
    assert_eq!(
        get(&c, "/apis/cluster.x-k8s.io").await.json()["kind"],
        "APIGroup"
    );
    let clusters = get(&c, "/apis/cluster.x-k8s.io/v1beta2").await.json();
    assert_eq!(
        find(&clusters, "clusters")["shortNames"],
        serde_json::json!(["cl"])
    );
    assert_eq!(
        find(&clusters, "clusters")["categories"],
        serde_json::json!(["cluster-api"])
    );
    find(&clusters, "clusters/status");
}

#[tokio::test]
async fn aggregated_discovery() {
    let s = bare().await;
    let c = s.client();
    let r = raw(&c, "GET", "/apis", &[("accept", AGGREGATED)], Vec::new()).await;
    assert_eq!(r.code, 200);
    assert_eq!(
        r.header("content-type"),
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    );
    let v = r.json();
    assert_eq!(v["kind"], "APIGroupDiscoveryList");
    assert_eq!(v["apiVersion"], "apidiscovery.k8s.io/v2");
    let apps = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["metadata"]["name"] == "apps")
        .unwrap();
    let dep = apps["versions"][0]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resource"] == "deployments")
        .unwrap();
    assert_eq!(dep["scope"], "Namespaced");
    assert_eq!(dep["singularResource"], "deployment");
    assert_eq!(dep["responseKind"]["kind"], "Deployment");
    assert_eq!(dep["subresources"][0]["subresource"], "status");

    let core = raw(&c, "GET", "/api", &[("accept", AGGREGATED)], Vec::new())
        .await
        .json();
    assert_eq!(core["items"][0]["metadata"]["name"], "");
    // Without the aggregated Accept, the legacy form.
    assert_eq!(get(&c, "/apis").await.json()["kind"], "APIGroupList");

    // kube's own discovery (which uses the aggregated form) finds the kinds.
    let d = kube::discovery::Discovery::new(c.clone())
        .run()
        .await
        .unwrap();
    assert!(d.groups().any(|g| g.name() == "apps"));
    let (ar, caps) = d
        .resolve_gvk(&kube::core::GroupVersionKind::gvk("", "v1", "ConfigMap"))
        .unwrap();
    assert_eq!(ar.plural, "configmaps");
    assert_eq!(caps.scope, kube::discovery::Scope::Namespaced);
}

#[tokio::test]
async fn openapi_documents() {
    let s = bare().await;
    let c = s.client();
    assert_eq!(get(&c, "/openapi/v2").await.json()["swagger"], "2.0");
    let pb = raw(
        &c,
        "GET",
        "/openapi/v2",
        &[(
            "accept",
            "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
        )],
        Vec::new(),
    )
    .await;
    assert_eq!(
        pb.header("content-type"),
        "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
    );
    assert!(pb.body.starts_with(b"\x0a\x032.0"));
    let idx = get(&c, "/openapi/v3").await.json();
    let url = idx["paths"]["apis/apps/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_string();
    let doc = get(&c, &url).await.json();
    let p = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
    assert_eq!(p["x-kubernetes-group-version-kind"]["kind"], "Deployment");
    assert!(
        p["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "fieldValidation")
    );
}

#[tokio::test]
async fn unknown_paths_are_not_found() {
    let s = bare().await;
    let c = s.client();
    assert_status(
        &get(&c, "/apis/nope.example.com/v1/things").await,
        404,
        "NotFound",
    );
    assert_status(&get(&c, "/apis/apps/v2/deployments").await, 404, "NotFound");
    // A cluster-scoped resource under a namespace path.
    assert_status(
        &get(&c, "/api/v1/namespaces/default/namespaces").await,
        404,
        "NotFound",
    );
    assert_status(&get(&c, "/apis/nope").await, 404, "NotFound");
}
