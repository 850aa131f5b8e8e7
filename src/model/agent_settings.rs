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
//! `agentTolerations` by `key` and `effect` (a later entry replaces an earlier one in place, a
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

use crate::api::{AgentOverride, AgentSettings, ClusterConfig};
use crate::model::capi::ClusterView;
use crate::model::config::ClusterImport;
use crate::model::validation::{FieldError, is_dns1123_label};
use crate::names::AGENT_SETTINGS_ANNOTATION;

/// The field path of the annotation's value, prefix of every problem found in it.
pub fn annotation_path() -> String {
    format!("metadata.annotations[{AGENT_SETTINGS_ANNOTATION}]")
}

/// Reads an `agent-settings` annotation: YAML or JSON, an object of [`AgentSettings`] fields.
/// Unknown fields (a misspelt `agentToleration`, a toleration's `efect`) are errors rather than
/// silently dropped, and every value is checked ([`validate`]). Errors carry the annotation's
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
    errors.extend(validate(&settings, &path));
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

/// Every problem in one layer's values, with field paths under `path`. The rules are the API
/// server's for the Kubernetes types these fields end up in (k8s.io/api core/v1 `Toleration`,
/// `EnvVar`, `ResourceRequirements`, `NodeSelectorRequirement`; policy/v1
/// `PodDisruptionBudgetSpec`; scheduling/v1 `PriorityClass`) and Fleet's own
/// (`internal/cmd/controller/agentmanagement`): a value that passed here would otherwise fail on
/// the workload cluster, where nobody sees it.
pub fn validate(settings: &AgentSettings, path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if let Some(namespace) = &settings.agent_namespace
        && !is_dns1123_label(namespace)
    {
        errors.push(FieldError::new(
            format!("{path}.agentNamespace"),
            format!("{namespace:?} is not a valid namespace name (DNS-1123 label)"),
        ));
    }
    for (i, toleration) in settings.agent_tolerations.iter().flatten().enumerate() {
        validate_toleration(
            toleration,
            &format!("{path}.agentTolerations[{i}]"),
            &mut errors,
        );
    }
    let mut names = BTreeMap::new();
    for (i, var) in settings.agent_env_vars.iter().flatten().enumerate() {
        let p = format!("{path}.agentEnvVars[{i}]");
        if var.name.is_empty()
            || var.name.contains('=')
            || !var.name.chars().all(|c| c.is_ascii_graphic())
        {
            errors.push(FieldError::new(
                format!("{p}.name"),
                format!(
                    "{:?} must be printable ASCII without spaces or '='",
                    var.name
                ),
            ));
        }
        if let Some(first) = names.insert(var.name.as_str(), i) {
            errors.push(FieldError::new(
                format!("{p}.name"),
                format!("{:?} is already set by agentEnvVars[{first}]", var.name),
            ));
        }
        if var.value.is_some() && var.value_from.is_some() {
            errors.push(FieldError::new(
                format!("{p}.valueFrom"),
                "may not be set together with value",
            ));
        }
    }
    if let Some(url) = &settings.private_repo_url
        && (url.is_empty() || url.contains("://") || url.chars().any(char::is_whitespace))
    {
        // Fleet joins it before the image with path.Join (rancher/fleet v0.16.1
        // internal/cmd/controller/agentmanagement/agent/manifest.go Resolve): a scheme would
        // become part of the image name.
        errors.push(FieldError::new(
            format!("{path}.privateRepoURL"),
            format!("{url:?} must be a registry host with an optional port and path, without a scheme (e.g. registry.example.com:5000/mirror)"),
        ));
    }
    if let Some(resources) = &settings.agent_resources {
        validate_resources(resources, &format!("{path}.agentResources"), &mut errors);
    }
    if let Some(scheduling) = &settings.agent_scheduling_customization {
        validate_scheduling(
            scheduling,
            &format!("{path}.agentSchedulingCustomization"),
            &mut errors,
        );
    }
    if let Some(affinity) = &settings.agent_affinity {
        validate_affinity(affinity, &format!("{path}.agentAffinity"), &mut errors);
    }
    errors
}

