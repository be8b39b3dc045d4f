//! `rpma bench`: a workload against a `rpma serve` target.

use crate::client::{check, close, connect, peer, Target};
use crate::serve::MSG_SIZE;
use crate::{Res, BOUND, MAX_QD};
use hdrhistogram::Histogram;
use rpma::gpspm::{FlushRequest, FlushResponse};
use rpma::messages::{Messages, MsgAccess, Slot};
use rpma::utils::poll_fds;
use rpma::{AlignedBuf, Completion, Conn, Cq, Flags, FlushType};
use rpma::{MrLocal, MrRemote, Peer, Usage};
use serde::Serialize;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

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
    /// RDMA write, then a GPSPM flush request (a send); done when the
    /// target's response arrives (a receive), sent once it persisted the
    /// range (fio's librpma_gpspm, librpma's example 09).
    Gpspm,
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
    /// Operations in flight on each connection.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_QD)))]
    qd: u32,
    /// Connections, each with its own queues, region and `--qd` operations.
    #[arg(long, default_value_t = 1)]
    conns: u32,
    /// Threads driving the connections, each its share of them round-robin
    /// (at most `--conns`).
    #[arg(long, default_value_t = 1)]
    threads: u32,
    /// Seconds to run.
    #[arg(long, default_value_t = 5.0)]
    time: f64,
    /// Operations to run (over all connections) instead of `--time`.
    #[arg(long)]
    count: Option<u64>,
    /// Busy-poll the completion queues instead of waiting on their channels.
    #[arg(long)]
    busy_poll: bool,
    /// The result as JSON.
    #[arg(long)]
    json: bool,
}

/// A run's result (`--json`): over all connections.
#[derive(Serialize)]
struct Report {
    workload: Workload,
    bs: usize,
    qd: u32,
    conns: u32,
    threads: u32,
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

/// A slot waits for its operation's completion, or for its GPSPM response.
const ANSWER: u8 = 1;
/// A GPSPM slot also waits for its request's send to complete.
const SENT: u8 = 2;

/// One connection of a run, with `--qd` slots, each an operation in flight.
struct Lane {
    conn: Conn,
    remote: MrRemote,
    /// A block per slot, read into or written from.
    local: MrLocal<AlignedBuf>,
    /// GPSPM: a request slot per slot, and as many response slots.
    msgs: Option<Messages>,
    /// Per slot: when its operation started, what it waits for
    /// ([`ANSWER`], [`SENT`]) and its GPSPM request's `op_context`.
    start: Vec<Instant>,
    wait: Vec<u8>,
    ctx: Vec<u64>,
    /// The next block of the target's region, and their number.
    block: u64,
    blocks: u64,
    /// GPSPM requests sent.
    sent: u64,
    inflight: usize,
}

impl Lane {
    /// Connection `i` of the run, starting at its share of the region.
    fn new(peer: &Peer, a: &BenchArgs, bs: usize, i: u32) -> Res<Lane> {
        let gpspm = a.workload == Workload::Gpspm;
        let (conn, remote) = connect(peer, &a.target, a.qd, gpspm)?;
        let qd = a.qd as usize;
        let setup = || -> Res<(MrLocal<AlignedBuf>, Option<Messages>)> {
            if bs == 0 || bs as u64 > remote.size() {
                return Err(format!("--bs {bs} must be 1 to the target's {} bytes", remote.size()).into());
            }
            if a.workload == Workload::WritePersist && !remote.flush_type().contains(Usage::FLUSH_TYPE_PERSISTENT) {
                return Err("the target offers no persistent flush: serve a --pmem path".into());
            }
            let len = bs.checked_mul(qd).ok_or("--bs times --qd is too large")?;
            let local = MrLocal::reg(peer, AlignedBuf::new(len)?, Usage::READ_DST | Usage::WRITE_SRC)?;
            let msgs = gpspm.then(|| Messages::new(peer, MSG_SIZE, qd, qd, MsgAccess::Msgs)).transpose()?;
            // The responses' receives, before any request.
            msgs.iter().try_for_each(|m| m.post_recv_all(&conn))?;
            Ok((local, msgs))
        };
        let (local, msgs) = match setup() {
            Ok(x) => x,
            Err(e) => {
                let _ = close(conn);
                return Err(e);
            }
        };
        let blocks = remote.size() / bs as u64;
        Ok(Lane {
            conn,
            remote,
            local,
            msgs,
            start: vec![Instant::now(); qd],
            wait: vec![0; qd],
            ctx: vec![0; qd],
            block: blocks / u64::from(a.conns) * u64::from(i),
            blocks,
            sent: 0,
            inflight: 0,
        })
    }

