//! `malloc` and its kin, defined by this executable: mimalloc's, each block counted in
//! `lh_core::heap` and refused past its limit (`--native-memory`). DuckDB's shared
//! library, SQLite and the C library bind to these (an executable's definitions come
//! first), and so does the C++ runtime's `operator new`, which turns a refusal into the
//! `std::bad_alloc` DuckDB reports as out of memory. The set is glibc's whole malloc
//! interface, `__libc_*` names included, so that no block is ever allocated by one
//! allocator and freed by the other.
//!
//! A refusal sets `errno` to `ENOMEM`, as glibc's does.
//!
//! DuckDB's official library brings an allocator of its own (jemalloc, its symbols
//! prefixed `duckdb_je_`), which takes most of DuckDB's memory (vectors, strings, lists,
//! the buffer manager's blocks) from the system directly, past `malloc` (found by the
//! thirtieth review: a lambda's lists reached 3 GB under a 1 GB limit). Its two calls
//! that map and unmap the system's pages, `duckdb_je_pages_map` and
//! `duckdb_je_pages_unmap`, are bound through the library's symbol table like `malloc`,
//! so this executable defines them too: the same account charges what jemalloc maps and
//! refuses a mapping past the limit (jemalloc then fails the allocation, and DuckDB the
//! statement), and passes each call on to the library's own. What jemalloc maps is at
//! least what it holds. By default it would keep the pages it no longer uses mapped
//! (retained) for good, and the account would hold its high-water mark: one refused
//! query left it full, and every later import was refused (the thirty-first review).
//! So `duckdb_je_opt_retain`, its option read as it starts (its first allocation, after
//! `main` began), is this executable's and false: pages it no longer uses are unmapped
//! after its decay, and leave the account.
//! A mapping refused, jemalloc would fall back on growing the data segment (`sbrk`,
//! its "secondary" source, through `duckdb_je_extent_alloc_dss`): that is refused always.
//!
//! `unsafe` by nature: these are the C allocator's interface (lh's other `unsafe` is
//! `runner::sandbox`'s descriptor closing).
#![allow(unsafe_code)]

use std::ffi::{c_int, c_void};

use lh_core::heap;
use libmimalloc_sys as mi;

const PAGE: usize = 4096;

fn refuse() -> *mut c_void {
    // SAFETY: errno is this thread's.
    unsafe { *libc::__errno_location() = libc::ENOMEM };
    std::ptr::null_mut()
}

/// Allocates `size` bytes with `alloc`, charged by their usable size.
#[inline]
fn counted(size: usize, alloc: impl FnOnce() -> *mut c_void) -> *mut c_void {
    if !heap::take(size) {
        return refuse();
    }
    let p = alloc();
    if p.is_null() {
        heap::give_back(size);
        return p;
    }
    // SAFETY: `p` is a live mimalloc block.
    let usable = unsafe { mi::mi_usable_size(p) };
    if usable >= size {
        heap::add(usable - size);
    } else {
        heap::give_back(size - usable);
    }
    p
}

fn aligned(align: usize, size: usize) -> *mut c_void {
    // SAFETY: mimalloc takes any size and a power-of-two alignment (checked by callers
    // where the C interface asks for it).
    counted(size, || unsafe { mi::mi_malloc_aligned(size, align) })
}

/// # Safety
/// As C's `malloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
    // SAFETY: any size.
    counted(size, || unsafe { mi::mi_malloc(size) })
}

/// # Safety
/// As C's `calloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn calloc(count: usize, size: usize) -> *mut c_void {
    let Some(total) = count.checked_mul(size) else {
        return refuse();
    };
    // SAFETY: any size; mimalloc's zeroed allocation.
    counted(total, || unsafe { mi::mi_zalloc(total) })
}

/// # Safety
/// As C's `free`: `p` is null or a live block of these functions.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn free(p: *mut c_void) {
    if p.is_null() {
        return;
    }
    // SAFETY: the caller's promise.
    unsafe {
        heap::give_back(mi::mi_usable_size(p));
        mi::mi_free(p);
    }
}

/// # Safety
/// As C's `realloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    if p.is_null() {
        // SAFETY: as malloc.
        return unsafe { malloc(size) };
    }
    // SAFETY: the caller's promise: `p` is live.
    let old = unsafe { mi::mi_usable_size(p) };
    let more = size.saturating_sub(old);
    if more > 0 && !heap::take(more) {
        // `p` stays as it was, as C's realloc leaves it when it fails.
        return refuse();
    }
    // SAFETY: the caller's promise.
    let q = unsafe { mi::mi_realloc(p, size) };
    if q.is_null() {
        heap::give_back(more);
        return q;
    }
    // SAFETY: `q` is a live mimalloc block.
    let now = unsafe { mi::mi_usable_size(q) };
    let charged = old + more;
    if now >= charged {
        heap::add(now - charged);
    } else {
        heap::give_back(charged - now);
    }
    q
}

/// # Safety
/// As glibc's `reallocarray`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn reallocarray(p: *mut c_void, count: usize, size: usize) -> *mut c_void {
    match count.checked_mul(size) {
        // SAFETY: as realloc.
        Some(total) => unsafe { realloc(p, total) },
        None => refuse(),
    }
}

/// # Safety
/// As C's `aligned_alloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
    if !align.is_power_of_two() {
        // SAFETY: errno is this thread's.
        unsafe { *libc::__errno_location() = libc::EINVAL };
        return std::ptr::null_mut();
    }
    aligned(align, size)
}

