//! The workload cluster as BeforeClusterDelete sees it while a Cluster's Fleet workloads are
//! removed: reached through its kubeconfig Secret ([`crate::client::workload`]), it is asked
//! what still holds cloud resources ([`crate::model::teardown::leftovers`]). Clusters behind NAT
//! cannot be reached from here: the answer is then why, and the hook waits a settle period
//! instead. Only reads, with short timeouts (the hook has 10 s).

use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Service};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::{Api, ListParams};
use serde_json::Value;

use crate::client::workload;
use crate::model::teardown;

/// Connecting to the workload cluster's API server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// One response of it.
const READ_TIMEOUT: Duration = Duration::from_secs(3);
/// The whole check (every list).
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// What is left on the workload cluster of Cluster `namespace/cluster` (outside `kube-system`
/// and `agent_namespace`), or why it cannot be told (a reason that stays the same for one
/// cause, for the condition's message).
pub async fn leftovers(
    management: &kube::Client,
    namespace: &str,
    cluster: &str,
    agent_namespace: &str,
) -> Result<Vec<String>, String> {
    let (client, server) = workload::connect(
        management,
        namespace,
        cluster,
        workload::Timeouts {
            connect: CONNECT_TIMEOUT,
            read: READ_TIMEOUT,
        },
    )
    .await?;
    let unanswered = |what: &str, err: kube::Error| match err {
        kube::Error::Api(status) => format!(
            "its API server at {server} answered {} listing {what}",
            status.code
        ),
        _ => format!("its API server at {server} cannot be reached"),
    };
    let lists = async {
        let params = ListParams::default();
        // Side by side: four lists one after another would spend the check's time on a slow
        // server and take it for an unreachable one.
        let (services, claims, volumes, attachments) = tokio::try_join!(
            async {
                Api::<Service>::all(client.clone())
                    .list(&params)
                    .await
                    .map_err(|e| unanswered("Services", e))
            },
            async {
                Api::<PersistentVolumeClaim>::all(client.clone())
                    .list_metadata(&params)
                    .await
                    .map_err(|e| unanswered("PersistentVolumeClaims", e))
            },
            async {
                Api::<PersistentVolume>::all(client.clone())
                    .list(&params)
                    .await
                    .map_err(|e| unanswered("PersistentVolumes", e))
            },
            async {
                Api::<VolumeAttachment>::all(client.clone())
                    .list(&params)
                    .await
                    .map_err(|e| unanswered("VolumeAttachments", e))
            },
        )?;
        let objects = teardown::WorkloadObjects {
            services: values(services.items),
            claims: values(claims.items),
            volumes: values(volumes.items),
            attachments: values(attachments.items),
        };
        Ok::<_, String>(teardown::leftovers(&objects, agent_namespace))
    };
    tokio::time::timeout(CHECK_TIMEOUT, lists)
        .await
        .map_err(|_| {
            format!(
                "its API server at {server} did not answer within {}s",
                CHECK_TIMEOUT.as_secs()
            )
        })?
}

fn values<T: serde::Serialize>(items: Vec<T>) -> Vec<Value> {
    items
        .iter()
        .filter_map(|item| serde_json::to_value(item).ok())
        .collect()
}
