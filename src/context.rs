//! What every part of the manager shares (the base context): the clients, the effective
//! configuration, metrics, readiness, the event recorder, the refused requests and the stop
//! signal. Each part that needs more has its own context over it: `ImportContext`
//! (`crate::controllers::import`), `MoveContext` (`crate::controllers::move`) and `HookContext`
//! (`crate::hooks`).

use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{EventType, Recorder, Reporter};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::cli::ManagerFlags;
use crate::client::refusals::Authorization;
use crate::metrics::Metrics;
use crate::model::config::EffectiveConfig;
use crate::model::plan::{Next, Plan};
use crate::probes::Readiness;

/// The controller name in Events (`reportingController`), as CAAPF.
pub const EVENT_REPORTER: &str = "caapf-controller";

/// The effective configuration as controllers see it: `None` until it has been read once, so
/// nobody acts on the "object absent" defaults before knowing whether the object exists.
pub type ConfigReceiver = watch::Receiver<Option<Arc<EffectiveConfig>>>;
/// The publishing side of [`ConfigReceiver`].
pub type ConfigSender = watch::Sender<Option<Arc<EffectiveConfig>>>;

/// A channel that holds nothing until the first read completes.
pub fn config_channel() -> (ConfigSender, ConfigReceiver) {
    watch::channel(None)
}

/// Waits until the configuration has been read once, then returns it.
pub async fn wait_for_config(receiver: &mut ConfigReceiver) -> Option<Arc<EffectiveConfig>> {
    let config = receiver.wait_for(Option::is_some).await.ok()?;
    config.clone()
}

/// Shared state of the manager.
#[derive(Clone)]
pub struct Context {
    /// The priority client: the Runtime SDK hooks, the leader election Lease and the
    /// configuration watch; no client-side rate limit (see [`crate::client`]).
    pub client: Client,
    /// The controllers' client, rate-limited by `--kube-api-qps`/`--kube-api-burst`; Events
    /// go through it too.
    pub controllers: Client,
    pub flags: ManagerFlags,
    pub metrics: Arc<Metrics>,
    pub readiness: Readiness,
    /// The effective configuration; `None` until first read, then changes whenever
    /// `FleetAddonConfig` changes (published by [`crate::controllers::config_watch`]).
    pub config: ConfigReceiver,
    /// One recorder for the process, so repeated events are aggregated into series.
    pub recorder: Recorder,
    /// Cancelled when the manager stops.
    pub shutdown: CancellationToken,
    /// Requests the API server refused, from every client of the process
    /// ([`crate::client::refusals`]).
    pub authorization: Authorization,
}

fn reporter() -> Reporter {
    Reporter {
        controller: EVENT_REPORTER.to_string(),
        instance: std::env::var("POD_NAME").ok(),
    }
}

impl Context {
    /// A `()` at every change of the effective configuration from now on (what re-evaluates
    /// every object of a controller: `Controller::reconcile_all_on`).
    pub fn config_changes(&self) -> impl futures::Stream<Item = ()> + Send + 'static {
        let mut changes = self.config.clone();
        changes.mark_unchanged();
        futures::stream::unfold(changes, |mut changes| async move {
            changes.changed().await.ok()?;
            Some(((), changes))
        })
    }
    pub fn new(
        client: Client,
        flags: ManagerFlags,
        config: ConfigReceiver,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            recorder: Recorder::new(client.clone(), reporter()),
            controllers: client.clone(),
            client,
            flags,
            metrics: Arc::new(Metrics::new()),
            readiness: Readiness::default(),
            config,
            shutdown,
            authorization: Authorization::default(),
        }
    }

    /// The same context with the priority client observed for refused requests, named
    /// `component` in the `Authorized` condition.
    pub fn with_observed_priority_client(mut self, component: &'static str) -> Self {
        self.client = self.authorization.observe(self.client.clone(), component);
        self
    }

    /// The same context for one part of the manager: its controllers' client observed for
    /// refused requests, named `component` in the `Authorized` condition (the Event recorder
    /// stays on the shared client).
    pub fn for_component(&self, component: &'static str) -> Self {
        let mut ctx = self.with_shutdown(self.shutdown.clone());
        ctx.controllers = self
            .authorization
            .observe(self.controllers.clone(), component);
        ctx
    }

    /// The same context with the controllers on their own client (Events too).
    pub fn with_controllers_client(mut self, controllers: Client) -> Self {
        self.recorder = Recorder::new(controllers.clone(), reporter());
        self.controllers = controllers;
        self
    }

    /// The same context with another stop signal: the leader tasks get one that is also
    /// cancelled when this replica stops leading.
    pub fn with_shutdown(&self, shutdown: CancellationToken) -> Self {
        Self {
            shutdown,
            ..self.clone()
        }
    }

    /// The current effective configuration, `None` before it has been read once.
    pub fn config(&self) -> Option<Arc<EffectiveConfig>> {
        self.config.borrow().clone()
    }

    /// Carries out `plan` through the one runner with the controllers' client, recording no
    /// expectations (for writers that do not wait for their caches).
    pub async fn run(&self, plan: Plan) -> crate::Result<Next> {
        let target = crate::apply::Target {
            client: &self.controllers,
            recorder: &self.recorder,
            expectations: None,
        };
        target.run(plan).await
    }

    /// Publishes an Event about `regarding` ([`crate::apply::event`]).
    pub async fn event(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        crate::apply::event(&self.recorder, regarding, type_, reason, action, note).await;
    }
}
