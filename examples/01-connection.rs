//! 01-connection: establish and tear down a connection (librpma's example 01).
//!
//! As librpma's example, the client sends "Hello server!" and the server
//! answers "Hello client!" (NUL-terminated) in the connection's private
//! data, and each side prints what it got. The server closes first; the
//! client waits for the server's disconnect and closes second.
//!
//! ```text
//! cargo run --example 01-connection                       # both sides
//! cargo run --example 01-connection -- server ADDR PORT
//! cargo run --example 01-connection -- client ADDR PORT
//! ```

mod common;
use common::{Args, Res};
use rpma::Ep;

/// Prints the peer's private data as librpma's example 01 does.
fn print_message(pdata: &[u8]) {
    if pdata.is_empty() {
        println!("No message received");
    } else {
        println!("Received a message: {}", common::cstr(pdata));
    }
}

fn server(a: &Args) -> Res<()> {
    let peer = common::peer(&a.addr, true)?;
    let ep = Ep::listen(&peer, &a.addr, a.port)?;
    let conn = common::server_accept(&ep, None, b"Hello client!\0", &|_| Ok(()))?;
    print_message(conn.private_data());
    common::close_first(conn)
}

fn client(a: &Args) -> Res<()> {
    let peer = common::peer(&a.addr, false)?;
    let conn = common::client_connect(&peer, a, None, b"Hello server!\0", &|_| Ok(()))?;
    print_message(conn.private_data());
    common::close_second(conn)
}

fn main() {
    common::main(server, client, &[], &[]);
}
