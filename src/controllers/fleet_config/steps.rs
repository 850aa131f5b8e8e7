//! The steps of one reconcile, in order: check the spec, resolve the API server settings
//! ([`super::server`]), write the feature gates (values ConfigMap variant, [`super::settings`]),
//! then either install/upgrade Fleet with helm (`spec.install`, [`super::install`]) or keep
//! Fleet's `fleet-controller` ConfigMap in line (no `spec.install`).
//!
//! Each step reads what it needs, asks the model what to do, does it, and records a condition
//! in the [`Report`] ([`crate::model::fleet_status`]). The first failing step stops the
//! reconcile; conditions of steps not reached are kept as they were.

use crate::api::FleetAddonConfig;
use crate::context::Context;
use crate::helm::Helm;
use crate::model::config::EffectiveConfig;
use crate::model::fleet_status::{self, FLAGS_UPDATE, Report, Step};
use crate::model::fleet_values::ServerValues;

use super::{api_server_url, install, settings};

/// Runs every step for `config` and reports. Never fails: failures are in the report.
pub async fn run(
    ctx: &Context,
    helm: &Helm,
    object: &FleetAddonConfig,
    config: &EffectiveConfig,
) -> Report {
    let mut report = Report::new();
    let client = &ctx.controllers;

    // 1. The spec. Do not act on a section with problems; keep the last good state.
    if report.check_spec(config) {
        report.finish(config);
        return report;
    }

    // 2. API server URL and CA.
    let server = match &config.fleet.server {
        None => ServerValues::default(),
        Some(source) => match api_server_url::resolve(client, source).await {
            Ok(server) => server,
            Err(err) => {
                report.keep_install_state();
                report.fail(Step::ServerConfig, None, err);
                report.finish(config);
                return report;
            }
        },
    };

    // 3. Feature gates into a values ConfigMap (instead of the helm release).
    if let Some(reference) = &config.fleet.feature_gates_config_map {
        match settings::write_feature_gates(ctx, reference, config).await {
            Ok(()) => report.set(fleet_status::gates_written_to_config_map(reference, config)),
            Err(err) => {
                report.keep_install_state();
                report.fail(Step::FeatureGates, Some(FLAGS_UPDATE), err);
                report.finish(config);
                return report;
            }
        }
    }

    // 4. Fleet itself: installed by us, or by someone else.
    match (&config.install, &config.fleet.feature_gates_config_map) {
        (Some(install), None) => {
            install::install_fleet(ctx, helm, object, config, install, &server, &mut report).await;
        }
        (install, gates_config_map) => {
            if let (Some(_), Some(reference)) = (install, gates_config_map) {
                report.set(fleet_status::install_skipped(reference));
            }
            if config.fleet.server.is_some()
                && let Err(err) = settings::sync_fleet_controller(ctx, &server).await
            {
                report.fail(Step::FleetControllerConfig, None, err);
            }
        }
    }
    report.finish(config);
    report
}

/// Whether this provider installs Fleet with helm for `config` (otherwise someone else does,
/// and the API server settings go into Fleet's `fleet-controller` ConfigMap).
pub fn installs_fleet(config: &EffectiveConfig) -> bool {
    config.install.is_some() && config.fleet.feature_gates_config_map.is_none()
}
