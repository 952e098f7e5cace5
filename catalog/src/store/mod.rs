//! Where the catalog keeps its objects and refs. A [`Store`] is deliberately dumb:
//! immutable content-addressed objects (tree nodes, commits), mutable refs changed only
//! by compare-and-swap in one atomic batch with the objects they need, and a log of ref
//! changes for time travel. All of the versioning logic lives above it, in `catalog.rs`,
//! so that a backend is a few SQL statements.
//!
//! `interface.rs` is the trait; `sql.rs` is its one implementation, written once for
//! every SQL backend over sqlx; `sqlite.rs` and `postgres.rs` hold only what their
//! [`Dialect`] does differently, each with its own `migrations/` folder. This file only
//! names them.

mod interface;
mod postgres;
mod sql;
mod sqlite;

pub use interface::{RefRow, RefUpdate, Store, WriteBatch, WriteError};
pub use postgres::{PostgresDialect, PostgresStore};
pub use sql::{Dialect, SqlStore};
pub use sqlite::{SqliteDialect, SqliteStore, SqliteSync};
