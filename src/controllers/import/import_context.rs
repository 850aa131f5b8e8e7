//! What the import controllers share ([`ImportContext`]): the base context, the caches, the
//! referenced-object caches, the backoff, the expectations of our own writes, the one decision
//! every controller reads a Cluster through ([`ImportContext::decide`]), and the runner their
//! plans go through ([`ImportContext::run`]).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};

use fleet_api_rs::fleet_cluster::Cluster as FleetCluster;
use futures::future::BoxFuture;
use kube::Resource;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::Notify;

use crate::Result;
use crate::api::{CachedFleetCluster, CapiCluster};
use crate::apply::Target;
use crate::apply::expectations::Expectations;
use crate::context::Context;
use crate::controllers::backoff::Backoff;
use crate::controllers::import::references::References;
use crate::controllers::import::stores::{Stores, decoded};
use crate::controllers::reconcile;
use crate::model::capi::ClusterView;
use crate::model::config::EffectiveConfig;
use crate::model::import::{Decision, import_decision};
use crate::model::plan::{Next, Plan};
use crate::model::turtles::FinalizerMemory;

/// What the import controllers share.
pub struct ImportContext {
    pub base: Arc<Context>,
    pub stores: Stores,
    pub references: References,
    pub backoff: Backoff,
    /// Our writes the caches have not shown yet.
    pub expectations: Expectations,
    /// Pinged after every Cluster reconcile; the status writer recounts (at a bounded rate).
    pub counts_changed: Notify,
    /// Missing references already reported, so each is reported once.
    pub missing_references: MissingReferences,
    /// True once every cache holds its first full list.
    caches_ready: tokio::sync::watch::Receiver<bool>,
    /// Bootstrap Secrets seen to follow their Cluster's current registration token.
    pub bootstrap_tokens: BootstrapTokens,
    /// Our finalizer on each managed Cluster, to tell its removal by someone else.
    pub finalizers: PerCluster<FinalizerMemory>,
    /// The Clusters Rancher deploys a Fleet agent of its own to ([`ClusterView::rancher_fleet`]).
    pub rancher_fleet: PerCluster<()>,
    /// The rollout waves of every class, as the status writer last counted them.
    pub rollout_gates: std::sync::RwLock<crate::model::rollout::Gates>,
    /// What the rollout lint read and published of each Bundle.
    pub bundle_lint: crate::model::rollout::strategy::LintMemory,
}

impl ImportContext {
    pub fn new(
        base: Arc<Context>,
        stores: Stores,
        references: References,
        caches_ready: tokio::sync::watch::Receiver<bool>,
    ) -> Self {
        Self {
            base,
            stores,
            references,
            backoff: Backoff::default(),
            expectations: Expectations::default(),
            counts_changed: Notify::new(),
            missing_references: MissingReferences::default(),
            caches_ready,
            bootstrap_tokens: BootstrapTokens::default(),
            finalizers: PerCluster::default(),
            rancher_fleet: PerCluster::default(),
            rollout_gates: Default::default(),
            bundle_lint: Default::default(),
        }
    }

    /// Waits until every cache holds its first full list: decisions need all of them, not just
    /// the controller's own. (kube's `Store::wait_until_ready` wakes only the last of several
    /// concurrent waiters, so the caches are awaited once and the result shared here.)
    pub async fn caches_ready(&self) {
        let mut ready = self.caches_ready.clone();
        // An error means the sender is gone: the manager is stopping.
        let _ = ready.wait_for(|ready| *ready).await;
    }

    /// Reads one Cluster from the caches and decides what to do with it; `live` is its Fleet
    /// Cluster, decoded from the cache.
    pub fn decide(&self, cluster: &CapiCluster, config: &EffectiveConfig) -> Option<Decided> {
        let (view, fleet_name, cached, decision) = self.decide_cached(cluster, config)?;
        let live = cached.as_deref().and_then(decoded);
        Some(Decided {
            view,
            fleet_name,
            live,
            decision,
        })
    }

