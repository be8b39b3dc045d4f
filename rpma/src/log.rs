//! Logging with librpma's two thresholds, expressed through the [`log`] crate.
//!
//! Every message the library emits has a [`LogLevel`]. It is handed to the
//! log function when its level is at or below the **main** threshold. The
//! default function forwards it to the [`log`] facade (target `rpma`),
//! so `env_logger` or any other logger shows it; it also writes it to stderr in
//! librpma's format when its level is at or below the **aux** threshold.
//! [`set_function`] replaces the default function (librpma's
//! `rpma_log_set_function`).
//!
//! Defaults: main = [`LogLevel::Warning`] ([`LogLevel::Debug`] in debug
//! builds), aux = [`LogLevel::Disabled`] (librpma's debug builds use WARNING
//! for aux; here the `log` facade already reaches stderr).
//!
//! ```
//! use rpma::log::{self, LogLevel, LogThreshold};
//! log::set_threshold(LogThreshold::Main, LogLevel::Info);
//! assert_eq!(log::threshold(LogThreshold::Main), LogLevel::Info);
//! log::set_function(Some(Box::new(|r: &log::LogRecord<'_>| {
//!     eprintln!("[{:?}] {}:{} {}", r.level, r.file, r.line, r.args);
//! })));
//! log::set_function(None); // back to the default function
//! ```

use std::fmt;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::RwLock;

/// Severity of a message, librpma's `RPMA_LOG_*` values.
///
/// ```
/// use rpma::log::LogLevel;
/// assert_eq!(LogLevel::from_i32(2)?, LogLevel::Warning);
/// assert!(LogLevel::Error < LogLevel::Debug);
/// # Ok::<(), rpma::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(i32)]
pub enum LogLevel {
    /// Nothing is logged (only as a threshold).
    Disabled = -1,
    /// The library cannot go on.
    Fatal = 0,
    /// An operation failed.
    Error = 1,
    /// Something unexpected that the library handled.
    Warning = 2,
    /// A normal but significant condition.
    Notice = 3,
    /// Informational.
    Info = 4,
    /// Debugging detail.
    Debug = 5,
}

impl LogLevel {
    /// The level with librpma's numeric value `v`.
    ///
    /// # Errors
    /// [`Error::Inval`](crate::Error::Inval) for values outside -1..=5.
    pub fn from_i32(v: i32) -> crate::Result<LogLevel> {
        Ok(match v {
            -1 => LogLevel::Disabled,
            0 => LogLevel::Fatal,
            1 => LogLevel::Error,
            2 => LogLevel::Warning,
            3 => LogLevel::Notice,
            4 => LogLevel::Info,
            5 => LogLevel::Debug,
            _ => return Err(crate::Error::inval(format!("log level {v} is outside -1 (DISABLED) ..= 5 (DEBUG)"))),
        })
    }

    fn as_str(self) -> &'static str {
        match self {
            LogLevel::Disabled => "DISABLED",
            LogLevel::Fatal => "FATAL",
            LogLevel::Error => "ERROR",
            LogLevel::Warning => "WARNING",
            LogLevel::Notice => "NOTICE",
            LogLevel::Info => "INFO",
            LogLevel::Debug => "DEBUG",
        }
    }

    fn to_log(self) -> Option<::log::Level> {
        match self {
            LogLevel::Disabled => None,
            LogLevel::Fatal | LogLevel::Error => Some(::log::Level::Error),
            LogLevel::Warning => Some(::log::Level::Warn),
            LogLevel::Notice | LogLevel::Info => Some(::log::Level::Info),
            LogLevel::Debug => Some(::log::Level::Debug),
        }
    }
}

/// Which threshold to set or read (`RPMA_LOG_THRESHOLD` / `_AUX`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogThreshold {
    /// Messages at or below it reach the log function.
    Main,
    /// Messages at or below it also go to stderr (default function only).
    Aux,
}

/// One message, as handed to a log function.
#[derive(Debug)]
pub struct LogRecord<'a> {
    /// Severity.
    pub level: LogLevel,
    /// Source file of the library that logged it.
    pub file: &'static str,
    /// Line in that file.
    pub line: u32,
    /// Module path of the code that logged it.
    pub func: &'static str,
    /// The message.
    pub args: fmt::Arguments<'a>,
}

