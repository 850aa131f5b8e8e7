//! Pure decisions: no client, no I/O, no async. Everything here is table-tested.

pub mod capi;
pub mod config;
pub mod fleet;
pub mod selection;
pub mod validation;
pub mod version;
