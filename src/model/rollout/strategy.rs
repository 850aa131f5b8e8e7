//! The `rolloutStrategy` users run, seen from our side: what `caapf rollout-strategy` prints for
//! a FleetAddonConfig ([`for_config`]), and the lint of the strategies Bundles carry ([`lint`]),
//! over the clusters a Bundle targets ([`BundleTargets`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::core::{Selector, SelectorExt};
use serde_json::Value;

use super::rollout_strategy;
use super::walk::{Strategy, limit};
use crate::api::FleetAddonConfig;
use crate::model::config::EffectiveConfig;
use crate::names;

/// Labels by key.
pub type Labels = BTreeMap<String, String>;

/// What `caapf rollout-strategy` prints for `config` (`None`: there is none), or why it cannot:
/// `spec.cluster.rollout` is not set, or `spec.cluster` has problems (the provider writes no
/// wave labels then), each with its field path.
pub fn for_config(config: Option<&FleetAddonConfig>) -> Result<String, String> {
    let unset = "spec.cluster.rollout is not set: name the waves there first (docs/rollout.md)";
    let Some(config) = config else {
        return Err(format!("no FleetAddonConfig: {unset}"));
    };
    let name = config.metadata.name.as_deref().unwrap_or_default();
    let effective = EffectiveConfig::from_spec(&config.spec);
    let problems: Vec<String> = (effective.problems_under("spec.cluster"))
        .map(|p| format!("\n  {p}"))
        .collect();
    if !problems.is_empty() {
        return Err(format!(
            "FleetAddonConfig {name} is invalid (the provider writes no wave labels until it is fixed):{}",
            problems.concat()
        ));
    }
    match effective.cluster.and_then(|c| c.rollout) {
        Some(rollout) => Ok(rollout_strategy(&rollout)),
        None => Err(format!("FleetAddonConfig {name}: {unset}")),
    }
}

/// Fleet's cluster matcher (rancher/fleet v0.16.1 `internal/cmd/controller/target/matcher/
/// clustermatcher.go`): every criterion set must hold; none set matches nothing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Criteria {
    pub name: Option<String>,
    pub group: Option<String>,
    pub group_selector: Option<Selector>,
    pub selector: Option<Selector>,
}

impl Criteria {
    /// From a `BundleTarget` (`clusterName`, `clusterGroup`, `clusterGroupSelector`,
    /// `clusterSelector`).
    pub fn from_json(target: &Value) -> Result<Self, String> {
        let text = |f: &str| {
            target
                .get(f)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        };
        let selector = |f: &str| -> Result<Option<Selector>, String> {
            let Some(v) = target.get(f).filter(|v| !v.is_null()) else {
                return Ok(None);
            };
            let s: LabelSelector =
                serde_json::from_value(v.clone()).map_err(|e| format!("{f}: {e}"))?;
            Selector::try_from(s)
                .map(Some)
                .map_err(|e| format!("{f}: {e}"))
        };
        Ok(Criteria {
            name: text("clusterName").map(str::to_string),
            group: text("clusterGroup").map(str::to_string),
            group_selector: selector("clusterGroupSelector")?,
            selector: selector("clusterSelector")?,
        })
    }

    /// `ClusterMatcher.Match`, tried with each of the cluster's groups (`name`, labels), or
    /// with none when it is in no group (`bundlematch.go` `match`).
    pub fn matches(&self, cluster: &str, labels: &Labels, groups: &[(String, Labels)]) -> bool {
        let none = [(String::new(), Labels::new())];
        let groups = if groups.is_empty() { &none[..] } else { groups };
        let display = labels.get("management.cattle.io/cluster-display-name");
        let set = self.name.is_some()
            || self.group.is_some()
            || self.group_selector.is_some()
            || self.selector.is_some();
        set && groups.iter().any(|(group, group_labels)| {
            self.name
                .as_ref()
                .is_none_or(|n| n == cluster || Some(n) == display)
                && self.group.as_ref().is_none_or(|g| g == group)
                && (self.group_selector.as_ref()).is_none_or(|s| s.matches(group_labels))
                && self.selector.as_ref().is_none_or(|s| s.matches(labels))
        })
    }
}

