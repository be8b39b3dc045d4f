//! Logging: the [`log`] crate's filter for Rust callers, librpma's two
//! thresholds where they are set (as the C ABI sets them).
//!
//! Every message the library emits has a [`LogLevel`]. The default log
//! function forwards it to the [`log`] facade with its module as target
//! (`rpma::conn::parts`, `rpma_sys::qp`) and its file (relative to its
//! crate) and line, so `env_logger` or any other logger shows it, and
//! **`log`'s own filter decides**: by default the main threshold is not set
//! and follows [`::log::max_level`], so `RUST_LOG=rpma=debug` shows rpma's
//! debug lines in release builds too, and `RUST_LOG=rpma::mr=debug` those
//! of one module. rpma-sys' records go the same way once a device context
//! or mapping exists.
//!
//! librpma's thresholds keep their meaning once set:
//!
//! * **main** ([`set_threshold`]`(`[`LogThreshold::Main`]`, ..)`): only
//!   messages at or below it reach the log function at all, whatever `log`
//!   would let through. [`reset_threshold`] returns to following `log`.
//! * **aux**: messages at or below it are also written to stderr in
//!   librpma's format by the default function. Default
//!   [`LogLevel::Disabled`] (librpma's debug builds use WARNING; here the
//!   `log` facade already reaches stderr).
//!
//! [`set_function`] replaces the default function (librpma's
//! `rpma_log_set_function`); it receives the messages the main threshold
//! admits, following `log`'s max level while that threshold is not set.
//! librpma's C ABI (`rpma-capi`) sets main = WARNING and aux = DISABLED when
//! it starts, and installs its own function (syslog), so C callers get
//! librpma's behaviour and `log`'s filter plays no part there.
//!
//! A log function (or the `log` logger) never runs while rpma holds one of
//! its locks: a message logged under one is kept and emitted once the lock
//! is let go, on the same thread. It may call into rpma, set another log
//! function, or panic: the panic stops in rpma.
//!
//! ```
//! use rpma::logging::{self, LogLevel, LogThreshold};
//! // Rust callers: the logger's filter decides.
//! log::set_max_level(log::LevelFilter::Info);
//! assert_eq!(logging::threshold(LogThreshold::Main), LogLevel::Info);
//! // librpma's semantics: an explicit main threshold filters first.
//! logging::set_threshold(LogThreshold::Main, LogLevel::Warning);
//! assert_eq!(logging::threshold(LogThreshold::Main), LogLevel::Warning);
//! logging::set_function(Some(Box::new(|r: &logging::LogRecord<'_>| {
//!     eprintln!("[{:?}] {} {}:{} {}", r.level, r.target, r.file, r.line, r.args);
//! })));
//! logging::set_function(None); // back to the default function
//! logging::reset_threshold(LogThreshold::Main); // back to following `log`
//! ```

use std::fmt;

mod stderr_line;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::RwLock;
use stderr_line::format_aux;

/// Severity of a message, librpma's `RPMA_LOG_*` values.
///
/// ```
/// use rpma::logging::LogLevel;
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
    /// Messages at or below it reach the log function. Not set by default:
    /// then it follows [`::log::max_level`].
    Main,
    /// Messages at or below it also go to stderr (default function only).
    Aux,
}

/// One message, as handed to a log function.
#[derive(Debug)]
#[non_exhaustive]
pub struct LogRecord<'a> {
    /// Severity.
    pub level: LogLevel,
    /// The module that logged it (`rpma::conn::parts`, `rpma_sys::qp`):
    /// the `log` target its records carry.
    pub target: &'static str,
    /// Source file that logged it, relative to its crate (`src/conn/parts.rs`).
    pub file: &'static str,
    /// Line in that file.
    pub line: u32,
    /// The function that logged it: librpma's name for the C ABI's
    /// records, the module path for the library's own.
    pub func: &'static str,
    /// The message.
    pub args: fmt::Arguments<'a>,
}

