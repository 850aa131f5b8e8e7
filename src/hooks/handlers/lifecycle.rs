//! Lifecycle hooks: BeforeClusterCreate, BeforeClusterDelete, BeforeClusterUpgrade,
//! AfterControlPlaneInitialized. Only BeforeClusterCreate (and the background preparation
//! GeneratePatches asks for) and BeforeClusterDelete write.
//!
//! # What BeforeClusterCreate does
//!
//! 1. A Cluster whose control plane does not use the Fleet agent bootstrap (no `fleetAgent`
//!    variable, or `fleetAgent.enabled: false`, the control-plane override winning): Success at
//!    once, whatever the state of Fleet, the FleetAddonConfig or the API server.
//! 2. Until the FleetAddonConfig has been read: retry in 5 s.
//! 3. The Cluster must be imported: Cluster import enabled (`spec.cluster` present, or no
//!    FleetAddonConfig), no problems in `spec.cluster` (otherwise: retry, naming them), within
//!    `--namespace` and `--watch-filter`, and selected by the selection rule. A Cluster that is
//!    not imported gets Success and no Secret: GeneratePatches leaves its templates alone (the
//!    patch follows the Secret, [`crate::model::agent_bootstrap`]).
//! 4. An imported Cluster using the bootstrap registers agent-initiated: the hook creates, if
//!    absent, the Fleet Cluster (client ID generated once, annotated
//!    `fleet.addons.cluster.x-k8s.io/registration: runtime-extension` so the import controller
//!    keeps it agent-initiated) and the ClusterRegistrationToken, waits ("retry") until Fleet has
//!    issued the token, renders Fleet's `fleet-agent` chart into the bootstrap Secret and answers
//!    Success. A Fleet Cluster that already registers manager-initiated is left so: Success, no
//!    Secret.
//!
//! Our own API, RBAC or rendering errors are answered "retry" with the cause, never Failure:
//! a Failure is for a hold we intend, and it is never masked by a failure policy.

use std::collections::BTreeMap;
use std::time::Duration;

use fleet_api_rs::fleet_cluster::Cluster as FleetCluster;
use fleet_api_rs::fleet_cluster_registration_token::ClusterRegistrationToken;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, ListParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind, ObjectMeta};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

use crate::api::FleetAddonConfig;
use crate::bootstrap;
use crate::bootstrap::chart::ChartLocation;
use crate::bootstrap::manifest::{
    AgentSettings, BootstrapInput, FleetAgentDefaults, TokenValues, bootstrap_files,
};
use crate::context::Context;
use crate::hooks::cluster::ClusterInfo;
use crate::hooks::handlers::topology::FLEET_AGENT_VARIABLE;
use crate::hooks::types::Outcome;
use crate::model::agent_bootstrap::FleetAgentSetting;
use crate::model::config::{ClusterImport, EffectiveConfig};
use crate::model::fleet;
use crate::model::selection::ClusterFacts;
use crate::names;
use crate::{Error, apply};

/// Retry interval while Fleet issues the token or writes its Secret.
const RETRY_FLEET: i32 = 5;
/// Retry interval after an API error of ours.
const RETRY_API: i32 = 10;
/// Retry interval while a configuration (ours or Fleet's) stops us.
const RETRY_CONFIG: i32 = 30;
/// Retry interval of a held upgrade.
const RETRY_UPGRADE: i32 = 30;
/// At most this many bundle names in a message.
const MAX_LISTED_BUNDLES: usize = 10;

