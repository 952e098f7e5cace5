//! Starting the server: the embedded default needs no flag (a SQLite catalog and a
//! warehouse folder under the data directory, on 127.0.0.1), and any part can be
//! pointed elsewhere (`--catalog postgres://...`, `--warehouse ...`).

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use lh_catalog::Catalog;

use crate::app::app;
use crate::duck::DuckLimits;
use crate::merges::checks::ExpectationRunner;
use crate::namespaces::Namespaces;
use crate::query::{QueryEngine, QueryLimits};
use crate::runs::code::CodeStore;
use crate::runs::store::RunStore;
use crate::runs::{RunConfig, RunParts, RunService};
use crate::state::AppState;
use crate::tables::Tables;
use crate::tables::write::ImportContext;
use crate::warehouse::{Warehouse, WarehouseOptions};
use lh_runner::docker::{DockerConfig, DockerRuntime};
use lh_runner::process::{ProcessConfig, ProcessRuntime};
use lh_runner::{EnvCache, Runtime, Unavailable};

/// Everything `lh server` can be told.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub data_dir: PathBuf,
    pub bind: SocketAddr,
    /// `sqlite:PATH` or `postgres://...`; default `sqlite:<data_dir>/catalog.db`.
    pub catalog_url: Option<String>,
    /// A folder or `file://` URL; default `<data_dir>/warehouse`.
    pub warehouse: Option<String>,
    pub query_timeout: Duration,
    pub max_result_bytes: u64,
    pub max_concurrent_queries: usize,
    /// DuckDB threads per query or import.
    pub duckdb_threads: usize,
    /// DuckDB memory limit per query or import, e.g. `4GB`.
    pub duckdb_memory: String,
    /// The bytes every query answer the server holds at once may take together
    /// (`query/memory.rs`).
    pub answer_memory: u64,
    /// Pipeline nodes running at once.
    pub run_parallelism: usize,
    /// How long a failed run's branch is kept.
    pub run_branch_ttl: Duration,
    /// How long a run stays this server's without a heartbeat (then another server
    /// sharing the catalog takes it over).
    pub run_lease: Duration,
    /// Sandbox Python functions with bubblewrap.
    pub sandbox: bool,
    /// The Python that parses projects (it imports nothing of the user's).
    pub planner_python: PathBuf,
    /// Stop a warm worker idle for this long.
    pub worker_idle: Duration,
    /// Where Python environments are built; default `<data_dir>/envs`.
    pub env_cache: Option<PathBuf>,
    /// Where Python functions run.
    pub runtime: RuntimeChoice,
    /// At most this many warm workers (containers) at once.
    pub max_workers: usize,
    /// The Docker engines of the Docker runtime (none: `DOCKER_HOST`, else the local
    /// socket); with several, calls are placed among them.
    pub docker: Vec<lh_runner::docker::EngineAddr>,
    /// How many writes (imports, SQL models, pipeline outputs) run at once, each with
    /// `duckdb_memory`; the others wait.
    pub max_concurrent_writes: usize,
    /// Compact a table after an import or a run left more than this many small files in
    /// one of its partitions (off: `None`).
    pub auto_compact_files: Option<usize>,
    /// Which commits stay readable (`lh table expire`, `lh gc`).
    pub retention: crate::tables::retention::Retention,
    /// The largest file an upload (`lh table import`) may stage.
    pub max_upload_bytes: u64,
    /// The most the Python environment cache keeps.
    pub env_cache_bytes: u64,
    /// What one environment's build may take (`--build-memory`, `--build-disk`).
    pub build_bounds: lh_runner::BuildBounds,
    /// The host user sandboxes (builds, process-runtime workers) run as (`--sandbox-uid`;
    /// none: the server's own, when it is not root).
    pub sandbox_user: Option<lh_runner::HostUser>,
    /// What no pipeline function may exceed (memory, CPU share, time).
    pub function_ceilings: crate::runs::limits::Ceilings,
    /// Path-style addressing for an S3 warehouse.
    pub s3_path_style: bool,
    /// The most an S3 warehouse's read cache keeps on disk.
    pub cache_bytes: u64,
    /// The longest one S3 request may take.
    pub s3_timeout: Duration,
    /// Whether the Iceberg REST catalog hands clients the warehouse's S3 credentials
    /// when they ask (`X-Iceberg-Access-Delegation: vended-credentials`).
    pub vend_credentials: bool,
    /// The least role vended credentials go to (they are the server's own key).
    pub vend_credentials_to: crate::auth::Role,
    /// Whether requests need a token; off (`--no-auth`) only on a loopback address.
    pub auth: bool,
    /// Host names served besides the loopback ones (on a loopback bind), or the only
    /// ones served (elsewhere; none: any).
    pub allowed_hosts: Vec<String>,
    /// Origins whose web pages may call the server (CORS).
    pub allowed_origins: Vec<String>,
    /// The largest request body (JSON); uploads have their own limit.
    pub max_request_bytes: usize,
    /// Make a new admin token at start and write it to the local profile, even when
    /// tokens exist (the way back in when the profile lost its token).
    pub new_admin_token: bool,
    /// The key that encrypts secrets at rest; default `<data_dir>/secret.key`, made at
    /// first start (`LH_SECRET_KEY` overrides both).
    pub secret_key_file: Option<PathBuf>,
    /// JWTs of this OpenID Connect issuer are accepted as tokens.
    pub oidc: Option<crate::auth::oidc::OidcConfig>,
}

