//! The rollout lint (docs/rollout.md): with `spec.cluster.rollout` set, Warning Events on each
//! Bundle whose `rolloutStrategy` does not work with our waves
//! ([`crate::model::rollout::strategy::lint`]). Bundles are watched metadata only (their
//! bodies hold every manifest); a Bundle is read when its generation is new to us, and each
//! finding is published once per Bundle generation, so Fleet's status writes cost no Event.

use std::sync::Arc;

use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};
use serde_json::Value;

use super::import_context::ImportContext;
use crate::Result;
use crate::controllers::r#move::FleetBundle;
use crate::model::plan::{Plan, Write};
use crate::model::rollout::strategy::{BundleTargets, Labels, Linted, lint};
use crate::model::rollout::walk::Strategy;
use crate::names;

pub const CONTROLLER: &str = "bundle-lint";

/// Reason of the lint's Warning Events.
pub const REASON: &str = "RolloutStrategyLint";

pub async fn reconcile(
    bundle: Arc<PartialObjectMeta<FleetBundle>>,
    ctx: Arc<ImportContext>,
) -> Result<Action> {
    let config = ctx.base.config.borrow().clone();
    let rollout = config
        .as_ref()
        .and_then(|c| c.cluster.as_ref()?.rollout.clone());
    let (Some(_), Some(uid), Some(namespace)) = (rollout, bundle.uid(), bundle.namespace()) else {
        return Ok(Action::await_change());
    };
    let generation = bundle.metadata.generation;
    let known = ctx
        .bundle_lint
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&uid)
        .and_then(|l| {
            (l.generation == generation)
                .then(|| l.read.clone())
                .flatten()
        });
    let read = match known {
        Some(read) => read,
        None => {
            let api: Api<FleetBundle> = Api::namespaced(ctx.base.controllers.clone(), &namespace);
            let Some(full) = api.get_opt(&bundle.name_any()).await? else {
                return Ok(Action::await_change());
            };
            let spec = full.body.get("spec").cloned().unwrap_or(Value::Null);
            let strategy = spec.get("rolloutStrategy").cloned().unwrap_or(Value::Null);
            let read = Strategy::from_json(&strategy)
                .and_then(|s| Ok((s, BundleTargets::from_spec(&spec)?)));
            let mut memory = ctx.bundle_lint.lock().unwrap_or_else(|e| e.into_inner());
            let entry = memory.entry(uid.clone()).or_default();
            if entry.generation != full.metadata.generation {
                *entry = Linted {
                    generation: full.metadata.generation,
                    ..Linted::default()
                };
            }
            entry.read = Some(read.clone());
            read
        }
    };
    // A strategy we do not model (partitions by cluster name or group) is not linted.
    let Ok((strategy, targets)) = read else {
        return Ok(Action::await_change());
    };
    let groups: Vec<(Labels, Option<kube::core::Selector>, String)> =
        (ctx.stores.groups.state().iter())
            .filter(|g| g.namespace().as_deref() == Some(&namespace))
            .map(|g| {
                let selector = serde_json::to_value(g.spec.selector.as_ref()).ok();
                let selector = selector.and_then(|s| {
                    serde_json::from_value::<
                        k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
                    >(s)
                    .ok()
                });
                let labels: Labels = g.labels().clone().into_iter().collect();
                (
                    labels,
                    selector.and_then(|s| kube::core::Selector::try_from(s).ok()),
                    g.name_any(),
                )
            })
            .collect();
    let mut clusters = Vec::new();
    for fleet in ctx.stores.fleet_clusters.state() {
        if fleet.metadata.namespace.as_deref() != Some(&namespace) {
            continue;
        }
        let Some(typed) = fleet.typed() else { continue };
        let labels: Labels = typed
            .metadata
            .labels
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect();
        if !labels.contains_key(names::ROLLOUT_WAVE_LABEL) {
            continue;
        }
        let in_groups: Vec<(String, Labels)> = (groups.iter())
            .filter(|(_, s, _)| {
                s.as_ref()
                    .is_some_and(|s| kube::core::SelectorExt::matches(s, &labels))
            })
            .map(|(l, _, n)| (n.clone(), l.clone()))
            .collect();
        let name = typed.metadata.name.clone().unwrap_or_default();
        if targets.deploys_to(&name, &labels, &in_groups) {
            clusters.push((name, labels));
        }
    }
    let Ok(findings) = lint(&strategy, &clusters) else {
        return Ok(Action::await_change());
    };
    let regarding = bundle.object_ref(&());
    let mut plan = Plan::default();
    {
        let mut memory = ctx.bundle_lint.lock().unwrap_or_else(|e| e.into_inner());
        let entry = memory.entry(uid).or_default();
        // One Event per kind: the recorder folds Events of one reason and action into a series
        // that keeps the first note.
        for kind in ["CannotGate", "FrozenPartition", "UnmatchedClusters"] {
            let new: Vec<String> = (findings.iter())
                .filter(|(k, f)| *k == kind && entry.published.insert(f.clone()))
                .map(|(_, f)| f.clone())
                .collect();
            if !new.is_empty() {
                let note = new.join("; ");
                let event = Write::event(&regarding, EventType::Warning, REASON, kind, note);
                plan.writes.push(event);
            }
        }
    }
    ctx.run(plan).await
}

/// The lint controller: its own metadata watch of the Bundles (in `--namespace` when set), and
/// every Bundle again when the configuration changes.
pub fn controller(ctx: Arc<ImportContext>) -> impl std::future::Future<Output = ()> + Send {
    use futures::StreamExt;
    use kube::runtime::controller::{Config, Controller};
    use kube::runtime::{WatchStreamExt, reflector, watcher};
    let base = ctx.base.clone();
    let (reader, writer) = reflector::store();
    let events = crate::controllers::r#move::bundle_events(&base, watcher::Config::default())
        .reflect(writer)
        .touched_objects();
    Controller::for_stream(events, reader)
        .with_config(Config::default().concurrency(2))
        .reconcile_all_on(base.config_changes())
        .graceful_shutdown_on(base.shutdown.clone().cancelled_owned())
        .run(
            super::import_context::observed(CONTROLLER, reconcile),
            super::import_context::retry(CONTROLLER),
            ctx,
        )
        .for_each(|_| std::future::ready(()))
}
