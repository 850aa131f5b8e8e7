//! The Fleet agent settings of one Cluster, resolved from the configuration, its ClusterClass's
//! `agent-settings` annotation (from the cache) and the overrides ([`crate::model::agent_settings`]),
//! and the Warning Events that hold a Cluster whose settings are invalid.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use kube::runtime::events::EventType;

use crate::api::AgentSettings;
use crate::controllers::import::import_context::ImportContext;
use crate::model::agent_settings::{self, Carrier, LayerProblem};
use crate::model::capi::ClusterView;
use crate::model::config::ClusterImport;
use crate::names;

/// The Cluster's agent settings, or `None` when a layer is invalid: then the Fleet Cluster is
/// held as it is (or uncreated), its agent keeps running as it does until the annotation is
/// fixed (which reconciles the Cluster again), and Warning Events say why.
pub(super) async fn settings(
    ctx: &ImportContext,
    view: &ClusterView,
    import: &ClusterImport,
    regarding: &ObjectReference,
) -> Option<AgentSettings> {
    let class_annotation = view.class.as_ref().and_then(|class| {
        ctx.stores
            .class(&class.namespace, &class.name)?
            .metadata
            .annotations
            .as_ref()?
            .get(names::AGENT_SETTINGS_ANNOTATION)
            .cloned()
    });
    match import.agent_settings(view, class_annotation.as_deref()) {
        Ok(agent) => Some(agent),
        Err(problems) => {
            report_invalid(ctx, view, &problems, regarding).await;
            None
        }
    }
}

/// A Warning Event on each object carrying a problem: the ClusterClass for its annotation's,
/// the Cluster for its own; the Cluster's Event names all of them (it is what is held).
async fn report_invalid(
    ctx: &ImportContext,
    view: &ClusterView,
    problems: &[LayerProblem],
    regarding: &ObjectReference,
) {
    let all: Vec<String> = problems.iter().map(ToString::to_string).collect();
    tracing::warn!(cluster = %view.name, namespace = %view.namespace, problems = ?all,
        "invalid Fleet agent settings: the Fleet Cluster is left as it is");
    let held = format!(
        "Fleet agent settings invalid, the Fleet Cluster is left as it is until they are fixed: {}",
        all.join("; ")
    );
    ctx.base
        .event(
            regarding,
            EventType::Warning,
            agent_settings::INVALID_REASON,
            "Importing",
            held,
        )
        .await;
    let mut classes: Vec<(&str, &str, Vec<String>)> = Vec::new();
    for problem in problems {
        if let Carrier::ClusterClass { namespace, name } = &problem.carrier {
            match classes
                .iter_mut()
                .find(|(ns, n, _)| ns == namespace && n == name)
            {
                Some((_, _, errors)) => errors.push(problem.error.to_string()),
                None => classes.push((namespace, name, vec![problem.error.to_string()])),
            }
        }
    }
    for (namespace, name, errors) in classes {
        let Some(class) = ctx.stores.class(namespace, name) else {
            continue;
        };
        ctx.base
            .event(
                &class.object_ref(&()),
                EventType::Warning,
                agent_settings::INVALID_REASON,
                "Importing",
                format!(
                    "Fleet agent settings invalid, the Fleet Clusters of this class are left as they are until they are fixed: {}",
                    errors.join("; ")
                ),
            )
            .await;
    }
}
