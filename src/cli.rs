//! Command line: subcommands and the manager flags.
//!
//! Flags follow Cluster API conventions, because the CAPI Operator renders Go-controller-style
//! flags onto the `manager` container. Every flag it renders is accepted, in both `--flag=value`
//! and `--flag value` forms; flags we cannot honour are logged as ignored, and unknown flags are
//! dropped with a warning instead of failing the start ([`split_unknown_flags`]).

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};

pub use crate::api::duration::parse_duration;

/// Cluster API add-on provider for Fleet.
#[derive(Parser, Debug)]
// Go's flag package lets the last occurrence of a flag win; so do we.
#[command(
    name = "caapf",
    version,
    about,
    args_conflicts_with_subcommands = true,
    args_override_self = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Manager flags, when no subcommand is given (`caapf` = `caapf run`).
    #[command(flatten)]
    pub manager: ManagerFlags,
}

/// Subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the manager (the default).
    #[command(args_override_self = true)]
    Run(Box<ManagerFlags>),
    /// Print the CustomResourceDefinitions this provider defines, as YAML.
    Crd,
    /// Remove this provider's finalizer from every CAPI Cluster and ClusterClass (and CAAPF's
    /// legacy one from Fleet ClusterGroups); run it when uninstalling the provider.
    Cleanup,
    /// Print the object graph of a CAPI Cluster and the Fleet Bundles that would move it into
    /// itself (docs/self-managed.md). Reads the management cluster; writes nothing.
    MovePreview(MovePreviewArgs),
    /// Print the `rolloutStrategy` for fleet.yaml or a HelmOp from the waves of
    /// `spec.cluster.rollout` (docs/rollout.md), read from the FleetAddonConfig of the current
    /// kubeconfig's cluster or from a file.
    RolloutStrategy(RolloutStrategyArgs),
}

/// Arguments of `caapf rollout-strategy`.
#[derive(Args, Debug, Clone)]
pub struct RolloutStrategyArgs {
    /// A FleetAddonConfig as YAML, instead of the cluster's.
    #[arg(short = 'f', long = "filename")]
    pub file: Option<std::path::PathBuf>,
}

/// Arguments of `caapf move-preview`.
#[derive(Args, Debug, Clone)]
pub struct MovePreviewArgs {
    /// The Cluster, as `<namespace>/<name>`.
    pub cluster: String,
    /// `text`: the graph and a summary of the Bundles; `yaml`: the Bundles themselves (they
    /// contain the Cluster's Secrets).
    #[arg(long, value_enum, default_value_t = PreviewOutput::Text)]
    pub output: PreviewOutput,
}

/// Output of `caapf move-preview`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Default)]
pub enum PreviewOutput {
    #[default]
    Text,
    Yaml,
}

impl Cli {
    /// Parses `argv`, dropping unknown flags; returns the CLI and the dropped flags (to log once
    /// logging is set up).
    pub fn parse_tolerant<I, T>(argv: I) -> Result<(Self, Vec<String>), clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString>,
    {
        let argv: Vec<String> = argv
            .into_iter()
            .map(|a| a.into().to_string_lossy().into_owned())
            .collect();
        let (kept, dropped) = split_unknown_flags(&Cli::command(), &argv);
        Ok((Cli::try_parse_from(kept)?, dropped))
    }

    /// The manager flags, wherever they were given.
    pub fn manager_flags(&self) -> &ManagerFlags {
        match &self.command {
            Some(Command::Run(flags)) => flags,
            _ => &self.manager,
        }
    }
}

/// Log output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Default)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Flags of the manager.
#[derive(Args, Debug, Clone)]
pub struct ManagerFlags {
    /// Use leader election (a coordination.k8s.io Lease) so only one replica reconciles.
    #[arg(long, env = "CAAPF_LEADER_ELECT", num_args = 0..=1, default_missing_value = "true", default_value = "false", value_parser = parse_bool)]
    pub leader_elect: bool,

    /// How long a lease is valid without renewal (Go duration, e.g. 15s).
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub leader_elect_lease_duration: Duration,

    /// How long the leader keeps trying to renew before giving up leadership.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub leader_elect_renew_deadline: Duration,

    /// How often candidates try to acquire or renew the lease.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub leader_elect_retry_period: Duration,

