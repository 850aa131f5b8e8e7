//! An in-memory Kubernetes API server for tests and demos.
//!
//! It speaks the real HTTP API (discovery, CRUD, watch, selectors, patches including
//! server-side apply, status subresources, finalizers, garbage collection, CRDs) so that a
//! controller built on `kube`, `kubectl` and `helm` work against it unmodified. It also has
//! test hooks: request counters, fault injection, watch closing and history compaction.
//!
//! ```no_run
//! # async fn demo() {
//! use kube::api::{Api, PostParams};
//! use k8s_openapi::api::core::v1::ConfigMap;
//!
//! let sandbox = kube_sandbox::Sandbox::start().await;
//! let cms: Api<ConfigMap> = Api::namespaced(sandbox.client(), "default");
//! let cm: ConfigMap = serde_json::from_value(serde_json::json!({
//!     "metadata": {"name": "demo"}, "data": {"k": "v"}
//! })).unwrap();
//! cms.create(&PostParams::default(), &cm).await.unwrap();
//! assert_eq!(sandbox.requests().count(|r| r.verb.is_write() && r.resource == "configmaps"), 1);
//! sandbox.shutdown().await;
//! # }
//! ```
//!
//! See the crate README for what is implemented and where it differs from a real API server.

pub mod auth;
pub mod cel;
pub mod controllers;
pub mod crd;
pub mod crds;
pub mod discovery;
pub mod error;
pub mod escalation;
pub mod faults;
pub mod fieldset;
pub mod ops;
pub mod patch;
pub mod proto;
pub mod rbac;
pub mod registry;
pub mod render;
pub mod requests;
pub mod schema;
pub mod selectors;
pub mod server;
pub mod snapshot;
pub mod ssa;
pub mod store;
pub mod tls;
pub mod util;
pub mod watch;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use crds::CrdSet;
pub use faults::{FaultConfig, FaultRule, FaultTarget, WatchDelay};
pub use requests::{RequestRecord, Verb};

use server::App;
use store::Store;

/// Options for [`Sandbox::start_with`].
#[derive(Debug, Clone)]
pub struct SandboxOptions {
    /// CRD sets to preload (default: all).
    pub crds: Vec<CrdSet>,
    /// Extra CRD manifests to preload.
    pub extra_crds: Vec<serde_json::Value>,
    /// Directories whose `*.yaml`, `*.yml` and `*.json` files (multi-document YAML) are read at
    /// start; every `CustomResourceDefinition` in them is loaded (other kinds are ignored), e.g.
    /// the upstream CRDs of Cluster API, CAPRKE2 or Fleet.
    pub crd_dirs: Vec<PathBuf>,
    /// Keep objects in `DIR/snapshot.json` across restarts (loaded at start, written after
    /// changes and at shutdown).
    pub snapshot_dir: Option<PathBuf>,
    /// Load `snapshot_dir` at start but never write it: every run starts from the same
    /// prepared objects, and no snapshot writing competes with the requests (benchmarks).
    pub snapshot_read_only: bool,
    /// Listen address (default `127.0.0.1:0`: a free port).
    pub addr: SocketAddr,
    /// Interval of periodic watch bookmarks (default 30 s).
    pub bookmark_interval: Duration,
    /// Number of events kept for watches from a past resourceVersion (default 100,000).
    pub history_limit: usize,
    /// How many events a watcher may fall behind before it is closed (default 10,000).
    pub watch_buffer: usize,
    /// How long an event may wait for a watcher whose buffer is full before the watch is
    /// closed (default 100 ms), as kube-apiserver's watch cache does: it tries each watcher
    /// without blocking, then blocks at most its dispatch time budget and closes the watchers
    /// still full ("Forcing watcher close due to unresponsiveness": k8s.io/apiserver
    /// `pkg/storage/cacher/cache_watcher.go` `add`, `time_budget.go`). The client resumes.
    pub slow_watcher_budget: Duration,
    /// How long after its deletion a namespace starts being emptied (default 1 s; the real
    /// namespace controller is asynchronous too).
    pub namespace_cleanup_delay: Duration,
    /// Reject custom resources that do not match their schema (types, required, enum, bounds,
    /// `pattern`, `format`, `x-kubernetes-validations` CEL rules), as a real server does.
    /// On by default.
    pub validate_custom_resources: bool,
    /// Serve streaming lists (`sendInitialEvents=true` watches), as kube-apiserver does with
    /// its `WatchList` feature gate on (the default in 1.32 and from 1.34; off in 1.33 and
    /// before 1.32, and in aggregated API servers that do not enable it). Off, such a watch gets
    /// the 422 a server without the gate answers. On by default.
    pub watch_list: bool,
    /// Serve HTTPS instead of plain HTTP, with a CA and serving certificate generated at start
    /// ([`Sandbox::ca_pem`]; kubeconfigs carry it). Needed for kubectl and helm to send a
    /// kubeconfig's token: client-go reads credentials only over TLS (see [`tls`]).
    /// Off by default.
    pub tls: bool,
}

