//! Kubernetes upgrades in the rollout waves (`spec.cluster.rollout.kubernetesUpgrades`, opt-in).
//! Cluster API calls BeforeClusterUpgrade after the user set a new `spec.topology.version` and
//! before it reaches the control plane, with `fromKubernetesVersion` and `toKubernetesVersion`;
//! a non-zero `retryAfterSeconds` holds the upgrade (cluster-api v1.11.11
//! `api/runtime/hooks/v1alpha1/lifecyclehooks_types.go`, `common_types.go`). A Cluster of wave N
//! is held while a Cluster of an earlier wave of its ClusterClass is below the target version,
//! still upgrading, or has not been `FleetReady` and `Available` for `soak` since it reached it.
//! Versions read and compare as Cluster API's: [`parse`], [`reached`].

use std::cmp::Ordering;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use crate::model::capi::{ClusterView, TOPOLOGY_RECONCILED, live_condition};
use crate::model::hook_plan::{HookOutcome, RETRY_UPGRADE};
use crate::model::rollout::{Rollout, class_key};
use crate::names;

/// The longest `retryAfterSeconds` during a soak: asked again when the soak ends, or sooner.
pub const MAX_SOAK_RETRY: u64 = 600;

/// Another Cluster, as listed (`cluster.x-k8s.io/v1beta2`): its view and its `status`.
#[derive(Clone, Debug)]
pub struct Peer {
    pub view: ClusterView,
    pub status: Value,
}

impl Peer {
    pub fn from_json(mut object: Value) -> Option<Peer> {
        let view = ClusterView::from_json(&object)?;
        let status = object.get_mut("status").map(Value::take);
        Some(Peer {
            view,
            status: status.unwrap_or_default(),
        })
    }
}

/// Whether the upgrade of `cluster` to `target` (the request's `toKubernetesVersion`) waits for
/// an earlier wave among `peers` (any Clusters) at `now`: the retry naming the earlier wave, the
/// first blocking Cluster (by namespace and name) and what it waits for; `None` lets it go. The
/// Cluster's [`names::SKIP_UPGRADE_GATE_ANNOTATION`] (`all` or the target) lets it go too.
/// `released`: the class carries [`names::ROLLOUT_RELEASE_ANNOTATION`] `"true"`, which ends the
/// soaks (not the rest: the earlier waves must still be upgraded and ready).
pub fn wait(
    rollout: Option<&Rollout>,
    cluster: &ClusterView,
    target: &str,
    peers: &[Peer],
    released: bool,
    now: Timestamp,
) -> Option<HookOutcome> {
    let rollout = rollout.filter(|r| r.kubernetes_upgrades)?;
    let (wave, _) = rollout.wave_of(cluster);
    let class = class_key(cluster);
    let skip = cluster.annotations.get(names::SKIP_UPGRADE_GATE_ANNOTATION);
    if wave == 0 || class.is_empty() || skip.is_some_and(|s| s.trim() == "all" || s == target) {
        return None;
    }
    let wanted = parse(target)?;
    let mut peers: Vec<&Peer> = peers
        .iter()
        .filter(|p| !p.view.deleting && class_key(&p.view) == class)
        .filter(|p| (&p.view.namespace, &p.view.name) != (&cluster.namespace, &cluster.name))
        .collect();
    peers.sort_by(|a, b| (&a.view.namespace, &a.view.name).cmp(&(&b.view.namespace, &b.view.name)));
    let soak = if released {
        Duration::ZERO
    } else {
        rollout.soak
    };
    for (earlier, earlier_name) in rollout.waves[..wave].iter().enumerate() {
        for peer in peers
            .iter()
            .filter(|p| rollout.wave_of(&p.view).0 == earlier)
        {
            if let Some((what, after)) = blocker(peer, (&wanted, target), soak, now) {
                let message = format!(
                    "holding the upgrade to {target}: wave {} waits for {earlier_name}: Cluster {}/{} {what}",
                    rollout.waves[wave], peer.view.namespace, peer.view.name
                );
                return Some(HookOutcome::retry(after, message));
            }
        }
    }
    None
}

