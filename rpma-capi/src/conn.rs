//! Endpoints, connection requests, connections, completion queues and
//! shared receive queues: `rpma_ep_*`, `rpma_conn_req_*`, `rpma_conn_*`,
//! `rpma_cq_*`, `rpma_srq_*` (the data path is in `data`).

use std::ffi::{c_char, c_int, c_void};

use rpma::{Conn, ConnReq, Cq, Ep, Error, Peer, Srq};

use crate::cfg::{conn_cfg_of, RpmaConnCfg, RpmaSrqCfg};
use crate::mr::RpmaMrLocal;
use crate::{cstr, give, guard, guard_hot, note, obj, out, take};
use rpma::logging::LogLevel;
use rpma::ConnEvent;

/// `struct rpma_conn_private_data`.
#[repr(C)]
#[derive(Debug)]
pub struct RpmaConnPrivateData {
    /// The bytes.
    pub ptr: *mut c_void,
    /// Their count.
    pub len: u8,
}

/// `struct ibv_wc` (libibverbs; 48 bytes, checked by tests/c/capi_abi.c):
/// rpma's, written by [`rpma::Cq::get_ibv_wc`].
pub use rpma::cq::IbvWc;

/// A port given as a string (librpma passes it to `rdma_getaddrinfo`;
/// rpma takes the number).
fn port_of(port: *const c_char) -> Result<u16, Error> {
    // SAFETY: librpma's contract: a NUL-terminated string.
    let s = unsafe { cstr(port, "port") }?;
    s.trim().parse().map_err(|_| Error::inval(format!("port {s:?} is not a number in 0..=65535")))
}

/// Writes `data` as a `struct rpma_conn_private_data` (NULL/0 when empty).
fn private_data_out(data: &[u8], pdata: *mut RpmaConnPrivateData) -> Result<(), Error> {
    let o = out(pdata, "pdata")?;
    let len = u8::try_from(data.len())
        .map_err(|_| Error::inval(format!("the private data ({} bytes) exceeds 255 bytes", data.len())))?;
    let ptr = if data.is_empty() { std::ptr::null_mut() } else { data.as_ptr().cast_mut().cast() };
    // SAFETY: checked non-NULL output.
    unsafe { o.write(RpmaConnPrivateData { ptr, len }) };
    Ok(())
}

/// `rpma_ep_listen`.
#[no_mangle]
pub unsafe extern "C" fn rpma_ep_listen(
    peer: *mut Peer,
    addr: *const c_char,
    port: *const c_char,
    ep_ptr: *mut *mut Ep,
) -> c_int {
    guard("rpma_ep_listen", || {
        // SAFETY: librpma's contract: a live peer, a NUL-terminated address.
        let (peer, addr) = unsafe { (obj(peer, "peer")?, cstr(addr, "addr")?) };
        let port = port_of(port)?;
        let o = out(ep_ptr, "ep_ptr")?;
        let ep = Ep::listen(peer, addr, port)?;
        note(LogLevel::Notice, "rpma_ep_listen", format_args!("Waiting for incoming connection on {addr}:{port}"));
        // SAFETY: checked non-NULL output.
        unsafe { give(o, ep) };
        Ok(())
    })
}

/// `rpma_ep_shutdown`.
#[no_mangle]
pub unsafe extern "C" fn rpma_ep_shutdown(ep_ptr: *mut *mut Ep) -> c_int {
    guard("rpma_ep_shutdown", || {
        // SAFETY: librpma's contract: *ep_ptr is NULL or an endpoint of this library.
        if let Some(ep) = unsafe { take(ep_ptr, "ep_ptr") }? {
            ep.shutdown();
        }
        Ok(())
    })
}

/// `rpma_ep_get_fd`.
#[no_mangle]
pub unsafe extern "C" fn rpma_ep_get_fd(ep: *const Ep, fd: *mut c_int) -> c_int {
    guard("rpma_ep_get_fd", || {
        // SAFETY: librpma's contract: a live endpoint of this library.
        let ep = unsafe { obj(ep, "ep") }?;
        let o = out(fd, "fd")?;
        // SAFETY: checked non-NULL output.
        unsafe { o.write(ep.fd()) };
        Ok(())
    })
}