    /// Namespace of the leader-election Lease (default: the pod's namespace).
    #[arg(long, env = "POD_NAMESPACE")]
    pub leader_election_namespace: Option<String>,

    /// Name of the leader-election Lease.
    #[arg(long, default_value = "caapf-leader-election")]
    pub leader_election_id: String,

    /// Address of the Prometheus `/metrics` endpoint ("0" disables it). The CAPI Operator's
    /// `--metrics-bind-addr` and `--diagnostics-address` set the same thing.
    #[arg(long, visible_aliases = ["metrics-bind-addr", "diagnostics-address"], default_value = ":8080")]
    pub metrics_bind_address: String,

    /// Accepted for CAPI Operator compatibility: metrics are always served over plain HTTP.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_parser = parse_bool)]
    pub insecure_diagnostics: Option<bool>,

    /// Address of `/healthz` and `/readyz`.
    #[arg(long, visible_alias = "health-addr", default_value = ":9440")]
    pub health_probe_bind_address: String,

    /// Port of the Runtime SDK extension (HTTPS).
    #[arg(long, default_value_t = 9443)]
    pub webhook_port: u16,

    /// Address the Runtime SDK extension listens on (controller-runtime's `webhook.host`).
    /// Empty: every interface.
    #[arg(long, default_value = "")]
    pub webhook_host: String,

    /// Directory holding `tls.crt` and `tls.key` for the Runtime SDK extension.
    #[arg(long, default_value = "/tmp/k8s-webhook-server/serving-certs")]
    pub webhook_cert_dir: String,

    /// Interval at which every object is reconciled again even without changes (Go duration).
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    pub sync_period: Duration,

    /// Self-managed Clusters: how long a move waits for Fleet to report the moved objects
    /// ready on the workload cluster before it fails and unpauses the source (Go duration;
    /// docs/self-managed.md).
    #[arg(long, env = "CAAPF_MOVE_TARGET_TIMEOUT", default_value = "30m", value_parser = parse_duration)]
    pub move_target_timeout: Duration,

    /// Self-managed Clusters: how long a move waits for `clusterctl.cluster.x-k8s.io/block-move`
    /// annotations to go before it fails and unpauses the source (Go duration).
    #[arg(long, env = "CAAPF_MOVE_UNBLOCK_TIMEOUT", default_value = "10m", value_parser = parse_duration)]
    pub move_unblock_timeout: Duration,

    /// Self-managed Clusters: how long a move waits for Fleet to report the resumed copies
    /// ready before it is marked Stalled (it keeps waiting; the source stays paused and fenced;
    /// Go duration).
    #[arg(long, env = "CAAPF_MOVE_RESUME_TIMEOUT", default_value = "30m", value_parser = parse_duration)]
    pub move_resume_timeout: Duration,

    /// Only watch CAPI objects in this namespace (default: all namespaces).
    #[arg(long, env = "CAAPF_NAMESPACE")]
    pub namespace: Option<String>,

    /// Only act on CAPI objects labelled `cluster.x-k8s.io/watch-filter=<value>`.
    #[arg(long, env = "CAAPF_WATCH_FILTER")]
    pub watch_filter: Option<String>,

    /// BeforeClusterDelete's failure policy in discovery: `Ignore` (an unreachable extension
    /// never blocks a deletion, and a transport error ends a teardown) or `Fail` (fail-closed:
    /// Cluster API retries until the extension answers; docs/lifecycle.md).
    #[arg(long, env = "CAAPF_BEFORE_CLUSTER_DELETE_FAILURE_POLICY", default_value = "Ignore", value_parser = ["Ignore", "Fail"])]
    pub before_cluster_delete_failure_policy: String,

    /// Accepted for CAPI Operator compatibility; profiling is not served.
    #[arg(long)]
    pub profiler_address: Option<String>,

