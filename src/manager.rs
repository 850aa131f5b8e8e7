//! The manager: connects to the API server, serves health and metrics, and runs the
//! controllers until SIGTERM/SIGINT.
//!
//! What runs where:
//! - on **every replica**: the health and metrics endpoints, the `FleetAddonConfig` watch (a
//!   read-only cache: the runtime extension, which every replica serves, decides with it);
//! - on the **leader** only: everything that writes — the import controllers and their status
//!   writer, the move controller (self-managed Clusters) and the Fleet install controller. These "leader tasks" start when the replica
//!   acquires the Lease (at once without `--leader-elect`).
//!
//! Losing the Lease (not renewed within the renew deadline, or another holder seen) aborts the
//! leader tasks at once and makes [`Manager::wait`] return [`Error::LeadershipLost`]: the
//! process exits non-zero and Kubernetes restarts the container, which becomes a candidate
//! again — what controller-runtime does. A graceful stop (SIGTERM) lets the leader tasks finish
//! their current work (bounded), then releases the Lease so another replica takes over at its
//! next retry instead of after the lease duration.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::runtime::events::EventType;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::cli::ManagerFlags;
use crate::client::Clients;
use crate::context::Context;
use crate::controllers::{authorization, config_watch, fleet_config, import};

/// The name of the priority client's users in the `Authorized` condition.
const PRIORITY_COMPONENT: &str = "hooks, leader election and configuration watch";
use crate::hooks::hook_context::HookContext;
use crate::leader::{ElectionConfig, Elector, Renewal};
use crate::{Error, Result};
use crate::{hooks, probes};

/// How long the leader tasks may take to finish after SIGTERM (a reconcile, a running helm
/// command) before they are aborted. Below the Deployment's terminationGracePeriodSeconds (30).
pub const GRACEFUL_STOP: Duration = Duration::from_secs(25);

/// Runs the manager until it is asked to stop (or a component fails).
pub async fn run(flags: ManagerFlags) -> Result<()> {
    for ignored in flags.ignored() {
        tracing::info!(flag = %ignored, "flag accepted but ignored");
    }
    let clients = connect(&flags).await?;
    require_cluster_api(&clients.priority).await?;
    let shutdown = CancellationToken::new();
    spawn_signal_handler(shutdown.clone());
    Manager::start_with_clients(clients, flags, shutdown)
        .await?
        .wait()
        .await
}

/// Runs the manager with an existing client (for everything) until `shutdown` is cancelled.
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
    /// The Runtime SDK hooks' context (over `ctx`).
    pub hooks: Arc<HookContext>,
    /// Where `/healthz` and `/readyz` are served, when enabled.
    pub health_address: Option<std::net::SocketAddr>,
    /// Where `/metrics` is served, when enabled.
    pub metrics_address: Option<std::net::SocketAddr>,
    /// Where the Runtime SDK extension is served (HTTPS).
    pub webhook_address: std::net::SocketAddr,
    /// This replica's `holderIdentity` (None without `--leader-elect`).
    pub identity: Option<String>,
    leading: watch::Receiver<bool>,
    /// The configuration watch and the leadership task (which runs the leader tasks).
    tasks: JoinSet<Result<()>>,
}

impl Manager {
    /// [`Manager::start_with_clients`] with one client for everything.
    pub async fn start(
        client: Client,
        flags: ManagerFlags,
        shutdown: CancellationToken,
    ) -> Result<Self> {
        Self::start_with_clients(Clients::single(client), flags, shutdown).await
    }

