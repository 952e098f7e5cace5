//! How a failed command ends: a message on stderr (`error: ...`, then `hint: ...`),
//! and an exit code from one table.

use lh_api::ErrorBody;
use lh_api::remedy::Remedy;

/// The exit codes of `lh`, as `lh --help` documents them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Ok = 0,
    Error = 1,
    Usage = 2,
    NotFound = 3,
    Conflict = 4,
    Invalid = 5,
    Unreachable = 6,
    Limit = 7,
    RunFailed = 8,
    /// No valid token (401), or the token's role may not (403).
    Denied = 9,
    /// Interrupted (Ctrl-C), as a shell reports SIGINT.
    Interrupted = 130,
}

#[derive(Debug)]
pub enum CliError {
    /// The server answered with an error.
    Api {
        status: u16,
        body: ErrorBody,
    },
    /// The server could not be reached.
    Unreachable {
        endpoint: String,
        reason: String,
    },
    /// Bad input found before asking the server.
    Invalid {
        message: String,
        hint: Option<String>,
    },
    /// A pipeline run ended without publishing (already reported).
    RunFailed,
    /// Left at the user's Ctrl-C (already reported).
    Interrupted,
    Other(anyhow::Error),
}

impl<E: Into<anyhow::Error>> From<E> for CliError {
    fn from(e: E) -> Self {
        CliError::Other(e.into())
    }
}

pub type CliResult<T> = Result<T, CliError>;

impl CliError {
    pub fn interrupted() -> Self {
        CliError::Interrupted
    }

    pub fn invalid(message: impl Into<String>, hint: Option<&str>) -> Self {
        CliError::Invalid {
            message: message.into(),
            hint: hint.map(String::from),
        }
    }

    pub fn exit(&self) -> Exit {
        match self {
            CliError::Api { status, body } => match status {
                404 => Exit::NotFound,
                409 => Exit::Conflict,
                400 | 422 => Exit::Invalid,
                413 | 504 => Exit::Limit,
                503 if matches!(
                    body.error.kind.as_str(),
                    "answer_memory_full" | "out_of_memory"
                ) =>
                {
                    Exit::Limit
                }
                401 => Exit::Denied,
                403 if matches!(
                    body.error.kind.as_str(),
                    "permission_denied" | "branch_protected"
                ) =>
                {
                    Exit::Denied
                }
                _ => Exit::Error,
            },
            CliError::Unreachable { .. } => Exit::Unreachable,
            CliError::Invalid { .. } => Exit::Invalid,
            CliError::RunFailed => Exit::RunFailed,
            CliError::Interrupted => Exit::Interrupted,
            CliError::Other(_) => Exit::Error,
        }
    }

    /// Whether the error is a closed stdout (`lh ... | head`): not a failure.
    pub fn is_broken_pipe(&self) -> bool {
        let CliError::Other(e) = self else {
            return false;
        };
        e.chain().any(|c| {
            c.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
        })
    }

    /// Prints the error as a person reads it.
    pub fn report(&self) {
        match self {
            CliError::Api { body, .. } => {
                eprintln!("error: {}", body.error.message.trim_end_matches('.'));
                for c in &body.error.conflicts {
                    let show = |p: &Option<lh_api::TablePointer>| match p {
                        Some(p) => format!(
                            "snapshot {}",
                            p.snapshot_id.map_or("none".into(), |s| s.to_string())
                        ),
                        None => "absent".to_string(),
                    };
                    match &c.incoming {
                        Some(incoming) => eprintln!(
                            "  {}: base {}, target {}, incoming {}",
                            c.table,
                            show(&c.expected),
                            show(&c.actual),
                            show(incoming)
                        ),
                        None => eprintln!(
                            "  {}: expected {}, found {}",
                            c.table,
                            show(&c.expected),
                            show(&c.actual)
                        ),
                    }
                }
                if let Some(h) = hint_line(&body.error) {
                    eprintln!("hint: {h}");
                }
            }
            CliError::Unreachable { endpoint, reason } => {
                eprintln!("error: cannot reach the lh server at {endpoint}: {reason}");
                eprintln!(
                    "hint: start one with `lh server`, or point --endpoint (or LH_ENDPOINT) at yours"
                );
            }
            CliError::Invalid { message, hint } => {
                eprintln!("error: {message}");
                if let Some(h) = hint {
                    eprintln!("hint: {h}");
                }
            }
            CliError::RunFailed | CliError::Interrupted => {}
            CliError::Other(e) => {
                eprintln!("error: {e}");
                for cause in e.chain().skip(1) {
                    eprintln!("  caused by: {cause}");
                }
            }
        }
    }
}

/// A remedy the server sent, worded as the command that does it.
fn command(r: &Remedy) -> String {
    match r {
        Remedy::ListRefs => "`lh branch ls` and `lh tag ls` list the refs".into(),
        Remedy::ListTables { at } => format!(
            "`lh table ls --ref {}` lists the tables",
            at.as_deref().unwrap_or("REF")
        ),
        Remedy::ShowSchema => "`lh table show NAME` prints the schema".into(),
        Remedy::ReplaceTable => "--mode replace replaces the table and its schema".into(),
        Remedy::AppendOrReplace => "use --mode append or --mode replace".into(),
        Remedy::CreateTable => "use --mode create to create it".into(),
        Remedy::Repartition => "--mode replace --partition-by ... repartitions the table".into(),
        Remedy::ReplaceOrCompact => {
            "replace the whole table, or compact it first (`lh table compact`)".into()
        }
        Remedy::BranchFrom { from } => format!(
            "create a branch from it: lh branch create NAME --from {}",
            from.as_deref().unwrap_or("REF")
        ),
        Remedy::MergeInto { into } => format!(
            "make the change on another branch and merge it: lh branch create fix --from {into}, then lh merge fix --into {into} (a role that may merge)"
        ),
        Remedy::WriteByImportOrRun => "change tables with `lh table import` or `lh run`".into(),
        Remedy::ImportFiles => "bring files in with `lh table import`".into(),
        Remedy::ChooseCommit => "choose the commit with --ref (main@<hash>, main@<time>)".into(),
        Remedy::ListRoles => "lh role ls shows the roles".into(),
        Remedy::DefineRole => "an admin defines it with lh role set, or gives you another".into(),
        Remedy::ListTokens => "lh token ls lists them".into(),
        Remedy::PresentToken => "`lh` reads it from the profile in ~/.lh/config.yaml or LH_TOKEN; an admin makes one with `lh token create`".into(),
        Remedy::SetSecret { name, widen: true } => {
            format!("run on such a branch, or an admin widens it: lh secret set {name} --on PATTERN")
        }
        Remedy::SetSecret { name, widen: false } => {
            format!("an admin sets it: lh secret set {name} < file")
        }
        Remedy::ListChecks => "lh check ls shows the checks; lh check add makes one".into(),
        Remedy::ListRuns => "`lh runs ls` lists the runs".into(),
    }
}

/// The hint line of an error body: its own hint, then its remedies as commands.
fn hint_line(e: &lh_api::ErrorDetail) -> Option<String> {
    let own = lh_api::remedy::own_hint(e.hint.as_deref(), &e.remedies);
    let parts: Vec<String> = own
        .map(str::to_string)
        .into_iter()
        .chain(e.remedies.iter().map(command))
        .collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}
