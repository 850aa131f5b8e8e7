//! The `FleetReady` condition of an imported CAPI Cluster (pure): Fleet's view of the cluster
//! (agent registration and check-ins, bundle readiness) as one Cluster API v1beta2 condition with
//! a stable reason, and the decision whether the live condition needs a write.
//!
//! What Fleet reports, read from rancher/fleet v0.16 (mirror HEAD `3b2c622ce176`):
//! - `pkg/apis/fleet.cattle.io/v1alpha1/cluster_types.go`: `status.agent.lastSeen` (the agent's
//!   last check-in; absent or null until an agent registered), `status.summary` (a
//!   `BundleSummary`, `bundle_types.go`: `desiredReady`, `ready`, counts per state and
//!   `nonReadyResources[]` with `name`, `bundleState`, `message`), `readyGitRepos` /
//!   `desiredReadyGitRepos`, `readyHelmOps` / `desiredReadyHelmOps`, `display.state`
//!   (`WaitCheckIn` while `lastSeen` is zero) and the conditions `Ready`, `Processed`, `Imported`;
//! - `internal/cmd/agent/clusterstatus/ticker.go`: the agent writes `status.agent.lastSeen` once
//!   per check-in interval (`agentCheckinInterval`, default 15m, `pkg/durations`);
//! - `internal/cmd/controller/reconciler/cluster_controller.go` and `summary/summary.go`: the
//!   summary is recomputed from the cluster's BundleDeployments whenever one changes; at most 10
//!   `nonReadyResources` are kept, each named after its BundleDeployment (the Bundle's name) with
//!   the message of its `Deployed`, `Installed` or `Monitored` condition. The Fleet Cluster alone
//!   therefore names the bundles that are not ready, with Fleet's own messages, and the
//!   BundleDeployments need not be watched;
//! - `internal/cmd/controller/agentmanagement/controllers/cluster/import.go`: for a
//!   manager-initiated cluster the `Imported` condition turns False with the error when the
//!   kubeconfig Secret cannot be read (a Kubernetes "not found" error naming the Secret) or the
//!   agent cannot be deployed through it. The condition is written by rancher/wrangler v3.7
//!   (`pkg/condition/condition.go` `SetError`: status False, reason `Error`, the error as
//!   message), and the Secret lookup goes through wrangler's cache (`pkg/generic/cache.go`:
//!   `secrets "<name>" not found`).

use std::time::Duration;

use fleet_api_rs::fleet_cluster::{Cluster as FleetCluster, ClusterStatus};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::EventType;
use serde_json::{Value, json};

use crate::model::capi::{self, ClusterView, event_note};
use crate::model::config::EffectiveConfig;
use crate::model::import::Decision;
use crate::model::plan::{Next, ObjectId, Plan, Write};
use crate::names;

/// The condition type (see [`names::FLEET_READY_CONDITION`]).
pub const CONDITION_TYPE: &str = names::FLEET_READY_CONDITION;

/// Stable reasons of the condition. They are metric label values and what users alert on.
pub mod reason {
    /// True: the agent checks in and every bundle targeting the cluster is ready.
    pub const READY: &str = "Ready";
    /// Manager-initiated: Fleet registers the cluster once its control plane is initialized.
    pub const WAITING_FOR_CONTROL_PLANE: &str = "WaitingForControlPlane";
    /// No agent has checked in yet (agent-initiated: the token is issued; manager-initiated:
    /// Fleet has not reported a problem deploying the agent).
    pub const AGENT_NOT_REGISTERED: &str = "AgentNotRegistered";
    /// Manager-initiated: Fleet cannot find the Cluster's kubeconfig Secret.
    pub const KUBECONFIG_SECRET_MISSING: &str = "KubeconfigSecretMissing";
    /// Manager-initiated: Fleet could not deploy the agent through the kubeconfig (unreachable
    /// API server, rejected credentials, …).
    pub const AGENT_DEPLOYMENT_FAILED: &str = "AgentDeploymentFailed";
    /// The agent registered but has not checked in for more than twice its check-in interval.
    pub const AGENT_NOT_SEEN: &str = "AgentNotSeen";
    /// The agent checks in, but some bundles targeting the cluster are not ready.
    pub const BUNDLES_NOT_READY: &str = "BundlesNotReady";
    /// A registered agent-initiated cluster's agent settings changed in a way Fleet cannot carry
    /// out for it: the import holds them (`crate::model::fleet::hold_stranding_changes`).
    pub const AGENT_SETTINGS_HELD: &str = "AgentSettingsHeld";

    /// True: the agent checks in, and every bundle not ready only waits for its rollout
    /// partition (Fleet's `OutOfSync`: staged, the current deployment applied and ready).
    pub const UPDATE_PENDING: &str = "UpdatePending";

    /// Every reason, for metrics that report zero counts too.
    pub const ALL: [&str; 9] = [
        UPDATE_PENDING,
        AGENT_SETTINGS_HELD,
        READY,
        WAITING_FOR_CONTROL_PLANE,
        AGENT_NOT_REGISTERED,
        KUBECONFIG_SECRET_MISSING,
        AGENT_DEPLOYMENT_FAILED,
        AGENT_NOT_SEEN,
        BUNDLES_NOT_READY,
    ];
}

