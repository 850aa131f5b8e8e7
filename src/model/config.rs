//! The configuration every controller acts on, resolved from the `FleetAddonConfig` object.
//!
//! Two regimes, as in CAAPF (research §1.4):
//! - **object absent**: import every Cluster (manager-initiated, owner references on, patching
//!   on, cross-namespace class groups on, host network on) and keep a ClusterGroup per
//!   ClusterClass; feature gates on; Fleet is not installed.
//! - **object present**: a missing section disables that part; inside a present section a
//!   missing boolean is `false`, except `hostNetwork` (one default, `true`, in both regimes), the
//!   agent namespace, the agent tolerations and the feature gates, which keep their defaults.

use std::time::Duration;

use fleet_api_rs::fleet_cluster::ClusterAgentTolerations;
use k8s_openapi::api::core::v1::ObjectReference;

use crate::api::{
    AgentSettings, BeforeClusterDeleteConfig, ClusterConfig, FleetAddonConfig,
    FleetAddonConfigSpec, FleetInstall, Server,
};
use crate::model::agent_settings::{self, CompiledOverride, LayerProblem, Layers};
use crate::model::capi::ClusterView;
use crate::model::chart_access::{self, ChartAccess};
use crate::model::selection::{AgentInitiated, ClusterSelection};
use crate::model::validation::{FieldError, validate};
use crate::model::version::ChartVersion;
use crate::names;

/// Resolved configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct EffectiveConfig {
    /// Cluster import; `None` when disabled.
    pub cluster: Option<ClusterImport>,
    /// ClusterClass → ClusterGroup; `None` when disabled.
    pub cluster_class: Option<ClassGroups>,
    /// Fleet server settings.
    pub fleet: FleetSettings,
    /// Fleet installation; `None` when this provider does not install Fleet.
    pub install: Option<InstallSettings>,
    /// Runtime SDK extension behaviour.
    pub runtime_extension: RuntimeExtensionSettings,
    /// Problems in the spec, with field paths (empty when valid).
    pub problems: Vec<FieldError>,
    /// `metadata.generation` of the object it came from (`None` when absent).
    pub generation: Option<i64>,
}

/// How CAPI Clusters become Fleet Clusters.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterImport {
    pub selection: ClusterSelection,
    pub agent_initiated: AgentInitiated,
    pub apply_class_group: bool,
    pub patch_resource: bool,
    pub set_owner_references: bool,
    pub name_prefix: String,
    pub name_suffix: String,
    /// The agent settings of every Cluster before its class, `agentOverrides` and own annotation
    /// apply ([`crate::model::agent_settings`]): `spec.cluster`'s agent fields with the defaults
    /// filled in (agent namespace, tolerations), so `agentNamespace` and `agentTolerations` are
    /// always set; `hostNetwork` only when a layer sets it ([`DEFAULT_HOST_NETWORK`]).
    pub agent: AgentSettings,
    /// `spec.cluster.agentOverrides`, selectors compiled.
    pub agent_overrides: Vec<CompiledOverride>,
    /// TTL of registration tokens (Go duration).
    pub registration_token_ttl: String,
    /// Delete the Fleet Cluster of a Cluster that stops being selected.
    pub delete_deselected: bool,
    /// Write the `FleetReady` condition on imported Clusters.
    pub fleet_ready_condition: bool,
    /// Fleet's agent check-in interval (how often agents update `status.agent.lastSeen`).
    pub agent_checkin_interval: Duration,
    /// `spec.cluster.selfManagedSelector`: Clusters it matches are moved into themselves
    /// (docs/self-managed.md; [`crate::model::move_state::opted_in`]).
    pub self_managed_selector:
        Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
    /// `spec.cluster.variableLabels`.
    pub variable_labels: Vec<String>,
    /// `spec.cluster.rollout` (`None`: no waves).
    pub rollout: Option<crate::model::rollout::Rollout>,
}

impl EffectiveConfig {
    /// The chart repository of Fleet's `fleet-agent` chart: `spec.runtimeExtension.
    /// agentChartRepository`, else the repository Fleet is installed from, else Fleet's public
    /// repository.
    pub fn agent_chart_repository(&self) -> &str {
        self.runtime_extension
            .agent_chart_repository
            .as_deref()
            .or(self
                .install
                .as_ref()
                .map(|install| install.repository.as_str()))
            .unwrap_or(crate::names::DEFAULT_FLEET_REPOSITORY)
    }

    /// How the `fleet-agent` chart's repository is reached: `spec.runtimeExtension.
    /// agentChartCredentials` and `agentChartTLSConfig`, each else `spec.install`'s when the
    /// agent chart comes from the repository Fleet is installed from (never another
    /// repository's credentials).
    pub fn agent_chart_access(&self) -> ChartAccess {
        let own = &self.runtime_extension.agent_chart_access;
        let repository = self.agent_chart_repository();
        let inherited = self
            .install
            .as_ref()
            .filter(|install| install.repository == repository)
            .map(|install| &install.access);
        let Some(inherited) = inherited else {
            return own.clone();
        };
        // Each setting from where it is set: our own, else the inherited one.
        let from = |own_set: bool| if own_set { own } else { inherited };
        let (credentials, tls) = (from(own.credentials.is_some()), from(own.tls.is_some()));
        ChartAccess {
            credentials: credentials.credentials.clone(),
            credentials_field: credentials.credentials_field,
            tls: tls.tls.clone(),
            tls_field: tls.tls_field,
        }
    }
}

impl ClusterImport {
    /// The agent settings of `cluster`, its ClusterClass's `agent-settings` annotation being
    /// `class_annotation` (as read from the class, `None` when it has none or no class): this
    /// configuration's, the class's, the matching `agentOverrides` and the Cluster's own
    /// ([`agent_settings::resolve`]).
    pub fn agent_settings(
        &self,
        cluster: &ClusterView,
        class_annotation: Option<&str>,
    ) -> Result<AgentSettings, Vec<LayerProblem>> {
        agent_settings::resolve(Layers {
            defaults: &self.agent,
            class: cluster.class.as_ref().map(|class| {
                (
                    class.namespace.as_str(),
                    class.name.as_str(),
                    class_annotation,
                )
            }),
            overrides: &self.agent_overrides,
            cluster_labels: &cluster.labels,
            cluster_annotation: cluster
                .annotations
                .get(names::AGENT_SETTINGS_ANNOTATION)
                .map(String::as_str),
        })
    }

    /// Name of the Fleet Cluster for a CAPI Cluster.
    pub fn fleet_cluster_name(&self, capi_name: &str) -> String {
        format!("{}{capi_name}{}", self.name_prefix, self.name_suffix)
    }
}

