//! `rpma bench`: a workload against a `rpma serve` target: its options and
//! their checks, and the run, size by size ([`lane`] drives the
//! connections, [`report`] prints what they measured).

mod lane;
mod report;

use crate::client::{peer, Target};
use crate::echo::{self, ECHO_MAX};
use crate::meta::{Json, Meta};
use crate::{Res, MAX_QD};
use lane::{close_all, phase, Lane};
use report::{text, Row, Rows};
use rpma::Peer;
use serde::Serialize;
use std::time::Duration;

/// The workloads of fio's librpma engines, and a read/write mix.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Workload {
    /// RDMA read.
    Read,
    /// RDMA write, each waited for.
    Write,
    /// RDMA reads and writes mixed at random, `--rwmixread` percent reads.
    ReadWrite,
    /// RDMA write, then a flush to global visibility.
    WriteFlush,
    /// RDMA write, then a flush to persistence (a `--pmem` target).
    WritePersist,
    /// 8-byte atomic write (`--size` is 8).
    AtomicWrite,
    /// RDMA write, then a GPSPM flush request (a send); done when the
    /// target's response arrives (a receive), sent once it persisted the
    /// range (fio's librpma_gpspm, librpma's example 09).
    Gpspm,
    /// A send of `--size` bytes, which the target receives (and with
    /// `--pingpong` answers with a send of the same bytes).
    Send,
}

impl Workload {
    /// perftest's name of the test, for the report's banner.
    fn title(self) -> &'static str {
        match self {
            Workload::Read => "RDMA_Read",
            Workload::Write => "RDMA_Write",
            Workload::ReadWrite => "RDMA_Read/Write mix",
            Workload::WriteFlush => "RDMA_Write + flush (visibility)",
            Workload::WritePersist => "RDMA_Write + flush (persistence)",
            Workload::AtomicWrite => "Atomic_Write",
            Workload::Gpspm => "RDMA_Write + GPSPM flush request",
            Workload::Send => "Send",
        }
    }
}

/// The sizes of `--all`: 2 bytes to 8 MiB, doubling (perftest's `-a`).
const ALL_SIZES: std::ops::RangeInclusive<u32> = 1..=23;

/// What `rpma bench` takes. Short options are perftest's where they mean
/// the same.
#[derive(clap::Args, Serialize)]
pub struct BenchArgs {
    #[command(flatten)]
    target: Target,
    /// The operation.
    #[arg(short = 'w', long, value_enum, default_value = "read")]
    workload: Workload,
    /// Bytes per operation (default 4096; an atomic write's is 8).
    #[arg(short = 's', long, visible_alias = "bs", conflicts_with = "all")]
    size: Option<usize>,
    /// Every size from 2 B to 8 MiB, doubling (those the target's region
    /// holds).
    #[arg(short = 'a', long)]
    all: bool,
    /// Operations to measure at each size, over all connections (default
    /// 1000, as perftest's).
    #[arg(short = 'n', long, visible_alias = "count", conflicts_with = "duration")]
    iters: Option<u64>,
    /// Seconds to measure at each size instead of `--iters`.
    #[arg(short = 'D', long, visible_alias = "time")]
    duration: Option<f64>,
    /// Operations in flight on each connection (perftest's tx depth).
    #[arg(short = 't', long, visible_alias = "qd", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_QD)))]
    tx_depth: u32,
    /// Connections, each with its own queues, region and `--tx-depth`
    /// operations (perftest's `-q`).
    #[arg(short = 'q', long, visible_alias = "conns", default_value_t = 1)]
    qp: u32,
    /// Threads driving the connections, each its share of them round-robin
    /// (at most `--qp`).
    #[arg(long, default_value_t = 1)]
    threads: u32,
    /// Sleep on completion events instead of busy-polling the completion
    /// queues (busy-polling is the default, as perftest's).
    #[arg(short = 'e', long)]
    events: bool,
    /// The RDMA device the target must be reached through (refused when
    /// the route to it uses another).
    #[arg(short = 'd', long)]
    ib_dev: Option<String>,
    /// The port of that device that must be active (rdma_cm picks the port
    /// by the route; this checks it is up).
    #[arg(short = 'i', long, value_parser = clap::value_parser!(u8).range(1..))]
    ib_port: Option<u8>,
    /// Operations before measuring each size (not measured).
    #[arg(long, default_value_t = 100)]
    warmup: u64,
    /// Random block offsets in the target's region (sequential by
    /// default).
    #[arg(long)]
    random: bool,
    /// Percentage of reads of the `read-write` workload.
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=100))]
    rwmixread: Option<u8>,
    /// Latency as perftest's `ib_write_lat` and `ib_send_lat` time it: the
    /// target answers each write with a write of the same bytes into this
    /// side's memory (each send with a send), and the latency is half the
    /// round trip. `write` and `send` only, at `--tx-depth 1`, busy-polled.
    #[arg(long)]
    pingpong: bool,
    /// Bandwidth in Gb/s instead of MiB/s.
    #[arg(long = "report_gbits")]
    report_gbits: bool,
    /// The result as JSON (perftest's keys, and the run's provenance).
    #[arg(long)]
    json: bool,
}

