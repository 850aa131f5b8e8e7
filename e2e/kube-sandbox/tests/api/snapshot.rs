//! Snapshots: a restarted sandbox keeps objects, the resourceVersion counter and CRDs.

use crate::common::*;
use kube::api::{Api, PostParams};
use kube_sandbox::{Sandbox, SandboxOptions};
use serde_json::json;

#[tokio::test]
async fn restart_keeps_state() {
    let dir = tempfile::tempdir().unwrap();
    let opts = SandboxOptions {
        crds: vec![],
        snapshot_dir: Some(dir.path().to_path_buf()),
        ..Default::default()
    };
    let s = Sandbox::start_with(opts.clone()).await.unwrap();
    let c = s.client();
    install_widgets(&c).await;
    widgets(&c, "default")
        .create(&PostParams::default(), &widget("kept", json!({"size": 4})))
        .await
        .unwrap();
    create_ns(&c, "persisted").await;
    create_cm(&c, "persisted", "cm", json!({"a": "b"})).await;
    let rv = s.resource_version();
    let old_uid = get(&c, "/api/v1/namespaces/persisted/configmaps/cm")
        .await
        .json()["metadata"]["uid"]
        .clone();
    s.shutdown().await;
    assert!(dir.path().join("snapshot.json").exists());

    let s = Sandbox::start_with(opts.clone()).await.unwrap();
    let c = s.client();
    let w = widgets(&c, "default").get("kept").await.unwrap();
    assert_eq!(w.data["spec"]["size"], 4);
    let cm = get(&c, "/api/v1/namespaces/persisted/configmaps/cm")
        .await
        .json();
    assert_eq!(cm["metadata"]["uid"], old_uid);
    assert!(s.resource_version() >= rv);
    let newer = create_cm(&c, "persisted", "after", json!({})).await;
    assert!(
        newer
            .metadata
            .resource_version
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > rv,
        "the counter continues"
    );
    // Watches from before the restart get 410, as after a real server's compaction.
    let mut old = WatchStream::open(
        &c,
        &format!("/api/v1/configmaps?watch=true&resourceVersion={}", rv - 1),
        &[],
    )
    .await;
    assert_eq!(old.next().await.unwrap()["object"]["code"], 410);

    // restart() keeps the address, so existing clients keep working.
    let addr = s.addr();
    let s = s.restart().await.unwrap();
    assert_eq!(s.addr(), addr);
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(c.clone(), "persisted");
    assert!(cms.get_opt("after").await.unwrap().is_some());
    // Dropping without shutdown() writes the snapshot too.
    create_cm(&c, "persisted", "on-drop", json!({})).await;
    drop(s);
    let s = Sandbox::start_with(opts).await.unwrap();
    assert_eq!(
        get(
            &s.client(),
            "/api/v1/namespaces/persisted/configmaps/on-drop"
        )
        .await
        .code,
        200
    );
    // restart() needs a snapshot directory.
    let plain = bare().await;
    assert!(plain.restart().await.is_err());
}

#[tokio::test]
async fn snapshot_on_demand_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let s = Sandbox::start_with(SandboxOptions {
        crds: vec![],
        snapshot_dir: Some(dir.path().to_path_buf()),
        ..Default::default()
    })
    .await
    .unwrap();
    let c = s.client();
    create_cm(&c, "default", "now", json!({})).await;
    let r = raw(&c, "POST", "/sandbox/snapshot", &[], Vec::new()).await;
    assert_eq!(r.json()["saved"], true);
    let text = std::fs::read_to_string(dir.path().join("snapshot.json")).unwrap();
    assert!(text.contains("\"now\""));
}

#[tokio::test]
async fn a_read_only_snapshot_is_loaded_but_never_written() {
    let dir = tempfile::tempdir().unwrap();
    let opts = SandboxOptions {
        crds: vec![],
        snapshot_dir: Some(dir.path().to_path_buf()),
        ..Default::default()
    };
    let s = Sandbox::start_with(opts.clone()).await.unwrap();
    create_ns(&s.client(), "prepared").await;
    s.shutdown().await;
    let file = dir.path().join("snapshot.json");
    let prepared = std::fs::read(&file).unwrap();

    let read_only = SandboxOptions {
        snapshot_read_only: true,
        ..opts
    };
    for _ in 0..2 {
        let s = Sandbox::start_with(read_only.clone()).await.unwrap();
        let c = s.client();
        assert_eq!(get(&c, "/api/v1/namespaces/prepared").await.code, 200);
        create_ns(&c, "added").await;
        s.shutdown().await;
        assert_eq!(
            std::fs::read(&file).unwrap(),
            prepared,
            "snapshot unchanged"
        );
    }
}

/// Over TLS a restart keeps the certificate and the admin's token: a client and a kubeconfig
/// made before the restart keep working.
#[tokio::test]
async fn restart_over_tls_keeps_the_certificate_and_the_admin_token() {
    let dir = tempfile::tempdir().unwrap();
    let s = Sandbox::start_with(SandboxOptions {
        crds: vec![],
        snapshot_dir: Some(dir.path().to_path_buf()),
        tls: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let client = s.client();
    let kubeconfig = s.kubeconfig();
    let ca = s.ca_pem().unwrap().to_string();
    let s = s.restart().await.unwrap();
    assert_eq!(s.ca_pem(), Some(ca.as_str()));
    let from_kubeconfig = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap(),
    )
    .unwrap();
    for c in [client, from_kubeconfig] {
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(c);
        namespaces
            .get("default")
            .await
            .expect("the old client works");
    }
    assert_eq!(
        s.requests().count(|r| r.resource == "namespaces"
            && r.code == 200
            && r.user == kube_sandbox::auth::ADMIN_USER),
        2
    );
    s.shutdown().await;
}
