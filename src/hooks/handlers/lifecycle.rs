//! Lifecycle hooks: BeforeClusterCreate, BeforeClusterDelete, BeforeClusterUpgrade,
//! AfterControlPlaneInitialized. Only BeforeClusterCreate and BeforeClusterDelete write.
//!
//! # Which Clusters BeforeClusterCreate acts on
//!
//! 1. Until the FleetAddonConfig has been read: retry in 5 s.
//! 2. The Cluster must be imported — Cluster import enabled (`spec.cluster` present, or no
//!    FleetAddonConfig), no problems in `spec.cluster`, the Cluster within `--namespace` and
//!    `--watch-filter`, and selected by the selection rule. Otherwise nothing is written: Success,
//!    unless its ClusterClass uses the `fleet-agent-bootstrap` patch with `fleetAgent.enabled` not
//!    `false` — then its machines would wait forever for a bootstrap Secret nobody writes, and the
//!    hook answers Failure saying what to change.
//! 3. An imported Cluster registers agent-initiated when FleetAddonConfig says so
//!    (`agentInitiated: true`, or `agentInitiatedSelector` matches its labels) **or** its
//!    ClusterClass uses the `fleet-agent-bootstrap` patch and `fleetAgent.enabled` is not `false`
//!    (installing the agent at boot is asking for agent-initiated registration). For it the hook
//!    creates, if absent, the Fleet Cluster (client ID generated once, annotated
//!    `fleet.addons.cluster.x-k8s.io/registration: runtime-extension` so the import controller
//!    keeps it agent-initiated) and the ClusterRegistrationToken, waits ("retry") until Fleet has
//!    issued the token, writes the bootstrap Secret and answers Success.
//! 4. Any other imported Cluster registers manager-initiated later: Success, nothing written.

use std::collections::BTreeMap;

use fleet_api_rs::fleet_cluster::Cluster as FleetCluster;
use fleet_api_rs::fleet_cluster_registration_token::ClusterRegistrationToken;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind, ObjectMeta};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

use crate::bootstrap;
use crate::bootstrap::manifest::{
    AgentSettings, BootstrapInput, FleetAgentDefaults, TokenValues, bootstrap_files,
};
use crate::context::Context;
use crate::hooks::cluster::ClusterInfo;
use crate::hooks::handlers::discovery::GENERATE_PATCHES;
use crate::hooks::handlers::registration::{
    cluster_owner, desired_fleet_cluster, desired_token, new_client_id, token_name,
};
use crate::hooks::handlers::topology::{FLEET_AGENT_VARIABLE, fleet_agent_enabled};
use crate::hooks::types::Outcome;
use crate::model::config::{ClusterImport, EffectiveConfig};
use crate::model::selection::ClusterFacts;
use crate::names;

/// Retry interval while Fleet issues the token or writes its Secret.
const RETRY_FLEET: i32 = 5;
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

/// BeforeClusterCreate.
pub async fn before_cluster_create(ctx: &Context, cluster: &ClusterInfo) -> Outcome {
    match before_cluster_create_steps(ctx, cluster).await {
        Ok(outcome) | Err(outcome) => outcome,
    }
}

async fn before_cluster_create_steps(
    ctx: &Context,
    cluster: &ClusterInfo,
) -> Result<Outcome, Outcome> {
    let Some(config) = ctx.config() else {
        return Ok(Outcome::retry(
            RETRY_FLEET,
            "waiting for the FleetAddonConfig to be read",
        ));
    };
    let namespace_labels = namespace_labels(ctx, &cluster.namespace).await?;
    let decision =
        registration(&config, &ctx.flags, cluster, &namespace_labels).map_err(Outcome::failure)?;
    let enabled = fleet_agent_enabled(cluster.variables.get(FLEET_AGENT_VARIABLE));
    match decision {
        Registration::AgentInitiated(import) => {
            prepare_agent_initiated(ctx, &config, import, cluster).await
        }
        Registration::ManagerInitiated(import) => {
            if enabled && class_using_bootstrap_patch(ctx, cluster).await?.is_some() {
                return prepare_agent_initiated(ctx, &config, import, cluster).await;
            }
            Ok(Outcome::Success {
                message: "nothing to prepare: the Cluster registers manager-initiated".to_string(),
            })
        }
        Registration::NotImported(reason) => {
            if enabled && let Some(class) = class_using_bootstrap_patch(ctx, cluster).await? {
                return Ok(Outcome::failure(format!(
                    "Cluster {}: ClusterClass {class} installs the Fleet agent at boot ({GENERATE_PATCHES} patch), but {reason}; select it for import in FleetAddonConfig spec.cluster or set the topology variable {FLEET_AGENT_VARIABLE}.enabled to false",
                    cluster.key()
                )));
            }
            Ok(Outcome::Success {
                message: format!("nothing to prepare: {reason}"),
            })
        }
    }
}

