//! The cost of per-connection exports (`Conn::export`) against librpma's
//! shared region: `xserver ADDR PORT N MODE` accepts `N` connections and
//! gives each a 4 KiB range of one region, either as librpma does (`shared`:
//! a region registered with remote read, its descriptor in the connection's
//! private data) or as an export (`export`: a type 2 window bound on the
//! connection's QP, its descriptor sent as a message); it prints the time of
//! the exports alone. `xclient ADDR PORT N M MODE` connects `N` times, takes
//! the descriptor the same way, and reads 8 bytes `M` times per connection
//! through it (one read in flight, round robin), printing the rate.

use crate::rpma_side::{expect, peer, T};
use rpma::device::ContextType;
use rpma::{AlignedBuf, ConnEvent, ConnReq, Ep, Flags, MrLocal, MrRemote, MwAccess, Usage};
use std::time::{Duration, Instant};

type Res<T> = std::result::Result<T, Box<dyn std::error::Error>>;
const RANGE: usize = 4096;
const DESC: usize = rpma::MR_DESCRIPTOR_SIZE;

fn exporting(mode: &str) -> Res<bool> {
    match mode {
        "export" => Ok(true),
        "shared" => Ok(false),
        m => Err(format!("mode {m}: export or shared").into()),
    }
}

/// The server side (see the module's text).
pub fn server(addr: &str, port: u16, n: usize, mode: &str) -> Res<()> {
    let export = exporting(mode)?;
    let peer = peer(addr, ContextType::Local)?;
    let usage = if export { Usage::MW_BIND | Usage::WRITE_SRC } else { Usage::READ_SRC };
    let region = MrLocal::reg(&peer, AlignedBuf::new(RANGE * n)?, usage)?;
    let msg = MrLocal::reg(&peer, AlignedBuf::new(DESC * n)?, Usage::SEND)?;
    let ep = Ep::listen(&peer, addr, port)?;
    println!("READY");
    let pdata = if export { Vec::new() } else { region.descriptor().to_vec() };
    let (mut conns, mut exports) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let mut spent = Duration::ZERO;
    for i in 0..n {
        let conn = ep.next_conn_req_timeout(None, T)?.connect(&pdata)?;
        expect(&conn, ConnEvent::Established)?;
        if export {
            let t0 = Instant::now();
            let x = conn.export(&region, RANGE * i, RANGE, MwAccess::REMOTE_READ)?;
            spent += t0.elapsed();
            msg.write_at(DESC * i, &x.descriptor()?)?;
            conn.send(&msg, DESC * i, DESC, Flags::COMPLETION_ALWAYS, i as u64)?;
            let wc = conn.cq().next_completion(T)?;
            if !wc.status.is_success() {
                return Err(format!("sending the descriptor: {}", wc.status).into());
            }
            exports.push(Some(x));
        }
        conns.push(conn);
    }
    if export {
        println!("RESULT rate rpma export_bind{n} {n} {:.6}", spent.as_secs_f64());
    }
    for (i, conn) in conns.into_iter().enumerate() {
        expect(&conn, ConnEvent::Closed)?;
        // A connection's export goes before it (rxe tears down a QP with a
        // type 2 window still bound slowly).
        drop(exports.get_mut(i).and_then(Option::take));
        conn.disconnect()?;
    }
    Ok(())
}

/// The client side (see the module's text).
pub fn client(addr: &str, port: u16, n: usize, m: usize, mode: &str) -> Res<()> {
    let export = exporting(mode)?;
    let peer = peer(addr, ContextType::Remote)?;
    let rbuf = MrLocal::reg(&peer, AlignedBuf::new(DESC * n)?, Usage::RECV)?;
    let local = MrLocal::reg(&peer, AlignedBuf::new(8 * n)?, Usage::READ_DST)?;
    let mut conns = Vec::with_capacity(n);
    for i in 0..n {
        let t0 = Instant::now();
        let conn = loop {
            let req = ConnReq::new(&peer, addr, port, None)?;
            if export {
                req.recv(&rbuf, DESC * i, DESC, i as u64)?;
            }
            let conn = req.connect(&[])?;
            match conn.next_event_timeout(T)? {
                ConnEvent::Established => break conn,
                ConnEvent::Rejected if t0.elapsed() < T => std::thread::sleep(Duration::from_millis(50)),
                ev => return Err(format!("connecting failed: {ev}").into()),
            }
        };
        let remote = if export {
            let wc = conn.cq().next_completion(T)?;
            if !wc.status.is_success() {
                return Err(format!("receiving the descriptor: {}", wc.status).into());
            }
            let mut d = [0u8; DESC];
            rbuf.read_at(DESC * i, &mut d)?;
            MrRemote::from_descriptor(&d)?
        } else {
            MrRemote::from_descriptor(conn.private_data())?
        };
        conns.push((conn, remote));
    }
    let t0 = Instant::now();
    for _ in 0..m {
        for (i, (c, r)) in conns.iter().enumerate() {
            let off = if export { 0 } else { (RANGE * i) as u64 };
            c.read(&local, 8 * i, r, off, 8, Flags::COMPLETION_ALWAYS, 0)?;
            let wc = c.cq().next_completion(T)?;
            if !wc.status.is_success() {
                return Err(format!("read: {}", wc.status).into());
            }
        }
    }
    crate::stats::print_rate("rpma", &format!("xread_{mode}{n}"), n * m, t0.elapsed().as_secs_f64());
    for (c, _) in &conns {
        c.disconnect()?;
    }
    for (c, _) in &conns {
        expect(c, ConnEvent::Closed)?;
    }
    Ok(())
}
