//! The writes of the Cluster controller, one method a decision ([`Decision`]): the Fleet Cluster
//! of a selected Cluster (with the registration of an agent-initiated one, [`registration`]),
//! its removal when the Cluster is deleted or deselected, the removal of its Fleet workloads
//! first (docs/lifecycle.md), and our finalizer. Each write records what it left for the
//! caches to show ([`crate::apply::expectations`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fleet_api_rs::fleet_cluster::Cluster as FleetCluster;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};

use crate::Result;
use crate::api::CapiCluster;
use crate::apply::expectations::LeavesVersion;
use crate::apply::{
    Outcome, add_finalizer, apply_if_changed_as, create_if_missing, create_or_get,
    delete_if_exists, merge_patch, merge_patch_guarded, remove_finalizer,
};
use crate::controllers::import::import_context::{Decided, ImportContext, ObjectKeys};
use crate::controllers::import::stores::TEMPLATE_VALUES;
use crate::controllers::import::{cluster_agent, registration, template_values};
use crate::model::capi::ClusterView;
use crate::model::config::{ClusterImport, EffectiveConfig};
use crate::model::diff::digest_subtree;
use crate::model::fleet::{
    FleetClusterWrite, Registration, client_id, desired_fleet_cluster, fleet_cluster_write,
    random_client_id, registration_stub,
};
use crate::model::import::{Decision, disowned_after_move};
use crate::model::teardown;
use crate::model::upgrade_steps;
use crate::names;

/// The writes of one Cluster reconcile, each recording what it left for the caches to show.
pub(super) struct ClusterWrites<'a> {
    ctx: &'a ImportContext,
    cluster: &'a CapiCluster,
    keys: ObjectKeys,
    clusters: Api<CapiCluster>,
    fleet_clusters: Api<FleetCluster>,
    regarding: ObjectReference,
}

impl<'a> ClusterWrites<'a> {
    pub fn new(
        ctx: &'a ImportContext,
        cluster: &'a CapiCluster,
        keys: ObjectKeys,
        namespace: &str,
    ) -> Self {
        Self {
            ctx,
            cluster,
            keys,
            clusters: Api::namespaced(ctx.base.controllers.clone(), namespace),
            fleet_clusters: Api::namespaced(ctx.base.controllers.clone(), namespace),
            regarding: cluster.object_ref(&()),
        }
    }

    /// Does what the decision says; returns when to look at the Cluster again.
    pub async fn carry_out(&self, decided: &Decided, config: &EffectiveConfig) -> Result<Action> {
        match decided.decision {
            Decision::Paused { .. } | Decision::Hold | Decision::Ignore => {}
            Decision::Moved => self.moved(decided).await?,
            Decision::Cleanup => self.cleanup(decided).await?,
            Decision::Teardown { deadline } => {
                return self.teardown(decided, config, deadline).await;
            }
            Decision::Release {
                delete_fleet_cluster,
            } => self.release(decided, delete_fleet_cluster).await?,
            Decision::Wait => self.ensure_finalizer(&decided.view).await?,
            Decision::Import { agent_initiated } => {
                if let Some(import) = config.cluster.as_ref() {
                    let token_check = self.import(decided, import, agent_initiated).await?;
                    let period = self.ctx.base.flags.sync_period;
                    return Ok(Action::requeue(
                        token_check.map_or(period, |t| t.min(period)),
                    ));
                }
            }
        }
        Ok(Action::await_change())
    }

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
            merge_patch_guarded(
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
        // The Fleet Cluster is left to the garbage collector when the CAPI Cluster owns it; the
        // namespace controller takes care of shared objects once the Cluster is gone.
        let view = &decided.view;
        let live = confirm_absent(
            decided.live.clone(),
            &self.fleet_clusters,
            &decided.fleet_name,
        )
        .await?;
        if let Some(live) = live
            && !live.owner_references().iter().any(|o| o.uid == view.uid)
        {
            delete_if_exists(&self.fleet_clusters, &live.name_any()).await?;
        }
        registration::delete_token(view, self.ctx).await?;
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
                        merge_patch(&self.fleet_clusters, name, &patch, names::FIELD_MANAGER)
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
            registration::delete_token(&decided.view, self.ctx).await?;
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
        let (view, ctx, regarding) = (&decided.view, self.ctx, &self.regarding);
        let fleet_clusters = &self.fleet_clusters;
        self.ensure_finalizer(view).await?;
        let Some(agent) = cluster_agent::settings(ctx, view, import, regarding).await else {
            return Ok(None);
        };
        let values =
            template_values::resolved(&self.cluster.to_json()?, view, regarding, ctx).await;
        let cached_rv = decided
            .live
            .as_ref()
            .and_then(|l| l.meta().resource_version.clone());
        // The first version of an agent-initiated Fleet Cluster is a stub: its name and a fresh
        // client ID. Our cache may not have seen one created a moment ago (by us or by the
        // runtime extension), so the API server decides: a conflict means someone else's client
        // ID stands.
        let (live, stub_created) = if agent_initiated && decided.live.is_none() {
            let stub = registration_stub(view, import, &random_client_id());
            ctx.expectations
                .on(&self.keys.fleet_cluster, None)
                .record(async {
                    let found =
                        create_or_get(fleet_clusters, &stub, names::REGISTRATION_FIELD_MANAGER)
                            .await?;
                    let created = found.created();
                    Ok((found.into_object().map(Arc::new), created))
                })
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
        let write_kind = fleet_cluster_write(import.patch_resource, live.as_deref());
        upgrade_steps::show(&mut desired, view, live.as_deref());
        let write = async {
            match write_kind {
                FleetClusterWrite::Apply => {
                    // The cache keeps templateValues as a digest (stores/trim.rs).
                    apply_if_changed_as(
                        fleet_clusters,
                        &desired,
                        live.as_deref(),
                        names::FIELD_MANAGER,
                        |object| digest_subtree(object, TEMPLATE_VALUES),
                    )
                    .await
                }
                FleetClusterWrite::CreateOnly => {
                    create_if_missing(fleet_clusters, &desired, live.as_deref()).await
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
        report(outcome, &desired, regarding, ctx).await;
        if agent_initiated {
            return registration::keep_token(
                ctx,
                &self.keys.token,
                regarding,
                view,
                import,
                live.as_deref(),
            )
            .await;
        }
        Ok(None)
    }

    async fn ensure_finalizer(&self, view: &ClusterView) -> Result<()> {
        if view.has_finalizer() {
            return Ok(());
        }
        self.record_cluster_write(add_finalizer(&self.clusters, self.cluster))
            .await
    }

    async fn remove_finalizer(&self) -> Result<()> {
        self.record_cluster_write(remove_finalizer(&self.clusters, self.cluster))
            .await
    }

    /// A write of the CAPI Cluster, recorded for the caches to show.
    async fn record_cluster_write<T: LeavesVersion>(
        &self,
        write: impl Future<Output = Result<T>>,
    ) -> Result<()> {
        let cached = self.cluster.meta().resource_version.as_deref();
        let recorded = self.ctx.expectations.on(&self.keys.cluster, cached);
        recorded.record(write).await.map(drop)
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
