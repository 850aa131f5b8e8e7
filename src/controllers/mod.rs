//! Controllers: thin adapters that gather inputs from caches, call the model and apply the
//! result.

pub mod authorization;
pub mod backoff;
pub mod config_watch;
pub mod fleet_config;
pub mod import;
pub mod misnamed_config;
#[path = "move/mod.rs"]
pub mod r#move;
pub mod reconcile;
pub mod retry_log;
pub mod watch_backoff;
pub mod watch_list;
