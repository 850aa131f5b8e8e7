//! Table tests of the lifecycle hooks' decisions.

use super::*;
use crate::api::FleetAddonConfigSpec;
use crate::cli::ManagerFlags;
use serde_json::json;

impl HookOutcome {
    /// The metric label of the outcome.
    fn label(&self) -> &'static str {
        match self {
            HookOutcome::Success { .. } => "Success",
            HookOutcome::Retry { .. } => "Retry",
            HookOutcome::Failure { .. } => "Failure",
        }
    }
}

fn cluster(labels: Value) -> ClusterView {
    ClusterView::from_json(
        &json!({"metadata": {"name": "c1", "namespace": "team-a", "uid": "u-1", "labels": labels}}),
    )
    .expect("cluster")
}

fn config(yaml: &str) -> EffectiveConfig {
    let spec: FleetAddonConfigSpec = serde_yaml::from_str(yaml).expect("spec");
    EffectiveConfig::from_spec(&spec)
}

fn fleet_cluster(value: Value) -> FleetCluster {
    serde_json::from_value(value).expect("fleet cluster")
}

/// `Some(agent-initiated?)` for imported Clusters, `None` for the others.
fn imported(
    config: &EffectiveConfig,
    flags: &ManagerFlags,
    labels: Value,
) -> Result<Option<bool>, String> {
    hook_import(
        config,
        &WatchScope::new(flags.namespace.as_deref(), flags.watch_filter.as_deref()),
        &cluster(labels),
        &BTreeMap::new(),
    )
    .map(|r| match r {
        HookImport::AgentInitiated(_) => Some(true),
        HookImport::ManagerInitiated(_) => Some(false),
        HookImport::NotImported(_) => None,
    })
}

#[test]
fn registration_rule() {
    let flags = ManagerFlags::default();
    type Expected = Result<Option<bool>, String>;
    let rows: [(&str, Value, Expected); 7] = [
        // No FleetAddonConfig: imported, manager-initiated.
        ("", json!({}), Ok(Some(false))),
        // FleetAddonConfig without spec.cluster: not imported.
        ("{}", json!({}), Ok(None)),
        ("cluster: {agentInitiated: true}", json!({}), Ok(Some(true))),
        (
            "cluster: {agentInitiatedSelector: {matchLabels: {nat: \"true\"}}}",
            json!({"nat": "true"}),
            Ok(Some(true)),
        ),
        (
            "cluster: {agentInitiatedSelector: {matchLabels: {nat: \"true\"}}}",
            json!({}),
            Ok(Some(false)),
        ),
        (
            "cluster: {agentInitiated: true, namespaceRegexes: [\"prod-.*\"]}",
            json!({}),
            Ok(None),
        ),
        (
            "cluster: {agentInitiated: true, namespaceRegexes: [\"prod-(\"]}",
            json!({}),
            Err("problems".to_string()),
        ),
    ];
    for (yaml, labels, expected) in rows {
        let config = if yaml.is_empty() {
            EffectiveConfig::default()
        } else {
            config(yaml)
        };
        let got = imported(&config, &flags, labels.clone());
        match (&got, &expected) {
            (Err(message), Err(_)) => {
                assert!(message.contains("spec.cluster has problems"), "{message}")
            }
            _ => assert_eq!(got, expected, "{yaml} {labels}"),
        }
    }
}

#[test]
fn watch_filter_and_namespace_flags_exclude_clusters() {
    let config = config("cluster: {agentInitiated: true}");
    let mut flags = ManagerFlags {
        watch_filter: Some("mine".into()),
        ..ManagerFlags::default()
    };
    assert_eq!(imported(&config, &flags, json!({})), Ok(None));
    assert_eq!(
        imported(
            &config,
            &flags,
            json!({"cluster.x-k8s.io/watch-filter": "mine"})
        ),
        Ok(Some(true))
    );
    flags.watch_filter = None;
    flags.namespace = Some("other".into());
    assert_eq!(imported(&config, &flags, json!({})), Ok(None));
}

/// The label of an answer and a part of its message, for tables.
fn shape(outcome: &HookOutcome) -> (&'static str, String) {
    let message = match outcome {
        HookOutcome::Success { message }
        | HookOutcome::Retry { message, .. }
        | HookOutcome::Failure { message } => message.clone(),
    };
    (outcome.label(), message)
}

