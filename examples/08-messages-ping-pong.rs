//! 08-messages-ping-pong: the client sends a counter, the server answers
//! with counter + 1, for a number of rounds (librpma's example 08). The
//! client ends with a message of `u64::MAX`. Both sides use message slots
//! (`rpma::messages`, in the spirit of `rdma_reg_msgs`). As librpma's, the
//! client makes `rounds - 1` exchanges (the DONE message is the last round)
//! and the server disconnects first.
//!
//! `cargo run --example 08-messages-ping-pong [-- server ADDR PORT | client ADDR PORT seed rounds [sleep-us]]`

mod common;
use common::{Args, Res};
use rpma::messages::{Messages, MsgAccess, Slot};
use rpma::{CompletionOp, Conn, Ep, Flags};

const DONE: u64 = u64::MAX;

/// Waits for the next receive and, with `sent`, for the completion of the
/// send just posted (its slot is rewritten next round), in whichever order
/// they come: one CQ does not order a send's completion and the answer's
/// receive. Returns the value received and its slot, or `None` when the
/// other side closed first (a client's DONE can be lost to its own
/// disconnect, see `common::completion_or_close`).
fn next_message(conn: &Conn, msgs: &Messages, sent: bool) -> Res<Option<(u64, usize)>> {
    let (mut got, mut send_done) = (None, !sent);
    while got.is_none() || !send_done {
        let Some(wc) = common::completion_or_close(conn, conn.cq())? else {
            return Ok(None);
        };
        match msgs.slot(&wc) {
            Some(Slot::Recv(n)) => {
                let b = msgs.received(n, 8)?;
                got = Some((u64::from_le_bytes(b[..8].try_into()?), n));
            }
            _ if wc.op == CompletionOp::Send => send_done = true,
            _ => {}
        }
    }
    Ok(got)
}

fn server(a: &Args) -> Res<()> {
    let peer = common::peer(&a.addr, true)?;
    let mut msgs = Messages::new(&peer, 8, 1, 1, MsgAccess::Msgs)?;
    let ep = Ep::listen(&peer, &a.addr, a.port)?;
    let conn = common::server_accept(&ep, None, &[], &|req| msgs.post_recv_req(req, 0))?;
    let mut sent = false;
    loop {
        let Some((v, n)) = next_message(&conn, &msgs, sent)? else {
            return common::closed_by_peer(conn);
        };
        if v == DONE {
            break;
        }
        println!("Value received: {v}");
        msgs.post_recv(&conn, n)?;
        println!("Value sent: {}", v + 1);
        msgs.send(&conn, 0, &(v + 1).to_le_bytes(), Flags::COMPLETION_ALWAYS)?;
        sent = true;
    }
    // As librpma's: the server disconnects first once the client is done.
    common::close_first(conn)
}

fn client(a: &Args) -> Res<()> {
    let peer = common::peer(&a.addr, false)?;
    let seed: u64 = a.rest.first().map_or(Ok(7), |s| s.parse())?;
    let rounds: u32 = a.rest.get(1).map_or(Ok(3), |s| s.parse())?;
    // An optional pause after each exchange, in microseconds (as librpma's).
    let sleep: u64 = a.rest.get(2).map_or(Ok(0), |s| s.parse())?;
    // As librpma's, the final DONE counts as a round: `rounds - 1` exchanges.
    let exchanges = rounds.saturating_sub(1) as usize;
    // Two send slots, alternated (each send's completion is also reaped
    // before the next round, see next_message).
    let mut msgs = Messages::new(&peer, 8, 2, 1, MsgAccess::Msgs)?;
    let conn = common::client_connect(&peer, a, None, &[], &|_| Ok(()))?;
    let mut v = seed;
    for i in 0..exchanges {
        msgs.post_recv(&conn, 0)?;
        println!("Value sent: {v}");
        msgs.send(&conn, i % 2, &v.to_le_bytes(), Flags::COMPLETION_ALWAYS)?;
        let (got, _) = next_message(&conn, &msgs, true)?.ok_or("the server closed the connection before answering")?;
        if got != v.wrapping_add(1) {
            return Err(format!("sent {v}, got {got} back").into());
        }
        println!("Value received: {got}");
        v = got;
        if sleep > 0 {
            std::thread::sleep(std::time::Duration::from_micros(sleep));
        }
    }
    msgs.send(&conn, exchanges % 2, &DONE.to_le_bytes(), Flags::COMPLETION_ALWAYS)?;
    common::wait_ok(conn.cq())?;
    common::close_first(conn)
}

fn main() {
    common::main(server, client, &[], &["7", "3"]);
}
