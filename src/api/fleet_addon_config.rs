//! The `FleetAddonConfig` API (`addons.cluster.x-k8s.io/v1alpha1`).
//!
//! Every field of the existing CAAPF API keeps its JSON name and meaning; fields added by this
//! provider are optional and documented as such. All fields are `Option`s so that any object a
//! user can store deserialises: problems a structural schema cannot express are reported by
//! [`crate::model::validation::validate`] instead of breaking the watch.

use std::collections::BTreeMap;

use fleet_api_rs::fleet_cluster::{
    ClusterAgentAffinity, ClusterAgentEnvVars, ClusterAgentResources,
    ClusterAgentSchedulingCustomization, ClusterAgentTolerations,
};
use k8s_openapi::api::core::v1::{ObjectReference, SecretReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_with::skip_serializing_none;

use super::fleet_addon_config_status::FleetAddonConfigStatus;
use super::schema::{
    DNS1123_LABEL, GO_DURATION, free_form_object, label_selector_grammar, secret_reference_grammar,
};
use crate::names;

/// Desired configuration of the provider: which parts are enabled and how they behave.
#[skip_serializing_none]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    doc = "Configuration of the Cluster API add-on provider for Fleet. A cluster-scoped singleton named `fleet-addon-config`. When it does not exist, the provider imports every CAPI Cluster and keeps a ClusterGroup for every ClusterClass; when it exists, a missing section disables that part of the provider.",
    group = "addons.cluster.x-k8s.io",
    version = "v1alpha1",
    kind = "FleetAddonConfig",
    plural = "fleetaddonconfigs",
    singular = "fleetaddonconfig",
    status = "FleetAddonConfigStatus",
    validation = Rule::new("self.metadata.name == 'fleet-addon-config'")
        .message("FleetAddonConfig is a singleton: its name must be 'fleet-addon-config'"),
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Fleet","type":"string","description":"Installed Fleet version","jsonPath":".status.installedVersion"}"#,
    printcolumn = r#"{"name":"Imported","type":"integer","description":"CAPI Clusters imported into Fleet","jsonPath":".status.clusters.imported","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct FleetAddonConfigSpec {
    /// Enables the ClusterClass integration: a Fleet ClusterGroup is kept for every ClusterClass,
    /// with the same name and namespace. Absent (in an existing FleetAddonConfig): disabled.
    pub cluster_class: Option<ClusterClassConfig>,

    /// Enables the Cluster import: a Fleet Cluster is kept for every selected CAPI Cluster, in the
    /// same namespace. If the Cluster uses a ClusterClass, the class name and namespace are added to
    /// the Fleet Cluster labels. Absent (in an existing FleetAddonConfig): disabled.
    pub cluster: Option<ClusterConfig>,

    /// Fleet server settings: API server URL and CA handed to agents, feature gates, local-cluster
    /// bootstrap.
    pub config: Option<FleetConfig>,

    /// Installs and upgrades Fleet with helm. Absent: Fleet is not installed by this provider (and
    /// removing this section leaves an installed Fleet in place).
    pub install: Option<FleetInstall>,

    /// Behaviour of the Cluster API Runtime SDK extension (lifecycle hooks). Added by this
    /// provider.
    pub runtime_extension: Option<RuntimeExtensionConfig>,
}

