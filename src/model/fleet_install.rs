//! What to do with each Fleet release: install, upgrade, or leave alone (pure).
//!
//! Rules (research §4.3 and §13.3/§13.5, fixed):
//! - absent → install the target version;
//! - pinned (`version`) → upgrade when the installed chart version differs (either way);
//! - `followLatest: true` → upgrade when the repository has a newer (non-pre-release) chart;
//!   never downgrade;
//! - `followLatest: false` → install the latest once, then never change the version;
//! - in every case, when the release's values differ from the desired values, or the last
//!   operation failed, upgrade to the version it already has (no surprise version bump);
//! - a release stuck in `pending-*` (an interrupted helm operation) is reported, not touched.
//!
//! Versions are chart versions (`helm list` chart column, `helm show chart` version), never
//! `appVersion`.

use crate::model::config::{EffectiveConfig, InstallTarget};
use crate::model::fleet_status::{
    ConditionSpec, FLAGS_UPDATE, INSTALLED, REPO_ADD, REPO_UPDATE, Step,
};
use crate::model::fleet_values;
use crate::model::version::ChartVersion;

/// One release from `helm list -o json`.
#[derive(Clone, Debug, PartialEq)]
pub struct ReleaseInfo {
    pub name: String,
    pub namespace: String,
    /// `deployed`, `failed`, `pending-install`, `pending-upgrade`, `pending-rollback`, …
    pub status: String,
    /// The chart version (from the `chart` column, `<chart name>-<version>`).
    pub chart_version: Option<ChartVersion>,
    /// The same version exactly as helm printed it (to pass back to `--version`).
    pub chart_version_text: Option<String>,
    /// The chart column as helm printed it, for messages.
    pub chart: String,
    pub app_version: String,
}

/// What `helm show chart` says about a chart (its `Chart.yaml`).
#[derive(Clone, Debug, PartialEq)]
pub struct ChartInfo {
    pub name: String,
    /// Exactly as the chart writes it, to pass back to `--version`.
    pub version_text: String,
    pub version: ChartVersion,
    pub app_version: Option<String>,
}

/// Why an upgrade is needed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpgradeReason {
    /// The target chart version differs from the installed one.
    Version,
    /// Same version, different values.
    Values,
    /// The last helm operation on the release failed.
    Repair,
}

/// The decision for one release.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReleaseAction {
    /// Install this chart version.
    Install { version: String },
    /// Upgrade to this chart version (which may equal the installed one).
    Upgrade {
        from: String,
        to: String,
        reason: UpgradeReason,
    },
    /// Nothing to do.
    Keep { version: String },
    /// The release cannot be touched safely; the message says why and what to do.
    Blocked { message: String },
}

/// Decides what to do with one release.
///
/// `available` is the chart the repository offers for the target: the pinned version, or the
/// latest version. `values_match` says whether the release's values equal the desired ones
/// (always `true` for a release we pass no values to).
pub fn plan_release(
    target: &InstallTarget,
    installed: Option<&ReleaseInfo>,
    available: &ChartInfo,
    values_match: bool,
) -> ReleaseAction {
    let Some(installed) = installed else {
        return ReleaseAction::Install {
            version: available.version_text.clone(),
        };
    };
    if installed.status.starts_with("pending") {
        return ReleaseAction::Blocked {
            message: format!(
                "release {}/{} is {} (an earlier helm operation was interrupted); run `helm rollback {} --namespace {}` (or `helm history` to inspect), then this provider continues",
                installed.namespace,
                installed.name,
                installed.status,
                installed.name,
                installed.namespace
            ),
        };
    }
    let from = installed
        .chart_version_text
        .clone()
        .unwrap_or_else(|| installed.chart.clone());
    let version_moves = match (target, &installed.chart_version) {
        // An unreadable installed version is replaced by the target.
        (_, None) => true,
        (InstallTarget::Pinned { .. }, Some(current)) => *current != available.version,
        (InstallTarget::Latest { upgrade: true }, Some(current)) => {
            newer(&available.version, current)
        }
        (InstallTarget::Latest { upgrade: false }, Some(_)) => false,
    };
    if version_moves {
        return ReleaseAction::Upgrade {
            from,
            to: available.version_text.clone(),
            reason: UpgradeReason::Version,
        };
    }
    let reason = if installed.status != "deployed" {
        Some(UpgradeReason::Repair)
    } else if !values_match {
        Some(UpgradeReason::Values)
    } else {
        None
    };
    match reason {
        Some(reason) => ReleaseAction::Upgrade {
            to: from.clone(),
            from,
            reason,
        },
        None => ReleaseAction::Keep { version: from },
    }
}

