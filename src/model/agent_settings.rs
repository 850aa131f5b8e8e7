//! The Fleet agent settings of each Cluster: layers from the most general to the most specific,
//! merged into the agent fields of its Fleet Cluster. The runtime extension renders the first-boot
//! agent from the same Fleet Cluster spec ([`crate::model::hook_plan`]), so Fleet's takeover
//! changes nothing (docs/agent-settings.md).
//!
//! Layers, lowest first:
//! 1. the FleetAddonConfig's `spec.cluster` agent fields, with this provider's defaults;
//! 2. the `fleet.addons.cluster.x-k8s.io/agent-settings` annotation of the Cluster's ClusterClass;
//! 3. each `spec.cluster.agentOverrides` entry whose selector matches the Cluster's labels, in
//!    list order;
//! 4. the same annotation on the Cluster.
//!
//! A layer's absent field leaves the value below. `agentEnvVars` merge by `name` and
//! `agentTolerations` by `key`, `operator`, `value` and `effect`, what makes two tolerations
//! tolerate different taints (a later entry replaces an earlier one in place, a
//! new one is appended), so a layer adds a variable or a toleration without repeating the
//! defaults; every other field is replaced whole, as Fleet replaces its defaults by them.
//!
//! The fields are Fleet's `Cluster` spec fields of the same name (rancher/fleet
//! `pkg/apis/fleet.cattle.io/v1alpha1/cluster_types.go`): all of them exist in v0.12–v0.16
//! except `agentSchedulingCustomization` (v0.14.0 and later). Fleet 0.16's `agentPullSecrets` is
//! not offered: the Fleet types this provider reads and writes Fleet Clusters with
//! (`fleet-api-rs` 0.15.2) lack it, so it would be dropped from every cached Fleet Cluster.

use std::collections::BTreeMap;

use fleet_api_rs::fleet_cluster::{ClusterAgentEnvVars, ClusterAgentTolerations};
use kube::core::{Selector, SelectorExt};
use serde_json::Value;

use crate::api::{AgentOverride, AgentSettings};
use crate::model::validation::{FieldError, validate_agent_settings};
use crate::names::AGENT_SETTINGS_ANNOTATION;

/// The field path of the annotation's value, prefix of every problem found in it.
pub fn annotation_path() -> String {
    format!("metadata.annotations[{AGENT_SETTINGS_ANNOTATION}]")
}

/// Reads an `agent-settings` annotation: YAML or JSON, an object of [`AgentSettings`] fields.
/// Unknown fields (a misspelt `agentToleration`, a toleration's `efect`) are errors rather than
/// silently dropped, and every value is checked ([`validate_agent_settings`]). Errors carry the annotation's
/// field path.
pub fn parse_annotation(text: &str) -> Result<AgentSettings, Vec<FieldError>> {
    let path = annotation_path();
    let value: Value = match serde_yaml::from_str(text) {
        Ok(value) => value,
        Err(err) => {
            return Err(vec![FieldError::new(
                path,
                format!("is not YAML or JSON: {}", one_line(&err.to_string())),
            )]);
        }
    };
    let Value::Object(fields) = &value else {
        return Err(vec![FieldError::new(
            path,
            "must be an object of Fleet agent settings, e.g. {\"agentTolerations\": [...]}",
        )]);
    };
    let mut errors = Vec::new();
    // Decoded field by field, so a type error names its field.
    let mut settings = AgentSettings::default();
    for (name, field) in fields {
        let one = Value::Object(serde_json::Map::from_iter([(name.clone(), field.clone())]));
        match serde_json::from_value::<AgentSettings>(one) {
            Ok(decoded) => settings = merge_fields(settings, decoded),
            Err(err) => errors.push(FieldError::new(
                format!("{path}.{name}"),
                one_line(&err.to_string()),
            )),
        }
    }
    if errors.is_empty() {
        let known = serde_json::to_value(&settings).unwrap_or(Value::Null);
        unknown_fields(&value, &known, &path, &mut errors);
    }
    errors.extend(validate_agent_settings(&settings, &path));
    if errors.is_empty() {
        Ok(settings)
    } else {
        Err(errors)
    }
}

/// Copies the fields `over` sets onto `base` (no merging of lists: one field per call).
fn merge_fields(mut base: AgentSettings, over: AgentSettings) -> AgentSettings {
    macro_rules! take {
        ($($field:ident),*) => { $( if over.$field.is_some() { base.$field = over.$field; } )* };
    }
    take!(
        agent_namespace,
        agent_tolerations,
        agent_env_vars,
        host_network,
        agent_affinity,
        agent_resources,
        agent_scheduling_customization,
        private_repo_url
    );
    base
}