async fn prepare_agent_initiated(
    ctx: &Context,
    config: &EffectiveConfig,
    import: &ClusterImport,
    cluster: &ClusterInfo,
) -> Result<Outcome, Outcome> {
    let ns = cluster.namespace.as_str();
    let fleet_clusters: Api<FleetCluster> = Api::namespaced(ctx.client.clone(), ns);
    let fleet_name = import.fleet_cluster_name(&cluster.name);
    let fleet_cluster = match get_opt(&fleet_clusters, &fleet_name, "Fleet Cluster", ns).await? {
        Some(existing) => existing,
        None => {
            let desired = desired_fleet_cluster(cluster, import, &new_client_id());
            create_or_get(&fleet_clusters, &desired, &fleet_name, "Fleet Cluster", ns).await?
        }
    };
    if fleet_cluster
        .spec
        .kube_config_secret
        .as_deref()
        .is_some_and(|s| !s.is_empty())
    {
        return Err(Outcome::failure(format!(
            "Fleet Cluster {ns}/{fleet_name} registers manager-initiated (spec.kubeConfigSecret is set); delete it to register Cluster {} agent-initiated",
            cluster.key()
        )));
    }
    let mut fleet_spec = fleet_cluster.spec.clone();
    let client_id = match fleet_spec.client_id.clone().filter(|id| !id.is_empty()) {
        Some(id) => id,
        None => {
            // An existing Fleet Cluster without a client ID (e.g. created by hand): give it one.
            let id = new_client_id();
            fleet_clusters
                .patch(
                    &fleet_name,
                    &patch_params(),
                    &Patch::Merge(json!({"spec": {"clientID": id}})),
                )
                .await
                .map_err(|err| {
                    api_failure(
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
    let token_name = token_name(cluster);
    let token = match get_opt(&tokens, &token_name, "ClusterRegistrationToken", ns).await? {
        Some(token) => token,
        None => {
            create_or_get(
                &tokens,
                &desired_token(cluster, import),
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
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
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
        Outcome::failure(format!(
            "Secret {ns}/{values_secret}: the registration values are not UTF-8"
        ))
    })?;
    let token_values = TokenValues::parse(&values)
        .map_err(|err| Outcome::failure(format!("Secret {ns}/{values_secret}: {err}")))?;

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
            Outcome::failure(format!(
                "ConfigMap {fleet_ns}/{}: {err}",
                names::FLEET_CONTROLLER_CONFIGMAP
            ))
        })?;

    // The agent settings the import controller applies to the Fleet Cluster (the live object may
    // still be the minimal first version): the bootstrap agent must match what Fleet manages.
    let full = crate::model::fleet::desired_fleet_cluster(
        cluster,
        import,
        &crate::model::fleet::Registration::AgentInitiated {
            client_id: client_id.clone(),
        },
        None,
    );
    let spec = serde_json::to_value(&full.spec).unwrap_or(Value::Null);
    let input = BootstrapInput {
        token: token_values,
        client_id,
        agent: AgentSettings::from_fleet_cluster_spec(&spec),
        fleet: defaults,
    };
    let files = bootstrap_files(&input)
        .map_err(|err| Outcome::failure(format!("rendering the Fleet agent bootstrap: {err}")))?;
    let secret_name = ensure_bootstrap_secret(&secrets, cluster, files).await?;
    Ok(Outcome::Success {
        message: format!(
            "Fleet Cluster {ns}/{fleet_name} and bootstrap Secret {ns}/{secret_name} are ready"
        ),
    })
}

/// Creates or updates the bootstrap Secret; writes nothing when it is up to date.
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
    match get_opt(secrets, &name, "Secret", ns).await? {
        Some(existing) if existing.data.as_ref() == Some(&data) => {}
        Some(_) => {
            secrets
                .patch(&name, &patch_params(), &Patch::Merge(json!({"data": data})))
                .await
                .map_err(|err| api_failure("updating Secret", ns, &name, &err))?;
        }
        None => {
            let secret = Secret {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some(ns.to_string()),
                    labels: Some(BTreeMap::from([(
                        names::CAPI_CLUSTER_NAME_LABEL.to_string(),
                        cluster.name.clone(),
                    )])),
                    owner_references: cluster_owner(cluster).map(|owner| vec![owner]),
                    ..Default::default()
                },
                type_: Some("Opaque".to_string()),
                data: Some(data),
                ..Default::default()
            };
            create_or_get(secrets, &secret, &name, "Secret", ns).await?;
        }
    }
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
    let ns = cluster.namespace.as_str();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    let tokens: Api<ClusterRegistrationToken> = Api::namespaced(ctx.client.clone(), ns);
    let fleet_clusters: Api<FleetCluster> = Api::namespaced(ctx.client.clone(), ns);
    let secret_name = bootstrap::secret_name(&cluster.name);
    let token_name = token_name(cluster);

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
        let prepared = crate::model::fleet::prepared_by_runtime_extension(Some(&fleet));
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
    let fleet_clusters: Api<FleetCluster> = Api::namespaced(ctx.client.clone(), ns);
    let listed = fleet_clusters
        .list(&ListParams::default())
        .await
        .map_err(|err| api_failure("listing Fleet Clusters in", ns, "", &err))?;
    let expected_name = config.cluster.as_ref().map_or_else(
        || cluster.name.clone(),
        |import| import.fleet_cluster_name(&cluster.name),
    );
    let owned = |fleet: &&FleetCluster| {
        !cluster.uid.is_empty()
            && fleet
                .owner_references()
                .iter()
                .any(|o| o.uid == cluster.uid)
    };
    let fleet = listed.items.iter().find(owned).or_else(|| {
        listed
            .items
            .iter()
            .find(|fleet| fleet.meta().name.as_deref() == Some(expected_name.as_str()))
    });
    let Some(fleet) = fleet else {
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
    let deployments: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &fleet_ns, &resource);
    let listed = deployments
        .list(&ListParams::default())
        .await
        .map_err(|err| api_failure("listing BundleDeployments in", &fleet_ns, "", &err))?;
    let objects: Vec<Value> = listed
        .items
        .iter()
        .map(|object| serde_json::to_value(object).unwrap_or(Value::Null))
        .collect();
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

/// The ClusterClass of `cluster` (`namespace/name`) if it uses this extension's GeneratePatches
/// handler (any ExtensionConfig name), in the v1beta2 or v1beta1 field names.
async fn class_using_bootstrap_patch(
    ctx: &Context,
    cluster: &ClusterInfo,
) -> Result<Option<String>, Outcome> {
    let Some(class) = &cluster.class else {
        return Ok(None);
    };
    let key = format!("{}/{}", class.namespace, class.name);
    for version in ["v1beta2", "v1beta1"] {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("cluster.x-k8s.io", version, "ClusterClass"),
            "clusterclasses",
        );
        let api: Api<DynamicObject> =
            Api::namespaced_with(ctx.client.clone(), &class.namespace, &resource);
        match api.get_opt(&class.name).await {
            Ok(Some(object)) => {
                let object = serde_json::to_value(&object).unwrap_or(Value::Null);
                return Ok(uses_bootstrap_patch(&object).then_some(key));
            }
            Ok(None) => return Ok(None),
            // This API version is not served (CAPI v1.10 has no v1beta2): try the next one.
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(err) => {
                return Err(api_failure(
                    "reading ClusterClass",
                    &class.namespace,
                    &class.name,
                    &err,
                ));
            }
        }
    }
    Ok(None)
}

/// Whether a ClusterClass has an external patch generated by this extension.
pub fn uses_bootstrap_patch(class: &Value) -> bool {
    let prefix = format!("{GENERATE_PATCHES}.");
    class["spec"]["patches"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|patch| {
            let external = &patch["external"];
            ["generatePatchesExtension", "generateExtension"]
                .iter()
                .filter_map(|field| external[*field].as_str())
                .any(|handler| handler.starts_with(&prefix))
        })
}

async fn namespace_labels(
    ctx: &Context,
    namespace: &str,
) -> Result<BTreeMap<String, String>, Outcome> {
    let api: Api<Namespace> = Api::all(ctx.client.clone());
    let found = get_opt(&api, namespace, "Namespace", "").await?;
    Ok(found.and_then(|ns| ns.metadata.labels).unwrap_or_default())
}

fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(names::RUNTIME_EXTENSION_FIELD_MANAGER.to_string()),
        ..Default::default()
    }
}

fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(names::RUNTIME_EXTENSION_FIELD_MANAGER.to_string()),
        ..Default::default()
    }
}

fn object_key(ns: &str, name: &str) -> String {
    match (ns.is_empty(), name.is_empty()) {
        (true, _) => name.to_string(),
        (false, true) => ns.to_string(),
        (false, false) => format!("{ns}/{name}"),
    }
}

/// A Failure naming what failed; API errors by their message (deterministic, no secrets).
fn api_failure(what: &str, ns: &str, name: &str, err: &kube::Error) -> Outcome {
    let cause = match err {
        kube::Error::Api(status) => format!("{} ({})", status.message, status.code),
        other => other.to_string(),
    };
    Outcome::failure(format!("{what} {}: {cause}", object_key(ns, name)))
}

async fn get_opt<K>(api: &Api<K>, name: &str, kind: &str, ns: &str) -> Result<Option<K>, Outcome>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name)
        .await
        .map_err(|err| api_failure(&format!("reading {kind}"), ns, name, &err))
}

/// Creates `object`; when someone else created it first (another replica, the import
/// controller), returns theirs: never overwrites.
async fn create_or_get<K>(
    api: &Api<K>,
    object: &K,
    name: &str,
    kind: &str,
    ns: &str,
) -> Result<K, Outcome>
where
    K: Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    match api.create(&post_params(), object).await {
        Ok(created) => Ok(created),
        Err(kube::Error::Api(status)) if status.code == 409 => api
            .get(name)
            .await
            .map_err(|err| api_failure(&format!("reading {kind}"), ns, name, &err)),
        Err(err) => Err(api_failure(&format!("creating {kind}"), ns, name, &err)),
    }
}

async fn delete_if_present<K>(api: &Api<K>, name: &str, kind: &str, ns: &str) -> Result<(), Outcome>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(err) => Err(api_failure(&format!("deleting {kind}"), ns, name, &err)),
    }
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

    #[test]
    fn recognises_classes_using_the_bootstrap_patch_in_both_versions() {
        let beta2 = json!({"spec": {"patches": [{"name": "fleet", "external": {"generatePatchesExtension": "fleet-agent-bootstrap.caapf"}}]}});
        let beta1 = json!({"spec": {"patches": [{"name": "fleet", "external": {"generateExtension": "fleet-agent-bootstrap.my-ext"}}]}});
        let other = json!({"spec": {"patches": [{"name": "x", "external": {"generatePatchesExtension": "generate-patches.test-extension"}},
                                                 {"name": "y", "definitions": []}]}});
        assert!(uses_bootstrap_patch(&beta2));
        assert!(uses_bootstrap_patch(&beta1));
        assert!(!uses_bootstrap_patch(&other));
        assert!(!uses_bootstrap_patch(&json!({})));
    }
}