/// Runtime SDK extension settings.
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeExtensionConfig {
    /// The BeforeClusterUpgrade hook.
    pub before_cluster_upgrade: Option<BeforeClusterUpgradeConfig>,

    /// Every step of a Kubernetes upgrade (BeforeClusterUpgrade, BeforeControlPlaneUpgrade,
    /// AfterControlPlaneUpgrade, BeforeWorkersUpgrade, AfterWorkersUpgrade, AfterClusterUpgrade):
    /// whether a step waits for the Cluster's Fleet bundles (docs/lifecycle.md). The Fleet
    /// Cluster shows each step (labels and `templateValues.KubernetesVersions`) whatever this
    /// says. Added by this provider.
    pub upgrade_steps: Option<UpgradeStepsConfig>,
    /// The BeforeClusterDelete hook: remove a Cluster's Fleet workloads before Cluster API
    /// deletes its infrastructure (docs/lifecycle.md). Added by this provider.
    pub before_cluster_delete: Option<BeforeClusterDeleteConfig>,

    /// Chart repository holding Fleet's `fleet-agent` chart, rendered into the agent bootstrap
    /// of new clusters at the installed Fleet version: `https://…` or `oci://…` (plain
    /// `http://` only for loopback addresses). Default: `spec.install.repository` when Fleet is
    /// installed by this provider, else `https://rancher.github.io/fleet-helm-charts/`. Set it
    /// to a mirror on air-gapped sites that install Fleet themselves. Plain `http://` elsewhere
    /// needs `agentChartTLSConfig.insecurePlainHTTP`; no user information (credentials come
    /// from `agentChartCredentials`). Added by this provider.
    #[schemars(regex(pattern = r"^(https|oci|http)://[^\s]+$"))]
    pub agent_chart_repository: Option<String>,

    /// Credentials for the registry of the `fleet-agent` chart (an `oci://` repository), as
    /// `spec.install.credentials`. Default: `spec.install.credentials` when the agent chart
    /// comes from the repository Fleet is installed from. Added by this provider.
    pub agent_chart_credentials: Option<RegistryCredentials>,

    /// TLS settings for the repository of the `fleet-agent` chart, as `spec.install.tlsConfig`.
    /// Default: `spec.install.tlsConfig` when the agent chart comes from the repository Fleet
    /// is installed from. Added by this provider.
    #[serde(rename = "agentChartTLSConfig")]
    pub agent_chart_tls_config: Option<ChartTlsConfig>,
}

/// Credentials of a chart repository, as cluster-api-addon-provider-helm's `HelmChartProxy`
/// `credentials`: for an `oci://` registry, a Secret holding a registry configuration (the
/// `config.json` that `helm registry login` and `docker login` write: `{"auths":
/// {"<host>[:<port>]": {"auth": "<base64 of user:password>"}}}`); for an `https://` chart
/// repository, a `kubernetes.io/basic-auth` Secret (keys `username` and `password`, as Fleet's
/// `helmSecretName`).
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("required" = ["secret"]))]
pub struct RegistryCredentials {
    /// The Secret: `name` and `namespace` (both required: FleetAddonConfig is cluster-scoped).
    #[schemars(transform = secret_reference_grammar)]
    pub secret: Option<SecretReference>,

    /// The key of the Secret holding the registry configuration (`oci://` only). Default:
    /// `config.json` (a Secret of type `kubernetes.io/dockerconfigjson` has it under
    /// `.dockerconfigjson`).
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[-._a-zA-Z0-9]+$"))]
    pub key: Option<String>,
}

/// TLS settings for a chart repository or registry, as cluster-api-addon-provider-helm's
/// `HelmChartProxy` `tlsConfig`.
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChartTlsConfig {
    /// A Secret (`name` and `namespace`, both required) whose key `ca.crt` holds the PEM CA
    /// the repository's certificate is verified with (helm `--ca-file`).
    #[schemars(transform = secret_reference_grammar)]
    pub ca_secret: Option<SecretReference>,

    /// Do not verify the repository's certificate (helm `--insecure-skip-tls-verify`).
    /// Default: false.
    #[serde(rename = "insecureSkipTLSVerify")]
    pub insecure_skip_tls_verify: Option<bool>,

    /// Reach the repository over plain HTTP on any host (helm `--plain-http` for an `oci://`
    /// registry; an `http://` repository anywhere), e.g. a registry inside the cluster. Never
    /// inferred. Default: false (plain HTTP only on 127.0.0.1, localhost and [::1]).
    #[serde(rename = "insecurePlainHTTP")]
    pub insecure_plain_http: Option<bool>,
}

/// BeforeClusterUpgrade settings.
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BeforeClusterUpgradeConfig {
    /// Hold a Kubernetes upgrade of a Cluster until every Fleet bundle deployed to it is ready
    /// (the upgrade waits, with the names of the bundles that are not ready in the Cluster's
    /// `TopologyReconciled` condition). Default: false (upgrades are never held).
    pub wait_for_bundles_ready: Option<bool>,
}

