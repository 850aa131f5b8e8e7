//! Logging setup: `tracing` with text or JSON output.

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

use crate::cli::LogFormat;

/// The default filter for a Go-style verbosity: 0-3 info, 4 debug, 5+ trace (our crate only;
/// dependencies stay at info/warn so `kube` does not flood the log).
///
/// kube-client's HTTP trace layer logs every 5xx answer at ERROR ("failed with status 500",
/// target `kube_client::client::builder`, kube-client 3.1 `src/client/builder.rs`), also those a
/// retry then absorbs. Those lines are off: the caller of the request logs the failure at the
/// level [`crate::model::retry`] decides (WARN while retried, ERROR when a user must act).
pub fn default_filter(verbosity: u8) -> String {
    let ours = match verbosity {
        0..=3 => "info",
        4 => "debug",
        _ => "trace",
    };
    format!(
        "warn,{KUBE_CLIENT_HTTP_TARGET}=off,caapf={ours},cluster_api_addon_provider_fleet={ours}"
    )
}

/// The `tracing` target of kube-client's HTTP trace layer.
pub const KUBE_CLIENT_HTTP_TARGET: &str = "kube_client::client::builder";

/// A `RUST_LOG` filter with kube-client's per-response ERROR lines off too, unless it says
/// something about `kube_client` itself (then it is taken as written).
pub fn env_filter_spec(rust_log: &str) -> String {
    if rust_log.contains("kube_client") {
        rust_log.to_string()
    } else if rust_log.trim().is_empty() {
        format!("{KUBE_CLIENT_HTTP_TARGET}=off")
    } else {
        format!("{rust_log},{KUBE_CLIENT_HTTP_TARGET}=off")
    }
}

/// Installs the global subscriber. `RUST_LOG`, when set, overrides the verbosity.
pub fn init(format: LogFormat, verbosity: u8) {
    let filter = match std::env::var(EnvFilter::DEFAULT_ENV) {
        Ok(rust_log) => EnvFilter::try_new(env_filter_spec(&rust_log))
            .unwrap_or_else(|_| EnvFilter::new(default_filter(verbosity))),
        Err(_) => EnvFilter::new(default_filter(verbosity)),
    };
    let registry = tracing_subscriber::registry().with(filter);
    let result = match format {
        LogFormat::Json => registry
            .with(
                fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_current_span(false),
            )
            .try_init(),
        LogFormat::Text => registry.with(fmt::layer().with_target(false)).try_init(),
    };
    // A second init (tests) keeps the first subscriber.
    let _ = result;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_log_keeps_kube_clients_error_lines_off_unless_it_names_kube_client() {
        for (rust_log, want) in [
            ("info", "info,kube_client::client::builder=off"),
            ("", "kube_client::client::builder=off"),
            (
                "warn,caapf=debug",
                "warn,caapf=debug,kube_client::client::builder=off",
            ),
            ("kube_client=debug", "kube_client=debug"),
        ] {
            assert_eq!(env_filter_spec(rust_log), want, "{rust_log:?}");
        }
        assert!(default_filter(0).contains("kube_client::client::builder=off"));
    }
}
