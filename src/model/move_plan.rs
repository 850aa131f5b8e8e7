//! The Fleet Bundles that carry one Cluster's move to the Cluster itself.
//!
//! - `<cluster>-move-providers`: one Cluster API Operator object per provider installed in the
//!   management cluster (`operator.cluster.x-k8s.io/v1alpha2`, kinds from
//!   kubernetes-sigs/cluster-api-operator `api/v1alpha2/*provider_types.go`), from the operator's
//!   own objects when the management cluster uses it, else from clusterctl's inventory
//!   (`providers.clusterctl.cluster.x-k8s.io`, `cmd/clusterctl/api/v1alpha3/provider_type.go`).
//! - `<cluster>-move-NN`: creation group NN of [`super::move_graph`], `dependsOn` the previous
//!   Bundle so owners exist before dependents. Owner references are re-linked on the target at
//!   install time with Helm's `lookup` (Fleet's helm deployer supports it,
//!   rancher/fleet `internal/helmdeployer/lookup.go`), as clusterctl's `buildOwnerChain` re-links
//!   them with the owners' new UIDs.
//!
//! Bundle shape: rancher/fleet `pkg/apis/fleet.cattle.io/v1alpha1/bundle_types.go` (`targets`,
//! `dependsOn`, `resources`) and `bundledeployment_types.go` (`defaultNamespace`,
//! `keepResources`, `helm.takeOwnership`). Every Bundle targets exactly one Fleet Cluster by name
//! and keeps its resources when removed: uninstalling live CAPI objects from the target would start
//! deleting the infrastructure the cluster runs on.

use std::collections::BTreeSet;

use kube::api::DynamicObject;
use serde_json::{Map, Value, json};

use super::move_graph::{MoveGraph, MoveNode, OwnerLink, group_of};

/// On every move Bundle: the CAPI Cluster it moves.
pub const MOVE_CLUSTER_LABEL: &str = "fleet.addons.cluster.x-k8s.io/move-cluster";
/// On every move Bundle: `providers` or the creation group number.
pub const MOVE_STEP_LABEL: &str = "fleet.addons.cluster.x-k8s.io/move-step";
/// The Cluster API Operator's group and the version we write.
pub const OPERATOR_API_VERSION: &str = "operator.cluster.x-k8s.io/v1alpha2";
/// clusterctl's inventory.
pub const INVENTORY_API_VERSION: &str = "clusterctl.cluster.x-k8s.io/v1alpha3";

/// The provider kinds, in clusterctl's install order (`ProviderType.Order`).
pub const PROVIDER_KINDS: [&str; 7] = [
    "CoreProvider",
    "BootstrapProvider",
    "ControlPlaneProvider",
    "InfrastructureProvider",
    "IPAMProvider",
    "RuntimeExtensionProvider",
    "AddonProvider",
];

/// Helm release names (derived from Bundle names by Fleet) and label values stay below this.
const MAX_NAME: usize = 53;

/// Why a plan cannot be rendered.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlanError {
    #[error("{0}: the object contains the reserved text {OWNER_UID_TOKEN:?}")]
    ReservedText(String),
    #[error("{object}: serialising it failed: {error}")]
    Serialise { object: String, error: String },
}

/// The provider objects to install on the target, and what the inputs could not tell.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProviderPlan {
    /// Operator objects (and the `configSecret` Secrets they name), in install order.
    pub objects: Vec<Value>,
    /// Providers that need a manual step, e.g. an inventory entry the operator cannot fetch
    /// without `spec.fetchConfig`.
    pub warnings: Vec<String>,
}

/// clusterctl's built-in provider registry names (`cmd/clusterctl/client/config/providers_client.go`)
/// are too many to pin here; a provider not known to the operator's defaults is reported instead.
/// These are the ones the operator fetches without `fetchConfig` for the providers this project
/// works with.
const KNOWN_PROVIDERS: [(&str, &str); 8] = [
    ("CoreProvider", "cluster-api"),
    ("BootstrapProvider", "kubeadm"),
    ("ControlPlaneProvider", "kubeadm"),
    ("BootstrapProvider", "rke2"),
    ("ControlPlaneProvider", "rke2"),
    ("InfrastructureProvider", "docker"),
    ("AddonProvider", "fleet"),
    ("AddonProvider", "helm"),
];

