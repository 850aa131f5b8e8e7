//! What a new cluster runs to register with Fleet by itself (agent-initiated registration).
//!
//! Inputs are what Fleet itself provides, so the bootstrap agent is the agent Fleet would deploy:
//! - the ClusterRegistrationToken's Secret (`values`: API server URL and CA, token, namespaces),
//! - the `fleet-controller` ConfigMap (`config`: agent image, pull policy, TLS mode, check-in
//!   interval) — the same image Fleet's agent bundle uses, so taking over does not restart the
//!   agent with another version,
//! - the Fleet Cluster's agent settings (namespace, tolerations, host network, environment).
//!
//! The kubeadm manifest mirrors Fleet's own agent manifest
//! (`internal/cmd/controller/agentmanagement/agent/manifest.go`) plus the registration inputs
//! Fleet's `fleet-agent` chart adds (Secret `fleet-agent-bootstrap`, ConfigMap `fleet-agent`).
//! Same names and namespace as Fleet's agent bundle, which deploys with `takeOwnership`, so Fleet
//! adopts these objects after registration. The NetworkPolicy and the `default` ServiceAccount
//! change of Fleet's manifest are left to that bundle: neither is needed to register.

use std::collections::BTreeMap;

use base64::Engine;
use serde_json::{Map, Value, json};

use crate::bootstrap::safe_concat_name;

/// Fleet's chart repository, for the RKE2 `HelmChart`.
pub const FLEET_CHART_REPOSITORY: &str = "https://rancher.github.io/fleet-helm-charts/";

/// Name of the agent Deployment, ServiceAccount, ConfigMap and Helm release (fixed by Fleet).
pub const AGENT_NAME: &str = "fleet-agent";

/// Name of the Secret the agent registers with (fixed by Fleet).
pub const AGENT_BOOTSTRAP_SECRET: &str = "fleet-agent-bootstrap";

/// Fleet's default agent namespace, where an unset `agentScope` points.
pub const FLEET_SYSTEM_NAMESPACE: &str = "cattle-fleet-system";

/// The registration values Fleet writes into a ClusterRegistrationToken's Secret (`values`).
#[derive(Clone, Debug, PartialEq)]
pub struct TokenValues {
    /// Every key, for the `fleet-agent` chart values.
    pub all: serde_yaml::Mapping,
    pub api_server_url: String,
    pub api_server_ca: String,
    pub token: String,
    pub cluster_namespace: String,
    pub system_registration_namespace: String,
    /// Fleet ≥ 0.16 only.
    pub token_name: Option<String>,
}

impl TokenValues {
    /// Parses the `values` YAML. Errors name the missing key, never a value.
    pub fn parse(yaml: &str) -> Result<TokenValues, String> {
        let all: serde_yaml::Mapping = serde_yaml::from_str(yaml)
            .map_err(|err| format!("the token values are not a YAML map: {err}"))?;
        let get = |key: &str| -> Option<String> {
            match all.get(key) {
                Some(serde_yaml::Value::String(s)) => Some(s.clone()),
                Some(serde_yaml::Value::Number(n)) => Some(n.to_string()),
                Some(serde_yaml::Value::Bool(b)) => Some(b.to_string()),
                _ => None,
            }
        };
        let required = |key: &str| -> Result<String, String> {
            get(key)
                .filter(|value| !value.is_empty())
                .ok_or_else(|| format!("the token values have no {key}"))
        };
        let api_server_url = get("apiServerURL").filter(|url| !url.is_empty()).ok_or(
            "Fleet hands agents no API server URL (token values apiServerURL is empty): set FleetAddonConfig spec.config.server or the fleet chart value apiServerURL",
        )?;
        Ok(TokenValues {
            api_server_url,
            api_server_ca: get("apiServerCA").unwrap_or_default(),
            token: required("token")?,
            cluster_namespace: required("clusterNamespace")?,
            system_registration_namespace: get("systemRegistrationNamespace")
                .filter(|ns| !ns.is_empty())
                .unwrap_or_else(|| "cattle-fleet-clusters-system".to_string()),
            token_name: get("tokenName").filter(|name| !name.is_empty()),
            all,
        })
    }
}

/// Agent settings Fleet publishes in its `fleet-controller` ConfigMap (`config` JSON).
#[derive(Clone, Debug, PartialEq)]
pub struct FleetAgentDefaults {
    /// Full image reference, registry included (Fleet's chart renders it so).
    pub image: String,
    pub pull_policy: Option<String>,
    /// `system-store` or `strict`.
    pub tls_mode: String,
    pub checkin_interval: Option<String>,
}

