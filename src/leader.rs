//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go's semantics
//! (`k8s.io/client-go/tools/leaderelection`), so that two replicas never reconcile at once.
//!
//! - A candidate reads the Lease every retry period. It takes the Lease when there is none
//!   (create), when nobody holds it (released), or when the holder has not renewed it for
//!   `leaseDurationSeconds`. Expiry is measured, as in client-go, from the moment *this* candidate
//!   last saw the record change, on its own monotonic clock: clock skew between nodes can never
//!   make a candidate take a Lease early. In wall-clock terms a takeover happens no earlier than
//!   `renewTime + leaseDurationSeconds`.
//! - Every write is a replace guarded by the `resourceVersion` just read (optimistic
//!   concurrency): of two candidates racing for a free Lease exactly one wins, the other gets a
//!   409 and keeps waiting. Taking the Lease from another holder increments `leaseTransitions`.
//! - The leader renews every retry period. When it has not renewed successfully for the renew
//!   deadline (shorter than the lease duration), or it sees another holder, it has lost the
//!   Lease: the caller stops the leader's work at once ([`Renewal::Lost`]).
//! - On graceful shutdown the leader releases the Lease (client-go's `ReleaseOnCancel`): the
//!   holder is cleared and the duration set to 1 s, so a candidate takes over at its next retry
//!   instead of waiting for the lease to expire.
//!
//! # Why not a crate (evaluated 2026-11-23 from their documentation)
//!
//! - `kube-lease-manager` (docs.rs, 0.11.1 `lib.rs`): writes the Lease with server-side apply
//!   and "tolerates a configurable time skew between nodes", i.e. compares the holder's
//!   wall-clock times; client-go (and `tests/leader.rs`) measures expiry on the candidate's own
//!   monotonic clock and guards each write by the `resourceVersion` just read.
//! - `kubert`'s `LeaseManager` (docs.rs, 0.23 `lease` feature): "the named lease resource must
//!   already have been created, or a 404 error will be returned" (someone else must create it),
//!   and renewal scheduling and the step-down on a missed renew deadline stay with the caller
//!   (`ensure_claimed`/`vacate`), which is most of this module.
//!
//! - `kube-leader-election` (docs.rs, 0.37 README, re-checked 2026-11-27): "uses timestamps to
//!   determine if a lease can be acquired ... volatile to datetime skew", without fencing, and
//!   built on kube 0.96; `kube-coordinate` (0.2.1) is built on kube 1 at the latest. kube 3.1
//!   itself (kube-runtime) has no leader election.
//!
//! Any of them would change behaviour the leader tests pin (expiry on the local clock, takeover only
//! after the lease duration, step-down within the renew deadline, release on shutdown), so this
//! module stays; the Lease has its own unlimited client ([`crate::client`]).

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::{Client, Resource};
use rand::Rng;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::cli::ManagerFlags;
use crate::model::lease::{Attempt, Candidate, attempt, next_record, released_record, still_ours};
use crate::{Error, Result, apply};

/// client-go's `JitterFactor`: the renew deadline must exceed the retry period by this factor.
pub const JITTER_FACTOR: f64 = 1.2;

/// Where the in-cluster service account's namespace is mounted.
pub const SERVICE_ACCOUNT_NAMESPACE_FILE: &str =
    "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// Settings of one election.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElectionConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This candidate's identity (`holderIdentity`), unique per process.
    pub identity: String,
    /// How long a Lease is valid without renewal.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives up.
    pub renew_deadline: Duration,
    /// How often candidates try to acquire, and the leader renews.
    pub retry_period: Duration,
}

impl ElectionConfig {
    /// Who writes the Lease records, for [`next_record`].
    pub fn candidate(&self) -> Candidate {
        Candidate {
            identity: self.identity.clone(),
            lease_duration_seconds: self.lease_duration_seconds(),
        }
    }

    /// The election the manager flags describe: namespace from `--leader-election-namespace`
    /// (env `POD_NAMESPACE`), else the in-cluster namespace file, else `default`; identity from
    /// env `POD_NAME` (else the host name) plus a random suffix.
    pub fn from_flags(flags: &ManagerFlags) -> Result<Self> {
        let config = Self {
            namespace: election_namespace(
                flags.leader_election_namespace.as_deref(),
                Path::new(SERVICE_ACCOUNT_NAMESPACE_FILE),
            ),
            name: flags.leader_election_id.clone(),
            identity: candidate_identity(std::env::var("POD_NAME").ok().as_deref()),
            lease_duration: flags.leader_elect_lease_duration,
            renew_deadline: flags.leader_elect_renew_deadline,
            retry_period: flags.leader_elect_retry_period,
        };
        config.validate()?;
        Ok(config)
    }

