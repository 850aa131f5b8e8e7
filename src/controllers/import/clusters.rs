//! The Cluster controller: CAPI `Cluster` → Fleet `Cluster` (+ registration token).

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use fleet_api_rs::fleet_cluster::Cluster as FleetCluster;
use fleet_api_rs::fleet_cluster_registration_token::ClusterRegistrationToken;
use k8s_openapi::api::core::v1::{ObjectReference, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};
use serde_json::Value;

use crate::api::CapiCluster;
use crate::apply::expectations::Key;
use crate::apply::{
    Outcome, add_finalizer, apply_if_changed_as, create_if_missing, create_or_get,
    delete_if_exists, merge_patch, merge_patch_guarded, remove_finalizer,
};
use crate::controllers::import::import_context::{Decided, ImportContext};
use crate::controllers::import::references::Lookup;
use crate::controllers::import::stores::TEMPLATE_VALUES;
use crate::model::agent_bootstrap::FLEET_AGENT_VARIABLE;
use crate::model::agent_manifest::{TokenValues, with_token_values};
use crate::model::agent_patch::{SCRIPT_KEY, SecretFormat};
use crate::model::agent_settings;
use crate::model::capi::{ClusterView, ProviderRef};
use crate::model::config::ClusterImport;
use crate::model::config::EffectiveConfig;
use crate::model::diff::digest_subtree;
use crate::model::fleet::{
    FleetClusterWrite, Registration, client_id, desired_fleet_cluster, desired_registration_token,
    fleet_cluster_write, random_client_id, registration_stub, template_values,
};
use crate::model::import::{Decision, disowned_after_move, waits_for_terminating_namespace};
use crate::model::namespace::NamespaceState;
use crate::model::registration_token::{Renewal, extension_patch, renewal};
use crate::model::teardown;
use crate::names;
use crate::{Error, Result};

/// Controller name in metrics and logs.
pub const CONTROLLER: &str = "cluster";

/// Reconciles one CAPI Cluster.
pub async fn reconcile(cluster: Arc<CapiCluster>, ctx: Arc<ImportContext>) -> Result<Action> {
    let result = ctx
        .observed(CONTROLLER, &*cluster, reconcile_cluster(&cluster, &ctx))
        .await;
    ctx.counts_changed.notify_one();
    result
}

/// One Cluster, top to bottom: decide from the caches, wait until they show our own last writes
/// (the watch event that brings a write into the cache triggers this Cluster again), then do
/// what the decision says.
async fn reconcile_cluster(cluster: &CapiCluster, ctx: &ImportContext) -> Result<Action> {
    let Some(config) = ctx.base.config() else {
        return Ok(Action::requeue(Duration::from_secs(1)));
    };
    let decided = ctx
        .decide(cluster, &config)
        .ok_or_else(|| Error::Malformed {
            kind: "Cluster",
            name: cluster.name_any(),
            reason: "no name or namespace".into(),
        })?;
    let view = &decided.view;
    tracing::debug!(cluster = %view.name, namespace = %view.namespace, decision = ?decided.decision, "decided");
    let keys = ObjectKeys::of(view, &decided.fleet_name);
    if let Some(wait) = keys.wait(ctx, cluster, decided.live.as_deref()) {
        tracing::debug!(cluster = %view.name, namespace = %view.namespace, "waiting for the caches to show our last write");
        return Ok(Action::requeue(wait));
    }
    let terminating = crate::controllers::import::namespaces::state(ctx, &view.namespace)
        == NamespaceState::Terminating;
    if waits_for_terminating_namespace(&decided.decision, terminating) {
        tracing::debug!(cluster = %view.name, namespace = %view.namespace, "namespace terminating: nothing new is created in it");
        return Ok(Action::await_change());
    }
    let writes = ClusterWrites {
        ctx,
        cluster,
        keys,
        clusters: Api::namespaced(ctx.base.controllers.clone(), &view.namespace),
        fleet_clusters: Api::namespaced(ctx.base.controllers.clone(), &view.namespace),
        regarding: cluster.object_ref(&()),
    };
    match decided.decision {
        Decision::Paused { .. } | Decision::Hold | Decision::Ignore => {}
        Decision::Moved => writes.moved(&decided).await?,
        Decision::Cleanup => writes.cleanup(&decided).await?,
        Decision::Teardown { deadline } => {
            return writes.teardown(&decided, &config, deadline).await;
        }
        Decision::Release {
            delete_fleet_cluster,
        } => writes.release(&decided, delete_fleet_cluster).await?,
        Decision::Wait => writes.ensure_finalizer(view).await?,
        Decision::Import { agent_initiated } => {
            if let Some(import) = config.cluster.as_ref() {
                let token_check = writes.import(&decided, import, agent_initiated).await?;
                let period = ctx.base.flags.sync_period;
                return Ok(Action::requeue(
                    token_check.map_or(period, |t| t.min(period)),
                ));
            }
        }
    }
    Ok(Action::await_change())
}

