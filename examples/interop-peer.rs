//! interop-peer: the Rust side of the interop matrix with C librpma; its C
//! twin is `tests/c/interop_peer.c` and both follow the same conventions
//! (see there). `tests/device_interop.rs` runs every case both ways.
//!
//! `cargo run --example interop-peer -- server ADDR PORT | client ADDR PORT CASE`
//! with CASE one of read, write-flush-vis, write-flush-pers, atomic, send,
//! send-imm, write-imm.

mod common;
use common::{Args, Res};
use rpma::{AlignedBuf, CommonData, CompletionOp, Ep, Flags, FlushType, MrLocal, PeerCfg, Usage};

const SIZE: usize = 4096;

fn server(a: &Args) -> Res<()> {
    let peer = common::peer(&a.addr, true)?;
    let usage = Usage::READ_SRC | Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY | Usage::FLUSH_TYPE_PERSISTENT;
    // With native RDMA FLUSH, Soft-RoCE grants persistent flush only on
    // persistent memory: offer visibility only, and say so.
    let (mr, persistent) = match MrLocal::reg(&peer, AlignedBuf::new(SIZE)?, usage) {
        Ok(mr) => (mr, true),
        Err(e) => {
            println!("server: persistent flush refused on DRAM: offering visibility flush only ({e})");
            (MrLocal::reg(&peer, AlignedBuf::new(SIZE)?, usage - Usage::FLUSH_TYPE_PERSISTENT)?, false)
        }
    };
    mr.write_at(0, b"Hello from Rust server!\0")?;
    let rcv = MrLocal::reg(&peer, AlignedBuf::new(64)?, Usage::RECV)?;
    let mut pcfg = PeerCfg::new();
    pcfg.set_direct_write_to_pmem(persistent);
    let ep = Ep::listen(&peer, &a.addr, a.port)?;
    let pdata = CommonData::encode(0, &mr, Some(&pcfg));
    let conn = common::server_accept(&ep, None, &pdata, &|req| req.recv(&rcv, 0, 64, 1))?;
    match conn.next_event_timeout(common::timeout())? {
        rpma::ConnEvent::Closed => {}
        ev => return Err(format!("expected the client to close, got {ev}").into()),
    }
    if let Ok(Some(wc)) = conn.cq().get_completion() {
        if wc.status.is_success() && matches!(wc.op, CompletionOp::Recv | CompletionOp::RecvRdmaWithImm) {
            let mut b = vec![0u8; wc.byte_len as usize];
            rcv.read_at(0, &mut b)?;
            print!("recv: len {} msg \"{}\"", wc.byte_len, String::from_utf8_lossy(&b));
            if let Some(imm) = wc.imm {
                print!(" imm {imm}");
            }
            println!();
        }
    }
    conn.disconnect()?;
    drop(conn);
    let at = |off: usize| -> Res<String> {
        let mut b = [0u8; 64];
        mr.read_at(off, &mut b)?;
        Ok(common::cstr(&b))
    };
    let mut c = [0u8; 8];
    mr.read_at(4088, &mut c)?;
    println!("at1024: \"{}\"\nat2048: \"{}\"\ncounter: {:#x}", at(1024)?, at(2048)?, u64::from_le_bytes(c));
    Ok(())
}

fn client(a: &Args) -> Res<()> {
    let case = a.rest.first().ok_or("no CASE given")?.clone();
    let peer = common::peer(&a.addr, false)?;
    let buf = MrLocal::reg(&peer, AlignedBuf::new(SIZE)?, Usage::READ_DST | Usage::WRITE_SRC | Usage::SEND)?;
    let msg = b"from the Rust client\0";
    buf.write_at(512, msg)?;
    let conn = common::client_connect(&peer, a, None, &[], &|_| Ok(()))?;
    let cd = CommonData::decode(conn.private_data())?;
    let (rmr, off) = (&cd.mr, cd.data_offset as u64);
    let f = Flags::COMPLETION_ALWAYS;
    let len = msg.len();
    match case.as_str() {
        "read" => {
            conn.read(&buf, 0, rmr, off, 32, f, 1)?;
            common::wait_for(conn.cq(), CompletionOp::Read)?;
            let mut b = [0u8; 32];
            buf.read_at(0, &mut b)?;
            println!("read: \"{}\"", common::cstr(&b));
        }
        "write-flush-vis" | "write-flush-pers" => {
            let pers = case == "write-flush-pers";
            if pers {
                conn.apply_remote_peer_cfg(&cd.peer_cfg.ok_or("the server sent no peer configuration")?);
                if !rmr.usage().contains(Usage::FLUSH_TYPE_PERSISTENT) {
                    // The server could not offer it: rpma must refuse.
                    let e = conn.flush(rmr, 1024, len as u64, FlushType::Persistent, f, 2).unwrap_err();
                    if e.code() != rpma::error::RPMA_E_NOSUPP {
                        return Err(format!("persistent flush without the usage: {e}").into());
                    }
                    println!("client: write-flush-pers refused (NOSUPP): the server offers no persistent flush");
                    return common::close_first(conn);
                }
            }
            conn.write(rmr, 1024, &buf, 512, len, Flags::COMPLETION_ON_ERROR, 1)?;
            let ty = if pers { FlushType::Persistent } else { FlushType::Visibility };
            conn.flush(rmr, 1024, len as u64, ty, f, 2)?;
            common::wait_for(conn.cq(), CompletionOp::Flush)?;
        }
        "atomic" => {
            conn.atomic_write(rmr, 4088, 0x0102030405060708u64.to_le_bytes(), f, 1)?;
            common::wait_for(conn.cq(), CompletionOp::AtomicWrite)?;
        }
        "send" => {
            conn.send(&buf, 512, len, f, 1)?;
            common::wait_for(conn.cq(), CompletionOp::Send)?;
        }
        "send-imm" => {
            conn.send_with_imm(&buf, 512, len, f, 12648430, 1)?;
            common::wait_for(conn.cq(), CompletionOp::SendWithImm)?;
        }
        "write-imm" => {
            conn.write_with_imm(rmr, 2048, &buf, 512, len, f, 48879, 1)?;
            common::wait_for(conn.cq(), CompletionOp::WriteWithImm)?;
        }
        other => return Err(format!("unknown case {other}").into()),
    }
    println!("client: {case} done");
    common::close_first(conn)
}

fn main() {
    common::main(server, client, &[], &["read"]);
}
