//! The commands: each takes the resolved settings and talks to the server.

pub mod access;
pub mod bisect;
pub mod console;
pub mod init;
pub mod query;
pub mod refs;
pub mod runs;
pub mod server;
pub mod shell;
pub mod tables;
pub mod tokens;
