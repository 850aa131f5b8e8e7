//! BeforeClusterCreate, and the preparation of the Fleet agent bootstrap GeneratePatches asks
//! for in the background: reads what the decisions in [`crate::model::hook_plan`] look at,
//! and writes what they return.
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
//! 4. The installed Fleet must be 0.12 or later (read from its `fleet-controller` ConfigMap and
//!    the FleetAddonConfig's `status.installedVersion`; until the ConfigMap exists: retry). With
//!    an older Fleet the hook answers Success naming the version, records a Warning Event on the
//!    Cluster, and prepares nothing: the Cluster is created without the bootstrap.
//! 5. An imported Cluster using the bootstrap registers agent-initiated: the hook creates, if
//!    absent, the Fleet Cluster (client ID generated once, annotated
//!    `fleet.addons.cluster.x-k8s.io/registration: runtime-extension` so the import controller
//!    keeps it agent-initiated) and the ClusterRegistrationToken, waits ("retry") until Fleet has
//!    issued the token, renders Fleet's `fleet-agent` chart into the bootstrap Secret and answers
//!    Success. A Fleet Cluster that already registers manager-initiated is left so: Success, no
//!    Secret.
//!
//! Our own API, RBAC or rendering errors are answered "retry" with the cause, never Failure:
//! a Failure is for a hold we intend, and it is never masked by a failure policy.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use fleet_api_rs::fleet_cluster::Cluster as FleetCluster;
use fleet_api_rs::fleet_cluster_registration_token::ClusterRegistrationToken;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, Secret};
use kube::api::Api;
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::events::EventType;

use crate::api::FleetAddonConfig;
use crate::hooks::cluster::{ClusterInfo, ClusterShape};
use crate::hooks::handlers::api::{get_opt, namespace_labels};
use crate::hooks::hook_context::HookContext;
use crate::model::agent_settings;
use crate::model::boot_script::bootstrap_files;
use crate::model::config::{ClusterImport, EffectiveConfig};
use crate::model::fleet;
use crate::model::hook_plan::{
    self as plan, HookImport, HookOutcome, RETRY_API, RETRY_CONFIG, RETRY_FLEET, api_retry,
};
use crate::model::plan::{ObjectId, Write};
use crate::model::selection::WatchScope;
use crate::names;

/// How long BeforeClusterCreate waits for the preparation before answering "retry" (below
/// every hook timeout; the preparation goes on and its result is there at the next call).
const PREPARE_WAIT: Duration = Duration::from_secs(5);

/// BeforeClusterCreate.
pub async fn before_cluster_create(ctx: &HookContext, cluster: &ClusterInfo) -> HookOutcome {
    if let Some(answer) = plan::without_bootstrap(cluster.fleet_agent) {
        return answer;
    }
    let known = ctx
        .bootstrap_secrets
        .known_present(&cluster.namespace, &cluster.name);
    match plan::known_prepared(ctx.base.config().as_deref(), known, cluster) {
        Some(done) => done,
        None => prepare_in_background(ctx, cluster, Asker::BeforeClusterCreate, PREPARE_WAIT).await,
    }
}

/// Which hook asked for a preparation: what it reports besides its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Asker {
    /// Called once per Cluster (until Success): an unsupported Fleet is also told as an Event on
    /// the Cluster.
    BeforeClusterCreate,
    /// Called at every topology reconcile of a Cluster without a Secret: answers only.
    GeneratePatches,
}

/// Removes a Cluster from [`Context::preparing`] when its preparation ends, however it ends.
struct Preparing {
    set: Arc<Mutex<BTreeSet<String>>>,
    key: String,
}

impl Drop for Preparing {
    fn drop(&mut self) {
        self.set
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.key);
    }
}

