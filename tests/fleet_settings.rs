//! Fleet settings without helm: Fleet's `fleet-controller` ConfigMap kept in line with
//! `config.server` when `spec.install` is absent, and the feature gates written into a values
//! ConfigMap. The manager's helm binary does not exist here, so any helm run would fail the
//! reconcile.

use crate::fleet_common;

use std::time::Duration;

use base64::Engine;
use fleet_common::{Env, Options, assert_condition};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

fn no_helm() -> Options {
    Options {
        helm_binary: "/nonexistent/helm".into(),
        ..Options::default()
    }
}

async fn create_namespace(env: &Env, name: &str) {
    let api: Api<Namespace> = Api::all(env.client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).expect("ns");
    api.create(&PostParams::default(), &ns)
        .await
        .expect("namespace");
}

async fn create_config_map(env: &Env, namespace: &str, name: &str, data: Value) {
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), namespace);
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).expect("cm");
    api.create(&PostParams::default(), &cm)
        .await
        .expect("configmap");
}

/// Waits until the ConfigMap satisfies `check`.
async fn wait_config_map(
    env: &Env,
    namespace: &str,
    name: &str,
    what: &str,
    check: impl Fn(&ConfigMap) -> bool,
) -> ConfigMap {
    let api: Api<ConfigMap> = Api::namespaced(env.client.clone(), namespace);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let current = api.get_opt(name).await.expect("get");
        if let Some(cm) = &current
            && check(cm)
        {
            return cm.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}; last: {current:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until Fleet's `cattle-fleet-system/fleet-controller` ConfigMap has a `data.config`
/// that satisfies `check`.
async fn wait_fleet_controller(env: &Env, what: &str, check: impl Fn(&Value) -> bool) -> ConfigMap {
    wait_config_map(env, FLEET_NS, "fleet-controller", what, |cm| {
        check(&fleet_config(cm))
    })
    .await
}

/// Fleet installed by someone else: its namespace and `fleet-controller` ConfigMap with `data`.
async fn create_fleet_controller(env: &Env, data: Value) {
    create_namespace(env, FLEET_NS).await;
    create_config_map(env, FLEET_NS, "fleet-controller", data).await;
}

/// Merges `data` into the data of ConfigMap `name`, as another writer.
async fn merge_data(cms: &Api<ConfigMap>, name: &str, data: Value, what: &str) {
    cms.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "data": data })),
    )
    .await
    .expect(what);
}

const FLEET_NS: &str = "cattle-fleet-system";

fn fleet_config(cm: &ConfigMap) -> Value {
    let text = cm
        .data
        .as_ref()
        .and_then(|d| d.get("config"))
        .expect("data.config");
    serde_json::from_str(text).expect("config JSON")
}

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

