//! Rollout waves (docs/rollout.md): Fleet stays the rollout engine, we only label. Each Fleet
//! Cluster we own gets its wave ([`names::ROLLOUT_WAVE_LABEL`]), topology variables as labels,
//! and, only while held, [`names::ROLLOUT_HOLD_LABEL`] with the reason ([`Hold`]): what
//! Fleet's partitions cannot judge. The `rolloutStrategy` we print ([`rollout_strategy`]) has one
//! partition per wave without held clusters, a catch-all, and a last partition of the held with
//! `maxUnavailable: 0`, which Fleet never promotes a healthy cluster in ([`walk`] pins why).
//!
//! Waves are counted per ClusterClass: a wave of a class holds the later waves of that class
//! while its clusters roll out or fail, and for `soak` after they are all ready again
//! ([`advance`], [`hold`]).

pub mod strategy;
pub mod upgrades;
pub mod walk;

use std::collections::BTreeMap;
use std::time::Duration;

use fleet_api_rs::fleet_cluster::{Cluster as FleetCluster, ClusterStatus};
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use crate::api::{RolloutConfig, RolloutStatus, SoakStatus, WaveStatus};
use crate::model::capi::{ClusterView, StringMap};
use crate::names;

/// Clusters of an earlier wave failing that hold the later waves, by default.
pub const DEFAULT_FAILING_CLUSTERS: usize = 1;

/// `spec.cluster.rollout`, compiled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rollout {
    pub wave_variable: Option<String>,
    pub waves: Vec<String>,
    /// Index into `waves`: `defaultWave`, else the last wave.
    pub default_wave: usize,
    pub soak: Duration,
    pub failing_clusters: usize,
    /// `kubernetesUpgrades`: BeforeClusterUpgrade follows the waves ([`upgrades`]).
    pub kubernetes_upgrades: bool,
}

impl Rollout {
    /// `None` without waves (validation reports it).
    pub fn compile(config: &RolloutConfig) -> Option<Self> {
        let waves = config.waves.clone().filter(|w| !w.is_empty())?;
        let default_wave = config
            .default_wave
            .as_ref()
            .and_then(|d| waves.iter().position(|w| w == d))
            .unwrap_or(waves.len() - 1);
        let soak = config
            .soak
            .as_deref()
            .map(crate::api::duration::parse_duration);
        Some(Rollout {
            wave_variable: config.wave_variable.clone(),
            default_wave,
            soak: soak.and_then(Result::ok).unwrap_or_default(),
            failing_clusters: config
                .hold
                .as_ref()
                .and_then(|h| h.failing_clusters)
                .map_or(DEFAULT_FAILING_CLUSTERS, |n| n.max(1) as usize),
            kubernetes_upgrades: config.kubernetes_upgrades == Some(true),
            waves,
        })
    }

    /// The wave of a Cluster: its [`names::ROLLOUT_WAVE_ANNOTATION`], else its `waveVariable`
    /// (the ClusterClass's schema default reaches the Cluster through Cluster API's defaulting),
    /// else the default wave. A value naming no wave is a problem (the default wave applies).
    pub fn wave_of(&self, view: &ClusterView) -> (usize, Option<String>) {
        let annotation = view.annotations.get(names::ROLLOUT_WAVE_ANNOTATION);
        let variable = self
            .wave_variable
            .as_ref()
            .and_then(|v| view.variables.get(v));
        let (value, source) = match (annotation, variable) {
            (Some(a), _) => (
                a.clone(),
                format!("annotation {}", names::ROLLOUT_WAVE_ANNOTATION),
            ),
            (None, Some(Value::String(v))) => (v.clone(), self.variable_source()),
            (None, Some(v)) => (v.to_string(), self.variable_source()),
            (None, None) => return (self.default_wave, None),
        };
        match self.waves.iter().position(|w| *w == value) {
            Some(i) => (i, None),
            None => {
                let problem = format!(
                    "{source}: wave {value:?} is not one of spec.cluster.rollout.waves {:?}; the default wave {:?} applies",
                    self.waves, self.waves[self.default_wave]
                );
                (self.default_wave, Some(problem))
            }
        }
    }

