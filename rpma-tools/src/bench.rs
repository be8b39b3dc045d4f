//! `rpma ping` and `rpma bench`: a client of `rpma serve`.

use crate::Res;
use hdrhistogram::Histogram;
use rpma::device::{get_ibv_context, ContextType};
use rpma::{AlignedBuf, CommonData, Conn, ConnCfg, ConnEvent, ConnReq, Error, Flags, FlushType, MrLocal, MrRemote};
use rpma::{Peer, Usage};
use serde::Serialize;
use std::time::{Duration, Instant};

/// How long any one completion may take before the run fails.
const BOUND: Duration = Duration::from_secs(10);

/// The target of `ping` and `bench`.
#[derive(clap::Args)]
pub struct Target {
    /// The address of a `rpma serve` target.
    addr: String,
    /// Its port.
    port: u16,
}

/// Connects with queues for `depth` operations in flight; the target's
/// region and peer configuration come in the private data.
fn connect(t: &Target, depth: u32) -> Res<(Peer, Conn, MrRemote)> {
    let peer = Peer::new(&get_ibv_context(&t.addr, ContextType::Remote)?)?;
    let mut cfg = ConnCfg::new();
    // A write + flush is two work requests.
    cfg.set_sq_size(2 * depth + 1);
    cfg.set_cq_size(2 * depth + 1);
    let conn = ConnReq::new(&peer, &t.addr, t.port, Some(&cfg))?.connect(&[])?;
    match conn.next_event_timeout(BOUND)? {
        ConnEvent::Established => {}
        ev => return Err(format!("{}:{} answered {ev} (is `rpma serve` running there?)", t.addr, t.port).into()),
    }
    let cd = CommonData::decode(conn.private_data())?;
    if let Some(pc) = cd.peer_cfg {
        conn.apply_remote_peer_cfg(&pc);
    }
    Ok((peer, conn, cd.mr))
}

/// A completion within [`BOUND`], busy-polling or waiting.
fn next(conn: &Conn, busy: bool) -> Res<rpma::Completion> {
    let wc = if busy {
        let t = Instant::now();
        loop {
            match conn.cq().get_completion() {
                Err(Error::NoCompletion) if t.elapsed() < BOUND => std::hint::spin_loop(),
                r => break r?,
            }
        }
    } else {
        conn.cq().next_completion(BOUND)?
    };
    if !wc.status.is_success() {
        return Err(format!("operation {} failed: {}", wc.op_context, wc.status).into());
    }
    Ok(wc)
}

fn close(conn: Conn) -> Res<()> {
    conn.disconnect()?;
    let _ = conn.next_event_timeout(BOUND);
    Ok(())
}

/// What `rpma ping` takes.
#[derive(clap::Args)]
pub struct PingArgs {
    #[command(flatten)]
    target: Target,
    /// Round trips.
    #[arg(short, long, default_value_t = 10)]
    count: u64,
    /// Bytes each read brings back.
    #[arg(long, default_value_t = 64)]
    size: usize,
}

pub fn ping(a: &PingArgs) -> Res<()> {
    let (peer, conn, remote) = connect(&a.target, 1)?;
    if a.size == 0 || a.size as u64 > remote.size() {
        return Err(format!("--size {} must be 1 to the target's {} bytes", a.size, remote.size()).into());
    }
    let dst = MrLocal::reg(&peer, AlignedBuf::new(a.size)?, Usage::READ_DST)?;
    let mut h = Histogram::<u64>::new(3)?;
    for seq in 0..a.count {
        let t = Instant::now();
        conn.read(&dst, 0, &remote, 0, a.size, Flags::COMPLETION_ALWAYS, seq)?;
        next(&conn, false)?;
        let ns = t.elapsed().as_nanos() as u64;
        h.record(ns.max(1))?;
        println!("{} bytes from {}: seq={seq} time={:.3} ms", a.size, a.target.addr, ns as f64 / 1e6);
    }
    println!(
        "--- {} rpma ping: {} reads, min/p50/avg/p99/max = {:.3}/{:.3}/{:.3}/{:.3}/{:.3} ms",
        a.target.addr,
        h.len(),
        h.min() as f64 / 1e6,
        h.value_at_quantile(0.5) as f64 / 1e6,
        h.mean() / 1e6,
        h.value_at_quantile(0.99) as f64 / 1e6,
        h.max() as f64 / 1e6
    );
    close(conn)
}

/// The workloads of fio's librpma engines.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Workload {
    /// RDMA read.
    Read,
    /// RDMA write, each waited for.
    Write,
    /// RDMA write, then a flush to global visibility.
    WriteFlush,
    /// RDMA write, then a flush to persistence (a `--pmem` target).
    WritePersist,
    /// 8-byte atomic write (`--bs` is 8).
    AtomicWrite,
}

/// What `rpma bench` takes.
#[derive(clap::Args)]
pub struct BenchArgs {
    #[command(flatten)]
    target: Target,
    /// The operation.
    #[arg(long, value_enum, default_value = "read")]
    workload: Workload,
    /// Bytes per operation (8 for an atomic write).
    #[arg(long, default_value_t = 4096)]
    bs: usize,
    /// Operations in flight.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=512))]
    qd: u32,
    /// Seconds to run.
    #[arg(long, default_value_t = 5.0)]
    time: f64,
    /// Operations to run instead of `--time`.
    #[arg(long)]
    count: Option<u64>,
    /// Busy-poll the completion queue instead of waiting on its channel.
    #[arg(long)]
    busy_poll: bool,
    /// The result as JSON.
    #[arg(long)]
    json: bool,
}

