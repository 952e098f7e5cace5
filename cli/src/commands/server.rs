//! `lh server`: replaces this process with the `lh-server` executable (the control
//! plane, built by the `lh-control-plane` package), passing the arguments as they are.
//! Only the server links DuckDB, so every other `lh` command starts without loading it.
//!
//! `lh-server` is looked up beside `lh` first (where a build or a release puts both),
//! then on `PATH`.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;

use anyhow::anyhow;

use crate::args::ServerArgs;
use crate::error::CliResult;

/// The server executable's file name.
pub const SERVER_EXE: &str = "lh-server";

pub fn run(args: ServerArgs) -> CliResult<()> {
    let beside = std::env::current_exe()
        .ok()
        .map(|exe| exe.with_file_name(SERVER_EXE))
        .filter(|p| p.is_file());
    let program = beside.clone().unwrap_or_else(|| PathBuf::from(SERVER_EXE));
    // `exec` returns only when the program could not be started.
    let err = Command::new(&program).args(&args.args).exec();
    Err(anyhow!(
        "cannot start the lh server ({}): {err}\n\
         hint: `lh server` runs the `{SERVER_EXE}` executable, which is built and shipped \
         beside `lh` (`cargo build -p lh-control-plane`); put it next to `lh` or on PATH",
        beside.map_or_else(
            || format!("{SERVER_EXE} on PATH"),
            |p| p.display().to_string()
        ),
    )
    .into())
}
