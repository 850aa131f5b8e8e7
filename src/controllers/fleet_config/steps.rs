//! The steps of one reconcile, in order: check the spec, resolve the API server settings, write
//! the feature gates (values ConfigMap variant), then either install/upgrade Fleet with helm
//! (`spec.install`) or keep Fleet's `fleet-controller` ConfigMap in line (no `spec.install`).
//!
//! Each step reads what it needs, asks the model what to do, does it, and records a condition.
//! The first failing step stops the reconcile; conditions of steps not reached are kept as they
//! were.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Endpoints, ObjectReference, Secret};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams};
use kube::runtime::events::EventType;
use kube::{Client, Resource};

use crate::api::FleetAddonConfig;
use crate::context::Context;
use crate::helm::argv::{ChartSource, Operation};
use crate::helm::scrub::{self, ResolveFailure};
use crate::helm::{Helm, Release};
use crate::model::api_server::{self, CA_KEY, KUBERNETES_SERVICE, KUBERNETES_SERVICE_NAMESPACE};
use crate::model::config::{EffectiveConfig, InstallSettings, InstallTarget, ServerSource};
use crate::model::fleet_install::{self, ReleaseAction, UpgradeReason};
use crate::model::fleet_status::{
    CONFIG_VALID, ConditionSpec, ConditionUpdate, FLAGS_UPDATE, INSTALLED, OWNED_TYPES, READY,
    REPO_ADD, REPO_UPDATE, VersionUpdate, selection_frozen,
};
use crate::model::fleet_values::{self, ServerValues};
use crate::{Error, apply, names};

/// A step that can fail; its name appears in `Ready`'s reason (`<Step>Failed`) and message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    ServerConfig,
    FeatureGates,
    Helm,
    RepoAdd,
    RepoUpdate,
    Install,
    FleetControllerConfig,
}

impl Step {
    pub fn name(self) -> &'static str {
        match self {
            Step::ServerConfig => "ServerConfig",
            Step::FeatureGates => "FeatureGates",
            Step::Helm => "Helm",
            Step::RepoAdd => "RepoAdd",
            Step::RepoUpdate => "RepoUpdate",
            Step::Install => "Install",
            Step::FleetControllerConfig => "FleetControllerConfig",
        }
    }

    fn reason(self) -> String {
        format!("{}Failed", self.name())
    }
}

/// What one reconcile found and did.
pub struct Report {
    pub updates: BTreeMap<&'static str, ConditionUpdate>,
    pub version: VersionUpdate,
    pub failure: Option<(Step, Error)>,
    /// The spec has problems (reported in `ConfigValid`; not retried until it changes).
    pub invalid: bool,
}

impl Report {
    fn new() -> Self {
        Self {
            updates: OWNED_TYPES
                .iter()
                .map(|t| (*t, ConditionUpdate::Remove))
                .collect(),
            version: VersionUpdate::Remove,
            failure: None,
            invalid: false,
        }
    }

    fn set(&mut self, condition: ConditionSpec) {
        self.updates
            .insert(condition.type_, ConditionUpdate::Set(condition));
    }

