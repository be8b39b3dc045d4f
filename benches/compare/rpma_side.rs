//! The rpma side of the comparison: a server and a client that do exactly
//! what `librpma_bench.c` does with C librpma, case for case, and print the
//! same `RESULT` lines.
//!
//! Protocol (shared with the C program): the server registers a 64 KiB
//! region and sends its librpma MR descriptor as the connection's private
//! data. It keeps [`SLOTS`] 8-byte receives posted. A message's first byte is
//! its kind: [`PING`] is answered with an 8-byte send, [`STREAM`] is only
//! counted, [`DONE`] ends the connection. [`WPP`] starts a ping-pong of
//! writes (perftest's `ib_write_lat`): bytes 1..5 give the size and 5..7 the
//! count; the client sends the descriptor of its write target as the
//! connection's private data.

use crate::stats::{self, Lat};
use rpma::device::{get_ibv_context, ContextType};
use rpma::ops::{AtomicWrite, Flush, Read, Unheld, Write};
use rpma::{
    AlignedBuf, Completion, CompletionOp, Conn, ConnCfg, ConnEvent, ConnReq, Cq, Ep, Flags, FlushType, MrLocal,
    MrRemote, Peer, RawMemory, SharedCq, Usage,
};
use std::time::{Duration, Instant};

pub const REGION: usize = 64 * 1024;
pub const SLOTS: usize = 64;
pub const PING: u8 = 1;
pub const STREAM: u8 = 2;
pub const DONE: u8 = 3;
pub const WPP: u8 = 4;
pub(crate) const T: Duration = Duration::from_secs(60);

type Res<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn cfg() -> ConnCfg {
    let mut c = ConnCfg::new();
    c.set_sq_size(128);
    c.set_cq_size(256);
    c.set_rq_size(SLOTS as u32);
    c.set_timeout(T).expect("timeout");
    c
}

fn check(wc: Completion) -> Res<Completion> {
    if !wc.status.is_success() {
        return Err(failed(&wc));
    }
    Ok(wc)
}

/// The error of a failed completion (out of line: the error path).
#[cold]
#[inline(never)]
fn failed(wc: &Completion) -> Box<dyn std::error::Error> {
    format!("{:?} (context {}) failed: {}", wc.op, wc.op_context, wc.status).into()
}

/// One completion if there is one, checked.
fn try_get(cq: &Cq) -> Res<Option<Completion>> {
    cq.get_completion()?.map(check).transpose()
}

/// Busy-polls `cq` for one completion (perftest's default), for at most
/// `T`, and hands it to `then`: the loop the C program's `spin` is, its
/// clock read only once 1024 polls found nothing (as the C program's).
#[inline(always)]
fn spin_then<T>(cq: &Cq, then: impl FnOnce(Completion) -> Res<T>) -> Res<T> {
    let mut t0 = None;
    loop {
        for _ in 0..1024 {
            if let Some(wc) = cq.get_completion()? {
                return then(wc);
            }
        }
        match t0 {
            None => t0 = Some(Instant::now()),
            Some(t0) if t0.elapsed() > T => return Err("no completion within 60 s".into()),
            Some(_) => {}
        }
    }
}

/// Busy-polls `cq` for one completion, checked.
fn spin(cq: &Cq) -> Res<Completion> {
    spin_then(cq, check)
}

/// Spins for up to 1 ms, then sleeps on the completion channel: the
/// server's wait, so that it answers pings fast without stealing the CPU
/// from the client during the one-sided cases.
fn spin_then_block(cq: &Cq) -> Res<Completion> {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(1) {
        if let Some(wc) = try_get(cq)? {
            return Ok(wc);
        }
    }
    check(cq.next_completion(T)?)
}

/// [`spin`] for callers that need only the success (like the C program's
/// wait functions, which write the completion to an out-parameter).
fn spin_ok(cq: &Cq) -> Res<()> {
    spin_then(cq, |wc| match wc.status.is_success() {
        true => Ok(()),
        false => Err(failed(&wc)),
    })
}

/// One completion with a blocking wait (`wait`, then get), checked: the
/// instruction-count case, as the C program's `block`.
fn block(cq: &Cq) -> Res<()> {
    cq.wait()?;
    match cq.get_completion() {
        Ok(Some(wc)) if wc.status.is_success() => Ok(()),
        Ok(Some(wc)) => Err(format!("{:?} failed: {}", wc.op, wc.status).into()),
        Ok(None) => Err(no_completion()),
        Err(e) => Err(e.into()),
    }
}

/// A wait that woke with nothing to take (out of line: the error path).
#[cold]
#[inline(never)]
fn no_completion() -> Box<dyn std::error::Error> {
    "woken with no completion".into()
}

/// Busy-polls `cq` until a completion of kind `op` (others are skipped).
fn spin_for(cq: &Cq, op: CompletionOp) -> Res<Completion> {
    loop {
        let wc = spin(cq)?;
        if wc.op == op {
            return Ok(wc);
        }
    }
}

/// The byte that marks write `k` of a ping-pong (never 0, the initial value).
fn marker(k: usize) -> u8 {
    (k % 255 + 1) as u8
}

/// Busy-polls `mr` until the byte at `offset` is `want` (the other side's
/// write has landed), for at most `T`.
fn wait_for_byte(mr: &MrLocal<AlignedBuf>, offset: usize, want: u8) -> Res<()> {
    let t0 = Instant::now();
    let mut b = [0u8];
    loop {
        for _ in 0..1024 {
            mr.read_volatile_at(offset, &mut b)?;
            if b[0] == want {
                return Ok(());
            }
        }
        if t0.elapsed() > T {
            return Err(format!("the ping-pong write {want} did not arrive within 60 s").into());
        }
    }
}

pub(crate) fn peer(addr: &str, kind: ContextType) -> Res<Peer> {
    Ok(Peer::new(&get_ibv_context(addr, kind)?)?)
}

pub(crate) fn expect(conn: &Conn, want: ConnEvent) -> Res<()> {
    match conn.next_event_timeout(T)? {
        ev if ev == want => Ok(()),
        ev => Err(format!("expected {want}, got {ev}").into()),
    }
}

