//! The Cluster controller: CAPI `Cluster` → Fleet `Cluster` (+ registration token). One
//! reconcile reads top to bottom: observe the Cluster ([`observe`]: the caches, and the API
//! server where a cache may lie), hold while the caches do not show our own last writes or the
//! namespace is terminating, plan its writes in the model ([`crate::model::import::plan`]),
//! and run the plan ([`ImportContext::run`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use fleet_api_rs::fleet_cluster::Cluster as FleetCluster;
use fleet_api_rs::fleet_cluster_registration_token::ClusterRegistrationToken;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};

use crate::api::CapiCluster;
use crate::apply::expectations::Key;
use crate::controllers::import::import_context::{Decided, ImportContext};
use crate::controllers::import::references::Lookup;
use crate::metrics::ReasonLabels;
use crate::model::agent_manifest::TokenValues;
use crate::model::agent_patch::SecretFormat;
use crate::model::agent_settings::Carrier;
use crate::model::capi::{ClusterView, ProviderRef};
use crate::model::config::{ClusterImport, EffectiveConfig};
use crate::model::fleet::template_values;
use crate::model::import::{
    Bootstrap, Decision, Held, ImportInputs, Observed, may_have_bootstrap, plan,
    waits_for_terminating_namespace,
};
use crate::model::namespace::NamespaceState;
use crate::model::plan::Write;
use crate::model::teardown::is_registered;
use crate::model::turtles::{self, FINALIZER_REMOVED, RANCHER_FLEET_AGENT};
use crate::model::upgrade_steps;
use crate::names;
use crate::{Error, Result};

/// Controller name in metrics and logs.
pub const CONTROLLER: &str = "cluster";

/// Reconciles one CAPI Cluster; the status writer recounts after each.
pub async fn reconcile(cluster: Arc<CapiCluster>, ctx: Arc<ImportContext>) -> Result<Action> {
    let result = reconcile_cluster(&cluster, &ctx).await;
    ctx.counts_changed.notify_one();
    result
}

async fn reconcile_cluster(cluster: &CapiCluster, ctx: &ImportContext) -> Result<Action> {
    let Some(config) = ctx.base.config() else {
        return Ok(Action::requeue(Duration::from_secs(1)));
    };
    let observed = match observe(cluster, &config, ctx).await? {
        Ok(observed) => observed,
        Err(hold) => return Ok(hold),
    };
    let plan = plan(&observed, &config)?;
    let adds = plan
        .writes
        .iter()
        .any(|w| matches!(w, Write::Finalizer { add: true, .. }));
    let (action, published) = ctx.run_reporting(plan).await?;
    // Only now: a failed run observes the removal again, and its retry reports and counts it.
    let uid = &observed.view.uid;
    (ctx.finalizers).keep(uid, observed.conflicts.finalizer, adds);
    // Counted as reported: an Event whose publish failed is logged only, and not counted.
    let conflicts = published.into_iter();
    for reason in conflicts.filter(|r| [FINALIZER_REMOVED, RANCHER_FLEET_AGENT].contains(r)) {
        let conflicts = &ctx.base.metrics.conflicts;
        conflicts.get_or_create(&ReasonLabels { reason }).inc();
    }
    if let Some(Bootstrap::Replace { token_uid, .. }) = observed.import.map(|i| i.bootstrap) {
        ctx.bootstrap_tokens
            .followed(&observed.view.uid, &token_uid);
    }
    Ok(action)
}

/// Whether this controller leaves out a watched change of a CAPI Cluster: the echo of its own
/// finalizer patch, or of the health controller's `FleetReady` condition, which it does not read
/// (a decision reads `status.initialization`, `templateValues` metadata and spec:
/// [`crate::model::capi::template_object`]).
pub fn skips_cluster_change(ctx: &ImportContext, cluster: &CapiCluster) -> bool {
    ctx.expectations.own_echo_of(cluster, Key::cluster)
        || ctx.expectations.is_echo_of(cluster, Key::cluster_status)
}

