//! The Fleet Bundles that carry one Cluster's move to the Cluster itself.
//!
//! - `<cluster>-move-providers`: one Cluster API Operator object per provider installed in the
//!   management cluster (`operator.cluster.x-k8s.io/v1alpha2`, kinds from
//!   kubernetes-sigs/cluster-api-operator `api/v1alpha2/*provider_types.go`), from the operator's
//!   own objects when the management cluster uses it, else from clusterctl's inventory
//!   (`providers.clusterctl.cluster.x-k8s.io`, `cmd/clusterctl/api/v1alpha3/provider_type.go`).
//! - `<cluster>-move-NN` (and `-NN-K` when a group is split, see [`MAX_BUNDLE_BYTES`]):
//!   creation group NN of [`super::move_graph`], `dependsOn` the previous Bundle so owners exist
//!   before dependents.
//!
//! **No owner references and no Secrets in a Bundle.** The copies carry no owner references:
//! their owners' UIDs are assigned by the target's API server, and the only way a template could
//! learn them is Helm's `lookup`, which Fleet's agent answers only in some versions and only
//! when it detects it (rancher/fleet v0.12.0-v0.14.0 render every dry run client-side, where
//! `lookup` returns nothing; v0.14.1-v0.16.1 run a server-side dry run only when
//! `internal/helmdeployer/lookup.go` `hasLookupFunction` finds `lookup` in a template parsed with
//! no other function defined, which fails for a template calling `required` or `quote`). The
//! move controller restores them on the target once Fleet reports the copies there, as
//! clusterctl's `buildOwnerChain` rebuilds them with the owners' new UIDs
//! ([`super::move_target`]). Secrets (the CA, etcd and service-account keys, the kubeconfig,
//! bootstrap data, provider credentials) never enter a Bundle: a Bundle's resources are kept in
//! its spec and in Fleet's cluster-scoped `Content`, readable by whoever reads Bundles and not
//! encrypted at rest as Secrets are. The controller writes them to the target itself
//! ([`target_secrets`]).
//!
//! Bundle shape: rancher/fleet `pkg/apis/fleet.cattle.io/v1alpha1/bundle_types.go` (`targets`,
//! `dependsOn`, `resources`) and `bundledeployment_types.go` (`defaultNamespace`,
//! `keepResources`, `helm.takeOwnership`). Every Bundle targets exactly one Fleet Cluster by name
//! and keeps its resources when removed: uninstalling live CAPI objects from the target would start
//! deleting the infrastructure the cluster runs on.

use std::collections::BTreeSet;

use kube::api::DynamicObject;
use serde_json::{Map, Value, json};

use super::json::object_at;
use super::move_graph::{MoveGraph, MoveNode, ObjectId};
use super::move_types::group_of;

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

/// On every copy the move makes on the target (Bundle resources and the Secrets the controller
/// writes), value `<namespace>/<cluster>`: tells the move's copies from objects the target had
/// before (a global identity already there is left alone, and only copies are removed when a
/// move fails).
pub const MOVE_COPY_ANNOTATION: &str = "fleet.addons.cluster.x-k8s.io/move-copy";

/// On a source object the move fenced with `cluster.x-k8s.io/paused` (value
/// `<namespace>/<cluster>`): the copies drop both, so the target does not inherit the fence.
pub const MOVE_FENCE_ANNOTATION: &str = "fleet.addons.cluster.x-k8s.io/move-fence";

/// Helm release names (derived from Bundle names by Fleet) and label values stay below this.
const MAX_NAME: usize = 53;

/// The most resource text one Bundle carries; a larger creation group is split over several
/// Bundles. Each Bundle becomes a Helm release on the target whose Secret holds the templates
/// and the rendered manifest (twice this, before compression) and must stay under the 1 MiB a
/// Secret may hold (Kubernetes `pkg/apis/core/types.go` `MaxSecretSize`); the Bundle itself must
/// stay under etcd's default request limit of 1.5 MiB. A creation group of a few hundred Machines
/// (Machines, their KubeadmConfigs and infrastructure machines) is several MiB.
pub const MAX_BUNDLE_BYTES: usize = 512 * 1024;

/// Why a plan cannot be rendered.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlanError {
    #[error("{object}: serialising it failed: {error}")]
    Serialise { object: String, error: String },
    #[error("{object}: {bytes} bytes, more than a Bundle may carry ({MAX_BUNDLE_BYTES})")]
    TooLarge { object: String, bytes: usize },
}

