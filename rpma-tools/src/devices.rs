//! `rpma devices`: the host's RDMA devices and what rpma does on each, with
//! the fields `ibv_devinfo` prints first.

use crate::meta::{Json, Meta};
use crate::Res;
use clap::Args;
use serde::Serialize;

/// `rpma devices`' arguments (`ibv_devinfo`'s where they overlap).
#[derive(Args, Serialize)]
pub struct DevicesArgs {
    /// JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Only the device NAME (e.g. `rxe0`, `mlx5_0`).
    #[arg(short = 'd', long = "ib-dev", value_name = "NAME")]
    ib_dev: Option<String>,
    /// Only port N (from 1) of each device shown.
    #[arg(short = 'i', long = "ib-port", value_name = "N", value_parser = clap::value_parser!(u32).range(1..=255))]
    ib_port: Option<u32>,
    /// The devices' names only, as `ibv_devinfo -l`.
    #[arg(short = 'l', long)]
    list: bool,
}

#[derive(Serialize)]
struct Device {
    name: String,
    node_type: String,
    node_guid: String,
    /// What the device says of itself (`ibv_query_device`); None with
    /// `error` when it could not be asked.
    fw_ver: Option<String>,
    vendor_id: Option<u32>,
    vendor_part_id: Option<u32>,
    hw_ver: Option<u32>,
    max_qp_rd_atom: Option<u32>,
    max_qp_init_rd_atom: Option<u32>,
    atomic_cap: Option<String>,
    ports: Vec<Port>,
    /// What rpma probed on the device (None: see `error`).
    rpma: Option<rpma::Capabilities>,
    /// Why the device could not be opened or probed, with the library's
    /// hint and the system's error.
    error: Option<String>,
}

#[derive(Serialize)]
struct Port {
    port: u32,
    state: String,
    phys_state: String,
    link_layer: String,
    rate: Option<String>,
    rate_mbit_per_s: Option<u64>,
    /// In bytes (`ibv_query_port`); None with `error` when it failed.
    active_mtu: Option<u32>,
    max_mtu: Option<u32>,
    lid: Option<u16>,
    sm_lid: Option<u16>,
    gids: Vec<Gid>,
    /// Why the port could not be queried.
    error: Option<String>,
}

#[derive(Serialize)]
struct Gid {
    index: u32,
    gid: String,
    kind: Option<String>,
    netdev: Option<String>,
    ip: Option<String>,
}

/// Keeps the first error of a device's steps, as the command prints errors.
fn note<T>(r: rpma::Result<T>, error: &mut Option<String>) -> Option<T> {
    r.map_err(|e| {
        error.get_or_insert_with(|| crate::chain(&e));
    })
    .ok()
}

fn device(d: rpma::device::DeviceInfo, port: Option<u32>) -> Device {
    let mut error = None;
    let ctx = note(rpma::IbvContext::open(Some(&d.name)), &mut error);
    let attrs = ctx.as_ref().and_then(|c| note(c.attributes(), &mut error));
    let caps = ctx.as_ref().and_then(|c| note(rpma::Peer::new(c), &mut error)).map(|p| p.capabilities());
    let ports = d
        .ports
        .into_iter()
        .filter(|p| port.is_none_or(|n| n == p.port))
        .map(|p| {
            let mut perr = None;
            let q = ctx.as_ref().and_then(|c| note(c.port_attributes(p.port), &mut perr));
            Port {
                port: p.port,
                state: p.state.to_string(),
                phys_state: p.phys_state.to_string(),
                link_layer: p.link_layer.to_string(),
                rate_mbit_per_s: p.rate.as_ref().map(|r| r.mbit_per_s),
                rate: p.rate.map(|r| r.text),
                active_mtu: q.and_then(|q| q.active_mtu),
                max_mtu: q.and_then(|q| q.max_mtu),
                lid: q.map(|q| q.lid),
                sm_lid: q.map(|q| q.sm_lid),
                gids: p
                    .gids
                    .into_iter()
                    .map(|g| Gid {
                        index: g.index,
                        gid: g.gid.to_string(),
                        kind: g.kind,
                        netdev: g.netdev,
                        ip: g.ip.map(|ip| ip.to_string()),
                    })
                    .collect(),
                error: perr,
            }
        })
        .collect();
    Device {
        fw_ver: attrs.as_ref().map(|a| a.fw_ver.clone()),
        vendor_id: attrs.as_ref().map(|a| a.vendor_id),
        vendor_part_id: attrs.as_ref().map(|a| a.vendor_part_id),
        hw_ver: attrs.as_ref().map(|a| a.hw_ver),
        max_qp_rd_atom: attrs.as_ref().map(|a| a.max_qp_rd_atom),
        max_qp_init_rd_atom: attrs.as_ref().map(|a| a.max_qp_init_rd_atom),
        atomic_cap: attrs.as_ref().map(|a| a.atomic_cap.to_string()),
        rpma: caps,
        error,
        ports,
        name: d.name,
        node_type: d.node_type,
        node_guid: d.node_guid,
    }
}

/// The host's devices, `-d`'s alone; an error for a name no device has.
fn select(name: Option<&str>) -> Res<Vec<rpma::device::DeviceInfo>> {
    let mut devs = rpma::device::devices()?;
    if let Some(n) = name {
        devs.retain(|d| d.name == n);
        if devs.is_empty() {
            // The library's message: the devices there are, or what to do.
            return Err(match rpma::IbvContext::open(Some(n)) {
                Err(e) => e.into(),
                Ok(_) => format!("no RDMA device named {n:?} in /sys/class/infiniband").into(),
            });
        }
    }
    Ok(devs)
}