impl FleetAgentDefaults {
    /// Reads the `config` key of the `fleet-controller` ConfigMap.
    pub fn from_controller_config(config: &str) -> Result<FleetAgentDefaults, String> {
        let value: Value =
            serde_json::from_str(config).map_err(|err| format!("its config is not JSON: {err}"))?;
        let text = |key: &str| {
            value[key]
                .as_str()
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        Ok(FleetAgentDefaults {
            image: text("agentImage").ok_or("its config has no agentImage")?,
            pull_policy: text("agentImagePullPolicy"),
            tls_mode: text("agentTLSMode").unwrap_or_else(|| "system-store".to_string()),
            checkin_interval: text("agentCheckinInterval"),
        })
    }

    /// The image split into repository and tag (`None` for digests or untagged images).
    pub fn image_parts(&self) -> (String, Option<String>) {
        split_image(&self.image)
    }

    /// The `fleet-agent` chart version matching the image (the tag without `v`), when the tag is
    /// a semantic version. Fleet releases the agent image and the chart with the same version.
    pub fn chart_version(&self) -> Option<String> {
        let (_, tag) = self.image_parts();
        let version = tag?.trim_start_matches('v').to_string();
        semver::Version::parse(&version).ok().map(|_| version)
    }
}

fn split_image(image: &str) -> (String, Option<String>) {
    if image.contains('@') {
        return (image.to_string(), None);
    }
    match image.rsplit_once(':') {
        Some((repository, tag)) if !tag.contains('/') => {
            (repository.to_string(), Some(tag.to_string()))
        }
        _ => (image.to_string(), None),
    }
}

/// The agent settings of a Fleet Cluster (`spec.agent*`, `hostNetwork`), as JSON.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AgentSettings {
    /// Where the agent runs.
    pub namespace: String,
    /// The Fleet Cluster's `spec.agentNamespace` as written ("" when unset): Fleet's `AGENT_SCOPE`.
    pub scope: String,
    pub tolerations: Vec<Value>,
    pub host_network: bool,
    pub env: Vec<Value>,
}

impl AgentSettings {
    /// From a Fleet Cluster's `spec`.
    pub fn from_fleet_cluster_spec(spec: &Value) -> AgentSettings {
        let scope = spec["agentNamespace"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        AgentSettings {
            namespace: if scope.is_empty() {
                FLEET_SYSTEM_NAMESPACE.to_string()
            } else {
                scope.clone()
            },
            scope,
            tolerations: spec["agentTolerations"]
                .as_array()
                .cloned()
                .unwrap_or_default(),
            host_network: spec["hostNetwork"].as_bool().unwrap_or(false),
            env: spec["agentEnvVars"].as_array().cloned().unwrap_or_default(),
        }
    }
}

/// Everything the bootstrap files are rendered from.
#[derive(Clone, Debug, PartialEq)]
pub struct BootstrapInput {
    pub token: TokenValues,
    pub client_id: String,
    pub agent: AgentSettings,
    pub fleet: FleetAgentDefaults,
}

/// The agent objects for a cluster without helm-controller (kubeadm), as a multi-document YAML
/// stream in creation order.
pub fn render_manifest(input: &BootstrapInput) -> Result<String, String> {
    to_yaml_stream(&agent_objects(input))
}

/// The agent objects as JSON, in creation order.
pub fn agent_objects(input: &BootstrapInput) -> Vec<Value> {
    let ns = input.agent.namespace.as_str();
    let b64 = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
    let role = safe_concat_name(&[ns, AGENT_NAME, "role"]);
    let mut secret_data = Map::new();
    for (key, value) in [
        (
            "systemRegistrationNamespace",
            input.token.system_registration_namespace.as_str(),
        ),
        ("clusterNamespace", input.token.cluster_namespace.as_str()),
        ("token", input.token.token.as_str()),
        ("apiServerURL", input.token.api_server_url.as_str()),
        ("apiServerCA", input.token.api_server_ca.as_str()),
    ] {
        secret_data.insert(key.to_string(), json!(b64(value)));
    }
    if let Some(token_name) = &input.token.token_name {
        secret_data.insert("tokenName".to_string(), json!(b64(token_name)));
    }
    let agent_config = json!({
        "clientID": input.client_id,
        "agentTLSMode": input.fleet.tls_mode,
    });
    vec![
        json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": ns},
        }),
        json!({
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": AGENT_NAME, "namespace": ns},
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": role},
            "rules": [
                {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                {"nonResourceURLs": ["*"], "verbs": ["*"]},
            ],
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": safe_concat_name(&[ns, AGENT_NAME, "role", "binding"])},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": AGENT_NAME, "namespace": ns}],
        }),
        json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": AGENT_BOOTSTRAP_SECRET, "namespace": ns},
            "type": "Opaque",
            "data": secret_data,
        }),
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": AGENT_NAME, "namespace": ns},
            "data": {"config": agent_config.to_string()},
        }),
        agent_deployment(input),
    ]
}

