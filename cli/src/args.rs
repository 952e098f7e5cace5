//! The command line of `lh`, as clap structs. No logic here.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use lh_api::env_vars;

/// lh: a versioned, serverless lakehouse on Apache Iceberg.
///
/// Branch, change, query and merge many tables at once, as you do with code.
#[derive(Debug, Parser)]
#[command(name = "lh", version, about, long_about, after_help = EXIT_CODES)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Commands,
}

pub const EXIT_CODES: &str = "Exit codes: 0 ok, 1 error, 2 usage, 3 not found, 4 conflict, \
5 invalid input, 6 server unreachable, 7 query timeout or result too large, 8 run failed, \
9 not authenticated or not permitted, 130 interrupted (Ctrl-C)";

#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// The lh server to talk to [default: the profile's, or http://127.0.0.1:7878]
    #[arg(long, global = true, env = env_vars::LH_ENDPOINT, value_name = "URL")]
    pub endpoint: Option<String>,
    /// How to print listings and results
    #[arg(long, short = 'o', global = true, value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
    /// The profile of ~/.lh/config.yaml to use
    #[arg(long, global = true, env = env_vars::LH_PROFILE, value_name = "NAME")]
    pub profile: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Aligned columns, for people
    Table,
    /// JSON, stable for scripts
    Json,
    /// CSV with a header row
    Csv,
}

#[derive(Debug, Subcommand)]
pub enum Commands {
    /// Run the lh server (the embedded default needs no flag)
    Server(ServerArgs),
    /// Show the server, its catalog and storage, and the active branch
    Info,
    /// Create, list and delete branches
    #[command(subcommand)]
    Branch(RefCommand),
    /// Create, list and delete tags (tags never move)
    #[command(subcommand)]
    Tag(RefCommand),
    /// Set the active branch (`-b` creates it first)
    Checkout(CheckoutArgs),
    /// The active branch: its head, and what it and the default branch changed since it
    /// left it
    Status,
    /// Show the history of a ref, newest first
    Log(LogArgs),
    /// Show the tables that differ between two refs
    Diff(DiffArgs),
    /// Merge a ref into a branch, atomically
    Merge(MergeArgs),
    /// Find the first commit where a table went bad: a binary search over the commits
    /// that changed it, one read-only check per step (a query, or a project's expectation)
    Bisect(BisectArgs),
    /// Column-level lineage: which columns a table's column is made from, and what is
    /// made from it, through the models of each project's last run on a branch
    Lineage(LineageArgs),
    /// List, show, import and remove tables
    #[command(subcommand)]
    Table(TableCommand),
    /// Run SQL on a ref (from the command line, a file or standard input)
    Query(QueryArgs),
    /// An interactive SQL shell on a ref: history, completion, dot commands
    Shell(ShellArgs),
    /// Open the web console in a browser, signed in with this profile's token
    Console(ConsoleArgs),
    /// Make a new project that runs as made: a model, a SQL model and an expectation
    Init(InitArgs),
    /// Run a pipeline on a branch: outputs publish only when every node and expectation passes
    Run(RunArgs),
    /// List, show, follow and cancel pipeline runs
    #[command(subcommand)]
    Runs(RunsCommand),
    /// Replay a run: the same code, environments, parameters and input data
    Rerun(RerunArgs),
    /// Remove warehouse files no commit reaches (left by failed or refused writes)
    Gc(GcArgs),
    /// Make, list and revoke the bearer tokens of users (admins only)
    #[command(subcommand)]
    Token(TokenCommand),
    /// The audit log: who changed what, when and from where (admins only)
    Audit(AuditArgs),
    /// Define, list and remove roles: grants of actions on refs and namespaces
    #[command(subcommand)]
    Role(RoleCommand),
    /// Checks a protected branch can require before a merge (admins only)
    #[command(subcommand)]
    Check(CheckCommand),
    /// Webhooks told of every merge into matching branches (admins only)
    #[command(subcommand)]
    Hook(HookCommand),
    /// Secrets for pipeline functions, encrypted at rest (set and rm: admins only)
    #[command(subcommand)]
    Secret(SecretCommand),
}

