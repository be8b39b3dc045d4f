//! Helpers shared by the examples (not part of the library).
//!
//! Every example runs as `NAME server ADDR PORT [ARGS]` or
//! `NAME client ADDR PORT [ARGS]`, or `NAME both ADDR PORT`: both sides as
//! two processes of this program, with the example's default arguments
//! (ADDR: an address of an RDMA device).
#![allow(dead_code)]

use rpma::device::{get_ibv_context, ContextType};
use rpma::{Completion, Conn, ConnCfg, ConnEvent, ConnReq, Cq, Ep, Peer, WcStatus};
use std::os::fd::AsFd;
use std::process::{exit, Command};
use std::time::{Duration, Instant};

pub type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// How long the examples wait for anything: 10 s, or `RPMA_EXAMPLE_TIMEOUT`
/// seconds (the memcheck tests give programs slowed by valgrind longer).
pub fn timeout() -> Duration {
    let secs = std::env::var("RPMA_EXAMPLE_TIMEOUT").ok().and_then(|s| s.parse().ok()).unwrap_or(10);
    Duration::from_secs(secs)
}

/// Set in the environment of the two processes `both` starts.
pub const BOTH: &str = "RPMA_EXAMPLE_BOTH";

/// The parsed command line.
pub struct Args {
    pub addr: String,
    pub port: u16,
    pub rest: Vec<String>,
}