/// Upgrade step settings; a Cluster overrides them with the annotations
/// `fleet.addons.cluster.x-k8s.io/wait-for-bundles` and
/// `fleet.addons.cluster.x-k8s.io/upgrade-gate-timeout`.
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeStepsConfig {
    /// Hold each step of an upgrade until the Fleet Cluster shows it and every Fleet bundle of
    /// the Cluster is ready for it (the hook's message names the bundles that are not; Cluster
    /// API shows it in the Cluster's `TopologyReconciled` condition). Default: false.
    pub wait_for_bundles_ready: Option<bool>,
    /// How long one step waits at most; then it goes on (a Warning Event says so). A Go
    /// duration such as `30m`. Default: `30m`.
    pub timeout: Option<String>,
    /// How long Fleet gets to re-target its bundles after the Fleet Cluster shows a step, before
    /// the bundles' states are believed (Fleet reports no observed generation). A Go duration.
    /// Default: `10s`.
    pub settle: Option<String>,
    /// The bundles a gate waits for: those whose BundleDeployments carry these labels (Fleet
    /// copies a Bundle's labels to its BundleDeployments; in `fleet.yaml`, `labels`). Default:
    /// every bundle that targets the Cluster. A Cluster overrides it with the annotation
    /// `fleet.addons.cluster.x-k8s.io/upgrade-gate-bundles` (`key=value,key2=value2`).
    #[schemars(transform = label_selector_grammar)]
    pub bundle_selector: Option<LabelSelector>,
}

/// BeforeClusterDelete settings.
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BeforeClusterDeleteConfig {
    /// Before Cluster API deletes a Cluster's infrastructure, remove the workloads Fleet deployed
    /// to it (load balancers and volumes they created would otherwise leak): the Cluster's Fleet
    /// Cluster loses the labels bundles select it by and gains
    /// `fleet.addons.cluster.x-k8s.io/teardown: "true"`, Fleet removes the BundleDeployments
    /// that no longer target it and its agent uninstalls them, and the deletion waits (at most
    /// `timeout`) until they are gone. The Cluster annotation
    /// `fleet.addons.cluster.x-k8s.io/remove-workloads-before-delete` (`"true"`/`"false"`)
    /// overrides this per Cluster. Default: false.
    pub remove_workloads: Option<bool>,

    /// How long after a Cluster's deletion started its deletion may wait for its Fleet
    /// workloads to be removed (Go duration, e.g. `30m`, `1h`); then it proceeds anyway, with a
    /// Warning Event. Default: `30m`.
    #[schemars(regex(pattern = GO_DURATION))]
    pub timeout: Option<String>,
}

/// ClusterClass → ClusterGroup settings.
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterClassConfig {
    /// Set an owner reference from the ClusterClass on its ClusterGroup, so that the group is
    /// garbage-collected with the class. Only `true` enables it.
    pub set_owner_references: Option<bool>,

    /// Keep the ClusterGroup in its desired state with server-side apply. Otherwise it is only
    /// created when missing (and re-created when removed), never updated.
    pub patch_resource: Option<bool>,
}

