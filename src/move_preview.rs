//! `caapf move-preview <namespace>/<cluster>`: reads the management cluster and prints the move
//! object graph of one Cluster and the Fleet Bundles a move would create. It only lists and gets;
//! it writes nothing.
//!
//! Discovery follows clusterctl's (`objectgraph.go` `getDiscoveryTypes` / `Discovery`): the CRDs
//! labelled `clusterctl.cluster.x-k8s.io` in their storage version plus Secrets and ConfigMaps,
//! listed in the Cluster's namespace (and its ClusterClass's), cluster-scoped types everywhere,
//! Secrets in the namespaces of infrastructure providers; the provider inventory and the Cluster
//! API Operator's objects for the providers Bundle.

use std::fmt::Write as _;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::{Client, ResourceExt};
use serde_json::Value;

use crate::api::FleetAddonConfig;
use crate::model::config::EffectiveConfig;
use crate::model::move_graph::{self, MoveGraph};
use crate::model::move_plan::{self, INVENTORY_API_VERSION, PlanInput, ProviderPlan};
use crate::model::move_target;
use crate::model::move_types::{self, MoveTypes, TypeRule};
use crate::{Error, Result, names};

/// What the preview found.
#[derive(Debug)]
pub struct Preview {
    pub namespace: String,
    pub cluster: String,
    pub fleet_cluster: String,
    pub graph: MoveGraph,
    pub providers: ProviderPlan,
    pub bundles: Vec<Value>,
    /// The Secrets the controller would write to the target itself (never in a Bundle).
    pub secrets: Vec<Value>,
    /// What keeps the move waiting in `Pending`.
    pub not_provisioned: Vec<String>,
}

/// Splits `<namespace>/<cluster>`.
pub fn parse_target(target: &str) -> Result<(String, String)> {
    match target.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns.to_string(), name.to_string()))
        }
        _ => Err(Error::InvalidConfig(format!(
            "move-preview: expected <namespace>/<cluster>, got {target:?}"
        ))),
    }
}

/// The API resource of a move type.
pub fn resource(rule: &TypeRule) -> ApiResource {
    ApiResource {
        group: rule.group.clone(),
        version: rule.version.clone(),
        api_version: rule.api_version(),
        kind: rule.kind.clone(),
        plural: rule.plural.clone(),
    }
}

/// Lists a type; a type the server does not serve lists nothing.
pub async fn list(
    client: &Client,
    ar: &ApiResource,
    namespace: Option<&str>,
) -> Result<Vec<DynamicObject>> {
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    };
    match api.list(&ListParams::default()).await {
        Ok(list) => Ok(list
            .items
            .into_iter()
            .map(|mut o| {
                // Lists carry the type on the list only.
                o.types = Some(kube::api::TypeMeta {
                    api_version: ar.api_version.clone(),
                    kind: ar.kind.clone(),
                });
                o
            })
            .collect()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(Vec::new()),
        Err(err) => Err(err.into()),
    }
}

/// What a move is built from: the graph of the Cluster, the providers to install, and the move
/// types (to read the same objects on the target).
#[derive(Debug)]
pub struct MoveInputs {
    pub graph: MoveGraph,
    pub providers: ProviderPlan,
    pub types: MoveTypes,
}

/// Reads everything a move of `namespace/cluster` needs and builds the graph and the Bundles.
pub async fn preview(client: &Client, namespace: &str, cluster: &str) -> Result<Preview> {
    let MoveInputs {
        graph, providers, ..
    } = gather(client, namespace, cluster)
        .await?
        .map_err(|reason| Error::missing("Cluster", format!("{namespace}/{cluster}"), reason))?;
    let configs: Api<FleetAddonConfig> = Api::all(client.clone());
    let config = match configs.get_opt(names::CONFIG_NAME).await {
        Ok(config) => config,
        Err(kube::Error::Api(status)) if status.code == 404 => None,
        Err(err) => return Err(err.into()),
    };
    let fleet_cluster = EffectiveConfig::resolve(config.as_ref()).fleet_cluster_name(cluster);
    let keep = Default::default();
    let input = PlanInput {
        cluster_namespace: namespace,
        cluster_name: cluster,
        fleet_cluster_name: &fleet_cluster,
        graph: &graph,
        providers: &providers,
        target_paused: true,
        keep_on_target: &keep,
    };
    let bundles = move_plan::bundles(&input).map_err(|e| Error::Serialization(e.to_string()))?;
    let secrets = move_plan::target_secrets(&input);
    let not_provisioned = move_target::not_provisioned(&graph);
    Ok(Preview {
        namespace: namespace.into(),
        cluster: cluster.into(),
        fleet_cluster,
        graph,
        providers,
        bundles,
        secrets,
        not_provisioned,
    })
}

