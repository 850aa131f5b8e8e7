//! Importing CAPI Clusters and ClusterClasses into Fleet: controllers over shared caches.
//!
//! - [`clusters`]: CAPI Cluster → Fleet Cluster (+ registration token), finalizer, cleanup: it
//!   observes, [`crate::model::import::plan`] plans, the runner writes;
//! - [`namespaces`]: per namespace, the Fleet workspace annotation, cross-namespace
//!   ClusterGroups and BundleNamespaceMappings;
//! - [`classes`]: ClusterClass → ClusterGroup, and orphaned class groups;
//! - [`mappings::reconcile_mapping`]: BundleNamespaceMappings whose namespace is terminating
//!   or gone;
//! - [`status`]: `FleetAddonConfig` `status.clusters`;
//! - [`health`]: the `FleetReady` condition on imported CAPI Clusters.
//!
//! A configuration change re-evaluates every object; so does the periodic resync of Clusters.

pub mod classes;
pub mod clusters;
pub mod health;
pub mod import_context;
pub mod mappings;
pub mod namespace_triggers;
pub mod namespaces;
pub mod references;
pub mod rollout_lint;
pub mod status;
pub mod stores;

use std::future::ready;
use std::sync::Arc;

use fleet_api_rs::fleet_clustergroup::ClusterGroup;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::core::{PartialObjectMeta, Resource};
use kube::runtime::controller::{Config, Controller};
use kube::runtime::reflector::ObjectRef;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_stream::wrappers::UnboundedReceiverStream;

use crate::api::{CachedFleetCluster, CapiCluster, CapiClusterClass};
use crate::apply::expectations::Key;
use crate::context::Context;
use crate::model::capi::ClassRef;
use import_context::{ImportContext, observed, retry};
use references::References;
use stores::Stores;

/// Readiness check: the import caches hold their first full lists.
pub const READY_CHECK: &str = "import-caches";

/// Concurrent reconciles per controller.
const CONCURRENCY: u16 = 8;

