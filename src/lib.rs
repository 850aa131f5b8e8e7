//! Cluster API add-on provider for Fleet.
//!
//! Layout (see `DESIGN.md`): [`api`] holds our CRD types, [`model`] the pure decisions,
//! [`names`] every name other software reads; the controllers, hooks and helm adapters are thin
//! layers over the model.

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