/// `rpma_ep_next_conn_req`.
#[no_mangle]
pub unsafe extern "C" fn rpma_ep_next_conn_req(
    ep: *mut Ep,
    cfg: *const RpmaConnCfg,
    req_ptr: *mut *mut ConnReq,
) -> c_int {
    guard("rpma_ep_next_conn_req", || {
        // SAFETY: librpma's contract: a live endpoint, NULL or a live cfg.
        let (ep, cfg) = unsafe { (obj(ep, "ep")?, conn_cfg_of(cfg)) };
        let o = out(req_ptr, "req_ptr")?;
        let req = ep.next_conn_req(cfg.as_ref())?;
        // SAFETY: checked non-NULL output.
        unsafe { give(o, req) };
        Ok(())
    })
}

/// `rpma_conn_req_new`.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_req_new(
    peer: *mut Peer,
    addr: *const c_char,
    port: *const c_char,
    cfg: *const RpmaConnCfg,
    req_ptr: *mut *mut ConnReq,
) -> c_int {
    guard("rpma_conn_req_new", || {
        // SAFETY: librpma's contract: a live peer, a NUL-terminated address,
        // NULL or a live cfg.
        let (peer, addr, cfg) = unsafe { (obj(peer, "peer")?, cstr(addr, "addr")?, conn_cfg_of(cfg)) };
        let port = port_of(port)?;
        let o = out(req_ptr, "req_ptr")?;
        note(LogLevel::Notice, "rpma_conn_req_new", format_args!("Requesting a connection to {addr}:{port}"));
        let req = ConnReq::new(peer, addr, port, cfg.as_ref())?;
        // SAFETY: checked non-NULL output.
        unsafe { give(o, req) };
        Ok(())
    })
}

/// `rpma_conn_req_delete`: an incoming request is rejected.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_req_delete(req_ptr: *mut *mut ConnReq) -> c_int {
    // SAFETY: librpma's contract: *req_ptr is NULL or a request of this library.
    guard("rpma_conn_req_delete", || unsafe { take(req_ptr, "req_ptr") }.map(drop))
}

/// `rpma_conn_req_connect`: consumes `*req_ptr` (set to NULL) on success
/// and on failure, as librpma does.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_req_connect(
    req_ptr: *mut *mut ConnReq,
    pdata: *const RpmaConnPrivateData,
    conn_ptr: *mut *mut Conn,
) -> c_int {
    guard("rpma_conn_req_connect", || {
        // SAFETY: librpma's contract: *req_ptr is NULL or a request of this library.
        let Some(req) = unsafe { take(req_ptr, "req_ptr") }? else { return Err(crate::null("*req_ptr")) };
        let o = out(conn_ptr, "conn_ptr")?;
        // SAFETY: librpma's contract: NULL or a valid private-data struct.
        let data: &[u8] = match unsafe { pdata.as_ref() } {
            None => &[],
            Some(p) if p.ptr.is_null() || p.len == 0 => {
                return Err(Error::inval("pdata has a NULL ptr or a 0 len (pass NULL for no private data)"))
            }
            // SAFETY: librpma's contract: len readable bytes at ptr.
            Some(p) => unsafe { std::slice::from_raw_parts(p.ptr.cast::<u8>(), usize::from(p.len)) },
        };
        let conn = req.connect(data)?;
        // SAFETY: checked non-NULL output.
        unsafe { give(o, conn) };
        Ok(())
    })
}

/// `rpma_conn_req_recv`.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_req_recv(
    req: *mut ConnReq,
    dst: *mut RpmaMrLocal,
    offset: usize,
    len: usize,
    op_context: *const c_void,
) -> c_int {
    guard("rpma_conn_req_recv", || {
        // SAFETY: librpma's contract: live objects of this library.
        let (req, dst) = unsafe { (obj(req, "req")?, obj(dst, "dst")?) };
        req.recv(dst, offset, len, op_context as u64)
    })
}

/// `rpma_conn_req_get_private_data`.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_req_get_private_data(req: *const ConnReq, pdata: *mut RpmaConnPrivateData) -> c_int {
    guard("rpma_conn_req_get_private_data", || {
        // SAFETY: librpma's contract: a live request of this library.
        let req = unsafe { obj(req, "req") }?;
        private_data_out(req.private_data(), pdata)
    })
}

/// A getter of one value of a connection.
macro_rules! conn_get {
    ($name:ident, $ty:ty, |$c:ident| $get:expr) => {
        #[doc = concat!("`", stringify!($name), "`.")]
        #[no_mangle]
        pub unsafe extern "C" fn $name(conn: *const Conn, value: *mut $ty) -> c_int {
            guard(stringify!($name), || {
                // SAFETY: librpma's contract: a live connection of this library.
                let $c = unsafe { obj(conn, "conn") }?;
                let o = out(value, "output")?;
                let v: $ty = $get;
                // SAFETY: checked non-NULL output.
                unsafe { o.write(v) };
                Ok(())
            })
        }
    };
}

