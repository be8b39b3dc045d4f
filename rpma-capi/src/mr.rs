//! Memory regions: `rpma_mr_*` (local) and `rpma_mr_remote_*`.

use std::ffi::{c_int, c_void};

use rpma::mr::{Advice, AdviseFlags};
use rpma::{Error, MrLocal, MrRemote, Peer, RawMemory, Usage};

use crate::peer::bytes;
use crate::{give, guard, obj, out, take};

/// The C type `struct rpma_mr_local`: memory C owns, registered.
pub type RpmaMrLocal = MrLocal<RawMemory>;

/// The eight `RPMA_MR_USAGE_*` bits of librpma 1.3.
const C_USAGES: u16 = 0xff;

/// `rpma_mr_reg`.
///
/// The memory stays C's: rpma never frees it. As in librpma, the caller
/// keeps the region registered until the operations using it complete:
/// `rpma_mr_dereg` deregisters it, and the device then fails an operation
/// still using it; only a receive posted with `rpma_conn_req_recv` holds
/// the region (`rpma_mr_dereg` refuses with `RPMA_E_AGAIN` until it
/// completes).
#[no_mangle]
pub unsafe extern "C" fn rpma_mr_reg(
    peer: *mut Peer,
    ptr: *mut c_void,
    size: usize,
    usage: c_int,
    mr_ptr: *mut *mut RpmaMrLocal,
) -> c_int {
    guard("rpma_mr_reg", || {
        // SAFETY: librpma's contract: a live peer of this library.
        let peer = unsafe { obj(peer, "peer") }?;
        let o = out(mr_ptr, "mr_ptr")?;
        if ptr.is_null() {
            return Err(crate::null("ptr"));
        }
        if size == 0 {
            return Err(Error::inval("size is 0"));
        }
        let bits = u16::try_from(usage).ok().filter(|u| *u != 0 && u & !C_USAGES == 0).ok_or_else(|| {
            Error::inval(format!("usage {usage:#x} is 0 or has bits outside the RPMA_MR_USAGE_* flags (0xff)"))
        })?;
        // SAFETY: librpma's contract for rpma_mr_reg: `size` bytes at `ptr`
        // stay allocated until rpma_mr_dereg succeeds, and C accesses them
        // only as librpma allows (the device and the peer may write them).
        let mem = unsafe { RawMemory::new(ptr.cast(), size) };
        let mr = MrLocal::reg(peer, mem, Usage::from_bits_truncate(bits))?;
        // SAFETY: checked non-NULL output.
        unsafe { give(o, mr) };
        Ok(())
    })
}

/// `rpma_mr_dereg`. On failure `*mr_ptr` is left as it is, still
/// registered and usable (when `ibv_dereg_mr` fails the device may still
/// reach the memory).
#[no_mangle]
pub unsafe extern "C" fn rpma_mr_dereg(mr_ptr: *mut *mut RpmaMrLocal) -> c_int {
    guard("rpma_mr_dereg", || {
        // SAFETY: librpma's contract: *mr_ptr is NULL or a region of this library.
        let Some(mr) = unsafe { take(mr_ptr, "mr_ptr") }? else { return Ok(()) };
        match mr.dereg() {
            Ok(_memory_stays_cs) => Ok(()),
            Err(e) => {
                let error = e.error;
                // SAFETY: mr_ptr was checked non-NULL by `take`; the region
                // goes back where it came from.
                unsafe { give(mr_ptr, e.mr) };
                Err(error)
            }
        }
    })
}

/// `rpma_mr_get_descriptor`: writes librpma's 21-byte descriptor.
#[no_mangle]
pub unsafe extern "C" fn rpma_mr_get_descriptor(mr: *const RpmaMrLocal, desc: *mut c_void) -> c_int {
    guard("rpma_mr_get_descriptor", || {
        // SAFETY: librpma's contract: a live region of this library.
        let mr = unsafe { obj(mr, "mr") }?;
        let o = out(desc.cast::<u8>(), "desc")?;
        let d = mr.descriptor();
        // SAFETY: librpma's contract: desc has room for the descriptor size.
        unsafe { o.copy_from_nonoverlapping(d.as_ptr(), d.len()) };
        Ok(())
    })
}

/// `rpma_mr_get_descriptor_size`.
#[no_mangle]
pub unsafe extern "C" fn rpma_mr_get_descriptor_size(mr: *const RpmaMrLocal, desc_size: *mut usize) -> c_int {
    guard("rpma_mr_get_descriptor_size", || {
        // SAFETY: librpma's contract: a live region of this library.
        unsafe { obj(mr, "mr") }?;
        let o = out(desc_size, "desc_size")?;
        // SAFETY: checked non-NULL output.
        unsafe { o.write(rpma::MR_DESCRIPTOR_SIZE) };
        Ok(())
    })
}

