//! Fleet installed by the provider from charts with the structure of Fleet's real ones
//! (`rancher/fleet` `charts/fleet-crd` and `charts/fleet`: several CRDs in `fleet-crd`;
//! ServiceAccounts, ClusterRoles and bindings, the `fleet-controller` and `gitjob` Deployments
//! and the `fleet-controller` ConfigMap with a JSON `config` in `fleet`), into a sandbox started
//! without the Fleet CRDs, then a Cluster imported against the CRDs the chart installed.
//! The charts are small doubles (`fleet_common/real_charts.rs`), not Fleet's.

use crate::common;
use crate::fleet_common;

use common::{Harness, eventually};
use fleet_common::real_charts::{self, VERSION};
use kube::api::Api;
use kube_sandbox::{CrdSet, SandboxOptions};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_from_a_chart_with_the_real_structure_then_a_cluster_is_imported() {
    let charts = tempfile::tempdir().expect("tempdir");
    let repo = real_charts::repository(charts.path()).await;

    let mut h = Harness::with_options(SandboxOptions {
        crds: vec![CrdSet::Capi, CrdSet::Bootstrap, CrdSet::Provider],
        ..Default::default()
    })
    .await;
    let fleet_clusters = "/apis/fleet.cattle.io/v1alpha1/clusters";
    let served = |client: kube::Client| async move {
        client
            .request_text(
                http::Request::get(fleet_clusters)
                    .body(Vec::new())
                    .expect("request"),
            )
            .await
            .is_ok()
    };
    assert!(!served(h.client.clone()).await, "Fleet CRDs preloaded");
    let dir = tempfile::tempdir().expect("tempdir");
    h.use_helm(&fleet_common::helm_bin(), dir.path());
    h.namespace("team-a", json!({})).await;
    h.start().await;
    h.config(&format!(
        "cluster: {{}}\ninstall: {{version: {VERSION}, repository: \"{}\"}}\nconfig: {{server: {{custom: {{apiServerUrl: \"https://fleet.example.com\"}}}}}}",
        repo.url()
    ))
    .await;
    eventually("Fleet installed from the chart", || async {
        let config = h.addon_config().await?;
        let ready = fleet_common::condition(&config, "Ready")?;
        (ready.status == "True").then_some(())
    })
    .await;
    assert!(
        served(h.client.clone()).await,
        "the chart installed the CRDs"
    );
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(h.client.clone(), "cattle-fleet-system");
    for name in ["fleet-controller", "gitjob"] {
        deployments
            .get(name)
            .await
            .expect("Deployment from the chart");
    }

    h.importable_cluster("team-a", "c1").await;
    eventually("the Cluster imported against the chart's CRDs", || async {
        h.fleet_cluster("team-a", "c1").await.map(|_| ())
    })
    .await;
    h.stop().await;
}