conn_get!(rpma_conn_get_event_fd, c_int, |c| c.event_fd());
conn_get!(rpma_conn_get_qp_num, u32, |c| c.qp_num());
conn_get!(rpma_conn_get_compl_fd, c_int, |c| std::os::fd::AsRawFd::as_raw_fd(&c.compl_fd()?));
conn_get!(rpma_conn_get_cq, *mut Cq, |c| (c.cq() as *const Cq).cast_mut());
conn_get!(rpma_conn_get_rcq, *mut Cq, |c| c.rcq().map_or(std::ptr::null_mut(), |r| (r as *const Cq).cast_mut()));

/// `rpma_conn_next_event`.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_next_event(conn: *mut Conn, event: *mut c_int) -> c_int {
    guard("rpma_conn_next_event", || {
        // SAFETY: librpma's contract: a live connection of this library.
        let conn = unsafe { obj(conn, "conn") }?;
        let o = out(event, "event")?;
        let ev = conn.next_event()?;
        if ev != ConnEvent::Undefined {
            note(LogLevel::Notice, "rpma_conn_next_event", format_args!("{ev}"));
        }
        // SAFETY: checked non-NULL output.
        unsafe { o.write(ev as c_int) };
        Ok(())
    })
}

/// `rpma_conn_get_private_data`.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_get_private_data(conn: *const Conn, pdata: *mut RpmaConnPrivateData) -> c_int {
    guard("rpma_conn_get_private_data", || {
        // SAFETY: librpma's contract: a live connection of this library.
        let conn = unsafe { obj(conn, "conn") }?;
        private_data_out(conn.private_data(), pdata)
    })
}

/// `rpma_conn_apply_remote_peer_cfg`.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_apply_remote_peer_cfg(
    conn: *mut Conn,
    pcfg: *const crate::peer::RpmaPeerCfg,
) -> c_int {
    guard("rpma_conn_apply_remote_peer_cfg", || {
        // SAFETY: librpma's contract: live objects of this library.
        let (conn, pcfg) = unsafe { (obj(conn, "conn")?, obj(pcfg, "pcfg")?) };
        let cfg = *pcfg.lock();
        conn.apply_remote_peer_cfg(&cfg);
        Ok(())
    })
}

/// `rpma_conn_wait` (`flags` is reserved, as in librpma; `is_rcq` may be
/// NULL).
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_wait(conn: *mut Conn, _flags: c_int, cq: *mut *mut Cq, is_rcq: *mut bool) -> c_int {
    guard_hot("rpma_conn_wait", || {
        // SAFETY: librpma's contract: a live connection of this library.
        let conn = unsafe { obj(conn, "conn") }?;
        let o_cq = out(cq, "cq")?;
        let (got, rcq) = conn.wait()?;
        // SAFETY: checked non-NULL output; is_rcq is NULL or valid for a write.
        unsafe {
            o_cq.write((got as *const Cq).cast_mut());
            if !is_rcq.is_null() {
                is_rcq.write(rcq);
            }
        }
        Ok(())
    })
}

/// `rpma_conn_disconnect`.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_disconnect(conn: *mut Conn) -> c_int {
    guard("rpma_conn_disconnect", || {
        // SAFETY: librpma's contract: a live connection of this library.
        let conn = unsafe { obj(conn, "conn") }?;
        note(LogLevel::Notice, "rpma_conn_disconnect", format_args!("Requesting for disconnection"));
        conn.disconnect()
    })
}

/// `rpma_conn_delete`: operations still in flight keep their regions
/// registered until the QP is destroyed.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_delete(conn_ptr: *mut *mut Conn) -> c_int {
    // SAFETY: librpma's contract: *conn_ptr is NULL or a connection of this library.
    guard("rpma_conn_delete", || unsafe { take(conn_ptr, "conn_ptr") }.map(drop))
}

/// `rpma_cq_get_fd`.
#[no_mangle]
pub unsafe extern "C" fn rpma_cq_get_fd(cq: *const Cq, fd: *mut c_int) -> c_int {
    guard("rpma_cq_get_fd", || {
        // SAFETY: librpma's contract: a CQ of a live connection or SRQ.
        let cq = unsafe { obj(cq, "cq") }?;
        let o = out(fd, "fd")?;
        // SAFETY: checked non-NULL output.
        unsafe { o.write(cq.fd()) };
        Ok(())
    })
}

