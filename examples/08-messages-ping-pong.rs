//! 08-messages-ping-pong: the client sends a counter, the server answers
//! with counter + 1, for a number of rounds (librpma's example 08). The
//! client ends with a message of `u64::MAX`.
//!
//! `cargo run --example 08-messages-ping-pong [-- server ADDR PORT | client ADDR PORT seed rounds]`

mod common;
use common::{Args, Res};
use rpma::{AlignedBuf, CompletionOp, Conn, Ep, Flags, MrLocal, Usage};

const DONE: u64 = u64::MAX;

/// A receive region and a send region: a region cannot be rewritten while
/// an operation using it (here: the posted receive) is in flight.
fn msgs(peer: &rpma::Peer) -> Res<(MrLocal<AlignedBuf>, MrLocal<AlignedBuf>)> {
    Ok((MrLocal::reg(peer, AlignedBuf::new(8)?, Usage::RECV)?, MrLocal::reg(peer, AlignedBuf::new(8)?, Usage::SEND)?))
}

fn get(m: &MrLocal<AlignedBuf>) -> Res<u64> {
    let mut b = [0u8; 8];
    m.read_at(0, &mut b)?;
    Ok(u64::from_le_bytes(b))
}

/// Sends `v` from the send slot and waits for the send to complete, so the
/// slot can be rewritten.
fn send(conn: &Conn, m: &mut MrLocal<AlignedBuf>, v: u64) -> Res<()> {
    m.write_at(0, &v.to_le_bytes())?;
    conn.send(m, 0, 8, Flags::COMPLETION_ALWAYS, 2)?;
    common::wait_for(conn.cq(), CompletionOp::Send)?;
    Ok(())
}

fn server(a: &Args) -> Res<()> {
    let peer = common::peer(&a.addr, true)?;
    let (r, mut m) = msgs(&peer)?;
    let ep = Ep::listen(&peer, &a.addr, a.port)?;
    let conn = common::server_accept(&ep, None, &[], &|req| req.recv(&r, 0, 8, 1))?;
    let mut rounds = 0;
    loop {
        common::wait_for(conn.cq(), CompletionOp::Recv)?;
        let v = get(&r)?;
        if v == DONE {
            break;
        }
        conn.recv(&r, 0, 8, 1)?;
        send(&conn, &mut m, v + 1)?;
        rounds += 1;
    }
    println!("server: answered {rounds} messages");
    common::close_second(conn)
}

fn client(a: &Args) -> Res<()> {
    let peer = common::peer(&a.addr, false)?;
    let seed: u64 = a.rest.first().map_or(Ok(7), |s| s.parse())?;
    let rounds: u32 = a.rest.get(1).map_or(Ok(3), |s| s.parse())?;
    let (r, mut m) = msgs(&peer)?;
    let conn = common::client_connect(&peer, a, None, &[], &|_| Ok(()))?;
    let mut v = seed;
    for _ in 0..rounds {
        conn.recv(&r, 0, 8, 1)?;
        send(&conn, &mut m, v)?;
        common::wait_for(conn.cq(), CompletionOp::Recv)?;
        let got = get(&r)?;
        if got != v + 1 {
            return Err(format!("sent {v}, got {got} back").into());
        }
        println!("client: {v} -> {got}");
        v = got;
    }
    send(&conn, &mut m, DONE)?;
    common::close_first(conn)
}

fn main() {
    common::main(server, client, &[], &["7", "3"]);
}