/// CAPI Cluster → Fleet Cluster settings.
#[skip_serializing_none]
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterConfig {
    /// For a Cluster using a ClusterClass from another namespace, create a ClusterGroup
    /// `<class>.<class namespace>` in the Cluster's namespace and a BundleNamespaceMapping in the
    /// class namespace, so bundles next to the class can target the Cluster.
    pub apply_class_group: Option<bool>,

    /// Keep the Fleet Cluster in its desired state with server-side apply. Otherwise it is only
    /// created when missing (and re-created when removed), never updated.
    pub patch_resource: Option<bool>,

    /// Set an owner reference from the CAPI Cluster on its Fleet Cluster, so that the Fleet Cluster
    /// is garbage-collected with it. Only `true` enables it.
    pub set_owner_references: Option<bool>,

    /// Naming of the Fleet Cluster: prefix + CAPI Cluster name + suffix.
    pub naming: Option<NamingStrategy>,

    /// Namespace the Fleet agent is installed into on the workload cluster.
    /// Default: `fleet-addon-agent`.
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = DNS1123_LABEL)
    )]
    pub agent_namespace: Option<String>,

    /// Tolerations of the Fleet agent. Default: tolerate `node.kubernetes.io/not-ready` (every
    /// effect), `node.cluster.x-k8s.io/uninitialized`,
    /// `node.cloudprovider.kubernetes.io/uninitialized` and `node-role.kubernetes.io/control-plane`,
    /// so the agent runs on a fresh control plane and on clusters of control-plane nodes only.
    pub agent_tolerations: Option<Vec<ClusterAgentTolerations>>,

    /// Run the Fleet agent with `hostNetwork: true`, so it works before a CNI is installed.
    /// Default `true`, with or without a FleetAddonConfig.
    pub host_network: Option<bool>,

    /// Extra environment variables for the Fleet agent deployment.
    pub agent_env_vars: Option<Vec<ClusterAgentEnvVars>>,

    /// Affinity of the Fleet agent (Fleet Cluster `spec.agentAffinity`; replaces Fleet's default
    /// preferred node affinity `fleet.cattle.io/agent=true`). Added by this provider.
    pub agent_affinity: Option<ClusterAgentAffinity>,

    /// Resources of the Fleet agent container (Fleet Cluster `spec.agentResources`). Added by
    /// this provider.
    pub agent_resources: Option<ClusterAgentResources>,

    /// Priority class and disruption budget of the Fleet agent (Fleet Cluster
    /// `spec.agentSchedulingCustomization`, Fleet 0.14 and later). Added by this provider.
    pub agent_scheduling_customization: Option<ClusterAgentSchedulingCustomization>,

    /// Registry prefix for the Fleet agent image (Fleet Cluster `spec.privateRepoURL`): a host,
    /// optionally with a port and path, without a scheme. Added by this provider.
    #[serde(rename = "privateRepoURL")]
    pub private_repo_url: Option<String>,

    /// Agent settings for the Clusters matching a label selector, applied over the settings
    /// above and a ClusterClass's `fleet.addons.cluster.x-k8s.io/agent-settings` annotation, in
    /// list order; a Cluster's own annotation applies last (docs/agent-settings.md). Added by
    /// this provider.
    #[x_kube(merge_strategy = ListMerge::Atomic)]
    pub agent_overrides: Option<Vec<AgentOverride>>,

    /// Select Clusters by their labels. Empty or absent: this rule is not set.
    /// Selection: each rule that is set (`selector`, `namespaceSelector`, `namespaceRegexes`)
    /// selects the Clusters it matches (OR); when no rule is set, every Cluster is selected.
    #[schemars(transform = label_selector_grammar)]
    pub selector: Option<LabelSelector>,

    /// Select Clusters by the labels of their namespace. Empty or absent: this rule is not set.
    #[schemars(transform = label_selector_grammar)]
    pub namespace_selector: Option<LabelSelector>,

    /// Select Clusters whose namespace name fully matches any of these regular expressions
    /// (Rust `regex` syntax, implicitly anchored at both ends). Empty or absent: this rule is not
    /// set. Added by this provider.
    #[x_kube(merge_strategy = ListMerge::Atomic)]
    pub namespace_regexes: Option<Vec<String>>,

    /// Register every selected Cluster with Fleet agent-initiated: the Fleet Cluster gets a client
    /// ID instead of a kubeconfig Secret, and a ClusterRegistrationToken is created for its agent.
    pub agent_initiated: Option<bool>,

    /// Register the selected Clusters that also match this label selector agent-initiated.
    /// Empty or absent: none (unless `agentInitiated` is true). Added by this provider.
    #[schemars(transform = label_selector_grammar)]
    pub agent_initiated_selector: Option<LabelSelector>,

    /// Time to live of the ClusterRegistrationToken created for an agent-initiated Cluster (Go
    /// duration, e.g. `24h`, `90m`). Fleet deletes the token when it expires; an agent that has
    /// not registered by then cannot. Default: `24h`. Added by this provider.
    #[serde(rename = "registrationTokenTTL")]
    #[schemars(regex(pattern = GO_DURATION))]
    pub registration_token_ttl: Option<String>,

    /// What happens to the Fleet Cluster of a CAPI Cluster that stops being selected (or when
    /// import is disabled): `Retain` (default) keeps it, `Delete` deletes it. Either way the
    /// Cluster loses our finalizer. Added by this provider.
    #[schemars(regex(pattern = r"^(Retain|Delete)$"))]
    pub deselect_policy: Option<String>,

    /// Write the `FleetReady` condition on the status of every imported CAPI Cluster (Fleet agent
    /// registration and bundle readiness, usable in `spec.availabilityGates`). `false` removes
    /// the condition this provider wrote and writes none. Default: true. Added by this provider.
    pub set_fleet_ready_condition: Option<bool>,

    /// How often Fleet agents check in (Fleet's `agentCheckinInterval`, a Go duration). An agent
    /// not seen for more than twice this interval is reported as not seen in `FleetReady`.
    /// Default: `spec.install.values.agentCheckinInterval` when set, else Fleet's default `15m`.
    /// Added by this provider.
    #[schemars(regex(pattern = GO_DURATION))]
    pub agent_checkin_interval: Option<String>,

    /// Move the Clusters matching this label selector into themselves through Fleet, so they
    /// manage themselves (docs/self-managed.md). Empty or absent: none, except Clusters labelled
    /// `fleet.addons.cluster.x-k8s.io/self-managed: "true"`. Never by default. Added by this
    /// provider.
    #[schemars(transform = label_selector_grammar)]
    pub self_managed_selector: Option<LabelSelector>,

    /// Topology variables copied to the Fleet Cluster as labels
    /// `variable.fleet.addons.cluster.x-k8s.io/<name>` (values that are valid label values;
    /// a Warning Event names the others). Added by this provider.
    pub variable_labels: Option<Vec<String>>,

    /// Rollout waves (docs/rollout.md): every Fleet Cluster gets label
    /// `rollout-wave.fleet.addons.cluster.x-k8s.io`, and `rollout-hold.fleet.addons.cluster.x-k8s.io`
    /// while held. Added by this provider.
    pub rollout: Option<RolloutConfig>,
}

