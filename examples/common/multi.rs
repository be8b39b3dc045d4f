//! Examples 06 and 06scch (librpma's): one server, up to 10 clients at
//! once, one poll loop over the endpoint fd, the connections' event fds and
//! their completion fds (with 06scch, one completion channel a connection).
//!
//! Each client picks a name with its seed, as librpma's does (glibc's
//! `srand(seed); rand()`), and offers it in a 32-byte region whose
//! descriptor comes with its connection request. The server reads the 32
//! bytes into the client's slot of one 320-byte region, prints the name and
//! disconnects; the client then closes second. As librpma's, the server
//! ends after 15 s without any event, saying "Server timed out." on stderr.

use super::{Args, Res};
use rpma::utils::poll_fds;
use rpma::{AlignedBuf, CommonData, CompletionOp, Conn, ConnCfg, ConnEvent, Ep, Error, Flags, MrLocal, Usage};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;

/// Clients served at once (`CLIENT_MAX`); more are rejected.
pub const CLIENT_MAX: usize = 10;
/// A client's name region and its slot in the server's (`MAX_NAME_SIZE`).
pub const MAX_NAME_SIZE: usize = 32;
/// The server ends after this long without an event (`TIMEOUT_15S`).
const IDLE: Duration = Duration::from_secs(15);

const NAMES: [&str; 13] = [
    "Andy", "Chet", "Derek", "Janek", "Kacper", "Lukasz", "Oksana", "Pawel", "Piotr", "Tomasz", "Xiang", "Xiaoran",
    "Xiaoyan",
];

/// glibc's first `rand()` after `srand(seed)`: its default TYPE_3 additive
/// feedback generator (random_r.c), so that a seed picks the same name as
/// librpma's C client.
fn glibc_first_rand(seed: u32) -> u32 {
    let mut r: Vec<u32> = Vec::with_capacity(345);
    let seed = seed.max(1); // srandom_r replaces 0 by 1
    r.push(seed);
    let mut word = seed as i32 as i64;
    for _ in 1..31 {
        // word = 16807 * word % 2147483647, as glibc computes it (Schrage)
        let (hi, lo) = (word / 127_773, word % 127_773);
        word = 16_807 * lo - 2_836 * hi;
        if word < 0 {
            word += 2_147_483_647;
        }
        r.push(word as u32);
    }
    for i in 31..34 {
        r.push(r[i - 31]);
    }
    // srandom_r discards 310 outputs; rand() returns the next one.
    for i in 34..=344 {
        r.push(r[i - 31].wrapping_add(r[i - 3]));
    }
    r[344] >> 1
}

/// The name librpma's client picks with `seed` (`srand(seed % UINT_MAX)`).
pub fn name_for(seed: u64) -> &'static str {
    let seed = (seed % u64::from(u32::MAX)) as u32;
    NAMES[glibc_first_rand(seed) as usize % NAMES.len()]
}

fn completion_fd(conn: &Conn, shared: bool) -> Res<BorrowedFd<'_>> {
    Ok(if shared { conn.compl_fd()? } else { conn.cq().as_fd() })
}

/// Starts disconnecting client `i` (the server goes on whatever happens).
fn disconnect(i: usize, conn: &Conn) {
    if let Err(e) = conn.disconnect() {
        eprintln!("[{i}] rpma_conn_disconnect() failed: {e}");
    }
}

/// A connection event of client `i`. Returns whether the connection is gone.
fn handle_event(i: usize, conn: &Conn, dst: &MrLocal<AlignedBuf>) -> Res<bool> {
    match conn.next_event() {
        Ok(ConnEvent::Established) => {
            let pdata = conn.private_data();
            let cd = if pdata.len() < rpma::common_data::COMMON_DATA_SIZE {
                Err(format!(
                    "[{i}] received connection's private data is too small ({} < {})",
                    pdata.len(),
                    rpma::common_data::COMMON_DATA_SIZE
                ))
            } else {
                CommonData::decode(pdata).map_err(|e| format!("[{i}] {e}"))
            };
            // Read the name: 32 bytes from the client's offset 0 into slot i.
            let read = cd.and_then(|cd| {
                conn.read(dst, MAX_NAME_SIZE * i, &cd.mr, 0, MAX_NAME_SIZE, Flags::COMPLETION_ALWAYS, i as u64)
                    .map_err(|e| format!("[{i}] rpma_read() failed: {e}"))
            });
            if let Err(e) = read {
                eprintln!("{e}");
                disconnect(i, conn);
            }
            Ok(false)
        }
        Err(Error::NoEvent) => Ok(false),
        // CLOSED (or any other event): the client is gone.
        Ok(_) => Ok(true),
        Err(e) => {
            eprintln!("[{i}] rpma_conn_next_event() failed: {e}");
            disconnect(i, conn);
            Ok(true)
        }
    }
}