/// Which clusters of its namespace a Bundle deploys to (`builder.go` `Targets`, `bundlematch.go`
/// `Match`): the first of its `spec.targets` that matches, unless it says `doNotDeploy`. When
/// the Bundle has `targetRestrictions` (a GitRepo's or HelmOp's), its first targets are
/// fleet.yaml's `targetCustomizations`, which select nothing. BundleNamespaceMappings (clusters
/// of other namespaces) are not followed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BundleTargets(Vec<(Criteria, bool)>);

impl BundleTargets {
    /// From a Bundle's `spec`.
    pub fn from_spec(spec: &Value) -> Result<Self, String> {
        let list = |f: &str| {
            spec.get(f)
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        let (targets, restrictions) = (list("targets"), list("targetRestrictions"));
        let customizations = match restrictions.len() {
            0 => 0,
            n => targets.len().saturating_sub(n),
        };
        let targets = targets[customizations..].iter().map(|t| {
            let skip = t.get("doNotDeploy").and_then(Value::as_bool) == Some(true);
            Criteria::from_json(t).map(|c| (c, skip))
        });
        targets.collect::<Result<_, _>>().map(BundleTargets)
    }

    pub fn deploys_to(&self, cluster: &str, labels: &Labels, groups: &[(String, Labels)]) -> bool {
        let first = self
            .0
            .iter()
            .find(|(c, _)| c.matches(cluster, labels, groups));
        first.is_some_and(|(_, skip)| !skip)
    }
}

/// What the lint controller read of one Bundle generation, and the findings it published for it.
#[derive(Default)]
pub struct Linted {
    pub generation: Option<i64>,
    pub read: Option<Result<(Strategy, BundleTargets), String>>,
    pub published: BTreeSet<String>,
}

/// The lint's memory, by Bundle UID.
pub type LintMemory = Mutex<HashMap<String, Linted>>;

/// The findings of the lint on a Bundle's `strategy` over the Fleet Clusters we own that it
/// deploys to (`clusters`: name and labels), each a sentence: a partition that cannot gate
/// (no more clusters than its `maxUnavailable`, as Fleet's `limit` computes it) while a later
/// partition has clusters it would hold; `maxUnavailable: 0` on a partition whose selector does
/// not require the hold label; clusters no partition selects. A strategy without partitions
/// (Fleet's automatic ones) does not use our waves: no findings.
/// Each finding comes with its kind (`CannotGate`, `FrozenPartition`, `UnmatchedClusters`).
pub fn lint(
    strategy: &Strategy,
    clusters: &[(String, Labels)],
) -> Result<Vec<(&'static str, String)>, String> {
    let hold = names::ROLLOUT_HOLD_LABEL;
    let mut members = Vec::new();
    for p in &strategy.partitions {
        let selector = Selector::try_from(p.selector.clone()).map_err(|e| e.to_string())?;
        let matched: Vec<&String> = (clusters.iter())
            .filter(|(_, labels)| selector.matches(labels))
            .map(|(name, _)| name)
            .collect();
        let max = [
            p.max_unavailable.as_ref(),
            strategy.max_unavailable.as_ref(),
        ];
        members.push((matched.len(), limit(matched.len(), &max)?));
    }
    let mut findings = Vec::new();
    for (i, p) in strategy.partitions.iter().enumerate() {
        let (count, max) = members[i];
        let later = members[i + 1..].iter().any(|&(n, max)| n > 0 && max > 0);
        if count > 0 && count <= max && later {
            findings.push(("CannotGate", format!("partition {:?} cannot gate: its {count} cluster(s) are no more than its maxUnavailable ({max}), so Fleet updates the next partition in the same pass; make it larger than its maxUnavailable", p.name)));
        }
        let zero = p
            .max_unavailable
            .as_ref()
            .or(strategy.max_unavailable.as_ref());
        let requires_hold = p
            .selector
            .match_labels
            .iter()
            .flatten()
            .any(|(k, _)| k == hold)
            || (p.selector.match_expressions.iter().flatten())
                .any(|e| e.key == hold && matches!(&*e.operator, "Exists" | "In"));
        if zero == Some(&IntOrString::Int(0)) && !requires_hold {
            findings.push(("FrozenPartition", format!("partition {:?} has maxUnavailable: 0 but does not select on {hold}: Fleet never updates its healthy clusters; use 0 only for the held partition", p.name)));
        }
    }
    let selectors: Vec<Selector> = (strategy.partitions.iter())
        .filter_map(|p| Selector::try_from(p.selector.clone()).ok())
        .collect();
    let unmatched: Vec<&str> = (clusters.iter())
        .filter(|(_, labels)| !selectors.iter().any(|s| s.matches(labels)))
        .map(|(name, _)| name.as_str())
        .collect();
    if !strategy.partitions.is_empty() && !unmatched.is_empty() {
        let shown = unmatched
            .iter()
            .take(5)
            .copied()
            .collect::<Vec<_>>()
            .join(", ");
        let more = unmatched.len().saturating_sub(5);
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        findings.push(("UnmatchedClusters", format!("{} Fleet Cluster(s) with rollout waves match no partition and are never updated (fleet #3828): {shown}{more}; keep a catch-all partition", unmatched.len())));
    }
    Ok(findings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::rollout::walk::{Deployment, Strategy, Target, walk};
    use crate::names;

    fn config(spec: &str) -> FleetAddonConfig {
        FleetAddonConfig::new(names::CONFIG_NAME, serde_yaml::from_str(spec).unwrap())
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (None, "no FleetAddonConfig: spec.cluster.rollout is not set"),
            (Some("cluster: {}"), "spec.cluster.rollout is not set"),
            (Some("{}"), "spec.cluster.rollout is not set"),
            (
                Some("cluster: {rollout: {waves: [a, A]}}"),
                "spec.cluster.rollout.waves[1]: ",
            ),
            (
                Some("cluster: {rollout: {waves: [a], soak: soon}}"),
                "spec.cluster.rollout.soak: ",
            ),
        ];
        for (spec, want) in cases {
            let config = spec.map(config);
            let err = for_config(config.as_ref()).unwrap_err();
            assert!(err.contains(want), "{spec:?}: {err}");
        }
    }

    /// The printed strategy as Fleet reads it: a canary wave walks first and holds the others.
    #[test]
    fn prints_a_strategy_the_walk_plays() {
        let spec = "cluster: {rollout: {waves: [canary, rest]}}";
        let text = for_config(Some(&config(spec))).unwrap();
        let yaml: serde_json::Value = serde_yaml::from_str(&text).unwrap();
        let strategy = Strategy::from_json(&yaml["rolloutStrategy"]).unwrap();
        let names: Vec<&str> = strategy.partitions.iter().map(|p| &*p.name).collect();
        assert_eq!(names, ["canary", "rest", "other", "held"]);
        let mut targets: Vec<Target> = ["canary", "canary", "rest", "rest"]
            .iter()
            .map(|w| Target {
                labels: [(names::ROLLOUT_WAVE_LABEL.to_string(), w.to_string())].into(),
                deployment: Some(Deployment {
                    deployment: "v1".into(),
                    staged: "v1".into(),
                    applied: "v1".into(),
                    ready: true,
                }),
                ..Target::default()
            })
            .collect();
        walk(&strategy, &mut targets, "v2").unwrap();
        let promoted: Vec<bool> = (targets.iter())
            .map(|t| t.deployment.as_ref().unwrap().deployment == "v2")
            .collect();
        assert_eq!(promoted, [true, false, false, false]);
    }
}

#[cfg(test)]
mod lint_tests {
    use super::*;
    use serde_json::json;

