//! Plain-HTTP endpoints for the kubelet and Prometheus: `/healthz`, `/readyz`, `/health`
//! (CAAPF's readiness path) and `/metrics`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::{Error, Result};

/// Named readiness checks; `/readyz` is 200 once every registered check passed.
#[derive(Clone, Default)]
pub struct Readiness {
    checks: Arc<Mutex<BTreeMap<&'static str, bool>>>,
}

impl Readiness {
    /// Registers a check that is not yet ready.
    pub fn register(&self, name: &'static str) {
        self.lock().entry(name).or_insert(false);
    }

    /// Marks a check ready or not.
    pub fn set(&self, name: &'static str, ready: bool) {
        self.lock().insert(name, ready);
    }

    /// The checks that are not ready (empty means ready).
    pub fn pending(&self) -> Vec<&'static str> {
        self.lock()
            .iter()
            .filter(|(_, ready)| !**ready)
            .map(|(name, _)| *name)
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<&'static str, bool>> {
        // A panic while holding this lock cannot leave the map inconsistent.
        self.checks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[derive(Clone)]
struct Shared {
    readiness: Readiness,
    metrics: Arc<Metrics>,
}

/// Parses Go-style listen addresses: `:8080` means every interface; `0` (or empty) disables.
pub fn parse_bind_address(text: &str) -> Result<Option<SocketAddr>> {
    let text = text.trim();
    if text.is_empty() || text == "0" {
        return Ok(None);
    }
    let full = if text.starts_with(':') {
        format!("0.0.0.0{text}")
    } else {
        text.to_string()
    };
    full.parse()
        .map(Some)
        .map_err(|err| Error::InvalidConfig(format!("bind address {text:?}: {err}")))
}

fn health_routes() -> Router<Shared> {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/livez", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/health", get(readyz))
}

fn metrics_routes() -> Router<Shared> {
    Router::new().route("/metrics", get(metrics))
}

async fn readyz(State(shared): State<Shared>) -> impl IntoResponse {
    let pending = shared.readiness.pending();
    if pending.is_empty() {
        (StatusCode::OK, "ok".to_string())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {}", pending.join(", ")),
        )
    }
}

async fn metrics(State(shared): State<Shared>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        shared.metrics.render(),
    )
}

/// Binds the health and metrics listeners (one listener when the addresses are equal) and serves
/// them until `shutdown` completes. Returns the bound addresses (health, metrics) once listening.
pub async fn serve(
    health: Option<SocketAddr>,
    metrics_addr: Option<SocketAddr>,
    readiness: Readiness,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> Result<(Option<SocketAddr>, Option<SocketAddr>)> {
    let shared = Shared { readiness, metrics };
    let mut bound = (None, None);
    let mut plan: Vec<(SocketAddr, Router<Shared>, u8)> = Vec::new();
    match (health, metrics_addr) {
        (Some(h), Some(m)) if h == m => plan.push((h, health_routes().merge(metrics_routes()), 3)),
        (h, m) => {
            if let Some(h) = h {
                plan.push((h, health_routes(), 1));
            }
            if let Some(m) = m {
                plan.push((m, metrics_routes(), 2));
            }
        }
    }
    for (addr, router, role) in plan {
        let listener = TcpListener::bind(addr).await?;
        let local = listener.local_addr()?;
        if role & 1 != 0 {
            bound.0 = Some(local);
        }
        if role & 2 != 0 {
            bound.1 = Some(local);
        }
        let app = router.with_state(shared.clone());
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let stopped = async move { stop.cancelled().await };
            if let Err(err) = axum::serve(listener, app)
                .with_graceful_shutdown(stopped)
                .await
            {
                tracing::error!(%err, address = %local, "HTTP server failed");
            }
        });
        tracing::info!(address = %local, "serving {}", match role { 1 => "health", 2 => "metrics", _ => "health and metrics" });
    }
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bind_addresses() {
        assert_eq!(
            parse_bind_address(":8080").ok().flatten(),
            Some("0.0.0.0:8080".parse().expect("addr"))
        );
        assert_eq!(
            parse_bind_address("127.0.0.1:9440").ok().flatten(),
            Some("127.0.0.1:9440".parse().expect("addr"))
        );
        assert_eq!(parse_bind_address("0").ok().flatten(), None);
        assert_eq!(parse_bind_address("").ok().flatten(), None);
        assert!(parse_bind_address("nope").is_err());
    }

    #[test]
    fn readiness_lists_pending_checks() {
        let r = Readiness::default();
        assert!(r.pending().is_empty());
        r.register("caches");
        r.register("controllers");
        assert_eq!(r.pending(), ["caches", "controllers"]);
        r.set("caches", true);
        assert_eq!(r.pending(), ["controllers"]);
        r.set("controllers", true);
        assert!(r.pending().is_empty());
    }
}