/// Serves `conns` connections one after the other, answering messages.
pub fn server(addr: &str, port: u16, conns: usize) -> Res<()> {
    let peer = peer(addr, ContextType::Local)?;
    let region = MrLocal::reg(
        &peer,
        AlignedBuf::new(REGION)?,
        Usage::READ_SRC | Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY,
    )?;
    let slots = MrLocal::reg(&peer, AlignedBuf::new(SLOTS * 8)?, Usage::RECV)?;
    let reply = MrLocal::reg(&peer, AlignedBuf::new(8)?, Usage::SEND)?;
    let wsrc = MrLocal::reg(&peer, AlignedBuf::new(REGION)?, Usage::WRITE_SRC)?;
    let ep = Ep::listen(&peer, addr, port)?;
    println!("READY");
    let cfg = cfg();
    for _ in 0..conns {
        let req = ep.next_conn_req_timeout(Some(&cfg), T)?;
        let target = MrRemote::from_descriptor(req.private_data()).ok();
        for i in 0..SLOTS {
            req.recv(&slots, i * 8, 8, i as u64)?;
        }
        let conn = req.connect(&region.descriptor())?;
        expect(&conn, ConnEvent::Established)?;
        loop {
            let wc = spin_then_block(conn.cq())?;
            if wc.op != CompletionOp::Recv {
                continue;
            }
            let i = wc.op_context as usize;
            let mut m = [0u8; 8];
            slots.read_at(i * 8, &mut m)?;
            if m[0] == DONE {
                break;
            }
            conn.recv(&slots, i * 8, 8, i as u64)?;
            if m[0] == PING {
                conn.send(&reply, 0, 8, Flags::COMPLETION_ALWAYS, 0)?;
            } else if m[0] == WPP {
                let size = u32::from_le_bytes([m[1], m[2], m[3], m[4]]) as usize;
                let n = u16::from_le_bytes([m[5], m[6]]) as usize;
                let target = target.as_ref().ok_or("a write ping-pong needs the client's descriptor")?;
                for k in 1..=n {
                    // wait for the client's write, then answer with one
                    wait_for_byte(&region, size - 1, marker(k))?;
                    wsrc.write_at(size - 1, &[marker(k)])?;
                    conn.write(target, 0, &wsrc, 0, size, Flags::COMPLETION_ALWAYS, 0)?;
                    spin_for(conn.cq(), CompletionOp::Write)?;
                }
            }
        }
        expect(&conn, ConnEvent::Closed)?;
        conn.disconnect()?;
    }
    Ok(())
}

/// Accepts `n` connections at once (each given the region), then waits for
/// all of them to close: the passive side of the shared-channel scale case.
pub fn server_multi(addr: &str, port: u16, n: usize) -> Res<()> {
    let peer = peer(addr, ContextType::Local)?;
    let region = MrLocal::reg(&peer, AlignedBuf::new(REGION)?, Usage::READ_SRC | Usage::WRITE_DST)?;
    let ep = Ep::listen(&peer, addr, port)?;
    println!("READY");
    let cfg = cfg();
    let mut conns = Vec::with_capacity(n);
    for _ in 0..n {
        let conn = ep.next_conn_req_timeout(Some(&cfg), T)?.connect(&region.descriptor())?;
        expect(&conn, ConnEvent::Established)?;
        conns.push(conn);
    }
    for conn in &conns {
        expect(conn, ConnEvent::Closed)?;
        conn.disconnect()?;
    }
    Ok(())
}

/// `n` connections, each with its CQ on a shared completion channel, driven
/// by one epoll loop: every connection keeps one 8-byte read in flight until
/// it has done `m`; prints the total rate.
pub fn client_scch(addr: &str, port: u16, n: usize, m: usize) -> Res<()> {
    let peer = peer(addr, ContextType::Remote)?;
    let mut cfg = cfg();
    cfg.set_compl_channel(true);
    let local = MrLocal::reg(&peer, AlignedBuf::new(8 * n)?, Usage::READ_DST)?;
    // SAFETY (all libc calls below): plain syscalls on an epoll fd this
    // function owns and closes, with a live events array.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if ep < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    let conns = connect_many(&peer, addr, port, &cfg, n)?;
    for (i, (conn, _)) in conns.iter().enumerate() {
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: i as u64 };
        if unsafe {
            libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, std::os::fd::AsRawFd::as_raw_fd(&conn.compl_fd()?), &mut ev)
        } != 0
        {
            return Err(std::io::Error::last_os_error().into());
        }
    }
    stats::print_mem("rpma", &format!("scch{n}"));
    let f = Flags::COMPLETION_ALWAYS;
    let mut posted = vec![1usize; n];
    let (mut done, total) = (0, n * m);
    let t0 = Instant::now();
    for (i, (c, r)) in conns.iter().enumerate() {
        c.read(&local, 8 * i, r, 0, 8, f, 0)?;
    }
    let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 64];
    let mut sleeps = 0usize;
    while done < total {
        sleeps += 1;
        let k = unsafe { libc::epoll_wait(ep, evs.as_mut_ptr(), evs.len() as i32, 60_000) };
        if k <= 0 {
            return Err(format!("epoll_wait gave {k}: {}", std::io::Error::last_os_error()).into());
        }
        for e in &evs[..k as usize] {
            let i = e.u64 as usize;
            let (c, r) = &conns[i];
            let (cq, _) = c.wait()?;
            while try_get(cq)?.is_some() {
                done += 1;
                if posted[i] < m {
                    c.read(&local, 8 * i, r, 0, 8, f, 0)?;
                    posted[i] += 1;
                }
            }
        }
    }
    stats::print_rate("rpma", &format!("scch{n}"), total, t0.elapsed().as_secs_f64());
    println!("INFO-SLEEPS rpma scch{n} {sleeps}");
    unsafe { libc::close(ep) };
    close_many(&conns)
}

/// `n` connections with per-connection CQs and no channels, served round
/// robin by one thread: each pass takes at most one completion from each
/// connection's CQ and re-posts its read (`m` each). Beside `client_scch`
/// (which runs a ready connection's reads back to back) it isolates the
/// order of service from the CQ layout: `client_scq`'s shared CQ serves in
/// this order too.
pub fn client_scrr(addr: &str, port: u16, n: usize, m: usize) -> Res<()> {
    let peer = peer(addr, ContextType::Remote)?;
    let cfg = cfg();
    let local = MrLocal::reg(&peer, AlignedBuf::new(8 * n)?, Usage::READ_DST)?;
    let conns = connect_many(&peer, addr, port, &cfg, n)?;
    stats::print_mem("rpma-rr", &format!("scch{n}"));
    let f = Flags::COMPLETION_ALWAYS;
    let mut posted = vec![1usize; n];
    let (mut done, total) = (0, n * m);
    let mut idle = 0usize;
    let t0 = Instant::now();
    for (i, (c, r)) in conns.iter().enumerate() {
        c.read(&local, 8 * i, r, 0, 8, f, 0)?;
    }
    while done < total {
        let before = done;
        for (i, (c, r)) in conns.iter().enumerate() {
            if try_get(c.cq())?.is_some() {
                done += 1;
                if posted[i] < m {
                    c.read(&local, 8 * i, r, 0, 8, f, 0)?;
                    posted[i] += 1;
                }
            }
        }
        if done == before {
            idle += 1;
            if t0.elapsed() > T {
                return Err("scrr: no completion within the timeout".into());
            }
        }
    }
    stats::print_rate("rpma-rr", &format!("scch{n}"), total, t0.elapsed().as_secs_f64());
    println!("INFO-SLEEPS rpma-rr scch{n} {idle}");
    close_many(&conns)
}

