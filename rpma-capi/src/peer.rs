//! Devices, peers and peer configurations: `rpma_utils_*`, `rpma_peer_*`,
//! `rpma_peer_cfg_*`.

use std::ffi::{c_char, c_int, c_void};
use std::ptr::NonNull;
use std::sync::Mutex;

use rpma::device::ContextType;
use rpma::{Error, IbvContext, Peer, PeerCfg};

use crate::{cstr, give, guard, null, obj, out, take, Locked};

/// The C type `struct rpma_peer_cfg`.
pub type RpmaPeerCfg = Locked<PeerCfg>;

/// Contexts handed out by `rpma_utils_get_ibv_context`, one per device, kept
/// open for the life of the process: librpma returns librdmacm's context,
/// which librdmacm keeps open, and C code never closes it.
static CONTEXTS: Mutex<Vec<IbvContext>> = Mutex::new(Vec::new());

/// The context C code passes in: the one handed out for that address, or
/// one the caller opened itself (used, never closed: librpma's contract).
fn context_of(ibv_ctx: *mut c_void) -> Result<IbvContext, Error> {
    let Some(p) = NonNull::new(ibv_ctx) else { return Err(null("ibv_ctx")) };
    let known = CONTEXTS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(c) = known.iter().find(|c| c.as_raw() == ibv_ctx) {
        return Ok(c.clone());
    }
    // SAFETY: librpma's contract for rpma_peer_new and
    // rpma_utils_ibv_context_is_odp_capable: a valid, open context that
    // outlives the objects made from it.
    Ok(unsafe { IbvContext::from_raw(p) })
}

/// `rpma_utils_get_ibv_context`.
#[no_mangle]
pub unsafe extern "C" fn rpma_utils_get_ibv_context(
    addr: *const c_char,
    type_: c_int,
    ibv_ctx_ptr: *mut *mut c_void,
) -> c_int {
    guard("rpma_utils_get_ibv_context", || {
        // SAFETY: a NUL-terminated string (librpma's contract).
        let addr = unsafe { cstr(addr, "addr") }?;
        let out_ptr = out(ibv_ctx_ptr, "ibv_ctx_ptr")?;
        let kind = match type_ {
            0 => ContextType::Local,
            1 => ContextType::Remote,
            t => return Err(Error::inval(format!("context type {t} is neither LOCAL (0) nor REMOTE (1)"))),
        };
        let ctx = rpma::device::get_ibv_context(addr, kind)?;
        let raw = ctx.as_raw();
        let mut known = CONTEXTS.lock().unwrap_or_else(|e| e.into_inner());
        if !known.iter().any(|c| c.as_raw() == raw) {
            known.push(ctx);
        }
        // SAFETY: checked non-NULL output.
        unsafe { out_ptr.write(raw) };
        Ok(())
    })
}

/// `rpma_utils_ibv_context_is_odp_capable`.
#[no_mangle]
pub unsafe extern "C" fn rpma_utils_ibv_context_is_odp_capable(
    ibv_ctx: *mut c_void,
    is_odp_capable: *mut c_int,
) -> c_int {
    guard("rpma_utils_ibv_context_is_odp_capable", || {
        let o = out(is_odp_capable, "is_odp_capable")?;
        let ctx = context_of(ibv_ctx)?;
        let yes = rpma::device::is_odp_capable(&ctx)?;
        // SAFETY: checked non-NULL output.
        unsafe { o.write(c_int::from(yes)) };
        Ok(())
    })
}

/// `rpma_utils_conn_event_2str`.
#[no_mangle]
pub extern "C" fn rpma_utils_conn_event_2str(conn_event: c_int) -> *const c_char {
    static TEXTS: std::sync::OnceLock<Vec<(c_int, std::ffi::CString)>> = std::sync::OnceLock::new();
    // -1 ..= 4: librpma's events; 5: one rpma calls unsupported, as any other.
    crate::c_text(&TEXTS, &[-1, 0, 1, 2, 3, 4], 5, rpma::conn::conn_event_value_2str, conn_event)
}

/// `rpma_peer_new`.
#[no_mangle]
pub unsafe extern "C" fn rpma_peer_new(ibv_ctx: *mut c_void, peer_ptr: *mut *mut Peer) -> c_int {
    guard("rpma_peer_new", || {
        let o = out(peer_ptr, "peer_ptr")?;
        let ctx = context_of(ibv_ctx)?;
        let peer = Peer::new(&ctx)?;
        // C librpma checks no usage when posting: the device refuses what a
        // region's access does not grant (docs/capi.md).
        peer.set_usage_checks(false);
        if !peer.is_native_atomic_write_supported() {
            crate::note(
                rpma::logging::LogLevel::Info,
                "rpma_peer_new",
                format_args!("Native atomic write is not supported - ordinary RDMA write will be used instead."),
            );
        }
        // SAFETY: checked non-NULL output.
        unsafe { give(o, peer) };
        Ok(())
    })
}

/// `rpma_peer_delete`: the protection domain is released once the last
/// region, endpoint and connection made from the peer is gone.
#[no_mangle]
pub unsafe extern "C" fn rpma_peer_delete(peer_ptr: *mut *mut Peer) -> c_int {
    // SAFETY: librpma's contract: *peer_ptr is NULL or a peer of this library.
    guard("rpma_peer_delete", || unsafe { take(peer_ptr, "peer_ptr") }.map(drop))
}