    /// Log verbosity, as Go controllers count it: 0-3 info, 4 debug, 5 and above trace.
    #[arg(
        short = 'v',
        long = "v",
        visible_alias = "verbosity",
        default_value_t = 0
    )]
    pub verbosity: u8,

    /// Feature gates, `Name=true,...` as Cluster API providers take them. Defined:
    /// `SelfManagedMove` (experimental, off: docs/self-managed.md). Unknown gates are ignored
    /// with a warning.
    #[arg(long)]
    pub feature_gates: Option<String>,

    /// Maximum sustained requests per second of the controllers to the API server
    /// (client-side token bucket, as client-go's QPS). 0 or negative: no client-side limit
    /// (the default, as controller-runtime's since v0.21: the API server's Priority and
    /// Fairness queues this provider's requests in a flow of their own and answers 429 with
    /// Retry-After when its share is used, which the client honours; see
    /// docs/performance.md). The Lease and the Runtime SDK hooks are never limited.
    #[arg(long, default_value_t = -1.0, allow_negative_numbers = true)]
    pub kube_api_qps: f32,

    /// Maximum burst of requests to the API server (the token bucket's size), with a positive
    /// `--kube-api-qps`; 200 as Cluster API's own managers (v1.13).
    #[arg(long, default_value_t = 200)]
    pub kube_api_burst: u32,

    /// Log format.
    #[arg(long, env = "CAAPF_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// The helm binary used to install Fleet (helm 3.8 or later, or helm 4).
    #[arg(long, env = "HELM_BIN", default_value = "helm")]
    pub helm_binary: String,

    /// Kill a helm command after this long (Go duration). helm itself is told to give up
    /// waiting somewhat earlier, so it can roll back cleanly.
    #[arg(long, env = "CAAPF_HELM_TIMEOUT", default_value = "5m", value_parser = parse_duration)]
    pub helm_timeout: Duration,

    /// Directory for helm's cache, configuration and data (e.g. a registry login in
    /// `config/registry/config.json`). Default: a private temporary directory.
    #[arg(long, env = "CAAPF_HELM_HOME")]
    pub helm_home: Option<std::path::PathBuf>,

    /// Kubeconfig for helm. Default: `--kubeconfig`, else helm's own resolution
    /// (`KUBECONFIG`, then the in-cluster service account).
    #[arg(long, env = "CAAPF_HELM_KUBECONFIG")]
    pub helm_kubeconfig: Option<std::path::PathBuf>,

    /// Kubeconfig of the management cluster, as controller-runtime managers take it. Default:
    /// `KUBECONFIG`, `~/.kube/config`, then the in-cluster service account.
    #[arg(long)]
    pub kubeconfig: Option<std::path::PathBuf>,
}

impl Default for ManagerFlags {
    fn default() -> Self {
        #[derive(Parser)]
        struct Wrapper {
            #[command(flatten)]
            flags: ManagerFlags,
        }
        Wrapper::parse_from(["caapf"]).flags
    }
}

impl ManagerFlags {
    /// The namespace to watch, `None` for all (`--namespace=` means all, as in CAPI).
    pub fn watch_namespace(&self) -> Option<&str> {
        self.namespace.as_deref().filter(|ns| !ns.is_empty())
    }

    /// The `--watch-filter` value, `None` when unset or empty (`--watch-filter=` means no
    /// filter, as in CAPI).
    pub fn watch_filter_label(&self) -> Option<&str> {
        self.watch_filter.as_deref().filter(|f| !f.is_empty())
    }

    /// Whether feature gate `name` is on (`--feature-gates=name=true`; off when unset).
    pub fn feature_enabled(&self, name: &str) -> bool {
        self.gates()
            .filter(|(gate, _)| *gate == name)
            .last()
            .is_some_and(|(_, on)| on)
    }

    fn gates(&self) -> impl Iterator<Item = (&str, bool)> {
        self.feature_gates
            .as_deref()
            .unwrap_or_default()
            .split(',')
            .filter_map(|pair| pair.split_once('='))
            .map(|(name, value)| (name.trim(), parse_bool(value.trim()).unwrap_or(false)))
    }

    /// Flags that are accepted but have no effect, with the reason (logged at start).
    pub fn ignored(&self) -> Vec<String> {
        let mut ignored = Vec::new();
        if let Some(addr) = &self.profiler_address {
            ignored.push(format!(
                "--profiler-address={addr}: profiling endpoints are not served"
            ));
        }
        for gate in self
            .gates()
            .filter(|(name, _)| !FEATURE_GATES.contains(name))
        {
            ignored.push(format!(
                "--feature-gates {}: unknown gate (defined: {})",
                gate.0,
                FEATURE_GATES.join(", ")
            ));
        }
        if self.insecure_diagnostics == Some(false) {
            ignored.push(
                "--insecure-diagnostics=false: metrics are served over plain HTTP; restrict access with a NetworkPolicy".to_string(),
            );
        }
        ignored
    }
}

