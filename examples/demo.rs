//! The rpma demo: a server registers memory and hands its descriptor (and its
//! peer configuration) to a client, which decodes them, on a real RDMA device.
//!
//! ```text
//! cargo run --example demo                      # both sides, in a Soft-RoCE VM if needed
//! cargo run --example demo -- server ADDR PORT  # one side, on a host with a device
//! cargo run --example demo -- client ADDR PORT
//! ```
//!
//! For now the descriptors travel over a TCP connection on the RDMA device's
//! address; the connection-based version (descriptors in the RDMA CM private
//! data, then an RDMA read) replaces it when connections land.

use rpma::utils::{get_ibv_context, ContextType};
use rpma::{AlignedBuf, MrLocal, MrRemote, Peer, PeerCfg, Usage};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{exit, Command};
use std::time::{Duration, Instant};

const HELLO: &[u8] = b"Hello from the rpma demo server!";

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn server(addr: &str, port: u16) -> Res<()> {
    let ctx = get_ibv_context(addr, ContextType::Local)?;
    let peer = Peer::new(&ctx)?;
    println!("server: device {} capabilities {:?}", peer.device_name(), peer.capabilities());
    let mut mr = MrLocal::reg(&peer, AlignedBuf::new(4096)?, Usage::READ_SRC | Usage::FLUSH_TYPE_VISIBILITY)?;
    mr.write_at(0, HELLO)?;
    println!("server: registered {} bytes, access {:?}, rkey {:#x}", mr.size(), mr.access(), mr.rkey());

    let listener = TcpListener::bind((addr, port))?;
    let (mut s, from) = listener.accept()?;
    let mut msg = mr.descriptor().to_vec();
    msg.extend_from_slice(&PeerCfg::new().descriptor());
    s.write_all(&msg)?;
    println!("server: sent {} descriptor bytes to {from}", msg.len());
    let mut ack = [0u8; 2];
    s.read_exact(&mut ack)?;
    mr.dereg().map_err(|e| e.error)?;
    println!("server: client acknowledged ({}), region deregistered", String::from_utf8_lossy(&ack));
    Ok(())
}

fn client(addr: &str, port: u16) -> Res<()> {
    let ctx = get_ibv_context(addr, ContextType::Remote)?;
    let peer = Peer::new(&ctx)?;
    let dst = MrLocal::reg(&peer, AlignedBuf::new(4096)?, Usage::READ_DST)?;
    let t0 = Instant::now();
    let mut s = loop {
        match TcpStream::connect((addr, port)) {
            Ok(s) => break s,
            Err(e) if t0.elapsed() < Duration::from_secs(10) => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(format!("cannot reach the server at {addr}:{port}: {e}").into()),
        }
    };
    let mut msg = [0u8; rpma::MR_DESCRIPTOR_SIZE + rpma::PEER_CFG_DESCRIPTOR_SIZE];
    s.read_exact(&mut msg)?;
    let remote = MrRemote::from_descriptor(&msg[..rpma::MR_DESCRIPTOR_SIZE])?;
    let cfg = PeerCfg::from_descriptor(&msg[rpma::MR_DESCRIPTOR_SIZE..])?;
    println!(
        "client: remote region addr {:#x} size {} rkey {:#x} usage {:?} flush types {:?}; direct_write_to_pmem {}",
        remote.addr(),
        remote.size(),
        remote.rkey(),
        remote.usage(),
        remote.flush_type(),
        cfg.direct_write_to_pmem()
    );
    if remote.size() != 4096 || !remote.usage().contains(Usage::READ_SRC) {
        return Err("the descriptor does not describe the server's region".into());
    }
    println!("client: local READ_DST region of {} bytes ready (lkey {:#x})", dst.size(), dst.lkey());
    s.write_all(b"ok")?;
    Ok(())
}

fn main() {
    env_logger::init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let run = |r: Res<()>, who: &str| {
        if let Err(e) = r {
            eprintln!("{who}: error: {e}");
            exit(1);
        }
    };
    match args.first().map(String::as_str) {
        Some(role @ ("server" | "client")) => {
            let (Some(addr), Some(port)) = (args.get(1), args.get(2).and_then(|p| p.parse().ok())) else {
                eprintln!("usage: demo {role} ADDR PORT");
                exit(2);
            };
            run(if role == "server" { server(addr, port) } else { client(addr, port) }, role);
        }
        None => {
            rpma_harness::ensure_device();
            let addr = rpma_harness::addr();
            let port = rpma_harness::port(1).to_string();
            let exe = std::env::current_exe().expect("current executable");
            let mut srv = Command::new(&exe).args(["server", &addr, &port]).spawn().expect("start server");
            let cli = Command::new(&exe).args(["client", &addr, &port]).status().expect("run client");
            let srv = srv.wait().expect("wait for server");
            if !cli.success() || !srv.success() {
                eprintln!("demo failed: client {cli}, server {srv}");
                exit(1);
            }
            println!("demo: ok");
        }
        Some(other) => {
            eprintln!("unknown role {other:?}; usage: demo [server|client ADDR PORT]");
            exit(2);
        }
    }
}
