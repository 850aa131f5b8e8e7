//! Argument vectors for every helm command we run. Pure: the same inputs give the same argv, and
//! no argv ever carries a value (values go in a file, see [`super::Helm::upgrade`]).
//!
//! helm 3 and helm 4 differences handled here:
//! - roll back on failure: `--atomic` (helm 3) vs `--rollback-on-failure` (helm 4);
//! - `--wait`: a boolean in helm 3, a strategy in helm 4 where a bare `--wait` means `watcher`
//!   (kstatus readiness), so the bare flag works in both;
//! - helm 4 applies server-side: on upgrade, `--force-conflicts` takes over fields another
//!   manager (e.g. CAAPF, which patched `fleet-controller` with server-side apply) owns, as
//!   helm 3's three-way merge would overwrite them. helm 4 refuses `--force-conflicts` when it
//!   falls back to client-side apply, which its default `--server-side=auto` does for a release
//!   last written by helm 3, so upgrades also say `--server-side=true`;
//! - `helm list --all` is gone in helm 4: we ask for `--deployed --failed --pending`, which both
//!   accept.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::output::HelmMajor;

/// Where charts come from and how helm reaches them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChartSource {
    pub location: Location,
    pub access: AccessArgs,
}

/// The repository.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// A classic chart repository (an `index.yaml` over http(s)), used with `--repo <url>` so no
    /// `helm repo add` state is kept.
    Repository { url: String },
    /// An OCI registry path: charts are `oci://<path>/<chart>`.
    Oci { base: String },
}

/// How helm reaches the repository: flags only, never a secret (credentials and CA are files,
/// written by [`super::access`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccessArgs {
    /// `--plain-http`: an OCI registry over HTTP ([`crate::model::chart_access::plain_http`]).
    pub plain_http: bool,
    /// `--insecure-skip-tls-verify`.
    pub insecure_skip_tls_verify: bool,
    /// `--ca-file`: the PEM CA to verify the repository with.
    pub ca_file: Option<PathBuf>,
    /// `--registry-config`: the registry configuration (`config.json`) with the credentials of
    /// an OCI registry.
    pub registry_config: Option<PathBuf>,
    /// `--repository-config`: a private repository config naming the chart repository
    /// [`REPOSITORY_NAME`] with its user and password ([`repo_add`]); charts are then
    /// `REPOSITORY_NAME/<chart>`, its index in a private cache beside it.
    pub repository_config: Option<PathBuf>,
}

/// The name of the chart repository in a private repository config.
pub const REPOSITORY_NAME: &str = "caapf";

impl ChartSource {
    /// `oci://…` is a registry; anything else is a repository URL. Reached without any access
    /// settings.
    pub fn parse(repository: &str) -> Self {
        let trimmed = repository.trim();
        let location = if trimmed.starts_with("oci://") {
            Location::Oci {
                base: trimmed.trim_end_matches('/').to_string(),
            }
        } else {
            Location::Repository {
                url: trimmed.to_string(),
            }
        };
        ChartSource {
            location,
            access: AccessArgs::default(),
        }
    }

    /// The same repository reached with `access`.
    pub fn with_access(mut self, access: AccessArgs) -> Self {
        self.access = access;
        self
    }

    /// The chart reference and the arguments that say where it lives and how to reach it.
    /// `--plain-http` and `--registry-config` concern OCI registries only; the TLS flags apply
    /// to both kinds.
    fn chart_args(&self, chart: &str) -> Vec<String> {
        let mut argv = match (&self.location, &self.access.repository_config) {
            (Location::Repository { .. }, Some(config)) => {
                let mut argv = vec![format!("{REPOSITORY_NAME}/{chart}")];
                argv.extend(repository_config_args(config));
                argv
            }
            (Location::Repository { url }, None) => {
                vec![chart.to_string(), "--repo".to_string(), url.clone()]
            }
            (Location::Oci { base }, _) => vec![format!("{base}/{chart}")],
        };
        let oci = matches!(self.location, Location::Oci { .. });
        if oci && self.access.plain_http {
            argv.push("--plain-http".to_string());
        }
        if self.access.insecure_skip_tls_verify {
            argv.push("--insecure-skip-tls-verify".to_string());
        }
        if let Some(file) = &self.access.ca_file {
            argv.extend(["--ca-file".to_string(), file.display().to_string()]);
        }
        if let (true, Some(file)) = (oci, &self.access.registry_config) {
            argv.extend(["--registry-config".to_string(), file.display().to_string()]);
        }
        argv
    }
}

