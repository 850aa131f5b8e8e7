//! The CRD manifest: checked-in copy equals the generated one, and the schema is structural
//! (what a real API server demands), with the identity and rules our users depend on.

use std::path::Path;

use caapf::api::{CRD_MANIFEST_PATH, FleetAddonConfig, crds_yaml};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::Value;

#[test]
fn checked_in_crd_matches_generated() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(CRD_MANIFEST_PATH);
    let checked_in = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let generated = crds_yaml().expect("CRD renders");
    assert!(
        checked_in == generated,
        "{CRD_MANIFEST_PATH} is out of date: run `make generate` and commit the result"
    );
}

#[test]
fn crd_identity_and_rules() {
    let crd: CustomResourceDefinition = FleetAddonConfig::crd();
    assert_eq!(
        crd.metadata.name.as_deref(),
        Some("fleetaddonconfigs.addons.cluster.x-k8s.io")
    );
    assert_eq!(crd.spec.group, "addons.cluster.x-k8s.io");
    assert_eq!(crd.spec.names.kind, "FleetAddonConfig");
    assert_eq!(crd.spec.names.plural, "fleetaddonconfigs");
    assert_eq!(crd.spec.scope, "Cluster");
    let version = &crd.spec.versions[0];
    assert_eq!(version.name, "v1alpha1");
    assert!(version.served && version.storage);
    assert!(
        version
            .subresources
            .as_ref()
            .and_then(|s| s.status.as_ref())
            .is_some()
    );

    let columns: Vec<&str> = version
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    for wanted in ["Ready", "Fleet", "Age"] {
        assert!(
            columns.contains(&wanted),
            "printer column {wanted} missing: {columns:?}"
        );
    }

    let schema = schema(&crd);
    assert_eq!(
        rules(&schema),
        ["self.metadata.name == 'fleet-addon-config'"],
        "singleton rule on the root"
    );
    let spec = &schema["properties"]["spec"]["properties"];
    assert_properties(
        &spec["cluster"],
        "spec.cluster",
        &[
            "namespaceRegexes",
            "agentInitiated",
            "agentInitiatedSelector",
        ],
    );
    assert_properties(
        &spec["install"],
        "spec.install",
        &[
            "repository",
            "namespace",
            "values",
            "followLatest",
            "version",
        ],
    );
    assert_eq!(
        rules(&spec["install"]),
        ["has(self.followLatest) != has(self.version)"]
    );
    assert_eq!(
        rules(&spec["config"]["properties"]["server"]),
        ["has(self.inferLocal) != has(self.custom)"]
    );
    // Every CAAPF field keeps its JSON name.
    assert_properties(
        &spec["cluster"],
        "spec.cluster",
        &[
            "applyClassGroup",
            "patchResource",
            "setOwnerReferences",
            "naming",
            "agentNamespace",
            "agentTolerations",
            "hostNetwork",
            "agentEnvVars",
            "selector",
            "namespaceSelector",
        ],
    );
    for path in [
        &spec["clusterClass"]["properties"]["patchResource"],
        &spec["clusterClass"]["properties"]["setOwnerReferences"],
        &spec["config"]["properties"]["bootstrapLocalCluster"],
        &spec["config"]["properties"]["featureGates"]["properties"]["experimentalOciStorage"],
        &spec["config"]["properties"]["featureGates"]["properties"]["experimentalHelmOps"],
        &spec["config"]["properties"]["featureGates"]["properties"]["configMap"]["properties"]["ref"],
        &spec["config"]["properties"]["server"]["properties"]["custom"]["properties"]["apiServerUrl"],
        &spec["config"]["properties"]["server"]["properties"]["custom"]["properties"]["apiServerCaConfigRef"],
        &schema["properties"]["status"]["properties"]["installedVersion"],
        &schema["properties"]["status"]["properties"]["conditions"],
    ] {
        assert!(path.is_object(), "a CAAPF field is missing from the schema");
    }
}

#[test]
fn schema_is_structural() {
    let schema = schema(&FleetAddonConfig::crd());
    let mut problems = Vec::new();
    check_structural(&schema, "openAPIV3Schema", &mut problems);
    assert!(
        problems.is_empty(),
        "non-structural schema:\n{}",
        problems.join("\n")
    );
}

/// The OpenAPI v3 schema of the CRD's first version, as JSON.
fn schema(crd: &CustomResourceDefinition) -> Value {
    serde_json::to_value(
        crd.spec.versions[0]
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref()),
    )
    .expect("schema serialises")
}

/// Every one of `fields` is a property of the schema `node` (at `path`).
fn assert_properties(node: &Value, path: &str, fields: &[&str]) {
    for field in fields {
        assert!(node["properties"].get(field).is_some(), "{path}.{field}");
    }
}