/// Bundles named in a message; the rest are counted.
pub const MAX_NAMED_BUNDLES: usize = 5;
/// Longest excerpt of one Fleet message (characters).
pub const MAX_FLEET_MESSAGE: usize = 200;
/// Longest condition message (characters).
pub const MAX_MESSAGE: usize = 1024;

/// What the condition says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Health {
    pub ready: bool,
    pub reason: &'static str,
    pub message: String,
    /// When the same inputs will say something else (the agent's check-in becomes overdue).
    pub recheck_after: Option<Duration>,
}

/// How the agent of an imported Cluster registers (for the messages).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegistrationPath {
    /// With this ClusterRegistrationToken (`namespace/name`).
    AgentInitiated { token: String },
    /// Fleet deploys the agent through this kubeconfig Secret (`namespace/name`).
    ManagerInitiated { kubeconfig_secret: String },
}

/// What to do with a Cluster's condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Desired {
    /// Touch nothing (paused, being deleted, configuration on hold).
    Keep,
    /// Remove the condition we wrote, if any (not imported, or opted out).
    Remove,
    /// Set it.
    Set(Health),
}

/// The condition's content for a Cluster in state `decision`, whether or not it is written
/// (the `ready` count uses it too). `None` for Clusters that are not imported or waiting.
pub fn health_of(
    decision: &Decision,
    view: &ClusterView,
    config: &EffectiveConfig,
    fleet: Option<&FleetCluster>,
    now: Timestamp,
) -> Option<Health> {
    let import = config.cluster.as_ref()?;
    match decision {
        Decision::Wait => Some(Health {
            ready: false,
            reason: reason::WAITING_FOR_CONTROL_PLANE,
            message: "Waiting for the control plane to be initialized: Fleet deploys its agent \
                      through the kubeconfig Secret afterwards"
                .to_string(),
            recheck_after: None,
        }),
        Decision::Import { agent_initiated } => {
            let registration = if *agent_initiated {
                RegistrationPath::AgentInitiated {
                    token: format!("{}/{}", view.namespace, view.name),
                }
            } else {
                RegistrationPath::ManagerInitiated {
                    kubeconfig_secret: format!(
                        "{}/{}",
                        view.namespace,
                        names::kubeconfig_secret_name(&view.name)
                    ),
                }
            };
            let held = fleet
                .and_then(|f| f.metadata.annotations.as_ref())
                .and_then(|a| a.get(names::HELD_AGENT_SETTINGS_ANNOTATION));
            if let Some(held) = held {
                return Some(Health {
                    ready: false,
                    reason: reason::AGENT_SETTINGS_HELD,
                    message: bounded(held, MAX_MESSAGE),
                    recheck_after: None,
                });
            }
            Some(evaluate(
                &registration,
                fleet.and_then(|f| f.status.as_ref()),
                import.agent_checkin_interval,
                now,
            ))
        }
        _ => None,
    }
}

/// What to do with the condition of a Cluster in state `decision`.
pub fn desired(
    decision: &Decision,
    view: &ClusterView,
    config: &EffectiveConfig,
    fleet: Option<&FleetCluster>,
    now: Timestamp,
) -> Desired {
    if view.deleting {
        return Desired::Keep;
    }
    match decision {
        Decision::Paused { .. }
        | Decision::Hold
        | Decision::Cleanup
        | Decision::Teardown { .. }
        | Decision::Moved => Desired::Keep,
        Decision::Release { .. } | Decision::Ignore | Decision::Turtles => Desired::Remove,
        Decision::Wait | Decision::Import { .. } => {
            let enabled = config
                .cluster
                .as_ref()
                .is_some_and(|import| import.fleet_ready_condition);
            match health_of(decision, view, config, fleet, now) {
                Some(health) if enabled => Desired::Set(health),
                _ => Desired::Remove,
            }
        }
    }
}

/// What the health controller observed of one Cluster.
pub struct Observed<'a> {
    pub decision: &'a Decision,
    pub view: &'a ClusterView,
    pub fleet: Option<&'a FleetCluster>,
    /// The Cluster as cached, and what its Events are about.
    pub cluster: ObjectId,
    pub regarding: ObjectReference,
    pub status: Option<&'a Value>,
    pub generation: Option<i64>,
    /// Whether our field manager owns anything in the Cluster's status.
    pub owns_status: bool,
    pub now: Timestamp,
}