    fn keep(&mut self, types: &[&'static str]) {
        for t in types {
            self.updates.insert(t, ConditionUpdate::Keep);
        }
    }

    /// Records a failed step: its condition (if it has one) and the failure for `Ready`.
    fn fail(&mut self, step: Step, condition: Option<&'static str>, error: Error) {
        if let Some(type_) = condition {
            self.set(ConditionSpec::failed(
                type_,
                &step.reason(),
                error.to_string(),
            ));
        }
        self.failure = Some((step, error));
    }
}

/// The repository URL without user information, for messages.
fn display_repository(url: &str) -> String {
    scrub::redact(url)
}

/// Runs every step for `config` and reports. Never fails: failures are in the report.
pub async fn run(
    ctx: &Context,
    helm: &Helm,
    object: &FleetAddonConfig,
    config: &EffectiveConfig,
) -> Report {
    let mut report = Report::new();
    let client = &ctx.controllers;

    // 1. The spec.
    if config.problems.is_empty() {
        report.set(ConditionSpec::ok(CONFIG_VALID, "The spec is valid"));
    } else {
        let problems: Vec<String> = config.problems.iter().map(ToString::to_string).collect();
        report.set(ConditionSpec::failed(
            CONFIG_VALID,
            "Invalid",
            problems.join("; "),
        ));
        report.invalid = true;
    }
    let cluster_problems: Vec<String> = config
        .problems_under("spec.cluster")
        .map(ToString::to_string)
        .collect();
    if let Some(frozen) = selection_frozen(&cluster_problems) {
        report.set(frozen);
    }
    let blocked = config.problems_under("spec.install").next().is_some()
        || config.problems_under("spec.config").next().is_some();
    if blocked {
        // Do not act on a section with problems; keep the last good state.
        report.keep(&[REPO_ADD, REPO_UPDATE, INSTALLED, FLAGS_UPDATE]);
        report.version = VersionUpdate::Keep;
        set_ready(&mut report, config);
        return report;
    }

    // 2. API server URL and CA.
    let server = match &config.fleet.server {
        None => ServerValues::default(),
        Some(source) => match resolve_server(client, source).await {
            Ok(server) => server,
            Err(err) => {
                report.keep(&[REPO_ADD, REPO_UPDATE, INSTALLED, FLAGS_UPDATE]);
                report.version = VersionUpdate::Keep;
                report.fail(Step::ServerConfig, None, err);
                set_ready(&mut report, config);
                return report;
            }
        },
    };

    // 3. Feature gates into a values ConfigMap (instead of the helm release).
    if let Some(reference) = &config.fleet.feature_gates_config_map {
        match write_feature_gates(client, reference, config).await {
            Ok(()) => report.set(ConditionSpec::ok(
                FLAGS_UPDATE,
                format!(
                    "Feature gates written to ConfigMap {}/{} key {}: {}",
                    reference.namespace.as_deref().unwrap_or_default(),
                    reference.name.as_deref().unwrap_or_default(),
                    names::FEATURE_GATES_VALUES_KEY,
                    fleet_values::gate_summary(&config.fleet)
                ),
            )),
            Err(err) => {
                report.keep(&[REPO_ADD, REPO_UPDATE, INSTALLED]);
                report.version = VersionUpdate::Keep;
                report.fail(Step::FeatureGates, Some(FLAGS_UPDATE), err);
                set_ready(&mut report, config);
                return report;
            }
        }
    }

    // 4. Fleet itself: installed by us, or by someone else.
    match (&config.install, &config.fleet.feature_gates_config_map) {
        (Some(install), None) => {
            install_fleet(ctx, helm, object, config, install, &server, &mut report).await;
        }
        (install, gates_config_map) => {
            if let (Some(_), Some(reference)) = (install, gates_config_map) {
                report.set(ConditionSpec::failed(
                    INSTALLED,
                    "Skipped",
                    format!(
                        "spec.install is ignored while spec.config.featureGates.configMap.ref is set ({}/{}): Fleet is managed by whoever reads that ConfigMap",
                        reference.namespace.as_deref().unwrap_or_default(),
                        reference.name.as_deref().unwrap_or_default()
                    ),
                ));
            }
            if config.fleet.server.is_some()
                && let Err(err) = sync_fleet_controller(client, &server).await
            {
                report.fail(Step::FleetControllerConfig, None, err);
            }
        }
    }
    set_ready(&mut report, config);
    report
}

/// Whether this provider installs Fleet with helm for `config` (otherwise someone else does,
/// and the API server settings go into Fleet's `fleet-controller` ConfigMap).
pub fn installs_fleet(config: &EffectiveConfig) -> bool {
    config.install.is_some() && config.fleet.feature_gates_config_map.is_none()
}

fn set_ready(report: &mut Report, config: &EffectiveConfig) {
    let ready = if let Some((step, err)) = &report.failure {
        ConditionSpec::failed(READY, &step.reason(), format!("{}: {err}", step.name()))
    } else if report.invalid {
        ConditionSpec::failed(
            READY,
            "ConfigInvalid",
            "The spec has problems, see the ConfigValid condition",
        )
    } else if let VersionUpdate::Set(version) = &report.version {
        ConditionSpec::ok(
            READY,
            format!("Fleet {version} is installed and configured"),
        )
    } else if config.fleet.server.is_some() || config.fleet.feature_gates_config_map.is_some() {
        ConditionSpec::ok(READY, "Fleet settings are in place")
    } else {
        ConditionSpec::ok(
            READY,
            "Nothing to do: spec.install and spec.config.server are not set",
        )
    };
    report.set(ready);
}

/// Reads the API server URL and CA from where `source` says.
async fn resolve_server(client: &Client, source: &ServerSource) -> Result<ServerValues, Error> {
    match source {
        ServerSource::InferLocal => {
            let config_maps: Api<ConfigMap> =
                Api::namespaced(client.clone(), KUBERNETES_SERVICE_NAMESPACE);
            let name = format!(
                "{KUBERNETES_SERVICE_NAMESPACE}/{}",
                api_server::ROOT_CA_CONFIG_MAP
            );
            let root_ca = config_maps
                .get_opt(api_server::ROOT_CA_CONFIG_MAP)
                .await?
                .ok_or_else(|| Error::Missing {
                    kind: "ConfigMap",
                    name: name.clone(),
                    reason: "inferLocal reads the cluster CA from it".to_string(),
                })?;
            let ca_pem = api_server::ca_from_config_map(&root_ca, CA_KEY).map_err(|reason| {
                Error::Malformed {
                    kind: "ConfigMap",
                    name,
                    reason,
                }
            })?;
            let slices: Api<EndpointSlice> =
                Api::namespaced(client.clone(), KUBERNETES_SERVICE_NAMESPACE);
            let slices = slices
                .list(&ListParams::default().labels(&format!(
                    "{}={KUBERNETES_SERVICE}",
                    api_server::SERVICE_NAME_LABEL
                )))
                .await?
                .items;
            let endpoints = if api_server::url_from_endpoint_slices(&slices).is_some() {
                None
            } else {
                let api: Api<Endpoints> =
                    Api::namespaced(client.clone(), KUBERNETES_SERVICE_NAMESPACE);
                api.get_opt(KUBERNETES_SERVICE).await?
            };
            let url = api_server::infer_url(&slices, endpoints.as_ref()).map_err(|reason| {
                Error::Missing {
                    kind: "Service endpoints",
                    name: format!("{KUBERNETES_SERVICE_NAMESPACE}/{KUBERNETES_SERVICE}"),
                    reason,
                }
            })?;
            Ok(ServerValues {
                url: Some(url),
                ca_pem: Some(ca_pem),
            })
        }
        ServerSource::Custom { url, ca_ref } => {
            let ca_pem = match ca_ref {
                None => None,
                Some(reference) => Some(read_ca(client, reference).await?),
            };
            Ok(ServerValues {
                url: url.clone(),
                ca_pem,
            })
        }
    }
}

/// The PEM CA under `ca.crt` of the referenced ConfigMap (default) or Secret.
async fn read_ca(client: &Client, reference: &ObjectReference) -> Result<String, Error> {
    let namespace = reference.namespace.as_deref().unwrap_or_default();
    let name = reference.name.as_deref().unwrap_or_default();
    let full = format!("{namespace}/{name}");
    let field = "spec.config.server.custom.apiServerCaConfigRef";
    if namespace.is_empty() || name.is_empty() {
        return Err(Error::InvalidConfig(format!(
            "{field}: name and namespace are required"
        )));
    }
    if reference.kind.as_deref() == Some("Secret") {
        let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
        let secret = api.get_opt(name).await?.ok_or_else(|| Error::Missing {
            kind: "Secret",
            name: full.clone(),
            reason: format!("{field} names it"),
        })?;
        api_server::ca_from_secret(&secret, CA_KEY).map_err(|reason| Error::Malformed {
            kind: "Secret",
            name: full,
            reason,
        })
    } else {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
        let config_map = api.get_opt(name).await?.ok_or_else(|| Error::Missing {
            kind: "ConfigMap",
            name: full.clone(),
            reason: format!("{field} names it"),
        })?;
        api_server::ca_from_config_map(&config_map, CA_KEY).map_err(|reason| Error::Malformed {
            kind: "ConfigMap",
            name: full,
            reason,
        })
    }
}

/// Changes one data key of a ConfigMap with `change` (which returns the new text, or `None` when
/// nothing changes), with a JSON merge patch of that key only, conditional on the
/// resourceVersion read (so a concurrent writer is never overwritten: [`apply::merge_patch_guarded`]
/// reads again instead).
async fn update_config_map_key(
    client: &Client,
    namespace: &str,
    name: &str,
    key: &str,
    missing_reason: &str,
    change: impl Fn(Option<&str>) -> Result<Option<String>, String>,
) -> Result<bool, Error> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let full = format!("{namespace}/{name}");
    let written = apply::merge_patch_guarded(&api, name, names::FIELD_MANAGER, |config_map| {
        let config_map = config_map.ok_or_else(|| Error::Missing {
            kind: "ConfigMap",
            name: full.clone(),
            reason: missing_reason.to_string(),
        })?;
        let current = config_map.data.as_ref().and_then(|d| d.get(key));
        let next = change(current.map(String::as_str)).map_err(|reason| Error::Malformed {
            kind: "ConfigMap",
            name: full.clone(),
            reason: format!("data.{key} {reason}"),
        })?;
        Ok(next.map(|next| serde_json::json!({"data": {key: next}})))
    })
    .await?;
    if written {
        tracing::info!(config_map = %full, key, "updated");
    }
    Ok(written)
}