fn rules(node: &Value) -> Vec<&str> {
    node["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["rule"].as_str())
        .collect()
}

/// The structural-schema rules of apiextensions-apiserver that generated schemas can break:
/// every node specifies a type (unless int-or-string or preserve-unknown-fields), logical
/// junctors carry no type/description/default/nullable, `$ref` and `additionalProperties` together
/// with `properties` are absent, and map keys of list-type map lists are required properties.
fn check_structural(node: &Value, path: &str, problems: &mut Vec<String>) {
    let Some(obj) = node.as_object() else {
        problems.push(format!("{path}: not an object"));
        return;
    };
    let free = obj.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true))
        || obj.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    if !free && !obj.contains_key("type") {
        problems.push(format!("{path}: no type"));
    }
    if obj.contains_key("$ref") {
        problems.push(format!("{path}: $ref is not allowed"));
    }
    if obj.contains_key("properties") && obj.contains_key("additionalProperties") {
        problems.push(format!(
            "{path}: properties and additionalProperties together"
        ));
    }
    for junctor in ["allOf", "anyOf", "oneOf", "not"] {
        let branches: Vec<&Value> = match obj.get(junctor) {
            Some(Value::Array(items)) => items.iter().collect(),
            Some(other) => vec![other],
            None => continue,
        };
        for (i, branch) in branches.into_iter().enumerate() {
            for forbidden in [
                "type",
                "description",
                "default",
                "nullable",
                "additionalProperties",
            ] {
                if branch.get(forbidden).is_some() {
                    problems.push(format!("{path}.{junctor}[{i}]: {forbidden} is not allowed"));
                }
            }
        }
    }
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        for (name, child) in props {
            check_structural(child, &format!("{path}.{name}"), problems);
        }
    }
    if let Some(items) = obj.get("items") {
        check_structural(items, &format!("{path}[]"), problems);
        if obj.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map") {
            let required: Vec<&str> = items["required"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            for key in obj["x-kubernetes-list-map-keys"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let key = key.as_str().unwrap_or_default();
                if !required.contains(&key) {
                    problems.push(format!("{path}: list map key {key} must be required"));
                }
            }
        }
    }
    if let Some(extra) = obj.get("additionalProperties").filter(|v| v.is_object()) {
        check_structural(extra, &format!("{path}.*"), problems);
    }
}

