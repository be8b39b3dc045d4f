//! Helpers shared by the device test binaries.
#![allow(dead_code)]

use rpma::device::{get_ibv_context, ContextType};
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

/// A connected pair, built up and then made by [`Pair::connect`]: the
/// server listens on `port`, accepts the first connection request with
/// `server_pdata`, and waits for `Established`; the client connects with
/// `client_pdata` and waits for `Established` too (each wait [`T`]).
///
/// Defaults: each side on a fresh peer from [`peer`], a fresh port from
/// [`next_port`], neither side with a configuration, no private data.
///
/// ```ignore
/// let (client, server) = Pair::new().server_peer(&sp).server_pdata(desc).connect();
/// ```
#[derive(Default)]
pub struct Pair<'a> {
    server_peer: Option<&'a Peer>,
    client_peer: Option<&'a Peer>,
    port: Option<u16>,
    client_cfg: Option<&'a ConnCfg>,
    server_cfg: Option<ConnCfg>,
    client_pdata: &'a [u8],
    server_pdata: Vec<u8>,
}

impl<'a> Pair<'a> {
    /// A pair with every default.
    pub fn new() -> Self {
        Self::default()
    }

    /// The server side on `sp` (where its regions are registered).
    pub fn server_peer(mut self, sp: &'a Peer) -> Self {
        self.server_peer = Some(sp);
        self
    }

    /// The client side on `cp`.
    pub fn client_peer(mut self, cp: &'a Peer) -> Self {
        self.client_peer = Some(cp);
        self
    }

    /// Listen and connect on `port` (for tests that reuse a port).
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// The client's connection configuration.
    pub fn client_cfg(mut self, cfg: &'a ConnCfg) -> Self {
        self.client_cfg = Some(cfg);
        self
    }

    /// The server's connection configuration (used when it accepts).
    pub fn server_cfg(mut self, cfg: ConnCfg) -> Self {
        self.server_cfg = Some(cfg);
        self
    }

    /// The private data the client connects with.
    pub fn client_pdata(mut self, pdata: &'a [u8]) -> Self {
        self.client_pdata = pdata;
        self
    }

    /// The private data the server accepts with.
    pub fn server_pdata(mut self, pdata: impl Into<Vec<u8>>) -> Self {
        self.server_pdata = pdata.into();
        self
    }

    /// Connects: (client conn, server conn), both established. A default
    /// server peer is made first, then the port is taken, then a default
    /// client peer is made.
    pub fn connect(self) -> (Conn, Conn) {
        let own_sp;
        let sp = match self.server_peer {
            Some(sp) => sp,
            None => {
                own_sp = peer();
                &own_sp
            }
        };
        let port = self.port.unwrap_or_else(next_port);
        let own_cp;
        let cp = match self.client_peer {
            Some(cp) => cp,
            None => {
                own_cp = peer();
                &own_cp
            }
        };
        let (scfg, server_pdata) = (self.server_cfg, self.server_pdata);
        let ep = Ep::listen(sp, &addr(), port).expect("listen");
        let (tx, rx) = mpsc::channel();
        let h = thread::spawn(move || {
            let req = ep.next_conn_req_timeout(scfg.as_ref(), T).expect("connection request");
            let conn = req.connect(&server_pdata).expect("accept");
            assert_eq!(conn.next_event_timeout(T).expect("server event"), ConnEvent::Established);
            tx.send(conn).unwrap();
        });
        let req = ConnReq::new(cp, &addr(), port, self.client_cfg).expect("conn req");
        let conn = req.connect(self.client_pdata).expect("connect");
        assert_eq!(conn.next_event_timeout(T).expect("client event"), ConnEvent::Established);
        let server = rx.recv_timeout(T).expect("server side");
        h.join().unwrap();
        (conn, server)
    }
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
    let mr = MrLocal::reg(p, AlignedBuf::new(8192).unwrap(), usage).unwrap();
    let pattern: Vec<u8> = (0..8192u32).map(|i| (i * 7 % 251) as u8).collect();
    mr.write_at(0, &pattern).unwrap();
    let mut pd = mr.descriptor().to_vec();
    pd.extend_from_slice(&PeerCfg::new().descriptor());
    (mr, pd)
}

/// Connects to `port` on the other host of `harness/rdma-run --two-hosts`
/// (`RPMA_PEER_ADDR`), retrying while that host is not listening yet, for
/// at most 120 s.
pub fn connect_across(p: &Peer, port: u16, pdata: &[u8]) -> Conn {
    let to = std::env::var("RPMA_PEER_ADDR").expect("RPMA_PEER_ADDR (two hosts)");
    let t0 = std::time::Instant::now();
    loop {
        let c = ConnReq::new(p, &to, port, None).unwrap().connect(pdata).unwrap();
        match c.next_event_timeout(T) {
            Ok(ConnEvent::Established) => return c,
            other => {
                assert!(t0.elapsed() < Duration::from_secs(120), "no connection in 120 s: last {other:?}");
                // a retry back-off while the other host starts listening
                // (another machine: no local listening socket to watch)
                thread::sleep(Duration::from_millis(500));
            }
        }
    }
}