/// `--repository-config` and the private index cache beside it.
fn repository_config_args(config: &Path) -> Vec<String> {
    vec![
        "--repository-config".to_string(),
        config.display().to_string(),
        "--repository-cache".to_string(),
        config.with_file_name("cache").display().to_string(),
    ]
}

/// `helm repo add --password-stdin`: writes the repository `source` names, with `username` and
/// the password helm reads from its standard input, into `source`'s private repository config
/// and fetches its index. `None` when `source` has no repository config.
pub fn repo_add(source: &ChartSource, username: &str) -> Option<Vec<String>> {
    let (Location::Repository { url }, Some(config)) =
        (&source.location, &source.access.repository_config)
    else {
        return None;
    };
    let mut argv = strings(&["repo", "add", REPOSITORY_NAME]);
    argv.extend([url.clone(), "--username".to_string(), username.to_string()]);
    argv.push("--password-stdin".to_string());
    argv.extend(repository_config_args(config));
    if source.access.insecure_skip_tls_verify {
        argv.push("--insecure-skip-tls-verify".to_string());
    }
    if let Some(file) = &source.access.ca_file {
        argv.extend(["--ca-file".to_string(), file.display().to_string()]);
    }
    Some(argv)
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// `helm version`, printing only the version (`v3.17.0`): works in helm 3 and 4.
pub fn version() -> Vec<String> {
    strings(&["version", "--template", "{{.Version}}"])
}

/// `helm show chart`: the chart's metadata; resolves the latest stable version when `version`
/// is `None` (helm skips pre-releases unless asked with `--devel`, which we never pass).
pub fn show_chart(source: &ChartSource, chart: &str, version: Option<&str>) -> Vec<String> {
    let mut argv = strings(&["show", "chart"]);
    argv.extend(source.chart_args(chart));
    if let Some(version) = version {
        argv.extend(["--version".to_string(), version.to_string()]);
    }
    argv
}

/// `helm list` of the named releases in `namespace`, in every state that blocks or needs an
/// upgrade, as JSON.
pub fn list(namespace: &str, releases: &[&str]) -> Vec<String> {
    let filter = format!("^({})$", releases.join("|"));
    let mut argv = strings(&["list", "--namespace", namespace, "--filter"]);
    argv.push(filter);
    argv.extend(strings(&[
        "--deployed",
        "--failed",
        "--pending",
        "--output",
        "json",
    ]));
    argv
}

/// `helm get values`: the values the release was installed or upgraded with, as JSON.
pub fn get_values(release: &str, namespace: &str) -> Vec<String> {
    strings(&[
        "get",
        "values",
        release,
        "--namespace",
        namespace,
        "--output",
        "json",
    ])
}

/// `helm pull`: downloads the chart archive at exactly `version` into `destination`.
pub fn pull(source: &ChartSource, chart: &str, version: &str, destination: &Path) -> Vec<String> {
    let mut argv = strings(&["pull"]);
    argv.extend(source.chart_args(chart));
    argv.extend([
        "--version".to_string(),
        version.to_string(),
        "--destination".to_string(),
        destination.display().to_string(),
    ]);
    argv
}

/// `helm template`: renders a local chart archive offline, without its hooks (Job objects
/// helm would run around an install; we only create the chart's objects).
pub fn template(release: &str, archive: &Path, namespace: &str, values_file: &Path) -> Vec<String> {
    vec![
        "template".to_string(),
        release.to_string(),
        archive.display().to_string(),
        "--namespace".to_string(),
        namespace.to_string(),
        "--no-hooks".to_string(),
        "--values".to_string(),
        values_file.display().to_string(),
    ]
}

/// Install or upgrade.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Install,
    Upgrade,
}

/// Everything an install or upgrade needs.
#[derive(Clone, Debug)]
pub struct Deploy<'a> {
    pub operation: Operation,
    pub release: &'a str,
    pub chart: &'a str,
    pub source: &'a ChartSource,
    pub namespace: &'a str,
    /// The exact chart version, as the chart writes it.
    pub version: &'a str,
    /// A values file; `None` installs with the chart's defaults.
    pub values_file: Option<&'a Path>,
    /// helm's own `--timeout` for waiting on resources.
    pub wait_timeout: Duration,
}

