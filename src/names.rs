//! Names that other software reads: object names, label and annotation keys, finalizers and
//! field managers. Most are a compatibility contract with the existing CAAPF (research §14):
//! changing one breaks in-place upgrades from it.

/// Name of the singleton `FleetAddonConfig`.
pub const CONFIG_NAME: &str = "fleet-addon-config";

/// Finalizer on CAPI Clusters and ClusterClasses we manage (CAAPF's name, so we can remove it
/// from objects CAAPF left behind).
pub const FINALIZER: &str = "fleet.addons.cluster.x-k8s.io";

/// Label on Fleet Clusters and ClusterGroups: name of the ClusterClass. Read by ClusterGroup
/// selectors and by users' Fleet targets.
pub const CLUSTERCLASS_NAME_LABEL: &str = "clusterclass-name.fleet.addons.cluster.x-k8s.io";

/// Label on Fleet Clusters and ClusterGroups: namespace of the ClusterClass.
pub const CLUSTERCLASS_NAMESPACE_LABEL: &str =
    "clusterclass-namespace.fleet.addons.cluster.x-k8s.io";

/// Rancher Turtles' labels for the same (rancher/turtles PR #2803, alpha `fleet-integration`
/// gate), written beside ours on Fleet Clusters so targets written for either select both.
pub const TURTLES_CLUSTERCLASS_NAME_LABEL: &str = "cluster-api.cattle.io/clusterclass-name";
pub const TURTLES_CLUSTERCLASS_NAMESPACE_LABEL: &str =
    "cluster-api.cattle.io/clusterclass-namespace";

/// Condition type on a CAPI Cluster whose import another controller works against (True, reason
/// `FinalizerRemoved` or `RancherFleetAgent`: `crate::model::turtles`); removed once none does.
pub const FLEET_CONFLICT_CONDITION: &str = "FleetAddonConflict";

/// Field manager of the [`FLEET_CONFLICT_CONDITION`] condition (owning only that list item).
pub const CONFLICT_FIELD_MANAGER: &str = "addon-provider-fleet-conflict";

/// Namespace annotation read by the Rancher webhook: allows a FleetWorkspace for an existing
/// namespace.
pub const FLEET_WORKSPACE_ANNOTATION: &str =
    "field.cattle.io/allow-fleetworkspace-creation-for-existing-namespace";

/// Annotation on a Fleet Cluster saying who prepared its registration. The runtime extension
/// sets it to [`REGISTRATION_RUNTIME_EXTENSION`] when it creates an agent-initiated Fleet Cluster
/// in BeforeClusterCreate; the import controller then keeps the Cluster agent-initiated.
pub const REGISTRATION_ANNOTATION: &str = "fleet.addons.cluster.x-k8s.io/registration";

/// Annotation the import controller writes on a Fleet Cluster whose agent settings it holds
/// ([`crate::model::fleet::hold_stranding_changes`]): what is held and the way out, which the
/// `FleetReady` condition shows (reason `AgentSettingsHeld`).
pub const HELD_AGENT_SETTINGS_ANNOTATION: &str =
    "fleet.addons.cluster.x-k8s.io/held-agent-settings";

/// Value of [`REGISTRATION_ANNOTATION`] set by the runtime extension.
pub const REGISTRATION_RUNTIME_EXTENSION: &str = "runtime-extension";

/// Label on Fleet objects shared by several Clusters (cross-namespace ClusterGroups and
/// BundleNamespaceMappings): we created it and delete it when its last user goes.
pub const MANAGED_LABEL: &str = "fleet.addons.cluster.x-k8s.io/managed";

/// Field manager for `FleetAddonConfig` `status.clusters` (the import counts).
pub const IMPORT_STATUS_FIELD_MANAGER: &str = "addon-provider-fleet-import-status";

/// Annotation kubectl writes for client-side apply; never copied to Fleet Clusters.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// CAPI pause annotation: a Cluster carrying it is not touched.
pub const CAPI_PAUSED_ANNOTATION: &str = "cluster.x-k8s.io/paused";

