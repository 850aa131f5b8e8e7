//! What the lifecycle hooks decide, pure: the answer a hook gives ([`HookOutcome`]), whether a
//! Cluster gets the Fleet agent bootstrap and how it registers ([`hook_import`]), which objects
//! BeforeClusterCreate creates or completes and when it waits, what BeforeClusterDelete deletes,
//! and when BeforeClusterUpgrade holds an upgrade (Fleet's bundle states).
//!
//! The handlers (`crate::hooks::handlers::{create, delete, upgrade}`) read the objects these
//! functions look at, call them, and write what they return through `crate::apply`. An `Err`
//! here is the hook's answer (a hold or a wait), never an error of ours.

use std::collections::BTreeMap;

use fleet_api_rs::fleet_cluster::Cluster as FleetCluster;
use fleet_api_rs::fleet_cluster_registration_token::ClusterRegistrationToken;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use crate::model::agent_bootstrap::{FLEET_AGENT_VARIABLE, FleetAgentSetting};
use crate::model::agent_manifest::ChartLocation;
use crate::model::agent_manifest::{
    BootstrapInput, FleetAgentDefaults, FleetClusterAgent, TokenValues,
};
use crate::model::agent_patch::SCRIPT_FORMAT;
use crate::model::capi::ClusterView;
use crate::model::config::{ClusterImport, EffectiveConfig};
use crate::model::fleet;
use crate::model::fleet_agent_bundle::{FleetVersion, OLDEST_SUPPORTED};
use crate::model::plan::{ObjectId, Write};
use crate::model::selection::{ClusterFacts, WatchScope};
use crate::model::teardown::{self, Mode};
use crate::names;
use k8s_openapi::jiff::Timestamp;

/// Retry interval while Fleet issues the token or writes its Secret.
pub const RETRY_FLEET: i32 = 5;
/// Retry interval after an API error of ours.
pub const RETRY_API: i32 = 10;
/// Retry interval while a configuration (ours or Fleet's) stops us.
pub const RETRY_CONFIG: i32 = 30;
/// Retry interval of a held upgrade.
pub const RETRY_UPGRADE: i32 = 30;
/// At most this many bundle names in a message.
pub const MAX_LISTED_BUNDLES: usize = 10;

/// What a lifecycle hook decided, before it is encoded for its hook
/// (`crate::hooks::types::Response::lifecycle`).
#[derive(Clone, Debug, PartialEq)]
pub enum HookOutcome {
    /// Done; proceed.
    Success { message: String },
    /// Blocking hooks: ask again after this many seconds (> 0).
    Retry { after_seconds: i32, message: String },
    /// Refused, with a message for the user (deterministic, no secrets).
    Failure { message: String },
}

impl HookOutcome {
    /// Success without a message.
    pub fn ok() -> Self {
        HookOutcome::Success {
            message: String::new(),
        }
    }

    /// Success with a message.
    pub fn success(message: impl Into<String>) -> Self {
        HookOutcome::Success {
            message: message.into(),
        }
    }

    /// Retry after `after_seconds` (at least 1).
    pub fn retry(after_seconds: i32, message: impl Into<String>) -> Self {
        HookOutcome::Retry {
            after_seconds: after_seconds.max(1),
            message: message.into(),
        }
    }
}

/// The answer to an error of ours: a retry naming what failed (API errors by their message:
/// deterministic, no secrets), never a Failure (an outage or a missing RBAC rule of ours must not
/// fail a Cluster's lifecycle).
pub fn api_retry(what: &str, ns: &str, name: &str, err: &crate::Error) -> HookOutcome {
    let cause = match err {
        crate::Error::Kube(kube::Error::Api(status)) => {
            format!("{} ({})", status.message, status.code)
        }
        other => other.to_string(),
    };
    let key = match (ns.is_empty(), name.is_empty()) {
        (true, _) => name.to_string(),
        (false, true) => ns.to_string(),
        (false, false) => format!("{ns}/{name}"),
    };
    HookOutcome::retry(RETRY_API, format!("{what} {key}: {cause}"))
}

