//! What a new cluster runs to register with Fleet by itself (agent-initiated registration).
//!
//! The agent is Fleet's own: the `fleet-agent` chart (the chart Fleet documents for
//! agent-initiated registration), at the version of the Fleet that is installed, rendered with
//! `helm template` by [`crate::helm::agent_chart`]. This module is the pure part around it:
//! - the chart values, from what Fleet itself provides: the ClusterRegistrationToken's Secret
//!   (`values`: API server URL and CA, token, namespaces, and from Fleet 0.16 `tokenName`), the
//!   `fleet-controller` ConfigMap (`config`: agent image, pull policy, TLS mode), and the Fleet
//!   Cluster's agent settings (namespace, tolerations, host network, environment);
//! - [`finish`]: what `kubectl create -f` needs that the chart leaves to helm (a namespace on
//!   every namespaced object, the Namespace itself with the Pod Security level the agent needs),
//!   and the two agent settings the chart has no value for (the exact image reference with its
//!   pull policy, and the Fleet Cluster's `agentEnvVars`), so the bootstrap agent is the agent
//!   Fleet deploys when it takes over.
//!
//! Chart facts follow rancher/fleet `charts/fleet-agent` v0.12.0–v0.16.1 (values.yaml,
//! templates/deployment.yaml, validate.yaml): one Deployment `fleet-agent` with one container
//! `fleet-agent` (v0.11 had a StatefulSet with a `fleetagent register` init container); the chart
//! refuses a release that is not `internal.managedReleaseName` in `internal.systemNamespace`,
//! and from v0.16.0 one without `tokenName`; chart objects carry no namespace (helm adds it at
//! install). Before v0.16.0 the chart also has a post-install hook Job patching the `default`
//! ServiceAccount with a `rancher/kubectl` image; hooks are not rendered (no registry pull is
//! needed to register, and Fleet's agent bundle manages that ServiceAccount once it takes over).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::names;

/// Name of Fleet's agent chart, its Helm release, and its Deployment (fixed by Fleet).
pub const AGENT_NAME: &str = "fleet-agent";

/// Name of the Secret the agent registers with (fixed by Fleet).
pub const AGENT_BOOTSTRAP_SECRET: &str = "fleet-agent-bootstrap";

/// The Pod Security level the agent namespace enforces, whatever the agent pod: `privileged`.
/// Fleet's agent bundle never carries the Namespace (rancher/fleet v0.12.0–v0.16.1
/// `manifest.go` `Manifest`), so a stricter label set at bootstrap is never corrected; with
/// `hostNetwork: true` (which `baseline` forbids) Fleet deploys the agent with the `Recreate`
/// strategy (from v0.14.2), so switching a cluster to host network later would delete the running
/// agent and have its replacement refused, with nothing left to repair it. The agent's
/// ServiceAccount is bound to a ClusterRole allowing everything, so a stricter level would
/// protect nothing.
pub const POD_SECURITY_LEVEL: &str = "privileged";

/// Fleet's default agent namespace, where an unset `agentScope` points.
pub const FLEET_SYSTEM_NAMESPACE: &str = "cattle-fleet-system";

/// Where the chart is and which version to render.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ChartLocation {
    /// `oci://…` or a chart repository URL.
    pub repository: String,
    /// The chart version (Fleet's version without `v`).
    pub version: String,
}

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

/// The values of Fleet's `fleet-agent` chart for this cluster: every key Fleet put in the
/// token's values (so a key a newer Fleet adds is passed on), the client ID, the TLS mode, the
/// agent's tolerations and host network, and the release location the chart insists on.
pub fn chart_values(input: &BootstrapInput) -> Result<Map<String, Value>, String> {
    let mut values = match serde_json::to_value(&input.token.all) {
        Ok(Value::Object(map)) => map,
        Ok(_) => return Err("the token values are not a map".to_string()),
        Err(err) => return Err(format!("the token values: {err}")),
    };
    values.insert("clientID".into(), json!(input.client_id));
    values.insert("agentTLSMode".into(), json!(input.fleet.tls_mode));
    values.insert(
        "fleetAgent".into(),
        json!({"tolerations": input.agent.tolerations, "hostNetwork": input.agent.host_network}),
    );
    values.insert(
        "internal".into(),
        json!({"systemNamespace": input.agent.namespace, "managedReleaseName": AGENT_NAME}),
    );
    if let (repository, Some(tag)) = input.fleet.image_parts() {
        values.insert(
            "image".into(),
            json!({"repository": repository, "tag": tag}),
        );
    }
    Ok(values)
}