/// Which runtime runs Python functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeChoice {
    /// Docker when an engine is reachable and has the runtime image, else process.
    Auto,
    Docker,
    Process,
}

impl ServerConfig {
    pub fn new(data_dir: PathBuf) -> Self {
        ServerConfig {
            data_dir,
            bind: SocketAddr::from(([127, 0, 0, 1], lh_api::DEFAULT_PORT)),
            catalog_url: None,
            warehouse: None,
            query_timeout: Duration::from_secs(300),
            max_result_bytes: 1 << 30,
            max_concurrent_queries: 4,
            duckdb_threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            duckdb_memory: "4GB".into(),
            answer_memory: 2 << 30,
            run_parallelism: std::thread::available_parallelism().map_or(2, |n| n.get()),
            run_branch_ttl: Duration::from_secs(7 * 24 * 3600),
            run_lease: Duration::from_secs(15),
            sandbox: true,
            planner_python: PathBuf::from("python3"),
            worker_idle: Duration::from_secs(600),
            env_cache: None,
            runtime: RuntimeChoice::Auto,
            max_workers: 8,
            docker: Default::default(),
            max_concurrent_writes: 2,
            auto_compact_files: None,
            retention: Default::default(),
            max_upload_bytes: 64 << 30,
            env_cache_bytes: 20 << 30,
            build_bounds: lh_runner::BuildBounds::default(),
            sandbox_user: lh_runner::HostUser::for_sandboxes(lh_runner::HostUser::DEFAULT_ID),
            function_ceilings: crate::runs::limits::Ceilings::for_this_machine(),
            s3_path_style: false,
            cache_bytes: 20 << 30,
            s3_timeout: Duration::from_secs(30),
            vend_credentials: true,
            vend_credentials_to: crate::auth::Role::Admin,
            auth: true,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            max_request_bytes: 16 << 20,
            new_admin_token: false,
            secret_key_file: None,
            oidc: None,
        }
    }
}

