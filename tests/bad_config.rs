//! Bad configuration through the API (issue #16): every kind of invalid FleetAddonConfig that
//! `src/model/validation/` knows is reported with its field path (in the `ConfigValid`
//! condition, or refused by the API server's schema with the path), and never deletes anything:
//! the Fleet Clusters, the ClusterGroups and the BundleNamespaceMapping stay while each invalid
//! spec is in place, although the valid base it modifies has `deselectPolicy: Delete` and most
//! rows would deselect Clusters if their invalid part were ignored.

use crate::common;

use caapf::api::{BundleNamespaceMapping, FleetAddonConfig};
use common::{Harness, eventually};
use fleet_api_rs::fleet_clustergroup::ClusterGroup;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

const BASE: &str = r#"
cluster:
  namespaceRegexes: ["apps", "classes"]
  applyClassGroup: true
  patchResource: true
  deselectPolicy: Delete
clusterClass:
  patchResource: true
"#;

/// (a YAML fragment merged into [`BASE`], the field path the report must name). The rows of
/// `validation/spec.rs`'s `every_problem_has_its_field_path`, and some the CRD schema refuses.
const ROWS: &[(&str, &str)] = &[
    (
        "cluster: {namespaceRegexes: [\"ok\", \"foo(\"]}",
        "spec.cluster.namespaceRegexes[1]",
    ),
    (
        "cluster: {selector: {matchExpressions: [{key: env, operator: Maybe}]}}",
        "spec.cluster.selector.matchExpressions[0].operator",
    ),
    (
        "cluster: {namespaceSelector: {matchExpressions: [{key: env, operator: In}]}}",
        "spec.cluster.namespaceSelector.matchExpressions[0].values",
    ),
    (
        "cluster: {selector: {matchExpressions: [{key: env, operator: Exists, values: [a]}]}}",
        "spec.cluster.selector.matchExpressions[0].values",
    ),
    (
        "cluster: {selector: {matchLabels: {\"bad key!\": x}}}",
        "spec.cluster.selector.matchLabels[\"bad key!\"]",
    ),
    (
        "cluster: {agentInitiatedSelector: {matchLabels: {a: \"-bad\"}}}",
        "spec.cluster.agentInitiatedSelector.matchLabels[\"a\"]",
    ),
    (
        "cluster: {naming: {prefix: \"Fleet_\"}}",
        "spec.cluster.naming",
    ),
    (
        "cluster: {agentNamespace: Agents}",
        "spec.cluster.agentNamespace",
    ),
    (
        "cluster: {agentTolerations: [{key: k, operator: Exists, effect: NoSchedul}]}",
        "spec.cluster.agentTolerations[0].effect",
    ),
    (
        "cluster: {privateRepoURL: \"https://registry.example.com\"}",
        "spec.cluster.privateRepoURL",
    ),
    (
        "cluster: {agentOverrides: [{selector: {matchLabels: {cloud: gke}}, settings: {agentEnvVars: [{name: \"A=B\", value: x}]}}]}",
        "spec.cluster.agentOverrides[0].settings.agentEnvVars[0].name",
    ),
    (
        "cluster: {agentOverrides: [{selector: {matchExpressions: [{key: a, operator: Like}]}, settings: {}}]}",
        "spec.cluster.agentOverrides[0].selector.matchExpressions[0].operator",
    ),
    (
        "install: {followLatest: true, version: 0.13.1}",
        "spec.install",
    ),
    ("install: {}", "spec.install"),
    ("install: {version: \"~0.13\"}", "spec.install.version"),
    (
        "install: {followLatest: true, repository: \"http://charts.example.com\"}",
        "spec.install.repository",
    ),
    (
        "runtimeExtension: {agentChartRepository: \"ftp://charts.example.com\"}",
        "spec.runtimeExtension.agentChartRepository",
    ),
    (
        "config: {server: {inferLocal: true, custom: {}}}",
        "spec.config.server",
    ),
    (
        "config: {server: {custom: {apiServerUrl: \"fleet.example.com\", apiServerCaConfigRef: {kind: Pod, name: x, namespace: default}}}}",
        "spec.config.server.custom.apiServerUrl",
    ),
    (
        "config: {server: {custom: {apiServerCaConfigRef: {name: ca}}}}",
        "spec.config.server.custom.apiServerCaConfigRef.namespace",
    ),
    (
        "config: {featureGates: {configMap: {ref: {name: x}}}}",
        "spec.config.featureGates.configMap.ref.namespace",
    ),
];

