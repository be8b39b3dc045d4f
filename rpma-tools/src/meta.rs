//! What every `--json` report carries beside its figures: the tool and its
//! version, when it ran, where (the device and the address) and every
//! option it ran with, defaults included.

use serde::Serialize;
use std::time::{SystemTime, UNIX_EPOCH};

/// A `--json` report: [`Meta`]'s fields, then the command's own.
#[derive(Serialize)]
pub struct Json<'a, O: Serialize, R: Serialize> {
    #[serde(flatten)]
    pub meta: Meta<'a, O>,
    #[serde(flatten)]
    pub result: R,
}

/// The report's provenance.
#[derive(Serialize)]
pub struct Meta<'a, O: Serialize> {
    /// `rpma`.
    pub tool: &'static str,
    /// The tool's version.
    pub version: &'static str,
    /// When the command started, UTC (RFC 3339).
    pub time: String,
    /// The RDMA device used, when there was one.
    pub device: Option<String>,
    /// The address and port given.
    pub address: Option<&'a str>,
    pub port: Option<u16>,
    /// Every option, as parsed.
    pub options: &'a O,
}

impl<'a, O: Serialize> Meta<'a, O> {
    /// Provenance for a command that started at `started`.
    pub fn new(started: SystemTime, options: &'a O) -> Meta<'a, O> {
        Meta {
            tool: "rpma",
            version: env!("CARGO_PKG_VERSION"),
            time: rfc3339(started),
            device: None,
            address: None,
            port: None,
            options,
        }
    }
}

/// `t` as `YYYY-MM-DDTHH:MM:SSZ` (UTC; a time before 1970 as 1970).
pub fn rfc3339(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem / 60 % 60, rem % 60)
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, for days on or after the epoch).
fn civil(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + u64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn times_print_as_rfc3339() {
        let at = |s| rfc3339(UNIX_EPOCH + Duration::from_secs(s));
        assert_eq!(at(0), "1970-01-01T00:00:00Z");
        assert_eq!(at(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(at(1_796_254_199), "2026-12-02T23:29:59Z");
        assert_eq!(at(4_107_542_400), "2100-03-01T00:00:00Z");
    }
}
