//! What a new cluster runs to register with Fleet by itself (agent-initiated registration).
//!
//! The agent is Fleet's own: the `fleet-agent` chart (the chart Fleet documents for
//! agent-initiated registration), at the version of the Fleet that is installed, rendered with
//! `helm template` by [`crate::helm::agent_chart`]. This module is the pure part around it:
//! - the chart values, from what Fleet itself provides: the ClusterRegistrationToken's Secret
//!   (`values`: API server URL and CA, token, namespaces, and from Fleet 0.16 `tokenName`), the
//!   `fleet-controller` ConfigMap (`config`: agent image, pull policy, TLS mode, check-in
//!   interval, workers, registry, pull secrets), and the Fleet Cluster's agent settings;
//! - [`finish`]: what `kubectl create -f` needs that the chart leaves to helm (a namespace on
//!   every namespaced object, the Namespace itself with its Pod Security level), and what Fleet's
//!   own agent bundle deploys differently from the chart ([`crate::model::fleet_agent_bundle`]),
//!   so the agent a cluster boots with is the agent Fleet deploys when it takes over: the same
//!   `AGENT_SCOPE` (part of the ownership ID of everything the agent applies), the same objects.
//!
//! Chart facts follow rancher/fleet `charts/fleet-agent` v0.12.0–v0.16.1 (values.yaml,
//! templates/deployment.yaml, rbac.yaml, validate.yaml): one Deployment `fleet-agent` with one
//! container `fleet-agent` (v0.11 had a StatefulSet with a `fleetagent register` init container,
//! and is not rendered); the chart refuses a release that is not `internal.managedReleaseName` in
//! `internal.systemNamespace`, and from v0.16.0 one without `tokenName`; chart objects carry no
//! namespace but the NetworkPolicy (helm adds it at install). The 0.12.0–0.12.2 chart also has a
//! post-install hook Job patching the `default` ServiceAccount with a `rancher/kubectl` image;
//! hooks are not rendered (no registry pull is needed to register, and Fleet's agent bundle
//! manages that ServiceAccount once it takes over).

use serde_json::{Map, Value, json};

use crate::api::duration::{go_duration_string, parse_duration};
use crate::model::fleet_agent_bundle::{self as bundle, FleetVersion};
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

/// Agent settings Fleet publishes in its `fleet-controller` ConfigMap (`config` JSON, written by
/// rancher/fleet `charts/fleet/templates/configmap.yaml`, read by `internal/config/config.go`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FleetAgentDefaults {
    /// Full image reference, registry included (Fleet's chart renders it so).
    pub image: String,
    pub pull_policy: Option<String>,
    /// `system-store` or `strict`.
    pub tls_mode: String,
    /// `agentCheckinInterval` as Go's `Duration.String()` writes it (`15m0s`; `0s` when absent):
    /// Fleet's `CHECKIN_INTERVAL`.
    pub checkin_interval: String,
    /// `systemDefaultRegistry` (with its trailing `/`, as `charts/fleet` writes it).
    pub system_default_registry: String,
    /// `agentWorkers.bundledeployment` ("" when absent, as Fleet then writes it).
    pub bundle_deployment_workers: String,
    /// `agentWorkers.drift` ("" when absent).
    pub drift_workers: String,
    /// `imagePullSecrets` (Fleet 0.16: used for the agent unless the Fleet Cluster has its own).
    pub image_pull_secrets: Vec<Value>,
    /// `garbageCollectionInterval` as Go writes it, when set: what Fleet's import puts in the
    /// agent's `fleet-agent` ConfigMap (rancher/fleet v0.16.1
    /// `internal/cmd/controller/agentmanagement/agent/config.go`), the chart's value of that name.
    pub garbage_collection_interval: Option<String>,
}

