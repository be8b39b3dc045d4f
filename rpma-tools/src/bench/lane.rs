//! `rpma bench`'s engine: connections (lanes) with their operations in
//! flight, driven by threads in phases, each phase's latencies and rates.

use super::report::cpu_seconds;
use super::{BenchArgs, Workload};
use crate::client::{check, close, connect};
use crate::echo::Ask;
use crate::serve::MSG_SIZE;
use crate::{Res, BOUND};
use hdrhistogram::Histogram;
use rpma::gpspm::{FlushRequest, FlushResponse};
use rpma::messages::{Messages, MsgAccess, Slot};
use rpma::utils::poll_fds;
use rpma::{AlignedBuf, Completion, Conn, Cq, Flags, FlushType};
use rpma::{MrLocal, MrRemote, Peer, Usage};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// A small fast generator (xorshift64*) for random offsets and the
/// read/write mix: reproducible, a seed per connection.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
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
pub(super) struct Lane {
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
    /// The size of the target's region.
    pub(super) fn region(&self) -> u64 {
        self.remote.size()
    }

    /// Connection `i` of the run, with room for operations of up to
    /// `max_bs` bytes.
    pub(super) fn new(peer: &Peer, a: &BenchArgs, max_bs: usize, i: u32) -> Res<Lane> {
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
    pub(super) fn size(&mut self, bs: usize, i: u32, n: u32) -> Res<()> {
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
    fn post(&mut self, k: usize, a: &BenchArgs, now: Instant) -> Res<()> {
        let bs = self.bs;
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
    fn freed(&mut self, k: usize, a: &BenchArgs, run: &Run, now: Instant) -> Res<()> {
        self.inflight -= 1;
        run.done.fetch_add(1, Relaxed);
        if run.take(now) {
            self.post(k, a, now)?;
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

/// Keeps `--tx-depth` operations of the lanes' size ([`Lane::size`]) in
/// flight on each of `lanes` until the phase ends, taking their
/// completions round-robin; returns their latencies. No completion on
/// any of them for [`BOUND`] fails the run.
fn drive(lanes: &mut [Lane], a: &BenchArgs, run: &Run) -> Res<Histogram<u64>> {
    let mut h = Histogram::<u64>::new(3)?;
    for lane in lanes.iter_mut() {
        for k in 0..a.tx_depth as usize {
            let now = Instant::now();
            if !run.take(now) {
                break;
            }
            lane.post(k, a, now)?;
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
                    lane.freed(k, a, run, now)?;
                }
            }
            got |= n > 0;
            if let Some((k, now)) = lane.pong(&mut h)? {
                (last, got) = (now, true);
                lane.freed(k, a, run, now)?;
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
pub(super) struct Measured {
    pub(super) h: Histogram<u64>,
    pub(super) seconds: f64,
    pub(super) peak: f64,
    pub(super) cpu: f64,
}

/// Runs `count` operations (or until `limit`) of the lanes' size on every
/// group of lanes, a thread each; a progress line a second on stderr when
/// a timed phase is longer than 3 s.
pub(super) fn phase(
    groups: &mut [Vec<Lane>],
    a: &BenchArgs,
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
                    let r = drive(lanes, a, run).map(|h| (h, t0.elapsed())).map_err(|e| e.to_string());
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
pub(super) fn close_all(groups: Vec<Vec<Lane>>) -> Res<()> {
    groups.into_iter().flatten().map(|l| close(l.conn)).fold(Ok(()), Res::and)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generator_spreads() {
        let mut g = Rng(1);
        let mut seen = [0u32; 10];
        for _ in 0..10_000 {
            seen[(g.next() % 10) as usize] += 1;
        }
        assert!(seen.iter().all(|&n| (800..1200).contains(&n)), "{seen:?}");
    }
}
