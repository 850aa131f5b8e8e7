//! Lifecycle hooks against the sandbox API server: BeforeClusterCreate prepares agent-initiated
//! registration (the test plays Fleet), is idempotent and keeps the client ID, and never holds a
//! Cluster that does not use the bootstrap; GeneratePatches patches only once the bootstrap
//! Secret exists and prepares it for Clusters that never went through BeforeClusterCreate;
//! BeforeClusterDelete cleans up; BeforeClusterUpgrade holds upgrades until bundles are ready;
//! the agent objects are what Fleet's `fleet-agent` chart renders (a test double of it served from
//! a chart repository on 127.0.0.1), are accepted by the API server and pass Pod Security.

use crate::common;
use crate::fleet_common;

use common::pod_security::Admission;

use std::collections::BTreeMap;
use std::sync::Arc;

use caapf::hooks::handlers;
use caapf::hooks::hook_context::HookContext;
use caapf::hooks::types::{Hook, Response, ResponseBody, ResponseStatus};
use caapf::model::agent_manifest::{
    BootstrapInput, FleetAgentDefaults, FleetClusterAgent, TokenValues, chart_values, finish,
};
use caapf::model::agent_patch::{
    LEGACY_MANIFEST_KEY, SCRIPT_GZIP_KEY, SCRIPT_KEY, SCRIPT_PATH, Template, boot_command,
};
use caapf::model::boot_script::script_objects;
use caapf::model::config::EffectiveConfig;
use caapf::model::fleet_agent_bundle::FleetVersion;
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

/// The agent image the played Fleet publishes, and so the `fleet-agent` chart version rendered.
const AGENT_IMAGE: &str = "rancher/fleet-agent:v0.13.1";
const AGENT_CHART_VERSION: &str = "0.13.1";

struct Env {
    sandbox: Sandbox,
    ctx: Arc<HookContext>,
    charts: fleet_common::ChartRepo,
    _config: caapf::context::ConfigSender,
}

impl Env {
    /// A sandbox, a chart repository with Fleet's `fleet-agent` chart at [`AGENT_CHART_VERSION`],
    /// and a context whose FleetAddonConfig is `config_yaml` (`None`: no FleetAddonConfig) with
    /// `runtimeExtension.agentChartRepository` pointing at that repository.
    async fn start(config_yaml: Option<&str>) -> Env {
        let options = SandboxOptions {
            validate_custom_resources: true,
            ..SandboxOptions::default()
        };
        let sandbox = Sandbox::start_with(options).await.expect("sandbox");
        let client = sandbox.client();
        let charts = fleet_common::ChartRepo::start(&[]).await;
        charts.add_agent_version(AGENT_CHART_VERSION);
        let config = match config_yaml {
            None => EffectiveConfig::default(),
            Some(yaml) => {
                let mut spec: Value = serde_yaml::from_str(yaml).expect("spec");
                if spec.is_null() {
                    spec = json!({});
                }
                spec["runtimeExtension"]["agentChartRepository"] = json!(charts.url());
                EffectiveConfig::from_spec(&serde_json::from_value(spec).expect("spec"))
            }
        };
        assert!(config.problems.is_empty(), "{:?}", config.problems);
        let (ctx, tx) = common::hook_context(client, config);
        let env = Env {
            sandbox,
            ctx,
            charts,
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
    /// requests (`v1beta1` converts the topology fields). Its class uses this extension, so it
    /// carries `fleetAgent: {enabled: true}` (Cluster API defaults it from the variable's schema).
    async fn capi_cluster(&self, name: &str, labels: Value, class: &str, v1beta1: bool) -> Value {
        self.capi_cluster_in(NS, name, labels, class, v1beta1).await
    }

    /// A Cluster whose class does not use this extension (no `fleetAgent` variable).
    async fn plain_cluster(&self, name: &str) -> Value {
        let mut cluster = self
            .capi_cluster(name, json!({}), "plain-class", false)
            .await;
        cluster["spec"]["topology"]
            .as_object_mut()
            .expect("topology")
            .remove("variables");
        cluster
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
                     "controlPlane": {"replicas": 1},
                     "variables": [{"name": "fleetAgent", "value": {"enabled": true}}]}},
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
                "version": "v1.33.1", "controlPlane": {"replicas": 1},
                "variables": [{"name": "fleetAgent", "value": {"enabled": true}}]});
        }
        value
    }

    async fn call_raw(&self, hook: Hook, body: &Value) -> Response {
        let bytes = serde_json::to_vec(body).expect("json");
        handlers::handle(&self.ctx, hook, &bytes).await
    }

    async fn call(&self, hook: Hook, cluster: &Value) -> Response {
        call_with(&self.ctx, hook, cluster).await
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
        let values = TOKEN_VALUES;
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

    /// The FleetAddonConfig singleton, with an empty spec.
    async fn create_addon_config(&self) {
        let config: caapf::api::FleetAddonConfig = serde_json::from_value(json!({
            "apiVersion": "addons.cluster.x-k8s.io/v1alpha1", "kind": "FleetAddonConfig",
            "metadata": {"name": "fleet-addon-config"}, "spec": {}
        }))
        .expect("config");
        Api::<caapf::api::FleetAddonConfig>::all(self.client())
            .create(&PostParams::default(), &config)
            .await
            .expect("create");
    }

    /// Plays the provider's Fleet installation: `status.installedVersion`, which picks the
    /// agent chart.
    async fn set_installed_version(&self, version: &str) {
        Api::<caapf::api::FleetAddonConfig>::all(self.client())
            .patch_status(
                "fleet-addon-config",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"installedVersion": version}})),
            )
            .await
            .expect("status");
    }

    /// Plays the Fleet chart: the fleet-controller ConfigMap (once; again is a no-op).
    async fn install_fleet(&self) {
        let namespaces: Api<Namespace> = Api::all(self.client());
        if namespaces
            .get_opt("cattle-fleet-system")
            .await
            .expect("get")
            .is_some()
        {
            return;
        }
        self.create_namespace("cattle-fleet-system", json!({}))
            .await;
        let api: Api<ConfigMap> = Api::namespaced(self.client(), "cattle-fleet-system");
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "fleet-controller", "namespace": "cattle-fleet-system"},
            "data": {"config": format!(r#"{{"agentImage":"{AGENT_IMAGE}","agentImagePullPolicy":"IfNotPresent","agentTLSMode":"system-store","apiServerURL":"https://fleet.example.com:6443"}}"#)},
        }))
        .expect("configmap");
        api.create(&PostParams::default(), &cm)
            .await
            .expect("fleet-controller");
    }

    /// The bootstrap Secret of Cluster `cluster` in [`NS`], if any.
    async fn bootstrap_secret(&self, cluster: &str) -> Option<Value> {
        let name = format!("{cluster}-fleet-agent-bootstrap");
        self.get(&resource("", "v1", "Secret", "secrets"), NS, &name)
            .await
    }

    fn writes(&self) -> usize {
        self.sandbox.requests().count(|r| r.verb.is_write())
    }
}

/// Calls a lifecycle hook for `cluster` with `ctx`, as Cluster API does.
async fn call_with(ctx: &HookContext, hook: Hook, cluster: &Value) -> Response {
    let body = json!({
        "apiVersion": "hooks.runtime.cluster.x-k8s.io/v1alpha1",
        "kind": hook.request_kind(),
        "settings": {},
        "cluster": cluster,
        "fromKubernetesVersion": "v1.33.1",
        "toKubernetesVersion": "v1.34.0",
    });
    let bytes = serde_json::to_vec(&body).expect("json");
    handlers::handle(ctx, hook, &bytes).await
}

