//! The one error type of the provider. Each variant is a cause; [`Error::metric_label`] gives a
//! bounded label for metrics (never an object name or a message).

use std::time::Duration;

/// Provider errors.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),

    /// No usable kubeconfig or in-cluster configuration.
    #[error("no Kubernetes configuration: {0}")]
    KubeConfig(String),

    /// The `FleetAddonConfig` spec has problems (each with its field path).
    #[error("invalid FleetAddonConfig: {0}")]
    InvalidConfig(String),

    /// An object we read does not have the shape we need.
    #[error("unexpected {kind} {name}: {reason}")]
    Malformed {
        kind: &'static str,
        name: String,
        reason: String,
    },

    /// An object we need does not exist (yet); the reason says what to do.
    #[error("{kind} {name} not found: {reason}")]
    Missing {
        kind: &'static str,
        name: String,
        reason: String,
    },

    /// Encoding or decoding JSON/YAML failed.
    #[error("serialization: {0}")]
    Serialization(String),

    /// A helm command failed (stderr already trimmed and scrubbed of secrets).
    #[error("helm {step}: {message}")]
    Helm { step: &'static str, message: String },

    /// A step did not finish in time.
    #[error("{what} timed out after {after:?}")]
    Timeout { what: &'static str, after: Duration },

    /// Local I/O (files, processes, sockets).
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),

    /// This replica lost the leader Lease; it stops so that it restarts as a candidate.
    #[error("leader election lost: {0}")]
    LeadershipLost(String),

    /// The finalizer helper failed in apply or cleanup.
    #[error("finalizer: {0}")]
    Finalizer(String),
}

impl Error {
    /// [`Error::Malformed`]: `kind` `name` does not have the shape we need, for `reason`.
    pub fn malformed(
        kind: &'static str,
        name: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        Error::Malformed {
            kind,
            name: name.into(),
            reason: reason.into(),
        }
    }

    /// [`Error::Missing`]: `kind` `name` does not exist (yet); `reason` says what to do.
    pub fn missing(kind: &'static str, name: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::Missing {
            kind,
            name: name.into(),
            reason: reason.into(),
        }
    }

    /// [`Error::Helm`]: helm `step` failed with `message`.
    pub fn helm(step: &'static str, message: impl Into<String>) -> Self {
        Error::Helm {
            step,
            message: message.into(),
        }
    }

    /// A label with few possible values, for the `reason` of error metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(kube::Error::Api(status)) => match status.code {
                404 => "not_found",
                409 => "conflict",
                422 => "invalid",
                429 => "throttled",
                403 => "forbidden",
                401 => "unauthorized",
                500..=599 => "server_error",
                _ => "api_error",
            },
            Error::Kube(_) => "kube_client",
            Error::KubeConfig(_) => "kubeconfig",
            Error::InvalidConfig(_) => "invalid_config",
            Error::Malformed { .. } => "malformed_object",
            Error::Missing { .. } => "missing_object",
            Error::Serialization(_) => "serialization",
            Error::Helm { .. } => "helm",
            Error::Timeout { .. } => "timeout",
            Error::Io(_) => "io",
            Error::Finalizer(_) => "finalizer",
            Error::LeadershipLost(_) => "leadership_lost",
        }
    }
}

impl From<serde_json::Error> for Error {
    fn from(err: serde_json::Error) -> Self {
        Error::Serialization(err.to_string())
    }
}

impl From<serde_yaml::Error> for Error {
    fn from(err: serde_yaml::Error) -> Self {
        Error::Serialization(err.to_string())
    }
}

/// Result with the provider's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
