//! log: librpma's two log thresholds and a custom log function (librpma's
//! `log` example). Runs on the host; no device needed.
//!
//! `cargo run --example log`

use rpma::logging::{self, LogLevel, LogRecord, LogThreshold};

fn main() {
    // Messages at or below the main threshold reach the log function.
    logging::set_threshold(LogThreshold::Main, LogLevel::Info);
    // The default function also prints those at or below aux to stderr.
    logging::set_threshold(LogThreshold::Aux, LogLevel::Disabled);
    println!(
        "main threshold {:?}, aux {:?}",
        logging::threshold(LogThreshold::Main),
        logging::threshold(LogThreshold::Aux)
    );

    logging::set_function(Some(Box::new(|r: &LogRecord<'_>| {
        println!("custom log function: [{:?}] {}:{} {}: {}", r.level, r.file, r.line, r.func, r.args);
    })));
    for (lvl, what) in [
        (LogLevel::Error, "an error"),
        (LogLevel::Notice, "a notice"),
        (LogLevel::Info, "some info"),
        (LogLevel::Debug, "debug detail (below the threshold: not shown)"),
    ] {
        logging::emit(lvl, module_path!(), file!(), line!(), module_path!(), format_args!("{what}"));
    }
    logging::set_function(None);
    // Back to the default function: through the `log` facade (env_logger),
    // and back to the main threshold's default, where `log`'s filter
    // (RUST_LOG) decides.
    logging::reset_threshold(LogThreshold::Main);
    env_logger::builder().filter_level(log::LevelFilter::Info).init();
    logging::emit(
        LogLevel::Warning,
        module_path!(),
        file!(),
        line!(),
        module_path!(),
        format_args!("through the log facade"),
    );
}