/// Kinds in the chart that are cluster-scoped; every other object gets the agent namespace.
const CLUSTER_SCOPED_KINDS: [&str; 3] = ["Namespace", "ClusterRole", "ClusterRoleBinding"];

/// The objects `kubectl create -f` runs on the new cluster, in creation order, from the chart's
/// rendering: the agent Namespace first (labelled with the Pod Security level the agent pod
/// needs), then the chart's objects in the agent namespace, with the exact agent image, its pull
/// policy and the Fleet Cluster's `agentEnvVars` on the agent containers.
pub fn finish(rendered: &str, input: &BootstrapInput) -> Result<Vec<Value>, String> {
    let namespace = input.agent.namespace.as_str();
    let mut objects = Vec::new();
    for document in serde_yaml::Deserializer::from_str(rendered) {
        let object = <Value as serde::Deserialize>::deserialize(document)
            .map_err(|err| format!("the fleet-agent chart rendered invalid YAML: {err}"))?;
        if object.is_null() {
            continue;
        }
        let kind = object["kind"].as_str().unwrap_or_default().to_string();
        if kind.is_empty() || !object["metadata"]["name"].is_string() {
            return Err("the fleet-agent chart rendered an object without kind or name".into());
        }
        objects.push(object);
    }
    let mut found = false;
    for object in &mut objects {
        let kind = object["kind"].as_str().unwrap_or_default().to_string();
        if !CLUSTER_SCOPED_KINDS.contains(&kind.as_str()) {
            object["metadata"]["namespace"] = json!(namespace);
        }
        if kind == "Deployment" && object["metadata"]["name"] == AGENT_NAME {
            let pod = &mut object["spec"]["template"]["spec"];
            for container in pod["containers"].as_array_mut().into_iter().flatten() {
                if container["name"] != AGENT_NAME {
                    continue;
                }
                container["image"] = json!(input.fleet.image);
                if let Some(policy) = &input.fleet.pull_policy {
                    container["imagePullPolicy"] = json!(policy);
                }
                if !input.agent.env.is_empty() {
                    let env = container["env"].as_array().cloned().unwrap_or_default();
                    let mut env: Vec<Value> = env
                        .into_iter()
                        .filter(|e| !input.agent.env.iter().any(|a| a["name"] == e["name"]))
                        .collect();
                    env.extend(input.agent.env.iter().cloned());
                    container["env"] = json!(env);
                }
            }
            found = true;
        }
    }
    if !found {
        return Err(format!(
            "the fleet-agent chart rendered no Deployment {AGENT_NAME}: is this Fleet's fleet-agent chart?"
        ));
    }
    objects.retain(|object| {
        !(object["kind"] == "Namespace" && object["metadata"]["name"] == namespace)
    });
    let mut labels = Map::new();
    labels.insert(
        names::POD_SECURITY_ENFORCE_LABEL.to_string(),
        json!(POD_SECURITY_LEVEL),
    );
    objects.insert(
        0,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": labels}}),
    );
    Ok(objects)
}

