//! The cost of authentication and authorization per request, for BENCHMARKS.md: the same
//! requests to a server with tokens (the default) and to one started with `--no-auth`,
//! interleaved in one run over keep-alive connections: a small query (`select 1` through
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
    server: Server,
    token: Option<String>,
    agent: ureq::Agent,
    query: Samples,
    branch: Samples,
}

impl Target {
    fn post(&self, path: &str, body: serde_json::Value) -> Result<()> {
        let mut req = self.agent.post(&format!("{}{path}", self.server.url));
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

fn main() -> Result<()> {
    let n = arg("--requests", 2000)?;
    let lh = lh_bin()?;
    let agent = || -> ureq::Agent { ureq::Agent::config_builder().build().into() };
    let auth = Server::start(&lh, None, &[])?;
    let token = Some(auth.token()?);
    let mut targets = [
        Target {
            server: auth,
            token,
            agent: agent(),
            query: Samples::new(),
            branch: Samples::new(),
        },
        Target {
            server: Server::start(&lh, None, &["--no-auth"])?,
            token: None,
            agent: agent(),
            query: Samples::new(),
            branch: Samples::new(),
        },
    ];
    let query = json!({"sql": "select 1 as n"});
    // Warm-up: connections, DuckDB, the catalog's pages.
    for t in &targets {
        for i in 0..50 {
            t.post("/api/v1/query", query.clone())?;
            t.post(
                "/api/v1/refs",
                json!({"name": format!("warm{i}"), "kind": "branch"}),
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
                json!({"name": format!("b{i}"), "kind": "branch"}),
            )?;
            t.branch.push(start.elapsed());
        }
    }
    println!(
        "auth-bench: {n} requests of each kind to each server, interleaved, {}\n",
        chrono::Utc::now().format("%Y-%m-%d")
    );
    println!("| request | tokens p50 | --no-auth p50 | added p50 | tokens p95 | --no-auth p95 |");
    println!("|---|---:|---:|---:|---:|---:|");
    let [a, b] = &targets;
    for (name, x, y) in [
        ("query `select 1`", &a.query, &b.query),
        ("branch create", &a.branch, &b.branch),
    ] {
        let added = x.percentile(50.0).as_secs_f64() - y.percentile(50.0).as_secs_f64();
        println!(
            "| {name} | {} ms | {} ms | {:+.3} ms | {} ms | {} ms |",
            ms(x.percentile(50.0)),
            ms(y.percentile(50.0)),
            added * 1000.0,
            ms(x.percentile(95.0)),
            ms(y.percentile(95.0)),
        );
    }
    Ok(())
}