/// The registration values the played Fleet writes into a token's Secret (Fleet 0.13's keys:
/// no `tokenName`, which Fleet writes from 0.16.0).
const TOKEN_VALUES: &str = "clusterNamespace: team-a\napiServerURL: https://fleet.example.com:6443\napiServerCA: |\n  -----BEGIN CERTIFICATE-----\n  MIIB\n  -----END CERTIFICATE-----\ntoken: sa-token-value\nsystemRegistrationNamespace: cattle-fleet-clusters-system\n";

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

        // Fleet is not installed yet (no fleet-controller ConfigMap): retry, and nothing is
        // prepared before the hook knows which Fleet it prepares for.
        env.sandbox.requests().reset();
        assert_retry(
            &env.call(Hook::BeforeClusterCreate, &cluster).await,
            "ConfigMap cattle-fleet-system/fleet-controller",
        );
        assert_eq!(env.writes(), 0, "{:?}", env.sandbox.requests().all());
        env.install_fleet().await;

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

        // The test plays Fleet: status and Secret.
        env.issue_token("c1").await;
        let done = env.call(Hook::BeforeClusterCreate, &cluster).await;
        assert_success(&done);
        assert!(
            done.message
                .contains("bootstrap Secret team-a/c1-fleet-agent-bootstrap"),
            "{}",
            done.message
        );

        let secret = env.bootstrap_secret("c1").await.expect("bootstrap secret");
        assert_eq!(
            secret["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"],
            "c1"
        );
        assert_eq!(secret["metadata"]["ownerReferences"][0]["kind"], "Cluster");
        let manifest = secret_text(&secret, SCRIPT_KEY);
        assert!(manifest.contains(&id), "the manifest carries the client ID");
        assert!(manifest.contains(AGENT_IMAGE));
        // Fleet 0.12+'s agent: one container running `fleetagent`, nothing else.
        let deployment = bootstrap_objects(&secret)
            .into_iter()
            .find(|o| o["kind"] == "Deployment")
            .expect("Deployment");
        let pod = &deployment["spec"]["template"]["spec"];
        assert!(pod.get("initContainers").is_none(), "{pod}");
        assert_eq!(pod["containers"].as_array().map(Vec::len), Some(1));
        assert_eq!(pod["containers"][0]["name"], "fleet-agent");
        assert_eq!(pod["containers"][0]["command"], json!(["fleetagent"]));
        // The boot script, plain (Ignition) and gzip+base64 (cloud-init); what it holds and
        // which token it was rendered from, for GeneratePatches and the import controller.
        assert_eq!(
            secret["data"]
                .as_object()
                .map(|d| d.keys().cloned().collect::<Vec<_>>()),
            Some(vec![SCRIPT_KEY.to_string(), SCRIPT_GZIP_KEY.to_string()])
        );
        assert_eq!(
            secret["metadata"]["annotations"]["fleet.addons.cluster.x-k8s.io/bootstrap-format"],
            "2"
        );
        let token_uid =
            env.get(&token(), NS, "c1").await.expect("token")["metadata"]["uid"].clone();
        assert_eq!(
            secret["metadata"]["annotations"]["fleet.addons.cluster.x-k8s.io/registration-token-uid"],
            token_uid
        );

        // A second call creates nothing and writes nothing; the client ID is unchanged.
        env.sandbox.requests().reset();
        assert_success(&env.call(Hook::BeforeClusterCreate, &cluster).await);
        assert_eq!(env.writes(), 0, "{:?}", env.sandbox.requests().all());
        let fleet = env
            .get(&fleet_cluster(), NS, "c1")
            .await
            .expect("Fleet Cluster");
        assert_eq!(client_id(&fleet), id);

        // Once the Cluster has moved into itself (docs/self-managed.md), deleting the source
        // copy touches none of them: they serve the self-managed cluster.
        let mut moved = cluster.clone();
        moved["metadata"]["annotations"] = json!({
            caapf::model::move_state::MOVE_STATE_ANNOTATION: r#"{"phase":"Moved","since":1}"#,
        });
        env.sandbox.requests().reset();
        assert_success(&env.call(Hook::BeforeClusterDelete, &moved).await);
        assert_eq!(env.writes(), 0, "{:?}", env.sandbox.requests().all());
        assert!(env.bootstrap_secret("c1").await.is_some());
        assert!(env.get(&token(), NS, "c1").await.is_some());
        assert!(env.get(&fleet_cluster(), NS, "c1").await.is_some());

        // BeforeClusterDelete removes the Secret, the token and the owned Fleet Cluster.
        let deleted = env.call(Hook::BeforeClusterDelete, &cluster).await;
        assert_success(&deleted);
        assert!(env.bootstrap_secret("c1").await.is_none());
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
    let secret = env.bootstrap_secret("c2").await.expect("bootstrap secret");
    assert!(secret_text(&secret, SCRIPT_KEY).contains("kept-forever"));

    assert_success(&env.call(Hook::BeforeClusterDelete, &cluster).await);
    assert!(env.get(&token(), NS, "c2").await.is_none());
    assert!(
        env.get(&fleet_cluster(), NS, "c2").await.is_some(),
        "a Fleet Cluster the CAPI Cluster does not own is kept"
    );
}

impl Env {
    async fn issue_token_later_and_finish(&self, cluster: &Value, name: &str) {
        self.install_fleet().await;
        assert_retry(
            &self.call(Hook::BeforeClusterCreate, cluster).await,
            "ClusterRegistrationToken",
        );
        self.issue_token(name).await;
        assert_success(&self.call(Hook::BeforeClusterCreate, cluster).await);
    }
}