    fn variable_source(&self) -> String {
        let name = self.wave_variable.as_deref().unwrap_or_default();
        format!("topology variable {name:?}")
    }
}

/// The labels of `spec.cluster.variableLabels` for a Cluster's topology `variables`: each named
/// variable whose value (a string, number or boolean) is a valid label value; the problems of the
/// others (a missing variable is none).
pub fn variable_labels(
    names: &[String],
    variables: &BTreeMap<String, Value>,
) -> (StringMap, Vec<String>) {
    let (mut labels, mut problems) = (StringMap::new(), Vec::new());
    for name in names {
        let text = match variables.get(name) {
            None => continue,
            Some(_) if name.is_empty() || !is_label_value(name) => {
                problems.push(format!("topology variable {name:?}: the name makes no label key (at most 63 characters: letters, digits, '-', '_', '.'): no label"));
                continue;
            }
            Some(Value::String(s)) => s.clone(),
            Some(v @ (Value::Number(_) | Value::Bool(_))) => v.to_string(),
            Some(_) => {
                problems.push(format!(
                    "topology variable {name:?} is not a string, number or boolean: no label"
                ));
                continue;
            }
        };
        if is_label_value(&text) {
            labels.insert(format!("{}{name}", names::VARIABLE_LABEL_PREFIX), text);
        } else {
            problems.push(format!("topology variable {name:?}: {text:?} is not a valid label value (at most 63 characters: letters, digits, '-', '_', '.', alphanumeric at both ends): no label"));
        }
    }
    (labels, problems)
}

fn is_label_value(text: &str) -> bool {
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    text.is_empty()
        || (text.len() <= 63
            && alnum(text.chars().next())
            && alnum(text.chars().last())
            && text
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)))
}

/// Why a Cluster is held: the value of [`names::ROLLOUT_HOLD_LABEL`] and the reason of
/// `FleetRolloutHeld`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Hold {
    /// [`names::ROLLOUT_HOLD_ANNOTATION`] on the Cluster or its ClusterClass.
    Manual,
    /// A Kubernetes upgrade runs (from BeforeClusterUpgrade to its end).
    Upgrading,
    /// Cluster API reports the Cluster not `Available`, for a reason other than `FleetReady`.
    Unavailable,
    /// An earlier wave has `hold.failingClusters` clusters with a bundle failing.
    WaveFailing,
    /// An earlier wave rolls out, or soaks after it did.
    Soaking,
}

impl Hold {
    pub const ALL: [Hold; 5] = [
        Hold::Manual,
        Hold::Upgrading,
        Hold::Unavailable,
        Hold::WaveFailing,
        Hold::Soaking,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Hold::Manual => "Manual",
            Hold::Upgrading => "Upgrading",
            Hold::Unavailable => "Unavailable",
            Hold::WaveFailing => "WaveFailing",
            Hold::Soaking => "Soaking",
        }
    }
}

/// Where one cluster's bundles are, from its Fleet Cluster's `status.summary` (Fleet counts
/// each BundleDeployment's state: rancher/fleet v0.16.1 `internal/cmd/controller/summary/
/// summary.go` `GetDeploymentState`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    Ready,
    /// Some bundle is not ready yet: staged and not promoted (`OutOfSync`), not applied yet
    /// (`WaitApplied`: also an agent that is offline) or new (`Pending`). Drift (`Modified`: the
    /// deployment applied, its resources changed on the cluster) is not a rollout and holds no
    /// later wave.
    Rolling,
    /// Some bundle failed to apply (`ErrApplied`) or its resources are not ready (`NotReady`).
    Failing,
}

