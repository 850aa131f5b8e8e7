//! The HTTP front end: routing of Kubernetes API paths, list/get/write handlers, discovery,
//! health, metrics and the `/sandbox/` test hooks.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Bytes, to_bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde_json::{Map, Value, json};

use crate::discovery;
use crate::error::{ApiError, ApiResult, Cause};
use crate::faults::{FaultConfig, Faults};
use crate::ops::{self, Ctx, DeleteOpts};
use crate::patch::PatchType;
use crate::rbac::{Action, UserInfo};
use crate::registry::ResourceDef;
use crate::render::{self, Format};
use crate::requests::{RequestLog, RequestRecord, Verb};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::Store;
use crate::watch::{self, WatchSpec};

/// Largest accepted request body.
const MAX_BODY: usize = 64 << 20;

/// Shared server state.
pub struct App {
    /// The object store.
    pub store: Arc<Store>,
    /// Request log and metrics.
    pub requests: RequestLog,
    /// Fault rules.
    pub faults: Faults,
    /// Bumped to close every open watch.
    pub close_watches: tokio::sync::watch::Sender<u64>,
    /// Bumped to make every watch that allows bookmarks send one now.
    pub bookmark_now: tokio::sync::watch::Sender<u64>,
    /// Interval of periodic watch bookmarks.
    pub bookmark_interval: Duration,
    /// See [`crate::SandboxOptions::slow_watcher_budget`].
    pub slow_watcher_budget: Duration,
    /// How many watches were closed because their client did not read in time.
    pub slow_watchers_closed: Arc<std::sync::atomic::AtomicU64>,
    /// Snapshots of paginated lists, by continue-token id.
    pub pages: Mutex<Pages>,
    /// Where snapshots go, if anywhere.
    pub snapshot_dir: Option<PathBuf>,
    /// Validate custom resources against their schemas.
    pub validate: bool,
    /// Serve streaming lists ([`crate::SandboxOptions::watch_list`]).
    pub watch_list: bool,
    /// Serializes snapshot writes.
    pub snapshot_writer: Mutex<()>,
    /// The periodic watch closer configured by fault injection.
    pub periodic_close: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Issued tokens and the RBAC policy.
    pub auth: crate::auth::Auth,
}

/// A paginated list: its resourceVersion and all its items.
type PagedList = (u64, Arc<Vec<Arc<Value>>>);

/// Snapshots of lists being paginated, so continue tokens see one consistent state.
#[derive(Default)]
pub struct Pages {
    next: u64,
    lists: HashMap<u64, PagedList>,
    order: VecDeque<u64>,
}

const MAX_PAGED_LISTS: usize = 64;

impl Pages {
    fn insert(&mut self, rv: u64, items: Arc<Vec<Arc<Value>>>) -> u64 {
        self.next += 1;
        let id = self.next;
        self.lists.insert(id, (rv, items));
        self.order.push_back(id);
        while self.order.len() > MAX_PAGED_LISTS {
            if let Some(old) = self.order.pop_front() {
                self.lists.remove(&old);
            }
        }
        id
    }

    /// Forgets every paginated list (continue tokens then answer 410).
    pub fn clear(&mut self) {
        self.lists.clear();
        self.order.clear();
    }
}

impl App {
    /// Closes every open watch stream now.
    pub fn close_all_watches(&self) {
        self.close_watches.send_modify(|g| *g += 1);
    }

    /// Drops the watch history and paginated lists: older resourceVersions answer 410.
    pub fn compact(&self) {
        self.store.lock().compact();
        self.pages.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// Applies a fault configuration.
    pub fn apply_faults(self: &Arc<Self>, cfg: FaultConfig) {
        self.faults.set_seeded(cfg.rules, cfg.seed);
        self.faults.set_watch_delays(cfg.watch_delays);
        let mut periodic = self
            .periodic_close
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(h) = periodic.take() {
            h.abort();
        }
        if let Some(secs) = cfg.close_watches_every_seconds.filter(|s| *s > 0.0) {
            let app = Arc::downgrade(self);
            let every = Duration::from_secs_f64(secs);
            *periodic = Some(tokio::spawn(async move {
                let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
                loop {
                    tick.tick().await;
                    match app.upgrade() {
                        Some(a) => a.close_all_watches(),
                        None => return,
                    }
                }
            }));
        }
        drop(periodic);
        if cfg.close_watches_now {
            self.close_all_watches();
        }
        if cfg.compact_history {
            self.compact();
        }
    }

    /// Writes a snapshot now, if a snapshot directory is configured.
    pub fn save_snapshot(&self) -> std::io::Result<()> {
        let Some(dir) = &self.snapshot_dir else {
            return Ok(());
        };
        // One writer at a time, so an older capture never overwrites a newer one.
        let _writer = self
            .snapshot_writer
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let capture = {
            let mut st = self.store.lock();
            st.dirty = false;
            crate::snapshot::capture(&st)
        };
        crate::snapshot::write(&capture, dir).inspect_err(|_| {
            // Try again on the next tick.
            self.store.lock().dirty = true;
        })
    }
}

/// The axum router.
pub fn router(app: Arc<App>) -> axum::Router {
    axum::Router::new().fallback(handle).with_state(app)
}

fn json_response(code: u16, v: &Value) -> Response {
    let code = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::to_vec(v).unwrap_or_default(),
    )
        .into_response()
}

