//! Fuzzing of every Runtime SDK request decoder on stable Rust (issue #16): cargo-fuzz needs a
//! nightly compiler for its sanitizer flags, so this is a coverage-less, structure-aware
//! mutation loop instead. Seeds are the real-shaped requests of `tests/fixtures/hooks/` and the
//! regression inputs of `fuzz/regressions/`; mutations flip, insert and delete bytes, and
//! replace, delete or duplicate nodes of the decoded JSON with values of every type (huge
//! strings and numbers, deep nesting, wrong types). Each input goes through what the server
//! does with a request before any I/O: routing, the `timeout` parameter, the decoding-cost
//! estimate and the large-body check, and the request types (`RequestMeta`, `LifecycleRequest`,
//! `GeneratePatchesRequest`), the embedded Cluster (`ClusterInfo::decode`) and the pure
//! GeneratePatches handler. A panic or a broken invariant is a finding; `make fuzz` runs the
//! loop for a given time and saves findings, which then become regression inputs.

use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use caapf::hooks::cluster::ClusterInfo;
use caapf::hooks::handlers::topology::generate_patches;
use caapf::hooks::limits::{DECODED_BYTES_PER_VALUE, decode_cost};
use caapf::hooks::server::{self, Route, ServerOptions};
use caapf::hooks::types::{
    GeneratePatchesRequest, Hook, LifecycleRequest, RequestMeta, ResponseBody, ResponseStatus,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Map, Value};

/// One request: the path (with its query) and the body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Input {
    pub path: String,
    pub body: Vec<u8>,
}

impl Input {
    /// The regression-file form: the path, a newline, the body.
    pub fn to_file(&self) -> Vec<u8> {
        let mut bytes = self.path.replace('\n', "").into_bytes();
        bytes.push(b'\n');
        bytes.extend_from_slice(&self.body);
        bytes
    }

    /// Reads the regression-file form.
    pub fn from_file(bytes: &[u8]) -> Input {
        let split = bytes
            .iter()
            .position(|b| *b == b'\n')
            .unwrap_or(bytes.len());
        Input {
            path: String::from_utf8_lossy(&bytes[..split]).into_owned(),
            body: bytes.get(split + 1..).unwrap_or_default().to_vec(),
        }
    }
}