/// How the Runtime SDK extension behaves.
#[derive(Clone, Debug, PartialEq)]
pub struct RuntimeExtensionSettings {
    /// BeforeClusterUpgrade holds upgrades until the Cluster's Fleet bundles are ready.
    pub wait_for_bundles_ready: bool,
    /// Every upgrade step waits for the Cluster's Fleet bundles (`upgradeSteps`).
    pub step_wait_for_bundles_ready: bool,
    /// How long one upgrade step waits at most.
    pub step_timeout: Duration,
    /// How long Fleet gets to re-target after a step's labels were applied.
    pub step_settle: Duration,
    /// The bundles the upgrade gates wait for (`None`: every bundle of the Cluster).
    pub step_bundle_selector: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
    /// BeforeClusterDelete removes a Cluster's Fleet workloads first
    /// (`spec.runtimeExtension.beforeClusterDelete`; [`crate::model::teardown`]).
    pub teardown: TeardownSettings,
    /// Where Fleet's `fleet-agent` chart comes from, if set (`spec.runtimeExtension.
    /// agentChartRepository`); see [`EffectiveConfig::agent_chart_repository`].
    pub agent_chart_repository: Option<String>,
    /// `spec.runtimeExtension.agentChartCredentials` and `agentChartTLSConfig`, as written;
    /// see [`EffectiveConfig::agent_chart_access`].
    pub agent_chart_access: ChartAccess,
}

/// Default of `spec.runtimeExtension.upgradeSteps.timeout`.
pub const DEFAULT_STEP_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// Default of `spec.runtimeExtension.upgradeSteps.settle`: how long after a step's labels were
/// applied Fleet gets to re-target its bundles before a gate believes their states.
pub const DEFAULT_STEP_SETTLE: Duration = Duration::from_secs(10);

impl Default for RuntimeExtensionSettings {
    fn default() -> Self {
        Self {
            wait_for_bundles_ready: false,
            step_wait_for_bundles_ready: false,
            step_timeout: DEFAULT_STEP_TIMEOUT,
            step_settle: DEFAULT_STEP_SETTLE,
            step_bundle_selector: None,
            teardown: TeardownSettings::default(),
            agent_chart_repository: None,
            agent_chart_access: ChartAccess::from_spec(
                None,
                None,
                chart_access::AGENT_CREDENTIALS,
                chart_access::AGENT_TLS,
            ),
        }
    }
}

/// `spec.runtimeExtension.beforeClusterDelete`: whether a deleting Cluster's Fleet workloads
/// are removed before Cluster API deletes its infrastructure, and for how long its deletion may
/// wait for that.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TeardownSettings {
    /// `removeWorkloads` (default false); a Cluster's annotation overrides it.
    pub remove_workloads: bool,
    /// `timeout` (default [`DEFAULT_TEARDOWN_TIMEOUT`]), counted from the Cluster's
    /// `metadata.deletionTimestamp`.
    pub timeout: Duration,
}

impl Default for TeardownSettings {
    fn default() -> Self {
        Self {
            remove_workloads: false,
            timeout: DEFAULT_TEARDOWN_TIMEOUT,
        }
    }
}

/// Default of `spec.runtimeExtension.beforeClusterDelete.timeout`: long enough for Fleet to
/// remove the BundleDeployments (one controller reconcile each) and for a cloud to release
/// load balancers and volumes (minutes), short enough that a stuck removal does not keep a
/// deleted Cluster's machines for long.
pub const DEFAULT_TEARDOWN_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// How ClusterClasses become ClusterGroups.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassGroups {
    pub patch_resource: bool,
    pub set_owner_references: bool,
}

/// Fleet server settings.
#[derive(Clone, Debug, PartialEq)]
pub struct FleetSettings {
    pub experimental_oci_storage: bool,
    pub experimental_helm_ops: bool,
    /// ConfigMap to write the feature gates into instead of the helm release.
    pub feature_gates_config_map: Option<ObjectReference>,
    pub bootstrap_local_cluster: bool,
    /// `None`: leave Fleet's API server URL and CA alone.
    pub server: Option<ServerSource>,
}

/// Where Fleet's `apiServerURL`/`apiServerCA` come from.
#[derive(Clone, Debug, PartialEq)]
pub enum ServerSource {
    /// From the management cluster (`default/kubernetes` endpoints, `default/kube-root-ca.crt`).
    InferLocal,
    /// Explicit URL and/or CA reference (each optional: unset parts are left alone).
    Custom {
        url: Option<String>,
        ca_ref: Option<ObjectReference>,
    },
}

/// What to install, from where.
#[derive(Clone, Debug, PartialEq)]
pub struct InstallSettings {
    pub target: InstallTarget,
    pub repository: String,
    pub namespace: String,
    /// Credentials and TLS settings for the repository (`spec.install.credentials`,
    /// `spec.install.tlsConfig`).
    pub access: ChartAccess,
    /// User values for the `fleet` chart.
    pub values: serde_json::Map<String, serde_json::Value>,
}

/// Which chart version to run.
#[derive(Clone, Debug, PartialEq)]
pub enum InstallTarget {
    /// Latest chart; `upgrade` says whether newer charts are followed after the first install.
    Latest { upgrade: bool },
    /// Exactly this version, as written by the user (for `helm --version`) and parsed.
    Pinned {
        written: String,
        version: ChartVersion,
    },
}

impl Default for EffectiveConfig {
    /// The "object absent" regime.
    fn default() -> Self {
        Self {
            cluster: Some(ClusterImport {
                selection: ClusterSelection::everything(),
                agent_initiated: AgentInitiated::None,
                apply_class_group: true,
                patch_resource: true,
                set_owner_references: true,
                name_prefix: String::new(),
                name_suffix: String::new(),
                agent: default_agent_settings(&ClusterConfig::default()),
                agent_overrides: Vec::new(),
                registration_token_ttl: DEFAULT_REGISTRATION_TOKEN_TTL.to_string(),
                delete_deselected: false,
                fleet_ready_condition: true,
                agent_checkin_interval: DEFAULT_AGENT_CHECKIN_INTERVAL,
                self_managed_selector: None,
                variable_labels: vec![],
                rollout: None,
            }),
            cluster_class: Some(ClassGroups {
                patch_resource: true,
                set_owner_references: true,
            }),
            fleet: FleetSettings {
                experimental_oci_storage: true,
                experimental_helm_ops: true,
                feature_gates_config_map: None,
                bootstrap_local_cluster: false,
                server: None,
            },
            install: None,
            runtime_extension: RuntimeExtensionSettings::default(),
            problems: Vec::new(),
            generation: None,
        }
    }
}