/// `spec.cluster.rollout`.
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutConfig {
    /// Topology variable naming a Cluster's wave (the ClusterClass's schema default is the
    /// class's default wave). The Cluster annotation `fleet.addons.cluster.x-k8s.io/rollout-wave`
    /// wins over it.
    pub wave_variable: Option<String>,
    /// Wave names, in rollout order (label values).
    pub waves: Option<Vec<String>>,
    /// Wave of Clusters naming none. Default: the last wave.
    pub default_wave: Option<String>,
    /// How long later waves wait after an earlier wave's clusters are all ready again (Go
    /// duration). Default: no soak.
    #[schemars(regex(pattern = GO_DURATION))]
    pub soak: Option<String>,
    /// When later waves are held besides.
    pub hold: Option<RolloutHoldConfig>,
    /// Kubernetes upgrades follow the waves too: BeforeClusterUpgrade holds a Cluster while a
    /// Cluster of an earlier wave of its ClusterClass is below the target version, or has not
    /// been `FleetReady` and `Available` for `soak` since it reached it. Default: false.
    pub kubernetes_upgrades: Option<bool>,
}

/// `spec.cluster.rollout.hold`.
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutHoldConfig {
    /// Clusters of an earlier wave with a failing bundle that hold the later waves. Default 1
    /// (`0` or less counts as 1).
    pub failing_clusters: Option<i32>,
}

/// The Fleet agent settings of one layer: an entry of `spec.cluster.agentOverrides`, or the
/// `fleet.addons.cluster.x-k8s.io/agent-settings` annotation of a ClusterClass or Cluster. Each
/// field is the Fleet Cluster field of the same name; an absent field leaves the value of the
/// layers below (docs/agent-settings.md).
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentSettings {
    /// Namespace of the agent on the workload cluster.
    #[schemars(length(min = 1, max = 63), regex(pattern = DNS1123_LABEL))]
    pub agent_namespace: Option<String>,
    /// Tolerations, merged with the layers below by `key` and `effect`.
    pub agent_tolerations: Option<Vec<ClusterAgentTolerations>>,
    /// Environment variables, merged with the layers below by `name`.
    pub agent_env_vars: Option<Vec<ClusterAgentEnvVars>>,
    pub host_network: Option<bool>,
    pub agent_affinity: Option<ClusterAgentAffinity>,
    pub agent_resources: Option<ClusterAgentResources>,
    pub agent_scheduling_customization: Option<ClusterAgentSchedulingCustomization>,
    #[serde(rename = "privateRepoURL")]
    pub private_repo_url: Option<String>,
}