impl Default for SandboxOptions {
    fn default() -> Self {
        SandboxOptions {
            crds: CrdSet::ALL.to_vec(),
            extra_crds: Vec::new(),
            crd_dirs: Vec::new(),
            snapshot_dir: None,
            snapshot_read_only: false,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            bookmark_interval: Duration::from_secs(30),
            watch_list: true,
            history_limit: 100_000,
            watch_buffer: 10_000,
            slow_watcher_budget: Duration::from_millis(100),
            namespace_cleanup_delay: Duration::from_secs(1),
            validate_custom_resources: true,
            tls: false,
        }
    }
}

/// Errors starting a sandbox.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The listen address could not be bound.
    #[error("binding {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// The snapshot could not be read or written.
    #[error("snapshot in {dir}: {source}")]
    Snapshot {
        /// The directory.
        dir: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A preloaded CRD was rejected.
    #[error("preloading CRD {name}: {message}")]
    Crd {
        /// The CRD name.
        name: String,
        /// The API error message.
        message: String,
    },
    /// A CRD file could not be read or parsed.
    #[error("reading CRDs from {path}: {message}")]
    CrdFile {
        /// The file or directory.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// `restart` needs a snapshot directory.
    #[error("restart needs SandboxOptions::snapshot_dir")]
    NoSnapshotDir,
    /// The TLS certificate could not be generated.
    #[error("generating the TLS certificate: {message}")]
    Tls {
        /// What went wrong.
        message: String,
    },
    /// A token could not be issued (the ServiceAccount does not exist).
    #[error("issuing a token: {message}")]
    Auth {
        /// The API error message.
        message: String,
    },
}

/// A running sandbox API server. Dropping it stops the server (and writes the snapshot, if
/// configured); [`Sandbox::shutdown`] does the same and waits for the server to finish.
pub struct Sandbox {
    app: Arc<App>,
    addr: SocketAddr,
    opts: SandboxOptions,
    /// The CA and serving certificate when [`SandboxOptions::tls`] is set (kept by `restart`).
    tls: Option<Arc<tls::TlsMaterial>>,
    shutdown: tokio::sync::watch::Sender<bool>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

/// Read access to the request log of a sandbox.
pub struct Requests<'a>(&'a App);

impl Requests<'_> {
    /// Number of recorded requests matching `f`.
    pub fn count(&self, f: impl Fn(&RequestRecord) -> bool) -> usize {
        self.0.requests.count(f)
    }

    /// All recorded requests, oldest first.
    pub fn all(&self) -> Vec<RequestRecord> {
        self.0.requests.all()
    }

    /// Forgets all recorded requests.
    pub fn reset(&self) {
        self.0.requests.reset()
    }
}

impl Sandbox {
    /// Starts a sandbox on 127.0.0.1 with a free port and every CRD set. Panics if it cannot
    /// start (a test environment problem).
    pub async fn start() -> Sandbox {
        match Sandbox::start_with(SandboxOptions::default()).await {
            Ok(s) => s,
            Err(e) => panic!("starting the kube sandbox: {e}"),
        }
    }