    fn cluster(name: &str, wave: &str, held: bool) -> (String, Labels) {
        let mut labels = Labels::from([(names::ROLLOUT_WAVE_LABEL.to_string(), wave.to_string())]);
        if held {
            labels.insert(names::ROLLOUT_HOLD_LABEL.into(), "Soaking".into());
        }
        (name.to_string(), labels)
    }

    fn printed() -> Strategy {
        let config = "cluster: {rollout: {waves: [canary, rest]}}";
        let config = FleetAddonConfig::new("c", serde_yaml::from_str(config).unwrap());
        let yaml: Value = serde_yaml::from_str(&for_config(Some(&config)).unwrap()).unwrap();
        Strategy::from_json(&yaml["rolloutStrategy"]).unwrap()
    }

    #[test]
    #[allow(clippy::type_complexity)]
    fn findings_by_case() {
        let held_zero = json!({"partitions": [
            {"name": "a", "clusterSelector": {"matchLabels": {"rollout-wave.fleet.addons.cluster.x-k8s.io": "canary"}}, "maxUnavailable": 0},
            {"name": "held", "maxUnavailable": 0, "clusterSelector": {"matchExpressions": [{"key": "rollout-hold.fleet.addons.cluster.x-k8s.io", "operator": "Exists"}]}}]});
        let only_canary = json!({"partitions": [
            {"name": "canary", "clusterSelector": {"matchLabels": {"rollout-wave.fleet.addons.cluster.x-k8s.io": "canary"}}, "maxUnavailable": 2}]});
        let canary = |n: usize| (0..n).map(|i| cluster(&format!("c{i}"), "canary", false));
        let rest = |n: usize| (0..n).map(|i| cluster(&format!("r{i}"), "rest", false));
        type Case<'a> = (&'a str, Strategy, Vec<(String, Labels)>, &'a [&'a str]);
        let cases: Vec<Case> = vec![
            (
                "printed, two canaries",
                printed(),
                canary(2).chain(rest(4)).collect(),
                &[],
            ),
            (
                "printed, one canary",
                printed(),
                canary(1).chain(rest(4)).collect(),
                &["partition \"canary\" cannot gate: its 1 cluster(s)"],
            ),
            (
                "printed, one canary, nothing after",
                printed(),
                canary(1).collect(),
                &[],
            ),
            (
                "printed, the rest held",
                printed(),
                canary(1).chain([cluster("r", "rest", true)]).collect(),
                &[],
            ),
            (
                "no partitions",
                Strategy::default(),
                canary(1).collect(),
                &[],
            ),
            (
                "zero outside the held",
                Strategy::from_json(&held_zero).unwrap(),
                canary(2).collect(),
                &["partition \"a\" has maxUnavailable: 0 but does not select on rollout-hold"],
            ),
            (
                "no catch-all",
                Strategy::from_json(&only_canary).unwrap(),
                canary(3).chain(rest(7)).collect(),
                &[
                    "7 Fleet Cluster(s) with rollout waves match no partition and are never updated (fleet #3828): r0, r1, r2, r3, r4 and 2 more",
                ],
            ),
        ];
        for (case, strategy, clusters, want) in cases {
            let found = lint(&strategy, &clusters).unwrap();
            assert_eq!(found.len(), want.len(), "{case}: {found:?}");
            for ((_, f), w) in found.iter().zip(want) {
                assert!(f.starts_with(w), "{case}: {f}");
            }
        }
    }

    #[test]
    fn bundle_targets_follow_fleets_matcher() {
        let labels = |env: &str| Labels::from([("env".to_string(), env.to_string())]);
        let groups = vec![("g1".to_string(), labels("grp"))];
        let spec = json!({
            "targets": [
                {"name": "custom", "clusterSelector": {}},
                {"clusterName": "skip", "doNotDeploy": true},
                {"clusterSelector": {"matchLabels": {"env": "prod"}}},
                {"clusterGroup": "g1"},
                {"name": "none"}],
            "targetRestrictions": [{}, {}, {}, {}]});
        let t = BundleTargets::from_spec(&spec).unwrap();
        let cases = [
            ("a", labels("prod"), vec![], true),
            ("skip", labels("prod"), vec![], false),
            ("b", labels("dev"), vec![], false),
            ("c", labels("dev"), groups.clone(), true),
        ];
        for (name, labels, groups, want) in cases {
            assert_eq!(t.deploys_to(name, &labels, &groups), want, "{name}");
        }
        // Without restrictions (a Bundle of its own) every target counts.
        let all = BundleTargets::from_spec(&json!({"targets": [{"clusterSelector": {}}]})).unwrap();
        assert!(all.deploys_to("x", &labels("dev"), &[]));
        let by_group =
            Criteria::from_json(&json!({"clusterGroupSelector": {"matchLabels": {"env": "grp"}}}))
                .unwrap();
        assert!(
            by_group.matches("x", &Labels::new(), &groups)
                && !by_group.matches("x", &Labels::new(), &[])
        );
    }
}
