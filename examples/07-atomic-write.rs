//! 07-atomic-write: a remote append-only log (librpma's example 07).
//!
//! The log has librpma's layout: an 8-byte signature at 0, `used` (a u64,
//! the offset of the log's end) at 8 and 1024 bytes of data at 16 (1040
//! bytes); the server sends `data_offset` 8, the place of `used`. For each
//! word the client writes it with its NUL at `used`, flushes, atomically
//! writes the new `used` at `data_offset`, and flushes that, waiting for
//! the last flush of each word. The server prints the log one word a line.
//!
//! `cargo run --example 07-atomic-write [-- server ADDR PORT [pmem-path] | client ADDR PORT word...]`

mod common;
use common::{Args, Memory, Res};
use rpma::{AlignedBuf, CommonData, CompletionOp, ConnCfg, Ep, Flags, FlushType, MrLocal, PeerCfg, Usage};

/// The log's signature (on a persistent log only), 8 bytes at 0.
const SIGNATURE: &[u8; 8] = b"LOG\0\0\0\0\0";
/// Where `used` sits: the `data_offset` sent to the client.
const USED_OFFSET: usize = 8;
/// Where the data starts.
const DATA_OFFSET: u64 = 16;
/// The log's size (`LOG_SIZE`): signature, used, 1024 bytes of data.
const LOG_SIZE: usize = 16 + 1024;
/// The client's buffer (`KILOBYTE`), one word at a time.
const KILOBYTE: usize = 1024;
/// The last flush of each word carries this context (as librpma's example).
const FLUSH_ID: u64 = 0xF01D;

fn server(a: &Args) -> Res<()> {
    let peer = common::peer(&a.addr, true)?;
    let path = a.rest.first().map(String::as_str);
    let flush = if path.is_some() {
        Usage::FLUSH_TYPE_PERSISTENT | Usage::FLUSH_TYPE_VISIBILITY
    } else {
        Usage::FLUSH_TYPE_VISIBILITY
    };
    let mem = Memory::reg(&peer, path, LOG_SIZE, Usage::READ_SRC | Usage::WRITE_DST | flush)?;
    let mut sig = [0u8; 8];
    mem.read_at(0, &mut sig)?;
    if !mem.is_file() || &sig != SIGNATURE {
        mem.write_at(USED_OFFSET, &DATA_OFFSET.to_le_bytes())?;
        if mem.is_file() {
            mem.write_at(0, SIGNATURE)?;
        }
    }
    let ep = Ep::listen(&peer, &a.addr, a.port)?;
    let conn = common::server_accept(&ep, None, &mem.common_data(USED_OFFSET as u16, None), &|_| Ok(()))?;
    common::close_second(conn)?;
    let mut used = [0u8; 8];
    mem.read_at(USED_OFFSET, &mut used)?;
    let used = (u64::from_le_bytes(used) as usize).clamp(DATA_OFFSET as usize, LOG_SIZE);
    let mut log = vec![0u8; used - DATA_OFFSET as usize];
    mem.read_at(DATA_OFFSET as usize, &mut log)?;
    if mem.is_file() {
        mem.persist()?;
    }
    // Each NUL ends a word: one word a line.
    let text: String = String::from_utf8_lossy(&log).chars().map(|c| if c == '\0' { '\n' } else { c }).collect();
    print!("{text}");
    Ok(())
}

fn client(a: &Args) -> Res<()> {
    let peer = common::peer(&a.addr, false)?;
    let words: Vec<String> =
        if a.rest.is_empty() { vec!["1st_word".into(), "2nd_word".into(), "3rd_word".into()] } else { a.rest.clone() };
    let src = MrLocal::reg(&peer, AlignedBuf::new(KILOBYTE)?, Usage::WRITE_SRC | Usage::READ_DST)?;
    // One word's four operations are in flight at a time: size the send
    // queue (and CQ) for them.
    let mut cfg = ConnCfg::new();
    cfg.set_sq_size(5).set_cq_size(5);
    let conn = common::client_connect(&peer, a, Some(&cfg), &[], &|_| Ok(()))?;
    // As librpma's example: assume the server can write directly to its
    // persistent memory (only used when its region offers persistent flush).
    let mut pcfg = PeerCfg::new();
    pcfg.set_direct_write_to_pmem(true);
    conn.apply_remote_peer_cfg(&pcfg);
    let cd = CommonData::decode(conn.private_data())?;
    let log = &cd.mr;
    let used_at = cd.data_offset as u64;
    conn.read(&src, 0, log, used_at, 8, Flags::COMPLETION_ALWAYS, 0)?;
    common::wait_for(conn.cq(), CompletionOp::Read)?;
    let mut b = [0u8; 8];
    src.read_at(0, &mut b)?;
    let mut used = u64::from_le_bytes(b);
    println!("used value: {used}");
    if log.size() <= used {
        common::close_first(conn)?;
        return Err("Log size exhausted.".into());
    }
    let ft = if log.flush_type().contains(Usage::FLUSH_TYPE_PERSISTENT) {
        FlushType::Persistent
    } else {
        FlushType::Visibility
    };
    // Each word (with its NUL) in the one buffer, as librpma's client: the
    // previous word's write is done once its last flush completed (the
    // send queue completes in order), so the buffer is free again.
    for w in &words {
        let mut bytes = w.as_bytes()[..w.len().min(KILOBYTE - 1)].to_vec();
        bytes.push(0);
        let len = bytes.len();
        if used + len as u64 > log.size() {
            common::close_first(conn)?;
            return Err("Log size exhausted.".into());
        }
        src.write_at(0, &bytes)?;
        conn.write(log, used, &src, 0, len, Flags::COMPLETION_ON_ERROR, 1)?;
        conn.flush(log, used, len as u64, ft, Flags::COMPLETION_ON_ERROR, 2)?;
        used += len as u64;
        conn.atomic_write(log, used_at, used.to_le_bytes(), Flags::COMPLETION_ON_ERROR, 3)?;
        conn.flush(log, used_at, 8, ft, Flags::COMPLETION_ALWAYS, FLUSH_ID)?;
        let wc = common::wait_for(conn.cq(), CompletionOp::Flush)?;
        if wc.op_context != FLUSH_ID {
            return Err(format!("unexpected wc.wr_id value (0x{:X} != 0x{FLUSH_ID:X})", wc.op_context).into());
        }
    }
    common::close_first(conn)
}

fn main() {
    common::main(server, client, &[], &["1st_word", "2nd_word", "3rd_word"]);
}