fn agent_deployment(input: &BootstrapInput) -> Value {
    let agent = &input.agent;
    let namespace_env = json!({
        "name": "NAMESPACE",
        "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
    });
    let container = |name: &str, command: &[&str], mut env: Vec<Value>, mounts: Value| {
        env.extend(agent.env.iter().cloned());
        let mut container = json!({
            "name": name,
            "image": input.fleet.image,
            "command": command,
            "env": env,
            "securityContext": {
                "allowPrivilegeEscalation": false,
                "readOnlyRootFilesystem": true,
                "privileged": false,
                "capabilities": {"drop": ["ALL"]},
            },
        });
        if let Some(policy) = &input.fleet.pull_policy {
            container["imagePullPolicy"] = json!(policy);
        }
        if !mounts.is_null() {
            container["volumeMounts"] = mounts;
        }
        container
    };
    let mut status_env = vec![namespace_env.clone()];
    if let Some(interval) = &input.fleet.checkin_interval {
        status_env.push(json!({"name": "CHECKIN_INTERVAL", "value": interval}));
    }
    let mut tolerations = vec![
        json!({"key": "node.cloudprovider.kubernetes.io/uninitialized", "operator": "Equal", "value": "true", "effect": "NoSchedule"}),
        json!({"key": "cattle.io/os", "operator": "Equal", "value": "linux", "effect": "NoSchedule"}),
    ];
    tolerations.extend(agent.tolerations.iter().cloned());
    let mut pod_spec = json!({
        "serviceAccountName": AGENT_NAME,
        "initContainers": [container(
            "fleet-agent-register",
            &["fleetagent", "register"],
            vec![namespace_env.clone()],
            Value::Null,
        )],
        "containers": [
            container(
                AGENT_NAME,
                &["fleetagent"],
                vec![namespace_env.clone(), json!({"name": "AGENT_SCOPE", "value": agent.scope})],
                json!([{"name": "kube", "mountPath": "/.kube"}, {"name": "tmp", "mountPath": "/tmp"}]),
            ),
            container(
                "fleet-agent-clusterstatus",
                &["fleetagent", "clusterstatus"],
                status_env,
                Value::Null,
            ),
        ],
        "volumes": [{"name": "kube", "emptyDir": {}}, {"name": "tmp", "emptyDir": {}}],
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
            "weight": 1,
            "preference": {"matchExpressions": [{"key": "fleet.cattle.io/agent", "operator": "In", "values": ["true"]}]},
        }]}},
        "tolerations": tolerations,
        "securityContext": {"runAsNonRoot": true, "runAsUser": 1000, "runAsGroup": 1000},
    });
    if agent.host_network {
        pod_spec["hostNetwork"] = json!(true);
    }
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": AGENT_NAME, "namespace": agent.namespace},
        "spec": {
            "selector": {"matchLabels": {"app": AGENT_NAME}},
            "template": {
                "metadata": {"labels": {"app": AGENT_NAME}},
                "spec": pod_spec,
            },
        },
    })
}

