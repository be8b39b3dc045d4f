//! `rpma bench`'s report: a row per size with perftest's names, as text
//! (perftest's tables) or JSON.

use super::BenchArgs;
use super::Workload;
use crate::stats::Latency;
use hdrhistogram::Histogram;
use serde::Serialize;

/// One size's result, with perftest's names (bandwidth in MiB/s, or Gb/s
/// with `--report_gbits`; times in microseconds).
#[derive(Serialize, Debug, PartialEq)]
#[allow(non_snake_case)]
pub(super) struct Row {
    MsgSize: usize,
    n_iterations: u64,
    BW_peak: f64,
    BW_average: f64,
    /// Millions of operations a second.
    MsgRate: f64,
    #[serde(flatten)]
    lat: Latency,
    /// Seconds measured.
    seconds: f64,
    /// The process's CPU time over the wall time measured, in percent
    /// (over 100 with several threads busy).
    cpu_util: f64,
}

/// A run's rows, and the bandwidth's unit.
#[derive(Serialize)]
pub(super) struct Rows {
    pub(super) bw_unit: &'static str,
    /// What a latency is: `operation to completion`, or `half a ping-pong`.
    pub(super) latency: &'static str,
    pub(super) results: Vec<Row>,
}

impl Row {
    /// The row of `ops` operations of `size` bytes in `seconds` (the best
    /// 100 ms window's rate `peak_ops_per_s`), latencies `h` (ns).
    pub(super) fn new(
        size: usize,
        h: &Histogram<u64>,
        seconds: f64,
        peak_ops_per_s: f64,
        cpu: f64,
        gbits: bool,
    ) -> Row {
        let ops = h.len();
        let rate = if seconds > 0.0 { ops as f64 / seconds } else { 0.0 };
        let bw = |r: f64| if gbits { r * size as f64 * 8.0 / 1e9 } else { r * size as f64 / (1u64 << 20) as f64 };
        Row {
            MsgSize: size,
            n_iterations: ops,
            BW_peak: bw(peak_ops_per_s.max(rate)),
            BW_average: bw(rate),
            MsgRate: rate / 1e6,
            lat: Latency::of_histogram(h),
            seconds,
            cpu_util: if seconds > 0.0 { 100.0 * cpu / seconds } else { 0.0 },
        }
    }
}

/// The process's user and system CPU time so far, in seconds (from
/// `/proc/self/stat`, in USER_HZ ticks of 10 ms; `None` where it cannot be
/// read).
pub(super) fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command name, which may hold spaces: state is
    // field 3, utime 14 and stime 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

/// The report as perftest prints it: a banner, then the bandwidth and the
/// latency tables, a row per size.
pub(super) fn text(a: &BenchArgs, device: &str, unit: &str, rows: &[Row]) -> String {
    let line = "-".repeat(87);
    let mut o = format!("{line}\n{:^87}\n", format!("{} test (rpma bench)", a.workload.title()));
    o += &format!(
        " Device: {device}   Target: {}:{}   Connections: {}   Threads: {}   TX depth: {}\n",
        a.target.addr,
        a.target.port(),
        a.qp,
        a.threads,
        a.tx_depth
    );
    o += &format!(
        " Completions: {}   Offsets: {}   Warm-up: {} operations{}\n",
        if a.events { "events" } else { "busy-polled" },
        if a.random { "random" } else { "sequential" },
        a.warmup,
        a.rwmixread.map(|p| format!("   Reads: {p} %")).unwrap_or_default()
    );
    if a.pingpong {
        let test = if a.workload == Workload::Send { "send" } else { "write" };
        o += &format!(" Latency: half a ping-pong (the target answers each with its own, as ib_{test}_lat)\n");
    }
    o += &format!("{line}\n");
    o += &format!(
        " {:<10} {:<14} {:<20} {:<22} {:<15} {}\n",
        "#bytes",
        "#iterations",
        format!("BW peak[{unit}]"),
        format!("BW average[{unit}]"),
        "MsgRate[Mpps]",
        "CPU_Util[%]"
    );
    for r in rows {
        o += &format!(
            " {:<10} {:<14} {:<20.2} {:<22.2} {:<15.6} {:.2}\n",
            r.MsgSize, r.n_iterations, r.BW_peak, r.BW_average, r.MsgRate, r.cpu_util
        );
    }
    o += &format!(
        " {:<10} {:<14} {:<14} {:<14} {:<18} {:<14} {:<16} {:<23} {}\n",
        "#bytes",
        "#iterations",
        "t_min[usec]",
        "t_max[usec]",
        "t_typical[usec]",
        "t_avg[usec]",
        "t_stdev[usec]",
        "99% percentile[usec]",
        "99.9% percentile[usec]"
    );
    for r in rows {
        o += &format!(
            " {:<10} {:<14} {:<14.2} {:<14.2} {:<18.2} {:<14.2} {:<16.2} {:<23.2} {:.2}\n",
            r.MsgSize,
            r.n_iterations,
            r.lat.t_min,
            r.lat.t_max,
            r.lat.t_typical,
            r.lat.t_avg,
            r.lat.t_stdev,
            r.lat.percentile_99,
            r.lat.percentile_99_9
        );
    }
    o + &line + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::tests::parse;

    #[test]
    fn a_row_is_consistent_and_the_text_shows_its_numbers() {
        let mut h = Histogram::<u64>::new(3).unwrap();
        for ns in [10_000u64, 20_000, 30_000, 40_000, 1_000_000] {
            h.record(ns).unwrap();
        }
        let r = Row::new(4096, &h, 0.5, 20.0, 0.25, false);
        assert_eq!(r.n_iterations, 5);
        assert!((r.MsgRate - 10.0 / 1e6).abs() < 1e-12, "rate = operations / seconds");
        assert!((r.BW_average - 10.0 * 4096.0 / 1048576.0).abs() < 1e-9, "bandwidth = rate x size");
        assert!((r.BW_peak - 20.0 * 4096.0 / 1048576.0).abs() < 1e-9);
        let l = &r.lat;
        assert!(l.t_min <= l.t_typical && l.t_typical <= l.percentile_99 && l.percentile_99 <= l.percentile_99_9);
        assert!(l.percentile_99_9 <= l.t_max && l.t_min <= l.t_avg && l.t_avg <= l.t_max);
        assert!((r.cpu_util - 50.0).abs() < 1e-9);
        // A peak below the average (a run shorter than a window) is the average.
        assert_eq!(Row::new(8, &h, 0.5, 0.0, 0.0, false).BW_peak, Row::new(8, &h, 0.5, 0.0, 0.0, false).BW_average);
        let g = Row::new(4096, &h, 0.5, 0.0, 0.0, true);
        assert!((g.BW_average - 10.0 * 4096.0 * 8.0 / 1e9).abs() < 1e-12, "Gb/s");
        let t = text(&parse(&[]).unwrap(), "rxe0", "MiB/sec", std::slice::from_ref(&r));
        for want in ["BW peak[MiB/sec]", "t_typical[usec]", "99.9% percentile[usec]", "rxe0", "busy-polled"] {
            assert!(t.contains(want), "{want}: {t}");
        }
        assert!(t.contains(&format!("{:.2}", r.lat.t_avg)) && t.contains(&format!("{:.2}", r.BW_average)), "{t}");
    }

    #[test]
    fn cpu_time_is_read() {
        assert!(cpu_seconds().is_some_and(|s| s >= 0.0));
    }
}
