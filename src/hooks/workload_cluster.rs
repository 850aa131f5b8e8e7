//! The workload cluster as BeforeClusterDelete sees it while a Cluster's Fleet workloads are
//! removed: reached through the kubeconfig Secret Cluster API writes for every Cluster
//! (`<cluster>-kubeconfig`, key `value`: kubernetes-sigs/cluster-api v1.11.0
//! `util/secret/consts.go` `KubeconfigDataName`), it is asked what still holds cloud resources
//! ([`crate::model::teardown::leftovers`]). Clusters behind NAT cannot be reached from here:
//! the answer is then why, and the hook waits a settle period instead.
//!
//! Only reads, with short timeouts (the hook has 10 s). A kubeconfig that would make this
//! process run a command (`exec`, `auth-provider`) or read its files (paths instead of inline
//! data) is not used: whoever can write that Secret must not get to run code here.

use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret, Service};
use kube::api::{Api, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::Value;

use crate::model::teardown;
use crate::names;

/// Connecting to the workload cluster's API server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// One response of it.
const READ_TIMEOUT: Duration = Duration::from_secs(3);
/// The whole check (both lists).
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// What is left on the workload cluster of Cluster `namespace/cluster` (outside `kube-system`
/// and `agent_namespace`), or why it cannot be told (a reason that stays the same for one
/// cause, for the condition's message).
pub async fn leftovers(
    management: &kube::Client,
    namespace: &str,
    cluster: &str,
    agent_namespace: &str,
) -> Result<Vec<String>, String> {
    let secret_name = names::kubeconfig_secret_name(cluster);
    let secrets: Api<Secret> = Api::namespaced(management.clone(), namespace);
    let secret = secrets
        .get_opt(&secret_name)
        .await
        .map_err(|err| match err {
            kube::Error::Api(status) => format!(
                "reading Secret {namespace}/{secret_name}: {} ({})",
                status.message, status.code
            ),
            _ => format!("reading Secret {namespace}/{secret_name} failed"),
        })?
        .ok_or_else(|| format!("no kubeconfig Secret {namespace}/{secret_name}"))?;
    let text = secret
        .data
        .as_ref()
        .and_then(|data| data.get("value"))
        .and_then(|value| String::from_utf8(value.0.clone()).ok())
        .ok_or_else(|| {
            format!("Secret {namespace}/{secret_name} has no kubeconfig under key value")
        })?;
    let kubeconfig = Kubeconfig::from_yaml(&text).map_err(|_| {
        format!("the kubeconfig in Secret {namespace}/{secret_name} does not parse")
    })?;
    if let Some(problem) = refused(&kubeconfig) {
        return Err(format!(
            "the kubeconfig in Secret {namespace}/{secret_name} {problem}, which this provider does not use"
        ));
    }
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|_| {
                format!("the kubeconfig in Secret {namespace}/{secret_name} cannot be used")
            })?;
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    config.read_timeout = Some(READ_TIMEOUT);
    config.write_timeout = Some(READ_TIMEOUT);
    let server = config.cluster_url.to_string();
    let client = kube::Client::try_from(config)
        .map_err(|_| format!("no client for the workload cluster's API server at {server}"))?;
    let unanswered = |what: &str, err: kube::Error| match err {
        kube::Error::Api(status) => format!(
            "its API server at {server} answered {} listing {what}",
            status.code
        ),
        _ => format!("its API server at {server} cannot be reached"),
    };
    let lists = async {
        let services = Api::<Service>::all(client.clone())
            .list(&ListParams::default())
            .await
            .map_err(|err| unanswered("Services", err))?;
        let claims = Api::<PersistentVolumeClaim>::all(client.clone())
            .list_metadata(&ListParams::default())
            .await
            .map_err(|err| unanswered("PersistentVolumeClaims", err))?;
        let services: Vec<Value> = services
            .items
            .iter()
            .filter_map(|svc| serde_json::to_value(svc).ok())
            .collect();
        let claims: Vec<Value> = claims
            .items
            .iter()
            .filter_map(|pvc| serde_json::to_value(pvc).ok())
            .collect();
        Ok::<_, String>(teardown::leftovers(&services, &claims, agent_namespace))
    };
    tokio::time::timeout(CHECK_TIMEOUT, lists)
        .await
        .map_err(|_| {
            format!(
                "its API server at {server} did not answer within {}s",
                CHECK_TIMEOUT.as_secs()
            )
        })?
}

/// What makes a kubeconfig unusable here: a command to run or a file of this process to read
/// (`None`: only inline data and tokens).
fn refused(kubeconfig: &Kubeconfig) -> Option<&'static str> {
    for user in kubeconfig
        .auth_infos
        .iter()
        .filter_map(|u| u.auth_info.as_ref())
    {
        if user.exec.is_some() {
            return Some("runs an exec plugin");
        }
        if user.auth_provider.is_some() {
            return Some("uses an auth provider");
        }
        if user.client_certificate.is_some()
            || user.client_key.is_some()
            || user.token_file.is_some()
        {
            return Some("reads credentials from files");
        }
    }
    if kubeconfig
        .clusters
        .iter()
        .filter_map(|c| c.cluster.as_ref())
        .any(|c| c.certificate_authority.is_some())
    {
        return Some("reads its CA from a file");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What Cluster API writes (kubeconfig `value` of `<cluster>-kubeconfig`: inline CA, client
    /// certificate and key) is used; anything that runs a command or reads a file is not.
    #[test]
    fn only_inline_kubeconfigs_are_used() {
        let capi = r#"
apiVersion: v1
kind: Config
clusters:
- name: c1
  cluster: {server: "https://10.0.0.1:6443", certificate-authority-data: "LS0t"}
contexts:
- name: c1-admin@c1
  context: {cluster: c1, user: c1-admin}
current-context: c1-admin@c1
users:
- name: c1-admin
  user: {client-certificate-data: "LS0t", client-key-data: "LS0t"}
"#;
        let parse = |text: &str| Kubeconfig::from_yaml(text).expect("kubeconfig");
        assert_eq!(refused(&parse(capi)), None);
        let rows = [
            (
                "user: {client-certificate-data: \"LS0t\", client-key-data: \"LS0t\"}",
                "user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, args: [-c, id]}}",
                "runs an exec plugin",
            ),
            (
                "user: {client-certificate-data: \"LS0t\", client-key-data: \"LS0t\"}",
                "user: {auth-provider: {name: oidc}}",
                "uses an auth provider",
            ),
            (
                "user: {client-certificate-data: \"LS0t\", client-key-data: \"LS0t\"}",
                "user: {tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token}",
                "reads credentials from files",
            ),
            (
                "certificate-authority-data: \"LS0t\"",
                "certificate-authority: /etc/ssl/ca.crt",
                "reads its CA from a file",
            ),
        ];
        for (from, to, want) in rows {
            let text = capi.replace(from, to);
            assert_ne!(text, capi, "{to}");
            assert_eq!(refused(&parse(&text)), Some(want), "{to}");
        }
    }
}