/// A user log function (librpma's `rpma_log_function`).
pub type LogFunction = dyn Fn(&LogRecord<'_>) + Send + Sync;

/// The main threshold's default (the auxiliary one is `Disabled`).
const MAIN_DEFAULT: i32 = if cfg!(debug_assertions) { LogLevel::Debug } else { LogLevel::Warning } as i32;
static MAIN: AtomicI32 = AtomicI32::new(MAIN_DEFAULT);
static AUX: AtomicI32 = AtomicI32::new(LogLevel::Disabled as i32);
/// The higher of the two thresholds, for [`enabled`]'s one test; written
/// only under `SETTING`, after `MAIN` or `AUX` changed.
static EITHER: AtomicI32 = AtomicI32::new(MAIN_DEFAULT);
static SETTING: std::sync::Mutex<()> = std::sync::Mutex::new(());
static FUNCTION: RwLock<Option<Box<LogFunction>>> = RwLock::new(None);

/// Sets a threshold (`rpma_log_set_threshold`). Thread-safe.
pub fn set_threshold(which: LogThreshold, level: LogLevel) {
    let _one_setter = SETTING.lock().unwrap_or_else(|p| p.into_inner());
    match which {
        LogThreshold::Main => &MAIN,
        LogThreshold::Aux => &AUX,
    }
    .store(level as i32, Ordering::Relaxed);
    EITHER.store(MAIN.load(Ordering::Relaxed).max(AUX.load(Ordering::Relaxed)), Ordering::Relaxed);
}

/// Reads a threshold (`rpma_log_get_threshold`).
pub fn threshold(which: LogThreshold) -> LogLevel {
    let v = match which {
        LogThreshold::Main => &MAIN,
        LogThreshold::Aux => &AUX,
    }
    .load(Ordering::Relaxed);
    LogLevel::from_i32(v).unwrap_or(LogLevel::Disabled)
}

/// Installs `f` as the log function, or restores the default one with `None`
/// (`rpma_log_set_function`, `RPMA_LOG_USE_DEFAULT_FUNCTION`). A custom
/// function receives every message at or below the main threshold.
pub fn set_function(f: Option<Box<LogFunction>>) {
    let mut slot = FUNCTION.write().unwrap_or_else(|p| p.into_inner());
    *slot = f;
}

/// Whether a message at `level` would be emitted (either threshold admits
/// it). `rpma_log!` tests this inline before calling [`emit`], so a message
/// below both thresholds (e.g. the debug line of every registration) costs
/// one load and compare, not a call.
#[doc(hidden)]
#[inline]
pub fn enabled(level: LogLevel) -> bool {
    let l = level as i32;
    level != LogLevel::Disabled && l <= EITHER.load(Ordering::Relaxed)
}

/// Emits one message; used through the crate's `rpma_log!` macro.
#[doc(hidden)]
pub fn emit(level: LogLevel, file: &'static str, line: u32, func: &'static str, args: fmt::Arguments<'_>) {
    if level == LogLevel::Disabled {
        return;
    }
    let main = level as i32 <= MAIN.load(Ordering::Relaxed);
    let aux = level as i32 <= AUX.load(Ordering::Relaxed);
    if !main && !aux {
        return;
    }
    let rec = LogRecord { level, file, line, func, args };
    let slot = FUNCTION.read().unwrap_or_else(|p| p.into_inner());
    match slot.as_deref() {
        Some(f) => {
            if main {
                f(&rec)
            }
        }
        None => default_function(&rec, main, aux),
    }
}

fn default_function(r: &LogRecord<'_>, main: bool, aux: bool) {
    if main {
        if let Some(l) = r.level.to_log() {
            ::log::log!(target: "rpma", l, "{}:{}: {}: {}", r.file, r.line, r.func, r.args);
        }
    }
    if aux {
        eprintln!("{}", format_aux(r, std::time::SystemTime::now()));
    }
}

/// librpma's stderr line for `r`, as the default function prints it for
/// the aux threshold: for log functions that keep that format (the C ABI's
/// default function does).
pub fn aux_line(r: &LogRecord<'_>) -> String {
    format_aux(r, std::time::SystemTime::now())
}

/// librpma's stderr line: `<Mon DD HH:MM:SS>.<usec> [tid] *LEVEL* file: line: func: msg`
/// (the time is UTC here).
fn format_aux(r: &LogRecord<'_>, now: std::time::SystemTime) -> String {
    let d = now.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (mon, day) = month_day(secs / 86_400);
    let tod = secs % 86_400;
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    format!(
        "{} {:02} {:02}:{:02}:{:02}.{:06} [{}] *{}* {}: {}: {}: {}",
        MONTHS[mon as usize - 1],
        day,
        tod / 3600,
        tod % 3600 / 60,
        tod % 60,
        d.subsec_micros(),
        rpma_sys::thread_id(),
        r.level.as_str(),
        r.file,
        r.line,
        r.func,
        r.args
    )
}

/// Month (1..=12) and day of `days` since 1970-01-01 (civil calendar).
fn month_day(days: u64) -> (u64, u64) {
    let z = days as i64 + 719_468;
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (m as u64, d as u64)
}

/// `rpma_log!(LogLevel::Error, "...", args)`: log through the thresholds.
macro_rules! rpma_log {
    ($lvl:expr, $($arg:tt)+) => {{
        let lvl = $lvl;
        if $crate::log::enabled(lvl) {
            $crate::log::emit(lvl, file!(), line!(), module_path!(), format_args!($($arg)+))
        }
    }};
}
pub(crate) use rpma_log;

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn levels_roundtrip() {
        for v in -1..=5 {
            assert_eq!(LogLevel::from_i32(v).unwrap() as i32, v);
        }
        assert!(LogLevel::from_i32(6).unwrap_err().to_string().contains("6"));
        assert!(LogLevel::from_i32(-2).is_err());
    }

    #[test]
    fn thresholds_and_custom_function() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s2 = seen.clone();
        set_function(Some(Box::new(move |r: &LogRecord<'_>| s2.lock().unwrap().push((r.level, r.args.to_string())))));
        set_threshold(LogThreshold::Main, LogLevel::Warning);
        rpma_log!(LogLevel::Error, "e{}", 1);
        rpma_log!(LogLevel::Info, "hidden");
        set_threshold(LogThreshold::Main, LogLevel::Debug);
        rpma_log!(LogLevel::Debug, "d");
        set_threshold(LogThreshold::Main, LogLevel::Disabled);
        rpma_log!(LogLevel::Fatal, "off");
        // `enabled` follows the higher of the two thresholds.
        assert!(!enabled(LogLevel::Fatal));
        set_threshold(LogThreshold::Aux, LogLevel::Info);
        assert!(enabled(LogLevel::Info) && !enabled(LogLevel::Debug));
        set_threshold(LogThreshold::Aux, LogLevel::Disabled);
        assert!(!enabled(LogLevel::Fatal));
        set_function(None);
        set_threshold(LogThreshold::Main, LogLevel::Warning);
        assert_eq!(threshold(LogThreshold::Main), LogLevel::Warning);
        assert_eq!(*seen.lock().unwrap(), vec![(LogLevel::Error, "e1".into()), (LogLevel::Debug, "d".into())]);
    }

    #[test]
    fn aux_format_is_librpmas() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::new(1_700_000_000, 123_456_000);
        let line = format_aux(
            &LogRecord { level: LogLevel::Warning, file: "mr.rs", line: 7, func: "rpma::mr", args: format_args!("hi") },
            t,
        );
        assert!(line.starts_with(&format!("Nov 14 22:13:20.123456 [{}] ", rpma_sys::thread_id())), "{line}");
        assert!(line.ends_with("*WARNING* mr.rs: 7: rpma::mr: hi"), "{line}");
        assert_eq!(month_day(0), (1, 1));
        assert_eq!(month_day(59), (3, 1)); // 1970 is not a leap year
    }
}
