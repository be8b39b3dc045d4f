//! 04-write-to-persistent: the client writes a greeting into the server's
//! memory and makes it durable by hand, with an RDMA READ after the write
//! (what an APM flush does) (librpma's example 04).
//!
//! The layouts are librpma's: the server exposes 1024 bytes (with a
//! `pmem-path`: the file, its data after the examples' 17-byte signature)
//! and sends their `data_offset`; the client holds a 1028-byte `hello_t`,
//! writes its 1024-byte string to the server's `data_offset`, then reads 8
//! bytes from the server's offset 0 into a separate buffer. It then
//! translates its greeting for the next run (which lasts only with a
//! `pmem-path`). The client closes first; the server then prints the new
//! value.
//!
//! `cargo run --example 04-write-to-persistent [-- server ADDR PORT [pmem-path] | client ADDR PORT [pmem-path [pmem-offset]]]`

mod common;
use common::hello::{self, HELLO_STR_SIZE, HELLO_T_SIZE};
use common::{Args, Res};
use rpma::{AlignedBuf, CommonData, CompletionOp, Ep, Flags, MrLocal, Usage};

/// The read-after-write buffer (`RAW_BUFFER_SIZE`).
const RAW_BUFFER_SIZE: usize = 8;

fn server(a: &Args) -> Res<()> {
    let peer = common::peer(&a.addr, true)?;
    let path = a.rest.first().map(String::as_str);
    let usage = Usage::WRITE_DST | Usage::READ_SRC;
    // A fresh region holds an empty string.
    let (mem, data_offset) =
        common::example_memory(&peer, path, 0, HELLO_STR_SIZE, usage, &|m, at| Ok(m.write_at(at, &[0])?))?;
    let value = |mem: &common::Memory| -> Res<String> {
        let mut buf = vec![0u8; HELLO_STR_SIZE];
        mem.read_at(data_offset, &mut buf)?;
        Ok(common::cstr(&buf))
    };
    let old = value(&mem)?;
    if !old.is_empty() {
        println!("Old value: {old}");
    }
    let ep = Ep::listen(&peer, &a.addr, a.port)?;
    let conn = common::server_accept(&ep, None, &mem.common_data(data_offset as u16, None), &|_| Ok(()))?;
    common::close_second(conn)?;
    mem.persist()?;
    println!("New value: {}", value(&mem)?);
    Ok(())
}

fn client(a: &Args) -> Res<()> {
    let peer = common::peer(&a.addr, false)?;
    let path = a.rest.first().map(String::as_str);
    let offset: usize = a.rest.get(1).map_or(Ok(0), |s| s.parse())?;
    let (mut src, data_offset) =
        common::example_memory(&peer, path, offset, HELLO_T_SIZE, Usage::WRITE_SRC, &|m, at| hello::write(m, at, 0))?;
    println!("Next value: {}", hello::read(&src, data_offset)?.1);
    let raw = MrLocal::reg(&peer, AlignedBuf::new(RAW_BUFFER_SIZE)?, Usage::READ_DST)?;
    let conn = common::client_connect(&peer, a, None, &[], &|_| Ok(()))?;
    let cd = CommonData::decode(conn.private_data())?;
    hello::write_string(&conn, &src, data_offset, &cd, "Remote memory region size too small")?;
    // The read serves as the flushing primitive: it completes only after
    // the write reached the server's memory.
    conn.read(&raw, 0, &cd.mr, 0, RAW_BUFFER_SIZE, Flags::COMPLETION_ALWAYS, 0)?;
    common::wait_for(conn.cq(), CompletionOp::Read)?;
    // Translate the greeting, so the next run's is surprising.
    println!("Translation: {}", hello::translate(&mut src, data_offset)?);
    common::close_first(conn)
}

fn main() {
    common::main(server, client, &[], &[]);
}
