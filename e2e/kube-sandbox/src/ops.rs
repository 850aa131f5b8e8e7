//! Write semantics: create, update, patch, server-side apply and delete, with the metadata
//! rules of a real API server (uid, generation, resourceVersion, managedFields, finalizers,
//! status subresource, namespaces, dry run).

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::crd;
use crate::error::{ApiError, ApiResult};
use crate::patch::{PatchType, apply_patch};
use crate::registry::{GroupResource, ResourceDef};
use crate::schema::{Node, prune};
use crate::ssa;
use crate::store::State;
use crate::util::{
    finalizers_of, meta_mut, meta_str, new_uid, now_rfc3339, random_suffix, valid_dns_label,
    valid_dns_subdomain,
};

/// The `ca.crt` the sandbox publishes in `kube-root-ca.crt` ConfigMaps (a self-signed
/// certificate; the sandbox itself serves plain HTTP).
pub const ROOT_CA_PEM: &str = "-----BEGIN CERTIFICATE-----
MIIBgjCCASegAwIBAgIUaYVcvt2jq6yrGTRp6MHa0q6arAUwCgYIKoZIzj0EAwIw
FTETMBEGA1UEAwwKa3ViZXJuZXRlczAgFw0yNjExMjEwNDQ5MTRaGA8yMTI2MTAy
ODA0NDkxNFowFTETMBEGA1UEAwwKa3ViZXJuZXRlczBZMBMGByqGSM49AgEGCCqG
SM49AwEHA0IABGzR+E/XQ3cA9H+vT6a6vKD9PxBrPgSkZf28iMv0xx9j2dWbtzRN
kIJBMlUZNlh+5n+r/AB+xpQKX07eCVaPbKCjUzBRMB0GA1UdDgQWBBRK24odiwMh
l9+I5z6D8AoT4f1uWzAfBgNVHSMEGDAWgBRK24odiwMhl9+I5z6D8AoT4f1uWzAP
BgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0kAMEYCIQCP2h9jcyuk0zdxlFLw
soqZjqBeI+8O9CykYFRACDEwWAIhAIcRQj1LGlN5aI2LnQVeZYjguHtXeQSsI/wt
yqbGebdw
-----END CERTIFICATE-----
";

/// Namespaces that exist at start and cannot be deleted.
pub const SYSTEM_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public"];

/// The finalizer that holds an owner deleted with `propagationPolicy: Foreground` until its
/// dependents are gone.
pub const FOREGROUND: &str = "foregroundDeletion";

/// Field manager the simulated controllers write as.
pub const CONTROLLER_MANAGER: &str = "kube-controller-manager";

/// Who is writing, where, and how.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// The resource.
    pub def: Arc<ResourceDef>,
    /// The requested version.
    pub version: String,
    /// Namespace from the URL ("" for cluster-scoped).
    pub namespace: String,
    /// Name from the URL ("" for a create without one).
    pub name: String,
    /// "" or "status".
    pub subresource: String,
    /// Field manager (from `fieldManager` or the User-Agent).
    pub manager: String,
    /// `dryRun=All`.
    pub dry_run: bool,
    /// Validate custom resources against their schema.
    pub validate: bool,
    /// Check RBAC writes for privilege escalation as this writer (`None`: not checked, e.g.
    /// the admin or the sandbox itself).
    pub escalation: Option<crate::escalation::Escalation>,
}

impl Ctx {
    fn gr(&self) -> GroupResource {
        (self.def.group.clone(), self.def.plural.clone())
    }

    fn schema(&self) -> Option<&Value> {
        self.def
            .version(&self.version)
            .and_then(|v| v.schema.as_ref())
    }

    fn api_version(&self) -> String {
        self.def.api_version(&self.version)
    }
}

/// The outcome of a write: the object to return (shared with the store, not copied) and the
/// HTTP status code.
pub type Written = (Arc<Value>, u16);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Create,
    Update,
    Apply,
}

