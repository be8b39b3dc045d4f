//! The rpma demo: a server exposes memory, a client reads it, writes a
//! reply, makes it visible with a flush and bumps a counter with an atomic
//! write, all over RDMA on a real device. The server's region descriptor
//! travels in the connection's private data, as librpma's examples do.
//!
//! ```text
//! cargo run --example demo                      # both sides, in a Soft-RoCE VM if needed
//! cargo run --example demo -- server ADDR PORT  # one side, on a host with a device
//! cargo run --example demo -- client ADDR PORT
//! ```

mod common;
use common::{Args, Res};
use rpma::{AlignedBuf, CommonData, CompletionOp, Ep, Flags, FlushType, MrLocal, Usage};

const GREETING: &[u8] = b"Hello from the rpma demo server!";
const REPLY_AT: u64 = 1024;
const COUNTER_AT: u64 = 4088;
const REPLY: &[u8] = b"Hello back from the rpma demo client!\0";

fn server(a: &Args) -> Res<()> {
    let peer = common::peer(&a.addr, true)?;
    println!("server: device {} capabilities {:?}", peer.device_name(), peer.capabilities());
    let usage = Usage::READ_SRC | Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY;
    let mr = MrLocal::reg(&peer, AlignedBuf::new(4096)?, usage)?;
    mr.write_at(0, GREETING)?;
    println!("server: registered {} bytes, access {:?}, rkey {:#x}", mr.size(), mr.access(), mr.rkey());
    let ep = Ep::listen(&peer, &a.addr, a.port)?;
    let conn = common::server_accept(&ep, None, &CommonData::encode(0, &mr, None), &|_| Ok(()))?;
    println!("server: connection established; descriptor sent in private data");
    common::close_second(conn)?;
    let mut reply = [0u8; 64];
    mr.read_at(REPLY_AT as usize, &mut reply)?;
    let mut counter = [0u8; 8];
    mr.read_at(COUNTER_AT as usize, &mut counter)?;
    println!("server: the client wrote {:?}, counter = {}", common::cstr(&reply), u64::from_le_bytes(counter));
    // Run whole (no arguments), the demo is also a test: the client's write
    // and atomic write must have landed, or the server fails. (As a server
    // for other clients, e.g. C librpma's in the interop tests, it only
    // reports what they wrote.)
    if self_contained() && (reply[..REPLY.len()] != *REPLY || u64::from_le_bytes(counter) != 42) {
        return Err(format!("server: expected the reply {:?} and counter 42", common::cstr(REPLY)).into());
    }
    mr.dereg()?;
    Ok(())
}

fn client(a: &Args) -> Res<()> {
    let peer = common::peer(&a.addr, false)?;
    let local = MrLocal::reg(&peer, AlignedBuf::new(4096)?, Usage::READ_DST | Usage::WRITE_SRC)?;
    let conn = common::client_connect(&peer, a, None, &[], &|_| Ok(()))?;
    let cd = CommonData::decode(conn.private_data())?;
    let remote = cd.mr;
    println!("client: remote region size {} rkey {:#x} usage {:?}", remote.size(), remote.rkey(), remote.usage());

    conn.read(&local, 0, &remote, 0, GREETING.len(), Flags::COMPLETION_ALWAYS, 1)?;
    common::wait_for(conn.cq(), CompletionOp::Read)?;
    let mut got = vec![0u8; GREETING.len()];
    local.read_at(0, &mut got)?;
    println!("client: RDMA read: {:?}", String::from_utf8_lossy(&got));
    if self_contained() && got != GREETING {
        return Err("client: the RDMA read did not return the server's greeting".into());
    }

    let reply = REPLY;
    local.write_at(512, reply)?;
    conn.write(&remote, REPLY_AT, &local, 512, reply.len(), Flags::COMPLETION_ON_ERROR, 2)?;
    conn.atomic_write(&remote, COUNTER_AT, 42u64.to_le_bytes(), Flags::COMPLETION_ON_ERROR, 3)?;
    conn.flush(&remote, REPLY_AT, reply.len() as u64, FlushType::Visibility, Flags::COMPLETION_ALWAYS, 4)?;
    common::wait_for(conn.cq(), CompletionOp::Flush)?;
    println!("client: wrote a reply, atomically wrote counter 42, flushed");
    common::close_first(conn)?;
    local.dereg()?;
    Ok(())
}

/// Both sides from this program (`both ADDR PORT`, whose two processes
/// it marks): the demo checks its own bytes.
fn self_contained() -> bool {
    std::env::args().nth(1).as_deref() == Some("both") || std::env::var_os(common::BOTH).is_some()
}

fn main() {
    common::main(server, client, &[], &[]);
    // The parent of both sides: each checked the other's bytes.
    if std::env::args().nth(1).as_deref() == Some("both") {
        println!("demo: ok");
    }
}