/// What FleetAddonConfig and the manager's flags say about a Cluster the hooks see.
#[derive(Debug)]
pub enum HookImport<'a> {
    /// Imported, agent-initiated.
    AgentInitiated(&'a ClusterImport),
    /// Imported, manager-initiated (unless its ClusterClass installs the agent at boot).
    ManagerInitiated(&'a ClusterImport),
    /// Not imported: the reason, for messages.
    NotImported(String),
}

/// Whether the Cluster is imported and how it registers: Cluster import enabled (`spec.cluster`
/// present, or no FleetAddonConfig), no problems in `spec.cluster` (`Err` naming them), within
/// `--namespace` and `--watch-filter`, selected by the selection rule.
pub fn hook_import<'a>(
    config: &'a EffectiveConfig,
    scope: &WatchScope,
    cluster: &ClusterView,
    namespace_labels: &BTreeMap<String, String>,
) -> Result<HookImport<'a>, String> {
    let Some(import) = config.cluster.as_ref() else {
        return Ok(HookImport::NotImported(
            "Cluster import is disabled (FleetAddonConfig has no spec.cluster)".to_string(),
        ));
    };
    let problems: Vec<String> = config
        .problems_under("spec.cluster")
        .map(ToString::to_string)
        .collect();
    if !problems.is_empty() {
        return Err(format!(
            "FleetAddonConfig spec.cluster has problems: {}",
            problems.join("; ")
        ));
    }
    if let Some(namespace) = scope.namespace.as_deref()
        && namespace != cluster.namespace
    {
        return Ok(HookImport::NotImported(format!(
            "this provider only manages namespace {namespace}"
        )));
    }
    if let Some(filter) = scope.filter_label.as_deref()
        && cluster
            .labels
            .get(names::CAPI_WATCH_FILTER_LABEL)
            .map(String::as_str)
            != Some(filter)
    {
        return Ok(HookImport::NotImported(format!(
            "the Cluster is not labelled {}={filter}",
            names::CAPI_WATCH_FILTER_LABEL
        )));
    }
    let facts = ClusterFacts {
        labels: &cluster.labels,
        namespace: &cluster.namespace,
        namespace_labels,
    };
    if !import.selection.selects(facts) {
        return Ok(HookImport::NotImported(
            "the Cluster is not selected by FleetAddonConfig spec.cluster".to_string(),
        ));
    }
    if import.agent_initiated.applies_to(&cluster.labels) {
        Ok(HookImport::AgentInitiated(import))
    } else {
        Ok(HookImport::ManagerInitiated(import))
    }
}

/// The answer while the FleetAddonConfig has not been read yet (a start-up moment).
pub fn config_not_read() -> HookOutcome {
    HookOutcome::retry(RETRY_FLEET, "waiting for the FleetAddonConfig to be read")
}

// ---- BeforeClusterCreate ----

/// BeforeClusterCreate's answer for a Cluster whose control plane does not use the bootstrap
/// (Success at once, whatever the state of anything else); `None`: it does, prepare it.
pub fn without_bootstrap(setting: FleetAgentSetting) -> Option<HookOutcome> {
    match setting {
        FleetAgentSetting::NotUsed => Some(HookOutcome::success(format!(
            "nothing to prepare: the Cluster has no {FLEET_AGENT_VARIABLE} variable (its class does not use the Fleet agent bootstrap)"
        ))),
        FleetAgentSetting::Disabled => Some(HookOutcome::success(format!(
            "nothing to prepare: {FLEET_AGENT_VARIABLE}.enabled is false"
        ))),
        FleetAgentSetting::Enabled => None,
    }
}

/// The answer without a request to the API server: Success when the bootstrap Secret is known
/// to exist (the watch) and `spec.cluster` has no problems (what the full preparation answers
/// then too, selected or not). `None`: unknown, ask the API server.
pub fn known_prepared(
    config: Option<&EffectiveConfig>,
    secret_known_present: bool,
    cluster: &ClusterView,
) -> Option<HookOutcome> {
    let config = config?;
    if config.problems_under("spec.cluster").next().is_some() || !secret_known_present {
        return None;
    }
    Some(bootstrap_secret_exists(cluster))
}

/// The bootstrap Secret exists: it is written once (a later chart must not change what joining
/// machines create, and the patch only names it; the import controller rewrites only a replaced
/// token's values), so the preparation is done.
pub fn bootstrap_secret_exists(cluster: &ClusterView) -> HookOutcome {
    HookOutcome::success(format!(
        "bootstrap Secret {}/{} exists",
        cluster.namespace,
        names::bootstrap_secret_name(&cluster.name)
    ))
}

/// The answer for a Cluster that is not imported: no Secret, so no patch.
pub fn not_imported(reason: &str) -> HookOutcome {
    HookOutcome::success(format!(
        "nothing to prepare: {reason}; the Fleet agent is not installed at boot (GeneratePatches adds the bootstrap only once its Secret exists)"
    ))
}

