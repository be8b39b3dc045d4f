//! The ping-pong of examples 08, 08srq, 12 and 12scch, parameterised by
//! where receive completions arrive.

use super::{Args, Res};
use rpma::{AlignedBuf, Completion, CompletionOp, Conn, ConnCfg, Cq, Ep, Flags, MrLocal, Srq, SrqCfg, Usage};

pub const DONE: u64 = u64::MAX;

/// Which librpma example's contract a side follows: how many exchanges
/// `rounds` means, the lines it prints, and who closes first.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Example {
    /// 08srq: `rounds` exchanges, `Value sent/received` lines; the server
    /// closes first, the client second.
    E08srq,
    /// 12 and 12scch: `rounds - 1` exchanges, `CLIENT:`/`SERVER:` lines;
    /// both sides close first.
    E12,
    /// 13's client: `rounds` exchanges, `[client #PID] value sent/received`
    /// lines; closes second (13's server disconnects every client at its end).
    E13,
}

impl Example {
    fn prefix(self, server: bool) -> &'static str {
        match (self, server) {
            (Example::E12, true) => "SERVER: ",
            (Example::E12, false) => "CLIENT: ",
            _ => "",
        }
    }
}

/// Where receives complete.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// On the main CQ.
    Cq,
    /// On the connection's receive CQ.
    Rcq,
    /// On the receive CQ, with one completion channel shared with the CQ.
    SharedChannel,
    /// Through an SRQ whose receive CQ gets them (server side only).
    Srq,
}

fn cfg(mode: Mode) -> ConnCfg {
    let mut c = ConnCfg::new();
    if mode != Mode::Cq {
        c.set_rcq_size(10);
    }
    if mode == Mode::SharedChannel {
        c.set_compl_channel(true);
    }
    c
}

/// Waits for a completion of `op`, on the right queue for `mode`.
fn wait(conn: &Conn, srq: Option<&Srq>, mode: Mode, op: CompletionOp) -> Res<Completion> {
    let recv = op == CompletionOp::Recv;
    if mode == Mode::SharedChannel {
        let rcq = conn.rcq().ok_or("no rcq")?;
        let want: &Cq = if recv { rcq } else { conn.cq() };
        loop {
            if let Some(wc) = want.get_completion()? {
                if wc.status != rpma::WcStatus::SUCCESS {
                    return Err(format!("{:?} failed: {}", wc.op, wc.status).into());
                }
                if wc.op == op {
                    return Ok(wc);
                }
                continue;
            }
            conn.wait_timeout(super::timeout())?;
        }
    }
    let cq = match (recv, mode) {
        (true, Mode::Rcq) => conn.rcq().ok_or("no rcq")?,
        (true, Mode::Srq) => srq.and_then(|s| s.rcq()).ok_or("no srq rcq")?,
        _ => conn.cq(),
    };
    super::wait_for(cq, op)
}

fn get(m: &MrLocal<AlignedBuf>) -> Res<u64> {
    let mut b = [0u8; 8];
    m.read_at(0, &mut b)?;
    Ok(u64::from_le_bytes(b))
}

/// Sends `v` and waits for its completion and, with `answer`, for the
/// receive posted for the answer: in whichever order they come when both
/// complete on one CQ (see [`super::wait_all`]).
fn send(conn: &Conn, m: &mut MrLocal<AlignedBuf>, srq: Option<&Srq>, mode: Mode, v: u64, answer: bool) -> Res<()> {
    m.write_at(0, &v.to_le_bytes())?;
    conn.send(m, 0, 8, Flags::COMPLETION_ALWAYS, 2)?;
    if answer && mode == Mode::Cq {
        super::wait_all(conn.cq(), &[CompletionOp::Send, CompletionOp::Recv])?;
        return Ok(());
    }
    wait(conn, srq, mode, CompletionOp::Send)?;
    if answer {
        wait(conn, srq, mode, CompletionOp::Recv)?;
    }
    Ok(())
}

/// A receive region and a send region (a region cannot be rewritten while
/// the receive posted into it is in flight).
fn regions(peer: &rpma::Peer) -> Res<(MrLocal<AlignedBuf>, MrLocal<AlignedBuf>)> {
    Ok((MrLocal::reg(peer, AlignedBuf::new(8)?, Usage::RECV)?, MrLocal::reg(peer, AlignedBuf::new(8)?, Usage::SEND)?))
}

