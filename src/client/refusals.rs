//! Requests the API server refuses (403 from RBAC), as every client of the manager sees them.
//!
//! Every client of the manager is wrapped ([`Authorization::observe`]) with the name of the part
//! that uses it (the import controllers, the Fleet installation controller, the hooks and the
//! leader election, ...). The wrapper sees each request we send and its answer: a 403 whose
//! message is the authorizer's is recorded as a denial (verb, group, resource, subresource and
//! namespace as RBAC checks them, [`crate::model::authorization`]), with one ERROR log line per
//! new denial; a success of the same request clears it. The request is not changed and the
//! caller still gets the 403, so each part keeps its own retry with backoff. The condition that
//! reports them is written by [`crate::controllers::authorization`].

use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};

use futures::future::BoxFuture;
use http::{Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::model::authorization::{self, Denials, RequestInfo};
use crate::model::fleet_status::ConditionSpec;

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
            DenialRecorder {
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
    pub fn condition(&self) -> (ConditionSpec, Option<Instant>) {
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
struct DenialRecorder {
    inner: Client,
    authorization: Authorization,
    component: &'static str,
}

impl tower::Service<Request<Body>> for DenialRecorder {
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