/// `Err`: the Fleet Cluster registers manager-initiated (`spec.kubeConfigSecret` set), which
/// stays so: Success, no Secret.
pub fn check_not_manager_initiated(
    fleet_cluster: &FleetCluster,
    ns: &str,
) -> Result<(), HookOutcome> {
    if fleet_cluster
        .spec
        .kube_config_secret
        .as_deref()
        .is_some_and(|s| !s.is_empty())
    {
        return Err(HookOutcome::success(format!(
            "Fleet Cluster {ns}/{} registers manager-initiated (spec.kubeConfigSecret is set): the Fleet agent is not installed at boot",
            fleet_cluster.metadata.name.as_deref().unwrap_or_default()
        )));
    }
    Ok(())
}

/// The client ID the Fleet Cluster has; `None`: it has none (e.g. created by hand) and must be
/// given one.
pub fn existing_client_id(fleet_cluster: &FleetCluster) -> Option<String> {
    fleet_cluster
        .spec
        .client_id
        .clone()
        .filter(|id| !id.is_empty())
}

/// The Secret holding the registration values once Fleet has issued the token; `Err`: wait.
pub fn issued_values_secret(
    token: &ClusterRegistrationToken,
    ns: &str,
) -> Result<String, HookOutcome> {
    token
        .status
        .as_ref()
        .and_then(|status| status.secret_name.clone())
        .filter(|name| !name.is_empty())
        .ok_or_else(|| {
            HookOutcome::retry(
                RETRY_FLEET,
                format!(
                    "waiting for Fleet to issue ClusterRegistrationToken {ns}/{}",
                    token.metadata.name.as_deref().unwrap_or_default()
                ),
            )
        })
}

/// The client ID and the Secret of the issued registration values, or the answer to wait with.
pub type Registered = Result<(String, String), HookOutcome>;

/// What BeforeClusterCreate writes for an agent-initiated registration, from the Fleet Cluster
/// and the ClusterRegistrationToken as read: the stub when there is no Fleet Cluster (client ID
/// `fresh_id`), `fresh_id` on one without a client ID, the token when there is none. Then the
/// client ID and the Secret of the issued registration values, or the answer to wait with: a
/// created object's answer (whose stub stands, when Fleet issues the token) is the next call's.
pub fn registration(
    cluster: &ClusterView,
    import: &ClusterImport,
    fleet_cluster: Option<&FleetCluster>,
    token: Option<&ClusterRegistrationToken>,
    fresh_id: &str,
    now: Timestamp,
) -> crate::Result<(Vec<Write>, Registered)> {
    let ns = cluster.namespace.as_str();
    let fleet_name = import.fleet_cluster_name(&cluster.name);
    let fleet_id = ObjectId::of::<FleetCluster>(Some(ns), &fleet_name, None);
    let manager = names::RUNTIME_EXTENSION_FIELD_MANAGER;
    let mut writes = Vec::new();
    let client_id = match fleet_cluster {
        None => {
            let stub = fleet::runtime_extension_stub(cluster, import, fresh_id);
            let body = serde_json::to_value(stub)?;
            writes.push(Write::CreateOrGet {
                object: fleet_id,
                body,
                manager,
            });
            None
        }
        Some(fleet_cluster) => {
            if let Err(answer) = check_not_manager_initiated(fleet_cluster, ns) {
                return Ok((Vec::new(), Err(answer)));
            }
            existing_client_id(fleet_cluster).or_else(|| {
                let patch = serde_json::json!({"spec": {"clientID": fresh_id}});
                writes.push(Write::MergePatch {
                    object: fleet_id,
                    patch,
                    manager,
                });
                Some(fresh_id.to_string())
            })
        }
    };
    let token_name = fleet::registration_token_name(cluster);
    let values_secret = match token {
        Some(token) => issued_values_secret(token, ns),
        None => {
            let desired = fleet::desired_registration_token(cluster, import, now);
            writes.push(Write::CreateOrGet {
                object: ObjectId::of::<ClusterRegistrationToken>(Some(ns), &token_name, None),
                body: serde_json::to_value(desired)?,
                manager,
            });
            Err(HookOutcome::retry(
                RETRY_FLEET,
                format!("waiting for Fleet to issue ClusterRegistrationToken {ns}/{token_name}"),
            ))
        }
    };
    let ready = values_secret.and_then(|secret| match client_id {
        Some(id) => Ok((id, secret)),
        None => Err(HookOutcome::retry(
            RETRY_FLEET,
            format!("creating Fleet Cluster {ns}/{fleet_name}"),
        )),
    });
    Ok((writes, ready))
}

