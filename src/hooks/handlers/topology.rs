//! Topology mutation hooks: GeneratePatches and DiscoverVariables. Deterministic: the same
//! request and the same bootstrap Secret always give the same answer (CAPI calls
//! GeneratePatches on every reconcile, and a changed patch rolls machines).
//!
//! The patch follows the Secret ([`crate::model::agent_bootstrap`]): a control-plane template
//! names the bootstrap Secret only once it exists, so a Cluster that never went through
//! BeforeClusterCreate never rolls onto machines whose bootstrap data cannot be generated; its
//! Secret is prepared in the background and CAPI's next topology reconcile adds the patch.

use base64::Engine;
use serde_json::{Value, json};

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;

use crate::hooks::handlers::create;
use crate::hooks::hook_context::HookContext;
use crate::hooks::types::{
    ClusterClassVariable, GeneratePatchesRequest, GeneratePatchesResponseItem, Hook, PatchType,
    Response, ResponseBody, Variable, VariableSchema,
};
use crate::model::agent_bootstrap::{
    FLEET_AGENT_VARIABLE, FleetAgentSetting, PatchPlan, patch_plan,
};
use crate::model::agent_patch::{SecretFormat, Template, bootstrap_patch, classify_template};
use crate::names;

/// The `fleetAgent` variable: a static schema, valid for the v1beta1 and v1beta2 variable types.
///
/// The top-level default makes Cluster API write `fleetAgent: {enabled: true}` into every Cluster
/// of a class using it (v1.11 `internal/topology/variables/cluster_variable_defaulting.go`
/// creates a missing variable only when its schema has a top-level default): a Cluster without
/// the variable does not use this extension, and BeforeClusterCreate can answer it at once.
///
/// Only `enabled`: the agent settings (namespace, tolerations, host network, environment) come
/// from FleetAddonConfig and land on the Fleet Cluster, so the bootstrap agent is the agent Fleet
/// keeps managing afterwards; a per-Cluster override here would be reverted by Fleet.
pub fn fleet_agent_variable() -> ClusterClassVariable {
    ClusterClassVariable {
        name: FLEET_AGENT_VARIABLE.to_string(),
        required: false,
        schema: VariableSchema {
            open_api_v3_schema: json!({
                "type": "object",
                "default": {"enabled": true},
                "description": "Fleet agent bootstrap by the Cluster API add-on provider for Fleet.",
                "properties": {
                    "enabled": {
                        "type": "boolean",
                        "default": true,
                        "description": "Install the Fleet agent on the first control-plane node, so the cluster registers with Fleet (agent-initiated) from its first boot. Changing it on an existing Cluster rolls its control plane."
                    }
                }
            }),
        },
    }
}

/// DiscoverVariables.
pub fn discover_variables() -> Response {
    Response::success(
        Hook::DiscoverVariables,
        ResponseBody::Variables {
            variables: vec![fleet_agent_variable()],
        },
    )
}

/// GeneratePatches as served: finds whether the Cluster's bootstrap Secret exists (only when a
/// control-plane template would be patched), prepares it in the background when it does not,
/// and answers [`generate_patches`]. An API error is a Failure (policy `Fail`: CAPI keeps the
/// current templates and retries), never an answer without the patch, which would roll machines.
pub async fn serve_generate_patches(
    ctx: &HookContext,
    request: &GeneratePatchesRequest,
) -> Response {
    let items = classified(request);
    let wanted = items
        .iter()
        .any(|item| matches!(item.template, Ok(Some(_))) && item.setting.enabled());
    if !wanted {
        return answer(request, &items, None);
    }
    let global = merged_variables(&request.variables, &[]);
    let (Some(name), Some(namespace)) = (
        global.cluster_field("name"),
        global.cluster_field("namespace"),
    ) else {
        return Response::failure(
            Some(Hook::GeneratePatches),
            "the builtin variable has no cluster.name or cluster.namespace",
        );
    };
    // "Present" may come from the watch; "absent" only from the API server: a stale miss would
    // drop the patch of a Cluster that has it and roll its control plane
    // ([`crate::hooks::bootstrap_secrets`]).
    if let Some(format) = ctx.bootstrap_secrets.known(namespace, name) {
        return answer(request, &items, Some(format));
    }
    let secrets: Api<Secret> = Api::namespaced(ctx.base.client.clone(), namespace);
    let secret = names::bootstrap_secret_name(name);
    match secrets.get_metadata_opt(&secret).await {
        Ok(Some(found)) => answer(
            request,
            &items,
            Some(SecretFormat::of(found.metadata.annotations.as_ref())),
        ),
        Ok(None) => {
            create::prepare_existing(ctx, namespace, name);
            answer(request, &items, None)
        }
        Err(err) => Response::failure(
            Some(Hook::GeneratePatches),
            format!("reading Secret {namespace}/{secret}: {err}"),
        ),
    }
}

/// GeneratePatches: one item per request item; control-plane templates get the bootstrap when
/// the control plane uses it and its Secret exists (`secret_exists`, written by this release),
/// the others an empty JSON patch.
pub fn generate_patches(request: &GeneratePatchesRequest, secret_exists: bool) -> Response {
    generate_patches_for(request, secret_exists.then_some(SecretFormat::CURRENT))
}

/// [`generate_patches`] for a bootstrap Secret of a given format (`None`: no Secret).
pub fn generate_patches_for(
    request: &GeneratePatchesRequest,
    secret: Option<SecretFormat>,
) -> Response {
    answer(request, &classified(request), secret)
}

/// A request item as this extension reads it: which template, and the variables it sees.
struct Classified {
    template: Result<Option<Template>, String>,
    variables: Variables,
    setting: FleetAgentSetting,
}