/// The operator objects for the providers of the management cluster: the operator's own objects
/// when there are any (with the `configSecret` Secrets found among `secrets`), else one object
/// per inventory entry with `spec.version`.
pub fn provider_plan(
    inventory: &[DynamicObject],
    operator: &[DynamicObject],
    secrets: &[DynamicObject],
) -> ProviderPlan {
    let mut plan = ProviderPlan::default();
    let order = |kind: &str| PROVIDER_KINDS.iter().position(|k| *k == kind).unwrap_or(99);
    if !operator.is_empty() {
        let mut objects: Vec<&DynamicObject> = operator
            .iter()
            .filter(|o| {
                o.types.as_ref().is_some_and(|t| {
                    group_of(&t.api_version) == group_of(OPERATOR_API_VERSION)
                        && PROVIDER_KINDS.contains(&t.kind.as_str())
                })
            })
            .collect();
        objects.sort_by_key(|o| {
            let kind = o.types.as_ref().map(|t| t.kind.clone()).unwrap_or_default();
            (
                order(&kind),
                o.metadata.namespace.clone(),
                o.metadata.name.clone(),
            )
        });
        for object in objects {
            let value = strip_for_target(object);
            let namespace = object.metadata.namespace.clone().unwrap_or_default();
            if let Some(secret) = value["spec"]["configSecret"].as_object() {
                let name = secret.get("name").and_then(Value::as_str).unwrap_or("");
                let ns = secret
                    .get("namespace")
                    .and_then(Value::as_str)
                    .unwrap_or(&namespace);
                match secrets.iter().find(|s| {
                    s.metadata.name.as_deref() == Some(name)
                        && s.metadata.namespace.as_deref() == Some(ns)
                }) {
                    Some(s) => plan.objects.push(strip_for_target(s)),
                    None => plan.warnings.push(format!(
                        "{} {namespace}/{}: spec.configSecret {ns}/{name} not found; create it on the target",
                        value["kind"].as_str().unwrap_or(""),
                        value["metadata"]["name"].as_str().unwrap_or(""),
                    )),
                }
            }
            plan.objects.push(value);
        }
        return plan;
    }
    let mut entries: Vec<(usize, String, String, String, String)> = inventory
        .iter()
        .filter_map(|p| {
            let kind = p.data["type"].as_str()?.to_string();
            let provider = p.data["providerName"].as_str()?.to_string();
            let version = p.data["version"].as_str().unwrap_or("").to_string();
            let namespace = p.metadata.namespace.clone().unwrap_or_default();
            Some((order(&kind), namespace, kind, provider, version))
        })
        .collect();
    entries.sort();
    for (rank, namespace, kind, provider, version) in entries {
        if rank == 99 {
            plan.warnings.push(format!(
                "inventory entry {namespace}/{provider}: unknown provider type {kind:?}, skipped"
            ));
            continue;
        }
        if !KNOWN_PROVIDERS.contains(&(kind.as_str(), provider.as_str())) {
            plan.warnings.push(format!(
                "{kind} {namespace}/{provider}: set spec.fetchConfig on the target if the operator does not know this provider"
            ));
        }
        let mut spec = Map::new();
        if !version.is_empty() {
            spec.insert("version".into(), json!(version));
        }
        plan.objects.push(json!({
            "apiVersion": OPERATOR_API_VERSION,
            "kind": kind,
            "metadata": {"name": provider, "namespace": namespace},
            "spec": spec,
        }));
    }
    plan
}

/// Server-owned and per-cluster fields removed from every copied object (docs/self-managed.md).
const STRIPPED_METADATA: [&str; 9] = [
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "generation",
    "selfLink",
    "managedFields",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "ownerReferences",
];

/// The object as it must be written to the target: server fields, owner references (re-linked
/// separately), `generateName` of named objects and `status` removed; so are this provider's
/// own marks of the move (the move-state annotation changes at every step and would change the
/// Bundles with it; the opt-in label would make a provider running on the target try to move
/// the cluster again) and its finalizer (nothing on the target removes it unless this provider
/// runs there and imports the Cluster, which adds it again).
pub fn strip_for_target(object: &DynamicObject) -> Value {
    let mut value = serde_json::to_value(object).unwrap_or(Value::Null);
    if let Some(metadata) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in STRIPPED_METADATA {
            metadata.remove(field);
        }
        if metadata.get("name").is_some_and(|n| n.as_str() != Some("")) {
            metadata.remove("generateName");
        }
        for (field, key) in [
            ("annotations", super::move_state::MOVE_STATE_ANNOTATION),
            ("labels", super::move_state::SELF_MANAGED_LABEL),
            ("finalizers", crate::names::FINALIZER),
        ] {
            let now_empty = match metadata.get_mut(field) {
                Some(Value::Object(map)) => {
                    map.remove(key);
                    map.is_empty()
                }
                Some(Value::Array(list)) => {
                    list.retain(|f| f.as_str() != Some(key));
                    list.is_empty()
                }
                _ => false,
            };
            if now_empty {
                metadata.remove(field);
            }
        }
    }
    if let Some(map) = value.as_object_mut() {
        map.remove("status");
    }
    value
}

