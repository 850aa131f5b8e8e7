//! What Fleet's own agent bundle deploys for a Fleet Cluster, per Fleet minor: the rules the
//! bootstrap follows so that the agent a new cluster boots with is the agent Fleet deploys when
//! it takes over (pure; [`crate::model::agent_manifest::finish`] applies them to the objects of
//! Fleet's `fleet-agent` chart).
//!
//! Read from rancher/fleet at v0.12.0, v0.12.19, v0.13.0, v0.13.15, v0.14.0, v0.14.1, v0.14.2,
//! v0.14.10, v0.15.0, v0.15.2, v0.15.6, v0.16.0 and v0.16.1:
//! - `internal/cmd/controller/agentmanagement/agent/manifest.go`: `Manifest` (ClusterRole and
//!   ClusterRoleBinding named `SafeConcatName(<namespace>, "fleet-agent", "role"[, "binding"])`,
//!   ServiceAccounts `fleet-agent` and `default`, the Deployment, NetworkPolicy
//!   `default-allow-all`), `agentApp` (the Deployment) and `Resolve` (the image);
//! - `internal/cmd/controller/agentmanagement/controllers/manageagent/manageagent.go`
//!   `newAgentBundle` (the options: the Fleet Cluster's `agentNamespace` as `AGENT_SCOPE` exactly
//!   as written, `agentTolerations` sorted from v0.14.1 by `sortTolerations`, the
//!   `fleet-controller` configuration's `agentCheckinInterval` as `Duration.String()`);
//! - `internal/names/safeconcat.go` `SafeConcatName` (the same at every tag read).
//!
//! What changed between minors ([`FleetVersion`] gates it): `replicas` from v0.13.0 (the chart
//! renders it from v0.13.0 too); `EXPERIMENTAL_COPY_RESOURCES_DOWNSTREAM` in v0.14.0–v0.15.x;
//! `priorityClassName` from v0.14.0; tolerations sorted from v0.14.1; the `Recreate` strategy with
//! host network from v0.14.2; `imagePullSecrets` from v0.16.0.

use serde_json::{Value, json};

/// A Fleet release version, for the rules that changed between minors (pre-release suffixes
/// are ignored: `0.14.2-rc.1` has what `0.14.2` has).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct FleetVersion {
    pub major: u64,
    pub minor: u64,
    pub patch: u64,
}

/// The oldest Fleet minor whose agent the bootstrap renders: 0.12 (0.11's `fleet-agent` chart
/// deploys a StatefulSet with a `fleetagent register` init container, rancher/fleet v0.11.14
/// `charts/fleet-agent/templates/deployment.yaml`).
pub const OLDEST_SUPPORTED: FleetVersion = FleetVersion {
    major: 0,
    minor: 12,
    patch: 0,
};

impl FleetVersion {
    /// From a chart or image version (`0.16.1`, `v0.14.0-rc.1`); `None` if it is not semantic.
    pub fn parse(version: &str) -> Option<FleetVersion> {
        let parsed = semver::Version::parse(version.trim_start_matches('v')).ok()?;
        Some(FleetVersion {
            major: parsed.major,
            minor: parsed.minor,
            patch: parsed.patch,
        })
    }

    /// Whether this is `0.<minor>.<patch>` or later.
    pub fn since(self, minor: u64, patch: u64) -> bool {
        self >= FleetVersion {
            major: 0,
            minor,
            patch,
        }
    }

    /// Whether the bootstrap renders this Fleet's agent ([`OLDEST_SUPPORTED`] or later).
    pub fn supported(self) -> bool {
        self >= OLDEST_SUPPORTED
    }
}

impl std::fmt::Display for FleetVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Fleet's `names.SafeConcatName`: the parts joined with `-`; from 64 characters on, cut to 57
/// (56 if the 57th is not a lower-case letter or digit) and ended with `-` and the first 5 (6)
/// hex digits of the SHA-256 of the whole.
pub fn safe_concat_name(parts: &[&str]) -> String {
    let full = parts.join("-");
    if full.len() < 64 {
        return full;
    }
    let hex = crate::model::diff::sha256_hex(full.as_bytes());
    let c = full.as_bytes()[56];
    if c.is_ascii_lowercase() || c.is_ascii_digit() {
        format!("{}-{}", &full[..57], &hex[..5])
    } else {
        format!("{}-{}", &full[..56], &hex[..6])
    }
}

