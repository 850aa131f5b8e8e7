//! The `helm` command line: the only place in the provider that spawns processes.
//!
//! [`Helm`] runs one helm command at a time in the whole process (a process-wide async mutex),
//! with a private helm home (cache, config, data) so no `helm repo add` state leaks between
//! runs, an optional kubeconfig, and a timeout after which the process is killed. Exit codes are
//! checked; stderr is trimmed and scrubbed of secrets ([`scrub`]) before it reaches an error.
//! Values are written to a file (mode 0600, in a private temporary directory removed after the
//! command), never put on the command line; a password goes on standard input; the argv is
//! logged redacted.

pub mod access;
pub mod agent_chart;
pub mod argv;
pub mod output;
pub mod scrub;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use tokio::process::Command;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::model::fleet_install::{ChartInfo, ReleaseInfo};
use crate::{Error, Result};
use argv::{ChartSource, Deploy, Operation};
use output::HelmMajor;

/// One helm process at a time in the whole provider: helm keeps release state in the cluster
/// and caches on disk, and two concurrent operations on a release fail or corrupt it.
static HELM_LOCK: Mutex<()> = Mutex::const_new(());

/// Resolves once no helm command is running in this process. Commands do not start after their
/// [`Helm::stop_when`] signal, so after it this waits at most for the one running.
pub async fn idle() {
    drop(HELM_LOCK.lock().await);
}

/// How to run helm.
#[derive(Clone, Debug)]
pub struct HelmSettings {
    /// The helm binary (a path, or a name looked up in `PATH`).
    pub binary: String,
    /// Kubeconfig for helm (`KUBECONFIG`); `None`: helm's own resolution (the inherited
    /// `KUBECONFIG`, then the in-cluster service account).
    pub kubeconfig: Option<PathBuf>,
    /// Directory for helm's cache, config and data; `None`: a private temporary directory.
    pub home: Option<PathBuf>,
    /// Kill a helm process after this long.
    pub timeout: Duration,
}

impl HelmSettings {
    /// The settings the manager's flags give.
    pub fn from_flags(flags: &crate::cli::ManagerFlags) -> Self {
        HelmSettings {
            binary: flags.helm_binary.clone(),
            kubeconfig: flags
                .helm_kubeconfig
                .clone()
                .or_else(|| flags.kubeconfig.clone()),
            home: flags.helm_home.clone(),
            timeout: flags.helm_timeout,
        }
    }
}

/// Runs helm commands.
pub struct Helm {
    settings: HelmSettings,
    home: PathBuf,
    /// Keeps a private home alive (removed on drop).
    _home_dir: Option<tempfile::TempDir>,
    major: Mutex<Option<HelmMajor>>,
    metrics: Arc<Metrics>,
    /// Once cancelled, no new command starts (a running one finishes).
    stop: CancellationToken,
}

impl Helm {
    /// Prepares the helm home directory.
    pub fn new(settings: HelmSettings, metrics: Arc<Metrics>) -> Result<Self> {
        let (home, home_dir) = match &settings.home {
            Some(home) => {
                std::fs::create_dir_all(home)?;
                (home.clone(), None)
            }
            None => {
                let dir = private_dir_builder("caapf-helm-").tempdir()?;
                (dir.path().to_path_buf(), Some(dir))
            }
        };
        Ok(Self {
            settings,
            home,
            _home_dir: home_dir,
            major: Mutex::new(None),
            metrics,
            stop: CancellationToken::new(),
        })
    }

    /// Starts no new command once `stop` is cancelled (the process is shutting down): a helm
    /// command that is running is let finish, but the next step of a reconcile does not begin.
    pub fn stop_when(mut self, stop: CancellationToken) -> Self {
        self.stop = stop;
        self
    }

    /// The environment helm runs with: its directories under our home, and the kubeconfig.
    fn env(&self) -> Vec<(&'static str, PathBuf)> {
        let mut env = vec![
            ("HELM_CACHE_HOME", self.home.join("cache")),
            ("HELM_CONFIG_HOME", self.home.join("config")),
            ("HELM_DATA_HOME", self.home.join("data")),
            (
                "HELM_REPOSITORY_CONFIG",
                self.home.join("config/repositories.yaml"),
            ),
            ("HELM_REPOSITORY_CACHE", self.home.join("cache/repository")),
            (
                "HELM_REGISTRY_CONFIG",
                self.home.join("config/registry/config.json"),
            ),
        ];
        if let Some(kubeconfig) = &self.settings.kubeconfig {
            env.push(("KUBECONFIG", kubeconfig.clone()));
        }
        env
    }

    /// Runs `helm <args>`, returning stdout. `operation` names the command in metrics and
    /// errors (a bounded set: `version`, `show-chart`, `list`, `get-values`, `install`,
    /// `upgrade`, `pull`, `template`, `repo-add`).
    async fn run(&self, operation: &'static str, args: &[String]) -> Result<String> {
        let _guard = HELM_LOCK.lock().await;
        self.run_stateless(operation, args, None).await
    }

