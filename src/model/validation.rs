//! Checks of a `FleetAddonConfig` spec that the CRD schema cannot express (regular expression
//! syntax, label selector syntax, resulting object names, Fleet agent settings, which the
//! `agent-settings` annotations are checked with too: [`crate::model::agent_settings`]). One pure function returns every
//! problem with its field path; controllers report the list in status.

use std::collections::BTreeMap;

use fleet_api_rs::fleet_cluster::ClusterAgentTolerations;
use serde_json::Value;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use k8s_openapi::api::core::v1::{ObjectReference, SecretReference};

use crate::api::{
    AgentOverride, AgentSettings, ChartTlsConfig, FleetAddonConfigSpec, FleetInstall,
    RegistryCredentials, Server,
};

/// One problem in the spec, with the field path it concerns.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct FieldError {
    /// Path in the object, e.g. `spec.cluster.namespaceRegexes[1]`.
    pub path: String,
    /// What is wrong, and what would be right.
    pub message: String,
}

impl FieldError {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

/// Returns every problem in `spec`, in field order. Empty means valid.
pub fn validate(spec: &FleetAddonConfigSpec) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if let Some(runtime) = &spec.runtime_extension {
        if let Some(repository) = &runtime.agent_chart_repository
            && !is_allowed_repository(repository)
        {
            errors.push(FieldError::new(
                "spec.runtimeExtension.agentChartRepository",
                format!(
                    "{:?} must start with https:// or oci:// (http:// only for 127.0.0.1, localhost or [::1])",
                    without_credentials(repository)
                ),
            ));
        }
        // The agent chart's repository: its own, else the installation's, else Fleet's.
        let repository = runtime
            .agent_chart_repository
            .as_deref()
            .or(spec.install.as_ref().and_then(|i| i.repository.as_deref()))
            .unwrap_or(crate::names::DEFAULT_FLEET_REPOSITORY);
        validate_access(
            runtime.agent_chart_credentials.as_ref(),
            runtime.agent_chart_tls_config.as_ref(),
            repository,
            (
                "spec.runtimeExtension.agentChartCredentials",
                "spec.runtimeExtension.agentChartTLSConfig",
            ),
            &mut errors,
        );
        if let Some(steps) = &runtime.upgrade_steps {
            for (field, value) in [("timeout", &steps.timeout), ("settle", &steps.settle)] {
                if let Some(value) = value
                    && crate::api::duration::parse_duration(value).is_err()
                {
                    errors.push(FieldError::new(
                        format!("spec.runtimeExtension.upgradeSteps.{field}"),
                        format!("{value:?} is not a duration such as 30m or 10s"),
                    ));
                }
            }
        }
        if let Some(timeout) = runtime
            .before_cluster_delete
            .as_ref()
            .and_then(|d| d.timeout.as_ref())
        {
            match crate::api::duration::parse_duration(timeout) {
                Ok(duration) if !duration.is_zero() => {}
                Ok(_) => errors.push(FieldError::new(
                    "spec.runtimeExtension.beforeClusterDelete.timeout",
                    format!("{timeout:?} must be longer than zero (the default, 30m, applies)"),
                )),
                Err(_) => errors.push(FieldError::new(
                    "spec.runtimeExtension.beforeClusterDelete.timeout",
                    format!(
                        "{timeout:?} is not a duration such as 30m or 1h (the default, 30m, applies)"
                    ),
                )),
            }
        }
    }
    if let Some(cluster) = &spec.cluster {
        if let Some(selector) = &cluster.selector {
            validate_label_selector(selector, "spec.cluster.selector", &mut errors);
        }
        if let Some(selector) = &cluster.namespace_selector {
            validate_label_selector(selector, "spec.cluster.namespaceSelector", &mut errors);
        }
        for (i, pattern) in cluster.namespace_regexes.iter().flatten().enumerate() {
            if let Err(err) = compile_anchored(pattern) {
                errors.push(FieldError::new(
                    format!("spec.cluster.namespaceRegexes[{i}]"),
                    format!("invalid regex {pattern:?}: {}", regex_error_summary(&err)),
                ));
            }
        }
        if let Some(selector) = &cluster.agent_initiated_selector {
            validate_label_selector(selector, "spec.cluster.agentInitiatedSelector", &mut errors);
        }
        if let Some(selector) = &cluster.self_managed_selector {
            validate_label_selector(selector, "spec.cluster.selfManagedSelector", &mut errors);
        }
        if let Some(naming) = &cluster.naming {
            // A CAPI name is at most 63 characters; the Fleet name must stay a valid object name.
            let example = format!(
                "{}{}{}",
                naming.prefix.as_deref().unwrap_or_default(),
                "x",
                naming.suffix.as_deref().unwrap_or_default()
            );
            if !is_dns1123_subdomain(&example) {
                errors.push(FieldError::new(
                    "spec.cluster.naming",
                    format!(
                        "prefix and suffix must produce a DNS-1123 subdomain around the Cluster name (got {example:?} for Cluster \"x\")"
                    ),
                ));
            }
        }
        if let Some(ttl) = &cluster.registration_token_ttl
            && crate::api::duration::parse_duration(ttl).is_err()
        {
            errors.push(FieldError::new(
                "spec.cluster.registrationTokenTTL",
                format!("{ttl:?} is not a duration such as 24h or 90m"),
            ));
        }
        if let Some(interval) = &cluster.agent_checkin_interval
            && crate::api::duration::parse_duration(interval).is_err()
        {
            errors.push(FieldError::new(
                "spec.cluster.agentCheckinInterval",
                format!("{interval:?} is not a duration such as 15m or 1h"),
            ));
        }
        if let Some(policy) = &cluster.deselect_policy
            && policy != "Retain"
            && policy != "Delete"
        {
            errors.push(FieldError::new(
                "spec.cluster.deselectPolicy",
                format!("{policy:?} is not Retain or Delete"),
            ));
        }
        errors.extend(validate_agent_settings(
            &cluster.agent_settings(),
            "spec.cluster",
        ));
        if let Some(overrides) = &cluster.agent_overrides {
            errors.extend(validate_agent_overrides(
                overrides,
                "spec.cluster.agentOverrides",
            ));
        }
    }
    if let Some(config) = &spec.config {
        if let Some(server) = &config.server {
            validate_server(server, &mut errors);
        }
        if let Some(reference) = config
            .feature_gates
            .as_ref()
            .and_then(|gates| gates.config_map.as_ref())
            .and_then(|cm| cm.reference.as_ref())
        {
            require_name_and_namespace(
                reference,
                "spec.config.featureGates.configMap.ref",
                &mut errors,
            );
        }
    }
    if let Some(install) = &spec.install {
        validate_install(install, &mut errors);
    }
    errors
}

