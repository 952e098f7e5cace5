//! Maintenance and test driver for the catalog, outside the server.
//!
//!     lh-catalog-tool fsck URL            read every object reachable from a ref, check it
//!     lh-catalog-tool crash-writer URL    commit in a loop forever, printing each
//!                                         acknowledged commit (the crash test kills it)

use std::collections::HashMap;
use std::io::Write;

use lh_catalog::{Catalog, CommitMeta, ErrorKind, MergeOptions, TableOp, TablePointer};

fn usage() -> ! {
    eprintln!("usage: lh-catalog-tool (fsck|crash-writer) CATALOG_URL");
    std::process::exit(2)
}

fn pointer(v: u64) -> TablePointer {
    TablePointer {
        metadata_location: format!("file:///warehouse/crash/metadata/{v:08}.metadata.json"),
        table_uuid: format!("crash-{v}"),
        snapshot_id: Some(v as i64),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 {
        usage();
    }
    let result = match args[1].as_str() {
        "fsck" => fsck(&args[2]).await,
        "crash-writer" => crash_writer(&args[2]).await,
        _ => usage(),
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

async fn fsck(url: &str) -> lh_catalog::Result<()> {
    let cat = Catalog::open(url).await?;
    let r = cat.check_integrity().await?;
    println!(
        "ok: {} refs, {} commits, {} tree nodes",
        r.refs, r.commits, r.nodes
    );
    Ok(())
}

/// The `crash.*` tables on main, by their pointers' snapshot ids.
async fn main_tables(cat: &Catalog) -> lh_catalog::Result<HashMap<String, u64>> {
    Ok(cat
        .list_tables("main", Some("crash"))
        .await?
        .into_iter()
        .map(|e| (e.name, e.pointer.snapshot_id.unwrap_or(0) as u64))
        .collect())
}

/// Commits forever: plain commits to `crash.t*` on main, and every tenth round a side
/// branch with its own commit merged back with a merge commit. Prints `ack ID` after
/// each operation returns, so that the test knows what was acknowledged.
async fn crash_writer(url: &str) -> lh_catalog::Result<()> {
    let cat = Catalog::open(url).await?;
    let mut tables = main_tables(&cat).await?;
    let mut v = tables.values().copied().max().unwrap_or(0) + 1;
    let stdout = std::io::stdout();
    let mut conflicts = 0;
    loop {
        let name = format!("crash.t{}", v % 20);
        let op = TableOp::Put {
            table: name.clone(),
            expected: tables.get(&name).map(|&x| pointer(x)),
            pointer: pointer(v),
        };
        let c = match cat
            .commit("main", vec![op], CommitMeta::new("crash", format!("v{v}")))
            .await
        {
            Ok(c) => c,
            // The killed predecessor's last transaction can still commit after this
            // writer read main: its COMMIT was in the socket when it died. The catalog
            // refuses the stale write; read main again, as any client would.
            Err(e) if e.kind() == ErrorKind::Conflict && conflicts < 10 => {
                conflicts += 1;
                tables = main_tables(&cat).await?;
                v = tables.values().copied().max().unwrap_or(0) + 1;
                continue;
            }
            Err(e) => return Err(e),
        };
        tables.insert(name, v);
        writeln!(stdout.lock(), "ack {}", c.id).expect("stdout");
        v += 1;
        if v % 10 == 0 {
            let side = format!("side-{v}");
            cat.create_branch(&side, "main").await?;
            let sname = format!("crash.side{}", v % 5);
            let op = TableOp::Put {
                table: sname.clone(),
                expected: tables.get(&sname).map(|&x| pointer(x)),
                pointer: pointer(v),
            };
            cat.commit(&side, vec![op], CommitMeta::new("crash", "side"))
                .await?;
            tables.insert(sname, v);
            v += 1;
            let name = format!("crash.t{}", v % 20);
            let op = TableOp::Put {
                table: name.clone(),
                expected: tables.get(&name).map(|&x| pointer(x)),
                pointer: pointer(v),
            };
            cat.commit("main", vec![op], CommitMeta::new("crash", "main"))
                .await?;
            tables.insert(name, v);
            v += 1;
            let out = cat.merge(&side, "main", MergeOptions::default()).await?;
            writeln!(stdout.lock(), "ack {}", out.head).expect("stdout");
            cat.delete_branch(&side, None).await?;
        }
    }
}