#[test]
fn before_cluster_create_answers_at_once_only_without_the_bootstrap() {
    let rows = [
        (
            FleetAgentSetting::NotUsed,
            Some("has no fleetAgent variable"),
        ),
        (
            FleetAgentSetting::Disabled,
            Some("fleetAgent.enabled is false"),
        ),
        (FleetAgentSetting::Enabled, None),
    ];
    for (setting, expected) in rows {
        let got = without_bootstrap(setting).map(|o| shape(&o));
        match expected {
            None => assert_eq!(got, None, "{setting:?}"),
            Some(part) => {
                let (label, message) = got.expect("an answer");
                assert_eq!(label, "Success", "{setting:?}");
                assert!(message.contains(part), "{setting:?}: {message}");
            }
        }
    }
}

#[test]
fn a_known_bootstrap_secret_answers_without_the_api_only_with_a_sound_configuration() {
    let good = config("cluster: {agentInitiated: true}");
    let bad = config("cluster: {namespaceRegexes: [\"(\"]}");
    let c = cluster(json!({}));
    let rows: [(Option<&EffectiveConfig>, bool, bool); 5] = [
        (Some(&good), true, true),
        (Some(&good), false, false),
        (Some(&bad), true, false),
        (None, true, false),
        (Some(&EffectiveConfig::default()), true, true),
    ];
    for (config, known, answers) in rows {
        let got = known_prepared(config, known, &c);
        assert_eq!(got.is_some(), answers, "{known} {:?}", config.is_some());
        if let Some(outcome) = got {
            assert_eq!(
                shape(&outcome),
                (
                    "Success",
                    "bootstrap Secret team-a/c1-fleet-agent-bootstrap exists".to_string()
                )
            );
        }
    }
}

#[test]
fn manager_initiated_fleet_clusters_stay_so_and_client_ids_are_kept() {
    let rows = [
        (json!({"metadata": {"name": "c1"}, "spec": {}}), true, None),
        (
            json!({"metadata": {"name": "c1"}, "spec": {"clientID": "abc"}}),
            true,
            Some("abc"),
        ),
        (
            json!({"metadata": {"name": "c1"}, "spec": {"clientID": ""}}),
            true,
            None,
        ),
        (
            json!({"metadata": {"name": "c1"}, "spec": {"kubeConfigSecret": "c1-kubeconfig"}}),
            false,
            None,
        ),
        (
            json!({"metadata": {"name": "c1"}, "spec": {"kubeConfigSecret": ""}}),
            true,
            None,
        ),
    ];
    for (value, agent, client_id) in rows {
        let fleet = fleet_cluster(value.clone());
        let got = check_not_manager_initiated(&fleet, "team-a");
        assert_eq!(got.is_ok(), agent, "{value}");
        if let Err(outcome) = got {
            let (label, message) = shape(&outcome);
            assert_eq!(label, "Success");
            assert!(message.contains("registers manager-initiated"), "{message}");
        }
        assert_eq!(existing_client_id(&fleet).as_deref(), client_id, "{value}");
    }
}

#[test]
fn before_cluster_create_waits_for_what_fleet_writes() {
    let token = |status: Value| -> ClusterRegistrationToken {
        serde_json::from_value(json!({"metadata": {"name": "c1"}, "spec": {}, "status": status}))
            .expect("token")
    };
    assert_eq!(
        issued_values_secret(&token(json!({"secretName": "s1"})), "team-a"),
        Ok("s1".to_string())
    );
    for status in [json!({}), json!({"secretName": ""})] {
        let got = issued_values_secret(&token(status), "team-a").expect_err("wait");
        assert_eq!(
            got,
            HookOutcome::retry(
                RETRY_FLEET,
                "waiting for Fleet to issue ClusterRegistrationToken team-a/c1"
            )
        );
    }

    let secret = |data: Option<&[u8]>| -> Secret {
        Secret {
            data: data
                .map(|bytes| BTreeMap::from([("values".to_string(), ByteString(bytes.to_vec()))])),
            ..Secret::default()
        }
    };
    let values =
        b"apiServerURL: https://fleet.example:6443\ntoken: t\nclusterNamespace: fleet-default\n";
    /// `Ok`: parsed; `Err`: a retry with this part of the message, after this long.
    type Expected<'a> = Result<(), (&'a str, i32)>;
    let rows: [(Option<Secret>, Expected); 5] = [
        (Some(secret(Some(values))), Ok(())),
        (None, Err(("waiting for Fleet to write", RETRY_FLEET))),
        (
            Some(secret(None)),
            Err(("waiting for Fleet to write", RETRY_FLEET)),
        ),
        (
            Some(secret(Some(b"\xff"))),
            Err(("not UTF-8", RETRY_CONFIG)),
        ),
        (
            Some(secret(Some(b"[a"))),
            Err(("Secret team-a/s1: ", RETRY_CONFIG)),
        ),
    ];
    for (secret, expected) in rows {
        let got = registration_values(secret.as_ref(), "team-a", "s1");
        match (got, expected) {
            (Ok(_), Ok(())) => {}
            (
                Err(HookOutcome::Retry {
                    after_seconds,
                    message,
                }),
                Err((part, after)),
            ) => {
                assert!(message.contains(part), "{message}");
                assert_eq!(after_seconds, after, "{message}");
            }
            (got, expected) => panic!("{got:?} != {expected:?}"),
        }
    }
}

