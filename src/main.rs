//! `caapf`: the manager, the CRD printer and operator subcommands in one binary.

use std::process::ExitCode;

use caapf::cli::{Cli, Command};

fn main() -> ExitCode {
    let (cli, dropped) = match Cli::parse_tolerant(std::env::args_os()) {
        Ok(parsed) => parsed,
        Err(err) => err.exit(),
    };
    match &cli.command {
        Some(Command::Crd) => match caapf::api::crds_yaml() {
            Ok(yaml) => {
                print!("{yaml}");
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("error: rendering the CRD: {err}");
                ExitCode::FAILURE
            }
        },
        Some(Command::Cleanup) => {
            caapf::telemetry::init(cli.manager.log_format, cli.manager.verbosity);
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(err) => {
                    eprintln!("error: starting the async runtime: {err}");
                    return ExitCode::FAILURE;
                }
            };
            let result = runtime.block_on(async {
                let client = caapf::manager::connect().await?;
                caapf::cleanup::run(&client).await
            });
            match result {
                Ok(report) => {
                    println!(
                        "removed the finalizer from {} Cluster(s), {} ClusterClass(es), {} ClusterGroup(s)",
                        report.clusters, report.cluster_classes, report.cluster_groups
                    );
                    ExitCode::SUCCESS
                }
                Err(err) => {
                    eprintln!("error: {err}");
                    ExitCode::FAILURE
                }
            }
        }
        Some(Command::Run(_)) | None => {
            let flags = cli.manager_flags().clone();
            caapf::telemetry::init(flags.log_format, flags.verbosity);
            for flag in &dropped {
                tracing::warn!(flag = %flag, "ignoring unknown flag");
            }
            let runtime = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(err) => {
                    eprintln!("error: starting the async runtime: {err}");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(caapf::manager::run(flags)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(err) => {
                    tracing::error!(error = %err, "manager stopped");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