pub fn progress(status: Option<&ClusterStatus>) -> Progress {
    let Some(s) = status.and_then(|s| s.summary.as_ref()) else {
        return Progress::Ready;
    };
    let n = |v: Option<i64>| v.unwrap_or(0);
    if n(s.err_applied) + n(s.not_ready) > 0 {
        Progress::Failing
    } else if n(s.ready) + n(s.modified) < n(s.desired_ready) {
        Progress::Rolling
    } else {
        Progress::Ready
    }
}

/// Whether every not-ready BundleDeployment of a cluster only waits for its partition: staged,
/// not promoted, and the current deployment applied and ready (Fleet's `OutOfSync`). `FleetReady`
/// stays True then (reason `UpdatePending`): a gated rollout does not make Clusters unavailable.
pub fn only_update_pending(status: Option<&ClusterStatus>) -> bool {
    let Some(s) = status.and_then(|s| s.summary.as_ref()) else {
        return false;
    };
    let n = |v: Option<i64>| v.unwrap_or(0);
    let listed = s.non_ready_resources.iter().flatten();
    n(s.out_of_sync) > 0
        && n(s.ready) + n(s.out_of_sync) >= n(s.desired_ready)
        && listed
            .into_iter()
            .all(|r| r.bundle_state.as_deref() == Some("OutOfSync"))
}

/// Whether Cluster API reports the Cluster not `Available` for a reason of its own: the
/// `Available` condition (v1beta2 `status.conditions`, v1beta1 `status.v1beta2.conditions`) is
/// False and its message names another condition than `FleetReady` (the summary lists each
/// contributing condition as `* Type: …`: cluster-api v1.12 `util/conditions` summary).
pub fn unavailable(status: Option<&Value>) -> bool {
    let v1beta1 = status.and_then(|s| s.get("v1beta2"));
    let available = crate::model::capi::live_condition(status, "Available")
        .or_else(|| crate::model::capi::live_condition(v1beta1, "Available"));
    let Some(c) = available.filter(|c| c.get("status").and_then(Value::as_str) == Some("False"))
    else {
        return false;
    };
    let message = c.get("message").and_then(Value::as_str).unwrap_or_default();
    let ours = |line: &str| {
        line.trim_start_matches("* ")
            .starts_with(names::FLEET_READY_CONDITION)
    };
    let lines: Vec<&str> = message.lines().filter(|l| !l.starts_with("  ")).collect();
    lines.is_empty() || !lines.iter().all(|l| ours(l))
}

/// The class a Cluster's waves are counted in (`namespace/name`; `""` without a class).
pub fn class_key(view: &ClusterView) -> String {
    view.class
        .as_ref()
        .map(|c| format!("{}/{}", c.namespace, c.name))
        .unwrap_or_default()
}

/// One wave of one class, as the later waves see it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WaveGate {
    pub rolling: usize,
    pub failing: usize,
    /// Became ready after rolling out: soaks until then.
    pub soak_until: Option<Timestamp>,
}

impl WaveGate {
    /// What the later waves' holds read of it ([`hold`]): whether it rolls out, fails, soaks.
    pub fn holds(&self, failing_clusters: usize) -> (bool, bool, Option<Timestamp>) {
        let failing = self.failing >= failing_clusters;
        (self.rolling + self.failing > 0, failing, self.soak_until)
    }
}

/// The gates by class and wave name.
pub type Gates = BTreeMap<(String, String), WaveGate>;

/// The gates after observing `observed` (rolling and failing clusters per class and wave) at
/// `now`: a wave that rolled out and is ready again soaks until `soak` after the observation
/// that first saw it ready; a wave seen ready at the first observation (`prev` empty for it) does
/// not soak.
pub fn advance(prev: &Gates, observed: &Gates, soak: Duration, now: Timestamp) -> Gates {
    let mut gates = Gates::new();
    for (key, seen) in observed {
        let before = prev.get(key);
        let was_rolling = before.is_some_and(|b| b.rolling + b.failing > 0);
        let soak_until = if seen.rolling + seen.failing > 0 {
            None
        } else if was_rolling {
            Some(now + soak)
        } else {
            before
                .and_then(|b| b.soak_until)
                .filter(|until| *until > now)
        };
        let gate = WaveGate {
            soak_until,
            ..seen.clone()
        };
        if gate != WaveGate::default() {
            gates.insert(key.clone(), gate);
        }
    }
    gates
}