impl FleetAgentDefaults {
    /// Reads the `config` key of the `fleet-controller` ConfigMap.
    pub fn from_controller_config(config: &str) -> Result<FleetAgentDefaults, String> {
        let value: Value =
            serde_json::from_str(config).map_err(|err| format!("its config is not JSON: {err}"))?;
        let text = |value: &Value| value.as_str().filter(|s| !s.is_empty()).map(str::to_string);
        let checkin_interval = match text(&value["agentCheckinInterval"]) {
            None => "0s".to_string(),
            Some(written) => go_duration_string(parse_duration(&written).map_err(|err| {
                format!("its config's agentCheckinInterval is not a duration: {err}")
            })?),
        };
        let garbage_collection_interval = match text(&value["garbageCollectionInterval"]) {
            None => None,
            Some(written) => Some(go_duration_string(parse_duration(&written).map_err(
                |err| format!("its config's garbageCollectionInterval is not a duration: {err}"),
            )?)),
        };
        Ok(FleetAgentDefaults {
            garbage_collection_interval,
            image: text(&value["agentImage"]).ok_or("its config has no agentImage")?,
            pull_policy: text(&value["agentImagePullPolicy"]),
            tls_mode: text(&value["agentTLSMode"]).unwrap_or_else(|| "system-store".to_string()),
            checkin_interval,
            system_default_registry: text(&value["systemDefaultRegistry"]).unwrap_or_default(),
            bundle_deployment_workers: text(&value["agentWorkers"]["bundledeployment"])
                .unwrap_or_default(),
            drift_workers: text(&value["agentWorkers"]["drift"]).unwrap_or_default(),
            image_pull_secrets: value["imagePullSecrets"]
                .as_array()
                .cloned()
                .unwrap_or_default(),
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

/// The agent settings of a Fleet Cluster (`spec.agent*`, `hostNetwork`, `privateRepoURL`), as
/// JSON.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FleetClusterAgent {
    /// Where the agent runs.
    pub namespace: String,
    /// The Fleet Cluster's `spec.agentNamespace` as written ("" when unset): Fleet's `AGENT_SCOPE`.
    pub scope: String,
    pub tolerations: Vec<Value>,
    pub host_network: bool,
    pub env: Vec<Value>,
    /// `privateRepoURL` ("" when unset).
    pub private_repo_url: String,
    pub affinity: Option<Value>,
    pub resources: Option<Value>,
    /// `agentSchedulingCustomization.priorityClass` is set.
    pub priority_class: bool,
    /// `agentSchedulingCustomization` as written, if set.
    pub scheduling: Option<Value>,
    /// `agentPullSecrets` (`None` when unset; an empty list means none).
    pub pull_secrets: Option<Vec<Value>>,
}

impl FleetClusterAgent {
    /// From a Fleet Cluster's `spec`.
    pub fn from_fleet_cluster_spec(spec: &Value) -> FleetClusterAgent {
        let scope = spec["agentNamespace"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let object = |key: &str| Some(spec[key].clone()).filter(Value::is_object);
        FleetClusterAgent {
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
            private_repo_url: spec["privateRepoURL"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            affinity: object("agentAffinity"),
            resources: object("agentResources"),
            priority_class: spec["agentSchedulingCustomization"]["priorityClass"].is_object(),
            scheduling: object("agentSchedulingCustomization"),
            pull_secrets: spec["agentPullSecrets"].as_array().cloned(),
        }
    }
}

/// Everything the bootstrap files are rendered from.
#[derive(Clone, Debug, PartialEq)]
pub struct BootstrapInput {
    pub token: TokenValues,
    pub client_id: String,
    pub agent: FleetClusterAgent,
    pub fleet: FleetAgentDefaults,
    /// The Fleet release whose chart is rendered (the rules that changed between minors).
    pub version: FleetVersion,
    /// The pull Secrets the agent names that Fleet would copy into the agent namespace
    /// ([`propagated_pull_secrets`]), as read from Fleet's namespace: created with the agent.
    pub pull_secrets: Vec<k8s_openapi::api::core::v1::Secret>,
}

/// The `imagePullSecrets` the agent's pod names that Fleet copies from its own namespace into the
/// agent namespace: the `fleet-controller` configuration's, unless the Fleet Cluster sets
/// `agentPullSecrets` (then Rancher propagates them; rancher/fleet v0.16.1
/// `internal/cmd/controller/agentmanagement/secret/util.go` `GetAgentPullSecrets`). Fleet copies
/// them with the agent bundle (`manageagent.go`), which a first-boot agent must be running to
/// get, so the boot script carries them.
pub fn propagated_pull_secrets(input: &BootstrapInput) -> Vec<String> {
    match input.agent.pull_secrets {
        Some(_) => Vec::new(),
        None => bundle::image_pull_secrets(None, &input.fleet.image_pull_secrets, input.version)
            .iter()
            .filter_map(|s| s["name"].as_str().map(str::to_string))
            .collect(),
    }
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
    if let Some(interval) = &input.fleet.garbage_collection_interval {
        values.insert("garbageCollectionInterval".into(), json!(interval));
    }
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
const CLUSTER_SCOPED_KINDS: [&str; 4] = [
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "PriorityClass",
];

/// The names the chart gives its ClusterRole and ClusterRoleBinding (rancher/fleet
/// `charts/fleet-agent/templates/rbac.yaml`, v0.12.0–v0.16.1), which Fleet's agent bundle does
/// not use: left as they are, they would survive Fleet's takeover as an orphaned pair allowing
/// everything.
pub const CHART_CLUSTER_ROLE: &str = "fleet-agent-system-fleet-agent-role";
/// See [`CHART_CLUSTER_ROLE`].
pub const CHART_CLUSTER_ROLE_BINDING: &str = "fleet-agent-system-fleet-agent-role-binding";

/// The order `kubectl create -f` creates the objects in: the Namespace, what the agent's pod
/// needs (RBAC, ServiceAccount, its configuration and registration Secret), the NetworkPolicy,
/// then the Deployment; kinds the chart may add later go before the Deployment.
const CREATION_ORDER: [&str; 8] = [
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "ServiceAccount",
    "ConfigMap",
    "Secret",
    "NetworkPolicy",
    "Deployment",
];

/// The objects `kubectl create -f` runs on the new cluster, in creation order, from the chart's
/// rendering, brought to what Fleet's agent bundle deploys for the same Fleet Cluster at that
/// Fleet version ([`crate::model::fleet_agent_bundle`]):
/// - the agent Namespace first, labelled [`POD_SECURITY_LEVEL`] (Fleet's bundle has none; Helm
///   creates it);
/// - every namespaced object in the agent namespace (the chart leaves that to helm);
/// - the ClusterRole and ClusterRoleBinding under Fleet's names;
/// - the Deployment as `manifest.go` `agentApp` builds it: environment (with `AGENT_SCOPE` and
///   `CHECKIN_INTERVAL`, the Fleet Cluster's `agentEnvVars` last), tolerations, affinity, image
///   (`Resolve`), pull policy, resources, strategy, pull secrets, priority class, volume order;
/// - the chart's ConfigMap `fleet-agent` and Secret `fleet-agent-bootstrap`, which the agent
///   registers with (not in Fleet's bundle);
/// - the PriorityClass and PodDisruptionBudget of `agentSchedulingCustomization` (from Fleet
///   0.14), which Fleet creates only for clusters it imports itself
///   ([`bundle::scheduling_objects`]);
///
/// and without: the hook Job of the 0.12.0–0.12.2 chart (rendered with `--no-hooks`), and the
/// `default` ServiceAccount Fleet's bundle sets `automountServiceAccountToken: false` on
/// (Kubernetes creates `default` in every new namespace, so `kubectl create` of it fails or races;
/// the bootstrap agent runs as `fleet-agent`, and Fleet's takeover sets the field). Empty and null
/// values of the rendering (`args:` of the 0.16 chart) are left out.
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
    if !objects
        .iter()
        .any(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == AGENT_NAME)
    {
        let found = if objects.iter().any(|o| o["kind"] == "StatefulSet") {
            " (it rendered a StatefulSet, as Fleet 0.11's chart does)"
        } else {
            ""
        };
        return Err(format!(
            "the fleet-agent chart rendered no Deployment {AGENT_NAME}{found}: is this Fleet's fleet-agent chart of Fleet 0.12 or later?"
        ));
    }
    objects.retain(|object| {
        !(object["kind"] == "Namespace" && object["metadata"]["name"] == namespace)
    });
    objects.extend(bundle::scheduling_objects(
        input.agent.scheduling.as_ref(),
        namespace,
        input.version,
    ));
    objects.extend(input.pull_secrets.iter().map(|secret| {
        json!({"apiVersion": "v1", "kind": "Secret", "type": secret.type_,
            "metadata": {"name": secret.metadata.name}, "data": secret.data})
    }));
    for object in &mut objects {
        let kind = object["kind"].as_str().unwrap_or_default().to_string();
        if !CLUSTER_SCOPED_KINDS.contains(&kind.as_str()) {
            object["metadata"]["namespace"] = json!(namespace);
        }
        match kind.as_str() {
            "ClusterRole" if object["metadata"]["name"] == CHART_CLUSTER_ROLE => {
                object["metadata"]["name"] = json!(bundle::cluster_role_name(namespace));
            }
            "ClusterRoleBinding" if object["metadata"]["name"] == CHART_CLUSTER_ROLE_BINDING => {
                object["metadata"]["name"] = json!(bundle::cluster_role_binding_name(namespace));
                if object["roleRef"]["name"] == CHART_CLUSTER_ROLE {
                    object["roleRef"]["name"] = json!(bundle::cluster_role_name(namespace));
                }
            }
            "Deployment" if object["metadata"]["name"] == AGENT_NAME => {
                agent_deployment(object, input);
            }
            _ => {}
        }
        drop_empty(object);
    }
    // Kinds not listed go just before the Deployment.
    let rank = |object: &Value| {
        let kind = object["kind"].as_str().unwrap_or_default();
        match CREATION_ORDER.iter().position(|k| *k == kind) {
            Some(index) => 2 * index,
            None => 2 * CREATION_ORDER.len() - 3,
        }
    };
    // Stable: objects of one kind keep the chart's order.
    objects.sort_by_key(|object| rank(object));
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

/// The agent Deployment as `manifest.go` `agentApp` builds it, from the chart's.
fn agent_deployment(deployment: &mut Value, input: &BootstrapInput) {
    let (agent, fleet, version) = (&input.agent, &input.fleet, input.version);
    match bundle::strategy(agent.host_network, version) {
        Some(strategy) => deployment["spec"]["strategy"] = strategy,
        None => remove(&mut deployment["spec"], "strategy"),
    }
    let pod = &mut deployment["spec"]["template"]["spec"];
    pod["tolerations"] = json!(bundle::tolerations(&agent.tolerations, version));
    pod["affinity"] = bundle::affinity(agent.affinity.as_ref());
    if agent.host_network {
        pod["hostNetwork"] = json!(true);
    } else {
        remove(pod, "hostNetwork");
    }
    match bundle::priority_class_name(agent.priority_class, version) {
        Some(name) => pod["priorityClassName"] = json!(name),
        None => remove(pod, "priorityClassName"),
    }
    let secrets = bundle::image_pull_secrets(
        agent.pull_secrets.as_deref(),
        &fleet.image_pull_secrets,
        version,
    );
    if secrets.is_empty() {
        remove(pod, "imagePullSecrets");
    } else {
        pod["imagePullSecrets"] = json!(secrets);
    }
    order_by_name(&mut pod["volumes"], &bundle::VOLUME_ORDER);
    let env = bundle::env(
        &bundle::EnvOptions {
            bundle_deployment_workers: &fleet.bundle_deployment_workers,
            drift_workers: &fleet.drift_workers,
            agent_scope: &agent.scope,
            checkin_interval: &fleet.checkin_interval,
            agent_env: &agent.env,
        },
        version,
    );
    for container in pod["containers"].as_array_mut().into_iter().flatten() {
        if container["name"] != AGENT_NAME {
            continue;
        }
        container["image"] = json!(bundle::resolve_image(
            &fleet.system_default_registry,
            &agent.private_repo_url,
            &fleet.image
        ));
        match &fleet.pull_policy {
            Some(policy) => container["imagePullPolicy"] = json!(policy),
            None => remove(container, "imagePullPolicy"),
        }
        container["env"] = json!(env);
        match &agent.resources {
            Some(resources) => container["resources"] = resources.clone(),
            None => remove(container, "resources"),
        }
        order_by_name(&mut container["volumeMounts"], &bundle::VOLUME_ORDER);
    }
}

/// Removes `key` from `object` (nothing when it is not an object).
fn remove(object: &mut Value, key: &str) {
    if let Some(map) = object.as_object_mut() {
        map.remove(key);
    }
}

/// Orders the items of a list by their `name` as `order` has them (others after, as they were).
fn order_by_name(list: &mut Value, order: &[&str]) {
    if let Some(items) = list.as_array_mut() {
        items.sort_by_key(|item| {
            let name = item["name"].as_str().unwrap_or_default();
            order.iter().position(|n| *n == name).unwrap_or(order.len())
        });
    }
}

/// Leaves out null values and empty lists and maps below the top level of an object's fields
/// (the 0.16 chart's `args:` renders as null), except where an empty value means something:
/// `emptyDir: {}`, `podSelector: {}` and the NetworkPolicy's `ingress: [{}]` / `egress: [{}]`
/// items are kept (an empty map inside a list, or under those keys).
fn drop_empty(value: &mut Value) {
    const MEANINGFUL_EMPTY: [&str; 2] = ["emptyDir", "podSelector"];
    match value {
        Value::Object(map) => {
            map.retain(|key, child| {
                drop_empty(child);
                !(child.is_null()
                    || (child.as_array().is_some_and(Vec::is_empty))
                    || (child.as_object().is_some_and(Map::is_empty)
                        && !MEANINGFUL_EMPTY.contains(&key.as_str())))
            });
        }
        Value::Array(items) => items.iter_mut().for_each(drop_empty),
        _ => {}
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::names::POD_SECURITY_ENFORCE_LABEL as ENFORCE_LABEL;

    pub(crate) const TOKEN_VALUES: &str = "clusterNamespace: fleet-default\napiServerURL: https://fleet.example.com:6443\napiServerCA: |\n  -----BEGIN CERTIFICATE-----\n  MIIB\n  -----END CERTIFICATE-----\ntoken: eyJhbGciOi.secret-token\nsystemRegistrationNamespace: cattle-fleet-clusters-system\ntokenName: c1-token\n";

    pub(crate) fn input() -> BootstrapInput {
        BootstrapInput {
            token: TokenValues::parse(TOKEN_VALUES).expect("token values"),
            client_id: "client-123".into(),
            agent: FleetClusterAgent::from_fleet_cluster_spec(&json!({
                "agentNamespace": "fleet-addon-agent",
                "agentTolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoSchedule"}],
                "hostNetwork": true,
                "agentEnvVars": [{"name": "KUBERNETES_SERVICE_HOST", "value": "10.0.0.1"}, {"name": "NAMESPACE", "value": "overridden"}],
            })),
            fleet: FleetAgentDefaults::from_controller_config(
                r#"{"agentImage":"registry.local:5000/rancher/fleet-agent:v0.16.1","agentImagePullPolicy":"IfNotPresent","agentTLSMode":"strict","agentCheckinInterval":"15m","garbageCollectionInterval":"90m","apiServerURL":"https://x"}"#,
            )
            .expect("controller config"),
            version: FleetVersion::parse("0.16.1").expect("version"),
            pull_secrets: Vec::new(),
        }
    }

    /// What `helm template` prints for Fleet's fleet-agent chart v0.16 (objects without a
    /// namespace but the NetworkPolicy; a `# Source` comment before each).
    pub(crate) const RENDERED: &str = r#"---
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
            // The fleet-controller config's, as Fleet's import gives its agent (issue #38).
            ("garbageCollectionInterval", json!("1h30m0s")),
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
    fn finish_namespaces_the_objects_and_labels_the_namespace() {
        let objects = finish(RENDERED, &input()).expect("finished");
        let kinds: Vec<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
        assert_eq!(
            kinds,
            [
                "Namespace",
                "ClusterRole",
                "ServiceAccount",
                "NetworkPolicy",
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
        // Fleet's name, not the chart's (the chart's pair would survive Fleet's takeover).
        assert_eq!(
            objects[1]["metadata"]["name"],
            "fleet-addon-agent-fleet-agent-role"
        );
    }

    /// The agent as Fleet's `manifest.go` deploys it for this Fleet Cluster (issue #29, defect
    /// 1: the chart has no `AGENT_SCOPE` nor `CHECKIN_INTERVAL`, so every bundle the bootstrap
    /// agent deployed was owned under another ID than the agent Fleet deploys).
    /// Fleet 0.16 names the controller's `imagePullSecrets` on the agent and copies them only
    /// with its agent bundle: the first boot creates them in the agent namespace, or the agent's
    /// private image is never pulled (issue #38 item 5). Not when the Fleet Cluster has its own
    /// `agentPullSecrets` (Rancher's to propagate), nor before 0.16.
    #[test]
    fn the_pull_secrets_fleet_would_propagate_are_created_with_the_agent() {
        let mut input = input();
        input.fleet.image_pull_secrets = vec![json!({"name": "registry-pull"})];
        assert_eq!(propagated_pull_secrets(&input), ["registry-pull"]);
        input.pull_secrets = vec![
            serde_json::from_value(json!({"metadata": {"name": "registry-pull", "namespace": "cattle-fleet-system", "uid": "u"},
                "type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": "e30="}}))
            .expect("secret"),
        ];
        let objects = finish(RENDERED, &input).expect("finished");
        let secret = objects
            .iter()
            .find(|o| o["kind"] == "Secret" && o["metadata"]["name"] == "registry-pull")
            .expect("the pull Secret");
        assert_eq!(
            *secret,
            json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
                "metadata": {"name": "registry-pull", "namespace": "fleet-addon-agent"},
                "data": {".dockerconfigjson": "e30="}})
        );
        let deployment = objects.iter().position(|o| o["kind"] == "Deployment");
        let at = objects
            .iter()
            .position(|o| o["metadata"]["name"] == "registry-pull");
        assert!(at < deployment, "created before the agent");
        input.agent.pull_secrets = Some(vec![]);
        assert!(propagated_pull_secrets(&input).is_empty());
        input.agent.pull_secrets = None;
        input.version = FleetVersion::parse("0.15.6").expect("version");
        assert!(propagated_pull_secrets(&input).is_empty());
    }

    #[test]
    fn finish_gives_the_agent_fleet_s_scope_interval_and_settings() {
        let objects = finish(RENDERED, &input()).expect("finished");
        let deployment = &objects[4];
        assert_eq!(deployment["spec"]["strategy"], json!({"type": "Recreate"}));
        let pod = &deployment["spec"]["template"]["spec"];
        let container = &pod["containers"][0];
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
                ("BUNDLEDEPLOYMENT_RECONCILER_WORKERS", &json!("")),
                ("DRIFT_RECONCILER_WORKERS", &json!("")),
                ("NAMESPACE", &Value::Null),
                ("AGENT_SCOPE", &json!("fleet-addon-agent")),
                ("CHECKIN_INTERVAL", &json!("15m0s")),
                ("CATTLE_ELECTION_LEASE_DURATION", &json!("30s")),
                ("CATTLE_ELECTION_RETRY_PERIOD", &json!("10s")),
                ("CATTLE_ELECTION_RENEW_DEADLINE", &json!("25s")),
                ("KUBERNETES_SERVICE_HOST", &json!("10.0.0.1")),
                ("NAMESPACE", &json!("overridden")),
            ]
        );
        let tolerations: Vec<&str> = pod["tolerations"]
            .as_array()
            .expect("tolerations")
            .iter()
            .filter_map(|t| t["key"].as_str())
            .collect();
        assert_eq!(
            tolerations,
            [
                "node.cloudprovider.kubernetes.io/uninitialized",
                "cattle.io/os",
                "node.kubernetes.io/not-ready"
            ]
        );
        assert_eq!(
            pod["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["weight"],
            1
        );
        let volumes: Vec<&str> = pod["volumes"]
            .as_array()
            .expect("volumes")
            .iter()
            .filter_map(|v| v["name"].as_str())
            .collect();
        assert_eq!(volumes, ["kube", "tmp"]);
        assert_eq!(container["volumeMounts"][0]["name"], "kube");

        // A Fleet Cluster without agentNamespace: AGENT_SCOPE "" (Fleet writes the field as is),
        // the agent in Fleet's system namespace.
        let mut input = input();
        input.agent = FleetClusterAgent::from_fleet_cluster_spec(&json!({}));
        let objects = finish(RENDERED, &input).expect("finished");
        let container = &objects[4]["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(
            container["env"][3],
            json!({"name": "AGENT_SCOPE", "value": ""})
        );
        assert_eq!(objects[4]["metadata"]["namespace"], "cattle-fleet-system");
        assert!(objects[4]["spec"].get("strategy").is_none());
    }

    #[test]
    fn the_controller_config_gives_interval_workers_registry_and_pull_secrets() {
        let defaults = FleetAgentDefaults::from_controller_config(
            r#"{"agentImage":"mirror.example/rancher/fleet-agent:v0.16.1","systemDefaultRegistry":"mirror.example/",
                "agentCheckinInterval":"1h30m","agentWorkers":{"bundledeployment":"50","drift":"25"},
                "imagePullSecrets":[{"name":"pull"}]}"#,
        )
        .expect("config");
        assert_eq!(defaults.checkin_interval, "1h30m0s");
        assert_eq!(defaults.system_default_registry, "mirror.example/");
        assert_eq!(
            (
                defaults.bundle_deployment_workers.as_str(),
                defaults.drift_workers.as_str()
            ),
            ("50", "25")
        );
        assert_eq!(defaults.image_pull_secrets, [json!({"name": "pull"})]);
        let bare = FleetAgentDefaults::from_controller_config(
            r#"{"agentImage":"rancher/fleet-agent:v0.12.0"}"#,
        )
        .expect("config");
        assert_eq!(bare.checkin_interval, "0s");
        let err = FleetAgentDefaults::from_controller_config(
            r#"{"agentImage":"x","agentCheckinInterval":"soon"}"#,
        )
        .expect_err("not a duration");
        assert!(err.contains("agentCheckinInterval"), "{err}");
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
            tls_mode: "system-store".into(),
            ..FleetAgentDefaults::default()
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
