//! # rpma: remote persistent memory access over RDMA
//!
//! librpma's small object model in safe Rust, on top of libibverbs and
//! librdmacm:
//!
//! | object | librpma | what it is |
//! |---|---|---|
//! | [`IbvContext`] | `struct ibv_context` | an RDMA device, found by IP address with [`utils::get_ibv_context`] |
//! | [`Peer`] | `rpma_peer` | a protection domain on a device, with its probed [`Capabilities`] |
//! | [`PeerCfg`] | `rpma_peer_cfg` | what a peer tells the other side (direct write to PMem), a 1-byte descriptor |
//! | [`MrLocal`] | `rpma_mr_local` | registered local memory, owned for the registration's life |
//! | [`MrRemote`] | `rpma_mr_remote` | a region of the other side, from its 21-byte descriptor |
//!
//! ## Quick start
//!
//! ```no_run
//! use rpma::{utils, AlignedBuf, MrLocal, MrRemote, Peer, Usage};
//!
//! // The device that owns 192.0.2.1 (Soft-RoCE in the test VM).
//! let ctx = utils::get_ibv_context("192.0.2.1", utils::ContextType::Local)?;
//! let peer = Peer::new(&ctx)?;
//!
//! // Register 4 KiB the other side may read and write.
//! let mut mr = MrLocal::reg(&peer, AlignedBuf::new(4096)?, Usage::READ_SRC | Usage::WRITE_DST)?;
//! mr.write_at(0, b"hello, remote reader")?;
//!
//! // The descriptor goes to the other side (librpma sends it in the
//! // connection's private data), which decodes it:
//! let desc = mr.descriptor();
//! let remote = MrRemote::from_descriptor(&desc)?;
//! assert_eq!(remote.size(), 4096);
//! # Ok::<(), rpma::Error>(())
//! ```
//!
//! ## Memory safety of registered memory
//!
//! A registration takes its memory by value ([`RegMemory`]: `Vec<u8>`,
//! `Box<[u8]>`, [`AlignedBuf`], or a borrowed `&mut [u8]`) and gives it back
//! only from [`MrLocal::dereg`], after `ibv_dereg_mr`. Safe code therefore
//! cannot free, reallocate or reuse memory the device may still access.
//!
//! ## Errors
//!
//! Every fallible call returns [`Error`], one variant per librpma code
//! ([`Error::code`], [`err_2str`]), with a message naming the argument and
//! bound at fault. Provider failures keep the errno as their `source`.
//!
//! ## Logging
//!
//! Through the [`log`](::log) crate, with librpma's two thresholds: see
//! [`log`](crate::log).
//!
//! ## Thread safety
//!
//! [`IbvContext`], [`Peer`], [`PeerCfg`] and [`MrRemote`] are `Send + Sync`;
//! [`MrLocal<M>`] is when `M` is.
//!
//! ## Running on Soft-RoCE
//!
//! The repository's `harness/rdma-run` runs any command against a real RDMA
//! device, booting a throw-away VM with Soft-RoCE when the host has none.
#![deny(missing_docs)]
#![deny(unsafe_code)]
#![doc(test(attr(deny(warnings))))]

pub mod common_data;
pub mod conn;
pub mod conn_cfg;
pub mod conn_req;
pub mod cq;
pub mod ep;
pub mod error;
pub mod gpspm;
pub mod log;
pub mod messages;
// Non-FFI unsafe: ownership of registered memory (no verbs calls here).
mod inflight;
#[allow(unsafe_code)]
pub mod memory;
pub mod mr;
pub mod mw;
pub mod peer;
pub mod peer_cfg;
pub mod rereg;
pub mod srq;
pub mod utils;
mod wire;

pub use common_data::CommonData;
pub use conn::{Conn, Flags, FlushType};
pub use conn_cfg::ConnCfg;
pub use conn_req::ConnReq;
pub use cq::{Completion, CompletionOp, Cq, WcStatus};
pub use ep::Ep;
pub use error::{err_2str, Error, Result};
pub use memory::{AlignedBuf, MappedFile, RegMemory};
pub use mr::{Access, Advice, AdviseFlags, DeregError, MrLocal, MrRemote, Usage};
pub use mw::{Mw, MwAccess, MwType};
pub use peer::{Capabilities, Peer};
pub use peer_cfg::PeerCfg;
pub use srq::{Srq, SrqCfg};
pub use utils::{ConnEvent, IbvContext};
pub use wire::{MR_DESCRIPTOR_SIZE, PEER_CFG_DESCRIPTOR_SIZE};