/// Whether `candidate` should replace `current` when following the latest chart: strictly newer
/// and not a pre-release (helm does not offer pre-releases as "latest"; this guards registries
/// that do).
fn newer(candidate: &ChartVersion, current: &ChartVersion) -> bool {
    !candidate.is_prerelease() && candidate > current
}

/// The version the release will have after `action` (for `status.installedVersion`).
pub fn resulting_version(action: &ReleaseAction) -> Option<&str> {
    match action {
        ReleaseAction::Install { version } | ReleaseAction::Keep { version } => Some(version),
        ReleaseAction::Upgrade { to, .. } => Some(to),
        ReleaseAction::Blocked { .. } => None,
    }
}

/// What carrying out a [`ReleaseAction`] takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReleaseStep {
    /// Nothing to run.
    Nothing,
    /// The release must not be touched: fail with this message.
    Refuse(String),
    /// Run `helm install` (or `upgrade`) at `version`; `note` is the Event's text on success.
    Run {
        upgrade: bool,
        version: String,
        note: String,
    },
}

/// The helm command (and its Event text) for `action` on `release`.
pub fn release_step(release: &str, action: &ReleaseAction) -> ReleaseStep {
    match action {
        ReleaseAction::Keep { .. } => ReleaseStep::Nothing,
        ReleaseAction::Blocked { message } => ReleaseStep::Refuse(message.clone()),
        ReleaseAction::Install { version } => ReleaseStep::Run {
            upgrade: false,
            version: version.clone(),
            note: format!("Installed {release} version {version}"),
        },
        ReleaseAction::Upgrade { from, to, reason } => ReleaseStep::Run {
            upgrade: true,
            version: to.clone(),
            note: match reason {
                UpgradeReason::Version => format!("Upgraded {release} from {from} to {to}"),
                UpgradeReason::Values => format!("Upgraded {release} {to} with new values"),
                UpgradeReason::Repair => {
                    format!("Upgraded {release} {to} again after a failed operation")
                }
            },
        },
    }
}

/// `RepoAdd` once the repository (shown as `repository`, without credentials) answered.
pub fn repository_reachable(repository: &str) -> ConditionSpec {
    ConditionSpec::ok(
        REPO_ADD,
        format!("Chart repository {repository} is reachable"),
    )
}

/// Why a chart could not be resolved from its repository.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResolveFailure {
    /// The repository (its index, or the registry) could not be fetched.
    Unreachable,
    /// The repository answered, but the chart or the version is not in it.
    ChartMissing,
}

/// Which step a failed chart lookup fails (`RepoAdd` when the repository could not be fetched,
/// `RepoUpdate` when it answered without the chart or version), the condition that reports it,
/// and `RepoAdd` as reached when the repository did answer.
pub fn resolve_failed(
    failure: ResolveFailure,
    repository: &str,
) -> (Step, &'static str, Option<ConditionSpec>) {
    match failure {
        ResolveFailure::Unreachable => (Step::RepoAdd, REPO_ADD, None),
        ResolveFailure::ChartMissing => (
            Step::RepoUpdate,
            REPO_UPDATE,
            Some(repository_reachable(repository)),
        ),
    }
}

/// `RepoUpdate` once both charts were resolved.
pub fn charts_resolved(
    pinned: bool,
    crd_chart: &ChartInfo,
    fleet_chart: &ChartInfo,
) -> ConditionSpec {
    ConditionSpec::ok(
        REPO_UPDATE,
        format!(
            "{} available: fleet-crd {}, fleet {}",
            if pinned {
                "Pinned version"
            } else {
                "Latest version"
            },
            crd_chart.version_text,
            fleet_chart.version_text
        ),
    )
}

/// `Installed` and `FlagsUpdate` once both releases are at their target.
pub fn installed(
    crd_version: &str,
    fleet_version: &str,
    namespace: &str,
    config: &EffectiveConfig,
) -> [ConditionSpec; 2] {
    [
        ConditionSpec::ok(
            INSTALLED,
            format!(
                "fleet-crd {crd_version} and fleet {fleet_version} are installed in namespace {namespace}"
            ),
        ),
        ConditionSpec::ok(
            FLAGS_UPDATE,
            format!(
                "Feature gates are set in the fleet release: {}",
                fleet_values::gate_summary(&config.fleet)
            ),
        ),
    ]
}

