//! The in-memory catalog of each commit, where the views of its tables live
//! (`ATTACH ':memory:' AS c_<id>` in the query engine's shared database), and the
//! connections (sessions) that work in one. A commit never changes, so neither do its
//! views: each is made once, by the first statement that reads its table, and kept for
//! the commit's next statements. Which views to make, and their SQL, is
//! `QueryEngine::views`' (`query/mod.rs`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use duckdb::Connection;

use crate::error::{Error, Result};

/// A view to make: its quoted name (`"namespace"."table"`) and the statements that make
/// it (its schema, then the view).
#[derive(Debug, Clone)]
pub struct View {
    pub name: String,
    pub sql: String,
    /// What it shows: the lh table it is a view of (or, for a view of lh's own making,
    /// what it is).
    pub of: String,
}

/// The in-memory catalog of one commit's views. The views of a commit never change, so
/// each is made once, by the first statement that names its table. Detached when
/// dropped: when it has left the cache and no query uses it any more.
pub(crate) struct CommitCatalog {
    name: String,
    database: Arc<Mutex<Connection>>,
    /// The views that exist, by their quoted name (`"namespace"."table"`) in lowercase
    /// (DuckDB's names ignore case), with what each shows: `"FIN".t` and `fin.t`, or
    /// `"a.b".t` and the nested `a.b.t`, have one view name and are two tables.
    views: Mutex<HashMap<String, String>>,
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

    /// Whether the view `name` of `of` exists.
    pub(super) fn has_view(&self, name: &str, of: &str) -> bool {
        self.views
            .lock()
            .is_ok_and(|v| v.get(&name.to_lowercase()).is_some_and(|o| o == of))
    }

    /// Whether the view `name` exists and shows something other than `of`: a statement
    /// that reads `of` then needs a catalog of its own.
    pub(super) fn holds_other(&self, name: &str, of: &str) -> bool {
        self.views
            .lock()
            .is_ok_and(|v| v.get(&name.to_lowercase()).is_some_and(|o| o != of))
    }

    /// Makes the `views` that do not exist yet, on `conn` (whose current catalog is
    /// this one).
    fn ensure_views(&self, conn: &Connection, views: &[View]) -> Result<()> {
        let mut made = self
            .views
            .lock()
            .map_err(|_| Error::internal("a commit catalog is poisoned"))?;
        for view in views {
            match made.get(&view.name.to_lowercase()) {
                Some(of) if *of == view.of => continue,
                Some(of) => {
                    return Err(Error::bad_request(
                        crate::error::Code::SqlError,
                        format!(
                            "'{of}' and '{}' have one name in SQL ({}): DuckDB's names \
                             ignore case, and a dotted schema is read as a nested namespace \
                             first",
                            view.of, view.name
                        ),
                    )
                    .with_hint("read them in separate queries"));
                }
                None => {}
            }
            conn.execute_batch(&view.sql)
                .map_err(|e| Error::internal(format!("cannot expose a table to DuckDB: {e}")))?;
            made.insert(view.name.to_lowercase(), view.of.clone());
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
