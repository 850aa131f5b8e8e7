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

/// `/openapi/v2` as JSON: a well-formed Swagger document without definitions. kubectl and
/// helm then fall back to their built-in knowledge for strategic merge patches.
pub fn openapi_v2() -> Value {
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": GIT_VERSION},
        "paths": {},
        "definitions": {}
    })
}

/// The protobuf media type clients ask `/openapi/v2` for.
pub const OPENAPI_V2_PB: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";

/// `/openapi/v2` in the protobuf encoding (`openapi_v2.Document` with `swagger` and `info`
/// only), for clients that only accept protobuf there (kubectl).
pub fn openapi_v2_protobuf() -> Vec<u8> {
    fn field(num: u8, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![(num << 3) | 2, bytes.len() as u8];
        out.extend_from_slice(bytes);
        out
    }
    let mut info = field(1, b"Kubernetes");
    info.extend(field(2, GIT_VERSION.as_bytes()));
    let mut doc = field(1, b"2.0");
    doc.extend(field(2, &info));
    doc
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3`: the index of group-version documents.
pub fn openapi_v3(reg: &Registry) -> Value {
    let mut paths = serde_json::Map::new();
    for (g, vs) in reg.groups() {
        for v in vs {
            let p = gv_path(&g, &v);
            paths.insert(
                p.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={:016X}", hash(&p))}),
            );
        }
    }
    json!({"paths": paths})
}

/// `/openapi/v3/{api/v1 | apis/g/v}`: paths with their operations, the
/// `x-kubernetes-group-version-kind` extension and the `fieldValidation` parameter, which is
/// what kubectl checks to use server-side field validation. No component schemas.
pub fn openapi_v3_group(reg: &Registry, path: &str) -> Option<Value> {
    let (group, version) = match path
        .trim_matches('/')
        .split('/')
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["api", v] => (String::new(), v.to_string()),
        ["apis", g, v] => (g.to_string(), v.to_string()),
        _ => return None,
    };
    let defs = resources_in(reg, &group, &version);
    if defs.is_empty() {
        return None;
    }
    let prefix = if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    let mut paths = serde_json::Map::new();
    for d in defs {
        let gvk = json!({"group": d.group, "version": version, "kind": d.kind});
        let query = |name: &str| json!({"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": true}});
        let write_params = json!([
            query("dryRun"),
            query("fieldManager"),
            query("fieldValidation")
        ]);
        let op = |action: &str, params: &Value| {
            json!({
                "x-kubernetes-action": action,
                "x-kubernetes-group-version-kind": gvk,
                "parameters": params,
                "responses": {"200": {"description": "OK"}}
            })
        };
        let mut patch = op("patch", &write_params);
        let mut media = serde_json::Map::new();
        for ct in [
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/apply-patch+yaml",
        ] {
            media.insert(ct.into(), json!({"schema": {"type": "object"}}));
        }
        patch["requestBody"] = json!({"content": media});
        let base = if d.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}", d.plural)
        } else {
            format!("{prefix}/{}", d.plural)
        };
        paths.insert(
            base.clone(),
            json!({"get": op("list", &json!([])), "post": op("post", &write_params)}),
        );
        paths.insert(
            format!("{base}/{{name}}"),
            json!({"get": op("get", &json!([])), "put": op("put", &write_params),
                   "patch": patch, "delete": op("delete", &json!([]))}),
        );
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": GIT_VERSION},
        "paths": paths,
        "components": {"schemas": {}}
    }))
}