/// `rpma_cq_wait`.
#[no_mangle]
pub unsafe extern "C" fn rpma_cq_wait(cq: *mut Cq) -> c_int {
    // SAFETY: librpma's contract: a CQ of a live connection or SRQ.
    guard_hot("rpma_cq_wait", || unsafe { obj(cq, "cq") }?.wait())
}

/// `rpma_cq_get_wc`. `num_entries_got` may be NULL only when `num_entries`
/// is 1.
#[no_mangle]
pub unsafe extern "C" fn rpma_cq_get_wc(
    cq: *mut Cq,
    num_entries: c_int,
    wc: *mut IbvWc,
    num_entries_got: *mut c_int,
) -> c_int {
    guard_hot("rpma_cq_get_wc", || {
        // SAFETY: librpma's contract: a CQ of a live connection or SRQ.
        let cq = unsafe { obj(cq, "cq") }?;
        let wc = out(wc, "wc")?;
        // The common single poll first: one comparison.
        let want = match num_entries {
            1 => 1,
            n if n < 1 => return Err(Error::inval(format!("num_entries {n} is below 1"))),
            _ if num_entries_got.is_null() => {
                return Err(Error::inval("num_entries_got is NULL while num_entries is not 1"))
            }
            n => n as usize,
        };
        // SAFETY: librpma's contract: room for num_entries completions at
        // wc, which get_ibv_wc only writes (MaybeUninit: not read).
        let out = unsafe { std::slice::from_raw_parts_mut(wc.cast::<std::mem::MaybeUninit<IbvWc>>(), want) };
        let n = cq.get_ibv_wc(out)?;
        if n == 0 {
            return Err(Error::NoCompletion); // librpma's code for "none yet"
        }
        if !num_entries_got.is_null() {
            // SAFETY: non-NULL output; n <= num_entries fits c_int.
            unsafe { num_entries_got.write(n as c_int) };
        }
        Ok(())
    })
}

/// `rpma_srq_new`.
#[no_mangle]
pub unsafe extern "C" fn rpma_srq_new(peer: *mut Peer, cfg: *mut RpmaSrqCfg, srq_ptr: *mut *mut Srq) -> c_int {
    guard("rpma_srq_new", || {
        // SAFETY: librpma's contract: a live peer, NULL or a live cfg.
        let (peer, cfg) = unsafe { (obj(peer, "peer")?, cfg.as_ref().map(|c| *c.lock())) };
        let o = out(srq_ptr, "srq_ptr")?;
        let srq = Srq::new(peer, cfg.as_ref())?;
        // SAFETY: checked non-NULL output.
        unsafe { give(o, srq) };
        Ok(())
    })
}

/// `rpma_srq_delete`.
#[no_mangle]
pub unsafe extern "C" fn rpma_srq_delete(srq_ptr: *mut *mut Srq) -> c_int {
    // SAFETY: librpma's contract: *srq_ptr is NULL or an SRQ of this library.
    guard("rpma_srq_delete", || unsafe { take(srq_ptr, "srq_ptr") }.map(drop))
}

/// `rpma_srq_recv`.
#[no_mangle]
pub unsafe extern "C" fn rpma_srq_recv(
    srq: *mut Srq,
    dst: *mut RpmaMrLocal,
    offset: usize,
    len: usize,
    op_context: *const c_void,
) -> c_int {
    guard_hot("rpma_srq_recv", || {
        // SAFETY: librpma's contract: live objects of this library.
        let (srq, dst) = unsafe { (obj(srq, "srq")?, obj(dst, "dst")?) };
        let op = rpma::ops::Recv::new(dst, offset, len).op_context(op_context as u64);
        // SAFETY: librpma's contract for the data path, as in data.rs'
        // `post`: the C caller keeps the region until the completion.
        srq.post(unsafe { rpma::ops::Unheld::new(op) })
    })
}

/// `rpma_srq_get_rcq`: NULL when the SRQ has no receive CQ.
#[no_mangle]
pub unsafe extern "C" fn rpma_srq_get_rcq(srq: *const Srq, rcq_ptr: *mut *mut Cq) -> c_int {
    guard("rpma_srq_get_rcq", || {
        // SAFETY: librpma's contract: a live SRQ of this library.
        let srq = unsafe { obj(srq, "srq") }?;
        let o = out(rcq_ptr, "rcq_ptr")?;
        // SAFETY: checked non-NULL output.
        unsafe { o.write(srq.rcq().map_or(std::ptr::null_mut(), |r| (r as *const Cq).cast_mut())) };
        Ok(())
    })
}