/// The sizes to run: `--size`, or `--all`'s that the region holds.
fn sizes(a: &BenchArgs, region: u64) -> Res<Vec<usize>> {
    if a.workload == Workload::AtomicWrite {
        return match a.size {
            None | Some(8) if !a.all => Ok(vec![8]),
            _ => Err("an atomic write is 8 bytes: no --size or --all with it".into()),
        };
    }
    if !a.all {
        return Ok(vec![a.size.unwrap_or(4096)]);
    }
    let sizes: Vec<usize> = ALL_SIZES.map(|k| 1usize << k).filter(|&n| n as u64 <= region).collect();
    if sizes.is_empty() {
        return Err(format!("--all: the target's region ({region} bytes) holds none of 2 B to 8 MiB").into());
    }
    Ok(sizes)
}

/// The checks that need no device.
fn validate(a: &BenchArgs) -> Res<Option<Duration>> {
    if a.qp == 0 {
        return Err("--qp 0: a run needs at least 1 connection".into());
    }
    if a.threads == 0 {
        return Err("--threads 0: a run needs at least 1 thread".into());
    }
    if a.threads > a.qp {
        return Err(format!(
            "--threads {} exceeds --qp {}: each thread drives connections of its own",
            a.threads, a.qp
        )
        .into());
    }
    if a.rwmixread.is_some() && a.workload != Workload::ReadWrite {
        return Err("--rwmixread is the read-write workload's".into());
    }
    if a.pingpong && !matches!(a.workload, Workload::Write | Workload::Send) {
        return Err("--pingpong is the write and send workloads' (perftest's ib_write_lat, ib_send_lat)".into());
    }
    if a.pingpong && (a.tx_depth != 1 || a.events) {
        return Err("--pingpong runs one ping at a time (--tx-depth 1), busy-polled (no --events): \
                    a write's answer is seen in memory, not as a completion"
            .into());
    }
    if a.iters == Some(0) {
        return Err("--iters 0: nothing to measure".into());
    }
    a.duration
        .map(|d| {
            Duration::try_from_secs_f64(d)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| format!("--duration {d:?} must be a positive number of seconds (below 2^64)").into())
        })
        .transpose()
}

/// `-d` and `-i`: the device the route to the target uses, and its port.
fn check_device(a: &BenchArgs, peer: &Peer) -> Res<String> {
    let dev = peer.device_name();
    if let Some(want) = a.ib_dev.as_deref().filter(|w| *w != dev) {
        return Err(format!("{} is reached through {dev}, not {want} (--ib-dev)", a.target.addr).into());
    }
    if let Some(port) = a.ib_port {
        let info = rpma::device::devices()?.into_iter().find(|d| d.name == dev);
        let p = info.as_ref().and_then(|d| d.ports.iter().find(|p| p.port == u32::from(port)));
        match p {
            Some(p) if p.is_active() => {}
            Some(p) => return Err(format!("port {port} of {dev} is {} (--ib-port)", p.state).into()),
            None => return Err(format!("{dev} has no port {port} (--ib-port)").into()),
        }
    }
    Ok(dev)
}

