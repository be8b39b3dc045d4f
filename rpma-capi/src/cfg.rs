//! Connection and SRQ configurations: `rpma_conn_cfg_*`, `rpma_srq_cfg_*`.
//! Thread-safe, as librpma's (each is behind a mutex).

use std::ffi::c_int;
use std::time::Duration;

use rpma::{ConnCfg, Error, Srq, SrqCfg};

use crate::{give, guard, obj, out, take, Locked};

/// The C type `struct rpma_conn_cfg`.
pub type RpmaConnCfg = Locked<ConnCfgC>;
/// The C type `struct rpma_srq_cfg`.
pub type RpmaSrqCfg = Locked<SrqCfg>;

/// A connection configuration and the SRQ handle C code set in it
/// (`rpma_conn_cfg_get_srq` returns that very pointer).
#[derive(Debug, Clone)]
pub struct ConnCfgC {
    /// The configuration.
    pub cfg: ConnCfg,
    /// The address of the `rpma_srq` set, 0 for none.
    pub srq: usize,
}

/// The configuration C code passes (NULL: librpma's defaults), copied out
/// so that no lock is held across a blocking call. The SRQ set in it is
/// looked at only here, when a connection request uses the configuration,
/// as C librpma does: `rpma_conn_cfg_set_srq` only stores the pointer.
///
/// # Safety
/// A non-NULL `cfg` is a live configuration of this library; the SRQ set
/// in it (if any) is a live SRQ of this library now (librpma's contract).
pub(crate) unsafe fn conn_cfg_of(cfg: *const RpmaConnCfg) -> Option<ConnCfg> {
    // SAFETY: the caller's contract.
    let c = unsafe { cfg.as_ref() }?;
    let g = c.lock();
    let mut out = g.cfg.clone();
    // SAFETY: the caller's contract: the stored SRQ is live now.
    if let Some(srq) = unsafe { (g.srq as *const Srq).as_ref() } {
        out.set_srq(Some(srq));
    }
    Some(out)
}

/// `rpma_conn_cfg_new`.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_cfg_new(cfg_ptr: *mut *mut RpmaConnCfg) -> c_int {
    guard("rpma_conn_cfg_new", || {
        let o = out(cfg_ptr, "cfg_ptr")?;
        // SAFETY: checked non-NULL output.
        unsafe { give(o, Locked::new(ConnCfgC { cfg: ConnCfg::new(), srq: 0 })) };
        Ok(())
    })
}

/// `rpma_conn_cfg_delete`.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_cfg_delete(cfg_ptr: *mut *mut RpmaConnCfg) -> c_int {
    // SAFETY: librpma's contract: *cfg_ptr is NULL or a cfg of this library.
    guard("rpma_conn_cfg_delete", || unsafe { take(cfg_ptr, "cfg_ptr") }.map(drop))
}

/// A setter and a getter of one field of a configuration type.
macro_rules! cfg_field {
    ($cty:ty, $set:ident, $get:ident, $ty:ty, |$c:ident, $v:ident| $do_set:expr, |$g:ident| $do_get:expr) => {
        #[doc = concat!("`", stringify!($set), "`.")]
        #[no_mangle]
        pub unsafe extern "C" fn $set(cfg: *mut $cty, value: $ty) -> c_int {
            guard(stringify!($set), || {
                // SAFETY: librpma's contract: a live cfg of this library.
                let cfg = unsafe { obj(cfg, "cfg") }?;
                let mut $c = cfg.lock();
                let $v = value;
                $do_set
            })
        }

        #[doc = concat!("`", stringify!($get), "`.")]
        #[no_mangle]
        pub unsafe extern "C" fn $get(cfg: *const $cty, value: *mut $ty) -> c_int {
            guard(stringify!($get), || {
                // SAFETY: librpma's contract: a live cfg of this library.
                let cfg = unsafe { obj(cfg, "cfg") }?;
                let o = out(value, "output")?;
                let $g = cfg.lock();
                // SAFETY: checked non-NULL output.
                unsafe { o.write($do_get) };
                Ok(())
            })
        }
    };
}