/// The registration values in the Secret Fleet wrote for the token (`None`: not there yet).
pub fn registration_values(
    secret: Option<&Secret>,
    ns: &str,
    name: &str,
) -> Result<TokenValues, HookOutcome> {
    let Some(values) = secret
        .and_then(|secret| secret.data.as_ref())
        .and_then(|data| data.get("values"))
    else {
        return Err(HookOutcome::retry(
            RETRY_FLEET,
            format!("waiting for Fleet to write the registration values into Secret {ns}/{name}"),
        ));
    };
    let text = std::str::from_utf8(&values.0).map_err(|_| {
        HookOutcome::retry(
            RETRY_CONFIG,
            format!("Secret {ns}/{name}: the registration values are not UTF-8"),
        )
    })?;
    TokenValues::parse(text)
        .map_err(|err| HookOutcome::retry(RETRY_CONFIG, format!("Secret {ns}/{name}: {err}")))
}

/// The namespace Fleet runs in (its `fleet-controller` ConfigMap is there).
pub fn fleet_namespace(config: &EffectiveConfig) -> &str {
    config
        .install
        .as_ref()
        .map_or(names::DEFAULT_FLEET_NAMESPACE, |install| {
            install.namespace.as_str()
        })
}

/// Problems in the settings the `fleet-agent` chart is pulled with (its repository, credentials
/// and TLS; `spec.install`'s when it comes from there): nothing is pulled until they are fixed,
/// since a repository URL with a password would reach helm's command line.
fn agent_chart_problems(config: &EffectiveConfig) -> Result<(), HookOutcome> {
    let from_install = config
        .install
        .as_ref()
        .is_some_and(|install| install.repository == config.agent_chart_repository());
    let install = [
        "spec.install.repository",
        "spec.install.credentials",
        "spec.install.tlsConfig",
    ];
    let own = [
        "agentChartRepository",
        "agentChartCredentials",
        "agentChartTLSConfig",
    ]
    .map(|field| format!("spec.runtimeExtension.{field}"));
    let prefixes = own.iter().map(String::as_str);
    let prefixes = prefixes.chain(install.into_iter().filter(|_| from_install));
    let problems: Vec<String> = prefixes
        .flat_map(|prefix| config.problems_under(prefix))
        .map(ToString::to_string)
        .collect();
    if problems.is_empty() {
        return Ok(());
    }
    Err(HookOutcome::retry(
        RETRY_CONFIG,
        format!(
            "the fleet-agent chart is not pulled while FleetAddonConfig has problems in its settings: {}",
            problems.join("; ")
        ),
    ))
}

/// The agent defaults of the running Fleet, from its `fleet-controller` ConfigMap in
/// `fleet_ns` (`None`: not there yet).
pub fn fleet_agent_defaults(
    configmap: Option<&ConfigMap>,
    fleet_ns: &str,
) -> Result<FleetAgentDefaults, HookOutcome> {
    let Some(config) = configmap
        .and_then(|cm| cm.data.as_ref())
        .and_then(|data| data.get("config"))
    else {
        return Err(HookOutcome::retry(
            RETRY_FLEET * 2,
            format!(
                "waiting for Fleet: ConfigMap {fleet_ns}/{} has no config",
                names::FLEET_CONTROLLER_CONFIGMAP
            ),
        ));
    };
    FleetAgentDefaults::from_controller_config(config).map_err(|err| {
        HookOutcome::retry(
            RETRY_CONFIG,
            format!(
                "ConfigMap {fleet_ns}/{}: {err}",
                names::FLEET_CONTROLLER_CONFIGMAP
            ),
        )
    })
}

/// Where Fleet's `fleet-agent` chart comes from: the configured chart repository
/// ([`EffectiveConfig::agent_chart_repository`]), at the version this provider installed
/// (`status.installedVersion`), else the version of the running Fleet's agent image (Fleet
/// releases the image and the chart with one version). Neither: answered as an unsupported Fleet
/// ([`unreadable_fleet`]).
pub fn agent_chart(
    cluster: &ClusterView,
    config: &EffectiveConfig,
    installed_version: Option<&str>,
    defaults: &FleetAgentDefaults,
) -> Result<ChartLocation, HookOutcome> {
    agent_chart_problems(config)?;
    let installed = installed_version
        .filter(|version| !version.is_empty())
        .map(str::to_string);
    let Some(version) = installed.or_else(|| defaults.chart_version()) else {
        let why = format!(
            "FleetAddonConfig has no status.installedVersion and the agent image {} has no version tag",
            defaults.image
        );
        return Err(unreadable_fleet(cluster, &why));
    };
    Ok(ChartLocation {
        repository: config.agent_chart_repository().to_string(),
        version,
    })
}