/// The RKE2 `HelmChart` (helm.cattle.io/v1) installing Fleet's `fleet-agent` chart with the
/// token's values, the client ID and the agent settings. `bootstrap: true` runs the install job
/// on the host network with the not-ready tolerations, so it works before a CNI exists.
///
/// The chart has no value for extra environment variables: Fleet adds the Fleet Cluster's
/// `agentEnvVars` when its agent bundle takes over.
pub fn render_helm_chart(input: &BootstrapInput) -> Result<String, String> {
    let mut values = input.token.all.clone();
    let set = |values: &mut serde_yaml::Mapping, key: &str, value: Value| -> Result<(), String> {
        let value = serde_yaml::to_value(value).map_err(|err| err.to_string())?;
        values.insert(serde_yaml::Value::String(key.to_string()), value);
        Ok(())
    };
    set(&mut values, "clientID", json!(input.client_id))?;
    set(&mut values, "agentTLSMode", json!(input.fleet.tls_mode))?;
    set(
        &mut values,
        "fleetAgent",
        json!({"tolerations": input.agent.tolerations, "hostNetwork": input.agent.host_network}),
    )?;
    // The chart insists on being release `fleet-agent` in `internal.systemNamespace`.
    set(
        &mut values,
        "internal",
        json!({"systemNamespace": input.agent.namespace, "managedReleaseName": AGENT_NAME}),
    )?;
    if let (repository, Some(tag)) = input.fleet.image_parts() {
        set(
            &mut values,
            "image",
            json!({"repository": repository, "tag": tag}),
        )?;
    }
    let values_content = serde_yaml::to_string(&values).map_err(|err| err.to_string())?;
    let mut spec = json!({
        "repo": FLEET_CHART_REPOSITORY,
        "chart": AGENT_NAME,
        "targetNamespace": input.agent.namespace,
        "createNamespace": true,
        "bootstrap": true,
        "valuesContent": values_content,
    });
    if let Some(version) = input.fleet.chart_version() {
        spec["version"] = json!(version);
    }
    to_yaml_stream(&[json!({
        "apiVersion": "helm.cattle.io/v1",
        "kind": "HelmChart",
        "metadata": {"name": AGENT_NAME, "namespace": "kube-system"},
        "spec": spec,
    })])
}

/// The bootstrap Secret's data: both renderings, so the Secret does not depend on the control
/// plane provider (unknown when BeforeClusterCreate runs).
pub fn bootstrap_files(input: &BootstrapInput) -> Result<BTreeMap<String, String>, String> {
    Ok(BTreeMap::from([
        (
            crate::bootstrap::MANIFEST_KEY.to_string(),
            render_manifest(input)?,
        ),
        (
            crate::bootstrap::HELM_CHART_KEY.to_string(),
            render_helm_chart(input)?,
        ),
    ]))
}