/// `patch` merged into `base` (objects key by key, anything else replaced).
fn merge(base: &mut Value, patch: &Value) {
    match (base, patch) {
        (Value::Object(base), Value::Object(patch)) => {
            for (key, value) in patch {
                merge(base.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
        (base, patch) => *base = patch.clone(),
    }
}

/// Replaces the spec; `Err` is the API server's refusal.
async fn put_spec(h: &Harness, spec: &Value) -> Result<i64, String> {
    let api: Api<FleetAddonConfig> = Api::all(h.client.clone());
    let live = api.get("fleet-addon-config").await.expect("get config");
    let object: FleetAddonConfig = serde_json::from_value(json!({
        "apiVersion": "addons.cluster.x-k8s.io/v1alpha1", "kind": "FleetAddonConfig",
        "metadata": {"name": "fleet-addon-config", "resourceVersion": live.metadata.resource_version},
        "spec": spec,
    }))
    .map_err(|err| format!("the test's spec does not decode: {err}"))?;
    api.replace("fleet-addon-config", &PostParams::default(), &object)
        .await
        .map(|o| o.metadata.generation.unwrap_or_default())
        .map_err(|err| err.to_string())
}

/// The message of the `ConfigValid` condition when it is False.
async fn invalid_message(h: &Harness) -> Option<String> {
    let api: Api<FleetAddonConfig> = Api::all(h.client.clone());
    let object = serde_json::to_value(api.get("fleet-addon-config").await.ok()?).ok()?;
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "ConfigValid" && c["status"] == "False")
        .and_then(|c| c["message"].as_str().map(str::to_string))
}

/// Everything the import made: Fleet Clusters, ClusterGroups (by namespace/name) and mappings.
async fn inventory(h: &Harness) -> Vec<String> {
    let mut found = Vec::new();
    for ns in ["apps", "classes"] {
        for cluster in h.list::<fleet_api_rs::fleet_cluster::Cluster>(ns).await {
            found.push(format!(
                "Cluster {ns}/{}",
                cluster.metadata.name.unwrap_or_default()
            ));
        }
        for group in h.list::<ClusterGroup>(ns).await {
            found.push(format!(
                "ClusterGroup {ns}/{}",
                group.metadata.name.unwrap_or_default()
            ));
        }
        for mapping in h.list::<BundleNamespaceMapping>(ns).await {
            found.push(format!(
                "BundleNamespaceMapping {ns}/{}",
                mapping.metadata.name.unwrap_or_default()
            ));
        }
    }
    found.sort();
    found
}

fn deletes(h: &Harness) -> Vec<String> {
    h.sandbox
        .requests()
        .all()
        .into_iter()
        .filter(|r| {
            matches!(
                r.verb,
                kube_sandbox::Verb::Delete | kube_sandbox::Verb::DeleteCollection
            ) && r.resource != "events"
                && r.resource != "leases"
        })
        .map(|r| format!("{} {}/{}", r.resource, r.namespace, r.name))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_invalid_config_is_reported_with_its_path_and_deletes_nothing() {
    assert_eq!(ROWS.len(), 21, "one row per kind of problem in validation/");
    let mut h = Harness::new().await;
    for ns in ["classes", "apps"] {
        h.namespace(ns, json!({})).await;
    }
    h.config(BASE).await;
    h.class("classes", "quick-start", json!({"team": "a"}))
        .await;
    for (ns, name) in [("apps", "a1"), ("classes", "c1")] {
        h.cluster(
            ns,
            json!({
                "metadata": {"name": name},
                "spec": {"topology": {
                    "classRef": {"name": "quick-start", "namespace": "classes"},
                    "version": "v1.35.0"
                }}
            }),
        )
        .await;
        h.initialize(ns, name).await;
    }
    h.start().await;
    let expected = vec![
        "BundleNamespaceMapping classes/apps".to_string(),
        "Cluster apps/a1".to_string(),
        "Cluster classes/c1".to_string(),
        "ClusterGroup apps/quick-start.classes".to_string(),
        "ClusterGroup classes/quick-start".to_string(),
    ];
    eventually("the import is complete", || async {
        (inventory(&h).await == expected).then_some(())
    })
    .await;
    let deletes_before = deletes(&h);

    let base: Value = serde_yaml::from_str(BASE).expect("base");
    let mut refused = Vec::new();
    for (fragment, path) in ROWS {
        let mut spec = base.clone();
        merge(
            &mut spec,
            &serde_yaml::from_str(fragment).expect("fragment"),
        );
        let reconciles = h.reconciles("cluster");
        match put_spec(&h, &spec).await {
            // A server enforcing the CRD's schema refuses some rows itself, naming the field.
            Err(message) => {
                let field = path.trim_start_matches("spec.");
                let leaf = field.rsplit('.').next().unwrap_or(field);
                let leaf = leaf.split('[').next().unwrap_or(leaf);
                assert!(
                    message.contains(leaf),
                    "{fragment}: refused without the field: {message}"
                );
                refused.push(*fragment);
            }
            Ok(_) => {
                let message =
                    eventually(&format!("{fragment}: ConfigValid names {path}"), || async {
                        invalid_message(&h).await.filter(|m| m.contains(path))
                    })
                    .await;
                assert!(message.contains(path), "{fragment}: {message}");
                // The import controller saw the change too before the inventory is checked.
                eventually(&format!("{fragment}: re-evaluated"), || async {
                    (h.reconciles("cluster") > reconciles).then_some(())
                })
                .await;
            }
        }
        assert_eq!(
            inventory(&h).await,
            expected,
            "{fragment}: something was removed"
        );
        assert_eq!(deletes(&h), deletes_before, "{fragment}: a DELETE was sent");
    }
    println!("refused by the API server: {refused:?}");

    // Back to the valid base: everything is still there, nothing was recreated.
    put_spec(&h, &base).await.expect("valid spec");
    eventually("valid again", || async {
        invalid_message(&h).await.is_none().then_some(())
    })
    .await;
    assert_eq!(inventory(&h).await, expected);
    assert_eq!(deletes(&h), deletes_before);
    h.stop().await;
}