fn text_response(body: String, ct: &'static str) -> Response {
    ([(header::CONTENT_TYPE, ct)], body).into_response()
}

/// Parsed query string.
#[derive(Debug, Default)]
struct Query(HashMap<String, String>);

impl Query {
    fn parse(q: Option<&str>) -> Query {
        let mut m = HashMap::new();
        for pair in q.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            m.insert(decode(k), decode(v));
        }
        Query(m)
    }

    fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(String::as_str)
    }

    fn flag(&self, k: &str) -> bool {
        matches!(self.get(k), Some("true") | Some("1") | Some("")) && self.0.contains_key(k)
    }
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                match std::str::from_utf8(&b[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                {
                    Some(v) => {
                        out.push(v);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A request for a resource.
#[derive(Debug, Clone)]
struct Target {
    group: String,
    version: String,
    plural: String,
    namespace: Option<String>,
    name: Option<String>,
    subresource: String,
    watch_path: bool,
}

enum Route {
    Version,
    Health,
    OpenApiV2,
    OpenApiV3(String),
    Core,
    Groups,
    Group(String),
    Resources(String, String),
    Resource(Target),
    Sandbox(String),
    Metrics,
    NotFound,
}

fn route(path: &str) -> Route {
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    match segs.as_slice() {
        ["version"] => Route::Version,
        ["healthz"] | ["readyz"] | ["livez"] => Route::Health,
        ["healthz", ..] | ["readyz", ..] | ["livez", ..] => Route::Health,
        ["metrics"] => Route::Metrics,
        ["openapi", "v2"] => Route::OpenApiV2,
        ["openapi", "v3"] => Route::OpenApiV3(String::new()),
        ["openapi", "v3", rest @ ..] => Route::OpenApiV3(rest.join("/")),
        ["swagger.json"] => Route::OpenApiV2,
        ["sandbox", rest @ ..] => Route::Sandbox(rest.join("/")),
        ["api"] => Route::Core,
        ["api", v] => Route::Resources(String::new(), v.to_string()),
        ["api", v, rest @ ..] => resource_route("", v, rest),
        ["apis"] => Route::Groups,
        ["apis", g] => Route::Group(g.to_string()),
        ["apis", g, v] => Route::Resources(g.to_string(), v.to_string()),
        ["apis", g, v, rest @ ..] => resource_route(g, v, rest),
        _ => Route::NotFound,
    }
}

fn resource_route(group: &str, version: &str, rest: &[&str]) -> Route {
    let (watch_path, rest) = match rest {
        ["watch", r @ ..] => (true, r),
        r => (false, r),
    };
    let t = |plural: &str, namespace: Option<&str>, name: Option<&str>, sub: &str| {
        Route::Resource(Target {
            group: group.to_string(),
            version: version.to_string(),
            plural: plural.to_string(),
            namespace: namespace.map(str::to_string),
            name: name.map(str::to_string),
            subresource: sub.to_string(),
            watch_path,
        })
    };
    match rest {
        ["namespaces", ns, sub] if matches!(*sub, "status" | "finalize") => {
            t("namespaces", None, Some(ns), sub)
        }
        ["namespaces", ns, plural] => t(plural, Some(ns), None, ""),
        ["namespaces", ns, plural, name] => t(plural, Some(ns), Some(name), ""),
        ["namespaces", ns, plural, name, sub] => t(plural, Some(ns), Some(name), sub),
        [plural] => t(plural, None, None, ""),
        [plural, name] => t(plural, None, Some(name), ""),
        [plural, name, sub] => t(plural, None, Some(name), sub),
        _ => Route::NotFound,
    }
}

fn not_found_path() -> ApiError {
    ApiError::new(
        404,
        "NotFound",
        "the server could not find the requested resource",
    )
}

async fn handle(State(app): State<Arc<App>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let body = match to_bytes(body, MAX_BODY).await {
        Ok(b) => b,
        Err(e) => {
            return ApiError::bad_request(format!("reading the request body: {e}")).into_response();
        }
    };
    let q = Query::parse(parts.uri.query());
    let accept = parts
        .headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let method = parts.method.clone();
    let route = route(parts.uri.path());
    // The `/sandbox/` test hooks are not part of the Kubernetes API: no authentication.
    let user = if matches!(route, Route::Sandbox(_)) {
        crate::auth::admin()
    } else {
        match app.auth.authenticate(&parts.headers, &app.store) {
            Ok(u) => u,
            Err(e) => return e.into_response(),
        }
    };
    if !matches!(route, Route::Sandbox(_) | Route::Resource(_)) {
        let action = Action::NonResource {
            verb: method.as_str().to_ascii_lowercase(),
            path: parts.uri.path().to_string(),
        };
        if let Err(e) = app.auth.authorize(&app.store, &user, &action) {
            return e.into_response();
        }
    }
    match route {
        Route::Version => json_response(200, &discovery::version()),
        Route::Health => text_response("ok".into(), "text/plain; charset=utf-8"),
        Route::Metrics => text_response(app.requests.metrics_text(), "text/plain; version=0.0.4"),
        Route::OpenApiV2 => {
            if accept.contains("protobuf") {
                (
                    [(header::CONTENT_TYPE, discovery::OPENAPI_V2_PB)],
                    discovery::openapi_v2_protobuf(),
                )
                    .into_response()
            } else {
                json_response(200, &discovery::openapi_v2())
            }
        }
        Route::OpenApiV3(path) => {
            let reg = app.store.lock().registry.clone();
            if path.is_empty() {
                json_response(200, &discovery::openapi_v3(&reg))
            } else {
                match discovery::openapi_v3_group(&reg, &path) {
                    Some(v) => json_response(200, &v),
                    None => not_found_path().into_response(),
                }
            }
        }
        Route::Core => {
            if discovery::wants_aggregated(&accept) {
                let reg = app.store.lock().registry.clone();
                aggregated_response(&discovery::aggregated(&reg, true))
            } else {
                json_response(200, &discovery::core_versions())
            }
        }
        Route::Groups => {
            let reg = app.store.lock().registry.clone();
            if discovery::wants_aggregated(&accept) {
                aggregated_response(&discovery::aggregated(&reg, false))
            } else {
                json_response(200, &discovery::groups(&reg))
            }
        }
        Route::Group(g) => {
            let reg = app.store.lock().registry.clone();
            match discovery::group(&reg, &g) {
                Some(v) => json_response(200, &v),
                None => not_found_path().into_response(),
            }
        }
        Route::Resources(g, v) => {
            let reg = app.store.lock().registry.clone();
            match discovery::resource_list(&reg, &g, &v) {
                Some(v) => json_response(200, &v),
                None => not_found_path().into_response(),
            }
        }
        Route::Sandbox(path) => sandbox_hook(&app, &method, &path, &body),
        Route::NotFound => not_found_path().into_response(),
        Route::Resource(t) => {
            resource(&app, &user, &method, &parts.headers, &q, &accept, t, body).await
        }
    }
}

fn aggregated_response(v: &Value) -> Response {
    (
        [(header::CONTENT_TYPE, discovery::AGGREGATED_CONTENT_TYPE)],
        serde_json::to_vec(v).unwrap_or_default(),
    )
        .into_response()
}

fn sandbox_hook(app: &Arc<App>, method: &Method, path: &str, body: &Bytes) -> Response {
    match (method.as_str(), path) {
        ("GET", "metrics") => {
            text_response(app.requests.metrics_text(), "text/plain; version=0.0.4")
        }
        ("GET", "faults") => json_response(200, &json!({"rules": app.faults.rules()})),
        ("POST", "faults") | ("PUT", "faults") => {
            let cfg: FaultConfig = match serde_json::from_slice(body) {
                Ok(c) => c,
                Err(e) => {
                    return ApiError::bad_request(format!("fault configuration: {e}"))
                        .into_response();
                }
            };
            app.apply_faults(cfg);
            json_response(200, &json!({"rules": app.faults.rules()}))
        }
        ("DELETE", "faults") => {
            app.apply_faults(FaultConfig::default());
            json_response(200, &json!({"rules": []}))
        }
        ("POST", "bookmark") => {
            app.bookmark_now.send_modify(|g| *g += 1);
            json_response(200, &json!({"sent": true}))
        }
        ("POST", "close-watches") => {
            app.close_all_watches();
            json_response(200, &json!({"closed": true}))
        }
        ("POST", "compact") => {
            app.compact();
            json_response(
                200,
                &json!({"compactedResourceVersion": app.store.current_rv().to_string()}),
            )
        }
        ("GET", "requests") => {
            let recs: Vec<Value> = app
                .requests
                .all()
                .into_iter()
                .map(|r| {
                    json!({"verb": r.verb.as_str(), "group": r.group, "version": r.version,
                           "resource": r.resource, "subresource": r.subresource,
                           "namespace": r.namespace, "name": r.name, "code": r.code,
                           "userAgent": r.user_agent, "user": r.user})
                })
                .collect();
            json_response(200, &Value::Array(recs))
        }
        ("DELETE", "requests") => {
            app.requests.reset();
            json_response(200, &json!({}))
        }
        ("POST", "snapshot") => match app.save_snapshot() {
            Ok(()) => json_response(200, &json!({"saved": app.snapshot_dir.is_some()})),
            Err(e) => ApiError::internal(format!("snapshot: {e}")).into_response(),
        },
        _ => not_found_path().into_response(),
    }
}

fn verb_of(method: &Method, t: &Target, q: &Query, ct: &str) -> Result<Verb, ApiError> {
    let watch = t.watch_path || q.flag("watch");
    Ok(match (method.as_str(), t.name.is_some()) {
        ("GET", _) if watch => Verb::Watch,
        ("GET", true) => Verb::Get,
        ("GET", false) => Verb::List,
        ("POST", false) => Verb::Post,
        // Creating a subresource of an object (`serviceaccounts/token`).
        ("POST", true) if !t.subresource.is_empty() => Verb::Post,
        ("PUT", true) => Verb::Put,
        ("PATCH", true) => {
            if PatchType::from_content_type(ct) == Some(PatchType::Apply) {
                Verb::Apply
            } else {
                Verb::Patch
            }
        }
        ("DELETE", true) => Verb::Delete,
        ("DELETE", false) => Verb::DeleteCollection,
        _ => return Err(ApiError::method_not_allowed()),
    })
}

fn field_manager(q: &Query, headers: &HeaderMap) -> String {
    if let Some(m) = q.get("fieldManager").filter(|m| !m.is_empty()) {
        return m.to_string();
    }
    headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .map(|ua| ua.split('/').next().unwrap_or("").trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_string())
}

#[allow(clippy::too_many_arguments)]
async fn resource(
    app: &Arc<App>,
    user: &UserInfo,
    method: &Method,
    headers: &HeaderMap,
    q: &Query,
    accept: &str,
    t: Target,
    body: Bytes,
) -> Response {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let verb = verb_of(method, &t, q, &ct);
    let mut record = RequestRecord {
        verb: verb.as_ref().copied().unwrap_or(Verb::Get),
        group: t.group.clone(),
        version: t.version.clone(),
        resource: t.plural.clone(),
        subresource: t.subresource.clone(),
        namespace: t.namespace.clone().unwrap_or_default(),
        name: t.name.clone().unwrap_or_default(),
        code: 0,
        dry_run: q.get("dryRun") == Some("All"),
        user_agent: headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string(),
        user: user.name.clone(),
    };
    let resp = match verb {
        Err(e) => e.into_response(),
        Ok(verb) => match app
            .auth
            .authorize(&app.store, user, &rbac_action(verb, &t, q))
            .and_then(|()| authorize_create_on_apply(app, user, verb, &t, q))
        {
            Err(e) => e.into_response(),
            Ok(()) => {
                let (fault, latency) = app.faults.check(verb, &t.plural);
                if !latency.is_zero() {
                    tokio::time::sleep(latency).await;
                }
                match fault {
                    Some(e) => e.into_response(),
                    None => match dispatch(app, user, verb, headers, q, accept, &ct, &t, body) {
                        Ok(r) => r,
                        Err(e) => e.into_response(),
                    },
                }
            }
        },
    };
    record.code = resp.status().as_u16();
    app.requests.push(record);
    resp
}

/// The RBAC attributes of a resource request, as the real `RequestInfo` resolves them: a
/// namespace's own name is its namespace, and a list or watch pinned to one name by
/// `fieldSelector=metadata.name=X` carries that name (so `resourceNames` rules can allow it).
fn rbac_action(verb: Verb, t: &Target, q: &Query) -> Action {
    let mut name = t.name.clone().unwrap_or_default();
    if name.is_empty()
        && matches!(verb, Verb::List | Verb::Watch)
        && let Some(fs) = q.get("fieldSelector")
        && let Ok(sel) = FieldSelector::parse(fs, "")
        && let Some(n) = sel.pinned_name()
    {
        name = n.to_string();
    }
    let namespace = match &t.namespace {
        Some(ns) => ns.clone(),
        None if t.group.is_empty() && t.plural == "namespaces" => name.clone(),
        None => String::new(),
    };
    Action::Resource {
        verb: verb.rbac_verb().to_string(),
        group: t.group.clone(),
        resource: t.plural.clone(),
        subresource: t.subresource.clone(),
        namespace,
        name,
    }
}

/// A server-side apply that would create the object needs the `create` verb too, as on a real
/// server (`k8s.io/apiserver` `pkg/endpoints/handlers/patch.go`: `createValidation` wrapped
/// in `withAuthorization` with `create` attributes).
fn authorize_create_on_apply(
    app: &App,
    user: &UserInfo,
    verb: Verb,
    t: &Target,
    q: &Query,
) -> ApiResult<()> {
    if verb != Verb::Apply || user.is_master() || !t.subresource.is_empty() {
        return Ok(());
    }
    let exists = {
        let st = app.store.lock();
        st.registry
            .resolve(&t.group, &t.version, &t.plural)
            .is_some_and(|def| {
                st.get(
                    &(def.group.clone(), def.plural.clone()),
                    t.namespace.as_deref().unwrap_or(""),
                    t.name.as_deref().unwrap_or(""),
                )
                .is_some()
            })
    };
    if exists {
        return Ok(());
    }
    let mut action = rbac_action(verb, t, q);
    if let Action::Resource { verb, .. } = &mut action {
        *verb = "create".into();
    }
    app.auth.authorize(&app.store, user, &action)
}

/// `POST` to the `authorization.k8s.io` reviews and to `serviceaccounts/NAME/token`: computed
/// answers, nothing stored. `None` when the request is for another resource.
fn special(
    app: &Arc<App>,
    user: &UserInfo,
    verb: Verb,
    def: &ResourceDef,
    t: &Target,
    ct: &str,
    body: &[u8],
) -> Option<ApiResult<Response>> {
    let review = def.group == "authorization.k8s.io";
    let token = def.group.is_empty() && def.plural == "serviceaccounts" && t.subresource == "token";
    if !review && !token {
        return None;
    }
    if verb != Verb::Post {
        return Some(Err(ApiError::method_not_allowed()));
    }
    let req = if body.starts_with(b"k8s\x00") {
        match crate::proto::decode(body) {
            Some(v) => v,
            None => return Some(Err(ApiError::unsupported_media_type(ct))),
        }
    } else {
        match parse_body(body) {
            Ok(v) => v,
            Err(e) => return Some(Err(e)),
        }
    };
    if token {
        let ns = t.namespace.as_deref().unwrap_or_default();
        let name = t.name.as_deref().unwrap_or_default();
        let issued = app
            .auth
            .issue_service_account_token(&app.store.lock(), ns, name);
        return Some(
            issued.map(|tok| json_response(201, &crate::auth::token_request_response(&req, &tok))),
        );
    }
    let self_review = match def.plural.as_str() {
        "selfsubjectaccessreviews" => true,
        "subjectaccessreviews" => false,
        _ => return Some(Err(ApiError::method_not_allowed())),
    };
    let policy = app.auth.policy(&app.store);
    Some(
        crate::auth::access_review(&policy, user, &req, self_review)
            .map(|out| json_response(201, &out)),
    )
}

#[allow(clippy::too_many_arguments)]
fn dispatch(
    app: &Arc<App>,
    user: &UserInfo,
    verb: Verb,
    headers: &HeaderMap,
    q: &Query,
    accept: &str,
    ct: &str,
    t: &Target,
    body: Bytes,
) -> ApiResult<Response> {
    let def = app
        .store
        .lock()
        .registry
        .resolve(&t.group, &t.version, &t.plural)
        .ok_or_else(not_found_path)?;
    if !def.namespaced && t.namespace.is_some() {
        return Err(not_found_path());
    }
    if let Some(r) = special(app, user, verb, &def, t, ct, &body) {
        return r;
    }
    match t.subresource.as_str() {
        "" => {}
        "status" if def.has_status => {}
        "finalize" if def.group.is_empty() && def.plural == "namespaces" => {}
        _ => return Err(not_found_path()),
    }
    if !t.subresource.is_empty()
        && matches!(
            verb,
            Verb::List | Verb::Watch | Verb::Post | Verb::Delete | Verb::DeleteCollection
        )
    {
        return Err(ApiError::method_not_allowed());
    }
    let fmt = Format::from_accept(accept, q.get("includeObject"));
    match verb {
        Verb::Get => get(app, &def, t, fmt),
        Verb::List => list(app, &def, t, q, fmt),
        Verb::Watch => start_watch(app, def, t, q, fmt),
        _ => write(app, user, verb, &def, headers, q, ct, t, body, fmt),
    }
}

fn get(app: &App, def: &Arc<ResourceDef>, t: &Target, fmt: Format) -> ApiResult<Response> {
    let name = t.name.clone().unwrap_or_default();
    let obj = app
        .store
        .lock()
        .get(
            &(def.group.clone(), def.plural.clone()),
            t.namespace.as_deref().unwrap_or(""),
            &name,
        )
        .ok_or_else(|| ApiError::not_found(&def.group, &def.plural, &name))?;
    Ok(json_response(200, &render::one(&obj, def, &t.version, fmt)))
}

fn selectors(q: &Query, def: &ResourceDef) -> ApiResult<(LabelSelector, FieldSelector)> {
    Ok((
        LabelSelector::parse(q.get("labelSelector").unwrap_or(""))?,
        FieldSelector::parse(q.get("fieldSelector").unwrap_or(""), &def.kind)?,
    ))
}

fn encode_continue(id: u64, offset: usize, rv: u64) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(
        serde_json::to_vec(&json!({"v": "sandbox.k8s.io/v1", "id": id, "start": offset, "rv": rv}))
            .unwrap_or_default(),
    )
}

fn decode_continue(s: &str) -> Option<(u64, usize)> {
    let b = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s.trim_end_matches('='))
        .ok()?;
    let v: Value = serde_json::from_slice(&b).ok()?;
    Some((v.get("id")?.as_u64()?, v.get("start")?.as_u64()? as usize))
}

fn list(
    app: &App,
    def: &Arc<ResourceDef>,
    t: &Target,
    q: &Query,
    fmt: Format,
) -> ApiResult<Response> {
    let (labels, fields) = selectors(q, def)?;
    let mut limit: usize = match q.get("limit") {
        Some(l) if !l.is_empty() => l
            .parse()
            .map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))?,
        _ => 0,
    };
    let gr = (def.group.clone(), def.plural.clone());
    let (items, list_rv, offset, id) = if let Some(token) =
        q.get("continue").filter(|c| !c.is_empty())
    {
        let (id, offset) = decode_continue(token)
            .ok_or_else(|| ApiError::bad_request("continue key is not valid: invalid token"))?;
        let pages = app.pages.lock().unwrap_or_else(|e| e.into_inner());
        let (rv, items) = pages.lists.get(&id).cloned().ok_or_else(|| {
            ApiError::gone("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.")
        })?;
        (items, rv, offset, Some(id))
    } else {
        let ns = t.namespace.as_deref();
        let st = app.store.lock();
        let rv_param = q.get("resourceVersion").unwrap_or("");
        if rv_param == "0" {
            // resourceVersion=0 is served from kube-apiserver's watch cache, which ignores
            // `limit` and returns every object in one response (apiserver
            // `pkg/storage/cacher/cacher.go`, `computeListLimit`: "the limit is ignored for
            // requests that set RV == 0").
            limit = 0;
        }
        let rv_match = q.get("resourceVersionMatch").unwrap_or("");
        let (objs, list_rv) = match (rv_param, rv_match) {
            ("", "") | ("0", _) => (select(st.bucket(&gr), ns, &labels, &fields), st.rv),
            ("", m) => {
                return Err(ApiError::invalid_field(
                    "meta.k8s.io",
                    "ListOptions",
                    "",
                    "resourceVersionMatch",
                    &format!(
                        "Forbidden: resourceVersionMatch \"{m}\" is forbidden unless resourceVersion is provided"
                    ),
                ));
            }
            (rv, m) => {
                let n: u64 = rv.parse().map_err(|_| {
                    ApiError::invalid_field(
                        "meta.k8s.io",
                        "ListOptions",
                        "",
                        "resourceVersion",
                        &format!("Invalid value: \"{rv}\": must be a valid resource version"),
                    )
                })?;
                let exact = m == "Exact" || (m.is_empty() && limit > 0);
                if n > st.rv {
                    let mut e = ApiError::new(
                        504,
                        "Timeout",
                        format!("Too large resource version: {n}, current: {}", st.rv),
                    );
                    e.details.causes = vec![Cause {
                        reason: "ResourceVersionTooLarge".into(),
                        message: "Too large resource version".into(),
                        field: String::new(),
                    }];
                    e.details.retry_after = Some(1);
                    return Err(e);
                }
                if exact {
                    let objs = st.objects_at(&gr, n).ok_or_else(|| {
                        ApiError::gone(format!("The resourceVersion for the provided list is too old. (requested {n}, oldest retained {})", st.compacted_rv))
                    })?;
                    (select(Some(&objs), ns, &labels, &fields), n)
                } else if m.is_empty() || m == "NotOlderThan" {
                    (select(st.bucket(&gr), ns, &labels, &fields), st.rv)
                } else {
                    return Err(ApiError::invalid_field(
                        "meta.k8s.io",
                        "ListOptions",
                        "",
                        "resourceVersionMatch",
                        &format!(
                            "Unsupported value: \"{m}\": supported values: \"Exact\", \"NotOlderThan\""
                        ),
                    ));
                }
            }
        };
        drop(st);
        (Arc::new(objs), list_rv, 0usize, None)
    };
    let total = items.len();
    let end = if limit > 0 {
        (offset + limit).min(total)
    } else {
        total
    };
    let page: &[Arc<Value>] = items.get(offset.min(total)..end).unwrap_or(&[]);
    let mut meta = Map::new();
    meta.insert("resourceVersion".into(), json!(list_rv.to_string()));
    if end < total {
        let id = match id {
            Some(id) => id,
            None => app
                .pages
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(list_rv, items.clone()),
        };
        meta.insert("continue".into(), json!(encode_continue(id, end, list_rv)));
        meta.insert("remainingItemCount".into(), json!(total - end));
    }
    if fmt == Format::Full {
        return Ok((
            [(header::CONTENT_TYPE, "application/json")],
            render::list_json(page, def, &t.version, &meta),
        )
            .into_response());
    }
    let page: Vec<Value> = page.iter().map(|o| (**o).clone()).collect();
    Ok(json_response(
        200,
        &render::list(&page, def, &t.version, fmt, meta),
    ))
}