#[derive(Debug, Subcommand)]
pub enum RoleCommand {
    /// List the roles and their grants
    #[command(alias = "list")]
    Ls,
    /// Define a role, or replace its grants
    Set {
        name: String,
        /// 'ACTIONS on REFS [in NAMESPACES]', e.g. 'read on *' or 'write,run on
        /// team-a.* in sales' (repeatable; actions: read, write, run, merge, admin; `*`
        /// stands for any run of characters)
        #[arg(long = "grant", required = true, value_name = "GRANT")]
        grants: Vec<String>,
    },
    /// Remove a role no live token has
    #[command(alias = "delete")]
    Rm { name: String },
}

#[derive(Debug, Subcommand)]
pub enum CheckCommand {
    /// Add a check (or replace one of that name)
    Add(CheckAddArgs),
    /// List the checks and the branches requiring them
    #[command(alias = "list")]
    Ls,
    /// Remove a check no branch requires
    #[command(alias = "delete")]
    Rm { name: String },
}

#[derive(Debug, Args)]
pub struct CheckAddArgs {
    pub name: String,
    /// POST each merge's diff to this URL; a 2xx answer passes
    #[arg(
        long,
        value_name = "URL",
        conflicts_with = "expectations",
        required_unless_present = "expectations"
    )]
    pub webhook: Option<String>,
    /// Run this lh project's expectations on each merge's result
    #[arg(long, value_name = "DIR")]
    pub expectations: Option<PathBuf>,
    /// Sign the webhook's requests with the secret in this environment variable
    /// (X-Lh-Signature: sha256=HMAC of the body)
    #[arg(long, value_name = "VAR", requires = "webhook")]
    pub secret_env: Option<String>,
    /// How long the check may take [default: 10s for a webhook, 10m for expectations]
    #[arg(long, value_name = "AGE", value_parser = parse_lifetime)]
    pub timeout: Option<u64>,
}

#[derive(Debug, Subcommand)]
pub enum HookCommand {
    /// Add a post-merge webhook (or replace one of that name)
    Add {
        name: String,
        /// Where merges are POSTed (retried, never blocking)
        #[arg(long, value_name = "URL")]
        url: String,
        /// Only merges into branches matching this pattern [default: *]
        #[arg(long = "on", value_name = "PATTERN")]
        refs: Option<String>,
        /// Sign its requests with the secret in this environment variable
        #[arg(long, value_name = "VAR")]
        secret_env: Option<String>,
    },
    /// List the post-merge webhooks
    #[command(alias = "list")]
    Ls,
    /// Remove one
    #[command(alias = "delete")]
    Rm { name: String },
}

#[derive(Debug, Subcommand)]
pub enum SecretCommand {
    /// Set a secret from standard input (a new version; functions using it run again)
    Set {
        /// As functions see it: an environment variable's name (STRIPE_KEY)
        name: String,
        /// Only runs on branches matching this pattern get it (`main`: runs publishing
        /// to main, which a protected main allows only to roles that may merge there)
        /// [default: *]
        #[arg(long = "on", value_name = "PATTERN")]
        refs: Option<String>,
    },
    /// List the secrets' names and versions (never their values)
    #[command(alias = "list")]
    Ls,
    /// Remove a secret
    #[command(alias = "delete")]
    Rm { name: String },
}

#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Only entries this recent: 90m, 36h, 7d
    #[arg(long, value_name = "AGE", value_parser = parse_lifetime)]
    pub since: Option<u64>,
    /// Only this user's requests
    #[arg(long)]
    pub user: Option<String>,
    /// At most this many entries, newest first
    #[arg(long, short = 'n', default_value_t = 100)]
    pub limit: u32,
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Make a token; it is printed once and stored nowhere (only its hash is)
    Create(TokenCreateArgs),
    /// List tokens (never their secrets)
    #[command(alias = "list")]
    Ls,
    /// Revoke a token: its next request is refused
    Revoke {
        /// The token's id (`lh token ls`)
        id: String,
    },
}