/// `helm install` / `helm upgrade` for `major`.
pub fn deploy(major: HelmMajor, d: &Deploy<'_>) -> Vec<String> {
    let mut argv = vec![
        match d.operation {
            Operation::Install => "install",
            Operation::Upgrade => "upgrade",
        }
        .to_string(),
        d.release.to_string(),
    ];
    argv.extend(d.source.chart_args(d.chart));
    argv.extend([
        "--namespace".to_string(),
        d.namespace.to_string(),
        "--version".to_string(),
        d.version.to_string(),
    ]);
    match d.operation {
        Operation::Install => argv.push("--create-namespace".to_string()),
        // Our values file is the whole truth: values dropped from the spec are dropped from the
        // release (helm would otherwise reuse the last values when no file is given).
        Operation::Upgrade => argv.push("--reset-values".to_string()),
    }
    if let Some(file) = d.values_file {
        argv.extend(["--values".to_string(), file.display().to_string()]);
    }
    argv.extend([
        "--wait".to_string(),
        "--timeout".to_string(),
        go_duration(d.wait_timeout),
    ]);
    match major {
        HelmMajor::V3 => argv.push("--atomic".to_string()),
        HelmMajor::V4 => {
            argv.push("--rollback-on-failure".to_string());
            if d.operation == Operation::Upgrade {
                argv.push("--server-side=true".to_string());
                argv.push("--force-conflicts".to_string());
            }
        }
    }
    argv
}

/// A Go duration helm parses (`300s`).
pub fn go_duration(duration: Duration) -> String {
    format!("{}s", duration.as_secs().max(1))
}