/// Opens the catalog and the warehouse and builds the application state.
pub async fn state(config: &ServerConfig) -> anyhow::Result<AppState> {
    if !config.auth && !config.bind.ip().is_loopback() {
        anyhow::bail!(
            "--no-auth is only allowed on a loopback address (127.0.0.1 or ::1), not {}: \
             anyone who reaches the server could do anything",
            config.bind
        );
    }
    let new_data_dir = !config.data_dir.exists();
    std::fs::create_dir_all(&config.data_dir).with_context(|| {
        format!(
            "cannot create the data directory {}",
            config.data_dir.display()
        )
    })?;
    // The catalog, the tokens' table and the warehouse are the server's alone: other
    // local users must not read them past the API.
    #[cfg(unix)]
    if new_data_dir {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&config.data_dir, std::fs::Permissions::from_mode(0o700))?;
    }
    let data_dir = config.data_dir.canonicalize()?;
    let catalog_url = config
        .catalog_url
        .clone()
        .unwrap_or_else(|| format!("sqlite:{}", data_dir.join("catalog.db").display()));
    let catalog = Catalog::open(&catalog_url)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let warehouse_loc = config
        .warehouse
        .clone()
        .unwrap_or_else(|| data_dir.join("warehouse").display().to_string());
    let options = WarehouseOptions {
        s3_path_style: config.s3_path_style,
        local_dir: data_dir.join("s3"),
        cache_bytes: config.cache_bytes,
        s3_timeout: config.s3_timeout,
    };
    let warehouse = Warehouse::open_with(&warehouse_loc, &options)
        .await
        .map_err(|e| match &e.hint {
            Some(h) => anyhow::anyhow!("{e}\nhint: {h}"),
            None => anyhow::anyhow!("{e}"),
        })?;
    // The warehouse holds table files only: `lh gc` and every other server sharing it
    // take what is in it for lh's tables.
    if let Some(warehouse_root) = warehouse.local_root()
        && data_dir.starts_with(warehouse_root)
    {
        anyhow::bail!(
            "the warehouse {} contains the data directory {}: give each its own folder \
             (the default warehouse is <data-dir>/warehouse)",
            warehouse_root.display(),
            data_dir.display()
        );
    }
    let spill = data_dir.join("tmp");
    std::fs::create_dir_all(&spill)?;
    let uploads = crate::tables::staging::Staging::new(&warehouse, &data_dir.join("uploads"))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    // Uploads never imported, after a day (a start-up sweep; any server may do it).
    uploads
        .sweep(&warehouse, Duration::from_secs(24 * 3600))
        .await;
    let duck = DuckLimits {
        threads: config.duckdb_threads,
        memory_limit: config.duckdb_memory.clone(),
    };
    let info = lh_api::ServerInfo {
        version: env!("CARGO_PKG_VERSION").to_string(),
        catalog: catalog.describe(),
        warehouse: warehouse.url().to_string(),
        default_branch: lh_catalog::DEFAULT_BRANCH.to_string(),
        query_timeout_ms: config.query_timeout.as_millis() as u64,
        max_result_bytes: config.max_result_bytes,
        runtime: String::new(),
        auth: None,
        storage: warehouse.s3().map(|b| lh_api::StorageInfo {
            bucket: b.settings.bucket.clone(),
            prefix: b.settings.prefix.clone(),
            endpoint: b.settings.endpoint_or_default(),
            region: b.settings.region.clone(),
            path_style: b.settings.path_style,
            credentials_from: b.settings.credentials_from.clone(),
            vends_credentials: config.vend_credentials,
            vend_credentials_to: config.vend_credentials_to.as_str().to_string(),
            cache_bytes: config.cache_bytes,
        }),
    };
    // The server's own tables (runs, namespaces, protected branches) live in the
    // catalog's database.
    let db = crate::db::open(&catalog_url)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let protected = Arc::new(crate::auth::protected::ProtectedBranches::new(db.clone()));
    let tables = Arc::new(Tables::new(
        catalog.clone(),
        warehouse,
        protected.clone(),
        config.retention.clone(),
    ));
    let queries = Arc::new(
        QueryEngine::new(
            tables.clone(),
            QueryLimits {
                timeout: config.query_timeout,
                max_result_bytes: config.max_result_bytes,
                max_concurrent: config.max_concurrent_queries,
                duck: duck.clone(),
                answer_memory: config.answer_memory,
            },
            spill.join("query"),
        )
        .map_err(|e| anyhow::anyhow!("cannot start the query engine: {e}"))?,
    );
    // The spill folders of writes a previous server left (none runs yet).
    let _ = std::fs::remove_dir_all(spill.join("import"));
    let mut import = ImportContext::new(
        uploads.dir.clone(),
        data_dir.join("work").join("invocations"),
        spill.join("import"),
        duck,
        config.max_concurrent_writes,
    );
    import.auto_compact_files = config.auto_compact_files;
    let namespaces = Arc::new(Namespaces::new(db.clone(), catalog.clone()));
    let audit = Arc::new(crate::auth::audit::AuditLog::new(db.clone()));
    let tokens = config
        .auth
        .then(|| Arc::new(crate::auth::tokens::Tokens::new(db.clone())));
    let roles = Arc::new(crate::auth::roles::Roles::new(db.clone()));
    let oidc = match &config.oidc {
        Some(c) => {
            for (_, role) in &c.group_roles {
                if roles
                    .get(role)
                    .await
                    .map_err(|e| anyhow::anyhow!("{e}"))?
                    .is_none()
                {
                    anyhow::bail!(
                        "--oidc-role maps a group to role '{role}', which does not exist"
                    );
                }
            }
            let o = crate::auth::oidc::Oidc::new(c.clone())
                .await
                .map_err(|e| anyhow::anyhow!("OpenID Connect: {}", e.0))?;
            tracing::info!(issuer = %c.issuer, "accepting tokens of an OpenID Connect issuer");
            Some(Arc::new(o))
        }
        None => None,
    };
    let guard = Arc::new(crate::auth::guard::Guard {
        tokens: tokens.clone(),
        roles: roles.clone(),
        oidc,
        allowed_hosts: crate::auth::guard::Guard::hosts_for(
            config.bind.ip(),
            &config.allowed_hosts,
        ),
        allowed_origins: config.allowed_origins.clone(),
        routes: crate::auth::routes::all(),
        max_request_bytes: config.max_request_bytes,
        audit: Some(audit.clone()),
        catalog: Some(catalog.clone()),
    });
    let key = Arc::new(crate::auth::key::ServerKey::load(
        &config
            .secret_key_file
            .clone()
            .unwrap_or_else(|| data_dir.join("secret.key")),
        std::env::var("LH_SECRET_KEY").ok(),
    )?);
    crate::auth::key::agree(&db, &key).await?;
    let secrets = Arc::new(crate::auth::secrets::Secrets::new(db.clone(), key.clone()));
    let http = crate::merges::hooks::client();
    let hooks = Arc::new(crate::merges::hooks::Hooks::new(
        db.clone(),
        key.clone(),
        http.clone(),
    ));
    // The merger's checks run expectations on the run service, which publishes through
    // the merger: made together (RunService::new).
    let merger_of = {
        let (db, key) = (db.clone(), key.clone());
        let (catalog, tables) = (catalog.clone(), tables.clone());
        let (protected, roles) = (protected.clone(), roles.clone());
        move |runs| {
            Arc::new(crate::merges::Merger {
                catalog,
                tables,
                protected,
                roles,
                checks: Arc::new(crate::merges::checks::Checks::new(db, key, http, runs)),
                hooks,
            })
        }
    };
    let runs = runs_service(
        config,
        &data_dir,
        Shared {
            catalog: catalog.clone(),
            tables: tables.clone(),
            queries: queries.clone(),
            import: import.clone(),
            store: RunStore::new(db.clone()),
            secrets: secrets.clone(),
        },
        merger_of,
    )
    .await?;
    let merger = runs.merger.clone();
    // Whole now: runs of stopped servers may be taken over.
    runs.begin();
    // Uploads never used, swept now and then (by every server; any may).
    {
        let (uploads, tables) = (uploads.clone(), tables.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                uploads
                    .sweep(&tables.warehouse, Duration::from_secs(24 * 3600))
                    .await;
            }
        });
    }
    let vending = crate::tables::vending::Vending::new(
        &tables.warehouse,
        config.vend_credentials,
        config.vend_credentials_to,
    );
    let refs = Arc::new(crate::runs::refs::Refs::new(
        runs.clone(),
        protected.clone(),
    ));
    let rest_catalog = Arc::new(crate::tables::rest_catalog::RestCatalog::new(
        tables.clone(),
        namespaces.clone(),
    ));
    Ok(AppState {
        rest_catalog,
        metadata_answers: Default::default(),
        refs,
        secrets,
        merger,
        key,
        catalog,
        tables,
        queries,
        import,
        uploads,
        max_upload_bytes: config.max_upload_bytes,
        runs,
        namespaces,
        info,
        tokens,
        roles,
        protected,
        audit,
        vending,
        guard,
    })
}

