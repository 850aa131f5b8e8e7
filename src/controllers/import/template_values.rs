//! The `templateValues` of a Fleet Cluster, with the Cluster's control plane and infrastructure
//! objects read through [`crate::controllers::import::references`]; a reference that cannot be
//! read is reported once (a log line and a Warning Event) and left out.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::EventType;
use serde_json::Value;

use crate::controllers::import::import_context::ImportContext;
use crate::controllers::import::references::Lookup;
use crate::model::capi::{ClusterView, ProviderRef};
use crate::model::fleet::template_values;

/// `templateValues` of the Cluster `json` with whatever references can be read; Events about
/// the ones that cannot go to `regarding`.
pub(super) async fn resolved(
    json: &Value,
    view: &ClusterView,
    regarding: &ObjectReference,
    ctx: &ImportContext,
) -> BTreeMap<String, Value> {
    let control_plane = read(
        view,
        view.control_plane_ref.as_ref(),
        "ControlPlane",
        regarding,
        ctx,
    )
    .await;
    let infrastructure = read(
        view,
        view.infrastructure_ref.as_ref(),
        "InfrastructureCluster",
        regarding,
        ctx,
    )
    .await;
    template_values(json, view, control_plane.as_ref(), infrastructure.as_ref())
}

/// The object `reference` names, or `None`, reported the first time it cannot be read.
async fn read(
    view: &ClusterView,
    reference: Option<&ProviderRef>,
    role: &'static str,
    regarding: &ObjectReference,
    ctx: &ImportContext,
) -> Option<Value> {
    let reference = reference?;
    let reported = &ctx.missing_references;
    let problem = match ctx.references.lookup(reference).await {
        Lookup::Found(object) => {
            reported.resolved(&view.uid, role);
            return Some(object);
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
    None
}
