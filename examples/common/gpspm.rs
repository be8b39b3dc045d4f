//! Examples 09 and 09scch: GPSPM, the General Purpose Server Persistency
//! Method (librpma's examples). The client writes, then sends a flush
//! request; the server persists the range and answers.
//!
//! The layouts are librpma's: the server exposes 1024 bytes (with a
//! `pmem-path`: the file, its data after the examples' 17-byte signature);
//! the client writes the 1024-byte string of its 1028-byte `hello_t` there.
//! The messages are librpma's protobuf ones (`rpma::gpspm`: a 27-byte
//! request, a 9-byte response). Each side has one 1024-byte message region:
//! it sends from offset 0 and receives up to 512 bytes at offset 512, and
//! its receives complete on the connection's receive CQ (of 1 entry). With
//! 09scch the CQ and the receive CQ share one completion channel. The client
//! closes first; the server then prints the new value.

use super::hello::{self, HELLO_STR_SIZE, HELLO_T_SIZE};
use super::{Args, Memory, Res};
use rpma::gpspm::{FlushRequest, FlushResponse, GPSPM_REQUEST_SIZE, GPSPM_RESPONSE_SIZE};
use rpma::{AlignedBuf, CommonData, Completion, CompletionOp, Conn, ConnCfg, Ep, Flags, MrLocal, Usage};

/// The largest message (`MSG_SIZE_MAX`): a receive's length.
const MSG_SIZE_MAX: usize = 512;
/// Where messages are sent from in the message region (`SEND_OFFSET`).
const SEND_OFFSET: usize = 0;
/// Where messages are received in the message region (`RECV_OFFSET`).
const RECV_OFFSET: usize = SEND_OFFSET + MSG_SIZE_MAX;
/// The message region's size (`HELLO_STR_SIZE` in librpma's).
const MSG_REGION_SIZE: usize = 1024;
/// The flush request's context, expected back in the response (`FLUSH_ID`).
const FLUSH_ID: u64 = 0xF01D;

fn cfg(shared: bool) -> ConnCfg {
    let mut c = ConnCfg::new();
    c.set_rcq_size(1); // RCQ_SIZE
    c.set_compl_channel(shared);
    c
}

/// Waits for the completion of `op`: a receive on the receive CQ, anything
/// else on the CQ. With a shared channel a wait may wake up for the other
/// CQ; its completion stays there for a later call.
fn wait(conn: &Conn, shared: bool, op: CompletionOp) -> Res<Completion> {
    let cq = if op == CompletionOp::Recv { conn.rcq().ok_or("the connection has no receive CQ")? } else { conn.cq() };
    let wc = if shared {
        loop {
            match cq.get_completion()? {
                Some(wc) => break wc,
                None => _ = conn.wait_timeout(super::timeout())?,
            }
        }
    } else {
        cq.next_completion(super::timeout())?
    };
    let name = if op == CompletionOp::Recv { "rpma_recv()" } else { "rpma_send()" };
    if !wc.status.is_success() {
        return Err(format!("{name} failed: {}", wc.status).into());
    }
    if wc.op != op {
        return Err(format!("unexpected wc.opcode value ({:?} != {op:?})", wc.op).into());
    }
    Ok(wc)
}

/// The message a receive completion `wc` brought into `msg`.
fn received(msg: &MrLocal<AlignedBuf>, wc: &Completion) -> Res<Vec<u8>> {
    let mut b = vec![0u8; (wc.byte_len as usize).min(MSG_SIZE_MAX)];
    msg.read_at(RECV_OFFSET, &mut b)?;
    Ok(b)
}