/// `POST`: creates an object.
pub fn create(st: &mut State, ctx: &Ctx, mut body: Value) -> ApiResult<Written> {
    check_type(ctx, &body)?;
    let def = ctx.def.clone();
    let body_ns = meta_str(&body, "namespace").unwrap_or("").to_string();
    if def.namespaced && !body_ns.is_empty() && body_ns != ctx.namespace {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    let mut name = meta_str(&body, "name").unwrap_or("").to_string();
    if name.is_empty() {
        let prefix = meta_str(&body, "generateName").unwrap_or("").to_string();
        if prefix.is_empty() {
            return Err(ApiError::invalid_field(
                &def.group,
                &def.kind,
                "",
                "metadata.name",
                "Required value: name or generateName is required",
            ));
        }
        let gr = ctx.gr();
        loop {
            name = format!("{prefix}{}", random_suffix());
            if st.get(&gr, &ctx.namespace, &name).is_none() {
                break;
            }
        }
    }
    validate_name(&def, &name)?;
    check_namespace(st, ctx)?;
    if st.get(&ctx.gr(), &ctx.namespace, &name).is_some() {
        return Err(ApiError::already_exists(&def.group, &def.plural, &name));
    }
    meta_mut(&mut body).insert("name".into(), json!(name));
    let ctx = Ctx {
        name,
        ..ctx.clone()
    };
    finish(st, &ctx, None, body, Op::Create)
}

/// `PUT`: replaces an object (or its status). A stale `resourceVersion` is a 409.
pub fn update(st: &mut State, ctx: &Ctx, body: Value) -> ApiResult<Written> {
    check_type(ctx, &body)?;
    let def = &ctx.def;
    if let Some(n) = meta_str(&body, "name")
        && n != ctx.name
    {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({n}) does not match the name on the URL ({})",
            ctx.name
        )));
    }
    let Some(old) = st.get(&ctx.gr(), &ctx.namespace, &ctx.name) else {
        return Err(ApiError::not_found(&def.group, &def.plural, &ctx.name));
    };
    check_rv_precondition(ctx, &old, &body)?;
    finish(st, ctx, Some(old), body, Op::Update)
}

/// `PATCH` with a JSON, merge or strategic merge patch, or server-side apply.
pub fn patch(
    st: &mut State,
    ctx: &Ctx,
    kind: PatchType,
    body: &[u8],
    force: bool,
) -> ApiResult<Written> {
    let def = ctx.def.clone();
    let old = st.get(&ctx.gr(), &ctx.namespace, &ctx.name);
    if kind == PatchType::Apply {
        return apply(st, ctx, old, body, force);
    }
    if kind == PatchType::Strategic && def.is_custom() {
        return Err(ApiError::new(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
        ));
    }
    let Some(old) = old else {
        return Err(ApiError::not_found(&def.group, &def.plural, &ctx.name));
    };
    let presented = present(&old, &def, &ctx.version);
    let new = apply_patch(presented, kind, body)?;
    if !new.is_object() {
        return Err(ApiError::bad_request("the patch result is not an object"));
    }
    check_rv_precondition(ctx, &old, &new)?;
    finish(st, ctx, Some(old), new, Op::Update)
}

fn apply(
    st: &mut State,
    ctx: &Ctx,
    old: Option<Arc<Value>>,
    body: &[u8],
    force: bool,
) -> ApiResult<Written> {
    let def = ctx.def.clone();
    if ctx.manager.is_empty() {
        return Err(ApiError::bad_request(
            "PATCH, fieldManager is required for apply requests",
        ));
    }
    // Clients send apply configurations as JSON (kube-rs, client-go's typed appliers); JSON is
    // YAML, so the slower YAML parser only runs for what JSON cannot read.
    let applied: Value = serde_json::from_slice(body)
        .or_else(|_| serde_yaml::from_slice(body))
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
    if !applied.is_object() {
        return Err(ApiError::bad_request(
            "apply configuration must be an object",
        ));
    }
    if applied.get("apiVersion").and_then(Value::as_str).is_none()
        || applied.get("kind").and_then(Value::as_str).is_none()
    {
        return Err(ApiError::bad_request(
            "apiVersion and kind must be set in apply configurations",
        ));
    }
    check_type(ctx, &applied)?;
    if let Some(n) = meta_str(&applied, "name")
        && n != ctx.name
    {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({n}) does not match the name on the URL ({})",
            ctx.name
        )));
    }
    if let Some(o) = &old {
        check_rv_precondition(ctx, o, &applied)?;
    } else {
        if ctx.subresource == "status" {
            return Err(ApiError::not_found(&def.group, &def.plural, &ctx.name));
        }
        validate_name(&def, &ctx.name)?;
        check_namespace(st, ctx)?;
    }
    let api_version = ctx.api_version();
    let presented = old.as_ref().map(|o| present(o, &def, &ctx.version));
    let mut applied_pruned = applied.clone();
    if let Some(s) = ctx.schema() {
        prune(&mut applied_pruned, s);
    }
    let new = ssa::apply(&ssa::ApplyRequest {
        live: presented.as_ref(),
        applied: &applied_pruned,
        manager: &ctx.manager,
        force,
        api_version: &api_version,
        subresource: &ctx.subresource,
        has_status: def.has_status,
        schema: Node(ctx.schema()),
        group: &def.group,
        plural: &def.plural,
        name: &ctx.name,
    })?;
    match old {
        Some(o) => finish(st, ctx, Some(o), new, Op::Apply),
        None => finish(st, ctx, None, new, Op::Apply),
    }
}

