//! 04-write-to-persistent: the client writes a message into the server's
//! memory and makes it durable by hand, with an 8-byte RDMA READ after the
//! write (what an APM flush does) (librpma's example 04).
//!
//! `cargo run --example 04-write-to-persistent [-- server ADDR PORT [pmem-path] | client ADDR PORT [word]]`

mod common;
use common::{Args, Memory, Res};
use rpma::{AlignedBuf, CommonData, CompletionOp, Ep, Flags, MrLocal, Usage};

fn server(a: &Args) -> Res<()> {
    let peer = common::peer(&a.addr, true)?;
    let mem = Memory::reg(&peer, a.rest.first().map(String::as_str), 4096, Usage::WRITE_DST | Usage::READ_SRC)?;
    let ep = Ep::listen(&peer, &a.addr, a.port)?;
    let conn = common::server_accept(&ep, None, &mem.common_data(0, None), &|_| Ok(()))?;
    common::close_second(conn)?;
    let mut buf = [0u8; 64];
    mem.read_at(0, &mut buf)?;
    if let Memory::File(m) = mem {
        m.dereg().map_err(|e| e.error)?.persist()?;
    }
    println!("server: the message written: {}", common::cstr(&buf));
    Ok(())
}

fn client(a: &Args) -> Res<()> {
    let peer = common::peer(&a.addr, false)?;
    let word = a.rest.first().cloned().unwrap_or_else(|| "Hello world!".into());
    let mut msg = word.into_bytes();
    msg.push(0);
    let mut src = MrLocal::reg(&peer, AlignedBuf::new(64)?, Usage::WRITE_SRC)?;
    src.write_at(0, &msg)?;
    let raw = MrLocal::reg(&peer, AlignedBuf::new(8)?, Usage::READ_DST)?;
    let conn = common::client_connect(&peer, a, None, &[], &|_| Ok(()))?;
    let cd = CommonData::decode(conn.private_data())?;
    let off = cd.data_offset as u64;
    conn.write(&cd.mr, off, &src, 0, msg.len(), Flags::COMPLETION_ON_ERROR, 1)?;
    // read-after-write: completes only after the write reached the server
    conn.read(&raw, 0, &cd.mr, off, 8, Flags::COMPLETION_ALWAYS, 2)?;
    common::wait_for(conn.cq(), CompletionOp::Read)?;
    println!("client: wrote {:?} and read it back", common::cstr(&msg));
    common::close_first(conn)
}

fn main() {
    common::main(server, client, &[], &[]);
}
