//! Narrow watches of the objects Fleet's settings are read from, as reconcile triggers.
//!
//! Which objects matter depends on the spec (`inferLocal` needs the CA ConfigMap and the API
//! server endpoints; a custom CA names its own ConfigMap or Secret; the feature-gate ConfigMap
//! is named in the spec), so the set is computed from the effective configuration by
//! [`watch_targets`] and the watches follow it. Each watch is a metadata-only watch of one name
//! (field selector) or one label, so no Secret content is ever held here.

use std::collections::BTreeSet;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Endpoints, Secret};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, metadata_watcher, watcher};
use kube::{Client, Resource};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::model::api_server::{
    KUBERNETES_SERVICE, KUBERNETES_SERVICE_NAMESPACE, ROOT_CA_CONFIG_MAP, SERVICE_NAME_LABEL,
};
use crate::model::config::{EffectiveConfig, ServerSource};
use crate::names;

/// One watched object (or set of objects).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WatchTarget {
    ConfigMap {
        namespace: String,
        name: String,
    },
    Secret {
        namespace: String,
        name: String,
    },
    /// EndpointSlices of a Service (by the `kubernetes.io/service-name` label).
    EndpointSlices {
        namespace: String,
        service: String,
    },
    Endpoints {
        namespace: String,
        name: String,
    },
}

/// The objects whose changes should re-run the reconcile for `config`.
pub fn watch_targets(config: &EffectiveConfig) -> BTreeSet<WatchTarget> {
    let mut targets = BTreeSet::new();
    match &config.fleet.server {
        Some(ServerSource::InferLocal) => {
            targets.insert(WatchTarget::ConfigMap {
                namespace: KUBERNETES_SERVICE_NAMESPACE.to_string(),
                name: ROOT_CA_CONFIG_MAP.to_string(),
            });
            targets.insert(WatchTarget::EndpointSlices {
                namespace: KUBERNETES_SERVICE_NAMESPACE.to_string(),
                service: KUBERNETES_SERVICE.to_string(),
            });
            targets.insert(WatchTarget::Endpoints {
                namespace: KUBERNETES_SERVICE_NAMESPACE.to_string(),
                name: KUBERNETES_SERVICE.to_string(),
            });
        }
        Some(ServerSource::Custom {
            ca_ref: Some(reference),
            ..
        }) => {
            if let (Some(namespace), Some(name)) = (&reference.namespace, &reference.name) {
                let (namespace, name) = (namespace.clone(), name.clone());
                targets.insert(if reference.kind.as_deref() == Some("Secret") {
                    WatchTarget::Secret { namespace, name }
                } else {
                    WatchTarget::ConfigMap { namespace, name }
                });
            }
        }
        _ => {}
    }
    // When someone else installs Fleet the settings go into Fleet's own ConfigMap, which
    // Fleet's chart rewrites on upgrade: watch it to put them back.
    if config.fleet.server.is_some() && !super::steps::installs_fleet(config) {
        targets.insert(WatchTarget::ConfigMap {
            namespace: names::DEFAULT_FLEET_NAMESPACE.to_string(),
            name: names::FLEET_CONTROLLER_CONFIG_MAP.to_string(),
        });
    }
    // The registry credentials and CA of the installation: a fixed Secret is used at once
    // (after the backoff of the failure it fixes).
    if super::steps::installs_fleet(config)
        && let Some(install) = &config.install
    {
        for reference in install.access.secrets() {
            targets.insert(WatchTarget::Secret {
                namespace: reference.namespace.clone(),
                name: reference.name.clone(),
            });
        }
    }
    if let Some(reference) = &config.fleet.feature_gates_config_map
        && let (Some(namespace), Some(name)) = (&reference.namespace, &reference.name)
    {
        targets.insert(WatchTarget::ConfigMap {
            namespace: namespace.clone(),
            name: name.clone(),
        });
    }
    targets
}

/// Keeps one watch per target of the latest set, sending `()` on `trigger` whenever a watched
/// object changes, until `shutdown`.
pub async fn run(
    client: Client,
    mut targets: watch::Receiver<BTreeSet<WatchTarget>>,
    trigger: mpsc::Sender<()>,
    shutdown: CancellationToken,
) {
    loop {
        let current = targets.borrow_and_update().clone();
        let mut tasks = JoinSet::new();
        for target in current {
            tasks.spawn(watch_one(client.clone(), target, trigger.clone()));
        }
        tokio::select! {
            changed = targets.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            () = shutdown.cancelled() => return,
        }
        tasks.shutdown().await;
    }
}