/// Whether the values of a release equal the desired values. Both are JSON objects as helm
/// reports them (`helm get values -o json`), so the comparison is structural: key order does
/// not matter, list order does; numbers compare by value (helm stores them as floats, so `2`
/// and `2.0` are the same); a key set to `null` is the same as an absent key (helm treats
/// `null` as "remove").
pub fn values_match(
    current: &serde_json::Map<String, serde_json::Value>,
    desired: &serde_json::Map<String, serde_json::Value>,
) -> bool {
    objects_equal(current, desired)
}

fn objects_equal(
    a: &serde_json::Map<String, serde_json::Value>,
    b: &serde_json::Map<String, serde_json::Value>,
) -> bool {
    let present = |m: &serde_json::Map<String, serde_json::Value>| {
        m.iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, _)| k.clone())
            .collect::<std::collections::BTreeSet<_>>()
    };
    present(a) == present(b)
        && a.iter()
            .filter(|(_, v)| !v.is_null())
            .all(|(k, v)| b.get(k).is_some_and(|w| json_equal(v, w)))
}

fn json_equal(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y || x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(v, w)| json_equal(v, w))
        }
        (Value::Object(x), Value::Object(y)) => objects_equal(x, y),
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::version::chart_version_from_column;

    fn chart(version: &str) -> ChartInfo {
        ChartInfo {
            name: "fleet".to_string(),
            version_text: version.to_string(),
            version: ChartVersion::parse(version).expect("test version"),
            app_version: None,
        }
    }

    fn release(version: &str, status: &str) -> ReleaseInfo {
        let column = format!("fleet-{version}");
        let parsed = chart_version_from_column(&column);
        ReleaseInfo {
            name: "fleet".to_string(),
            namespace: "cattle-fleet-system".to_string(),
            status: status.to_string(),
            chart_version: parsed.as_ref().map(|(_, v)| v.clone()),
            chart_version_text: parsed.map(|(t, _)| t),
            chart: column,
            app_version: version.to_string(),
        }
    }

    fn pinned(version: &str) -> InstallTarget {
        InstallTarget::Pinned {
            written: version.to_string(),
            version: ChartVersion::parse(version).expect("test version"),
        }
    }

    fn install(v: &str) -> ReleaseAction {
        ReleaseAction::Install {
            version: v.to_string(),
        }
    }

    fn upgrade(from: &str, to: &str, reason: UpgradeReason) -> ReleaseAction {
        ReleaseAction::Upgrade {
            from: from.to_string(),
            to: to.to_string(),
            reason,
        }
    }

    fn keep(v: &str) -> ReleaseAction {
        ReleaseAction::Keep {
            version: v.to_string(),
        }
    }

    #[test]
    fn decisions() {
        let latest = InstallTarget::Latest { upgrade: true };
        let latest_once = InstallTarget::Latest { upgrade: false };
        use UpgradeReason::*;
        type Row = (
            &'static str,
            InstallTarget,
            Option<ReleaseInfo>,
            &'static str,
            bool,
            ReleaseAction,
        );
        let rows: Vec<Row> = vec![
            (
                "absent, latest: install latest",
                latest.clone(),
                None,
                "0.2.0",
                true,
                install("0.2.0"),
            ),
            (
                "absent, latest once: install latest",
                latest_once.clone(),
                None,
                "0.2.0",
                true,
                install("0.2.0"),
            ),
            (
                "absent, pinned: install pinned",
                pinned("0.1.0"),
                None,
                "0.1.0",
                true,
                install("0.1.0"),
            ),
            (
                "pinned equal: keep",
                pinned("0.1.0"),
                Some(release("0.1.0", "deployed")),
                "0.1.0",
                true,
                keep("0.1.0"),
            ),
            (
                "pinned v-prefix equal: keep",
                pinned("v0.1.0"),
                Some(release("0.1.0", "deployed")),
                "0.1.0",
                true,
                keep("0.1.0"),
            ),
            (
                "pinned newer: upgrade",
                pinned("0.2.0"),
                Some(release("0.1.0", "deployed")),
                "0.2.0",
                true,
                upgrade("0.1.0", "0.2.0", Version),
            ),
            (
                "pinned older: downgrade, as asked",
                pinned("0.1.0"),
                Some(release("0.2.0", "deployed")),
                "0.1.0",
                true,
                upgrade("0.2.0", "0.1.0", Version),
            ),
            (
                "pinned pre-release: exact",
                pinned("0.3.0-rc.1"),
                Some(release("0.2.0", "deployed")),
                "0.3.0-rc.1",
                true,
                upgrade("0.2.0", "0.3.0-rc.1", Version),
            ),
            (
                "pinned equal, values differ: same version",
                pinned("0.1.0"),
                Some(release("0.1.0", "deployed")),
                "0.1.0",
                false,
                upgrade("0.1.0", "0.1.0", Values),
            ),
            (
                "latest newer: upgrade (CAAPF never reached fleet when crd was current)",
                latest.clone(),
                Some(release("0.1.0", "deployed")),
                "0.2.0",
                true,
                upgrade("0.1.0", "0.2.0", Version),
            ),
            (
                "latest equal: keep",
                latest.clone(),
                Some(release("0.2.0", "deployed")),
                "0.2.0",
                true,
                keep("0.2.0"),
            ),
            (
                "latest older than installed: never downgrade",
                latest.clone(),
                Some(release("0.3.0", "deployed")),
                "0.2.0",
                true,
                keep("0.3.0"),
            ),
            (
                "latest is a pre-release: not followed",
                latest.clone(),
                Some(release("0.2.0", "deployed")),
                "0.3.0-rc.1",
                true,
                keep("0.2.0"),
            ),
            (
                "latest equal, values differ: same version, no bump",
                latest.clone(),
                Some(release("0.2.0", "deployed")),
                "0.2.0",
                false,
                upgrade("0.2.0", "0.2.0", Values),
            ),
            (
                "latest newer and values differ: one upgrade to latest",
                latest.clone(),
                Some(release("0.1.0", "deployed")),
                "0.2.0",
                false,
                upgrade("0.1.0", "0.2.0", Version),
            ),
            (
                "latest once, newer exists: keep",
                latest_once.clone(),
                Some(release("0.1.0", "deployed")),
                "0.2.0",
                true,
                keep("0.1.0"),
            ),
            (
                "latest once, values differ: installed version",
                latest_once.clone(),
                Some(release("0.1.0", "deployed")),
                "0.2.0",
                false,
                upgrade("0.1.0", "0.1.0", Values),
            ),
            (
                "failed release: repaired at its version",
                latest.clone(),
                Some(release("0.2.0", "failed")),
                "0.2.0",
                true,
                upgrade("0.2.0", "0.2.0", Repair),
            ),
            (
                "failed release, newer pinned: upgrade",
                pinned("0.2.0"),
                Some(release("0.1.0", "failed")),
                "0.2.0",
                true,
                upgrade("0.1.0", "0.2.0", Version),
            ),
            (
                "build metadata kept for --version",
                latest_once.clone(),
                Some(release("106.0.0+up0.12.0", "deployed")),
                "106.0.0",
                false,
                upgrade("106.0.0+up0.12.0", "106.0.0+up0.12.0", Values),
            ),
        ];
        for (name, target, installed, available, values_ok, want) in rows {
            assert_eq!(
                plan_release(&target, installed.as_ref(), &chart(available), values_ok),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn pending_release_is_blocked() {
        for status in ["pending-install", "pending-upgrade", "pending-rollback"] {
            let action = plan_release(
                &InstallTarget::Latest { upgrade: true },
                Some(&release("0.1.0", status)),
                &chart("0.2.0"),
                true,
            );
            match action {
                ReleaseAction::Blocked { message } => {
                    assert!(message.contains(status), "{message}");
                    assert!(
                        message.contains("helm rollback fleet --namespace cattle-fleet-system"),
                        "{message}"
                    );
                }
                other => panic!("{status}: {other:?}"),
            }
        }
    }

    #[test]
    fn unreadable_installed_version_is_replaced() {
        let mut odd = release("0.1.0", "deployed");
        odd.chart = "fleet-custom".to_string();
        odd.chart_version = None;
        odd.chart_version_text = None;
        assert_eq!(
            plan_release(
                &InstallTarget::Latest { upgrade: false },
                Some(&odd),
                &chart("0.2.0"),
                true
            ),
            upgrade("fleet-custom", "0.2.0", UpgradeReason::Version)
        );
    }

    #[test]
    fn resulting_versions() {
        assert_eq!(resulting_version(&install("0.1.0")), Some("0.1.0"));
        assert_eq!(resulting_version(&keep("0.1.0")), Some("0.1.0"));
        assert_eq!(
            resulting_version(&upgrade("0.1.0", "0.2.0", UpgradeReason::Version)),
            Some("0.2.0")
        );
        assert_eq!(
            resulting_version(&ReleaseAction::Blocked {
                message: String::new()
            }),
            None
        );
    }

    #[test]
    fn values_comparison_is_structural() {
        let a = json!({"b": {"enabled": false}, "extraEnv": [{"name": "A", "value": "1"}]});
        let b = json!({"extraEnv": [{"value": "1", "name": "A"}], "b": {"enabled": false}});
        let c = json!({"b": {"enabled": true}, "extraEnv": [{"name": "A", "value": "1"}]});
        let obj = |v: serde_json::Value| v.as_object().cloned().unwrap_or_default();
        assert!(values_match(&obj(a.clone()), &obj(b)));
        assert!(!values_match(&obj(a.clone()), &obj(c)));
        // List order matters (extraEnv order is the container's env order).
        assert!(!values_match(
            &obj(json!({"l": [1, 2]})),
            &obj(json!({"l": [2, 1]}))
        ));
        // Numbers by value; nulls are absent keys.
        assert!(values_match(
            &obj(json!({"replicas": 2.0, "x": {"y": null}})),
            &obj(json!({"replicas": 2, "x": {}}))
        ));
        assert!(!values_match(
            &obj(json!({"replicas": 2})),
            &obj(json!({"replicas": 3}))
        ));
        assert!(!values_match(&obj(json!({})), &obj(a)));
        assert!(values_match(&obj(json!({})), &obj(json!({}))));
    }

    #[test]
    fn release_steps_and_their_event_notes() {
        let v = |s: &str| s.to_string();
        let run = |upgrade, version: &str, note: &str| ReleaseStep::Run {
            upgrade,
            version: v(version),
            note: v(note),
        };
        for (action, want) in [
            (
                ReleaseAction::Keep {
                    version: v("1.0.0"),
                },
                ReleaseStep::Nothing,
            ),
            (
                ReleaseAction::Blocked {
                    message: v("stuck"),
                },
                ReleaseStep::Refuse(v("stuck")),
            ),
            (
                ReleaseAction::Install {
                    version: v("1.0.0"),
                },
                run(false, "1.0.0", "Installed fleet version 1.0.0"),
            ),
            (
                ReleaseAction::Upgrade {
                    from: v("1.0.0"),
                    to: v("1.1.0"),
                    reason: UpgradeReason::Version,
                },
                run(true, "1.1.0", "Upgraded fleet from 1.0.0 to 1.1.0"),
            ),
            (
                ReleaseAction::Upgrade {
                    from: v("1.0.0"),
                    to: v("1.0.0"),
                    reason: UpgradeReason::Values,
                },
                run(true, "1.0.0", "Upgraded fleet 1.0.0 with new values"),
            ),
            (
                ReleaseAction::Upgrade {
                    from: v("1.0.0"),
                    to: v("1.0.0"),
                    reason: UpgradeReason::Repair,
                },
                run(
                    true,
                    "1.0.0",
                    "Upgraded fleet 1.0.0 again after a failed operation",
                ),
            ),
        ] {
            assert_eq!(release_step("fleet", &action), want, "{action:?}");
        }
    }

    #[test]
    fn a_failed_lookup_fails_repo_add_or_repo_update() {
        let (step, type_, reached) = resolve_failed(ResolveFailure::Unreachable, "https://r");
        assert_eq!((step, type_, reached), (Step::RepoAdd, REPO_ADD, None));
        let (step, type_, reached) = resolve_failed(ResolveFailure::ChartMissing, "https://r");
        assert_eq!((step, type_), (Step::RepoUpdate, REPO_UPDATE));
        assert_eq!(
            reached,
            Some(ConditionSpec::ok(
                REPO_ADD,
                "Chart repository https://r is reachable"
            ))
        );
    }

    #[test]
    fn resolved_and_installed_messages() {
        let pinned = charts_resolved(true, &chart("1.0.0"), &chart("1.0.1"));
        assert_eq!(pinned.type_, REPO_UPDATE);
        assert_eq!(
            pinned.message,
            "Pinned version available: fleet-crd 1.0.0, fleet 1.0.1"
        );
        let latest = charts_resolved(false, &chart("1.0.0"), &chart("1.0.0"));
        assert!(latest.message.starts_with("Latest version available"));
        let config = EffectiveConfig::resolve(None);
        let [installed, flags] = installed("1.0.0", "1.0.1", "cattle-fleet-system", &config);
        assert_eq!(
            installed.message,
            "fleet-crd 1.0.0 and fleet 1.0.1 are installed in namespace cattle-fleet-system"
        );
        assert!(installed.status && flags.status);
        assert_eq!(flags.type_, FLAGS_UPDATE);
        assert!(
            flags
                .message
                .starts_with("Feature gates are set in the fleet release: "),
            "{}",
            flags.message
        );
    }
}