#[tokio::test]
async fn the_bootstrap_makes_imported_clusters_agent_initiated_and_holds_no_other() {
    let env = Env::start(Some(
        "cluster: {namespaceSelector: {matchLabels: {fleet: \"yes\"}}, agentInitiatedSelector: {matchLabels: {nat: \"true\"}}}",
    ))
    .await;
    // A class without this extension (no fleetAgent variable): Success, no request at all.
    let plain = env.plain_cluster("plain").await;
    env.sandbox.requests().reset();
    let response = env.call(Hook::BeforeClusterCreate, &plain).await;
    assert_success(&response);
    assert!(
        response.message.contains("no fleetAgent variable"),
        "{}",
        response.message
    );
    assert_eq!(env.sandbox.requests().all().len(), 0);

    // The bootstrap asks for agent-initiated registration even though the configuration says
    // manager-initiated for this Cluster: prepared and marked for the import controller.
    env.install_fleet().await;
    let booted = env
        .capi_cluster("booted", json!({}), "fleet-class", true)
        .await;
    assert_retry(
        &env.call(Hook::BeforeClusterCreate, &booted).await,
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

    // fleetAgent.enabled=false: nothing read, nothing written.
    let mut disabled = env
        .capi_cluster("disabled", json!({}), "fleet-class", false)
        .await;
    disabled["spec"]["topology"]["variables"] =
        json!([{"name": "fleetAgent", "value": {"enabled": false}}]);
    env.sandbox.requests().reset();
    assert_success(&env.call(Hook::BeforeClusterCreate, &disabled).await);
    assert_eq!(env.sandbox.requests().all().len(), 0);

    // A control-plane override true under a Cluster-level false: the control plane is patched,
    // so the Secret is prepared.
    let mut overridden = disabled.clone();
    overridden["metadata"]["name"] = json!("overridden");
    overridden["spec"]["topology"]["controlPlane"]["variables"] =
        json!({"overrides": [{"name": "fleetAgent", "value": {"enabled": true}}]});
    assert_retry(
        &env.call(Hook::BeforeClusterCreate, &overridden).await,
        "ClusterRegistrationToken team-a/overridden",
    );

    // Not imported (namespace not selected): Success without a Secret; GeneratePatches then
    // leaves its templates alone, so its machines never wait for a Secret nobody writes.
    env.create_namespace("outside", json!({})).await;
    let outside = env
        .capi_cluster_in("outside", "lost", json!({}), "fleet-class", false)
        .await;
    env.sandbox.requests().reset();
    let answered = env.call(Hook::BeforeClusterCreate, &outside).await;
    assert_success(&answered);
    assert!(
        answered.message.contains("not selected"),
        "{}",
        answered.message
    );
    assert_eq!(env.writes(), 0);
}

/// A Cluster that does not use the bootstrap is answered Success with the API server gone and
/// with an invalid FleetAddonConfig; one that uses it is told to retry, never failed.
#[tokio::test]
async fn outages_and_bad_configuration_never_fail_a_cluster() {
    let env = Env::start(None).await;
    let plain = env.plain_cluster("plain").await;
    let mut disabled = env
        .capi_cluster("disabled", json!({}), "fleet-class", false)
        .await;
    disabled["spec"]["topology"]["variables"] =
        json!([{"name": "fleetAgent", "value": {"enabled": false}}]);
    let enabled = env
        .capi_cluster("enabled", json!({}), "fleet-class", false)
        .await;

    // An invalid regex in spec.cluster.
    let invalid: caapf::api::FleetAddonConfigSpec =
        serde_yaml::from_str("cluster: {namespaceRegexes: [\"team-(\"]}").expect("spec");
    let config = EffectiveConfig::from_spec(&invalid);
    assert!(!config.problems.is_empty());
    env._config.send_replace(Some(Arc::new(config)));
    for cluster in [&plain, &disabled] {
        assert_success(&env.call(Hook::BeforeClusterCreate, cluster).await);
    }
    assert_retry(
        &env.call(Hook::BeforeClusterCreate, &enabled).await,
        "spec.cluster",
    );

    // The API server is gone.
    env._config
        .send_replace(Some(Arc::new(EffectiveConfig::default())));
    let Env {
        sandbox,
        ctx,
        _config,
        ..
    } = env;
    sandbox.shutdown().await;
    for cluster in [&plain, &disabled] {
        assert_success(&call_with(&ctx, Hook::BeforeClusterCreate, cluster).await);
        // Defect 9 of issue #29: nothing of ours to clean up, so no error of ours holds it.
        assert_success(&call_with(&ctx, Hook::BeforeClusterDelete, cluster).await);
    }
    for hook in [
        Hook::BeforeClusterCreate,
        Hook::BeforeClusterDelete,
        Hook::BeforeClusterUpgrade,
    ] {
        let response = call_with(&ctx, hook, &enabled).await;
        if hook == Hook::BeforeClusterUpgrade {
            // Not configured to hold upgrades: nothing to read.
            assert_success(&response);
        } else {
            assert_eq!(
                response.status,
                ResponseStatus::Success,
                "{hook:?}: {response:?}"
            );
            assert!(retry_after(&response) > 0, "{hook:?}: {response:?}");
        }
    }
}

/// Defect 9 of issue #29: BeforeClusterDelete answers a Cluster the hooks prepared nothing for
/// (its class does not use the bootstrap, or disables it; its workloads are not removed first)
/// from the request alone, without one request to the API server; a Cluster whose class uses
/// the bootstrap is cleaned up as before.
#[tokio::test]
async fn before_cluster_delete_reads_nothing_for_clusters_it_prepared_nothing_for() {
    let env = Env::start(Some("cluster: {}")).await;
    let plain = env.plain_cluster("plain").await;
    let mut disabled = env
        .capi_cluster("disabled", json!({}), "fleet-class", true)
        .await;
    disabled["spec"]["topology"]["variables"] =
        json!([{"name": "fleetAgent", "value": {"enabled": false}}]);
    let enabled = env
        .capi_cluster("enabled", json!({}), "fleet-class", false)
        .await;
    for cluster in [&plain, &disabled] {
        env.sandbox.requests().reset();
        let answer = env.call(Hook::BeforeClusterDelete, cluster).await;
        assert_success(&answer);
        assert!(
            answer.message.starts_with("nothing to clean up"),
            "{answer:?}"
        );
        assert_eq!(
            env.sandbox.requests().count(|_| true),
            0,
            "{:?}",
            env.sandbox.requests().all()
        );
    }
    env.sandbox.requests().reset();
    assert_success(&env.call(Hook::BeforeClusterDelete, &enabled).await);
    assert!(
        env.sandbox.requests().count(|_| true) > 0,
        "the bootstrap's objects are looked for"
    );
}

/// A Cluster created before its class used the bootstrap (it never went through
/// BeforeClusterCreate): GeneratePatches leaves its control plane alone while the Secret does
/// not exist, prepares it in the background, and patches once it exists.
#[tokio::test]
async fn a_cluster_that_never_went_through_before_cluster_create_gets_a_working_bootstrap() {
    let env = Env::start(Some("cluster: {}")).await;
    env.install_fleet().await;
    env.capi_cluster("old", json!({}), "fleet-class", false)
        .await;
    let request = generate_patches_request("old");
    let first = env.call_raw(Hook::GeneratePatches, &request).await;
    assert_eq!(first.status, ResponseStatus::Success, "{first:?}");
    assert_eq!(patch_len(&first), 0, "no Secret yet: no patch");
    // The background preparation created the Fleet Cluster and the token; the test plays Fleet.
    common::eventually("the token of Cluster old", || async {
        env.get(&token(), NS, "old").await
    })
    .await;
    env.issue_token("old").await;
    let patched = common::eventually("a patch naming the bootstrap Secret", || async {
        let response = env.call_raw(Hook::GeneratePatches, &request).await;
        (patch_len(&response) > 0).then_some(response)
    })
    .await;
    assert_eq!(patched.status, ResponseStatus::Success);
    let secret = env
        .bootstrap_secret("old")
        .await
        .expect("the Secret the patch names exists");
    assert!(
        bootstrap_objects(&secret)
            .iter()
            .any(|o| o["kind"] == "Deployment")
    );
    // The same answer every time from now on.
    assert_eq!(
        serde_json::to_value(env.call_raw(Hook::GeneratePatches, &request).await).expect("json"),
        serde_json::to_value(&patched).expect("json")
    );
    // With the API server gone the hook cannot tell: a Failure (CAPI keeps the templates),
    // never an answer without the patch.
    let Env { sandbox, ctx, .. } = env;
    sandbox.shutdown().await;
    let bytes = serde_json::to_vec(&request).expect("json");
    let down = handlers::handle(&ctx, Hook::GeneratePatches, &bytes).await;
    assert_eq!(down.status, ResponseStatus::Failure, "{down:?}");
}

/// How many JSON patch operations the first patch of a GeneratePatches answer holds.
fn patch_len(response: &Response) -> usize {
    let ResponseBody::Patches { items } = &response.body else {
        panic!("{response:?}");
    };
    let bytes = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, &items[0].patch)
        .expect("base64");
    serde_json::from_slice::<Vec<Value>>(&bytes)
        .expect("patch")
        .len()
}

fn generate_patches_request(cluster: &str) -> Value {
    let template: Value = serde_yaml::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/templates/kubeadmcontrolplanetemplate-v1beta2.yaml"),
        )
        .expect("fixture"),
    )
    .expect("yaml");
    json!({
        "apiVersion": "hooks.runtime.cluster.x-k8s.io/v1alpha1",
        "kind": "GeneratePatchesRequest",
        "variables": [
            {"name": "builtin", "value": {"cluster": {"name": cluster, "namespace": NS}}},
            {"name": "fleetAgent", "value": {"enabled": true}}
        ],
        "items": [{"uid": "cp", "holderReference": {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "namespace": NS, "name": cluster, "fieldPath": "spec.controlPlaneRef"}, "object": template}]
    })
}

/// The agent objects a bootstrap Secret's boot script carries.
fn bootstrap_objects(secret: &Value) -> Vec<Value> {
    script_objects(&secret_text(secret, SCRIPT_KEY)).expect("boot script")
}

fn documents(yaml: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(yaml)
        .map(|doc| <Value as serde::Deserialize>::deserialize(doc).expect("yaml"))
        .filter(|doc| !doc.is_null())
        .collect()
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

/// The agent objects the hooks write are accepted by the API server, in order, and the agent
/// pod is admitted under Cluster API's quick-start Pod Security configuration (what they are is
/// pinned against Fleet's own agent by `the_agent_is_what_fleet_deploys_at_every_supported_minor`).
#[tokio::test]
async fn the_agent_is_accepted_by_the_api_server_and_pod_security() {
    let env = Env::start(Some("cluster: {agentInitiated: true, hostNetwork: true}")).await;
    let cluster = env
        .capi_cluster("c4", json!({}), "quick-start", false)
        .await;
    env.issue_token_later_and_finish(&cluster, "c4").await;
    let secret = env.bootstrap_secret("c4").await.expect("bootstrap secret");
    let ours = bootstrap_objects(&secret);
    assert_eq!(ours[0]["kind"], "Namespace");
    assert_eq!(ours[0]["metadata"]["name"], "fleet-addon-agent");
    assert!(
        !ours.iter().any(|o| o["kind"] == "Job"),
        "hooks are not rendered"
    );

    // Accepted by the API server, in order.
    let discovery = Discovery::new(env.client()).run().await.expect("discovery");
    let mut created = BTreeMap::new();
    for value in &ours {
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
            .unwrap_or_else(|e| panic!("{} {:?} rejected: {e}", types.kind, object.metadata.name));
        *created.entry(types.kind.clone()).or_insert(0) += 1;
    }
    assert_eq!(
        created.keys().cloned().collect::<Vec<_>>(),
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",
            "Deployment",
            "Namespace",
            "NetworkPolicy",
            "Secret",
            "ServiceAccount"
        ]
    );

    // Pod Security as Cluster API's quick-start ClusterClass configures it (kubernetes-sigs/
    // cluster-api v1.11.0 test/infrastructure/docker/templates/clusterclass-quick-start.yaml:
    // enforce baseline, kube-system exempt). Host network needs the namespace label.
    let admission = Admission::from_configuration(&json!({
        "apiVersion": "pod-security.admission.config.k8s.io/v1", "kind": "PodSecurityConfiguration",
        "defaults": {"enforce": "baseline", "enforce-version": "latest", "audit": "restricted", "warn": "restricted"},
        "exemptions": {"usernames": [], "runtimeClasses": [], "namespaces": ["kube-system"]}
    }))
    .expect("admission");
    let labels: BTreeMap<String, String> =
        serde_json::from_value(ours[0]["metadata"]["labels"].clone()).expect("labels");
    let pod = &ours
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("Deployment")["spec"]["template"]["spec"];
    assert_eq!(admission.admits("fleet-addon-agent", &labels, pod), Ok(()));
    assert!(
        admission
            .admits("fleet-addon-agent", &BTreeMap::new(), pod)
            .is_err(),
        "without the label, baseline refuses the host-network agent"
    );
}

