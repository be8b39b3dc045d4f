#![doc = include_str!("../doc/rpma.7.md")]
#![deny(missing_docs, missing_debug_implementations)]
#![deny(unsafe_code)]
#![doc(test(attr(deny(warnings))))]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod access;
// `unsafe` is denied crate-wide (FFI lives in rpma-sys) and allowed in
// these modules only, each use with a `// SAFETY:` line:
// - `aio`: registering fds with tokio's reactor (a borrow, or the
//   connection that owns them, keeps them open);
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
#[allow(unsafe_code)]
pub mod aio;
pub mod common_data;
// - `conn`: the posts of `ops::Unheld` operations (whose creators keep
//   the memory alive), passing that contract on;
#[allow(unsafe_code)]
pub mod conn;
pub mod conn_cfg;
mod conn_event;
pub mod conn_req;
pub mod cq;
// - `device`: adopting a caller's `ibv_context` (`IbvContext::from_raw`);
#[allow(unsafe_code)]
pub mod device;
pub mod ep;
pub mod error;
pub mod export;
pub mod gpspm;
// - `inflight`: every post of a work request (the trackers' holds, or the
//   unheld caller's contract, keep its memory alive) and the send
//   tracker's lock;
#[allow(unsafe_code)]
mod inflight;
pub mod logging;
pub mod messages;
// - `memory`: owns the memory registrations point at (allocation,
//   mappings, raw views);
#[allow(unsafe_code)]
pub mod memory;
// - `mr`: registered memory the device may also touch (bounded copies),
//   its release (leaked when deregistration fails) and re-registration;
#[cfg(all(test, loom))]
mod arming_model;
#[allow(unsafe_code)]
pub mod mr;
pub mod mw;
#[cfg(any(feature = "tokio", all(test, loom)))]
mod nudge;
// - `ops`: `unsafe fn ops::Unheld::new`, the contract itself (no
//   `unsafe` block);
#[allow(unsafe_code)]
pub mod ops;
pub mod peer;
pub mod peer_cfg;
pub mod srq;
mod unlocked;
pub mod utils;
mod validate;
#[cfg(any(feature = "tokio", all(test, loom)))]
mod wake_after;
mod windows;
mod wire;
mod wrid;

pub use common_data::CommonData;
pub use conn::{Chain, Conn, ConnEvent, RetryBudget};
pub use conn_cfg::ConnCfg;
pub use conn_req::ConnReq;
pub use cq::{Completion, CompletionOp, Cq, SharedCq, WcStatus};
pub use device::IbvContext;
pub use ep::Ep;
pub use error::{err_2str, Error, Result};
pub use export::Export;
pub use memory::{AlignedBuf, HugeBuf, HugePage, MappedFile, Memory, RawMemory, RegMemory};
pub use mr::{Access, Advice, AdviseFlags, DeregError, MrLocal, MrRemote, Usage};
pub use mw::{Mw, MwAccess, MwType};
pub use ops::{Flags, FlushType};
pub use peer::{Capabilities, Peer};
pub use peer_cfg::PeerCfg;
pub use srq::{Srq, SrqCfg};
pub use wire::{MR_DESCRIPTOR_EXT_SIZE, MR_DESCRIPTOR_SIZE, MR_EXT_TAG, PEER_CFG_DESCRIPTOR_SIZE};