/// The library's hint when the host has no RDMA device.
fn no_device() -> Box<dyn std::error::Error> {
    match rpma::IbvContext::open(None) {
        Err(e) => e.into(),
        Ok(c) => format!("no RDMA device in /sys/class/infiniband, though libibverbs lists {}", c.device_name()).into(),
    }
}

/// `--json`'s report: the provenance every report carries, and the
/// devices (their names alone with `-l`).
fn json<T: Serialize>(a: &DevicesArgs, started: std::time::SystemTime, devices: T) -> Res<()> {
    #[derive(Serialize)]
    struct Devices<T> {
        devices: T,
    }
    let mut meta = Meta::new(started, a);
    meta.device = a.ib_dev.clone();
    println!("{}", serde_json::to_string_pretty(&Json { meta, result: Devices { devices } })?);
    Ok(())
}

/// Prints the RDMA devices (`-d`'s alone), as a table or as JSON. No device,
/// an unknown `-d` or a `-i` port a device lacks: an error (exit status 1)
/// in either form, JSON's `"devices": []` printed first.
pub fn run(a: &DevicesArgs) -> Res<()> {
    let started = std::time::SystemTime::now();
    let sel = select(a.ib_dev.as_deref())?;
    if a.list {
        let names: Vec<&str> = sel.iter().map(|d| d.name.as_str()).collect();
        if a.json {
            json(a, started, &names)?;
        } else if !names.is_empty() {
            println!("{} HCA{} found:", names.len(), if names.len() == 1 { "" } else { "s" });
            for n in &names {
                println!("\t{n}");
            }
        }
        return if names.is_empty() { Err(no_device()) } else { Ok(()) };
    }
    if let Some(n) = a.ib_port {
        if let Some(d) = sel.iter().find(|d| !d.ports.iter().any(|p| p.port == n)) {
            let have: Vec<String> = d.ports.iter().map(|p| p.port.to_string()).collect();
            return Err(format!("{} has no port {n} (its ports: {})", d.name, have.join(", ")).into());
        }
    }
    let devs: Vec<Device> = sel.into_iter().map(|d| device(d, a.ib_port)).collect();
    if a.json {
        json(a, started, &devs)?;
    } else {
        print_table(&devs);
    }
    if devs.is_empty() {
        return Err(no_device());
    }
    Ok(())
}

fn print_table(devs: &[Device]) {
    for d in devs {
        println!("{} ({}, node GUID {})", d.name, d.node_type, d.node_guid);
        if let (Some(fw), Some(vid), Some(part), Some(hw)) = (&d.fw_ver, d.vendor_id, d.vendor_part_id, d.hw_ver) {
            println!("  fw_ver {fw}, vendor_id {vid:#06x}, vendor_part_id {part}, hw_ver {hw:#x}");
        }
        if let (Some(rd), Some(init), Some(ac)) = (d.max_qp_rd_atom, d.max_qp_init_rd_atom, &d.atomic_cap) {
            println!("  max_qp_rd_atom {rd}, max_qp_init_rd_atom {init}, atomic_cap {ac}");
        }
        if let Some(c) = &d.rpma {
            println!(
                "  rpma: flush {}, atomic write {}, atomics {}, ODP {}, memory windows{}{}, iWARP {}",
                if c.native_flush { "native" } else { "emulated (read after write)" },
                if c.native_atomic_write { "native" } else { "emulated (8-byte inline write)" },
                if c.atomics { "yes (compare-and-swap, fetch-and-add)" } else { "no" },
                yes(c.odp),
                if c.mw_type1 { " type 1" } else { "" },
                if c.mw_type2 {
                    " type 2"
                } else if !c.mw_type1 {
                    " none"
                } else {
                    ""
                },
                yes(c.iwarp),
            );
            println!(
                "  rpma limits: MR {} B, MRs {}, QP depth {}, CQ {}, SRQ depth {}, SGEs {}, READ SGEs {}",
                c.max_mr_size, c.max_mr, c.max_qp_wr, c.max_cqe, c.max_srq_wr, c.max_sge, c.max_sge_rd
            );
        }
        if let Some(e) = &d.error {
            println!("  error: {e}");
        }
        for p in &d.ports {
            let rate = p.rate.as_deref().unwrap_or("rate unknown");
            println!("  port {}: {} ({}), {}, {rate}", p.port, p.state, p.phys_state, p.link_layer);
            if let (Some(lid), Some(sm)) = (p.lid, p.sm_lid) {
                println!("    active_mtu {}, max_mtu {}, lid {lid}, sm_lid {sm}", mtu(p.active_mtu), mtu(p.max_mtu));
            }
            if let Some(e) = &p.error {
                println!("    error: {e}");
            }
            for g in &p.gids {
                let ip = g.ip.as_deref().map(|ip| format!(" -> {ip}")).unwrap_or_default();
                let kind = g.kind.as_deref().unwrap_or("");
                let dev = g.netdev.as_deref().map(|n| format!(" on {n}")).unwrap_or_default();
                println!("    GID {:>3} {:<40} {kind}{dev}{ip}", g.index, g.gid);
            }
        }
    }
}

fn mtu(m: Option<u32>) -> String {
    m.map_or("unknown".into(), |b| b.to_string())
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}
