//! A refused post: what the provider said, and whether the request may
//! still run.

use std::io;

/// A post the provider refused.
///
/// Whether the refused request may still run depends on what the provider
/// did before failing. When `ibv_post_send` / `ibv_post_recv` names the
/// request in `bad_wr`, it was not queued. When it fails *without* naming
/// one, it may have been: rxe's provider writes the request into the queue
/// it shares with the kernel before ringing the doorbell, and reports a
/// failed doorbell with `bad_wr` left NULL; a failed `ibv_wr_complete` is
/// the same case on the extended interface. The device may then run the
/// request, so the memory it names must stay held until it completes or
/// the QP is destroyed.
#[derive(Debug)]
pub struct PostError {
    /// The errno.
    pub error: io::Error,
    /// The provider may have queued the request (it named no refused one).
    pub maybe_queued: bool,
}

impl PostError {
    /// A post refused before anything reached the queue.
    pub fn refused(error: io::Error) -> PostError {
        PostError { error, maybe_queued: false }
    }
}

impl From<io::Error> for PostError {
    fn from(error: io::Error) -> PostError {
        PostError::refused(error)
    }
}

impl From<PostError> for io::Error {
    fn from(e: PostError) -> io::Error {
        e.error
    }
}

impl std::fmt::Display for PostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

/// The outcome of posting one request, `rc` and `bad` as the provider left
/// them (`bad` NULL before the call): see [`PostError`].
#[inline(always)]
pub(crate) fn post_outcome<W>(rc: std::os::raw::c_int, bad: *mut W, op: &str) -> Result<(), PostError> {
    if rc == 0 {
        Ok(())
    } else {
        Err(post_failed(rc, bad.is_null(), op))
    }
}

/// The outcome of a call whose failure may leave its requests queued
/// whatever it says (`ibv_wr_complete`, `ibv_bind_mw`: a failed doorbell
/// comes after the queue was written): see [`PostError`].
#[inline(always)]
pub(crate) fn queued_outcome(rc: std::os::raw::c_int, op: &str) -> Result<(), PostError> {
    if rc == 0 {
        Ok(())
    } else {
        Err(post_failed(rc, true, op))
    }
}

#[cold]
#[inline(never)]
fn post_failed(rc: std::os::raw::c_int, maybe_queued: bool, op: &str) -> PostError {
    let error = crate::from_errno_ret(rc, op).err().unwrap_or_else(|| io::Error::other(op.to_string()));
    PostError { error, maybe_queued }
}