/// What FleetAddonConfig says about a Cluster.
#[derive(Debug)]
pub enum Registration<'a> {
    /// Imported, agent-initiated.
    AgentInitiated(&'a ClusterImport),
    /// Imported, manager-initiated (unless its ClusterClass installs the agent at boot).
    ManagerInitiated(&'a ClusterImport),
    /// Not imported: the reason, for messages.
    NotImported(String),
}

/// FleetAddonConfig's part of the rule (see the module documentation), pure.
pub fn registration<'a>(
    config: &'a EffectiveConfig,
    flags: &crate::cli::ManagerFlags,
    cluster: &ClusterInfo,
    namespace_labels: &BTreeMap<String, String>,
) -> Result<Registration<'a>, String> {
    let Some(import) = config.cluster.as_ref() else {
        return Ok(Registration::NotImported(
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
    if let Some(namespace) = flags.watch_namespace()
        && namespace != cluster.namespace
    {
        return Ok(Registration::NotImported(format!(
            "this provider only manages namespace {namespace}"
        )));
    }
    if let Some(filter) = flags.watch_filter_label()
        && cluster
            .labels
            .get(names::CAPI_WATCH_FILTER_LABEL)
            .map(String::as_str)
            != Some(filter)
    {
        return Ok(Registration::NotImported(format!(
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
        return Ok(Registration::NotImported(
            "the Cluster is not selected by FleetAddonConfig spec.cluster".to_string(),
        ));
    }
    if import.agent_initiated.applies_to(&cluster.labels) {
        Ok(Registration::AgentInitiated(import))
    } else {
        Ok(Registration::ManagerInitiated(import))
    }
}

/// How long BeforeClusterCreate waits for the preparation before answering "retry" (below
/// every hook timeout; the preparation goes on and its result is there at the next call).
const PREPARE_WAIT: Duration = Duration::from_secs(5);

/// BeforeClusterCreate.
pub async fn before_cluster_create(ctx: &Context, cluster: &ClusterInfo) -> Outcome {
    match cluster.fleet_agent {
        FleetAgentSetting::NotUsed => Outcome::Success {
            message: format!(
                "nothing to prepare: the Cluster has no {FLEET_AGENT_VARIABLE} variable (its class does not use the Fleet agent bootstrap)"
            ),
        },
        FleetAgentSetting::Disabled => Outcome::Success {
            message: format!("nothing to prepare: {FLEET_AGENT_VARIABLE}.enabled is false"),
        },
        FleetAgentSetting::Enabled => match prepared(ctx, cluster) {
            Some(done) => done,
            None => prepare_in_background(ctx, cluster, PREPARE_WAIT).await,
        },
    }
}

/// Success without a request when the bootstrap Secret is known to exist (the watch,
/// [`crate::hooks::bootstrap_secrets`]) and the configuration can be read without problems:
/// what [`prepare_bootstrap`] answers then too, whatever the selection says (a Cluster that is
/// not imported gets Success as well). `None`: not known, ask the API server.
fn prepared(ctx: &Context, cluster: &ClusterInfo) -> Option<Outcome> {
    let config = ctx.config()?;
    if config.problems_under("spec.cluster").next().is_some()
        || !ctx
            .bootstrap_secrets
            .known_present(&cluster.namespace, &cluster.name)
    {
        return None;
    }
    Some(Outcome::Success {
        message: format!(
            "bootstrap Secret {}/{} exists",
            cluster.namespace,
            bootstrap::secret_name(&cluster.name)
        ),
    })
}

/// Removes a Cluster from [`Context::preparing`] when its preparation ends, however it ends.
struct Preparing {
    set: std::sync::Arc<std::sync::Mutex<std::collections::BTreeSet<String>>>,
    key: String,
}

impl Drop for Preparing {
    fn drop(&mut self) {
        self.set
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&self.key);
    }
}

/// Runs [`prepare_bootstrap`] for `cluster` in a task of its own (at most one per Cluster at a
/// time), waiting at most `wait` for its answer: pulling a chart or a slow API server never
/// makes a hook miss its deadline, and the work is not lost when it does.
pub async fn prepare_in_background(
    ctx: &Context,
    cluster: &ClusterInfo,
    wait: Duration,
) -> Outcome {
    let key = cluster.key();
    {
        let mut preparing = ctx
            .preparing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !preparing.insert(key.clone()) {
            return Outcome::retry(
                RETRY_FLEET,
                format!("the Fleet agent bootstrap of Cluster {key} is being prepared"),
            );
        }
    }
    let guard = Preparing {
        set: ctx.preparing.clone(),
        key: key.clone(),
    };
    let owned = ctx.with_shutdown(ctx.shutdown.clone());
    let cluster = cluster.clone();
    let task = tokio::spawn(async move {
        let _guard = guard;
        let outcome = match prepare_bootstrap(&owned, &cluster).await {
            Ok(outcome) | Err(outcome) => outcome,
        };
        tracing::debug!(cluster = %cluster.name, namespace = %cluster.namespace, ?outcome, "bootstrap preparation ended");
        outcome
    });
    match tokio::time::timeout(wait, task).await {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(err)) => Outcome::retry(
            RETRY_API,
            format!("preparing the Fleet agent bootstrap of Cluster {key}: {err}"),
        ),
        Err(_) => Outcome::retry(
            RETRY_FLEET,
            format!("the Fleet agent bootstrap of Cluster {key} is being prepared"),
        ),
    }
}

/// For a Cluster that never went through BeforeClusterCreate (created before its class used the
/// bootstrap, rebased onto such a class, switched to `fleetAgent.enabled: true`): reads the
/// Cluster and prepares its bootstrap Secret in the background.
pub fn prepare_existing(ctx: &Context, namespace: &str, name: &str) {
    // Already under way: no need to read the Cluster again for every call meanwhile.
    if ctx
        .preparing
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .contains(&format!("{namespace}/{name}"))
    {
        return;
    }
    let owned = ctx.with_shutdown(ctx.shutdown.clone());
    let (namespace, name) = (namespace.to_string(), name.to_string());
    tokio::spawn(async move {
        match read_cluster(&owned, &namespace, &name).await {
            Ok(Some(cluster)) if cluster.fleet_agent.enabled() => {
                let outcome = prepare_in_background(&owned, &cluster, Duration::ZERO).await;
                tracing::debug!(cluster = %name, %namespace, ?outcome, "bootstrap preparation started");
            }
            Ok(_) => {}
            Err(message) => {
                tracing::warn!(cluster = %name, %namespace, %message, "cannot prepare the Fleet agent bootstrap");
            }
        }
    });
}

/// The CAPI Cluster as the hooks see it, in whichever version the API server serves
/// (`v1beta2` from Cluster API v1.11, `v1beta1` before).
async fn read_cluster(
    ctx: &Context,
    namespace: &str,
    name: &str,
) -> Result<Option<ClusterInfo>, String> {
    for version in ["v1beta2", "v1beta1"] {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("cluster.x-k8s.io", version, "Cluster"),
            "clusters",
        );
        let api: Api<DynamicObject> =
            Api::namespaced_with(ctx.client.clone(), namespace, &resource);
        match api.get_opt(name).await {
            Ok(Some(object)) => {
                let value = serde_json::to_value(&object)
                    .map_err(|err| format!("encoding Cluster {namespace}/{name}: {err}"))?;
                return ClusterInfo::decode(&value).map(Some);
            }
            // Absent, or this API version is not served (Cluster API v1.10 has no v1beta2: the
            // API server answers 404 NotFound for both).
            Ok(None) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(err) => return Err(format!("reading Cluster {namespace}/{name}: {err}")),
        }
    }
    Ok(None)
}

/// Prepares the bootstrap Secret of a Cluster whose control plane uses the bootstrap (for
/// BeforeClusterCreate, and for existing Clusters when GeneratePatches finds no Secret).
/// Success when the Secret exists or the Cluster will not get one; retry while waiting.
pub async fn prepare_bootstrap(ctx: &Context, cluster: &ClusterInfo) -> Result<Outcome, Outcome> {
    let Some(config) = ctx.config() else {
        return Ok(Outcome::retry(
            RETRY_FLEET,
            "waiting for the FleetAddonConfig to be read",
        ));
    };
    let namespace_labels = namespace_labels(ctx, &cluster.namespace).await?;
    let decision = registration(&config, &ctx.flags, cluster, &namespace_labels)
        .map_err(|message| Outcome::retry(RETRY_CONFIG, message))?;
    match decision {
        Registration::AgentInitiated(import) | Registration::ManagerInitiated(import) => {
            prepare_agent_initiated(ctx, &config, import, cluster).await
        }
        Registration::NotImported(reason) => Ok(Outcome::Success {
            message: format!(
                "nothing to prepare: {reason}; the Fleet agent is not installed at boot (GeneratePatches adds the bootstrap only once its Secret exists)"
            ),
        }),
    }
}

async fn prepare_agent_initiated(
    ctx: &Context,
    config: &EffectiveConfig,
    import: &ClusterImport,
    cluster: &ClusterInfo,
) -> Result<Outcome, Outcome> {
    let ns = cluster.namespace.as_str();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    let secret_name = bootstrap::secret_name(&cluster.name);
    // Written once: a later token or chart must not change what joining machines create (and
    // the patch only names the Secret).
    if get_opt(&secrets, &secret_name, "Secret", ns)
        .await?
        .is_some()
    {
        return Ok(Outcome::Success {
            message: format!("bootstrap Secret {ns}/{secret_name} exists"),
        });
    }
    let fleet_clusters: Api<FleetCluster> = Api::namespaced(ctx.client.clone(), ns);
    let fleet_name = import.fleet_cluster_name(&cluster.name);
    let fleet_cluster = match get_opt(&fleet_clusters, &fleet_name, "Fleet Cluster", ns).await? {
        Some(existing) => existing,
        None => {
            let desired =
                fleet::runtime_extension_stub(cluster, import, &fleet::random_client_id());
            create_or_get(&fleet_clusters, &desired, &fleet_name, "Fleet Cluster", ns).await?
        }
    };
    if fleet_cluster
        .spec
        .kube_config_secret
        .as_deref()
        .is_some_and(|s| !s.is_empty())
    {
        return Ok(Outcome::Success {
            message: format!(
                "Fleet Cluster {ns}/{fleet_name} registers manager-initiated (spec.kubeConfigSecret is set): the Fleet agent is not installed at boot"
            ),
        });
    }
    let mut fleet_spec = fleet_cluster.spec.clone();
    let client_id = match fleet_spec.client_id.clone().filter(|id| !id.is_empty()) {
        Some(id) => id,
        None => {
            // An existing Fleet Cluster without a client ID (e.g. created by hand): give it one.
            let id = fleet::random_client_id();
            apply::merge_patch(
                &fleet_clusters,
                &fleet_name,
                &json!({"spec": {"clientID": id}}),
                names::RUNTIME_EXTENSION_FIELD_MANAGER,
            )
            .await
            .map_err(|err| {
                api_retry(
                    "setting the client ID of Fleet Cluster",
                    ns,
                    &fleet_name,
                    &err,
                )
            })?;
            fleet_spec.client_id = Some(id.clone());
            id
        }
    };

    let tokens: Api<ClusterRegistrationToken> = Api::namespaced(ctx.client.clone(), ns);
    let token_name = fleet::registration_token_name(cluster);
    let token = match get_opt(&tokens, &token_name, "ClusterRegistrationToken", ns).await? {
        Some(token) => token,
        None => {
            create_or_get(
                &tokens,
                &fleet::desired_registration_token(cluster, import),
                &token_name,
                "ClusterRegistrationToken",
                ns,
            )
            .await?
        }
    };
    let Some(values_secret) = token
        .status
        .and_then(|status| status.secret_name)
        .filter(|name| !name.is_empty())
    else {
        return Ok(Outcome::retry(
            RETRY_FLEET,
            format!("waiting for Fleet to issue ClusterRegistrationToken {ns}/{token_name}"),
        ));
    };
    let values = get_opt(&secrets, &values_secret, "Secret", ns)
        .await?
        .and_then(|secret| secret.data)
        .and_then(|mut data| data.remove("values"));
    let Some(values) = values else {
        return Ok(Outcome::retry(
            RETRY_FLEET,
            format!(
                "waiting for Fleet to write the registration values into Secret {ns}/{values_secret}"
            ),
        ));
    };
    let values = String::from_utf8(values.0).map_err(|_| {
        Outcome::retry(
            RETRY_CONFIG,
            format!("Secret {ns}/{values_secret}: the registration values are not UTF-8"),
        )
    })?;
    let token_values = TokenValues::parse(&values).map_err(|err| {
        Outcome::retry(RETRY_CONFIG, format!("Secret {ns}/{values_secret}: {err}"))
    })?;

    let fleet_ns = config
        .install
        .as_ref()
        .map_or(names::DEFAULT_FLEET_NAMESPACE, |install| {
            install.namespace.as_str()
        });
    let configmaps: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), fleet_ns);
    let controller_config = get_opt(
        &configmaps,
        names::FLEET_CONTROLLER_CONFIGMAP,
        "ConfigMap",
        fleet_ns,
    )
    .await?
    .and_then(|cm| cm.data)
    .and_then(|mut data| data.remove("config"));
    let Some(controller_config) = controller_config else {
        return Ok(Outcome::retry(
            RETRY_FLEET * 2,
            format!(
                "waiting for Fleet: ConfigMap {fleet_ns}/{} has no config",
                names::FLEET_CONTROLLER_CONFIGMAP
            ),
        ));
    };
    let defaults =
        FleetAgentDefaults::from_controller_config(&controller_config).map_err(|err| {
            Outcome::retry(
                RETRY_CONFIG,
                format!(
                    "ConfigMap {fleet_ns}/{}: {err}",
                    names::FLEET_CONTROLLER_CONFIGMAP
                ),
            )
        })?;
    let location = agent_chart_location(ctx, config, &defaults).await?;

    // The agent settings the import controller applies to the Fleet Cluster (the live object may
    // still be the minimal first version): the bootstrap agent must match what Fleet manages.
    let full = fleet::desired_fleet_cluster(
        cluster,
        import,
        &fleet::Registration::AgentInitiated {
            client_id: client_id.clone(),
        },
        None,
    );
    let spec = serde_json::to_value(&full.spec).map_err(|err| {
        Outcome::retry(
            RETRY_CONFIG,
            format!("encoding the Fleet Cluster's agent settings: {err}"),
        )
    })?;
    let input = BootstrapInput {
        token: token_values,
        client_id,
        agent: AgentSettings::from_fleet_cluster_spec(&spec),
        fleet: defaults,
    };
    let objects = ctx
        .agent_chart
        .render(&location, &input)
        .await
        .map_err(|err| Outcome::retry(RETRY_CONFIG, err))?;
    let files = bootstrap_files(&objects).map_err(|err| {
        Outcome::retry(
            RETRY_CONFIG,
            format!("encoding the Fleet agent bootstrap: {err}"),
        )
    })?;
    let secret_name = ensure_bootstrap_secret(&secrets, cluster, files).await?;
    Ok(Outcome::Success {
        message: format!(
            "Fleet Cluster {ns}/{fleet_name} and bootstrap Secret {ns}/{secret_name} are ready (fleet-agent chart {})",
            location.version
        ),
    })
}

