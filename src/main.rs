//! `caapf`: the manager, the CRD printer and operator subcommands in one binary.

use std::process::ExitCode;

use caapf::api::FleetAddonConfig;
use caapf::cli::{Cli, Command, PreviewOutput};

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
            print_from(async {
                let clients = caapf::manager::connect(&cli.manager).await?;
                let report = caapf::cleanup::run(&clients.controllers).await?;
                Ok::<_, caapf::Error>(format!(
                    "removed the finalizer from {} Cluster(s), {} ClusterClass(es), {} ClusterGroup(s)\n",
                    report.clusters, report.cluster_classes, report.cluster_groups
                ))
            })
        }
        Some(Command::MovePreview(args)) => {
            // No logging: stdout is the report (or YAML to pipe), errors go to stderr.
            eprintln!("{}", caapf::move_preview::EXPERIMENTAL_NOTE);
            print_from(async {
                let (namespace, cluster) = caapf::move_preview::parse_target(&args.cluster)?;
                let clients = caapf::manager::connect(&cli.manager).await?;
                let preview =
                    caapf::move_preview::preview(&clients.controllers, &namespace, &cluster)
                        .await?;
                match args.output {
                    PreviewOutput::Text => Ok(caapf::move_preview::render_text(&preview)),
                    PreviewOutput::Yaml => caapf::move_preview::render_yaml(&preview),
                }
            })
        }
        Some(Command::RolloutStrategy(args)) => print_from(async {
            let config = rollout_strategy(&cli, args.file.as_deref()).await?;
            caapf::model::rollout::strategy::for_config(config.as_ref())
        }),
        Some(Command::Run(_)) | None => {
            let flags = cli.manager_flags().clone();
            caapf::telemetry::init(flags.log_format, flags.verbosity);
            for flag in &dropped {
                tracing::warn!(flag = %flag, "ignoring unknown flag");
            }
            let Some(runtime) = runtime(tokio::runtime::Builder::new_multi_thread()) else {
                return ExitCode::FAILURE;
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

/// The FleetAddonConfig of `caapf rollout-strategy`: the `file`'s, else the cluster's.
async fn rollout_strategy(
    cli: &Cli,
    file: Option<&std::path::Path>,
) -> Result<Option<FleetAddonConfig>, String> {
    if let Some(path) = file {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        return serde_yaml::from_str(&text)
            .map(Some)
            .map_err(|e| format!("{}: not a FleetAddonConfig: {e}", path.display()));
    }
    let clients = caapf::manager::connect(&cli.manager)
        .await
        .map_err(|e| e.to_string())?;
    let api = kube::Api::<FleetAddonConfig>::all(clients.controllers);
    (api.get_opt(caapf::names::CONFIG_NAME).await).map_err(|e| {
        format!(
            "reading FleetAddonConfig {}: {e}",
            caapf::names::CONFIG_NAME
        )
    })
}

/// Runs an operator subcommand's `work` on a single-threaded runtime: its text on stdout, or
/// its error on stderr.
fn print_from<E: std::fmt::Display>(
    work: impl std::future::Future<Output = Result<String, E>>,
) -> ExitCode {
    let Some(runtime) = runtime(tokio::runtime::Builder::new_current_thread()) else {
        return ExitCode::FAILURE;
    };
    match runtime.block_on(work) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Builds the async runtime, reporting a failure on stderr.
fn runtime(mut builder: tokio::runtime::Builder) -> Option<tokio::runtime::Runtime> {
    builder
        .enable_all()
        .build()
        .map_err(|err| eprintln!("error: starting the async runtime: {err}"))
        .ok()
}
