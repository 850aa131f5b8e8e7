//! BeforeClusterDelete. For a Cluster whose Fleet workloads are removed first
//! (`spec.runtimeExtension.beforeClusterDelete`, docs/lifecycle.md), holds the deletion with
//! the progress until they are gone (the `FleetWorkloadsRemoved` condition and Events on the
//! Cluster say so too), the deadline passes or the operator skips. Then, and for every other
//! Cluster the hooks prepared something for (its class uses the agent bootstrap, or its bootstrap
//! Secret is known to exist), removes the bootstrap Secret and the
//! ClusterRegistrationToken (waits until they are gone) and asks for the deletion of the Fleet
//! Cluster this hook prepared or the Cluster owns, without waiting for it (Fleet's own cleanup
//! may take a while, and the garbage collector removes it with the Cluster anyway). A Cluster
//! with nothing of ours to do is answered without a request to the API server. What is decided
//! is in [`crate::model::hook_plan`] and [`crate::model::teardown`].

use fleet_api_rs::fleet_cluster::Cluster as FleetCluster;
use fleet_api_rs::fleet_cluster_registration_token::ClusterRegistrationToken;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::Value;

use crate::api::CapiCluster;
use crate::hooks::cluster::ClusterInfo;
use crate::hooks::handlers::api::{bundle_deployments, get_opt};
use crate::hooks::hook_context::HookContext;
use crate::hooks::workload_cluster;
use crate::model::capi;
use crate::model::config::EffectiveConfig;
use crate::model::fleet;
use crate::model::hook_plan::{self as plan, DeleteStart, HookOutcome};
use crate::model::plan::{ObjectId, Write};
use crate::model::teardown::{self, BundleRef, Downstream, Mode, Progress, Verdict, reason};
use crate::names;

/// BeforeClusterDelete.
pub async fn before_cluster_delete(ctx: &HookContext, cluster: &ClusterInfo) -> HookOutcome {
    let config = ctx.base.config();
    let now = Timestamp::now();
    let secret_known = ctx
        .bootstrap_secrets
        .known_present(&cluster.namespace, &cluster.name);
    let steps = Steps {
        ctx,
        cluster,
        config: config.as_deref(),
        now,
        prepared: plan::prepared_by_hooks(cluster.fleet_agent, secret_known),
    };
    // A Cluster moved into itself (docs/self-managed.md): its Fleet Cluster, token and bootstrap
    // Secret now serve the self-managed cluster; deleting the source copy keeps them.
    if crate::model::move_state::is_moved(&cluster.annotations) {
        let why =
            "the Cluster moved into itself: its Fleet workloads serve the self-managed cluster";
        return match steps.end_removal(None, why).await {
            Err(outcome) => outcome,
            Ok(()) => HookOutcome::ok(),
        };
    }
    let decided = teardown::mode(
        &cluster.annotations,
        cluster.deleted_at,
        config.as_deref().map(|c| &c.runtime_extension.teardown),
        now,
    );
    let outcome = match plan::delete_start(&decided.mode, cluster.fleet_agent, secret_known) {
        DeleteStart::Answer(answer) => answer,
        DeleteStart::Cleanup { hold_on_error } => held(hold_on_error, steps.cleanup().await),
        DeleteStart::TeardownEnded { hold_on_error } => {
            held(hold_on_error, steps.ended(&decided.mode).await)
        }
        DeleteStart::Teardown { deadline } => steps
            .teardown(deadline)
            .await
            .unwrap_or_else(|outcome| outcome),
    };
    plan::with_problems(outcome, &decided.problems)
}

/// The answer of a step; an error of ours holds the deletion only when `hold`.
fn held(hold: bool, result: Result<HookOutcome, HookOutcome>) -> HookOutcome {
    match result {
        Ok(outcome) => outcome,
        Err(outcome) if hold => outcome,
        Err(outcome) => plan::proceed_despite(outcome),
    }
}