/// Agent settings for the Clusters a label selector matches.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentOverride {
    /// Which Clusters (by their labels) get these settings. An empty selector matches every
    /// selected Cluster.
    #[schemars(transform = label_selector_grammar)]
    pub selector: LabelSelector,
    /// The settings, over the FleetAddonConfig's and the ClusterClass's.
    pub settings: AgentSettings,
}

/// The Fleet Cluster name a naming gives a Cluster named `x` is a DNS-1123 subdomain. Its
/// strings are bounded (`maxLength`), so the API server's cost estimate of the rule is small.
const NAMING_RULE: &str = r"((has(self.prefix) ? self.prefix : '') + 'x' + (has(self.suffix) ? self.suffix : '')).matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')";

/// Fleet Cluster naming.
#[skip_serializing_none]
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[x_kube(validation = Rule::new(NAMING_RULE)
    .message("prefix and suffix must produce a DNS-1123 subdomain around the Cluster name (as for a Cluster named \"x\")"))]
pub struct NamingStrategy {
    /// Prefix prepended to the CAPI Cluster name.
    #[schemars(length(max = 63), regex(pattern = r"^[a-z0-9]([-a-z0-9.]*)?$"))]
    pub prefix: Option<String>,

    /// Suffix appended to the CAPI Cluster name.
    #[schemars(length(max = 63), regex(pattern = r"^([-a-z0-9.]*[a-z0-9])?$"))]
    pub suffix: Option<String>,
}

/// Fleet server settings.
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FleetConfig {
    /// The API server URL and CA that Fleet hands to agents (`apiServerURL`, `apiServerCA`).
    pub server: Option<Server>,

    /// Fleet experimental features, passed to Fleet as `EXPERIMENTAL_*` environment variables.
    pub feature_gates: Option<FeatureGates>,

    /// Install a Fleet agent in the management cluster itself (Fleet chart value
    /// `bootstrap.enabled`). Default: false.
    pub bootstrap_local_cluster: Option<bool>,
}

/// Where Fleet's API server URL and CA come from: exactly one of `inferLocal` or `custom`.
#[skip_serializing_none]
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.inferLocal) != has(self.custom)")
    .message("exactly one of inferLocal or custom must be set"))]
pub struct Server {
    /// Infer from the management cluster: CA from ConfigMap `default/kube-root-ca.crt`, URL from
    /// the `default/kubernetes` endpoints. Only reachable by workload clusters that can reach the
    /// management cluster's internal address.
    pub infer_local: Option<bool>,

    /// Explicit URL and CA.
    pub custom: Option<CustomServer>,
}

/// Explicit Fleet API server settings.
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CustomServer {
    /// Reference to a ConfigMap or Secret (`kind`, default ConfigMap) whose key `ca.crt` holds the
    /// PEM CA of the API server.
    pub api_server_ca_config_ref: Option<ObjectReference>,

    /// The API server URL, used verbatim.
    #[schemars(regex(pattern = r"^https?://"))]
    pub api_server_url: Option<String>,
}

/// Fleet experimental features.
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FeatureGates {
    /// Fleet `EXPERIMENTAL_OCI_STORAGE`. Default: true.
    pub experimental_oci_storage: Option<bool>,

    /// Fleet `EXPERIMENTAL_HELM_OPS`. Default: true.
    pub experimental_helm_ops: Option<bool>,

    /// Write the feature gates into a ConfigMap (its `fleet` values key) instead of the Fleet
    /// helm release, for a Fleet installed by someone else (e.g. Rancher's `rancher-config`).
    pub config_map: Option<FeaturesConfigMap>,
}

/// Reference to the ConfigMap the feature gates are written to.
#[skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct FeaturesConfigMap {
    /// The ConfigMap (`name` and `namespace`).
    #[serde(rename = "ref")]
    pub reference: Option<ObjectReference>,
}

/// Fleet installation: exactly one of `followLatest` or `version`.
#[skip_serializing_none]
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.followLatest) != has(self.version)")
    .message("exactly one of followLatest or version must be set"))]
