//! Installs or upgrades Fleet's two releases (`fleet-crd`, then `fleet`) with helm
//! (`spec.install`): resolves the target charts from the repository, asks
//! [`crate::model::fleet_install`] what each release needs, runs it, and records the
//! conditions and Events. The decisions (which release action, which condition text) are the
//! model's; this file only runs helm and reports.

use kube::Resource;
use kube::runtime::events::EventType;

use crate::api::FleetAddonConfig;
use crate::context::Context;
use crate::helm::argv::{ChartSource, Operation};
use crate::helm::{Helm, Release, access, scrub};
use crate::model::chart_access;
use crate::model::config::{EffectiveConfig, InstallSettings, InstallTarget};
use crate::model::fleet_install::{self, ReleaseAction, ReleaseStep};
use crate::model::fleet_status::{INSTALLED, REPO_ADD, Report, Step, VersionUpdate};
use crate::model::fleet_values::{self, ServerValues};
use crate::{Error, names};

/// Installs or upgrades `fleet-crd`, then `fleet`, recording what happened in `report`.
pub async fn install_fleet(
    ctx: &Context,
    helm: &Helm,
    object: &FleetAddonConfig,
    config: &EffectiveConfig,
    install: &InstallSettings,
    server: &ServerValues,
    report: &mut Report,
) {
    // The repository URL without user information, for messages.
    let repository = scrub::redact(&install.repository);
    report.keep_install_state();

    if let Err(err) = helm.major().await {
        report.fail(Step::Helm, Some(INSTALLED), err);
        return;
    }

    // The credentials and CA the spec names, as private files for this reconcile's commands.
    // A Secret that cannot be read or used fails like an unreachable repository.
    let files = match access::read(&ctx.controllers, &install.access, &install.repository).await {
        Ok(data) => (helm
            .access_files(data, &install.repository, &install.access)
            .await)
            .map_err(|err| explained(err, install)),
        Err(message) => Err(Error::InvalidConfig(message)),
    };
    let files = match files {
        Ok(files) => files,
        Err(err) => {
            report.fail(Step::RepoAdd, Some(REPO_ADD), err);
            return;
        }
    };
    let source = files.source(&install.repository, &install.access);

    // Resolve the target charts from the repository (this fetches its index).
    let pinned = match &install.target {
        InstallTarget::Pinned { written, .. } => Some(written.as_str()),
        InstallTarget::Latest { .. } => None,
    };
    let mut charts = Vec::new();
    for chart in [names::FLEET_CRD_RELEASE, names::FLEET_RELEASE] {
        match helm.show_chart(&source, chart, pinned).await {
            Ok(info) => charts.push(info),
            Err(err) => {
                let failure = scrub::classify_resolve_failure(&err.to_string());
                let (step, type_, reached) = fleet_install::resolve_failed(failure, &repository);
                if let Some(reached) = reached {
                    report.set(reached);
                }
                report.fail(step, Some(type_), explained(err, install));
                return;
            }
        }
    }
    let (crd_chart, fleet_chart) = (&charts[0], &charts[1]);
    report.set(fleet_install::repository_reachable(&repository));
    report.set(fleet_install::charts_resolved(
        pinned.is_some(),
        crd_chart,
        fleet_chart,
    ));

    let releases = match helm
        .list(
            &install.namespace,
            &[names::FLEET_CRD_RELEASE, names::FLEET_RELEASE],
        )
        .await
    {
        Ok(releases) => releases,
        Err(err) => {
            report.fail(Step::Install, Some(INSTALLED), err);
            return;
        }
    };
    let installed = |name: &str| releases.iter().find(|r| r.name == name);
    let fleet_installed = installed(names::FLEET_RELEASE);
    if let Some(version) = fleet_installed.and_then(|r| r.chart_version_text.clone()) {
        report.version = VersionUpdate::Set(version);
    }

    let installer = Installer {
        ctx,
        helm,
        object,
        source: &source,
        namespace: &install.namespace,
    };

    // fleet-crd: no values.
    let crd_action = fleet_install::plan_release(
        &install.target,
        installed(names::FLEET_CRD_RELEASE),
        crd_chart,
        true,
    );
    if let Err(err) = installer
        .execute(names::FLEET_CRD_RELEASE, &crd_action, None)
        .await
    {
        report.fail(Step::Install, Some(INSTALLED), explained(err, install));
        return;
    }

    // fleet: values compared with what the release has.
    let desired = fleet_values::fleet_chart_values(&install.values, &config.fleet, server);
    let values_match = match fleet_installed {
        Some(release) if release.status == "deployed" => {
            match helm
                .get_values(names::FLEET_RELEASE, &install.namespace)
                .await
            {
                Ok(current) => fleet_install::values_match(&current, &desired),
                Err(err) => {
                    report.fail(Step::Install, Some(INSTALLED), err);
                    return;
                }
            }
        }
        _ => false,
    };
    let fleet_action =
        fleet_install::plan_release(&install.target, fleet_installed, fleet_chart, values_match);
    if let Err(err) = installer
        .execute(names::FLEET_RELEASE, &fleet_action, Some(&desired))
        .await
    {
        report.fail(Step::Install, Some(INSTALLED), explained(err, install));
        return;
    }
    drop(files);

    let crd_version = fleet_install::resulting_version(&crd_action).unwrap_or_default();
    let fleet_version = fleet_install::resulting_version(&fleet_action)
        .unwrap_or_default()
        .to_string();
    for condition in
        fleet_install::installed(crd_version, &fleet_version, &install.namespace, config)
    {
        report.set(condition);
    }
    report.version = VersionUpdate::Set(fleet_version);
}