/// Options of a DELETE.
#[derive(Debug, Clone, Default)]
pub struct DeleteOpts {
    /// `Orphan`, `Background` or `Foreground`.
    pub propagation: Option<String>,
    /// `preconditions.uid`.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub resource_version: Option<String>,
}

/// `DELETE`: removes an object, or marks it for deletion while it has finalizers.
pub fn delete(st: &mut State, ctx: &Ctx, opts: &DeleteOpts) -> ApiResult<Written> {
    let def = ctx.def.clone();
    let gr = ctx.gr();
    let Some(old) = st.get(&gr, &ctx.namespace, &ctx.name) else {
        return Err(ApiError::not_found(&def.group, &def.plural, &ctx.name));
    };
    if let Some(uid) = &opts.uid {
        let have = meta_str(&old, "uid").unwrap_or("");
        if have != uid {
            return Err(ApiError::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} \"{}\": Precondition failed: UID in precondition: {uid}, UID in object meta: {have}",
                    crate::error::qualified(&def.group, &def.plural),
                    ctx.name
                ),
            )
            .with_details(&def.group, &def.plural, &ctx.name));
        }
    }
    if let Some(rv) = &opts.resource_version
        && meta_str(&old, "resourceVersion") != Some(rv.as_str())
    {
        return Err(ApiError::conflict(&def.group, &def.plural, &ctx.name));
    }
    let is_namespace = def.group.is_empty() && def.plural == "namespaces";
    if is_namespace && SYSTEM_NAMESPACES.contains(&ctx.name.as_str()) {
        return Err(ApiError::new(
            403,
            "Forbidden",
            format!(
                "namespaces \"{}\" is forbidden: this namespace may not be deleted",
                ctx.name
            ),
        )
        .with_details("", "namespaces", &ctx.name));
    }
    if ctx.dry_run {
        return Ok((old, 200));
    }
    if opts.propagation.as_deref() == Some("Orphan")
        && let Some(uid) = meta_str(&old, "uid")
    {
        orphan_dependents(st, uid);
    }
    // Foreground: the owner stays (with the `foregroundDeletion` finalizer) until the garbage
    // collector has deleted its dependents.
    let foreground = opts.propagation.as_deref() == Some("Foreground")
        && !is_namespace
        && meta_str(&old, "deletionTimestamp").is_none()
        && meta_str(&old, "uid").is_some_and(|u| st.dependents.contains_key(u));
    let pending = !finalizers_of(&old).is_empty() || is_namespace || foreground;
    if pending {
        if meta_str(&old, "deletionTimestamp").is_some() {
            return Ok((old, 200));
        }
        let mut new = (*old).clone();
        let m = meta_mut(&mut new);
        if foreground {
            let fins = m.entry("finalizers").or_insert_with(|| json!([]));
            if let Some(a) = fins.as_array_mut()
                && !a.contains(&json!(FOREGROUND))
            {
                a.push(json!(FOREGROUND));
            }
            st.work
                .gc
                .insert((gr.clone(), ctx.namespace.clone(), ctx.name.clone()));
        }
        m.insert("deletionTimestamp".into(), json!(now_rfc3339()));
        m.insert("deletionGracePeriodSeconds".into(), json!(0));
        let g = m.get("generation").and_then(Value::as_i64).unwrap_or(0);
        if g > 0 {
            m.insert("generation".into(), json!(g + 1));
        }
        if is_namespace {
            new["status"] = json!({"phase": "Terminating"});
            let due = tokio::time::Instant::now() + st.work.namespace_delay;
            st.work.namespace_due.insert(ctx.name.clone(), due);
            st.work.namespaces = true;
        }
        let stored = st.put(&gr, new);
        return Ok((stored, 200));
    }
    let removed = remove_object(st, &gr, &ctx.namespace, &ctx.name);
    Ok((removed.unwrap_or_default(), 200))
}

/// Removes an object for good, with the side effects of its kind (a CRD takes its resource and
/// objects with it) and wakes the garbage collector.
pub fn remove_object(
    st: &mut State,
    gr: &GroupResource,
    ns: &str,
    name: &str,
) -> Option<Arc<Value>> {
    let removed = st.remove(gr, ns, name)?;
    if !ns.is_empty() {
        st.work.namespaces = true;
    }
    if gr.0 == "apiextensions.k8s.io" && gr.1 == "customresourcedefinitions" {
        crd::unregister(st, &removed);
    }
    Some(removed)
}

/// Removes ownerReferences pointing at `uid` from every object (`propagationPolicy: Orphan`).
pub fn orphan_dependents(st: &mut State, uid: &str) {
    let deps: Vec<crate::store::ObjKey> = st
        .dependents
        .get(uid)
        .map(|d| d.iter().cloned().collect())
        .unwrap_or_default();
    for (gr, ns, name) in deps {
        let Some(obj) = st.get(&gr, &ns, &name) else {
            continue;
        };
        let kept: Vec<Value> = owner_refs(&obj)
            .into_iter()
            .filter(|r| r.get("uid").and_then(Value::as_str) != Some(uid))
            .collect();
        let mut new = (*obj).clone();
        set_owner_refs(&mut new, kept);
        controller_write(st, &gr, &obj, new);
    }
}