#[derive(Debug, Args)]
pub struct TokenCreateArgs {
    /// What the token is for [default: the user's name]
    #[arg(long)]
    pub name: Option<String>,
    /// The user it authenticates: the author of its changes [default: you]
    #[arg(long)]
    pub user: Option<String>,
    /// reader (read and query), writer (+ imports, table changes, runs), maintainer
    /// (+ merges, moving and deleting refs), admin (+ tokens, roles, gc), or a role
    /// defined with `lh role set`
    #[arg(long, default_value = "reader")]
    pub role: String,
    /// When it expires: 90m, 36h, 30d [default: never]
    #[arg(long, value_name = "AGE", value_parser = parse_lifetime)]
    pub expires: Option<u64>,
}

/// A token's lifetime: `parse_age` without its lower bound.
fn parse_lifetime(s: &str) -> Result<u64, String> {
    let secs = parse_age(s)?;
    if secs == 0 {
        return Err(format!("'{s}' is no lifetime: it must be longer than 0"));
    }
    Ok(secs)
}

#[derive(Debug, Args)]
pub struct GcArgs {
    /// Only files last modified this long ago: 36h, 7d (at least 1d)
    #[arg(long, value_name = "AGE", default_value = "3d", value_parser = parse_age)]
    pub older_than: u64,
    /// List what would be removed, and remove nothing
    #[arg(long)]
    pub dry_run: bool,
}

/// `90s`, `90m`, `36h`, `7d`: seconds.
fn parse_age(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not an age such as 90m, 36h or 7d"))?;
    let mult: u64 = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86400,
        _ => return Err(format!("'{s}' is not an age such as 90m, 36h or 7d")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("'{s}' is too long an age"))
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The project folder (with lh_project.yml)
    #[arg(default_value = ".", value_name = "DIR")]
    pub dir: PathBuf,
    /// The branch to publish to [default: the active branch]
    #[arg(long = "ref", value_name = "BRANCH")]
    pub reference: Option<String>,
    /// A parameter value, KEY=VALUE (repeatable)
    #[arg(long = "param", short = 'p', value_name = "KEY=VALUE")]
    pub params: Vec<String>,
    /// Start the run and print its id, without waiting
    #[arg(long)]
    pub detach: bool,
    /// Run every node, even when an earlier run made the same output
    #[arg(long)]
    pub no_cache: bool,
    /// Failed warning expectations also stop the run from publishing
    #[arg(long)]
    pub strict: bool,
    /// Plan the run and print the DAG, without running anything
    #[arg(long)]
    pub dry_run: bool,
    /// Plan the run and say what it would change, without running anything: for each
    /// node whether it would run or reuse an earlier output and why, and for each SQL
    /// model whose query changed since the project's last run, whether the change is
    /// breaking (a column downstream reads removed or retyped), non-breaking or
    /// metadata-only
    #[arg(long, conflicts_with = "dry_run")]
    pub plan: bool,
    /// Run one partition of a partitioned project (2026-11-03, 2026-11-03T05, eu)
    #[arg(long, value_name = "P", conflicts_with = "partitions")]
    pub partition: Option<String>,
    /// Run (backfill) several partitions: a range A..B (both included) or a list a,b,c;
    /// they run in parallel and publish in one merge
    #[arg(long, value_name = "A..B")]
    pub partitions: Option<String>,
    /// With --partitions: one run per partition, one after the other, each published on
    /// its own as it succeeds (a failed one publishes nothing and the others go on)
    #[arg(long, requires = "partitions", conflicts_with_all = ["detach", "dry_run"])]
    pub each_partition: bool,
    /// Run only these nodes (repeatable, or comma-separated): `orders` (a model's table,
    /// with or without its namespace, or an expectation), `+orders` with what it reads
    /// from, `orders+` with what reads it; an input a left-out node makes is read from
    /// the branch
    #[arg(long, short = 's', value_name = "NODE", value_delimiter = ',')]
    pub select: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// The newest runs
    #[command(alias = "list")]
    Ls {
        #[arg(long, short = 'n', default_value_t = 20)]
        limit: usize,
    },
    /// A run's nodes: status, timings, rows, errors
    Show { run: String },
    /// The output of a run's functions
    Logs {
        run: String,
        /// Only this node
        #[arg(long, value_name = "NAME")]
        node: Option<String>,
        /// Keep printing until the run ends (a running function's prints as they happen)
        #[arg(long, short = 'f')]
        follow: bool,
    },
    /// Stop a running run (nothing is published)
    Cancel { run: String },
}

