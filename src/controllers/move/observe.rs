//! What one reconcile of the move controller reads: the Cluster's move Bundles, whether its
//! Fleet Cluster is ready, and what the target (the workload cluster, through the Cluster's
//! kubeconfig Secret) shows of the move.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fleet_api_rs::fleet_cluster::Cluster as FleetCluster;
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use serde_json::Value;

use super::FleetBundle;
use crate::api::CapiCluster;
use crate::client::workload;
use crate::model::config::{DEFAULT_AGENT_CHECKIN_INTERVAL, EffectiveConfig};
use crate::model::fleet_health::{self, RegistrationPath};
use crate::model::move_graph::ObjectId;
use crate::model::move_plan::{self, MOVE_CLUSTER_LABEL, PlanInput};
use crate::model::move_state::Phase;
use crate::model::move_target::{Key, TargetView};
use crate::move_preview::{self, MoveInputs};
use crate::{Error, Result, names};

/// The target's API server: connecting, and one response.
pub(super) const TARGET_TIMEOUTS: workload::Timeouts = workload::Timeouts {
    connect: Duration::from_secs(5),
    read: Duration::from_secs(30),
};

pub(super) fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Phases that read the object graph and the target.
pub(super) fn needs_graph(phase: Phase) -> bool {
    matches!(
        phase,
        Phase::WaitingUnblocked
            | Phase::Publishing
            | Phase::WaitingTarget
            | Phase::Linking
            | Phase::FencingSource
            | Phase::ResumingTarget
            | Phase::Stalled
    )
}

pub(super) fn spec_paused(cluster: &CapiCluster) -> bool {
    cluster
        .body
        .get("spec")
        .and_then(|s| s.get("paused").and_then(Value::as_bool))
        == Some(true)
}

pub(super) async fn list_bundles(
    api: &Api<FleetBundle>,
    cluster: &str,
) -> Result<Vec<FleetBundle>> {
    Ok(api
        .list(&ListParams::default().labels(&format!("{MOVE_CLUSTER_LABEL}={cluster}")))
        .await?
        .items)
}

/// The target as this reconcile read it.
pub(super) struct Target {
    pub client: Option<kube::Client>,
    pub view: std::result::Result<TargetView, String>,
}

impl Target {
    /// Connects through the kubeconfig Secret and lists, per type and namespace, the objects of
    /// the graph and the Secrets the move writes.
    pub async fn read(
        management: &kube::Client,
        namespace: &str,
        cluster: &str,
        inputs: &MoveInputs,
        plan: &Plan<'_>,
    ) -> Self {
        let (client, server) =
            match workload::connect(management, namespace, cluster, TARGET_TIMEOUTS).await {
                Ok(found) => found,
                Err(why) => {
                    return Self {
                        client: None,
                        view: Err(why),
                    };
                }
            };
        let mut lists: BTreeSet<(String, String, Option<String>)> = BTreeSet::new();
        for node in inputs.graph.nodes() {
            lists.insert((
                node.id.api_version.clone(),
                node.id.kind.clone(),
                node.id.namespace.clone(),
            ));
        }
        for secret in plan.secrets(inputs, &BTreeSet::new()) {
            lists.insert((
                "v1".into(),
                "Secret".into(),
                secret["metadata"]["namespace"].as_str().map(str::to_string),
            ));
        }
        let mut view = TargetView::default();
        for (api_version, kind, ns) in lists {
            let Some(rule) = inputs.types.rule(&api_version, &kind) else {
                continue;
            };
            let ar = move_preview::resource(rule);
            match move_preview::list(&client, &ar, ns.as_deref()).await {
                Ok(objects) => {
                    for object in objects {
                        let key = Key {
                            group: rule.group.clone(),
                            kind: rule.kind.clone(),
                            namespace: object
                                .metadata
                                .namespace
                                .clone()
                                .filter(|_| rule.namespaced),
                            name: object.name_any(),
                        };
                        view.objects
                            .insert(key, serde_json::to_value(&object).unwrap_or(Value::Null));
                    }
                }
                Err(err) => {
                    return Self {
                        client: Some(client),
                        view: Err(unanswered(&server, &kind, &err)),
                    };
                }
            }
        }
        Self {
            client: Some(client),
            view: Ok(view),
        }
    }
}

/// Why the target did not answer, in words that stay the same for one cause.
fn unanswered(server: &str, what: &str, err: &Error) -> String {
    match err {
        Error::Kube(kube::Error::Api(status)) => format!(
            "its API server at {server} answered {} for {what}: {}",
            status.code, status.message
        ),
        _ => format!("its API server at {server} cannot be reached"),
    }
}

/// Whether the Cluster's Fleet Cluster is ready, as the `FleetReady` condition says it
/// ([`fleet_health::evaluate`]: the agent checks in and every bundle targeting it is ready).
pub(super) async fn fleet_cluster_ready(
    client: &kube::Client,
    namespace: &str,
    cluster: &str,
    fleet_name: &str,
    config: &EffectiveConfig,
) -> Result<bool> {
    let api: Api<FleetCluster> = Api::namespaced(client.clone(), namespace);
    let Some(fleet) = api.get_opt(fleet_name).await? else {
        return Ok(false);
    };
    let interval = config
        .cluster
        .as_ref()
        .map_or(DEFAULT_AGENT_CHECKIN_INTERVAL, |c| c.agent_checkin_interval);
    // The registration only shapes messages, which are not used here.
    let registration = RegistrationPath::ManagerInitiated {
        kubeconfig_secret: format!("{namespace}/{}", names::kubeconfig_secret_name(cluster)),
    };
    Ok(fleet_health::evaluate(
        &registration,
        fleet.status.as_ref(),
        interval,
        Timestamp::now(),
    )
    .ready)
}

/// Where the Bundles of one move go.
pub(super) struct Plan<'a> {
    pub namespace: &'a str,
    pub cluster: &'a str,
    pub fleet_cluster: &'a str,
    /// The value of [`move_plan::MOVE_COPY_ANNOTATION`] on this move's copies.
    pub copy: String,
}

impl Plan<'_> {
    fn input<'b>(
        &'b self,
        inputs: &'b MoveInputs,
        keep: &'b BTreeSet<ObjectId>,
        target_paused: bool,
    ) -> PlanInput<'b> {
        PlanInput {
            cluster_namespace: self.namespace,
            cluster_name: self.cluster,
            fleet_cluster_name: self.fleet_cluster,
            graph: &inputs.graph,
            providers: &inputs.providers,
            target_paused,
            keep_on_target: keep,
        }
    }

    pub fn bundles(
        &self,
        inputs: &MoveInputs,
        keep: &BTreeSet<ObjectId>,
        target_paused: bool,
    ) -> std::result::Result<Vec<Value>, String> {
        move_plan::bundles(&self.input(inputs, keep, target_paused)).map_err(|e| e.to_string())
    }

    pub(super) fn secrets(&self, inputs: &MoveInputs, keep: &BTreeSet<ObjectId>) -> Vec<Value> {
        move_plan::target_secrets(&self.input(inputs, keep, true))
    }
}
