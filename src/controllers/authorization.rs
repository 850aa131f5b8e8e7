//! Requests the API server refuses (403 from RBAC), reported in the `FleetAddonConfig`
//! condition `Authorized` and in one ERROR log line per new denial.
//!
//! Every client of the manager is wrapped ([`Authorization::observe`]) with the name of the part
//! that uses it (the import controllers, the Fleet installation controller, the hooks and the
//! leader election, ...). The wrapper sees each request we send and its answer: a 403 whose
//! message is the authorizer's is recorded as a denial (verb, group, resource, subresource and
//! namespace as RBAC checks them, [`crate::model::authorization`]); a success of the same request
//! clears it. The request is not changed and the caller still gets the 403, so each part keeps
//! its own retry with backoff.
//!
//! [`run`] (leader only) writes the condition: only when it changes, at most once per
//! [`MIN_INTERVAL`], never per failing reconcile. Until a first denial no condition is written.
//! When the `FleetAddonConfig` itself cannot be written (a 403 on its status, or no object),
//! only the log line remains.

use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use http::{Request, Response, StatusCode};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::client::Body;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::api::FleetAddonConfig;
use crate::context::Context;
use crate::model::authorization::{self, AUTHORIZED, Denials, Live, RequestInfo};
use crate::model::fleet_status::ConditionSpec;
use crate::names;

/// Shortest time between two writes of the condition.
pub const MIN_INTERVAL: Duration = Duration::from_secs(5);
/// Longest wait after a failed write.
const MAX_RETRY: Duration = Duration::from_secs(300);
/// How often expiries are checked when nothing else happens.
const TICK: Duration = Duration::from_secs(60);

/// The denials of this process, shared by every observed client.
#[derive(Clone, Default)]
pub struct Authorization {
    denials: Arc<Mutex<Denials>>,
    /// Bumped whenever the set of denials changes.
    changes: Arc<watch::Sender<u64>>,
}

impl Authorization {
    /// `client`, with every request's authorization outcome recorded for `component` (a name
    /// a user reads in the condition, e.g. `import controllers`).
    pub fn observe(&self, client: Client, component: &'static str) -> Client {
        let namespace = client.default_namespace().to_string();
        Client::new(
            Observed {
                inner: client,
                authorization: self.clone(),
                component,
            },
            namespace,
        )
    }

    /// Notified whenever the denials change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn with<T>(&self, f: impl FnOnce(&mut Denials) -> T) -> T {
        let mut denials = self.denials.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut denials)
    }

    fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn denied(&self, denial: authorization::Denial, component: &'static str) {
        let new = self.with(|d| d.denied(denial.clone(), component, Instant::now().into_std()));
        if new {
            // Once per denial and component, not per retry. No token or message body here:
            // only what RBAC checked.
            tracing::error!(
                component,
                verb = %denial.verb,
                resource = %authorization::resource_name(&denial),
                namespace = %denial.namespace,
                "the API server refused a request of the manager (RBAC); it is retried with backoff: allow it in the ClusterRole {}",
                authorization::MANAGER_ROLE
            );
            self.changed();
        }
    }

    fn allowed(&self, request: &RequestInfo, created: bool) {
        if self.with(|d| d.allowed(request, created)) {
            tracing::info!(
                verb = %request.verb,
                resource = %authorization::resource_name(request),
                namespace = %request.namespace,
                "a request the API server refused before is allowed now"
            );
            self.changed();
        }
    }

    /// The condition now (denials not seen for a while dropped first), and when to look again.
    fn condition(&self) -> (ConditionSpec, Option<Instant>) {
        self.with(|d| {
            if d.expire(Instant::now().into_std()) {
                self.changed();
            }
            (d.condition(), d.next_expiry().map(Instant::from_std))
        })
    }
}

/// A client that records authorization outcomes (see the module documentation).
#[derive(Clone)]
struct Observed {
    inner: Client,
    authorization: Authorization,
    component: &'static str,
}

impl tower::Service<Request<Body>> for Observed {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = BoxFuture<'static, Result<Response<Body>, kube::Error>>;

    fn poll_ready(&mut self, _: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        // The inner client waits for its own readiness in `send`.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let info = authorization::request_info(
            request.method().as_str(),
            request.uri().path(),
            request.uri().query(),
        );
        let this = self.clone();
        Box::pin(async move {
            let response = this.inner.send(request).await?;
            let Some(info) = info else {
                return Ok(response);
            };
            let status = response.status();
            if status == StatusCode::FORBIDDEN {
                // A 403 body is a small Status: read it, and hand the same bytes on.
                let (parts, body) = response.into_parts();
                let bytes = body.collect_bytes().await?;
                if let Ok(answer) = serde_json::from_slice::<kube::core::Status>(&bytes)
                    && let Some(denial) = denial_of(&info, &answer)
                {
                    this.authorization.denied(denial, this.component);
                }
                return Ok(Response::from_parts(parts, Body::from(bytes)));
            }
            if status.is_success() {
                this.authorization
                    .allowed(&info, status == StatusCode::CREATED);
            }
            Ok(response)
        })
    }
}

/// The denial a 403 `answer` to `request` stands for: group and resource from the Status
/// `details` the API server fills (`NewForbidden`: `kind` holds the resource), verb from the
/// authorizer's message, subresource and namespace from our request.
fn denial_of(request: &RequestInfo, answer: &kube::core::Status) -> Option<authorization::Denial> {
    let mut denial = authorization::denial(request, &answer.message)?;
    if let Some(details) = &answer.details {
        if !details.kind.is_empty() {
            denial.resource = details.kind.clone();
        }
        if !details.group.is_empty() {
            denial.group = details.group.clone();
        }
    }
    Some(denial)
}

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

fn as_spec(condition: &Condition) -> ConditionSpec {
    ConditionSpec {
        type_: AUTHORIZED,
        status: condition.status == "True",
        reason: condition.reason.clone(),
        message: condition.message.clone(),
    }
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
            match step(&api, &mut live, &desired).await {
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
            return Err(crate::Error::Missing {
                kind: "FleetAddonConfig",
                name: names::CONFIG_NAME.to_string(),
                reason: "the condition Authorized is written on it".to_string(),
            });
        };
        *live = Some(live_condition(&object));
    }
    let current = live.as_ref().and_then(Option::as_ref);
    if !authorization::needs_write(current.map(as_spec).as_ref(), desired) {
        return Ok(false);
    }
    let status = if desired.status { "True" } else { "False" };
    let last_transition_time = match current {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => Time(k8s_openapi::jiff::Timestamp::now()),
    };
    let condition = Condition {
        type_: AUTHORIZED.to_string(),
        status: status.to_string(),
        reason: desired.reason.clone(),
        message: desired.message.clone(),
        observed_generation: None,
        last_transition_time,
    };
    let body = serde_json::json!({
        "apiVersion": "addons.cluster.x-k8s.io/v1alpha1",
        "kind": "FleetAddonConfig",
        "metadata": {"name": names::CONFIG_NAME},
        "status": {"conditions": [condition]},
    });
    api.patch_status(
        names::CONFIG_NAME,
        &PatchParams::apply(names::AUTHORIZATION_STATUS_FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await?;
    *live = Some(Some(condition));
    Ok(true)
}