/// The bootstrap Secret's data: the agent objects as one YAML stream (both control-plane
/// providers create them with `kubectl create -f`).
pub fn bootstrap_files(objects: &[Value]) -> Result<BTreeMap<String, String>, String> {
    Ok(BTreeMap::from([(
        crate::model::agent_patch::MANIFEST_KEY.to_string(),
        to_yaml_stream(objects)?,
    )]))
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
    use crate::names::POD_SECURITY_ENFORCE_LABEL as ENFORCE_LABEL;

    pub(crate) const TOKEN_VALUES: &str = "clusterNamespace: fleet-default\napiServerURL: https://fleet.example.com:6443\napiServerCA: |\n  -----BEGIN CERTIFICATE-----\n  MIIB\n  -----END CERTIFICATE-----\ntoken: eyJhbGciOi.secret-token\nsystemRegistrationNamespace: cattle-fleet-clusters-system\ntokenName: c1-token\n";

    pub(crate) fn input() -> BootstrapInput {
        BootstrapInput {
            token: TokenValues::parse(TOKEN_VALUES).expect("token values"),
            client_id: "client-123".into(),
            agent: AgentSettings::from_fleet_cluster_spec(&json!({
                "agentNamespace": "fleet-addon-agent",
                "agentTolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoSchedule"}],
                "hostNetwork": true,
                "agentEnvVars": [{"name": "KUBERNETES_SERVICE_HOST", "value": "10.0.0.1"}, {"name": "NAMESPACE", "value": "overridden"}],
            })),
            fleet: FleetAgentDefaults::from_controller_config(
                r#"{"agentImage":"registry.local:5000/rancher/fleet-agent:v0.16.1","agentImagePullPolicy":"IfNotPresent","agentTLSMode":"strict","agentCheckinInterval":"15m","apiServerURL":"https://x"}"#,
            )
            .expect("controller config"),
        }
    }

    /// What `helm template` prints for Fleet's fleet-agent chart v0.16 (objects without a
    /// namespace but the NetworkPolicy; a `# Source` comment before each).
    const RENDERED: &str = r#"---
# Source: fleet-agent/templates/network_policy_allow_all.yaml
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: default-allow-all
  namespace: fleet-addon-agent
spec:
  podSelector: {}
  policyTypes: [Ingress, Egress]
---
# Source: fleet-agent/templates/serviceaccount.yaml
apiVersion: v1
kind: ServiceAccount
metadata:
  name: fleet-agent
---
# Source: fleet-agent/templates/rbac.yaml
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: fleet-agent-system-fleet-agent-role
rules:
- apiGroups: ['*']
  resources: ['*']
  verbs: ['*']
---
# Source: fleet-agent/templates/deployment.yaml
apiVersion: apps/v1
kind: Deployment
metadata:
  name: fleet-agent
spec:
  replicas: 1
  selector:
    matchLabels: {app: fleet-agent}
  template:
    metadata:
      labels: {app: fleet-agent}
    spec:
      containers:
      - env:
        - name: NAMESPACE
          valueFrom:
            fieldRef: {fieldPath: metadata.namespace}
        image: 'registry.local:5000/rancher/fleet-agent:v0.16.1'
        name: fleet-agent
        command: [fleetagent]
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          privileged: false
          capabilities: {drop: [ALL]}
        volumeMounts:
        - {mountPath: /tmp, name: tmp}
        - {mountPath: /.kube, name: kube}
      volumes:
      - {name: tmp, emptyDir: {}}
      - {name: kube, emptyDir: {}}
      serviceAccountName: fleet-agent
      hostNetwork: true
      nodeSelector: {kubernetes.io/os: linux}
      tolerations:
      - {key: cattle.io/os, value: linux, effect: NoSchedule, operator: Equal}
      - {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoSchedule}
      securityContext: {runAsNonRoot: true, runAsUser: 1000, runAsGroup: 1000}