#[derive(Debug, Args)]
pub struct RerunArgs {
    /// The run to replay
    pub run: String,
    /// Reuse the outputs of the nodes that succeeded
    #[arg(long)]
    pub from_failed: bool,
    /// Replay with the code in this folder instead of the run's own
    #[arg(long, value_name = "DIR")]
    pub code: Option<PathBuf>,
    /// Start the replay and print its id, without waiting
    #[arg(long)]
    pub detach: bool,
}

/// `lh server`'s arguments, passed as they are to the `lh-server` executable beside
/// `lh`, which parses them (`lh server --help` lists them).
#[derive(Debug, Args)]
#[command(disable_help_flag = true)]
pub struct ServerArgs {
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    pub args: Vec<std::ffi::OsString>,
}

#[derive(Debug, Subcommand)]
pub enum RefCommand {
    /// Create one from a ref (zero-copy)
    Create {
        name: String,
        /// The ref to start from [default: the active branch]
        #[arg(long, value_name = "REF")]
        from: Option<String>,
    },
    /// List them (without the branches failed runs keep, run/..., unless --all)
    #[command(alias = "list")]
    Ls {
        /// Also the branches failed runs keep for inspection (run/<id>)
        #[arg(long)]
        all: bool,
    },
    /// Delete one
    #[command(alias = "delete")]
    Rm { name: String },
    /// Protect a branch: it changes only by `lh merge` (admins)
    Protect {
        name: String,
        /// Checks every merge into it must pass (`lh check add`); replaces any it had
        #[arg(long = "require-checks", value_name = "CHECK", num_args = 1..)]
        require_checks: Vec<String>,
    },
    /// Unprotect a branch (admins)
    Unprotect { name: String },
}

#[derive(Debug, Args)]
pub struct CheckoutArgs {
    /// The branch to make active
    pub branch: String,
    /// Create the branch first
    #[arg(short = 'b')]
    pub create: bool,
    /// With -b: the ref to start from [default: the active branch]
    #[arg(long, value_name = "REF", requires = "create")]
    pub from: Option<String>,
}

#[derive(Debug, Args)]
pub struct LogArgs {
    /// The ref [default: the active branch]
    #[arg(value_name = "REF")]
    pub reference: Option<String>,
    /// How many commits
    #[arg(long, short = 'n', default_value_t = 20)]
    pub limit: usize,
    /// Only the commits where this table changed
    #[arg(long, value_name = "NAME")]
    pub table: Option<String>,
    /// One line per commit: its short id and the first line of its message
    #[arg(long)]
    pub oneline: bool,
    /// One line per commit, with the commits each merge brought in drawn beside the
    /// branch's own (as `git log --graph --oneline`)
    #[arg(long, conflicts_with = "table")]
    pub graph: bool,
}

#[derive(Debug, Args)]
pub struct LineageArgs {
    /// A table (namespace.table) or one of its columns (namespace.table.column)
    #[arg(value_name = "TABLE[.COLUMN]")]
    pub name: String,
    /// The branch whose runs are read [default: the active branch]
    #[arg(long = "ref", value_name = "BRANCH")]
    pub reference: Option<String>,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("how").required(true).args(["check", "expectation"])))]