/// Cluster API's record of the lifecycle hooks it still has to call for a Cluster
/// (cluster-api v1.11/v1.12 `api/runtime/v1beta2/extensionconfig_types.go`
/// `PendingHooksAnnotation`; comma-separated hook names).
pub const CAPI_PENDING_HOOKS_ANNOTATION: &str = "runtime.cluster.x-k8s.io/pending-hooks";

/// Label on Fleet Clusters: the Kubernetes minor the control plane runs (`1.33`), for
/// `targetCustomizations`/`clusterSelector` that follow it through upgrades (docs/lifecycle.md).
pub const CONTROL_PLANE_MINOR_LABEL: &str = "control-plane-minor.fleet.addons.cluster.x-k8s.io";

/// Label on Fleet Clusters: the lowest Kubernetes minor the workers run.
pub const WORKERS_MINOR_LABEL: &str = "workers-minor.fleet.addons.cluster.x-k8s.io";

/// Label on Fleet Clusters while an upgrade step is under way: the minor the next step moves to,
/// set before it moves.
pub const UPGRADE_TARGET_MINOR_LABEL: &str = "upgrade-target-minor.fleet.addons.cluster.x-k8s.io";

/// Annotation on Fleet Clusters: the upgrade step the runtime extension's upgrade hooks last saw
/// (JSON; [`crate::model::upgrade_steps::UpgradeStep`]). The import controller turns it into the
/// version labels and `templateValues.KubernetesVersions`.
pub const UPGRADE_STEP_ANNOTATION: &str = "fleet.addons.cluster.x-k8s.io/upgrade-step";

/// Annotation on ClusterClasses and CAPI Clusters: Fleet agent settings (YAML or JSON) for the
/// Clusters of the class, or for the Cluster (docs/agent-settings.md;
/// [`crate::model::agent_settings`]).
pub const AGENT_SETTINGS_ANNOTATION: &str = "fleet.addons.cluster.x-k8s.io/agent-settings";

/// Field manager of the upgrade hooks' writes ([`UPGRADE_STEP_ANNOTATION`]).
pub const UPGRADE_STEP_FIELD_MANAGER: &str = "caapf-upgrade-steps";

/// Annotation on CAPI Clusters overriding `spec.runtimeExtension.upgradeSteps.waitForBundlesReady`
/// for that Cluster (`"true"` or `"false"`; `"false"` also turns off
/// `beforeClusterUpgrade.waitForBundlesReady`).
pub const WAIT_FOR_BUNDLES_ANNOTATION: &str = "fleet.addons.cluster.x-k8s.io/wait-for-bundles";

/// Annotation on CAPI Clusters overriding `spec.runtimeExtension.upgradeSteps.timeout` (a
/// duration such as `45m`).
pub const UPGRADE_GATE_TIMEOUT_ANNOTATION: &str =
    "fleet.addons.cluster.x-k8s.io/upgrade-gate-timeout";

/// Annotation on CAPI Clusters overriding `spec.runtimeExtension.upgradeSteps.bundleSelector`
/// (`key=value[,key=value]`; empty: every bundle).
pub const UPGRADE_GATE_BUNDLES_ANNOTATION: &str =
    "fleet.addons.cluster.x-k8s.io/upgrade-gate-bundles";

/// Annotation on CAPI Clusters releasing an upgrade gate now: the version of the step to let go
/// (`v1.34.2`), or `all`.
pub const SKIP_UPGRADE_GATE_ANNOTATION: &str = "fleet.addons.cluster.x-k8s.io/skip-upgrade-gate";

/// CAPI `--watch-filter` label key.
pub const CAPI_WATCH_FILTER_LABEL: &str = "cluster.x-k8s.io/watch-filter";

/// Field manager for Fleet Clusters and ClusterGroups (CAAPF's name).
pub const FIELD_MANAGER: &str = "addon-provider-fleet";

/// Field manager of the first, minimal write of an agent-initiated Fleet Cluster by the import
/// controller (name and client ID only; see [`crate::model::fleet::registration_stub`]).
pub const REGISTRATION_FIELD_MANAGER: &str = "addon-provider-fleet-registration";

/// Field manager of the move controller (src/controllers/move/): the move-state annotation and
/// `spec.paused` of a self-managed Cluster, and the move Bundles.
pub const MOVE_FIELD_MANAGER: &str = "addon-provider-fleet-move";

