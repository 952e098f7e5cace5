//! The in-memory catalog of each commit, where the views of its tables live
//! (`ATTACH ':memory:' AS c_<id>` in the query engine's shared database), and the
//! connections (sessions) that work in one. A commit never changes, so neither do its
//! views: each is made once, by the first statement that reads its table, and kept for
//! the commit's next statements. Which views to make, and their SQL, is
//! `QueryEngine::views`' (`query/mod.rs`).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use duckdb::Connection;

use crate::error::{Error, Result};

/// A view to make: its quoted name (`"namespace"."table"`) and the statements that make
/// it (its schema, then the view).
#[derive(Debug, Clone)]
pub struct View {
    pub name: String,
    pub sql: String,
}

/// The in-memory catalog of one commit's views. The views of a commit never change, so
/// each is made once, by the first statement that names its table. Detached when
/// dropped: when it has left the cache and no query uses it any more.
pub(crate) struct CommitCatalog {
    name: String,
    database: Arc<Mutex<Connection>>,
    /// The views that exist, by their quoted name (`"namespace"."table"`).
    views: Mutex<HashSet<String>>,
}

impl CommitCatalog {
    pub(super) fn attach(database: &Arc<Mutex<Connection>>) -> Result<CommitCatalog> {
        let name = format!("c_{}", uuid::Uuid::new_v4().simple());
        database
            .lock()
            .map_err(|_| Error::internal("the query database is poisoned"))?
            .execute_batch(&format!("ATTACH ':memory:' AS {name};"))?;
        Ok(CommitCatalog {
            name,
            database: database.clone(),
            views: Default::default(),
        })
    }

    pub(super) fn has_view(&self, name: &str) -> bool {
        self.views.lock().is_ok_and(|v| v.contains(name))
    }

    /// Makes the `views` that do not exist yet, on `conn` (whose current catalog is
    /// this one).
    fn ensure_views(&self, conn: &Connection, views: &[View]) -> Result<()> {
        let mut made = self
            .views
            .lock()
            .map_err(|_| Error::internal("a commit catalog is poisoned"))?;
        for view in views {
            if made.contains(&view.name) {
                continue;
            }
            conn.execute_batch(&view.sql)
                .map_err(|e| Error::internal(format!("cannot expose a table to DuckDB: {e}")))?;
            made.insert(view.name.clone());
        }
        Ok(())
    }
}

impl Drop for CommitCatalog {
    fn drop(&mut self) {
        if let Ok(conn) = self.database.lock() {
            let _ = conn.execute_batch(&format!("DETACH DATABASE IF EXISTS {};", self.name));
        }
    }
}

/// A connection to the shared database, in a commit's catalog (kept alive by the
/// session).
pub(super) struct Session {
    pub(super) conn: Connection,
    commit: Arc<CommitCatalog>,
    /// How other threads reach its statement (progress, interrupt): closed before the
    /// connection is.
    pub(super) watch: Arc<lh_core::duck::Watch>,
}

impl Drop for Session {
    // Runs before the fields are dropped: the watch is closed before the connection.
    fn drop(&mut self) {
        self.watch.close();
    }
}

impl Session {
    pub(super) fn in_commit(
        database: &Mutex<Connection>,
        commit: Arc<CommitCatalog>,
    ) -> Result<Session> {
        let conn = connect(database)?;
        conn.execute_batch(&format!("USE {};", commit.name))?;
        lh_core::duck::track_progress(&conn)?;
        let watch = Arc::new(lh_core::duck::Watch::new(conn.interrupt_handle()));
        Ok(Session {
            conn,
            commit,
            watch,
        })
    }

    /// Makes the `views` that the commit's catalog still lacks.
    pub(super) fn ensure_views(&self, views: &[View]) -> Result<()> {
        self.commit.ensure_views(&self.conn, views)
    }
}

pub(super) fn connect(database: &Mutex<Connection>) -> Result<Connection> {
    Ok(database
        .lock()
        .map_err(|_| Error::internal("the query database is poisoned"))?
        .try_clone()?)
}