/// Runs [`prepare_bootstrap`] for `cluster` in a task of its own (at most one per Cluster at a
/// time), waiting at most `wait` for its answer: pulling a chart or a slow API server never
/// makes a hook miss its deadline, and the work is not lost when it does.
pub async fn prepare_in_background(
    ctx: &HookContext,
    cluster: &ClusterInfo,
    asker: Asker,
    wait: Duration,
) -> HookOutcome {
    let key = cluster.key();
    {
        let mut preparing = ctx.preparing.lock().unwrap_or_else(PoisonError::into_inner);
        if !preparing.insert(key.clone()) {
            return HookOutcome::retry(
                RETRY_FLEET,
                format!("the Fleet agent bootstrap of Cluster {key} is being prepared"),
            );
        }
    }
    let guard = Preparing {
        set: ctx.preparing.clone(),
        key: key.clone(),
    };
    let owned = ctx.clone();
    let cluster = cluster.clone();
    let task = tokio::spawn(async move {
        let _guard = guard;
        let outcome = match prepare_bootstrap(&owned, &cluster, asker).await {
            Ok(outcome) | Err(outcome) => outcome,
        };
        tracing::debug!(cluster = %cluster.name, namespace = %cluster.namespace, ?outcome, "bootstrap preparation ended");
        outcome
    });
    match tokio::time::timeout(wait, task).await {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(err)) => HookOutcome::retry(
            RETRY_API,
            format!("preparing the Fleet agent bootstrap of Cluster {key}: {err}"),
        ),
        Err(_) => HookOutcome::retry(
            RETRY_FLEET,
            format!("the Fleet agent bootstrap of Cluster {key} is being prepared"),
        ),
    }
}