    /// Starts slot `k`'s next operation, timed from `now`.
    fn post(&mut self, k: usize, w: Workload, bs: usize, now: Instant) -> Res<()> {
        let at = self.block % self.blocks * bs as u64;
        self.block += 1;
        let (c, r, l, ctx) = (&self.conn, &self.remote, &self.local, k as u64);
        let (all, quiet) = (Flags::COMPLETION_ALWAYS, Flags::COMPLETION_ON_ERROR);
        self.start[k] = now;
        self.wait[k] = ANSWER;
        match w {
            Workload::Read => c.read(l, k * bs, r, at, bs, all, ctx)?,
            Workload::Write => c.write(r, at, l, k * bs, bs, all, ctx)?,
            Workload::WriteFlush | Workload::WritePersist => {
                let ty = if w == Workload::WritePersist { FlushType::Persistent } else { FlushType::Visibility };
                c.write(r, at, l, k * bs, bs, quiet, ctx)?;
                c.flush(r, at, bs as u64, ty, all, ctx)?
            }
            Workload::AtomicWrite => c.atomic_write(r, at, self.block.to_le_bytes(), all, ctx)?,
            Workload::Gpspm => {
                let msgs = self.msgs.as_mut().ok_or("no GPSPM message slots")?;
                c.write(r, at, l, k * bs, bs, quiet, ctx)?;
                // The slot in the low 16 bits (`--qd` is at most 512), made
                // unique by the count of requests.
                self.sent += 1;
                self.ctx[k] = (self.sent << 16) | ctx;
                let req = FlushRequest::new(at, bs as u64, self.ctx[k]);
                msgs.send(c, k, &req.encode(), all)?;
                self.wait[k] = ANSWER | SENT;
            }
        }
        self.inflight += 1;
        Ok(())
    }

