//! 03-read-to-persistent: the server reads a message from the client's
//! memory into its own (persistent, when a path is given) memory (librpma's
//! example 03). The client's descriptor travels in its connection request.
//!
//! The layouts are librpma's: the client exposes a 1028-byte `hello_t`
//! (a u32 language at 0, then a 1024-byte string at 4) and sends
//! `data_offset` 4; the server reads exactly 1024 bytes from there into its
//! own 1024-byte region. With a path the server keeps the examples'
//! 17-byte signature ("RPMA_EXAMPLE_SIG" and a NUL) at 0 and its data at 17.
//! The server closes first.
//!
//! `cargo run --example 03-read-to-persistent [-- server ADDR PORT [pmem-path] | client ADDR PORT]`

mod common;
use common::{Args, Memory, Res};
use rpma::{AlignedBuf, CommonData, CompletionOp, Ep, Flags, MrLocal, Usage};

/// `HELLO_STR_SIZE`: the string part of `hello_t`, and what the server reads.
const HELLO_STR_SIZE: usize = 1024;
/// `HELLO_STR_OFFSET`: the string follows the u32 language.
const HELLO_STR_OFFSET: usize = 4;
/// `HELLO_T_SIZE`.
const HELLO_T_SIZE: usize = HELLO_STR_OFFSET + HELLO_STR_SIZE;
/// The examples' signature at the start of a persistent region, with its NUL.
const SIGNATURE: &[u8] = b"RPMA_EXAMPLE_SIG\0";

fn server(a: &Args) -> Res<()> {
    let peer = common::peer(&a.addr, true)?;
    let path = a.rest.first().map(String::as_str);
    let (len, data_offset) = match path {
        Some(_) => (SIGNATURE.len() + HELLO_STR_SIZE, SIGNATURE.len()),
        None => (HELLO_STR_SIZE, 0),
    };
    let dst = Memory::reg(&peer, path, len, Usage::READ_DST)?;
    if dst.is_file() {
        let mut sig = [0u8; SIGNATURE.len()];
        dst.read_at(0, &mut sig)?;
        if sig == SIGNATURE {
            let mut old = vec![0u8; HELLO_STR_SIZE];
            dst.read_at(data_offset, &mut old)?;
            if old[0] != 0 {
                println!("Old value: {}", common::cstr(&old));
            }
        } else {
            dst.write_at(data_offset, &[0u8; HELLO_STR_SIZE])?;
            dst.write_at(0, SIGNATURE)?;
        }
    }
    let ep = Ep::listen(&peer, &a.addr, a.port)?;
    let conn = common::server_accept(&ep, None, &[], &|_| Ok(()))?;
    let cd = CommonData::decode(conn.private_data())?;
    let (local, remote) = (data_offset, cd.data_offset as u64);
    conn.read(&dst.mr, local, &cd.mr, remote, HELLO_STR_SIZE, Flags::COMPLETION_ALWAYS, 0)?;
    common::wait_for(conn.cq(), CompletionOp::Read)?;
    let mut buf = vec![0u8; HELLO_STR_SIZE];
    dst.read_at(data_offset, &mut buf)?;
    if dst.is_file() {
        dst.persist()?;
    }
    println!("New value: {}", common::cstr(&buf));
    common::close_first(conn)
}

fn client(a: &Args) -> Res<()> {
    let peer = common::peer(&a.addr, false)?;
    // hello_t { lang: en (0), str: "Hello world!" }
    let src = MrLocal::reg(&peer, AlignedBuf::new(HELLO_T_SIZE)?, Usage::READ_SRC)?;
    src.write_at(0, &0u32.to_le_bytes())?;
    src.write_at(HELLO_STR_OFFSET, b"Hello world!\0")?;
    println!("Next value: Hello world!");
    let pdata = CommonData::encode(HELLO_STR_OFFSET as u16, &src, None);
    let conn = common::client_connect(&peer, a, None, &pdata, &|_| Ok(()))?;
    common::close_second(conn)?;
    // As librpma's example: switch the language for the next run (which only
    // matters when the hello_t is persistent; here it is DRAM).
    src.write_at(0, &1u32.to_le_bytes())?;
    src.write_at(HELLO_STR_OFFSET, "¡Hola Mundo!\0".as_bytes())?;
    println!("translating...");
    println!("Translation: ¡Hola Mundo!");
    Ok(())
}

fn main() {
    common::main(server, client, &[], &[]);
}