    /// Starts serving health and metrics, the configuration watch and the leader election
    /// (or, without `--leader-elect`, the leader tasks); returns once listening. The Lease, the
    /// hooks and the configuration watch use `clients.priority`, the controllers
    /// `clients.controllers`.
    pub async fn start_with_clients(
        clients: Clients,
        flags: ManagerFlags,
        shutdown: CancellationToken,
    ) -> Result<Self> {
        let client = clients.priority;
        let election = if flags.leader_elect {
            // Reads the namespace and host name files: off the async workers.
            let election_flags = flags.clone();
            let config =
                tokio::task::spawn_blocking(move || ElectionConfig::from_flags(&election_flags))
                    .await
                    .map_err(|err| {
                        Error::InvalidConfig(format!("preparing the leader election: {err}"))
                    })??;
            Some(config)
        } else {
            None
        };
        let (config_tx, config_rx) = crate::context::config_channel();
        let (bootstrap_secrets, bootstrap_feed) = hooks::bootstrap_secrets::BootstrapSecrets::new();
        let ctx = Arc::new(
            Context::new(client.clone(), flags, config_rx, shutdown.clone())
                .with_controllers_client(clients.controllers)
                .with_observed_priority_client(PRIORITY_COMPONENT),
        );
        let client = ctx.client.clone();

        let (health_address, metrics_address) = probes::serve(
            probes::parse_bind_address(&ctx.flags.health_probe_bind_address)?,
            probes::parse_bind_address(&ctx.flags.metrics_bind_address)?,
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
        let hook_ctx = Arc::new(HookContext::new(ctx.clone(), bootstrap_secrets));
        let webhook_address = hooks::server::serve(
            hook_ctx.clone(),
            SocketAddr::new(webhook_host, ctx.flags.webhook_port),
            ctx.flags.webhook_cert_dir.clone(),
            hooks::server::ServerOptions::default(),
        )
        .await?;

        let identity = election.as_ref().map(|e| e.identity.clone());
        let (leading_tx, leading) = watch::channel(false);
        let mut tasks: JoinSet<Result<()>> = JoinSet::new();
        let (readiness, stop) = (ctx.readiness.clone(), ctx.shutdown.clone());
        tasks.spawn(async move {
            tokio::select! {
                () = config_watch::run(client, config_tx, readiness) => {}
                () = stop.cancelled() => {}
            }
            Ok(())
        });
        // The hooks' view of the bootstrap Secrets, on every replica (like the hooks), through
        // the priority client.
        let (feed_client, feed_namespace, feed_stop) = (
            ctx.client.clone(),
            ctx.flags.watch_namespace().map(str::to_string),
            ctx.shutdown.clone(),
        );
        tasks.spawn(async move {
            bootstrap_feed
                .run(feed_client, feed_namespace, feed_stop)
                .await;
            Ok(())
        });
        let elector = election.map(|config| Elector::new(ctx.client.clone(), config));
        tasks.spawn(lead(ctx.clone(), elector, leading_tx));
        Ok(Self {
            ctx,
            hooks: hook_ctx,
            health_address,
            metrics_address,
            webhook_address,
            identity,
            leading,
            tasks,
        })
    }

    /// Whether this replica runs the leader tasks now.
    pub fn is_leader(&self) -> bool {
        *self.leading.borrow()
    }

    /// Follows leadership changes of this replica.
    pub fn leadership(&self) -> watch::Receiver<bool> {
        self.leading.clone()
    }

    /// Runs until shutdown is requested or a component ends; an error when leadership was lost
    /// or a component failed.
    pub async fn wait(mut self) -> Result<()> {
        let shutdown = self.ctx.shutdown.clone();
        let first = tokio::select! {
            () = shutdown.cancelled() => {
                tracing::info!("shutting down");
                None
            }
            Some(ended) = self.tasks.join_next() => Some(ended),
        };
        shutdown.cancel();
        let rest = self.drain().await;
        match first {
            Some(Ok(Err(err))) => Err(err),
            Some(Err(err)) => Err(Error::Io(std::io::Error::other(format!(
                "a manager task failed: {err}"
            )))),
            _ => rest,
        }
    }

    /// Stops gracefully: leader tasks finish their current work, the Lease is released.
    pub async fn stop(mut self) {
        self.ctx.shutdown.cancel();
        if let Err(err) = self.drain().await {
            tracing::warn!(%err, "stopping the manager");
        }
    }

    /// Stops every task at once without releasing the Lease: what a crash or SIGKILL does
    /// (the other replicas take over once the lease expires).
    pub async fn abort(mut self) {
        self.tasks.shutdown().await;
        self.ctx.shutdown.cancel();
    }

    /// Waits for every task after the stop signal; the first error wins.
    async fn drain(&mut self) -> Result<()> {
        let mut result = Ok(());
        while let Some(ended) = self.tasks.join_next().await {
            match ended {
                Ok(Err(err)) if result.is_ok() => result = Err(err),
                Err(err) if result.is_ok() && !err.is_cancelled() => {
                    result = Err(Error::Io(std::io::Error::other(format!(
                        "a manager task failed: {err}"
                    ))));
                }
                _ => {}
            }
        }
        result
    }
}

/// The tasks only the leader runs: everything that writes. They stop on `ctx.shutdown`, which
/// is cancelled on SIGTERM and when this replica stops leading.
fn spawn_leader_tasks(ctx: Arc<Context>) -> JoinSet<()> {
    let mut tasks = JoinSet::new();
    // Each part on its own view of the controllers' client (one rate limit), so that the
    // `Authorized` condition names who was refused.
    tasks.spawn(import::run(Arc::new(
        ctx.for_component("import controllers"),
    )));
    tasks.spawn(crate::controllers::misnamed_config::run(Arc::new(
        ctx.for_component("FleetAddonConfig name check"),
    )));
    tasks.spawn(authorization::run(Arc::new(
        ctx.for_component("Authorized condition writer"),
    )));
    // Lets a running helm command finish on a graceful stop (so no release is left
    // pending-upgrade); killed when leadership is lost.
    tasks.spawn(fleet_config::run(Arc::new(
        ctx.for_component("Fleet installation controller"),
    )));
    tasks
}

/// Runs the leader tasks while this replica leads (always without an elector).
async fn lead(
    ctx: Arc<Context>,
    elector: Option<Elector>,
    leading: watch::Sender<bool>,
) -> Result<()> {
    let shutdown = ctx.shutdown.clone();
    let Some(mut elector) = elector else {
        set_leading(&ctx, &leading, true);
        let token = shutdown.child_token();
        let mut tasks = spawn_leader_tasks(Arc::new(ctx.with_shutdown(token.clone())));
        let ended = tokio::select! {
            biased;
            () = shutdown.cancelled() => None,
            Some(ended) = tasks.join_next() => Some(ended),
        };
        // A task that ended because the stop signal came is not a failure.
        let ended = ended.filter(|_| !shutdown.is_cancelled());
        token.cancel();
        drain(&mut tasks, GRACEFUL_STOP).await;
        set_leading(&ctx, &leading, false);
        return leader_task_result(ended);
    };

    if !elector.acquire(&shutdown).await {
        return Ok(());
    }
    set_leading(&ctx, &leading, true);
    if let Some(lease) = elector.lease_reference() {
        ctx.event(
            &lease,
            EventType::Normal,
            "LeaderElection",
            "Leading",
            format!("{} became leader", elector.config().identity),
        )
        .await;
    }
    let token = shutdown.child_token();
    let mut tasks = spawn_leader_tasks(Arc::new(ctx.with_shutdown(token.clone())));
    let outcome = tokio::select! {
        biased;
        renewal = elector.renew(&shutdown) => Ok(renewal),
        Some(ended) = tasks.join_next() => Err(ended),
    };
    // A task that ended because the stop signal came is not a failure: stop gracefully.
    let outcome = match outcome {
        Err(_) if shutdown.is_cancelled() => Ok(Renewal::Stopped),
        other => other,
    };
    token.cancel();
    match outcome {
        Ok(Renewal::Lost(reason)) => {
            // Another replica may lead from now on: stop writing at once.
            tasks.shutdown().await;
            set_leading(&ctx, &leading, false);
            tracing::error!(%reason, "leadership lost; stopping");
            Err(Error::LeadershipLost(reason))
        }
        Ok(Renewal::Stopped) => {
            // Keep renewing while the tasks finish their current work, so the Lease stays ours
            // as long as they may write; if it is lost meanwhile, stop them at once.
            let never = CancellationToken::new();
            let lost = tokio::select! {
                () = drain(&mut tasks, GRACEFUL_STOP) => None,
                renewal = elector.renew(&never) => Some(renewal),
            };
            if let Some(Renewal::Lost(reason)) = lost {
                tasks.shutdown().await;
                set_leading(&ctx, &leading, false);
                tracing::error!(%reason, "leadership lost while stopping");
                return Err(Error::LeadershipLost(reason));
            }
            set_leading(&ctx, &leading, false);
            elector.release().await
        }
        Err(ended) => {
            drain(&mut tasks, Duration::ZERO).await;
            set_leading(&ctx, &leading, false);
            if let Err(err) = elector.release().await {
                tracing::warn!(%err, "releasing the leader lease");
            }
            leader_task_result(Some(ended))
        }
    }
}

fn set_leading(ctx: &Context, leading: &watch::Sender<bool>, value: bool) {
    ctx.metrics.leader.set(i64::from(value));
    leading.send_replace(value);
}

/// A leader task that ends before the stop signal is a bug or a fatal error: say which.
fn leader_task_result(
    ended: Option<std::result::Result<(), tokio::task::JoinError>>,
) -> Result<()> {
    match ended {
        None => Ok(()),
        Some(Ok(())) => Err(Error::Io(std::io::Error::other(
            "a leader task ended unexpectedly",
        ))),
        Some(Err(err)) => Err(Error::Io(std::io::Error::other(format!(
            "a leader task failed: {err}"
        )))),
    }
}

/// Waits up to `grace` for `tasks` to finish, then aborts the rest.
async fn drain(tasks: &mut JoinSet<()>, grace: Duration) {
    if tokio::time::timeout(grace, async { while tasks.join_next().await.is_some() {} })
        .await
        .is_err()
    {
        tracing::warn!(?grace, "leader tasks did not stop in time; aborting them");
    }
    tasks.shutdown().await;
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

/// Fails when the API server does not serve the Cluster API version the controllers watch
/// ([`crate::model::capi::cluster_api_problem`]), instead of watches that retry forever.
pub async fn require_cluster_api(client: &Client) -> Result<()> {
    use crate::model::capi::{WATCHED_API_VERSION, cluster_api_problem};
    let served = match client.list_api_group_resources(WATCHED_API_VERSION).await {
        Ok(list) => Some(
            list.resources
                .into_iter()
                .map(|r| r.name)
                .collect::<Vec<_>>(),
        ),
        Err(kube::Error::Api(status)) if status.code == 404 => None,
        Err(err) => return Err(err.into()),
    };
    match cluster_api_problem(served.as_deref()) {
        None => Ok(()),
        Some(problem) => Err(Error::missing("API", WATCHED_API_VERSION, problem)),
    }
}

/// Builds the manager's clients (user agent; `--kube-api-qps`/`--kube-api-burst` rate limit on
/// the controllers' one) from the kubeconfig or the in-cluster configuration, and checks that
/// the API server answers, so an unreachable cluster fails fast with a clear message.
pub async fn connect(flags: &ManagerFlags) -> Result<Clients> {
    let config = match &flags.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(|err| {
                Error::KubeConfig(format!("--kubeconfig {}: {err}", path.display()))
            })?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .map_err(|err| {
                    Error::KubeConfig(format!("--kubeconfig {}: {err}", path.display()))
                })?
        }
        None => kube::Config::infer().await.map_err(|err| {
            Error::KubeConfig(format!(
                "{err} (set --kubeconfig or KUBECONFIG, or run in a cluster)"
            ))
        })?,
    };
    let url = config.cluster_url.to_string();
    let clients = crate::client::build_clients(config, flags)?;
    match clients.priority.apiserver_version().await {
        Ok(version) => {
            tracing::info!(api_server = %url, version = %version.git_version, "connected");
            Ok(clients)
        }
        Err(err) => Err(Error::KubeConfig(format!(
            "the Kubernetes API at {url} is not reachable: {err}"
        ))),
    }
}
