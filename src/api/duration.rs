//! Durations as Go and Kubernetes write them (`15s`, `1m30s`, `500ms`): FleetAddonConfig fields,
//! the manager's flags and the Runtime SDK's `timeout` parameter.

use std::time::Duration;

/// Parses Go durations (`15s`, `1m30s`, `500ms`); negative durations are rejected.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let parsed: kube::core::Duration = text
        .parse()
        .map_err(|err| format!("{text:?} is not a duration such as 15s or 1m30s: {err}"))?;
    if parsed.is_negative() {
        return Err(format!("{text:?}: duration must not be negative"));
    }
    Ok(parsed.into())
}
