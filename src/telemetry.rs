//! Logging setup: `tracing` with text or JSON output.

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

use crate::cli::LogFormat;

/// The default filter for a Go-style verbosity: 0-3 info, 4 debug, 5+ trace (our crate only;
/// dependencies stay at info/warn so `kube` does not flood the log).
pub fn default_filter(verbosity: u8) -> String {
    let ours = match verbosity {
        0..=3 => "info",
        4 => "debug",
        _ => "trace",
    };
    format!("warn,caapf={ours},cluster_api_addon_provider_fleet={ours}")
}

/// Installs the global subscriber. `RUST_LOG`, when set, overrides the verbosity.
pub fn init(format: LogFormat, verbosity: u8) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(default_filter(verbosity)));
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