/// The writes of one Cluster reconcile, each recording what it left for the caches to show.
struct ClusterWrites<'a> {
    ctx: &'a ImportContext,
    cluster: &'a CapiCluster,
    keys: ObjectKeys,
    clusters: Api<CapiCluster>,
    fleet_clusters: Api<FleetCluster>,
    regarding: ObjectReference,
}

impl ClusterWrites<'_> {
    /// Moved into itself: the Fleet Cluster now serves the self-managed cluster. Keep it, and keep
    /// the garbage collector from deleting it with the source copy.
    async fn moved(&self, decided: &Decided) -> Result<()> {
        let view = &decided.view;
        let owners = decided
            .live
            .as_deref()
            .map(|l| l.owner_references().to_vec())
            .unwrap_or_default();
        if let Some(kept) = disowned_after_move(&owners, &view.uid) {
            let patch = serde_json::json!({"metadata": {"ownerReferences": kept}});
            crate::apply::merge_patch_guarded(
                &self.fleet_clusters,
                &decided.fleet_name,
                names::FIELD_MANAGER,
                |current: Option<&FleetCluster>| {
                    Ok(current
                        .is_some_and(|c| c.owner_references().iter().any(|o| o.uid == view.uid))
                        .then(|| patch.clone()))
                },
            )
            .await?;
        }
        if view.deleting && view.has_finalizer() {
            self.remove_finalizer().await?;
        }
        Ok(())
    }

    /// Deleted: remove what we created, then our finalizer. Nothing here waits, so deletion is
    /// never held; the expectations of the Cluster's objects go with it.
    async fn cleanup(&self, decided: &Decided) -> Result<()> {
        for key in self.keys.all() {
            self.ctx.expectations.forget(key);
        }
        let live = confirm_absent(
            decided.live.clone(),
            &self.fleet_clusters,
            &decided.fleet_name,
        )
        .await?;
        cleanup(
            &decided.view,
            live.as_deref(),
            &self.fleet_clusters,
            self.ctx,
        )
        .await?;
        remove_finalizer(&self.clusters, self.cluster).await?;
        Ok(())
    }

    /// Deleted, its Fleet workloads removed first (docs/lifecycle.md): the Fleet Cluster and
    /// our finalizer stay, so Fleet does not delete the cluster's namespace and abandon the
    /// workloads; once BeforeClusterDelete started the removal (the teardown label), the labels
    /// bundles select the cluster by come off, so Fleet removes their BundleDeployments and the
    /// agent uninstalls them. A Fleet Cluster whose agent never registered has nothing to
    /// remove: cleaned up at once. Runs again at the deadline; Cluster API's `ok-to-delete`,
    /// the skip annotation or the deadline end it (then the decision is [`Decision::Cleanup`]).
    async fn teardown(
        &self,
        decided: &Decided,
        config: &EffectiveConfig,
        deadline: Timestamp,
    ) -> Result<Action> {
        let left =
            Duration::try_from(deadline.duration_since(Timestamp::now())).unwrap_or_default();
        let until_deadline = Action::requeue(left.max(Duration::from_secs(1)));
        // The decision saw the Fleet Cluster's metadata: no object means it did not decode
        // (logged by the cache). Keep it rather than clean up and abandon its workloads.
        let Some(live) = decided.live.as_deref() else {
            return Ok(until_deadline);
        };
        if !teardown::is_registered(live) {
            self.cleanup(decided).await?;
            return Ok(Action::await_change());
        }
        let labels = teardown::labels_of(live);
        if teardown::started(&labels) {
            let keys = teardown::selection_label_keys(&decided.view, config.cluster.as_ref(), live);
            if let Some(patch) = teardown::drain_patch(&keys, &labels) {
                let name = &decided.fleet_name;
                self.ctx
                    .expectations
                    .on(
                        &self.keys.fleet_cluster,
                        live.metadata.resource_version.as_deref(),
                    )
                    .record(async {
                        crate::apply::merge_patch(
                            &self.fleet_clusters,
                            name,
                            &patch,
                            names::FIELD_MANAGER,
                        )
                        .await
                        .map(|drained| drained.metadata.resource_version)
                    })
                    .await?;
                tracing::info!(fleet_cluster = %name, namespace = %decided.view.namespace,
                    removed = ?keys.iter().filter(|k| labels.contains_key(*k)).collect::<Vec<_>>(),
                    "Fleet Cluster drained: the labels bundles select it by are removed");
            }
        }
        Ok(until_deadline)
    }

    /// No longer selected: delete the Fleet Cluster when the decision says so, then let go.
    async fn release(&self, decided: &Decided, delete_fleet_cluster: bool) -> Result<()> {
        let name = &decided.fleet_name;
        if delete_fleet_cluster
            && confirm_absent(decided.live.clone(), &self.fleet_clusters, name)
                .await?
                .is_some()
        {
            delete_if_exists(&self.fleet_clusters, name).await?;
            delete_token(&decided.view, self.ctx).await?;
            self.ctx
                .base
                .event(
                    &self.regarding,
                    EventType::Normal,
                    "Deselected",
                    "Deleting",
                    format!("No longer selected: deleted Fleet Cluster `{name}`"),
                )
                .await;
        }
        self.remove_finalizer().await
    }

    /// Selected: our finalizer, the Fleet Cluster (a stub first when agent-initiated), and the
    /// registration token of an agent-initiated Cluster, kept valid until it registered. Returns
    /// when the token must be looked at again (`None`: no token to keep).
    async fn import(
        &self,
        decided: &Decided,
        import: &ClusterImport,
        agent_initiated: bool,
    ) -> Result<Option<Duration>> {
        let (view, ctx) = (&decided.view, self.ctx);
        self.ensure_finalizer(view).await?;
        // Invalid agent settings hold the Fleet Cluster as it is (or uncreated): its agent keeps
        // running as it does until the annotation is fixed, which reconciles this Cluster again.
        let agent = match import.agent_settings(view, class_agent_settings(view, ctx).as_deref()) {
            Ok(agent) => agent,
            Err(problems) => {
                self.report_invalid_agent_settings(view, &problems).await;
                return Ok(None);
            }
        };
        let values =
            template_values_for(&self.cluster.to_json()?, view, &self.regarding, ctx).await;
        let cached_rv = decided
            .live
            .as_ref()
            .and_then(|l| l.meta().resource_version.clone());
        let (live, stub_created) = if agent_initiated && decided.live.is_none() {
            ctx.expectations
                .on(&self.keys.fleet_cluster, None)
                .record(create_registration_stub(view, import, &self.fleet_clusters))
                .await?
        } else {
            (decided.live.clone(), false)
        };
        let registration = if agent_initiated {
            Registration::AgentInitiated {
                client_id: client_id(live.as_deref(), random_client_id),
            }
        } else {
            Registration::ManagerInitiated
        };
        let mut desired = desired_fleet_cluster(view, import, &agent, &registration, Some(values));
        crate::model::upgrade_steps::show(&mut desired, view, live.as_deref());
        let write = async {
            match fleet_cluster_write(import.patch_resource, live.as_deref()) {
                FleetClusterWrite::Apply => {
                    // The cache keeps templateValues as a digest (stores.rs).
                    apply_if_changed_as(
                        &self.fleet_clusters,
                        &desired,
                        live.as_deref(),
                        names::FIELD_MANAGER,
                        |object| digest_subtree(object, TEMPLATE_VALUES),
                    )
                    .await
                }
                FleetClusterWrite::CreateOnly => {
                    create_if_missing(&self.fleet_clusters, &desired, live.as_deref()).await
                }
            }
        };
        let written = ctx
            .expectations
            .on(&self.keys.fleet_cluster, cached_rv.as_deref())
            .record(write)
            .await?;
        let outcome = if stub_created {
            Outcome::Created
        } else {
            written.outcome
        };
        report(outcome, &desired, &self.regarding, ctx).await;
        if agent_initiated {
            return self.keep_token(view, import, live.as_deref()).await;
        }
        Ok(None)
    }

    /// A Warning Event on each object carrying a problem: the ClusterClass for its annotation's,
    /// the Cluster for its own; the Cluster's Event names all of them (it is what is held).
    async fn report_invalid_agent_settings(
        &self,
        view: &ClusterView,
        problems: &[agent_settings::LayerProblem],
    ) {
        let all: Vec<String> = problems.iter().map(ToString::to_string).collect();
        tracing::warn!(cluster = %view.name, namespace = %view.namespace, problems = ?all,
            "invalid Fleet agent settings: the Fleet Cluster is left as it is");
        let held = format!(
            "Fleet agent settings invalid, the Fleet Cluster is left as it is until they are fixed: {}",
            all.join("; ")
        );
        self.ctx
            .base
            .event(
                &self.regarding,
                EventType::Warning,
                agent_settings::INVALID_REASON,
                "Importing",
                held,
            )
            .await;
        let mut classes: Vec<(&str, &str, Vec<String>)> = Vec::new();
        for problem in problems {
            if let agent_settings::Carrier::ClusterClass { namespace, name } = &problem.carrier {
                match classes
                    .iter_mut()
                    .find(|(ns, n, _)| ns == namespace && n == name)
                {
                    Some((_, _, errors)) => errors.push(problem.error.to_string()),
                    None => classes.push((namespace, name, vec![problem.error.to_string()])),
                }
            }
        }
        for (namespace, name, errors) in classes {
            let Some(class) = self.ctx.stores.class(namespace, name) else {
                continue;
            };
            self.ctx
                .base
                .event(
                    &class.object_ref(&()),
                    EventType::Warning,
                    agent_settings::INVALID_REASON,
                    "Importing",
                    format!(
                        "Fleet agent settings invalid, the Fleet Clusters of this class are left as they are until they are fixed: {}",
                        errors.join("; ")
                    ),
                )
                .await;
        }
    }

    /// The registration token of an agent-initiated Cluster whose agent has not registered yet
    /// (no `status.agent.lastSeen`): created when missing (Fleet deletes expired tokens),
    /// extended before it expires ([`crate::model::registration_token`]), and the bootstrap
    /// Secret's registration values follow a token that was replaced. Returns when to look again.
    async fn keep_token(
        &self,
        view: &ClusterView,
        import: &ClusterImport,
        live: Option<&FleetCluster>,
    ) -> Result<Option<Duration>> {
        let ctx = self.ctx;
        let registered = live
            .and_then(|c| c.status.as_ref())
            .and_then(|s| s.agent.as_ref())
            .and_then(|a| a.last_seen.as_ref())
            .is_some();
        if registered {
            return Ok(None);
        }
        let tokens: Api<ClusterRegistrationToken> =
            Api::namespaced(ctx.base.controllers.clone(), &view.namespace);
        let Some(token) = ctx.stores.token(&view.namespace, &view.name) else {
            let desired = desired_registration_token(view, import, Timestamp::now());
            let written = ctx
                .expectations
                .on(&self.keys.token, None)
                .record(create_if_missing(&tokens, &desired, None))
                .await?;
            if written.outcome == Outcome::Created {
                tracing::info!(cluster = %view.name, namespace = %view.namespace,
                    ttl = %import.registration_token_ttl, "ClusterRegistrationToken created");
            }
            // Its watch event brings us back.
            return Ok(None);
        };
        let ttl = crate::api::duration::parse_duration(&import.registration_token_ttl)
            .unwrap_or(Duration::from_secs(24 * 3600));
        let created = token
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or_else(Timestamp::now, |t| t.0);
        let recorded = token
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(names::REGISTRATION_TOKEN_EXPIRES_ANNOTATION))
            .map(String::as_str);
        let next = match renewal(created, recorded, ttl, Timestamp::now()) {
            Renewal::Wait(wait) => wait,
            Renewal::Extend {
                ttl: extended,
                expires,
                recheck,
            } => {
                let patch = extension_patch(&extended, expires);
                ctx.expectations
                    .on(&self.keys.token, token.metadata.resource_version.as_deref())
                    .record(async {
                        merge_patch(&tokens, &view.name, &patch, names::FIELD_MANAGER)
                            .await
                            .map(|t| t.metadata.resource_version)
                    })
                    .await?;
                tracing::info!(cluster = %view.name, namespace = %view.namespace,
                    ttl = %extended, "ClusterRegistrationToken extended: the Cluster has not registered yet");
                recheck
            }
        };
        if may_have_bootstrap(view, live) {
            let uid = token.metadata.uid.clone().unwrap_or_default();
            if let Some(retry) = self.follow_token(view, &token.name_any(), &uid).await? {
                return Ok(Some(next.min(retry)));
            }
        }
        Ok(Some(next))
    }

    /// When the token is not the one the Cluster's bootstrap Secret was rendered from (it
    /// expired or was deleted, and was created again: a new token value), writes the new token's
    /// registration values into the Secret, once Fleet issued them. Returns a short retry while
    /// Fleet has not. Only Secrets of this release are rewritten (an earlier release's keep their
    /// content). Reads the API server only until the Secret was seen to match the token.
    async fn follow_token(
        &self,
        view: &ClusterView,
        token_name: &str,
        token_uid: &str,
    ) -> Result<Option<Duration>> {
        let ctx = self.ctx;
        if token_uid.is_empty() || ctx.bootstrap_follows(&view.uid, token_uid) {
            return Ok(None);
        }
        let secrets: Api<Secret> = Api::namespaced(ctx.base.controllers.clone(), &view.namespace);
        let name = names::bootstrap_secret_name(&view.name);
        let Some(found) = secrets.get_metadata_opt(&name).await? else {
            // Not prepared yet: BeforeClusterCreate renders it from the current token.
            return Ok(None);
        };
        let annotations = found.metadata.annotations.as_ref();
        let rendered_from = annotations
            .and_then(|a| a.get(names::REGISTRATION_TOKEN_UID_ANNOTATION))
            .map(String::as_str);
        if SecretFormat::of(annotations) != SecretFormat::Script || rendered_from == Some(token_uid)
        {
            ctx.bootstrap_followed(&view.uid, token_uid);
            return Ok(None);
        }
        // Fleet issued this token once its status names the values Secret: the same handler
        // call wrote that Secret for this token first (rancher/fleet v0.12-v0.16
        // clusterregistrationtoken/handler.go OnChange; BeforeClusterCreate waits for the same).
        let tokens: Api<ClusterRegistrationToken> =
            Api::namespaced(ctx.base.controllers.clone(), &view.namespace);
        let issued = tokens
            .get_opt(token_name)
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
        let Some(values) = values else {
            tracing::debug!(cluster = %view.name, namespace = %view.namespace,
                "waiting for Fleet to issue the new registration token before rewriting the bootstrap Secret");
            return Ok(Some(TOKEN_ISSUE_RETRY));
        };
        let wrote = merge_patch_guarded(&secrets, &name, names::FIELD_MANAGER, |current| {
            let Some(current) = current else {
                return Ok(None);
            };
            let script = current
                .data
                .as_ref()
                .and_then(|d| d.get(SCRIPT_KEY))
                .and_then(|v| std::str::from_utf8(&v.0).ok())
                .unwrap_or_default();
            let files = with_token_values(script, &values).map_err(|reason| Error::Malformed {
                kind: "Secret",
                name: name.clone(),
                reason,
            })?;
            Ok(Some(refreshed_secret_patch(files, token_uid)))
        })
        .await?;
        if wrote {
            ctx.bootstrap_followed(&view.uid, token_uid);
            tracing::info!(cluster = %view.name, namespace = %view.namespace,
                "bootstrap Secret rewritten with the new registration token");
            ctx.base
                .event(
                    &self.regarding,
                    EventType::Normal,
                    "BootstrapTokenReplaced",
                    "Updating",
                    format!(
                        "The ClusterRegistrationToken was replaced before the Cluster registered: bootstrap Secret `{name}` now holds the new token (machines created from now on register with it)"
                    ),
                )
                .await;
        }
        Ok(None)
    }

    async fn ensure_finalizer(&self, view: &ClusterView) -> Result<()> {
        if !view.has_finalizer() {
            self.ctx
                .expectations
                .on(
                    &self.keys.cluster,
                    self.cluster.meta().resource_version.as_deref(),
                )
                .record(add_finalizer(&self.clusters, self.cluster))
                .await?;
        }
        Ok(())
    }

    async fn remove_finalizer(&self) -> Result<()> {
        self.ctx
            .expectations
            .on(
                &self.keys.cluster,
                self.cluster.meta().resource_version.as_deref(),
            )
            .record(remove_finalizer(&self.clusters, self.cluster))
            .await?;
        Ok(())
    }
}

