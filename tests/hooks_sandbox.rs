//! Lifecycle hooks against the sandbox API server: BeforeClusterCreate prepares agent-initiated
//! registration (the test plays Fleet), is idempotent and keeps the client ID; BeforeClusterDelete
//! cleans up; BeforeClusterUpgrade holds upgrades until bundles are ready; the rendered agent
//! manifest is accepted by the API server.

use std::collections::BTreeMap;
use std::sync::Arc;

use caapf::bootstrap::{HELM_CHART_KEY, MANIFEST_KEY};
use caapf::cli::ManagerFlags;
use caapf::context::Context;
use caapf::controllers::config_watch;
use caapf::hooks::handlers;
use caapf::hooks::types::{Hook, Response, ResponseBody, ResponseStatus};
use caapf::model::config::EffectiveConfig;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::Discovery;
use kube_sandbox::{Sandbox, SandboxOptions};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const NS: &str = "team-a";

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

fn capi_cluster() -> ApiResource {
    resource("cluster.x-k8s.io", "v1beta2", "Cluster", "clusters")
}
fn fleet_cluster() -> ApiResource {
    resource("fleet.cattle.io", "v1alpha1", "Cluster", "clusters")
}
fn token() -> ApiResource {
    resource(
        "fleet.cattle.io",
        "v1alpha1",
        "ClusterRegistrationToken",
        "clusterregistrationtokens",
    )
}

struct Env {
    sandbox: Sandbox,
    ctx: Arc<Context>,
    _config: config_watch::ConfigSender,
}

impl Env {
    async fn start(config_yaml: Option<&str>) -> Env {
        let mut options = SandboxOptions {
            validate_custom_resources: true,
            ..SandboxOptions::default()
        };
        options.extra_crds.push(kube_sandbox::crds::permissive_crd(
            "helm.cattle.io",
            "HelmChart",
            "helmcharts",
            &["v1"],
            "v1",
            true,
            &[],
            &[],
            true,
            Value::Null,
        ));
        let sandbox = Sandbox::start_with(options).await.expect("sandbox");
        let client = sandbox.client();
        let (tx, rx) = config_watch::channel();
        let config = match config_yaml {
            None => EffectiveConfig::default(),
            Some(yaml) => EffectiveConfig::from_spec(&serde_yaml::from_str(yaml).expect("spec")),
        };
        assert!(config.problems.is_empty(), "{:?}", config.problems);
        tx.send_replace(Some(Arc::new(config)));
        let ctx = Arc::new(Context::new(
            client,
            ManagerFlags::default(),
            rx,
            CancellationToken::new(),
        ));
        let env = Env {
            sandbox,
            ctx,
            _config: tx,
        };
        env.create_namespace(NS, json!({"fleet": "yes"})).await;
        env
    }

    fn client(&self) -> kube::Client {
        self.sandbox.client()
    }

