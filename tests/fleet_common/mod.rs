//! Shared test support: the real helm binary, a chart repository served on 127.0.0.1, and a
//! manager running against the sandbox API server.

#![allow(dead_code)]

pub mod real_charts;
pub mod registry;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use caapf::api::FleetAddonConfig;
use caapf::cli::ManagerFlags;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, CustomResourceExt};
use kube_sandbox::{Sandbox, SandboxOptions};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// The helm binary: `HELM_BIN`, else `<repo>/bin/helm`. Fails (does not skip) when missing.
pub fn helm_bin() -> PathBuf {
    find_helm("HELM_BIN", "bin/helm")
}

/// A helm 3 binary: `HELM3_BIN`, else `<repo>/bin/helm3`. Fails (does not skip) when missing.
pub fn helm3_bin() -> PathBuf {
    find_helm("HELM3_BIN", "bin/helm3")
}

fn find_helm(variable: &str, default: &str) -> PathBuf {
    let path = std::env::var_os(variable)
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(default));
    assert!(
        path.is_file(),
        "helm not found at {}: run hack/install-helm.sh (or `make tools`), or set {variable}",
        path.display()
    );
    path
}

/// Runs helm with an isolated home under `home`, returning stdout; panics on failure.
pub fn helm(home: &Path, kubeconfig: Option<&Path>, args: &[&str]) -> String {
    let mut command = std::process::Command::new(helm_bin());
    command
        .args(args)
        .env("HOME", home)
        .env("XDG_CACHE_HOME", home.join("xdg-cache"))
        .env("XDG_CONFIG_HOME", home.join("xdg-config"))
        .env("XDG_DATA_HOME", home.join("xdg-data"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"));
    if let Some(kubeconfig) = kubeconfig {
        command.env("KUBECONFIG", kubeconfig);
    }
    let output = command.output().expect("running helm");
    assert!(
        output.status.success(),
        "helm {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

const FLEET_VALUES: &str =
    "extraEnv: []\nbootstrap:\n  enabled: true\napiServerURL: \"\"\napiServerCA: \"\"\n";

/// What the test `fleet` chart renders: the env and bootstrap flag Fleet would get, and a
/// `fleet-controller` ConfigMap with `data.config` JSON like the real chart.
const FLEET_TEMPLATE: &str = r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: fleet-env
data:
  extraEnv: {{ .Values.extraEnv | toJson | quote }}
  bootstrap: {{ .Values.bootstrap.enabled | quote }}
  version: {{ .Chart.Version | quote }}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: fleet-controller
data:
  config: |
    {
      "apiServerURL": {{ .Values.apiServerURL | quote }},
      "apiServerCA": {{ b64enc .Values.apiServerCA | quote }},
      "agentCheckinInterval": "15m"
    }
"#;

const FLEET_CRD_TEMPLATE: &str = r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: fleet-crd-marker
data:
  version: {{ .Chart.Version | quote }}
"#;

/// Every test chart version, packaged once per test process.
pub const CHART_VERSIONS: [&str; 3] = ["0.1.0", "0.2.0", "0.3.0-rc.1"];

fn packaged_charts() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = dir.path().join("home");
        for version in CHART_VERSIONS {
            for (name, template, values) in [
                ("fleet-crd", FLEET_CRD_TEMPLATE, ""),
                ("fleet", FLEET_TEMPLATE, FLEET_VALUES),
            ] {
                let chart = dir.path().join(format!("src/{name}-{version}/{name}"));
                std::fs::create_dir_all(chart.join("templates")).expect("mkdir");
                std::fs::write(
                    chart.join("Chart.yaml"),
                    format!("apiVersion: v2\nname: {name}\nversion: {version}\nappVersion: \"v{version}\"\n"),
                )
                .expect("Chart.yaml");
                std::fs::write(chart.join("values.yaml"), values).expect("values.yaml");
                std::fs::write(chart.join("templates/all.yaml"), template).expect("template");
                package(&home, &chart, &dir.path().join("packages"));
            }
        }
        dir
    })
    .path()
}

/// The test double of Fleet's `fleet-agent` chart packaged at `version`
/// (`tests/fixtures/charts/fleet-agent`; its templates follow the packaged version, as Fleet's
/// chart changed between minors: see its README).
pub fn package_agent_chart(version: &str) -> PathBuf {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    let dir = DIR
        .get_or_init(|| tempfile::tempdir().expect("tempdir"))
        .path();
    let out = dir.join("packages");
    let archive = out.join(format!("fleet-agent-{version}.tgz"));
    if archive.exists() {
        return archive;
    }
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/charts/fleet-agent");
    let chart = dir.join(format!("src/{version}/fleet-agent"));
    std::fs::create_dir_all(chart.join("templates")).expect("mkdir");
    for entry in std::fs::read_dir(fixture.join("templates")).expect("templates") {
        let path = entry.expect("entry").path();
        std::fs::copy(
            &path,
            chart
                .join("templates")
                .join(path.file_name().expect("name")),
        )
        .expect("copy template");
    }
    std::fs::copy(fixture.join("values.yaml"), chart.join("values.yaml")).expect("values");
    std::fs::write(
        chart.join("Chart.yaml"),
        format!(
            "apiVersion: v2\nname: fleet-agent\nversion: {version}\nappVersion: \"{version}\"\n"
        ),
    )
    .expect("Chart.yaml");
    package(&dir.join("home"), &chart, &out);
    archive
}

/// `helm package` of the chart directory `chart` into `out`; the archive's path.
pub fn package_chart(chart: &Path, out: &Path) -> PathBuf {
    let home = out.join(".home");
    package(&home, chart, out);
    let text = std::fs::read_to_string(chart.join("Chart.yaml")).expect("Chart.yaml");
    let field = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}: ")))
            .map(|v| v.trim().trim_matches('"').to_string())
            .expect("Chart.yaml field")
    };
    out.join(format!("{}-{}.tgz", field("name"), field("version")))
}

