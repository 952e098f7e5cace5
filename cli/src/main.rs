//! The `lh` binary: parses the command line, resolves settings, runs the command, and
//! turns the outcome into an exit code (see `lh --help`).

mod args;
mod client;
mod commands;
mod error;
mod output;
mod settings;
mod statements;
mod suggest;

use std::process::ExitCode;

use clap::Parser;

use args::{Cli, Commands};
use error::{CliResult, Exit};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version print to stdout and succeed; the rest is a usage error.
            let code = if e.use_stderr() {
                Exit::Usage
            } else {
                Exit::Ok
            };
            let _ = e.print();
            return ExitCode::from(code as u8);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(Exit::Error as u8);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::from(Exit::Ok as u8),
        Err(e) if e.is_broken_pipe() => ExitCode::from(Exit::Ok as u8),
        Err(e) => {
            e.report();
            ExitCode::from(e.exit() as u8)
        }
    }
}

async fn run(cli: Cli) -> CliResult<()> {
    if let Commands::Server(args) = cli.command {
        return commands::server::run(args);
    }
    let mut settings = settings::Settings::resolve(&cli.global)?;
    let client = client::Client::new(
        &settings.endpoint,
        &settings.user,
        settings.token.as_deref(),
    )?;
    match command(&client, &mut settings, cli.command).await {
        Err(e @ error::CliError::Api { status: 404, .. }) => {
            Err(suggest::suggested(&client, &settings, e).await)
        }
        done => done,
    }
}

async fn command(
    client: &client::Client,
    settings: &mut settings::Settings,
    command: Commands,
) -> CliResult<()> {
    match command {
        Commands::Server(_) => unreachable!("handled above"),
        Commands::Info => commands::refs::info(client, settings).await,
        Commands::Branch(cmd) => {
            commands::refs::refs(client, settings, lh_api::RefKind::Branch, cmd).await
        }
        Commands::Tag(cmd) => {
            commands::refs::refs(client, settings, lh_api::RefKind::Tag, cmd).await
        }
        Commands::Status => commands::refs::status(client, settings).await,
        Commands::Checkout(args) => commands::refs::checkout(client, settings, args).await,
        Commands::Log(args) => commands::refs::log(client, settings, args).await,
        Commands::Diff(args) => commands::refs::diff(client, settings, args).await,
        Commands::Merge(args) => commands::refs::merge(client, settings, args).await,
        Commands::Bisect(args) => commands::bisect::bisect(client, settings, args).await,
        Commands::Lineage(args) => commands::runs::lineage(client, settings, args).await,
        Commands::Gc(args) => commands::tables::gc(client, settings, args).await,
        Commands::Table(cmd) => commands::tables::run(client, settings, cmd).await,
        Commands::Query(args) => commands::query::run(client, settings, args).await,
        Commands::Shell(args) => {
            let options = commands::shell::Options {
                reference: args.reference,
                max_rows: args.max_rows,
                timeout_secs: args.timeout,
            };
            commands::shell::run(client, settings, options).await
        }
        Commands::Console(args) => commands::console::run(client, settings, args).await,
        Commands::Init(args) => commands::init::run(args),
        Commands::Run(args) => commands::runs::run(client, settings, args).await,
        Commands::Runs(cmd) => commands::runs::runs(client, settings, cmd).await,
        Commands::Rerun(args) => commands::runs::rerun(client, settings, args).await,
        Commands::Token(cmd) => commands::tokens::run(client, settings, cmd).await,
        Commands::Audit(args) => commands::tokens::audit(client, settings, args).await,
        Commands::Role(cmd) => commands::access::role(client, settings, cmd).await,
        Commands::Check(cmd) => commands::access::check(client, settings, cmd).await,
        Commands::Hook(cmd) => commands::access::hook(client, settings, cmd).await,
        Commands::Secret(cmd) => commands::access::secret(client, settings, cmd).await,
    }
}