/// Every field of our own types in the CRD is documented in docs/configuration.md (as
/// `` `spec.a.b` ``). Kubernetes types (selectors, references, env vars, tolerations) are
/// documented upstream and not descended into.
#[test]
fn every_field_is_documented() {
    let doc_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/configuration.md");
    let doc = std::fs::read_to_string(&doc_path).expect("docs/configuration.md");
    let schema = schema(&FleetAddonConfig::crd());
    let mut paths = Vec::new();
    for root in ["spec", "status"] {
        collect_paths(&schema["properties"][root], root, &mut paths);
    }
    let missing: Vec<&String> = paths
        .iter()
        .filter(|p| !doc.contains(&format!("`{p}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "undocumented fields in docs/configuration.md: {missing:?}"
    );
    assert!(paths.len() > 40, "walked too few fields: {}", paths.len());
}

fn collect_paths(node: &Value, path: &str, out: &mut Vec<String>) {
    const KUBERNETES_TYPES: &[&str] = &[
        "selector",
        "namespaceSelector",
        "agentInitiatedSelector",
        "selfManagedSelector",
        "bundleSelector",
        "ref",
        "apiServerCaConfigRef",
        "secret",
        "caSecret",
        "agentEnvVars",
        "agentTolerations",
        "agentAffinity",
        "agentResources",
        "conditions",
        "values",
    ];
    for (name, child) in node["properties"].as_object().into_iter().flatten() {
        let child_path = format!("{path}.{name}");
        out.push(child_path.clone());
        if !KUBERNETES_TYPES.contains(&name.as_str()) {
            collect_paths(child, &child_path, out);
        }
    }
}

/// (a spec, the fields the API server's refusal names). Kubernetes' grammar that the CRD schema
/// says and `src/model/validation/` leaves to it (label values and selector operators, Secret
/// references, the Fleet Cluster naming, namespaces): a server evaluating the schema's value
/// validations and CEL rules refuses each with 422 Invalid and one cause per field, as the
/// sandbox does.
const REFUSED: &[(&str, &[&str])] = &[
    (
        "install: {followLatest: true, repository: \"oci://r.example.com/c\", credentials: {key: \"bad key\"}}",
        &[
            "spec.install.credentials.key",
            "spec.install.credentials.secret",
        ],
    ),
    (
        "install: {followLatest: true, repository: \"oci://r.example.com/c\", credentials: {secret: {name: Registry}}, tlsConfig: {caSecret: {namespace: \"-x\"}}}",
        &[
            "spec.install.credentials.secret.name",
            "spec.install.credentials.secret.namespace",
            "spec.install.tlsConfig.caSecret.name",
            "spec.install.tlsConfig.caSecret.namespace",
        ],
    ),
    (
        "runtimeExtension: {agentChartCredentials: {secret: {name: r}}, agentChartTLSConfig: {caSecret: {name: c}}}",
        &[
            "spec.runtimeExtension.agentChartCredentials.secret.namespace",
            "spec.runtimeExtension.agentChartTLSConfig.caSecret.namespace",
        ],
    ),
    // Each part passes its own pattern; together they make the label "-x".
    (
        "cluster: {naming: {prefix: \"fleet.-\"}}",
        &["spec.cluster.naming"],
    ),
    (
        "cluster: {selector: {matchExpressions: [{key: env, operator: Maybe}]}}",
        &["spec.cluster.selector.matchExpressions[0].operator"],
    ),
    (
        "cluster: {agentInitiatedSelector: {matchLabels: {a: \"-bad\"}}}",
        &["spec.cluster.agentInitiatedSelector.matchLabels.a"],
    ),
    (
        "cluster: {selfManagedSelector: {matchExpressions: [{key: a, operator: In, values: [ok, \"bad value\"]}]}}",
        &["spec.cluster.selfManagedSelector.matchExpressions[0].values[1]"],
    ),
    (
        "cluster: {namespaceSelector: {matchLabels: {team: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa}}}",
        &["spec.cluster.namespaceSelector.matchLabels.team"],
    ),
    (
        "cluster: {agentOverrides: [{selector: {matchLabels: {cloud: \"g k e\"}}, settings: {agentNamespace: Agents}}]}",
        &[
            "spec.cluster.agentOverrides[0].selector.matchLabels.cloud",
            "spec.cluster.agentOverrides[0].settings.agentNamespace",
        ],
    ),
    (
        "cluster: {agentOverrides: [{selector: {}, settings: {}}, {selector: {matchExpressions: [{key: a, operator: Like}]}, settings: {}}]}",
        &["spec.cluster.agentOverrides[1].selector.matchExpressions[0].operator"],
    ),
    (
        "install: {followLatest: true, namespace: Fleet}",
        &["spec.install.namespace"],
    ),
];

/// Specs the same rules must let through.
const ACCEPTED: &[&str] = &[
    "cluster: {selector: {matchLabels: {import: \"\"}}, namespaceSelector: {matchLabels: {example.com/tier: Gold_1.x}}}",
    "cluster: {naming: {prefix: \"fleet-\", suffix: \"-c\"}}",
    "cluster: {naming: {prefix: \"a.b.\", suffix: \".example.com\"}}",
    "cluster: {selector: {matchExpressions: [{key: example.com/tier, operator: Exists}, {key: env, operator: NotIn, values: [dev, \"\"]}]}}",
    "install: {followLatest: true, namespace: cattle-fleet-system, repository: \"oci://registry.example.com/charts\", credentials: {secret: {name: registry.example.com, namespace: caapf-system}, key: .dockerconfigjson}, tlsConfig: {caSecret: {name: registry-ca, namespace: caapf-system}}}",
    "cluster: {agentOverrides: [{selector: {}, settings: {agentNamespace: agents}}]}",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schema_refuses_bad_grammar_naming_each_field() {
    use kube::api::{Api, DeleteParams, PostParams};
    use kube_sandbox::{CrdSet, Sandbox, SandboxOptions};
    let sandbox = Sandbox::start_with(SandboxOptions {
        crds: vec![CrdSet::Provider],
        validate_custom_resources: true,
        ..Default::default()
    })
    .await
    .expect("sandbox starts");
    let api: Api<FleetAddonConfig> = Api::all(sandbox.client());
    let config = |yaml: &str| -> FleetAddonConfig {
        let spec: Value = serde_yaml::from_str(yaml).expect("test spec");
        serde_json::from_value(serde_json::json!({
            "apiVersion": "addons.cluster.x-k8s.io/v1alpha1", "kind": "FleetAddonConfig",
            "metadata": {"name": "fleet-addon-config"}, "spec": spec,
        }))
        .expect("the spec decodes")
    };
    for yaml in ACCEPTED {
        api.create(&PostParams::default(), &config(yaml))
            .await
            .unwrap_or_else(|err| panic!("{yaml}: refused: {err}"));
        api.delete("fleet-addon-config", &DeleteParams::default())
            .await
            .expect("delete");
    }
    for (yaml, fields) in REFUSED {
        match api.create(&PostParams::default(), &config(yaml)).await {
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 422, "{yaml}: {status:?}");
                let mut named: Vec<String> = status
                    .details
                    .iter()
                    .flat_map(|d| d.causes.iter().map(|c| c.field.clone()))
                    .collect();
                named.sort();
                named.dedup();
                assert_eq!(named, *fields, "{yaml}: {}", status.message);
            }
            other => panic!("{yaml}: not refused: {other:?}"),
        }
    }
    sandbox.shutdown().await;
}
