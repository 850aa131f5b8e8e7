//! Create, read, update, delete: object metadata, namespaces, finalizers, dry run, lists with
//! selectors, pagination, resourceVersion semantics, tables and error statuses.

use crate::common::*;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

#[tokio::test]
async fn a_fresh_cluster_has_system_objects() {
    let s = bare().await;
    let c = s.client();
    let nss: Api<Namespace> = Api::all(c.clone());
    for ns in ["default", "kube-system", "kube-public"] {
        let n = nss.get(ns).await.unwrap();
        assert_eq!(
            n.metadata.labels.unwrap()["kubernetes.io/metadata.name"],
            ns
        );
        let cm: ConfigMap = Api::namespaced(c.clone(), ns)
            .get("kube-root-ca.crt")
            .await
            .unwrap();
        assert!(cm.data.unwrap()["ca.crt"].starts_with("-----BEGIN CERTIFICATE-----"));
    }
    let svc = get(&c, "/api/v1/namespaces/default/services/kubernetes")
        .await
        .json();
    assert_eq!(svc["spec"]["ports"][0]["name"], "https");
    let ep = get(&c, "/api/v1/namespaces/default/endpoints/kubernetes")
        .await
        .json();
    assert_eq!(ep["subsets"][0]["addresses"][0]["ip"], "10.0.0.1");
    assert_eq!(
        ep["subsets"][0]["ports"][0],
        json!({"name": "https", "port": 6443, "protocol": "TCP"})
    );
    let slices = get(&c, "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3Dkubernetes").await.json();
    assert_eq!(slices["items"][0]["metadata"]["name"], "kubernetes");
    assert_eq!(slices["items"][0]["ports"][0]["port"], 6443);

    // A new namespace gets its label and root CA ConfigMap, as the namespace controller does.
    create_ns(&c, "team-a").await;
    let n = nss.get("team-a").await.unwrap();
    assert_eq!(
        n.metadata.labels.unwrap()["kubernetes.io/metadata.name"],
        "team-a"
    );
    assert_eq!(n.status.unwrap().phase.as_deref(), Some("Active"));
    let cm: ConfigMap = Api::namespaced(c.clone(), "team-a")
        .get("kube-root-ca.crt")
        .await
        .unwrap();
    assert!(cm.data.unwrap().contains_key("ca.crt"));
}

#[tokio::test]
async fn create_sets_server_metadata() {
    let s = bare().await;
    let c = s.client();
    let a = create_cm(&c, "default", "a", json!({})).await;
    let b = create_cm(&c, "kube-system", "b", json!({})).await;
    let m = &a.metadata;
    assert_eq!(m.uid.as_ref().unwrap().len(), 36);
    assert!(m.creation_timestamp.is_some());
    assert_eq!(m.generation, Some(1));
    let rv_a: u64 = m.resource_version.as_ref().unwrap().parse().unwrap();
    let rv_b: u64 = b
        .metadata
        .resource_version
        .as_ref()
        .unwrap()
        .parse()
        .unwrap();
    assert!(rv_b > rv_a, "one global counter");
    // A Secret written after shares the counter.
    let sec: Secret =
        serde_json::from_value(json!({"metadata": {"name": "s"}, "stringData": {"p": "q"}}))
            .unwrap();
    let sec = Api::<Secret>::namespaced(c.clone(), "default")
        .create(&PostParams::default(), &sec)
        .await
        .unwrap();
    assert!(
        sec.metadata
            .resource_version
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > rv_b
    );
    assert_eq!(sec.type_.as_deref(), Some("Opaque"));
    assert_eq!(sec.data.unwrap()["p"].0, b"q");
    let list = get(&c, "/api/v1/namespaces/default/configmaps")
        .await
        .json();
    assert!(
        list["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            >= rv_b
    );
    assert_eq!(list["kind"], "ConfigMapList");
    assert_eq!(list["apiVersion"], "v1");
}

#[tokio::test]
async fn generate_name_and_name_validation() {
    let s = bare().await;
    let c = s.client();
    let r = post(
        &c,
        "/api/v1/namespaces/default/configmaps",
        json!({"metadata": {"generateName": "gen-"}}),
    )
    .await;
    assert_eq!(r.code, 201);
    let name = r.json()["metadata"]["name"].as_str().unwrap().to_string();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");
    let bad = post(
        &c,
        "/api/v1/namespaces/default/configmaps",
        json!({"metadata": {"name": "Bad_Name"}}),
    )
    .await;
    let v = assert_status(&bad, 422, "Invalid");
    assert_eq!(v["details"]["causes"][0]["field"], "metadata.name");
    assert_status(
        &post(
            &c,
            "/api/v1/namespaces/default/configmaps",
            json!({"metadata": {}}),
        )
        .await,
        422,
        "Invalid",
    );
}

#[tokio::test]
async fn namespace_must_exist_and_not_be_terminating() {
    let s = bare().await;
    let c = s.client();
    let r = post(
        &c,
        "/api/v1/namespaces/nope/configmaps",
        json!({"metadata": {"name": "x"}}),
    )
    .await;
    let v = assert_status(&r, 404, "NotFound");
    assert_eq!(v["message"], "namespaces \"nope\" not found");
    // A namespace held by an object's finalizer stays Terminating.
    create_ns(&c, "doomed").await;
    post(
        &c,
        "/api/v1/namespaces/doomed/configmaps",
        json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}}),
    )
    .await;
    assert_eq!(delete(&c, "/api/v1/namespaces/doomed").await.code, 200);
    let ns = get(&c, "/api/v1/namespaces/doomed").await.json();
    assert_eq!(ns["status"]["phase"], "Terminating");
    assert!(ns["metadata"]["deletionTimestamp"].is_string());
    let r = post(
        &c,
        "/api/v1/namespaces/doomed/configmaps",
        json!({"metadata": {"name": "new"}}),
    )
    .await;
    assert_status(&r, 403, "Forbidden");
}