/// The cached Fleet Cluster, or, when the cache has none, what the API server has: the cache
/// may not have seen a Fleet Cluster created moments ago, and a deletion decided from it would
/// leave that Fleet Cluster orphaned.
async fn confirm_absent(
    cached: Option<Arc<FleetCluster>>,
    api: &Api<FleetCluster>,
    name: &str,
) -> Result<Option<Arc<FleetCluster>>> {
    match cached {
        Some(live) => Ok(Some(live)),
        None => Ok(api.get_opt(name).await?.map(Arc::new)),
    }
}

/// Creates the minimal first version of an agent-initiated Fleet Cluster (name and a fresh
/// client ID) unless it exists; returns the live object and whether we created it. Our cache may
/// not have seen a Fleet Cluster created a moment ago (by us or by the runtime extension), so
/// existence is decided by the API server: a conflict means someone else's client ID stands.
async fn create_registration_stub(
    view: &ClusterView,
    import: &ClusterImport,
    api: &Api<FleetCluster>,
) -> Result<(Option<Arc<FleetCluster>>, bool)> {
    let stub = registration_stub(view, import, &random_client_id());
    let found = create_or_get(api, &stub, names::REGISTRATION_FIELD_MANAGER).await?;
    let created = found.created();
    Ok((found.into_object().map(Arc::new), created))
}

