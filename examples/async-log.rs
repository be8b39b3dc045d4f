//! async-log: a shared append-only log served on tokio (not a librpma
//! example; it shows `rpma::aio` and the remote atomics together).
//!
//! The server registers the log: an 8-byte tail counter at 0, then
//! `clients x records` slots of 64 bytes, **without remote access**. It
//! accepts every client on one current-thread tokio runtime and exports the
//! log to that connection only (`Conn::export`: a type 2 memory window bound
//! on its queue pair, granting read, write and atomics), then sends it the
//! export's extended descriptor as a message: another client, even with
//! that descriptor, is refused by the device (docs/security.md). When all
//! have closed it checks that the tail counts every record and that every
//! slot holds exactly one record. `--shared` serves the log librpma's way
//! instead: one registration with remote access, its descriptor in the
//! connection's private data, reachable from every connection.
//!
//! The client process runs `clients` connections as spawned tasks on one
//! current-thread runtime, each owning its `rpma::aio::AsyncConn`. Each
//! appends `records` records: an awaited fetch-and-add of 1 on the tail
//! reserves a slot (it returns the previous value, the slot's number), then
//! the record is written there (unsignaled, the librpma way) and an awaited
//! flush makes it visible; no thread blocks.
//!
//! `cargo run --example async-log [-- server ADDR PORT [clients records] [--shared] | client ADDR PORT [clients records]]`

mod common;
use common::{Args, Res};
use rpma::aio::{accept, AsyncConn, AsyncEp};
use rpma::conn::ConnEvent;
use rpma::{AlignedBuf, ConnReq, Ep, Flags, FlushType, MrLocal, MrRemote, MwAccess, Peer, Usage};
use std::time::Instant;

/// Bytes of one record's slot.
const SLOT: usize = 64;
/// Where the slots start (after the tail counter).
const SLOTS_AT: usize = 8;
/// Room for the log's descriptor, as the server sends it after the
/// connection (23 bytes with rpma's extension).
const DESC: usize = 32;

fn counts(a: &Args) -> Res<(usize, usize)> {
    let rest: Vec<&String> = a.rest.iter().filter(|s| !s.starts_with("--")).collect();
    let get = |i: usize, default: usize| rest.get(i).map_or(Ok(default), |s| s.parse::<usize>());
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
    let shared = a.rest.iter().any(|s| s == "--shared");
    let peer = common::peer(&a.addr, true)?;
    // Exported per connection, the log has no remote usage of its own (its
    // rkey opens nothing); MW_BIND lets windows be bound over it, WRITE_SRC
    // gives the local write access a writable window needs.
    let usage = if shared {
        Usage::REMOTE_ATOMIC | Usage::WRITE_DST | Usage::READ_SRC | Usage::FLUSH_TYPE_VISIBILITY
    } else {
        Usage::MW_BIND | Usage::WRITE_SRC
    };
    let log = MrLocal::reg(&peer, AlignedBuf::new(SLOTS_AT + total * SLOT)?, usage)?;
    let ep = Ep::listen(&peer, &a.addr, a.port)?;
    let pdata = if shared { log.descriptor_ext() } else { Vec::new() };
    println!(
        "log: {} bytes, {}",
        log.size(),
        if shared { "shared by every connection (librpma's way)" } else { "exported to each connection alone" }
    );
    runtime()?.block_on(async {
        let aep = AsyncEp::new(&ep)?;
        let mut sessions = Vec::with_capacity(clients);
        for _ in 0..clients {
            let conn = tokio::time::timeout(common::timeout(), accept(&aep, None, &pdata))
                .await
                .map_err(|_| "no client came")??;
            let conn = AsyncConn::new(conn)?;
            let export = if shared {
                None
            } else {
                // The whole log, to this connection only; its descriptor goes
                // as a message (the bind runs first: the send queue is ordered).
                let access = MwAccess::REMOTE_READ | MwAccess::REMOTE_WRITE | MwAccess::REMOTE_ATOMIC;
                let export = conn.conn().export(&log, 0, log.size(), access)?;
                let desc = export.descriptor_ext()?;
                let msg = MrLocal::reg(&peer, AlignedBuf::new(DESC)?, Usage::SEND)?;
                msg.write_at(0, &desc)?;
                conn.send(&msg, 0, desc.len()).await?;
                Some(export)
            };
            sessions.push(tokio::spawn(async move {
                let ev = conn.next_event().await?;
                drop(export);
                conn.disconnect().await?;
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
    })?;
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
    // A receive for the log's descriptor, posted before connecting: the
    // server sends it as soon as the connection is up (or gives it in the
    // private data, serving the log librpma's way).
    let desc_buf = MrLocal::reg(&peer, AlignedBuf::new(DESC)?, Usage::RECV)?;
    let conn = loop {
        let req = ConnReq::new(&peer, &addr, port, None)?;
        req.recv(&desc_buf, 0, DESC, 1)?;
        match AsyncConn::connect_req(req, &[]).await {
            Ok(conn) => break conn,
            Err(e) if t0.elapsed() < common::timeout() => {
                log::debug!("client {c}: {e}; retrying");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            Err(e) => return Err(e.into()),
        }
    };
    // No descriptor in the private data (the transport pads it with zeros):
    // it comes as a message.
    let log = if conn.conn().private_data().iter().all(|&b| b == 0) {
        let wc = conn.next_completion().await?;
        if !wc.status.is_success() {
            return Err(format!("client {c}: receiving the log's descriptor failed: {}", wc.status).into());
        }
        let mut desc = vec![0u8; (wc.byte_len as usize).min(DESC)];
        desc_buf.read_at(0, &mut desc)?;
        MrRemote::from_descriptor(&desc)?
    } else {
        MrRemote::from_descriptor(conn.conn().private_data())?
    };
    let slots = ((log.size() as usize).saturating_sub(SLOTS_AT) / SLOT) as u64;
    let prev = MrLocal::reg(&peer, AlignedBuf::new(8)?, Usage::READ_DST)?;
    let rec = MrLocal::reg(&peer, AlignedBuf::new(SLOT)?, Usage::WRITE_SRC)?;
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