fn validate_server(server: &Server, errors: &mut Vec<FieldError>) {
    let path = "spec.config.server";
    match (&server.infer_local, &server.custom) {
        (Some(_), Some(_)) | (None, None) => errors.push(FieldError::new(
            path,
            "exactly one of inferLocal or custom must be set",
        )),
        _ => {}
    }
    if let Some(custom) = &server.custom {
        if let Some(url) = &custom.api_server_url
            && !(url.starts_with("https://") || url.starts_with("http://"))
        {
            errors.push(FieldError::new(
                format!("{path}.custom.apiServerUrl"),
                format!("{:?} must be an http(s) URL", without_credentials(url)),
            ));
        }
        if let Some(reference) = &custom.api_server_ca_config_ref {
            let kind = reference.kind.as_deref().unwrap_or("ConfigMap");
            if kind != "ConfigMap" && kind != "Secret" {
                errors.push(FieldError::new(
                    format!("{path}.custom.apiServerCaConfigRef.kind"),
                    format!("{kind:?} is not supported: use ConfigMap or Secret"),
                ));
            }
            let reference_path = format!("{path}.custom.apiServerCaConfigRef");
            require_name_and_namespace(reference, &reference_path, errors);
        }
    }
}

/// The `name` and the `namespace` of `reference` (at `path`) must be set.
fn require_name_and_namespace(
    reference: &ObjectReference,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    for (field, value) in [
        ("name", &reference.name),
        ("namespace", &reference.namespace),
    ] {
        if value.as_deref().unwrap_or_default().is_empty() {
            errors.push(FieldError::new(
                format!("{path}.{field}"),
                format!("{field} is required"),
            ));
        }
    }
}