/// The objects of a bucket in a namespace (all namespaces for `None`) that the selectors select,
/// in key order and shared with the store: a list under the store lock copies pointers, not
/// objects or keys.
fn select(
    bucket: Option<&crate::store::Objects>,
    ns: Option<&str>,
    labels: &LabelSelector,
    fields: &FieldSelector,
) -> Vec<Arc<Value>> {
    let Some(bucket) = bucket else {
        return Vec::new();
    };
    let selected = |o: &&Arc<Value>| {
        (labels.is_empty() || labels.matches(o)) && (fields.is_empty() || fields.matches(o))
    };
    match ns {
        // Keys sort by namespace first, so one namespace is one contiguous range.
        Some(ns) => bucket
            .range((ns.to_string(), String::new())..)
            .take_while(|((ons, _), _)| ons == ns)
            .map(|(_, o)| o)
            .filter(selected)
            .cloned()
            .collect(),
        None => bucket.values().filter(selected).cloned().collect(),
    }
}

fn start_watch(
    app: &Arc<App>,
    def: Arc<ResourceDef>,
    t: &Target,
    q: &Query,
    fmt: Format,
) -> ApiResult<Response> {
    let (labels, mut fields) = selectors(q, &def)?;
    if let Some(name) = &t.name {
        fields.0.push(("metadata.name".into(), false, name.clone()));
    }
    let send_initial = q.flag("sendInitialEvents");
    let bookmarks = q.flag("allowWatchBookmarks");
    if send_initial && !app.watch_list {
        // kube-apiserver without the WatchList gate: apimachinery
        // `pkg/apis/meta/internalversion/validation/validation.go`, `validateWatchOptions`.
        let mut e = ApiError::invalid(
            "meta.k8s.io",
            "ListOptions",
            "",
            vec![Cause {
                reason: "FieldValueForbidden".into(),
                message: "Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled".into(),
                field: "sendInitialEvents".into(),
            }],
        );
        e.details.name = None;
        return Err(e);
    }
    if send_initial {
        if q.get("resourceVersionMatch") != Some("NotOlderThan") {
            return Err(ApiError::invalid_field(
                "meta.k8s.io",
                "ListOptions",
                "",
                "resourceVersionMatch",
                "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        if !bookmarks {
            return Err(ApiError::invalid_field(
                "meta.k8s.io",
                "ListOptions",
                "",
                "allowWatchBookmarks",
                "Forbidden: sendInitialEvents requires setting allowWatchBookmarks to true",
            ));
        }
    }
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|s| s.parse::<u64>().ok())
        .filter(|s| *s > 0)
        .map(Duration::from_secs);
    let spec = WatchSpec {
        def,
        version: t.version.clone(),
        namespace: t.namespace.clone(),
        labels,
        fields,
        resource_version: q.get("resourceVersion").map(str::to_string),
        send_initial_events: send_initial,
        bookmarks,
        timeout,
        format: fmt,
        bookmark_interval: app.bookmark_interval,
        slow_watcher_budget: app.slow_watcher_budget,
        slow_watchers_closed: app.slow_watchers_closed.clone(),
    };
    let delay = app.faults.watch_delay(&spec.def.group, &spec.def.plural);
    watch::start(
        app.store.clone(),
        spec,
        app.close_watches.subscribe(),
        app.bookmark_now.subscribe(),
        delay,
    )
}

fn delete_opts(q: &Query, body: &[u8]) -> ApiResult<(DeleteOpts, bool)> {
    let mut opts = DeleteOpts {
        propagation: q.get("propagationPolicy").map(str::to_string),
        ..Default::default()
    };
    let mut dry_run = q.get("dryRun") == Some("All");
    if q.get("orphanDependents") == Some("true") {
        opts.propagation = Some("Orphan".into());
    }
    if !body.is_empty() {
        let v: Value = if body.starts_with(b"k8s\x00") {
            crate::proto::decode(body)
                .ok_or_else(|| ApiError::bad_request("DeleteOptions: undecodable protobuf"))?
        } else {
            serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("DeleteOptions: {e}")))?
        };
        if let Some(p) = v.get("propagationPolicy").and_then(Value::as_str) {
            opts.propagation = Some(p.to_string());
        }
        if v.get("orphanDependents") == Some(&json!(true)) {
            opts.propagation = Some("Orphan".into());
        }
        if let Some(pre) = v.get("preconditions") {
            opts.uid = pre.get("uid").and_then(Value::as_str).map(str::to_string);
            opts.resource_version = pre
                .get("resourceVersion")
                .and_then(Value::as_str)
                .map(str::to_string);
        }
        if v.get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|a| a.contains(&json!("All")))
        {
            dry_run = true;
        }
    }
    Ok((opts, dry_run))
}

