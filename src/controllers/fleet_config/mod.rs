//! The Fleet installation controller: installs and upgrades Fleet with helm (`spec.install`),
//! keeps Fleet's API server settings and feature gates in line (`spec.config`), and reports in
//! `FleetAddonConfig` status.
//!
//! A thin kube-runtime Controller over the singleton `FleetAddonConfig`:
//! - it reconciles on spec changes only (generation, or a re-created object): its own status
//!   writes never trigger it;
//! - narrow watches of the objects the settings come from ([`watches`]) trigger it too;
//! - after success it checks again every `--sync-period` (new charts for `followLatest`, drift);
//! - after a failure it retries with a per-object exponential backoff (5 s doubling to 5 min),
//!   and triggers from watched objects do not shorten that wait; a spec change does;
//! - reconciles run one at a time; helm runs one command at a time in the whole process.

pub mod api_server_url;
pub mod install;
pub mod settings;
pub mod steps;
pub mod watches;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector;
use kube::runtime::{WatchStreamExt, predicates, watcher};
use tokio::sync::{mpsc, watch};

use crate::api::FleetAddonConfig;
use crate::context::Context;
use crate::controllers::backoff::{Backoff, BackoffKey};
use crate::controllers::reconcile::{self, retry_after};
use crate::helm::{Helm, HelmSettings};
use crate::model::config::EffectiveConfig;
use crate::model::fleet_status;
use crate::model::plan::{Next, ObjectId, Plan, Write};
use crate::{Error, names};
use watches::WatchTarget;

/// The controller's name in metrics and logs.
pub const CONTROLLER: &str = "fleet-config";

/// How long running helm commands may finish after shutdown was asked for, before they are
/// killed.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);

/// What reconciles share.
struct State {
    ctx: Arc<Context>,
    helm: Helm,
    backoff: Backoff,
    targets: watch::Sender<BTreeSet<WatchTarget>>,
}

/// Runs the controller until `ctx.shutdown` is cancelled.
pub async fn run(ctx: Arc<Context>) {
    let helm = match Helm::new(HelmSettings::from_flags(&ctx.flags), ctx.metrics.clone()) {
        Ok(helm) => helm.stop_when(ctx.shutdown.clone()),
        Err(err) => {
            tracing::error!(%err, "cannot prepare helm's home directory; Fleet installation is disabled");
            ctx.shutdown.cancelled().await;
            return;
        }
    };
    let (targets_tx, targets_rx) = watch::channel(BTreeSet::new());
    let (trigger_tx, trigger_rx) = mpsc::channel::<()>(1);
    let watches = tokio::spawn(watches::run(
        ctx.controllers.clone(),
        targets_rx,
        trigger_tx,
        ctx.shutdown.clone(),
    ));
    let state = Arc::new(State {
        ctx: ctx.clone(),
        helm,
        backoff: Backoff::default(),
        targets: targets_tx,
    });

    let api: Api<FleetAddonConfig> = Api::all(ctx.controllers.clone());
    let (reader, writer) = reflector::store();
    let objects = watcher(
        api,
        watcher::Config::default().fields(&format!("metadata.name={}", names::CONFIG_NAME)),
    )
    .backoff(crate::controllers::watch_backoff::watch_backoff())
    .reflect(writer)
    .applied_objects()
    // Spec changes and re-creation only: status writes (ours and others') do not trigger.
    .predicate_filter(generation_and_uid, Default::default());
    let triggers = futures::stream::unfold(trigger_rx, |mut rx| async move {
        rx.recv().await.map(|()| ((), rx))
    });
    let shutdown = ctx.shutdown.clone();
    let controller = Controller::for_stream(objects, reader)
        .with_config(ControllerConfig::default().concurrency(1))
        .reconcile_all_on(triggers)
        .graceful_shutdown_on(async move { shutdown.cancelled().await })
        .run(reconcile, error_policy, state)
        .for_each(|result| async move {
            if let Err(err) = result {
                tracing::debug!(%err, "reconcile finished with an error");
            }
        });
    // On shutdown, a running helm command may finish (bounded); nothing else is waited for
    // (a reconcile between commands starts no new one, and its steps are redone next time).
    let grace = async {
        ctx.shutdown.cancelled().await;
        if tokio::time::timeout(SHUTDOWN_GRACE, crate::helm::idle())
            .await
            .is_err()
        {
            tracing::warn!("helm still running at shutdown; stopped");
        }
    };
    tokio::select! {
        () = controller => {}
        () = grace => {}
    }
    watches.abort();
}

/// Generation (spec changes) and uid (re-creation with the same generation).
fn generation_and_uid(object: &FleetAddonConfig) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let generation = predicates::generation(object)?;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    generation.hash(&mut hasher);
    object.metadata.uid.hash(&mut hasher);
    Some(hasher.finish())
}

async fn reconcile(object: Arc<FleetAddonConfig>, state: Arc<State>) -> Result<Action, Error> {
    // Triggers from watched objects do not shorten a failure's wait; a spec change does.
    let key = BackoffKey::new(CONTROLLER, &*object);
    if let Some(wait) = state
        .backoff
        .remaining(&key, BackoffKey::generation_of(&*object))
    {
        tracing::debug!(?wait, "in backoff after a failure; not retrying yet");
        return Ok(Action::requeue(wait));
    }
    reconcile::observed(
        CONTROLLER,
        &*object,
        &state.ctx.metrics,
        &state.backoff,
        reconcile_config(&object, &state),
    )
    .await
}

async fn reconcile_config(object: &FleetAddonConfig, state: &State) -> Result<Action, Error> {
    let generation = object.metadata.generation;
    let config = EffectiveConfig::resolve(Some(object));
    state.targets.send_if_modified(|current| {
        let next = watches::watch_targets(&config);
        let changed = *current != next;
        *current = next;
        changed
    });
    let ctx = &state.ctx;
    let report = steps::run(ctx, &state.helm, object, &config).await;
    if ctx.shutdown.is_cancelled() {
        // Steps may have been cut short: report nothing; the next start (or leader) redoes them.
        return Ok(Action::await_change());
    }

    let desired = fleet_status::next_status(
        object.status.as_ref(),
        &report.updates,
        &report.version,
        generation,
        &Time(k8s_openapi::jiff::Timestamp::now()),
    );
    let written = if fleet_status::needs_write(object.status.as_ref(), &desired) {
        let write = Write::ApplyStatus {
            object: ObjectId::observed(object),
            body: fleet_status::apply_body(&object.name_any(), &desired),
            manager: names::STATUS_FIELD_MANAGER,
        };
        ctx.run(Plan::of(vec![write], Next::AwaitChange))
            .await
            .map(drop)
    } else {
        Ok(())
    };

    match (report.failure, written) {
        (Some((step, err)), _) => {
            tracing::warn!(step = step.name(), error = %err, "Fleet reconcile step failed");
            Err(err)
        }
        (None, Err(err)) => Err(err),
        (None, Ok(())) => Ok(Action::requeue(ctx.flags.sync_period)),
    }
}

fn error_policy(object: Arc<FleetAddonConfig>, err: &Error, state: Arc<State>) -> Action {
    // A new spec is a new situation: its first failure waits the shortest time again.
    retry_after(CONTROLLER, &*object, err, &state.backoff)
}
