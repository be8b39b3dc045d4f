//! Helpers shared by the examples (not part of the library).
//!
//! Every example runs as `NAME server ADDR PORT [ARGS]` or
//! `NAME client ADDR PORT [ARGS]`. Without arguments it runs both sides on a
//! real RDMA device (booting the Soft-RoCE VM when the host has none) with
//! the example's default arguments.
#![allow(dead_code)]

use rpma::utils::{get_ibv_context, ContextType};
use rpma::{Completion, Conn, ConnCfg, ConnEvent, ConnReq, Cq, Ep, Peer, WcStatus};
use std::process::{exit, Command};
use std::time::{Duration, Instant};

pub type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// How long the examples wait for anything.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// The parsed command line.
pub struct Args {
    pub addr: String,
    pub port: u16,
    pub rest: Vec<String>,
}

/// Dispatches to `server` or `client`; with no arguments runs both, the
/// server with `server_args` and the client with `client_args`.
pub fn main(server: fn(&Args) -> Res<()>, client: fn(&Args) -> Res<()>, server_args: &[&str], client_args: &[&str]) {
    main_multi(server, client, server_args, &[client_args])
}

/// As [`main`], running one client per entry of `clients` at the same time.
pub fn main_multi(
    server: fn(&Args) -> Res<()>,
    client: fn(&Args) -> Res<()>,
    server_args: &[&str],
    clients: &[&[&str]],
) {
    let _ = env_logger::builder().try_init();
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let role = argv.first().map(String::as_str);
    match role {
        Some(r @ ("server" | "client")) => {
            let (Some(addr), Some(port)) = (argv.get(1), argv.get(2).and_then(|p| p.parse().ok())) else {
                eprintln!("usage: {r} ADDR PORT [ARGS...]");
                exit(2);
            };
            let a = Args { addr: addr.clone(), port, rest: argv[3..].to_vec() };
            let res = if r == "server" { server(&a) } else { client(&a) };
            if let Err(e) = res {
                eprintln!("{r}: error: {e}");
                exit(1);
            }
        }
        None => {
            rpma_harness::ensure_device();
            let addr = rpma_harness::addr();
            let port = rpma_harness::port(2).to_string();
            let exe = std::env::current_exe().expect("current executable");
            let mut srv = Command::new(&exe).args(["server", &addr, &port]).args(server_args).spawn().expect("server");
            let mut cli: Vec<_> = clients
                .iter()
                .map(|c| Command::new(&exe).args(["client", &addr, &port]).args(*c).spawn().expect("client"))
                .collect();
            let cli: Vec<_> = cli.iter_mut().map(|c| c.wait().expect("client")).collect();
            let srv = srv.wait().expect("server");
            if !cli.iter().all(|c| c.success()) || !srv.success() {
                eprintln!("failed: clients {cli:?}, server {srv}");
                exit(1);
            }
        }
        Some(other) => {
            eprintln!("unknown role {other:?}: use server|client ADDR PORT [ARGS...], or no arguments");
            exit(2);
        }
    }
}

/// A peer on the device that owns (server) or reaches (client) `addr`.
pub fn peer(addr: &str, local: bool) -> Res<Peer> {
    let ctx = get_ibv_context(addr, if local { ContextType::Local } else { ContextType::Remote })?;
    Ok(Peer::new(&ctx)?)
}

/// Connects to the server, retrying while it is not listening yet, and waits
/// for ESTABLISHED. `prepare` runs on each request before connecting (e.g.
/// to post receives).
pub fn client_connect(
    peer: &Peer,
    a: &Args,
    cfg: Option<&ConnCfg>,
    pdata: &[u8],
    prepare: &dyn Fn(&ConnReq) -> rpma::Result<()>,
) -> Res<Conn> {
    let t0 = Instant::now();
    loop {
        let req = ConnReq::new(peer, &a.addr, a.port, cfg)?;
        prepare(&req)?;
        let conn = req.connect(pdata)?;
        match conn.next_event_timeout(TIMEOUT)? {
            ConnEvent::Established => return Ok(conn),
            ConnEvent::Rejected if t0.elapsed() < TIMEOUT => std::thread::sleep(Duration::from_millis(100)),
            ev => return Err(format!("connecting failed: {ev}").into()),
        }
    }
}

/// Takes the next connection request and accepts it with `pdata`, after
/// `prepare`; waits for ESTABLISHED.
pub fn server_accept(
    ep: &Ep,
    cfg: Option<&ConnCfg>,
    pdata: &[u8],
    prepare: &dyn Fn(&ConnReq) -> rpma::Result<()>,
) -> Res<Conn> {
    let req = ep.next_conn_req_timeout(cfg, TIMEOUT)?;
    prepare(&req)?;
    let conn = req.connect(pdata)?;
    match conn.next_event_timeout(TIMEOUT)? {
        ConnEvent::Established => Ok(conn),
        ev => Err(format!("accepting failed: {ev}").into()),
    }
}