/// Keys of `input` (not null) that decoding dropped: present in `input`, absent in `known` (the
/// decoded value written back).
fn unknown_fields(input: &Value, known: &Value, path: &str, errors: &mut Vec<FieldError>) {
    match (input, known) {
        (Value::Object(input), Value::Object(known)) => {
            for (key, value) in input {
                let field = format!("{path}.{key}");
                match known.get(key) {
                    None if !value.is_null() => errors.push(FieldError::new(
                        field,
                        "unknown field (the Fleet Cluster agent fields are agentNamespace, agentTolerations, agentEnvVars, hostNetwork, agentAffinity, agentResources, agentSchedulingCustomization and privateRepoURL, with their Kubernetes field names)",
                    )),
                    None => {}
                    Some(known) => unknown_fields(value, known, &field, errors),
                }
            }
        }
        (Value::Array(input), Value::Array(known)) => {
            for (i, (value, known)) in input.iter().zip(known).enumerate() {
                unknown_fields(value, known, &format!("{path}[{i}]"), errors);
            }
        }
        _ => {}
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `over` applied on `base`: the fields `over` sets replace `base`'s, except environment variables
/// (merged by name) and tolerations (merged by key, operator, value and effect; an absent operator
/// is `Equal` and an absent value empty, as the API server reads them).
pub fn merge(base: &AgentSettings, over: &AgentSettings) -> AgentSettings {
    let mut merged = merge_fields(base.clone(), over.clone());
    if let (Some(base), Some(over)) = (&base.agent_env_vars, &over.agent_env_vars) {
        merged.agent_env_vars = Some(merge_by(base, over, |v: &ClusterAgentEnvVars| {
            v.name.clone()
        }));
    }
    if let (Some(base), Some(over)) = (&base.agent_tolerations, &over.agent_tolerations) {
        merged.agent_tolerations = Some(merge_by(base, over, |t: &ClusterAgentTolerations| {
            let text = |v: &Option<String>| v.clone().unwrap_or_default();
            let operator = t.operator.clone().unwrap_or_else(|| "Equal".to_string());
            (text(&t.key), operator, text(&t.value), text(&t.effect))
        }));
    }
    merged
}

/// `base` with each item of `over` replacing the item of the same identity in place, or
/// appended.
fn merge_by<T: Clone, K: PartialEq>(base: &[T], over: &[T], identity: impl Fn(&T) -> K) -> Vec<T> {
    let mut merged = base.to_vec();
    for item in over {
        let id = identity(item);
        match merged.iter_mut().find(|existing| identity(existing) == id) {
            Some(existing) => *existing = item.clone(),
            None => merged.push(item.clone()),
        }
    }
    merged
}

/// The reason of the Warning Events that report invalid agent settings.
pub const INVALID_REASON: &str = "InvalidAgentSettings";

/// Where a layer of a Cluster's agent settings comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Carrier {
    /// The annotation of the ClusterClass `namespace/name`.
    ClusterClass { namespace: String, name: String },
    /// The annotation of the Cluster itself.
    Cluster,
}

/// A problem in one of a Cluster's layers, reported on the object that carries it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerProblem {
    pub carrier: Carrier,
    pub error: FieldError,
}

impl std::fmt::Display for LayerProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.carrier {
            Carrier::ClusterClass { namespace, name } => {
                write!(f, "ClusterClass {namespace}/{name} {}", self.error)
            }
            Carrier::Cluster => write!(f, "Cluster {}", self.error),
        }
    }
}

/// An `agentOverrides` entry with its selector compiled. A selector that does not compile matches
/// nothing (the configuration's validation reports it, and holds the import meanwhile).
#[derive(Clone, Debug, PartialEq)]
pub struct CompiledOverride {
    selector: Option<Selector>,
    pub settings: AgentSettings,
}

impl CompiledOverride {
    pub fn compile(entry: &AgentOverride) -> Self {
        Self {
            selector: Selector::try_from(entry.selector.clone()).ok(),
            settings: entry.settings.clone(),
        }
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.selector
            .as_ref()
            .is_some_and(|selector| selector.matches(labels))
    }
}

/// What a Cluster's agent settings are resolved from.
#[derive(Clone, Copy, Debug)]
pub struct Layers<'a> {
    /// The FleetAddonConfig's settings, defaults applied.
    pub defaults: &'a AgentSettings,
    /// The Cluster's ClusterClass (namespace, name) and its annotation, if it has one.
    pub class: Option<(&'a str, &'a str, Option<&'a str>)>,
    pub overrides: &'a [CompiledOverride],
    pub cluster_labels: &'a BTreeMap<String, String>,
    pub cluster_annotation: Option<&'a str>,
}

/// A Cluster's agent settings, or every problem in its annotations (then nothing of them
/// applies: the caller leaves the Fleet Cluster as it is).
pub fn resolve(layers: Layers<'_>) -> Result<AgentSettings, Vec<LayerProblem>> {
    let mut problems = Vec::new();
    let mut parse = |text: Option<&str>, carrier: Carrier| match text.map(parse_annotation) {
        None => None,
        Some(Ok(settings)) => Some(settings),
        Some(Err(errors)) => {
            problems.extend(errors.into_iter().map(|error| LayerProblem {
                carrier: carrier.clone(),
                error,
            }));
            None
        }
    };
    let class = layers.class.and_then(|(namespace, name, text)| {
        parse(
            text,
            Carrier::ClusterClass {
                namespace: namespace.to_string(),
                name: name.to_string(),
            },
        )
    });
    let own = parse(layers.cluster_annotation, Carrier::Cluster);
    if !problems.is_empty() {
        return Err(problems);
    }
    let mut settings = layers.defaults.clone();
    if let Some(class) = &class {
        settings = merge(&settings, class);
    }
    for entry in layers.overrides {
        if entry.matches(layers.cluster_labels) {
            settings = merge(&settings, &entry.settings);
        }
    }
    if let Some(own) = &own {
        settings = merge(&settings, own);
    }
    Ok(settings)
}

/// The Fleet features a resolved setting needs, by the installed Fleet's minor: the fields Fleet's
/// `Cluster` CRD lacks before that minor (the API server would drop them, and every reconcile
/// would try to write them again). Returns the field names that the installed minor lacks.
pub fn unsupported_fields(settings: &AgentSettings, fleet_minor: Option<u64>) -> Vec<&'static str> {
    let Some(minor) = fleet_minor else {
        return Vec::new();
    };
    let mut fields = Vec::new();
    if settings.agent_scheduling_customization.is_some() && minor < 14 {
        fields.push("agentSchedulingCustomization (Fleet 0.14 and later)");
    }
    fields
}

#[cfg(test)]
#[path = "agent_settings_tests.rs"]
mod tests;