/// The `agent-settings` annotation of the Cluster's ClusterClass, from the cache.
fn class_agent_settings(view: &ClusterView, ctx: &ImportContext) -> Option<String> {
    let class = view.class.as_ref()?;
    ctx.stores
        .class(&class.namespace, &class.name)?
        .metadata
        .annotations
        .as_ref()?
        .get(names::AGENT_SETTINGS_ANNOTATION)
        .cloned()
}

async fn report(
    outcome: Outcome,
    fleet: &FleetCluster,
    regarding: &ObjectReference,
    ctx: &ImportContext,
) {
    let name = fleet.name_any();
    let namespace = fleet.namespace().unwrap_or_default();
    match outcome {
        Outcome::Unchanged => {}
        // Creating is what every selected Cluster gets: a log line and the imported count in
        // the FleetAddonConfig status, not an Event per Cluster (one request each).
        Outcome::Created => {
            tracing::info!(fleet_cluster = %name, %namespace, "Fleet Cluster created");
        }
        // An update changes what a user may rely on: say so where they look.
        Outcome::Updated => {
            tracing::info!(fleet_cluster = %name, %namespace, "Fleet Cluster updated");
            ctx.base
                .event(
                    regarding,
                    EventType::Normal,
                    "Updated",
                    "Updating",
                    format!(
                        "Updated `fleet.cattle.io/v1alpha1/Cluster` object `{name}` in `{namespace}`"
                    ),
                )
                .await;
        }
    }
}

