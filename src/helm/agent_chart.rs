//! Fleet's `fleet-agent` chart, pulled and rendered with `helm template` for the bootstrap Secret
//! (the values and what is made of the rendering: [`crate::model::agent_manifest`]).
//!
//! The chart comes from the configured chart repository (FleetAddonConfig
//! `spec.runtimeExtension.agentChartRepository`, else `spec.install.repository`, default Fleet's
//! public one; HTTP or OCI, with the credentials and CA of
//! [`crate::model::config::EffectiveConfig::agent_chart_access`]) at the version of the
//! Fleet that is installed, so the agent a new cluster starts is the agent of that Fleet release
//! (Fleet publishes `fleet`, `fleet-crd` and `fleet-agent` with one version). Each archive is
//! pulled once per process and version (at most [`MAX_CACHED_ARCHIVES`] kept), then rendered
//! offline for each cluster: rendering runs beside a Fleet install, never behind it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::Mutex;

use crate::helm::scrub::redact;
use crate::helm::{Helm, HelmSettings, access};
use crate::metrics::Metrics;
use crate::model::agent_manifest::{
    AGENT_NAME, BootstrapInput, ChartLocation, chart_values, finish,
};
use crate::model::chart_access::{ChartAccess, explain};

/// Chart archives kept on disk (one per repository and version; older ones are dropped).
pub const MAX_CACHED_ARCHIVES: usize = 8;

/// Renders the agent chart; shared by every hook and controller of the process.
pub struct AgentChart {
    settings: HelmSettings,
    metrics: Arc<Metrics>,
    state: Mutex<Option<State>>,
}

struct State {
    helm: Arc<Helm>,
    /// Keeps the archives' directory alive (removed on drop).
    dir: tempfile::TempDir,
    archives: BTreeMap<ChartLocation, PathBuf>,
}

impl AgentChart {
    pub fn new(settings: HelmSettings, metrics: Arc<Metrics>) -> Self {
        Self {
            settings,
            metrics,
            state: Mutex::new(None),
        }
    }

    /// The agent objects for `input`, from the chart at `location`. Errors say what failed
    /// (pulling or rendering, with helm's scrubbed message), never a value.
    ///
    /// `access` says how the repository is reached; the Secrets it names are read with `client`
    /// only when the archive is pulled.
    pub async fn render(
        &self,
        location: &ChartLocation,
        access: &ChartAccess,
        client: &kube::Client,
        input: &BootstrapInput,
    ) -> Result<Vec<Value>, String> {
        let values = chart_values(input)?;
        let (archive, helm) = self.archive(location, access, client).await?;
        let rendered = helm
            .template(AGENT_NAME, &archive, &input.agent.namespace, &values)
            .await
            .map_err(|err| {
                format!(
                    "rendering the {AGENT_NAME} chart {} from {}: {err}",
                    location.version,
                    redact(&location.repository)
                )
            })?;
        finish(&rendered, input)
    }

    /// The archive of `location` (pulled on first use) and the helm to render it with.
    async fn archive(
        &self,
        location: &ChartLocation,
        access: &ChartAccess,
        client: &kube::Client,
    ) -> Result<(PathBuf, Arc<Helm>), String> {
        // One pull at a time: concurrent first requests for a version wait for the same pull.
        let mut state = self.state.lock().await;
        if state.is_none() {
            let helm = Helm::new(self.settings.clone(), self.metrics.clone())
                .map_err(|err| format!("preparing helm: {err}"))?;
            let dir = tempfile::Builder::new()
                .prefix("caapf-agent-chart-")
                .tempdir()
                .map_err(|err| format!("preparing the chart cache: {err}"))?;
            *state = Some(State {
                helm: Arc::new(helm),
                dir,
                archives: BTreeMap::new(),
            });
        }
        let Some(state) = state.as_mut() else {
            unreachable!("initialised above")
        };
        let helm = state.helm.clone();
        if let Some(path) = state.archives.get(location)
            && path.exists()
        {
            return Ok((path.clone(), helm));
        }
        if state.archives.len() >= MAX_CACHED_ARCHIVES {
            for (_, path) in std::mem::take(&mut state.archives) {
                if let Some(dir) = path.parent() {
                    let _ = tokio::fs::remove_dir_all(dir).await;
                }
            }
        }
        let destination = state
            .dir
            .path()
            .join(format!("{}", state.archives.len()))
            .join(sanitize(&location.version));
        let _ = tokio::fs::remove_dir_all(&destination).await;
        // The repository URL without user information, for messages.
        let repository = redact(&location.repository);
        let data = access::read(client, access, &location.repository)
            .await
            .map_err(|err| {
                format!(
                    "pulling the {AGENT_NAME} chart {} from {repository}: {err}",
                    location.version
                )
            })?;
        // Removed once the archive is pulled.
        let files = helm
            .access_files(data, &location.repository, access)
            .await
            .map_err(|err| {
                format!(
                    "pulling the {AGENT_NAME} chart {} from {repository}: {}",
                    location.version,
                    explain(&err.to_string(), &location.repository, access)
                )
            })?;
        let source = files.source(&location.repository, access);
        let path = helm
            .pull(&source, AGENT_NAME, &location.version, &destination)
            .await
            .map_err(|err| {
                let err = match err {
                    crate::Error::Helm { step, message } => {
                        crate::Error::helm(step, explain(&message, &location.repository, access))
                    }
                    other => other,
                };
                format!(
                    "pulling the {AGENT_NAME} chart {} from {repository}: {err}",
                    location.version
                )
            })?;
        drop(files);
        state.archives.insert(location.clone(), path.clone());
        Ok((path, helm))
    }
}

/// A version as a directory name.
fn sanitize(version: &str) -> String {
    version
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}
