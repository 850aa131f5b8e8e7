//! The HTTPS server of the extension.
//!
//! - TLS 1.2 and 1.3 (rustls, ring provider), ALPN `h2` and `http/1.1`; the certificate comes
//!   from [`CertStore`] and follows rotations. Plain HTTP is refused (the handshake fails).
//! - `POST [prefix]/hooks.runtime.cluster.x-k8s.io/v1alpha1/discovery` and
//!   `POST [prefix]/hooks.runtime.cluster.x-k8s.io/v1alpha1/<hook>/<handler>`; the `timeout`
//!   query parameter (Go duration, sent by CAPI) bounds the handling time; no Content-Type is
//!   required.
//! - Every answer is HTTP 200 with a JSON response object; problems with the request (malformed
//!   JSON, wrong kind, unknown hook or handler, body too large, timeout) are `status: Failure`
//!   with a message.
//!
//! Runs on every replica (hooks are stateless), not only on the leader.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri, header};
use axum::response::IntoResponse;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::context::Context;
use crate::hooks::handlers::{self, discovery};
use crate::hooks::tls::CertStore;
use crate::hooks::types::{Hook, Outcome, Response};
use crate::{Error, Result};

/// Readiness check: the extension serves a valid certificate.
pub const READY_CHECK: &str = "runtime-extension";

/// When a lifecycle hook that ran out of time asks to be called again.
const DEADLINE_RETRY_SECONDS: i32 = 10;

/// The path segment every hook path contains.
pub const HOOKS_PATH: &str = "/hooks.runtime.cluster.x-k8s.io/v1alpha1/";

/// Limits and intervals of the server.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// Largest request body accepted (CAPI's own server reads at most 20 MiB).
    pub max_body_bytes: usize,
    /// Handling time when the request has no `timeout` parameter.
    pub default_timeout: Duration,
    /// Upper bound of the handling time (CAPI allows at most 30 s per handler).
    pub max_timeout: Duration,
    /// How long a TLS handshake may take.
    pub handshake_timeout: Duration,
    /// How often the certificate files are checked without traffic (readiness, missing files).
    pub cert_poll_interval: Duration,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            max_body_bytes: 20 * 1024 * 1024,
            default_timeout: Duration::from_secs(10),
            max_timeout: Duration::from_secs(30),
            handshake_timeout: Duration::from_secs(10),
            cert_poll_interval: Duration::from_secs(2),
        }
    }
}

#[derive(Clone)]
struct App {
    ctx: Arc<Context>,
    options: ServerOptions,
}

/// Builds the rustls configuration: TLS 1.2+, ring, ALPN h2 and http/1.1, certificate from
/// `certs`.
pub fn tls_config(certs: Arc<CertStore>) -> Result<rustls::ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|err| Error::Io(std::io::Error::other(format!("TLS configuration: {err}"))))?
        .with_no_client_auth()
        .with_cert_resolver(certs);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// Binds `addr` and serves the extension until `ctx.shutdown` is cancelled. Returns the bound
/// address. Missing certificate files do not fail the start: the server keeps looking for them,
/// the readiness check stays pending, and handshakes fail until they appear.
pub async fn serve(
    ctx: Arc<Context>,
    addr: SocketAddr,
    cert_dir: impl Into<std::path::PathBuf>,
    options: ServerOptions,
) -> Result<SocketAddr> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = Arc::new(
        CertStore::new(cert_dir, provider).with_readiness(ctx.readiness.clone(), READY_CHECK),
    );
    certs.refresh();

    let acceptor = TlsAcceptor::from(Arc::new(tls_config(certs.clone())?));
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let shutdown = ctx.shutdown.clone();

    tokio::spawn(watch_certificates(
        certs,
        options.cert_poll_interval,
        shutdown.clone(),
    ));

    let app = App {
        ctx: ctx.clone(),
        options: options.clone(),
    };
    let router = Router::new().fallback(answer).with_state(app);
    tokio::spawn(accept_loop(
        listener,
        acceptor,
        router,
        options.handshake_timeout,
        shutdown,
    ));
    tracing::info!(address = %local, "serving the Runtime SDK extension (HTTPS)");
    Ok(local)
}

async fn watch_certificates(
    certs: Arc<CertStore>,
    interval: Duration,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        certs.refresh();
    }
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    router: Router,
    handshake_timeout: Duration,
    shutdown: CancellationToken,
) {
    loop {
        let (stream, peer) = tokio::select! {
            () = shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    tracing::warn!(%err, "accepting a runtime extension connection");
                    continue;
                }
            },
        };
        let acceptor = acceptor.clone();
        let router = router.clone();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(handshake_timeout, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(err)) => {
                    tracing::debug!(%err, %peer, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
            let service = TowerToHyperService::new(router);
            let builder = auto::Builder::new(TokioExecutor::new());
            let connection = builder.serve_connection(TokioIo::new(tls), service);
            tokio::select! {
                result = connection => {
                    if let Err(err) = result {
                        tracing::debug!(%err, %peer, "runtime extension connection ended with an error");
                    }
                }
                () = stop.cancelled() => {}
            }
        });
    }
}

/// Where a request goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    Hook {
        hook: Hook,
        handler: Option<String>,
    },
    /// The path names no hook of this version; the message says why.
    Unknown(String),
}