/// The objects a Cluster reconcile reads and writes, as expectation keys.
struct ObjectKeys {
    cluster: Key,
    fleet_cluster: Key,
    token: Key,
}

impl ObjectKeys {
    fn of(view: &ClusterView, fleet_name: &str) -> Self {
        Self {
            cluster: Key::cluster(&view.namespace, &view.name),
            fleet_cluster: Key::fleet_cluster(&view.namespace, fleet_name),
            token: Key::token(&view.namespace, &view.name),
        }
    }

    fn all(&self) -> [&Key; 3] {
        [&self.cluster, &self.fleet_cluster, &self.token]
    }

    /// How long to wait until the caches show our last writes of these objects (`None`: they
    /// do).
    fn wait(
        &self,
        ctx: &ImportContext,
        cluster: &CapiCluster,
        live: Option<&FleetCluster>,
    ) -> Option<Duration> {
        let token = ctx.stores.token(&cluster.namespace()?, &cluster.name_any());
        [
            (&self.cluster, cluster.meta().resource_version.as_deref()),
            (
                &self.fleet_cluster,
                live.and_then(|l| l.meta().resource_version.as_deref()),
            ),
            (
                &self.token,
                token
                    .as_ref()
                    .and_then(|t| t.metadata.resource_version.as_deref()),
            ),
        ]
        .into_iter()
        .filter_map(|(key, cached)| ctx.expectations.wait(key, cached))
        .min()
    }
}