/// The ClusterRole of the agent in `namespace` (`manifest.go` `Manifest`).
pub fn cluster_role_name(namespace: &str) -> String {
    safe_concat_name(&[namespace, AGENT, "role"])
}

/// The ClusterRoleBinding of the agent in `namespace` (`manifest.go` `Manifest`).
pub fn cluster_role_binding_name(namespace: &str) -> String {
    safe_concat_name(&[namespace, AGENT, "role", "binding"])
}

const AGENT: &str = "fleet-agent";

/// Fleet's `agent.Resolve(global, prefix, image)`: with a Fleet Cluster's `privateRepoURL`
/// (`prefix`), the `fleet-controller` configuration's `systemDefaultRegistry` (`global`) is
/// taken off the image and the prefix put in front (Go's `path.Join`, which cleans the path).
pub fn resolve_image(global: &str, prefix: &str, image: &str) -> String {
    let mut image = image;
    if !global.is_empty() && !prefix.is_empty() {
        image = image.strip_prefix(global).unwrap_or(image);
    }
    if !prefix.is_empty() && !image.starts_with(prefix) {
        return go_path_join(prefix, image);
    }
    image.to_string()
}

/// Go's `path.Join(a, b)` for two non-empty elements: joined with `/`, then `path.Clean`ed
/// (repeated slashes collapsed, `.` dropped, `..` resolved, no trailing slash).
fn go_path_join(a: &str, b: &str) -> String {
    let joined = format!("{a}/{b}");
    let rooted = joined.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in joined.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|last| *last != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            other => parts.push(other),
        }
    }
    let cleaned = parts.join("/");
    match (rooted, cleaned.is_empty()) {
        (true, _) => format!("/{cleaned}"),
        (false, true) => ".".to_string(),
        (false, false) => cleaned,
    }
}

/// Fleet's default agent tolerations (`agentApp`), in Fleet's order.
pub fn default_tolerations() -> Vec<Value> {
    vec![
        json!({"key": "node.cloudprovider.kubernetes.io/uninitialized", "operator": "Equal", "value": "true", "effect": "NoSchedule"}),
        json!({"key": "cattle.io/os", "operator": "Equal", "value": "linux", "effect": "NoSchedule"}),
    ]
}

/// The agent's tolerations: Fleet's defaults, then the Fleet Cluster's `agentTolerations`, sorted
/// from v0.14.1 as `manageagent.go` `sortTolerations` does (key, value, operator, effect, then
/// `tolerationSeconds` with an absent one first).
pub fn tolerations(agent_tolerations: &[Value], version: FleetVersion) -> Vec<Value> {
    let mut agent = agent_tolerations.to_vec();
    if version.since(14, 1) {
        let text = |t: &Value, key: &str| t[key].as_str().unwrap_or_default().to_string();
        agent.sort_by(|a, b| {
            ["key", "value", "operator", "effect"]
                .iter()
                .map(|key| text(a, key).cmp(&text(b, key)))
                .find(|ordering| ordering.is_ne())
                .unwrap_or_else(|| {
                    a["tolerationSeconds"]
                        .as_i64()
                        .cmp(&b["tolerationSeconds"].as_i64())
                })
        });
    }
    let mut all = default_tolerations();
    all.extend(agent);
    all
}

/// The agent's affinity: the Fleet Cluster's `agentAffinity` when set, else Fleet's default (a
/// preference for nodes labelled `fleet.cattle.io/agent: "true"`).
pub fn affinity(agent_affinity: Option<&Value>) -> Value {
    agent_affinity.cloned().unwrap_or_else(|| {
        json!({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
            "weight": 1,
            "preference": {"matchExpressions": [
                {"key": "fleet.cattle.io/agent", "operator": "In", "values": ["true"]}
            ]}
        }]}})
    })
}

/// The Deployment strategy: `Recreate` with host network from v0.14.2 (rancher/fleet commit
/// 6bbe1ad94, #4467: the new pod would wait for the host ports of the old one), else none.
pub fn strategy(host_network: bool, version: FleetVersion) -> Option<Value> {
    (host_network && version.since(14, 2)).then(|| json!({"type": "Recreate"}))
}