fn validate_toleration(t: &ClusterAgentTolerations, p: &str, errors: &mut Vec<FieldError>) {
    let key = t.key.as_deref().unwrap_or_default();
    let operator = t.operator.as_deref().unwrap_or("Equal");
    let value = t.value.as_deref().unwrap_or_default();
    let effect = t.effect.as_deref().unwrap_or_default();
    if !matches!(operator, "Equal" | "Exists" | "") {
        errors.push(FieldError::new(
            format!("{p}.operator"),
            format!("{operator:?} is not a valid operator: use Equal or Exists"),
        ));
    }
    if key.is_empty() && operator != "Exists" {
        errors.push(FieldError::new(
            format!("{p}.operator"),
            "must be Exists when key is empty (that tolerates every taint)",
        ));
    }
    if operator == "Exists" && !value.is_empty() {
        errors.push(FieldError::new(
            format!("{p}.value"),
            "must be empty when operator is Exists",
        ));
    }
    if !matches!(effect, "" | "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
        errors.push(FieldError::new(
            format!("{p}.effect"),
            format!("{effect:?} is not a taint effect: use NoSchedule, PreferNoSchedule, NoExecute, or leave it empty for all"),
        ));
    }
    if t.toleration_seconds.is_some() && effect != "NoExecute" {
        errors.push(FieldError::new(
            format!("{p}.tolerationSeconds"),
            "is only allowed with effect NoExecute",
        ));
    }
}

/// A Kubernetes quantity (`resource.Quantity`): a signed decimal number with an optional binary
/// (Ki..Ei), decimal (n, u, m, k, M..E) or exponent (e3) suffix.
pub fn is_quantity(text: &str) -> bool {
    static QUANTITY: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(
            r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$",
        )
        .expect("valid pattern")
    });
    QUANTITY.is_match(text)
}

fn validate_resources(
    resources: &fleet_api_rs::fleet_cluster::ClusterAgentResources,
    p: &str,
    errors: &mut Vec<FieldError>,
) {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    for (name, list) in [
        ("limits", &resources.limits),
        ("requests", &resources.requests),
    ] {
        for (resource, quantity) in list.iter().flatten() {
            let ok = match quantity {
                IntOrString::Int(n) => *n >= 0,
                IntOrString::String(s) => is_quantity(s) && !s.starts_with('-'),
            };
            if !ok {
                errors.push(FieldError::new(
                    format!("{p}.{name}[{resource}]"),
                    format!("{quantity:?} is not a non-negative quantity (e.g. 100m, 128Mi)"),
                ));
            }
        }
    }
}

fn validate_scheduling(
    scheduling: &fleet_api_rs::fleet_cluster::ClusterAgentSchedulingCustomization,
    p: &str,
    errors: &mut Vec<FieldError>,
) {
    if let Some(budget) = &scheduling.pod_disruption_budget {
        // Fleet refuses both at once unless one is "0" (internal/cmd/controller/agentmanagement/
        // scheduling/scheduling.go PodDisruptionBudget, v0.14.0-v0.16.1): it creates no budget.
        let set = |v: &Option<String>| v.as_deref().is_some_and(|v| !v.is_empty() && v != "0");
        if set(&budget.min_available) && set(&budget.max_unavailable) {
            errors.push(FieldError::new(
                format!("{p}.podDisruptionBudget"),
                "set minAvailable or maxUnavailable, not both",
            ));
        }
        for (name, value) in [
            ("minAvailable", &budget.min_available),
            ("maxUnavailable", &budget.max_unavailable),
        ] {
            if let Some(value) = value
                && !is_count_or_percent(value)
            {
                errors.push(FieldError::new(
                    format!("{p}.podDisruptionBudget.{name}"),
                    format!("{value:?} must be a number of pods or a percentage (e.g. 1 or 50%)"),
                ));
            }
        }
    }
    if let Some(class) = &scheduling.priority_class {
        // scheduling/v1 PriorityClass: user classes up to one billion (HighestUserDefinablePriority).
        if let Some(value) = class.value
            && value > 1_000_000_000
        {
            errors.push(FieldError::new(
                format!("{p}.priorityClass.value"),
                format!("{value} is above 1000000000, the highest priority a user may define"),
            ));
        }
        if let Some(policy) = &class.preemption_policy
            && !matches!(policy.as_str(), "PreemptLowerPriority" | "Never")
        {
            errors.push(FieldError::new(
                format!("{p}.priorityClass.preemptionPolicy"),
                format!("{policy:?} must be PreemptLowerPriority or Never"),
            ));
        }
    }
}

