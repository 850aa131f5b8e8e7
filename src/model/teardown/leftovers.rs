//! What the removal waits for: the BundleDeployments Fleet still has for the cluster (and why a
//! bundle still targets it), then what still holds cloud resources on the workload cluster.

use std::fmt;

use fleet_api_rs::fleet_cluster::Cluster as FleetCluster;
use k8s_openapi::jiff::Timestamp;
use kube::core::{Selector, SelectorExt};
use serde_json::{Map, Value};

use crate::model::capi::StringMap;
use crate::names;

/// At most this many bundles read per call to say why they still target the cluster.
pub const MAX_EXPLAINED: usize = 3;

/// Prefix of the bundles Fleet never uninstalls (rancher/fleet v0.12.19–v0.16.1
/// `internal/helmdeployer/delete.go` `deleteByRelease`): the agent's own
/// (`fleet-agent-<cluster>`), which must keep running while the rest goes.
pub const AGENT_BUNDLE_PREFIX: &str = "fleet-agent";

/// Namespace no workload's leftovers are looked for in (Kubernetes' own).
const SYSTEM_NAMESPACE: &str = "kube-system";

// ---- What is left upstream ----

/// A bundle (`namespace/name`), as its BundleDeployment's labels name it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct BundleRef {
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for BundleRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{}", self.name)
        } else {
            write!(f, "{}/{}", self.namespace, self.name)
        }
    }
}

/// The BundleDeployments of a Fleet Cluster by what the teardown does with them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Workloads {
    /// Waited for: every BundleDeployment but the agent's ([`AGENT_BUNDLE_PREFIX`]) and the
    /// kept ones.
    pub left: Vec<BundleRef>,
    /// Kept until the cluster is deleted ([`names::KEEP_DURING_TEARDOWN_LABEL`]).
    pub kept: Vec<BundleRef>,
}

/// The bundles whose BundleDeployments are in the Fleet Cluster's namespace, sorted, named by
/// the labels Fleet gives them (rancher/fleet v0.16.1 `internal/cmd/controller/target/
/// target.go` `BundleDeploymentLabels`: the Bundle's labels without keys containing
/// `cattle.io/`, then `fleet.cattle.io/bundle-namespace` and `fleet.cattle.io/bundle-name`),
/// else by their own name. One being deleted still counts.
pub fn workloads(deployments: &[Value]) -> Workloads {
    let mut out = Workloads::default();
    for bd in deployments {
        let name = bd["metadata"]["name"].as_str().unwrap_or_default();
        if name.starts_with(AGENT_BUNDLE_PREFIX) {
            continue;
        }
        let labels = &bd["metadata"]["labels"];
        let bundle = match (
            labels["fleet.cattle.io/bundle-namespace"].as_str(),
            labels["fleet.cattle.io/bundle-name"].as_str(),
        ) {
            (Some(namespace), Some(bundle)) => BundleRef {
                namespace: namespace.to_string(),
                name: bundle.to_string(),
            },
            _ => BundleRef {
                namespace: String::new(),
                name: name.to_string(),
            },
        };
        if labels[names::KEEP_DURING_TEARDOWN_LABEL] == "true" {
            out.kept.push(bundle);
        } else {
            out.left.push(bundle);
        }
    }
    for list in [&mut out.left, &mut out.kept] {
        list.sort();
        list.dedup();
    }
    out
}

/// Why a bundle still targets the drained cluster, from its `spec.targets` (where Fleet also
/// puts fleet.yaml's `targetCustomizations`: `internal/bundlereader/read.go`); `None` when no
/// entry explains it (Fleet may not have removed its BundleDeployment yet). The first entry
/// that certainly matches decides, as Fleet's first match does (`target/builder.go`
/// `Targets`, `target/matcher/bundlematch.go`): a `doNotDeploy` one means Fleet removes it;
/// otherwise `clusterName` equal to the Fleet Cluster's name or a `clusterSelector` that still
/// matches the labels left (`{}` matches every cluster) explains it (criteria are ANDed:
/// `target/matcher/clustermatcher.go`). Entries naming a cluster group are passed over (a
/// group's selector is not read here).
pub fn why_still_targeted(
    bundle: &Value,
    fleet_cluster: &str,
    labels: &StringMap,
) -> Option<&'static str> {
    let targets = bundle.pointer("/spec/targets")?.as_array()?;
    for target in targets {
        if !target["clusterGroup"].is_null() || !target["clusterGroupSelector"].is_null() {
            continue;
        }
        let by_name = target["clusterName"].as_str();
        let selector = target.get("clusterSelector").filter(|s| !s.is_null());
        let matches = (by_name.is_some() || selector.is_some())
            && by_name.is_none_or(|name| name == fleet_cluster)
            && selector.is_none_or(|selector| selector_matches(selector, labels));
        if !matches {
            continue;
        }
        if target["doNotDeploy"].as_bool() == Some(true) {
            return None;
        }
        return Some(match (by_name, selector) {
            (Some(_), _) => "targets this cluster by name (clusterName)",
            (None, Some(selector)) if is_empty_selector(selector) => {
                "targets every cluster (clusterSelector: {})"
            }
            _ => "its clusterSelector still matches the labels left",
        });
    }
    None
}