/// The services a run service shares with the rest of the server.
struct Shared {
    catalog: Catalog,
    tables: Arc<Tables>,
    queries: Arc<QueryEngine>,
    import: ImportContext,
    store: RunStore,
    secrets: Arc<crate::auth::secrets::Secrets>,
}

async fn runs_service(
    config: &ServerConfig,
    data_dir: &std::path::Path,
    shared: Shared,
    merger_of: impl FnOnce(Arc<dyn ExpectationRunner>) -> Arc<crate::merges::Merger>,
) -> anyhow::Result<Arc<RunService>> {
    let harness = data_dir.join("harness");
    lh_runner::write_harness(&harness)?;
    let code = CodeStore::new(data_dir.join("code")).map_err(|e| anyhow::anyhow!("{e}"))?;
    let work = data_dir.join("work");
    // Leftovers of a previous server (its workers are gone).
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(work.join("invocations"))?;
    // The cgroups of builds and workers that a server killed before it could remove them
    // left behind.
    let swept = lh_runner::sweep_build_groups();
    if swept > 0 {
        tracing::info!(swept, "removed the cgroups stopped servers left");
    }
    let process = || -> Arc<dyn Runtime> {
        match ProcessRuntime::new(ProcessConfig {
            work_root: work.join("workers"),
            sandbox: config.sandbox,
            idle_timeout: config.worker_idle,
            max_idle: 4,
            sandbox_user: config.sandbox_user,
        }) {
            Ok(rt) => rt,
            Err(e) => {
                tracing::warn!("Python functions cannot run: {e}");
                Arc::new(Unavailable(e.to_string()))
            }
        }
    };
    let docker = async {
        let addrs = if config.docker.is_empty() {
            vec![lh_runner::docker::EngineAddr::default()]
        } else {
            config.docker.clone()
        };
        let mut engines = Vec::new();
        for addr in &addrs {
            // This server's containers on this engine (one engine named by two URLs
            // is two owners: neither removes the other's containers).
            let owner =
                blake3::hash(format!("{}\n{}", data_dir.display(), addr.describe()).as_bytes())
                    .to_hex()[..16]
                    .to_string();
            let (client, version) = lh_runner::docker::connect_to(addr).await?;
            let rt = DockerRuntime::new(
                client,
                version,
                DockerConfig {
                    image_prefix: "lh-runtime:".into(),
                    work_root: work.join("containers"),
                    idle_timeout: config.worker_idle,
                    max_containers: config.max_workers.max(1),
                    owner,
                    pids_limit: 256,
                    default_memory: 4 << 30,
                    remote: !addr.is_local(),
                    cache_idle: lh_runner::docker::CACHE_IDLE,
                    sandbox_ids: config.sandbox_user,
                },
            )
            .await?;
            engines.push((addr.describe(), rt));
        }
        Ok::<_, lh_runner::RunnerError>(engines)
    };
    // One engine is its runtime; several are placed among.
    let placed = |engines: Vec<(String, Arc<DockerRuntime>)>| -> Arc<dyn Runtime> {
        match <[_; 1]>::try_from(engines) {
            Ok([(_, rt)]) => rt,
            Err(engines) => lh_runner::engines::Engines::new(
                engines
                    .into_iter()
                    .map(|(name, rt)| (name, rt as Arc<dyn lh_runner::engines::Placeable>))
                    .collect(),
            ),
        }
    };
    // Engines named on the command line are wanted: auto does not fall back from them.
    let choice = match config.runtime {
        RuntimeChoice::Auto if !config.docker.is_empty() => RuntimeChoice::Docker,
        c => c,
    };
    let runtime: Arc<dyn Runtime> = match choice {
        RuntimeChoice::Process => process(),
        RuntimeChoice::Docker => {
            let engines = docker
                .await
                .map_err(|e| anyhow::anyhow!("--runtime docker: {e}"))?;
            if engines.len() > 1 {
                // Each engine keeps its own images: one without the runtime image would
                // fail every call placed on it.
                for (name, rt) in &engines {
                    if !rt.has_image("3.11").await {
                        anyhow::bail!(
                            "the Docker engine at {name} has no runtime image lh-runtime:3.11: load it there (docker save lh-runtime:3.11 | docker --host {name} load)"
                        );
                    }
                }
            }
            placed(engines)
        }
        RuntimeChoice::Auto => match docker.await {
            Ok(engines) if engines[0].1.has_image("3.11").await => placed(engines),
            Ok(engines) => {
                tracing::info!(
                    "Docker is reachable but the runtime image is missing (make images): using the process runtime"
                );
                for (_, rt) in engines {
                    rt.shutdown().await;
                }
                process()
            }
            Err(e) => {
                tracing::info!("using the process runtime: {e}");
                process()
            }
        },
    };
    tracing::info!(runtime = %runtime.describe(), "Python functions run here");
    let envs = EnvCache::new(
        config
            .env_cache
            .clone()
            .unwrap_or_else(|| data_dir.join("envs")),
        None,
        config.sandbox,
    )
    .with_bounds(config.build_bounds)
    .with_user(config.sandbox_user);
    let Shared {
        catalog,
        tables,
        queries,
        import,
        store,
        secrets,
    } = shared;
    let parts = RunParts {
        catalog,
        tables,
        queries,
        import,
        store,
        code,
        envs,
        runtime,
        secrets,
        harness,
        config: RunConfig {
            parallelism: config.run_parallelism.max(1),
            branch_ttl: config.run_branch_ttl,
            lease: config.run_lease,
            planner_python: config.planner_python.clone(),
            work_root: work.join("invocations"),
            ceilings: config.function_ceilings,
            env_cache_bytes: config.env_cache_bytes,
            // Longer than any call may run: an environment in use is never evicted.
            env_keep_recent: config.function_ceilings.timeout
                + (config.worker_idle * 2).max(Duration::from_secs(3600)),
        },
    };
    RunService::new(parts, merger_of)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))
}