/// The set-up the task clients (`client_aio`, `client_aio_bare`) share:
/// a current-thread runtime, one destination region for all (8 bytes a
/// connection, as in `client_scch`) and `n` connections of send queue 8,
/// receive queue 1.
#[allow(clippy::type_complexity)]
fn task_clients(
    addr: &str,
    port: u16,
    n: usize,
) -> Res<(tokio::runtime::Runtime, std::sync::Arc<MrLocal<AlignedBuf>>, Vec<(Conn, MrRemote)>)> {
    let peer = peer(addr, ContextType::Remote)?;
    let mut cfg = cfg();
    cfg.set_sq_size(8);
    cfg.set_rq_size(1);
    let rt = tokio::runtime::Builder::new_current_thread().enable_io().build()?;
    let local = std::sync::Arc::new(MrLocal::reg(&peer, AlignedBuf::new(8 * n)?, Usage::READ_DST)?);
    let conns = connect_many(&peer, addr, port, &cfg, n)?;
    Ok((rt, local, conns))
}

/// The floor of any awaited client on tokio, beside `client_aio`: `n`
/// connections as spawned tasks on one current-thread runtime, each
/// posting its read with the blocking call and polling its own CQ (no
/// channel, no reaper, no routing), spending a unit of tokio's budget per
/// read as an awaited operation does, and yielding while its CQ is empty.
/// What `client_aio` costs above it is `AsyncConn`'s own share.
pub fn client_aio_bare(addr: &str, port: u16, n: usize, m: usize) -> Res<()> {
    let (rt, local, conns) = task_clients(addr, port, n)?;
    rt.block_on(async {
        let f = Flags::COMPLETION_ALWAYS;
        let t0 = Instant::now();
        let tasks: Vec<_> = conns
            .into_iter()
            .enumerate()
            .map(|(i, (conn, remote))| {
                let local = local.clone();
                tokio::spawn(async move {
                    for _ in 0..m {
                        conn.read(&local, 8 * i, &remote, 0, 8, f, 0)?;
                        loop {
                            if try_get(conn.cq()).map_err(|e| e.to_string())?.is_some() {
                                break;
                            }
                            if t0.elapsed() > T {
                                return Err("aio-bare: no completion within the timeout".into());
                            }
                            tokio::task::yield_now().await;
                        }
                        tokio::task::coop::consume_budget().await;
                    }
                    Ok::<_, Box<dyn std::error::Error + Send + Sync>>((conn, remote))
                })
            })
            .collect();
        let mut done = Vec::with_capacity(n);
        for t in tasks {
            done.push(t.await?.map_err(|e| e.to_string())?);
        }
        stats::print_rate("rpma-aio-bare", &format!("scch{n}"), n * m, t0.elapsed().as_secs_f64());
        close_many(&done)
    })
}

/// `n` connections as `rpma::aio::AsyncConn` tasks on one current-thread
/// runtime, each keeping one awaited 8-byte read in flight, `m` each:
/// beside `scch` (the same with an epoll loop over per-connection CQs).
pub fn client_aio(addr: &str, port: u16, n: usize, m: usize) -> Res<()> {
    let (rt, local, conns) = task_clients(addr, port, n)?;
    rt.block_on(async {
        let conns = conns
            .into_iter()
            .map(|(conn, remote)| Ok((rpma::aio::AsyncConn::new(conn)?, remote)))
            .collect::<Res<Vec<_>>>()?;
        let t0 = Instant::now();
        let tasks: Vec<_> = conns
            .into_iter()
            .enumerate()
            .map(|(i, (conn, remote))| {
                let local = local.clone();
                tokio::spawn(async move {
                    for _ in 0..m {
                        conn.read(&local, 8 * i, &remote, 0, 8).await?;
                    }
                    Ok::<_, rpma::Error>(conn)
                })
            })
            .collect();
        let mut done = Vec::with_capacity(n);
        for t in tasks {
            done.push(t.await??);
        }
        stats::print_rate("rpma-aio", &format!("scch{n}"), n * m, t0.elapsed().as_secs_f64());
        for conn in done {
            conn.disconnect().await?;
        }
        Ok(())
    })
}

