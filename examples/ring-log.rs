//! ring-log: a replication log's client appending records at depth 16 from
//! one registered ring buffer, in safe code (not a librpma example).
//!
//! The client registers one ring of 16 slots of 256 bytes, once. Record N
//! is built in place in its slot (`MrLocal::update_at`) while the writes of
//! the records before it, from the other slots, are in flight; a slot whose
//! write is still in flight is refused (`Detail::RangeBusy`) until that
//! write's completion is reaped. Each record goes to the server's log at
//! `N x 256`, signaled every 8th; the last write is followed by a flush.
//! The server registers the log, waits for the client to close and checks
//! every record.
//!
//! `cargo run --example ring-log [-- server ADDR PORT [records] | client ADDR PORT [records]]`

mod common;
use common::{Args, Res};
use rpma::error::Detail;
use rpma::{AlignedBuf, CommonData, ConnCfg, Ep, Flags, FlushType, MrLocal, Usage};

/// Bytes of one record.
const RECORD: usize = 256;
/// Slots of the client's ring: the depth of its pipeline.
const DEPTH: usize = 16;
/// Records sent unsignaled between two signaled ones.
const SIGNAL_EVERY: usize = 8;

fn records(a: &Args) -> Res<usize> {
    let n = a.rest.first().map_or(Ok(1024), |s| s.parse::<usize>())?;
    if n == 0 || n > 1 << 16 {
        return Err(format!("records {n}: from 1 to 65536").into());
    }
    Ok(n)
}

/// Record `n`: its number, then a byte that depends on it.
fn record(n: usize, out: &mut [u8]) {
    out[..8].copy_from_slice(&(n as u64).to_le_bytes());
    out[8..].fill((n % 251) as u8);
}

fn server(a: &Args) -> Res<()> {
    let n = records(a)?;
    let peer = common::peer(&a.addr, true)?;
    let usage = Usage::WRITE_DST | Usage::READ_SRC | Usage::FLUSH_TYPE_VISIBILITY;
    let log = MrLocal::reg(&peer, AlignedBuf::new(n * RECORD)?, usage)?;
    let ep = Ep::listen(&peer, &a.addr, a.port)?;
    let pdata = CommonData::encode(0, &log, None);
    let conn = common::server_accept(&ep, None, &pdata, &|_| Ok(()))?;
    common::close_second(conn)?;
    let (mut got, mut want) = (vec![0u8; RECORD], vec![0u8; RECORD]);
    for i in 0..n {
        log.read_at(i * RECORD, &mut got)?;
        record(i, &mut want);
        if got != want {
            return Err(format!("record {i} is not what the client staged").into());
        }
    }
    println!("log: {n} records of {RECORD} bytes, every byte as staged");
    Ok(())
}

fn client(a: &Args) -> Res<()> {
    let n = records(a)?;
    let peer = common::peer(&a.addr, false)?;
    let ring = MrLocal::reg(&peer, AlignedBuf::new(DEPTH * RECORD)?, Usage::WRITE_SRC)?;
    let mut cfg = ConnCfg::new();
    cfg.set_sq_size(DEPTH as u32 + 1).set_cq_size(DEPTH as u32 + 1);
    let conn = common::client_connect(&peer, a, Some(&cfg), &[], &|_| Ok(()))?;
    let log = CommonData::decode(conn.private_data())?.mr;
    if log.size() < (n * RECORD) as u64 {
        common::close_first(conn)?;
        return Err("the server's log is too small".into());
    }
    let (mut signaled, mut waited) = (0usize, 0usize);
    for i in 0..n {
        let slot = (i % DEPTH) * RECORD;
        // Build record i in place; its slot is free once the write of
        // record i - 16 completed: reap until it is.
        loop {
            match ring.update_at(slot, RECORD, |rec| record(i, rec)) {
                Ok(()) => break,
                Err(e) if matches!(e.detail(), Some(Detail::RangeBusy { .. })) => {
                    common::wait_ok(conn.cq())?;
                    signaled -= 1;
                    waited += 1;
                }
                Err(e) => return Err(e.into()),
            }
        }
        let signal = (i + 1) % SIGNAL_EVERY == 0 || i + 1 == n;
        let flags = if signal { Flags::COMPLETION_ALWAYS } else { Flags::COMPLETION_ON_ERROR };
        conn.write(&log, (i * RECORD) as u64, &ring, slot, RECORD, flags, i as u64)?;
        signaled += usize::from(signal);
    }
    conn.flush(&log, 0, (n * RECORD) as u64, FlushType::Visibility, Flags::COMPLETION_ALWAYS, u64::MAX)?;
    for _ in 0..=signaled {
        common::wait_ok(conn.cq())?;
    }
    println!("client: {n} records from one {DEPTH}-slot ring, {waited} waits for a slot in flight");
    common::close_first(conn)
}

fn main() {
    common::main(server, client, &[], &[]);
}
