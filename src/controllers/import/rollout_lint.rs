//! The rollout lint (docs/rollout.md): with `spec.cluster.rollout` set, Warning Events on each
//! Bundle whose `rolloutStrategy` does not work with our waves
//! ([`crate::model::rollout::strategy::lint`]). Bundles are watched metadata only (their
//! bodies hold every manifest), only while waves are configured, and only a new generation
//! reconciles: Fleet's status writes cost nothing. Each finding is published once per Bundle
//! generation.

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

/// Whether `spec.cluster.rollout` is set: the lint runs (and watches Bundles) only then.
fn configured(config: &Option<Arc<crate::model::config::EffectiveConfig>>) -> bool {
    config
        .as_ref()
        .is_some_and(|c| c.cluster.as_ref().is_some_and(|c| c.rollout.is_some()))
}

/// Forgets the Bundles that are gone: a deleted one, and after each (re)list every one the
/// cache no longer holds (a deletion while the watch was down is never seen).
fn forget_gone(
    memory: &crate::model::rollout::strategy::LintMemory,
    event: &kube::runtime::watcher::Event<PartialObjectMeta<FleetBundle>>,
    cache: &kube::runtime::reflector::Store<PartialObjectMeta<FleetBundle>>,
) {
    use kube::runtime::watcher::Event;
    let mut memory = memory.lock().unwrap_or_else(|e| e.into_inner());
    match event {
        Event::Delete(bundle) => drop(memory.remove(&bundle.uid().unwrap_or_default())),
        Event::InitDone => {
            let live: std::collections::HashSet<String> =
                cache.state().iter().filter_map(|b| b.uid()).collect();
            memory.retain(|uid, _| live.contains(uid));
        }
        _ => {}
    }
}

/// The lint controller, while `spec.cluster.rollout` is set (none, no Bundle watch): its own
/// metadata watch of the Bundles (in `--namespace` when set), passing on a new generation only
/// (Fleet writes Bundle status all the time), and every Bundle again when the configuration
/// changes.
pub async fn controller(ctx: Arc<ImportContext>) {
    use futures::StreamExt;
    use kube::runtime::controller::{Config, Controller};
    use kube::runtime::{WatchStreamExt, predicates, reflector, watcher};
    let base = ctx.base.clone();
    let mut config = base.config.clone();
    while config.wait_for(configured).await.is_ok() {
        let (reader, writer) = reflector::store();
        let (cache, memory) = (reader.clone(), ctx.clone());
        let events = crate::controllers::r#move::bundle_events(&base, watcher::Config::default())
            .reflect(writer)
            .inspect(move |e| {
                if let Ok(e) = e {
                    forget_gone(&memory.bundle_lint, e, &cache);
                }
            })
            .touched_objects()
            .predicate_filter(predicates::generation, Default::default());
        let lint = Controller::for_stream(events, reader)
            .with_config(Config::default().concurrency(2))
            .reconcile_all_on(base.config_changes())
            .graceful_shutdown_on(base.shutdown.clone().cancelled_owned())
            .run(
                super::import_context::observed(CONTROLLER, reconcile),
                super::import_context::retry(CONTROLLER),
                ctx.clone(),
            )
            .for_each(|_| std::future::ready(()));
        tokio::select! {
            () = lint => return,
            _ = config.wait_for(|c| !configured(c)) => {}
        }
        ctx.bundle_lint
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
    base.shutdown.cancelled().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::{ObjectMeta, PartialObjectMetaExt};
    use kube::runtime::{reflector, watcher::Event};

    /// The lint's memory drops a deleted Bundle, and after a (re)list every Bundle the cache
    /// no longer holds.
    #[test]
    fn forgets_bundles_that_are_gone() {
        let bundle = |uid: &str| {
            let meta = ObjectMeta {
                name: Some(uid.into()),
                namespace: Some("default".into()),
                uid: Some(uid.into()),
                ..ObjectMeta::default()
            };
            meta.into_response_partial::<FleetBundle>()
        };
        let cases = [
            (
                "deleted",
                &["a", "b"][..],
                Event::Delete(bundle("b")),
                &["a", "c"][..],
            ),
            ("relisted", &["b"], Event::InitDone, &["b"]),
            (
                "applied",
                &["a", "b"],
                Event::Apply(bundle("c")),
                &["a", "b", "c"],
            ),
        ];
        for (case, cached, event, left) in cases {
            let (cache, mut writer) = reflector::store();
            for uid in cached {
                writer.apply_watcher_event(&Event::Apply(bundle(uid)));
            }
            let memory = crate::model::rollout::strategy::LintMemory::default();
            for uid in ["a", "b", "c"] {
                (memory.lock().unwrap()).insert(uid.into(), Default::default());
            }
            forget_gone(&memory, &event, &cache);
            let mut kept: Vec<String> = memory.lock().unwrap().keys().cloned().collect();
            kept.sort();
            assert_eq!(kept, left, "{case}");
        }
    }
}