fn is_empty_selector(selector: &Value) -> bool {
    let labels = selector
        .get("matchLabels")
        .is_none_or(|v| v.is_null() || v.as_object().is_some_and(Map::is_empty));
    let expressions = selector
        .get("matchExpressions")
        .is_none_or(|v| v.is_null() || v.as_array().is_some_and(Vec::is_empty));
    labels && expressions
}

fn selector_matches(selector: &Value, labels: &StringMap) -> bool {
    let Ok(parsed) = serde_json::from_value::<
        k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    >(selector.clone()) else {
        return false;
    };
    Selector::try_from(parsed).is_ok_and(|selector| selector.matches(labels))
}

// ---- What is left downstream ----

/// The namespace the cluster's Fleet agent runs in: where Fleet says it runs
/// (`status.agent.namespace`), else where it was asked to (`spec.agentNamespace`), else ours.
pub fn agent_namespace(fleet: &FleetCluster) -> String {
    fleet
        .status
        .as_ref()
        .and_then(|status| status.agent.as_ref())
        .and_then(|agent| agent.namespace.clone())
        .or_else(|| fleet.spec.agent_namespace.clone())
        .filter(|ns| !ns.is_empty())
        .unwrap_or_else(|| names::DEFAULT_AGENT_NAMESPACE.to_string())
}

/// What the workload cluster still holds cloud resources with, as listed.
#[derive(Clone, Debug, Default)]
pub struct WorkloadObjects {
    pub services: Vec<Value>,
    pub claims: Vec<Value>,
    pub volumes: Vec<Value>,
    pub attachments: Vec<Value>,
}

/// What still holds cloud resources on the workload cluster, sorted: Services of type
/// `LoadBalancer` (the object stays until the cloud controller released the load balancer,
/// finalizer `service.kubernetes.io/load-balancer-cleanup`) and PersistentVolumeClaims outside
/// `kube-system` and the agent's namespace; PersistentVolumes with reclaim policy `Delete`
/// whose claim was there (a claim is gone before its cloud volume is detached and deleted: the
/// volume outlives it under `kubernetes.io/pv-protection` and the CSI provisioner's
/// `external-provisioner.volume.kubernetes.io/finalizer`), with their phase, and the
/// VolumeAttachments of those volumes.
pub fn leftovers(objects: &WorkloadObjects, agent_namespace: &str) -> Vec<String> {
    let outside = |ns: &Value| {
        let ns = ns.as_str().unwrap_or_default();
        ns != SYSTEM_NAMESPACE && ns != agent_namespace
    };
    let key = |object: &Value| {
        format!(
            "{}/{}",
            object["metadata"]["namespace"].as_str().unwrap_or_default(),
            object["metadata"]["name"].as_str().unwrap_or_default()
        )
    };
    let name = |object: &Value| {
        object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let volumes: Vec<&Value> = objects
        .volumes
        .iter()
        .filter(|pv| {
            let claim = &pv["spec"]["claimRef"];
            pv["spec"]["persistentVolumeReclaimPolicy"] == "Delete"
                && claim.is_object()
                && outside(&claim["namespace"])
        })
        .collect();
    let mut out: Vec<String> = objects
        .services
        .iter()
        .filter(|svc| {
            outside(&svc["metadata"]["namespace"]) && svc["spec"]["type"] == "LoadBalancer"
        })
        .map(|svc| format!("Service {} (LoadBalancer)", key(svc)))
        .chain(
            objects
                .claims
                .iter()
                .filter(|pvc| outside(&pvc["metadata"]["namespace"]))
                .map(|pvc| format!("PersistentVolumeClaim {}", key(pvc))),
        )
        .chain(volumes.iter().map(|pv| {
            let claim = &pv["spec"]["claimRef"];
            format!(
                "PersistentVolume {} (claim {}/{}, {})",
                name(pv),
                claim["namespace"].as_str().unwrap_or_default(),
                claim["name"].as_str().unwrap_or_default(),
                pv["status"]["phase"].as_str().unwrap_or("Pending")
            )
        }))
        .chain(objects.attachments.iter().filter_map(|va| {
            let volume = va["spec"]["source"]["persistentVolumeName"].as_str()?;
            volumes.iter().any(|pv| name(pv) == volume).then(|| {
                format!(
                    "VolumeAttachment {} (PersistentVolume {volume} on node {})",
                    name(va),
                    va["spec"]["nodeName"].as_str().unwrap_or_default()
                )
            })
        }))
        .collect();
    out.sort();
    out
}

/// What BeforeClusterDelete learned from the workload cluster, once Fleet removed every
/// BundleDeployment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Downstream {
    /// Its API server answered: what is left ([`leftovers`]).
    Checked { leftovers: Vec<String> },
    /// It cannot be checked (`reason`, stable for one cause); the last BundleDeployment went
    /// at `bundles_gone`.
    Unchecked {
        reason: String,
        bundles_gone: Timestamp,
    },
}
