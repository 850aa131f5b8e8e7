//! Says so when a FleetAddonConfig has another name than `fleet-addon-config`.
//!
//! The provider reads only the singleton (the CRD's CEL rule refuses other names on a real API
//! server, but a server without CEL, or a CRD installed by hand, accepts them). Such an object
//! would otherwise be ignored silently: the leader logs a warning and records a Warning Event on
//! it, once per object (by uid), and forgets it when it is deleted.

use std::collections::BTreeSet;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use kube::api::Api;
use kube::runtime::events::EventType;
use kube::runtime::{WatchStreamExt, metadata_watcher, watcher};
use kube::{Resource, ResourceExt};

use crate::api::FleetAddonConfig;
use crate::context::Context;

/// Event reason on a FleetAddonConfig that is not read.
pub const REASON: &str = "IgnoredConfiguration";

/// Whether an object of `name` is ignored (pure).
pub fn ignored(name: &str) -> bool {
    name != FleetAddonConfig::NAME
}

/// Runs until `ctx.shutdown` (leader only: one warning per object, not one per replica).
pub async fn run(ctx: Arc<Context>) {
    let api: Api<FleetAddonConfig> = Api::all(ctx.controllers.clone());
    let mut stream = metadata_watcher(api, watcher::Config::default())
        .backoff(crate::controllers::watch_backoff::watch_backoff())
        .boxed();
    // Uids of ignored objects already reported, and those seen since the last (re)list: a relist
    // keeps only the reported ones still there, so both stay bounded by what exists.
    let mut reported: BTreeSet<String> = BTreeSet::new();
    let mut listed: BTreeSet<String> = BTreeSet::new();
    loop {
        let event = tokio::select! {
            () = ctx.shutdown.cancelled() => return,
            event = stream.try_next() => event,
        };
        let event = match event {
            Ok(Some(event)) => event,
            Ok(None) => return,
            Err(err) => {
                tracing::debug!(%err, "watching FleetAddonConfigs");
                continue;
            }
        };
        match event {
            watcher::Event::Apply(object) | watcher::Event::InitApply(object) => {
                let name = object.name_any();
                if !ignored(&name) {
                    continue;
                }
                let uid = object.uid().unwrap_or_default();
                listed.insert(uid.clone());
                if !reported.insert(uid) {
                    continue;
                }
                let note = format!(
                    "FleetAddonConfig {name} is ignored: the provider reads only {}",
                    FleetAddonConfig::NAME
                );
                tracing::warn!(config = %name, "{note}");
                ctx.event(
                    &object.object_ref(&()),
                    EventType::Warning,
                    REASON,
                    "Ignore",
                    note,
                )
                .await;
            }
            watcher::Event::Delete(object) => {
                let uid = object.uid().unwrap_or_default();
                reported.remove(&uid);
                listed.remove(&uid);
            }
            watcher::Event::Init => listed.clear(),
            watcher::Event::InitDone => reported.retain(|uid| listed.contains(uid)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_singleton_is_read() {
        assert!(!ignored("fleet-addon-config"));
        assert!(ignored("other-config"));
        assert!(ignored("fleet-addon-config-2"));
    }
}
