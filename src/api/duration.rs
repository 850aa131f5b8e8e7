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

/// A duration as Go's `time.Duration.String()` writes it (`15m0s`, `1h0m0s`, `1.5s`, `500ms`,
/// `0s`): what Fleet writes into its agent's environment (rancher/fleet v0.12.0–v0.16.1
/// `manageagent.go`: `CheckinInterval: cfg.AgentCheckinInterval.Duration.String()`).
/// Follows Go's `src/time/time.go` `Duration.String`: below a second the largest unit of `ns`,
/// `µs`, `ms` with a fraction; otherwise hours, minutes and seconds with a fraction of seconds,
/// trailing zeros of a fraction left out.
pub fn go_duration_string(duration: Duration) -> String {
    let nanos = duration.as_nanos();
    if nanos == 0 {
        return "0s".to_string();
    }
    if nanos < 1_000_000_000 {
        let (unit, scale) = if nanos < 1_000 {
            ("ns", 1)
        } else if nanos < 1_000_000 {
            ("µs", 1_000)
        } else {
            ("ms", 1_000_000)
        };
        return format!("{}{unit}", with_fraction(nanos, scale));
    }
    let seconds = nanos / 1_000_000_000;
    let fraction = with_fraction(nanos % 60_000_000_000, 1_000_000_000);
    let (minutes, hours) = ((seconds / 60) % 60, seconds / 3600);
    match (hours, seconds / 60) {
        (0, 0) => format!("{fraction}s"),
        (0, _) => format!("{minutes}m{fraction}s"),
        _ => format!("{hours}h{minutes}m{fraction}s"),
    }
}

/// `value / scale` with its decimal fraction, trailing zeros (and a bare point) left out.
fn with_fraction(value: u128, scale: u128) -> String {
    let (whole, rest) = (value / scale, value % scale);
    if rest == 0 {
        return whole.to_string();
    }
    let width = scale.ilog10() as usize;
    let digits = format!("{rest:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Expected values are what Go's `time.Duration.String()` prints (go1.24, `fmt.Println`).
    #[test]
    fn go_duration_strings() {
        let rows = [
            ("0s", "0s"),
            ("15m", "15m0s"),
            ("1h", "1h0m0s"),
            ("90s", "1m30s"),
            ("30s", "30s"),
            ("1.5s", "1.5s"),
            ("500ms", "500ms"),
            ("1ms", "1ms"),
            ("2500us", "2.5ms"),
            ("1us", "1µs"),
            ("1500ns", "1.5µs"),
            ("1ns", "1ns"),
            ("1h30m0.5s", "1h30m0.5s"),
            ("25h", "25h0m0s"),
            ("61m1s", "1h1m1s"),
            ("1m0.000000001s", "1m0.000000001s"),
        ];
        for (written, expected) in rows {
            let parsed = parse_duration(written).expect(written);
            assert_eq!(go_duration_string(parsed), expected, "{written}");
        }
    }
}
