//! librpma's C ABI over rpma: `librpma.so.0` for C librpma's users.
//!
//! Every function of librpma 1.3's `librpma.h` (84, symbol version node
//! `LIBRPMA_1.0`) is exported here with the header's signature, its error
//! codes (`RPMA_E_*`), its ownership rules (`T **` arguments of `*_delete`,
//! `*_dereg`, `*_shutdown` and `rpma_conn_req_connect` are set to NULL) and
//! its `errno` behaviour (a provider error leaves the failing call's errno).
//! `harness/capi-build` links the static library this crate builds into
//! `librpma.so.0` and `librpma.a`; docs/capi.md says how to install and use
//! it, and where it deliberately differs from C librpma.
//!
//! # The boundary
//! This crate is the project's second FFI boundary: C calls in. Each
//! exported function runs inside `guard`, which catches panics (none
//! crosses into C: they become `RPMA_E_UNKNOWN`, logged) and turns
//! [`rpma::Error`] into librpma's codes. Pointers from C are checked for
//! NULL (librpma's `RPMA_E_INVAL`) and otherwise trusted as librpma trusts
//! them: the `# Safety` contract of every exported function is librpma's
//! documented contract for it (valid objects made by this library, memory
//! registered by `rpma_mr_reg` kept valid until `rpma_mr_dereg`).
//!
//! Objects: each opaque C type is a boxed rpma object (`rpma_peer` is a
//! [`rpma::Peer`], `rpma_conn` a [`rpma::Conn`], ...); configuration objects
//! are behind a mutex, since librpma's setters and getters are thread-safe.
//! `rpma_cq` pointers point at the connection's (or SRQ's) own [`rpma::Cq`].
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
// Every exported function takes raw pointers from C: their contract is
// librpma's, stated once above and in docs/capi.md rather than per function.
#![allow(clippy::missing_safety_doc)]

use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, MutexGuard, Once, OnceLock};

use rpma::logging::LogLevel;
use rpma::Error;

pub mod cfg;
pub mod conn;
pub mod data;
pub mod log;
pub mod mr;
pub mod peer;

/// `Result` of an exported function's body.
pub(crate) type Res = Result<(), Error>;

static INIT: Once = Once::new();

/// Runs `body` for the exported function `name`: initialises logging once
/// (librpma's library constructor), then as [`guard_hot`].
#[inline]
pub(crate) fn guard(name: &'static str, body: impl FnOnce() -> Res) -> c_int {
    INIT.call_once(log::init);
    guard_hot(name, body)
}

/// Runs `body` for the exported function `name`: catches a panic
/// (`RPMA_E_UNKNOWN`, logged as FATAL), and maps an error to its `RPMA_E_*`
/// code, logging it and, for a provider error, leaving its errno in `errno`
/// (a `RPMA_E_NO_COMPLETION` nothing would log returns at once). Without
/// [`guard`]'s initialisation: for the data path's calls, whose objects
/// only calls under `guard` make (a failure initialises it before logging).
/// The error becomes its code inside the catch, so only a `c_int` crosses
/// it.
#[inline]
pub(crate) fn guard_hot(name: &'static str, body: impl FnOnce() -> Res) -> c_int {
    match catch_unwind(AssertUnwindSafe(|| code_of(name, body()))) {
        Ok(code) => code,
        Err(_) => panicked(name),
    }
}

/// 0, or `e`'s code (logged by [`fail`]).
#[inline(always)]
fn code_of(name: &'static str, r: Res) -> c_int {
    match r {
        Ok(()) => 0,
        // A busy-polling loop's miss, the one error on a hot path: its
        // code without the cold call, unless a debug line is wanted
        // (`forget`: the variant has nothing to drop, and the call to the
        // error's drop glue would cost as much as the rest).
        // (The C ABI's main threshold is always set: `log::init`.)
        Err(e @ Error::NoCompletion) if !rpma::logging::enabled_by_thresholds(LogLevel::Debug) => {
            std::mem::forget(e);
            rpma::error::RPMA_E_NO_COMPLETION
        }
        Err(e) => fail(name, e),
    }
}

#[cold]
fn panicked(name: &'static str) -> c_int {
    INIT.call_once(log::init);
    rpma::logging::emit(
        LogLevel::Fatal,
        module_path!(),
        file!(),
        line!(),
        name,
        format_args!("{name}: panicked inside rpma's C ABI (a bug in rpma; please report it)"),
    );
    rpma::error::RPMA_E_UNKNOWN
}

