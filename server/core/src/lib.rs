//! What every part of the lh server shares: its error ([`error`]), the one mapping of
//! that error to HTTP status codes and bodies ([`http`]), the server's own tables in the
//! catalog's database ([`db`]), and embedded DuckDB, sandboxed, with the quoting of
//! every name lh puts into its SQL ([`duck`]), and the account of what DuckDB and
//! the other C code hold in the C heap ([`heap`]).

pub mod db;
pub mod duck;
pub mod error;
pub mod heap;
pub mod http;
pub mod json;
