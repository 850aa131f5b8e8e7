//! `kube-sandbox`: runs the in-memory Kubernetes API server until SIGINT/SIGTERM.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use kube_sandbox::{CrdSet, Sandbox, SandboxOptions};

/// In-memory Kubernetes API server for tests and demos (plain HTTP on 127.0.0.1, or HTTPS with
/// `--tls`).
#[derive(Debug, Parser)]
#[command(name = "kube-sandbox", version)]
struct Args {
    /// Listen address; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:0")]
    addr: SocketAddr,
    /// Where to write a kubeconfig whose current context targets the sandbox.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// CRD sets to preload: capi, bootstrap, fleet, provider (default: all), or none.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "capi,bootstrap,fleet,provider",
        value_parser = parse_crd_set
    )]
    crds: Vec<Option<CrdSet>>,
    /// Keep objects across restarts in DIR/snapshot.json.
    #[arg(long)]
    snapshot_dir: Option<PathBuf>,
    /// Load every CustomResourceDefinition in the YAML/JSON files of DIR (repeatable), e.g.
    /// the upstream CRDs of Cluster API, CAPRKE2 or Fleet (with `--crds none`, only these).
    #[arg(long = "crd-dir", value_name = "DIR")]
    crd_dirs: Vec<PathBuf>,
    /// Load the snapshot but never write it (every run starts from the same objects).
    #[arg(long, requires = "snapshot_dir")]
    snapshot_read_only: bool,
    /// Accept custom resources that do not match their CRD schema (types, required, enum,
    /// bounds, pattern, format, x-kubernetes-validations). Validation is on by default, as on a
    /// real server.
    #[arg(long, conflicts_with = "validate")]
    no_validate: bool,
    /// Validation is the default; kept so that existing command lines keep working.
    #[arg(long, hide = true)]
    validate: bool,
    /// Refuse streaming lists (`sendInitialEvents=true`) with the 422 of a kube-apiserver whose
    /// WatchList feature gate is off (1.33 and before 1.32, or an aggregated API server).
    #[arg(long)]
    no_watch_list: bool,
    /// Serve HTTPS with a CA and certificate generated at start (the kubeconfig carries the CA
    /// as certificate-authority-data). kubectl and helm send a kubeconfig's token only over
    /// TLS; over plain HTTP they are always the admin.
    #[arg(long)]
    tls: bool,
    /// Seconds between periodic watch bookmarks.
    #[arg(long, default_value_t = 30.0)]
    bookmark_interval_seconds: f64,
}

/// A CRD set name, or `none` (no set).
fn parse_crd_set(s: &str) -> Result<Option<CrdSet>, String> {
    match s.trim() {
        "none" | "" => Ok(None),
        other => other.parse().map(Some),
    }
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let opts = SandboxOptions {
        crds: args.crds.into_iter().flatten().collect(),
        crd_dirs: args.crd_dirs,
        snapshot_dir: args.snapshot_dir,
        snapshot_read_only: args.snapshot_read_only,
        addr: args.addr,
        bookmark_interval: Duration::from_secs_f64(args.bookmark_interval_seconds.max(0.05)),
        validate_custom_resources: !args.no_validate,
        watch_list: !args.no_watch_list,
        tls: args.tls,
        ..SandboxOptions::default()
    };
    let sandbox = match Sandbox::start_with(opts).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("kube-sandbox: {e}");
            std::process::exit(1);
        }
    };
    if let Some(path) = &args.kubeconfig
        && let Err(e) = sandbox.write_kubeconfig(path)
    {
        eprintln!("kube-sandbox: writing kubeconfig {}: {e}", path.display());
        std::process::exit(1);
    }
    println!("kube-sandbox listening on {}", sandbox.url());
    let _ = std::io::stdout().flush();
    wait_for_signal().await;
    sandbox.shutdown().await;
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("kube-sandbox: installing SIGTERM handler: {e}");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