/// One call's reads and writes. An `Err` is the answer (a "retry" naming what failed).
struct Steps<'a> {
    ctx: &'a HookContext,
    cluster: &'a ClusterInfo,
    config: Option<&'a EffectiveConfig>,
    now: Timestamp,
    /// Whether the hooks may have prepared something to clean up ([`plan::prepared_by_hooks`]).
    prepared: bool,
}

impl Steps<'_> {
    fn ns(&self) -> &str {
        &self.cluster.namespace
    }

    fn fleet_clusters(&self) -> Api<FleetCluster> {
        Api::namespaced(self.ctx.base.client.clone(), self.ns())
    }

    fn fleet_name(&self) -> String {
        plan::fleet_cluster_of(self.cluster, self.config)
    }

    fn fleet_key(&self) -> String {
        format!("{}/{}", self.ns(), self.fleet_name())
    }

    /// Deletes what the hooks prepared; proceeds once the bootstrap Secret and the token are
    /// gone.
    async fn cleanup(&self) -> Result<HookOutcome, HookOutcome> {
        let ns = self.ns();
        let cluster = self.cluster;
        let secrets: Api<Secret> = Api::namespaced(self.ctx.base.client.clone(), ns);
        let tokens: Api<ClusterRegistrationToken> =
            Api::namespaced(self.ctx.base.client.clone(), ns);
        let fleet_clusters = self.fleet_clusters();
        let secret_name = names::bootstrap_secret_name(&cluster.name);
        let token_name = fleet::registration_token_name(cluster);

        let fleet = get_opt(&fleet_clusters, &self.fleet_name(), "Fleet Cluster", ns).await?;
        self.ctx
            .write(plan::cleanup(cluster, fleet.as_ref()))
            .await?;

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
        Ok(plan::delete_answer(&remaining))
    }

    /// [`Self::cleanup`] (when the hooks may have prepared something), answering `message` once
    /// it is done.
    async fn cleanup_saying(&self, message: String) -> Result<HookOutcome, HookOutcome> {
        if !self.prepared {
            return Ok(HookOutcome::success(message));
        }
        Ok(match self.cleanup().await? {
            HookOutcome::Success { message: cleaned } if cleaned.is_empty() => {
                HookOutcome::success(message)
            }
            other => other,
        })
    }

    /// [`Self::cleanup_saying`] `message` for a Cluster not held (any more). A removal that was
    /// under way ends first with the condition saying [`reason::SKIPPED`] and why: Cluster API's
    /// `ok-to-delete` after this answer is then not taken for an interruption
    /// ([`teardown::interrupted`]).
    async fn not_held(
        &self,
        fleet: Option<&FleetCluster>,
        message: String,
    ) -> Result<HookOutcome, HookOutcome> {
        self.end_removal(fleet, &message).await?;
        self.cleanup_saying(message).await
    }

    /// Ends a removal under way ([`Self::not_held`]) saying `why`: where the live condition says
    /// `Removing`. Cluster API sends the Cluster without its status (cluster-api v1.11.11-v1.13.5
    /// `internal/controllers/topology/cluster/cluster_controller.go` `cleanupCluster`), so it is
    /// read, unless `fleet` shows the removal never started (no teardown mark).
    async fn end_removal(
        &self,
        fleet: Option<&FleetCluster>,
        why: &str,
    ) -> Result<(), HookOutcome> {
        if fleet.is_some_and(|f| !teardown::started(&teardown::labels_of(f))) {
            return Ok(());
        }
        let message = format!("workload removal ended early: {why}");
        self.report(reason::SKIPPED, &message, (false, true)).await
    }

    /// The removal was skipped or timed out: a registered Cluster's condition and a Warning
    /// Event say so; then the cleanup.
    async fn ended(&self, mode: &Mode) -> Result<HookOutcome, HookOutcome> {
        let fleet_key = self.fleet_key();
        let message = teardown::ended_early(mode, &fleet_key).unwrap_or_default();
        let fleet = get_opt(
            &self.fleet_clusters(),
            &self.fleet_name(),
            "Fleet Cluster",
            self.ns(),
        )
        .await?;
        let why = if matches!(mode, Mode::Skipped) {
            reason::SKIPPED
        } else {
            reason::TIMED_OUT
        };
        // Said for a Cluster Fleet deployed to, and for one whose removal had started (the
        // import controller may have deleted its Fleet Cluster already after a skip).
        let registered = fleet.as_ref().is_some_and(teardown::is_registered);
        self.report(why, &message, (registered, false)).await?;
        self.cleanup_saying(message).await
    }

    /// One call during a teardown (module documentation of [`crate::model::teardown`]).
    async fn teardown(&self, deadline: Timestamp) -> Result<HookOutcome, HookOutcome> {
        let (ns, fleet_name, fleet_key) = (self.ns(), self.fleet_name(), self.fleet_key());
        let fleet_clusters = self.fleet_clusters();
        let fleet = get_opt(&fleet_clusters, &fleet_name, "Fleet Cluster", ns).await?;
        let Some(fleet) = fleet else {
            return self
                .not_held(None, format!(
                    "not held: there is no Fleet Cluster {fleet_key}, so Fleet deployed nothing to the cluster"
                ))
                .await;
        };
        if fleet.metadata.deletion_timestamp.is_some() {
            return self
                .not_held(
                    Some(&fleet),
                    format!("not held: Fleet Cluster {fleet_key} is being deleted already"),
                )
                .await;
        }
        if !teardown::is_registered(&fleet) {
            return self
                .not_held(Some(&fleet), format!(
                    "not held: the Fleet agent never registered (Fleet Cluster {fleet_key} has no status.agent.lastSeen), so Fleet deployed nothing to the cluster"
                ))
                .await;
        }
        let deployments = self.deployments(&fleet).await?;
        let teardown::Workloads { left, kept } = teardown::workloads(&deployments);
        let labels = teardown::labels_of(&fleet);
        if !teardown::started(&labels) {
            if left.is_empty() {
                let kept = if kept.is_empty() {
                    String::new()
                } else {
                    format!(" and {} kept until the cluster is deleted", kept.len())
                };
                return self
                    .not_held(Some(&fleet), format!(
                        "not held: nothing to remove, Fleet Cluster {fleet_key} has no BundleDeployment but the agent's{kept}"
                    ))
                    .await;
            }
            self.patch(&fleet, teardown::start_patch(left.len()))
                .await?;
            tracing::info!(cluster = %self.cluster.name, namespace = %ns, fleet_cluster = %fleet_name,
                bundles = left.len(), "removing the Cluster's Fleet workloads before its deletion");
            return self
                .hold(&Progress {
                    fleet_key: &fleet_key,
                    started_with: Some(left.len()),
                    left: &left,
                    kept: &kept,
                    explained: &[],
                    drained: false,
                    downstream: None,
                    deadline,
                    now: self.now,
                })
                .await;
        }
        let import = self.config.and_then(|c| c.cluster.as_ref());
        let keys = teardown::selection_label_keys(self.cluster, import, &fleet);
        let drained = teardown::is_drained(&keys, &labels);
        let explained = if drained {
            self.explain(&left, &fleet_name, &labels).await
        } else {
            Vec::new()
        };
        let gone = teardown::bundles_gone_since(&fleet);
        let downstream = if drained && left.is_empty() {
            let since = match gone {
                Some(since) => since,
                None => {
                    self.patch(&fleet, teardown::bundles_gone_patch(Some(self.now)))
                        .await?;
                    self.now
                }
            };
            let agent_namespace = teardown::agent_namespace(&fleet);
            Some(
                match workload_cluster::leftovers(
                    &self.ctx.base.client,
                    ns,
                    &self.cluster.name,
                    &agent_namespace,
                )
                .await
                {
                    Ok(leftovers) => Downstream::Checked { leftovers },
                    Err(reason) => Downstream::Unchecked {
                        reason,
                        bundles_gone: since,
                    },
                },
            )
        } else {
            if gone.is_some() {
                // BundleDeployments came back (a bundle started targeting the cluster): the
                // settle period starts again when they are gone.
                self.patch(&fleet, teardown::bundles_gone_patch(None))
                    .await?;
            }
            None
        };
        self.hold(&Progress {
            fleet_key: &fleet_key,
            started_with: teardown::bundles_at_start(&fleet),
            left: &left,
            kept: &kept,
            explained: &explained,
            drained,
            downstream: downstream.as_ref(),
            deadline,
            now: self.now,
        })
        .await
    }

    /// The verdict on `progress`: hold with the progress, or (done) report and clean up.
    async fn hold(&self, progress: &Progress<'_>) -> Result<HookOutcome, HookOutcome> {
        match teardown::verdict(progress) {
            Verdict::Hold(message) => {
                self.report(reason::REMOVING, &message, (true, false))
                    .await?;
                Ok(HookOutcome::retry(teardown::RETRY_TEARDOWN, message))
            }
            Verdict::Done(message) => {
                self.report(reason::REMOVED, &message, (true, false))
                    .await?;
                tracing::info!(cluster = %self.cluster.name, namespace = %self.ns(), %message,
                    "the Cluster's Fleet workloads are removed");
                self.cleanup_saying(message).await
            }
        }
    }

    /// The BundleDeployments in the Fleet Cluster's namespace (none while it has none).
    async fn deployments(&self, fleet: &FleetCluster) -> Result<Vec<Value>, HookOutcome> {
        let Some(bundle_ns) = fleet
            .status
            .as_ref()
            .and_then(|status| status.namespace.clone())
            .filter(|ns| !ns.is_empty())
        else {
            return Ok(Vec::new());
        };
        // Live, on purpose: a cached "none left" would let the deletion through early.
        bundle_deployments(&self.ctx.base.client, &bundle_ns).await
    }

    /// Why some of the bundles `left` still target the drained cluster: at most
    /// [`teardown::MAX_EXPLAINED`] Bundles read; one that cannot be read is not explained
    /// (an explanation is a hint, never a reason to hold longer).
    async fn explain(
        &self,
        left: &[BundleRef],
        fleet_name: &str,
        labels: &capi::StringMap,
    ) -> Vec<(BundleRef, &'static str)> {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("fleet.cattle.io", "v1alpha1", "Bundle"),
            "bundles",
        );
        let mut out = Vec::new();
        for bundle in left
            .iter()
            .filter(|b| !b.namespace.is_empty())
            .take(teardown::MAX_EXPLAINED)
        {
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.ctx.base.client.clone(), &bundle.namespace, &resource);
            let Ok(Some(object)) = api.get_opt(&bundle.name).await else {
                continue;
            };
            let Ok(value) = serde_json::to_value(&object) else {
                continue;
            };
            if let Some(why) = teardown::why_still_targeted(&value, fleet_name, labels) {
                out.push((bundle.clone(), why));
            }
        }
        out
    }

    /// Merge-patches the Fleet Cluster `fleet` (as read) with the hooks' field manager.
    async fn patch(&self, fleet: &FleetCluster, patch: Value) -> Result<(), HookOutcome> {
        self.ctx
            .write(vec![Write::MergePatch {
                object: ObjectId::observed(fleet),
                patch,
                manager: names::RUNTIME_EXTENSION_FIELD_MANAGER,
            }])
            .await
    }

    /// Reports `reason` and `message` on the Cluster ([`teardown::report`]).
    async fn report(
        &self,
        reason: &str,
        message: &str,
        when: (bool, bool),
    ) -> Result<(), HookOutcome> {
        let api: Api<CapiCluster> = Api::namespaced(self.ctx.base.client.clone(), self.ns());
        let Some(live) = get_opt(&api, &self.cluster.name, "Cluster", self.ns()).await? else {
            return Ok(());
        };
        let writes = teardown::report(&live, reason, message, when, self.now);
        self.ctx.write(writes).await
    }
}