/// Field manager for namespace annotations (CAAPF's name).
pub const NAMESPACE_FIELD_MANAGER: &str = "namespace-addon-provider-fleet";

/// Field manager for the `FleetAddonConfig` condition `Authorized` (requests the API server
/// refused; [`crate::controllers::authorization`]).
pub const AUTHORIZATION_STATUS_FIELD_MANAGER: &str = "addon-provider-fleet-authorization";

/// Field manager for `FleetAddonConfig` status (CAAPF's name).
pub const STATUS_FIELD_MANAGER: &str = "fleet-addon-controller";

/// The namespace label the Kubernetes PodSecurity admission plugin enforces
/// (kubernetes.io/docs/concepts/security/pod-security-admission); the Fleet agent's namespace
/// gets it in the bootstrap.
pub const POD_SECURITY_ENFORCE_LABEL: &str = "pod-security.kubernetes.io/enforce";

/// Default namespace of the Fleet agent on workload clusters.
pub const DEFAULT_AGENT_NAMESPACE: &str = "fleet-addon-agent";

/// Default Fleet chart repository.
pub const DEFAULT_FLEET_REPOSITORY: &str = "https://rancher.github.io/fleet-helm-charts/";

/// Default namespace of the Fleet releases.
pub const DEFAULT_FLEET_NAMESPACE: &str = "cattle-fleet-system";

/// Helm release (and chart) names of Fleet.
pub const FLEET_CRD_RELEASE: &str = "fleet-crd";
/// Helm release (and chart) name of the Fleet controller.
pub const FLEET_RELEASE: &str = "fleet";

/// Fleet's own configuration ConfigMap (in the Fleet namespace). Without `spec.install`, this
/// provider keeps `apiServerURL`/`apiServerCA` of its JSON in line; Fleet reads it.
pub const FLEET_CONTROLLER_CONFIG_MAP: &str = "fleet-controller";

/// Key of [`FLEET_CONTROLLER_CONFIG_MAP`] holding Fleet's JSON configuration.
pub const FLEET_CONTROLLER_CONFIG_KEY: &str = "config";

/// Key of a feature-gate values ConfigMap (`featureGates.configMap.ref`) holding Fleet chart
/// values as YAML; Rancher reads it from `cattle-system/rancher-config` (CAAPF's convention).
pub const FEATURE_GATES_VALUES_KEY: &str = "fleet";

/// Fleet chart environment variable behind `featureGates.experimentalOciStorage`.
pub const EXPERIMENTAL_OCI_STORAGE: &str = "EXPERIMENTAL_OCI_STORAGE";
/// Fleet chart environment variable behind `featureGates.experimentalHelmOps`.
pub const EXPERIMENTAL_HELM_OPS: &str = "EXPERIMENTAL_HELM_OPS";

/// Name of the Secret (in the Cluster's namespace) holding the Fleet agent bootstrap files of a
/// Cluster; the GeneratePatches patch names it, so it never changes for a Cluster.
pub fn bootstrap_secret_name(cluster_name: &str) -> String {
    format!("{cluster_name}-fleet-agent-bootstrap")
}

/// Annotation on a bootstrap Secret saying what it holds (its keys), which GeneratePatches names:
/// `2` for the boot script (`crate::model::agent_patch::SecretFormat::Script`); absent on Secrets
/// an earlier release wrote (the plain manifest only).
pub const BOOTSTRAP_FORMAT_ANNOTATION: &str = "fleet.addons.cluster.x-k8s.io/bootstrap-format";

/// Annotation on a bootstrap Secret: the UID of the ClusterRegistrationToken whose values it
/// holds. The import controller rewrites the Secret's token values when the token was replaced.
pub const REGISTRATION_TOKEN_UID_ANNOTATION: &str =
    "fleet.addons.cluster.x-k8s.io/registration-token-uid";

