//! async-log: a shared append-only log served on tokio (not a librpma
//! example; it shows `rpma::aio` and the remote atomics together).
//!
//! The server registers the log: an 8-byte tail counter at 0, then
//! `clients x records` slots of 64 bytes. It accepts every client on one
//! current-thread tokio runtime, gives each the log's extended descriptor
//! (which grants remote atomics), and when all have closed checks that the
//! tail counts every record and that every slot holds exactly one record.
//!
//! The client process runs `clients` connections as spawned tasks on one
//! current-thread runtime, each owning its `rpma::aio::AsyncConn`. Each
//! appends `records` records: an awaited fetch-and-add of 1 on the tail
//! reserves a slot (it returns the previous value, the slot's number), then
//! the record is written there (unsignaled, the librpma way) and an awaited
//! flush makes it visible; no thread blocks.
//!
//! `cargo run --example async-log [-- server ADDR PORT [clients records] | client ADDR PORT [clients records]]`

mod common;
use common::{Args, Res};
use rpma::aio::{accept, AsyncConn, AsyncConnEvents, AsyncEp};
use rpma::utils::ConnEvent;
use rpma::{AlignedBuf, Ep, Flags, FlushType, MrLocal, MrRemote, Peer, Usage};
use std::time::Instant;

/// Bytes of one record's slot.
const SLOT: usize = 64;
/// Where the slots start (after the tail counter).
const SLOTS_AT: usize = 8;

fn counts(a: &Args) -> Res<(usize, usize)> {
    let get = |i: usize, default: usize| a.rest.get(i).map_or(Ok(default), |s| s.parse::<usize>());
    let (clients, records) = (get(0, 16)?, get(1, 8)?);
    if clients == 0 || records == 0 || clients.saturating_mul(records) > 4096 {
        return Err(format!(
            "clients {clients} x records {records}: each must be at least 1, the product at most 4096"
        )
        .into());
    }
    Ok((clients, records))
}

fn runtime() -> Res<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}

fn record(client: usize, r: usize) -> [u8; SLOT] {
    let mut out = [0u8; SLOT];
    let text = format!("client {client} record {r}");
    out[..text.len()].copy_from_slice(text.as_bytes());
    out
}

fn server(a: &Args) -> Res<()> {
    let (clients, records) = counts(a)?;
    let total = clients * records;
    let peer = common::peer(&a.addr, true)?;
    let usage = Usage::REMOTE_ATOMIC | Usage::WRITE_DST | Usage::READ_SRC | Usage::FLUSH_TYPE_VISIBILITY;
    let log = MrLocal::reg(&peer, AlignedBuf::new(SLOTS_AT + total * SLOT)?, usage)?;
    let ep = Ep::listen(&peer, &a.addr, a.port)?;
    let desc = log.descriptor_ext();
    runtime()?.block_on(tokio::task::LocalSet::new().run_until(async {
        let aep = AsyncEp::new(&ep)?;
        let mut sessions = Vec::with_capacity(clients);
        for _ in 0..clients {
            let conn = tokio::time::timeout(common::timeout(), accept(&aep, None, &desc))
                .await
                .map_err(|_| "no client came")??;
            sessions.push(tokio::task::spawn_local(async move {
                let ev = AsyncConnEvents::new(&conn)?.next_event().await?;
                conn.disconnect()?;
                Ok::<_, rpma::Error>(ev)
            }));
        }
        for s in sessions {
            let ev = s.await??;
            if ev != ConnEvent::Closed {
                return Err(format!("a client's connection ended with {ev}").into());
            }
        }
        Ok::<_, Box<dyn std::error::Error>>(())
    }))?;
    // Every slot holds exactly one record, and the tail counts them all.
    let mut tail = [0u8; 8];
    log.read_at(0, &mut tail)?;
    let tail = u64::from_le_bytes(tail);
    let mut seen = vec![false; total];
    for slot in 0..total {
        let mut got = [0u8; SLOT];
        log.read_at(SLOTS_AT + slot * SLOT, &mut got)?;
        let text = common::cstr(&got);
        let mut it = text.strip_prefix("client ").and_then(|t| t.split_once(" record ")).into_iter();
        let (c, r) = it.next().ok_or_else(|| format!("slot {slot} holds {text:?}"))?;
        let (c, r): (usize, usize) = (c.parse()?, r.parse()?);
        if c >= clients || r >= records || std::mem::replace(&mut seen[c * records + r], true) {
            return Err(format!("slot {slot}: {text:?} is unexpected or a duplicate").into());
        }
    }
    if tail != total as u64 {
        return Err(format!("the tail is {tail}, {total} records were appended").into());
    }
    println!("log: {total} records from {clients} clients, each in its own slot; tail {tail}");
    Ok(())
}

/// Errors a spawned task can return (`Send`).
type TaskRes<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// One client's session, as a spawned task owning its connection: connect
/// (retrying while the server is not listening yet), append `records`
/// records, close.
async fn append(peer: Peer, addr: String, port: u16, c: usize, records: usize) -> TaskRes<()> {
    let t0 = Instant::now();
    let conn = loop {
        match AsyncConn::connect(&peer, &addr, port, None, &[]).await {
            Ok(conn) => break conn,
            Err(e) if t0.elapsed() < common::timeout() => {
                log::debug!("client {c}: {e}; retrying");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            Err(e) => return Err(e.into()),
        }
    };
    let log = MrRemote::from_descriptor(conn.conn().private_data())?;
    let slots = ((log.size() as usize).saturating_sub(SLOTS_AT) / SLOT) as u64;
    let prev = MrLocal::reg(&peer, AlignedBuf::new(8)?, Usage::READ_DST)?;
    let mut rec = MrLocal::reg(&peer, AlignedBuf::new(SLOT)?, Usage::WRITE_SRC)?;
    for r in 0..records {
        // Reserve: the tail's previous value is this record's slot.
        let slot = conn.fetch_and_add(&prev, 0, &log, 0, 1).await?;
        if slot >= slots {
            return Err(format!("client {c}: slot {slot} is beyond the log's {slots}").into());
        }
        // Write the record there (posted the librpma way, unsignaled) and
        // make it visible: the awaited flush completes after the write.
        let at = SLOTS_AT as u64 + slot * SLOT as u64;
        rec.write_at(0, &record(c, r))?;
        conn.conn().write(&log, at, &rec, 0, SLOT, Flags::COMPLETION_ON_ERROR, 2)?;
        conn.flush(&log, at, SLOT as u64, FlushType::Visibility).await?;
    }
    conn.disconnect().await?;
    Ok(())
}

fn client(a: &Args) -> Res<()> {
    let (clients, records) = counts(a)?;
    let peer = common::peer(&a.addr, false)?;
    let t0 = Instant::now();
    runtime()?.block_on(async {
        let tasks: Vec<_> =
            (0..clients).map(|c| tokio::spawn(append(peer.clone(), a.addr.clone(), a.port, c, records))).collect();
        for t in tasks {
            t.await?.map_err(|e| e.to_string())?;
        }
        Ok::<_, Box<dyn std::error::Error>>(())
    })?;
    println!(
        "client: {clients} connections on one thread appended {} records in {:.1?}",
        clients * records,
        t0.elapsed()
    );
    Ok(())
}

fn main() {
    common::main(server, client, &["16", "8"], &["16", "8"]);
}