/// What the reconcile decides from, or what holds it (`Err`): the caches do not show our last
/// writes of the Cluster's objects yet (the watch event that brings a write in triggers the
/// Cluster again, the wait is a bound), or its namespace is terminating (nothing new is
/// created there).
async fn observe(
    cluster: &CapiCluster,
    config: &EffectiveConfig,
    ctx: &ImportContext,
) -> Result<std::result::Result<Observed, Action>> {
    observe_rancher(cluster, ctx).await?;
    let Decided {
        view,
        fleet_name,
        live,
        decision,
    } = ctx
        .decide(cluster, config)
        .ok_or_else(|| Error::malformed("Cluster", cluster.name_any(), "no name or namespace"))?;
    let (namespace, name) = (view.namespace.as_str(), view.name.as_str());
    let token = ctx.stores.token(namespace, name);
    let version = |meta: Option<&kube::core::ObjectMeta>| meta?.resource_version.clone();
    let cached = [
        (Key::cluster(namespace, name), version(Some(cluster.meta()))),
        (
            Key::fleet_cluster(namespace, &fleet_name),
            version(live.as_deref().map(|l| &l.metadata)),
        ),
        (
            Key::token(namespace, name),
            version(token.as_deref().map(|t| &t.metadata)),
        ),
        // The conflict condition (`model::turtles`), so its Event is not sent twice.
        (
            Key::cluster_status(namespace, name),
            version(Some(cluster.meta())),
        ),
    ];
    let behind = cached.iter();
    let wait = behind.filter_map(|(key, seen)| ctx.expectations.wait(key, seen.as_deref()));
    let terminating = ctx.stores.namespace_state(namespace) == NamespaceState::Terminating;
    let hold = match wait.min() {
        Some(wait) => Some(Action::requeue(wait)),
        None => waits_for_terminating_namespace(&decision, terminating).then(Action::await_change),
    };
    tracing::debug!(cluster = %name, %namespace, ?decision, ?hold, "decided");
    if let Some(hold) = hold {
        return Ok(Err(hold));
    }
    let fleet = match live {
        None if decision.confirms_fleet_cluster() => {
            let api: Api<FleetCluster> = Api::namespaced(ctx.base.controllers.clone(), namespace);
            api.get_opt(&fleet_name).await?.map(Arc::new)
        }
        live => live,
    };
    let import = match (&decision, config.cluster.as_ref()) {
        (Decision::Import { agent_initiated }, Some(import)) => {
            let registering = *agent_initiated && !fleet.as_deref().is_some_and(is_registered);
            let token = token.as_deref().filter(|_| registering);
            Some(observe_import(ctx, cluster, &view, import, fleet.as_deref(), token).await?)
        }
        _ => None,
    };
    let managed = matches!(decision, Decision::Wait | Decision::Import { .. });
    let (finalizer, removed_now) = ctx
        .finalizers
        .observe(&view.uid, view.has_finalizer(), managed);
    if removed_now {
        tracing::warn!(cluster = %name, %namespace, removals = finalizer.removals,
            "our finalizer was removed by another controller (Rancher Turtles with use-caapf: false?)");
    }
    Ok(Ok(Observed {
        conflicts: turtles::Seen {
            finalizer,
            removed_now,
        },
        cluster_version: cluster.meta().resource_version.clone(),
        regarding: cluster.object_ref(&()),
        token: token.map(|t| t.metadata.clone()),
        now: Timestamp::now(),
        resync: ctx.base.flags.sync_period,
        view,
        decision,
        fleet_name,
        fleet,
        import,
    }))
}

/// Reads whether Rancher deploys a Fleet agent of its own to a Cluster Rancher Turtles imports
/// (its finalizer [`turtles::TURTLES_IMPORT_FINALIZER`]: no read for any other), from the
/// Rancher cluster Turtles labelled with its name, and remembers it for every decision of it. A
/// `management.cattle.io` group that is not served (404) says no.
async fn observe_rancher(cluster: &CapiCluster, ctx: &ImportContext) -> Result<()> {
    let (Some(uid), Some(namespace)) = (&cluster.metadata.uid, &cluster.metadata.namespace) else {
        return Ok(());
    };
    let imported = (cluster.finalizers().iter()).any(|f| f == turtles::TURTLES_IMPORT_FINALIZER);
    let mut rancher_fleet = false;
    if imported {
        use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
        let gvk = GroupVersionKind::gvk("management.cattle.io", "v3", "Cluster");
        let resource = ApiResource::from_gvk_with_plural(&gvk, "clusters");
        let api: Api<DynamicObject> = Api::all_with(ctx.base.controllers.clone(), &resource);
        let [owner, owner_ns] = turtles::RANCHER_OWNER_LABELS;
        let selector = format!("{owner}={},{owner_ns}={namespace}", cluster.name_any());
        rancher_fleet = match api.list(&ListParams::default().labels(&selector)).await {
            Ok(list) => (list.items.iter())
                .filter_map(|c| serde_json::to_value(c).ok())
                .any(|c| turtles::rancher_deploys_fleet(&c)),
            Err(kube::Error::Api(status)) if status.code == 404 => false,
            Err(err) => return Err(err.into()),
        };
    }
    ctx.rancher_fleet.set(uid, rancher_fleet);
    Ok(())
}

