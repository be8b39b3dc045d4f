//! 02-read-to-volatile: the client reads a message from the server's DRAM
//! (librpma's example 02). The server's region descriptor travels in the
//! connection's private data (the examples' `common_data` layout).
//!
//! As librpma's example, the server registers exactly the 14 bytes of
//! "Hello client!" with its NUL; the client reads the whole remote region
//! from offset 0 into a 1024-byte buffer and refuses a bigger region.
//!
//! `cargo run --example 02-read-to-volatile [-- server|client ADDR PORT]`

mod common;
use common::{Args, Res};
use rpma::{AlignedBuf, CommonData, CompletionOp, Ep, Flags, MrLocal, Usage};

const HELLO: &[u8] = b"Hello client!\0";
/// The client's sink buffer (librpma's `KILOBYTE`).
const KILOBYTE: usize = 1024;

fn server(a: &Args) -> Res<()> {
    let peer = common::peer(&a.addr, true)?;
    let mr = MrLocal::reg(&peer, AlignedBuf::new(HELLO.len())?, Usage::READ_SRC)?;
    mr.write_at(0, HELLO)?;
    let ep = Ep::listen(&peer, &a.addr, a.port)?;
    let conn = common::server_accept(&ep, None, &CommonData::encode(0, &mr, None), &|_| Ok(()))?;
    common::close_second(conn)
}

fn client(a: &Args) -> Res<()> {
    let peer = common::peer(&a.addr, false)?;
    let dst = MrLocal::reg(&peer, AlignedBuf::new(KILOBYTE)?, Usage::READ_DST)?;
    let conn = common::client_connect(&peer, a, None, &[], &|_| Ok(()))?;
    let cd = CommonData::decode(conn.private_data())?;
    let size = cd.mr.size();
    if size > KILOBYTE as u64 {
        common::close_first(conn)?;
        return Err(format!(
            "Remote memory region size too big to reading to the sink buffer of the assumed size ({size} > {KILOBYTE})"
        )
        .into());
    }
    // The whole remote region, from its offset 0 (librpma's example ignores
    // data_offset here, and so does this one).
    let len = size as usize;
    conn.read(&dst, 0, &cd.mr, 0, len, Flags::COMPLETION_ALWAYS, 0)?;
    common::wait_for(conn.cq(), CompletionOp::Read)?;
    let mut buf = vec![0u8; len];
    dst.read_at(0, &mut buf)?;
    println!("Read a message: {}", common::cstr(&buf));
    common::close_first(conn)
}

fn main() {
    common::main(server, client, &[], &[]);
}
