//! The catalog benchmark of BENCHMARKS.md: latency of branch create, one-table commit,
//! merge of 10 changed tables, read of one table, a log page of 50 and a diff of 10
//! tables, then sustained commits per second from 1 and from 8 writers; on SQLite and
//! PostgreSQL, with 1,000 and 100,000 tables and a long history.
//!
//!     catalog-bench [--backends sqlite,postgres] [--tables 1000,100000]
//!                   [--history 100000] [--samples 200]
//!
//! PostgreSQL is reached through LH_TEST_POSTGRES_URL (an admin URL); each run gets a
//! fresh database. SQLite files go to a temporary folder.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use lh_bench::{Samples, ms};
use lh_catalog::{Catalog, CommitMeta, LogQuery, MergeOptions, TableOp, TablePointer};
use rand::Rng;

struct Args {
    backends: Vec<String>,
    tables: Vec<usize>,
    history: usize,
    samples: usize,
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        backends: vec!["sqlite".into(), "postgres".into()],
        tables: vec![1000, 100_000],
        history: 100_000,
        samples: 200,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--backends" => a.backends = value.split(',').map(String::from).collect(),
            "--tables" => {
                a.tables = value
                    .split(',')
                    .map(|s| s.parse())
                    .collect::<Result<_, _>>()?
            }
            "--history" => a.history = value.parse()?,
            "--samples" => a.samples = value.parse()?,
            _ => bail!("unknown flag {flag}"),
        }
    }
    Ok(a)
}

fn pointer(table: &str, version: u64) -> TablePointer {
    TablePointer {
        metadata_location: format!(
            "file:///home/user/.lh/warehouse/{}/metadata/{version:05}-3f2b9c1e-8d4a-4e7b-9f10-{version:012}.metadata.json",
            table.replace('.', "/")
        ),
        table_uuid: format!("3f2b9c1e-8d4a-4e7b-9f10-{:012}", table.len()),
        snapshot_id: Some(version as i64 * 7919),
    }
}

fn table_name(i: usize) -> String {
    format!("ns{:03}.table_{i:06}", i % 100)
}

fn meta(msg: &str) -> CommitMeta {
    CommitMeta::new("bench", msg)
}

/// Where a benchmark catalog lives, and how to remove it.
struct Db {
    url: String,
    _dir: Option<tempfile::TempDir>,
    pg: Option<(String, String)>,
}

async fn fresh_db(backend: &str, tag: &str) -> Result<Db> {
    match backend {
        "sqlite" => {
            let dir = tempfile::tempdir()?;
            let url = format!("sqlite:{}", dir.path().join("catalog.db").display());
            Ok(Db {
                url,
                _dir: Some(dir),
                pg: None,
            })
        }
        "postgres" => {
            let admin = std::env::var("LH_TEST_POSTGRES_URL").context(
                "LH_TEST_POSTGRES_URL must name a PostgreSQL server for the postgres runs",
            )?;
            let name = format!("lh_bench_{tag}_{}", std::process::id());
            let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&admin).await?;
            sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .execute(&mut conn)
                .await?;
            sqlx::query(&format!("CREATE DATABASE {name}"))
                .execute(&mut conn)
                .await?;
            let base = &admin[..admin.rfind('/').context("admin URL has no database")?];
            Ok(Db {
                url: format!("{base}/{name}"),
                _dir: None,
                pg: Some((admin, name)),
            })
        }
        other => bail!("unknown backend {other}"),
    }
}

async fn drop_db(db: Db) -> Result<()> {
    if let Some((admin, name)) = &db.pg {
        let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(admin).await?;
        sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .execute(&mut conn)
            .await?;
    }
    Ok(())
}

/// The catalog's state as the benchmark knows it: each table's current version on main.
struct State {
    versions: HashMap<String, u64>,
    next: u64,
}

impl State {
    fn bump(&mut self, table: &str) -> TableOp {
        let old = self.versions.get(table).copied();
        self.next += 1;
        let new = self.next;
        self.versions.insert(table.to_string(), new);
        TableOp::Put {
            table: table.into(),
            expected: old.map(|v| pointer(table, v)),
            pointer: pointer(table, new),
        }
    }
}

fn row(op: &str, s: &Samples) -> String {
    format!(
        "| {op} | {} | {} | {} |",
        ms(s.percentile(50.0)),
        ms(s.percentile(99.0)),
        s.len()
    )
}