const PEM_1: &str = "-----BEGIN CERTIFICATE-----\nMIIBfirst\n-----END CERTIFICATE-----\n";
const PEM_2: &str = "-----BEGIN CERTIFICATE-----\nMIIBsecond\n-----END CERTIFICATE-----\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_settings_go_into_fleet_controller_without_install() {
    let env = Env::start(no_helm()).await;
    create_fleet_controller(
        &env,
        json!({
            "config": "{\n  \"apiServerURL\": \"\",\n  \"apiServerCA\": \"\",\n  \"agentCheckinInterval\": \"15m\"\n}",
            "other": "kept",
        }),
    )
    .await;
    let root_ca: Api<ConfigMap> = Api::namespaced(env.client.clone(), "default");
    let root_ca = root_ca
        .get("kube-root-ca.crt")
        .await
        .expect("root CA published");
    let root_ca = root_ca.data.expect("data")["ca.crt"].clone();

    // inferLocal: URL from the kubernetes EndpointSlice (scheme and port), CA from
    // kube-root-ca.crt, base64-encoded; other keys and entries kept.
    let generation = env
        .set_spec(json!({"config": {"server": {"inferLocal": true}}}))
        .await;
    let object = env.wait_ready(generation, "True").await;
    assert_condition(&object, "ConfigValid", "True");
    for absent in ["RepoAdd", "RepoUpdate", "Installed", "FlagsUpdate"] {
        assert!(
            fleet_common::condition(&object, absent).is_none(),
            "{absent}"
        );
    }
    let cm = wait_fleet_controller(&env, "inferred settings", |config| {
        config["apiServerURL"] == "https://10.0.0.1:6443"
    })
    .await;
    assert_eq!(
        fleet_config(&cm),
        json!({"apiServerURL": "https://10.0.0.1:6443", "apiServerCA": b64(&root_ca), "agentCheckinInterval": "15m"})
    );
    assert_eq!(cm.data.as_ref().expect("data")["other"], "kept");
    // We manage data.config only.
    let ours: Vec<_> = cm
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.manager.as_deref() == Some("addon-provider-fleet"))
        .collect();
    assert_eq!(ours.len(), 1, "{:?}", cm.metadata.managed_fields);
    let fields = serde_json::to_string(&ours[0].fields_v1).expect("fields");
    assert!(
        fields.contains("f:config") && !fields.contains("f:other"),
        "{fields}"
    );

    // Someone else rewrites the config (as Fleet's chart does on upgrade): our keys come back,
    // theirs stay.
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), FLEET_NS);
    merge_data(
        &cms,
        "fleet-controller",
        json!({"config": "{\"apiServerURL\": \"\", \"apiServerCA\": \"\", \"agentCheckinInterval\": \"30m\"}"}),
        "other writer",
    )
    .await;
    wait_fleet_controller(&env, "restored URL, kept interval", |config| {
        config["apiServerURL"] == "https://10.0.0.1:6443" && config["agentCheckinInterval"] == "30m"
    })
    .await;

    // The API server moves: the URL follows the EndpointSlice.
    let slices: Api<EndpointSlice> = Api::namespaced(env.client.clone(), "default");
    slices
        .patch(
            "kubernetes",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"endpoints": [{"addresses": ["10.0.0.7"], "conditions": {"ready": true}}]}),
            ),
        )
        .await
        .expect("endpoints moved");
    wait_fleet_controller(&env, "URL from the new endpoint", |config| {
        config["apiServerURL"] == "https://10.0.0.7:6443"
    })
    .await;

    // Custom URL and a CA from a Secret; a change of the Secret reaches Fleet.
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), "default");
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "fleet-ca"},
        "data": {"ca.crt": b64(PEM_1)},
    }))
    .expect("secret");
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("secret created");
    let generation = env
        .set_spec(json!({"config": {"server": {"custom": {
            "apiServerUrl": "https://fleet.example.com:6443",
            "apiServerCaConfigRef": {"kind": "Secret", "name": "fleet-ca", "namespace": "default"},
        }}}}))
        .await;
    env.wait_ready(generation, "True").await;
    wait_fleet_controller(&env, "custom settings", |config| {
        config["apiServerURL"] == "https://fleet.example.com:6443"
            && config["apiServerCA"] == b64(PEM_1)
    })
    .await;
    secrets
        .patch(
            "fleet-ca",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"ca.crt": b64(PEM_2)}})),
        )
        .await
        .expect("rotated");
    wait_fleet_controller(&env, "rotated CA", |config| {
        config["apiServerCA"] == b64(PEM_2)
    })
    .await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_settings_wait_for_fleet_controller() {
    let env = Env::start(no_helm()).await;
    let generation = env
        .set_spec(json!({"config": {"server": {"inferLocal": true}}}))
        .await;
    let object = env.wait_ready(generation, "False").await;
    let ready = assert_condition(&object, "Ready", "False");
    assert_eq!(ready.reason, "FleetControllerConfigFailed");
    assert!(
        ready
            .message
            .contains("cattle-fleet-system/fleet-controller not found"),
        "{ready:?}"
    );
    // Fleet gets installed by someone else: picked up (at the next retry).
    create_fleet_controller(
        &env,
        json!({"config": "{\"apiServerURL\": \"\", \"apiServerCA\": \"\"}"}),
    )
    .await;
    env.wait_ready(generation, "True").await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feature_gates_go_into_the_values_config_map_without_helm() {
    let env = Env::start(no_helm()).await;
    create_namespace(&env, "cattle-system").await;
    create_config_map(
        &env,
        "cattle-system",
        "rancher-config",
        json!({
            "fleet": "extraEnv:\n- name: CATTLE_TOKEN\n  valueFrom:\n    secretKeyRef:\n      name: t\n      key: token\n- name: EXPERIMENTAL_HELM_OPS\n  value: \"true\"\ngitops:\n  enabled: true\n",
            "priority-class": "rancher-critical",
        }),
    )
    .await;
    create_fleet_controller(
        &env,
        json!({"config": "{\"apiServerURL\": \"\", \"apiServerCA\": \"\"}"}),
    )
    .await;
    // spec.install is ignored in this mode: no helm at all (the binary does not exist), and
    // the server settings go into Fleet's own ConfigMap, as for a Fleet installed by others.
    let generation = env
        .set_spec(json!({
            "install": {"followLatest": true},
            "config": {
                "featureGates": {
                    "experimentalOciStorage": false,
                    "experimentalHelmOps": false,
                    "configMap": {"ref": {"name": "rancher-config", "namespace": "cattle-system"}},
                },
                "server": {"custom": {"apiServerUrl": "https://rancher.example.com"}},
            },
        }))
        .await;
    let object = env.wait_ready(generation, "True").await;
    let fleet_controller = wait_fleet_controller(&env, "server URL", |config| {
        config["apiServerURL"] == "https://rancher.example.com"
    })
    .await;
    assert_eq!(
        fleet_config(&fleet_controller)["apiServerCA"],
        "",
        "CA left alone"
    );
    assert_condition(&object, "FlagsUpdate", "True");
    assert_eq!(
        assert_condition(&object, "Installed", "False").reason,
        "Skipped"
    );
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), "cattle-system");
    let cm = cms.get("rancher-config").await.expect("cm");
    let data = cm.data.clone().expect("data");
    assert_eq!(data["priority-class"], "rancher-critical");
    let values: Value = serde_yaml::from_str(&data["fleet"]).expect("fleet values YAML");
    assert_eq!(
        values,
        json!({
            "extraEnv": [
                {"name": "CATTLE_TOKEN", "valueFrom": {"secretKeyRef": {"name": "t", "key": "token"}}},
                {"name": "EXPERIMENTAL_HELM_OPS", "value": "false"},
                {"name": "EXPERIMENTAL_OCI_STORAGE", "value": "false"},
            ],
            "gitops": {"enabled": true},
        })
    );

    // A change elsewhere in the ConfigMap triggers a reconcile that writes nothing.
    env.sandbox.requests().reset();
    merge_data(
        &cms,
        "rancher-config",
        json!({"priority-class": "other"}),
        "touch",
    )
    .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while env.sandbox.requests().count(|r| {
        r.verb == kube_sandbox::Verb::Get
            && r.resource == "configmaps"
            && r.name == "rancher-config"
    }) == 0
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no reconcile after the change"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Observation window for a write that must not come.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let patches = env
        .sandbox
        .requests()
        .count(|r| r.verb.is_write() && r.resource == "configmaps" && r.name == "rancher-config");
    assert_eq!(patches, 1, "only the test's own patch");
    let after = cms.get("rancher-config").await.expect("cm");
    assert_eq!(after.data.expect("data")["fleet"], data["fleet"]);

    // A gate change is written; a conflict (someone wrote in between) makes us read again.
    // The fault fails every second PATCH of a ConfigMap: the test's own patch is the first,
    // the provider's the second (409), its retry the third.
    let mut rule = kube_sandbox::FaultRule::fail(kube_sandbox::FaultTarget::Writes, 0.5, 409)
        .for_resource("configmaps");
    rule.verbs = Some(vec!["PATCH".to_string()]);
    env.sandbox.set_faults(kube_sandbox::FaultConfig {
        rules: vec![rule],
        ..Default::default()
    });
    merge_data(
        &cms,
        "rancher-config",
        json!({"priority-class": "again"}),
        "first PATCH passes",
    )
    .await;
    env.sandbox.requests().reset();
    let generation = env
        .set_spec(json!({
            "config": {"featureGates": {
                "experimentalOciStorage": true,
                "experimentalHelmOps": false,
                "configMap": {"ref": {"name": "rancher-config", "namespace": "cattle-system"}},
            }},
        }))
        .await;
    env.wait_ready(generation, "True").await;
    let cm = cms.get("rancher-config").await.expect("cm");
    let values: Value = serde_yaml::from_str(&cm.data.expect("data")["fleet"]).expect("yaml");
    assert_eq!(
        values["extraEnv"][2],
        json!({"name": "EXPERIMENTAL_OCI_STORAGE", "value": "true"})
    );
    let codes: Vec<u16> = env
        .sandbox
        .requests()
        .all()
        .iter()
        .filter(|r| r.verb == kube_sandbox::Verb::Patch && r.name == "rancher-config")
        .map(|r| r.code)
        .collect();
    assert_eq!(codes, [409, 200], "conflict, read again, write");
    env.sandbox.clear_faults();
    env.stop().await;
}
