//! The data path: `rpma_read`, `rpma_write`, `rpma_write_with_imm`,
//! `rpma_atomic_write`, `rpma_flush`, `rpma_send`, `rpma_send_with_imm`,
//! `rpma_recv`.
//!
//! Each posts rpma's operation checked, with librpma's contract for the
//! memory ([`rpma::ops::Unheld`]): offsets and lengths are checked against
//! both regions before anything is posted (librpma leaves that to the NIC),
//! usages are left to the device as librpma does (the peers this library
//! makes check none: docs/capi.md), and, as in librpma, the caller keeps
//! the local region registered until the device completes the operation
//! (deregistering it earlier makes the device fail the operation; the
//! memory stays C's either way). `op_context` travels as all 64 bits: in
//! the work request ID when it fits in 56 bits (any user-space pointer),
//! else in the connection's book. Zero-byte operations with NULL regions
//! and zero offsets and length are allowed, as in librpma.

use std::ffi::{c_char, c_int, c_void};
use std::sync::OnceLock;

use rpma::ops::Sg;
use rpma::ops::{AtomicWrite, Flush, Read, ReadSg, Recv, RecvSg, Send, SendSg, Write, WriteSg};
use rpma::{Conn, Error, Flags, FlushType, MrRemote, RawMemory};

use crate::mr::RpmaMrLocal;
use crate::{guard_hot, null, obj};

/// librpma's `RPMA_F_COMPLETION_ON_ERROR | RPMA_F_COMPLETION_ALWAYS`.
const C_FLAGS: c_int = 3;

#[inline]
fn flags_of(flags: c_int) -> Result<Flags, Error> {
    if flags & !C_FLAGS != 0 {
        return Err(bad_flags(flags));
    }
    // 0 is refused by the operation itself (no completion kind chosen).
    Ok(Flags::from_bits_truncate(flags as u32))
}

#[cold]
fn bad_flags(flags: c_int) -> Error {
    Error::inval(format!("flags {flags:#x} has bits outside RPMA_F_COMPLETION_ALWAYS (0x3)"))
}

/// An empty remote region for librpma's zero-byte read and write.
fn no_remote() -> &'static MrRemote {
    static NONE: OnceLock<MrRemote> = OnceLock::new();
    NONE.get_or_init(|| {
        // addr 0, size 0, rkey 0, usages READ_SRC | WRITE_DST.
        let mut d = [0u8; rpma::MR_DESCRIPTOR_SIZE];
        d[20] = 0b1001;
        MrRemote::from_descriptor(&d).unwrap_or_else(|e| unreachable!("a fixed descriptor decodes: {e}"))
    })
}

/// Librpma's zero-byte form: both regions NULL, all offsets and `len` 0.
#[inline]
fn zero_byte(local: *const RpmaMrLocal, remote: *const MrRemote, offs: [usize; 2], len: usize) -> bool {
    local.is_null() && remote.is_null() && offs == [0, 0] && len == 0
}

