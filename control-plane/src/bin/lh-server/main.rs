//! `lh-server`: the control plane in the foreground. Users start it as `lh server`: the
//! `lh` CLI runs this executable, which lives beside it, so that only the server
//! process loads DuckDB (whose shared library costs every process that links it about
//! 9 ms of symbol binding at start; see BENCHMARKS.md).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use lh_api::env_vars::{self, lh_home};
use lh_control_plane::runs::limits::{parse_cpus, parse_duration, parse_size};
use lh_control_plane::tables::retention::Retention;
use lh_control_plane::{RuntimeChoice, ServerConfig};

mod heap;

// mimalloc for the server's allocations, and (through `heap`'s malloc, counted) for
// DuckDB's, whose shared library binds to the executable's: glibc's allocator was a
// third of the server's time in a backfill's profile (BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Run the lh server (the embedded default needs no flag).
#[derive(Debug, Parser)]
#[command(name = "lh-server", bin_name = "lh server", version)]
pub struct ServerArgs {
    /// Where the server keeps its catalog, warehouse and uploads
    #[arg(long, env = env_vars::LH_DATA_DIR, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// The address to listen on [default: 127.0.0.1:7878]
    #[arg(long, env = env_vars::LH_BIND, value_name = "ADDR:PORT")]
    pub bind: Option<SocketAddr>,
    /// The catalog database: sqlite:PATH or postgres://USER:PASSWORD@HOST/DB
    /// [default: sqlite:DATA_DIR/catalog.db]
    #[arg(long, env = env_vars::LH_CATALOG_URL, value_name = "URL")]
    pub catalog: Option<String>,
    /// Where table files go: a folder, a file:// URL, or an S3-compatible bucket
    /// (s3://BUCKET/PREFIX; credentials, region and endpoint from the standard AWS
    /// variables and ~/.aws files) [default: DATA_DIR/warehouse]
    #[arg(long, env = env_vars::LH_WAREHOUSE, value_name = "URL")]
    pub warehouse: Option<String>,
    /// Address the S3 bucket path-style (ENDPOINT/BUCKET/KEY), as MinIO, Garage and
    /// other stores on one host need
    #[arg(long)]
    pub s3_path_style: bool,
    /// The most an S3 warehouse's read cache of data files keeps on this server's disk
    /// (in DATA_DIR/s3/cache); the least recently used go first
    #[arg(long, default_value = "20g", value_name = "SIZE", value_parser = parse_size)]
    pub cache_size: u64,
    /// The longest one request to the S3 warehouse may take (it is retried 3 times
    /// within as long again)
    #[arg(long, default_value = "30s", value_name = "DURATION", value_parser = parse_duration)]
    pub s3_timeout: Duration,
    /// Give Iceberg REST clients no S3 credentials, even when they ask
    /// (X-Iceberg-Access-Delegation: vended-credentials): they bring their own
    #[arg(long)]
    pub no_vend_credentials: bool,
    /// The least role (reader, writer, maintainer, admin) vended credentials go to.
    /// They are the server's own S3 key, with which anyone can change or delete
    /// anything in the warehouse past every permission: only to admins by default
    #[arg(long, default_value = "admin", value_name = "ROLE", value_parser = parse_role)]
    pub vend_credentials_to: lh_control_plane::auth::Role,
    /// The longest a query may run, in seconds
    #[arg(long, default_value_t = 300, value_name = "SECONDS")]
    pub query_timeout: u64,
    /// The largest query result, in bytes of Arrow data
    #[arg(long, default_value_t = 1 << 30, value_name = "BYTES")]
    pub max_result_bytes: u64,
    /// How many queries run at once (others wait)
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub max_concurrent_queries: usize,
    /// How many writes (imports, SQL models, pipeline outputs) run at once; the others
    /// wait. Writes use at most this many times --duckdb-memory
    #[arg(long, default_value_t = 2, value_name = "N")]
    pub max_concurrent_writes: usize,
    /// Compact a table (`lh table compact`) after an import or a run left it with more
    /// than N small data files in a partition; off when absent
    #[arg(long, value_name = "N")]
    pub auto_compact_files: Option<usize>,
    /// How long commits of the branches matching PATTERN stay readable, PATTERN=DURATION
    /// (`main=180d`, `dev/*=14d`, `*=0s` keeps only the heads, `forever`); repeatable,
    /// the first match wins, before the defaults main=90d, run/*=7d, *=30d. `lh table
    /// expire` and `lh gc` free what no kept commit reads
    #[arg(long = "retain", value_name = "PATTERN=DURATION", value_parser = parse_retain)]
    pub retain: Vec<String>,
    /// The largest file `lh table import` may upload (larger ones are refused, 413)
    #[arg(long, default_value = "64g", value_name = "SIZE", value_parser = parse_size)]
    pub max_upload: u64,
    /// DuckDB's memory limit per query or import
    #[arg(long, default_value = "4GB", value_name = "SIZE")]
    pub duckdb_memory: String,
    /// The memory all query answers the server holds at once may take together (rows
    /// read out of DuckDB, their Arrow or JSON encoding not yet sent); an answer that
    /// would pass it is refused (503) until others are sent
    #[arg(long, default_value = "2g", value_name = "SIZE", value_parser = parse_size)]
    pub answer_memory: u64,
    /// The most DuckDB (every query's and write's work, inside its memory limit or
    /// not) and the server's other C code may hold in memory together; past it, the
    /// statement asking for more fails with `out_of_memory` and the server goes on
    /// [default: --duckdb-memory x (1 + --max-concurrent-writes) + --answer-memory +
    /// 512m, at most 80% of the machine's memory]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub native_memory: Option<u64>,
    /// Where Python environments are built and kept [default: DATA_DIR/envs]
    #[arg(long, env = env_vars::LH_ENV_CACHE, value_name = "DIR")]
    pub env_cache: Option<PathBuf>,
    /// The most the Python environment cache keeps; the environments used least recently
    /// go first (none used within the last hour)
    #[arg(long, default_value = "20g", value_name = "SIZE", value_parser = parse_size)]
    pub env_cache_size: u64,
    /// The memory one Python environment's build may take, all its processes together
    /// (tmpfs included; needs a cgroup the server may make: root); each process also
    /// stops at an 8 GiB address space
    #[arg(long, default_value = "8g", value_name = "SIZE", value_parser = parse_size)]
    pub build_memory: u64,
    /// The disk one Python environment's build may write (the environment, and the
    /// source builds' folders), measured while it runs
    #[arg(long, default_value = "32g", value_name = "SIZE", value_parser = parse_size)]
    pub build_disk: u64,
    /// The first of 65,536 host uids (and gids) that sandboxes run as when the server runs
    /// as root: package builds as this one, each process-runtime worker as one of the
    /// others (otherwise they run as the server's own user)
    #[arg(long, default_value_t = lh_runner::HostUser::DEFAULT_ID, value_name = "ID", value_parser = clap::value_parser!(u32).range(1..=i64::from(u32::MAX - lh_runner::HostUser::IDS)))]
    pub sandbox_uid: u32,
    /// Pipeline nodes running at once [default: the number of cores]
    #[arg(long, value_name = "N")]
    pub run_parallelism: Option<usize>,
    /// Run Python functions without the bubblewrap sandbox (only where it cannot run)
    #[arg(long)]
    pub no_sandbox: bool,
    /// Where Python functions run: docker (warm containers), process (sandboxed local
    /// processes), or auto (docker when an engine and the runtime image are there)
    #[arg(long, value_enum, default_value_t = RuntimeArg::Auto)]
    pub runtime: RuntimeArg,
    /// At most this many warm workers (containers) at once, on each Docker engine
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub max_workers: usize,
    /// A Docker engine functions run on: unix:///path (this machine),
    /// tcp://host:port with --docker-tls, or ssh://[user@]host (the system's ssh client
    /// and its configuration) (an engine that shares no disk with the server:
    /// environments and code reach it over its API, a call's data over its container's
    /// channel). Give it again for several engines: a call goes to one with a warm
    /// worker for it, else the least busy; an engine that stops answering leaves
    /// placement until it answers, and its lost calls run once more on another
    /// [default: DOCKER_HOST, else the local socket]
    #[arg(long, value_name = "URL")]
    pub docker_host: Vec<String>,
    /// A folder with ca.pem, cert.pem and key.pem: TLS to the tcp:// engines, with a
    /// client certificate (as the docker CLI's DOCKER_CERT_PATH)
    #[arg(long, value_name = "DIR")]
    pub docker_tls: Option<std::path::PathBuf>,
    /// Stop a worker idle for this long, in seconds
    #[arg(long, default_value_t = 600, value_name = "SECONDS")]
    pub worker_idle: u64,
    /// The most memory a pipeline function may ask for [default: half of this machine's]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_function_memory: Option<u64>,
    /// The most cores a pipeline function may ask for [default: all of this machine's]
    #[arg(long, value_name = "N", value_parser = parse_cpus)]
    pub max_function_cpus: Option<u32>,
    /// The most a pipeline function may write into its folder (its output, its inputs and
    /// any other file) before it is stopped [default: 10g]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_function_disk: Option<u64>,
    /// The longest a pipeline function may ask to run [default: 6h]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub max_function_timeout: Option<Duration>,
    /// Answer requests without a token, every one as an admin (only on a loopback
    /// address: the server refuses to start otherwise)
    #[arg(long)]
    pub no_auth: bool,
    /// Serve this host name too (the Host header; repeatable). A loopback server
    /// answers only to localhost, 127.0.0.1 and [::1] otherwise; a server on another
    /// address answers to any name unless some are given
    #[arg(long = "allowed-host", value_name = "NAME")]
    pub allowed_hosts: Vec<String>,
    /// Let web pages of this origin (scheme://host[:port]) call the server, with CORS
    /// headers (repeatable); any other page's requests are refused
    #[arg(long = "allowed-origin", value_name = "ORIGIN")]
    pub allowed_origins: Vec<String>,
    /// The largest JSON request body (uploads have --max-upload)
    #[arg(long, default_value = "16m", value_name = "SIZE", value_parser = parse_size)]
    pub max_request: u64,
    /// Make a new admin token at start and write it to the local profile
    /// ($LH_HOME/config.yaml), even when tokens exist
    #[arg(long)]
    pub new_admin_token: bool,
    /// The file holding the key (64 hex characters) that encrypts pipeline secrets and
    /// webhook secrets at rest; made at first start when missing. LH_SECRET_KEY
    /// overrides it [default: <data-dir>/secret.key]
    #[arg(long, value_name = "FILE")]
    pub secret_key_file: Option<PathBuf>,
    /// Accept JWTs of this OpenID Connect issuer as tokens (its `iss`, exactly)
    #[arg(long, value_name = "URL", requires_all = ["oidc_audience", "oidc_jwks"])]
    pub oidc_issuer: Option<String>,
    /// The audience the issuer's tokens must name (this server's client id)
    #[arg(long, value_name = "AUD")]
    pub oidc_audience: Option<String>,
    /// The issuer's signing keys: its jwks_uri (https, or http on loopback) or a file
    #[arg(long, value_name = "URL|FILE")]
    pub oidc_jwks: Option<String>,
    /// The claim naming the user
    #[arg(long, default_value = "sub", value_name = "CLAIM")]
    pub oidc_user_claim: String,
    /// The claim listing the user's groups
    #[arg(long, default_value = "groups", value_name = "CLAIM")]
    pub oidc_groups_claim: String,
    /// A group's role: GROUP=ROLE (repeatable); a user gets the roles of all their groups
    #[arg(long = "oidc-role", value_name = "GROUP=ROLE", value_parser = parse_group_role)]
    pub oidc_roles: Vec<(String, String)>,
    /// The role of a user in no mapped group (without it, such a user is refused)
    #[arg(long, value_name = "ROLE")]
    pub oidc_default_role: Option<String>,
    /// How long the branch of a failed run is kept, in seconds
    #[arg(long, default_value_t = 7 * 24 * 3600, value_name = "SECONDS")]
    pub run_branch_ttl: u64,
    /// How long a run stays this server's without a heartbeat: when the server stops,
    /// another server on the same catalog takes its runs over after this (e.g. 15s)
    #[arg(long, value_name = "DURATION", value_parser = parse_lease)]
    pub run_lease: Option<Duration>,
}

