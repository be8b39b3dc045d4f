//! 02-read-to-volatile: the client reads a message from the server's DRAM
//! (librpma's example 02). The server's region descriptor travels in the
//! connection's private data (the examples' `common_data` layout).
//!
//! `cargo run --example 02-read-to-volatile [-- server|client ADDR PORT]`

mod common;
use common::{Args, Res};
use rpma::{AlignedBuf, CommonData, CompletionOp, Ep, Flags, MrLocal, Usage};

const HELLO: &[u8] = b"Hello world!\0";

fn server(a: &Args) -> Res<()> {
    let peer = common::peer(&a.addr, true)?;
    let mut mr = MrLocal::reg(&peer, AlignedBuf::new(4096)?, Usage::READ_SRC)?;
    mr.write_at(0, HELLO)?;
    let ep = Ep::listen(&peer, &a.addr, a.port)?;
    let conn = common::server_accept(&ep, None, &CommonData::encode(0, &mr, None), &|_| Ok(()))?;
    common::close_second(conn)?;
    println!("server: done");
    Ok(())
}

fn client(a: &Args) -> Res<()> {
    let peer = common::peer(&a.addr, false)?;
    let dst = MrLocal::reg(&peer, AlignedBuf::new(4096)?, Usage::READ_DST)?;
    let conn = common::client_connect(&peer, a, None, &[], &|_| Ok(()))?;
    let cd = CommonData::decode(conn.private_data())?;
    // Up to 64 bytes (within the remote region): the message is NUL-terminated.
    let len = cd.mr.size().saturating_sub(cd.data_offset as u64).min(64) as usize;
    conn.read(&dst, 0, &cd.mr, cd.data_offset as u64, len, Flags::COMPLETION_ALWAYS, 0)?;
    common::wait_for(conn.cq(), CompletionOp::Read)?;
    let mut buf = vec![0u8; len];
    dst.read_at(0, &mut buf)?;
    println!("client: read a message: {}", common::cstr(&buf));
    common::close_first(conn)
}

fn main() {
    common::main(server, client, &[], &[]);
}
