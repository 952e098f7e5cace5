//! The build-script half of linking DuckDB as a shared library. lh links DuckDB's
//! official `libduckdb.so` (see `scripts/libduckdb.sh`) instead of compiling DuckDB's
//! C++ (about 40 minutes on two cores). `libduckdb-sys` finds the library at build time
//! through `DUCKDB_LIB_DIR`; this gives each executable that links it (binaries, test
//! and bench programs) the run-time search path: the folder beside the executable
//! (`$ORIGIN`, for a copy shipped with the binary), `$ORIGIN/../lib/lh` (where
//! `make install` puts it) and `DUCKDB_LIB_DIR` itself. Cargo
//! passes such link arguments only to the targets of the package whose build script
//! prints them, so every crate with an executable that links DuckDB calls [`main`].
//!
//! With the package's `bundled-duckdb` feature, DuckDB is compiled from source and
//! linked statically: nothing to do.

use std::path::PathBuf;

/// Prints the link arguments; panics, with what to do, when the library is missing.
pub fn main() {
    println!("cargo:rerun-if-env-changed=DUCKDB_LIB_DIR");
    if std::env::var_os("CARGO_FEATURE_BUNDLED_DUCKDB").is_some() {
        return;
    }
    let Some(dir) = std::env::var_os("DUCKDB_LIB_DIR").map(PathBuf::from) else {
        panic!(
            "DUCKDB_LIB_DIR is not set (.cargo/config.toml sets it)\n\
             hint: run scripts/libduckdb.sh, or build DuckDB from source with \
             `--features bundled-duckdb`"
        );
    };
    let lib = dir.join("libduckdb.so");
    println!("cargo:rerun-if-changed={}", lib.display());
    if !lib.is_file() {
        panic!(
            "DuckDB's shared library is not at {}\n\
             hint: run scripts/libduckdb.sh (every make target does), or build DuckDB \
             from source with `--features bundled-duckdb`",
            lib.display()
        );
    }
    println!("cargo:rustc-link-arg=-Wl,-rpath,$ORIGIN");
    // Where `make install` puts it: PREFIX/lib/lh beside PREFIX/bin.
    println!("cargo:rustc-link-arg=-Wl,-rpath,$ORIGIN/../lib/lh");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
}