/// Dispatches to `server` or `client`; `both` runs both, the server with
/// `server_args` and the client with `client_args`.
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
    let usage = "usage: server|client ADDR PORT [ARGS...], or both ADDR PORT (ADDR: an address of an RDMA device)";
    let role = argv.first().map(String::as_str);
    let (Some(addr), Some(port)) = (argv.get(1), argv.get(2).and_then(|p| p.parse::<u16>().ok())) else {
        eprintln!("{usage}");
        exit(2);
    };
    match role {
        Some(r @ ("server" | "client")) => {
            let a = Args { addr: addr.clone(), port, rest: argv[3..].to_vec() };
            let res = if r == "server" { server(&a) } else { client(&a) };
            if let Err(e) = res {
                eprintln!("{r}: error: {e}");
                exit(1);
            }
        }
        Some("both") => {
            let port = port.to_string();
            let exe = std::env::current_exe().expect("current executable");
            let mut srv = Command::new(&exe)
                .env(BOTH, "1")
                .args(["server", addr, &port])
                .args(server_args)
                .spawn()
                .expect("server");
            let mut cli: Vec<_> = clients
                .iter()
                .map(|c| {
                    Command::new(&exe).env(BOTH, "1").args(["client", addr, &port]).args(*c).spawn().expect("client")
                })
                .collect();
            let cli: Vec<_> = cli.iter_mut().map(|c| c.wait().expect("client")).collect();
            let srv = srv.wait().expect("server");
            if !cli.iter().all(|c| c.success()) || !srv.success() {
                eprintln!("failed: clients {cli:?}, server {srv}");
                exit(1);
            }
        }
        _ => {
            eprintln!("{usage}");
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
        match conn.next_event_timeout(timeout())? {
            ConnEvent::Established => return Ok(conn),
            ConnEvent::Rejected if t0.elapsed() < timeout() => std::thread::sleep(Duration::from_millis(100)),
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
    let req = ep.next_conn_req_timeout(cfg, timeout())?;
    prepare(&req)?;
    let conn = req.connect(pdata)?;
    match conn.next_event_timeout(timeout())? {
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
    match conn.next_event_timeout(timeout())? {
        ConnEvent::Closed => Ok(()),
        ev => Err(format!("expected the connection to close, got {ev}").into()),
    }
}

/// Waits for the next completion on `cq` and checks it succeeded.
pub fn wait_ok(cq: &Cq) -> Res<Completion> {
    let wc = cq.next_completion(timeout())?;
    if wc.status != WcStatus::SUCCESS {
        return Err(format!("operation {} ({:?}) failed: {}", wc.op_context, wc.op, wc.status).into());
    }
    Ok(wc)
}

/// Waits for the next completion on `cq` (checking it succeeded) or for
/// the connection to close, whichever comes first: `None` when the other
/// side closed. A server waiting for its client's next message uses it:
/// librpma's clients send their last message (DONE) unsignaled and
/// disconnect at once, and a disconnect flushes what the client's send
/// queue has not sent yet, so the server can see the close instead of the
/// message (librpma's own server then waits forever). Waits on `cq`'s
/// channel, or on the connection's shared one when it has one.
pub fn completion_or_close(conn: &Conn, cq: &Cq) -> Res<Option<Completion>> {
    let shared = conn.compl_fd().ok();
    let fds = [shared.unwrap_or_else(|| cq.as_fd()), conn.as_fd()];
    let deadline = Instant::now() + timeout();
    loop {
        match cq.get_completion()? {
            Some(wc) if wc.status != WcStatus::SUCCESS => {
                return Err(format!("operation {} ({:?}) failed: {}", wc.op_context, wc.op, wc.status).into())
            }
            Some(wc) => return Ok(Some(wc)),
            None => {}
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(rpma::Error::NoCompletion.into());
        }
        let ready = rpma::utils::poll_fds(&fds, Some(left))?;
        if ready[1] {
            return match conn.next_event()? {
                ConnEvent::Closed => Ok(None),
                ev => Err(format!("unexpected connection event while waiting for a completion: {ev}").into()),
            };
        }
        if ready[0] {
            match shared {
                Some(_) => drop(conn.wait()?),
                None => cq.wait()?,
            }
        }
    }
}

/// Ends a connection the other side already closed (after
/// [`completion_or_close`] returned `None`): disconnects this side too.
pub fn closed_by_peer(conn: Conn) -> Res<()> {
    conn.disconnect()?;
    Ok(())
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
/// (librpma's examples' `pmem-path`), else page-aligned DRAM; rpma's
/// [`rpma::Memory`] under one registration. Derefs to the region
/// (`size`, `read_at`, `write_at`, `persist`).
pub struct Memory {
    pub mr: rpma::MrLocal<rpma::Memory>,
    file: bool,
}

impl std::ops::Deref for Memory {
    type Target = rpma::MrLocal<rpma::Memory>;
    fn deref(&self) -> &Self::Target {
        &self.mr
    }
}

impl std::ops::DerefMut for Memory {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.mr
    }
}

impl Memory {
    pub fn reg(peer: &Peer, path: Option<&str>, len: usize, usage: rpma::Usage) -> Res<Memory> {
        let mem = match path {
            Some(p) => {
                // A device DAX maps whole aligned units (2 MiB by default).
                let dax =
                    std::fs::metadata(p).is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_char_device(&m.file_type()));
                let len = if dax { len.next_multiple_of(2 << 20) } else { len };
                // SAFETY: the pmem-path is the example's own file (or
                // device), which nothing else truncates while the example
                // runs (as librpma's examples assume of theirs).
                rpma::Memory::Mapped(unsafe { rpma::MappedFile::open(p, len)? })
            }
            None => rpma::Memory::Dram(rpma::AlignedBuf::new(len)?),
        };
        Ok(Memory { mr: rpma::MrLocal::reg(peer, mem, usage)?, file: path.is_some() })
    }
    pub fn is_file(&self) -> bool {
        self.file
    }
    pub fn common_data(
        &self,
        data_offset: u16,
        cfg: Option<&rpma::PeerCfg>,
    ) -> [u8; rpma::common_data::COMMON_DATA_SIZE] {
        rpma::CommonData::encode(data_offset, &self.mr, cfg)
    }
}

/// librpma's examples' signature, with its NUL (`SIGNATURE_STR`,
/// `SIGNATURE_LEN` 17): it marks a persistent region's contents as valid.
pub const SIGNATURE: &[u8] = b"RPMA_EXAMPLE_SIG\0";

/// The memory of librpma's examples 03, 04, 05 and 09, and where their data
/// starts in it (`struct common_mem`).
///
/// With a `pmem-path` (`common_pmem_map_file_with_signature_check`): the file,
/// mapped whole and grown to at least `offset + 17 + size` bytes, with the
/// signature at `offset` and the data at `data_offset = offset + 17`. When
/// the signature is missing, `init` prepares the data and the signature is
/// written after it. Unlike librpma's, any file is taken (librpma's refuses
/// one that is not real PMem); it is made durable with `MappedFile::persist`.
/// A device DAX (`/dev/daxX.Y`) is mapped in whole 2 MiB units.
///
/// Without: `size` bytes of page-aligned DRAM, `data_offset` 0, prepared by
/// `init`; as librpma's, this says so on stderr.
pub fn example_memory(
    peer: &Peer,
    path: Option<&str>,
    offset: usize,
    size: usize,
    usage: rpma::Usage,
    init: &dyn Fn(&mut Memory, usize) -> Res<()>,
) -> Res<(Memory, usize)> {
    let Some(path) = path else {
        eprintln!("No <pmem-path> provided. Using DRAM instead.");
        let mut mem = Memory::reg(peer, None, size, usage)?;
        init(&mut mem, 0)?;
        return Ok((mem, 0));
    };
    let data_offset = offset.checked_add(SIGNATURE.len()).ok_or("the pmem-offset is too big")?;
    let min = data_offset.checked_add(size).ok_or("the pmem-offset is too big")?;
    let len = match std::fs::metadata(path) {
        Ok(m) => usize::try_from(m.len()).unwrap_or(usize::MAX).max(min),
        Err(_) => min, // created by the mapping
    };
    let mut mem = Memory::reg(peer, Some(path), len, usage)?;
    let mut sig = [0u8; SIGNATURE.len()];
    mem.read_at(offset, &mut sig)?;
    if sig != SIGNATURE {
        init(&mut mem, data_offset)?;
        mem.persist()?;
        mem.write_at(offset, SIGNATURE)?;
        mem.persist()?;
    }
    Ok((mem, data_offset))
}

/// librpma's examples' `struct hello_t`: a `u32` language (0 English, 1
/// Spanish) at 0, then a 1024-byte NUL-terminated string at 4.
pub mod hello {
    use super::{Memory, Res};

    /// `HELLO_STR_SIZE`.
    pub const HELLO_STR_SIZE: usize = 1024;
    /// `HELLO_STR_OFFSET`: the string follows the language.
    pub const HELLO_STR_OFFSET: usize = 4;
    /// `HELLO_T_SIZE`.
    pub const HELLO_T_SIZE: usize = HELLO_STR_OFFSET + HELLO_STR_SIZE;
    const TEXT: [&str; 2] = ["Hello world!", "¡Hola Mundo!"];

    /// `write_hello_str`: the greeting in language `lang` at `at`, the rest
    /// of the string zeroed.
    pub fn write(mem: &mut Memory, at: usize, lang: u32) -> Res<()> {
        let lang = lang % TEXT.len() as u32;
        let mut t = [0u8; HELLO_T_SIZE];
        t[..HELLO_STR_OFFSET].copy_from_slice(&lang.to_le_bytes());
        let s = TEXT[lang as usize].as_bytes();
        t[HELLO_STR_OFFSET..HELLO_STR_OFFSET + s.len()].copy_from_slice(s);
        Ok(mem.write_at(at, &t)?)
    }

    /// The language and the string of the `hello_t` at `at`.
    pub fn read(mem: &Memory, at: usize) -> Res<(u32, String)> {
        let mut t = [0u8; HELLO_T_SIZE];
        mem.read_at(at, &mut t)?;
        let lang = u32::from_le_bytes(t[..HELLO_STR_OFFSET].try_into()?);
        Ok((lang, super::cstr(&t[HELLO_STR_OFFSET..])))
    }

    /// The client's write of librpma's 04, 05 and 09: the 1024-byte string
    /// of the `hello_t` at `at` in `src` to the server's region at its
    /// `data_offset` (completion on error only), after checking the region
    /// has room for it; when it has not, the client closes first and fails
    /// with librpma's line, `too_small` being its beginning. Returns the
    /// remote offset written.
    pub fn write_string(
        conn: &rpma::Conn,
        src: &Memory,
        at: usize,
        cd: &rpma::CommonData,
        too_small: &str,
    ) -> Res<u64> {
        let dst_offset = cd.data_offset as u64;
        let room = cd.mr.size().saturating_sub(dst_offset);
        if room < HELLO_STR_SIZE as u64 {
            conn.disconnect()?;
            super::expect_closed(conn)?;
            return Err(
                format!("{too_small} for writing the data of the assumed size ({room} < {HELLO_STR_SIZE})").into()
            );
        }
        conn.write(
            &cd.mr,
            dst_offset,
            &src.mr,
            at + HELLO_STR_OFFSET,
            HELLO_STR_SIZE,
            rpma::Flags::COMPLETION_ON_ERROR,
            0,
        )?;
        Ok(dst_offset)
    }

    /// `translate`: says "translating...", switches the `hello_t` at `at` to
    /// the other language (made durable when `mem` is a file) and returns
    /// the new string.
    pub fn translate(mem: &mut Memory, at: usize) -> Res<String> {
        println!("translating...");
        let (lang, _) = read(mem, at)?;
        write(mem, at, lang.wrapping_add(1))?;
        mem.persist()?;
        Ok(read(mem, at)?.1)
    }
}
pub mod gpspm;
pub mod multi;
pub mod pingpong;