    async fn create_namespace(&self, name: &str, labels: Value) {
        let api: Api<Namespace> = Api::all(self.client());
        let ns: Namespace =
            serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}}))
                .expect("namespace");
        api.create(&PostParams::default(), &ns)
            .await
            .expect("create namespace");
    }

    /// Creates a CAPI Cluster (so owner references resolve) and returns it as CAPI sends it in
    /// requests (`v1beta1` converts the topology fields).
    async fn capi_cluster(&self, name: &str, labels: Value, class: &str, v1beta1: bool) -> Value {
        self.capi_cluster_in(NS, name, labels, class, v1beta1).await
    }

    /// Same, in namespace `ns`, with a class from [`NS`].
    async fn capi_cluster_in(
        &self,
        ns: &str,
        name: &str,
        labels: Value,
        class: &str,
        v1beta1: bool,
    ) -> Value {
        let api: Api<DynamicObject> = Api::namespaced_with(self.client(), ns, &capi_cluster());
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"topology": {"classRef": {"name": class, "namespace": NS}, "version": "v1.33.1",
                     "controlPlane": {"replicas": 1}}},
        }))
        .expect("cluster");
        let created = api
            .create(&PostParams::default(), &object)
            .await
            .expect("create cluster");
        let mut value = serde_json::to_value(&created).expect("json");
        if let Some(meta) = value["metadata"].as_object_mut() {
            meta.remove("managedFields");
            meta.remove("resourceVersion");
        }
        if v1beta1 {
            value["apiVersion"] = json!("cluster.x-k8s.io/v1beta1");
            value["spec"]["topology"] = json!({"class": class, "classNamespace": NS,
                "version": "v1.33.1", "controlPlane": {"replicas": 1}});
        }
        value
    }

    async fn call(&self, hook: Hook, cluster: &Value) -> Response {
        let body = json!({
            "apiVersion": "hooks.runtime.cluster.x-k8s.io/v1alpha1",
            "kind": hook.request_kind(),
            "settings": {},
            "cluster": cluster,
            "fromKubernetesVersion": "v1.33.1",
            "toKubernetesVersion": "v1.34.0",
        });
        let bytes = serde_json::to_vec(&body).expect("json");
        handlers::handle(&self.ctx, hook, &bytes).await
    }

    async fn get(&self, resource: &ApiResource, ns: &str, name: &str) -> Option<Value> {
        let api: Api<DynamicObject> = Api::namespaced_with(self.client(), ns, resource);
        api.get_opt(name)
            .await
            .expect("get")
            .map(|o| serde_json::to_value(o).expect("json"))
    }

    /// Plays Fleet's token controller: fills the token status and writes its Secret.
    async fn issue_token(&self, name: &str) {
        let secrets: Api<Secret> = Api::namespaced(self.client(), NS);
        let values = "clusterNamespace: team-a\napiServerURL: https://fleet.example.com:6443\napiServerCA: |\n  -----BEGIN CERTIFICATE-----\n  MIIB\n  -----END CERTIFICATE-----\ntoken: sa-token-value\nsystemRegistrationNamespace: cattle-fleet-clusters-system\n";
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": NS, "labels": {"fleet.cattle.io/managed": "true"}},
            "type": "fleet.cattle.io/cluster-registration-values",
            "stringData": {"values": values},
        }))
        .expect("secret");
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .expect("token secret");
        let tokens: Api<DynamicObject> = Api::namespaced_with(self.client(), NS, &token());
        tokens
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"status": {"secretName": name, "expires": "2030-01-01T00:00:00Z"}}),
                ),
            )
            .await
            .expect("token status");
    }

    /// Plays the Fleet chart: the fleet-controller ConfigMap.
    async fn install_fleet(&self) {
        self.create_namespace("cattle-fleet-system", json!({}))
            .await;
        let api: Api<ConfigMap> = Api::namespaced(self.client(), "cattle-fleet-system");
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "fleet-controller", "namespace": "cattle-fleet-system"},
            "data": {"config": r#"{"agentImage":"rancher/fleet-agent:v0.13.1","agentImagePullPolicy":"IfNotPresent","agentTLSMode":"system-store","apiServerURL":"https://fleet.example.com:6443"}"#},
        }))
        .expect("configmap");
        api.create(&PostParams::default(), &cm)
            .await
            .expect("fleet-controller");
    }

    fn writes(&self) -> usize {
        self.sandbox.requests().count(|r| r.verb.is_write())
    }
}

fn retry_after(response: &Response) -> i32 {
    match response.body {
        ResponseBody::Retry {
            retry_after_seconds,
        } => retry_after_seconds,
        _ => panic!("not a retry response: {response:?}"),
    }
}

fn assert_retry(response: &Response, message_part: &str) {
    assert_eq!(response.status, ResponseStatus::Success, "{response:?}");
    assert!(retry_after(response) > 0, "{response:?}");
    assert!(
        response.message.contains(message_part),
        "{:?} does not mention {message_part:?}",
        response.message
    );
}

fn assert_success(response: &Response) {
    assert_eq!(response.status, ResponseStatus::Success, "{response:?}");
    if let ResponseBody::Retry {
        retry_after_seconds,
    } = response.body
    {
        assert_eq!(retry_after_seconds, 0, "{response:?}");
    }
}