/// `helm package` of the chart directory `chart` into `out`.
fn package(home: &Path, chart: &Path, out: &Path) {
    helm(
        home,
        None,
        &[
            "package",
            chart.to_str().expect("utf-8 path"),
            "--destination",
            out.to_str().expect("utf-8 path"),
        ],
    );
}

/// How the chart repository answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum RepoMode {
    Up = 0,
    /// 503 for everything.
    Down = 1,
    /// Never answers.
    Hang = 2,
}

/// A chart repository (`index.yaml` + packages) on 127.0.0.1.
pub struct ChartRepo {
    dir: tempfile::TempDir,
    addr: std::net::SocketAddr,
    mode: Arc<AtomicU8>,
    index_fetches: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl ChartRepo {
    /// Serves `fleet-crd` and `fleet` at `versions`.
    pub async fn start(versions: &[&str]) -> ChartRepo {
        Self::start_with_auth(versions, None).await
    }

    /// As [`ChartRepo::start`], answering 401 to every request without basic auth as `auth`
    /// (user, password).
    pub async fn start_with_auth(versions: &[&str], auth: Option<(&str, &str)>) -> ChartRepo {
        use base64::Engine;
        let expected = auth.map(|(user, password)| {
            let token =
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
            format!("Basic {token}")
        });
        let dir = tempfile::tempdir().expect("tempdir");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mode = Arc::new(AtomicU8::new(RepoMode::Up as u8));
        let index_fetches = Arc::new(AtomicUsize::new(0));
        let root = dir.path().to_path_buf();
        let (m, f) = (mode.clone(), index_fetches.clone());
        let app = axum::Router::new().fallback(
            move |uri: axum::http::Uri, headers: axum::http::HeaderMap| {
                let (root, mode, fetches) = (root.clone(), m.clone(), f.clone());
                let authorized = expected.as_deref().is_none_or(|want| {
                    headers.get("authorization").and_then(|v| v.to_str().ok()) == Some(want)
                });
                async move {
                    if !authorized {
                        return (
                            axum::http::StatusCode::UNAUTHORIZED,
                            b"401 Unauthorized".to_vec(),
                        );
                    }
                    serve(&root, &mode, &fetches, uri.path()).await
                }
            },
        );
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let repo = ChartRepo {
            dir,
            addr,
            mode,
            index_fetches,
            task,
        };
        for version in versions {
            repo.add_version(version);
        }
        repo
    }

    /// The repository URL.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// Publishes both charts at `version` and re-indexes.
    pub fn add_version(&self, version: &str) {
        for name in ["fleet-crd", "fleet"] {
            let file = format!("{name}-{version}.tgz");
            std::fs::copy(
                packaged_charts().join("packages").join(&file),
                self.dir.path().join(&file),
            )
            .expect("copy package");
        }
        self.reindex();
    }

    /// Rewrites `index.yaml` from the packages present.
    fn reindex(&self) {
        let home = self.dir.path().join(".home");
        helm(
            &home,
            None,
            &[
                "repo",
                "index",
                self.dir.path().to_str().expect("utf-8 path"),
            ],
        );
    }

    /// Publishes a packaged chart (see [`package_chart`]) and re-indexes.
    pub fn add_package(&self, archive: &Path) {
        std::fs::copy(
            archive,
            self.dir
                .path()
                .join(archive.file_name().expect("file name")),
        )
        .expect("copy package");
        self.reindex();
    }

    /// Publishes the test double of Fleet's `fleet-agent` chart
    /// (`tests/fixtures/charts/fleet-agent`) at `version` and re-indexes.
    pub fn add_agent_version(&self, version: &str) {
        let archive = package_agent_chart(version);
        std::fs::copy(
            &archive,
            self.dir
                .path()
                .join(archive.file_name().expect("file name")),
        )
        .expect("copy package");
        self.reindex();
    }

    pub fn set_mode(&self, mode: RepoMode) {
        self.mode.store(mode as u8, Ordering::SeqCst);
    }

    /// How many times `index.yaml` was asked for.
    pub fn index_fetches(&self) -> usize {
        self.index_fetches.load(Ordering::SeqCst)
    }
}

impl Drop for ChartRepo {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(
    root: &Path,
    mode: &AtomicU8,
    fetches: &AtomicUsize,
    path: &str,
) -> (axum::http::StatusCode, Vec<u8>) {
    use axum::http::StatusCode;
    if path.ends_with("index.yaml") {
        fetches.fetch_add(1, Ordering::SeqCst);
    }
    match mode.load(Ordering::SeqCst) {
        1 => return (StatusCode::SERVICE_UNAVAILABLE, b"down".to_vec()),
        2 => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        _ => {}
    }
    let relative = path.trim_start_matches('/');
    if relative.contains("..") || relative.starts_with('.') {
        return (StatusCode::NOT_FOUND, Vec::new());
    }
    match std::fs::read(root.join(relative)) {
        Ok(bytes) => (StatusCode::OK, bytes),
        Err(_) => (StatusCode::NOT_FOUND, Vec::new()),
    }
}

/// Manager options for a test.
pub struct Options {
    pub helm_binary: PathBuf,
    pub sync_period: Duration,
    pub helm_timeout: Duration,
    /// Run the `caapf` binary as a process with these extra flags (its log in the Env's
    /// directory, [`Env::log`]) instead of the manager in this process.
    pub process_args: Option<Vec<String>>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            helm_binary: helm_bin(),
            sync_period: Duration::from_secs(600),
            helm_timeout: Duration::from_secs(60),
            process_args: None,
        }
    }
}