pub struct BisectArgs {
    /// The table whose history is searched
    #[arg(value_name = "TABLE")]
    pub table: String,
    /// A ref (or @commit) where the check passes
    #[arg(long, value_name = "REF")]
    pub good: String,
    /// A ref where it fails; the search runs over its first-parent history back to
    /// --good [default: the active branch]
    #[arg(long, value_name = "REF")]
    pub bad: Option<String>,
    /// SQL returning one row and one column: true where the table is good
    /// (e.g. 'SELECT count(*) = 0 FROM sales.orders WHERE amount < 0')
    #[arg(long, value_name = "SQL")]
    pub check: Option<String>,
    /// A project's expectation as the check, `FILE:FUNCTION` (the file in a project's
    /// folder, e.g. pipeline/expectations.py:orders_are_positive): it runs at each step
    /// on the tables as they are at that commit, recorded as a run of --bad's branch
    #[arg(long, value_name = "FILE:FUNCTION")]
    pub expectation: Option<String>,
    /// With --expectation: a parameter value of the project, KEY=VALUE (repeatable)
    #[arg(
        long = "param",
        short = 'p',
        value_name = "KEY=VALUE",
        requires = "expectation"
    )]
    pub params: Vec<String>,
}

#[derive(Debug, Args)]
pub struct InitArgs {
    /// The project's folder (made if missing; it must hold no lh_project.yml yet)
    #[arg(value_name = "DIR", default_value = ".")]
    pub dir: std::path::PathBuf,
    /// The namespace its tables go to [default: the folder's name]
    #[arg(long)]
    pub namespace: Option<String>,
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// A ref; or `A...B`: what B changed since it left A (from their merge base), as
    /// git's three dots, without what A changed meanwhile
    #[arg(value_name = "REF_A")]
    pub from: String,
    /// The other ref (none with `A...B`)
    #[arg(value_name = "REF_B")]
    pub to: Option<String>,
    /// Show the rows of one table that differ: counts, then rows (changed, added, removed)
    #[arg(long, value_name = "NAME")]
    pub table: Option<String>,
    /// With --table: the columns that identify a row (comma-separated); an added and a
    /// removed row with the same key are one changed row. Without it, rows are only
    /// added or removed
    #[arg(long, value_name = "COLUMNS", requires = "table")]
    pub key: Option<String>,
    /// With --table: print at most this many rows (the counts are always whole)
    #[arg(long, value_name = "N", default_value_t = 20, requires = "table")]
    pub limit: u64,
    /// With --table: compare every row, not only the data files the two versions do not
    /// share (slower; the same answer)
    #[arg(long, requires = "table")]
    pub full: bool,
    /// Without --table: list the tables that changed, without counting their rows
    #[arg(long, conflicts_with = "table")]
    pub no_rows: bool,
}

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// What to merge: a branch, a tag or a commit
    #[arg(value_name = "FROM")]
    pub from: String,
    /// The branch to merge into
    #[arg(long, value_name = "BRANCH")]
    pub into: String,
    /// The merge commit's message
    #[arg(long, short = 'm', value_name = "TEXT")]
    pub message: Option<String>,
    /// Say what the merge would do (tables, conflicts, permissions, the columns it
    /// would break for other projects) without merging; required checks do not run
    #[arg(long)]
    pub dry_run: bool,
    /// A table changed on both sides: take the source's version (source-wins) or keep
    /// the target's (dest-wins), instead of refusing the merge as a conflict
    #[arg(long, value_enum, value_name = "STRATEGY")]
    pub strategy: Option<MergeStrategyArg>,
    /// This table, if changed on both sides, is taken from the source (repeatable)
    #[arg(long = "take-source", value_name = "TABLE")]
    pub take_source: Vec<String>,
    /// This table, if changed on both sides, keeps the target's version (repeatable)
    #[arg(long = "take-dest", value_name = "TABLE")]
    pub take_dest: Vec<String>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum MergeStrategyArg {
    SourceWins,
    DestWins,
}