/// The write that keeps one Cluster's condition (server-side applied to its `status` by our own
/// field manager, owning only that condition: nothing when the live condition says the same
/// already), an Event when its status changes, and when to look again.
pub fn plan(o: &Observed<'_>, config: &EffectiveConfig) -> Plan {
    let current = live_condition(o.status);
    let apply = |conditions: Vec<Value>| {
        let mut body = json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "Cluster",
            "metadata": {"name": o.view.name},
        });
        if !conditions.is_empty() {
            body["status"] = json!({"conditions": conditions});
        }
        Write::ApplyStatus {
            object: o.cluster.clone(),
            body,
            manager: names::HEALTH_FIELD_MANAGER,
        }
    };
    let health = match desired(o.decision, o.view, config, o.fleet, o.now) {
        // Applying without the condition removes it, unless another manager also owns it.
        Desired::Remove if current.is_some() && o.owns_status => {
            return Plan::of(vec![apply(vec![])], Next::AwaitChange);
        }
        Desired::Keep | Desired::Remove => return Plan::default(),
        // Not before the import controller has done its part: a status write bumps the
        // Cluster's resourceVersion and would send the finalizer patch (guarded by it) into a
        // conflict and a re-read, and before the Fleet Cluster exists the condition would only
        // be written again a moment later. Both writes wake this controller up.
        Desired::Set(_) if import_pending(o.decision, o.view, o.fleet) => return Plan::default(),
        Desired::Set(health) => health,
    };
    let mut writes = vec![];
    let ready_changed = condition_to_apply(current, &health, o.generation, o.now);
    let held_live = capi::live_condition(o.status, names::ROLLOUT_HELD_CONDITION);
    let held = rollout_held(config, o.fleet);
    let held_changed =
        held.and_then(|h| capi::condition_to_apply(held_live, &h, o.generation, o.now));
    let held_removed = held.is_none() && held_live.is_some();
    if ready_changed.is_some() || held_changed.is_some() || held_removed {
        // One manager owns both conditions: an apply names every one it keeps.
        let ready = ready_changed.clone().or_else(|| current.cloned());
        let held = held_changed
            .or_else(|| held_live.cloned())
            .filter(|_| held.is_some());
        writes.push(apply(ready.into_iter().chain(held).collect()));
    }
    if ready_changed.is_some() && status_changes(current, &health) {
        let was_ready = current
            .and_then(|c| c.get("status"))
            .and_then(Value::as_str);
        let (type_, reason) = match (health.ready, was_ready == Some("True")) {
            (true, _) => (EventType::Normal, "FleetReady"),
            (false, true) => (EventType::Warning, "FleetNotReady"),
            (false, false) => (EventType::Normal, "FleetNotReady"),
        };
        let status = if health.ready { "True" } else { "False" };
        let note = event_note(&format!(
            "{CONDITION_TYPE} is {status} ({}): {}",
            health.reason, health.message
        ));
        writes.push(Write::event(&o.regarding, type_, reason, "Reporting", note));
    }
    let then = health.recheck_after.map_or(Next::AwaitChange, Next::After);
    Plan::of(writes, then)
}

/// The `FleetRolloutHeld` condition of an imported Cluster when rollout waves are configured:
/// True with the hold as reason while its Fleet Cluster carries the hold label (the message from
/// its annotation), else False. Never an availability gate: it does not change `FleetReady`.
fn rollout_held<'a>(
    config: &EffectiveConfig,
    fleet: Option<&'a FleetCluster>,
) -> Option<capi::Condition<'a>> {
    config.cluster.as_ref()?.rollout.as_ref()?;
    let meta = &fleet?.metadata;
    let held = meta
        .labels
        .as_ref()
        .and_then(|l| l.get(names::ROLLOUT_HOLD_LABEL));
    let annotations = meta.annotations.as_ref();
    let message = annotations.and_then(|a| a.get(names::ROLLOUT_HOLD_MESSAGE_ANNOTATION));
    Some(capi::Condition {
        type_: names::ROLLOUT_HELD_CONDITION,
        status: held.is_some(),
        reason: held.map_or("NotHeld", String::as_str),
        message: message.map_or("", String::as_str),
    })
}

/// Whether the import controller has not yet written the finalizer (every selected Cluster) or
/// the Fleet Cluster (an imported one).
fn import_pending(decision: &Decision, view: &ClusterView, fleet: Option<&FleetCluster>) -> bool {
    !view.has_finalizer() || (matches!(decision, Decision::Import { .. }) && fleet.is_none())
}

/// The condition of an imported Cluster from its Fleet Cluster's status.
pub fn evaluate(
    registration: &RegistrationPath,
    status: Option<&ClusterStatus>,
    checkin_interval: Duration,
    now: Timestamp,
) -> Health {
    let last_seen = status
        .and_then(|s| s.agent.as_ref())
        .and_then(|a| a.last_seen.as_deref())
        .and_then(|text| text.parse::<Timestamp>().ok());
    let Some(last_seen) = last_seen else {
        return not_registered(registration, status);
    };
    let allowed = checkin_interval.saturating_mul(2);
    let age = now
        .duration_since(last_seen)
        .try_into()
        .unwrap_or(Duration::ZERO);
    if age > allowed {
        return Health {
            ready: false,
            reason: reason::AGENT_NOT_SEEN,
            message: format!(
                "The Fleet agent last checked in at {}, more than twice its check-in interval ({}) ago",
                last_seen.strftime("%Y-%m-%dT%H:%M:%SZ"),
                short_duration(checkin_interval)
            ),
            recheck_after: None,
        };
    }
    // Overdue one second after `allowed` has passed.
    let recheck_after = Some(allowed - age + Duration::from_secs(1));
    let bundles = bundles(status);
    Health {
        recheck_after,
        ..bundles
    }
}

