//! 10-send-with-imm: a send with immediate data (librpma's example 10). The
//! client tells the server the immediate value to expect in its connection
//! private data; without a word the send carries 0 bytes.
//!
//! `cargo run --example 10-send-with-imm [-- server ADDR PORT | client ADDR PORT imm [word]]`

mod common;
use common::{Args, Res};
use rpma::{AlignedBuf, CompletionOp, Ep, Flags, MrLocal, Usage};

fn server(a: &Args) -> Res<()> {
    let peer = common::peer(&a.addr, true)?;
    let m = MrLocal::reg(&peer, AlignedBuf::new(64)?, Usage::RECV)?;
    let ep = Ep::listen(&peer, &a.addr, a.port)?;
    let conn = common::server_accept(&ep, None, &[], &|req| req.recv(&m, 0, 64, 1))?;
    let want = u32::from_le_bytes(conn.private_data().get(..4).ok_or("no expected value in private data")?.try_into()?);
    let wc = common::wait_for(conn.cq(), CompletionOp::Recv)?;
    let got = wc.imm.ok_or("the receive carried no immediate data")?;
    let mut buf = vec![0u8; wc.byte_len as usize];
    m.read_at(0, &mut buf)?;
    println!("server: imm {got} (expected {want}), {} bytes: {:?}", wc.byte_len, String::from_utf8_lossy(&buf));
    if got != want {
        return Err("the immediate value differs".into());
    }
    common::close_second(conn)
}

fn client(a: &Args) -> Res<()> {
    let peer = common::peer(&a.addr, false)?;
    let imm: u32 = a.rest.first().map_or(Ok(1234), |s| s.parse())?;
    let word = a.rest.get(1).cloned().unwrap_or_default();
    let mut m = MrLocal::reg(&peer, AlignedBuf::new(64)?, Usage::SEND)?;
    m.write_at(0, word.as_bytes())?;
    let conn = common::client_connect(&peer, a, None, &imm.to_le_bytes(), &|_| Ok(()))?;
    conn.send_with_imm(&m, 0, word.len(), Flags::COMPLETION_ALWAYS, imm, 1)?;
    common::wait_for(conn.cq(), CompletionOp::SendWithImm)?;
    println!("client: sent imm {imm} with {} bytes", word.len());
    common::close_first(conn)
}

fn main() {
    common::main(server, client, &[], &["1234", "hello"]);
}
