//! E1: bandwidth against the number of members (paper Fig. 4/5), with
//! Linux over one link of the same kind as the denominator.

use std::io::{Read, Write};
use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use indicatif::ProgressBar;
use softoe_engine::testing::BondHostSpec;
use softoe_testbed::{BondedBed, BondedOptions};

use super::link::{
    Pair, bonded_opts, bytes_in, conn_to, host_drops, mbit, paced, queue_drops, shares, start_tcp,
    udp_engines,
};
use super::{E1Row, LinuxRow, Options, POLICIES, T};

// ---- E1 --------------------------------------------------------------------------------

pub(super) fn linux_one_link(o: &Options, pb: &ProgressBar) -> Result<Vec<LinuxRow>> {
    pb.set_message("E1: Linux → Linux over one link");
    let bed = BondedBed::new(BondedOptions {
        linux_hosts: 2,
        ..bonded_opts(Some(o.rate_mbit))
    })?;
    let (rx, tx) = (bed.linux[0].clone(), bed.linux[1].clone());
    let bytes = (o.mbit() * 1e6 / 8.0 * o.tcp_secs() * 0.95) as u64;
    let at = SocketAddrV4::new(rx.ip, 5001);
    let server = rx.ns.spawn(move || -> std::io::Result<(u64, f64)> {
        let l = std::net::TcpListener::bind(at)?;
        let (mut s, _) = l.accept()?;
        let t0 = Instant::now();
        let mut buf = vec![0u8; 256 * 1024];
        let mut n = 0u64;
        loop {
            let k = s.read(&mut buf)?;
            if k == 0 {
                break;
            }
            n += k as u64;
        }
        Ok((n, t0.elapsed().as_secs_f64()))
    })?;
    std::thread::sleep(Duration::from_millis(200));
    tx.ns
        .run(move || -> std::io::Result<()> {
            let mut c = std::net::TcpStream::connect_timeout(&at.into(), T)?;
            let buf = vec![7u8; 256 * 1024];
            let mut left = bytes;
            while left > 0 {
                let n = buf.len().min(left as usize);
                c.write_all(&buf[..n])?;
                left -= n as u64;
            }
            Ok(())
        })?
        .context("Linux sender")?;
    let (n, secs) = server.join()?.context("Linux receiver")?;
    let tcp = LinuxRow {
        proto: "tcp",
        goodput_mbit: mbit(n, secs),
        loss: 0.0,
    };
    // UDP, paced at what one link carries.
    let at = SocketAddrV4::new(rx.ip, 5002);
    let rate = o.udp_link_mbit();
    let secs = o.udp_secs();
    let server = rx.ns.spawn(move || -> std::io::Result<(u64, u64)> {
        let s = std::net::UdpSocket::bind(at)?;
        s.set_read_timeout(Some(Duration::from_millis(300)))?;
        let mut buf = vec![0u8; 2048];
        let (mut n, mut bytes) = (0, 0);
        let t0 = Instant::now();
        loop {
            match s.recv_from(&mut buf) {
                Ok((len, _)) => {
                    n += 1;
                    bytes += len as u64;
                }
                Err(_) if n > 0 || t0.elapsed() > Duration::from_secs(5) => break,
                Err(_) => {}
            }
        }
        Ok((n, bytes))
    })?;
    std::thread::sleep(Duration::from_millis(100));
    let (sent, took) = tx
        .ns
        .run(move || -> std::io::Result<(u64, f64)> {
            let s = std::net::UdpSocket::bind("0.0.0.0:0")?;
            let t0 = Instant::now();
            let k = paced(rate, secs, |b| {
                b.iter().take_while(|d| s.send_to(d, at).is_ok()).count()
            });
            Ok((k, t0.elapsed().as_secs_f64()))
        })?
        .context("Linux UDP sender")?;
    let (got, bytes) = server.join()?.context("Linux UDP receiver")?;
    pb.inc(1);
    Ok(vec![
        tcp,
        LinuxRow {
            proto: "udp",
            goodput_mbit: mbit(bytes, took),
            loss: 1.0 - got as f64 / sent.max(1) as f64,
        },
    ])
}

pub(super) fn e1(o: &Options, linux: &[LinuxRow], pb: &ProgressBar) -> Result<Vec<E1Row>> {
    let one = |proto: &str| {
        linux
            .iter()
            .find(|l| l.proto == proto)
            .map_or(o.mbit(), |l| l.goodput_mbit)
    };
    let mut rows = Vec::new();
    let mut port = 6000;
    for &n in &o.members {
        for (policy, pname) in POLICIES {
            pb.set_message(format!("E1: {n} member(s), {pname}"));
            let pair = Pair::start(
                bonded_opts(Some(o.rate_mbit)),
                [
                    BondHostSpec::new(1, n, policy),
                    BondHostSpec::new(2, n, policy),
                ],
            )?;
            for (dir, (s, r)) in [("1→2", (0, 1)), ("2→1", (1, 0))] {
                let (snd, rcv) = (&pair.hosts[s], &pair.hosts[r]);
                // TCP.
                port += 1;
                let bytes = (n as f64 * o.mbit() * 1e6 / 8.0 * o.tcp_secs() * 0.95) as u64;
                let before = bytes_in(&rcv.bond()?);
                let q0 = queue_drops(&pair);
                let (got, c) = start_tcp(snd, rcv, port, bytes, false)?.finish()?;
                let conn = conn_to(snd, port);
                let counts = conn
                    .as_ref()
                    .map_or((0, 0, 0), |c| (c.retrans, c.spurious_retrans, c.reordering));
                drop(c);
                let after = bytes_in(&rcv.bond()?);
                let g = mbit(got.bytes, got.secs);
                rows.push(E1Row {
                    members: n,
                    policy: pname,
                    proto: "tcp",
                    direction: dir,
                    goodput_mbit: g,
                    efficiency: g / (n as f64 * one("tcp")),
                    shares: shares(&before, &after),
                    retrans: counts.0,
                    spurious_retrans: counts.1,
                    reordering: counts.2,
                    loss: 0.0,
                    queue_drops: queue_drops(&pair).saturating_sub(q0),
                    sent_mbit: 0.0,
                    rx_queue_drops: 0,
                    port_drops: 0,
                });
                pb.inc(1);
                // UDP at the aggregate rate.
                port += 1;
                let before = bytes_in(&rcv.bond()?);
                let q0 = queue_drops(&pair);
                let host0 = host_drops(rcv);
                let (g, loss, sent_mbit) =
                    udp_engines(snd, rcv, port, n as f64 * o.udp_link_mbit(), o.udp_secs())?;
                let after = bytes_in(&rcv.bond()?);
                let host1 = host_drops(rcv);
                rows.push(E1Row {
                    members: n,
                    policy: pname,
                    proto: "udp",
                    direction: dir,
                    goodput_mbit: g,
                    efficiency: g / (n as f64 * one("udp")),
                    shares: shares(&before, &after),
                    retrans: 0,
                    spurious_retrans: 0,
                    reordering: 0,
                    loss,
                    queue_drops: queue_drops(&pair).saturating_sub(q0),
                    sent_mbit,
                    rx_queue_drops: host1.0.saturating_sub(host0.0),
                    port_drops: host1.1.saturating_sub(host0.1),
                });
                pb.inc(1);
            }
        }
    }
    Ok(rows)
}
