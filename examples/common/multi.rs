//! Examples 06 and 06scch: one server, several clients, one poll loop over
//! the endpoint fd, the connections' event fds and their completion fds.

use super::{Args, Res};
use rpma::utils::poll_fds;
use rpma::{AlignedBuf, CommonData, Conn, ConnCfg, ConnEvent, Ep, Flags, MrLocal, Usage};

/// Connections served at once; more are rejected.
pub const MAX_CONN: usize = 4;

struct Slot {
    conn: Conn,
    dst: MrLocal<AlignedBuf>,
    len: usize,
}

fn completion_fd(conn: &Conn, shared: bool) -> Res<std::os::fd::RawFd> {
    Ok(if shared { conn.compl_fd()? } else { conn.cq().fd() })
}

/// Serves `expected` clients (argument 1, default 2): reads each client's
/// message (its descriptor comes in the connection request), prints it and
/// disconnects.
pub fn server(a: &Args, shared: bool) -> Res<()> {
    let expected: usize = a.rest.first().map_or(Ok(2), |s| s.parse())?;
    let peer = super::peer(&a.addr, true)?;
    let ep = Ep::listen(&peer, &a.addr, a.port)?;
    let mut cfg = ConnCfg::new();
    cfg.set_compl_channel(shared);
    let mut slots: Vec<Slot> = Vec::new();
    let mut served = 0;
    while served < expected {
        let mut fds = vec![ep.fd()];
        for s in &slots {
            fds.push(s.conn.event_fd());
            fds.push(completion_fd(&s.conn, shared)?);
        }
        let ready = poll_fds(&fds, Some(super::TIMEOUT))?;
        if !ready.iter().any(|&r| r) {
            return Err("no activity within the timeout".into());
        }
        let mut closed = Vec::new();
        for (i, s) in slots.iter_mut().enumerate() {
            if ready[1 + 2 * i] {
                match s.conn.next_event()? {
                    ConnEvent::Established => {
                        let cd = CommonData::decode(s.conn.private_data())?;
                        s.len = cd.mr.size().saturating_sub(cd.data_offset as u64).min(256) as usize;
                        s.conn.read(
                            &s.dst,
                            0,
                            &cd.mr,
                            cd.data_offset as u64,
                            s.len,
                            Flags::COMPLETION_ALWAYS,
                            i as u64,
                        )?;
                    }
                    ConnEvent::Closed => closed.push(i),
                    ev => return Err(format!("unexpected event {ev}").into()),
                }
            }
            if ready[2 + 2 * i] {
                let cq = if shared {
                    s.conn.wait()?.0
                } else {
                    s.conn.cq().wait()?;
                    s.conn.cq()
                };
                while let Ok(wc) = cq.get_completion() {
                    if !wc.status.is_success() {
                        return Err(format!("read failed: {}", wc.status).into());
                    }
                    let mut buf = vec![0u8; s.len];
                    s.dst.read_at(0, &mut buf)?;
                    println!("server: a client says: {}", super::cstr(&buf));
                    s.conn.disconnect()?;
                }
            }
        }
        for i in closed.into_iter().rev() {
            slots.remove(i);
            served += 1;
        }
        // New connections last: `ready` covers the slots polled above.
        if ready[0] {
            let req = ep.next_conn_req(Some(&cfg))?;
            if slots.len() == MAX_CONN {
                drop(req); // rejected
                println!("server: too many connections, rejected one");
            } else {
                let dst = MrLocal::reg(&peer, AlignedBuf::new(256)?, Usage::READ_DST)?;
                slots.push(Slot { conn: req.connect(&[])?, dst, len: 0 });
            }
        }
    }
    println!("server: served {served} clients");
    Ok(())
}

/// Offers a message naming `seed` (argument 1) and waits to be disconnected.
pub fn client(a: &Args) -> Res<()> {
    let seed: u64 = a.rest.first().map_or(Ok(1), |s| s.parse())?;
    let peer = super::peer(&a.addr, false)?;
    let mut src = MrLocal::reg(&peer, AlignedBuf::new(64)?, Usage::READ_SRC)?;
    let msg = format!("hello from client {seed}\0");
    src.write_at(0, msg.as_bytes())?;
    let conn = super::client_connect(&peer, a, None, &CommonData::encode(0, &src, None), &|_| Ok(()))?;
    super::close_second(conn)?;
    println!("client {seed}: done");
    Ok(())
}
