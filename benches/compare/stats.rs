//! Statistics, perftest-style, and the `RESULT` lines every side prints
//! (the Rust client, the C program, and the orchestrator for perftest and
//! callgrind), so that one parser reads them all.

/// Latency summary in microseconds, as perftest reports it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Lat {
    pub min: f64,
    pub typical: f64,
    pub avg: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

/// Summarises per-operation latencies (µs). `t_typical` is the median, as in
/// perftest.
pub fn lat(mut t: Vec<f64>) -> Lat {
    t.sort_by(|a, b| a.total_cmp(b));
    let n = t.len();
    let at = |q: f64| t[((n as f64 * q) as usize).min(n - 1)];
    Lat {
        min: t[0],
        typical: t[n / 2],
        avg: t.iter().sum::<f64>() / n as f64,
        p99: at(0.99),
        p999: at(0.999),
        max: t[n - 1],
    }
}

pub fn print_lat(imp: &str, case: &str, size: usize, iters: usize, l: &Lat) {
    println!(
        "RESULT lat {imp} {case} {size} {iters} {:.3} {:.3} {:.3} {:.3} {:.3} {:.3}",
        l.min, l.typical, l.avg, l.p99, l.p999, l.max
    );
}

/// A streaming result: `iters` operations in `secs` seconds.
pub fn print_bw(imp: &str, case: &str, size: usize, qd: usize, iters: usize, secs: f64) {
    println!("RESULT bw {imp} {case} {size} {qd} {iters} {:.6}", iters as f64 / secs / 1e6);
}

/// `count` things done in `secs` seconds.
pub fn print_rate(imp: &str, case: &str, count: usize, secs: f64) {
    println!("RESULT rate {imp} {case} {count} {secs:.6}");
}

/// Prints this process's resident set (`VmRSS`, KiB) once its connections
/// are up, as `INFO-MEM imp case kib` (the C program prints the same line).
pub fn print_mem(imp: &str, case: &str) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib =
        status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next()).unwrap_or("0");
    println!("INFO-MEM {imp} {case} {kib}");
}

/// One parsed `RESULT` line.
#[derive(Debug, Clone)]
pub enum Row {
    Lat {
        imp: String,
        case: String,
        size: usize,
        lat: Lat,
    },
    /// Million operations per second.
    Bw {
        imp: String,
        case: String,
        size: usize,
        qd: usize,
        mops: f64,
    },
    Rate {
        imp: String,
        case: String,
        count: usize,
        secs: f64,
    },
    /// User-space instructions per operation.
    Ir {
        imp: String,
        case: String,
        per_op: f64,
    },
}

/// Parses a `RESULT` line; other lines give `None`.
pub fn parse(line: &str) -> Option<Row> {
    let f: Vec<&str> = line.strip_prefix("RESULT ")?.split_whitespace().collect();
    let num = |i: usize| f.get(i).and_then(|s| s.parse::<f64>().ok());
    let (imp, case) = (f.get(1)?.to_string(), f.get(2)?.to_string());
    Some(match *f.first()? {
        "lat" => Row::Lat {
            imp,
            case,
            size: num(3)? as usize,
            lat: Lat { min: num(5)?, typical: num(6)?, avg: num(7)?, p99: num(8)?, p999: num(9)?, max: num(10)? },
        },
        "bw" => Row::Bw { imp, case, size: num(3)? as usize, qd: num(4)? as usize, mops: num(6)? },
        "rate" => Row::Rate { imp, case, count: num(3)? as usize, secs: num(4)? },
        "ir" => Row::Ir { imp, case, per_op: num(3)? },
        _ => return None,
    })
}
