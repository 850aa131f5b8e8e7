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
//!
//! The HTTP and TLS are crates' (axum, hyper-util, tokio-rustls); the accept loop is ours.
//! `axum-server` (its `Server::serve` and `RustlsConfig`, checked against its source) spawns a
//! task per accepted connection without a bound, has no idle limit per connection and no
//! close of a connection past the longest deadline, and reloads certificates only when told;
//! the accept loop here holds at most `max_connections`, bounds every stage of a connection and
//! reads the certificate files at each handshake (`tests/hooks_abuse.rs`, `tests/hooks_tls.rs`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri, header};
use axum::response::IntoResponse;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::hooks::handlers;
use crate::hooks::hook_context::HookContext;
use crate::hooks::limits::{Activity, BodyBudget, Tracked, read_body};
use crate::hooks::tls::CertStore;
use crate::hooks::types::{Hook, Response};
use crate::model::hook_plan::HookOutcome;
use crate::{Error, Result};

/// Readiness check: the extension serves a valid certificate.
pub const READY_CHECK: &str = "runtime-extension";

/// When a lifecycle hook that ran out of time asks to be called again.
const DEADLINE_RETRY_SECONDS: i32 = 10;

/// The path segment every hook path contains.
pub const HOOKS_PATH: &str = "/hooks.runtime.cluster.x-k8s.io/v1alpha1/";

/// Limits and intervals of the server. Together they bound its memory under abusive clients
/// (docs/runtime-extension.md, "Limits"): at most `max_connections` connections (each with
/// bounded TLS and HTTP buffers), and at most `body_budget_bytes` of request bodies in memory.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// Largest request body accepted (CAPI's own server reads at most 20 MiB:
    /// `exp/runtime/server/server.go`, `maxExtensionRequestBodyBytes`, cluster-api v1.14).
    pub max_body_bytes: usize,
    /// Memory for requests at once across all connections: their bytes plus the estimated cost
    /// of decoding them (`limits::decode_cost`); a request that does not fit is answered with a
    /// Failure at once.
    pub body_budget_bytes: usize,
    /// Connections served at once; further clients wait in the listen backlog.
    pub max_connections: usize,
    /// Concurrent HTTP/2 streams per connection.
    pub max_streams_per_connection: u32,
    /// Handling time when the request has no `timeout` parameter.
    pub default_timeout: Duration,
    /// Upper bound of the handling time (CAPI allows at most 30 s per handler).
    pub max_timeout: Duration,
    /// How long a TLS handshake may take.
    pub handshake_timeout: Duration,
    /// How long the request line and headers of an HTTP/1.1 request may take to arrive.
    pub header_read_timeout: Duration,
    /// How long a request body may take to arrive once its headers are in.
    pub body_read_timeout: Duration,
    /// A connection on which no byte moved for this long is closed (gracefully: a request in
    /// flight is answered first).
    pub idle_timeout: Duration,
    /// How often the certificate files are checked without traffic (readiness, missing files).
    pub cert_poll_interval: Duration,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            max_body_bytes: 20 * 1024 * 1024,
            body_budget_bytes: 128 * 1024 * 1024,
            max_connections: 4096,
            max_streams_per_connection: 32,
            default_timeout: Duration::from_secs(10),
            max_timeout: Duration::from_secs(30),
            handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            cert_poll_interval: Duration::from_secs(2),
        }
    }
}

/// Largest HTTP/1.1 read buffer per connection (request line and headers must fit).
const MAX_HTTP1_BUFFER: usize = 64 * 1024;
/// Largest HTTP/2 header list per request.
const MAX_HTTP2_HEADER_LIST: u32 = 16 * 1024;
/// Pause after a failed `accept` (e.g. out of file descriptors) so the loop does not spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);
/// Extra time a closing connection gets beyond the longest handling time.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

