//! Reads the API server URL and CA Fleet agents connect to, from where `spec.config.server`
//! says: the management cluster's own (`inferLocal`: the `default/kubernetes` Service's
//! endpoints and the `kube-root-ca.crt` ConfigMap) or a custom URL with a CA from a ConfigMap
//! or Secret. Reading only: what the objects mean is decided in [`crate::model::api_server`].

use k8s_openapi::api::core::v1::{ConfigMap, Endpoints, ObjectReference, Secret};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::{Api, ListParams};

use crate::Error;
use crate::model::api_server::{self, CA_KEY, KUBERNETES_SERVICE, KUBERNETES_SERVICE_NAMESPACE};
use crate::model::config::ServerSource;
use crate::model::fleet_values::ServerValues;

/// Reads the API server URL and CA from where `source` says.
pub async fn resolve(client: &Client, source: &ServerSource) -> Result<ServerValues, Error> {
    match source {
        ServerSource::InferLocal => infer_local(client).await,
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

/// The management cluster's own API server: the CA from `kube-root-ca.crt`, the URL from the
/// `kubernetes` Service's EndpointSlices (the core Endpoints only when no slice has one).
async fn infer_local(client: &Client) -> Result<ServerValues, Error> {
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), KUBERNETES_SERVICE_NAMESPACE);
    let name = format!(
        "{KUBERNETES_SERVICE_NAMESPACE}/{}",
        api_server::ROOT_CA_CONFIG_MAP
    );
    let root_ca = config_maps
        .get_opt(api_server::ROOT_CA_CONFIG_MAP)
        .await?
        .ok_or_else(|| {
            Error::missing(
                "ConfigMap",
                name.clone(),
                "inferLocal reads the cluster CA from it",
            )
        })?;
    let ca_pem = api_server::ca_from_config_map(&root_ca, CA_KEY)
        .map_err(|reason| Error::malformed("ConfigMap", name, reason))?;
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), KUBERNETES_SERVICE_NAMESPACE);
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
        let api: Api<Endpoints> = Api::namespaced(client.clone(), KUBERNETES_SERVICE_NAMESPACE);
        api.get_opt(KUBERNETES_SERVICE).await?
    };
    let url = api_server::infer_url(&slices, endpoints.as_ref()).map_err(|reason| {
        Error::missing(
            "Service endpoints",
            format!("{KUBERNETES_SERVICE_NAMESPACE}/{KUBERNETES_SERVICE}"),
            reason,
        )
    })?;
    Ok(ServerValues {
        url: Some(url),
        ca_pem: Some(ca_pem),
    })
}

/// The PEM CA under `ca.crt` of the referenced ConfigMap (default) or Secret.
async fn read_ca(client: &Client, reference: &ObjectReference) -> Result<String, Error> {
    let reference = api_server::ca_reference(reference).map_err(Error::InvalidConfig)?;
    let full = reference.full_name();
    let reason = format!("{} names it", api_server::CA_REF_FIELD);
    if reference.secret {
        let api: Api<Secret> = Api::namespaced(client.clone(), &reference.namespace);
        let secret = api
            .get_opt(&reference.name)
            .await?
            .ok_or_else(|| Error::missing("Secret", full.clone(), reason))?;
        api_server::ca_from_secret(&secret, CA_KEY)
            .map_err(|reason| Error::malformed("Secret", full, reason))
    } else {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), &reference.namespace);
        let config_map = api
            .get_opt(&reference.name)
            .await?
            .ok_or_else(|| Error::missing("ConfigMap", full.clone(), reason))?;
        api_server::ca_from_config_map(&config_map, CA_KEY)
            .map_err(|reason| Error::malformed("ConfigMap", full, reason))
    }
}
