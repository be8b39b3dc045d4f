//! Logging as librpma does it: `rpma_log_set_threshold`,
//! `rpma_log_get_threshold`, `rpma_log_set_function`.
//!
//! rpma's messages reach the log function when their level is at or below
//! the main threshold (RPMA_LOG_THRESHOLD). The default function (librpma's
//! `rpma_log_default_function`) sends each to syslog (`openlog("rpma",
//! LOG_PID, LOG_LOCAL7)`) and, when its level is also at or below the aux
//! threshold (RPMA_LOG_THRESHOLD_AUX), to stderr in librpma's format. A C
//! log function gets `(level, file, line, function, "%s", message)`.
//! Defaults are those of librpma's release build: main WARNING, aux
//! DISABLED, set explicitly at start (rpma's Rust callers start with the
//! main threshold unset, following the `log` crate's filter; C callers never
//! do).

use std::ffi::{c_char, c_int, CString};

use rpma::logging::{LogLevel, LogRecord, LogThreshold};
use rpma::Error;

use crate::{guard, out};

/// librpma's `rpma_log_function` (variadic; rpma passes `"%s"` and the
/// message).
pub type RpmaLogFunction = unsafe extern "C" fn(
    level: c_int,
    file_name: *const c_char,
    line_no: c_int,
    function_name: *const c_char,
    message_format: *const c_char,
    ...
);

/// The library's initialisation (librpma's constructor): the default log
/// function and librpma's default thresholds.
pub(crate) fn init() {
    rpma::logging::set_threshold(LogThreshold::Main, LogLevel::Warning);
    rpma::logging::set_threshold(LogThreshold::Aux, LogLevel::Disabled);
    rpma::logging::set_function(Some(Box::new(default_function)));
}

/// A string for C: interior NUL bytes (never in rpma's messages) become '?'.
fn c_string(s: &str) -> CString {
    CString::new(s.replace('\0', "?")).unwrap_or_default()
}

fn default_function(r: &LogRecord<'_>) {
    static OPEN: std::sync::Once = std::sync::Once::new();
    OPEN.call_once(|| {
        // SAFETY: the identifier is a static string, as openlog requires.
        unsafe { libc::openlog(c"rpma".as_ptr(), libc::LOG_PID, libc::LOG_LOCAL7) };
    });
    let priority = match r.level {
        LogLevel::Fatal => libc::LOG_CRIT,
        LogLevel::Error => libc::LOG_ERR,
        LogLevel::Warning => libc::LOG_WARNING,
        LogLevel::Notice => libc::LOG_NOTICE,
        LogLevel::Info => libc::LOG_INFO,
        _ => libc::LOG_DEBUG,
    };
    let msg = c_string(&format!("{}: {}: {}: {}", r.file, r.line, r.func, r.args));
    // SAFETY: a "%s" format with one NUL-terminated string.
    unsafe { libc::syslog(priority, c"%s".as_ptr(), msg.as_ptr()) };
    if r.level as i32 <= rpma::logging::threshold(LogThreshold::Aux) as i32 {
        eprintln!("{}", rpma::logging::aux_line(r));
    }
}

fn threshold_of(t: c_int) -> Result<LogThreshold, Error> {
    match t {
        0 => Ok(LogThreshold::Main),
        1 => Ok(LogThreshold::Aux),
        _ => Err(Error::inval(format!(
            "log threshold {t} is neither RPMA_LOG_THRESHOLD (0) nor RPMA_LOG_THRESHOLD_AUX (1)"
        ))),
    }
}

/// `rpma_log_set_threshold`.
#[no_mangle]
pub extern "C" fn rpma_log_set_threshold(threshold: c_int, level: c_int) -> c_int {
    guard("rpma_log_set_threshold", || {
        let t = threshold_of(threshold)?;
        rpma::logging::set_threshold(t, LogLevel::from_i32(level)?);
        Ok(())
    })
}

/// `rpma_log_get_threshold`.
#[no_mangle]
pub unsafe extern "C" fn rpma_log_get_threshold(threshold: c_int, level: *mut c_int) -> c_int {
    guard("rpma_log_get_threshold", || {
        let t = threshold_of(threshold)?;
        let level = out(level, "level")?;
        // SAFETY: non-NULL output pointer from the caller.
        unsafe { level.write(rpma::logging::threshold(t) as c_int) };
        Ok(())
    })
}

/// `rpma_log_set_function`: `NULL` (`RPMA_LOG_USE_DEFAULT_FUNCTION`) restores
/// the default function.
#[no_mangle]
pub extern "C" fn rpma_log_set_function(log_function: Option<RpmaLogFunction>) -> c_int {
    guard("rpma_log_set_function", || {
        match log_function {
            None => rpma::logging::set_function(Some(Box::new(default_function))),
            Some(f) => rpma::logging::set_function(Some(Box::new(move |r: &LogRecord<'_>| {
                let file = c_string(r.file);
                let func = c_string(r.func);
                let msg = c_string(&r.args.to_string());
                let line = c_int::try_from(r.line).unwrap_or(c_int::MAX);
                // SAFETY: the caller gave a function of librpma's type;
                // every string is NUL-terminated and outlives the call.
                unsafe { f(r.level as c_int, file.as_ptr(), line, func.as_ptr(), c"%s".as_ptr(), msg.as_ptr()) };
            }))),
        }
        Ok(())
    })
}
