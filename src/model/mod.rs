//! Pure decisions: no client, no I/O, no async. Everything here is table-tested.

pub mod capi;
pub mod config;
pub mod diff;
pub mod fleet;
pub mod import;
pub mod namespace;
pub mod selection;
pub mod validation;
pub mod version;