/// For a Cluster that never went through BeforeClusterCreate (created before its class used the
/// bootstrap, rebased onto such a class, switched to `fleetAgent.enabled: true`): reads the
/// Cluster and prepares its bootstrap Secret in the background.
pub fn prepare_existing(ctx: &HookContext, namespace: &str, name: &str) {
    // Already under way: no need to read the Cluster again for every call meanwhile.
    if ctx
        .preparing
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .contains(&format!("{namespace}/{name}"))
    {
        return;
    }
    let owned = ctx.clone();
    let (namespace, name) = (namespace.to_string(), name.to_string());
    tokio::spawn(async move {
        match read_cluster(&owned, &namespace, &name).await {
            Ok(Some(cluster)) if cluster.fleet_agent.enabled() => {
                let outcome =
                    prepare_in_background(&owned, &cluster, Asker::GeneratePatches, Duration::ZERO)
                        .await;
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
    ctx: &HookContext,
    namespace: &str,
    name: &str,
) -> Result<Option<ClusterInfo>, String> {
    for version in ["v1beta2", "v1beta1"] {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("cluster.x-k8s.io", version, "Cluster"),
            "clusters",
        );
        let api: Api<DynamicObject> =
            Api::namespaced_with(ctx.base.client.clone(), namespace, &resource);
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

/// The `agent-settings` annotation of the Cluster's ClusterClass (`None`: no class, or no
/// annotation). A class that does not exist yet holds nothing: Cluster API creates no machine
/// for a Cluster whose class it cannot read either.
async fn class_agent_settings(
    ctx: &HookContext,
    cluster: &ClusterInfo,
) -> Result<Option<String>, HookOutcome> {
    let Some(class) = &cluster.class else {
        return Ok(None);
    };
    for version in ["v1beta2", "v1beta1"] {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("cluster.x-k8s.io", version, "ClusterClass"),
            "clusterclasses",
        );
        let api: Api<DynamicObject> =
            Api::namespaced_with(ctx.base.client.clone(), &class.namespace, &resource);
        match api.get_opt(&class.name).await {
            Ok(Some(object)) => {
                return Ok(object
                    .metadata
                    .annotations
                    .and_then(|mut a| a.remove(names::AGENT_SETTINGS_ANNOTATION)));
            }
            // Absent, or this API version is not served (Cluster API v1.10 has no v1beta2).
            Ok(None) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(err) => {
                return Err(HookOutcome::retry(
                    RETRY_CONFIG,
                    format!(
                        "reading ClusterClass {}/{}: {err}",
                        class.namespace, class.name
                    ),
                ));
            }
        }
    }
    Ok(None)
}

/// Prepares the bootstrap Secret of a Cluster whose control plane uses the bootstrap (for
/// BeforeClusterCreate, and for existing Clusters when GeneratePatches finds no Secret).
/// Success when the Secret exists or the Cluster will not get one; retry while waiting.
pub async fn prepare_bootstrap(
    ctx: &HookContext,
    cluster: &ClusterInfo,
    asker: Asker,
) -> Result<HookOutcome, HookOutcome> {
    let Some(config) = ctx.base.config() else {
        return Ok(plan::config_not_read());
    };
    let namespace_labels = namespace_labels(&ctx.base.client, &cluster.namespace).await?;
    let flags = &ctx.base.flags;
    let scope = WatchScope::new(flags.watch_namespace(), flags.watch_filter_label());
    let decision = plan::hook_import(&config, &scope, cluster, &namespace_labels)
        .map_err(|message| HookOutcome::retry(RETRY_CONFIG, message))?;
    match decision {
        HookImport::AgentInitiated(import) | HookImport::ManagerInitiated(import) => {
            prepare_agent_initiated(ctx, &config, import, cluster, asker).await
        }
        HookImport::NotImported(reason) => Ok(plan::not_imported(&reason)),
    }
}

async fn prepare_agent_initiated(
    ctx: &HookContext,
    config: &EffectiveConfig,
    import: &ClusterImport,
    cluster: &ClusterInfo,
    asker: Asker,
) -> Result<HookOutcome, HookOutcome> {
    let ns = cluster.namespace.as_str();
    let secrets: Api<Secret> = Api::namespaced(ctx.base.client.clone(), ns);
    let secret_name = names::bootstrap_secret_name(&cluster.name);
    if get_opt(&secrets, &secret_name, "Secret", ns)
        .await?
        .is_some()
    {
        return Ok(plan::bootstrap_secret_exists(cluster));
    }

    // The agent settings the import controller will give the Fleet Cluster: the first-boot
    // agent must be the agent Fleet keeps. Invalid settings hold the Cluster's creation (the
    // import controller reports them on the objects that carry them).
    let class_annotation = class_agent_settings(ctx, cluster).await?;
    let agent = import
        .agent_settings(cluster, class_annotation.as_deref())
        .map_err(|problems| {
            HookOutcome::retry(RETRY_CONFIG, plan::invalid_agent_settings(&problems))
        })?;

    // Which Fleet, first: nothing is prepared for a Fleet whose agent the bootstrap cannot
    // render (a Fleet Cluster marked for the bootstrap would wait for an agent that never comes).
    let fleet_ns = plan::fleet_namespace(config);
    let configmaps: Api<ConfigMap> = Api::namespaced(ctx.base.client.clone(), fleet_ns);
    let controller_config = get_opt(
        &configmaps,
        names::FLEET_CONTROLLER_CONFIGMAP,
        "ConfigMap",
        fleet_ns,
    )
    .await?;
    let defaults = plan::fleet_agent_defaults(controller_config.as_ref(), fleet_ns)?;
    let addon_configs: Api<FleetAddonConfig> = Api::all(ctx.base.client.clone());
    let installed = get_opt(&addon_configs, names::CONFIG_NAME, "FleetAddonConfig", "")
        .await?
        .and_then(|config| config.status)
        .and_then(|status| status.installed_version);
    let located = plan::agent_chart(cluster, config, installed.as_deref(), &defaults)
        .and_then(|location| Ok((plan::supported_fleet(cluster, &location)?, location)));
    let (version, location) = match located {
        Ok(located) => located,
        Err(answer) => {
            if asker == Asker::BeforeClusterCreate {
                report_unsupported(ctx, cluster, &answer).await;
            }
            return Err(answer);
        }
    };

    let unsupported = agent_settings::unsupported_fields(&agent, Some(version.minor));
    if !unsupported.is_empty() && asker == Asker::BeforeClusterCreate {
        let message = format!(
            "Fleet {version} is installed: its Fleet Cluster resource has no {}, so Fleet and the first-boot agent ignore it",
            unsupported.join(", ")
        );
        report(
            ctx,
            cluster,
            plan::UNSUPPORTED_AGENT_SETTINGS_REASON,
            message,
        )
        .await;
    }

    let fleet_clusters: Api<FleetCluster> = Api::namespaced(ctx.base.client.clone(), ns);
    let fleet_name = import.fleet_cluster_name(&cluster.name);
    let fleet_cluster = get_opt(&fleet_clusters, &fleet_name, "Fleet Cluster", ns).await?;
    let tokens: Api<ClusterRegistrationToken> = Api::namespaced(ctx.base.client.clone(), ns);
    let token_name = fleet::registration_token_name(cluster);
    let token = get_opt(&tokens, &token_name, "ClusterRegistrationToken", ns).await?;
    let (writes, ready) = plan::registration(
        cluster,
        import,
        fleet_cluster.as_ref(),
        token.as_ref(),
        &fleet::random_client_id(),
        k8s_openapi::jiff::Timestamp::now(),
    )
    .map_err(|err| {
        api_retry(
            "planning the registration of Cluster",
            ns,
            &cluster.name,
            &err,
        )
    })?;
    ctx.write(writes).await?;
    let (client_id, values_secret) = ready?;
    let values = get_opt(&secrets, &values_secret, "Secret", ns).await?;
    let token_values = plan::registration_values(values.as_ref(), ns, &values_secret)?;

    let mut input = plan::bootstrap_input(
        cluster,
        import,
        &agent,
        client_id,
        token_values,
        defaults,
        version,
    )?;
    let fleet_secrets: Api<Secret> = Api::namespaced(ctx.base.client.clone(), fleet_ns);
    for name in crate::model::agent_manifest::propagated_pull_secrets(&input) {
        let secret = get_opt(&fleet_secrets, &name, "Secret", fleet_ns).await?;
        // Fleet fails the same way (`manageagent.go`: "failed to get image pull secret").
        input.pull_secrets.push(secret.ok_or_else(|| {
            HookOutcome::retry(
                RETRY_CONFIG,
                format!("Fleet's imagePullSecrets names Secret {fleet_ns}/{name}, which does not exist: create it (the first-boot agent's image is pulled with it)"),
            )
        })?);
    }
    let objects = ctx
        .agent_chart
        .render(
            &location,
            &config.agent_chart_access(),
            &ctx.base.client,
            &input,
        )
        .await
        .map_err(|err| HookOutcome::retry(RETRY_CONFIG, err))?;
    let files = bootstrap_files(&objects).map_err(|err| {
        HookOutcome::retry(
            RETRY_CONFIG,
            format!("encoding the Fleet agent bootstrap: {err}"),
        )
    })?;
    // Another replica's copy wins: the Secret is written once (the import controller rewrites
    // only a replaced token's values).
    let token_uid = token
        .and_then(|token| token.metadata.uid)
        .unwrap_or_default();
    let secret = plan::desired_bootstrap_secret(cluster, files, &token_uid);
    let body = serde_json::to_value(&secret)
        .map_err(|err| api_retry("encoding Secret", ns, &secret_name, &err.into()))?;
    ctx.write(vec![Write::CreateOrGet {
        object: ObjectId::of::<Secret>(Some(ns), &secret_name, None),
        body,
        manager: names::RUNTIME_EXTENSION_FIELD_MANAGER,
    }])
    .await?;
    Ok(plan::prepared(cluster, &fleet_name, &location.version))
}

/// A Warning Event on the Cluster saying why it boots without the Fleet agent.
async fn report_unsupported(ctx: &HookContext, cluster: &ClusterInfo, answer: &HookOutcome) {
    let HookOutcome::Success { message } = answer else {
        return;
    };
    tracing::warn!(cluster = %cluster.name, namespace = %cluster.namespace, %message, "Fleet agent bootstrap not prepared");
    report(
        ctx,
        cluster,
        plan::UNSUPPORTED_FLEET_REASON,
        message.clone(),
    )
    .await;
}

/// A Warning Event on the Cluster.
async fn report(ctx: &HookContext, cluster: &ClusterInfo, reason: &str, message: String) {
    let api_version = match cluster.shape {
        ClusterShape::V1Beta1 => "cluster.x-k8s.io/v1beta1",
        ClusterShape::V1Beta2 | ClusterShape::Unknown => "cluster.x-k8s.io/v1beta2",
    };
    let regarding = ObjectReference {
        api_version: Some(api_version.to_string()),
        kind: Some("Cluster".to_string()),
        name: Some(cluster.name.clone()),
        namespace: Some(cluster.namespace.clone()),
        uid: Some(cluster.uid.clone()).filter(|uid| !uid.is_empty()),
        ..ObjectReference::default()
    };
    ctx.base
        .event(
            &regarding,
            EventType::Warning,
            reason,
            "PreparingBootstrap",
            message,
        )
        .await;
}