/// Where Fleet's `fleet-agent` chart comes from: the configured chart repository
/// ([`EffectiveConfig::agent_chart_repository`]), at the version this provider installed (`status.installedVersion`), else the version of the
/// running Fleet's agent image (Fleet releases the image and the chart with one version).
async fn agent_chart_location(
    ctx: &Context,
    config: &EffectiveConfig,
    defaults: &FleetAgentDefaults,
) -> Result<ChartLocation, Outcome> {
    let repository = config.agent_chart_repository().to_string();
    let api: Api<FleetAddonConfig> = Api::all(ctx.client.clone());
    let installed = get_opt(&api, names::CONFIG_NAME, "FleetAddonConfig", "")
        .await?
        .and_then(|config| config.status)
        .and_then(|status| status.installed_version)
        .filter(|version| !version.is_empty());
    let Some(version) = installed.or_else(|| defaults.chart_version()) else {
        return Err(Outcome::retry(
            RETRY_CONFIG,
            format!(
                "cannot tell which fleet-agent chart to render: FleetAddonConfig has no status.installedVersion and the agent image {} has no version tag",
                defaults.image
            ),
        ));
    };
    Ok(ChartLocation {
        repository,
        version,
    })
}

/// Creates the bootstrap Secret (labelled with the Cluster name and owned by the Cluster, so
/// `clusterctl move` and garbage collection follow it); another replica's copy wins.
async fn ensure_bootstrap_secret(
    secrets: &Api<Secret>,
    cluster: &ClusterInfo,
    files: BTreeMap<String, String>,
) -> Result<String, Outcome> {
    let ns = cluster.namespace.as_str();
    let name = bootstrap::secret_name(&cluster.name);
    let data: BTreeMap<String, ByteString> = files
        .into_iter()
        .map(|(key, text)| (key, ByteString(text.into_bytes())))
        .collect();
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(ns.to_string()),
            labels: Some(BTreeMap::from([(
                names::CAPI_CLUSTER_NAME_LABEL.to_string(),
                cluster.name.clone(),
            )])),
            owner_references: fleet::bootstrap_secret_owner(cluster).map(|owner| vec![owner]),
            ..Default::default()
        },
        type_: Some("Opaque".to_string()),
        data: Some(data),
        ..Default::default()
    };
    create_or_get(secrets, &secret, &name, "Secret", ns).await?;
    Ok(name)
}