/// What the bootstrap deliberately does differently from Fleet's own agent bundle, object by
/// object (docs/runtime-extension.md, "What differs from the agent Fleet deploys"): objects only
/// the bootstrap creates, and objects only Fleet's bundle has.
const BOOTSTRAP_ONLY: [(&str, &str); 3] = [
    // Fleet's bundle has no Namespace (Helm creates it at takeover); ours carries the Pod
    // Security label.
    ("Namespace", "fleet-addon-agent"),
    // The agent registers with these (Fleet's chart renders them; the agent deletes the Secret
    // once registered).
    ("ConfigMap", "fleet-agent"),
    ("Secret", "fleet-agent-bootstrap"),
];
const FLEET_ONLY: [(&str, &str); 1] = [
    // Kubernetes creates `default` in every namespace, so `kubectl create` cannot set its
    // automountServiceAccountToken: false; Fleet's takeover does.
    ("ServiceAccount", "default"),
];

/// The Fleet Cluster and fleet-controller configuration the fixtures of
/// `tests/fixtures/fleet-agent-bundle/` were derived for, at Fleet `version`.
fn fleet_agent_bundle_input(version: &str) -> BootstrapInput {
    let v016 = version.starts_with("0.16.");
    let mut config = json!({
        "systemDefaultRegistry": "mirror.example/",
        "agentImage": format!("mirror.example/rancher/fleet-agent:v{version}"),
        "agentImagePullPolicy": "IfNotPresent",
        "apiServerURL": "https://fleet.example.com:6443",
        "apiServerCA": "",
        "agentCheckinInterval": "15m",
        "agentTLSMode": "system-store",
        "agentWorkers": {"bundledeployment": "50", "drift": "50"},
    });
    if v016 {
        // charts/fleet writes imagePullSecrets into the configuration from v0.16.0.
        config["imagePullSecrets"] = json!([{"name": "fleet-pull"}]);
    }
    let token_values = if v016 {
        format!("{TOKEN_VALUES}tokenName: c1\n")
    } else {
        TOKEN_VALUES.to_string()
    };
    let spec = json!({
        "agentNamespace": "fleet-addon-agent",
        "hostNetwork": true,
        "privateRepoURL": "registry.example.com:5000",
        "agentTolerations": serde_json::to_value(caapf::model::config::default_agent_tolerations()).expect("json"),
        "agentEnvVars": [
            {"name": "HTTPS_PROXY", "value": "http://proxy.example.com:3128"},
            {"name": "NO_PROXY", "value": ".svc,.cluster.local"}
        ],
        "agentResources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
    });
    BootstrapInput {
        token: TokenValues::parse(&token_values).expect("token values"),
        client_id: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef".into(),
        agent: FleetClusterAgent::from_fleet_cluster_spec(&spec),
        fleet: FleetAgentDefaults::from_controller_config(&config.to_string()).expect("config"),
        version: FleetVersion::parse(version).expect("version"),
        pull_secrets: Vec::new(),
    }
}

/// The agent the bootstrap renders from Fleet's `fleet-agent` chart (the test double at that
/// version, with the real helm) is what Fleet's own agent bundle deploys for the same Fleet
/// Cluster at every supported minor (hand-derived fixtures of `manifest.go` at the latest tag of
/// each; 0.12.0 too, whose chart still has a hook Job), but for [`BOOTSTRAP_ONLY`] and
/// [`FLEET_ONLY`]. Issue #29 defect 1: before, the agent ran without `AGENT_SCOPE` and
/// `CHECKIN_INTERVAL`, with the chart's tolerations, RBAC names and environment.
/// `helm template` of the `fleet-agent` chart at `archive` with the values the hook computes for
/// `input`, without hooks, as the runtime extension renders it.
fn render_agent_chart(
    home: &std::path::Path,
    archive: &std::path::Path,
    input: &BootstrapInput,
) -> String {
    let values = chart_values(input).expect("values");
    let values_file = tempfile::NamedTempFile::new().expect("values file");
    std::fs::write(
        values_file.path(),
        serde_json::to_vec(&values).expect("json"),
    )
    .expect("write");
    fleet_common::helm(
        home,
        None,
        &[
            "template",
            "fleet-agent",
            archive.to_str().expect("path"),
            "--namespace",
            "fleet-addon-agent",
            "--no-hooks",
            "--values",
            values_file.path().to_str().expect("path"),
        ],
    )
}