"#;

    #[test]
    fn chart_values_pass_every_token_value_and_the_agent_settings() {
        let values = chart_values(&input()).expect("values");
        for (key, expected) in [
            ("token", json!("eyJhbGciOi.secret-token")),
            ("tokenName", json!("c1-token")),
            ("apiServerURL", json!("https://fleet.example.com:6443")),
            ("clusterNamespace", json!("fleet-default")),
            (
                "systemRegistrationNamespace",
                json!("cattle-fleet-clusters-system"),
            ),
            ("clientID", json!("client-123")),
            ("agentTLSMode", json!("strict")),
            (
                "internal",
                json!({"systemNamespace": "fleet-addon-agent", "managedReleaseName": "fleet-agent"}),
            ),
            (
                "image",
                json!({"repository": "registry.local:5000/rancher/fleet-agent", "tag": "v0.16.1"}),
            ),
        ] {
            assert_eq!(values[key], expected, "{key}");
        }
        assert!(
            values["apiServerCA"]
                .as_str()
                .unwrap_or_default()
                .starts_with("-----BEGIN")
        );
        assert_eq!(values["fleetAgent"]["hostNetwork"], true);
        assert_eq!(
            values["fleetAgent"]["tolerations"][0]["key"],
            "node.kubernetes.io/not-ready"
        );
    }

    #[test]
    fn finish_namespaces_the_objects_and_labels_the_namespace_for_the_pod() {
        let objects = finish(RENDERED, &input()).expect("finished");
        let kinds: Vec<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
        assert_eq!(
            kinds,
            [
                "Namespace",
                "NetworkPolicy",
                "ServiceAccount",
                "ClusterRole",
                "Deployment"
            ]
        );
        assert_eq!(objects[0]["metadata"]["name"], "fleet-addon-agent");
        assert_eq!(
            objects[0]["metadata"]["labels"][ENFORCE_LABEL],
            "privileged"
        );
        for object in &objects[1..] {
            let namespace = &object["metadata"]["namespace"];
            if object["kind"] == "ClusterRole" {
                assert!(namespace.is_null(), "{object}");
            } else {
                assert_eq!(namespace, "fleet-addon-agent", "{object}");
            }
        }
        let container = &objects[4]["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(
            container["image"],
            "registry.local:5000/rancher/fleet-agent:v0.16.1"
        );
        assert_eq!(container["imagePullPolicy"], "IfNotPresent");
        let env: Vec<(&str, &Value)> = container["env"]
            .as_array()
            .expect("env")
            .iter()
            .map(|e| (e["name"].as_str().unwrap_or_default(), &e["value"]))
            .collect();
        assert_eq!(
            env,
            [
                ("KUBERNETES_SERVICE_HOST", &json!("10.0.0.1")),
                ("NAMESPACE", &json!("overridden"))
            ]
        );
    }

    /// `privileged` whatever the pod (issue #29): a `baseline` label set for an agent without
    /// host network would refuse it for good once Fleet switches it to host network.
    #[test]
    fn without_host_network_the_namespace_still_enforces_privileged() {
        let mut input = input();
        input.agent.host_network = false;
        let rendered = RENDERED.replace("      hostNetwork: true\n", "");
        let objects = finish(&rendered, &input).expect("finished");
        assert_eq!(
            objects[0]["metadata"]["labels"][ENFORCE_LABEL],
            "privileged"
        );
    }

    #[test]
    fn a_digest_image_is_kept_exactly() {
        let mut input = input();
        input.fleet.image = "rancher/fleet-agent@sha256:0123".into();
        assert!(chart_values(&input).expect("values").get("image").is_none());
        let objects = finish(RENDERED, &input).expect("finished");
        assert_eq!(
            objects[4]["spec"]["template"]["spec"]["containers"][0]["image"],
            "rancher/fleet-agent@sha256:0123"
        );
    }

    #[test]
    fn a_chart_without_the_agent_deployment_is_refused() {
        let err = finish(
            "---\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: x\n",
            &input(),
        )
        .expect_err("no Deployment");
        assert!(err.contains("no Deployment fleet-agent"), "{err}");
        assert!(finish("kind: [", &input()).is_err());
    }

    #[test]
    fn bootstrap_files_are_one_yaml_stream() {
        let objects = finish(RENDERED, &input()).expect("finished");
        let files = bootstrap_files(&objects).expect("files");
        assert_eq!(files.len(), 1);
        let text = &files[crate::model::agent_patch::MANIFEST_KEY];
        assert_eq!(text.matches("\n---\n").count() + 1, objects.len());
        assert_eq!(bootstrap_files(&objects), bootstrap_files(&objects));
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