/// BeforeClusterDelete: removes the bootstrap Secret and the ClusterRegistrationToken (waits
/// until they are gone) and asks for the deletion of the Fleet Clusters owned by this Cluster
/// without waiting for them (Fleet's own cleanup may take a while, and the garbage collector
/// removes them with the Cluster anyway). Fleet Clusters the Cluster does not own
/// (`setOwnerReferences` not set) are kept, as the import controller keeps them.
pub async fn before_cluster_delete(ctx: &Context, cluster: &ClusterInfo) -> Outcome {
    match before_cluster_delete_steps(ctx, cluster).await {
        Ok(outcome) | Err(outcome) => outcome,
    }
}

async fn before_cluster_delete_steps(
    ctx: &Context,
    cluster: &ClusterInfo,
) -> Result<Outcome, Outcome> {
    // A Cluster moved into itself (docs/self-managed.md): its Fleet Cluster, token and bootstrap
    // Secret now serve the self-managed cluster; deleting the source copy keeps them.
    if crate::model::move_state::is_moved(&cluster.annotations) {
        return Ok(Outcome::ok());
    }
    let ns = cluster.namespace.as_str();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    let tokens: Api<ClusterRegistrationToken> = Api::namespaced(ctx.client.clone(), ns);
    let fleet_clusters: Api<FleetCluster> = Api::namespaced(ctx.client.clone(), ns);
    let secret_name = bootstrap::secret_name(&cluster.name);
    let token_name = fleet::registration_token_name(cluster);

    delete_if_present(&secrets, &secret_name, "Secret", ns).await?;
    delete_if_present(&tokens, &token_name, "ClusterRegistrationToken", ns).await?;
    // The Fleet Cluster of this Cluster, when BeforeClusterCreate prepared it (our mark) or the
    // Cluster owns it. Deleted without waiting: Fleet's own finalizers must not hold CAPI.
    let fleet_name = ctx
        .config()
        .and_then(|config| {
            config
                .cluster
                .as_ref()
                .map(|i| i.fleet_cluster_name(&cluster.name))
        })
        .unwrap_or_else(|| cluster.name.clone());
    if let Some(fleet) = get_opt(&fleet_clusters, &fleet_name, "Fleet Cluster", ns).await? {
        let owned = !cluster.uid.is_empty()
            && fleet
                .owner_references()
                .iter()
                .any(|owner| owner.uid == cluster.uid);
        let prepared = fleet::prepared_by_runtime_extension(Some(&fleet));
        if fleet.meta().deletion_timestamp.is_none() && (owned || prepared) {
            delete_if_present(&fleet_clusters, &fleet_name, "Fleet Cluster", ns).await?;
        }
    }

    let mut remaining = Vec::new();
    if get_opt(&secrets, &secret_name, "Secret", ns)
        .await?
        .is_some()
    {
        remaining.push(format!("Secret {ns}/{secret_name}"));
    }
    if get_opt(&tokens, &token_name, "ClusterRegistrationToken", ns)
        .await?
        .is_some()
    {
        remaining.push(format!("ClusterRegistrationToken {ns}/{token_name}"));
    }
    if remaining.is_empty() {
        Ok(Outcome::ok())
    } else {
        Ok(Outcome::retry(
            RETRY_FLEET,
            format!("waiting for {} to be deleted", remaining.join(" and ")),
        ))
    }
}

