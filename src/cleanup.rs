//! `caapf cleanup`: removes this provider's finalizer from every CAPI Cluster and ClusterClass
//! (and the legacy one CAAPF put on Fleet ClusterGroups), so that uninstalling the provider
//! never leaves a deletion hanging (CAAPF left them: research §13 item 14).

use std::fmt::Debug;

use fleet_api_rs::fleet_clustergroup::ClusterGroup;
use kube::api::{Api, ListParams};
use kube::core::NamespaceResourceScope;
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::Result;
use crate::api::{CapiCluster, CapiClusterClass};
use crate::apply::remove_finalizer;
use crate::names;

/// How many objects lost the finalizer, per kind.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct CleanupReport {
    pub clusters: usize,
    pub cluster_classes: usize,
    pub cluster_groups: usize,
}

/// Removes the finalizer everywhere. Objects whose kind is not served (e.g. Fleet not installed)
/// are skipped.
pub async fn run(client: &Client) -> Result<CleanupReport> {
    Ok(CleanupReport {
        clusters: strip::<CapiCluster>(client).await?,
        cluster_classes: strip::<CapiClusterClass>(client).await?,
        cluster_groups: strip::<ClusterGroup>(client).await?,
    })
}

async fn strip<K>(client: &Client) -> Result<usize>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug,
{
    let all: Api<K> = Api::all(client.clone());
    let objects = match all.list(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(kube::Error::Api(status)) if status.code == 404 => return Ok(0),
        Err(err) => return Err(err.into()),
    };
    let mut removed = 0;
    for object in objects {
        if !object.finalizers().iter().any(|f| f == names::FINALIZER) {
            continue;
        }
        let namespaced: Api<K> =
            Api::namespaced(client.clone(), &object.namespace().unwrap_or_default());
        // A concurrent change fails the guarded patch: read the object again and retry.
        let mut current = object;
        for attempt in 0..5 {
            match remove_finalizer(&namespaced, &current).await {
                Ok(_) => break,
                Err(_) if attempt < 4 => match namespaced.get_opt(&current.name_any()).await? {
                    Some(fresh) => current = fresh,
                    None => break,
                },
                Err(err) => return Err(err),
            }
        }
        removed += 1;
    }
    Ok(removed)
}