/// `rpma_mr_get_ptr`.
#[no_mangle]
pub unsafe extern "C" fn rpma_mr_get_ptr(mr: *const RpmaMrLocal, ptr: *mut *mut c_void) -> c_int {
    guard("rpma_mr_get_ptr", || {
        // SAFETY: librpma's contract: a live region of this library.
        let mr = unsafe { obj(mr, "mr") }?;
        let o = out(ptr, "ptr")?;
        // SAFETY: checked non-NULL output.
        unsafe { o.write(mr.ptr().cast_mut().cast()) };
        Ok(())
    })
}

/// `rpma_mr_get_size`.
#[no_mangle]
pub unsafe extern "C" fn rpma_mr_get_size(mr: *const RpmaMrLocal, size: *mut usize) -> c_int {
    guard("rpma_mr_get_size", || {
        // SAFETY: librpma's contract: a live region of this library.
        let mr = unsafe { obj(mr, "mr") }?;
        let o = out(size, "size")?;
        // SAFETY: checked non-NULL output.
        unsafe { o.write(mr.size()) };
        Ok(())
    })
}

/// `rpma_mr_advise`: the range is checked against the region here (librpma
/// leaves that to the provider).
#[no_mangle]
pub unsafe extern "C" fn rpma_mr_advise(
    mr: *mut RpmaMrLocal,
    offset: usize,
    len: usize,
    advice: c_int,
    flags: u32,
) -> c_int {
    guard("rpma_mr_advise", || {
        // SAFETY: librpma's contract: a live region of this library.
        let mr = unsafe { obj(mr, "mr") }?;
        let advice = match advice {
            0 => Advice::Prefetch,
            1 => Advice::PrefetchWrite,
            2 => Advice::PrefetchNoFault,
            a => return Err(Error::inval(format!("advice {a} is not an IBV_ADVISE_MR_ADVICE_* value (0..=2)"))),
        };
        let flags = AdviseFlags::from_bits(flags)
            .ok_or_else(|| Error::inval(format!("flags {flags:#x} has bits outside IBV_ADVISE_MR_FLAG_FLUSH")))?;
        mr.advise(offset, len, advice, flags)
    })
}

/// `rpma_mr_remote_from_descriptor`.
#[no_mangle]
pub unsafe extern "C" fn rpma_mr_remote_from_descriptor(
    desc: *const c_void,
    desc_size: usize,
    mr_ptr: *mut *mut MrRemote,
) -> c_int {
    guard("rpma_mr_remote_from_descriptor", || {
        // SAFETY: librpma's contract: desc_size readable bytes at desc. Only
        // the bytes a descriptor can have are looked at (librpma reads 21
        // whatever desc_size says), so a generous desc_size makes no slice
        // past them.
        let d = unsafe { bytes(desc, desc_size.min(rpma::MR_DESCRIPTOR_EXT_SIZE), "desc") }?;
        let o = out(mr_ptr, "mr_ptr")?;
        let mr = MrRemote::from_descriptor(d)?;
        // SAFETY: checked non-NULL output.
        unsafe { give(o, mr) };
        Ok(())
    })
}

/// `rpma_mr_remote_get_size`.
#[no_mangle]
pub unsafe extern "C" fn rpma_mr_remote_get_size(mr: *const MrRemote, size: *mut usize) -> c_int {
    guard("rpma_mr_remote_get_size", || {
        // SAFETY: librpma's contract: a live remote region of this library.
        let mr = unsafe { obj(mr, "mr") }?;
        let o = out(size, "size")?;
        let s = usize::try_from(mr.size())
            .map_err(|_| Error::inval(format!("the remote size {} does not fit size_t", mr.size())))?;
        // SAFETY: checked non-NULL output.
        unsafe { o.write(s) };
        Ok(())
    })
}

/// `rpma_mr_remote_get_flush_type`: the region's `RPMA_MR_USAGE_FLUSH_TYPE_*`
/// bits, as librpma returns them.
#[no_mangle]
pub unsafe extern "C" fn rpma_mr_remote_get_flush_type(mr: *const MrRemote, flush_type: *mut c_int) -> c_int {
    guard("rpma_mr_remote_get_flush_type", || {
        // SAFETY: librpma's contract: a live remote region of this library.
        let mr = unsafe { obj(mr, "mr") }?;
        let o = out(flush_type, "flush_type")?;
        // SAFETY: checked non-NULL output.
        unsafe { o.write(c_int::from(mr.flush_type().bits())) };
        Ok(())
    })
}

/// `rpma_mr_remote_delete`.
#[no_mangle]
pub unsafe extern "C" fn rpma_mr_remote_delete(mr_ptr: *mut *mut MrRemote) -> c_int {
    // SAFETY: librpma's contract: *mr_ptr is NULL or a remote region of this library.
    guard("rpma_mr_remote_delete", || unsafe { take(mr_ptr, "mr_ptr") }.map(drop))
}