/// Annotation on a ClusterRegistrationToken this provider creates or extends: when Fleet deletes
/// it (`creationTimestamp + spec.ttl`, RFC 3339), written with `spec.ttl`; the token watch keeps
/// only metadata ([`crate::model::registration_token`]).
pub const REGISTRATION_TOKEN_EXPIRES_ANNOTATION: &str =
    "fleet.addons.cluster.x-k8s.io/registration-token-expires";

/// Suffix of the kubeconfig Secret CAPI creates for a Cluster (`<cluster>-kubeconfig`).
pub fn kubeconfig_secret_name(capi_cluster_name: &str) -> String {
    format!("{capi_cluster_name}-kubeconfig")
}

/// Field manager of the Runtime SDK extension (BeforeClusterCreate creates the Fleet Cluster, its
/// ClusterRegistrationToken and the bootstrap Secret with it). Distinct from [`FIELD_MANAGER`] so
/// the import controller's server-side apply never conflicts with, or removes, what the hook set.
pub const RUNTIME_EXTENSION_FIELD_MANAGER: &str = "caapf-runtime-extension";

/// CAPI's label naming the Cluster an object belongs to (`clusterctl move` follows it).
pub const CAPI_CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";

/// Name of Fleet's controller ConfigMap (key `config`: agent image, TLS mode, …), in Fleet's
/// namespace.
pub const FLEET_CONTROLLER_CONFIGMAP: &str = "fleet-controller";

/// Condition type this provider sets on CAPI Clusters it imports (`status.conditions`), reporting
/// whether Fleet can deploy to the cluster and its bundles are ready. Users list it in a
/// Cluster's or ClusterClass's `spec.availabilityGates`, so renaming it breaks their Clusters.
pub const FLEET_READY_CONDITION: &str = "FleetReady";

/// Field manager of the [`FLEET_READY_CONDITION`] condition (server-side apply on the Cluster's
/// status subresource, owning only that list item, so Cluster API's own status writes and ours
/// never overwrite each other).
pub const HEALTH_FIELD_MANAGER: &str = "addon-provider-fleet-health";

/// Condition type this provider sets on a CAPI Cluster being deleted while the runtime extension
/// removes its Fleet workloads first (BeforeClusterDelete, `docs/lifecycle.md`): False with the
/// progress while they are removed, True once they are gone.
pub const WORKLOADS_REMOVED_CONDITION: &str = "FleetWorkloadsRemoved";

/// Field manager of the [`WORKLOADS_REMOVED_CONDITION`] condition (server-side apply on the
/// Cluster's status subresource, owning only that list item, as [`HEALTH_FIELD_MANAGER`] does
/// for `FleetReady`).
pub const TEARDOWN_FIELD_MANAGER: &str = "addon-provider-fleet-teardown";

/// Label on a Fleet Cluster whose workloads are being removed before its CAPI Cluster is
/// deleted (value `"true"`). Written by BeforeClusterDelete when the removal starts, and kept by
/// the import controller; bundle authors read it in `targetCustomizations` (`doNotDeploy: true`)
/// for bundles that target the cluster by name or by an empty selector.
pub const TEARDOWN_LABEL: &str = "fleet.addons.cluster.x-k8s.io/teardown";

/// Annotation on a Fleet Cluster being torn down: how many BundleDeployments (the agent's left
/// out) it had when the removal started, for the progress messages. Written by
/// BeforeClusterDelete together with [`TEARDOWN_LABEL`].
pub const TEARDOWN_BUNDLES_ANNOTATION: &str = "fleet.addons.cluster.x-k8s.io/teardown-bundles";

/// Annotation on a Fleet Cluster being torn down: when BeforeClusterDelete first saw none of its
/// BundleDeployments left (RFC 3339). A workload cluster that cannot be reached is given a
/// settle period from then; on the Fleet Cluster it survives a restart of the provider.
pub const TEARDOWN_BUNDLES_GONE_ANNOTATION: &str =
    "fleet.addons.cluster.x-k8s.io/teardown-bundles-gone";

