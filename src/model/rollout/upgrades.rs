//! Kubernetes upgrades in the rollout waves (`spec.cluster.rollout.kubernetesUpgrades`, opt-in).
//! Cluster API calls BeforeClusterUpgrade after the user set a new `spec.topology.version` and
//! before it reaches the control plane, with `fromKubernetesVersion` and `toKubernetesVersion`;
//! a non-zero `retryAfterSeconds` holds the upgrade (cluster-api v1.11.11
//! `api/runtime/hooks/v1alpha1/lifecyclehooks_types.go`, `common_types.go`). A Cluster of wave N
//! is held while a Cluster of an earlier wave of its ClusterClass is below the target version,
//! still upgrading, or has not been `FleetReady` and `Available` for `soak` since it reached it.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use crate::model::capi::{ClusterView, TOPOLOGY_RECONCILED, live_condition};
use crate::model::hook_plan::{HookOutcome, RETRY_UPGRADE};
use crate::model::rollout::{Rollout, class_key};
use crate::model::version::ChartVersion;
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
pub fn wait(
    rollout: Option<&Rollout>,
    cluster: &ClusterView,
    target: &str,
    peers: &[Peer],
    now: Timestamp,
) -> Option<HookOutcome> {
    let rollout = rollout.filter(|r| r.kubernetes_upgrades)?;
    let (wave, _) = rollout.wave_of(cluster);
    let class = class_key(cluster);
    let skip = cluster.annotations.get(names::SKIP_UPGRADE_GATE_ANNOTATION);
    if wave == 0 || class.is_empty() || skip.is_some_and(|s| s.trim() == "all" || s == target) {
        return None;
    }
    let wanted = ChartVersion::parse(target)?;
    let mut peers: Vec<&Peer> = peers
        .iter()
        .filter(|p| !p.view.deleting && class_key(&p.view) == class)
        .filter(|p| (&p.view.namespace, &p.view.name) != (&cluster.namespace, &cluster.name))
        .collect();
    peers.sort_by(|a, b| (&a.view.namespace, &a.view.name).cmp(&(&b.view.namespace, &b.view.name)));
    for (earlier, earlier_name) in rollout.waves[..wave].iter().enumerate() {
        for peer in peers
            .iter()
            .filter(|p| rollout.wave_of(&p.view).0 == earlier)
        {
            if let Some((what, after)) = blocker(peer, (&wanted, target), rollout.soak, now) {
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
    (wanted, target): (&ChartVersion, &str),
    soak: Duration,
    now: Timestamp,
) -> Option<(String, i32)> {
    let version = peer.view.topology_version.as_deref();
    if version
        .and_then(ChartVersion::parse)
        .is_none_or(|v| v < *wanted)
    {
        let at = version.unwrap_or("no version");
        return Some((format!("is at {at}, below {target}"), RETRY_UPGRADE));
    }
    if !peer.view.topology_settled {
        let at = version.unwrap_or_default();
        return Some((format!("is upgrading to {at}"), RETRY_UPGRADE));
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
            let got = wait(rollout.as_ref(), &view(cluster), "v1.33.1", &peers, now);
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
            let got = wait(Some(&rollout(true)), &view(&me), "v1.33.1", &peers, now);
            assert_eq!(got.is_some(), held, "{skip:?}: {got:?}");
        }
    }
}
