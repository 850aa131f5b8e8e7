//! The integration tests, one module per file of `tests/`, built as one test binary: every binary
//! links the whole provider, so one binary instead of forty saves gigabytes of disk and minutes of
//! linking. nextest still runs each test in its own process; select a file's tests by its module
//! (`cargo nextest run -E 'test(/^import::/)'`, or `cargo test --test integration import::`).

mod bench_common;
mod common;
mod fleet_common;

mod addon_guide;
mod agent_settings;
mod bad_config;
mod bench_hooks;
mod bench_import;
mod cache_footprint;
mod chaos;
mod chart;
mod cli;
mod clients;
mod config_names;
mod crd;
mod faults;
mod fleet_health;
mod fleet_install;
mod fleet_real_chart;
mod fleet_settings;
mod helm_runner;
mod hooks_abuse;
mod hooks_config;
mod hooks_patches;
mod hooks_sandbox;
mod hooks_tls;
mod import;
mod leader;
mod lifecycle_teardown_guide;
mod manifests;
mod move_preview;
mod observability;
mod oci_registry;
mod outage;
mod packaging;
mod playground;
mod rbac;
mod request_budget;
mod rollout_guide;
mod rollout_lint;
#[path = "move.rs"]
mod self_managed_move;
mod structure;
mod teardown;
mod turtles;
mod upgrade_steps;
mod upgrade_waves;
mod watch_list;