/// `rpma_peer_cfg_new`.
#[no_mangle]
pub unsafe extern "C" fn rpma_peer_cfg_new(pcfg_ptr: *mut *mut RpmaPeerCfg) -> c_int {
    guard("rpma_peer_cfg_new", || {
        let o = out(pcfg_ptr, "pcfg_ptr")?;
        // SAFETY: checked non-NULL output.
        unsafe { give(o, Locked::new(PeerCfg::new())) };
        Ok(())
    })
}

/// `rpma_peer_cfg_delete`.
#[no_mangle]
pub unsafe extern "C" fn rpma_peer_cfg_delete(pcfg_ptr: *mut *mut RpmaPeerCfg) -> c_int {
    // SAFETY: librpma's contract: *pcfg_ptr is NULL or a cfg of this library.
    guard("rpma_peer_cfg_delete", || unsafe { take(pcfg_ptr, "pcfg_ptr") }.map(drop))
}

/// `rpma_peer_cfg_set_direct_write_to_pmem`.
#[no_mangle]
pub unsafe extern "C" fn rpma_peer_cfg_set_direct_write_to_pmem(pcfg: *mut RpmaPeerCfg, supported: bool) -> c_int {
    guard("rpma_peer_cfg_set_direct_write_to_pmem", || {
        // SAFETY: librpma's contract.
        unsafe { obj(pcfg, "pcfg") }?.lock().set_direct_write_to_pmem(supported);
        Ok(())
    })
}

/// `rpma_peer_cfg_get_direct_write_to_pmem`.
#[no_mangle]
pub unsafe extern "C" fn rpma_peer_cfg_get_direct_write_to_pmem(
    pcfg: *const RpmaPeerCfg,
    supported: *mut bool,
) -> c_int {
    guard("rpma_peer_cfg_get_direct_write_to_pmem", || {
        // SAFETY: librpma's contract.
        let cfg = unsafe { obj(pcfg, "pcfg") }?;
        let o = out(supported, "supported")?;
        // SAFETY: checked non-NULL output.
        unsafe { o.write(cfg.lock().direct_write_to_pmem()) };
        Ok(())
    })
}

/// `rpma_peer_cfg_get_descriptor`: writes the 1-byte descriptor.
#[no_mangle]
pub unsafe extern "C" fn rpma_peer_cfg_get_descriptor(pcfg: *const RpmaPeerCfg, desc: *mut c_void) -> c_int {
    guard("rpma_peer_cfg_get_descriptor", || {
        // SAFETY: librpma's contract.
        let cfg = unsafe { obj(pcfg, "pcfg") }?;
        let o = out(desc.cast::<u8>(), "desc")?;
        let d = cfg.lock().descriptor();
        // SAFETY: librpma's contract: desc has room for the descriptor's size.
        unsafe { o.copy_from_nonoverlapping(d.as_ptr(), d.len()) };
        Ok(())
    })
}

/// `rpma_peer_cfg_get_descriptor_size`.
#[no_mangle]
pub unsafe extern "C" fn rpma_peer_cfg_get_descriptor_size(pcfg: *const RpmaPeerCfg, desc_size: *mut usize) -> c_int {
    guard("rpma_peer_cfg_get_descriptor_size", || {
        // SAFETY: librpma's contract.
        unsafe { obj(pcfg, "pcfg") }?;
        let o = out(desc_size, "desc_size")?;
        // SAFETY: checked non-NULL output.
        unsafe { o.write(rpma::PEER_CFG_DESCRIPTOR_SIZE) };
        Ok(())
    })
}

/// `rpma_peer_cfg_from_descriptor`.
#[no_mangle]
pub unsafe extern "C" fn rpma_peer_cfg_from_descriptor(
    desc: *const c_void,
    desc_size: usize,
    pcfg_ptr: *mut *mut RpmaPeerCfg,
) -> c_int {
    guard("rpma_peer_cfg_from_descriptor", || {
        // SAFETY: librpma's contract: desc_size readable bytes at desc; only
        // the descriptor's own byte is looked at, as librpma does.
        let bytes = unsafe { bytes(desc, desc_size.min(rpma::PEER_CFG_DESCRIPTOR_SIZE), "desc") }?;
        let o = out(pcfg_ptr, "pcfg_ptr")?;
        let cfg = PeerCfg::from_descriptor(bytes)?;
        // SAFETY: checked non-NULL output.
        unsafe { give(o, Locked::new(cfg)) };
        Ok(())
    })
}

/// `len` bytes at `p`, `RPMA_E_INVAL` when `p` is NULL.
///
/// # Safety
/// A non-NULL `p` points to `len` readable bytes, unchanged for `'a`.
pub(crate) unsafe fn bytes<'a>(p: *const c_void, len: usize, what: &str) -> Result<&'a [u8], Error> {
    if p.is_null() {
        return Err(null(what));
    }
    if len > isize::MAX as usize {
        return Err(Error::inval(format!("{what}: size {len} exceeds isize::MAX")));
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_strings_match_rpma() {
        for v in -2..=6 {
            // SAFETY: a static NUL-terminated string.
            let s = unsafe { std::ffi::CStr::from_ptr(rpma_utils_conn_event_2str(v)) };
            assert_eq!(s.to_str().unwrap(), rpma::conn::conn_event_value_2str(v), "event {v}");
        }
    }
}
