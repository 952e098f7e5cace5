//! The lh server: the HTTP API over the versioned catalog, Iceberg tables in the
//! warehouse, and SQL queries in embedded DuckDB.
//!
//! Only this crate speaks HTTP, and only `http.rs` maps errors to status codes.

pub use lh_auth as auth;
pub use lh_core::{db, duck, error, http};
pub use lh_query::{self as query, maintenance};
pub use lh_runs::{self as runs, merges};
pub use lh_tables::{self as tables, namespaces};
pub use lh_warehouse as warehouse;

pub mod api;
pub mod app;
pub mod console;
pub mod listen;
pub mod rest;
pub mod server;
pub mod state;

pub use server::{RuntimeChoice, ServerConfig, serve, shutdown_signal};