/// A helm failure with what it means for the repository's settings, if that is known
/// ([`chart_access::explain`]).
fn explained(err: Error, install: &InstallSettings) -> Error {
    match err {
        Error::Helm { step, message } => Error::helm(
            step,
            chart_access::explain(&message, &install.repository, &install.access),
        ),
        other => other,
    }
}

/// What carrying out a release decision needs.
struct Installer<'a> {
    ctx: &'a Context,
    helm: &'a Helm,
    object: &'a FleetAddonConfig,
    source: &'a ChartSource,
    namespace: &'a str,
}

impl Installer<'_> {
    /// Carries out one release decision, with an Event for every change.
    async fn execute(
        &self,
        release: &'static str,
        action: &ReleaseAction,
        values: Option<&serde_json::Map<String, serde_json::Value>>,
    ) -> Result<(), Error> {
        let (operation, version, note) = match fleet_install::release_step(release, action) {
            ReleaseStep::Nothing => return Ok(()),
            ReleaseStep::Refuse(message) => {
                return Err(Error::helm("upgrade", message));
            }
            ReleaseStep::Run {
                upgrade,
                version,
                note,
            } => {
                let operation = if upgrade {
                    Operation::Upgrade
                } else {
                    Operation::Install
                };
                (operation, version, note)
            }
        };
        tracing::info!(release, ?action, "helm");
        let regarding = self.object.object_ref(&());
        let target = Release {
            name: release,
            chart: release,
            source: self.source,
            namespace: self.namespace,
        };
        match self.helm.deploy(operation, &target, &version, values).await {
            Ok(()) => {
                self.ctx
                    .event(
                        &regarding,
                        EventType::Normal,
                        "FleetInstalled",
                        "Helm",
                        note,
                    )
                    .await;
                Ok(())
            }
            Err(err) => {
                let err = match err {
                    Error::Helm { step, message } => {
                        Error::helm(step, format!("{release}: {message}"))
                    }
                    other => other,
                };
                self.ctx
                    .event(
                        &regarding,
                        EventType::Warning,
                        "FleetInstallFailed",
                        "Helm",
                        err.to_string(),
                    )
                    .await;
                Err(err)
            }
        }
    }
}
