//! Examples 09 and 09scch: GPSPM. The client writes, then sends a flush
//! request; the server persists the range and answers.

use super::{Args, Memory, Res};
use rpma::gpspm::{FlushRequest, FlushResponse, GPSPM_REQUEST_SIZE, GPSPM_RESPONSE_SIZE};
use rpma::{AlignedBuf, CommonData, Completion, CompletionOp, Conn, ConnCfg, Ep, Flags, MrLocal, Usage};

fn cfg(shared: bool) -> ConnCfg {
    let mut c = ConnCfg::new();
    if shared {
        c.set_rcq_size(4);
        c.set_compl_channel(true);
    }
    c
}

fn wait(conn: &Conn, shared: bool, op: CompletionOp) -> Res<Completion> {
    if !shared {
        return super::wait_for(conn.cq(), op);
    }
    let cq = if op == CompletionOp::Recv { conn.rcq().ok_or("no rcq")? } else { conn.cq() };
    loop {
        if let Ok(wc) = cq.get_completion() {
            if !wc.status.is_success() {
                return Err(format!("{:?} failed: {}", wc.op, wc.status).into());
            }
            if wc.op == op {
                return Ok(wc);
            }
            continue;
        }
        conn.wait_timeout(super::TIMEOUT)?;
    }
}

pub fn server(a: &Args, shared: bool) -> Res<()> {
    let peer = super::peer(&a.addr, true)?;
    let mem = Memory::reg(&peer, a.rest.first().map(String::as_str), 4096, Usage::WRITE_DST)?;
    let rcv = MrLocal::reg(&peer, AlignedBuf::new(GPSPM_REQUEST_SIZE)?, Usage::RECV)?;
    let mut snd = MrLocal::reg(&peer, AlignedBuf::new(GPSPM_RESPONSE_SIZE)?, Usage::SEND)?;
    let ep = Ep::listen(&peer, &a.addr, a.port)?;
    let conn = super::server_accept(&ep, Some(&cfg(shared)), &mem.common_data(0, None), &|req| {
        req.recv(&rcv, 0, GPSPM_REQUEST_SIZE, 1)
    })?;
    wait(&conn, shared, CompletionOp::Recv)?;
    let mut b = [0u8; GPSPM_REQUEST_SIZE];
    rcv.read_at(0, &mut b)?;
    let req = FlushRequest::decode(&b)?;
    req.check(4096)?;
    if let Memory::File(m) = &mem {
        m.persist()?; // msync of the mapping (PMem would use a cache flush instead)
    }
    let mut data = vec![0u8; req.length as usize];
    mem.read_at(req.offset as usize, &mut data)?;
    println!("server: persisted {} bytes at {}: {}", req.length, req.offset, super::cstr(&data));
    snd.write_at(0, &FlushResponse { op_context: req.op_context }.encode())?;
    conn.send(&snd, 0, GPSPM_RESPONSE_SIZE, Flags::COMPLETION_ALWAYS, 2)?;
    wait(&conn, shared, CompletionOp::Send)?;
    super::close_second(conn)
}

pub fn client(a: &Args, shared: bool) -> Res<()> {
    let peer = super::peer(&a.addr, false)?;
    let mut msg = a.rest.first().cloned().unwrap_or_else(|| "Hello GPSPM!".into()).into_bytes();
    msg.push(0);
    let mut src = MrLocal::reg(&peer, AlignedBuf::new(64)?, Usage::WRITE_SRC)?;
    src.write_at(0, &msg)?;
    let rcv = MrLocal::reg(&peer, AlignedBuf::new(GPSPM_RESPONSE_SIZE)?, Usage::RECV)?;
    let mut snd = MrLocal::reg(&peer, AlignedBuf::new(GPSPM_REQUEST_SIZE)?, Usage::SEND)?;
    let conn = super::client_connect(&peer, a, Some(&cfg(shared)), &[], &|_| Ok(()))?;
    let cd = CommonData::decode(conn.private_data())?;
    conn.recv(&rcv, 0, GPSPM_RESPONSE_SIZE, 3)?;
    conn.write(&cd.mr, cd.data_offset as u64, &src, 0, msg.len(), Flags::COMPLETION_ON_ERROR, 1)?;
    let req = FlushRequest { offset: cd.data_offset as u64, length: msg.len() as u64, op_context: 0xf1 };
    snd.write_at(0, &req.encode())?;
    conn.send(&snd, 0, GPSPM_REQUEST_SIZE, Flags::COMPLETION_ALWAYS, 2)?;
    if shared {
        wait(&conn, shared, CompletionOp::Send)?;
        wait(&conn, shared, CompletionOp::Recv)?;
    } else {
        // both on the one CQ, in no fixed order (see common::wait_all)
        super::wait_all(conn.cq(), &[CompletionOp::Send, CompletionOp::Recv])?;
    }
    let mut b = [0u8; GPSPM_RESPONSE_SIZE];
    rcv.read_at(0, &mut b)?;
    let resp = FlushResponse::decode(&b)?;
    if resp.op_context != req.op_context {
        return Err(format!("response for {:#x}, expected {:#x}", resp.op_context, req.op_context).into());
    }
    println!("client: {:?} written and persisted by the server", super::cstr(&msg));
    super::close_first(conn)
}
