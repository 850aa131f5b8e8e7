use std::collections::BTreeMap;

use serde_json::json;

use super::*;
use crate::model::validation::{
    is_quantity, validate_agent_overrides as validate_overrides,
    validate_agent_settings as validate,
};

fn settings(value: serde_json::Value) -> AgentSettings {
    serde_json::from_value(value).expect("test settings decode")
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn paths(errors: &[FieldError]) -> Vec<String> {
    errors.iter().map(|e| e.path.clone()).collect()
}

const PATH: &str = "metadata.annotations[fleet.addons.cluster.x-k8s.io/agent-settings]";

#[test]
fn annotation_reads_yaml_and_json() {
    let yaml = "agentTolerations:\n- {key: karpenter.sh/controller, operator: Exists, effect: NoSchedule}\nhostNetwork: false\n";
    let json = r#"{"agentTolerations": [{"key": "karpenter.sh/controller", "operator": "Exists", "effect": "NoSchedule"}], "hostNetwork": false}"#;
    let expected = settings(json!({
        "agentTolerations": [{"key": "karpenter.sh/controller", "operator": "Exists", "effect": "NoSchedule"}],
        "hostNetwork": false,
    }));
    assert_eq!(parse_annotation(yaml), Ok(expected.clone()));
    assert_eq!(parse_annotation(json), Ok(expected));
}

#[test]
fn annotation_problems_carry_their_field_path() {
    let cases: &[(&str, &str, &[&str])] = &[
        ("not yaml", "agentTolerations: [", &[PATH]),
        ("not an object", "[1, 2]", &[PATH]),
        ("a scalar", "true", &[PATH]),
        (
            "wrong type of a field",
            "hostNetwork: maybe",
            &["metadata.annotations[fleet.addons.cluster.x-k8s.io/agent-settings].hostNetwork"],
        ),
        (
            "unknown top-level field",
            "agentToleration: []",
            &["metadata.annotations[fleet.addons.cluster.x-k8s.io/agent-settings].agentToleration"],
        ),
        (
            "Fleet 0.16's agentPullSecrets is not offered",
            "agentPullSecrets: [{name: s}]",
            &[
                "metadata.annotations[fleet.addons.cluster.x-k8s.io/agent-settings].agentPullSecrets",
            ],
        ),
        (
            "unknown nested field",
            "agentTolerations: [{key: a, operator: Exists, efect: NoSchedule}]",
            &[
                "metadata.annotations[fleet.addons.cluster.x-k8s.io/agent-settings].agentTolerations[0].efect",
            ],
        ),
        (
            "invalid value",
            "agentTolerations: [{key: a, operator: Exists, effect: NoSchedul}]",
            &[
                "metadata.annotations[fleet.addons.cluster.x-k8s.io/agent-settings].agentTolerations[0].effect",
            ],
        ),
        (
            "two problems",
            "agentNamespace: Fleet\nprivateRepoURL: https://registry.example.com",
            &[
                "metadata.annotations[fleet.addons.cluster.x-k8s.io/agent-settings].agentNamespace",
                "metadata.annotations[fleet.addons.cluster.x-k8s.io/agent-settings].privateRepoURL",
            ],
        ),
    ];
    for (name, text, expected) in cases {
        let errors = parse_annotation(text).expect_err(name);
        assert_eq!(paths(&errors), *expected, "{name}: {errors:?}");
        assert!(
            errors.iter().all(|e| !e.message.contains('\n')),
            "{name}: one line per problem"
        );
    }
}

#[test]
fn null_fields_are_absent_not_unknown() {
    assert_eq!(
        parse_annotation("hostNetwork: null\nagentNamespace: agents"),
        Ok(settings(json!({"agentNamespace": "agents"})))
    );
}

#[test]
fn every_fleet_agent_field_is_accepted() {
    let text = r#"
agentNamespace: agents
agentTolerations: [{key: a, operator: Equal, value: b, effect: NoExecute, tolerationSeconds: 30}]
agentEnvVars: [{name: FLEET_AGENT_METRICS_BIND_ADDRESS, value: ":8090"}, {name: FROM_SECRET, valueFrom: {secretKeyRef: {name: s, key: k}}}]
hostNetwork: true
agentAffinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms: [{matchExpressions: [{key: pool, operator: In, values: [system]}]}]
    preferredDuringSchedulingIgnoredDuringExecution: [{weight: 10, preference: {matchExpressions: [{key: cpu, operator: Gt, values: ["4"]}]}}]
agentResources: {requests: {cpu: 100m, memory: 128Mi}, limits: {memory: 1Gi}}
agentSchedulingCustomization:
  priorityClass: {value: 1000, preemptionPolicy: Never}
  podDisruptionBudget: {maxUnavailable: "50%"}
privateRepoURL: registry.example.com:5000/mirror
"#;
    let parsed = parse_annotation(text).unwrap_or_else(|e| panic!("{e:?}"));
    let written = serde_json::to_value(&parsed).unwrap();
    let read: serde_json::Value = serde_yaml::from_str(text).unwrap();
    assert_eq!(written, read, "every field survives the decoding");
}

#[test]
fn value_rules() {
    let cases: &[(&str, serde_json::Value, &[&str])] = &[
        (
            "valid defaults",
            json!({"agentTolerations": [{"key": "k", "operator": "Exists"}]}),
            &[],
        ),
        (
            "empty key needs Exists",
            json!({"agentTolerations": [{"operator": "Equal", "value": "x"}]}),
            &["p.agentTolerations[0].operator"],
        ),
        (
            "empty key with Exists tolerates all",
            json!({"agentTolerations": [{"operator": "Exists"}]}),
            &[],
        ),
        (
            "unknown operator",
            json!({"agentTolerations": [{"key": "k", "operator": "In"}]}),
            &["p.agentTolerations[0].operator"],
        ),
        (
            "Exists with a value",
            json!({"agentTolerations": [{"key": "k", "operator": "Exists", "value": "v"}]}),
            &["p.agentTolerations[0].value"],
        ),
        (
            "seconds without NoExecute",
            json!({"agentTolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}]}),
            &["p.agentTolerations[0].tolerationSeconds"],
        ),
        (
            "env name with =",
            json!({"agentEnvVars": [{"name": "A=B", "value": "x"}]}),
            &["p.agentEnvVars[0].name"],
        ),
        (
            "env name empty",
            json!({"agentEnvVars": [{"name": ""}]}),
            &["p.agentEnvVars[0].name"],
        ),
        (
            "env name twice",
            json!({"agentEnvVars": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]}),
            &["p.agentEnvVars[1].name"],
        ),
        (
            "value and valueFrom",
            json!({"agentEnvVars": [{"name": "A", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}),
            &["p.agentEnvVars[0].valueFrom"],
        ),
        (
            "namespace not a label",
            json!({"agentNamespace": "Agents"}),
            &["p.agentNamespace"],
        ),
        (
            "repo with scheme",
            json!({"privateRepoURL": "http://r"}),
            &["p.privateRepoURL"],
        ),
        (
            "repo empty",
            json!({"privateRepoURL": ""}),
            &["p.privateRepoURL"],
        ),
        (
            "quantity",
            json!({"agentResources": {"requests": {"cpu": "lots"}, "limits": {"memory": "1Gi"}}}),
            &["p.agentResources.requests[cpu]"],
        ),
        (
            "negative quantity",
            json!({"agentResources": {"limits": {"cpu": -1}}}),
            &["p.agentResources.limits[cpu]"],
        ),
        (
            "pdb both",
            json!({"agentSchedulingCustomization": {"podDisruptionBudget": {"minAvailable": "1", "maxUnavailable": "1"}}}),
            &["p.agentSchedulingCustomization.podDisruptionBudget"],
        ),
        (
            "pdb both, one of them 0 (Fleet takes the other)",
            json!({"agentSchedulingCustomization": {"podDisruptionBudget": {"minAvailable": "0", "maxUnavailable": "1"}}}),
            &[],
        ),
        (
            "pdb not a count",
            json!({"agentSchedulingCustomization": {"podDisruptionBudget": {"minAvailable": "half"}}}),
            &["p.agentSchedulingCustomization.podDisruptionBudget.minAvailable"],
        ),
        (
            "priority too high",
            json!({"agentSchedulingCustomization": {"priorityClass": {"value": 2_000_000_000}}}),
            &["p.agentSchedulingCustomization.priorityClass.value"],
        ),
        (
            "preemption policy",
            json!({"agentSchedulingCustomization": {"priorityClass": {"preemptionPolicy": "Always"}}}),
            &["p.agentSchedulingCustomization.priorityClass.preemptionPolicy"],
        ),
        (
            "affinity weight",
            json!({"agentAffinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 0, "preference": {}}]}}}),
            &[
                "p.agentAffinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight",
            ],
        ),
        (
            "node operator",
            json!({"agentAffinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Like", "values": ["b"]}]}]}}}}),
            &[
                "p.agentAffinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0]",
            ],
        ),
        (
            "In without values",
            json!({"agentAffinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "In"}]}]}}}}),
            &[
                "p.agentAffinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0]",
            ],
        ),
    ];
    for (name, value, expected) in cases {
        let errors = validate(&settings(value.clone()), "p");
        assert_eq!(paths(&errors), *expected, "{name}: {errors:?}");
    }
}

#[test]
fn merge_rules() {
    let base = settings(json!({
        "agentNamespace": "base",
        "hostNetwork": true,
        "agentEnvVars": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
        "agentTolerations": [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists"},
            {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
        ],
        "agentResources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
    }));
    let cases: &[(&str, serde_json::Value, serde_json::Value)] = &[
        (
            "empty layer changes nothing",
            json!({}),
            serde_json::to_value(&base).unwrap(),
        ),
        (
            "scalars replaced",
            json!({"agentNamespace": "over", "hostNetwork": false}),
            json!({
                "agentNamespace": "over", "hostNetwork": false,
                "agentEnvVars": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                "agentTolerations": base.agent_tolerations,
                "agentResources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
            }),
        ),
        (
            "env vars merged by name, in place and appended",
            json!({"agentEnvVars": [{"name": "B", "value": "two"}, {"name": "C", "value": "3"}]}),
            json!({
                "agentNamespace": "base", "hostNetwork": true,
                "agentEnvVars": [{"name": "A", "value": "1"}, {"name": "B", "value": "two"}, {"name": "C", "value": "3"}],
                "agentTolerations": base.agent_tolerations,
                "agentResources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
            }),
        ),
        (
            "tolerations merged by key, operator, value and effect",
            json!({"agentTolerations": [
                {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 60},
                {"key": "node-role.kubernetes.io/control-plane", "value": "", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "karpenter.sh/controller", "operator": "Exists", "effect": "NoSchedule"},
            ]}),
            json!({
                "agentNamespace": "base", "hostNetwork": true,
                "agentEnvVars": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                "agentTolerations": [
                    {"key": "node.kubernetes.io/not-ready", "operator": "Exists"},
                    // Same four fields: replaced in place.
                    {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 60},
                    // Another operator tolerates other taints: appended, the default stays.
                    {"key": "node-role.kubernetes.io/control-plane", "value": "", "effect": "NoSchedule"},
                    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                    {"key": "karpenter.sh/controller", "operator": "Exists", "effect": "NoSchedule"},
                ],
                "agentResources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
            }),
        ),
        (
            "objects replaced whole",
            json!({"agentResources": {"limits": {"memory": "1Gi"}}}),
            json!({
                "agentNamespace": "base", "hostNetwork": true,
                "agentEnvVars": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                "agentTolerations": base.agent_tolerations,
                "agentResources": {"limits": {"memory": "1Gi"}},
            }),
        ),
        (
            "an empty list merges nothing away",
            json!({"agentEnvVars": [], "agentTolerations": []}),
            serde_json::to_value(&base).unwrap(),
        ),
    ];
    for (name, over, expected) in cases {
        let merged = merge(&base, &settings(over.clone()));
        assert_eq!(serde_json::to_value(&merged).unwrap(), *expected, "{name}");
    }
}

fn override_entry(selector: serde_json::Value, over: serde_json::Value) -> CompiledOverride {
    CompiledOverride::compile(&AgentOverride {
        selector: serde_json::from_value(selector).unwrap(),
        settings: settings(over),
    })
}

#[test]
fn precedence_config_class_overrides_cluster() {
    let defaults = settings(json!({
        "agentNamespace": "from-config",
        "privateRepoURL": "config.example.com",
        "hostNetwork": true,
        "agentEnvVars": [{"name": "LAYER", "value": "config"}, {"name": "CONFIG", "value": "1"}],
    }));
    let class_text = r#"{"privateRepoURL": "class.example.com", "agentNamespace": "from-class", "agentEnvVars": [{"name": "LAYER", "value": "class"}]}"#;
    let overrides = [
        override_entry(
            json!({"matchLabels": {"provider": "gke"}}),
            json!({"agentNamespace": "from-gke", "agentEnvVars": [{"name": "LAYER", "value": "gke"}]}),
        ),
        override_entry(
            json!({"matchLabels": {"tier": "edge"}}),
            json!({"agentNamespace": "from-edge", "hostNetwork": false}),
        ),
        override_entry(
            json!({"matchExpressions": [{"key": "x", "operator": "Bogus"}]}),
            json!({"agentNamespace": "never"}),
        ),
    ];
    let cluster_text = "agentEnvVars: [{name: LAYER, value: cluster}]";
    let gke_edge = labels(&[("provider", "gke"), ("tier", "edge")]);
    let gke = labels(&[("provider", "gke")]);
    let none = labels(&[]);
    let resolve_with =
        |class: Option<&str>, labels: &BTreeMap<String, String>, own: Option<&str>| {
            resolve(Layers {
                defaults: &defaults,
                class: Some(("classes", "quick-start", class)),
                overrides: &overrides,
                cluster_labels: labels,
                cluster_annotation: own,
            })
            .expect("valid layers")
        };
    struct Case<'a> {
        name: &'a str,
        class: Option<&'a str>,
        labels: &'a BTreeMap<String, String>,
        own: Option<&'a str>,
        namespace: &'a str,
        repo: &'a str,
        host_network: bool,
        layer: &'a str,
    }
    let cases = [
        Case {
            name: "config only",
            class: None,
            labels: &none,
            own: None,
            namespace: "from-config",
            repo: "config.example.com",
            host_network: true,
            layer: "config",
        },
        Case {
            name: "class over config",
            class: Some(class_text),
            labels: &none,
            own: None,
            namespace: "from-class",
            repo: "class.example.com",
            host_network: true,
            layer: "class",
        },
        Case {
            name: "override over class",
            class: Some(class_text),
            labels: &gke,
            own: None,
            namespace: "from-gke",
            repo: "class.example.com",
            host_network: true,
            layer: "gke",
        },
        Case {
            name: "later override over earlier",
            class: Some(class_text),
            labels: &gke_edge,
            own: None,
            namespace: "from-edge",
            repo: "class.example.com",
            host_network: false,
            layer: "gke",
        },
        Case {
            name: "cluster over everything",
            class: Some(class_text),
            labels: &gke_edge,
            own: Some(cluster_text),
            namespace: "from-edge",
            repo: "class.example.com",
            host_network: false,
            layer: "cluster",
        },
        Case {
            name: "cluster without class",
            class: None,
            labels: &none,
            own: Some(cluster_text),
            namespace: "from-config",
            repo: "config.example.com",
            host_network: true,
            layer: "cluster",
        },
    ];
    for Case {
        name,
        class,
        labels,
        own,
        namespace,
        repo,
        host_network,
        layer,
    } in cases
    {
        let resolved = resolve_with(class, labels, own);
        assert_eq!(
            resolved.agent_namespace.as_deref(),
            Some(namespace),
            "{name}"
        );
        assert_eq!(resolved.private_repo_url.as_deref(), Some(repo), "{name}");
        assert_eq!(resolved.host_network, Some(host_network), "{name}");
        let vars = resolved.agent_env_vars.clone().unwrap_or_default();
        let value = |n: &str| {
            vars.iter()
                .find(|v| v.name == n)
                .and_then(|v| v.value.clone())
        };
        assert_eq!(value("LAYER").as_deref(), Some(layer), "{name}");
        assert_eq!(
            value("CONFIG").as_deref(),
            Some("1"),
            "{name}: the config's other variable stays"
        );
        assert_eq!(vars.len(), 2, "{name}: merged by name, not appended twice");
    }
}

#[test]
fn invalid_annotations_are_reported_on_their_carrier_and_nothing_applies() {
    let defaults = settings(json!({"agentNamespace": "from-config"}));
    let bad_class = "agentNamespace: Not_A_Label";
    let bad_cluster = "hostNetwork: sometimes";
    let none = labels(&[]);
    let problems = resolve(Layers {
        defaults: &defaults,
        class: Some(("classes", "quick-start", Some(bad_class))),
        overrides: &[],
        cluster_labels: &none,
        cluster_annotation: Some(bad_cluster),
    })
    .expect_err("invalid");
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert_eq!(
        problems[0].carrier,
        Carrier::ClusterClass {
            namespace: "classes".into(),
            name: "quick-start".into()
        }
    );
    assert!(problems[0].to_string().starts_with(
        "ClusterClass classes/quick-start metadata.annotations[fleet.addons.cluster.x-k8s.io/agent-settings].agentNamespace: "
    ), "{}", problems[0]);
    assert_eq!(problems[1].carrier, Carrier::Cluster);
    assert!(problems[1].error.path.ends_with(".hostNetwork"));
    // One valid annotation alone resolves.
    assert!(
        resolve(Layers {
            defaults: &defaults,
            class: Some(("classes", "quick-start", None)),
            overrides: &[],
            cluster_labels: &none,
            cluster_annotation: Some("hostNetwork: true"),
        })
        .is_ok()
    );
}

/// (An unknown operator is the CRD schema's: `tests/crd.rs`.)
#[test]
fn overrides_are_validated_with_their_paths() {
    let entries = vec![
        AgentOverride {
            selector: serde_json::from_value(json!({"matchLabels": {"ok": "yes"}})).unwrap(),
            settings: settings(json!({"agentEnvVars": [{"name": "A", "value": "1"}]})),
        },
        AgentOverride {
            selector: serde_json::from_value(
                json!({"matchExpressions": [{"key": "a", "operator": "In"}]}),
            )
            .unwrap(),
            settings: settings(json!({"agentTolerations": [{"key": "k", "effect": "Sometimes"}]})),
        },
    ];
    let errors = validate_overrides(&entries, "spec.cluster.agentOverrides");
    assert_eq!(
        paths(&errors),
        [
            "spec.cluster.agentOverrides[1].selector.matchExpressions[0].values",
            "spec.cluster.agentOverrides[1].settings.agentTolerations[0].effect",
        ]
    );
}

#[test]
fn fields_newer_than_the_installed_fleet() {
    let scheduling = settings(json!({
        "agentSchedulingCustomization": {"priorityClass": {"value": 1}},
    }));
    assert!(
        unsupported_fields(&scheduling, None).is_empty(),
        "unknown Fleet: no claim"
    );
    assert_eq!(
        unsupported_fields(&scheduling, Some(13)),
        ["agentSchedulingCustomization (Fleet 0.14 and later)"]
    );
    assert!(unsupported_fields(&scheduling, Some(14)).is_empty());
    assert!(unsupported_fields(&AgentSettings::default(), Some(12)).is_empty());
}

#[test]
fn quantities() {
    for good in ["1", "100m", "1.5", "128Mi", "1e3", "0.5Gi", "+2", ".5"] {
        assert!(is_quantity(good), "{good}");
    }
    for bad in ["", "lots", "1 Gi", "Mi", "1MiB", "1.2.3"] {
        assert!(!is_quantity(bad), "{bad}");
    }
}