/// Ends the soaks of the `released` classes (those whose ClusterClass carries
/// [`names::ROLLOUT_RELEASE_ANNOTATION`] `"true"`): removing the annotation afterwards does not
/// bring a soak back, and no soak of such a class starts.
pub fn release(gates: &mut Gates, released: &std::collections::BTreeSet<String>) {
    gates.retain(|(class, _), gate| {
        if released.contains(class) {
            gate.soak_until = None;
        }
        *gate != WaveGate::default()
    });
}

/// What a Cluster's own hold depends on besides the waves.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Facts {
    /// The manual hold annotation's value (the Cluster's, else its ClusterClass's).
    pub manual: Option<String>,
    pub upgrading: bool,
    pub unavailable: bool,
    /// The ClusterClass carries [`names::ROLLOUT_RELEASE_ANNOTATION`] `"true"`.
    pub released: bool,
}

/// A hold, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    pub hold: Hold,
    pub message: String,
    /// When it ends by itself (a soak).
    pub until: Option<Timestamp>,
}

/// The hold of a Cluster of `wave` in `class`, if any: its own reasons first, then the first
/// earlier wave of its class that fails (at least `failingClusters`), rolls out, or soaks.
pub fn hold(
    rollout: &Rollout,
    class: &str,
    wave: usize,
    facts: &Facts,
    gates: &Gates,
    now: Timestamp,
) -> Option<Held> {
    let held = |hold, message: String| Held {
        hold,
        message,
        until: None,
    };
    if let Some(why) = &facts.manual {
        return Some(held(
            Hold::Manual,
            format!(
                "held by annotation {}: {why}",
                names::ROLLOUT_HOLD_ANNOTATION
            ),
        ));
    }
    if facts.upgrading {
        return Some(held(
            Hold::Upgrading,
            "a Kubernetes upgrade is under way".into(),
        ));
    }
    if facts.unavailable {
        return Some(held(
            Hold::Unavailable,
            "Cluster API reports the Cluster not Available".into(),
        ));
    }
    let name = &rollout.waves[wave];
    for earlier in &rollout.waves[..wave] {
        let Some(gate) = gates.get(&(class.to_string(), earlier.clone())) else {
            continue;
        };
        let waits = format!("wave {name} waits for {earlier}");
        // Messages name no count: they are written to the Fleet Cluster.
        if gate.failing >= rollout.failing_clusters {
            let n = rollout.failing_clusters;
            let message = format!("{waits}: at least {n} of its clusters have failing bundles");
            return Some(held(Hold::WaveFailing, message));
        }
        if gate.rolling + gate.failing > 0 {
            return Some(held(Hold::Soaking, format!("{waits}: it is rolling out")));
        }
        if let Some(until) = gate.soak_until.filter(|u| *u > now && !facts.released) {
            let message = format!(
                "{waits}: soaking until {}",
                until.strftime("%Y-%m-%dT%H:%M:%SZ")
            );
            return Some(Held {
                hold: Hold::Soaking,
                message,
                until: Some(until),
            });
        }
    }
    None
}

