//! A workload cluster's API server, reached through the kubeconfig Secret Cluster API writes for
//! every Cluster (`<cluster>-kubeconfig`, key `value`: kubernetes-sigs/cluster-api v1.11.0
//! `util/secret/consts.go` `KubeconfigDataName`). Used by BeforeClusterDelete (what still holds
//! cloud resources during a teardown) and by the move controller (the Secrets and owner
//! references of a self-managed move, and its rollback).
//!
//! A kubeconfig that would make this process run a command (`exec`, `auth-provider`) or read its
//! files (paths instead of inline data) is not used: whoever can write that Secret must not get
//! to run code here.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::names;

/// How long to wait for the workload cluster's API server.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// Connecting.
    pub connect: Duration,
    /// One response (and one request body).
    pub read: Duration,
}

/// A client for the API server of Cluster `namespace/cluster`, from its kubeconfig Secret read
/// with `management`; or why there is none (a message that stays the same for one cause).
pub async fn connect(
    management: &kube::Client,
    namespace: &str,
    cluster: &str,
    timeouts: Timeouts,
) -> Result<(kube::Client, String), String> {
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
    config.connect_timeout = Some(timeouts.connect);
    config.read_timeout = Some(timeouts.read);
    config.write_timeout = Some(timeouts.read);
    let server = config.cluster_url.to_string();
    let client = kube::Client::try_from(config)
        .map_err(|_| format!("no client for the workload cluster's API server at {server}"))?;
    Ok((client, server))
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
