//! The `caapf` binary as a separate process against a sandbox, so that SIGKILL is real: no
//! graceful shutdown, no Lease released, whatever was in flight lost.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::process::{Child, Command};

/// One running manager process; killed (SIGKILL) when dropped.
pub struct ManagerProcess {
    child: Child,
    /// Its combined stdout and stderr.
    pub log: PathBuf,
}

impl ManagerProcess {
    /// Starts the binary with the sandbox kubeconfig at `kubeconfig`, pod name `pod` (its
    /// identity for leader election and in its User-Agent), logging to `<dir>/<pod>-<n>.log`.
    pub fn start(kubeconfig: &Path, dir: &Path, pod: &str, n: usize, extra: &[String]) -> Self {
        let log = dir.join(format!("{pod}-{n}.log"));
        let file = std::fs::File::create(&log).expect("log file");
        let err = file.try_clone().expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_caapf"))
            .args([
                "--metrics-bind-address=0",
                "--health-probe-bind-address=0",
                "--webhook-host=127.0.0.1",
                "--webhook-port=0",
            ])
            .args(extra)
            .env("KUBECONFIG", kubeconfig)
            .env("POD_NAME", pod)
            .env("POD_NAMESPACE", "caapf-system")
            // The log filter a user gets (kube-client's per-response ERROR lines off).
            .env_remove("RUST_LOG")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdout(Stdio::from(file))
            .stderr(Stdio::from(err))
            .kill_on_drop(true)
            .spawn()
            .expect("caapf starts");
        Self { child, log }
    }

    /// SIGKILL, and wait for the process to be gone.
    pub async fn kill(mut self) {
        self.child.start_kill().expect("SIGKILL");
        self.child.wait().await.expect("wait");
    }

    /// Sends `signal` (`STOP`, `CONT`) to the process, as `kill -SIGNAL` does: a stopped
    /// process reads nothing, its sockets fill up.
    pub fn signal(&self, signal: &str) {
        let pid = self.child.id().expect("running");
        let status = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{signal} {pid}");
    }

    /// Whether the process has exited, with its status.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().expect("try_wait")
    }
}

/// Counts the lines of the logs in `dir` at each level (JSON or text output).
pub fn log_levels(dir: &Path) -> (usize, usize) {
    let mut warn = 0;
    let mut error = 0;
    for entry in std::fs::read_dir(dir).expect("log dir").flatten() {
        if entry.path().extension().is_some_and(|e| e == "log") {
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            for line in text.lines().map(strip_ansi) {
                let level = line.split_whitespace().nth(1).unwrap_or_default();
                if level == "WARN" || line.contains("\"level\":\"WARN\"") {
                    warn += 1;
                }
                if level == "ERROR" || line.contains("\"level\":\"ERROR\"") {
                    error += 1;
                }
            }
        }
    }
    (warn, error)
}

/// A log line without terminal colour sequences (`ESC [ ... m`).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