cfg_field!(
    RpmaConnCfg,
    rpma_conn_cfg_set_timeout,
    rpma_conn_cfg_get_timeout,
    c_int,
    |c, v| {
        let ms = u64::try_from(v).map_err(|_| Error::inval(format!("timeout {v} ms is negative")))?;
        c.cfg.set_timeout(Duration::from_millis(ms)).map(drop)
    },
    // Whole milliseconds up to i32::MAX: set only as above.
    |c| c_int::try_from(c.cfg.timeout().as_millis()).unwrap_or(c_int::MAX)
);
cfg_field!(
    RpmaConnCfg,
    rpma_conn_cfg_set_cq_size,
    rpma_conn_cfg_get_cq_size,
    u32,
    |c, v| {
        c.cfg.set_cq_size(v);
        Ok(())
    },
    |c| c.cfg.cq_size()
);
cfg_field!(
    RpmaConnCfg,
    rpma_conn_cfg_set_rcq_size,
    rpma_conn_cfg_get_rcq_size,
    u32,
    |c, v| {
        c.cfg.set_rcq_size(v);
        Ok(())
    },
    |c| c.cfg.rcq_size()
);
cfg_field!(
    RpmaConnCfg,
    rpma_conn_cfg_set_sq_size,
    rpma_conn_cfg_get_sq_size,
    u32,
    |c, v| {
        c.cfg.set_sq_size(v);
        Ok(())
    },
    |c| c.cfg.sq_size()
);
cfg_field!(
    RpmaConnCfg,
    rpma_conn_cfg_set_rq_size,
    rpma_conn_cfg_get_rq_size,
    u32,
    |c, v| {
        c.cfg.set_rq_size(v);
        Ok(())
    },
    |c| c.cfg.rq_size()
);
cfg_field!(
    RpmaConnCfg,
    rpma_conn_cfg_set_compl_channel,
    rpma_conn_cfg_get_compl_channel,
    bool,
    |c, v| {
        c.cfg.set_compl_channel(v);
        Ok(())
    },
    |c| c.cfg.compl_channel()
);
cfg_field!(
    RpmaSrqCfg,
    rpma_srq_cfg_set_rq_size,
    rpma_srq_cfg_get_rq_size,
    u32,
    |c, v| {
        c.set_rq_size(v);
        Ok(())
    },
    |c| c.rq_size()
);
cfg_field!(
    RpmaSrqCfg,
    rpma_srq_cfg_set_rcq_size,
    rpma_srq_cfg_get_rcq_size,
    u32,
    |c, v| {
        c.set_rcq_size(v);
        Ok(())
    },
    |c| c.rcq_size()
);

/// `rpma_conn_cfg_set_srq`: stores the pointer, as C librpma does, without
/// looking at the SRQ (it may not exist yet); a connection request that
/// uses the configuration reads it then. NULL is `RPMA_E_INVAL`, as in C
/// librpma.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_cfg_set_srq(cfg: *mut RpmaConnCfg, srq: *mut Srq) -> c_int {
    guard("rpma_conn_cfg_set_srq", || {
        // SAFETY: librpma's contract: a live cfg of this library.
        let cfg = unsafe { obj(cfg, "cfg") }?;
        if srq.is_null() {
            return Err(rpma::Error::inval("rpma_conn_cfg_set_srq: srq is NULL"));
        }
        cfg.lock().srq = srq as usize;
        Ok(())
    })
}

/// `rpma_conn_cfg_get_srq`: the SRQ pointer set, or NULL.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_cfg_get_srq(cfg: *const RpmaConnCfg, srq_ptr: *mut *mut Srq) -> c_int {
    guard("rpma_conn_cfg_get_srq", || {
        // SAFETY: librpma's contract: a live cfg of this library.
        let cfg = unsafe { obj(cfg, "cfg") }?;
        let o = out(srq_ptr, "srq_ptr")?;
        // SAFETY: checked non-NULL output.
        unsafe { o.write(cfg.lock().srq as *mut Srq) };
        Ok(())
    })
}

/// `rpma_srq_cfg_new`.
#[no_mangle]
pub unsafe extern "C" fn rpma_srq_cfg_new(cfg_ptr: *mut *mut RpmaSrqCfg) -> c_int {
    guard("rpma_srq_cfg_new", || {
        let o = out(cfg_ptr, "cfg_ptr")?;
        // SAFETY: checked non-NULL output.
        unsafe { give(o, Locked::new(SrqCfg::new())) };
        Ok(())
    })
}

/// `rpma_srq_cfg_delete`.
#[no_mangle]
pub unsafe extern "C" fn rpma_srq_cfg_delete(cfg_ptr: *mut *mut RpmaSrqCfg) -> c_int {
    // SAFETY: librpma's contract: *cfg_ptr is NULL or a cfg of this library.
    guard("rpma_srq_cfg_delete", || unsafe { take(cfg_ptr, "cfg_ptr") }.map(drop))
}