/// Sets the pause on a Cluster (`spec.paused`) or ClusterClass (the `cluster.x-k8s.io/paused`
/// annotation), as clusterctl's `setClusterPause` / `setClusterClassPause` do; other kinds are
/// left alone.
pub fn set_paused(value: &mut Value, paused: bool) {
    let is_capi = value["apiVersion"]
        .as_str()
        .is_some_and(|a| group_of(a) == "cluster.x-k8s.io");
    match (is_capi, value["kind"].as_str()) {
        (true, Some("Cluster")) => {
            if !value["spec"].is_object() {
                value["spec"] = json!({});
            }
            value["spec"]["paused"] = json!(paused);
        }
        (true, Some("ClusterClass")) => {
            if !value["metadata"]["annotations"].is_object() {
                value["metadata"]["annotations"] = json!({});
            }
            let annotations = value["metadata"]["annotations"]
                .as_object_mut()
                .expect("just made an object");
            if paused {
                annotations.insert(crate::names::CAPI_PAUSED_ANNOTATION.into(), json!(""));
            } else {
                annotations.remove(crate::names::CAPI_PAUSED_ANNOTATION);
                if annotations.is_empty() {
                    value["metadata"]
                        .as_object_mut()
                        .expect("metadata is an object")
                        .remove("annotations");
                }
            }
        }
        _ => {}
    }
}

/// Marks where an owner UID goes before the YAML is turned into a Helm template.
const OWNER_UID_TOKEN: &str = "__caapf_move_owner_uid_";

/// One object as a Helm template: literal text escaped, owner UIDs looked up on the target.
pub fn render_node(node: &MoveNode, target_paused: bool) -> Result<String, PlanError> {
    let mut value = strip_for_target(&node.object);
    set_paused(&mut value, target_paused);
    let text = serde_json::to_string(&value).unwrap_or_default();
    if text.contains(OWNER_UID_TOKEN) {
        return Err(PlanError::ReservedText(node.id.to_string()));
    }
    if !node.owners.is_empty() {
        let refs: Vec<Value> = node
            .owners
            .iter()
            .enumerate()
            .map(|(i, owner)| {
                let mut r = json!({
                    "apiVersion": owner.api_version,
                    "kind": owner.kind,
                    "name": owner.name,
                    "uid": format!("{OWNER_UID_TOKEN}{i}"),
                });
                if let Some(c) = owner.controller {
                    r["controller"] = json!(c);
                }
                if let Some(b) = owner.block_owner_deletion {
                    r["blockOwnerDeletion"] = json!(b);
                }
                r
            })
            .collect();
        value["metadata"]["ownerReferences"] = Value::Array(refs);
    }
    let yaml = serde_yaml::to_string(&value).map_err(|e| PlanError::Serialise {
        object: node.id.to_string(),
        error: e.to_string(),
    })?;
    let mut out = escape_template(&yaml);
    for (i, owner) in node.owners.iter().enumerate().rev() {
        out = out.replace(&format!("{OWNER_UID_TOKEN}{i}"), &owner_uid_lookup(owner));
    }
    Ok(out)
}

/// Text Helm must output verbatim: every `{{` becomes an action printing `{{`.
pub fn escape_template(text: &str) -> String {
    text.replace("{{", "{{`{{`}}")
}

/// A template action printing the UID of `owner` on the target, failing the install with a clear
/// message when the owner is missing (it is created by an earlier Bundle).
fn owner_uid_lookup(owner: &OwnerLink) -> String {
    let namespace = owner.namespace.as_deref().unwrap_or("");
    let quoted = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let what = match &owner.namespace {
        Some(ns) => format!("{} {ns}/{}", owner.kind, owner.name),
        None => format!("{} {}", owner.kind, owner.name),
    };
    format!(
        "{{{{ required {} (dig \"metadata\" \"uid\" \"\" (lookup {} {} {} {})) | quote }}}}",
        quoted(&format!("owner {what} not found on the target")),
        quoted(&owner.api_version),
        quoted(&owner.kind),
        quoted(namespace),
        quoted(&owner.name),
    )
}

/// What the Bundles are built from.
#[derive(Clone, Debug)]
pub struct PlanInput<'a> {
    pub cluster_namespace: &'a str,
    pub cluster_name: &'a str,
    /// The Fleet Cluster (in the Cluster's namespace) every Bundle targets.
    pub fleet_cluster_name: &'a str,
    pub graph: &'a MoveGraph,
    pub providers: &'a ProviderPlan,
    /// `true` while publishing (copies paused, as clusterctl creates them), `false` to resume.
    pub target_paused: bool,
}

/// Name of the providers Bundle.
pub fn providers_bundle_name(cluster: &str) -> String {
    bounded(&format!("{cluster}-move-providers"))
}