/// BeforeClusterUpgrade: with `spec.runtimeExtension.beforeClusterUpgrade.waitForBundlesReady`,
/// holds the upgrade until every BundleDeployment of the Cluster's Fleet Cluster is ready.
pub async fn before_cluster_upgrade(
    ctx: &Context,
    cluster: &ClusterInfo,
    to_version: Option<&str>,
) -> Outcome {
    match before_cluster_upgrade_steps(ctx, cluster, to_version).await {
        Ok(outcome) | Err(outcome) => outcome,
    }
}

async fn before_cluster_upgrade_steps(
    ctx: &Context,
    cluster: &ClusterInfo,
    to_version: Option<&str>,
) -> Result<Outcome, Outcome> {
    let Some(config) = ctx.config() else {
        return Ok(Outcome::retry(
            RETRY_FLEET,
            "waiting for the FleetAddonConfig to be read",
        ));
    };
    if !config.runtime_extension.wait_for_bundles_ready {
        return Ok(Outcome::ok());
    }
    let ns = cluster.namespace.as_str();
    // One GET of the Fleet Cluster the import controller keeps for this Cluster (the name the
    // configuration gives, as BeforeClusterDelete finds it), not a LIST of the namespace per
    // request. Not a cache: a Fleet Cluster seen before it registered would hold the upgrade
    // a watch latency longer, and the bundle states below must be live anyway.
    let fleet_clusters: Api<FleetCluster> = Api::namespaced(ctx.client.clone(), ns);
    let expected_name = config.cluster.as_ref().map_or_else(
        || cluster.name.clone(),
        |import| import.fleet_cluster_name(&cluster.name),
    );
    let Some(fleet) = get_opt(&fleet_clusters, &expected_name, "Fleet Cluster", ns).await? else {
        return Ok(Outcome::Success {
            message: format!(
                "Cluster {} has no Fleet Cluster: no bundles to wait for",
                cluster.key()
            ),
        });
    };
    let fleet_key = format!("{ns}/{}", fleet.meta().name.as_deref().unwrap_or_default());
    let Some(fleet_ns) = fleet
        .status
        .as_ref()
        .and_then(|status| status.namespace.clone())
        .filter(|ns| !ns.is_empty())
    else {
        return Ok(Outcome::retry(
            RETRY_UPGRADE,
            format!(
                "waiting for Fleet Cluster {fleet_key} to register with Fleet before upgrading"
            ),
        ));
    };
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("fleet.cattle.io", "v1alpha1", "BundleDeployment"),
        "bundledeployments",
    );
    // A LIST, on purpose: the hold must follow the live states of all the Cluster's
    // BundleDeployments (a stale "ready" lets an upgrade through), it is scoped to the Fleet
    // Cluster's own namespace, and only with `waitForBundlesReady`, which is off by default.
    let deployments: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &fleet_ns, &resource);
    let listed = deployments
        .list(&ListParams::default())
        .await
        .map_err(|err| api_retry("listing BundleDeployments in", &fleet_ns, "", &err.into()))?;
    let objects: Vec<Value> = listed
        .items
        .iter()
        .map(serde_json::to_value)
        .collect::<Result<_, _>>()
        .map_err(|err| {
            Outcome::retry(
                RETRY_API,
                format!("reading the BundleDeployments in {fleet_ns}: {err}"),
            )
        })?;
    let not_ready = not_ready_bundles(&objects);
    if not_ready.is_empty() {
        return Ok(Outcome::Success {
            message: format!(
                "all {} Fleet bundles of Fleet Cluster {fleet_key} are ready",
                objects.len()
            ),
        });
    }
    let target = to_version.map_or_else(String::new, |v| format!(" to {v}"));
    Ok(Outcome::retry(
        RETRY_UPGRADE,
        format!(
            "holding the upgrade{target} until the Fleet bundles of Fleet Cluster {fleet_key} are ready: {}",
            describe_bundles(&not_ready)
        ),
    ))
}