const NO_SG: &[Sg<'static, RawMemory>] = &[];

/// Posts `op` checked, with librpma's contract for its memory.
#[inline(always)]
fn post(conn: &Conn, op: impl rpma::ops::Operation) -> Result<(), Error> {
    // SAFETY: librpma's contract for the data path: the C caller keeps the
    // operation's local region registered, and its memory allocated and
    // untouched, until the completion is reaped (or the connection is
    // deleted). The memory is C's, never rpma's (`rpma_mr_reg`).
    conn.post(unsafe { rpma::ops::Unheld::new(op) })
}

/// `rpma_read`: rpma's `Read`, checked. Both ranges are checked against
/// their regions (else `RPMA_E_INVAL`, nothing posted).
#[no_mangle]
pub unsafe extern "C" fn rpma_read(
    conn: *mut Conn,
    dst: *mut RpmaMrLocal,
    dst_offset: usize,
    src: *const MrRemote,
    src_offset: usize,
    len: usize,
    flags: c_int,
    op_context: *const c_void,
) -> c_int {
    guard_hot("rpma_read", || {
        // SAFETY: librpma's contract: a live connection of this library.
        let conn = unsafe { obj(conn, "conn") }?;
        let flags = flags_of(flags)?;
        let ctx = op_context as u64;
        if zero_byte(dst, src, [dst_offset, src_offset], len) {
            return post(conn, ReadSg::new(NO_SG, no_remote(), 0).flags(flags).op_context(ctx));
        }
        // SAFETY: librpma's contract: live regions of this library.
        let (dst, src) = unsafe { (obj(dst, "dst")?, obj(src, "src")?) };
        post(conn, Read::new(dst, dst_offset, src, src_offset as u64, len).flags(flags).op_context(ctx))
    })
}

/// `rpma_write`: rpma's `Write`, checked. Both ranges are checked against
/// their regions (else `RPMA_E_INVAL`, nothing posted).
#[no_mangle]
pub unsafe extern "C" fn rpma_write(
    conn: *mut Conn,
    dst: *mut MrRemote,
    dst_offset: usize,
    src: *const RpmaMrLocal,
    src_offset: usize,
    len: usize,
    flags: c_int,
    op_context: *const c_void,
) -> c_int {
    guard_hot("rpma_write", || {
        // SAFETY: librpma's contract: a live connection of this library.
        let conn = unsafe { obj(conn, "conn") }?;
        let flags = flags_of(flags)?;
        let ctx = op_context as u64;
        if zero_byte(src, dst, [dst_offset, src_offset], len) {
            return post(conn, WriteSg::new(no_remote(), 0, NO_SG).flags(flags).op_context(ctx));
        }
        // SAFETY: librpma's contract: live regions of this library.
        let (dst, src) = unsafe { (obj(dst, "dst")?, obj(src, "src")?) };
        post(conn, Write::new(dst, dst_offset as u64, src, src_offset, len).flags(flags).op_context(ctx))
    })
}

/// `rpma_write_with_imm`: as `rpma_write`; `imm` is posted in network
/// order, as librpma does (the receiver reads it with `ntohl`).
#[no_mangle]
pub unsafe extern "C" fn rpma_write_with_imm(
    conn: *mut Conn,
    dst: *mut MrRemote,
    dst_offset: usize,
    src: *const RpmaMrLocal,
    src_offset: usize,
    len: usize,
    flags: c_int,
    imm: u32,
    op_context: *const c_void,
) -> c_int {
    guard_hot("rpma_write_with_imm", || {
        // SAFETY: librpma's contract: live objects of this library.
        let (conn, dst, src) = unsafe { (obj(conn, "conn")?, obj(dst, "dst")?, obj(src, "src")?) };
        let op = Write::new(dst, dst_offset as u64, src, src_offset, len).imm(imm);
        post(conn, op.flags(flags_of(flags)?).op_context(op_context as u64))
    })
}

/// `rpma_atomic_write`: `dst_offset` must be 8-byte aligned and the 8 bytes
/// inside the region (else `RPMA_E_INVAL`); native `IBV_WR_ATOMIC_WRITE`
/// where the device and libibverbs have it, else a fenced inline write.
#[no_mangle]
pub unsafe extern "C" fn rpma_atomic_write(
    conn: *mut Conn,
    dst: *mut MrRemote,
    dst_offset: usize,
    src: *const c_char,
    flags: c_int,
    op_context: *const c_void,
) -> c_int {
    guard_hot("rpma_atomic_write", || {
        // SAFETY: librpma's contract: live objects of this library.
        let (conn, dst) = unsafe { (obj(conn, "conn")?, obj(dst, "dst")?) };
        if src.is_null() {
            return Err(null("src"));
        }
        let mut value = [0u8; 8];
        // SAFETY: librpma's contract: src points to 8 readable bytes.
        unsafe { value.as_mut_ptr().copy_from_nonoverlapping(src.cast::<u8>(), 8) };
        post(
            conn,
            AtomicWrite::new(dst, dst_offset as u64, value).flags(flags_of(flags)?).op_context(op_context as u64),
        )
    })
}

/// `rpma_flush`: the range is checked against the region;
/// `RPMA_FLUSH_TYPE_PERSISTENT` needs the peer's persistent-flush usage
/// (else `RPMA_E_NOSUPP`, as librpma). Native `IBV_WR_FLUSH` where available,
/// else librpma's emulation (an 8-byte RDMA read).
#[no_mangle]
pub unsafe extern "C" fn rpma_flush(
    conn: *mut Conn,
    dst: *mut MrRemote,
    dst_offset: usize,
    len: usize,
    type_: c_int,
    flags: c_int,
    op_context: *const c_void,
) -> c_int {
    guard_hot("rpma_flush", || {
        // SAFETY: librpma's contract: live objects of this library.
        let (conn, dst) = unsafe { (obj(conn, "conn")?, obj(dst, "dst")?) };
        let ty = match type_ {
            0 => FlushType::Persistent,
            1 => FlushType::Visibility,
            t => {
                return Err(Error::inval(format!(
                    "flush type {t} is neither RPMA_FLUSH_TYPE_PERSISTENT (0) nor RPMA_FLUSH_TYPE_VISIBILITY (1)"
                )))
            }
        };
        post(
            conn,
            Flush::new(dst, dst_offset as u64, len as u64, ty).flags(flags_of(flags)?).op_context(op_context as u64),
        )
    })
}

/// `rpma_send`: the range is checked against `src`.
#[no_mangle]
pub unsafe extern "C" fn rpma_send(
    conn: *mut Conn,
    src: *const RpmaMrLocal,
    offset: usize,
    len: usize,
    flags: c_int,
    op_context: *const c_void,
) -> c_int {
    guard_hot("rpma_send", || {
        // SAFETY: librpma's contract: a live connection of this library.
        let conn = unsafe { obj(conn, "conn") }?;
        let (flags, ctx) = (flags_of(flags)?, op_context as u64);
        if src.is_null() && offset == 0 && len == 0 {
            return post(conn, SendSg::new(NO_SG).flags(flags).op_context(ctx));
        }
        // SAFETY: librpma's contract: a live region of this library.
        post(conn, Send::new(unsafe { obj(src, "src") }?, offset, len).flags(flags).op_context(ctx))
    })
}

/// `rpma_send_with_imm`: as `rpma_send`, with `imm` in network order.
#[no_mangle]
pub unsafe extern "C" fn rpma_send_with_imm(
    conn: *mut Conn,
    src: *const RpmaMrLocal,
    offset: usize,
    len: usize,
    flags: c_int,
    imm: u32,
    op_context: *const c_void,
) -> c_int {
    guard_hot("rpma_send_with_imm", || {
        // SAFETY: librpma's contract: live objects of this library.
        let (conn, src) = unsafe { (obj(conn, "conn")?, obj(src, "src")?) };
        post(conn, Send::new(src, offset, len).imm(imm).flags(flags_of(flags)?).op_context(op_context as u64))
    })
}

/// `rpma_recv`: the range is checked against `dst`.
#[no_mangle]
pub unsafe extern "C" fn rpma_recv(
    conn: *mut Conn,
    dst: *mut RpmaMrLocal,
    offset: usize,
    len: usize,
    op_context: *const c_void,
) -> c_int {
    guard_hot("rpma_recv", || {
        // SAFETY: librpma's contract: a live connection of this library.
        let conn = unsafe { obj(conn, "conn") }?;
        let ctx = op_context as u64;
        if dst.is_null() && offset == 0 && len == 0 {
            return post(conn, RecvSg::new(NO_SG).op_context(ctx));
        }
        // SAFETY: librpma's contract: a live region of this library.
        post(conn, Recv::new(unsafe { obj(dst, "dst") }?, offset, len).op_context(ctx))
    })
}
