//! The cost of authentication and authorization per request, for BENCHMARKS.md: the same
//! requests to a server with tokens (the default), once with the admin's token (a
//! built-in role) and once with a token of a role of its own (read from the database and
//! matched against each request's ref), and to one started with `--no-auth`, interleaved
//! in one run over keep-alive connections: a small query (`select 1` through
//! `POST /api/v1/query`) and a branch create (`POST /api/v1/refs`). Each request's wall
//! time, p50 and p95.
//!
//!     auth-bench [--requests 2000]
//!
//! Needs the `lh` binary next to this one.

use std::time::Instant;

use anyhow::{Result, bail};
use lh_bench::{Samples, Server, arg, lh_bin, ms};
use serde_json::json;

struct Target {
    name: &'static str,
    url: String,
    token: Option<String>,
    agent: ureq::Agent,
    query: Samples,
    branch: Samples,
}

impl Target {
    fn new(name: &'static str, server: &Server, token: Option<String>) -> Target {
        Target {
            name,
            url: server.url.clone(),
            token,
            agent: ureq::Agent::config_builder().build().into(),
            query: Samples::new(),
            branch: Samples::new(),
        }
    }

    fn post(&self, path: &str, body: serde_json::Value) -> Result<()> {
        let mut req = self.agent.post(&format!("{}{path}", self.url));
        if let Some(t) = &self.token {
            req = req.header("Authorization", &format!("Bearer {t}"));
        }
        let mut res = req.send_json(body)?;
        let status = res.status();
        // The whole answer is read: the connection goes back to the pool.
        let _ = res.body_mut().read_to_vec()?;
        if !status.is_success() {
            bail!("POST {path}: {status}");
        }
        Ok(())
    }
}

/// Runs `lh` against `server` and returns its stdout.
fn lh_out(server: &Server, lh: &std::path::Path, args: &[&str]) -> Result<String> {
    let out = server.lh(lh, args).output()?;
    if !out.status.success() {
        bail!("lh {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() -> Result<()> {
    let n = arg("--requests", 2000)?;
    let lh = lh_bin()?;
    let auth = Server::start(&lh, None, &[])?;
    let open = Server::start(&lh, None, &["--no-auth"])?;
    // A role of its own: read from the database at each request, its grants matched
    // against the ref (and, for queries, the namespaces) of each request.
    lh_out(
        &auth,
        &lh,
        &[
            "role",
            "set",
            "bench",
            "--grant",
            "read on *",
            "--grant",
            "write on s*",
        ],
    )?;
    let scoped = lh_out(
        &auth,
        &lh,
        &["token", "create", "--user", "bencher", "--role", "bench"],
    )?;
    let mut targets = [
        Target::new("tokens", &auth, Some(auth.token()?)),
        Target::new("scoped", &auth, Some(scoped)),
        Target::new("open", &open, None),
    ];
    let query = json!({"sql": "select 1 as n"});
    // Warm-up: connections, DuckDB, the catalog's pages.
    for t in &targets {
        for i in 0..50 {
            t.post("/api/v1/query", query.clone())?;
            t.post(
                "/api/v1/refs",
                json!({"name": format!("s-warm-{}-{i}", t.name), "kind": "branch"}),
            )?;
        }
    }
    for i in 0..n {
        for t in targets.iter_mut() {
            let start = Instant::now();
            t.post("/api/v1/query", query.clone())?;
            t.query.push(start.elapsed());
            let start = Instant::now();
            t.post(
                "/api/v1/refs",
                json!({"name": format!("s-{}-{i}", t.name), "kind": "branch"}),
            )?;
            t.branch.push(start.elapsed());
        }
    }
    println!(
        "auth-bench: {n} requests of each kind as each caller, interleaved, {}\n",
        chrono::Utc::now().format("%Y-%m-%d")
    );
    println!(
        "| request | admin token p50 | scoped role p50 | --no-auth p50 | added p50 (admin / scoped) | admin p95 | scoped p95 | --no-auth p95 |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let [a, b, c] = &targets;
    for (name, x, y, z) in [
        ("query `select 1`", &a.query, &b.query, &c.query),
        ("branch create", &a.branch, &b.branch, &c.branch),
    ] {
        let p50 = |s: &Samples| s.percentile(50.0).as_secs_f64() * 1000.0;
        println!(
            "| {name} | {} ms | {} ms | {} ms | {:+.3} / {:+.3} ms | {} ms | {} ms | {} ms |",
            ms(x.percentile(50.0)),
            ms(y.percentile(50.0)),
            ms(z.percentile(50.0)),
            p50(x) - p50(z),
            p50(y) - p50(z),
            ms(x.percentile(95.0)),
            ms(y.percentile(95.0)),
            ms(z.percentile(95.0)),
        );
    }
    Ok(())
}