impl EffectiveConfig {
    /// Resolves the configuration from the object, or the defaults when it is absent.
    pub fn resolve(object: Option<&FleetAddonConfig>) -> Self {
        match object {
            None => Self::default(),
            Some(object) => {
                let mut config = Self::from_spec(&object.spec);
                config.generation = object.metadata.generation;
                config
            }
        }
    }

    /// The "object present" regime.
    pub fn from_spec(spec: &FleetAddonConfigSpec) -> Self {
        let (runtime, fleet_config) = (spec.runtime_extension.as_ref(), spec.config.as_ref());
        let upgrade_steps = runtime.and_then(|r| r.upgrade_steps.as_ref());
        let gates = fleet_config.and_then(|config| config.feature_gates.as_ref());
        Self {
            cluster: spec
                .cluster
                .as_ref()
                .map(|cluster| cluster_import(cluster, spec.install.as_ref())),
            cluster_class: spec.cluster_class.as_ref().map(|class| ClassGroups {
                patch_resource: class.patch_resource == Some(true),
                set_owner_references: class.set_owner_references == Some(true),
            }),
            fleet: FleetSettings {
                experimental_oci_storage: gates
                    .and_then(|g| g.experimental_oci_storage)
                    .unwrap_or(true),
                experimental_helm_ops: gates.and_then(|g| g.experimental_helm_ops).unwrap_or(true),
                feature_gates_config_map: gates
                    .and_then(|g| g.config_map.as_ref())
                    .and_then(|cm| cm.reference.clone()),
                bootstrap_local_cluster: fleet_config
                    .and_then(|c| c.bootstrap_local_cluster)
                    .unwrap_or(false),
                server: fleet_config
                    .and_then(|c| c.server.as_ref())
                    .and_then(server_source),
            },
            install: spec.install.as_ref().and_then(install_settings),
            runtime_extension: RuntimeExtensionSettings {
                wait_for_bundles_ready: runtime
                    .and_then(|r| r.before_cluster_upgrade.as_ref())
                    .and_then(|b| b.wait_for_bundles_ready)
                    .unwrap_or(false),
                step_wait_for_bundles_ready: upgrade_steps
                    .and_then(|u| u.wait_for_bundles_ready)
                    .unwrap_or(false),
                step_timeout: upgrade_steps
                    .and_then(|u| u.timeout.as_deref())
                    .and_then(|t| crate::api::duration::parse_duration(t).ok())
                    .unwrap_or(DEFAULT_STEP_TIMEOUT),
                step_settle: upgrade_steps
                    .and_then(|u| u.settle.as_deref())
                    .and_then(|t| crate::api::duration::parse_duration(t).ok())
                    .unwrap_or(DEFAULT_STEP_SETTLE),
                step_bundle_selector: upgrade_steps.and_then(|u| u.bundle_selector.clone()),
                teardown: teardown_settings(runtime.and_then(|r| r.before_cluster_delete.as_ref())),
                agent_chart_repository: runtime
                    .and_then(|r| r.agent_chart_repository.clone())
                    .filter(|url| !url.trim().is_empty()),
                agent_chart_access: ChartAccess::from_spec(
                    runtime.and_then(|r| r.agent_chart_credentials.as_ref()),
                    runtime.and_then(|r| r.agent_chart_tls_config.as_ref()),
                    chart_access::AGENT_CREDENTIALS,
                    chart_access::AGENT_TLS,
                ),
            },
            problems: validate(spec),
            generation: None,
        }
    }

    /// Name of the Fleet Cluster of a CAPI Cluster: with the configured naming, or the CAPI name
    /// when import is disabled (what cleanup looks for).
    pub fn fleet_cluster_name(&self, capi_name: &str) -> String {
        self.cluster.as_ref().map_or_else(
            || capi_name.to_string(),
            |import| import.fleet_cluster_name(capi_name),
        )
    }

    /// Problems under a field path prefix (e.g. `spec.cluster`): a controller does not act on a
    /// section with problems, it keeps its last good state and reports them.
    pub fn problems_under<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = &'a FieldError> {
        self.problems.iter().filter(move |p| {
            p.path == prefix
                || p.path
                    .strip_prefix(prefix)
                    .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
        })
    }
}

/// `spec.runtimeExtension.beforeClusterDelete`; an unparseable or zero `timeout` is reported by
/// validation and the default applies.
fn teardown_settings(config: Option<&BeforeClusterDeleteConfig>) -> TeardownSettings {
    TeardownSettings {
        remove_workloads: config.and_then(|c| c.remove_workloads).unwrap_or(false),
        timeout: config
            .and_then(|c| c.timeout.as_deref())
            .and_then(|text| crate::api::duration::parse_duration(text).ok())
            .filter(|d| !d.is_zero())
            .unwrap_or(DEFAULT_TEARDOWN_TIMEOUT),
    }
}

fn cluster_import(config: &ClusterConfig, install: Option<&FleetInstall>) -> ClusterImport {
    let naming = config.naming.clone().unwrap_or_default();
    ClusterImport {
        selection: ClusterSelection::compile(config),
        agent_initiated: AgentInitiated::compile(config),
        apply_class_group: config.apply_class_group == Some(true),
        patch_resource: config.patch_resource == Some(true),
        set_owner_references: config.set_owner_references == Some(true),
        name_prefix: naming.prefix.unwrap_or_default(),
        name_suffix: naming.suffix.unwrap_or_default(),
        agent: default_agent_settings(config),
        agent_overrides: config
            .agent_overrides
            .iter()
            .flatten()
            .map(CompiledOverride::compile)
            .collect(),
        registration_token_ttl: config
            .registration_token_ttl
            .clone()
            .filter(|ttl| crate::api::duration::parse_duration(ttl).is_ok())
            .unwrap_or_else(|| DEFAULT_REGISTRATION_TOKEN_TTL.to_string()),
        delete_deselected: config.deselect_policy.as_deref() == Some("Delete"),
        fleet_ready_condition: config.set_fleet_ready_condition != Some(false),
        agent_checkin_interval: agent_checkin_interval(config, install),
        self_managed_selector: config.self_managed_selector.clone(),
        variable_labels: config.variable_labels.clone().unwrap_or_default(),
        rollout: config
            .rollout
            .as_ref()
            .and_then(crate::model::rollout::Rollout::compile),
    }
}