/// Each item classified once, for the decision to look for the Secret and for the answer.
fn classified(request: &GeneratePatchesRequest) -> Vec<Classified> {
    request
        .items
        .iter()
        .map(|item| {
            let variables = merged_variables(&request.variables, &item.variables);
            Classified {
                template: classify_template(&item.object),
                setting: variables.setting(),
                variables,
            }
        })
        .collect()
}

fn answer(
    request: &GeneratePatchesRequest,
    classified: &[Classified],
    secret: Option<SecretFormat>,
) -> Response {
    // The control plane's machine template (CAPI v1.11 patches/engine.go: its holder field path).
    let infra = request.items.iter().find(|item| {
        let path = &item.holder_reference.field_path;
        path.starts_with("spec.machineTemplate.") && path.ends_with("infrastructureRef")
    });
    for (item, seen) in request.items.iter().zip(classified) {
        if let (Some(infra), Some(_), Ok(Some(template))) = (infra, secret, &seen.template)
            && patch_plan(seen.setting, true) == PatchPlan::Patch
            && let Some(message) = crate::model::agent_patch::user_data_overflow(
                &infra.object,
                crate::model::agent_patch::user_data_format(&item.object, *template),
            )
        {
            return Response::failure(Some(Hook::GeneratePatches), message);
        }
    }
    let mut items = Vec::with_capacity(request.items.len());
    for (item, seen) in request.items.iter().zip(classified) {
        let patch = match item_patch(&item.object, seen, secret) {
            Ok(patch) => patch,
            Err(message) => {
                let kind = item.object["kind"].as_str().unwrap_or("template");
                let name = item.object["metadata"]["name"].as_str().unwrap_or_default();
                return Response::failure(
                    Some(Hook::GeneratePatches),
                    format!("{kind} {name}: {message}"),
                );
            }
        };
        let encoded = match serde_json::to_vec(&patch) {
            Ok(bytes) => base64::engine::general_purpose::STANDARD.encode(bytes),
            Err(err) => {
                return Response::failure(
                    Some(Hook::GeneratePatches),
                    format!("encoding a patch: {err}"),
                );
            }
        };
        items.push(GeneratePatchesResponseItem {
            uid: item.uid.clone(),
            patch_type: PatchType::JsonPatch,
            patch: encoded,
        });
    }
    Response::success(Hook::GeneratePatches, ResponseBody::Patches { items })
}

fn item_patch(
    object: &Value,
    seen: &Classified,
    secret: Option<SecretFormat>,
) -> Result<json_patch::Patch, String> {
    let Some(template) = seen.template.clone()? else {
        return Ok(json_patch::Patch::default());
    };
    let Some(format) = secret else {
        return Ok(json_patch::Patch::default());
    };
    if patch_plan(seen.setting, true) != PatchPlan::Patch {
        return Ok(json_patch::Patch::default());
    }
    let cluster_name = seen.variables.builtin["cluster"]["name"]
        .as_str()
        .filter(|name| !name.is_empty())
        .ok_or("the builtin variable has no cluster.name")?;
    bootstrap_patch(
        object,
        template,
        &names::bootstrap_secret_name(cluster_name),
        format,
    )
}

/// The variables this extension reads, item values over global ones (`builtin` merged field by
/// field, as CAPI's own helpers do).
struct Variables {
    builtin: Value,
    fleet_agent: Option<Value>,
}

impl Variables {
    /// The item's `fleetAgent` (item values are the control plane's overrides, if any).
    fn setting(&self) -> FleetAgentSetting {
        FleetAgentSetting::of(self.fleet_agent.as_ref(), None)
    }

    fn cluster_field(&self, field: &str) -> Option<&str> {
        self.builtin["cluster"][field]
            .as_str()
            .filter(|value| !value.is_empty())
    }
}

fn merged_variables(global: &[Variable], item: &[Variable]) -> Variables {
    let mut builtin = json!({});
    let mut fleet_agent = None;
    for variable in global.iter().chain(item) {
        match variable.name.as_str() {
            "builtin" => merge(&mut builtin, &variable.value),
            FLEET_AGENT_VARIABLE => fleet_agent = Some(variable.value.clone()),
            _ => {}
        }
    }
    Variables {
        builtin,
        fleet_agent,
    }
}

fn merge(into: &mut Value, from: &Value) {
    match (into, from) {
        (Value::Object(into), Value::Object(from)) => {
            for (key, value) in from {
                merge(into.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
        (into, from) => *into = from.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_objects_are_merged_item_over_global() {
        let global = [Variable {
            name: "builtin".into(),
            value: json!({"cluster": {"name": "c1", "namespace": "ns"}}),
        }];
        let item = [Variable {
            name: "builtin".into(),
            value: json!({"controlPlane": {"version": "v1.33.1"}, "cluster": {"name": "c2"}}),
        }];
        let merged = merged_variables(&global, &item);
        assert_eq!(
            merged.builtin,
            json!({"cluster": {"name": "c2", "namespace": "ns"}, "controlPlane": {"version": "v1.33.1"}})
        );
    }

    #[test]
    fn variable_schema_is_static_and_serializes_required() {
        let a = serde_json::to_value(fleet_agent_variable()).unwrap_or_default();
        let b = serde_json::to_value(fleet_agent_variable()).unwrap_or_default();
        assert_eq!(a, b);
        assert_eq!(a["required"], false);
        assert_eq!(
            a["schema"]["openAPIV3Schema"]["properties"]["enabled"]["default"],
            true
        );
        // Without a top-level default Cluster API never creates the variable on a Cluster.
        assert_eq!(
            a["schema"]["openAPIV3Schema"]["default"],
            json!({"enabled": true})
        );
    }
}
