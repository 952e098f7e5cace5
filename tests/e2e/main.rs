//! End-to-end tests: the real `lh server` and `lh` CLI, in temporary directories.
//! One test binary for all of them (each binary links DuckDB).

mod access;
mod auth;
mod basics;
mod console;
mod gc;
mod history;
mod holes;
mod interop;
mod isolation;
mod oidc_keys;
mod partitions;
mod python_client;
mod query;
mod readme;
mod refs;
mod rest;
mod runs;
mod s3;
mod shell;
mod tables;
mod team;

/// Snapshot of a command's output with run-to-run details replaced.
#[macro_export]
macro_rules! snap {
    ($name:expr, $server:expr, $run:expr) => {{
        let text = lh_e2e::redact(&$run.both(), $server.dir.path());
        insta::with_settings!({ snapshot_path => "snapshots", prepend_module_to_snapshot => false, omit_expression => true }, {
            insta::assert_snapshot!($name, text);
        });
    }};
}
