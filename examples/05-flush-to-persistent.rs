//! 05-flush-to-persistent: write, then `flush` (librpma's example 05). The
//! server sends its peer configuration (`direct_write_to_pmem`) with its
//! region; the client applies it and flushes to persistence when both allow
//! it, to visibility otherwise.
//!
//! `cargo run --example 05-flush-to-persistent [-- server ADDR PORT [pmem-path] [on] | client ADDR PORT [word]]`

mod common;
use common::{Args, Memory, Res};
use rpma::{AlignedBuf, CommonData, CompletionOp, Ep, Flags, FlushType, MrLocal, PeerCfg, Usage};

fn server(a: &Args) -> Res<()> {
    let peer = common::peer(&a.addr, true)?;
    let path = a.rest.first().filter(|p| p.as_str() != "on").map(String::as_str);
    let mut cfg = PeerCfg::new();
    cfg.set_direct_write_to_pmem(a.rest.iter().any(|x| x == "on"));
    let flush = if path.is_some() { Usage::FLUSH_TYPE_PERSISTENT } else { Usage::FLUSH_TYPE_VISIBILITY };
    let mem = Memory::reg(&peer, path, 4096, Usage::WRITE_DST | flush)?;
    let ep = Ep::listen(&peer, &a.addr, a.port)?;
    let conn = common::server_accept(&ep, None, &mem.common_data(0, Some(&cfg)), &|_| Ok(()))?;
    common::close_second(conn)?;
    let mut buf = [0u8; 64];
    mem.read_at(0, &mut buf)?;
    println!("server: the message flushed: {}", common::cstr(&buf));
    Ok(())
}

fn client(a: &Args) -> Res<()> {
    let peer = common::peer(&a.addr, false)?;
    let mut msg = a.rest.first().cloned().unwrap_or_else(|| "Hello world!".into()).into_bytes();
    msg.push(0);
    let mut src = MrLocal::reg(&peer, AlignedBuf::new(64)?, Usage::WRITE_SRC)?;
    src.write_at(0, &msg)?;
    let conn = common::client_connect(&peer, a, None, &[], &|_| Ok(()))?;
    let cd = CommonData::decode(conn.private_data())?;
    if let Some(cfg) = &cd.peer_cfg {
        conn.apply_remote_peer_cfg(cfg);
    }
    let persistent = cd.mr.flush_type().contains(Usage::FLUSH_TYPE_PERSISTENT)
        && cd.peer_cfg.is_some_and(|c| c.direct_write_to_pmem());
    let ty = if persistent { FlushType::Persistent } else { FlushType::Visibility };
    let off = cd.data_offset as u64;
    conn.write(&cd.mr, off, &src, 0, msg.len(), Flags::COMPLETION_ON_ERROR, 1)?;
    conn.flush(&cd.mr, off, msg.len() as u64, ty, Flags::COMPLETION_ALWAYS, 2)?;
    common::wait_for(conn.cq(), CompletionOp::Flush)?;
    println!("client: wrote {:?}, flushed ({ty:?})", common::cstr(&msg));
    common::close_first(conn)
}

fn main() {
    common::main(server, client, &[], &[]);
}