    /// Carries out `plan` through the one runner, with the controllers' client, recording
    /// what its writes leave for the caches to show; then what the controller does next
    /// ([`Next::Echo`]: wait for the watch event that brings the answer, at most the
    /// expectations' TTL).
    pub async fn run(&self, plan: Plan) -> Result<Action> {
        Ok(self.run_reporting(plan).await?.0)
    }

    /// [`Self::run`], and the reasons of the Events it published.
    pub async fn run_reporting(&self, plan: Plan) -> Result<(Action, Vec<&'static str>)> {
        let target = Target {
            client: &self.base.controllers,
            recorder: &self.base.recorder,
            expectations: Some(&self.expectations),
        };
        let (next, published) = target.run_reporting(plan).await?;
        let action = match next {
            Next::AwaitChange => Action::await_change(),
            Next::After(wait) => Action::requeue(wait),
            Next::Echo => Action::requeue(crate::apply::expectations::TTL),
        };
        Ok((action, published))
    }

    /// [`Self::decide`] without decoding the Fleet Cluster, for callers that need only the
    /// view and the decision (a namespace decides all its Clusters on every change).
    pub fn decision(
        &self,
        cluster: &CapiCluster,
        config: &EffectiveConfig,
    ) -> Option<(ClusterView, Decision)> {
        let (view, _, _, decision) = self.decide_cached(cluster, config)?;
        Some((view, decision))
    }

    fn decide_cached(
        &self,
        cluster: &CapiCluster,
        config: &EffectiveConfig,
    ) -> Option<(
        ClusterView,
        String,
        Option<Arc<CachedFleetCluster>>,
        Decision,
    )> {
        let mut view = ClusterView::of(cluster)?;
        view.rancher_fleet = self.rancher_fleet.lock().contains_key(&view.uid);
        let fleet_name = config.fleet_cluster_name(&view.name);
        let cached = self
            .stores
            .fleet_clusters
            .get(&ObjectRef::new(&fleet_name).within(&view.namespace));
        let namespace_labels = self.stores.namespace_labels(&view.namespace);
        let decision = import_decision(
            &view,
            config,
            &namespace_labels,
            cached.as_deref().map(|c| &c.metadata),
            k8s_openapi::jiff::Timestamp::now(),
        );
        Some((view, fleet_name, cached, decision))
    }

    /// Drops the reports and bootstrap-token entries of Clusters no longer in the cache (by
    /// uid, so a Cluster re-created under the same name is reported afresh).
    pub fn forget_gone_reports(&self) {
        if self.missing_references.is_empty()
            && self.bootstrap_tokens.is_empty()
            && self.finalizers.is_empty()
            && self.rancher_fleet.is_empty()
        {
            return;
        }
        let live: HashSet<String> = self
            .stores
            .clusters
            .state()
            .iter()
            .filter_map(|c| c.metadata.uid.clone())
            .collect();
        self.missing_references.retain(&live);
        self.bootstrap_tokens.retain(&live);
        self.finalizers.retain(&live);
        self.rancher_fleet.retain(&live);
    }
}

/// A Cluster, what the caches know about its Fleet Cluster, and the decision.
pub struct Decided {
    pub view: ClusterView,
    pub fleet_name: String,
    pub live: Option<Arc<FleetCluster>>,
    pub decision: Decision,
}

/// What the import controllers remember of each Cluster (by uid) between reconciles. Entries
/// of Clusters that are gone are dropped by [`PerCluster::retain`], so a Cluster re-created
/// under the same name starts afresh.
#[derive(Default)]
pub struct PerCluster<V>(Mutex<HashMap<String, V>>);