#[test]
fn fleet_agent_defaults_and_the_chart_version() {
    let cm = |data: Option<&str>| -> ConfigMap {
        ConfigMap {
            data: data.map(|text| BTreeMap::from([("config".to_string(), text.to_string())])),
            ..ConfigMap::default()
        }
    };
    let waiting = fleet_agent_defaults(None, "cattle-fleet-system").expect_err("wait");
    assert_eq!(
        waiting,
        HookOutcome::retry(
            RETRY_FLEET * 2,
            "waiting for Fleet: ConfigMap cattle-fleet-system/fleet-controller has no config"
        )
    );
    assert!(fleet_agent_defaults(Some(&cm(None)), "f").is_err());
    let broken = fleet_agent_defaults(Some(&cm(Some("{"))), "f").expect_err("broken");
    assert!(
        matches!(
            broken,
            HookOutcome::Retry {
                after_seconds: RETRY_CONFIG,
                ..
            }
        ),
        "{broken:?}"
    );

    let config = EffectiveConfig::default();
    let defaults = |image: &str| {
        fleet_agent_defaults(
            Some(&cm(Some(&json!({"agentImage": image}).to_string()))),
            "f",
        )
        .expect("defaults")
    };
    let tagged = defaults("rancher/fleet-agent:v0.13.1");
    let untagged = defaults("rancher/fleet-agent");
    let rows: [(Option<&str>, &FleetAgentDefaults, Option<&str>); 5] = [
        // The version this provider installed wins over the image's.
        (Some("0.12.4"), &tagged, Some("0.12.4")),
        (None, &tagged, Some("0.13.1")),
        (Some(""), &tagged, Some("0.13.1")),
        (Some("0.12.4"), &untagged, Some("0.12.4")),
        (None, &untagged, None),
    ];
    for (installed, defaults, expected) in rows {
        let got = agent_chart(&cluster(json!({})), &config, installed, defaults);
        match expected {
            Some(version) => {
                let location = got.expect("a chart");
                assert_eq!(location.version, version, "{installed:?}");
                assert_eq!(location.repository, config.agent_chart_repository());
            }
            // Success naming it (issue #38: BeforeClusterCreate retried forever).
            None => assert!(
                matches!(&got, Err(HookOutcome::Success { message }) if message.starts_with("cannot tell which Fleet release is installed (FleetAddonConfig has no status.installedVersion and the agent image rancher/fleet-agent has no version tag): Cluster team-a/c1 is created without the Fleet agent at boot")),
                "{got:?}"
            ),
        }
    }
    assert_eq!(fleet_namespace(&config), names::DEFAULT_FLEET_NAMESPACE);
    assert_eq!(
        fleet_namespace(&self::config(
            "install: {followLatest: true, namespace: fleet-here}"
        )),
        "fleet-here"
    );
}