#[cold]
fn fail(name: &'static str, e: Error) -> c_int {
    INIT.call_once(log::init);
    // Expected outcomes of polling calls are not failures worth a line.
    let level = match e {
        Error::NoCompletion | Error::NoEvent | Error::Again(_) => LogLevel::Debug,
        Error::Inval(_) | Error::NoSupp(_) | Error::SharedChannel(_) | Error::NotSharedChnl(_) => LogLevel::Warning,
        _ => LogLevel::Error,
    };
    // The error, then its cause (a provider's errno text), as librpma
    // logs them.
    let cause = std::error::Error::source(&e).map(|c| format!(": {c}")).unwrap_or_default();
    rpma::logging::emit(level, module_path!(), file!(), line!(), name, format_args!("{name}: {e}{cause}"));
    if let Some(errno) = e.errno() {
        // SAFETY: __errno_location returns this thread's errno.
        unsafe { *libc::__errno_location() = errno };
    }
    e.code()
}

/// A NOTICE (or other) line as C librpma logs it at the same point, so that
/// a C program's log reads the same on rpma.
pub(crate) fn note(level: LogLevel, func: &'static str, args: std::fmt::Arguments<'_>) {
    rpma::logging::emit(level, module_path!(), file!(), line!(), func, args);
}

/// `RPMA_E_INVAL` for a NULL `what`.
#[cold]
pub(crate) fn null(what: &str) -> Error {
    Error::inval(format!("{what} is NULL"))
}

/// The object behind a C pointer, or `RPMA_E_INVAL` when it is NULL.
///
/// # Safety
/// A non-NULL `p` points to a live `T` (made by this library) for `'a`.
#[inline]
pub(crate) unsafe fn obj<'a, T>(p: *const T, what: &str) -> Result<&'a T, Error> {
    // SAFETY: the caller's contract.
    unsafe { p.as_ref() }.ok_or_else(|| null(what))
}

/// Checks an output pointer for NULL (librpma writes outputs only on success).
#[inline]
pub(crate) fn out<T>(p: *mut T, what: &str) -> Result<*mut T, Error> {
    if p.is_null() {
        Err(null(what))
    } else {
        Ok(p)
    }
}

/// A C string argument as UTF-8, `RPMA_E_INVAL` when NULL or not UTF-8.
///
/// # Safety
/// A non-NULL `s` points to a NUL-terminated string.
pub(crate) unsafe fn cstr<'a>(s: *const c_char, what: &str) -> Result<&'a str, Error> {
    if s.is_null() {
        return Err(null(what));
    }
    // SAFETY: the caller's contract.
    unsafe { CStr::from_ptr(s) }.to_str().map_err(|_| Error::inval(format!("{what} is not valid UTF-8")))
}

/// Moves `v` into a new heap object and writes its address to `*ptr`.
///
/// # Safety
/// `ptr` is non-NULL and valid for a write.
pub(crate) unsafe fn give<T>(ptr: *mut *mut T, v: T) {
    // SAFETY: the caller's contract.
    unsafe { ptr.write(Box::into_raw(Box::new(v))) };
}

/// Takes the object out of `*ptr` (setting `*ptr` to NULL): `None` when
/// `*ptr` is NULL, `RPMA_E_INVAL` when `ptr` is.
///
/// # Safety
/// `ptr` is NULL or valid for reads and writes, and a non-NULL `*ptr` was
/// made by [`give`] and is not used afterwards.
pub(crate) unsafe fn take<T>(ptr: *mut *mut T, what: &str) -> Result<Option<Box<T>>, Error> {
    let ptr = out(ptr, what)?;
    // SAFETY: the caller's contract.
    let p = unsafe { ptr.replace(std::ptr::null_mut()) };
    // SAFETY: made by Box::into_raw in `give`, taken once (the slot is NULL now).
    Ok((!p.is_null()).then(|| unsafe { Box::from_raw(p) }))
}

/// A configuration object: librpma's cfg setters and getters are
/// thread-safe, so each is behind a mutex.
#[derive(Debug)]
pub struct Locked<T>(Mutex<T>);