/// A Cluster's own [`Facts`]: the manual hold annotation (the Cluster's, else its class's
/// `class_annotations`), whether an upgrade step the hooks recorded is in progress
/// (`upgrade_in_progress`) that Cluster API has not finished, its `Available` condition
/// (`status`), and the class's release annotation.
pub fn facts(
    view: &ClusterView,
    class_annotations: Option<&StringMap>,
    status: Option<&Value>,
    upgrade_in_progress: bool,
) -> Facts {
    let on_class = |key: &str| class_annotations.and_then(|a| a.get(key));
    Facts {
        manual: view
            .annotations
            .get(names::ROLLOUT_HOLD_ANNOTATION)
            .or_else(|| on_class(names::ROLLOUT_HOLD_ANNOTATION))
            .cloned(),
        upgrading: upgrade_in_progress && !view.topology_settled,
        unavailable: unavailable(status),
        released: on_class(names::ROLLOUT_RELEASE_ANNOTATION).is_some_and(|v| v == "true"),
    }
}

/// What waves put on one Fleet Cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Shown {
    pub held: Option<Held>,
    /// Values that make no label (Warning Events).
    pub problems: Vec<String>,
}

/// Puts the variable labels, the wave label and (while held) the hold label and its message on
/// the `desired` Fleet Cluster of `view`.
pub fn show(
    desired: &mut FleetCluster,
    view: &ClusterView,
    variables: &[String],
    rollout: Option<&Rollout>,
    facts: &Facts,
    gates: &Gates,
    now: Timestamp,
) -> Shown {
    let (extra, mut problems) = variable_labels(variables, &view.variables);
    let labels = desired.metadata.labels.get_or_insert_default();
    labels.extend(extra);
    let Some(rollout) = rollout else {
        return Shown {
            held: None,
            problems,
        };
    };
    let (wave, problem) = rollout.wave_of(view);
    problems.extend(problem);
    labels.insert(
        names::ROLLOUT_WAVE_LABEL.into(),
        rollout.waves[wave].clone(),
    );
    let held = hold(rollout, &class_key(view), wave, facts, gates, now);
    if let Some(held) = &held {
        labels.insert(names::ROLLOUT_HOLD_LABEL.into(), held.hold.as_str().into());
        let annotations = desired.metadata.annotations.get_or_insert_default();
        annotations.insert(
            names::ROLLOUT_HOLD_MESSAGE_ANNOTATION.into(),
            held.message.clone(),
        );
    }
    Shown { held, problems }
}

/// Bundles named per wave in `status.rollout.waves[].rolling`.
pub const MAX_ROLLING_NAMED: usize = 10;

/// The imported Clusters counted by wave, as their Fleet Clusters show them (labels and
/// `status.summary`): what the later waves wait for ([`Tally::gates`]), `status.rollout.waves`
/// and the held counts by reason.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tally {
    pub gates: Gates,
    pub waves: BTreeMap<String, WaveStatus>,
    pub held: BTreeMap<&'static str, i64>,
}

impl Tally {
    /// Counts one imported Cluster of `class` by its Fleet Cluster `live`.
    pub fn add(&mut self, class: String, live: &FleetCluster) {
        let labels = live.metadata.labels.as_ref();
        let Some(wave) = labels.and_then(|l| l.get(names::ROLLOUT_WAVE_LABEL)) else {
            return;
        };
        let held = labels.and_then(|l| l.get(names::ROLLOUT_HOLD_LABEL));
        let status = live.status.as_ref();
        let gate = self.gates.entry((class, wave.clone())).or_default();
        let entry = self
            .waves
            .entry(wave.clone())
            .or_insert_with(|| WaveStatus {
                name: wave.clone(),
                ..WaveStatus::default()
            });
        entry.clusters += 1;
        match progress(status) {
            Progress::Ready => entry.ready += 1,
            Progress::Rolling => gate.rolling += 1,
            Progress::Failing => gate.failing += 1,
        }
        if let Some(held) = held {
            entry.held += 1;
            let reason = Hold::ALL.into_iter().find(|h| h.as_str() == held);
            *self
                .held
                .entry(reason.map_or("Other", Hold::as_str))
                .or_default() += 1;
        }
        let summary = status.and_then(|s| s.summary.as_ref());
        let resources = summary.and_then(|s| s.non_ready_resources.as_ref());
        for name in resources
            .into_iter()
            .flatten()
            .filter_map(|r| r.name.as_ref())
        {
            if entry.rolling.len() < MAX_ROLLING_NAMED && !entry.rolling.contains(name) {
                entry.rolling.push(name.clone());
            }
        }
    }