#[test]
fn the_agent_is_what_fleet_deploys_at_every_supported_minor() {
    let home = tempfile::tempdir().expect("helm home");
    for (minor, version) in [
        ("0.12", "0.12.0"),
        ("0.12", "0.12.19"),
        ("0.13", "0.13.15"),
        ("0.14", "0.14.10"),
        ("0.15", "0.15.6"),
        ("0.16", "0.16.1"),
    ] {
        let input = fleet_agent_bundle_input(version);
        let archive = fleet_common::package_agent_chart(version);
        let rendered = render_agent_chart(home.path(), &archive, &input);
        let ours = finish(&rendered, &input).expect("finished");
        let fixture = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join(format!("tests/fixtures/fleet-agent-bundle/v{minor}.yaml")),
        )
        .expect("fixture");
        // manifest.go is the same at every 0.12 tag (git diff v0.12.0 v0.12.19): only the image
        // tag differs.
        let fixture = fixture.replace("fleet-agent:v0.12.19", &format!("fleet-agent:v{version}"));
        let fleet = documents(&fixture);
        let key = |o: &Value| {
            (
                o["kind"].as_str().unwrap_or_default().to_string(),
                o["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        };
        let listed = |list: &[(&str, &str)], (kind, name): &(String, String)| {
            list.iter().any(|(k, n)| k == kind && n == name)
        };
        for theirs in &fleet {
            let k = key(theirs);
            match ours.iter().find(|o| key(o) == k) {
                Some(mine) => assert_eq!(mine, theirs, "Fleet {version}: {k:?} differs"),
                None => assert!(
                    listed(&FLEET_ONLY, &k),
                    "Fleet {version}: {k:?} is missing from the bootstrap"
                ),
            }
        }
        for mine in &ours {
            let k = key(mine);
            assert!(
                fleet.iter().any(|o| key(o) == k) || listed(&BOOTSTRAP_ONLY, &k),
                "Fleet {version}: the bootstrap has {k:?}, which Fleet does not deploy"
            );
        }
        assert_eq!(ours[0]["kind"], "Namespace", "created first");
        assert_eq!(ours.last().map(|o| &o["kind"]), Some(&json!("Deployment")));
    }
}

/// `templateYAMLIndent` of cluster-api v1.11 `bootstrap/kubeadm/internal/cloudinit/utils.go`
/// (CAPRKE2 v0.25.0 has the same): every line of `text` indented by `spaces`.
fn indent(spaces: usize, text: &str) -> String {
    let pad = " ".repeat(spaces);
    format!(
        "{pad}{}",
        text.split('\n')
            .collect::<Vec<_>>()
            .join(&format!("\n{pad}"))
    )
}

/// RFC 2397 escaping as `github.com/vincent-petithory/dataurl` `EscapeString` does it (what
/// Flatcar's container-linux-config-transpiler uses for inline file contents).
fn data_url_escape(text: &[u8]) -> String {
    text.iter()
        .map(|&b| {
            if b.is_ascii_alphanumeric() || b"-_.!~*'()".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The user data the bootstrap adds to a control-plane machine, per template kind, rendered the
/// way the bootstrap providers render a `files` entry and a post command (issue #29, defect 4):
/// - cloud-init: cluster-api v1.11 `bootstrap/kubeadm/internal/cloudinit/files.go`
///   `filesTemplate` and `commands.go` `commandsTemplate` (a `%q`-quoted `runcmd` item); CAPRKE2
///   v0.25.0 `bootstrap/internal/cloudinit/cloudinit.go` has the same two templates (no `append`);
/// - kubeadm Ignition: `bootstrap/kubeadm/internal/ignition/clc/clc.go` puts the file and the
///   command (a line of `/etc/kubeadm.sh`) into a Container Linux Config, which the
///   container-linux-config-transpiler turns into Ignition 2.3 JSON with `data:,` URLs escaped by
///   `dataurl.EscapeString`: the script's escaped text plus a file entry;
/// - RKE2 Ignition: `bootstrap/internal/ignition/butane/butane.go` does the same with Butane
///   (coreos/butane v0.28.0 `base/util/url.go` `MakeDataURL` picks the smallest of URL-escaped,
///   base64 and gzip+base64): the smallest encoding plus a file entry, and the escaped command.
///
/// The Ignition figures approximate the JSON entry's fields; the contents are exact.
fn added_user_data(files: &BTreeMap<String, String>) -> Vec<(&'static str, usize)> {
    let packed = &files[SCRIPT_GZIP_KEY];
    let plain = &files[SCRIPT_KEY];
    let cloud_init = |template: Template| {
        let entry = format!(
            "\n-   path: {SCRIPT_PATH}\n    encoding: \"gzip+base64\"\n    permissions: '0600'\n    content: |\n{}",
            indent(6, packed)
        );
        let command = format!("\n  - \"{}\"", boot_command(template));
        entry.len() + command.len()
    };
    let kubeadm_ignition = {
        let entry = json!({"filesystem": "root", "path": SCRIPT_PATH, "mode": 384,
            "contents": {"source": format!("data:,{}", data_url_escape(plain.as_bytes())), "verification": {}}});
        let command = data_url_escape(
            format!("{}\n", boot_command(Template::KubeadmControlPlane)).as_bytes(),
        );
        entry.to_string().len() + 1 + command.len()
    };
    let rke2_ignition = {
        let escaped = format!(",{}", data_url_escape(plain.as_bytes()));
        let base64 = format!(
            ";base64,{}",
            base64::Engine::encode(&base64::engine::general_purpose::STANDARD, plain)
        );
        let gzip = format!(";base64,{packed}");
        let (source, compression) = [(escaped, None), (base64, None), (gzip, Some("gzip"))]
            .into_iter()
            .min_by_key(|(s, c)| s.len() + c.map_or(0, str::len))
            .expect("three");
        let mut contents = json!({"source": format!("data:{source}")});
        if let Some(compression) = compression {
            contents["compression"] = json!(compression);
        }
        let entry =
            json!({"path": SCRIPT_PATH, "mode": 384, "overwrite": true, "contents": contents});
        let command =
            data_url_escape(format!("{}\n", boot_command(Template::Rke2ControlPlane)).as_bytes());
        entry.to_string().len() + 1 + command.len()
    };
    vec![
        (
            "kubeadm cloud-init",
            cloud_init(Template::KubeadmControlPlane),
        ),
        ("kubeadm Ignition", kubeadm_ignition),
        ("RKE2 cloud-init", cloud_init(Template::Rke2ControlPlane)),
        ("RKE2 Ignition", rke2_ignition),
    ]
}

/// What the bootstrap adds to a control-plane machine's user data, per template kind (issue #29,
/// defect 4: the plain manifest in `write_files` added about 7.9 KB), with Fleet 0.16.1's agent,
/// this provider's default agent settings and real-shaped registration values: a ServiceAccount
/// token and a 2048-bit RSA CA, or an ECDSA P-256 CA (`tests/fixtures/fleet/registration-values-*`).
/// Prints the figures docs/runtime-extension.md quotes, and holds them: the goal of 3 KB is met
/// only by everything but the token and the CA (see the docs).
#[test]
fn what_the_bootstrap_adds_to_a_control_plane_machine_s_user_data() {
    let import = EffectiveConfig::default().cluster.expect("import");
    let spec = json!({
        "agentNamespace": import.agent.agent_namespace,
        "agentTolerations": serde_json::to_value(&import.agent.agent_tolerations).expect("json"),
        "hostNetwork": import.agent.host_network,
    });
    let archive = fleet_common::package_agent_chart("0.16.1");
    let home = tempfile::tempdir().expect("home");
    // (fixture, at most for cloud-init, at most for kubeadm Ignition)
    for (fixture, cloud_init_bound, ignition_bound) in [
        ("registration-values-rsa2048.yaml", 4_500, 10_500),
        ("registration-values-ecdsa.yaml", 3_950, 9_800),
    ] {
        let values = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/fleet")
                .join(fixture),
        )
        .expect("fixture");
        let input = BootstrapInput {
            token: TokenValues::parse(&values).expect("values"),
            client_id: "4b2f0c6d3e8a1f5b7c9d0e2f4a6b8c1d3e5f7a9b0c2d4e6f8a1b3c5d7e9f0a2b".into(),
            agent: FleetClusterAgent::from_fleet_cluster_spec(&spec),
            fleet: FleetAgentDefaults::from_controller_config(
                r#"{"systemDefaultRegistry":"","agentImage":"rancher/fleet-agent:v0.16.1","agentImagePullPolicy":"IfNotPresent",
                    "agentCheckinInterval":"15m","agentTLSMode":"system-store","agentWorkers":{"bundledeployment":"50","drift":"50"}}"#,
            )
            .expect("config"),
            version: FleetVersion::parse("0.16.1").expect("version"),
            pull_secrets: Vec::new(),
        };
        let rendered = render_agent_chart(home.path(), &archive, &input);
        let objects = finish(&rendered, &input).expect("finished");
        let files = caapf::model::boot_script::bootstrap_files(&objects).expect("files");
        if let Ok(dir) = std::env::var("CAAPF_DUMP_BOOT_SCRIPT") {
            std::fs::write(std::path::Path::new(&dir).join(fixture), &files[SCRIPT_KEY])
                .expect("dump");
        }
        // What an earlier release added: the plain manifest, indented, and its command.
        let manifest = caapf::model::boot_script::script_objects(&files[SCRIPT_KEY])
            .expect("objects")
            .iter()
            .map(|o| format!("---\n{}", serde_yaml::to_string(o).expect("yaml")))
            .collect::<String>();
        let before = format!(
            "\n-   path: /etc/caapf/fleet-agent.yaml\n    owner: root:root\n    permissions: '0600'\n    content: |\n{}\n  - \"{}\"",
            indent(6, &manifest),
            caapf::model::agent_patch::legacy_command(Template::KubeadmControlPlane).replace('"', "\\\"")
        )
        .len();
        let figures = added_user_data(&files);
        eprintln!(
            "{fixture}: boot script {} B plain, {} B gzip+base64; added user data {figures:?}; an earlier release added {before} B (kubeadm cloud-init)",
            files[SCRIPT_KEY].len(),
            files[SCRIPT_GZIP_KEY].len(),
        );
        for (kind, bytes) in &figures {
            let bound = match *kind {
                "kubeadm Ignition" => ignition_bound,
                _ => cloud_init_bound,
            };
            assert!(*bytes <= bound, "{fixture}: {kind}: {bytes} B > {bound} B");
        }
        assert!(
            figures[0].1 * 100 <= before * 60,
            "{fixture}: at most 60% of what it was"
        );
    }
}

/// The supported Fleet releases differ in their `fleet-agent` chart: in 0.12.0–0.12.2 a hook Job
/// (not rendered), from 0.16.0 `tokenName` required (Fleet 0.16 writes it into the token values;
/// a value set without it is refused by the chart, and the hook says so and retries).
#[tokio::test]
async fn the_chart_of_the_installed_fleet_version_is_rendered() {
    let env = Env::start(Some("cluster: {agentInitiated: true}")).await;
    env.charts.add_agent_version("0.16.1");
    // The provider installed Fleet 0.16.1: status.installedVersion picks the chart.
    env.create_addon_config().await;
    env.set_installed_version("0.16.1").await;
    let cluster = env
        .capi_cluster("c6", json!({}), "quick-start", false)
        .await;
    env.install_fleet().await;
    assert_retry(
        &env.call(Hook::BeforeClusterCreate, &cluster).await,
        "ClusterRegistrationToken",
    );
    env.issue_token("c6").await;
    // Fleet 0.13-style values (no tokenName) against the 0.16 chart: refused, retried.
    let refused = env.call(Hook::BeforeClusterCreate, &cluster).await;
    assert_retry(&refused, "tokenName is required");
    assert!(
        refused.message.contains("fleet-agent chart 0.16.1"),
        "{}",
        refused.message
    );
    // Fleet 0.16 writes tokenName.
    let secrets: Api<Secret> = Api::namespaced(env.client(), NS);
    secrets
        .patch(
            "c6",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"values": base64::Engine::encode(
                &base64::engine::general_purpose::STANDARD,
                format!("{TOKEN_VALUES}tokenName: c6\n"),
            )}})),
        )
        .await
        .expect("values");
    let done = env.call(Hook::BeforeClusterCreate, &cluster).await;
    assert_success(&done);
    assert!(
        done.message.contains("fleet-agent chart 0.16.1"),
        "{}",
        done.message
    );
    let secret = env.bootstrap_secret("c6").await.expect("bootstrap secret");
    let objects = bootstrap_objects(&secret);
    let bootstrap = objects
        .iter()
        .find(|o| o["kind"] == "Secret")
        .expect("fleet-agent-bootstrap");
    assert_eq!(bootstrap["stringData"]["tokenName"], "c6");

    // 0.12.0–0.12.2: the hook Job patching the default ServiceAccount is not rendered.
    env.charts.add_agent_version("0.12.0");
    let before = env
        .capi_cluster("c7", json!({}), "quick-start", false)
        .await;
    env.set_installed_version("0.12.0").await;
    assert_retry(
        &env.call(Hook::BeforeClusterCreate, &before).await,
        "ClusterRegistrationToken",
    );
    env.issue_token("c7").await;
    assert_success(&env.call(Hook::BeforeClusterCreate, &before).await);
    let secret = env.bootstrap_secret("c7").await.expect("bootstrap secret");
    let objects = bootstrap_objects(&secret);
    assert!(!objects.iter().any(|o| o["kind"] == "Job"));
    assert!(objects.iter().any(|o| o["kind"] == "Deployment"));
}