fn client_id(fleet: &Value) -> String {
    fleet["spec"]["clientID"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn secret_text(secret: &Value, key: &str) -> String {
    let encoded = secret["data"][key].as_str().unwrap_or_default();
    let bytes = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, encoded)
        .expect("base64");
    String::from_utf8(bytes).expect("utf-8")
}

#[tokio::test]
async fn before_cluster_create_prepares_agent_initiated_registration_then_succeeds() {
    for v1beta1 in [false, true] {
        let env = Env::start(Some(
            "cluster: {agentInitiated: true, setOwnerReferences: true}",
        ))
        .await;
        let cluster = env
            .capi_cluster("c1", json!({"env": "dev"}), "quick-start", v1beta1)
            .await;

        // Fleet has not issued the token yet: retry.
        let first = env.call(Hook::BeforeClusterCreate, &cluster).await;
        assert_retry(
            &first,
            "waiting for Fleet to issue ClusterRegistrationToken team-a/c1",
        );
        let fleet = env
            .get(&fleet_cluster(), NS, "c1")
            .await
            .expect("Fleet Cluster created");
        let id = client_id(&fleet);
        assert_eq!(id.len(), 64);
        // The hook writes only the name, the client ID and its mark; the import controller
        // applies the rest (tests/import.rs runtime_extension_stub_is_completed_...).
        assert!(fleet["metadata"].get("labels").is_none());
        assert!(fleet["spec"].get("agentNamespace").is_none());
        assert_eq!(
            fleet["metadata"]["annotations"]["fleet.addons.cluster.x-k8s.io/registration"],
            "runtime-extension"
        );
        assert_eq!(
            fleet["metadata"]["managedFields"][0]["manager"],
            "caapf-runtime-extension"
        );
        let created_token = env.get(&token(), NS, "c1").await.expect("token created");
        assert_eq!(created_token["spec"]["ttl"], "24h");

        // Still waiting: the token has no Secret yet.
        assert_retry(
            &env.call(Hook::BeforeClusterCreate, &cluster).await,
            "ClusterRegistrationToken team-a/c1",
        );

        // The test plays Fleet: status and Secret. Fleet's controller ConfigMap is missing.
        env.issue_token("c1").await;
        assert_retry(
            &env.call(Hook::BeforeClusterCreate, &cluster).await,
            "ConfigMap cattle-fleet-system/fleet-controller",
        );
        env.install_fleet().await;
        let done = env.call(Hook::BeforeClusterCreate, &cluster).await;
        assert_success(&done);
        assert!(
            done.message
                .contains("bootstrap Secret team-a/c1-fleet-agent-bootstrap"),
            "{}",
            done.message
        );

        let secret = env
            .get(
                &resource("", "v1", "Secret", "secrets"),
                NS,
                "c1-fleet-agent-bootstrap",
            )
            .await
            .expect("bootstrap secret");
        assert_eq!(
            secret["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"],
            "c1"
        );
        assert_eq!(secret["metadata"]["ownerReferences"][0]["kind"], "Cluster");
        let manifest = secret_text(&secret, MANIFEST_KEY);
        assert!(manifest.contains(&id), "the manifest carries the client ID");
        assert!(manifest.contains("rancher/fleet-agent:v0.13.1"));
        let chart = secret_text(&secret, HELM_CHART_KEY);
        assert!(chart.contains("kind: HelmChart") && chart.contains(&id));

        // A second call creates nothing and writes nothing; the client ID is unchanged.
        env.sandbox.requests().reset();
        assert_success(&env.call(Hook::BeforeClusterCreate, &cluster).await);
        assert_eq!(env.writes(), 0, "{:?}", env.sandbox.requests().all());
        let fleet = env
            .get(&fleet_cluster(), NS, "c1")
            .await
            .expect("Fleet Cluster");
        assert_eq!(client_id(&fleet), id);

        // BeforeClusterDelete removes the Secret, the token and the owned Fleet Cluster.
        let deleted = env.call(Hook::BeforeClusterDelete, &cluster).await;
        assert_success(&deleted);
        assert!(
            env.get(
                &resource("", "v1", "Secret", "secrets"),
                NS,
                "c1-fleet-agent-bootstrap"
            )
            .await
            .is_none()
        );
        assert!(env.get(&token(), NS, "c1").await.is_none());
        assert!(env.get(&fleet_cluster(), NS, "c1").await.is_none());
        // Again: nothing left, still Success.
        assert_success(&env.call(Hook::BeforeClusterDelete, &cluster).await);
        env.sandbox.shutdown().await;
    }
}

#[tokio::test]
async fn an_existing_client_id_is_kept_and_fleet_clusters_not_owned_survive_delete() {
    let env = Env::start(Some("cluster: {agentInitiated: true}")).await;
    let cluster = env
        .capi_cluster("c2", json!({}), "quick-start", false)
        .await;
    // Someone (the import controller, an earlier run) created the Fleet Cluster already.
    let api: Api<DynamicObject> = Api::namespaced_with(env.client(), NS, &fleet_cluster());
    let existing: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "fleet.cattle.io/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "c2", "namespace": NS},
        "spec": {"clientID": "kept-forever", "agentNamespace": "fleet-addon-agent"},
    }))
    .expect("fleet cluster");
    api.create(&PostParams::default(), &existing)
        .await
        .expect("create");
    env.issue_token_later_and_finish(&cluster, "c2").await;
    let fleet = env
        .get(&fleet_cluster(), NS, "c2")
        .await
        .expect("Fleet Cluster");
    assert_eq!(client_id(&fleet), "kept-forever");
    let secret = env
        .get(
            &resource("", "v1", "Secret", "secrets"),
            NS,
            "c2-fleet-agent-bootstrap",
        )
        .await
        .expect("bootstrap secret");
    assert!(secret_text(&secret, MANIFEST_KEY).contains("kept-forever"));

    assert_success(&env.call(Hook::BeforeClusterDelete, &cluster).await);
    assert!(env.get(&token(), NS, "c2").await.is_none());
    assert!(
        env.get(&fleet_cluster(), NS, "c2").await.is_some(),
        "a Fleet Cluster the CAPI Cluster does not own is kept"
    );
}