#[tokio::test]
async fn errors_are_statuses() {
    let s = bare().await;
    let c = s.client();
    create_cm(&c, "default", "dup", json!({})).await;
    let r = post(
        &c,
        "/api/v1/namespaces/default/configmaps",
        json!({"metadata": {"name": "dup"}}),
    )
    .await;
    let v = assert_status(&r, 409, "AlreadyExists");
    assert_eq!(
        v["details"],
        json!({"name": "dup", "group": "", "kind": "configmaps"})
    );
    assert_eq!(v["message"], "configmaps \"dup\" already exists");
    let v = assert_status(
        &get(&c, "/apis/apps/v1/namespaces/default/deployments/nope").await,
        404,
        "NotFound",
    );
    assert_eq!(v["message"], "deployments.apps \"nope\" not found");
    assert_eq!(v["details"]["group"], "apps");
    let bad = raw(
        &c,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &[("content-type", "application/json")],
        b"{not json".to_vec(),
    )
    .await;
    assert_status(&bad, 400, "BadRequest");
    assert_status(
        &post(&c, "/api/v1/namespaces/default/configmaps/dup", json!({})).await,
        405,
        "MethodNotAllowed",
    );
    let r = raw(
        &c,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/dup",
        &[("content-type", "text/plain")],
        b"x".to_vec(),
    )
    .await;
    assert_status(&r, 415, "UnsupportedMediaType");
    let r = post(
        &c,
        "/api/v1/namespaces/default/configmaps",
        json!({"apiVersion": "v2", "kind": "ConfigMap", "metadata": {"name": "v"}}),
    )
    .await;
    assert_status(&r, 400, "BadRequest");
    // The kube client surfaces them as typed errors.
    let err = Api::<ConfigMap>::namespaced(c.clone(), "default")
        .get("missing")
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(s) => assert_eq!((s.code, s.reason.as_str()), (404, "NotFound")),
        e => panic!("unexpected {e}"),
    }
}