fn not_registered(registration: &RegistrationPath, status: Option<&ClusterStatus>) -> Health {
    let health = |reason, message: String| Health {
        ready: false,
        reason,
        message: bounded(&message, MAX_MESSAGE),
        recheck_after: None,
    };
    match registration {
        RegistrationPath::AgentInitiated { token } => health(
            reason::AGENT_NOT_REGISTERED,
            format!(
                "Waiting for the Fleet agent to register with ClusterRegistrationToken {token}: no agent has checked in yet"
            ),
        ),
        RegistrationPath::ManagerInitiated { kubeconfig_secret } => {
            let failure = status
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .find(|c| c.r#type == "Imported" && c.status == "False")
                .map(|c| c.message.clone().unwrap_or_default());
            let secret_name = kubeconfig_secret
                .rsplit_once('/')
                .map_or(kubeconfig_secret.as_str(), |(_, name)| name);
            match failure {
                Some(message)
                    if message.contains("not found")
                        && message.contains(&format!("\"{secret_name}\"")) =>
                {
                    health(
                        reason::KUBECONFIG_SECRET_MISSING,
                        format!(
                            "Fleet cannot find kubeconfig Secret {kubeconfig_secret}: {}",
                            bounded(&message, MAX_FLEET_MESSAGE)
                        ),
                    )
                }
                Some(message) => health(
                    reason::AGENT_DEPLOYMENT_FAILED,
                    format!(
                        "Fleet could not deploy its agent through kubeconfig Secret {kubeconfig_secret}: {}",
                        bounded(&message, MAX_FLEET_MESSAGE)
                    ),
                ),
                None => health(
                    reason::AGENT_NOT_REGISTERED,
                    format!(
                        "Waiting for Fleet to deploy its agent through kubeconfig Secret {kubeconfig_secret}: no agent has checked in yet"
                    ),
                ),
            }
        }
    }
}

/// Bundle readiness, for an agent that checks in.
fn bundles(status: Option<&ClusterStatus>) -> Health {
    let summary = status.and_then(|s| s.summary.as_ref());
    let desired = summary.and_then(|s| s.desired_ready).unwrap_or(0);
    let ready = summary.and_then(|s| s.ready).unwrap_or(0);
    let non_ready: Vec<_> = summary
        .and_then(|s| s.non_ready_resources.as_ref())
        .into_iter()
        .flatten()
        .collect();
    let count = |r: Option<i64>, d: Option<i64>| (r.unwrap_or(0), d.unwrap_or(0));
    let repos = count(
        status.and_then(|s| s.ready_git_repos),
        status.and_then(|s| s.desired_ready_git_repos),
    );
    let helm_ops = count(
        status.and_then(|s| s.ready_helm_ops),
        status.and_then(|s| s.desired_ready_helm_ops),
    );
    let sources = [("GitRepos", repos), ("HelmOps", helm_ops)]
        .iter()
        .filter(|(_, (_, d))| *d > 0)
        .map(|(kind, (r, d))| format!("{kind} ready {r}/{d}"))
        .collect::<Vec<_>>()
        .join(", ");
    let sources_suffix = if sources.is_empty() {
        String::new()
    } else {
        format!(" ({sources})")
    };
    let all_ready =
        ready >= desired && non_ready.is_empty() && repos.0 >= repos.1 && helm_ops.0 >= helm_ops.1;
    if all_ready {
        // No message when True: Cluster API's `Available` summary includes the messages of
        // True conditions (cluster-api v1.11.11 `util/conditions/merge_strategies.go`
        // `summaryMessage` keeps an Info condition's message when the summary is True), so a
        // count here would join every healthy gated Cluster's `Available` message and change it
        // with every bundle added. The counts are on the Fleet Cluster (`kubectl get
        // clusters.fleet.cattle.io`).
        return Health {
            ready: true,
            reason: reason::READY,
            message: String::new(),
            recheck_after: None,
        };
    }
    if crate::model::rollout::only_update_pending(status) {
        return Health {
            ready: true,
            reason: reason::UPDATE_PENDING,
            message: String::new(),
            recheck_after: None,
        };
    }
    let not_ready = (desired - ready).max(non_ready.len() as i64).max(1);
    let mut named: Vec<String> = non_ready
        .iter()
        .take(MAX_NAMED_BUNDLES)
        .map(|r| {
            let name = r.name.as_deref().unwrap_or("(unnamed)");
            let state = r.bundle_state.as_deref().unwrap_or("NotReady");
            match r
                .message
                .as_deref()
                .map(str::trim)
                .filter(|m| !m.is_empty())
            {
                Some(message) => {
                    format!("{name} ({state}: {})", bounded(message, MAX_FLEET_MESSAGE))
                }
                None => format!("{name} ({state})"),
            }
        })
        .collect();
    let unnamed = not_ready - named.len() as i64;
    if unnamed > 0 && !named.is_empty() {
        named.push(format!("and {unnamed} more"));
    }
    let list = if named.is_empty() {
        String::new()
    } else {
        format!(": {}", named.join("; "))
    };
    let of = if desired > 0 {
        format!(" of {desired}")
    } else {
        String::new()
    };
    Health {
        ready: false,
        reason: reason::BUNDLES_NOT_READY,
        message: bounded(
            &format!("{not_ready}{of} Fleet bundles not ready{sources_suffix}{list}"),
            MAX_MESSAGE,
        ),
        recheck_after: None,
    }
}

/// The live `FleetReady` condition in a Cluster's `status`, if any.
pub fn live_condition(status: Option<&Value>) -> Option<&Value> {
    capi::live_condition(status, CONDITION_TYPE)
}

/// The condition to apply, or `None` when the live one already says exactly this (same status,
/// reason, message and observedGeneration). `lastTransitionTime` is kept while the status stays
/// the same, and is `now` when it changes.
pub fn condition_to_apply(
    live: Option<&Value>,
    health: &Health,
    generation: Option<i64>,
    now: Timestamp,
) -> Option<Value> {
    capi::condition_to_apply(
        live,
        &capi::Condition {
            type_: CONDITION_TYPE,
            status: health.ready,
            reason: health.reason,
            message: &health.message,
        },
        generation,
        now,
    )
}

/// Whether writing `health` changes the condition's status (an Event is due): a new condition
/// changes it only when it is True.
pub fn status_changes(live: Option<&Value>, health: &Health) -> bool {
    capi::status_changes(live, health.ready)
}

/// `text` cut to at most `max` characters (on a character boundary), marked with `…`.
/// `text` on one line (Fleet's messages may hold newlines, which Cluster API would indent into
/// `Available`'s message), at most `max` characters.
fn bounded(text: &str, max: usize) -> String {
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.chars().count() <= max {
        return text;
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// `15m`, `1h`, `90s`: how Fleet's settings spell durations.
fn short_duration(duration: Duration) -> String {
    let secs = duration.as_secs();
    if secs > 0 && secs.is_multiple_of(3600) {
        format!("{}h", secs / 3600)
    } else if secs > 0 && secs.is_multiple_of(60) {
        format!("{}m", secs / 60)
    } else {
        format!("{secs}s")
    }
}

#[cfg(test)]
mod one_line_tests {
    /// Fleet's messages may hold newlines; the condition's message is one line.
    #[test]
    fn messages_are_one_line_and_bounded() {
        assert_eq!(
            super::bounded("deployment failed:\n  error: x\r\n\tnot ready", 100),
            "deployment failed: error: x not ready"
        );
        assert_eq!(super::bounded("a\nbcdef", 4), "a b…");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::FleetAddonConfigSpec;
    use serde_json::json;

    fn status(yaml: &str) -> ClusterStatus {
        serde_yaml::from_str(yaml).expect("fixture is a Fleet ClusterStatus")
    }

    fn at(text: &str) -> Timestamp {
        text.parse().expect("timestamp")
    }

    const NO_AGENT: &str =
        include_str!("../../tests/fixtures/fleet/status-registered-no-agent.yaml");
    const SECRET_MISSING: &str =
        include_str!("../../tests/fixtures/fleet/status-kubeconfig-missing.yaml");
    const DEPLOY_FAILED: &str =
        include_str!("../../tests/fixtures/fleet/status-agent-deploy-failed.yaml");
    const NOT_READY: &str =
        include_str!("../../tests/fixtures/fleet/status-bundles-not-ready.yaml");
    const READY: &str = include_str!("../../tests/fixtures/fleet/status-ready.yaml");

    fn agent() -> RegistrationPath {
        RegistrationPath::AgentInitiated {
            token: "clusters/c1".into(),
        }
    }

    fn manager() -> RegistrationPath {
        RegistrationPath::ManagerInitiated {
            kubeconfig_secret: "clusters/c1-kubeconfig".into(),
        }
    }

    const FIFTEEN_MINUTES: Duration = Duration::from_secs(15 * 60);

    #[test]
    fn reasons_from_real_shaped_fleet_statuses() {
        struct Row {
            name: &'static str,
            registration: RegistrationPath,
            status: Option<&'static str>,
            now: &'static str,
            ready: bool,
            reason: &'static str,
            message: &'static str,
        }
        let rows = [
            Row {
                name: "agent-initiated, no Fleet Cluster status yet",
                registration: agent(),
                status: None,
                now: "2026-11-23T10:00:00Z",
                ready: false,
                reason: reason::AGENT_NOT_REGISTERED,
                message: "Waiting for the Fleet agent to register with ClusterRegistrationToken clusters/c1: no agent has checked in yet",
            },
            Row {
                name: "agent-initiated, WaitCheckIn",
                registration: agent(),
                status: Some(NO_AGENT),
                now: "2026-11-23T10:00:00Z",
                ready: false,
                reason: reason::AGENT_NOT_REGISTERED,
                message: "Waiting for the Fleet agent to register with ClusterRegistrationToken clusters/c1: no agent has checked in yet",
            },
            Row {
                name: "manager-initiated, nothing reported yet",
                registration: manager(),
                status: Some(NO_AGENT),
                now: "2026-11-23T10:00:00Z",
                ready: false,
                reason: reason::AGENT_NOT_REGISTERED,
                message: "Waiting for Fleet to deploy its agent through kubeconfig Secret clusters/c1-kubeconfig: no agent has checked in yet",
            },
            Row {
                name: "manager-initiated, kubeconfig Secret missing",
                registration: manager(),
                status: Some(SECRET_MISSING),
                now: "2026-11-23T10:00:00Z",
                ready: false,
                reason: reason::KUBECONFIG_SECRET_MISSING,
                message: "Fleet cannot find kubeconfig Secret clusters/c1-kubeconfig: secrets \"c1-kubeconfig\" not found",
            },
            Row {
                name: "manager-initiated, agent deployment failed",
                registration: manager(),
                status: Some(DEPLOY_FAILED),
                now: "2026-11-23T10:00:00Z",
                ready: false,
                reason: reason::AGENT_DEPLOYMENT_FAILED,
                message: "Fleet could not deploy its agent through kubeconfig Secret clusters/c1-kubeconfig: Get \"https://10.0.0.5:6443/api/v1/namespaces/kube-system\": dial tcp 10.0.0.5:6443: connect: connection refused",
            },
            Row {
                name: "bundles not ready, named with Fleet's messages",
                registration: agent(),
                status: Some(NOT_READY),
                now: "2026-11-23T10:05:00Z",
                ready: false,
                reason: reason::BUNDLES_NOT_READY,
                message: "2 of 4 Fleet bundles not ready (GitRepos ready 0/1, HelmOps ready 1/2): calico-cni (ErrApplied: chart requires kubeVersion: >=1.31.0-0 which is incompatible with Kubernetes v1.30.4); monitoring-grafana (NotReady: deployment.apps monitoring/grafana [progressing] Deployment does not have minimum availability.)",
            },
            Row {
                name: "ready",
                registration: manager(),
                status: Some(READY),
                now: "2026-11-23T10:29:59Z",
                ready: true,
                reason: reason::READY,
                message: "",
            },
            Row {
                name: "ready agent overdue by more than twice the interval",
                registration: manager(),
                status: Some(READY),
                now: "2026-11-23T10:30:01Z",
                ready: false,
                reason: reason::AGENT_NOT_SEEN,
                message: "The Fleet agent last checked in at 2026-11-23T10:00:00Z, more than twice its check-in interval (15m) ago",
            },
            Row {
                name: "a silent agent outranks its stale bundle summary",
                registration: agent(),
                status: Some(NOT_READY),
                now: "2026-11-24T10:00:00Z",
                ready: false,
                reason: reason::AGENT_NOT_SEEN,
                message: "The Fleet agent last checked in at 2026-11-23T10:00:00Z, more than twice its check-in interval (15m) ago",
            },
        ];
        for row in rows {
            let status = row.status.map(status);
            let health = evaluate(
                &row.registration,
                status.as_ref(),
                FIFTEEN_MINUTES,
                at(row.now),
            );
            assert_eq!(health.ready, row.ready, "{}", row.name);
            assert_eq!(health.reason, row.reason, "{}", row.name);
            assert_eq!(health.message, row.message, "{}", row.name);
            assert!(reason::ALL.contains(&health.reason), "{}", row.name);
        }
    }

    #[test]
    fn rechecks_when_the_check_in_becomes_overdue() {
        let ready = status(READY);
        let health = evaluate(
            &manager(),
            Some(&ready),
            FIFTEEN_MINUTES,
            at("2026-11-23T10:10:00Z"),
        );
        assert_eq!(health.recheck_after, Some(Duration::from_secs(20 * 60 + 1)));
        let late = evaluate(
            &manager(),
            Some(&ready),
            FIFTEEN_MINUTES,
            at("2026-11-23T11:00:00Z"),
        );
        assert_eq!(late.recheck_after, None);
        // A longer interval tolerates a longer silence.
        let hour = evaluate(
            &manager(),
            Some(&ready),
            Duration::from_secs(3600),
            at("2026-11-23T11:00:00Z"),
        );
        assert_eq!(hour.reason, reason::READY);
    }

    #[test]
    fn long_bundle_lists_and_messages_are_bounded() {
        let mut many = status(NOT_READY);
        let summary = many.summary.as_mut().expect("summary");
        summary.desired_ready = Some(40);
        summary.ready = Some(10);
        let template = summary.non_ready_resources.as_ref().expect("list")[0].clone();
        summary.non_ready_resources = Some(
            (0..10)
                .map(|i| {
                    let mut r = template.clone();
                    r.name = Some(format!("bundle-{i:02}"));
                    r.message = Some("x".repeat(5000));
                    r
                })
                .collect(),
        );
        let health = evaluate(
            &agent(),
            Some(&many),
            FIFTEEN_MINUTES,
            at("2026-11-23T10:01:00Z"),
        );
        assert_eq!(health.reason, reason::BUNDLES_NOT_READY);
        assert!(
            health
                .message
                .starts_with("30 of 40 Fleet bundles not ready")
        );
        assert!(
            health.message.chars().count() <= MAX_MESSAGE,
            "{}",
            health.message
        );
        assert!(health.message.contains("bundle-00 (ErrApplied: xxx"));
        assert!(!health.message.contains("bundle-05"), "only five are named");
        // Not truncated past the limit: the count of the others survives a shorter message.
        let mut short = many.clone();
        for r in short
            .summary
            .as_mut()
            .and_then(|s| s.non_ready_resources.as_mut())
            .expect("list")
        {
            r.message = None;
        }
        let health = evaluate(
            &agent(),
            Some(&short),
            FIFTEEN_MINUTES,
            at("2026-11-23T10:01:00Z"),
        );
        assert!(
            health
                .message
                .ends_with("bundle-03 (ErrApplied); bundle-04 (ErrApplied); and 25 more"),
            "{}",
            health.message
        );
    }

    #[test]
    fn unparseable_last_seen_counts_as_not_registered() {
        let mut odd = status(READY);
        if let Some(agent) = odd.agent.as_mut() {
            agent.last_seen = Some("yesterday".into());
        }
        let health = evaluate(
            &agent(),
            Some(&odd),
            FIFTEEN_MINUTES,
            at("2026-11-23T10:00:00Z"),
        );
        assert_eq!(health.reason, reason::AGENT_NOT_REGISTERED);
    }

    fn view(extra: Value) -> ClusterView {
        let mut metadata = json!({"name": "c1", "namespace": "clusters", "generation": 3});
        if let (Some(m), Some(e)) = (metadata.as_object_mut(), extra.as_object()) {
            m.extend(e.clone());
        }
        ClusterView::from_json(&json!({"metadata": metadata})).expect("view")
    }

    fn config(yaml: &str) -> EffectiveConfig {
        let spec: FleetAddonConfigSpec = serde_yaml::from_str(yaml).expect("spec");
        EffectiveConfig::from_spec(&spec)
    }

    #[test]
    fn what_to_do_per_decision() {
        let now = at("2026-11-23T10:00:00Z");
        let on = EffectiveConfig::default();
        let off = config("cluster: {setFleetReadyCondition: false}");
        let import = Decision::Import {
            agent_initiated: false,
        };
        let set = |d: &Desired| matches!(d, Desired::Set(_));
        assert!(set(&desired(&import, &view(json!({})), &on, None, now)));
        match desired(&Decision::Wait, &view(json!({})), &on, None, now) {
            Desired::Set(h) => assert_eq!(h.reason, reason::WAITING_FOR_CONTROL_PLANE),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            desired(&import, &view(json!({})), &off, None, now),
            Desired::Remove
        );
        assert_eq!(
            desired(&Decision::Ignore, &view(json!({})), &on, None, now),
            Desired::Remove
        );
        assert_eq!(
            desired(
                &Decision::Release {
                    delete_fleet_cluster: false
                },
                &view(json!({})),
                &on,
                None,
                now
            ),
            Desired::Remove
        );
        for keep in [
            Decision::Paused { selected: true },
            Decision::Hold,
            Decision::Cleanup,
            Decision::Moved,
        ] {
            assert_eq!(
                desired(&keep, &view(json!({})), &on, None, now),
                Desired::Keep
            );
        }
        let deleting = view(json!({"deletionTimestamp": "2026-11-23T09:00:00Z"}));
        assert_eq!(
            desired(&Decision::Ignore, &deleting, &on, None, now),
            Desired::Keep
        );
        // The ready count still sees the health of opted-out Clusters.
        assert!(health_of(&import, &view(json!({})), &off, None, now).is_some());
        // Agent settings the import holds (issue #38): not ready, saying what and the way out.
        let held: FleetCluster = serde_json::from_value(json!({"metadata": {"name": "c1",
            "annotations": {(names::HELD_AGENT_SETTINGS_ANNOTATION): "agentNamespace \"b\" is held at \"a\": …"}},
            "spec": {}, "status": {"agent": {"lastSeen": "2026-11-23T09:59:00Z"}}}))
        .expect("fleet cluster");
        let agent = Decision::Import {
            agent_initiated: true,
        };
        match desired(&agent, &view(json!({})), &on, Some(&held), now) {
            Desired::Set(h) => assert_eq!(
                (h.ready, h.reason, h.message.as_str()),
                (
                    false,
                    reason::AGENT_SETTINGS_HELD,
                    "agentNamespace \"b\" is held at \"a\": …"
                )
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn checkin_interval_comes_from_the_configuration() {
        let explicit = config("cluster: {agentCheckinInterval: 1h}");
        let installed = config(
            "cluster: {}\ninstall: {followLatest: true, values: {agentCheckinInterval: 5m}}",
        );
        let both = config(
            "cluster: {agentCheckinInterval: 2m}\ninstall: {followLatest: true, values: {agentCheckinInterval: 5m}}",
        );
        let interval = |c: &EffectiveConfig| c.cluster.as_ref().map(|i| i.agent_checkin_interval);
        assert_eq!(interval(&explicit), Some(Duration::from_secs(3600)));
        assert_eq!(interval(&installed), Some(Duration::from_secs(300)));
        assert_eq!(interval(&both), Some(Duration::from_secs(120)));
        assert_eq!(
            interval(&EffectiveConfig::default()),
            Some(Duration::from_secs(900))
        );
        let bad = config("cluster: {agentCheckinInterval: soon}");
        assert!(
            bad.problems
                .iter()
                .any(|p| p.path == "spec.cluster.agentCheckinInterval")
        );
    }

    #[test]
    fn writes_only_what_changed_and_keeps_the_transition_time() {
        let now = at("2026-11-23T10:00:00Z");
        let health = Health {
            ready: false,
            reason: reason::BUNDLES_NOT_READY,
            message: "1 of 2 Fleet bundles not ready: app (NotReady)".into(),
            recheck_after: None,
        };
        let first = condition_to_apply(None, &health, Some(3), now).expect("absent: write");
        assert_eq!(first["lastTransitionTime"], "2026-11-23T10:00:00Z");
        assert_eq!(first["observedGeneration"], 3);
        assert_eq!(first["type"], "FleetReady");
        assert!(!status_changes(None, &health), "a first False is not news");

        let later = at("2026-11-23T11:00:00Z");
        assert_eq!(
            condition_to_apply(Some(&first), &health, Some(3), later),
            None
        );
        assert!(!status_changes(Some(&first), &health));

        let reworded = Health {
            message: "2 of 2 Fleet bundles not ready".into(),
            ..health.clone()
        };
        let update = condition_to_apply(Some(&first), &reworded, Some(3), later).expect("write");
        assert_eq!(update["lastTransitionTime"], "2026-11-23T10:00:00Z");
        let regenerated = condition_to_apply(Some(&first), &health, Some(4), later).expect("write");
        assert_eq!(regenerated["lastTransitionTime"], "2026-11-23T10:00:00Z");
        assert_eq!(regenerated["observedGeneration"], 4);

        let ready = Health {
            ready: true,
            reason: reason::READY,
            message: String::new(),
            recheck_after: None,
        };
        let flipped = condition_to_apply(Some(&first), &ready, Some(3), later).expect("write");
        assert_eq!(flipped["status"], "True");
        assert_eq!(flipped["lastTransitionTime"], "2026-11-23T11:00:00Z");
        assert!(status_changes(Some(&first), &ready));
        assert!(status_changes(None, &ready), "a first True is");
        assert!(status_changes(Some(&flipped), &health), "True to False is");

        let status = json!({"conditions": [{"type": "Available", "status": "True"}, first]});
        assert_eq!(
            live_condition(Some(&status)).and_then(|c| c.get("reason")),
            Some(&json!("BundlesNotReady"))
        );
        assert_eq!(live_condition(None), None);
    }

    /// Rollout waves: `FleetRolloutHeld` beside `FleetReady` in one apply (a hold that starts
    /// rewrites both; an unchanged one writes nothing), and `UpdatePending` when the bundles only
    /// wait for their partition.
    #[test]
    fn rollout_held_beside_fleet_ready_and_update_pending() {
        let now = at("2026-11-23T10:00:00Z");
        let config = config("cluster: {agentInitiated: true, rollout: {waves: [canary, rest]}}");
        let view = view(json!({"finalizers": [names::FINALIZER]}));
        let fleet = |labels: Value, summary: Value| -> FleetCluster {
            serde_json::from_value(json!({
                "apiVersion": "fleet.cattle.io/v1alpha1", "kind": "Cluster",
                "metadata": {"name": "c1", "namespace": "clusters", "labels": labels,
                    "annotations": {names::ROLLOUT_HOLD_MESSAGE_ANNOTATION: "wave rest waits for canary: it is rolling out"}},
                "spec": {},
                "status": {"agent": {"lastSeen": "2026-11-23T09:59:00Z"}, "summary": summary},
            }))
            .expect("Fleet Cluster")
        };
        let pending = json!({"desiredReady": 2, "ready": 1, "outOfSync": 1,
            "nonReadyResources": [{"name": "cni", "bundleState": "OutOfSync"}]});
        let held = fleet(json!({names::ROLLOUT_HOLD_LABEL: "Soaking"}), pending);
        let decision = Decision::Import {
            agent_initiated: true,
        };
        let plan_for = |fleet: &FleetCluster, status: Option<&Value>| {
            plan(
                &Observed {
                    decision: &decision,
                    view: &view,
                    fleet: Some(fleet),
                    cluster: ObjectId::of::<crate::api::CapiCluster>(Some("clusters"), "c1", None),
                    regarding: ObjectReference::default(),
                    status,
                    generation: Some(3),
                    owns_status: true,
                    now,
                },
                &config,
            )
        };
        let first = plan_for(&held, None);
        let Some(Write::ApplyStatus { body, .. }) = first.writes.first() else {
            panic!("{first:?}");
        };
        let conditions = &body["status"]["conditions"];
        assert_eq!(conditions[0]["type"], "FleetReady");
        assert_eq!(
            (&conditions[0]["status"], &conditions[0]["reason"]),
            (&json!("True"), &json!("UpdatePending"))
        );
        assert_eq!(conditions[1]["type"], "FleetRolloutHeld");
        assert_eq!(
            (&conditions[1]["status"], &conditions[1]["reason"]),
            (&json!("True"), &json!("Soaking"))
        );
        assert_eq!(
            conditions[1]["message"],
            "wave rest waits for canary: it is rolling out"
        );
        // As written: nothing more.
        let live = json!({"conditions": conditions});
        assert!(plan_for(&held, Some(&live)).writes.is_empty());
        // Released: FleetRolloutHeld False, FleetReady kept as it is.
        let released = fleet(
            json!({}),
            json!({"desiredReady": 2, "ready": 1, "outOfSync": 1,
            "nonReadyResources": [{"name": "cni", "bundleState": "OutOfSync"}]}),
        );
        let next = plan_for(&released, Some(&live));
        let Some(Write::ApplyStatus { body, .. }) = next.writes.first() else {
            panic!("{next:?}");
        };
        assert_eq!(body["status"]["conditions"][0], conditions[0]);
        assert_eq!(body["status"]["conditions"][1]["status"], "False");
        assert_eq!(body["status"]["conditions"][1]["reason"], "NotHeld");
    }
}
