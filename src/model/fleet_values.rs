//! The values Fleet gets: the `fleet` chart values document, the feature gates written into a
//! values ConfigMap (Rancher's `rancher-config`), and the `apiServerURL`/`apiServerCA` keys of
//! Fleet's own `fleet-controller` ConfigMap.
//!
//! Fixes of CAAPF bugs (research §13): each gate comes from its own flag (§13.1); gates are
//! merged into the user's `extraEnv` instead of overwriting its first two entries (§13.4);
//! entries using `valueFrom` are kept (§13.22).

use serde_json::{Map, Value, json};

use crate::model::config::FleetSettings;
use crate::model::json::{list_at, object_at};
use crate::names;

/// The Fleet API server settings resolved from `config.server` (each part optional: an unset
/// part is left as it is).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerValues {
    /// `apiServerURL`.
    pub url: Option<String>,
    /// `apiServerCA`, PEM text.
    pub ca_pem: Option<String>,
}

/// The feature-gate environment variables, in a fixed order.
pub fn gate_env(fleet: &FleetSettings) -> [(&'static str, String); 2] {
    [
        (
            names::EXPERIMENTAL_OCI_STORAGE,
            fleet.experimental_oci_storage.to_string(),
        ),
        (
            names::EXPERIMENTAL_HELM_OPS,
            fleet.experimental_helm_ops.to_string(),
        ),
    ]
}

/// A one-line summary of the gates for condition messages.
pub fn gate_summary(fleet: &FleetSettings) -> String {
    gate_env(fleet)
        .iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Sets each `(name, value)` in an `extraEnv` list: an entry with that name is updated in place
/// (a `valueFrom` is replaced by the literal value), otherwise one is appended. Every other entry
/// is kept as it is, including entries with `valueFrom`.
pub fn merge_extra_env(entries: &mut Vec<Value>, env: &[(&str, String)]) {
    for (name, value) in env {
        let existing = entries
            .iter_mut()
            .find(|entry| entry.get("name").and_then(Value::as_str) == Some(name));
        match existing.and_then(Value::as_object_mut) {
            Some(entry) => {
                entry.remove("valueFrom");
                entry.insert("value".to_string(), Value::String(value.clone()));
            }
            None => entries.push(json!({"name": name, "value": value})),
        }
    }
}

/// The values document for the `fleet` chart: the user's values with the provider's settings
/// on top (`bootstrap.enabled`, the feature gates in `extraEnv`, `apiServerURL`, `apiServerCA`).
/// Provider-set keys win; the user's other keys (including other `bootstrap` keys and other
/// `extraEnv` entries) are kept.
pub fn fleet_chart_values(
    user: &Map<String, Value>,
    fleet: &FleetSettings,
    server: &ServerValues,
) -> Map<String, Value> {
    let mut values = user.clone();
    let bootstrap = values.entry("bootstrap").or_insert(Value::Null);
    object_at(bootstrap, &[]).insert(
        "enabled".to_string(),
        Value::Bool(fleet.bootstrap_local_cluster),
    );
    merge_extra_env(list_at(&mut values, "extraEnv"), &gate_env(fleet));
    if let Some(url) = &server.url {
        values.insert("apiServerURL".to_string(), Value::String(url.clone()));
    }
    if let Some(ca) = &server.ca_pem {
        values.insert("apiServerCA".to_string(), Value::String(ca.clone()));
    }
    values
}

/// Writes the feature gates into the `fleet` key of a values ConfigMap (a YAML document of
/// chart values; missing or blank = empty). Returns the new text, or `None` when the document
/// already has them (nothing to write). Everything else in the document is kept, in order.
pub fn gates_in_values_yaml(
    current: Option<&str>,
    fleet: &FleetSettings,
) -> Result<Option<String>, String> {
    let text = current.unwrap_or_default();
    let parsed: serde_yaml::Value = if text.trim().is_empty() {
        serde_yaml::Value::Mapping(serde_yaml::Mapping::new())
    } else {
        serde_yaml::from_str(text).map_err(|err| format!("is not valid YAML: {err}"))?
    };
    let mut document = match parsed {
        serde_yaml::Value::Null => serde_yaml::Mapping::new(),
        serde_yaml::Value::Mapping(mapping) => mapping,
        _ => return Err("is not a YAML mapping of chart values".to_string()),
    };
    let original = document.clone();

    let key = serde_yaml::Value::String("extraEnv".to_string());
    let mut entries: Vec<Value> = match document.get(&key) {
        None | Some(serde_yaml::Value::Null) => Vec::new(),
        Some(serde_yaml::Value::Sequence(items)) => items
            .iter()
            .map(|item| {
                serde_json::to_value(item)
                    .map_err(|err| format!("has an extraEnv entry that is not plain data: {err}"))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("has an extraEnv that is not a list".to_string()),
    };
    merge_extra_env(&mut entries, &gate_env(fleet));
    let merged: serde_yaml::Value =
        serde_yaml::to_value(&entries).map_err(|err| format!("cannot encode extraEnv: {err}"))?;
    document.insert(key, merged);

    if document == original {
        return Ok(None);
    }
    serde_yaml::to_string(&serde_yaml::Value::Mapping(document))
        .map(Some)
        .map_err(|err| format!("cannot encode values: {err}"))
}

/// Sets `apiServerURL` and `apiServerCA` (base64 of the PEM, as Fleet and CAAPF store it) in
/// the JSON of Fleet's `fleet-controller` ConfigMap. Returns the new JSON, or `None` when both
/// already have the wanted values. Every other key is kept.
pub fn fleet_controller_config(
    current: &str,
    server: &ServerValues,
) -> Result<Option<String>, String> {
    let mut config: Map<String, Value> = match serde_json::from_str(current) {
        Ok(Value::Object(map)) => map,
        Ok(_) => return Err("is not a JSON object".to_string()),
        // Never echo the text: it holds the CA and possibly more.
        Err(err) => {
            return Err(format!(
                "is not valid JSON (line {}, column {})",
                err.line(),
                err.column()
            ));
        }
    };
    let mut changed = false;
    let mut set = |key: &str, value: String| {
        if config.get(key).and_then(Value::as_str) != Some(value.as_str()) {
            config.insert(key.to_string(), Value::String(value));
            changed = true;
        }
    };
    if let Some(url) = &server.url {
        set("apiServerURL", url.clone());
    }
    if let Some(ca) = &server.ca_pem {
        set("apiServerCA", crate::model::api_server::encode_ca(ca));
    }
    if !changed {
        return Ok(None);
    }
    serde_json::to_string_pretty(&Value::Object(config))
        .map(Some)
        .map_err(|err| format!("cannot encode: {err}"))
}

#[cfg(test)]
mod tests {
    use base64::Engine;

    use super::*;

    fn settings(oci: bool, helm_ops: bool, bootstrap: bool) -> FleetSettings {
        FleetSettings {
            experimental_oci_storage: oci,
            experimental_helm_ops: helm_ops,
            feature_gates_config_map: None,
            bootstrap_local_cluster: bootstrap,
            server: None,
        }
    }

    fn object(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            other => panic!("not an object: {other}"),
        }
    }

    #[test]
    fn each_gate_comes_from_its_own_flag() {
        // CAAPF §13.1 set EXPERIMENTAL_HELM_OPS from the OCI flag.
        for (oci, helm_ops) in [(true, false), (false, true), (true, true), (false, false)] {
            let env = gate_env(&settings(oci, helm_ops, false));
            assert_eq!(
                env,
                [
                    ("EXPERIMENTAL_OCI_STORAGE", oci.to_string()),
                    ("EXPERIMENTAL_HELM_OPS", helm_ops.to_string()),
                ]
            );
        }
        assert_eq!(
            gate_summary(&settings(true, false, false)),
            "EXPERIMENTAL_OCI_STORAGE=true, EXPERIMENTAL_HELM_OPS=false"
        );
    }

    #[test]
    fn extra_env_merge() {
        let env = [
            ("EXPERIMENTAL_OCI_STORAGE", "true".to_string()),
            ("EXPERIMENTAL_HELM_OPS", "false".to_string()),
        ];
        let rows: Vec<(&str, Value, Value)> = vec![
            (
                "empty: both appended",
                json!([]),
                json!([
                    {"name": "EXPERIMENTAL_OCI_STORAGE", "value": "true"},
                    {"name": "EXPERIMENTAL_HELM_OPS", "value": "false"},
                ]),
            ),
            (
                "user entries kept first, gates appended (CAAPF §13.4 overwrote entries 0 and 1)",
                json!([{"name": "HTTP_PROXY", "value": "http://proxy:3128"}, {"name": "NO_PROXY", "value": "10.0.0.0/8"}]),
                json!([
                    {"name": "HTTP_PROXY", "value": "http://proxy:3128"},
                    {"name": "NO_PROXY", "value": "10.0.0.0/8"},
                    {"name": "EXPERIMENTAL_OCI_STORAGE", "value": "true"},
                    {"name": "EXPERIMENTAL_HELM_OPS", "value": "false"},
                ]),
            ),
            (
                "same name updated in place, position kept",
                json!([{"name": "EXPERIMENTAL_HELM_OPS", "value": "true"}, {"name": "X", "value": "1"}]),
                json!([
                    {"name": "EXPERIMENTAL_HELM_OPS", "value": "false"},
                    {"name": "X", "value": "1"},
                    {"name": "EXPERIMENTAL_OCI_STORAGE", "value": "true"},
                ]),
            ),
            (
                "valueFrom entries are kept (CAAPF §13.22), and replaced only for our names",
                json!([
                    {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                    {"name": "EXPERIMENTAL_OCI_STORAGE", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}},
                ]),
                json!([
                    {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                    {"name": "EXPERIMENTAL_OCI_STORAGE", "value": "true"},
                    {"name": "EXPERIMENTAL_HELM_OPS", "value": "false"},
                ]),
            ),
        ];
        for (name, input, want) in rows {
            let mut entries = input.as_array().cloned().unwrap_or_default();
            merge_extra_env(&mut entries, &env);
            assert_eq!(Value::Array(entries), want, "{name}");
        }
    }

    #[test]
    fn chart_values_provider_keys_win_user_keys_kept() {
        let user = object(json!({
            "replicas": 2,
            "bootstrap": {"enabled": true, "namespace": "fleet-local"},
            "extraEnv": [{"name": "A", "value": "1"}, {"name": "EXPERIMENTAL_OCI_STORAGE", "value": "false"}],
            "apiServerURL": "https://user-set:6443",
        }));
        let server = ServerValues {
            url: Some("https://10.0.0.1:6443".to_string()),
            ca_pem: Some("-----BEGIN CERTIFICATE-----\nX\n-----END CERTIFICATE-----\n".to_string()),
        };
        let values = fleet_chart_values(&user, &settings(true, false, false), &server);
        assert_eq!(
            Value::Object(values),
            json!({
                "replicas": 2,
                "bootstrap": {"enabled": false, "namespace": "fleet-local"},
                "extraEnv": [
                    {"name": "A", "value": "1"},
                    {"name": "EXPERIMENTAL_OCI_STORAGE", "value": "true"},
                    {"name": "EXPERIMENTAL_HELM_OPS", "value": "false"},
                ],
                "apiServerURL": "https://10.0.0.1:6443",
                "apiServerCA": "-----BEGIN CERTIFICATE-----\nX\n-----END CERTIFICATE-----\n",
            })
        );
    }

    #[test]
    fn chart_values_without_server_leave_user_server_values() {
        let user = object(
            json!({"apiServerURL": "https://user-set:6443", "bootstrap": "oops", "extraEnv": "oops"}),
        );
        let values = fleet_chart_values(
            &user,
            &settings(false, true, true),
            &ServerValues::default(),
        );
        assert_eq!(
            Value::Object(values),
            json!({
                "apiServerURL": "https://user-set:6443",
                "bootstrap": {"enabled": true},
                "extraEnv": [
                    {"name": "EXPERIMENTAL_OCI_STORAGE", "value": "false"},
                    {"name": "EXPERIMENTAL_HELM_OPS", "value": "true"},
                ],
            })
        );
        // Empty user values: the minimal document.
        let values = fleet_chart_values(
            &Map::new(),
            &settings(true, true, false),
            &ServerValues::default(),
        );
        assert_eq!(
            Value::Object(values),
            json!({
                "bootstrap": {"enabled": false},
                "extraEnv": [
                    {"name": "EXPERIMENTAL_OCI_STORAGE", "value": "true"},
                    {"name": "EXPERIMENTAL_HELM_OPS", "value": "true"},
                ],
            })
        );
    }

    #[test]
    fn gates_in_values_configmap() {
        let gates = settings(true, false, false);
        // Missing key and blank text: a document with only the gates.
        for current in [None, Some(""), Some("  \n")] {
            let out = gates_in_values_yaml(current, &gates)
                .expect("ok")
                .expect("changed");
            let parsed: Value = serde_yaml::from_str(&out).expect("yaml");
            assert_eq!(
                parsed,
                json!({"extraEnv": [
                    {"name": "EXPERIMENTAL_OCI_STORAGE", "value": "true"},
                    {"name": "EXPERIMENTAL_HELM_OPS", "value": "false"},
                ]})
            );
        }
        // Rancher-style document: other keys and entries (valueFrom too) kept, in order.
        let current = "systemDefaultRegistry: registry.example.com\nextraEnv:\n- name: CATTLE_TOKEN\n  valueFrom:\n    secretKeyRef:\n      name: t\n      key: token\n- name: EXPERIMENTAL_HELM_OPS\n  value: \"true\"\ngitops:\n  enabled: true\n";
        let out = gates_in_values_yaml(Some(current), &gates)
            .expect("ok")
            .expect("changed");
        let parsed: Value = serde_yaml::from_str(&out).expect("yaml");
        assert_eq!(
            parsed,
            json!({
                "systemDefaultRegistry": "registry.example.com",
                "extraEnv": [
                    {"name": "CATTLE_TOKEN", "valueFrom": {"secretKeyRef": {"name": "t", "key": "token"}}},
                    {"name": "EXPERIMENTAL_HELM_OPS", "value": "false"},
                    {"name": "EXPERIMENTAL_OCI_STORAGE", "value": "true"},
                ],
                "gitops": {"enabled": true},
            })
        );
        let keys: Vec<&str> = out
            .lines()
            .filter(|l| !l.starts_with([' ', '-']))
            .filter_map(|l| l.split(':').next())
            .collect();
        assert_eq!(keys, ["systemDefaultRegistry", "extraEnv", "gitops"]);
        // Already right: nothing to write.
        assert_eq!(gates_in_values_yaml(Some(&out), &gates), Ok(None));
        // Broken documents are reported, not overwritten.
        assert!(
            gates_in_values_yaml(Some("- a\n- b\n"), &gates)
                .unwrap_err()
                .contains("mapping")
        );
        assert!(
            gates_in_values_yaml(Some("extraEnv: x\n"), &gates)
                .unwrap_err()
                .contains("not a list")
        );
        assert!(
            gates_in_values_yaml(Some("a: [\n"), &gates)
                .unwrap_err()
                .contains("YAML")
        );
    }

    #[test]
    fn fleet_controller_config_changes_only_our_keys() {
        let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        let encoded = base64::engine::general_purpose::STANDARD.encode(pem);
        let current = r#"{"agentImage":"rancher/fleet-agent:v0.13.1","apiServerURL":"","apiServerCA":"","bootstrap":{"namespace":"fleet-local"},"webhookReceiverURL":""}"#;
        let server = ServerValues {
            url: Some("https://10.0.0.1:6443".to_string()),
            ca_pem: Some(pem.to_string()),
        };
        let out = fleet_controller_config(current, &server)
            .expect("ok")
            .expect("changed");
        let parsed: Value = serde_json::from_str(&out).expect("json");
        assert_eq!(
            parsed,
            json!({
                "agentImage": "rancher/fleet-agent:v0.13.1",
                "apiServerURL": "https://10.0.0.1:6443",
                "apiServerCA": encoded,
                "bootstrap": {"namespace": "fleet-local"},
                "webhookReceiverURL": "",
            })
        );
        // Up to date: nothing to write.
        assert_eq!(fleet_controller_config(&out, &server), Ok(None));
        // Only the URL configured: the CA is left alone.
        let url_only = ServerValues {
            url: Some("https://fleet.example.com".to_string()),
            ca_pem: None,
        };
        let out2 = fleet_controller_config(&out, &url_only)
            .expect("ok")
            .expect("changed");
        let parsed: Value = serde_json::from_str(&out2).expect("json");
        assert_eq!(parsed["apiServerURL"], "https://fleet.example.com");
        assert_eq!(parsed["apiServerCA"], json!(encoded));
        // Missing keys are added.
        let out3 = fleet_controller_config("{}", &server)
            .expect("ok")
            .expect("changed");
        assert!(out3.contains("apiServerURL"));
        // Broken JSON is reported without echoing it.
        let err = fleet_controller_config("{\"apiServerCA\": \"c2VjcmV0", &server).unwrap_err();
        assert!(!err.contains("c2VjcmV0"), "{err}");
        assert!(
            fleet_controller_config("[]", &server)
                .unwrap_err()
                .contains("object")
        );
    }
}