/// Whether this controller leaves out a watched change of a CAPI Cluster: the echo of its own
/// finalizer patch, or of the health controller's `FleetReady` condition, which it does not read
/// (a decision reads `status.initialization`, `templateValues` metadata and spec:
/// [`crate::model::capi::template_object`]).
pub fn skips_cluster_change(ctx: &ImportContext, cluster: &CapiCluster) -> bool {
    ctx.expectations.own_echo_of(cluster, Key::cluster)
        || ctx.expectations.is_echo_of(cluster, Key::cluster_status)
}

/// Removes what we created for a deleted Cluster. The Fleet Cluster is left to the garbage
/// collector when the CAPI Cluster owns it; the namespace controller takes care of shared
/// objects once the Cluster is gone. Nothing here waits, so deletion is never held.
async fn cleanup(
    view: &ClusterView,
    live: Option<&FleetCluster>,
    fleet_clusters: &Api<FleetCluster>,
    ctx: &ImportContext,
) -> Result<()> {
    if let Some(live) = live {
        let owned = live
            .owner_references()
            .iter()
            .any(|owner| owner.uid == view.uid);
        if !owned {
            delete_if_exists(fleet_clusters, &live.name_any()).await?;
        }
    }
    delete_token(view, ctx).await
}

/// Deletes the registration token, if there is one (asking the API server when the cache has
/// none, as [`confirm_absent`] does) — only tokens of agent-initiated Clusters exist.
async fn delete_token(view: &ClusterView, ctx: &ImportContext) -> Result<()> {
    let tokens: Api<ClusterRegistrationToken> =
        Api::namespaced(ctx.base.controllers.clone(), &view.namespace);
    if ctx.stores.token(&view.namespace, &view.name).is_some()
        || tokens.get_metadata_opt(&view.name).await?.is_some()
    {
        delete_if_exists(&tokens, &view.name).await?;
    }
    Ok(())
}