/// A run's result (`--json`).
#[derive(Serialize)]
struct Report {
    workload: Workload,
    bs: usize,
    qd: u32,
    busy_poll: bool,
    ops: u64,
    seconds: f64,
    iops: f64,
    mib_per_s: f64,
    lat_us: Lat,
}

#[derive(Serialize)]
struct Lat {
    min: f64,
    p50: f64,
    p99: f64,
    p99_9: f64,
    max: f64,
    mean: f64,
}

pub fn run(a: &BenchArgs) -> Res<()> {
    let bs = if a.workload == Workload::AtomicWrite { 8 } else { a.bs };
    if !(a.time.is_finite() && a.time > 0.0) {
        return Err(format!("--time {} must be a positive number of seconds", a.time).into());
    }
    let (peer, conn, remote) = connect(&a.target, a.qd)?;
    if bs == 0 || bs as u64 > remote.size() {
        return Err(format!("--bs {bs} must be 1 to the target's {} bytes", remote.size()).into());
    }
    let persist = remote.flush_type().contains(Usage::FLUSH_TYPE_PERSISTENT);
    if a.workload == Workload::WritePersist && !persist {
        return Err("the target offers no persistent flush: serve a --pmem path".into());
    }
    let qd = a.qd as usize;
    let local = MrLocal::reg(&peer, AlignedBuf::new(bs * qd)?, Usage::READ_DST | Usage::WRITE_SRC)?;
    let blocks = remote.size() / bs as u64;
    let mut block = 0u64;
    let mut start = vec![Instant::now(); qd];
    let quiet = Flags::COMPLETION_ON_ERROR;
    let all = Flags::COMPLETION_ALWAYS;
    let mut post = |k: usize, start: &mut [Instant]| -> Result<(), Error> {
        let at = block % blocks * bs as u64;
        block += 1;
        start[k] = Instant::now();
        let ctx = k as u64;
        match a.workload {
            Workload::Read => conn.read(&local, k * bs, &remote, at, bs, all, ctx),
            Workload::Write => conn.write(&remote, at, &local, k * bs, bs, all, ctx),
            Workload::WriteFlush | Workload::WritePersist => {
                let ty =
                    if a.workload == Workload::WritePersist { FlushType::Persistent } else { FlushType::Visibility };
                conn.write(&remote, at, &local, k * bs, bs, quiet, ctx)?;
                conn.flush(&remote, at, bs as u64, ty, all, ctx)
            }
            Workload::AtomicWrite => conn.atomic_write(&remote, at, block.to_le_bytes(), all, ctx),
        }
    };
    let mut h = Histogram::<u64>::new(3)?;
    let (t0, limit) = (Instant::now(), Duration::from_secs_f64(a.time));
    let more = |posted: u64, t0: Instant| match a.count {
        Some(c) => posted < c,
        None => t0.elapsed() < limit,
    };
    let (mut posted, mut inflight) = (0u64, 0usize);
    for k in 0..qd {
        if !more(posted, t0) {
            break;
        }
        post(k, &mut start)?;
        (posted, inflight) = (posted + 1, inflight + 1);
    }
    let mut tick = Instant::now();
    let mut last = 0u64;
    while inflight > 0 {
        let wc = next(&conn, a.busy_poll)?;
        let k = wc.op_context as usize;
        h.record((start[k].elapsed().as_nanos() as u64).max(1))?;
        inflight -= 1;
        if more(posted, t0) {
            post(k, &mut start)?;
            (posted, inflight) = (posted + 1, inflight + 1);
        }
        // A progress line a second on runs longer than a few seconds.
        if a.count.is_none() && a.time > 3.0 && tick.elapsed() >= Duration::from_secs(1) {
            eprintln!(
                "  {:.0} s: {:.0} IOPS",
                t0.elapsed().as_secs_f64(),
                (h.len() - last) as f64 / tick.elapsed().as_secs_f64()
            );
            (tick, last) = (Instant::now(), h.len());
        }
    }
    let seconds = t0.elapsed().as_secs_f64();
    let us = |q: f64| h.value_at_quantile(q) as f64 / 1e3;
    let r = Report {
        workload: a.workload,
        bs,
        qd: a.qd,
        busy_poll: a.busy_poll,
        ops: h.len(),
        seconds,
        iops: h.len() as f64 / seconds,
        mib_per_s: (h.len() * bs as u64) as f64 / seconds / (1 << 20) as f64,
        lat_us: Lat {
            min: h.min() as f64 / 1e3,
            p50: us(0.5),
            p99: us(0.99),
            p99_9: us(0.999),
            max: h.max() as f64 / 1e3,
            mean: h.mean() / 1e3,
        },
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!(
            "{:?} bs={} qd={}{}: {} ops in {:.2} s, {:.0} IOPS, {:.2} MiB/s; latency us min {:.1} p50 {:.1} p99 {:.1} p99.9 {:.1} max {:.1}",
            r.workload,
            r.bs,
            r.qd,
            if r.busy_poll { " busy-poll" } else { "" },
            r.ops,
            r.seconds,
            r.iops,
            r.mib_per_s,
            r.lat_us.min,
            r.lat_us.p50,
            r.lat_us.p99,
            r.lat_us.p99_9,
            r.lat_us.max
        );
    }
    close(conn)
}