/// Name of the Bundle of creation group `index` (0-based; names count from 01).
pub fn group_bundle_name(cluster: &str, index: usize) -> String {
    bounded(&format!("{cluster}-move-{:02}", index + 1))
}

/// Names longer than [`MAX_NAME`] keep a prefix and a stable hash of the whole name.
fn bounded(name: &str) -> String {
    if name.len() <= MAX_NAME {
        return name.to_string();
    }
    // FNV-1a: stable across versions and platforms, unlike the std hasher.
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let suffix = format!("-{:08x}", hash as u32);
    let mut prefix: String = name.chars().take(MAX_NAME - suffix.len()).collect();
    while prefix.ends_with('-') || prefix.ends_with('.') {
        prefix.pop();
    }
    format!("{prefix}{suffix}")
}

/// The Bundles, providers first, then one per creation group in order; each depends on the
/// previous one.
pub fn bundles(input: &PlanInput) -> Result<Vec<Value>, PlanError> {
    let mut out = Vec::new();
    let mut previous: Option<String> = None;
    if !input.providers.objects.is_empty() {
        let mut resources = Vec::new();
        let mut namespaces = BTreeSet::new();
        for (i, object) in input.providers.objects.iter().enumerate() {
            if let Some(ns) = object["metadata"]["namespace"].as_str() {
                namespaces.insert(ns.to_string());
            }
            let yaml = serde_yaml::to_string(object).map_err(|e| PlanError::Serialise {
                object: format!("provider {}", object["metadata"]["name"]),
                error: e.to_string(),
            })?;
            resources.push(resource(i, object, &escape_template(&yaml)));
        }
        let name = providers_bundle_name(input.cluster_name);
        out.push(bundle(
            input,
            &name,
            "providers",
            None,
            namespaces,
            resources,
        ));
        previous = Some(name);
    }
    for (index, group) in input.graph.groups.iter().enumerate() {
        let mut resources = Vec::new();
        let mut namespaces = BTreeSet::new();
        for (i, node) in group.iter().enumerate() {
            if let Some(ns) = &node.id.namespace {
                namespaces.insert(ns.clone());
            }
            let value = json!({"kind": node.id.kind, "metadata": {"name": node.id.name}});
            resources.push(resource(
                i,
                &value,
                &render_node(node, input.target_paused)?,
            ));
        }
        let name = group_bundle_name(input.cluster_name, index);
        let step = format!("{:02}", index + 1);
        out.push(bundle(
            input,
            &name,
            &step,
            previous.as_deref(),
            namespaces,
            resources,
        ));
        previous = Some(name);
    }
    Ok(out)
}

/// A Bundle resource under `templates/` so Helm renders it (and its owner lookups).
fn resource(index: usize, object: &Value, content: &str) -> Value {
    let kind = object["kind"].as_str().unwrap_or("object").to_lowercase();
    let name = object["metadata"]["name"].as_str().unwrap_or("");
    json!({
        "name": format!("templates/{index:03}-{kind}-{name}.yaml"),
        "content": content,
    })
}

fn bundle(
    input: &PlanInput,
    name: &str,
    step: &str,
    depends_on: Option<&str>,
    namespaces: BTreeSet<String>,
    mut resources: Vec<Value>,
) -> Value {
    // Fleet creates `defaultNamespace`; any other namespace the objects live in is created by
    // the Bundle and adopted if it exists (`takeOwnership`), kept when the Bundle goes.
    let extra: Vec<&String> = namespaces
        .iter()
        .filter(|ns| ns.as_str() != input.cluster_namespace)
        .collect();
    for ns in &extra {
        let namespace = json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": ns, "annotations": {"helm.sh/resource-policy": "keep"}},
        });
        let yaml = serde_yaml::to_string(&namespace).unwrap_or_default();
        resources.push(json!({"name": format!("templates/namespace-{ns}.yaml"), "content": yaml}));
    }
    let mut spec = json!({
        "defaultNamespace": input.cluster_namespace,
        "keepResources": true,
        "targets": [{"clusterName": input.fleet_cluster_name}],
        "resources": resources,
    });
    if !extra.is_empty() {
        spec["helm"] = json!({"takeOwnership": true});
    }
    if let Some(previous) = depends_on {
        spec["dependsOn"] = json!([{"name": previous}]);
    }
    json!({
        "apiVersion": "fleet.cattle.io/v1alpha1",
        "kind": "Bundle",
        "metadata": {
            "name": name,
            "namespace": input.cluster_namespace,
            "labels": {MOVE_CLUSTER_LABEL: input.cluster_name, MOVE_STEP_LABEL: step},
        },
        "spec": spec,
    })
}

#[cfg(test)]
#[path = "move_plan_tests.rs"]
mod tests;
