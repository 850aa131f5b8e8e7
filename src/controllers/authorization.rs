//! The `FleetAddonConfig` condition `Authorized`: requests the API server refused
//! ([`crate::client::refusals`]), written by [`run`] (leader only) when it changes, at most once
//! per [`MIN_INTERVAL`], never per failing reconcile. Until a first denial no condition is
//! written. When the `FleetAddonConfig` itself cannot be written (a 403 on its status, or no
//! object), only the log line of the denial remains.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, ListParams};
use tokio::time::Instant;

use crate::api::FleetAddonConfig;
use crate::context::Context;
use crate::model::authorization::{self, AUTHORIZED, Live};
use crate::model::fleet_status::ConditionSpec;
use crate::model::plan::{Next, Plan};
use crate::names;

/// Shortest time between two writes of the condition.
pub const MIN_INTERVAL: Duration = Duration::from_secs(5);
/// Longest wait after a failed write.
const MAX_RETRY: Duration = Duration::from_secs(300);
/// How often expiries are checked when nothing else happens.
const TICK: Duration = Duration::from_secs(60);

/// The `Authorized` condition as the object has it (`None`: not there).
fn live_condition(object: &FleetAddonConfig) -> Option<Condition> {
    object
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == AUTHORIZED)
        .cloned()
}

/// Writes the `Authorized` condition when it changes (leader only; see the module
/// documentation). Runs until `ctx.shutdown`.
pub async fn run(ctx: Arc<Context>) {
    let authorization = ctx.authorization.clone();
    let mut changes = authorization.subscribe();
    let api: Api<FleetAddonConfig> = Api::all(ctx.controllers.clone());
    let started = Instant::now();
    // The live condition: unknown until read (read only when there is something to say).
    let mut live: Option<Option<Condition>> = None;
    let mut not_before = started;
    let mut retry = MIN_INTERVAL;
    loop {
        let (desired, next_expiry) = authorization.condition();
        let now = Instant::now();
        let known = match &live {
            None => Live::Unknown,
            Some(Some(c)) if c.status == "False" => Live::False,
            Some(_) => Live::NotFalse,
        };
        let worth = authorization::worth_a_look(&desired, known, now - started);
        if worth && now >= not_before {
            match step(&ctx, &api, &mut live, &desired).await {
                Ok(wrote) => {
                    retry = MIN_INTERVAL;
                    if wrote {
                        not_before = Instant::now() + MIN_INTERVAL;
                    }
                }
                Err(err) => {
                    tracing::warn!(%err, retry_in = ?retry, "cannot write the FleetAddonConfig condition Authorized");
                    live = None;
                    not_before = Instant::now() + retry;
                    retry = (retry * 2).min(MAX_RETRY);
                }
            }
        }
        let mut wake = next_expiry.map_or(now + TICK, |t| t.min(now + TICK));
        if worth && Instant::now() < not_before {
            wake = wake.min(not_before);
        }
        tokio::select! {
            () = ctx.shutdown.cancelled() => return,
            changed = changes.changed() => if changed.is_err() { return },
            () = tokio::time::sleep_until(wake) => {}
        }
    }
}

/// Reads the live condition if unknown, and writes `desired` when it differs. Returns whether
/// it wrote.
async fn step(
    ctx: &Context,
    api: &Api<FleetAddonConfig>,
    live: &mut Option<Option<Condition>>,
    desired: &ConditionSpec,
) -> crate::Result<bool> {
    if live.is_none() {
        // A LIST of the singleton rather than a GET: the manager's roles allow both.
        let found = api
            .list(&ListParams::default().fields(&format!("metadata.name={}", names::CONFIG_NAME)))
            .await?
            .items
            .into_iter()
            .next();
        let Some(object) = found else {
            if desired.status {
                // No object, so no False condition to clear: nothing to do until a denial.
                *live = Some(None);
                return Ok(false);
            }
            return Err(crate::Error::missing(
                "FleetAddonConfig",
                names::CONFIG_NAME,
                "the condition Authorized is written on it",
            ));
        };
        *live = Some(live_condition(&object));
    }
    let current = live.as_ref().and_then(Option::as_ref);
    let now = k8s_openapi::jiff::Timestamp::now();
    let Some((condition, write)) = authorization::condition_write(current, desired, now) else {
        return Ok(false);
    };
    ctx.run(Plan::of(vec![write], Next::AwaitChange)).await?;
    *live = Some(Some(condition));
    Ok(true)
}