    /// Runs a command that keeps no state in a cluster (`pull`, `template`) without waiting for
    /// the process-wide lock: an install that takes minutes must not hold up a hook.
    async fn run_stateless(
        &self,
        operation: &'static str,
        args: &[String],
        input: Option<&[u8]>,
    ) -> Result<String> {
        if self.stop.is_cancelled() {
            return Err(Error::helm(
                operation,
                "not started: the provider is shutting down",
            ));
        }
        let mut command = Command::new(&self.settings.binary);
        command
            .args(args)
            .envs(self.env())
            // helm reads these; ours are explicit flags.
            .env_remove("HELM_NAMESPACE")
            .env_remove("HELM_DEBUG")
            .stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let logged: Vec<String> = args.iter().map(|a| scrub::redact(a)).collect();
        tracing::debug!(operation, args = ?logged, "running helm");
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(err) => {
                self.metrics.helm_ran(operation, "error");
                return Err(Error::helm(
                    operation,
                    format!("cannot run helm binary {:?}: {err}", self.settings.binary),
                ));
            }
        };
        if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
            use tokio::io::AsyncWriteExt;
            // A failed write shows as helm's own error (it read no password).
            let _ = stdin.write_all(input).await;
        }
        // Dropping the future on timeout drops the child, which kills it (kill_on_drop).
        let output = match tokio::time::timeout(self.settings.timeout, child.wait_with_output())
            .await
        {
            Ok(Ok(output)) => output,
            Ok(Err(err)) => {
                self.metrics.helm_ran(operation, "error");
                return Err(Error::helm(operation, format!("waiting for helm: {err}")));
            }
            Err(_) => {
                self.metrics.helm_ran(operation, "timeout");
                tracing::warn!(operation, after = ?self.settings.timeout, "helm killed after timeout");
                return Err(Error::Timeout {
                    what: operation_what(operation),
                    after: self.settings.timeout,
                });
            }
        };
        if !output.status.success() {
            self.metrics.helm_ran(operation, "failure");
            let stderr = String::from_utf8_lossy(&output.stderr);
            let mut message = scrub::scrub(&stderr, scrub::MAX_MESSAGE_CHARS);
            if message.is_empty() {
                message = format!("helm exited with {}", output.status);
            }
            return Err(Error::helm(operation, message));
        }
        self.metrics.helm_ran(operation, "success");
        String::from_utf8(output.stdout)
            .map_err(|_| Error::helm(operation, "helm printed output that is not UTF-8"))
    }

    /// The helm major version (asked once, then remembered).
    pub async fn major(&self) -> Result<HelmMajor> {
        let mut cached = self.major.lock().await;
        if let Some(major) = *cached {
            return Ok(major);
        }
        let text = self.run("version", &argv::version()).await?;
        let major =
            output::parse_helm_version(&text).map_err(|message| Error::helm("version", message))?;
        tracing::info!(version = %text.trim(), "helm found");
        *cached = Some(major);
        Ok(major)
    }

    /// The chart's metadata from the repository: the given version, or the latest.
    pub async fn show_chart(
        &self,
        source: &ChartSource,
        chart: &str,
        version: Option<&str>,
    ) -> Result<ChartInfo> {
        let text = self
            .run("show-chart", &argv::show_chart(source, chart, version))
            .await?;
        output::parse_chart_yaml(&text).map_err(|message| Error::helm("show-chart", message))
    }

    /// The named releases in `namespace` (deployed, failed or pending).
    pub async fn list(&self, namespace: &str, releases: &[&str]) -> Result<Vec<ReleaseInfo>> {
        let text = self.run("list", &argv::list(namespace, releases)).await?;
        output::parse_release_list(&text).map_err(|message| Error::helm("list", message))
    }

    /// The values a release was deployed with.
    pub async fn get_values(
        &self,
        release: &str,
        namespace: &str,
    ) -> Result<serde_json::Map<String, serde_json::Value>> {
        let text = self
            .run("get-values", &argv::get_values(release, namespace))
            .await?;
        output::parse_values(&text).map_err(|message| Error::helm("get-values", message))
    }

    /// Installs or upgrades a release to `version`, with `values` in a private file when
    /// given (none: the chart's defaults).
    pub async fn deploy(
        &self,
        operation: Operation,
        release: &Release<'_>,
        version: &str,
        values: Option<&serde_json::Map<String, serde_json::Value>>,
    ) -> Result<()> {
        let major = self.major().await?;
        // Removed when dropped, after helm has finished (or was killed).
        // Written off the async workers (file creation and a write of the whole values).
        let values_file = match values {
            Some(values) => {
                let (home, values) = (self.home.clone(), values.clone());
                let written =
                    tokio::task::spawn_blocking(move || ValuesFile::write(&home, &values))
                        .await
                        .map_err(|err| {
                            Error::helm("deploy", format!("writing the values file: {err}"))
                        })??;
                Some(written)
            }
            None => None,
        };
        let args = argv::deploy(
            major,
            &Deploy {
                operation,
                release: release.name,
                chart: release.chart,
                source: release.source,
                namespace: release.namespace,
                version,
                values_file: values_file.as_ref().map(ValuesFile::path),
                wait_timeout: argv::wait_timeout(self.settings.timeout),
            },
        );
        let name = match operation {
            Operation::Install => "install",
            Operation::Upgrade => "upgrade",
        };
        self.run(name, &args).await.map(drop)
    }
}