/// `priorityClassName` from v0.14.0 when the Fleet Cluster has
/// `agentSchedulingCustomization.priorityClass` (`manageagent.go`; Fleet creates that
/// PriorityClass only for clusters it imports itself, `controllers/cluster/import.go`).
pub fn priority_class_name(priority_class: bool, version: FleetVersion) -> Option<&'static str> {
    (priority_class && version.since(14, 0)).then_some(PRIORITY_CLASS_NAME)
}

/// The PriorityClass and PodDisruptionBudget of `agentSchedulingCustomization` (from v0.14.0),
/// as Fleet builds them (`internal/cmd/controller/agentmanagement/scheduling/scheduling.go`
/// `PriorityClass`, `PodDisruptionBudget`, v0.14.0-v0.16.1). Fleet creates them only for the
/// clusters it imports itself (`controllers/cluster/import.go` `importCluster`), never for an
/// agent-initiated one, whose agent Deployment then names a PriorityClass nobody created and its
/// pods are refused: the bootstrap creates them, and they stay after Fleet's takeover (its agent
/// bundle does not hold them). A budget with both `minAvailable` and `maxUnavailable` set (neither
/// `"0"`) is not created, as Fleet refuses it.
pub fn scheduling_objects(
    scheduling: Option<&Value>,
    namespace: &str,
    version: FleetVersion,
) -> Vec<Value> {
    let Some(scheduling) = scheduling.filter(|_| version.since(14, 0)) else {
        return Vec::new();
    };
    let mut objects = Vec::new();
    if let Some(class) = scheduling.get("priorityClass").filter(|c| c.is_object()) {
        let mut object = json!({
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": PRIORITY_CLASS_NAME},
            "value": class["value"].as_i64().unwrap_or(0),
            "description": "Priority class for Fleet Agent",
        });
        if let Some(policy) = class.get("preemptionPolicy").filter(|p| p.is_string()) {
            object["preemptionPolicy"] = policy.clone();
        }
        objects.push(object);
    }
    if let Some(budget) = scheduling
        .get("podDisruptionBudget")
        .filter(|b| b.is_object())
    {
        let field = |key: &str| budget[key].as_str().unwrap_or_default();
        let (min, max) = (field("minAvailable"), field("maxUnavailable"));
        let limit = match (min, max) {
            ("", "") => Some(("maxUnavailable", json!(0))),
            (min, max) if !max.is_empty() && (min.is_empty() || min == "0") => {
                Some(("maxUnavailable", int_or_string(max)))
            }
            (min, max) if !min.is_empty() && (max.is_empty() || max == "0") => {
                Some(("minAvailable", int_or_string(min)))
            }
            _ => None,
        };
        if let Some((key, value)) = limit {
            let mut spec = json!({"selector": {"matchLabels": {"app": "fleet-agent"}}});
            spec[key] = value;
            objects.push(json!({
                "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": PDB_NAME, "namespace": namespace},
                "spec": spec,
            }));
        }
    }
    objects
}

/// Fleet's names for them (`scheduling.go`).
pub const PRIORITY_CLASS_NAME: &str = "fleet-agent-priority-class";
const PDB_NAME: &str = "fleet-agent-pod-disruption-budget";

/// `intstr.Parse`: an integer when the text is one, else the text.
fn int_or_string(text: &str) -> Value {
    text.parse::<i64>()
        .map_or_else(|_| json!(text), |n| json!(n))
}

/// `imagePullSecrets` from v0.16.0: the Fleet Cluster's `agentPullSecrets` when set (even empty),
/// else the `fleet-controller` configuration's `imagePullSecrets`
/// (`internal/cmd/controller/agentmanagement/secret/util.go` `GetAgentPullSecrets`).
pub fn image_pull_secrets(
    cluster: Option<&[Value]>,
    controller: &[Value],
    version: FleetVersion,
) -> Vec<Value> {
    if !version.since(16, 0) {
        return Vec::new();
    }
    cluster.unwrap_or(controller).to_vec()
}

/// What [`env`] is made of.
#[derive(Clone, Debug, PartialEq)]
pub struct EnvOptions<'a> {
    /// `agentWorkers.bundledeployment` of the `fleet-controller` configuration ("" when absent).
    pub bundle_deployment_workers: &'a str,
    /// `agentWorkers.drift` ("" when absent).
    pub drift_workers: &'a str,
    /// The Fleet Cluster's `spec.agentNamespace` as written ("" when unset).
    pub agent_scope: &'a str,
    /// `agentCheckinInterval` as Go's `Duration.String()` ("0s" when absent).
    pub checkin_interval: &'a str,
    /// The Fleet Cluster's `agentEnvVars`, appended as they are.
    pub agent_env: &'a [Value],
}