/// The repository root (this crate lives in `fuzz/`).
pub fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// The seed corpus: every hook fixture's request, plus the regression inputs.
pub fn seeds(repo: &Path) -> Vec<Input> {
    let mut seeds = Vec::new();
    let mut fixtures: Vec<PathBuf> = std::fs::read_dir(repo.join("tests/fixtures/hooks"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    fixtures.sort();
    for file in fixtures {
        let Ok(text) = std::fs::read(&file) else {
            continue;
        };
        let Ok(case) = serde_json::from_slice::<Value>(&text) else {
            continue;
        };
        let path = case["path"].as_str().unwrap_or_default().to_string();
        let body = match case["requestRaw"].as_str() {
            Some(raw) => raw.as_bytes().to_vec(),
            None => serde_json::to_vec(&case["request"]).unwrap_or_default(),
        };
        seeds.push(Input { path, body });
    }
    seeds.extend(regressions(repo).into_iter().map(|(_, input)| input));
    seeds
}

/// The saved findings, by file name.
pub fn regressions(repo: &Path) -> Vec<(String, Input)> {
    let mut found: Vec<(String, Input)> = std::fs::read_dir(repo.join("fuzz/regressions"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "bin"))
        .filter_map(|e| {
            let bytes = std::fs::read(e.path()).ok()?;
            Some((
                e.file_name().to_string_lossy().into_owned(),
                Input::from_file(&bytes),
            ))
        })
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

/// Runs one input through every decoder. `Err` is a broken invariant; a panic is caught by
/// [`check`].
pub fn exercise(input: &Input) -> Result<(), String> {
    let options = ServerOptions::default();
    let (path, query) = match input.path.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (input.path.as_str(), None),
    };
    let route = server::route(path);
    let limit = server::deadline(query, &options);
    if limit > options.max_timeout || limit < Duration::from_millis(100) {
        return Err(format!("deadline {limit:?} outside its bounds"));
    }
    let cost = decode_cost(&input.body);
    if cost < input.body.len() + DECODED_BYTES_PER_VALUE {
        return Err(format!("decoding cost {cost} below the body's own size"));
    }
    let hook = match route {
        Route::Hook { hook, .. } => Some(hook),
        Route::Unknown(_) => None,
    };
    let Ok(value) = serde_json::from_slice::<Value>(&input.body) else {
        return Ok(());
    };
    let _ = serde_json::from_value::<RequestMeta>(value.clone());
    let _ = ClusterInfo::decode(&value);
    if let Ok(request) = serde_json::from_value::<LifecycleRequest>(value.clone())
        && let Ok(cluster) = ClusterInfo::decode(&request.cluster)
    {
        let _ = cluster.key();
    }
    if matches!(hook, None | Some(Hook::GeneratePatches))
        && let Ok(request) = serde_json::from_value::<GeneratePatchesRequest>(value)
    {
        for secret_exists in [false, true] {
            let response = generate_patches(&request, secret_exists);
            let encoded = serde_json::to_value(&response)
                .map_err(|err| format!("the response does not serialise: {err}"))?;
            if encoded["kind"] != "GeneratePatchesResponse" {
                return Err(format!("wrong response kind: {encoded}"));
            }
            if response.status == ResponseStatus::Success {
                let ResponseBody::Patches { items } = &response.body else {
                    return Err(format!("a Success without items: {encoded}"));
                };
                if items.len() != request.items.len() {
                    return Err(format!(
                        "{} items answered for {} asked",
                        items.len(),
                        request.items.len()
                    ));
                }
            }
        }
    }
    Ok(())
}

/// [`exercise`] with panics turned into findings.
pub fn check(input: &Input) -> Result<(), String> {
    match std::panic::catch_unwind(AssertUnwindSafe(|| exercise(input))) {
        Ok(result) => result,
        Err(panic) => Err(format!(
            "panic: {}",
            panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "(no message)".to_string())
        )),
    }
}

/// A random JSON value of any type, including the awkward ones.
fn random_value(rng: &mut StdRng, depth: usize) -> Value {
    match rng.random_range(0..12) {
        0 => Value::Null,
        1 => Value::Bool(rng.random()),
        2 => Value::from(rng.random::<i64>()),
        3 => Value::from(rng.random::<f64>() * 1e300),
        4 => Value::from(""),
        5 => Value::from("x".repeat(rng.random_range(0..5000))),
        6 => Value::from(
            [
                "Cluster",
                "KubeadmControlPlaneTemplate",
                "RKE2ControlPlaneTemplate",
                "cluster.x-k8s.io/v1beta1",
                "cluster.x-k8s.io/v1beta2",
                "fleetAgent",
                "/spec/template",
                "\u{0}\u{ffff}🦀",
                "..",
            ][rng.random_range(0..9)],
        ),
        7 if depth < 6 => Value::Array(
            (0..rng.random_range(0..4))
                .map(|_| random_value(rng, depth + 1))
                .collect(),
        ),
        8 if depth < 6 => {
            let mut map = Map::new();
            for _ in 0..rng.random_range(0..4) {
                let key = [
                    "name",
                    "kind",
                    "apiVersion",
                    "metadata",
                    "spec",
                    "value",
                    "items",
                    "variables",
                    "object",
                    "uid",
                ][rng.random_range(0..10)];
                map.insert(key.to_string(), random_value(rng, depth + 1));
            }
            Value::Object(map)
        }
        9 => {
            let depth = rng.random_range(1..200);
            let mut value = Value::Null;
            for _ in 0..depth {
                value = Value::Array(vec![value]);
            }
            value
        }
        10 => Value::from(u64::MAX),
        _ => Value::from(-1),
    }
}

/// Every node of `value`, as JSON pointers.
fn pointers(value: &Value, at: String, out: &mut Vec<String>) {
    out.push(at.clone());
    match value {
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                pointers(item, format!("{at}/{i}"), out);
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                let escaped = key.replace('~', "~0").replace('/', "~1");
                pointers(item, format!("{at}/{escaped}"), out);
            }
        }
        _ => {}
    }
}

fn structural(rng: &mut StdRng, body: &[u8]) -> Option<Vec<u8>> {
    let mut value: Value = serde_json::from_slice(body).ok()?;
    let mut all = Vec::new();
    pointers(&value, String::new(), &mut all);
    let target = all[rng.random_range(0..all.len())].clone();
    let (parent, last) = match target.rsplit_once('/') {
        Some((parent, last)) => (parent.to_string(), last.to_string()),
        None => (String::new(), String::new()),
    };
    match rng.random_range(0..4) {
        // Replace the node.
        0 | 1 => {
            let replacement = random_value(rng, 0);
            if let Some(node) = value.pointer_mut(&target) {
                *node = replacement;
            }
        }
        // Delete it from its parent.
        2 => match value.pointer_mut(&parent) {
            Some(Value::Object(map)) => {
                map.remove(&last.replace("~1", "/").replace("~0", "~"));
            }
            Some(Value::Array(items)) => {
                if let Ok(i) = last.parse::<usize>()
                    && i < items.len()
                {
                    items.remove(i);
                }
            }
            _ => {}
        },
        // Duplicate it into its parent array, or add a random key to it.
        _ => {
            let copy = value.pointer(&target).cloned();
            match (value.pointer_mut(&parent), copy) {
                (Some(Value::Array(items)), Some(copy)) => items.push(copy),
                _ => {
                    if let Some(Value::Object(map)) = value.pointer_mut(&target) {
                        let extra = random_value(rng, 0);
                        map.insert("status".to_string(), extra);
                    }
                }
            }
        }
    }
    serde_json::to_vec(&value).ok()
}