/// The name of the lock file that makes a data folder one running server's.
const DATA_DIR_LOCK: &str = "server.lock";

/// Makes the data folder this process's while the returned file is open (an exclusive
/// lock the system drops when the process ends, however it ends), creating it (private
/// to its user) if needed. Once: a second `lh server` on the same `--data-dir` started
/// without a word, and starting and stopping it broke the first one's warm workers.
fn claim_data_dir(dir: &std::path::Path) -> anyhow::Result<std::fs::File> {
    if !dir.exists() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the data directory {}", dir.display()))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        }
    }
    let path = dir.join(DATA_DIR_LOCK);
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let holder = std::fs::read_to_string(&path).unwrap_or_default();
            let holder = holder.trim();
            anyhow::bail!(
                "the data directory {} is in use by another lh server{}: nothing was started\n\
                 hint: stop that server, or give this one another --data-dir",
                dir.display(),
                if holder.is_empty() {
                    String::new()
                } else {
                    format!(" ({holder})")
                }
            );
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(e).with_context(|| format!("cannot lock {}", path.display()));
        }
    }
    use std::io::{Seek, Write};
    file.set_len(0)?;
    file.seek(std::io::SeekFrom::Start(0))?;
    write!(file, "pid {}", std::process::id())?;
    file.flush()?;
    Ok(file)
}