/// A user log function (librpma's `rpma_log_function`).
pub type LogFunction = dyn Fn(&LogRecord<'_>) + Send + Sync;

/// `MAIN` while the main threshold is not set: it follows `log`'s max level.
const FOLLOW_LOG: i32 = i32::MIN;
static MAIN: AtomicI32 = AtomicI32::new(FOLLOW_LOG);
static AUX: AtomicI32 = AtomicI32::new(LogLevel::Disabled as i32);
/// The higher of the thresholds that are set, for [`enabled`]'s first test;
/// written only under `SETTING`, after `MAIN` or `AUX` changed.
static EITHER: AtomicI32 = AtomicI32::new(LogLevel::Disabled as i32);
static SETTING: std::sync::Mutex<()> = std::sync::Mutex::new(());
/// The log function: cloned out of the lock before it is called, so a
/// function may set another (or log) without deadlocking.
static FUNCTION: RwLock<Option<std::sync::Arc<LogFunction>>> = RwLock::new(None);

/// Sets a threshold (`rpma_log_set_threshold`). Thread-safe. A main
/// threshold set here filters before the log function, whatever `log`'s
/// filter admits (librpma's meaning; the C ABI sets WARNING at start).
pub fn set_threshold(which: LogThreshold, level: LogLevel) {
    store(which, level as i32);
}

/// Returns a threshold to its default: the main one follows `log`'s max
/// level again (what Rust callers start with), the aux one is
/// [`LogLevel::Disabled`]. Thread-safe.
pub fn reset_threshold(which: LogThreshold) {
    store(
        which,
        match which {
            LogThreshold::Main => FOLLOW_LOG,
            LogThreshold::Aux => LogLevel::Disabled as i32,
        },
    );
}

fn store(which: LogThreshold, v: i32) {
    let _one_setter = SETTING.lock().unwrap_or_else(|p| p.into_inner());
    match which {
        LogThreshold::Main => &MAIN,
        LogThreshold::Aux => &AUX,
    }
    .store(v, Ordering::Relaxed);
    EITHER.store(MAIN.load(Ordering::Relaxed).max(AUX.load(Ordering::Relaxed)), Ordering::Relaxed);
}

/// Reads a threshold (`rpma_log_get_threshold`). A main threshold that is
/// not set reads as the level `log`'s max level admits
/// ([`LevelFilter::Off`](::log::LevelFilter::Off) is
/// [`LogLevel::Disabled`], `Trace` is [`LogLevel::Debug`]).
pub fn threshold(which: LogThreshold) -> LogLevel {
    let v = match which {
        LogThreshold::Main => &MAIN,
        LogThreshold::Aux => &AUX,
    }
    .load(Ordering::Relaxed);
    if v == FOLLOW_LOG {
        return from_log(::log::max_level());
    }
    LogLevel::from_i32(v).unwrap_or(LogLevel::Disabled)
}

/// The level a `log` filter admits, as a threshold.
fn from_log(f: ::log::LevelFilter) -> LogLevel {
    match f {
        ::log::LevelFilter::Off => LogLevel::Disabled,
        ::log::LevelFilter::Error => LogLevel::Error,
        ::log::LevelFilter::Warn => LogLevel::Warning,
        ::log::LevelFilter::Info => LogLevel::Info,
        ::log::LevelFilter::Debug | ::log::LevelFilter::Trace => LogLevel::Debug,
    }
}

/// Whether the main threshold admits `level`: `log`'s max level while it
/// is not set.
#[inline]
fn main_admits(level: LogLevel) -> bool {
    match MAIN.load(Ordering::Relaxed) {
        FOLLOW_LOG => level.to_log().is_some_and(|l| l <= ::log::max_level()),
        main => level as i32 <= main,
    }
}

/// Installs `f` as the log function, or restores the default one with `None`
/// (`rpma_log_set_function`, `RPMA_LOG_USE_DEFAULT_FUNCTION`). A custom
/// function receives every message the main threshold admits (while it is
/// not set: those `log`'s max level admits).
pub fn set_function(f: Option<Box<LogFunction>>) {
    let old = {
        let mut slot = FUNCTION.write().unwrap_or_else(|p| p.into_inner());
        std::mem::replace(&mut *slot, f.map(std::sync::Arc::from))
    };
    drop(old); // the user's closure is dropped outside the lock
}

/// Whether a message at `level` would be emitted (either threshold admits
/// it): public for `rpma_log!`, which tests it before formatting anything,
/// so that a message nothing admits (the debug line of every
/// registration) is never formatted.
#[doc(hidden)]
#[inline]
pub fn enabled(level: LogLevel) -> bool {
    enabled_by_thresholds(level) || (level != LogLevel::Disabled && main_admits(level))
}

/// [`enabled`] for a caller that has set the main threshold (librpma's C
/// ABI sets it at start and never unsets it): one load and compare, since
/// the higher of the set thresholds then decides. With the main threshold
/// unset it may say no where [`enabled`] would follow the `log` crate's
/// filter and say yes.
#[doc(hidden)]
#[inline]
pub fn enabled_by_thresholds(level: LogLevel) -> bool {
    level != LogLevel::Disabled && level as i32 <= EITHER.load(Ordering::Relaxed)
}

/// Emits one message; used through the crate's `rpma_log!` macro. A
/// message logged while this thread holds one of rpma's locks (an
/// [`unlocked::Guard`](crate::unlocked::Guard) lives) is kept, formatted,
/// until the lock is let go, and emitted then: the log function is the
/// caller's code and may call into rpma. A log function that panics is
/// stopped there: its panic never unwinds through rpma.
#[doc(hidden)]
pub fn emit(
    level: LogLevel,
    target: &'static str,
    file: &'static str,
    line: u32,
    func: &'static str,
    args: fmt::Arguments<'_>,
) {
    if level == LogLevel::Disabled {
        return;
    }
    let file = crate_relative(file);
    let main = main_admits(level);
    let aux = level as i32 <= AUX.load(Ordering::Relaxed);
    if !main && !aux {
        return;
    }
    if crate::unlocked::locked() {
        crate::unlocked::later(Kept { level, target, file, line, func, text: args.to_string() });
        return;
    }
    deliver(&LogRecord { level, target, file, line, func, args }, main, aux);
}

// No `log` feature may cap records at compile time (`max_level_*`, or
// `release_max_level_*` in a release build): `RUST_LOG` decides at run
// time in every build. Checked by every build, release ones included.
const _: () = assert!(
    matches!(::log::STATIC_MAX_LEVEL, ::log::LevelFilter::Trace),
    "a `log` feature caps rpma's records at compile time"
);

/// Routes rpma-sys' records through this module (its thresholds, the log
/// function): set when the first device context or mapping is made, before
/// rpma-sys has anything to say.
pub(crate) fn route_sys() {
    rpma_sys::log_hook::set(from_sys);
}

fn from_sys(level: ::log::Level, target: &'static str, file: &'static str, line: u32, args: fmt::Arguments<'_>) {
    let level = match level {
        ::log::Level::Error => LogLevel::Error,
        ::log::Level::Warn => LogLevel::Warning,
        ::log::Level::Info => LogLevel::Info,
        ::log::Level::Debug | ::log::Level::Trace => LogLevel::Debug,
    };
    if enabled(level) {
        emit(level, target, file, line, target, args);
    }
}

/// `file!()` relative to its crate: `src/conn/parts.rs` whether the crate
/// was built in its workspace (`rpma/src/...`) or from a registry (an
/// absolute path ending in `rpma-0.1.0/src/...`).
fn crate_relative(file: &'static str) -> &'static str {
    match file.rfind("/src/") {
        Some(i) => &file[i + 1..],
        None => file,
    }
}

/// Hands `rec` to the log function, outside every lock, stopping a panic.
fn deliver(rec: &LogRecord<'_>, main: bool, aux: bool) {
    let f = FUNCTION.read().unwrap_or_else(|p| p.into_inner()).clone();
    let call = std::panic::AssertUnwindSafe(|| match f.as_deref() {
        Some(f) => {
            if main {
                f(rec)
            }
        }
        None => default_function(rec, main, aux),
    });
    // The panic's own message has been printed by the panic hook.
    let _ = std::panic::catch_unwind(call);
}

/// A message logged under a lock, formatted: emitted when dropped (after
/// the lock, by [`crate::unlocked`]).
struct Kept {
    level: LogLevel,
    target: &'static str,
    file: &'static str,
    line: u32,
    func: &'static str,
    text: String,
}

impl Drop for Kept {
    fn drop(&mut self) {
        // The thresholds are read again: they may have changed meanwhile.
        let main = main_admits(self.level);
        let aux = self.level as i32 <= AUX.load(Ordering::Relaxed);
        if main || aux {
            let (level, target, file, line, func) = (self.level, self.target, self.file, self.line, self.func);
            deliver(&LogRecord { level, target, file, line, func, args: format_args!("{}", self.text) }, main, aux);
        }
    }
}

fn default_function(r: &LogRecord<'_>, main: bool, aux: bool) {
    if let Some(l) = r.level.to_log().filter(|_| main) {
        rpma_sys::log_hook::to_facade(l, r.target, r.file, r.line, r.args);
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

/// `rpma_log!(LogLevel::Error, "...", args)`: log through the thresholds.
macro_rules! rpma_log {
    ($lvl:expr, $($arg:tt)+) => {{
        let lvl = $lvl;
        if $crate::logging::enabled(lvl) {
            $crate::logging::emit(lvl, module_path!(), file!(), line!(), module_path!(), format_args!($($arg)+))
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
        assert_eq!(LogLevel::from_i32(6).unwrap_err().code(), crate::error::RPMA_E_INVAL);
        assert!(LogLevel::from_i32(-2).is_err());
    }

    /// The log tests change the process's thresholds, log function and
    /// `log` max level: one test at a time.
    static SERIAL: Mutex<()> = Mutex::new(());

    fn serial() -> std::sync::MutexGuard<'static, ()> {
        SERIAL.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A logger keeping what reaches the `log` facade from this module's
    /// messages (level, text, file, line); other tests' messages are left
    /// out.
    struct Capture(Mutex<Vec<(::log::Level, String, String, u32)>>);

    impl ::log::Log for Capture {
        fn enabled(&self, _: &::log::Metadata<'_>) -> bool {
            true
        }
        fn log(&self, r: &::log::Record<'_>) {
            // This module's records only: by their target, as a logger's
            // filter (`RUST_LOG=rpma::logging=debug`) selects them.
            if r.target() == module_path!() {
                assert_eq!(r.module_path(), Some(module_path!()));
                let file = r.file().unwrap_or_default().to_string();
                self.0.lock().unwrap().push((r.level(), r.args().to_string(), file, r.line().unwrap_or(0)));
            }
        }
        fn flush(&self) {}
    }

    static CAPTURE: Capture = Capture(Mutex::new(Vec::new()));

    /// What reached the facade since the last call, as (level, message).
    fn forwarded() -> Vec<(::log::Level, String)> {
        static INSTALL: std::sync::Once = std::sync::Once::new();
        INSTALL.call_once(|| ::log::set_logger(&CAPTURE).expect("no other logger in rpma's unit tests"));
        let got = std::mem::take(&mut *CAPTURE.0.lock().unwrap());
        got.into_iter()
            .map(|(l, text, file, line)| {
                // The place that logged it, relative to the crate; the text
                // alone.
                assert_eq!(file, "src/logging.rs");
                assert!(line > 400, "{line}: the line of the rpma_log! in the test");
                (l, text)
            })
            .collect()
    }

    /// A custom function keeping this module's messages.
    fn record_into(seen: &Arc<Mutex<Vec<(LogLevel, String)>>>) -> Box<LogFunction> {
        let seen = seen.clone();
        Box::new(move |r: &LogRecord<'_>| {
            if r.func == module_path!() {
                seen.lock().unwrap().push((r.level, r.args.to_string()))
            }
        })
    }

    /// Rust callers: with the main threshold not set, `log`'s max level
    /// decides (what `RUST_LOG` sets through `env_logger`), in release
    /// builds too, and the logger's filter sees every message it admits.
    #[test]
    fn rust_callers_follow_the_log_filter() {
        let _one = serial();
        forwarded();
        set_function(None);
        reset_threshold(LogThreshold::Main);
        reset_threshold(LogThreshold::Aux);
        ::log::set_max_level(::log::LevelFilter::Debug);
        assert_eq!(threshold(LogThreshold::Main), LogLevel::Debug);
        rpma_log!(LogLevel::Debug, "d{}", 1);
        rpma_log!(LogLevel::Notice, "n");
        ::log::set_max_level(::log::LevelFilter::Warn);
        assert_eq!(threshold(LogThreshold::Main), LogLevel::Warning);
        rpma_log!(LogLevel::Info, "hidden");
        rpma_log!(LogLevel::Error, "e");
        ::log::set_max_level(::log::LevelFilter::Off);
        assert_eq!(threshold(LogThreshold::Main), LogLevel::Disabled);
        assert!(!enabled(LogLevel::Fatal));
        rpma_log!(LogLevel::Fatal, "off");
        ::log::set_max_level(::log::LevelFilter::Trace);
        assert_eq!(threshold(LogThreshold::Main), LogLevel::Debug);
        // A custom function follows `log`'s max level too while the
        // threshold is not set.
        let seen = Arc::new(Mutex::new(Vec::new()));
        set_function(Some(record_into(&seen)));
        rpma_log!(LogLevel::Debug, "custom");
        set_function(None);
        ::log::set_max_level(::log::LevelFilter::Off);
        use ::log::Level;
        let want = [(Level::Debug, "d1"), (Level::Info, "n"), (Level::Error, "e")];
        assert_eq!(forwarded(), want.map(|(l, m)| (l, m.to_string())));
        assert_eq!(*seen.lock().unwrap(), vec![(LogLevel::Debug, "custom".to_string())]);
    }

    /// librpma's meaning, as the C ABI uses it: a main threshold that is
    /// set filters before any log function, whatever `log`'s max level.
    #[test]
    fn set_thresholds_keep_librpmas_meaning() {
        let _one = serial();
        forwarded();
        ::log::set_max_level(::log::LevelFilter::Trace);
        // rpma-capi's start: main WARNING, aux DISABLED.
        set_threshold(LogThreshold::Main, LogLevel::Warning);
        set_threshold(LogThreshold::Aux, LogLevel::Disabled);
        assert_eq!(threshold(LogThreshold::Main), LogLevel::Warning);
        // The default function: the threshold filters before the facade.
        rpma_log!(LogLevel::Debug, "filtered");
        rpma_log!(LogLevel::Warning, "w");
        assert_eq!(forwarded(), vec![(::log::Level::Warn, "w".to_string())]);
        // A custom function (the C ABI installs one).
        let seen = Arc::new(Mutex::new(Vec::new()));
        set_function(Some(record_into(&seen)));
        rpma_log!(LogLevel::Error, "e{}", 1);
        rpma_log!(LogLevel::Info, "hidden");
        set_threshold(LogThreshold::Main, LogLevel::Debug);
        rpma_log!(LogLevel::Debug, "d");
        set_threshold(LogThreshold::Main, LogLevel::Disabled);
        rpma_log!(LogLevel::Fatal, "off");
        assert_eq!(threshold(LogThreshold::Main), LogLevel::Disabled);
        // `enabled` follows the higher of the two thresholds.
        assert!(!enabled(LogLevel::Fatal));
        set_threshold(LogThreshold::Aux, LogLevel::Info);
        assert!(enabled(LogLevel::Info) && !enabled(LogLevel::Debug));
        reset_threshold(LogThreshold::Aux);
        assert!(!enabled(LogLevel::Fatal));
        set_function(None);
        reset_threshold(LogThreshold::Main);
        ::log::set_max_level(::log::LevelFilter::Off);
        assert_eq!(*seen.lock().unwrap(), vec![(LogLevel::Error, "e1".into()), (LogLevel::Debug, "d".into())]);
        assert_eq!(forwarded(), vec![]);
    }

    #[test]
    fn aux_format_is_librpmas() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::new(1_700_000_000, 123_456_000);
        let line = format_aux(
            &LogRecord {
                level: LogLevel::Warning,
                target: "rpma::mr",
                file: "src/mr.rs",
                line: 7,
                func: "rpma::mr",
                args: format_args!("hi"),
            },
            t,
        );
        assert!(line.starts_with(&format!("Nov 14 22:13:20.123456 [{}] ", rpma_sys::thread_id())), "{line}");
        assert!(line.ends_with("*WARNING* src/mr.rs: 7: rpma::mr: hi"), "{line}");
        assert_eq!(crate_relative("rpma/src/conn/parts.rs"), "src/conn/parts.rs");
        assert_eq!(crate_relative("/r/registry/src/index/rpma-0.1.0/src/mr/mod.rs"), "src/mr/mod.rs");
        assert_eq!(stderr_line::month_day(0), (1, 1));
        assert_eq!(stderr_line::month_day(59), (3, 1)); // 1970 is not a leap year
    }
}
