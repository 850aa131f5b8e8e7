//! A FleetAddonConfig with another name than `fleet-addon-config` is not read; the leader says
//! so once, in a log line and a Warning Event on the object. The API server refuses the name by
//! the CRD's CEL rule (proven first, through the sandbox, which evaluates it); the rest plays a
//! server whose CRD lacks the rule (an older CRD, or a server without CEL).

use crate::common;

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

/// Checks that the CRD's singleton rule refuses `other-config`, then removes the rule (as an
/// older CRD would not have it).
async fn refused_then_allowed(h: &Harness) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let configs: Api<FleetAddonConfig> = Api::all(h.client.clone());
    let object: FleetAddonConfig = serde_json::from_value(json!({
        "apiVersion": "addons.cluster.x-k8s.io/v1alpha1", "kind": "FleetAddonConfig",
        "metadata": {"name": "other-config"}, "spec": {"cluster": {}}
    }))
    .expect("config");
    match configs.create(&PostParams::default(), &object).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "{status:?}");
            assert!(
                status.message.contains(
                    "Invalid value: \"object\": FleetAddonConfig is a singleton: its name must be 'fleet-addon-config'"
                ),
                "{}",
                status.message
            );
        }
        other => panic!("other-config was not refused: {other:?}"),
    }
    let crds: Api<CustomResourceDefinition> = Api::all(h.client.clone());
    let name = "fleetaddonconfigs.addons.cluster.x-k8s.io";
    let mut crd = serde_json::to_value(crds.get(name).await.expect("CRD")).expect("json");
    for version in crd["spec"]["versions"].as_array_mut().expect("versions") {
        if let Some(schema) = version["schema"]["openAPIV3Schema"].as_object_mut() {
            schema.remove("x-kubernetes-validations");
        }
    }
    let crd: CustomResourceDefinition = serde_json::from_value(crd).expect("CRD");
    crds.replace(name, &PostParams::default(), &crd)
        .await
        .expect("replace the CRD");
}

#[tokio::test]
async fn a_misnamed_configuration_is_reported_once() {
    let mut h = Harness::new().await;
    refused_then_allowed(&h).await;
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