/// What an import reads besides: the agent settings with the ClusterClass's annotation from the
/// cache, `templateValues` with the referenced objects' caches, and, for the registration
/// `token` of an unregistered agent-initiated Cluster, where its bootstrap Secret stands.
async fn observe_import(
    ctx: &ImportContext,
    cluster: &CapiCluster,
    view: &ClusterView,
    import: &ClusterImport,
    live: Option<&FleetCluster>,
    token: Option<&kube::core::PartialObjectMeta<ClusterRegistrationToken>>,
) -> Result<ImportInputs> {
    let class = |namespace: &str, name: &str| ctx.stores.class(namespace, name);
    let own_class = view
        .class
        .as_ref()
        .and_then(|c| class(&c.namespace, &c.name));
    let class_annotations = own_class.as_deref().map(|c| c.annotations());
    let annotation = class_annotations.and_then(|a| a.get(names::AGENT_SETTINGS_ANNOTATION));
    let agent = import
        .agent_settings(view, annotation.map(String::as_str))
        .map_err(|problems| {
            tracing::warn!(cluster = %view.name, namespace = %view.namespace,
                problems = ?problems.iter().map(ToString::to_string).collect::<Vec<_>>(),
                "invalid Fleet agent settings: the Fleet Cluster is left as it is");
            let mut classes = Vec::new();
            for problem in &problems {
                if let Carrier::ClusterClass { namespace, name } = &problem.carrier
                    && let Some(found) = class(namespace, name)
                    && !classes.contains(&found.object_ref(&()))
                {
                    classes.push(found.object_ref(&()));
                }
            }
            Held { problems, classes }
        });
    let mut inputs = ImportInputs {
        template_values: BTreeMap::new(),
        unreadable: Vec::new(),
        machines: None,
        bootstrap: Bootstrap::Current,
        agent,
        rollout: Default::default(),
        gates: Default::default(),
    };
    // Held: nothing else is read (nothing is written).
    if inputs.agent.is_err() {
        return Ok(inputs);
    }
    let json = cluster.to_json()?;
    if import.rollout.is_some() {
        let step = live
            .and_then(|l| l.metadata.annotations.as_ref())
            .and_then(|a| a.get(names::UPGRADE_STEP_ANNOTATION));
        let upgrading = upgrade_steps::UpgradeStep::parse(step.map(String::as_str))
            .is_some_and(|s| s.in_progress());
        let status = json.get("status");
        inputs.rollout = crate::model::rollout::facts(view, class_annotations, status, upgrading);
        inputs.gates =
            (ctx.rollout_gates.read()).map_or_else(|_| Default::default(), |g| g.clone());
    }
    let mut objects: [Option<serde_json::Value>; 2] = [None, None];
    let references = [
        (view.control_plane_ref.as_ref(), "ControlPlane"),
        (view.infrastructure_ref.as_ref(), "InfrastructureCluster"),
    ];
    let reported = &ctx.missing_references;
    for ((reference, role), object) in references.into_iter().zip(&mut objects) {
        let Some(reference) = reference else {
            continue;
        };
        let problem = match ctx.references.lookup(reference).await {
            Lookup::Found(found) => {
                reported.resolved(&view.uid, role);
                *object = Some(found);
                continue;
            }
            Lookup::Missing => format!(
                "{role} {} {}/{} not found",
                reference.kind, reference.namespace, reference.name
            ),
            Lookup::Unavailable(reason) => format!("{role} cannot be read: {reason}"),
        };
        // Reported once, not every reconcile.
        if reported.first_report(&view.uid, role) {
            tracing::warn!(cluster = %view.name, namespace = %view.namespace, %problem, "templateValues incomplete");
            inputs.unreadable.push(problem);
        }
    }
    let [control_plane, infrastructure] = objects;
    inputs.template_values =
        template_values(&json, view, control_plane.as_ref(), infrastructure.as_ref());
    if let Some(control_plane) = control_plane.filter(|_| upgrade_steps::follows_machines(view)) {
        let deployments = ProviderRef {
            group: "cluster.x-k8s.io".into(),
            version: None,
            kind: "MachineDeployment".into(),
            name: view.name.clone(),
            namespace: view.namespace.clone(),
        };
        match ctx.references.owned_by(&deployments).await {
            Ok(owned) => {
                reported.resolved(&view.uid, "MachineDeployments");
                inputs.machines = upgrade_steps::machine_versions(&control_plane, &owned);
            }
            // The labels stay as shown meanwhile; reported once.
            Err(problem) if reported.first_report(&view.uid, "MachineDeployments") => {
                inputs
                    .unreadable
                    .push(format!("MachineDeployments cannot be read: {problem}"));
            }
            Err(_) => {}
        }
    }
    if let Some(token) = token
        && may_have_bootstrap(view, live)
    {
        inputs.bootstrap = bootstrap(ctx, view, token).await?;
    }
    Ok(inputs)
}

