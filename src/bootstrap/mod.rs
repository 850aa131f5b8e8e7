//! The Fleet agent bootstrap of agent-initiated clusters, as pure functions.
//!
//! - [`manifest`]: what a new cluster needs to register with Fleet by itself: the agent objects
//!   for kubeadm (applied with `kubectl create` from `postKubeadmCommands`) and a `HelmChart` for
//!   RKE2's helm-controller. Both are stored in one Secret per cluster, written by
//!   BeforeClusterCreate.
//! - [`patch`]: the GeneratePatches patches that make control-plane machines pick that Secret up
//!   (kubeadm and RKE2 control-plane templates, `v1beta1` and `v1beta2`).
//!
//! The patches only reference the Secret by a name derived from the Cluster name, never its
//! content, so they do not change when the token does (a changed patch rolls the machines).

pub mod manifest;
pub mod patch;

/// Name of the Secret (in the Cluster's namespace) holding the bootstrap files of a Cluster.
pub fn secret_name(cluster_name: &str) -> String {
    format!("{cluster_name}-fleet-agent-bootstrap")
}

/// Key of the bootstrap Secret holding the agent objects (kubeadm).
pub const MANIFEST_KEY: &str = "fleet-agent.yaml";

/// Key of the bootstrap Secret holding the RKE2 `HelmChart`.
pub const HELM_CHART_KEY: &str = "fleet-agent-helmchart.yaml";

/// Where kubeadm control-plane machines get the agent objects.
pub const KUBEADM_MANIFEST_PATH: &str = "/etc/caapf/fleet-agent.yaml";

/// Where RKE2 server machines get the `HelmChart` (RKE2 applies every file of this directory).
pub const RKE2_MANIFEST_PATH: &str =
    "/var/lib/rancher/rke2/server/manifests/caapf-fleet-agent.yaml";

/// The kubeadm `postKubeadmCommands` entry: creates the agent objects that do not exist yet with
/// the admin kubeconfig, retrying while the API server settles (bounded: never fails the node).
///
/// `kubectl create`, not `apply`: once Fleet manages the agent (its agent bundle takes ownership of
/// these objects and may change image, tolerations or environment), a control-plane machine that
/// joins later must not put the bootstrap version back. Objects that exist are left alone; the
/// loop ends as soon as every object exists.
pub const KUBEADM_APPLY_COMMAND: &str = concat!(
    "/bin/sh -c 'F=/etc/caapf/fleet-agent.yaml; ",
    "K=\"kubectl --kubeconfig=/etc/kubernetes/admin.conf\"; ",
    "for i in $(seq 1 60); do ",
    "$K get -f \"$F\" >/dev/null 2>&1 && exit 0; ",
    "$K create -f \"$F\" >/dev/null 2>&1; ",
    "sleep 5; ",
    "done; ",
    "echo \"caapf: the Fleet agent bootstrap objects were not created\" >&2'"
);

/// Fleet's `names.SafeConcatName`: joins with `-`; names of 64 characters or more are cut and
/// suffixed with a hash, so the names we give agent objects are the names Fleet's own agent
/// manifest uses (its agent bundle then adopts them instead of creating twins).
pub fn safe_concat_name(parts: &[&str]) -> String {
    let full = parts.join("-");
    if full.len() < 64 {
        return full;
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, full.as_bytes());
    let hex: String = digest
        .as_ref()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    // Names are ASCII here (DNS labels), so byte indexing is character indexing.
    let bytes = full.as_bytes();
    let last = bytes.get(56).copied().unwrap_or(b'-');
    if last.is_ascii_lowercase() || last.is_ascii_digit() {
        format!("{}-{}", &full[..57], &hex[..5])
    } else {
        format!("{}-{}", &full[..56], &hex[..6])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_concat_name_matches_fleet() {
        assert_eq!(
            safe_concat_name(&["cattle-fleet-system", "fleet-agent", "role"]),
            "cattle-fleet-system-fleet-agent-role"
        );
        let long = "a".repeat(50);
        let name = safe_concat_name(&[&long, "fleet-agent", "role", "binding"]);
        assert_eq!(name.len(), 63);
        assert!(name.starts_with(&format!("{long}-fleet-")));
        // Deterministic.
        assert_eq!(
            name,
            safe_concat_name(&[&long, "fleet-agent", "role", "binding"])
        );
        // A cut that ends on '-' drops it and uses a 6-character hash.
        let dash = format!("{}-{}", "b".repeat(56), "c".repeat(20));
        let name = safe_concat_name(&[&dash]);
        assert_eq!(name.len(), 63);
        assert_eq!(&name[..56], &dash[..56]);
    }

    #[test]
    fn secret_name_is_derived_from_the_cluster_name() {
        assert_eq!(secret_name("c1"), "c1-fleet-agent-bootstrap");
    }
}