/// A sandbox API server with our CRD and a manager running against it.
pub struct Env {
    pub sandbox: Sandbox,
    pub client: Client,
    pub dir: tempfile::TempDir,
    shutdown: CancellationToken,
    manager: Option<tokio::task::JoinHandle<caapf::Result<()>>>,
    process: Option<crate::common::process::ManagerProcess>,
}

impl Env {
    pub async fn start(options: Options) -> Env {
        let crd = serde_json::to_value(FleetAddonConfig::crd()).expect("CRD serialises");
        let sandbox = Sandbox::start_with(SandboxOptions {
            // The binary checks that Cluster API is served before it starts.
            crds: match options.process_args {
                Some(_) => vec![kube_sandbox::CrdSet::Capi],
                None => Vec::new(),
            },
            extra_crds: vec![crd],
            validate_custom_resources: true,
            ..SandboxOptions::default()
        })
        .await
        .expect("sandbox starts");
        let dir = tempfile::tempdir().expect("tempdir");
        sandbox
            .write_kubeconfig(dir.path().join("kubeconfig"))
            .expect("kubeconfig");
        let mut env = Env {
            client: sandbox.client(),
            sandbox,
            dir,
            shutdown: CancellationToken::new(),
            manager: None,
            process: None,
        };
        env.start_manager(options);
        env
    }

    fn start_manager(&mut self, options: Options) {
        if let Some(extra) = options.process_args {
            let mut args = vec![
                format!("--helm-binary={}", options.helm_binary.display()),
                format!(
                    "--helm-home={}",
                    self.dir.path().join("helm-home").display()
                ),
                format!("--helm-timeout={}s", options.helm_timeout.as_secs()),
                format!("--sync-period={}s", options.sync_period.as_secs()),
            ];
            args.extend(extra);
            let process = crate::common::process::ManagerProcess::start(
                &self.kubeconfig(),
                self.dir.path(),
                "caapf",
                0,
                &args,
            );
            self.process = Some(process);
            return;
        }
        let flags = ManagerFlags {
            health_probe_bind_address: "0".to_string(),
            metrics_bind_address: "0".to_string(),
            // The Runtime SDK extension listens too: a free loopback port per test.
            webhook_host: "127.0.0.1".to_string(),
            webhook_port: 0,
            helm_binary: options.helm_binary.display().to_string(),
            helm_kubeconfig: Some(self.kubeconfig()),
            helm_home: Some(self.dir.path().join("helm-home")),
            helm_timeout: options.helm_timeout,
            sync_period: options.sync_period,
            ..ManagerFlags::default()
        };
        self.shutdown = CancellationToken::new();
        self.manager = Some(tokio::spawn(caapf::manager::run_with_client(
            self.sandbox.client(),
            flags,
            self.shutdown.clone(),
        )));
    }

