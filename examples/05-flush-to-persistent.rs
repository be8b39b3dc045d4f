//! 05-flush-to-persistent: write, then `flush` (librpma's example 05). The
//! server sends its peer configuration (`direct_write_to_pmem`) with its
//! region; the client applies it and flushes to persistence when it says
//! so, to visibility otherwise.
//!
//! The layouts are librpma's: the server exposes 1024 bytes (with a
//! `pmem-path`: the file, its data after the examples' 17-byte signature,
//! registered for both flush types), and `direct_write_to_pmem` is on only
//! when `on` follows a `pmem-path` that is persistent memory (`MAP_SYNC`;
//! librpma's refuses any other file). The client holds a 1028-byte `hello_t`,
//! writes its 1024-byte string to the server's `data_offset` and flushes
//! those 1024 bytes (context 0xF01D). The client closes first; the server
//! then prints the new value.
//!
//! `cargo run --example 05-flush-to-persistent [-- server ADDR PORT [pmem-path [on]] | client ADDR PORT [pmem-path [pmem-offset]]]`

mod common;
use common::hello::{self, HELLO_STR_SIZE, HELLO_T_SIZE};
use common::{Args, Res};
use rpma::{CommonData, CompletionOp, Ep, Flags, FlushType, PeerCfg, Usage};

/// The flush's context, checked in its completion (`FLUSH_ID`).
const FLUSH_ID: u64 = 0xF01D;

fn server(a: &Args) -> Res<()> {
    let peer = common::peer(&a.addr, true)?;
    let path = a.rest.first().map(String::as_str);
    let flush = match path {
        Some(_) => Usage::FLUSH_TYPE_PERSISTENT | Usage::FLUSH_TYPE_VISIBILITY,
        None => Usage::FLUSH_TYPE_VISIBILITY,
    };
    // A fresh region holds an empty string.
    let (mem, data_offset) =
        common::example_memory(&peer, path, 0, HELLO_STR_SIZE, Usage::WRITE_DST | flush, &|m, at| {
            Ok(m.write_at(at, &[0])?)
        })?;
    let value = |mem: &common::Memory| -> Res<String> {
        let mut buf = vec![0u8; HELLO_STR_SIZE];
        mem.read_at(data_offset, &mut buf)?;
        Ok(common::cstr(&buf))
    };
    let old = value(&mem)?;
    if !old.is_empty() {
        println!("Old value: {old}");
    }
    // As librpma's: `on` counts only after a pmem-path, and only where it
    // is true (a file off persistent memory is not written to it directly).
    let on = path.is_some() && a.rest.get(1).is_some_and(|x| x == "on");
    if on && !mem.is_pmem() {
        eprintln!("direct_write_to_pmem stays off: {} is not persistent memory (no MAP_SYNC)", path.unwrap_or(""));
    }
    let mut cfg = PeerCfg::new();
    cfg.set_direct_write_to_pmem(on && mem.is_pmem());
    let ep = Ep::listen(&peer, &a.addr, a.port)?;
    let conn = common::server_accept(&ep, None, &mem.common_data(data_offset as u16, Some(&cfg)), &|_| Ok(()))?;
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
    let conn = common::client_connect(&peer, a, None, &[], &|_| Ok(()))?;
    let cd = CommonData::decode(conn.private_data())?;
    let pcfg = cd.peer_cfg.ok_or("the server sent no peer configuration")?;
    conn.apply_remote_peer_cfg(&pcfg);
    let dst_offset = hello::write_string(&conn, &src, data_offset, &cd, "Remote memory region size too small")?;
    // As librpma's: the flush type follows the server's peer configuration.
    let ty = if pcfg.direct_write_to_pmem() {
        println!("RPMA_FLUSH_TYPE_PERSISTENT is supported");
        FlushType::Persistent
    } else {
        println!("RPMA_FLUSH_TYPE_PERSISTENT is NOT supported, RPMA_FLUSH_TYPE_VISIBILITY is used instead");
        FlushType::Visibility
    };
    conn.flush(&cd.mr, dst_offset, HELLO_STR_SIZE as u64, ty, Flags::COMPLETION_ALWAYS, FLUSH_ID)?;
    let wc = common::wait_for(conn.cq(), CompletionOp::Flush)?;
    if wc.op_context != FLUSH_ID {
        return Err(format!("unexpected wc.wr_id value (0x{:X} != 0x{FLUSH_ID:X})", wc.op_context).into());
    }
    // Translate the greeting, so the next run's is surprising (librpma's
    // prints the translation only when its hello_t is not persistent).
    let translation = hello::translate(&mut src, data_offset)?;
    if !src.is_file() {
        println!("Translation: {translation}");
    }
    common::close_first(conn)
}

fn main() {
    common::main(server, client, &[], &[]);
}
