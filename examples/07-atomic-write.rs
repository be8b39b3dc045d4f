//! 07-atomic-write: a remote append-only log (librpma's example 07). The
//! log's first 8 bytes hold `used`, the offset of its end. For each word
//! the client writes it at `used`, flushes, atomically writes the new
//! `used`, and flushes again; it waits only for the last flush.
//!
//! `cargo run --example 07-atomic-write [-- server ADDR PORT [pmem-path] | client ADDR PORT word...]`

mod common;
use common::{Args, Memory, Res};
use rpma::{AlignedBuf, CommonData, CompletionOp, ConnCfg, Ep, Flags, FlushType, MrLocal, Usage};

const LOG_SIZE: usize = 4096;
const HDR: u64 = 8;

fn server(a: &Args) -> Res<()> {
    let peer = common::peer(&a.addr, true)?;
    let path = a.rest.first().map(String::as_str);
    let usage = Usage::READ_SRC | Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY;
    let mut mem = Memory::reg(&peer, path, LOG_SIZE, usage)?;
    let mut used = [0u8; 8];
    mem.read_at(0, &mut used)?;
    if u64::from_le_bytes(used) < HDR {
        mem.write_at(0, &HDR.to_le_bytes())?;
    }
    let ep = Ep::listen(&peer, &a.addr, a.port)?;
    let conn = common::server_accept(&ep, None, &mem.common_data(0, None), &|_| Ok(()))?;
    common::close_second(conn)?;
    mem.read_at(0, &mut used)?;
    let used = (u64::from_le_bytes(used) as usize).min(LOG_SIZE);
    let mut log = vec![0u8; used - HDR as usize];
    mem.read_at(HDR as usize, &mut log)?;
    println!("server: the log ({} bytes): {}", log.len(), String::from_utf8_lossy(&log));
    Ok(())
}

fn client(a: &Args) -> Res<()> {
    let peer = common::peer(&a.addr, false)?;
    let words: Vec<String> = if a.rest.is_empty() { vec!["Hello".into(), "world!".into()] } else { a.rest.clone() };
    let mut src = MrLocal::reg(&peer, AlignedBuf::new(LOG_SIZE)?, Usage::WRITE_SRC | Usage::READ_DST)?;
    // Four operations per word are in flight before the last flush is
    // reaped: size the send queue (and CQ) for them.
    let mut cfg = ConnCfg::new();
    cfg.set_sq_size(4 * words.len() as u32 + 1);
    cfg.set_cq_size(4 * words.len() as u32 + 1);
    let conn = common::client_connect(&peer, a, Some(&cfg), &[], &|_| Ok(()))?;
    let cd = CommonData::decode(conn.private_data())?;
    let log = &cd.mr;
    conn.read(&src, 0, log, 0, 8, Flags::COMPLETION_ALWAYS, 0)?;
    common::wait_for(conn.cq(), CompletionOp::Read)?;
    let mut b = [0u8; 8];
    src.read_at(0, &mut b)?;
    let mut used = u64::from_le_bytes(b);
    // Stage every word first: a region cannot be rewritten while
    // operations using it are in flight.
    let mut staged = Vec::new();
    let mut at = 8;
    for w in &words {
        src.write_at(at, w.as_bytes())?;
        staged.push((at, w.len()));
        at += w.len();
    }
    for (i, &(src_off, len)) in staged.iter().enumerate() {
        if used + len as u64 > log.size() {
            return Err(format!("the log is full at {used} bytes").into());
        }
        conn.write(log, used, &src, src_off, len, Flags::COMPLETION_ON_ERROR, 1)?;
        conn.flush(log, used, len as u64, FlushType::Visibility, Flags::COMPLETION_ON_ERROR, 2)?;
        used += len as u64;
        conn.atomic_write(log, 0, used.to_le_bytes(), Flags::COMPLETION_ON_ERROR, 3)?;
        let last = i + 1 == staged.len();
        let f = if last { Flags::COMPLETION_ALWAYS } else { Flags::COMPLETION_ON_ERROR };
        conn.flush(log, 0, 8, FlushType::Visibility, f, 4)?;
        if last {
            common::wait_for(conn.cq(), CompletionOp::Flush)?;
        }
    }
    println!("client: appended {} words, used = {used}", words.len());
    common::close_first(conn)
}

fn main() {
    common::main(server, client, &[], &["Hello,", "remote", "log!"]);
}