/// Runs the import controllers until shutdown.
pub async fn run(base: Arc<Context>) {
    base.readiness.register(READY_CHECK);
    let mut config = base.config.clone();
    if crate::context::wait_for_config(&mut config).await.is_none() {
        return;
    }
    let mut reflectors = JoinSet::new();
    let (stores, mut hubs, watches) = Stores::new(&base.controllers, &base.flags);
    let (cluster_tx, cluster_rx) = mpsc::unbounded_channel();
    let (namespace_tx, namespace_rx) = mpsc::unbounded_channel();
    let (class_tx, class_rx) = mpsc::unbounded_channel();
    let references = References::new(
        base.controllers.clone(),
        base.flags.watch_namespace().map(str::to_string),
        cluster_tx.clone(),
        base.shutdown.clone(),
    );
    let (ready_tx, ready_rx) = tokio::sync::watch::channel(false);
    let ctx = Arc::new(ImportContext::new(
        base.clone(),
        stores.clone(),
        references,
        ready_rx,
    ));

    let mut tasks = JoinSet::new();
    {
        let (stores, readiness) = (stores.clone(), base.readiness.clone());
        tasks.spawn(async move {
            if stores.wait_until_ready().await {
                readiness.set(READY_CHECK, true);
                let _ = ready_tx.send(true);
            }
        });
    }
    tasks.spawn(status::run(ctx.clone(), cluster_tx.clone()));
    tasks.spawn(fan_out_config_changes(
        ctx.clone(),
        config,
        cluster_tx,
        namespace_tx,
        class_tx,
    ));

    // Cluster controller. The echoes of its own writes (and of the health controller's, which
    // it does not read) are left out of its feeds: it decided the state they show.
    let naming = base.config.clone();
    let cluster_stores = stores.clone();
    let namespace_inputs = namespace_triggers::ClusterInputs::default();
    let clusters = Controller::for_shared_stream(
        hubs.clusters
            .subscribe_skipping(skipping(&ctx, clusters::skips_cluster_change)),
        stores.clusters.clone(),
    )
    .with_config(Config::default().concurrency(CONCURRENCY))
    .watches_shared_stream(
        hubs.fleet_clusters.subscribe_skipping(skipping(
            &ctx,
            |ctx, fleet: &CachedFleetCluster| {
                ctx.expectations.own_echo_of(fleet, Key::fleet_cluster)
            },
        )),
        move |fleet: Arc<CachedFleetCluster>| owning_cluster(&*fleet, &naming),
    )
    .watches_shared_stream(
        hubs.namespaces.subscribe(),
        move |namespace: Arc<PartialObjectMeta<Namespace>>| {
            namespace_inputs.clusters_to_reconcile(&cluster_stores, &namespace)
        },
    )
    .watches_shared_stream(
        hubs.tokens.subscribe_skipping(skipping(&ctx, |ctx, token| {
            ctx.expectations.own_echo_of(token, Key::token)
        })),
        |token| {
            Some(
                ObjectRef::<CapiCluster>::new(&token.name_any())
                    .within(&token.namespace().unwrap_or_default()),
            )
        },
    )
    .watches_shared_stream(hubs.classes.subscribe(), {
        let (stores, classes) = (
            stores.clone(),
            namespace_triggers::ClassAnnotations::default(),
        );
        move |class: Arc<CapiClusterClass>| classes.clusters_to_reconcile(&stores, &class)
    })
    .reconcile_on(UnboundedReceiverStream::new(cluster_rx))
    .graceful_shutdown_on(cancelled(&base))
    .run(
        observed(clusters::CONTROLLER, clusters::reconcile),
        retry(clusters::CONTROLLER),
        ctx.clone(),
    )
    .for_each(|_| ready(()));

    // FleetReady condition controller.
    let health_naming = base.config.clone();
    let health = health::controller(
        ctx.clone(),
        hubs.clusters
            .subscribe_skipping(skipping(&ctx, health::skips_own_echo)),
        hubs.fleet_clusters.subscribe(),
        hubs.namespaces.subscribe(),
        move |fleet| owning_cluster(fleet, &health_naming),
        base.config.clone(),
    );

    // Namespace controller.
    let class_ctx = ctx.clone();
    let triggers = namespace_triggers::NamespaceTriggers::new(ctx.clone());
    let namespaces =
        Controller::for_shared_stream(hubs.namespaces.subscribe(), stores.namespaces.clone())
            .with_config(Config::default().concurrency(CONCURRENCY))
            .watches_shared_stream(
                hubs.clusters
                    .subscribe_marked(skipping(&ctx, namespaces::skips_cluster_change))
                    .filter_map(move |(cluster, origin)| {
                        ready(triggers.after_change(&cluster, origin).map(|_| cluster))
                    }),
                |cluster: Arc<CapiCluster>| cluster.namespace().map(|ns| ObjectRef::new(&ns)),
            )
            .watches_shared_stream(hubs.groups.subscribe(), |group: Arc<ClusterGroup>| {
                group.namespace().map(|ns| ObjectRef::new(&ns))
            })
            .watches_shared_stream(
                hubs.mappings.subscribe(),
                |mapping: Arc<crate::api::BundleNamespaceMapping>| {
                    Some(ObjectRef::new(&mapping.name_any()))
                },
            )
            .watches_shared_stream(
                hubs.classes.subscribe(),
                move |class: Arc<CapiClusterClass>| {
                    let class = ClassRef {
                        name: class.name_any(),
                        namespace: class.namespace().unwrap_or_default(),
                    };
                    class_ctx
                        .stores
                        .namespaces_using_class(&class)
                        .into_iter()
                        .map(|ns| ObjectRef::new(&ns))
                        .collect::<Vec<_>>()
                },
            )
            .reconcile_on(UnboundedReceiverStream::new(namespace_rx))
            .graceful_shutdown_on(cancelled(&base))
            .run(
                observed(namespaces::CONTROLLER, namespaces::reconcile),
                retry(namespaces::CONTROLLER),
                ctx.clone(),
            )
            .for_each(|_| ready(()));

    // ClusterClass controller.
    let classes = Controller::for_shared_stream(hubs.classes.subscribe(), stores.classes.clone())
        .with_config(Config::default().concurrency(CONCURRENCY))
        .watches_shared_stream(hubs.groups.subscribe(), |group: Arc<ClusterGroup>| {
            classes::is_class_group(&group).then(|| {
                ObjectRef::<CapiClusterClass>::new(&group.name_any())
                    .within(&group.namespace().unwrap_or_default())
            })
        })
        .reconcile_on(UnboundedReceiverStream::new(class_rx))
        .graceful_shutdown_on(cancelled(&base))
        .run(
            observed(classes::CONTROLLER, classes::reconcile),
            retry(classes::CONTROLLER),
            ctx.clone(),
        )
        .for_each(|_| ready(()));

    // Class ClusterGroups whose class is gone, and legacy finalizers on groups.
    let groups = Controller::for_shared_stream(hubs.groups.subscribe(), stores.groups.clone())
        .with_config(Config::default().concurrency(2))
        .watches_shared_stream(hubs.classes.subscribe(), |class: Arc<CapiClusterClass>| {
            Some(
                ObjectRef::<ClusterGroup>::new(&class.name_any())
                    .within(&class.namespace().unwrap_or_default()),
            )
        })
        .graceful_shutdown_on(cancelled(&base))
        .run(
            observed(classes::GROUP_CONTROLLER, classes::reconcile_group),
            retry(classes::GROUP_CONTROLLER),
            ctx.clone(),
        )
        .for_each(|_| ready(()));

    // Mappings of ours whose namespace is terminating or gone.
    let mapping_ctx = ctx.clone();
    let mappings =
        Controller::for_shared_stream(hubs.mappings.subscribe(), stores.mappings.clone())
            .with_config(Config::default().concurrency(2))
            .watches_shared_stream(
                hubs.namespaces.subscribe(),
                move |namespace: Arc<PartialObjectMeta<Namespace>>| {
                    mappings::mappings_named(&mapping_ctx, &namespace.name_any())
                },
            )
            .graceful_shutdown_on(cancelled(&base))
            .run(
                observed(mappings::MAPPING_CONTROLLER, mappings::reconcile_mapping),
                retry(mappings::MAPPING_CONTROLLER),
                ctx.clone(),
            )
            .for_each(|_| ready(()));

    // The move controller (self-managed Clusters) shares the Cluster watch and cache; it is
    // experimental and runs only with its feature gate (docs/self-managed.md says why).
    let moves = base
        .flags
        .feature_enabled(crate::cli::SELF_MANAGED_MOVE)
        .then(|| {
            crate::controllers::r#move::controller(
                base.clone(),
                hubs.clusters.subscribe(),
                stores.clusters.clone(),
            )
        });

    // Every subscription is taken: the watches can start.
    watches.start(hubs, &mut reflectors);

    // Each controller on its own task, so their reconciles use every worker thread.
    let mut controllers = JoinSet::new();
    controllers.spawn(clusters);
    controllers.spawn(namespaces);
    controllers.spawn(classes);
    controllers.spawn(groups);
    controllers.spawn(health);
    controllers.spawn(mappings);
    controllers.spawn(rollout_lint::controller(ctx.clone()));
    if let Some(moves) = moves {
        controllers.spawn(moves);
    }
    tokio::select! {
        _ = controllers.join_next() => {}
        () = base.shutdown.cancelled() => {}
    }
    controllers.shutdown().await;
    tasks.shutdown().await;
    reflectors.shutdown().await;
}