/// Reads the graph's objects and the providers of `namespace/cluster` (lists and gets only).
/// The outer error is the API's; the inner one says why the graph cannot be built from what
/// was read (e.g. the Cluster is gone).
pub async fn gather(
    client: &Client,
    namespace: &str,
    cluster: &str,
) -> Result<std::result::Result<MoveInputs, String>> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crds = crds
        .list(&ListParams::default().labels(move_types::CLUSTERCTL_LABEL))
        .await?
        .items;
    let types = MoveTypes::from_crds(&crds);

    let inventory_ar = ApiResource {
        group: "clusterctl.cluster.x-k8s.io".into(),
        version: "v1alpha3".into(),
        api_version: INVENTORY_API_VERSION.into(),
        kind: "Provider".into(),
        plural: "providers".into(),
    };
    let inventory = list(client, &inventory_ar, None).await?;

    let mut objects = Vec::new();
    for rule in types.iter() {
        let ar = resource(rule);
        if rule.namespaced {
            objects.extend(list(client, &ar, Some(namespace)).await?);
        } else {
            objects.extend(list(client, &ar, None).await?);
        }
    }
    // Secrets of infrastructure providers (cloud identities), as clusterctl's discovery reads.
    let secret_rule = types.rule("v1", "Secret").cloned();
    if let Some(rule) = &secret_rule {
        let mut seen = vec![namespace.to_string()];
        for entry in &inventory {
            let ns = entry.namespace().unwrap_or_default();
            if entry.data["type"] == "InfrastructureProvider" && !seen.contains(&ns) {
                objects.extend(list(client, &resource(rule), Some(&ns)).await?);
                seen.push(ns);
            }
        }
    }
    // A ClusterClass in another namespace brings its namespace's objects.
    let class_namespace = objects
        .iter()
        .find(|o| {
            o.types.as_ref().is_some_and(|t| {
                move_types::group_of(&t.api_version) == "cluster.x-k8s.io" && t.kind == "Cluster"
            }) && o.name_any() == cluster
        })
        .and_then(|o| move_graph::topology_class(&o.data, namespace))
        .map(|(ns, _)| ns)
        .filter(|ns| ns != namespace);
    if let Some(class_ns) = &class_namespace {
        for rule in types.iter().filter(|r| r.namespaced) {
            objects.extend(list(client, &resource(rule), Some(class_ns)).await?);
        }
    }

    let graph = match move_graph::move_graph(namespace, cluster, &objects, &types) {
        Ok(graph) => graph,
        Err(e) => return Ok(Err(e.to_string())),
    };

    let mut operator = Vec::new();
    for kind in move_plan::PROVIDER_KINDS {
        let ar = ApiResource {
            group: "operator.cluster.x-k8s.io".into(),
            version: "v1alpha2".into(),
            api_version: move_plan::OPERATOR_API_VERSION.into(),
            kind: kind.into(),
            plural: format!("{}s", kind.to_lowercase()),
        };
        operator.extend(list(client, &ar, None).await?);
    }
    let mut secrets = Vec::new();
    for provider in &operator {
        let Some(reference) = provider.data["spec"]["configSecret"].as_object() else {
            continue;
        };
        let name = reference.get("name").and_then(Value::as_str).unwrap_or("");
        let ns = reference
            .get("namespace")
            .and_then(Value::as_str)
            .map(str::to_string)
            .or_else(|| provider.namespace())
            .unwrap_or_default();
        let api: Api<Secret> = Api::namespaced(client.clone(), &ns);
        if let Some(secret) = api.get_opt(name).await? {
            let mut value =
                serde_json::to_value(&secret).map_err(|e| Error::Serialization(e.to_string()))?;
            value["apiVersion"] = "v1".into();
            value["kind"] = "Secret".into();
            secrets.push(
                serde_json::from_value(value).map_err(|e| Error::Serialization(e.to_string()))?,
            );
        }
    }
    let providers = move_plan::provider_plan(&inventory, &operator, &secrets);
    Ok(Ok(MoveInputs {
        graph,
        providers,
        types,
    }))
}

