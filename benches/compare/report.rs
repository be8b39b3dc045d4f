//! The report: markdown tables with the three columns and the ratios, and
//! an SVG plot of latency against message size.

use crate::stats::{parse, Lat, Row};
use rpma_harness::stats::{bootstrap_median, median, spread, INTERVAL_ROUNDS};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

const IMPS: [&str; 3] = ["verbs", "librpma", "rpma"];

fn num(x: f64, digits: usize) -> String {
    if x.is_finite() {
        format!("{x:.digits$}")
    } else {
        "n/a".into()
    }
}

fn ratio(a: f64, b: f64) -> String {
    if a.is_finite() && b.is_finite() && b > 0.0 {
        format!("{:.2}", a / b)
    } else {
        "n/a".into()
    }
}

/// The columns the latency, bandwidth and instruction tables share: the four
/// implementations' cells, then rpma/verbs, rpma/librpma and
/// unheld/librpma of `value` (per round: see [`round_ratio`]).
fn imp_columns(cell: impl Fn(&str) -> String, value: impl Fn(&str) -> Vec<f64>) -> String {
    format!(
        "{} | {} | {} | {} | {} | {} | {}",
        cell("verbs"),
        cell("librpma"),
        cell("rpma"),
        cell("rpma-unheld"),
        round_ratio(&value("rpma"), &value("verbs")),
        round_ratio(&value("rpma"), &value("librpma")),
        round_ratio(&value("rpma-unheld"), &value("librpma"))
    )
}

/// `a / b` from their rounds: with the same number of rounds (at least
/// two) on both sides, the median of the per-round ratios and their range,
/// from [`INTERVAL_ROUNDS`] rounds also a 95% interval of that median
/// ([`bootstrap_median`]); otherwise the ratio of the medians.
fn round_ratio(a: &[f64], b: &[f64]) -> String {
    let r = per_round(a, b).filter(|r| r.len() >= 2).unwrap_or_default();
    let Some((m, lo, hi)) = spread(r.clone()) else {
        return ratio(median(a.to_vec()), median(b.to_vec()));
    };
    if r.len() >= INTERVAL_ROUNDS {
        let (blo, bhi) = bootstrap_median(&r);
        format!("{m:.2} ({lo:.2}-{hi:.2}; 95% {blo:.2}-{bhi:.2})")
    } else {
        format!("{m:.2} ({lo:.2}-{hi:.2})")
    }
}

/// The per-round ratios `a[i] / b[i]` (`None` when the rounds do not pair
/// up).
fn per_round(a: &[f64], b: &[f64]) -> Option<Vec<f64>> {
    (!a.is_empty() && a.len() == b.len()).then(|| a.iter().zip(b).map(|(x, y)| x / y).collect())
}

/// The per-round ratios `a[i] / b[i]`: their median, min and max (`None`
/// when the rounds do not pair up).
fn paired_ratios(a: &[f64], b: &[f64]) -> Option<(f64, f64, f64)> {
    per_round(a, b).and_then(spread)
}

/// One latency summary from several rounds: the median of each field.
fn mid_lat(rounds: &[Lat]) -> Lat {
    let m = |f: fn(&Lat) -> f64| median(rounds.iter().map(f).collect());
    Lat {
        min: m(|l| l.min),
        typical: m(|l| l.typical),
        avg: m(|l| l.avg),
        p99: m(|l| l.p99),
        p999: m(|l| l.p999),
        max: m(|l| l.max),
    }
}

/// Latency cases in report order, with their labels.
const LAT_CASES: [(&str, &str); 6] = [
    ("read", "read"),
    ("write", "write + completion"),
    ("write_pingpong", "write ping-pong (as ib_write_lat; half round trip)"),
    ("write_flush", "write + flush, waited"),
    ("atomic_write", "atomic_write"),
    ("pingpong", "send/recv ping-pong (half round trip)"),
];