/// The BundleDeployments that are not ready, as (bundle, state), sorted. Fleet's own rule
/// (`summary.GetDeploymentState`): not yet applied → `WaitApplied`, not ready → `NotReady`,
/// drifted → `Modified`.
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

fn bundle_state(bd: &Value) -> Option<&'static str> {
    let status = &bd["status"];
    let wanted = bd["spec"]["deploymentID"].as_str().unwrap_or_default();
    let applied = status["appliedDeploymentID"].as_str().unwrap_or_default();
    if wanted != applied {
        Some("WaitApplied")
    } else if status["ready"].as_bool() != Some(true) {
        Some("NotReady")
    } else if status["nonModified"].as_bool() == Some(false) {
        Some("Modified")
    } else {
        None
    }
}

fn describe_bundles(bundles: &[(String, &'static str)]) -> String {
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

/// AfterControlPlaneInitialized: nothing to do (the import controller watches Clusters itself).
pub fn after_control_plane_initialized(_cluster: &ClusterInfo) -> Outcome {
    Outcome::ok()
}

async fn namespace_labels(
    ctx: &Context,
    namespace: &str,
) -> Result<BTreeMap<String, String>, Outcome> {
    let api: Api<Namespace> = Api::all(ctx.client.clone());
    let found = get_opt(&api, namespace, "Namespace", "").await?;
    Ok(found.and_then(|ns| ns.metadata.labels).unwrap_or_default())
}

fn object_key(ns: &str, name: &str) -> String {
    match (ns.is_empty(), name.is_empty()) {
        (true, _) => name.to_string(),
        (false, true) => ns.to_string(),
        (false, false) => format!("{ns}/{name}"),
    }
}

/// A retry naming what failed; API errors by their message (deterministic, no secrets). Never a
/// Failure: an outage or a missing RBAC rule of ours must not fail a Cluster's lifecycle. The one
/// place where the lifecycle hooks turn an error of ours into their answer.
fn api_retry(what: &str, ns: &str, name: &str, err: &Error) -> Outcome {
    let cause = match err {
        Error::Kube(kube::Error::Api(status)) => format!("{} ({})", status.message, status.code),
        other => other.to_string(),
    };
    Outcome::retry(
        RETRY_API,
        format!("{what} {}: {cause}", object_key(ns, name)),
    )
}

async fn get_opt<K>(api: &Api<K>, name: &str, kind: &str, ns: &str) -> Result<Option<K>, Outcome>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name)
        .await
        .map_err(|err| api_retry(&format!("reading {kind}"), ns, name, &err.into()))
}

/// [`apply::create_or_adopt`] as the hooks' field manager: another replica's or the import
/// controller's copy wins.
async fn create_or_get<K>(
    api: &Api<K>,
    object: &K,
    name: &str,
    kind: &str,
    ns: &str,
) -> Result<K, Outcome>
where
    K: Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    apply::create_or_adopt(api, object, names::RUNTIME_EXTENSION_FIELD_MANAGER)
        .await
        .map_err(|err| api_retry(&format!("creating {kind}"), ns, name, &err))
}