/// helm's own `--timeout`, shorter than the time after which we kill it, so that helm can roll
/// back cleanly instead of being killed mid-operation (which leaves a `pending-*` release).
pub fn wait_timeout(kill_after: Duration) -> Duration {
    let margin = Duration::from_secs(30);
    let three_quarters = kill_after.mul_f64(0.75);
    kill_after
        .checked_sub(margin)
        .map_or(three_quarters, |t| t.max(three_quarters))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    const REPO: &str = "https://rancher.github.io/fleet-helm-charts/";

    #[test]
    fn sources() {
        assert_eq!(
            ChartSource::parse(REPO).location,
            Location::Repository {
                url: REPO.to_string()
            }
        );
        assert_eq!(
            ChartSource::parse("oci://ghcr.io/rancher/fleet-charts/").location,
            Location::Oci {
                base: "oci://ghcr.io/rancher/fleet-charts".to_string()
            }
        );
        assert_eq!(ChartSource::parse(REPO).access, AccessArgs::default());
    }

    /// Every command that fetches a chart says how to reach the repository; secrets only as
    /// file paths.
    #[test]
    fn access_flags_on_every_command_that_fetches() {
        let files = AccessArgs {
            plain_http: false,
            insecure_skip_tls_verify: false,
            ca_file: Some(PathBuf::from("/h/access-x/ca.crt")),
            registry_config: Some(PathBuf::from("/h/access-x/config.json")),
            repository_config: None,
        };
        let basic_auth = AccessArgs {
            ca_file: Some(PathBuf::from("/h/access-x/ca.crt")),
            repository_config: Some(PathBuf::from("/h/access-x/repositories.yaml")),
            ..AccessArgs::default()
        };
        let plain = AccessArgs {
            plain_http: true,
            ..AccessArgs::default()
        };
        let insecure = AccessArgs {
            insecure_skip_tls_verify: true,
            ..AccessArgs::default()
        };
        let oci = |access: &AccessArgs| {
            ChartSource::parse("oci://127.0.0.1:5055/charts").with_access(access.clone())
        };
        let https = |access: &AccessArgs| ChartSource::parse(REPO).with_access(access.clone());
        let deploy_args = |source: &ChartSource| {
            deploy(
                HelmMajor::V4,
                &Deploy {
                    operation: Operation::Upgrade,
                    release: "fleet",
                    chart: "fleet",
                    source,
                    namespace: "ns",
                    version: "0.2.0",
                    values_file: None,
                    wait_timeout: Duration::from_secs(60),
                },
            )
            .join(" ")
        };
        let pull_args =
            |source: &ChartSource| pull(source, "fleet-agent", "0.2.0", Path::new("/d")).join(" ");
        let rows: Vec<(String, &str)> = vec![
            (
                show_chart(&oci(&plain), "fleet", None).join(" "),
                "show chart oci://127.0.0.1:5055/charts/fleet --plain-http",
            ),
            (
                show_chart(&oci(&files), "fleet", Some("0.2.0")).join(" "),
                "show chart oci://127.0.0.1:5055/charts/fleet --ca-file /h/access-x/ca.crt --registry-config /h/access-x/config.json --version 0.2.0",
            ),
            (
                show_chart(&oci(&insecure), "fleet", None).join(" "),
                "show chart oci://127.0.0.1:5055/charts/fleet --insecure-skip-tls-verify",
            ),
            (
                pull_args(&oci(&plain)),
                "pull oci://127.0.0.1:5055/charts/fleet-agent --plain-http --version 0.2.0 --destination /d",
            ),
            (
                pull_args(&oci(&files)),
                "pull oci://127.0.0.1:5055/charts/fleet-agent --ca-file /h/access-x/ca.crt --registry-config /h/access-x/config.json --version 0.2.0 --destination /d",
            ),
            (
                deploy_args(&oci(&plain)),
                "upgrade fleet oci://127.0.0.1:5055/charts/fleet --plain-http --namespace ns --version 0.2.0 --reset-values --wait --timeout 60s --rollback-on-failure --server-side=true --force-conflicts",
            ),
            (
                deploy_args(&oci(&files)),
                "upgrade fleet oci://127.0.0.1:5055/charts/fleet --ca-file /h/access-x/ca.crt --registry-config /h/access-x/config.json --namespace ns --version 0.2.0 --reset-values --wait --timeout 60s --rollback-on-failure --server-side=true --force-conflicts",
            ),
            // A chart repository: TLS flags, but no --plain-http (the URL's scheme says it) and
            // no registry configuration (helm reads it for OCI only).
            (
                show_chart(&https(&files), "fleet", None).join(" "),
                "show chart fleet --repo https://rancher.github.io/fleet-helm-charts/ --ca-file /h/access-x/ca.crt",
            ),
            (
                show_chart(&https(&plain), "fleet", None).join(" "),
                "show chart fleet --repo https://rancher.github.io/fleet-helm-charts/",
            ),
            // A user and password: the repository by name from the private repository config
            // `helm repo add --password-stdin` wrote; the password on no command line.
            (
                repo_add(&https(&basic_auth), "fleet")
                    .expect("repository config")
                    .join(" "),
                "repo add caapf https://rancher.github.io/fleet-helm-charts/ --username fleet --password-stdin --repository-config /h/access-x/repositories.yaml --repository-cache /h/access-x/cache --ca-file /h/access-x/ca.crt",
            ),
            (
                show_chart(&https(&basic_auth), "fleet", Some("0.2.0")).join(" "),
                "show chart caapf/fleet --repository-config /h/access-x/repositories.yaml --repository-cache /h/access-x/cache --ca-file /h/access-x/ca.crt --version 0.2.0",
            ),
            (
                deploy_args(&https(&basic_auth)),
                "upgrade fleet caapf/fleet --repository-config /h/access-x/repositories.yaml --repository-cache /h/access-x/cache --ca-file /h/access-x/ca.crt --namespace ns --version 0.2.0 --reset-values --wait --timeout 60s --rollback-on-failure --server-side=true --force-conflicts",
            ),
            (
                pull_args(&https(&insecure)),
                "pull fleet-agent --repo https://rancher.github.io/fleet-helm-charts/ --insecure-skip-tls-verify --version 0.2.0 --destination /d",
            ),
        ];
        for (argv, want) in rows {
            assert_eq!(argv, want);
        }
        assert_eq!(repo_add(&https(&files), "fleet"), None);
        assert_eq!(repo_add(&oci(&basic_auth), "fleet"), None);
    }

    #[test]
    fn read_only_commands() {
        let https = ChartSource::parse(REPO);
        let oci = ChartSource::parse("oci://registry.example.com/charts");
        let rows: Vec<(Vec<String>, &str)> = vec![
            (version(), "version --template {{.Version}}"),
            (
                show_chart(&https, "fleet-crd", None),
                "show chart fleet-crd --repo https://rancher.github.io/fleet-helm-charts/",
            ),
            (
                show_chart(&https, "fleet", Some("v0.13.1")),
                "show chart fleet --repo https://rancher.github.io/fleet-helm-charts/ --version v0.13.1",
            ),
            (
                show_chart(&oci, "fleet-crd", None),
                "show chart oci://registry.example.com/charts/fleet-crd",
            ),
            (
                show_chart(&oci, "fleet", Some("0.14.0-rc.1")),
                "show chart oci://registry.example.com/charts/fleet --version 0.14.0-rc.1",
            ),
            (
                list("cattle-fleet-system", &["fleet-crd", "fleet"]),
                "list --namespace cattle-fleet-system --filter ^(fleet-crd|fleet)$ --deployed --failed --pending --output json",
            ),
            (
                get_values("fleet", "cattle-fleet-system"),
                "get values fleet --namespace cattle-fleet-system --output json",
            ),
        ];
        for (argv, want) in rows {
            assert_eq!(argv.join(" "), want);
        }
    }

    #[test]
    fn install_and_upgrade_for_each_helm_and_source() {
        let https = ChartSource::parse(REPO);
        let oci = ChartSource::parse("oci://registry.example.com/charts");
        let values = PathBuf::from("/tmp/caapf-values-x/values.json");
        let base = |operation, source, values_file| Deploy {
            operation,
            release: "fleet",
            chart: "fleet",
            source,
            namespace: "cattle-fleet-system",
            version: "0.13.1",
            values_file,
            wait_timeout: Duration::from_secs(270),
        };
        let rows = [
            (
                HelmMajor::V3,
                base(Operation::Install, &https, Some(values.as_path())),
                "install fleet fleet --repo https://rancher.github.io/fleet-helm-charts/ --namespace cattle-fleet-system --version 0.13.1 --create-namespace --values /tmp/caapf-values-x/values.json --wait --timeout 270s --atomic",
            ),
            (
                HelmMajor::V4,
                base(Operation::Install, &https, Some(values.as_path())),
                "install fleet fleet --repo https://rancher.github.io/fleet-helm-charts/ --namespace cattle-fleet-system --version 0.13.1 --create-namespace --values /tmp/caapf-values-x/values.json --wait --timeout 270s --rollback-on-failure",
            ),
            (
                HelmMajor::V3,
                base(Operation::Upgrade, &https, Some(values.as_path())),
                "upgrade fleet fleet --repo https://rancher.github.io/fleet-helm-charts/ --namespace cattle-fleet-system --version 0.13.1 --reset-values --values /tmp/caapf-values-x/values.json --wait --timeout 270s --atomic",
            ),
            (
                HelmMajor::V4,
                base(Operation::Upgrade, &https, Some(values.as_path())),
                "upgrade fleet fleet --repo https://rancher.github.io/fleet-helm-charts/ --namespace cattle-fleet-system --version 0.13.1 --reset-values --values /tmp/caapf-values-x/values.json --wait --timeout 270s --rollback-on-failure --server-side=true --force-conflicts",
            ),
            (
                HelmMajor::V4,
                base(Operation::Install, &oci, None),
                "install fleet oci://registry.example.com/charts/fleet --namespace cattle-fleet-system --version 0.13.1 --create-namespace --wait --timeout 270s --rollback-on-failure",
            ),
            (
                HelmMajor::V3,
                base(Operation::Upgrade, &oci, None),
                "upgrade fleet oci://registry.example.com/charts/fleet --namespace cattle-fleet-system --version 0.13.1 --reset-values --wait --timeout 270s --atomic",
            ),
        ];
        for (major, deploy_args, want) in rows {
            assert_eq!(deploy(major, &deploy_args).join(" "), want, "{major:?}");
        }
    }

    #[test]
    fn helm_waits_less_than_we_do() {
        let rows = [(300, 270), (120, 90), (60, 45), (10, 7), (2, 1)];
        for (kill, want) in rows {
            assert_eq!(
                wait_timeout(Duration::from_secs(kill)).as_secs(),
                want,
                "kill after {kill}s"
            );
        }
        assert_eq!(go_duration(Duration::from_millis(1500)), "1s");
        assert_eq!(go_duration(Duration::ZERO), "1s");
    }
}