/// Fleet 0.11 (a StatefulSet agent the bootstrap does not render): BeforeClusterCreate answers
/// Success naming the version, records a Warning Event on the Cluster, and prepares nothing, so
/// the Cluster is created without the bootstrap (issue #29 defect 8: it used to retry forever).
#[tokio::test]
async fn fleet_0_11_is_answered_with_success_an_event_and_nothing_prepared() {
    let env = Env::start(Some("cluster: {agentInitiated: true}")).await;
    env.install_fleet().await;
    env.create_addon_config().await;
    env.set_installed_version("0.11.14").await;
    let cluster = env
        .capi_cluster("old-fleet", json!({}), "quick-start", false)
        .await;
    let answer = env.call(Hook::BeforeClusterCreate, &cluster).await;
    assert_success(&answer);
    assert!(
        answer.message.contains("Fleet 0.11.14") && answer.message.contains("0.12"),
        "{}",
        answer.message
    );
    assert!(env.get(&fleet_cluster(), NS, "old-fleet").await.is_none());
    assert!(env.get(&token(), NS, "old-fleet").await.is_none());
    assert!(env.bootstrap_secret("old-fleet").await.is_none());
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(env.client(), NS);
    let listed = common::eventually("the Warning Event on the Cluster", || async {
        let list = events.list(&Default::default()).await.expect("events");
        list.items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("FleetVersionUnsupported"))
    })
    .await;
    assert_eq!(listed.type_.as_deref(), Some("Warning"));
    assert_eq!(
        listed.regarding.as_ref().and_then(|r| r.kind.as_deref()),
        Some("Cluster")
    );
    assert_eq!(
        listed.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("old-fleet")
    );
    assert!(
        listed
            .note
            .as_deref()
            .unwrap_or_default()
            .contains("0.11.14")
    );

    // GeneratePatches changes nothing for it (no Secret).
    let request = generate_patches_request("old-fleet");
    assert_eq!(
        patch_len(&env.call_raw(Hook::GeneratePatches, &request).await),
        0
    );
}

/// Golden request/response pairs in `tests/fixtures/hooks/`, answered through the server's
/// request path (routing, method, limits, decoding, handlers). `UPDATE_GOLDEN=1` rewrites the
/// expected responses (review the diff).
#[tokio::test]
async fn golden_requests_and_responses() {
    let sandbox = Sandbox::start().await;
    // The bootstrap Secret of Cluster team-a/dev-2 exists (BeforeClusterCreate wrote it), so
    // its control-plane templates get the patch.
    Api::<Namespace>::all(sandbox.client())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "team-a"}})).expect("namespace"),
        )
        .await
        .expect("namespace");
    let bootstrap_secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "dev-2-fleet-agent-bootstrap",
            "annotations": {"fleet.addons.cluster.x-k8s.io/bootstrap-format": "2"}},
        "stringData": {SCRIPT_KEY: "#!/bin/sh\n", SCRIPT_GZIP_KEY: "H4sIAAAAAAACA1NW1E/KzNMvzuACAB2d+wQKAAAA"}}))
    .expect("secret");
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
        let (ctx, _tx) = common::hook_context(sandbox.client(), config);
        // Before every case: the BeforeClusterDelete cases delete it.
        let _ = Api::<Secret>::namespaced(sandbox.client(), "team-a")
            .create(&PostParams::default(), &bootstrap_secret)
            .await;
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
    let (ctx, _tx) = common::hook_context(sandbox.client(), EffectiveConfig::default());
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

/// At steady state (the bootstrap Secret exists) GeneratePatches and BeforeClusterCreate answer
/// from the watch of bootstrap Secrets without a request to the API server; a Cluster without a
/// Secret costs one GET (a miss is confirmed live, never answered from the cache), and no hook
/// LISTs per request (the sandbox request log).
#[tokio::test]
async fn hooks_answer_from_the_bootstrap_secret_watch_without_listing() {
    use caapf::hooks::bootstrap_secrets::BootstrapSecrets;
    use kube_sandbox::Verb;

    let env = Env::start(Some(
        "cluster: {}\nruntimeExtension: {beforeClusterUpgrade: {waitForBundlesReady: true}}",
    ))
    .await;
    let cluster = env
        .capi_cluster("c1", json!({}), "quick-start", false)
        .await;
    env.capi_cluster("c2", json!({}), "quick-start", false)
        .await;
    let secrets: Api<Secret> = Api::namespaced(env.client(), NS);
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "c1-fleet-agent-bootstrap", "namespace": NS,
            "labels": {"cluster.x-k8s.io/cluster-name": "c1"}},
        // As an earlier release wrote it (no format annotation): its patch stays the earlier one.
        "stringData": {LEGACY_MANIFEST_KEY: "kind: Namespace\n"},
    }))
    .expect("secret");
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("bootstrap secret");

    let (view, feed) = BootstrapSecrets::new();
    let stop = CancellationToken::new();
    tokio::spawn(feed.run(env.client(), None, stop.clone()));
    let ctx = HookContext::new(
        Arc::new(env.ctx.base.with_shutdown(stop.clone())),
        view.clone(),
    );
    common::eventually("the watch knows the bootstrap Secret of c1", || async {
        view.known_present(NS, "c1").then_some(())
    })
    .await;

    let request = serde_json::to_vec(&generate_patches_request("c1")).expect("json");
    env.sandbox.requests().reset();
    for _ in 0..10 {
        let response = handlers::handle(&ctx, Hook::GeneratePatches, &request).await;
        assert!(patch_len(&response) > 0, "{response:?}");
        assert_success(&call_with(&ctx, Hook::BeforeClusterCreate, &cluster).await);
    }
    assert_eq!(
        env.sandbox.requests().all().len(),
        0,
        "answered from the watch: {:?}",
        env.sandbox.requests().all()
    );

    // No Secret for c2: the miss is confirmed by one GET per call, and nothing is listed.
    let request = serde_json::to_vec(&generate_patches_request("c2")).expect("json");
    env.sandbox.requests().reset();
    let response = handlers::handle(&ctx, Hook::GeneratePatches, &request).await;
    assert_eq!(patch_len(&response), 0, "{response:?}");
    let secret_gets = env.sandbox.requests().count(|r| {
        r.verb == Verb::Get && r.resource == "secrets" && r.name == "c2-fleet-agent-bootstrap"
    });
    assert_eq!(secret_gets, 1);

    // BeforeClusterUpgrade reads the Fleet Cluster by name, it does not list the namespace.
    env.sandbox.requests().reset();
    assert_success(&call_with(&ctx, Hook::BeforeClusterUpgrade, &cluster).await);
    let lists = env.sandbox.requests().count(|r| r.verb == Verb::List);
    assert_eq!(lists, 0, "{:?}", env.sandbox.requests().all());
    stop.cancel();
}