/// Printed on stderr by `caapf move-preview` (stdout stays the report or YAML to pipe).
pub const EXPERIMENTAL_NOTE: &str = "note: self-managed moves are experimental and off by default (--feature-gates=SelfManagedMove=true); they have run only against the sandbox API server with Fleet's agent played by the tests, never against a real Fleet and infrastructure (docs/self-managed.md, \"Status\")";

/// The human-readable report: creation groups, skipped objects, provider warnings, Bundles.
pub fn render_text(p: &Preview) -> String {
    let mut out = String::new();
    let count: usize = p.graph.groups.iter().map(Vec::len).sum();
    let _ = writeln!(
        out,
        "Cluster {}/{}: {count} objects in {} creation groups",
        p.namespace,
        p.cluster,
        p.graph.groups.len()
    );
    for (i, group) in p.graph.groups.iter().enumerate() {
        let _ = writeln!(out, "  group {:02}:", i + 1);
        for node in group {
            let blocking = if node.blocking { "  [block-move]" } else { "" };
            let _ = writeln!(out, "    {}{blocking}", node.id);
        }
    }
    if !p.graph.skipped.is_empty() {
        let _ = writeln!(out, "Not moved:");
        for s in &p.graph.skipped {
            let _ = writeln!(out, "  {}: {}", s.id, s.reason);
        }
    }
    if !p.graph.shared.is_empty() {
        let _ = writeln!(
            out,
            "Shared with other Clusters (the move refuses to start):"
        );
        for s in &p.graph.shared {
            let _ = writeln!(out, "  {}: {}", s.id, s.reason);
        }
    }
    if !p.not_provisioned.is_empty() {
        let _ = writeln!(
            out,
            "Not provisioned (the move waits before pausing anything):"
        );
        for what in &p.not_provisioned {
            let _ = writeln!(out, "  {what}");
        }
    }
    let _ = writeln!(out, "Providers ({} objects):", p.providers.objects.len());
    for o in &p.providers.objects {
        let _ = writeln!(
            out,
            "  {} {}/{} {}",
            o["kind"].as_str().unwrap_or(""),
            o["metadata"]["namespace"].as_str().unwrap_or(""),
            o["metadata"]["name"].as_str().unwrap_or(""),
            o["spec"]["version"].as_str().unwrap_or(""),
        );
    }
    for w in &p.providers.warnings {
        let _ = writeln!(out, "  warning: {w}");
    }
    let _ = writeln!(
        out,
        "Bundles in namespace {} targeting Fleet Cluster {}:",
        p.namespace, p.fleet_cluster
    );
    for b in &p.bundles {
        let depends = b["spec"]["dependsOn"][0]["name"]
            .as_str()
            .map(|d| format!(" (after {d})"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  {}: {} resources{depends}",
            b["metadata"]["name"].as_str().unwrap_or(""),
            b["spec"]["resources"].as_array().map_or(0, Vec::len),
        );
    }
    if !p.secrets.is_empty() {
        let _ = writeln!(
            out,
            "Secrets written to the target by the move controller (never in a Bundle):"
        );
        for s in &p.secrets {
            let _ = writeln!(
                out,
                "  Secret {}/{}",
                s["metadata"]["namespace"].as_str().unwrap_or(""),
                s["metadata"]["name"].as_str().unwrap_or(""),
            );
        }
    }
    out
}

/// The Bundles as a YAML stream (no Secret is in them).
pub fn render_yaml(p: &Preview) -> Result<String> {
    let mut out = String::new();
    for b in &p.bundles {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(b).map_err(|e| Error::Serialization(e.to_string()))?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_is_namespace_slash_name() {
        assert_eq!(
            parse_target("default/c1").unwrap(),
            ("default".to_string(), "c1".to_string())
        );
        for bad in ["c1", "/c1", "default/", "a/b/c", ""] {
            let err = parse_target(bad).unwrap_err().to_string();
            assert!(
                err.contains("expected <namespace>/<cluster>"),
                "{bad}: {err}"
            );
        }
    }
}