    /// `status.rollout`: the configured waves in order, and the soaks of `gates` under way.
    pub fn status(&self, rollout: &Rollout, gates: &Gates) -> RolloutStatus {
        let waves = rollout.waves.iter().map(|name| {
            let found = self.waves.get(name).cloned();
            found.unwrap_or_else(|| WaveStatus {
                name: name.clone(),
                ..WaveStatus::default()
            })
        });
        let soaks = gates.iter().filter_map(|((class, wave), gate)| {
            Some(SoakStatus {
                class: class.clone(),
                wave: wave.clone(),
                until: gate.soak_until?.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
            })
        });
        RolloutStatus {
            waves: waves.collect(),
            soaks: soaks.collect(),
        }
    }
}

/// The soaks `status.rollout.soaks` kept across a restart, as gates.
pub fn soaks(status: &RolloutStatus) -> Gates {
    let soak = |s: &SoakStatus| {
        let until = s.until.parse::<Timestamp>().ok()?;
        let gate = WaveGate {
            soak_until: Some(until),
            ..WaveGate::default()
        };
        Some(((s.class.clone(), s.wave.clone()), gate))
    };
    status.soaks.iter().filter_map(soak).collect()
}

/// The `rolloutStrategy` for `rollout`'s waves, with the traps as comments: one partition per
/// wave without held clusters, a catch-all, and the held clusters last with `maxUnavailable: 0`.
pub fn rollout_strategy(rollout: &Rollout) -> String {
    let (wave, hold) = (names::ROLLOUT_WAVE_LABEL, names::ROLLOUT_HOLD_LABEL);
    let mut out = String::from(
        "# rolloutStrategy for fleet.yaml or a HelmOp's spec, from spec.cluster.rollout (caapf rollout-strategy).\n\
         # Fleet walks the partitions in order and stops at the first unavailable one\n\
         # (maxUnavailablePartitions: 0): a partition gates the next only while it has more clusters\n\
         # not up to date than its maxUnavailable. A wave of one cluster gates nothing: the walk that\n\
         # updates it also updates the first cluster of the next wave, before caapf can hold that wave.\n\
         # A cluster no partition selects is never updated: keep the catch-all. Fleet v0.12 puts\n\
         # in a partition only clusters that are in some ClusterGroup.\n\
         rolloutStrategy:\n  maxUnavailablePartitions: 0\n  partitions:\n",
    );
    // Quoted: Fleet reads YAML 1.1, where a wave `1` or `no` is a number or a boolean.
    let quoted: Vec<String> = rollout.waves.iter().map(|w| format!("{w:?}")).collect();
    for name in &quoted {
        out.push_str(&format!(
            "  - name: {name}\n    maxUnavailable: 10%\n    clusterSelector:\n      matchLabels:\n        {wave}: {name}\n      matchExpressions:\n      - {{key: {hold}, operator: DoesNotExist}}\n"
        ));
    }
    let waves = quoted.join(", ");
    out.push_str(&format!(
        "  # Clusters of no wave (not ours, or without the label yet).\n\
         \x20 - name: other\n    clusterSelector:\n      matchExpressions:\n      - {{key: {wave}, operator: NotIn, values: [{waves}]}}\n      - {{key: {hold}, operator: DoesNotExist}}\n\
         \x20 # maxUnavailable: 0 freezes healthy clusters; new and broken ones still get the new version.\n\
         \x20 - name: held\n    maxUnavailable: 0\n    clusterSelector:\n      matchExpressions:\n      - {{key: {hold}, operator: Exists}}\n"
    ));
    out
}

#[cfg(test)]
mod tests;