/// `metadata.ownerReferences`.
pub fn owner_refs(obj: &Value) -> Vec<Value> {
    obj.get("metadata")
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// Sets (or removes, when empty) `metadata.ownerReferences`.
pub fn set_owner_refs(obj: &mut Value, refs: Vec<Value>) {
    let m = meta_mut(obj);
    if refs.is_empty() {
        m.remove("ownerReferences");
    } else {
        m.insert("ownerReferences".into(), Value::Array(refs));
    }
}

/// A write by a simulated controller: records an Update by `kube-controller-manager` and
/// stores the object, finishing a pending deletion when no finalizer is left.
pub fn controller_write(st: &mut State, gr: &GroupResource, old: &Arc<Value>, mut new: Value) {
    let Some(def) = st.registry.get(&gr.0, &gr.1).cloned() else {
        return;
    };
    let version = def.storage_version().to_string();
    let schema = def.version(&version).and_then(|v| v.schema.clone());
    let subresource = if def.has_status && old.get("status") != new.get("status") {
        "status"
    } else {
        ""
    };
    ssa::record_update(
        Some(old),
        &mut new,
        CONTROLLER_MANAGER,
        &def.api_version(&version),
        subresource,
        Node(schema.as_ref()),
        def.has_status,
    );
    let (ns, name) = (
        crate::util::namespace_of(old).to_string(),
        crate::util::name_of(old).to_string(),
    );
    if meta_str(&new, "deletionTimestamp").is_some() && finalizers_of(&new).is_empty() {
        remove_object(st, gr, &ns, &name);
    } else {
        st.put(gr, new);
    }
}

/// Renders a stored object at a requested version (no conversion: only `apiVersion` changes).
pub fn present(obj: &Value, def: &ResourceDef, version: &str) -> Value {
    let mut v = obj.clone();
    if let Some(m) = v.as_object_mut() {
        m.insert("apiVersion".into(), json!(def.api_version(version)));
        m.insert("kind".into(), json!(def.kind));
    }
    v
}

fn check_type(ctx: &Ctx, body: &Value) -> ApiResult<()> {
    if !body.is_object() {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    }
    let want = ctx.api_version();
    if let Some(av) = body.get("apiVersion").and_then(Value::as_str)
        && av != want
    {
        // Any served version of the same resource is accepted (no conversion happens).
        let ok = ctx
            .def
            .versions
            .iter()
            .any(|v| ctx.def.api_version(&v.name) == av);
        if !ok {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({want})"
            )));
        }
    }
    if let Some(k) = body.get("kind").and_then(Value::as_str)
        && k != ctx.def.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({k}) does not match the expected kind ({})",
            ctx.def.kind
        )));
    }
    Ok(())
}

fn validate_name(def: &ResourceDef, name: &str) -> ApiResult<()> {
    let ok = if def.group == "rbac.authorization.k8s.io" {
        !name.is_empty()
            && !name.contains('/')
            && !name.contains('%')
            && name != "."
            && name != ".."
    } else if def.group.is_empty() && def.plural == "namespaces" {
        valid_dns_label(name)
    } else {
        valid_dns_subdomain(name)
    };
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid_field(
            &def.group,
            &def.kind,
            name,
            "metadata.name",
            &format!(
                "Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
            ),
        ))
    }
}

fn check_namespace(st: &State, ctx: &Ctx) -> ApiResult<()> {
    if !ctx.def.namespaced {
        return Ok(());
    }
    let ns_gr = (String::new(), "namespaces".to_string());
    match st.get(&ns_gr, "", &ctx.namespace) {
        None => Err(ApiError::not_found("", "namespaces", &ctx.namespace)),
        Some(ns) if meta_str(&ns, "deletionTimestamp").is_some() => Err(ApiError::new(
            403,
            "Forbidden",
            format!(
                "{} \"{}\" is forbidden: unable to create new content in namespace {} because it is being terminated",
                crate::error::qualified(&ctx.def.group, &ctx.def.plural),
                ctx.name,
                ctx.namespace
            ),
        )
        .with_details(&ctx.def.group, &ctx.def.plural, &ctx.name)),
        Some(_) => Ok(()),
    }
}

fn check_rv_precondition(ctx: &Ctx, old: &Value, new: &Value) -> ApiResult<()> {
    match meta_str(new, "resourceVersion") {
        Some(rv) if !rv.is_empty() && Some(rv) != meta_str(old, "resourceVersion") => Err(
            ApiError::conflict(&ctx.def.group, &ctx.def.plural, &ctx.name),
        ),
        _ => Ok(()),
    }
}