/// The feature gates into the `fleet` values key of the referenced ConfigMap.
async fn write_feature_gates(
    client: &Client,
    reference: &ObjectReference,
    config: &EffectiveConfig,
) -> Result<(), Error> {
    let namespace = reference.namespace.as_deref().unwrap_or_default();
    let name = reference.name.as_deref().unwrap_or_default();
    update_config_map_key(
        client,
        namespace,
        name,
        names::FEATURE_GATES_VALUES_KEY,
        "spec.config.featureGates.configMap.ref names it",
        |current| fleet_values::gates_in_values_yaml(current, &config.fleet),
    )
    .await
    .map(drop)
}

/// `apiServerURL`/`apiServerCA` into Fleet's `fleet-controller` ConfigMap.
async fn sync_fleet_controller(client: &Client, server: &ServerValues) -> Result<(), Error> {
    update_config_map_key(
        client,
        names::DEFAULT_FLEET_NAMESPACE,
        names::FLEET_CONTROLLER_CONFIG_MAP,
        names::FLEET_CONTROLLER_CONFIG_KEY,
        "Fleet is not installed (set spec.install to install it)",
        |current| match current {
            Some(text) => fleet_values::fleet_controller_config(text, server),
            None => Err("is missing".to_string()),
        },
    )
    .await
    .map(drop)
}