/// The leader election durations Fleet gives its agent: v0.12 constants (`manifest.go`
/// `electionLeaseDuration` …), from v0.13 the fleet-controller's `FLEET_AGENT_ELECTION_*`
/// environment, which `charts/fleet` sets from `agent.leaderElection` with the same defaults.
pub const LEADER_ELECTION: [(&str, &str); 3] = [
    ("CATTLE_ELECTION_LEASE_DURATION", "30s"),
    ("CATTLE_ELECTION_RETRY_PERIOD", "10s"),
    ("CATTLE_ELECTION_RENEW_DEADLINE", "25s"),
];

/// The agent container's environment in `agentApp`'s order: the reconciler workers, the
/// namespace, `AGENT_SCOPE`, `CHECKIN_INTERVAL`, the leader election durations,
/// `EXPERIMENTAL_COPY_RESOURCES_DOWNSTREAM` (v0.14.0–v0.15.x; `false` unless the
/// fleet-controller runs with it), then the Fleet Cluster's `agentEnvVars` as they are (not
/// deduplicated: Fleet appends them).
pub fn env(options: &EnvOptions<'_>, version: FleetVersion) -> Vec<Value> {
    let mut env = vec![
        json!({"name": "BUNDLEDEPLOYMENT_RECONCILER_WORKERS", "value": options.bundle_deployment_workers}),
        json!({"name": "DRIFT_RECONCILER_WORKERS", "value": options.drift_workers}),
        json!({"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}),
        json!({"name": "AGENT_SCOPE", "value": options.agent_scope}),
        json!({"name": "CHECKIN_INTERVAL", "value": options.checkin_interval}),
    ];
    env.extend(
        LEADER_ELECTION
            .iter()
            .map(|(name, value)| json!({"name": name, "value": value})),
    );
    if version.since(14, 0) && !version.since(16, 0) {
        env.push(json!({"name": "EXPERIMENTAL_COPY_RESOURCES_DOWNSTREAM", "value": "false"}));
    }
    env.extend(options.agent_env.iter().cloned());
    env
}

/// The order of the agent's volumes and mounts in `agentApp` (the chart has them the other way
/// round).
pub const VOLUME_ORDER: [&str; 2] = ["kube", "tmp"];

#[cfg(test)]
mod tests {
    use super::*;

    fn v(text: &str) -> FleetVersion {
        FleetVersion::parse(text).expect("version")
    }

    #[test]
    fn versions_gate_what_changed_between_minors() {
        assert!(v("0.12.0").supported() && v("v0.16.1").supported());
        assert!(!v("0.11.14").supported());
        assert!(
            v("0.14.2-rc.1").since(14, 2),
            "pre-releases count as their release"
        );
        assert!(!v("0.14.1").since(14, 2));
        assert_eq!(FleetVersion::parse("dev"), None);
        assert_eq!(v("v0.13.1").to_string(), "0.13.1");
        let host = |version: &str| strategy(true, v(version));
        assert_eq!(host("0.14.1"), None);
        assert_eq!(host("0.14.2"), Some(json!({"type": "Recreate"})));
        assert_eq!(host("0.16.1"), Some(json!({"type": "Recreate"})));
        assert_eq!(strategy(false, v("0.16.1")), None);
        assert_eq!(priority_class_name(true, v("0.13.15")), None);
        assert_eq!(
            priority_class_name(true, v("0.14.0")),
            Some("fleet-agent-priority-class")
        );
        assert_eq!(priority_class_name(false, v("0.16.1")), None);
        let controller = [json!({"name": "global"})];
        let cluster = [json!({"name": "mine"})];
        assert!(image_pull_secrets(Some(&cluster), &controller, v("0.15.6")).is_empty());
        assert_eq!(
            image_pull_secrets(Some(&cluster), &controller, v("0.16.0")),
            cluster
        );
        assert_eq!(
            image_pull_secrets(None, &controller, v("0.16.0")),
            controller
        );
        assert!(image_pull_secrets(Some(&[]), &controller, v("0.16.0")).is_empty());
    }

    /// Expected values computed with Go's `names.SafeConcatName` rule (sha256 in hex).
    #[test]
    fn safe_concat_names() {
        assert_eq!(
            cluster_role_name("cattle-fleet-system"),
            "cattle-fleet-system-fleet-agent-role"
        );
        assert_eq!(
            cluster_role_binding_name("fleet-addon-agent"),
            "fleet-addon-agent-fleet-agent-role-binding"
        );
        let long = "a-namespace-with-a-rather-long-name-for-agents";
        let name = cluster_role_binding_name(long);
        assert_eq!(name.len(), 63);
        assert_eq!(
            name,
            "a-namespace-with-a-rather-long-name-for-agents-fleet-agen-0ca02"
        );
        // The 57th character is `-`: cut at 56, six hex digits.
        let name = safe_concat_name(&["x".repeat(56).as_str(), "yyyyyyyy"]);
        assert_eq!(name, format!("{}-27999c", "x".repeat(56)));
    }

    /// Fleet's own cases (rancher/fleet v0.16.1
    /// `internal/cmd/controller/agentmanagement/agent/manifest_test.go` `TestImageResolve`: the
    /// `fleet-controller` configuration's `systemDefaultRegistry` ends with `/`, as `charts/fleet`
    /// writes it), then a prefix the image already has and one `path.Join` cleans.
    #[test]
    fn images_resolve_as_fleet_resolves_them() {
        let rows = [
            ("", "", "rancher/fleet:dev", "rancher/fleet:dev"),
            (
                "mirror.example/",
                "",
                "mirror.example/rancher/fleet:dev",
                "mirror.example/rancher/fleet:dev",
            ),
            (
                "mirror.example/",
                "local.example",
                "mirror.example/rancher/fleet:dev",
                "local.example/rancher/fleet:dev",
            ),
            (
                "",
                "local.example/",
                "local.example/rancher/fleet:dev",
                "local.example/rancher/fleet:dev",
            ),
            (
                "",
                "local.example:5000/",
                "rancher//fleet:dev",
                "local.example:5000/rancher/fleet:dev",
            ),
        ];
        for (global, prefix, image, expected) in rows {
            assert_eq!(
                resolve_image(global, prefix, image),
                expected,
                "{global} {prefix} {image}"
            );
        }
    }

    #[test]
    fn tolerations_are_fleet_s_defaults_then_the_cluster_s_sorted_from_0_14_1() {
        let agent = [
            json!({"key": "z", "operator": "Exists"}),
            json!({"key": "a", "operator": "Exists", "effect": "NoSchedule"}),
            json!({"key": "a", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}),
            json!({"key": "a", "operator": "Exists", "effect": "NoExecute"}),
        ];
        let keys = |list: Vec<Value>| -> Vec<String> {
            list.iter()
                .map(|t| {
                    format!(
                        "{}/{}/{}",
                        t["key"].as_str().unwrap_or_default(),
                        t["effect"].as_str().unwrap_or_default(),
                        t["tolerationSeconds"]
                    )
                })
                .collect()
        };
        let defaults = [
            "node.cloudprovider.kubernetes.io/uninitialized/NoSchedule/null",
            "cattle.io/os/NoSchedule/null",
        ];
        let unsorted: Vec<String> = defaults
            .iter()
            .map(|s| s.to_string())
            .chain(
                [
                    "z//null",
                    "a/NoSchedule/null",
                    "a/NoExecute/5",
                    "a/NoExecute/null",
                ]
                .map(String::from),
            )
            .collect();
        assert_eq!(keys(tolerations(&agent, v("0.14.0"))), unsorted);
        let sorted: Vec<String> = defaults
            .iter()
            .map(|s| s.to_string())
            .chain(
                [
                    "a/NoExecute/null",
                    "a/NoExecute/5",
                    "a/NoSchedule/null",
                    "z//null",
                ]
                .map(String::from),
            )
            .collect();
        assert_eq!(keys(tolerations(&agent, v("0.14.1"))), sorted);
    }

    #[test]
    fn env_in_fleet_s_order_per_minor() {
        let agent_env = [json!({"name": "NAMESPACE", "value": "overridden"})];
        let options = EnvOptions {
            bundle_deployment_workers: "50",
            drift_workers: "50",
            agent_scope: "fleet-addon-agent",
            checkin_interval: "15m0s",
            agent_env: &agent_env,
        };
        let names = |version: &str| -> Vec<String> {
            env(&options, v(version))
                .iter()
                .map(|e| e["name"].as_str().unwrap_or_default().to_string())
                .collect()
        };
        let base = [
            "BUNDLEDEPLOYMENT_RECONCILER_WORKERS",
            "DRIFT_RECONCILER_WORKERS",
            "NAMESPACE",
            "AGENT_SCOPE",
            "CHECKIN_INTERVAL",
            "CATTLE_ELECTION_LEASE_DURATION",
            "CATTLE_ELECTION_RETRY_PERIOD",
            "CATTLE_ELECTION_RENEW_DEADLINE",
        ];
        for version in ["0.12.19", "0.13.15", "0.16.0", "0.16.1"] {
            let mut expected: Vec<&str> = base.to_vec();
            expected.push("NAMESPACE");
            assert_eq!(names(version), expected, "{version}");
        }
        for version in ["0.14.0", "0.15.6"] {
            let mut expected: Vec<&str> = base.to_vec();
            expected.extend(["EXPERIMENTAL_COPY_RESOURCES_DOWNSTREAM", "NAMESPACE"]);
            assert_eq!(names(version), expected, "{version}");
        }
        let built = env(&options, v("0.16.1"));
        assert_eq!(built[3]["value"], "fleet-addon-agent");
        assert_eq!(built[4]["value"], "15m0s");
        assert_eq!(built[8]["value"], "overridden");
    }

    #[test]
    fn affinity_is_the_cluster_s_or_fleet_s_default() {
        let own = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}});
        assert_eq!(affinity(Some(&own)), own);
        assert_eq!(
            affinity(None)["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["preference"]
                ["matchExpressions"][0]["key"],
            "fleet.cattle.io/agent"
        );
    }

    /// rancher/fleet v0.16.1 `scheduling.go`: the PriorityClass, and the budget's switch.
    #[test]
    fn scheduling_objects_are_fleet_s() {
        let class = scheduling_objects(
            Some(&json!({"priorityClass": {"value": 1000, "preemptionPolicy": "Never"}})),
            "agents",
            v("0.16.1"),
        );
        assert_eq!(
            class,
            [
                json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": "fleet-agent-priority-class"}, "value": 1000,
                "description": "Priority class for Fleet Agent", "preemptionPolicy": "Never"})
            ]
        );
        // (minAvailable, maxUnavailable) -> the budget's limit, or none.
        let rows = [
            (None, None, Some(("maxUnavailable", json!(0)))),
            (None, Some("1"), Some(("maxUnavailable", json!(1)))),
            (
                Some("0"),
                Some("50%"),
                Some(("maxUnavailable", json!("50%"))),
            ),
            (Some("2"), None, Some(("minAvailable", json!(2)))),
            (Some("2"), Some("0"), Some(("minAvailable", json!(2)))),
            (Some("1"), Some("1"), None),
        ];
        for (min, max, expected) in rows {
            let mut budget = json!({});
            if let Some(min) = min {
                budget["minAvailable"] = json!(min);
            }
            if let Some(max) = max {
                budget["maxUnavailable"] = json!(max);
            }
            let objects = scheduling_objects(
                Some(&json!({"podDisruptionBudget": budget})),
                "agents",
                v("0.14.0"),
            );
            match expected {
                None => assert!(objects.is_empty(), "{min:?} {max:?}: {objects:?}"),
                Some((key, value)) => {
                    let mut spec = json!({"selector": {"matchLabels": {"app": "fleet-agent"}}});
                    spec[key] = value;
                    assert_eq!(
                        objects,
                        [
                            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                            "metadata": {"name": "fleet-agent-pod-disruption-budget", "namespace": "agents"},
                            "spec": spec})
                        ],
                        "{min:?} {max:?}"
                    );
                }
            }
        }
        // Before 0.14 the field does not exist; without it, nothing.
        let both = json!({"priorityClass": {"value": 1}, "podDisruptionBudget": {}});
        assert!(scheduling_objects(Some(&both), "agents", v("0.13.15")).is_empty());
        assert_eq!(
            scheduling_objects(Some(&both), "agents", v("0.14.0")).len(),
            2
        );
        assert!(scheduling_objects(None, "agents", v("0.16.1")).is_empty());
    }
}