/// Routes a path (any prefix before the hooks path is allowed).
pub fn route(path: &str) -> Route {
    let Some(index) = path.find(HOOKS_PATH) else {
        return Route::Unknown(format!(
            "{path} is not a Runtime SDK hook path (expected …{HOOKS_PATH}<hook>[/<handler>])"
        ));
    };
    let rest = path[index + HOOKS_PATH.len()..].trim_end_matches('/');
    let mut segments = rest.split('/');
    let hook_segment = segments.next().unwrap_or_default();
    let handler = segments.next().map(str::to_string);
    if segments.next().is_some() {
        return Route::Unknown(format!("{path}: too many path segments"));
    }
    match Hook::from_path_segment(hook_segment) {
        Some(hook) => Route::Hook { hook, handler },
        None => Route::Unknown(format!("unknown hook {hook_segment:?}")),
    }
}

/// The handling deadline from the `timeout` query parameter (Go duration, e.g. `10s`), a little
/// shorter than CAPI's own so it gets an answer, not a timeout; bounded by the options.
pub fn deadline(query: Option<&str>, options: &ServerOptions) -> Duration {
    let requested = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|pair| pair.strip_prefix("timeout="))
        .and_then(|text| crate::cli::parse_duration(text).ok())
        .unwrap_or(options.default_timeout);
    let margin = (requested / 10).min(Duration::from_secs(1));
    requested
        .saturating_sub(margin)
        .clamp(Duration::from_millis(100), options.max_timeout)
}

async fn answer(State(app): State<App>, method: Method, uri: Uri, body: Body) -> impl IntoResponse {
    let started = Instant::now();
    let (hook_label, response) = respond(&app.ctx, &app.options, &method, &uri, body).await;
    app.ctx
        .metrics
        .hook_called(hook_label, response.label(), started.elapsed());
    let json = serde_json::to_vec(&response).unwrap_or_else(|err| {
        format!(r#"{{"apiVersion":"hooks.runtime.cluster.x-k8s.io/v1alpha1","kind":"Response","status":"Failure","message":"encoding the response: {err}"}}"#).into_bytes()
    });
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        json,
    )
}

/// Answers one request: routing, method, body limit, deadline, then the handler. Returns the
/// metric label of the hook (`unknown` for paths naming no hook) and the response.
pub async fn respond(
    ctx: &Context,
    options: &ServerOptions,
    method: &Method,
    uri: &Uri,
    body: Body,
) -> (&'static str, Response) {
    let (hook, handler) = match route(uri.path()) {
        Route::Hook { hook, handler } => (hook, handler),
        Route::Unknown(message) => return ("unknown", Response::failure(None, message)),
    };
    let label = hook.name();
    let known = match (hook, handler.as_deref()) {
        (Hook::Discovery, None) => true,
        (Hook::Discovery, Some(_)) => false,
        (hook, Some(name)) => discovery::find(hook, name).is_some(),
        (_, None) => false,
    };
    if !known {
        return (
            label,
            Response::failure(
                Some(hook),
                format!(
                    "unknown handler {:?} for hook {}",
                    handler.unwrap_or_default(),
                    hook.name()
                ),
            ),
        );
    }
    if method != Method::POST {
        return (
            label,
            Response::failure(
                Some(hook),
                format!("method {method} is not allowed: use POST"),
            ),
        );
    }
    let bytes = match axum::body::to_bytes(body, options.max_body_bytes).await {
        Ok(bytes) => bytes,
        Err(err) => {
            return (
                label,
                Response::failure(
                    Some(hook),
                    format!(
                        "the request body could not be read (at most {} bytes are accepted): {err}",
                        options.max_body_bytes
                    ),
                ),
            );
        }
    };
    let limit = deadline(uri.query(), options);
    match tokio::time::timeout(limit, handlers::handle(ctx, hook, &bytes)).await {
        Ok(response) => (label, response),
        // A lifecycle hook that runs out of time (a slow or unreachable API server) asks to be
        // called again: only a hold we intend may fail a Cluster's lifecycle. The others cannot
        // retry; their Failure makes Cluster API keep the current state and call again.
        Err(_) if hook.retries() => (
            label,
            Response::lifecycle(
                hook,
                Outcome::retry(
                    DEADLINE_RETRY_SECONDS,
                    format!("{} did not finish within {limit:?}; retrying", hook.name()),
                ),
            ),
        ),
        Err(_) => (
            label,
            Response::failure(
                Some(hook),
                format!("{} did not finish within {limit:?}", hook.name()),
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(
            route("/hooks.runtime.cluster.x-k8s.io/v1alpha1/discovery"),
            Route::Hook {
                hook: Hook::Discovery,
                handler: None
            }
        );
        assert_eq!(
            route(
                "/prefix/x/hooks.runtime.cluster.x-k8s.io/v1alpha1/beforeclustercreate/before-cluster-create"
            ),
            Route::Hook {
                hook: Hook::BeforeClusterCreate,
                handler: Some("before-cluster-create".into())
            }
        );
        assert!(matches!(
            route("/hooks.runtime.cluster.x-k8s.io/v1alpha1/afterclusterupgrade/x"),
            Route::Unknown(_)
        ));
        assert!(matches!(route("/healthz"), Route::Unknown(_)));
        assert!(matches!(
            route("/hooks.runtime.cluster.x-k8s.io/v1alpha1/generatepatches/a/b"),
            Route::Unknown(_)
        ));
    }

    #[test]
    fn deadlines_follow_the_timeout_parameter() {
        let options = ServerOptions::default();
        assert_eq!(
            deadline(Some("timeout=10s"), &options),
            Duration::from_secs(9)
        );
        assert_eq!(
            deadline(Some("x=1&timeout=2s"), &options),
            Duration::from_millis(1800)
        );
        assert_eq!(deadline(None, &options), Duration::from_secs(9));
        assert_eq!(
            deadline(Some("timeout=5m"), &options),
            Duration::from_secs(30)
        );
        assert_eq!(
            deadline(Some("timeout=bogus"), &options),
            Duration::from_secs(9)
        );
    }
}