    /// The timing rules of client-go: lease duration > renew deadline > 1.2 × retry period,
    /// so the leader steps down before any candidate may take over.
    pub fn validate(&self) -> Result<()> {
        if self.name.is_empty() {
            return Err(Error::InvalidConfig(
                "--leader-election-id must not be empty".into(),
            ));
        }
        if self.lease_duration <= self.renew_deadline {
            return Err(Error::InvalidConfig(format!(
                "--leader-elect-lease-duration ({:?}) must be greater than --leader-elect-renew-deadline ({:?})",
                self.lease_duration, self.renew_deadline
            )));
        }
        if self.renew_deadline.as_secs_f64() <= JITTER_FACTOR * self.retry_period.as_secs_f64() {
            return Err(Error::InvalidConfig(format!(
                "--leader-elect-renew-deadline ({:?}) must be greater than {JITTER_FACTOR} × --leader-elect-retry-period ({:?})",
                self.renew_deadline, self.retry_period
            )));
        }
        if self.retry_period.is_zero() {
            return Err(Error::InvalidConfig(
                "--leader-elect-retry-period must be positive".into(),
            ));
        }
        Ok(())
    }

    fn lease_duration_seconds(&self) -> i32 {
        // The API counts whole seconds; round up so a sub-second test duration stays valid.
        i32::try_from(self.lease_duration.as_millis().div_ceil(1000)).unwrap_or(i32::MAX)
    }
}

/// The namespace of the Lease: the flag (or `POD_NAMESPACE`), else the service account's
/// namespace file, else `default`.
pub fn election_namespace(flag: Option<&str>, namespace_file: &Path) -> String {
    if let Some(namespace) = flag.map(str::trim).filter(|ns| !ns.is_empty()) {
        return namespace.to_string();
    }
    std::fs::read_to_string(namespace_file)
        .ok()
        .map(|ns| ns.trim().to_string())
        .filter(|ns| !ns.is_empty())
        .unwrap_or_else(|| "default".to_string())
}

/// A unique identity: the pod name (or host name) and a random suffix, as controller-runtime
/// does (`<hostname>_<uuid>`), so a restarted process never mistakes its predecessor's Lease for
/// its own.
pub fn candidate_identity(pod_name: Option<&str>) -> String {
    let base = pod_name
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(str::to_string)
        .or_else(host_name)
        .unwrap_or_else(|| "caapf".to_string());
    let suffix: u64 = rand::rng().random();
    format!("{base}_{suffix:016x}")
}

fn host_name() -> Option<String> {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|path| std::fs::read_to_string(path).ok())
        .map(|name| name.trim().to_string())
        .filter(|name| !name.is_empty())
}

/// What one try found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tried {
    /// We hold the Lease now.
    Leading,
    /// Another holder's Lease is valid.
    HeldByOther,
    /// Our write lost a race (409): someone wrote the Lease between our read and our write.
    Conflict,
}

/// How renewing ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Renewal {
    /// The stop signal came while still leading: release the Lease.
    Stopped,
    /// Leadership is lost (renew deadline passed, or another holder): stop leading now.
    Lost(String),
}

/// One candidate in one election.
pub struct Elector {
    api: Api<Lease>,
    config: ElectionConfig,
    /// The record as last seen, and when (this process's clock) it was first seen.
    observed: Option<(LeaseSpec, Instant)>,
    /// The Lease as last written by us (its resourceVersion guards the release).
    held: Option<Lease>,
    /// When the request of our last successful write was sent (the renew deadline counts from
    /// there, across calls to [`Elector::renew`]).
    renewed_at: Instant,
}

impl Elector {
    pub fn new(client: Client, config: ElectionConfig) -> Self {
        Self {
            api: Api::namespaced(client, &config.namespace),
            config,
            observed: None,
            held: None,
            renewed_at: Instant::now(),
        }
    }

