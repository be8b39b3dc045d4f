//! The extended-context verbs, `static inline` in `infiniband/verbs.h`:
//! each looks its provider op up in the `verbs_context` that precedes an
//! extended `ibv_context` (`verbs_get_ctx_op`).
//!
//! rdma-core marks an extended context with `abi_compat == UINTPTR_MAX`
//! (`__VERBS_ABI_IS_EXTENDED`). (rdma-sys 0.3, which rpma used before, compared
//! it with `u32::MAX`, so on 64-bit hosts every lookup failed; measured on rxe.)

use crate::ffi;
use std::mem::{offset_of, size_of};
use std::os::raw::c_int;

/// `verbs_get_ctx_op(ctx, op)`: the provider's `op`, when the context is an
/// extended one large enough to have it.
macro_rules! ctx_op {
    ($ctx:expr, $op:ident) => {{
        let ctx: *mut ffi::ibv_context = $ctx;
        if (*ctx).abi_compat as usize != usize::MAX {
            None
        } else {
            let vc = (ctx as *mut u8).sub(offset_of!(ffi::verbs_context, context)) as *mut ffi::verbs_context;
            if ((*vc).sz as usize) < size_of::<ffi::verbs_context>() - offset_of!(ffi::verbs_context, $op) {
                None
            } else {
                (*vc).$op
            }
        }
    }};
}

/// `ibv_query_device_ex`, falling back to `ibv_query_device` like the C inline.
///
/// # Safety
/// `ctx` is a live context; `attr` is valid for writes.
pub(crate) unsafe fn ibv_query_device_ex(ctx: *mut ffi::ibv_context, attr: *mut ffi::ibv_device_attr_ex) -> c_int {
    // SAFETY: per the function contract.
    unsafe {
        if let Some(f) = ctx_op!(ctx, query_device_ex) {
            let rc = f(ctx, std::ptr::null(), attr, size_of::<ffi::ibv_device_attr_ex>());
            if rc != libc::EOPNOTSUPP {
                return rc;
            }
        }
        std::ptr::write_bytes(attr, 0, 1);
        ffi::ibv_query_device(ctx, &mut (*attr).orig_attr)
    }
}

/// `ibv_query_port`: the provider's `query_port` of an extended context,
/// else the context's compat entry point into a zeroed attribute (the
/// compat layout is a prefix of `ibv_port_attr`), like the C inline.
///
/// # Safety
/// `ctx` is a live context; `attr` is valid for writes.
pub(crate) unsafe fn ibv_query_port(ctx: *mut ffi::ibv_context, port: u8, attr: *mut ffi::ibv_port_attr) -> c_int {
    // SAFETY: per the function contract.
    unsafe {
        if let Some(f) = ctx_op!(ctx, query_port) {
            return f(ctx, port, attr, size_of::<ffi::ibv_port_attr>());
        }
        std::ptr::write_bytes(attr, 0, 1);
        match (*ctx).ops._compat_query_port {
            Some(f) => f(ctx, port, attr.cast()),
            None => libc::EOPNOTSUPP,
        }
    }
}

/// `ibv_create_cq_ex`; NULL with errno `EOPNOTSUPP` when the provider lacks it.
///
/// # Safety
/// `ctx` is a live context; `attr` is valid.
pub(crate) unsafe fn ibv_create_cq_ex(
    ctx: *mut ffi::ibv_context,
    attr: *mut ffi::ibv_cq_init_attr_ex,
) -> *mut ffi::ibv_cq_ex {
    // SAFETY: per the function contract.
    unsafe {
        match ctx_op!(ctx, create_cq_ex) {
            Some(f) => f(ctx, attr),
            None => {
                *libc::__errno_location() = libc::EOPNOTSUPP;
                std::ptr::null_mut()
            }
        }
    }
}

/// `ibv_create_qp_ex`: plain `ibv_create_qp` when only the PD is set, the
/// provider's op otherwise.
///
/// # Safety
/// `ctx` is a live context; `attr` is valid and references live objects.
pub(crate) unsafe fn ibv_create_qp_ex(
    ctx: *mut ffi::ibv_context,
    attr: *mut ffi::ibv_qp_init_attr_ex,
) -> *mut ffi::ibv_qp {
    // SAFETY: per the function contract; ibv_qp_init_attr is a prefix of
    // ibv_qp_init_attr_ex, as the C inline relies on.
    unsafe {
        if (*attr).comp_mask == ffi::ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD.0 {
            return ffi::ibv_create_qp((*attr).pd, attr.cast());
        }
        match ctx_op!(ctx, create_qp_ex) {
            Some(f) => f(ctx, attr),
            None => {
                *libc::__errno_location() = libc::EOPNOTSUPP;
                std::ptr::null_mut()
            }
        }
    }
}

/// `ibv_advise_mr`: 0 or an errno value (`EOPNOTSUPP` without provider support).
///
/// # Safety
/// `pd` is live; `sge` points to `n` valid entries.
pub(crate) unsafe fn ibv_advise_mr(
    pd: *mut ffi::ibv_pd,
    advice: u32,
    flags: u32,
    sge: *mut ffi::ibv_sge,
    n: u32,
) -> c_int {
    // SAFETY: per the function contract.
    unsafe {
        match ctx_op!((*pd).context, advise_mr) {
            Some(f) => f(pd, advice, flags, sge, n),
            None => libc::EOPNOTSUPP,
        }
    }
}
