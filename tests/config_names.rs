//! A FleetAddonConfig with another name than `fleet-addon-config` is not read; the leader says
//! so once, in a log line and a Warning Event on the object (a real API server refuses the name
//! by the CRD's CEL rule; a server without CEL, like the sandbox, accepts it).

mod common;

use caapf::api::FleetAddonConfig;
use caapf::controllers::misnamed_config::REASON;
use common::{Harness, eventually};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

async fn create_config(api: &Api<FleetAddonConfig>, name: &str) {
    let object: FleetAddonConfig = serde_json::from_value(json!({
        "apiVersion": "addons.cluster.x-k8s.io/v1alpha1", "kind": "FleetAddonConfig",
        "metadata": {"name": name}, "spec": {"cluster": {}}
    }))
    .expect("config");
    api.create(&PostParams::default(), &object)
        .await
        .expect("create");
}

/// The Events about `name` with our reason, and their total count (a repeated Event is one
/// object with a series).
async fn ignored_events(h: &Harness, name: &str) -> Option<(usize, i32)> {
    let events: Api<Event> = Api::all(h.client.clone());
    let found: Vec<Event> = events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(REASON)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
        })
        .collect();
    if found.is_empty() {
        return None;
    }
    let count = found
        .iter()
        .map(|e| e.series.as_ref().map_or(1, |s| s.count))
        .sum();
    Some((found.len(), count))
}

#[tokio::test]
async fn a_misnamed_configuration_is_reported_once() {
    let mut h = Harness::new().await;
    let configs: Api<FleetAddonConfig> = Api::all(h.client.clone());
    create_config(&configs, "other-config").await;
    h.start().await;
    let first = eventually("an Event about other-config", || async {
        ignored_events(&h, "other-config").await
    })
    .await;
    assert_eq!(first, (1, 1));
    let event = Api::<Event>::all(h.client.clone())
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .find(|e| e.reason.as_deref() == Some(REASON))
        .expect("event");
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert!(
        event
            .note
            .as_deref()
            .unwrap_or_default()
            .contains("reads only fleet-addon-config"),
        "{event:?}"
    );

    // A change to the object is not news, and the singleton itself is read, never reported.
    // Events are handled in order: once the Event about a second misnamed object exists, both
    // have been seen.
    configs
        .patch(
            "other-config",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}})),
        )
        .await
        .expect("patch");
    create_config(&configs, "fleet-addon-config").await;
    create_config(&configs, "another-config").await;
    eventually("an Event about another-config", || async {
        ignored_events(&h, "another-config").await
    })
    .await;
    assert_eq!(ignored_events(&h, "other-config").await, Some((1, 1)));
    assert_eq!(ignored_events(&h, "fleet-addon-config").await, None);
    h.stop().await;
}