/// Label on a Fleet Bundle (fleet.yaml `labels`, a HelmOp's `spec.labels`; Fleet copies a
/// Bundle's labels to its BundleDeployments except keys containing `cattle.io/`: rancher/fleet
/// v0.16.1 `internal/cmd/controller/target/target.go` `BundleDeploymentLabels` with
/// rancher/wrangler v3.7.0 `pkg/yaml/yaml.go` `CleanAnnotationsForExport`): `"true"` keeps the bundle on a cluster whose workloads are
/// removed before deletion, and BeforeClusterDelete does not wait for it. For the add-ons that
/// release what the others held (a cloud controller manager releases load balancers, a CSI
/// driver volumes); the bundle must also keep targeting the cluster, e.g. with a target on
/// [`TEARDOWN_LABEL`].
pub const KEEP_DURING_TEARDOWN_LABEL: &str = "fleet.addons.cluster.x-k8s.io/keep-during-teardown";

/// Annotation on a CAPI Cluster: `"true"` or `"false"` overrides
/// `spec.runtimeExtension.beforeClusterDelete.removeWorkloads` for this Cluster.
pub const REMOVE_WORKLOADS_ANNOTATION: &str =
    "fleet.addons.cluster.x-k8s.io/remove-workloads-before-delete";

/// Annotation on a CAPI Cluster: `"true"` lets its deletion proceed without waiting for its
/// Fleet workloads to be removed (the operator's escape hatch; effective at the next call).
pub const SKIP_WORKLOAD_REMOVAL_ANNOTATION: &str =
    "fleet.addons.cluster.x-k8s.io/skip-workload-removal";

/// Cluster API's annotation on a deleting Cluster once BeforeClusterDelete answered without a
/// retry (kubernetes-sigs/cluster-api v1.11.0 `api/runtime/v1beta2/extensionconfig_types.go`
/// `OkToDeleteAnnotation`, read by `internal/hooks/tracking.go` `IsOkToDelete`): from then on
/// the hook is not called again and Cluster API deletes the Cluster's objects.
pub const CAPI_OK_TO_DELETE_ANNOTATION: &str = "runtime.cluster.x-k8s.io/ok-to-delete";

/// Fleet Cluster label: the rollout wave of the Cluster (`spec.cluster.rollout`), selected by
/// the partitions of the `rolloutStrategy` that `caapf rollout-strategy` prints.
pub const ROLLOUT_WAVE_LABEL: &str = "rollout-wave.fleet.addons.cluster.x-k8s.io";

/// Fleet Cluster label, only while the Cluster is held (value: the reason): the printed
/// strategy puts held clusters into a last partition with `maxUnavailable: 0`.
pub const ROLLOUT_HOLD_LABEL: &str = "rollout-hold.fleet.addons.cluster.x-k8s.io";

/// Fleet Cluster annotation beside [`ROLLOUT_HOLD_LABEL`]: why it is held (the
/// `FleetRolloutHeld` condition's message).
pub const ROLLOUT_HOLD_MESSAGE_ANNOTATION: &str =
    "fleet.addons.cluster.x-k8s.io/rollout-hold-message";

/// Prefix of the Fleet Cluster labels made of topology variables (`spec.cluster.variableLabels`).
pub const VARIABLE_LABEL_PREFIX: &str = "variable.fleet.addons.cluster.x-k8s.io/";

/// Cluster annotation: the wave of a Cluster (wins over the topology variable).
pub const ROLLOUT_WAVE_ANNOTATION: &str = "fleet.addons.cluster.x-k8s.io/rollout-wave";

/// Cluster or ClusterClass annotation: hold the Cluster(s) manually (value: why).
pub const ROLLOUT_HOLD_ANNOTATION: &str = "fleet.addons.cluster.x-k8s.io/rollout-hold";

/// ClusterClass annotation `"true"`: soaks of the class's waves end now.
pub const ROLLOUT_RELEASE_ANNOTATION: &str = "fleet.addons.cluster.x-k8s.io/rollout-release";

/// The CAPI Cluster condition saying whether (and why) its add-on rollout is held.
pub const ROLLOUT_HELD_CONDITION: &str = "FleetRolloutHeld";

#[cfg(test)]
mod tests {
    #[test]
    fn the_bootstrap_secret_name_is_derived_from_the_cluster_name() {
        assert_eq!(
            super::bootstrap_secret_name("c1"),
            "c1-fleet-agent-bootstrap"
        );
    }
}