async fn delete_if_present<K>(api: &Api<K>, name: &str, kind: &str, ns: &str) -> Result<(), Outcome>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    apply::delete_if_exists(api, name)
        .await
        .map(drop)
        .map_err(|err| api_retry(&format!("deleting {kind}"), ns, name, &err))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::FleetAddonConfigSpec;
    use crate::cli::ManagerFlags;
    use serde_json::json;

    fn cluster(labels: Value) -> ClusterInfo {
        ClusterInfo::decode(
            &json!({"metadata": {"name": "c1", "namespace": "team-a", "labels": labels}}),
        )
        .expect("cluster")
    }

    fn config(yaml: &str) -> EffectiveConfig {
        let spec: FleetAddonConfigSpec = serde_yaml::from_str(yaml).expect("spec");
        EffectiveConfig::from_spec(&spec)
    }

    /// `Some(agent-initiated?)` for imported Clusters, `None` for the others.
    fn decide(
        config: &EffectiveConfig,
        flags: &ManagerFlags,
        labels: Value,
    ) -> Result<Option<bool>, String> {
        registration(config, flags, &cluster(labels), &BTreeMap::new()).map(|r| match r {
            Registration::AgentInitiated(_) => Some(true),
            Registration::ManagerInitiated(_) => Some(false),
            Registration::NotImported(_) => None,
        })
    }

    #[test]
    fn registration_rule() {
        let flags = ManagerFlags::default();
        type Expected = Result<Option<bool>, String>;
        let rows: [(&str, Value, Expected); 7] = [
            // No FleetAddonConfig: imported, manager-initiated.
            ("", json!({}), Ok(Some(false))),
            // FleetAddonConfig without spec.cluster: not imported.
            ("{}", json!({}), Ok(None)),
            ("cluster: {agentInitiated: true}", json!({}), Ok(Some(true))),
            (
                "cluster: {agentInitiatedSelector: {matchLabels: {nat: \"true\"}}}",
                json!({"nat": "true"}),
                Ok(Some(true)),
            ),
            (
                "cluster: {agentInitiatedSelector: {matchLabels: {nat: \"true\"}}}",
                json!({}),
                Ok(Some(false)),
            ),
            (
                "cluster: {agentInitiated: true, namespaceRegexes: [\"prod-.*\"]}",
                json!({}),
                Ok(None),
            ),
            (
                "cluster: {agentInitiated: true, namespaceRegexes: [\"prod-(\"]}",
                json!({}),
                Err("problems".to_string()),
            ),
        ];
        for (yaml, labels, expected) in rows {
            let config = if yaml.is_empty() {
                EffectiveConfig::default()
            } else {
                config(yaml)
            };
            let got = decide(&config, &flags, labels.clone());
            match (&got, &expected) {
                (Err(message), Err(_)) => {
                    assert!(message.contains("spec.cluster has problems"), "{message}")
                }
                _ => assert_eq!(got, expected, "{yaml} {labels}"),
            }
        }
    }

    #[test]
    fn watch_filter_and_namespace_flags_exclude_clusters() {
        let config = config("cluster: {agentInitiated: true}");
        let mut flags = ManagerFlags {
            watch_filter: Some("mine".into()),
            ..ManagerFlags::default()
        };
        assert_eq!(decide(&config, &flags, json!({})), Ok(None));
        assert_eq!(
            decide(
                &config,
                &flags,
                json!({"cluster.x-k8s.io/watch-filter": "mine"})
            ),
            Ok(Some(true))
        );
        flags.watch_filter = None;
        flags.namespace = Some("other".into());
        assert_eq!(decide(&config, &flags, json!({})), Ok(None));
    }

    #[test]
    fn bundle_readiness_follows_fleet() {
        let bd = |name: &str, spec_id: &str, applied: &str, ready: bool, non_modified: bool| {
            json!({"metadata": {"name": name, "labels": {"fleet.cattle.io/bundle-namespace": "fleet-default", "fleet.cattle.io/bundle-name": name}},
                   "spec": {"deploymentID": spec_id},
                   "status": {"appliedDeploymentID": applied, "ready": ready, "nonModified": non_modified}})
        };
        let bds = [
            bd("zeta", "a", "a", true, true),
            bd("cni", "b", "a", true, true),
            bd("app", "c", "c", false, true),
            bd("drift", "d", "d", true, false),
            json!({"metadata": {"name": "raw"}, "spec": {"deploymentID": "x"}}),
        ];
        assert_eq!(
            not_ready_bundles(&bds),
            [
                ("fleet-default/app".to_string(), "NotReady"),
                ("fleet-default/cni".to_string(), "WaitApplied"),
                ("fleet-default/drift".to_string(), "Modified"),
                ("raw".to_string(), "WaitApplied"),
            ]
        );
    }

    #[test]
    fn long_bundle_lists_are_capped() {
        let bundles: Vec<(String, &'static str)> =
            (0..12).map(|i| (format!("b{i:02}"), "NotReady")).collect();
        let text = describe_bundles(&bundles);
        assert!(text.ends_with("b09 (NotReady), and 2 more"), "{text}");
    }
}