/// Everything but metadata (and status, for kinds with a status subresource): what
/// `generation` tracks.
fn generation_view(obj: &Value, has_status: bool) -> impl Iterator<Item = (&String, &Value)> {
    obj.as_object()
        .into_iter()
        .flatten()
        .filter(move |(k, _)| match k.as_str() {
            "metadata" | "apiVersion" | "kind" => false,
            "status" => !has_status,
            _ => true,
        })
}

/// Whether two versions of an object are the same but for what changes on every write
/// (resourceVersion, managedFields timestamps): such a write is a no-op, as on a real server.
/// Compares in place, without copying the objects.
fn same_but_volatile(a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    if a.len() != b.len() {
        return false;
    }
    a.iter().all(|(k, va)| {
        let Some(vb) = b.get(k) else { return false };
        if k != "metadata" {
            return va == vb;
        }
        let (Some(ma), Some(mb)) = (va.as_object(), vb.as_object()) else {
            return va == vb;
        };
        let keys = |m: &Map<String, Value>| {
            m.keys()
                .filter(|k| *k != "resourceVersion")
                .cloned()
                .collect::<BTreeSet<_>>()
        };
        keys(ma) == keys(mb)
            && ma.iter().all(|(mk, x)| match mk.as_str() {
                "resourceVersion" => true,
                "managedFields" => managed_fields_equal(x, &mb[mk]),
                _ => Some(x) == mb.get(mk),
            })
    })
}

fn managed_fields_equal(a: &Value, b: &Value) -> bool {
    match (a.as_array(), b.as_array()) {
        (Some(x), Some(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|(e, f)| match (e.as_object(), f.as_object()) {
                        (Some(e), Some(f)) => {
                            e.len() == f.len()
                                && e.iter().all(|(k, v)| k == "time" || f.get(k) == Some(v))
                        }
                        _ => e == f,
                    })
        }
        _ => a == b,
    }
}

