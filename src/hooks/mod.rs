//! The Cluster API Runtime SDK extension: an HTTPS server answering lifecycle and topology
//! mutation hooks (see `docs/runtime-extension.md`).
//!
//! - [`types`]: the wire format (hand-written serde types);
//! - [`cluster`]: the embedded Cluster, v1beta1 or v1beta2, decoded by shape;
//! - [`handlers`]: one function per hook, over the hooks' own [`hook_context`];
//! - [`bootstrap_secrets`]: which bootstrap Secrets exist (a watch), so that hooks answer
//!   without a request to the API server at steady state;
//! - [`tls`]: the serving certificate, reloaded when cert-manager rotates it;
//! - [`limits`]: the body budget, body reader and idle tracking that bound memory under abuse;
//! - [`server`]: routing, limits, timeouts, metrics;
//! - [`workload_cluster`]: what BeforeClusterDelete asks a workload cluster during a teardown.

pub mod bootstrap_secrets;
pub mod cluster;
pub mod handlers;
pub mod hook_context;
pub mod limits;
pub mod server;
pub mod tls;
pub mod types;
pub mod workload_cluster;
