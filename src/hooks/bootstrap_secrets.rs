//! Which bootstrap Secrets (`<cluster>-fleet-agent-bootstrap`) exist, as the hooks see it: a
//! metadata-only watch of the Secrets labelled `cluster.x-k8s.io/cluster-name` (the label every
//! bootstrap Secret carries, also those written by earlier releases), keeping only bootstrap
//! Secrets, on every replica (every replica serves the hooks).
//!
//! # Only "present" comes from the cache
//!
//! GeneratePatches adds the bootstrap exactly when the Secret exists, and an answer that flips
//! between "with" and "without" the patch rolls a control plane. A cache can be wrong two ways:
//!
//! - **It says absent while the Secret exists** (not synced yet after a start or a relist, the
//!   watch behind this replica's own write or another replica's): answering without the patch
//!   from that would drop the patch of a Cluster that already had it. So a miss is never an
//!   answer: the handler confirms it with a live GET, as it did before this cache existed.
//! - **It says present while the Secret is gone**: a bootstrap Secret is written once (only a
//!   replaced registration token's values are rewritten, which changes no patch); it goes away
//!   only with its Cluster (BeforeClusterDelete, garbage collection) or
//!   by hand. For a Cluster being deleted the patch no longer matters; a Secret deleted by hand
//!   changes the patch (the docs say so) a watch latency later instead of at once. The patch
//!   names the Secret, never its content, so a stale "present" never puts stale data on a node.
//!
//! So at steady state (every Cluster prepared) GeneratePatches and BeforeClusterCreate answer
//! without a request to the API server, and only Clusters without a Secret cost a GET.

use futures::{StreamExt, TryStreamExt, future};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, metadata_watcher, watcher};
use tokio_util::sync::CancellationToken;

use crate::model::agent_patch::SecretFormat;
use crate::names;

/// The suffix of every bootstrap Secret's name ([`names::bootstrap_secret_name`]).
fn is_bootstrap_secret_name(name: &str) -> bool {
    name.ends_with(&names::bootstrap_secret_name(""))
}

/// The hooks' view of the bootstrap Secrets (cheap to clone). Until its [`BootstrapSecretsFeed`] has listed
/// once, every lookup misses (and the handlers read the API server, as without a cache).
#[derive(Clone)]
pub struct BootstrapSecrets {
    store: Store<PartialObjectMeta<Secret>>,
}

impl Default for BootstrapSecrets {
    /// A view that is never fed: every lookup misses (tests and embedders that do not run a
    /// [`BootstrapSecretsFeed`]).
    fn default() -> Self {
        let (store, _writer) = reflector::store();
        Self { store }
    }
}

/// What keeps a [`BootstrapSecrets`] up to date: run it with [`BootstrapSecretsFeed::run`].
pub struct BootstrapSecretsFeed {
    writer: reflector::store::Writer<PartialObjectMeta<Secret>>,
}

impl BootstrapSecrets {
    /// A view and the feed that fills it.
    pub fn new() -> (Self, BootstrapSecretsFeed) {
        let (store, writer) = reflector::store();
        (Self { store }, BootstrapSecretsFeed { writer })
    }

    /// Whether the bootstrap Secret of Cluster `namespace/cluster` is known to exist. `false`
    /// means "not known", never "absent" (see the module documentation).
    pub fn known_present(&self, namespace: &str, cluster: &str) -> bool {
        self.known_secret(namespace, cluster).is_some()
    }

    /// What the bootstrap Secret of Cluster `namespace/cluster` holds, when it is known to exist
    /// (`None`: not known, never "absent").
    pub fn known(&self, namespace: &str, cluster: &str) -> Option<SecretFormat> {
        self.known_secret(namespace, cluster)
            .map(|secret| SecretFormat::of(secret.metadata.annotations.as_ref()))
    }

    /// The cached metadata of the bootstrap Secret of Cluster `namespace/cluster` (only this
    /// provider's annotations are kept).
    pub fn known_secret(
        &self,
        namespace: &str,
        cluster: &str,
    ) -> Option<std::sync::Arc<PartialObjectMeta<Secret>>> {
        let key = ObjectRef::new(&names::bootstrap_secret_name(cluster)).within(namespace);
        self.store.get(&key)
    }
}

