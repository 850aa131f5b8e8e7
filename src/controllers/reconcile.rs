//! The one reconcile wrapper every controller runs its reconciles through: the wait for the
//! caches, timing and metrics of each reconcile, the shared per-object [`Backoff`] after a
//! failure, and the one log line a failure gets.

use std::future::Future;
use std::time::Instant;

use kube::Resource;
use kube::runtime::controller::Action;

use crate::controllers::backoff::{Backoff, BackoffKey};
use crate::metrics::Metrics;
use crate::{Error, Result};

/// Runs `reconcile` for `object` in `controller`, recording its duration and outcome; a success
/// clears the object's backoff.
pub async fn observed<K: Resource>(
    controller: &'static str,
    object: &K,
    metrics: &Metrics,
    backoff: &Backoff,
    reconcile: impl Future<Output = Result<Action>>,
) -> Result<Action> {
    let started = Instant::now();
    let result = reconcile.await;
    metrics.reconciled(controller, started.elapsed(), result.as_ref().err());
    if result.is_ok() {
        backoff.succeeded(&BackoffKey::new(controller, object));
    }
    result
}

/// The requeue after `controller` failed on `object`: its next backoff delay. The log line is a
/// warning while a retry is expected to absorb the failure, an error when a user must act or the
/// delay reached its cap ([`crate::controllers::retry_log`]).
pub fn retry_after<K: Resource>(
    controller: &'static str,
    object: &K,
    error: &Error,
    backoff: &Backoff,
) -> Action {
    let key = BackoffKey::new(controller, object);
    let delay = backoff.failed(&key, BackoffKey::generation_of(object));
    crate::retry_failed!(error, delay, controller, object = %key, "reconcile failed; will retry");
    Action::requeue(delay)
}
