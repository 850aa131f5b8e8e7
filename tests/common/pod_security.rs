//! The Pod Security Standards (`baseline`, `restricted`) as pure checks on a pod spec, and the
//! admission decision of the built-in PodSecurity admission plugin for a namespace.
//!
//! Written from the Pod Security Standards page (kubernetes.io/docs/concepts/security/
//! pod-security-standards, policy version `latest` as of Kubernetes 1.34) and the admission
//! page (namespace labels `pod-security.kubernetes.io/enforce`; the `PodSecurityConfiguration`
//! `defaults` and `exemptions.namespaces`). Test support: the tests prove the Fleet agent's pod is
//! admitted where Cluster API's quick-start enforces `baseline` (the provider labels the agent
//! namespace `privileged` whatever the pod, so it needs no such check itself).

use std::collections::BTreeMap;

use serde_json::Value;

/// The namespace label the PodSecurity admission plugin enforces.
pub const ENFORCE_LABEL: &str = "pod-security.kubernetes.io/enforce";

/// A Pod Security Standards level, from the most to the least permissive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Privileged,
    Baseline,
    Restricted,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }

    pub fn parse(text: &str) -> Option<Level> {
        match text {
            "privileged" => Some(Level::Privileged),
            "baseline" => Some(Level::Baseline),
            "restricted" => Some(Level::Restricted),
            _ => None,
        }
    }
}

