//! A writer process killed with SIGKILL at random moments: on reopening, the catalog
//! is consistent (every object reachable from a ref reads and checks) and main's history
//! holds every commit the writer saw acknowledged.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use rand::Rng;

use crate::both_backends;
use crate::common::TestDb;

both_backends!(killed_writers_lose_nothing_acknowledged);

async fn killed_writers_lose_nothing_acknowledged(db: &TestDb) {
    let exe = env!("CARGO_BIN_EXE_lh-catalog-tool");
    let mut acked = Vec::new();
    for round in 0..8 {
        let mut child = Command::new(exe)
            .args(["crash-writer", &db.url])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the writer");
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        // Wait for the writer to be under way, then kill it at a random moment.
        let first = rx.recv_timeout(Duration::from_secs(60));
        if first.is_err() {
            let _ = child.kill();
            let out = child.wait_with_output().expect("wait");
            panic!(
                "round {round}: the writer acknowledged nothing ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let delay = rand::rng().random_range(5..300);
        tokio::time::sleep(Duration::from_millis(delay)).await;
        child.kill().expect("SIGKILL");
        let status = child.wait().expect("wait");
        assert!(!status.success());
        reader.join().unwrap();
        let mut lines: Vec<String> = first.into_iter().collect();
        lines.extend(rx.try_iter());
        let before = acked.len();
        for line in lines {
            // A line cut by the kill has no full hash: it was not acknowledged.
            if let Some(id) = line.strip_prefix("ack ")
                && id.len() == 64
            {
                acked.push(id.to_string());
            }
        }
        assert!(acked.len() > before, "round {round}: no progress");

        let cat = db.open().await;
        let report = cat
            .check_integrity()
            .await
            .expect("consistent after SIGKILL");
        assert!(report.commits > acked.len());
        for id in &acked {
            cat.resolve(&format!("main@{id}"))
                .await
                .unwrap_or_else(|e| panic!("round {round}: acknowledged commit {id} lost: {e}"));
        }
    }
    assert!(acked.len() >= 8);
}
