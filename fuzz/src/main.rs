//! `caapf-fuzz [SECONDS] [SEED]`: runs the decoder fuzzing loop (see the library) for SECONDS
//! (default 60) with SEED (default: the time), prints executions and findings, writes each
//! finding to `fuzz/findings/` in the regression-file form (move it to `fuzz/regressions/` with
//! its fix), and exits with 1 when there was any.

use std::time::Duration;

fn main() {
    let mut args = std::env::args().skip(1);
    let seconds: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(60);
    let seed: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default()
    });
    let repo = caapf_fuzz::repository();
    let seeds = caapf_fuzz::seeds(&repo);
    let started = std::time::Instant::now();
    let report = caapf_fuzz::run(&seeds, Duration::from_secs(seconds), seed);
    let took = started.elapsed().as_secs_f64();
    println!(
        "fuzz: seed {seed}, {} seeds, {} executions in {took:.1} s ({:.0}/s), {} findings",
        seeds.len(),
        report.executions,
        report.executions as f64 / took.max(0.001),
        report.findings.len()
    );
    if report.findings.is_empty() {
        return;
    }
    let dir = repo.join("fuzz/findings");
    if let Err(err) = std::fs::create_dir_all(&dir) {
        eprintln!("creating {}: {err}", dir.display());
    }
    for (i, (input, message)) in report.findings.iter().enumerate() {
        let file = dir.join(format!("seed-{seed}-{i}.bin"));
        println!("finding {}: {message}", file.display());
        if let Err(err) = std::fs::write(&file, input.to_file()) {
            eprintln!("writing {}: {err}", file.display());
        }
    }
    std::process::exit(1);
}