/// A completion of client `i`: prints its name. No matter what, the client
/// is then disconnected.
fn handle_completion(i: usize, conn: &Conn, dst: &MrLocal<AlignedBuf>, shared: bool) -> Res<()> {
    let cq = if shared { conn.wait().map(|(cq, _)| cq) } else { conn.cq().wait().map(|_| conn.cq()) };
    match cq.and_then(|cq| cq.get_completion()) {
        Ok(None) => return Ok(()), // woken up with nothing: go on
        Err(e) => eprintln!("[{i}] waiting for the completion failed: {e}"),
        Ok(Some(wc)) if !wc.status.is_success() => eprintln!("[{i}] rpma_read() failed: {}", wc.status),
        Ok(Some(wc)) if wc.op != CompletionOp::Read => {
            eprintln!("[{i}] received unexpected wc.opcode value ({:?} != Read)", wc.op)
        }
        Ok(Some(_)) => {
            let mut name = [0u8; MAX_NAME_SIZE];
            dst.read_at(MAX_NAME_SIZE * i, &mut name)?;
            println!("- {}", super::cstr(&name));
        }
    }
    disconnect(i, conn);
    Ok(())
}

/// Serves clients until 15 s pass without an event. A Rust extension:
/// an optional argument N ends the server once N clients have come and gone.
pub fn server(a: &Args, shared: bool) -> Res<()> {
    let until: Option<usize> = a.rest.first().map(|s| s.parse()).transpose()?;
    let peer = super::peer(&a.addr, true)?;
    let dst = MrLocal::reg(&peer, AlignedBuf::new(MAX_NAME_SIZE * CLIENT_MAX)?, Usage::READ_DST)?;
    let ep = Ep::listen(&peer, &a.addr, a.port)?;
    let mut cfg = ConnCfg::new();
    cfg.set_compl_channel(shared);
    let mut clients: Vec<Option<Conn>> = (0..CLIENT_MAX).map(|_| None).collect();
    let mut gone = 0;
    println!("Today I have got in touch with:");
    while until.is_none_or(|n| gone < n) {
        // The endpoint, then each client's event fd and completion fd.
        let mut fds = vec![ep.as_fd()];
        let mut polled = Vec::new();
        for (i, c) in clients.iter().enumerate() {
            if let Some(conn) = c {
                fds.push(conn.as_fd());
                fds.push(completion_fd(conn, shared)?);
                polled.push(i);
            }
        }
        let ready = poll_fds(&fds, Some(IDLE))?;
        if !ready.iter().any(|&r| r) {
            eprintln!("Server timed out.");
            break;
        }
        for (k, &i) in polled.iter().enumerate() {
            let Some(conn) = &clients[i] else { continue };
            if ready[2 + 2 * k] {
                handle_completion(i, conn, &dst, shared)?;
            }
            if ready[1 + 2 * k] && handle_event(i, conn, &dst)? {
                clients[i] = None;
                gone += 1;
            }
        }
        if ready[0] {
            let req = ep.next_conn_req(Some(&cfg))?;
            match clients.iter().position(Option::is_none) {
                // Accepted; ESTABLISHED arrives on the connection's event fd.
                Some(i) => match req.connect(&[]) {
                    Ok(conn) => clients[i] = Some(conn),
                    Err(e) => eprintln!("[{i}] accepting the connection failed: {e}"),
                },
                None => drop(req), // no free slot: rejected
            }
        }
    }
    // Disconnect the remaining clients.
    for (i, c) in clients.iter().enumerate() {
        if let Some(conn) = c {
            disconnect(i, conn);
        }
    }
    Ok(())
}

/// Offers the name picked with `seed` and waits for the server to
/// disconnect.
pub fn client(a: &Args) -> Res<()> {
    let seed: u64 = a.rest.first().ok_or("usage: client ADDR PORT <seed>")?.parse()?;
    let peer = super::peer(&a.addr, false)?;
    let name = name_for(seed);
    let src = MrLocal::reg(&peer, AlignedBuf::new(MAX_NAME_SIZE)?, Usage::READ_SRC)?;
    src.write_at(0, name.as_bytes())?;
    println!("My names is: {name}");
    let conn = super::client_connect(&peer, a, None, &CommonData::encode(0, &src, None), &|_| Ok(()))?;
    super::close_second(conn)
}