fn parse_lease(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < Duration::from_millis(500) || d > Duration::from_secs(3600) {
        return Err(format!("'{s}': a run lease is between 0.5 s and 1 h"));
    }
    Ok(d)
}

fn parse_group_role(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .filter(|(g, r)| !g.is_empty() && !r.is_empty())
        .map(|(g, r)| (g.to_string(), r.to_string()))
        .ok_or_else(|| format!("'{s}' is not GROUP=ROLE"))
}

/// One `--retain` rule, checked.
fn parse_retain(s: &str) -> Result<String, String> {
    Retention::parse(&[s.to_string()])?;
    Ok(s.to_string())
}

fn parse_role(s: &str) -> Result<lh_control_plane::auth::Role, String> {
    lh_control_plane::auth::Role::parse(s).map_err(|e| e.message)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RuntimeArg {
    Auto,
    Docker,
    Process,
}

fn main() -> ExitCode {
    let args = match ServerArgs::try_parse() {
        Ok(args) => args,
        Err(e) => {
            // --help and --version print to stdout and succeed; the rest is a usage error
            // (exit 2, as `lh` reports one).
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match native_memory(&args) {
        Ok(bytes) => lh_core::heap::set_limit(bytes),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    }
    let filter = tracing_subscriber::EnvFilter::try_from_env(env_vars::LH_LOG)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,sqlx=warn,iceberg=warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .try_init();
    // Parse trees of DuckDB's SQL are walked recursively, up to `query::sql::MAX_TREE_DEPTH`
    // levels: 16 MiB of stack per thread (address space; only what is used is
    // touched) where Rust's default of 2 MiB would overflow on the deepest SQL DuckDB
    // parses.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(16 << 20)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let out = runtime.block_on(lh_control_plane::serve(
        config(args),
        lh_control_plane::shutdown_signal(),
    ));
    // Stopped serving: what still runs on the blocking threads (a DuckDB statement its
    // interrupt has not reached) is not waited for past a few seconds.
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    match out {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// What `--native-memory` is, given or by default: room for every DuckDB database's
/// memory limit (the queries' one and each concurrent write's), the answers held, and
/// 512 MiB for the rest, within 80% of the machine's memory.
fn native_memory(args: &ServerArgs) -> Result<u64, String> {
    if let Some(n) = args.native_memory {
        return Ok(n);
    }
    let duck = parse_size(&args.duckdb_memory).map_err(|_| {
        format!(
            "--duckdb-memory '{}' is not a size such as 512MB or 4GB",
            args.duckdb_memory
        )
    })?;
    let databases = 1 + args.max_concurrent_writes.max(1) as u64;
    let wanted = duck
        .saturating_mul(databases)
        .saturating_add(args.answer_memory)
        .saturating_add(512 << 20);
    Ok(match machine_memory() {
        Some(total) => wanted.min(total / 5 * 4),
        None => wanted,
    })
}

/// The machine's memory (`MemTotal`), or the server's cgroup's limit when lower.
fn machine_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let total = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse::<u64>().ok())?
        * 1024;
    let cgroup = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok());
    Some(cgroup.map_or(total, |c| c.min(total)))
}