/// The Fleet release whose agent the bootstrap renders; `Err`: the answer instead. A Fleet older
/// than [`crate::model::fleet_agent_bundle::OLDEST_SUPPORTED`] (0.11, whose `fleet-agent` chart
/// deploys a StatefulSet with a `fleetagent register` init container, rancher/fleet v0.11.14) is
/// not waited for: Success naming the version, so the Cluster is created without the bootstrap
/// (no Secret, so GeneratePatches changes nothing) instead of being held forever.
pub fn supported_fleet(
    cluster: &ClusterView,
    location: &ChartLocation,
) -> Result<FleetVersion, HookOutcome> {
    let Some(version) = FleetVersion::parse(&location.version) else {
        let why = format!("{:?} is not a semantic version", location.version);
        return Err(unreadable_fleet(cluster, &why));
    };
    if version.supported() {
        return Ok(version);
    }
    Err(HookOutcome::success(unsupported_fleet_message(
        cluster, version,
    )))
}

/// The answer when the installed Fleet's version cannot be read (`why`): as for an unsupported
/// Fleet, Success naming it, since no retry would read another version (issue #38).
fn unreadable_fleet(cluster: &ClusterView, why: &str) -> HookOutcome {
    HookOutcome::success(format!(
        "cannot tell which Fleet release is installed ({why}): Cluster {}/{} is created without the Fleet agent at boot (no bootstrap Secret, so GeneratePatches leaves its control plane alone); install Fleet with spec.install or give its agent image a version tag, or let the Cluster register the usual way once it is running",
        cluster.namespace, cluster.name
    ))
}

/// Why a Cluster boots without the Fleet agent when the installed Fleet is too old (the answer's
/// message and the Event's note).
pub fn unsupported_fleet_message(cluster: &ClusterView, version: FleetVersion) -> String {
    format!(
        "Fleet {version} is installed, and the Fleet agent bootstrap supports Fleet {}.{} and later: Cluster {}/{} is created without the Fleet agent at boot (no bootstrap Secret, so GeneratePatches leaves its control plane alone); upgrade Fleet, or let the Cluster register the usual way once it is running",
        OLDEST_SUPPORTED.major, OLDEST_SUPPORTED.minor, cluster.namespace, cluster.name
    )
}

/// The hook's answer while a Cluster's agent settings are invalid: every problem, with the
/// object and field path to fix.
pub fn invalid_agent_settings(problems: &[crate::model::agent_settings::LayerProblem]) -> String {
    let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
    format!(
        "the Fleet agent settings of this Cluster are invalid, nothing is prepared until they are fixed: {}",
        problems.join("; ")
    )
}

/// The Event reason on a Cluster whose agent settings use a field the installed Fleet lacks.
pub const UNSUPPORTED_AGENT_SETTINGS_REASON: &str = "AgentSettingsUnsupported";

/// The Event reason on a Cluster created without the bootstrap because of the Fleet version.
pub const UNSUPPORTED_FLEET_REASON: &str = "FleetVersionUnsupported";

/// What the `fleet-agent` chart is rendered with: the agent settings the import controller
/// applies to the Fleet Cluster (`agent`: resolved from every layer, as the import does) (the live object may still be the minimal first version), so
/// the bootstrap agent is the agent Fleet manages afterwards, and the Fleet release's rules.
pub fn bootstrap_input(
    cluster: &ClusterView,
    import: &ClusterImport,
    agent: &crate::api::AgentSettings,
    client_id: String,
    token: TokenValues,
    fleet: FleetAgentDefaults,
    version: FleetVersion,
) -> Result<BootstrapInput, HookOutcome> {
    let mut full = fleet::desired_fleet_cluster(
        cluster,
        import,
        agent,
        &fleet::Registration::AgentInitiated {
            client_id: client_id.clone(),
        },
        None,
    );
    fleet::default_boot_host_network(&mut full.spec);
    let spec = serde_json::to_value(&full.spec).map_err(|err| {
        HookOutcome::retry(
            RETRY_CONFIG,
            format!("encoding the Fleet Cluster's agent settings: {err}"),
        )
    })?;
    Ok(BootstrapInput {
        pull_secrets: Vec::new(),
        token,
        client_id,
        agent: FleetClusterAgent::from_fleet_cluster_spec(&spec),
        fleet,
        version,
    })
}

