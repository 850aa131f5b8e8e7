//! Garbage collection by ownerReferences, orphaning, namespace deletion.

use std::time::Duration;

use crate::common::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

async fn owned(c: &kube::Client, ns: &str, name: &str, owners: &[&ConfigMap]) -> ConfigMap {
    let refs: Vec<Value> = owners
        .iter()
        .map(|o| json!({"apiVersion": "v1", "kind": "ConfigMap", "name": o.metadata.name, "uid": o.metadata.uid}))
        .collect();
    let cm = serde_json::from_value(json!({"metadata": {"name": name, "ownerReferences": refs}}))
        .unwrap();
    Api::<ConfigMap>::namespaced(c.clone(), ns)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap()
}

async fn gone(api: &Api<ConfigMap>, name: &str) {
    eventually(
        Duration::from_secs(5),
        &format!("{name} to be deleted"),
        || async { api.get_opt(name).await.unwrap().is_none().then_some(()) },
    )
    .await
}

#[tokio::test]
async fn background_propagation_deletes_dependents() {
    let s = bare().await;
    let c = s.client();
    let api: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    let owner = create_cm(&c, "default", "owner", json!({})).await;
    let other = create_cm(&c, "default", "other-owner", json!({})).await;
    owned(&c, "default", "child", &[&owner]).await;
    let grandchild_owner = api.get("child").await.unwrap();
    owned(&c, "default", "grandchild", &[&grandchild_owner]).await;
    owned(&c, "default", "shared", &[&owner, &other]).await;
    api.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    gone(&api, "child").await;
    gone(&api, "grandchild").await;
    // A dependent with a remaining owner stays, without the dangling reference.
    let shared = eventually(
        Duration::from_secs(5),
        "dangling ownerReference removed",
        || async {
            let s = api.get("shared").await.unwrap();
            (s.metadata.owner_references.as_ref().map(|r| r.len()) == Some(1)).then_some(s)
        },
    )
    .await;
    assert_eq!(
        shared.metadata.owner_references.unwrap()[0].uid,
        other.metadata.uid.unwrap()
    );
}

#[tokio::test]
async fn foreground_propagation_waits_for_dependents() {
    let s = bare().await;
    let c = s.client();
    let api: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    let owner = create_cm(&c, "default", "fg-owner", json!({})).await;
    owned(&c, "default", "fg-child", &[&owner]).await;
    let refs = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "fg-owner", "uid": owner.metadata.uid}]);
    let held: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "fg-held", "ownerReferences": refs, "finalizers": ["example.com/x"]}})).unwrap();
    api.create(&PostParams::default(), &held).await.unwrap();
    api.delete("fg-owner", &DeleteParams::foreground())
        .await
        .unwrap();
    // The owner stays, marked, while a dependent is held by its finalizer.
    gone(&api, "fg-child").await;
    let o = api.get("fg-owner").await.unwrap();
    assert!(o.metadata.deletion_timestamp.is_some());
    assert_eq!(o.metadata.finalizers.unwrap(), vec!["foregroundDeletion"]);
    assert!(
        api.get("fg-held")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    patch(
        &c,
        "/api/v1/namespaces/default/configmaps/fg-held",
        "application/merge-patch+json",
        json!({"metadata": {"finalizers": null}}),
    )
    .await;
    gone(&api, "fg-held").await;
    gone(&api, "fg-owner").await;
    // Without dependents, foreground deletion is immediate.
    create_cm(&c, "default", "lonely", json!({})).await;
    api.delete("lonely", &DeleteParams::foreground())
        .await
        .unwrap();
    assert!(api.get_opt("lonely").await.unwrap().is_none());
}

#[tokio::test]
async fn orphan_propagation_keeps_dependents() {
    let s = bare().await;
    let c = s.client();
    let api: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    let owner = create_cm(&c, "default", "owner", json!({})).await;
    owned(&c, "default", "kept", &[&owner]).await;
    api.delete("owner", &DeleteParams::orphan()).await.unwrap();
    assert!(api.get_opt("owner").await.unwrap().is_none());
    let kept = api.get("kept").await.unwrap();
    assert!(
        kept.metadata.owner_references.is_none(),
        "orphaned dependents lose the reference"
    );
}

#[tokio::test]
async fn dependents_with_finalizers_wait_for_them() {
    let s = bare().await;
    let c = s.client();
    let api: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    let owner = create_cm(&c, "default", "owner", json!({})).await;
    let refs = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}]);
    let cm = serde_json::from_value(json!({"metadata": {"name": "held", "ownerReferences": refs, "finalizers": ["example.com/x"]}})).unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
    api.delete("owner", &DeleteParams::default()).await.unwrap();
    let held = eventually(
        Duration::from_secs(5),
        "deletionTimestamp on the dependent",
        || async {
            let h = api.get("held").await.unwrap();
            h.metadata.deletion_timestamp.is_some().then_some(h)
        },
    )
    .await;
    assert_eq!(held.metadata.finalizers.unwrap(), vec!["example.com/x"]);
    patch(
        &c,
        "/api/v1/namespaces/default/configmaps/held",
        "application/merge-patch+json",
        json!({"metadata": {"finalizers": null}}),
    )
    .await;
    gone(&api, "held").await;
}

#[tokio::test]
async fn namespace_deletion_deletes_contents_then_namespace() {
    let s = bare().await;
    let c = s.client();
    install_widgets(&c).await;
    create_ns(&c, "tmp").await;
    create_cm(&c, "tmp", "a", json!({})).await;
    widgets(&c, "tmp")
        .create(&PostParams::default(), &widget("w", json!({})))
        .await
        .unwrap();
    post(
        &c,
        "/api/v1/namespaces/tmp/configmaps",
        json!({"metadata": {"name": "fin", "finalizers": ["example.com/x"]}}),
    )
    .await;
    let r = delete(&c, "/api/v1/namespaces/tmp").await;
    assert_eq!(r.code, 200);
    let api: Api<ConfigMap> = Api::namespaced(c.clone(), "tmp");
    gone(&api, "a").await;
    eventually(Duration::from_secs(5), "widget deleted", || async {
        (get(&c, "/apis/example.com/v1/namespaces/tmp/widgets/w")
            .await
            .code
            == 404)
            .then_some(())
    })
    .await;
    // The namespace waits for the finalizer of its last object.
    assert_eq!(
        get(&c, "/api/v1/namespaces/tmp").await.json()["status"]["phase"],
        "Terminating"
    );
    patch(
        &c,
        "/api/v1/namespaces/tmp/configmaps/fin",
        "application/merge-patch+json",
        json!({"metadata": {"finalizers": null}}),
    )
    .await;
    eventually(Duration::from_secs(5), "namespace gone", || async {
        (get(&c, "/api/v1/namespaces/tmp").await.code == 404).then_some(())
    })
    .await;
    // System namespaces cannot be deleted.
    assert_status(
        &delete(&c, "/api/v1/namespaces/default").await,
        403,
        "Forbidden",
    );
}

#[tokio::test]
async fn dependents_of_owners_that_never_existed_are_collected() {
    let s = bare().await;
    let c = s.client();
    let api: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    let refs = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "ghost", "uid": "00000000-0000-4000-8000-000000000000"}]);
    let cm =
        serde_json::from_value(json!({"metadata": {"name": "haunted", "ownerReferences": refs}}))
            .unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
    gone(&api, "haunted").await;
}