#[derive(Clone)]
struct App {
    ctx: Arc<HookContext>,
    options: ServerOptions,
    budget: BodyBudget,
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

/// Binds `addr` and serves the extension until `ctx.base.shutdown` is cancelled. Returns the bound
/// address. Missing certificate files do not fail the start: the server keeps looking for them,
/// the readiness check stays pending, and handshakes fail until they appear.
pub async fn serve(
    ctx: Arc<HookContext>,
    addr: SocketAddr,
    cert_dir: impl Into<std::path::PathBuf>,
    options: ServerOptions,
) -> Result<SocketAddr> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = Arc::new(
        CertStore::new(cert_dir, provider).with_readiness(ctx.base.readiness.clone(), READY_CHECK),
    );
    refresh_certificates(certs.clone()).await;

    let acceptor = TlsAcceptor::from(Arc::new(tls_config(certs.clone())?));
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let shutdown = ctx.base.shutdown.clone();

    tokio::spawn(watch_certificates(
        certs.clone(),
        options.cert_poll_interval,
        shutdown.clone(),
    ));

    let app = App {
        ctx: ctx.clone(),
        options: options.clone(),
        budget: BodyBudget::new(options.body_budget_bytes),
    };
    let router = Router::new().fallback(answer).with_state(app);
    tokio::spawn(accept_loop(
        listener,
        Acceptor {
            tls: acceptor,
            certs: certs.clone(),
        },
        router,
        options,
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
        refresh_certificates(certs.clone()).await;
    }
}

/// Looks at the certificate files on the blocking pool (file-system calls must not stall the
/// async workers).
async fn refresh_certificates(certs: Arc<CertStore>) {
    if let Err(err) = tokio::task::spawn_blocking(move || certs.refresh()).await {
        tracing::warn!(%err, "checking the runtime extension certificate files");
    }
}

/// The TLS side of accepting a connection.
#[derive(Clone)]
struct Acceptor {
    tls: TlsAcceptor,
    certs: Arc<CertStore>,
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: Acceptor,
    router: Router,
    options: ServerOptions,
    shutdown: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(options.max_connections.max(1)));
    loop {
        // At the connection limit, new clients wait in the kernel's listen backlog.
        let slot = tokio::select! {
            () = shutdown.cancelled() => return,
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => return,
            },
        };
        let (stream, peer) = tokio::select! {
            () = shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    tracing::warn!(%err, "accepting a runtime extension connection");
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        () = tokio::time::sleep(ACCEPT_ERROR_PAUSE) => {}
                    }
                    continue;
                }
            },
        };
        // Small HTTP/2 frames must not wait for Nagle's algorithm (with the peer's delayed ACK
        // that adds tens of milliseconds to every answer); Go's net package, which Cluster API's
        // client uses, sets TCP_NODELAY on its side by default too (`net/tcpsock.go`, `TCPConn.SetNoDelay`:
        // "The default is true (no delay)").
        if let Err(err) = stream.set_nodelay(true) {
            tracing::debug!(%err, "setting TCP_NODELAY on a runtime extension connection");
        }
        tokio::spawn(serve_connection(
            stream,
            peer,
            acceptor.clone(),
            router.clone(),
            options.clone(),
            shutdown.clone(),
            slot,
        ));
    }
}

/// One connection: handshake (bounded), then HTTP/1.1 or HTTP/2 until the client leaves, the
/// connection stays idle too long, or the server stops. Holds its connection slot throughout.
async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    acceptor: Acceptor,
    router: Router,
    options: ServerOptions,
    stop: CancellationToken,
    _slot: OwnedSemaphorePermit,
) {
    let handshake = async {
        // Every handshake looks at the files first, so a rotated pair is served at once.
        refresh_certificates(acceptor.certs.clone()).await;
        acceptor.tls.accept(stream).await
    };
    let tls = match tokio::time::timeout(options.handshake_timeout, handshake).await {
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
    let activity = Activity::default();
    let io = TokioIo::new(Tracked::new(tls, activity.clone()));
    let service = TowerToHyperService::new(router);
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(options.header_read_timeout)
        .max_buf_size(MAX_HTTP1_BUFFER);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(options.max_streams_per_connection)
        .max_header_list_size(MAX_HTTP2_HEADER_LIST);
    let connection = builder.serve_connection(io, service);
    tokio::pin!(connection);
    let mut check =
        tokio::time::interval((options.idle_timeout / 4).max(Duration::from_millis(50)));
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut closing_since: Option<tokio::time::Instant> = None;
    let close_limit = options.max_timeout + CLOSE_GRACE;
    loop {
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(err) = result {
                    tracing::debug!(%err, %peer, "runtime extension connection ended with an error");
                }
                return;
            }
            () = stop.cancelled() => return,
            _ = check.tick() => match closing_since {
                None if activity.idle_for() >= options.idle_timeout => {
                    tracing::debug!(%peer, "closing an idle runtime extension connection");
                    connection.as_mut().graceful_shutdown();
                    closing_since = Some(tokio::time::Instant::now());
                }
                Some(since) if since.elapsed() >= close_limit => {
                    tracing::debug!(%peer, "dropping a runtime extension connection that did not close");
                    return;
                }
                _ => {}
            },
        }
    }
}

