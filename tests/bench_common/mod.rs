//! What the benchmarks (`bench_import.rs`, `bench_hooks.rs`) share: the release binaries run
//! as separate processes with their CPU and peak RSS, a `kube-sandbox` process on a snapshot,
//! and the sandbox's request log.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kube::{Client, Config};
use serde_json::Value;

/// Concurrent connections of the set-up and floor clients.
pub const CONNECTIONS: usize = 8;
/// How long any phase may take before a benchmark gives up.
pub const PHASE_TIMEOUT: Duration = Duration::from_secs(1800);

pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The release binaries next to the `caapf` this test was built with.
pub fn binary(name: &str) -> PathBuf {
    let caapf = PathBuf::from(env!("CARGO_BIN_EXE_caapf"));
    let path = caapf.with_file_name(name);
    assert!(
        path.exists(),
        "{} not built: run `make bench` or `make bench-hooks` (cargo build --release --workspace --bins)",
        path.display()
    );
    path
}

/// A running process and where its figures come from.
pub struct Process {
    child: Child,
    name: &'static str,
}

/// CPU seconds (user + system) and peak RSS (MiB) of a live process.
#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    pub cpu_s: f64,
    pub peak_rss_mib: f64,
}

impl Process {
    pub fn new(child: Child, name: &'static str) -> Self {
        Self { child, name }
    }

    pub fn usage(&self) -> Usage {
        let pid = self.child.id();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // Fields after the command name (which may contain spaces): state is field 3, utime 14,
        // stime 15.
        let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
        let fields: Vec<&str> = after.split_whitespace().collect();
        let ticks = |i: usize| fields.get(i - 3).and_then(|v| v.parse::<f64>().ok());
        let cpu_s = (ticks(14).unwrap_or(0.0) + ticks(15).unwrap_or(0.0)) / clock_ticks();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let peak_kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .unwrap_or(0.0);
        Usage {
            cpu_s,
            peak_rss_mib: peak_kib / 1024.0,
        }
    }

    /// SIGTERM, then wait for the exit (the sandbox writes its snapshot on the way out).
    pub fn stop(mut self) -> Usage {
        let usage = self.usage();
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return usage;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!("{} did not stop on SIGTERM; killing it", self.name);
        let _ = self.child.kill();
        let _ = self.child.wait();
        usage
    }
}

fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// Starts a sandbox process on `dir/snapshot.json` (read-only unless `prepare`).
pub async fn sandbox(dir: &Path, prepare: bool) -> (Process, Client, PathBuf) {
    let kubeconfig = dir.join(if prepare {
        "prepare.kubeconfig"
    } else {
        "run.kubeconfig"
    });
    // `BENCH_SANDBOX_WRAPPER="perf record -o /tmp/sandbox.perf --"` profiles the runs' sandbox.
    let mut command = if prepare {
        Command::new(binary("kube-sandbox"))
    } else {
        wrapped("BENCH_SANDBOX_WRAPPER", &binary("kube-sandbox"))
    };
    command
        .arg("--snapshot-dir")
        .arg(dir.join("snapshot"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--validate")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    // The sandbox keeps every version of every object for its watch history (about 4 GB at
    // 10,000 Clusters); with 4 KiB pages a quarter of its CPU went to page faults (perf, 2026-11-25).
    // glibc 2.35+ backs its heap with transparent huge pages with this tunable (older ones
    // ignore it). The manager is not given it: its peak RSS is a measured figure.
    if std::env::var_os("GLIBC_TUNABLES").is_none() {
        command.env("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1");
    }
    if !prepare {
        command.arg("--snapshot-read-only");
        // `BENCH_SANDBOX_ARGS="--no-watch-list"` plays a server without streaming lists
        // (kube-apiserver 1.33's default): the manager then lists in pages.
        command.args(
            std::env::var("BENCH_SANDBOX_ARGS")
                .unwrap_or_default()
                .split_whitespace(),
        );
    }
    let mut child = command.spawn().expect("start kube-sandbox");
    let stdout = child.stdout.take().expect("sandbox stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("sandbox says where it listens");
    assert!(line.contains("listening on"), "kube-sandbox: {line}");
    let config = Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig).expect("kubeconfig"),
        &Default::default(),
    )
    .await
    .expect("sandbox config");
    let client = Client::try_from(config).expect("client");
    (
        Process {
            child,
            name: "kube-sandbox",
        },
        client,
        kubeconfig,
    )
}

/// `program`, run under the command in the environment variable `wrapper` if it is set (a
/// profiler; the process's CPU and RSS figures are then the wrapper's).
pub fn wrapped(wrapper: &str, program: &Path) -> Command {
    let wrapper = std::env::var(wrapper).unwrap_or_default();
    let mut words = wrapper.split_whitespace();
    match words.next() {
        Some(wrapper) => {
            let mut command = Command::new(wrapper);
            command.args(words).arg(program);
            command
        }
        None => Command::new(program),
    }
}

pub fn namespace_of(i: usize, namespaces: usize) -> String {
    format!("ns-{}", i % namespaces)
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// The manager's requests in the sandbox log.
pub async fn manager_requests(client: &Client) -> Vec<Value> {
    let request = http::Request::get("/sandbox/requests")
        .body(Vec::new())
        .expect("request");
    let all: Value = client.request(request).await.expect("request log");
    // `caapf/<version>`, with ` (<pod name>)` when POD_NAME is set.
    let agent = caapf::client::user_agent_for(None);
    all.as_array()
        .into_iter()
        .flatten()
        .filter(|r| {
            r["userAgent"]
                .as_str()
                .is_some_and(|a| a == agent || a.starts_with(&format!("{agent} (")))
        })
        .cloned()
        .collect()
}

pub async fn reset_requests(client: &Client) {
    let request = http::Request::delete("/sandbox/requests")
        .body(Vec::new())
        .expect("request");
    let _: Value = client.request(request).await.expect("reset request log");
}

pub async fn wait_for<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + PHASE_TIMEOUT;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the manager is quiet: no new request in the sandbox log for 2 s.
pub async fn wait_until_quiet(client: &Client) {
    let mut last = (manager_requests(client).await.len(), Instant::now());
    while last.1.elapsed() < Duration::from_secs(2) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let n = manager_requests(client).await.len();
        if n != last.0 {
            last = (n, Instant::now());
        }
    }
}

/// The first three fields of `/proc/loadavg`.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
