//! What the FleetAddonConfig schema says beyond its Rust types: Kubernetes' grammar of names and
//! labels (the API server's own checks for its types: kubernetes/kubernetes
//! staging/src/k8s.io/apimachinery/pkg/util/validation/validation.go `IsDNS1123Label`,
//! `IsDNS1123Subdomain`, and pkg/api/validate/content/kube.go `IsLabelValue`, read at commit
//! 008b365 and 26c0309; the same since Kubernetes 1.2), Go durations, and the transforms that
//! put them on the schema of a label selector or a Secret reference.

use serde_json::{Value, json};

pub(super) const DNS1123_LABEL: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
pub(super) const DNS1123_SUBDOMAIN: &str =
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
pub(super) const LABEL_VALUE: &str = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";
/// A Go duration as `time.ParseDuration` reads it (without a sign), e.g. `1h30m`.
pub(super) const GO_DURATION: &str = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$";

/// Adds `constraints` (an object's fields) to the schema node at the JSON `pointer`.
fn constrain(schema: &mut schemars::Schema, pointer: &str, constraints: Value) {
    if let (Some(Value::Object(node)), Value::Object(constraints)) =
        (schema.pointer_mut(pointer), constraints)
    {
        node.extend(constraints);
    }
}

/// `metav1.LabelSelector` with the API server's grammar of its operators and values (what
/// k8s.io/apimachinery pkg/apis/meta/v1/validation `ValidateLabelSelector` checks for its own
/// types). Label keys and the operator's need of values stay in
/// [`crate::model::validation::validate_label_selector`]: a structural schema cannot constrain
/// a map's keys, and a CEL rule per list item is multiplied by the list's unbounded length in
/// the API server's cost estimate.
pub(super) fn label_selector_grammar(schema: &mut schemars::Schema) {
    let value = json!({"maxLength": 63, "pattern": LABEL_VALUE});
    constrain(
        schema,
        "/properties/matchLabels/additionalProperties",
        value.clone(),
    );
    let requirement = "/properties/matchExpressions/items/properties";
    constrain(schema, &format!("{requirement}/values/items"), value);
    constrain(
        schema,
        &format!("{requirement}/operator"),
        json!({"enum": ["In", "NotIn", "Exists", "DoesNotExist"]}),
    );
}

/// A Secret this cluster-scoped object names: `name` (a DNS-1123 subdomain) and `namespace` (a
/// DNS-1123 label), both required.
pub(super) fn secret_reference_grammar(schema: &mut schemars::Schema) {
    constrain(schema, "", json!({"required": ["name", "namespace"]}));
    constrain(
        schema,
        "/properties/name",
        json!({"maxLength": 253, "pattern": DNS1123_SUBDOMAIN}),
    );
    constrain(
        schema,
        "/properties/namespace",
        json!({"maxLength": 63, "pattern": DNS1123_LABEL}),
    );
}

/// A map of any values (helm chart values).
pub(super) fn free_form_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "nullable": true,
        "x-kubernetes-preserve-unknown-fields": true,
    })
}