impl Env {
    async fn issue_token_later_and_finish(&self, cluster: &Value, name: &str) {
        assert_retry(
            &self.call(Hook::BeforeClusterCreate, cluster).await,
            "ClusterRegistrationToken",
        );
        self.issue_token(name).await;
        self.install_fleet().await;
        assert_success(&self.call(Hook::BeforeClusterCreate, cluster).await);
    }
}

#[tokio::test]
async fn a_class_installing_the_agent_makes_imported_clusters_agent_initiated() {
    let env = Env::start(Some(
        "cluster: {namespaceSelector: {matchLabels: {fleet: \"yes\"}}, agentInitiatedSelector: {matchLabels: {nat: \"true\"}}}",
    ))
    .await;
    // A class without our patch, manager-initiated by configuration: Success, no writes.
    let plain = env
        .capi_cluster("plain", json!({}), "plain-class", false)
        .await;
    env.sandbox.requests().reset();
    let response = env.call(Hook::BeforeClusterCreate, &plain).await;
    assert_success(&response);
    assert!(
        response.message.contains("manager-initiated"),
        "{}",
        response.message
    );
    assert_eq!(env.writes(), 0);

    // A class using the fleet-agent-bootstrap patch: installing the agent at boot asks for
    // agent-initiated registration, so the Cluster is prepared and marked for the controller.
    let classes: Api<DynamicObject> = Api::namespaced_with(
        env.client(),
        NS,
        &resource(
            "cluster.x-k8s.io",
            "v1beta2",
            "ClusterClass",
            "clusterclasses",
        ),
    );
    let class: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "ClusterClass",
        "metadata": {"name": "fleet-class", "namespace": NS},
        "spec": {
            "controlPlane": {"templateRef": {"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlaneTemplate", "name": "cp"}},
            "infrastructure": {"templateRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "DockerClusterTemplate", "name": "infra"}},
            "patches": [{"name": "fleet-agent", "external": {"generatePatchesExtension": "fleet-agent-bootstrap.caapf"}}]
        },
    }))
    .expect("class");
    classes
        .create(&PostParams::default(), &class)
        .await
        .expect("class");
    let uses_patch = env
        .capi_cluster("booted", json!({}), "fleet-class", true)
        .await;
    assert_retry(
        &env.call(Hook::BeforeClusterCreate, &uses_patch).await,
        "ClusterRegistrationToken team-a/booted",
    );
    let fleet = env
        .get(&fleet_cluster(), NS, "booted")
        .await
        .expect("Fleet Cluster");
    assert_eq!(
        fleet["metadata"]["annotations"]["fleet.addons.cluster.x-k8s.io/registration"],
        "runtime-extension"
    );
    assert_eq!(client_id(&fleet).len(), 64);

    // The same class with fleetAgent.enabled=false: manager-initiated, nothing written.
    let mut disabled = env
        .capi_cluster("disabled", json!({}), "fleet-class", false)
        .await;
    disabled["spec"]["topology"]["variables"] =
        json!([{"name": "fleetAgent", "value": {"enabled": false}}]);
    env.sandbox.requests().reset();
    assert_success(&env.call(Hook::BeforeClusterCreate, &disabled).await);
    assert_eq!(env.writes(), 0);

    // Not imported (namespace not selected) but the class installs the agent: the machines
    // would wait for a Secret nobody writes, so the hook refuses and says what to change.
    env.create_namespace("outside", json!({})).await;
    let outside = env
        .capi_cluster_in("outside", "lost", json!({}), "fleet-class", false)
        .await;
    let refused = env.call(Hook::BeforeClusterCreate, &outside).await;
    assert_eq!(refused.status, ResponseStatus::Failure, "{refused:?}");
    assert!(
        refused.message.contains("ClusterClass team-a/fleet-class"),
        "{}",
        refused.message
    );
    assert!(
        refused.message.contains("not selected"),
        "{}",
        refused.message
    );
    assert!(
        refused.message.contains("fleetAgent.enabled"),
        "{}",
        refused.message
    );
}

