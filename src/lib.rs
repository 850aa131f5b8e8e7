//! Cluster API add-on provider for Fleet.
//!
//! Layout (docs/development.md, "Where things are"): [`model`] holds the pure decisions, on the
//! ground floor with [`api`] (our CRD types and the cached forms of watched objects), [`names`]
//! (every name other software reads) and [`error`]; the controllers, hooks and helm adapters
//! are thin layers over the model, and every write goes through [`apply`].

pub mod api;
pub mod apply;
pub mod cleanup;
pub mod cli;
pub mod client;
pub mod context;
pub mod controllers;
pub mod error;
pub mod helm;
pub mod hooks;
pub mod leader;
pub mod manager;
pub mod metrics;
pub mod model;
pub mod move_preview;
pub mod names;
pub mod probes;
pub mod telemetry;

pub use error::{Error, Result};
