//! Keeping the ClusterRegistrationToken of an agent-initiated Cluster valid until the Cluster
//! registered (pure).
//!
//! Fleet deletes a token once `creationTimestamp + spec.ttl` has passed, and reads `spec.ttl`
//! again at every change of the token (rancher/fleet v0.12.0–v0.16.1
//! `internal/cmd/controller/agentmanagement/controllers/clusterregistrationtoken/handler.go`:
//! `OnChange` calls `deleteExpired(token)`, which computes `token.CreationTimestamp.Add(
//! ttl.Duration)`, deletes the token when that has passed and enqueues it again for that time
//! otherwise). So a longer `spec.ttl` written before expiry keeps the token: the import controller
//! extends it while the Fleet Cluster has not registered (no `status.agent.lastSeen`), half a TTL
//! before it would expire, to "now + the configured TTL", and looks again when the next extension
//! is due (never sooner than [`MIN_RECHECK`]).
//!
//! The token watch keeps only metadata, so when the token expires is recorded in an annotation
//! ([`names::REGISTRATION_TOKEN_EXPIRES_ANNOTATION`]) written with `spec.ttl` (at creation, and at
//! every extension). A token without it (created by an earlier release, or by someone else) is
//! extended at once, which records it.

use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

use crate::api::duration::go_duration_string;
use crate::names;

/// The shortest wait before a token is looked at again (no hot loop with a tiny TTL).
pub const MIN_RECHECK: Duration = Duration::from_secs(5);

/// What to do with the token of an unregistered Cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Renewal {
    /// Write `spec.ttl` (a Go duration, from the token's creation) and the expiry annotation,
    /// then look again after `recheck`.
    Extend {
        ttl: String,
        expires: Timestamp,
        recheck: Duration,
    },
    /// Nothing to write; look again after this long.
    Wait(Duration),
}

/// When a token created `now` with `ttl` expires, as its annotation records it.
pub fn expires_annotation(now: Timestamp, ttl: Duration) -> String {
    to_text(plus(now, ttl))
}

/// The renewal of a token created at `created` whose annotation records `recorded` (`None`:
/// unknown), for the configured `ttl`, at `now`.
pub fn renewal(
    created: Timestamp,
    recorded: Option<&str>,
    ttl: Duration,
    now: Timestamp,
) -> Renewal {
    let half = signed(ttl / 2);
    let due = recorded
        .and_then(|text| text.parse::<Timestamp>().ok())
        .map(|expires| expires.saturating_sub(half).unwrap_or(Timestamp::MIN));
    match due {
        Some(due) if due > now => Renewal::Wait(unsigned(now.duration_until(due)).max(MIN_RECHECK)),
        _ => {
            // From the token's creation, as Fleet counts, in whole seconds.
            let age = unsigned(created.duration_until(now));
            let new_ttl = Duration::from_secs(age.as_secs() + u64::from(age.subsec_nanos() > 0))
                .saturating_add(ttl);
            Renewal::Extend {
                ttl: go_duration_string(new_ttl),
                expires: plus(created, new_ttl),
                recheck: (ttl / 2).max(MIN_RECHECK),
            }
        }
    }
}

/// The merge patch an extension writes: `spec.ttl` and the expiry it gives.
pub fn extension_patch(ttl: &str, expires: Timestamp) -> Value {
    json!({
        "metadata": {"annotations": {names::REGISTRATION_TOKEN_EXPIRES_ANNOTATION: to_text(expires)}},
        "spec": {"ttl": ttl},
    })
}

fn to_text(time: Timestamp) -> String {
    time.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// `time + duration` (a duration never fails to add; the far future if it overflows).
fn plus(time: Timestamp, duration: Duration) -> Timestamp {
    time.saturating_add(signed(duration))
        .unwrap_or(Timestamp::MAX)
}

fn signed(duration: Duration) -> SignedDuration {
    SignedDuration::try_from(duration).unwrap_or(SignedDuration::MAX)
}

fn unsigned(duration: SignedDuration) -> Duration {
    Duration::try_from(duration).unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().expect("time")
    }

    const DAY: Duration = Duration::from_secs(24 * 3600);

    #[test]
    fn a_token_is_extended_half_a_ttl_before_it_expires() {
        let created = at("2026-11-20T08:00:00Z");
        let expires = expires_annotation(created, DAY);
        assert_eq!(expires, "2026-11-21T08:00:00Z");
        let rows = [
            // Fresh: look again when half the TTL is left.
            (
                "2026-11-20T08:00:00Z",
                Renewal::Wait(Duration::from_secs(12 * 3600)),
            ),
            (
                "2026-11-20T19:59:00Z",
                Renewal::Wait(Duration::from_secs(60)),
            ),
            // Half the TTL left: extended to a full TTL from now, counted from the creation.
            (
                "2026-11-20T20:00:00Z",
                Renewal::Extend {
                    ttl: "36h0m0s".into(),
                    expires: at("2026-11-21T20:00:00Z"),
                    recheck: Duration::from_secs(12 * 3600),
                },
            ),
            (
                "2026-11-21T07:59:59.5Z",
                Renewal::Extend {
                    ttl: "48h0m0s".into(),
                    expires: at("2026-11-22T08:00:00Z"),
                    recheck: Duration::from_secs(12 * 3600),
                },
            ),
        ];
        for (now, expected) in rows {
            assert_eq!(
                renewal(created, Some(&expires), DAY, at(now)),
                expected,
                "{now}"
            );
        }
        // Near the recorded expiry of an extended token: the wait is measured from the record.
        assert_eq!(
            renewal(
                created,
                Some("2026-11-21T20:00:00Z"),
                DAY,
                at("2026-11-21T07:00:00Z")
            ),
            Renewal::Wait(Duration::from_secs(3600))
        );
    }

    /// No record (an earlier release's token, or someone else's): extended at once, which
    /// records the expiry; a broken record likewise. A tiny TTL is looked at no more often than
    /// every 5 s.
    #[test]
    fn without_a_record_the_token_is_extended_at_once_and_never_in_a_hot_loop() {
        let created = at("2026-11-20T08:00:00Z");
        let now = at("2026-11-20T08:10:00Z");
        for recorded in [None, Some("yesterday")] {
            assert_eq!(
                renewal(created, recorded, DAY, now),
                Renewal::Extend {
                    ttl: "24h10m0s".into(),
                    expires: at("2026-11-21T08:10:00Z"),
                    recheck: Duration::from_secs(12 * 3600),
                },
                "{recorded:?}"
            );
        }
        let Renewal::Extend { recheck, .. } = renewal(created, None, Duration::from_secs(2), now)
        else {
            panic!("extend");
        };
        assert_eq!(recheck, MIN_RECHECK);
        let patch = extension_patch("36h0m0s", at("2026-11-21T20:00:00Z"));
        assert_eq!(patch["spec"]["ttl"], "36h0m0s");
        assert_eq!(
            patch["metadata"]["annotations"][names::REGISTRATION_TOKEN_EXPIRES_ANNOTATION],
            "2026-11-21T20:00:00Z"
        );
    }
}
