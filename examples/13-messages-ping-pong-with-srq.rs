//! 13-messages-ping-pong-with-srq: one server answering the ping-pong of
//! example 08 for several clients at once, all receives going through one
//! shared receive queue; the server exits after a time with no activity
//! (librpma's example 13).
//!
//! `cargo run --example 13-messages-ping-pong-with-srq [-- server ADDR PORT [timeout-s] | client ADDR PORT seed rounds]`

mod common;
use common::pingpong::{client, Example, Mode, DONE};
use common::{Args, Res};
use rpma::utils::poll_fds;
use rpma::{AlignedBuf, CompletionOp, Conn, ConnCfg, ConnEvent, Ep, Flags, MrLocal, Srq, SrqCfg, Usage};
use std::time::Duration;

const SLOTS: usize = 8;

fn server(a: &Args) -> Res<()> {
    let idle: u64 = a.rest.first().map_or(Ok(3), |s| s.parse())?;
    let peer = common::peer(&a.addr, true)?;
    let mut scfg = SrqCfg::new();
    scfg.set_rq_size(SLOTS as u32);
    scfg.set_rcq_size(SLOTS as u32 * 2);
    let srq = Srq::new(&peer, Some(&scfg))?;
    let rcq = srq.rcq().ok_or("the SRQ has no receive CQ")?;
    let rcv = MrLocal::reg(&peer, AlignedBuf::new(8 * SLOTS)?, Usage::RECV)?;
    for i in 0..SLOTS {
        srq.recv(&rcv, 8 * i, 8, i as u64)?;
    }
    let mut cfg = ConnCfg::new();
    cfg.set_srq(Some(&srq));
    let ep = Ep::listen(&peer, &a.addr, a.port)?;
    let mut conns: Vec<(Conn, MrLocal<AlignedBuf>)> = Vec::new();
    let (mut answered, mut finished) = (0, 0);
    loop {
        let mut fds = vec![ep.fd(), rcq.fd()];
        fds.extend(conns.iter().map(|(c, _)| c.event_fd()));
        let polled = conns.len();
        let ready = poll_fds(&fds, Some(Duration::from_secs(idle)))?;
        if !ready.iter().any(|&r| r) {
            break; // idle for `idle` seconds
        }
        if ready[0] {
            let conn = ep.next_conn_req(Some(&cfg))?.connect(&[])?;
            conns.push((conn, MrLocal::reg(&peer, AlignedBuf::new(8)?, Usage::SEND)?));
        }
        if ready[1] {
            rcq.wait()?;
            while let Ok(wc) = rcq.get_completion() {
                if !wc.status.is_success() {
                    return Err(format!("receive failed: {}", wc.status).into());
                }
                let slot = wc.op_context as usize;
                let mut b = [0u8; 8];
                rcv.read_at(8 * slot, &mut b)?;
                srq.recv(&rcv, 8 * slot, 8, slot as u64)?;
                let v = u64::from_le_bytes(b);
                if v == DONE {
                    finished += 1;
                    continue;
                }
                let (conn, snd) = conns
                    .iter_mut()
                    .find(|(c, _)| c.qp_num() == wc.qp_num)
                    .ok_or("a message from no known connection")?;
                snd.write_at(0, &(v + 1).to_le_bytes())?;
                conn.send(snd, 0, 8, Flags::COMPLETION_ALWAYS, 0)?;
                common::wait_for(conn.cq(), CompletionOp::Send)?;
                answered += 1;
            }
        }
        // Connections in `fds` order; one accepted above is not among them.
        for i in (0..polled).rev() {
            if ready[2 + i] {
                if let ConnEvent::Closed = conns[i].0.next_event()? {
                    let (c, _) = conns.remove(i);
                    c.disconnect()?;
                }
            }
        }
    }
    println!("server: answered {answered} messages from {finished} clients, idle for {idle} s: exiting");
    Ok(())
}

fn main() {
    common::main_multi(server, |a| client(a, Mode::Cq, Example::E13), &["2"], &[&["10", "3"], &["100", "3"]]);
}