pub struct FleetInstall {
    /// Install the latest chart; `true` also upgrades when a newer chart appears, `false` installs
    /// the latest once and never upgrades.
    pub follow_latest: Option<bool>,

    /// Install exactly this chart version (a leading `v` is accepted).
    #[schemars(regex(
        pattern = r"^v?[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$"
    ))]
    pub version: Option<String>,

    /// Chart repository URL: `https://…` or `oci://…` (plain `http://` only for loopback
    /// addresses, for local testing; an `oci://` registry on a loopback address is used over
    /// plain HTTP unless `tlsConfig` is set; `tlsConfig.insecurePlainHTTP` allows plain HTTP on
    /// any host); no user information (credentials come from `credentials`). Default:
    /// `https://rancher.github.io/fleet-helm-charts/`.
    /// Added by this provider.
    #[schemars(regex(pattern = r"^(https|oci|http)://[^\s]+$"))]
    pub repository: Option<String>,

    /// Credentials of the repository: for `oci://`, a Secret holding a registry `config.json`
    /// (cluster-api-addon-provider-helm's `credentials`); for `https://`, a
    /// `kubernetes.io/basic-auth` Secret. Added by this provider.
    pub credentials: Option<RegistryCredentials>,

    /// TLS settings of the repository: a CA from a Secret, or no verification
    /// (cluster-api-addon-provider-helm's `tlsConfig`). On an `oci://` registry at 127.0.0.1,
    /// localhost or [::1], its presence also says the registry serves HTTPS (without it, such
    /// a registry is used over plain HTTP). Added by this provider.
    pub tls_config: Option<ChartTlsConfig>,

    /// Namespace of the Fleet releases. Default: `cattle-fleet-system`. Added by this provider.
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = DNS1123_LABEL)
    )]
    pub namespace: Option<String>,

    /// Values for the `fleet` chart, merged under the values this provider sets (feature gates
    /// are appended to your `extraEnv`, not replacing it). Added by this provider.
    #[serde(default)] // a custom schema is required unless the field has a default
    #[schemars(schema_with = "free_form_object")]
    pub values: Option<BTreeMap<String, Value>>,
}

impl ClusterConfig {
    /// The agent fields of this section as written (no defaults): the lowest of a Cluster's
    /// agent settings layers (`crate::model::agent_settings`).
    pub fn agent_settings(&self) -> AgentSettings {
        AgentSettings {
            agent_namespace: self.agent_namespace.clone(),
            agent_tolerations: self.agent_tolerations.clone(),
            agent_env_vars: self.agent_env_vars.clone(),
            host_network: self.host_network,
            agent_affinity: self.agent_affinity.clone(),
            agent_resources: self.agent_resources.clone(),
            agent_scheduling_customization: self.agent_scheduling_customization.clone(),
            private_repo_url: self.private_repo_url.clone(),
        }
    }
}

impl FleetAddonConfig {
    /// The only name the API accepts for this singleton.
    pub const NAME: &'static str = names::CONFIG_NAME;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Absent fields stay absent when a spec is written back (`skip_serializing_none`): a `null`
    /// would be a change to every server-side apply and merge patch of the object.
    #[test]
    fn absent_fields_are_not_written() {
        for yaml in [
            "{}",
            "cluster: {naming: {}, selector: {}}",
            "install: {followLatest: true, credentials: {secret: {name: r, namespace: ns}}, tlsConfig: {}}",
            "config: {server: {custom: {apiServerCaConfigRef: {name: ca, namespace: default}}}, featureGates: {configMap: {}}}",
            "runtimeExtension: {agentChartTLSConfig: {insecureSkipTLSVerify: true}, upgradeSteps: {}, beforeClusterDelete: {}}",
            "cluster: {agentOverrides: [{selector: {matchLabels: {a: b}}, settings: {privateRepoURL: r.example.com}}], registrationTokenTTL: 1h}",
        ] {
            let given: serde_json::Value = serde_yaml::from_str(yaml).expect("test spec");
            let spec: FleetAddonConfigSpec =
                serde_json::from_value(given.clone()).expect("the spec decodes");
            assert_eq!(
                serde_json::to_value(&spec).expect("the spec encodes"),
                given,
                "{yaml}"
            );
        }
    }
}
