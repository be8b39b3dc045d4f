//! 01-connection: establish and tear down a connection (librpma's example 01).
//!
//! ```text
//! cargo run --example 01-connection                       # both sides
//! cargo run --example 01-connection -- server ADDR PORT
//! cargo run --example 01-connection -- client ADDR PORT
//! ```

mod common;
use common::{Args, Res};
use rpma::Ep;

fn server(a: &Args) -> Res<()> {
    let peer = common::peer(&a.addr, true)?;
    let ep = Ep::listen(&peer, &a.addr, a.port)?;
    let conn = common::server_accept(&ep, None, &[], &|_| Ok(()))?;
    println!("server: connection established (qp {})", conn.qp_num());
    common::close_second(conn)?;
    println!("server: connection closed");
    Ok(())
}

fn client(a: &Args) -> Res<()> {
    let peer = common::peer(&a.addr, false)?;
    let conn = common::client_connect(&peer, a, None, &[], &|_| Ok(()))?;
    println!("client: connection established (qp {})", conn.qp_num());
    common::close_first(conn)?;
    println!("client: connection closed");
    Ok(())
}

fn main() {
    common::main(server, client, &[], &[]);
}