/// # Safety
/// As glibc's `memalign`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
    // SAFETY: as aligned_alloc.
    unsafe { aligned_alloc(align, size) }
}

/// # Safety
/// As POSIX's `posix_memalign`: `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> c_int {
    if !align.is_power_of_two() || !align.is_multiple_of(size_of::<*mut c_void>()) {
        return libc::EINVAL;
    }
    let p = aligned(align, size);
    if p.is_null() {
        return libc::ENOMEM;
    }
    // SAFETY: the caller's promise.
    unsafe { *out = p };
    0
}

/// # Safety
/// As glibc's `valloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn valloc(size: usize) -> *mut c_void {
    aligned(PAGE, size)
}

/// # Safety
/// As glibc's `pvalloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pvalloc(size: usize) -> *mut c_void {
    match size.checked_next_multiple_of(PAGE) {
        Some(rounded) => aligned(PAGE, rounded.max(PAGE)),
        None => refuse(),
    }
}

/// # Safety
/// As glibc's `malloc_usable_size`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn malloc_usable_size(p: *mut c_void) -> usize {
    if p.is_null() {
        return 0;
    }
    // SAFETY: the caller's promise.
    unsafe { mi::mi_usable_size(p) }
}

/// # Safety
/// As `free`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cfree(p: *mut c_void) {
    // SAFETY: as free.
    unsafe { free(p) }
}

// glibc's own names for the same functions, which some libraries call directly.

/// # Safety
/// As `malloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __libc_malloc(size: usize) -> *mut c_void {
    // SAFETY: as malloc.
    unsafe { malloc(size) }
}

/// # Safety
/// As `calloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __libc_calloc(count: usize, size: usize) -> *mut c_void {
    // SAFETY: as calloc.
    unsafe { calloc(count, size) }
}

/// # Safety
/// As `realloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __libc_realloc(p: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: as realloc.
    unsafe { realloc(p, size) }
}

/// # Safety
/// As `free`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __libc_free(p: *mut c_void) {
    // SAFETY: as free.
    unsafe { free(p) }
}

/// # Safety
/// As `memalign`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __libc_memalign(align: usize, size: usize) -> *mut c_void {
    // SAFETY: as memalign.
    unsafe { memalign(align, size) }
}

/// # Safety
/// As `valloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __libc_valloc(size: usize) -> *mut c_void {
    // SAFETY: as valloc.
    unsafe { valloc(size) }
}

/// # Safety
/// As `pvalloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __libc_pvalloc(size: usize) -> *mut c_void {
    // SAFETY: as pvalloc.
    unsafe { pvalloc(size) }
}

/// # Safety
/// As `posix_memalign`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __posix_memalign(
    out: *mut *mut c_void,
    align: usize,
    size: usize,
) -> c_int {
    // SAFETY: as posix_memalign.
    unsafe { posix_memalign(out, align, size) }
}

// jemalloc's pages, inside DuckDB's library.

type PagesMap = unsafe extern "C" fn(*mut c_void, usize, usize, *mut bool) -> *mut c_void;
type PagesUnmap = unsafe extern "C" fn(*mut c_void, usize);

/// The library's own definition of `name` (the next after this executable's).
fn next_definition(name: &std::ffi::CStr) -> *mut c_void {
    // SAFETY: dlsym with a NUL-terminated name; RTLD_NEXT looks past this object.
    unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) }
}

/// # Safety
/// As jemalloc's `pages_map`: called by DuckDB's jemalloc only.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn duckdb_je_pages_map(
    addr: *mut c_void,
    size: usize,
    alignment: usize,
    commit: *mut bool,
) -> *mut c_void {
    static NEXT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let next = *NEXT.get_or_init(|| next_definition(c"duckdb_je_pages_map") as usize);
    if next == 0 || !heap::take(size) {
        return std::ptr::null_mut();
    }
    // SAFETY: the library's own function, of this signature, with the caller's arguments.
    let p = unsafe { std::mem::transmute::<usize, PagesMap>(next)(addr, size, alignment, commit) };
    if p.is_null() {
        heap::give_back(size);
    }
    p
}

/// # Safety
/// As jemalloc's `pages_unmap`: called by DuckDB's jemalloc only, on pages it mapped.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn duckdb_je_pages_unmap(addr: *mut c_void, size: usize) {
    static NEXT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let next = *NEXT.get_or_init(|| next_definition(c"duckdb_je_pages_unmap") as usize);
    if next == 0 {
        return;
    }
    // SAFETY: the library's own function, of this signature, with the caller's arguments.
    unsafe { std::mem::transmute::<usize, PagesUnmap>(next)(addr, size) };
    heap::give_back(size);
}

/// # Safety
/// Called by DuckDB's jemalloc only: it takes no pages from the data segment, so that
/// a mapping refused past the limit stays refused.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn duckdb_je_extent_alloc_dss(
    _tsdn: *mut c_void,
    _arena: *mut c_void,
    _new_addr: *mut c_void,
    _size: usize,
    _alignment: usize,
    _zero: *mut bool,
    _commit: *mut bool,
) -> *mut c_void {
    std::ptr::null_mut()
}

/// jemalloc's `opt.retain` (see the module's comment), which DuckDB's library reads
/// through its symbol table and DuckDB's configuration does not set.
#[unsafe(no_mangle)]
pub static mut duckdb_je_opt_retain: bool = false;