fn finish(
    st: &mut State,
    ctx: &Ctx,
    old: Option<Arc<Value>>,
    mut new: Value,
    op: Op,
) -> ApiResult<Written> {
    let def = ctx.def.clone();
    let gr = ctx.gr();
    let storage_av = def.api_version(def.storage_version());
    {
        let root = new
            .as_object_mut()
            .ok_or_else(|| ApiError::bad_request("the object must be a JSON object"))?;
        root.insert("apiVersion".into(), json!(storage_av));
        root.insert("kind".into(), json!(def.kind));
    }
    if let Some(s) = ctx.schema() {
        prune(&mut new, s);
        crate::schema::apply_defaults(&mut new, s);
    }
    {
        let m = meta_mut(&mut new);
        m.insert("name".into(), json!(ctx.name));
        if def.namespaced {
            m.insert("namespace".into(), json!(ctx.namespace));
        } else {
            m.remove("namespace");
        }
        m.remove("selfLink");
        drop_empty_metadata(m);
    }
    default_kind(&def, &mut new, old.is_none());

    let mut managed_base: Option<Value> = None;
    match &old {
        None => {
            if def.has_status && op != Op::Apply {
                if let Some(m) = new.as_object_mut() {
                    m.remove("status");
                }
            } else if def.has_status
                && let Some(m) = new.as_object_mut()
            {
                // Apply on the main resource never sets status.
                if ctx.subresource.is_empty() {
                    m.remove("status");
                }
            }
            if def.group.is_empty() && def.plural == "namespaces" {
                new["status"] = json!({"phase": "Active"});
            }
            let m = meta_mut(&mut new);
            m.insert("uid".into(), json!(new_uid()));
            m.insert("creationTimestamp".into(), json!(now_rfc3339()));
            m.insert("generation".into(), json!(1));
            m.remove("deletionTimestamp");
            m.remove("deletionGracePeriodSeconds");
            m.remove("resourceVersion");
            if op != Op::Apply {
                m.remove("managedFields");
            }
        }
        Some(o) => {
            if ctx.subresource == "status" {
                // Only the status changes: every other top-level field is the old object's
                // again, copied only where the request changed it.
                let applied_fields = match op {
                    Op::Apply => new
                        .get_mut("metadata")
                        .and_then(Value::as_object_mut)
                        .and_then(|m| m.remove("managedFields")),
                    _ => None,
                };
                if let (Some(n), Some(om)) = (new.as_object_mut(), o.as_object()) {
                    n.retain(|k, _| k == "status" || om.contains_key(k));
                    for (k, v) in om {
                        if k != "status" && n.get(k) != Some(v) {
                            n.insert(k.clone(), v.clone());
                        }
                    }
                }
                if let Some(mf) = applied_fields {
                    meta_mut(&mut new).insert("managedFields".into(), mf);
                }
            } else if def.has_status && new.get("status") != o.get("status") {
                // The main resource keeps the old status (copied only if the request changed it).
                match o.get("status") {
                    Some(s) => new["status"] = s.clone(),
                    None => {
                        if let Some(m) = new.as_object_mut() {
                            m.remove("status");
                        }
                    }
                }
            }
            let old_meta = o.get("metadata").and_then(Value::as_object);
            let old_field = |k: &str| old_meta.and_then(|m| m.get(k));
            let m = meta_mut(&mut new);
            for k in [
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ] {
                match old_field(k) {
                    Some(v) => {
                        m.insert(k.into(), v.clone());
                    }
                    None => {
                        m.remove(k);
                    }
                }
            }
            if op == Op::Update {
                // Clients usually send back the managedFields they read; ownership is then
                // recomputed below. A client that changes them (`[{}]` resets them) has its
                // version taken as the starting point, as on a real server.
                let incoming = m.remove("managedFields");
                let previous = old_field("managedFields");
                let restored = if incoming.as_ref() == previous {
                    // Sent back unchanged (a patch always is): kept without a copy.
                    incoming
                } else {
                    if matches!(&incoming, Some(Value::Array(a)) if !a.is_empty()) {
                        managed_base = incoming;
                    }
                    previous.cloned()
                };
                if let Some(v) = restored {
                    m.insert("managedFields".into(), v);
                }
            }
            if meta_str(o, "deletionTimestamp").is_some() {
                let before: BTreeSet<String> = finalizers_of(o).into_iter().collect();
                let added: Vec<String> = finalizers_of(&new)
                    .into_iter()
                    .filter(|f| !before.contains(f))
                    .collect();
                if !added.is_empty() {
                    return Err(ApiError::invalid_field(
                        &def.group,
                        &def.kind,
                        &ctx.name,
                        "metadata.finalizers",
                        &format!(
                            "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"
                        ),
                    ));
                }
            }
            if !generation_view(o, def.has_status).eq(generation_view(&new, def.has_status)) {
                let g = o
                    .get("metadata")
                    .and_then(|m| m.get("generation"))
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                meta_mut(&mut new).insert("generation".into(), json!(g + 1));
            }
        }
    }

    if ctx.validate
        && let Some(s) = ctx.schema()
    {
        let mut causes = crate::schema::validate_value(&new, s);
        // Ratcheting, as real servers do since 1.30: errors an update did not introduce (the
        // old object had them too) do not fail it.
        if !causes.is_empty()
            && let Some(o) = &old
        {
            let before = crate::schema::validate_value(o, s);
            causes.retain(|c| !before.contains(c));
        }
        causes.extend(crate::cel::validate(&new, old.as_deref(), s));
        if !causes.is_empty() {
            return Err(ApiError::invalid(&def.group, &def.kind, &ctx.name, causes));
        }
    }
    if def.group == "rbac.authorization.k8s.io"
        && let Some(esc) = &ctx.escalation
    {
        crate::escalation::check(esc, &def.plural, &ctx.namespace, &new, old.as_deref())?;
    }
    if def.group == "apiextensions.k8s.io" && def.plural == "customresourcedefinitions" {
        crd::validate(st, &new, old.as_deref())?;
        if ctx.subresource.is_empty() {
            crd::set_status(&mut new);
        }
    }

    let rebased = match (&managed_base, &old) {
        (Some(base), Some(o)) => {
            let mut o2 = (**o).clone();
            meta_mut(&mut o2).insert("managedFields".into(), base.clone());
            // The client's entries are stored re-encoded, as the sandbox stored every entry before
            // unchanged ones were kept as stored (a real server decodes them into field sets:
            // k8s.io/apimachinery `pkg/util/managedfields`, `DecodeManagedFields`).
            ssa::normalize_entries(&mut o2);
            Some(o2)
        }
        _ => None,
    };
    if op != Op::Apply {
        let schema = ctx.schema().cloned();
        ssa::record_update(
            rebased.as_ref().or(old.as_deref()),
            &mut new,
            &ctx.manager,
            &ctx.api_version(),
            &ctx.subresource,
            Node(schema.as_ref()),
            def.has_status,
        );
    }

    if let Some(o) = &old
        && same_but_volatile(o, &new)
    {
        return Ok((o.clone(), 200));
    }
    let code = if old.is_none() { 201 } else { 200 };
    if ctx.dry_run {
        return Ok((Arc::new(new), code));
    }
    if old.is_some()
        && meta_str(&new, "deletionTimestamp").is_some()
        && finalizers_of(&new).is_empty()
        && !(def.group.is_empty() && def.plural == "namespaces")
    {
        let removed = remove_object(st, &gr, &ctx.namespace, &ctx.name);
        return Ok((removed.unwrap_or_else(|| Arc::new(new)), 200));
    }
    let stored = st.put(&gr, new);
    after_write(st, &def, &stored, old.is_none(), &ctx.subresource);
    Ok((stored, code))
}