fn config(args: ServerArgs) -> ServerConfig {
    let mut config = ServerConfig::new(args.data_dir.unwrap_or_else(lh_home));
    if let Some(b) = args.bind {
        config.bind = b;
    }
    config.catalog_url = args.catalog;
    config.warehouse = args.warehouse;
    config.s3_path_style = args.s3_path_style;
    config.cache_bytes = args.cache_size;
    config.s3_timeout = args.s3_timeout;
    config.vend_credentials = !args.no_vend_credentials;
    config.vend_credentials_to = args.vend_credentials_to;
    config.auth = !args.no_auth;
    config.allowed_hosts = args.allowed_hosts;
    config.allowed_origins = args.allowed_origins;
    config.max_request_bytes = usize::try_from(args.max_request).unwrap_or(usize::MAX);
    config.new_admin_token = args.new_admin_token;
    config.secret_key_file = args.secret_key_file;
    if let (Some(issuer), Some(audience), Some(jwks)) =
        (args.oidc_issuer, args.oidc_audience, args.oidc_jwks)
    {
        use lh_control_plane::auth::oidc::{JwksSource, OidcConfig};
        let source = if jwks.starts_with("http://") || jwks.starts_with("https://") {
            JwksSource::Url(jwks)
        } else {
            JwksSource::File(PathBuf::from(jwks))
        };
        let mut c = OidcConfig::new(issuer, audience, source);
        c.user_claim = args.oidc_user_claim;
        c.groups_claim = args.oidc_groups_claim;
        c.group_roles = args.oidc_roles;
        c.default_role = args.oidc_default_role;
        config.oidc = Some(c);
    }
    config.query_timeout = Duration::from_secs(args.query_timeout.max(1));
    config.max_result_bytes = args.max_result_bytes;
    config.max_concurrent_queries = args.max_concurrent_queries.max(1);
    config.duckdb_memory = args.duckdb_memory;
    config.answer_memory = args.answer_memory;
    config.max_concurrent_writes = args.max_concurrent_writes.max(1);
    config.auto_compact_files = args.auto_compact_files.map(|n| n.max(2));
    config.retention = Retention::parse(&args.retain).unwrap_or_default();
    config.max_upload_bytes = args.max_upload;
    config.env_cache_bytes = args.env_cache_size;
    config.build_bounds = lh_runner::BuildBounds {
        memory_bytes: args.build_memory,
        disk_bytes: args.build_disk,
    };
    config.sandbox_user = lh_runner::HostUser::for_sandboxes(args.sandbox_uid);
    config.env_cache = args.env_cache;
    if let Some(n) = args.run_parallelism {
        config.run_parallelism = n.max(1);
    }
    config.sandbox = !args.no_sandbox;
    config.run_branch_ttl = Duration::from_secs(args.run_branch_ttl);
    if let Some(l) = args.run_lease {
        config.run_lease = l;
    }
    config.max_workers = args.max_workers.max(1);
    let mut seen = std::collections::HashSet::new();
    let mut hosts = args.docker_host;
    // DOCKER_HOST names the engine when no --docker-host does (the local socket's
    // client reads only a unix:// one itself; DOCKER_CERT_PATH then gives the TLS
    // folder).
    if hosts.is_empty()
        && let Ok(h) = std::env::var("DOCKER_HOST")
        && !h.is_empty()
        && !h.starts_with("unix://")
    {
        hosts.push(h);
    }
    for url in hosts {
        if !seen.insert(url.clone()) {
            tracing::warn!("--docker-host {url} is given twice: it is one engine");
            continue;
        }
        config.docker.push(lh_runner::docker::EngineAddr {
            url: Some(url),
            tls: args
                .docker_tls
                .clone()
                .or_else(|| std::env::var_os("DOCKER_CERT_PATH").map(std::path::PathBuf::from)),
        });
    }
    config.worker_idle = Duration::from_secs(args.worker_idle.max(1));
    config.runtime = match args.runtime {
        RuntimeArg::Auto => RuntimeChoice::Auto,
        RuntimeArg::Docker => RuntimeChoice::Docker,
        RuntimeArg::Process => RuntimeChoice::Process,
    };
    if let Some(m) = args.max_function_memory {
        config.function_ceilings.memory_bytes = m;
    }
    if let Some(c) = args.max_function_cpus {
        config.function_ceilings.cpus_milli = c;
    }
    if let Some(d) = args.max_function_disk {
        config.function_ceilings.disk_bytes = d;
    }
    if let Some(t) = args.max_function_timeout {
        config.function_ceilings.timeout = t;
    }
    config
}
