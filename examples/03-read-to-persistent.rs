//! 03-read-to-persistent: the server reads a message from the client's
//! memory into its own (persistent, when a path is given) memory (librpma's
//! example 03). The client's descriptor travels in its connection request.
//!
//! `cargo run --example 03-read-to-persistent [-- server ADDR PORT [pmem-path] | client ADDR PORT]`

mod common;
use common::{Args, Memory, Res};
use rpma::{AlignedBuf, CommonData, CompletionOp, Ep, Flags, MrLocal, Usage};

fn server(a: &Args) -> Res<()> {
    let peer = common::peer(&a.addr, true)?;
    let dst = Memory::reg(&peer, a.rest.first().map(String::as_str), 4096, Usage::READ_DST)?;
    let ep = Ep::listen(&peer, &a.addr, a.port)?;
    let conn = common::server_accept(&ep, None, &[], &|_| Ok(()))?;
    let cd = CommonData::decode(conn.private_data())?;
    let len = cd.mr.size().saturating_sub(cd.data_offset as u64).min(4096) as usize;
    match &dst {
        Memory::Dram(m) => conn.read(m, 0, &cd.mr, cd.data_offset as u64, len, Flags::COMPLETION_ALWAYS, 0)?,
        Memory::File(m) => conn.read(m, 0, &cd.mr, cd.data_offset as u64, len, Flags::COMPLETION_ALWAYS, 0)?,
    }
    common::wait_for(conn.cq(), CompletionOp::Read)?;
    let mut buf = vec![0u8; len];
    dst.read_at(0, &mut buf)?;
    if let Memory::File(m) = dst {
        m.dereg().map_err(|e| e.error)?.persist()?;
    }
    println!("server: read a message: {}", common::cstr(&buf));
    common::close_first(conn)
}

fn client(a: &Args) -> Res<()> {
    let peer = common::peer(&a.addr, false)?;
    let mut src = MrLocal::reg(&peer, AlignedBuf::new(64)?, Usage::READ_SRC)?;
    src.write_at(0, b"Hello world!\0")?;
    let conn = common::client_connect(&peer, a, None, &CommonData::encode(0, &src, None), &|_| Ok(()))?;
    common::close_second(conn)?;
    println!("client: done");
    Ok(())
}

fn main() {
    common::main(server, client, &[], &[]);
}
