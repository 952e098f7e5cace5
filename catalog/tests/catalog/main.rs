//! The catalog's test suite, on SQLite and on PostgreSQL: operations and their errors,
//! a model-based property test, concurrent writers, and crashes.

mod common;
mod concurrency;
mod crash;
mod model;
mod ops;