/// The provider objects to install on the target, and what the inputs could not tell.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProviderPlan {
    /// Operator objects, in install order.
    pub objects: Vec<Value>,
    /// The `configSecret` Secrets they name (provider credentials): written to the target by the
    /// controller, never carried by a Bundle.
    pub secrets: Vec<Value>,
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
                    Some(s) => plan.secrets.push(strip_for_target(s)),
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
        // `clusterctl init` substitutes the variables of its environment (cloud credentials
        // such as AWS_B64ENCODED_CREDENTIALS) into the provider's components; the inventory
        // records none of them (cluster-api v1.12.0 `cmd/clusterctl/api/v1alpha3/
        // provider_type.go`, `cmd/clusterctl/client/repository/components.go`), so the move
        // cannot carry them. Docker's provider needs none.
        if kind == "InfrastructureProvider" && provider != "docker" {
            plan.warnings.push(format!(
                "{kind} {namespace}/{provider}: the credentials clusterctl init took from its environment are not in the inventory and are not carried; create a Secret with those variables on the target and set spec.configSecret on this provider there before its Bundle is ready"
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
/// the cluster again; the source's fence, see [`MOVE_FENCE_ANNOTATION`]) and its finalizer
/// (nothing on the target removes it unless this provider runs there and imports the Cluster,
/// which adds it again).
pub fn strip_for_target(object: &DynamicObject) -> Value {
    let mut value = serde_json::to_value(object).unwrap_or(Value::Null);
    if let Some(metadata) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in STRIPPED_METADATA {
            metadata.remove(field);
        }
        if let Some(Value::Object(annotations)) = metadata.get_mut("annotations")
            && annotations.remove(MOVE_FENCE_ANNOTATION).is_some()
        {
            annotations.remove(crate::names::CAPI_PAUSED_ANNOTATION);
            if annotations.is_empty() {
                metadata.remove("annotations");
            }
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

/// Sets the pause on a Cluster (`spec.paused`), a ClusterClass or a ClusterResourceSet (the
/// `cluster.x-k8s.io/paused` annotation); other kinds are left alone.
///
/// Clusters and ClusterClasses as clusterctl's `setClusterPause` / `setClusterClassPause` do
/// (cluster-api v1.12.0 `cmd/clusterctl/client/cluster/mover.go`). ClusterResourceSets because
/// their controller does not look at the Cluster's pause, only at the set's own annotation
/// (v1.12.0 `internal/controllers/clusterresourceset/clusterresourceset_controller.go`:
/// `paused.EnsurePausedCondition(ctx, r.Client, nil, clusterResourceSet)`): an unpaused copy
/// would create the Cluster's `ClusterResourceSetBinding` on the target before the Bundle that
/// carries the source's binding, which then fails ("exists and cannot be imported into the
/// current release").
pub fn set_paused(value: &mut Value, paused: bool) {
    let group = value["apiVersion"].as_str().map(group_of).unwrap_or("");
    match (group, value["kind"].as_str()) {
        ("cluster.x-k8s.io", Some("Cluster")) => {
            object_at(value, &["spec"]).insert("paused".into(), json!(paused));
        }
        ("cluster.x-k8s.io", Some("ClusterClass"))
        | ("addons.cluster.x-k8s.io", Some("ClusterResourceSet")) => {
            let annotations = object_at(value, &["metadata", "annotations"]);
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

/// The copy of `node` as written to the target: [`strip_for_target`] (no owner references:
/// [`super::move_target`] restores them), paused or not, marked with [`MOVE_COPY_ANNOTATION`].
pub fn target_object(node: &MoveNode, copy_of: &str, target_paused: bool) -> Value {
    let mut value = strip_for_target(&node.object);
    set_paused(&mut value, target_paused);
    mark_copy(&mut value, copy_of);
    value
}

/// Adds [`MOVE_COPY_ANNOTATION`] with value `copy_of` (`<namespace>/<cluster>`).
pub fn mark_copy(value: &mut Value, copy_of: &str) {
    object_at(value, &["metadata", "annotations"])
        .insert(MOVE_COPY_ANNOTATION.into(), json!(copy_of));
}

/// One object as a Helm template that renders it verbatim: plain YAML with its literal `{{`
/// escaped, and no template action of its own (nothing for Fleet's agent to detect or look up).
pub fn render_node(
    node: &MoveNode,
    copy_of: &str,
    target_paused: bool,
) -> Result<String, PlanError> {
    let value = target_object(node, copy_of, target_paused);
    let yaml = serde_yaml::to_string(&value).map_err(|e| PlanError::Serialise {
        object: node.id.to_string(),
        error: e.to_string(),
    })?;
    Ok(escape_template(&yaml))
}

/// Text Helm must output verbatim: every `{{` becomes an action printing `{{`.
pub fn escape_template(text: &str) -> String {
    text.replace("{{", "{{`{{`}}")
}

/// Whether an object is a core `v1` Secret (never carried by a Bundle).
pub fn is_secret(api_version: &str, kind: &str) -> bool {
    api_version == "v1" && kind == "Secret"
}

/// `<namespace>/<cluster>`, the value of [`MOVE_COPY_ANNOTATION`].
pub fn copy_of(namespace: &str, cluster: &str) -> String {
    format!("{namespace}/{cluster}")
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
    /// Objects the target already has and keeps (a global identity): left out, as clusterctl
    /// skips a global object that exists on the target.
    pub keep_on_target: &'a BTreeSet<ObjectId>,
}

/// The Secrets the controller writes to the target: every Secret of the graph (but those the
/// target keeps) and the providers' `configSecret`s, stripped and marked as copies, without
/// owner references (restored with the others).
pub fn target_secrets(input: &PlanInput) -> Vec<Value> {
    let copy = copy_of(input.cluster_namespace, input.cluster_name);
    let mut out = input.providers.secrets.clone();
    out.iter_mut().for_each(|s| mark_copy(s, &copy));
    out.extend(
        input
            .graph
            .nodes()
            .filter(|n| is_secret(&n.id.api_version, &n.id.kind))
            .filter(|n| !input.keep_on_target.contains(&n.id))
            .map(|n| target_object(n, &copy, input.target_paused)),
    );
    out
}

/// Name of the providers Bundle.
pub fn providers_bundle_name(cluster: &str) -> String {
    bounded(&format!("{cluster}-move-providers"))
}

/// Name of the Bundle of creation group `index` (0-based; names count from 01).
pub fn group_bundle_name(cluster: &str, index: usize) -> String {
    group_part_bundle_name(cluster, index, 0)
}

/// Name of part `part` (0-based) of creation group `index`: `<cluster>-move-` and its
/// [`group_step`].
pub fn group_part_bundle_name(cluster: &str, index: usize, part: usize) -> String {
    bounded(&format!("{cluster}-move-{}", group_step(index, part)))
}

/// The [`MOVE_STEP_LABEL`] of part `part` (0-based) of creation group `index`: `NN` for the
/// first, `NN-K` (K from 2) for the others.
fn group_step(index: usize, part: usize) -> String {
    match part {
        0 => format!("{:02}", index + 1),
        _ => format!("{:02}-{}", index + 1, part + 1),
    }
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

/// The Bundles, providers first, then one per creation group in order (a group larger than
/// [`MAX_BUNDLE_BYTES`] in several); each depends on the previous one. Secrets and the objects
/// the target keeps are left out.
pub fn bundles(input: &PlanInput) -> Result<Vec<Value>, PlanError> {
    let copy = copy_of(input.cluster_namespace, input.cluster_name);
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
    let mut index = 0;
    for group in &input.graph.groups {
        let nodes: Vec<&MoveNode> = group
            .iter()
            .filter(|n| !is_secret(&n.id.api_version, &n.id.kind))
            .filter(|n| !input.keep_on_target.contains(&n.id))
            .collect();
        if nodes.is_empty() {
            continue;
        }
        let mut parts: Vec<(Vec<Value>, BTreeSet<String>, usize)> = vec![Default::default()];
        for node in nodes {
            let content = render_node(node, &copy, input.target_paused)?;
            if content.len() > MAX_BUNDLE_BYTES {
                return Err(PlanError::TooLarge {
                    object: node.id.to_string(),
                    bytes: content.len(),
                });
            }
            let last = parts.last_mut().expect("one part at least");
            if last.2 + content.len() > MAX_BUNDLE_BYTES {
                parts.push(Default::default());
            }
            let (resources, namespaces, bytes) = parts.last_mut().expect("one part at least");
            if let Some(ns) = &node.id.namespace {
                namespaces.insert(ns.clone());
            }
            let value = json!({"kind": node.id.kind, "metadata": {"name": node.id.name}});
            *bytes += content.len();
            resources.push(resource(resources.len(), &value, &content));
        }
        for (part, (resources, namespaces, _)) in parts.into_iter().enumerate() {
            let name = group_part_bundle_name(input.cluster_name, index, part);
            out.push(bundle(
                input,
                &name,
                &group_step(index, part),
                previous.as_deref(),
                namespaces,
                resources,
            ));
            previous = Some(name);
        }
        index += 1;
    }
    Ok(out)
}

/// The names of live move Bundles that the desired set no longer has (a group that went, a
/// split that changed, a previous attempt's): left alone they would keep deploying their old
/// content whenever Fleet redeploys them (a new deployment ID, a missing release history:
/// rancher/fleet v0.16.1 `internal/cmd/agent/deployer/deployer.go`).
pub fn stale_bundles(desired: &[Value], live: &[String]) -> Vec<String> {
    let wanted: BTreeSet<&str> = desired
        .iter()
        .filter_map(|b| b["metadata"]["name"].as_str())
        .collect();
    live.iter()
        .filter(|name| !wanted.contains(name.as_str()))
        .cloned()
        .collect()
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