impl<T> Locked<T> {
    pub(crate) fn new(v: T) -> Self {
        Locked(Mutex::new(v))
    }
    /// The value (a poisoned lock is taken over: every value is valid).
    pub fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// rpma's text for `code` as a C string that lives as long as the process.
/// The table is built once from `text` (rpma's own table, the one home of
/// these strings) over `codes`, and `other`, a code `text` gives its text
/// for unknown codes to, which every other code gets too.
pub(crate) fn c_text(
    table: &'static OnceLock<Vec<(c_int, CString)>>,
    codes: &[c_int],
    other: c_int,
    text: fn(c_int) -> &'static str,
    code: c_int,
) -> *const c_char {
    let t = table.get_or_init(|| {
        codes.iter().chain([&other]).map(|&c| (c, CString::new(text(c)).unwrap_or_default())).collect()
    });
    t.iter().find(|(c, _)| *c == code).unwrap_or(&t[t.len() - 1]).1.as_ptr()
}

/// `rpma_err_2str`: librpma's text for an error code.
#[no_mangle]
pub extern "C" fn rpma_err_2str(ret: c_int) -> *const c_char {
    static TEXTS: OnceLock<Vec<(c_int, CString)>> = OnceLock::new();
    use rpma::error::*;
    const CODES: [c_int; 11] = [
        0,
        RPMA_E_UNKNOWN,
        RPMA_E_NOSUPP,
        RPMA_E_PROVIDER,
        RPMA_E_NOMEM,
        RPMA_E_INVAL,
        RPMA_E_NO_COMPLETION,
        RPMA_E_NO_EVENT,
        RPMA_E_AGAIN,
        RPMA_E_SHARED_CHANNEL,
        RPMA_E_NOT_SHARED_CHNL,
    ];
    // 1: a code rpma gives its "Unknown error" text, as any other.
    c_text(&TEXTS, &CODES, 1, rpma::err_2str, ret)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn err_2str_matches_rpma() {
        for code in (-100010..=-100000).chain([0, 1, -1, c_int::MIN]) {
            // SAFETY: rpma_err_2str returns a static NUL-terminated string.
            let s = unsafe { CStr::from_ptr(rpma_err_2str(code)) };
            assert_eq!(s.to_str().unwrap(), rpma::err_2str(code), "code {code}");
        }
    }

    #[test]
    fn a_panic_is_an_unknown_error() {
        assert_eq!(guard("test", || panic!("boom")), rpma::error::RPMA_E_UNKNOWN);
    }

    /// An empty poll's `RPMA_E_NO_COMPLETION` returns at once when nothing
    /// would log it, and still reaches the log function as a debug line
    /// when the threshold asks for one.
    #[test]
    fn a_miss_is_logged_only_when_debug_lines_are_wanted() {
        use rpma::logging::{set_function, set_threshold, LogThreshold};
        use std::sync::{Arc, Mutex};
        // The library's own set-up first (the first guard's), then a
        // function that collects this test's lines.
        INIT.call_once(log::init);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = Arc::clone(&seen);
        set_function(Some(Box::new(move |r: &rpma::logging::LogRecord<'_>| {
            if r.func == "rpma_test_miss" {
                s.lock().unwrap().push((r.level, r.args.to_string()));
            }
        })));
        let miss = || guard("rpma_test_miss", || Err(Error::NoCompletion));
        set_threshold(LogThreshold::Aux, LogLevel::Disabled);
        set_threshold(LogThreshold::Main, LogLevel::Debug);
        assert_eq!(miss(), rpma::error::RPMA_E_NO_COMPLETION);
        set_threshold(LogThreshold::Main, LogLevel::Warning);
        assert_eq!(miss(), rpma::error::RPMA_E_NO_COMPLETION);
        log::init();
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 1, "one line, at the debug threshold: {seen:?}");
        assert_eq!(seen[0].0, LogLevel::Debug);
        assert!(seen[0].1.contains("rpma_test_miss"), "{seen:?}");
    }

    #[test]
    fn a_provider_error_leaves_its_errno() {
        let e = Error::provider("ibv_test", std::io::Error::from_raw_os_error(libc::EBUSY));
        assert_eq!(guard("test", || Err(e)), rpma::error::RPMA_E_PROVIDER);
        assert_eq!(std::io::Error::last_os_error().raw_os_error(), Some(libc::EBUSY));
    }
}
