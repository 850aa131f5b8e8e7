//! Discovery documents: `/version`, legacy (`/api`, `/apis`, `/apis/{g}/{v}`) and aggregated
//! (`apidiscovery.k8s.io/v2`) discovery, and minimal OpenAPI documents.

use serde_json::{Value, json};

use crate::registry::{Registry, ResourceDef, VERBS};

/// The Kubernetes version the sandbox reports.
pub const GIT_VERSION: &str = "v1.34.1";

/// `/version`.
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "34",
        "gitVersion": GIT_VERSION,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-09-09T00:00:00Z",
        "goVersion": "go1.24.6",
        "compiler": "gc",
        "platform": "linux/amd64",
        "emulationMajor": "1",
        "emulationMinor": "34",
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": "33"
    })
}

/// Whether `Accept` asks for aggregated discovery.
pub fn wants_aggregated(accept: &str) -> bool {
    accept.split(',').next().is_some_and(|first| {
        first.contains("g=apidiscovery.k8s.io") && first.contains("as=APIGroupDiscoveryList")
    })
}

/// The Content-Type of aggregated discovery responses.
pub const AGGREGATED_CONTENT_TYPE: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// `/api` (legacy).
pub fn core_versions() -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "10.0.0.1:6443"}]
    })
}

fn group_json(name: &str, versions: &[String]) -> Value {
    let gv = |v: &String| json!({"groupVersion": format!("{name}/{v}"), "version": v});
    json!({
        "name": name,
        "versions": versions.iter().map(gv).collect::<Vec<_>>(),
        "preferredVersion": versions.first().map(gv).unwrap_or(Value::Null),
    })
}

/// `/apis` (legacy).
pub fn groups(reg: &Registry) -> Value {
    let groups: Vec<Value> = reg
        .groups()
        .iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, vs)| group_json(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/{group}` (legacy).
pub fn group(reg: &Registry, name: &str) -> Option<Value> {
    let groups = reg.groups();
    let vs = groups.get(name)?;
    let mut g = group_json(name, vs);
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    Some(g)
}

fn resources_in<'a>(reg: &'a Registry, group: &str, version: &str) -> Vec<&'a ResourceDef> {
    let mut v: Vec<&ResourceDef> = reg
        .all()
        .map(|d| d.as_ref())
        .filter(|d| d.group == group && d.version(version).is_some())
        .collect();
    v.sort_by(|a, b| a.plural.cmp(&b.plural));
    v
}

/// `/api/v1` or `/apis/{group}/{version}` (legacy `APIResourceList`).
pub fn resource_list(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let defs = resources_in(reg, group, version);
    if defs.is_empty() {
        return None;
    }
    let mut resources = Vec::new();
    for d in defs {
        let mut r = json!({
            "name": d.plural,
            "singularName": d.singular,
            "namespaced": d.namespaced,
            "kind": d.kind,
            "verbs": VERBS,
        });
        if !d.short_names.is_empty() {
            r["shortNames"] = json!(d.short_names);
        }
        if !d.categories.is_empty() {
            r["categories"] = json!(d.categories);
        }
        if d.crd.is_some() {
            r["storageVersionHash"] =
                json!(format!("{:x}", hash(&format!("{}/{}", d.group, d.plural))));
        }
        resources.push(r);
        if d.has_status {
            resources.push(json!({
                "name": format!("{}/status", d.plural),
                "singularName": "",
                "namespaced": d.namespaced,
                "kind": d.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}

fn hash(s: &str) -> u64 {
    s.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

fn aggregated_group(reg: &Registry, name: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| {
            let resources: Vec<Value> = resources_in(reg, name, v)
                .into_iter()
                .map(|d| {
                    let kind = json!({"group": d.group, "version": v, "kind": d.kind});
                    let mut r = json!({
                        "resource": d.plural,
                        "responseKind": kind,
                        "scope": if d.namespaced { "Namespaced" } else { "Cluster" },
                        "singularResource": d.singular,
                        "verbs": VERBS,
                    });
                    if !d.short_names.is_empty() {
                        r["shortNames"] = json!(d.short_names);
                    }
                    if !d.categories.is_empty() {
                        r["categories"] = json!(d.categories);
                    }
                    if d.has_status {
                        r["subresources"] = json!([{
                            "subresource": "status",
                            "responseKind": kind,
                            "verbs": ["get", "patch", "update"],
                        }]);
                    }
                    r
                })
                .collect();
            json!({"version": v, "resources": resources, "freshness": "Current"})
        })
        .collect();
    json!({"metadata": {"name": name, "creationTimestamp": null}, "versions": vs})
}

/// Aggregated discovery: `/api` (core only) or `/apis` (every other group).
pub fn aggregated(reg: &Registry, core: bool) -> Value {
    let items: Vec<Value> = reg
        .groups()
        .iter()
        .filter(|(g, _)| g.is_empty() == core)
        .map(|(g, vs)| aggregated_group(reg, g, vs))
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    })
}

/// `/openapi/v2`: an empty but well-formed Swagger document. kubectl and helm then fall back
/// to their built-in knowledge for strategic merge and skip client-side schema validation.
pub fn openapi_v2() -> Value {
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": GIT_VERSION},
        "paths": {},
        "definitions": {}
    })
}

/// `/openapi/v3`: the index of group-version documents (empty).
pub fn openapi_v3() -> Value {
    json!({"paths": {}})
}