/// Closes first: disconnect, then wait for CLOSED (the client's part in
/// librpma's examples).
pub fn close_first(conn: Conn) -> Res<()> {
    conn.disconnect()?;
    expect_closed(&conn)
}

/// Closes second: wait for the other side's disconnect, then disconnect (the
/// server's part in librpma's examples).
pub fn close_second(conn: Conn) -> Res<()> {
    expect_closed(&conn)?;
    conn.disconnect()?;
    Ok(())
}

fn expect_closed(conn: &Conn) -> Res<()> {
    match conn.next_event_timeout(TIMEOUT)? {
        ConnEvent::Closed => Ok(()),
        ev => Err(format!("expected the connection to close, got {ev}").into()),
    }
}

/// Waits for the next completion on `cq` and checks it succeeded.
pub fn wait_ok(cq: &Cq) -> Res<Completion> {
    let wc = cq.next_completion(TIMEOUT)?;
    if wc.status != WcStatus::SUCCESS {
        return Err(format!("operation {} ({:?}) failed: {}", wc.op_context, wc.op, wc.status).into());
    }
    Ok(wc)
}

/// A NUL-terminated string in `buf` (as the C examples store them).
pub fn cstr(buf: &[u8]) -> String {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Waits for the next completion of operation kind `op` on `cq`, checking
/// every completion seen on the way succeeded. Other send-side completions
/// on the way are reaped; a receive on the way is an error, never dropped
/// (see [`wait_all`]).
pub fn wait_for(cq: &Cq, op: rpma::CompletionOp) -> Res<Completion> {
    Ok(wait_all(cq, &[op])?.remove(0))
}

/// Waits until a completion of each kind in `ops` arrived on `cq`, in
/// whatever order they come, and returns them in the order of `ops`. A CQ
/// that gets both send and receive completions does not order them: the
/// receive of the peer's answer can complete before the send that asked
/// for it (rxe does it), so a sender waiting for both must take them in
/// any order, as librpma's examples do. Other send-side completions on the
/// way are reaped; a receive that nobody waits for is an error (dropping it
/// would leave a later wait for it to time out).
pub fn wait_all(cq: &Cq, ops: &[rpma::CompletionOp]) -> Res<Vec<Completion>> {
    use rpma::CompletionOp::{Recv, RecvRdmaWithImm};
    let mut got: Vec<Option<Completion>> = vec![None; ops.len()];
    while got.iter().any(Option::is_none) {
        let wc = wait_ok(cq)?;
        match ops.iter().zip(got.iter_mut()).find(|(op, g)| **op == wc.op && g.is_none()) {
            Some((_, g)) => *g = Some(wc),
            None if matches!(wc.op, Recv | RecvRdmaWithImm) => {
                return Err(format!(
                    "a receive ({:?}, context {}) completed while waiting for {ops:?}",
                    wc.op, wc.op_context
                )
                .into())
            }
            None => {}
        }
    }
    Ok(got.into_iter().flatten().collect())
}

/// A registered region of `len` bytes: a file mapping when `path` is given
/// (librpma's examples' `pmem-path`), else page-aligned DRAM.
pub enum Memory {
    Dram(rpma::MrLocal<rpma::AlignedBuf>),
    File(rpma::MrLocal<rpma::MappedFile>),
}

impl Memory {
    pub fn reg(peer: &Peer, path: Option<&str>, len: usize, usage: rpma::Usage) -> Res<Memory> {
        Ok(match path {
            Some(p) => Memory::File(rpma::MrLocal::reg(peer, rpma::MappedFile::open(p, len)?, usage)?),
            None => Memory::Dram(rpma::MrLocal::reg(peer, rpma::AlignedBuf::new(len)?, usage)?),
        })
    }
    pub fn is_file(&self) -> bool {
        matches!(self, Memory::File(_))
    }
    pub fn read_at(&self, off: usize, dst: &mut [u8]) -> rpma::Result<()> {
        match self {
            Memory::Dram(m) => m.read_at(off, dst),
            Memory::File(m) => m.read_at(off, dst),
        }
    }
    pub fn write_at(&mut self, off: usize, src: &[u8]) -> rpma::Result<()> {
        match self {
            Memory::Dram(m) => m.write_at(off, src),
            Memory::File(m) => m.write_at(off, src),
        }
    }
    pub fn common_data(
        &self,
        data_offset: u16,
        cfg: Option<&rpma::PeerCfg>,
    ) -> [u8; rpma::common_data::COMMON_DATA_SIZE] {
        match self {
            Memory::Dram(m) => rpma::CommonData::encode(data_offset, m, cfg),
            Memory::File(m) => rpma::CommonData::encode(data_offset, m, cfg),
        }
    }
}
pub mod gpspm;
pub mod multi;
pub mod pingpong;
