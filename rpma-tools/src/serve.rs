//! `rpma serve`: a region at an address, for `ping`, `bench` or librpma's
//! examples' clients.

use crate::Res;
use rpma::device::{get_ibv_context, ContextType};
use rpma::{AlignedBuf, CommonData, ConnEvent, Ep, MappedFile, MrLocal, Peer, PeerCfg, Usage};
use std::path::PathBuf;

/// What `rpma serve` takes.
#[derive(clap::Args)]
pub struct ServeArgs {
    /// The address to listen on: one an RDMA device has (`rpma devices`).
    addr: String,
    /// The port.
    port: u16,
    /// The region's size in bytes.
    #[arg(long, default_value_t = 1 << 20)]
    size: usize,
    /// Serve the first `--size` bytes of this file or device DAX instead of
    /// DRAM (then the persistent flush is offered, and `direct_write_to_pmem`
    /// where the mapping is persistent memory). Nothing else may truncate
    /// it while it is served.
    #[arg(long)]
    pmem: Option<PathBuf>,
    /// Serve this many connections, then exit (default: until killed).
    #[arg(long)]
    count: Option<u64>,
}

pub fn run(a: &ServeArgs) -> Res<()> {
    let peer = Peer::new(&get_ibv_context(&a.addr, ContextType::Local)?)?;
    let mut usage = Usage::READ_SRC | Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY;
    let mut pcfg = PeerCfg::new();
    // The registration lives as long as the loop below.
    let (pdata, _file, _dram, what) = match &a.pmem {
        Some(path) => {
            usage |= Usage::FLUSH_TYPE_PERSISTENT;
            // SAFETY: the user names a file that nothing else truncates or
            // remaps while it is served (`--pmem`'s documented contract).
            let f = unsafe { MappedFile::open(path, a.size) }?;
            pcfg.set_direct_write_to_pmem(f.is_pmem());
            let pmem = if f.is_pmem() { "persistent memory" } else { "not persistent memory" };
            let mr = MrLocal::reg(&peer, f, usage)?;
            let what = format!("{} ({pmem})", path.display());
            (CommonData::encode(0, &mr, Some(&pcfg)), Some(mr), None, what)
        }
        None => {
            let mr = MrLocal::reg(&peer, AlignedBuf::new(a.size)?, usage)?;
            (CommonData::encode(0, &mr, Some(&pcfg)), None, Some(mr), "DRAM".to_string())
        }
    };
    let ep = Ep::listen(&peer, &a.addr, a.port)?;
    println!(
        "serving {} bytes of {what} at {}:{} (flush: {}; direct_write_to_pmem: {})",
        a.size,
        a.addr,
        a.port,
        if usage.contains(Usage::FLUSH_TYPE_PERSISTENT) { "persistent, visibility" } else { "visibility" },
        pcfg.direct_write_to_pmem()
    );
    let mut n = 0u64;
    while a.count.is_none_or(|c| n < c) {
        let conn = ep.next_conn_req(None)?.connect(&pdata)?;
        n += 1;
        loop {
            match conn.next_event()? {
                ConnEvent::Established => println!("connection {n}: established"),
                ev => {
                    println!("connection {n}: {ev}");
                    break;
                }
            }
        }
        let _ = conn.disconnect();
    }
    Ok(())
}
