//! A minimal rpma server, with nothing but rpma and std (copy it into your
//! crate): it registers 4 KiB holding a greeting, listens, sends the
//! region's descriptor in the connection's private data (as librpma's
//! examples do), and once the client has written its reply and
//! disconnected, prints the reply. Pair it with `examples/client.rs`:
//!
//! ```text
//! cargo run --example server -- 192.0.2.1 7204    # an address of an RDMA device
//! cargo run --example client -- 192.0.2.1 7204    # on another terminal or host
//! ```

use rpma::{device, AlignedBuf, CommonData, ConnEvent, Ep, MrLocal, Peer, Usage};
use std::time::Duration;

/// Where the client writes its reply.
const REPLY_AT: usize = 1024;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [addr, port] = args.as_slice() else {
        return Err("usage: server ADDR PORT (ADDR: an address of this host's RDMA device)".into());
    };
    let port: u16 = port.parse()?;

    // The device that has the address, and a protection domain on it.
    let peer = Peer::new(&device::get_ibv_context(addr, device::ContextType::Local)?)?;

    // The memory the client reads and writes, registered for both (and
    // for the flush that makes the client's write visible).
    let usage = Usage::READ_SRC | Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY;
    let mr = MrLocal::reg(&peer, AlignedBuf::new(4096)?, usage)?;
    mr.write_at(0, b"Hello from the rpma server!")?;

    // One connection: its descriptor travels in the private data.
    let ep = Ep::listen(&peer, addr, port)?;
    println!("server: listening on {addr}:{port}");
    let req = ep.next_conn_req_timeout(None, Duration::from_secs(120))?;
    let conn = req.connect(&CommonData::encode(0, &mr, None))?;
    let ev = conn.next_event_timeout(Duration::from_secs(10))?;
    if ev != ConnEvent::Established {
        return Err(format!("server: the connection was {ev}").into());
    }
    println!("server: connected");

    // The client closes first, once its reply has landed; then close our
    // side (librpma's order).
    let ev = conn.next_event_timeout(Duration::from_secs(60))?;
    if ev != ConnEvent::Closed {
        return Err(format!("server: expected the client to close, got {ev}").into());
    }
    conn.disconnect()?;

    let mut reply = [0u8; 64];
    mr.read_at(REPLY_AT, &mut reply)?;
    let end = reply.iter().position(|&b| b == 0).unwrap_or(reply.len());
    println!("server: the client wrote {:?}", String::from_utf8_lossy(&reply[..end]));
    Ok(())
}