fn validate_install(install: &FleetInstall, errors: &mut Vec<FieldError>) {
    let path = "spec.install";
    if install.follow_latest.is_some() == install.version.is_some() {
        errors.push(FieldError::new(
            path,
            "exactly one of followLatest or version must be set",
        ));
    }
    if let Some(version) = &install.version
        && crate::model::version::ChartVersion::parse(version).is_none()
    {
        errors.push(FieldError::new(
            format!("{path}.version"),
            format!("{version:?} is not a semantic version such as 0.13.1"),
        ));
    }
    if let Some(repository) = &install.repository
        && !is_allowed_repository(repository)
    {
        errors.push(FieldError::new(
            format!("{path}.repository"),
            format!(
                "{:?} must start with https:// or oci:// (http:// only for 127.0.0.1, localhost or [::1])",
                without_credentials(repository)
            ),
        ));
    }
    if let Some(ns) = &install.namespace
        && !is_dns1123_label(ns)
    {
        errors.push(FieldError::new(
            format!("{path}.namespace"),
            format!("{ns:?} is not a valid namespace name (DNS-1123 label)"),
        ));
    }
    validate_access(
        install.credentials.as_ref(),
        install.tls_config.as_ref(),
        install
            .repository
            .as_deref()
            .unwrap_or(crate::names::DEFAULT_FLEET_REPOSITORY),
        ("spec.install.credentials", "spec.install.tlsConfig"),
        errors,
    );
}

/// Credentials and TLS settings of a chart repository (`paths`: where each is written).
fn validate_access(
    credentials: Option<&RegistryCredentials>,
    tls: Option<&ChartTlsConfig>,
    repository: &str,
    (credentials_path, tls_path): (&str, &str),
    errors: &mut Vec<FieldError>,
) {
    if let Some(credentials) = credentials {
        match &credentials.secret {
            None => errors.push(FieldError::new(
                format!("{credentials_path}.secret"),
                "secret is required (name and namespace of a Secret holding a registry config.json)",
            )),
            Some(secret) => validate_secret_reference(secret, &format!("{credentials_path}.secret"), errors),
        }
        if let Some(key) = &credentials.key
            && !is_secret_key(key)
        {
            errors.push(FieldError::new(
                format!("{credentials_path}.key"),
                format!("{key:?} is not a valid Secret key (letters, digits, '-', '_', '.')"),
            ));
        }
        if !crate::model::chart_access::is_oci(repository) {
            errors.push(FieldError::new(
                credentials_path,
                "credentials (a registry config.json) apply to oci:// repositories only, and this repository is not one: for an https:// chart repository, put the user in its URL",
            ));
        }
    }
    if let Some(tls) = tls {
        if let Some(secret) = &tls.ca_secret {
            validate_secret_reference(secret, &format!("{tls_path}.caSecret"), errors);
        }
        if repository.trim().starts_with("http://") {
            errors.push(FieldError::new(
                tls_path,
                "the repository is plain http://, which has no TLS",
            ));
        }
    }
}

fn validate_secret_reference(secret: &SecretReference, path: &str, errors: &mut Vec<FieldError>) {
    match secret.name.as_deref() {
        None | Some("") => errors.push(FieldError::new(format!("{path}.name"), "name is required")),
        Some(name) if !is_dns1123_subdomain(name) => errors.push(FieldError::new(
            format!("{path}.name"),
            format!("{name:?} is not a valid Secret name (DNS-1123 subdomain)"),
        )),
        Some(_) => {}
    }
    match secret.namespace.as_deref() {
        None | Some("") => errors.push(FieldError::new(
            format!("{path}.namespace"),
            "namespace is required (FleetAddonConfig is cluster-scoped)",
        )),
        Some(ns) if !is_dns1123_label(ns) => errors.push(FieldError::new(
            format!("{path}.namespace"),
            format!("{ns:?} is not a valid namespace name (DNS-1123 label)"),
        )),
        Some(_) => {}
    }
}