impl Helm {
    /// Writes `data` as private files under helm's home (removed when the result is dropped),
    /// off the async workers; with a user and password, adds `repository` to the files' private
    /// repository config (`helm repo add --password-stdin`, which also fetches its index).
    pub async fn access_files(
        &self,
        data: access::AccessData,
        repository: &str,
        access: &crate::model::chart_access::ChartAccess,
    ) -> Result<access::AccessFiles> {
        let home = self.home.clone();
        let basic_auth = data.basic_auth.clone();
        let files = tokio::task::spawn_blocking(move || access::AccessFiles::write(&home, &data))
            .await
            .map_err(|err| {
                Error::helm(
                    "access",
                    format!("writing the registry configuration and CA files: {err}"),
                )
            })??;
        let source = files.source(repository, access);
        if let Some((user, password)) = &basic_auth
            && let Some(args) = argv::repo_add(&source, user)
        {
            self.run_stateless("repo-add", &args, Some(password.as_bytes()))
                .await?;
        }
        Ok(files)
    }

    /// Downloads the archive of `chart` at exactly `version` into `destination` (created if
    /// needed) and returns its path.
    pub async fn pull(
        &self,
        source: &ChartSource,
        chart: &str,
        version: &str,
        destination: &Path,
    ) -> Result<PathBuf> {
        tokio::fs::create_dir_all(destination).await?;
        self.run_stateless(
            "pull",
            &argv::pull(source, chart, version, destination),
            None,
        )
        .await?;
        let mut entries = tokio::fs::read_dir(destination).await?;
        while let Some(entry) = entries.next_entry().await? {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(&format!("{chart}-")) && name.ends_with(".tgz") {
                return Ok(entry.path());
            }
        }
        Err(Error::helm(
            "pull",
            format!("helm pull left no {chart} archive"),
        ))
    }

    /// Renders the chart archive as release `release` in `namespace` with `values` (written to
    /// a private file), without hooks. Returns the YAML stream.
    pub async fn template(
        &self,
        release: &str,
        archive: &Path,
        namespace: &str,
        values: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<String> {
        let home = self.home.clone();
        let values = values.clone();
        // Removed when dropped, after helm has finished (or was killed).
        let values_file = tokio::task::spawn_blocking(move || ValuesFile::write(&home, &values))
            .await
            .map_err(|err| Error::helm("template", format!("writing the values file: {err}")))??;
        self.run_stateless(
            "template",
            &argv::template(release, archive, namespace, values_file.path()),
            None,
        )
        .await
    }
}

/// A release: its name, chart, where the chart comes from, and its namespace.
#[derive(Clone, Copy, Debug)]
pub struct Release<'a> {
    pub name: &'a str,
    pub chart: &'a str,
    pub source: &'a ChartSource,
    pub namespace: &'a str,
}

fn operation_what(operation: &'static str) -> &'static str {
    match operation {
        "version" => "helm version",
        "show-chart" => "helm show chart",
        "list" => "helm list",
        "get-values" => "helm get values",
        "install" => "helm install",
        "upgrade" => "helm upgrade",
        "pull" => "helm pull",
        "repo-add" => "helm repo add",
        "template" => "helm template",
        _ => "helm",
    }
}

/// A temporary directory only we can enter (mode 0700).
pub(crate) fn private_dir_builder(prefix: &str) -> tempfile::Builder<'_, 'static> {
    let mut builder = tempfile::Builder::new();
    builder.prefix(prefix);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(std::fs::Permissions::from_mode(0o700));
    }
    builder
}

/// Writes `bytes` to a new file `name` in `dir` that only we can read (mode 0600).
pub(crate) fn write_private(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<PathBuf> {
    let path = dir.join(name);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(&path)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    Ok(path)
}

/// A values file readable only by us, in a private directory; both removed on drop.
pub struct ValuesFile {
    dir: tempfile::TempDir,
    path: PathBuf,
}

impl ValuesFile {
    /// Writes `values` as JSON (a YAML document helm reads) under `parent`.
    pub fn write(
        parent: &Path,
        values: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<Self> {
        std::fs::create_dir_all(parent)?;
        let dir = private_dir_builder("values-").tempdir_in(parent)?;
        let path = write_private(dir.path(), "values.json", &serde_json::to_vec(values)?)?;
        Ok(Self { dir, path })
    }

    /// Where the file is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The private directory holding it.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_file_is_private_and_removed() {
        let parent = tempfile::tempdir().expect("tempdir");
        let values: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(r#"{"apiServerCA": "secret"}"#).expect("json");
        let file = ValuesFile::write(parent.path(), &values).expect("written");
        let path = file.path().to_path_buf();
        let dir = file.dir().to_path_buf();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
            assert_eq!(mode(&path), 0o600);
            assert_eq!(mode(&dir), 0o700);
        }
        let read: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).expect("read")).expect("json");
        assert_eq!(read["apiServerCA"], "secret");
        drop(file);
        assert!(!path.exists() && !dir.exists());
    }
}