/// Serves until `shutdown` resolves, then finishes the requests in flight.
pub async fn serve(
    config: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    // Before anything is read or written: a data folder is one server's, and a server
    // that cannot listen touches nothing.
    // Held until the process ends, not only until serving stops: work still finishing
    // (a DuckDB statement that does not stop at once) must not meet a new server.
    std::mem::forget(claim_data_dir(&config.data_dir)?);
    let listener = tokio::net::TcpListener::bind(config.bind)
        .await
        .with_context(|| format!("cannot listen on {}", config.bind))?;
    let state = state(&config).await?;
    let addr = listener.local_addr()?;
    let auth = match &state.tokens {
        Some(tokens) => {
            match crate::auth::bootstrap::first_admin(tokens, addr, config.new_admin_token).await? {
                Some(written) => format!("tokens ({written})"),
                None => "tokens".to_string(),
            }
        }
        None => {
            tracing::warn!(
                "--no-auth: every request is an admin, from anyone who can reach {addr} \
                 (every local user, and whatever forwards to it)"
            );
            "off (--no-auth: every request is an admin; loopback only)".to_string()
        }
    };
    tracing::info!(%addr, catalog = %state.info.catalog, warehouse = %state.info.warehouse, "lh server listening");
    eprintln!(
        "lh server {} listening on http://{addr}\n  catalog:   {}\n  warehouse: {}\n  auth:      {auth}",
        state.info.version, state.info.catalog, state.info.warehouse
    );
    let runtime = state.runs.runtime().clone();
    let runs = state.runs.clone();
    crate::listen::serve(
        listener,
        app(state),
        crate::listen::ConnLimits::default(),
        shutdown,
    )
    .await
    .context("server failed")?;
    // Runs in flight go to another server (or to this one's next start), not failed.
    runs.release_all().await;
    runtime.shutdown().await;
    tracing::info!("lh server stopped");
    Ok(())
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
