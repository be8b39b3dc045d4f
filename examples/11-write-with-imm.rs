//! 11-write-with-imm: an RDMA write with immediate data, which consumes a
//! receive the server posted before accepting (librpma's example 11).
//!
//! `cargo run --example 11-write-with-imm [-- server ADDR PORT | client ADDR PORT imm]`

mod common;
use common::{Args, Res};
use rpma::{AlignedBuf, CommonData, CompletionOp, Ep, Flags, MrLocal, Usage};

fn server(a: &Args) -> Res<()> {
    let peer = common::peer(&a.addr, true)?;
    let dst = MrLocal::reg(&peer, AlignedBuf::new(64)?, Usage::WRITE_DST)?;
    let rcv = MrLocal::reg(&peer, AlignedBuf::new(8)?, Usage::RECV)?;
    let ep = Ep::listen(&peer, &a.addr, a.port)?;
    let conn = common::server_accept(&ep, None, &CommonData::encode(0, &dst, None), &|req| req.recv(&rcv, 0, 0, 1))?;
    let wc = common::wait_for(conn.cq(), CompletionOp::RecvRdmaWithImm)?;
    let mut buf = [0u8; 64];
    dst.read_at(0, &mut buf)?;
    println!("server: imm {:?}, data {:?}", wc.imm, common::cstr(&buf));
    common::close_second(conn)
}

fn client(a: &Args) -> Res<()> {
    let peer = common::peer(&a.addr, false)?;
    let imm: u32 = a.rest.first().map_or(Ok(4321), |s| s.parse())?;
    let mut src = MrLocal::reg(&peer, AlignedBuf::new(64)?, Usage::WRITE_SRC)?;
    src.write_at(0, b"written with imm\0")?;
    let conn = common::client_connect(&peer, a, None, &[], &|_| Ok(()))?;
    let cd = CommonData::decode(conn.private_data())?;
    conn.write_with_imm(&cd.mr, cd.data_offset as u64, &src, 0, 17, Flags::COMPLETION_ALWAYS, imm, 1)?;
    common::wait_for(conn.cq(), CompletionOp::WriteWithImm)?;
    println!("client: wrote with imm {imm}");
    common::close_first(conn)
}

fn main() {
    common::main(server, client, &[], &["4321"]);
}