    /// Starts a sandbox with options.
    pub async fn start_with(opts: SandboxOptions) -> Result<Sandbox, SandboxError> {
        Sandbox::start_inner(opts, None).await
    }

    /// Starts a sandbox, serving TLS with `tls` (a restart keeps its certificate, so clients
    /// holding the CA keep working) or with new material when `opts.tls` asks for it.
    async fn start_inner(
        opts: SandboxOptions,
        tls: Option<Arc<tls::TlsMaterial>>,
    ) -> Result<Sandbox, SandboxError> {
        let store = Arc::new(Store::new(opts.history_limit, opts.watch_buffer));
        {
            let mut st = store.lock();
            if let Some(dir) = &opts.snapshot_dir {
                snapshot::load(&mut st, dir).map_err(|source| SandboxError::Snapshot {
                    dir: dir.clone(),
                    source,
                })?;
            }
            st.work.namespace_delay = opts.namespace_cleanup_delay;
            ops::bootstrap(&mut st);
            let mut crds: Vec<serde_json::Value> =
                opts.crds.iter().flat_map(|s| s.crds()).collect();
            crds.extend(opts.extra_crds.iter().cloned());
            for dir in &opts.crd_dirs {
                crds.extend(crds_from_dir(dir)?);
            }
            for crd in crds {
                preload_crd(&mut st, crd)?;
            }
        }
        let listener = tokio::net::TcpListener::bind(opts.addr)
            .await
            .map_err(|source| SandboxError::Bind {
                addr: opts.addr,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| SandboxError::Bind {
            addr: opts.addr,
            source,
        })?;
        let tls = match (opts.tls, tls) {
            (false, _) => None,
            (true, Some(material)) => Some(material),
            (true, None) => Some(Arc::new(
                tls::TlsMaterial::generate(addr.ip())
                    .map_err(|message| SandboxError::Tls { message })?,
            )),
        };
        let (close_tx, _) = tokio::sync::watch::channel(0u64);
        let app = Arc::new(App {
            store: store.clone(),
            requests: Default::default(),
            faults: Default::default(),
            close_watches: close_tx,
            bookmark_now: tokio::sync::watch::channel(0u64).0,
            bookmark_interval: opts.bookmark_interval,
            slow_watcher_budget: opts.slow_watcher_budget,
            slow_watchers_closed: Default::default(),
            pages: Default::default(),
            snapshot_dir: opts
                .snapshot_dir
                .clone()
                .filter(|_| !opts.snapshot_read_only),
            snapshot_writer: Mutex::new(()),
            validate: opts.validate_custom_resources,
            watch_list: opts.watch_list,
            periodic_close: Mutex::new(None),
            auth: Default::default(),
        });
        if let Some(material) = &tls {
            app.auth
                .register_user_token(material.admin_token(), auth::admin());
        }
        let (shutdown, shutdown_rx) = tokio::sync::watch::channel(false);
        let mut tasks = Vec::new();
        let router = server::router(app.clone());
        let mut rx = shutdown_rx.clone();
        let app_for_server = app.clone();
        let graceful = async move {
            let _ = rx.wait_for(|v| *v).await;
            // Open watches would keep graceful shutdown waiting forever.
            app_for_server.close_all_watches();
        };
        let material = tls.clone();
        tasks.push(tokio::spawn(async move {
            let served = match material {
                Some(material) => {
                    axum::serve(tls::TlsListener::new(listener, &material), router)
                        .with_graceful_shutdown(graceful)
                        .await
                }
                None => {
                    axum::serve(listener, router)
                        .with_graceful_shutdown(graceful)
                        .await
                }
            };
            if let Err(e) = served {
                tracing::error!(error = %e, "kube-sandbox server stopped");
            }
        }));
        tasks.push(tokio::spawn(controllers::run(
            store.clone(),
            shutdown_rx.clone(),
        )));
        if opts.snapshot_dir.is_some() && !opts.snapshot_read_only {
            let app2 = app.clone();
            let mut rx = shutdown_rx.clone();
            tasks.push(tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_millis(500));
                loop {
                    tokio::select! {
                        _ = tick.tick() => {}
                        _ = rx.changed() => return,
                    }
                    if app2.store.lock().dirty
                        && let Err(e) = app2.save_snapshot()
                    {
                        tracing::warn!(error = %e, "writing the sandbox snapshot");
                    }
                }
            }));
        }
        Ok(Sandbox {
            app,
            addr,
            opts,
            tls,
            shutdown,
            tasks: Mutex::new(tasks),
        })
    }

    /// Base URL, `http://127.0.0.1:PORT` (`https://` with [`SandboxOptions::tls`]).
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// The CA certificate (PEM) that signed the serving certificate, with
    /// [`SandboxOptions::tls`]; `None` over plain HTTP.
    pub fn ca_pem(&self) -> Option<&str> {
        self.tls.as_deref().map(tls::TlsMaterial::ca_pem)
    }

    /// A `kube::Config` for this sandbox: its URL, trusting its CA over TLS, no credentials.
    fn config(&self) -> kube::Config {
        let url = self
            .url()
            .parse()
            .expect("a socket address always forms a valid URL");
        let mut config = kube::Config::new(url);
        config.root_cert = self.tls.as_ref().map(|m| vec![m.ca_der().to_vec()]);
        config
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A `kube::Client` for this sandbox (default namespace `default`).
    pub fn client(&self) -> kube::Client {
        kube::Client::try_from(self.config()).expect("the sandbox's client config is valid")
    }

    /// A kubeconfig whose current context targets this sandbox, as the admin: without
    /// credentials over plain HTTP; over TLS with `certificate-authority-data` and the admin's
    /// bearer token (client-go prompts for a password when a TLS kubeconfig has no credential;
    /// see [`tls`]).
    pub fn kubeconfig(&self) -> kube::config::Kubeconfig {
        kube::config::Kubeconfig::from_yaml(&self.kubeconfig_text(None))
            .expect("the generated kubeconfig is valid")
    }

    /// Writes [`Sandbox::kubeconfig`] to a file.
    pub fn write_kubeconfig(&self, path: impl AsRef<Path>) -> std::io::Result<()> {
        std::fs::write(path, self.kubeconfig_text(None))
    }

    fn kubeconfig_text(&self, token: Option<&str>) -> String {
        let admin = self.tls.as_deref().map(tls::TlsMaterial::admin_token);
        kubeconfig_document(&self.url(), self.ca_pem(), token.or(admin))
    }

    /// Issues a bearer token for an existing ServiceAccount, as the TokenRequest subresource
    /// (`POST .../serviceaccounts/NAME/token`) does. Requests with it are authorized by the
    /// RBAC objects in the sandbox; the token stops working when the ServiceAccount is deleted.
    pub fn service_account_token(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<String, SandboxError> {
        self.app
            .auth
            .issue_service_account_token(&self.app.store.lock(), namespace, name)
            .map_err(|e| SandboxError::Auth { message: e.message })
    }

    /// Issues a bearer token for any user and groups (`system:authenticated` is added), like
    /// a static token file of a real server.
    pub fn user_token(&self, name: &str, groups: &[&str]) -> String {
        self.app
            .auth
            .issue_user_token(rbac::UserInfo::user(name, groups))
    }

    /// A `kube::Client` that authenticates with a bearer token (see
    /// [`Sandbox::service_account_token`]).
    pub fn client_with_token(&self, token: &str) -> kube::Client {
        let mut config = self.config();
        config.auth_info.token = Some(token.to_string().into());
        kube::Client::try_from(config).expect("the sandbox's client config is valid")
    }

    /// A kubeconfig whose user authenticates with a bearer token. kubectl and helm send it
    /// only over TLS ([`SandboxOptions::tls`]); the `kube` client sends it either way.
    pub fn kubeconfig_with_token(&self, token: &str) -> kube::config::Kubeconfig {
        kube::config::Kubeconfig::from_yaml(&self.kubeconfig_text(Some(token)))
            .expect("the generated kubeconfig is valid")
    }

    /// Writes [`Sandbox::kubeconfig_with_token`] to a file (mode 0600 on Unix: it holds a
    /// credential).
    pub fn write_kubeconfig_with_token(
        &self,
        path: impl AsRef<Path>,
        token: &str,
    ) -> std::io::Result<()> {
        write_private(path.as_ref(), &self.kubeconfig_text(Some(token)))
    }

    /// The request log.
    pub fn requests(&self) -> Requests<'_> {
        Requests(&self.app)
    }

    /// Number of write requests (POST, PUT, PATCH, APPLY, DELETE, DELETECOLLECTION) so far.
    pub fn write_count(&self) -> usize {
        self.app.requests.count(|r| r.verb.is_write())
    }

    /// Prometheus text of `apiserver_request_total`.
    pub fn metrics(&self) -> String {
        self.app.requests.metrics_text()
    }

    /// Sets fault injection (replacing earlier rules).
    pub fn set_faults(&self, cfg: FaultConfig) {
        self.app.apply_faults(cfg);
    }

    /// Clears all fault rules and periodic watch closing.
    pub fn clear_faults(&self) {
        self.app.apply_faults(FaultConfig::default());
    }

    /// Closes every open watch stream now.
    pub fn close_watches(&self) {
        self.app.close_all_watches();
    }

    /// Makes every open watch that allows bookmarks send one now (with the newest
    /// resourceVersion it may carry), instead of waiting for the periodic one.
    pub fn send_bookmarks(&self) {
        self.app.bookmark_now.send_modify(|g| *g += 1);
    }

    /// Drops the watch history: watches and exact lists from an older resourceVersion answer
    /// 410 Gone.
    pub fn compact_history(&self) {
        self.app.compact();
    }

    /// How many watches the server closed because their client did not read in time (see
    /// [`SandboxOptions::slow_watcher_budget`]).
    pub fn slow_watchers_closed(&self) -> u64 {
        self.app
            .slow_watchers_closed
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The current (last assigned) resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.app.store.current_rv()
    }

    /// The options the sandbox was started with.
    pub fn options(&self) -> &SandboxOptions {
        &self.opts
    }

    fn stop(&self) {
        let _ = self.shutdown.send(true);
        self.app.close_all_watches();
        if let Some(h) = self
            .app
            .periodic_close
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            h.abort();
        }
    }

    /// Stops the server, waits for it, and writes the snapshot (if configured).
    pub async fn shutdown(self) {
        self.stop();
        let tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        for t in tasks {
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        }
        if let Err(e) = self.app.save_snapshot() {
            tracing::warn!(error = %e, "writing the sandbox snapshot at shutdown");
        }
    }

    /// Restarts from the snapshot: stops this server, then starts a new one on the same address
    /// with the same options. Watches are cut (clients resume or relist), objects, the
    /// resourceVersion counter and CRDs are kept.
    pub async fn restart(self) -> Result<Sandbox, SandboxError> {
        if self.opts.snapshot_dir.is_none() {
            return Err(SandboxError::NoSnapshotDir);
        }
        let mut opts = self.opts.clone();
        opts.addr = self.addr;
        let tls = self.tls.clone();
        self.shutdown().await;
        Sandbox::start_inner(opts, tls).await
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.stop();
        for t in self
            .tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            t.abort();
        }
        if let Err(e) = self.app.save_snapshot() {
            tracing::warn!(error = %e, "writing the sandbox snapshot on drop");
        }
    }
}