impl<V> PerCluster<V> {
    /// Keeps the entries of the Clusters `live` (uids) holds.
    pub fn retain(&self, live: &HashSet<String>) {
        self.lock().retain(|uid, _| live.contains(uid));
    }

    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, V>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Missing references already reported (the roles), so each is reported once, not every
/// reconcile.
pub type MissingReferences = PerCluster<BTreeSet<&'static str>>;

impl MissingReferences {
    /// Whether the missing `role` reference of the Cluster `uid` is reported for the first time.
    pub(super) fn first_report(&self, uid: &str, role: &'static str) -> bool {
        self.lock().entry(uid.to_string()).or_default().insert(role)
    }

    /// The `role` reference of the Cluster `uid` can be read again.
    pub(super) fn resolved(&self, uid: &str, role: &'static str) {
        let mut reported = self.lock();
        if let Some(roles) = reported.get_mut(uid) {
            roles.remove(role);
            if roles.is_empty() {
                reported.remove(uid);
            }
        }
    }
}

/// The registration token (its uid) whose values each Cluster's bootstrap Secret was seen to
/// hold, so the Secret is not read again until the token changes.
pub type BootstrapTokens = PerCluster<String>;

impl BootstrapTokens {
    pub(super) fn follows(&self, uid: &str, token_uid: &str) -> bool {
        self.lock().get(uid).is_some_and(|seen| seen == token_uid)
    }

    pub(super) fn followed(&self, uid: &str, token_uid: &str) {
        self.lock().insert(uid.to_string(), token_uid.to_string());
    }
}

impl PerCluster<()> {
    /// Remembers whether the Cluster `uid` is in the set.
    pub(super) fn set(&self, uid: &str, member: bool) {
        let mut all = self.lock();
        match member {
            true => all.insert(uid.to_string(), ()),
            false => all.remove(uid),
        };
    }
}

impl PerCluster<FinalizerMemory> {
    /// [`FinalizerMemory::observe`] for the Cluster `uid` while the import manages it (`managed`);
    /// forgotten when it does not. Kept only by [`Self::keep`] once the plan ran, so a removal
    /// whose run failed is seen, reported and counted again on the retry.
    pub(super) fn observe(&self, uid: &str, has: bool, managed: bool) -> (FinalizerMemory, bool) {
        let mut all = self.lock();
        if !managed {
            all.remove(uid);
            return Default::default();
        }
        all.get(uid).copied().unwrap_or_default().observe(has)
    }

    /// Keeps `memory` for the Cluster `uid` after its plan ran (`added`: it added our finalizer).
    pub(super) fn keep(&self, uid: &str, memory: FinalizerMemory, added: bool) {
        let memory = FinalizerMemory {
            on: memory.on || added,
            ..memory
        };
        let mut all = self.lock();
        match memory == FinalizerMemory::default() {
            true => all.remove(uid),
            false => all.insert(uid.to_string(), memory),
        };
    }
}

/// A reconcile of an import controller as the controller runs it: `reconcile` of `controller`,
/// once every cache holds its first full list (decisions need all of them, not just the
/// controller's own), through the one reconcile wrapper (metrics, backoff).
pub fn observed<K, F, Fut>(
    controller: &'static str,
    reconcile: F,
) -> impl FnMut(Arc<K>, Arc<ImportContext>) -> BoxFuture<'static, Result<Action>>
where
    K: Resource + Send + Sync + 'static,
    F: Fn(Arc<K>, Arc<ImportContext>) -> Fut + Copy + Send + 'static,
    Fut: Future<Output = Result<Action>> + Send + 'static,
{
    move |object, ctx| {
        Box::pin(async move {
            ctx.caches_ready().await;
            let (metrics, backoff) = (&ctx.base.metrics, &ctx.backoff);
            let work = reconcile(object.clone(), ctx.clone());
            reconcile::observed(controller, &*object, metrics, backoff, work).await
        })
    }
}

/// The error policy of an import controller: the failed object is retried with the shared
/// per-object exponential backoff.
pub fn retry<K: Resource>(
    controller: &'static str,
) -> impl Fn(Arc<K>, &crate::Error, Arc<ImportContext>) -> Action {
    move |object, error, ctx| reconcile::retry_after(controller, &*object, error, &ctx.backoff)
}