fn size_label(s: usize) -> String {
    if s >= 1024 {
        format!("{} KiB", s / 1024)
    } else {
        format!("{s} B")
    }
}

/// Builds the markdown report and the SVG plot from `RESULT` lines.
pub fn write(lines: &[String], out: &Path, took: Duration) -> Result<(), Box<dyn std::error::Error>> {
    let rows: Vec<Row> = lines.iter().filter_map(|l| parse(l)).collect();
    let info = lines.iter().find_map(|l| l.strip_prefix("INFO ")).unwrap_or("").to_string();
    // A latency or bandwidth case measured in several rounds has one entry
    // per round.
    let mut lat_rounds: BTreeMap<(String, usize, String), Vec<Lat>> = BTreeMap::new();
    let mut bw_rounds: BTreeMap<(String, usize, usize, String), Vec<f64>> = BTreeMap::new();
    let mut ir: BTreeMap<(String, String), f64> = BTreeMap::new();
    // A case measured in several rounds has one entry per round.
    let mut rate: BTreeMap<(String, String), Vec<(usize, f64)>> = BTreeMap::new();
    // The commit's latency, one entry per round, by implementation.
    let mut commit: BTreeMap<String, Vec<Lat>> = BTreeMap::new();
    for r in rows {
        match r {
            Row::Lat { imp, case, size: _, lat: l } if case == "commit" => commit.entry(imp).or_default().push(l),
            Row::Lat { imp, case, size, lat: l } => lat_rounds.entry((case, size, imp)).or_default().push(l),
            Row::Bw { imp, case, size, qd, mops } => bw_rounds.entry((case, size, qd, imp)).or_default().push(mops),
            Row::Ir { imp, case, per_op } => {
                ir.insert((case, imp), per_op);
            }
            Row::Rate { imp, case, count, secs } => {
                rate.entry((case, imp)).or_default().push((count, secs));
            }
        }
    }

    // Each case's median over its rounds (a single round as it is).
    let lat: BTreeMap<(String, usize, String), Lat> = lat_rounds.iter().map(|(k, v)| (k.clone(), mid_lat(v))).collect();
    let bw: BTreeMap<(String, usize, usize, String), f64> =
        bw_rounds.iter().map(|(k, v)| (k.clone(), median(v.clone()))).collect();
    let rounds = lat_rounds.get(&("read".to_string(), 8, "rpma".to_string())).map_or(0, Vec::len);

    let mut md = String::new();
    writeln!(md, "Measured {info}; the whole run took {:.0} s.\n", took.as_secs_f64())?;
    for note in lines.iter().filter_map(|l| l.strip_prefix("INFO-NOTE ")) {
        writeln!(md, "Note: {note}.\n")?;
    }
    writeln!(md, "### Latency (µs): t_typical (median) / t_avg / p99; ratios of t_avg\n")?;
    let verbs_rounds = lat_rounds.get(&("read".to_string(), 8, "verbs".to_string())).map_or(0, Vec::len);
    let perftest_note = match verbs_rounds {
        0 => "perftest: no round".to_string(),
        1 => "perftest: one round".to_string(),
        n if n == rounds => "perftest in each round beside them, its ratios per round too".to_string(),
        n => format!("perftest: {n} rounds (ratios to it of the medians)"),
    };
    let rounds_note = match rounds {
        0 | 1 => format!("rpma and C librpma: one round each; {perftest_note}.\n"),
        n => format!(
            "rpma and C librpma: {n} rounds of rotating order; each cell the median of the rounds, each ratio \
             the median of the per-round ratios (min-max{}); {perftest_note}.\n",
            if n >= INTERVAL_ROUNDS { "; from the rounds resampled, a 95% interval of that median" } else { "" }
        ),
    };
    writeln!(md, "{rounds_note}")?;
    writeln!(
        md,
        "| operation | size | verbs (perftest) | C librpma | rpma | rpma `ops::Unheld` | rpma/verbs | rpma/librpma | unheld/librpma |"
    )?;
    writeln!(md, "|---|---|---|---|---|---|---|---|---|")?;
    for (case, label) in LAT_CASES {
        let mut sizes: Vec<usize> = lat.keys().filter(|k| k.0 == case).map(|k| k.1).collect();
        sizes.dedup();
        for size in sizes {
            let get = |imp: &str| lat.get(&(case.to_string(), size, imp.to_string())).copied();
            let cell = |imp: &str| match get(imp) {
                Some(l) => format!("{} / {} / {}", num(l.typical, 1), num(l.avg, 1), num(l.p99, 1)),
                None => "n/a".into(),
            };
            let avg = |imp: &str| {
                lat_rounds
                    .get(&(case.to_string(), size, imp.to_string()))
                    .map_or(Vec::new(), |v| v.iter().map(|l| l.avg).collect())
            };
            writeln!(md, "| {label} | {} | {} |", size_label(size), imp_columns(cell, avg))?;
        }
    }

    writeln!(
        md,
        "\nThe verbs column where perftest has no such measurement: `write + completion` is \
         `ib_write_bw` at depth 1, every write signaled (its average only: perftest times no single \
         write and its completion; `ib_write_lat` is the ping-pong row); `write + flush` and \
         `atomic_write`: perftest has neither a flush nor an atomic write. A cell that perftest should \
         fill but did not says so in a note above."
    )?;
    writeln!(md, "\n### Bandwidth and message rate (every operation signaled)\n")?;
    writeln!(md, "{rounds_note}")?;
    writeln!(
        md,
        "| operation | size | queue depth | verbs | C librpma | rpma | rpma `ops::Unheld` | rpma/verbs | rpma/librpma | unheld/librpma |"
    )?;
    writeln!(md, "|---|---|---|---|---|---|---|---|---|---|")?;
    for (case, size, qd) in bw.keys().map(|k| (k.0.clone(), k.1, k.2)).collect::<std::collections::BTreeSet<_>>() {
        let get = |imp: &str| bw.get(&(case.clone(), size, qd, imp.to_string())).copied().unwrap_or(f64::NAN);
        let cell = |imp: &str| {
            let m = get(imp);
            if case == "send" {
                format!("{} Mmsg/s", num(m, 4))
            } else {
                format!("{} MiB/s", num(m * 1e6 * size as f64 / (1 << 20) as f64, 1))
            }
        };
        let all = |imp: &str| bw_rounds.get(&(case.clone(), size, qd, imp.to_string())).cloned().unwrap_or_default();
        writeln!(md, "| {case} | {} | {qd} | {} |", size_label(size), imp_columns(cell, all))?;
    }

    writeln!(md, "\n### User-space instructions per operation (callgrind; 8 bytes, post + blocking wait + poll)\n")?;
    writeln!(
        md,
        "The verbs column: `ib_read_lat -e` (event mode, as the libraries wait); perftest's write tests \
         have no event mode, so `write` has no raw-verbs count.\n"
    )?;
    writeln!(
        md,
        "| operation | verbs (perftest -e) | C librpma | rpma | rpma `ops::Unheld` | rpma/verbs | rpma/librpma | unheld/librpma |"
    )?;
    writeln!(md, "|---|---|---|---|---|---|---|---|")?;
    for case in ["read", "write"] {
        let get = |imp: &str| ir.get(&(case.to_string(), imp.to_string())).copied().unwrap_or(f64::NAN);
        writeln!(md, "| {case} | {} |", imp_columns(|imp| num(get(imp), 0), |imp| vec![get(imp)]))?;
    }

    if ir.keys().any(|(_, imp)| imp == "baseline") {
        writeln!(
            md,
            "\n### This build against the baseline build (RPMA_BENCH_BASELINE; instructions per operation)\n"
        )?;
        writeln!(md, "| operation | variant | baseline | this build | this/baseline |")?;
        writeln!(md, "|---|---|---|---|---|")?;
        for (case, suffix, variant) in [
            ("read", "unheld", "rpma-unheld"),
            ("write", "unheld", "rpma-unheld"),
            ("write_flush", "emulated", "rpma-emulated"),
            ("atomic_write", "emulated", "rpma-emulated"),
        ] {
            let get = |imp: &str| ir.get(&(case.to_string(), imp.to_string())).copied().unwrap_or(f64::NAN);
            for (label, base, this) in
                [("safe", "baseline".to_string(), "rpma"), (suffix, format!("baseline-{suffix}"), variant)]
            {
                let (b, t) = (get(&base), get(this));
                writeln!(md, "| {case} | {label} | {} | {} | {} |", num(b, 0), num(t, 0), ratio(t, b))?;
            }
        }
    }

    writeln!(md, "\n### Native against emulated flush and atomic write (8 B; native where the device and libibverbs have them)\n")?;
    writeln!(md, "| operation | C librpma | rpma | rpma, native off | rpma/librpma | native off/rpma |")?;
    writeln!(md, "|---|---|---|---|---|---|")?;
    for case in ["write_flush", "atomic_write"] {
        let l = |imp: &str| lat.get(&(case.to_string(), 8, imp.to_string())).copied();
        let cell = |imp: &str| l(imp).map_or("n/a".into(), |l| format!("{} µs", num(l.typical, 1)));
        let med = |imp: &str| l(imp).map_or(f64::NAN, |l| l.typical);
        let i = |imp: &str| ir.get(&(case.to_string(), imp.to_string())).copied().unwrap_or(f64::NAN);
        writeln!(
            md,
            "| {case} latency (median) | {} | {} | {} | {} | {} |",
            cell("librpma"),
            cell("rpma"),
            cell("rpma-emulated"),
            ratio(med("rpma"), med("librpma")),
            ratio(med("rpma-emulated"), med("rpma"))
        )?;
        writeln!(
            md,
            "| {case} instructions | {} | {} | {} | {} | {} |",
            num(i("librpma"), 0),
            num(i("rpma"), 0),
            num(i("rpma-emulated"), 0),
            ratio(i("rpma"), i("librpma")),
            ratio(i("rpma-emulated"), i("rpma"))
        )?;
    }

    writeln!(
        md,
        "\n### Small writes, inline against not (latency µs: t_typical / t_avg; `write` + completion, signaled)\n"
    )?;
    writeln!(
        md,
        "rpma's `write_inline` and `write` on one connection asking for 256 inline bytes, in interleaved rounds; \
         `write` on the default connection and C librpma's `rpma_write` (which has no inline write) from the \
         latency table.\n"
    )?;
    writeln!(
        md,
        "| size | C librpma `write` | rpma `write` | rpma `write`, inline-sized QP | rpma `write_inline` | inline/write (same QP) | inline/librpma |"
    )?;
    writeln!(md, "|---|---|---|---|---|---|---|")?;
    for size in crate::rpma_side::INLINE_SIZES {
        let get = |case: &str, imp: &str| lat.get(&(case.to_string(), size, imp.to_string())).copied();
        let cell = |l: Option<Lat>| l.map_or("n/a".into(), |l| format!("{} / {}", num(l.typical, 1), num(l.avg, 1)));
        let med = |l: Option<Lat>| l.map_or(f64::NAN, |l| l.typical);
        let (lib, plain) = (get("write", "librpma"), get("write", "rpma"));
        let (noinl, inl) = (get("small_write", "rpma-noinline"), get("small_write", "rpma-inline"));
        writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} |",
            size_label(size),
            cell(lib),
            cell(plain),
            cell(noinl),
            cell(inl),
            ratio(med(inl), med(noinl)),
            ratio(med(inl), med(lib))
        )?;
    }
    let i = |case: &str, imp: &str| ir.get(&(case.to_string(), imp.to_string())).copied().unwrap_or(f64::NAN);
    writeln!(
        md,
        "| 8 B, instructions | {} | {} | | {} | {} (against `write`) | {} |",
        num(i("write", "librpma"), 0),
        num(i("write", "rpma"), 0),
        num(i("write_inline", "rpma-inline"), 0),
        ratio(i("write_inline", "rpma-inline"), i("write", "rpma")),
        ratio(i("write_inline", "rpma-inline"), i("write", "librpma"))
    )?;

    writeln!(
        md,
        "\n### librpma example 07's commit (write 8 B -> flush -> atomic_write -> flush, the last signaled, waited)\n"
    )?;
    writeln!(md, "| | C librpma (4 calls) | rpma (4 posts) | rpma chain (1 post) | chain/librpma | 4 posts/librpma | chain/4 posts |")?;
    writeln!(md, "|---|---|---|---|---|---|---|")?;
    // Latency: the median of each round; ratios: the median of the per-round ratios (min-max).
    let rounds = |imp: &str| commit.get(imp).map_or(Vec::new(), |v| v.iter().map(|l| l.typical).collect::<Vec<_>>());
    let per_round = |a: &str, b: &str| {
        let (ra, rb) = (rounds(a), rounds(b));
        paired_ratios(&ra, &rb)
            .map_or("n/a".to_string(), |(m, lo, hi)| format!("{m:.2} ({lo:.2}-{hi:.2}, {} rounds)", ra.len()))
    };
    let cell = |imp: &str| format!("{} µs", num(median(rounds(imp)), 1));
    writeln!(
        md,
        "| latency (median) | {} | {} | {} | {} | {} | {} |",
        cell("librpma"),
        cell("rpma"),
        cell("rpma-chain"),
        per_round("rpma-chain", "librpma"),
        per_round("rpma", "librpma"),
        per_round("rpma-chain", "rpma")
    )?;
    let i = |imp: &str| ir.get(&("commit".to_string(), imp.to_string())).copied().unwrap_or(f64::NAN);
    writeln!(
        md,
        "| instructions | {} | {} | {} | {} | {} | {} |",
        num(i("librpma"), 0),
        num(i("rpma"), 0),
        num(i("rpma-chain"), 0),
        ratio(i("rpma-chain"), i("librpma")),
        ratio(i("rpma"), i("librpma")),
        ratio(i("rpma-chain"), i("rpma"))
    )?;

    writeln!(md, "\n### Scale\n")?;
    writeln!(md, "| what | verbs | C librpma | rpma | rpma/verbs | rpma/librpma |")?;
    writeln!(md, "|---|---|---|---|---|---|")?;
    for (case, label, unit, per) in [
        ("conn", "connection set-up + tear-down (200 in a row)", "conn/s", 1.0),
        ("reg_2m", "register + deregister 1 GiB as 512 x 2 MiB", "GiB/s", 2.0 / 1024.0),
        ("reg_1g", "register + deregister one 1 GiB region", "GiB/s", 1.0),
    ] {
        // a rate: things (or GiB) per second, higher is better; per round
        let rounds = |imp: &str| -> Vec<f64> {
            rate.get(&(case.to_string(), imp.to_string()))
                .map_or(Vec::new(), |v| v.iter().map(|&(n, secs)| n as f64 * per / secs).collect())
        };
        let get = |imp: &str| median(rounds(imp));
        // With several rounds: the median of the per-round ratios, min-max.
        let ratio_cell = |a: &str, b: &str| {
            let (ra, rb) = (rounds(a), rounds(b));
            match paired_ratios(&ra, &rb) {
                Some((m, lo, hi)) if ra.len() >= 2 => format!("{m:.2} ({lo:.2}-{hi:.2}, {} rounds)", ra.len()),
                _ => ratio(get(a), get(b)),
            }
        };
        let cell = |imp: &str| format!("{} {unit}", num(get(imp), 2));
        writeln!(
            md,
            "| {label} | {} | {} | {} | {} | {} |",
            if get("verbs").is_finite() { cell("verbs") } else { "n/a".into() },
            cell("librpma"),
            cell("rpma"),
            ratio_cell("rpma", "verbs"),
            ratio_cell("rpma", "librpma")
        )?;
    }

    writeln!(md, "\n### Many connections, one thread\n")?;
    writeln!(
        md,
        "Every connection keeps one 8-byte read in flight; one thread serves all. C librpma and rpma \
         (per-connection CQs): each connection's CQ on its own completion channel, one epoll loop. \
         rpma SharedCq: all connections on one CQ, each completion finding its connection by its op context. One round each (interleaved rounds at 16 to 1024: benches/compare/scale-rounds.sh).\n"
    )?;
    writeln!(md, "| connections | C librpma | rpma per-connection CQs | rpma SharedCq | SharedCq/per-connection | SharedCq/librpma |")?;
    writeln!(md, "|---|---|---|---|---|---|")?;
    for n in [1, 16, 64, 256] {
        let case = format!("scch{n}");
        let get = |imp: &str| {
            median(
                rate.get(&(case.clone(), imp.to_string()))
                    .map_or(Vec::new(), |v| v.iter().map(|&(ops, secs)| ops as f64 / secs / 1e3).collect()),
            )
        };
        let (c, p, s) = (get("librpma"), get("rpma"), get("rpma-scq"));
        writeln!(
            md,
            "| {n} | {} kops/s | {} kops/s | {} kops/s | {} | {} |",
            num(c, 1),
            num(p, 1),
            num(s, 1),
            ratio(s, p),
            ratio(s, c)
        )?;
    }

    std::fs::create_dir_all(out)?;
    std::fs::write(out.join("compare.md"), &md)?;
    std::fs::write(out.join("latency.svg"), svg(&lat))?;
    println!("\n{md}");
    println!("report: {}/compare.md, plot: {}/latency.svg", out.display(), out.display());
    Ok(())
}