/// The bootstrap Secret holding `files`: labelled with the Cluster name and owned by the
/// Cluster, so `clusterctl move` and garbage collection follow it; annotated with what it holds
/// (GeneratePatches names its keys) and the UID of the ClusterRegistrationToken whose values it
/// holds (the import controller rewrites them when the token is replaced).
pub fn desired_bootstrap_secret(
    cluster: &ClusterView,
    files: BTreeMap<String, String>,
    token_uid: &str,
) -> Secret {
    let data: BTreeMap<String, ByteString> = files
        .into_iter()
        .map(|(key, text)| (key, ByteString(text.into_bytes())))
        .collect();
    Secret {
        metadata: ObjectMeta {
            name: Some(names::bootstrap_secret_name(&cluster.name)),
            namespace: Some(cluster.namespace.clone()),
            labels: Some(BTreeMap::from([(
                names::CAPI_CLUSTER_NAME_LABEL.to_string(),
                cluster.name.clone(),
            )])),
            annotations: Some(BTreeMap::from([
                (
                    names::BOOTSTRAP_FORMAT_ANNOTATION.to_string(),
                    SCRIPT_FORMAT.to_string(),
                ),
                (
                    names::REGISTRATION_TOKEN_UID_ANNOTATION.to_string(),
                    token_uid.to_string(),
                ),
            ])),
            owner_references: fleet::bootstrap_secret_owner(cluster).map(|owner| vec![owner]),
            ..Default::default()
        },
        type_: Some("Opaque".to_string()),
        data: Some(data),
        ..Default::default()
    }
}

/// BeforeClusterCreate's answer once the bootstrap Secret is written.
pub fn prepared(cluster: &ClusterView, fleet_cluster: &str, chart_version: &str) -> HookOutcome {
    let ns = &cluster.namespace;
    HookOutcome::success(format!(
        "Fleet Cluster {ns}/{fleet_cluster} and bootstrap Secret {ns}/{} are ready (fleet-agent chart {chart_version})",
        names::bootstrap_secret_name(&cluster.name)
    ))
}

// ---- BeforeClusterDelete and BeforeClusterUpgrade ----

/// The Fleet Cluster the import controller keeps for `cluster`: the name the configuration
/// gives (`None`, or import disabled: the Cluster's own name).
pub fn fleet_cluster_of(cluster: &ClusterView, config: Option<&EffectiveConfig>) -> String {
    config.map_or_else(
        || cluster.name.clone(),
        |config| config.fleet_cluster_name(&cluster.name),
    )
}

/// What BeforeClusterDelete deletes of what the hooks prepared: the bootstrap Secret, the
/// ClusterRegistrationToken, and the Fleet Cluster `fleet_cluster` (as read) when
/// [`deletes_fleet_cluster`].
pub fn cleanup(cluster: &ClusterView, fleet_cluster: Option<&FleetCluster>) -> Vec<Write> {
    let ns = Some(cluster.namespace.as_str());
    let delete = |object| Write::Delete {
        object,
        live_check: false,
    };
    let secret = names::bootstrap_secret_name(&cluster.name);
    let token = fleet::registration_token_name(cluster);
    let fleet = fleet_cluster.filter(|fleet| deletes_fleet_cluster(cluster, fleet));
    [
        ObjectId::of::<Secret>(ns, &secret, None),
        ObjectId::of::<ClusterRegistrationToken>(ns, &token, None),
    ]
    .into_iter()
    .chain(fleet.map(ObjectId::observed))
    .map(delete)
    .collect()
}

/// Whether BeforeClusterDelete deletes this Fleet Cluster: BeforeClusterCreate prepared it (our
/// mark) or the Cluster owns it, and it is not being deleted already. Fleet Clusters the Cluster
/// does not own (`setOwnerReferences` not set) are kept, as the import controller keeps them.
pub fn deletes_fleet_cluster(cluster: &ClusterView, fleet_cluster: &FleetCluster) -> bool {
    let owned = cluster.owns(&fleet_cluster.metadata);
    let prepared = fleet::prepared_by_runtime_extension(Some(&fleet_cluster.metadata));
    fleet_cluster.metadata.deletion_timestamp.is_none() && (owned || prepared)
}

/// How BeforeClusterDelete goes on for a Cluster, decided from the request alone (its
/// annotations and `deletionTimestamp`: [`teardown::mode`]; its `fleetAgent` variable) and the
/// hooks' view of the bootstrap Secrets.
#[derive(Clone, Debug, PartialEq)]
pub enum DeleteStart {
    /// Answer without a request to the API server.
    Answer(HookOutcome),
    /// Delete what the hooks prepared (bootstrap Secret, token, the Fleet Cluster when ours)
    /// and proceed. `hold_on_error`: an error of ours answers "retry" (only for a Cluster the
    /// hooks may have prepared something for; for any other it answers Success).
    Cleanup { hold_on_error: bool },
    /// The removal was skipped or timed out: say so (condition, Warning Event), then as
    /// [`DeleteStart::Cleanup`].
    TeardownEnded { hold_on_error: bool },
    /// Remove the Cluster's Fleet workloads first, until `deadline`.
    Teardown { deadline: Timestamp },
}