impl BootstrapSecretsFeed {
    /// Watches the Secrets' metadata (in `namespace` only, with `--namespace`) until `shutdown`;
    /// errors are retried with kube's default backoff, the view keeping its last state.
    pub async fn run(
        self,
        client: kube::Client,
        namespace: Option<String>,
        shutdown: CancellationToken,
    ) {
        let api: Api<Secret> = match namespace.as_deref() {
            Some(ns) => Api::namespaced(client, ns),
            None => Api::all(client),
        };
        let config = watcher::Config::default().labels(names::CAPI_CLUSTER_NAME_LABEL);
        let stream = metadata_watcher(api, config)
            .default_backoff()
            .try_filter(|event| future::ready(keeps(event)))
            .modify(|secret| {
                secret.metadata.managed_fields = None;
                secret.metadata.labels = None;
                // Ours only: what the Secret holds and which token it was rendered from.
                if let Some(annotations) = secret.metadata.annotations.as_mut() {
                    annotations.retain(|key, _| {
                        key == names::BOOTSTRAP_FORMAT_ANNOTATION
                            || key == names::REGISTRATION_TOKEN_UID_ANNOTATION
                    });
                }
            });
        let applied = reflector::reflector(self.writer, stream).for_each(|event| {
            if let Err(err) = event {
                tracing::warn!(%err, "watching the bootstrap Secrets (the hooks read them from the API server meanwhile)");
            }
            future::ready(())
        });
        tokio::select! {
            () = applied => {}
            () = shutdown.cancelled() => {}
        }
    }
}

/// Whether a watch event concerns a bootstrap Secret (the list markers always pass, so the
/// view is replaced as a whole after a relist).
fn keeps(event: &watcher::Event<PartialObjectMeta<Secret>>) -> bool {
    match event {
        watcher::Event::Apply(secret)
        | watcher::Event::InitApply(secret)
        | watcher::Event::Delete(secret) => secret
            .metadata
            .name
            .as_deref()
            .is_some_and(is_bootstrap_secret_name),
        watcher::Event::Init | watcher::Event::InitDone => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;

    impl BootstrapSecrets {
        /// Whether the view holds no Secret.
        fn is_empty(&self) -> bool {
            self.store.is_empty()
        }
    }

    fn secret(name: &str) -> PartialObjectMeta<Secret> {
        PartialObjectMeta {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some("team-a".to_string()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn only_bootstrap_secrets_are_kept() {
        let rows = [
            (
                watcher::Event::Apply(secret("c1-fleet-agent-bootstrap")),
                true,
            ),
            (
                watcher::Event::InitApply(secret("c1-fleet-agent-bootstrap")),
                true,
            ),
            (
                watcher::Event::Delete(secret("c1-fleet-agent-bootstrap")),
                true,
            ),
            (watcher::Event::Apply(secret("c1-kubeconfig")), false),
            (watcher::Event::InitApply(secret("c1-ca")), false),
            (
                watcher::Event::Delete(secret("fleet-agent-bootstrap-c1")),
                false,
            ),
            (watcher::Event::Init, true),
            (watcher::Event::InitDone, true),
        ];
        for (event, expected) in rows {
            assert_eq!(keeps(&event), expected, "{event:?}");
        }
    }

    #[test]
    fn a_view_without_a_feed_never_knows_a_secret() {
        let view = BootstrapSecrets::default();
        assert!(!view.known_present("team-a", "c1"));
        assert!(view.is_empty());
    }

    #[test]
    fn a_fed_view_knows_what_was_listed_and_forgets_what_was_deleted() {
        let (view, mut feed) = BootstrapSecrets::new();
        assert!(!view.known_present("team-a", "c1"), "not listed yet");
        feed.writer.apply_watcher_event(&watcher::Event::Init);
        feed.writer
            .apply_watcher_event(&watcher::Event::InitApply(secret(
                "c1-fleet-agent-bootstrap",
            )));
        assert!(
            !view.known_present("team-a", "c1"),
            "not until the list is complete"
        );
        feed.writer.apply_watcher_event(&watcher::Event::InitDone);
        assert!(view.known_present("team-a", "c1"));
        assert!(!view.known_present("team-b", "c1"), "namespaced");
        assert!(!view.known_present("team-a", "c2"));
        feed.writer
            .apply_watcher_event(&watcher::Event::Delete(secret("c1-fleet-agent-bootstrap")));
        assert!(!view.known_present("team-a", "c1"));
    }
}
