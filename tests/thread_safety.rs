//! The Send/Sync properties documented in rpma(7) ("Thread safety"), checked
//! at compile time: a change that loses one fails to build this test.

use rpma::gpspm::{FlushRequest, FlushResponse};
use rpma::messages::Messages;
use rpma::*;

fn send_sync<T: Send + Sync>() {}

#[test]
fn public_types_are_send_and_sync_as_documented() {
    send_sync::<IbvContext>();
    send_sync::<Peer>();
    send_sync::<PeerCfg>();
    send_sync::<MrLocal<AlignedBuf>>();
    send_sync::<MrLocal<Vec<u8>>>();
    send_sync::<MrLocal<rpma::RawMemory>>();
    send_sync::<MrLocal<MappedFile>>();
    send_sync::<MrRemote>();
    send_sync::<Ep>();
    send_sync::<ConnReq>();
    send_sync::<Conn>();
    send_sync::<ConnCfg>();
    send_sync::<Cq>();
    send_sync::<Srq>();
    send_sync::<SrqCfg>();
    send_sync::<Mw>();
    send_sync::<Messages>();
    send_sync::<AlignedBuf>();
    send_sync::<MappedFile>();
    send_sync::<Completion>();
    send_sync::<CommonData>();
    send_sync::<FlushRequest>();
    send_sync::<FlushResponse>();
    send_sync::<Error>();
}
