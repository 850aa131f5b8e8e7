//! Which CAPI Clusters are imported, and which of them register agent-initiated.
//!
//! Rule: each rule that is set — a non-empty `selector` (Cluster labels), a non-empty
//! `namespaceSelector` (namespace labels), a non-empty `namespaceRegexes` (namespace name, fully
//! matched) — selects the Clusters it matches, and the results are OR-ed. When no rule is set,
//! every Cluster is selected.
//!
//! Difference from CAAPF: CAAPF ORs its two selectors and treats an empty selector as "match
//! everything", so `selector: {}` with a non-empty `namespaceSelector` imports every Cluster.
//! Here an empty selector is "not set", so only Clusters in matching namespaces are imported.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt};
use regex::Regex;

use crate::api::ClusterConfig;
use crate::model::validation::compile_anchored;

/// What a manager watches (`--namespace`, `--watch-filter`): `None` for all.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchScope {
    pub namespace: Option<String>,
    /// Clusters must carry `cluster.x-k8s.io/watch-filter` with this value.
    pub filter_label: Option<String>,
}

impl WatchScope {
    /// From `--namespace` and `--watch-filter` (`None` or empty: all).
    pub fn new(namespace: Option<&str>, filter_label: Option<&str>) -> Self {
        let set = |value: Option<&str>| value.filter(|v| !v.is_empty()).map(str::to_string);
        WatchScope {
            namespace: set(namespace),
            filter_label: set(filter_label),
        }
    }
}

/// Labels of an object (an absent map is empty).
pub type Labels = BTreeMap<String, String>;

/// The compiled selection rules of `spec.cluster`. A rule that does not compile stays set but
/// matches nothing, so a typo never widens the selection; callers learn about it from
/// [`crate::model::validation::validate`].
#[derive(Clone, Debug, Default)]
pub struct ClusterSelection {
    cluster_labels: Option<LabelRule>,
    namespace_labels: Option<LabelRule>,
    /// `None`: rule not set. Patterns that do not compile are left out of the list.
    namespace_regexes: Option<Vec<Regex>>,
}

/// A set label-selector rule.
#[derive(Clone, Debug, PartialEq)]
enum LabelRule {
    Valid(Selector),
    /// Did not compile: matches nothing.
    Invalid,
}

impl LabelRule {
    fn matches(&self, labels: &Labels) -> bool {
        match self {
            Self::Valid(selector) => selector.matches(labels),
            Self::Invalid => false,
        }
    }
}

impl PartialEq for ClusterSelection {
    fn eq(&self, other: &Self) -> bool {
        let patterns = |s: &Self| {
            s.namespace_regexes.as_ref().map(|res| {
                res.iter()
                    .map(|re| re.as_str().to_string())
                    .collect::<Vec<_>>()
            })
        };
        self.cluster_labels == other.cluster_labels
            && self.namespace_labels == other.namespace_labels
            && patterns(self) == patterns(other)
    }
}

/// What selection looks at for one Cluster.
#[derive(Clone, Copy, Debug)]
pub struct ClusterFacts<'a> {
    pub labels: &'a Labels,
    pub namespace: &'a str,
    /// Labels of the Cluster's namespace; empty when the namespace is not known.
    pub namespace_labels: &'a Labels,
}

impl ClusterSelection {
    /// Compiles the rules of `config`.
    pub fn compile(config: &ClusterConfig) -> Self {
        Self {
            cluster_labels: compile_rule(config.selector.as_ref()),
            namespace_labels: compile_rule(config.namespace_selector.as_ref()),
            namespace_regexes: config
                .namespace_regexes
                .as_ref()
                .filter(|patterns| !patterns.is_empty())
                .map(|patterns| {
                    patterns
                        .iter()
                        .filter_map(|pattern| compile_anchored(pattern).ok())
                        .collect()
                }),
        }
    }

    /// Selects every Cluster.
    pub fn everything() -> Self {
        Self::default()
    }

    /// Whether no rule is set (so every Cluster is selected).
    pub fn selects_everything(&self) -> bool {
        self.cluster_labels.is_none()
            && self.namespace_labels.is_none()
            && self.namespace_regexes.is_none()
    }

    /// Applies the rule to one Cluster.
    pub fn selects(&self, cluster: ClusterFacts<'_>) -> bool {
        if self.selects_everything() {
            return true;
        }
        self.cluster_labels
            .as_ref()
            .is_some_and(|rule| rule.matches(cluster.labels))
            || self
                .namespace_labels
                .as_ref()
                .is_some_and(|rule| rule.matches(cluster.namespace_labels))
            || self
                .namespace_regexes
                .iter()
                .flatten()
                .any(|re| re.is_match(cluster.namespace))
    }
}

/// Which selected Clusters register with Fleet agent-initiated.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum AgentInitiated {
    /// None of them (manager-initiated through the CAPI kubeconfig Secret).
    #[default]
    None,
    /// All of them (`agentInitiated: true`).
    All,
    /// Those whose labels match (`agentInitiatedSelector`).
    Matching(Selector),
}

impl AgentInitiated {
    pub fn compile(config: &ClusterConfig) -> Self {
        if config.agent_initiated == Some(true) {
            return Self::All;
        }
        match compile_rule(config.agent_initiated_selector.as_ref()) {
            Some(LabelRule::Valid(selector)) => Self::Matching(selector),
            Some(LabelRule::Invalid) | None => Self::None,
        }
    }

    /// Whether a selected Cluster with these labels registers agent-initiated.
    pub fn applies_to(&self, cluster_labels: &Labels) -> bool {
        match self {
            Self::None => false,
            Self::All => true,
            Self::Matching(selector) => selector.matches(cluster_labels),
        }
    }
}

/// Whether `selector` has neither `matchLabels` nor `matchExpressions` (such a selector is "not
/// set").
pub fn is_empty_selector(selector: &LabelSelector) -> bool {
    selector.match_labels.as_ref().is_none_or(|m| m.is_empty())
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(|e| e.is_empty())
}

/// An empty or absent selector is "not set"; one that does not compile is [`LabelRule::Invalid`].
fn compile_rule(selector: Option<&LabelSelector>) -> Option<LabelRule> {
    let selector = selector?;
    if is_empty_selector(selector) {
        return None;
    }
    let mut errors = Vec::new();
    crate::model::validation::validate_label_selector(selector, "", &mut errors);
    let compiled = errors
        .is_empty()
        .then(|| Selector::try_from(selector.clone()).ok())
        .flatten();
    Some(compiled.map_or(LabelRule::Invalid, LabelRule::Valid))
}
