//! docs/addon-guide.md: every YAML document in it is applied to the sandbox (server-side, as
//! `kubectl apply --server-side` does), in order; then the test plays Cluster API and Fleet through
//! the stages the guide describes and checks what the guide says at each.

use crate::common;

use caapf::api::BundleNamespaceMapping;
use caapf::model::fleet_health::reason;
use common::guide::{apply, documents};
use common::{Harness, eventually};
use fleet_api_rs::fleet_cluster::Cluster as FleetCluster;
use fleet_api_rs::fleet_clustergroup::ClusterGroup;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

fn guide() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/addon-guide.md");
    std::fs::read_to_string(path).expect("docs/addon-guide.md")
}

/// `.ClusterValues.a.b` paths used in the documents, and the variables read with `dig`.
fn cluster_values_paths(documents: &[Value]) -> (Vec<Vec<String>>, Vec<String>) {
    let text = documents
        .iter()
        .map(|d| serde_json::to_string(d).unwrap_or_default())
        .collect::<String>();
    let path = regex::Regex::new(r"\.ClusterValues((?:\.[A-Za-z0-9_]+)+)").expect("regex");
    let variable =
        regex::Regex::new(r#"dig \\"Variables\\" \\"([A-Za-z0-9_]+)\\""#).expect("regex");
    let paths = path
        .captures_iter(&text)
        .map(|c| c[1].split('.').skip(1).map(str::to_string).collect())
        .collect();
    let variables = variable
        .captures_iter(&text)
        .map(|c| c[1].to_string())
        .collect();
    (paths, variables)
}

#[tokio::test]
async fn every_guide_document_applies_and_the_stages_read_as_documented() {
    let mut h = Harness::new().await;
    h.start().await;
    let documents = documents(&guide());
    let kinds: Vec<&str> = documents
        .iter()
        .filter_map(|d| d["kind"].as_str())
        .collect();
    assert_eq!(
        kinds,
        [
            "FleetAddonConfig",
            "Namespace",
            "Namespace",
            "HelmOp",
            "GitRepo",
            "Cluster"
        ]
    );
    for document in &documents {
        if document["kind"] == "Cluster" {
            // The guide assumes the ClusterClass an infrastructure provider ships.
            h.class("classes", "quick-start", json!({})).await;
        }
        apply(&h, document).await;
    }
    let gates = &documents[5]["spec"]["availabilityGates"];
    assert_eq!(gates, &json!([{"conditionType": "FleetReady"}]));

    // The ClusterGroups the HelmOp and GitRepo target exist, with the mapping.
    let targets: Vec<&str> = documents[3]["spec"]["targets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["clusterGroup"].as_str())
        .collect();
    assert_eq!(targets, ["quick-start", "quick-start.classes"]);
    assert_eq!(
        documents[4]["spec"]["targets"],
        documents[3]["spec"]["targets"]
    );
    eventually("class group, cross-namespace group and mapping", || async {
        let class_group = h.get::<ClusterGroup>("classes", "quick-start").await?;
        let group = h.get::<ClusterGroup>("apps", "quick-start.classes").await?;
        let mapping = h.get::<BundleNamespaceMapping>("classes", "apps").await?;
        Some((class_group, group, mapping))
    })
    .await;

    let condition = |want: &'static str| {
        let h = &h;
        async move {
            eventually(&format!("dev-1 FleetReady {want}"), || async {
                let cluster: caapf::api::CapiCluster = h.get("apps", "dev-1").await?;
                cluster.body.to_map()["status"]["conditions"]
                    .as_array()?
                    .iter()
                    .find(|c| c["type"] == "FleetReady" && c["reason"] == want)
                    .cloned()
            })
            .await
        }
    };
    condition(reason::WAITING_FOR_CONTROL_PLANE).await;
    h.initialize("apps", "dev-1").await;
    condition(reason::AGENT_NOT_REGISTERED).await;

    // Every `.ClusterValues` path of the HelmOp resolves in the Fleet Cluster's templateValues.
    let fleet = eventually("Fleet Cluster with templateValues", || async {
        let fleet = h.fleet_cluster("apps", "dev-1").await?;
        let values = serde_json::to_value(fleet.spec.template_values?).ok()?;
        values.get("ControlPlane").is_none().then_some(())?;
        Some(values)
    })
    .await;
    let (paths, variables) = cluster_values_paths(&documents);
    assert!(paths.len() >= 3, "{paths:?}");
    for path in paths {
        let mut at = &fleet;
        for key in &path {
            at = at
                .get(key)
                .unwrap_or_else(|| panic!(".ClusterValues.{} resolves", path.join(".")));
        }
    }
    assert_eq!(variables, ["metricResolution"]);
    assert_eq!(fleet["Variables"]["metricResolution"], "30s");

    // Fleet registers the agent and rolls out; then everything is ready.
    let api: Api<FleetCluster> = Api::namespaced(h.client.clone(), "apps");
    let now = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let status = |not_ready: bool| {
        let mut status = json!({
            "namespace": "cluster-apps-dev-1-0123456789ab",
            "agent": {"lastSeen": now, "namespace": "fleet-addon-agent"},
            "summary": {"ready": 2, "desiredReady": 2},
            "display": {"readyBundles": "2/2"},
            "readyGitRepos": 1, "desiredReadyGitRepos": 1,
            "readyHelmOps": 1, "desiredReadyHelmOps": 1
        });
        if not_ready {
            status["summary"] = json!({"ready": 1, "desiredReady": 2, "notReady": 1,
                "nonReadyResources": [{"name": "metrics-server", "bundleState": "NotReady",
                    "message": "deployment.apps kube-system/metrics-server [progressing] Deployment does not have minimum availability."}]});
            status["display"] = json!({"readyBundles": "1/2", "state": "NotReady"});
            status["readyHelmOps"] = json!(0);
        }
        status
    };
    for (not_ready, want) in [(true, reason::BUNDLES_NOT_READY), (false, reason::READY)] {
        let patch: json_patch::Patch = serde_json::from_value(
            json!([{"op": "add", "path": "/status", "value": status(not_ready)}]),
        )
        .expect("patch");
        api.patch_status("dev-1", &PatchParams::default(), &Patch::<()>::Json(patch))
            .await
            .expect("play Fleet");
        let seen = condition(want).await;
        if not_ready {
            assert_eq!(
                seen["message"],
                "1 of 2 Fleet bundles not ready (GitRepos ready 1/1, HelmOps ready 0/1): metrics-server (NotReady: deployment.apps kube-system/metrics-server [progressing] Deployment does not have minimum availability.)"
            );
        } else {
            // No message when True: it would join Available's message (docs/addon-guide.md).
            assert_eq!(seen["message"], "");
            assert_eq!(seen["status"], "True");
        }
    }
    h.stop().await;
}