pub fn server(a: &Args, shared: bool) -> Res<()> {
    let peer = super::peer(&a.addr, true)?;
    let path = a.rest.first().map(String::as_str);
    let flush = if path.is_some() { Usage::FLUSH_TYPE_PERSISTENT } else { Usage::FLUSH_TYPE_VISIBILITY };
    // A fresh region holds an empty string.
    let (mem, data_offset) =
        super::example_memory(&peer, path, 0, HELLO_STR_SIZE, Usage::WRITE_DST | flush, &|m, at| {
            Ok(m.write_at(at, &[0])?)
        })?;
    let value = |mem: &Memory| -> Res<String> {
        let mut buf = vec![0u8; HELLO_STR_SIZE];
        mem.read_at(data_offset, &mut buf)?;
        Ok(super::cstr(&buf))
    };
    let old = value(&mem)?;
    if !old.is_empty() {
        println!("Old value: {old}");
    }
    let msg = MrLocal::reg(
        &peer,
        AlignedBuf::new(MSG_REGION_SIZE)?,
        Usage::SEND | Usage::RECV | Usage::FLUSH_TYPE_VISIBILITY,
    )?;
    let ep = Ep::listen(&peer, &a.addr, a.port)?;
    // The receive for the flush request is posted before accepting.
    let conn = super::server_accept(&ep, Some(&cfg(shared)), &mem.common_data(data_offset as u16, None), &|req| {
        req.recv(&msg, RECV_OFFSET, MSG_SIZE_MAX, 0)
    })?;
    let wc = wait(&conn, shared, CompletionOp::Recv)?;
    let req =
        FlushRequest::decode(&received(&msg, &wc)?).map_err(|e| format!("Cannot unpack the flush request: {e}"))?;
    println!(
        "Flush request received: {{offset: 0x{:X}, length: 0x{:X}, op_context: 0x{:X}}}",
        req.offset, req.length, req.op_context
    );
    // The range must lie in the region given to the client.
    req.check(mem.size() as u64)?;
    if mem.is_file() {
        mem.persist()?; // msync of the mapping (real PMem would flush CPU caches)
    } else if shared {
        println!("At this point, persistent function should be called if persistent memory will be in use");
    } else {
        println!("At this point, persist function should be called if persistent memory will be in use");
    }
    msg.write_at(SEND_OFFSET, &FlushResponse::new(req.op_context).encode())?;
    conn.send(&msg, SEND_OFFSET, GPSPM_RESPONSE_SIZE, Flags::COMPLETION_ALWAYS, 0)?;
    wait(&conn, shared, CompletionOp::Send)?;
    super::close_second(conn)?;
    println!("New value: {}", value(&mem)?);
    Ok(())
}

pub fn client(a: &Args, shared: bool) -> Res<()> {
    let peer = super::peer(&a.addr, false)?;
    let path = a.rest.first().map(String::as_str);
    let offset: usize = a.rest.get(1).map_or(Ok(0), |s| s.parse())?;
    let (mut src, data_offset) =
        super::example_memory(&peer, path, offset, HELLO_T_SIZE, Usage::WRITE_SRC, &|m, at| hello::write(m, at, 0))?;
    println!("Next value: {}", hello::read(&src, data_offset)?.1);
    let msg = MrLocal::reg(&peer, AlignedBuf::new(MSG_REGION_SIZE)?, Usage::SEND | Usage::RECV)?;
    let conn = super::client_connect(&peer, a, Some(&cfg(shared)), &[], &|_| Ok(()))?;
    let cd = CommonData::decode(conn.private_data())?;
    let dst_offset =
        hello::write_string(&conn, &src, data_offset, &cd, "Size of the remote memory region is too small")?;
    // The request goes into the message region before the receive for the
    // response is posted into it (a region is not rewritten while a
    // receive into it is in flight).
    let req = FlushRequest::new(dst_offset, HELLO_STR_SIZE as u64, FLUSH_ID);
    msg.write_at(SEND_OFFSET, &req.encode())?;
    conn.recv(&msg, RECV_OFFSET, MSG_SIZE_MAX, 0)?;
    conn.send(&msg, SEND_OFFSET, GPSPM_REQUEST_SIZE, Flags::COMPLETION_ALWAYS, 0)?;
    wait(&conn, shared, CompletionOp::Send)?;
    let wc = wait(&conn, shared, CompletionOp::Recv)?;
    let resp =
        FlushResponse::decode(&received(&msg, &wc)?).map_err(|e| format!("Cannot unpack the flush response: {e}"))?;
    if resp.op_context != FLUSH_ID {
        return Err(
            format!("unexpected flush_resp->op_context value (0x{:X} != 0x{FLUSH_ID:X})", resp.op_context).into()
        );
    }
    // Translate the greeting, so the next run's is surprising (librpma's
    // prints the translation only when its hello_t is not persistent).
    let translation = hello::translate(&mut src, data_offset)?;
    if !src.is_file() {
        println!("Translation: {translation}");
    }
    super::close_first(conn)
}