pub fn server(a: &Args, mode: Mode, ex: Example) -> Res<()> {
    let peer = super::peer(&a.addr, true)?;
    let (r, mut m) = regions(&peer)?;
    let srq = if mode == Mode::Srq { Some(Srq::new(&peer, Some(&SrqCfg::new()))?) } else { None };
    let mut c = cfg(if mode == Mode::Srq { Mode::Cq } else { mode });
    c.set_srq(srq.as_ref());
    let ep = Ep::listen(&peer, &a.addr, a.port)?;
    let post = |m: &MrLocal<AlignedBuf>, req: Option<&rpma::ConnReq>, conn: Option<&Conn>| -> rpma::Result<()> {
        match (&srq, req, conn) {
            (Some(s), _, _) => s.recv(m, 0, 8, 1),
            (None, Some(r), _) => r.recv(m, 0, 8, 1),
            (None, None, Some(c)) => c.recv(m, 0, 8, 1),
            _ => Ok(()),
        }
    };
    let conn = super::server_accept(&ep, Some(&c), &[], &|req| post(&r, Some(req), None))?;
    let p = ex.prefix(true);
    let rcq = match mode {
        Mode::Cq => conn.cq(),
        Mode::Rcq | Mode::SharedChannel => conn.rcq().ok_or("no rcq")?,
        Mode::Srq => srq.as_ref().and_then(|s| s.rcq()).ok_or("no srq rcq")?,
    };
    loop {
        // The client's next message, or its close (its DONE can be lost to
        // its own disconnect, see common::completion_or_close).
        match super::completion_or_close(&conn, rcq)? {
            None => return super::closed_by_peer(conn),
            Some(wc) if wc.op != CompletionOp::Recv => continue,
            Some(_) => {}
        }
        let v = get(&r)?;
        if v == DONE {
            break;
        }
        println!("{p}Value received: {v}");
        post(&r, None, Some(&conn))?;
        println!("{p}Value sent: {}", v + 1);
        send(&conn, &mut m, srq.as_ref(), mode, v + 1, false)?;
    }
    // librpma's 08srq and 12 servers disconnect first once the client is done.
    super::close_first(conn)
}

pub fn client(a: &Args, mode: Mode, ex: Example) -> Res<()> {
    let peer = super::peer(&a.addr, false)?;
    let seed: u64 = a.rest.first().map_or(Ok(7), |s| s.parse())?;
    let rounds: u32 = a.rest.get(1).map_or(Ok(3), |s| s.parse())?;
    // An optional pause after each exchange, in microseconds (as librpma's).
    let sleep: u64 = a.rest.get(2).map_or(Ok(0), |s| s.parse())?;
    // librpma's 12 counts the final DONE as a round: `rounds - 1` exchanges.
    let exchanges = if ex == Example::E12 { rounds.saturating_sub(1) } else { rounds };
    let p = ex.prefix(false);
    let (r, mut m) = regions(&peer)?;
    let conn = super::client_connect(&peer, a, Some(&cfg(mode)), &[], &|_| Ok(()))?;
    let mut v = seed;
    for _ in 0..exchanges {
        conn.recv(&r, 0, 8, 1)?;
        match ex {
            Example::E13 => println!("[client #{}] value sent: {v}", std::process::id()),
            _ => println!("{p}Value sent: {v}"),
        }
        send(&conn, &mut m, None, mode, v, true)?;
        let got = get(&r)?;
        if got != v.wrapping_add(1) {
            return Err(format!("sent {v}, got {got} back").into());
        }
        match ex {
            Example::E13 => println!("[client #{}] value received: {got}", std::process::id()),
            _ => println!("{p}Value received: {got}"),
        }
        v = got;
        if sleep > 0 {
            std::thread::sleep(std::time::Duration::from_micros(sleep));
        }
    }
    send(&conn, &mut m, None, mode, DONE, false)?;
    match ex {
        // librpma's 08srq and 13 clients wait for the server's disconnect.
        Example::E08srq | Example::E13 => super::close_second(conn),
        Example::E12 => super::close_first(conn),
    }
}
