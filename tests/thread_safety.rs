//! The Send/Sync properties documented in rpma(7) ("Thread safety"), checked
//! at compile time: a change that loses one fails to build this test.

use rpma::gpspm::{FlushRequest, FlushResponse};
use rpma::messages::Messages;
use rpma::*;

fn send_sync<T: Send + Sync>() {}

#[test]
fn public_types_are_send_and_sync_as_documented() {
    send_sync::<IbvContext>();
    send_sync::<rpma::device::DeviceInfo>();
    send_sync::<rpma::device::PortInfo>();
    send_sync::<rpma::device::GidInfo>();
    send_sync::<rpma::device::DeviceAttrs>();
    send_sync::<rpma::device::PortAttrs>();
    send_sync::<rpma::device::AtomicCap>();
    send_sync::<rpma::device::PortState>();
    send_sync::<rpma::device::PhysState>();
    send_sync::<rpma::device::LinkLayer>();
    send_sync::<rpma::device::Rate>();
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
    send_sync::<rpma::cq::IbvWc>();
    send_sync::<Srq>();
    send_sync::<SrqCfg>();
    send_sync::<Mw>();
    send_sync::<rpma::Export>();
    send_sync::<Messages>();
    send_sync::<AlignedBuf>();
    send_sync::<rpma::HugeBuf>();
    send_sync::<rpma::HugePage>();
    send_sync::<MappedFile>();
    send_sync::<rpma::Memory>();
    send_sync::<MrLocal<rpma::Memory>>();
    send_sync::<Completion>();
    send_sync::<CommonData>();
    send_sync::<FlushRequest>();
    send_sync::<FlushResponse>();
    send_sync::<Error>();
    send_sync::<rpma::Result<()>>();
    send_sync::<rpma::error::Msg>();
    send_sync::<SharedCq>();
    send_sync::<rpma::ops::Sg<'static, AlignedBuf>>();
    send_sync::<RetryBudget>();
    send_sync::<Capabilities>();
    send_sync::<Advice>();
    send_sync::<CompletionOp>();
    send_sync::<WcStatus>();
    send_sync::<FlushType>();
    send_sync::<ConnEvent>();
    send_sync::<rpma::device::ContextType>();
    send_sync::<rpma::device::DeviceEvent>();
    send_sync::<rpma::device::DeviceEventKind>();
    send_sync::<DeregError<AlignedBuf>>();
    send_sync::<rpma::mr::rereg::ReregError<AlignedBuf, AlignedBuf>>();
    send_sync::<rpma::mr::rereg::ReregHow>();
    send_sync::<rpma::mr::rereg::Reregistered<AlignedBuf>>();
    send_sync::<rpma::messages::MsgAccess>();
    send_sync::<rpma::messages::Slot>();
    send_sync::<rpma::logging::LogLevel>();
    send_sync::<rpma::logging::LogThreshold>();
    send_sync::<Box<rpma::logging::LogFunction>>();
    send_sync::<rpma::aio::AsyncConn>();
    send_sync::<rpma::aio::AsyncSharedCq>();
    send_sync::<rpma::aio::Completions<'static>>();
    send_sync::<rpma::aio::Events<'static>>();
    send_sync::<rpma::aio::AsyncEp<'static>>();
    send_sync::<rpma::aio::AsyncConnEvents<'static>>();
    send_sync::<rpma::aio::AsyncChannel<'static>>();
    send_sync::<rpma::aio::AsyncCq<'static>>();
    send_sync::<rpma::aio::AsyncDevice<'static>>();
    send_sync::<rpma::ops::Read<'static, AlignedBuf>>();
    send_sync::<rpma::ops::Unheld<rpma::ops::Read<'static, AlignedBuf>>>();
    send_sync::<rpma::ops::Write<'static, AlignedBuf>>();
    send_sync::<rpma::ops::Send<'static, AlignedBuf>>();
    send_sync::<rpma::ops::CompareAndSwap<'static, AlignedBuf>>();
    send_sync::<rpma::ops::FetchAndAdd<'static, AlignedBuf>>();
    send_sync::<rpma::ops::AtomicWrite<'static>>();
    send_sync::<rpma::ops::Flush<'static>>();
    send_sync::<rpma::ops::WriteSg<'static, AlignedBuf>>();
    send_sync::<rpma::ops::ReadSg<'static, AlignedBuf>>();
    send_sync::<rpma::ops::Recv<'static, AlignedBuf>>();
    send_sync::<rpma::ops::RecvSg<'static, AlignedBuf>>();
    send_sync::<rpma::ops::SendSg<'static, AlignedBuf>>();
    send_sync::<rpma::ops::WriteInline<'static>>();
    send_sync::<rpma::ops::SendInline<'static>>();
    send_sync::<rpma::error::Detail>();
    send_sync::<rpma::error::Arg>();
    send_sync::<rpma::error::Misuse>();
    send_sync::<rpma::error::RangeUse>();
    send_sync::<rpma::error::Wire>();
}

/// Public types that are deliberately not `Send + Sync`, with the reason
/// (rpma(7) "Thread safety" says the same).
const NOT_SEND_SYNC: &[(&str, &str)] = &[
    ("Chain", "a builder that holds encoded work requests (verbs' structs, with raw pointers) until it posts them: built and posted on one thread"),
    ("LogRecord", "a message lent to a log function for the call; it borrows its format arguments"),
];

/// The two above really are neither `Send` nor `Sync` (the list says
/// true): if one becomes so, it belongs with the checks above instead.
#[test]
fn the_exceptions_are_real() {
    trait Maybe {
        const SEND_SYNC: bool = false;
    }
    impl<T: ?Sized> Maybe for T {}
    struct Probe<T: ?Sized>(std::marker::PhantomData<T>);
    #[allow(dead_code)]
    impl<T: ?Sized + Send + Sync> Probe<T> {
        const SEND_SYNC: bool = true;
    }
    const { assert!(!<Probe<Chain<'static>>>::SEND_SYNC) };
    const { assert!(!<Probe<Chain<'static>>>::SEND_SYNC) };
    const { assert!(!<Probe<rpma::logging::LogRecord<'static>>>::SEND_SYNC) };
}

/// The list above is checked against rpma's public API as the man-page
/// generator reads it (every public struct, enum, union and alias reachable
/// from outside the crate), so a new public type fails here until it is
/// checked or listed with its reason.
#[test]
fn every_public_type_is_checked() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("rpma/src");
    let public = rpma_mangen::Tree::load(&src).expect("rpma's sources").public_types();
    assert!(public.len() > 30, "the API reader found only {public:?}");
    let this = include_str!("thread_safety.rs");
    let checked: Vec<&str> = this.lines().filter(|l| l.trim_start().starts_with("send_sync::<")).collect();
    let word = |line: &str, t: &str| {
        line.match_indices(t).any(|(i, _)| {
            let before = line[..i].chars().next_back().is_none_or(|c| !c.is_alphanumeric() && c != '_');
            let after = line[i + t.len()..].chars().next().is_none_or(|c| !c.is_alphanumeric() && c != '_');
            before && after
        })
    };
    let missing: Vec<&String> = public
        .iter()
        .filter(|t| !checked.iter().any(|l| word(l, t)) && !NOT_SEND_SYNC.iter().any(|(n, _)| n == t))
        .collect();
    assert!(
        missing.is_empty(),
        "public types whose Send/Sync is not checked in tests/thread_safety.rs (add a send_sync::<..> line, or \
         list them in NOT_SEND_SYNC with the reason): {missing:?}"
    );
}