async fn run(backend: &str, tables: usize, args: &Args) -> Result<Vec<String>> {
    let db = fresh_db(backend, &format!("{tables}")).await?;
    let cat = Arc::new(Catalog::open(&db.url).await?);
    let mut st = State {
        versions: HashMap::new(),
        next: 0,
    };
    let mut rng = rand::rng();

    // Set-up: the tables, in commits of up to 10,000, then the history.
    let t0 = Instant::now();
    let names: Vec<String> = (0..tables).map(table_name).collect();
    for chunk in names.chunks(10_000) {
        let ops = chunk.iter().map(|t| st.bump(t)).collect();
        cat.commit("main", ops, meta("load")).await?;
    }
    let load = t0.elapsed();
    let t1 = Instant::now();
    for i in 0..args.history {
        let t = &names[rng.random_range(0..tables)];
        let op = st.bump(t);
        cat.commit("main", vec![op], meta("history")).await?;
        if i > 0 && i % 20_000 == 0 {
            eprintln!(
                "  {backend}/{tables}: {i} commits of history ({:.0}/s)",
                i as f64 / t1.elapsed().as_secs_f64()
            );
        }
    }
    let history = t1.elapsed();
    eprintln!(
        "  {backend}/{tables}: loaded {tables} tables in {:.1}s, {} commits of history in {:.1}s",
        load.as_secs_f64(),
        args.history,
        history.as_secs_f64()
    );

    let n = args.samples;
    let mut out = vec![];

    let mut s = Samples::new();
    for i in 0..n {
        s.time(cat.create_branch(&format!("b{i}"), "main")).await?;
    }
    out.push(row("branch create", &s));

    let mut s = Samples::new();
    for _ in 0..n {
        let op = st.bump(&names[rng.random_range(0..tables)]);
        s.time(cat.commit("main", vec![op], meta("one"))).await?;
    }
    out.push(row("one-table commit", &s));

    // Merge of 10 tables changed on a branch, while main moved on another table:
    // a three-way merge commit, not a fast-forward.
    let mut s = Samples::new();
    for i in 0..n.min(100) {
        let b = format!("m{i}");
        cat.create_branch(&b, "main").await?;
        let mut branch_state = State {
            versions: st.versions.clone(),
            next: st.next + 1_000_000,
        };
        let picked: Vec<String> = (0..10)
            .map(|k| names[(i * 37 + k * 1009) % tables].clone())
            .collect();
        let ops = picked.iter().map(|t| branch_state.bump(t)).collect();
        cat.commit(&b, ops, meta("ten")).await?;
        let other = names[(i * 37 + 5003) % tables].clone();
        if !picked.contains(&other) {
            let op = st.bump(&other);
            cat.commit("main", vec![op], meta("main moves")).await?;
        }
        let outcome = s
            .time(cat.merge(&b, "main", MergeOptions::default()))
            .await?;
        anyhow::ensure!(
            outcome.tables.len() == 10,
            "merge took {} tables",
            outcome.tables.len()
        );
        for t in &picked {
            st.versions.insert(t.clone(), branch_state.versions[t]);
        }
        st.next = branch_state.next;
    }
    out.push(row("merge of 10 changed tables", &s));

    let mut s = Samples::new();
    for _ in 0..n {
        let t = &names[rng.random_range(0..tables)];
        s.time(cat.get_table("main", t)).await?;
    }
    out.push(row("read one table at a ref", &s));

    let mut s = Samples::new();
    let q = LogQuery {
        limit: 50,
        ..Default::default()
    };
    for _ in 0..n {
        let page = s.time(cat.log("main", &q)).await?;
        anyhow::ensure!(page.commits.len() == 50);
    }
    out.push(row("log page of 50", &s));

    cat.create_branch("diff-a", "main").await?;
    cat.create_branch("diff-b", "main").await?;
    let mut diff_state = State {
        versions: st.versions.clone(),
        next: st.next + 2_000_000,
    };
    let ops = (0..10)
        .map(|k| diff_state.bump(&names[(k * 7919) % tables]))
        .collect();
    cat.commit("diff-b", ops, meta("ten")).await?;
    let mut s = Samples::new();
    for _ in 0..n {
        let d = s.time(cat.diff("diff-a", "diff-b")).await?;
        anyhow::ensure!(d.len() == 10);
    }
    out.push(row("diff of branches 10 tables apart", &s));

    // Sustained commits: one writer, then eight writers on separate tables.
    let count = 2000;
    let start = Instant::now();
    for _ in 0..count {
        let op = st.bump(&names[rng.random_range(0..tables)]);
        cat.commit("main", vec![op], meta("sustained")).await?;
    }
    let one = count as f64 / start.elapsed().as_secs_f64();
    let per_writer = 500;
    let start = Instant::now();
    let mut tasks = vec![];
    for w in 0..8usize {
        let cat = cat.clone();
        let mut mine = State {
            versions: HashMap::new(),
            next: 0,
        };
        let my_tables: Vec<String> = (0..50).map(|k| format!("writers.w{w}_t{k}")).collect();
        tasks.push(tokio::spawn(async move {
            for i in 0..per_writer {
                let op = mine.bump(&my_tables[i % my_tables.len()]);
                cat.commit("main", vec![op], meta("writer")).await?;
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let eight = (8 * per_writer) as f64 / start.elapsed().as_secs_f64();
    out.push(format!(
        "| sustained commits/s, 1 writer | {one:.0} | | {count} |"
    ));
    out.push(format!(
        "| sustained commits/s, 8 writers | {eight:.0} | | {} |",
        8 * per_writer
    ));
    drop(cat);
    drop_db(db).await?;
    Ok(out)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() -> Result<()> {
    let args = parse_args()?;
    println!(
        "catalog-bench: history {} commits, {} samples per operation, {}",
        args.history,
        args.samples,
        chrono::Utc::now().format("%Y-%m-%d")
    );
    for backend in &args.backends {
        for &tables in &args.tables {
            let started = Instant::now();
            let rows = run(backend, tables, &args).await?;
            println!();
            println!(
                "### {backend}, {tables} tables, {} commits of history",
                args.history
            );
            println!();
            println!("| operation | p50 ms | p99 ms | samples |");
            println!("|---|---:|---:|---:|");
            for r in rows {
                println!("{r}");
            }
            eprintln!(
                "  {backend}/{tables}: done in {:.0}s",
                started.elapsed().as_secs_f64()
            );
        }
    }
    Ok(())
}
