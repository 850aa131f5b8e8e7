//! Controllers: thin adapters that gather inputs from caches, call the model and apply the
//! result.

pub mod config_watch;
pub mod fleet_config;
