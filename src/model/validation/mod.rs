//! Checks of a `FleetAddonConfig` spec that the CRD schema cannot express, by concern: the
//! spec's own rules (`spec.rs`: repositories, credentials, durations, regular expressions, the
//! server and installation choices), the Fleet agent settings (`agent.rs`, which the
//! `agent-settings` annotations are checked with too: [`crate::model::agent_settings`]) and
//! Kubernetes' grammar of names, labels and selectors (`grammar.rs`) where the schema cannot say
//! it. What the schema says (label values and operators, Secret references, the Fleet Cluster
//! naming, `spec.install.namespace`: `crate::api::fleet_addon_config`) the API server
//! refuses with the field path before it reaches us. One pure function returns every problem
//! with its field path; controllers report the list in status.

mod agent;
mod grammar;
mod spec;

pub use agent::{is_quantity, validate_agent_overrides, validate_agent_settings};
pub use grammar::validate_label_selector;
pub use spec::{compile_anchored, is_allowed_repository, validate, without_credentials};

/// One problem in the spec, with the field path it concerns.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct FieldError {
    /// Path in the object, e.g. `spec.cluster.namespaceRegexes[1]`.
    pub path: String,
    /// What is wrong, and what would be right.
    pub message: String,
}

impl FieldError {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}