/// `n` connections on one [`SharedCq`], driven by one thread that sleeps
/// on the CQ's channel: every connection keeps one 8-byte read in flight
/// until it has done `m`; each completion finds its connection by its op
/// context (the connection's index, as a C user would put a pointer there); prints the
/// total rate (as `rpma-scq`, beside `client_scch`'s per-connection CQs).
pub fn client_scq(addr: &str, port: u16, n: usize, m: usize) -> Res<()> {
    let peer = peer(addr, ContextType::Remote)?;
    let mut cfg = cfg();
    // One read in flight per connection: small queues, so that 256
    // connections' reservations fit in one CQ (rxe's max_cqe is 32767).
    cfg.set_sq_size(8);
    cfg.set_rq_size(1);
    let per = cfg.sq_size() + cfg.rq_size();
    let scq = SharedCq::new(&peer, per * u32::try_from(n)?)?;
    cfg.set_shared_cq(Some(&scq));
    let local = MrLocal::reg(&peer, AlignedBuf::new(8 * n)?, Usage::READ_DST)?;
    let conns = connect_many(&peer, addr, port, &cfg, n)?;
    stats::print_mem("rpma-scq", &format!("scch{n}"));
    let f = Flags::COMPLETION_ALWAYS;
    let mut posted = vec![1usize; n];
    let (mut done, total) = (0, n * m);
    let mut wc = [Cq::EMPTY; 64];
    let mut sleeps = 0usize;
    let t0 = Instant::now();
    // Each read's op context is its connection's index (as a C user puts
    // a pointer there): the completion finds its connection without a map.
    for (i, (c, r)) in conns.iter().enumerate() {
        c.read(&local, 8 * i, r, 0, 8, f, i as u64)?;
    }
    while done < total {
        let got = match scq.get_wc(&mut wc) {
            Ok(k) if k > 0 => k,
            Ok(_) => {
                sleeps += 1;
                scq.wait_timeout(T)?;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        for w in &wc[..got] {
            check(*w)?;
            done += 1;
            let i = w.op_context as usize;
            let (c, r) = conns.get(i).ok_or("a completion of no connection")?;
            if posted[i] < m {
                c.read(&local, 8 * i, r, 0, 8, f, i as u64)?;
                posted[i] += 1;
            }
        }
    }
    stats::print_rate("rpma-scq", &format!("scch{n}"), total, t0.elapsed().as_secs_f64());
    println!("INFO-SLEEPS rpma-scq scch{n} {sleeps}");
    close_many(&conns)
}

/// `n` connections with `cfg`, each with the server's descriptor.
fn connect_many(peer: &Peer, addr: &str, port: u16, cfg: &ConnCfg, n: usize) -> Res<Vec<(Conn, MrRemote)>> {
    (0..n)
        .map(|_| {
            let conn = connect_cfg(peer, addr, port, cfg, &[])?;
            let remote = MrRemote::from_descriptor(conn.private_data())?;
            Ok((conn, remote))
        })
        .collect()
}

/// Disconnects every connection, then waits for each to close.
fn close_many(conns: &[(Conn, MrRemote)]) -> Res<()> {
    for (c, _) in conns {
        c.disconnect()?;
    }
    for (c, _) in conns {
        expect(c, ConnEvent::Closed)?;
    }
    Ok(())
}

/// Connects to the server (retrying while it is not listening yet).
fn connect(peer: &Peer, addr: &str, port: u16) -> Res<Conn> {
    connect_cfg(peer, addr, port, &cfg(), &[])
}

fn connect_cfg(peer: &Peer, addr: &str, port: u16, cfg: &ConnCfg, pdata: &[u8]) -> Res<Conn> {
    let t0 = Instant::now();
    loop {
        let conn = ConnReq::new(peer, addr, port, Some(cfg))?.connect(pdata)?;
        match conn.next_event_timeout(T)? {
            ConnEvent::Established => return Ok(conn),
            ConnEvent::Rejected if t0.elapsed() < T => std::thread::sleep(Duration::from_millis(50)),
            ev => return Err(format!("connecting failed: {ev}").into()),
        }
    }
}

/// Sends DONE from `msg` (which holds it), then disconnects first.
fn close(conn: Conn, msg: &MrLocal<AlignedBuf>) -> Res<()> {
    conn.send(msg, 0, 8, Flags::COMPLETION_ALWAYS, 0)?;
    spin(conn.cq())?;
    conn.disconnect()?;
    expect(&conn, ConnEvent::Closed)
}

/// The client's connection and regions.
struct Client {
    conn: Conn,
    remote: MrRemote,
    local: MrLocal<AlignedBuf>,
    msg: MrLocal<AlignedBuf>,
    rbuf: MrLocal<AlignedBuf>,
    /// Where the server's ping-pong writes land.
    wdst: MrLocal<AlignedBuf>,
}

impl Client {
    fn connect(peer: &Peer, addr: &str, port: u16) -> Res<Client> {
        Self::connect_with(peer, addr, port, &cfg())
    }

    fn connect_with(peer: &Peer, addr: &str, port: u16, cfg: &ConnCfg) -> Res<Client> {
        let wdst = MrLocal::reg(peer, AlignedBuf::new(REGION)?, Usage::WRITE_DST)?;
        let conn = connect_cfg(peer, addr, port, cfg, &wdst.descriptor())?;
        let remote = MrRemote::from_descriptor(conn.private_data())?;
        let local = MrLocal::reg(peer, AlignedBuf::new(REGION)?, Usage::READ_DST | Usage::WRITE_SRC)?;
        let msg = MrLocal::reg(peer, AlignedBuf::new(8)?, Usage::SEND)?;
        let rbuf = MrLocal::reg(peer, AlignedBuf::new(8)?, Usage::RECV)?;
        Ok(Client { conn, remote, local, msg, rbuf, wdst })
    }

    /// A ping-pong of `size`-byte writes (perftest's `ib_write_lat`): the
    /// client writes, the server sees the last byte change and writes back.
    /// Half the round trip, as perftest reports it.
    fn write_pingpong(&mut self, size: usize, iters: usize) -> Res<Lat> {
        let n = iters + iters / 10;
        let mut m = [WPP, 0, 0, 0, 0, 0, 0, 0];
        m[1..5].copy_from_slice(&(size as u32).to_le_bytes());
        m[5..7].copy_from_slice(&u16::try_from(n)?.to_le_bytes());
        self.msg.write_at(0, &m)?;
        self.conn.send(&self.msg, 0, 8, Flags::COMPLETION_ALWAYS, 0)?;
        spin(self.conn.cq())?;
        let mut t = Vec::with_capacity(iters);
        for k in 1..=n {
            self.local.write_at(size - 1, &[marker(k)])?;
            let t0 = Instant::now();
            self.conn.write(&self.remote, 0, &self.local, 0, size, Flags::COMPLETION_ALWAYS, 0)?;
            wait_for_byte(&self.wdst, size - 1, marker(k))?;
            let rtt = t0.elapsed().as_secs_f64() * 1e6;
            spin_for(self.conn.cq(), CompletionOp::Write)?; // before `local` is rewritten
            if k > n - iters {
                t.push(rtt / 2.0);
            }
        }
        Ok(stats::lat(t))
    }

    fn set_kind(&mut self, kind: u8) -> Res<()> {
        Ok(self.msg.write_at(0, &[kind])?)
    }

    /// Posts one operation of `op` (signaled).
    fn post(&self, op: Op, size: usize) -> Res<()> {
        let (c, f) = (&self.conn, Flags::COMPLETION_ALWAYS);
        match op {
            Op::Read => c.read(&self.local, 0, &self.remote, 0, size, f, 0)?,
            Op::Write => c.write(&self.remote, 0, &self.local, 0, size, f, 0)?,
            Op::Send => c.send(&self.msg, 0, 8, f, 0)?,
            // SAFETY: `local` lives as long as the client, and every
            // operation is waited for before the next one is posted.
            Op::ReadUnheld => {
                c.post(unsafe { Unheld::new(Read::new(&self.local, 0, &self.remote, 0, size).flags(f)) })?
            }
            Op::WriteUnheld => {
                c.post(unsafe { Unheld::new(Write::new(&self.remote, 0, &self.local, 0, size).flags(f)) })?
            }
            Op::WriteInline => {
                let data = INLINE_DATA.get(..size).ok_or("write_inline: size above INLINE_DATA")?;
                c.post(rpma::ops::WriteInline::new(&self.remote, 0, data).flags(f))?
            }
            Op::WriteFlush | Op::AtomicWrite | Op::PingPong | Op::Commit | Op::CommitChain | Op::EmptyPoll => {
                unreachable!("{op:?} is not a single post")
            }
        }
        Ok(())
    }

    /// One operation of `op`, waited for with `wait`.
    fn once(&self, op: Op, size: usize, wait: fn(&Cq) -> Res<()>) -> Res<()> {
        let (c, cq) = (&self.conn, self.conn.cq());
        match op {
            Op::WriteFlush => {
                c.write(&self.remote, 0, &self.local, 0, size, Flags::COMPLETION_ON_ERROR, 0)?;
                c.flush(&self.remote, 0, size as u64, FlushType::Visibility, Flags::COMPLETION_ALWAYS, 0)?;
                wait(cq)?;
            }
            Op::AtomicWrite => {
                c.atomic_write(&self.remote, 0, [7; 8], Flags::COMPLETION_ALWAYS, 0)?;
                wait(cq)?;
            }
            // librpma example 07's commit: the data, its flush, the pointer
            // to it, the pointer's flush; only the last one signaled. As
            // four posts, or as one chain (one doorbell).
            Op::Commit => {
                let (q, at) = (Flags::COMPLETION_ON_ERROR, COMMIT_AT);
                c.write(&self.remote, at, &self.local, 0, 8, q, 0)?;
                c.flush(&self.remote, at, 8, FlushType::Visibility, q, 0)?;
                c.atomic_write(&self.remote, 0, at.to_le_bytes(), q, 0)?;
                c.flush(&self.remote, 0, 8, FlushType::Visibility, Flags::COMPLETION_ALWAYS, 0)?;
                wait(cq)?;
            }
            Op::CommitChain => {
                self.commit_chain()?;
                wait(cq)?;
            }
            Op::EmptyPoll => {
                if let Some(c) = cq.get_completion()? {
                    return Err(format!("empty_poll: {c:?} from a CQ with nothing posted").into());
                }
            }
            Op::PingPong => {
                c.recv(&self.rbuf, 0, 8, 0)?;
                c.send(&self.msg, 0, 8, Flags::COMPLETION_ALWAYS, 0)?;
                wait(cq)?;
                wait(cq)?;
            }
            _ => {
                self.post(op, size)?;
                wait(cq)?;
            }
        }
        Ok(())
    }

    /// The commit as one chain. Its own function: a `Chain` keeps its
    /// operations in place (about 4 KiB), which in `once` would give every
    /// case's frame a stack probe.
    #[inline(never)]
    fn commit_chain(&self) -> Res<()> {
        let mut ch = self.conn.chain();
        let (w, f, a, p) = self.commit_ops();
        ch.push(w)?.push(f)?.push(a)?.push(p)?;
        Ok(ch.post()?)
    }

    /// The commit's four operations, as chained: the data, its flush, the
    /// pointer to it, the pointer's flush; only the last one signaled.
    #[inline(always)]
    fn commit_ops(&self) -> (Write<'_, AlignedBuf>, Flush<'_>, AtomicWrite<'_>, Flush<'_>) {
        let (q, at) = (Flags::COMPLETION_ON_ERROR, COMMIT_AT);
        (
            Write::new(&self.remote, at, &self.local, 0, 8).flags(q).op_context(0),
            Flush::new(&self.remote, at, 8, FlushType::Visibility).flags(q).op_context(0),
            AtomicWrite::new(&self.remote, 0, at.to_le_bytes()).flags(q).op_context(0),
            Flush::new(&self.remote, 0, 8, FlushType::Visibility).flags(Flags::COMPLETION_ALWAYS).op_context(0),
        )
    }

    fn latency(&mut self, case: &str, size: usize, iters: usize) -> Res<Lat> {
        Ok(stats::lat(self.samples(case, size, iters)?))
    }

    /// The latencies (µs) of `iters` operations of `case`, after a warm-up.
    fn samples(&mut self, case: &str, size: usize, iters: usize) -> Res<Vec<f64>> {
        let op = Op::of(case)?;
        if op == Op::PingPong {
            self.set_kind(PING)?;
        }
        for _ in 0..iters / 10 {
            self.once(op, size, spin_ok)?; // warm-up
        }
        let mut t = Vec::with_capacity(iters);
        for _ in 0..iters {
            let t0 = Instant::now();
            self.once(op, size, spin_ok)?;
            t.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        if op == Op::PingPong {
            t.iter_mut().for_each(|x| *x /= 2.0); // perftest reports half the round trip
        }
        Ok(t)
    }

    /// `iters` operations with at most `qd` in flight; returns seconds.
    fn stream(&mut self, case: &str, size: usize, qd: usize, iters: usize) -> Res<f64> {
        let op = Op::of(case)?;
        if op == Op::Send {
            self.set_kind(STREAM)?;
        }
        let cq = self.conn.cq();
        let mut wc = [Cq::EMPTY; 64];
        let (mut posted, mut done) = (0, 0);
        let t0 = Instant::now();
        while done < iters {
            while posted < iters && posted - done < qd {
                self.post(op, size)?;
                posted += 1;
            }
            let n = cq.get_wc(&mut wc)?;
            if n == 0 && t0.elapsed() >= T {
                return Err(format!("no completion within {T:?}").into());
            }
            for w in &wc[..n] {
                check(*w)?;
            }
            done += n;
        }
        Ok(t0.elapsed().as_secs_f64())
    }

    fn close(mut self) -> Res<()> {
        self.set_kind(DONE)?;
        close(self.conn, &self.msg)
    }
}

/// A case, resolved once from its name so that the measured loops do not
/// compare strings (the C program does the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Read,
    Write,
    Send,
    WriteFlush,
    AtomicWrite,
    PingPong,
    ReadUnheld,
    WriteUnheld,
    WriteInline,
    Commit,
    CommitChain,
    /// A busy-polling loop's miss: `get_completion` on an empty CQ.
    EmptyPoll,
}

/// Where the commit case writes its data (its pointer goes at 0).
const COMMIT_AT: u64 = 64;

impl Op {
    fn of(case: &str) -> Res<Op> {
        Ok(match case {
            "read" => Op::Read,
            "write" => Op::Write,
            "send" => Op::Send,
            "write_flush" => Op::WriteFlush,
            "atomic_write" => Op::AtomicWrite,
            "pingpong" => Op::PingPong,
            "read_unheld" => Op::ReadUnheld,
            "write_unheld" => Op::WriteUnheld,
            "write_inline" => Op::WriteInline,
            "commit" => Op::Commit,
            "commit_chain" => Op::CommitChain,
            "empty_poll" => Op::EmptyPoll,
            other => return Err(format!("unknown case {other}").into()),
        })
    }
}

/// The latency sizes, the queue depths and sizes of the streaming cases.
pub const LAT_SIZES: [usize; 7] = [8, 64, 256, 1024, 4096, 16384, 65536];
pub const BW_SIZES: [usize; 2] = [4096, 65536];
pub const QDS: [usize; 4] = [1, 4, 16, 64];

/// The sizes of the small-write case, inline against not, its rounds, and
/// the bytes `write_inline` sends (from a plain slice, no registration).
pub const INLINE_SIZES: [usize; 3] = [8, 64, 256];
const INLINE_ROUNDS: usize = 4;
static INLINE_DATA: [u8; 256] = [7; 256];

/// Small writes, inline (`write_inline`) against not (`write` from a
/// registered region), on one connection asking for 256 inline bytes, in
/// [`INLINE_ROUNDS`] interleaved rounds (the order alternating), the
/// samples of all rounds pooled: `rpma-inline` and `rpma-noinline` rows of
/// case `small_write`.
pub fn client_inline(addr: &str, port: u16, iters: usize) -> Res<()> {
    let peer = peer(addr, ContextType::Remote)?;
    let mut cfg = cfg();
    cfg.set_max_inline_data(INLINE_DATA.len() as u32);
    let mut c = Client::connect_with(&peer, addr, port, &cfg)?;
    eprintln!(
        "compare: inline: granted max_inline_data {}, max_send_sge {}",
        c.conn.max_inline_data(),
        c.conn.max_send_sge()
    );
    let per_round = (iters / INLINE_ROUNDS).max(10);
    for size in INLINE_SIZES {
        let (mut inl, mut plain) = (Vec::new(), Vec::new());
        for round in 0..INLINE_ROUNDS {
            if round % 2 == 0 {
                inl.extend(c.samples("write_inline", size, per_round)?);
                plain.extend(c.samples("write", size, per_round)?);
            } else {
                plain.extend(c.samples("write", size, per_round)?);
                inl.extend(c.samples("write_inline", size, per_round)?);
            }
        }
        stats::print_lat("rpma-inline", "small_write", size, inl.len(), &stats::lat(inl));
        stats::print_lat("rpma-noinline", "small_write", size, plain.len(), &stats::lat(plain));
    }
    c.close()
}

/// Runs every case of the comparison and prints `RESULT` lines.
pub fn client(addr: &str, port: u16, iters: usize) -> Res<()> {
    let peer = peer(addr, ContextType::Remote)?;
    let mut c = Client::connect(&peer, addr, port)?;
    for case in ["read", "write"] {
        for size in LAT_SIZES {
            stats::print_lat("rpma", case, size, iters, &c.latency(case, size, iters)?);
            let unheld = format!("{case}_unheld");
            stats::print_lat("rpma-unheld", case, size, iters, &c.latency(&unheld, size, iters)?);
        }
    }
    for case in ["write_flush", "atomic_write", "pingpong"] {
        stats::print_lat("rpma", case, 8, iters, &c.latency(case, 8, iters)?);
    }
    for size in LAT_SIZES {
        stats::print_lat("rpma", "write_pingpong", size, iters, &c.write_pingpong(size, iters)?);
    }
    for case in ["read", "write"] {
        for size in BW_SIZES {
            for qd in QDS {
                c.stream(case, size, qd, iters / 10)?;
                let secs = c.stream(case, size, qd, iters)?;
                stats::print_bw("rpma", case, size, qd, iters, secs);
                let unheld = format!("{case}_unheld");
                let secs = c.stream(&unheld, size, qd, iters)?;
                stats::print_bw("rpma-unheld", case, size, qd, iters, secs);
            }
        }
    }
    let n = iters * 4;
    let secs = c.stream("send", 8, 16, n)?;
    stats::print_bw("rpma", "send", 8, 16, n, secs);
    c.close()
}

/// One case alone: `case` (`read`, `write`, ...) of `size` bytes, its
/// latency at depth 1, else its streaming rate at depth `qd`.
pub fn client_one(addr: &str, port: u16, case: &str, size: usize, qd: usize, iters: usize) -> Res<()> {
    let peer = peer(addr, ContextType::Remote)?;
    let mut c = Client::connect(&peer, addr, port)?;
    if qd <= 1 {
        stats::print_lat("rpma", case, size, iters, &c.latency(case, size, iters)?);
    } else {
        c.stream(case, size, qd, iters / 10)?;
        let secs = c.stream(case, size, qd, iters)?;
        stats::print_bw("rpma", case, size, qd, iters, secs);
    }
    c.close()
}

/// Flush and atomic write with the native operations turned off
/// (`ConnCfg::set_native_ops(false)`: APM read, fenced write), labelled
/// `rpma-emulated`: beside `client`'s native ones where the device has them.
pub fn client_emulated(addr: &str, port: u16, iters: usize) -> Res<()> {
    let peer = peer(addr, ContextType::Remote)?;
    let mut cfg = cfg();
    cfg.set_native_ops(false);
    let mut c = Client::connect_with(&peer, addr, port, &cfg)?;
    for case in ["write_flush", "atomic_write"] {
        stats::print_lat("rpma-emulated", case, 8, iters, &c.latency(case, 8, iters)?);
    }
    c.close()
}

/// The commit's latency, as four posts (`rpma`) and as one chain
/// (`rpma-chain`): one round of the interleaved comparison with C librpma.
pub fn client_commit(addr: &str, port: u16, iters: usize) -> Res<()> {
    let peer = peer(addr, ContextType::Remote)?;
    let mut c = Client::connect(&peer, addr, port)?;
    stats::print_lat("rpma", "commit", 8, iters, &c.latency("commit", 8, iters)?);
    stats::print_lat("rpma-chain", "commit", 8, iters, &c.latency("commit_chain", 8, iters)?);
    c.close()
}

/// The send message rate alone, `rounds` times (`compare sendrate`), to
/// look at its spread.
pub fn client_sendrate(addr: &str, port: u16, n: usize, rounds: usize) -> Res<()> {
    let peer = peer(addr, ContextType::Remote)?;
    let mut c = Client::connect(&peer, addr, port)?;
    for _ in 0..rounds {
        let secs = c.stream("send", 8, 16, n)?;
        stats::print_bw("rpma", "send", 8, 16, n, secs);
    }
    c.close()
}

/// `iters` operations of `case` with blocking waits: the workload whose
/// instructions callgrind counts.
/// A case name ending in `_emulated` runs with the native operations off.
pub fn client_ir(addr: &str, port: u16, case: &str, iters: usize) -> Res<()> {
    let peer = peer(addr, ContextType::Remote)?;
    let mut cfg = cfg();
    let case = match case.strip_suffix("_emulated") {
        Some(base) => {
            cfg.set_native_ops(false);
            base
        }
        None => case,
    };
    let c = Client::connect_with(&peer, addr, port, &cfg)?;
    if case == "read_async" {
        return client_ir_async(c, iters);
    }
    if case == "commit_unheld_chain" {
        return client_ir_commit_unheld(c, iters);
    }
    if let Some(per_buffer) = case.strip_prefix("stage_").and_then(|k| k.strip_suffix("@16")) {
        return client_ir_stage(c, per_buffer == "regs", iters);
    }
    // `CASE@QD`: QD operations posted, then reaped up to 64 per poll with
    // a blocking wait whenever the CQ is empty (as the C program).
    // `read_chain@QD`, `write_chain@QD`: the QD operations as one chain.
    // `_last` after either: only the last operation signaled (one
    // completion for the QD). `read_unheld_chain@QD` (and `write_`, and
    // `_last`): the unsafe push, in `client_ir_unheld`.
    if let Some((base, qd)) = case.split_once('@') {
        if base.contains("_unheld_chain") {
            return client_ir_unheld(c, base, qd.parse::<usize>()?.max(1), iters);
        }
        let (last, base) = match base.strip_suffix("_last") {
            Some(b) => (true, b),
            None => (false, base),
        };
        let (chained, base) = match base.strip_suffix("_chain") {
            Some(b) => (true, b),
            None => (false, base),
        };
        let (op, qd) = (Op::of(base)?, qd.parse::<usize>()?.max(1));
        let mut wc = [Cq::EMPTY; 64];
        let flags = |i: usize| match !last || i + 1 == qd {
            true => Flags::COMPLETION_ALWAYS,
            false => Flags::COMPLETION_ON_ERROR,
        };
        let f = Flags::COMPLETION_ALWAYS;
        for _ in 0..iters / qd {
            // Four loops, not one with the flags chosen per operation: the
            // choice inside the loop is work the C program does not do.
            match (chained, last) {
                (true, false) => {
                    let mut chain = c.conn.chain();
                    for _ in 0..qd {
                        match op {
                            Op::Read => chain.push(rpma::ops::Read::new(&c.local, 0, &c.remote, 0, 8).flags(f))?,
                            _ => chain.push(rpma::ops::Write::new(&c.remote, 0, &c.local, 0, 8).flags(f))?,
                        };
                    }
                    chain.post()?;
                }
                (true, true) => {
                    let mut chain = c.conn.chain();
                    for i in 0..qd {
                        let f = flags(i);
                        match op {
                            Op::Read => chain.push(rpma::ops::Read::new(&c.local, 0, &c.remote, 0, 8).flags(f))?,
                            _ => chain.push(rpma::ops::Write::new(&c.remote, 0, &c.local, 0, 8).flags(f))?,
                        };
                    }
                    chain.post()?;
                }
                // Reads or writes only (kept apart from `post`, whose
                // inlining sets the depth-1 counts).
                (false, true) => {
                    for i in 0..qd {
                        let f = flags(i);
                        match op {
                            Op::Read => c.conn.read(&c.local, 0, &c.remote, 0, 8, f, 0)?,
                            _ => c.conn.write(&c.remote, 0, &c.local, 0, 8, f, 0)?,
                        }
                    }
                }
                (false, false) => (0..qd).try_for_each(|_| c.post(op, 8))?,
            }
            reap(c.conn.cq(), &mut wc, if last { 1 } else { qd })?;
        }
        return c.close();
    }
    // `CASE_spin`: the completion busy-polled, as the latency cases do.
    let (wait, case): (fn(&Cq) -> Res<()>, _) = match case.strip_suffix("_spin") {
        Some(base) => (spin_ok, base),
        None => (block, case),
    };
    let op = Op::of(case)?;
    for _ in 0..iters {
        c.once(op, 8, wait)?;
    }
    c.close()
}

/// Reaps `want` completions from `cq`, up to 64 per poll, waiting only when
/// it is empty; each checked.
#[inline(always)]
fn reap(cq: &Cq, wc: &mut [Completion; 64], want: usize) -> Res<()> {
    let mut done = 0;
    while done < want {
        let n = cq.get_wc(wc)?;
        if n == 0 {
            // `wait_timeout`, not `wait`: a second call site of the
            // inlined `Cq::wait` in this crate makes the compiler keep
            // it out of line in `block` too.
            cq.wait_timeout(T)?;
        }
        for w in &wc[..n] {
            check(*w)?;
        }
        done += n;
    }
    Ok(())
}

/// The `ir` cases of the unsafe chain push (`BASE@QD`):
/// `read_unheld_chain` (`Chain::push` of `ops::Unheld`), `write_` for writes, `_last` for only the last
/// operation signaled. One chain, filled and posted again each round (as a
/// loop at depth would), out of `client_ir` so that its inlining stays as
/// it was.
#[inline(never)]
/// `stage_ring@16`, `stage_regs@16`: a log's records of 64 bytes staged
/// (`write_at`) and written at depth 16, from 16 slots of one registered
/// ring or from 16 registrations (one per buffer); every 16th signaled.
fn client_ir_stage(c: Client, per_buffer: bool, iters: usize) -> Res<()> {
    const REC: usize = 64;
    let peer = c.conn.peer().clone();
    let ring = MrLocal::reg(&peer, AlignedBuf::new(16 * REC)?, Usage::WRITE_SRC)?;
    let regs: Vec<_> =
        (0..16).map(|_| MrLocal::reg(&peer, AlignedBuf::new(REC)?, Usage::WRITE_SRC)).collect::<Result<_, _>>()?;
    let mut wc = [Cq::EMPTY; 64];
    let record = [0x5au8; REC];
    for _ in 0..iters / 16 {
        for (i, reg) in regs.iter().enumerate() {
            let f = if i == 15 { Flags::COMPLETION_ALWAYS } else { Flags::COMPLETION_ON_ERROR };
            let (src, at) = if per_buffer { (reg, 0) } else { (&ring, i * REC) };
            src.write_at(at, &record)?;
            c.conn.write(&c.remote, (i * REC) as u64, src, at, REC, f, 0)?;
        }
        reap(c.conn.cq(), &mut wc, 1)?;
    }
    drop((ring, regs));
    c.close()
}

fn client_ir_unheld(c: Client, base: &str, qd: usize, iters: usize) -> Res<()> {
    let (last, base) = match base.strip_suffix("_last") {
        Some(b) => (true, b),
        None => (false, base),
    };
    let read = match base {
        "read_unheld_chain" => true,
        "write_unheld_chain" => false,
        other => return Err(format!("unknown case {other}").into()),
    };
    let mut wc = [Cq::EMPTY; 64];
    let mut chain = c.conn.chain();
    // One loop per verb (no choice per operation).
    macro_rules! rounds {
        ($op:expr) => {
            for _ in 0..iters / qd {
                for i in 0..qd {
                    let f = match !last || i + 1 == qd {
                        true => Flags::COMPLETION_ALWAYS,
                        false => Flags::COMPLETION_ON_ERROR,
                    };
                    // SAFETY: `c.local` outlives the connection and is not
                    // touched until the chain's completions are reaped below.
                    chain.push(unsafe { Unheld::new($op.flags(f)) })?;
                }
                chain.post()?;
                reap(c.conn.cq(), &mut wc, if last { 1 } else { qd })?;
            }
        };
    }
    let rd = || rpma::ops::Read::new(&c.local, 0, &c.remote, 0, 8);
    let wr = || rpma::ops::Write::new(&c.remote, 0, &c.local, 0, 8);
    match read {
        true => rounds!(rd()),
        false => rounds!(wr()),
    }
    drop(chain);
    c.close()
}

/// The `ir` case `commit_unheld_chain`: example 07's commit (as
/// `commit_chain`) through `Chain::push` of `ops::Unheld`, one chain filled and
/// posted again per commit, the
/// last flush's completion awaited as `commit_chain`'s.
#[inline(never)]
fn client_ir_commit_unheld(c: Client, iters: usize) -> Res<()> {
    let mut ch = c.conn.chain();
    for _ in 0..iters {
        let (w, f, a, p) = c.commit_ops();
        // SAFETY: `c.local` outlives the connection and is not
        // written until the commit's completion is reaped below.
        let (w, f, a, p) = unsafe { (Unheld::new(w), Unheld::new(f), Unheld::new(a), Unheld::new(p)) };
        ch.push(w)?.push(f)?.push(a)?.push(p)?;
        ch.post()?;
        block(c.conn.cq())?;
    }
    drop(ch);
    c.close()
}

/// The `read_async` case of `ir`: the same 8-byte read, awaited on an
/// `rpma::aio::AsyncConn` on a current-thread runtime (its reaper task
/// routes the completion).
fn client_ir_async(c: Client, iters: usize) -> Res<()> {
    let Client { conn, remote, local, msg, .. } = c;
    msg.write_at(0, &[DONE])?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_io().build()?;
    rt.block_on(async move {
        let conn = rpma::aio::AsyncConn::new(conn)?;
        for _ in 0..iters {
            conn.read(&local, 0, &remote, 0, 8).await?;
        }
        conn.send(&msg, 0, 8).await?;
        conn.disconnect().await?;
        Ok(())
    })
}

/// Connection set-up plus tear-down, `n` times (the regions are registered
/// once, before timing, as in the C program).
pub fn client_conns(addr: &str, port: u16, n: usize) -> Res<()> {
    let peer = peer(addr, ContextType::Remote)?;
    let msg = MrLocal::reg(&peer, AlignedBuf::new(8)?, Usage::SEND)?;
    msg.write_at(0, &[DONE])?;
    let t0 = Instant::now();
    for _ in 0..n {
        close(connect(&peer, addr, port)?, &msg)?;
    }
    stats::print_rate("rpma", "conn", n, t0.elapsed().as_secs_f64());
    Ok(())
}

/// Registration throughput: 1 GiB as 2 MiB regions, then as one region.
/// An anonymous private mapping, unmapped on drop (leak it with
/// `mem::forget` while a region may still cover it).
struct AnonMap {
    ptr: *mut u8,
    len: usize,
}

impl AnonMap {
    fn new(len: usize) -> Res<AnonMap> {
        // SAFETY: a fresh anonymous mapping; no existing memory is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error().into());
        }
        Ok(AnonMap { ptr: p.cast(), len })
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is `len` bytes, readable and writable, owned
        // here; the borrow of `self` keeps it mapped.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for AnonMap {
    fn drop(&mut self) {
        // SAFETY: mapped in `new`, unmapped once.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// How the mapping at `addr` is backed: its `AnonHugePages` in kB (from
/// `/proc/self/smaps`), or `None` if it is not found. Registration pins
/// every page, and transparent huge pages pin in far fewer steps, so this
/// says whether the two sides registered alike.
fn anon_huge_kb(addr: usize) -> Option<u64> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut lines = smaps.lines();
    let start = format!("{addr:x}-");
    lines.find(|l| l.starts_with(&start))?;
    let l = lines.find(|l| l.starts_with("AnonHugePages:"))?;
    l.split_whitespace().nth(1)?.parse().ok()
}

pub fn registration(addr: &str) -> Res<()> {
    const GIB: usize = 1 << 30;
    const CHUNK: usize = 2 << 20;
    let peer = peer(addr, ContextType::Local)?;
    // The same memory as the C side's: an anonymous private mapping (not a
    // heap buffer), so both register pages placed alike (transparent huge
    // pages included).
    let mut buf = AnonMap::new(GIB)?;
    for p in buf.as_mut_slice().chunks_mut(4096) {
        p[0] = 1; // fault every page in before timing
    }
    println!(
        "INFO-THP rpma reg start%2M {:#x} AnonHugePages {} kB",
        buf.ptr as usize % CHUNK,
        anon_huge_kb(buf.ptr as usize).map_or(-1, |k| k as i64)
    );
    let usage = Usage::READ_SRC | Usage::WRITE_DST;
    // Slices of `buf` registered as RawMemory: each region is deregistered
    // before `buf` goes, and `buf` is leaked if any deregistration fails.
    let raw = |c: &mut [u8]| {
        // SAFETY: see above.
        unsafe { RawMemory::new(c.as_mut_ptr(), c.len()) }
    };
    let dereg_all = |mrs: Vec<MrLocal<RawMemory>>| -> Res<()> {
        for mr in mrs {
            mr.dereg()?;
        }
        Ok(())
    };
    let t0 = Instant::now();
    let mrs = buf
        .as_mut_slice()
        .chunks_mut(CHUNK)
        .map(|c| MrLocal::reg(&peer, raw(c), usage))
        .collect::<rpma::Result<Vec<_>>>();
    let r = mrs.map_err(Into::into).and_then(dereg_all);
    stats::print_rate("rpma", "reg_2m", GIB / CHUNK, t0.elapsed().as_secs_f64());
    let t0 = Instant::now();
    let r = r.and_then(|()| dereg_all(vec![MrLocal::reg(&peer, raw(buf.as_mut_slice()), usage)?]));
    stats::print_rate("rpma", "reg_1g", 1, t0.elapsed().as_secs_f64());
    if r.is_err() {
        std::mem::forget(buf); // a region may still cover it
    }
    r
}