/// The `CustomResourceDefinition` documents of the YAML and JSON files of a directory (sorted
/// by file name; not recursive).
pub fn crds_from_dir(dir: &Path) -> Result<Vec<serde_json::Value>, SandboxError> {
    let err = |path: &Path, message: String| SandboxError::CrdFile {
        path: path.to_path_buf(),
        message,
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| err(dir, e.to_string()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && p.extension()
                    .is_some_and(|x| x == "yaml" || x == "yml" || x == "json")
        })
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).map_err(|e| err(&f, e.to_string()))?;
        out.extend(crds_from_yaml(&text).map_err(|m| err(&f, m))?);
    }
    Ok(out)
}

/// The `CustomResourceDefinition` documents of a multi-document YAML (or JSON) text; `List`
/// documents are looked into.
pub fn crds_from_yaml(text: &str) -> Result<Vec<serde_json::Value>, String> {
    use serde::Deserialize;
    let mut out = Vec::new();
    for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let v =
            serde_json::Value::deserialize(doc).map_err(|e| format!("document {}: {e}", i + 1))?;
        let items = match v.get("kind").and_then(serde_json::Value::as_str) {
            Some("List") => v
                .get("items")
                .and_then(serde_json::Value::as_array)
                .cloned()
                .unwrap_or_default(),
            _ => vec![v],
        };
        out.extend(items.into_iter().filter(|o| {
            o.get("kind").and_then(serde_json::Value::as_str) == Some("CustomResourceDefinition")
        }));
    }
    Ok(out)
}

