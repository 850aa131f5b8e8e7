//! Pure decisions: no client, no I/O, no async. Everything here is table-tested.

pub mod agent_bootstrap;
pub mod agent_manifest;
pub mod agent_patch;
pub mod agent_settings;
pub mod api_server;
pub mod authorization;
pub mod capi;
pub mod chart_access;
pub mod config;
pub mod diff;
pub mod fleet;
pub mod fleet_agent_bundle;
pub mod fleet_health;
pub mod fleet_install;
pub mod fleet_status;
pub mod fleet_values;
pub mod hook_plan;
pub mod import;
pub mod json;
pub mod lease;
#[cfg(test)]
pub mod move_fixtures;
pub mod move_graph;
pub mod move_plan;
pub mod move_state;
pub mod move_target;
pub mod namespace;
pub mod plan;
pub mod registration_token;
pub mod retry;
pub mod selection;
pub mod teardown;
pub mod upgrade_steps;
pub mod validation;
pub mod version;
pub mod watch;