/// Latency (t_avg) against size, log-log, for read and write, three lines each.
fn svg(lat: &BTreeMap<(String, usize, String), Lat>) -> String {
    let (w, h, ml, mr, mt, mb) = (760.0, 440.0, 70.0, 190.0, 40.0, 50.0);
    type Line<'a> = (&'a str, &'a str, Vec<(f64, f64)>);
    let pts: Vec<Line> = ["read", "write"]
        .iter()
        .flat_map(|case| {
            IMPS.iter().map(move |imp| {
                let v = lat
                    .iter()
                    .filter(|(k, l)| k.0 == *case && k.2 == *imp && l.avg.is_finite() && l.avg > 0.0)
                    .map(|(k, l)| (k.1 as f64, l.avg))
                    .collect();
                (*case, *imp, v)
            })
        })
        .collect();
    let all: Vec<(f64, f64)> = pts.iter().flat_map(|p| p.2.iter().copied()).collect();
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    if all.is_empty() {
        let _ = writeln!(s, r#"<text x="20" y="40">no latency results</text></svg>"#);
        return s;
    }
    let (x0, x1) =
        (all.iter().map(|p| p.0).fold(f64::MAX, f64::min).log10(), all.iter().map(|p| p.0).fold(0.0, f64::max).log10());
    let y0 = all.iter().map(|p| p.1).fold(f64::MAX, f64::min).log10().floor();
    let y1 = all.iter().map(|p| p.1).fold(0.0, f64::max).log10().ceil().max(y0 + 1.0);
    let px = |x: f64| ml + (x.log10() - x0) / (x1 - x0).max(1e-9) * (w - ml - mr);
    let py = |y: f64| h - mb - (y.log10() - y0) / (y1 - y0) * (h - mt - mb);
    let _ = writeln!(
        s,
        r#"<text x="{ml}" y="22" font-size="14">Latency against size, t_avg (µs), log-log: verbs (perftest), C librpma, rpma</text>"#
    );
    for e in (y0 as i32)..=(y1 as i32) {
        let y = py(10f64.powi(e));
        let _ = writeln!(
            s,
            r##"<line x1="{ml}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            w - mr,
            ml - 6.0,
            y + 4.0,
            10f64.powi(e)
        );
    }
    let mut sizes: Vec<f64> = all.iter().map(|p| p.0).collect();
    sizes.sort_by(f64::total_cmp);
    sizes.dedup();
    for x in sizes {
        let _ = writeln!(
            s,
            r##"<line x1="{0:.1}" x2="{0:.1}" y1="{mt}" y2="{1}" stroke="#eee"/><text x="{0:.1}" y="{2}" text-anchor="middle">{3}</text>"##,
            px(x),
            h - mb,
            h - mb + 16.0,
            size_label(x as usize)
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">message size</text>"#,
        ml + (w - ml - mr) / 2.0,
        h - 12.0
    );
    for (i, (case, imp, v)) in pts.iter().enumerate() {
        let color = match *imp {
            "verbs" => "#777777",
            "librpma" => "#1f77b4",
            _ => "#d62728",
        };
        let dash = if *case == "write" { r#" stroke-dasharray="6 4""# } else { "" };
        let path: Vec<String> = v.iter().map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y))).collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2"{dash} points="{}"/>"#,
            path.join(" ")
        );
        for &(x, y) in v {
            let _ = writeln!(s, r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"/>"#, px(x), py(y));
        }
        let ly = mt + 20.0 + i as f64 * 20.0;
        let _ = writeln!(
            s,
            r#"<line x1="{}" x2="{}" y1="{ly}" y2="{ly}" stroke="{color}" stroke-width="2"{dash}/><text x="{}" y="{}">{imp} {case}</text>"#,
            w - mr + 12.0,
            w - mr + 42.0,
            w - mr + 48.0,
            ly + 4.0
        );
    }
    s.push_str("</svg>\n");
    s
}