/// Experimental: the move controller of self-managed Clusters (docs/self-managed.md). Off unless
/// `--feature-gates=SelfManagedMove=true`.
pub const SELF_MANAGED_MOVE: &str = "SelfManagedMove";

/// The feature gates this provider defines.
pub const FEATURE_GATES: [&str; 1] = [SELF_MANAGED_MOVE];

/// Parses Go-style booleans (`true`, `false`, `1`, `0`, `t`, `f`, any case).
pub fn parse_bool(text: &str) -> Result<bool, String> {
    match text.to_ascii_lowercase().as_str() {
        "true" | "t" | "1" => Ok(true),
        "false" | "f" | "0" => Ok(false),
        _ => Err(format!("{text:?} is not a boolean (true or false)")),
    }
}

/// Splits `argv` into what clap knows and the unknown long flags (with the value that follows
/// an unknown `--flag value`). Go binaries also accept a single dash for long flags (`-v=2`,
/// `-leader-elect`); those are rewritten to two dashes.
pub fn split_unknown_flags(command: &clap::Command, argv: &[String]) -> (Vec<String>, Vec<String>) {
    let mut known_long: Vec<String> = Vec::new();
    let mut subcommands: Vec<String> = Vec::new();
    collect_flags(command, &mut known_long, &mut subcommands);

    let mut kept = Vec::with_capacity(argv.len());
    let mut dropped = Vec::new();
    let mut iter = argv.iter().peekable();
    if let Some(program) = iter.next() {
        kept.push(program.clone());
    }
    while let Some(arg) = iter.next() {
        if arg == "--" {
            kept.push(arg.clone());
            kept.extend(iter.by_ref().cloned());
            break;
        }
        let long = if let Some(rest) = arg.strip_prefix("--") {
            Some(rest.to_string())
        } else if let Some(rest) = arg.strip_prefix('-') {
            // `-v=2` and `-v 2` are clap's short flag; `-leader-elect` is Go's long flag.
            let name = rest.split('=').next().unwrap_or_default();
            (name.chars().count() > 1).then(|| rest.to_string())
        } else {
            None
        };
        let Some(long) = long else {
            kept.push(arg.clone());
            continue;
        };
        let name = long.split('=').next().unwrap_or_default();
        if known_long.iter().any(|k| k == name) {
            kept.push(format!("--{long}"));
            continue;
        }
        // Unknown: drop it, and its value when given as a separate word.
        let mut text = format!("--{long}");
        if !long.contains('=')
            && let Some(next) = iter.peek()
            && !next.starts_with('-')
            && !subcommands.iter().any(|s| s == *next)
        {
            text.push(' ');
            text.push_str(next);
            iter.next();
        }
        dropped.push(text);
    }
    (kept, dropped)
}

