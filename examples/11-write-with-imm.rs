//! 11-write-with-imm: an RDMA write with immediate data, which consumes a
//! receive the server posted before accepting (librpma's example 11).
//!
//! As librpma's example, the client writes a whole 1024-byte buffer whose
//! first 4 bytes hold the immediate value (little-endian) into the server's
//! 1024-byte region, and the server checks that the immediate data equals
//! the value written there.
//!
//! `cargo run --example 11-write-with-imm [-- server ADDR PORT | client ADDR PORT imm]`

mod common;
use common::{Args, Res};
use rpma::{AlignedBuf, CommonData, CompletionOp, Ep, Flags, MrLocal, Usage};

/// The size of both sides' regions and of the write (`KILOBYTE`).
const KILOBYTE: usize = 1024;

fn server(a: &Args) -> Res<()> {
    let peer = common::peer(&a.addr, true)?;
    let dst = MrLocal::reg(&peer, AlignedBuf::new(KILOBYTE)?, Usage::WRITE_DST)?;
    let rcv = MrLocal::reg(&peer, AlignedBuf::new(1)?, Usage::RECV)?;
    let ep = Ep::listen(&peer, &a.addr, a.port)?;
    let conn = common::server_accept(&ep, None, &CommonData::encode(0, &dst, None), &|req| req.recv(&rcv, 0, 1, 1))?;
    let wc = common::wait_for(conn.cq(), CompletionOp::RecvRdmaWithImm)?;
    let imm = wc.imm.ok_or("Received an unexpected completion: no immediate data")?;
    let mut value = [0u8; 4];
    dst.read_at(0, &mut value)?;
    let value = u32::from_le_bytes(value);
    if imm != value {
        return Err(format!("Received unexpected immediate data ({imm} != {value})").into());
    }
    println!("The value '{value}' was written together with immediate data '{imm}'");
    common::close_second(conn)
}

fn client(a: &Args) -> Res<()> {
    let peer = common::peer(&a.addr, false)?;
    let imm: u32 = match a.rest.first() {
        Some(s) => s.parse().map_err(|_| "The provided immediate data is too big or not a number")?,
        None => 1234,
    };
    let src = MrLocal::reg(&peer, AlignedBuf::new(KILOBYTE)?, Usage::WRITE_SRC)?;
    src.write_at(0, &imm.to_le_bytes())?;
    let conn = common::client_connect(&peer, a, None, &[], &|_| Ok(()))?;
    let cd = CommonData::decode(conn.private_data())?;
    println!("Writing value '{imm}' with immediate data '{imm}'");
    conn.write_with_imm(&cd.mr, cd.data_offset as u64, &src, 0, KILOBYTE, Flags::COMPLETION_ALWAYS, imm, 1)?;
    common::wait_for(conn.cq(), CompletionOp::WriteWithImm)?;
    common::close_first(conn)
}

fn main() {
    common::main(server, client, &[], &["1234"]);
}
