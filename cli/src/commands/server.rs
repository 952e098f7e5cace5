//! `lh server`: the control plane in the foreground.

use std::time::Duration;

use lh_control_plane::{RuntimeChoice, ServerConfig};

use crate::args::{RuntimeArg, ServerArgs};
use crate::env_vars;
use crate::error::CliResult;
use crate::settings::lh_home;

pub async fn run(args: ServerArgs) -> CliResult<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_env(env_vars::LH_LOG)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,sqlx=warn,iceberg=warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .try_init();
    let mut config = ServerConfig::new(args.data_dir.unwrap_or_else(lh_home));
    if let Some(b) = args.bind {
        config.bind = b;
    }
    config.catalog_url = args.catalog;
    config.warehouse = args.warehouse;
    config.query_timeout = Duration::from_secs(args.query_timeout.max(1));
    config.max_result_bytes = args.max_result_bytes;
    config.max_concurrent_queries = args.max_concurrent_queries.max(1);
    config.duckdb_memory = args.duckdb_memory;
    config.env_cache = args.env_cache;
    if let Some(n) = args.run_parallelism {
        config.run_parallelism = n.max(1);
    }
    config.sandbox = !args.no_sandbox;
    config.run_branch_ttl = Duration::from_secs(args.run_branch_ttl);
    config.max_workers = args.max_workers.max(1);
    config.worker_idle = Duration::from_secs(args.worker_idle.max(1));
    config.runtime = match args.runtime {
        RuntimeArg::Auto => RuntimeChoice::Auto,
        RuntimeArg::Docker => RuntimeChoice::Docker,
        RuntimeArg::Process => RuntimeChoice::Process,
    };
    lh_control_plane::serve(config, lh_control_plane::shutdown_signal()).await?;
    Ok(())
}