/// The rounds scripts' output summed up (`compare rounds FILE [BASE]`):
/// for each connection count, each client's median rate and, against
/// `base` (default `rpma`, the epoll loop), the median of the per-round
/// ratios, their range and a 95% interval of that median (the rounds
/// resampled 2,000 times): whether a difference of a percent is there or
/// is the rounds' spread. Reads lines `round R n N: RESULT rate IMP CASE
/// COUNT SECS` (scale-rounds.sh); a client missing from a round leaves
/// that round out of its ratios.
pub fn rounds(text: &str, base: &str) -> Result<(), Box<dyn std::error::Error>> {
    // (n, imp) -> round -> rate
    let mut rates: BTreeMap<(usize, String), BTreeMap<usize, f64>> = BTreeMap::new();
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        if let ["round", r, "n", n, "RESULT", "rate", imp, _case, count, secs] = w[..] {
            let n: usize = n.trim_end_matches(':').parse()?;
            let rate = count.parse::<f64>()? / secs.parse::<f64>()?;
            rates.entry((n, imp.to_string())).or_default().insert(r.parse()?, rate);
        }
    }
    if rates.is_empty() {
        return Err("rounds: no `round R n N: RESULT rate ...` line".into());
    }
    for ((n, imp), by_round) in &rates {
        let mid = median(by_round.values().copied().collect());
        let mut line = format!("n {n} {imp}: {} rounds, median {mid:.0}/s", by_round.len());
        if let Some(b) = rates.get(&(*n, base.to_string())).filter(|_| imp != base) {
            let r: Vec<f64> = by_round.iter().filter_map(|(k, v)| b.get(k).map(|x| v / x)).collect();
            if let Some((m, lo, hi)) = spread(r.clone()) {
                let (blo, bhi) = bootstrap_median(&r);
                line += &format!(", /{base} {m:.3} ({lo:.3}-{hi:.3}), 95% of the median {blo:.3}-{bhi:.3}");
            }
        }
        println!("{line}");
    }
    Ok(())
}
