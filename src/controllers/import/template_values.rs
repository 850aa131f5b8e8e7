//! The `templateValues` of a Fleet Cluster, with the Cluster's control plane and infrastructure
//! objects read through [`crate::controllers::import::references`]; a reference that cannot be
//! read is reported once (a log line and a Warning Event) and left out.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::EventType;
use serde_json::Value;

use crate::controllers::import::import_context::ImportContext;
use crate::controllers::import::references::Lookup;
use crate::model::capi::ClusterView;
use crate::model::fleet::template_values;

/// `templateValues` of the Cluster `json` with whatever references can be read; Events about
/// the ones that cannot go to `regarding`.
pub(super) async fn resolved(
    json: &Value,
    view: &ClusterView,
    regarding: &ObjectReference,
    ctx: &ImportContext,
) -> BTreeMap<String, Value> {
    let reported = &ctx.missing_references;
    let references = [
        (view.control_plane_ref.as_ref(), "ControlPlane"),
        (view.infrastructure_ref.as_ref(), "InfrastructureCluster"),
    ];
    let mut objects: [Option<Value>; 2] = [None, None];
    for ((reference, role), object) in references.into_iter().zip(&mut objects) {
        let Some(reference) = reference else {
            continue;
        };
        let problem = match ctx.references.lookup(reference).await {
            Lookup::Found(found) => {
                reported.resolved(&view.uid, role);
                *object = Some(found);
                continue;
            }
            Lookup::Missing => format!(
                "{role} {} {}/{} not found",
                reference.kind, reference.namespace, reference.name
            ),
            Lookup::Unavailable(reason) => format!("{role} cannot be read: {reason}"),
        };
        if reported.first_report(&view.uid, role) {
            tracing::warn!(cluster = %view.name, namespace = %view.namespace, %problem, "templateValues incomplete");
            ctx.base
                .event(
                    regarding,
                    EventType::Warning,
                    "TemplateValuesIncomplete",
                    "Creating",
                    format!("{problem}; templateValues are set without it"),
                )
                .await;
        }
    }
    let [control_plane, infrastructure] = objects;
    template_values(json, view, control_plane.as_ref(), infrastructure.as_ref())
}
