//! 10-send-with-imm: a send with immediate data (librpma's example 10). The
//! client tells the server the immediate value to expect in its connection
//! private data (4 bytes, little-endian); without a word the send carries
//! 0 bytes.
//!
//! As librpma's example, the server posts a 1024-byte receive and the
//! client, given a word, sends a whole 1024-byte buffer holding the word and
//! a NUL.
//!
//! `cargo run --example 10-send-with-imm [-- server ADDR PORT | client ADDR PORT imm [word]]`

mod common;
use common::{Args, Res};
use rpma::{AlignedBuf, CompletionOp, Ep, Flags, MrLocal, Usage};

/// The message size of librpma's example (`KILOBYTE`).
const MSG_SIZE: usize = 1024;

fn server(a: &Args) -> Res<()> {
    let peer = common::peer(&a.addr, true)?;
    let m = MrLocal::reg(&peer, AlignedBuf::new(MSG_SIZE)?, Usage::RECV)?;
    let ep = Ep::listen(&peer, &a.addr, a.port)?;
    let conn = common::server_accept(&ep, None, &[], &|req| req.recv(&m, 0, MSG_SIZE, 1))?;
    let pdata = conn.private_data();
    let want = u32::from_le_bytes(pdata.get(..4).ok_or("Received connection's private data is too small")?.try_into()?);
    let wc = common::wait_for(conn.cq(), CompletionOp::Recv)?;
    let got = wc.imm.ok_or("Received an unexpected completion: no immediate data")?;
    if got != want {
        return Err(format!("Received unexpected immediate data ({got} != {want})").into());
    }
    let mut buf = vec![0u8; wc.byte_len as usize];
    m.read_at(0, &mut buf)?;
    println!("Received value '{}' with immediate data '{got}'", common::cstr(&buf));
    common::close_second(conn)
}

fn client(a: &Args) -> Res<()> {
    let peer = common::peer(&a.addr, false)?;
    let imm: u32 = match a.rest.first() {
        Some(s) => s.parse().map_err(|_| "The provided immediate data is too big or not a number")?,
        None => 1234,
    };
    let word = a.rest.get(1);
    let m = MrLocal::reg(&peer, AlignedBuf::new(MSG_SIZE)?, Usage::SEND)?;
    let len = match word {
        Some(w) => {
            let w = w.as_bytes();
            m.write_at(0, &w[..w.len().min(MSG_SIZE - 1)])?;
            MSG_SIZE
        }
        None => 0,
    };
    let conn = common::client_connect(&peer, a, None, &imm.to_le_bytes(), &|_| Ok(()))?;
    match word {
        Some(w) => println!("Sending value '{w}' with immediate data '{imm}'"),
        None => println!("Sending immediate data '{imm}'"),
    }
    conn.send_with_imm(&m, 0, len, Flags::COMPLETION_ALWAYS, imm, 1)?;
    common::wait_for(conn.cq(), CompletionOp::SendWithImm)?;
    common::close_first(conn)
}

fn main() {
    common::main(server, client, &[], &["1234", "1st_word"]);
}
