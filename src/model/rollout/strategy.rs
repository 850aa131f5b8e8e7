//! The `rolloutStrategy` users run, seen from our side: what `caapf rollout-strategy` prints for
//! a FleetAddonConfig ([`for_config`]).

use crate::api::FleetAddonConfig;
use crate::model::config::EffectiveConfig;

use super::rollout_strategy;

/// What `caapf rollout-strategy` prints for `config` (`None`: there is none), or why it cannot:
/// `spec.cluster.rollout` is not set, or `spec.cluster` has problems (the provider writes no
/// wave labels then), each with its field path.
pub fn for_config(config: Option<&FleetAddonConfig>) -> Result<String, String> {
    let unset = "spec.cluster.rollout is not set: name the waves there first (docs/rollout.md)";
    let Some(config) = config else {
        return Err(format!("no FleetAddonConfig: {unset}"));
    };
    let name = config.metadata.name.as_deref().unwrap_or_default();
    let effective = EffectiveConfig::from_spec(&config.spec);
    let problems: Vec<String> = (effective.problems_under("spec.cluster"))
        .map(|p| format!("\n  {p}"))
        .collect();
    if !problems.is_empty() {
        return Err(format!(
            "FleetAddonConfig {name} is invalid (the provider writes no wave labels until it is fixed):{}",
            problems.concat()
        ));
    }
    match effective.cluster.and_then(|c| c.rollout) {
        Some(rollout) => Ok(rollout_strategy(&rollout)),
        None => Err(format!("FleetAddonConfig {name}: {unset}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::rollout::walk::{Deployment, Strategy, Target, walk};
    use crate::names;

    fn config(spec: &str) -> FleetAddonConfig {
        FleetAddonConfig::new(names::CONFIG_NAME, serde_yaml::from_str(spec).unwrap())
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (None, "no FleetAddonConfig: spec.cluster.rollout is not set"),
            (Some("cluster: {}"), "spec.cluster.rollout is not set"),
            (Some("{}"), "spec.cluster.rollout is not set"),
            (
                Some("cluster: {rollout: {waves: [a, A]}}"),
                "spec.cluster.rollout.waves[1]: ",
            ),
            (
                Some("cluster: {rollout: {waves: [a], soak: soon}}"),
                "spec.cluster.rollout.soak: ",
            ),
        ];
        for (spec, want) in cases {
            let config = spec.map(config);
            let err = for_config(config.as_ref()).unwrap_err();
            assert!(err.contains(want), "{spec:?}: {err}");
        }
    }

    /// The printed strategy as Fleet reads it: a canary wave walks first and holds the others.
    #[test]
    fn prints_a_strategy_the_walk_plays() {
        let spec = "cluster: {rollout: {waves: [canary, rest]}}";
        let text = for_config(Some(&config(spec))).unwrap();
        let yaml: serde_json::Value = serde_yaml::from_str(&text).unwrap();
        let strategy = Strategy::from_json(&yaml["rolloutStrategy"]).unwrap();
        let names: Vec<&str> = strategy.partitions.iter().map(|p| &*p.name).collect();
        assert_eq!(names, ["canary", "rest", "other", "held"]);
        let mut targets: Vec<Target> = ["canary", "canary", "rest", "rest"]
            .iter()
            .map(|w| Target {
                labels: [(names::ROLLOUT_WAVE_LABEL.to_string(), w.to_string())].into(),
                deployment: Some(Deployment {
                    deployment: "v1".into(),
                    staged: "v1".into(),
                    applied: "v1".into(),
                    ready: true,
                }),
                ..Target::default()
            })
            .collect();
        walk(&strategy, &mut targets, "v2").unwrap();
        let promoted: Vec<bool> = (targets.iter())
            .map(|t| t.deployment.as_ref().unwrap().deployment == "v2")
            .collect();
        assert_eq!(promoted, [true, false, false, false]);
    }
}