#[tokio::test]
async fn before_cluster_upgrade_waits_for_ready_bundles_only_when_configured() {
    let env = Env::start(Some(
        "cluster: {agentInitiated: true, setOwnerReferences: true}\nruntimeExtension: {beforeClusterUpgrade: {waitForBundlesReady: true}}",
    ))
    .await;
    let cluster = env.capi_cluster("c3", json!({}), "quick-start", true).await;
    // No Fleet Cluster: nothing to wait for.
    assert_success(&env.call(Hook::BeforeClusterUpgrade, &cluster).await);

    env.issue_token_later_and_finish(&cluster, "c3").await;
    // Not registered yet (no status.namespace).
    assert_retry(
        &env.call(Hook::BeforeClusterUpgrade, &cluster).await,
        "waiting for Fleet Cluster team-a/c3 to register",
    );
    let fleet: Api<DynamicObject> = Api::namespaced_with(env.client(), NS, &fleet_cluster());
    fleet
        .patch_status(
            "c3",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"namespace": "cluster-team-a-c3-0123"}})),
        )
        .await
        .expect("status");
    env.create_namespace("cluster-team-a-c3-0123", json!({}))
        .await;
    let bds: Api<DynamicObject> = Api::namespaced_with(
        env.client(),
        "cluster-team-a-c3-0123",
        &resource(
            "fleet.cattle.io",
            "v1alpha1",
            "BundleDeployment",
            "bundledeployments",
        ),
    );
    let bd = |name: &str, ready: bool| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "fleet.cattle.io/v1alpha1", "kind": "BundleDeployment",
            "metadata": {"name": name, "labels": {"fleet.cattle.io/bundle-namespace": "fleet-default", "fleet.cattle.io/bundle-name": name}},
            "spec": {"deploymentID": "s-1"},
            "status": {"appliedDeploymentID": "s-1", "ready": ready, "nonModified": true},
        }))
        .expect("bd")
    };
    // Status is a subresource: written by the agent after creation, as in a real cluster.
    for (name, ready) in [("calico", false), ("monitoring", true)] {
        let object = bd(name, ready);
        bds.create(&PostParams::default(), &object)
            .await
            .expect("bd");
        bds.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": object.data["status"]})),
        )
        .await
        .expect("bd status");
    }
    let held = env.call(Hook::BeforeClusterUpgrade, &cluster).await;
    assert_retry(&held, "fleet-default/calico (NotReady)");
    assert!(held.message.contains("to v1.34.0"), "{}", held.message);
    assert!(!held.message.contains("monitoring"), "{}", held.message);
    assert_eq!(retry_after(&held), 30);
    bds.patch_status(
        "calico",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"ready": true}})),
    )
    .await
    .expect("ready");
    assert_success(&env.call(Hook::BeforeClusterUpgrade, &cluster).await);

    // The same Cluster without the setting: never held.
    let off = Env::start(Some("cluster: {}")).await;
    let cluster = off
        .capi_cluster("c3", json!({}), "quick-start", false)
        .await;
    assert_success(&off.call(Hook::BeforeClusterUpgrade, &cluster).await);
}