fn to_yaml_stream(objects: &[Value]) -> Result<String, String> {
    let mut out = String::new();
    for object in objects {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(object).map_err(|err| err.to_string())?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, ServiceAccount};
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};

    pub(crate) const TOKEN_VALUES: &str = "clusterNamespace: fleet-default\napiServerURL: https://fleet.example.com:6443\napiServerCA: |\n  -----BEGIN CERTIFICATE-----\n  MIIB\n  -----END CERTIFICATE-----\ntoken: eyJhbGciOi.secret-token\nsystemRegistrationNamespace: cattle-fleet-clusters-system\n";

    pub(crate) fn input() -> BootstrapInput {
        BootstrapInput {
            token: TokenValues::parse(TOKEN_VALUES).expect("token values"),
            client_id: "client-123".into(),
            agent: AgentSettings::from_fleet_cluster_spec(&json!({
                "agentNamespace": "fleet-addon-agent",
                "agentTolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoSchedule"}],
                "hostNetwork": true,
                "agentEnvVars": [{"name": "KUBERNETES_SERVICE_HOST", "value": "10.0.0.1"}],
            })),
            fleet: FleetAgentDefaults::from_controller_config(
                r#"{"agentImage":"rancher/fleet-agent:v0.13.1","agentImagePullPolicy":"IfNotPresent","agentTLSMode":"strict","agentCheckinInterval":"15m","apiServerURL":"https://x"}"#,
            )
            .expect("controller config"),
        }
    }

    fn documents(yaml: &str) -> Vec<Value> {
        serde_yaml::Deserializer::from_str(yaml)
            .map(|doc| {
                <Value as serde::Deserialize>::deserialize(doc)
                    .unwrap_or_else(|e| panic!("document: {e}"))
            })
            .collect()
    }

    #[test]
    fn manifest_documents_are_kubernetes_objects_of_the_expected_types() {
        let yaml = render_manifest(&input()).expect("renders");
        let docs = documents(&yaml);
        let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
        assert_eq!(
            kinds,
            [
                "Namespace",
                "ServiceAccount",
                "ClusterRole",
                "ClusterRoleBinding",
                "Secret",
                "ConfigMap",
                "Deployment"
            ]
        );
        for doc in &docs {
            assert!(doc["apiVersion"].is_string(), "{doc}");
            assert!(doc["metadata"]["name"].is_string(), "{doc}");
            let parsed = match doc["kind"].as_str() {
                Some("Namespace") => serde_json::from_value::<Namespace>(doc.clone()).map(|_| ()),
                Some("ServiceAccount") => {
                    serde_json::from_value::<ServiceAccount>(doc.clone()).map(|_| ())
                }
                Some("ClusterRole") => {
                    serde_json::from_value::<ClusterRole>(doc.clone()).map(|_| ())
                }
                Some("ClusterRoleBinding") => {
                    serde_json::from_value::<ClusterRoleBinding>(doc.clone()).map(|_| ())
                }
                Some("Secret") => serde_json::from_value::<Secret>(doc.clone()).map(|_| ()),
                Some("ConfigMap") => serde_json::from_value::<ConfigMap>(doc.clone()).map(|_| ()),
                Some("Deployment") => serde_json::from_value::<Deployment>(doc.clone()).map(|_| ()),
                other => panic!("unexpected kind {other:?}"),
            };
            assert!(parsed.is_ok(), "{:?}: {parsed:?}", doc["kind"]);
        }
        for doc in docs.iter().filter(|d| {
            d["kind"] != "Namespace"
                && d["kind"] != "ClusterRole"
                && d["kind"] != "ClusterRoleBinding"
        }) {
            assert_eq!(doc["metadata"]["namespace"], "fleet-addon-agent", "{doc}");
        }
    }

    #[test]
    fn manifest_carries_registration_inputs_and_agent_settings() {
        let docs = documents(&render_manifest(&input()).expect("renders"));
        let secret: Secret = serde_json::from_value(docs[4].clone()).expect("secret");
        assert_eq!(
            secret.metadata.name.as_deref(),
            Some("fleet-agent-bootstrap")
        );
        let data = secret.data.expect("data");
        let text = |key: &str| String::from_utf8(data[key].0.clone()).expect("utf-8");
        assert_eq!(text("apiServerURL"), "https://fleet.example.com:6443");
        assert_eq!(text("token"), "eyJhbGciOi.secret-token");
        assert_eq!(text("clusterNamespace"), "fleet-default");
        assert!(text("apiServerCA").starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(!data.contains_key("tokenName"));

        let config: ConfigMap = serde_json::from_value(docs[5].clone()).expect("configmap");
        let config: Value =
            serde_json::from_str(&config.data.expect("data")["config"]).expect("config JSON");
        assert_eq!(
            config,
            json!({"clientID": "client-123", "agentTLSMode": "strict"})
        );

        let deployment: Deployment = serde_json::from_value(docs[6].clone()).expect("deployment");
        let pod = deployment
            .spec
            .expect("spec")
            .template
            .spec
            .expect("pod spec");
        assert_eq!(pod.host_network, Some(true));
        let tolerations: Vec<_> = pod
            .tolerations
            .unwrap_or_default()
            .into_iter()
            .filter_map(|t| t.key)
            .collect();
        assert_eq!(
            tolerations,
            [
                "node.cloudprovider.kubernetes.io/uninitialized",
                "cattle.io/os",
                "node.kubernetes.io/not-ready"
            ]
        );
        for container in pod
            .containers
            .iter()
            .chain(pod.init_containers.iter().flatten())
        {
            assert_eq!(
                container.image.as_deref(),
                Some("rancher/fleet-agent:v0.13.1")
            );
            assert_eq!(container.image_pull_policy.as_deref(), Some("IfNotPresent"));
            let env: Vec<&str> = container
                .env
                .iter()
                .flatten()
                .map(|e| e.name.as_str())
                .collect();
            assert!(env.contains(&"KUBERNETES_SERVICE_HOST"), "{env:?}");
        }
        let agent = &pod.containers[0];
        let scope = agent
            .env
            .iter()
            .flatten()
            .find(|e| e.name == "AGENT_SCOPE")
            .and_then(|e| e.value.clone());
        assert_eq!(scope.as_deref(), Some("fleet-addon-agent"));
    }

    #[test]
    fn no_host_network_and_default_namespace_when_unset() {
        let mut input = input();
        input.agent = AgentSettings::from_fleet_cluster_spec(&json!({}));
        let docs = documents(&render_manifest(&input).expect("renders"));
        assert_eq!(docs[0]["metadata"]["name"], "cattle-fleet-system");
        assert!(docs[6]["spec"]["template"]["spec"]["hostNetwork"].is_null());
        assert_eq!(
            docs[2]["metadata"]["name"],
            "cattle-fleet-system-fleet-agent-role"
        );
    }

    #[test]
    fn token_name_is_passed_when_fleet_provides_it() {
        let mut input = input();
        input.token =
            TokenValues::parse(&format!("{TOKEN_VALUES}tokenName: c1-token\n")).expect("values");
        let docs = documents(&render_manifest(&input).expect("renders"));
        assert!(docs[4]["data"]["tokenName"].is_string());
    }

    #[test]
    fn helm_chart_installs_the_matching_chart_with_the_token_values() {
        let docs = documents(&render_helm_chart(&input()).expect("renders"));
        assert_eq!(docs.len(), 1);
        let chart = &docs[0];
        assert_eq!(chart["apiVersion"], "helm.cattle.io/v1");
        assert_eq!(chart["kind"], "HelmChart");
        assert_eq!(chart["metadata"]["name"], "fleet-agent");
        assert_eq!(chart["metadata"]["namespace"], "kube-system");
        let spec = &chart["spec"];
        assert_eq!(spec["chart"], "fleet-agent");
        assert_eq!(spec["repo"], FLEET_CHART_REPOSITORY);
        assert_eq!(spec["version"], "0.13.1");
        assert_eq!(spec["targetNamespace"], "fleet-addon-agent");
        assert_eq!(spec["bootstrap"], true);
        let values: Value =
            serde_yaml::from_str(spec["valuesContent"].as_str().expect("valuesContent"))
                .expect("values YAML");
        assert_eq!(values["clientID"], "client-123");
        assert_eq!(values["token"], "eyJhbGciOi.secret-token");
        assert_eq!(values["apiServerURL"], "https://fleet.example.com:6443");
        assert_eq!(values["fleetAgent"]["hostNetwork"], true);
        assert_eq!(
            values["fleetAgent"]["tolerations"][0]["key"],
            "node.kubernetes.io/not-ready"
        );
        assert_eq!(values["internal"]["systemNamespace"], "fleet-addon-agent");
        assert_eq!(values["internal"]["managedReleaseName"], "fleet-agent");
        assert_eq!(
            values["image"],
            json!({"repository": "rancher/fleet-agent", "tag": "v0.13.1"})
        );
    }

    #[test]
    fn rendering_is_deterministic() {
        assert_eq!(bootstrap_files(&input()), bootstrap_files(&input()));
    }

    #[test]
    fn token_values_errors_name_keys_not_values() {
        let err = TokenValues::parse("apiServerURL: \"\"\ntoken: s3cr3t\nclusterNamespace: x\n")
            .expect_err("no URL");
        assert!(err.contains("apiServerURL"), "{err}");
        assert!(!err.contains("s3cr3t"));
        let err = TokenValues::parse("apiServerURL: https://x\nclusterNamespace: x\n")
            .expect_err("no token");
        assert_eq!(err, "the token values have no token");
        assert!(TokenValues::parse("- a list").is_err());
    }

    #[test]
    fn image_parts_and_chart_versions() {
        let defaults = |image: &str| FleetAgentDefaults {
            image: image.into(),
            pull_policy: None,
            tls_mode: "system-store".into(),
            checkin_interval: None,
        };
        assert_eq!(
            defaults("registry.local:5000/rancher/fleet-agent:v0.14.0-rc.1").image_parts(),
            (
                "registry.local:5000/rancher/fleet-agent".to_string(),
                Some("v0.14.0-rc.1".to_string())
            )
        );
        assert_eq!(
            defaults("registry.local:5000/rancher/fleet-agent").image_parts(),
            ("registry.local:5000/rancher/fleet-agent".to_string(), None)
        );
        assert_eq!(
            defaults("rancher/fleet-agent:v0.14.0-rc.1").chart_version(),
            Some("0.14.0-rc.1".to_string())
        );
        assert_eq!(defaults("rancher/fleet-agent:dev").chart_version(), None);
        assert_eq!(
            defaults("rancher/fleet-agent@sha256:abc").chart_version(),
            None
        );
        assert!(FleetAgentDefaults::from_controller_config("{}").is_err());
        assert!(FleetAgentDefaults::from_controller_config("nope").is_err());
    }
}