/// `mr` (registered on `sp` with write, read and persistent-flush usage)
/// reached over RDMA as a remote writer of persistent memory would: a
/// connection to it, the peer configuration saying `direct_write_to_pmem`
/// as `mr` is pmem, `len` bytes written at `at`, flushed `Persistent`, then
/// read back by the CPU on `mr` and over RDMA.
pub fn persist_over_rdma<M: rpma::RegMemory + Send + Sync + 'static>(
    sp: &Peer,
    mr: &MrLocal<M>,
    at: usize,
    len: usize,
    pmem: bool,
) {
    use rpma::{Flags, FlushType, MrRemote};
    let mut pcfg = PeerCfg::new();
    pcfg.set_direct_write_to_pmem(pmem);
    let (c, s) = Pair::new().server_peer(sp).server_pdata(mr.descriptor().to_vec()).connect();
    c.apply_remote_peer_cfg(&pcfg);
    let remote = MrRemote::from_descriptor(c.private_data()).unwrap();
    assert!(remote.flush_type().contains(Usage::FLUSH_TYPE_PERSISTENT), "the descriptor offers a persistent flush");
    let pattern: Vec<u8> = (0..len as u32).map(|i| (i * 13 % 251) as u8).collect();
    let src = MrLocal::reg(c.peer(), vec![0u8; len], Usage::WRITE_SRC | Usage::READ_DST).unwrap();
    src.write_at(0, &pattern).unwrap();
    c.write(&remote, at as u64, &src, 0, len, Flags::COMPLETION_ON_ERROR, 1).unwrap();
    c.flush(&remote, at as u64, len as u64, FlushType::Persistent, Flags::COMPLETION_ALWAYS, 2).unwrap();
    let wc = c.cq().next_completion(T).unwrap();
    assert!(wc.status.is_success() && wc.op_context == 2, "{wc:?}");
    let mut got = vec![0u8; len];
    mr.read_at(at, &mut got).unwrap();
    assert_eq!(got, pattern, "the remote write landed in the memory");
    src.write_at(0, &vec![0u8; len]).unwrap();
    c.read(&src, 0, &remote, at as u64, len, Flags::COMPLETION_ALWAYS, 3).unwrap();
    assert!(c.cq().next_completion(T).unwrap().status.is_success());
    src.read_at(0, &mut got).unwrap();
    assert_eq!(got, pattern, "read back over RDMA");
    close(c, s);
}

/// Posts example 07's commit as one chain on `conn`: the first `len` bytes
/// of `src` written at `at` of `log` and flushed (`ty`), then `pointer`
/// atomically written at offset 0 of `log` (the commit pointer) and
/// flushed; only the last flush reports, with `op_context`. Its completion
/// is the acknowledgement.
pub fn post_commit<M: rpma::RegMemory + Send + Sync + 'static>(
    conn: &Conn,
    log: &rpma::MrRemote,
    at: u64,
    src: &MrLocal<M>,
    len: usize,
    pointer: u64,
    ty: rpma::FlushType,
    op_context: u64,
) -> rpma::Result<()> {
    use rpma::ops::{AtomicWrite, Flush, Write};
    let quiet = rpma::Flags::COMPLETION_ON_ERROR;
    conn.chain()
        .push(Write::new(log, at, src, 0, len).flags(quiet))?
        .push(Flush::new(log, at, len as u64, ty).flags(quiet))?
        .push(AtomicWrite::new(log, 0, pointer.to_le_bytes()).flags(quiet))?
        .push(Flush::new(log, 0, 8, ty).op_context(op_context))?
        .post()
}

/// Raises this process's open-file limit to `want` (many connections hold
/// several descriptors each; root, as in the harness VM, may raise the hard
/// limit too), or else to its hard limit; returns the limit now.
pub fn raise_fd_limit(want: u64) -> u64 {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: plain syscalls on a live rlimit value.
    #[allow(unsafe_code)]
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 0;
        }
        let mut up = libc::rlimit { rlim_cur: want.max(lim.rlim_cur), rlim_max: want.max(lim.rlim_max) };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &up) != 0 {
            up = libc::rlimit { rlim_cur: lim.rlim_max, rlim_max: lim.rlim_max };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &up) != 0 {
                return lim.rlim_cur;
            }
        }
        up.rlim_cur
    }
}