/// A key of a Secret's `data` (`[-._a-zA-Z0-9]+`, at most 253 characters).
fn is_secret_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 253
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Whether helm may be pointed at `url`: https and OCI anywhere, plain HTTP only on loopback.
pub fn is_allowed_repository(url: &str) -> bool {
    if let Some(rest) = url.strip_prefix("https://").or(url.strip_prefix("oci://")) {
        return !rest.is_empty() && !rest.chars().any(char::is_whitespace);
    }
    url.starts_with("http://")
        && crate::model::chart_access::repository_host(url)
            .is_some_and(|host| crate::model::chart_access::is_loopback_host(&host))
}

/// Compiles a namespace pattern so it must match the whole name.
pub fn compile_anchored(pattern: &str) -> Result<regex::Regex, regex::Error> {
    regex::Regex::new(&format!("^(?:{pattern})$"))
}

/// The `regex` crate's errors span several lines with a caret diagram; keep the last line,
/// which names the problem.
fn regex_error_summary(err: &regex::Error) -> String {
    let text = err.to_string();
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or(&text)
        .trim()
        .trim_start_matches("error: ")
        .to_string()
}

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

/// `url` with the user information of its authority (`user:password@`) replaced, so a problem
/// message (written into conditions and Events) never shows a credential.
pub fn without_credentials(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://<redacted>@{}", &rest[at + 1..]),
        None => url.to_string(),
    }
}

/// Validates a label selector as the API server does for `metav1.LabelSelector`.
pub fn validate_label_selector(selector: &LabelSelector, path: &str, errors: &mut Vec<FieldError>) {
    for (key, value) in selector.match_labels.iter().flatten() {
        let p = format!("{path}.matchLabels[{key:?}]");
        if let Some(msg) = label_key_problem(key) {
            errors.push(FieldError::new(&p, msg));
        }
        if let Some(msg) = label_value_problem(value) {
            errors.push(FieldError::new(&p, msg));
        }
    }
    for (i, req) in selector.match_expressions.iter().flatten().enumerate() {
        let p = format!("{path}.matchExpressions[{i}]");
        if let Some(msg) = label_key_problem(&req.key) {
            errors.push(FieldError::new(format!("{p}.key"), msg));
        }
        let values = req.values.as_deref().unwrap_or_default();
        match req.operator.as_str() {
            "In" | "NotIn" => {
                if values.is_empty() {
                    errors.push(FieldError::new(
                        format!("{p}.values"),
                        format!("must be non-empty when operator is {}", req.operator),
                    ));
                }
            }
            "Exists" | "DoesNotExist" => {
                if !values.is_empty() {
                    errors.push(FieldError::new(
                        format!("{p}.values"),
                        format!("must be empty when operator is {}", req.operator),
                    ));
                }
            }
            other => errors.push(FieldError::new(
                format!("{p}.operator"),
                format!("{other:?} is not a valid operator: use In, NotIn, Exists or DoesNotExist"),
            )),
        }
        for (j, value) in values.iter().enumerate() {
            if let Some(msg) = label_value_problem(value) {
                errors.push(FieldError::new(format!("{p}.values[{j}]"), msg));
            }
        }
    }
}

fn label_key_problem(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && !is_dns1123_subdomain(prefix)
    {
        return Some(format!(
            "label key {key:?}: prefix must be a DNS-1123 subdomain"
        ));
    }
    if name.is_empty() || name.len() > 63 || !is_qualified_name_part(name) {
        return Some(format!(
            "label key {key:?}: name must be 1-63 characters, alphanumeric, '-', '_' or '.', starting and ending with an alphanumeric character"
        ));
    }
    None
}

fn label_value_problem(value: &str) -> Option<String> {
    if value.is_empty() || (value.len() <= 63 && is_qualified_name_part(value)) {
        None
    } else {
        Some(format!(
            "label value {value:?}: must be at most 63 characters, alphanumeric, '-', '_' or '.', starting and ending with an alphanumeric character"
        ))
    }
}