    /// Takes a completion reaped at `now`: records the latency of the
    /// operation it answers, and returns the slot it frees, if it does.
    fn complete(&mut self, wc: &Completion, h: &mut Histogram<u64>, now: Instant) -> Res<Option<usize>> {
        check(wc)?;
        let (k, bit) = match self.msgs.as_ref().and_then(|m| m.slot(wc).map(|s| (m, s))) {
            None => (wc.op_context as usize, ANSWER),
            Some((_, Slot::Send(k))) => (k, SENT),
            Some((m, Slot::Recv(r))) => {
                let resp = FlushResponse::decode(&m.received(r, wc.byte_len as usize)?)
                    .map_err(|e| format!("the target's GPSPM flush response: {e}"))?;
                m.post_recv(&self.conn, r)?;
                let k = (resp.op_context & 0xffff) as usize;
                if self.ctx.get(k) != Some(&resp.op_context) {
                    return Err(format!("a GPSPM flush response to no request in flight ({resp:?})").into());
                }
                (k, ANSWER)
            }
        };
        let w = self
            .wait
            .get_mut(k)
            .filter(|w| **w & bit != 0)
            .ok_or_else(|| format!("a completion of no operation in flight: {wc:?}"))?;
        *w &= !bit;
        if bit == ANSWER {
            h.record((now.saturating_duration_since(self.start[k]).as_nanos() as u64).max(1))?;
        }
        Ok((*w == 0).then_some(k))
    }
}

/// What the threads of a run share: whether another operation may start,
/// and how many finished.
struct Run {
    count: Option<u64>,
    /// `None`: too far to represent.
    deadline: Option<Instant>,
    posted: AtomicU64,
    done: AtomicU64,
    /// A thread failed: the others stop starting operations.
    stop: AtomicBool,
}

impl Run {
    /// Whether one more operation may start at `now`.
    fn take(&self, now: Instant) -> bool {
        !self.stop.load(Relaxed)
            && match self.count {
                Some(c) => self.posted.fetch_add(1, Relaxed) < c,
                None => self.deadline.is_none_or(|d| now < d),
            }
    }
}

/// Keeps `--qd` operations in flight on each of `lanes` until the run
/// ends, taking their completions round-robin; returns their latencies.
/// No completion on any of them for [`BOUND`] fails the run.
fn drive(lanes: &mut [Lane], a: &BenchArgs, bs: usize, run: &Run) -> Res<Histogram<u64>> {
    let mut h = Histogram::<u64>::new(3)?;
    for lane in lanes.iter_mut() {
        for k in 0..a.qd as usize {
            let now = Instant::now();
            if !run.take(now) {
                break;
            }
            lane.post(k, a.workload, bs, now)?;
        }
    }
    let mut wcs = [Cq::EMPTY; 16];
    let (mut last, mut spins) = (Instant::now(), 0u32);
    while lanes.iter().any(|l| l.inflight > 0) {
        let mut got = false;
        for lane in lanes.iter_mut() {
            let n = lane.conn.cq().get_wc(&mut wcs)?;
            // One clock read a batch: the completions' time, and the
            // start of the operations posted in their place.
            let now = if n > 0 { Instant::now() } else { last };
            last = now;
            for wc in &wcs[..n] {
                if let Some(k) = lane.complete(wc, &mut h, now)? {
                    lane.inflight -= 1;
                    run.done.fetch_add(1, Relaxed);
                    if run.take(now) {
                        lane.post(k, a.workload, bs, now)?;
                    }
                }
            }
            got |= n > 0;
        }
        if got {
            spins = 0;
            continue;
        }
        // Busy-polling reads the clock every 256 empty polls only: a read
        // can cost microseconds (a VM's HPET clock).
        spins = spins.wrapping_add(1);
        if a.busy_poll && spins % 256 != 0 {
            std::hint::spin_loop();
            continue;
        }
        let left = BOUND.saturating_sub(last.elapsed());
        if left.is_zero() {
            return Err(format!("no completion for {} s: is the target still there?", BOUND.as_secs()).into());
        }
        if a.busy_poll {
            std::hint::spin_loop();
            continue;
        }
        let fds: Vec<_> = lanes.iter().map(|l| l.conn.cq().as_fd()).collect();
        for (lane, ready) in lanes.iter().zip(poll_fds(&fds, Some(left))?) {
            if ready {
                lane.conn.cq().wait()?;
            }
        }
    }
    Ok(h)
}

/// Disconnects every lane; the first error, if any.
fn close_all(lanes: Vec<Lane>) -> Res<()> {
    lanes.into_iter().map(|l| close(l.conn)).fold(Ok(()), Res::and)
}

/// Runs the workload over `--conns` connections and `--threads` threads
/// and reports it.
pub fn run(a: &BenchArgs) -> Res<()> {
    let bs = if a.workload == Workload::AtomicWrite { 8 } else { a.bs };
    let Some(limit) = Duration::try_from_secs_f64(a.time).ok().filter(|d| !d.is_zero()) else {
        return Err(format!("--time {:?} must be a positive number of seconds (below 2^64)", a.time).into());
    };
    if a.conns == 0 {
        return Err("--conns 0: a run needs at least 1 connection".into());
    }
    if a.threads == 0 {
        return Err("--threads 0: a run needs at least 1 thread".into());
    }
    if a.threads > a.conns {
        return Err(format!(
            "--threads {} exceeds --conns {}: each thread drives connections of its own",
            a.threads, a.conns
        )
        .into());
    }
    let peer = peer(&a.target)?;
    let mut groups: Vec<Vec<Lane>> = (0..a.threads).map(|_| Vec::new()).collect();
    for i in 0..a.conns {
        match Lane::new(&peer, a, bs, i) {
            Ok(lane) => groups[(i % a.threads) as usize].push(lane),
            Err(e) => {
                let _ = close_all(groups.into_iter().flatten().collect());
                return Err(e);
            }
        }
    }
    let t0 = Instant::now();
    let run = Run {
        count: a.count,
        deadline: t0.checked_add(limit),
        posted: AtomicU64::new(0),
        done: AtomicU64::new(0),
        stop: false.into(),
    };
    let progress = a.count.is_none() && a.time > 3.0;
    let results: Vec<_> = std::thread::scope(|s| {
        let run = &run;
        let workers: Vec<_> = groups
            .into_iter()
            .map(|mut lanes| {
                std::thread::Builder::new().spawn_scoped(s, move || {
                    let r = drive(&mut lanes, a, bs, run).map(|h| (h, t0.elapsed())).map_err(|e| e.to_string());
                    if r.is_err() {
                        run.stop.store(true, Relaxed);
                    }
                    (lanes, r)
                })
            })
            // A thread that did not start stops the others.
            .inspect(|w| {
                if w.is_err() {
                    run.stop.store(true, Relaxed);
                }
            })
            .collect();
        // A progress line a second on runs longer than a few seconds.
        let (mut tick, mut last) = (Instant::now(), 0);
        while !workers.iter().flatten().all(|w| w.is_finished()) {
            std::thread::sleep(Duration::from_millis(20));
            if progress && tick.elapsed() >= Duration::from_secs(1) {
                let done = run.done.load(Relaxed);
                let iops = (done - last) as f64 / tick.elapsed().as_secs_f64();
                eprintln!("  {:.0} s: {iops:.0} IOPS", t0.elapsed().as_secs_f64());
                (tick, last) = (Instant::now(), done);
            }
        }
        let join =
            |w: std::thread::ScopedJoinHandle<'_, _>| w.join().map_err(|_| "a bench thread panicked".to_string());
        workers.into_iter().map(|w| w.map_err(|e| format!("starting a bench thread: {e}")).and_then(join)).collect()
    });
    let (mut h, mut seconds, mut lanes, mut failed) = (Histogram::<u64>::new(3)?, 0f64, Vec::new(), None);
    for r in results {
        match r {
            Ok((l, Ok((th, t)))) => {
                if let Err(e) = h.add(&th) {
                    failed.get_or_insert(format!("merging the latencies: {e}"));
                }
                seconds = seconds.max(t.as_secs_f64());
                lanes.extend(l);
            }
            Ok((l, Err(e))) => {
                lanes.extend(l);
                failed.get_or_insert(e);
            }
            Err(e) => {
                failed.get_or_insert(e);
            }
        }
    }
    if let Some(e) = failed {
        let _ = close_all(lanes);
        return Err(e.into());
    }
    let us = |q: f64| h.value_at_quantile(q) as f64 / 1e3;
    let r = Report {
        workload: a.workload,
        bs,
        qd: a.qd,
        conns: a.conns,
        threads: a.threads,
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
            "{:?} bs={} qd={} conns={} threads={}{}: {} ops in {:.2} s, {:.0} IOPS, {:.2} MiB/s; latency us min {:.1} p50 {:.1} p99 {:.1} p99.9 {:.1} max {:.1}",
            r.workload,
            r.bs,
            r.qd,
            r.conns,
            r.threads,
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
    close_all(lanes)
}
