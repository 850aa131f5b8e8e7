//! Parsing what helm prints: `helm version`, `helm list -o json`, `helm show chart` (YAML) and
//! `helm get values -o json`. Pure functions; the shapes are those of helm 3 and helm 4.

use serde::Deserialize;

use crate::model::fleet_install::{ChartInfo, ReleaseInfo};
use crate::model::version::{ChartVersion, chart_version_from_column};

/// The major version of the helm binary: the command-line differences we handle are between
/// helm 3 and helm 4.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HelmMajor {
    V3,
    V4,
}

/// Parses `helm version --template '{{.Version}}'` (`v3.17.0`) or `helm version --short`
/// (`v4.1.4+g05fa379`). Unknown majors above 4 are treated as 4 (the newest we know); below 3
/// is refused (helm 2 needs Tiller).
pub fn parse_helm_version(text: &str) -> Result<HelmMajor, String> {
    let word = text.split_whitespace().next().unwrap_or_default();
    let bare = word.trim_start_matches('v');
    let major: u64 = bare
        .split(['.', '+', '-'])
        .next()
        .and_then(|m| m.parse().ok())
        .ok_or_else(|| format!("cannot read a helm version from {:?}", text.trim()))?;
    match major {
        0..=2 => Err(format!(
            "helm {word} is not supported: use helm 3 or helm 4"
        )),
        3 => Ok(HelmMajor::V3),
        _ => Ok(HelmMajor::V4),
    }
}

#[derive(Deserialize)]
struct RawRelease {
    name: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    chart: String,
    #[serde(default)]
    app_version: String,
}

