//! The workload cluster as BeforeClusterDelete sees it while a Cluster's Fleet workloads are
//! removed: reached through its kubeconfig Secret ([`crate::client::workload`]), it is asked
//! what still holds cloud resources ([`crate::model::teardown::leftovers`]). Clusters behind NAT
//! cannot be reached from here: the answer is then why, and the hook waits a settle period
//! instead. Only reads, with short timeouts (the hook has 10 s).

use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Service};
use kube::api::{Api, ListParams};
use serde_json::Value;

use crate::client::workload;
use crate::model::teardown;

/// Connecting to the workload cluster's API server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// One response of it.
const READ_TIMEOUT: Duration = Duration::from_secs(3);
/// The whole check (both lists).
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
        let services = Api::<Service>::all(client.clone())
            .list(&ListParams::default())
            .await
            .map_err(|err| unanswered("Services", err))?;
        let claims = Api::<PersistentVolumeClaim>::all(client.clone())
            .list_metadata(&ListParams::default())
            .await
            .map_err(|err| unanswered("PersistentVolumeClaims", err))?;
        let services: Vec<Value> = services
            .items
            .iter()
            .filter_map(|svc| serde_json::to_value(svc).ok())
            .collect();
        let claims: Vec<Value> = claims
            .items
            .iter()
            .filter_map(|pvc| serde_json::to_value(pvc).ok())
            .collect();
        Ok::<_, String>(teardown::leftovers(&services, &claims, agent_namespace))
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