fn preload_crd(st: &mut store::State, crd: serde_json::Value) -> Result<(), SandboxError> {
    let name = util::name_of(&crd).to_string();
    let Some(def) = st
        .registry
        .get("apiextensions.k8s.io", "customresourcedefinitions")
        .cloned()
    else {
        return Ok(());
    };
    let ctx = ops::Ctx {
        def,
        version: "v1".into(),
        namespace: String::new(),
        name: name.clone(),
        subresource: String::new(),
        manager: "kube-sandbox".into(),
        dry_run: false,
        validate: false,
        escalation: None,
    };
    let gr = (
        "apiextensions.k8s.io".to_string(),
        "customresourcedefinitions".to_string(),
    );
    let result = if st.get(&gr, "", &name).is_some() {
        let mut body = crd;
        if let Some(m) = body.get_mut("metadata").and_then(|m| m.as_object_mut()) {
            m.remove("resourceVersion");
        }
        ops::update(st, &ctx, body)
    } else {
        ops::create(st, &ctx, crd)
    };
    result.map(|_| ()).map_err(|e| SandboxError::Crd {
        name,
        message: e.message,
    })
}

/// A kubeconfig document targeting `url` (plain HTTP, no credentials).
pub fn kubeconfig_yaml(url: &str) -> String {
    kubeconfig_document(url, None, None)
}

/// A kubeconfig document targeting `url` whose user sends `token` as a bearer token.
pub fn kubeconfig_yaml_with_token(url: &str, token: &str) -> String {
    kubeconfig_document(url, None, Some(token))
}

/// A kubeconfig document targeting `url`, trusting `ca_pem` (as `certificate-authority-data`)
/// when given, whose user sends `token` when given.
pub fn kubeconfig_document(url: &str, ca_pem: Option<&str>, token: Option<&str>) -> String {
    use base64::Engine as _;
    let ca = ca_pem
        .map(|pem| {
            format!(
                "\n    certificate-authority-data: {}",
                base64::engine::general_purpose::STANDARD.encode(pem)
            )
        })
        .unwrap_or_default();
    let user = token
        .map(|token| format!("\n    token: {token}"))
        .unwrap_or_else(|| " {}".to_string());
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: kube-sandbox
  cluster:
    server: {url}{ca}
users:
- name: kube-sandbox
  user:{user}
contexts:
- name: kube-sandbox
  context:
    cluster: kube-sandbox
    user: kube-sandbox
    namespace: default
current-context: kube-sandbox
preferences: {{}}
"
    )
}

fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    opts.open(path)?.write_all(contents.as_bytes())
}