/// What `peer` has yet to do before a later wave may upgrade to `target`, and when to ask again.
fn blocker(
    peer: &Peer,
    (wanted, target): (&semver::Version, &str),
    soak: Duration,
    now: Timestamp,
) -> Option<(String, i32)> {
    let version = peer.view.topology_version.as_deref().unwrap_or_default();
    // Cluster API's webhook refuses such a version, so the peer is broken (its own topology
    // cannot reconcile either): it holds, as an unavailable one does, rather than let a later
    // wave go unchecked; the message names the field to fix (or skip the gate on this Cluster).
    let Some(at) = parse(version) else {
        let what = format!("has spec.topology.version {version:?}, which is not a version");
        return Some((what, RETRY_UPGRADE));
    };
    match reached(&at, wanted) {
        Some(Ordering::Less) => {
            return Some((format!("is at {version}, below {target}"), RETRY_UPGRADE));
        }
        None => return Some((format!("is at {version}, not {target}"), RETRY_UPGRADE)),
        _ => {}
    }
    if !peer.view.topology_settled {
        return Some((format!("is upgrading to {version}"), RETRY_UPGRADE));
    }
    let mut since = None;
    for type_ in [
        TOPOLOGY_RECONCILED,
        names::FLEET_READY_CONDITION,
        "Available",
    ] {
        let found = live_condition(Some(&peer.status), type_);
        let field = |name: &str| found.and_then(|c| c.get(name)).and_then(Value::as_str);
        if field("status") != Some("True") {
            let reason = field("reason")
                .map(|r| format!(" ({r})"))
                .unwrap_or_default();
            return Some((format!("is not {type_}{reason}"), RETRY_UPGRADE));
        }
        let at = field("lastTransitionTime").and_then(|t| t.parse::<Timestamp>().ok());
        since = since.max(at);
    }
    let left = (since? + soak).duration_since(now).as_secs_f64().ceil();
    (left > 0.0).then(|| {
        let shown = if left >= 60.0 {
            format!("{}m", (left / 60.0).ceil())
        } else {
            format!("{left}s")
        };
        let after = left.min(MAX_SOAK_RETRY as f64) as i32;
        (format!("is soaking: soak {shown} left"), after)
    })
}

/// A Kubernetes version as Cluster API reads `spec.topology.version` (its webhook validates it
/// with blang/semver v4.0.0 `ParseTolerant`, cluster-api v1.11.11 `internal/webhooks/cluster.go`):
/// spaces and a leading `v` dropped, a missing minor or patch is 0; build metadata kept
/// (`v1.31.4+rke2r1`, `v1.30.2+k3s1`).
pub fn parse(text: &str) -> Option<semver::Version> {
    let bare = text.trim();
    let bare = bare.strip_prefix('v').unwrap_or(bare);
    let parts = bare.splitn(3, '.').count();
    let short = parts < 3 && !bare.contains(['+', '-']);
    let padded = ".0".repeat(if short { 3 - parts } else { 0 });
    semver::Version::parse(&format!("{bare}{padded}")).ok()
}