/// Defaults a real server (or its admission chain) fills in.
/// ObjectMeta's list and map fields are `omitempty` in Kubernetes (k8s.io/apimachinery
/// `pkg/apis/meta/v1/types.go`): a real server never stores or returns an empty or null
/// `labels`, `annotations`, `ownerReferences` or `finalizers`. Clients rely on it: kube-runtime's
/// `finalizer()` adds the first finalizer with a JSON patch that tests `/metadata/finalizers`
/// against `null`.
fn drop_empty_metadata(meta: &mut Map<String, Value>) {
    for key in ["labels", "annotations", "ownerReferences", "finalizers"] {
        let empty = match meta.get(key) {
            Some(Value::Null) => true,
            Some(Value::Array(items)) => items.is_empty(),
            Some(Value::Object(map)) => map.is_empty(),
            _ => false,
        };
        if empty {
            meta.remove(key);
        }
    }
}

fn default_kind(def: &ResourceDef, obj: &mut Value, creating: bool) {
    match (def.group.as_str(), def.plural.as_str()) {
        ("", "namespaces") => {
            let name = crate::util::name_of(obj).to_string();
            let m = meta_mut(obj);
            let labels = m.entry("labels").or_insert_with(|| json!({}));
            if let Some(l) = labels.as_object_mut() {
                l.insert("kubernetes.io/metadata.name".into(), json!(name));
            }
            if creating {
                obj["spec"] = json!({"finalizers": ["kubernetes"]});
            }
        }
        ("", "secrets") => {
            if let Some(root) = obj.as_object_mut() {
                if let Some(Value::Object(sd)) = root.remove("stringData") {
                    use base64::Engine;
                    let data = root.entry("data").or_insert_with(|| json!({}));
                    if let Some(d) = data.as_object_mut() {
                        for (k, v) in sd {
                            let s = v.as_str().unwrap_or("").to_string();
                            d.insert(
                                k,
                                json!(base64::engine::general_purpose::STANDARD.encode(s)),
                            );
                        }
                    }
                }
                root.entry("type").or_insert_with(|| json!("Opaque"));
            }
        }
        ("", "services") => {
            let spec = obj
                .as_object_mut()
                .map(|r| r.entry("spec").or_insert_with(|| json!({})));
            if let Some(Value::Object(s)) = spec {
                s.entry("type").or_insert_with(|| json!("ClusterIP"));
                if s.get("type") != Some(&json!("ExternalName")) && !s.contains_key("clusterIP") {
                    let n: u8 = rand::random_range(1..=254);
                    let m: u8 = rand::random_range(1..=254);
                    s.insert("clusterIP".into(), json!(format!("10.96.{m}.{n}")));
                    s.insert("clusterIPs".into(), json!([format!("10.96.{m}.{n}")]));
                }
            }
        }
        ("apps", "deployments") => {
            let spec = obj
                .as_object_mut()
                .map(|r| r.entry("spec").or_insert_with(|| json!({})));
            if let Some(Value::Object(s)) = spec {
                s.entry("replicas").or_insert_with(|| json!(1));
            }
        }
        _ => {}
    }
}

fn after_write(
    st: &mut State,
    def: &ResourceDef,
    stored: &Arc<Value>,
    created: bool,
    subresource: &str,
) {
    match (def.group.as_str(), def.plural.as_str()) {
        ("", "namespaces") if created => {
            let ns = crate::util::name_of(stored).to_string();
            publish_root_ca(st, &ns);
        }
        ("apps", "deployments" | "statefulsets" | "daemonsets") | ("batch", "jobs")
            if subresource.is_empty() =>
        {
            st.work.workloads.insert((
                def.plural.clone(),
                crate::util::namespace_of(stored).to_string(),
                crate::util::name_of(stored).to_string(),
            ));
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            crd::register(st, stored);
        }
        _ => {}
    }
}

/// Creates the `kube-root-ca.crt` ConfigMap in a namespace (the real root-CA publisher does it
/// for every namespace).
pub fn publish_root_ca(st: &mut State, ns: &str) {
    let gr = (String::new(), "configmaps".to_string());
    if st.get(&gr, ns, "kube-root-ca.crt").is_some() {
        return;
    }
    let mut cm = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "kube-root-ca.crt",
            "namespace": ns,
            "uid": new_uid(),
            "creationTimestamp": now_rfc3339(),
            "annotations": {"kubernetes.io/description": "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters."}
        },
        "data": {"ca.crt": ROOT_CA_PEM}
    });
    ssa::record_update(
        None,
        &mut cm,
        CONTROLLER_MANAGER,
        "v1",
        "",
        Node(None),
        false,
    );
    st.put(&gr, cm);
}