/// Installs or upgrades `fleet-crd`, then `fleet`.
async fn install_fleet(
    ctx: &Context,
    helm: &Helm,
    object: &FleetAddonConfig,
    config: &EffectiveConfig,
    install: &InstallSettings,
    server: &ServerValues,
    report: &mut Report,
) {
    let source = ChartSource::parse(&install.repository);
    let repository = display_repository(&install.repository);
    report.version = VersionUpdate::Keep;
    report.keep(&[REPO_ADD, REPO_UPDATE, INSTALLED, FLAGS_UPDATE]);

    if let Err(err) = helm.major().await {
        report.fail(Step::Helm, Some(INSTALLED), err);
        return;
    }

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
                let message = err.to_string();
                match scrub::classify_resolve_failure(&message) {
                    ResolveFailure::Unreachable => {
                        report.fail(Step::RepoAdd, Some(REPO_ADD), err);
                    }
                    ResolveFailure::ChartMissing => {
                        report.set(ConditionSpec::ok(
                            REPO_ADD,
                            format!("Chart repository {repository} is reachable"),
                        ));
                        report.fail(Step::RepoUpdate, Some(REPO_UPDATE), err);
                    }
                }
                return;
            }
        }
    }
    let (crd_chart, fleet_chart) = (&charts[0], &charts[1]);
    report.set(ConditionSpec::ok(
        REPO_ADD,
        format!("Chart repository {repository} is reachable"),
    ));
    report.set(ConditionSpec::ok(
        REPO_UPDATE,
        format!(
            "{} available: fleet-crd {}, fleet {}",
            if pinned.is_some() {
                "Pinned version"
            } else {
                "Latest version"
            },
            crd_chart.version_text,
            fleet_chart.version_text
        ),
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
        report.fail(Step::Install, Some(INSTALLED), err);
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
        report.fail(Step::Install, Some(INSTALLED), err);
        return;
    }

    let crd_version = fleet_install::resulting_version(&crd_action).unwrap_or_default();
    let fleet_version = fleet_install::resulting_version(&fleet_action)
        .unwrap_or_default()
        .to_string();
    report.set(ConditionSpec::ok(
        INSTALLED,
        format!(
            "fleet-crd {crd_version} and fleet {fleet_version} are installed in namespace {}",
            install.namespace
        ),
    ));
    report.set(ConditionSpec::ok(
        FLAGS_UPDATE,
        format!(
            "Feature gates are set in the fleet release: {}",
            fleet_values::gate_summary(&config.fleet)
        ),
    ));
    report.version = VersionUpdate::Set(fleet_version);
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
        let (operation, version, note) = match action {
            ReleaseAction::Keep { .. } => return Ok(()),
            ReleaseAction::Blocked { message } => {
                return Err(Error::Helm {
                    step: "upgrade",
                    message: message.clone(),
                });
            }
            ReleaseAction::Install { version } => (
                Operation::Install,
                version,
                format!("Installed {release} version {version}"),
            ),
            ReleaseAction::Upgrade { from, to, reason } => (
                Operation::Upgrade,
                to,
                match reason {
                    UpgradeReason::Version => format!("Upgraded {release} from {from} to {to}"),
                    UpgradeReason::Values => format!("Upgraded {release} {to} with new values"),
                    UpgradeReason::Repair => {
                        format!("Upgraded {release} {to} again after a failed operation")
                    }
                },
            ),
        };
        tracing::info!(release, ?action, "helm");
        let regarding = self.object.object_ref(&());
        let target = Release {
            name: release,
            chart: release,
            source: self.source,
            namespace: self.namespace,
        };
        match self.helm.deploy(operation, &target, version, values).await {
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
                    Error::Helm { step, message } => Error::Helm {
                        step,
                        message: format!("{release}: {message}"),
                    },
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