fn bytewise(rng: &mut StdRng, body: &[u8]) -> Vec<u8> {
    let mut body = body.to_vec();
    for _ in 0..rng.random_range(1..8) {
        let at = if body.is_empty() {
            0
        } else {
            rng.random_range(0..body.len())
        };
        match rng.random_range(0..5) {
            0 if !body.is_empty() => body[at] ^= 1 << rng.random_range(0..8),
            1 if !body.is_empty() => {
                let end = (at + rng.random_range(1..64)).min(body.len());
                body.drain(at..end);
            }
            2 => {
                let token: &[u8] = [
                    b"{".as_slice(),
                    b"}",
                    b"[",
                    b"]",
                    b",",
                    b":",
                    b"\"",
                    b"\\u0000",
                    b"null",
                    b"1e999",
                    b"-0",
                    b"\xff",
                ][rng.random_range(0..12)];
                body.splice(at..at, token.iter().copied());
            }
            3 if !body.is_empty() => {
                body[at] = rng.random();
            }
            _ => body.truncate(at),
        }
    }
    body
}

const PATHS: [&str; 6] = [
    "/hooks.runtime.cluster.x-k8s.io/v1alpha1/generatepatches/fleet-agent-bootstrap",
    "/hooks.runtime.cluster.x-k8s.io/v1alpha1/beforeclustercreate/before-cluster-create",
    "/hooks.runtime.cluster.x-k8s.io/v1alpha1/discovery",
    "/p/hooks.runtime.cluster.x-k8s.io/v1alpha1/GeneratePatches/x/y/",
    "/hooks.runtime.cluster.x-k8s.io/v1alpha1/",
    "/",
];

fn mutate_path(rng: &mut StdRng, path: &str) -> String {
    let mut path = match rng.random_range(0..4) {
        0 => PATHS[rng.random_range(0..PATHS.len())].to_string(),
        1 => {
            let mut bytes = path.as_bytes().to_vec();
            if !bytes.is_empty() {
                let at = rng.random_range(0..bytes.len());
                bytes.truncate(at);
            }
            String::from_utf8_lossy(&bytes).into_owned()
        }
        _ => path.split('?').next().unwrap_or_default().to_string(),
    };
    if rng.random_bool(0.5) {
        let timeout = [
            "10s",
            "1ms",
            "0s",
            "-5s",
            "1h2m3s",
            "999999999999h",
            "1.5s",
            "",
            "s",
            "1µs",
            "nan",
        ][rng.random_range(0..11)];
        path.push_str(&format!("?x=1&timeout={timeout}"));
    }
    path
}

/// One mutation of `input`.
pub fn mutate(rng: &mut StdRng, input: &Input) -> Input {
    let body = match rng.random_range(0..3) {
        0 => bytewise(rng, &input.body),
        _ => structural(rng, &input.body).unwrap_or_else(|| bytewise(rng, &input.body)),
    };
    let path = if rng.random_bool(0.2) {
        mutate_path(rng, &input.path)
    } else {
        input.path.clone()
    };
    Input { path, body }
}

/// What a run did.
#[derive(Debug, Default)]
pub struct Report {
    pub executions: u64,
    pub findings: Vec<(Input, String)>,
}

/// Mutates the corpus for `duration` (seeded, so a run can be repeated), checking every input.
/// Inputs that keep decoding as JSON join the corpus (bounded), so mutations stack.
pub fn run(seeds: &[Input], duration: Duration, seed: u64) -> Report {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut corpus: Vec<Input> = seeds.to_vec();
    let mut report = Report::default();
    if corpus.is_empty() {
        corpus.push(Input {
            path: PATHS[0].to_string(),
            body: b"{}".to_vec(),
        });
    }
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let started = Instant::now();
    while started.elapsed() < duration {
        let parent = &corpus[rng.random_range(0..corpus.len())];
        let child = mutate(&mut rng, parent);
        report.executions += 1;
        if let Err(message) = check(&child) {
            if !report.findings.iter().any(|(_, m)| *m == message) {
                report.findings.push((child, message));
            }
            continue;
        }
        if corpus.len() < 4096
            && child.body.len() < 1 << 20
            && serde_json::from_slice::<Value>(&child.body).is_ok()
            && rng.random_bool(0.1)
        {
            corpus.push(child);
        }
    }
    std::panic::set_hook(previous);
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_seed_and_regression_passes() {
        let repo = repository();
        let seeds = seeds(&repo);
        assert!(seeds.len() >= 20, "fixtures not found under {repo:?}");
        for input in &seeds {
            assert_eq!(check(input), Ok(()), "{input:?}");
        }
        for (name, input) in regressions(&repo) {
            assert_eq!(check(&input), Ok(()), "regression {name}");
        }
    }

    #[test]
    fn regression_files_round_trip() {
        let input = Input {
            path: "/a?timeout=1s".into(),
            body: b"{\n\xff}".to_vec(),
        };
        assert_eq!(Input::from_file(&input.to_file()), input);
    }

    /// A few seconds of the loop (`make fuzz` runs it for longer).
    #[test]
    fn smoke() {
        let report = run(&seeds(&repository()), Duration::from_secs(2), 16);
        assert!(report.executions > 0);
        assert!(report.findings.is_empty(), "{:#?}", report.findings);
    }
}