/// Where the Cluster's bootstrap Secret stands with its registration `token`: a Secret rendered
/// from a token that expired or was deleted and was created again (a new token value) must
/// follow it, once Fleet issued its values. Only Secrets of this release are rewritten (an
/// earlier release's keep their content). Reads the API server only until the Secret was seen
/// to follow the token.
async fn bootstrap(
    ctx: &ImportContext,
    view: &ClusterView,
    token: &kube::core::PartialObjectMeta<ClusterRegistrationToken>,
) -> Result<Bootstrap> {
    let following = &ctx.bootstrap_tokens;
    let token_uid = token.metadata.uid.as_deref().unwrap_or_default();
    if token_uid.is_empty() || following.follows(&view.uid, token_uid) {
        return Ok(Bootstrap::Current);
    }
    let secrets: Api<Secret> = Api::namespaced(ctx.base.controllers.clone(), &view.namespace);
    let name = names::bootstrap_secret_name(&view.name);
    let Some(found) = secrets.get_metadata_opt(&name).await? else {
        // Not prepared yet: BeforeClusterCreate renders it from the current token.
        return Ok(Bootstrap::Current);
    };
    let annotations = found.metadata.annotations.as_ref();
    let rendered_from = annotations
        .and_then(|a| a.get(names::REGISTRATION_TOKEN_UID_ANNOTATION))
        .map(String::as_str);
    if SecretFormat::of(annotations) != SecretFormat::Script || rendered_from == Some(token_uid) {
        following.followed(&view.uid, token_uid);
        return Ok(Bootstrap::Current);
    }
    // Fleet issued this token once its status names the values Secret: the same handler call
    // wrote that Secret for this token first (rancher/fleet v0.12-v0.16
    // clusterregistrationtoken/handler.go OnChange; BeforeClusterCreate waits for the same).
    let tokens: Api<ClusterRegistrationToken> =
        Api::namespaced(ctx.base.controllers.clone(), &view.namespace);
    let issued = tokens
        .get_opt(&token.name_any())
        .await?
        .filter(|t| t.metadata.uid.as_deref() == Some(token_uid))
        .and_then(|t| t.status)
        .and_then(|status| status.secret_name)
        .filter(|name| !name.is_empty());
    let values = match issued {
        None => None,
        Some(values_secret) => secrets
            .get_opt(&values_secret)
            .await?
            .and_then(|s| s.data)
            .and_then(|d| d.get("values").cloned())
            .and_then(|v| String::from_utf8(v.0).ok())
            .and_then(|text| TokenValues::parse(&text).ok()),
    };
    Ok(match values {
        None => {
            tracing::debug!(cluster = %view.name, namespace = %view.namespace,
                "waiting for Fleet to issue the new registration token before rewriting the bootstrap Secret");
            Bootstrap::NotIssued
        }
        Some(values) => Bootstrap::Replace {
            values: Box::new(values),
            token_uid: token_uid.to_string(),
        },
    })
}
