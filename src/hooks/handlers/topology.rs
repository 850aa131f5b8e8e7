//! Topology mutation hooks: GeneratePatches and DiscoverVariables. Pure and deterministic: the
//! same request always gives the same answer (CAPI calls GeneratePatches on every reconcile, and
//! a changed patch rolls machines).

use base64::Engine;
use serde_json::{Value, json};

use crate::bootstrap;
use crate::bootstrap::patch::{classify, json_patch};
use crate::hooks::types::{
    ClusterClassVariable, GeneratePatchesRequest, GeneratePatchesResponseItem, Hook, PatchType,
    Response, ResponseBody, Variable, VariableSchema,
};

/// Name of the variable this extension defines.
pub const FLEET_AGENT_VARIABLE: &str = "fleetAgent";

/// The `fleetAgent` variable: a static schema, valid for the v1beta1 and v1beta2 variable types.
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

/// Whether `fleetAgent.enabled` (absent: true) allows the bootstrap.
pub fn fleet_agent_enabled(value: Option<&Value>) -> bool {
    value
        .and_then(|v| v.get("enabled"))
        .and_then(Value::as_bool)
        .unwrap_or(true)
}

/// GeneratePatches: one item per request item; control-plane templates get the bootstrap, the
/// others an empty JSON patch.
pub fn generate_patches(request: &GeneratePatchesRequest) -> Response {
    let mut items = Vec::with_capacity(request.items.len());
    for item in &request.items {
        let variables = merged_variables(&request.variables, &item.variables);
        let patch = match item_patch(&item.object, &variables) {
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

fn item_patch(object: &Value, variables: &Variables) -> Result<json_patch::Patch, String> {
    let Some(template) = classify(object)? else {
        return Ok(json_patch::Patch::default());
    };
    if !fleet_agent_enabled(variables.fleet_agent.as_ref()) {
        return Ok(json_patch::Patch::default());
    }
    let cluster_name = variables.builtin["cluster"]["name"]
        .as_str()
        .filter(|name| !name.is_empty())
        .ok_or("the builtin variable has no cluster.name")?;
    Ok(json_patch(
        object,
        template,
        &bootstrap::secret_name(cluster_name),
    ))
}

/// The variables this extension reads, item values over global ones (`builtin` merged field by
/// field, as CAPI's own helpers do).
struct Variables {
    builtin: Value,
    fleet_agent: Option<Value>,
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
    fn enabled_defaults_to_true() {
        assert!(fleet_agent_enabled(None));
        assert!(fleet_agent_enabled(Some(&json!({}))));
        assert!(fleet_agent_enabled(Some(&json!({"enabled": true}))));
        assert!(!fleet_agent_enabled(Some(&json!({"enabled": false}))));
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
    }
}