/// `spec.cluster`'s agent fields, defaults filled in: the lowest layer of every Cluster's agent
/// settings.
fn default_agent_settings(config: &ClusterConfig) -> AgentSettings {
    let mut settings = config.agent_settings();
    settings.agent_namespace = Some(
        settings
            .agent_namespace
            .filter(|ns| !ns.is_empty())
            .unwrap_or_else(|| names::DEFAULT_AGENT_NAMESPACE.to_string()),
    );
    settings.agent_tolerations = Some(
        settings
            .agent_tolerations
            .unwrap_or_else(default_agent_tolerations),
    );
    settings
}

/// The agent's host network when no layer sets `hostNetwork`, for a Cluster whose agent boots
/// through the runtime extension only ([`crate::model::fleet::boots_through_extension`]): the
/// agent a new cluster boots with must run before a CNI exists (rancher/fleet
/// `charts/fleet-agent/values.yaml` v0.12.0–v0.16.1 `fleetAgent.hostNetwork`), and the boot
/// script labels its namespace `privileged`. Any other Fleet Cluster keeps CAAPF's unset
/// (Fleet's `false`): Fleet creates the agent namespace without Pod Security labels (v0.16.1
/// `internal/cmd/agentmanagement/agent/agent.go` `AgentWithConfig`), so a `baseline` default
/// would refuse a host-network agent, and from 0.14.2 its Recreate strategy deletes the running
/// agent first (docs/migration.md).
pub const DEFAULT_HOST_NETWORK: bool = true;

/// Fleet's default `agentCheckinInterval` (rancher/fleet v0.16: `charts/fleet/values.yaml`
/// `agentCheckinInterval: "15m"`, and `pkg/durations` `DefaultClusterCheckInterval`, which
/// the agent uses when none is configured).
pub const DEFAULT_AGENT_CHECKIN_INTERVAL: Duration = Duration::from_secs(15 * 60);

/// `spec.cluster.agentCheckinInterval`, else the value we install Fleet with, else Fleet's
/// default. An unparseable value is reported by validation and ignored here.
fn agent_checkin_interval(config: &ClusterConfig, install: Option<&FleetInstall>) -> Duration {
    let from_install = install
        .and_then(|i| i.values.as_ref())
        .and_then(|v| v.get("agentCheckinInterval"))
        .and_then(serde_json::Value::as_str);
    config
        .agent_checkin_interval
        .as_deref()
        .or(from_install)
        .and_then(|text| crate::api::duration::parse_duration(text).ok())
        .filter(|d| !d.is_zero())
        .unwrap_or(DEFAULT_AGENT_CHECKIN_INTERVAL)
}

/// Default TTL of registration tokens: long enough for slow infrastructure to boot the first
/// control-plane machine, short enough that a leaked bootstrap Secret is soon useless.
pub const DEFAULT_REGISTRATION_TOKEN_TTL: &str = "24h";

fn server_source(server: &Server) -> Option<ServerSource> {
    match (&server.infer_local, &server.custom) {
        (Some(true), None) => Some(ServerSource::InferLocal),
        (None, Some(custom)) => Some(ServerSource::Custom {
            url: custom.api_server_url.clone(),
            ca_ref: custom.api_server_ca_config_ref.clone(),
        }),
        // `inferLocal: false` means "leave alone"; both set is reported by validation.
        _ => None,
    }
}

fn install_settings(install: &FleetInstall) -> Option<InstallSettings> {
    let target = match (&install.follow_latest, &install.version) {
        (Some(upgrade), None) => InstallTarget::Latest { upgrade: *upgrade },
        (None, Some(written)) => InstallTarget::Pinned {
            written: written.clone(),
            version: ChartVersion::parse(written)?,
        },
        // Neither or both: reported by validation; nothing to install.
        _ => return None,
    };
    Some(InstallSettings {
        target,
        repository: install
            .repository
            .clone()
            .unwrap_or_else(|| names::DEFAULT_FLEET_REPOSITORY.to_string()),
        namespace: install
            .namespace
            .clone()
            .unwrap_or_else(|| names::DEFAULT_FLEET_NAMESPACE.to_string()),
        access: ChartAccess::from_spec(
            install.credentials.as_ref(),
            install.tls_config.as_ref(),
            chart_access::INSTALL_CREDENTIALS,
            chart_access::INSTALL_TLS,
        ),
        values: install
            .values
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect(),
    })
}

