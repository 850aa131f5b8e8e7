//! The manager: connects to the API server, serves health and metrics, and runs the
//! controllers until SIGTERM/SIGINT.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use kube::Client;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::cli::ManagerFlags;
use crate::context::Context;
use crate::controllers::{config_watch, fleet_config, import};
use crate::{Error, Result};
use crate::{hooks, server};

/// Runs the manager until it is asked to stop (or a component fails).
pub async fn run(flags: ManagerFlags) -> Result<()> {
    for ignored in flags.ignored() {
        tracing::info!(flag = %ignored, "flag accepted but ignored");
    }
    let client = connect().await?;
    let shutdown = CancellationToken::new();
    spawn_signal_handler(shutdown.clone());
    run_with_client(client, flags, shutdown).await
}

/// Runs the manager with an existing client until `shutdown` is cancelled.
pub async fn run_with_client(
    client: Client,
    flags: ManagerFlags,
    shutdown: CancellationToken,
) -> Result<()> {
    Manager::start(client, flags, shutdown).await?.wait().await
}

/// A running manager: the shared context and its tasks.
pub struct Manager {
    pub ctx: Arc<Context>,
    /// Where `/healthz` and `/readyz` are served, when enabled.
    pub health_address: Option<std::net::SocketAddr>,
    /// Where `/metrics` is served, when enabled.
    pub metrics_address: Option<std::net::SocketAddr>,
    /// Where the Runtime SDK extension is served (HTTPS).
    pub webhook_address: std::net::SocketAddr,
    tasks: JoinSet<()>,
    /// Tasks that stop by themselves on `shutdown` and must not be aborted: the Fleet
    /// controller lets a running helm command finish (bounded), so no release is left
    /// `pending-upgrade`.
    graceful: JoinSet<()>,
}

impl Manager {
    /// Starts serving health and metrics and the controllers; returns once listening.
    pub async fn start(
        client: Client,
        flags: ManagerFlags,
        shutdown: CancellationToken,
    ) -> Result<Self> {
        let (config_tx, config_rx) = config_watch::channel();
        let ctx = Arc::new(Context::new(
            client.clone(),
            flags,
            config_rx,
            shutdown.clone(),
        ));

        let (health_address, metrics_address) = server::serve(
            server::parse_bind_address(&ctx.flags.health_probe_bind_address)?,
            server::parse_bind_address(&ctx.flags.metrics_bind_address)?,
            ctx.readiness.clone(),
            ctx.metrics.clone(),
            shutdown,
        )
        .await?;

        // The Runtime SDK extension runs on every replica (not only the leader): CAPI calls any
        // endpoint of the Service, and the hooks are stateless.
        let webhook_host: IpAddr = match ctx.flags.webhook_host.trim() {
            "" => IpAddr::from([0, 0, 0, 0]),
            host => host.parse().map_err(|err| {
                Error::InvalidConfig(format!(
                    "--webhook-host {host:?}: {err} (expected an IP address)"
                ))
            })?,
        };
        let webhook_address = hooks::server::serve(
            ctx.clone(),
            SocketAddr::new(webhook_host, ctx.flags.webhook_port),
            ctx.flags.webhook_cert_dir.clone(),
            hooks::server::ServerOptions::default(),
        )
        .await?;

        let mut tasks = JoinSet::new();
        tasks.spawn(config_watch::run(client, config_tx, ctx.readiness.clone()));
        tasks.spawn(import::run(ctx.clone()));
        let mut graceful = JoinSet::new();
        graceful.spawn(fleet_config::run(ctx.clone()));
        Ok(Self {
            ctx,
            health_address,
            metrics_address,
            webhook_address,
            tasks,
            graceful,
        })
    }

    /// Runs until shutdown is requested or a component ends.
    pub async fn wait(mut self) -> Result<()> {
        let shutdown = self.ctx.shutdown.clone();
        let ended = tokio::select! {
            () = shutdown.cancelled() => {
                tracing::info!("shutting down");
                None
            }
            Some(ended) = self.tasks.join_next() => Some(ended),
            Some(ended) = self.graceful.join_next() => Some(ended),
        };
        shutdown.cancel();
        self.tasks.shutdown().await;
        while self.graceful.join_next().await.is_some() {}
        match ended {
            Some(Err(err)) => Err(Error::Io(std::io::Error::other(format!(
                "a manager task failed: {err}"
            )))),
            _ => Ok(()),
        }
    }

    /// Stops every task and waits for them.
    pub async fn stop(mut self) {
        self.ctx.shutdown.cancel();
        self.tasks.shutdown().await;
        while self.graceful.join_next().await.is_some() {}
    }
}

/// Cancels `shutdown` on SIGTERM or SIGINT.
fn spawn_signal_handler(shutdown: CancellationToken) {
    tokio::spawn(async move {
        let terminate = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut signal) => {
                    signal.recv().await;
                }
                Err(err) => {
                    tracing::warn!(%err, "cannot listen for SIGTERM");
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            () = terminate => {}
        }
        tracing::info!("termination signal received");
        shutdown.cancel();
    });
}

/// Builds a client from the kubeconfig or the in-cluster configuration and checks that the API
/// server answers, so an unreachable cluster fails fast with a clear message.
pub async fn connect() -> Result<Client> {
    let config = kube::Config::infer()
        .await
        .map_err(|err| Error::KubeConfig(format!("{err} (set KUBECONFIG or run in a cluster)")))?;
    let url = config.cluster_url.to_string();
    let client = Client::try_from(config)
        .map_err(|err| Error::KubeConfig(format!("building a client for {url}: {err}")))?;
    match client.apiserver_version().await {
        Ok(version) => {
            tracing::info!(api_server = %url, version = %version.git_version, "connected");
            Ok(client)
        }
        Err(err) => Err(Error::KubeConfig(format!(
            "the Kubernetes API at {url} is not reachable: {err}"
        ))),
    }
}
