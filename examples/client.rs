//! A minimal rpma client, with nothing but rpma and std (copy it into your
//! crate): it connects to `examples/server.rs`, which sends its region's
//! descriptor in the private data as librpma's examples do, reads the
//! server's greeting with an RDMA read, writes a reply with an RDMA write,
//! makes it visible with a flush, and closes the connection in librpma's
//! order.
//!
//! ```text
//! cargo run --example client -- 192.0.2.1 7204    # the server's address
//! ```

use rpma::{device, AlignedBuf, CommonData, ConnEvent, ConnReq, Flags, FlushType, MrLocal, Peer, Usage};
use std::time::Duration;

/// Where the server reads the reply.
const REPLY_AT: u64 = 1024;
const T: Duration = Duration::from_secs(10);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [addr, port] = args.as_slice() else {
        return Err("usage: client ADDR PORT (the server's address and port)".into());
    };
    let port: u16 = port.parse()?;

    // The device that reaches the server.
    let peer = Peer::new(&device::get_ibv_context(addr, device::ContextType::Remote)?)?;

    // Connect; the server's region descriptor arrives in the private data.
    let conn = ConnReq::new(&peer, addr, port, None)?.connect(&[])?;
    let ev = conn.next_event_timeout(T)?;
    if ev != ConnEvent::Established {
        return Err(format!("client: the connection was {ev}").into());
    }
    let remote = CommonData::decode(conn.private_data())?.mr;

    // Read the greeting: the region owns the buffer the device writes.
    let greeting = MrLocal::reg(&peer, AlignedBuf::new(64)?, Usage::READ_DST)?;
    conn.read(&greeting, 0, &remote, 0, 64, Flags::COMPLETION_ALWAYS, 1)?;
    let wc = conn.cq().next_completion(T)?;
    if !wc.status.is_success() {
        return Err(format!("client: the read failed: {}", wc.status).into());
    }
    let mut bytes = [0u8; 64];
    greeting.read_at(0, &mut bytes)?;
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    println!("client: the server says {:?}", String::from_utf8_lossy(&bytes[..end]));

    // Write the reply, then flush it: the flush's completion says it is
    // visible at the server (the write's own completion only on error).
    let reply = b"Hello back from the rpma client!\0";
    let mut src = MrLocal::reg(&peer, AlignedBuf::new(reply.len())?, Usage::WRITE_SRC)?;
    src.write_at(0, reply)?;
    conn.write(&remote, REPLY_AT, &src, 0, reply.len(), Flags::COMPLETION_ON_ERROR, 2)?;
    conn.flush(&remote, REPLY_AT, reply.len() as u64, FlushType::Visibility, Flags::COMPLETION_ALWAYS, 3)?;
    let wc = conn.cq().next_completion(T)?;
    if !wc.status.is_success() || wc.op_context != 3 {
        return Err(format!("client: the write or its flush failed: {wc:?}").into());
    }
    println!("client: reply written and flushed");

    // Close in librpma's order: disconnect, then wait for the closing event.
    conn.disconnect()?;
    let ev = conn.next_event_timeout(T)?;
    if ev != ConnEvent::Closed {
        return Err(format!("client: expected Closed, got {ev}").into());
    }
    Ok(())
}