/// `apply::create_or_get` tells its own creation from someone else's object, and never
/// overwrites theirs (the hooks' and the import's "create, adopt on 409").
#[tokio::test]
async fn create_or_get_says_whether_it_created() {
    use caapf::apply::{CreateOrGet, create_or_get};
    let sandbox = Sandbox::start().await;
    let api: Api<ConfigMap> = Api::namespaced(sandbox.client(), "default");
    let object = |value: &str| -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": "one"}, "data": {"k": value}}))
            .expect("configmap")
    };
    let first = create_or_get(&api, &object("first"), "test")
        .await
        .expect("create");
    assert!(
        matches!(&first, CreateOrGet::Created(cm) if cm.data.as_ref().and_then(|d| d.get("k")).map(String::as_str) == Some("first")),
        "{first:?}"
    );
    let second = create_or_get(&api, &object("second"), "test")
        .await
        .expect("get");
    assert!(!second.created());
    let kept = second.into_object().expect("existing");
    assert_eq!(
        kept.data.and_then(|d| d.get("k").cloned()).as_deref(),
        Some("first")
    );
    // A 409 for an object that is gone by the read that follows: neither ours nor theirs.
    sandbox.set_faults(kube_sandbox::FaultConfig {
        rules: vec![kube_sandbox::FaultRule {
            target: kube_sandbox::FaultTarget::Writes,
            resource: Some("configmaps".to_string()),
            verbs: Some(vec!["POST".to_string()]),
            fraction: 1.0,
            code: Some(409),
            ..kube_sandbox::FaultRule::default()
        }],
        ..kube_sandbox::FaultConfig::default()
    });
    let mut absent = object("third");
    absent.metadata.name = Some("two".to_string());
    let vanished = create_or_get(&api, &absent, "test")
        .await
        .expect("no error");
    assert_eq!(vanished, CreateOrGet::Vanished);
}

/// A plan's create-or-get whose object was there at the create (409) and gone by the read is
/// not done: a hook answers "retry" naming it (as `create_or_get` of the hooks did before the
/// runner), never goes on as if the object (a bootstrap Secret) existed.
#[tokio::test]
async fn a_create_or_get_whose_object_vanished_is_a_retry() {
    use caapf::apply::Target;
    use caapf::model::hook_plan::HookOutcome;
    use caapf::model::plan::{Next, ObjectId, Plan, Write};
    let sandbox = Sandbox::start().await;
    let client = sandbox.client();
    sandbox.set_faults(kube_sandbox::FaultConfig {
        rules: vec![kube_sandbox::FaultRule {
            target: kube_sandbox::FaultTarget::Writes,
            resource: Some("secrets".to_string()),
            verbs: Some(vec!["POST".to_string()]),
            fraction: 1.0,
            code: Some(409),
            ..kube_sandbox::FaultRule::default()
        }],
        ..kube_sandbox::FaultConfig::default()
    });
    let recorder = kube::runtime::events::Recorder::new(client.clone(), "test".into());
    let target = Target {
        client: &client,
        recorder: &recorder,
        expectations: None,
    };
    let write = Write::CreateOrGet {
        object: ObjectId::of::<Secret>(Some("default"), "c1-fleet-bootstrap", None),
        body: json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "c1-fleet-bootstrap", "namespace": "default"}}),
        manager: "test",
    };
    let answer = target
        .answer(Plan::of(vec![write], Next::AwaitChange))
        .await;
    let Err(HookOutcome::Retry { message, .. }) = answer else {
        panic!("{answer:?}")
    };
    assert!(
        message.starts_with("creating Secret default/c1-fleet-bootstrap: ")
            && message.contains("deleted while we created it"),
        "{message}"
    );
}

/// A status apply to an object gone since it was observed is no error (nothing to report on);
/// to one never observed it is, so its writer tries again until the object exists (the
/// `Authorized` condition on a FleetAddonConfig created again).
#[tokio::test]
async fn a_status_apply_to_an_object_never_observed_is_an_error() {
    use caapf::apply::Target;
    use caapf::model::plan::{Next, ObjectId, Plan, Write};
    use k8s_openapi::api::core::v1::Service;
    let sandbox = Sandbox::start().await;
    let client = sandbox.client();
    let recorder = kube::runtime::events::Recorder::new(client.clone(), "test".into());
    let target = Target {
        client: &client,
        recorder: &recorder,
        expectations: None,
    };
    let write = |seen: Option<&str>| Write::ApplyStatus {
        object: ObjectId::of::<Service>(Some("default"), "gone", seen),
        body: json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "gone"},
            "status": {"loadBalancer": {}}}),
        manager: "test",
    };
    let observed = target.run(Plan::of(vec![write(Some("7"))], Next::AwaitChange));
    assert_eq!(
        observed.await.expect("gone since observed"),
        Next::AwaitChange
    );
    let never = target
        .run(Plan::of(vec![write(None)], Next::AwaitChange))
        .await;
    assert!(
        matches!(&never, Err(caapf::Error::Kube(kube::Error::Api(s))) if s.code == 404),
        "{never:?}"
    );
}

/// Secret `name` in [`NS`] with `key: text`, created or updated.
async fn put_secret(env: &Env, name: &str, key: &str, text: &str) {
    Api::<Secret>::namespaced(env.client(), NS)
        .patch(
            name,
            &PatchParams::apply("hooks-sandbox-test").force(),
            &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": name, "namespace": NS},
                "stringData": {key: text},
            })),
        )
        .await
        .expect("secret");
}

