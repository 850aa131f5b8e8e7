//! Chart versions as helm and users write them (`0.13.1`, `v0.13.1`, `0.14.0-rc.2`).

use std::cmp::Ordering;
use std::fmt;

/// A semantic version, tolerant of a leading `v`. Ordering follows SemVer 2.0 (pre-releases sort
/// before their release; build metadata is ignored for equality and ordering).
#[derive(Clone, Debug)]
pub struct ChartVersion(semver::Version);

impl ChartVersion {
    /// Parses `v?MAJOR.MINOR.PATCH[-pre][+build]`; `None` for anything else (ranges, partial
    /// versions), which we never compare.
    pub fn parse(text: &str) -> Option<Self> {
        let trimmed = text.trim();
        let bare = trimmed.strip_prefix('v').unwrap_or(trimmed);
        semver::Version::parse(bare).ok().map(Self)
    }

    /// Whether this is a pre-release (`-rc.1`, `-alpha`).
    pub fn is_prerelease(&self) -> bool {
        !self.0.pre.is_empty()
    }
}

impl PartialEq for ChartVersion {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for ChartVersion {}

impl PartialOrd for ChartVersion {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ChartVersion {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.cmp_precedence(&other.0)
    }
}

impl fmt::Display for ChartVersion {
    /// Without the `v` prefix and build metadata, as `status.installedVersion` shows it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = &self.0;
        write!(f, "{}.{}.{}", v.major, v.minor, v.patch)?;
        if !v.pre.is_empty() {
            write!(f, "-{}", v.pre)?;
        }
        Ok(())
    }
}

/// The version part of helm's `chart` column: `fleet-crd-0.13.1` → `0.13.1`,
/// `fleet-0.14.0-rc.1` → `0.14.0-rc.1`. The chart name may contain dashes and the version may
/// too, so this takes the first `-` after which a version parses.
pub fn chart_version_from_column(column: &str) -> Option<(String, ChartVersion)> {
    column
        .match_indices('-')
        .map(|(i, _)| &column[i + 1..])
        .find_map(|text| ChartVersion::parse(text).map(|v| (text.to_string(), v)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> ChartVersion {
        ChartVersion::parse(s).unwrap_or_else(|| panic!("{s} should parse"))
    }

    #[test]
    fn parses_and_rejects() {
        let cases = [
            ("0.13.1", Some("0.13.1")),
            ("v0.13.1", Some("0.13.1")),
            (" v1.2.3 ", Some("1.2.3")),
            ("0.14.0-rc.2", Some("0.14.0-rc.2")),
            ("1.0.0+build.5", Some("1.0.0")),
            ("0.13", None),
            ("~0.13", None),
            ("latest", None),
            ("", None),
            ("vv1.0.0", None),
        ];
        for (input, want) in cases {
            assert_eq!(
                ChartVersion::parse(input).map(|v| v.to_string()).as_deref(),
                want,
                "input {input:?}"
            );
        }
    }

    #[test]
    fn orders_by_semver_precedence() {
        let cases = [
            ("0.13.1", "v0.13.1", Ordering::Equal),
            ("0.13.1", "0.13.2", Ordering::Less),
            ("0.9.0", "0.10.0", Ordering::Less),
            ("0.14.0-rc.1", "0.14.0", Ordering::Less),
            ("0.14.0-rc.2", "0.14.0-rc.10", Ordering::Less),
            ("0.14.0-alpha", "0.14.0-rc.1", Ordering::Less),
            ("1.0.0+a", "1.0.0+b", Ordering::Equal),
            ("1.0.0", "0.99.99", Ordering::Greater),
        ];
        for (a, b, want) in cases {
            assert_eq!(v(a).cmp(&v(b)), want, "{a} vs {b}");
        }
        assert!(v("0.14.0-rc.1").is_prerelease());
        assert!(!v("0.14.0").is_prerelease());
    }
}