/// Every document of the rendered agent manifest is accepted by the API server, and so is the
/// RKE2 HelmChart (with the HelmChart CRD registered).
#[tokio::test]
async fn rendered_bootstrap_objects_are_accepted_by_the_api_server() {
    let env = Env::start(Some("cluster: {agentInitiated: true, hostNetwork: true}")).await;
    let cluster = env
        .capi_cluster("c4", json!({}), "quick-start", false)
        .await;
    env.issue_token_later_and_finish(&cluster, "c4").await;
    let secret = env
        .get(
            &resource("", "v1", "Secret", "secrets"),
            NS,
            "c4-fleet-agent-bootstrap",
        )
        .await
        .expect("bootstrap secret");
    let discovery = Discovery::new(env.client()).run().await.expect("discovery");
    let mut created = BTreeMap::new();
    for key in [MANIFEST_KEY, HELM_CHART_KEY] {
        let text = secret_text(&secret, key);
        for document in serde_yaml::Deserializer::from_str(&text) {
            let value = <Value as serde::Deserialize>::deserialize(document).expect("yaml");
            let object: DynamicObject = serde_json::from_value(value.clone()).expect("object");
            let types = object.types.clone().expect("apiVersion and kind");
            let gvk = GroupVersionKind::try_from(&types).expect("gvk");
            let (resource, capabilities) = discovery
                .resolve_gvk(&gvk)
                .unwrap_or_else(|| panic!("{gvk:?} is not served"));
            let api: Api<DynamicObject> = match capabilities.scope {
                kube::discovery::Scope::Namespaced => Api::namespaced_with(
                    env.client(),
                    object
                        .metadata
                        .namespace
                        .as_deref()
                        .expect("namespaced object has a namespace"),
                    &resource,
                ),
                kube::discovery::Scope::Cluster => Api::all_with(env.client(), &resource),
            };
            api.create(&PostParams::default(), &object)
                .await
                .unwrap_or_else(|e| {
                    panic!("{} {:?} rejected: {e}", types.kind, object.metadata.name)
                });
            *created.entry(types.kind.clone()).or_insert(0) += 1;
        }
    }
    assert_eq!(
        created.keys().cloned().collect::<Vec<_>>(),
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",
            "Deployment",
            "HelmChart",
            "Namespace",
            "Secret",
            "ServiceAccount"
        ]
    );
}

fn context_with(
    client: kube::Client,
    config: EffectiveConfig,
) -> (Arc<Context>, config_watch::ConfigSender) {
    let (tx, rx) = config_watch::channel();
    tx.send_replace(Some(Arc::new(config)));
    (
        Arc::new(Context::new(
            client,
            ManagerFlags::default(),
            rx,
            CancellationToken::new(),
        )),
        tx,
    )
}

/// Golden request/response pairs in `tests/fixtures/hooks/`, answered through the server's
/// request path (routing, method, limits, decoding, handlers). `UPDATE_GOLDEN=1` rewrites the
/// expected responses (review the diff).
#[tokio::test]
async fn golden_requests_and_responses() {
    let sandbox = Sandbox::start().await;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hooks");
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .expect("fixtures")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 20, "{} fixtures", paths.len());
    for path in paths {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        let mut case: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
        let config = match case["config"].as_str() {
            Some(yaml) => EffectiveConfig::from_spec(&serde_yaml::from_str(yaml).expect("spec")),
            None => EffectiveConfig::default(),
        };
        let (ctx, _tx) = context_with(sandbox.client(), config);
        let body = match case["requestRaw"].as_str() {
            Some(raw) => raw.as_bytes().to_vec(),
            None => serde_json::to_vec(&case["request"]).expect("json"),
        };
        let uri: axum::http::Uri = case["path"].as_str().expect("path").parse().expect("uri");
        let (_, response) = caapf::hooks::server::respond(
            &ctx,
            &caapf::hooks::server::ServerOptions::default(),
            &axum::http::Method::POST,
            &uri,
            axum::body::Body::from(body),
        )
        .await;
        let got = serde_json::to_value(&response).expect("json");
        if update {
            case["response"] = got;
            let text = serde_json::to_string_pretty(&case).expect("json") + "\n";
            std::fs::write(&path, text).expect("write");
        } else {
            assert_eq!(got, case["response"], "{name}");
        }
    }
}

/// A body over the (default, 20 MiB) limit is answered with a Failure, not read whole.
#[tokio::test]
async fn an_oversized_body_is_a_failure() {
    let sandbox = Sandbox::start().await;
    let (ctx, _tx) = context_with(sandbox.client(), EffectiveConfig::default());
    let options = caapf::hooks::server::ServerOptions::default();
    let body = vec![b' '; options.max_body_bytes + 1];
    let uri: axum::http::Uri =
        "/hooks.runtime.cluster.x-k8s.io/v1alpha1/generatepatches/fleet-agent-bootstrap"
            .parse()
            .expect("uri");
    let (label, response) = caapf::hooks::server::respond(
        &ctx,
        &options,
        &axum::http::Method::POST,
        &uri,
        axum::body::Body::from(body),
    )
    .await;
    assert_eq!(label, "GeneratePatches");
    assert_eq!(response.status, ResponseStatus::Failure);
    assert!(
        response.message.contains("at most 20971520 bytes"),
        "{}",
        response.message
    );
    assert_eq!(response.kind, "GeneratePatchesResponse");
}