/// Stores an object created by the sandbox itself (bootstrap objects), with metadata filled
/// in.
pub fn seed(st: &mut State, gr: &GroupResource, obj: Value) {
    seed_as(st, gr, obj, "kube-apiserver");
}

/// Stores an object created by a simulated component (`manager` in `managedFields`), with
/// metadata filled in.
pub fn seed_as(st: &mut State, gr: &GroupResource, mut obj: Value, manager: &str) {
    let api_version = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("v1")
        .to_string();
    let m = meta_mut(&mut obj);
    m.entry("uid").or_insert_with(|| json!(new_uid()));
    m.entry("creationTimestamp")
        .or_insert_with(|| json!(now_rfc3339()));
    ssa::record_update(None, &mut obj, manager, &api_version, "", Node(None), false);
    st.put(gr, obj);
}

/// The objects a fresh cluster has: system namespaces, root CA ConfigMaps and the `kubernetes`
/// Service, Endpoints and EndpointSlice in `default`.
pub fn bootstrap(st: &mut State) {
    let ns_gr = (String::new(), "namespaces".to_string());
    for ns in SYSTEM_NAMESPACES {
        if st.get(&ns_gr, "", ns).is_some() {
            continue;
        }
        seed(
            st,
            &ns_gr,
            json!({
                "apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}},
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"}
            }),
        );
        publish_root_ca(st, ns);
    }
    let svc_gr = (String::new(), "services".to_string());
    if st.get(&svc_gr, "default", "kubernetes").is_none() {
        seed(
            st,
            &svc_gr,
            json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "kubernetes", "namespace": "default",
                             "labels": {"component": "apiserver", "provider": "kubernetes"}},
                "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.1", "clusterIPs": ["10.96.0.1"],
                         "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}],
                         "sessionAffinity": "None"},
                "status": {"loadBalancer": {}}
            }),
        );
        seed(
            st,
            &(String::new(), "endpoints".to_string()),
            json!({
                "apiVersion": "v1", "kind": "Endpoints",
                "metadata": {"name": "kubernetes", "namespace": "default",
                             "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
                "subsets": [{"addresses": [{"ip": "10.0.0.1"}],
                             "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]}]
            }),
        );
        seed(
            st,
            &("discovery.k8s.io".to_string(), "endpointslices".to_string()),
            json!({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": "kubernetes", "namespace": "default",
                             "labels": {"kubernetes.io/service-name": "kubernetes"}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": true}}],
                "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]
            }),
        );
    }
    bootstrap_policy(st);
}

/// The default ClusterRoles and bindings every authenticated identity relies on: discovery,
/// version and health paths (`system:discovery`, `system:public-info-viewer`) and the
/// self-reviews behind `kubectl auth can-i` (`system:basic-user`). Rules as in kubernetes
/// `plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go`.
fn bootstrap_policy(st: &mut State) {
    let cr_gr = (
        "rbac.authorization.k8s.io".to_string(),
        "clusterroles".to_string(),
    );
    let crb_gr = (
        "rbac.authorization.k8s.io".to_string(),
        "clusterrolebindings".to_string(),
    );
    let roles = [
        (
            "system:discovery",
            json!([{"verbs": ["get"], "nonResourceURLs": [
                "/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi",
                "/openapi/*", "/readyz", "/version", "/version/"]}]),
            vec!["system:authenticated"],
        ),
        (
            "system:public-info-viewer",
            json!([{"verbs": ["get"], "nonResourceURLs": [
                "/healthz", "/livez", "/readyz", "/version", "/version/"]}]),
            vec!["system:authenticated", "system:unauthenticated"],
        ),
        (
            "system:basic-user",
            json!([{"verbs": ["create"], "apiGroups": ["authorization.k8s.io"],
                    "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]}]),
            vec!["system:authenticated"],
        ),
    ];
    for (name, rules, groups) in roles {
        let labels = json!({"kubernetes.io/bootstrapping": "rbac-defaults"});
        if st.get(&cr_gr, "", name).is_none() {
            seed(
                st,
                &cr_gr,
                json!({
                    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                    "metadata": {"name": name, "labels": labels,
                                 "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
                    "rules": rules
                }),
            );
        }
        if st.get(&crb_gr, "", name).is_none() {
            let subjects: Vec<Value> = groups
                .iter()
                .map(|g| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g}))
                .collect();
            seed(
                st,
                &crb_gr,
                json!({
                    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                    "metadata": {"name": name, "labels": labels,
                                 "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                    "subjects": subjects
                }),
            );
        }
    }
}
