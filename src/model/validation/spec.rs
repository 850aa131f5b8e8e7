//! The spec's own rules: every problem of a `FleetAddonConfig` spec, in field order.

use k8s_openapi::api::core::v1::ObjectReference;

use super::FieldError;
use super::grammar::{is_dns1123_label, label_key_problem, validate_label_selector};
use super::{validate_agent_overrides, validate_agent_settings};
use crate::api::{ChartTlsConfig, FleetAddonConfigSpec, FleetInstall, Server};

/// Returns every problem in `spec`, in field order. Empty means valid.
pub fn validate(spec: &FleetAddonConfigSpec) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if let Some(runtime) = &spec.runtime_extension {
        if let Some(repository) = &runtime.agent_chart_repository {
            validate_repository(
                repository,
                runtime.agent_chart_tls_config.as_ref(),
                (
                    "spec.runtimeExtension.agentChartRepository",
                    "spec.runtimeExtension.agentChartCredentials",
                ),
                &mut errors,
            );
        }
        // The agent chart's repository: its own, else the installation's, else Fleet's.
        let repository = runtime
            .agent_chart_repository
            .as_deref()
            .or(spec.install.as_ref().and_then(|i| i.repository.as_deref()))
            .unwrap_or(crate::names::DEFAULT_FLEET_REPOSITORY);
        validate_access(
            runtime.agent_chart_tls_config.as_ref(),
            repository,
            "spec.runtimeExtension.agentChartTLSConfig",
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
    if let Some(selector) = spec
        .runtime_extension
        .as_ref()
        .and_then(|r| r.upgrade_steps.as_ref())
        .and_then(|u| u.bundle_selector.as_ref())
    {
        validate_label_selector(
            selector,
            "spec.runtimeExtension.upgradeSteps.bundleSelector",
            &mut errors,
        );
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
        for (i, name) in cluster.variable_labels.iter().flatten().enumerate() {
            let key = format!("{}{name}", crate::names::VARIABLE_LABEL_PREFIX);
            if let Some(problem) = label_key_problem(&key) {
                errors.push(FieldError::new(
                    format!("spec.cluster.variableLabels[{i}]"),
                    problem,
                ));
            }
        }
        if let Some(rollout) = &cluster.rollout {
            validate_rollout(rollout, &mut errors);
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
    if let Some(repository) = &install.repository {
        validate_repository(
            repository,
            install.tls_config.as_ref(),
            ("spec.install.repository", "spec.install.credentials"),
            errors,
        );
    }
    validate_access(
        install.tls_config.as_ref(),
        install
            .repository
            .as_deref()
            .unwrap_or(crate::names::DEFAULT_FLEET_REPOSITORY),
        "spec.install.tlsConfig",
        errors,
    );
}

/// A repository URL helm may be pointed at (`plain HTTP` anywhere only with
/// `tlsConfig.insecurePlainHTTP`), without user information: a password there would reach
/// helm's command line, so credentials come from the Secret at `credentials_path`.
fn validate_repository(
    repository: &str,
    tls: Option<&ChartTlsConfig>,
    (path, credentials_path): (&str, &str),
    errors: &mut Vec<FieldError>,
) {
    let opt_in = tls.is_some_and(|t| t.insecure_plain_http == Some(true));
    if !is_allowed_repository(repository, opt_in) {
        errors.push(FieldError::new(
            path,
            format!(
                "{:?} must start with https:// or oci:// (http:// only for 127.0.0.1, localhost or [::1], or with tlsConfig.insecurePlainHTTP)",
                without_credentials(repository)
            ),
        ));
    } else if without_credentials(repository) != repository {
        errors.push(FieldError::new(
            path,
            format!(
                "user information in the URL is refused (helm would get it on its command line): put the user and password in a Secret and name it in {credentials_path}"
            ),
        ));
    }
}

/// TLS settings that fit the chart repository (`tls_path`: where they are written). Their
/// Secret references' grammar is the CRD schema's (`secret_reference_grammar` in `crate::api`).
fn validate_access(
    tls: Option<&ChartTlsConfig>,
    repository: &str,
    tls_path: &str,
    errors: &mut Vec<FieldError>,
) {
    let Some(tls) = tls else { return };
    if (tls.ca_secret.is_some() || tls.insecure_skip_tls_verify.is_some())
        && repository.trim().starts_with("http://")
    {
        errors.push(FieldError::new(
            tls_path,
            "the repository is plain http://, which has no TLS",
        ));
    } else if tls.insecure_plain_http == Some(true)
        && (tls.ca_secret.is_some() || tls.insecure_skip_tls_verify == Some(true))
    {
        // helm ignores --plain-http when given a CA or --insecure-skip-tls-verify (helm v3.17.2
        // cmd/helm/root.go, v4.1.4 pkg/cmd/root.go newRegistryClient) and speaks HTTPS.
        errors.push(FieldError::new(
            format!("{tls_path}.insecurePlainHTTP"),
            "plain HTTP has no TLS: remove caSecret and insecureSkipTLSVerify (helm ignores plain HTTP when either is set)",
        ));
    }
    if tls.insecure_plain_http == Some(true) && repository.trim().starts_with("https://") {
        errors.push(FieldError::new(
            format!("{tls_path}.insecurePlainHTTP"),
            "the repository is https://: plain HTTP applies to oci:// registries and http:// repositories",
        ));
    }
}

/// Whether helm may be pointed at `url`: https and OCI anywhere, plain HTTP only on loopback
/// unless `plain_http_opt_in` (`tlsConfig.insecurePlainHTTP`).
pub fn is_allowed_repository(url: &str, plain_http_opt_in: bool) -> bool {
    if let Some(rest) = url.strip_prefix("https://").or(url.strip_prefix("oci://")) {
        return !rest.is_empty() && !rest.chars().any(char::is_whitespace);
    }
    url.starts_with("http://")
        && (plain_http_opt_in
            || crate::model::chart_access::repository_host(url)
                .is_some_and(|host| crate::model::chart_access::is_loopback_host(&host)))
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

/// `spec.cluster.rollout`: waves named once each as label values, a known default wave, a soak
/// duration.
fn validate_rollout(rollout: &crate::api::RolloutConfig, errors: &mut Vec<FieldError>) {
    let path = "spec.cluster.rollout";
    let waves = rollout.waves.as_deref().unwrap_or_default();
    if waves.is_empty() {
        errors.push(FieldError::new(
            format!("{path}.waves"),
            "name at least one wave",
        ));
    }
    for (i, wave) in waves.iter().enumerate() {
        if wave.is_empty() || !is_dns1123_label(wave) {
            errors.push(FieldError::new(
                format!("{path}.waves[{i}]"),
                format!(
                    "{wave:?} is not a lowercase name of at most 63 characters (a label value)"
                ),
            ));
        } else if waves[..i].contains(wave) {
            errors.push(FieldError::new(
                format!("{path}.waves[{i}]"),
                format!("{wave:?} is named twice"),
            ));
        }
    }
    if let Some(default) = &rollout.default_wave
        && !waves.contains(default)
    {
        errors.push(FieldError::new(
            format!("{path}.defaultWave"),
            format!("{default:?} is not one of the waves {waves:?}"),
        ));
    }
    if let Some(soak) = &rollout.soak
        && crate::api::duration::parse_duration(soak).is_err()
    {
        errors.push(FieldError::new(
            format!("{path}.soak"),
            format!("{soak:?} is not a duration such as 30m or 2h"),
        ));
    }
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
            // An https:// repository's user and password from a basic-auth Secret.
            "install: {followLatest: true, credentials: {secret: {name: charts, namespace: caapf-system}}}",
            // Plain HTTP to a registry or repository in the cluster, opted in.
            "install: {followLatest: true, repository: \"oci://registry.kube-system.svc:5000/charts\", tlsConfig: {insecurePlainHTTP: true}}\nruntimeExtension: {agentChartRepository: \"http://charts.kube-system.svc/\", agentChartTLSConfig: {insecurePlainHTTP: true}}",
        ] {
            assert_eq!(problems(yaml), Vec::<String>::new(), "{yaml}");
        }
    }

    /// The problems of Kubernetes' grammar that the CRD schema says (Secret references, label
    /// values, selector operators, the naming) are the API server's: `tests/crd.rs`
    /// `the_schema_refuses_bad_grammar_naming_each_field`.
    #[test]
    fn every_problem_has_its_field_path() {
        let rows: &[(&str, &[&str])] = &[
            (
                "install: {followLatest: true, repository: \"https://fleet:hunter2@charts.example.com/\"}",
                &[
                    "spec.install.repository: user information in the URL is refused (helm would get it on its command line): put the user and password in a Secret and name it in spec.install.credentials",
                ],
            ),
            (
                "runtimeExtension: {agentChartRepository: \"oci://u:p@r.example.com/c\"}",
                &[
                    "spec.runtimeExtension.agentChartRepository: user information in the URL is refused (helm would get it on its command line): put the user and password in a Secret and name it in spec.runtimeExtension.agentChartCredentials",
                ],
            ),
            (
                "install: {followLatest: true, repository: \"oci://registry.kube-system.svc:5000/charts\", tlsConfig: {insecurePlainHTTP: true, insecureSkipTLSVerify: true}}\nruntimeExtension: {agentChartRepository: \"oci://r.kube-system.svc/c\", agentChartTLSConfig: {insecurePlainHTTP: true, caSecret: {name: ca, namespace: caapf-system}}}",
                &[
                    "spec.runtimeExtension.agentChartTLSConfig.insecurePlainHTTP: plain HTTP has no TLS: remove caSecret and insecureSkipTLSVerify (helm ignores plain HTTP when either is set)",
                    "spec.install.tlsConfig.insecurePlainHTTP: plain HTTP has no TLS: remove caSecret and insecureSkipTLSVerify (helm ignores plain HTTP when either is set)",
                ],
            ),
            (
                "install: {followLatest: true, tlsConfig: {insecurePlainHTTP: true}}",
                &[
                    "spec.install.tlsConfig.insecurePlainHTTP: the repository is https://: plain HTTP applies to oci:// registries and http:// repositories",
                ],
            ),
            (
                "install: {followLatest: true, repository: \"oci://registry.kube-system.svc:5000/charts\", tlsConfig: {insecurePlainHTTP: false}}\nruntimeExtension: {agentChartRepository: \"http://charts.kube-system.svc/\"}",
                &[
                    "spec.runtimeExtension.agentChartRepository: \"http://charts.kube-system.svc/\" must start with https:// or oci:// (http:// only for 127.0.0.1, localhost or [::1], or with tlsConfig.insecurePlainHTTP)",
                ],
            ),
            (
                "install: {followLatest: true, repository: \"http://127.0.0.1:8879/\", tlsConfig: {insecureSkipTLSVerify: true}}",
                &["spec.install.tlsConfig: the repository is plain http://, which has no TLS"],
            ),
            (
                "cluster: {namespaceRegexes: [\"ok\", \"foo(\"]}",
                &["spec.cluster.namespaceRegexes[1]: invalid regex \"foo(\": unclosed group"],
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
                    "spec.install.repository: \"http://charts.example.com\" must start with https:// or oci:// (http:// only for 127.0.0.1, localhost or [::1], or with tlsConfig.insecurePlainHTTP)",
                ],
            ),
            (
                "runtimeExtension: {agentChartRepository: \"ftp://charts.example.com\"}",
                &[
                    "spec.runtimeExtension.agentChartRepository: \"ftp://charts.example.com\" must start with https:// or oci:// (http:// only for 127.0.0.1, localhost or [::1], or with tlsConfig.insecurePlainHTTP)",
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
            assert_eq!(is_allowed_repository(url, false), ok, "{url}");
            assert!(
                is_allowed_repository(url, true) || url.starts_with("ftp") || url == "https://"
            );
        }
    }
}
