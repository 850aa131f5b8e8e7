//! Turning helm's stderr into a condition message: keep the part that says what went wrong,
//! bound its length, and remove anything that looks like a secret.
//!
//! helm echoes what it was given: repository URLs with user information, values in template
//! errors, PEM blocks, bearer tokens. A condition message is readable by everyone who can read
//! the `FleetAddonConfig`, so every message derived from helm output goes through [`scrub`].

use crate::model::fleet_install::ResolveFailure;

use std::sync::LazyLock;

use regex::Regex;

/// Default maximum length of a scrubbed message, in characters.
pub const MAX_MESSAGE_CHARS: usize = 1024;

/// What replaces a redacted secret.
pub const REDACTED: &str = "<redacted>";

static PEM_BLOCK: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?s)-----BEGIN [A-Z0-9 ]+-----.*?(-----END [A-Z0-9 ]+-----|$)")
        .expect("static regex")
});

/// `scheme://user:password@host` and `scheme://token@host`.
static URL_USERINFO: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]+@").expect("static regex"));

/// `password=x`, `token: x`, `"apiServerCA":"x"`, `Authorization: Bearer x`.
static KEY_VALUE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?i)((?:password|passwd|secret|token|api[_-]?key|apikey|access[_-]?key|private[_-]?key|client[_-]?key|credentials?|authorization|apiServerCA|ca[_-]?data|cert(?:ificate)?[_-]?data|key[_-]?data)"?\s*[:=]\s*"?)(?:bearer\s+|basic\s+)?[^\s",}]+"#,
    )
    .expect("static regex")
});

/// `Bearer x` and `Basic x` anywhere.
static AUTH_SCHEME: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#"(?i)\b(bearer|basic)\s+([^\s",]+)"#).expect("static regex"));

/// JSON Web Tokens (service-account tokens).
static JWT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*").expect("static regex")
});

/// Long base64 or hex runs: encoded keys, certificates, tokens. Digests that name a chart
/// (64 hex characters after `sha256:`) are harmless but rare in errors; they are redacted too.
static LONG_BLOB: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"[A-Za-z0-9+/_-]{40,}={0,2}").expect("static regex"));

/// Redacts secrets in `text` without shortening it otherwise.
pub fn redact(text: &str) -> String {
    let text = PEM_BLOCK.replace_all(text, REDACTED);
    let text = URL_USERINFO.replace_all(&text, format!("${{1}}{REDACTED}@"));
    let text = JWT.replace_all(&text, REDACTED);
    let text = KEY_VALUE.replace_all(&text, format!("${{1}}{REDACTED}"));
    // Registry clients say "basic credential not found" and "no basic auth credentials": words,
    // not a value.
    let text = AUTH_SCHEME.replace_all(&text, |caps: &regex::Captures<'_>| {
        let value = caps.get(2).map_or("", |m| m.as_str());
        if matches!(
            value.to_ascii_lowercase().as_str(),
            "credential" | "credentials" | "auth" | "authentication"
        ) {
            caps[0].to_string()
        } else {
            format!("{} {REDACTED}", &caps[1])
        }
    });
    // Paths and URLs are made of short segments; only unbroken runs are blobs.
    LONG_BLOB.replace_all(&text, REDACTED).into_owned()
}