/// Parses `helm list -o json` (an array; helm prints `[]` when there are none).
pub fn parse_release_list(json: &str) -> Result<Vec<ReleaseInfo>, String> {
    let trimmed = json.trim();
    if trimmed.is_empty() {
        return Ok(Vec::new());
    }
    let raw: Vec<RawRelease> = serde_json::from_str(trimmed)
        .map_err(|err| format!("unexpected `helm list` output: {err}"))?;
    Ok(raw
        .into_iter()
        .map(|r| {
            let (chart_version_text, chart_version) = match chart_version_from_column(&r.chart) {
                Some((text, version)) => (Some(text), Some(version)),
                None => (None, None),
            };
            ReleaseInfo {
                chart_version,
                chart_version_text,
                name: r.name,
                namespace: r.namespace,
                status: r.status,
                chart: r.chart,
                app_version: r.app_version,
            }
        })
        .collect())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawChart {
    #[serde(default)]
    name: String,
    version: Option<serde_yaml::Value>,
    app_version: Option<serde_yaml::Value>,
}

/// Parses `helm show chart` (YAML `Chart.yaml`). Unknown fields are ignored.
pub fn parse_chart_yaml(yaml: &str) -> Result<ChartInfo, String> {
    let raw: RawChart = serde_yaml::from_str(yaml)
        .map_err(|err| format!("unexpected `helm show chart` output: {err}"))?;
    let version_text = raw
        .version
        .as_ref()
        .and_then(yaml_scalar)
        .ok_or_else(|| "`helm show chart` output has no version".to_string())?;
    let version = ChartVersion::parse(&version_text).ok_or_else(|| {
        format!(
            "chart {} has version {version_text:?}, which is not a semantic version",
            raw.name
        )
    })?;
    Ok(ChartInfo {
        name: raw.name,
        version_text,
        version,
        app_version: raw.app_version.as_ref().and_then(yaml_scalar),
    })
}

fn yaml_scalar(value: &serde_yaml::Value) -> Option<String> {
    match value {
        serde_yaml::Value::String(s) => Some(s.clone()),
        serde_yaml::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Parses `helm get values -o json`: the user-supplied values of a release. helm prints `null`
/// when there are none; that is an empty object.
pub fn parse_values(json: &str) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    let trimmed = json.trim();
    if trimmed.is_empty() {
        return Ok(serde_json::Map::new());
    }
    match serde_json::from_str::<serde_json::Value>(trimmed) {
        Ok(serde_json::Value::Null) => Ok(serde_json::Map::new()),
        Ok(serde_json::Value::Object(map)) => Ok(map),
        Ok(other) => Err(format!(
            "unexpected `helm get values` output: expected an object, got {}",
            json_kind(&other)
        )),
        // Never echo the text: values may hold secrets.
        Err(err) => Err(format!(
            "unexpected `helm get values` output (line {}, column {})",
            err.line(),
            err.column()
        )),
    }
}

fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helm_versions() {
        let rows = [
            ("v3.17.0", Ok(HelmMajor::V3)),
            ("v3.8.2+g6e3701e", Ok(HelmMajor::V3)),
            ("v4.1.4", Ok(HelmMajor::V4)),
            ("v4.1.4+g05fa379\n", Ok(HelmMajor::V4)),
            ("v5.0.0", Ok(HelmMajor::V4)),
        ];
        for (text, want) in rows {
            assert_eq!(parse_helm_version(text), want, "{text}");
        }
        assert!(
            parse_helm_version("v2.17.0")
                .unwrap_err()
                .contains("not supported")
        );
        assert!(parse_helm_version("").is_err());
        assert!(parse_helm_version("garbage").is_err());
    }

    #[test]
    fn release_list_helm3_and_helm4_shapes() {
        // helm 3 prints the revision as a string; tolerate both.
        let json = r#"[
          {"name":"fleet-crd","namespace":"cattle-fleet-system","revision":"1","updated":"2024-01-01 00:00:00.0 +0000 UTC","status":"deployed","chart":"fleet-crd-0.13.1","app_version":"0.13.1"},
          {"name":"fleet","namespace":"cattle-fleet-system","revision":3,"updated":"2024-01-01T00:00:00Z","status":"failed","chart":"fleet-0.14.0-rc.1","app_version":"0.14.0-rc.1"}
        ]"#;
        let releases = parse_release_list(json).expect("parses");
        assert_eq!(releases.len(), 2);
        assert_eq!(releases[0].name, "fleet-crd");
        assert_eq!(releases[0].status, "deployed");
        assert_eq!(
            releases[0].chart_version.as_ref().map(ToString::to_string),
            Some("0.13.1".to_string())
        );
        assert_eq!(releases[1].status, "failed");
        assert_eq!(
            releases[1].chart_version.as_ref().map(ToString::to_string),
            Some("0.14.0-rc.1".to_string())
        );
        assert_eq!(parse_release_list("[]").expect("empty"), Vec::new());
        assert_eq!(parse_release_list("\n").expect("blank"), Vec::new());
        assert!(parse_release_list("{").is_err());
    }

    #[test]
    fn chart_column() {
        let rows = [
            ("fleet-crd-0.13.1", Some("0.13.1")),
            ("fleet-0.13.1", Some("0.13.1")),
            ("fleet-0.14.0-rc.1", Some("0.14.0-rc.1")),
            ("my-chart-v1.2.3", Some("v1.2.3")),
            ("fleet-106.0.0+up0.12.0", Some("106.0.0+up0.12.0")),
            ("fleet", None),
            ("fleet-latest", None),
        ];
        for (column, want) in rows {
            assert_eq!(
                chart_version_from_column(column)
                    .map(|(text, _)| text)
                    .as_deref(),
                want,
                "{column}"
            );
        }
    }

    #[test]
    fn show_chart_yaml() {
        let yaml = "apiVersion: v2\nappVersion: 0.13.1\ndescription: Fleet CRDs\nname: fleet-crd\nversion: 0.13.1\nannotations:\n  catalog.cattle.io/kube-version: '>= 1.28.0-0 < 1.34.0-0'\n";
        let chart = parse_chart_yaml(yaml).expect("parses");
        assert_eq!(chart.name, "fleet-crd");
        assert_eq!(chart.version_text, "0.13.1");
        assert_eq!(chart.version.to_string(), "0.13.1");
        assert_eq!(chart.app_version.as_deref(), Some("0.13.1"));
        // A numeric-looking appVersion is still read.
        let chart =
            parse_chart_yaml("name: x\nversion: 1.0.0\nappVersion: 1.16\n").expect("parses");
        assert_eq!(chart.app_version.as_deref(), Some("1.16"));
        assert!(
            parse_chart_yaml("name: x\n")
                .unwrap_err()
                .contains("no version")
        );
        assert!(
            parse_chart_yaml("name: x\nversion: latest\n")
                .unwrap_err()
                .contains("not a semantic version")
        );
    }

    #[test]
    fn get_values() {
        assert!(parse_values("null\n").expect("null").is_empty());
        assert!(parse_values("").expect("empty").is_empty());
        let values = parse_values(
            r#"{"bootstrap":{"enabled":false},"extraEnv":[{"name":"A","value":"1"}]}"#,
        )
        .expect("object");
        assert_eq!(values["bootstrap"]["enabled"], serde_json::json!(false));
        assert!(parse_values("[1]").unwrap_err().contains("an array"));
        let err = parse_values("{\"apiServerCA\": \"secret").unwrap_err();
        assert!(!err.contains("secret"), "{err}");
    }
}