/// Fleet's `fleet-agent` chart pulled from a real OCI registry (`docker-registry` on 127.0.0.1):
/// from a plain-HTTP registry on loopback; from a private one (TLS with the test's CA, basic
/// auth) with `agentChartCredentials` and `agentChartTLSConfig`, the failures a user meets told
/// in the hook's answer (which Cluster API shows on the Cluster) with what to change; and with
/// `spec.install`'s settings when the agent chart comes from the repository Fleet is installed
/// from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_chart_is_pulled_from_an_oci_registry() {
    use fleet_common::registry::{PASSWORD, Registry, RegistryOptions, Tls, USER};
    let env = &Env::start(Some("cluster: {agentInitiated: true}")).await;
    env.install_fleet().await;
    let set_config = |yaml: String| {
        let spec: caapf::api::FleetAddonConfigSpec = serde_yaml::from_str(&yaml).expect("spec");
        let config = EffectiveConfig::from_spec(&spec);
        assert!(config.problems.is_empty(), "{:?}", config.problems);
        env._config.send_replace(Some(Arc::new(config)));
    };
    // A Cluster whose token Fleet has issued: the next BeforeClusterCreate renders the chart.
    let ready_cluster = |name: &'static str| async move {
        let cluster = env
            .capi_cluster(name, json!({}), "quick-start", false)
            .await;
        env.call(Hook::BeforeClusterCreate, &cluster).await;
        env.issue_token(name).await;
        cluster
    };
    let rendered = |name: &'static str| async move {
        let secret = env.bootstrap_secret(name).await.expect("bootstrap secret");
        let objects = bootstrap_objects(&secret);
        assert!(
            objects.iter().any(|o| o["kind"] == "Deployment"),
            "{objects:?}"
        );
    };

    // A plain-HTTP registry on loopback (helm gets --plain-http).
    let plain = Registry::start(RegistryOptions::default());
    plain.push_agent(AGENT_CHART_VERSION);
    set_config(format!(
        "cluster: {{agentInitiated: true}}\nruntimeExtension: {{agentChartRepository: \"{}\"}}",
        plain.url()
    ));
    let cluster = ready_cluster("oci-plain").await;
    assert_success(&env.call(Hook::BeforeClusterCreate, &cluster).await);
    rendered("oci-plain").await;

    // A private registry.
    let ca = common::tls::Ca::new();
    let serving = ca.serving("registry");
    let mut private = Registry::start(RegistryOptions {
        tls: Some(Tls {
            cert: serving.cert,
            key: serving.key,
            ca: ca.pem.clone(),
        }),
        basic_auth: true,
    });
    private.push_agent(AGENT_CHART_VERSION);
    put_secret(env, "registry-ca", "ca.crt", &ca.pem).await;
    put_secret(
        env,
        "registry-pull",
        "config.json",
        &private.config_json(USER, "wrong-password"),
    )
    .await;
    set_config(format!(
        "cluster: {{agentInitiated: true}}\nruntimeExtension: {{agentChartRepository: \"{}\", \
         agentChartCredentials: {{secret: {{name: registry-pull, namespace: {NS}}}}}, \
         agentChartTLSConfig: {{caSecret: {{name: registry-ca, namespace: {NS}}}}}}}",
        private.url()
    ));
    let cluster = ready_cluster("oci-private").await;
    let refused = env.call(Hook::BeforeClusterCreate, &cluster).await;
    assert_retry(
        &refused,
        "the registry refused the credentials of spec.runtimeExtension.agentChartCredentials (Secret team-a/registry-pull",
    );
    assert!(
        refused.message.contains(&format!(
            "pulling the fleet-agent chart {AGENT_CHART_VERSION} from {}",
            private.url()
        )),
        "{}",
        refused.message
    );
    assert!(
        !refused.message.contains("wrong-password"),
        "{}",
        refused.message
    );
    assert!(env.bootstrap_secret("oci-private").await.is_none());

    // Fixed by the user: the next call pulls and renders.
    put_secret(
        env,
        "registry-pull",
        "config.json",
        &private.config_json(USER, PASSWORD),
    )
    .await;
    assert_success(&env.call(Hook::BeforeClusterCreate, &cluster).await);
    rendered("oci-private").await;

    // The registry is down and the chart of another version is not cached: retried, said why.
    private.stop();
    env.create_addon_config().await;
    env.set_installed_version("9.9.9").await;
    let cluster = ready_cluster("oci-down").await;
    assert_retry(
        &env.call(Hook::BeforeClusterCreate, &cluster).await,
        "connection refused",
    );
    // Back, but without that version: the tag is unknown.
    private.restart();
    let unknown = env.call(Hook::BeforeClusterCreate, &cluster).await;
    assert_retry(&unknown, "pulling the fleet-agent chart 9.9.9");
    assert!(unknown.message.contains("not found"), "{}", unknown.message);

    // No settings of its own: the agent chart comes from spec.install's repository (another
    // private registry, so nothing is cached), with spec.install's credentials and CA.
    let serving = ca.serving("mirror");
    let mirror = Registry::start(RegistryOptions {
        tls: Some(Tls {
            cert: serving.cert,
            key: serving.key,
            ca: ca.pem.clone(),
        }),
        basic_auth: true,
    });
    mirror.push_agent(AGENT_CHART_VERSION);
    env.set_installed_version(AGENT_CHART_VERSION).await;
    set_config(format!(
        "cluster: {{agentInitiated: true}}\ninstall: {{followLatest: true, repository: \"{}\", \
         credentials: {{secret: {{name: registry-pull, namespace: {NS}}}}}, \
         tlsConfig: {{caSecret: {{name: registry-ca, namespace: {NS}}}}}}}",
        mirror.url()
    ));
    // The same Secret holds the password for this registry's host too.
    put_secret(
        env,
        "registry-pull",
        "config.json",
        &serde_json::json!({"auths": {
            private.host(): {"auth": auth(USER, PASSWORD)},
            mirror.host(): {"auth": auth(USER, PASSWORD)},
        }})
        .to_string(),
    )
    .await;
    assert_success(&env.call(Hook::BeforeClusterCreate, &cluster).await);
    rendered("oci-down").await;
}

fn auth(user: &str, password: &str) -> String {
    base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        format!("{user}:{password}"),
    )
}

/// The Pod Security check the agent tests rely on (`tests/common/pod_security.rs`).
mod pod_security_support {
    use std::collections::BTreeMap;

    use crate::common::pod_security::*;
    use serde_json::{Value, json};

    fn hardened_container() -> Value {
        json!({"name": "app", "image": "x",
               "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]},
                                   "seccompProfile": {"type": "RuntimeDefault"}}})
    }

    #[test]
    fn levels_of_typical_pods() {
        let restricted = json!({"securityContext": {"runAsNonRoot": true}, "containers": [hardened_container()],
                                "volumes": [{"name": "tmp", "emptyDir": {}}]});
        let rows: [(&str, Value, Level); 9] = [
            ("hardened", restricted.clone(), Level::Restricted),
            (
                "no seccomp",
                json!({"securityContext": {"runAsNonRoot": true},
                "containers": [{"name": "a", "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]}),
                Level::Baseline,
            ),
            (
                "plain",
                json!({"containers": [{"name": "a"}]}),
                Level::Baseline,
            ),
            (
                "host network",
                json!({"hostNetwork": true, "containers": [{"name": "a"}]}),
                Level::Privileged,
            ),
            (
                "hostPath",
                json!({"containers": [{"name": "a"}], "volumes": [{"name": "h", "hostPath": {"path": "/"}}]}),
                Level::Privileged,
            ),
            (
                "privileged",
                json!({"containers": [{"name": "a", "securityContext": {"privileged": true}}]}),
                Level::Privileged,
            ),
            (
                "NET_ADMIN",
                json!({"initContainers": [{"name": "a", "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}]}),
                Level::Privileged,
            ),
            (
                "hostPort",
                json!({"containers": [{"name": "a", "ports": [{"containerPort": 80, "hostPort": 80}]}]}),
                Level::Privileged,
            ),
            (
                "unconfined seccomp",
                json!({"securityContext": {"seccompProfile": {"type": "Unconfined"}}, "containers": [{"name": "a"}]}),
                Level::Privileged,
            ),
        ];
        for (name, pod, level) in rows {
            assert_eq!(required_level(&pod), level, "{name}: {pod}");
        }
        let mut root = restricted.clone();
        root["securityContext"]["runAsUser"] = json!(0);
        assert_eq!(required_level(&root), Level::Baseline);
        let mut hostpath_free_but_nfs = restricted;
        hostpath_free_but_nfs["volumes"] =
            json!([{"name": "n", "nfs": {"server": "s", "path": "/"}}]);
        assert_eq!(required_level(&hostpath_free_but_nfs), Level::Baseline);
    }

    #[test]
    fn admission_uses_the_namespace_label_then_the_default_and_exemptions() {
        let admission = Admission::from_configuration(&json!({
            "apiVersion": "pod-security.admission.config.k8s.io/v1", "kind": "PodSecurityConfiguration",
            "defaults": {"enforce": "baseline", "audit": "restricted", "warn": "restricted"},
            "exemptions": {"namespaces": ["kube-system"]}
        }))
        .expect("configuration");
        let host = json!({"hostNetwork": true, "containers": [{"name": "a"}]});
        let none = BTreeMap::new();
        assert!(admission.admits("fleet", &none, &host).is_err());
        assert!(admission.admits("kube-system", &none, &host).is_ok());
        let privileged = BTreeMap::from([(ENFORCE_LABEL.to_string(), "privileged".to_string())]);
        assert!(admission.admits("fleet", &privileged, &host).is_ok());
        let err = admission
            .admits("fleet", &none, &host)
            .expect_err("baseline refuses host network");
        assert_eq!(err, ["host namespaces: hostNetwork=true"]);
        assert!(Admission::from_configuration(&json!({"defaults": {"enforce": "nope"}})).is_err());
    }
}