/// Runs the workload over `--qp` connections and `--threads` threads, at
/// each size, and reports it.
pub fn run(a: &BenchArgs) -> Res<()> {
    let started = std::time::SystemTime::now();
    let limit = validate(a)?;
    let count = if limit.is_some() { None } else { Some(a.iters.unwrap_or(1000)) };
    let peer = peer(&a.target)?;
    let device = check_device(a, &peer)?;
    let max_bs = match (a.workload, a.all) {
        (Workload::AtomicWrite, _) => 8,
        // The receives the target registers for sends are bounded.
        (Workload::Send, true) => (1 << ALL_SIZES.end()).min(ECHO_MAX / a.tx_depth as usize),
        (_, true) => 1 << ALL_SIZES.end(),
        _ => a.size.unwrap_or(4096),
    };
    if a.workload == Workload::Send && !echo::within_max(max_bs as u64, a.tx_depth.into()) {
        return Err(
            format!("--size times --tx-depth is at most {ECHO_MAX} bytes for sends (the target's receives)").into()
        );
    }
    let mut groups: Vec<Vec<Lane>> = (0..a.threads).map(|_| Vec::new()).collect();
    for i in 0..a.qp {
        match Lane::new(&peer, a, max_bs, i) {
            Ok(lane) => groups[(i % a.threads) as usize].push(lane),
            Err(e) => {
                let _ = close_all(groups);
                return Err(e);
            }
        }
    }
    let region = match a.workload {
        Workload::Send => max_bs as u64,
        _ => groups.iter().flatten().map(Lane::region).min().unwrap_or(0),
    };
    let measure = |groups: &mut Vec<Vec<Lane>>| -> Res<Vec<Row>> {
        let mut rows = Vec::new();
        for bs in sizes(a, region)? {
            for (i, lane) in groups.iter_mut().flatten().enumerate() {
                lane.size(bs, i as u32, a.qp)?;
            }
            if a.warmup > 0 {
                phase(groups, a, Some(a.warmup), None)?;
            }
            let m = phase(groups, a, count, limit)?;
            rows.push(Row::new(bs, &m.h, m.seconds, m.peak, m.cpu, a.report_gbits));
        }
        Ok(rows)
    };
    let rows = match measure(&mut groups) {
        Ok(rows) => rows,
        Err(e) => {
            let _ = close_all(groups);
            return Err(e);
        }
    };
    let unit = if a.report_gbits { "Gb/sec" } else { "MiB/sec" };
    if a.json {
        let mut meta = Meta::new(started, a);
        (meta.device, meta.address, meta.port) = (Some(device), Some(a.target.addr.as_str()), Some(a.target.port()));
        let latency = if a.pingpong { "half a ping-pong" } else { "operation to completion" };
        let j = Json { meta, result: Rows { bw_unit: unit, latency, results: rows } };
        println!("{}", serde_json::to_string_pretty(&j)?);
    } else {
        print!("{}", text(a, &device, unit, &rows));
    }
    close_all(groups)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        b: BenchArgs,
    }

    pub(super) fn parse(args: &[&str]) -> Result<BenchArgs, clap::Error> {
        Cli::try_parse_from(["bench", "192.0.2.1", "7204"].iter().chain(args)).map(|c| c.b)
    }

    #[test]
    fn perftest_flags_parse_and_conflicting_ones_are_refused() {
        let a = parse(&["-s", "64", "-n", "50", "-t", "4", "-q", "2", "-e", "--report_gbits"]).unwrap();
        assert_eq!(
            (a.size, a.iters, a.tx_depth, a.qp, a.events, a.report_gbits),
            (Some(64), Some(50), 4, 2, true, true)
        );
        // fio's and the old long names still work.
        let a = parse(&["--bs", "64", "--count", "5", "--qd", "2", "--conns", "3"]).unwrap();
        assert_eq!((a.size, a.iters, a.tx_depth, a.qp), (Some(64), Some(5), 2, 3));
        for bad in
            [&["-n", "5", "-D", "1"][..], &["-a", "-s", "64"], &["-t", "0"], &["-i", "0"], &["--rwmixread", "101"]]
        {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
        let a = parse(&["-w", "read", "--rwmixread", "70"]).unwrap();
        assert!(validate(&a).is_err(), "a mix needs the read-write workload");
        assert!(validate(&parse(&["-D", "0"]).unwrap()).is_err());
        assert!(validate(&parse(&["-n", "0"]).unwrap()).is_err());
        assert!(validate(&parse(&["-q", "1", "--threads", "2"]).unwrap()).is_err());
    }

    #[test]
    fn the_port_is_positional_or_perftests_p_with_its_default() {
        let at = |args: &[&str]| Cli::try_parse_from(["bench"].iter().chain(args)).map(|c| c.b.target.port());
        assert_eq!(at(&["192.0.2.1", "7204"]).unwrap(), 7204);
        assert_eq!(at(&["192.0.2.1", "-p", "7205"]).unwrap(), 7205);
        assert_eq!(at(&["192.0.2.1"]).unwrap(), crate::DEFAULT_PORT);
        assert!(at(&["192.0.2.1", "7204", "-p", "7205"]).is_err(), "PORT and -p both");
    }

    #[test]
    fn sizes_are_the_one_or_the_sweep_the_region_holds() {
        assert_eq!(sizes(&parse(&[]).unwrap(), 1 << 20).unwrap(), [4096]);
        let all = sizes(&parse(&["-a"]).unwrap(), 1 << 30).unwrap();
        assert_eq!((all.len(), all[0], *all.last().unwrap()), (23, 2, 8 << 20));
        assert_eq!(*sizes(&parse(&["-a"]).unwrap(), 65536).unwrap().last().unwrap(), 65536);
        assert!(sizes(&parse(&["-a"]).unwrap(), 1).is_err());
        assert_eq!(sizes(&parse(&["-w", "atomic-write"]).unwrap(), 64).unwrap(), [8]);
        assert!(sizes(&parse(&["-w", "atomic-write", "-s", "16"]).unwrap(), 64).is_err());
        assert!(sizes(&parse(&["-w", "atomic-write", "-a"]).unwrap(), 64).is_err());
    }
}
