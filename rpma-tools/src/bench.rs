//! `rpma bench`: a workload against a `rpma serve` target.

use crate::client::{check, close, connect, peer, Target};
use crate::echo::{Ask, ECHO_MAX};
use crate::meta::{Json, Meta};
use crate::serve::MSG_SIZE;
use crate::stats::Latency;
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

/// One size's result, with perftest's names (bandwidth in MiB/s, or Gb/s
/// with `--report_gbits`; times in microseconds).
#[derive(Serialize, Debug, PartialEq)]
#[allow(non_snake_case)]
struct Row {
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
struct Rows {
    bw_unit: &'static str,
    /// What a latency is: `operation to completion`, or `half a ping-pong`.
    latency: &'static str,
    results: Vec<Row>,
}

impl Row {
    /// The row of `ops` operations of `size` bytes in `seconds` (the best
    /// 100 ms window's rate `peak_ops_per_s`), latencies `h` (ns).
    fn new(size: usize, h: &Histogram<u64>, seconds: f64, peak_ops_per_s: f64, cpu: f64, gbits: bool) -> Row {
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
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command name, which may hold spaces: state is
    // field 3, utime 14 and stime 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

/// A small fast generator (xorshift64*) for random offsets and the
/// read/write mix: reproducible, a seed per connection.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// A slot waits for its operation's completion, or for its GPSPM response.
const ANSWER: u8 = 1;
/// A GPSPM slot also waits for its request's send to complete.
const SENT: u8 = 2;

/// One connection of a run, with `--tx-depth` slots, each an operation in
/// flight.
struct Lane {
    conn: Conn,
    remote: MrRemote,
    /// A block per slot, read into or written from.
    local: MrLocal<AlignedBuf>,
    /// GPSPM: a request slot per slot, and as many response slots; sends:
    /// a slot per slot to send from (and with `--pingpong` to receive the
    /// answer into); a write ping-pong: a slot each way for the messages
    /// that set it up.
    msgs: Option<Messages>,
    /// A write ping-pong: where the target's answers land, and the value of
    /// the last byte of the ping in flight.
    pong: Option<MrLocal<AlignedBuf>>,
    seq: u8,
    /// What is sent (`send`), and the operations' size now.
    payload: Vec<u8>,
    bs: usize,
    workload: Workload,
    pingpong: bool,
    /// Per slot: when its operation started, what it waits for
    /// ([`ANSWER`], [`SENT`]) and its GPSPM request's `op_context`.
    start: Vec<Instant>,
    wait: Vec<u8>,
    ctx: Vec<u64>,
    /// The next block of the target's region, and their number at the
    /// current size.
    block: u64,
    blocks: u64,
    /// Random offsets and the read/write mix.
    rng: Rng,
    /// GPSPM requests sent.
    sent: u64,
    inflight: usize,
}

impl Lane {
    /// Connection `i` of the run, with room for operations of up to
    /// `max_bs` bytes.
    fn new(peer: &Peer, a: &BenchArgs, max_bs: usize, i: u32) -> Res<Lane> {
        let ask = match a.workload {
            Workload::Gpspm => Some(Ask::Gpspm { qd: a.tx_depth }),
            Workload::Send => Some(Ask::Send { size: max_bs, qd: a.tx_depth, echo: a.pingpong }),
            Workload::Write if a.pingpong => Some(Ask::WriteEcho { size: max_bs }),
            _ => None,
        };
        let (conn, remote) = connect(peer, &a.target, a.tx_depth, ask)?;
        let qd = a.tx_depth as usize;
        // A send's size is the receives' the target was asked for.
        let region = if a.workload == Workload::Send { max_bs as u64 } else { remote.size() };
        let bs = max_bs.min(usize::try_from(region).unwrap_or(usize::MAX));
        type Setup = (MrLocal<AlignedBuf>, Option<Messages>, Option<MrLocal<AlignedBuf>>);
        let setup = || -> Res<Setup> {
            if bs == 0 || (!a.all && max_bs as u64 > region) {
                return Err(format!("--size {max_bs} must be 1 to the target's {region} bytes").into());
            }
            if a.workload == Workload::WritePersist && !remote.flush_type().contains(Usage::FLUSH_TYPE_PERSISTENT) {
                return Err("the target offers no persistent flush: serve a --pmem path".into());
            }
            let len = bs.checked_mul(qd).ok_or("--size times --tx-depth is too large")?;
            let local = MrLocal::reg(peer, AlignedBuf::new(len)?, Usage::READ_DST | Usage::WRITE_SRC)?;
            let mut msgs = match ask {
                None => None,
                Some(Ask::Gpspm { .. }) => Some(Messages::new(peer, MSG_SIZE, qd, qd, MsgAccess::Msgs)?),
                Some(Ask::Send { echo, .. }) => {
                    Some(Messages::new(peer, bs, qd, if echo { qd } else { 0 }, MsgAccess::Msgs)?)
                }
                Some(Ask::WriteEcho { .. }) => Some(Messages::new(peer, CONTROL, 1, 1, MsgAccess::Msgs)?),
            };
            // The answers' receives, before any request.
            msgs.iter().try_for_each(|m| m.post_recv_all(&conn))?;
            let pong = match (ask, msgs.as_mut()) {
                (Some(Ask::WriteEcho { .. }), Some(m)) => {
                    let pong = MrLocal::reg(peer, AlignedBuf::new(bs)?, Usage::WRITE_DST)?;
                    exchange(&conn, m, &rpma::CommonData::encode(0, &pong, None))?;
                    Some(pong)
                }
                _ => None,
            };
            Ok((local, msgs, pong))
        };
        let (local, msgs, pong) = match setup() {
            Ok(x) => x,
            Err(e) => {
                let _ = close(conn);
                return Err(e);
            }
        };
        Ok(Lane {
            conn,
            remote,
            local,
            msgs,
            pong,
            seq: 0,
            payload: vec![0xa5; if a.workload == Workload::Send { bs } else { 0 }],
            bs,
            workload: a.workload,
            pingpong: a.pingpong,
            start: vec![Instant::now(); qd],
            wait: vec![0; qd],
            ctx: vec![0; qd],
            block: 0,
            blocks: 1,
            rng: Rng(0x9e37_79b9_7f4a_7c15 ^ (u64::from(i) + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9)),
            sent: 0,
            inflight: 0,
        })
    }

    /// Blocks of `bs` bytes from now on, connection `i` of `n` starting at
    /// its share of the region. A write ping-pong tells the target the
    /// size, and writes at offset 0.
    fn size(&mut self, bs: usize, i: u32, n: u32) -> Res<()> {
        self.bs = bs;
        self.blocks = (self.remote.size() / bs as u64).max(1);
        self.block = self.blocks / u64::from(n) * u64::from(i);
        if let (Some(pong), Some(msgs)) = (&self.pong, self.msgs.as_mut()) {
            (self.blocks, self.block) = (1, 0);
            exchange(&self.conn, msgs, format!("size={bs}").as_bytes())?;
            // The target's answer to the first ping sets it to 1.
            pong.write_at(bs - 1, &[0])?;
            self.seq = 0;
        }
        Ok(())
    }

    /// Starts slot `k`'s next operation, timed from `now`.
    fn post(&mut self, k: usize, a: &BenchArgs, bs: usize, now: Instant) -> Res<()> {
        let at = if a.random { self.rng.next() } else { self.block } % self.blocks * bs as u64;
        self.block += 1;
        let w = match a.workload {
            Workload::ReadWrite if self.rng.next() % 100 < u64::from(a.rwmixread.unwrap_or(50)) => Workload::Read,
            Workload::ReadWrite => Workload::Write,
            w => w,
        };
        if self.pong.is_some() {
            self.seq = self.seq % 255 + 1;
        }
        let (c, r, l, ctx) = (&self.conn, &self.remote, &self.local, k as u64);
        let (all, quiet) = (Flags::COMPLETION_ALWAYS, Flags::COMPLETION_ON_ERROR);
        self.start[k] = now;
        self.wait[k] = ANSWER;
        match w {
            Workload::Read => c.read(l, k * bs, r, at, bs, all, ctx)?,
            Workload::Write if self.pong.is_some() => {
                // The byte the target polls, and the answer's last.
                l.write_at(bs - 1, &[self.seq])?;
                c.write(r, 0, l, 0, bs, all, ctx)?;
                self.wait[k] = ANSWER | SENT;
            }
            Workload::Write | Workload::ReadWrite => c.write(r, at, l, k * bs, bs, all, ctx)?,
            Workload::Send => {
                let msgs = self.msgs.as_mut().ok_or("no send slots")?;
                msgs.send(c, k, &self.payload[..bs], all)?;
                if self.pingpong {
                    self.wait[k] = ANSWER | SENT;
                }
            }
            Workload::WriteFlush | Workload::WritePersist => {
                let ty = if w == Workload::WritePersist { FlushType::Persistent } else { FlushType::Visibility };
                c.write(r, at, l, k * bs, bs, quiet, ctx)?;
                c.flush(r, at, bs as u64, ty, all, ctx)?
            }
            Workload::AtomicWrite => c.atomic_write(r, at, self.block.to_le_bytes(), all, ctx)?,
            Workload::Gpspm => {
                let msgs = self.msgs.as_mut().ok_or("no GPSPM message slots")?;
                c.write(r, at, l, k * bs, bs, quiet, ctx)?;
                // The slot in the low 16 bits (`--tx-depth` is at most 512), made
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
        // What answers an operation: its completion; a ping-pong's answer
        // (a write's is seen in memory: [`Lane::pong`]); a GPSPM response.
        let (k, bit) = match self.msgs.as_ref().and_then(|m| m.slot(wc).map(|s| (m, s))) {
            None if self.pong.is_some() => (wc.op_context as usize, SENT),
            None => (wc.op_context as usize, ANSWER),
            Some((_, Slot::Send(k))) if self.workload == Workload::Send && !self.pingpong => (k, ANSWER),
            Some((_, Slot::Send(k))) => (k, SENT),
            Some((m, Slot::Recv(r))) if self.workload == Workload::Send => {
                if wc.byte_len as usize != self.bs {
                    return Err(format!("the target answered {} bytes to a send of {}", wc.byte_len, self.bs).into());
                }
                m.post_recv(&self.conn, r)?;
                (r, ANSWER)
            }
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
            self.record(k, h, now)?;
        }
        Ok((self.wait[k] == 0).then_some(k))
    }

    /// Records slot `k`'s latency, answered at `now`: half the round trip
    /// for a ping-pong.
    fn record(&self, k: usize, h: &mut Histogram<u64>, now: Instant) -> Res<()> {
        let ns = now.saturating_duration_since(self.start[k]).as_nanos() as u64;
        h.record((if self.pingpong { ns / 2 } else { ns }).max(1))?;
        Ok(())
    }

    /// A write ping-pong's answer, seen when the last byte of the ping in
    /// flight is back in [`Lane::pong`]: the slot it frees, if it does, and
    /// when.
    fn pong(&mut self, h: &mut Histogram<u64>) -> Res<Option<(usize, Instant)>> {
        let Some(pong) = self.pong.as_ref().filter(|_| self.wait[0] & ANSWER != 0) else { return Ok(None) };
        let mut b = [0u8];
        pong.read_at(self.bs - 1, &mut b)?;
        if b[0] != self.seq {
            return Ok(None);
        }
        let now = Instant::now();
        self.wait[0] &= !ANSWER;
        self.record(0, h, now)?;
        Ok((self.wait[0] == 0).then_some((0, now)))
    }

    /// Slot `k`'s operation is done: the next starts in it at `now`, if
    /// the run takes one.
    fn freed(&mut self, k: usize, a: &BenchArgs, bs: usize, run: &Run, now: Instant) -> Res<()> {
        self.inflight -= 1;
        run.done.fetch_add(1, Relaxed);
        if run.take(now) {
            self.post(k, a, bs, now)?;
        }
        Ok(())
    }
}

/// The size of the messages that set a write ping-pong up: the client's
/// buffer's descriptor, `size=N`.
const CONTROL: usize = 64;

/// Sends `msg` from slot 0 and waits for the target's answer, the same
/// bytes, into receive slot 0, which is posted again.
fn exchange(conn: &Conn, msgs: &mut Messages, msg: &[u8]) -> Res<()> {
    msgs.send(conn, 0, msg, Flags::COMPLETION_ALWAYS)?;
    let (mut sent, mut answer) = (false, None);
    while !sent || answer.is_none() {
        let wc = conn.cq().next_completion(BOUND)?;
        check(&wc)?;
        match msgs.slot(&wc) {
            Some(Slot::Send(0)) => sent = true,
            Some(Slot::Recv(0)) => answer = Some(msgs.received(0, wc.byte_len as usize)?),
            _ => return Err(format!("a completion of no message while setting up the ping-pong: {wc:?}").into()),
        }
    }
    msgs.post_recv(conn, 0)?;
    match answer {
        Some(got) if got == msg => Ok(()),
        got => Err(format!("the target answered {got:?} to {msg:?}: is it a `rpma serve` of this version?").into()),
    }
}

/// What the threads of a phase share: whether another operation may
/// start, and how many finished.
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
    fn new(count: Option<u64>, deadline: Option<Instant>) -> Run {
        Run { count, deadline, posted: AtomicU64::new(0), done: AtomicU64::new(0), stop: false.into() }
    }

    /// Whether one more operation may start at `now`.
    fn take(&self, now: Instant) -> bool {
        !self.stop.load(Relaxed)
            && match self.count {
                Some(c) => self.posted.fetch_add(1, Relaxed) < c,
                None => self.deadline.is_none_or(|d| now < d),
            }
    }
}

/// Keeps `--tx-depth` operations of `bs` bytes in flight on each of
/// `lanes` until the phase ends, taking their completions round-robin;
/// returns their latencies. No completion on any of them for [`BOUND`]
/// fails the run.
fn drive(lanes: &mut [Lane], a: &BenchArgs, bs: usize, run: &Run) -> Res<Histogram<u64>> {
    let mut h = Histogram::<u64>::new(3)?;
    for lane in lanes.iter_mut() {
        for k in 0..a.tx_depth as usize {
            let now = Instant::now();
            if !run.take(now) {
                break;
            }
            lane.post(k, a, bs, now)?;
        }
    }
    let busy = !a.events;
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
                    lane.freed(k, a, bs, run, now)?;
                }
            }
            got |= n > 0;
            if let Some((k, now)) = lane.pong(&mut h)? {
                (last, got) = (now, true);
                lane.freed(k, a, bs, run, now)?;
            }
        }
        if got {
            spins = 0;
            continue;
        }
        // Busy-polling reads the clock every 256 empty polls only: a read
        // can cost microseconds (a VM's HPET clock).
        spins = spins.wrapping_add(1);
        if busy && spins % 256 != 0 {
            std::hint::spin_loop();
            continue;
        }
        let left = BOUND.saturating_sub(last.elapsed());
        if left.is_zero() {
            return Err(format!("no completion for {} s: is the target still there?", BOUND.as_secs()).into());
        }
        if busy {
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

/// What one phase measured: the latencies, the seconds it took, the best
/// rate over any 100 ms of it (operations a second) and the CPU seconds.
struct Measured {
    h: Histogram<u64>,
    seconds: f64,
    peak: f64,
    cpu: f64,
}

/// Runs `count` operations (or until `limit`) of `bs` bytes on every
/// group of lanes, a thread each; a progress line a second on stderr when
/// a timed phase is longer than 3 s.
fn phase(
    groups: &mut [Vec<Lane>],
    a: &BenchArgs,
    bs: usize,
    count: Option<u64>,
    limit: Option<Duration>,
) -> Res<Measured> {
    let (cpu0, t0) = (cpu_seconds(), Instant::now());
    let run = Run::new(count, limit.and_then(|l| t0.checked_add(l)));
    let progress = limit.is_some_and(|l| l > Duration::from_secs(3));
    let (results, peak) = std::thread::scope(|s| {
        let run = &run;
        let workers: Vec<_> = groups
            .iter_mut()
            .map(|lanes| {
                std::thread::Builder::new().spawn_scoped(s, move || {
                    let r = drive(lanes, a, bs, run).map(|h| (h, t0.elapsed())).map_err(|e| e.to_string());
                    if r.is_err() {
                        run.stop.store(true, Relaxed);
                    }
                    r
                })
            })
            // A thread that did not start stops the others.
            .inspect(|w| {
                if w.is_err() {
                    run.stop.store(true, Relaxed);
                }
            })
            .collect();
        // The best 100 ms window's rate, and the progress line.
        let (mut win, mut win_done, mut peak) = (Instant::now(), 0u64, 0f64);
        let (mut tick, mut tick_done) = (Instant::now(), 0u64);
        while !workers.iter().flatten().all(|w| w.is_finished()) {
            std::thread::sleep(Duration::from_millis(10));
            let done = run.done.load(Relaxed);
            if win.elapsed() >= Duration::from_millis(100) {
                peak = f64::max(peak, (done - win_done) as f64 / win.elapsed().as_secs_f64());
                (win, win_done) = (Instant::now(), done);
            }
            if progress && tick.elapsed() >= Duration::from_secs(1) {
                let rate = (done - tick_done) as f64 / tick.elapsed().as_secs_f64();
                eprintln!("  {:.0} s: {rate:.0} operations/s", t0.elapsed().as_secs_f64());
                (tick, tick_done) = (Instant::now(), done);
            }
        }
        let join =
            |w: std::thread::ScopedJoinHandle<'_, _>| w.join().map_err(|_| "a bench thread panicked".to_string());
        let results: Vec<Result<(Histogram<u64>, Duration), String>> = workers
            .into_iter()
            .map(|w| w.map_err(|e| format!("starting a bench thread: {e}")).and_then(join).and_then(|r| r))
            .collect();
        (results, peak)
    });
    let (mut h, mut seconds) = (Histogram::<u64>::new(3)?, 0f64);
    for r in results {
        let (th, t) = r?;
        h.add(&th).map_err(|e| format!("merging the latencies: {e}"))?;
        seconds = seconds.max(t.as_secs_f64());
    }
    let cpu = cpu0.zip(cpu_seconds()).map_or(0.0, |(c0, c1)| c1 - c0);
    Ok(Measured { h, seconds, peak, cpu })
}

/// Disconnects every lane; the first error, if any.
fn close_all(groups: Vec<Vec<Lane>>) -> Res<()> {
    groups.into_iter().flatten().map(|l| close(l.conn)).fold(Ok(()), Res::and)
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
    if a.workload == Workload::Send && max_bs.saturating_mul(a.tx_depth as usize) > ECHO_MAX {
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
        _ => groups.iter().flatten().map(|l| l.remote.size()).min().unwrap_or(0),
    };
    let measure = |groups: &mut Vec<Vec<Lane>>| -> Res<Vec<Row>> {
        let mut rows = Vec::new();
        for bs in sizes(a, region)? {
            for (i, lane) in groups.iter_mut().flatten().enumerate() {
                lane.size(bs, i as u32, a.qp)?;
            }
            if a.warmup > 0 {
                phase(groups, a, bs, Some(a.warmup), None)?;
            }
            let m = phase(groups, a, bs, count, limit)?;
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

/// The report as perftest prints it: a banner, then the bandwidth and the
/// latency tables, a row per size.
fn text(a: &BenchArgs, device: &str, unit: &str, rows: &[Row]) -> String {
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
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        b: BenchArgs,
    }

    fn parse(args: &[&str]) -> Result<BenchArgs, clap::Error> {
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
    fn cpu_time_is_read_and_the_generator_spreads() {
        assert!(cpu_seconds().is_some_and(|s| s >= 0.0));
        let mut g = Rng(1);
        let mut seen = [0u32; 10];
        for _ in 0..10_000 {
            seen[(g.next() % 10) as usize] += 1;
        }
        assert!(seen.iter().all(|&n| (800..1200).contains(&n)), "{seen:?}");
    }
}
