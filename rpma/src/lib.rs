#![doc = include_str!("../doc/rpma.7.md")]
#![deny(missing_docs)]
#![deny(unsafe_code)]
#![doc(test(attr(deny(warnings))))]

mod access;
#[cfg(feature = "tokio")]
pub mod aio;
pub mod common_data;
pub mod conn;
pub mod conn_cfg;
pub mod conn_req;
pub mod cq;
pub mod device;
pub mod ep;
pub mod error;
pub mod gpspm;
mod inflight;
pub mod log;
pub mod messages;
// `unsafe` is denied crate-wide (FFI lives in rpma-sys). It is allowed for
// this whole module, which owns the memory registrations point at, and
// item by item elsewhere: the `unsafe fn` fast paths (`*_unchecked`,
// `Conn::post_unchecked`), the in-flight trackers' lock and the calls into
// rpma-sys that post work requests, each with a `// SAFETY:` line.
#[allow(unsafe_code)]
pub mod memory;
pub mod mr;
pub mod mw;
pub mod ops;
pub mod peer;
pub mod peer_cfg;
pub mod rereg;
pub mod srq;
pub mod utils;
mod validate;
mod windows;
mod wire;
mod wrid;

pub use common_data::CommonData;
pub use conn::{Chain, Conn, ConnEvent, Flags, FlushType, RetryBudget, Sg};
pub use conn_cfg::ConnCfg;
pub use conn_req::ConnReq;
pub use cq::{Completion, CompletionOp, Cq, SharedCq, WcStatus};
pub use device::IbvContext;
pub use ep::Ep;
pub use error::{err_2str, Error, Result};
pub use memory::{AlignedBuf, MappedFile, RawMemory, RegMemory};
pub use mr::{Access, Advice, AdviseFlags, DeregError, MrLocal, MrRemote, Usage};
pub use mw::{Mw, MwAccess, MwType};
pub use peer::{Capabilities, Peer};
pub use peer_cfg::PeerCfg;
pub use srq::{Srq, SrqCfg};
pub use wire::{MR_DESCRIPTOR_EXT_SIZE, MR_DESCRIPTOR_SIZE, MR_EXT_TAG, PEER_CFG_DESCRIPTOR_SIZE};
