//! The Fleet agent bootstrap of agent-initiated clusters.
//!
//! - [`manifest`] (pure): the values of Fleet's `fleet-agent` chart for a cluster and the
//!   objects made from its rendering; [`chart`] renders the chart with `helm template`. The
//!   objects are stored in one Secret per cluster (`<cluster>-fleet-agent-bootstrap`), written
//!   before the patch that reads it is ever answered (see [`crate::hooks::handlers::topology`]).
//! - [`patch`] (pure): the GeneratePatches patches that make every control-plane machine create
//!   those objects once, with `kubectl create` (kubeadm and RKE2 control-plane templates,
//!   `v1beta1` and `v1beta2`).
//!
//! The patches only reference the Secret by a name derived from the Cluster name, never its
//! content, so they do not change when the token does (a changed patch rolls the machines).

pub mod chart;
pub mod manifest;
pub mod patch;

/// Name of the Secret (in the Cluster's namespace) holding the bootstrap files of a Cluster.
pub fn secret_name(cluster_name: &str) -> String {
    format!("{cluster_name}-fleet-agent-bootstrap")
}

/// Key of the bootstrap Secret holding the agent objects.
pub const MANIFEST_KEY: &str = "fleet-agent.yaml";

/// Where control-plane machines get the agent objects (kubeadm and RKE2 alike).
pub const MANIFEST_PATH: &str = "/etc/caapf/fleet-agent.yaml";

/// The command a control-plane machine runs after its Kubernetes started: creates the agent
/// objects that do not exist yet, retrying while the API server settles (bounded: at most five
/// minutes, and it never fails the node).
///
/// `kubectl create`, not `apply`: once Fleet manages the agent (its agent bundle takes ownership
/// of these objects and may change image, tolerations or environment), a control-plane machine
/// that joins later, or a restarted one, must not put the bootstrap version back. Objects that
/// exist are left alone; the loop ends as soon as every object exists. Unlike a manifest in
/// RKE2's auto-deploy directory or a helm-controller `HelmChart`, nothing re-applies it later.
fn create_command(kubectl: &str) -> String {
    format!(
        "/bin/sh -c 'F={MANIFEST_PATH}; K=\"{kubectl}\"; for i in $(seq 1 60); do $K get -f \"$F\" >/dev/null 2>&1 && exit 0; $K create -f \"$F\" >/dev/null 2>&1; sleep 5; done; echo \"caapf: the Fleet agent bootstrap objects were not created\" >&2'"
    )
}

/// kubeadm's admin kubeconfig and the `kubectl` kubeadm nodes have on their `PATH`
/// (kubernetes-sigs/cluster-api `bootstrap/kubeadm`: `postKubeadmCommands` run after `kubeadm
/// init`/`join`, with `/etc/kubernetes/admin.conf` written by `kubeadm init` on control-plane
/// nodes).
pub fn kubeadm_create_command() -> String {
    create_command("kubectl --kubeconfig=/etc/kubernetes/admin.conf")
}

/// RKE2 extracts `kubectl` to `/var/lib/rancher/rke2/bin` and writes the admin kubeconfig to
/// `/etc/rancher/rke2/rke2.yaml` on servers (docs.rke2.io, "Cluster Access", "CLI Tools");
/// CAPRKE2 runs `postRKE2Commands` after starting `rke2-server` (rancher/cluster-api-provider-rke2
/// v0.25.0 `bootstrap/api/v1beta2/rke2config_types.go`).
pub fn rke2_create_command() -> String {
    create_command("/var/lib/rancher/rke2/bin/kubectl --kubeconfig=/etc/rancher/rke2/rke2.yaml")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_commands_use_each_distribution_s_kubectl_and_admin_kubeconfig() {
        let kubeadm = kubeadm_create_command();
        assert!(kubeadm.contains("K=\"kubectl --kubeconfig=/etc/kubernetes/admin.conf\""));
        let rke2 = rke2_create_command();
        assert!(rke2.contains(
            "K=\"/var/lib/rancher/rke2/bin/kubectl --kubeconfig=/etc/rancher/rke2/rke2.yaml\""
        ));
        for command in [kubeadm, rke2] {
            assert!(command.contains("F=/etc/caapf/fleet-agent.yaml"));
            assert!(command.contains("$K create -f"));
            assert!(!command.contains("apply"));
        }
    }

    #[test]
    fn secret_name_is_derived_from_the_cluster_name() {
        assert_eq!(secret_name("c1"), "c1-fleet-agent-bootstrap");
    }
}
