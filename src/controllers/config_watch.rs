//! Watches `FleetAddonConfig/fleet-addon-config` and publishes the effective configuration.

use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};

use crate::api::FleetAddonConfig;
use crate::context::ConfigSender;
use crate::model::config::EffectiveConfig;
use crate::model::turtles;
use crate::probes::Readiness;

/// Readiness check name: the configuration has been read once.
pub const READY_CHECK: &str = "config";

/// Keeps `sender` up to date until the stream ends (it only ends when the task is cancelled).
/// Publishes only when the effective configuration changes (status writes do not wake anyone).
pub async fn run(client: Client, sender: ConfigSender, readiness: Readiness) {
    readiness.register(READY_CHECK);
    let groups = client.list_api_groups().await.map(|list| list.groups);
    let turtles = (groups.iter().flatten()).any(|g| g.name == turtles::TURTLES_API_GROUP);
    let api: Api<FleetAddonConfig> = Api::all(client);
    let config =
        watcher::Config::default().fields(&format!("metadata.name={}", FleetAddonConfig::NAME));
    let mut current: Option<FleetAddonConfig> = None;
    let mut pending: Option<FleetAddonConfig> = None;
    // During a (re)list the object is only known once the list is complete.
    let mut listing = true;
    let mut stream = watcher(api, config)
        .backoff(crate::controllers::watch_backoff::watch_backoff())
        .boxed();
    loop {
        let event = match stream.try_next().await {
            Ok(Some(event)) => event,
            Ok(None) => return,
            Err(err) => {
                tracing::warn!(%err, "watching FleetAddonConfig");
                continue;
            }
        };
        match event {
            watcher::Event::Init => {
                pending = None;
                listing = true;
            }
            watcher::Event::InitApply(object) => pending = Some(object),
            watcher::Event::InitDone => {
                current = pending.take();
                listing = false;
                readiness.set(READY_CHECK, true);
            }
            watcher::Event::Apply(object) => current = Some(object),
            watcher::Event::Delete(_) => current = None,
        }
        if !listing {
            publish(&sender, current.as_ref(), turtles);
        }
    }
}

fn publish(sender: &ConfigSender, object: Option<&FleetAddonConfig>, turtles: bool) {
    let next = EffectiveConfig::resolve(object);
    sender.send_if_modified(|config| {
        if config.as_deref() == Some(&next) {
            return false;
        }
        for problem in &next.problems {
            tracing::warn!(%problem, "FleetAddonConfig problem");
        }
        if let Some(warning) = turtles::agent_namespace_warning(turtles, &next) {
            tracing::warn!("{warning}");
        }
        tracing::info!(
            present = object.is_some(),
            generation = ?next.generation,
            "effective configuration changed"
        );
        *config = Some(Arc::new(next));
        true
    });
}