#[tokio::test]
async fn put_is_optimistic_unless_unconditional() {
    let s = bare().await;
    let c = s.client();
    let cm = create_cm(&c, "default", "p", json!({})).await;
    let rv = cm.metadata.resource_version.clone().unwrap();
    let path = "/api/v1/namespaces/default/configmaps/p";
    let ok = put(
        &c,
        path,
        json!({"metadata": {"name": "p", "resourceVersion": rv}, "data": {"k": "2"}}),
    )
    .await;
    assert_eq!(ok.code, 200);
    let stale = put(
        &c,
        path,
        json!({"metadata": {"name": "p", "resourceVersion": rv}, "data": {"k": "3"}}),
    )
    .await;
    let v = assert_status(&stale, 409, "Conflict");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("the object has been modified")
    );
    let unconditional = put(
        &c,
        path,
        json!({"metadata": {"name": "p"}, "data": {"k": "4"}}),
    )
    .await;
    assert_eq!(unconditional.code, 200);
    assert_eq!(unconditional.json()["data"]["k"], "4");
    // uid and creationTimestamp survive a replace that omits them.
    assert_eq!(
        unconditional.json()["metadata"]["uid"],
        json!(cm.metadata.uid)
    );
    assert_status(
        &put(
            &c,
            "/api/v1/namespaces/default/configmaps/none",
            json!({"metadata": {"name": "none"}}),
        )
        .await,
        404,
        "NotFound",
    );
    assert_status(
        &put(&c, path, json!({"metadata": {"name": "other"}})).await,
        400,
        "BadRequest",
    );
    // A no-op update does not bump the resourceVersion.
    let before = get(&c, path).await.json();
    let same = put(&c, path, before.clone()).await.json();
    assert_eq!(
        same["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );
}

#[tokio::test]
async fn generation_tracks_spec_changes() {
    let s = bare().await;
    let c = s.client();
    install_widgets(&c).await;
    // Without a status subresource: any non-metadata change.
    create_cm(&c, "default", "g", json!({})).await;
    let path = "/api/v1/namespaces/default/configmaps/g";
    let v = patch(
        &c,
        path,
        "application/merge-patch+json",
        json!({"metadata": {"labels": {"a": "b"}}}),
    )
    .await
    .json();
    assert_eq!(v["metadata"]["generation"], 1);
    let v = patch(
        &c,
        path,
        "application/merge-patch+json",
        json!({"data": {"k": "changed"}}),
    )
    .await
    .json();
    assert_eq!(v["metadata"]["generation"], 2);
    // With a status subresource: spec bumps, status does not; status is ignored on the main
    // resource and spec on /status.
    let wp = "/apis/example.com/v1/namespaces/default/widgets/w";
    let r = post(
        &c,
        "/apis/example.com/v1/namespaces/default/widgets",
        json!({
        "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
        "spec": {"size": 1}, "status": {"phase": "ignored-on-create"}}),
    )
    .await
    .json();
    assert_eq!(r["metadata"]["generation"], 1);
    assert!(r.get("status").is_none(), "{r}");
    let v = patch(
        &c,
        &format!("{wp}/status"),
        "application/merge-patch+json",
        json!({"status": {"phase": "Ready"}, "spec": {"size": 99}}),
    )
    .await
    .json();
    assert_eq!(
        (
            v["metadata"]["generation"].clone(),
            v["status"]["phase"].clone(),
            v["spec"]["size"].clone()
        ),
        (json!(1), json!("Ready"), json!(1))
    );
    let v = patch(
        &c,
        wp,
        "application/merge-patch+json",
        json!({"spec": {"size": 2}, "status": {"phase": "Hacked"}}),
    )
    .await
    .json();
    assert_eq!(
        (
            v["metadata"]["generation"].clone(),
            v["status"]["phase"].clone()
        ),
        (json!(2), json!("Ready"))
    );
    let v = patch(
        &c,
        wp,
        "application/merge-patch+json",
        json!({"metadata": {"annotations": {"x": "y"}}}),
    )
    .await
    .json();
    assert_eq!(v["metadata"]["generation"], 2);
    // PUT on /status replaces only status.
    let mut cur = get(&c, wp).await.json();
    cur["status"] = json!({"phase": "Done"});
    cur["spec"]["size"] = json!(50);
    let v = put(&c, &format!("{wp}/status"), cur).await.json();
    assert_eq!(
        (v["status"]["phase"].clone(), v["spec"]["size"].clone()),
        (json!("Done"), json!(2))
    );
    // Kinds without a status subresource have no /status.
    assert_status(
        &get(&c, "/api/v1/namespaces/default/configmaps/g/status").await,
        404,
        "NotFound",
    );
}

#[tokio::test]
async fn dry_run_writes_nothing() {
    let s = bare().await;
    let c = s.client();
    let api: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "dry"}})).unwrap();
    let rv0 = s.resource_version();
    let created = api
        .create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &cm,
        )
        .await
        .unwrap();
    assert_eq!(created.metadata.name.as_deref(), Some("dry"));
    assert!(api.get_opt("dry").await.unwrap().is_none());
    create_cm(&c, "default", "real", json!({})).await;
    let rv1 = s.resource_version();
    assert!(rv1 > rv0);
    let pp = PatchParams {
        dry_run: true,
        ..Default::default()
    };
    let patched = api
        .patch("real", &pp, &Patch::Merge(json!({"data": {"k": "dry"}})))
        .await
        .unwrap();
    assert_eq!(patched.data.unwrap()["k"], "dry");
    assert_eq!(api.get("real").await.unwrap().data.unwrap()["k"], "v");
    let r = raw(
        &c,
        "PUT",
        "/api/v1/namespaces/default/configmaps/real?dryRun=All",
        &[("content-type", "application/json")],
        serde_json::to_vec(&json!({"metadata": {"name": "real"}, "data": {"k": "put"}})).unwrap(),
    )
    .await;
    assert_eq!(r.code, 200);
    let ssa = PatchParams::apply("dry").force().dry_run();
    api.patch(
        "real",
        &ssa,
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "ssa"}})),
    )
    .await
    .unwrap();
    api.delete(
        "real",
        &DeleteParams {
            dry_run: true,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let now = api.get("real").await.unwrap();
    assert_eq!(now.data.unwrap()["k"], "v");
    assert_eq!(s.resource_version(), rv1, "dry runs must not write");
}

#[tokio::test]
async fn finalizers_hold_deletion() {
    let s = bare().await;
    let c = s.client();
    let api: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    let cm: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "f", "finalizers": ["example.com/a", "example.com/b"]}}),
    )
    .unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
    // Pending deletion answers 200 with the object, as the real handler does.
    let r = delete(&c, "/api/v1/namespaces/default/configmaps/f").await;
    assert_eq!(r.code, 200);
    assert!(r.json()["metadata"]["deletionTimestamp"].is_string());
    let v = get(&c, "/api/v1/namespaces/default/configmaps/f")
        .await
        .json();
    assert!(v["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(v["metadata"]["deletionGracePeriodSeconds"], 0);
    // No new finalizers while deleting.
    let r = patch(
        &c,
        "/api/v1/namespaces/default/configmaps/f",
        "application/json-patch+json",
        json!([{"op": "add", "path": "/metadata/finalizers/-", "value": "example.com/c"}]),
    )
    .await;
    let v = assert_status(&r, 422, "Invalid");
    assert!(v["message"].as_str().unwrap().contains("no new finalizers"));
    // Other updates still work; removing one finalizer keeps the object.
    api.patch(
        "f",
        &PatchParams::default(),
        &Patch::Json::<()>(
            serde_json::from_value(json!([{"op": "remove", "path": "/metadata/finalizers/0"}]))
                .unwrap(),
        ),
    )
    .await
    .unwrap();
    assert!(api.get_opt("f").await.unwrap().is_some());
    // Removing the last one deletes it.
    api.patch(
        "f",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(api.get_opt("f").await.unwrap().is_none());
    // Without finalizers, deletion is immediate (200 with the object).
    create_cm(&c, "default", "plain", json!({})).await;
    let r = delete(&c, "/api/v1/namespaces/default/configmaps/plain").await;
    assert_eq!(r.code, 200);
    assert_eq!(r.json()["metadata"]["name"], "plain");
    assert_status(
        &delete(&c, "/api/v1/namespaces/default/configmaps/plain").await,
        404,
        "NotFound",
    );
    // Preconditions.
    create_cm(&c, "default", "pre", json!({})).await;
    let r = raw(
        &c,
        "DELETE",
        "/api/v1/namespaces/default/configmaps/pre",
        &[("content-type", "application/json")],
        serde_json::to_vec(&json!({"preconditions": {"uid": "not-it"}})).unwrap(),
    )
    .await;
    assert_status(&r, 409, "Conflict");
}

#[tokio::test]
async fn list_selectors_and_delete_collection() {
    let s = bare().await;
    let c = s.client();
    create_ns(&c, "other").await;
    create_cm(
        &c,
        "default",
        "web-1",
        json!({"app": "web", "tier": "front"}),
    )
    .await;
    create_cm(
        &c,
        "default",
        "web-2",
        json!({"app": "web", "tier": "back"}),
    )
    .await;
    create_cm(&c, "default", "db-1", json!({"app": "db"})).await;
    create_cm(&c, "other", "web-3", json!({"app": "web"})).await;
    let names = |v: Value| -> Vec<String> {
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    let q = |sel: &str| {
        format!(
            "/api/v1/namespaces/default/configmaps?labelSelector={}",
            sel.replace(' ', "+")
                .replace('=', "%3D")
                .replace(',', "%2C")
                .replace('!', "%21")
        )
    };
    assert_eq!(
        names(get(&c, &q("app=web")).await.json()),
        vec!["web-1", "web-2"]
    );
    assert_eq!(
        names(get(&c, &q("app==web,tier!=front")).await.json()),
        vec!["web-2"]
    );
    assert_eq!(
        names(get(&c, &q("tier in (front,back)")).await.json()),
        vec!["web-1", "web-2"]
    );
    assert_eq!(
        names(get(&c, &q("app notin (web)")).await.json()),
        vec!["db-1", "kube-root-ca.crt"]
    );
    assert_eq!(
        names(get(&c, &q("tier")).await.json()),
        vec!["web-1", "web-2"]
    );
    assert_eq!(
        names(get(&c, &q("!app")).await.json()),
        vec!["kube-root-ca.crt"]
    );
    assert_status(&get(&c, &q("app in web")).await, 400, "BadRequest");
    // Field selectors.
    assert_eq!(
        names(
            get(&c, "/api/v1/configmaps?fieldSelector=metadata.name%3Dweb-3")
                .await
                .json()
        ),
        vec!["web-3"]
    );
    let not_default = names(get(&c, "/api/v1/configmaps?fieldSelector=metadata.namespace!%3Ddefault,metadata.name!%3Dkube-root-ca.crt").await.json());
    assert_eq!(not_default, vec!["web-3"]);
    assert_status(
        &get(&c, "/api/v1/configmaps?fieldSelector=data.k%3Dv").await,
        400,
        "BadRequest",
    );
    let secrets: Api<Secret> = Api::namespaced(c.clone(), "default");
    for (n, t) in [("s1", "Opaque"), ("s2", "kubernetes.io/tls")] {
        let sec: Secret =
            serde_json::from_value(json!({"metadata": {"name": n}, "type": t})).unwrap();
        secrets.create(&PostParams::default(), &sec).await.unwrap();
    }
    let tls = secrets
        .list(&ListParams::default().fields("type=kubernetes.io/tls"))
        .await
        .unwrap();
    assert_eq!(tls.items.len(), 1);
    // Cluster-wide list of a namespaced resource.
    let all = names(
        get(&c, "/api/v1/configmaps?labelSelector=app%3Dweb")
            .await
            .json(),
    );
    assert_eq!(all, vec!["web-1", "web-2", "web-3"]);
    // Delete a collection by selector.
    let api: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    api.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("app=web"),
    )
    .await
    .unwrap();
    assert_eq!(
        names(get(&c, "/api/v1/configmaps?labelSelector=app").await.json()),
        vec!["db-1", "web-3"]
    );
}

#[tokio::test]
async fn pagination_is_consistent() {
    let s = bare().await;
    let c = s.client();
    for i in 0..7 {
        create_cm(&c, "default", &format!("p-{i}"), json!({"page": "yes"})).await;
    }
    let base = "/api/v1/namespaces/default/configmaps?labelSelector=page&limit=3";
    let p1 = get(&c, base).await.json();
    assert_eq!(p1["items"].as_array().unwrap().len(), 3);
    assert_eq!(p1["metadata"]["remainingItemCount"], 4);
    let token = p1["metadata"]["continue"].as_str().unwrap().to_string();
    // Changes after the first page are not seen by the rest of this list.
    create_cm(&c, "default", "p-9", json!({"page": "yes"})).await;
    delete(&c, "/api/v1/namespaces/default/configmaps/p-5").await;
    let p2 = get(&c, &format!("{base}&continue={token}")).await.json();
    let p3 = get(
        &c,
        &format!(
            "{base}&continue={}",
            p2["metadata"]["continue"].as_str().unwrap()
        ),
    )
    .await
    .json();
    assert!(p3["metadata"].get("continue").is_none());
    let mut names: Vec<String> = [&p1, &p2, &p3]
        .iter()
        .flat_map(|p| {
            p["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
        })
        .collect();
    names.sort();
    assert_eq!(names, (0..7).map(|i| format!("p-{i}")).collect::<Vec<_>>());
    assert_eq!(
        p2["metadata"]["resourceVersion"],
        p1["metadata"]["resourceVersion"]
    );
    // kube's paginated list works.
    let api: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    let page = api
        .list(&ListParams::default().labels("page").limit(2))
        .await
        .unwrap();
    assert!(page.metadata.continue_.is_some());
    // After compaction, old continue tokens are gone.
    s.compact_history();
    assert_status(
        &get(&c, &format!("{base}&continue={token}")).await,
        410,
        "Expired",
    );
}

/// kube-apiserver serves `resourceVersion=0` lists from its watch cache and ignores `limit`
/// there (apiserver `pkg/storage/cacher/cacher.go`, `computeListLimit`): a client asking for
/// pages with RV 0 gets every object at once. Any other resourceVersion is paginated.
#[tokio::test]
async fn resource_version_zero_ignores_limit() {
    let s = bare().await;
    let c = s.client();
    for i in 0..5 {
        create_cm(&c, "default", &format!("z-{i}"), json!({"zero": "yes"})).await;
    }
    let base = "/api/v1/namespaces/default/configmaps?labelSelector=zero&limit=2";
    let whole = get(&c, &format!("{base}&resourceVersion=0")).await.json();
    assert_eq!(whole["items"].as_array().unwrap().len(), 5);
    assert!(whole["metadata"].get("continue").is_none());
    let whole = get(
        &c,
        &format!("{base}&resourceVersion=0&resourceVersionMatch=NotOlderThan"),
    )
    .await
    .json();
    assert_eq!(whole["items"].as_array().unwrap().len(), 5);
    let paged = get(&c, base).await.json();
    assert_eq!(paged["items"].as_array().unwrap().len(), 2);
    assert!(paged["metadata"]["continue"].is_string());
}

#[tokio::test]
async fn list_resource_version_semantics() {
    let s = bare().await;
    let c = s.client();
    create_cm(&c, "default", "v", json!({})).await;
    let path = "/api/v1/namespaces/default/configmaps";
    let rv = get(&c, path).await.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    patch(
        &c,
        &format!("{path}/v"),
        "application/merge-patch+json",
        json!({"data": {"k": "new"}}),
    )
    .await;
    create_cm(&c, "default", "w", json!({})).await;
    // rv=0: any state (served from the current one).
    let any = get(&c, &format!("{path}?resourceVersion=0")).await.json();
    assert_eq!(any["items"].as_array().unwrap().len(), 3);
    // Exact: the state at that version, rebuilt from history.
    let exact = get(
        &c,
        &format!("{path}?resourceVersion={rv}&resourceVersionMatch=Exact"),
    )
    .await
    .json();
    assert_eq!(exact["metadata"]["resourceVersion"], rv.as_str());
    let items = exact["items"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    assert_eq!(
        items.iter().find(|i| i["metadata"]["name"] == "v").unwrap()["data"]["k"],
        "v"
    );
    let newer = get(
        &c,
        &format!("{path}?resourceVersion={rv}&resourceVersionMatch=NotOlderThan"),
    )
    .await
    .json();
    assert_eq!(newer["items"].as_array().unwrap().len(), 3);
    let future = get(
        &c,
        &format!("{path}?resourceVersion=999999&resourceVersionMatch=NotOlderThan"),
    )
    .await;
    assert_status(&future, 504, "Timeout");
    assert_status(
        &get(&c, &format!("{path}?resourceVersionMatch=Exact")).await,
        422,
        "Invalid",
    );
    s.compact_history();
    assert_status(
        &get(
            &c,
            &format!("{path}?resourceVersion={rv}&resourceVersionMatch=Exact"),
        )
        .await,
        410,
        "Expired",
    );
}

#[tokio::test]
async fn tables_and_metadata_lists() {
    let s = bare().await;
    let c = s.client();
    install_widgets(&c).await;
    let table_accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
    let t = raw(
        &c,
        "GET",
        "/api/v1/namespaces/default/configmaps",
        &[("accept", table_accept)],
        Vec::new(),
    )
    .await
    .json();
    assert_eq!(t["kind"], "Table");
    assert_eq!(t["apiVersion"], "meta.k8s.io/v1");
    let cols: Vec<&str> = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(cols, vec!["Name", "Age"]);
    assert_eq!(t["rows"][0]["cells"][0], "kube-root-ca.crt");
    assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    let wapi = widgets(&c, "default");
    wapi.create(&PostParams::default(), &widget("t", json!({"size": 3})))
        .await
        .unwrap();
    wapi.patch_status("t", &PatchParams::default(), &Patch::Merge(json!({"status": {"conditions": [{"type": "Other", "status": "False"}, {"type": "Ready", "status": "True"}]}}))).await.unwrap();
    let t = raw(
        &c,
        "GET",
        "/apis/example.com/v1/namespaces/default/widgets",
        &[("accept", table_accept)],
        Vec::new(),
    )
    .await
    .json();
    let cols: Vec<&str> = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(cols, vec!["Name", "Size", "Ready", "Age"]);
    let cells = &t["rows"][0]["cells"];
    assert_eq!(
        (cells[0].clone(), cells[1].clone(), cells[2].clone()),
        (json!("t"), json!(3), json!("True"))
    );
    assert!(
        cells[3].as_str().unwrap().ends_with('s'),
        "age cell {cells}"
    );
    let one = raw(
        &c,
        "GET",
        "/apis/example.com/v1/namespaces/default/widgets/t?includeObject=Object",
        &[("accept", table_accept)],
        Vec::new(),
    )
    .await
    .json();
    assert_eq!(one["rows"][0]["object"]["spec"]["size"], 3);
    let meta = raw(
        &c,
        "GET",
        "/api/v1/namespaces/default/configmaps",
        &[(
            "accept",
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
        )],
        Vec::new(),
    )
    .await
    .json();
    assert_eq!(meta["kind"], "PartialObjectMetadataList");
    assert_eq!(meta["items"][0]["kind"], "PartialObjectMetadata");
    assert!(meta["items"][0].get("data").is_none());
    // The kube metadata API.
    let pom = Api::<ConfigMap>::namespaced(c.clone(), "default")
        .list_metadata(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(pom.items.len(), 1);
}

#[tokio::test]
async fn protobuf_bodies_from_typed_clients() {
    let s = bare().await;
    let c = s.client();
    // A ConfigMap as client-go's typed clients encode it.
    fn field(num: u8, b: &[u8]) -> Vec<u8> {
        let mut out = vec![(num << 3) | 2, b.len() as u8];
        out.extend_from_slice(b);
        out
    }
    let meta = field(1, b"from-proto");
    let mut entry = field(1, b"k");
    entry.extend(field(2, b"v"));
    let mut cm = field(1, &meta);
    cm.extend(field(2, &entry));
    let mut tm = field(1, b"v1");
    tm.extend(field(2, b"ConfigMap"));
    let mut body = b"k8s\x00".to_vec();
    body.extend(field(1, &tm));
    body.extend(field(2, &cm));
    let r = raw(
        &c,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &[("content-type", "application/vnd.kubernetes.protobuf")],
        body,
    )
    .await;
    assert_eq!(r.code, 201, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("content-type"), "application/json");
    assert_eq!(r.json()["data"]["k"], "v");
    let r = raw(
        &c,
        "POST",
        "/apis/apps/v1/namespaces/default/deployments",
        &[("content-type", "application/vnd.kubernetes.protobuf")],
        b"k8s\x00".to_vec(),
    )
    .await;
    assert_status(&r, 415, "UnsupportedMediaType");
}

#[tokio::test]
async fn other_builtin_kinds() {
    let s = bare().await;
    let c = s.client();
    // RBAC names may contain colons.
    let r = post(
        &c,
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        json!({"metadata": {"name": "system:sandbox:reader"}, "rules": []}),
    )
    .await;
    assert_eq!(r.code, 201);
    assert_status(
        &post(
            &c,
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            json!({"metadata": {"name": "a/b"}}),
        )
        .await,
        422,
        "Invalid",
    );
    // Leases, as leader election uses them.
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(c.clone(), "kube-system");
    let l = leases
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "leader"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}})).unwrap())
        .await
        .unwrap();
    let mut l2 = l.clone();
    l2.spec.as_mut().unwrap().holder_identity = Some("b".into());
    let l2 = leases
        .replace("leader", &PostParams::default(), &l2)
        .await
        .unwrap();
    assert_eq!(l2.spec.unwrap().holder_identity.as_deref(), Some("b"));
    assert!(
        leases
            .replace("leader", &PostParams::default(), &l)
            .await
            .is_err(),
        "stale lease update conflicts"
    );
    // Core events with involvedObject field selectors; events.k8s.io events live apart.
    for (n, obj) in [("e1", "a"), ("e2", "b")] {
        post(&c, "/api/v1/namespaces/default/events", json!({"metadata": {"name": n}, "involvedObject": {"kind": "ConfigMap", "name": obj}, "reason": "Tested", "type": "Normal"})).await;
    }
    let evs = get(
        &c,
        "/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Db",
    )
    .await
    .json();
    assert_eq!(evs["items"].as_array().unwrap().len(), 1);
    let r = post(&c, "/apis/events.k8s.io/v1/namespaces/default/events", json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e3"}, "regarding": {"name": "a"}, "reason": "Tested", "action": "Test", "eventTime": "2026-01-01T00:00:00.000000Z"})).await;
    assert_eq!(r.code, 201);
    assert_eq!(
        get(
            &c,
            "/apis/events.k8s.io/v1/namespaces/default/events?fieldSelector=regarding.name%3Da"
        )
        .await
        .json()["items"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // Services get a cluster IP; ServiceAccounts, Endpoints, Pods and ReplicaSets are stored.
    let svc = post(
        &c,
        "/api/v1/namespaces/default/services",
        json!({"metadata": {"name": "svc"}, "spec": {"ports": [{"port": 80}]}}),
    )
    .await
    .json();
    assert!(
        svc["spec"]["clusterIP"]
            .as_str()
            .unwrap()
            .starts_with("10.96.")
    );
    assert_eq!(svc["spec"]["type"], "ClusterIP");
    for (path, body) in [
        (
            "/api/v1/namespaces/default/serviceaccounts",
            json!({"metadata": {"name": "sa"}}),
        ),
        (
            "/api/v1/namespaces/default/endpoints",
            json!({"metadata": {"name": "svc"}, "subsets": []}),
        ),
        (
            "/api/v1/namespaces/default/pods",
            json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}),
        ),
        (
            "/apis/apps/v1/namespaces/default/replicasets",
            json!({"metadata": {"name": "rs"}, "spec": {"selector": {"matchLabels": {"a": "b"}}}}),
        ),
        (
            "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles",
            json!({"metadata": {"name": "r"}, "rules": []}),
        ),
        (
            "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
            json!({"metadata": {"name": "rb"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"}}),
        ),
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            json!({"metadata": {"name": "crb"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "x"}}),
        ),
    ] {
        assert_eq!(post(&c, path, body).await.code, 201, "{path}");
    }
    // A single object as metadata only.
    let pom = Api::<ConfigMap>::namespaced(c.clone(), "default")
        .get_metadata("kube-root-ca.crt")
        .await
        .unwrap();
    assert_eq!(pom.metadata.name.as_deref(), Some("kube-root-ca.crt"));
    let raw_pom = raw(
        &c,
        "GET",
        "/api/v1/namespaces/default/configmaps/kube-root-ca.crt",
        &[(
            "accept",
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
        )],
        Vec::new(),
    )
    .await
    .json();
    assert_eq!(raw_pom["kind"], "PartialObjectMetadata");
    assert!(raw_pom.get("data").is_none());
}

#[tokio::test]
async fn library_handles() {
    let crd = widget_crd();
    let s = kube_sandbox::Sandbox::start_with(kube_sandbox::SandboxOptions {
        crds: vec![],
        extra_crds: vec![crd],
        ..Default::default()
    })
    .await
    .unwrap();
    // extra_crds are served from the start.
    assert_eq!(
        get(
            &s.client(),
            "/apis/example.com/v1/namespaces/default/widgets"
        )
        .await
        .code,
        200
    );
    // kubeconfig() and write_kubeconfig() lead to a working client.
    let kc = s.kubeconfig();
    assert_eq!(kc.current_context.as_deref(), Some("kube-sandbox"));
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    assert_eq!(cfg.cluster_url.to_string().trim_end_matches('/'), s.url());
    let client = kube::Client::try_from(cfg).unwrap();
    assert_eq!(client.apiserver_version().await.unwrap().minor, "34");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kc");
    s.write_kubeconfig(&path).unwrap();
    let kc = kube::config::Kubeconfig::read_from(&path).unwrap();
    assert_eq!(
        kc.clusters[0].cluster.as_ref().unwrap().server.as_deref(),
        Some(s.url().as_str())
    );
    // The request log over HTTP can be reset.
    assert!(!s.requests().all().is_empty());
    assert_eq!(
        raw(&client, "DELETE", "/sandbox/requests", &[], Vec::new())
            .await
            .code,
        200
    );
    assert!(s.requests().all().is_empty());
    s.shutdown().await;
}
