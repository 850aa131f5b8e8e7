//! The playground script (`make playground`) works from a checkout: sandbox, manager, example
//! objects (with a HelmOp), the Fleet objects printed, and the CAPI Clusters with their
//! FleetReady condition once Fleet's status is played for one of them.

use std::path::Path;

#[test]
fn playground_creates_the_fleet_objects() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().expect("tempdir");
    let mut command = std::process::Command::new(root.join("hack/playground.sh"));
    command
        .env("PLAYGROUND_EXIT", "1")
        .env("PLAYGROUND_DIR", dir.path())
        .env("CAAPF_BIN", env!("CARGO_BIN_EXE_caapf"))
        .env_remove("KUBECONFIG");
    // Reuse the sandbox binary when the workspace build made it; the script builds it otherwise.
    let target = std::env::var("CARGO_TARGET_DIR").map_or_else(|_| root.join("target"), Into::into);
    let sandbox = target.join("debug/kube-sandbox");
    if sandbox.exists() {
        command.env("SANDBOX_BIN", sandbox);
    }
    let output = command.output().expect("playground runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    for expected in [
        "cluster.fleet.cattle.io/docker-demo",
        "cluster.fleet.cattle.io/capi-quickstart",
        "clustergroup.fleet.cattle.io/quick-start",
        "clustergroup.fleet.cattle.io/quick-start.clusterclass",
        "bundlenamespacemapping.fleet.cattle.io/default",
        "allow-fleetworkspace-creation-for-existing-namespace",
        "CAPI Clusters and their FleetReady condition:",
        "True         Ready",
        "AgentNotRegistered",
        "playground stopped",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
}