/// How soon to look again for the values of a token Fleet has not issued yet (its status change
/// brings us back too; this covers a missed order of events).
const TOKEN_ISSUE_RETRY: Duration = Duration::from_secs(10);

/// Whether the Cluster may have a bootstrap Secret: its class uses this extension's `fleetAgent`
/// variable (Cluster API writes it into every Cluster of such a class; a control-plane override
/// may enable what the Cluster-level value disables), or the runtime extension prepared its
/// Fleet Cluster. Other agent-initiated Clusters cost no read.
fn may_have_bootstrap(view: &ClusterView, live: Option<&FleetCluster>) -> bool {
    view.variables.contains_key(FLEET_AGENT_VARIABLE)
        || crate::model::fleet::prepared_by_runtime_extension(live.map(|l| &l.metadata))
}

/// The merge patch rewriting a bootstrap Secret's files, with the token it now follows.
fn refreshed_secret_patch(
    files: std::collections::BTreeMap<String, String>,
    token_uid: &str,
) -> Value {
    let data: serde_json::Map<String, Value> = files
        .into_iter()
        .map(|(key, text)| {
            (
                key,
                Value::String(base64::engine::general_purpose::STANDARD.encode(text)),
            )
        })
        .collect();
    serde_json::json!({
        "metadata": {"annotations": {names::REGISTRATION_TOKEN_UID_ANNOTATION: token_uid}},
        "data": data,
    })
}