/// A predicate for [`stores::Hub::subscribe_skipping`] that reads the shared context.
fn skipping<K>(
    ctx: &Arc<ImportContext>,
    skip: impl Fn(&ImportContext, &K) -> bool + Send + Sync + 'static,
) -> impl Fn(&K) -> bool + Send + Sync + 'static {
    let ctx = ctx.clone();
    move |object| skip(&ctx, object)
}

/// Re-evaluates everything when the effective configuration changes.
async fn fan_out_config_changes(
    ctx: Arc<ImportContext>,
    mut config: crate::context::ConfigReceiver,
    clusters: mpsc::UnboundedSender<ObjectRef<CapiCluster>>,
    namespaces: mpsc::UnboundedSender<ObjectRef<PartialObjectMeta<Namespace>>>,
    classes: mpsc::UnboundedSender<ObjectRef<CapiClusterClass>>,
) {
    config.mark_unchanged();
    while config.changed().await.is_ok() {
        for cluster in ctx.stores.clusters.state() {
            let _ = clusters.send(ObjectRef::from_obj(&*cluster));
        }
        for namespace in ctx.stores.namespaces.state() {
            let _ = namespaces.send(ObjectRef::from_obj(&*namespace));
        }
        for class in ctx.stores.classes.state() {
            let _ = classes.send(ObjectRef::from_obj(&*class));
        }
        ctx.counts_changed.notify_one();
    }
}

/// The CAPI Cluster a Fleet Cluster belongs to: its owner, or the one its name was made from.
fn owning_cluster(
    fleet: &impl Resource,
    config: &crate::context::ConfigReceiver,
) -> Option<ObjectRef<CapiCluster>> {
    let namespace = fleet.namespace()?;
    if let Some(owner) = fleet
        .owner_references()
        .iter()
        .find(|o| o.kind == "Cluster" && o.api_version.starts_with("cluster.x-k8s.io/"))
    {
        return Some(ObjectRef::new(&owner.name).within(&namespace));
    }
    let name = fleet.name_any();
    let config = config.borrow().clone();
    let capi_name = match config.as_ref().and_then(|c| c.cluster.as_ref()) {
        Some(import) => name
            .strip_prefix(import.name_prefix.as_str())?
            .strip_suffix(import.name_suffix.as_str())?
            .to_string(),
        None => name,
    };
    Some(ObjectRef::new(&capi_name).within(&namespace))
}

fn cancelled(base: &Context) -> impl Future<Output = ()> + Send + Sync + 'static {
    base.shutdown.clone().cancelled_owned()
}