async fn watch_one(client: Client, target: WatchTarget, trigger: mpsc::Sender<()>) {
    tracing::debug!(?target, "watching");
    match &target {
        WatchTarget::ConfigMap { namespace, name } => {
            let api: Api<ConfigMap> = Api::namespaced(client, namespace);
            forward(api, by_name(name), &target, trigger).await;
        }
        WatchTarget::Secret { namespace, name } => {
            let api: Api<Secret> = Api::namespaced(client, namespace);
            forward(api, by_name(name), &target, trigger).await;
        }
        WatchTarget::EndpointSlices { namespace, service } => {
            let api: Api<EndpointSlice> = Api::namespaced(client, namespace);
            let config =
                watcher::Config::default().labels(&format!("{SERVICE_NAME_LABEL}={service}"));
            forward(api, config, &target, trigger).await;
        }
        WatchTarget::Endpoints { namespace, name } => {
            let api: Api<Endpoints> = Api::namespaced(client, namespace);
            forward(api, by_name(name), &target, trigger).await;
        }
    }
}

fn by_name(name: &str) -> watcher::Config {
    watcher::Config::default().fields(&format!("metadata.name={name}"))
}

/// Sends a trigger for every change after the first complete list (the reconcile that set up
/// the watch already read the objects), and after every re-list (changes may have been missed).
async fn forward<K>(
    api: Api<K>,
    config: watcher::Config,
    target: &WatchTarget,
    trigger: mpsc::Sender<()>,
) where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    let mut stream = metadata_watcher(api, config)
        .backoff(crate::controllers::watch_backoff::watch_backoff())
        .boxed();
    let mut listed_once = false;
    while let Some(event) = stream.next().await {
        let fire = match event {
            Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => true,
            Ok(watcher::Event::InitDone) => std::mem::replace(&mut listed_once, true),
            Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => false,
            Err(err) => {
                tracing::warn!(?target, %err, "watch failed; retrying");
                false
            }
        };
        // A full channel already holds a pending trigger: dropping this one loses nothing.
        if fire && trigger.try_send(()).is_err() && trigger.is_closed() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::FleetAddonConfigSpec;

    fn targets(yaml: &str) -> Vec<WatchTarget> {
        let spec: FleetAddonConfigSpec = serde_yaml::from_str(yaml).expect("test spec");
        watch_targets(&EffectiveConfig::from_spec(&spec))
            .into_iter()
            .collect()
    }

    fn cm(namespace: &str, name: &str) -> WatchTarget {
        WatchTarget::ConfigMap {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    #[test]
    fn targets_follow_the_spec() {
        assert_eq!(targets("{}"), []);
        assert_eq!(targets("install: {followLatest: true}"), []);
        let secret = |namespace: &str, name: &str| WatchTarget::Secret {
            namespace: namespace.into(),
            name: name.into(),
        };
        assert_eq!(
            targets(
                "install: {followLatest: true, repository: \"oci://r.example.com/c\", credentials: {secret: {name: pull, namespace: auth}}, tlsConfig: {caSecret: {name: ca, namespace: auth}}}"
            ),
            [secret("auth", "ca"), secret("auth", "pull")]
        );
        // Not when helm does not run (the feature gates go into a ConfigMap).
        assert_eq!(
            targets(
                "install: {followLatest: true, repository: \"oci://r.example.com/c\", credentials: {secret: {name: pull, namespace: auth}}}\nconfig: {featureGates: {configMap: {ref: {name: rc, namespace: cattle-system}}}}"
            ),
            [cm("cattle-system", "rc")]
        );
        assert_eq!(
            targets("config: {server: {inferLocal: true}}"),
            [
                cm("cattle-fleet-system", "fleet-controller"),
                cm("default", "kube-root-ca.crt"),
                WatchTarget::EndpointSlices {
                    namespace: "default".into(),
                    service: "kubernetes".into()
                },
                WatchTarget::Endpoints {
                    namespace: "default".into(),
                    name: "kubernetes".into()
                },
            ]
        );
        // With spec.install the settings go through helm values: no fleet-controller watch.
        assert_eq!(
            targets("config: {server: {inferLocal: true}}\ninstall: {version: 0.1.0}").len(),
            3
        );
        assert_eq!(
            targets(
                "config: {server: {custom: {apiServerUrl: \"https://x:6443\", apiServerCaConfigRef: {kind: Secret, name: ca, namespace: certs}}}}\ninstall: {followLatest: true}"
            ),
            [WatchTarget::Secret {
                namespace: "certs".into(),
                name: "ca".into()
            }]
        );
        assert_eq!(
            targets(
                "config: {server: {custom: {apiServerCaConfigRef: {name: ca, namespace: certs}}}}\ninstall: {followLatest: true}"
            ),
            [cm("certs", "ca")]
        );
        assert_eq!(
            targets(
                "config: {featureGates: {configMap: {ref: {name: rancher-config, namespace: cattle-system}}}}"
            ),
            [cm("cattle-system", "rancher-config")]
        );
        // spec.install is ignored in the values-ConfigMap mode: Fleet's ConfigMap is watched.
        assert_eq!(
            targets(
                "install: {followLatest: true}\nconfig: {server: {custom: {apiServerUrl: \"https://x:6443\"}}, featureGates: {configMap: {ref: {name: rancher-config, namespace: cattle-system}}}}"
            ),
            [
                cm("cattle-fleet-system", "fleet-controller"),
                cm("cattle-system", "rancher-config"),
            ]
        );
    }
}