    /// Stops the manager and starts another one (e.g. with another helm) on the same API server.
    pub async fn restart_manager(&mut self, options: Options) {
        self.shutdown.cancel();
        if let Some(manager) = self.manager.take() {
            let _ = tokio::time::timeout(Duration::from_secs(30), manager).await;
        }
        self.start_manager(options);
    }

    /// The log of the manager process ([`Options::process_args`]).
    pub fn log(&self) -> String {
        let path = self
            .process
            .as_ref()
            .map(|p| p.log.clone())
            .expect("a manager process");
        std::fs::read_to_string(path).expect("manager log")
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    pub fn api(&self) -> Api<FleetAddonConfig> {
        Api::all(self.client.clone())
    }

    /// Sets the whole spec (create, or replace `/spec`), returning the new generation.
    pub async fn set_spec(&self, spec: Value) -> i64 {
        let api = self.api();
        let object = match api.get_opt("fleet-addon-config").await.expect("get") {
            None => {
                let object: FleetAddonConfig = serde_json::from_value(json!({
                    "apiVersion": "addons.cluster.x-k8s.io/v1alpha1",
                    "kind": "FleetAddonConfig",
                    "metadata": {"name": "fleet-addon-config"},
                    "spec": spec,
                }))
                .expect("spec deserialises");
                api.create(&PostParams::default(), &object)
                    .await
                    .expect("created")
            }
            Some(_) => {
                let patch: json_patch::Patch = serde_json::from_value(json!([
                    {"op": "replace", "path": "/spec", "value": spec}
                ]))
                .expect("patch");
                api.patch(
                    "fleet-addon-config",
                    &PatchParams::default(),
                    &Patch::Json::<()>(patch),
                )
                .await
                .expect("spec replaced")
            }
        };
        object.metadata.generation.expect("generation")
    }

    /// Waits until `check` accepts the object, or panics with the last status seen.
    pub async fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        check: impl Fn(&FleetAddonConfig) -> bool,
    ) -> FleetAddonConfig {
        let deadline = Instant::now() + timeout;
        loop {
            let current = self
                .api()
                .get_opt("fleet-addon-config")
                .await
                .ok()
                .flatten();
            if let Some(object) = &current
                && check(object)
            {
                return object.clone();
            }
            if Instant::now() > deadline {
                panic!(
                    "timed out after {timeout:?} waiting for {what}; last status: {}",
                    serde_json::to_string_pretty(&current.and_then(|o| o.status))
                        .unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits for `Ready` with `status` for `generation`.
    pub async fn wait_ready(&self, generation: i64, status: &str) -> FleetAddonConfig {
        self.wait_for(
            &format!("Ready={status} for generation {generation}"),
            Duration::from_secs(60),
            |o| {
                condition(o, "Ready").is_some_and(|c| {
                    c.status == status && c.observed_generation == Some(generation)
                })
            },
        )
        .await
    }

    /// `helm list` in `cattle-fleet-system`: (name, chart, revision, status).
    pub fn releases(&self) -> Vec<(String, String, String, String)> {
        let out = helm(
            &self.dir.path().join("test-helm"),
            Some(&self.kubeconfig()),
            &[
                "list",
                "--namespace",
                "cattle-fleet-system",
                "--output",
                "json",
            ],
        );
        let list: Vec<Value> = serde_json::from_str(&out).expect("helm list json");
        let mut releases: Vec<_> = list
            .iter()
            .map(|r| {
                let s = |k: &str| r[k].as_str().unwrap_or_default().to_string();
                (s("name"), s("chart"), s("revision"), s("status"))
            })
            .collect();
        releases.sort();
        releases
    }

    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(manager) = self.manager.take() {
            let _ = tokio::time::timeout(Duration::from_secs(30), manager).await;
        }
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        self.shutdown.cancel();
        if let Some(manager) = self.manager.take() {
            manager.abort();
        }
    }
}

/// The condition of `type_`.
pub fn condition<'a>(object: &'a FleetAddonConfig, type_: &str) -> Option<&'a Condition> {
    object
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
}

/// Asserts a condition's status and returns it.
pub fn assert_condition<'a>(
    object: &'a FleetAddonConfig,
    type_: &str,
    status: &str,
) -> &'a Condition {
    let found = condition(object, type_)
        .unwrap_or_else(|| panic!("no {type_} condition in {:?}", object.status));
    assert_eq!(found.status, status, "{type_}: {found:?}");
    found
}