/// Fleet 0.11's agent is not rendered: Success naming the version (issue #29, defect 8: the
/// hook retried forever); 0.12 and later go on; a version that is not semantic is answered the
/// same way (issue #38: it retried forever).
#[test]
fn an_unsupported_fleet_is_answered_with_success_naming_it() {
    let c = cluster(json!({}));
    let location = |version: &str| ChartLocation {
        repository: "https://charts.example.com/".into(),
        version: version.into(),
    };
    match supported_fleet(&c, &location("0.11.14")) {
        Err(HookOutcome::Success { message }) => {
            assert!(
                message.contains("Fleet 0.11.14") && message.contains("0.12"),
                "{message}"
            );
            assert!(message.contains("team-a/c1"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    for version in ["0.12.0", "0.13.1", "0.16.1", "0.17.0-rc.1"] {
        assert!(supported_fleet(&c, &location(version)).is_ok(), "{version}");
    }
    assert!(matches!(
        supported_fleet(&c, &location("latest")),
        Err(HookOutcome::Success { message }) if message.contains("(\"latest\" is not a semantic version)") && message.contains("team-a/c1")
    ));
}

#[test]
fn the_bootstrap_secret_is_labelled_and_owned_by_the_cluster() {
    let c = cluster(json!({}));
    let secret = desired_bootstrap_secret(
        &c,
        BTreeMap::from([("fleet-agent.yaml".to_string(), "---\n".to_string())]),
        "token-uid-1",
    );
    assert_eq!(
        secret.metadata.name.as_deref(),
        Some("c1-fleet-agent-bootstrap")
    );
    assert_eq!(secret.metadata.namespace.as_deref(), Some("team-a"));
    assert_eq!(
        secret
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(names::CAPI_CLUSTER_NAME_LABEL))
            .map(String::as_str),
        Some("c1")
    );
    // What it holds (GeneratePatches names its keys) and which token it was rendered from.
    let annotations = secret.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations
            .get(names::BOOTSTRAP_FORMAT_ANNOTATION)
            .map(String::as_str),
        Some("2")
    );
    assert_eq!(
        annotations
            .get(names::REGISTRATION_TOKEN_UID_ANNOTATION)
            .map(String::as_str),
        Some("token-uid-1")
    );
    let owners = secret.metadata.owner_references.unwrap_or_default();
    assert_eq!(owners.len(), 1);
    assert_eq!(owners[0].uid, "u-1");
    assert_eq!(
        secret.data.and_then(|d| d.get("fleet-agent.yaml").cloned()),
        Some(ByteString(b"---\n".to_vec()))
    );
    // Without a uid (a request without one): no owner reference naming nothing.
    let anonymous =
        ClusterView::from_json(&json!({"metadata": {"name": "c2", "namespace": "team-a"}}))
            .expect("cluster");
    assert!(
        desired_bootstrap_secret(&anonymous, BTreeMap::new(), "u")
            .metadata
            .owner_references
            .is_none()
    );
}

#[test]
fn before_cluster_delete_deletes_only_fleet_clusters_it_prepared_or_the_cluster_owns() {
    let c = cluster(json!({}));
    let mark = json!({(names::REGISTRATION_ANNOTATION): names::REGISTRATION_RUNTIME_EXTENSION});
    let owner = json!([{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "c1", "uid": "u-1"}]);
    let other_owner = json!([{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "c1", "uid": "u-2"}]);
    let rows = [
        (json!({"name": "c1"}), false),
        (json!({"name": "c1", "annotations": mark}), true),
        (json!({"name": "c1", "ownerReferences": owner}), true),
        (json!({"name": "c1", "ownerReferences": other_owner}), false),
        (
            json!({"name": "c1", "ownerReferences": owner, "deletionTimestamp": "2026-01-01T00:00:00Z"}),
            false,
        ),
    ];
    for (metadata, deletes) in rows {
        let fleet = fleet_cluster(json!({"metadata": metadata, "spec": {}}));
        assert_eq!(deletes_fleet_cluster(&c, &fleet), deletes, "{metadata}");
    }
    // A Cluster without a uid owns nothing.
    let anonymous =
        ClusterView::from_json(&json!({"metadata": {"name": "c1", "namespace": "team-a"}}))
            .expect("cluster");
    let unowned = fleet_cluster(
        json!({"metadata": {"name": "c1", "ownerReferences": [{"apiVersion": "v1", "kind": "Cluster", "name": "c1", "uid": ""}]}, "spec": {}}),
    );
    assert!(!deletes_fleet_cluster(&anonymous, &unowned));

    assert_eq!(delete_answer(&[]), HookOutcome::ok());
    assert_eq!(
        delete_answer(&[
            "Secret a/b".to_string(),
            "ClusterRegistrationToken a/c".to_string()
        ]),
        HookOutcome::retry(
            RETRY_FLEET,
            "waiting for Secret a/b and ClusterRegistrationToken a/c to be deleted"
        )
    );
}

/// Defect 9 of issue #29: a Cluster the hooks prepared nothing for, whose workloads are not
/// removed first, is answered from the request alone (no read, so no error of ours can hold
/// it); errors of ours hold only Clusters the hooks prepared something for, or whose removal
/// the user asked for.
#[test]
fn before_cluster_delete_reads_only_for_clusters_it_has_something_to_do_for() {
    let deadline: Timestamp = "2026-11-23T10:30:00Z".parse().expect("time");
    let gone: Timestamp = "2026-11-23T10:05:00Z".parse().expect("time");
    use FleetAgentSetting::{Disabled, Enabled, NotUsed};
    let answer = |d: &DeleteStart| match d {
        DeleteStart::Answer(outcome) => shape(outcome).0,
        DeleteStart::Cleanup {
            hold_on_error: true,
        } => "cleanup, holds on errors",
        DeleteStart::Cleanup {
            hold_on_error: false,
        } => "cleanup, proceeds on errors",
        DeleteStart::TeardownEnded {
            hold_on_error: true,
        } => "ended, holds on errors",
        DeleteStart::TeardownEnded {
            hold_on_error: false,
        } => "ended, proceeds on errors",
        DeleteStart::Teardown { .. } => "teardown",
    };
    let rows: [(Mode, FleetAgentSetting, bool, &str); 14] = [
        (Mode::Off, NotUsed, false, "Success"),
        (Mode::Off, Disabled, false, "Success"),
        (Mode::NotDeleting, NotUsed, false, "Success"),
        // The bootstrap Secret is known to exist: delete it.
        (Mode::Off, NotUsed, true, "cleanup, holds on errors"),
        // The class uses the bootstrap: the hooks may have prepared it.
        (Mode::Off, Enabled, false, "cleanup, holds on errors"),
        (
            Mode::NotDeleting,
            Enabled,
            false,
            "cleanup, holds on errors",
        ),
        (Mode::On { deadline }, NotUsed, false, "teardown"),
        (Mode::On { deadline }, Enabled, true, "teardown"),
        (Mode::Skipped, NotUsed, false, "ended, proceeds on errors"),
        (Mode::Skipped, Enabled, false, "ended, holds on errors"),
        (
            Mode::Expired { deadline: gone },
            NotUsed,
            false,
            "ended, proceeds on errors",
        ),
        (
            Mode::Expired { deadline: gone },
            Disabled,
            true,
            "ended, holds on errors",
        ),
        (Mode::Unknown, NotUsed, false, "Retry"),
        (Mode::Unknown, Enabled, true, "Retry"),
    ];
    for (mode, agent, known, want) in rows {
        assert_eq!(
            answer(&delete_start(&mode, agent, known)),
            want,
            "{mode:?} {agent:?} secret known: {known}"
        );
    }
    let DeleteStart::Answer(HookOutcome::Success { message }) =
        delete_start(&Mode::Off, NotUsed, false)
    else {
        panic!("answered at once");
    };
    assert!(message.starts_with("nothing to clean up"), "{message}");

    // An error of ours on a Cluster that is not held on errors: proceed, saying so.
    let error = HookOutcome::retry(
        RETRY_API,
        "reading Fleet Cluster team-a/c1: forbidden (403)",
    );
    assert_eq!(
        proceed_despite(error),
        HookOutcome::success(
            "proceeding without cleaning up (nothing of this provider's needs it): reading Fleet Cluster team-a/c1: forbidden (403)"
        )
    );
    assert_eq!(proceed_despite(HookOutcome::ok()), HookOutcome::ok());
    // The annotation problems are appended to any answer.
    let problems = ["annotation x: \"yes\" is neither".to_string()];
    assert_eq!(
        with_problems(HookOutcome::retry(15, "holding"), &problems),
        HookOutcome::retry(15, "holding; annotation x: \"yes\" is neither")
    );
    assert_eq!(with_problems(HookOutcome::ok(), &[]), HookOutcome::ok());
}

#[test]
fn the_fleet_cluster_name_follows_the_configuration() {
    let c = cluster(json!({}));
    let rows = [
        (None, "c1"),
        (Some(config("{}")), "c1"),
        (Some(config("cluster: {naming: {prefix: \"p-\"}}")), "p-c1"),
    ];
    for (config, expected) in rows {
        assert_eq!(fleet_cluster_of(&c, config.as_ref()), expected);
    }
}

#[test]
fn before_cluster_upgrade_looks_for_bundles_where_fleet_registered_the_cluster() {
    let c = cluster(json!({}));
    let no_fleet = bundle_namespace(&c, None).expect_err("answer");
    assert_eq!(shape(&no_fleet).0, "Success");
    let unregistered = fleet_cluster(json!({"metadata": {"name": "c1"}, "spec": {}}));
    assert_eq!(
        bundle_namespace(&c, Some(&unregistered)),
        Err(HookOutcome::retry(
            RETRY_UPGRADE,
            "waiting for Fleet Cluster team-a/c1 to register with Fleet before upgrading"
        ))
    );
    let registered = fleet_cluster(
        json!({"metadata": {"name": "c1"}, "spec": {}, "status": {"namespace": "cluster-team-a-c1-123"}}),
    );
    assert_eq!(
        bundle_namespace(&c, Some(&registered)),
        Ok("cluster-team-a-c1-123".to_string())
    );

    let ready = json!({"metadata": {"name": "a"}, "spec": {"deploymentID": "x"},
        "status": {"appliedDeploymentID": "x", "ready": true, "nonModified": true}});
    let pending = json!({"metadata": {"name": "b"}, "spec": {"deploymentID": "y"}});
    assert_eq!(
        upgrade_answer(&c, "c1", std::slice::from_ref(&ready), Some("v1.31.0")),
        HookOutcome::success("all 1 Fleet bundles of Fleet Cluster team-a/c1 are ready")
    );
    assert_eq!(
        upgrade_answer(&c, "c1", &[ready, pending], Some("v1.31.0")),
        HookOutcome::retry(
            RETRY_UPGRADE,
            "holding the upgrade to v1.31.0 until the Fleet bundles of Fleet Cluster team-a/c1 are ready: b (WaitApplied)"
        )
    );
}

#[test]
fn bundle_readiness_follows_fleet() {
    let bd = |name: &str, spec_id: &str, applied: &str, ready: bool, non_modified: bool| {
        json!({"metadata": {"name": name, "labels": {"fleet.cattle.io/bundle-namespace": "fleet-default", "fleet.cattle.io/bundle-name": name}},
               "spec": {"deploymentID": spec_id},
               "status": {"appliedDeploymentID": applied, "ready": ready, "nonModified": non_modified}})
    };
    let bds = [
        bd("zeta", "a", "a", true, true),
        bd("cni", "b", "a", true, true),
        bd("app", "c", "c", false, true),
        bd("drift", "d", "d", true, false),
        json!({"metadata": {"name": "raw"}, "spec": {"deploymentID": "x"}}),
    ];
    assert_eq!(
        not_ready_bundles(&bds),
        [
            ("fleet-default/app".to_string(), "NotReady"),
            ("fleet-default/cni".to_string(), "WaitApplied"),
            ("fleet-default/drift".to_string(), "Modified"),
            ("raw".to_string(), "WaitApplied"),
        ]
    );
    // rancher/fleet v0.16.1 `summary.go` `GetDeploymentState`, as Fleet writes the objects: a
    // new deployment staged behind a rollout partition leaves the old one ready (OutOfSync); a
    // failed apply (ErrApplied); a drifted one, whose false `nonModified` Fleet omits.
    let fleet_bd = |name: &str, yaml: &str| {
        let mut bd: Value = serde_yaml::from_str(yaml).expect("yaml");
        bd["metadata"] = json!({"name": name});
        bd
    };
    let staged = fleet_bd(
        "staged",
        "spec:\n  deploymentID: s-1a2b:aa\n  stagedDeploymentID: s-9f8e:bb\nstatus:\n  appliedDeploymentID: s-1a2b:aa\n  ready: true\n  nonModified: true\n",
    );
    let promoted = fleet_bd(
        "promoted",
        "spec:\n  deploymentID: s-9f8e:bb\n  stagedDeploymentID: s-9f8e:bb\nstatus:\n  appliedDeploymentID: s-9f8e:bb\n  ready: true\n  nonModified: true\n",
    );
    let failed = fleet_bd(
        "failed",
        "spec:\n  deploymentID: s-2:cc\n  stagedDeploymentID: s-2:cc\nstatus:\n  appliedDeploymentID: s-1:cc\n  conditions:\n  - type: Deployed\n    status: \"False\"\n    message: chart requires kubeVersion >=1.31.0-0\n",
    );
    let drifted = fleet_bd(
        "drifted",
        "spec:\n  deploymentID: s-3:dd\n  stagedDeploymentID: s-3:dd\nstatus:\n  appliedDeploymentID: s-3:dd\n  ready: true\n",
    );
    assert_eq!(
        [&staged, &promoted, &failed, &drifted].map(bundle_state),
        [
            Some("OutOfSync"),
            None,
            Some("ErrApplied"),
            Some("Modified")
        ]
    );
    let c = cluster(json!({}));
    assert!(matches!(
        upgrade_answer(&c, "c1", &[staged], None),
        HookOutcome::Retry { message, .. } if message.ends_with("staged (OutOfSync)")
    ));
}

#[test]
fn long_bundle_lists_are_capped() {
    let bundles: Vec<(String, &'static str)> =
        (0..12).map(|i| (format!("b{i:02}"), "NotReady")).collect();
    let text = describe_bundles(&bundles);
    assert!(text.ends_with("b09 (NotReady), and 2 more"), "{text}");
}

/// BeforeClusterCreate's registration writes, one row per state of the Fleet Cluster and the
/// token: what is created or completed, and the answer until all of it is there.
#[test]
fn before_cluster_create_writes_what_is_missing_and_waits_for_its_answer() {
    let c = cluster(json!({}));
    let import = config("cluster: {naming: {prefix: \"f-\"}}")
        .cluster
        .expect("import");
    let now = Timestamp::from_second(1_800_000_000).expect("time");
    let with_id =
        fleet_cluster(json!({"metadata": {"name": "f-c1"}, "spec": {"clientID": "id-1"}}));
    let without_id = fleet_cluster(json!({"metadata": {"name": "f-c1"}, "spec": {}}));
    let manager = fleet_cluster(
        json!({"metadata": {"name": "f-c1"}, "spec": {"kubeConfigSecret": "c1-kubeconfig"}}),
    );
    let token = |status: Value| -> ClusterRegistrationToken {
        serde_json::from_value(json!({"metadata": {"name": "c1"}, "spec": {}, "status": status}))
            .expect("token")
    };
    let (issued, pending) = (token(json!({"secretName": "s1"})), token(json!({})));
    let waiting_token = "waiting for Fleet to issue ClusterRegistrationToken team-a/c1";
    type Row<'a> = (
        Option<&'a FleetCluster>,
        Option<&'a ClusterRegistrationToken>,
        &'a [&'a str],
        Result<(&'a str, &'a str), &'a str>,
    );
    let rows: [Row; 6] = [
        (
            None,
            None,
            &["create Cluster f-c1", "create ClusterRegistrationToken c1"],
            Err(waiting_token),
        ),
        (
            None,
            Some(&issued),
            &["create Cluster f-c1"],
            Err("creating Fleet Cluster team-a/f-c1"),
        ),
        (
            Some(&with_id),
            None,
            &["create ClusterRegistrationToken c1"],
            Err(waiting_token),
        ),
        (Some(&with_id), Some(&pending), &[], Err(waiting_token)),
        (Some(&with_id), Some(&issued), &[], Ok(("id-1", "s1"))),
        (
            Some(&without_id),
            Some(&issued),
            &["patch Cluster f-c1"],
            Ok(("fresh", "s1")),
        ),
    ];
    for (fleet, token, want_writes, want) in rows {
        let (writes, ready) = registration(&c, &import, fleet, token, "fresh", now).expect("plan");
        let described: Vec<String> = writes
            .iter()
            .map(|write| match write {
                Write::CreateOrGet {
                    object,
                    body,
                    manager,
                } => {
                    assert_eq!(*manager, names::RUNTIME_EXTENSION_FIELD_MANAGER);
                    assert_eq!(body["metadata"]["namespace"], "team-a");
                    if object.resource.kind == "Cluster" {
                        assert_eq!(body["spec"]["clientID"], "fresh");
                    }
                    format!("create {} {}", object.resource.kind, object.name)
                }
                Write::MergePatch { object, patch, .. } => {
                    assert_eq!(patch, &json!({"spec": {"clientID": "fresh"}}));
                    format!("patch {} {}", object.resource.kind, object.name)
                }
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(described, want_writes, "{fleet:?} {token:?}");
        let ready = ready.map_err(|outcome| shape(&outcome).1);
        let want = want
            .map(|(id, secret)| (id.to_string(), secret.to_string()))
            .map_err(str::to_string);
        assert_eq!(ready, want, "{fleet:?} {token:?}");
    }
    // A manager-initiated Fleet Cluster stays so: nothing written, Success.
    let (writes, ready) =
        registration(&c, &import, Some(&manager), None, "fresh", now).expect("plan");
    assert!(writes.is_empty());
    assert_eq!(shape(&ready.expect_err("answer")).0, "Success");
}

/// BeforeClusterDelete deletes the bootstrap Secret and the token always, the Fleet Cluster
/// only when it deletes it.
#[test]
fn before_cluster_delete_cleans_up_what_the_hooks_prepared() {
    let c = cluster(json!({}));
    let mark = json!({(names::REGISTRATION_ANNOTATION): names::REGISTRATION_RUNTIME_EXTENSION});
    let ours = fleet_cluster(
        json!({"metadata": {"name": "c1", "namespace": "team-a", "annotations": mark}, "spec": {}}),
    );
    let theirs =
        fleet_cluster(json!({"metadata": {"name": "c1", "namespace": "team-a"}, "spec": {}}));
    let deleted = |fleet: Option<&FleetCluster>| -> Vec<String> {
        cleanup(&c, fleet)
            .iter()
            .map(|write| match write {
                Write::Delete {
                    object,
                    live_check: false,
                } => {
                    assert_eq!(object.namespace.as_deref(), Some("team-a"));
                    format!("{} {}", object.resource.kind, object.name)
                }
                other => panic!("unexpected {other:?}"),
            })
            .collect()
    };
    let prepared = [
        "Secret c1-fleet-agent-bootstrap",
        "ClusterRegistrationToken c1",
    ];
    assert_eq!(deleted(None), prepared);
    assert_eq!(deleted(Some(&theirs)), prepared);
    assert_eq!(
        deleted(Some(&ours)),
        [&prepared[..], &["Cluster c1"]].concat()
    );
}

/// A write that fails is answered with a retry naming it.
#[test]
fn a_failed_write_is_a_retry_naming_it() {
    let write = cleanup(&cluster(json!({})), None).remove(1);
    let (what, object) = write.describe().expect("a write");
    let status = kube::core::Status::failure("forbidden", "Forbidden").with_code(403);
    let err = crate::Error::Kube(kube::Error::Api(Box::new(status)));
    let answer = api_retry(
        &what,
        object.namespace.as_deref().unwrap_or_default(),
        &object.name,
        &err,
    );
    assert_eq!(
        answer,
        HookOutcome::retry(
            RETRY_API,
            "deleting ClusterRegistrationToken team-a/c1: forbidden (403)"
        )
    );
}

/// A repository URL with a password is refused by validation; the hook does not pull the agent
/// chart from it either (helm would get the password on its command line), whether the URL is
/// the agent chart's own or the installation's it falls back to. Other problems elsewhere do
/// not hold it.
#[test]
fn agent_chart_is_not_pulled_with_problems_in_its_settings() {
    let config_map = ConfigMap {
        data: Some(BTreeMap::from([(
            "config".to_string(),
            json!({"agentImage": "rancher/fleet-agent:v0.13.1"}).to_string(),
        )])),
        ..ConfigMap::default()
    };
    let defaults = fleet_agent_defaults(Some(&config_map), "f").expect("defaults");
    let rows = [
        (
            "{cluster: {}, install: {version: 0.13.1, repository: 'https://u:pw-9f2@charts.example.com/'}}",
            Some("spec.install.repository: user information in the URL is refused"),
        ),
        (
            "{cluster: {}, runtimeExtension: {agentChartRepository: 'https://u:pw-9f2@charts.example.com/'}}",
            Some(
                "spec.runtimeExtension.agentChartRepository: user information in the URL is refused",
            ),
        ),
        // The agent chart has its own repository: the installation's problem does not hold it.
        (
            "{cluster: {}, install: {version: 0.13.1, repository: 'https://u:pw-9f2@charts.example.com/'}, runtimeExtension: {agentChartRepository: 'https://mirror.example.com/'}}",
            None,
        ),
        (
            "{cluster: {}, install: {version: 0.13.1, repository: 'https://charts.example.com/'}}",
            None,
        ),
    ];
    for (yaml, want) in rows {
        let got = agent_chart(&cluster(json!({})), &config(yaml), None, &defaults);
        match want {
            Some(want) => assert!(
                matches!(&got, Err(HookOutcome::Retry { message, after_seconds })
                    if message.contains(want) && !message.contains("pw-9f2") && *after_seconds == RETRY_CONFIG),
                "{yaml}: {got:?}"
            ),
            None => assert!(got.is_ok(), "{yaml}: {got:?}"),
        }
    }
}