fn is_count_or_percent(value: &str) -> bool {
    let digits = value.strip_suffix('%').unwrap_or(value);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

fn validate_affinity(
    affinity: &fleet_api_rs::fleet_cluster::ClusterAgentAffinity,
    p: &str,
    errors: &mut Vec<FieldError>,
) {
    // Checked through the JSON form: the generated types name each nesting level differently,
    // the rules are the same at every level.
    let Ok(value) = serde_json::to_value(affinity) else {
        return;
    };
    check_affinity_terms(&value, p, errors);
}

fn check_affinity_terms(value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    match value {
        Value::Object(fields) => {
            if let Some(weight) = fields.get("weight").and_then(Value::as_i64)
                && !(1..=100).contains(&weight)
            {
                errors.push(FieldError::new(
                    format!("{path}.weight"),
                    format!("{weight} must be in 1..100"),
                ));
            }
            for (key, child) in fields {
                let child_path = format!("{path}.{key}");
                if key == "matchExpressions" && path.contains("nodeAffinity") {
                    for (i, requirement) in child.as_array().into_iter().flatten().enumerate() {
                        check_node_requirement(requirement, &format!("{child_path}[{i}]"), errors);
                    }
                } else {
                    check_affinity_terms(child, &child_path, errors);
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                check_affinity_terms(item, &format!("{path}[{i}]"), errors);
            }
        }
        _ => {}
    }
}

/// core/v1 `NodeSelectorRequirement`.
fn check_node_requirement(requirement: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let operator = requirement["operator"].as_str().unwrap_or_default();
    let values = requirement["values"].as_array().map_or(0, Vec::len);
    let problem = match operator {
        "In" | "NotIn" if values == 0 => Some("values must be non-empty with In and NotIn"),
        "Exists" | "DoesNotExist" if values > 0 => {
            Some("values must be empty with Exists and DoesNotExist")
        }
        "Gt" | "Lt" if values != 1 => Some("values must hold exactly one integer with Gt and Lt"),
        "In" | "NotIn" | "Exists" | "DoesNotExist" | "Gt" | "Lt" => None,
        _ => Some("operator must be In, NotIn, Exists, DoesNotExist, Gt or Lt"),
    };
    if let Some(problem) = problem {
        errors.push(FieldError::new(path, problem));
    }
}

/// `over` applied on `base`: the fields `over` sets replace `base`'s, except environment variables
/// (merged by name) and tolerations (merged by key and effect).
pub fn merge(base: &AgentSettings, over: &AgentSettings) -> AgentSettings {
    let mut merged = merge_fields(base.clone(), over.clone());
    if let (Some(base), Some(over)) = (&base.agent_env_vars, &over.agent_env_vars) {
        merged.agent_env_vars = Some(merge_by(base, over, |v: &ClusterAgentEnvVars| {
            v.name.clone()
        }));
    }
    if let (Some(base), Some(over)) = (&base.agent_tolerations, &over.agent_tolerations) {
        merged.agent_tolerations = Some(merge_by(base, over, |t: &ClusterAgentTolerations| {
            (
                t.key.clone().unwrap_or_default(),
                t.effect.clone().unwrap_or_default(),
            )
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

/// `spec.cluster`'s agent fields as written (no defaults).
pub fn written_in(config: &ClusterConfig) -> AgentSettings {
    AgentSettings {
        agent_namespace: config.agent_namespace.clone(),
        agent_tolerations: config.agent_tolerations.clone(),
        agent_env_vars: config.agent_env_vars.clone(),
        host_network: config.host_network,
        agent_affinity: config.agent_affinity.clone(),
        agent_resources: config.agent_resources.clone(),
        agent_scheduling_customization: config.agent_scheduling_customization.clone(),
        private_repo_url: config.private_repo_url.clone(),
    }
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

/// Checks of `spec.cluster.agentOverrides` for the configuration's validation.
pub fn validate_overrides(overrides: &[AgentOverride], path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for (i, entry) in overrides.iter().enumerate() {
        let p = format!("{path}[{i}]");
        crate::model::validation::validate_label_selector(
            &entry.selector,
            &format!("{p}.selector"),
            &mut errors,
        );
        errors.extend(validate(&entry.settings, &format!("{p}.settings")));
    }
    errors
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

/// The agent settings of `cluster` under `import`, its ClusterClass's annotation being
/// `class_annotation` (as read from the class, `None` when it has none or no class).
pub fn for_cluster(
    import: &ClusterImport,
    cluster: &ClusterView,
    class_annotation: Option<&str>,
) -> Result<AgentSettings, Vec<LayerProblem>> {
    resolve(Layers {
        defaults: &import.agent,
        class: cluster.class.as_ref().map(|class| {
            (
                class.namespace.as_str(),
                class.name.as_str(),
                class_annotation,
            )
        }),
        overrides: &import.agent_overrides,
        cluster_labels: &cluster.labels,
        cluster_annotation: cluster
            .annotations
            .get(AGENT_SETTINGS_ANNOTATION)
            .map(String::as_str),
    })
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
