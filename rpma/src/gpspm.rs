//! Messages of the General Purpose Server Persistency Method (GPSPM).
//!
//! With GPSPM the client writes, then *asks* the server to make a range
//! persistent by sending a flush request; the server persists it (e.g.
//! `msync`, or `pmem_persist` on PMem) and answers with a flush response
//! (librpma's example 09).
//!
//! The messages are librpma's: its example 09 packs them with protobuf
//! (proto2, every field `required fixed64`), so a request is 27 bytes
//! (`09 <offset> 11 <length> 19 <op_context>`, each value a u64
//! little-endian) and a response 9 (`09 <op_context>`). rpma encodes and
//! decodes them by hand (no protobuf dependency), so an rpma peer talks to
//! librpma's. Decode exactly the bytes received (the receive completion's
//! `byte_len`): a protobuf message has no length of its own, and zero
//! padding after it does not decode. Receive into buffers bigger than the
//! message sizes (librpma's example posts 512 bytes): a protobuf peer may
//! add fields, which the decoders skip.
//!
//! ```
//! use rpma::gpspm::{FlushRequest, FlushResponse};
//! let req = FlushRequest::new(4096, 64, 7);
//! assert_eq!(FlushRequest::decode(&req.encode())?, req);
//! assert_eq!(FlushResponse::decode(&FlushResponse::new(7).encode())?.op_context, 7);
//! assert_eq!(FlushResponse::new(0xF01D).encode(), [0x09, 0x1d, 0xf0, 0, 0, 0, 0, 0, 0]);
//! # Ok::<(), rpma::Error>(())
//! ```

use crate::error::{Error, Result};
use crate::wire::{self, GpspmRequestWire};

pub use crate::wire::{GPSPM_REQUEST_SIZE, GPSPM_RESPONSE_SIZE};

/// "Persist `length` bytes at `offset` of the region you gave me."
///
/// ```
/// use rpma::gpspm::FlushRequest;
/// let req = FlushRequest::new(0, 64, 1);
/// assert!(req.check(4096).is_ok());
/// assert!(FlushRequest::new(4090, 64, 1).check(4096).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FlushRequest {
    /// Offset in the server's region.
    pub offset: u64,
    /// Length in bytes.
    pub length: u64,
    /// Returned in the response.
    pub op_context: u64,
}

impl FlushRequest {
    /// A request to persist `length` bytes at `offset`, answered with
    /// `op_context`.
    pub fn new(offset: u64, length: u64, op_context: u64) -> FlushRequest {
        FlushRequest { offset, length, op_context }
    }

    /// The 27-byte encoding (librpma's protobuf, fields in number order).
    pub fn encode(&self) -> [u8; GPSPM_REQUEST_SIZE] {
        wire::encode_gpspm_request(&GpspmRequestWire {
            offset: self.offset,
            length: self.length,
            op_context: self.op_context,
        })
    }

    /// Decodes a request received from a peer: exactly the bytes received.
    ///
    /// # Errors
    /// [`Error::Inval`] naming the fault when the bytes are not a protobuf
    /// flush request: a field missing or truncated, a known field not
    /// `fixed64`, an unsupported wire type, field number 0 (e.g. zero
    /// padding after the message).
    pub fn decode(bytes: &[u8]) -> Result<FlushRequest> {
        let w = wire::decode_gpspm_request(bytes)?;
        Ok(FlushRequest { offset: w.offset, length: w.length, op_context: w.op_context })
    }

    /// Checks the requested range against a region of `size` bytes.
    ///
    /// # Errors
    /// [`Error::Inval`] naming the bound when `offset + length` exceeds `size`.
    pub fn check(&self, size: u64) -> Result<()> {
        match self.offset.checked_add(self.length) {
            Some(end) if end <= size => Ok(()),
            _ => Err(Error::inval(format!(
                "GPSPM flush request: offset {} + length {} exceeds the region's size {size}",
                self.offset, self.length
            ))),
        }
    }
}

/// "Done": the answer to a [`FlushRequest`].
///
/// ```
/// let r = rpma::gpspm::FlushResponse::new(9);
/// assert_eq!(rpma::gpspm::FlushResponse::decode(&r.encode())?, r);
/// # Ok::<(), rpma::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FlushResponse {
    /// The request's `op_context`.
    pub op_context: u64,
}

impl FlushResponse {
    /// The response to the request that carried `op_context`.
    pub fn new(op_context: u64) -> FlushResponse {
        FlushResponse { op_context }
    }

    /// The 9-byte encoding (librpma's protobuf).
    pub fn encode(&self) -> [u8; GPSPM_RESPONSE_SIZE] {
        wire::encode_gpspm_response(self.op_context)
    }

    /// Decodes a response received from a peer: exactly the bytes received.
    ///
    /// # Errors
    /// [`Error::Inval`] as for [`FlushRequest::decode`].
    pub fn decode(bytes: &[u8]) -> Result<FlushResponse> {
        Ok(FlushResponse { op_context: wire::decode_gpspm_response(bytes)? })
    }
}