/// Where a request goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    Hook {
        hook: Hook,
        handler: Option<String>,
        /// The discovery the path prefix names ([`handlers::Catalog::of_prefix`]).
        catalog: handlers::Catalog,
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
    let catalog = handlers::Catalog::of_prefix(&path[..index]);
    match handlers::hook_of_segment(hook_segment) {
        Some(hook) => Route::Hook {
            hook,
            handler,
            catalog,
        },
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
        .and_then(|text| crate::api::duration::parse_duration(text).ok())
        .unwrap_or(options.default_timeout);
    let margin = (requested / 10).min(Duration::from_secs(1));
    requested
        .saturating_sub(margin)
        .clamp(Duration::from_millis(100), options.max_timeout)
}

async fn answer(State(app): State<App>, method: Method, uri: Uri, body: Body) -> impl IntoResponse {
    let started = Instant::now();
    let (hook_label, response) =
        respond_within(&app.ctx, &app.options, &app.budget, &method, &uri, body).await;
    app.ctx
        .base
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

/// Answers one request with a body budget of its own (see [`respond_within`]).
pub async fn respond(
    ctx: &HookContext,
    options: &ServerOptions,
    method: &Method,
    uri: &Uri,
    body: Body,
) -> (&'static str, Response) {
    let budget = BodyBudget::new(options.body_budget_bytes);
    respond_within(ctx, options, &budget, method, uri, body).await
}

/// Answers one request: routing, method, body limits (size, shared budget, read time),
/// deadline, then the handler. Returns the metric label of the hook (`unknown` for paths naming
/// no hook) and the response.
pub async fn respond_within(
    ctx: &HookContext,
    options: &ServerOptions,
    budget: &BodyBudget,
    method: &Method,
    uri: &Uri,
    body: Body,
) -> (&'static str, Response) {
    let (hook, handler, catalog) = match route(uri.path()) {
        Route::Hook {
            hook,
            handler,
            catalog,
        } => (hook, handler, catalog),
        Route::Unknown(message) => return ("unknown", Response::failure(None, message)),
    };
    let label = hook.name();
    let fail = |message: String| (label, Response::failure(Some(hook), message));
    if handlers::find(hook, handler.as_deref()).is_none() {
        return fail(format!(
            "unknown handler {:?} for hook {}",
            handler.unwrap_or_default(),
            hook.name()
        ));
    }
    if method != Method::POST {
        return fail(format!("method {method} is not allowed: use POST"));
    }
    // Held until the answer is computed: the parsed request lives as long as the bytes.
    let mut body = match read_body(
        body,
        options.max_body_bytes,
        budget,
        options.body_read_timeout,
    )
    .await
    {
        Ok(body) => body,
        Err(err) => return fail(err.to_string()),
    };
    if let Err(err) = body.charge_decoding(budget) {
        return fail(err.to_string());
    }
    if let Err(message) = precheck_large(&body.bytes).await {
        return fail(message);
    }
    let limit = deadline(uri.query(), options);
    match tokio::time::timeout(limit, handlers::handle_in(ctx, catalog, hook, &body.bytes)).await {
        Ok(response) => (label, response),
        // A lifecycle hook that runs out of time (a slow or unreachable API server) asks to be
        // called again: only a hold we intend may fail a Cluster's lifecycle. The others cannot
        // retry; their Failure makes Cluster API keep the current state and call again.
        Err(_) if hook.retries() => (
            label,
            Response::lifecycle(
                hook,
                HookOutcome::retry(
                    DEADLINE_RETRY_SECONDS,
                    format!("{} did not finish within {limit:?}; retrying", hook.name()),
                ),
            ),
        ),
        Err(_) => fail(format!("{} did not finish within {limit:?}", hook.name())),
    }
}

/// Bodies larger than this are checked on the blocking pool before a handler decodes them.
const LARGE_BODY_BYTES: usize = 1024 * 1024;

/// A large body that is not a JSON object is refused after a syntax check on tokio's blocking
/// pool (no values are built), so megabytes of garbage or a giant number do not occupy an
/// async worker that other clients' requests need. Smaller bodies go straight to the handler.
async fn precheck_large(bytes: &axum::body::Bytes) -> std::result::Result<(), String> {
    if bytes.len() <= LARGE_BODY_BYTES {
        return Ok(());
    }
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err("the request body is not a JSON object".to_string());
    }
    let bytes = bytes.clone();
    let checked = tokio::task::spawn_blocking(move || {
        serde_json::from_slice::<serde::de::IgnoredAny>(&bytes).map(|_| ())
    })
    .await;
    match checked {
        Ok(Ok(())) => Ok(()),
        Ok(Err(err)) => Err(format!("the request body is not valid JSON: {err}")),
        Err(err) => Err(format!("checking the request body: {err}")),
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
                handler: None,
                catalog: handlers::Catalog::Base,
            }
        );
        assert_eq!(
            route("/upgrade-steps/hooks.runtime.cluster.x-k8s.io/v1alpha1/discovery"),
            Route::Hook {
                hook: Hook::Discovery,
                handler: None,
                catalog: handlers::Catalog::UpgradeSteps,
            }
        );
        assert_eq!(
            route(
                "/prefix/x/hooks.runtime.cluster.x-k8s.io/v1alpha1/beforeclustercreate/before-cluster-create"
            ),
            Route::Hook {
                hook: Hook::BeforeClusterCreate,
                handler: Some("before-cluster-create".into()),
                catalog: handlers::Catalog::Base,
            }
        );
        assert!(matches!(
            route("/hooks.runtime.cluster.x-k8s.io/v1alpha1/generateupgradeplan/x"),
            Route::Unknown(_)
        ));
        assert!(matches!(route("/healthz"), Route::Unknown(_)));
        assert!(matches!(
            route("/hooks.runtime.cluster.x-k8s.io/v1alpha1/generatepatches/a/b"),
            Route::Unknown(_)
        ));
    }

    #[tokio::test]
    async fn large_bodies_that_are_not_json_objects_are_refused_before_decoding() {
        let pad = |head: &[u8], fill: u8, tail: &[u8]| {
            let mut body = head.to_vec();
            body.resize(LARGE_BODY_BYTES + 1 - tail.len(), fill);
            body.extend_from_slice(tail);
            axum::body::Bytes::from(body)
        };
        let cases: Vec<(&str, axum::body::Bytes, Option<&str>)> = vec![
            (
                "small garbage is left to the handler",
                axum::body::Bytes::from_static(b"\xff["),
                None,
            ),
            ("a large object", pad(br#"{"a":""#, b'x', br#""}"#), None),
            (
                "a large number",
                pad(b"", b'7', b""),
                Some("not a JSON object"),
            ),
            (
                "a large array",
                pad(b"[", b' ', b"]"),
                Some("not a JSON object"),
            ),
            (
                "a large broken object",
                pad(b"{", b' ', b"x"),
                Some("not valid JSON"),
            ),
        ];
        for (name, body, expected) in cases {
            let got = precheck_large(&body).await;
            match expected {
                None => assert_eq!(got, Ok(()), "{name}"),
                Some(message) => assert!(
                    got.as_ref().is_err_and(|m| m.contains(message)),
                    "{name}: {got:?}"
                ),
            }
        }
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