/// The start of BeforeClusterDelete (defect 9 of issue #29: Cluster API's `FailurePolicy
/// Ignore` covers only transport errors — kubernetes-sigs/cluster-api v1.11.0
/// `internal/runtime/client/client.go` `CallExtension` ignores `errCallingExtensionHandler`
/// only — so a "retry" answer always holds the deletion, and must only come for Clusters this
/// provider has something to do for). The hooks prepared something only for a Cluster whose
/// control plane uses the agent bootstrap (`fleetAgent` enabled) or whose bootstrap Secret is
/// known to exist; what the import controller created for any other (Fleet Cluster, token) it
/// removes itself, or the garbage collector does with the Cluster.
pub fn delete_start(
    mode: &Mode,
    fleet_agent: FleetAgentSetting,
    secret_known_present: bool,
) -> DeleteStart {
    let prepared = prepared_by_hooks(fleet_agent, secret_known_present);
    match mode {
        Mode::Unknown => DeleteStart::Answer(config_not_read()),
        Mode::On { deadline } => DeleteStart::Teardown {
            deadline: *deadline,
        },
        Mode::Skipped | Mode::Expired { .. } => DeleteStart::TeardownEnded {
            hold_on_error: prepared,
        },
        Mode::Off | Mode::NotDeleting if prepared => DeleteStart::Cleanup {
            hold_on_error: true,
        },
        Mode::Off | Mode::NotDeleting => DeleteStart::Answer(HookOutcome::success(format!(
            "nothing to clean up: the Cluster does not use the Fleet agent bootstrap ({FLEET_AGENT_VARIABLE}), and its Fleet workloads are not removed before deletion (spec.runtimeExtension.beforeClusterDelete.removeWorkloads, annotation {})",
            names::REMOVE_WORKLOADS_ANNOTATION
        ))),
    }
}

/// Whether the hooks may have prepared something for a Cluster (bootstrap Secret, token, Fleet
/// Cluster): its control plane uses the bootstrap, or its bootstrap Secret is known to exist.
pub fn prepared_by_hooks(fleet_agent: FleetAgentSetting, secret_known_present: bool) -> bool {
    fleet_agent == FleetAgentSetting::Enabled || secret_known_present
}

/// BeforeClusterDelete's answer when an error of ours stopped the cleanup of a Cluster it does
/// not hold on errors ([`DeleteStart`]): proceed, saying what was not cleaned up.
pub fn proceed_despite(outcome: HookOutcome) -> HookOutcome {
    match outcome {
        HookOutcome::Retry { message, .. } => HookOutcome::success(format!(
            "proceeding without cleaning up (nothing of this provider's needs it): {message}"
        )),
        other => other,
    }
}

/// `outcome` with the problems of the Cluster's annotations appended to its message.
pub fn with_problems(mut outcome: HookOutcome, problems: &[String]) -> HookOutcome {
    if !problems.is_empty() {
        let (HookOutcome::Success { message }
        | HookOutcome::Retry { message, .. }
        | HookOutcome::Failure { message }) = &mut outcome;
        *message = teardown::with_problems(message, problems);
    }
    outcome
}

/// BeforeClusterDelete's answer: proceed once the bootstrap Secret and the token are gone
/// (`remaining` names those still there); the Fleet Cluster is not waited for (Fleet's own
/// finalizers must not hold Cluster API).
pub fn delete_answer(remaining: &[String]) -> HookOutcome {
    if remaining.is_empty() {
        HookOutcome::ok()
    } else {
        HookOutcome::retry(
            RETRY_FLEET,
            format!("waiting for {} to be deleted", remaining.join(" and ")),
        )
    }
}

