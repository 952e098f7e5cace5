//! The backends every catalog test runs against: a fresh SQLite file, and a fresh
//! PostgreSQL database on the server named by `LH_TEST_POSTGRES_URL` (which `make test`
//! and `.ci/run` start). A missing server fails the test; it never skips.

use std::sync::atomic::{AtomicU64, Ordering};

use lh_catalog::Catalog;

/// The admin URL of the test PostgreSQL server.
pub fn postgres_admin_url() -> String {
    std::env::var("LH_TEST_POSTGRES_URL").unwrap_or_else(|_| {
        panic!(
            "LH_TEST_POSTGRES_URL is not set: the PostgreSQL half of the catalog suite needs a \
             server (for example postgres://postgres:postgres@127.0.0.1:5432/postgres); \
             `make test` starts one"
        )
    })
}

/// A fresh, empty catalog database that is removed when dropped.
pub struct TestDb {
    pub url: String,
    _dir: Option<tempfile::TempDir>,
    pg_name: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

impl TestDb {
    pub async fn new(backend: Backend) -> TestDb {
        match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("temp dir");
                let url = format!("sqlite:{}", dir.path().join("catalog.db").display());
                TestDb {
                    url,
                    _dir: Some(dir),
                    pg_name: None,
                }
            }
            Backend::Postgres => {
                let admin = postgres_admin_url();
                let name = format!(
                    "lh_test_{}_{}_{}",
                    std::process::id(),
                    COUNTER.fetch_add(1, Ordering::Relaxed),
                    rand::random::<u32>()
                );
                let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&admin)
                    .await
                    .unwrap_or_else(|e| panic!("cannot reach the test PostgreSQL at {admin}: {e}"));
                sqlx::query(&format!("CREATE DATABASE {name}"))
                    .execute(&mut conn)
                    .await
                    .expect("create test database");
                let url = match admin.rfind('/') {
                    Some(i) if !admin[..i].ends_with('/') => format!("{}/{name}", &admin[..i]),
                    _ => format!("{admin}/{name}"),
                };
                TestDb {
                    url,
                    _dir: None,
                    pg_name: Some(name),
                }
            }
        }
    }

    pub async fn open(&self) -> Catalog {
        Catalog::open(&self.url).await.expect("open catalog")
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Some(name) = self.pg_name.take() {
            let admin = postgres_admin_url();
            // Drop runs inside a runtime: do the async clean-up on a thread of its own.
            let _ = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                rt.block_on(async {
                    if let Ok(mut conn) =
                        <sqlx::PgConnection as sqlx::Connection>::connect(&admin).await
                    {
                        let _ =
                            sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                                .execute(&mut conn)
                                .await;
                    }
                });
            })
            .join();
        }
    }
}

/// Runs an async test body against both backends, as two tests.
#[macro_export]
macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn sqlite() {
                let db = $crate::common::TestDb::new($crate::common::Backend::Sqlite).await;
                super::$name(&db).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn postgres() {
                let db = $crate::common::TestDb::new($crate::common::Backend::Postgres).await;
                super::$name(&db).await
            }
        }
    )*};
}

/// A table pointer whose fields all derive from `n`.
pub fn ptr(n: u64) -> lh_catalog::TablePointer {
    lh_catalog::TablePointer {
        metadata_location: format!("file:///warehouse/t/metadata/{n:05}.metadata.json"),
        table_uuid: format!("00000000-0000-0000-0000-{n:012}"),
        snapshot_id: Some(n as i64),
    }
}

pub fn put(table: &str, expected: Option<u64>, new: u64) -> lh_catalog::TableOp {
    lh_catalog::TableOp::Put {
        table: table.into(),
        expected: expected.map(ptr),
        pointer: ptr(new),
    }
}

pub fn del(table: &str, expected: u64) -> lh_catalog::TableOp {
    lh_catalog::TableOp::Delete {
        table: table.into(),
        expected: ptr(expected),
    }
}

pub fn meta(msg: &str) -> lh_catalog::CommitMeta {
    lh_catalog::CommitMeta::new("tester", msg)
}
