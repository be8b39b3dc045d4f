//! Helpers shared by the device test binaries.
#![allow(dead_code)]

use rpma::utils::{get_ibv_context, ContextType};
use rpma::{AlignedBuf, Conn, ConnCfg, ConnEvent, ConnReq, Ep, MrLocal, Peer, PeerCfg, Usage};
use rpma_harness::{addr, next_port};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

/// A fixed-seed xorshift generator, for deterministic randomised tests.
pub struct Rng(pub u64);

impl Rng {
    /// The next value.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

pub const T: Duration = Duration::from_secs(10);

pub fn peer() -> Peer {
    Peer::new(&get_ibv_context(&addr(), ContextType::Local).expect("context")).expect("peer")
}

/// A connected pair on a fresh port: (client conn, server conn), the server
/// having accepted with `server_pdata` and the client having connected with
/// `client_pdata`.
pub fn pair(ccfg: Option<&ConnCfg>, scfg: Option<ConnCfg>, client_pdata: &[u8], server_pdata: Vec<u8>) -> (Conn, Conn) {
    pair_on(&peer(), ccfg, scfg, client_pdata, server_pdata)
}

/// As `pair`, the server side on `sp` (where its regions are registered).
pub fn pair_on(
    sp: &Peer,
    ccfg: Option<&ConnCfg>,
    scfg: Option<ConnCfg>,
    client_pdata: &[u8],
    server_pdata: Vec<u8>,
) -> (Conn, Conn) {
    pair_at(sp, next_port(), ccfg, scfg, client_pdata, server_pdata)
}

/// As `pair_on`, on `port` (for tests that reuse a port).
pub fn pair_at(
    sp: &Peer,
    port: u16,
    ccfg: Option<&ConnCfg>,
    scfg: Option<ConnCfg>,
    client_pdata: &[u8],
    server_pdata: Vec<u8>,
) -> (Conn, Conn) {
    pair_peers(&peer(), sp, port, ccfg, scfg, client_pdata, server_pdata)
}

/// As `pair_at`, the client side on `cp`.
pub fn pair_peers(
    cp: &Peer,
    sp: &Peer,
    port: u16,
    ccfg: Option<&ConnCfg>,
    scfg: Option<ConnCfg>,
    client_pdata: &[u8],
    server_pdata: Vec<u8>,
) -> (Conn, Conn) {
    let ep = Ep::listen(sp, &addr(), port).expect("listen");
    let (tx, rx) = mpsc::channel();
    let h = thread::spawn(move || {
        let req = ep.next_conn_req_timeout(scfg.as_ref(), T).expect("connection request");
        let conn = req.connect(&server_pdata).expect("accept");
        assert_eq!(conn.next_event_timeout(T).expect("server event"), ConnEvent::Established);
        tx.send(conn).unwrap();
    });
    let req = ConnReq::new(cp, &addr(), port, ccfg).expect("conn req");
    let conn = req.connect(client_pdata).expect("connect");
    assert_eq!(conn.next_event_timeout(T).expect("client event"), ConnEvent::Established);
    let server = rx.recv_timeout(T).expect("server side");
    h.join().unwrap();
    (conn, server)
}

/// librpma's teardown order: the client disconnects, the server sees CLOSED
/// and disconnects, which lets the client see CLOSED.
pub fn close(client: Conn, server: Conn) {
    client.disconnect().unwrap();
    assert_eq!(server.next_event_timeout(T).unwrap(), ConnEvent::Closed);
    server.disconnect().unwrap();
    assert_eq!(client.next_event_timeout(T).unwrap(), ConnEvent::Closed);
}

/// The server exposes a region; its descriptor travels in private data.
pub fn server_region(p: &Peer, usage: Usage) -> (MrLocal<AlignedBuf>, Vec<u8>) {
    let mut mr = MrLocal::reg(p, AlignedBuf::new(8192).unwrap(), usage).unwrap();
    let pattern: Vec<u8> = (0..8192u32).map(|i| (i * 7 % 251) as u8).collect();
    mr.write_at(0, &pattern).unwrap();
    let mut pd = mr.descriptor().to_vec();
    pd.extend_from_slice(&PeerCfg::new().descriptor());
    (mr, pd)
}
