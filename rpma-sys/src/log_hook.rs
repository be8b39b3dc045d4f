//! Where rpma-sys' own log records go: to the `log` facade (target: the
//! module, e.g. `rpma_sys::qp`) until a library above installs a hook
//! ([`set`]), as rpma does so that its thresholds and log function (and
//! librpma's, through its C ABI) see them too.

use std::fmt;
use std::sync::OnceLock;

/// A log record's way out: its level, target (module path), file (as
/// `file!()` gives it), line and text.
pub type Hook = fn(log::Level, &'static str, &'static str, u32, fmt::Arguments<'_>);

static HOOK: OnceLock<Hook> = OnceLock::new();

/// Routes every later record through `hook`; the first hook set stays.
pub fn set(hook: Hook) {
    let _ = HOOK.set(hook);
}

/// One record: through the hook, else to the `log` facade.
#[cold]
pub fn emit(level: log::Level, target: &'static str, file: &'static str, line: u32, args: fmt::Arguments<'_>) {
    match HOOK.get() {
        Some(h) => h(level, target, file, line, args),
        None => to_facade(level, target, file, line, args),
    }
}

/// One record to the `log` facade with its own target (module path), file
/// and line, so a logger filters by module (`RUST_LOG=rpma::conn=debug`)
/// and prints where it was made; nothing above `log::max_level()`.
pub fn to_facade(level: log::Level, target: &'static str, file: &'static str, line: u32, args: fmt::Arguments<'_>) {
    if level <= log::max_level() {
        log::logger().log(
            &log::Record::builder()
                .level(level)
                .target(target)
                .module_path_static(Some(target))
                .file_static(Some(file))
                .line(Some(line))
                .args(args)
                .build(),
        );
    }
}

/// `sys_log!(Error, "...", args)`: a record of this module.
macro_rules! sys_log {
    ($lvl:ident, $($arg:tt)+) => {
        $crate::log_hook::emit(::log::Level::$lvl, module_path!(), file!(), line!(), format_args!($($arg)+))
    };
}
pub(crate) use sys_log;