fn is_qualified_name_part(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// DNS-1123 label: lower-case alphanumerics and '-', at most 63, alphanumeric at both ends.
pub fn is_dns1123_label(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase() || *b == b'-')
}

/// DNS-1123 subdomain: dot-separated labels, at most 253 characters.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(yaml: &str) -> Vec<String> {
        let spec: FleetAddonConfigSpec =
            serde_yaml::from_str(yaml).unwrap_or_else(|e| panic!("test spec {yaml:?}: {e}"));
        validate(&spec).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn problems_never_show_a_url_s_credentials() {
        for (url, shown) in [
            (
                "http://user:secret@charts.example.com/x",
                "http://<redacted>@charts.example.com/x",
            ),
            ("ftp://token@host", "ftp://<redacted>@host"),
            (
                "https://charts.example.com/a@b",
                "https://charts.example.com/a@b",
            ),
            ("no scheme", "no scheme"),
        ] {
            assert_eq!(without_credentials(url), shown);
        }
        let spec: FleetAddonConfigSpec = serde_yaml::from_str(
            "install: {followLatest: true, repository: \"http://user:secret@charts.example.com\"}\nruntimeExtension: {agentChartRepository: \"ftp://u:secret@x\"}\nconfig: {server: {custom: {apiServerUrl: \"tcp://u:secret@api:6443\"}}}",
        )
        .expect("spec");
        let problems = validate(&spec);
        assert_eq!(problems.len(), 3, "{problems:?}");
        for problem in problems {
            assert!(!problem.to_string().contains("secret"), "{problem}");
        }
    }

    #[test]
    fn valid_specs_have_no_problems() {
        for yaml in [
            "{}",
            // CAAPF's e2e configuration.
            r#"
config: {server: {inferLocal: true}}
clusterClass: {patchResource: true, setOwnerReferences: true}
cluster:
  hostNetwork: true
  patchResource: true
  setOwnerReferences: true
  applyClassGroup: true
  selector: {matchLabels: {import: ""}}
  namespaceSelector: {matchLabels: {import: ""}}
install: {followLatest: true}
"#,
            "cluster: {namespaceRegexes: [\"^team-[a-z]+$\", \"prod|staging\"], naming: {prefix: \"fleet-\", suffix: \"-c\"}}",
            "cluster: {selector: {matchExpressions: [{key: example.com/tier, operator: Exists}]}}",
            "install: {version: v0.13.1, repository: \"http://127.0.0.1:8879/charts\"}",
            "install: {version: 0.14.0-rc.1, repository: \"oci://ghcr.io/rancher/fleet-charts\"}",
            "config: {server: {custom: {apiServerUrl: \"https://1.2.3.4:6443\", apiServerCaConfigRef: {kind: Secret, name: ca, namespace: default}}}}",
            "config: {featureGates: {configMap: {ref: {name: rancher-config, namespace: cattle-system}}}}",
            "runtimeExtension: {beforeClusterDelete: {removeWorkloads: true, timeout: 45m}}",
            // A private registry: credentials and a CA from Secrets, as CAAPH's HelmChartProxy.
            "install: {followLatest: true, repository: \"oci://registry.example.com/charts\", credentials: {secret: {name: registry, namespace: caapf-system}}, tlsConfig: {caSecret: {name: registry-ca, namespace: caapf-system}}}",
            "install: {followLatest: true, repository: \"oci://127.0.0.1:5055/charts\", credentials: {secret: {name: pull, namespace: caapf-system}, key: .dockerconfigjson}, tlsConfig: {insecureSkipTLSVerify: true}}",
            "install: {followLatest: true, tlsConfig: {caSecret: {name: ca, namespace: caapf-system}}}",
            "runtimeExtension: {agentChartRepository: \"oci://mirror.example.com/fleet\", agentChartCredentials: {secret: {name: mirror, namespace: caapf-system}}, agentChartTLSConfig: {caSecret: {name: mirror-ca, namespace: caapf-system}}}",
            // The agent chart's repository is the installation's when it has none of its own.
            "install: {followLatest: true, repository: \"oci://r.example.com/c\"}\nruntimeExtension: {agentChartCredentials: {secret: {name: r, namespace: ns}}}",
        ] {
            assert_eq!(problems(yaml), Vec::<String>::new(), "{yaml}");
        }
    }

    #[test]
    fn every_problem_has_its_field_path() {
        let rows: &[(&str, &[&str])] = &[
            (
                "install: {followLatest: true, repository: \"oci://r.example.com/c\", credentials: {key: \"bad key\"}}",
                &[
                    "spec.install.credentials.secret: secret is required (name and namespace of a Secret holding a registry config.json)",
                    "spec.install.credentials.key: \"bad key\" is not a valid Secret key (letters, digits, '-', '_', '.')",
                ],
            ),
            (
                "install: {followLatest: true, repository: \"oci://r.example.com/c\", credentials: {secret: {name: Registry}}, tlsConfig: {caSecret: {namespace: \"-x\"}}}",
                &[
                    "spec.install.credentials.secret.name: \"Registry\" is not a valid Secret name (DNS-1123 subdomain)",
                    "spec.install.credentials.secret.namespace: namespace is required (FleetAddonConfig is cluster-scoped)",
                    "spec.install.tlsConfig.caSecret.name: name is required",
                    "spec.install.tlsConfig.caSecret.namespace: \"-x\" is not a valid namespace name (DNS-1123 label)",
                ],
            ),
            (
                "install: {followLatest: true, credentials: {secret: {name: r, namespace: ns}}}",
                &[
                    "spec.install.credentials: credentials (a registry config.json) apply to oci:// repositories only, and this repository is not one: for an https:// chart repository, put the user in its URL",
                ],
            ),
            (
                "install: {followLatest: true, repository: \"http://127.0.0.1:8879/\", tlsConfig: {insecureSkipTLSVerify: true}}",
                &["spec.install.tlsConfig: the repository is plain http://, which has no TLS"],
            ),
            (
                "runtimeExtension: {agentChartCredentials: {secret: {name: r}}, agentChartTLSConfig: {caSecret: {name: c}}}",
                &[
                    "spec.runtimeExtension.agentChartCredentials.secret.namespace: namespace is required (FleetAddonConfig is cluster-scoped)",
                    "spec.runtimeExtension.agentChartCredentials: credentials (a registry config.json) apply to oci:// repositories only, and this repository is not one: for an https:// chart repository, put the user in its URL",
                    "spec.runtimeExtension.agentChartTLSConfig.caSecret.namespace: namespace is required (FleetAddonConfig is cluster-scoped)",
                ],
            ),
            (
                "cluster: {namespaceRegexes: [\"ok\", \"foo(\"]}",
                &["spec.cluster.namespaceRegexes[1]: invalid regex \"foo(\": unclosed group"],
            ),
            (
                "cluster: {selector: {matchExpressions: [{key: env, operator: Maybe}]}}",
                &[
                    "spec.cluster.selector.matchExpressions[0].operator: \"Maybe\" is not a valid operator: use In, NotIn, Exists or DoesNotExist",
                ],
            ),
            (
                "cluster: {namespaceSelector: {matchExpressions: [{key: env, operator: In}]}}",
                &[
                    "spec.cluster.namespaceSelector.matchExpressions[0].values: must be non-empty when operator is In",
                ],
            ),
            (
                "cluster: {selector: {matchExpressions: [{key: env, operator: Exists, values: [a]}]}}",
                &[
                    "spec.cluster.selector.matchExpressions[0].values: must be empty when operator is Exists",
                ],
            ),
            (
                "cluster: {selector: {matchLabels: {\"bad key!\": x}}}",
                &[
                    "spec.cluster.selector.matchLabels[\"bad key!\"]: label key \"bad key!\": name must be 1-63 characters, alphanumeric, '-', '_' or '.', starting and ending with an alphanumeric character",
                ],
            ),
            (
                "cluster: {agentInitiatedSelector: {matchLabels: {a: \"-bad\"}}}",
                &[
                    "spec.cluster.agentInitiatedSelector.matchLabels[\"a\"]: label value \"-bad\": must be at most 63 characters, alphanumeric, '-', '_' or '.', starting and ending with an alphanumeric character",
                ],
            ),
            (
                "cluster: {selfManagedSelector: {matchLabels: {a: \"-bad\"}}}",
                &[
                    "spec.cluster.selfManagedSelector.matchLabels[\"a\"]: label value \"-bad\": must be at most 63 characters, alphanumeric, '-', '_' or '.', starting and ending with an alphanumeric character",
                ],
            ),
            (
                "cluster: {naming: {prefix: \"Fleet_\"}}",
                &[
                    "spec.cluster.naming: prefix and suffix must produce a DNS-1123 subdomain around the Cluster name (got \"Fleet_x\" for Cluster \"x\")",
                ],
            ),
            (
                "cluster: {agentNamespace: Agents}",
                &[
                    "spec.cluster.agentNamespace: \"Agents\" is not a valid namespace name (DNS-1123 label)",
                ],
            ),
            (
                "install: {followLatest: true, version: 0.13.1}",
                &["spec.install: exactly one of followLatest or version must be set"],
            ),
            (
                "install: {}",
                &["spec.install: exactly one of followLatest or version must be set"],
            ),
            (
                "install: {version: \"~0.13\"}",
                &["spec.install.version: \"~0.13\" is not a semantic version such as 0.13.1"],
            ),
            (
                "install: {followLatest: true, repository: \"http://charts.example.com\"}",
                &[
                    "spec.install.repository: \"http://charts.example.com\" must start with https:// or oci:// (http:// only for 127.0.0.1, localhost or [::1])",
                ],
            ),
            (
                "runtimeExtension: {agentChartRepository: \"ftp://charts.example.com\"}",
                &[
                    "spec.runtimeExtension.agentChartRepository: \"ftp://charts.example.com\" must start with https:// or oci:// (http:// only for 127.0.0.1, localhost or [::1])",
                ],
            ),
            (
                "runtimeExtension: {beforeClusterDelete: {removeWorkloads: true, timeout: soon}}",
                &[
                    "spec.runtimeExtension.beforeClusterDelete.timeout: \"soon\" is not a duration such as 30m or 1h (the default, 30m, applies)",
                ],
            ),
            (
                "runtimeExtension: {beforeClusterDelete: {timeout: 0m}}",
                &[
                    "spec.runtimeExtension.beforeClusterDelete.timeout: \"0m\" must be longer than zero (the default, 30m, applies)",
                ],
            ),
            (
                "config: {server: {inferLocal: true, custom: {}}}",
                &["spec.config.server: exactly one of inferLocal or custom must be set"],
            ),
            (
                "config: {server: {custom: {apiServerUrl: \"fleet.example.com\", apiServerCaConfigRef: {kind: Pod, name: x, namespace: default}}}}",
                &[
                    "spec.config.server.custom.apiServerUrl: \"fleet.example.com\" must be an http(s) URL",
                    "spec.config.server.custom.apiServerCaConfigRef.kind: \"Pod\" is not supported: use ConfigMap or Secret",
                ],
            ),
            (
                "config: {server: {custom: {apiServerCaConfigRef: {name: ca}}}}",
                &[
                    "spec.config.server.custom.apiServerCaConfigRef.namespace: namespace is required",
                ],
            ),
            (
                "config: {featureGates: {configMap: {ref: {name: x}}}}",
                &["spec.config.featureGates.configMap.ref.namespace: namespace is required"],
            ),
        ];
        for (yaml, want) in rows {
            assert_eq!(problems(yaml), *want, "{yaml}");
        }
    }

    #[test]
    fn repository_schemes() {
        for (url, ok) in [
            ("https://rancher.github.io/fleet-helm-charts/", true),
            ("oci://ghcr.io/rancher", true),
            ("http://127.0.0.1:8879", true),
            ("http://localhost/charts", true),
            ("http://[::1]:80/x", true),
            ("http://127.0.0.1.example.com/", false),
            ("http://10.0.0.1/", false),
            ("ftp://x", false),
            ("https://", false),
        ] {
            assert_eq!(is_allowed_repository(url), ok, "{url}");
        }
    }
}
