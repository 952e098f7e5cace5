//! Concurrent writers on one branch: on separate tables all succeed; on one table each
//! round has exactly one winner. No successful commit is ever lost from the log.

use std::collections::HashSet;
use std::sync::Arc;

use lh_catalog::{Catalog, ErrorKind, LogQuery};
use tokio::sync::Barrier;

use crate::both_backends;
use crate::common::{TestDb, meta, put};

const WRITERS: u64 = 16;

both_backends!(
    separate_tables_all_succeed,
    one_table_has_one_winner_per_round
);

async fn all_commit_ids(cat: &Catalog) -> Vec<lh_catalog::CommitId> {
    let mut out = vec![];
    let mut token = None;
    loop {
        let page = cat
            .log(
                "main",
                &LogQuery {
                    page_token: token,
                    limit: 1000,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        out.extend(page.commits.iter().map(|c| c.id));
        token = page.next_page_token;
        if token.is_none() {
            return out;
        }
    }
}

async fn separate_tables_all_succeed(db: &TestDb) {
    const ROUNDS: u64 = 15;
    let cat = Arc::new(db.open().await);
    // Pre-populate so that the tree has some depth.
    let seed: Vec<_> = (0..300)
        .map(|i| put(&format!("seed.t{i}"), None, i))
        .collect();
    cat.commit("main", seed, meta("seed")).await.unwrap();
    let mut tasks = vec![];
    for w in 0..WRITERS {
        let cat = cat.clone();
        tasks.push(tokio::spawn(async move {
            let table = format!("w.t{w}");
            let mut ids = vec![];
            for r in 0..ROUNDS {
                let value = 1000 * (w + 1) + r;
                let expected = if r == 0 { None } else { Some(value - 1) };
                let c = cat
                    .commit(
                        "main",
                        vec![put(&table, expected, value)],
                        meta(&format!("w{w} r{r}")),
                    )
                    .await
                    .expect("writers on separate tables never conflict");
                ids.push(c.id);
            }
            ids
        }));
    }
    let mut committed = vec![];
    for t in tasks {
        committed.extend(t.await.unwrap());
    }
    assert_eq!(committed.len() as u64, WRITERS * ROUNDS);
    let log: HashSet<_> = all_commit_ids(&cat).await.into_iter().collect();
    assert_eq!(
        log.len() as u64,
        WRITERS * ROUNDS + 2,
        "every commit, the seed and the root"
    );
    for id in &committed {
        assert!(log.contains(id), "commit {id} lost from the log");
    }
    // Every writer's last value is there: no update was lost.
    for w in 0..WRITERS {
        let p = cat.get_table("main", &format!("w.t{w}")).await.unwrap();
        assert_eq!(p.snapshot_id, Some((1000 * (w + 1) + ROUNDS - 1) as i64));
    }
    assert_eq!(
        cat.list_tables("main", None).await.unwrap().len(),
        300 + WRITERS as usize
    );
}

async fn one_table_has_one_winner_per_round(db: &TestDb) {
    const ROUNDS: u64 = 10;
    let cat = Arc::new(db.open().await);
    cat.commit("main", vec![put("hot.t", None, 0)], meta("create"))
        .await
        .unwrap();
    let barrier = Arc::new(Barrier::new(WRITERS as usize));
    let mut tasks = vec![];
    for w in 0..WRITERS {
        let (cat, barrier) = (cat.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            let mut results = vec![];
            for r in 0..ROUNDS {
                // Everyone reads the same state, then everyone tries to replace it.
                let current = cat.get_table("main", "hot.t").await.unwrap();
                barrier.wait().await;
                let value = 1_000_000 * (r + 1) + w;
                let op = lh_catalog::TableOp::Put {
                    table: "hot.t".into(),
                    expected: Some(current),
                    pointer: crate::common::ptr(value),
                };
                let result = cat
                    .commit("main", vec![op], meta(&format!("w{w} r{r}")))
                    .await;
                results.push(match result {
                    Ok(c) => Some(c.id),
                    Err(e) => {
                        assert_eq!(e.kind(), ErrorKind::Conflict, "{e}");
                        assert_eq!(e.conflicts()[0].table, "hot.t");
                        None
                    }
                });
                barrier.wait().await;
            }
            results
        }));
    }
    let mut per_round = vec![vec![]; ROUNDS as usize];
    for t in tasks {
        for (r, res) in t.await.unwrap().into_iter().enumerate() {
            if let Some(id) = res {
                per_round[r].push(id);
            }
        }
    }
    let log: HashSet<_> = all_commit_ids(&cat).await.into_iter().collect();
    for (r, winners) in per_round.iter().enumerate() {
        assert_eq!(
            winners.len(),
            1,
            "round {r}: exactly one winner, got {}",
            winners.len()
        );
        assert!(log.contains(&winners[0]));
    }
    assert_eq!(log.len() as u64, ROUNDS + 2);
}