/// Capabilities `baseline` allows containers to add.
const BASELINE_CAPABILITIES: [&str; 13] = [
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// SELinux types `baseline` allows.
const BASELINE_SELINUX_TYPES: [&str; 5] = [
    "",
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];

/// Sysctls `baseline` allows.
const SAFE_SYSCTLS: [&str; 11] = [
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
];

/// Volume types `restricted` allows.
const RESTRICTED_VOLUMES: [&str; 8] = [
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

fn containers(pod: &Value) -> impl Iterator<Item = &Value> {
    ["containers", "initContainers", "ephemeralContainers"]
        .into_iter()
        .flat_map(move |key| pod[key].as_array().into_iter().flatten())
}

fn container_name(container: &Value) -> &str {
    container["name"].as_str().unwrap_or("?")
}

/// What `baseline` forbids in `pod` (a pod spec), one message per problem; empty: allowed.
pub fn baseline_violations(pod: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for field in ["hostNetwork", "hostPID", "hostIPC"] {
        if pod[field].as_bool() == Some(true) {
            out.push(format!("host namespaces: {field}=true"));
        }
    }
    for volume in pod["volumes"].as_array().into_iter().flatten() {
        if volume.get("hostPath").is_some() {
            out.push(format!(
                "hostPath volume {}",
                volume["name"].as_str().unwrap_or("?")
            ));
        }
    }
    let pod_context = &pod["securityContext"];
    check_seccomp_not_unconfined(pod_context, "pod", &mut out);
    check_selinux(pod_context, "pod", &mut out);
    check_apparmor(pod_context, "pod", &mut out);
    if pod_context["windowsOptions"]["hostProcess"].as_bool() == Some(true) {
        out.push("pod: windowsOptions.hostProcess=true".to_string());
    }
    for sysctl in pod_context["sysctls"].as_array().into_iter().flatten() {
        let name = sysctl["name"].as_str().unwrap_or_default();
        if !SAFE_SYSCTLS.contains(&name) {
            out.push(format!("unsafe sysctl {name}"));
        }
    }
    for container in containers(pod) {
        let name = container_name(container);
        let context = &container["securityContext"];
        if context["privileged"].as_bool() == Some(true) {
            out.push(format!("container {name}: privileged"));
        }
        for capability in context["capabilities"]["add"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let capability = capability.as_str().unwrap_or_default();
            if !BASELINE_CAPABILITIES.contains(&capability) {
                out.push(format!("container {name}: adds capability {capability}"));
            }
        }
        for port in container["ports"].as_array().into_iter().flatten() {
            if port["hostPort"].as_i64().unwrap_or(0) != 0 {
                out.push(format!("container {name}: hostPort {}", port["hostPort"]));
            }
        }
        if context["procMount"]
            .as_str()
            .is_some_and(|mount| mount != "Default")
        {
            out.push(format!(
                "container {name}: procMount {}",
                context["procMount"]
            ));
        }
        if context["windowsOptions"]["hostProcess"].as_bool() == Some(true) {
            out.push(format!("container {name}: windowsOptions.hostProcess=true"));
        }
        check_seccomp_not_unconfined(context, &format!("container {name}"), &mut out);
        check_selinux(context, &format!("container {name}"), &mut out);
        check_apparmor(context, &format!("container {name}"), &mut out);
    }
    out
}

fn check_seccomp_not_unconfined(context: &Value, whose: &str, out: &mut Vec<String>) {
    if context["seccompProfile"]["type"] == "Unconfined" {
        out.push(format!("{whose}: seccompProfile Unconfined"));
    }
}

fn check_selinux(context: &Value, whose: &str, out: &mut Vec<String>) {
    let options = &context["seLinuxOptions"];
    let type_ = options["type"].as_str().unwrap_or_default();
    if !BASELINE_SELINUX_TYPES.contains(&type_) {
        out.push(format!("{whose}: seLinuxOptions.type {type_}"));
    }
    for field in ["user", "role"] {
        if options[field].as_str().is_some_and(|v| !v.is_empty()) {
            out.push(format!("{whose}: seLinuxOptions.{field} is set"));
        }
    }
}

fn check_apparmor(context: &Value, whose: &str, out: &mut Vec<String>) {
    if context["appArmorProfile"]["type"] == "Unconfined" {
        out.push(format!("{whose}: appArmorProfile Unconfined"));
    }
}

/// What `restricted` forbids in `pod` beyond `baseline`; empty (with no baseline violation):
/// allowed.
pub fn restricted_violations(pod: &Value) -> Vec<String> {
    let mut out = baseline_violations(pod);
    for volume in pod["volumes"].as_array().into_iter().flatten() {
        let allowed = volume
            .as_object()
            .into_iter()
            .flat_map(|v| v.keys())
            .filter(|key| *key != "name")
            .all(|key| RESTRICTED_VOLUMES.contains(&key.as_str()));
        if !allowed {
            out.push(format!(
                "volume {} has a type restricted does not allow",
                volume["name"].as_str().unwrap_or("?")
            ));
        }
    }
    let pod_context = &pod["securityContext"];
    if pod_context["runAsUser"].as_i64() == Some(0) {
        out.push("pod: runAsUser=0".to_string());
    }
    for container in containers(pod) {
        let name = container_name(container);
        let context = &container["securityContext"];
        if context["allowPrivilegeEscalation"].as_bool() != Some(false) {
            out.push(format!(
                "container {name}: allowPrivilegeEscalation is not false"
            ));
        }
        let non_root = context["runAsNonRoot"]
            .as_bool()
            .or_else(|| pod_context["runAsNonRoot"].as_bool());
        if non_root != Some(true) {
            out.push(format!("container {name}: runAsNonRoot is not true"));
        }
        if context["runAsUser"].as_i64() == Some(0) {
            out.push(format!("container {name}: runAsUser=0"));
        }
        let seccomp = context["seccompProfile"]["type"]
            .as_str()
            .or_else(|| pod_context["seccompProfile"]["type"].as_str());
        if !matches!(seccomp, Some("RuntimeDefault" | "Localhost")) {
            out.push(format!(
                "container {name}: seccompProfile is not RuntimeDefault or Localhost"
            ));
        }
        let capabilities = &context["capabilities"];
        let drops_all = capabilities["drop"]
            .as_array()
            .is_some_and(|drop| drop.iter().any(|c| c == "ALL"));
        if !drops_all {
            out.push(format!("container {name}: capabilities do not drop ALL"));
        }
        for capability in capabilities["add"].as_array().into_iter().flatten() {
            if capability != "NET_BIND_SERVICE" {
                out.push(format!("container {name}: adds capability {capability}"));
            }
        }
    }
    out
}

/// Whether `pod` meets `level`.
pub fn allows(level: Level, pod: &Value) -> bool {
    match level {
        Level::Privileged => true,
        Level::Baseline => baseline_violations(pod).is_empty(),
        Level::Restricted => restricted_violations(pod).is_empty(),
    }
}

/// The strictest level `pod` meets: what its namespace must enforce at most.
pub fn required_level(pod: &Value) -> Level {
    [Level::Restricted, Level::Baseline]
        .into_iter()
        .find(|level| allows(*level, pod))
        .unwrap_or(Level::Privileged)
}

/// A cluster's PodSecurity admission configuration: the `enforce` default and the exempt
/// namespaces (`PodSecurityConfiguration` `defaults.enforce`, `exemptions.namespaces`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admission {
    pub default_enforce: Level,
    pub exempt_namespaces: Vec<String>,
}

impl Admission {
    /// Reads a `PodSecurityConfiguration` (as embedded in an `AdmissionConfiguration`'s plugin
    /// `configuration`).
    pub fn from_configuration(configuration: &Value) -> Result<Admission, String> {
        let enforce = configuration["defaults"]["enforce"]
            .as_str()
            .unwrap_or("privileged");
        Ok(Admission {
            default_enforce: Level::parse(enforce)
                .ok_or_else(|| format!("defaults.enforce: unknown level {enforce:?}"))?,
            exempt_namespaces: configuration["exemptions"]["namespaces"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
        })
    }

    /// Whether a pod is admitted into `namespace` with `labels`: exempt namespaces admit all;
    /// otherwise the namespace's enforce label, or the default, must allow it.
    pub fn admits(
        &self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
        pod: &Value,
    ) -> Result<(), Vec<String>> {
        if self.exempt_namespaces.iter().any(|ns| ns == namespace) {
            return Ok(());
        }
        let level = labels
            .get(ENFORCE_LABEL)
            .and_then(|level| Level::parse(level))
            .unwrap_or(self.default_enforce);
        let violations = match level {
            Level::Privileged => Vec::new(),
            Level::Baseline => baseline_violations(pod),
            Level::Restricted => restricted_violations(pod),
        };
        if violations.is_empty() {
            Ok(())
        } else {
            Err(violations)
        }
    }
}
