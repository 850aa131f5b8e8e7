//! The Fleet agent settings of one layer (the FleetAddonConfig's, an `agentOverrides` entry's,
//! a ClusterClass's or a Cluster's `agent-settings` annotation).

use std::collections::BTreeMap;

use fleet_api_rs::fleet_cluster::ClusterAgentTolerations;
use serde_json::Value;

use super::FieldError;
use super::grammar::{is_dns1123_label, validate_label_selector};
use crate::api::{AgentOverride, AgentSettings};

/// Every problem in one layer's values, with field paths under `path`. The rules are the API
/// server's for the Kubernetes types these fields end up in (k8s.io/api core/v1 `Toleration`,
/// `EnvVar`, `ResourceRequirements`, `NodeSelectorRequirement`; policy/v1
/// `PodDisruptionBudgetSpec`; scheduling/v1 `PriorityClass`) and Fleet's own
/// (`internal/cmd/controller/agentmanagement`): a value that passed here would otherwise fail on
/// the workload cluster, where nobody sees it.
pub fn validate_agent_settings(settings: &AgentSettings, path: &str) -> Vec<FieldError> {
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

/// Checks of `spec.cluster.agentOverrides` for the configuration's validation.
pub fn validate_agent_overrides(overrides: &[AgentOverride], path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for (i, entry) in overrides.iter().enumerate() {
        let p = format!("{path}[{i}]");
        validate_label_selector(&entry.selector, &format!("{p}.selector"), &mut errors);
        errors.extend(validate_agent_settings(
            &entry.settings,
            &format!("{p}.settings"),
        ));
    }
    errors
}