#[derive(Debug, Subcommand)]
pub enum TableCommand {
    /// List the tables at a ref
    #[command(alias = "list")]
    Ls {
        #[arg(long = "ref", value_name = "REF")]
        reference: Option<String>,
        /// Only tables under this namespace
        #[arg(long, value_name = "NAMESPACE")]
        namespace: Option<String>,
    },
    /// Show a table's schema, snapshots, rows, files and size
    Show {
        name: String,
        #[arg(long = "ref", value_name = "REF")]
        reference: Option<String>,
    },
    /// Create a table from, append to, or replace a table with CSV, Parquet or JSON files
    Import(ImportArgs),
    /// Rewrite a table's small files (and apply its delete files) into fewer, as one
    /// commit that changes no row
    Compact {
        name: String,
        #[arg(long = "ref", value_name = "BRANCH")]
        reference: Option<String>,
        /// The size files are written at; files under 3/4 of it are rewritten, per
        /// partition, when there are two or more
        #[arg(long, value_name = "SIZE", default_value = "256MB", value_parser = lh_api::units::parse_size)]
        target_file_size: u64,
    },
    /// Remove from a table's metadata the snapshots older than a cutoff that no commit
    /// the server's retention keeps reads (`lh gc` then frees their files), as one
    /// commit that changes no row
    Expire {
        name: String,
        #[arg(long = "ref", value_name = "BRANCH")]
        reference: Option<String>,
        /// Only snapshots at least this old go (`0s`: any not kept)
        #[arg(long, value_name = "DURATION", default_value = "30d", value_parser = parse_age)]
        older_than: u64,
    },
    /// Remove a table from a branch
    #[command(alias = "delete")]
    Rm {
        name: String,
        #[arg(long = "ref", value_name = "BRANCH")]
        reference: Option<String>,
    },
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The table, as namespace.table
    pub name: String,
    /// The files (.csv, .parquet, .json/.ndjson; several at once)
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// The branch to write [default: the active branch]
    #[arg(long = "ref", value_name = "BRANCH")]
    pub reference: Option<String>,
    /// create a table; append rows; replace the table's rows (and schema); or
    /// overwrite-partitions: replace only the partitions the files' rows fall in.
    /// An append that finds the table moved by other appends, or by writes to other
    /// partitions, is rebased onto them (and says so); writes that overlap it conflict
    #[arg(long, value_enum, default_value_t = ImportModeArg::Create)]
    pub mode: ImportModeArg,
    /// The files' format [default: from their extension]
    #[arg(long, value_enum)]
    pub format: Option<FormatArg>,
    /// The Iceberg partition spec of a table created (or repartitioned by --mode
    /// replace): comma-separated fields among a column (identity), year(c), month(c),
    /// day(c), hour(c), bucket(N, c), truncate(W, c). Example: 'day(ts), bucket(16, id)'
    #[arg(long, value_name = "SPEC")]
    pub partition_by: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ImportModeArg {
    Create,
    Append,
    Replace,
    OverwritePartitions,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    Csv,
    Parquet,
    Json,
}

#[derive(Debug, Args)]
pub struct QueryArgs {
    /// The SQL (one read-only statement). Without it (and without --file), the SQL is
    /// read from standard input, one result per statement; on a terminal, an
    /// interactive shell opens (as `lh shell`)
    #[arg(value_name = "SQL", conflicts_with = "file")]
    pub sql: Option<String>,
    /// Read the SQL from a file
    #[arg(long, short = 'f', value_name = "FILE.sql")]
    pub file: Option<PathBuf>,
    /// The ref to query [default: the active branch]
    #[arg(long = "ref", value_name = "REF")]
    pub reference: Option<String>,
    /// Return at most this many rows
    #[arg(long, value_name = "N")]
    pub max_rows: Option<u64>,
    /// Write the result to a Parquet file instead of printing it
    #[arg(long, value_name = "FILE.parquet")]
    pub out: Option<PathBuf>,
    /// Stop the query after this many seconds (at most the server's limit)
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<u64>,
}

#[derive(Debug, Args)]
pub struct ConsoleArgs {
    /// Print the address instead of starting a browser
    #[arg(long)]
    pub no_open: bool,
}

#[derive(Debug, Args)]
pub struct ShellArgs {
    /// The ref to query [default: the active branch]; `.ref NAME` switches
    #[arg(long = "ref", value_name = "REF")]
    pub reference: Option<String>,
    /// Return at most this many rows per statement; `.maxrows N` changes it
    #[arg(long, value_name = "N")]
    pub max_rows: Option<u64>,
    /// Stop each query after this many seconds (at most the server's limit)
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<u64>,
}
