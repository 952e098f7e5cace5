//! The lh server: the HTTP API over the versioned catalog, Iceberg tables in the
//! warehouse, and SQL queries in embedded DuckDB.
//!
//! Only this crate speaks HTTP and maps errors to status codes (`api/error.rs`).

pub mod api;
pub mod duck;
pub mod error;
pub mod query;
pub mod rest;
pub mod runs;
pub mod server;
pub mod tables;
pub mod warehouse;

pub use server::{RuntimeChoice, ServerConfig, serve, shutdown_signal};
