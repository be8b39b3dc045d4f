//! A minimal rpma client, with nothing but rpma and std (copy it into your
//! crate): it connects to a server that sends its region's descriptor in
//! the private data as librpma's examples do (`examples/server.rs`, or
//! `rpma serve ADDR PORT`), reads the region's first 64 bytes with an RDMA
//! read, writes a reply with an RDMA write, makes it visible with a flush,
//! and closes the connection in librpma's order. The README's quick start
//! is [`run`], line for line.
//!
//! ```text
//! cargo run --example client -- 192.0.2.1 7204    # the server's address
//! ```

use rpma::{device, AlignedBuf, CommonData, ConnEvent, ConnReq, Flags, FlushType, MrLocal, Peer, Usage};
use std::time::Duration;

/// Connects to the server at `addr`:`port`, prints what its region starts
/// with, writes a reply at offset 1024 and flushes it, then closes.
pub fn run(addr: &str, port: u16) -> Result<(), Box<dyn std::error::Error>> {
    let t = Duration::from_secs(10);
    // The device that reaches the server, and a protection domain on it.
    let peer = Peer::new(&device::get_ibv_context(addr, device::ContextType::Remote)?)?;

    // Connect; the server's region descriptor arrives in the private data.
    let conn = ConnReq::new(&peer, addr, port, None)?.connect(&[])?;
    let ev = conn.next_event_timeout(t)?;
    if ev != ConnEvent::Established {
        return Err(format!("the connection was {ev}").into());
    }
    let remote = CommonData::decode(conn.private_data())?.mr;

    // RDMA read 64 bytes into a region of our own: the region owns the
    // buffer, so safe code cannot free or reuse it while the device may
    // write it.
    let dst = MrLocal::reg(&peer, AlignedBuf::new(64)?, Usage::READ_DST)?;
    conn.read(&dst, 0, &remote, 0, 64, Flags::COMPLETION_ALWAYS, 1)?;
    let wc = conn.cq().next_completion(t)?;
    if !wc.status.is_success() {
        return Err(format!("the read failed: {}", wc.status).into());
    }
    let mut bytes = [0u8; 64];
    dst.read_at(0, &mut bytes)?;
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    println!("client: the server says {:?}", String::from_utf8_lossy(&bytes[..end]));

    // RDMA write a reply, then flush it: the flush's completion says the
    // reply is visible at the server.
    let reply = b"Hello back from the rpma client!\0";
    let src = MrLocal::reg(&peer, AlignedBuf::new(reply.len())?, Usage::WRITE_SRC)?;
    src.write_at(0, reply)?;
    conn.write(&remote, 1024, &src, 0, reply.len(), Flags::COMPLETION_ON_ERROR, 2)?;
    conn.flush(&remote, 1024, reply.len() as u64, FlushType::Visibility, Flags::COMPLETION_ALWAYS, 3)?;
    let wc = conn.cq().next_completion(t)?;
    if !wc.status.is_success() || wc.op_context != 3 {
        return Err(format!("the write or its flush failed: {wc:?}").into());
    }
    println!("client: reply written and flushed");

    // Close in librpma's order: disconnect, then wait for the closing event.
    conn.disconnect()?;
    let ev = conn.next_event_timeout(t)?;
    if ev != ConnEvent::Closed {
        return Err(format!("expected Closed, got {ev}").into());
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [addr, port] = args.as_slice() else {
        return Err("usage: client ADDR PORT (the server's address and port)".into());
    };
    run(addr, port.parse()?).map_err(|e| format!("client: {e}").into())
}
