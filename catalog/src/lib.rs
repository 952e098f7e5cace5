//! The versioned catalog of lh: branches, tags and commits over many Iceberg tables.
//!
//! A commit maps every table name (`namespace.table`) to a [`TablePointer`] (the
//! table's Iceberg metadata file, uuid and snapshot). The map is a content-addressed
//! Merkle search tree shared between commits, so a commit, a diff or a merge costs in
//! proportion to the tables it changes, and a branch or tag is one row. Writers are
//! optimistic and checked per table (Nessie's rule). State lives in SQLite (the
//! embedded default) or PostgreSQL (shared by several servers) behind [`store::Store`].
//!
//! This crate knows nothing of HTTP, DuckDB or containers.

mod ancestry;
mod catalog;
mod codec;
mod error;
mod group;
mod model;
pub mod names;
mod objects;
pub mod refexpr;
mod retry;
pub mod store;
mod tree;

pub use catalog::{
    Catalog, CatalogOptions, DEFAULT_BRANCH, MAX_LOG_PAGE, branch_or_default, ref_or_default,
};
pub use error::{Error, ErrorKind, Result, TableConflict};
pub use model::*;
pub use refexpr::{RefExpr, ToRefExpr};
