//! `caapf cleanup`: removes this provider's finalizer from every CAPI Cluster and ClusterClass
//! (and the legacy one CAAPF put on Fleet ClusterGroups), so that uninstalling the provider
//! never leaves a deletion hanging (CAAPF left them: research §13 item 14).

use std::fmt::Debug;

use fleet_api_rs::fleet_clustergroup::ClusterGroup;
use kube::api::{Api, ListParams};
use kube::core::NamespaceResourceScope;
use kube::runtime::events::Recorder;
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::Result;
use crate::api::{CapiCluster, CapiClusterClass};
use crate::apply::Target;
use crate::model::plan::{Next, ObjectId, Plan, Write};
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
    // The runner's finalizer write re-reads an object that changed meanwhile and retries.
    let recorder = Recorder::new(client.clone(), "caapf-cleanup".into());
    let target = Target {
        client,
        recorder: &recorder,
        expectations: None,
    };
    let writes: Vec<Write> = objects
        .iter()
        .filter(|object| object.finalizers().iter().any(|f| f == names::FINALIZER))
        .map(|object| Write::Finalizer {
            object: ObjectId::observed(object),
            add: false,
            finalizers: object.finalizers().to_vec(),
        })
        .collect();
    let removed = writes.len();
    target.run(Plan::of(writes, Next::AwaitChange)).await?;
    Ok(removed)
}