/// Turns helm's stderr into a one-line message of at most `max_chars` characters: helm's own
/// `Error:` lines when there are any (warnings and progress lines are dropped), otherwise the
/// last non-empty lines; secrets redacted; whitespace collapsed.
pub fn scrub(stderr: &str, max_chars: usize) -> String {
    // First, so that secrets spanning lines (PEM blocks) go as a whole.
    let redacted = redact(stderr);
    let lines: Vec<&str> = redacted
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let errors: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.starts_with("Error:") || l.starts_with("error:"))
        .collect();
    let chosen = if errors.is_empty() {
        // Keep the end: that is where a failing program says why.
        let skip = lines.len().saturating_sub(3);
        lines[skip..].join("; ")
    } else {
        errors
            .iter()
            .map(|l| {
                l.trim_start_matches("Error:")
                    .trim_start_matches("error:")
                    .trim()
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    let collapsed = chosen.split_whitespace().collect::<Vec<_>>().join(" ");
    truncate_chars(&collapsed, max_chars)
}

/// Cuts `text` to at most `max_chars` characters (on a character boundary), marking the cut.
pub fn truncate_chars(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        return text.to_string();
    }
    let keep = max_chars.saturating_sub(1);
    let mut out: String = text.chars().take(keep).collect();
    out.push('…');
    out
}

/// Classifies helm's stderr of a failed `helm show chart`.
pub fn classify_resolve_failure(stderr: &str) -> ResolveFailure {
    let lower = stderr.to_ascii_lowercase();
    let unreachable = [
        "is not a valid chart repository or cannot be reached",
        "dial tcp",
        "connection refused",
        "no such host",
        "i/o timeout",
        "tls:",
        "x509:",
        "context deadline exceeded",
        "unauthorized",
        "forbidden",
    ];
    if unreachable.iter().any(|p| lower.contains(p)) {
        return ResolveFailure::Unreachable;
    }
    let missing = [
        "not found in",
        "no chart version found",
        "no chart name found",
        "unable to locate any tags",
        "could not find",
        ": not found",
        "manifest unknown",
        "name unknown",
    ];
    if missing.iter().any(|p| lower.contains(p)) {
        return ResolveFailure::ChartMissing;
    }
    ResolveFailure::Unreachable
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_error_lines_and_drops_warnings() {
        let stderr = "level=WARN msg=\"unable to find exact version requested\" chart=fleet\n\
                      Error: chart \"fleet-crd\" version \"9.9.9\" not found in http://127.0.0.1:18879/ repository\n";
        assert_eq!(
            scrub(stderr, MAX_MESSAGE_CHARS),
            "chart \"fleet-crd\" version \"9.9.9\" not found in http://127.0.0.1:18879/ repository"
        );
    }

    #[test]
    fn without_error_lines_keeps_the_last_three() {
        let stderr = "one\ntwo\n\nthree\nfour\n";
        assert_eq!(scrub(stderr, 100), "two; three; four");
        assert_eq!(scrub("", 100), "");
    }

    #[test]
    fn bounds_the_length_on_a_char_boundary() {
        let long = format!("Error: {}", "é".repeat(5000));
        let out = scrub(&long, 100);
        assert_eq!(out.chars().count(), 100);
        assert!(out.ends_with('…'));
        assert_eq!(truncate_chars("short", 10), "short");
        assert_eq!(truncate_chars("abcdef", 4), "abc…");
    }

    #[test]
    fn redacts_what_looks_like_a_secret() {
        let pem = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIQ\n-----END CERTIFICATE-----";
        let key = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA";
        let jwt = "eyJhbGciOiJSUzI1NiIsImtpZCI6IiJ9.eyJpc3MiOiJrdWJlcm5ldGVzIn0.c2lnbmF0dXJl";
        let blob = "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWZnaGlqa2xtbm9w";
        let rows: &[(String, &[&str], &str)] = &[
            (format!("Error: bad value {pem} here"), &["MIIB", "BEGIN"], "bad value <redacted> here"),
            (format!("Error: template: {key}"), &["MIIE", "PRIVATE"], "template: <redacted>"),
            (
                "Error: looks like \"https://user:hunter2@charts.example.com/\" is not a valid chart repository".to_string(),
                &["hunter2", "user:"],
                "looks like \"https://<redacted>@charts.example.com/\" is not a valid chart repository",
            ),
            (
                "Error: oci://ghp_abc123@ghcr.io/x: denied".to_string(),
                &["ghp_abc123"],
                "oci://<redacted>@ghcr.io/x: denied",
            ),
            (format!("Error: Authorization: Bearer {jwt}"), &["eyJ", "c2ln"], "Authorization: <redacted>"),
            (
                "Error: values: password=s3cret, token: abc, \"apiServerCA\":\"LS0tLS1\"".to_string(),
                &["s3cret", "abc,", "LS0tLS1"],
                "values: password=<redacted>, token: <redacted>, \"apiServerCA\":\"<redacted>\"",
            ),
            (format!("Error: unexpected {blob}"), &[blob], "unexpected <redacted>"),
            ("Error: got Basic dXNlcjpwYXNz".to_string(), &["dXNlcjpwYXNz"], "got Basic <redacted>"),
        ];
        for (input, absent, want) in rows {
            let out = scrub(input, MAX_MESSAGE_CHARS);
            for secret in *absent {
                assert!(!out.contains(secret), "{secret:?} leaked in {out:?}");
            }
            assert_eq!(out, *want, "{input}");
        }
    }

    #[test]
    fn leaves_ordinary_errors_readable() {
        for text in [
            "chart \"fleet\" not found in https://rancher.github.io/fleet-helm-charts/ repository",
            "UPGRADE FAILED: another operation (install/upgrade/rollback) is in progress",
            "Get \"http://127.0.0.1:18878/index.yaml\": dial tcp 127.0.0.1:18878: connect: connection refused",
            "INSTALLATION FAILED: context deadline exceeded",
            "invalid token is expired",
            "secrets \"sh.helm.release.v1.fleet.v1\" is forbidden",
            "GET \"https://127.0.0.1:5057/v2/charts/fleet/tags/list\": basic credential not found",
            "authorization failed: no basic auth credentials",
        ] {
            assert_eq!(redact(text), text);
        }
    }

    #[test]
    fn classifies_resolve_failures_from_real_helm_messages() {
        let rows = [
            (
                "Error: looks like \"http://127.0.0.1:18878/\" is not a valid chart repository or cannot be reached: Get \"http://127.0.0.1:18878/index.yaml\": dial tcp 127.0.0.1:18878: connect: connection refused",
                ResolveFailure::Unreachable,
            ),
            (
                "Error: looks like \"http://127.0.0.1:18879/nope/\" is not a valid chart repository or cannot be reached: failed to fetch http://127.0.0.1:18879/nope/index.yaml : 404 File not found",
                ResolveFailure::Unreachable,
            ),
            (
                "Error: Get \"https://127.0.0.1:18878/v2/charts/fleet-crd/tags/list\": dial tcp 127.0.0.1:18878: connect: connection refused",
                ResolveFailure::Unreachable,
            ),
            (
                "Error: chart \"fleet-crd\" version \"9.9.9\" not found in http://127.0.0.1:18879/ repository",
                ResolveFailure::ChartMissing,
            ),
            (
                "Error: chart \"fleet\" not found in http://127.0.0.1:18879/ repository",
                ResolveFailure::ChartMissing,
            ),
            (
                "Error: ghcr.io/rancher/fleet-crd:9.9.9: not found",
                ResolveFailure::ChartMissing,
            ),
            // From the CNCF Distribution registry, helm 4 and helm 3 (tests/oci_registry.rs).
            (
                "Error: GET \"https://127.0.0.1:5057/v2/charts/fleet/tags/list\": response status code 401: unauthorized: authentication required: [map[Action:pull Class: Name:charts/fleet Type:repository]]",
                ResolveFailure::Unreachable,
            ),
            (
                "Error: GET \"https://127.0.0.1:5057/v2/charts/fleet/tags/list\": basic credential not found",
                ResolveFailure::Unreachable,
            ),
            (
                "Error: failed to perform \"FetchReference\" on source: GET \"http://127.0.0.1:5058/v2/charts/fleet/manifests/0.1.0\": response status code 401: unauthorized: authentication required",
                ResolveFailure::Unreachable,
            ),
            (
                "Error: Get \"https://127.0.0.1:5055/v2/charts/fleet/tags/list\": http: server gave HTTP response to HTTPS client",
                ResolveFailure::Unreachable,
            ),
            (
                "Error: failed to perform \"FetchReference\" on source: 127.0.0.1:5055/charts/fleet:9.9.9: not found",
                ResolveFailure::ChartMissing,
            ),
            (
                "Error: 127.0.0.1:5055/charts/fleet:9.9.9: not found",
                ResolveFailure::ChartMissing,
            ),
            (
                "Error: GET \"http://127.0.0.1:5055/v2/charts/nope/tags/list\": response status code 404: name unknown: repository name not known to registry: map[name:charts/nope]",
                ResolveFailure::ChartMissing,
            ),
            ("Error: something else", ResolveFailure::Unreachable),
        ];
        for (stderr, want) in rows {
            assert_eq!(classify_resolve_failure(stderr), want, "{stderr}");
        }
    }
}