/// `at` against `target` as Cluster API's topology compares versions (cluster-api v1.12.11
/// `util/version/version.go` `Compare` with `WithBuildTags`, used by
/// `exp/topology/desiredstate/upgrade_plan.go`; v1.11.11 `internal/contract/controlplane.go`):
/// SemVer precedence, then the build identifiers one by one: numeric ones numerically and below
/// the others, the others only equal or not. `None`: different builds that do not order
/// (`+rke2r1` and `+rke2r2`), so `at` has not reached `target`.
pub fn reached(at: &semver::Version, target: &semver::Version) -> Option<Ordering> {
    let order = at.cmp_precedence(target);
    if order != Ordering::Equal {
        return Some(order);
    }
    let a: Vec<&str> = at.build.split('.').filter(|i| !i.is_empty()).collect();
    let b: Vec<&str> = target.build.split('.').filter(|i| !i.is_empty()).collect();
    for (x, y) in a.iter().zip(&b) {
        let order = match (x.parse::<u64>(), y.parse::<u64>()) {
            (Ok(x), Ok(y)) => x.cmp(&y),
            (Ok(_), Err(_)) => Ordering::Less,
            (Err(_), Ok(_)) => Ordering::Greater,
            _ if x == y => Ordering::Equal,
            _ => return None,
        };
        if order != Ordering::Equal {
            return Some(order);
        }
    }
    Some(a.len().cmp(&b.len()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const NOW: &str = "2026-11-25T12:00:00Z";

    fn rollout(opt_in: bool) -> Rollout {
        Rollout {
            wave_variable: Some("wave".into()),
            waves: vec!["canary".into(), "early".into(), "rest".into()],
            default_wave: 2,
            soak: Duration::from_secs(3600),
            failing_clusters: 1,
            kubernetes_upgrades: opt_in,
        }
    }

    /// A v1beta2 Cluster of `class` in `wave` at `version`, settled, `FleetReady` and
    /// `Available` since `ready_at`.
    fn cluster(name: &str, class: &str, wave: &str, version: &str, ready_at: &str) -> Value {
        let condition = |type_: &str| {
            json!({"type": type_, "status": "True", "reason": "Ready", "observedGeneration": 2,
                "lastTransitionTime": ready_at})
        };
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": name, "namespace": "team-a", "generation": 2},
            "spec": {"topology": {"classRef": {"name": class}, "version": version,
                "variables": [{"name": "wave", "value": wave}]}},
            "status": {"conditions": [condition("TopologyReconciled"), condition("FleetReady"),
                condition("Available")]},
        })
    }

    /// Name, rollout, the upgrading Cluster, the others, the answer.
    type Case<'a> = (
        &'a str,
        Option<Rollout>,
        &'a Value,
        Vec<&'a Value>,
        Option<HookOutcome>,
    );

    fn view(object: &Value) -> ClusterView {
        ClusterView::from_json(object).expect("view")
    }

    #[test]
    fn upgrades_wait_for_earlier_waves_of_their_class() {
        let me = cluster("me", "quick-start", "rest", "v1.33.1", NOW);
        let soaked = cluster(
            "canary-1",
            "quick-start",
            "canary",
            "v1.33.1",
            "2026-11-25T10:00:00Z",
        );
        let edit = |f: &dyn Fn(&mut Value)| {
            let mut c = soaked.clone();
            f(&mut c);
            c
        };
        let below = edit(&|c| c["spec"]["topology"]["version"] = json!("v1.32.4"));
        let upgrading = edit(&|c| {
            c["metadata"]["annotations"] =
                json!({names::CAPI_PENDING_HOOKS_ANNOTATION: "AfterClusterUpgrade"})
        });
        let unavailable = edit(&|c| {
            c["status"]["conditions"][2] =
                json!({"type": "Available", "status": "False", "reason": "NotAvailable"})
        });
        let no_fleet_ready = edit(&|c| {
            c["status"]["conditions"]
                .as_array_mut()
                .expect("list")
                .remove(1);
        });
        let fresh = edit(&|c| {
            c["status"]["conditions"][1]["lastTransitionTime"] = json!("2026-11-25T11:12:00Z")
        });
        let last_seconds = edit(&|c| {
            c["status"]["conditions"][2]["lastTransitionTime"] = json!("2026-11-25T11:00:40Z")
        });
        let above = edit(&|c| c["spec"]["topology"]["version"] = json!("v1.34.0"));
        let other_class = edit(&|c| {
            c["spec"]["topology"]["classRef"]["name"] = json!("other");
            c["spec"]["topology"]["version"] = json!("v1.32.4");
        });
        let later = edit(&|c| {
            c["metadata"]["name"] = json!("z-rest");
            c["spec"]["topology"]["variables"][0]["value"] = json!("rest");
            c["spec"]["topology"]["version"] = json!("v1.32.4");
        });
        let deleting = edit(&|c| {
            c["metadata"]["deletionTimestamp"] = json!("2026-11-25T11:00:00Z");
            c["spec"]["topology"]["version"] = json!("v1.32.4");
        });
        let early_below = edit(&|c| {
            c["metadata"]["name"] = json!("a-early");
            c["spec"]["topology"]["variables"][0]["value"] = json!("early");
            c["spec"]["topology"]["version"] = json!("v1.32.4");
        });
        let retry = |after: i32, what: &str| {
            let message = format!("holding the upgrade to v1.33.1: wave rest waits for {what}");
            Some(HookOutcome::retry(after, message))
        };
        let cases: Vec<Case> = vec![
            ("no rollout", None, &me, vec![&below], None),
            ("opt-out", Some(rollout(false)), &me, vec![&below], None),
            (
                "wave 0 never waits",
                Some(rollout(true)),
                &soaked,
                vec![&later, &early_below],
                None,
            ),
            (
                "below target",
                Some(rollout(true)),
                &me,
                vec![&below],
                retry(
                    30,
                    "canary: Cluster team-a/canary-1 is at v1.32.4, below v1.33.1",
                ),
            ),
            (
                "still upgrading",
                Some(rollout(true)),
                &me,
                vec![&upgrading],
                retry(
                    30,
                    "canary: Cluster team-a/canary-1 is upgrading to v1.33.1",
                ),
            ),
            (
                "not Available",
                Some(rollout(true)),
                &me,
                vec![&unavailable],
                retry(
                    30,
                    "canary: Cluster team-a/canary-1 is not Available (NotAvailable)",
                ),
            ),
            (
                "no FleetReady",
                Some(rollout(true)),
                &me,
                vec![&no_fleet_ready],
                retry(30, "canary: Cluster team-a/canary-1 is not FleetReady"),
            ),
            (
                "soaking, retry bounded",
                Some(rollout(true)),
                &me,
                vec![&fresh],
                retry(
                    600,
                    "canary: Cluster team-a/canary-1 is soaking: soak 12m left",
                ),
            ),
            (
                "soak ends in 40 s",
                Some(rollout(true)),
                &me,
                vec![&last_seconds],
                retry(
                    40,
                    "canary: Cluster team-a/canary-1 is soaking: soak 40s left",
                ),
            ),
            (
                "all soaked",
                Some(rollout(true)),
                &me,
                vec![&soaked, &above],
                None,
            ),
            (
                "another class, a later wave, a deletion",
                Some(rollout(true)),
                &me,
                vec![&other_class, &later, &deleting, &soaked],
                None,
            ),
            (
                "the earliest wave first",
                Some(rollout(true)),
                &me,
                vec![&early_below, &fresh],
                retry(
                    600,
                    "canary: Cluster team-a/canary-1 is soaking: soak 12m left",
                ),
            ),
            (
                "then the next",
                Some(rollout(true)),
                &me,
                vec![&early_below, &soaked],
                retry(
                    30,
                    "early: Cluster team-a/a-early is at v1.32.4, below v1.33.1",
                ),
            ),
        ];
        let now: Timestamp = NOW.parse().expect("now");
        for (name, rollout, cluster, peers, want) in cases {
            let peers: Vec<Peer> = peers
                .into_iter()
                .filter_map(|p| Peer::from_json(p.clone()))
                .collect();
            let got = wait(
                rollout.as_ref(),
                &view(cluster),
                "v1.33.1",
                &peers,
                false,
                now,
            );
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn the_skip_annotation_lets_the_upgrade_go() {
        let below = cluster("canary-1", "quick-start", "canary", "v1.32.4", NOW);
        let peers = [Peer::from_json(below).expect("peer")];
        let now: Timestamp = NOW.parse().expect("now");
        for (skip, held) in [
            (None, true),
            (Some("all"), false),
            (Some("v1.33.1"), false),
            (Some("v1.34.0"), true),
        ] {
            let mut me = cluster("me", "quick-start", "rest", "v1.33.1", NOW);
            if let Some(skip) = skip {
                me["metadata"]["annotations"] = json!({names::SKIP_UPGRADE_GATE_ANNOTATION: skip});
            }
            let got = wait(
                Some(&rollout(true)),
                &view(&me),
                "v1.33.1",
                &peers,
                false,
                now,
            );
            assert_eq!(got.is_some(), held, "{skip:?}: {got:?}");
        }
    }

    #[test]
    fn versions_read_and_compare_as_cluster_api_does() {
        let v = |s: &str| parse(s).unwrap_or_else(|| panic!("{s}"));
        let parsed = [
            ("v1.31.4+rke2r1", Some("1.31.4+rke2r1")),
            (" v1.30.2+k3s1 ", Some("1.30.2+k3s1")),
            ("v1.31", Some("1.31.0")),
            ("1", Some("1.0.0")),
            ("v1.31+rke2r1", None),
            ("v1.33.x", None),
            ("", None),
        ];
        for (text, want) in parsed {
            let got = parse(text).map(|v| v.to_string());
            assert_eq!(got.as_deref(), want, "{text:?}");
        }
        use Ordering::*;
        let compared = [
            ("v1.31.4+rke2r1", "v1.31.4+rke2r1", Some(Equal)),
            ("v1.31.4+rke2r1", "v1.31.4+rke2r2", None),
            ("v1.31.4+rke2r2", "v1.31.5+rke2r1", Some(Less)),
            ("v1.31.4", "v1.31.4+rke2r1", Some(Less)),
            ("v1.30.2+k3s1", "v1.30.2", Some(Greater)),
            ("v1.30.2+k3s1", "v1.30.2+k3s1.1", Some(Less)),
            ("v1.30.2+2", "v1.30.2+10", Some(Less)),
            ("v1.30.2+1", "v1.30.2+k3s1", Some(Less)),
            ("v1.33.0-rc.1", "v1.33.0", Some(Less)),
        ];
        for (at, target, want) in compared {
            assert_eq!(reached(&v(at), &v(target)), want, "{at} vs {target}");
        }
    }

    #[test]
    fn build_metadata_broken_versions_and_the_release() {
        let now: Timestamp = NOW.parse().expect("now");
        let soaked = "2026-11-25T10:00:00Z";
        // Name, the canary's version, the target, released, what the answer says (None: goes).
        let cases = [
            (
                "rke2 at the target",
                "v1.33.1+rke2r1",
                "v1.33.1+rke2r1",
                false,
                None,
            ),
            (
                "k3s at the target",
                "v1.30.2+k3s1",
                "v1.30.2+k3s1",
                false,
                None,
            ),
            (
                "rke2 above",
                "v1.33.2+rke2r1",
                "v1.33.1+rke2r2",
                false,
                None,
            ),
            (
                "another rke2 build",
                "v1.33.1+rke2r1",
                "v1.33.1+rke2r2",
                false,
                Some("Cluster team-a/canary-1 is at v1.33.1+rke2r1, not v1.33.1+rke2r2"),
            ),
            (
                "below, without build",
                "v1.33.1",
                "v1.33.1+rke2r1",
                false,
                Some("is at v1.33.1, below v1.33.1+rke2r1"),
            ),
            (
                "not a version",
                "v1.33.x",
                "v1.33.1",
                false,
                Some(
                    "Cluster team-a/canary-1 has spec.topology.version \"v1.33.x\", which is not a version",
                ),
            ),
            (
                "soaking",
                "v1.33.1",
                "v1.33.1",
                false,
                Some("soak 30s left"),
            ),
            ("a release ends the soak", "v1.33.1", "v1.33.1", true, None),
            (
                "a release does not skip the version",
                "v1.32.4",
                "v1.33.1",
                true,
                Some("is at v1.32.4, below v1.33.1"),
            ),
        ];
        for (name, version, target, released, want) in cases {
            let at = if name.contains("soak") {
                "2026-11-25T11:00:30Z"
            } else {
                soaked
            };
            let canary = cluster("canary-1", "quick-start", "canary", version, at);
            let me = cluster("me", "quick-start", "rest", target, NOW);
            let peers = [Peer::from_json(canary).expect("peer")];
            let got = wait(
                Some(&rollout(true)),
                &view(&me),
                target,
                &peers,
                released,
                now,
            );
            let message = match &got {
                Some(HookOutcome::Retry { message, .. }) => Some(message.as_str()),
                _ => None,
            };
            match want {
                None => assert_eq!(got, None, "{name}"),
                Some(part) => assert!(
                    message.is_some_and(|m| m.contains(part)),
                    "{name}: {message:?}"
                ),
            }
        }
    }
}