/// `templateValues` with whatever references can be read; a reference that cannot is reported
/// once (event and log) and left out.
async fn template_values_for(
    json: &Value,
    view: &ClusterView,
    regarding: &ObjectReference,
    ctx: &ImportContext,
) -> std::collections::BTreeMap<String, Value> {
    let control_plane = resolve(
        view,
        view.control_plane_ref.as_ref(),
        "ControlPlane",
        regarding,
        ctx,
    )
    .await;
    let infrastructure = resolve(
        view,
        view.infrastructure_ref.as_ref(),
        "InfrastructureCluster",
        regarding,
        ctx,
    )
    .await;
    template_values(json, view, control_plane.as_ref(), infrastructure.as_ref())
}

async fn resolve(
    view: &ClusterView,
    reference: Option<&ProviderRef>,
    role: &'static str,
    regarding: &ObjectReference,
    ctx: &ImportContext,
) -> Option<Value> {
    let reference = reference?;
    let problem = match ctx.references.lookup(reference).await {
        Lookup::Found(object) => {
            ctx.resolved(&view.uid, role);
            return Some(object);
        }
        Lookup::Missing => format!(
            "{role} {} {}/{} not found",
            reference.kind, reference.namespace, reference.name
        ),
        Lookup::Unavailable(reason) => format!("{role} cannot be read: {reason}"),
    };
    if ctx.first_report(&view.uid, role) {
        tracing::warn!(cluster = %view.name, namespace = %view.namespace, %problem, "templateValues incomplete");
        ctx.base
            .event(
                regarding,
                EventType::Warning,
                "TemplateValuesIncomplete",
                "Creating",
                format!("{problem}; templateValues are set without it"),
            )
            .await;
    }
    None
}