/// The tolerations that let the agent run on a fresh control plane: not ready yet (no CNI),
/// not initialized by Cluster API or the cloud provider, and kubeadm's control-plane taint
/// (`node-role.kubernetes.io/control-plane:NoSchedule`, kubeadm `init`'s default), so a cluster
/// of control-plane nodes only registers too.
///
/// `node.kubernetes.io/not-ready` is tolerated with every effect (no `effect`): the node
/// lifecycle controller taints a NotReady node `NoSchedule` and also `NoExecute`, and a pod
/// without its own `NoExecute` toleration gets the DefaultTolerationSeconds admission plugin's
/// (300 s), so it would be evicted every 5 minutes while the node waits for its CNI
/// (kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration, "Taint based
/// Evictions"). Neither Fleet's `fleet-agent` chart nor its agent bundle
/// (rancher/fleet v0.12.0–v0.16.1 `manifest.go`) tolerates `not-ready`; the Fleet Cluster's
/// `agentTolerations` carry it to both.
pub fn default_agent_tolerations() -> Vec<ClusterAgentTolerations> {
    let toleration = |key: &str, operator: &str, value: Option<&str>, effect: Option<&str>| {
        ClusterAgentTolerations {
            key: Some(key.to_string()),
            operator: Some(operator.to_string()),
            value: value.map(str::to_string),
            effect: effect.map(str::to_string),
            ..Default::default()
        }
    };
    vec![
        toleration("node.kubernetes.io/not-ready", "Exists", None, None),
        toleration(
            "node.cluster.x-k8s.io/uninitialized",
            "Exists",
            None,
            Some("NoSchedule"),
        ),
        toleration(
            "node.cloudprovider.kubernetes.io/uninitialized",
            "Equal",
            Some("true"),
            Some("NoSchedule"),
        ),
        toleration(
            "node-role.kubernetes.io/control-plane",
            "Exists",
            None,
            Some("NoSchedule"),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::model::selection::ClusterFacts;

    fn spec(yaml: &str) -> FleetAddonConfigSpec {
        serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("test spec {yaml:?}: {e}"))
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn object_absent_imports_everything_with_caapf_defaults() {
        let config = EffectiveConfig::resolve(None);
        let cluster = config.cluster.as_ref().expect("import enabled");
        assert!(cluster.selection.selects_everything());
        assert_eq!(cluster.agent_initiated, AgentInitiated::None);
        assert!(cluster.apply_class_group);
        assert!(cluster.patch_resource);
        assert!(cluster.set_owner_references);
        assert_eq!(cluster.agent.host_network, None);
        assert_eq!(
            cluster.agent.agent_namespace.as_deref().unwrap_or_default(),
            "fleet-addon-agent"
        );
        assert_eq!(
            cluster.agent.agent_tolerations,
            Some(default_agent_tolerations())
        );
        assert_eq!(cluster.fleet_cluster_name("c1"), "c1");
        assert_eq!(
            config.cluster_class,
            Some(ClassGroups {
                patch_resource: true,
                set_owner_references: true
            })
        );
        assert!(config.fleet.experimental_oci_storage && config.fleet.experimental_helm_ops);
        assert!(!config.fleet.bootstrap_local_cluster);
        assert_eq!(config.fleet.server, None);
        assert_eq!(config.install, None);
        assert!(config.problems.is_empty());
    }

    #[test]
    fn default_tolerations() {
        let tolerations = default_agent_tolerations();
        let keys: Vec<(Option<&str>, Option<&str>, Option<&str>)> = tolerations
            .iter()
            .map(|t| (t.key.as_deref(), t.operator.as_deref(), t.value.as_deref()))
            .collect();
        assert_eq!(
            keys,
            [
                (Some("node.kubernetes.io/not-ready"), Some("Exists"), None),
                (
                    Some("node.cluster.x-k8s.io/uninitialized"),
                    Some("Exists"),
                    None
                ),
                (
                    Some("node.cloudprovider.kubernetes.io/uninitialized"),
                    Some("Equal"),
                    Some("true")
                ),
                (
                    Some("node-role.kubernetes.io/control-plane"),
                    Some("Exists"),
                    None
                ),
            ]
        );
        let effects: Vec<Option<&str>> = tolerations.iter().map(|t| t.effect.as_deref()).collect();
        assert_eq!(
            effects,
            [
                None,
                Some("NoSchedule"),
                Some("NoSchedule"),
                Some("NoSchedule")
            ]
        );
    }

    /// Kubernetes' toleration match (k8s.io/api `core/v1/toleration.go` `ToleratesTaint`): an
    /// empty effect matches every effect, an empty key with `Exists` every key, `Exists` any
    /// value, `Equal` (or no operator) the same value.
    fn tolerates(tolerations: &[ClusterAgentTolerations], key: &str, effect: &str) -> bool {
        tolerations.iter().any(|t| {
            let effect_ok = t
                .effect
                .as_deref()
                .is_none_or(|e| e.is_empty() || e == effect);
            let exists = t.operator.as_deref() == Some("Exists");
            let key_ok = t.key.as_deref() == Some(key)
                || (exists && t.key.as_deref().unwrap_or_default().is_empty());
            let value_ok = exists || t.value.as_deref().unwrap_or_default().is_empty();
            effect_ok && key_ok && value_ok
        })
    }

    /// The node lifecycle controller taints a NotReady node with both effects; the agent must
    /// stay while the node waits for its CNI (issue #29: NoExecute evicted it every 300 s).
    #[test]
    fn the_agent_tolerates_a_not_ready_node_with_every_effect() {
        let tolerations = default_agent_tolerations();
        for effect in ["NoSchedule", "NoExecute"] {
            assert!(
                tolerates(&tolerations, "node.kubernetes.io/not-ready", effect),
                "{effect}"
            );
        }
        assert!(tolerates(
            &tolerations,
            "node-role.kubernetes.io/control-plane",
            "NoSchedule"
        ));
        assert!(!tolerates(
            &tolerations,
            "node-role.kubernetes.io/control-plane",
            "NoExecute"
        ));
        assert!(!tolerates(&tolerations, "example.com/other", "NoSchedule"));
    }

    /// "Object present" semantics, one row per rule of research §1.4.
    #[test]
    fn object_present_semantics() {
        struct Row {
            name: &'static str,
            spec: &'static str,
            check: fn(&EffectiveConfig),
        }
        let rows = [
            Row {
                name: "empty spec disables import and class groups, keeps gates on",
                spec: "{}",
                check: |c| {
                    assert!(c.cluster.is_none());
                    assert!(c.cluster_class.is_none());
                    assert!(c.install.is_none());
                    assert!(c.fleet.experimental_oci_storage && c.fleet.experimental_helm_ops);
                    assert!(!c.fleet.bootstrap_local_cluster);
                },
            },
            Row {
                name: "present cluster section with no booleans: all false, hostNetwork unset",
                spec: "cluster: {}",
                check: |c| {
                    let cl = c.cluster.as_ref().expect("enabled");
                    assert!(
                        !cl.apply_class_group && !cl.patch_resource && !cl.set_owner_references
                    );
                    // Defaulted per Cluster: only for a first boot through the extension.
                    assert_eq!(cl.agent.host_network, None);
                    assert!(cl.selection.selects_everything());
                },
            },
            Row {
                name: "agent namespace and tolerations keep defaults inside a present section",
                spec: "cluster: {hostNetwork: false}",
                check: |c| {
                    let cl = c.cluster.as_ref().expect("enabled");
                    assert_eq!(
                        cl.agent.agent_namespace.as_deref().unwrap_or_default(),
                        "fleet-addon-agent"
                    );
                    assert_eq!(
                        cl.agent.agent_tolerations,
                        Some(default_agent_tolerations())
                    );
                    // A value the user sets is kept.
                    assert_eq!(cl.agent.host_network, Some(false));
                },
            },
            Row {
                name: "explicit values are used",
                spec: r#"
cluster:
  applyClassGroup: true
  patchResource: true
  setOwnerReferences: true
  naming: {prefix: "fleet-", suffix: "-x"}
  agentNamespace: agents
  agentTolerations: [{key: k, operator: Exists}]
  agentEnvVars: [{name: KUBERNETES_SERVICE_HOST, value: 127.0.0.1}]
clusterClass: {patchResource: true}
"#,
                check: |c| {
                    let cl = c.cluster.as_ref().expect("enabled");
                    assert!(cl.apply_class_group && cl.patch_resource && cl.set_owner_references);
                    assert_eq!(cl.fleet_cluster_name("c1"), "fleet-c1-x");
                    assert_eq!(
                        cl.agent.agent_namespace.as_deref().unwrap_or_default(),
                        "agents"
                    );
                    assert_eq!(cl.agent.agent_tolerations.as_ref().map(Vec::len), Some(1));
                    assert_eq!(cl.agent.agent_env_vars.as_ref().map(Vec::len), Some(1));
                    let cc = c.cluster_class.as_ref().expect("enabled");
                    assert!(cc.patch_resource && !cc.set_owner_references);
                },
            },
            Row {
                name: "prefix only and suffix only",
                spec: "cluster: {naming: {suffix: \"-fleet\"}}",
                check: |c| {
                    let cl = c.cluster.as_ref().expect("enabled");
                    assert_eq!(cl.fleet_cluster_name("test"), "test-fleet");
                },
            },
            Row {
                name: "feature gates: each defaults to true, configMap ref kept",
                spec: "config: {featureGates: {experimentalHelmOps: false, configMap: {ref: {name: rancher-config, namespace: cattle-system}}}, bootstrapLocalCluster: true}",
                check: |c| {
                    assert!(c.fleet.experimental_oci_storage);
                    assert!(!c.fleet.experimental_helm_ops);
                    assert_eq!(
                        c.fleet
                            .feature_gates_config_map
                            .as_ref()
                            .and_then(|r| r.name.as_deref()),
                        Some("rancher-config")
                    );
                    assert!(c.fleet.bootstrap_local_cluster);
                },
            },
            Row {
                name: "server inferLocal / custom / inferLocal false",
                spec: "config: {server: {inferLocal: true}}",
                check: |c| assert_eq!(c.fleet.server, Some(ServerSource::InferLocal)),
            },
            Row {
                name: "custom server",
                spec: "config: {server: {custom: {apiServerUrl: \"https://fleet.example.com:6443\", apiServerCaConfigRef: {kind: Secret, name: ca, namespace: default}}}}",
                check: |c| match &c.fleet.server {
                    Some(ServerSource::Custom { url, ca_ref }) => {
                        assert_eq!(url.as_deref(), Some("https://fleet.example.com:6443"));
                        assert_eq!(
                            ca_ref.as_ref().and_then(|r| r.kind.as_deref()),
                            Some("Secret")
                        );
                    }
                    other => panic!("{other:?}"),
                },
            },
            Row {
                name: "inferLocal false leaves the server alone",
                spec: "config: {server: {inferLocal: false}}",
                check: |c| assert_eq!(c.fleet.server, None),
            },
            Row {
                name: "install followLatest with defaults",
                spec: "install: {followLatest: true}",
                check: |c| {
                    let i = c.install.as_ref().expect("install");
                    assert_eq!(i.target, InstallTarget::Latest { upgrade: true });
                    assert_eq!(i.repository, "https://rancher.github.io/fleet-helm-charts/");
                    assert_eq!(i.namespace, "cattle-fleet-system");
                    assert!(i.values.is_empty());
                },
            },
            Row {
                name: "install pinned version with repository, namespace and values",
                spec: "install: {version: v0.13.1, repository: \"oci://registry.example.com/charts\", namespace: fleet, values: {replicas: 2}}",
                check: |c| {
                    let i = c.install.as_ref().expect("install");
                    match &i.target {
                        InstallTarget::Pinned { written, version } => {
                            assert_eq!(written, "v0.13.1");
                            assert_eq!(version.to_string(), "0.13.1");
                        }
                        other => panic!("{other:?}"),
                    }
                    assert_eq!(i.repository, "oci://registry.example.com/charts");
                    assert_eq!(i.namespace, "fleet");
                    assert_eq!(i.values["replicas"], serde_json::json!(2));
                },
            },
            Row {
                name: "install with both followLatest and version installs nothing and is reported",
                spec: "install: {followLatest: true, version: 0.13.1}",
                check: |c| {
                    assert!(c.install.is_none());
                    assert_eq!(c.problems_under("spec.install").count(), 1);
                },
            },
            Row {
                name: "agentInitiated true covers all selected clusters",
                spec: "cluster: {agentInitiated: true}",
                check: |c| {
                    let cl = c.cluster.as_ref().expect("enabled");
                    assert!(cl.agent_initiated.applies_to(&BTreeMap::new()));
                },
            },
            Row {
                name: "agentInitiatedSelector covers matching clusters only",
                spec: "cluster: {agentInitiatedSelector: {matchLabels: {network: nat}}}",
                check: |c| {
                    let cl = c.cluster.as_ref().expect("enabled");
                    assert!(
                        cl.agent_initiated
                            .applies_to(&labels(&[("network", "nat")]))
                    );
                    assert!(
                        !cl.agent_initiated
                            .applies_to(&labels(&[("network", "open")]))
                    );
                    assert!(!cl.agent_initiated.applies_to(&BTreeMap::new()));
                },
            },
            Row {
                name: "empty agentInitiatedSelector selects none",
                spec: "cluster: {agentInitiatedSelector: {}}",
                check: |c| {
                    let cl = c.cluster.as_ref().expect("enabled");
                    assert!(!cl.agent_initiated.applies_to(&BTreeMap::new()));
                },
            },
        ];
        for row in rows {
            let config = EffectiveConfig::from_spec(&spec(row.spec));
            if row.name.contains("reported") {
                (row.check)(&config);
                continue;
            }
            assert!(
                config.problems.is_empty(),
                "{}: {:?}",
                row.name,
                config.problems
            );
            (row.check)(&config);
        }
    }

    #[test]
    fn teardown_is_off_unless_enabled_and_its_timeout_defaults_to_30m() {
        let thirty = Duration::from_secs(30 * 60);
        let rows = [
            ("object absent", None, false, thirty),
            ("no runtimeExtension", Some("{}"), false, thirty),
            (
                "empty section",
                Some("runtimeExtension: {beforeClusterDelete: {}}"),
                false,
                thirty,
            ),
            (
                "on",
                Some("runtimeExtension: {beforeClusterDelete: {removeWorkloads: true}}"),
                true,
                thirty,
            ),
            (
                "on with a timeout",
                Some(
                    "runtimeExtension: {beforeClusterDelete: {removeWorkloads: true, timeout: 1h30m}}",
                ),
                true,
                Duration::from_secs(90 * 60),
            ),
            (
                "an unparseable timeout is reported and the default applies",
                Some(
                    "runtimeExtension: {beforeClusterDelete: {removeWorkloads: true, timeout: soon}}",
                ),
                true,
                thirty,
            ),
            (
                "a zero timeout is reported and the default applies",
                Some(
                    "runtimeExtension: {beforeClusterDelete: {removeWorkloads: true, timeout: 0s}}",
                ),
                true,
                thirty,
            ),
        ];
        for (name, yaml, on, timeout) in rows {
            let config = match yaml {
                None => EffectiveConfig::default(),
                Some(yaml) => EffectiveConfig::from_spec(&spec(yaml)),
            };
            let teardown = &config.runtime_extension.teardown;
            assert_eq!(teardown.remove_workloads, on, "{name}");
            assert_eq!(teardown.timeout, timeout, "{name}");
            let reported = config
                .problems_under("spec.runtimeExtension.beforeClusterDelete.timeout")
                .count();
            assert_eq!(reported, usize::from(name.contains("reported")), "{name}");
        }
    }

    #[test]
    fn upgrade_gate_is_off_unless_enabled() {
        assert!(
            !EffectiveConfig::default()
                .runtime_extension
                .wait_for_bundles_ready
        );
        assert!(
            !EffectiveConfig::from_spec(&spec("{}"))
                .runtime_extension
                .wait_for_bundles_ready
        );
        assert!(
            !EffectiveConfig::from_spec(&spec("runtimeExtension: {beforeClusterUpgrade: {}}"))
                .runtime_extension
                .wait_for_bundles_ready
        );
        assert!(
            EffectiveConfig::from_spec(&spec(
                "runtimeExtension: {beforeClusterUpgrade: {waitForBundlesReady: true}}"
            ))
            .runtime_extension
            .wait_for_bundles_ready
        );
    }

    /// The agent chart is reached with its own credentials and TLS settings, else with the
    /// installation's when it comes from the same repository, never with another repository's.
    #[test]
    fn agent_chart_access_follows_its_repository() {
        use crate::model::chart_access::{
            AGENT_CREDENTIALS, AGENT_TLS, INSTALL_CREDENTIALS, INSTALL_TLS,
        };
        let install = "install: {followLatest: true, repository: \"oci://r.example.com/c\", credentials: {secret: {name: install-pull, namespace: a}}, tlsConfig: {caSecret: {name: install-ca, namespace: a}}}";
        // (spec, credentials Secret, its field, CA Secret, TLS field)
        type Row = (
            String,
            Option<&'static str>,
            &'static str,
            Option<&'static str>,
            &'static str,
        );
        let rows: Vec<Row> = vec![
            (install.to_string(), Some("install-pull"), INSTALL_CREDENTIALS, Some("install-ca"), INSTALL_TLS),
            (
                format!("{install}\nruntimeExtension: {{agentChartRepository: \"oci://r.example.com/c\"}}"),
                Some("install-pull"), INSTALL_CREDENTIALS, Some("install-ca"), INSTALL_TLS,
            ),
            (
                format!("{install}\nruntimeExtension: {{agentChartRepository: \"oci://mirror.example.com/c\"}}"),
                None, AGENT_CREDENTIALS, None, AGENT_TLS,
            ),
            (
                format!("{install}\nruntimeExtension: {{agentChartCredentials: {{secret: {{name: agent-pull, namespace: b}}}}}}"),
                Some("agent-pull"), AGENT_CREDENTIALS, Some("install-ca"), INSTALL_TLS,
            ),
            (
                format!("{install}\nruntimeExtension: {{agentChartTLSConfig: {{insecureSkipTLSVerify: true}}}}"),
                Some("install-pull"), INSTALL_CREDENTIALS, None, AGENT_TLS,
            ),
            (
                "runtimeExtension: {agentChartRepository: \"oci://m.example.com/c\", agentChartCredentials: {secret: {name: agent-pull, namespace: b}}, agentChartTLSConfig: {caSecret: {name: agent-ca, namespace: b}}}".to_string(),
                Some("agent-pull"), AGENT_CREDENTIALS, Some("agent-ca"), AGENT_TLS,
            ),
            ("{}".to_string(), None, AGENT_CREDENTIALS, None, AGENT_TLS),
        ];
        for (yaml, credentials, credentials_field, ca, tls_field) in rows {
            let access = EffectiveConfig::from_spec(&spec(&yaml)).agent_chart_access();
            assert_eq!(
                access.credentials.as_ref().map(|c| c.name.as_str()),
                credentials,
                "{yaml}"
            );
            assert_eq!(access.credentials_field, credentials_field, "{yaml}");
            assert_eq!(access.ca().map(|c| c.name.as_str()), ca, "{yaml}");
            assert_eq!(access.tls_field, tls_field, "{yaml}");
        }
        // The object absent: no settings at all.
        assert_eq!(
            EffectiveConfig::default()
                .agent_chart_access()
                .secrets()
                .len(),
            0
        );
        // spec.install's own, with the key defaulted.
        let config = EffectiveConfig::from_spec(&spec(install));
        let access = &config.install.as_ref().expect("install").access;
        assert_eq!(
            access
                .credentials
                .as_ref()
                .map(|c| (c.field, c.namespace.as_str(), c.key.as_str())),
            Some((INSTALL_CREDENTIALS, "a", "config.json"))
        );
    }

    #[test]
    fn generation_is_carried() {
        let mut object = FleetAddonConfig::new("fleet-addon-config", spec("cluster: {}"));
        object.metadata.generation = Some(7);
        assert_eq!(EffectiveConfig::resolve(Some(&object)).generation, Some(7));
    }

    /// The selection rule: labels OR namespace labels OR namespace regexes; nothing set selects
    /// everything; regexes are fully anchored; an invalid rule selects nothing.
    #[test]
    fn selection_rule() {
        struct Row {
            spec: &'static str,
            cluster: &'static [(&'static str, &'static str)],
            namespace: &'static str,
            namespace_labels: &'static [(&'static str, &'static str)],
            selected: bool,
        }
        let row = |spec, cluster, namespace, namespace_labels, selected| Row {
            spec,
            cluster,
            namespace,
            namespace_labels,
            selected,
        };
        let rows = [
            // No rule set: everything.
            row("cluster: {}", &[], "any", &[], true),
            row(
                "cluster: {selector: {}, namespaceSelector: {}, namespaceRegexes: []}",
                &[],
                "any",
                &[],
                true,
            ),
            // Cluster labels.
            row(
                "cluster: {selector: {matchLabels: {import: \"\"}}}",
                &[("import", "")],
                "ns",
                &[],
                true,
            ),
            row(
                "cluster: {selector: {matchLabels: {import: \"\"}}}",
                &[],
                "ns",
                &[],
                false,
            ),
            row(
                "cluster: {selector: {matchExpressions: [{key: env, operator: In, values: [dev, qa]}]}}",
                &[("env", "qa")],
                "ns",
                &[],
                true,
            ),
            row(
                "cluster: {selector: {matchExpressions: [{key: env, operator: NotIn, values: [prod]}]}}",
                &[("env", "prod")],
                "ns",
                &[],
                false,
            ),
            row(
                "cluster: {selector: {matchExpressions: [{key: gke, operator: DoesNotExist}]}}",
                &[],
                "ns",
                &[],
                true,
            ),
            // Namespace labels.
            row(
                "cluster: {namespaceSelector: {matchLabels: {import: \"\"}}}",
                &[],
                "ns",
                &[("import", "")],
                true,
            ),
            row(
                "cluster: {namespaceSelector: {matchLabels: {import: \"\"}}}",
                &[("import", "")],
                "ns",
                &[],
                false,
            ),
            // OR of both label rules (CAAPF's testdata config).
            row(
                "cluster: {selector: {matchLabels: {import: \"\"}}, namespaceSelector: {matchLabels: {import: \"\"}}}",
                &[],
                "ns",
                &[("import", "")],
                true,
            ),
            row(
                "cluster: {selector: {matchLabels: {import: \"\"}}, namespaceSelector: {matchLabels: {import: \"\"}}}",
                &[("import", "")],
                "ns",
                &[],
                true,
            ),
            row(
                "cluster: {selector: {matchLabels: {import: \"\"}}, namespaceSelector: {matchLabels: {import: \"\"}}}",
                &[],
                "ns",
                &[],
                false,
            ),
            // An empty selector is "not set": only the other rule decides (differs from CAAPF).
            row(
                "cluster: {selector: {}, namespaceSelector: {matchLabels: {import: \"\"}}}",
                &[],
                "ns",
                &[],
                false,
            ),
            // Regexes are fully anchored.
            row(
                "cluster: {namespaceRegexes: [\"team-.*\"]}",
                &[],
                "team-a",
                &[],
                true,
            ),
            row(
                "cluster: {namespaceRegexes: [\"team-.*\"]}",
                &[],
                "my-team-a",
                &[],
                false,
            ),
            row(
                "cluster: {namespaceRegexes: [\"team\"]}",
                &[],
                "team-a",
                &[],
                false,
            ),
            row(
                "cluster: {namespaceRegexes: [\"a|b\"]}",
                &[],
                "ab",
                &[],
                false,
            ),
            row(
                "cluster: {namespaceRegexes: [\"a|b\"]}",
                &[],
                "b",
                &[],
                true,
            ),
            row(
                "cluster: {namespaceRegexes: [\"x\", \"prod-[0-9]+\"]}",
                &[],
                "prod-12",
                &[],
                true,
            ),
            // Regex OR labels.
            row(
                "cluster: {namespaceRegexes: [\"team-.*\"], selector: {matchLabels: {import: \"\"}}}",
                &[("import", "")],
                "other",
                &[],
                true,
            ),
            // An invalid rule selects nothing and does not widen the selection.
            row(
                "cluster: {namespaceRegexes: [\"team-(\"]}",
                &[],
                "team-(",
                &[],
                false,
            ),
            row(
                "cluster: {selector: {matchExpressions: [{key: env, operator: Maybe}]}}",
                &[("env", "x")],
                "ns",
                &[],
                false,
            ),
            row(
                "cluster: {selector: {matchExpressions: [{key: env, operator: In}]}}",
                &[("env", "x")],
                "ns",
                &[],
                false,
            ),
        ];
        for row in rows {
            let config = EffectiveConfig::from_spec(&spec(row.spec));
            let cluster = config.cluster.as_ref().expect("import enabled");
            let cluster_labels = labels(row.cluster);
            let namespace_labels = labels(row.namespace_labels);
            let facts = ClusterFacts {
                labels: &cluster_labels,
                namespace: row.namespace,
                namespace_labels: &namespace_labels,
            };
            assert_eq!(
                cluster.selection.selects(facts),
                row.selected,
                "{} with cluster labels {:?} in {} {:?}",
                row.spec,
                row.cluster,
                row.namespace,
                row.namespace_labels
            );
        }
    }

    #[test]
    fn invalid_regex_is_reported_with_its_path() {
        let config =
            EffectiveConfig::from_spec(&spec("cluster: {namespaceRegexes: [\"ok-.*\", \"foo(\"]}"));
        let problems: Vec<String> = config
            .problems_under("spec.cluster")
            .map(ToString::to_string)
            .collect();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with("spec.cluster.namespaceRegexes[1]: invalid regex \"foo(\""),
            "{}",
            problems[0]
        );
        assert_eq!(config.problems_under("spec.install").count(), 0);
    }

    /// A variable name that makes no label key would make every Fleet Cluster write fail.
    #[test]
    fn variable_labels_must_make_label_keys() {
        let config =
            EffectiveConfig::from_spec(&spec("cluster: {variableLabels: [region, \"a b\", -x]}"));
        let problems: Vec<String> = config
            .problems_under("spec.cluster")
            .map(ToString::to_string)
            .collect();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].starts_with("spec.cluster.variableLabels[1]: label key \"variable.fleet.addons.cluster.x-k8s.io/a b\": name must be"), "{problems:?}");
        assert!(
            problems[1].starts_with("spec.cluster.variableLabels[2]:"),
            "{problems:?}"
        );
    }

    #[test]
    fn rollout_problems_name_their_field() {
        let config = EffectiveConfig::from_spec(&spec(
            "cluster: {rollout: {waves: [canary, Early, canary], defaultWave: last, soak: soon}}",
        ));
        let problems: Vec<String> = config
            .problems_under("spec.cluster")
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            problems,
            [
                "spec.cluster.rollout.waves[1]: \"Early\" is not a lowercase name of at most 63 characters (a label value)",
                "spec.cluster.rollout.waves[2]: \"canary\" is named twice",
                "spec.cluster.rollout.defaultWave: \"last\" is not one of the waves [\"canary\", \"Early\", \"canary\"]",
                "spec.cluster.rollout.soak: \"soon\" is not a duration such as 30m or 2h",
            ]
        );
        let config = EffectiveConfig::from_spec(&spec(
            "cluster: {variableLabels: [region], rollout: {waveVariable: wave, waves: [canary, rest], soak: 10m, hold: {failingClusters: 2}}}",
        ));
        assert_eq!(config.problems_under("spec.cluster").count(), 0);
        let import = config.cluster.unwrap();
        assert_eq!(import.variable_labels, ["region"]);
        let rollout = import.rollout.unwrap();
        assert_eq!(
            (rollout.default_wave, rollout.soak, rollout.failing_clusters),
            (1, Duration::from_secs(600), 2)
        );
    }
}
