//! librpma's stderr line, as the default function prints it for the aux
//! threshold.

use super::LogRecord;

/// librpma's stderr line: `<Mon DD HH:MM:SS>.<usec> [tid] *LEVEL* file: line: func: msg`
/// (the time is UTC here).
pub(super) fn format_aux(r: &LogRecord<'_>, now: std::time::SystemTime) -> String {
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
pub(super) fn month_day(days: u64) -> (u64, u64) {
    let z = days as i64 + 719_468;
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (m as u64, d as u64)
}
