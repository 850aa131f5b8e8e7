//! The manager: connects to the API server and runs the controllers.

use kube::{Api, Client};

use crate::api::FleetAddonConfig;
use crate::cli::ManagerFlags;
use crate::model::config::EffectiveConfig;
use crate::{Error, Result};

/// Runs the manager until it is asked to stop.
pub async fn run(flags: ManagerFlags) -> Result<()> {
    for ignored in flags.ignored() {
        tracing::info!(flag = %ignored, "flag accepted but ignored");
    }
    let client = connect().await?;
    let configs: Api<FleetAddonConfig> = Api::all(client.clone());
    let object = configs.get_opt(FleetAddonConfig::NAME).await?;
    let config = EffectiveConfig::resolve(object.as_ref());
    tracing::info!(
        source = if object.is_some() { "FleetAddonConfig/fleet-addon-config" } else { "defaults (no FleetAddonConfig)" },
        config = ?config,
        "effective configuration"
    );
    for problem in &config.problems {
        tracing::warn!(%problem, "FleetAddonConfig problem");
    }
    Ok(())
}

/// Builds a client from the kubeconfig or the in-cluster configuration and checks that the API
/// server answers, so an unreachable cluster fails fast with a clear message.
pub async fn connect() -> Result<Client> {
    let config = kube::Config::infer()
        .await
        .map_err(|err| Error::KubeConfig(format!("{err} (set KUBECONFIG or run in a cluster)")))?;
    let url = config.cluster_url.to_string();
    let client = Client::try_from(config)
        .map_err(|err| Error::KubeConfig(format!("building a client for {url}: {err}")))?;
    match client.apiserver_version().await {
        Ok(version) => {
            tracing::info!(api_server = %url, version = %version.git_version, "connected");
            Ok(client)
        }
        Err(err) => Err(Error::KubeConfig(format!(
            "the Kubernetes API at {url} is not reachable: {err}"
        ))),
    }
}