/// Where BeforeClusterUpgrade looks for the Cluster's BundleDeployments: the namespace Fleet
/// registered its Fleet Cluster in. `Err`: the answer without looking (no Fleet Cluster: no
/// bundles to wait for; not registered yet: hold).
pub fn bundle_namespace(
    cluster: &ClusterView,
    fleet_cluster: Option<&FleetCluster>,
) -> Result<String, HookOutcome> {
    let Some(fleet) = fleet_cluster else {
        return Err(HookOutcome::success(format!(
            "Cluster {}/{} has no Fleet Cluster: no bundles to wait for",
            cluster.namespace, cluster.name
        )));
    };
    fleet
        .status
        .as_ref()
        .and_then(|status| status.namespace.clone())
        .filter(|ns| !ns.is_empty())
        .ok_or_else(|| {
            HookOutcome::retry(
                RETRY_UPGRADE,
                format!(
                    "waiting for Fleet Cluster {}/{} to register with Fleet before upgrading",
                    cluster.namespace,
                    fleet.metadata.name.as_deref().unwrap_or_default()
                ),
            )
        })
}

/// BeforeClusterUpgrade's answer from the live BundleDeployments of the Fleet Cluster named
/// `fleet_cluster`: Success
/// when all are ready, otherwise hold the upgrade naming those that are not.
pub fn upgrade_answer(
    cluster: &ClusterView,
    fleet_cluster: &str,
    deployments: &[Value],
    to_version: Option<&str>,
) -> HookOutcome {
    let fleet_key = format!("{}/{fleet_cluster}", cluster.namespace);
    let not_ready = not_ready_bundles(deployments);
    if not_ready.is_empty() {
        return HookOutcome::success(format!(
            "all {} Fleet bundles of Fleet Cluster {fleet_key} are ready",
            deployments.len()
        ));
    }
    let target = to_version.map_or_else(String::new, |v| format!(" to {v}"));
    HookOutcome::retry(
        RETRY_UPGRADE,
        format!(
            "holding the upgrade{target} until the Fleet bundles of Fleet Cluster {fleet_key} are ready: {}",
            describe_bundles(&not_ready)
        ),
    )
}

/// The BundleDeployments that are not ready, as (bundle, state), sorted, by Fleet's own rule
/// (rancher/fleet v0.12–v0.16 `internal/cmd/controller/summary/summary.go`
/// `GetDeploymentState`): see [`bundle_state`].
pub fn not_ready_bundles(deployments: &[Value]) -> Vec<(String, &'static str)> {
    let mut out: Vec<(String, &'static str)> = deployments
        .iter()
        .filter_map(|bd| {
            let state = bundle_state(bd)?;
            let labels = &bd["metadata"]["labels"];
            let name = match (
                labels["fleet.cattle.io/bundle-namespace"].as_str(),
                labels["fleet.cattle.io/bundle-name"].as_str(),
            ) {
                (Some(ns), Some(name)) => format!("{ns}/{name}"),
                _ => bd["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            };
            Some((name, state))
        })
        .collect();
    out.sort();
    out
}

/// The state of one BundleDeployment when it is not ready (`None`: ready), in Fleet's order:
/// not applied (`ErrApplied` with its `Deployed` condition False, else `WaitApplied`), not ready,
/// a new deployment staged but not promoted (`OutOfSync`: a rollout partition or a paused
/// Bundle or Fleet Cluster keeps the old one ready), drifted (`Modified`; Fleet omits a false
/// `nonModified`). An absent `stagedDeploymentID` (never written by Fleet) is not OutOfSync.
pub fn bundle_state(bd: &Value) -> Option<&'static str> {
    let (spec, status) = (&bd["spec"], &bd["status"]);
    let wanted = spec["deploymentID"].as_str().unwrap_or_default();
    let staged = spec["stagedDeploymentID"].as_str().unwrap_or(wanted);
    let deployed_false = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Deployed" && c["status"] == "False");
    if wanted != status["appliedDeploymentID"].as_str().unwrap_or_default() {
        Some(if deployed_false {
            "ErrApplied"
        } else {
            "WaitApplied"
        })
    } else if status["ready"].as_bool() != Some(true) {
        Some("NotReady")
    } else if wanted != staged {
        Some("OutOfSync")
    } else if status["nonModified"].as_bool() != Some(true) {
        Some("Modified")
    } else {
        None
    }
}

/// The bundles of a message, at most [`MAX_LISTED_BUNDLES`] named.
pub fn describe_bundles(bundles: &[(String, &'static str)]) -> String {
    let mut parts: Vec<String> = bundles
        .iter()
        .take(MAX_LISTED_BUNDLES)
        .map(|(name, state)| format!("{name} ({state})"))
        .collect();
    if bundles.len() > MAX_LISTED_BUNDLES {
        parts.push(format!("and {} more", bundles.len() - MAX_LISTED_BUNDLES));
    }
    parts.join(", ")
}

#[cfg(test)]
#[path = "hook_plan_tests.rs"]
mod tests;