fn collect_flags(command: &clap::Command, long: &mut Vec<String>, subcommands: &mut Vec<String>) {
    for arg in command.get_arguments() {
        if let Some(name) = arg.get_long() {
            long.push(name.to_string());
        }
        long.extend(
            arg.get_all_aliases()
                .unwrap_or_default()
                .iter()
                .map(|a| a.to_string()),
        );
    }
    long.extend(["help".to_string(), "version".to_string()]);
    for sub in command.get_subcommands() {
        subcommands.push(sub.get_name().to_string());
        collect_flags(sub, long, subcommands);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> (Cli, Vec<String>) {
        let argv = std::iter::once("caapf").chain(args.iter().copied());
        Cli::parse_tolerant(argv).unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    #[test]
    fn defaults_follow_capi_conventions() {
        let (cli, dropped) = parse(&[]);
        assert!(cli.command.is_none());
        assert!(dropped.is_empty());
        let f = cli.manager_flags();
        assert!(!f.leader_elect);
        assert_eq!(f.leader_elect_lease_duration, Duration::from_secs(15));
        assert_eq!(f.leader_elect_renew_deadline, Duration::from_secs(10));
        assert_eq!(f.leader_elect_retry_period, Duration::from_secs(2));
        assert_eq!(f.webhook_port, 9443);
        assert_eq!(f.webhook_cert_dir, "/tmp/k8s-webhook-server/serving-certs");
        assert_eq!(f.health_probe_bind_address, ":9440");
        assert_eq!(f.metrics_bind_address, ":8080");
        assert_eq!(f.sync_period, Duration::from_secs(600));
        assert_eq!(f.move_target_timeout, Duration::from_secs(30 * 60));
        assert_eq!(f.move_unblock_timeout, Duration::from_secs(10 * 60));
        assert_eq!(f.move_resume_timeout, Duration::from_secs(30 * 60));
        assert_eq!(f.verbosity, 0);
        assert_eq!(f.helm_timeout, Duration::from_secs(300));
        assert_eq!(f.helm_home, None);
        assert_eq!(f.helm_kubeconfig, None);
        // No client-side limit unless asked (docs/performance.md says why).
        assert_eq!(f.kube_api_qps, -1.0);
        assert!(
            !crate::client::RateLimitLayer::from_flags(f.kube_api_qps, f.kube_api_burst).limits()
        );
        assert_eq!(f.kube_api_burst, 200);
    }

    #[test]
    fn helm_flags() {
        let (cli, _) = parse(&[
            "--helm-timeout=90s",
            "--helm-home",
            "/var/lib/caapf/helm",
            "--helm-kubeconfig=/etc/kube/config",
            "--helm-binary=/usr/local/bin/helm",
        ]);
        let f = cli.manager_flags();
        assert_eq!(f.helm_timeout, Duration::from_secs(90));
        assert_eq!(
            f.helm_home.as_deref(),
            Some(std::path::Path::new("/var/lib/caapf/helm"))
        );
        assert_eq!(
            f.helm_kubeconfig.as_deref(),
            Some(std::path::Path::new("/etc/kube/config"))
        );
        assert_eq!(f.helm_binary, "/usr/local/bin/helm");
    }

    #[test]
    fn operator_flags_in_both_forms() {
        // Every flag the CAPI Operator renders, once as --flag=value and once as --flag value.
        let equals = [
            "--leader-elect=true",
            "--leader-elect-lease-duration=30s",
            "--leader-elect-renew-deadline=20s",
            "--leader-elect-retry-period=5s",
            "--metrics-bind-addr=:8081",
            "--diagnostics-address=:8443",
            "--insecure-diagnostics=true",
            "--health-addr=:9441",
            "--webhook-port=9444",
            "--webhook-cert-dir=/certs",
            "--sync-period=5m",
            "--namespace=capi-clusters",
            "--profiler-address=localhost:6060",
            "--v=4",
            "--feature-gates=MachinePool=true",
            "--kube-api-qps=50",
            "--kube-api-burst=100",
        ];
        let separate: Vec<String> = equals
            .iter()
            .flat_map(|a| {
                let (k, v) = a.split_once('=').unwrap_or((a, ""));
                [k.to_string(), v.to_string()]
            })
            .collect();
        for args in [
            equals.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            separate,
        ] {
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            let (cli, dropped) = parse(&refs);
            assert!(dropped.is_empty(), "{dropped:?}");
            let f = cli.manager_flags();
            assert!(f.leader_elect);
            assert_eq!(f.leader_elect_lease_duration, Duration::from_secs(30));
            assert_eq!(f.leader_elect_renew_deadline, Duration::from_secs(20));
            assert_eq!(f.leader_elect_retry_period, Duration::from_secs(5));
            // The later of the two aliases wins, as with Go's flag package.
            assert_eq!(f.metrics_bind_address, ":8443");
            assert_eq!(f.insecure_diagnostics, Some(true));
            assert_eq!(f.health_probe_bind_address, ":9441");
            assert_eq!(f.webhook_port, 9444);
            assert_eq!(f.webhook_cert_dir, "/certs");
            assert_eq!(f.sync_period, Duration::from_secs(300));
            assert_eq!(f.namespace.as_deref(), Some("capi-clusters"));
            assert_eq!(f.verbosity, 4);
            assert_eq!(f.kube_api_qps, 50.0);
            assert_eq!(f.kube_api_burst, 100);
            assert_eq!(f.ignored().len(), 2, "{:?}", f.ignored());
        }
    }

    #[test]
    fn feature_gates_are_off_unless_set_and_unknown_ones_are_reported() {
        let rows: [(&[&str], bool, usize); 5] = [
            (&[], false, 0),
            (&["--feature-gates=SelfManagedMove=true"], true, 0),
            (&["--feature-gates=SelfManagedMove=false"], false, 0),
            (
                &["--feature-gates=MachinePool=true,SelfManagedMove=true"],
                true,
                1,
            ),
            (&["--feature-gates=SelfManagedMove=yes"], false, 0),
        ];
        for (args, on, unknown) in rows {
            let (cli, _) = parse(args);
            let flags = cli.manager_flags();
            assert_eq!(flags.feature_enabled(SELF_MANAGED_MOVE), on, "{args:?}");
            assert_eq!(
                flags.ignored().len(),
                unknown,
                "{args:?}: {:?}",
                flags.ignored()
            );
        }
    }

    #[test]
    fn boolean_flag_without_value_and_go_single_dash() {
        let (cli, _) = parse(&[
            "-leader-elect",
            "-v=5",
            "--leader-elect-lease-duration",
            "1m",
        ]);
        let f = cli.manager_flags();
        assert!(f.leader_elect);
        assert_eq!(f.verbosity, 5);
        assert_eq!(f.leader_elect_lease_duration, Duration::from_secs(60));
    }

    #[test]
    fn unknown_flags_are_dropped_not_fatal() {
        let (cli, dropped) = parse(&[
            "--leader-elect",
            "--some-future-flag=1",
            "--another",
            "value",
            "--v=2",
        ]);
        assert_eq!(dropped, ["--some-future-flag=1", "--another value"]);
        assert!(cli.manager_flags().leader_elect);
        assert_eq!(cli.manager_flags().verbosity, 2);
    }

    #[test]
    fn run_subcommand_takes_the_same_flags() {
        let (cli, _) = parse(&["run", "--webhook-port", "10443", "--watch-filter=team-a"]);
        assert!(matches!(cli.command, Some(Command::Run(_))));
        assert_eq!(cli.manager_flags().webhook_port, 10443);
        assert_eq!(cli.manager_flags().watch_filter.as_deref(), Some("team-a"));
        assert_eq!(cli.manager_flags().watch_filter_label(), Some("team-a"));
        // clusterctl renders `--watch-filter=${CAAPF_WATCH_FILTER:=}` as an empty value.
        let (cli, _) = parse(&["--watch-filter="]);
        assert_eq!(cli.manager_flags().watch_filter_label(), None);
        let (cli, _) = parse(&["--kube-api-qps=-1"]);
        assert_eq!(cli.manager_flags().kube_api_qps, -1.0);
        let (cli, _) = parse(&["crd"]);
        assert!(matches!(cli.command, Some(Command::Crd)));
    }

    #[test]
    fn bad_values_are_reported() {
        let argv = ["caapf", "--sync-period=soon"];
        let err = Cli::parse_tolerant(argv).expect_err("bad duration must fail");
        assert!(err.to_string().contains("not a duration"), "{err}");
        let err = Cli::parse_tolerant(["caapf", "--leader-elect=maybe"]).expect_err("bad bool");
        assert!(err.to_string().contains("not a boolean"), "{err}");
    }

    #[test]
    fn move_preview_takes_a_cluster_and_an_output() {
        let (cli, dropped) =
            Cli::parse_tolerant(["caapf", "move-preview", "default/c1", "--output", "yaml"])
                .unwrap();
        assert!(dropped.is_empty(), "{dropped:?}");
        match cli.command {
            Some(Command::MovePreview(args)) => {
                assert_eq!(args.cluster, "default/c1");
                assert_eq!(args.output, PreviewOutput::Yaml);
            }
            other => panic!("{other:?}"),
        }
        let (cli, _) = Cli::parse_tolerant(["caapf", "move-preview", "ns/c"]).unwrap();
        assert!(matches!(
            cli.command,
            Some(Command::MovePreview(MovePreviewArgs {
                output: PreviewOutput::Text,
                ..
            }))
        ));
    }
}
