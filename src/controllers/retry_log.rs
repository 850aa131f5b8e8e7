//! The log line of a failed reconcile that is retried, at the level
//! [`crate::model::retry::retry_level`] decides: WARN while a retry is expected to absorb it,
//! ERROR when a user must act or the retry delay reached its cap.

use std::time::Duration;

use tracing::Level;

use crate::Error;
use crate::controllers::backoff;
use crate::model::retry::{classify, retry_level};

/// The level for `error` retried after `delay`.
pub fn level(error: &Error, delay: Duration) -> Level {
    retry_level(classify(error.metric_label()), delay >= backoff::CAP)
}

/// Logs a retried reconcile failure at [`level`]: `retry_failed!(error, delay, fields…;
/// "message")`.
#[macro_export]
macro_rules! retry_failed {
    ($error:expr, $delay:expr, $($fields:tt)+) => {{
        let error: &$crate::Error = $error;
        let delay: std::time::Duration = $delay;
        if $crate::controllers::retry_log::level(error, delay) == tracing::Level::ERROR {
            tracing::error!(%error, retry_in = ?delay, $($fields)+);
        } else {
            tracing::warn!(%error, retry_in = ?delay, $($fields)+);
        }
    }};
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use kube::core::Status;
    use tracing_subscriber::prelude::*;
    use tracing_subscriber::{EnvFilter, fmt};

    use super::*;

    /// Captures what the production filter lets through, as text.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn captured(f: impl FnOnce()) -> String {
        let out = Captured::default();
        let writer = out.clone();
        let subscriber = tracing_subscriber::registry()
            .with(EnvFilter::new(crate::telemetry::default_filter(0)))
            .with(
                fmt::layer()
                    .with_ansi(false)
                    .with_writer(move || writer.clone()),
            );
        tracing::subscriber::with_default(subscriber, f);
        let bytes = out.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    fn api_error(code: u16) -> Error {
        Error::Kube(kube::Error::Api(
            Status::failure("injected", "Whatever")
                .with_code(code)
                .boxed(),
        ))
    }

    #[test]
    fn a_retried_500_warns_and_kube_clients_error_line_is_off() {
        let logs = captured(|| {
            // What kube-client's trace layer logs for every 5xx answer.
            tracing::error!(target: "kube_client::client::builder", "failed with status 500 Internal Server Error");
            crate::retry_failed!(
                &api_error(500),
                Duration::from_secs(5),
                cluster = "c1",
                "reconciling Cluster failed"
            );
        });
        assert!(!logs.contains("failed with status"), "{logs}");
        let line = logs
            .lines()
            .find(|l| l.contains("reconciling Cluster failed"))
            .unwrap_or_else(|| panic!("no retry line in {logs}"));
        assert!(line.contains(" WARN "), "{line}");
        assert!(line.contains("retry_in=5s"), "{line}");
    }

    #[test]
    fn errors_a_user_must_act_on_and_retries_at_the_cap_are_errors() {
        let logs = captured(|| {
            crate::retry_failed!(
                &api_error(403),
                Duration::from_secs(5),
                cluster = "c1",
                "forbidden one"
            );
            crate::retry_failed!(
                &api_error(500),
                backoff::CAP,
                cluster = "c1",
                "failing for minutes"
            );
        });
        for message in ["forbidden one", "failing for minutes"] {
            let line = logs
                .lines()
                .find(|l| l.contains(message))
                .unwrap_or_else(|| panic!("no line {message} in {logs}"));
            assert!(line.contains(" ERROR "), "{line}");
        }
    }
}
