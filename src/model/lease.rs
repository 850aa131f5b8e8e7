//! The rules of leader election on a `coordination.k8s.io/v1` Lease, as client-go's
//! `tryAcquireOrRenew` and `release` apply them (`k8s.io/client-go/tools/leaderelection`): what a
//! candidate may do with the Lease it read, and the record it writes. The reads, writes and
//! timing are in `crate::leader`.

use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;

/// Who writes a Lease record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// `holderIdentity`, unique per process.
    pub identity: String,
    /// `leaseDurationSeconds` of the records it writes.
    pub lease_duration_seconds: i32,
}

/// What a candidate may do with the Lease it read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// There is no Lease: create it, holding it.
    Create,
    /// We hold it: renew it (same acquire time and transitions).
    Renew,
    /// Nobody holds it, or the holder let it expire: take it (transitions + 1).
    TakeOver,
    /// Another holder's Lease is still valid: wait.
    Wait,
}

/// The decision of client-go's `tryAcquireOrRenew`, as a pure function. `expired` says whether
/// the lease duration has passed since this candidate last saw the record change.
pub fn attempt(spec: Option<&LeaseSpec>, identity: &str, expired: bool) -> Attempt {
    let Some(spec) = spec else {
        return Attempt::Create;
    };
    match spec.holder_identity.as_deref().filter(|h| !h.is_empty()) {
        Some(holder) if holder == identity => Attempt::Renew,
        Some(_) if !expired => Attempt::Wait,
        _ => Attempt::TakeOver,
    }
}

/// The record a candidate writes for `attempt` (None for [`Attempt::Wait`]).
pub fn next_record(
    attempt: Attempt,
    old: Option<&LeaseSpec>,
    candidate: &Candidate,
    now: Timestamp,
) -> Option<LeaseSpec> {
    let mut record = LeaseSpec {
        holder_identity: Some(candidate.identity.clone()),
        lease_duration_seconds: Some(candidate.lease_duration_seconds),
        acquire_time: Some(MicroTime(now)),
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(0),
        ..LeaseSpec::default()
    };
    let old_transitions = old.and_then(|o| o.lease_transitions).unwrap_or(0);
    match attempt {
        Attempt::Wait => return None,
        Attempt::Create => {}
        Attempt::Renew => {
            record.acquire_time = old
                .and_then(|o| o.acquire_time.clone())
                .or(record.acquire_time);
            record.lease_transitions = Some(old_transitions);
        }
        Attempt::TakeOver => record.lease_transitions = Some(old_transitions.saturating_add(1)),
    }
    Some(record)
}

/// The record a leader writes when it lets go: no holder, a 1 s duration, same transitions.
pub fn released_record(old: &LeaseSpec, now: Timestamp) -> LeaseSpec {
    LeaseSpec {
        holder_identity: None,
        lease_duration_seconds: Some(1),
        acquire_time: Some(MicroTime(now)),
        renew_time: Some(MicroTime(now)),
        lease_transitions: old.lease_transitions,
        ..LeaseSpec::default()
    }
}

/// Whether a Lease record is still held by `identity` (a release that met a conflict is tried
/// again only then).
pub fn still_ours(spec: Option<&LeaseSpec>, identity: &str) -> bool {
    spec.and_then(|s| s.holder_identity.as_deref()) == Some(identity)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held_by(holder: Option<&str>, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(str::to_string),
            lease_duration_seconds: Some(15),
            acquire_time: Some(MicroTime(Timestamp::UNIX_EPOCH)),
            renew_time: Some(MicroTime(Timestamp::UNIX_EPOCH)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn attempts_follow_client_go() {
        let cases: &[(&str, Option<LeaseSpec>, bool, Attempt)] = &[
            ("no lease", None, false, Attempt::Create),
            (
                "ours, valid",
                Some(held_by(Some("me_1"), 3)),
                false,
                Attempt::Renew,
            ),
            (
                "ours, expired",
                Some(held_by(Some("me_1"), 3)),
                true,
                Attempt::Renew,
            ),
            (
                "other, valid",
                Some(held_by(Some("other_2"), 3)),
                false,
                Attempt::Wait,
            ),
            (
                "other, expired",
                Some(held_by(Some("other_2"), 3)),
                true,
                Attempt::TakeOver,
            ),
            ("released", Some(held_by(None, 3)), false, Attempt::TakeOver),
            (
                "empty holder",
                Some(held_by(Some(""), 3)),
                false,
                Attempt::TakeOver,
            ),
        ];
        for (name, spec, expired, want) in cases {
            assert_eq!(attempt(spec.as_ref(), "me_1", *expired), *want, "{name}");
        }
    }

    #[test]
    fn records_keep_or_bump_transitions() {
        let now = Timestamp::from_second(1_700_000_000).expect("timestamp");
        let c = Candidate {
            identity: "me_1".into(),
            lease_duration_seconds: 15,
        };
        let created = next_record(Attempt::Create, None, &c, now).expect("record");
        assert_eq!(created.holder_identity.as_deref(), Some("me_1"));
        assert_eq!(created.lease_duration_seconds, Some(15));
        assert_eq!(created.lease_transitions, Some(0));
        assert_eq!(created.renew_time, Some(MicroTime(now)));

        let old = held_by(Some("me_1"), 4);
        let renewed = next_record(Attempt::Renew, Some(&old), &c, now).expect("record");
        assert_eq!(renewed.lease_transitions, Some(4));
        assert_eq!(renewed.acquire_time, old.acquire_time, "acquire time kept");
        assert_eq!(renewed.renew_time, Some(MicroTime(now)));

        let taken =
            next_record(Attempt::TakeOver, Some(&held_by(Some("x"), 4)), &c, now).expect("rec");
        assert_eq!(taken.lease_transitions, Some(5));
        assert_eq!(taken.acquire_time, Some(MicroTime(now)));
        assert!(next_record(Attempt::Wait, Some(&old), &c, now).is_none());

        let released = released_record(&old, now);
        assert_eq!(released.holder_identity, None);
        assert_eq!(released.lease_duration_seconds, Some(1));
        assert_eq!(released.lease_transitions, Some(4));
    }

    #[test]
    fn a_conflicting_release_is_retried_only_for_our_own_lease() {
        let held = |holder: Option<&str>| LeaseSpec {
            holder_identity: holder.map(str::to_string),
            ..LeaseSpec::default()
        };
        assert!(still_ours(Some(&held(Some("me_1"))), "me_1"));
        assert!(!still_ours(Some(&held(Some("other_2"))), "me_1"));
        assert!(!still_ours(Some(&held(None)), "me_1"));
        assert!(!still_ours(None, "me_1"));
    }
}