    pub fn config(&self) -> &ElectionConfig {
        &self.config
    }

    /// The Lease we hold, for Events about it.
    pub fn lease_reference(&self) -> Option<ObjectReference> {
        self.held.as_ref().map(|lease| lease.object_ref(&()))
    }

    /// Whether our last write made us the holder.
    pub fn is_leader(&self) -> bool {
        self.held.is_some()
    }

    /// One read and at most one write (client-go's `tryAcquireOrRenew`).
    pub async fn try_acquire_or_renew(&mut self) -> Result<Tried> {
        // Conservative: a write "happened" when its read was sent.
        let started = Instant::now();
        let live = self.api.get_opt(&self.config.name).await?;
        let spec = live.as_ref().map(|l| l.spec.clone().unwrap_or_default());
        if let Some(spec) = &spec
            && self.observed.as_ref().is_none_or(|(seen, _)| seen != spec)
        {
            self.observed = Some((spec.clone(), Instant::now()));
        }
        let expired = match (&self.observed, &spec) {
            (Some((_, seen_at)), Some(spec)) => {
                let seconds = spec.lease_duration_seconds.unwrap_or(0).max(0);
                seen_at.elapsed() >= Duration::from_secs(u64::try_from(seconds).unwrap_or(0))
            }
            _ => true,
        };
        let attempt = attempt(spec.as_ref(), &self.config.identity, expired);
        let Some(record) = next_record(
            attempt,
            spec.as_ref(),
            &self.config.candidate(),
            Timestamp::now(),
        ) else {
            self.held = None;
            return Ok(Tried::HeldByOther);
        };
        let written = match live {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.config.name.clone()),
                        namespace: Some(self.config.namespace.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(record),
                };
                apply::create(&self.api, &lease).await
            }
            Some(mut lease) => {
                // Guarded by the resourceVersion we just read.
                lease.spec = Some(record);
                lease.metadata.managed_fields = None;
                apply::replace(&self.api, &self.config.name, &lease).await
            }
        };
        match written {
            Ok(lease) => {
                if attempt != Attempt::Renew {
                    tracing::info!(
                        lease = %self.config.name,
                        namespace = %self.config.namespace,
                        identity = %self.config.identity,
                        "acquired the leader lease"
                    );
                }
                self.observed = Some((lease.spec.clone().unwrap_or_default(), Instant::now()));
                self.held = Some(lease);
                self.renewed_at = started;
                Ok(Tried::Leading)
            }
            // Someone else wrote first (create or update race).
            Err(Error::Kube(kube::Error::Api(status))) if status.code == 409 => Ok(Tried::Conflict),
            Err(err) => Err(err),
        }
    }

    /// Tries every retry period (with up to 20 % jitter) until we hold the Lease; `false` when
    /// `stop` came first. Errors are logged and retried.
    pub async fn acquire(&mut self, stop: &CancellationToken) -> bool {
        tracing::info!(
            lease = %self.config.name,
            namespace = %self.config.namespace,
            identity = %self.config.identity,
            "waiting for the leader lease"
        );
        loop {
            match self.try_acquire_or_renew().await {
                Ok(Tried::Leading) => return true,
                Ok(Tried::HeldByOther | Tried::Conflict) => {}
                Err(err) => {
                    tracing::warn!(%err, lease = %self.config.name, "reading or writing the leader lease")
                }
            }
            let jitter: f64 = rand::rng().random_range(0.0..0.2);
            let pause = self.config.retry_period.mul_f64(1.0 + jitter);
            tokio::select! {
                () = stop.cancelled() => return false,
                () = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// Renews every retry period while leading. Returns [`Renewal::Lost`] as soon as the renew
    /// deadline has passed since the last successful renewal (a hung request counts against it)
    /// or the Lease shows another holder; [`Renewal::Stopped`] when `stop` is cancelled.
    pub async fn renew(&mut self, stop: &CancellationToken) -> Renewal {
        loop {
            let deadline = self.renewed_at + self.config.renew_deadline;
            tokio::select! {
                () = stop.cancelled() => return Renewal::Stopped,
                () = tokio::time::sleep_until(deadline) => return self.lost_at_deadline(),
                () = tokio::time::sleep(self.config.retry_period) => {}
            }
            let outcome = tokio::select! {
                () = stop.cancelled() => return Renewal::Stopped,
                outcome = tokio::time::timeout_at(deadline, self.try_acquire_or_renew()) => outcome,
            };
            match outcome {
                Err(_elapsed) => return self.lost_at_deadline(),
                Ok(Ok(Tried::Leading)) => {}
                Ok(Ok(Tried::HeldByOther)) => {
                    self.held = None;
                    return Renewal::Lost("another candidate holds the lease".into());
                }
                Ok(Ok(Tried::Conflict)) => {
                    tracing::warn!(lease = %self.config.name, "the leader lease changed while renewing it; retrying");
                }
                Ok(Err(err)) => {
                    tracing::warn!(%err, lease = %self.config.name, "renewing the leader lease");
                }
            }
        }
    }

    fn lost_at_deadline(&mut self) -> Renewal {
        self.held = None;
        Renewal::Lost(format!(
            "the lease was not renewed within the renew deadline ({:?})",
            self.config.renew_deadline
        ))
    }

    /// Lets go of the Lease if we hold it (guarded by our last write's resourceVersion: if
    /// someone else wrote since, there is nothing of ours to release).
    pub async fn release(&mut self) -> Result<()> {
        let Some(mut lease) = self.held.take() else {
            return Ok(());
        };
        // A renewal dropped mid-flight (the stop came while it was on the wire) may have moved
        // the resourceVersion: on a conflict, read the Lease again and release it if it is still
        // ours (a few times at most; someone else's Lease is left alone).
        for _ in 0..3 {
            let old = lease.spec.clone().unwrap_or_default();
            lease.spec = Some(released_record(&old, Timestamp::now()));
            lease.metadata.managed_fields = None;
            match apply::replace(&self.api, &self.config.name, &lease).await {
                Ok(_) => {
                    tracing::info!(lease = %self.config.name, identity = %self.config.identity, "released the leader lease");
                    return Ok(());
                }
                Err(Error::Kube(kube::Error::Api(status))) if status.code == 409 => {
                    match self.api.get_opt(&self.config.name).await? {
                        Some(live) if still_ours(live.spec.as_ref(), &self.config.identity) => {
                            lease = live;
                        }
                        _ => return Ok(()),
                    }
                }
                Err(Error::Kube(kube::Error::Api(status))) if status.code == 404 => return Ok(()),
                Err(err) => return Err(err),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ElectionConfig {
        ElectionConfig {
            namespace: "caapf-system".into(),
            name: "caapf-leader-election".into(),
            identity: "me_1".into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    #[test]
    fn sub_second_durations_round_up() {
        let mut c = config();
        c.lease_duration = Duration::from_millis(1500);
        assert_eq!(c.lease_duration_seconds(), 2);
        c.lease_duration = Duration::from_millis(300);
        assert_eq!(c.lease_duration_seconds(), 1);
    }

    #[test]
    fn timing_rules_are_enforced() {
        assert!(config().validate().is_ok());
        let mut c = config();
        c.renew_deadline = c.lease_duration;
        let err = c.validate().expect_err("deadline = duration").to_string();
        assert!(err.contains("--leader-elect-lease-duration"), "{err}");
        let mut c = config();
        c.retry_period = Duration::from_secs(9);
        let err = c.validate().expect_err("retry too long").to_string();
        assert!(err.contains("1.2"), "{err}");
        let mut c = config();
        c.name = String::new();
        assert!(c.validate().is_err());
    }

    #[test]
    fn namespace_falls_back_to_the_service_account_then_default() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("namespace");
        assert_eq!(election_namespace(Some("flagged"), &file), "flagged");
        assert_eq!(election_namespace(Some(" "), &file), "default");
        std::fs::write(&file, "caapf-system\n").expect("write");
        assert_eq!(election_namespace(None, &file), "caapf-system");
        assert_eq!(election_namespace(Some(""), &file), "caapf-system");
    }

    #[test]
    fn identities_are_unique_per_process_start() {
        let a = candidate_identity(Some("caapf-controller-manager-7d9f-abcde"));
        let b = candidate_identity(Some("caapf-controller-manager-7d9f-abcde"));
        assert!(a.starts_with("caapf-controller-manager-7d9f-abcde_"), "{a}");
        assert_ne!(a, b);
        assert!(!candidate_identity(None).is_empty());
    }
}
