//! 13-messages-ping-pong-with-srq: one server answering the ping-pong of
//! example 08 for several clients, all receives going through one shared
//! receive queue (librpma's example 13).
//!
//! As librpma's, the server first takes connections, posting one 8-byte
//! receive to the SRQ for each (slot i of a 10-slot region), until none
//! comes for `timeout` seconds (default 5); only then does it answer, each
//! value with value + 1 from the same slot of its send region, until every
//! client has sent DONE. It then disconnects every client; the clients,
//! which make `rounds` exchanges, close second.
//!
//! `cargo run --example 13-messages-ping-pong-with-srq [-- server ADDR PORT [timeout-s] | client ADDR PORT seed rounds [sleep-us]]`

mod common;
use common::pingpong::{client, Example, Mode, DONE};
use common::{Args, Res};
use rpma::{AlignedBuf, CompletionOp, Conn, ConnEvent, Ep, Error, Flags, MrLocal, Srq, Usage};
use std::time::Duration;

/// Clients served (`CLIENT_MAX`).
const CLIENT_MAX: usize = 10;
/// A message: a u64 (`MSG_SIZE`).
const MSG_SIZE: usize = 8;

/// Takes connections until none comes within `timeout`; each gets a receive
/// posted to the SRQ before it is accepted.
fn listen(ep: &Ep, srq: &Srq, recv: &MrLocal<AlignedBuf>, timeout: Duration) -> Res<Vec<Conn>> {
    let mut cfg = rpma::ConnCfg::new();
    cfg.set_srq(Some(srq));
    let mut conns: Vec<Conn> = Vec::new();
    loop {
        let req = match ep.next_conn_req_timeout(Some(&cfg), timeout) {
            Err(Error::NoEvent) => return Ok(conns),
            other => other?,
        };
        let slot = conns.len();
        if slot == CLIENT_MAX {
            eprintln!("No free slot for a new connection request.");
            continue; // the request is dropped: rejected
        }
        srq.recv(recv, MSG_SIZE * slot, MSG_SIZE, slot as u64)?;
        let conn = req.connect(&[])?;
        match conn.next_event_timeout(common::timeout())? {
            ConnEvent::Established => conns.push(conn),
            ev => return Err(format!("accepting failed: {ev}").into()),
        }
        println!("The client #{} has been connected.", conns.len());
    }
}

/// Answers every value the SRQ receives until each client sent DONE.
fn serve(srq: &Srq, conns: &[Conn], recv: &MrLocal<AlignedBuf>, send: &mut MrLocal<AlignedBuf>) -> Res<()> {
    let rcq = srq.rcq().ok_or("the SRQ has no receive CQ")?;
    let mut done = 0;
    while done < conns.len() {
        let wc = rcq.next_completion(common::timeout())?;
        if !wc.status.is_success() {
            return Err(format!("rpma_srq_recv() failed: {}", wc.status).into());
        }
        if wc.op != CompletionOp::Recv {
            return Err(format!("received unexpected wc.opcode value ({:?} != Recv)", wc.op).into());
        }
        let conn = conns
            .iter()
            .find(|c| c.qp_num() == wc.qp_num)
            .ok_or_else(|| format!("Unable to find the connection [qp#{}]", wc.qp_num))?;
        // The slot of the receive buffer that got the message; its answer
        // goes from the same slot of the send region.
        let slot = usize::try_from(wc.op_context).ok().filter(|&s| s < CLIENT_MAX).ok_or("a receive of no slot")?;
        let mut b = [0u8; MSG_SIZE];
        recv.read_at(MSG_SIZE * slot, &mut b)?;
        let v = u64::from_le_bytes(b);
        if v == DONE {
            done += 1;
            continue;
        }
        let qp = conn.qp_num();
        println!("[server] value received: {v} from the connection [qp#{qp}]");
        srq.recv(recv, MSG_SIZE * slot, MSG_SIZE, slot as u64)?;
        let answer = v.wrapping_add(1);
        send.write_at(MSG_SIZE * slot, &answer.to_le_bytes())?;
        println!("[server] value sent: {answer} from the connection [qp#{qp}]");
        // librpma's sends without a completion; waiting for one here lets the
        // send region be rewritten safely (the wire sees no difference).
        conn.send(send, MSG_SIZE * slot, MSG_SIZE, Flags::COMPLETION_ALWAYS, 0)?;
        common::wait_for(conn.cq(), CompletionOp::Send)?;
    }
    Ok(())
}

fn server(a: &Args) -> Res<()> {
    let timeout: i64 = match a.rest.first() {
        Some(s) => s.parse().unwrap_or(0),
        None => 5,
    };
    if timeout <= 0 {
        let given = a.rest.first().map_or("", String::as_str);
        return Err(format!("<timeout> should be a positive number of seconds ({given} given)").into());
    }
    let peer = common::peer(&a.addr, true)?;
    let srq = Srq::new(&peer, None)?;
    let ep = Ep::listen(&peer, &a.addr, a.port)?;
    let recv = MrLocal::reg(&peer, AlignedBuf::new(CLIENT_MAX * MSG_SIZE)?, Usage::RECV)?;
    let mut send = MrLocal::reg(&peer, AlignedBuf::new(CLIENT_MAX * MSG_SIZE)?, Usage::SEND)?;
    let conns = listen(&ep, &srq, &recv, Duration::from_secs(timeout as u64))?;
    println!("Server ended listening.");
    let res =
        serve(&srq, &conns, &recv, &mut send).map_err(|e| format!("{e}; Unable to receive data from all connections"));
    // Disconnect every client, whatever happened.
    let disconnected: rpma::Result<Vec<()>> = conns.iter().map(Conn::disconnect).collect();
    res?;
    Ok(disconnected.map(|_| ())?)
}

fn main() {
    common::main_multi(
        server,
        |a| client(a, Mode::Cq, Example::E13),
        &["3"],
        &[&["1", "3"], &["5", "3"], &["10", "3"]],
    );
}
