//! Teardown before deletion (issue #30, `docs/lifecycle.md`): before Cluster API deletes a
//! Cluster's infrastructure, the Fleet workloads on it are removed through Fleet's own
//! targeting, so the load balancers and volumes they created are released while the cloud
//! controllers still run. Pure: what BeforeClusterDelete (`crate::hooks::handlers::delete`) and
//! the import controller (`crate::controllers::import::clusters`) decide.
//!
//! # How Fleet removes a cluster's workloads (rancher/fleet v0.12.19, v0.14.10, v0.16.1)
//!
//! - A label change of a Fleet Cluster re-targets its bundles: the bundle controller maps the
//!   old and the new object to the bundles they match, and the cluster controller deletes the
//!   BundleDeployments of bundles in scope that no longer match
//!   (`internal/cmd/controller/reconciler/bundle_controller.go` `SetupWithManager` and
//!   `cleanupOrphanedBundleDeployments`; `cluster_controller.go` `Reconcile`, "Clean up old
//!   bundledeployments"). So the drain removes the labels bundles select the cluster by and
//!   adds [`names::TEARDOWN_LABEL`], which a `targetCustomizations` entry with `doNotDeploy:
//!   true` can match for bundles that target by name or by an empty selector.
//! - A deleted BundleDeployment loses its finalizer in the fleet-controller without waiting for
//!   the agent (`reconciler/bundledeployment_controller.go` `Reconcile`); the agent uninstalls
//!   the release after it sees the BundleDeployment gone (`internal/cmd/agent/controller/
//!   bundledeployment_controller.go` `Reconcile` → `helmdeployer/delete.go` `deleteByRelease`),
//!   and Kubernetes releases load balancers and volumes after that. So "no BundleDeployment
//!   left" is not "nothing left": where the workload cluster can be reached it is asked
//!   ([`leftovers`]), elsewhere a settle period ([`SETTLE_UNREACHABLE`]) follows.
//! - Fleet deletes un-targeted BundleDeployments in plain loops, with no order
//!   (`cleanupOrphanedBundleDeployments`; `dependsOn` is read only before deploying,
//!   `internal/cmd/agent/deployer/deployer.go` `checkDependency`): a cloud controller manager or
//!   CSI driver removed with the rest could not release the load balancers and volumes. Bundles
//!   labelled [`names::KEEP_DURING_TEARDOWN_LABEL`] that keep targeting the cluster (e.g. on
//!   [`names::TEARDOWN_LABEL`]) stay, and are not waited for ([`workloads`]).
//! - Bundles whose ID starts with `fleet-agent` are never uninstalled (`deleteByRelease`), and
//!   the agent's own bundle targets the cluster by `clusterName` with `fleet.cattle.io/
//!   non-managed-agent DoesNotExist` (`agentmanagement/controllers/manageagent/manageagent.go`
//!   `newAgentBundle`): label changes never remove it, and the drain never adds that label, so
//!   the agent keeps running until the workloads are gone.
//! - Deleting the Fleet Cluster instead deletes its namespace and abandons the workloads
//!   (rancher/fleet#1054): the import controller keeps it while the removal runs.
//!
//! # Who does what
//!
//! BeforeClusterDelete decides, from the request alone, whether the Cluster is torn down
//! ([`mode`]). On its first call it lists the Fleet Cluster's BundleDeployments: none but the
//! agent's, nothing is held; otherwise it marks the Fleet Cluster ([`start_patch`]). The import
//! controller keeps a deleting Cluster's Fleet Cluster and our finalizer while [`holds_cleanup`]
//! says so, and once the mark is there removes the selection labels ([`drain_patch`]). Each
//! later call reports the progress ([`verdict`]) until the workloads are gone, the deadline
//! passes or the operator skips; Cluster API then sets `runtime.cluster.x-k8s.io/ok-to-delete`
//! and the import controller cleans up as for any deleted Cluster.
mod drain;
mod leftovers;
mod mode;
mod report;

pub use drain::*;
pub use leftovers::*;
pub use mode::*;
pub use report::*;

#[cfg(test)]
mod tests;