fn parse_body(body: &[u8]) -> ApiResult<Value> {
    if body.is_empty() {
        return Err(ApiError::bad_request("the request body is empty"));
    }
    serde_json::from_slice(body)
        .or_else(|_| serde_yaml::from_slice(body))
        .map_err(|e| ApiError::bad_request(format!("the request body could not be decoded: {e}")))
}

#[allow(clippy::too_many_arguments)]
fn write(
    app: &Arc<App>,
    user: &UserInfo,
    verb: Verb,
    def: &Arc<ResourceDef>,
    headers: &HeaderMap,
    q: &Query,
    ct: &str,
    t: &Target,
    body: Bytes,
    fmt: Format,
) -> ApiResult<Response> {
    let dry_run_q = q.get("dryRun") == Some("All");
    if let Some(d) = q.get("dryRun").filter(|d| !d.is_empty() && *d != "All") {
        return Err(ApiError::bad_request(format!("Invalid dryRun value: {d}")));
    }
    let mut ctx = Ctx {
        def: def.clone(),
        version: t.version.clone(),
        namespace: if def.namespaced {
            t.namespace.clone().unwrap_or_default()
        } else {
            String::new()
        },
        name: t.name.clone().unwrap_or_default(),
        subresource: if t.subresource == "finalize" {
            String::new()
        } else {
            t.subresource.clone()
        },
        manager: field_manager(q, headers),
        dry_run: dry_run_q,
        validate: app.validate,
        // RBAC writes by anyone but system:masters are checked for privilege escalation.
        escalation: (def.group == "rbac.authorization.k8s.io" && !user.is_master()).then(|| {
            crate::escalation::Escalation {
                user: user.clone(),
                policy: app.auth.policy(&app.store),
            }
        }),
    };
    if def.namespaced && t.namespace.is_none() && verb != Verb::DeleteCollection {
        return Err(not_found_path());
    }
    let mut body = body;
    if matches!(verb, Verb::Post | Verb::Put) {
        let base = ct.split(';').next().unwrap_or("").trim();
        if crate::proto::is_protobuf(ct) {
            let v =
                crate::proto::decode(&body).ok_or_else(|| ApiError::unsupported_media_type(ct))?;
            body = Bytes::from(serde_json::to_vec(&v).unwrap_or_default());
        } else if !matches!(
            base,
            "" | "application/json" | "application/yaml" | "*/*" | "text/plain"
        ) {
            return Err(ApiError::unsupported_media_type(ct));
        }
    }
    let result = match verb {
        Verb::Post => {
            let b = parse_body(&body)?;
            let mut st = app.store.lock();
            ops::create(&mut st, &ctx, b)?
        }
        Verb::Put => {
            let b = parse_body(&body)?;
            let mut st = app.store.lock();
            ops::update(&mut st, &ctx, b)?
        }
        Verb::Patch | Verb::Apply => {
            let kind = PatchType::from_content_type(ct)
                .ok_or_else(|| ApiError::unsupported_media_type(ct))?;
            if kind == PatchType::Apply && q.get("fieldManager").is_none_or(|m| m.is_empty()) {
                return Err(ApiError::bad_request(
                    "PATCH, fieldManager is required for apply requests",
                ));
            }
            let force = q.flag("force");
            if force && kind != PatchType::Apply {
                return Err(ApiError::bad_request(
                    "force flag is only allowed for apply patches",
                ));
            }
            let mut st = app.store.lock();
            ops::patch(&mut st, &ctx, kind, &body, force)?
        }
        Verb::Delete => {
            let (opts, dry) = delete_opts(q, &body)?;
            ctx.dry_run |= dry;
            let mut st = app.store.lock();
            ops::delete(&mut st, &ctx, &opts)?
        }
        Verb::DeleteCollection => {
            let (opts, dry) = delete_opts(q, &body)?;
            ctx.dry_run |= dry;
            let (labels, fields) = selectors(q, def)?;
            let mut st = app.store.lock();
            let gr = (def.group.clone(), def.plural.clone());
            let names: Vec<(String, String)> = st
                .bucket(&gr)
                .map(|b| {
                    b.iter()
                        .filter(|((ns, _), o)| {
                            t.namespace.as_deref().is_none_or(|n| n == ns)
                                && labels.matches(o)
                                && fields.matches(o)
                        })
                        .map(|(k, _)| k.clone())
                        .collect()
                })
                .unwrap_or_default();
            let mut items = Vec::new();
            for (ns, name) in names {
                let c = Ctx {
                    namespace: ns,
                    name,
                    ..ctx.clone()
                };
                if let Ok((obj, _)) = ops::delete(&mut st, &c, &opts) {
                    items.push(obj);
                }
            }
            let mut meta = Map::new();
            meta.insert("resourceVersion".into(), json!(st.rv.to_string()));
            drop(st);
            app.store.changed.notify_one();
            return Ok((
                [(header::CONTENT_TYPE, "application/json")],
                render::list_json(&items, def, &t.version, &meta),
            )
                .into_response());
        }
        Verb::Get | Verb::List | Verb::Watch => return Err(ApiError::method_not_allowed()),
    };
    app.store.changed.notify_one();
    let (obj, code) = result;
    let body = match fmt {
        // Serialized straight from the stored object: a write answers without copying it.
        Format::Full | Format::Table(_) => serde_json::to_vec(&render::AtVersion {
            obj: &obj,
            api_version: &def.api_version(&t.version),
            kind: &def.kind,
        }),
        Format::Metadata => serde_json::to_vec(&render::metadata_of(&obj)),
    };
    let code = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
    Ok((
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.unwrap_or_default(),
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_decoding() {
        let q = Query::parse(Some("labelSelector=app%3Dweb%2Ctier+in+%28a%29&watch=1&x"));
        assert_eq!(q.get("labelSelector"), Some("app=web,tier in (a)"));
        assert!(q.flag("watch"));
        assert!(q.flag("x"));
        assert!(!q.flag("y"));
        assert_eq!(decode("%zz%"), "%zz%");
    }

    #[test]
    fn routes() {
        let r = |p| match route(p) {
            Route::Resource(t) => (t.plural, t.namespace, t.name, t.subresource, t.watch_path),
            _ => panic!("{p} is not a resource route"),
        };
        assert_eq!(
            r("/api/v1/namespaces/x"),
            (
                "namespaces".into(),
                None,
                Some("x".into()),
                "".into(),
                false
            )
        );
        assert_eq!(
            r("/api/v1/namespaces/x/status"),
            (
                "namespaces".into(),
                None,
                Some("x".into()),
                "status".into(),
                false
            )
        );
        assert_eq!(
            r("/api/v1/namespaces/x/configmaps"),
            (
                "configmaps".into(),
                Some("x".into()),
                None,
                "".into(),
                false
            )
        );
        assert_eq!(
            r("/apis/apps/v1/watch/namespaces/x/deployments/d"),
            (
                "deployments".into(),
                Some("x".into()),
                Some("d".into()),
                "".into(),
                true
            )
        );
        assert_eq!(
            r("/apis/apps/v1/deployments"),
            ("deployments".into(), None, None, "".into(), false)
        );
    }
}
